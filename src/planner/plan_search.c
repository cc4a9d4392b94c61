/* The planner's search: knapsacks over the transient bound (candidates),
 * each solved by branch and bound (plan_bnb.c) on knapsacks (plan_knap.c);
 * method and guarantee in osdp/planner.h. */
#include "plan_search.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* v[0 .. n) ascending and distinct in place, their number (qsort's order): an LSD radix sort on 16-bit
 * digits of the keys less the smallest, the digits all keys share skipped (a stage's candidates span
 * under 2^48 bytes: three passes at most), then one pass dropping repeats.  The candidates of a
 * 9-operator stage with --split auto and --recompute auto number up to 400 000, and qsort's comparisons
 * were two thirds of a 32-stage pipeline's search.  -1 when out of memory. */
#define RADIX_BITS 16
static long long sort_unique(long long *v, size_t n)
{
    if (n > 1 && n < 1024) {
        qsort(v, n, sizeof *v, cmp_ll);
    } else if (n > 1) {
        unsigned long long *a = (unsigned long long *)v, *tmp = malloc(sizeof *tmp * n);
        size_t *count = malloc(sizeof *count << RADIX_BITS);
        if (!tmp || !count) {
            free(tmp);
            free(count);
            return -1;
        }
        long long lo = v[0];
        for (size_t i = 1; i < n; i++)
            if (v[i] < lo) lo = v[i];
        unsigned long long varies = 0;
        for (size_t i = 0; i < n; i++) {
            a[i] = (unsigned long long)v[i] - (unsigned long long)lo;   /* v[i] - lo >= 0, as unsigned */
            varies |= a[i];
        }
        const unsigned long long digit = (1ULL << RADIX_BITS) - 1;
        unsigned long long *src = a, *dst = tmp;
        for (int shift = 0; shift < 64 && varies >> shift; shift += RADIX_BITS) {
            memset(count, 0, sizeof *count << RADIX_BITS);
            for (size_t i = 0; i < n; i++) count[(src[i] >> shift) & digit]++;
            size_t at = 0;
            for (size_t d = 0; d <= digit; d++) {
                const size_t c = count[d];
                count[d] = at;
                at += c;
            }
            for (size_t i = 0; i < n; i++) dst[count[(src[i] >> shift) & digit]++] = src[i];
            unsigned long long *t = src;
            src = dst;
            dst = t;
        }
        for (size_t i = 0; i < n; i++) v[i] = (long long)(src[i] + (unsigned long long)lo);
        free(tmp);
        free(count);
    }
    size_t w = 0;
    for (size_t j = 0; j < n; j++)
        if (w == 0 || v[j] != v[w - 1]) v[w++] = v[j];
    return (long long)w;
}

/* distinct values of v[i][0 .. n_choices[i]) ascending into out; their number */
static int distinct(const osdp_ps_context *ctx, const long long *v, int i, long long *out)
{
    int m = 0;
    for (int c = 0; c < ctx->n_choices[i]; c++) out[m++] = v[PS_CHOICE(ctx, i, c)];
    qsort(out, (size_t)m, sizeof *out, cmp_ll);
    int w = 0;
    for (int j = 0; j < m; j++)
        if (w == 0 || out[j] != out[w - 1]) out[w++] = out[j];
    return w;
}

/* appends v to *cand (growing it) */
static int push(long long **cand, size_t *n, size_t *cap, long long v)
{
    if (*n == *cap) {
        long long *nv = realloc(*cand, sizeof **cand * *cap * 2);
        if (!nv) return -1;
        *cand = nv;
        *cap *= 2;
    }
    (*cand)[(*n)++] = v;
    return 0;
}

/* {s + a : s in S, a in vals} into *S, ascending and distinct (growing it);
 * -1 when out of memory */
static int sumset(long long **S, size_t *nS, size_t *capS, const long long *vals, int nv)
{
    size_t need = *nS * (size_t)nv;
    if (need > *capS) {
        long long *nS2 = realloc(*S, sizeof **S * need);
        if (!nS2) return -1;
        *S = nS2;
        *capS = need;
    }
    for (int a = nv - 1; a >= 1; a--) /* block a from the original sums, block 0 last */
        for (size_t i = 0; i < *nS; i++) (*S)[(size_t)a * *nS + i] = (*S)[i] + vals[a];
    for (size_t i = 0; i < *nS; i++) (*S)[i] += vals[0];
    const long long w = sort_unique(*S, need);
    if (w < 0) return -1;
    *nS = (size_t)w;
    return 0;
}

#define SUMS_CAP (1 << 16)

/* The values the largest moment (true Z_u or F_u) can take in [dlo, dmax],
 * ascending and distinct: over the moments whose largest value reaches
 * dlo, every left(u-1) + mid(u) + right(u+1) (f + wp + nx, v + fw + fx)
 * less every sum the activations of the operators after u+1 can take.  Should those sums number more than
 * SUMS_CAP for some u, only their smallest and largest are used and
 * *approx is set: the search then is no longer complete. */
static osdp_status candidates(const osdp_ps_context *ctx, long long dlo, long long dmax, long long **out, size_t *ncand,
                              int *approx)
{
    const int n = ctx->n_ops, stride = ctx->stride;
    size_t cap = 1024, nc = 0, nS = 1, capS = 64;
    long long *cand = malloc(sizeof *cand * cap), *lw = malloc(sizeof *lw * 4 * (size_t)stride);
    long long *S = malloc(sizeof *S * capS);
    unsigned char *qual = malloc((size_t)n);
    int overflow = 0;
    *approx = 0;
    if (!cand || !lw || !S || !qual) goto oom;
    long long *lf = lw + stride, *lx = lw + 2 * stride, *la = lw + 3 * stride;
    int ulo = n;
    for (int m = 0; m < 2 * n; m++) {   /* qual[u]: bit 0 Z_u, bit 1 F_u */
        const osdp_ps_moment t = osdp_ps_moment_of(ctx, m);
        const int u = t.op;
        int nw = distinct(ctx, t.mid, u, lw), nf = 1, nxn = 1;
        lf[0] = lx[0] = 0;
        if (u > 0) nf = distinct(ctx, t.left, u - 1, lf);
        if (u + 1 < n) nxn = distinct(ctx, t.right, u + 1, lx);
        const int q = ctx->later_acts_pessimistic[u] + lw[nw - 1] + lf[nf - 1] + lx[nxn - 1] >= dlo;
        if (!t.forward) qual[u] = 0;
        qual[u] |= (unsigned char)(q << t.forward);
        if (q && u < ulo) ulo = u;
    }
    S[0] = 0; /* sums of acts_j over j >= u+2 */
    for (int u = n - 1; u >= ulo; u--) {
        for (int forward = 0; forward < 2; forward++) {
            if (!(qual[u] >> forward & 1)) continue;
            const osdp_ps_moment t = osdp_ps_moment_of(ctx, forward * n + u);
            int nw = distinct(ctx, t.mid, u, lw), nf = 1, nxn = 1;
            lf[0] = lx[0] = 0;
            if (u > 0) nf = distinct(ctx, t.left, u - 1, lf);
            if (u + 1 < n) nxn = distinct(ctx, t.right, u + 1, lx);
            long long two[2] = {-ctx->later_acts_pessimistic[u], -ctx->later_acts_optimistic[u]};
            const long long *sums = overflow ? two : S;
            size_t ns = overflow ? 2 : nS;
            *approx |= overflow;
            for (size_t q = 0; q < ns; q++)
                for (int a = 0; a < nf; a++)
                    for (int b = 0; b < nxn; b++) {
                        long long base = -sums[q] + lf[a] + lx[b];
                        for (int c = 0; c < nw; c++) {
                            long long v = base + lw[c];
                            if (v > dmax) break;
                            if (v >= dlo && push(&cand, &nc, &cap, v)) goto oom;
                        }
                    }
        }
        if (u - 1 >= ulo && u + 1 < n && !overflow) { /* the sums for u - 1 take operator u + 1 in */
            int na = distinct(ctx, ctx->act_bytes, u + 1, la);
            if (na > 1 && nS * (size_t)na > SUMS_CAP) overflow = 1;
            else if (sumset(&S, &nS, &capS, la, na)) goto oom;
        }
    }
    free(lw); free(S); free(qual);
    const long long w = sort_unique(cand, nc);
    if (w < 0) {
        free(cand);
        return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    }
    *out = cand;
    *ncand = (size_t)w;
    return OSDP_OK;
oom:
    free(cand); free(lw); free(S); free(qual);
    return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
}

/* The smallest peak any plan of ctx's micro-batch has (the search of
 * osdp_planner_min_memory, on a context of its own); -1 when that search
 * could not try every transient bound (candidates' approx) and proves
 * nothing.  When it fits the limit, that plan is offered to best (the
 * first plan for the search to beat) in ctx's choices, whose true peak
 * ctx computes again. */
static osdp_status least_peak(const osdp_ps_context *ctx, long long limit, osdp_ps_best *best, long long *peak)
{
    osdp_ps_context mem;
    osdp_status s = osdp_ps_context_build(&mem, ctx->cost.layout, ctx->cost.dev, ctx->opts, ctx->cost.geo.micro_batch,
                                          ctx->cost.geo.accum_steps, 1, ctx->cost.cuts, ctx->counters);
    if (s != OSDP_OK) return s;
    osdp_ps_best least = {.choice = malloc(sizeof(int) * (size_t)mem.n_ops)};
    int *ch = malloc(sizeof(int) * (size_t)ctx->n_ops);
    if (!least.choice || !ch) s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    if (s == OSDP_OK) s = osdp_ps_search(&mem, LLONG_MAX / 8, &least);
    if (s == OSDP_OK) *peak = least.found && !mem.incomplete ? mem.fixed_bytes + (long long)least.objective : -1;
    if (s == OSDP_OK && least.found && *peak >= 0 && *peak <= limit && mem.n_ops == ctx->n_ops) {
        int all = 1;
        for (int u = 0; u < ctx->n_ops && all; u++) {
            const size_t m = PS_CHOICE(&mem, u, least.choice[u]);
            ch[u] = -1;
            for (int c = 0; c < ctx->n_choices[u] && ch[u] < 0; c++) {
                const size_t a = PS_CHOICE(ctx, u, c);
                if (ctx->choice_slices[a] == mem.choice_slices[m] && ctx->choice_zdp_slices[a] == mem.choice_zdp_slices[m]
                    && ctx->choice_recompute[a] == mem.choice_recompute[m]
                    && ctx->choice_hierarchical[a] == mem.choice_hierarchical[m]
                    && ctx->choice_reduce_once[a] == mem.choice_reduce_once[m])
                    ch[u] = c;
            }
            all = ch[u] >= 0;
        }
        if (all && ctx->fixed_bytes + osdp_ps_held_sum(ctx, ch) + osdp_ps_true_transient(ctx, ch) <= limit)
            osdp_ps_offer(ctx, best, ch, osdp_ps_objective_sum(ctx, ch));
    }
    free(least.choice);
    free(ch);
    osdp_ps_context_free(&mem);
    return s;
}

/* First plans for the time search to beat, near where the optimum lies:
 * from transient bounds spread over the candidates, the unrestricted
 * knapsack at the budget of d and, while its plan does not fit (its true
 * transient z > d), again at the budget of z.  The plans that fit are
 * offered: the best plan so far bounds the branch and bound, and the nearer
 * the optimum it is, the fewer nodes that takes (GPT-2 small's stage of 17
 * operators with --recompute auto: over 20 times fewer). */
static osdp_status first_plans(osdp_ps_context *ctx, long long limit, const long long *cand, size_t ncand,
                               osdp_ps_best *best, int *ch)
{
    const long long room = limit - ctx->fixed_bytes;
    for (int s = 0; s < 8 && ncand > 0; s++) {
        long long d = cand[(ncand - 1) * (size_t)s / 7];
        for (int it = 0; it < 8 && room - d >= 0; it++) {
            double obj;
            const osdp_status ks = osdp_ps_knapsack(ctx, NULL, room - d, osdp_ps_cap(ctx, best), ch, &obj);
            if (ks == OSDP_ERR_INFEASIBLE) break;
            if (ks != OSDP_OK) return ks;
            const long long z = osdp_ps_true_transient(ctx, ch);
            if (osdp_ps_held_sum(ctx, ch) + z <= room) {
                osdp_ps_offer(ctx, best, ch, obj);
                break;
            }
            d = z;
        }
    }
    return OSDP_OK;
}

/* Fills allow with the choices whose moment (Z or F) exceeds d whatever
 * their neighbours take (as the centre, the left or the right neighbour of
 * a constraint) left out, then propagates; 0 when no plan respects d.
 * mins: osdp_ps_term_minima's, followed by PS_PROPAGATE_SCRATCH n of scratch. */
static int allowed_at(const osdp_ps_context *ctx, unsigned char *allow, long long d, long long *mins)
{
    const int n = ctx->n_ops;
    const long long *K = ctx->later_acts_bound;
    for (int u = 0; u < n; u++) {
        int any = 0;
        for (int c = 0; c < ctx->n_choices[u]; c++) {
            size_t a = PS_CHOICE(ctx, u, c);
            int ok = 1;
            for (int k = 0; k < 2 && ok; k++) {
                const osdp_ps_moment t = osdp_ps_moment_of(ctx, k * n);
                const long long *minw = PS_MIN_MID(ctx, mins, k), *minf = PS_MIN_LEFT(ctx, mins, k);
                const long long *minx = PS_MIN_RIGHT(ctx, mins, k);
                ok = K[u] + t.mid[a] + (u > 0 ? minf[u - 1] : 0) + (u + 1 < n ? minx[u + 1] : 0) <= d;
                if (ok && u + 1 < n)
                    ok = K[u + 1] + minw[u + 1] + t.left[a] + (u + 2 < n ? minx[u + 2] : 0) <= d;
                if (ok && u > 0)
                    ok = K[u - 1] + minw[u - 1] + (u > 1 ? minf[u - 2] : 0) + t.right[a] <= d;
            }
            allow[a] = (unsigned char)ok;
            any |= ok;
        }
        if (!any) return 0;
    }
    return osdp_ps_propagate(ctx, allow, d, mins + 6 * n);
}

/* The best plan with peak <= limit (or, minimising memory, the smallest peak). */
osdp_status osdp_ps_search(osdp_ps_context *ctx, long long limit, osdp_ps_best *best)
{
    const int n = ctx->n_ops;
    size_t nk = (size_t)n * (size_t)ctx->stride, ncand = 0;
    best->found = 0;
    long long *cand = NULL;
    int *fch = NULL;
    unsigned char *allow = calloc(nk, 1); /* past n_choices[u]: 0, so that allow sets compare and hash alike */
    int *ch = calloc((size_t)n + 1, sizeof *ch);
    long long *mins = malloc(sizeof *mins * (6 + PS_PROPAGATE_SCRATCH) * (size_t)n); /* minima, then scratch */
    osdp_status s = OSDP_OK;
    if (!allow || !ch || !mins) {
        s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
        goto done;
    }
    osdp_ps_term_minima(ctx, mins);
    long long dlo = LLONG_MIN, min_r = 0;
    for (int m = 0; m < osdp_ps_n_moments(ctx); m++) {
        long long lo = osdp_ps_min_transient_at(ctx, m, mins);
        if (lo > dlo) dlo = lo;
    }
    for (int u = 0; u < n; u++) {
        int bc = 0;
        long long lo = LLONG_MAX;
        for (int c = 0; c < ctx->n_choices[u]; c++) {
            size_t a = PS_CHOICE(ctx, u, c), z = PS_CHOICE(ctx, u, bc);
            if (ctx->held_bytes[a] < lo) lo = ctx->held_bytes[a];
            if (c > 0 && (ctx->objective[a] < ctx->objective[z]
                          || (ctx->objective[a] == ctx->objective[z] && ctx->held_bytes[a] < ctx->held_bytes[z])))
                bc = c;
        }
        min_r += lo;
        ch[u] = bc;
    }
    if (!ctx->minimise_memory) { /* the fastest plan fits (its true peak): nothing to search */
        if (ctx->fixed_bytes + osdp_ps_held_sum(ctx, ch) + osdp_ps_true_transient(ctx, ch) <= limit) {
            osdp_ps_offer(ctx, best, ch, osdp_ps_objective_sum(ctx, ch));
            goto done;
        }
    }
    if (limit - ctx->fixed_bytes - min_r < dlo) goto done; /* nothing fits */
    if (!ctx->minimise_memory) {
        /* Unless the plan of each operator's fewest held bytes fits (then
         * something does), the smallest peak first: above the limit it
         * proves that nothing fits in one search of a single objective,
         * where the search below would try every transient bound in vain
         * (a no-fit a byte short of the smallest peak: 10x faster) */
        for (int u = 0; u < n; u++) {
            int lc = 0;
            for (int c = 1; c < ctx->n_choices[u]; c++)
                if (ctx->held_bytes[PS_CHOICE(ctx, u, c)] < ctx->held_bytes[PS_CHOICE(ctx, u, lc)]) lc = c;
            ch[u] = lc;
        }
        if (ctx->fixed_bytes + osdp_ps_held_sum(ctx, ch) + osdp_ps_true_transient(ctx, ch) > limit) {
            /* the peak's floor above the limit proves it without a search (the 3D search's splits that
             * cannot fit: GPT-2 small on 8 ranks at 700 MiB, 80 s of CPU in those searches before) */
            if (osdp_ps_peak_floor(ctx) > limit) goto done;
            long long least = -1;
            if ((s = least_peak(ctx, limit, best, &least)) != OSDP_OK) goto done;
            if (least > limit) goto done; /* nothing fits */
        } else {   /* it fits: the first plan to beat, so that the search below bounds from the start */
            osdp_ps_offer(ctx, best, ch, osdp_ps_objective_sum(ctx, ch));
        }
    }
    /* Every plan's transient is at least dlo: when the relaxation at dlo's budget, the largest any plan
     * has, cannot beat the best so far (or the cutoff), no plan can, and the candidates need not be made
     * (the 3D search's stages bounded by their cutoff: most of its searches, 640 of 880 at 529.6B with
     * --split auto, each sorting up to 700 000 candidates to stop at the first) */
    if (!ctx->minimise_memory && !osdp_ps_beats(ctx, best, osdp_ps_lp_bound(ctx, NULL, limit - ctx->fixed_bytes - dlo)))
        goto done;
    int approx = 0;
    s = candidates(ctx, dlo, limit - ctx->fixed_bytes - min_r, &cand, &ncand, &approx);
    if (s != OSDP_OK) goto done;
    if (approx && !ctx->minimise_memory) ctx->counters->gap = 1;
    /* (not for dfs: its knapsacks at tight budgets are the exponential ones, and time out) */
    if (!ctx->minimise_memory && ctx->opts->search == OSDP_SEARCH_EXACT
        && (s = first_plans(ctx, limit, cand, ncand, best, ch)) != OSDP_OK)
        goto done;
    if (approx) ctx->incomplete = 1;
    int have_free = 0; /* fch: the unrestricted knapsack's plan */
    long long free_r = 0, free_z = 0;
    double free_obj = 0;
    if (!(fch = malloc(sizeof *fch * (size_t)n))) {
        s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
        goto done;
    }
    if (ctx->minimise_memory) {
        /* the plan of each operator's fewest held bytes, at its true transient: a peak to beat from the
         * first d on (the smallest peaks lie at large d, where the ascending loop would reach them last) */
        if ((s = osdp_ps_knapsack(ctx, NULL, limit - ctx->fixed_bytes - dlo, INFINITY, fch, &free_obj)) != OSDP_OK)
            goto done;
        osdp_ps_offer(ctx, best, fch, free_obj + (double)osdp_ps_true_transient(ctx, fch));
    }
    long long stop_lim = LLONG_MIN; /* budgets below it cannot beat the best plan */
    double stop_for = -1;
    /* Ranges of bounds: the plans whose true Z lies in [d_j, d_k] (those
     * of Z < d_j were searched before) are among the plans of Z <= d_k and
     * held bytes <= the budget at d_j; the memory search adds d_j to their
     * held bytes for a lower bound of their peaks.  When that relaxation has
     * no plan that beats the best, or only plans that settle their nodes
     * (osdp_ps_bnb_prove), one branch and bound settles candidates j..k.
     * The range doubles while proofs succeed and shrinks when one fails
     * (j is then searched alone). */
    size_t span = 1;
    for (size_t j = 0; j < ncand; j++) {
        long long d = cand[j];
        long long lim = limit - ctx->fixed_bytes - d;
        if (lim < min_r) break; /* no plan fits this d, nor any larger one */
        const double lam = ctx->minimise_memory ? (double)d : 0.0;
        /* bounds for this d and every larger one (their budgets are smaller) */
        if (lim < stop_lim) break;
        if (!osdp_ps_beats(ctx, best, osdp_ps_lp_bound(ctx, NULL, lim) + lam)) break;
        if (best->found && !ctx->minimise_memory) {
            if (stop_for != best->objective) { /* the best plan changed: recompute the byte threshold */
                s = osdp_ps_fewest_bytes_faster(ctx, best->objective, ch, &stop_lim);
                if (s != OSDP_OK) goto done;
                stop_for = best->objective;
                if (lim < stop_lim) break;
            }
        } else {
            /* the unrestricted knapsack: if it respects d it is optimal for
             * every d' >= d.  The previous d's plan, when it still fits the
             * (smaller) budget, is still its optimum. */
            if (!have_free || free_r > lim) {
                osdp_status ks = osdp_ps_knapsack(ctx, NULL, lim, osdp_ps_cap(ctx, best) - lam, fch, &free_obj);
                if (ks == OSDP_ERR_INFEASIBLE) break;
                if (ks != OSDP_OK) { s = ks; goto done; }
                have_free = 1;
                free_r = osdp_ps_held_sum(ctx, fch);
                free_z = osdp_ps_true_transient(ctx, fch);
            }
            if (!osdp_ps_beats(ctx, best, free_obj + lam)) break;
            if (free_z <= d) {
                osdp_ps_offer(ctx, best, fch, free_obj + lam);
                break;
            }
        }
        if (j + 1 < ncand) {   /* a range of bounds at once where it can be proved (above) */
            const size_t k = j + span < ncand ? j + span : ncand - 1;
            int proved = 0;
            if (!allowed_at(ctx, allow, cand[k], mins)
                || !osdp_ps_beats(ctx, best, osdp_ps_lp_bound(ctx, allow, lim) + lam))
                proved = 1;
            else if ((s = osdp_ps_bnb_prove(ctx, allow, d, cand[k], lim, limit - ctx->fixed_bytes, best, ch, &proved))
                     != OSDP_OK)
                goto done;
            if (proved) {
                j = k;
                span *= 2;
                continue;
            }
            span = span >= 4 ? span / 4 : 1;
        }
        if (!allowed_at(ctx, allow, d, mins)) continue;
        long long need = 0; /* the allowed choices' smallest bytes */
        for (int u = 0; u < n; u++) {
            long long lo = LLONG_MAX;
            for (int c = 0; c < ctx->n_choices[u]; c++)
                if (allow[PS_CHOICE(ctx, u, c)] && ctx->held_bytes[PS_CHOICE(ctx, u, c)] < lo)
                    lo = ctx->held_bytes[PS_CHOICE(ctx, u, c)];
            need += lo;
        }
        if (need > lim) continue;
        if (!osdp_ps_beats(ctx, best, osdp_ps_lp_bound(ctx, allow, lim) + lam)) continue;
        s = osdp_ps_bnb(ctx, allow, d, lim, best, ch);
        if (s != OSDP_OK) goto done;
    }
done:
    free(cand); free(allow); free(ch); free(mins); free(fch);
    return s;
}

/* The planner's branch and bound over the constraints Z_u <= d and
 * F_u <= d (the backward and forward moments, plan_context.h) for one
 * transient bound d (method and guarantee in osdp/planner.h): the knapsack
 * of each node, the check of its plan against the true Z, the branches,
 * and constraint propagation. */
#include "plan_bnb.h"
#include "plan_pair.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the allowed-choice sets the branch and bound has let go, kept for its next nodes (one search's) */
#define SPARE_SETS 64
#define PAIR_STATES ((size_t)1 << 20)   /* plan_pair.c's states, all operators together: 32 MiB at most */
#define PAIR_GIVE_UPS 2                  /* a context's pair bounds given up (too many states) before none is tried */
typedef struct spare_sets { unsigned char *set[SPARE_SETS]; int n; } spare_sets;

/* a copy of A (n_ops x stride flags), NULL when out of memory */
static unsigned char *dup_allow(const osdp_ps_context *ctx, const unsigned char *A, spare_sets *spare)
{
    size_t nk = (size_t)ctx->n_ops * (size_t)ctx->stride;
    unsigned char *B = spare->n > 0 ? spare->set[--spare->n] : malloc(nk);
    if (B) memcpy(B, A, nk);
    return B;
}

/* A let go: kept for a later node, or freed */
static void let_go(unsigned char *A, spare_sets *spare)
{
    if (spare->n < SPARE_SETS) spare->set[spare->n++] = A;
    else free(A);
}

/* 1 when operator i keeps some allowed choice in A */
static int any_left(const osdp_ps_context *ctx, const unsigned char *A, int i)
{
    for (int c = 0; c < ctx->n_choices[i]; c++)
        if (A[PS_CHOICE(ctx, i, c)]) return 1;
    return 0;
}

/* Constraint propagation for one node (allowed choices A) at transient
 * bound d: each moment (Z_u and F_u, plan_context.h) is at least LB, the
 * sum of each of its terms' smallest allowed value (left at u-1, mid at u,
 * right at u+1, -acts at j >= u+2); a choice whose term exceeds its
 * smallest by more than d - LB is in no plan of the node that respects the
 * moment, and goes.  Repeated until nothing changes.  Returns 0 when the
 * node is empty.  mn: scratch of PS_PROPAGATE_SCRATCH n. */
int osdp_ps_propagate(const osdp_ps_context *ctx, unsigned char *A, long long d, long long *mn)
{
    const int n = ctx->n_ops;
    long long *ah = mn + 6 * n, *rng = mn + 7 * n, *sa = mn + 8 * n, *rs = mn + 9 * n;
    osdp_ps_moment mo[2] = {osdp_ps_moment_of(ctx, 0), osdp_ps_moment_of(ctx, n)};
    for (int pass = 0, changed = 1; changed && pass < 16; pass++) {
        changed = 0;
        for (int u = 0; u < n; u++) {
            long long al = LLONG_MAX;
            for (int k = 0; k < 2; k++) PS_MIN_LEFT(ctx, mn, k)[u] = PS_MIN_MID(ctx, mn, k)[u] = PS_MIN_RIGHT(ctx, mn, k)[u] = LLONG_MAX;
            ah[u] = LLONG_MIN;
            for (int c = 0; c < ctx->n_choices[u]; c++) {
                size_t a = PS_CHOICE(ctx, u, c);
                if (!A[a]) continue;
                for (int k = 0; k < 2; k++) {
                    long long *mf = PS_MIN_LEFT(ctx, mn, k), *mw = PS_MIN_MID(ctx, mn, k), *mx = PS_MIN_RIGHT(ctx, mn, k);
                    if (mo[k].left[a] < mf[u]) mf[u] = mo[k].left[a];
                    if (mo[k].mid[a] < mw[u]) mw[u] = mo[k].mid[a];
                    if (mo[k].right[a] < mx[u]) mx[u] = mo[k].right[a];
                }
                if (ctx->act_bytes[a] > ah[u]) ah[u] = ctx->act_bytes[a];
                if (ctx->act_bytes[a] < al) al = ctx->act_bytes[a];
            }
            if (ah[u] == LLONG_MIN) return 0;
            rng[u] = ah[u] - al;
        }
        /* over j >= u+2: the sum of the largest acts_j, the largest range */
        long long run = 0, rmax = 0;
        for (int u = n - 1; u >= 0; u--) {
            sa[u] = run;
            rs[u] = rmax;
            if (u + 1 < n) {
                run += ah[u + 1];
                if (rng[u + 1] > rmax) rmax = rng[u + 1];
            }
        }
        long long least = LLONG_MAX;   /* the smallest slack of the moments of u <= j - 2 (the acts terms below) */
        for (int u = 0; u < n; u++) {
            long long both = LLONG_MAX;   /* the smaller slack of Z_u and F_u */
            for (int k = 0; k < 2; k++) {
                const long long *mf = PS_MIN_LEFT(ctx, mn, k), *mw = PS_MIN_MID(ctx, mn, k), *mx = PS_MIN_RIGHT(ctx, mn, k);
                const long long slack = d - (-sa[u] + mw[u] + (u > 0 ? mf[u - 1] : 0) + (u + 1 < n ? mx[u + 1] : 0));
                if (slack < 0) return 0;
                if (slack < both) both = slack;
                for (int c = 0; c < ctx->n_choices[u]; c++) {
                    size_t a = PS_CHOICE(ctx, u, c);
                    if (A[a] && mo[k].mid[a] - mw[u] > slack) A[a] = 0, changed = 1;
                }
                for (int c = 0; u > 0 && c < ctx->n_choices[u - 1]; c++) {
                    size_t a = PS_CHOICE(ctx, u - 1, c);
                    if (A[a] && mo[k].left[a] - mf[u - 1] > slack) A[a] = 0, changed = 1;
                }
                for (int c = 0; u + 1 < n && c < ctx->n_choices[u + 1]; c++) {
                    size_t a = PS_CHOICE(ctx, u + 1, c);
                    if (A[a] && mo[k].right[a] - mx[u + 1] > slack) A[a] = 0, changed = 1;
                }
            }
            /* operator j's acts term is in both moments of every u <= j - 2: a choice whose term exceeds its
             * smallest by more than the least of their slacks goes (the slacks and terms are this pass's, as
             * above) */
            const int j = u + 2;
            if (j < n) {
                if (both < least) least = both;
                if (rng[j] > least)
                    for (int c = 0; c < ctx->n_choices[j]; c++) {
                        size_t a = PS_CHOICE(ctx, j, c);
                        if (A[a] && ah[j] - ctx->act_bytes[a] > least) A[a] = 0, changed = 1;
                    }
            }
        }
    }
    return 1;
}

/* the value choice c of operator i adds to a moment: its left term (f, v), right term (nx, fx) or -acts */
enum { T_LEFT, T_RIGHT, T_ACTS };
static long long term_val(const osdp_ps_context *ctx, const osdp_ps_moment *t, int kind, int i, int c)
{
    size_t a = PS_CHOICE(ctx, i, c);
    return kind == T_LEFT ? t->left[a] : kind == T_RIGHT ? t->right[a] : -ctx->act_bytes[a];
}

/* 1 when a lower bound v proves that nothing beats the best plan (or,
 * before one, the context's cutoff), by a margin far above the knapsack's
 * and the LP's rounding: a bound that loses nothing */
static int beyond(const osdp_ps_context *ctx, const osdp_ps_best *best, double v)
{
    return best->found ? v >= best->objective * (1 + 1e-12) : v > ctx->cutoff * (1 + 1e-12);
}

/* 1 when no plan of node A that fits the limit (room: the limit less the
 * fixed bytes) beats the best plan, by the knapsack of a moment alone
 * (osdp_ps_moment_knapsack) at every moment that exceeds d in the node's
 * plan ch (u, the one the scan found, first): there, the node's knapsack over R took
 * the later operators' activations as memory to save, while at that
 * moment they are freed, and which of them to keep is what the branches
 * below would otherwise enumerate.  The time search only (the memory
 * search's objective is the peak itself), and a bound that loses nothing:
 * only a node no plan of which is strictly faster than the best goes, by
 * a margin far above the knapsack's rounding.  Then, by the node's two
 * constraints at once, sum R <= lim and moment u <= d (osdp_ps_pair_bound:
 * every plan of the node respects both); when that does not close the node
 * either, *have_pair says its optimum, a plan of the node that respects u
 * and could beat the best, is in mch.  mch: scratch of n_ops, z of 2 n_ops. */
static int moment_bound(osdp_ps_context *ctx, const unsigned char *A, const int *ch, int u, long long d,
                        long long lim, long long room, const osdp_ps_best *best, int *mch, long long *z, osdp_status *s,
                        int *have_pair)
{
    *have_pair = 0;
    if (ctx->minimise_memory || ctx->wrap_first_pass || (!best->found && isinf(ctx->cutoff))) return 0;
    const int nm = osdp_ps_n_moments(ctx);
    osdp_ps_moment_values(ctx, ch, z);
    for (int q = 0; q < nm; q++) {   /* the LP bounds first: cheaper */
        const int v = (u + nm - q) % nm;   /* u first, then the others down */
        if (q > 0 && z[v] <= d) continue;
        if (beyond(ctx, best, osdp_ps_moment_lp_bound(ctx, A, v, room))) {
            ctx->counters->bound_cuts++;
            return 1;
        }
    }
    for (int q = 0; q < nm; q++) {
        const int v = (u + nm - q) % nm;
        if (q > 0 && z[v] <= d) continue;
        double obj;
        const osdp_status ms = osdp_ps_moment_knapsack(ctx, A, v, room, osdp_ps_cap(ctx, best) * (1 + 1e-12), mch, &obj);
        if (ms == OSDP_ERR_INFEASIBLE || (ms == OSDP_OK && beyond(ctx, best, obj))) {
            ctx->counters->bound_cuts++;
            return 1;
        }
        if (ms != OSDP_OK) {
            *s = ms;
            return 1;
        }
    }
    /* the node's knapsack over R and moment u's constraint at once: its optimum respects u, and, when it
     * respects every other moment too, is the node's (the relaxation's optimum is then the node's) */
    /* (not tried again in a context where it gave up twice, its states too many: 145.6B's one stage of 162
     * operators with --split auto spent 70% of its search in 34 such attempts) */
    if (ctx->pair_gave_up >= PAIR_GIVE_UPS) return 0;
    const double cap = best->found ? best->objective * (1 + 1e-12) : nextafter(ctx->cutoff * (1 + 1e-12), INFINITY);
    const double pb = osdp_ps_pair_bound(ctx, A, u, lim, d, cap, PAIR_STATES, mch);
    if (pb == -INFINITY) ctx->pair_gave_up++;
    if (beyond(ctx, best, pb)) {
        ctx->counters->bound_cuts++;
        return 1;
    }
    *have_pair = isfinite(pb);
    return 0;
}

/* fix_by_bounds's test of one bound: the choice goes when it proves nothing beats the best */
typedef struct fix_arg { osdp_ps_context *ctx; const osdp_ps_best *best; } fix_arg;
static int fix_drops(void *arg, double bound)
{
    fix_arg *f = arg;
    const int gone = beyond(f->ctx, f->best, bound);
    f->ctx->counters->bound_cuts += gone;
    return gone;
}

/* Drops from A (a search's first node) the choices in no plan of A that
 * beats the best: with the choice forced, the LP bound of the knapsack
 * over R (budget lim) at or above the best (the margin of moment_bound),
 * operator by operator (osdp_ps_lp_prune_forced: each choice one binary
 * search in the other operators' LP, not an LP of its own; with --split
 * auto's hundreds of choices per operator the whole LPs were 98% of a
 * 162-operator stage's search).  Fewer choices, fewer terms to branch on.
 * The time search only; 0 when an operator is left without a choice, -1
 * out of memory. */
static int fix_by_bounds(osdp_ps_context *ctx, unsigned char *A, long long lim, const osdp_ps_best *best)
{
    if (ctx->minimise_memory || ctx->wrap_first_pass || (!best->found && isinf(ctx->cutoff))) return 1;
    fix_arg f = {.ctx = ctx, .best = best};
    return osdp_ps_lp_prune_forced(ctx, A, lim, fix_drops, &f);
}

/* Branch and bound over the constraints Z_u <= d and F_u <= d (true Z, F)
 * for one transient bound d.  Each is a sum of terms, one per operator: f
 * (F_u: v) of u-1, nx (fx) of u+1, -acts of every j >= u+2, and wp (fw) of
 * u.  A knapsack plan P that violates one, with term values v_1..v_m at the other operators, is
 * excluded by the branches
 *     t = 1..m:  v_s >= v_s(P) for s < t, and v_t < v_t(P)
 *     last:      v_s >= v_s(P) for every s, and wp_u <= d - sum_s v_s(P)
 * (a term whose P value is already its smallest in the node has no branch
 * of its own); together they keep every plan of the node that respects
 * Z_u.  The knapsack optimum of a node bounds its branches from below. */
static osdp_status bnb(osdp_ps_context *ctx, unsigned char *base, long long d, long long d_lo, int prove,
                       long long lim, long long room_total, osdp_ps_best *best, int *ch, int *proved);

osdp_status osdp_ps_bnb(osdp_ps_context *ctx, unsigned char *base, long long d, long long lim, osdp_ps_best *best,
                        int *ch)
{
    return bnb(ctx, base, d, d, 0, lim, lim + d, best, ch, NULL);
}

osdp_status osdp_ps_bnb_prove(osdp_ps_context *ctx, unsigned char *base, long long d_lo, long long d_hi, long long lim,
                              long long room_total, osdp_ps_best *best, int *ch, int *proved)
{
    return bnb(ctx, base, d_hi, d_lo, 1, lim, room_total, best, ch, proved);
}

/* The two above.  Searching one bound (prove 0), d_lo = d.  Proving a
 * range (prove 1): every plan of the nodes has Z <= d and held bytes <= lim
 * (the range's loosest budget), a relaxation of the plans whose true Z lies
 * in [d_lo, d]; the memory search adds d_lo to held bytes for a lower bound
 * of their peaks.  A node's knapsack plan that could beat the best and
 * respects every Z_u <= d settles its node when it is what the relaxation
 * says it is: for the memory search, its true Z <= d_lo (its peak is then
 * at most its held bytes + d_lo, and the node's other plans in the range
 * at least that); for the time search, it fits (held bytes + true Z <=
 * room_total, the limit less the fixed bytes).  Otherwise the proof gives
 * up (*proved 0; a memory plan is still offered at its true peak). */
/* a node's plan that respects every moment (its objective obj, lam the memory search's d): offered to
 * best; proving a range (prove), 1 when it settles it (its held bytes and true transient within
 * room_total; the memory search: its transient at most d_lo), 0 when the proof fails */
static int settle(const osdp_ps_context *ctx, osdp_ps_best *best, const int *ch, double obj, double lam, int prove,
                  long long d_lo, long long room_total)
{
    if (!prove) {
        osdp_ps_offer(ctx, best, ch, obj + lam);
        return 1;
    }
    const long long z = osdp_ps_true_transient(ctx, ch);
    if (ctx->minimise_memory) {
        osdp_ps_offer(ctx, best, ch, obj + (double)z);
        return z <= d_lo;
    }
    const int settled = osdp_ps_held_sum(ctx, ch) + z <= room_total;
    if (settled) osdp_ps_offer(ctx, best, ch, obj);
    return settled;
}

static osdp_status bnb(osdp_ps_context *ctx, unsigned char *base, long long d, long long d_lo, int prove,
                       long long lim, long long room_total, osdp_ps_best *best, int *ch, int *proved)
{
    const int n = ctx->n_ops;
    int cap = 16, sp = 0;
    unsigned char **stack = malloc(sizeof *stack * (size_t)cap);
    int *ti = malloc(sizeof *ti * 2 * (size_t)(n + 1)), *tk = ti + n + 1;
    long long *tv = malloc(sizeof *tv * (size_t)(n + 1)), *mn = malloc(sizeof *mn * PS_PROPAGATE_SCRATCH * (size_t)n);
    int *mch = malloc(sizeof *mch * (size_t)n);
    long long *zs = malloc(sizeof *zs * 2 * (size_t)n);
    if (!stack || !ti || !tv || !mn || !mch || !zs) {
        free(stack); free(ti); free(tv); free(mn); free(mch); free(zs);
        return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    }
    spare_sets spare = {.n = 0};
    osdp_status s = OSDP_OK;
    if (!ctx->minimise_memory && (best->found || !isinf(ctx->cutoff))) {   /* the first node, less what its bound excludes */
        unsigned char *F = dup_allow(ctx, base, &spare);
        const int fixed = F ? fix_by_bounds(ctx, F, lim, best) : -1;
        if (fixed < 0) s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
        else if (fixed && osdp_ps_propagate(ctx, F, d, mn)) stack[sp++] = F, F = NULL;
        free(F);
    } else {
        stack[sp++] = base;
    }
    const double lam = ctx->minimise_memory ? (double)d_lo : 0.0;
    if (proved) *proved = 1;
    while (sp > 0 && s == OSDP_OK) {
        unsigned char *A = stack[--sp];
        double obj;
        osdp_status ks;
        if (!osdp_ps_beats(ctx, best, osdp_ps_lp_bound(ctx, A, lim) + lam)) ks = OSDP_ERR_INFEASIBLE; /* bounded out */
        else ks = osdp_ps_knapsack(ctx, A, lim, osdp_ps_cap(ctx, best) - lam, ch, &obj);
        int u = -1;
        if (ks == OSDP_OK && osdp_ps_beats(ctx, best, obj + lam)) {
            u = osdp_ps_transient_scan(ctx, ch, d, NULL);
            if (u < 0 && !settle(ctx, best, ch, obj, lam, prove, d_lo, room_total)) {
                *proved = 0;
                if (A != base) let_go(A, &spare);
                break;
            }
        } else if (ks != OSDP_OK && ks != OSDP_ERR_INFEASIBLE) {
            s = ks;
        }
        int have_pair = 0;
        if (u >= 0 && moment_bound(ctx, A, ch, u, d, lim, room_total, best, mch, zs, &s, &have_pair)) u = -1;
        if (u >= 0 && have_pair) {   /* the pair's plan in place of the knapsack's: it respects moment u */
            memcpy(ch, mch, sizeof *ch * (size_t)n);
            u = osdp_ps_transient_scan(ctx, ch, d, NULL);
            /* it respects every moment: the node's optimum (the time search's: lam 0) */
            if (u < 0 && !settle(ctx, best, ch, osdp_ps_objective_sum(ctx, ch), lam, prove, d_lo, room_total)) {
                *proved = 0;
                if (A != base) let_go(A, &spare);
                break;
            }
        }
        if (u < 0) {
            if (A != base) let_go(A, &spare);
            continue;
        }
        /* Z_0 has no f term (no operator before the first); it exceeds d through the wrap moment's pairing
         * (osdp_ps_transient_scan) when its own sum does not: then its terms are the last operator's f
         * besides nx and the acts, and operator 0's first-pass peak in place of its wp */
        const osdp_ps_moment mt = osdp_ps_moment_of(ctx, u);   /* u: the moment; at: its operator */
        const int at = mt.op;
        int wrap = 0;
        if (u == 0 && ctx->wrap_first_pass) {
            long long z = ctx->pass_peak_bytes[PS_CHOICE(ctx, 0, ch[0])];
            for (int j = 1; j < n; j++) z += term_val(ctx, &mt, j == 1 ? T_RIGHT : T_ACTS, j, ch[j]);
            wrap = z <= d;
        }
        /* the terms of the moment; those with a branch of their own first */
        long long room = d;
        int nt = 0;
        for (int j = at > 0 ? at - 1 : 0; j <= n; j++) {
            if (j == at || (j == n && !wrap)) continue;
            const int op = j < n ? j : n - 1;   /* j == n: the wrap's f of the last operator */
            int kind = j == n || j == at - 1 ? T_LEFT : j == at + 1 ? T_RIGHT : T_ACTS;
            long long v = term_val(ctx, &mt, kind, op, ch[op]);
            room -= v;
            int lower = 0;
            for (int c = 0; c < ctx->n_choices[op] && !lower; c++)
                lower = A[PS_CHOICE(ctx, op, c)] && term_val(ctx, &mt, kind, op, c) < v;
            if (lower) {
                ti[nt] = op;
                tk[nt] = kind;
                tv[nt++] = v;
            }
        }
        if (sp + nt + 1 > cap) {
            unsigned char **ns = realloc(stack, sizeof *stack * (size_t)(2 * cap + nt + 1));
            if (!ns) {
                if (A != base) let_go(A, &spare);
                s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
                break;
            }
            stack = ns;
            cap = 2 * cap + nt + 1;
        }
        /* pushed last branch first, so that branch 1 is searched first */
        for (int t = nt; t >= 0 && s == OSDP_OK; t--) {
            unsigned char *B = dup_allow(ctx, A, &spare);
            if (!B) {
                s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
                break;
            }
            int ok = 1;
            for (int q = 0; q <= t && q < nt && ok; q++) {
                const int j = ti[q];
                for (int c = 0; c < ctx->n_choices[j]; c++)
                    if ((term_val(ctx, &mt, tk[q], j, c) < tv[q]) != (q == t)) B[PS_CHOICE(ctx, j, c)] = 0;
                ok = any_left(ctx, B, j);
            }
            if (t == nt && ok) {
                for (int c = 0; c < ctx->n_choices[at]; c++)
                    if ((wrap ? ctx->wrap_first_pass[c] : mt.mid[PS_CHOICE(ctx, at, c)]) > room)
                        B[PS_CHOICE(ctx, at, c)] = 0;
                ok = any_left(ctx, B, at);
            }
            if (ok) ok = osdp_ps_propagate(ctx, B, d, mn);
            if (ok) stack[sp++] = B;
            else let_go(B, &spare);
        }
        if (A != base) let_go(A, &spare);
    }
    while (sp > 0) {
        unsigned char *A = stack[--sp];
        if (A != base) free(A);
    }
    while (spare.n > 0) free(spare.set[--spare.n]);
    free(stack); free(ti); free(tv); free(mn); free(mch); free(zs);
    return s;
}

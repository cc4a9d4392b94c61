/* The planner's knapsacks (osdp/search.h) over the allowed choices of a
 * node, reused across transient bounds through plan_knap_cache.c, and the
 * LP and byte-threshold lower bounds (method in osdp/planner.h). */
#include "plan_knap.h"
#include "util/clock.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 1 when every plan of the knapsack's items (knap_mem) fits the budget lim */
static int unbound_budget(const osdp_ps_context *ctx, long long lim)
{
    long long most = 0;
    for (int j = 0; j < ctx->n_ops; j++) {
        long long m = 0;
        for (int q = 0; q < ctx->knap_n_choices[j]; q++)
            if (ctx->knap_mem[j][q] > m) m = ctx->knap_mem[j][q];
        if (m > lim - most) return 0;
        most += m;
    }
    return 1;
}

/* The knapsack whose budget binds no plan: each item on its own, its
 * fastest choice, the fewer bytes then the lower index on ties; the plan
 * osdp/search.h's tie rule picks, and osdp_search_exact would return.  The
 * memory search's knapsacks are of this kind (its budget is the whole
 * address space), and solving them item by item saves the exact search's
 * fronts, most of that search's time. */
static osdp_status knap_free(osdp_ps_context *ctx, int *out, double *obj)
{
    double total = 0;
    for (int j = 0; j < ctx->n_ops; j++) {
        const double *t = ctx->knap_time[j];
        const long long *m = ctx->knap_mem[j];
        int bq = 0;
        for (int q = 1; q < ctx->knap_n_choices[j]; q++)
            if (t[q] < t[bq] || (t[q] == t[bq] && m[q] < m[bq])) bq = q;
        ctx->knap_solution[j] = bq;
        total += t[bq];
        out[ctx->knap_order[j]] = ctx->knap_choice[PS_CHOICE(ctx, j, bq)];
    }
    ctx->counters->searches++;
    *obj = total;
    return OSDP_OK;
}

/* The knapsack over the allowed choices (NULL: all) through the selected
 * search; *obj = its total time.  With swap_shift >= 0 the roles are
 * swapped: the constraint is on the times, as integers
 * llround(ldexp(t, swap_shift)) summing to at most lim, and the resident
 * bytes are minimised.  OSDP_ERR_INFEASIBLE when nothing fits (or an
 * operator has no allowed choice). */
static osdp_status knap_any(osdp_ps_context *ctx, const unsigned char *allow, long long lim, int swap_shift, int moment,
                            double cap, int *out, double *obj)
{
    for (int j = 0; j < ctx->n_ops; j++) {
        int i = ctx->knap_order[j], k = 0;
        long long least = LLONG_MAX;
        for (int c = 0; c < ctx->n_choices[i]; c++) {
            if (allow && !allow[PS_CHOICE(ctx, i, c)]) continue;
            size_t a = PS_CHOICE(ctx, i, c), b = PS_CHOICE(ctx, j, k);
            if (swap_shift >= 0) {
                ctx->knap_mem_buf[b] = llround(ldexp(ctx->objective[a], swap_shift));
                ctx->knap_time_buf[b] = (double)ctx->held_bytes[a];
            } else {
                ctx->knap_mem_buf[b] = moment >= 0 ? osdp_ps_moment_bytes(ctx, moment, i, c) : ctx->held_bytes[a];
                ctx->knap_time_buf[b] = ctx->objective[a];
            }
            if (ctx->knap_mem_buf[b] < least) least = ctx->knap_mem_buf[b];
            ctx->knap_choice[b] = c;
            k++;
        }
        if (k == 0) return OSDP_ERR_INFEASIBLE;
        if (moment >= 0) { /* a moment's bytes may be negative (freed activations): each item from its least */
            for (int q = 0; q < k; q++) ctx->knap_mem_buf[PS_CHOICE(ctx, j, q)] -= least;
            lim -= least;
        }
        ctx->knap_n_choices[j] = k;
        ctx->knap_mem[j] = ctx->knap_mem_buf + PS_CHOICE(ctx, j, 0);
        ctx->knap_time[j] = ctx->knap_time_buf + PS_CHOICE(ctx, j, 0);
    }
    if (moment >= 0 && lim < 0) return OSDP_ERR_INFEASIBLE;
    if (swap_shift < 0 && ctx->minimise_memory && unbound_budget(ctx, lim)) return knap_free(ctx, out, obj);
    osdp_search_problem p = {.n_items = ctx->n_ops, .n_choices = ctx->knap_n_choices, .mem = ctx->knap_mem,
                             .time = ctx->knap_time, .mem_limit = lim,
                             .workspace = ctx->search_workspace, .time_cap = cap};
    osdp_search_result r = {.choice = ctx->knap_solution};
    double t0 = osdp_now_seconds();
    osdp_status s;
    if (ctx->opts->search == OSDP_SEARCH_DFS && !ctx->minimise_memory && moment < 0) {   /* a bound must be exact */
        if (ctx->deadline > 0) {
            p.time_limit_s = ctx->deadline - t0;
            if (p.time_limit_s < 1e-6) p.time_limit_s = 1e-6;
        }
        s = osdp_search_dfs(&p, &r);
    } else {
        s = osdp_search_exact(&p, &r);
    }
    ctx->counters->search_s += osdp_now_seconds() - t0;
    ctx->counters->searches++;
    ctx->counters->nodes += r.nodes;
    if (s != OSDP_OK) return s;
    if (r.timed_out) ctx->counters->timed_out = 1;
    for (int j = 0; j < ctx->n_ops; j++)
        out[ctx->knap_order[j]] = ctx->knap_choice[PS_CHOICE(ctx, j, ctx->knap_solution[j])];
    *obj = r.total_time;
    return OSDP_OK;
}

/* cap: plans slower than it are not wanted (INFINITY: any) */
osdp_status osdp_ps_knapsack(osdp_ps_context *ctx, const unsigned char *allow, long long lim, double cap, int *out,
                             double *obj)
{
    if (!allow) return knap_any(ctx, allow, lim, -1, -1, cap, out, obj);
    const osdp_ps_knap_key key = osdp_ps_knap_cache_key(allow, (size_t)ctx->n_ops * (size_t)ctx->stride, ctx->n_ops);
    osdp_status s;
    if (osdp_ps_knap_cache_find(&ctx->knap_cache, &key, lim, cap, out, obj, &s)) {
        ctx->counters->cache_hits++;
        return s;
    }
    const int timed_out = ctx->counters->timed_out;
    s = knap_any(ctx, allow, lim, -1, -1, cap, out, obj);
    /* a dfs that ran out of time did not prove its answer: not kept */
    if ((s == OSDP_OK || s == OSDP_ERR_INFEASIBLE) && ctx->counters->timed_out == timed_out)
        osdp_ps_knap_cache_store(ctx->knap_cache, &key, lim, cap, s, out, s == OSDP_OK ? *obj : 0,
                                 s == OSDP_OK ? osdp_ps_held_sum(ctx, out) : 0);
    return s;
}

/* The knapsack of moment u alone (plan_knap.h): a relaxation of every
 * plan that fits room, so a lower bound on their objective. */
osdp_status osdp_ps_moment_knapsack(osdp_ps_context *ctx, const unsigned char *allow, int u, long long room, double cap,
                                    int *out, double *obj)
{
    return knap_any(ctx, allow, room, -1, u, cap, out, obj);
}

/* The fewest resident bytes of any plan faster than `best` (transients
 * ignored): a budget lim below it cannot beat `best`.  Times are compared on
 * a grid of 2^-shift s (the slowest plan below 2^58 units); the budget
 * floor(best) + n units absorbs the rounding of n terms, so the result
 * never exceeds the true minimum.  LLONG_MAX when no plan is faster. */
osdp_status osdp_ps_fewest_bytes_faster(osdp_ps_context *ctx, double best, int *ch, long long *out)
{
    double tmax = 0;
    for (int u = 0; u < ctx->n_ops; u++) {
        double m = 0;
        for (int c = 0; c < ctx->n_choices[u]; c++)
            if (ctx->objective[PS_CHOICE(ctx, u, c)] > m) m = ctx->objective[PS_CHOICE(ctx, u, c)];
        tmax += m;
    }
    int e = 0;
    if (tmax > 0) (void)frexp(tmax, &e);
    int shift = 58 - e;
    long long budget = (long long)floor(ldexp(best, shift)) + ctx->n_ops;
    double obj;
    osdp_status s = knap_any(ctx, NULL, budget, shift, -1, INFINITY, ch, &obj);
    if (s == OSDP_ERR_INFEASIBLE) {
        *out = LLONG_MAX;
        return OSDP_OK;
    }
    if (s == OSDP_OK) *out = llround(obj);
    return s;
}


/* The LP relaxation of the knapsack over the allowed choices (NULL: all)
 * with budget `lim` on the resident bytes: each operator's lower convex
 * hull of (resident, time), hull edges filled greedily by time saved per
 * byte.  A lower bound on the knapsack's optimum (+inf when nothing fits),
 * loosened by a relative 1e-9 so that rounding never prunes the optimum. */
typedef struct seg_t { double eff, dt; long long dm, mult; } seg_t; /* mult: identical edges */
static int cmp_seg(const void *a, const void *b)
{
    const seg_t *p = a, *q = b;
    return p->eff > q->eff ? -1 : p->eff < q->eff;
}

/* the bytes the LP counts for choice c of operator i: R, or moment u's (u >= 0: Z or F, plan_context.h) */
static long long lp_bytes(const osdp_ps_context *ctx, int u, int i, int c)
{
    return u < 0 ? ctx->held_bytes[PS_CHOICE(ctx, i, c)] : osdp_ps_moment_bytes(ctx, u, i, c);
}

static double lp_bound(const osdp_ps_context *ctx, const unsigned char *allow, long long lim, int moment);

double osdp_ps_lp_bound(const osdp_ps_context *ctx, const unsigned char *allow, long long lim)
{
    return lp_bound(ctx, allow, lim, -1);
}

double osdp_ps_moment_lp_bound(const osdp_ps_context *ctx, const unsigned char *allow, int u, long long room)
{
    return lp_bound(ctx, allow, room, u);
}

/* a choice's key for the hull: its bytes, then its time, then its index (the order of a stable sort) */
typedef struct hull_key { long long bytes; double time; int c; } hull_key;
static int cmp_hull_key(const void *x, const void *y)
{
    const hull_key *a = x, *b = y;
    if (a->bytes != b->bytes) return a->bytes < b->bytes ? -1 : 1;
    if (a->time != b->time) return a->time < b->time ? -1 : 1;
    return (a->c > b->c) - (a->c < b->c);
}

/* Operator u's lower convex hull of (bytes, time) over its allowed choices (allow: its row, NULL: all):
 * its choices in order of bytes into h, the number returned (0: none allowed).  key: scratch of stride. */
static int hull_of(const osdp_ps_context *ctx, const unsigned char *allow, int moment, int u, hull_key *key, int *h)
{
    int no = 0;
    for (int c = 0; c < ctx->n_choices[u]; c++) {   /* the allowed choices by (R, t) */
        if (allow && !allow[c]) continue;
        key[no++] = (hull_key){.bytes = lp_bytes(ctx, moment, u, c), .time = ctx->objective[PS_CHOICE(ctx, u, c)], .c = c};
    }
    qsort(key, (size_t)no, sizeof *key, cmp_hull_key);
    int nh = 0;
    long long hb[2] = {0, 0};   /* the bytes of h[nh - 2], h[nh - 1] */
    for (int j = 0; j < no; j++) {
        const double *t = ctx->objective;
        size_t cc = PS_CHOICE(ctx, u, key[j].c);
        if (nh > 0 && t[cc] >= t[PS_CHOICE(ctx, u, h[nh - 1])]) continue; /* dominated */
        while (nh >= 2) {
            size_t a = PS_CHOICE(ctx, u, h[nh - 2]), b = PS_CHOICE(ctx, u, h[nh - 1]);
            const long long ra = hb[0], rb = hb[1], rc = key[j].bytes;
            double lhs = (t[a] - t[b]) * (double)(rc - ra);
            double rhs = (t[a] - t[cc]) * (double)(rb - ra);
            if (lhs > rhs) break; /* b strictly below the chord a-c */
            nh--;
            hb[1] = hb[0];
            if (nh >= 2) hb[0] = lp_bytes(ctx, moment, u, h[nh - 2]);
        }
        h[nh++] = key[j].c;
        hb[0] = hb[1];
        hb[1] = key[j].bytes;
    }
    return nh;
}

/* the edges of hull h (nh choices of operator u) into seg, their number */
static int hull_edges(const osdp_ps_context *ctx, int moment, int u, const int *h, int nh, seg_t *seg)
{
    for (int j = 0; j + 1 < nh; j++) {
        size_t a = PS_CHOICE(ctx, u, h[j]), b = PS_CHOICE(ctx, u, h[j + 1]);
        seg[j].dm = lp_bytes(ctx, moment, u, h[j + 1]) - lp_bytes(ctx, moment, u, h[j]);
        seg[j].dt = ctx->objective[a] - ctx->objective[b];
        seg[j].eff = seg[j].dt / (double)seg[j].dm;
        seg[j].mult = 1;
    }
    return nh > 0 ? nh - 1 : 0;
}

static double lp_bound(const osdp_ps_context *ctx, const unsigned char *allow, long long lim, int moment)
{
    const int n = ctx->n_ops, stride = ctx->stride;
    /* one block (called at every node of the search): the segments, then the per-operator and per-choice rows */
    const size_t nseg = (size_t)n * (size_t)stride + 1;
    seg_t *seg = malloc(sizeof *seg * nseg + (sizeof(long long) + sizeof(double)) * (size_t)n
                        + sizeof(int) * (2 * (size_t)stride + 6 * (size_t)n));
    if (!seg) return 0; /* no bound */
    long long *base_bytes = (long long *)(seg + nseg);
    double *base_time = (double *)(base_bytes + n);
    int *h = (int *)(base_time + n), *last = h + 2 * stride, *s0 = last + 4 * n, *s1 = s0 + n;
    hull_key *scratch = malloc(sizeof *scratch * (size_t)stride);
    if (!scratch) {
        free(seg);
        return 0;
    }
    for (int g = 0; g < 4 * n; g++) last[g] = -1;
    const int at = moment >= 0 ? osdp_ps_moment_of(ctx, moment).op : -1;   /* the moment's operator */
    double t = 0;
    int ns = 0;
    int empty = 0;   /* some operator has no allowed choice */
    for (int u = 0; u < n && (lim >= 0 || moment >= 0) && !empty; u++) {   /* a moment's bytes may be negative */
        /* an operator of its group with the same allowed choices: the same hull (a moment's: on the same
         * side of it, not one of its three operators) */
        const int side = moment < 0 || u < at - 1 ? 0 : u > at + 1 ? 1 : -1;
        const int key = ctx->group[u] + 2 * n * side, p = side >= 0 ? last[key] : -1;
        if (p >= 0
            && (!allow || memcmp(allow + PS_CHOICE(ctx, u, 0), allow + PS_CHOICE(ctx, p, 0),
                                 (size_t)ctx->n_choices[u]) == 0)) {
            lim -= base_bytes[p];
            t += base_time[p];
            for (int j = s0[p]; j < s1[p]; j++) seg[j].mult++;
            continue;
        }
        const int nh = hull_of(ctx, allow ? allow + PS_CHOICE(ctx, u, 0) : NULL, moment, u, scratch, h);
        if (nh == 0) {
            empty = 1;
            break;
        }
        base_bytes[u] = lp_bytes(ctx, moment, u, h[0]);
        base_time[u] = ctx->objective[PS_CHOICE(ctx, u, h[0])];
        lim -= base_bytes[u];
        t += base_time[u];
        s0[u] = ns;
        ns += hull_edges(ctx, moment, u, h, nh, seg + ns);
        s1[u] = ns;
        if (side >= 0) last[key] = u;
    }
    if (empty || lim < 0) t = INFINITY;
    else {
        qsort(seg, (size_t)ns, sizeof *seg, cmp_seg);
        for (int j = 0; j < ns; j++) {
            if (seg[j].dm * seg[j].mult <= lim) {
                lim -= seg[j].dm * seg[j].mult;
                t -= seg[j].dt * (double)seg[j].mult;
            } else {
                t -= seg[j].dt * ((double)lim / (double)seg[j].dm);
                break;
            }
        }
    }
    free(seg);
    free(scratch);
    return t * (1 - 1e-9);
}

/* osdp_ps_lp_prune_forced (plan_knap.h).  Forcing choice c on operator i
 * leaves the other operators' LP as it was: a concave piecewise-linear
 * function of the budget, their hulls' edges taken by decreasing time saved
 * per byte.  So, per operator i, those edges are sorted once with prefix
 * sums of bytes and times, and each choice c is one binary search at the
 * budget lim - (the others' base bytes) - R_c, plus t_c: the value
 * osdp_ps_lp_bound(A with row i = {c}, lim) computes (up to the order of
 * its additions: the bound's 1e-9 loosening covers it), in O(log) instead of
 * a whole LP.  Operators of one group with the same allowed row share one
 * hull; an operator's hull is rebuilt once its row has changed. */
/* operator u's hull from its row of A: base point (bytes, time) and edges hseg[u stride ..] (an earlier
 * operator of its group with the same row: its copy); 0 when the row allows nothing */
static int forced_hull(const osdp_ps_context *ctx, const unsigned char *A, int u, hull_key *key, int *h, seg_t *hseg,
                       long long *base_bytes, double *base_time, int *nseg)
{
    const unsigned char *row = A + PS_CHOICE(ctx, u, 0);
    for (int q = u - 1; q >= 0; q--)
        if (ctx->group[q] == ctx->group[u] && memcmp(A + PS_CHOICE(ctx, q, 0), row, (size_t)ctx->n_choices[u]) == 0) {
            base_bytes[u] = base_bytes[q];
            base_time[u] = base_time[q];
            nseg[u] = nseg[q];
            memcpy(hseg + PS_CHOICE(ctx, u, 0), hseg + PS_CHOICE(ctx, q, 0), sizeof *hseg * (size_t)nseg[q]);
            return 1;
        }
    const int nh = hull_of(ctx, row, -1, u, key, h);
    if (nh == 0) return 0;
    base_bytes[u] = ctx->held_bytes[PS_CHOICE(ctx, u, h[0])];
    base_time[u] = ctx->objective[PS_CHOICE(ctx, u, h[0])];
    nseg[u] = hull_edges(ctx, -1, u, h, nh, hseg + PS_CHOICE(ctx, u, 0));
    return 1;
}

int osdp_ps_lp_prune_forced(const osdp_ps_context *ctx, unsigned char *A, long long lim,
                            int (*drop)(void *arg, double bound), void *arg)
{
    const int n = ctx->n_ops, stride = ctx->stride;
    const size_t nk = (size_t)n * (size_t)stride;
    seg_t *hseg = malloc(sizeof *hseg * (nk + 1)), *seg = malloc(sizeof *seg * (nk + 1));
    long long *base_bytes = malloc(sizeof *base_bytes * (size_t)n), *cum_dm = malloc(sizeof *cum_dm * (nk + 1));
    double *base_time = malloc(sizeof *base_time * (size_t)n), *cum_dt = malloc(sizeof *cum_dt * (nk + 1));
    int *nseg = malloc(sizeof *nseg * (size_t)n), *h = malloc(sizeof *h * (size_t)stride);
    hull_key *key = malloc(sizeof *key * (size_t)stride);
    int ret = -1;
    if (!hseg || !seg || !base_bytes || !cum_dm || !base_time || !cum_dt || !nseg || !h || !key) goto out;
    for (int u = 0; u < n; u++)
        if (!forced_hull(ctx, A, u, key, h, hseg, base_bytes, base_time, nseg)) {
            ret = 0;
            goto out;
        }
    for (int i = 0; i < n; i++) {
        /* the other operators' edges by decreasing time per byte, their prefix sums */
        long long others_bytes = 0;
        double others_time = 0;
        int ns = 0;
        for (int u = 0; u < n; u++) {
            if (u == i) continue;
            others_bytes += base_bytes[u];
            others_time += base_time[u];
            memcpy(seg + ns, hseg + PS_CHOICE(ctx, u, 0), sizeof *seg * (size_t)nseg[u]);
            ns += nseg[u];
        }
        qsort(seg, (size_t)ns, sizeof *seg, cmp_seg);
        cum_dm[0] = 0;
        cum_dt[0] = 0;
        for (int j = 0; j < ns; j++) {
            cum_dm[j + 1] = cum_dm[j] + seg[j].dm;
            cum_dt[j + 1] = cum_dt[j] + seg[j].dt;
        }
        unsigned char *row = A + PS_CHOICE(ctx, i, 0);
        int left = 0, changed = 0;
        for (int c = 0; c < ctx->n_choices[i]; c++) {
            if (!row[c]) continue;
            const size_t a = PS_CHOICE(ctx, i, c);
            const long long room = lim - others_bytes - ctx->held_bytes[a];
            double t = INFINITY;
            if (room >= 0) {   /* the edges that fit whole: the first k (cum_dm ascends) */
                int lo = 0, hi = ns;
                while (lo < hi) {
                    const int mid = lo + (hi - lo + 1) / 2;
                    if (cum_dm[mid] <= room) lo = mid;
                    else hi = mid - 1;
                }
                t = others_time + ctx->objective[a] - cum_dt[lo];
                if (lo < ns) t -= seg[lo].dt * ((double)(room - cum_dm[lo]) / (double)seg[lo].dm);
                t *= 1 - 1e-9;
            }
            if (drop(arg, t)) row[c] = 0, changed = 1;
            else left = 1;
        }
        if (!left) {
            ret = 0;
            goto out;
        }
        if (changed) forced_hull(ctx, A, i, key, h, hseg, base_bytes, base_time, nseg);
    }
    ret = 1;
out:
    free(hseg); free(seg); free(base_bytes); free(cum_dm); free(base_time); free(cum_dt); free(nseg); free(h); free(key);
    return ret;
}

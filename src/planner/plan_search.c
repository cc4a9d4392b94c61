/* The planner's search: knapsacks over the transient bound, branch and
 * bound over neighbour pairs, LP and byte-threshold bounds (method and
 * guarantee in osdp/planner.h). */
#include "plan_search.h"
#include "osdp/search.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static osdp_status order_items(pctx *x);

void osdp_ps_ctx_free(pctx *x)
{
    free(x->R); free(x->wp); free(x->f); free(x->t); free(x->K);
    free(x->perm); free(x->nch); free(x->map); free(x->sol); free(x->pm); free(x->pt); free(x->mb); free(x->tb);
    osdp_search_workspace_free(x->ws);
    x->ws = NULL;
}

osdp_status osdp_ps_ctx_build(pctx *x, const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o,
                             int b, int accum, int minmem, osdp_planner_result *acc)
{
    memset(x, 0, sizeof *x);
    x->cm = (osdp_cost_model){.layout = L, .dev = dev, .N = o->n_ranks, .prefetch = o->prefetch, .kind = o->cost,
                              .recompute = o->recompute};
    x->o = o;
    x->n = L->n_ops;
    x->g = o->split;
    x->minmem = minmem;
    x->acc = acc;
    if (o->modes == OSDP_MODES_ANY) {
        x->kc = x->g + 1;
        for (int c = 0; c < x->kc; c++) x->kval[c] = c;
    } else {
        x->kc = 1;
        x->kval[0] = o->modes == OSDP_MODES_ALL_DP ? 0 : x->g;
    }
    size_t nk = (size_t)x->n * (size_t)x->kc;
    x->R = malloc(nk * sizeof *x->R);
    x->wp = malloc(nk * sizeof *x->wp);
    x->f = malloc(nk * sizeof *x->f);
    x->t = malloc(nk * sizeof *x->t);
    x->K = malloc((size_t)x->n * sizeof *x->K);
    x->nch = malloc((size_t)x->n * sizeof *x->nch);
    x->perm = malloc((size_t)x->n * sizeof *x->perm);
    x->map = malloc(nk * sizeof *x->map);
    x->sol = malloc((size_t)x->n * sizeof *x->sol);
    x->pm = malloc((size_t)x->n * sizeof *x->pm);
    x->pt = malloc((size_t)x->n * sizeof *x->pt);
    x->mb = malloc(nk * sizeof *x->mb);
    x->tb = malloc(nk * sizeof *x->tb);
    x->ws = osdp_search_workspace_new();
    if (!x->ws || !x->R || !x->wp || !x->f || !x->t || !x->K || !x->nch || !x->perm || !x->map || !x->sol || !x->pm || !x->pt || !x->mb
        || !x->tb) {
        osdp_ps_ctx_free(x);
        return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    }
    x->cst = osdp_cost_workspace(&x->cm, b);
    long long acts = 0;
    osdp_op_mem m0, m1;
    for (int i = 0; i < x->n; i++) {
        for (int c = 0; c < x->kc; c++) {
            osdp_op_mem m;
            osdp_op_time ot;
            osdp_cost_op_mem(&x->cm, i, x->g, x->kval[c], b, &m);
            osdp_cost_op_time(&x->cm, i, x->g, x->kval[c], b, accum, &ot);
            size_t at = (size_t)i * (size_t)x->kc + (size_t)c;
            x->R[at] = m.resident;
            x->wp[at] = m.work > m.recv ? m.work : m.recv;
            x->f[at] = o->prefetch ? m.prefetch : 0;
            x->t[at] = minmem ? (double)m.resident : ot.total;
        }
        osdp_cost_op_mem(&x->cm, i, x->g, 0, b, &m0); /* state, acts, grads, recv: mode-independent */
        x->cst += m0.state;
        acts += m0.acts;
        x->K[i] = acts + m0.rebuilt + m0.grads;   /* rebuilt: recomputed activations during its backward */
        if (o->prefetch && i + 1 < x->n) {
            osdp_cost_op_mem(&x->cm, i + 1, x->g, 0, b, &m1);
            x->K[i] += m1.grads + m1.recv;
        }
    }
    osdp_status s = order_items(x);
    if (s != OSDP_OK) osdp_ps_ctx_free(x);
    return s;
}


/* max_u (K_u + Y_u) of a choice vector */
static long long transient(const pctx *x, const int *ch)
{
    long long best = LLONG_MIN;
    for (int u = 0; u < x->n; u++) {
        long long v = x->K[u] + x->wp[AT(x, u, ch[u])] + (u > 0 ? x->f[AT(x, u - 1, ch[u - 1])] : 0);
        if (v > best) best = v;
    }
    return best;
}

/* first u whose (u-1, u) pair exceeds d, -1 if none */
static int violated(const pctx *x, const int *ch, long long d)
{
    for (int u = 0; u < x->n; u++)
        if (x->K[u] + x->wp[AT(x, u, ch[u])] + (u > 0 ? x->f[AT(x, u - 1, ch[u - 1])] : 0) > d) return u;
    return -1;
}

/* The knapsack over the allowed choices; *obj = sum of t.  OSDP_ERR_INFEASIBLE
 * when nothing fits (or an operator has no allowed choice). */
/* The knapsack over the allowed choices (NULL: all) through the selected
 * search; *obj = its total time.  With swap_shift >= 0 the roles are
 * swapped: the constraint is on the times, as integers
 * llround(ldexp(t, swap_shift)) summing to at most lim, and the resident
 * bytes are minimised.  OSDP_ERR_INFEASIBLE when nothing fits (or an
 * operator has no allowed choice). */
static osdp_status knap_any(pctx *x, const unsigned char *allow, long long lim, int swap_shift, int *out,
                            double *obj)
{
    for (int j = 0; j < x->n; j++) {
        int i = x->perm[j], k = 0;
        for (int c = 0; c < x->kc; c++) {
            if (allow && !allow[AT(x, i, c)]) continue;
            size_t a = AT(x, i, c), b = AT(x, j, k);
            if (swap_shift >= 0) {
                x->mb[b] = llround(ldexp(x->t[a], swap_shift));
                x->tb[b] = (double)x->R[a];
            } else {
                x->mb[b] = x->R[a];
                x->tb[b] = x->t[a];
            }
            x->map[b] = c;
            k++;
        }
        if (k == 0) return OSDP_ERR_INFEASIBLE;
        x->nch[j] = k;
        x->pm[j] = x->mb + AT(x, j, 0);
        x->pt[j] = x->tb + AT(x, j, 0);
    }
    osdp_search_problem p = {.n_items = x->n, .n_choices = x->nch, .mem = x->pm, .time = x->pt, .mem_limit = lim,
                             .workspace = x->ws};
    osdp_search_result r = {.choice = x->sol};
    double t0 = now_s();
    osdp_status s;
    if (x->o->search == OSDP_SEARCH_DFS && !x->minmem) {
        if (x->deadline > 0) {
            p.time_limit_s = x->deadline - t0;
            if (p.time_limit_s < 1e-6) p.time_limit_s = 1e-6;
        }
        s = osdp_search_dfs(&p, &r);
    } else {
        s = osdp_search_exact(&p, &r);
    }
    x->acc->search_s += now_s() - t0;
    x->acc->searches++;
    x->acc->nodes += r.nodes;
    if (s != OSDP_OK) return s;
    if (r.timed_out) x->acc->timed_out = 1;
    for (int j = 0; j < x->n; j++) out[x->perm[j]] = x->map[AT(x, j, x->sol[j])];
    *obj = r.total_time;
    return OSDP_OK;
}

static osdp_status knap(pctx *x, const unsigned char *allow, long long lim, int *out, double *obj)
{
    return knap_any(x, allow, lim, -1, out, obj);
}

/* The fewest resident bytes of any plan faster than `best` (transients
 * ignored): a budget lim below it cannot beat `best`.  Times are compared on
 * a grid of 2^-shift s (the slowest plan below 2^58 units); the budget
 * floor(best) + n units absorbs the rounding of n terms, so the result
 * never exceeds the true minimum.  LLONG_MAX when no plan is faster. */
static osdp_status fewest_bytes_faster(pctx *x, double best, int *ch, long long *out)
{
    double tmax = 0;
    for (int u = 0; u < x->n; u++) {
        double m = 0;
        for (int c = 0; c < x->kc; c++)
            if (x->t[AT(x, u, c)] > m) m = x->t[AT(x, u, c)];
        tmax += m;
    }
    int e = 0;
    if (tmax > 0) (void)frexp(tmax, &e);
    int shift = 58 - e;
    long long budget = (long long)floor(ldexp(best, shift)) + x->n;
    double obj;
    osdp_status s = knap_any(x, NULL, budget, shift, ch, &obj);
    if (s == OSDP_ERR_INFEASIBLE) {
        *out = LLONG_MAX;
        return OSDP_OK;
    }
    if (s == OSDP_OK) *out = llround(obj);
    return s;
}

typedef struct okey { long long swing; int op; } okey;
static int cmp_okey(const void *a, const void *b)
{
    const okey *p = a, *q = b;
    if (p->swing != q->swing) return p->swing > q->swing ? -1 : 1;
    return p->op < q->op ? -1 : p->op > q->op;
}

/* Knapsack item order: operators by decreasing memory swing (the resident
 * bytes a ZDP choice saves), model order among equals. */
static osdp_status order_items(pctx *x)
{
    okey *k = malloc(sizeof *k * (size_t)x->n);
    if (!k) return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    for (int i = 0; i < x->n; i++) {
        long long lo = LLONG_MAX, hi = LLONG_MIN;
        for (int c = 0; c < x->kc; c++) {
            long long r = x->R[AT(x, i, c)];
            if (r < lo) lo = r;
            if (r > hi) hi = r;
        }
        k[i].swing = hi - lo;
        k[i].op = i;
    }
    qsort(k, (size_t)x->n, sizeof *k, cmp_okey);
    for (int j = 0; j < x->n; j++) x->perm[j] = k[j].op;
    free(k);
    return OSDP_OK;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* The LP relaxation of the knapsack over the allowed choices (NULL: all)
 * with budget `lim` on the resident bytes: each operator's lower convex
 * hull of (resident, time), hull edges filled greedily by time saved per
 * byte.  A lower bound on the knapsack's optimum (+inf when nothing fits),
 * loosened by a relative 1e-9 so that rounding never prunes the optimum. */
typedef struct seg_t { double eff, dt; long long dm; } seg_t;
static int cmp_seg(const void *a, const void *b)
{
    const seg_t *p = a, *q = b;
    return p->eff > q->eff ? -1 : p->eff < q->eff;
}

double osdp_ps_lp_bound(const pctx *x, const unsigned char *allow, long long lim)
{
    const int n = x->n, kc = x->kc;
    seg_t *seg = malloc(sizeof *seg * ((size_t)n * (size_t)kc + 1));
    int *h = malloc(sizeof *h * (size_t)kc), *ord = malloc(sizeof *ord * (size_t)kc);
    if (!seg || !h || !ord) {
        free(seg); free(h); free(ord);
        return 0; /* no bound */
    }
    double t = 0;
    int ns = 0;
    for (int u = 0; u < n && lim >= 0; u++) {
        int no = 0;
        for (int c = 0; c < kc; c++) { /* insertion sort of the allowed choices by (R, t) */
            if (allow && !allow[AT(x, u, c)]) continue;
            int j = no++;
            while (j > 0) {
                size_t a = AT(x, u, ord[j - 1]), b = AT(x, u, c);
                if (x->R[a] < x->R[b] || (x->R[a] == x->R[b] && x->t[a] <= x->t[b])) break;
                ord[j] = ord[j - 1];
                j--;
            }
            ord[j] = c;
        }
        if (no == 0) {
            lim = -1;
            break;
        }
        int nh = 0;
        for (int j = 0; j < no; j++) {
            size_t cc = AT(x, u, ord[j]);
            if (nh > 0 && x->t[cc] >= x->t[AT(x, u, h[nh - 1])]) continue; /* dominated */
            while (nh >= 2) {
                size_t a = AT(x, u, h[nh - 2]), b = AT(x, u, h[nh - 1]);
                double lhs = (x->t[a] - x->t[b]) * (double)(x->R[cc] - x->R[a]);
                double rhs = (x->t[a] - x->t[cc]) * (double)(x->R[b] - x->R[a]);
                if (lhs > rhs) break; /* b strictly below the chord a-c */
                nh--;
            }
            h[nh++] = ord[j];
        }
        lim -= x->R[AT(x, u, h[0])];
        t += x->t[AT(x, u, h[0])];
        for (int j = 0; j + 1 < nh; j++) {
            size_t a = AT(x, u, h[j]), b = AT(x, u, h[j + 1]);
            seg[ns].dm = x->R[b] - x->R[a];
            seg[ns].dt = x->t[a] - x->t[b];
            seg[ns].eff = seg[ns].dt / (double)seg[ns].dm;
            ns++;
        }
    }
    if (lim < 0) t = INFINITY;
    else {
        qsort(seg, (size_t)ns, sizeof *seg, cmp_seg);
        for (int j = 0; j < ns; j++) {
            if (seg[j].dm <= lim) {
                lim -= seg[j].dm;
                t -= seg[j].dt;
            } else {
                t -= seg[j].dt * ((double)lim / (double)seg[j].dm);
                break;
            }
        }
    }
    free(seg); free(h); free(ord);
    return t * (1 - 1e-9);
}

/* the smallest transient any plan has */
long long osdp_ps_min_transient(const pctx *x)
{
    long long dlo = LLONG_MIN;
    for (int u = 0; u < x->n; u++) {
        long long mw = LLONG_MAX, mf = LLONG_MAX;
        for (int c = 0; c < x->kc; c++) {
            if (x->wp[AT(x, u, c)] < mw) mw = x->wp[AT(x, u, c)];
            if (u > 0 && x->f[AT(x, u - 1, c)] < mf) mf = x->f[AT(x, u - 1, c)];
        }
        long long lo = x->K[u] + mw + (u > 0 ? mf : 0);
        if (lo > dlo) dlo = lo;
    }
    return dlo;
}

static void offer(const pctx *x, best_t *bt, const int *ch, double obj)
{
    if (bt->found && !(obj < bt->obj)) return;
    bt->found = 1;
    bt->obj = obj;
    memcpy(bt->ch, ch, sizeof *ch * (size_t)x->n);
}

/* Branch and bound over the pair constraints for one transient bound d. */
static osdp_status bnb(pctx *x, unsigned char *base, long long d, long long lim, best_t *bt, int *ch)
{
    size_t nk = (size_t)x->n * (size_t)x->kc;
    int cap = 16, sp = 0;
    unsigned char **stack = malloc(sizeof *stack * (size_t)cap);
    if (!stack) return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    stack[sp++] = base;
    osdp_status s = OSDP_OK;
    const double lam = x->minmem ? (double)d : 0.0;
    while (sp > 0) {
        unsigned char *A = stack[--sp];
        double obj;
        osdp_status ks;
        if (bt->found && !(osdp_ps_lp_bound(x, A, lim) + lam < bt->obj)) ks = OSDP_ERR_INFEASIBLE; /* bounded out */
        else ks = knap(x, A, lim, ch, &obj);
        if (ks == OSDP_ERR_INFEASIBLE || (ks == OSDP_OK && bt->found && !(obj + lam < bt->obj))) {
            if (A != base) free(A);
            continue;
        }
        if (ks != OSDP_OK) {
            if (A != base) free(A);
            s = ks;
            break;
        }
        int u = violated(x, ch, d);
        if (u < 0) {
            offer(x, bt, ch, obj + lam);
            if (A != base) free(A);
            continue;
        }
        if (u == 0) { /* cannot happen: single choices over d were removed from `base` */
            if (A != base) free(A);
            continue;
        }
        long long fb = x->f[AT(x, u - 1, ch[u - 1])], room = d - x->K[u] - fb;
        if (sp + 2 > cap) {
            unsigned char **ns = realloc(stack, sizeof *stack * (size_t)(cap * 2));
            if (!ns) {
                if (A != base) free(A);
                s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
                break;
            }
            stack = ns;
            cap *= 2;
        }
        unsigned char *A2 = malloc(nk);
        if (!A2) {
            if (A != base) free(A);
            s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
            break;
        }
        memcpy(A2, A, nk);
        /* A becomes branch 1 (in place; `base` stays the caller's) */
        for (int c = 0; c < x->kc; c++) {
            if (x->f[AT(x, u - 1, c)] >= fb) A[AT(x, u - 1, c)] = 0;
            else A2[AT(x, u - 1, c)] = 0;
            if (x->wp[AT(x, u, c)] > room) A2[AT(x, u, c)] = 0;
        }
        stack[sp++] = A2;
        stack[sp++] = A;
    }
    while (sp > 0) {
        unsigned char *A = stack[--sp];
        if (A != base) free(A);
    }
    free(stack);
    return s;
}

/* The best plan with peak <= limit (or, minmem, the smallest peak). */
osdp_status osdp_ps_search(pctx *x, long long limit, best_t *bt)
{
    const int n = x->n, kc = x->kc;
    size_t nk = (size_t)n * (size_t)kc, ncand = 0;
    bt->found = 0;
    long long *cand = malloc(sizeof *cand * nk * (size_t)kc);
    unsigned char *allow = malloc(nk);
    int *ch = calloc((size_t)n + 1, sizeof *ch);
    long long *minw = malloc(sizeof *minw * (size_t)n), *minf = malloc(sizeof *minf * (size_t)n);
    osdp_status s = OSDP_OK;
    if (!cand || !allow || !ch || !minw || !minf) {
        s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
        goto done;
    }
    long long dlo = LLONG_MIN;
    for (int u = 0; u < n; u++) {
        minw[u] = minf[u] = LLONG_MAX;
        for (int c = 0; c < kc; c++) {
            if (x->wp[AT(x, u, c)] < minw[u]) minw[u] = x->wp[AT(x, u, c)];
            if (x->f[AT(x, u, c)] < minf[u]) minf[u] = x->f[AT(x, u, c)];
        }
        long long lo = x->K[u] + minw[u] + (u > 0 ? minf[u - 1] : 0);
        if (lo > dlo) dlo = lo;
        for (int a = 0; a < kc; a++)
            for (int c = 0; c < (u > 0 ? kc : 1); c++) {
                long long v = x->K[u] + x->wp[AT(x, u, a)] + (u > 0 ? x->f[AT(x, u - 1, c)] : 0);
                if (v >= lo) cand[ncand++] = v;
            }
    }
    long long min_r = 0;
    for (int u = 0; u < n; u++) {
        int bc = 0;
        long long lo = LLONG_MAX;
        for (int c = 0; c < kc; c++) {
            size_t a = AT(x, u, c), z = AT(x, u, bc);
            if (x->R[a] < lo) lo = x->R[a];
            if (c > 0 && (x->t[a] < x->t[z] || (x->t[a] == x->t[z] && x->R[a] < x->R[z]))) bc = c;
        }
        min_r += lo;
        ch[u] = bc;
    }
    if (!x->minmem) { /* the fastest plan fits: nothing to search */
        long long r = 0;
        double t = 0;
        for (int u = 0; u < n; u++) {
            r += x->R[AT(x, u, ch[u])];
            t += x->t[AT(x, u, ch[u])];
        }
        if (x->cst + r + transient(x, ch) <= limit) {
            offer(x, bt, ch, t);
            goto done;
        }
    }
    qsort(cand, ncand, sizeof *cand, cmp_ll);
    long long stop_lim = LLONG_MIN; /* budgets below it cannot beat the best plan */
    double stop_for = -1;
    for (size_t j = 0; j < ncand; j++) {
        long long d = cand[j];
        if (d < dlo || (j > 0 && d == cand[j - 1])) continue;
        long long lim = limit - x->cst - d;
        if (lim < min_r) break; /* no plan fits this d, nor any larger one */
        const double lam = x->minmem ? (double)d : 0.0;
        /* bounds for this d and every larger one (their budgets are smaller) */
        if (lim < stop_lim) break;
        if (bt->found && !(osdp_ps_lp_bound(x, NULL, lim) + lam < bt->obj)) break;
        if (bt->found && !x->minmem) {
            if (stop_for != bt->obj) { /* the best plan changed: recompute the byte threshold */
                s = fewest_bytes_faster(x, bt->obj, ch, &stop_lim);
                if (s != OSDP_OK) goto done;
                stop_for = bt->obj;
                if (lim < stop_lim) break;
            }
        } else {
            /* the unrestricted knapsack: if it respects d it is optimal for every d' >= d */
            double obj;
            osdp_status ks = knap(x, NULL, lim, ch, &obj);
            if (ks == OSDP_ERR_INFEASIBLE) break;
            if (ks != OSDP_OK) { s = ks; goto done; }
            if (bt->found && !(obj + lam < bt->obj)) break;
            if (transient(x, ch) <= d) {
                offer(x, bt, ch, obj + lam);
                break;
            }
        }
        /* choices whose transient exceeds d whatever their neighbour takes */
        int empty = 0;
        for (int u = 0; u < n && !empty; u++) {
            int any = 0;
            for (int c = 0; c < kc; c++) {
                int ok = x->K[u] + x->wp[AT(x, u, c)] + (u > 0 ? minf[u - 1] : 0) <= d
                      && (u + 1 >= n || x->K[u + 1] + minw[u + 1] + x->f[AT(x, u, c)] <= d);
                allow[AT(x, u, c)] = (unsigned char)ok;
                any |= ok;
            }
            empty = !any;
        }
        if (empty) continue;
        if (bt->found && !(osdp_ps_lp_bound(x, allow, lim) + lam < bt->obj)) continue;
        s = bnb(x, allow, d, lim, bt, ch);
        if (s != OSDP_OK) goto done;
    }
done:
    free(cand); free(allow); free(ch); free(minw); free(minf);
    return s;
}

/* The planner's knapsacks (osdp/search.h) over the allowed choices of a
 * node, their cache across transient bounds, and the LP, byte-threshold
 * and transient lower bounds (method in osdp/planner.h). */
#include "plan_search.h"
#include "osdp/search.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

long long osdp_ps_rsum(const pctx *x, const int *ch)
{
    long long r = 0;
    for (int u = 0; u < x->n; u++) r += x->R[AT(x, u, ch[u])];
    return r;
}

/* The knapsack over the allowed choices (NULL: all) through the selected
 * search; *obj = its total time.  With swap_shift >= 0 the roles are
 * swapped: the constraint is on the times, as integers
 * llround(ldexp(t, swap_shift)) summing to at most lim, and the resident
 * bytes are minimised.  OSDP_ERR_INFEASIBLE when nothing fits (or an
 * operator has no allowed choice). */
static osdp_status knap_any(pctx *x, const unsigned char *allow, long long lim, int swap_shift, double cap, int *out,
                            double *obj)
{
    for (int j = 0; j < x->n; j++) {
        int i = x->perm[j], k = 0;
        for (int c = 0; c < x->nc[i]; c++) {
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
                             .workspace = x->ws, .time_cap = cap};
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

/* The knapsack cache: one entry per slot (direct-mapped by the hash of the
 * allow set).  An entry answers a later question on the same allow set
 *   - found, its plan's bytes r <= lim <= its lim: the optimum there fits
 *     the smaller budget, so it is still the optimum (tie rule included);
 *   - none, lim <= its lim and cap <= its cap: still none.
 * The transient bounds d of one search differ by a few bytes, and their
 * branch and bound trees repeat most of their nodes. */
#define KC_SLOTS 1024
typedef struct kentry {
    unsigned long long h;
    long long lim, r;
    double cap, obj;
    int status;                /* 0: empty, 1: found, 2: none */
    unsigned char *allow;      /* [n kc] */
    int *plan;                 /* [n] */
} kentry;
struct osdp_ps_kcache { kentry e[KC_SLOTS]; };

void osdp_ps_kcache_free(osdp_ps_kcache *c)
{
    if (!c) return;
    for (int i = 0; i < KC_SLOTS; i++) {
        free(c->e[i].allow);
        free(c->e[i].plan);
    }
    free(c);
}

static unsigned long long hash_allow(const unsigned char *a, size_t n)
{
    unsigned long long h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ a[i]) * 1099511628211ULL;
    return h;
}

/* cap: plans slower than it are not wanted (INFINITY: any) */
osdp_status osdp_ps_knap(pctx *x, const unsigned char *allow, long long lim, double cap, int *out, double *obj)
{
    const size_t nk = (size_t)x->n * (size_t)x->kc;
    if (!allow) return knap_any(x, allow, lim, -1, cap, out, obj);
    if (!x->kcache) x->kcache = calloc(1, sizeof *x->kcache);
    unsigned long long h = hash_allow(allow, nk);
    kentry *e = x->kcache ? &x->kcache->e[h % KC_SLOTS] : NULL;
    if (e && e->status && e->h == h && memcmp(e->allow, allow, nk) == 0) {
        if (e->status == 1 && e->r <= lim && lim <= e->lim) {
            memcpy(out, e->plan, sizeof *out * (size_t)x->n);
            *obj = e->obj;
            x->acc->cache_hits++;
            return OSDP_OK;
        }
        if (e->status == 2 && lim <= e->lim && cap <= e->cap) {
            x->acc->cache_hits++;
            return OSDP_ERR_INFEASIBLE;
        }
    }
    const long long timed = x->acc->timed_out;
    osdp_status s = knap_any(x, allow, lim, -1, cap, out, obj);
    if (!e || (s != OSDP_OK && s != OSDP_ERR_INFEASIBLE) || x->acc->timed_out != timed) return s;
    if (!e->allow) e->allow = malloc(nk);
    if (!e->plan) e->plan = malloc(sizeof *e->plan * (size_t)x->n);
    if (!e->allow || !e->plan) {
        e->status = 0;
        return s;
    }
    memcpy(e->allow, allow, nk);
    e->h = h;
    e->lim = lim;
    e->cap = cap;
    e->status = s == OSDP_OK ? 1 : 2;
    if (s == OSDP_OK) {
        memcpy(e->plan, out, sizeof *out * (size_t)x->n);
        e->obj = *obj;
        e->r = osdp_ps_rsum(x, out);
    }
    return s;
}

/* The fewest resident bytes of any plan faster than `best` (transients
 * ignored): a budget lim below it cannot beat `best`.  Times are compared on
 * a grid of 2^-shift s (the slowest plan below 2^58 units); the budget
 * floor(best) + n units absorbs the rounding of n terms, so the result
 * never exceeds the true minimum.  LLONG_MAX when no plan is faster. */
osdp_status osdp_ps_fewest_bytes_faster(pctx *x, double best, int *ch, long long *out)
{
    double tmax = 0;
    for (int u = 0; u < x->n; u++) {
        double m = 0;
        for (int c = 0; c < x->nc[u]; c++)
            if (x->t[AT(x, u, c)] > m) m = x->t[AT(x, u, c)];
        tmax += m;
    }
    int e = 0;
    if (tmax > 0) (void)frexp(tmax, &e);
    int shift = 58 - e;
    long long budget = (long long)floor(ldexp(best, shift)) + x->n;
    double obj;
    osdp_status s = knap_any(x, NULL, budget, shift, INFINITY, ch, &obj);
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

double osdp_ps_lp_bound(const pctx *x, const unsigned char *allow, long long lim)
{
    const int n = x->n, kc = x->kc;
    seg_t *seg = malloc(sizeof *seg * ((size_t)n * (size_t)kc + 1));
    int *h = malloc(sizeof *h * (size_t)kc), *ord = malloc(sizeof *ord * (size_t)kc);
    int *last = malloc(sizeof *last * 2 * (size_t)n), *s0 = malloc(sizeof *s0 * 2 * (size_t)n), *s1 = s0 + n;
    long long *br = malloc(sizeof *br * (size_t)n);
    double *bt = malloc(sizeof *bt * (size_t)n);
    if (!seg || !h || !ord || !last || !s0 || !br || !bt) {
        free(seg); free(h); free(ord); free(last); free(s0); free(br); free(bt);
        return 0; /* no bound */
    }
    for (int g = 0; g < 2 * n; g++) last[g] = -1;
    double t = 0;
    int ns = 0;
    for (int u = 0; u < n && lim >= 0; u++) {
        /* an operator of its group with the same allowed choices: the same hull */
        const int p = last[x->grp[u]];
        if (p >= 0 && (!allow || memcmp(allow + AT(x, u, 0), allow + AT(x, p, 0), (size_t)x->nc[u]) == 0)) {
            lim -= br[p];
            t += bt[p];
            for (int j = s0[p]; j < s1[p]; j++) seg[j].mult++;
            continue;
        }
        int no = 0;
        for (int c = 0; c < x->nc[u]; c++) { /* insertion sort of the allowed choices by (R, t) */
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
        br[u] = x->R[AT(x, u, h[0])];
        bt[u] = x->t[AT(x, u, h[0])];
        lim -= br[u];
        t += bt[u];
        s0[u] = ns;
        for (int j = 0; j + 1 < nh; j++) {
            size_t a = AT(x, u, h[j]), b = AT(x, u, h[j + 1]);
            seg[ns].dm = x->R[b] - x->R[a];
            seg[ns].dt = x->t[a] - x->t[b];
            seg[ns].eff = seg[ns].dt / (double)seg[ns].dm;
            seg[ns].mult = 1;
            ns++;
        }
        s1[u] = ns;
        last[x->grp[u]] = u;
    }
    if (lim < 0) t = INFINITY;
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
    free(seg); free(h); free(ord); free(last); free(s0); free(br); free(bt);
    return t * (1 - 1e-9);
}

/* per operator: the smallest wp, f, nx of its choices */
void osdp_ps_mins(const pctx *x, long long *minw, long long *minf, long long *minx)
{
    for (int u = 0; u < x->n; u++) {
        minw[u] = minf[u] = minx[u] = LLONG_MAX;
        for (int c = 0; c < x->nc[u]; c++) {
            size_t a = AT(x, u, c);
            if (x->wp[a] < minw[u]) minw[u] = x->wp[a];
            if (x->f[a] < minf[u]) minf[u] = x->f[a];
            if (x->nx[a] < minx[u]) minx[u] = x->nx[a];
        }
    }
}

/* the smallest Z_u any plan has at u, given the neighbours' minima */
long long osdp_ps_zmin(const pctx *x, int u, const long long *minw, const long long *minf, const long long *minx)
{
    return x->K[u] + minw[u] + (u > 0 ? minf[u - 1] : 0) + (u + 1 < x->n ? minx[u + 1] : 0);
}

/* the smallest transient any plan has */
long long osdp_ps_min_transient(const pctx *x)
{
    long long *m = malloc(sizeof *m * 3 * (size_t)x->n), dlo = LLONG_MIN;
    if (!m) return LLONG_MIN; /* no bound */
    osdp_ps_mins(x, m, m + x->n, m + 2 * x->n);
    for (int u = 0; u < x->n; u++) {
        long long lo = osdp_ps_zmin(x, u, m, m + x->n, m + 2 * x->n);
        if (lo > dlo) dlo = lo;
    }
    free(m);
    return dlo;
}

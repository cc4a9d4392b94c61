/* The planner's search over the transient bound (see osdp/planner.h):
 * internal to src/planner/{planner,plan_choices,plan_search}.c. */
#ifndef OSDP_PLAN_SEARCH_H
#define OSDP_PLAN_SEARCH_H

#include "osdp/cost_model.h"
#include "osdp/planner.h"
#include "osdp/search.h"

typedef struct osdp_ps_kcache osdp_ps_kcache; /* plan_knap.c */
void osdp_ps_kcache_free(osdp_ps_kcache *c);

/* One micro-batch: every operator's choices and the arrays the search works
 * on (plan_choices.c builds them).  Choice c of operator i is k = ck of
 * g = cg slices ZDP, with recompute crc.  The model peak of a plan is
 *     cst + sum_i R[i][c_i] + max_u Z_u,
 *     Z_u = K[u] + f[u-1][c_{u-1}] + wp[u][c_u] + nx[u+1][c_{u+1}]
 * (missing neighbours count 0), where, in osdp/cost_model.h's terms,
 *     R  = state + resident + acts (less the operator's smallest R, in cst)
 *     wp = rebuilt + G + max(work, recv)     f = prefetch footprint
 *     nx = [prefetch] (G + H) - acts         (its own activations are not
 *          alive in the backward of the operator before it)
 *     K[u] = - sum_{j >= u+2} acts_j         (later operators' activations)
 * The search bounds, prunes and enumerates with K = Kopt, each later
 * acts_j at its largest (Z_u at its smallest), and checks plans against the
 * true Z_u; Kpes (each at its smallest) bounds Z_u from above. */
typedef struct pctx {
    osdp_cost_model cm;
    const osdp_planner_options *o;
    int n, kc;                /* operators; the most choices of one (array stride) */
    int *nc;                  /* [n] choices of operator i */
    int *grp;                 /* [n] in [0, 2n): operators of one group have the same choices */
    signed char *cg, *ck, *crc; /* [n * kc] g, k, recompute of each choice */
    long long *R, *wp, *f, *nx, *acts; /* [n * kc] (see above) */
    double *t;                /* [n * kc]: what is minimised per choice */
    long long *K, *Kopt, *Kpes; /* [n]; K points to Kopt */
    long long cst;            /* workspace + every operator's smallest R */
    int minmem;               /* minimise the peak instead of the time */
    int bound_only;           /* built for osdp_ps_lp_bound / min_transient only: every choice kept */
    double cutoff;            /* only plans with objective <= cutoff are wanted (INFINITY: any) */
    int *nch, *map, *sol;     /* knapsack buffers */
    int *perm;                /* knapsack item j is operator perm[j] */
    const long long **pm;
    const double **pt;
    long long *mb;
    double *tb;
    double deadline;          /* dfs: wall-clock end (0: none) */
    osdp_search_workspace *ws; /* exact search's scratch, kept across this context's knapsacks */
    osdp_ps_kcache *kcache;   /* knapsack results by allow set (plan_knap.c) */
    osdp_planner_result *acc; /* counters */
} pctx;

#define AT(x, i, c) ((size_t)(i) * (size_t)(x)->kc + (size_t)(c))

typedef struct best_t {
    int found;
    double obj;
    int *ch;
} best_t;

/* plan_choices.c */
/* minmem: 0 the fastest plan, 1 the smallest peak, 2 only for the bounds
 * (osdp_ps_lp_bound, osdp_ps_min_transient: no dominated choice dropped, no
 * search); cuts: a cache of the operators' cuts, kept by the caller across
 * micro-batches (NULL: none) */
osdp_status osdp_ps_ctx_build(pctx *x, const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o,
                              int b, int accum, int minmem, osdp_cost_cuts *cuts, osdp_planner_result *acc);
void osdp_ps_ctx_free(pctx *x);
/* Z_u of a plan with the true activations of the later operators: the
 * largest over u (osdp_ps_true_transient); or, with max_z NULL, the largest
 * u whose Z_u exceeds d, -1 if none (max_z non-NULL: the largest Z_u goes
 * there and the scan does not stop) */
long long osdp_ps_true_transient(const pctx *x, const int *ch);
int osdp_ps_transient_scan(const pctx *x, const int *ch, long long d, long long *max_z);

/* plan_search.c */
/* the best plan with peak <= limit (minmem: the smallest peak); bt->ch caller-allocated [n] */
osdp_status osdp_ps_search(pctx *x, long long limit, best_t *bt);

/* plan_bnb.c */
/* the best plan with every true Z_u <= d and knapsack budget lim among the
 * choices `base` allows (base is left as it was) */
osdp_status osdp_ps_bnb(pctx *x, unsigned char *base, long long d, long long lim, best_t *bt, int *ch);
/* drops from A the choices no plan of A respecting every Z_u <= d takes;
 * 0 when A is left empty.  mn: scratch of 7 n */
int osdp_ps_propagate(const pctx *x, unsigned char *A, long long d, long long *mn);
int osdp_ps_beats(const pctx *x, const best_t *bt, double v);  /* v may still improve on bt / the cutoff */
double osdp_ps_cap(const pctx *x, const best_t *bt);           /* the slowest objective still wanted */
void osdp_ps_offer(const pctx *x, best_t *bt, const int *ch, double obj);

/* plan_knap.c */
/* The knapsack over the allowed choices (NULL: all) with budget lim;
 * plans slower than cap are not wanted (INFINITY: any).  OSDP_ERR_INFEASIBLE
 * when none fits.  Results for an allow set are cached in x and reused
 * while they still answer the question (lim and cap no larger). */
osdp_status osdp_ps_knap(pctx *x, const unsigned char *allow, long long lim, double cap, int *out, double *obj);
/* the fewest bytes of any plan faster than best (LLONG_MAX: none) */
osdp_status osdp_ps_fewest_bytes_faster(pctx *x, double best, int *ch, long long *out);
/* LP lower bound of the knapsack over the allowed choices (NULL: all) with budget lim */
double osdp_ps_lp_bound(const pctx *x, const unsigned char *allow, long long lim);
long long osdp_ps_rsum(const pctx *x, const int *ch);          /* sum of R of a plan */
/* per operator: the smallest wp, f, nx of its choices */
void osdp_ps_mins(const pctx *x, long long *minw, long long *minf, long long *minx);
/* the smallest Z_u any plan has at u (under K), given those minima */
long long osdp_ps_zmin(const pctx *x, int u, const long long *minw, const long long *minf, const long long *minx);
/* the smallest transient any plan has (under x->K) */
long long osdp_ps_min_transient(const pctx *x);

#endif

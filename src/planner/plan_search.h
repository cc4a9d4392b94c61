/* The planner's search over the transient bound (see osdp/planner.h):
 * internal to src/planner/planner.c and src/planner/plan_search.c. */
#ifndef OSDP_PLAN_SEARCH_H
#define OSDP_PLAN_SEARCH_H

#include "osdp/cost_model.h"
#include "osdp/planner.h"
#include "osdp/search.h"

/* one micro-batch: the arrays the search works on */
typedef struct pctx {
    osdp_cost_model cm;
    const osdp_planner_options *o;
    int n, kc, g;
    int kval[66];             /* ZDP slices of choice c */
    long long *R, *wp, *f;    /* [n * kc]: resident, max(work, recv), prefetch footprint */
    double *t;                /* [n * kc]: what is minimised per choice */
    long long *K;             /* [n] */
    long long cst;            /* workspace + all sharded state */
    int minmem;               /* minimise the peak instead of the time */
    int *nch, *map, *sol;     /* knapsack buffers */
    int *perm;                /* knapsack item j is operator perm[j] */
    const long long **pm;
    const double **pt;
    long long *mb;
    double *tb;
    double deadline;          /* dfs: wall-clock end (0: none) */
    osdp_search_workspace *ws; /* exact search's scratch, kept across this context's knapsacks */
    osdp_planner_result *acc; /* counters */
} pctx;

#define AT(x, i, c) ((size_t)(i) * (size_t)(x)->kc + (size_t)(c))

typedef struct best_t {
    int found;
    double obj;
    int *ch;
} best_t;

osdp_status osdp_ps_ctx_build(pctx *x, const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o,
                              int b, int accum, int minmem, osdp_planner_result *acc);
void osdp_ps_ctx_free(pctx *x);
/* the best plan with peak <= limit (minmem: the smallest peak); bt->ch caller-allocated [n] */
osdp_status osdp_ps_search(pctx *x, long long limit, best_t *bt);
/* LP lower bound of the knapsack over the allowed choices (NULL: all) with budget lim */
double osdp_ps_lp_bound(const pctx *x, const unsigned char *allow, long long lim);
/* the smallest transient any plan has */
long long osdp_ps_min_transient(const pctx *x);

#endif

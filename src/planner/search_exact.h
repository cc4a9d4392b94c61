/* Internals of the exact plan search (src/planner/search_exact.c has the
 * method): the types shared by its parts and their entry points.
 * Each file calls only the ones listed above it:
 *   search_group.c  identical items grouped, hulls, greedy plan, group order
 *   search_bound.c  lower bounds (LP and Lagrangian) in Fenwick trees
 *   search_front.c  a group's Pareto front of multisets under a threshold
 *   search_exact.c  the two sides' merges, threshold rounds, the driver
 * (search_prepare.c, shared with the other two searches, below them all). */
#ifndef OSDP_SEARCH_EXACT_H
#define OSDP_SEARCH_EXACT_H

#include "planner/search.h"

#include <stddef.h>

typedef struct osdp_sx_group {
    int n_items, n_choices;    /* r = n_items identical items with k = n_choices choices */
    int *items;                /* [r] their indices, ascending */
    const long long *mem;      /* memory per choice */
    const long long *units;    /* fixed-point time per choice */
    int *hull, n_hull;         /* lower convex hull of the choices, memory ascending */
    int *pareto, n_pareto;     /* par: the non-dominated choices, memory ascending */
    int *pareto_hull;          /* [n_pareto][k]: lower hull of pareto[d..n_pareto-1] (search_front.c) */
    int *pareto_hull_n;        /* [n_pareto]: its size */
    int front_size;            /* Pareto front of the group's multisets: */
    long long *front_mem;      /*   memory ascending */
    long long *front_units;    /*   and time strictly descending */
    int *front_counts;         /* [front_size][k] choice counts */
    double dist;               /* distance from the LP's break efficiency */
} osdp_sx_group;

typedef struct osdp_sx_edge { /* a hull edge of one item: dm more bytes for dq fewer time units */
    double eff;
    long long dm, dq;
    int g, v;
} osdp_sx_edge;

typedef struct osdp_sx_step { /* between consecutive non-dominated choices of one item */
    long long dm, dq;
    long long rc;              /* ceil(dq - lam dm) when positive, else 0 */
    int g, pos_dm, pos_r;      /* positions in by_dm, by_r */
} osdp_sx_step;

/* Fenwick trees (1-based): over the edges in efficiency order (bytes LM,
 * time units LQ; n_edges + 1 long), over the steps with r > 0 by size (count
 * KC, bytes KS) and by r (count TC, r TR; n_steps + 1 long) */
enum { LM, LQ, KC, KS, TC, TR, NTREE };
typedef struct osdp_sx_fenwick { /* bound data of the groups not on a side */
    long long m0, q0;          /* their base: all at the smallest-memory choice */
    long long *t[NTREE];
} osdp_sx_fenwick;

typedef struct osdp_sx_stage {
    int size, cap;
    long long *m, *q;          /* memory ascending, time strictly descending */
    int *prev, *gi;            /* state of the previous stage, front point of the group */
} osdp_sx_stage;

typedef struct osdp_sx_side {
    int n;                     /* groups merged */
    int *order;                /* [ng] in merge order */
    osdp_sx_stage *st;         /* [ng + 1] */
    osdp_sx_fenwick f;
} osdp_sx_side;

typedef struct osdp_sx_context {
    const osdp_search_problem *problem;
    osdp_search_prep prep;
    int n_groups, n_edges, n_steps; /* groups, hull edges, steps */
    int max_choices;           /* the most choices of an item */
    osdp_sx_group *groups;
    osdp_sx_edge *edges;       /* hull edges, efficiency descending */
    osdp_sx_step *steps;       /* steps, by group */
    int *by_dm, *by_r;         /* step ids by size ascending / by r descending */
    int *eg_off, *eg_pos;      /* group j's edges: eg_pos[eg_off[j] .. eg_off[j + 1]) */
    int *sg_off;               /* group j's steps: steps[sg_off[j] .. sg_off[j + 1]) */
    int *group_order;          /* groups, farthest from the break first */
    osdp_sx_side sides[2];     /* A, B */
    osdp_sx_fenwick full;      /* bound data of all groups */
    double break_eff;          /* the LP's break efficiency */
    double lambda;             /* lambda of the cardinality bound */
    long long greedy_units;    /* time of the greedy plan */
    double threshold;          /* states whose bound exceeds it are dropped */
    double next;               /* the smallest bound dropped */
    double cap;                /* the time of the best plan found but not proven */
    int *tie_choice[2];        /* [n] vectors for tie comparisons */
    struct osdp_sx_points *fpts[2]; /* [max r + 1] build_front's G_{d-1}(.), G_d(.): reused, they grow */
    int fpts_n;
    long long *edm, *edq;      /* [n_edges] build_front: the other groups' edges */
    long long *lcm, *lcq;      /* [n_edges + 1] build_front: the other groups' edges summed */
    double *leff;              /* [n_edges] their efficiencies */
    long long *own_m, *own_q;  /* [k + 1] build_front: one LP line's own edges summed */
    double *own_eff;           /* [k] */
    int *own_pos;              /* [k] where they go among the other edges */
    long long nodes;
} osdp_sx_context;

typedef struct osdp_sx_keyed { double key; int id; } osdp_sx_keyed;
typedef struct osdp_sx_points { /* memory ascending, time descending */
    int n, cap;
    long long *m, *q;
    int *c, kc;                /* [cap][kc] choice counts (kc: the most choices it was sized for) */
} osdp_sx_points;
/* the context's fpts between calls */
struct osdp_search_workspace { osdp_sx_points *fpts[2]; int fpts_n; };

/* search_group.c */
int osdp_sx_grow(void **ptr, size_t elem, size_t need, int *cap); /* *ptr to >= need elements, -1: no memory */
int osdp_sx_make_groups(osdp_sx_context *x);
int osdp_sx_plan_order(osdp_sx_context *x);
int osdp_sx_cmp_keyed(const void *a, const void *b);               /* key descending, then id */
/* search_front.c */
int osdp_sx_build_front(osdp_sx_context *x, int gi, long long cap, osdp_sx_fenwick *f);
void osdp_sx_pts_free(osdp_sx_points *v);
/* search_bound.c */
int osdp_sx_setup_bounds(osdp_sx_context *x);
double osdp_sx_bound(const osdp_sx_context *x, const osdp_sx_fenwick *f, long long m, long long q);
void osdp_sx_fen_edges(const osdp_sx_context *x, const osdp_sx_fenwick *f, long long *dm, long long *dq);
void osdp_sx_fen_remove(const osdp_sx_context *x, osdp_sx_fenwick *f, int j, long long r);
void osdp_sx_fen_copy(const osdp_sx_context *x, osdp_sx_fenwick *dst, const osdp_sx_fenwick *src);
void osdp_sx_fen_free(osdp_sx_fenwick *f);

#endif

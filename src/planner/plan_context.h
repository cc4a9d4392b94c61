/* The planner's search context for one micro-batch (method in
 * osdp/planner.h): every operator's choices and the peak terms of each,
 * built by plan_choices.c; the queries on a plan's peak that every layer
 * above asks (plan_context.c).  The bottom layer of the planner's search:
 * it calls nothing above it (map in osdp/planner.h). */
#ifndef OSDP_PLAN_CONTEXT_H
#define OSDP_PLAN_CONTEXT_H

#include "osdp/cost_model.h"
#include "osdp/planner.h"
#include "planner/search.h"
#include "plan_knap_cache.h"

/* One micro-batch: every operator's choices and the arrays the search works
 * on.  Choice c of operator i is k = choice_zdp_slices of g = choice_slices
 * slices ZDP, with recompute choice_recompute, reducing its gradients once
 * per step for the last choice_reduce_once slices.  The model peak of a plan is
 *     cst + sum_i R[i][c_i] + max(max_u Z_u, max_u F_u),
 *     Z_u = K[u] + f[u-1][c_{u-1}] + wp[u][c_u] + nx[u+1][c_{u+1}]     (u's backward)
 *     F_u = K[u] + v[u-1][c_{u-1}] + fw[u][c_u] + fx[u+1][c_{u+1}]     (u's forward)
 * (missing neighbours count 0), where, in osdp/cost_model.h's terms (each
 * choice's osdp_op_peak_terms, from osdp_cost_peak_terms: the terms
 * osdp_cost_peak adds up, themselves from the size table),
 *     R  = state + resident + acts (less the operator's smallest R, in cst)
 *     wp = rebuilt + G + max(work, recv)     f = prefetch footprint
 *     nx = [prefetch] (G + H) - acts         (its own activations are not
 *          alive in the backward of the operator before it)
 *     K[u] = - sum_{j >= u+2} acts_j         (later operators' activations)
 *     fw = forward_peak (rebuilt + its slices at its forward)
 *     fx = [prefetch] ff - acts              (its first slice gathered during
 *          the forward of the operator before it, its own activations not yet
 *          made)                             v = view
 * and the fields below hold them as
 *     cst = fixed_bytes, R = held_bytes, wp = pass_peak_bytes,
 *     f = prefetch_bytes, nx = next_op_bytes, acts = act_bytes,
 *     fw = forward_peak_bytes, v = view_bytes, fx = forward_next_bytes,
 *     K = later_acts_bound (Kopt = later_acts_optimistic,
 *     Kpes = later_acts_pessimistic).
 * The 2 n moments are indexed m = u (Z_u) and m = n + u (F_u): both have
 * the same shape, a term of u-1 (left), of u (mid), of u+1 (right) and K[u]
 * (osdp_ps_moment_of), and the search treats them alike.
 * The search bounds, prunes and enumerates with K = Kopt, each later
 * acts_j at its largest (Z_u at its smallest), and checks plans against the
 * true Z_u; Kpes (each at its smallest) bounds Z_u from above.  Per-choice
 * arrays are [n_ops * stride], choice c of operator i at PS_CHOICE(ctx, i, c).
 *
 * A pipeline stage's wrap moment (osdp/cost_model.h, next_passes) is a Z_0
 * of its own: K[0] + X + nx[1], X from the first operator's terms
 * (pass_peak_then_forward, pass_peak_again) and, when a backward follows a
 * backward on a stage of n > 1 operators, wp[0] + f[n-1]: it pairs the first
 * operator with the last.  The first operator's wp is the largest of its X
 * that involve it alone (so Z_0 is max(Z_0, those moments)); the pairing is
 * searched one context per value F the last operator's f can take
 * (wrap_values): that context keeps the last operator's choices of f = F
 * and the first operator's wp at least wp + F.  A context built without F
 * (wrap index -1) leaves the pairing out: its peak bounds the stage's from
 * below (the bounds, least_peak), and only a bound-only context then adds
 * it to the true transient (wrap_first_pass). */
typedef struct osdp_ps_context {
    osdp_cost_model cost;             /* its geo: the micro-batch and accumulation it was built for */
    const osdp_planner_options *opts;
    int n_ops;
    int stride;                       /* the most choices of one operator (array stride) */
    int *n_choices;                   /* [n_ops] choices of operator i */
    int *group;                       /* [n_ops] in [0, 2 n_ops): operators of one group have the same choices */
    signed char *choice_slices;       /* g of each choice */
    signed char *choice_zdp_slices;   /* k of each choice: slices ZDP */
    signed char *choice_recompute;    /* 1: the choice recomputes its activations */
    signed char *choice_hierarchical; /* 1: the choice is hierarchical ZDP (g = k = 1; osdp/plan.h) */
    signed char *choice_reduce_once;  /* J: the choice's last J slices reduce once per step (osdp/plan.h) */
    int *all_once;                    /* [n_ops] of OSDP_MAX_SLICES: the cost model's reduce_once, every slice */
    long long *held_bytes;            /* R (see above) */
    long long *pass_peak_bytes;       /* wp */
    long long *prefetch_bytes;        /* f */
    long long *next_op_bytes;         /* nx */
    long long *act_bytes;             /* acts */
    long long *forward_peak_bytes;    /* fw */
    long long *view_bytes;            /* v */
    long long *forward_next_bytes;    /* fx */
    double *objective;                /* what is minimised per choice: its time, or R when minimising memory */
    long long *later_acts_bound;      /* [n_ops] K; points to later_acts_optimistic */
    long long *later_acts_optimistic; /* [n_ops] Kopt: each later acts_j at its largest */
    long long *later_acts_pessimistic; /* [n_ops] Kpes: each later acts_j at its smallest */
    long long fixed_bytes;            /* cst: workspace + every operator's smallest R */
    long long *wrap_values;           /* [n_wrap_values] the distinct f of the last operator, ascending, when the
                                         wrap moment pairs it with the first (NULL, 0: it does not) */
    int n_wrap_values;
    long long *wrap_first_pass;       /* [stride] a bound-only context's first operator's wp without the wrap
                                         moment, for the pairing in the true transient (NULL: none) */
    int minimise_memory;              /* minimise the peak instead of the time */
    int incomplete;                   /* a search on it could not try every transient bound (plan_search.c) */
    int bound_only;                   /* built for osdp_ps_lp_bound / min_transient only: every choice kept */
    int times_only;                   /* osdp_ps_fastest_times': the choices' times alone, no memory terms */
    double cutoff;                    /* only plans with objective <= cutoff are wanted (INFINITY: any) */
    /* the knapsack's arrays (plan_knap.c fills them; item j is operator knap_order[j]) */
    int *knap_order;                  /* [n_ops] operators by decreasing memory swing */
    int *knap_n_choices;              /* [n_ops] allowed choices of item j */
    int *knap_choice;                 /* [n_ops * stride] item j's choice q is its operator's choice knap_choice[..] */
    int *knap_solution;               /* [n_ops] the search's answer, per item */
    const long long **knap_mem;       /* [n_ops] rows of knap_mem_buf */
    const double **knap_time;         /* [n_ops] rows of knap_time_buf */
    long long *knap_mem_buf;          /* [n_ops * stride] */
    double *knap_time_buf;            /* [n_ops * stride] */
    double deadline;                  /* dfs: wall-clock end (0: none) */
    osdp_search_workspace *search_workspace; /* exact search's scratch, kept across this context's knapsacks */
    osdp_ps_knap_cache *knap_cache;   /* knapsack results by allow set (plan_knap_cache.c; NULL until used) */
    int pair_gave_up;                 /* plan_bnb.c: the pair bounds (plan_pair.h) given up here, their states too many */
    osdp_planner_result *counters;    /* searches, nodes, cache hits, search time, timed_out, gap */
    osdp_cost_cuts *own_cuts;         /* the cuts cache of a context built without the caller's (NULL: none) */
} osdp_ps_context;

#define PS_CHOICE(ctx, i, c) ((size_t)(i) * (size_t)(ctx)->stride + (size_t)(c))

/* moment m (above): its operator u and its three terms' arrays, of u-1, u and u+1 */
typedef struct osdp_ps_moment {
    int op;                   /* u */
    int forward;              /* 1: F_u, 0: Z_u */
    const long long *left, *mid, *right;
} osdp_ps_moment;
static inline int osdp_ps_n_moments(const osdp_ps_context *ctx) { return 2 * ctx->n_ops; }
static inline osdp_ps_moment osdp_ps_moment_of(const osdp_ps_context *ctx, int m)
{
    if (m < ctx->n_ops)
        return (osdp_ps_moment){.op = m, .forward = 0, .left = ctx->prefetch_bytes, .mid = ctx->pass_peak_bytes,
                                .right = ctx->next_op_bytes};
    return (osdp_ps_moment){.op = m - ctx->n_ops, .forward = 1, .left = ctx->view_bytes,
                            .mid = ctx->forward_peak_bytes, .right = ctx->forward_next_bytes};
}

/* plan_choices.c */
/* minimise_memory: 0 the fastest plan, 1 the smallest peak, 2 only for the
 * bounds (osdp_ps_lp_bound, osdp_ps_min_transient: no dominated choice
 * dropped, no search); cuts: a cache of the operators' cuts, kept by the
 * caller across micro-batches (NULL: none) */
osdp_status osdp_ps_context_build(osdp_ps_context *ctx, const osdp_layout *L, const osdp_device *dev,
                                  const osdp_planner_options *o, int b, int accum, int minimise_memory,
                                  osdp_cost_cuts *cuts, osdp_planner_result *counters);
/* the same for the wrap moment's value F = wrap_values[wrap] of the last
 * operator's f (above; -1: the pairing left out, as osdp_ps_context_build);
 * a wrap past the values (there are none): as -1 */
osdp_status osdp_ps_context_build_wrap(osdp_ps_context *ctx, const osdp_layout *L, const osdp_device *dev,
                                       const osdp_planner_options *o, int b, int accum, int minimise_memory,
                                       osdp_cost_cuts *cuts, osdp_planner_result *counters, int wrap);

/* each operator's fastest choice's time (what a context built with
 * minimise_memory 2 has as its least objective), into fastest[n_ops],
 * without the context's arrays */
osdp_status osdp_ps_fastest_times(const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o, int b,
                                  int accum, double *fastest);

/* plan_context.c */
void osdp_ps_context_free(osdp_ps_context *ctx);
/* The moments of a plan with the true activations of the later operators:
 * the largest (osdp_ps_true_transient, every Z_u and F_u); or, with max_z
 * NULL, a moment m (Z_u: u, F_u: n + u) that exceeds d, the one of the
 * largest u, -1 if none (max_z non-NULL: the largest moment goes there and
 * the scan does not stop) */
long long osdp_ps_true_transient(const osdp_ps_context *ctx, const int *ch);
/* moment m of a plan alone (no wrap moment) */
long long osdp_ps_transient_at(const osdp_ps_context *ctx, const int *ch, int m);
/* every moment of a plan alone (no wrap moment) into z [2 n_ops], in one pass: z[m] = osdp_ps_transient_at(m) */
void osdp_ps_moment_values(const osdp_ps_context *ctx, const int *ch, long long *z);
int osdp_ps_transient_scan(const osdp_ps_context *ctx, const int *ch, long long d, long long *max_z);
/* what choice c of operator i adds to the peak at moment m of operator u:
 * R, less its activations when i >= u + 2 (freed by then, or not yet
 * made), plus the moment's left, mid or right term when i is u - 1, u or
 * u + 1 (sum_i of it = sum_i R_i + the moment) */
long long osdp_ps_moment_bytes(const osdp_ps_context *ctx, int m, int i, int c);
/* A floor under every plan's peak: at each moment m, each operator's least
 * osdp_ps_moment_bytes (the moment's bytes are a sum over operators, its
 * least the sum of their least), the largest over m, plus cst.  Cheap
 * (no search); a context with the wrap moment's pairing left out
 * (wrap_first_pass) floors the peak without it. */
long long osdp_ps_peak_floor(const osdp_ps_context *ctx);
long long osdp_ps_held_sum(const osdp_ps_context *ctx, const int *ch); /* sum of R of a plan */
double osdp_ps_objective_sum(const osdp_ps_context *ctx, const int *ch); /* its objective: the choices' sum */
/* per operator, the smallest value of each term over its choices, into
 * mins [6 n_ops]: for the backward (kind 0) and the forward (kind 1)
 * moments, mins + 3 kind n + {0, n, 2 n} [u]: u's mid (wp, fw), left (f, v)
 * and right (nx, fx) terms */
void osdp_ps_term_minima(const osdp_ps_context *ctx, long long *mins);
#define PS_MIN_MID(ctx, mins, forward) ((mins) + 3 * (size_t)(forward) * (size_t)(ctx)->n_ops)
#define PS_MIN_LEFT(ctx, mins, forward) (PS_MIN_MID(ctx, mins, forward) + (ctx)->n_ops)
#define PS_MIN_RIGHT(ctx, mins, forward) (PS_MIN_MID(ctx, mins, forward) + 2 * (ctx)->n_ops)
/* the smallest value moment m has in any plan (under K), given those minima */
long long osdp_ps_min_transient_at(const osdp_ps_context *ctx, int m, const long long *mins);
/* the smallest transient any plan has (under K) */
long long osdp_ps_min_transient(const osdp_ps_context *ctx);

/* The best plan found so far, and the questions every search layer asks of
 * it (the context's cutoff counts as a best plan before one is found). */
typedef struct osdp_ps_best {
    int found;
    double objective;
    int *choice;              /* [n_ops], caller-allocated */
} osdp_ps_best;
/* v may still improve on best / the cutoff */
int osdp_ps_beats(const osdp_ps_context *ctx, const osdp_ps_best *best, double v);
/* the slowest objective still wanted */
double osdp_ps_cap(const osdp_ps_context *ctx, const osdp_ps_best *best);
void osdp_ps_offer(const osdp_ps_context *ctx, osdp_ps_best *best, const int *ch, double obj);

#endif

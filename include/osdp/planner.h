/* The planner (rank 0): cost model + plan search + scheduler (DESIGN.md §4).
 *
 * For one micro-batch b (and accumulation A) the planner minimises the step
 * time sum_i T_i (osdp/cost_model.h) over one choice per operator — DP or
 * ZDP, or k of g slices ZDP with operator splitting — subject to
 *     peak(plan) = W + sum_i (state_i + resident_i) + max_u (K_u + Y_u) <= limit,
 * the TRUE peak of the runtime's schedule, not an additive approximation.
 * The max term couples neighbours (Y_u depends on the choices of u and u-1),
 * so the search is not one knapsack.  The planner makes it a sequence of
 * multiple-choice knapsacks solved by osdp/search.h:
 *   1. D = max_u (K_u + Y_u) takes one of finitely many values: the
 *      candidates d = K_u + max(w_u(a), H_u) + f_{u-1}(a') over all u and
 *      choices a, a'.  For each candidate d, ascending from the smallest
 *      reachable, the plans with D <= d and additive memory
 *      sum_i resident_i <= limit - W - sum_i state_i - d are exactly the
 *      plans that fit with transient bound d.
 *   2. Within one d: a choice whose transient alone exceeds d is removed
 *      (per-item restriction, still a knapsack); a remaining pair (u-1, u)
 *      that exceeds d together is removed by branch and bound: solve the
 *      knapsack, and if its plan violates a pair, branch into "op u-1 takes
 *      a choice with a smaller prefetch footprint" and "op u-1 keeps a
 *      footprint at least this large and op u a working set that fits what
 *      is left"; both branches exclude the violating plan and together keep
 *      every plan that respects the pair.  The knapsack optimum bounds its
 *      branch from below.
 *   3. The answer is the best plan over all d.  The loop over d stops when
 *      the unrestricted knapsack at d (a lower bound for every larger d,
 *      whose budget is smaller) is no better than the best plan, or when its
 *      plan already respects d (then it is optimal for every larger d).
 * GUARANTEE (g = 1 and g > 1 alike, search = exact, or dfs when it did not
 * time out): the plan returned has the smallest step time of all plans
 * whose model peak fits the limit, up to the search's time resolution
 * (osdp/search.h: about 2^-60 of the slowest plan); dfs and exact return
 * the same plan, since every knapsack they are given has one answer under
 * osdp/search.h's tie rule.  The model peak equals the runtime's measured
 * peak for g = 1 when param_bytes = act_bytes = 4 (the CPU runtime's element
 * size): there the chosen plan is also checked with osdp_memory_predict()
 * and, should it ever exceed the limit (the runtime's schedule changed under
 * the model), the limit is tightened by the excess and the search repeated
 * (result.tightened counts it; after 8 rounds OSDP_ERR_INTERNAL).
 *
 * Scheduler (osdp_planner_run): b = 1, 2, ... (with a global batch G: the
 * divisors b of G / N, A = G / (N b); otherwise A = 1) until no plan fits or
 * b > max_micro_batch; the plan with the highest predicted samples/s
 * b N A / step time wins (the smaller b on ties).  No plan at the first b:
 * OSDP_ERR_INFEASIBLE, with the smallest peak any plan needs (found by the
 * same search, minimising memory) and the three operators that dominate it. */
#ifndef OSDP_PLANNER_H
#define OSDP_PLANNER_H

#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/layout.h"
#include "osdp/plan.h"

typedef enum osdp_search_kind { OSDP_SEARCH_EXACT, OSDP_SEARCH_DFS } osdp_search_kind;
typedef enum osdp_mode_set {
    OSDP_MODES_ANY,       /* OSDP: any choice per operator */
    OSDP_MODES_ALL_DP,    /* baseline: every operator DP (ZeRO-2 traffic = DDP) */
    OSDP_MODES_ALL_ZDP    /* baseline: every operator ZDP (FSDP / ZeRO-3) */
} osdp_mode_set;

typedef struct osdp_planner_options {
    int n_ranks;
    long long mem_limit;      /* bytes per rank; 0: the device's mem_limit */
    int global_batch;         /* sequences per optimizer step; 0: none (A = 1) */
    int micro_batch;          /* > 0: plan for this micro-batch only */
    int max_micro_batch;      /* scheduler's last b (default 256) */
    int prefetch;             /* the runtime's prefetch (default 1) */
    int split;                /* g slices per operator (default 1: DP or ZDP) */
    osdp_search_kind search;  /* default exact */
    osdp_cost_kind cost;      /* default paper */
    osdp_mode_set modes;      /* default any */
    double dfs_time_limit_s;  /* for the whole run, dfs only (default 60) */
    int verify;               /* osdp_memory_predict check where it applies (default 1) */
    const int *recompute;     /* per operator: recompute activations (NULL: none) */
    int split_auto;           /* try g = 1, 2, 4, 8; keep the fastest (osdp_planner_run) */
    int recompute_auto;       /* try recomputing the first m blocks, m = 0..L (osdp_planner_run) */
} osdp_planner_options;

typedef struct osdp_planner_result {
    osdp_plan plan;           /* modes + micro_batch, accum_steps, predicted_step_s / _peak_bytes */
    double step_s;            /* predicted seconds per optimizer step */
    double samples_per_s;     /* b N A / step_s */
    long long peak_bytes;     /* model peak */
    long long runtime_peak;   /* osdp_memory_predict's peak_total, -1 when not checked */
    int peak_op;              /* operator whose backward reaches the peak */
    long long mem_limit;      /* the limit used */
    int batches_tried;        /* micro-batches searched */
    long long searches;       /* knapsacks solved */
    long long nodes;          /* their nodes / states */
    double search_s;          /* wall seconds inside the knapsack solvers */
    double total_s;           /* wall seconds of the whole planner call */
    int timed_out;            /* dfs ran out of time: the plan may not be optimal */
    int tightened;            /* verification rounds that tightened the limit */
} osdp_planner_result;

void osdp_planner_defaults(osdp_planner_options *o);
/* The best plan for micro-batch b and accumulation `accum`: OSDP_OK,
 * OSDP_ERR_INFEASIBLE (message: smallest peak, dominant operators),
 * OSDP_ERR_INPUT, OSDP_ERR_OOM, OSDP_ERR_INTERNAL.  *res is initialised by
 * the call; free it with osdp_planner_result_free whatever the status. */
osdp_status osdp_planner_plan_batch(const osdp_layout *layout, const osdp_device *dev,
                                    const osdp_planner_options *o, int b, int accum,
                                    osdp_planner_result *res);
/* The scheduler over micro-batches (see above); with split_auto and / or
 * recompute_auto, over granularities and recomputed-block counts as well. */
osdp_status osdp_planner_run(const osdp_layout *layout, const osdp_device *dev,
                             const osdp_planner_options *o, osdp_planner_result *res);
/* Smallest model peak of any plan at micro-batch b; *plan (may be NULL)
 * gets one such plan (allocated). */
osdp_status osdp_planner_min_memory(const osdp_layout *layout, const osdp_device *dev,
                                    const osdp_planner_options *o, int b, long long *bytes, osdp_plan *plan);
void osdp_planner_result_free(osdp_planner_result *res);

#endif

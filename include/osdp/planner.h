/* The planner (rank 0): cost model + plan search + scheduler (DESIGN.md §4).
 *
 * Map of src/planner/ (each file calls only the ones listed below it):
 *   planner.c          driver: options, one micro-batch (plan_batch), the
 *                      scheduler over micro-batches, the infeasible message
 *   plan_search.c/.h   the search over the transient bound d (step 1 below)
 *   plan_bnb.c/.h      branch and bound for one d, constraint propagation
 *                      (step 2)
 *   plan_knap.c/.h     one knapsack over the allowed choices (through
 *                      osdp/search.h), its LP and byte-threshold bounds
 *   plan_knap_cache.c/.h  knapsack answers by allow set (a leaf)
 *   plan_pair.c/.h     a node's held bytes and one moment bounded together
 *                      (step 2: dynamic programming, a leaf over the context)
 *   plan_choices.c     builds the search context of one micro-batch: every
 *                      operator's choices and their peak terms, dominated
 *                      choices dropped
 *   plan_context.c/.h  the context (fields named after the formula below),
 *                      queries on a plan's peak terms, the best plan so far
 *   planner_mesh.c     the tensor-parallel degree of the mesh (plan --tp,
 *                      --tp auto): one scheduler run per candidate
 *   planner_pipeline.c the pipeline axis (plan --pp): the default stage
 *                      split, OSDP inside every stage, the micro-batch
 *   pipeline_cost.c    osdp/pipeline_cost.h: stages' passes, messages, the
 *                      pipeline's step by simulation
 *   cost_model.c       osdp/cost_model.h: per-operator memory and time
 *   device.c           osdp/device.h: device files and measurements
 *   search_*.c         osdp/search.h: the multiple-choice knapsack solvers
 *                      (search_prepare.c shared; search_exact.h: map of the
 *                      exact one's parts)
 *
 * For one micro-batch b (and accumulation A) the planner minimises the step
 * time sum_i T_i (osdp/cost_model.h) over one choice per operator, subject
 * to the TRUE peak of the runtime's schedule (not an additive
 * approximation) fitting the limit.  An operator's choices:
 *   - DP or ZDP; with --split g, k of g slices ZDP (k = 0..g); with --split
 *     auto, k of g for EVERY g in 1, 2, 4, 8 (split_max) the operator can
 *     be cut into, so each operator gets its own granularity (the
 *     embedding, a lookup, only DP or ZDP);
 *   - with --recompute auto, each of those with and without activation
 *     recompute, for every attn and mlp operator on its own (a block's two
 *     operators may differ; per operator includes every per-block plan).
 * Choices another choice of the same operator dominates in time and in
 * every term of the peak are dropped, as are, for an operator no transient
 * constraint can touch (below), those dominated in memory and time alone:
 * exchanging a dominated choice for its dominator never slows a plan nor
 * raises its peak, so the optimum is kept (src/planner/plan_choices.c).
 *
 * The peak (osdp/cost_model.h) written for the search (src/planner/plan_context.h):
 *     peak = cst + sum_i R_i + max(max_u Z_u, max_u F_u),   R_i = state + resident + acts,
 *     Z_u = f_{u-1} + wp_u + nx_{u+1} - sum_{j >= u+2} acts_j
 *     F_u = v_{u-1} + fw_u + fx_{u+1} - sum_{j >= u+2} acts_j
 * (wp: a backward's gradients, gathered slices and recomputed activations;
 * f: the prefetched first slice of the next backward; nx: the operator
 * after it still in flight, less its own activations, counted in R but
 * freed; F_u, the moment of u's forward: fw its gathered slices and
 * recomputed block, fx the next operator's first slice gathered ahead less
 * its activations, not yet made, v the previous one's widened output).
 * Both kinds of moment have one shape, and every step below treats them
 * alike (a moment, Z or F, in place of Z_u).  The max couples neighbours, and, with recompute decisions, every
 * operator after u+1 through its activations, so the search is not one
 * knapsack.  The planner makes it a sequence of multiple-choice knapsacks
 * solved by osdp/search.h:
 *   1. D = max_u Z_u takes one of finitely many values: f + wp + nx less a
 *      sum of the later activations, over all u and choices.  For each
 *      candidate d, ascending from the smallest reachable, the plans with
 *      D <= d and sum_i R_i <= limit - cst - d are exactly the plans that
 *      fit with transient bound d.  (Only operators u whose largest Z_u
 *      reaches the smallest D of any plan contribute candidates.)
 *   2. Within one d: choices that exceed d whatever their neighbours take
 *      are removed, then constraint propagation (a choice whose term
 *      exceeds the smallest one by more than the constraint's slack goes);
 *      the remaining constraints by branch and bound: solve the knapsack,
 *      and if its plan P violates Z_u <= d, with term values v_1..v_m of
 *      the other operators in Z_u, branch into "v_t < v_t(P), v_s >= v_s(P)
 *      for s < t" (t = 1..m) and "every v_s >= v_s(P), and wp_u fits what is
 *      left"; the branches exclude P and together keep every plan that
 *      respects Z_u.  The knapsack optimum bounds its branch from below;
 *      so does, in the time search, the knapsack of the peak at the moment
 *      of a violated Z_u alone (sum_i R_i + Z_u <= limit - cst, additive:
 *      the later activations, freed by then, count nothing), which closes
 *      the nodes whose branches would enumerate which later operators keep
 *      their activations; and the first node drops each choice whose LP
 *      bound, with the choice forced, cannot beat the best plan.  A node
 *      none of these closes is bounded by its two constraints at once,
 *      sum_i R_i <= budget and the violated Z_u <= d (plan_pair.c: exact by
 *      dynamic programming when Z_u's terms take few distinct sums, as with
 *      a stage's identical blocks under --recompute auto); that optimum's
 *      plan respects Z_u, and takes the knapsack's place: when it respects
 *      every moment it is the node's optimum, else the node branches on the
 *      moment it violates (GPT-2 small's TP 2 x DP 8 stage at 512 MiB,
 *      whose peak lies in the embedding's backward where every later
 *      activation is freed: 4.8M knapsacks, 4 min of CPU before; 39).  These
 *      bounds close only nodes with no strictly faster plan (a 1e-12
 *      margin): the optimum is kept.
 *   3. The answer is the best plan over all d.  The loop over d stops when
 *      the unrestricted knapsack at d (a lower bound for every larger d,
 *      whose budget is smaller) is no better than the best plan, or when its
 *      plan already respects d (then it is optimal for every larger d).
 *      Knapsack answers are cached by allowed set across d (an optimum that
 *      fits a smaller budget stays the optimum).  Minimising the peak (the
 *      no-fit message's smallest peak), the plan of each operator's fewest
 *      held bytes, priced at its true transient, is the first best plan
 *      (the smallest peaks lie at large d, which the loop reaches last), and
 *      knapsacks whose budget binds no plan are solved operator by operator.
 *   4. Ranges of d at once: the plans whose true D lies in [d_j, d_k] are
 *      among those with D <= d_k and sum_i R_i <= limit - cst - d_j (and,
 *      minimising the peak, a peak of at least sum_i R_i + d_j).  One
 *      branch and bound over that relaxation settles candidates j..k when
 *      none of its plans beats the best, or every plan it finds is what the
 *      relaxation says (it fits; minimising the peak, its D <= d_j);
 *      otherwise j is searched alone.  The range doubles while proofs
 *      succeed and shrinks when one fails.  A time search that needs the
 *      smallest peak first (the fewest-held plan does not fit) starts from
 *      that search's plan; one whose fewest-held plan fits, from that plan;
 *      then (search = exact) from plans near its optimum: the unrestricted
 *      knapsack at eight candidates d spread over their range, each
 *      repaired by solving again at the budget of its plan's true
 *      transient until a plan fits (a bound near the optimum early: GPT-2
 *      small's 8-rank stage at 900 MiB, 50 s of CPU before, 0.1 s).
 * GUARANTEE (any --split, --split auto, --recompute none/all/auto; search =
 * exact, or dfs when it did not time out): the plan returned has the
 * smallest step time of all plans (of all those choices) whose model peak
 * fits the limit, up to the search's time resolution (osdp/search.h: about
 * 2^-60 of the slowest plan); dfs and exact return plans of the same step
 * time, since every knapsack they are given has one answer under
 * osdp/search.h's tie rule (plans whose times differ only in the rounding
 * of their sums, blocks of one shape exchanging modes, are ties that
 * either may meet first: exact also starts from first plans).  One exception, flagged: should the later activations of some
 * operator u take more than 2^16 distinct sums (recompute auto on a model
 * with many blocks of different widths, where u's transient can still
 * reach the peak), only their smallest and largest are candidates; the
 * plan then fits but may not be optimal, and result.gap = 1 says so.  The
 * model peak equals the runtime's measured peak when param_bytes =
 * act_bytes = 4 (the CPU runtime's element size): there the chosen plan is
 * also checked with osdp_memory_predict() (the runtime's schedule,
 * osdp/schedule.h): a difference is OSDP_ERR_INTERNAL.
 *
 * Scheduler (osdp_planner_run): b = 1, 2, ... (with a global batch G: the
 * divisors b of G / N, A = G / (N b); otherwise A = 1) until no plan fits or
 * b > max_micro_batch; the plan with the highest predicted samples/s
 * b N A / step time wins (the smaller b on ties).  Micro-batches are
 * searched in the order of an LP bound on their throughput, each only for
 * plans faster per sample than the best so far, and no further once the
 * bound falls below it.  No plan at the first b: OSDP_ERR_INFEASIBLE, with
 * the smallest peak any plan needs (found by the same search, minimising
 * memory) and the three operators that dominate it. */
#ifndef OSDP_PLANNER_H
#define OSDP_PLANNER_H

#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/layout.h"
#include "osdp/model_config.h"
#include "osdp/plan.h"
#include "osdp/pipeline_cost.h"

typedef enum osdp_search_kind { OSDP_SEARCH_EXACT, OSDP_SEARCH_DFS } osdp_search_kind;
typedef enum osdp_mode_set {
    OSDP_MODES_ANY,       /* OSDP: any choice per operator */
    OSDP_MODES_ALL_DP,    /* baseline: every operator DP (ZeRO-2 traffic = DDP) */
    OSDP_MODES_ALL_ZDP    /* baseline: every operator ZDP (FSDP / ZeRO-3) */
} osdp_mode_set;

/* When operators reduce their gradients (osdp/plan.h's reduce-once) */
typedef enum osdp_grad_reduce {
    OSDP_GRAD_REDUCE_EVERY,   /* every micro-batch, every operator (the library's default) */
    OSDP_GRAD_REDUCE_AUTO,    /* per operator, the search chooses (with accumulation, A > 1) */
    OSDP_GRAD_REDUCE_ONCE     /* once per optimizer step, every operator */
} osdp_grad_reduce;

typedef struct osdp_planner_options {
    /* the step (osdp/geometry.h) as far as the caller fixes it: geo.n_ranks, the ranks planned over
     * (osdp_planner_run, _plan_batch: the data group's; osdp_planner_mesh, _pipeline, _3d: the whole
     * job's, which they divide by T and P); geo.micro_batch > 0: plan for this micro-batch only;
     * geo.prefetch, the runtime's prefetch (default 1); geo.pad_quantum, the runtime's shard padding
     * (osdp_compute_pad_quantum; 0 reads as 1).  The rest is the planner's to choose. */
    osdp_step_geometry geo;
    long long mem_limit;      /* bytes per rank; 0: the device's mem_limit */
    int global_batch;         /* sequences per optimizer step; 0: none (A = 1) */
    int max_micro_batch;      /* scheduler's last b (default 256) */
    int split;                /* g slices per operator (default 1: DP or ZDP) */
    osdp_search_kind search;  /* default exact */
    osdp_cost_kind cost;      /* default paper */
    osdp_mode_set modes;      /* default any */
    double dfs_time_limit_s;  /* for the whole run, dfs only (default 60) */
    int verify;               /* osdp_memory_predict check where it applies (default 1) */
    const int *recompute;     /* per operator: recompute activations (NULL: none) */
    int split_auto;           /* per operator, any k of any g in 1, 2, 4, .., split_max (the search chooses) */
    int split_max;            /* split_auto's largest g (0: 8) */
    int recompute_auto;       /* per attn / mlp operator, recompute or not (the search chooses) */
    osdp_grad_reduce grad_reduce; /* reduce-once per operator: never, the search's choice (only when A > 1:
                                 with one micro-batch it saves no traffic), or every operator */
    int vocab_quantum;        /* osdp_planner_mesh: the backend's vocabulary quantum for the layouts it
                                 builds (osdp_compute_vocab_quantum); 0 reads as 1 */
    /* a pipeline stage (osdp_planner_pipeline sets them; 0 otherwise): the cost model's in_flight,
       stage_buffer_bytes and next_passes (osdp/cost_model.h: osdp_pipe_after_backward, its wrap moment) */
    int stage_in_flight;
    long long stage_buffer_bytes;
    int stage_next_passes;
    /* the operators' choices already costed in this pipeline planning call (src/planner/choice_memo.h;
       the pipeline planner sets it for its stages' contexts; NULL: none kept) */
    struct osdp_choice_memo *choice_memo;
    /* the 3D search's baselines (osdp_planner_3d): bytes per parameter a DP
       operator keeps replicated beyond osdp's DP with reduce-once (which
       shards the optimizer state and holds the full gradients): plain DP
       the optimizer state (12 + c); charged (1 - 1/D) of them per parameter
       of a stage by osdp_planner_pipeline; 0 for OSDP and ZeRO-1 */
    int replicated_bytes_per_param;
    /* hierarchical slices (plan mode h) offered at these levels (osdp_cost_hierarchy_for_mesh on the
     * device as read); NULL: not offered */
    const osdp_cost_hierarchy *hierarchy;
    /* the searches that pick a mesh (osdp_planner_mesh, osdp_planner_pipeline, osdp_planner_3d) offer
     * plan mode h on each mesh where osdp_planner_hierarchy finds its levels (default 0: the library
     * offers it only when asked; the command line asks unless --no-hierarchical) */
    int offer_hierarchical;
    /* osdp_planner_plan_batch finding no plan: OSDP_ERR_INFEASIBLE without its message's smallest peak, a
     * memory search of its own (default 0: with it).  The 3D search sets it for its stages, whose messages
     * it drops but one, searched again for its words when nothing fits (src/planner/planner_3d.c). */
    int quiet_infeasible;
} osdp_planner_options;

typedef struct osdp_planner_result {
    osdp_plan plan;           /* modes + geo (micro_batch, accum_steps, tp_size), predicted_step_s / _peak_bytes */
    double step_s;            /* predicted seconds per optimizer step */
    double samples_per_s;     /* b N A / step_s */
    long long peak_bytes;     /* model peak */
    long long runtime_peak;   /* osdp_memory_predict's peak_total, -1 when not checked */
    int peak_op;              /* operator whose backward reaches the peak */
    int peak_forward;         /* 1: its forward does instead (osdp_cost_forward_moment) */
    long long mem_limit;      /* the limit used */
    int batches_tried;        /* micro-batches searched */
    long long searches;       /* knapsacks solved */
    long long cache_hits;     /* knapsacks answered from an earlier one */
    long long nodes;          /* their nodes / states */
    long long bound_cuts;     /* branch-and-bound nodes a moment's knapsack closed, and choices the first node's
                                 bound dropped (src/planner/plan_bnb.c) */
    double search_s;          /* wall seconds inside the knapsack solvers */
    double total_s;           /* wall seconds of the whole planner call */
    int timed_out;            /* dfs ran out of time: the plan may not be optimal */
    int tightened;            /* always 0: the limit is never tightened (kept for the JSON output) */
    double gap;               /* 0: optimal (see above); 1: not proven optimal (the exception above) */
} osdp_planner_result;

void osdp_planner_defaults(osdp_planner_options *o);
/* The levels plan mode h sees on the mesh of tp x dp x pp ranks on dev (the
 * device as read, before osdp_cost_device_for_mesh) when o offers it
 * (offer_hierarchical) and osdp_cost_hierarchy_for_mesh finds two levels
 * there: *buf, else NULL (one node, a flat device, nodes holding unequal
 * parts of a data group: h is not offered). */
const osdp_cost_hierarchy *osdp_planner_hierarchy(const osdp_planner_options *o, const osdp_device *dev, int tp, int dp,
                                                  int pp, osdp_cost_hierarchy *buf);
/* The best plan for micro-batch b and accumulation `accum`: OSDP_OK,
 * OSDP_ERR_INFEASIBLE (message: smallest peak, dominant operators),
 * OSDP_ERR_INPUT, OSDP_ERR_OOM, OSDP_ERR_INTERNAL.  *res is initialised by
 * the call; free it with osdp_planner_result_free whatever the status. */
osdp_status osdp_planner_plan_batch(const osdp_layout *layout, const osdp_device *dev,
                                    const osdp_planner_options *o, int b, int accum,
                                    osdp_planner_result *res);
/* The scheduler over micro-batches (see above); split_auto and
 * recompute_auto are choices of the search itself. */
osdp_status osdp_planner_run(const osdp_layout *layout, const osdp_device *dev,
                             const osdp_planner_options *o, osdp_planner_result *res);
/* Smallest model peak of any plan at micro-batch b; *plan (may be NULL)
 * gets one such plan (allocated). */
osdp_status osdp_planner_min_memory(const osdp_layout *layout, const osdp_device *dev,
                                    const osdp_planner_options *o, int b, long long *bytes, osdp_plan *plan);
void osdp_planner_result_free(osdp_planner_result *res);

/* The mesh N = T x D (DESIGN.md §9): the tensor-parallel degree T.
 *
 * osdp_planner_mesh plans the job of o->n_ranks = N ranks (all of them;
 * o->global_batch, when given, the sequences per optimizer step over the
 * whole mesh, D x b x A) with tensor-parallel degree tp, or, with tp =
 * OSDP_TP_AUTO, chooses it: every divisor T of N is a candidate; it is
 * excluded when T does not divide every block's heads (the layout refuses
 * it) or does not divide the device's ranks_per_node (a tensor-parallel
 * group sits inside a node: osdp_planner_tp_node_why; no bound when the file
 * does not state it).  Each remaining
 * candidate is planned by osdp_planner_run on the layout of one rank's parts
 * (osdp_layout_build_tp with o->vocab_quantum) over D = N / T data-parallel
 * ranks; the best is the one of highest predicted samples per second
 * b D A / step_s among those a plan fits (with a global batch: the shortest
 * step), the smaller T on ties.  An explicit tp is one candidate whose
 * exclusion is an OSDP_ERR_INPUT naming --tp, the ranks, the heads or the
 * node size.  No candidate fits: the status of the first candidate's
 * scheduler (OSDP_ERR_INFEASIBLE with its message); other errors are
 * returned as they are.  mesh->result.plan.geo.tp_size is the chosen T. */
#define OSDP_TP_AUTO 0   /* the same value as --tp auto's (cli/options.h) */
#define OSDP_MAX_TP_CANDIDATES 32

typedef struct osdp_tp_candidate {
    osdp_step_geometry geo;   /* T = geo.tp_size, D = geo.n_ranks = N / T; its best plan's micro_batch and
                                 accum_steps (OSDP_OK) */
    char excluded[256];       /* why T is not a candidate ("" when it is one) */
    osdp_status status;       /* OSDP_OK: planned; OSDP_ERR_INFEASIBLE: no plan fits */
    double step_s;            /* its best plan's predicted step (OSDP_OK) */
    double samples_per_s;     /* b D A / step_s */
    long long peak_bytes;     /* per rank */
} osdp_tp_candidate;

typedef struct osdp_mesh_choice {
    int n_candidates;         /* the divisors of N (auto), or the one tp asked */
    osdp_tp_candidate cand[OSDP_MAX_TP_CANDIDATES];
    int best;                 /* index in cand of the chosen T, -1 when none fits */
    osdp_layout layout;       /* the chosen T's layout (one rank's parts); free with the choice */
    osdp_planner_result result;   /* the chosen T's plan (plan.geo.tp_size = T) */
} osdp_mesh_choice;

osdp_status osdp_planner_mesh(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                              const osdp_planner_options *o, int tp, osdp_mesh_choice *mesh);
/* 1, and why (naming --tp and the device's ranks_per_node) in why[0 .. n), when a tensor-parallel group
 * of tp consecutive ranks would straddle dev's nodes (osdp_cost_tp_spans_nodes); 0 and "" when it sits
 * inside one.  Every search that takes a given --tp (one stage, --pp P, --pp auto) refuses such a tp
 * with this message, as train does for its nodes. */
int osdp_planner_tp_node_why(int tp, const osdp_device *dev, char *why, size_t n);
void osdp_mesh_choice_free(osdp_mesh_choice *mesh);

/* The pipeline axis N = P x D x T (DESIGN.md §9, osdp/pipeline.h).
 *
 * osdp_planner_stage_split: the default split of `train --pp P` without
 * --stages.  Every operator's time T_i under `plan` (NULL: every operator
 * DP, unsplit) from cm (the whole layout, N = the data-parallel ranks) at
 * micro-batch b of accum micro-batches, balanced by
 * osdp_stage_split_balanced (contiguous stages, the largest stage's sum of
 * T_i smallest; ties: the earliest boundaries).  bounds gets P + 1 entries.
 *
 * osdp_planner_pipeline: `plan --pp P` (and the per-mesh step of a (P, T,
 * D) search).  D = N / (P T).  The layout of one rank's tensor-parallel
 * parts; the stages' bounds given, or (NULL) osdp_planner_stage_split of
 * all-DP times at micro-batch 1.  The step's micro-batches: with
 * o->global_batch G, every micro-batch b dividing G / D, M = G / (D b);
 * without, M = OSDP_PIPE_DEFAULT_MICRO_PER_STAGE x P and b = 1, 2, ...
 * (o->geo.micro_batch: that b alone).  For each b, each stage s is planned
 * alone (osdp_planner_plan_batch: the exact per-operator search over its
 * operators, its D ranks and the memory limit) with the micro-batches it
 * holds, osdp_pipe_in_flight (1F1B: min(P - s, M); GPipe: M), and its
 * message buffers in its peak; the step is osdp_pipe_step_time of the
 * stages' plans.  The search's peak is the stage's, osdp_pipe_stage_peak,
 * its wrap moment included (the first operator's backward prefetching the
 * next pass's first slice, osdp/cost_model.h); a stage plan whose peak
 * differs is OSDP_ERR_INTERNAL.  The b of the highest samples per second b D M / step
 * wins (the smaller b on ties); b stops growing at the first that some
 * stage cannot fit.  No b fits: OSDP_ERR_INFEASIBLE naming the stage.
 * Each stage's peak is also evaluated on the runtime's stage schedule
 * (osdp_schedule_predict with the pipeline options) where the planner
 * verifies peaks (osdp_planner_options.verify, element sizes of 4 or bf16
 * weights): schedule_peak, -1 otherwise. */
#define OSDP_PIPE_DEFAULT_MICRO_PER_STAGE 4

typedef struct osdp_stage_plan {
    int lo, hi;               /* operators [lo, hi) */
    int in_flight;            /* micro-batches held between forward and backward */
    osdp_planner_result result;   /* its plan over its operators (result.plan.n_ops = hi - lo) */
    double busy_s;            /* sum of its operators' T_i: M (forward + backward) */
    osdp_pipe_stage_cost pass;    /* one micro-batch's forward and backward */
    long long peak_bytes;     /* the cost model's peak of the stage per rank */
    long long schedule_peak;  /* the runtime stage schedule's, -1 when not evaluated */
    long long replicated_bytes;   /* a baseline's replicated state per rank (in both peaks; 0 for OSDP) */
    long long p2p_bytes;      /* sent per step by one of its ranks */
} osdp_stage_plan;

typedef struct osdp_pipe_choice {
    /* the step (osdp/geometry.h): the mesh geo.pp_size x geo.n_ranks (D) x geo.tp_size, the schedule
     * geo.pipe_schedule, the stages' geo.stage_bounds, b = geo.micro_batch and M = geo.accum_steps;
     * the options' prefetch, padding and weights */
    osdp_step_geometry geo;
    int bounds_given;         /* 1: the caller's; 0: the balanced default */
    int n_stages_planned;     /* stages holding a plan (P once planned) */
    osdp_stage_plan stage[OSDP_MAX_STAGES];
    osdp_layout layout;       /* one rank's parts (tp_size); valid when layout_built */
    int layout_built;
    osdp_plan plan;           /* the whole model's: the stages' plans in order (plan.geo = geo) */
    osdp_pipe_timing timing;
    double step_s, samples_per_s;     /* timing.step_s; b D M / step_s */
    int memory_bottleneck;    /* the stage of the largest peak (schedule peak where evaluated) */
    int batches_tried;
    double total_s;           /* wall seconds of the call */
    int hierarchical;         /* 1: plan mode h offered at the levels of `hierarchy` (osdp_planner_hierarchy) */
    osdp_cost_hierarchy hierarchy;
} osdp_pipe_choice;
/* &c->hierarchy when plan mode h was offered on c's mesh, else NULL (a cost model's hier) */
const osdp_cost_hierarchy *osdp_pipe_choice_hierarchy(const osdp_pipe_choice *c);
/* *cm: the cost model of c's mesh for layout (c's whole layout, or one stage's): its data group's ranks,
 * o's geometry and cost kind, plan mode h at c's levels; dev as the mesh sees it
 * (osdp_cost_device_for_mesh) */
void osdp_pipe_choice_cost_model(osdp_cost_model *cm, const osdp_pipe_choice *c, const osdp_device *dev,
                                 const osdp_planner_options *o, const osdp_layout *layout);

osdp_status osdp_planner_stage_split(const osdp_cost_model *cm, const osdp_plan *plan, int micro_batch, int accum,
                                     int P, int *bounds);
osdp_status osdp_planner_pipeline(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                                  const osdp_planner_options *o, int tp, int pp, const int *bounds,
                                  osdp_pipe_schedule schedule, osdp_pipe_choice *out);
void osdp_pipe_choice_free(osdp_pipe_choice *choice);

/* The 3D search (issue 16): the mesh N = P x D x T, T inside a node, the
 * stage split, the micro-batch and the micro-batches per step, and inside
 * each the exact per-operator search of every stage (osdp_planner_pipeline;
 * the per-operator choices are osdp_planner_plan_batch's, so a mode added
 * there, e.g. hierarchical sharding, is searched here too).
 *
 * osdp_planner_3d, for one kind of plan:
 *   OSDP_3D_OSDP       any per-operator choice (o->modes as given)
 *   OSDP_3D_DEEPSPEED  DeepSpeed-3D-like: every operator DP with ZeRO-1 on the
 *                      data axis (full weights and gradients, the optimizer
 *                      state sharded): osdp's DP with every operator
 *                      reduce-once (its accumulated gradients are ZeRO-1's
 *                      whole ones, reduced once per step)
 *   OSDP_3D_MEGATRON   Megatron-like: TP x PP x DP, plain DP (weights,
 *                      gradients and optimizer state all replicated; the
 *                      gradients reduce-once, as Megatron's main_grad)
 *   OSDP_3D_FSDP       every operator ZDP, P = T = 1, gradients reduced
 *                      every micro-batch (ZeRO-3)
 *   OSDP_3D_DDP        plain DP, P = T = 1, reduce-once (DDP's no_sync)
 * Meshes: every (P, T) with P T dividing N, T dividing ranks_per_node (when
 * stated) and every block's heads, P at most the operators and
 * OSDP_MAX_STAGES (a fixed pp or tp > 0: that one alone).  A mesh is out
 * without a search when its fully sharded optimizer state alone,
 * (12 + e_g + c) total_params / (P D), exceeds the limit.  Stage splits:
 * every contiguous split of the operators when there are at most
 * o3->split_enum_limit of them (default 512), else the cost model's
 * balanced split (osdp_planner_stage_split); each is planned by
 * osdp_planner_pipeline (the micro-batch and M for the global batch).  The
 * best has the highest samples per second (with a global batch: the
 * shortest step), ties to the smaller P, then the smaller T, then the
 * earlier split.  GUARANTEE: where every split was enumerated, the result
 * is the best over meshes x splits x micro-batches of the per-stage
 * optima (each stage's plan the fastest that fits, osdp_planner_plan_batch);
 * tests/planner/test_planner_3d.c checks it against exhaustive enumeration.
 * Speed (with a global batch, 1F1B or GPipe): each (mesh, b) gets a lower
 * bound on its step before any stage is searched
 * (src/planner/planner_3d_bound.h: every operator's fastest choice; a
 * balanced split's stages also their LP bound under the memory limit); the
 * candidates are planned from the smallest bound up and the search stops
 * at the first bound above the best step; a split, and the stages of a
 * split once some are planned, are skipped by the same bounds; the
 * answer's stage peaks are checked against the runtime's schedule once;
 * a stage of the same contents, mesh, b, M and pass order as one searched
 * before reuses its result (src/planner/stage_cache.h).  Ties still go to
 * the earlier (P, T, split, b) of the enumeration order.
 * Interleaving (o3->virtual_stages): each (mesh, b) planned under 1F1B on
 * its balanced split (osdp_pipe_balanced_split, the split plan --pp P
 * takes) is also run with V chunks per stage for every V of the range
 * (osdp_pipe_interleave_choose, osdp/pipeline_interleave.h: V dividing the
 * layers per stage, M a multiple of P, the P V chunks cut anew to balance
 * the stages' plans, the runtime schedule's peak of every stage within its
 * limit); the answer is the best over (mesh, split, b) with V = 1 and
 * (mesh, balanced split, b) with each V >= 2, and its geo names the
 * schedule, V and the P V chunks.  The bounds are then the smaller of
 * 1F1B's and the interleaved schedule's (planner_3d_bound.h);
 * tests/planner/test_planner_3d_interleave checks the answer against
 * exhaustive enumeration.  With a global batch; without one, V is chosen on
 * the b the pipeline's planner chose under 1F1B. */
typedef enum osdp_3d_kind {
    OSDP_3D_OSDP, OSDP_3D_DEEPSPEED, OSDP_3D_MEGATRON, OSDP_3D_FSDP, OSDP_3D_DDP, OSDP_3D_KINDS
} osdp_3d_kind;

#define OSDP_3D_V_AUTO (-1)
typedef struct osdp_3d_options {
    int pp, tp;               /* 0: searched; > 0: fixed */
    osdp_pipe_schedule schedule;
    /* the interleaved schedule's chunks per stage, V: 0 (or 1) none, the schedule as given, unless it is
     * interleaved, then every V >= 2 is searched; V >= 2 with schedule interleaved: that V alone;
     * OSDP_3D_V_AUTO: the schedule as given (V = 1) or interleaved with any V >= 2, whichever is faster */
    int virtual_stages;
    int split_enum_limit;     /* enumerate every split up to this many per mesh (0: 512) */
} osdp_3d_options;

typedef struct osdp_3d_result {
    osdp_status status;       /* OSDP_OK, or why no mesh fits (message below) */
    char message[2048];
    osdp_pipe_choice best;    /* the chosen mesh, split, batch and plan (valid when OSDP_OK) */
    int meshes, meshes_pruned, splits_planned;
    int candidates;           /* meshes x micro-batches (x splits) the search ordered by their bounds */
    int candidates_bounded;   /* of them, left unplanned: their bound above the best step found */
    int splits_bounded;       /* enumerated splits left unplanned by their own bound */
    int aware_bounds;         /* candidates of one (balanced) split whose memory-aware bound was made: those the
                                 search reached before their step bound alone exceeded the best step */
    long long stage_reuses;   /* stage searches answered by an earlier stage of the same contents */
    double total_s;           /* wall seconds of the call */
    double cpu_s;             /* the process's CPU seconds in the call (a shared machine's waits left out) */
} osdp_3d_result;

const char *osdp_3d_kind_name(osdp_3d_kind kind);
/* status OSDP_OK or OSDP_ERR_INFEASIBLE in res->status; other errors returned */
osdp_status osdp_planner_3d(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                            const osdp_planner_options *o, const osdp_3d_options *o3, osdp_3d_kind kind,
                            osdp_3d_result *res);
void osdp_3d_result_free(osdp_3d_result *res);

#endif

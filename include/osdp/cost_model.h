/* The cost model: time and memory of every operator in every mode, and the
 * peak memory of a whole plan, for N ranks and a micro-batch of b sequences.
 *
 * Every buffer's bytes come from the size table (osdp_buffer_bytes,
 * osdp/schedule.h) that the runtime's schedule allocates by, read with the
 * device's element widths: the terms below name its entries.  Operator i is cut into g slices by
 * osdp_op_split (the runtime's own cut), of which the first k are ZDP
 * (g = 1: k = 0 DP, k = 1 ZDP); slice s has p_s elements once padded to a
 * multiple of N, P = sum_s p_s.  An operator that cannot be split (the
 * embedding) is costed unsplit, and 0 < k < g is not a choice for it
 * (a prohibitive time, 1e30 s).  e = device param_bytes (gathered weights and
 * all-gathers), e_g = device grad_bytes (full gradients and reduce-scatters),
 * a = device act_bytes (activations, workspace).  Bytes per rank:
 *   state    (12 + e_g + c) P / N   fp32 master, AdamW m and v, the gradient of
 *                             the shards; c = e when e < 4 (the rounded copy of
 *                             the master shard that is all-gathered), else 0:
 *                             16 for fp32, 18 for osdp's bf16 (e 2, e_g 4), and
 *                             ZeRO's 16 for fp16 weights and gradients
 *   resident sum_{s >= k} p_s e   DP slices' full weights, kept all step
 *   acts     b act_floats_per_seq a     alive from its forward to its backward;
 *              with recompute only its output, b kept_floats_per_seq a
 *   rebuilt  recompute: the rest, b act_floats_per_seq a - acts, alive again
 *              during its recomputed forward and its backward
 *   bf16 residual stream (geo.residual_dtype, osdp/schedule.h), a recomputed
 *   operator that is not the last of a stage's layout (whose output is sent on):
 *   narrow, acts = b kept_floats_per_seq r (r = 2, bf16) and rebuilt its whole
 *   block b act_floats_per_seq a (its fp32 output slot included), and
 *            v = b kept_floats_per_seq a: that output widened, alive during
 *              the next operator's forward and its backward pass (v = 0 when
 *              not narrow); a term of this operator's choice, added to the
 *              next operator's backward moment like f
 *   grads    G = P e_g        full gradients during its backward
 *   accum    Q e_g            a reduce-once operator's (osdp/plan.h) gradients of its
 *              reduce-once slices, the last J: Q = sum_{s >= g-J} p_s (all: Q = P),
 *              summed over the step's micro-batches, kept all run
 *   recv     H = (P - Q) e_g / N   reduce-scatter destination during its backward,
 *              of the slices reduced every micro-batch (0 when all reduce once:
 *              they reduce into its shard)
 *   work     w = max_s ([s < k] p_s e + [prefetch, s >= 1, s - 1 < k] p_{s-1} e):
 *              its backward goes down the slices, holding slice s when ZDP
 *              and, with prefetch, slice s-1 gathered ahead
 *   prefetch f = [k = g] p_{g-1} e (recompute: [k > 0] p_0 e, the first slice of
 *              the recomputed forward): its first backward slice when ZDP, gathered
 *              from the start of the backward of the operator after it (in
 *              backward order) to hide behind all of that operator's compute
 *   workspace W = osdp_workspace_floats(layout, b) a     (one, all step)
 *              + b tp_floats_per_seq(head) a: on a tensor-parallel layout
 *              (osdp_layout_build_tp) the staging of the vocab-parallel
 *              cross-entropy's all-gather, also allocated once at setup
 *              (osdp_cost_workspace returns both)
 *
 * On a tensor-parallel layout everything above is of the rank's parts and N
 * is the data-parallel ranks; the in-place all-reduces of activations and
 * input gradients need no buffer.
 *
 * Peak (the runtime's schedule, osdp/runtime.h; ops 0..n-1):
 *   peak = W + sum_i (state_i + resident_i) + max_u ( K_u + Y_u )
 *   K_u  = sum_{j <= u} acts_j + rebuilt_u + G_u + [prefetch, u + 1 < n] (G_{u+1} + H_{u+1})
 *          + [tied head, u > 0] G_0   (the head's d(wte) goes into the embedding's
 *          gradients, allocated at the head's backward: the embedding is then DP,
 *          unsplit, so G_0 = P_0 e_g whatever the plan)
 *   Y_u  = max(w_u, H_u) + [prefetch, u > 0] f_{u-1} + [u > 0] v_{u-1}
 * A reduce-once operator (osdp/plan.h) adds accum_i to the all-step sum
 * (state_i + resident_i + accum_i) and has no H: its backward adds its G
 * into accum and frees it at once, and its one reduction per step goes
 * from accum straight into its gradient shard; so its in-flight term
 * [prefetch] (G + H) is 0 too (its pass keeps rebuilt + G + work).  With
 * some slices only (0 < J < g) its G stays until the other slices'
 * reduce-scatters complete, as any operator's, with the H of those slices.
 * The maximum is reached during some operator's backward: its gradients,
 * its gathered slices (or, just after, its receive buffer), the next
 * backward operator's prefetched weights and, with prefetch, the previous
 * operator's reduce-scatter still in flight (its gradients and receive
 * buffer), on top of the activations of every operator not yet
 * back-propagated; or during some operator's forward:
 *   F_u  = sum_{j <= u} acts_j + rebuilt_u + fw_u + [prefetch, u + 1 < n] ff_{u+1} + [u > 0] v_{u-1}
 *   fw   = max_s ([s < k] p_s e + [prefetch, s + 1 < k] p_{s+1} e): its whole
 *          block alive, slice s and, with prefetch, slice s+1 gathered ahead;
 *          the layout's last operator adds, with prefetch, the first slice of its
 *          next pass, its own backward: not recomputed, [k = g] p_{g-1} e while
 *          s + 1 < g - 1; recomputed, at s = g - 1 > 0, [k > 0] p_0 e
 *   ff   = [k > 0] p_0 e   its first slice, gathered from the start of the
 *          forward before it
 *   peak = W + sum_i (...) + max(max_u (K_u + Y_u), max_u F_u)
 * F_u <= K_u + Y_u while operator u+1 has a reduce-scatter in flight (its
 * G_{u+1} >= ff_{u+1}, and G_u >= fw_u): only a reduce-once operator (every
 * slice) after u lets u's forward be the peak, as a big head after a
 * recomputed block does (megatron_1p7b at B 4 and 8, 32 ranks).  The search's
 * terms (src/planner/plan_context.h) bound both kinds of moment: F_u has
 * K_u's shape (u's own term, its neighbours' ff_{u+1} and v_{u-1}, the
 * activations before it), so every plan the planner returns fits the limit
 * at every moment.  Recomputed forwards never exceed the backward (at most
 * three slices, less than G_u).  This is
 * a closed-form rewrite of the runtime schedule's evaluation (osdp/schedule.h,
 * osdp_memory_predict), kept for the search's speed: for a = e_g = 4 and
 * e = 4 or 2 the two are equal byte for byte (fp32 or bf16 weights, split,
 * recompute or not), and equal to the peak the runtime measures
 * (tests/runtime/test_schedule.c proves it on random plans).
 *
 * Time per operator for one optimizer step of A micro-steps (accum_steps):
 *   compute  = A (gamma_fixed_type + b T F_i gamma_type)   (F_i: osdp_cost_op_flops)
 *              + P / N step_shard_param + A P step_full_param (its shard's
 *              optimizer step; zeroing its full gradients each micro-step)
 *   AG_s = (N-1)(alpha_ag + S_s/N beta_ag),  RS_s = (N-1)(alpha_rs + S_s/N beta_rs),
 *   S_s = p_s e bytes for AG_s, p_s e_g for RS_s (one slice: each slice is
 *   its own collective)
 *   comm     = sum_{s >= k} (AG_s + A RS_s) + sum_{s < k} (2 A AG_s + A RS_s)
 *              (DP: weights gathered once per step, ZDP: twice per
 *              micro-step; gradients reduce-scattered every micro-step.
 *              A = 1, g = 1 and equal AG/RS costs give the paper's eq. 2:
 *              c (N-1)(alpha + S/N beta) with c = 2 DP, 3 ZDP)
 *   reduce-once (osdp/plan.h): A RS_s becomes RS_s for each of its
 *              reduce-once slices s >= g - J (one reduction per step of the
 *              accumulated gradients), and compute gains A Q step_full_param
 *              (adding each micro-step's into them)
 *   recompute: compute x 4/3 (the forward again) and ZDP slices gathered a
 *              third time per micro-step (2 A AG_s becomes 3 A AG_s)
 *   paper    T_i = compute + comm
 *   overlap  T_i = max(compute, comm) when prefetch is on (the operator's
 *              collectives run while compute proceeds, so the slower of the
 *              two bounds it), compute + comm without prefetch.
 *
 * Tensor parallelism (osdp/layout.h, DESIGN.md §9).  With a layout of one
 * rank's parts (osdp_layout_build_tp, tp_size t > 1) N is the data-parallel
 * degree, everything above applies to the rank's parts (its F_i is its
 * part's FLOPs: compute divided by t), and the tensor-parallel group's
 * collectives are added to T_i.  They are blocking (the runtime waits for
 * them between kernels), so neither cost kind overlaps them:
 *   AR(S)    = 2 (t-1)(alpha_tp + S/t beta_tp)   a ring all-reduce of S bytes
 *              (each rank sends and receives 2 (t-1)/t S)
 *   S_i      = b T d_i r   the residual stream (b, T, d_i): r = 4, or 2 under a
 *              bf16 residual stream, whose all-reduces move bf16 (osdp/schedule.h)
 *   tp_comm  = A x  embed  AR(S_0)                forward: the lookups summed
 *                   attn,  (2 + rc) AR(S_i)       forward after the row-parallel
 *                   mlp                           product (again when recomputed),
 *                                                 backward before the LayerNorm's
 *                   head   AR(S_L)                backward: d(ln_f) summed
 *                          + (t-1)(alpha_tp + 3 b T 4 beta_tp)
 *                                                 forward: each rank's 3 statistics
 *                                                 per token all-gathered
 *   T_i      = (paper or overlap T_i) + tp_comm
 * (alpha_tp, beta_tp: the device's [tp_all_reduce]; the all-gather, a ring
 * of t-1 steps, is priced with them too.)  tp_size 1: tp_comm = 0 and T_i is
 * bit for bit what it was.
 * Step time = sum_i T_i + the step's scalar all-reduce (osdp_cost_step_sync_time).
 *
 * A pipeline stage (osdp/pipeline_cost.h; the layout then holds the stage's
 * operators alone).  The stage holds up to `in_flight` micro-batches
 * between their forward and backward; at its peak (a backward, as above)
 * the other in_flight - 1 hold all their activations:
 *   held     (in_flight - 1) acts    per operator, all step (acts: the
 *              recompute-aware bytes above)
 *   peak    += sum_i held_i, and W += stage_buffer_bytes (the stage's
 *              message buffers: they do not depend on the plan)
 * in_flight 0 or 1 and stage_buffer_bytes 0: the peak is what it was.
 *
 * The stage's wrap moment (prefetch on, next_passes: osdp_pipe_after_backward).
 * The backward of the stage's first operator prefetches, from its first
 * slice on, the first slice of the stage's next pass, the other in_flight - 1
 * micro-batches held as above (whatever follows a backward at fewer also
 * follows one at the most, osdp/pipeline.h):
 *   wrap = acts_0 + X + [n > 1] [prefetch] (G_1 + H_1)   (K_0's, but for X)
 *   X    = [then a forward]   rebuilt_0 + G_0 + max(w_0, H_0, a_0)
 *          [then a backward]  n > 1: rebuilt_0 + G_0 + max(w_0, H_0) + f_{n-1}
 *                                    (the last operator's first backward slice)
 *                             n = 1: rebuilt_0 + G_0 + max(w_0, H_0, r_0)
 *   a    = [w over slices s >= 2 > 0] (max_{s >= 2} w_s + [k > 0] p_0 e): the
 *          forward's slice 0 gathered for the next pass, while slices s >= 2
 *          are in use (from slice 1 on the backward holds it anyway)
 *   r    = recompute: a (the next backward recomputes from slice 0); else
 *          [g > 1] (max([k > 0] p_0 e, H) + f): its own slice g-1 again,
 *          held from the start, with slice 0 or, just after, its receive
 *          buffer
 *   peak = max(peak above, W + sum_i held_i + wrap)
 * (osdp_op_peak_terms: pass_peak_then_forward and pass_peak_again are X's
 * first and third lines for each operator's choice; the search's terms,
 * src/planner/plan_context.h). */
#ifndef OSDP_COST_MODEL_H
#define OSDP_COST_MODEL_H

#include "osdp/device.h"
#include "osdp/geometry.h"
#include "osdp/layout.h"
#include "osdp/memory.h"
#include "osdp/pipeline.h"
#include "osdp/plan.h"

typedef enum osdp_cost_kind { OSDP_COST_PAPER, OSDP_COST_OVERLAP } osdp_cost_kind;

/* A cache of the runtime's cuts (osdp_op_split) per operator and g, for
 * callers that cost the same operators many times (the planner) */
typedef struct osdp_cost_cuts osdp_cost_cuts;
osdp_cost_cuts *osdp_cost_cuts_new(int n_ops);   /* NULL: out of memory */
void osdp_cost_cuts_free(osdp_cost_cuts *c);

/* A data group that spans n = N / R >= 2 nodes with R of its ranks on
 * each (on a two-level device: osdp_cost_hierarchy_for_mesh) reduces every
 * slice's gradients node-first (osdp/runtime.h), so a slice's reduce-scatter
 * of G = p_s e_g bytes costs, in place of RS_s above,
 *   RSn + RSx  = (R-1)(alpha_rsn + G / R beta_rsn) + (n-1)(alpha_rsx + H / n beta_rsx)
 *              in-node, then across the nodes of each rank's H = G / R
 * (in-node [reduce_scatter], then [internode_reduce_scatter]); its
 * all-gathers stay one ring over the N ranks at the inter-node figures.
 * Two calls instead of one; over the link each rank sends (n-1)/n of H, not
 * the flat ring's (N-1)/N of G.
 *
 * Hierarchical slices (plan mode h, osdp/plan.h) on such a group: a ZDP
 * operator (unsplit) sharded over the R ranks of its data group on one
 * node, replicated across the n nodes.  Its terms are ZDP's with the shard
 * of P / R (still padded to a multiple of N, as the runtime pads):
 *   state    (12 + e_g + c) P / R      recv  P e_g / R
 *   comm     (2 or 3 with recompute) A AGn + A (RSn + RSx + AGx)
 *   AGn      = (R-1)(alpha_agn + P e / R beta_agn)      in-node all-gather
 *   RSn, RSx   the flat slice's node-first reduction above (G = P e_g)
 *   AGx      = (n-1)(alpha_agx + H / n beta_agx)        across the nodes: every
 *              node gets back the whole in-node shard H = P e_g / R (RSx + AGx:
 *              the ring all-reduce of H across the nodes, as its two halves)
 * with the device's in-node [all_gather] / [reduce_scatter] for the first
 * level and its [internode_*] for the second. */
typedef struct osdp_cost_hierarchy {
    int node_ranks;                                            /* R */
    osdp_collective_cost node_all_gather, node_reduce_scatter;    /* in-node */
    osdp_collective_cost cross_all_gather, cross_reduce_scatter;  /* across nodes */
} osdp_cost_hierarchy;

typedef struct osdp_cost_model {
    const osdp_layout *layout;
    const osdp_device *dev;
    /* the step (osdp/geometry.h): N = geo.n_ranks, the data group's ranks; geo.pad_quantum, the shard
     * padding (osdp_padded_numel_quantum; 0 reads as 1, the CPU's); geo.prefetch, the runtime's
     * prefetch (train's default: on).  The micro-batch b and the accumulation are each call's. */
    osdp_step_geometry geo;
    osdp_cost_kind kind;
    const int *recompute;   /* per operator, NULL: none (peak and step time use the plan's) */
    osdp_cost_cuts *cuts;   /* optional cache of the cuts of this layout (NULL: none) */
    int in_flight;          /* a pipeline stage's micro-batches held at once (0 or 1: none extra) */
    long long stage_buffer_bytes;   /* a pipeline stage's message buffers (0: none) */
    const osdp_cost_hierarchy *hier;    /* the levels of hierarchical slices; NULL: priced as ZDP (one node) */
    const int *reduce_once; /* per operator J: its last J slices reduce once (at least g: all of them; osdp/plan.h);
                               NULL: none reduce once (peak and step time use the plan's) */
    int next_passes;        /* a pipeline stage: OSDP_PIPE_THEN_* of its wrap moment (osdp_pipe_after_backward; 0: none) */
} osdp_cost_model;

/* The one way to make a cost model: of layout on dev for the step geo (its n_ranks, pad_quantum and
 * prefetch; copied), priced by kind, with hierarchical slices at the levels hier (NULL: none, priced
 * as ZDP).  The rest starts empty (no recompute, no reduce-once, no cuts cache, not a pipeline
 * stage): the caller sets recompute, reduce_once, cuts, in_flight and stage_buffer_bytes after. */
void osdp_cost_model_init(osdp_cost_model *cm, const osdp_layout *layout, const osdp_device *dev,
                          const osdp_step_geometry *geo, osdp_cost_kind kind, const osdp_cost_hierarchy *hier);

/* 1 when operator op can be cut into g slices (never the embedding) */
int osdp_cost_can_split(const osdp_cost_model *cm, int op, int g);

typedef struct osdp_op_mem {
    long long state, resident, acts, rebuilt, grads, recv, work, prefetch;
    long long view;         /* a narrow operator's kept output widened, during the next operator's passes */
    long long held;         /* a pipeline stage: the other in-flight micro-batches' activations */
    long long wrap_forward;     /* a of the stage's wrap moment (above): its slice 0 prefetched for the next pass */
    long long wrap_again;       /* r of the stage's wrap moment: a one-operator stage's next backward prefetched */
    int reduce_once;            /* J: its last J slices reduce once per step (cm->reduce_once, at most g) */
    int once_all;               /* every slice does (J = g): its full gradients freed after its backward */
    long long accum;            /* then those slices' accumulated gradients, all run (0 otherwise) */
    long long forward_first;    /* ff: its forward's first slice when ZDP, gathered during the forward before */
    long long forward_work;     /* fw: its gathered slices at its forward's largest (the formula above) */
    long long forward_work_last;    /* fw as a layout's last operator (its next pass's first slice with them) */
    long long wrap_again_recv;  /* of wrap_again (r), its receive buffer H when that, not p_0 e, is the larger */
} osdp_op_mem;

/* What one operator's choice adds to a plan's peak, by when its buffers
 * live (the formula above; the search's R, wp, f, nx, plan_context.h):
 * osdp_cost_peak and the search read these terms alone, so a buffer whose
 * lifetime a choice changes changes both at once. */
typedef struct osdp_op_peak_terms {
    long long held;         /* all step: state + resident + held */
    long long acts;         /* from its forward to its backward */
    long long pass_peak;    /* at its backward: rebuilt + G + max(work, recv), + G_0 of a tied head */
    long long prefetch;     /* during the backward of the operator after it: [prefetch] f + v */
    long long in_flight;    /* during the backward of the operator before it: [prefetch] (G + H) */
    /* as the first operator of a pipeline stage, at its wrap moment (above): pass_peak when the stage's next
     * pass is a forward (max with a), and when it is the backward of this operator alone (max with r) */
    long long pass_peak_then_forward, pass_peak_again;
    /* at its forward (osdp_cost_forward_moment): rebuilt + fw (fw as the layout's last operator for the last) */
    long long forward_peak;
    long long forward_next; /* during the forward of the operator before it: [prefetch] ff */
    long long view;         /* v, during the next operator's passes (prefetch holds it too) */
} osdp_op_peak_terms;
void osdp_cost_peak_terms(const osdp_cost_model *cm, int op, const osdp_op_mem *m, osdp_op_peak_terms *out);
/* the moment of operator u's backward from the terms of ops: every earlier
 * operator's acts (acts_before: sum_{j < u}), its own pass, its neighbours' */
static inline long long osdp_cost_backward_moment(const osdp_op_peak_terms *t, int n, int u, long long acts_before)
{
    return acts_before + t[u].acts + t[u].pass_peak + (u + 1 < n ? t[u + 1].in_flight : 0)
         + (u > 0 ? t[u - 1].prefetch : 0);
}

/* the moment of operator u's forward: the same earlier activations, its
 * whole block, its slices, the next operator's first slice and v of the one
 * before */
static inline long long osdp_cost_forward_moment(const osdp_op_peak_terms *t, int n, int u, long long acts_before)
{
    return acts_before + t[u].acts + t[u].forward_peak + (u + 1 < n ? t[u + 1].forward_next : 0)
         + (u > 0 ? t[u - 1].view : 0);
}

/* Which X of a pipeline stage's wrap moment (above) is its largest, from the terms of its n operators,
 * next_passes OSDP_PIPE_THEN_* (nonzero): */
enum {
    OSDP_WRAP_THEN_FORWARD,     /* pass_peak_then_forward of the first operator */
    OSDP_WRAP_THEN_BACKWARD,    /* n > 1: pass_peak of the first + prefetch of the last */
    OSDP_WRAP_AGAIN             /* n = 1: pass_peak_again */
};
static inline int osdp_cost_wrap_case(const osdp_op_peak_terms *t, int n, int next_passes)
{
    if (!(next_passes & OSDP_PIPE_THEN_BACKWARD)) return OSDP_WRAP_THEN_FORWARD;
    const long long b = n > 1 ? t[0].pass_peak + t[n - 1].prefetch : t[0].pass_peak_again;
    if ((next_passes & OSDP_PIPE_THEN_FORWARD) && !(b > t[0].pass_peak_then_forward)) return OSDP_WRAP_THEN_FORWARD;
    return n > 1 ? OSDP_WRAP_THEN_BACKWARD : OSDP_WRAP_AGAIN;
}
/* the wrap moment's bytes; W + sum_i held_i on top */
static inline long long osdp_cost_wrap_moment(const osdp_op_peak_terms *t, int n, int next_passes)
{
    const int w = osdp_cost_wrap_case(t, n, next_passes);
    const long long x = w == OSDP_WRAP_THEN_FORWARD ? t[0].pass_peak_then_forward
                      : w == OSDP_WRAP_THEN_BACKWARD ? t[0].pass_peak + t[n - 1].prefetch : t[0].pass_peak_again;
    return t[0].acts + x + (n > 1 ? t[1].in_flight : 0);
}

typedef struct osdp_op_time {
    double compute, comm, total;
    double tp_comm;         /* the tensor-parallel group's collectives (in total; 0 at tp_size 1) */
    /* Of total, under the paper kind (the collectives added to the compute, as MPI moves a non-blocking
     * collective's data only inside the rank's calls), what runs once per step rather than in every
     * micro-step (a pipeline stage's passes place it, osdp/pipeline_cost.h; 0 under the overlap kind, whose
     * max(compute, comm) has no such part):
     *   step_start  before the operator's first forward of the step: its DP slices' all-gathers
     *   step_end    from its last backward to the end of the step: a reduce-once operator's reduction (RS_s,
     *               with h its cross all-gather), waited after the stage's last gradient send
     * (the optimizer step on its shard runs after the step's closing all-reduce: it stays spread) */
    double step_start, step_end;
} osdp_op_time;

/* FLOPs per token, forward + backward */
double osdp_cost_op_flops(const osdp_op_layout *op);
/* the largest padded slice of op cut into g (elements) */
size_t osdp_cost_slice_numel(const osdp_cost_model *cm, int op, int g);
void osdp_cost_op_mem(const osdp_cost_model *cm, int op, int g, int k, int b, osdp_op_mem *out);
void osdp_cost_op_time(const osdp_cost_model *cm, int op, int g, int k, int b, int accum, osdp_op_time *out);
/* the same with the recompute flag of `op` given (cm->recompute ignored) */
void osdp_cost_op_mem_rc(const osdp_cost_model *cm, int op, int g, int k, int rc, int b, osdp_op_mem *out);
void osdp_cost_op_time_rc(const osdp_cost_model *cm, int op, int g, int k, int rc, int b, int accum, osdp_op_time *out);
/* the same with its reduce-once slices given too, the last `once` of the g (at least g: all; cm->reduce_once
 * ignored): one choice of the planner's */
void osdp_cost_op_mem_choice(const osdp_cost_model *cm, int op, int g, int k, int rc, int once, int b, osdp_op_mem *out);
void osdp_cost_op_time_choice(const osdp_cost_model *cm, int op, int g, int k, int rc, int once, int b, int accum,
                              osdp_op_time *out);
/* Is op the last operator of a stage's layout that is not the head: its
 * output is sent on to the next stage, so a bf16 residual stream does not
 * narrow it (osdp/schedule.h)?  A stage's layout ends where the stage does. */
static inline int osdp_cost_op_sends(const osdp_layout *L, int op)
{
    return op == L->n_ops - 1 && L->op[op].type != OSDP_OP_HEAD;
}
/* A tied head (osdp/layout.h): G_0, the embedding's full gradients, held
 * from the head's backward to the embedding's, so during the backward of
 * every operator op > 0; 0 for op 0 (its own G) and for an untied head */
long long osdp_cost_tied_grads(const osdp_cost_model *cm, int op);
/* W: the buffers that do not depend on the plan (the backward workspace,
 * the tensor-parallel staging and a pipeline stage's stage_buffer_bytes) */
long long osdp_cost_workspace(const osdp_cost_model *cm, int b);
/* one ring all-gather over the tensor-parallel group of tp ranks, each
 * rank's part `part_bytes`: (tp - 1)(alpha_tp + part_bytes beta_tp) */
double osdp_cost_tp_all_gather_time(const osdp_device *dev, int tp, double part_bytes);
/* tp_comm of operator op for ONE micro-step (formula above): seconds of the
 * tensor-parallel group's collectives at micro-batch b, rc: recomputed */
double osdp_cost_tp_comm(const osdp_cost_model *cm, int op, int rc, int b);

/* The two-level network (osdp/device.h).  The data-parallel group of a
 * mesh of tp x dp x pp ranks (rank order of osdp/mesh.h) spans nodes of
 * ranks_per_node ranks when two of its ranks sit on different nodes (rank
 * r on node r / ranks_per_node); a ring over such a group has a step over
 * the link between nodes, and the slowest link bounds every step, so its
 * all-gathers cost (N-1)(alpha' + S/N beta') with the device's
 * [internode_*] figures alpha', beta' (formula above, unchanged otherwise),
 * and so do its reduce-scatters on nodes of unequal shares; on equal ones
 * they run node-first (RSn + RSx above).  A group inside one node, a flat device (no [internode_*],
 * or ranks_per_node 0) and the tensor-parallel group (inside a node) keep
 * the in-node figures. */
/* 1 when a tensor-parallel group (tp consecutive ranks) straddles nodes of ranks_per_node: tp does not
 * divide the node (ranks_per_node <= 0: one node, 0).  plan and train refuse such a group: its
 * all-reduces after every row-parallel product would cross the slow link, and the cost model prices
 * them at [tp_all_reduce]'s in-node figures */
int osdp_cost_tp_spans_nodes(int ranks_per_node, int tp);
/* 1 when some data-parallel group of the mesh spans nodes (ranks_per_node <= 0: one node, 0) */
int osdp_cost_dp_spans_nodes(int ranks_per_node, int tp, int dp, int pp);
/* 1 when some message between adjacent pipeline stages (rank r to r + tp dp) crosses nodes */
int osdp_cost_pp_spans_nodes(int ranks_per_node, int tp, int dp, int pp);
/* 1 when a message between stages s and s + 1 crosses nodes */
int osdp_cost_pp_boundary_spans_nodes(int ranks_per_node, int tp, int dp, int s);
/* *out = *dev as the groups of that mesh see it, on a device with two
 * levels: all_gather at the inter-node figures when a data-parallel group
 * spans nodes, and reduce_scatter too unless the group's nodes hold equal
 * shares (then it keeps the in-node figures: its first stage's, the node-
 * first reduction above); p2p at [internode_p2p]'s when every message
 * between stages crosses nodes; else *dev (out may be dev).  The planner and
 * the cost model then price each level without knowing the mesh; a pipeline
 * with boundaries at both levels prices each boundary at its own
 * (osdp_pipe_step_time, from out->internode.p2p and out->p2p). */
void osdp_cost_device_for_mesh(const osdp_device *dev, int tp, int dp, int pp, osdp_device *out);

/* The two levels of the data group of that mesh on dev: 1 and *out when a
 * data group spans nodes of a two-level device with the same number of its
 * ranks on each (ranks_per_node a multiple of tp dividing tp dp), 0
 * otherwise.  Hierarchical slices read all four figures: pass the device
 * file as read (osdp_cost_device_for_mesh overwrites the in-node
 * all-gather's); the node-first reduce-scatter reads the two reduce-scatter
 * figures, which both keep. */
int osdp_cost_hierarchy_for_mesh(const osdp_device *dev, int tp, int dp, int pp, osdp_cost_hierarchy *out);
/* operator op as a hierarchical slice (g = k = 1; osdp_cost_hierarchy
 * above; cm->hier NULL: ZDP's terms) */
void osdp_cost_op_mem_hier(const osdp_cost_model *cm, int op, int rc, int b, osdp_op_mem *out);
void osdp_cost_op_time_hier(const osdp_cost_model *cm, int op, int rc, int b, int accum, osdp_op_time *out);

/* operator i as `plan` holds it (hierarchical or k of g; recompute: cm's
 * flags, as osdp_cost_op_mem / _time read them) */
void osdp_cost_plan_op_mem(const osdp_cost_model *cm, const osdp_plan *plan, int i, int b, osdp_op_mem *out);
void osdp_cost_plan_op_time(const osdp_cost_model *cm, const osdp_plan *plan, int i, int b, int accum, osdp_op_time *out);
/* Peak bytes per rank of `plan` at micro-batch b (formula above; a
 * hierarchical operator's terms from osdp_cost_op_mem_hier); *at_op
 * (may be NULL) gets the operator whose backward reaches it. */
long long osdp_cost_peak(const osdp_cost_model *cm, const osdp_plan *plan, int b, int *at_op);
/* the same, *forward (may be NULL) 1 when the peak is that operator's forward moment (F_u), 0 its backward */
long long osdp_cost_peak_moment(const osdp_cost_model *cm, const osdp_plan *plan, int b, int *at_op, int *forward);

/* What the peak is made of, at its moment: the buffers alive then, by part.  The parts sum to the peak to
 * the byte: osdp_cost_peak_moment returns that sum (both are osdp_cost_peak_breakdown).  Each part is of
 * one category of the runtime's accounting (osdp_peak_part_category), so that the runtime schedule holds the
 * same bytes per category at the same moment: at the first moment of its peak (osdp_memory_prediction.at_peak,
 * osdp/schedule.h) or, where two moments reach the peak and the two forms name different ones (about 2% of
 * random plans), at the other (tests/planner/test_planner_terms.c). */
typedef enum osdp_peak_part {
    OSDP_PEAK_STATE,        /* sharded optimizer state: fp32 master, AdamW m and v, the gradient shard, the
                               bf16 copy of the master shard (all step) */
    OSDP_PEAK_RESIDENT,     /* DP slices' full weights (all step) */
    OSDP_PEAK_GATHERED,     /* ZDP slices gathered then: in use and prefetched */
    OSDP_PEAK_ACTIVATIONS,  /* activations held: every operator's not yet back-propagated, a recomputed block's
                               rebuilt ones, a narrow output widened, a pipeline stage's other micro-batches' */
    OSDP_PEAK_GRADS,        /* full gradients in flight and their reduce-scatters' receive buffers, a tied
                               head's d(wte) */
    OSDP_PEAK_ACCUM,        /* reduce-once operators' gradients summed over the step (all step) */
    OSDP_PEAK_WORKSPACE,    /* the backward workspace (all step) */
    OSDP_PEAK_TP_STAGING,   /* the chunked or vocab-parallel cross-entropy's staging (all step; the runtime's
                               tp_comm category) */
    OSDP_PEAK_STAGE_INPUTS, /* a pipeline stage's inputs received, one per micro-batch it holds (0 otherwise) */
    OSDP_PEAK_N_PARTS
} osdp_peak_part;
/* the part's name in messages ("sharded state", ...) */
const char *osdp_peak_part_name(osdp_peak_part part);
/* the runtime's category of its buffers (osdp/memory.h) */
osdp_memory_category osdp_peak_part_category(osdp_peak_part part);

typedef struct osdp_peak_parts {
    long long bytes[OSDP_PEAK_N_PARTS];
} osdp_peak_parts;
static inline long long osdp_peak_parts_sum(const osdp_peak_parts *p)
{
    long long sum = 0;
    for (int k = 0; k < OSDP_PEAK_N_PARTS; k++) sum += p->bytes[k];
    return sum;
}
/* W (osdp_cost_workspace) by part: workspace, cross-entropy staging, stage inputs */
void osdp_cost_workspace_parts(const osdp_cost_model *cm, int b, osdp_peak_parts *out);
typedef struct osdp_peak_breakdown {
    long long total;        /* the peak: the sum of parts */
    osdp_peak_parts parts;
    int at_op;              /* the operator whose pass the moment is in */
    int forward;            /* 1: its forward (F_u); 0: its backward (K_u + Y_u, or the stage's wrap moment) */
    int wrap;               /* 1: a pipeline stage's wrap moment (at_op 0, forward 0) */
} osdp_peak_breakdown;
/* The peak of `plan` at micro-batch b (osdp_cost_peak_moment) and its breakdown into *out; per_op (may be
 * NULL; n_ops entries): each operator's buffers at that moment by part (a tied head's d(wte) the embedding's),
 * whose sum over the operators is out's parts less the plan-independent ones (workspace, TP staging, stage
 * inputs).  Returns out->total, -1 when out of host memory. */
long long osdp_cost_peak_breakdown(const osdp_cost_model *cm, const osdp_plan *plan, int b, osdp_peak_breakdown *out,
                                   osdp_peak_parts *per_op);
/* The step's scalar all-reduce: every step sums the loss and the gradient
 * norm, 2 doubles, over each mesh axis in turn (osdp_runtime_reduce_over_mesh:
 * the data group, the tensor group, the pipeline), a blocking ring
 * all-reduce of OSDP_COST_STEP_SYNC_BYTES each, at its group's level:
 *   AR_n = (n-1)(alpha_rs + alpha_ag + S/n (beta_rs + beta_ag)) + (call_rs + call_ag) / 2
 *   sync = AR_dp + AR_tp + AR_pp   (n <= 1: 0)
 * with the in-node [reduce_scatter] / [all_gather] figures, or the
 * [internode_*] ones when the group crosses nodes (osdp_cost_dp_spans_nodes,
 * osdp_cost_pp_spans_nodes), and [tp_all_reduce]'s for the tensor group.  A
 * microsecond term on a real network; over a slow link it is 2 (n-1) of the
 * link's latencies per crossing axis.  One rank (N = T = P = 1): 0. */
#define OSDP_COST_STEP_SYNC_BYTES (2 * sizeof(double))
double osdp_cost_step_sync_time(const osdp_device *dev, int tp, int dp, int pp);
/* Step time of `plan`: sum of T_i (i = 0..n-1 in order) + the step's scalar
 * all-reduce (osdp_cost_step_sync_time over the data and tensor groups) */
double osdp_cost_step_time(const osdp_cost_model *cm, const osdp_plan *plan, int b, int accum);

#endif

/* The cost model of the pipeline axis (DESIGN.md §9): what a stage's passes
 * take, what a message between stages takes, and the step time of the
 * whole pipeline, found by running every stage's pass order
 * (osdp_pipe_order, the runtime's own) against the messages between them.
 *
 * A stage's passes.  Stage s of P owns operators [lo, hi) under its plan,
 * over its data-parallel group (the cost model's N) and, on a
 * tensor-parallel layout, with its tensor group's collectives
 * (osdp/cost_model.h: T_i for the step's M = accum micro-batches).  One
 * micro-batch's forward pass takes sum_i T_i / M x phi_i and its backward
 * sum_i T_i / M x (1 - phi_i), with phi_i = 1/3 (the forward's share of
 * forward + backward FLOPs, osdp_cost_op_flops) or 1/4 when operator i
 * recomputes (its backward runs the forward again), where T_i is here
 * without its once-per-step parts (osdp_op_time's step_start and step_end,
 * under the paper kind): its DP slices' all-gathers start with the stage's
 * step, while it waits for its first input, one chunk's after another's,
 * and a chunk's first forward waits for its own (step_start_s, their sum
 * over the chunk's operators); a reduce-once operator's reduction starts in
 * the stage's last backward (micro-batch M-1's) and is waited at the end of
 * the stage's step, after its last gradient has gone to the stage before
 * (osdp/schedule.h), so it lengthens the stage's step (step_end_s, after
 * its last pass) and holds no other stage.  The runtime orders them so on
 * either backend (MPI's progress in the rank's calls, the receive's wait
 * among them; NCCL's as stream order).  The stage's busy time M (forward +
 * backward) + step_start_s + step_end_s is then sum_i T_i exactly: the rest
 * of its data group's collectives (every micro-step's) and its tensor
 * group's all-reduces are spread over its passes in proportion to their
 * compute (they run in or around them).  Spread evenly instead, the step's
 * once-only collectives hid in the other stages' passes: on emulated nodes
 * of one rank each (every collective over the link) a reduce-once pipeline
 * ran 20% slower than so predicted.  (Until the gathers moved before the
 * first receive and the reductions' waits after the last send, each
 * stage's lay on the fill and the drain one stage after another.)
 *
 * A message.  Between stages s and s+1 the residual stream of one
 * micro-batch crosses, forward (the activations) and backward (their
 * gradient): b x T x d elements, d the width of the last operator of stage
 * s (osdp_pipe_boundary_bytes: the fp32 buffer it lands in), as Megatron-LM
 * sends it (src/runtime/stage_message.c): the forward one in the residual
 * stream's dtype (2 bytes an element under a bf16 stream; the gradient in
 * fp32), and on a tensor-parallel layout cut into t pieces, tensor rank r
 * sending piece r to the rank of the same tensor and data index in the next
 * stage (osdp_pipe_message_bytes, osdp_pipe_piece_of).  A message of S
 * bytes per rank takes c = alpha + S beta ([p2p] of the device file, or
 * [internode_p2p] when the boundary joins two nodes, osdp/device.h); with
 * t > 1 the receiving group then all-gathers the pieces in
 * g = (t - 1)(alpha_tp + S beta_tp) ([tp_all_reduce]'s figures, the tensor
 * group's link, as osdp_cost_tp_all_gather_time prices every gather of the
 * tensor group): osdp_pipe_boundary_message.
 * Both ends pay it, as the runtime does (osdp/schedule.h): a receive is
 * blocking, posted when the stage reaches the pass, and ends c after it
 * was posted and not before the message was sent; the gradient's send
 * (backward, s > 0) is blocking and holds its stage for c; the
 * activation's send (forward) is non-blocking and waited only after its
 * gradient has come back, whose receive was posted after that send and
 * took c, so it holds nothing.  This is what the emulated link does (src/comm/link_emulation.c:
 * each end of a message that crosses it waits out the link's time from
 * its own call) and what a rendezvous transfer of a large message does on
 * a real network (the sender is held until the data has moved; a
 * receiver that is the later end waits the whole transfer).
 *
 * The step (osdp_pipe_simulate).  Stage s runs its 2M passes in
 * osdp_pipe_order's order, each as soon as the stage is free (its previous
 * pass, and that pass's gradient send, done) and its input is there:
 *   forward  of m on s > 0:     at max(free + c, forward of m on s-1 ended) + g
 *   backward of m on s < P-1:   at max(free + c, backward of m on s+1 ended) + g
 * (c and g of that direction's message)
 * then a backward on s > 0 holds the stage c more (its send).
 * step = the time the last stage to finish is free.  For P = 1 it is the
 * stage's busy time.  (osdp_pipe_step_time then adds the step's scalar
 * all-reduce, osdp_cost_step_sync_time, once: sync_s.)  Idle fraction (the bubble the simulation finds):
 * 1 - sum_s busy_s / (P step); with equal stages, no message time and no
 * per-step work it equals the closed form (P - 1) / (M + P - 1)
 * (osdp_pipe_bubble) for GPipe and 1F1B alike, and step = (M + P - 1)
 * (forward + backward) of one stage.  Messages add their time: P = 2 with
 * equal stages (f, b), GPipe adds (M + 1) c (the first forward's crossing,
 * then each backward's send on stage 1, which stage 0's backwards wait
 * for, one after the other); 1F1B at M = 3 adds 4 c (its forwards and
 * backwards alternate across the boundary); tests/planner/test_planner_pp.c works
 * both by hand. */
#ifndef OSDP_PIPELINE_COST_H
#define OSDP_PIPELINE_COST_H

#include <stddef.h>
#include "osdp/cost_model.h"
#include "osdp/pipeline.h"
#include "osdp/plan.h"

/* one micro-batch's passes on one stage (or chunk), and what the step adds once to its first forward and to
 * its last backward (0, 0: nothing; the passes of micro-batch 0 and M - 1) */
typedef struct osdp_pipe_stage_cost {
    double forward_s, backward_s;
    double step_start_s, step_end_s;
} osdp_pipe_stage_cost;

typedef struct osdp_pipe_timing {
    int P, M;
    int V;                                /* chunks per stage (interleaved; 1 otherwise) */
    osdp_pipe_schedule schedule;
    double step_s;                        /* the last pass's end (+ sync_s: osdp_pipe_step_time) */
    double sync_s;                        /* the step's scalar all-reduce after the passes (osdp_pipe_step_time;
                                             osdp_pipe_simulate: 0); not in idle_fraction */
    double busy_s[OSDP_MAX_STAGES];       /* M (forward + backward) + step_start_s + step_end_s of each stage */
    double end_s[OSDP_MAX_STAGES];        /* when each stage is free after its last pass (and its send) */
    double idle_fraction;                 /* 1 - sum busy / (P step): the simulated bubble */
    double bubble_closed;                 /* (P - 1) / (V M + P - 1) (osdp_pipe_bubble_chunks) */
    int slowest_stage;                    /* the stage of the largest busy time (the first on ties) */
} osdp_pipe_timing;

/* Runs the P stages' pass orders (schedule, M micro-batches) with
 * stage[s]'s pass times and message_s[s] (s < P-1) the time of one message
 * across the boundary between s and s+1 (NULL: 0).  OSDP_ERR_INPUT when P
 * or M is out of range or a time is negative or not finite. */
osdp_status osdp_pipe_simulate(osdp_pipe_schedule schedule, int P, int M, const osdp_pipe_stage_cost *stage,
                               const double *message_s, osdp_pipe_timing *out);

/* The same over V chunks per stage (interleaved, osdp/pipeline.h): chunk[g]
 * the passes of global chunk g of P V, message_s[g] (g < P V - 1) a message
 * from chunk g to chunk g + 1 (stage g mod P to stage (g + 1) mod P, the
 * last stage's to the first).  Under interleaving a gradient send does not
 * hold its stage (osdp_schedule_defers_grad_send: it is waited after the
 * next backward's receive).  busy_s[s] sums stage s's chunks.  V = 1 is
 * osdp_pipe_simulate. */
osdp_status osdp_pipe_simulate_chunks(osdp_pipe_schedule schedule, int P, int V, int M, const osdp_pipe_stage_cost *chunk,
                                      const double *message_s, osdp_pipe_timing *out);

/* One boundary's messages: each way, the transfer c (both ends pay it) and
 * the receiving tensor group's gather of the pieces after it, g (formulas
 * above). */
typedef struct osdp_pipe_message {
    double forward_s, backward_s;                /* c of the activations, of their gradient */
    double forward_gather_s, backward_gather_s;  /* g of each (0 without tensor parallelism) */
} osdp_pipe_message;

/* osdp_pipe_simulate_chunks with each boundary's two directions and gathers
 * apart: message[g] (g < P V - 1) between chunk g and g + 1 (NULL: none) */
osdp_status osdp_pipe_simulate_messages(osdp_pipe_schedule schedule, int P, int V, int M, const osdp_pipe_stage_cost *chunk,
                                        const osdp_pipe_message *message, osdp_pipe_timing *out);

/* bytes of the buffer a message across the boundary before operator
 * `first_op` (the first of a stage, > 0) lands in: b T d of the operator
 * before it, fp32 (the receiver's STAGE_INPUT) */
size_t osdp_pipe_boundary_bytes(const osdp_layout *layout, int first_op, int micro_batch);
/* bytes each tensor rank sends in one such message (formula above): its
 * piece of the b T d elements (osdp_pipe_piece_of over the layout's
 * tp_size: t equal pieces), 2 bytes each for the activations (backward 0)
 * under a bf16 residual stream, else 4 */
size_t osdp_pipe_message_bytes(const osdp_layout *layout, int first_op, int micro_batch, osdp_dtype residual,
                               int backward);
/* seconds of one message of `bytes` between two ranks: alpha + bytes beta of [p2p] */
double osdp_pipe_message_time(const osdp_device *dev, double bytes);
/* The messages of the boundary before first_op: c at level's [p2p] (the
 * in-node or the inter-node figures, as the boundary lies), of the largest
 * piece; g at dev's [tp_all_reduce]. */
osdp_pipe_message osdp_pipe_boundary_message(const osdp_device *level, const osdp_device *dev, const osdp_layout *layout,
                                             int first_op, int micro_batch, osdp_dtype residual);

/* One micro-batch's passes of operators [lo, hi) under plan's choices for
 * them (the plan's recompute flags; cm->recompute ignored), at micro-batch b
 * of accum micro-batches per step (formula above). */
void osdp_pipe_stage_passes(const osdp_cost_model *cm, const osdp_plan *plan, int lo, int hi, int micro_batch,
                            int accum, osdp_pipe_stage_cost *out);

/* The step of a whole pipeline: stage_cm[s] and plans[s] (each over the
 * whole layout of cm's, of which stage s uses [bounds[s], bounds[s+1]))
 * give the stages' passes; the boundaries' messages come from the layout
 * and dev's [p2p].  The simulated step, then the step's scalar all-reduce
 * over the data group, the tensor group and the P stages
 * (osdp_cost_step_sync_time of stage 0's device: every rank waits for the
 * last stage's, so it adds to the step once).  P = 1: the stage's busy
 * time + sync, which is osdp_cost_step_time of its plan up to rounding. */
osdp_status osdp_pipe_step_time(const osdp_cost_model *const *stage_cm, const osdp_plan *const *plans, const int *bounds,
                                int P, osdp_pipe_schedule schedule, int micro_batch, int accum, osdp_pipe_timing *out);

/* osdp_pipe_step_time over V chunks per stage: bounds[P V + 1] the chunks',
 * chunk g on stage g mod P with stage_cm[g mod P] and plans[g mod P]; the
 * wrap from the last stage to the first at the network level of the
 * pipeline's widest boundary.  V = 1 is osdp_pipe_step_time. */
osdp_status osdp_pipe_step_time_chunks(const osdp_cost_model *const *stage_cm, const osdp_plan *const *plans,
                                       const int *bounds, int P, int V, osdp_pipe_schedule schedule, int micro_batch,
                                       int accum, osdp_pipe_timing *out);
/* p2p bytes tensor rank 0 of stage s sends per step over its V chunks: every
 * chunk boundary it owns, M messages each way (V times 1F1B's for V
 * chunks of P V equal boundaries) */
long long osdp_pipe_stage_p2p_bytes_chunks(const osdp_layout *layout, const int *bounds, int P, int V, int s,
                                           int micro_batch, int accum, osdp_dtype residual);

/* p2p bytes tensor rank 0 of stage s sends per step: M messages forward
 * (s < P-1) and M backward (s > 0), each osdp_pipe_message_bytes of its
 * boundary (residual: the stream's dtype) */
long long osdp_pipe_stage_p2p_bytes(const osdp_layout *layout, const int *bounds, int P, int s, int micro_batch,
                                    int accum, osdp_dtype residual);

/* A stage's peak per rank.  The stage's operators are searched and costed
 * as a layout of their own (osdp_pipe_stage_layout: the whole layout's
 * operators [lo, hi), the buffers the runtime sizes over the whole model,
 * the workspace, unchanged), under the cost model's in_flight =
 * osdp_pipe_in_flight and stage_buffer_bytes = the stage's inputs received
 * from the previous stage, one per micro-batch it holds, kept for its first
 * operator's backward (osdp_pipe_stage_buffer_bytes: stages after the first;
 * the gradients it receives land in the workspace) and next_passes =
 * osdp_pipe_after_backward (its wrap moment, osdp/cost_model.h: what the
 * planner's search sees too).  osdp_pipe_stage_peak is that closed form
 * (osdp_cost_peak) for stage s of a whole-model plan; it equals the
 * runtime's stage schedule (osdp_schedule_peak with the pipeline options)
 * to the byte (tests/planner/test_planner_pp.c). */
osdp_layout osdp_pipe_stage_layout(const osdp_layout *whole, int lo, int hi);
long long osdp_pipe_stage_buffer_bytes(const osdp_layout *whole, const int *bounds, int s, int micro_batch, int in_flight);
long long osdp_pipe_stage_peak(const osdp_cost_model *cm, const osdp_plan *plan, const int *bounds, int P, int s,
                               osdp_pipe_schedule schedule, int micro_batch, int accum, int *at_op);
/* the same with its breakdown (osdp_cost_peak_breakdown; at_op of the whole layout) */
long long osdp_pipe_stage_peak_breakdown(const osdp_cost_model *cm, const osdp_plan *plan, const int *bounds, int P,
                                         int s, osdp_pipe_schedule schedule, int micro_batch, int accum,
                                         osdp_peak_breakdown *out);

#endif

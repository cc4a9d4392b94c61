/* The step as data: the ordered events of one training step, built once
 * from the layout, the plan and the runtime's options.
 *
 * Peak memory per rank is decided here and only here: the runtime executes
 * these events (osdp/runtime.h) and its accounting allocator measures them;
 * osdp_schedule_peak evaluates the same list by adding up the bytes of its
 * allocations and frees.  The planner's closed form (osdp/cost_model.h) is a
 * fast rewrite of this evaluation for the search, over the same size table
 * (osdp_buffer_bytes, below); tests/runtime/test_schedule.c proves the three equal
 * to the byte on random plans, tests/planner/test_planner_terms.c the search's
 * terms on every mesh.
 *
 * A step is
 *   setup   once, when the runtime is created: the buffers that live all
 *           run (sharded state, the bf16 copy of the master shard, the DP
 *           slices' resident weights, the accumulated gradients of
 *           reduce-once operators (osdp/plan.h), the backward workspace, and on a
 *           tensor-parallel layout the staging of the head's all-gather);
 *   micro   one micro-step, executed accum_steps times: events flagged
 *           first_micro_only (the DP slices' gathers, made once per step)
 *           are skipped after the first, those flagged last_micro_only
 *           (the reduce-once operators' reductions, which allocate nothing)
 *           before the last; all allocate and free the same bytes every
 *           time, so one pass gives the peak;
 *   optim   the optimizer step, once per step after the micro-steps: the
 *           squared gradient norm summed shard by shard, one all-reduce of
 *           the loss and norm sums, AdamW on every shard; it allocates
 *           nothing;
 *   eval    one validation micro-batch, forward only through the same plan
 *           (executed once per validation micro-batch, DP slices gathered
 *           by the first only, like micro): the same ZDP gathers and
 *           prefetches as micro's forward, but an operator's activations
 *           are freed as soon as the next operator has read its output,
 *           and nothing is kept for a backward.  At every point it holds a
 *           subset of what micro's forward holds at the same point, so its
 *           peak never exceeds the step's (tests/runtime/test_schedule.c checks it
 *           on random plans) and the planner's closed form needs no term
 *           for it; osdp_schedule_peak evaluates it all the same.
 *
 * Within a micro-step (osdp/runtime.h has the order of weight uses): every
 * ALLOC has its FREE later in the same list; an operator pass is
 * COMPUTE .. COMPUTE_END, and between them one USE marker per slice in the
 * order the pass touches the slices (forward and recompute up, backward
 * down).  The compute asks for slice s when it first touches it; the
 * executor then runs the events up to USE(op, s, pass): releasing the
 * previous slice, gathering this one, starting prefetches.
 *
 * The tensor axis of the mesh needs no event: its collectives are blocking
 * calls inside the operators' passes (osdp/gpt.h), the all-reduces in place;
 * its one buffer is the setup's staging (OSDP_BUF_TP_STAGING, category
 * tp_comm).
 *
 * The pipeline axis (osdp/pipeline.h).  With pp_size > 1 a rank's schedule
 * covers only its stage's operators [op_lo, op_hi): setup allocates only
 * their state, optim updates only them, and micro is the WHOLE step, executed
 * once per step: the stage's F and B passes over all M = accum_steps
 * micro-batches in osdp_pipe_order's order, every event stamped with its
 * micro-batch (the activation slot: ACTS, KEPT and STAGE_INPUT buffers are
 * per (op, micro); LOAD_TOKENS and LOSS_SUM read micro's tokens).  Since one
 * list runs the step, the DP slices' gathers are in it once (at their first
 * use) and ZDP slices are gathered per use, prefetched along the stage's use
 * order; the reduce-once reductions start in the last micro-batch's
 * backwards and are waited at the list's end, after the stage's last
 * gradient send (the stages before it drain meanwhile).  A forward pass of a stage after the first starts by receiving its
 * input (RECV_ACTS into a STAGE_INPUT buffer, alive until the stage's first
 * operator's backward of that micro-batch); a stage before the last ends it
 * by starting the send of its last operator's output (SEND_ACTS, waited by
 * SEND_ACTS_WAIT right after that micro-batch's gradient has come back,
 * before the backward reads or recomputes the output).  The messages cross
 * as Megatron-LM sends them (src/runtime/stage_message.c): 1/t of each
 * from each rank of a tensor group, gathered by the receiving group; the
 * activations in bf16 under a bf16 stream, narrowed and widened inside these
 * fp32 buffers.  A backward pass starts by receiving d(output) into the
 * workspace (RECV_GRAD, unless the stage holds the head) and ends by sending
 * d(input) to the previous stage (SEND_GRAD, blocking: the workspace is
 * written again by the next backward).  An operator's reduce-scatters
 * overlap the next operator's backward within a pass and complete at the
 * pass's end.  The eval list at pp > 1 is, per validation micro-batch:
 * receive, the stage's forwards, send (waited).
 *
 * Interleaving (osdp/pipeline.h; opt.geo.virtual_stages V > 1): the rank holds
 * V chunks, local chunk c = global chunk c P + s, each with its own range
 * [chunk_lo[c], chunk_hi[c]); op_lo and op_hi span them.  A pass names its
 * chunk and runs the chunk's operators, its messages go to the ranks on
 * either side in a ring (the last stage's chunks send on to the first
 * stage's next chunk); STAGE_INPUT and the activation sends have one slot
 * per (chunk, micro-batch) (osdp_schedule_message_slot), the operators'
 * activations one per micro-batch as before.  A gradient send is
 * non-blocking, waited (SEND_GRAD_WAIT) after the next backward's gradient
 * receive, which the executor lands in the workspace's other residual
 * buffer: with blocking sends two stages of the ring can each sit in a send
 * whose receive the other posts later (tests/runtime/test_pp_interleaved.c models
 * the messages of every P, V and M it checks).  The eval list runs the
 * chunks one after the other.
 *
 * Deadlock-freedom: activation sends are non-blocking and waited only after
 * the matching gradient has come back; gradient sends are waited right away;
 * receives are posted when needed; every stage runs its backwards in
 * micro-batch order (both schedules).  A stage then only ever blocks on a
 * lower stage reaching a backward (a gradient send waits for its receive)
 * or on a higher stage producing data that it already has the inputs for,
 * so the wait-for chain always ends at a stage that can run.
 *
 * A bf16 residual stream (geo.residual_dtype bf16, Megatron-LM's default):
 * every operator's output is rounded to bf16 values at the end of its
 * forward and recomputed forward (osdp/gpt.h), and a recomputed operator
 * whose output stays on its stage is narrow: its KEPT holds that output as
 * bf16, 2 bytes an element, lossless.  Every reader wants fp32, and the
 * simplest design that keeps the invariants is a transient widened copy,
 * KEPT_WIDE, alive exactly around each pass of the one reader, the next
 * operator: allocated (and widened from KEPT) before its forward and freed
 * after it, allocated again at the start of its backward pass (before its
 * recomputed forward) and freed at the end with its activations; the eval
 * list does the same around its forward.  So the copy depends on the
 * producer's choice alone and is present during the backward of the
 * operator after it, like a prefetched slice: the planner's closed form
 * needs one more term of that kind, not a coupling of two choices.  The
 * narrow operator's ACTS is its whole activation block, its fp32 output
 * slot included: the forward writes there, rounds, and narrows into KEPT
 * (the recomputed forward writes the same values there again).  Keeping
 * instead the producer's fp32 ACTS until the reader's forward would hold a
 * whole activation block across the next forward, which can exceed every
 * backward moment.  An operator whose output crosses to the next stage
 * (sends: the last of its chunk, not the model's last) is not narrow: its
 * fp32 KEPT is the buffer the non-blocking send reads until its wait in the
 * backward, as with an fp32 stream; the message stays fp32.
 * The tensor-parallel group's all-reduces of the stream (osdp/gpt.h: the
 * row-parallel products' partial outputs and the vocabulary-parallel
 * lookups in the forward, the column-parallel products' d(ln) in the
 * backward) move bf16, as Megatron-LM's do: each rank's partial is rounded
 * to bf16 in its own buffer's first half, the group sums in fp32 and rounds
 * the sum (MPI: a user-defined operation; NCCL: ncclBfloat16), widened back
 * in place; half the bytes, no buffer of its own, deterministic.  The
 * cross-entropy's statistics stay fp32.
 *
 * The evaluation (osdp_schedule_peak) only reads ALLOC and FREE: a stage's
 * peak, its in-flight micro-batches included, is exact by construction. */
#ifndef OSDP_SCHEDULE_H
#define OSDP_SCHEDULE_H

#include <stddef.h>
#include "osdp/dtype.h"
#include "osdp/geometry.h"
#include "osdp/layout.h"
#include "osdp/memory.h"
#include "osdp/pipeline.h"
#include "osdp/plan.h"

/* a pass of an operator over its weights */
typedef enum osdp_pass { OSDP_PASS_FORWARD, OSDP_PASS_RECOMPUTE, OSDP_PASS_BACKWARD } osdp_pass;

/* What an ALLOC / FREE names; each kind has one memory category
 * (osdp_buffer_category).  Sizes come from the size table (osdp/layout.h). */
typedef enum osdp_buffer_kind {
    OSDP_BUF_STATE,         /* (4, shard) fp32: master, gradient, AdamW m, v of the operator's shard */
    OSDP_BUF_MASTER_COPY,   /* (shard) weight dtype: the master shard rounded, what is all-gathered (bf16 only) */
    OSDP_BUF_RESIDENT,      /* (sum of DP slices' padded) weight dtype: DP slices' full weights */
    OSDP_BUF_WORKSPACE,     /* (osdp_workspace_floats) fp32: backward scratch shared by every operator */
    OSDP_BUF_GATHERED,      /* (slice padded) weight dtype: a ZDP slice's gathered weights */
    OSDP_BUF_KEPT,          /* (B, T, d) fp32, or bf16 when narrow (below): recompute: the output kept from
                               forward to backward */
    OSDP_BUF_ACTS,          /* (B, act floats per sequence, less the kept output when recomputing, unless
                               narrow) fp32 */
    OSDP_BUF_FULL_GRAD,     /* (padded) fp32: full gradients during the backward */
    OSDP_BUF_GRAD_RECV,     /* (shard of the slices reduced every micro-batch) fp32: the reduce-scatter's
                               destination */
    OSDP_BUF_TP_STAGING,    /* (B, head tp_floats_per_seq) fp32: the all-gather of the vocab-parallel
                               cross-entropy's statistics (osdp/gpt.h); allocated at setup when non-zero */
    OSDP_BUF_STAGE_INPUT,   /* (B, T, d of op - 1) fp32, per micro: the stage's input received from the
                               previous stage (op: the stage's first operator) */
    OSDP_BUF_GRAD_ACCUM,    /* (padded of its reduce-once slices) fp32: a reduce-once operator's
                               (osdp/plan.h) full gradients of those slices summed over the step's
                               micro-batches; allocated at setup */
    OSDP_BUF_KEPT_WIDE,     /* (B, T, d) fp32, narrow only: op's bf16 KEPT output widened, what the next
                               operator reads during each of its passes (below) */
    OSDP_BUF_N_KINDS
} osdp_buffer_kind;

typedef enum osdp_event_kind {
    OSDP_EV_ALLOC,          /* buffer (op, slice) of `bytes` */
    OSDP_EV_FREE,
    OSDP_EV_GATHER,         /* start the all-gather of slice (op, slice) into its weights */
    OSDP_EV_GATHER_WAIT,    /* that all-gather has completed */
    OSDP_EV_USE,            /* marker: the pass may touch slice (op, slice) now */
    OSDP_EV_COMPUTE,        /* operator op's pass starts (its USE markers follow) */
    OSDP_EV_COMPUTE_END,
    OSDP_EV_LOAD_TOKENS,    /* the micro-batch's token ids into op's activations (embed: inputs, head: targets) */
    OSDP_EV_LOSS_SUM,       /* add the head's per-token losses to the step's loss sum */
    OSDP_EV_REDUCE_SCATTER, /* start the reduce-scatters of op's full gradients, of the slices reduced
                               every micro-batch into GRAD_RECV; `once`: of its reduce-once slices'
                               GRAD_ACCUM, into its gradient shard */
    OSDP_EV_REDUCE_SCATTER_WAIT,   /* they completed: add into the gradient shard (`once`: they went
                                      into it; its GRAD_ACCUM is zeroed for the next step) */
    OSDP_EV_GRAD_ACCUMULATE,    /* a reduce-once operator's FULL_GRAD (its reduce-once slices') added into
                                   its GRAD_ACCUM */
    OSDP_EV_NORM_SUM,       /* add op's gradient shard's squared norm to the step's sum */
    OSDP_EV_SUMS_ALL_REDUCE,    /* the loss and norm sums over the ranks (bytes: 16); the step's
                                   learning rate and clipping scale follow from them */
    OSDP_EV_ADAMW,          /* AdamW on op's shard */
    /* the pipeline's point-to-point messages (bytes: the message's) */
    OSDP_EV_RECV_ACTS,      /* the stage's input of micro from the previous stage into STAGE_INPUT (op) */
    OSDP_EV_SEND_ACTS,      /* start sending op's output of micro to the next stage */
    OSDP_EV_SEND_ACTS_WAIT, /* that send has completed */
    OSDP_EV_RECV_GRAD,      /* d(op's output) of micro from the next stage into the workspace */
    OSDP_EV_SEND_GRAD,      /* d(op's input) of micro from the workspace to the previous stage;
                               blocking, except under interleaving (osdp_schedule_defers_grad_send) */
    OSDP_EV_SEND_GRAD_WAIT, /* interleaving: the last non-blocking SEND_GRAD has completed */
    OSDP_EV_N_KINDS
} osdp_event_kind;

typedef struct osdp_event {
    osdp_event_kind kind;
    osdp_buffer_kind buffer;    /* ALLOC, FREE */
    int op, slice;              /* slice: GATHERED buffers, GATHER, USE; else 0 */
    osdp_pass pass;             /* USE, COMPUTE */
    int blocking;               /* GATHER: wait inside the call (no prefetch) */
    int first_micro_only;       /* GATHER, GATHER_WAIT of DP slices: once per step */
    int last_micro_only;        /* a reduce-once operator's reduction (REDUCE_SCATTER and its WAIT, into
                                   its gradient shard: no GRAD_RECV): in the step's last micro-step only */
    int once;                   /* REDUCE_SCATTER, its WAIT: of the reduce-once slices (GRAD_ACCUM into
                                   the gradient shard), else of the others (FULL_GRAD into GRAD_RECV) */
    size_t bytes;               /* ALLOC, FREE: bytes; GATHER, REDUCE_SCATTER: full buffer bytes moved;
                                   the pipeline's sends and receives: the message's */
    int micro;                  /* the micro-batch (pp_size > 1; 0 otherwise) */
} osdp_event;

/* One slice of an operator (the whole operator when it is not split): a
 * range of its flat buffer, padded to a multiple of N x pad_quantum
 * (osdp_padded_numel_quantum) and sharded on its own,
 * so that it can be gathered and reduce-scattered alone (DESIGN.md §3). */
typedef struct osdp_sched_slice {
    size_t lo, hi;          /* elements [lo, hi) of the operator's flat buffer */
    size_t padded;          /* hi - lo padded to a multiple of N x pad_quantum */
    size_t base;            /* offset in the operator's full buffers (sum of earlier padded) */
    size_t local;           /* offset of a rank's part (padded / shard_ranks) in the shard arrays */
    int zdp;
    int hierarchical;       /* a ZDP slice sharded inside the node, replicated across nodes (osdp/plan.h) */
    int shard_ranks;        /* the ranks it is sharded over: N, or the node's ranks of the data group
                               when hierarchical */
} osdp_sched_slice;

typedef struct osdp_sched_op {
    int n_slices, zdp_slices;   /* g and k of the plan */
    int recompute;
    int once_slices;            /* J: its last J slices' gradients accumulated in full, reduced in the
                                   step's last micro-step (osdp/plan.h); the first g - J every micro-step */
    size_t once_padded, once_shard;     /* those J slices' padded and shard elements (the last ones of
                                           padded and shard: from slice[g - J].base and .local on) */
    size_t bounds[OSDP_MAX_SLICES + 1];
    osdp_sched_slice slice[OSDP_MAX_SLICES];
    size_t padded, shard;       /* sums over slices: full-buffer and shard elements */
    size_t resident_numel;      /* DP slices' padded elements (slices k..g-1, contiguous) */
} osdp_sched_op;

typedef struct osdp_schedule_options {
    /* the step (osdp/geometry.h): N = geo.n_ranks, B, the accumulation, prefetch, the weights' dtype,
     * the padding, the node's ranks; the pipeline of geo.pp_size stages (0 or 1: none, every
     * operator), its stage_bounds, its schedule and virtual stages */
    osdp_step_geometry geo;
    int pp_stage;           /* this rank's stage s: operators [stage_bounds[s], stage_bounds[s+1]) */
} osdp_schedule_options;

typedef struct osdp_schedule {
    const osdp_layout *layout;
    osdp_schedule_options opt;
    size_t weight_size;     /* bytes per working-weight element */
    int pipelined;          /* pp_size > 1: micro is the whole step (above) */
    int op_lo, op_hi;       /* the stage's operators [op_lo, op_hi); every operator without a pipeline.
                               Interleaved: the span of its chunks, which hold only some of them
                               (osdp_schedule_has_op) */
    int n_chunks;           /* the stage's chunks V (1 without interleaving) */
    int chunk_lo[OSDP_MAX_CHUNKS / 2], chunk_hi[OSDP_MAX_CHUNKS / 2];   /* local chunk c: [chunk_lo[c], chunk_hi[c]) */
    osdp_sched_op *ops;     /* [layout->n_ops] */
    osdp_event *setup;
    int n_setup;
    osdp_event *micro;
    int n_micro;
    osdp_event *optim;
    int n_optim;
    osdp_event *eval;
    int n_eval;
    int cap_setup, cap_micro, cap_optim, cap_eval;   /* allocated lengths of the lists */
} osdp_schedule;

/* Validates the plan and options against the layout (OSDP_ERR_INPUT with a
 * message naming the operator or the option) and builds the events. */
osdp_status osdp_schedule_build(osdp_schedule *sched, const osdp_layout *layout, const osdp_plan *plan,
                                const osdp_schedule_options *opt);
void osdp_schedule_free(osdp_schedule *sched);

osdp_memory_category osdp_buffer_category(osdp_buffer_kind kind);

/* The size table: the bytes of every buffer of the step, of one operator
 * under one choice.  The schedule's ALLOC events read it (with its weight
 * dtype and fp32 gradients and activations), and so do the planner's
 * memory terms (osdp/cost_model.h, with the device file's param_bytes,
 * grad_bytes and act_bytes): a size is written here and nowhere else. */
typedef struct osdp_buffer_widths {
    size_t weight;          /* working weights and their all-gathers (e) */
    size_t grad;            /* full gradients, their reduce-scatters and the gradient shard (e_g) */
    size_t act;             /* activations and the workspace (a) */
    size_t residual;        /* a narrow recomputed operator's kept output: 2 under a bf16 residual stream;
                               4 (or 0) reads as no narrowing */
} osdp_buffer_widths;

/* what the buffers of operator op are sized by */
typedef struct osdp_buffer_dims {
    const osdp_layout *layout;
    int op;
    const osdp_step_geometry *geo;  /* B: geo->micro_batch */
    int recompute;          /* the choice recomputes op's activations */
    size_t padded;          /* the full buffer: the sum of the slices' padded elements */
    size_t shard;           /* a rank's shard: padded / the ranks each slice is sharded over */
    size_t resident;        /* the DP slices' padded elements */
    size_t once, once_shard;    /* the reduce-once slices' padded and shard elements (osdp/plan.h) */
    int sends;              /* op's output goes to the next pipeline stage (it is not narrow) */
    osdp_buffer_widths width;
} osdp_buffer_dims;

/* Is d's operator narrow: recomputed, its output kept in bf16 (above)? */
static inline int osdp_buffer_kept_narrow(const osdp_buffer_dims *d)
{
    return d->recompute && !d->sends && d->width.residual > 0 && d->width.residual < sizeof(float);
}

/* Bytes of buffer `kind` of d's operator (osdp_buffer_kind has each one's
 * shape); slice_padded: the slice's padded elements, read by GATHERED
 * alone.  STAGE_INPUT (d->op: the stage's first operator) is the residual
 * stream of op - 1 in fp32 whatever the widths (a bf16 message is widened
 * in it, src/runtime/stage_message.c). */
size_t osdp_buffer_bytes(osdp_buffer_kind kind, const osdp_buffer_dims *d, size_t slice_padded);
/* is operator op narrow, its recompute output kept in bf16 (osdp_buffer_kept_narrow)?  0 for op < 0 */
int osdp_schedule_kept_narrow(const osdp_schedule *sched, int op);
/* does this rank's stage hold operator op? */
static inline int osdp_schedule_has_op(const osdp_schedule *sched, int op)
{
    for (int c = 0; c < sched->n_chunks; c++)
        if (op >= sched->chunk_lo[c] && op < sched->chunk_hi[c]) return 1;
    return op >= sched->op_lo && op < sched->op_hi && sched->n_chunks < 1;
}
/* the local chunk holding operator op (one of the stage's) */
static inline int osdp_schedule_chunk_of(const osdp_schedule *sched, int op)
{
    int c = 0;
    while (c + 1 < sched->n_chunks && op >= sched->chunk_hi[c]) c++;
    return c;
}
/* is op the first operator of one of the stage's chunks (its input then comes from another stage)? */
static inline int osdp_schedule_chunk_first(const osdp_schedule *sched, int op)
{
    return op > 0 && sched->chunk_lo[osdp_schedule_chunk_of(sched, op)] == op;
}
/* micro-batches whose activations the list can hold at once: the per-micro
 * slots of an operator's ACTS and KEPT (accum_steps when pipelined, else 1) */
static inline int osdp_schedule_micro_slots(const osdp_schedule *sched)
{
    return sched->pipelined ? sched->opt.geo.accum_steps : 1;
}
/* the slots of the stage's messages (STAGE_INPUT, the activation sends):
 * one per chunk and micro-batch, slot chunk x M + micro of op's chunk */
static inline int osdp_schedule_message_slots(const osdp_schedule *sched)
{
    return sched->n_chunks * osdp_schedule_micro_slots(sched);
}
static inline int osdp_schedule_message_slot(const osdp_schedule *sched, int op, int micro)
{
    return osdp_schedule_chunk_of(sched, op) * osdp_schedule_micro_slots(sched) + micro;
}
/* Interleaving sends gradients non-blocking and waits the send after the
 * next backward's gradient receive (SEND_GRAD_WAIT), which lands in the
 * workspace's other residual buffer: a blocking send there deadlocks the
 * ring (two stages each in a send whose receive the other posts later). */
static inline int osdp_schedule_defers_grad_send(const osdp_schedule *sched)
{
    return sched->pipelined && sched->opt.geo.pipe_schedule == OSDP_PIPE_INTERLEAVED;
}
/* floats per sequence of the tensor-parallel staging (OSDP_BUF_TP_STAGING):
 * the head's tp_floats_per_seq, 0 when its cross-entropy is not vocab-parallel */
static inline size_t osdp_tp_staging_floats_per_seq(const osdp_layout *layout)
{
    return layout->op[layout->n_ops - 1].tp_floats_per_seq;
}
/* elements of a rank's shard of a slice: padded / N (padded / the node's
 * ranks for a hierarchical slice) */
static inline size_t osdp_sched_slice_shard_numel(const osdp_sched_slice *sl)
{
    return sl->padded / (size_t)sl->shard_ranks;
}

/* Peak bytes per category and in total that executing the schedule reaches
 * (training steps and validation passes alike); at_peak: the bytes per
 * category at the first moment the total reaches peak_total (they sum to
 * it: what the peak is made of, osdp_cost_peak_breakdown's categories). */
typedef struct osdp_memory_prediction {
    size_t peak[OSDP_MEMORY_N_CATEGORIES];
    size_t peak_total;
    size_t at_peak[OSDP_MEMORY_N_CATEGORIES];
} osdp_memory_prediction;
void osdp_schedule_peak(const osdp_schedule *sched, osdp_memory_prediction *out);
/* The peak of the setup and the eval list alone (what a validation pass reaches). */
void osdp_schedule_eval_peak(const osdp_schedule *sched, osdp_memory_prediction *out);

/* Build and evaluate in one call (the planner's and train's check). */
osdp_status osdp_schedule_predict(const osdp_layout *layout, const osdp_plan *plan,
                                  const osdp_schedule_options *opt, osdp_memory_prediction *out);
/* the same with the CPU's padding (pad quantum 1) */
osdp_status osdp_memory_predict(const osdp_layout *layout, const osdp_plan *plan, int n_ranks,
                                int micro_batch, int accum_steps, int prefetch, osdp_dtype weight_dtype,
                                osdp_memory_prediction *out);

#endif

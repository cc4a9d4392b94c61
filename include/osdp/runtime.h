/* The sharded data-parallel runtime: carries out a plan (DP / ZDP per
 * operator slice, activation recompute per block operator; DESIGN.md §3) on
 * N ranks.
 *
 * Every rank holds only its 1/N shard of each operator slice's fp32 master
 * weights, gradients and AdamW moments (an unsplit operator is one slice).
 *
 * Precision.  The working weights (resident DP, gathered ZDP) are elements
 * of the backend's weight_dtype.  With bf16 each rank rounds its fp32 master
 * shard to a bf16 copy at the start of a step, and the all-gathers move that
 * copy: half the bytes of fp32.  Gradients stay fp32 from the backward to the
 * optimizer, and are reduce-scattered in fp32: each rank's gradient is a sum
 * over its micro-batch already, and a bf16 sum of N of them keeps 8 bits of
 * mantissa, so small gradients of large ones would be lost before the fp32
 * master sees them (the cost: reduce-scatters move twice the bytes of bf16;
 * the cost model counts 2 bytes per gathered and 4 per reduced element).
 *
 * Per micro-step the slices' weights are used in this order:
 *   forward  op 0..n-1, slices up:  a DP slice is gathered at its first use
 *                        in a step and kept resident; a ZDP slice is
 *                        gathered, used, freed
 *   backward op n-1..0: [recompute: the forward again, slices up], then the
 *                        backward, slices down (ZDP slices gathered again);
 *                        the operator's full gradients are reduce-scattered
 *                        slice by slice into the gradient shards; a
 *                        reduce-once operator's (osdp/plan.h: of its last J
 *                        slices) are added into its step's sum instead,
 *                        which is reduce-scattered in the last micro-step
 *                        only
 * With prefetch the gather of the next slice use starts before the current
 * one computes (and, when an operator's pass begins, that of the next
 * operator's first slice), and an operator's reduce-scatters overlap the
 * next operator's backward.  Whatever the plan, the runtime pokes its
 * communicators' progress (osdp/comm.h) between the operators' kernels, at
 * every slice use and at every pass end: MPI moves a non-blocking call's
 * data only inside the rank's MPI calls, so the calls above move theirs
 * while the rank computes, not all in their waits; the pokes change no
 * number and no event.
 *
 * The order of a step's allocations, gathers, computes and reduce-scatters
 * is data: the runtime builds its schedule once (osdp/schedule.h) and
 * executes it; the memory prediction evaluates the same events.
 *
 * Tensor parallelism (DESIGN.md §9).  On a mesh the layout is one rank's
 * tensor-parallel parts (osdp_layout_build_tp) and everything above works on
 * them: `comm`, N and rank are the rank's data-parallel group, which the
 * plan's DP / ZDP slices are sharded over; the options' tp_comm is its
 * tensor-parallel group, over which the operators' blocking collectives run
 * (osdp_tp_group, osdp/gpt.h).  Every rank of a tensor group computes the
 * same per-token losses and the same gradients of the replicated tensors, so
 * the step's sums count them once per group: the loss and the replicated
 * tensors' squared gradients are added by tensor rank 0 only, the split
 * tensors' by every rank; the two sums are all-reduced over the data group,
 * then over the tensor group.  The gradient norm, the clipping and AdamW are
 * then those of the whole model.  Validation sums its loss alike.
 *
 * Tensor-parallel traffic per optimizer step (the TP kinds, osdp/comm.h), per
 * rank, with A micro-steps of B sequences of T tokens, L blocks of widths
 * d_i, the embedding's width d_0 and the head's d_L; all fp32, logical bytes
 * (the whole buffer of each call):
 *   tp all-reduce   per micro-step: forward one of B T d (x 4 bytes) after
 *                   the embedding and after every attn and mlp (the row-
 *                   parallel products), recompute repeats its forward's;
 *                   backward one of B T d before the LayerNorm backward of
 *                   every attn, mlp and the head (after the column-parallel
 *                   products);
 *                   calls = A (1 + 2 L + R + 2 L + 1), R the recomputing
 *                   operators; bytes = 4 A B T (d_0 + 2 sum d_i + sum over
 *                   recomputing ops of d + 2 sum d_i + d_L);
 *                   plus, per step, one of the 2 doubles of the loss and norm
 *                   sums (16 bytes, 1 call)
 *   tp all-gather   per micro-step: the head's loss statistics, 3 B T floats
 *                   per rank: calls = A, bytes = 4 A 3 B T tp (logical: every
 *                   rank's part)
 * both only when tp > 1 (the head's all-gather also whenever its
 * cross-entropy is vocab-parallel).  Wire bytes: 2 (tp-1)/tp of an
 * all-reduce's, (tp-1)/tp of an all-gather's.  Validation passes are
 * counted in no step.
 *
 * Pipeline parallelism (DESIGN.md §9, osdp/pipeline.h).  With pp_size > 1
 * the rank holds the operators of its stage only, [stage_bounds[s],
 * stage_bounds[s+1]): their shards over its data group, as above.  A step is
 * one pass over the schedule's list of the stage's F and B passes of all
 * accum_steps micro-batches (GPipe or 1F1B: osdp/schedule.h), activations
 * and their gradients crossing to the adjacent stages point to point over
 * pp_fwd_comm / pp_bwd_comm (traffic kind OSDP_COLL_P2P, counted by the
 * sender: per step a stage before the last sends accum_steps x B T d floats
 * forward, a stage after the first as many backward, d the boundary's
 * width).  The loss is added on the last stage (tensor rank 0), the squared
 * gradient norm by each stage over its own operators; the sums are
 * all-reduced over the data group, the tensor group and the pipeline, so the
 * loss, the norm, the clipping and AdamW are those of the whole model on
 * every rank.  Micro-batch gradients are added in micro-batch order under
 * both schedules: GPipe and 1F1B give bitwise-identical steps.  A receive
 * whose peer died times out like a collective (OSDP_COMM_TIMEOUT_S).
 *
 * Node-first reduction (DESIGN.md §9).  When the data group spans K >= 2
 * nodes with R of its D = R K ranks on each (real nodes, or the emulated
 * ones of --ranks-per-node), every slice's gradients are reduced node
 * first, whatever the plan: a reduce-scatter over the node's R ranks
 * (node_comm, in place in the full gradients: rank i of the node keeps node
 * block i, padded / R elements), then one of that block over the K ranks
 * of the same index (cross_comm: node n keeps its sub-block n).  The rank
 * (node n, index i) then owns element block i K + n of a flat slice (its
 * flat_lo, and its place in the data group's all-gathers:
 * osdp_comm_set_block_order on `comm`); a hierarchical slice adds an
 * all-gather over cross_comm, so that every node holds node block i: an
 * all-reduce across the nodes written as its two halves.  Both modes make
 * the same two calls with the same counts on the same communicators, so
 * the sums, and with them the losses, are bitwise those of every other
 * plan on the mesh; the squared gradient norm adds, for a hierarchical
 * slice, just the sub-block the rank would own flat, in the same order.
 * The first stage starts where the flat reduce-scatter did (overlapped
 * with the next operator's backward), the second (and a hierarchical
 * slice's all-gather) runs blocking when it is waited.  Traffic: a flat
 * slice counts node RS + cross RS (+ its flat all-gathers), a hierarchical
 * one node AG, node RS, cross RS and cross AG (the kinds of osdp/comm.h).
 * A data group inside one node, or on nodes of unequal shares: one flat
 * reduce-scatter, as without nodes (and no hierarchical slice).
 *
 * Everything inside (the shards, the step's buffers, the schedule) is
 * private to src/runtime: checkpoints, initialisation and weight dumps
 * reach the shards through osdp_runtime_shards and the setters below.  The
 * runtime reads no data: the caller gives each step its micro-batches. */
#ifndef OSDP_RUNTIME_H
#define OSDP_RUNTIME_H

#include <stdint.h>
#include "osdp/comm.h"
#include "osdp/compute.h"
#include "osdp/gpt.h"
#include "osdp/layout.h"
#include "osdp/memory.h"
#include "osdp/optim.h"
#include "osdp/plan.h"
#include "osdp/schedule.h"

typedef struct osdp_runtime_options {
    /* the step (osdp/geometry.h): micro-batch, accumulation, prefetch, the working weights' dtype
     * (the backend's), the padding (osdp_compute_pad_quantum's), and the pipeline (pp_size 0 or 1:
     * none; stage s owns operators [stage_bounds[s], stage_bounds[s+1]); interleaved: V chunks per
     * stage, the last stage's chunks send on to the first).  n_ranks and node_ranks are the
     * communicators' (comm, node_comm), tp_size the layout's: the runtime sets them itself. */
    osdp_step_geometry geo;
    size_t mem_limit;       /* emulated device memory per rank, 0: none */
    uint64_t seed;          /* weights and data order */
    osdp_optim_config optim;
    osdp_comm *tp_comm;     /* the tensor-parallel group (its size: the layout's tp_size); NULL: none,
                               for a layout of tp_size 1 */
    /* this rank's pipeline stage (pp_stage of geo.pp_size): activations go to the next stage over
     * pp_fwd_comm, their gradients to the previous one over pp_bwd_comm (both: the rank's pipeline,
     * ranked by stage; osdp_mesh_comm_create(.., OSDP_MESH_PIPELINE, ..) twice). */
    int pp_stage;
    osdp_comm *pp_fwd_comm, *pp_bwd_comm;
    /* the data group's nodes: node_comm holds the ranks of the data group
     * on this rank's node, cross_comm those of the data group with this
     * rank's index in its node, one per node (osdp_node_groups_create makes
     * both).  With cross_comm over >= 2 ranks every slice is reduced node
     * first (above).  Required when the plan has a hierarchical operator;
     * NULL: one node (a flat reduce-scatter over comm). */
    osdp_comm *node_comm, *cross_comm;
} osdp_runtime_options;

typedef struct osdp_step_stats {
    long step;              /* 1-based optimizer step just done */
    double loss;            /* mean token loss over the global batch */
    double grad_norm;
    float lr;
    double seconds;
    long tokens;            /* tokens in the global batch */
    osdp_traffic traffic;   /* this step, this rank: both groups' collectives */
    double val_loss;        /* the validation loss after this step; NAN: not evaluated
                               (the caller sets it: osdp_runtime_evaluate) */
} osdp_step_stats;

/* The fields are read-only outside src/runtime. */
typedef struct osdp_runtime {
    const osdp_layout *layout;
    osdp_plan plan;
    osdp_comm *comm;                  /* the data-parallel group */
    osdp_comm *tp_comm;               /* the tensor-parallel group, NULL without one */
    const osdp_compute_backend *backend;
    osdp_memory mem;                  /* the accounting allocator: measured peaks */
    osdp_runtime_options opt;
    int N, rank, B, T;                /* N, rank: in the data-parallel group */
    int tp_size, tp_rank;             /* in the tensor-parallel group (1, 0 without one) */
    osdp_comm *node_comm, *cross_comm;/* the data group's nodes and its ranks across them; NULL without */
    int node_rank, node_ranks;        /* index in the node's part of the data group, its size (rank, N without) */
    int cross_rank;                   /* the node's index among the data group's nodes (0 without) */
    int flat_block;                   /* the block of a flat slice this rank owns: node_rank x nodes +
                                         cross_rank when reduced node-first, else rank */
    osdp_dtype weight_dtype;          /* working weights and their all-gathers */
    long step;                        /* optimizer steps done */
    struct osdp_runtime_internal *in; /* the schedule, the shards, the step's buffers (src/runtime) */
} osdp_runtime;

osdp_status osdp_runtime_create(osdp_runtime *rt, const osdp_layout *layout, const osdp_plan *plan,
                                osdp_comm *comm, const osdp_compute_backend *backend,
                                const osdp_runtime_options *opt);
/* One optimizer step of opt.geo.accum_steps micro-steps.  tokens: this rank's
 * micro-batches, host ints (accum_steps, 2, B, T): per micro-step the inputs,
 * then the targets (osdp_data_batch fills both; every stage of a pipeline
 * gets the same: the first reads the inputs, the last the targets). */
osdp_status osdp_runtime_step(osdp_runtime *rt, const int *tokens, osdp_step_stats *stats);
/* Collective: the mean token loss of the current weights over n_batches
 * validation batches, forward only through the same plan (the schedule's
 * eval list: osdp/schedule.h).  tokens: this rank's micro-batches, host ints
 * (n_batches x accum_steps, 2, B, T), laid out as osdp_runtime_step's; the
 * per-rank loss sums are added over the ranks once, so *loss is the same on
 * every rank and, at a fixed rank count, for every plan. */
osdp_status osdp_runtime_evaluate(osdp_runtime *rt, const int *tokens, int n_batches, double *loss);
void osdp_runtime_destroy(osdp_runtime *rt);

/* Collective over the data group (an MPI_Comm passed as void*): the groups
 * of its nodes, node_comm over its ranks on this rank's node (node: the
 * node's index, real or emulated: every rank of a node passes the same) and
 * cross_comm over its ranks with this rank's index in its node, both in
 * data-group order and counting their kinds by level (osdp/comm.h); NCCL
 * when nccl is set.  Made (*made = 1) when the group spans >= 2 nodes with
 * as many of its ranks on each, or, for a plan with hierarchical operators
 * (for_h), on one node too; otherwise *made = 0 and nothing is made (a flat
 * reduction), except that for_h on nodes of different shares is
 * OSDP_ERR_INPUT, the same on every rank. */
osdp_status osdp_node_groups_create(const void *data_mpi_comm, int node, int nccl, int local_device, int for_h,
                                    osdp_comm *node_comm, osdp_comm *cross_comm, int *made);

/* ---- the shards, for checkpoints, initialisation and weight dumps -------- */

typedef enum osdp_state_kind {
    OSDP_STATE_MASTER, OSDP_STATE_GRAD, OSDP_STATE_M, OSDP_STATE_V, OSDP_STATE_N_KINDS
} osdp_state_kind;

/* This rank's part of one slice of an operator (the whole operator when it is
 * not split): shard elements [local, local + numel) of the operator's state
 * arrays hold its flat elements [flat_lo, flat_lo + numel), those at or past
 * flat_hi being padding (zero, never updated). */
typedef struct osdp_shard_segment {
    int op, slice;
    int replica;        /* 0: the copy written; > 0: a hierarchical slice's copy on another node
                           than the first (the same elements as that node's rank) */
    size_t flat_lo, flat_hi, numel, local;
    float *state[OSDP_STATE_N_KINDS];   /* backend memory at this segment's first element */
} osdp_shard_segment;

/* Iterates over the segments of operator op (op < 0: of every operator, in
 * operator order), slices in order; an operator outside the rank's pipeline
 * stage has none (checkpoints rely on it: each stage writes its own):
 *     osdp_shard_iter it = osdp_runtime_shards(rt, -1);
 *     osdp_shard_segment seg;
 *     while (osdp_shard_next(&it, &seg)) ... */
typedef struct osdp_shard_iter { const osdp_runtime *rt; int op, slice, last_op; } osdp_shard_iter;
osdp_shard_iter osdp_runtime_shards(const osdp_runtime *rt, int op);
int osdp_shard_next(osdp_shard_iter *it, osdp_shard_segment *seg);
/* operator op's whole shard: its elements (the sum of its segments, which
 * are contiguous from local 0) and where each state kind starts; 0 (and NULL
 * states) for an operator outside the rank's pipeline stage */
size_t osdp_runtime_op_shard(const osdp_runtime *rt, int op, float *state[OSDP_STATE_N_KINDS]);

/* the master weights changed outside a step (checkpoint load): DP copies are
 * gathered again at their next use */
void osdp_runtime_invalidate_weights(osdp_runtime *rt);
/* where training stands: optimizer steps done and the seed of the data order */
void osdp_runtime_set_position(osdp_runtime *rt, long step, uint64_t seed);
/* AdamW moments to zero (a fresh optimizer on loaded weights) */
void osdp_runtime_reset_moments(osdp_runtime *rt);
/* collective over the data group: gathers operator op's master weights
 * slice by slice; host (op numel floats, on every rank of the group) gets
 * the flat buffer.  OSDP_ERR_INPUT for an operator outside the rank's
 * pipeline stage. */
osdp_status osdp_runtime_gather_op(osdp_runtime *rt, int op, float *host);

#endif

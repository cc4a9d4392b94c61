/* The pipeline axis of the mesh (DESIGN.md §9): stages, their split of the
 * operators, and the order in which a stage runs the step's micro-batches.
 *
 * Stage s of P owns the contiguous operators [bounds[s], bounds[s+1]):
 * bounds[0] = 0, bounds[P] = n_ops, every stage at least one operator (the
 * embedding in the first stage, the head in the last).
 *
 * Order.  A step's M micro-batches (the accumulation steps) pass every
 * stage forward, then backward.  osdp_pipe_order lists stage s's passes:
 *   GPipe  F0 F1 .. F(M-1), then B0 B1 .. B(M-1)
 *   1F1B   (PipeDream-flush) w = min(P - 1 - s, M) warm-up forwards, then
 *          F(w+j) B(j) alternately while forwards remain, then the rest
 *          of the backwards: at most min(P - s, M) micro-batches in flight
 *          on stage s (P on the first, 1 on the last)
 *   interleaved  (Megatron-LM's virtual stages, Narayanan et al. SC'21
 *          §2.2.2) the operators are cut into P V contiguous chunks and
 *          rank s holds chunks s, s + P, .., s + (V-1) P (its local
 *          chunks 0 .. V-1).  Its V M forwards run in groups of P
 *          micro-batches: virtual forward k is local chunk (k mod PV) / P
 *          of micro-batch (k / PV) P + k mod P; virtual backward k the
 *          same with the chunks in reverse.  w = min(2 (P - 1 - s) +
 *          (V - 1) P, V M) warm-up forwards (all V M when M = P), then
 *          forward w + j and backward j alternately, then the rest of the
 *          backwards.  M must be a multiple of P.  The idle fraction
 *          falls to (P - 1) / (V M + P - 1): a bubble of (P - 1) / (V M) of
 *          the ideal time instead of (P - 1) / M, for V times the
 *          point-to-point messages (every chunk boundary is one, the last
 *          rank's chunks sending on to the first rank's next chunk).
 * Backwards run in micro-batch order under all three, chunk by chunk, so
 * an operator adds its micro-batches' gradients in the same order, and
 * GPipe, 1F1B and interleaved 1F1B give bitwise-identical steps.  This
 * list is the one both the runtime's schedule (osdp/schedule.h) and the
 * cost model's pipeline time follow. */
#ifndef OSDP_PIPELINE_H
#define OSDP_PIPELINE_H

#include <stddef.h>
#include "osdp/error.h"

/* the most pipeline stages P (ranks of a pipeline), and the most model
 * chunks P V (interleaved; V = 1: the stages): Megatron-LM's 530B row of
 * its weak-scaling table runs P 35 x V 3 = 105 chunks.  Arrays over chunks
 * (the split's bounds, their costs) take OSDP_MAX_CHUNKS; over stages
 * OSDP_MAX_STAGES; a stage holds at most OSDP_MAX_CHUNKS / 2 chunks. */
#define OSDP_MAX_STAGES 64
#define OSDP_MAX_CHUNKS 128

typedef enum osdp_pipe_schedule { OSDP_PIPE_1F1B, OSDP_PIPE_GPIPE, OSDP_PIPE_INTERLEAVED } osdp_pipe_schedule;

/* "1f1b" / "gpipe" / "interleaved" */
const char *osdp_pipe_schedule_name(osdp_pipe_schedule kind);
/* OSDP_ERR_INPUT naming --schedule for anything else */
osdp_status osdp_pipe_schedule_parse(const char *text, osdp_pipe_schedule *kind);

/* one pass of a stage over one micro-batch; chunk: the stage's local chunk
 * (interleaved: global chunk chunk P + s; 0 under the others) */
typedef struct osdp_pipe_pass { int micro; int backward; int chunk; } osdp_pipe_pass;

/* Stage s's 2M passes, in the order it runs them, into out[2M] (V = 1). */
void osdp_pipe_order(osdp_pipe_schedule kind, int P, int s, int M, osdp_pipe_pass *out);
/* Stage s's 2 V M passes over its V chunks into out[2 V M]; V > 1 only
 * with OSDP_PIPE_INTERLEAVED and M a multiple of P (osdp_pipe_check). */
void osdp_pipe_order_chunks(osdp_pipe_schedule kind, int P, int V, int s, int M, osdp_pipe_pass *out);
/* OSDP_ERR_INPUT naming the options when V chunks per stage cannot run:
 * V > 1 without --schedule interleaved, interleaved on one stage, M not
 * a multiple of P, P V chunks for fewer operators or more than
 * OSDP_MAX_CHUNKS.  n_ops 0: not checked. */
osdp_status osdp_pipe_check(osdp_pipe_schedule kind, int P, int V, int M, int n_ops);
/* the stage (rank of the pipeline) that holds global chunk c of P V: c mod P */
static inline int osdp_pipe_chunk_stage(int P, int c) { return c % P; }
/* the global chunk (bounds[c] <= op < bounds[c+1]) holding operator op, of n_chunks */
int osdp_pipe_chunk_of(const int *bounds, int n_chunks, int op);
/* the most micro-batches stage s holds between their forward and backward */
int osdp_pipe_in_flight(osdp_pipe_schedule kind, int P, int s, int M);
/* The passes that follow a backward of stage s (one chunk) while it holds
 * its most micro-batches (osdp_pipe_in_flight): OSDP_PIPE_THEN_FORWARD when
 * some such backward is followed by a forward, OSDP_PIPE_THEN_BACKWARD by a
 * backward; 0 when none is followed by anything (M = 1).  A backward's
 * first operator prefetches the next pass's first slice (osdp/cost_model.h,
 * the stage's wrap moment), a moment that grows with the micro-batches
 * held; in osdp_pipe_order, whatever follows a backward at fewer also
 * follows one at the most (tests/planner/test_planner_terms.c checks it),
 * so these two flags give the stage's every such moment. */
enum { OSDP_PIPE_THEN_FORWARD = 1, OSDP_PIPE_THEN_BACKWARD = 2 };
int osdp_pipe_after_backward(osdp_pipe_schedule kind, int P, int s, int M);
/* the same over its V chunks: the most (chunk, micro-batch) pairs held at
 * once (interleaved stage 0: min(2 (P - 1) + (V - 1) P + 1, V M)) */
int osdp_pipe_in_flight_chunks(osdp_pipe_schedule kind, int P, int V, int s, int M);
/* V as a runtime's options give it (0 reads as 1) */
static inline int osdp_pipe_chunks_per_stage(int virtual_stages) { return virtual_stages > 1 ? virtual_stages : 1; }
/* the idle fraction of a balanced pipeline: (P - 1) / (M + P - 1) */
double osdp_pipe_bubble(int P, int M);
/* the same with V chunks per stage (interleaved): (P - 1) / (V M + P - 1) */
double osdp_pipe_bubble_chunks(int P, int V, int M);

/* "0:13,13:26,..." (stage s: operators [a, b)) into bounds[P+1]; the
 * ranges must be contiguous, non-empty and cover [0, n_ops).  OSDP_ERR_INPUT
 * naming --stages and the fault otherwise. */
osdp_status osdp_stage_split_parse(const char *text, int n_ops, int P, int *bounds);
/* The same for V chunks per stage (interleaved): P V ranges, chunk c on
 * stage c mod P; for V > 1 the errors speak of chunks (the count's names
 * --pp and --virtual-stages). */
osdp_status osdp_chunk_split_parse(const char *text, int n_ops, int P, int V, int *bounds);
/* "0:13,13:26" into buf; a buffer of OSDP_STAGE_SPLIT_CHARS holds any split
 * (OSDP_MAX_CHUNKS ranges "a:b," of two ints) */
#define OSDP_STAGE_SPLIT_CHARS (OSDP_MAX_CHUNKS * 24)
const char *osdp_stage_split_format(const int *bounds, int P, char *buf, size_t n);
/* Contiguous stages minimising the largest stage's sum of op_cost
 * (operator times from the cost model; ties: the earliest boundaries);
 * OSDP_ERR_INPUT when P exceeds n_ops or OSDP_MAX_CHUNKS (it splits chunks
 * too). */
osdp_status osdp_stage_split_balanced(const double *op_cost, int n_ops, int P, int *bounds);

/* Megatron-LM's scatter/gather (SC'21 section 4.1): a message between
 * stages is the same on every rank of a tensor group (the residual stream
 * forward, its gradient backward), so tensor rank r of t sends only piece r
 * to its counterpart on the other stage, whose group all-gathers the t
 * pieces over its fast in-node link.  Of a message of n elements, piece r
 * starts at r (n / t) and holds n / t of them.  t divides n on every
 * layout, so the pieces are equal and cover the message: a message is
 * b T d elements, d the width of the operator before the boundary (embed's
 * or a block's, osdp_buffer_bytes' STAGE_INPUT; the head is never before
 * one); the model file's n_head divides every block's width (and embed's is
 * block 0's), and --tp divides n_head (osdp_layout_build_tp refuses a width
 * that t does not divide, whatever made the configuration). */
typedef struct osdp_pipe_piece { size_t at, count; } osdp_pipe_piece;
static inline osdp_pipe_piece osdp_pipe_piece_of(size_t n, int t, int r)
{
    if (t <= 1) return (osdp_pipe_piece){0, n};
    const size_t even = n / (size_t)t;
    return (osdp_pipe_piece){(size_t)r * even, even};
}

#endif

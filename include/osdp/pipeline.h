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
 * Backwards run in micro-batch order under both, so a stage adds its
 * micro-batches' gradients in the same order, and GPipe and 1F1B give
 * bitwise-identical steps.  This list is the one both the runtime's
 * schedule (osdp/schedule.h) and the cost model's pipeline time follow. */
#ifndef OSDP_PIPELINE_H
#define OSDP_PIPELINE_H

#include <stddef.h>
#include "osdp/error.h"

#define OSDP_MAX_STAGES 64

typedef enum osdp_pipe_schedule { OSDP_PIPE_1F1B, OSDP_PIPE_GPIPE } osdp_pipe_schedule;

/* "1f1b" / "gpipe" */
const char *osdp_pipe_schedule_name(osdp_pipe_schedule kind);
/* OSDP_ERR_INPUT naming --schedule for anything else */
osdp_status osdp_pipe_schedule_parse(const char *text, osdp_pipe_schedule *kind);

/* one pass of a stage over one micro-batch */
typedef struct osdp_pipe_pass { int micro; int backward; } osdp_pipe_pass;

/* Stage s's 2M passes, in the order it runs them, into out[2M]. */
void osdp_pipe_order(osdp_pipe_schedule kind, int P, int s, int M, osdp_pipe_pass *out);
/* the most micro-batches stage s holds between their forward and backward */
int osdp_pipe_in_flight(osdp_pipe_schedule kind, int P, int s, int M);
/* the idle fraction of a balanced pipeline: (P - 1) / (M + P - 1) */
double osdp_pipe_bubble(int P, int M);

/* "0:13,13:26,..." (stage s: operators [a, b)) into bounds[P+1]; the
 * ranges must be contiguous, non-empty and cover [0, n_ops).  OSDP_ERR_INPUT
 * naming --stages and the fault otherwise. */
osdp_status osdp_stage_split_parse(const char *text, int n_ops, int P, int *bounds);
/* "0:13,13:26" into buf */
const char *osdp_stage_split_format(const int *bounds, int P, char *buf, size_t n);
/* Contiguous stages minimising the largest stage's sum of op_cost
 * (operator times from the cost model; ties: the earliest boundaries);
 * OSDP_ERR_INPUT when P exceeds n_ops or OSDP_MAX_STAGES. */
osdp_status osdp_stage_split_balanced(const double *op_cost, int n_ops, int P, int *bounds);

#endif

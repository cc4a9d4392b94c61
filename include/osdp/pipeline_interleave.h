/* Interleaving a planned pipeline (osdp/pipeline.h: Megatron-LM's virtual
 * stages).  Given a pipeline the planner chose under 1F1B
 * (osdp_planner_pipeline: its stages' operator plans, b and M), try V
 * model chunks per stage and keep the fastest V that fits:
 *   candidates   V = 1 (the choice itself), and every V >= 2 dividing the
 *                layers per stage (n_layer / P, Megatron's condition),
 *                P V chunks within the operators and OSDP_MAX_CHUNKS; or
 *                the one V asked for (--virtual-stages)
 *   chunks       the P V contiguous chunks that balance the cost model's
 *                operator times under the plan (osdp_planner_stage_split)
 *   refused      M not a multiple of P (Megatron's condition): named in why
 *   time         osdp_pipe_step_time_chunks: the chunks' passes and their
 *                P V - 1 messages simulated (the bubble falls to
 *                (P - 1) / (V M + P - 1) of the step, (P - 1) / (V M) of the
 *                ideal; every chunk boundary is a message: V times 1F1B's)
 *   memory       every stage's peak on the runtime's own schedule of its
 *                chunks (osdp_schedule_predict: exact to the byte, the
 *                in-flight (chunk, micro-batch) activations included)
 *                against the limit the stage was planned under
 * The operator plan is the 1F1B one: interleaving changes when passes run
 * and how many activations wait, not what an operator does.
 * osdp_pipe_interleave_search lists every option (plan --pp P --schedule
 * interleaved); osdp_pipe_interleave_choose turns a pipeline into its best
 * option (the 3D search's V, src/planner/planner_3d.c). */
#ifndef OSDP_PIPELINE_INTERLEAVE_H
#define OSDP_PIPELINE_INTERLEAVE_H

#include "osdp/planner.h"

#define OSDP_INTERLEAVE_MAX_OPTIONS 8

typedef struct osdp_interleave_option {
    int V;
    int fits;                             /* runs (M a multiple of P) and every stage within its limit */
    char why[192];                        /* when it does not */
    int bounds[OSDP_MAX_CHUNKS + 1];      /* the P V chunks */
    osdp_pipe_timing timing;              /* the step, simulated idle fraction, closed-form bubble */
    double bubble_of_ideal;               /* (P - 1) / (V M): Megatron's bubble time fraction */
    long long stage_peak[OSDP_MAX_STAGES];    /* the runtime schedule's peak per rank of each stage */
    long long replicated_bytes[OSDP_MAX_STAGES];  /* of which a baseline's replicated state of its chunks */
    long long p2p_bytes[OSDP_MAX_STAGES];     /* sent per step by one rank of each stage */
    int largest_stage;                    /* the stage of the largest peak */
} osdp_interleave_option;

typedef struct osdp_interleave_result {
    int n;
    osdp_interleave_option option[OSDP_INTERLEAVE_MAX_OPTIONS];
    int best;                             /* the fastest that fits (option 0, V = 1, always does) */
} osdp_interleave_result;

/* c: a pipeline planned under 1F1B; n_layer: the model's layers; v_asked:
 * the V of --virtual-stages (> 1: only it, beside V = 1), 0 to search;
 * chunks: with v_asked > 1, its P V chunks as given (--stages), else NULL
 * (the balanced ones). */
osdp_status osdp_pipe_interleave_search(const osdp_pipe_choice *c, const osdp_device *dev,
                                        const osdp_planner_options *o, int n_layer, int v_asked,
                                        const int *chunks, osdp_interleave_result *out);

/* whether V >= 2 chunks per stage are candidates on P stages of a model of n_layer layers and n_ops operators:
 * V divides the layers per stage (n_layer / P, Megatron's condition), P V chunks within the operators and
 * OSDP_MAX_CHUNKS */
int osdp_pipe_interleave_candidate(int P, int V, int n_layer, int n_ops);
/* whether some candidate V in [v_lo, v_hi] (V >= 2, among the first OSDP_INTERLEAVE_MAX_OPTIONS - 1 candidates
 * the search lists) can run M micro-batches on P stages (M a multiple of P) */
int osdp_pipe_interleave_possible(int P, int M, int n_layer, int n_ops, int v_lo, int v_hi);
/* c (planned under 1F1B) becomes its fastest option with V in [v_lo, v_hi] that fits (V = 1: c as planned,
 * when v_lo <= 1; the same options and chunks as osdp_pipe_interleave_search, v_lo = v_hi >= 2: that V
 * alone); V >= 2: geo.pipe_schedule interleaved, geo.virtual_stages V, geo.stage_bounds the P V chunks, the
 * step and timing, each stage's peak (peak_bytes = schedule_peak: the runtime schedule's), in_flight,
 * p2p_bytes, busy_s and pass (its chunks'); stage[s].lo, hi stay the stage its operator plan was searched as.
 * cutoff >= 0: options slower than it are not checked for memory.  No option (v_lo >= 2):
 * OSDP_ERR_INFEASIBLE with why, *bounded = 1 when only the cutoff ruled them out. */
osdp_status osdp_pipe_interleave_choose(osdp_pipe_choice *c, const osdp_device *dev, const osdp_planner_options *o,
                                        int n_layer, int v_lo, int v_hi, double cutoff, int *bounded);

#endif

/* The step's geometry: how one optimizer step is cut into micro-batches and
 * laid over the mesh, written once.
 *
 * The plan carries the part the planner decides (micro_batch, accum_steps,
 * tp_size: osdp/plan.h); the schedule (osdp_schedule_options), the runtime
 * (osdp_runtime_options), the cost model (osdp_cost_model), the planner's
 * options and the checkpoint's saved state (osdp_ckpt_info) read the rest
 * from the same struct, embedded, instead of each repeating its fields.
 * What is one rank's and not the step's (its pipeline stage, its
 * communicators, the memory limit, the seed, the optimizer) stays in the
 * struct of the part that needs it.
 *
 * The mesh is tp_size x n_ranks x pp_size ranks (osdp/mesh.h): n_ranks is
 * the data-parallel group's, the N that shards are padded and sharded
 * over.  A field left 0 reads as its default where a reader allows it (the
 * comments say which). */
#ifndef OSDP_GEOMETRY_H
#define OSDP_GEOMETRY_H

#include "osdp/dtype.h"
#include "osdp/pipeline.h"

typedef struct osdp_step_geometry {
    int micro_batch;        /* B: sequences per rank per micro-step (0: not chosen) */
    int accum_steps;        /* M: micro-batches (micro-steps) per optimizer step */
    int n_ranks;            /* N: the ranks of the data-parallel group */
    int tp_size;            /* the tensor-parallel degree (0: not stated, read as 1) */
    int pp_size;            /* pipeline stages (0 or 1: no pipeline) */
    int node_ranks;         /* ranks of the data group on one node: a hierarchical slice's shard ranks
                               (0 reads as n_ranks: one node) */
    /* the pipeline (osdp/pipeline.h): stage s holds operators [stage_bounds[s], stage_bounds[s+1]);
     * interleaved, V = virtual_stages chunks per stage, stage_bounds the P V chunks' bounds, chunk c
     * on stage c mod P */
    int stage_bounds[OSDP_MAX_CHUNKS + 1];
    osdp_pipe_schedule pipe_schedule;
    int virtual_stages;     /* V (0 reads as 1) */
    int pad_quantum;        /* shard padding (osdp_compute_pad_quantum); 0 reads as 1, the CPU's */
    osdp_dtype weight_dtype;    /* working weights and their all-gathers: fp32 or bf16 */
    osdp_dtype residual_dtype;  /* the residual stream, each operator's output (OSDP_FLOAT32, 0: as ever; bf16:
                                   rounded to bf16 values, and a recomputed operator keeps it in 2 bytes,
                                   osdp/schedule.h); bf16 only with bf16 weights */
    int prefetch;           /* overlap gathers / reduce-scatters with compute */
} osdp_step_geometry;

/* the ranks of the data group on one node (node_ranks, or n_ranks when 0) */
static inline int osdp_geometry_node_ranks(const osdp_step_geometry *g)
{
    return g->node_ranks > 0 ? g->node_ranks : g->n_ranks;
}

#endif

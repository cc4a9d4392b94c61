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
 *                        slice by slice into the gradient shards
 * With prefetch the gather of the next slice use starts before the current
 * one computes (and, when an operator's pass begins, that of the next
 * operator's first slice), and an operator's reduce-scatters overlap the
 * next operator's backward.
 *
 * A runtime created with dry = 1 performs the same allocations in the same
 * order through a counting allocator, without memory, compute or
 * communication: that is how the cost model predicts peak memory. */
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

struct osdp_dataset;

typedef struct osdp_runtime_options {
    int micro_batch;        /* sequences per rank per micro-step */
    int accum_steps;        /* micro-steps per optimizer step */
    int prefetch;           /* overlap gathers / reduce-scatters with compute */
    size_t mem_limit;       /* emulated device memory per rank, 0: none */
    uint64_t seed;          /* weights and data order */
    osdp_optim_config optim;
    int dry;                /* count memory only (cost model) */
    int n_ranks, rank;      /* for dry runtimes (no comm) */
    osdp_dtype weight_dtype;    /* working weights: the backend's (dry: the one to count) */
} osdp_runtime_options;

/* One slice of an operator (the whole operator when it is not split): a
 * range of its flat buffer, padded to a multiple of N and sharded on its own,
 * so that it can be gathered and reduce-scattered alone (DESIGN.md §3). */
typedef struct osdp_slice_state {
    size_t lo, hi;          /* elements [lo, hi) of the operator's flat buffer */
    size_t padded;          /* hi - lo padded to a multiple of N */
    size_t base;            /* offset in the operator's full buffers (sum of earlier padded) */
    size_t local;           /* offset of this rank's part (padded / N) in the shard arrays */
    size_t flat_lo;         /* flat element of local[0]: lo + rank * padded / N */
    int zdp;
    void *weights;          /* full working weights of the slice when present (weight_dtype) */
    int present;            /* weights allocated (also when dry) */
    int valid;              /* DP: gathered this step */
    int pending;            /* gather in flight */
    osdp_request gather;
    osdp_request scatter;
} osdp_slice_state;

typedef struct osdp_op_state {
    int n_slices, zdp_slices;   /* g and k of the plan */
    size_t bounds[OSDP_MAX_SLICES + 1];
    osdp_slice_state slice[OSDP_MAX_SLICES];
    size_t padded, shard;   /* sums over slices: full-buffer and shard elements */
    float *state;           /* (4, shard): master, grad, m, v */
    float *master, *grad, *m, *v;
    void *master_copy;      /* bf16 weights: the master shard rounded, what is all-gathered
                               (made at the start of every step); NULL for fp32 */
    void *resident;         /* DP slices' full weights (slices k..g-1, contiguous) */
    size_t resident_numel;
    float *full_grad;       /* (padded) during backward, slice s at slice[s].base */
    float *grad_recv;       /* (shard) reduce-scatter destination */
    float *acts_base;       /* activation block during the micro-step */
    float *kept_out;        /* recompute: the output, kept from forward to backward */
    osdp_op_acts acts;
} osdp_op_state;

/* This rank's part of slice s: state elements [local, local + padded / N)
 * hold flat elements [flat_lo, ...) of the operator, those at or past hi
 * being padding (zero).  Checkpoints, initialisation and the optimizer walk
 * these segments. */
static inline size_t osdp_slice_shard_numel(const osdp_slice_state *sl, int n_ranks)
{
    return sl->padded / (size_t)n_ranks;
}

typedef struct osdp_step_stats {
    long step;              /* 1-based optimizer step just done */
    double loss;            /* mean token loss over the global batch */
    double grad_norm;
    float lr;
    double seconds;
    long tokens;            /* tokens in the global batch */
    osdp_traffic traffic;   /* this step, this rank */
} osdp_step_stats;

typedef struct osdp_runtime {
    const osdp_layout *layout;
    osdp_plan plan;
    osdp_comm *comm;                  /* NULL when dry */
    const osdp_compute_backend *backend;
    osdp_memory mem;
    osdp_runtime_options opt;
    int N, rank, B, T;
    osdp_dtype weight_dtype;          /* working weights and their all-gathers */
    size_t weight_size;               /* its bytes per element */
    long step;                        /* optimizer steps done */
    osdp_op_state *ops;
    float *workspace_base;
    size_t workspace_bytes;
    osdp_workspace ws;
    int *batch_host;                  /* (2, B, T) inputs, targets */
    int pending_scatter;              /* op whose reduce-scatters are in flight, -1 none */
    struct osdp_weight_use *uses;     /* the order weights are used in a micro-step */
    int n_uses, cur_use;              /* cur_use: the use being computed, -1 before the first */
    int micro;                        /* micro-step within the step */
    double *sums;                     /* backend memory: the step's loss sum and squared
                                         gradient norm, read back once per step */
    osdp_op_context ctx;
} osdp_runtime;

osdp_status osdp_runtime_create(osdp_runtime *rt, const osdp_layout *layout, const osdp_plan *plan,
                                osdp_comm *comm, const osdp_compute_backend *backend,
                                const osdp_runtime_options *opt);
/* one optimizer step (accum_steps micro-steps); data may be NULL when dry */
osdp_status osdp_runtime_step(osdp_runtime *rt, const struct osdp_dataset *data, osdp_step_stats *stats);
void osdp_runtime_destroy(osdp_runtime *rt);
/* the master weights changed outside a step (checkpoint load): DP copies are
 * gathered again at their next use */
void osdp_runtime_invalidate_weights(osdp_runtime *rt);
/* collective: gathers operator op's master weights slice by slice; host
 * (op numel floats, on every rank) gets the flat buffer */
osdp_status osdp_runtime_gather_op(osdp_runtime *rt, int op, float *host);

/* Peak bytes per category and in total that the runtime reaches for this
 * plan: a dry runtime running one step. */
typedef struct osdp_memory_prediction {
    size_t peak[OSDP_MEM_N_CATEGORIES];
    size_t peak_total;
} osdp_memory_prediction;
osdp_status osdp_memory_predict(const osdp_layout *layout, const osdp_plan *plan, int n_ranks,
                                int micro_batch, int accum_steps, int prefetch, osdp_dtype weight_dtype,
                                osdp_memory_prediction *out);

#endif

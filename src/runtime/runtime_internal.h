/* The runtime's private state (osdp/runtime.h): what the schedule's events
 * act on.  Only src/runtime includes this. */
#ifndef OSDP_RUNTIME_INTERNAL_H
#define OSDP_RUNTIME_INTERNAL_H

#include "osdp/runtime.h"

typedef struct rt_slice {
    size_t flat_lo;         /* flat element of this rank's first: lo + flat_block * padded / N (the
                               in-node rank and size for a hierarchical slice) */
    osdp_comm *comm;        /* what gathers it (and reduce-scatters it, when the data group is one
                               node): the data group, or the node's part of it for a hierarchical slice */
    void *weights;          /* full working weights when present (weight dtype) */
    int pending;            /* a gather into them in flight */
    osdp_request gather;
    osdp_request scatter;
} rt_slice;

typedef struct rt_op {
    float *state;           /* (4, shard): master, grad, m, v */
    float *master, *grad, *m, *v;
    void *master_copy;      /* bf16 weights: the master shard rounded, what is all-gathered
                               (made at the start of every step); NULL for fp32 */
    void *resident;         /* DP slices' full weights (slices k..g-1, contiguous) */
    float *full_grad;       /* (padded) during backward, slice s at slice[s].base */
    float *grad_recv;       /* (shard of the slices reduced every micro-batch) reduce-scatter destination */
    float *grad_accum;      /* (padded of the reduce-once slices) their full gradients summed over the step (all run) */
    /* per micro-batch slot (osdp_schedule_micro_slots: 1 without a pipeline) */
    float **acts_base;      /* [slots] activation block from the forward to the backward */
    void **kept_out;        /* [slots] recompute: the output, kept from forward to backward (fp32, or bf16
                               when narrow: osdp/schedule.h) */
    float **kept_wide;      /* [slots] narrow: kept_out widened, for a pass of the next operator */
    osdp_op_acts *acts;     /* [slots] */
    rt_slice slice[OSDP_MAX_SLICES];
} rt_op;

struct osdp_runtime_internal {
    osdp_schedule sched;
    rt_op *ops;             /* [n_ops] */
    float *workspace_base;
    osdp_workspace ws;
    size_t weight_size;     /* bytes per working-weight element */
    const int *tokens;      /* host ints (micro-batches, 2, B, T), an event's micro-batch counted from
                               here: the micro-step's without a pipeline, the step's with one */
    int micro;              /* micro-step within the step (0 with a pipeline: its one list is the step) */
    int last_micro;         /* the step's last micro-step: events flagged last_micro_only run in it alone */
    /* the pipeline (pp_size > 1): per micro-batch slot */
    float **stage_input;    /* [message slots] STAGE_INPUT: a chunk's input from the previous stage */
    osdp_request *act_send; /* [message slots] the send of a chunk's output to the next stage */
    osdp_request grad_send; /* interleaving: the gradient send in flight (SEND_GRAD_WAIT) */
    int pp_prev, pp_next;   /* ranks of the adjacent stages in the pipeline communicators, -1: none
                               (interleaved: a ring, the last stage's next is the first) */
    double global_tokens;   /* tokens in the global batch */
    float loss_scale;       /* d(loss)/d(per-token loss): 1 / global_tokens */
    double loss, grad_norm; /* the step's, once the sums are all-reduced */
    float lr, clip_scale;   /* the step's learning rate and gradient clipping factor */
    int cursor;             /* next event of the list being executed */
    double *sums;           /* backend memory: the step's loss sum and squared
                               gradient norm, read back once per step */
    float *tp_staging;      /* OSDP_BUF_TP_STAGING, NULL when the schedule has none */
    osdp_tp_group tp;       /* the operators' collectives over rt->tp_comm (runtime.c) */
    osdp_op_context ctx;
    /* the residual a forward left to the next operator's (executor.c: osdp_op_context's
     * defer_residual), for operator residual_left_op (-1: none) of micro-batch residual_left_micro */
    const float *residual_left;
    int residual_left_op, residual_left_micro;
};

/* Executes events [rt->in->cursor, end) of list `ev` (the setup, a
 * micro-step or the optimizer), operator passes included
 * (src/runtime/executor.c). */
osdp_status osdp_runtime_execute(osdp_runtime *rt, const osdp_event *ev, int end);
/* Frees every buffer the schedule allocated that is still held (after an
 * error mid-step too), waiting for gathers in flight. */
void osdp_runtime_release_all(osdp_runtime *rt);
/* lets the runtime's non-blocking calls in flight advance (executor.c: which communicators, and why) */
void osdp_runtime_progress(osdp_runtime *rt);
/* The step's (or a validation pass's) sums, n doubles on the host, added up
 * over the whole mesh: the data group, then the tensor group (osdp/runtime.h
 * says who adds what). */
osdp_status osdp_runtime_reduce_over_mesh(osdp_runtime *rt, double *sums, int n);
/* has operator op a hierarchical slice? */
int osdp_runtime_op_is_hierarchical(const osdp_runtime *rt, int op);
/* are the gradients reduced node-first (the data group spans nodes; osdp/runtime.h)? */
static inline int osdp_runtime_node_first(const osdp_runtime *rt)
{
    return rt->cross_comm && rt->cross_comm->size > 1;
}

/* x (n fp32) to n bf16 in its own first 2 n bytes, and back, exactly for
 * bf16 values (runtime.c): no memory beyond the buffer */
void osdp_runtime_narrow_in_place(const osdp_compute_backend *be, float *x, size_t n);
void osdp_runtime_widen_in_place(const osdp_compute_backend *be, float *x, size_t n);
/* The pipeline's messages (stage_message.c): buf holds n fp32 elements, the
 * same on every rank of the tensor group; narrow 1: they cross in bf16 (a
 * forward message under a bf16 residual stream).  The send may be
 * non-blocking (req); its wait (osdp_stage_message_sent) restores buf. */
osdp_status osdp_stage_message_send(osdp_runtime *rt, osdp_comm *pp, float *buf, size_t n, int narrow, int peer,
                                    osdp_request *req);
osdp_status osdp_stage_message_sent(osdp_runtime *rt, osdp_comm *pp, float *buf, size_t n, int narrow,
                                    osdp_request *req);
osdp_status osdp_stage_message_receive(osdp_runtime *rt, osdp_comm *pp, float *buf, size_t n, int narrow, int peer);

#endif

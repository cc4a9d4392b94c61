/* The executor: carries out the events of the runtime's schedule
 * (osdp/schedule.h) on real memory, collectives and kernels. */
#include "runtime_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define TRY(expr) do { osdp_status s_ = (expr); if (s_ != OSDP_OK) return s_; } while (0)

static void **buffer_slot(osdp_runtime *rt, const osdp_event *ev)
{
    rt_op *o = &rt->in->ops[ev->op];
    switch (ev->buffer) {
    case OSDP_BUF_STATE: return (void **)&o->state;
    case OSDP_BUF_MASTER_COPY: return &o->master_copy;
    case OSDP_BUF_RESIDENT: return &o->resident;
    case OSDP_BUF_WORKSPACE: return (void **)&rt->in->workspace_base;
    case OSDP_BUF_GATHERED: return &o->slice[ev->slice].weights;
    case OSDP_BUF_KEPT: return &o->kept_out[ev->micro];
    case OSDP_BUF_KEPT_WIDE: return (void **)&o->kept_wide[ev->micro];
    case OSDP_BUF_ACTS: return (void **)&o->acts_base[ev->micro];
    case OSDP_BUF_FULL_GRAD: return (void **)&o->full_grad;
    case OSDP_BUF_GRAD_RECV: return (void **)&o->grad_recv;
    case OSDP_BUF_GRAD_ACCUM: return (void **)&o->grad_accum;
    case OSDP_BUF_TP_STAGING: return (void **)&rt->in->tp_staging;
    case OSDP_BUF_STAGE_INPUT: return (void **)&rt->in->stage_input[osdp_schedule_message_slot(&rt->in->sched, ev->op, ev->micro)];
    case OSDP_BUF_N_KINDS: break;
    }
    return NULL;
}

/* what the buffer is, for the out-of-memory message */
static void describe(const osdp_runtime *rt, const osdp_event *ev, char *what, size_t n)
{
    const char *op = rt->layout->op[ev->op].name;
    const int g = rt->in->sched.ops[ev->op].n_slices;
    switch (ev->buffer) {
    case OSDP_BUF_STATE: snprintf(what, n, "operator %s (sharded state)", op); break;
    case OSDP_BUF_MASTER_COPY:
        snprintf(what, n, "operator %s (%s copy of the master shard)", op, osdp_dtype_name(rt->weight_dtype));
        break;
    case OSDP_BUF_RESIDENT: snprintf(what, n, "operator %s (resident DP weights)", op); break;
    case OSDP_BUF_WORKSPACE: snprintf(what, n, "backward workspace"); break;
    case OSDP_BUF_GATHERED:
        if (g > 1) snprintf(what, n, "operator %s slice %d of %d (gathered ZDP weights)", op, ev->slice + 1, g);
        else snprintf(what, n, "operator %s (gathered ZDP weights)", op);
        break;
    case OSDP_BUF_KEPT: snprintf(what, n, "operator %s (output kept for recompute)", op); break;
    case OSDP_BUF_KEPT_WIDE: snprintf(what, n, "operator %s (kept bf16 output widened for the next operator)", op); break;
    case OSDP_BUF_ACTS: snprintf(what, n, "operator %s (activations)", op); break;
    case OSDP_BUF_FULL_GRAD: snprintf(what, n, "operator %s (full gradients)", op); break;
    case OSDP_BUF_GRAD_RECV: snprintf(what, n, "operator %s (reduce-scatter destination)", op); break;
    case OSDP_BUF_GRAD_ACCUM: snprintf(what, n, "operator %s (gradients accumulated over the step)", op); break;
    case OSDP_BUF_TP_STAGING: snprintf(what, n, "operator %s (tensor-parallel loss statistics)", op); break;
    case OSDP_BUF_STAGE_INPUT: snprintf(what, n, "operator %s (input from the previous stage)", op); break;
    case OSDP_BUF_N_KINDS: snprintf(what, n, "?"); break;
    }
}

/* what a fresh buffer needs before its first use */
static void after_alloc(osdp_runtime *rt, const osdp_event *ev)
{
    struct osdp_runtime_internal *in = rt->in;
    rt_op *o = &in->ops[ev->op];
    const osdp_sched_op *so = &in->sched.ops[ev->op];
    switch (ev->buffer) {
    case OSDP_BUF_STATE:
        o->master = o->state;
        o->grad = o->state + so->shard;
        o->m = o->state + 2 * so->shard;
        o->v = o->state + 3 * so->shard;
        break;
    case OSDP_BUF_RESIDENT: {
        size_t off = 0;
        for (int k = so->zdp_slices; k < so->n_slices; k++) {
            o->slice[k].weights = (char *)o->resident + off * in->weight_size;
            off += so->slice[k].padded;
        }
        break;
    }
    case OSDP_BUF_WORKSPACE: osdp_workspace_carve(rt->layout, rt->B, in->workspace_base, &in->ws); break;
    case OSDP_BUF_ACTS:
        osdp_op_acts_carve(rt->layout, ev->op, rt->B, o->acts_base[ev->micro], &o->acts[ev->micro]);
        /* recompute: the output is the kept one, unless narrow (its fp32 slot here, narrowed into KEPT) */
        if (so->recompute && !osdp_schedule_kept_narrow(&in->sched, ev->op)) o->acts[ev->micro].out = o->kept_out[ev->micro];
        break;
    case OSDP_BUF_KEPT_WIDE:   /* exact: the values are bf16 ones (osdp/schedule.h); the next operator reads it */
        rt->backend->residual_widen(o->kept_wide[ev->micro], o->kept_out[ev->micro], ev->bytes / sizeof(float));
        o->acts[ev->micro].out = o->kept_wide[ev->micro];
        break;
    case OSDP_BUF_FULL_GRAD: rt->backend->fill_zero(o->full_grad, ev->bytes); break;   /* backward accumulates */
    case OSDP_BUF_GRAD_ACCUM: rt->backend->fill_zero(o->grad_accum, ev->bytes); break;
    default: break;
    }
}

static osdp_status alloc_buffer(osdp_runtime *rt, const osdp_event *ev)
{
    char what[128];
    describe(rt, ev, what, sizeof what);
    TRY(osdp_memory_alloc(&rt->mem, osdp_buffer_category(ev->buffer), ev->bytes, what, buffer_slot(rt, ev)));
    after_alloc(rt, ev);
    return OSDP_OK;
}

static void free_buffer(osdp_runtime *rt, const osdp_event *ev)
{
    void **slot = buffer_slot(rt, ev);
    osdp_memory_free(&rt->mem, osdp_buffer_category(ev->buffer), *slot, ev->bytes);
    *slot = NULL;
}

static osdp_status gather(osdp_runtime *rt, const osdp_event *ev)
{
    struct osdp_runtime_internal *in = rt->in;
    rt_op *o = &in->ops[ev->op];
    const osdp_sched_slice *ss = &in->sched.ops[ev->op].slice[ev->slice];
    rt_slice *sl = &o->slice[ev->slice];
    /* fp32: the master shard itself; bf16: its rounded copy */
    const void *mine = rt->weight_dtype == OSDP_FLOAT32 ? (const void *)(o->master + ss->local)
                                                        : (const char *)o->master_copy + ss->local * in->weight_size;
    TRY(osdp_comm_all_gather(sl->comm, mine, sl->weights, osdp_sched_slice_shard_numel(ss), rt->weight_dtype,
                             ev->blocking ? NULL : &sl->gather));
    sl->pending = !ev->blocking;
    return OSDP_OK;
}

static osdp_status gather_wait(osdp_runtime *rt, rt_slice *sl)
{
    if (!sl->pending) return OSDP_OK;
    sl->pending = 0;
    (void)rt;
    return osdp_comm_wait(sl->comm, &sl->gather);
}

/* where an operator's gradients are reduce-scattered from and to: slice
 * ss's place in the full gradients and the receive buffer (the slices
 * reduced every micro-batch, the first g - J: their shards from 0), or for
 * a reduce-once slice (the last J, osdp/plan.h) in the accumulated
 * gradients of just those slices and, its one reduction per step, straight
 * in the gradient shard */
static float *scatter_source(rt_op *o, const osdp_sched_op *so, const osdp_sched_slice *ss, int once)
{
    return once ? o->grad_accum + (ss->base - so->slice[so->n_slices - so->once_slices].base) : o->full_grad + ss->base;
}

static float *scatter_destination(rt_op *o, const osdp_sched_slice *ss, int once)
{
    return (once ? o->grad : o->grad_recv) + ss->local;
}

/* the slices [*lo, *hi) an event's reduction covers (osdp_event.once) */
static void scatter_slices(const osdp_sched_op *so, int once, int *lo, int *hi)
{
    *lo = once ? so->n_slices - so->once_slices : 0;
    *hi = once ? so->n_slices : so->n_slices - so->once_slices;
}

/* The first stage of operator op's gradient reduction (its slices reduced
 * every micro-batch, or with `once` its reduce-once slices), non-blocking,
 * one fused launch for those slices on NCCL (osdp/comm.h): the flat
 * reduce-scatter into the receive buffer, or, reduced node-first
 * (osdp/runtime.h), the in-node reduce-scatter in place in the full
 * gradients (rank i of the node keeps node block i, padded / R).  The
 * operator's slices share the communicator (a hierarchical one is unsplit). */
static osdp_status scatter_start(osdp_runtime *rt, int op, int once)
{
    rt_op *o = &rt->in->ops[op];
    const osdp_sched_op *so = &rt->in->sched.ops[op];
    const int node_first = osdp_runtime_node_first(rt);
    osdp_comm *first = node_first ? rt->node_comm : o->slice[0].comm;
    int lo, hi;
    scatter_slices(so, once, &lo, &hi);
    TRY(osdp_comm_group_start(first));
    for (int k = lo; k < hi; k++) {
        const osdp_sched_slice *ss = &so->slice[k];
        if (node_first)
            TRY(osdp_comm_reduce_scatter_in_place(first, scatter_source(o, so, ss, once), ss->padded / (size_t)rt->node_ranks,
                                                  OSDP_FLOAT32, &o->slice[k].scatter));
        else
            TRY(osdp_comm_reduce_scatter(first, scatter_source(o, so, ss, once), scatter_destination(o, ss, once),
                                         osdp_sched_slice_shard_numel(ss), OSDP_FLOAT32, &o->slice[k].scatter));
    }
    return osdp_comm_group_end(first);
}

/* The second stage of a node-first reduction, blocking (it needs the
 * first's result): the node block reduce-scattered over the nodes, the
 * same call for every mode, into the rank's shard (a flat slice: block
 * i K + n), or into its place in the node block, which an all-gather over
 * the nodes then completes (a hierarchical slice: node block i on every
 * node). */
static osdp_status reduce_across_nodes(osdp_runtime *rt, rt_op *o, const osdp_sched_op *so, const osdp_sched_slice *ss,
                                       int once)
{
    const size_t node_block = ss->padded / (size_t)rt->node_ranks, part = node_block / (size_t)rt->cross_comm->size;
    const float *block = scatter_source(o, so, ss, once) + osdp_comm_in_place_offset(rt->node_comm, node_block);
    float *node_copy = scatter_destination(o, ss, once);
    if (!ss->hierarchical)
        return osdp_comm_reduce_scatter(rt->cross_comm, block, node_copy, part, OSDP_FLOAT32, NULL);
    float *mine = node_copy + (size_t)rt->cross_rank * part;
    TRY(osdp_comm_reduce_scatter(rt->cross_comm, block, mine, part, OSDP_FLOAT32, NULL));
    return osdp_comm_all_gather(rt->cross_comm, mine, node_copy, part, OSDP_FLOAT32, NULL);   /* in place */
}

/* the first micro-batch's gradients replace the shard's, the others add to
 * it, in micro-batch order (both pipeline schedules run backwards in it).
 * A reduce-once reduction (`once`), of the step's sum, went straight into
 * the shard; the accumulated gradients start the next step at zero. */
static osdp_status scatter_finish(osdp_runtime *rt, int op, int once, int micro)
{
    rt_op *o = &rt->in->ops[op];
    const osdp_sched_op *so = &rt->in->sched.ops[op];
    const int node_first = osdp_runtime_node_first(rt);
    int lo, hi;
    scatter_slices(so, once, &lo, &hi);
    for (int k = lo; k < hi; k++) {
        TRY(osdp_comm_wait(node_first ? rt->node_comm : o->slice[k].comm, &o->slice[k].scatter));
        if (node_first) TRY(reduce_across_nodes(rt, o, so, &so->slice[k], once));
    }
    const size_t every_shard = so->shard - so->once_shard;   /* the first slices' shards, from 0 */
    if (once) rt->backend->fill_zero(o->grad_accum, so->once_padded * sizeof(float));
    else if (rt->in->micro + micro == 0) rt->backend->copy(o->grad, o->grad_recv, every_shard * sizeof(float));
    else rt->backend->vector_accumulate(o->grad, o->grad_recv, every_shard);
    return OSDP_OK;
}

/* ---- the optimizer ------------------------------------------------------------ */

osdp_status osdp_runtime_reduce_over_mesh(osdp_runtime *rt, double *sums, int n)
{
    TRY(osdp_comm_all_reduce(rt->comm, sums, (size_t)n, OSDP_FLOAT64, NULL));
    if (rt->tp_comm) TRY(osdp_comm_all_reduce(rt->tp_comm, sums, (size_t)n, OSDP_FLOAT64, NULL));
    if (rt->opt.geo.pp_size > 1) TRY(osdp_comm_all_reduce(rt->opt.pp_fwd_comm, sums, (size_t)n, OSDP_FLOAT64, NULL));
    return OSDP_OK;
}

/* loss and gradient norm: summed where the compute runs, read back once
 * (the step's only wait for the compute before the optimizer), then one
 * all-reduce of two doubles per mesh axis */
static osdp_status reduce_sums(osdp_runtime *rt)
{
    struct osdp_runtime_internal *in = rt->in;
    double sums[2];
    rt->backend->to_host(sums, in->sums, sizeof sums);
    TRY(osdp_runtime_reduce_over_mesh(rt, sums, 2));
    in->loss = sums[0] / in->global_tokens;
    in->grad_norm = sqrt(sums[1]);
    if (!isfinite(in->loss) || !isfinite(in->grad_norm))
        return osdp_error_set(OSDP_ERR_NUMERIC, "step %ld: loss is %g and gradient norm %g: training diverged (lower --lr?)",
                              rt->step + 1, in->loss, in->grad_norm);
    in->lr = osdp_lr_at(&rt->opt.optim, rt->step);
    in->clip_scale = osdp_clip_scale(&rt->opt.optim, in->grad_norm);
    return OSDP_OK;
}

/* AdamW on every segment of operator op, clipped by the global norm */
static void adamw_op(osdp_runtime *rt, int op)
{
    struct osdp_runtime_internal *in = rt->in;
    osdp_shard_iter it = osdp_runtime_shards(rt, op);
    osdp_shard_segment seg;
    while (osdp_shard_next(&it, &seg)) {
        size_t valid = seg.flat_lo >= seg.flat_hi ? 0 : seg.flat_hi - seg.flat_lo < seg.numel ? seg.flat_hi - seg.flat_lo
                                                                                              : seg.numel;
        osdp_adamw_shard(rt->backend, &rt->layout->op[op], seg.flat_lo, valid, seg.state[OSDP_STATE_MASTER],
                         seg.state[OSDP_STATE_GRAD], seg.state[OSDP_STATE_M], seg.state[OSDP_STATE_V],
                         &rt->opt.optim, in->lr, in->clip_scale, rt->step + 1);
    }
}

/* The squared gradient norm of operator op's shard.  Tensor rank 0 (and a
 * rank without a tensor group) adds the whole shard; the other ranks of a
 * group only the elements of split tensors, since the replicated ones are
 * the same on every rank of the group (osdp/runtime.h).  A hierarchical
 * slice is on every node: each node's rank adds the sub-block it would own
 * flat (sub-block cross_rank of its node block), so that the sum is made
 * of the same pieces in the same order as under a flat plan. */
static void norm_sum(osdp_runtime *rt, int op)
{
    struct osdp_runtime_internal *in = rt->in;
    const int hierarchical = rt->node_comm && osdp_runtime_op_is_hierarchical(rt, op);
    if (rt->tp_rank == 0 && !hierarchical) {
        rt->backend->accumulate_sum(&in->sums[1], in->ops[op].grad, in->sched.ops[op].shard, 1);
        return;
    }
    const osdp_op_layout *ol = &rt->layout->op[op];
    const size_t nodes = rt->cross_comm ? (size_t)rt->cross_comm->size : 1;
    osdp_shard_iter it = osdp_runtime_shards(rt, op);
    osdp_shard_segment seg;
    while (osdp_shard_next(&it, &seg)) {
        size_t from = 0, numel = seg.numel;   /* the elements of the segment this rank adds */
        if (hierarchical) {
            numel = seg.numel / nodes;
            from = (size_t)rt->cross_rank * numel;
        }
        const float *grad = seg.state[OSDP_STATE_GRAD] + from;
        if (rt->tp_rank == 0) {
            rt->backend->accumulate_sum(&in->sums[1], grad, numel, 1);
            continue;
        }
        const size_t first = seg.flat_lo + from, end = first + numel < seg.flat_hi ? first + numel : seg.flat_hi;
        for (int t = 0; t < ol->n_tensors; t++) {
            const osdp_tensor_desc *td = &ol->tensor[t];
            if (td->tp_split == OSDP_TP_REPLICATED) continue;
            const size_t lo = td->offset > first ? td->offset : first;
            const size_t hi = td->offset + td->numel < end ? td->offset + td->numel : end;
            if (lo < hi) rt->backend->accumulate_sum(&in->sums[1], grad + (lo - first), hi - lo, 1);
        }
    }
}

/* ---- operator passes ------------------------------------------------------- */

/* A pass being computed: the events between its COMPUTE and COMPUTE_END,
 * run as the operator asks for its slices. */
typedef struct pass_run {
    osdp_runtime *rt;
    const osdp_event *ev;
    int end;                        /* index of the COMPUTE_END */
    int op;
    osdp_pass pass;
    const void *weights[OSDP_MAX_SLICES];   /* the operator's view, refreshed on acquire */
} pass_run;

/* osdp_op_slices.acquire: the operator is about to touch slice s; run the
 * events up to its USE marker */
static osdp_status acquire_slice(void *arg, int s)
{
    pass_run *r = arg;
    struct osdp_runtime_internal *in = r->rt->in;
    const osdp_event *last = &r->ev[in->cursor - 1];
    if (!(last->kind == OSDP_EV_USE && last->op == r->op && last->slice == s && last->pass == r->pass)) {
        int u = in->cursor;
        while (u < r->end && !(r->ev[u].kind == OSDP_EV_USE && r->ev[u].slice == s)) u++;
        if (u == r->end)
            return osdp_error_set(OSDP_ERR_INTERNAL, "operator %s touched slice %d out of order",
                                  r->rt->layout->op[r->op].name, s);
        TRY(osdp_runtime_execute(r->rt, r->ev, u + 1));
    }
    r->weights[s] = in->ops[r->op].slice[s].weights;
    return OSDP_OK;
}

/* the length of the list `ev` is (the schedule's lists), 0 if none */
static int list_length(const osdp_schedule *sc, const osdp_event *ev)
{
    return ev == sc->micro ? sc->n_micro : ev == sc->eval ? sc->n_eval : ev == sc->setup ? sc->n_setup
         : ev == sc->optim ? sc->n_optim : 0;
}

/* Whether the forward of op, whose pass is the COMPUTE at `at`, may leave
 * its residual to the next operator's LayerNorm (osdp_op_context's
 * defer_residual): the next pass computed is that operator's forward on the
 * same micro-batch, in the same chunk (its input is this `out`, no message
 * between), starting with the LayerNorm of its input; and no activation
 * buffer is freed from this pass's start until that pass has ended (the
 * residual it adds, this operator's input or projected input, is still
 * there). */
static int residual_fuses_forward(osdp_runtime *rt, const osdp_event *ev, int at, int op, int micro)
{
    struct osdp_runtime_internal *in = rt->in;
    const osdp_layout *L = rt->layout;
    /* a bf16 stream rounds each output whole at the end of its own forward (osdp/gpt.h) */
    if (in->ctx.round_residual || op + 1 >= L->n_ops || (L->op[op].type != OSDP_OP_ATTN && L->op[op].type != OSDP_OP_MLP) ||
        !osdp_op_starts_with_layernorm(L, op + 1) || osdp_schedule_chunk_first(&in->sched, op + 1))
        return 0;
    const int n = list_length(&in->sched, ev);
    int next = -1;
    for (int u = at + 1; u < n; u++) {
        const osdp_event *e = &ev[u];
        if (e->kind == OSDP_EV_FREE &&
            (e->buffer == OSDP_BUF_ACTS || e->buffer == OSDP_BUF_KEPT || e->buffer == OSDP_BUF_STAGE_INPUT))
            return 0;
        if (e->kind == OSDP_EV_COMPUTE) {
            if (next >= 0) return 0;   /* a pass inside a pass: not a list the runtime makes */
            if (e->op != op + 1 || e->pass != OSDP_PASS_FORWARD || e->micro != micro || e->first_micro_only ||
                e->last_micro_only)
                return 0;
            next = u;
        }
        if (e->kind == OSDP_EV_COMPUTE_END && next >= 0) return 1;
    }
    return 0;
}

static osdp_status compute(osdp_runtime *rt, const osdp_event *ev, int at)
{
    struct osdp_runtime_internal *in = rt->in;
    const osdp_sched_op *so = &in->sched.ops[ev[at].op];
    rt_op *o = &in->ops[ev[at].op];
    pass_run r = {.rt = rt, .ev = ev, .end = at + 1, .op = ev[at].op, .pass = ev[at].pass};
    while (ev[r.end].kind != OSDP_EV_COMPUTE_END) r.end++;
    const int g = so->n_slices, fwd = r.pass != OSDP_PASS_BACKWARD, m = ev[at].micro;
    /* the previous operator's output, or at a stage's start what the previous stage sent */
    const float *input = osdp_schedule_chunk_first(&in->sched, r.op)
                       ? in->stage_input[osdp_schedule_message_slot(&in->sched, r.op, m)]
                       : r.op ? in->ops[r.op - 1].acts[m].out : NULL;
    float *grad_slices[OSDP_MAX_SLICES] = {0};
    for (int k = 0; k < g && !fwd; k++) grad_slices[k] = o->full_grad + so->slice[k].base;
    if (rt->layout->cfg.tied_head && r.op == rt->layout->n_ops - 1) {
        /* the tied head's product: the embedding's resident weights (it is DP) and full gradients */
        in->ctx.embed_weights = in->ops[0].slice[0].weights;
        in->ctx.embed_grads = fwd ? NULL : in->ops[0].full_grad;
    }
    /* the first slice before the call: an unsplit operator needs no callback */
    TRY(acquire_slice(&r, fwd ? 0 : g - 1));
    osdp_op_slices view = {.n = g, .bounds = so->bounds, .weights = r.weights, .grads = grad_slices,
                           .acquire = acquire_slice, .arg = &r};
    if (fwd) {
        /* the residual the previous forward left to this one, and whether this one leaves its own */
        in->ctx.input_residual = in->residual_left_op == r.op - 1 && in->residual_left_micro == m && r.op > 0
                               ? in->residual_left : NULL;
        in->ctx.defer_residual = r.pass == OSDP_PASS_FORWARD && residual_fuses_forward(rt, ev, at, r.op, m);
        in->residual_left_op = -1;
        /* bf16 activations: the forward stages them in the workspace's scratch (osdp/layout.h) */
        in->ctx.act_scratch = rt->layout->cfg.act_bf16 ? in->ws.scratch : NULL;
        const osdp_status st = osdp_op_forward_sliced(&in->ctx, r.op, &view, input, &o->acts[m]);
        if (st == OSDP_OK && in->ctx.defer_residual) {
            in->residual_left = osdp_op_residual(rt->layout, r.op, input, &o->acts[m]);
            in->residual_left_op = r.op;
            in->residual_left_micro = m;
        }
        in->ctx.input_residual = NULL;
        in->ctx.defer_residual = 0;
        TRY(st);
        /* narrow: the output, bf16 values already, into its bf16 KEPT (the recomputed forward's are the same) */
        if (r.pass == OSDP_PASS_FORWARD && osdp_schedule_kept_narrow(&in->sched, r.op)) {
            const size_t n = (size_t)rt->B * rt->layout->op[r.op].kept_floats_per_seq;
            rt->backend->convert_weights(o->kept_out[m], o->acts[m].out, n);
        }
    } else {
        TRY(osdp_op_backward_sliced(&in->ctx, r.op, &view, input, &o->acts[m], &in->ws, in->loss_scale));
    }
    /* the slices the operator did not touch, and the release of the last */
    return osdp_runtime_execute(rt, ev, r.end + 1);
}

/* ---- the pipeline's messages (osdp/schedule.h: why they cannot deadlock) ---- */

static size_t message_floats(const osdp_event *ev) { return ev->bytes / sizeof(float); }

/* the output of the stage's last operator op: (B, T, d) fp32, what SEND_ACTS sends */
static size_t output_floats(const osdp_runtime *rt, int op)
{
    return (size_t)rt->B * (size_t)rt->T * (size_t)rt->layout->op[op].width;
}

/* stage_message.c: pieces over the tensor group; a forward message under a bf16 stream crosses in bf16 */
static osdp_status pipeline_message(osdp_runtime *rt, const osdp_event *ev)
{
    struct osdp_runtime_internal *in = rt->in;
    const int m = ev->micro, slot = osdp_schedule_message_slot(&in->sched, ev->op, m);
    const int bf16 = in->ctx.round_residual;
    switch (ev->kind) {
    case OSDP_EV_RECV_ACTS:
        return osdp_stage_message_receive(rt, rt->opt.pp_fwd_comm, in->stage_input[slot], message_floats(ev), bf16,
                                          in->pp_prev);
    case OSDP_EV_SEND_ACTS:
        return osdp_stage_message_send(rt, rt->opt.pp_fwd_comm, in->ops[ev->op].acts[m].out, message_floats(ev), bf16,
                                       in->pp_next, &in->act_send[slot]);
    case OSDP_EV_SEND_ACTS_WAIT:
        return osdp_stage_message_sent(rt, rt->opt.pp_fwd_comm, in->ops[ev->op].acts[m].out, output_floats(rt, ev->op),
                                       bf16, &in->act_send[slot]);
    case OSDP_EV_RECV_GRAD:   /* d(output) where the operator's backward reads it */
        /* under interleaving the previous gradient send may still read the
         * current buffer: receive into the other one, which becomes current */
        if (osdp_schedule_defers_grad_send(&in->sched)) in->ws.cur = 1 - in->ws.cur;
        return osdp_stage_message_receive(rt, rt->opt.pp_bwd_comm, in->ws.dres[in->ws.cur], message_floats(ev), 0,
                                          in->pp_next);
    case OSDP_EV_SEND_GRAD:   /* d(input), where the first operator's backward left it */
        return osdp_stage_message_send(rt, rt->opt.pp_bwd_comm, in->ws.dres[in->ws.cur], message_floats(ev), 0,
                                       in->pp_prev, ev->blocking ? NULL : &in->grad_send);
    case OSDP_EV_SEND_GRAD_WAIT: return osdp_comm_wait(rt->opt.pp_bwd_comm, &in->grad_send);
    default: return osdp_error_set(OSDP_ERR_INTERNAL, "event %d is no pipeline message", (int)ev->kind);
    }
}

/* ---- the loop ------------------------------------------------------------------ */

/* Every communicator of the runtime on which it starts a call it waits
 * later (osdp/comm.h's progress: MPI moves such a call's data only inside
 * the rank's MPI calls): the data group's (prefetched all-gathers, the
 * reduce-scatters that overlap the next operator's backward, a stage's
 * gathers at its step's start and its reduce-once reductions), the node's
 * (a node-first reduction's first stage) and the pipeline's (activation
 * sends waited at the backward).  Called between the operators' kernels
 * (osdp_op_context.progress) and by the loop below at every slice use and
 * pass end, whatever the plan: it moves data earlier, never other data, so
 * no number and no event changes. */
void osdp_runtime_progress(osdp_runtime *rt)
{
    osdp_comm *comms[] = {rt->comm, rt->node_comm, rt->opt.pp_fwd_comm, rt->opt.pp_bwd_comm};
    for (size_t i = 0; i < sizeof comms / sizeof comms[0]; i++)
        if (comms[i]) (void)osdp_comm_progress(comms[i]);
}

osdp_status osdp_runtime_execute(osdp_runtime *rt, const osdp_event *ev, int end)
{
    struct osdp_runtime_internal *in = rt->in;
    const size_t bt = (size_t)rt->B * (size_t)rt->T;
    while (in->cursor < end) {
        const int at = in->cursor++;
        const osdp_event *e = &ev[at];
        if (e->first_micro_only && in->micro > 0) continue;
        if (e->last_micro_only && in->micro < in->last_micro) continue;
        rt_op *o = &in->ops[e->op];
        switch (e->kind) {
        case OSDP_EV_ALLOC: TRY(alloc_buffer(rt, e)); break;
        case OSDP_EV_FREE: free_buffer(rt, e); break;
        case OSDP_EV_GATHER: TRY(gather(rt, e)); break;
        case OSDP_EV_GATHER_WAIT: TRY(gather_wait(rt, &o->slice[e->slice])); break;
        case OSDP_EV_COMPUTE: TRY(compute(rt, ev, at)); break;
        /* a slice about to be used, a pass ended: the collectives in flight move their data here too, not
         * only in their waits (osdp_runtime_progress; between the kernels the operator pokes them) */
        case OSDP_EV_USE: case OSDP_EV_COMPUTE_END: osdp_runtime_progress(rt); break;
        case OSDP_EV_LOAD_TOKENS:
            rt->backend->to_device(o->acts[e->micro].tokens, in->tokens + 2 * bt * (size_t)e->micro + (e->op == 0 ? 0 : bt),
                                   bt * sizeof(int));
            break;
        case OSDP_EV_LOSS_SUM:   /* no wait; once per tensor group: its ranks' losses are the same */
            if (rt->tp_rank == 0) rt->backend->accumulate_sum(&in->sums[0], o->acts[e->micro].losses, bt, 0);
            break;
        case OSDP_EV_REDUCE_SCATTER: TRY(scatter_start(rt, e->op, e->once)); break;
        case OSDP_EV_REDUCE_SCATTER_WAIT: TRY(scatter_finish(rt, e->op, e->once, e->micro)); break;
        case OSDP_EV_GRAD_ACCUMULATE: {   /* the reduce-once slices, the last J (osdp/plan.h) */
            const osdp_sched_op *so = &in->sched.ops[e->op];
            rt->backend->vector_accumulate(o->grad_accum, o->full_grad + so->slice[so->n_slices - so->once_slices].base,
                                           so->once_padded);
            break;
        }
        case OSDP_EV_RECV_ACTS: case OSDP_EV_SEND_ACTS: case OSDP_EV_SEND_ACTS_WAIT:
        case OSDP_EV_RECV_GRAD: case OSDP_EV_SEND_GRAD: case OSDP_EV_SEND_GRAD_WAIT: TRY(pipeline_message(rt, e)); break;
        case OSDP_EV_NORM_SUM: norm_sum(rt, e->op); break;
        case OSDP_EV_SUMS_ALL_REDUCE: TRY(reduce_sums(rt)); break;
        case OSDP_EV_ADAMW: adamw_op(rt, e->op); break;
        case OSDP_EV_N_KINDS: break;
        }
    }
    return OSDP_OK;
}

static void release_list(osdp_runtime *rt, const osdp_event *ev, int n)
{
    for (int e = 0; e < n; e++) {
        if (ev[e].kind != OSDP_EV_ALLOC) continue;
        void **slot = buffer_slot(rt, &ev[e]);
        if (*slot) free_buffer(rt, &ev[e]);
    }
}

void osdp_runtime_release_all(osdp_runtime *rt)
{
    struct osdp_runtime_internal *in = rt->in;
    for (int i = in->sched.op_lo; i < in->sched.op_hi; i++)
        for (int k = 0; k < in->sched.ops[i].n_slices && osdp_schedule_has_op(&in->sched, i); k++)
            (void)gather_wait(rt, &in->ops[i].slice[k]);
    release_list(rt, in->sched.micro, in->sched.n_micro);
    release_list(rt, in->sched.eval, in->sched.n_eval);
    release_list(rt, in->sched.setup, in->sched.n_setup);
}

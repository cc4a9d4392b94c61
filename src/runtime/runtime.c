/* The sharded runtime: one optimizer step over a plan (see osdp/runtime.h).
 * The step's memory and collectives are the schedule's events
 * (osdp/schedule.h), carried out by executor.c. */
#include "runtime_internal.h"
#include "util/clock.h"
#include "osdp/init.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(expr) do { osdp_status s_ = (expr); if (s_ != OSDP_OK) return s_; } while (0)

/* osdp_op_context.progress, between the operators' kernels (executor.c: osdp_runtime_progress) */
static void progress_hook(void *arg) { osdp_runtime_progress(arg); }

/* A bf16 residual stream (osdp/schedule.h) moves the stream's all-reduces in
 * bf16, as Megatron-LM does (its activations are bf16): each rank's partial
 * rounded to bf16, the group's sum in fp32 rounded to bf16 (comm's bf16
 * sum), widened back in place, so the bytes on the wire are half.
 * osdp_tp_group's collectives over the tensor-parallel communicator are
 * blocking, so they wait within the communication timeout as every
 * blocking collective does (src/comm). */
static osdp_status tp_all_reduce(void *arg, float *buf, size_t n)
{
    osdp_runtime *rt = arg;
    if (!rt->in->ctx.round_residual) return osdp_comm_all_reduce(rt->tp_comm, buf, n, OSDP_FLOAT32, NULL);
    osdp_runtime_narrow_in_place(rt->backend, buf, n);
    osdp_status s = osdp_comm_all_reduce(rt->tp_comm, buf, n, OSDP_BFLOAT16, NULL);
    if (s == OSDP_OK) osdp_runtime_widen_in_place(rt->backend, buf, n);
    return s;
}

static osdp_status tp_all_gather(void *arg, const float *part, float *all, size_t n)
{
    osdp_runtime *rt = arg;
    return osdp_comm_all_gather(rt->tp_comm, part, all, n, OSDP_FLOAT32, NULL);
}

/* the tensor-parallel group the options give, checked against the layout */
static osdp_status attach_tp_group(osdp_runtime *rt, const osdp_runtime_options *opt)
{
    const int parts = rt->layout->tp_size;
    rt->tp_size = 1;
    rt->tp_rank = 0;
    if (!opt->tp_comm) {
        if (parts > 1)
            return osdp_error_set(OSDP_ERR_INPUT, "runtime: a layout of tensor-parallel parts for %d ranks needs "
                                  "their tensor-parallel communicator", parts);
        return OSDP_OK;
    }
    if (opt->tp_comm->size != parts)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: the layout's parts are for %d tensor-parallel ranks, the "
                              "tensor-parallel communicator has %d", parts, opt->tp_comm->size);
    rt->tp_comm = opt->tp_comm;
    rt->tp_size = rt->tp_comm->size;
    rt->tp_rank = rt->tp_comm->rank;
    rt->in->tp = (osdp_tp_group){.size = rt->tp_size, .rank = rt->tp_rank, .all_reduce = tp_all_reduce,
                                 .all_gather = tp_all_gather, .arg = rt};
    return OSDP_OK;
}

/* The data group's node groups (osdp/runtime.h), checked against the data
 * group: node_ranks x nodes = N.  Without them the data group is one node. */
static osdp_status attach_node_groups(osdp_runtime *rt, const osdp_plan *plan, const osdp_runtime_options *opt)
{
    rt->node_rank = rt->rank;
    rt->node_ranks = rt->N;
    rt->cross_rank = 0;
    if (!opt->node_comm != !opt->cross_comm)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: the node groups come in pairs (node_comm and cross_comm)");
    if (!opt->node_comm) {
        if (osdp_plan_has_hierarchical(plan) && rt->N > 1)
            return osdp_error_set(OSDP_ERR_INPUT, "runtime: the plan shards an operator hierarchically (h), which needs "
                                  "the node groups of the data group");
        return OSDP_OK;
    }
    if (opt->node_comm->size * opt->cross_comm->size != rt->N)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: node groups of %d ranks on %d nodes do not make the data "
                              "group's %d ranks", opt->node_comm->size, opt->cross_comm->size, rt->N);
    rt->node_comm = opt->node_comm;
    rt->cross_comm = opt->cross_comm;
    rt->node_rank = rt->node_comm->rank;
    rt->node_ranks = rt->node_comm->size;
    rt->cross_rank = rt->cross_comm->rank;
    return OSDP_OK;
}

/* Node-first reduction (osdp/runtime.h): the rank (node n, index i) owns
 * block i K + n of every flat slice, and the data group's all-gathers put
 * each rank's part there.  Every rank's block, gathered once. */
static osdp_status order_flat_blocks(osdp_runtime *rt)
{
    const int K = rt->cross_comm->size;
    uint64_t mine = (uint64_t)rt->node_rank * (uint64_t)K + (uint64_t)rt->cross_rank;
    uint64_t *all = malloc(sizeof *all * (size_t)rt->N);
    int *block_of = malloc(sizeof *block_of * (size_t)rt->N);
    osdp_status s = all && block_of ? OSDP_OK : osdp_error_set(OSDP_ERR_OOM, "runtime: out of host memory");
    if (s == OSDP_OK) s = osdp_comm_all_gather(rt->comm, &mine, all, 1, OSDP_UINT64, NULL);
    for (int r = 0; r < rt->N && s == OSDP_OK; r++) block_of[r] = (int)all[r];
    if (s == OSDP_OK) s = osdp_comm_set_block_order(rt->comm, block_of);
    rt->flat_block = (int)mine;
    free(all);
    free(block_of);
    return s;
}

/* every segment's initial weights from the counter-based RNG (osdp/init.h),
 * by logical element: the same model on every mesh; gradients and moments
 * zero */
static osdp_status init_shards(osdp_runtime *rt)
{
    size_t cap = 0;
    for (int i = 0; i < rt->layout->n_ops; i++)
        if (rt->in->sched.ops[i].shard > cap) cap = rt->in->sched.ops[i].shard;
    float *host = malloc((cap ? cap : 1) * sizeof(float));
    if (!host) return osdp_error_set(OSDP_ERR_OOM, "runtime: out of host memory");
    for (int i = rt->in->sched.op_lo; i < rt->in->sched.op_hi; i++) {
        if (!osdp_schedule_has_op(&rt->in->sched, i)) continue;
        float *state[OSDP_STATE_N_KINDS];
        size_t shard = osdp_runtime_op_shard(rt, i, state);
        osdp_shard_iter it = osdp_runtime_shards(rt, i);
        osdp_shard_segment seg;
        while (osdp_shard_next(&it, &seg)) {
            size_t hi = seg.flat_lo + seg.numel < seg.flat_hi ? seg.flat_lo + seg.numel : seg.flat_hi;
            memset(host + seg.local, 0, seg.numel * sizeof(float));   /* padding */
            if (hi > seg.flat_lo)
                osdp_init_op_range_tp(&rt->layout->op[i], i, rt->opt.seed, rt->tp_rank, seg.flat_lo, hi, host + seg.local);
        }
        rt->backend->to_device(state[OSDP_STATE_MASTER], host, shard * sizeof(float));
        rt->backend->fill_zero(state[OSDP_STATE_GRAD], 3 * shard * sizeof(float));   /* grad, m, v */
    }
    free(host);
    return OSDP_OK;
}

/* The pipeline the options give (osdp/runtime.h): its two communicators,
 * over the same ranks, and the adjacent stages' ranks in them. */
static osdp_status attach_pipeline(osdp_runtime *rt, const osdp_runtime_options *opt)
{
    struct osdp_runtime_internal *in = rt->in;
    in->pp_prev = in->pp_next = -1;
    if (opt->geo.pp_size <= 1) return OSDP_OK;
    const osdp_comm *fwd = opt->pp_fwd_comm, *bwd = opt->pp_bwd_comm;
    if (!fwd || !bwd || fwd->size != opt->geo.pp_size || bwd->size != opt->geo.pp_size || fwd->rank != opt->pp_stage
        || bwd->rank != opt->pp_stage)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: a pipeline of %d stages needs its two communicators over "
                              "the %d stages, ranked by stage", opt->geo.pp_size, opt->geo.pp_size);
    const int ring = opt->geo.virtual_stages > 1;   /* chunk c P + P-1 sends on to chunk (c+1) P */
    if (opt->pp_stage > 0 || ring) in->pp_prev = (opt->pp_stage + opt->geo.pp_size - 1) % opt->geo.pp_size;
    if (opt->pp_stage < opt->geo.pp_size - 1 || ring) in->pp_next = (opt->pp_stage + 1) % opt->geo.pp_size;
    return OSDP_OK;
}

/* the per micro-batch slots of the activations and the pipeline's messages */
static osdp_status alloc_micro_slots(osdp_runtime *rt)
{
    struct osdp_runtime_internal *in = rt->in;
    const size_t slots = (size_t)osdp_schedule_micro_slots(&in->sched);
    const size_t messages = (size_t)osdp_schedule_message_slots(&in->sched);
    int ok = (in->stage_input = calloc(messages, sizeof *in->stage_input)) != NULL
          && (in->act_send = calloc(messages, sizeof *in->act_send)) != NULL;
    for (int i = 0; i < rt->layout->n_ops && ok; i++) {
        rt_op *o = &in->ops[i];
        ok = (o->acts_base = calloc(slots, sizeof *o->acts_base)) != NULL
          && (o->kept_out = calloc(slots, sizeof *o->kept_out)) != NULL
          && (o->kept_wide = calloc(slots, sizeof *o->kept_wide)) != NULL
          && (o->acts = calloc(slots, sizeof *o->acts)) != NULL;
    }
    return ok ? OSDP_OK : osdp_error_set(OSDP_ERR_OOM, "runtime: out of host memory");
}

static void free_micro_slots(struct osdp_runtime_internal *in, int n_ops)
{
    for (int i = 0; i < n_ops; i++) {
        free(in->ops[i].acts_base);
        free(in->ops[i].kept_out);
        free(in->ops[i].kept_wide);
        free(in->ops[i].acts);
    }
    free(in->stage_input);
    free(in->act_send);
}

osdp_status osdp_runtime_create(osdp_runtime *rt, const osdp_layout *layout, const osdp_plan *plan,
                                osdp_comm *comm, const osdp_compute_backend *backend,
                                const osdp_runtime_options *opt)
{
    memset(rt, 0, sizeof *rt);
    rt->layout = layout;
    rt->comm = comm;
    rt->backend = backend;
    rt->opt = *opt;
    rt->N = comm->size;
    rt->rank = comm->rank;
    rt->B = opt->geo.micro_batch;
    rt->T = layout->T;
    rt->weight_dtype = opt->geo.weight_dtype;
    if (opt->geo.weight_dtype != backend->weight_dtype)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: %s weights asked for, but the %s backend's are %s",
                              osdp_dtype_name(opt->geo.weight_dtype), backend->name, osdp_dtype_name(backend->weight_dtype));
    const int bf16_stream = opt->geo.residual_dtype == OSDP_BFLOAT16;
    if (opt->geo.residual_dtype != OSDP_FLOAT32 && !bf16_stream)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: a %s residual stream is not one (fp32 or bf16)",
                              osdp_dtype_name(opt->geo.residual_dtype));
    if (bf16_stream && (!backend->residual_round || !backend->residual_widen || !backend->convert_weights))
        return osdp_error_set(OSDP_ERR_INPUT, "--residual-dtype bf16 needs bf16 weights (--precision bf16): the %s "
                              "backend's %s table has no bf16 rounding", backend->name,
                              osdp_dtype_name(backend->weight_dtype));
    if (layout->cfg.act_bf16 && (!backend->residual_round || !backend->residual_widen || !backend->convert_weights))
        return osdp_error_set(OSDP_ERR_INPUT, "--activation-dtype bf16 needs bf16 weights (--precision bf16): the %s "
                              "backend's %s table has no bf16 rounding", backend->name,
                              osdp_dtype_name(backend->weight_dtype));
    struct osdp_runtime_internal *in = rt->in = calloc(1, sizeof *in);
    if (!in) return osdp_error_set(OSDP_ERR_OOM, "runtime: out of host memory");
    TRY(attach_tp_group(rt, opt));
    TRY(attach_pipeline(rt, opt));
    TRY(attach_node_groups(rt, plan, opt));
    osdp_schedule_options so = {.geo = opt->geo, .pp_stage = opt->pp_stage};
    so.geo.n_ranks = rt->N;   /* the communicators' and the layout's (osdp_runtime_options) */
    so.geo.node_ranks = rt->node_ranks;
    so.geo.tp_size = rt->tp_size;
    TRY(osdp_schedule_build(&in->sched, layout, plan, &so));
    TRY(osdp_plan_copy(&rt->plan, plan));
    in->weight_size = in->sched.weight_size;
    osdp_memory_init(&rt->mem, backend, opt->mem_limit);
    in->ops = calloc((size_t)layout->n_ops, sizeof *in->ops);
    if (!in->ops) return osdp_error_set(OSDP_ERR_OOM, "runtime: out of host memory");
    TRY(alloc_micro_slots(rt));
    rt->flat_block = rt->rank;
    if (osdp_runtime_node_first(rt)) TRY(order_flat_blocks(rt));
    for (int i = 0; i < layout->n_ops; i++)
        for (int k = 0; k < in->sched.ops[i].n_slices; k++) {
            const osdp_sched_slice *ss = &in->sched.ops[i].slice[k];
            rt_slice *sl = &in->ops[i].slice[k];
            const int hierarchical = ss->hierarchical && rt->node_comm;
            sl->comm = hierarchical ? rt->node_comm : rt->comm;
            const int block = hierarchical ? rt->node_rank : rt->flat_block;
            sl->flat_lo = ss->lo + (size_t)block * osdp_sched_slice_shard_numel(ss);
        }
    in->cursor = 0;
    TRY(osdp_runtime_execute(rt, in->sched.setup, in->sched.n_setup));
    TRY(init_shards(rt));
    /* 16 bytes outside the accounting, like the backends' own small scratch */
    in->sums = backend->alloc(2 * sizeof(double));
    if (!in->sums) return osdp_error_set(OSDP_ERR_OOM, "runtime: out of device memory for 16 bytes");
    in->ctx = (osdp_op_context){.backend = backend, .layout = layout, .B = rt->B, .T = rt->T,
                                .tp = layout->tp_size > 1 ? &in->tp : NULL, .tp_staging = in->tp_staging,
                                .progress = progress_hook, .progress_arg = rt,
                                .round_residual = bf16_stream};
    in->residual_left_op = -1;
    return OSDP_OK;
}

void osdp_runtime_destroy(osdp_runtime *rt)
{
    struct osdp_runtime_internal *in = rt->in;
    if (!in) return;
    if (in->ops && in->ops[rt->layout->n_ops - 1].acts) osdp_runtime_release_all(rt);   /* the slots were made */
    if (in->sums) rt->backend->free(in->sums);
    if (osdp_runtime_node_first(rt)) (void)osdp_comm_set_block_order(rt->comm, NULL);   /* the caller's comm as it was */
    if (in->ops) free_micro_slots(in, rt->layout->n_ops);
    free(in->ops);
    osdp_schedule_free(&in->sched);
    osdp_plan_free(&rt->plan);
    free(in);
    rt->in = NULL;
}

void osdp_runtime_invalidate_weights(osdp_runtime *rt)
{
    /* DP slices are gathered again by the next step's first micro-step; what
     * the gathers send is the master shard as it is now */
    if (rt->weight_dtype == OSDP_FLOAT32) return;
    for (int i = rt->in->sched.op_lo; i < rt->in->sched.op_hi; i++)
        if (osdp_schedule_has_op(&rt->in->sched, i))
            rt->backend->convert_weights(rt->in->ops[i].master_copy, rt->in->ops[i].master, rt->in->sched.ops[i].shard);
}

/* the communicators a step's traffic is counted on: the data group, and
 * those of the tensor group, the pipeline and the node groups it has */
static int step_groups(const osdp_runtime *rt, osdp_comm *groups[6])
{
    int n = 0;
    groups[n++] = rt->comm;
    if (rt->tp_comm) groups[n++] = rt->tp_comm;
    if (rt->in->sched.pipelined) {
        groups[n++] = rt->opt.pp_fwd_comm;
        groups[n++] = rt->opt.pp_bwd_comm;
    }
    if (rt->node_comm) {
        groups[n++] = rt->node_comm;
        groups[n++] = rt->cross_comm;
    }
    return n;
}

osdp_status osdp_runtime_step(osdp_runtime *rt, const int *tokens, osdp_step_stats *stats)
{
    struct osdp_runtime_internal *in = rt->in;
    double t0 = osdp_now_seconds();
    osdp_comm *groups[6];
    const int n_groups = step_groups(rt, groups);
    for (int g = 0; g < n_groups; g++) osdp_traffic_reset(&groups[g]->traffic);
    osdp_runtime_invalidate_weights(rt);
    const long global_seqs = (long)rt->B * rt->N * rt->opt.geo.accum_steps;
    in->global_tokens = (double)global_seqs * rt->T;
    in->loss_scale = 1.0f / (float)in->global_tokens;
    rt->backend->fill_zero(in->sums, 2 * sizeof(double));
    /* with a pipeline the list is the whole step, its events name their micro-batches */
    const int lists = in->sched.pipelined ? 1 : rt->opt.geo.accum_steps;
    in->last_micro = lists - 1;
    for (in->micro = 0; in->micro < lists; in->micro++) {
        in->tokens = tokens + (size_t)in->micro * 2 * (size_t)rt->B * (size_t)rt->T;
        in->ws.cur = 0;
        in->cursor = 0;
        TRY(osdp_runtime_execute(rt, in->sched.micro, in->sched.n_micro));
    }
    in->micro = 0;
    in->cursor = 0;
    TRY(osdp_runtime_execute(rt, in->sched.optim, in->sched.n_optim));
    rt->backend->synchronize();
    if (osdp_error_pending())   /* met where no caller could be told (osdp/error.h) */
        return osdp_error_set(osdp_error_pending(), "%s", osdp_error_pending_message());
    rt->step++;
    if (stats) {
        stats->step = rt->step;
        stats->loss = in->loss;
        stats->grad_norm = in->grad_norm;
        stats->lr = in->lr;
        stats->tokens = global_seqs * rt->T;
        stats->seconds = osdp_now_seconds() - t0;
        osdp_traffic_reset(&stats->traffic);
        for (int g = 0; g < n_groups; g++) osdp_traffic_add(&stats->traffic, &groups[g]->traffic);
        stats->val_loss = NAN;
    }
    return OSDP_OK;
}

osdp_status osdp_runtime_evaluate(osdp_runtime *rt, const int *tokens, int n_batches, double *loss)
{
    struct osdp_runtime_internal *in = rt->in;
    const int micro_batches = n_batches * rt->opt.geo.accum_steps;
    osdp_runtime_invalidate_weights(rt);   /* the bf16 copies the gathers send: the weights as they are now */
    rt->backend->fill_zero(in->sums, 2 * sizeof(double));
    /* in->micro > 0 skips the DP slices' gathers: the first pass makes them */
    for (in->micro = 0; in->micro < micro_batches; in->micro++) {
        in->tokens = tokens + (size_t)in->micro * 2 * (size_t)rt->B * (size_t)rt->T;
        in->cursor = 0;
        TRY(osdp_runtime_execute(rt, in->sched.eval, in->sched.n_eval));
    }
    double sum;
    rt->backend->to_host(&sum, in->sums, sizeof sum);
    TRY(osdp_runtime_reduce_over_mesh(rt, &sum, 1));
    *loss = sum / ((double)micro_batches * rt->B * rt->N * rt->T);
    return OSDP_OK;
}

/* ---- position, moments, gathers (the shards themselves: src/runtime/shards.c) ---- */

void osdp_runtime_set_position(osdp_runtime *rt, long step, uint64_t seed)
{
    rt->step = step;
    rt->opt.seed = seed;
}

void osdp_runtime_reset_moments(osdp_runtime *rt)
{
    for (int i = rt->in->sched.op_lo; i < rt->in->sched.op_hi; i++)   /* m and v are adjacent in the state block */
        if (osdp_schedule_has_op(&rt->in->sched, i))
            rt->backend->fill_zero(rt->in->ops[i].m, 2 * rt->in->sched.ops[i].shard * sizeof(float));
}

osdp_status osdp_runtime_gather_op(osdp_runtime *rt, int op, float *host)
{
    const osdp_sched_op *so = &rt->in->sched.ops[op];
    if (!osdp_schedule_has_op(&rt->in->sched, op))
        return osdp_error_set(OSDP_ERR_INPUT, "gather: operator %s is not in this rank's pipeline stage",
                              rt->layout->op[op].name);
    float *shard = malloc(so->shard * sizeof(float)), *full = malloc(so->padded * sizeof(float));
    osdp_status s = shard && full ? OSDP_OK : osdp_error_set(OSDP_ERR_OOM, "gather: out of host memory");
    if (s == OSDP_OK) rt->backend->to_host(shard, rt->in->ops[op].master, so->shard * sizeof(float));
    for (int k = 0; k < so->n_slices && s == OSDP_OK; k++) {
        const osdp_sched_slice *ss = &so->slice[k];
        s = osdp_comm_all_gather(rt->in->ops[op].slice[k].comm, shard + ss->local, full + ss->base,
                                 osdp_sched_slice_shard_numel(ss), OSDP_FLOAT32, NULL);
        if (s == OSDP_OK) memcpy(host + ss->lo, full + ss->base, (ss->hi - ss->lo) * sizeof(float));
    }
    free(shard);
    free(full);
    return s;
}

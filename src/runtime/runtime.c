/* The sharded runtime: one optimizer step over a plan (see osdp/runtime.h). */
#include "osdp/runtime.h"
#include "osdp/data.h"
#include "osdp/init.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TRY(expr) do { osdp_status s_ = (expr); if (s_ != OSDP_OK) return s_; } while (0)

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int is_zdp(const osdp_runtime *rt, int op) { return rt->plan.zdp_slices[op] > 0; }

static void progress_hook(void *arg) { osdp_comm_progress(arg); }

osdp_status osdp_runtime_create(osdp_runtime *rt, const osdp_layout *layout, const osdp_plan *plan,
                                osdp_comm *comm, const osdp_compute_backend *backend,
                                const osdp_runtime_options *opt)
{
    memset(rt, 0, sizeof *rt);
    rt->layout = layout;
    rt->comm = opt->dry ? NULL : comm;
    rt->backend = backend;
    rt->opt = *opt;
    rt->N = opt->dry ? opt->n_ranks : comm->size;
    rt->rank = opt->dry ? opt->rank : comm->rank;
    rt->B = opt->micro_batch;
    rt->T = layout->T;
    rt->pending_scatter = -1;
    if (rt->N < 1 || rt->rank < 0 || rt->rank >= rt->N)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: rank %d of %d ranks is not valid", rt->rank, rt->N);
    if (rt->B < 1) return osdp_error_set(OSDP_ERR_INPUT, "micro-batch must be at least 1 (got %d)", rt->B);
    if (opt->accum_steps < 1) return osdp_error_set(OSDP_ERR_INPUT, "accumulation steps must be at least 1");
    for (int i = 0; i < plan->n_ops; i++)
        if (plan->slices[i] != 1)
            return osdp_error_set(OSDP_ERR_INPUT, "operator %s: operator splitting (k/g plans) is not supported by this runtime yet",
                                  layout->op[i].name);
    TRY(osdp_plan_copy(&rt->plan, plan));
    osdp_memory_init(&rt->mem, backend, opt->mem_limit, opt->dry);
    rt->ops = calloc((size_t)layout->n_ops, sizeof *rt->ops);
    if (!rt->ops) return osdp_error_set(OSDP_ERR_OOM, "runtime: out of host memory");

    float *init_host = NULL;
    size_t init_cap = 0;
    for (int i = 0; i < layout->n_ops; i++) {
        osdp_op_state *st = &rt->ops[i];
        const osdp_op_layout *op = &layout->op[i];
        st->padded = osdp_padded_numel(op->numel, rt->N);
        st->shard = st->padded / (size_t)rt->N;
        st->shard_lo = (size_t)rt->rank * st->shard;
        char what[96];
        snprintf(what, sizeof what, "operator %s (sharded state)", op->name);
        osdp_status s = osdp_mem_alloc(&rt->mem, OSDP_MEM_STATE, 4 * st->shard * sizeof(float), what, (void **)&st->state);
        if (s != OSDP_OK) { free(init_host); return s; }
        if (!opt->dry) {
            st->master = st->state;
            st->grad = st->state + st->shard;
            st->m = st->state + 2 * st->shard;
            st->v = st->state + 3 * st->shard;
            if (st->shard > init_cap) {
                free(init_host);
                init_cap = st->shard;
                init_host = malloc(init_cap * sizeof(float));
                if (!init_host) return osdp_error_set(OSDP_ERR_OOM, "runtime: out of host memory");
            }
            osdp_init_op_range(op, i, opt->seed, st->shard_lo, st->shard_lo + st->shard, init_host);
            backend->to_device(st->master, init_host, st->shard * sizeof(float));
            backend->fill_zero(st->grad, 3 * st->shard * sizeof(float));   /* grad, m, v */
        }
        if (!is_zdp(rt, i)) {
            snprintf(what, sizeof what, "operator %s (resident DP weights)", op->name);
            TRY(osdp_mem_alloc(&rt->mem, OSDP_MEM_WEIGHTS, st->padded * sizeof(float), what, (void **)&st->weights));
            st->weights_present = 1;
        }
    }
    free(init_host);
    rt->workspace_bytes = osdp_workspace_floats(layout, rt->B) * sizeof(float);
    TRY(osdp_mem_alloc(&rt->mem, OSDP_MEM_WORKSPACE, rt->workspace_bytes, "backward workspace", (void **)&rt->workspace_base));
    if (!opt->dry) osdp_workspace_carve(layout, rt->B, rt->workspace_base, &rt->ws);
    if (!opt->dry) {
        rt->batch_host = malloc(2 * (size_t)rt->B * (size_t)rt->T * sizeof(int));
        if (!rt->batch_host) return osdp_error_set(OSDP_ERR_OOM, "runtime: out of host memory");
    }
    rt->ctx = (osdp_op_context){.backend = backend, .layout = layout, .B = rt->B, .T = rt->T,
                                .progress = opt->prefetch && !opt->dry ? progress_hook : NULL,
                                .progress_arg = rt->comm};
    return OSDP_OK;
}

void osdp_runtime_destroy(osdp_runtime *rt)
{
    if (!rt->ops) return;
    for (int i = 0; i < rt->layout->n_ops; i++) {
        osdp_op_state *st = &rt->ops[i];
        if (!rt->opt.dry && st->gather_pending) osdp_comm_wait(rt->comm, &st->gather);
        osdp_mem_free(&rt->mem, OSDP_MEM_STATE, st->state, 4 * st->shard * sizeof(float));
        if (st->weights_present) osdp_mem_free(&rt->mem, OSDP_MEM_WEIGHTS, st->weights, st->padded * sizeof(float));
    }
    osdp_mem_free(&rt->mem, OSDP_MEM_WORKSPACE, rt->workspace_base, rt->workspace_bytes);
    free(rt->batch_host);
    free(rt->ops);
    osdp_plan_free(&rt->plan);
    rt->ops = NULL;
}

/* ---- weights: gather, prefetch, release ---------------------------------- */

/* The uses of operator weights in a micro-step: u < n forward of op u,
 * u >= n backward of op 2n-1-u. */
static int use_op(const osdp_runtime *rt, int u) { int n = rt->layout->n_ops; return u < n ? u : 2 * n - 1 - u; }

static int use_needs_gather(const osdp_runtime *rt, int u)
{
    int op = use_op(rt, u);
    if (is_zdp(rt, op)) return 1;
    return u < rt->layout->n_ops && !rt->ops[op].weights_valid;
}

static osdp_status gather_start(osdp_runtime *rt, int op, int blocking)
{
    osdp_op_state *st = &rt->ops[op];
    if (is_zdp(rt, op)) {
        char what[96];
        snprintf(what, sizeof what, "operator %s (gathered ZDP weights)", rt->layout->op[op].name);
        TRY(osdp_mem_alloc(&rt->mem, OSDP_MEM_WEIGHTS, st->padded * sizeof(float), what, (void **)&st->weights));
        st->weights_present = 1;
    }
    if (rt->opt.dry) return OSDP_OK;
    TRY(osdp_comm_all_gather(rt->comm, st->master, st->weights, st->shard, OSDP_FLOAT32,
                             blocking ? NULL : &st->gather));
    st->gather_pending = !blocking;
    return OSDP_OK;
}

/* Make op's weights for use u present; start the gather of use u+1. */
static osdp_status weights_acquire(osdp_runtime *rt, int u)
{
    int op = use_op(rt, u);
    osdp_op_state *st = &rt->ops[op];
    if (use_needs_gather(rt, u) && !st->gather_pending && !(is_zdp(rt, op) && st->weights_present))
        TRY(gather_start(rt, op, !rt->opt.prefetch));
    if (st->gather_pending) {
        TRY(osdp_comm_wait(rt->comm, &st->gather));
        st->gather_pending = 0;
    }
    if (!is_zdp(rt, op)) st->weights_valid = 1;
    if (rt->opt.prefetch && u + 1 < 2 * rt->layout->n_ops && use_needs_gather(rt, u + 1)) {
        int next = use_op(rt, u + 1);
        if (next != op) TRY(gather_start(rt, next, 0));
    }
    return OSDP_OK;
}

static void weights_release(osdp_runtime *rt, int u)
{
    int op = use_op(rt, u);
    osdp_op_state *st = &rt->ops[op];
    if (!is_zdp(rt, op)) return;
    /* forward and backward of the head are adjacent uses: keep nothing across
     * them either, a ZDP operator is gathered anew for its backward */
    osdp_mem_free(&rt->mem, OSDP_MEM_WEIGHTS, st->weights, st->padded * sizeof(float));
    st->weights = NULL;
    st->weights_present = 0;
}

/* ---- gradients: reduce-scatter into the shard ---------------------------- */

static osdp_status scatter_finish(osdp_runtime *rt, int op)
{
    osdp_op_state *st = &rt->ops[op];
    if (!rt->opt.dry) {
        TRY(osdp_comm_wait(rt->comm, &st->scatter));
        if (rt->micro == 0) rt->backend->copy(st->grad, st->grad_recv, st->shard * sizeof(float));
        else rt->backend->vector_accumulate(st->grad, st->grad_recv, st->shard);
    }
    osdp_mem_free(&rt->mem, OSDP_MEM_GRADS, st->full_grad, st->padded * sizeof(float));
    osdp_mem_free(&rt->mem, OSDP_MEM_GRADS, st->grad_recv, st->shard * sizeof(float));
    st->full_grad = st->grad_recv = NULL;
    return OSDP_OK;
}

static osdp_status scatter_start(osdp_runtime *rt, int op)
{
    osdp_op_state *st = &rt->ops[op];
    char what[96];
    snprintf(what, sizeof what, "operator %s (reduce-scatter destination)", rt->layout->op[op].name);
    TRY(osdp_mem_alloc(&rt->mem, OSDP_MEM_GRADS, st->shard * sizeof(float), what, (void **)&st->grad_recv));
    if (!rt->opt.dry)
        TRY(osdp_comm_reduce_scatter(rt->comm, st->full_grad, st->grad_recv, st->shard, OSDP_FLOAT32, &st->scatter));
    if (!rt->opt.prefetch) return scatter_finish(rt, op);
    if (rt->pending_scatter >= 0) TRY(scatter_finish(rt, rt->pending_scatter));
    rt->pending_scatter = op;
    return OSDP_OK;
}

/* ---- one micro-step -------------------------------------------------------- */

static osdp_status micro_step(osdp_runtime *rt, const osdp_dataset *data, double *loss_sum, float loss_scale)
{
    const osdp_layout *L = rt->layout;
    const osdp_compute_backend *be = rt->backend;
    const int n = L->n_ops, dry = rt->opt.dry;
    const size_t bt = (size_t)rt->B * (size_t)rt->T;
    if (!dry) {
        long first = ((long)rt->micro * rt->N + rt->rank) * rt->B;
        osdp_data_batch(data, rt->opt.seed, rt->step, first, rt->B, rt->T, rt->batch_host, rt->batch_host + bt);
    }
    for (int u = 0; u < n; u++) {
        osdp_op_state *st = &rt->ops[u];
        char what[96];
        snprintf(what, sizeof what, "operator %s (activations)", L->op[u].name);
        size_t floats = (size_t)rt->B * L->op[u].act_floats_per_seq;
        TRY(osdp_mem_alloc(&rt->mem, OSDP_MEM_ACTIVATIONS, floats * sizeof(float), what, (void **)&st->acts_base));
        TRY(weights_acquire(rt, u));
        if (!dry) {
            osdp_op_acts_carve(L, u, rt->B, st->acts_base, &st->acts);
            if (u == 0) be->to_device(st->acts.tokens, rt->batch_host, bt * sizeof(int));
            if (u == n - 1) be->to_device(st->acts.tokens, rt->batch_host + bt, bt * sizeof(int));
            osdp_op_forward(&rt->ctx, u, st->weights, u ? rt->ops[u - 1].acts.out : NULL, &st->acts);
            if (u == n - 1) *loss_sum += be->sum(st->acts.losses, bt);
        }
        weights_release(rt, u);
    }
    if (!dry) rt->ws.cur = 0;
    for (int u = n; u < 2 * n; u++) {
        int op = use_op(rt, u);
        osdp_op_state *st = &rt->ops[op];
        char what[96];
        snprintf(what, sizeof what, "operator %s (full gradients)", L->op[op].name);
        TRY(osdp_mem_alloc(&rt->mem, OSDP_MEM_GRADS, st->padded * sizeof(float), what, (void **)&st->full_grad));
        TRY(weights_acquire(rt, u));
        if (!dry) be->fill_zero(st->full_grad, st->padded * sizeof(float));   /* backward accumulates */
        if (!dry)
            osdp_op_backward(&rt->ctx, op, st->weights, st->full_grad, op ? rt->ops[op - 1].acts.out : NULL,
                             &st->acts, &rt->ws, loss_scale);
        weights_release(rt, u);
        TRY(scatter_start(rt, op));
        osdp_mem_free(&rt->mem, OSDP_MEM_ACTIVATIONS, st->acts_base, (size_t)rt->B * L->op[op].act_floats_per_seq * sizeof(float));
        st->acts_base = NULL;
    }
    if (rt->pending_scatter >= 0) {
        TRY(scatter_finish(rt, rt->pending_scatter));
        rt->pending_scatter = -1;
    }
    return OSDP_OK;
}

osdp_status osdp_runtime_step(osdp_runtime *rt, const osdp_dataset *data, osdp_step_stats *stats)
{
    const osdp_layout *L = rt->layout;
    const int dry = rt->opt.dry;
    double t0 = now_seconds();
    if (!dry) osdp_traffic_reset(&rt->comm->traffic);
    for (int i = 0; i < L->n_ops; i++) rt->ops[i].weights_valid = 0;
    const long global_seqs = (long)rt->B * rt->N * rt->opt.accum_steps;
    const float loss_scale = 1.0f / (float)((double)global_seqs * rt->T);
    double loss_sum = 0;
    for (rt->micro = 0; rt->micro < rt->opt.accum_steps; rt->micro++)
        TRY(micro_step(rt, data, &loss_sum, loss_scale));
    if (dry) return OSDP_OK;

    /* loss and gradient norm: one all-reduce of two doubles */
    double sums[2] = {loss_sum, 0};
    for (int i = 0; i < L->n_ops; i++)
        sums[1] += rt->backend->sum_squares(rt->ops[i].grad, rt->ops[i].shard);
    TRY(osdp_comm_all_reduce(rt->comm, sums, 2, OSDP_FLOAT64, NULL));
    double loss = sums[0] / ((double)global_seqs * rt->T);
    double norm = sqrt(sums[1]);
    if (!isfinite(loss) || !isfinite(norm))
        return osdp_error_set(OSDP_ERR_NUMERIC, "step %ld: loss is %g and gradient norm %g: training diverged (lower --lr?)",
                              rt->step + 1, loss, norm);
    float lr = osdp_lr_at(&rt->opt.optim, rt->step);
    float scale = osdp_clip_scale(&rt->opt.optim, norm);
    for (int i = 0; i < L->n_ops; i++) {
        osdp_op_state *st = &rt->ops[i];
        osdp_adamw_shard(rt->backend, &L->op[i], st->shard_lo, st->shard, st->master, st->grad, st->m, st->v,
                         &rt->opt.optim, lr, scale, rt->step + 1);
    }
    rt->backend->synchronize();
    rt->step++;
    if (stats) {
        stats->step = rt->step;
        stats->loss = loss;
        stats->grad_norm = norm;
        stats->lr = lr;
        stats->tokens = global_seqs * rt->T;
        stats->seconds = now_seconds() - t0;
        stats->traffic = rt->comm->traffic;
    }
    return OSDP_OK;
}

osdp_status osdp_memory_predict(const osdp_layout *layout, const osdp_plan *plan, int n_ranks,
                                int micro_batch, int accum_steps, int prefetch,
                                osdp_memory_prediction *out)
{
    osdp_runtime rt;
    osdp_runtime_options opt = {.micro_batch = micro_batch, .accum_steps = accum_steps, .prefetch = prefetch,
                                .dry = 1, .n_ranks = n_ranks, .rank = 0};
    osdp_status s = osdp_runtime_create(&rt, layout, plan, NULL, NULL, &opt);
    if (s == OSDP_OK) s = osdp_runtime_step(&rt, NULL, NULL);
    if (s == OSDP_OK) {
        memcpy(out->peak, rt.mem.peak, sizeof out->peak);
        out->peak_total = rt.mem.peak_total;
    }
    osdp_runtime_destroy(&rt);
    return s;
}

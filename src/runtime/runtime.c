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

/* A use of one slice's weights in a micro-step: forward passes go up the
 * slices, backward passes down (osdp/gpt.h). */
typedef enum { USE_FORWARD, USE_RECOMPUTE, USE_BACKWARD } use_pass;
typedef struct osdp_weight_use { int op, slice; use_pass pass; } osdp_weight_use;

static void progress_hook(void *arg) { osdp_comm_progress(arg); }

static osdp_status build_uses(osdp_runtime *rt)
{
    const int n = rt->layout->n_ops;
    int total = 0;
    for (int i = 0; i < n; i++) total += (2 + (rt->plan.recompute[i] != 0)) * rt->ops[i].n_slices;
    rt->uses = malloc(sizeof *rt->uses * (size_t)total);
    if (!rt->uses) return osdp_error_set(OSDP_ERR_OOM, "runtime: out of host memory");
    int u = 0;
    for (int i = 0; i < n; i++)
        for (int s = 0; s < rt->ops[i].n_slices; s++) rt->uses[u++] = (osdp_weight_use){i, s, USE_FORWARD};
    for (int i = n - 1; i >= 0; i--) {
        if (rt->plan.recompute[i])   /* the forward again, then the backward */
            for (int s = 0; s < rt->ops[i].n_slices; s++) rt->uses[u++] = (osdp_weight_use){i, s, USE_RECOMPUTE};
        for (int s = rt->ops[i].n_slices - 1; s >= 0; s--) rt->uses[u++] = (osdp_weight_use){i, s, USE_BACKWARD};
    }
    rt->n_uses = total;
    rt->cur_use = -1;
    return OSDP_OK;
}

/* slices, their sharding and this rank's segments (osdp/runtime.h) */
static osdp_status slice_operator(osdp_runtime *rt, int i)
{
    osdp_op_state *st = &rt->ops[i];
    const osdp_op_layout *op = &rt->layout->op[i];
    st->n_slices = rt->plan.slices[i];
    st->zdp_slices = rt->plan.zdp_slices[i];
    TRY(osdp_op_split(op, st->n_slices, st->bounds));
    st->padded = st->shard = st->resident_numel = 0;
    for (int s = 0; s < st->n_slices; s++) {
        osdp_slice_state *sl = &st->slice[s];
        memset(sl, 0, sizeof *sl);
        sl->lo = st->bounds[s];
        sl->hi = st->bounds[s + 1];
        sl->padded = osdp_padded_numel(sl->hi - sl->lo, rt->N);
        sl->base = st->padded;
        sl->local = st->shard;
        sl->flat_lo = sl->lo + (size_t)rt->rank * osdp_slice_shard_numel(sl, rt->N);
        sl->zdp = s < st->zdp_slices;
        st->padded += sl->padded;
        st->shard += osdp_slice_shard_numel(sl, rt->N);
        if (!sl->zdp) st->resident_numel += sl->padded;
    }
    return OSDP_OK;
}

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
    rt->weight_dtype = opt->weight_dtype;
    rt->weight_size = osdp_dtype_size(rt->weight_dtype);
    if (!opt->dry && opt->weight_dtype != backend->weight_dtype)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: %s weights asked for, but the %s backend's are %s",
                              osdp_dtype_name(opt->weight_dtype), backend->name, osdp_dtype_name(backend->weight_dtype));
    if (rt->weight_dtype != OSDP_FLOAT32 && rt->weight_dtype != OSDP_BFLOAT16)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: weights must be fp32 or bf16 (got %s)",
                              osdp_dtype_name(rt->weight_dtype));
    if (rt->N < 1 || rt->rank < 0 || rt->rank >= rt->N)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: rank %d of %d ranks is not valid", rt->rank, rt->N);
    if (rt->B < 1) return osdp_error_set(OSDP_ERR_INPUT, "micro-batch must be at least 1 (got %d)", rt->B);
    if (opt->accum_steps < 1) return osdp_error_set(OSDP_ERR_INPUT, "accumulation steps must be at least 1");
    for (int i = 0; i < plan->n_ops; i++)
        if (plan->recompute[i] && layout->op[i].type != OSDP_OP_ATTN && layout->op[i].type != OSDP_OP_MLP)
            return osdp_error_set(OSDP_ERR_INPUT, "operator %s: only attn and mlp operators can recompute their activations",
                                  layout->op[i].name);
    TRY(osdp_plan_copy(&rt->plan, plan));
    osdp_memory_init(&rt->mem, backend, opt->mem_limit, opt->dry);
    rt->ops = calloc((size_t)layout->n_ops, sizeof *rt->ops);
    if (!rt->ops) return osdp_error_set(OSDP_ERR_OOM, "runtime: out of host memory");
    for (int i = 0; i < layout->n_ops; i++) TRY(slice_operator(rt, i));
    TRY(build_uses(rt));

    float *init_host = NULL;
    size_t init_cap = 0;
    for (int i = 0; i < layout->n_ops; i++) {
        osdp_op_state *st = &rt->ops[i];
        const osdp_op_layout *op = &layout->op[i];
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
            for (int k = 0; k < st->n_slices; k++) {
                const osdp_slice_state *sl = &st->slice[k];
                size_t n = osdp_slice_shard_numel(sl, rt->N);
                size_t hi = sl->flat_lo + n < sl->hi ? sl->flat_lo + n : sl->hi;
                memset(init_host + sl->local, 0, n * sizeof(float));   /* padding */
                if (hi > sl->flat_lo) osdp_init_op_range(op, i, opt->seed, sl->flat_lo, hi, init_host + sl->local);
            }
            backend->to_device(st->master, init_host, st->shard * sizeof(float));
            backend->fill_zero(st->grad, 3 * st->shard * sizeof(float));   /* grad, m, v */
        }
        if (rt->weight_dtype != OSDP_FLOAT32) {
            snprintf(what, sizeof what, "operator %s (%s copy of the master shard)", op->name,
                     osdp_dtype_name(rt->weight_dtype));
            s = osdp_mem_alloc(&rt->mem, OSDP_MEM_STATE, st->shard * rt->weight_size, what, &st->master_copy);
            if (s != OSDP_OK) { free(init_host); return s; }
        }
        if (st->resident_numel) {
            snprintf(what, sizeof what, "operator %s (resident DP weights)", op->name);
            TRY(osdp_mem_alloc(&rt->mem, OSDP_MEM_WEIGHTS, st->resident_numel * rt->weight_size, what, &st->resident));
            size_t off = 0;
            for (int k = st->zdp_slices; k < st->n_slices; k++) {
                st->slice[k].weights = st->resident ? (char *)st->resident + off * rt->weight_size : NULL;
                st->slice[k].present = 1;
                off += st->slice[k].padded;
            }
        }
    }
    free(init_host);
    rt->workspace_bytes = osdp_workspace_floats(layout, rt->B) * sizeof(float);
    TRY(osdp_mem_alloc(&rt->mem, OSDP_MEM_WORKSPACE, rt->workspace_bytes, "backward workspace", (void **)&rt->workspace_base));
    if (!opt->dry) osdp_workspace_carve(layout, rt->B, rt->workspace_base, &rt->ws);
    if (!opt->dry) {
        rt->batch_host = malloc(2 * (size_t)rt->B * (size_t)rt->T * sizeof(int));
        if (!rt->batch_host) return osdp_error_set(OSDP_ERR_OOM, "runtime: out of host memory");
        /* 16 bytes outside the accounting, like the backends' own small scratch */
        rt->sums = backend->alloc(2 * sizeof(double));
        if (!rt->sums) return osdp_error_set(OSDP_ERR_OOM, "runtime: out of device memory for 16 bytes");
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
        for (int k = 0; k < st->n_slices; k++) {
            osdp_slice_state *sl = &st->slice[k];
            if (!rt->opt.dry && sl->pending) osdp_comm_wait(rt->comm, &sl->gather);
            if (sl->zdp && sl->present) osdp_mem_free(&rt->mem, OSDP_MEM_WEIGHTS, sl->weights, sl->padded * rt->weight_size);
        }
        osdp_mem_free(&rt->mem, OSDP_MEM_STATE, st->state, 4 * st->shard * sizeof(float));
        if (rt->weight_dtype != OSDP_FLOAT32)
            osdp_mem_free(&rt->mem, OSDP_MEM_STATE, st->master_copy, st->shard * rt->weight_size);
        if (st->resident_numel) osdp_mem_free(&rt->mem, OSDP_MEM_WEIGHTS, st->resident, st->resident_numel * rt->weight_size);
    }
    osdp_mem_free(&rt->mem, OSDP_MEM_WORKSPACE, rt->workspace_base, rt->workspace_bytes);
    if (rt->sums) rt->backend->free(rt->sums);
    free(rt->batch_host);
    free(rt->uses);
    free(rt->ops);
    osdp_plan_free(&rt->plan);
    rt->ops = NULL;
}

/* ---- weights: gather, prefetch, release, one slice at a time --------------- */

static osdp_slice_state *use_slice(osdp_runtime *rt, int u)
{
    return &rt->ops[rt->uses[u].op].slice[rt->uses[u].slice];
}

static int use_needs_gather(osdp_runtime *rt, int u)
{
    const osdp_slice_state *sl = use_slice(rt, u);
    if (sl->zdp) return !sl->present;
    return !sl->valid && !sl->pending;
}

static osdp_status gather_start(osdp_runtime *rt, int u, int blocking)
{
    const osdp_weight_use *use = &rt->uses[u];
    osdp_op_state *st = &rt->ops[use->op];
    osdp_slice_state *sl = &st->slice[use->slice];
    if (sl->zdp) {
        char what[128];
        if (st->n_slices > 1)
            snprintf(what, sizeof what, "operator %s slice %d of %d (gathered ZDP weights)", rt->layout->op[use->op].name,
                     use->slice + 1, st->n_slices);
        else
            snprintf(what, sizeof what, "operator %s (gathered ZDP weights)", rt->layout->op[use->op].name);
        TRY(osdp_mem_alloc(&rt->mem, OSDP_MEM_WEIGHTS, sl->padded * rt->weight_size, what, &sl->weights));
        sl->present = 1;
    }
    if (rt->opt.dry) {
        if (!sl->zdp) sl->valid = 1;
        return OSDP_OK;
    }
    /* fp32: the master shard itself; bf16: its rounded copy */
    const void *mine = rt->weight_dtype == OSDP_FLOAT32 ? (const void *)(st->master + sl->local)
                                                        : (const char *)st->master_copy + sl->local * rt->weight_size;
    TRY(osdp_comm_all_gather(rt->comm, mine, sl->weights, osdp_slice_shard_numel(sl, rt->N), rt->weight_dtype,
                             blocking ? NULL : &sl->gather));
    sl->pending = !blocking;
    if (!sl->zdp) sl->valid = 1;   /* the gather is under way: nobody starts another */
    return OSDP_OK;
}

static osdp_status make_present(osdp_runtime *rt, int u)
{
    osdp_slice_state *sl = use_slice(rt, u);
    if (use_needs_gather(rt, u)) TRY(gather_start(rt, u, !rt->opt.prefetch));
    if (sl->pending) {
        TRY(osdp_comm_wait(rt->comm, &sl->gather));
        sl->pending = 0;
    }
    return OSDP_OK;
}

static osdp_status release(osdp_runtime *rt, int u)
{
    osdp_slice_state *sl = use_slice(rt, u);
    if (!sl->zdp || !sl->present) return OSDP_OK;
    if (sl->pending) {   /* prefetched for a use that the operator skipped */
        TRY(osdp_comm_wait(rt->comm, &sl->gather));
        sl->pending = 0;
    }
    /* a ZDP slice is gathered anew for every use, even adjacent ones (the
     * head's forward and backward): it never stays across uses */
    osdp_mem_free(&rt->mem, OSDP_MEM_WEIGHTS, sl->weights, sl->padded * rt->weight_size);
    sl->weights = NULL;
    sl->present = 0;
    return OSDP_OK;
}

/* Advance to use `target`: release the uses before it, make its slice present
 * and start the gather of the use after it (prefetch). */
static osdp_status advance_to(osdp_runtime *rt, int target)
{
    while (rt->cur_use < target) {
        if (rt->cur_use >= 0) TRY(release(rt, rt->cur_use));
        rt->cur_use++;
        if (rt->cur_use < target) continue;
        TRY(make_present(rt, rt->cur_use));
        if (!rt->opt.prefetch) continue;
        /* ahead: the next slice, and when an operator's pass begins, the first
         * slice of the next pass too, so that its gather has the whole
         * operator's compute to hide behind (and the memory it takes is the
         * same at every slice: osdp/cost_model.h) */
        const osdp_weight_use *cur = &rt->uses[rt->cur_use];
        int next = rt->cur_use + 1;
        if (next < rt->n_uses && use_needs_gather(rt, next)) TRY(gather_start(rt, next, 0));
        int first = rt->cur_use == 0 || rt->uses[rt->cur_use - 1].op != cur->op || rt->uses[rt->cur_use - 1].pass != cur->pass;
        int next_pass = rt->cur_use + rt->ops[cur->op].n_slices;
        if (first && next_pass < rt->n_uses && next_pass != next && use_needs_gather(rt, next_pass))
            TRY(gather_start(rt, next_pass, 0));
    }
    return OSDP_OK;
}

static int find_use(const osdp_runtime *rt, int op, int slice, use_pass pass)
{
    for (int u = rt->cur_use < 0 ? 0 : rt->cur_use; u < rt->n_uses; u++)
        if (rt->uses[u].op == op && rt->uses[u].slice == slice && rt->uses[u].pass == pass) return u;
    return -1;
}

typedef struct slice_request {
    osdp_runtime *rt;
    int op;
    use_pass pass;
    const void **weights;    /* the operator's view, refreshed on acquire (NULL when dry) */
} slice_request;

/* osdp_op_slices.acquire: the operator is about to touch slice s */
static osdp_status acquire_slice(void *arg, int s)
{
    slice_request *r = arg;
    int u = find_use(r->rt, r->op, s, r->pass);
    if (u < 0) return osdp_error_set(OSDP_ERR_INTERNAL, "operator %s touched slice %d out of order",
                                     r->rt->layout->op[r->op].name, s);
    TRY(advance_to(r->rt, u));
    if (r->weights) r->weights[s] = r->rt->ops[r->op].slice[s].weights;
    return OSDP_OK;
}

/* Runs one pass of operator op: the operator acquires its slices as it goes
 * (dry: each slice is touched in pass order); then every use of this pass is
 * done, whether the operator touched it or not. */
static osdp_status run_pass(osdp_runtime *rt, int op, use_pass pass, const float *input, float loss_scale)
{
    osdp_op_state *st = &rt->ops[op];
    const int g = st->n_slices, fwd = pass != USE_BACKWARD;
    const void *weights[OSDP_MAX_SLICES] = {0};
    float *grad_slices[OSDP_MAX_SLICES] = {0};
    slice_request req = {rt, op, pass, rt->opt.dry ? NULL : weights};
    if (rt->opt.dry) {
        for (int k = 0; k < g; k++) TRY(acquire_slice(&req, fwd ? k : g - 1 - k));
    } else {
        for (int k = 0; k < g; k++) grad_slices[k] = fwd ? NULL : st->full_grad + st->slice[k].base;
        /* the first slice before the call: an unsplit operator needs no callback */
        TRY(acquire_slice(&req, fwd ? 0 : g - 1));
        osdp_op_slices view = {.n = g, .bounds = st->bounds, .weights = weights, .grads = grad_slices,
                               .acquire = acquire_slice, .arg = &req};
        if (fwd) TRY(osdp_op_forward_sliced(&rt->ctx, op, &view, input, &st->acts));
        else TRY(osdp_op_backward_sliced(&rt->ctx, op, &view, input, &st->acts, &rt->ws, loss_scale));
    }
    int last = find_use(rt, op, fwd ? g - 1 : 0, pass);
    TRY(advance_to(rt, last));
    /* a ZDP slice is freed as soon as the operator is done with it: before the
     * reduce-scatter's receive buffer and the next activations are allocated */
    return release(rt, rt->cur_use);
}

/* ---- gradients: reduce-scatter of each slice into its shard ---------------- */

static osdp_status scatter_finish(osdp_runtime *rt, int op)
{
    osdp_op_state *st = &rt->ops[op];
    if (!rt->opt.dry) {
        for (int k = 0; k < st->n_slices; k++) TRY(osdp_comm_wait(rt->comm, &st->slice[k].scatter));
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
    if (!rt->opt.dry) {
        /* one fused launch for the operator's slices on NCCL (osdp/comm.h) */
        TRY(osdp_comm_group_start(rt->comm));
        for (int k = 0; k < st->n_slices; k++) {
            osdp_slice_state *sl = &st->slice[k];
            TRY(osdp_comm_reduce_scatter(rt->comm, st->full_grad + sl->base, st->grad_recv + sl->local,
                                         osdp_slice_shard_numel(sl, rt->N), OSDP_FLOAT32, &sl->scatter));
        }
        TRY(osdp_comm_group_end(rt->comm));
    }
    if (!rt->opt.prefetch) return scatter_finish(rt, op);
    if (rt->pending_scatter >= 0) TRY(scatter_finish(rt, rt->pending_scatter));
    rt->pending_scatter = op;
    return OSDP_OK;
}

/* ---- activations ----------------------------------------------------------- */

/* Activation checkpointing (DESIGN.md §3): an operator marked recompute keeps
 * only its output (the next operator's input) from its forward to its
 * backward; the rest of its activation block lives during its forward and
 * again during its recomputed forward + backward.  The output is the last
 * piece osdp_op_acts_carve lays out for attn and mlp, so the transient block
 * is the full one without it. */
static size_t kept_floats(const osdp_runtime *rt, int op)
{
    return (size_t)rt->B * (size_t)rt->T * (size_t)rt->layout->op[op].width;
}

static size_t acts_floats(const osdp_runtime *rt, int op)
{
    size_t full = (size_t)rt->B * rt->layout->op[op].act_floats_per_seq;
    return rt->plan.recompute[op] ? full - kept_floats(rt, op) : full;
}

static osdp_status kept_alloc(osdp_runtime *rt, int op)
{
    char what[96];
    snprintf(what, sizeof what, "operator %s (output kept for recompute)", rt->layout->op[op].name);
    return osdp_mem_alloc(&rt->mem, OSDP_MEM_ACTIVATIONS, kept_floats(rt, op) * sizeof(float), what,
                          (void **)&rt->ops[op].kept_out);
}

static void kept_free(osdp_runtime *rt, int op)
{
    osdp_mem_free(&rt->mem, OSDP_MEM_ACTIVATIONS, rt->ops[op].kept_out, kept_floats(rt, op) * sizeof(float));
    rt->ops[op].kept_out = NULL;
}

static osdp_status acts_alloc(osdp_runtime *rt, int op)
{
    osdp_op_state *st = &rt->ops[op];
    char what[96];
    snprintf(what, sizeof what, "operator %s (activations)", rt->layout->op[op].name);
    TRY(osdp_mem_alloc(&rt->mem, OSDP_MEM_ACTIVATIONS, acts_floats(rt, op) * sizeof(float), what, (void **)&st->acts_base));
    if (!rt->opt.dry) {
        osdp_op_acts_carve(rt->layout, op, rt->B, st->acts_base, &st->acts);
        if (rt->plan.recompute[op]) st->acts.out = st->kept_out;
    }
    return OSDP_OK;
}

static void acts_free(osdp_runtime *rt, int op)
{
    osdp_op_state *st = &rt->ops[op];
    osdp_mem_free(&rt->mem, OSDP_MEM_ACTIVATIONS, st->acts_base, acts_floats(rt, op) * sizeof(float));
    st->acts_base = NULL;
}

/* ---- one micro-step -------------------------------------------------------- */

static osdp_status micro_step(osdp_runtime *rt, const osdp_dataset *data, float loss_scale)
{
    const osdp_layout *L = rt->layout;
    const osdp_compute_backend *be = rt->backend;
    const int n = L->n_ops, dry = rt->opt.dry;
    const size_t bt = (size_t)rt->B * (size_t)rt->T;
    if (!dry) {
        long first = ((long)rt->micro * rt->N + rt->rank) * rt->B;
        osdp_data_batch(data, rt->opt.seed, rt->step, first, rt->B, rt->T, rt->batch_host, rt->batch_host + bt);
    }
    rt->cur_use = -1;
    for (int u = 0; u < n; u++) {
        osdp_op_state *st = &rt->ops[u];
        if (rt->plan.recompute[u]) TRY(kept_alloc(rt, u));
        TRY(acts_alloc(rt, u));
        if (!dry) {
            if (u == 0) be->to_device(st->acts.tokens, rt->batch_host, bt * sizeof(int));
            if (u == n - 1) be->to_device(st->acts.tokens, rt->batch_host + bt, bt * sizeof(int));
        }
        TRY(run_pass(rt, u, USE_FORWARD, u ? rt->ops[u - 1].acts.out : NULL, loss_scale));
        if (!dry && u == n - 1) be->accumulate_sum(&rt->sums[0], st->acts.losses, bt, 0);   /* no wait */
        if (rt->plan.recompute[u]) acts_free(rt, u);   /* only the output stays */
    }
    if (!dry) rt->ws.cur = 0;
    for (int op = n - 1; op >= 0; op--) {
        osdp_op_state *st = &rt->ops[op];
        const float *input = op ? rt->ops[op - 1].acts.out : NULL;
        if (rt->plan.recompute[op]) {   /* the activations again, from the kept input */
            TRY(acts_alloc(rt, op));
            TRY(run_pass(rt, op, USE_RECOMPUTE, input, loss_scale));
        }
        char what[96];
        snprintf(what, sizeof what, "operator %s (full gradients)", L->op[op].name);
        TRY(osdp_mem_alloc(&rt->mem, OSDP_MEM_GRADS, st->padded * sizeof(float), what, (void **)&st->full_grad));
        if (!dry) be->fill_zero(st->full_grad, st->padded * sizeof(float));   /* backward accumulates */
        TRY(run_pass(rt, op, USE_BACKWARD, input, loss_scale));
        TRY(scatter_start(rt, op));
        acts_free(rt, op);
        if (rt->plan.recompute[op]) kept_free(rt, op);
    }
    if (rt->pending_scatter >= 0) {
        TRY(scatter_finish(rt, rt->pending_scatter));
        rt->pending_scatter = -1;
    }
    return OSDP_OK;
}

void osdp_runtime_invalidate_weights(osdp_runtime *rt)
{
    for (int i = 0; i < rt->layout->n_ops; i++) {
        osdp_op_state *st = &rt->ops[i];
        for (int k = 0; k < st->n_slices; k++) st->slice[k].valid = 0;
        /* what the next gathers send: the master shard as it is now */
        if (!rt->opt.dry && rt->weight_dtype != OSDP_FLOAT32)
            rt->backend->convert_weights(st->master_copy, st->master, st->shard);
    }
}

osdp_status osdp_runtime_step(osdp_runtime *rt, const osdp_dataset *data, osdp_step_stats *stats)
{
    const osdp_layout *L = rt->layout;
    const int dry = rt->opt.dry;
    double t0 = now_seconds();
    if (!dry) osdp_traffic_reset(&rt->comm->traffic);
    osdp_runtime_invalidate_weights(rt);
    const long global_seqs = (long)rt->B * rt->N * rt->opt.accum_steps;
    const float loss_scale = 1.0f / (float)((double)global_seqs * rt->T);
    if (!dry) rt->backend->fill_zero(rt->sums, 2 * sizeof(double));
    for (rt->micro = 0; rt->micro < rt->opt.accum_steps; rt->micro++)
        TRY(micro_step(rt, data, loss_scale));
    if (dry) return OSDP_OK;

    /* loss and gradient norm: summed where the compute runs, read back once
     * (the step's only wait for the compute before the optimizer), then one
     * all-reduce of two doubles */
    double sums[2];
    for (int i = 0; i < L->n_ops; i++)
        rt->backend->accumulate_sum(&rt->sums[1], rt->ops[i].grad, rt->ops[i].shard, 1);
    rt->backend->to_host(sums, rt->sums, sizeof sums);
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
        for (int k = 0; k < st->n_slices; k++) {
            const osdp_slice_state *sl = &st->slice[k];
            size_t n = osdp_slice_shard_numel(sl, rt->N), o = sl->local;
            size_t valid = sl->flat_lo >= sl->hi ? 0 : sl->hi - sl->flat_lo < n ? sl->hi - sl->flat_lo : n;
            osdp_adamw_shard(rt->backend, &L->op[i], sl->flat_lo, valid, st->master + o, st->grad + o, st->m + o,
                             st->v + o, &rt->opt.optim, lr, scale, rt->step + 1);
        }
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
                                int micro_batch, int accum_steps, int prefetch, osdp_dtype weight_dtype,
                                osdp_memory_prediction *out)
{
    osdp_runtime rt;
    osdp_runtime_options opt = {.micro_batch = micro_batch, .accum_steps = accum_steps, .prefetch = prefetch,
                                .dry = 1, .n_ranks = n_ranks, .rank = 0, .weight_dtype = weight_dtype};
    osdp_status s = osdp_runtime_create(&rt, layout, plan, NULL, NULL, &opt);
    if (s == OSDP_OK) s = osdp_runtime_step(&rt, NULL, NULL);
    if (s == OSDP_OK) {
        memcpy(out->peak, rt.mem.peak, sizeof out->peak);
        out->peak_total = rt.mem.peak_total;
    }
    osdp_runtime_destroy(&rt);
    return s;
}

osdp_status osdp_runtime_gather_op(osdp_runtime *rt, int op, float *host)
{
    osdp_op_state *st = &rt->ops[op];
    float *shard = malloc(st->shard * sizeof(float)), *full = malloc(st->padded * sizeof(float));
    osdp_status s = shard && full ? OSDP_OK : osdp_error_set(OSDP_ERR_OOM, "gather: out of host memory");
    if (s == OSDP_OK) rt->backend->to_host(shard, st->master, st->shard * sizeof(float));
    for (int k = 0; k < st->n_slices && s == OSDP_OK; k++) {
        const osdp_slice_state *sl = &st->slice[k];
        s = osdp_comm_all_gather(rt->comm, shard + sl->local, full + sl->base, osdp_slice_shard_numel(sl, rt->N),
                                 OSDP_FLOAT32, NULL);
        if (s == OSDP_OK) memcpy(host + sl->lo, full + sl->base, (sl->hi - sl->lo) * sizeof(float));
    }
    free(shard);
    free(full);
    return s;
}

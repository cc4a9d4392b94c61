/* The cost model (formulas in osdp/cost_model.h). */
#include "osdp/cost_model.h"
#include "osdp/gpt.h"
#include "osdp/schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void osdp_cost_model_init(osdp_cost_model *cm, const osdp_layout *layout, const osdp_device *dev,
                          const osdp_step_geometry *geo, osdp_cost_kind kind, const osdp_cost_hierarchy *hier)
{
    *cm = (osdp_cost_model){.layout = layout, .dev = dev, .geo = *geo, .kind = kind, .hier = hier};
}

double osdp_cost_op_flops(const osdp_op_layout *op)
{
    if (op->type == OSDP_OP_EMBED) return 3.0 * (double)op->width; /* nominal: no matmul */
    return 3.0 * ((double)op->flops_per_token + (double)op->attn_flops_per_token);
}

struct osdp_cost_cuts {
    int n;
    struct op_cuts {
        signed char state[OSDP_MAX_SLICES + 1];              /* 0: not asked yet, 1: cut, 2: cannot */
        size_t bounds[OSDP_MAX_SLICES + 1][OSDP_MAX_SLICES + 1];
    } *op;
};

osdp_cost_cuts *osdp_cost_cuts_new(int n_ops)
{
    osdp_cost_cuts *c = calloc(1, sizeof *c);
    if (c && !(c->op = calloc((size_t)(n_ops > 0 ? n_ops : 1), sizeof *c->op))) {
        free(c);
        return NULL;
    }
    if (c) c->n = n_ops;
    return c;
}

void osdp_cost_cuts_free(osdp_cost_cuts *c)
{
    if (c) free(c->op);
    free(c);
}

/* osdp_op_split through the cache: 1 and the bounds when op can be cut into g */
static int cut(const osdp_cost_model *cm, int op, int g, size_t *bounds)
{
    const osdp_op_layout *o = &cm->layout->op[op];
    bounds[0] = 0;
    bounds[1] = o->numel;
    if (g == 1) return 1;
    if (!osdp_op_can_split(o) || g < 1 || g > OSDP_MAX_SLICES) return 0;
    struct op_cuts *c = cm->cuts && op < cm->cuts->n ? &cm->cuts->op[op] : NULL;
    if (c && c->state[g]) {
        if (c->state[g] == 1)
            for (int s = 0; s <= g; s++) bounds[s] = c->bounds[g][s];
        return c->state[g] == 1;
    }
    int ok = osdp_op_split(o, g, bounds) == OSDP_OK;
    if (c) {
        c->state[g] = ok ? 1 : 2;
        for (int s = 0; ok && s <= g; s++) c->bounds[g][s] = bounds[s];
    }
    return ok;
}

int osdp_cost_can_split(const osdp_cost_model *cm, int op, int g)
{
    size_t bounds[OSDP_MAX_SLICES + 1];
    return cut(cm, op, g, bounds);
}

/* The slices the runtime cuts (osdp_op_split) and their padded sizes.  An
 * operator that cannot be cut into g slices (the embedding) runs unsplit: k = 0
 * is DP, k > 0 ZDP; *partial tells that 0 < k < g was asked of it. */
static int op_slices(const osdp_cost_model *cm, int op, int *g, int *k, size_t *padded, int *partial)
{
    size_t bounds[OSDP_MAX_SLICES + 1];
    *partial = 0;
    if (*g > 1 && !cut(cm, op, *g, bounds)) {
        *partial = *k > 0 && *k < *g;
        *k = *k > 0;
        *g = 1;
    }
    if (*g == 1) {
        bounds[0] = 0;
        bounds[1] = cm->layout->op[op].numel;
    }
    for (int s = 0; s < *g; s++) padded[s] = osdp_padded_numel_quantum(bounds[s + 1] - bounds[s], cm->geo.n_ranks,
                                                                       cm->geo.pad_quantum);
    return *g;
}

size_t osdp_cost_slice_numel(const osdp_cost_model *cm, int op, int g)
{
    size_t padded[OSDP_MAX_SLICES];
    int k = 0, partial;
    op_slices(cm, op, &g, &k, padded, &partial);
    size_t most = 0;
    for (int s = 0; s < g; s++) most = padded[s] > most ? padded[s] : most;
    return most;
}

void osdp_cost_op_mem(const osdp_cost_model *cm, int op, int g, int k, int b, osdp_op_mem *out)
{
    osdp_cost_op_mem_rc(cm, op, g, k, cm->recompute && cm->recompute[op], b, out);
}

static int plan_op_hierarchical(const osdp_plan *plan, int i)
{
    return plan->hierarchical && plan->hierarchical[i] && plan->zdp_slices[i] > 0;
}

void osdp_cost_plan_op_mem(const osdp_cost_model *cm, const osdp_plan *plan, int i, int b, osdp_op_mem *out)
{
    if (plan_op_hierarchical(plan, i)) osdp_cost_op_mem_hier(cm, i, cm->recompute && cm->recompute[i], b, out);
    else osdp_cost_op_mem(cm, i, plan->slices[i], plan->zdp_slices[i], b, out);
}

void osdp_cost_plan_op_time(const osdp_cost_model *cm, const osdp_plan *plan, int i, int b, int accum, osdp_op_time *out)
{
    if (plan_op_hierarchical(plan, i)) osdp_cost_op_time_hier(cm, i, cm->recompute && cm->recompute[i], b, accum, out);
    else osdp_cost_op_time(cm, i, plan->slices[i], plan->zdp_slices[i], b, accum, out);
}

static void op_mem_sharded(const osdp_cost_model *cm, int op, int g, int k, int rc, int once, int b,
                           long long shard_ranks, osdp_op_mem *out);

/* the cost model's reduce-once slices of op (cm->reduce_once; at least g reads as all of them) */
static int cm_once(const osdp_cost_model *cm, int op)
{
    return cm->reduce_once ? cm->reduce_once[op] : 0;
}

void osdp_cost_op_mem_rc(const osdp_cost_model *cm, int op, int g, int k, int rc, int b, osdp_op_mem *out)
{
    op_mem_sharded(cm, op, g, k, rc, cm_once(cm, op), b, cm->geo.n_ranks, out);
}

void osdp_cost_op_mem_choice(const osdp_cost_model *cm, int op, int g, int k, int rc, int once, int b, osdp_op_mem *out)
{
    op_mem_sharded(cm, op, g, k, rc, once, b, cm->geo.n_ranks, out);
}

void osdp_cost_op_mem_hier(const osdp_cost_model *cm, int op, int rc, int b, osdp_op_mem *out)
{
    op_mem_sharded(cm, op, 1, 1, rc, cm_once(cm, op), b, cm->hier ? cm->hier->node_ranks : cm->geo.n_ranks, out);
}

/* the model's step at micro-batch b (what the size table reads) */
static osdp_step_geometry geometry_at(const osdp_cost_model *cm, int b)
{
    osdp_step_geometry geo = cm->geo;
    geo.micro_batch = b;
    return geo;
}

/* the operator's buffers as the cost model's device sizes them (the size table, osdp/schedule.h), for
 * the step geo */
static osdp_buffer_dims buffer_dims(const osdp_cost_model *cm, const osdp_step_geometry *geo, int op, int rc)
{
    const osdp_device *d = cm->dev;
    const osdp_layout *L = cm->layout;
    return (osdp_buffer_dims){.layout = L, .op = op, .geo = geo, .recompute = rc, .sends = osdp_cost_op_sends(L, op),
                              .width = {.weight = (size_t)d->param_bytes, .grad = (size_t)d->grad_bytes,
                                        .act = (size_t)d->act_bytes,
                                        .residual = osdp_dtype_size(geo->residual_dtype)}};
}

/* the terms with shards of padded / shard_ranks (N; R for a hierarchical slice); the last `once` slices
 * (at least g: all) reduce once per step */
static void op_mem_sharded(const osdp_cost_model *cm, int op, int g, int k, int rc, int once, int b,
                           long long shard_ranks, osdp_op_mem *out)
{
    size_t p[OSDP_MAX_SLICES];
    int partial;
    op_slices(cm, op, &g, &k, p, &partial);
    if (once > g) once = g;
    const osdp_step_geometry geo = geometry_at(cm, b);
    osdp_buffer_dims d = buffer_dims(cm, &geo, op, rc);
    for (int s = 0; s < g; s++) {
        d.padded += p[s];
        if (s >= k) d.resident += p[s];
        if (s >= g - once) {
            d.once += p[s];
            d.once_shard += p[s] / (size_t)shard_ranks;
        }
    }
    d.shard = d.padded / (size_t)shard_ranks;
#define BYTES(kind, slice_padded) ((long long)osdp_buffer_bytes(kind, &d, slice_padded))
    out->state = BYTES(OSDP_BUF_STATE, 0) + BYTES(OSDP_BUF_MASTER_COPY, 0);
    out->resident = BYTES(OSDP_BUF_RESIDENT, 0);
    /* recompute: its output stays from the forward to the backward (KEPT), the rest (ACTS) is rebuilt */
    const long long acts = BYTES(OSDP_BUF_ACTS, 0);
    out->acts = rc ? BYTES(OSDP_BUF_KEPT, 0) : acts;
    out->rebuilt = rc ? acts : 0;
    out->view = BYTES(OSDP_BUF_KEPT_WIDE, 0);   /* narrow only: its kept output widened for the next operator */
    out->held = cm->in_flight > 1 ? (long long)(cm->in_flight - 1) * out->acts : 0;
    out->grads = BYTES(OSDP_BUF_FULL_GRAD, 0);
    out->reduce_once = once;
    out->once_all = once == g;
    out->accum = BYTES(OSDP_BUF_GRAD_ACCUM, 0);   /* 0 without reduce-once slices */
    out->recv = BYTES(OSDP_BUF_GRAD_RECV, 0);     /* the other slices': reduce-once ones reduce into the shard */
    /* backward goes down the slices; ZDP slices are 0..k-1.  At slice s the
     * operator holds slice s if ZDP and, with prefetch, slice s-1 gathered
     * ahead (the next operator's first slice, f, is held throughout) */
    long long gathered[OSDP_MAX_SLICES] = {0};
    for (int s = 0; s < g; s++) gathered[s] = BYTES(OSDP_BUF_GATHERED, p[s]);
    long long work_from_2 = 0;   /* the largest w_s over slices s >= 2 */
    out->work = 0;
    for (int s = 0; s < g; s++) {
        long long v = (s < k ? gathered[s] : 0) + (cm->geo.prefetch && s >= 1 && s - 1 < k ? gathered[s - 1] : 0);
        if (v > out->work) out->work = v;
        if (s >= 2 && v > work_from_2) work_from_2 = v;
    }
    /* the first slice the backward order touches: slice g-1 of the backward,
     * or with recompute slice 0 of the recomputed forward */
    const long long forward_first = k > 0 ? gathered[0] : 0;
    out->prefetch = rc ? forward_first : (k == g ? gathered[g - 1] : 0);
    /* its forward goes up the slices, holding slice s when ZDP and, with
     * prefetch, slice s+1 gathered ahead; as a layout's last operator also
     * the first slice of its own next pass, its backward (osdp/cost_model.h) */
    out->forward_first = forward_first;
    out->forward_work = out->forward_work_last = 0;
    for (int s = 0; s < g; s++) {
        const long long held = (s < k ? gathered[s] : 0) + (cm->geo.prefetch && s + 1 < k ? gathered[s + 1] : 0);
        /* last, not recomputed: its backward's slice g-1 (ZDP when k = g), gathered from slice 0 on unless it
         * is the slice ahead; recomputed: the recomputed forward's slice 0, gathered again at slice g-1 */
        long long again = 0;
        if (cm->geo.prefetch && !rc && k == g && s + 1 < g - 1) again = gathered[g - 1];
        if (cm->geo.prefetch && rc && g > 1 && s == g - 1) again = forward_first;
        if (held > out->forward_work) out->forward_work = held;
        if (held + again > out->forward_work_last) out->forward_work_last = held + again;
    }
    /* a pipeline stage's wrap moment (osdp/cost_model.h): its forward's slice 0 gathered ahead for the next
     * pass, extra while slices s >= 2 are in use; a one-operator stage's next backward prefetched */
    out->wrap_forward = work_from_2 > 0 ? work_from_2 + forward_first : 0;
    out->wrap_again = rc ? out->wrap_forward
                    : g > 1 ? (forward_first > out->recv ? forward_first : out->recv) + out->prefetch : 0;
    out->wrap_again_recv = !rc && g > 1 && !(forward_first > out->recv) ? out->recv : 0;
#undef BYTES
}

long long osdp_cost_tied_grads(const osdp_cost_model *cm, int op)
{
    if (!cm->layout->cfg.tied_head || op == 0) return 0;
    osdp_op_mem embed;
    osdp_cost_op_mem_rc(cm, 0, 1, 0, 0, 1, &embed);   /* unsplit and DP; its gradients do not depend on b */
    return embed.grads;
}

/* one ring all-reduce of `bytes` over the tensor-parallel group of tp ranks */
static double tp_all_reduce_time(const osdp_device *d, int tp, double bytes)
{
    return 2.0 * (tp - 1) * (d->tp_all_reduce.alpha + bytes / tp * d->tp_all_reduce.beta);
}

double osdp_cost_tp_all_gather_time(const osdp_device *dev, int tp, double part_bytes)
{
    return tp > 1 ? (tp - 1) * (dev->tp_all_reduce.alpha + part_bytes * dev->tp_all_reduce.beta) : 0;
}

double osdp_cost_tp_comm(const osdp_cost_model *cm, int op, int rc, int b)
{
    const osdp_layout *L = cm->layout;
    const int tp = L->tp_size;
    if (tp <= 1) return 0;
    const osdp_op_layout *o = &L->op[op];
    const osdp_device *d = cm->dev;
    const double tokens = (double)b * (double)L->T;
    /* (b, T, d) in the residual stream's dtype: a bf16 stream's all-reduces move bf16 (osdp/schedule.h) */
    const double stream = tokens * (double)o->width * (double)osdp_dtype_size(cm->geo.residual_dtype);
    switch (o->type) {
    case OSDP_OP_EMBED:   /* forward: the vocabulary-parallel lookups summed */
        return tp_all_reduce_time(d, tp, stream);
    case OSDP_OP_ATTN:
    case OSDP_OP_MLP:     /* forward after the row-parallel product (again when recomputed), backward before the
                             LayerNorm's */
        return (rc ? 3 : 2) * tp_all_reduce_time(d, tp, stream);
    case OSDP_OP_HEAD: {  /* forward: each rank's 3 statistics per token gathered; backward: d(ln) summed */
        return osdp_cost_tp_all_gather_time(d, tp, 3.0 * tokens * (double)sizeof(float)) + tp_all_reduce_time(d, tp, stream);
    }
    }
    return 0;
}

void osdp_cost_workspace_parts(const osdp_cost_model *cm, int b, osdp_peak_parts *out)
{
    const osdp_step_geometry geo = geometry_at(cm, b);
    const osdp_buffer_dims d = buffer_dims(cm, &geo, 0, 0);
    memset(out, 0, sizeof *out);
    out->bytes[OSDP_PEAK_WORKSPACE] = (long long)osdp_buffer_bytes(OSDP_BUF_WORKSPACE, &d, 0);
    out->bytes[OSDP_PEAK_TP_STAGING] = (long long)osdp_buffer_bytes(OSDP_BUF_TP_STAGING, &d, 0);
    out->bytes[OSDP_PEAK_STAGE_INPUTS] = cm->stage_buffer_bytes;
}

long long osdp_cost_workspace(const osdp_cost_model *cm, int b)
{
    osdp_peak_parts w;
    osdp_cost_workspace_parts(cm, b, &w);
    return osdp_peak_parts_sum(&w);
}

void osdp_cost_op_time(const osdp_cost_model *cm, int op, int g, int k, int b, int accum, osdp_op_time *out)
{
    osdp_cost_op_time_rc(cm, op, g, k, cm->recompute && cm->recompute[op], b, accum, out);
}

/* The levels of the cost model's data group when it spans nodes of equal
 * shares on a two-level device (its gradients then reduced node-first,
 * osdp/runtime.h); 0 otherwise.  Only their reduce-scatter figures are
 * read, which cm->dev keeps whether it is the device as read or as
 * osdp_cost_device_for_mesh made it. */
static int data_levels(const osdp_cost_model *cm, osdp_cost_hierarchy *out)
{
    const int tp = cm->layout->tp_size > 0 ? cm->layout->tp_size : 1;
    return osdp_cost_hierarchy_for_mesh(cm->dev, tp, cm->geo.n_ranks, 1, out);
}

/* The reduction of G bytes of a slice's gradients over the N ranks: one
 * flat reduce-scatter, or node-first over levels h: in-node RS over R, then
 * cross RS over the N / R nodes of each rank's G / R */
static double reduce_scatter_time(const osdp_cost_model *cm, const osdp_cost_hierarchy *h, double G)
{
    if (!h) return osdp_collective_time(&cm->dev->reduce_scatter, cm->geo.n_ranks, G);
    const double R = h->node_ranks;
    return osdp_collective_time(&h->node_reduce_scatter, R, G)
         + osdp_collective_time(&h->cross_reduce_scatter, cm->geo.n_ranks / R, G / R);
}

/* One operator's time in any plan mode: g slices of which k ZDP, sharded over the N ranks, or (h, the
 * hierarchical levels: plan mode h) one slice sharded inside the node, whose node-first reduction is
 * followed by the cross all-gather that completes the node's block. */
static void op_time(const osdp_cost_model *cm, int op, int g, int k, const osdp_cost_hierarchy *h, int rc, int once,
                    int b, int accum, osdp_op_time *out)
{
    const osdp_op_layout *o = &cm->layout->op[op];
    const osdp_device *d = cm->dev;
    const double N = cm->geo.n_ranks, A = accum;
    /* the recomputed forward: a third of forward + backward (2 x forward) */
    out->compute = A * (d->gamma_fixed[o->type] + (double)b * (double)cm->layout->T * osdp_cost_op_flops(o) * d->gamma[o->type])
                 * (rc ? 4.0 / 3.0 : 1.0);
    size_t p[OSDP_MAX_SLICES];
    int partial;
    op_slices(cm, op, &g, &k, p, &partial);
    /* outside the operator's kernels: its shard's optimizer step, and zeroing
     * its full gradients every micro-step */
    if (once > g) once = g;
    double padded = 0, once_padded = 0;
    for (int s = 0; s < g; s++) padded += (double)p[s];
    for (int s = g - once; s < g; s++) once_padded += (double)p[s];
    /* reduce-once slices (the last `once`): their accumulated gradients reduced once per step, each
     * micro-step's added into them */
    out->compute += padded / N * d->step_shard_param + A * (padded + once_padded) * d->step_full_param;
    out->comm = 0;
    double gathered_once = 0, reduced_once = 0, optimizer_h = 0;   /* the per-step parts of comm and compute */
    if (h) {
        const double ranks = h->node_ranks, nodes = (double)cm->geo.n_ranks / h->node_ranks;
        const double slice = (double)osdp_cost_slice_numel(cm, op, 1);
        const double S = slice * (double)d->param_bytes, G = slice * (double)d->grad_bytes;
        /* the optimizer step on a shard of P / R instead of P / N */
        optimizer_h = slice / ranks * d->step_shard_param - slice / cm->geo.n_ranks * d->step_shard_param;
        out->compute += optimizer_h;
        const double ag = osdp_collective_time(&h->node_all_gather, ranks, S), rs = reduce_scatter_time(cm, h, G);
        const double cross_ag = osdp_collective_time(&h->cross_all_gather, nodes, G / ranks);
        out->comm = (rc ? 3 : 2) * A * ag + (once ? 1 : A) * (rs + cross_ag);
        if (once) reduced_once = rs + cross_ag;
    } else {
        osdp_cost_hierarchy levels;
        const osdp_cost_hierarchy *node_first = data_levels(cm, &levels) ? &levels : NULL;
        for (int s = 0; s < g; s++) {
            double S = (double)p[s] * (double)d->param_bytes, G = (double)p[s] * (double)d->grad_bytes;
            double ag = osdp_collective_time(&d->all_gather, N, S);
            double rs = reduce_scatter_time(cm, node_first, G);
            const double R = s >= g - once ? 1 : A;
            out->comm += s < k ? (rc ? 3 : 2) * A * ag + R * rs : ag + R * rs;
            if (s >= k) gathered_once += ag;
            if (s >= g - once) reduced_once += rs;
        }
    }
    out->step_start = out->step_end = 0;
    if (cm->kind == OSDP_COST_OVERLAP && cm->geo.prefetch) {
        out->total = out->compute > out->comm ? out->compute : out->comm;
    } else {
        out->total = out->compute + out->comm;
        out->step_start = gathered_once;
        out->step_end = reduced_once;
    }
    out->tp_comm = A * osdp_cost_tp_comm(cm, op, rc, b);
    if (out->tp_comm > 0) out->total += out->tp_comm;   /* blocking: nothing hides them (tp 1: none) */
    if (partial) out->total = 1e30;   /* not a choice this operator has: prohibitive, finite for the searches */
}

void osdp_cost_op_time_rc(const osdp_cost_model *cm, int op, int g, int k, int rc, int b, int accum, osdp_op_time *out)
{
    op_time(cm, op, g, k, NULL, rc, cm_once(cm, op), b, accum, out);
}

void osdp_cost_op_time_choice(const osdp_cost_model *cm, int op, int g, int k, int rc, int once, int b, int accum,
                              osdp_op_time *out)
{
    op_time(cm, op, g, k, NULL, rc, once, b, accum, out);
}

void osdp_cost_op_time_hier(const osdp_cost_model *cm, int op, int rc, int b, int accum, osdp_op_time *out)
{
    op_time(cm, op, 1, 1, cm->hier, rc, cm_once(cm, op), b, accum, out);   /* without levels: ZDP's */
}

int osdp_cost_hierarchy_for_mesh(const osdp_device *dev, int tp, int dp, int pp, osdp_cost_hierarchy *out)
{
    const int R = dev->ranks_per_node;
    if (!dev->internode.given || !osdp_cost_dp_spans_nodes(R, tp, dp, pp) || R % tp != 0 || ((long long)tp * dp) % R != 0)
        return 0;
    *out = (osdp_cost_hierarchy){.node_ranks = R / tp, .node_all_gather = dev->all_gather,
                                 .node_reduce_scatter = dev->reduce_scatter,
                                 .cross_all_gather = dev->internode.all_gather,
                                 .cross_reduce_scatter = dev->internode.reduce_scatter};
    return 1;
}

/* one ring all-reduce of `bytes` over n ranks: a reduce-scatter's ring steps
 * and an all-gather's, in one call (its per-call cost once: the mean of
 * the two kinds', as [tp_all_reduce]'s default is their mean) */
static double all_reduce_time(const osdp_collective_cost *rs, const osdp_collective_cost *ag, int n, double bytes)
{
    if (n <= 1) return 0;
    return (n - 1) * (rs->alpha + ag->alpha + bytes / n * (rs->beta + ag->beta)) + 0.5 * (rs->call + ag->call);
}

double osdp_cost_step_sync_time(const osdp_device *dev, int tp, int dp, int pp)
{
    const double bytes = OSDP_COST_STEP_SYNC_BYTES;
    const int two_levels = dev->internode.given;
    /* the data group's and the pipeline's at the inter-node figures when they cross nodes, else the node's
     * (osdp_cost_device_for_mesh overwrites the in-node all-gather only when a data group spans nodes, which
     * then reads the inter-node one) */
    const int dp_across = two_levels && osdp_cost_dp_spans_nodes(dev->ranks_per_node, tp, dp, pp);
    const int pp_across = two_levels && osdp_cost_pp_spans_nodes(dev->ranks_per_node, tp, dp, pp);
    double t = dp_across ? all_reduce_time(&dev->internode.reduce_scatter, &dev->internode.all_gather, dp, bytes)
                         : all_reduce_time(&dev->reduce_scatter, &dev->all_gather, dp, bytes);
    t += all_reduce_time(&dev->tp_all_reduce, &dev->tp_all_reduce, tp, bytes);   /* inside a node */
    t += pp_across ? all_reduce_time(&dev->internode.reduce_scatter, &dev->internode.all_gather, pp, bytes)
                   : all_reduce_time(&dev->reduce_scatter, &dev->all_gather, pp, bytes);
    return t;
}

double osdp_cost_step_time(const osdp_cost_model *cm_in, const osdp_plan *plan, int b, int accum)
{
    osdp_cost_model with_plan = *cm_in, *cm = &with_plan;
    with_plan.recompute = plan->recompute;
    with_plan.reduce_once = plan->reduce_once;
    double t = 0;
    for (int i = 0; i < cm->layout->n_ops; i++) {
        osdp_op_time ot;
        osdp_cost_plan_op_time(cm, plan, i, b, accum, &ot);
        t += ot.total;
    }
    const int tp = cm->layout->tp_size > 0 ? cm->layout->tp_size : 1;
    return t + osdp_cost_step_sync_time(cm->dev, tp, cm->geo.n_ranks, 1);
}

/* ---- the two-level network: which level prices the data-parallel group ---- */

int osdp_cost_tp_spans_nodes(int ranks_per_node, int tp)
{
    return ranks_per_node > 0 && tp > 1 && ranks_per_node % tp != 0;
}

int osdp_cost_dp_spans_nodes(int ranks_per_node, int tp, int dp, int pp)
{
    if (ranks_per_node <= 0 || dp <= 1) return 0;
    /* the group of stage p and tensor index t: ranks p tp dp + t + d tp, d = 0..dp-1, in increasing order, so
     * it spans nodes when its first and last rank do */
    for (int p = 0; p < pp; p++)
        for (int t = 0; t < tp; t++) {
            const long long first = (long long)p * tp * dp + t, last = first + (long long)(dp - 1) * tp;
            if (first / ranks_per_node != last / ranks_per_node) return 1;
        }
    return 0;
}

int osdp_cost_pp_boundary_spans_nodes(int ranks_per_node, int tp, int dp, int s)
{
    if (ranks_per_node <= 0) return 0;
    /* rank r of stage s sends to r + tp dp of stage s + 1 */
    const long long stride = (long long)tp * dp;
    for (long long r = stride * s; r < stride * (s + 1); r++)
        if (r / ranks_per_node != (r + stride) / ranks_per_node) return 1;
    return 0;
}

int osdp_cost_pp_spans_nodes(int ranks_per_node, int tp, int dp, int pp)
{
    for (int s = 0; s + 1 < pp; s++)
        if (osdp_cost_pp_boundary_spans_nodes(ranks_per_node, tp, dp, s)) return 1;
    return 0;
}

/* 1 when every boundary of the pipeline crosses nodes */
static int pp_all_span_nodes(int ranks_per_node, int tp, int dp, int pp)
{
    for (int s = 0; s + 1 < pp; s++)
        if (!osdp_cost_pp_boundary_spans_nodes(ranks_per_node, tp, dp, s)) return 0;
    return pp > 1;
}

void osdp_cost_device_for_mesh(const osdp_device *dev, int tp, int dp, int pp, osdp_device *out)
{
    if (out != dev) *out = *dev;
    if (!dev->internode.given) return;
    if (osdp_cost_dp_spans_nodes(dev->ranks_per_node, tp, dp, pp)) {
        osdp_cost_hierarchy levels;
        const int node_first = osdp_cost_hierarchy_for_mesh(dev, tp, dp, pp, &levels);
        out->all_gather = dev->internode.all_gather;
        /* node-first: the in-node figures stay, for the reduce-scatters' first stage */
        if (!node_first) out->reduce_scatter = dev->internode.reduce_scatter;
    }
    if (pp_all_span_nodes(dev->ranks_per_node, tp, dp, pp)) out->p2p = dev->internode.p2p;
}

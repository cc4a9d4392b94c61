/* The runtime's shards as its callers and its executor reach them
 * (osdp/runtime.h): a file of its own, so that the executor, which walks
 * them, and the runtime, which calls the executor, do not call each other. */
#include "runtime_internal.h"

int osdp_runtime_op_is_hierarchical(const osdp_runtime *rt, int op)
{
    const osdp_sched_op *so = &rt->in->sched.ops[op];
    for (int k = 0; k < so->n_slices; k++)
        if (so->slice[k].hierarchical) return 1;
    return 0;
}

osdp_shard_iter osdp_runtime_shards(const osdp_runtime *rt, int op)
{
    return (osdp_shard_iter){.rt = rt, .op = op < 0 ? 0 : op, .slice = 0,
                             .last_op = op < 0 ? rt->layout->n_ops - 1 : op};
}

int osdp_shard_next(osdp_shard_iter *it, osdp_shard_segment *seg)
{
    const struct osdp_runtime_internal *in = it->rt->in;
    /* an operator outside the rank's stage has no segment (osdp/runtime.h) */
    while (it->op <= it->last_op && (it->slice >= in->sched.ops[it->op].n_slices || !osdp_schedule_has_op(&in->sched, it->op))) {
        it->op++;
        it->slice = 0;
    }
    if (it->op > it->last_op) return 0;
    const osdp_sched_slice *ss = &in->sched.ops[it->op].slice[it->slice];
    const rt_op *o = &in->ops[it->op];
    *seg = (osdp_shard_segment){.op = it->op, .slice = it->slice, .flat_lo = o->slice[it->slice].flat_lo,
                                .flat_hi = ss->hi, .numel = osdp_sched_slice_shard_numel(ss), .local = ss->local,
                                .replica = ss->hierarchical ? it->rt->cross_rank : 0};
    seg->state[OSDP_STATE_MASTER] = o->master + ss->local;
    seg->state[OSDP_STATE_GRAD] = o->grad + ss->local;
    seg->state[OSDP_STATE_M] = o->m + ss->local;
    seg->state[OSDP_STATE_V] = o->v + ss->local;
    it->slice++;
    return 1;
}

size_t osdp_runtime_op_shard(const osdp_runtime *rt, int op, float *state[OSDP_STATE_N_KINDS])
{
    const rt_op *o = &rt->in->ops[op];
    state[OSDP_STATE_MASTER] = o->master;
    state[OSDP_STATE_GRAD] = o->grad;
    state[OSDP_STATE_M] = o->m;
    state[OSDP_STATE_V] = o->v;
    return osdp_schedule_has_op(&rt->in->sched, op) ? rt->in->sched.ops[op].shard : 0;
}

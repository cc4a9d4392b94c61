/* One operator's master weights at world rank 0 (see gather_root.h). */
#include "config.h"
#include "gather_root.h"
#include "osdp/agree.h"

#include <limits.h>

int osdp_op_stage(const osdp_runtime *rt, int op)
{
    if (rt->opt.geo.pp_size <= 1) return 0;
    /* interleaved: chunk c of P V is on stage c mod P */
    const int chunks = rt->opt.geo.pp_size * osdp_pipe_chunks_per_stage(rt->opt.geo.virtual_stages);
    return osdp_pipe_chunk_stage(rt->opt.geo.pp_size, osdp_pipe_chunk_of(rt->opt.geo.stage_bounds, chunks, op));
}

osdp_status osdp_gather_op_to_root(osdp_runtime *rt, int op, float *part, MPI_Comm comm, osdp_part_sink sink, void *ctx)
{
    const osdp_op_layout *layout = &rt->layout->op[op];
    if (layout->numel > INT_MAX)   /* the same on every rank: one MPI message per part */
        return osdp_error_set(OSDP_ERR_INPUT, "operator %s has %zu parameters per part, more than one MPI message carries",
                              layout->name, layout->numel);
    int rank;
    MPI_Comm_rank(comm, &rank);
    const int stage = osdp_op_stage(rt, op), mine = rt->opt.geo.pp_size > 1 ? rt->opt.pp_stage : 0;
    const int count = (int)layout->numel, stage_first = stage * rt->tp_size * rt->N;
    osdp_status s = OSDP_OK;
    if (stage == mine) s = osdp_runtime_gather_op(rt, op, part);
    if (rank == 0) {
        for (int t = 0; t < rt->tp_size; t++) {
            const int from = stage_first + t;   /* data index 0, tensor index t of the owning stage */
            if (from != 0) MPI_Recv(part, count, MPI_FLOAT, from, t, comm, MPI_STATUS_IGNORE);
            if (sink) sink(t, part, ctx);
        }
    } else if (stage == mine && rt->rank == 0) {   /* data index 0 of the owning stage: its part to world rank 0 */
        MPI_Send(part, count, MPI_FLOAT, 0, rt->tp_rank, comm);
    }
    return osdp_status_agree(s, comm);
}

/* train --plan auto with a pipeline: the 3D search on rank 0, its mesh,
 * stages and plan broadcast (src/cli/train_pipe_plan.h). */
#include "train_pipe_plan.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

void osdp_train_pipe_plan_free(osdp_train_pipe_plan *p)
{
    if (p->active) osdp_plan_free(&p->plan);
    p->active = 0;
}

/* rank 0: the search and its answer into out; head = {status, P, T, b, M, n_ops} */
static void search_on_root(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                           const osdp_planner_options *o, int pp, int tp, osdp_pipe_schedule schedule, int quiet,
                           osdp_train_pipe_plan *out, int *head)
{
    const osdp_3d_options o3 = {.pp = pp, .tp = tp, .schedule = schedule};
    osdp_3d_result res;
    osdp_status s = osdp_planner_3d(cfg, seq_len, dev, o, &o3, OSDP_3D_OSDP, &res);
    if (s == OSDP_OK && res.status != OSDP_OK) s = osdp_error_set(res.status, "--plan auto: %s", res.message);
    if (s == OSDP_OK) {
        const osdp_pipe_choice *c = &res.best;
        s = osdp_plan_copy(&out->plan, &c->plan);
        out->pp = c->geo.pp_size;
        out->tp = c->geo.tp_size;
        memcpy(out->bounds, c->geo.stage_bounds, sizeof(int) * (size_t)(c->geo.pp_size + 1));
        head[1] = c->geo.pp_size;
        head[2] = c->geo.tp_size;
        head[3] = c->geo.micro_batch;
        head[4] = c->geo.accum_steps;
        head[5] = c->plan.n_ops;
        if (s == OSDP_OK && !quiet) {
            char split[512];
            printf("--plan auto (3D search, %d meshes, %d stage splits in %.1f ms): PP %d x DP %d x TP %d, stages %s, "
                   "micro-batch %d x %d micro-batches, predicted step %.6g s\n", res.meshes, res.splits_planned,
                   1e3 * res.total_s, c->geo.pp_size, c->geo.n_ranks, c->geo.tp_size,
                   osdp_stage_split_format(c->geo.stage_bounds, c->geo.pp_size, split, sizeof split), c->geo.micro_batch,
                   c->geo.accum_steps, c->step_s);
            fflush(stdout);
        }
    }
    osdp_3d_result_free(&res);
    head[0] = (int)s;
}

osdp_status osdp_train_pipe_plan_choose(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                                        const osdp_planner_options *o, int pp, int tp, osdp_pipe_schedule schedule,
                                        int rank, int quiet, osdp_train_pipe_plan *out)
{
    memset(out, 0, sizeof *out);
    int head[6] = {OSDP_OK, 0, 0, 0, 0, 0};
    if (rank == 0) search_on_root(cfg, seq_len, dev, o, pp, tp, schedule, quiet, out, head);
    MPI_Bcast(head, 6, MPI_INT, 0, MPI_COMM_WORLD);
    if (head[0] != OSDP_OK) {
        if (rank == 0) return (osdp_status)head[0];
        return osdp_error_set((osdp_status)head[0], "--plan auto: the 3D search failed on rank 0");
    }
    if (rank != 0 && osdp_plan_alloc(&out->plan, head[5]) != OSDP_OK) osdp_plan_alloc(&out->plan, head[5]);
    out->pp = head[1];
    out->tp = head[2];
    out->plan.geo.micro_batch = head[3];
    out->plan.geo.accum_steps = head[4];
    out->plan.geo.tp_size = head[2];
    MPI_Bcast(out->bounds, out->pp + 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(out->plan.slices, head[5], MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(out->plan.zdp_slices, head[5], MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(out->plan.recompute, head[5], MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(out->plan.hierarchical, head[5], MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(out->plan.reduce_once, head[5], MPI_INT, 0, MPI_COMM_WORLD);
    out->active = 1;
    return OSDP_OK;
}

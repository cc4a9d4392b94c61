/* What train prints of its resolved job on rank 0 (src/cli/train_print.h). */
#include "cli/app.h"
#include "train_print.h"

#include <stdio.h>

void osdp_train_print_device_nodes(const char *path, int file_node, int node_size)
{
    printf("device %s: profiled on nodes of %d ranks; this job's nodes hold %d: its data groups are priced "
           "at the levels of this job's nodes\n", path, file_node, node_size);
}

void osdp_train_print_search(const osdp_job_resolved *job, int n_ranks)
{
    if (job->tp_chosen)
        printf("--tp auto: the planner chooses tensor-parallel degree %d of the %d ranks\n", job->tp_chosen, n_ranks);
    if (!job->searched_3d) return;
    char split[OSDP_STAGE_SPLIT_CHARS];
    const int V = osdp_pipe_chunks_per_stage(job->req.virtual_stages);   /* the chunks per stage it chose */
    printf("--plan auto (3D search, %d meshes, %d stage splits in %.1f ms): PP %d x DP %d x TP %d, stages %s, "
           "micro-batch %d x %d micro-batches, predicted step %.6g s, schedule %s", job->search_meshes,
           job->search_splits, 1e3 * job->search_s, job->search_pp, job->search_dp, job->search_tp,
           osdp_stage_split_format(job->stage_bounds, job->search_pp * V, split, sizeof split),
           job->plan.geo.micro_batch, job->plan.geo.accum_steps, job->search_step_s,
           osdp_pipe_schedule_name(job->req.pipe_schedule));
    if (V > 1) printf(" with %d chunks per stage (--virtual-stages %d)", V, V);
    printf("\n");
    fflush(stdout);
}

void osdp_train_print_mesh(const osdp_job_resolved *job)
{
    char described[96];
    const osdp_mesh *m = &job->mesh;
    printf("mesh: %s%s%s\n", osdp_mesh_describe(m, described, sizeof described), m->pp > 1 ? ", pipeline schedule " : "",
           m->pp > 1 ? osdp_pipe_schedule_name(job->req.pipe_schedule) : "");
    fflush(stdout);
}

void osdp_train_print_resume(const osdp_job_resolved *job)
{
    if (!job->req.resumed || job->req.evaluating) return;
    printf("resume: global batch %d, cosine horizon %ld steps, sequences of %d tokens%s%s\n", job->global_batch,
           job->total_steps, job->seq_len, job->resume_changes[0] ? "" : " (as saved)", job->resume_changes);
    fflush(stdout);
}

void osdp_train_print_plan(const osdp_job_resolved *job)
{
    if (job->embedding_tied) printf("--plan zdp: the embedding stays DP (the head is tied to its wte)\n");
    if (job->planned)
        osdp_plan_print(&job->layout, &job->planner_device, &job->planner_options, &job->planner_result);
}

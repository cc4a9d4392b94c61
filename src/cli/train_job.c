/* train's options as the library's job request, and train's cross-option
 * rules (src/cli/train_job.h). */
#include "train_job.h"
#include "eval.h"
#include "osdp/compute.h"
#include "osdp/memory.h"

#include <stdio.h>

#include <string.h>

int osdp_train_virtual_stages(const osdp_job *job)
{
    return job->pipe_schedule == OSDP_PIPE_INTERLEAVED && job->virtual_stages > 1 ? (int)job->virtual_stages : 1;
}

/* the pipeline's options (--pp, --stages, --schedule) against the others */
static osdp_status check_pipeline_options(const osdp_job *job, int plan_auto)
{
    if (job->pp == OSDP_PP_AUTO && !plan_auto)
        return osdp_error_set(OSDP_ERR_INPUT, "--pp auto needs --plan auto (the 3D search chooses the stages); give "
                              "--pp P with --plan %s", job->plan);
    if (job->pp == 1) {
        if (job->stages) return osdp_error_set(OSDP_ERR_INPUT, "--stages needs --pp P with P > 1 (the pipeline's stages)");
        if (osdp_option_given(job, "schedule"))
            return osdp_error_set(OSDP_ERR_INPUT, "--schedule needs --pp P with P > 1 (it orders the pipeline's passes)");
        if (osdp_option_given(job, "virtual-stages"))
            return osdp_error_set(OSDP_ERR_INPUT, "--virtual-stages needs --pp P with P > 1 and --schedule interleaved");
        return OSDP_OK;
    }
    if (job->virtual_stages > 1 && job->pipe_schedule != OSDP_PIPE_INTERLEAVED)
        return osdp_error_set(OSDP_ERR_INPUT, "--virtual-stages %lld needs --schedule interleaved (%s runs one chunk per "
                              "stage)", job->virtual_stages, osdp_pipe_schedule_name((osdp_pipe_schedule)job->pipe_schedule));
    if (plan_auto) {   /* the 3D search: the stages, micro-batch and M for the global batch */
        if (job->stages)
            return osdp_error_set(OSDP_ERR_INPUT, "--stages with --plan auto: the 3D search chooses the split; give a "
                                  "plan file or --plan dp / zdp to train on these stages");
        return OSDP_OK;   /* the global batch: --global-batch or the checkpoint's (osdp_job_resolve) */
    }
    if (job->tp == OSDP_TP_AUTO)
        return osdp_error_set(OSDP_ERR_INPUT, "--tp auto does not plan with --pp %lld: give --tp T", job->pp);
    return OSDP_OK;
}

/* cross-option rules of train (each value alone was checked by the options table) */
osdp_status osdp_train_check_options(const osdp_job *job)
{
    if (job->command == OSDP_CMD_EVAL) {
        osdp_status s = osdp_eval_check_options(job);
        if (s != OSDP_OK) return s;
    }
    int plan_auto = strcmp(job->plan, "auto") == 0;
    int plan_mode = plan_auto || !strcmp(job->plan, "dp") || !strcmp(job->plan, "zdp");
    if (job->split == OSDP_SPLIT_AUTO && !plan_auto)
        return osdp_error_set(OSDP_ERR_INPUT, "--split auto needs --plan auto (the planner chooses the granularity)");
    if (job->split > 1 && !plan_mode)
        return osdp_error_set(OSDP_ERR_INPUT, "--split %lld applies to --plan auto, dp or zdp; a plan file gives k/g per operator",
                              job->split);
    if (job->recompute == OSDP_RECOMPUTE_AUTO && !plan_auto)
        return osdp_error_set(OSDP_ERR_INPUT, "--recompute auto needs --plan auto (the planner chooses where)");
    osdp_dtype residual;
    const osdp_dtype weights = osdp_job_weights(job);
    char weights_from[64];
    if (osdp_option_given(job, "precision")) snprintf(weights_from, sizeof weights_from, "--precision");
    else snprintf(weights_from, sizeof weights_from, "--backend %s's default --precision",
                  osdp_option_word("backend", job->backend));
    osdp_status rs = osdp_job_residual(job, weights, weights_from, &residual);
    if (rs != OSDP_OK) return rs;
    osdp_model_config acts = {0};
    if ((rs = osdp_job_activations(job, weights, weights_from, &acts)) != OSDP_OK) return rs;
    if (job->tp == OSDP_TP_AUTO && !plan_auto)
        return osdp_error_set(OSDP_ERR_INPUT, "--tp auto needs --plan auto (the planner chooses the tensor-parallel "
                              "degree); give --tp T with --plan %s", job->plan);
    return check_pipeline_options(job, plan_auto);
}

void osdp_train_request(const osdp_job *job, int node_size, int rank_node_size, int nodes_emulated,
                        int pad_quantum, int vocab_quantum, osdp_job_request *req)
{
    memset(req, 0, sizeof *req);
    req->tp = (int)job->tp;
    req->pp = (int)job->pp;
    req->node_size = node_size;
    req->rank_node_size = rank_node_size;
    req->nodes_emulated = nodes_emulated;
    req->pipe_schedule = (osdp_pipe_schedule)job->pipe_schedule;
    req->virtual_stages = osdp_train_virtual_stages(job);
    req->schedule_auto = !osdp_option_given(job, "schedule") && !osdp_option_given(job, "virtual-stages");
    req->stages = job->stages;
    req->plan = job->plan;
    req->split = job->split > 0 ? (int)job->split : 1;
    req->split_auto = job->split == OSDP_SPLIT_AUTO;
    req->recompute_all = job->recompute == OSDP_RECOMPUTE_ALL;
    req->recompute_auto = job->recompute == OSDP_RECOMPUTE_AUTO;
    req->grad_reduce = (osdp_grad_reduce)job->grad_reduce;
    req->mem_limit = job->mem_limit;
    req->prefetch = !job->no_prefetch;
    req->cost = (osdp_cost_kind)job->cost_model;
    req->offer_hierarchical = !job->no_hierarchical;
    req->seq_len = (int)job->seq_len;
    req->batch = osdp_option_given(job, "batch") ? (int)job->batch : 0;
    req->global_batch = (int)job->global_batch;
    req->total_steps = job->lr_steps ? (long)job->lr_steps : job->steps > 0 ? (long)job->steps : 1;
    req->lr_steps_given = job->lr_steps != 0;
    req->seed_given = osdp_option_given(job, "seed");
    req->seed = (unsigned long long)job->seed;
    req->evaluating = job->command == OSDP_CMD_EVAL;
    req->weights = osdp_job_weights(job);
    req->residual = job->residual_dtype == OSDP_RESIDUAL_BF16 ? OSDP_BFLOAT16 : OSDP_FLOAT32;   /* checked */
    req->pad_quantum = pad_quantum;
    req->vocab_quantum = vocab_quantum;
}

osdp_status osdp_train_model(const osdp_job *job, osdp_model_config *cfg)
{
    osdp_status s = job->command == OSDP_CMD_EVAL ? osdp_eval_model(job, cfg) : osdp_model_config_load(cfg, job->model);
    if (s != OSDP_OK) return s;
    /* bf16 activations: checked with the options (osdp_train_check_options) */
    if ((s = osdp_job_activations(job, osdp_job_weights(job), "--precision", cfg)) != OSDP_OK) return s;
    /* the kernels run: any weight type's table of the backend has the same */
    return osdp_job_apply_kernels(job, osdp_compute_find(osdp_option_word("backend", job->backend), OSDP_FLOAT32), cfg);
}

/* The checkpoint --resume loaded must be the one the run was set up from
 * (osdp_job_resolve read it before the plan): --resume-fallback may have gone
 * back to an older save of another geometry. */
osdp_status osdp_train_check_resumed(const osdp_train_ckpt *ckpt, const osdp_job *job, const osdp_job_resolved *r)
{
    const osdp_ckpt_info *in = &ckpt->loaded;
    if (!ckpt->resume) return OSDP_OK;
    const char *what = in->seq_len != r->layout.T ? "sequence length"
                     : !job->global_batch && in->global_batch != r->plan.geo.micro_batch * r->plan.geo.accum_steps * r->mesh.dp ? "global batch"
                     : !job->lr_steps && in->optim.total_steps != r->total_steps ? "cosine horizon" : NULL;
    if (!what) return OSDP_OK;
    return osdp_error_set(OSDP_ERR_INPUT, "--resume: the checkpoint loaded (step %ld) has another %s than the one the run "
                          "was set up from (--resume-fallback went back past a change): resume from that save by name",
                          in->step, what);
}

/* The runtime's memory limit on a GPU (issue 30), once every communicator is
 * made and warmed up: what the card has free less a margin
 * (osdp_memory_device_limit), or --mem-limit where that is smaller.  A plan
 * whose predicted peak does not fit is refused on every rank before the
 * runtime allocates (the planner's device file may promise more than the card
 * has left after NCCL).  On the CPU the limit is --mem-limit's (emulated). */
osdp_status osdp_train_device_mem_limit(const osdp_compute_backend *be, const osdp_job *job,
                                        const osdp_memory_prediction *predicted, int rank, size_t *limit)
{
    size_t free_bytes = 0;
    int capped = 0;
    osdp_status s = osdp_memory_device_limit(be, (size_t)job->mem_limit, limit, &capped, &free_bytes);
    if (s != OSDP_OK || !capped) return s;
    char need[32], have[32], lim[32], margin[32];
    osdp_format_bytes((double)predicted->peak_total, need, sizeof need);
    osdp_format_bytes((double)free_bytes, have, sizeof have);
    osdp_format_bytes((double)*limit, lim, sizeof lim);
    osdp_format_bytes((double)OSDP_DEVICE_MEM_MARGIN, margin, sizeof margin);
    if (predicted->peak_total > *limit)
        return osdp_error_set(OSDP_ERR_OOM, "the plan needs %s of GPU memory on this rank, and the GPU has %s free after the "
                              "communicators' set-up and warm-up, of which the runtime may use %s (%s kept for cuBLAS's "
                              "workspace, scratch and fragmentation): plan with --mem-limit %s (--plan auto), a smaller "
                              "--batch, or more ranks", need, have, lim, margin, lim);
    if (rank == 0 && !job->quiet)
        printf("GPU memory: %s free after the communicators' warm-up: the runtime's limit is %s (the plan needs %s)\n",
               have, lim, need);
    return OSDP_OK;
}

/* What `plan` plans with: the planner's options, the model and the device
 * file of the job (src/cli/plan_inputs.h). */
#include "config.h"
#include "cli/app.h"
#include "osdp/link_emulation.h"
#include "plan_inputs.h"

#include <stdio.h>

void osdp_plan_options_from_job(const osdp_job *job, osdp_planner_options *o)
{
    osdp_planner_defaults(o);
    o->geo.n_ranks = (int)job->ranks;
    o->mem_limit = job->mem_limit;
    o->global_batch = (int)job->global_batch;
    o->geo.micro_batch = (int)job->batch;
    o->max_micro_batch = (int)job->max_batch;
    o->split = job->split > 0 ? (int)job->split : 1;
    o->split_auto = job->split == OSDP_SPLIT_AUTO;
    o->search = (osdp_search_kind)job->search;
    o->cost = (osdp_cost_kind)job->cost_model;
    o->dfs_time_limit_s = job->dfs_limit;
    o->geo.prefetch = !job->no_prefetch;
    o->recompute_auto = job->recompute == OSDP_RECOMPUTE_AUTO;
    o->grad_reduce = (osdp_grad_reduce)job->grad_reduce;
    o->offer_hierarchical = !job->no_hierarchical;
}

/* --nodes K, --ranks-per-node R and --emulate-link: the two levels of the
 * network of n_ranks ranks, over the device file's */
static osdp_status network_from_job(const osdp_job *job, int n_ranks, osdp_device *dev)
{
    long long per_node = job->ranks_per_node;
    if (job->nodes) {
        if (n_ranks % job->nodes != 0)
            return osdp_error_set(OSDP_ERR_INPUT, "--nodes %lld does not divide the %d ranks (--ranks): the nodes hold "
                                  "ranks / K ranks each", job->nodes, n_ranks);
        if (per_node && per_node != n_ranks / job->nodes)
            return osdp_error_set(OSDP_ERR_INPUT, "--nodes %lld and --ranks-per-node %lld disagree: %d ranks on %lld nodes "
                                  "are %lld per node", job->nodes, per_node, n_ranks, job->nodes, n_ranks / job->nodes);
        per_node = n_ranks / job->nodes;
    }
    if (job->emulate_link && !per_node)
        return osdp_error_set(OSDP_ERR_INPUT, "--emulate-link %s needs --nodes K or --ranks-per-node R (which ranks "
                              "share a node)", job->emulate_link);
    if (!per_node) return OSDP_OK;
    osdp_link_emulation e;
    osdp_status s = osdp_link_emulation_parse(&e, per_node, job->emulate_link, n_ranks);
    if (s == OSDP_OK) osdp_emulation_to_device(&e, dev);
    return s;
}

void osdp_plan_load_inputs(const osdp_job *job, osdp_planner_options *o, osdp_model_config *cfg, osdp_device *dev)
{
    osdp_plan_options_from_job(job, o);
    osdp_status s;
    if ((s = osdp_model_config_load(cfg, job->model)) != OSDP_OK) osdp_fatal(s, osdp_error_message());
    if ((s = osdp_job_apply_kernels(job, NULL, cfg)) != OSDP_OK) osdp_fatal(s, osdp_error_message());
    if ((s = osdp_job_check_seq_len(job, cfg->ctx)) != OSDP_OK) osdp_fatal(s, osdp_error_message());
    if ((s = osdp_device_load(dev, job->device)) != OSDP_OK) osdp_fatal(s, osdp_error_message());
    if ((s = network_from_job(job, (int)job->ranks, dev)) != OSDP_OK) osdp_fatal(s, osdp_error_message());
    /* the device's precision gives the weights the plan is for */
    char weights_from[300];
    snprintf(weights_from, sizeof weights_from, "--device %s (param_bytes %d)", job->device, dev->param_bytes);
    const osdp_dtype weights = dev->param_bytes == 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32;
    s = osdp_job_residual(job, weights, weights_from, &o->geo.residual_dtype);
    if (s == OSDP_OK) s = osdp_job_activations(job, weights, weights_from, cfg);
    if (s != OSDP_OK) osdp_fatal(s, osdp_error_message());
}

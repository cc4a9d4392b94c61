/* A training job resolved: mesh, batch geometry, plan and stages, the same
 * on every rank (osdp/job.h). */
#include "osdp/job.h"
#include "osdp/agree.h"
#include "osdp/pipeline_cost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int osdp_job_device_for_run(osdp_device *dev, osdp_dtype weights, int node_size, int world_size)
{
    /* the plan must count the runtime's element sizes whatever the file gives (`plan` keeps the file's: it
     * also answers what-if questions such as the paper's fp16 setting): the runtime gathers weights of
     * --precision and holds and reduces gradients and activations in fp32 (osdp/runtime.h) */
    dev->param_bytes = (int)osdp_dtype_size(weights);
    dev->grad_bytes = dev->act_bytes = (int)sizeof(float);
    /* two levels in the file, and more than one node in its view or the job's: the nodes decide the price */
    if (dev->internode.given && node_size > 0 && dev->ranks_per_node != node_size &&
        (world_size > node_size || world_size > dev->ranks_per_node)) {
        dev->ranks_per_node = node_size;
        return 1;
    }
    return 0;
}

osdp_status osdp_plan_broadcast(osdp_plan *plan, osdp_status root_status, int root, MPI_Comm comm)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    osdp_status s = osdp_status_agree(rank == root ? root_status : OSDP_OK, comm);
    if (s != OSDP_OK) return s;
    int head[4] = {plan->n_ops, plan->geo.micro_batch, plan->geo.accum_steps, plan->geo.tp_size};
    MPI_Bcast(head, 4, MPI_INT, root, comm);
    s = osdp_status_agree(rank == root ? OSDP_OK : osdp_plan_alloc(plan, head[0]), comm);
    if (s != OSDP_OK) {
        if (rank != root) osdp_plan_free(plan);
        return s;
    }
    plan->geo.micro_batch = head[1];
    plan->geo.accum_steps = head[2];
    plan->geo.tp_size = head[3];
    int *const fields[] = {plan->slices, plan->zdp_slices, plan->recompute, plan->hierarchical, plan->reduce_once};
    for (size_t f = 0; f < sizeof fields / sizeof *fields; f++) MPI_Bcast(fields[f], head[0], MPI_INT, root, comm);
    return OSDP_OK;
}

/* What the request fixes of the step's geometry before the plan, over n_ranks data-parallel ranks */
static osdp_step_geometry request_geometry(const osdp_job_request *req, int n_ranks)
{
    return (osdp_step_geometry){.n_ranks = n_ranks, .pad_quantum = req->pad_quantum, .prefetch = req->prefetch,
                                .residual_dtype = req->residual};
}

/* The planner's options of the request over n_ranks ranks (the batch and the paddings are the caller's);
 * --recompute all's flags per operator of `layout` into *all (the caller frees it) */
static void planner_options_of(const osdp_job_request *req, const osdp_layout *layout, int n_ranks,
                               osdp_planner_options *o, int **all)
{
    osdp_planner_defaults(o);
    o->geo = request_geometry(req, n_ranks);
    o->mem_limit = req->mem_limit;
    o->cost = req->cost;
    o->split = req->split > 0 ? req->split : 1;
    o->split_auto = req->split_auto;
    o->recompute_auto = req->recompute_auto;
    o->grad_reduce = req->grad_reduce;
    o->offer_hierarchical = req->offer_hierarchical;
    *all = NULL;
    if (req->recompute_all && (*all = calloc((size_t)layout->n_ops, sizeof **all)) != NULL) {
        for (int i = 0; i < layout->n_ops; i++) (*all)[i] = osdp_op_can_recompute(layout->op[i].type);
        o->recompute = *all;
    }
}

/* the device file, or why it could not be read */
static osdp_status need_device(const osdp_job_request *req)
{
    if (req->device) return OSDP_OK;
    return osdp_error_set(req->device_status != OSDP_OK ? req->device_status : OSDP_ERR_INTERNAL, "%s",
                          req->device_error ? req->device_error : "no device file");
}

/* rank 0's search of the mesh: --plan auto with a pipeline (the 3D search: mesh, stages, b, M and plan
 * into out), else --tp auto (the degree into out->tp_chosen); *tp, *pp the answer */
static osdp_status search_mesh(const osdp_job_request *req, const osdp_model_config *cfg, int n_ranks,
                               osdp_job_resolved *out, int *tp, int *pp)
{
    /* the 3D search splits the global batch into b x M on a mesh it chooses, so the default of
     * resolve_geometry (a micro-batch x the data-parallel ranks) is not known before it: --global-batch,
     * else the checkpoint's (a resume, eval --ckpt), as resolve_geometry then takes it */
    const int global_batch = req->global_batch ? req->global_batch
                           : req->resumed ? (int)req->resumed->global_batch : 0;
    if (req->pp != 1 && global_batch <= 0)
        return osdp_error_set(OSDP_ERR_INPUT, "--plan auto with a pipeline (--pp) needs --global-batch G: the sequences "
                              "per step that the search splits into micro-batches%s",
                              req->evaluating ? " (eval --ckpt takes the training run's from a checkpoint; "
                                                "--init-from takes none)" : "");
    osdp_status s = need_device(req);
    if (s != OSDP_OK) return s;
    const osdp_device *dev = req->device;
    const int seq_len = req->seq_len > 0 && req->seq_len <= cfg->ctx ? req->seq_len : cfg->ctx;
    osdp_layout whole;
    if ((s = osdp_layout_build(&whole, cfg, seq_len)) != OSDP_OK) return s;
    osdp_planner_options o;
    int *all;
    planner_options_of(req, &whole, n_ranks, &o, &all);
    o.global_batch = global_batch;
    o.geo.micro_batch = req->batch;
    o.vocab_quantum = req->vocab_quantum;
    if (req->pp != 1) {   /* the 3D search: the stages, micro-batch and M for the global batch */
        /* the schedule as asked (interleaved without --virtual-stages: V searched), or chosen with V */
        const osdp_3d_options o3 = {.pp = req->pp, .tp = req->tp, .schedule = req->pipe_schedule,
                                    .virtual_stages = req->schedule_auto ? OSDP_3D_V_AUTO : req->virtual_stages};
        osdp_3d_result res;
        s = osdp_planner_3d(cfg, seq_len, dev, &o, &o3, OSDP_3D_OSDP, &res);
        if (s == OSDP_OK && res.status != OSDP_OK) s = osdp_error_set(res.status, "--plan auto: %s", res.message);
        if (s == OSDP_OK && (s = osdp_plan_copy(&out->plan, &res.best.plan)) == OSDP_OK) {
            const osdp_pipe_choice *c = &res.best;
            out->have_plan = 1;
            out->plan.geo.micro_batch = c->geo.micro_batch;
            out->plan.geo.accum_steps = c->geo.accum_steps;
            out->plan.geo.tp_size = c->geo.tp_size;
            *pp = c->geo.pp_size;
            *tp = c->geo.tp_size;
            out->req.pipe_schedule = c->geo.pipe_schedule;
            out->req.virtual_stages = c->geo.pipe_schedule == OSDP_PIPE_INTERLEAVED ? c->geo.virtual_stages : 1;
            memcpy(out->stage_bounds, c->geo.stage_bounds, sizeof(int) * (size_t)(c->geo.pp_size * out->req.virtual_stages + 1));
            out->searched_3d = 1;
            out->search_meshes = res.meshes;
            out->search_splits = res.splits_planned;
            out->search_s = res.total_s;
            out->search_step_s = c->step_s;
            out->search_pp = c->geo.pp_size;
            out->search_dp = c->geo.n_ranks;
            out->search_tp = c->geo.tp_size;
        }
        osdp_3d_result_free(&res);
    } else {   /* --tp auto: the divisors of the rank count that divide the heads and fit a node */
        osdp_mesh_choice choice = {.best = -1};
        s = osdp_planner_mesh(cfg, seq_len, dev, &o, OSDP_TP_AUTO, &choice);
        if (s == OSDP_OK) *tp = out->tp_chosen = choice.cand[choice.best].geo.tp_size;
        osdp_mesh_choice_free(&choice);
    }
    free(all);
    osdp_layout_free(&whole);
    return s;
}

/* The mesh: --tp / --pp, or rank 0's search of them broadcast (with the 3D search's stages and plan) */
static osdp_status resolve_mesh(const osdp_job_request *req, const osdp_model_config *cfg, MPI_Comm world,
                                osdp_job_resolved *out, int *tp, int *pp)
{
    int rank, size;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    *tp = req->tp;
    *pp = req->pp;
    const int three_d = strcmp(req->plan, "auto") == 0 && req->pp != 1;
    if (!three_d && req->tp != OSDP_TP_AUTO) return OSDP_OK;
    osdp_status s = rank == 0 ? search_mesh(req, cfg, size, out, tp, pp) : OSDP_OK;
    int head[4 + OSDP_MAX_CHUNKS + 1] = {*tp, *pp, (int)out->req.pipe_schedule, out->req.virtual_stages};
    memcpy(head + 4, out->stage_bounds, sizeof out->stage_bounds);
    if (!three_d) {
        s = osdp_status_agree(s, world);
        if (s != OSDP_OK) return s;
        MPI_Bcast(head, 2, MPI_INT, 0, world);
    } else {   /* the 3D search's plan, with its mesh and stages */
        s = osdp_plan_broadcast(&out->plan, s, 0, world);
        if (s != OSDP_OK) return s;
        out->have_plan = out->searched_3d = 1;
        MPI_Bcast(head, (int)(sizeof head / sizeof *head), MPI_INT, 0, world);
        memcpy(out->stage_bounds, head + 4, sizeof out->stage_bounds);
        out->req.pipe_schedule = (osdp_pipe_schedule)head[2];   /* the search's schedule and V */
        out->req.virtual_stages = head[3];
    }
    *tp = head[0];
    *pp = head[1];
    return OSDP_OK;
}

/* The batch geometry and the cosine horizon from the request; on a resume the checkpoint's global batch,
 * horizon and sequence length unless the options say otherwise (out->resume_changes: what changes).  A
 * resume with another --seq-len is refused: the data position counts sequences of the checkpoint's
 * length, so the run would not continue the same stream. */
static osdp_status resolve_geometry(const osdp_job_request *req, int dp_ranks, osdp_job_resolved *out)
{
    const int plan_auto = strcmp(req->plan, "auto") == 0;
    out->seq_len = req->seq_len;
    out->geo.micro_batch = req->batch ? req->batch : plan_auto ? 0 : OSDP_JOB_DEFAULT_MICRO_BATCH;
    /* the global batch is a training hyperparameter (it shapes the loss curve), the micro-batch a
     * systems choice: without --global-batch a run takes (--batch or 8) x data-parallel ranks sequences
     * per step (the ranks of a tensor-parallel group share their sequences), which --plan auto splits
     * into micro-batch x accumulation */
    out->global_batch = req->global_batch ? req->global_batch
                                          : (req->batch ? req->batch : OSDP_JOB_DEFAULT_MICRO_BATCH) * dp_ranks;
    out->total_steps = req->total_steps;
    const osdp_ckpt_info *resumed = req->resumed;
    if (!resumed) return OSDP_OK;
    if (req->seq_len && req->seq_len != resumed->seq_len && !req->evaluating)
        return osdp_error_set(OSDP_ERR_INPUT, "--seq-len %d: the checkpoint %s was trained on sequences of %d tokens; a resume "
                              "continues that run (leave --seq-len out); --init-from starts a new run from its weights",
                              req->seq_len, req->resumed_path, resumed->seq_len);
    if (req->seed_given && req->seed != resumed->seed)
        return osdp_error_set(OSDP_ERR_INPUT, "--seed %lld: the checkpoint %s was trained with seed %llu, which a resume "
                              "keeps (its data order and RNG state): leave --seed out; --init-from starts a new run "
                              "from its weights with a new seed", (long long)req->seed, req->resumed_path, resumed->seed);
    out->seq_len = req->evaluating && req->seq_len ? req->seq_len : resumed->seq_len;
    char *changes = out->resume_changes;
    const size_t n = sizeof out->resume_changes;
    size_t at = 0;
    if (!req->global_batch) {
        out->global_batch = (int)resumed->global_batch;
        /* without --batch, the checkpoint's micro-batch when it still fits the rank count, else one
         * micro-step per optimizer step */
        if (out->geo.micro_batch && !req->batch) {
            int saved = resumed->geo.micro_batch;
            out->geo.micro_batch = saved > 0 && out->global_batch % (saved * dp_ranks) == 0 ? saved
                             : out->global_batch % dp_ranks == 0 ? out->global_batch / dp_ranks : out->geo.micro_batch;
        }
    } else if (req->global_batch != resumed->global_batch)
        at += (size_t)snprintf(changes + at, n - at, "; global batch %ld -> %d (--global-batch)", resumed->global_batch,
                               req->global_batch);
    if (!req->lr_steps_given) out->total_steps = resumed->optim.total_steps;
    else if (req->total_steps != resumed->optim.total_steps && at < n)
        at += (size_t)snprintf(changes + at, n - at, "; cosine horizon %ld -> %ld steps (--lr-steps)",
                               resumed->optim.total_steps, req->total_steps);
    return OSDP_OK;
}

/* --plan auto, flat: rank 0 plans (device file, --mem-limit, the global batch and --batch when given)
 * into out->plan and keeps the planner's answer for the caller's report */
static osdp_status plan_on_root(const osdp_job_request *req, int dp_ranks, osdp_job_resolved *out)
{
    osdp_status s = need_device(req);
    if (s != OSDP_OK) return s;
    const osdp_layout *layout = &out->layout;
    osdp_planner_options *o = &out->planner_options;
    planner_options_of(req, layout, dp_ranks, o, &out->recompute_all);
    o->global_batch = out->global_batch;
    o->geo.micro_batch = out->geo.micro_batch;
    osdp_device *dev = &out->planner_device;
    *dev = *req->device;
    /* two levels whose data group spans nodes: mode h offered (not --no-hierarchical) */
    o->hierarchy = osdp_planner_hierarchy(o, dev, layout->tp_size, dp_ranks, 1, &out->planner_hierarchy);
    osdp_cost_device_for_mesh(dev, layout->tp_size, dp_ranks, 1, dev);   /* the DP group's level */
    out->planned = 1;
    s = osdp_planner_run(layout, dev, o, &out->planner_result);
    if (s == OSDP_OK && (s = osdp_plan_copy(&out->plan, &out->planner_result.plan)) == OSDP_OK) out->have_plan = 1;
    return s;
}

/* --split G on an all-DP / all-ZDP plan, --recompute all and --grad-reduce once / every on any plan */
static void plan_apply_options(osdp_plan *plan, const osdp_layout *layout, const osdp_job_request *req, int uniform)
{
    for (int i = 0; i < layout->n_ops; i++) {
        const osdp_op_layout *op = &layout->op[i];
        if (uniform && req->split > 1 && osdp_op_can_split(op)) {   /* the embedding, a tied head cannot be split */
            plan->zdp_slices[i] = plan->zdp_slices[i] ? req->split : 0;
            plan->slices[i] = req->split;
        }
        /* once: every slice (osdp/plan.h) */
        if (req->grad_reduce != OSDP_GRAD_REDUCE_AUTO)
            plan->reduce_once[i] = req->grad_reduce == OSDP_GRAD_REDUCE_ONCE ? plan->slices[i] : 0;
        if (req->recompute_all) plan->recompute[i] = osdp_op_can_recompute(op->type);
    }
}

/* The plan of --plan, with the batch geometry in it: the planner's micro-batch and accumulation under
 * --plan auto, else --batch (or 8) and the accumulation that makes the global batch.  The plan's choices
 * apply to this rank's tensor-parallel parts, sharded over the data-parallel ranks. */
static osdp_status resolve_plan(const osdp_job_request *req, MPI_Comm world, osdp_job_resolved *out)
{
    const osdp_mesh *mesh = &out->mesh;
    const osdp_layout *layout = &out->layout;
    osdp_plan *plan = &out->plan;
    if (out->searched_3d)   /* the 3D search's, b and M in it */
        return plan->n_ops == layout->n_ops ? OSDP_OK
             : osdp_error_set(OSDP_ERR_INTERNAL, "--plan auto: the 3D search planned %d operators, the layout has %d",
                              plan->n_ops, layout->n_ops);
    const int dp_ranks = mesh->dp;
    if (out->geo.micro_batch && out->global_batch % (out->geo.micro_batch * dp_ranks) != 0)
        return osdp_error_set(OSDP_ERR_INPUT, "%s %d is not a multiple of --batch %d x %d %sranks = %d%s",
                              req->global_batch ? "--global-batch" : "the global batch", out->global_batch,
                              out->geo.micro_batch, dp_ranks, mesh->tp > 1 ? "data-parallel " : "",
                              out->geo.micro_batch * dp_ranks,
                              req->global_batch ? "" : " (give --global-batch, or a --batch that divides it)");
    const char *spec = req->plan;
    osdp_status s;
    if (strcmp(spec, "auto") == 0) {
        s = mesh->world_rank == 0 ? plan_on_root(req, dp_ranks, out) : OSDP_OK;
        s = osdp_plan_broadcast(plan, s, 0, world);
        if (s == OSDP_OK) {
            out->have_plan = 1;
            plan->geo.tp_size = mesh->tp;
        }
        return s;
    }
    if (strcmp(spec, "dp") == 0 || strcmp(spec, "zdp") == 0) {
        s = osdp_plan_alloc(plan, layout->n_ops);
        if (s == OSDP_OK) osdp_plan_fill(plan, strcmp(spec, "zdp") == 0);
        if (s == OSDP_OK) plan_apply_options(plan, layout, req, 1);
        if (s == OSDP_OK) out->embedding_tied = osdp_plan_tie_embedding(plan, layout);
    } else {
        s = osdp_plan_load(plan, layout, spec);
        if (s == OSDP_OK) plan_apply_options(plan, layout, req, 0);
    }
    if (s == OSDP_OK && (s = osdp_plan_check_tp(plan, mesh->tp, spec)) != OSDP_OK) {
        osdp_plan_free(plan);
        return s;
    }
    if (s == OSDP_OK) {
        out->have_plan = 1;
        plan->geo.tp_size = mesh->tp;
        plan->geo.micro_batch = out->geo.micro_batch;
        plan->geo.accum_steps = out->global_batch / (out->geo.micro_batch * dp_ranks);
    }
    return s;
}

/* The pipeline's stages: the 3D search's, --stages, else the contiguous split that balances the cost
 * model's operator times under the plan (the device file; without one, the operators' FLOPs).  Every
 * rank computes the same from the same inputs. */
static osdp_status stage_split(const osdp_job_request *req, osdp_job_resolved *out)
{
    if (out->searched_3d) return OSDP_OK;   /* the 3D search's, broadcast */
    const osdp_layout *layout = &out->layout;
    const osdp_plan *plan = &out->plan;
    /* interleaved: P V chunks, split as P V stages would be */
    const int P = out->mesh.pp * req->virtual_stages;
    if (req->stages) return osdp_chunk_split_parse(req->stages, layout->n_ops, out->mesh.pp, req->virtual_stages,
                                                   out->stage_bounds);
    if (req->device) {
        osdp_cost_model cm;
        const osdp_step_geometry geo = request_geometry(req, out->mesh.dp);
        osdp_cost_model_init(&cm, layout, req->device, &geo, req->cost, NULL);
        return osdp_planner_stage_split(&cm, plan, plan->geo.micro_batch, plan->geo.accum_steps, P, out->stage_bounds);
    }
    double *op_flops = malloc(sizeof *op_flops * (size_t)layout->n_ops);
    if (!op_flops) return osdp_error_set(OSDP_ERR_OOM, "--pp: out of host memory");
    for (int i = 0; i < layout->n_ops; i++) op_flops[i] = osdp_cost_op_flops(&layout->op[i]);
    osdp_status s = osdp_stage_split_balanced(op_flops, layout->n_ops, P, out->stage_bounds);
    free(op_flops);
    return s;
}

/* every rank's stages the same (each balanced them with its own device file) */
static osdp_status check_same_split(const osdp_job_resolved *out, MPI_Comm world)
{
    uint64_t hash = 14695981039346656037ULL;   /* FNV-1a over the bounds */
    for (int b = 0; b <= out->mesh.pp * out->req.virtual_stages; b++)
        hash = (hash ^ (uint64_t)out->stage_bounds[b]) * 1099511628211ULL;
    uint64_t root = hash;
    MPI_Bcast(&root, 1, MPI_UINT64_T, 0, world);
    if (root == hash) return OSDP_OK;
    return osdp_error_set(OSDP_ERR_INPUT, "this rank's pipeline stage split (--stages, or the --device file it is "
                          "balanced by) differs from rank 0's (hash %016llx vs %016llx): every rank must read the "
                          "same inputs", (unsigned long long)hash, (unsigned long long)root);
}

/* A tensor-parallel group (tp consecutive ranks) sits inside one node, as `plan` requires: its
 * all-reduces after every row-parallel product would otherwise cross the slow link (each rank checks
 * its own node) */
static osdp_status check_tp_inside_node(const osdp_job_request *req, int world_size, int tp)
{
    /* a tp that does not divide the ranks: the mesh says so, naming them */
    const int node = req->rank_node_size;
    if (world_size % tp != 0 || !osdp_cost_tp_spans_nodes(node, tp)) return OSDP_OK;
    return osdp_error_set(OSDP_ERR_INPUT, "--tp %d: a tensor-parallel group must sit inside one node, and this job's "
                          "nodes hold %d rank%s%s: give a --tp that divides the ranks per node", tp, node,
                          node == 1 ? "" : "s", req->nodes_emulated ? " (--ranks-per-node)" : "");
}

osdp_status osdp_job_resolve(const osdp_job_request *req, const osdp_model_config *cfg, MPI_Comm world,
                             osdp_job_resolved *out)
{
    memset(out, 0, sizeof *out);
    out->req = *req;
    int size, tp, pp;
    MPI_Comm_size(world, &size);
    osdp_status s = resolve_mesh(req, cfg, world, out, &tp, &pp);
    if (s != OSDP_OK) return s;
    if ((s = osdp_status_agree(check_tp_inside_node(req, size, tp), world)) != OSDP_OK) return s;
    if ((s = osdp_mesh_create(&out->mesh, world, tp, pp)) != OSDP_OK) return s;
    out->have_mesh = 1;
    if ((s = osdp_status_agree(resolve_geometry(req, out->mesh.dp, out), world)) != OSDP_OK) return s;
    out->have_geometry = 1;
    const int T = out->seq_len ? out->seq_len : cfg->ctx;
    s = osdp_layout_build_tp(&out->layout, cfg, T, out->mesh.tp, req->vocab_quantum);
    if (s == OSDP_OK && (s = osdp_layout_build(&out->whole_model, cfg, T)) != OSDP_OK) osdp_layout_free(&out->layout);
    out->have_layouts = s == OSDP_OK;
    if ((s = osdp_status_agree(s, world)) != OSDP_OK) return s;
    if ((s = osdp_status_agree(resolve_plan(req, world, out), world)) != OSDP_OK || out->mesh.pp == 1) return s;
    /* out->req: the schedule and V as asked, or as the 3D search chose them */
    s = osdp_pipe_check(out->req.pipe_schedule, out->mesh.pp, out->req.virtual_stages, out->plan.geo.accum_steps,
                        out->layout.n_ops);
    if (s == OSDP_OK) s = stage_split(req, out);
    if ((s = osdp_status_agree(s, world)) != OSDP_OK) return s;
    return osdp_status_agree(check_same_split(out, world), world);
}

void osdp_job_resolved_free(osdp_job_resolved *job)
{
    if (job->have_plan) osdp_plan_free(&job->plan);
    if (job->planned) osdp_planner_result_free(&job->planner_result);
    if (job->have_layouts) {
        osdp_layout_free(&job->layout);
        osdp_layout_free(&job->whole_model);
    }
    if (job->have_mesh) osdp_mesh_free(&job->mesh);
    free(job->recompute_all);
    memset(job, 0, sizeof *job);
}

double osdp_job_predicted_step_s(const osdp_job_resolved *job)
{
    const osdp_job_request *req = &job->req;
    if (!req->device) return 0;
    const osdp_layout *layout = &job->layout;
    const osdp_plan *plan = &job->plan;
    const int dp_ranks = job->mesh.dp, pp = job->mesh.pp;
    osdp_device dev;
    osdp_cost_hierarchy hier;
    const int levels = osdp_cost_hierarchy_for_mesh(req->device, layout->tp_size, dp_ranks, 1, &hier);
    osdp_cost_device_for_mesh(req->device, layout->tp_size, dp_ranks, 1, &dev);
    osdp_cost_model cm;
    const osdp_step_geometry geo = request_geometry(req, dp_ranks);
    osdp_cost_model_init(&cm, layout, &dev, &geo, req->cost, levels ? &hier : NULL);
    if (pp <= 1) return osdp_cost_step_time(&cm, plan, plan->geo.micro_batch, plan->geo.accum_steps);
    const osdp_cost_model *cms[OSDP_MAX_STAGES];
    const osdp_plan *plans[OSDP_MAX_STAGES];
    for (int s = 0; s < pp; s++) {
        cms[s] = &cm;
        plans[s] = plan;
    }
    osdp_pipe_timing timing;
    return osdp_pipe_step_time_chunks(cms, plans, job->stage_bounds, pp, req->virtual_stages, req->pipe_schedule,
                                      plan->geo.micro_batch, plan->geo.accum_steps, &timing) == OSDP_OK ? timing.step_s : 0;
}

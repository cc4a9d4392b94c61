/* osdp_gpt train: the training job's top level. */
#include "config.h"
#include "cli/app.h"
#include "osdp/comm.h"
#include "osdp/compute.h"
#include "osdp/data.h"
#include "osdp/device.h"
#include "osdp/layout.h"
#include "osdp/link_emulation.h"
#include "osdp/memory.h"
#include "osdp/mesh.h"
#include "osdp/pipeline.h"
#include "osdp/plan.h"
#include "osdp/planner.h"
#include "osdp/cost_model.h"
#include "osdp/pipeline_cost.h"
#include "cli/report.h"
#include "osdp/runtime.h"
#include "cli/train_checkpoint.h"
#include "eval.h"
#include "options.h"
#include "train_pipe_plan.h"
#include "train_sample.h"
#include "validation.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sequences per rank per micro-step when neither --batch nor the planner says */
#define DEFAULT_MICRO_BATCH 8

/* What the run trains with once the options, and on --resume the
 * checkpoint, have spoken: the one place the job's numbers are resolved. */
typedef struct train_setup {
    int seq_len;              /* T; 0: the model's ctx */
    int micro_batch;          /* --batch; 0: the planner's choice (--plan auto) */
    int global_batch;         /* sequences per optimizer step */
    osdp_optim_config optim;
    osdp_dtype weights;       /* working weights and their all-gathers (--precision) */
    int plan_auto;            /* --plan auto */
    int pad_quantum;          /* the backend's shard padding (osdp_compute_pad_quantum) */
} train_setup;

/* --virtual-stages as the schedule reads it: 1 unless interleaved */
static int train_virtual_stages(const osdp_job *job)
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
    if (plan_auto && job->pipe_schedule == OSDP_PIPE_INTERLEAVED)
        return osdp_error_set(OSDP_ERR_INPUT, "--schedule interleaved with --plan auto: the 3D search of train does not "
                              "choose V yet; plan with `plan --pp P --schedule interleaved`, then train its plan file "
                              "with --pp P --schedule interleaved --virtual-stages V");
    if (plan_auto) {   /* the 3D search: the stages, micro-batch and M for the global batch */
        if (job->stages)
            return osdp_error_set(OSDP_ERR_INPUT, "--stages with --plan auto: the 3D search chooses the split; give a "
                                  "plan file or --plan dp / zdp to train on these stages");
        if (!job->global_batch)
            return osdp_error_set(OSDP_ERR_INPUT, "--plan auto with a pipeline (--pp) needs --global-batch G: the "
                                  "sequences per step that the search splits into micro-batches");
        return OSDP_OK;
    }
    if (job->tp == OSDP_TP_AUTO)
        return osdp_error_set(OSDP_ERR_INPUT, "--tp auto does not plan with --pp %lld: give --tp T", job->pp);
    return OSDP_OK;
}

/* cross-option rules of train (each value alone was checked by the options table) */
static osdp_status check_train_options(const osdp_job *job)
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
    if (job->tp == OSDP_TP_AUTO && !plan_auto)
        return osdp_error_set(OSDP_ERR_INPUT, "--tp auto needs --plan auto (the planner chooses the tensor-parallel "
                              "degree); give --tp T with --plan %s", job->plan);
    return check_pipeline_options(job, plan_auto);
}

/* The settings from the options; on --resume the checkpoint's own global
 * batch, cosine horizon and sequence length unless the options say
 * otherwise (rank 0 prints old -> new for what changes).  A resume with
 * another --seq-len is refused: the data position counts sequences of the
 * checkpoint's length, so the run would not continue the same stream. */
static osdp_status resolve_setup(const osdp_job *job, const osdp_ckpt_info *resumed, const char *resumed_path,
                                 int dp_ranks, int rank, train_setup *t)
{
    memset(t, 0, sizeof *t);
    t->plan_auto = strcmp(job->plan, "auto") == 0;
    t->seq_len = (int)job->seq_len;
    t->micro_batch = osdp_option_given(job, "batch") ? (int)job->batch : t->plan_auto ? 0 : DEFAULT_MICRO_BATCH;
    /* the global batch is a training hyperparameter (it shapes the loss
     * curve), the micro-batch a systems choice: without --global-batch a
     * run takes (--batch or 8) x data-parallel ranks sequences per step
     * (the ranks of a tensor-parallel group share their sequences), which
     * --plan auto splits into micro-batch x accumulation */
    t->global_batch = job->global_batch ? (int)job->global_batch
                                        : (osdp_option_given(job, "batch") ? (int)job->batch : DEFAULT_MICRO_BATCH) * dp_ranks;
    osdp_optim_defaults(&t->optim);
    t->optim.lr = (float)job->lr;
    t->optim.warmup_steps = (int)job->warmup;
    t->optim.min_lr_frac = (float)job->min_lr_frac;
    t->optim.weight_decay = (float)job->weight_decay;
    t->optim.grad_clip = (float)job->grad_clip;
    t->optim.total_steps = job->lr_steps ? (long)job->lr_steps : job->steps > 0 ? (long)job->steps : 1;
    t->weights = osdp_job_weights(job);
    if (!resumed) return OSDP_OK;
    const int evaluating = job->command == OSDP_CMD_EVAL;   /* eval --ckpt: its run's batches unless told, any length */
    if (job->seq_len && job->seq_len != resumed->seq_len && !evaluating)
        return osdp_error_set(OSDP_ERR_INPUT, "--seq-len %lld: the checkpoint %s was trained on sequences of %d tokens; a resume "
                              "continues that run (leave --seq-len out); --init-from starts a new run from its weights",
                              job->seq_len, resumed_path, resumed->seq_len);
    if (osdp_option_given(job, "seed") && (unsigned long long)job->seed != resumed->seed)
        return osdp_error_set(OSDP_ERR_INPUT, "--seed %lld: the checkpoint %s was trained with seed %llu, which a resume "
                              "keeps (its data order and RNG state): leave --seed out; --init-from starts a new run "
                              "from its weights with a new seed", job->seed, resumed_path, resumed->seed);
    t->seq_len = evaluating && job->seq_len ? (int)job->seq_len : resumed->seq_len;
    char changes[512] = "";
    size_t at = 0;
    if (!job->global_batch) {
        t->global_batch = (int)resumed->global_batch;
        /* without --batch, the checkpoint's micro-batch when it still fits
         * the rank count, else one micro-step per optimizer step */
        if (t->micro_batch && !osdp_option_given(job, "batch")) {
            int saved = resumed->geo.micro_batch;
            t->micro_batch = saved > 0 && t->global_batch % (saved * dp_ranks) == 0 ? saved
                           : t->global_batch % dp_ranks == 0 ? t->global_batch / dp_ranks : t->micro_batch;
        }
    } else if (job->global_batch != resumed->global_batch)
        at += (size_t)snprintf(changes + at, sizeof changes - at, "; global batch %ld -> %lld (--global-batch)",
                               resumed->global_batch, job->global_batch);
    if (!job->lr_steps) t->optim.total_steps = resumed->optim.total_steps;
    else if (job->lr_steps != resumed->optim.total_steps && at < sizeof changes)
        at += (size_t)snprintf(changes + at, sizeof changes - at, "; cosine horizon %ld -> %lld steps (--lr-steps)",
                               resumed->optim.total_steps, job->lr_steps);
    if (rank == 0 && !job->quiet && !evaluating) {
        printf("resume: global batch %d, cosine horizon %ld steps, sequences of %d tokens%s%s\n", t->global_batch,
               t->optim.total_steps, t->seq_len, at ? "" : " (as saved)", changes);
        fflush(stdout);
    }
    return OSDP_OK;
}

/* The job's ranks per node, real (MPI_COMM_TYPE_SHARED) or emulated, when every node holds as many; 0 when
 * they differ.  Set once by osdp_cmd_train: the planner prices the nodes the runtime reduces over, not the
 * node size the device file was profiled on. */
static int job_node_size, job_quiet;

static void job_node_size_set(const osdp_world *world, int quiet)
{
    job_quiet = quiet;
    int sizes[2] = {world->node_size, -world->node_size};
    MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    job_node_size = sizes[0] == -sizes[1] ? sizes[0] : 0;
}

/* The device file for planning a run of this binary: the plan must count the
 * runtime's element sizes whatever the file gives (`plan` keeps the file's:
 * it also answers what-if questions such as the paper's fp16 setting).  The
 * runtime gathers weights of --precision, and holds and reduces gradients
 * and activations in fp32 (osdp/runtime.h).  A two-level file is priced at
 * the job's nodes (job_node_size). */
static osdp_status device_load_for_runtime(osdp_device *dev, const char *path, osdp_dtype weights)
{
    osdp_status s = osdp_device_load(dev, path);
    if (s == OSDP_OK) {
        dev->param_bytes = (int)osdp_dtype_size(weights);
        dev->grad_bytes = dev->act_bytes = (int)sizeof(float);
        osdp_emulation_to_device(osdp_comm_emulation(), dev);   /* --ranks-per-node / --emulate-link: the run's network */
        int rank, size;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        /* two levels in the file, and more than one node in its view or the job's: the nodes decide the price */
        if (dev->internode.given && job_node_size > 0 && dev->ranks_per_node != job_node_size &&
            (size > job_node_size || size > dev->ranks_per_node)) {
            static int said;   /* once per run, by rank 0 */
            if (rank == 0 && !job_quiet && !said++)
                printf("device %s: profiled on nodes of %d ranks; this job's nodes hold %d: its data groups are priced "
                       "at the levels of this job's nodes\n", path, dev->ranks_per_node, job_node_size);
            dev->ranks_per_node = job_node_size;
        }
    }
    return s;
}

/* The planner's options for --plan auto (o->geo.n_ranks, the batch and the
 * paddings are the caller's): the job's --mem-limit, prefetch, cost model,
 * splitting and recompute; *all gets --recompute all's flags per operator
 * of `layout` (the caller frees it), NULL otherwise. */
static void planner_options_of(const osdp_job *job, const osdp_layout *layout, osdp_planner_options *o, int **all)
{
    osdp_planner_defaults(o);
    o->mem_limit = job->mem_limit;
    o->geo.prefetch = !job->no_prefetch;
    o->cost = (osdp_cost_kind)job->cost_model;
    o->split = job->split > 0 ? (int)job->split : 1;
    o->split_auto = job->split == OSDP_SPLIT_AUTO;
    o->recompute_auto = job->recompute == OSDP_RECOMPUTE_AUTO;
    o->grad_reduce = (osdp_grad_reduce)job->grad_reduce;
    o->offer_hierarchical = !job->no_hierarchical;
    *all = NULL;
    if (job->recompute == OSDP_RECOMPUTE_ALL && (*all = calloc((size_t)layout->n_ops, sizeof **all)) != NULL) {
        for (int i = 0; i < layout->n_ops; i++) (*all)[i] = osdp_op_can_recompute(layout->op[i].type);
        o->recompute = *all;
    }
}

/* What rank 0 plans a mesh with (--tp auto, --pp auto): the model, the
 * sequence length, the device file for this binary, the whole model's
 * layout and the planner's options over the world's n_ranks ranks. */
typedef struct mesh_search_inputs {
    osdp_model_config cfg;
    int seq_len;
    osdp_device dev;
    osdp_layout whole;
    int have_layout;
    osdp_planner_options o;
    int *recompute_all;       /* --recompute all's flags (planner_options_of) */
} mesh_search_inputs;

/* the model: --model's, or for eval the one its weights file holds */
static osdp_status job_model(const osdp_job *job, osdp_model_config *cfg)
{
    osdp_status s = job->command == OSDP_CMD_EVAL ? osdp_eval_model(job, cfg) : osdp_model_config_load(cfg, job->model);
    if (s != OSDP_OK) return s;
    /* the kernels run: any weight type's table of the backend has the same */
    return osdp_job_apply_kernels(job, osdp_compute_find(osdp_option_word("backend", job->backend), OSDP_FLOAT32), cfg);
}

static osdp_status mesh_search_inputs_load(const osdp_job *job, osdp_dtype weights, int n_ranks, mesh_search_inputs *in)
{
    memset(in, 0, sizeof *in);
    const osdp_compute_backend *be = osdp_compute_find(osdp_option_word("backend", job->backend), weights);
    osdp_status s = job_model(job, &in->cfg);
    if (s != OSDP_OK) return s;
    in->seq_len = job->seq_len > 0 && job->seq_len <= in->cfg.ctx ? (int)job->seq_len : in->cfg.ctx;
    if ((s = device_load_for_runtime(&in->dev, job->device, weights)) != OSDP_OK) return s;
    if ((s = osdp_layout_build(&in->whole, &in->cfg, in->seq_len)) != OSDP_OK) return s;
    in->have_layout = 1;
    planner_options_of(job, &in->whole, &in->o, &in->recompute_all);
    in->o.geo.n_ranks = n_ranks;
    in->o.global_batch = (int)job->global_batch;
    in->o.geo.micro_batch = (int)job->batch;
    if (be) s = osdp_compute_pad_quantum(be, &in->o.geo.pad_quantum);   /* no backend: the later check says so */
    if (be && s == OSDP_OK) s = osdp_compute_vocab_quantum(be, &in->o.vocab_quantum);
    return s;
}

static void mesh_search_inputs_free(mesh_search_inputs *in)
{
    if (in->have_layout) osdp_layout_free(&in->whole);
    in->have_layout = 0;
    free(in->recompute_all);
    in->recompute_all = NULL;
}

/* --tp auto (with --plan auto): rank 0 asks the planner which
 * tensor-parallel degree plans this job best on the world's ranks
 * (osdp_planner_mesh: the divisors of the rank count that divide the heads
 * and fit a node of the device file) and broadcasts it; the run then plans
 * as with --tp T.  Every rank returns the same status. */
static osdp_status choose_tp(const osdp_job *job, osdp_dtype weights, int n_ranks, int rank, int *tp)
{
    int head[2] = {OSDP_OK, 1};   /* status, T */
    if (rank == 0) {
        mesh_search_inputs in;
        osdp_mesh_choice choice = {.best = -1};
        osdp_status s = mesh_search_inputs_load(job, weights, n_ranks, &in);
        if (s == OSDP_OK) s = osdp_planner_mesh(&in.cfg, in.seq_len, &in.dev, &in.o, OSDP_TP_AUTO, &choice);
        if (s == OSDP_OK) head[1] = choice.cand[choice.best].geo.tp_size;
        if (s == OSDP_OK && !job->quiet)
            printf("--tp auto: the planner chooses tensor-parallel degree %d of the %d ranks\n", head[1], n_ranks);
        head[0] = (int)s;
        osdp_mesh_choice_free(&choice);
        mesh_search_inputs_free(&in);
    }
    MPI_Bcast(head, 2, MPI_INT, 0, MPI_COMM_WORLD);
    *tp = head[1];
    if (head[0] == OSDP_OK || rank == 0) return (osdp_status)head[0];
    return osdp_error_set((osdp_status)head[0], "--tp auto: the planner failed on rank 0");
}

/* --plan auto with --pp P or auto (--tp T or auto): the 3D search on rank 0
 * (src/cli/train_pipe_plan.h) over the world's ranks and --global-batch;
 * every rank returns the same status. */
static osdp_status choose_pipeline(const osdp_job *job, osdp_dtype weights, int n_ranks, int rank,
                                   osdp_train_pipe_plan *pipe)
{
    mesh_search_inputs in = {0};
    osdp_status s = rank == 0 ? mesh_search_inputs_load(job, weights, n_ranks, &in) : OSDP_OK;
    int failed = s != OSDP_OK;   /* the inputs' failure on rank 0, agreed before the search's collective */
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!failed)
        s = osdp_train_pipe_plan_choose(&in.cfg, in.seq_len, &in.dev, &in.o, (int)job->pp, (int)job->tp,
                                        (osdp_pipe_schedule)job->pipe_schedule, rank, (int)job->quiet, pipe);
    else if (rank != 0)
        s = osdp_error_set(OSDP_ERR_INPUT, "--plan auto: the 3D search's inputs failed on rank 0");
    mesh_search_inputs_free(&in);
    return s;
}

/* --plan auto: rank 0 plans (device file, --mem-limit, the global batch,
 * and --batch when given), prints the plan and broadcasts it; every rank
 * returns the same status. */
static osdp_status plan_auto(osdp_plan *plan, const osdp_layout *layout, const osdp_job *job, const train_setup *t,
                             int dp_ranks, int rank)
{
    int head[3] = {OSDP_OK, 0, 0}; /* status, micro-batch, accumulation */
    if (rank == 0) {
        osdp_device dev;
        osdp_planner_options o;
        osdp_planner_result r;
        memset(&r, 0, sizeof r);
        int *all = NULL;
        planner_options_of(job, layout, &o, &all);
        o.geo.n_ranks = dp_ranks;
        o.global_batch = t->global_batch;
        o.geo.micro_batch = t->micro_batch;
        o.geo.pad_quantum = t->pad_quantum;
        osdp_status s = device_load_for_runtime(&dev, job->device, t->weights);
        osdp_cost_hierarchy hier;   /* two levels whose data group spans nodes: mode h offered (not --no-hierarchical) */
        if (s == OSDP_OK) o.hierarchy = osdp_planner_hierarchy(&o, &dev, layout->tp_size, dp_ranks, 1, &hier);
        if (s == OSDP_OK) osdp_cost_device_for_mesh(&dev, layout->tp_size, dp_ranks, 1, &dev);   /* the DP group's level */
        if (s == OSDP_OK) s = osdp_planner_run(layout, &dev, &o, &r);
        if (s == OSDP_OK) s = osdp_plan_copy(plan, &r.plan);
        if (s == OSDP_OK && !job->quiet) osdp_plan_print(layout, &dev, &o, &r);
        osdp_planner_result_free(&r);
        free(all);
        head[0] = (int)s;
        head[1] = plan->geo.micro_batch;
        head[2] = plan->geo.accum_steps;
    }
    if (rank != 0 && osdp_plan_alloc(plan, layout->n_ops) != OSDP_OK) osdp_fatal(OSDP_ERR_OOM, osdp_error_message());
    MPI_Bcast(head, 3, MPI_INT, 0, MPI_COMM_WORLD);
    if (head[0] != OSDP_OK) {
        if (rank != 0) osdp_plan_free(plan);
        return rank == 0 ? (osdp_status)head[0]
                         : osdp_error_set((osdp_status)head[0], "--plan auto: the planner failed on rank 0");
    }
    MPI_Bcast(plan->slices, layout->n_ops, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(plan->zdp_slices, layout->n_ops, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(plan->recompute, layout->n_ops, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(plan->hierarchical, layout->n_ops, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(plan->reduce_once, layout->n_ops, MPI_INT, 0, MPI_COMM_WORLD);
    plan->geo.micro_batch = head[1];
    plan->geo.accum_steps = head[2];
    return OSDP_OK;
}

/* --split G on an all-DP / all-ZDP plan, --recompute all and --grad-reduce once / every on any plan */
static void plan_apply_options(osdp_plan *plan, const osdp_layout *layout, const osdp_job *job, int uniform)
{
    for (int i = 0; i < layout->n_ops; i++) {
        if (job->grad_reduce != OSDP_GRAD_REDUCE_AUTO) plan->reduce_once[i] = job->grad_reduce == OSDP_GRAD_REDUCE_ONCE;
        const osdp_op_layout *op = &layout->op[i];
        if (uniform && job->split > 1 && osdp_op_can_split(op)) {   /* the embedding, a tied head cannot be split */
            plan->zdp_slices[i] = plan->zdp_slices[i] ? (int)job->split : 0;
            plan->slices[i] = (int)job->split;
        }
        if (job->recompute == OSDP_RECOMPUTE_ALL) plan->recompute[i] = osdp_op_can_recompute(op->type);
    }
}

/* The plan of --plan, with the batch geometry in it: the planner's
 * micro-batch and accumulation under --plan auto, else --batch (or 8) and
 * the accumulation that makes the global batch.  The plan's choices apply
 * to this rank's tensor-parallel parts, sharded over the data-parallel
 * ranks. */
static osdp_status load_plan(osdp_plan *plan, const osdp_layout *layout, const osdp_job *job, const train_setup *t,
                             const osdp_mesh *mesh, const osdp_train_pipe_plan *pipe)
{
    if (pipe->active) {   /* the 3D search's, b and M in it */
        if (pipe->plan.n_ops != layout->n_ops)
            return osdp_error_set(OSDP_ERR_INTERNAL, "--plan auto: the 3D search planned %d operators, the layout has %d",
                                  pipe->plan.n_ops, layout->n_ops);
        return osdp_plan_copy(plan, &pipe->plan);
    }
    const int dp_ranks = mesh->dp;
    if (t->micro_batch && t->global_batch % (t->micro_batch * dp_ranks) != 0)
        return osdp_error_set(OSDP_ERR_INPUT, "%s %d is not a multiple of --batch %d x %d %sranks = %d%s",
                              job->global_batch ? "--global-batch" : "the global batch", t->global_batch, t->micro_batch,
                              dp_ranks, mesh->tp > 1 ? "data-parallel " : "", t->micro_batch * dp_ranks,
                              job->global_batch ? "" : " (give --global-batch, or a --batch that divides it)");
    const char *spec = job->plan;
    osdp_status s;
    if (t->plan_auto) {
        s = plan_auto(plan, layout, job, t, dp_ranks, mesh->world_rank);
        if (s == OSDP_OK) plan->geo.tp_size = mesh->tp;
        return s;
    }
    if (strcmp(spec, "dp") == 0 || strcmp(spec, "zdp") == 0) {
        s = osdp_plan_alloc(plan, layout->n_ops);
        if (s == OSDP_OK) osdp_plan_fill(plan, strcmp(spec, "zdp") == 0);
        if (s == OSDP_OK) plan_apply_options(plan, layout, job, 1);
        if (s == OSDP_OK && osdp_plan_tie_embedding(plan, layout) && mesh->world_rank == 0 && !job->quiet)
            printf("--plan zdp: the embedding stays DP (the head is tied to its wte)\n");
    } else {
        s = osdp_plan_load(plan, layout, spec);
        if (s == OSDP_OK) plan_apply_options(plan, layout, job, 0);
    }
    if (s == OSDP_OK && (s = osdp_plan_check_tp(plan, mesh->tp, spec)) != OSDP_OK) {
        osdp_plan_free(plan);
        return s;
    }
    if (s == OSDP_OK) {
        plan->geo.tp_size = mesh->tp;
        plan->geo.micro_batch = t->micro_batch;
        plan->geo.accum_steps = t->global_batch / (t->micro_batch * dp_ranks);
    }
    return s;
}

/* The cost model's step time (--cost-model) for the plan in use (whatever
 * chose it), with the device file of --plan auto: for the log, beside the
 * measured time.  A pipeline (pp > 1): the step of its stages' passes and
 * messages over stage_bounds, as `plan --pp` prices it (the flat step of
 * the whole model on one stage's ranks was logged before).
 * 0 when the device file cannot be read (not an error: only --plan auto
 * needs one). */
static double predicted_step_time(const osdp_layout *layout, const osdp_plan *plan, const osdp_job *job,
                                  const train_setup *t, int dp_ranks, int pp, const int *stage_bounds)
{
    osdp_device dev;
    if (device_load_for_runtime(&dev, job->device, t->weights) != OSDP_OK) return 0;
    osdp_cost_hierarchy hier;
    const int levels = osdp_cost_hierarchy_for_mesh(&dev, layout->tp_size, dp_ranks, 1, &hier);
    osdp_cost_device_for_mesh(&dev, layout->tp_size, dp_ranks, 1, &dev);
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, layout, &dev, &(osdp_step_geometry){.n_ranks = dp_ranks, .pad_quantum = t->pad_quantum,
                                                                 .prefetch = !job->no_prefetch},
                         (osdp_cost_kind)job->cost_model, levels ? &hier : NULL);
    if (pp <= 1) return osdp_cost_step_time(&cm, plan, plan->geo.micro_batch, plan->geo.accum_steps);
    const osdp_cost_model *cms[OSDP_MAX_STAGES];
    const osdp_plan *plans[OSDP_MAX_STAGES];
    for (int s = 0; s < pp; s++) {
        cms[s] = &cm;
        plans[s] = plan;
    }
    osdp_pipe_timing timing;
    return osdp_pipe_step_time_chunks(cms, plans, stage_bounds, pp, train_virtual_stages(job),
                                      (osdp_pipe_schedule)job->pipe_schedule, plan->geo.micro_batch, plan->geo.accum_steps,
                                      &timing) == OSDP_OK ? timing.step_s : 0;
}

/* The pipeline's stages: --stages, else the contiguous split that balances
 * the cost model's operator times under the plan (the device file of
 * --device; without one, the operators' FLOPs).  Every rank computes the
 * same from the same inputs. */
static osdp_status stage_split(const osdp_layout *layout, const osdp_plan *plan, const osdp_job *job,
                               const train_setup *t, int dp_ranks, const osdp_train_pipe_plan *pipe, int *bounds)
{
    if (pipe->active) {   /* the 3D search's */
        memcpy(bounds, pipe->bounds, sizeof(int) * (size_t)(pipe->pp + 1));
        return OSDP_OK;
    }
    /* interleaved: P V chunks, split as P V stages would be */
    const int P = (int)job->pp * train_virtual_stages(job);
    if (job->stages) return osdp_chunk_split_parse(job->stages, layout->n_ops, (int)job->pp, train_virtual_stages(job), bounds);
    osdp_device dev;
    if (device_load_for_runtime(&dev, job->device, t->weights) == OSDP_OK) {
        osdp_cost_model cm;
        osdp_cost_model_init(&cm, layout, &dev, &(osdp_step_geometry){.n_ranks = dp_ranks, .pad_quantum = t->pad_quantum,
                                                                     .prefetch = !job->no_prefetch},
                             (osdp_cost_kind)job->cost_model, NULL);
        return osdp_planner_stage_split(&cm, plan, plan->geo.micro_batch, plan->geo.accum_steps, P, bounds);
    }
    double *op_flops = malloc(sizeof *op_flops * (size_t)layout->n_ops);
    if (!op_flops) return osdp_error_set(OSDP_ERR_OOM, "--pp: out of host memory");
    for (int i = 0; i < layout->n_ops; i++) op_flops[i] = osdp_cost_op_flops(&layout->op[i]);
    osdp_status s = osdp_stage_split_balanced(op_flops, layout->n_ops, P, bounds);
    free(op_flops);
    return s;
}

/* One optimizer step on this rank's micro-batches, read here: the runtime
 * takes them as (accum, 2, B, T), per micro-step the inputs, then the targets.
 * The order is the data-parallel group's (rt->rank of rt->N): the ranks of a
 * tensor-parallel group read the same micro-batches. */
static osdp_status train_step(osdp_runtime *rt, const osdp_dataset *data, osdp_step_stats *stats)
{
    const size_t bt = (size_t)rt->B * (size_t)rt->T;
    int *tokens = malloc(2 * bt * (size_t)rt->opt.geo.accum_steps * sizeof(int));
    if (!tokens) return osdp_error_set(OSDP_ERR_OOM, "train: out of host memory for the batches");
    for (int micro = 0; micro < rt->opt.geo.accum_steps; micro++) {
        int *inputs = tokens + 2 * bt * (size_t)micro;
        long first = ((long)micro * rt->N + rt->rank) * rt->B;
        osdp_data_batch(data, rt->opt.seed, rt->step, first, rt->B, rt->T, inputs, inputs + bt);
    }
    osdp_status s = osdp_runtime_step(rt, tokens, stats);
    free(tokens);
    return s;
}


/* The checkpoint --resume loaded must be the one the run was set up from
 * (resolve_setup read it before the plan): --resume-fallback may have gone
 * back to an older save of another geometry. */
static osdp_status check_resumed_setup(const osdp_train_ckpt *ckpt, const osdp_job *job, const train_setup *t,
                                       int global_batch, int seq_len)
{
    const osdp_ckpt_info *in = &ckpt->loaded;
    if (!ckpt->resume) return OSDP_OK;
    const char *what = in->seq_len != seq_len ? "sequence length"
                     : !job->global_batch && in->global_batch != global_batch ? "global batch"
                     : !job->lr_steps && in->optim.total_steps != t->optim.total_steps ? "cosine horizon" : NULL;
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
static osdp_status device_mem_limit(const osdp_compute_backend *be, const osdp_job *job,
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

/* A tensor-parallel group (tp consecutive ranks) sits inside one node, as
 * `plan` requires: its all-reduces after every row-parallel product would
 * otherwise cross the slow link (each rank checks its own node) */
static osdp_status check_tp_inside_node(const osdp_world *world, int tp)
{
    /* a tp that does not divide the ranks: the mesh says so, naming them */
    if (tp <= 1 || world->size % tp != 0 || (world->node_size >= tp && world->node_size % tp == 0)) return OSDP_OK;
    return osdp_error_set(OSDP_ERR_INPUT, "--tp %d: a tensor-parallel group must sit inside one node, and this job's "
                          "nodes hold %d rank%s%s: give a --tp that divides the ranks per node", tp, world->node_size,
                          world->node_size == 1 ? "" : "s", world->emulated ? " (--ranks-per-node)" : "");
}

/* An emulated device OOM under a plan the planner did not choose: say what
 * would make it fit. */
static _Noreturn void fatal_with_hint(osdp_status s, const train_setup *t)
{
    if (s != OSDP_ERR_OOM || t->plan_auto) osdp_fatal(s, osdp_error_message());
    char msg[2048];
    snprintf(msg, sizeof msg, "%s (the plan was fixed by --plan: try --plan auto, --recompute all, or a larger --mem-limit)",
             osdp_error_message());
    osdp_fatal(s, msg);
}

int osdp_cmd_train(const osdp_job *job)
{
    osdp_world world;
    osdp_status s;
    osdp_world_init(&world, (int)job->threads);
    osdp_world_emulate(&world, job->ranks_per_node, job->emulate_link, job->quiet);
    job_node_size_set(&world, (int)job->quiet);
    osdp_check_all(check_train_options(job));
    /* the mesh before anything counts ranks: the batch geometry and the plan
     * are the data-parallel group's */
    int tp = (int)job->tp, pp = (int)job->pp;
    osdp_train_pipe_plan pipe = {0};   /* --plan auto with a pipeline: the 3D search's mesh, stages and plan */
    if (strcmp(job->plan, "auto") == 0 && pp != 1) {
        osdp_check_all(choose_pipeline(job, osdp_job_weights(job), world.size, world.rank, &pipe));
        tp = pipe.tp;
        pp = pipe.pp;
    } else if (tp == OSDP_TP_AUTO) {
        osdp_check_all(choose_tp(job, osdp_job_weights(job), world.size, world.rank, &tp));
    }
    osdp_check_all(check_tp_inside_node(&world, tp));
    osdp_mesh mesh;
    osdp_check_all(osdp_mesh_create(&mesh, MPI_COMM_WORLD, tp, pp));
    if (world.rank == 0 && !job->quiet) {
        char described[96];
        printf("mesh: %s%s%s\n", osdp_mesh_describe(&mesh, described, sizeof described),
               mesh.pp > 1 ? ", pipeline schedule " : "",
               mesh.pp > 1 ? osdp_pipe_schedule_name((osdp_pipe_schedule)job->pipe_schedule) : "");
        fflush(stdout);
    }
    osdp_train_ckpt ckpt;
    osdp_check_all(osdp_train_ckpt_init(&ckpt, job));
    /* on --resume, the checkpoint's batch geometry and schedule (the load
     * itself reports a file it cannot read) */
    osdp_ckpt_info resumed;
    char resumed_path[4200] = "";
    int have_resumed = ckpt.resume && osdp_train_ckpt_peek(&ckpt, MPI_COMM_WORLD, resumed_path, sizeof resumed_path,
                                                           &resumed) == OSDP_OK;
    const int evaluating = job->command == OSDP_CMD_EVAL;
    if (evaluating) {   /* the weights file's batch geometry (a checkpoint's, for --ckpt) before the plan */
        ckpt.quiet = 1;   /* eval says what it loaded */
        osdp_check_all(osdp_eval_peek(job, &resumed));
        have_resumed = job->ckpt && !resumed.weights_only;
    }
    train_setup t;
    osdp_check_all(resolve_setup(job, have_resumed ? &resumed : NULL, resumed_path, mesh.dp, world.rank, &t));

    const char *backend_name = osdp_option_word("backend", job->backend);
    const osdp_compute_backend *backend = osdp_compute_find(backend_name, t.weights);
    osdp_check_all(backend ? OSDP_OK : osdp_error_set(OSDP_ERR_INPUT, "--backend %s: %s", backend_name, osdp_compute_find_failure(backend_name)));
    osdp_check_all(backend->init(world.local_rank, world.threads));
    osdp_check_all(osdp_compute_pad_quantum(backend, &t.pad_quantum));

    osdp_model_config cfg;
    osdp_check_all(job_model(job, &cfg));
    /* before anything is sized by it and broadcast (the plan of --plan auto) */
    osdp_check_same(osdp_model_config_hash(&cfg), "model description");
    osdp_check_all(osdp_job_check_seq_len(job, cfg.ctx));
    int T = t.seq_len ? t.seq_len : cfg.ctx;
    int vocab_quantum = 1;
    osdp_check_all(osdp_compute_vocab_quantum(backend, &vocab_quantum));   /* what the backend pads the vocabulary to */
    osdp_layout layout;   /* this rank's tensor-parallel parts (the whole model at --tp 1) */
    osdp_check_all(osdp_layout_build_tp(&layout, &cfg, T, mesh.tp, vocab_quantum));
    osdp_layout whole_model;   /* what MFU and the parameter count are of */
    osdp_check_all(osdp_layout_build(&whole_model, &cfg, T));
    osdp_dataset data = {0};   /* eval: none (it evaluates its validation data) */
    if (!evaluating) osdp_check_all(osdp_data_open(&data, job->data, cfg.vocab, T));
    osdp_validation val;
    osdp_check_all(osdp_validation_open(&val, job, &data, cfg.vocab, T, world.rank));
    osdp_train_sample samples;
    osdp_check_all(osdp_train_sample_open(&samples, job, &cfg, world.rank));
    osdp_plan plan;
    osdp_check_all(load_plan(&plan, &layout, job, &t, &mesh, &pipe));
    int global = plan.geo.micro_batch * plan.geo.accum_steps * mesh.dp;

    /* every rank must run the same job (the model: checked where it was read) */
    osdp_check_same(data.hash ^ (unsigned long long)data.n_tokens, "training data");
    osdp_check_same(val.data.hash ^ (unsigned long long)val.data.n_tokens, "validation data");
    osdp_check_same(osdp_plan_hash(&plan), "plan");

    /* device buffers need the device's collectives: NCCL beside the CUDA
     * backend (host buffers in the same calls fall back to MPI), MPI
     * otherwise; one communicator per group of the mesh */
    const int nccl = strcmp(backend->name, "cuda") == 0;
    osdp_comm comm, tp_comm, pp_fwd_comm, pp_bwd_comm;
    osdp_check_all(osdp_mesh_comm_create(&mesh, OSDP_MESH_DATA, nccl, world.local_rank, &comm));
    if (mesh.tp > 1) osdp_check_all(osdp_mesh_comm_create(&mesh, OSDP_MESH_TENSOR, nccl, world.local_rank, &tp_comm));
    /* the pipeline: one communicator per direction (osdp/mesh.h) */
    if (mesh.pp > 1) {
        osdp_check_all(osdp_mesh_comm_create(&mesh, OSDP_MESH_PIPELINE, nccl, world.local_rank, &pp_fwd_comm));
        osdp_check_all(osdp_mesh_comm_create(&mesh, OSDP_MESH_PIPELINE, nccl, world.local_rank, &pp_bwd_comm));
    }
    /* the data group split by node (real or emulated), whatever the plan, when it spans nodes of equal
     * shares (every slice then reduced node-first: osdp/runtime.h), and for hierarchical operators */
    int nodes_made = 0;
    osdp_comm node_comm, cross_comm;
    osdp_check_all(osdp_node_groups_create(&mesh.dp_comm, world.node, nccl, world.local_rank,
                                           osdp_plan_has_hierarchical(&plan), &node_comm, &cross_comm, &nodes_made));
    int stage_bounds[OSDP_MAX_STAGES + 1] = {0};
    if (mesh.pp > 1) {
        osdp_check_all(osdp_pipe_check((osdp_pipe_schedule)job->pipe_schedule, mesh.pp, train_virtual_stages(job),
                                       plan.geo.accum_steps, layout.n_ops));
        osdp_check_all(stage_split(&layout, &plan, job, &t, mesh.dp, &pipe, stage_bounds));
        uint64_t split_hash = 14695981039346656037ULL;   /* FNV-1a over the bounds: every rank's device file */
        for (int b = 0; b <= mesh.pp * train_virtual_stages(job); b++) split_hash = (split_hash ^ (uint64_t)stage_bounds[b]) * 1099511628211ULL;
        osdp_check_same(split_hash, "pipeline stage split (--stages, or the --device file it is balanced by)");
    }

    osdp_memory_prediction predicted;   /* this rank's: its stage's */
    osdp_schedule_options predict = {.geo.n_ranks = mesh.dp, .geo.node_ranks = nodes_made ? node_comm.size : 0,
                                     .geo.micro_batch = plan.geo.micro_batch,
                                     .geo.accum_steps = plan.geo.accum_steps, .geo.prefetch = !job->no_prefetch,
                                     .geo.weight_dtype = t.weights, .geo.pad_quantum = t.pad_quantum, .geo.pp_size = mesh.pp,
                                     .pp_stage = mesh.pp_rank, .geo.pipe_schedule = (osdp_pipe_schedule)job->pipe_schedule,
                                     .geo.virtual_stages = train_virtual_stages(job)};
    memcpy(predict.geo.stage_bounds, stage_bounds, sizeof stage_bounds);
    osdp_check_all(osdp_schedule_predict(&layout, &plan, &predict, &predicted));
    size_t mem_limit = (size_t)job->mem_limit;   /* on a GPU: capped at the card's free memory (device_mem_limit) */
    osdp_check_all(device_mem_limit(backend, job, &predicted, world.rank, &mem_limit));

    osdp_runtime_options opt = {.geo = predict.geo, .mem_limit = mem_limit,
                                .seed = (unsigned long long)job->seed, .optim = t.optim,
                                .tp_comm = mesh.tp > 1 ? &tp_comm : NULL, .pp_stage = mesh.pp_rank,
                                .pp_fwd_comm = mesh.pp > 1 ? &pp_fwd_comm : NULL,
                                .pp_bwd_comm = mesh.pp > 1 ? &pp_bwd_comm : NULL,
                                .node_comm = nodes_made ? &node_comm : NULL,
                                .cross_comm = nodes_made ? &cross_comm : NULL};
    osdp_runtime rt;
    s = osdp_runtime_create(&rt, &layout, &plan, &comm, backend, &opt);
    if (s != OSDP_OK) fatal_with_hint(s, &t);
    osdp_check_all(osdp_validation_prepare(&val, &rt));

    /* the checkpoint before the log: a refused one leaves no file behind */
    osdp_check_all(osdp_train_ckpt_start(&ckpt, &rt, &cfg, &plan, MPI_COMM_WORLD));
    osdp_check_all(check_resumed_setup(&ckpt, job, &t, global, T));
    osdp_check_all(osdp_train_ckpt_check_steps(&ckpt, (long)job->steps, job->dump_weights != NULL));
    osdp_report report = {0};
    if (evaluating) {   /* train's validation of the loaded weights, no step (job->steps is 0) */
        s = osdp_eval_run(&val, &rt, job, &ckpt.loaded, &mesh);
        if (s != OSDP_OK) fatal_with_hint(s, &t);
    } else {
        osdp_report_open(&report, &rt, &world, &mesh, &whole_model, &predicted, job->peak_flops, job->log, job->quiet,
                         (long)job->log_every);
        osdp_check_all(report.status);
        report.continue_on_write_error = job->on_write_error == OSDP_ON_WRITE_ERROR_CONTINUE;
        report.predicted_step_s = predicted_step_time(&layout, &plan, job, &t, mesh.dp, mesh.pp, stage_bounds);
        osdp_report_header(&report, &cfg, &data, &plan, (long)job->steps, global);
    }

    for (long step = rt.step; step < job->steps; step++) {
        osdp_step_stats stats;
        s = train_step(&rt, &data, &stats);
        if (s == OSDP_ERR_NUMERIC) osdp_check_all(s);   /* the loss is all-reduced: every rank sees it */
        if (s != OSDP_OK) fatal_with_hint(s, &t);
        if (osdp_validation_due(&val, stats.step, (long)job->steps)) {
            s = osdp_validation_run(&val, &rt, &stats.val_loss);
            if (s != OSDP_OK) fatal_with_hint(s, &t);
        }
        osdp_report_step(&report, &stats);
        if (osdp_train_sample_due(&samples, stats.step, (long)job->steps)) osdp_check_all(osdp_train_sample_run(&samples, &rt));
        int stop = 0;
        osdp_check_all(osdp_train_ckpt_after_step(&ckpt, osdp_report_log_status(&report), &stop));
        if (stop) break;
    }
    osdp_check_all(osdp_train_ckpt_finish(&ckpt));
    if (!evaluating) osdp_report_summary(&report);
    if (job->dump_weights) {
        s = osdp_train_dump_weights(&rt, job->dump_weights, MPI_COMM_WORLD);
        if (s != OSDP_OK) osdp_fatal(s, osdp_error_message());
    }
    if (!evaluating) osdp_check_all(osdp_report_close(&report));   /* the log's last records and its close, checked */
    osdp_runtime_destroy(&rt);
    if (mesh.tp > 1) osdp_comm_destroy(&tp_comm);
    if (mesh.pp > 1) {
        osdp_comm_destroy(&pp_fwd_comm);
        osdp_comm_destroy(&pp_bwd_comm);
    }
    if (nodes_made) {
        osdp_comm_destroy(&node_comm);
        osdp_comm_destroy(&cross_comm);
    }
    osdp_comm_destroy(&comm);
    osdp_mesh_free(&mesh);
    osdp_plan_free(&plan);
    osdp_train_pipe_plan_free(&pipe);
    osdp_train_sample_close(&samples);
    osdp_validation_close(&val);
    osdp_data_close(&data);
    osdp_layout_free(&layout);
    osdp_layout_free(&whole_model);
    MPI_Finalize();
    return 0;
}

/* osdp_gpt train: the training job's top level: the job resolved by the
 * library (osdp/job.h), then the runtime's steps. */
#include "config.h"
#include "cli/app.h"
#include "osdp/comm.h"
#include "osdp/compute.h"
#include "osdp/data.h"
#include "osdp/device.h"
#include "osdp/job.h"
#include "osdp/link_emulation.h"
#include "osdp/memory.h"
#include "osdp/runtime.h"
#include "cli/report.h"
#include "cli/train_checkpoint.h"
#include "eval.h"
#include "options.h"
#include "train_job.h"
#include "train_print.h"
#include "train_sample.h"
#include "validation.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The device file for planning a run of this binary, read once: its element sizes the runtime's and its
 * network the run's (--ranks-per-node / --emulate-link; a two-level file priced at the job's nodes of
 * node_size ranks: *file_node then the file's node size, else 0).  NULL when it cannot be read (message
 * in msg): only --plan auto and --tp auto need one. */
static const osdp_device *device_for_run(const osdp_job *job, int node_size, int world_size, osdp_device *dev,
                                         int *file_node, osdp_status *status, char *msg, size_t n)
{
    *file_node = 0;
    *status = osdp_device_load(dev, job->device);
    if (*status != OSDP_OK) {
        snprintf(msg, n, "%s", osdp_error_message());
        return NULL;
    }
    osdp_emulation_to_device(osdp_comm_emulation(), dev);
    const int file = dev->ranks_per_node;
    if (osdp_job_device_for_run(dev, osdp_job_weights(job), node_size, world_size)) *file_node = file;
    return dev;
}

/* An emulated device OOM under a plan the planner did not choose: say what
 * would make it fit. */
static _Noreturn void fatal_with_hint(osdp_status s, const osdp_job *job)
{
    if (s != OSDP_ERR_OOM || strcmp(job->plan, "auto") == 0) osdp_fatal(s, osdp_error_message());
    char msg[2048];
    snprintf(msg, sizeof msg, "%s (the plan was fixed by --plan: try --plan auto, --recompute all, or a larger --mem-limit)",
             osdp_error_message());
    osdp_fatal(s, msg);
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

int osdp_cmd_train(const osdp_job *job)
{
    osdp_world world;
    osdp_status s;
    osdp_world_init(&world, (int)job->threads);
    osdp_world_emulate(&world, job->ranks_per_node, job->emulate_link, job->quiet);
    /* the job's ranks per node when every node holds as many (else 0): the planner prices the nodes the
     * runtime reduces over, not the node size the device file was profiled on */
    int sizes[2] = {world.node_size, -world.node_size};
    MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    const int node_size = sizes[0] == -sizes[1] ? sizes[0] : 0;
    osdp_check_all(osdp_train_check_options(job));
    const int rank0_says = world.rank == 0 && !job->quiet, evaluating = job->command == OSDP_CMD_EVAL;

    const char *backend_name = osdp_option_word("backend", job->backend);
    const osdp_compute_backend *backend = osdp_compute_find(backend_name, osdp_job_weights(job));
    osdp_check_all(backend ? OSDP_OK : osdp_error_set(OSDP_ERR_INPUT, "--backend %s: %s", backend_name, osdp_compute_find_failure(backend_name)));
    osdp_check_all(backend->init(world.local_rank, world.threads));
    int pad_quantum = 1, vocab_quantum = 1;   /* the backend's shard padding and vocabulary padding */
    osdp_check_all(osdp_compute_pad_quantum(backend, &pad_quantum));
    osdp_check_all(osdp_compute_vocab_quantum(backend, &vocab_quantum));
    osdp_model_config cfg;
    osdp_check_all(osdp_train_model(job, &cfg));
    /* before anything is sized by it and broadcast (the plan of --plan auto) */
    osdp_check_same(osdp_model_config_hash(&cfg), "model description");
    osdp_check_all(osdp_job_check_seq_len(job, cfg.ctx));

    osdp_job_request req;
    osdp_train_request(job, node_size, world.node_size, world.emulated, pad_quantum, vocab_quantum, &req);
    osdp_device dev;
    char dev_error[1024] = "";
    int file_node;
    req.device = device_for_run(job, node_size, world.size, &dev, &file_node, &req.device_status, dev_error,
                                sizeof dev_error);
    req.device_error = dev_error;
    osdp_train_ckpt ckpt;   /* its options' errors and the weights file's: reported after the mesh, as ever */
    const osdp_status ckpt_s = osdp_train_ckpt_init(&ckpt, job);
    osdp_status peek_s = OSDP_OK;
    /* on --resume, the checkpoint's batch geometry and schedule (the load itself reports a file it cannot read) */
    osdp_ckpt_info resumed;
    char resumed_path[4200] = "";
    int have_resumed = ckpt_s == OSDP_OK && ckpt.resume &&
                       osdp_train_ckpt_peek(&ckpt, MPI_COMM_WORLD, resumed_path, sizeof resumed_path, &resumed) == OSDP_OK;
    if (evaluating && ckpt_s == OSDP_OK) {   /* the weights file's batch geometry (a checkpoint's, for --ckpt) */
        ckpt.quiet = 1;   /* eval says what it loaded */
        peek_s = osdp_eval_peek(job, &resumed);
        have_resumed = peek_s == OSDP_OK && job->ckpt && !resumed.weights_only;
    }
    req.resumed = have_resumed ? &resumed : NULL;
    req.resumed_path = resumed_path;
    osdp_job_resolved r;   /* the mesh, the batch geometry, the layouts, the plan and the stages */
    s = osdp_job_resolve(&req, &cfg, MPI_COMM_WORLD, &r);
    const int searched = r.tp_chosen || r.searched_3d;
    if (rank0_says && file_node && searched) osdp_train_print_device_nodes(job->device, file_node, node_size);
    if (rank0_says) osdp_train_print_search(&r, world.size);
    if (!r.have_mesh) osdp_check_all(s);
    if (rank0_says) osdp_train_print_mesh(&r);
    osdp_check_all(ckpt_s);
    osdp_check_all(peek_s);
    if (rank0_says && r.have_geometry) osdp_train_print_resume(&r);
    osdp_check_all(s);
    const osdp_mesh *mesh = &r.mesh;
    const osdp_plan *plan = &r.plan;
    const int T = r.seq_len ? r.seq_len : cfg.ctx, global = plan->geo.micro_batch * plan->geo.accum_steps * mesh->dp;
    osdp_optim_config optim;
    osdp_optim_defaults(&optim);
    optim.lr = (float)job->lr;
    optim.warmup_steps = (int)job->warmup;
    optim.min_lr_frac = (float)job->min_lr_frac;
    optim.weight_decay = (float)job->weight_decay;
    optim.grad_clip = (float)job->grad_clip;
    optim.total_steps = r.total_steps;

    osdp_dataset data = {0};   /* eval: none (it evaluates its validation data) */
    if (!evaluating) osdp_check_all(osdp_data_open(&data, job->data, cfg.vocab, T));
    osdp_validation val;
    osdp_check_all(osdp_validation_open(&val, job, &data, cfg.vocab, T, world.rank));
    osdp_train_sample samples;
    osdp_check_all(osdp_train_sample_open(&samples, job, &cfg, world.rank));
    if (rank0_says && file_node && !searched) osdp_train_print_device_nodes(job->device, file_node, node_size);
    if (rank0_says) osdp_train_print_plan(&r);

    /* every rank must run the same job (the model: checked where it was read) */
    osdp_check_same(data.hash ^ (unsigned long long)data.n_tokens, "training data");
    osdp_check_same(val.data.hash ^ (unsigned long long)val.data.n_tokens, "validation data");
    osdp_check_same(osdp_plan_hash(plan), "plan");

    /* device buffers need the device's collectives: NCCL beside the CUDA
     * backend (host buffers in the same calls fall back to MPI), MPI
     * otherwise; one communicator per group of the mesh */
    const int nccl = strcmp(backend->name, "cuda") == 0;
    osdp_comm comm, tp_comm, pp_fwd_comm, pp_bwd_comm;
    osdp_check_all(osdp_mesh_comm_create(mesh, OSDP_MESH_DATA, nccl, world.local_rank, &comm));
    if (mesh->tp > 1) osdp_check_all(osdp_mesh_comm_create(mesh, OSDP_MESH_TENSOR, nccl, world.local_rank, &tp_comm));
    /* the pipeline: one communicator per direction (osdp/mesh->h) */
    if (mesh->pp > 1) {
        osdp_check_all(osdp_mesh_comm_create(mesh, OSDP_MESH_PIPELINE, nccl, world.local_rank, &pp_fwd_comm));
        osdp_check_all(osdp_mesh_comm_create(mesh, OSDP_MESH_PIPELINE, nccl, world.local_rank, &pp_bwd_comm));
    }
    /* the data group split by node (real or emulated), whatever the plan, when it spans nodes of equal
     * shares (every slice then reduced node-first: osdp/runtime.h), and for hierarchical operators */
    int nodes_made = 0;
    osdp_comm node_comm, cross_comm;
    osdp_check_all(osdp_node_groups_create(&r.mesh.dp_comm, world.node, nccl, world.local_rank,
                                           osdp_plan_has_hierarchical(plan), &node_comm, &cross_comm, &nodes_made));
    osdp_memory_prediction predicted;   /* this rank's: its stage's */
    osdp_schedule_options predict = {.geo.n_ranks = mesh->dp, .geo.node_ranks = nodes_made ? node_comm.size : 0,
                                     .geo.micro_batch = plan->geo.micro_batch,
                                     .geo.accum_steps = plan->geo.accum_steps, .geo.prefetch = !job->no_prefetch,
                                     .geo.weight_dtype = req.weights, .geo.residual_dtype = req.residual,
                                     .geo.pad_quantum = pad_quantum, .geo.pp_size = mesh->pp,
                                     .pp_stage = mesh->pp_rank, .geo.pipe_schedule = r.req.pipe_schedule,
                                     .geo.virtual_stages = r.req.virtual_stages};
    memcpy(predict.geo.stage_bounds, r.stage_bounds, sizeof r.stage_bounds);
    osdp_check_all(osdp_schedule_predict(&r.layout, plan, &predict, &predicted));
    size_t mem_limit = (size_t)job->mem_limit;   /* on a GPU: capped at the card's free memory (device_mem_limit) */
    osdp_check_all(osdp_train_device_mem_limit(backend, job, &predicted, world.rank, &mem_limit));

    /* the step's geometry as predicted (the runtime sets the ranks from its communicators) */
    osdp_runtime_options opt = {.geo = predict.geo, .mem_limit = mem_limit,
                                .seed = (unsigned long long)job->seed, .optim = optim,
                                .tp_comm = mesh->tp > 1 ? &tp_comm : NULL, .pp_stage = mesh->pp_rank,
                                .pp_fwd_comm = mesh->pp > 1 ? &pp_fwd_comm : NULL,
                                .pp_bwd_comm = mesh->pp > 1 ? &pp_bwd_comm : NULL,
                                .node_comm = nodes_made ? &node_comm : NULL,
                                .cross_comm = nodes_made ? &cross_comm : NULL};
    osdp_runtime rt;
    s = osdp_runtime_create(&rt, &r.layout, plan, &comm, backend, &opt);
    if (s != OSDP_OK) fatal_with_hint(s, job);
    osdp_check_all(osdp_validation_prepare(&val, &rt));

    /* the checkpoint before the log: a refused one leaves no file behind */
    osdp_check_all(osdp_train_ckpt_start(&ckpt, &rt, &cfg, plan, MPI_COMM_WORLD));
    osdp_check_all(osdp_train_check_resumed(&ckpt, job, &r));
    osdp_check_all(osdp_train_ckpt_check_steps(&ckpt, (long)job->steps, job->dump_weights != NULL));
    osdp_report report = {0};
    if (evaluating) {   /* train's validation of the loaded weights, no step (job->steps is 0) */
        s = osdp_eval_run(&val, &rt, job, &ckpt.loaded, mesh);
        if (s != OSDP_OK) fatal_with_hint(s, job);
    } else {
        osdp_report_open(&report, &rt, &world, mesh, &r.whole_model, &predicted, job->peak_flops, job->log, job->quiet,
                         (long)job->log_every);
        osdp_check_all(report.status);
        report.continue_on_write_error = job->on_write_error == OSDP_ON_WRITE_ERROR_CONTINUE;
        report.predicted_step_s = osdp_job_predicted_step_s(&r);
        osdp_report_header(&report, &cfg, &data, plan, (long)job->steps, global);
    }

    for (long step = rt.step; step < job->steps; step++) {
        osdp_step_stats stats;
        s = train_step(&rt, &data, &stats);
        if (s == OSDP_ERR_NUMERIC) osdp_check_all(s);   /* the loss is all-reduced: every rank sees it */
        if (s != OSDP_OK) fatal_with_hint(s, job);
        if (osdp_validation_due(&val, stats.step, (long)job->steps)) {
            s = osdp_validation_run(&val, &rt, &stats.val_loss);
            if (s != OSDP_OK) fatal_with_hint(s, job);
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
    if (mesh->tp > 1) osdp_comm_destroy(&tp_comm);
    if (mesh->pp > 1) {
        osdp_comm_destroy(&pp_fwd_comm);
        osdp_comm_destroy(&pp_bwd_comm);
    }
    if (nodes_made) {
        osdp_comm_destroy(&node_comm);
        osdp_comm_destroy(&cross_comm);
    }
    osdp_comm_destroy(&comm);
    osdp_job_resolved_free(&r);
    osdp_train_sample_close(&samples);
    osdp_validation_close(&val);
    osdp_data_close(&data);
    MPI_Finalize();
    return 0;
}

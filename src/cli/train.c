/* osdp_gpt train: the training job's top level. */
#include "config.h"
#include "osdp/app.h"
#include "osdp/comm.h"
#include "osdp/compute.h"
#include "osdp/data.h"
#include "osdp/device.h"
#include "osdp/layout.h"
#include "osdp/plan.h"
#include "osdp/planner.h"
#include "osdp/cost_model.h"
#include "osdp/report.h"
#include "osdp/runtime.h"
#include "osdp/train_checkpoint.h"

#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct train_args {
    const char *model, *data, *plan, *log, *dump_weights, *backend;
    long steps;
    int batch, global_batch, seq_len, threads, prefetch, quiet;
    size_t mem_limit;
    unsigned long long seed;
    double peak_flops;
    osdp_optim_config optim;
    int total_steps_given;
    const char *device;     /* --plan auto: device information file */
    int batch_given;        /* --batch given: --plan auto plans for it */
    int split;              /* --split G (0: not given, -1: auto) */
    int recompute;          /* --recompute: 0 none, 1 all, -1 auto */
    osdp_cost_kind cost;    /* --cost-model: the planner's and pred_step_s's step time */
    int precision_given;    /* --precision given (else the backend's default) */
    osdp_dtype weights;     /* working weights and their all-gathers */
} train_args;

static void train_usage(FILE *out)
{
    fprintf(out,
        "usage: osdp_gpt train [options]        (under mpiexec / srun for N ranks)\n"
        "  --model FILE          model description (default: input/models/tiny.ini)\n"
        "  --data FILE|DIR       llm.c .bin shard, directory of shards, or a text file\n"
        "                        (default: input/data/addition.txt)\n"
        "  --steps N             optimizer steps (default 100)\n"
        "  --batch B             sequences per rank per micro-step (default: the planner's\n"
        "                        choice with --plan auto, else 8)\n"
        "  --global-batch G      sequences per optimizer step over all ranks (default B x ranks,\n"
        "                        8 x ranks when the planner picks B; a multiple of B x ranks)\n"
        "  --seq-len T           tokens per sequence (default: the model's ctx)\n"
        "  --plan auto|dp|zdp|FILE  the planner's plan (default auto: modes per operator, and the\n"
        "                        micro-batch and accumulation unless --batch is given), DP or ZDP\n"
        "                        for every operator, or a plan file\n"
        "  --split G|auto        operator splitting: --plan auto searches k of G slices ZDP per\n"
        "                        operator (auto: k of any G in 1, 2, 4, 8, G per operator); --plan\n"
        "                        zdp makes every operator G/G (default 1: no splitting)\n"
        "  --recompute none|all|auto  activation checkpointing of attn and mlp operators\n"
        "                        (default none: only where a plan file says 'recompute'; auto:\n"
        "                        the planner chooses per operator, with --plan auto)\n"
        "  --device FILE         device information for --plan auto\n"
        "                        (default: input/devices/cpu_2core.ini; --mem-limit overrides its limit)\n"
        "  --cost-model paper|overlap  step time for --plan auto and the logged pred_step_s:\n"
        "                        compute + comm (paper eq. 2), or per operator max(compute, comm)\n"
        "                        with prefetch (default paper)\n"
        "  --mem-limit BYTES     emulated device memory per rank: 8G, 512M, ...\n"
        "  --no-prefetch         do not overlap all-gathers / reduce-scatters with compute\n"
        "  --seed S              weights and data order (default 1337)\n"
        "  --lr X --warmup N --min-lr-frac X --weight-decay X --grad-clip X\n"
        "                        AdamW and schedule (defaults 1e-3, 10, 0.1, 0.1, 1.0)\n"
        "  --lr-steps N          cosine horizon (default: --steps)\n"
        "  --threads N           compute threads per rank (default: node cores / ranks on node)\n"
        "  --backend cpu|cuda    compute backend (default cpu)\n"
        "  --precision bf16|fp32 working weights and their all-gathers (default: bf16 with cuda,\n"
        "                        fp32 on cpu, where bf16 only tests the mixed-precision path);\n"
        "                        master weights, AdamW moments, gradients and their\n"
        "                        reduce-scatters, activations: always fp32\n"
        "  --peak-flops X        device peak FLOP/s for MFU (default: measured sgemm rate)\n"
        "  --log FILE            machine-readable per-step record (rank 0)\n"
        "  --dump-weights FILE   after training, write every parameter as float32 (rank 0)\n"
        "  --quiet               only the summary line\n");
    osdp_train_ckpt_usage(out);
}

static osdp_status parse_train_args(int argc, char **argv, train_args *a)
{
    static char model_buf[4096], data_buf[4096], device_buf[4096];
    memset(a, 0, sizeof *a);
    a->model = osdp_default_input("models/tiny.ini", model_buf, sizeof model_buf);
    a->data = osdp_default_input("data/addition.txt", data_buf, sizeof data_buf);
    a->plan = "auto"; /* DESIGN.md §7: the planner decides unless told otherwise */
    a->device = osdp_default_input("devices/cpu_2core.ini", device_buf, sizeof device_buf);
    a->backend = "cpu";
    a->steps = 100;
    a->batch = 8;
    a->prefetch = 1;
    a->seed = 1337;
    a->cost = OSDP_COST_PAPER;
    osdp_optim_defaults(&a->optim);
    enum { O_LR = 256, O_WARMUP, O_MINLR, O_WD, O_CLIP, O_LRSTEPS, O_NOPREFETCH, O_THREADS, O_LOG, O_DUMP,
           O_GB, O_SEQ, O_MEM, O_SEED, O_PEAK, O_BACKEND, O_QUIET, O_HELP, O_DEVICE, O_SPLIT, O_RECOMPUTE, O_COST, O_PRECISION };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"data", required_argument, 0, 'd'},
        {"steps", required_argument, 0, 's'}, {"batch", required_argument, 0, 'b'},
        {"global-batch", required_argument, 0, O_GB}, {"seq-len", required_argument, 0, O_SEQ},
        {"plan", required_argument, 0, 'p'}, {"mem-limit", required_argument, 0, O_MEM},
        {"no-prefetch", no_argument, 0, O_NOPREFETCH}, {"seed", required_argument, 0, O_SEED},
        {"lr", required_argument, 0, O_LR}, {"warmup", required_argument, 0, O_WARMUP},
        {"min-lr-frac", required_argument, 0, O_MINLR}, {"weight-decay", required_argument, 0, O_WD},
        {"grad-clip", required_argument, 0, O_CLIP}, {"lr-steps", required_argument, 0, O_LRSTEPS},
        {"threads", required_argument, 0, O_THREADS}, {"log", required_argument, 0, O_LOG},
        {"dump-weights", required_argument, 0, O_DUMP}, {"peak-flops", required_argument, 0, O_PEAK},
        {"backend", required_argument, 0, O_BACKEND}, {"quiet", no_argument, 0, O_QUIET},
        {"help", no_argument, 0, O_HELP}, {"device", required_argument, 0, O_DEVICE},
        {"split", required_argument, 0, O_SPLIT}, {"recompute", required_argument, 0, O_RECOMPUTE},
        {"cost-model", required_argument, 0, O_COST}, {"precision", required_argument, 0, O_PRECISION},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "m:d:s:b:p:", opts, NULL)) != -1) {
        char *end = NULL;
        const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
#define NUM(dst, conv, lo, hi) do { double v_ = strtod(optarg, &end); \
        if (end == optarg || *end || !(v_ >= (lo) && v_ <= (hi)) || v_ != v_) \
            return osdp_error_set(OSDP_ERR_INPUT, "%s '%s': expected a number in [%g, %g]", name, optarg, (double)(lo), (double)(hi)); \
        dst = (conv)v_; } while (0)
        switch (c) {
        case 'm': a->model = optarg; break;
        case 'd': a->data = optarg; break;
        case 's': NUM(a->steps, long, 0, 1e12); break;
        case 'b': NUM(a->batch, int, 1, 1 << 20); a->batch_given = 1; break;
        case O_DEVICE: a->device = optarg; break;
        case O_SPLIT:
            if (strcmp(optarg, "auto") == 0) a->split = -1;
            else NUM(a->split, int, 1, OSDP_MAX_SLICES);
            break;
        case O_RECOMPUTE:
            if (strcmp(optarg, "none") == 0) a->recompute = 0;
            else if (strcmp(optarg, "all") == 0) a->recompute = 1;
            else if (strcmp(optarg, "auto") == 0) a->recompute = -1;
            else return osdp_error_set(OSDP_ERR_INPUT, "--recompute '%s': expected none, all or auto", optarg);
            break;
        case O_COST:
            if (strcmp(optarg, "paper") == 0) a->cost = OSDP_COST_PAPER;
            else if (strcmp(optarg, "overlap") == 0) a->cost = OSDP_COST_OVERLAP;
            else return osdp_error_set(OSDP_ERR_INPUT, "--cost-model '%s': expected paper or overlap", optarg);
            break;
        case O_GB: NUM(a->global_batch, int, 1, 1 << 30); break;
        case O_SEQ: NUM(a->seq_len, int, 1, 1 << 20); break;
        case 'p': a->plan = optarg; break;
        case O_MEM:
            if (osdp_parse_bytes(optarg, &a->mem_limit) != 0)
                return osdp_error_set(OSDP_ERR_INPUT, "--mem-limit '%s': expected bytes such as 8G, 512M or 1000000", optarg);
            break;
        case O_NOPREFETCH: a->prefetch = 0; break;
        case O_SEED: NUM(a->seed, unsigned long long, 0, 1.8e19); break;
        case O_LR: NUM(a->optim.lr, float, 0, 10); break;
        case O_WARMUP: NUM(a->optim.warmup_steps, int, 0, 1e9); break;
        case O_MINLR: NUM(a->optim.min_lr_frac, float, 0, 1); break;
        case O_WD: NUM(a->optim.weight_decay, float, 0, 10); break;
        case O_CLIP: NUM(a->optim.grad_clip, float, 0, 1e9); break;
        case O_LRSTEPS: NUM(a->optim.total_steps, long, 1, 1e12); a->total_steps_given = 1; break;
        case O_THREADS: NUM(a->threads, int, 1, 4096); break;
        case O_LOG: a->log = optarg; break;
        case O_DUMP: a->dump_weights = optarg; break;
        case O_PEAK: NUM(a->peak_flops, double, 1, 1e20); break;
        case O_BACKEND: a->backend = optarg; break;
        case O_PRECISION:
            if (strcmp(optarg, "bf16") == 0) a->weights = OSDP_BFLOAT16;
            else if (strcmp(optarg, "fp32") == 0) a->weights = OSDP_FLOAT32;
            else return osdp_error_set(OSDP_ERR_INPUT, "--precision '%s': expected bf16 or fp32", optarg);
            a->precision_given = 1;
            break;
        case O_QUIET: a->quiet = 1; break;
        case O_HELP: train_usage(stdout); return OSDP_ERR_INTERNAL + 100;
        case '?':
        default:
            if (optopt) return osdp_error_set(OSDP_ERR_INPUT, "train: option -%c needs a value or is unknown (see osdp_gpt train --help)", optopt);
            return osdp_error_set(OSDP_ERR_INPUT, "train: unknown option or missing value: %s (see osdp_gpt train --help)", argv[optind - 1]);
        }
#undef NUM
    }
    if (optind < argc)
        return osdp_error_set(OSDP_ERR_INPUT, "train: unexpected argument '%s' (see osdp_gpt train --help)", argv[optind]);
    if (!a->total_steps_given) a->optim.total_steps = a->steps > 0 ? a->steps : 1;
    if (!a->precision_given) a->weights = strcmp(a->backend, "cuda") == 0 ? OSDP_BFLOAT16 : OSDP_FLOAT32;
    int plan_auto = strcmp(a->plan, "auto") == 0, plan_mode = plan_auto || !strcmp(a->plan, "dp") || !strcmp(a->plan, "zdp");
    if (a->split == -1 && !plan_auto)
        return osdp_error_set(OSDP_ERR_INPUT, "--split auto needs --plan auto (the planner chooses the granularity)");
    if (a->split > 1 && !plan_mode)
        return osdp_error_set(OSDP_ERR_INPUT, "--split %d applies to --plan auto, dp or zdp; a plan file gives k/g per operator",
                              a->split);
    if (a->recompute == -1 && !plan_auto)
        return osdp_error_set(OSDP_ERR_INPUT, "--recompute auto needs --plan auto (the planner chooses where)");
    return OSDP_OK;
}

/* The device file for planning a run of this binary: the plan must count the
 * runtime's element sizes whatever the file gives (`plan` keeps the file's:
 * it also answers what-if questions such as the paper's fp16 setting).  The
 * runtime gathers weights of --precision, and holds and reduces gradients
 * and activations in fp32 (osdp/runtime.h). */
static osdp_status device_load_for_runtime(osdp_device *dev, const char *path, osdp_dtype weights)
{
    osdp_status s = osdp_device_load(dev, path);
    if (s == OSDP_OK) {
        dev->param_bytes = (int)osdp_dtype_size(weights);
        dev->grad_bytes = dev->act_bytes = (int)sizeof(float);
    }
    return s;
}

/* --plan auto: rank 0 plans (device file, --mem-limit, --global-batch, and
 * --batch when given), prints the plan and broadcasts it; every rank returns
 * the same status. */
static osdp_status plan_auto(osdp_plan *plan, const osdp_layout *layout, const train_args *a, int n_ranks, int rank)
{
    int head[3] = {OSDP_OK, 0, 0}; /* status, micro-batch, accumulation */
    if (rank == 0) {
        osdp_device dev;
        osdp_planner_options o;
        osdp_planner_result r;
        memset(&r, 0, sizeof r);
        osdp_planner_defaults(&o);
        o.n_ranks = n_ranks;
        o.mem_limit = (long long)a->mem_limit;
        /* the global batch is a training hyperparameter (it shapes the loss
         * curve), the micro-batch a systems choice: without --global-batch
         * the planner splits the same 8 x ranks sequences per step that a
         * run without --plan auto takes, into micro-batch x accumulation */
        o.global_batch = a->global_batch ? a->global_batch : a->batch * n_ranks;
        o.micro_batch = a->batch_given ? a->batch : 0;
        o.prefetch = a->prefetch;
        o.cost = a->cost;
        o.split = a->split > 0 ? a->split : 1;
        o.split_auto = a->split == -1;
        o.recompute_auto = a->recompute == -1;
        int *all = NULL;
        if (a->recompute == 1 && (all = calloc((size_t)layout->n_ops, sizeof *all)) != NULL) {
            for (int i = 0; i < layout->n_ops; i++)
                all[i] = layout->op[i].type == OSDP_OP_ATTN || layout->op[i].type == OSDP_OP_MLP;
            o.recompute = all;
        }
        osdp_status s = device_load_for_runtime(&dev, a->device, a->weights);
        if (s == OSDP_OK) s = osdp_planner_run(layout, &dev, &o, &r);
        if (s == OSDP_OK) s = osdp_plan_copy(plan, &r.plan);
        if (s == OSDP_OK && !a->quiet) osdp_plan_print(layout, &dev, &o, &r);
        osdp_planner_result_free(&r);
        free(all);
        head[0] = (int)s;
        head[1] = plan->micro_batch;
        head[2] = plan->accum_steps;
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
    plan->micro_batch = head[1];
    plan->accum_steps = head[2];
    return OSDP_OK;
}

/* --split G on an all-DP / all-ZDP plan, --recompute all on any plan */
static void plan_apply_options(osdp_plan *plan, const osdp_layout *layout, const train_args *a, int uniform)
{
    for (int i = 0; i < layout->n_ops; i++) {
        const osdp_op_layout *op = &layout->op[i];
        if (uniform && a->split > 1 && op->type != OSDP_OP_EMBED) {   /* the embedding cannot be split */
            plan->zdp_slices[i] = plan->zdp_slices[i] ? a->split : 0;
            plan->slices[i] = a->split;
        }
        if (a->recompute == 1) plan->recompute[i] = op->type == OSDP_OP_ATTN || op->type == OSDP_OP_MLP;
    }
}

static osdp_status load_plan(osdp_plan *plan, const osdp_layout *layout, train_args *a, int n_ranks, int rank)
{
    const char *spec = a->plan;
    if (strcmp(spec, "dp") == 0 || strcmp(spec, "zdp") == 0) {
        osdp_status s = osdp_plan_alloc(plan, layout->n_ops);
        if (s == OSDP_OK) osdp_plan_fill(plan, strcmp(spec, "zdp") == 0);
        if (s == OSDP_OK) plan_apply_options(plan, layout, a, 1);
        return s;
    }
    if (strcmp(spec, "auto") == 0) {
        if (a->batch_given && a->global_batch && a->global_batch % (a->batch * n_ranks) != 0)
            return osdp_error_set(OSDP_ERR_INPUT, "--global-batch %d is not a multiple of --batch %d x %d ranks = %d",
                                  a->global_batch, a->batch, n_ranks, a->batch * n_ranks);
        osdp_status s = plan_auto(plan, layout, a, n_ranks, rank);
        if (s == OSDP_OK) { /* the planner's micro-batch and accumulation */
            a->batch = plan->micro_batch;
            a->global_batch = plan->micro_batch * plan->accum_steps * n_ranks;
        }
        return s;
    }
    osdp_status s = osdp_plan_load(plan, layout, spec);
    if (s == OSDP_OK) plan_apply_options(plan, layout, a, 0);
    return s;
}

/* The cost model's step time (--cost-model) for the plan in use (whatever
 * chose it), with the device file of --plan auto: for the log, beside the
 * measured time.
 * 0 when the device file cannot be read (not an error: only --plan auto
 * needs one). */
static double predicted_step_time(const osdp_layout *layout, const osdp_plan *plan, const train_args *a, int n_ranks)
{
    osdp_device dev;
    if (device_load_for_runtime(&dev, a->device, a->weights) != OSDP_OK) return 0;
    osdp_cost_model cm = {.layout = layout, .dev = &dev, .N = n_ranks, .prefetch = a->prefetch, .kind = a->cost};
    return osdp_cost_step_time(&cm, plan, plan->micro_batch, plan->accum_steps);
}

/* Gather each operator in turn (never the whole model at once) and append
 * its logical parameters to `path` on rank 0. */
static osdp_status dump_weights(osdp_runtime *rt, const char *path)
{
    FILE *f = NULL;
    osdp_status s = OSDP_OK;
    if (rt->rank == 0 && !(f = fopen(path, "wb")))
        s = osdp_error_set(OSDP_ERR_IO, "cannot write %s", path);
    for (int i = 0; i < rt->layout->n_ops && s == OSDP_OK; i++) {
        float *full = malloc(rt->layout->op[i].numel * sizeof(float));
        if (!full) s = osdp_error_set(OSDP_ERR_OOM, "dump: out of host memory");
        if (s == OSDP_OK) s = osdp_runtime_gather_op(rt, i, full);
        if (s == OSDP_OK && f && fwrite(full, sizeof(float), rt->layout->op[i].numel, f) != rt->layout->op[i].numel)
            s = osdp_error_set(OSDP_ERR_IO, "short write to %s", path);
        free(full);
    }
    if (f && fclose(f) != 0 && s == OSDP_OK) s = osdp_error_set(OSDP_ERR_IO, "cannot close %s", path);
    return s;
}

/* One optimizer step on this rank's micro-batches, read here: the runtime
 * takes them as (accum, 2, B, T), per micro-step the inputs, then the targets. */
static osdp_status train_step(osdp_runtime *rt, const osdp_dataset *data, osdp_step_stats *stats)
{
    const size_t bt = (size_t)rt->B * (size_t)rt->T;
    int *tokens = malloc(2 * bt * (size_t)rt->opt.accum_steps * sizeof(int));
    if (!tokens) return osdp_error_set(OSDP_ERR_OOM, "train: out of host memory for the batches");
    for (int micro = 0; micro < rt->opt.accum_steps; micro++) {
        int *inputs = tokens + 2 * bt * (size_t)micro;
        long first = ((long)micro * rt->N + rt->rank) * rt->B;
        osdp_data_batch(data, rt->opt.seed, rt->step, first, rt->B, rt->T, inputs, inputs + bt);
    }
    osdp_status s = osdp_runtime_step(rt, tokens, stats);
    free(tokens);
    return s;
}

int osdp_cmd_train(int argc, char **argv)
{
    osdp_world world;
    train_args a;
    osdp_train_ckpt ckpt;
    osdp_status s = osdp_train_ckpt_parse(&ckpt, &argc, argv);   /* removes its own options from argv */
    if (s == OSDP_OK) s = parse_train_args(argc, argv, &a);
    if (s == OSDP_ERR_INTERNAL + 100) { MPI_Finalize(); return 0; }
    osdp_check_all(s);
    osdp_world_init(&world, a.threads);

    const osdp_compute_backend *backend = osdp_compute_find(a.backend, a.weights);
    osdp_check_all(backend ? OSDP_OK : osdp_error_set(OSDP_ERR_INPUT, "--backend %s: not built (have: cpu%s)", a.backend,
#ifdef OSDP_HAVE_CUDA
                                                      ", cuda"
#else
                                                      ""
#endif
                                                      ));
    osdp_check_all(backend->init(world.local_rank, world.threads));

    osdp_model_config cfg;
    osdp_check_all(osdp_model_config_load(&cfg, a.model));
    int T = a.seq_len ? a.seq_len : cfg.ctx;
    osdp_layout layout;
    osdp_check_all(osdp_layout_build(&layout, &cfg, T));
    osdp_dataset data;
    osdp_check_all(osdp_data_open(&data, a.data, cfg.vocab, T));
    osdp_plan plan;
    osdp_check_all(load_plan(&plan, &layout, &a, world.size, world.rank));

    int per_micro = a.batch * world.size;
    int global = a.global_batch ? a.global_batch : per_micro;
    osdp_check_all(global % per_micro == 0 ? OSDP_OK
                   : osdp_error_set(OSDP_ERR_INPUT, "--global-batch %d is not a multiple of --batch %d x %d ranks = %d",
                                    global, a.batch, world.size, per_micro));
    plan.micro_batch = a.batch;
    plan.accum_steps = global / per_micro;

    /* every rank must run the same job */
    osdp_check_same(osdp_model_config_hash(&cfg), "model description");
    osdp_check_same(data.hash ^ (unsigned long long)data.n_tokens, "training data");
    osdp_check_same(osdp_plan_hash(&plan), "plan");

    /* device buffers need the device's collectives: NCCL beside the CUDA
     * backend (host buffers in the same calls fall back to MPI), MPI otherwise */
    osdp_comm comm;
#ifdef OSDP_HAVE_CUDA
    if (strcmp(backend->name, "cuda") == 0)
        osdp_check_all(osdp_comm_create_nccl(&comm, &(MPI_Comm){MPI_COMM_WORLD}, world.local_rank));
    else
#endif
        osdp_check_all(osdp_comm_create_mpi(&comm, &(MPI_Comm){MPI_COMM_WORLD}));

    osdp_memory_prediction predicted;
    osdp_check_all(osdp_memory_predict(&layout, &plan, world.size, a.batch, plan.accum_steps, a.prefetch, a.weights,
                                       &predicted));

    osdp_runtime_options opt = {.micro_batch = a.batch, .accum_steps = plan.accum_steps, .prefetch = a.prefetch,
                                .mem_limit = a.mem_limit, .seed = a.seed, .optim = a.optim, .weight_dtype = a.weights};
    osdp_runtime rt;
    s = osdp_runtime_create(&rt, &layout, &plan, &comm, backend, &opt);
    if (s != OSDP_OK) osdp_fatal(s, osdp_error_message());

    osdp_report report;
    osdp_report_open(&report, &rt, &world, &predicted, a.peak_flops, a.log, a.quiet);
    osdp_check_all(report.status);
    report.predicted_step_s = predicted_step_time(&layout, &plan, &a, world.size);
    osdp_report_header(&report, &cfg, &data, &plan, a.steps, global);

    osdp_check_all(osdp_train_ckpt_start(&ckpt, &rt, &cfg, &plan, MPI_COMM_WORLD));
    for (long step = rt.step; step < a.steps; step++) {
        osdp_step_stats stats;
        s = train_step(&rt, &data, &stats);
        if (s == OSDP_ERR_NUMERIC) osdp_check_all(s);   /* the loss is all-reduced: every rank sees it */
        if (s != OSDP_OK) osdp_fatal(s, osdp_error_message());
        osdp_report_step(&report, &stats);
        int stop = 0;
        osdp_check_all(osdp_train_ckpt_after_step(&ckpt, &stop));
        if (stop) break;
    }
    osdp_check_all(osdp_train_ckpt_finish(&ckpt));
    osdp_report_summary(&report);
    if (a.dump_weights) {
        s = dump_weights(&rt, a.dump_weights);
        if (s != OSDP_OK) osdp_fatal(s, osdp_error_message());
    }
    osdp_report_close(&report);
    osdp_runtime_destroy(&rt);
    osdp_comm_destroy(&comm);
    osdp_plan_free(&plan);
    osdp_data_close(&data);
    osdp_layout_free(&layout);
    MPI_Finalize();
    return 0;
}

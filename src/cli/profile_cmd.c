/* osdp_gpt profile: measures the device information file's numbers on the
 * real ranks (DESIGN.md §4).  The network's figures are measured by
 * src/cli/profile_network.c, the compute's here.
 *
 *   alpha, beta: the real all-gather and reduce-scatter of the comm layer
 *   (blocking, fp32) over all ranks (two levels: over each node's ranks,
 *   and across nodes, osdp_profile_levels) at several total sizes S; each point
 *   is the median over repetitions of the slowest rank's time; a
 *   least-squares fit of t = call + (N-1)(alpha + S/N beta), weighted by
 *   1/t^2 (relative errors, so that the small sizes fix the latency and the
 *   large ones the bandwidth), with call >= 0 and alpha >= 0
 *   (osdp/collective_fit.h); call is fitted only where two group sizes tell
 *   it from alpha (across nodes), else it is 0.
 *   p2p, internode_p2p: the pipeline's point-to-point message, a ping-pong
 *   of rank pairs inside a node and across two.
 *   tp_all_reduce: the tensor-parallel group's all-reduce over groups of
 *   consecutive ranks, for each group size the ranks allow inside a node
 *   (osdp_profile_tp_all_reduce); ranks_per_node: the run's ranks on the node.
 *   gamma: per operator type, the summed forward + backward time of the
 *   model's operators of that type in whole-model passes (time_model: each
 *   operator with its own buffers, as a training step runs them; every rank
 *   at once, in lockstep, the slowest rank (where ranks share the machine's
 *   cores, from the common start to the last one's end: core_sharing);
 *   median of the passes) at
 *   micro-batches b = 1, 2, 4, 8 (the range the scheduler picks from on
 *   CPU); a least-squares line through that time against b T F summed over
 *   the type's operators (F: osdp_cost_op_flops), weighted by relative
 *   error, gives gamma (its slope) and gamma_fixed (its intercept over the
 *   type's operator count: what a micro-step costs whatever its size; a
 *   negative intercept falls back to the slope through the origin).  Why not one operator timed alone, the
 *   fastest run of each rank, averaged over ranks: repeated alone, an
 *   operator finds its weights hot in cache; on a shared or oversubscribed
 *   node one rank often runs alone for a moment, so the best run measures
 *   an idle machine; and the average hides the rank the others wait for.
 *   Predicted steps came out tens of % (oversubscribed: several times) too
 *   fast.
 *   mem_limit: --mem-limit, or the node's physical memory / ranks per node;
 *   with --backend cuda, the GPU's free memory (the smallest over the ranks)
 *   right after the NCCL communicator's warm-up, less OSDP_DEVICE_MEM_MARGIN
 *   (--mem-limit where smaller): osdp_memory_cap_to_free.
 *
 * --backend cuda (issue 30): the operators run on the CUDA backend (bf16 by
 * default, --precision) and each one's time is the device's (CUDA events
 * around its kernels: the table's timer entries); the collectives and
 * messages move device buffers over NCCL.  On 1 rank (one GPU) with
 * --device FILE, the network figures are that file's and only gamma, the
 * step work and mem_limit are measured. */
#include "config.h"
#include "cli/app.h"
#include "util/clock.h"
#include "osdp/comm.h"
#include "osdp/compute.h"
#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/gpt.h"
#include "osdp/init.h"
#include "osdp/layout.h"
#include "osdp/memory.h"
#include "osdp/optim.h"
#include "options.h"
#include "profile_network.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct fit { double c0, c1, r2; } fit;

/* weighted least squares y = c0 + c1 x (origin: c0 = 0), weights w (NULL:
 * all 1); r2 = 1 - SSres / SStot, both weighted */
static fit line_fit(const double *x, const double *y, const double *w, int n, int origin)
{
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        double wi = w ? w[i] : 1;
        sw += wi; sx += wi * x[i]; sy += wi * y[i]; sxx += wi * x[i] * x[i]; sxy += wi * x[i] * y[i];
    }
    fit f = {0, 0, 0};
    if (origin) f.c1 = sxy / sxx;
    else {
        double den = sw * sxx - sx * sx;
        f.c1 = (sw * sxy - sx * sy) / den;
        f.c0 = (sy - f.c1 * sx) / sw;
    }
    double my = sy / sw, res = 0, tot = 0;
    for (int i = 0; i < n; i++) {
        double wi = w ? w[i] : 1, e = y[i] - (f.c0 + f.c1 * x[i]);
        res += wi * e * e;
        tot += wi * (y[i] - my) * (y[i] - my);
    }
    f.r2 = tot > 0 ? 1 - res / tot : 1;
    return f;
}

/* The compute timings' synchronisation.  Every timing starts at a barrier
 * over the world.  Where this machine's ranks x threads outnumber its cores
 * (emulated ranks, make check), ranks that share a core take turns
 * within an operator: each measured only its own run, which hid the wait
 * (at micro-batch 1 four ranks on two cores timed an operator as one rank
 * alone, at 8 as 1.9x), and a training step, whose ranks compute back to
 * back, took 30% longer than predicted.  There a timing also ends at a
 * barrier over the machine's ranks, so that it spans from the common start
 * to the last of them.  Both barriers wait as the comm layer's calls do,
 * yielding the core (MPI's own barrier spins on it). */
typedef struct core_sharing {
    osdp_comm *world;     /* every rank */
    osdp_comm *machine;   /* the ranks on this machine when they outnumber its cores, else NULL */
} core_sharing;

static osdp_status core_sharing_wait(const core_sharing *cores)
{
    return cores->machine ? osdp_comm_barrier(cores->machine) : OSDP_OK;
}

/* The whole model's forward (ops 0..n-1) then backward (n-1..0) at
 * micro-batch B, every operator with its own weights, gradients and
 * activations, as in a training step: an operator finds its weights and its
 * input wherever the previous operators left the caches, not hot from its
 * own previous run (timed alone and repeated, mlp of bench_l4_d512 ran 40%
 * faster than inside a step).  Every rank at once, a barrier before each
 * operator's forward and backward (the collectives between operators keep
 * the ranks in step; core_sharing: and one after it where ranks share
 * cores), and an operator's time is its slowest rank's.
 * by_type[t] gets, for each type, the median over reps of the summed
 * forward + backward time of the operators of that type (collective: every
 * rank must call it, and gets the same answer). */
static osdp_status time_model(const osdp_compute_backend *be, const osdp_layout *L, int B, int reps,
                              const core_sharing *cores, double by_type[OSDP_N_OP_TYPES])
{
    const int n = L->n_ops;
    const size_t bt = (size_t)B * (size_t)L->T, nws = osdp_workspace_floats(L, B);
    float **w = calloc((size_t)n, sizeof *w), **g = calloc((size_t)n, sizeof *g), **act = calloc((size_t)n, sizeof *act);
    osdp_op_acts *a = calloc((size_t)n, sizeof *a);
    double *t = calloc((size_t)(reps + 1) * OSDP_N_OP_TYPES, sizeof *t);
    float *ws_base = be->alloc(nws * sizeof(float)), *host = malloc(L->max_op_numel * sizeof(float));
    int *tok = malloc(bt * sizeof(int));
    /* the head's staging (a fused or vocab-parallel cross-entropy), as the runtime's */
    const size_t staging_floats = (size_t)B * L->op[n - 1].tp_floats_per_seq;
    float *staging = staging_floats ? be->alloc(staging_floats * sizeof(float)) : NULL;
    osdp_status s = OSDP_OK;
    if (!w || !g || !act || !a || !t || !ws_base || !host || !tok || (staging_floats && !staging)) s = OSDP_ERR_OOM;
    for (int i = 0; i < n && s == OSDP_OK; i++) {
        const osdp_op_layout *o = &L->op[i];
        w[i] = be->alloc(o->numel * sizeof(float));
        g[i] = be->alloc(o->numel * sizeof(float));
        act[i] = be->alloc((size_t)B * o->act_floats_per_seq * sizeof(float));
        if (!w[i] || !g[i] || !act[i]) {
            s = OSDP_ERR_OOM;
            break;
        }
        osdp_init_op_range(o, i, 1, 0, o->numel, host);
        float *master = be->convert_weights ? be->alloc(o->numel * sizeof(float)) : w[i];
        if (!master) {
            s = OSDP_ERR_OOM;
            break;
        }
        be->to_device(master, host, o->numel * sizeof(float));
        if (master != w[i]) {   /* bf16 working weights, made as training makes them */
            be->convert_weights(w[i], master, o->numel);
            be->free(master);
        }
        osdp_op_acts_carve(L, i, B, act[i], &a[i]);
    }
    if (s != OSDP_OK) {
        s = osdp_error_set(OSDP_ERR_OOM, "profile: out of memory for the model's weights and activations at micro-batch %d "
                                         "(profile a smaller model or --seq-len with the same layer widths)", B);
        goto done;
    }
    for (size_t i = 0; i < bt; i++) tok[i] = (int)(i * 7 % (size_t)L->cfg.vocab);
    osdp_op_context ctx = {.backend = be, .layout = L, .B = B, .T = L->T, .embed_weights = w[0], .embed_grads = g[0],
                           .tp_staging = staging};
    osdp_workspace ws;
    osdp_workspace_carve(L, B, ws_base, &ws);
    for (int r = 0; r <= reps; r++) { /* r = 0: warm-up */
        double *tr = t + (size_t)r * OSDP_N_OP_TYPES;
        be->to_device(a[0].tokens, tok, bt * sizeof(int));
        be->to_device(a[n - 1].tokens, tok, bt * sizeof(int));
        be->fill_zero(ws_base, nws * sizeof(float));
        ws.cur = 0;
        for (int u = 0; u < 2 * n; u++) { /* u < n: forward of op u; else backward of op 2n-1-u */
            int i = u < n ? u : 2 * n - 1 - u;
            const float *in = i > 0 ? a[i - 1].out : NULL;
            if (u >= n) be->fill_zero(g[i], L->op[i].numel * sizeof(float)); /* backward accumulates */
            be->synchronize();
            if ((s = osdp_comm_barrier(cores->world)) != OSDP_OK) goto done;
            double t0 = osdp_now_seconds();
            if (be->timer_start) be->timer_start();   /* the device's clock around the operator's kernels */
            if (u < n) osdp_op_forward(&ctx, i, w[i], in, &a[i]);
            else osdp_op_backward(&ctx, i, w[i], g[i], in, &a[i], &ws, 1.0f / (float)bt);
            double slowest;
            if (be->timer_stop) {
                slowest = be->timer_stop();
            } else {
                be->synchronize();
                if ((s = core_sharing_wait(cores)) != OSDP_OK) goto done;
                slowest = osdp_now_seconds() - t0;
            }
            if ((s = osdp_comm_max_double(&(MPI_Comm){MPI_COMM_WORLD}, &slowest, "profile: all-reduce of an operator's "
                                          "times")) != OSDP_OK)
                goto done;
            tr[L->op[i].type] += slowest;
        }
    }
    for (int k = 0; k < OSDP_N_OP_TYPES; k++) {
        double v[OSDP_PROFILE_MAX_REPS];
        for (int r = 1; r <= reps; r++) v[r - 1] = t[(size_t)r * OSDP_N_OP_TYPES + (size_t)k];
        qsort(v, (size_t)reps, sizeof *v, osdp_profile_cmp_double);
        by_type[k] = v[reps / 2];
    }
done:
    for (int i = 0; i < n; i++) {
        if (w && w[i]) be->free(w[i]);
        if (g && g[i]) be->free(g[i]);
        if (act && act[i]) be->free(act[i]);
    }
    if (ws_base) be->free(ws_base);
    if (staging) be->free(staging);
    free(w); free(g); free(act); free(a); free(t); free(host); free(tok);
    return s;
}

/* The work of a step outside the operators, per element (median over reps of
 * the slowest rank): the optimizer step on this rank's shards of the whole
 * model (AdamW, the gradient norm's sum of squares, the reduce-scatter
 * result copied into the gradient shard), and zeroing the full gradients
 * before each backward (collective). */
static osdp_status time_step_work(const osdp_compute_backend *be, const osdp_layout *L, int n_ranks, int reps,
                                  const core_sharing *cores, double *per_shard, double *per_full)
{
    size_t full = 0;
    for (int i = 0; i < L->n_ops; i++) full += osdp_padded_numel_quantum(L->op[i].numel, n_ranks, be->pad_quantum);
    size_t shard = full / (size_t)n_ranks;
    float *st = be->alloc(5 * shard * sizeof(float)), *grads = be->alloc(full * sizeof(float));
    if (!st || !grads) {
        if (st) be->free(st);
        if (grads) be->free(grads);
        return osdp_error_set(OSDP_ERR_OOM, "profile: out of memory for the optimizer state (%zu elements)", shard);
    }
    be->fill_zero(st, 5 * shard * sizeof(float));
    be->fill_zero(grads, full * sizeof(float));
    double to[OSDP_PROFILE_MAX_REPS], tz[OSDP_PROFILE_MAX_REPS];
    osdp_optim_config oc;   /* train's defaults: the update a step makes */
    osdp_optim_defaults(&oc);
    osdp_status s = OSDP_OK;
    for (int r = 0; r <= reps && s == OSDP_OK; r++) {   /* r = 0: warm-up */
        be->synchronize();
        if ((s = osdp_comm_barrier(cores->world)) != OSDP_OK) break;
        double t0 = osdp_now_seconds();
        be->copy(st + shard, st + 4 * shard, shard * sizeof(float));
        (void)be->sum_squares(st + shard, shard);
        be->adamw(st, st + shard, st + 2 * shard, st + 3 * shard, shard, oc.lr, oc.beta1, oc.beta2, oc.eps,
                  oc.weight_decay, 1.0f, r + 1);
        be->synchronize();
        if ((s = core_sharing_wait(cores)) != OSDP_OK) break;
        double t1 = osdp_now_seconds();
        be->fill_zero(grads, full * sizeof(float));
        be->synchronize();
        if ((s = core_sharing_wait(cores)) != OSDP_OK) break;
        double slowest[2] = {t1 - t0, osdp_now_seconds() - t1};
        MPI_Comm world = MPI_COMM_WORLD;
        for (int k = 0; k < 2 && s == OSDP_OK; k++)
            s = osdp_comm_max_double(&world, &slowest[k], "profile: all-reduce of the step work's times");
        if (r > 0) { to[r - 1] = slowest[0]; tz[r - 1] = slowest[1]; }
    }
    if (s != OSDP_OK) {
        be->free(st);
        be->free(grads);
        return s;
    }
    qsort(to, (size_t)reps, sizeof *to, osdp_profile_cmp_double);
    qsort(tz, (size_t)reps, sizeof *tz, osdp_profile_cmp_double);
    *per_shard = to[reps / 2] / (double)shard;
    *per_full = tz[reps / 2] / (double)full;
    be->free(st);
    be->free(grads);
    return OSDP_OK;
}

int osdp_cmd_profile(const osdp_job *job)
{
    const char *model = job->model, *out = job->out, *name = job->name;
    size_t mem_limit = (size_t)job->mem_limit;
    int threads = (int)job->threads, reps = (int)job->reps, seq_len = (int)job->seq_len;
    osdp_world world;
    osdp_world_init(&world, threads);
    osdp_world_emulate(&world, job->ranks_per_node, job->emulate_link, 0);
    const int network_from_file = world.size == 1 && job->device;
    osdp_check_all(world.size >= 2 || network_from_file ? OSDP_OK
                   : osdp_error_set(OSDP_ERR_INPUT, "profile: alpha and beta need at least 2 ranks (mpiexec -n N, N >= 2), "
                                    "or, on 1 rank, --device FILE to keep that file's network figures"));
    osdp_check_all(world.size == 1 || !job->device ? OSDP_OK
                   : osdp_error_set(OSDP_ERR_INPUT, "profile --device: only on 1 rank (%d ranks measure the network)",
                                    world.size));
    const char *backend_name = osdp_option_word("backend", job->backend);
    const osdp_compute_backend *be = osdp_compute_find(backend_name, osdp_job_weights(job));
    osdp_check_all(be ? OSDP_OK : osdp_error_set(OSDP_ERR_INPUT, "profile --backend %s: %s", backend_name,
                                                 osdp_compute_find_failure(backend_name)));
    const int on_gpu = be->mem_info != NULL;
    osdp_status ready = be->init(world.local_rank, world.threads);
    if (ready != OSDP_OK) {   /* "--backend cuda: no usable GPU on this node (...)" becomes profile's */
        char why[1024];
        snprintf(why, sizeof why, "%s", osdp_error_message());
        ready = osdp_error_set(ready, "profile %s", why);
    }
    osdp_check_all(ready);
    osdp_model_config cfg;
    osdp_check_all(osdp_model_config_load(&cfg, model));
    osdp_check_all(osdp_job_apply_kernels(job, be, &cfg));
    osdp_check_all(osdp_job_check_seq_len(job, cfg.ctx));
    osdp_layout L;
    osdp_check_all(osdp_layout_build(&L, &cfg, seq_len > 0 ? seq_len : cfg.ctx));
    /* on a GPU: device buffers over NCCL (its set-up warms up: what is free after it is the card's limit) */
    osdp_profile_network_on(on_gpu ? be : NULL, on_gpu, world.local_rank);
    osdp_comm comm;
    osdp_check_all(osdp_comm_create(&comm, &(MPI_Comm){MPI_COMM_WORLD}, on_gpu, world.local_rank));
    size_t card_free = 0;
    if (on_gpu) {
        size_t total = 0;
        osdp_check_all(be->mem_info(&card_free, &total));
        double fewest = -(double)card_free;   /* the smallest over the ranks */
        osdp_check_all(osdp_comm_max_double(&(MPI_Comm){MPI_COMM_WORLD}, &fewest, "profile: all-reduce of free memory"));
        card_free = (size_t)-fewest;
    }
    const int N = world.size, root = world.rank == 0;
    osdp_device dev;
    memset(&dev, 0, sizeof dev);
    if (network_from_file) osdp_check_all(osdp_device_load(&dev, job->device));   /* its network; the rest measured */
    else dev.param_bytes = dev.grad_bytes = dev.act_bytes = 4;
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    snprintf(dev.name, sizeof dev.name, "%s", name);
    char note[8192];
    int len = snprintf(note, sizeof note,
        "Measured by `osdp_gpt profile` (src/cli/profile_cmd.c) on %s: %d MPI ranks, %d threads per rank, model %s, T %d,\n"
        "--backend %s (%s weights).\n",
        host, N, world.threads, cfg.name, L.T, be->name, be->weight_dtype == OSDP_BFLOAT16 ? "bf16" : "fp32");
    if (network_from_file)
        len += snprintf(note + len, sizeof note - (size_t)len,
                        "alpha, beta, p2p, tp_all_reduce, ranks_per_node, internode: %s's (--device: one rank measures no "
                        "network).\n", job->device);
    else
        len += snprintf(note + len, sizeof note - (size_t)len,
            "alpha/beta: blocking fp32 all-gather / reduce-scatter through the comm layer (%s), median of %d runs of the\n"
            "slowest rank, least-squares fit (relative errors) t = call + (N-1) alpha + (N-1)/N beta S over total sizes S\n"
            "(call >= 0 only where two group sizes tell it from alpha, else 0; alpha >= 0).\n",
            comm.ops->name, reps);

    /* message sizes up to twice the largest operator (fp32), in [1 MiB, 256 MiB] */
    size_t top = 2 * L.max_op_numel * sizeof(float);
    if (top < ((size_t)1 << 20)) top = (size_t)1 << 20;
    if (top > ((size_t)256 << 20)) top = (size_t)256 << 20;
    if (!network_from_file)
        len += snprintf(note + len, sizeof note - (size_t)len,
                        "Sizes: %d, geometric from 4 KiB to %.1f MiB (twice the model's largest operator, fp32).\n", N_SIZES,
                        (double)top / 1048576.0);
    if (root) printf("osdp profile: %d ranks x %d threads on %s, model %s (T %d)%s%s\n", N, world.threads, host, cfg.name,
                     L.T, world.emulated ? " | " : "", world.emulation);
    /* the residual stream of micro-batch 8, at least 1 MiB: what the TP group all-reduces and a pipeline's
     * stage boundary carries */
    size_t stream = 8 * (size_t)L.T * L.max_width * sizeof(float);
    if (stream < ((size_t)1 << 20)) stream = (size_t)1 << 20;
    if (!network_from_file) {
        osdp_profile_levels(&world, &comm, top, stream, reps, &dev, note, sizeof note);
        len = (int)strlen(note);
        char tp_note[1024];
        const int only_tp = osdp_option_given(job, "tp") ? (int)job->tp : 0;
        osdp_check_all(only_tp <= 1 || (N % only_tp == 0 && only_tp <= world.node_size) ? OSDP_OK
                       : osdp_error_set(OSDP_ERR_INPUT, "profile --tp %d: the tensor-parallel groups must divide the %d ranks "
                                        "and fit the %d ranks on a node", only_tp, N, world.node_size));
        osdp_check_all(osdp_profile_tp_all_reduce(&world, only_tp, stream, reps, &dev, tp_note, sizeof tp_note));
        len += snprintf(note + len, sizeof note - (size_t)len, "%s", tp_note);
        dev.ranks_per_node = world.node_size;
        len += snprintf(note + len, sizeof note - (size_t)len, "ranks_per_node: the ranks of this run on the node (%d%s).\n",
                        world.node_size, world.emulated ? ", emulated" : "");
    }

    enum { N_BATCHES = 4 };
    const int batches[N_BATCHES] = {1, 2, 4, 8};
    double tt[N_BATCHES][OSDP_N_OP_TYPES], flops[OSDP_N_OP_TYPES] = {0};
    int count[OSDP_N_OP_TYPES] = {0};
    for (int i = 0; i < L.n_ops; i++) {
        flops[L.op[i].type] += osdp_cost_op_flops(&L.op[i]);
        count[L.op[i].type]++;
    }
    /* the machine's ranks, where they share its cores: the timings then end at a barrier over them (core_sharing) */
    const int shares_cores = world.shares_cores;
    osdp_comm machine;
    if (shares_cores) {
        MPI_Comm same_machine;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world.rank, MPI_INFO_NULL, &same_machine);
        osdp_status made = osdp_comm_create_mpi(&machine, &same_machine);
        MPI_Comm_free(&same_machine);
        osdp_check_all(made);
    }
    const core_sharing cores = {&comm, shares_cores ? &machine : NULL};
    for (int i = 0; i < N_BATCHES; i++) osdp_check_all(time_model(be, &L, batches[i], reps, &cores, tt[i]));
    len += snprintf(note + len, sizeof note - (size_t)len,
                    "gamma: whole-model forward + backward passes on the %s backend (%s), every operator with its own\n"
                    "buffers, all ranks in lockstep per operator (slowest rank%s), median of %d passes; per type, a line\n"
                    "t = n_ops gamma_fixed + b T F gamma through the type's summed times (relative errors) at b = 1, 2, 4, 8:\n",
                    be->name, be->timer_stop ? "each operator timed by CUDA events around its kernels" : "host clock",
                    shares_cores ? "; its ranks outnumber this machine's cores: from the common start to the\nlast of them" : "",
                    reps);
    for (int k = 0; k < OSDP_N_OP_TYPES; k++) {
        double x[N_BATCHES], y[N_BATCHES], wt[N_BATCHES];
        for (int i = 0; i < N_BATCHES; i++) {
            y[i] = tt[i][k];
            x[i] = (double)batches[i] * L.T * flops[k];
            wt[i] = 1 / (y[i] * y[i]); /* every micro-batch counts alike */
        }
        /* t = fixed + b T F gamma: what does not shrink with b is per operator */
        fit f = line_fit(x, y, wt, N_BATCHES, 0);
        if (!(f.c0 >= 0 && f.c1 > 0)) f = line_fit(x, y, wt, N_BATCHES, 1);   /* no sensible intercept */
        dev.gamma[k] = f.c1;
        dev.gamma_fixed[k] = count[k] ? f.c0 / count[k] : 0;
        char ms[128];
        int at = 0;
        for (int i = 0; i < N_BATCHES; i++) at += snprintf(ms + at, sizeof ms - (size_t)at, " %.3f", 1e3 * y[i]);
        if (root)
            printf("  gamma %-5s: b=1,2,4,8:%s ms -> %.3e s/FLOP (%.2f GFLOP/s) + %.3f ms per operator, R^2 %.5f\n",
                   osdp_op_type_name((osdp_op_type)k), ms, f.c1, 1e-9 / f.c1, 1e3 * dev.gamma_fixed[k], f.r2);
        len += snprintf(note + len, sizeof note - (size_t)len, "  %-5s:%s ms -> %.2f GFLOP/s + %.3f ms per operator, R^2 %.5f\n",
                        osdp_op_type_name((osdp_op_type)k), ms, 1e-9 / f.c1, 1e3 * dev.gamma_fixed[k], f.r2);
    }
    osdp_check_all(time_step_work(be, &L, world.size, reps, &cores, &dev.step_shard_param, &dev.step_full_param));
    if (shares_cores) osdp_comm_destroy(&machine);
    if (root)
        printf("  step work: optimizer %.3e s per shard element, zeroing gradients %.3e s per element\n",
               dev.step_shard_param, dev.step_full_param);
    len += snprintf(note + len, sizeof note - (size_t)len,
                    "step: optimizer (AdamW, norm, gradient copy) on the shards %.3e s per element, zeroing the full\n"
                    "gradients %.3e s per element (median of %d, slowest rank)\n",
                    dev.step_shard_param, dev.step_full_param, reps);
    if (on_gpu) {
        int capped = 0;
        osdp_check_all(osdp_memory_cap_to_free(mem_limit, card_free, OSDP_DEVICE_MEM_MARGIN, &mem_limit, &capped));
        char fb[32];
        snprintf(note + len, sizeof note - (size_t)len,
                 "mem_limit: %s: the GPU's free memory after the NCCL communicator's set-up and warm-up (%s, the smallest\n"
                 "over the ranks) less %.0f MiB for cuBLAS's workspace, scratch and fragmentation. A job with more\n"
                 "communicators (tensor, pipeline, node groups) has less: train caps its limit again after its own.",
                 capped ? "measured" : "--mem-limit (below what the GPU has free)",
                 osdp_format_bytes((double)card_free, fb, sizeof fb), (double)OSDP_DEVICE_MEM_MARGIN / 1048576.0);
    } else if (mem_limit == 0) {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        mem_limit = (size_t)pages * (size_t)psize / (size_t)world.local_size;
        snprintf(note + len, sizeof note - (size_t)len,
                 "mem_limit: physical memory / %d ranks on the node (no --mem-limit given).", world.local_size);
    } else {
        snprintf(note + len, sizeof note - (size_t)len, "mem_limit: --mem-limit (emulated device memory per rank).");
    }
    dev.mem_limit = (long long)mem_limit;
    osdp_status s = OSDP_OK;
    if (root) {
        char mb[32];
        printf("  mem_limit %s per rank\n", osdp_format_bytes((double)mem_limit, mb, sizeof mb));
        s = osdp_device_write(&dev, note, out);
        if (s == OSDP_OK) {
            osdp_device check; /* the file must read back */
            s = osdp_device_load(&check, out);
        }
        if (s == OSDP_OK) printf("wrote %s\n", out);
    }
    osdp_check_all(s);
    osdp_comm_destroy(&comm);
    osdp_layout_free(&L);
    MPI_Finalize();
    return 0;
}

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
 *   at once, each its operators back to back; each rank's median pass, the
 *   median rank) at
 *   micro-batches b = 1, 2, 4, 8 (the range the scheduler picks from on
 *   CPU); a least-squares line through that time against b T F summed over
 *   the type's operators (F: osdp_cost_op_flops), weighted by relative
 *   error, gives gamma (its slope) and gamma_fixed (its intercept over the
 *   type's operator count: what a micro-step costs whatever its size; a
 *   negative intercept falls back to the slope through the origin).  Why not one operator timed alone, the
 *   fastest run of each rank, averaged over ranks: repeated alone, an
 *   operator finds its weights hot in cache; on a shared or oversubscribed
 *   node one rank often runs alone for a moment, so the best run measures
 *   an idle machine.  Predicted steps came out tens of % (oversubscribed:
 *   several times) too fast.  Why not every operator in lockstep, the
 *   slowest rank (until 2026-11): see time_model; a step's ranks compute
 *   between their collectives as the passes here do.
 *   step: the optimizer on the shards and zeroing the full gradients, per
 *   element, timed the same way (time_step_work).
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
#include "osdp/agree.h"
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

/* an operator type's time over the ranks: the fastest and the slowest rank's */
typedef struct rank_spread { double lo, hi; } rank_spread;

/* The median of v[0..n-1] (sorts v): the middle value, or the mean of the
 * two middle ones */
static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, osdp_profile_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The whole model's forward (ops 0..n-1) then backward (n-1..0) at
 * micro-batch B, every operator with its own weights, gradients and
 * activations, as in a training step: an operator finds its weights and its
 * input wherever the previous operators left the caches, not hot from its
 * own previous run (timed alone and repeated, mlp of bench_l4_d512 ran 40%
 * faster than inside a step).  Every rank at once, each pass starting at a
 * barrier, then as a step's ranks compute: each rank its operators back to
 * back, each timed on the rank's own clock (on a GPU by its events).  Where
 * ranks share a core, a pass long against the scheduler's time slices has
 * its operators' times include the rank's share of the other ranks' turns
 * on the core, as a step's do (a pass shorter than a slice may run alone:
 * measured as an idle core's).  Not a barrier around each operator and its
 * time from the common start to the last rank's end, the slowest rank (until
 * 2026-11): that paid a time slice of the scheduler per operator, which a
 * step, whose ranks meet only at collectives, does not (4 ranks on 2 cores,
 * bench_l6_d256 at T 32 and b = 1: embed's and head's forward + backward
 * timed 9 to 16 ms in lockstep against about 0.5 ms back to back; the whole pass
 * 197 to 268 ms against 99 to 148 ms, the two ways alternated in one run;
 * doc/benchmarks.md, "Gradient accumulation on emulated nodes").
 * by_type[t] gets, for each type, the median over the ranks of each rank's
 * median over reps of its summed forward + backward time of the operators of
 * that type (a typical rank: the slowest is the one that another job on the
 * machine happened to hit), spread[t] the fastest and slowest rank's
 * (collective: every rank must call it, and gets the same answer). */
static osdp_status time_model(const osdp_compute_backend *be, const osdp_layout *L, int B, int reps,
                              osdp_comm *world, double by_type[OSDP_N_OP_TYPES],
                              rank_spread spread[OSDP_N_OP_TYPES])
{
    const int n = L->n_ops;
    const size_t bt = (size_t)B * (size_t)L->T, nws = osdp_workspace_floats(L, B);
    float **w = calloc((size_t)n, sizeof *w), **g = calloc((size_t)n, sizeof *g), **act = calloc((size_t)n, sizeof *act);
    osdp_op_acts *a = calloc((size_t)n, sizeof *a);
    double *t = calloc((size_t)(reps + 1) * OSDP_N_OP_TYPES, sizeof *t);
    int n_ranks = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n_ranks);
    double *ranks_t = malloc((size_t)n_ranks * OSDP_N_OP_TYPES * sizeof *ranks_t),
           *one_type = malloc((size_t)n_ranks * sizeof *one_type);
    float *ws_base = be->alloc(nws * sizeof(float)), *host = malloc(L->max_op_numel * sizeof(float));
    int *tok = malloc(bt * sizeof(int));
    /* the head's staging (a fused or vocab-parallel cross-entropy), as the runtime's */
    const size_t staging_floats = (size_t)B * L->op[n - 1].tp_floats_per_seq;
    float *staging = staging_floats ? be->alloc(staging_floats * sizeof(float)) : NULL;
    osdp_status s = OSDP_OK;
    if (!w || !g || !act || !a || !t || !ranks_t || !one_type || !ws_base || !host || !tok || (staging_floats && !staging))
        s = OSDP_ERR_OOM;
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
    if (s != OSDP_OK)
        s = osdp_error_set(OSDP_ERR_OOM, "profile: out of memory for the model's weights and activations at micro-batch %d "
                                         "(profile a smaller model or --seq-len with the same layer widths)", B);
    /* before the passes' barriers: a rank out of memory alone must not leave the others waiting in them */
    if ((s = osdp_status_agree(s, MPI_COMM_WORLD)) != OSDP_OK) goto done;
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
        be->synchronize();
        if ((s = osdp_comm_barrier(world)) != OSDP_OK) goto done;
        for (int u = 0; u < 2 * n; u++) { /* u < n: forward of op u; else backward of op 2n-1-u */
            int i = u < n ? u : 2 * n - 1 - u;
            const float *in = i > 0 ? a[i - 1].out : NULL;
            /* backward accumulates; zeroed outside the operator's time, as the step zeroes its gradients */
            if (u >= n) be->fill_zero(g[i], L->op[i].numel * sizeof(float));
            be->synchronize();
            double t0 = osdp_now_seconds();
            if (be->timer_start) be->timer_start();   /* the device's clock around the operator's kernels */
            if (u < n) osdp_op_forward(&ctx, i, w[i], in, &a[i]);
            else osdp_op_backward(&ctx, i, w[i], g[i], in, &a[i], &ws, 1.0f / (float)bt);
            double took;
            if (be->timer_stop) {
                took = be->timer_stop();
            } else {
                be->synchronize();
                took = osdp_now_seconds() - t0;
            }
            tr[L->op[i].type] += took;
        }
    }
    /* each rank's median pass, then the median rank */
    double mine[OSDP_N_OP_TYPES];
    for (int k = 0; k < OSDP_N_OP_TYPES; k++) {
        double v[OSDP_PROFILE_MAX_REPS];
        for (int r = 1; r <= reps; r++) v[r - 1] = t[(size_t)r * OSDP_N_OP_TYPES + (size_t)k];
        mine[k] = median_of(v, reps);
    }
    if (MPI_Allgather(mine, OSDP_N_OP_TYPES, MPI_DOUBLE, ranks_t, OSDP_N_OP_TYPES, MPI_DOUBLE, MPI_COMM_WORLD)
        != MPI_SUCCESS) {
        s = osdp_error_set(OSDP_ERR_COMM, "profile: all-gather of the operators' times failed");
        goto done;
    }
    for (int k = 0; k < OSDP_N_OP_TYPES; k++) {
        for (int q = 0; q < n_ranks; q++) one_type[q] = ranks_t[(size_t)q * OSDP_N_OP_TYPES + (size_t)k];
        by_type[k] = median_of(one_type, n_ranks);
        spread[k].lo = one_type[0];   /* sorted by median_of */
        spread[k].hi = one_type[n_ranks - 1];
    }
done:
    for (int i = 0; i < n; i++) {
        if (w && w[i]) be->free(w[i]);
        if (g && g[i]) be->free(g[i]);
        if (act && act[i]) be->free(act[i]);
    }
    if (ws_base) be->free(ws_base);
    if (staging) be->free(staging);
    free(w); free(g); free(act); free(a); free(t); free(ranks_t); free(one_type); free(host); free(tok);
    return s;
}

/* The work of a step outside the operators, per element: the optimizer step
 * on this rank's shards of the whole model (AdamW, the gradient norm's sum
 * of squares, the reduce-scatter result copied into the gradient shard),
 * and zeroing the full gradients before each backward.  As time_model: every
 * rank at once from a barrier, each its reps back to back on its own clock
 * (a rank that shares its core pays its share of the other ranks' turns, as
 * in a step); each rank's median, the median rank (collective). */
static osdp_status time_step_work(const osdp_compute_backend *be, const osdp_layout *L, int n_ranks, int reps,
                                  osdp_comm *world, double *per_shard, double *per_full)
{
    size_t full = 0;
    for (int i = 0; i < L->n_ops; i++) full += osdp_padded_numel_quantum(L->op[i].numel, n_ranks, be->pad_quantum);
    size_t shard = full / (size_t)n_ranks;
    float *st = be->alloc(5 * shard * sizeof(float)), *grads = be->alloc(full * sizeof(float));
    double *ranks_t = malloc(2 * (size_t)n_ranks * sizeof *ranks_t), *one = malloc((size_t)n_ranks * sizeof *one);
    osdp_status s = !st || !grads || !ranks_t || !one
        ? osdp_error_set(OSDP_ERR_OOM, "profile: out of memory for the optimizer state (%zu elements)", shard) : OSDP_OK;
    /* before the barrier: a rank out of memory alone must not leave the others waiting in it */
    if ((s = osdp_status_agree(s, MPI_COMM_WORLD)) != OSDP_OK) {
        if (st) be->free(st);
        if (grads) be->free(grads);
        free(ranks_t);
        free(one);
        return s;
    }
    be->fill_zero(st, 5 * shard * sizeof(float));
    be->fill_zero(grads, full * sizeof(float));
    double to[OSDP_PROFILE_MAX_REPS], tz[OSDP_PROFILE_MAX_REPS];
    osdp_optim_config oc;   /* train's defaults: the update a step makes */
    osdp_optim_defaults(&oc);
    be->synchronize();
    s = osdp_comm_barrier(world);
    for (int r = 0; r <= reps && s == OSDP_OK; r++) {   /* r = 0: warm-up */
        double t0 = osdp_now_seconds();
        be->copy(st + shard, st + 4 * shard, shard * sizeof(float));
        (void)be->sum_squares(st + shard, shard);
        be->adamw(st, st + shard, st + 2 * shard, st + 3 * shard, shard, oc.lr, oc.beta1, oc.beta2, oc.eps,
                  oc.weight_decay, 1.0f, r + 1);
        be->synchronize();
        double t1 = osdp_now_seconds();
        be->fill_zero(grads, full * sizeof(float));
        be->synchronize();
        if (r > 0) { to[r - 1] = t1 - t0; tz[r - 1] = osdp_now_seconds() - t1; }
    }
    double mine[2] = {median_of(to, reps), median_of(tz, reps)};
    if (s == OSDP_OK && MPI_Allgather(mine, 2, MPI_DOUBLE, ranks_t, 2, MPI_DOUBLE, MPI_COMM_WORLD) != MPI_SUCCESS)
        s = osdp_error_set(OSDP_ERR_COMM, "profile: all-gather of the step work's times failed");
    if (s == OSDP_OK) {
        double typical[2];
        for (int k = 0; k < 2; k++) {
            for (int q = 0; q < n_ranks; q++) one[q] = ranks_t[2 * (size_t)q + (size_t)k];
            typical[k] = median_of(one, n_ranks);
        }
        *per_shard = typical[0] / (double)shard;
        *per_full = typical[1] / (double)full;
    }
    be->free(st);
    be->free(grads);
    free(ranks_t);
    free(one);
    return s;
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
    rank_spread spread[N_BATCHES][OSDP_N_OP_TYPES];
    int count[OSDP_N_OP_TYPES] = {0};
    for (int i = 0; i < L.n_ops; i++) {
        flops[L.op[i].type] += osdp_cost_op_flops(&L.op[i]);
        count[L.op[i].type]++;
    }
    for (int i = 0; i < N_BATCHES; i++) osdp_check_all(time_model(be, &L, batches[i], reps, &comm, tt[i], spread[i]));
    len += snprintf(note + len, sizeof note - (size_t)len,
                    "gamma: whole-model forward + backward passes on the %s backend (%s), every operator with its own\n"
                    "buffers, all ranks at once, each its operators back to back as in a step; per type, each rank's\n"
                    "median of %d passes, the median of the ranks; a line t = n_ops gamma_fixed + b T F gamma through\n"
                    "the type's summed times (relative errors) at b = 1, 2, 4, 8 (and at b = 8 the fastest to slowest rank):\n",
                    be->name, be->timer_stop ? "each operator timed by CUDA events around its kernels" : "host clock", reps);
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
        len += snprintf(note + len, sizeof note - (size_t)len,
                        "  %-5s:%s ms -> %.2f GFLOP/s + %.3f ms per operator, R^2 %.5f; ranks at b=8: %.3f to %.3f ms\n",
                        osdp_op_type_name((osdp_op_type)k), ms, 1e-9 / f.c1, 1e3 * dev.gamma_fixed[k], f.r2,
                        1e3 * spread[N_BATCHES - 1][k].lo, 1e3 * spread[N_BATCHES - 1][k].hi);
    }
    osdp_check_all(time_step_work(be, &L, world.size, reps, &comm, &dev.step_shard_param, &dev.step_full_param));
    if (root)
        printf("  step work: optimizer %.3e s per shard element, zeroing gradients %.3e s per element\n",
               dev.step_shard_param, dev.step_full_param);
    len += snprintf(note + len, sizeof note - (size_t)len,
                    "step: optimizer (AdamW, norm, gradient copy) on the shards %.3e s per element, zeroing the full\n"
                    "gradients %.3e s per element (each rank's median of %d, back to back; the median rank)\n",
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

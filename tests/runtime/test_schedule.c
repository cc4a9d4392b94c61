/* Tests for the step as data (src/runtime/schedule.c, osdp/schedule.h):
 *   shape     every micro-step allocation is freed within the micro-step,
 *             in its own category; ZDP slices are gathered into buffers of
 *             their own, DP slices once per step into the resident ones;
 *             every pass has one USE marker per slice, in pass order; the
 *             optimizer allocates nothing
 *   one truth on random plans (split, recompute, bf16, prefetch, accumulation):
 *             the schedule's evaluation, the planner's closed form
 *             (osdp_cost_peak) and the peak the runtime's allocator measures
 *             while executing the schedule for one step are equal to the
 *             byte, per category for the two that have categories; with
 *             the CPU's shard padding (quantum 1) and CUDA's (64 elements
 *             per rank), every slice padded to a multiple of N x quantum
 *   validation the eval list (forward only) frees what it allocates, has
 *             no backward, and its peak never exceeds the training step's,
 *             per category (so the closed form needs no term for it); its
 *             loss on a step's own micro-batches, before that step, is the
 *             step's loss to the bit, and running it moves no peak
 *   tensor-parallel layouts (tp 2 and 4, the vocabulary padded or not): the
 *             schedule's evaluation equals the closed form on random plans,
 *             its staging buffer (category tp_comm) held from the setup on;
 *             measured too where one rank can run it (a padded vocabulary
 *             at tp 1)
 * Runs on one MPI rank (the runtime needs a communicator); the measured
 * peaks on 4 ranks are checked by tests/system/test_invariants.sh, on meshes by
 * tests/system/test_mesh.sh. */
#include "config.h"

#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/comm.h"
#include "osdp/compute.h"
#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/runtime.h"
#include "osdp/schedule.h"

#include "check_main.h"
#include "test_inputs.h"

static unsigned long long g_rng = 20261124;
static unsigned rnd(void)
{
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(g_rng >> 33);
}

/* a random plan: g in {1, 2, 3, 4} (embed 1, a tied or fused head 1), k in [0, g]
 * (embed DP under a tied head), recompute on some blocks */
static void random_plan(const osdp_layout *L, osdp_plan *p)
{
    for (int i = 0; i < L->n_ops; i++) {
        int g = L->op[i].type == OSDP_OP_EMBED ? 1 : 1 + (int)(rnd() % 4);
        if (!osdp_op_can_split(&L->op[i])) g = 1;   /* a tied head (ln_f alone), a fused head (chunks need it whole) */
        p->slices[i] = g;
        const int k = (int)(rnd() % (unsigned)(g + 1));
        p->zdp_slices[i] = i == 0 && L->cfg.tied_head ? 0 : k;
        p->recompute[i] = osdp_op_can_recompute(L->op[i].type) && rnd() % 2;
    }
}

static void check_shape(const osdp_schedule *sc)
{
    size_t current[OSDP_BUF_N_KINDS] = {0};
    int uses_open = -1;   /* the COMPUTE whose USE markers follow */
    int next_slice = 0;
    for (int e = 0; e < sc->n_micro; e++) {
        const osdp_event *ev = &sc->micro[e];
        const osdp_sched_op *so = &sc->ops[ev->op];
        switch (ev->kind) {
        case OSDP_EV_ALLOC: current[ev->buffer] += ev->bytes; break;
        case OSDP_EV_FREE:
            ck_assert_msg(current[ev->buffer] >= ev->bytes, "event %d frees what was not allocated", e);
            current[ev->buffer] -= ev->bytes;
            break;
        case OSDP_EV_GATHER:
        case OSDP_EV_GATHER_WAIT:
            /* a ZDP slice into a buffer of its own, a DP one once per step */
            ck_assert_int_eq(ev->first_micro_only, !so->slice[ev->slice].zdp);
            break;
        case OSDP_EV_COMPUTE:
            ck_assert_int_eq(uses_open, -1);
            uses_open = e;
            next_slice = ev->pass == OSDP_PASS_BACKWARD ? so->n_slices - 1 : 0;
            break;
        case OSDP_EV_USE:
            ck_assert_int_ge(uses_open, 0);
            ck_assert_int_eq(ev->op, sc->micro[uses_open].op);
            ck_assert_int_eq(ev->slice, next_slice);
            next_slice += ev->pass == OSDP_PASS_BACKWARD ? -1 : 1;
            break;
        case OSDP_EV_COMPUTE_END:
            ck_assert_int_eq(next_slice, ev->pass == OSDP_PASS_BACKWARD ? -1 : so->n_slices);
            uses_open = -1;
            break;
        default:
            ck_assert_int_eq(ev->first_micro_only, 0);
            break;
        }
    }
    for (int b = 0; b < OSDP_BUF_N_KINDS; b++)
        ck_assert_msg(current[b] == 0, "buffer kind %d: %zu bytes still held after the micro-step", b, current[b]);
    /* the optimizer: every operator's norm, one all-reduce, every operator's update; no memory */
    ck_assert_int_eq(sc->n_optim, 2 * sc->layout->n_ops + 1);
    for (int e = 0; e < sc->n_optim; e++)
        ck_assert_int_eq(sc->optim[e].kind, e < sc->layout->n_ops ? OSDP_EV_NORM_SUM
                                            : e == sc->layout->n_ops ? OSDP_EV_SUMS_ALL_REDUCE : OSDP_EV_ADAMW);
}

/* the padding of every slice: the least multiple of N x quantum that holds it */
static void check_padding(const osdp_schedule *sc, int N, int quantum)
{
    const size_t unit = (size_t)N * (size_t)quantum;
    for (int i = 0; i < sc->layout->n_ops; i++)
        for (int s = 0; s < sc->ops[i].n_slices; s++) {
            const osdp_sched_slice *sl = &sc->ops[i].slice[s];
            ck_assert_msg(sl->padded % unit == 0 && sl->padded >= sl->hi - sl->lo && sl->padded - (sl->hi - sl->lo) < unit,
                          "%s slice %d: %zu elements padded to %zu (N=%d, quantum %d)", sc->layout->op[i].name, s,
                          sl->hi - sl->lo, sl->padded, N, quantum);
        }
}

/* the shard padding a plan is checked with: the CPU's and CUDA's, in turn */
static int quantum_of(int r) { return r % 2 ? 64 : 1; }

/* the peaks of the setup and one list (the test's own walk of ALLOC / FREE) */
static void list_peak(const osdp_schedule *sc, const osdp_event *ev, int n, osdp_memory_prediction *out)
{
    size_t current[OSDP_MEMORY_N_CATEGORIES] = {0}, total = 0;
    memset(out, 0, sizeof *out);
    for (int pass = 0; pass < 2; pass++) {
        const osdp_event *list = pass ? ev : sc->setup;
        for (int e = 0; e < (pass ? n : sc->n_setup); e++) {
            if (list[e].kind != OSDP_EV_ALLOC && list[e].kind != OSDP_EV_FREE) continue;
            osdp_memory_category c = osdp_buffer_category(list[e].buffer);
            int sign = list[e].kind == OSDP_EV_ALLOC ? 1 : -1;
            current[c] += (size_t)sign * list[e].bytes;
            total += (size_t)sign * list[e].bytes;
            if (current[c] > out->peak[c]) out->peak[c] = current[c];
            if (total > out->peak_total) out->peak_total = total;
        }
    }
}

/* the eval list: forward passes only, everything freed, one loss sum; its
 * peak within the step's, category by category */
static void check_eval(const osdp_schedule *sc, const osdp_memory_prediction *step_peak)
{
    size_t held = 0;
    int loss_sums = 0;
    for (int e = 0; e < sc->n_eval; e++) {
        const osdp_event *ev = &sc->eval[e];
        ck_assert_msg(ev->kind != OSDP_EV_REDUCE_SCATTER && ev->buffer != OSDP_BUF_FULL_GRAD
                      && !((ev->kind == OSDP_EV_COMPUTE || ev->kind == OSDP_EV_USE) && ev->pass != OSDP_PASS_FORWARD),
                      "eval event %d (kind %d) belongs to a backward", e, ev->kind);
        if (ev->kind == OSDP_EV_ALLOC) held += ev->bytes;
        if (ev->kind == OSDP_EV_FREE) {
            ck_assert_msg(held >= ev->bytes, "eval event %d frees what was not allocated", e);
            held -= ev->bytes;
        }
        loss_sums += ev->kind == OSDP_EV_LOSS_SUM;
    }
    ck_assert_uint_eq(held, 0);
    ck_assert_int_eq(loss_sums, 1);
    osdp_memory_prediction train, eval, from_api;
    list_peak(sc, sc->micro, sc->n_micro, &train);
    list_peak(sc, sc->eval, sc->n_eval, &eval);
    osdp_schedule_eval_peak(sc, &from_api);
    ck_assert_uint_eq(from_api.peak_total, eval.peak_total);
    for (int c = 0; c < OSDP_MEMORY_N_CATEGORIES; c++) {
        ck_assert_msg(eval.peak[c] <= train.peak[c], "%s: eval peak %zu above the step's %zu",
                      osdp_memory_category_name((osdp_memory_category)c), eval.peak[c], train.peak[c]);
        ck_assert_uint_eq(step_peak->peak[c], train.peak[c]);
    }
    ck_assert_uint_le(eval.peak_total, train.peak_total);
    ck_assert_uint_eq(step_peak->peak_total, train.peak_total);
}

/* the residual stream of random plan r: bf16 on every other plan with bf16 weights (without drawing: the
 * plans drawn stay those of an fp32 stream) */
static osdp_dtype residual_of(osdp_dtype weights, int r)
{
    return weights == OSDP_BFLOAT16 && r % 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32;
}

/* one truth on one plan: schedule, closed form and (comm given) measurement */
static void check_plan(const osdp_layout *L, const osdp_plan *p, int N, int B, int accum, int prefetch,
                       osdp_dtype weights, osdp_dtype residual, int quantum, osdp_comm *comm)
{
    osdp_schedule sc;
    osdp_schedule_options so = {.geo.n_ranks = N, .geo.micro_batch = B, .geo.accum_steps = accum, .geo.prefetch = prefetch,
                                .geo.weight_dtype = weights, .geo.residual_dtype = residual, .geo.pad_quantum = quantum};
    ck_assert_msg(osdp_schedule_build(&sc, L, p, &so) == OSDP_OK, "%s", osdp_error_message());
    check_shape(&sc);
    check_padding(&sc, N, quantum);
    osdp_memory_prediction pr;
    osdp_schedule_peak(&sc, &pr);
    check_eval(&sc, &pr);
    osdp_schedule_free(&sc);

    osdp_device d = sizes_device(weights);
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, L, &d, &(osdp_step_geometry){.n_ranks = N, .pad_quantum = quantum, .prefetch = prefetch,
                                                           .residual_dtype = residual},
                         OSDP_COST_PAPER, NULL);
    long long closed = osdp_cost_peak(&cm, p, B, NULL);
    ck_assert_msg(closed == (long long)pr.peak_total,
                  "%s N=%d B=%d prefetch=%d %s residual %s quantum %d: closed form %lld, schedule %zu",
                  L->cfg.name, N, B, prefetch, osdp_dtype_name(weights), osdp_dtype_name(residual), quantum, closed,
                  pr.peak_total);
    if (!comm) return;

    const osdp_compute_backend *be = osdp_compute_find("cpu", weights);
    ck_assert(be != NULL);
    osdp_runtime_options opt = {.geo.micro_batch = B, .geo.accum_steps = accum, .geo.prefetch = prefetch, .seed = 7,
                                .geo.weight_dtype = weights, .geo.residual_dtype = residual, .geo.pad_quantum = quantum};
    osdp_optim_defaults(&opt.optim);
    osdp_runtime rt;
    ck_assert_msg(osdp_runtime_create(&rt, L, p, comm, be, &opt) == OSDP_OK, "%s", osdp_error_message());
    size_t n_tokens = (size_t)accum * 2 * (size_t)B * (size_t)L->T;
    int *tokens = malloc(n_tokens * sizeof(int));
    ck_assert(tokens != NULL);
    for (size_t t = 0; t < n_tokens; t++) tokens[t] = (int)(rnd() % (unsigned)L->cfg.vocab);
    double val_loss = 0;
    ck_assert_msg(osdp_runtime_evaluate(&rt, tokens, 1, &val_loss) == OSDP_OK, "%s", osdp_error_message());
    osdp_step_stats stats;
    ck_assert_msg(osdp_runtime_step(&rt, tokens, &stats) == OSDP_OK, "%s", osdp_error_message());
    ck_assert(stats.loss > 0);
    ck_assert_msg(val_loss == stats.loss, "evaluation %.17g, the step's loss %.17g on the same batches", val_loss,
                  stats.loss);
    ck_assert_msg(osdp_runtime_evaluate(&rt, tokens, 1, &val_loss) == OSDP_OK, "%s", osdp_error_message());
    ck_assert(val_loss > 0 && val_loss != stats.loss);   /* the weights moved */
    for (int c = 0; c < OSDP_MEMORY_N_CATEGORIES; c++)
        ck_assert_msg(rt.mem.peak[c] == pr.peak[c],
                      "%s N=%d B=%d accum=%d prefetch=%d %s quantum %d: %s measured %zu, schedule %zu",
                      L->cfg.name, N, B, accum, prefetch, osdp_dtype_name(weights), quantum,
                      osdp_memory_category_name((osdp_memory_category)c), rt.mem.peak[c], pr.peak[c]);
    ck_assert_uint_eq(rt.mem.peak_total, pr.peak_total);
    free(tokens);
    osdp_runtime_destroy(&rt);
    ck_assert_uint_eq(rt.mem.current_total, 0);   /* everything the schedule allocated came back */
}

static const char *const MODELS[] = {"tests/inputs/t_small.ini", "tests/inputs/t_ic.ini"};


/* measured on this rank: 2 models x (the default kernels, then the naive ones) x 30 random plans */
START_TEST(test_measured_equals_schedule_and_closed_form)
{
    osdp_comm comm;
    ck_assert(osdp_comm_create_mpi(&comm, &(MPI_Comm){MPI_COMM_WORLD}) == OSDP_OK);
    int checked = 0;
    for (int mi = 0; mi < 4; mi++) {
        osdp_layout L;
        const int naive = mi % 2;   /* the default tiled attention and fused head, then the naive ones */
        load_layout_kernels(&L, MODELS[mi / 2], 8 + (int)(rnd() % 8), naive, naive);
        ck_assert_int_eq(L.op[1].attn_tiled, !naive);
        ck_assert_int_eq(L.op[L.n_ops - 1].head_chunk_rows > 0, !naive);
        osdp_plan p;
        ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
        for (int r = 0; r < 30; r++) {
            random_plan(&L, &p);
            const osdp_dtype weights = rnd() % 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32;
            check_plan(&L, &p, comm.size, 1 + (int)(rnd() % 2), 1 + (int)(rnd() % 2), (int)(rnd() % 2),
                       weights, residual_of(weights, r), quantum_of(r), &comm);
            checked++;
        }
        osdp_plan_free(&p);
        osdp_layout_free(&L);
    }
    ck_assert_int_eq(checked, 120);
    osdp_comm_destroy(&comm);
}
END_TEST

/* schedule against closed form (no measurement) on `per_n` random plans for
 * each of the 4 rank counts Ns; returns the plans checked */
static int check_random_plans(const osdp_layout *L, const int Ns[4], int per_n)
{
    int checked = 0;
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L->n_ops) == OSDP_OK);
    for (int ni = 0; ni < 4; ni++)
        for (int r = 0; r < per_n; r++) {
            random_plan(L, &p);
            const osdp_dtype weights = rnd() % 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32;
            check_plan(L, &p, Ns[ni], 1 + (int)(rnd() % 4), 1 + (int)(rnd() % 3), (int)(rnd() % 2),
                       weights, residual_of(weights, r), quantum_of(r), NULL);
            checked++;
        }
    osdp_plan_free(&p);
    return checked;
}

/* The residual + LayerNorm fusion across operators (executor.c): the CPU
 * table with its fused entry counted.  t_small (2 layers, widths equal):
 * all-DP without recompute fuses every attn -> mlp, mlp -> attn and
 * mlp -> head boundary of the step's forward, 2 n_layer; none where an
 * activation buffer is freed between the two passes: under all-recompute,
 * and in an evaluation (it frees each operator's activations once the next
 * has read them); and the losses bit for bit those of all-recompute, which
 * fuses none. */
static int fused_calls;
static void counted_residual_layernorm(float *res, float *y, float *mean, float *rstd, const float *a, const float *b,
                                       const void *w, const void *bias, int BT, int C)
{
    fused_calls++;
    osdp_compute_cpu.residual_layernorm_forward(res, y, mean, rstd, a, b, w, bias, BT, C);
}

static double fusion_run(const osdp_layout *L, const osdp_compute_backend *be, int recompute, osdp_comm *comm)
{
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L->n_ops) == OSDP_OK);
    for (int i = 0; i < L->n_ops; i++) {
        p.slices[i] = 1;
        p.zdp_slices[i] = 0;
        p.recompute[i] = recompute && osdp_op_can_recompute(L->op[i].type);
    }
    osdp_runtime_options opt = {.geo.micro_batch = 2, .geo.accum_steps = 1, .geo.prefetch = 1, .seed = 7,
                                .geo.weight_dtype = OSDP_FLOAT32, .geo.pad_quantum = 1};
    osdp_optim_defaults(&opt.optim);
    osdp_runtime rt;
    ck_assert_msg(osdp_runtime_create(&rt, L, &p, comm, be, &opt) == OSDP_OK, "%s", osdp_error_message());
    fused_calls = 0;
    int tokens[2 * 2 * 16];
    for (size_t t = 0; t < sizeof tokens / sizeof *tokens; t++) tokens[t] = (int)(t * 7 % (unsigned)L->cfg.vocab);
    osdp_step_stats stats;
    double val_loss = 0;
    ck_assert_msg(osdp_runtime_step(&rt, tokens, &stats) == OSDP_OK, "%s", osdp_error_message());
    const int want = recompute ? 0 : 2 * L->cfg.n_layer;
    ck_assert_int_eq(fused_calls, want);
    ck_assert_msg(osdp_runtime_evaluate(&rt, tokens, 1, &val_loss) == OSDP_OK, "%s", osdp_error_message());
    ck_assert_int_eq(fused_calls, want);   /* the evaluation: none */
    osdp_runtime_destroy(&rt);
    osdp_plan_free(&p);
    return stats.loss + val_loss;
}

START_TEST(test_residual_layernorm_fusion)
{
    osdp_comm comm;
    ck_assert(osdp_comm_create_mpi(&comm, &(MPI_Comm){MPI_COMM_WORLD}) == OSDP_OK);
    osdp_layout L;
    load_layout(&L, MODELS[0], 16);
    osdp_compute_backend counted = osdp_compute_cpu;
    counted.residual_layernorm_forward = counted_residual_layernorm;
    const double fused = fusion_run(&L, &counted, 0, &comm), unfused = fusion_run(&L, &counted, 1, &comm);
    ck_assert_msg(fused == unfused, "the fused run's losses %.17g differ from the unfused (all-recompute) %.17g",
                  fused, unfused);
    osdp_layout_free(&L);
    osdp_comm_destroy(&comm);
}
END_TEST

/* more ranks than this process has: schedule against closed form, 2 models x 4 N x 50 plans */
START_TEST(test_schedule_equals_closed_form)
{
    const int Ns[] = {2, 3, 4, 8};
    int checked = 0;
    for (int mi = 0; mi < 2; mi++) {
        osdp_layout L;
        load_layout(&L, MODELS[mi], 0);
        checked += check_random_plans(&L, Ns, 50);
        osdp_layout_free(&L);
    }
    ck_assert_int_eq(checked, 400);
}
END_TEST

/* Reduce-once operators (osdp/plan.h) free their full gradients in their
 * backward: nothing of theirs is in flight during the backward of the
 * operator before, and that operator's forward, holding its whole
 * activation block, its slices and this one's first slice gathered ahead,
 * can be the step's peak.  t_small with a vocabulary of 1024 (the head 4x
 * an mlp's weights): every operator ZDP and reducing once, the blocks
 * recomputed, is peaked in mlp.1's forward (the megatron_1p7b plans the
 * planner once failed to verify: --recompute all, 32 ranks, B 4 and 8);
 * then random plans with random reduce-once slices, measured on this rank
 * for some */
static void load_wide_vocab(osdp_layout *L, int T, int naive)
{
    load_layout_vocab(L, "tests/inputs/t_small.ini", T, 1024, naive);
}

START_TEST(test_reduce_once_forward_moment)
{
    osdp_comm comm;
    ck_assert(osdp_comm_create_mpi(&comm, &(MPI_Comm){MPI_COMM_WORLD}) == OSDP_OK);
    osdp_layout L;
    load_wide_vocab(&L, 32, 0);
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
    for (int i = 0; i < L.n_ops; i++) {
        p.slices[i] = p.zdp_slices[i] = p.reduce_once[i] = 1;
        p.recompute[i] = osdp_op_can_recompute(L.op[i].type);
    }
    const osdp_dtype weights[] = {OSDP_BFLOAT16, OSDP_FLOAT32};
    for (int w = 0; w < 2; w++) {
        check_plan(&L, &p, comm.size, 8, 2, 1, weights[w], OSDP_FLOAT32, 1, &comm);
        /* and the forward is where the peak is: the backward moments alone fall short of it */
        osdp_device d = sizes_device(weights[w]);
        osdp_cost_model cm;
        osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = comm.size, .pad_quantum = 1, .prefetch = 1},
                             OSDP_COST_PAPER, NULL);
        cm.recompute = p.recompute;
        cm.reduce_once = p.reduce_once;
        osdp_op_peak_terms t[16];
        ck_assert_int_le(L.n_ops, 16);
        long long acts = 0, backward = 0, forward = 0;
        for (int i = 0; i < L.n_ops; i++) {
            osdp_op_mem m;
            osdp_cost_plan_op_mem(&cm, &p, i, 8, &m);
            osdp_cost_peak_terms(&cm, i, &m, &t[i]);
        }
        for (int u = 0; u < L.n_ops; u++) {
            const long long b = osdp_cost_backward_moment(t, L.n_ops, u, acts), f = osdp_cost_forward_moment(t, L.n_ops, u, acts);
            if (b > backward) backward = b;
            if (f > forward) forward = f;
            acts += t[u].acts;
        }
        ck_assert_msg(forward > backward, "%s: forward %lld, backward %lld", osdp_dtype_name(weights[w]), forward, backward);
    }
    int checked = 0;
    for (int mi = 0; mi < 3; mi++) {
        osdp_layout R;
        if (mi < 2) load_layout(&R, MODELS[mi], 0);
        else load_wide_vocab(&R, 8 + (int)(rnd() % 8), rnd() % 2);
        osdp_plan q;
        ck_assert(osdp_plan_alloc(&q, R.n_ops) == OSDP_OK);
        for (int r = 0; r < 120; r++) {
            random_plan(&R, &q);
            for (int i = 0; i < R.n_ops; i++) q.reduce_once[i] = (int)(rnd() % (unsigned)(q.slices[i] + 1));
            const osdp_dtype wt = rnd() % 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32;
            const int measured = r % 8 == 0, N = measured ? comm.size : 1 + (int)(rnd() % 8);
            check_plan(&R, &q, N, 1 + (int)(rnd() % 4), 1 + (int)(rnd() % 3), (int)(rnd() % 4 != 0), wt,
                       residual_of(wt, r), quantum_of(r), measured ? &comm : NULL);
            checked++;
        }
        osdp_plan_free(&q);
        osdp_layout_free(&R);
    }
    ck_assert_int_eq(checked, 360);
    osdp_plan_free(&p);
    osdp_layout_free(&L);
    osdp_comm_destroy(&comm);
}
END_TEST

/* one rank's parts of a model for tp ranks, the vocabulary padded to a
 * multiple of tp x vocab_quantum; n_head > 0 replaces the file's heads */
static void load_layout_tp(osdp_layout *L, const char *model, int T, int tp, int vocab_quantum, int n_head)
{
    char path[4096];
    osdp_model_config cfg;
    snprintf(path, sizeof path, "%s/%s", src_dir(), model);
    ck_assert_msg(osdp_model_config_load(&cfg, path) == OSDP_OK, "%s", osdp_error_message());
    if (n_head > 0) cfg.n_head = n_head;
    ck_assert_msg(osdp_layout_build_tp(L, &cfg, T > 0 ? T : cfg.ctx, tp, vocab_quantum) == OSDP_OK, "%s",
                  osdp_error_message());
}

/* the staging buffer: allocated by the setup, in tp_comm, B x the head's
 * floats per sequence; no other buffer in tp_comm */
static void check_tp_staging(const osdp_layout *L, const osdp_plan *p, int N, int B)
{
    osdp_schedule sc;
    osdp_schedule_options so = {.geo.n_ranks = N, .geo.micro_batch = B, .geo.accum_steps = 1, .geo.prefetch = 1,
                                .geo.weight_dtype = OSDP_FLOAT32, .geo.pad_quantum = 1};
    ck_assert_msg(osdp_schedule_build(&sc, L, p, &so) == OSDP_OK, "%s", osdp_error_message());
    size_t staged = 0;
    for (int e = 0; e < sc.n_setup; e++)
        if (sc.setup[e].kind == OSDP_EV_ALLOC && sc.setup[e].buffer == OSDP_BUF_TP_STAGING) staged += sc.setup[e].bytes;
    ck_assert_uint_eq(staged, (size_t)B * L->op[L->n_ops - 1].tp_floats_per_seq * sizeof(float));
    for (int e = 0; e < sc.n_micro; e++) ck_assert_int_ne(sc.micro[e].buffer, OSDP_BUF_TP_STAGING);
    osdp_memory_prediction pr;
    osdp_schedule_peak(&sc, &pr);
    ck_assert_uint_eq(pr.peak[OSDP_MEMORY_TP_COMM], staged);
    osdp_schedule_free(&sc);
}

/* tensor-parallel parts: schedule against closed form on random plans, at
 * tp 2 and 4 (uniform and mixed widths), the vocabulary unpadded (quantum
 * 1: 256 = 2 x 128) and padded (quantum 3) */
START_TEST(test_tp_schedule_equals_closed_form)
{
    static const struct { const char *model; int n_head, tp, vocab_quantum; } meshes[] = {
        {"tests/inputs/t_small.ini", 0, 2, 1}, {"tests/inputs/t_ic.ini", 0, 2, 3},
        {"tests/inputs/t_small.ini", 4, 4, 3}, {"tests/inputs/t_ic.ini", 4, 4, 1},
    };
    const int Ns[] = {1, 2, 3, 4};
    int checked = 0;
    for (int mi = 0; mi < 4; mi++) {
        osdp_layout L;
        load_layout_tp(&L, meshes[mi].model, 8 + (int)(rnd() % 8), meshes[mi].tp, meshes[mi].vocab_quantum,
                       meshes[mi].n_head);
        ck_assert_int_eq(L.tp_size, meshes[mi].tp);
        ck_assert_uint_gt(osdp_tp_staging_floats_per_seq(&L), 0);
        osdp_plan p;
        ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
        check_tp_staging(&L, &p, 2, 3);
        osdp_plan_free(&p);
        checked += check_random_plans(&L, Ns, 25);
        osdp_layout_free(&L);
    }
    ck_assert_int_eq(checked, 400);
}
END_TEST

/* the staging measured: on this one rank a padded vocabulary (quantum 3:
 * 256 -> 258 rows) makes the head's cross-entropy vocab-parallel at tp 1,
 * so its staging buffer is allocated and used by a real step and
 * validation pass; measured = schedule = closed form, tp_comm included */
START_TEST(test_tp_staging_measured)
{
    osdp_comm comm;
    ck_assert(osdp_comm_create_mpi(&comm, &(MPI_Comm){MPI_COMM_WORLD}) == OSDP_OK);
    osdp_layout L;
    load_layout_tp(&L, MODELS[1], 8, 1, 3, 0);
    ck_assert_int_eq(L.vocab_padded, 258);
    ck_assert_uint_gt(osdp_tp_staging_floats_per_seq(&L), 0);
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
    for (int r = 0; r < 20; r++) {
        random_plan(&L, &p);
        const osdp_dtype weights = rnd() % 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32;
        check_plan(&L, &p, comm.size, 1 + (int)(rnd() % 2), 1 + (int)(rnd() % 2), (int)(rnd() % 2),
                   weights, residual_of(weights, r), quantum_of(r), &comm);
    }
    osdp_plan_free(&p);
    osdp_layout_free(&L);
    osdp_comm_destroy(&comm);
}
END_TEST

/* bad plans and options: a clear message, no schedule */
START_TEST(test_schedule_errors)
{
    osdp_layout L;
    load_layout(&L, MODELS[0], 8);
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
    osdp_schedule sc;
    osdp_schedule_options so = {.geo.n_ranks = 4, .geo.micro_batch = 1, .geo.accum_steps = 1, .geo.prefetch = 1,
                                .geo.weight_dtype = OSDP_FLOAT32};
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_OK);
    osdp_schedule_free(&sc);
    so.geo.weight_dtype = OSDP_FLOAT64;
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "fp32 or bf16") != NULL, "%s", osdp_error_message());
    so.geo.weight_dtype = OSDP_FLOAT32;
    so.geo.n_ranks = 0;
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_ERR_INPUT);
    so.geo.n_ranks = 4;
    so.geo.pad_quantum = -1;
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "pad quantum") != NULL, "%s", osdp_error_message());
    so.geo.pad_quantum = 64;
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_OK);
    ck_assert_uint_eq(sc.ops[0].padded % 256, 0);
    osdp_schedule_free(&sc);
    p.slices[0] = 2;
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "embed") != NULL, "%s", osdp_error_message());
    osdp_plan_free(&p);
    osdp_layout_free(&L);
}
END_TEST

/* A tied head (tests/inputs/t_tied.ini): the embedding's gradients held from
 * the head's backward on.  Measured = schedule = closed form on this rank,
 * schedule = closed form at N = 2, 3, 4, 8 and on tensor-parallel parts
 * (wte's vocab_local rows are the head's columns); a plan with a ZDP
 * embedding and a pipeline are refused with the reason. */
START_TEST(test_tied_head)
{
    osdp_comm comm;
    ck_assert(osdp_comm_create_mpi(&comm, &(MPI_Comm){MPI_COMM_WORLD}) == OSDP_OK);
    osdp_layout L;
    load_layout(&L, "tests/inputs/t_tied.ini", 8 + (int)(rnd() % 8));
    ck_assert(L.cfg.tied_head);
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
    for (int r = 0; r < 30; r++) {
        random_plan(&L, &p);
        const osdp_dtype weights = rnd() % 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32;
        check_plan(&L, &p, comm.size, 1 + (int)(rnd() % 2), 1 + (int)(rnd() % 2), (int)(rnd() % 2),
                   weights, residual_of(weights, r), quantum_of(r), &comm);
    }
    /* the term itself: the embedding's gradients during the head's backward, none in an untied model */
    osdp_device d = sizes_device(OSDP_FLOAT32);
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = 4}, OSDP_COST_PAPER, NULL);
    ck_assert_int_eq(osdp_cost_tied_grads(&cm, L.n_ops - 1), (long long)L.op[0].numel * 4);
    ck_assert_int_eq(osdp_cost_tied_grads(&cm, 0), 0);
    osdp_plan_fill(&p, 1);
    osdp_schedule sc;
    osdp_schedule_options so = {.geo.n_ranks = 4, .geo.micro_batch = 1, .geo.accum_steps = 1, .geo.prefetch = 1,
                                .geo.weight_dtype = OSDP_FLOAT32};
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "embed") && strstr(osdp_error_message(), "tied"), "%s",
                  osdp_error_message());
    p.zdp_slices[0] = 0;
    so.geo.pp_size = 2;
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "--pp 2") && strstr(osdp_error_message(), "tied"), "%s",
                  osdp_error_message());
    osdp_plan_free(&p);
    const int Ns[] = {2, 3, 4, 8};
    int checked = check_random_plans(&L, Ns, 25);
    osdp_layout_free(&L);
    load_layout_tp(&L, "tests/inputs/t_tied.ini", 8, 2, 3, 0);
    ck_assert_int_eq(L.vocab_local, 129);
    checked += check_random_plans(&L, Ns, 10);
    osdp_layout_free(&L);
    ck_assert_int_eq(checked, 140);
    osdp_comm_destroy(&comm);
}
END_TEST

/* bf16 activations (cfg.act_bf16, osdp/layout.h): the ln, qkv, heads, fc and gelu pieces take half the floats and
 * the workspace gains the fp32 copy OSDP_S_ACT; measured = schedule = closed form on this rank (bf16 weights,
 * either residual stream, the lean and the naive kernels, both models), schedule = closed form at N = 2, 3,
 * 4, 8 and on tensor-parallel parts */
START_TEST(test_bf16_activations)
{
    osdp_comm comm;
    ck_assert(osdp_comm_create_mpi(&comm, &(MPI_Comm){MPI_COMM_WORLD}) == OSDP_OK);
    int checked = 0;
    for (int mi = 0; mi < 4; mi++) {
        const int naive = mi % 2, T = 8 + (int)(rnd() % 8);
        osdp_layout L, F;
        load_layout_kernels(&F, MODELS[mi / 2], T, naive, naive);
        osdp_model_config cfg = F.cfg;
        cfg.act_bf16 = 1;
        ck_assert(osdp_layout_build(&L, &cfg, T) == OSDP_OK);
        for (int o = 1; o < L.n_ops; o++) {   /* half of each bf16 piece, the rest as fp32 */
            size_t halved = 0;
            for (int k = 0; k < OSDP_A_N_SLOTS; k++) {
                ck_assert_uint_eq(L.op[o].act[k].floats,
                                  osdp_act_slot_bf16((osdp_act_slot)k) ? (F.op[o].act[k].floats + 1) / 2
                                                                       : F.op[o].act[k].floats);
                if (osdp_act_slot_bf16((osdp_act_slot)k)) halved += F.op[o].act[k].floats - L.op[o].act[k].floats;
            }
            ck_assert_uint_gt(halved, 0);
            ck_assert_uint_eq(L.op[o].act_floats_per_seq, F.op[o].act_floats_per_seq - halved);
            const size_t wide = L.op[o].type == OSDP_OP_MLP ? 5 : L.op[o].type == OSDP_OP_ATTN ? 4 : 1;
            ck_assert_uint_eq(L.op[o].scratch[OSDP_S_ACT].floats, (size_t)T * wide * (size_t)L.op[o].width);
        }
        osdp_plan p;
        ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
        for (int r = 0; r < 12; r++) {
            random_plan(&L, &p);
            check_plan(&L, &p, comm.size, 1 + (int)(rnd() % 2), 1 + (int)(rnd() % 2), (int)(rnd() % 2),
                       OSDP_BFLOAT16, residual_of(OSDP_BFLOAT16, r), quantum_of(r), &comm);
            checked++;
        }
        osdp_plan_free(&p);
        const int Ns[] = {2, 3, 4, 8};
        checked += check_random_plans(&L, Ns, 5);
        osdp_layout_free(&L);
        osdp_layout_free(&F);
    }
    osdp_model_config cfg;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", src_dir(), MODELS[1]);
    ck_assert(osdp_model_config_load(&cfg, path) == OSDP_OK);
    cfg.act_bf16 = 1;
    osdp_layout L;
    ck_assert(osdp_layout_build_tp(&L, &cfg, 8, 2, 3) == OSDP_OK);
    const int Ns[] = {1, 2, 3, 4};
    checked += check_random_plans(&L, Ns, 10);
    osdp_layout_free(&L);
    ck_assert_int_eq(checked, 4 * (12 + 20) + 40);
    osdp_comm_destroy(&comm);
}
END_TEST

static Suite *schedule_suite(void)
{
    const TTest *schedule[] = {test_measured_equals_schedule_and_closed_form, test_schedule_equals_closed_form,
                               test_tp_schedule_equals_closed_form, test_tp_staging_measured, test_schedule_errors,
                               test_tied_head, test_residual_layernorm_fusion, test_bf16_activations,
                               test_reduce_once_forward_moment, NULL};
    const osdp_check_case cases[] = {{.name = "schedule", .tests = schedule}};
    return osdp_check_suite("schedule", cases, sizeof cases / sizeof cases[0]);
}

/* the measured runs use a real 1-rank MPI communicator and the CPU backend */
const osdp_check_program osdp_check_this_program = {
    .suite = schedule_suite, .setup = osdp_check_mpi_cpu_setup, .teardown = osdp_check_mpi_teardown};

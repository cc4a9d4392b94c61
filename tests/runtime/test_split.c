/* Tests for operator splitting (DESIGN.md §3, issue 7):
 *   cuts      osdp_op_split: slices cover the operator, cuts fall on row
 *             boundaries of linear weights or at tensor-group starts (never
 *             between a weight and its bias), slices are balanced, the
 *             embedding refuses, impossible splits fail with a message
 *   compute   every operator run slice by slice (each slice in its own
 *             allocation, so that a read past a slice is an ASan error)
 *             equals the unsplit operator: outputs and gradients within
 *             1e-5 relative (the pieces of a split product are summed in a
 *             different order), and slices are acquired in pass order
 *   peak      the cost model's closed-form peak equals the runtime's own
 *             accounting (osdp_memory_predict, a dry run of the schedule) byte
 *             for byte on random split plans with random activation
 *             recompute per block, N = 1, 2, 3, 8, with and
 *             without prefetch
 *   traffic   the cost model's bytes per step do not depend on g when slices
 *             need no padding
 *   gamma_fixed  the per-operator fixed compute time and the step's work
 *             outside the operators ([step]): device files and cost
 *   recompute the cost model's recompute terms: 3 all-gathers + 1
 *             reduce-scatter for ZDP (c = 4), 2 passes for DP, compute x 4/3,
 *             and the activation memory it saves, as the runtime counts it
 *   auto      --recompute auto fits a model that no plan without recompute
 *             fits; --split auto is never slower than g = 1 */
#include "config.h"
#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/gpt.h"
#include "osdp/init.h"
#include "osdp/layout.h"
#include "osdp/model_config.h"
#include "osdp/planner.h"
#include "osdp/runtime.h"

#include "test_inputs.h"

#include "check_main.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned long long g_rng = 424242;
static unsigned rnd(void)
{
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(g_rng >> 33);
}

/* ------------------------------------------------------------------------ */

/* is e an allowed cut of op: the start of a non-bias tensor, or a row
 * boundary inside a linear weight */
static int allowed_cut(const osdp_op_layout *op, size_t e)
{
    for (int k = 0; k < op->n_tensors; k++) {
        const osdp_tensor_desc *t = &op->tensor[k];
        size_t n = strlen(t->name);
        int bias = n >= 5 && strcmp(t->name + n - 5, ".bias") == 0;
        if (e == t->offset) return !bias;
        if (e > t->offset && e < t->offset + t->numel)
            return t->ndim == 2 && (e - t->offset) % (size_t)t->cols == 0;
    }
    return 0;
}

/* the fused head (the default) takes one slice: each chunk of logits needs the whole weight */
START_TEST(test_fused_head_whole)
{
    osdp_layout L;
    load_layout(&L, "tiny", 0);
    const osdp_op_layout *head = &L.op[L.n_ops - 1];
    ck_assert_int_gt(head->head_chunk_rows, 0);
    ck_assert(!osdp_op_can_split(head));
    size_t b[OSDP_MAX_SLICES + 1];
    ck_assert_int_eq(osdp_op_split(head, 1, b), OSDP_OK);
    ck_assert_int_eq(osdp_op_split(head, 2, b), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "--head naive"), "%s", osdp_error_message());
    osdp_layout_free(&L);
}
END_TEST

START_TEST(test_cuts)
{
    const char *models[] = {"tiny", "bench_l6_d256", "ic_l8_mixed", "gpt2_small"};
    int checked = 0;
    for (int mi = 0; mi < 4; mi++) {
        osdp_layout L;
        load_layout_kernels(&L, models[mi], 0, 0, 1);   /* the naive head: the fused one is never cut */
        for (int i = 0; i < L.n_ops; i++) {
            const osdp_op_layout *op = &L.op[i];
            size_t maxrow = 0;
            for (int k = 0; k < op->n_tensors; k++)
                if (op->tensor[k].ndim == 2 && (size_t)op->tensor[k].cols > maxrow) maxrow = (size_t)op->tensor[k].cols;
            for (int g = 1; g <= 8; g++) {
                size_t b[OSDP_MAX_SLICES + 1];
                osdp_status s = osdp_op_split(op, g, b);
                if (op->type == OSDP_OP_EMBED && g > 1) {
                    ck_assert_int_eq(s, OSDP_ERR_INPUT);
                    ck_assert_msg(strstr(osdp_error_message(), "embed"), "%s", osdp_error_message());
                    continue;
                }
                ck_assert_msg(s == OSDP_OK, "%s %s g=%d: %s", models[mi], op->name, g, osdp_error_message());
                ck_assert(b[0] == 0 && b[g] == op->numel);
                for (int k = 1; k < g; k++) {
                    ck_assert_msg(b[k] > b[k - 1], "%s g=%d: cut %d not increasing", op->name, g, k);
                    ck_assert_msg(allowed_cut(op, b[k]), "%s g=%d: cut %zu not allowed", op->name, g, b[k]);
                    /* nearest allowed point: within one weight row (plus a
                     * LayerNorm/bias group) of the even share */
                    double even = (double)op->numel * k / g;
                    ck_assert_msg(fabs((double)b[k] - even) <= (double)maxrow + 2.0 * op->width + 8 * (double)op->width,
                                  "%s g=%d: cut %zu far from %g", op->name, g, b[k], even);
                }
                checked++;
            }
        }
        osdp_layout_free(&L);
    }
    ck_assert_int_gt(checked, 100);
    /* more slices than places to cut */
    osdp_layout L;
    load_layout_kernels(&L, "tiny", 0, 0, 1);
    size_t b[OSDP_MAX_SLICES + 1];
    ck_assert_int_eq(osdp_op_split(&L.op[L.n_ops - 1], OSDP_MAX_SLICES + 1, b), OSDP_ERR_INPUT);
    osdp_layout_free(&L);
}
END_TEST

/* ------------------------------------------------------------------------ */

typedef struct slice_log {
    int order[4 * OSDP_MAX_SLICES], n;
    const void **weights;   /* the operator reads its weights as const void * (osdp/gpt.h) */
    float **copies;
} slice_log;

static osdp_status record_acquire(void *arg, int s)
{
    slice_log *lg = arg;
    ck_assert_int_lt(lg->n, 4 * OSDP_MAX_SLICES);
    lg->order[lg->n++] = s;
    lg->weights[s] = lg->copies[s];
    return OSDP_OK;
}

static double max_rel(const float *a, const float *b, size_t n)
{
    double worst = 0, scale = 1e-3;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(a[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]) / scale);
    return worst;
}

START_TEST(test_sliced_equals_unsplit)
{
    const char *models[] = {"tiny", "tests/inputs/t_ic.ini"};
    const int B = 2;
    int checked = 0;
    for (int mi = 0; mi < 2; mi++) {
        osdp_layout L;
        load_layout_kernels(&L, models[mi], 16, 0, 1);
        const osdp_compute_backend *be = &osdp_compute_cpu;
        osdp_op_context ctx = {.backend = be, .layout = &L, .B = B, .T = L.T};
        size_t ws_floats = osdp_workspace_floats(&L, B);
        const size_t bt = (size_t)B * (size_t)L.T, in_floats = bt * L.max_width;
        float *input = malloc(in_floats * sizeof(float));
        float *ws_a = malloc(ws_floats * sizeof(float)), *ws_b = malloc(ws_floats * sizeof(float));
        ck_assert(input && ws_a && ws_b);
        for (size_t e = 0; e < in_floats; e++) input[e] = 0.5f * osdp_normal_at(7, 99, e);
        for (int i = 1; i < L.n_ops; i++) {   /* every operator but the embedding */
            const osdp_op_layout *op = &L.op[i];
            size_t af = (size_t)B * op->act_floats_per_seq;
            float *w = malloc(op->numel * sizeof(float)), *g_ref = calloc(op->numel, sizeof(float));
            float *acts_ref = calloc(af, sizeof(float)), *acts_sl = calloc(af, sizeof(float));
            ck_assert(w && g_ref && acts_ref && acts_sl);
            osdp_init_op_range(op, i, 11, 0, op->numel, w);
            /* biases and LayerNorm shifts are zero at init: give them values */
            for (size_t e = 0; e < op->numel; e++) w[e] += 0.01f * osdp_normal_at(5, (uint64_t)i, e);
            osdp_op_acts ar, as;
            osdp_op_acts_carve(&L, i, B, acts_ref, &ar);
            osdp_op_acts_carve(&L, i, B, acts_sl, &as);
            if (op->type == OSDP_OP_HEAD)
                for (size_t e = 0; e < bt; e++) ar.tokens[e] = as.tokens[e] = (int)(rnd() % (unsigned)L.cfg.vocab);
            osdp_workspace wa, wb;
            osdp_workspace_carve(&L, B, ws_a, &wa);
            osdp_workspace_carve(&L, B, ws_b, &wb);
            osdp_op_forward(&ctx, i, w, input, &ar);
            for (size_t e = 0; e < in_floats; e++) wa.dres[0][e] = 0.1f * osdp_normal_at(3, 1, e);
            osdp_op_backward(&ctx, i, w, g_ref, input, &ar, &wa, 1.0f / (float)bt);
            for (int g = 2; g <= 5; g++) {
                size_t bounds[OSDP_MAX_SLICES + 1];
                ck_assert(osdp_op_split(op, g, bounds) == OSDP_OK);
                float *copies[OSDP_MAX_SLICES], *grads[OSDP_MAX_SLICES];
                const void *weights[OSDP_MAX_SLICES] = {0};
                for (int s = 0; s < g; s++) {
                    size_t n = bounds[s + 1] - bounds[s];
                    copies[s] = malloc(n * sizeof(float));
                    grads[s] = calloc(n, sizeof(float));
                    ck_assert(copies[s] && grads[s]);
                    memcpy(copies[s], w + bounds[s], n * sizeof(float));
                }
                slice_log lg = {.n = 0, .weights = weights, .copies = copies};
                osdp_op_slices sl = {.n = g, .bounds = bounds, .weights = weights, .grads = grads,
                                     .acquire = record_acquire, .arg = &lg};
                memset(acts_sl, 0, af * sizeof(float));
                osdp_op_acts_carve(&L, i, B, acts_sl, &as);
                if (op->type == OSDP_OP_HEAD) memcpy(as.tokens, ar.tokens, bt * sizeof(int));
                ck_assert(osdp_op_forward_sliced(&ctx, i, &sl, input, &as) == OSDP_OK);
                ck_assert_int_eq(lg.n, g);   /* every slice once, upwards */
                for (int k = 0; k < g; k++) ck_assert_int_eq(lg.order[k], k);
                ck_assert_msg(max_rel(ar.out ? ar.out : ar.losses, as.out ? as.out : as.losses,
                                      ar.out ? bt * (size_t)op->width : bt) < 1e-5,
                              "%s %s g=%d: forward differs", models[mi], op->name, g);
                lg.n = 0;
                for (int s = 0; s < g; s++) weights[s] = NULL;
                for (size_t e = 0; e < in_floats; e++) wb.dres[0][e] = 0.1f * osdp_normal_at(3, 1, e);
                wb.cur = 0;
                ck_assert(osdp_op_backward_sliced(&ctx, i, &sl, input, &as, &wb, 1.0f / (float)bt) == OSDP_OK);
                ck_assert_int_eq(lg.n, g);   /* every slice once, downwards */
                for (int k = 0; k < g; k++) ck_assert_int_eq(lg.order[k], g - 1 - k);
                ck_assert_int_eq(wa.cur, wb.cur);
                ck_assert_msg(max_rel(wa.dres[wa.cur], wb.dres[wb.cur], bt * (size_t)op->width_in) < 1e-5,
                              "%s %s g=%d: d(input) differs", models[mi], op->name, g);
                for (int s = 0; s < g; s++) {
                    ck_assert_msg(max_rel(g_ref + bounds[s], grads[s], bounds[s + 1] - bounds[s]) < 1e-5,
                                  "%s %s g=%d: gradients of slice %d differ", models[mi], op->name, g, s);
                    free(copies[s]);
                    free(grads[s]);
                }
                checked++;
            }
            free(w);
            free(g_ref);
            free(acts_ref);
            free(acts_sl);
        }
        free(input);
        free(ws_a);
        free(ws_b);
        osdp_layout_free(&L);
    }
    ck_assert_int_gt(checked, 20);
}
END_TEST

/* ------------------------------------------------------------------------ */

static osdp_device test_device(void)
{
    osdp_device d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "test");
    d.mem_limit = 1LL << 40;
    d.param_bytes = d.grad_bytes = d.act_bytes = 4;
    d.all_gather = (osdp_collective_cost){.alpha = 2e-5, .beta = 1e-9};
    d.reduce_scatter = (osdp_collective_cost){.alpha = 3e-5, .beta = 1.5e-9};
    for (int t = 0; t < OSDP_N_OP_TYPES; t++) d.gamma[t] = 2e-11;
    return d;
}

START_TEST(test_peak_equals_runtime_split)
{
    const char *models[] = {"tiny", "bench_l6_d256", "ic_l8_mixed"};
    osdp_device d = test_device();
    int checked = 0;
    for (int mi = 0; mi < 3; mi++) {
        osdp_layout L;
        load_layout(&L, models[mi], 64);
        osdp_plan p;
        ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
        const int Ns[] = {1, 2, 3, 8};
        for (int ni = 0; ni < 4; ni++)
            for (int pf = 0; pf < 2; pf++)
                for (int r = 0; r < 10; r++) {
                    for (int i = 0; i < L.n_ops; i++) {
                        int g = L.op[i].type == OSDP_OP_EMBED ? 1 : 1 + (int)(rnd() % 4);
                if (!osdp_op_can_split(&L.op[i])) g = 1;   /* the fused head too */
                        if (!osdp_op_can_split(&L.op[i])) g = 1;   /* the fused head too */
                        p.slices[i] = g;
                        p.zdp_slices[i] = r == 0 ? g : r == 1 ? 0 : (int)(rnd() % (unsigned)(g + 1));
                        int block = osdp_op_can_recompute(L.op[i].type);
                        p.recompute[i] = block && (r == 2 || (r > 2 && (rnd() & 1)));
                    }
                    /* fp32 weights, and bf16 weights with fp32 gradients */
                    d.param_bytes = r & 2 ? 2 : 4;
                    osdp_dtype wt = r & 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32;
                    osdp_cost_model cm;
                    osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = Ns[ni], .prefetch = pf},
                                         OSDP_COST_PAPER, NULL);
                    osdp_memory_prediction pr;
                    int b = 1 + (r & 1);
                    ck_assert_msg(osdp_memory_predict(&L, &p, Ns[ni], b, 1 + (r & 1), pf, wt, &pr) == OSDP_OK, "%s",
                                  osdp_error_message());
                    long long model = osdp_cost_peak(&cm, &p, b, NULL);
                    ck_assert_msg(model == (long long)pr.peak_total, "%s N=%d pf=%d r=%d %s weights: model %lld, runtime %zu",
                                  models[mi], Ns[ni], pf, r, osdp_dtype_name(wt), model, pr.peak_total);
                    checked++;
                }
        osdp_plan_free(&p);
        osdp_layout_free(&L);
    }
    ck_assert_int_eq(checked, 3 * 4 * 2 * 10);
}
END_TEST

/* all-ZDP split into g: the transient weights shrink to about 1/g of the
 * largest operator, and the runtime says so */
START_TEST(test_split_lowers_peak)
{
    osdp_layout L;
    load_layout(&L, "bench_l4_d512", 64);
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
    long long prev = -1;
    for (int g = 1; g <= 4; g *= 2) {
        for (int i = 0; i < L.n_ops; i++) {
            p.slices[i] = osdp_op_can_split(&L.op[i]) ? g : 1;   /* not the embedding, nor the fused head */
            p.zdp_slices[i] = p.slices[i];
        }
        osdp_memory_prediction pr;
        ck_assert(osdp_memory_predict(&L, &p, 4, 1, 1, 0, OSDP_FLOAT32, &pr) == OSDP_OK);
        long long w = (long long)pr.peak[OSDP_MEMORY_WEIGHTS];
        if (prev >= 0) ck_assert_msg(w < prev, "g=%d: gathered-weight peak %lld not below %lld", g, w, prev);
        prev = w;
    }
    osdp_plan_free(&p);
    osdp_layout_free(&L);
}
END_TEST

START_TEST(test_traffic_independent_of_split)
{
    osdp_layout L;
    load_layout(&L, "bench_l6_d256", 128);
    osdp_device d = test_device();
    d.all_gather.alpha = d.reduce_scatter.alpha = 0;   /* bandwidth terms only: bytes */
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = 4, .prefetch = 1}, OSDP_COST_PAPER, NULL);
    for (int i = 1; i < L.n_ops; i++) {
        osdp_op_time t1, t4;
        osdp_cost_op_time(&cm, i, 1, 1, 1, 1, &t1);
        osdp_cost_op_time(&cm, i, 4, 4, 1, 1, &t4);
        ck_assert_msg(fabs(t1.comm - t4.comm) <= 1e-12 * t1.comm, "%s: %g vs %g", L.op[i].name, t1.comm, t4.comm);
    }
    osdp_layout_free(&L);
}
END_TEST

/* The cost model's recompute terms.  Time: the recomputed forward is a
 * third of forward + backward (compute x 4/3), and a ZDP slice is gathered
 * a third time per micro-step, so a ZDP operator with recompute moves 4
 * passes of its weights (3 all-gathers + 1 reduce-scatter: c = 4 where ZDP
 * has 3), a DP one still 2 (c = 2).  Memory: an operator that recomputes
 * keeps only its output (b T d) until its backward, and the activation peak
 * falls by what the runtime's own accounting (a dry run of the schedule,
 * the same allocator the training log reports) says. */
START_TEST(test_recompute_costs)
{
    osdp_layout L;
    load_layout(&L, "tiny", 0);
    osdp_device d = test_device();
    d.reduce_scatter = d.all_gather; /* the paper's eq. 2: one cost per pass */
    for (int t = 0; t < OSDP_N_OP_TYPES; t++) d.gamma_fixed[t] = 1e-4 * (t + 1);
    const int N = 4, b = 3, op = 2; /* mlp.0 */
    ck_assert_str_eq(L.op[op].name, "mlp.0");
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = N, .prefetch = 1}, OSDP_COST_PAPER, NULL);
    const double S = 4.0 * (double)osdp_padded_numel(L.op[op].numel, N);
    const double one = (N - 1) * (d.all_gather.alpha + S / N * d.all_gather.beta); /* one pass of the weights */
    const double kern = d.gamma_fixed[OSDP_OP_MLP] + b * (double)L.T * osdp_cost_op_flops(&L.op[op]) * d.gamma[OSDP_OP_MLP];
    for (int A = 1; A <= 2; A++) {
        osdp_op_time t[2][2]; /* [zdp][recompute] */
        for (int z = 0; z < 2; z++)
            for (int rc = 0; rc < 2; rc++) osdp_cost_op_time_rc(&cm, op, 1, z, rc, b, A, &t[z][rc]);
        /* c = 2 (DP) and 3 (ZDP) without recompute; 2 and 4 with (A = 1) */
        ck_assert(fabs(t[0][0].comm - (1 + A) * one) <= 1e-12 * t[0][0].comm);
        ck_assert(fabs(t[0][1].comm - t[0][0].comm) <= 1e-12 * t[0][0].comm);
        ck_assert(fabs(t[1][0].comm - 3 * A * one) <= 1e-12 * t[1][0].comm);
        ck_assert_msg(fabs(t[1][1].comm - 4 * A * one) <= 1e-12 * t[1][1].comm, "A=%d: ZDP + recompute %g, want %g", A,
                      t[1][1].comm, 4 * A * one);
        for (int z = 0; z < 2; z++) {
            ck_assert(fabs(t[z][0].compute - A * kern) <= 1e-12 * t[z][0].compute);
            ck_assert_msg(fabs(t[z][1].compute - A * kern * 4 / 3) <= 1e-12 * t[z][1].compute, "compute %g, want %g",
                          t[z][1].compute, A * kern * 4 / 3);
            ck_assert(fabs(t[z][1].total - t[z][1].compute - t[z][1].comm) <= 1e-12 * t[z][1].total);
        }
        /* cm.recompute (the plan's flags) reaches the same numbers */
        int flags[16] = {0};
        flags[op] = 1;
        osdp_cost_model with = cm;
        with.recompute = flags;
        osdp_op_time tz;
        osdp_cost_op_time(&with, op, 1, 1, b, A, &tz);
        ck_assert(tz.total == t[1][1].total);
        /* split: only the ZDP slices are gathered a third time */
        osdp_op_time ts, tn;
        osdp_cost_op_time_rc(&cm, op, 4, 2, 1, b, A, &ts);
        osdp_cost_op_time_rc(&cm, op, 4, 2, 0, b, A, &tn);
        size_t bounds[OSDP_MAX_SLICES + 1];
        ck_assert(osdp_op_split(&L.op[op], 4, bounds) == OSDP_OK);
        double extra = 0;
        for (int sl = 0; sl < 2; sl++)
            extra += (N - 1) * (d.all_gather.alpha
                                + 4.0 * (double)osdp_padded_numel(bounds[sl + 1] - bounds[sl], N) / N * d.all_gather.beta);
        ck_assert_msg(fabs(ts.comm - tn.comm - A * extra) <= 1e-12 * ts.comm, "split: %g extra, want %g",
                      ts.comm - tn.comm, A * extra);
    }
    osdp_layout_free(&L);

    /* activation memory: the model's activation peak (every operator's
     * acts until its backward, plus the rebuilt rest during it) against the
     * runtime's, with and without recompute */
    const char *models[] = {"tiny", "bench_l6_d256", "ic_l8_mixed"};
    int checked = 0;
    for (int mi = 0; mi < 3; mi++) {
        load_layout(&L, models[mi], 64);
        osdp_plan p;
        ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
        for (int r = 0; r < 8; r++) {
            const int nr = 1 + (int)(rnd() % 4), bb = 1 + r % 3, pf = r & 1;
            long long model[2], runtime[2];
            for (int i = 0; i < L.n_ops; i++) {
                int g = L.op[i].type == OSDP_OP_EMBED ? 1 : 1 + (int)(rnd() % 4);
                if (!osdp_op_can_split(&L.op[i])) g = 1;   /* the fused head too */
                p.slices[i] = g;
                p.zdp_slices[i] = (int)(rnd() % (unsigned)(g + 1));
            }
            int chosen[64] = {0};
            for (int i = 0; i < L.n_ops; i++) /* every block (r even) or a random set */
                chosen[i] = osdp_op_can_recompute(L.op[i].type) && (r % 2 == 0 || (rnd() & 1));
            chosen[1] = 1; /* attn.0: at least one */
            for (int w = 0; w < 2; w++) {
                for (int i = 0; i < L.n_ops; i++) p.recompute[i] = w ? chosen[i] : 0;
                osdp_cost_model c2;
                osdp_cost_model_init(&c2, &L, &d, &(osdp_step_geometry){.n_ranks = nr, .prefetch = pf}, OSDP_COST_PAPER, NULL);
                c2.recompute = p.recompute;
                long long acts = 0, peak = 0;
                for (int u = 0; u < L.n_ops; u++) {
                    osdp_op_mem m;
                    osdp_cost_op_mem(&c2, u, p.slices[u], p.zdp_slices[u], bb, &m);
                    acts += m.acts;
                    if (acts + m.rebuilt > peak) peak = acts + m.rebuilt;
                }
                model[w] = peak;
                osdp_memory_prediction pr;
                ck_assert(osdp_memory_predict(&L, &p, nr, bb, 1, pf, OSDP_FLOAT32, &pr) == OSDP_OK);
                runtime[w] = (long long)pr.peak[OSDP_MEMORY_ACTIVATIONS];
                ck_assert_msg(model[w] == runtime[w], "%s r=%d recompute=%d: model %lld, runtime %lld", models[mi], r, w,
                              model[w], runtime[w]);
            }
            ck_assert_msg(model[0] - model[1] == runtime[0] - runtime[1] && model[1] < model[0],
                          "%s r=%d: recompute saves %lld (model), %lld (runtime)", models[mi], r, model[0] - model[1],
                          runtime[0] - runtime[1]);
            checked++;
        }
        osdp_plan_free(&p);
        osdp_layout_free(&L);
    }
    ck_assert_int_eq(checked, 24);
}
END_TEST

/* --recompute auto makes a model fit where no plan without recompute does;
 * --split auto is never slower than g = 1; both plans' peaks are what the
 * runtime measures */
START_TEST(test_planner_auto_modes)
{
    osdp_layout L;
    load_layout(&L, "bench_l6_d256", 128);
    osdp_device d = test_device();
    osdp_planner_options o;
    osdp_planner_defaults(&o);
    o.geo.n_ranks = 4;
    o.geo.micro_batch = 8;
    /* the smallest peak without recompute, less a little */
    long long need = 0;
    ck_assert(osdp_planner_min_memory(&L, &d, &o, 8, &need, NULL) == OSDP_OK);
    o.mem_limit = need - 4096;
    osdp_planner_result r;
    ck_assert_int_eq(osdp_planner_run(&L, &d, &o, &r), OSDP_ERR_INFEASIBLE);
    osdp_planner_result_free(&r);
    o.recompute_auto = 1;
    ck_assert_msg(osdp_planner_run(&L, &d, &o, &r) == OSDP_OK, "%s", osdp_error_message());
    int rc = 0;
    for (int i = 0; i < L.n_ops; i++) rc += r.plan.recompute[i];
    ck_assert_int_gt(rc, 0);
    osdp_memory_prediction pr;
    ck_assert(osdp_memory_predict(&L, &r.plan, 4, 8, 1, 1, OSDP_FLOAT32, &pr) == OSDP_OK);
    ck_assert(r.peak_bytes == (long long)pr.peak_total && r.peak_bytes <= o.mem_limit);
    osdp_planner_result_free(&r);

    o.recompute_auto = 0;
    o.mem_limit = need + (need >> 3);
    osdp_planner_result r1, ra;
    ck_assert(osdp_planner_run(&L, &d, &o, &r1) == OSDP_OK);
    o.split_auto = 1;
    ck_assert(osdp_planner_run(&L, &d, &o, &ra) == OSDP_OK);
    ck_assert(ra.samples_per_s >= r1.samples_per_s);
    ck_assert(osdp_memory_predict(&L, &ra.plan, 4, 8, 1, 1, OSDP_FLOAT32, &pr) == OSDP_OK);
    ck_assert(ra.peak_bytes == (long long)pr.peak_total && ra.peak_bytes <= o.mem_limit);
    osdp_planner_result_free(&r1);
    osdp_planner_result_free(&ra);
    osdp_layout_free(&L);
}
END_TEST

/* gamma_fixed: parsed, optional, >= 0, written back, and in the compute time */
START_TEST(test_gamma_fixed)
{
    const char *base = "[device]\nmem_limit = 1G\n[all_gather]\nalpha = 1e-5\nbeta = 1e-9\n"
                       "[reduce_scatter]\nalpha = 1e-5\nbeta = 1e-9\n"
                       "[gamma]\nembed = 1e-11\nattn = 2e-11\nmlp = 3e-11\nhead = 4e-11\n";
    char text[1024];
    osdp_device d;
    ck_assert(osdp_device_parse(&d, base, "base") == OSDP_OK);
    ck_assert(d.gamma_fixed[OSDP_OP_ATTN] == 0);
    snprintf(text, sizeof text, "%s[gamma_fixed]\nattn = 2.5e-4\n", base);
    ck_assert_msg(osdp_device_parse(&d, text, "fixed") == OSDP_OK, "%s", osdp_error_message());
    ck_assert(d.gamma_fixed[OSDP_OP_ATTN] == 2.5e-4 && d.gamma_fixed[OSDP_OP_MLP] == 0);
    snprintf(text, sizeof text, "%s[gamma_fixed]\nattn = -1\n", base);
    ck_assert_int_eq(osdp_device_parse(&d, text, "negative"), OSDP_ERR_INPUT);
    ck_assert(strstr(osdp_error_message(), "gamma_fixed"));
    snprintf(text, sizeof text, "%s[gamma_fixed]\nattention = 1\n", base);
    ck_assert_int_eq(osdp_device_parse(&d, text, "unknown"), OSDP_ERR_INPUT);

    snprintf(text, sizeof text, "%s[gamma_fixed]\nattn = 2.5e-4\nmlp = 1e-4\n", base);
    ck_assert(osdp_device_parse(&d, text, "fixed") == OSDP_OK);
    char path[] = "/tmp/osdp_test_device_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    ck_assert(osdp_device_write(&d, "round trip", path) == OSDP_OK);
    osdp_device back;
    ck_assert(osdp_device_load(&back, path) == OSDP_OK);
    unlink(path);
    ck_assert(fabs(back.gamma_fixed[OSDP_OP_MLP] - 1e-4) < 1e-12 && fabs(back.gamma[OSDP_OP_HEAD] - 4e-11) < 1e-20);

    osdp_layout L;
    load_layout(&L, "tiny", 32);
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = 1, .prefetch = 1}, OSDP_COST_PAPER, NULL);
    osdp_op_time t;
    const int b = 3, A = 2;
    osdp_cost_op_time(&cm, 1, 1, 0, b, A, &t);   /* attn.0 */
    double want = A * (2.5e-4 + (double)b * L.T * osdp_cost_op_flops(&L.op[1]) * 2e-11);
    ck_assert_msg(fabs(t.compute - want) <= 1e-12 * want, "compute %g, want %g", t.compute, want);
    /* the step's work outside the operators: per shard element per step,
     * per full-buffer element per micro-step */
    osdp_device e = d;
    e.step_shard_param = 3e-9;
    e.step_full_param = 1e-10;
    cm.dev = &e;
    cm.geo.n_ranks = 2;
    osdp_op_time t2, t3;
    cm.dev = &d;
    osdp_cost_op_time(&cm, 1, 1, 0, b, A, &t2);
    cm.dev = &e;
    osdp_cost_op_time(&cm, 1, 1, 0, b, A, &t3);
    double P = (double)osdp_padded_numel(L.op[1].numel, 2);
    want = t2.compute + P / 2 * 3e-9 + A * P * 1e-10;
    ck_assert_msg(fabs(t3.compute - want) <= 1e-12 * want, "with step work %g, want %g", t3.compute, want);
    snprintf(text, sizeof text, "%s[step]\nshard_param = 3e-9\nfull_param = 1e-10\n", base);
    ck_assert_msg(osdp_device_parse(&d, text, "step") == OSDP_OK, "%s", osdp_error_message());
    ck_assert(d.step_shard_param == 3e-9 && d.step_full_param == 1e-10);
    snprintf(text, sizeof text, "%s[step]\nshard = 1\n", base);
    ck_assert_int_eq(osdp_device_parse(&d, text, "bad step key"), OSDP_ERR_INPUT);
    osdp_layout_free(&L);
}
END_TEST

static Suite *split_suite(void)
{
    const TTest *core[] = {test_cuts, test_fused_head_whole, test_sliced_equals_unsplit, test_peak_equals_runtime_split,
                           test_split_lowers_peak, test_traffic_independent_of_split, test_recompute_costs,
                           test_planner_auto_modes, test_gamma_fixed, NULL};
    const osdp_check_case cases[] = {
        {.name = "core", .tests = core},
    };
    return osdp_check_suite("split", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = split_suite};

/* Tests of the pieces of the runtime that need no MPI:
 *
 *   optim    learning-rate schedule, clipping, AdamW against a double
 *            reference computed here, decay only on 2-D tensors of a shard
 *   memory   osdp_memory_predict (dry runtime) against peaks derived from the
 *            layout by hand for DP / ZDP / mixed plans, with and without prefetch
 *   plan     plan files: modes, k/g, errors, write -> parse round trip
 *
 * Nothing here calls MPI: the dry runtime does not touch it. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "check_main.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/compute.h"
#include "osdp/gpt.h"
#include "osdp/init.h"
#include "osdp/layout.h"
#include "osdp/memory.h"
#include "osdp/model_config.h"
#include "osdp/optim.h"
#include "osdp/plan.h"
#include "osdp/runtime.h"
#include "test_model_text.h"

/* ------------------------------------------------------------------------ */
/* 1. optimizer                                                              */

static int close_rel(double a, double b, double rtol, double atol)
{
    return fabs(a - b) <= atol + rtol * fabs(b);
}

START_TEST(test_lr_schedule)
{
    osdp_optim_config c;
    osdp_optim_defaults(&c);
    c.lr = 1e-3f;
    c.min_lr_frac = 0.1f;
    c.warmup_steps = 10;
    c.total_steps = 110;
    const double lr = 1e-3, lo = 1e-4;
    ck_assert_msg(close_rel(osdp_lr_at(&c, 0), lr / 10, 1e-6, 0), "step 0: %g", (double)osdp_lr_at(&c, 0));
    ck_assert_msg(close_rel(osdp_lr_at(&c, 4), lr / 2, 1e-6, 0), "step 4: %g", (double)osdp_lr_at(&c, 4));
    ck_assert_msg(close_rel(osdp_lr_at(&c, 9), lr, 1e-6, 0), "step 9: %g", (double)osdp_lr_at(&c, 9));
    for (long s = 1; s < 10; s++) ck_assert(osdp_lr_at(&c, s) > osdp_lr_at(&c, s - 1));
    /* cosine from lr (step 10) to lr * min_lr_frac (step 110), midpoint at 60 */
    ck_assert_msg(close_rel(osdp_lr_at(&c, 10), lr, 1e-6, 0), "step 10: %g", (double)osdp_lr_at(&c, 10));
    ck_assert_msg(close_rel(osdp_lr_at(&c, 60), (lr + lo) / 2, 1e-5, 0), "step 60: %g", (double)osdp_lr_at(&c, 60));
    double quarter = lo + 0.5 * (1 + cos(3.14159265358979323846 * 0.25)) * (lr - lo);
    ck_assert_msg(close_rel(osdp_lr_at(&c, 35), quarter, 1e-5, 0), "step 35: %g, expected %g",
                  (double)osdp_lr_at(&c, 35), quarter);
    ck_assert_msg(close_rel(osdp_lr_at(&c, 110), lo, 1e-5, 0), "step 110: %g", (double)osdp_lr_at(&c, 110));
    ck_assert_msg(close_rel(osdp_lr_at(&c, 1000), lo, 1e-5, 0), "step 1000: %g", (double)osdp_lr_at(&c, 1000));
    for (long s = 11; s <= 120; s++) ck_assert(osdp_lr_at(&c, s) <= osdp_lr_at(&c, s - 1));
    /* no warmup: the first step already has the peak */
    c.warmup_steps = 0;
    ck_assert_msg(close_rel(osdp_lr_at(&c, 0), lr, 1e-6, 0), "no warmup, step 0: %g", (double)osdp_lr_at(&c, 0));
    ck_assert_msg(close_rel(osdp_lr_at(&c, 55), (lr + lo) / 2, 1e-5, 0), "no warmup, step 55: %g",
                  (double)osdp_lr_at(&c, 55));
    /* horizon not beyond the warmup: constant after it */
    c.warmup_steps = 10;
    c.total_steps = 5;
    ck_assert_msg(close_rel(osdp_lr_at(&c, 20), lr, 1e-6, 0), "short horizon: %g", (double)osdp_lr_at(&c, 20));
}
END_TEST

START_TEST(test_clip_scale)
{
    osdp_optim_config c;
    osdp_optim_defaults(&c);
    c.grad_clip = 1.0f;
    ck_assert(osdp_clip_scale(&c, 0.5) == 1.0f);
    ck_assert(osdp_clip_scale(&c, 0.0) == 1.0f);
    ck_assert(osdp_clip_scale(&c, 1.0) == 1.0f);
    ck_assert_msg(close_rel(osdp_clip_scale(&c, 4.0), 0.25, 1e-7, 0), "%g", (double)osdp_clip_scale(&c, 4.0));
    c.grad_clip = 2.5f;
    ck_assert_msg(close_rel(osdp_clip_scale(&c, 10.0), 0.25, 1e-7, 0), "%g", (double)osdp_clip_scale(&c, 10.0));
    ck_assert(osdp_clip_scale(&c, 2.0) == 1.0f);
    c.grad_clip = 0.0f;
    ck_assert(osdp_clip_scale(&c, 100.0) == 1.0f);
    c.grad_clip = -1.0f;
    ck_assert(osdp_clip_scale(&c, 100.0) == 1.0f);
}
END_TEST

/* AdamW in double: decoupled decay, bias correction, eps outside the root */
static void adamw_ref(double *w, double *m, double *v, const float *g, size_t n, double lr, double b1, double b2,
                      double eps, double wd, double scale, long t)
{
    for (size_t i = 0; i < n; i++) {
        double gr = (double)g[i] * scale;
        m[i] = b1 * m[i] + (1 - b1) * gr;
        v[i] = b2 * v[i] + (1 - b2) * gr * gr;
        double mh = m[i] / (1 - pow(b1, (double)t)), vh = v[i] / (1 - pow(b2, (double)t));
        w[i] -= lr * (mh / (sqrt(vh) + eps) + wd * w[i]);
    }
}

START_TEST(test_adamw_by_hand)
{
    enum { n = 6 };
    const float w0[n] = {0.5f, -0.25f, 1.5f, 0.0f, -2.0f, 0.75f};
    /* gradients for step 1 and step 2; element 3 has a tiny gradient where eps
     * matters, element 5 none at all (decay only) */
    const float g1[n] = {0.1f, -0.3f, 2.0f, 1e-9f, 0.02f, 0.0f};
    const float g2[n] = {-0.2f, -0.1f, 1.0f, -1e-9f, 0.5f, 0.0f};
    const float lrs[2] = {1e-2f, 5e-3f};
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8;
    const double wds[2] = {0.0, 0.1};
    const double scales[2] = {1.0, 0.5};
    for (int iw = 0; iw < 2; iw++)
        for (int is = 0; is < 2; is++) {
            float w[n], m[n] = {0}, v[n] = {0};
            double rw[n], rm[n] = {0}, rv[n] = {0};
            for (int i = 0; i < n; i++) rw[i] = w[i] = w0[i];
            for (long t = 1; t <= 2; t++) {
                const float *g = t == 1 ? g1 : g2;
                osdp_compute_cpu.adamw(w, g, m, v, n, lrs[t - 1], (float)b1, (float)b2, (float)eps,
                                       (float)wds[iw], (float)scales[is], t);
                adamw_ref(rw, rm, rv, g, n, lrs[t - 1], (float)b1, (float)b2, (float)eps, (float)wds[iw],
                          scales[is], t);
                for (int i = 0; i < n; i++) {
                    ck_assert_msg(close_rel(w[i], rw[i], 1e-6, 1e-7),
                                  "wd %g scale %g step %ld: w[%d] = %.9g, expected %.9g", wds[iw], scales[is], t, i,
                                  (double)w[i], rw[i]);
                    ck_assert_msg(close_rel(m[i], rm[i], 1e-5, 1e-12), "step %ld: m[%d] = %.9g, expected %.9g", t, i,
                                  (double)m[i], rm[i]);
                    ck_assert_msg(close_rel(v[i], rv[i], 1e-5, 1e-20), "step %ld: v[%d] = %.9g, expected %.9g", t, i,
                                  (double)v[i], rv[i]);
                }
            }
            /* spot checks independent of the reference: step 1 moves every
             * element with a gradient by lr * sign(g) (m_hat / sqrt(v_hat) = +-1) */
            if (iw == 0) {
                float w1[n], m1[n] = {0}, v1[n] = {0};
                memcpy(w1, w0, sizeof w1);
                osdp_compute_cpu.adamw(w1, g1, m1, v1, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, (float)scales[is], 1);
                ck_assert_msg(fabs((w0[0] - w1[0]) - 1e-2) < 1e-6, "w[0] moved %g", (double)(w0[0] - w1[0]));
                ck_assert_msg(fabs((w0[1] - w1[1]) + 1e-2) < 1e-6, "w[1] moved %g", (double)(w0[1] - w1[1]));
                ck_assert(w1[5] == w0[5]);
                /* |g| * scale ~ 5e-10 < eps: the step is much smaller than lr */
                ck_assert_msg(fabs((double)w1[3]) < 1e-3, "tiny gradient moved w[3] by %g", (double)w1[3]);
            } else {
                /* decay only, element 5: w * (1 - lr wd) per step */
                double want = w0[5] * (1 - 1e-2 * 0.1) * (1 - 5e-3 * 0.1);
                ck_assert_msg(fabs(w[5] - want) < 1e-7, "decay-only element: %.9g, expected %.9g", (double)w[5], want);
            }
        }
}
END_TEST

START_TEST(test_adamw_shard_decay)
{
    osdp_layout L;
    layout_ok(&L, "[model]\nn_layer = 2\nn_head = 2\nn_embd = 8\nvocab = 11\nctx = 6\n", 5);
    const osdp_op_layout *op = &L.op[2];   /* mlp.0 */
    ck_assert_str_eq(op->name, "mlp.0");
    const int kfw = find_tensor(op, "fc.weight"), kfb = find_tensor(op, "fc.bias"), kpw = find_tensor(op, "proj.weight");
    ck_assert(kfw >= 0 && kfb >= 0 && kpw >= 0);
    const size_t fb_lo = op->tensor[kfb].offset, fb_hi = fb_lo + op->tensor[kfb].numel;
    ck_assert_uint_eq(op->tensor[kpw].offset, fb_hi);
    ck_assert_uint_eq(op->tensor[kfw].offset + op->tensor[kfw].numel, fb_lo);

    osdp_optim_config c;
    osdp_optim_defaults(&c);
    c.weight_decay = 0.1f;
    const float lr = 1e-2f, scale = 0.5f;
    /* shard [lo, lo + n): 12 elements of fc.weight, all of fc.bias, 16 of proj.weight */
    const size_t lo = fb_lo - 12, n = (fb_hi - fb_lo) + 28;
    float *w = xmalloc(n * sizeof(float)), *g = xmalloc(n * sizeof(float));
    float *m = xmalloc(n * sizeof(float)), *v = xmalloc(n * sizeof(float));
    double *rw = xmalloc(n * sizeof(double)), *rm = xmalloc(n * sizeof(double)), *rv = xmalloc(n * sizeof(double));
    float *gz = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        w[i] = (float)(rnd_unit() - 0.5);
        g[i] = (float)(rnd_unit() - 0.5);
        m[i] = v[i] = 0;
        rw[i] = w[i];
        rm[i] = rv[i] = 0;
        gz[i] = 0;
    }
    for (long t = 1; t <= 2; t++) {
        osdp_adamw_shard(&osdp_compute_cpu, op, lo, n, w, g, m, v, &c, lr, scale, t);
        for (size_t i = 0; i < n; i++) {
            size_t e = lo + i;
            int two_d = !(e >= fb_lo && e < fb_hi);
            adamw_ref(rw + i, rm + i, rv + i, g + i, 1, lr, c.beta1, c.beta2, c.eps, two_d ? c.weight_decay : 0.0,
                      scale, t);
            ck_assert_msg(close_rel(w[i], rw[i], 1e-6, 1e-7), "step %ld element %zu (%s): %.9g, expected %.9g", t, e,
                          two_d ? "2-D" : "bias", (double)w[i], rw[i]);
        }
    }
    /* zero gradient with zero moments: only the decay moves a weight, and only a 2-D one */
    float *w2 = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { w2[i] = w[i]; m[i] = v[i] = 0; }
    osdp_adamw_shard(&osdp_compute_cpu, op, lo, n, w2, gz, m, v, &c, lr, scale, 1);
    for (size_t i = 0; i < n; i++) {
        size_t e = lo + i;
        if (e >= fb_lo && e < fb_hi)
            ck_assert_msg(w2[i] == w[i], "bias element %zu decayed: %g -> %g", e, (double)w[i], (double)w2[i]);
        else
            ck_assert_msg(fabs(w2[i] - w[i] * (1 - lr * c.weight_decay)) < 1e-7, "weight element %zu: %g -> %g", e,
                          (double)w[i], (double)w2[i]);
    }

    /* the last shard of N = 3 runs into the padding: padding is never touched */
    const size_t padded = osdp_padded_numel(op->numel, 3), shard = padded / 3;
    ck_assert(padded > op->numel);
    float *sw = xmalloc(shard * sizeof(float)), *sg = xmalloc(shard * sizeof(float));
    float *sm = xmalloc(shard * sizeof(float)), *sv = xmalloc(shard * sizeof(float));
    for (size_t i = 0; i < shard; i++) {
        sw[i] = 0.0f;
        sg[i] = 1.0f;
        sm[i] = sv[i] = 0.0f;
    }
    osdp_adamw_shard(&osdp_compute_cpu, op, 2 * shard, shard, sw, sg, sm, sv, &c, lr, 1.0f, 1);
    for (size_t i = 0; i < shard; i++) {
        size_t e = 2 * shard + i;
        if (e < op->numel)
            ck_assert_msg(fabs(sw[i] + lr) < 1e-6, "element %zu not updated: %g", e, (double)sw[i]);
        else
            ck_assert_msg(sw[i] == 0.0f && sm[i] == 0.0f && sv[i] == 0.0f, "padding element %zu touched: w %g m %g v %g",
                          e, (double)sw[i], (double)sm[i], (double)sv[i]);
    }
    free(sw); free(sg); free(sm); free(sv);
    free(w); free(g); free(m); free(v); free(rw); free(rm); free(rv); free(gz); free(w2);
    osdp_layout_free(&L);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* 2. memory prediction (dry runtime)                                        */

#define MEM_MODEL "[model]\nname = mem\nn_layer = 3\nn_head = 2\nn_embd = 16\nvocab = 200\nctx = 16\n"
#define MEM_MODEL_IC "[model]\nname = memic\nn_layer = 4\nn_head = 2\nwidths = 8, 24, 16, 16\nvocab = 90\nctx = 12\n"

static void predict_ok(const osdp_layout *L, const osdp_plan *p, int N, int B, int accum, int prefetch,
                       osdp_memory_prediction *out)
{
    osdp_status s = osdp_memory_predict(L, p, N, B, accum, prefetch, OSDP_FLOAT32, out);
    ck_assert_msg(s == OSDP_OK, "memory_predict failed (%d): %s", (int)s, osdp_error_message());
    size_t sum = 0, mx = 0;
    for (int c = 0; c < OSDP_MEMORY_N_CATEGORIES; c++) {
        sum += out->peak[c];
        if (out->peak[c] > mx) mx = out->peak[c];
    }
    ck_assert(out->peak_total <= sum);
    ck_assert(out->peak_total >= mx);
}

static void check_memory_model(const char *desc, int T)
{
    const int N = 4, B = 2;
    osdp_layout L;
    layout_ok(&L, desc, T);
    const int n = L.n_ops;
    size_t sum_shard = 0, sum_padded = 0, max_padded = 0, sum_act = 0, max_pair = 0, max_grad = 0, max_grad_pair = 0;
    size_t *pad = xmalloc((size_t)n * sizeof(size_t)), *shd = xmalloc((size_t)n * sizeof(size_t));
    for (int i = 0; i < n; i++) {
        pad[i] = osdp_padded_numel(L.op[i].numel, N);
        shd[i] = osdp_shard_numel(L.op[i].numel, N);
        sum_shard += shd[i];
        sum_padded += pad[i];
        sum_act += L.op[i].act_floats_per_seq;
        if (pad[i] > max_padded) max_padded = pad[i];
        if (pad[i] + shd[i] > max_grad) max_grad = pad[i] + shd[i];
        if (i > 0 && pad[i - 1] + pad[i] > max_pair) max_pair = pad[i - 1] + pad[i];
        if (i > 0 && pad[i - 1] + shd[i - 1] + pad[i] + shd[i] > max_grad_pair)
            max_grad_pair = pad[i - 1] + shd[i - 1] + pad[i] + shd[i];
    }
    const size_t F = sizeof(float);
    osdp_plan dp, zdp;
    ck_assert_int_eq(osdp_plan_alloc(&dp, n), OSDP_OK);
    ck_assert_int_eq(osdp_plan_alloc(&zdp, n), OSDP_OK);
    osdp_plan_fill(&dp, 0);
    osdp_plan_fill(&zdp, 1);

    osdp_memory_prediction pd, pz, pz0, pd0, pacc;
    predict_ok(&L, &dp, N, B, 1, 1, &pd);
    predict_ok(&L, &zdp, N, B, 1, 1, &pz);
    predict_ok(&L, &zdp, N, B, 1, 0, &pz0);
    predict_ok(&L, &dp, N, B, 1, 0, &pd0);

    /* sharded state: master, grad, m, v of 1/N of every (padded) operator */
    ck_assert_uint_eq(pd.peak[OSDP_MEMORY_STATE], 4 * F * sum_shard);
    ck_assert_uint_eq(pz.peak[OSDP_MEMORY_STATE], 4 * F * sum_shard);
    /* all DP: every operator's full weights resident */
    ck_assert_uint_eq(pd.peak[OSDP_MEMORY_WEIGHTS], F * sum_padded);
    ck_assert_uint_eq(pd0.peak[OSDP_MEMORY_WEIGHTS], F * sum_padded);
    /* all ZDP with prefetch: the operator in use and the next one */
    ck_assert_msg(pz.peak[OSDP_MEMORY_WEIGHTS] < pd.peak[OSDP_MEMORY_WEIGHTS], "ZDP weights %zu, DP %zu",
                  pz.peak[OSDP_MEMORY_WEIGHTS], pd.peak[OSDP_MEMORY_WEIGHTS]);
    ck_assert_msg(pz.peak[OSDP_MEMORY_WEIGHTS] <= F * max_pair, "ZDP weights peak %zu > two consecutive ops %zu",
                  pz.peak[OSDP_MEMORY_WEIGHTS], F * max_pair);
    ck_assert_msg(pz.peak[OSDP_MEMORY_WEIGHTS] == F * max_pair, "ZDP weights peak %zu, consecutive pair %zu",
                  pz.peak[OSDP_MEMORY_WEIGHTS], F * max_pair);
    /* all ZDP without prefetch: one operator at a time */
    ck_assert_uint_eq(pz0.peak[OSDP_MEMORY_WEIGHTS], F * max_padded);
    /* activations: every operator's, at the end of the forward */
    ck_assert_uint_eq(pd.peak[OSDP_MEMORY_ACTIVATIONS], F * (size_t)B * sum_act);
    ck_assert_uint_eq(pz.peak[OSDP_MEMORY_ACTIVATIONS], F * (size_t)B * sum_act);
    ck_assert_uint_eq(pd.peak[OSDP_MEMORY_WORKSPACE], F * osdp_workspace_floats(&L, B));
    /* full gradients + reduce-scatter destination: one operator without
     * prefetch, two consecutive ones when the scatter overlaps the next backward */
    ck_assert_uint_eq(pd0.peak[OSDP_MEMORY_GRADS], F * max_grad);
    ck_assert_uint_eq(pd.peak[OSDP_MEMORY_GRADS], F * max_grad_pair);
    /* everything is freed between micro-steps: accumulation changes no peak */
    predict_ok(&L, &zdp, N, B, 3, 1, &pacc);
    for (int c = 0; c < OSDP_MEMORY_N_CATEGORIES; c++)
        ck_assert_msg(pacc.peak[c] == pz.peak[c], "category %s: %zu with 3 micro-steps, %zu with 1",
                      osdp_memory_category_name((osdp_memory_category)c), pacc.peak[c], pz.peak[c]);
    ck_assert_uint_eq(pacc.peak_total, pz.peak_total);
    /* the activations scale with the micro-batch, the state does not */
    osdp_memory_prediction pb;
    predict_ok(&L, &zdp, N, 2 * B, 1, 1, &pb);
    ck_assert_uint_eq(pb.peak[OSDP_MEMORY_ACTIVATIONS], 2 * pz.peak[OSDP_MEMORY_ACTIVATIONS]);
    ck_assert_uint_eq(pb.peak[OSDP_MEMORY_STATE], pz.peak[OSDP_MEMORY_STATE]);

    /* mixed: embed DP (resident), everything else ZDP */
    osdp_plan mix;
    ck_assert_int_eq(osdp_plan_alloc(&mix, n), OSDP_OK);
    osdp_plan_fill(&mix, 1);
    mix.zdp_slices[0] = 0;
    osdp_memory_prediction pm;
    predict_ok(&L, &mix, N, B, 1, 1, &pm);
    size_t zpair = pad[1];
    for (int i = 2; i < n; i++)
        if (pad[i - 1] + pad[i] > zpair) zpair = pad[i - 1] + pad[i];
    ck_assert_msg(pm.peak[OSDP_MEMORY_WEIGHTS] == F * (pad[0] + zpair), "mixed plan: weights peak %zu, expected %zu",
                  pm.peak[OSDP_MEMORY_WEIGHTS], F * (pad[0] + zpair));
    /* N = 1: state is the whole model four times */
    osdp_memory_prediction p1;
    ck_assert_int_eq(osdp_memory_predict(&L, &dp, 1, B, 1, 1, OSDP_FLOAT32, &p1), OSDP_OK);
    ck_assert_uint_eq(p1.peak[OSDP_MEMORY_STATE], 4 * F * L.total_params);

    osdp_plan_free(&mix);
    osdp_plan_free(&dp);
    osdp_plan_free(&zdp);
    free(pad);
    free(shd);
    osdp_layout_free(&L);
}

START_TEST(test_memory_predict)
{
    check_memory_model(MEM_MODEL, 16);
}
END_TEST

START_TEST(test_memory_predict_ic)
{
    check_memory_model(MEM_MODEL_IC, 10);
}
END_TEST

START_TEST(test_memory_predict_errors)
{
    osdp_layout L;
    layout_ok(&L, MEM_MODEL, 16);
    osdp_plan p;
    ck_assert_int_eq(osdp_plan_alloc(&p, L.n_ops), OSDP_OK);
    osdp_memory_prediction out;
    ck_assert_int_eq(osdp_memory_predict(&L, &p, 4, 0, 1, 1, OSDP_FLOAT32, &out), OSDP_ERR_INPUT);
    ck_assert_int_eq(osdp_memory_predict(&L, &p, 4, 2, 0, 1, OSDP_FLOAT32, &out), OSDP_ERR_INPUT);
    p.slices[2] = 4;   /* a split operator is fine ... */
    p.zdp_slices[2] = 2;
    ck_assert_int_eq(osdp_memory_predict(&L, &p, 4, 2, 1, 1, OSDP_FLOAT32, &out), OSDP_OK);
    p.slices[0] = 2;   /* ... a split embedding (a lookup) is not */
    ck_assert_int_eq(osdp_memory_predict(&L, &p, 4, 2, 1, 1, OSDP_FLOAT32, &out), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "embed") != NULL, "message: %s", osdp_error_message());
    p.slices[0] = 1;
    p.recompute[L.n_ops - 1] = 1;   /* nor recompute of the head */
    ck_assert_int_eq(osdp_memory_predict(&L, &p, 4, 2, 1, 1, OSDP_FLOAT32, &out), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "head") != NULL, "message: %s", osdp_error_message());
    osdp_plan_free(&p);
    osdp_layout_free(&L);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* 3. plan files                                                             */

#define PLAN_MODEL "[model]\nname = pl\nn_layer = 2\nn_head = 2\nn_embd = 8\nvocab = 11\nctx = 6\n"

START_TEST(test_plan_parse_good)
{
    osdp_layout L;
    layout_ok(&L, PLAN_MODEL, 6);
    osdp_plan p;
    osdp_status s = osdp_plan_parse(&p, &L, "# a plan\ndefault = zdp\nembed = dp\n", "p.plan");
    ck_assert_msg(s == OSDP_OK, "%s", osdp_error_message());
    ck_assert_int_eq(p.n_ops, 6);
    ck_assert_int_eq(p.zdp_slices[0], 0);
    ck_assert_int_eq(p.slices[0], 1);
    for (int i = 1; i < 6; i++) {
        ck_assert_int_eq(p.zdp_slices[i], 1);
        ck_assert_int_eq(p.slices[i], 1);
    }
    osdp_plan_free(&p);

    s = osdp_plan_parse(&p, &L, "default = dp\n; comment\nmlp.0 = 2/4\nhead = zdp  ; inline\n", "p.plan");
    ck_assert_msg(s == OSDP_OK, "%s", osdp_error_message());
    ck_assert_int_eq(p.zdp_slices[2], 2);
    ck_assert_int_eq(p.slices[2], 4);
    ck_assert_int_eq(p.zdp_slices[5], 1);
    ck_assert_int_eq(p.zdp_slices[1], 0);
    char buf[16];
    ck_assert_str_eq(osdp_plan_mode_name(&p, 2, buf, sizeof buf), "2/4");
    ck_assert_str_eq(osdp_plan_mode_name(&p, 5, buf, sizeof buf), "zdp");
    ck_assert_str_eq(osdp_plan_mode_name(&p, 0, buf, sizeof buf), "dp");
    osdp_plan_free(&p);

    /* every operator listed, no default needed; 0/g and g/g are valid */
    s = osdp_plan_parse(&p, &L, "embed = dp\nattn.0 = zdp\nmlp.0 = 0/3\nattn.1 = 3/3\nmlp.1 = 1/1\nhead = dp\n",
                        "p.plan");
    ck_assert_msg(s == OSDP_OK, "%s", osdp_error_message());
    ck_assert_int_eq(p.zdp_slices[3], 3);
    ck_assert_int_eq(p.slices[3], 3);
    ck_assert_int_eq(p.zdp_slices[2], 0);
    ck_assert_int_eq(p.slices[2], 3);
    ck_assert_int_eq(p.zdp_slices[4], 1);
    ck_assert_int_eq(p.slices[4], 1);
    osdp_plan_free(&p);

    /* reduce-once (osdp/plan.h): after the mode, either order with recompute; a default gives it to every
     * operator it covers, recompute only to attn and mlp */
    s = osdp_plan_parse(&p, &L, "default = dp recompute reduce-once\nattn.1 = zdp reduce-once\nmlp.1 = 2/4\n"
                        "head = zdp reduce-once\nmlp.0 = 1/2 reduce-once recompute\n", "p.plan");
    ck_assert_msg(s == OSDP_OK, "%s", osdp_error_message());
    const int once[6] = {1, 1, 2, 1, 0, 1}, rc[6] = {0, 1, 1, 0, 0, 0};   /* J: the slices that reduce once */
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(p.reduce_once[i], once[i]);
        ck_assert_int_eq(p.recompute[i], rc[i]);
    }
    ck_assert_int_eq(p.zdp_slices[3], 1);
    ck_assert_int_eq(p.zdp_slices[2], 1);
    ck_assert_int_eq(p.slices[2], 2);
    ck_assert_int_eq(osdp_plan_count_reduce_once(&p), 5);
    osdp_plan_free(&p);

    /* some slices (`reduce-once J`: the last J), in either order with recompute; a default's J: every
     * operator's, the unsplit embedding once when J > 0 (as its k) */
    s = osdp_plan_parse(&p, &L, "default = 1/4 reduce-once 3\nmlp.0 = 2/4 recompute reduce-once 2\n"
                        "attn.1 = 2/4 reduce-once 4 recompute\nhead = zdp reduce-once 1\n", "p.plan");
    ck_assert_msg(s == OSDP_OK, "%s", osdp_error_message());
    const int some[6] = {1, 3, 2, 4, 3, 1}, some_rc[6] = {0, 0, 1, 1, 0, 0};
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(p.reduce_once[i], some[i]);
        ck_assert_int_eq(p.recompute[i], some_rc[i]);
    }
    ck_assert_int_eq(p.slices[0], 1);
    ck_assert_int_eq(p.slices[1], 4);
    ck_assert_int_eq(osdp_plan_count_reduce_once(&p), 6);
    char word[32];
    ck_assert_str_eq(osdp_plan_once_word(&p, 2, word, sizeof word), "reduce-once 2");
    ck_assert_str_eq(osdp_plan_once_word(&p, 3, word, sizeof word), "reduce-once");   /* all of them: the bare word */
    ck_assert_str_eq(osdp_plan_once_word(&p, 5, word, sizeof word), "reduce-once");
    osdp_plan_free(&p);

    /* fill / alloc defaults */
    ck_assert_int_eq(osdp_plan_alloc(&p, 6), OSDP_OK);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(p.reduce_once[i], 0);
    for (int i = 0; i < 6; i++) ck_assert(p.slices[i] == 1 && p.zdp_slices[i] == 0 && p.recompute[i] == 0);
    osdp_plan_fill(&p, 1);
    for (int i = 0; i < 6; i++) ck_assert(p.slices[i] == 1 && p.zdp_slices[i] == 1);
    osdp_plan_free(&p);
    osdp_layout_free(&L);
}
END_TEST

typedef struct plan_error_case {
    const char *what, *text, *word1, *word2;
} plan_error_case;

static const plan_error_case plan_errors[] = {
    {"unknown operator", "default = dp\nattn.7 = zdp\n", "unknown operator", "attn.7"},
    {"bad mode", "default = dp\nembed = fast\n", "fast", "mode"},
    {"bad default", "default = sometimes\n", "sometimes", NULL},
    {"k > g", "default = dp\nmlp.0 = 5/4\n", "5/4", NULL},
    {"g = 0", "default = dp\nmlp.0 = 0/0\n", "0/0", NULL},
    {"k/g junk", "default = dp\nmlp.0 = 1/2x\n", "1/2x", NULL},
    {"duplicate operator", "default = dp\nembed = dp\nembed = zdp\n", "embed", "twice"},
    {"missing operator, no default", "embed = dp\nattn.0 = dp\nmlp.0 = dp\nattn.1 = zdp\nmlp.1 = dp\n", "head", "default"},
    {"empty plan", "", "embed", NULL},
    {"section", "[plan]\ndefault = dp\n", "section", NULL},
    {"malformed line", "default = dp\nembed zdp\n", "malformed", NULL},
    {"bad word after the mode", "default = dp\nembed = dp reduce-twice\n", "reduce-twice", "reduce-once"},
    {"reduce-once twice", "default = dp\nembed = dp reduce-once reduce-once\n", "embed", "reduce-once"},
    {"reduce-once before the mode", "default = reduce-once dp\n", "reduce-once dp", NULL},
    {"reduce-once J > g", "default = dp\nmlp.0 = 1/2 reduce-once 3\n", "reduce-once J", "2 slices"},
    {"reduce-once J > 1 unsplit", "default = dp\nattn.0 = zdp reduce-once 2\n", "attn.0", "1 <= J <= 1"},
    {"reduce-once 0", "default = dp\nmlp.0 = 1/2 reduce-once 0\n", "mlp.0", "reduce-once J"},
    {"reduce-once count junk", "default = dp\nmlp.0 = 1/2 reduce-once 1x\n", "1x", NULL},
    {"reduce-once count twice", "default = dp\nmlp.0 = 1/2 reduce-once 1 1\n", "mlp.0", NULL},
};

START_TEST(test_plan_parse_errors)
{
    const plan_error_case *c = &plan_errors[_i];
    osdp_layout L;
    layout_ok(&L, PLAN_MODEL, 6);
    osdp_plan p;
    osdp_status s = osdp_plan_parse(&p, &L, c->text, "bad.plan");
    ck_assert_msg(s == OSDP_ERR_INPUT, "%s: status %d", c->what, (int)s);
    check_error_words(c->what, c->word1, c->word2, "bad.plan");
    /* a failed parse leaves nothing allocated */
    ck_assert_ptr_null(p.slices);
    ck_assert_ptr_null(p.zdp_slices);
    osdp_layout_free(&L);
}
END_TEST

START_TEST(test_plan_roundtrip)
{
    osdp_layout L;
    layout_ok(&L, MEM_MODEL_IC, 12);
    const int n = L.n_ops;
    osdp_plan p, q;
    ck_assert_int_eq(osdp_plan_alloc(&p, n), OSDP_OK);
    for (int i = 0; i < n; i++) {
        int g = 1 + (int)rnd_below(6);
        p.slices[i] = g;
        p.zdp_slices[i] = (int)rnd_below((size_t)g + 1);
    }
    p.slices[0] = 1; p.zdp_slices[0] = 0;
    p.slices[1] = 1; p.zdp_slices[1] = 1;
    p.slices[2] = 4; p.zdp_slices[2] = 0;
    p.slices[3] = 4; p.zdp_slices[3] = 4;
    const unsigned long long without = osdp_plan_hash(&p);
    for (int i = 0; i < n; i++) {   /* all slices, some (the last J) or none */
        p.reduce_once[i] = i % 3 == 1 ? p.slices[i] : i % 3 == 2 ? (int)rnd_below((size_t)p.slices[i] + 1) : 0;
        p.recompute[i] = i % 2 && osdp_op_can_recompute(L.op[i].type);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    osdp_plan_write(&p, &L, f);
    fclose(f);
    osdp_status s = osdp_plan_parse(&q, &L, text, "written");
    ck_assert_msg(s == OSDP_OK, "written plan does not parse: %s\n%s", osdp_error_message(), text);
    ck_assert_int_eq(q.n_ops, n);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(q.slices[i] == p.slices[i] && q.zdp_slices[i] == p.zdp_slices[i],
                      "%s: wrote %d/%d, read %d/%d", L.op[i].name, p.zdp_slices[i], p.slices[i], q.zdp_slices[i],
                      q.slices[i]);
        ck_assert_int_eq(q.reduce_once[i], p.reduce_once[i]);
        ck_assert_int_eq(q.recompute[i], p.recompute[i]);
    }
    ck_assert(osdp_plan_hash(&q) == osdp_plan_hash(&p));
    /* reduce-once enters the hash only where set: without it, the hash is what it was */
    ck_assert(osdp_plan_hash(&p) != without);
    for (int i = 0; i < n; i++) q.reduce_once[i] = 0;
    ck_assert(osdp_plan_hash(&q) != osdp_plan_hash(&p));
    for (int i = 0; i < n; i++) q.recompute[i] = 0;
    ck_assert(osdp_plan_hash(&q) == without);
    /* copy and hash */
    osdp_plan c;
    ck_assert_int_eq(osdp_plan_copy(&c, &p), OSDP_OK);
    ck_assert(osdp_plan_hash(&c) == osdp_plan_hash(&p));
    c.zdp_slices[1] = 0;
    ck_assert(osdp_plan_hash(&c) != osdp_plan_hash(&p));
    osdp_plan_free(&c);
    free(text);
    osdp_plan_free(&q);
    osdp_plan_free(&p);
    osdp_layout_free(&L);
}
END_TEST

/* ------------------------------------------------------------------------ */

static Suite *runtime_suite(void)
{
    const TTest *optim[] = {test_lr_schedule, test_clip_scale, test_adamw_by_hand, test_adamw_shard_decay, NULL};
    const TTest *memory[] = {test_memory_predict, test_memory_predict_ic, test_memory_predict_errors, NULL};
    const TTest *plan[] = {test_plan_parse_good, test_plan_roundtrip, NULL};
    const osdp_check_case cases[] = {
        {.name = "optim", .tests = optim}, {.name = "memory", .tests = memory},
        {.name = "plan", .tests = plan, .loop_test = test_plan_parse_errors,
         .loop_end = (int)(sizeof plan_errors / sizeof plan_errors[0])},
    };
    return osdp_check_suite("runtime", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = runtime_suite};

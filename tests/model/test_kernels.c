/* Unit tests of the fp32 CPU kernels (src/model/kernels_cpu.h).
 *
 * Gradient checks: for each backward kernel a scalar loss L = sum(out * R) (R a
 * fixed random array; for cross-entropy L = scale * sum(losses)) is written as a
 * small double-precision reference forward.  Its central differences (step
 * FD_H = 1e-4, in double: truncation error ~h^2 ~ 1e-8, rounding ~1e-12) are
 * compared with the fp32 analytic gradient of the kernel.  The error left is the
 * fp32 rounding of the analytic gradient (~1e-6 relative to the magnitude of the
 * terms), so the test allows |analytic - numeric| <= GRAD_RTOL*|numeric| +
 * GRAD_ATOL*max|numeric| with GRAD_RTOL = 1e-3, GRAD_ATOL = 1e-4: two orders of
 * magnitude above the fp32 noise, several orders below any real error (a missing
 * term or wrong index is O(1) relative).  Backward kernels that accumulate are
 * run on pre-filled buffers and (result - prefill) is checked, which tests the
 * += semantics at the same time; those that overwrite get NaN-filled buffers. */
#include "model/kernels_cpu.h"
#include "osdp/compute.h"
#include "osdp/dtype.h"

#include "check_main.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define FD_H 1e-4
#define GRAD_RTOL 1e-3
#define GRAD_ATOL 1e-4

/* ------------------------------------------------------------------ helpers */

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* uniform in [lo, hi) */
static void fill_uniform(float *a, size_t n, float lo, float hi, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(rng_next(&s) >> 11) / 9007199254740992.0;
        a[i] = lo + (hi - lo) * (float)u;
    }
}

static void fill_value(float *a, size_t n, float v)
{
    for (size_t i = 0; i < n; i++) a[i] = v;
}

static float *falloc(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    ck_assert_msg(p != NULL, "out of memory");
    return p;
}

static double *dalloc(size_t n)
{
    double *p = malloc((n ? n : 1) * sizeof *p);
    ck_assert_msg(p != NULL, "out of memory");
    return p;
}

static double *to_double(const float *a, size_t n)
{
    double *d = dalloc(n);
    for (size_t i = 0; i < n; i++) d[i] = a[i];
    return d;
}

static float *copy_floats(const float *a, size_t n)
{
    float *p = falloc(n);
    memcpy(p, a, n * sizeof *p);
    return p;
}

typedef double (*loss_fn)(void *ctx);

/* Central differences of loss(ctx) w.r.t. each element of p (part of ctx),
 * compared with analytic[i].  Returns the number of mismatches (details of the
 * first few are printed). */
static int grad_check(const char *what, double *p, size_t n, const float *analytic,
                      loss_fn loss, void *ctx)
{
    double *num = dalloc(n);
    double maxabs = 0.0;
    for (size_t i = 0; i < n; i++) {
        double keep = p[i];
        p[i] = keep + FD_H;
        double lp = loss(ctx);
        p[i] = keep - FD_H;
        double lm = loss(ctx);
        p[i] = keep;
        num[i] = (lp - lm) / (2.0 * FD_H);
        if (fabs(num[i]) > maxabs) maxabs = fabs(num[i]);
    }
    int bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)analytic[i] - num[i]);
        double tol = GRAD_RTOL * fabs(num[i]) + GRAD_ATOL * maxabs;
        if (err / (tol > 0 ? tol : 1e-30) > worst) worst = err / tol;
        if (!(err <= tol)) {
            if (bad < 5)
                fprintf(stderr, "%s[%zu]: analytic %.9g numeric %.9g\n", what, i,
                        (double)analytic[i], num[i]);
            bad++;
        }
    }
    if (maxabs == 0.0) {
        fprintf(stderr, "%s: numeric gradient is identically zero\n", what);
        bad++;
    }
    free(num);
    return bad;
}

/* out - prefill, as floats (for accumulate checks) */
static float *minus(const float *a, const float *b, size_t n)
{
    float *d = falloc(n);
    for (size_t i = 0; i < n; i++) d[i] = a[i] - b[i];
    return d;
}

static double dot_r(const double *a, const float *r, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * r[i];
    return s;
}

/* sets the OpenMP thread count, returns the previous one (1 without OpenMP) */
static int set_threads(int n)
{
#ifdef _OPENMP
    int old = omp_get_max_threads();
    omp_set_num_threads(n);
    return old;
#else
    (void)n;
    return 1;
#endif
}

/* ------------------------------------------------------------------- matmul */

static void ref_matmul(double *y, const double *x, const double *w, const double *b,
                       int BT, int IC, int OC)
{
    for (int i = 0; i < BT; i++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int k = 0; k < IC; k++) s += x[i * IC + k] * w[k * OC + o];
            y[i * OC + o] = s;
        }
}

struct mm_ctx {
    double *x, *w, *b, *y;
    const float *r;
    int BT, IC, OC;
};

static double mm_loss(void *p)
{
    struct mm_ctx *c = p;
    ref_matmul(c->y, c->x, c->w, c->b, c->BT, c->IC, c->OC);
    return dot_r(c->y, c->r, (size_t)c->BT * c->OC);
}

/* checks y against a naive float triple loop; bound: 1e-5 relative to the sum
 * of |terms| (fp32 dot products of length IC <= 100 stay below ~IC*6e-8) */
static void check_matmul_forward(int BT, int IC, int OC, int with_bias, int accumulate)
{
    float *x = falloc((size_t)BT * IC), *w = falloc((size_t)IC * OC);
    float *b = falloc(OC), *y = falloc((size_t)BT * OC), *y0 = falloc((size_t)BT * OC);
    fill_uniform(x, (size_t)BT * IC, -1, 1, 1);
    fill_uniform(w, (size_t)IC * OC, -1, 1, 2);
    fill_uniform(b, OC, -1, 1, 3);
    if (accumulate)
        fill_uniform(y0, (size_t)BT * OC, -1, 1, 4);
    else
        fill_value(y0, (size_t)BT * OC, NAN);
    memcpy(y, y0, (size_t)BT * OC * sizeof *y);
    matmul_forward(y, x, w, with_bias ? b : NULL, BT, IC, OC, accumulate);
    for (int i = 0; i < BT; i++)
        for (int o = 0; o < OC; o++) {
            float s = 0.0f, mag = 0.0f;
            for (int k = 0; k < IC; k++) {
                s += x[i * IC + k] * w[k * OC + o];
                mag += fabsf(x[i * IC + k] * w[k * OC + o]);
            }
            if (with_bias) {
                s += b[o];
                mag += fabsf(b[o]);
            }
            if (accumulate) {
                s += y0[i * OC + o];
                mag += fabsf(y0[i * OC + o]);
            }
            float got = y[i * OC + o];
            ck_assert_msg(fabsf(got - s) <= 1e-5f * mag + 1e-30f,
                          "matmul_forward(%d,%d,%d,bias=%d,acc=%d) y[%d,%d] = %g, want %g",
                          BT, IC, OC, with_bias, accumulate, i, o, (double)got, (double)s);
        }
    free(x); free(w); free(b); free(y); free(y0);
}

START_TEST(test_matmul_forward)
{
    check_matmul_forward(7, 13, 11, 1, 0);
    check_matmul_forward(7, 13, 11, 0, 0);
    check_matmul_forward(7, 13, 11, 1, 1);
    check_matmul_forward(7, 13, 11, 0, 1);
    check_matmul_forward(64, 96, 80, 1, 0);
    check_matmul_forward(64, 96, 80, 1, 1);
}
END_TEST

static void check_matmul_backward(int dx_accumulate, int with_db)
{
    const int BT = 9, IC = 13, OC = 70; /* OC > 64: two column blocks for db */
    size_t nx = (size_t)BT * IC, nw = (size_t)IC * OC, ny = (size_t)BT * OC;
    float *x = falloc(nx), *w = falloc(nw), *b = falloc(OC), *r = falloc(ny);
    fill_uniform(x, nx, -1, 1, 11);
    fill_uniform(w, nw, -1, 1, 12);
    fill_uniform(b, OC, -1, 1, 13);
    fill_uniform(r, ny, -1, 1, 14);
    float *dx0 = falloc(nx), *dw0 = falloc(nw), *db0 = falloc(OC);
    if (dx_accumulate)
        fill_uniform(dx0, nx, -1, 1, 15);
    else
        fill_value(dx0, nx, NAN); /* overwrite: must not read dx */
    fill_uniform(dw0, nw, -1, 1, 16);
    fill_uniform(db0, OC, -1, 1, 17);
    float *dx = copy_floats(dx0, nx), *dw = copy_floats(dw0, nw), *db = copy_floats(db0, OC);

    matmul_backward(dx, dw, with_db ? db : NULL, r, x, w, BT, IC, OC, dx_accumulate);

    struct mm_ctx c = {to_double(x, nx), to_double(w, nw), to_double(b, OC), dalloc(ny),
                       r, BT, IC, OC};
    float *gx = dx_accumulate ? minus(dx, dx0, nx) : copy_floats(dx, nx);
    float *gw = minus(dw, dw0, nw), *gb = minus(db, db0, OC);
    int bad = grad_check("matmul dx", c.x, nx, gx, mm_loss, &c);
    bad += grad_check("matmul dw", c.w, nw, gw, mm_loss, &c);
    if (with_db)
        bad += grad_check("matmul db", c.b, OC, gb, mm_loss, &c);
    else
        ck_assert_msg(memcmp(db, db0, OC * sizeof *db) == 0, "db touched although NULL");
    ck_assert_msg(bad == 0, "matmul_backward(dx_accumulate=%d): %d gradient mismatches",
                  dx_accumulate, bad);

    /* dx == NULL: dw and db are still produced, identically */
    float *dw2 = copy_floats(dw0, nw), *db2 = copy_floats(db0, OC);
    matmul_backward(NULL, dw2, db2, r, x, w, BT, IC, OC, dx_accumulate);
    ck_assert_msg(memcmp(dw2, dw, nw * sizeof *dw) == 0, "dw differs when dx == NULL");
    if (with_db)
        ck_assert_msg(memcmp(db2, db, OC * sizeof *db) == 0, "db differs when dx == NULL");

    free(c.x); free(c.w); free(c.b); free(c.y);
    free(x); free(w); free(b); free(r); free(dx0); free(dw0); free(db0);
    free(dx); free(dw); free(db); free(gx); free(gw); free(gb); free(dw2); free(db2);
}

START_TEST(test_matmul_backward)
{
    check_matmul_backward(0, 1);
}
END_TEST

START_TEST(test_matmul_backward_accumulate)
{
    check_matmul_backward(1, 1);
    check_matmul_backward(1, 0);
}
END_TEST

/* ---------------------------------------------------------------- layernorm */

struct ln_ctx {
    double *x, *w, *b, *y;
    const float *r;
    int BT, C;
};

static double ln_loss(void *p)
{
    struct ln_ctx *c = p;
    for (int i = 0; i < c->BT; i++) {
        const double *xi = c->x + (size_t)i * c->C;
        double m = 0.0, v = 0.0;
        for (int k = 0; k < c->C; k++) m += xi[k];
        m /= c->C;
        for (int k = 0; k < c->C; k++) v += (xi[k] - m) * (xi[k] - m);
        v /= c->C;
        double s = 1.0 / sqrt(v + 1e-5);
        for (int k = 0; k < c->C; k++)
            c->y[(size_t)i * c->C + k] = (xi[k] - m) * s * c->w[k] + c->b[k];
    }
    return dot_r(c->y, c->r, (size_t)c->BT * c->C);
}

START_TEST(test_layernorm)
{
    const int BT = 5, C = 70; /* C > 64: two column blocks for dw/db */
    size_t n = (size_t)BT * C;
    float *x = falloc(n), *w = falloc(C), *b = falloc(C), *r = falloc(n);
    float *y = falloc(n), *mean = falloc(BT), *rstd = falloc(BT);
    fill_uniform(x, n, -2, 3, 21); /* non-zero mean, unit-ish spread */
    fill_uniform(w, C, 0.5f, 1.5f, 22);
    fill_uniform(b, C, -1, 1, 23);
    fill_uniform(r, n, -1, 1, 24);
    fill_value(y, n, NAN);
    layernorm_forward(y, mean, rstd, x, w, b, BT, C);

    struct ln_ctx c = {to_double(x, n), to_double(w, C), to_double(b, C), dalloc(n), r,
                       BT, C};
    ln_loss(&c);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(y[i] - c.y[i]) <= 1e-5 * (1.0 + fabs(c.y[i])),
                      "layernorm_forward y[%zu] = %g, want %g", i, (double)y[i], c.y[i]);

    float *dx0 = falloc(n), *dw0 = falloc(C), *db0 = falloc(C);
    fill_uniform(dx0, n, -1, 1, 25);
    fill_uniform(dw0, C, -1, 1, 26);
    fill_uniform(db0, C, -1, 1, 27);
    float *dx = copy_floats(dx0, n), *dw = copy_floats(dw0, C), *db = copy_floats(db0, C);
    layernorm_backward(dx, dw, db, r, x, w, mean, rstd, BT, C);
    float *gx = minus(dx, dx0, n), *gw = minus(dw, dw0, C), *gb = minus(db, db0, C);
    int bad = grad_check("layernorm dx", c.x, n, gx, ln_loss, &c);
    bad += grad_check("layernorm dw", c.w, C, gw, ln_loss, &c);
    bad += grad_check("layernorm db", c.b, C, gb, ln_loss, &c);
    ck_assert_msg(bad == 0, "layernorm_backward: %d gradient mismatches", bad);

    free(c.x); free(c.w); free(c.b); free(c.y);
    free(x); free(w); free(b); free(r); free(y); free(mean); free(rstd);
    free(dx0); free(dw0); free(db0); free(dx); free(dw); free(db); free(gx); free(gw);
    free(gb);
}
END_TEST

/* --------------------------------------------------------------------- gelu */

struct gelu_ctx {
    double *x;
    const float *r;
    size_t n;
};

static double gelu_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

static double gelu_loss(void *p)
{
    struct gelu_ctx *c = p;
    double s = 0.0;
    for (size_t i = 0; i < c->n; i++) s += gelu_ref(c->x[i]) * c->r[i];
    return s;
}

START_TEST(test_gelu)
{
    const size_t n = 301;
    float *x = falloc(n), *r = falloc(n), *y = falloc(n), *dx = falloc(n);
    fill_uniform(x, n, -5, 5, 31);
    fill_uniform(r, n, -1, 1, 32);
    gelu_forward(y, x, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(y[i] - gelu_ref(x[i])) <= 1e-6 * (1.0 + fabs(gelu_ref(x[i]))),
                      "gelu_forward(%g) = %g, want %g", (double)x[i], (double)y[i],
                      gelu_ref(x[i]));
    fill_value(dx, n, NAN);
    gelu_backward(dx, x, r, n);
    struct gelu_ctx c = {to_double(x, n), r, n};
    int bad = grad_check("gelu dx", c.x, n, dx, gelu_loss, &c);
    ck_assert_msg(bad == 0, "gelu_backward: %d gradient mismatches", bad);

    /* dx may alias dy */
    float *d = copy_floats(r, n);
    gelu_backward(d, x, d, n);
    ck_assert_msg(memcmp(d, dx, n * sizeof *d) == 0, "gelu_backward in place differs");
    free(c.x); free(x); free(r); free(y); free(dx); free(d);
}
END_TEST

/* ---------------------------------------------------------------- attention */

/* double reference; att (B,NH,T,T) optional */
static void ref_attention(double *out, double *att, const double *qkv, int B, int T,
                          int C, int NH)
{
    int HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    double *row = dalloc((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)b * T + i) * 3 * C + h * HS;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * HS;
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) s += q[d] * k[d];
                    row[j] = s * scale;
                    if (row[j] > mx) mx = row[j];
                }
                for (int j = 0; j <= i; j++) {
                    row[j] = exp(row[j] - mx);
                    sum += row[j];
                }
                double *o = out + ((size_t)b * T + i) * C + h * HS;
                for (int d = 0; d < HS; d++) o[d] = 0.0;
                for (int j = 0; j <= i; j++) {
                    double a = row[j] / sum;
                    const double *v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * HS;
                    for (int d = 0; d < HS; d++) o[d] += a * v[d];
                    if (att) att[(((size_t)b * NH + h) * T + i) * T + j] = a;
                }
                if (att)
                    for (int j = i + 1; j < T; j++)
                        att[(((size_t)b * NH + h) * T + i) * T + j] = 0.0;
            }
    free(row);
}

struct att_ctx {
    double *qkv, *out;
    const float *r;
    int B, T, C, NH;
};

static double att_loss(void *p)
{
    struct att_ctx *c = p;
    ref_attention(c->out, NULL, c->qkv, c->B, c->T, c->C, c->NH);
    return dot_r(c->out, c->r, (size_t)c->B * c->T * c->C);
}

/* amp: q,k,v uniform in [-amp, amp].  With amp = 2 the outputs are compared
 * with the double reference (out 1e-5 relative, att 1e-6 absolute: fp32 score
 * errors ~ HS*|q||k|*6e-8 pass through the softmax almost unchanged).  With large
 * amp the scores reach ~1e3, exp overflows without the max subtraction, and the
 * comparison is only for finiteness (the score rounding is itself ~1e-4). */
static void check_attention_forward_amp(int B, int T, int C, int NH, float amp)
{
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    size_t natt = (size_t)B * NH * T * T;
    float *qkv = falloc(nqkv), *out = falloc(nout), *att = falloc(natt);
    fill_uniform(qkv, nqkv, -amp, amp, 41);
    fill_value(out, nout, NAN);
    fill_value(att, natt, NAN);
    attention_forward(out, att, qkv, B, T, C, NH);
    double *dq = to_double(qkv, nqkv), *rout = dalloc(nout), *ratt = dalloc(natt);
    ref_attention(rout, ratt, dq, B, T, C, NH);
    int strict = amp <= 2.0f;
    for (size_t i = 0; i < nout; i++)
        ck_assert_msg(strict ? fabs(out[i] - rout[i]) <= 1e-5 * (1.0 + fabs(rout[i]))
                             : isfinite(out[i]),
                      "attention_forward(B=%d,T=%d,C=%d,NH=%d) out[%zu] = %.9g, want %.9g",
                      B, T, C, NH, i, (double)out[i], rout[i]);
    for (size_t bh = 0; bh < (size_t)B * NH; bh++)
        for (int i = 0; i < T; i++) {
            const float *a = att + (bh * T + i) * T;
            double sum = 0.0;
            for (int j = 0; j < T; j++) {
                if (j > i)
                    ck_assert_msg(a[j] == 0.0f, "att[%zu,%d,%d] = %g above the diagonal",
                                  bh, i, j, (double)a[j]);
                ck_assert_msg(strict ? fabs(a[j] - ratt[(bh * T + i) * T + j]) <= 1e-6
                                     : a[j] >= 0.0f && a[j] <= 1.0f,
                              "att[%zu,%d,%d] = %.9g, want %.9g", bh, i, j, (double)a[j],
                              ratt[(bh * T + i) * T + j]);
                sum += a[j];
            }
            ck_assert_msg(fabs(sum - 1.0) <= 1e-5, "att row %zu,%d sums to %.9g", bh, i,
                          sum);
        }
    free(qkv); free(out); free(att); free(dq); free(rout); free(ratt);
}

static void check_attention_forward(int B, int T, int C, int NH)
{
    check_attention_forward_amp(B, T, C, NH, 2.0f);
}

START_TEST(test_attention_forward)
{
    check_attention_forward(2, 5, 8, 2);
    check_attention_forward(1, 1, 8, 2);
    check_attention_forward(2, 70, 16, 4);  /* crosses the 32-row blocks, ragged end */
    check_attention_forward(1, 128, 64, 2); /* exact multiple of the block */
    check_attention_forward(1, 160, 128, 2); /* T*HS large: heads in turn */
    check_attention_forward_amp(1, 40, 32, 2, 30.0f); /* scores ~1e3: stable softmax */
}
END_TEST

static void check_attention_backward(int B, int T, int C, int NH)
{
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    size_t natt = (size_t)B * NH * T * T;
    float *qkv = falloc(nqkv), *out = falloc(nout), *att = falloc(natt);
    float *r = falloc(nout), *dqkv = falloc(nqkv), *scratch = falloc(natt);
    fill_uniform(qkv, nqkv, -2, 2, 51);
    fill_uniform(r, nout, -1, 1, 52);
    attention_forward(out, att, qkv, B, T, C, NH);
    fill_value(dqkv, nqkv, NAN); /* overwrite semantics */
    fill_value(scratch, natt, NAN);
    attention_backward(dqkv, scratch, r, qkv, att, B, T, C, NH);
    struct att_ctx c = {to_double(qkv, nqkv), dalloc(nout), r, B, T, C, NH};
    int bad = grad_check("attention dqkv", c.qkv, nqkv, dqkv, att_loss, &c);
    ck_assert_msg(bad == 0, "attention_backward(B=%d,T=%d,C=%d,NH=%d): %d mismatches", B,
                  T, C, NH, bad);
    free(c.qkv); free(c.out);
    free(qkv); free(out); free(att); free(r); free(dqkv); free(scratch);
}

/* double analytic reference of the backward (checked itself against central
 * differences through test_attention_backward's sizes), for sizes too large for
 * finite differences */
static void ref_attention_backward(double *dqkv, const double *qkv, const float *dout,
                                   int B, int T, int C, int NH)
{
    int HS = C / NH, ld = 3 * C;
    double scale = 1.0 / sqrt((double)HS);
    double *att = dalloc((size_t)T), *datt = dalloc((size_t)T);
    for (size_t i = 0; i < (size_t)B * T * ld; i++) dqkv[i] = 0.0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)b * T + i) * ld + h * HS;
                const float *go = dout + ((size_t)b * T + i) * C + h * HS;
                double mx = -INFINITY, sum = 0.0, dot = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * ld + C + h * HS;
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) s += q[d] * k[d];
                    att[j] = s * scale;
                    if (att[j] > mx) mx = att[j];
                }
                for (int j = 0; j <= i; j++) sum += (att[j] = exp(att[j] - mx));
                for (int j = 0; j <= i; j++) {
                    att[j] /= sum;
                    const double *v = qkv + ((size_t)b * T + j) * ld + 2 * C + h * HS;
                    double *dv = dqkv + ((size_t)b * T + j) * ld + 2 * C + h * HS;
                    datt[j] = 0.0;
                    for (int d = 0; d < HS; d++) {
                        datt[j] += go[d] * v[d];
                        dv[d] += att[j] * go[d];
                    }
                    dot += att[j] * datt[j];
                }
                double *dq = dqkv + ((size_t)b * T + i) * ld + h * HS;
                for (int j = 0; j <= i; j++) {
                    double dpre = att[j] * (datt[j] - dot) * scale;
                    const double *k = qkv + ((size_t)b * T + j) * ld + C + h * HS;
                    double *dk = dqkv + ((size_t)b * T + j) * ld + C + h * HS;
                    for (int d = 0; d < HS; d++) {
                        dq[d] += dpre * k[d];
                        dk[d] += dpre * q[d];
                    }
                }
            }
    free(att);
    free(datt);
}

/* fp32 kernel vs the double reference: |err| <= 1e-4 * max|ref| (fp32 sums of
 * up to T*HS products; measured errors are ~1e-6 of max|ref|) */
static void check_attention_backward_ref(int B, int T, int C, int NH)
{
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    size_t natt = (size_t)B * NH * T * T;
    float *qkv = falloc(nqkv), *out = falloc(nout), *att = falloc(natt);
    float *r = falloc(nout), *dqkv = falloc(nqkv), *scratch = falloc(natt);
    fill_uniform(qkv, nqkv, -2, 2, 53);
    fill_uniform(r, nout, -1, 1, 54);
    attention_forward(out, att, qkv, B, T, C, NH);
    fill_value(dqkv, nqkv, NAN);
    fill_value(scratch, natt, NAN);
    attention_backward(dqkv, scratch, r, qkv, att, B, T, C, NH);
    double *dq = to_double(qkv, nqkv), *ref = dalloc(nqkv);
    ref_attention_backward(ref, dq, r, B, T, C, NH);
    double maxabs = 0.0;
    for (size_t i = 0; i < nqkv; i++)
        if (fabs(ref[i]) > maxabs) maxabs = fabs(ref[i]);
    for (size_t i = 0; i < nqkv; i++) {
        double err = fabs(dqkv[i] - ref[i]);
        ck_assert_msg(err <= 1e-4 * maxabs,
                      "attention_backward(B=%d,T=%d,C=%d,NH=%d) dqkv[%zu] = %.9g, want %.9g",
                      B, T, C, NH, i, (double)dqkv[i], ref[i]);
    }
    ck_assert_msg(maxabs > 0.0, "reference gradient is zero");
    free(qkv); free(out); free(att); free(r); free(dqkv); free(scratch); free(dq); free(ref);
}

START_TEST(test_attention_backward)
{
    check_attention_backward(2, 5, 8, 2);
    check_attention_backward(1, 70, 8, 2); /* several row blocks, ragged end */
    check_attention_backward_ref(2, 5, 8, 2);
    check_attention_backward_ref(2, 128, 64, 4); /* heads shared among threads */
    check_attention_backward_ref(1, 160, 128, 2); /* T*HS large: heads in turn */
}
END_TEST

/* bitwise equal results on repeated calls, with 1 and 2 OpenMP threads and
 * whatever the output buffers and the scratch held before */
static void check_attention_deterministic(int B, int T, int C, int NH)
{
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    size_t natt = (size_t)B * NH * T * T;
    float *qkv = falloc(nqkv), *dout = falloc(nout), *scratch = falloc(natt);
    float *out1 = falloc(nout), *out2 = falloc(nout);
    float *att1 = falloc(natt), *att2 = falloc(natt);
    float *d1 = falloc(nqkv), *d2 = falloc(nqkv);
    fill_uniform(qkv, nqkv, -2, 2, 61);
    fill_uniform(dout, nout, -1, 1, 62);
    attention_forward(out1, att1, qkv, B, T, C, NH);
    fill_value(scratch, natt, 0.0f);
    attention_backward(d1, scratch, dout, qkv, att1, B, T, C, NH);
    /* second call: different garbage in every output and in scratch */
    fill_value(out2, nout, NAN);
    fill_value(att2, natt, 7.0f);
    fill_value(scratch, natt, NAN);
    fill_value(d2, nqkv, -3.0f);
    int old_threads = set_threads(1);
    attention_forward(out2, att2, qkv, B, T, C, NH);
    attention_backward(d2, scratch, dout, qkv, att2, B, T, C, NH);
    set_threads(old_threads);
    ck_assert_msg(memcmp(out1, out2, nout * sizeof *out1) == 0, "attention out differs");
    ck_assert_msg(memcmp(att1, att2, natt * sizeof *att1) == 0, "attention att differs");
    ck_assert_msg(memcmp(d1, d2, nqkv * sizeof *d1) == 0, "attention dqkv differs");
    /* and once more with the same thread count */
    attention_backward(d2, scratch, dout, qkv, att1, B, T, C, NH);
    ck_assert_msg(memcmp(d1, d2, nqkv * sizeof *d1) == 0, "attention dqkv differs (2)");
    free(qkv); free(dout); free(scratch); free(out1); free(out2); free(att1); free(att2);
    free(d1); free(d2);
}

START_TEST(test_attention_deterministic)
{
    check_attention_deterministic(2, 128, 64, 4); /* heads shared among threads */
    check_attention_deterministic(1, 160, 128, 2); /* heads in turn, rows shared */
}
END_TEST

/* ---------------------------------------------------------- tiled attention */

/* The tiled attention (FlashAttention-2's online softmax, 64-key tiles; query
 * tiles of 64 rows, 32 for 128-wide heads) against the same double
 * references: out, each row's log-sum-exp, and d(qkv), at sizes inside one
 * tile, across tiles with a ragged end, and with narrower query tiles. */
static void check_attention_tiled(int B, int T, int C, int NH, float amp)
{
    const int HS = C / NH;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = falloc(nqkv), *out = falloc(nout), *lse = falloc(nlse), *r = falloc(nout);
    float *dqkv = falloc(nqkv), *rowdot = falloc(nlse);
    fill_uniform(qkv, nqkv, -amp, amp, 71);
    fill_uniform(r, nout, -1, 1, 72);
    fill_value(out, nout, NAN);
    fill_value(lse, nlse, NAN);
    attention_forward_tiled(out, lse, qkv, B, T, C, NH);
    double *dq = to_double(qkv, nqkv), *rout = dalloc(nout), *ref = dalloc(nqkv);
    ref_attention(rout, NULL, dq, B, T, C, NH);
    const int strict = amp <= 2.0f;
    for (size_t i = 0; i < nout; i++)
        ck_assert_msg(strict ? fabs(out[i] - rout[i]) <= 1e-5 * (1.0 + fabs(rout[i])) : isfinite(out[i]),
                      "attention_forward_tiled(B=%d,T=%d,C=%d,NH=%d) out[%zu] = %.9g, want %.9g", B, T, C, NH, i,
                      (double)out[i], rout[i]);
    /* lse = log sum_j exp(scale q.k_j) over the row's keys */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = dq + ((size_t)b * T + i) * 3 * C + h * HS;
                double mx = -INFINITY, sum = 0.0, sc[1024];
                ck_assert_int_le(T, 1024);
                for (int j = 0; j <= i; j++) {
                    const double *k = dq + ((size_t)b * T + j) * 3 * C + C + h * HS;
                    double d = 0.0;
                    for (int c = 0; c < HS; c++) d += q[c] * k[c];
                    sc[j] = d / sqrt((double)HS);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= i; j++) sum += exp(sc[j] - mx);
                const double want = mx + log(sum), got = lse[((size_t)b * NH + h) * T + i];
                ck_assert_msg(strict ? fabs(got - want) <= 1e-5 * (1.0 + fabs(want)) : isfinite(got),
                              "lse[%d,%d,%d] = %.9g, want %.9g", b, h, i, got, want);
            }
    if (strict) {
        fill_value(dqkv, nqkv, NAN);   /* overwrite semantics */
        fill_value(rowdot, nlse, NAN);
        attention_backward_tiled(dqkv, rowdot, r, out, qkv, lse, B, T, C, NH);
        ref_attention_backward(ref, dq, r, B, T, C, NH);
        double maxabs = 0.0;
        for (size_t i = 0; i < nqkv; i++) maxabs = fmax(maxabs, fabs(ref[i]));
        ck_assert_msg(maxabs > 0.0, "reference gradient is zero");
        for (size_t i = 0; i < nqkv; i++)
            ck_assert_msg(fabs(dqkv[i] - ref[i]) <= 1e-4 * maxabs,
                          "attention_backward_tiled(B=%d,T=%d,C=%d,NH=%d) dqkv[%zu] = %.9g, want %.9g", B, T, C, NH,
                          i, (double)dqkv[i], ref[i]);
        /* bitwise the same on one thread, whatever the buffers held */
        float *out2 = falloc(nout), *lse2 = falloc(nlse), *d2 = falloc(nqkv);
        fill_value(out2, nout, 5.0f);
        fill_value(d2, nqkv, -3.0f);
        fill_value(rowdot, nlse, 9.0f);
        int old_threads = set_threads(1);
        attention_forward_tiled(out2, lse2, qkv, B, T, C, NH);
        attention_backward_tiled(d2, rowdot, r, out2, qkv, lse2, B, T, C, NH);
        set_threads(old_threads);
        ck_assert_msg(memcmp(out, out2, nout * sizeof *out) == 0, "tiled attention out differs on 1 thread");
        ck_assert_msg(memcmp(lse, lse2, nlse * sizeof *lse) == 0, "tiled attention lse differs on 1 thread");
        ck_assert_msg(memcmp(dqkv, d2, nqkv * sizeof *d2) == 0, "tiled attention dqkv differs on 1 thread");
        free(out2); free(lse2); free(d2);
    }
    free(qkv); free(out); free(lse); free(r); free(dqkv); free(rowdot); free(dq); free(rout); free(ref);
}

/* central differences through the double reference forward (the loss sum(out * r)) */
static void check_attention_tiled_fd(int B, int T, int C, int NH)
{
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = falloc(nqkv), *out = falloc(nout), *lse = falloc(nlse), *r = falloc(nout);
    float *dqkv = falloc(nqkv), *rowdot = falloc(nlse);
    fill_uniform(qkv, nqkv, -2, 2, 73);
    fill_uniform(r, nout, -1, 1, 74);
    attention_forward_tiled(out, lse, qkv, B, T, C, NH);
    attention_backward_tiled(dqkv, rowdot, r, out, qkv, lse, B, T, C, NH);
    struct att_ctx c = {to_double(qkv, nqkv), dalloc(nout), r, B, T, C, NH};
    int bad = grad_check("tiled attention dqkv", c.qkv, nqkv, dqkv, att_loss, &c);
    ck_assert_msg(bad == 0, "attention_backward_tiled(B=%d,T=%d,C=%d,NH=%d): %d mismatches", B, T, C, NH, bad);
    free(c.qkv); free(c.out);
    free(qkv); free(out); free(lse); free(r); free(dqkv); free(rowdot);
}

START_TEST(test_attention_tiled)
{
    check_attention_tiled(2, 5, 8, 2, 2.0f);       /* inside one tile */
    check_attention_tiled(2, 70, 16, 4, 2.0f);     /* two key tiles, ragged end */
    check_attention_tiled(2, 128, 64, 4, 2.0f);    /* exact multiple of the tile, tasks shared among threads */
    check_attention_tiled(1, 150, 256, 2, 2.0f);   /* 128-wide heads: 32-row query tiles */
    check_attention_tiled(1, 90, 32, 2, 30.0f);    /* scores ~1e3: the online max keeps it finite */
    check_attention_tiled_fd(2, 5, 8, 2);
    check_attention_tiled_fd(1, 70, 8, 2);         /* the gradient across key tiles */
}
END_TEST

/* ------------------------------------------------------ fused cross-entropy */

/* crossentropy_lse and crossentropy_backward_lse (the fused head's halves)
 * against crossentropy_forward / crossentropy_backward on the same logits:
 * losses, and d(logits) from the log-sum-exp equal to the probabilities'
 * within fp32 rounding; the padding columns get 0 and the target's -scale */
START_TEST(test_crossentropy_lse)
{
    const int BT = 7, V = 37, valid = 33;   /* 4 padding columns */
    float *logits = falloc((size_t)BT * V), *probs = falloc((size_t)BT * V), *stats = falloc(3 * (size_t)BT);
    float *losses = falloc(BT), *ref_losses = falloc(BT), *lse = falloc(BT), *d = falloc((size_t)BT * V);
    int targets[7] = {0, 5, 32, 17, 1, 32, 9};
    fill_uniform(logits, (size_t)BT * V, -6, 6, 81);
    logits[3 * V + 17] = 90.0f;   /* a row with a dominant target: its loss near 0, still finite */
    for (int i = 0; i < BT; i++)
        for (int j = 0; j < valid; j++) probs[(size_t)i * valid + j] = logits[(size_t)i * V + j];
    crossentropy_forward(ref_losses, probs, targets, BT, valid);   /* the unpadded reference */
    crossentropy_stats(stats, logits, targets, BT, V, valid, 0);
    crossentropy_lse(losses, lse, stats, BT, 1);
    for (int i = 0; i < BT; i++)
        ck_assert_msg(fabsf(losses[i] - ref_losses[i]) <= 1e-5f * (1.0f + fabsf(ref_losses[i])),
                      "row %d: loss %.9g, want %.9g", i, (double)losses[i], (double)ref_losses[i]);
    memcpy(d, logits, (size_t)BT * V * sizeof *d);
    const float scale = 0.25f;
    crossentropy_backward_lse(d, lse, targets, scale, BT, V, valid, 0);
    crossentropy_backward(probs, probs, targets, scale, BT, valid);
    for (int i = 0; i < BT; i++)
        for (int j = 0; j < V; j++) {
            const float want = j < valid ? probs[(size_t)i * valid + j] : 0.0f;
            ck_assert_msg(fabsf(d[(size_t)i * V + j] - want) <= 1e-6f, "row %d column %d: %.9g, want %.9g", i, j,
                          (double)d[(size_t)i * V + j], (double)want);
        }
    /* a rank whose first vocabulary entry is 30 holds targets 32 only; one holding padding alone adds nothing */
    memcpy(d, logits, (size_t)BT * V * sizeof *d);
    crossentropy_backward_lse(d, lse, targets, scale, BT, V, 3, 30);
    ck_assert(d[2 * V + 2] < 0 && d[5 * V + 2] < 0 && d[0] > 0 && d[3] == 0.0f);
    free(logits); free(probs); free(stats); free(losses); free(ref_losses); free(lse); free(d);
}
END_TEST

/* ---------------------------------------------------------------- embedding */

struct emb_ctx {
    double *wte, *wpe, *x;
    const int *tokens;
    const float *r;
    int B, T, C;
};

static double emb_loss(void *p)
{
    struct emb_ctx *c = p;
    for (int i = 0; i < c->B * c->T; i++)
        for (int k = 0; k < c->C; k++)
            c->x[(size_t)i * c->C + k] = c->wte[(size_t)c->tokens[i] * c->C + k] +
                                         c->wpe[(size_t)(i % c->T) * c->C + k];
    return dot_r(c->x, c->r, (size_t)c->B * c->T * c->C);
}

START_TEST(test_embedding)
{
    const int B = 2, T = 5, C = 70, V = 7;
    const int tokens[10] = {3, 1, 3, 6, 0, 3, 3, 2, 1, 5}; /* repeats; token 4 unused */
    size_t n = (size_t)B * T * C;
    float *wte = falloc((size_t)V * C), *wpe = falloc((size_t)T * C), *r = falloc(n);
    float *x = falloc(n);
    fill_uniform(wte, (size_t)V * C, -1, 1, 71);
    fill_uniform(wpe, (size_t)T * C, -1, 1, 72);
    fill_uniform(r, n, -1, 1, 73);
    embedding_forward(x, tokens, wte, wpe, B, T, C);
    for (int i = 0; i < B * T; i++)
        for (int k = 0; k < C; k++)
            ck_assert_msg(x[i * C + k] == wte[tokens[i] * C + k] + wpe[(i % T) * C + k],
                          "embedding_forward x[%d,%d]", i, k);

    float *dte0 = falloc((size_t)V * C), *dpe0 = falloc((size_t)T * C);
    fill_uniform(dte0, (size_t)V * C, -1, 1, 74);
    fill_uniform(dpe0, (size_t)T * C, -1, 1, 75);
    float *dte = copy_floats(dte0, (size_t)V * C), *dpe = copy_floats(dpe0, (size_t)T * C);
    embedding_backward(dte, dpe, r, tokens, B, T, C);
    float *gte = minus(dte, dte0, (size_t)V * C), *gpe = minus(dpe, dpe0, (size_t)T * C);
    struct emb_ctx c = {to_double(wte, (size_t)V * C), to_double(wpe, (size_t)T * C),
                        dalloc(n), tokens, r, B, T, C};
    /* the unused token's gradient is 0 on both sides: compare it exactly */
    for (int k = 0; k < C; k++)
        ck_assert_msg(gte[4 * C + k] == 0.0f, "dwte of an unused token changed");
    int bad = grad_check("embedding dwte", c.wte, (size_t)V * C, gte, emb_loss, &c);
    bad += grad_check("embedding dwpe", c.wpe, (size_t)T * C, gpe, emb_loss, &c);
    ck_assert_msg(bad == 0, "embedding_backward: %d gradient mismatches", bad);
    free(c.wte); free(c.wpe); free(c.x);
    free(wte); free(wpe); free(r); free(x); free(dte0); free(dpe0); free(dte); free(dpe);
    free(gte); free(gpe);
}
END_TEST

/* ------------------------------------------------------------- crossentropy */

struct ce_ctx {
    double *logits;
    const int *targets;
    double scale;
    int BT, V;
};

static double ce_ref_loss(const double *l, int t, int V)
{
    double mx = l[0], s = 0.0;
    for (int j = 1; j < V; j++)
        if (l[j] > mx) mx = l[j];
    for (int j = 0; j < V; j++) s += exp(l[j] - mx);
    return log(s) - (l[t] - mx);
}

static double ce_loss(void *p)
{
    struct ce_ctx *c = p;
    double L = 0.0;
    for (int i = 0; i < c->BT; i++)
        L += ce_ref_loss(c->logits + (size_t)i * c->V, c->targets[i], c->V);
    return c->scale * L;
}

START_TEST(test_crossentropy)
{
    const int BT = 6, V = 17;
    const int targets[6] = {0, 16, 5, 5, 9, 2};
    size_t n = (size_t)BT * V;
    float *logits = falloc(n), *probs = falloc(n), *losses = falloc(BT), *dl = falloc(n);
    fill_uniform(logits, n, -3, 3, 81);
    memcpy(probs, logits, n * sizeof *probs);
    crossentropy_forward(losses, probs, targets, BT, V);
    struct ce_ctx c = {to_double(logits, n), targets, 1.0 / BT, BT, V};
    for (int i = 0; i < BT; i++) {
        double want = ce_ref_loss(c.logits + (size_t)i * V, targets[i], V);
        ck_assert_msg(fabs(losses[i] - want) <= 1e-5 * (1.0 + want),
                      "crossentropy loss[%d] = %.9g, want %.9g", i, (double)losses[i], want);
        double sum = 0.0;
        for (int j = 0; j < V; j++) {
            double lp = -ce_ref_loss(c.logits + (size_t)i * V, j, V);
            ck_assert_msg(fabs(probs[i * V + j] - exp(lp)) <= 1e-6,
                          "crossentropy probs[%d,%d] = %.9g, want %.9g", i, j,
                          (double)probs[i * V + j], exp(lp));
            sum += probs[i * V + j];
        }
        ck_assert_msg(fabs(sum - 1.0) <= 1e-5, "probs row %d sums to %.9g", i, sum);
    }
    fill_value(dl, n, NAN);
    crossentropy_backward(dl, probs, targets, (float)c.scale, BT, V);
    int bad = grad_check("crossentropy dlogits", c.logits, n, dl, ce_loss, &c);
    ck_assert_msg(bad == 0, "crossentropy_backward: %d gradient mismatches", bad);

    /* dlogits may alias probs (the model writes the gradient over the probs) */
    float *inplace = copy_floats(probs, n);
    crossentropy_backward(inplace, inplace, targets, (float)c.scale, BT, V);
    ck_assert_msg(memcmp(inplace, dl, n * sizeof *dl) == 0,
                  "crossentropy_backward in place differs");
    free(inplace);
    free(c.logits); free(logits); free(probs); free(losses); free(dl);
}
END_TEST

START_TEST(test_crossentropy_large_logits)
{
    /* logits far outside exp's range: the max subtraction keeps it finite */
    const int BT = 2, V = 5;
    const int targets[2] = {1, 4};
    float probs[10] = {1000, 1001, 999, 998, 1000, -1000, -1001, -999, -998, -1000};
    float losses[2];
    crossentropy_forward(losses, probs, targets, BT, V);
    for (int i = 0; i < BT; i++) {
        ck_assert_msg(isfinite(losses[i]), "loss %d not finite", i);
        double s = 0.0;
        for (int j = 0; j < V; j++) {
            ck_assert_msg(isfinite(probs[i * V + j]), "prob not finite");
            s += probs[i * V + j];
        }
        ck_assert_msg(fabs(s - 1.0) <= 1e-6, "row %d sums to %g", i, s);
    }
    /* both rows are shifts of the same logits, target 1 vs 4 of {0,1,-1,-2,0}+c */
    double l0 = log(exp(0) + exp(1) + exp(-1) + exp(-2) + exp(0)) - 1.0;
    ck_assert_msg(fabs(losses[0] - l0) <= 1e-5, "loss[0] = %g, want %g", (double)losses[0],
                  l0);
}
END_TEST

START_TEST(test_crossentropy_large_gap)
{
    /* a target logit far below the max: its probability underflows to 0 in
     * fp32 (exp(-88) is the smallest normal), yet the loss, max + log-sum-exp
     * - target logit, is finite and exact: 1238.2 is the gap seen in a run
     * that -log p[target] stopped as "diverged" */
    const int BT = 3, V = 4;
    const int targets[3] = {0, 2, 3};
    const float gaps[3] = {89.0f, 1238.2f, 1.0e4f};
    float probs[12], losses[3];
    double want[3];
    for (int i = 0; i < BT; i++) {
        /* row: {-gap, 0, -gap, -gap} shifted by 50, target at -gap */
        for (int j = 0; j < V; j++) probs[i * V + j] = 50.0f - (j == 1 ? 0.0f : gaps[i]);
        double l[4];
        for (int j = 0; j < V; j++) l[j] = probs[i * V + j];
        want[i] = ce_ref_loss(l, targets[i], V);
    }
    crossentropy_forward(losses, probs, targets, BT, V);
    for (int i = 0; i < BT; i++) {
        ck_assert_msg(isfinite(losses[i]), "gap %g: loss %g is not finite", (double)gaps[i], (double)losses[i]);
        ck_assert_msg(fabs(losses[i] - want[i]) <= 1e-6 * want[i], "gap %g: loss %.9g, want %.9g",
                      (double)gaps[i], (double)losses[i], want[i]);
        ck_assert_msg(probs[i * V + 1] == 1.0f, "gap %g: the max's probability %.9g, want 1", (double)gaps[i],
                      (double)probs[i * V + 1]);
    }
}
END_TEST

/* ----------------------------------------------------------------- residual */

START_TEST(test_residual)
{
    const size_t n = 1000;
    float *a = falloc(n), *b = falloc(n), *o = falloc(n);
    fill_uniform(a, n, -1, 1, 91);
    fill_uniform(b, n, -1, 1, 92);
    residual_forward(o, a, b, n);
    for (size_t i = 0; i < n; i++) ck_assert_msg(o[i] == a[i] + b[i], "residual %zu", i);
    float *a2 = copy_floats(a, n);
    residual_forward(a2, a2, b, n); /* out aliases a */
    ck_assert_msg(memcmp(a2, o, n * sizeof *o) == 0, "residual with out == a");
    float *b2 = copy_floats(b, n);
    residual_forward(b2, a, b2, n); /* out aliases b */
    ck_assert_msg(memcmp(b2, o, n * sizeof *o) == 0, "residual with out == b");
    float *y = copy_floats(a, n);
    vector_accumulate(y, b, n);
    ck_assert_msg(memcmp(y, o, n * sizeof *o) == 0, "vector_accumulate");
    free(a); free(b); free(o); free(a2); free(b2); free(y);
}
END_TEST

/* The fused residual + LayerNorm: the same bits as residual_forward then
 * layernorm_forward (what lets gpt_ops.c fuse them and keep every loss),
 * out of place and in place (res aliasing a, as gpt_ops.c calls it), with
 * threads (sizes above the serial cut-off) and without, and on the bf16
 * table against the fp32 one given the weights it widens. */
START_TEST(test_residual_layernorm)
{
    const int shapes[][2] = {{7, 72}, {512, 256}, {3, 1}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int BT = shapes[k][0], C = shapes[k][1];
        const size_t n = (size_t)BT * C;
        float *a = falloc(n), *r = falloc(n), *w = falloc(C), *b = falloc(C);
        fill_uniform(a, n, -2, 3, 111 + k);
        fill_uniform(r, n, -1, 1, 112 + k);
        fill_uniform(w, C, 0.5f, 1.5f, 113 + k);
        fill_uniform(b, C, -1, 1, 114 + k);
        float *sum = falloc(n), *y = falloc(n), *mean = falloc(BT), *rstd = falloc(BT);
        residual_forward(sum, a, r, n);
        layernorm_forward(y, mean, rstd, sum, w, b, BT, C);
        for (int threads = 1; threads <= 2; threads++) {
            int old_threads = set_threads(threads);
            float *res = copy_floats(a, n), *fy = falloc(n), *fmean = falloc(BT), *frstd = falloc(BT);
            residual_layernorm_forward(res, fy, fmean, frstd, res, r, w, b, BT, C);   /* in place */
            ck_assert_msg(memcmp(res, sum, n * 4) == 0, "BT %d C %d: res != residual_forward's", BT, C);
            ck_assert_msg(memcmp(fy, y, n * 4) == 0 && memcmp(fmean, mean, BT * 4) == 0 &&
                          memcmp(frstd, rstd, BT * 4) == 0,
                          "BT %d C %d, %d threads: fused layernorm differs from layernorm_forward's", BT, C, threads);
            fill_value(res, n, 0);
            residual_layernorm_forward(res, fy, fmean, frstd, a, r, w, b, BT, C);   /* out of place */
            ck_assert_msg(memcmp(res, sum, n * 4) == 0 && memcmp(fy, y, n * 4) == 0,
                          "BT %d C %d: out of place differs", BT, C);
            set_threads(old_threads);
            free(res); free(fy); free(fmean); free(frstd);
        }
        /* the bf16 table: its weights widened, the fp32 table's bits */
        uint16_t *w16 = malloc(C * sizeof *w16), *b16 = malloc(C * sizeof *b16);
        float *ww = falloc(C), *bw = falloc(C);
        ck_assert_msg(w16 && b16, "out of memory");
        osdp_compute_cpu_bf16.convert_weights(w16, w, C);
        osdp_compute_cpu_bf16.convert_weights(b16, b, C);
        for (int c = 0; c < C; c++) {
            ww[c] = osdp_bf16_to_float(w16[c]);
            bw[c] = osdp_bf16_to_float(b16[c]);
        }
        float *res32 = falloc(n), *y32 = falloc(n), *res16 = falloc(n), *y16 = falloc(n);
        osdp_compute_cpu.residual_layernorm_forward(res32, y32, mean, rstd, a, r, ww, bw, BT, C);
        osdp_compute_cpu_bf16.residual_layernorm_forward(res16, y16, mean, rstd, a, r, w16, b16, BT, C);
        ck_assert_msg(memcmp(res16, res32, n * 4) == 0 && memcmp(y16, y32, n * 4) == 0,
                      "BT %d C %d: the bf16 table's fused residual + layernorm differs", BT, C);
        free(a); free(r); free(w); free(b); free(sum); free(y); free(mean); free(rstd);
        free(w16); free(b16); free(ww); free(bw); free(res32); free(y32); free(res16); free(y16);
    }
}
END_TEST

/* ------------------------------------------------- thread-count independence */

START_TEST(test_threads_bitwise)
{
    /* The OpenMP kernels must give the same bits with 1 and 2 threads (the
     * sizes are above the serial cut-offs).  Without OpenMP this is trivial. */
    const int BT = 512, C = 256, V = 300, T = 64;
    size_t n = (size_t)BT * C;
    float *x = falloc(n), *w = falloc(C), *b = falloc(C), *dy = falloc(n);
    float *y[2], *mean[2], *rstd[2], *dx[2], *dw[2], *db[2], *dte[2], *dpe[2], *db2[2];
    int *tok = malloc(BT * sizeof *tok);
    ck_assert_msg(tok != NULL, "out of memory");
    for (int i = 0; i < BT; i++) tok[i] = (i * 37) % V;
    fill_uniform(x, n, -1, 2, 101);
    fill_uniform(w, C, -1, 1, 102);
    fill_uniform(b, C, -1, 1, 103);
    fill_uniform(dy, n, -1, 1, 104);
    int old_threads = set_threads(1);
    for (int t = 0; t < 2; t++) {
        set_threads(t + 1);
        y[t] = falloc(n); mean[t] = falloc(BT); rstd[t] = falloc(BT);
        dx[t] = falloc(n); dw[t] = falloc(C); db[t] = falloc(C);
        dte[t] = falloc((size_t)V * C); dpe[t] = falloc((size_t)T * C);
        db2[t] = falloc(C);
        fill_value(dx[t], n, 0); fill_value(dw[t], C, 0); fill_value(db[t], C, 0);
        fill_value(dte[t], (size_t)V * C, 0); fill_value(dpe[t], (size_t)T * C, 0);
        fill_value(db2[t], C, 0);
        layernorm_forward(y[t], mean[t], rstd[t], x, w, b, BT, C);
        layernorm_backward(dx[t], dw[t], db[t], dy, x, w, mean[t], rstd[t], BT, C);
        embedding_backward(dte[t], dpe[t], dy, tok, BT / T, T, C);
        /* column sums of matmul_backward (dw of a 1-wide input) */
        float dwm[256];
        fill_value(dwm, C, 0);
        float one_col[512];
        fill_value(one_col, BT, 1.0f);
        matmul_backward(NULL, dwm, db2[t], dy, one_col, w, BT, 1, C, 0);
    }
    set_threads(old_threads);
    ck_assert_msg(memcmp(y[0], y[1], n * 4) == 0, "layernorm y depends on threads");
    ck_assert_msg(memcmp(dx[0], dx[1], n * 4) == 0, "layernorm dx depends on threads");
    ck_assert_msg(memcmp(dw[0], dw[1], C * 4) == 0, "layernorm dw depends on threads");
    ck_assert_msg(memcmp(db[0], db[1], C * 4) == 0, "layernorm db depends on threads");
    ck_assert_msg(memcmp(dte[0], dte[1], (size_t)V * C * 4) == 0, "dwte depends on threads");
    ck_assert_msg(memcmp(dpe[0], dpe[1], (size_t)T * C * 4) == 0, "dwpe depends on threads");
    ck_assert_msg(memcmp(db2[0], db2[1], C * 4) == 0, "matmul db depends on threads");
    for (int t = 0; t < 2; t++) {
        free(y[t]); free(mean[t]); free(rstd[t]); free(dx[t]); free(dw[t]); free(db[t]);
        free(dte[t]); free(dpe[t]); free(db2[t]);
    }
    free(x); free(w); free(b); free(dy); free(tok);
}
END_TEST

/* ------------------------------------------------- vocabulary-parallel kernels */

/* The vocabulary cut in RANGES ranges of RANGE_N entries (the last holding
 * only padding): each range's kernels, combined as the operators combine
 * them across a tensor-parallel group, give the whole-vocabulary kernels. */
enum { RANGE_V = 37, RANGE_N = 16, RANGES = 4 };

static int range_valid(int r)
{
    int left = RANGE_V - r * RANGE_N;
    return left < 0 ? 0 : left < RANGE_N ? left : RANGE_N;
}

START_TEST(test_embedding_range)
{
    const int B = 2, T = 5, C = 70, BT = B * T;
    float *wte = falloc((size_t)RANGES * RANGE_N * C), *wpe = falloc((size_t)T * C), *dx = falloc((size_t)BT * C);
    fill_uniform(wte, (size_t)RANGES * RANGE_N * C, -1, 1, 71);
    fill_uniform(wpe, (size_t)T * C, -1, 1, 72);
    fill_uniform(dx, (size_t)BT * C, -1, 1, 73);
    int tok[10] = {0, 36, 15, 16, 3, 36, 31, 32, 0, 20};
    float *x = falloc((size_t)BT * C), *sum = falloc((size_t)BT * C), *part = falloc((size_t)BT * C);
    embedding_forward(x, tok, wte, wpe, B, T, C);
    /* rank 0 adds wpe; each element has one non-zero wte term: the sum is exact */
    fill_value(sum, (size_t)BT * C, 0.0f);
    for (int r = 0; r < RANGES; r++) {
        embedding_forward_range(part, tok, wte + (size_t)r * RANGE_N * C, r == 0 ? wpe : NULL, B, T, C, r * RANGE_N,
                                RANGE_N);
        for (int i = 0; i < BT * C; i++) sum[i] += part[i];
    }
    ck_assert_msg(memcmp(sum, x, (size_t)BT * C * sizeof *x) == 0, "ranges' sum is not bitwise the whole lookup");
    /* the bf16 table's lookup of a range: the fp32 one on the same (widened) weights */
    const size_t nte = (size_t)RANGE_N * C, npe = (size_t)T * C;
    uint16_t *te16 = malloc(nte * sizeof *te16), *pe16 = malloc(npe * sizeof *pe16);
    ck_assert(te16 && pe16);
    osdp_compute_cpu_bf16.convert_weights(te16, wte + nte, nte);
    osdp_compute_cpu_bf16.convert_weights(pe16, wpe, npe);
    for (size_t e = 0; e < nte; e++) wte[nte + e] = osdp_bf16_to_float(te16[e]);
    for (size_t e = 0; e < npe; e++) wpe[e] = osdp_bf16_to_float(pe16[e]);
    for (int with_wpe = 0; with_wpe < 2; with_wpe++) {
        embedding_forward_range(x, tok, wte + nte, with_wpe ? wpe : NULL, B, T, C, RANGE_N, RANGE_N);
        osdp_compute_cpu_bf16.embedding_forward_range(part, tok, te16, with_wpe ? pe16 : NULL, B, T, C, RANGE_N,
                                                      RANGE_N);
        ck_assert_msg(memcmp(part, x, (size_t)BT * C * sizeof *x) == 0, "bf16 range lookup differs (wpe %d)", with_wpe);
    }
    free(te16);
    free(pe16);
    /* backward: each range's rows, dwpe once */
    float *dte = falloc((size_t)RANGES * RANGE_N * C), *dpe = falloc((size_t)T * C);
    float *dte_r = falloc((size_t)RANGES * RANGE_N * C), *dpe_r = falloc((size_t)T * C);
    fill_uniform(dte, (size_t)RANGES * RANGE_N * C, -1, 1, 74);
    fill_uniform(dpe, (size_t)T * C, -1, 1, 75);
    memcpy(dte_r, dte, (size_t)RANGES * RANGE_N * C * sizeof *dte);
    memcpy(dpe_r, dpe, (size_t)T * C * sizeof *dpe);
    embedding_backward(dte, dpe, dx, tok, B, T, C);
    for (int r = 0; r < RANGES; r++)
        embedding_backward_range(dte_r + (size_t)r * RANGE_N * C, r == 1 ? dpe_r : NULL, dx, tok, B, T, C,
                                 r * RANGE_N, RANGE_N);
    ck_assert_msg(memcmp(dte, dte_r, (size_t)RANGES * RANGE_N * C * sizeof *dte) == 0, "dwte of the ranges differs");
    ck_assert_msg(memcmp(dpe, dpe_r, (size_t)T * C * sizeof *dpe) == 0, "dwpe of the ranges differs");
    free(wte); free(wpe); free(dx); free(x); free(sum); free(part); free(dte); free(dpe); free(dte_r); free(dpe_r);
}
END_TEST

START_TEST(test_crossentropy_ranges)
{
    const int BT = 6;
    float *logits = falloc((size_t)BT * RANGE_V), *probs = falloc((size_t)BT * RANGE_V), *losses = falloc(BT);
    /* logit gaps past fp32 exp's range in one row */
    fill_uniform(logits, (size_t)BT * RANGE_V, -4, 4, 81);
    logits[2 * RANGE_V + 30] = 150.0f;
    int tg[6] = {0, 15, 36, 16, 31, 32};
    memcpy(probs, logits, (size_t)BT * RANGE_V * sizeof *probs);
    crossentropy_forward(losses, probs, tg, BT, RANGE_V);
    float *group = falloc((size_t)RANGES * 3 * BT), *part = falloc((size_t)RANGES * BT * RANGE_N);
    for (int r = 0; r < RANGES; r++) {
        float *l = part + (size_t)r * BT * RANGE_N;
        fill_value(l, (size_t)BT * RANGE_N, 1e3f);   /* padding: never part of the loss */
        for (int i = 0; i < BT; i++)
            for (int j = 0; j < range_valid(r); j++) l[i * RANGE_N + j] = logits[i * RANGE_V + r * RANGE_N + j];
        crossentropy_stats(group + (size_t)r * 3 * BT, l, tg, BT, RANGE_N, range_valid(r), r * RANGE_N);
    }
    ck_assert(isinf(group[3 * 3 * BT]) && group[3 * 3 * BT + 1] == 0.0f);   /* the all-padding range */
    const float scale = 0.25f;
    float *dl = falloc((size_t)BT * RANGE_V);
    crossentropy_backward(dl, probs, tg, scale, BT, RANGE_V);
    for (int r = 0; r < RANGES; r++) {
        float *p = part + (size_t)r * BT * RANGE_N, *loss_r = falloc(BT);
        crossentropy_finish(loss_r, p, group, BT, RANGE_N, range_valid(r), RANGES);
        for (int i = 0; i < BT; i++) {
            ck_assert_msg(fabsf(loss_r[i] - losses[i]) <= 1e-6f * fabsf(losses[i]), "range %d row %d: loss %.9g, "
                          "whole %.9g", r, i, loss_r[i], losses[i]);
            for (int j = 0; j < RANGE_N; j++) {
                const float want = j < range_valid(r) ? probs[i * RANGE_V + r * RANGE_N + j] : 0.0f;
                ck_assert_msg(fabsf(p[i * RANGE_N + j] - want) <= 1e-6f, "range %d row %d column %d: p %g, whole %g",
                              r, i, j, p[i * RANGE_N + j], want);
            }
        }
        /* the backward: the whole's columns on the same probabilities, 0 on the padding */
        for (int i = 0; i < BT; i++)
            for (int j = 0; j < range_valid(r); j++) p[i * RANGE_N + j] = probs[i * RANGE_V + r * RANGE_N + j];
        crossentropy_backward_range(p, p, tg, scale, BT, RANGE_N, r * RANGE_N);
        for (int i = 0; i < BT; i++)
            for (int j = 0; j < RANGE_N; j++) {
                const float want = j < range_valid(r) ? dl[i * RANGE_V + r * RANGE_N + j] : 0.0f;
                ck_assert_msg(p[i * RANGE_N + j] == want, "range %d row %d column %d: dlogit %g, whole %g", r, i, j,
                              p[i * RANGE_N + j], want);
            }
        free(loss_r);
    }
    free(logits); free(probs); free(losses); free(group); free(part); free(dl);
}
END_TEST

/* the OSDP_VOCAB_QUANTUM knob: the backend's quantum unless set; a bad value names the variable */
START_TEST(test_vocab_quantum)
{
    int q = 0;
    unsetenv("OSDP_VOCAB_QUANTUM");
    ck_assert_int_eq(osdp_compute_vocab_quantum(&osdp_compute_cpu, &q), OSDP_OK);
    ck_assert_int_eq(q, 1);
    setenv("OSDP_VOCAB_QUANTUM", "128", 1);
    ck_assert_int_eq(osdp_compute_vocab_quantum(&osdp_compute_cpu, &q), OSDP_OK);
    ck_assert_int_eq(q, 128);
    const char *bad[] = {"0", "-3", "7x", "4097"};
    for (int k = 0; k < 4; k++) {
        setenv("OSDP_VOCAB_QUANTUM", bad[k], 1);
        ck_assert_int_eq(osdp_compute_vocab_quantum(&osdp_compute_cpu, &q), OSDP_ERR_INPUT);
        ck_assert_msg(strstr(osdp_error_message(), "OSDP_VOCAB_QUANTUM=") != NULL, "%s", osdp_error_message());
    }
    unsetenv("OSDP_VOCAB_QUANTUM");
    ck_assert_int_eq(osdp_compute_cpu_bf16.vocab_quantum, 1);
}
END_TEST

/* --------------------------------------------------------------------- main */

static Suite *kernels_suite(void)
{
    const TTest *core[] = {test_matmul_forward, test_matmul_backward, test_matmul_backward_accumulate, test_layernorm,
                           test_gelu, test_attention_forward, test_attention_backward, test_attention_deterministic,
                           test_attention_tiled, test_crossentropy_lse,
                           test_embedding, test_crossentropy, test_crossentropy_large_logits,
                           test_crossentropy_large_gap, test_residual, test_residual_layernorm, test_threads_bitwise, test_embedding_range,
                           test_crossentropy_ranges, test_vocab_quantum, NULL};
    const osdp_check_case cases[] = {
        {.name = "core", .tests = core},
    };
    return osdp_check_suite("kernels_cpu", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = kernels_suite};

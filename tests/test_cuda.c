/* The CUDA compute backend against the CPU one, and the NCCL communication
 * backend on one rank.
 *
 * Every kernel of the table runs on the same random inputs through
 * osdp_compute_cpu and osdp_compute_cuda; outputs must agree within
 *     |cpu - gpu| <= RTOL * |cpu| + ATOL * max|cpu|
 * with RTOL = 1e-4 and ATOL = 1e-5 for the fp32 paths (the two backends sum
 * in different orders and use different expf/tanhf: a few ulps per operation;
 * the ATOL term covers entries that are small after cancellation).  With
 * OSDP_CUDA_TF32=1 in the environment the GEMMs run on TF32 tensor cores (10
 * mantissa bits) and the kernels built on them (matmul, attention) are allowed
 * RTOL = ATOL = 1e-2 instead.  Sums in double must agree to 1e-10 relative.
 * The embedding backward accumulates in the CPU's order and must match
 * bitwise; accumulating kernels run on pre-filled buffers (testing +=) and
 * overwriting ones on NaN-filled buffers (testing that every entry is
 * written).  Several kernels are run twice to check bitwise determinism.
 *
 * The allocator is checked for stream-ordered reuse (a block freed behind
 * queued work and handed out again), the NCCL backend for more requests in
 * flight than it has slots.
 *
 * Without a usable GPU the test prints "SKIP: no CUDA device (reason)" and
 * exits 77, automake's code for a skipped test. */
#include "config.h"
#include "osdp/comm.h"
#include "osdp/compute.h"

#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RTOL 1e-4
#define ATOL 1e-5

static const osdp_compute_backend *cpu = &osdp_compute_cpu;
static const osdp_compute_backend *gpu = &osdp_compute_cuda;
static double gemm_rtol = RTOL, gemm_atol = ATOL;

/* ------------------------------------------------------------------ helpers */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static float *falloc(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    ck_assert_msg(p != NULL, "out of host memory");
    return p;
}

/* uniform in [lo, hi) */
static float *rand_floats(size_t n, float lo, float hi, uint64_t seed)
{
    float *a = falloc(n);
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(rng_next(&s) >> 11) / 9007199254740992.0;
        a[i] = lo + (hi - lo) * (float)u;
    }
    return a;
}

static int *rand_ints(size_t n, int mod, uint64_t seed)
{
    int *a = malloc((n ? n : 1) * sizeof *a);
    ck_assert_msg(a != NULL, "out of host memory");
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 7;
    for (size_t i = 0; i < n; i++) a[i] = (int)(rng_next(&s) % (uint64_t)mod);
    return a;
}

static float *nan_floats(size_t n)
{
    float *a = falloc(n);
    for (size_t i = 0; i < n; i++) a[i] = NAN;
    return a;
}

static void *up(const void *h, size_t bytes)
{
    void *d = gpu->alloc(bytes);
    ck_assert_msg(d != NULL, "cuda alloc of %zu bytes failed", bytes);
    gpu->to_device(d, h, bytes);
    return d;
}

static float *upf(const float *h, size_t n) { return up(h, n * sizeof(float)); }

static float *down(const float *d, size_t n)
{
    float *h = falloc(n);
    gpu->to_host(h, d, n * sizeof(float));
    return h;
}

/* cpu: reference; d: device result */
static void expect_close_tol(const char *what, const float *ref, const float *d, size_t n, double rtol,
                             double atol)
{
    float *got = down(d, n);
    double maxref = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)ref[i] - got[i]);
        ck_assert_msg(err <= rtol * fabs(ref[i]) + atol * maxref,
                      "%s[%zu]: cpu %.9g, cuda %.9g (|diff| %.3g, max|cpu| %.3g)", what, i, ref[i], got[i], err,
                      maxref);
    }
    free(got);
}

static void expect_close(const char *what, const float *ref, const float *d, size_t n)
{
    expect_close_tol(what, ref, d, n, RTOL, ATOL);
}

static void expect_close_gemm(const char *what, const float *ref, const float *d, size_t n)
{
    expect_close_tol(what, ref, d, n, gemm_rtol, gemm_atol);
}

static void expect_bitwise(const char *what, const float *ref, const float *d, size_t n)
{
    float *got = down(d, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&ref[i], &got[i], sizeof(float)) == 0, "%s[%zu]: %.9g vs %.9g (not bitwise equal)",
                      what, i, ref[i], got[i]);
    free(got);
}

/* two device buffers hold the same bits */
static void expect_same_device(const char *what, const float *d1, const float *d2, size_t n)
{
    float *a = down(d1, n);
    expect_bitwise(what, a, d2, n);
    free(a);
}

/* ------------------------------------------------------------------ memory */

START_TEST(test_memory)
{
    const size_t n = 1000;
    float *h = rand_floats(n, -1, 1, 1);
    float *a = upf(h, n);
    float *b = gpu->alloc(n * sizeof(float));
    ck_assert(b != NULL);
    gpu->copy(b, a, n * sizeof(float));
    expect_bitwise("copy", h, b, n);
    gpu->fill_zero(b + 10, 20 * sizeof(float));
    for (int i = 10; i < 30; i++) h[i] = 0.0f;
    expect_bitwise("fill_zero", h, b, n);
    void *z = gpu->alloc(0);
    ck_assert_msg(z != NULL, "alloc(0) must return a pointer");
    gpu->free(z);
    gpu->free(a);
    gpu->free(b);
    gpu->synchronize();
    free(h);
}
END_TEST

/* The caching allocator (stream-ordered pool): a block freed while a kernel
 * that reads it is still queued, and handed out again at once, must not
 * change that kernel's result; a new block reads as zeros; many alloc/free
 * rounds of mixed sizes keep working. */
START_TEST(test_memory_pool)
{
    const size_t n = 1 << 20;
    float *h = rand_floats(n, -1, 1, 2);
    float *a = upf(h, n), *b = gpu->alloc(n * sizeof(float));
    ck_assert(b != NULL);
    gpu->fill_zero(b, n * sizeof(float));
    for (int r = 0; r < 8; r++) gpu->vector_accumulate(b, a, n);   /* queued work reading a */
    gpu->free(a);
    float *c = gpu->alloc(n * sizeof(float));                       /* likely a's block again */
    ck_assert(c != NULL);
    float *zero = falloc(n);
    memset(zero, 0, n * sizeof(float));
    expect_bitwise("new block (zero-filled)", zero, c, n);
    float *want = falloc(n);
    for (size_t i = 0; i < n; i++) {
        float v = 0.0f;
        for (int r = 0; r < 8; r++) v += h[i];
        want[i] = v;
    }
    expect_bitwise("kernel reading a block freed behind it", want, b, n);
    gpu->free(b), gpu->free(c);

    void *blocks[64] = {0};
    for (int round = 0; round < 2000; round++) {
        int k = (int)((unsigned)round * 2654435761u % 64u);
        if (blocks[k]) {
            gpu->free(blocks[k]);
            blocks[k] = NULL;
        } else {
            size_t bytes = ((size_t)round * 7919u % 4096u + 1) * 256;
            blocks[k] = gpu->alloc(bytes);
            ck_assert_msg(blocks[k] != NULL, "alloc of %zu bytes (round %d)", bytes, round);
        }
    }
    for (int k = 0; k < 64; k++) gpu->free(blocks[k]);
    gpu->synchronize();
    free(h), free(zero), free(want);
}
END_TEST

/* ------------------------------------------------------------------ matmul */

static void run_matmul_forward(int BT, int IC, int OC, int with_bias, int accumulate, uint64_t seed)
{
    float *x = rand_floats((size_t)BT * IC, -1, 1, seed);
    float *w = rand_floats((size_t)IC * OC, -0.5f, 0.5f, seed + 1);
    float *b = rand_floats(OC, -1, 1, seed + 2);
    float *y = accumulate ? rand_floats((size_t)BT * OC, -1, 1, seed + 3) : nan_floats((size_t)BT * OC);
    float *dx = upf(x, (size_t)BT * IC), *dw = upf(w, (size_t)IC * OC), *db = upf(b, OC);
    float *dy = upf(y, (size_t)BT * OC);
    cpu->matmul_forward(y, x, w, with_bias ? b : NULL, BT, IC, OC, accumulate);
    gpu->matmul_forward(dy, dx, dw, with_bias ? db : NULL, BT, IC, OC, accumulate);
    expect_close_gemm("matmul_forward y", y, dy, (size_t)BT * OC);
    gpu->free(dx), gpu->free(dw), gpu->free(db), gpu->free(dy);
    free(x), free(w), free(b), free(y);
}

START_TEST(test_matmul_forward)
{
    run_matmul_forward(37, 45, 29, 1, 0, 10);
    run_matmul_forward(37, 45, 29, 0, 0, 11);
    run_matmul_forward(64, 128, 96, 1, 1, 12);
    run_matmul_forward(5, 300, 7, 0, 1, 13);
}
END_TEST

static void run_matmul_backward(int BT, int IC, int OC, int with_dx, int dx_acc, int with_db, uint64_t seed)
{
    size_t nx = (size_t)BT * IC, nw = (size_t)IC * OC, ny = (size_t)BT * OC;
    float *x = rand_floats(nx, -1, 1, seed), *w = rand_floats(nw, -0.5f, 0.5f, seed + 1);
    float *dy = rand_floats(ny, -1, 1, seed + 2);
    float *dx = dx_acc ? rand_floats(nx, -1, 1, seed + 3) : nan_floats(nx);
    float *dw = rand_floats(nw, -1, 1, seed + 4), *db = rand_floats(OC, -1, 1, seed + 5);
    float *g_x = upf(x, nx), *g_w = upf(w, nw), *g_dy = upf(dy, ny), *g_dx = upf(dx, nx);
    float *g_dw = upf(dw, nw), *g_db = upf(db, OC);
    cpu->matmul_backward(with_dx ? dx : NULL, dw, with_db ? db : NULL, dy, x, w, BT, IC, OC, dx_acc);
    gpu->matmul_backward(with_dx ? g_dx : NULL, g_dw, with_db ? g_db : NULL, g_dy, g_x, g_w, BT, IC, OC, dx_acc);
    if (with_dx) expect_close_gemm("matmul_backward dx", dx, g_dx, nx);
    else expect_bitwise("matmul_backward dx (NULL: untouched)", dx, g_dx, nx);
    expect_close_gemm("matmul_backward dw", dw, g_dw, nw);
    expect_close("matmul_backward db", db, g_db, OC);
    gpu->free(g_x), gpu->free(g_w), gpu->free(g_dy), gpu->free(g_dx), gpu->free(g_dw), gpu->free(g_db);
    free(x), free(w), free(dy), free(dx), free(dw), free(db);
}

START_TEST(test_matmul_backward)
{
    run_matmul_backward(37, 45, 29, 1, 0, 1, 20);
    run_matmul_backward(37, 45, 29, 1, 1, 1, 21);
    run_matmul_backward(100, 64, 70, 0, 0, 0, 22);
    run_matmul_backward(1000, 16, 33, 1, 0, 1, 23);  /* long column sums */
}
END_TEST

/* --------------------------------------------------------------- layernorm */

START_TEST(test_layernorm)
{
    const int BT = 45, C = 72;
    const size_t n = (size_t)BT * C;
    float *x = rand_floats(n, -2, 2, 30), *w = rand_floats(C, 0.5f, 1.5f, 31), *b = rand_floats(C, -1, 1, 32);
    float *y = nan_floats(n), *mean = nan_floats(BT), *rstd = nan_floats(BT);
    float *g_x = upf(x, n), *g_w = upf(w, C), *g_b = upf(b, C);
    float *g_y = upf(y, n), *g_mean = upf(mean, BT), *g_rstd = upf(rstd, BT);
    cpu->layernorm_forward(y, mean, rstd, x, w, b, BT, C);
    gpu->layernorm_forward(g_y, g_mean, g_rstd, g_x, g_w, g_b, BT, C);
    expect_close("layernorm y", y, g_y, n);
    expect_close("layernorm mean", mean, g_mean, BT);
    expect_close("layernorm rstd", rstd, g_rstd, BT);

    float *dy = rand_floats(n, -1, 1, 33), *dx = rand_floats(n, -1, 1, 34);
    float *dw = rand_floats(C, -1, 1, 35), *db = rand_floats(C, -1, 1, 36);
    float *g_dy = upf(dy, n), *g_dx = upf(dx, n), *g_dw = upf(dw, C), *g_db = upf(db, C);
    float *g_dx2 = upf(dx, n), *g_dw2 = upf(dw, C), *g_db2 = upf(db, C);
    /* backward from the CPU's saved statistics, so only the backward is compared */
    gpu->to_device(g_mean, mean, BT * sizeof(float));
    gpu->to_device(g_rstd, rstd, BT * sizeof(float));
    cpu->layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, BT, C);
    gpu->layernorm_backward(g_dx, g_dw, g_db, g_dy, g_x, g_w, g_mean, g_rstd, BT, C);
    gpu->layernorm_backward(g_dx2, g_dw2, g_db2, g_dy, g_x, g_w, g_mean, g_rstd, BT, C);
    expect_close("layernorm dx", dx, g_dx, n);
    expect_close("layernorm dw", dw, g_dw, C);
    expect_close("layernorm db", db, g_db, C);
    expect_same_device("layernorm dx (rerun)", g_dx, g_dx2, n);
    expect_same_device("layernorm dw (rerun)", g_dw, g_dw2, C);
    float *bufs[] = {g_x, g_w, g_b, g_y, g_mean, g_rstd, g_dy, g_dx, g_dw, g_db, g_dx2, g_dw2, g_db2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu->free(bufs[i]);
    free(x), free(w), free(b), free(y), free(mean), free(rstd), free(dy), free(dx), free(dw), free(db);
}
END_TEST

/* -------------------------------------------------------------------- gelu */

START_TEST(test_gelu)
{
    const size_t n = 3001;
    float *x = rand_floats(n, -5, 5, 40), *y = nan_floats(n), *dy = rand_floats(n, -1, 1, 41);
    float *dx = nan_floats(n);
    float *g_x = upf(x, n), *g_y = upf(y, n), *g_dy = upf(dy, n), *g_dx = upf(dx, n);
    cpu->gelu_forward(y, x, n);
    gpu->gelu_forward(g_y, g_x, n);
    expect_close("gelu y", y, g_y, n);
    cpu->gelu_backward(dx, x, dy, n);
    gpu->gelu_backward(g_dx, g_x, g_dy, n);
    expect_close("gelu dx", dx, g_dx, n);
    gpu->gelu_backward(g_dy, g_x, g_dy, n);  /* in place: dx aliases dy */
    expect_close("gelu dx (in place)", dx, g_dy, n);
    gpu->free(g_x), gpu->free(g_y), gpu->free(g_dy), gpu->free(g_dx);
    free(x), free(y), free(dy), free(dx);
}
END_TEST

/* --------------------------------------------------------------- attention */

static void run_attention(int B, int T, int C, int NH, uint64_t seed)
{
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = rand_floats(nqkv, -1, 1, seed), *out = nan_floats(nout), *att = nan_floats(natt);
    float *g_qkv = upf(qkv, nqkv), *g_out = upf(out, nout), *g_att = upf(att, natt);
    cpu->attention_forward(out, att, qkv, B, T, C, NH);
    gpu->attention_forward(g_out, g_att, g_qkv, B, T, C, NH);
    expect_close_gemm("attention att", att, g_att, natt);
    expect_close_gemm("attention out", out, g_out, nout);
    float *h_att = down(g_att, natt);
    for (size_t bh = 0; bh < (size_t)B * NH; bh++)
        for (int i = 0; i < T; i++)
            for (int j = i + 1; j < T; j++)
                ck_assert_msg(h_att[(bh * T + i) * T + j] == 0.0f, "att above the diagonal not exactly 0");
    free(h_att);

    float *dout = rand_floats(nout, -1, 1, seed + 1), *dqkv = nan_floats(nqkv), *scratch = nan_floats(natt);
    float *g_dout = upf(dout, nout), *g_dqkv = upf(dqkv, nqkv), *g_scratch = upf(scratch, natt);
    float *g_dqkv2 = upf(dqkv, nqkv);
    gpu->to_device(g_att, att, natt * sizeof(float));  /* compare the backward alone */
    cpu->attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    gpu->attention_backward(g_dqkv, g_scratch, g_dout, g_qkv, g_att, B, T, C, NH);
    expect_close_gemm("attention dqkv", dqkv, g_dqkv, nqkv);
    gpu->attention_backward(g_dqkv2, g_scratch, g_dout, g_qkv, g_att, B, T, C, NH);
    expect_same_device("attention dqkv (rerun)", g_dqkv, g_dqkv2, nqkv);
    gpu->free(g_qkv), gpu->free(g_out), gpu->free(g_att), gpu->free(g_dout), gpu->free(g_dqkv);
    gpu->free(g_scratch), gpu->free(g_dqkv2);
    free(qkv), free(out), free(att), free(dout), free(dqkv), free(scratch);
}

START_TEST(test_attention)
{
    run_attention(2, 13, 24, 3, 50);
    run_attention(3, 70, 64, 4, 51);   /* rows longer than a warp, T not a multiple of 32 */
    run_attention(1, 1, 8, 2, 52);
}
END_TEST

/* --------------------------------------------------------------- embedding */

START_TEST(test_embedding)
{
    const int B = 3, T = 17, C = 40, V = 11;  /* small V: tokens repeat */
    const int BT = B * T;
    int *tok = rand_ints(BT, V, 60);
    float *wte = rand_floats((size_t)V * C, -1, 1, 61), *wpe = rand_floats((size_t)T * C, -1, 1, 62);
    float *x = nan_floats((size_t)BT * C);
    int *g_tok = up(tok, BT * sizeof(int));
    float *g_wte = upf(wte, (size_t)V * C), *g_wpe = upf(wpe, (size_t)T * C), *g_x = upf(x, (size_t)BT * C);
    cpu->embedding_forward(x, tok, wte, wpe, B, T, C);
    gpu->embedding_forward(g_x, g_tok, g_wte, g_wpe, B, T, C);
    expect_bitwise("embedding x", x, g_x, (size_t)BT * C);

    float *dx = rand_floats((size_t)BT * C, -1, 1, 63);
    float *g_dx = upf(dx, (size_t)BT * C);
    cpu->embedding_backward(wte, wpe, dx, tok, B, T, C);   /* accumulate into the pre-filled tables */
    gpu->embedding_backward(g_wte, g_wpe, g_dx, g_tok, B, T, C);
    expect_bitwise("embedding dwte", wte, g_wte, (size_t)V * C);
    expect_bitwise("embedding dwpe", wpe, g_wpe, (size_t)T * C);
    gpu->free(g_tok), gpu->free(g_wte), gpu->free(g_wpe), gpu->free(g_x), gpu->free(g_dx);
    free(tok), free(wte), free(wpe), free(x), free(dx);
}
END_TEST

/* ------------------------------------------------------------ crossentropy */

static void run_crossentropy(int BT, int V, uint64_t seed)
{
    size_t n = (size_t)BT * V;
    float *logits = rand_floats(n, -4, 4, seed), *losses = nan_floats(BT);
    int *tgt = rand_ints(BT, V, seed + 1);
    float *g_probs = upf(logits, n), *g_losses = upf(losses, BT);
    int *g_tgt = up(tgt, BT * sizeof(int));
    cpu->crossentropy_forward(losses, logits, tgt, BT, V);
    gpu->crossentropy_forward(g_losses, g_probs, g_tgt, BT, V);
    expect_close("crossentropy probs", logits, g_probs, n);
    expect_close("crossentropy losses", losses, g_losses, BT);

    float *dl = nan_floats(n), *g_dl = upf(dl, n);
    gpu->to_device(g_probs, logits, n * sizeof(float));
    cpu->crossentropy_backward(dl, logits, tgt, 0.37f, BT, V);
    gpu->crossentropy_backward(g_dl, g_probs, g_tgt, 0.37f, BT, V);
    expect_close("crossentropy dlogits", dl, g_dl, n);
    gpu->crossentropy_backward(g_probs, g_probs, g_tgt, 0.37f, BT, V);  /* dlogits aliases probs */
    expect_close("crossentropy dlogits (in place)", dl, g_probs, n);
    gpu->free(g_probs), gpu->free(g_losses), gpu->free(g_tgt), gpu->free(g_dl);
    free(logits), free(losses), free(tgt), free(dl);
}

START_TEST(test_crossentropy)
{
    run_crossentropy(9, 100, 70);
    run_crossentropy(4, 50257, 71);
}
END_TEST

/* ----------------------------------------------------- residual, sums, adamw */

START_TEST(test_residual_accumulate)
{
    const size_t n = 5000;
    float *a = rand_floats(n, -1, 1, 80), *b = rand_floats(n, -1, 1, 81), *out = nan_floats(n);
    float *g_a = upf(a, n), *g_b = upf(b, n), *g_out = upf(out, n);
    cpu->residual_forward(out, a, b, n);
    gpu->residual_forward(g_out, g_a, g_b, n);
    expect_bitwise("residual", out, g_out, n);
    gpu->residual_forward(g_a, g_a, g_b, n);   /* out aliases a */
    expect_bitwise("residual (in place)", out, g_a, n);
    cpu->vector_accumulate(out, b, n);
    gpu->vector_accumulate(g_out, g_b, n);
    expect_bitwise("vector_accumulate", out, g_out, n);
    gpu->free(g_a), gpu->free(g_b), gpu->free(g_out);
    free(a), free(b), free(out);
}
END_TEST

START_TEST(test_sums)
{
    const size_t sizes[] = {1, 31, 1000, 1 << 20, 3000001};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        float *x = rand_floats(n, -1, 2, 90 + k), *g_x = upf(x, n);
        double s_cpu = cpu->sum(x, n), s_gpu = gpu->sum(g_x, n);
        double q_cpu = cpu->sum_squares(x, n), q_gpu = gpu->sum_squares(g_x, n);
        ck_assert_msg(fabs(s_cpu - s_gpu) <= 1e-10 * fabs(s_cpu) + 1e-12, "sum n=%zu: %.17g vs %.17g", n, s_cpu, s_gpu);
        ck_assert_msg(fabs(q_cpu - q_gpu) <= 1e-10 * q_cpu + 1e-12, "sum_squares n=%zu: %.17g vs %.17g", n, q_cpu, q_gpu);
        ck_assert_msg(gpu->sum(g_x, n) == s_gpu, "sum not deterministic");
        gpu->free(g_x);
        free(x);
    }
    ck_assert(gpu->sum(NULL, 0) == 0.0);
}
END_TEST

START_TEST(test_adamw)
{
    const size_t n = 4099;
    float *w = rand_floats(n, -1, 1, 100), *m = rand_floats(n, -0.1f, 0.1f, 101);
    float *v = rand_floats(n, 0, 0.01f, 102);
    float *g_w = upf(w, n), *g_m = upf(m, n), *g_v = upf(v, n);
    for (long t = 1; t <= 3; t++) {
        float *g = rand_floats(n, -1, 1, 103 + t), *g_g = upf(g, n);
        cpu->adamw(w, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
        gpu->adamw(g_w, g_g, g_m, g_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
        gpu->free(g_g);
        free(g);
    }
    expect_close("adamw w", w, g_w, n);
    expect_close("adamw m", m, g_m, n);
    expect_close("adamw v", v, g_v, n);
    gpu->free(g_w), gpu->free(g_m), gpu->free(g_v);
    free(w), free(m), free(v);
}
END_TEST

/* ------------------------------------------------------------ NCCL, 1 rank */

START_TEST(test_nccl_one_rank)
{
    osdp_comm comm;
    MPI_Comm world = MPI_COMM_WORLD;
    ck_assert_msg(osdp_comm_create_nccl(&comm, &world, 0) == OSDP_OK, "%s", osdp_error_message());
    ck_assert_int_eq(comm.size, 1);
    const size_t n = 257;
    float *h = rand_floats(n, -1, 1, 110), *z = nan_floats(n);
    float *a = upf(h, n), *b = upf(z, n);
    osdp_request req = {0};

    ck_assert(osdp_comm_all_gather(&comm, a, b, n, OSDP_FLOAT32, &req) == OSDP_OK);
    ck_assert(osdp_comm_wait(&comm, &req) == OSDP_OK);
    expect_bitwise("all_gather", h, b, n);
    gpu->fill_zero(b, n * sizeof(float));
    ck_assert(osdp_comm_reduce_scatter(&comm, a, b, n, OSDP_FLOAT32, NULL) == OSDP_OK);
    expect_bitwise("reduce_scatter", h, b, n);
    ck_assert(osdp_comm_all_reduce(&comm, a, n, OSDP_FLOAT32, &req) == OSDP_OK);
    ck_assert(osdp_comm_wait(&comm, &req) == OSDP_OK);
    expect_bitwise("all_reduce", h, a, n);
    ck_assert(osdp_comm_broadcast(&comm, a, n * sizeof(float), 0, NULL) == OSDP_OK);
    expect_bitwise("broadcast", h, a, n);

    /* ordering after the compute stream: a kernel writes, the collective reads */
    gpu->vector_accumulate(a, a, n);
    ck_assert(osdp_comm_all_gather(&comm, a, b, n, OSDP_FLOAT32, NULL) == OSDP_OK);
    for (size_t i = 0; i < n; i++) h[i] += h[i];
    expect_bitwise("all_gather after a kernel", h, b, n);

    /* host buffers go through MPI */
    double sums[2] = {1.5, 2.5};
    ck_assert(osdp_comm_all_reduce(&comm, sums, 2, OSDP_FLOAT64, NULL) == OSDP_OK);
    ck_assert(sums[0] == 1.5 && sums[1] == 2.5);
    ck_assert(osdp_comm_all_reduce(&comm, sums, 2, OSDP_FLOAT64, &req) == OSDP_OK);
    ck_assert(osdp_comm_wait(&comm, &req) == OSDP_OK);
    /* host and device mixed: refused */
    ck_assert(osdp_comm_all_gather(&comm, h, b, n, OSDP_FLOAT32, NULL) == OSDP_ERR_INPUT);
    ck_assert(osdp_comm_barrier(&comm) == OSDP_OK);

    osdp_comm_destroy(&comm);
    gpu->free(a), gpu->free(b);
    free(h), free(z);
}
END_TEST

/* More requests in flight than the backend has slots, some never waited,
 * one waited twice (a copy): every wait returns OK and every result is right. */
START_TEST(test_nccl_many_in_flight)
{
    osdp_comm comm;
    MPI_Comm world = MPI_COMM_WORLD;
    ck_assert_msg(osdp_comm_create_nccl(&comm, &world, 0) == OSDP_OK, "%s", osdp_error_message());
    enum { K = 200 };
    const size_t n = 64;
    float *h = rand_floats(n, -1, 1, 120);
    float *src = upf(h, n);
    float *dst[K];
    osdp_request req[K];
    for (int i = 0; i < K; i++) {
        dst[i] = gpu->alloc(n * sizeof(float));
        ck_assert(dst[i] != NULL);
        req[i].impl = NULL;
        ck_assert_msg(osdp_comm_all_gather(&comm, src, dst[i], n, OSDP_FLOAT32, &req[i]) == OSDP_OK, "%s",
                      osdp_error_message());
    }
    osdp_request copy = req[K - 1];
    for (int i = 0; i < K; i += 3)   /* two of every three never waited */
        ck_assert_msg(osdp_comm_wait(&comm, &req[i]) == OSDP_OK, "wait %d: %s", i, osdp_error_message());
    ck_assert(osdp_comm_wait(&comm, &req[K - 1]) == OSDP_OK);
    ck_assert(osdp_comm_wait(&comm, &copy) == OSDP_OK);
    ck_assert(osdp_comm_barrier(&comm) == OSDP_OK);
    for (int i = 0; i < K; i++) expect_bitwise("all_gather in flight", h, dst[i], n);
    osdp_comm_destroy(&comm);
    for (int i = 0; i < K; i++) gpu->free(dst[i]);
    gpu->free(src);
    free(h);
}
END_TEST

/* --------------------------------------------------------------------- main */

static Suite *cuda_suite(void)
{
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("cuda_vs_cpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_memory);
    tcase_add_test(tc, test_memory_pool);
    tcase_add_test(tc, test_matmul_forward);
    tcase_add_test(tc, test_matmul_backward);
    tcase_add_test(tc, test_layernorm);
    tcase_add_test(tc, test_gelu);
    tcase_add_test(tc, test_attention);
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_crossentropy);
    tcase_add_test(tc, test_residual_accumulate);
    tcase_add_test(tc, test_sums);
    tcase_add_test(tc, test_adamw);
    tcase_add_test(tc, test_nccl_one_rank);
    tcase_add_test(tc, test_nccl_many_in_flight);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count <= 0) {
        printf("SKIP: no CUDA device (%s)\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount returned 0");
        return 77;
    }
    /* CUDA_CHECK failures call MPI_Abort, and the NCCL test bootstraps over MPI */
    MPI_Init(NULL, NULL);
    const char *tf32 = getenv("OSDP_CUDA_TF32");
    if (tf32 && tf32[0] && strcmp(tf32, "0") != 0) gemm_rtol = gemm_atol = 1e-2;
    cpu->init(0, 1);
    if (gpu->init(0, 1) != OSDP_OK) {
        fprintf(stderr, "cuda init failed: %s\n", osdp_error_message());
        MPI_Finalize();
        return 1;
    }
    SRunner *sr = srunner_create(cuda_suite());
    /* a CUDA context does not survive fork(): run the tests in this process */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    MPI_Finalize();
    return failed == 0 ? 0 : 1;
}

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
 * The bf16 table (osdp_compute_cuda_bf16) runs against the CPU bf16 table
 * (osdp_compute_cpu_bf16) on the same bf16 weights, made from fp32 values by
 * the CPU table's convert_weights, and the same fp32 activations.  The CPU
 * table widens the weights and multiplies in fp32; the GPU also rounds x and
 * dy to bf16 before its tensor-core products, so the matrix products are
 * allowed BF16_TOL = 2e-2 of the output's largest entry (the rounding of x
 * and dy, 2^-9 relative per element, moves a product by far less).  Where
 * every inner dimension is at most TIGHT_MAX_K the products are also checked
 * against the CPU table run on x and dy rounded to bf16 on the host (the
 * same operands, only the order and rounding of the fp32 sums differ) within
 * BF16_SAME_TOL = 1e-3, which catches a misplaced operand or a lost chunk
 * the loose check might forgive.  Layernorm and the embedding read widened weights and round no
 * activations: they must agree as the fp32 kernels do (the embedding
 * bitwise); db (fp32 column sums of dy) too.  convert_weights must give the
 * bits of osdp_bf16_from_float.  Large cases run the products in several
 * chunks of the bounded bf16 staging.
 *
 * Layernorm runs at a small shape and at GPT-2's C = 768 over 4096 rows
 * (the GPU's two-pass dw/db sums in 32 chunks).  The allocator is checked
 * for stream-ordered reuse (a block freed behind queued work and handed out
 * again), the NCCL backend for more requests in flight than it has slots.
 *
 * The tiled attention (--attention tiled) runs against the CPU's tiled
 * kernels: output, log-sum-exp, d(qkv) and rowdot within RTOL / ATOL on the
 * fp32 table; on the bf16 table (Q, K, V, dO rounded to bf16 in the tiles,
 * fp32 arithmetic) within BF16_SAME_TOL of the CPU run on the same rounded
 * operands and BF16_TOL of the CPU on the fp32 ones; its tensor-core form
 * (OSDP_CUDA_ATTENTION_MMA) within MMA_TOL (run_attention_mma says why).
 * cuBLASLt's epilogues (OSDP_CUDA_LT_EPILOGUES) against the unfused path:
 * run_lt_epilogues and run_lt_backward.  The fused head's two
 * kernels (log-sum-exp and loss; d(logits) from the log-sum-exp) run against
 * the CPU's within RTOL / ATOL, padding columns exactly 0.
 *
 * Without a usable GPU the test prints "SKIP: no CUDA device (reason)" and
 * exits 77, automake's code for a skipped test. */
#include "config.h"
#include "osdp/comm.h"
#include "osdp/compute.h"
#include "osdp/dtype.h"
#include "osdp/gpt.h"
#include "osdp/layout.h"
#include "osdp/model_config.h"

#include "check_main.h"
#include "cuda/attention_switch.h"
#include "cuda/lt_epilogues.h"

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
#define BF16_TOL 2e-2
#define BF16_SAME_TOL 1e-3
#define TIGHT_MAX_K 2048

static const osdp_compute_backend *cpu = &osdp_compute_cpu;
static const osdp_compute_backend *gpu = &osdp_compute_cuda;
static const osdp_compute_backend *cpu16 = &osdp_compute_cpu_bf16;
static const osdp_compute_backend *gpu16 = &osdp_compute_cuda_bf16;
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

/* bf16 helpers: weights made by the CPU table's convert_weights; x rounded
 * through bf16 on the host (the operand the GPU multiplies) */
static uint16_t *bf16_weights(const float *w, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    ck_assert_msg(h != NULL, "out of host memory");
    cpu16->convert_weights(h, w, n);
    return h;
}

static void *upb(const uint16_t *h, size_t n) { return up(h, n * sizeof *h); }

static float *bf16_rounded(const float *x, size_t n)
{
    float *r = falloc(n);
    for (size_t i = 0; i < n; i++) r[i] = osdp_bf16_to_float(osdp_bf16_from_float(x[i]));
    return r;
}

static float *fcopy(const float *a, size_t n)
{
    float *c = falloc(n);
    memcpy(c, a, n * sizeof *c);
    return c;
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
    /* alloc does not fill (compute.h: contents undefined); the new owner's
     * writes, queued after the work that read the old owner's data, must
     * not reach that work */
    gpu->fill_zero(c, n * sizeof(float));
    float *zero = falloc(n);
    memset(zero, 0, n * sizeof(float));
    expect_bitwise("new block after fill_zero", zero, c, n);
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

/* the products with the weight stored (OC, IC) (a tied head's, on wte), fp32
 * and bf16 tables against the CPU's: forward (overwrite, accumulate), backward
 * (dx accumulated or not, dw accumulated) */
static void run_matmul_out_in(int bf16, int BT, int IC, int OC, int acc, uint64_t seed)
{
    const osdp_compute_backend *c = bf16 ? cpu16 : cpu, *g = bf16 ? gpu16 : gpu;
    const double rtol = bf16 ? 0.0 : gemm_rtol, atol = bf16 ? BF16_TOL : gemm_atol;
    const size_t nx = (size_t)BT * IC, nw = (size_t)OC * IC, ny = (size_t)BT * OC;
    float *x = rand_floats(nx, -1, 1, seed), *wf = rand_floats(nw, -0.5f, 0.5f, seed + 1);
    float *dy = rand_floats(ny, -1, 1, seed + 2), *y = rand_floats(ny, -1, 1, seed + 3);
    float *dx = rand_floats(nx, -1, 1, seed + 4), *dw = rand_floats(nw, -1, 1, seed + 5);
    uint16_t *wb = bf16_weights(wf, nw);
    const void *w = bf16 ? (const void *)wb : (const void *)wf;
    void *g_w = bf16 ? upb(wb, nw) : (void *)upf(wf, nw);
    float *g_x = upf(x, nx), *g_dy = upf(dy, ny), *g_y = upf(y, ny), *g_dx = upf(dx, nx), *g_dw = upf(dw, nw);
    c->matmul_forward_out_in(y, x, w, BT, IC, OC, acc);
    g->matmul_forward_out_in(g_y, g_x, g_w, BT, IC, OC, acc);
    expect_close_tol(bf16 ? "bf16 matmul_forward_out_in y" : "matmul_forward_out_in y", y, g_y, ny, rtol, atol);
    c->matmul_backward_out_in(dx, dw, dy, x, w, BT, IC, OC, acc);
    g->matmul_backward_out_in(g_dx, g_dw, g_dy, g_x, g_w, BT, IC, OC, acc);
    expect_close_tol(bf16 ? "bf16 matmul_backward_out_in dx" : "matmul_backward_out_in dx", dx, g_dx, nx, rtol, atol);
    expect_close_tol(bf16 ? "bf16 matmul_backward_out_in dw" : "matmul_backward_out_in dw", dw, g_dw, nw, rtol, atol);
    gpu->free(g_w), gpu->free(g_x), gpu->free(g_dy), gpu->free(g_y), gpu->free(g_dx), gpu->free(g_dw);
    free(x), free(wf), free(dy), free(y), free(dx), free(dw), free(wb);
}

START_TEST(test_matmul_out_in)
{
    for (int bf16 = 0; bf16 < 2; bf16++) {
        run_matmul_out_in(bf16, 37, 45, 29, 0, 30);
        run_matmul_out_in(bf16, 64, 32, 256, 1, 31);   /* the head's shape: (BT, d) x wte^T (V, d) */
    }
    /* the tied head at a size whose dy rows take several chunks of the bf16 staging: dw (V, d) in column
     * slices of one product each (issue 30) */
    run_matmul_out_in(1, 2048, 48, 20011, 1, 32);
}
END_TEST

/* --------------------------------------------------------------- layernorm */

/* the CPU table's layernorm against the GPU table's of the same weight type:
 * forward, then backward from the CPU's saved statistics (so only the
 * backward is compared), twice on the GPU (run to run the same bits) */
/* expect_close / expect_same_device with the label "<tag> <name>" */
static void expect_close_as(const char *tag, const char *name, const float *ref, const float *d, size_t n)
{
    char what[160];
    snprintf(what, sizeof what, "%s %s", tag, name);
    expect_close(what, ref, d, n);
}

static void expect_same_as(const char *tag, const char *name, const float *d1, const float *d2, size_t n)
{
    char what[160];
    snprintf(what, sizeof what, "%s %s", tag, name);
    expect_same_device(what, d1, d2, n);
}

/* The fused residual + LayerNorm (the device's one kernel, a warp per row)
 * against the CPU's: res = x + r bitwise (one fp32 addition either way), ln,
 * mean, rstd within expect_close's tolerance; in place (res aliasing a, as
 * gpt_ops.c calls it) the same bits as out of place, and run twice the same
 * bits.  w, b: the table's weights on the host, g_w, g_b on the device. */
static void check_residual_layernorm(const osdp_compute_backend *c, const osdp_compute_backend *d, uint64_t seed,
                                     const float *x, const void *w, const void *b, const void *g_w, const void *g_b,
                                     int BT, int C)
{
    const char *tag = d->weight_dtype == OSDP_BFLOAT16 ? "bf16 residual+layernorm" : "residual+layernorm";
    const size_t n = (size_t)BT * C;
    float *r = rand_floats(n, -1, 1, seed), *res = nan_floats(n), *y = nan_floats(n);
    float *mean = nan_floats(BT), *rstd = nan_floats(BT);
    float *g_x = upf(x, n), *g_r = upf(r, n), *g_res = upf(res, n), *g_y = upf(y, n), *g_y2 = upf(y, n);
    float *g_mean = upf(mean, BT), *g_rstd = upf(rstd, BT);
    c->residual_layernorm_forward(res, y, mean, rstd, x, r, w, b, BT, C);
    d->residual_layernorm_forward(g_res, g_y, g_mean, g_rstd, g_x, g_r, g_w, g_b, BT, C);
    expect_bitwise(tag, res, g_res, n);
    expect_close_as(tag, "y", y, g_y, n);
    expect_close_as(tag, "mean", mean, g_mean, BT);
    expect_close_as(tag, "rstd", rstd, g_rstd, BT);
    d->residual_layernorm_forward(g_x, g_y2, g_mean, g_rstd, g_x, g_r, g_w, g_b, BT, C);   /* res aliases a */
    expect_bitwise(tag, res, g_x, n);
    expect_same_as(tag, "y (in place, rerun)", g_y, g_y2, n);
    float *bufs[] = {g_x, g_r, g_res, g_y, g_y2, g_mean, g_rstd};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) d->free(bufs[i]);
    free(r), free(res), free(y), free(mean), free(rstd);
}

/* BT x C: small (one chunk of the GPU's two-pass dw/db sums), or GPT-2's
 * C = 768 over 4096 rows (32 chunks); the fused residual + LayerNorm on the
 * same sizes */
static void check_layernorm(const osdp_compute_backend *c, const osdp_compute_backend *d, uint64_t seed, int BT,
                            int C)
{
    const int bf16 = d->weight_dtype == OSDP_BFLOAT16;
    const size_t n = (size_t)BT * C, wsize = bf16 ? sizeof(uint16_t) : sizeof(float);
    const char *tag = bf16 ? "bf16 layernorm" : "layernorm";
    float *x = rand_floats(n, -2, 2, seed), *wf = rand_floats(C, 0.5f, 1.5f, seed + 1), *bf = rand_floats(C, -1, 1, seed + 2);
    /* the weights as the tables read them: fp32, or bf16 made by the CPU table */
    void *w = malloc(C * wsize), *b = malloc(C * wsize);
    ck_assert(w && b);
    if (bf16) {
        c->convert_weights(w, wf, C);
        c->convert_weights(b, bf, C);
    } else {
        memcpy(w, wf, C * wsize);
        memcpy(b, bf, C * wsize);
    }
    float *y = nan_floats(n), *mean = nan_floats(BT), *rstd = nan_floats(BT);
    float *g_x = upf(x, n), *g_y = upf(y, n), *g_mean = upf(mean, BT), *g_rstd = upf(rstd, BT);
    void *g_w = up(w, C * wsize), *g_b = up(b, C * wsize);
    c->layernorm_forward(y, mean, rstd, x, w, b, BT, C);
    d->layernorm_forward(g_y, g_mean, g_rstd, g_x, g_w, g_b, BT, C);
    expect_close_as(tag, "y", y, g_y, n);
    expect_close_as(tag, "mean", mean, g_mean, BT);
    expect_close_as(tag, "rstd", rstd, g_rstd, BT);
    check_residual_layernorm(c, d, seed + 7, x, w, b, g_w, g_b, BT, C);

    float *dy = rand_floats(n, -1, 1, seed + 3), *dx = rand_floats(n, -1, 1, seed + 4);
    float *dw = rand_floats(C, -1, 1, seed + 5), *db = rand_floats(C, -1, 1, seed + 6);
    float *g_dy = upf(dy, n), *g_dx = upf(dx, n), *g_dw = upf(dw, C), *g_db = upf(db, C);
    float *g_dx2 = upf(dx, n), *g_dw2 = upf(dw, C), *g_db2 = upf(db, C);
    d->to_device(g_mean, mean, BT * sizeof(float));
    d->to_device(g_rstd, rstd, BT * sizeof(float));
    c->layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, BT, C);
    d->layernorm_backward(g_dx, g_dw, g_db, g_dy, g_x, g_w, g_mean, g_rstd, BT, C);
    d->layernorm_backward(g_dx2, g_dw2, g_db2, g_dy, g_x, g_w, g_mean, g_rstd, BT, C);
    expect_close_as(tag, "dx", dx, g_dx, n);
    expect_close_as(tag, "dw", dw, g_dw, C);
    expect_close_as(tag, "db", db, g_db, C);
    expect_same_as(tag, "dx (rerun)", g_dx, g_dx2, n);
    expect_same_as(tag, "dw (rerun)", g_dw, g_dw2, C);
    float *bufs[] = {g_x, g_y, g_mean, g_rstd, g_dy, g_dx, g_dw, g_db, g_dx2, g_dw2, g_db2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) d->free(bufs[i]);
    d->free(g_w), d->free(g_b);
    free(x), free(wf), free(bf), free(w), free(b), free(y), free(mean), free(rstd);
    free(dy), free(dx), free(dw), free(db);
}

START_TEST(test_layernorm)
{
    check_layernorm(cpu, gpu, 30, 45, 72);
    check_layernorm(cpu, gpu, 31, 4096, 768);
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

/* the CPU's fp32 attention against table d's; the bf16 table runs the
 * products on TF32 tensor cores: 1e-2, as for OSDP_CUDA_TF32=1 */
static void run_attention(const osdp_compute_backend *d, int B, int T, int C, int NH, uint64_t seed)
{
    const double tol = d == gpu16 ? 1e-2 : gemm_rtol, atol = d == gpu16 ? 1e-2 : gemm_atol;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = rand_floats(nqkv, -1, 1, seed), *out = nan_floats(nout), *att = nan_floats(natt);
    float *g_qkv = upf(qkv, nqkv), *g_out = upf(out, nout), *g_att = upf(att, natt);
    cpu->attention_forward(out, att, qkv, B, T, C, NH);
    d->attention_forward(g_out, g_att, g_qkv, B, T, C, NH);
    expect_close_tol("attention att", att, g_att, natt, tol, atol);
    expect_close_tol("attention out", out, g_out, nout, tol, atol);
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
    d->attention_backward(g_dqkv, g_scratch, g_dout, g_qkv, g_att, B, T, C, NH);
    expect_close_tol("attention dqkv", dqkv, g_dqkv, nqkv, tol, atol);
    d->attention_backward(g_dqkv2, g_scratch, g_dout, g_qkv, g_att, B, T, C, NH);
    expect_same_device("attention dqkv (rerun)", g_dqkv, g_dqkv2, nqkv);
    gpu->free(g_qkv), gpu->free(g_out), gpu->free(g_att), gpu->free(g_dout), gpu->free(g_dqkv);
    gpu->free(g_scratch), gpu->free(g_dqkv2);
    free(qkv), free(out), free(att), free(dout), free(dqkv), free(scratch);
}

START_TEST(test_attention)
{
    run_attention(gpu, 2, 13, 24, 3, 50);
    run_attention(gpu, 3, 70, 64, 4, 51);   /* rows longer than a warp, T not a multiple of 32 */
    run_attention(gpu, 1, 1, 8, 2, 52);
}
END_TEST

START_TEST(test_bf16_attention)
{
    run_attention(gpu16, 3, 70, 64, 4, 53);
    run_attention(gpu16, 2, 13, 24, 3, 54);
    /* and the handle is back in its own mode after: fp32 products stay fp32 */
    run_attention(gpu, 2, 13, 24, 3, 55);
}
END_TEST

/* ---------------------------------------------------- the tiled attention */

/* Table d's tiled attention (--attention tiled) against the CPU's on the same
 * inputs: the output and the log-sum-exp (B,NH,T) of the forward; d(qkv) and
 * rowdot of the backward, run alone on the CPU's output and lse, into
 * NaN-filled buffers (every entry overwritten); the backward twice, bitwise
 * the same.  fp32 table: RTOL / ATOL (summation orders and expf differ).
 * bf16 table (Q, K, V and dO rounded to bf16 as the tiles load, fp32
 * arithmetic): against the CPU on the fp32 inputs within BF16_TOL of the
 * largest entry, and against the CPU run on qkv and dout rounded to bf16 on
 * the host (the same operands) within BF16_SAME_TOL. */
static void run_attention_tiled(const osdp_compute_backend *d, int B, int T, int C, int NH, uint64_t seed)
{
    const int bf16 = d == gpu16;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = rand_floats(nqkv, -1, 1, seed), *dout = rand_floats(nout, -1, 1, seed + 1);
    /* the reference: the CPU on the operands the GPU multiplies */
    float *rqkv = bf16 ? bf16_rounded(qkv, nqkv) : fcopy(qkv, nqkv);
    float *rdout = bf16 ? bf16_rounded(dout, nout) : fcopy(dout, nout);
    float *out = nan_floats(nout), *lse = nan_floats(nlse), *dqkv = nan_floats(nqkv), *rowdot = nan_floats(nlse);
    float *g_qkv = upf(qkv, nqkv), *g_dout = upf(dout, nout), *g_out = upf(out, nout), *g_lse = upf(lse, nlse);
    float *g_dqkv = upf(dqkv, nqkv), *g_dqkv2 = upf(dqkv, nqkv), *g_rowdot = upf(rowdot, nlse);
    const double rtol = bf16 ? BF16_SAME_TOL : RTOL, atol = bf16 ? BF16_SAME_TOL : ATOL;
    const char *name = bf16 ? "cuda bf16" : "cuda fp32";
    char what[160];

    cpu->attention_forward_tiled(out, lse, rqkv, B, T, C, NH);
    d->attention_forward_tiled(g_out, g_lse, g_qkv, B, T, C, NH);
    snprintf(what, sizeof what, "%s tiled attention out (B %d T %d C %d NH %d)", name, B, T, C, NH);
    expect_close_tol(what, out, g_out, nout, rtol, atol);
    snprintf(what, sizeof what, "%s tiled attention lse (B %d T %d C %d NH %d)", name, B, T, C, NH);
    expect_close_tol(what, lse, g_lse, nlse, rtol, atol);

    gpu->to_device(g_out, out, nout * sizeof(float));   /* the backward alone, on the CPU's forward */
    gpu->to_device(g_lse, lse, nlse * sizeof(float));
    cpu->attention_backward_tiled(dqkv, rowdot, rdout, out, rqkv, lse, B, T, C, NH);
    d->attention_backward_tiled(g_dqkv, g_rowdot, g_dout, g_out, g_qkv, g_lse, B, T, C, NH);
    snprintf(what, sizeof what, "%s tiled attention dqkv (B %d T %d C %d NH %d)", name, B, T, C, NH);
    expect_close_tol(what, dqkv, g_dqkv, nqkv, rtol, atol);
    snprintf(what, sizeof what, "%s tiled attention rowdot (B %d T %d C %d NH %d)", name, B, T, C, NH);
    expect_close_tol(what, rowdot, g_rowdot, nlse, rtol, atol);
    d->attention_backward_tiled(g_dqkv2, g_rowdot, g_dout, g_out, g_qkv, g_lse, B, T, C, NH);
    expect_same_device("tiled attention dqkv (rerun)", g_dqkv, g_dqkv2, nqkv);

    if (bf16) {   /* and the loose check against the CPU on the unrounded inputs */
        float *out32 = nan_floats(nout), *lse32 = nan_floats(nlse), *dqkv32 = nan_floats(nqkv);
        cpu->attention_forward_tiled(out32, lse32, qkv, B, T, C, NH);
        cpu->attention_backward_tiled(dqkv32, rowdot, dout, out32, qkv, lse32, B, T, C, NH);
        d->attention_forward_tiled(g_out, g_lse, g_qkv, B, T, C, NH);
        d->attention_backward_tiled(g_dqkv, g_rowdot, g_dout, g_out, g_qkv, g_lse, B, T, C, NH);
        expect_close_tol("bf16 tiled attention out vs fp32", out32, g_out, nout, 0, BF16_TOL);
        expect_close_tol("bf16 tiled attention lse vs fp32", lse32, g_lse, nlse, 0, BF16_TOL);
        expect_close_tol("bf16 tiled attention dqkv vs fp32", dqkv32, g_dqkv, nqkv, 0, BF16_TOL);
        free(out32), free(lse32), free(dqkv32);
    }
    gpu->free(g_qkv), gpu->free(g_dout), gpu->free(g_out), gpu->free(g_lse), gpu->free(g_dqkv);
    gpu->free(g_dqkv2), gpu->free(g_rowdot);
    free(qkv), free(dout), free(rqkv), free(rdout), free(out), free(lse), free(dqkv), free(rowdot);
}

/* Shapes: head sizes 8, 16, 64 (GPT-2's) and 128; T of one partial tile, of
 * several with a partial last one (70, 100), and of exactly whole tiles
 * (64); T = 1.  And the tiled GPU attention against the naive GPU one on
 * GPT-2's head shape: the same output. */
static void attention_tiled_shapes(const osdp_compute_backend *d, uint64_t seed)
{
    run_attention_tiled(d, 2, 13, 24, 3, seed);
    run_attention_tiled(d, 3, 70, 64, 4, seed + 2);
    run_attention_tiled(d, 2, 64, 128, 2, seed + 4);
    run_attention_tiled(d, 1, 100, 256, 2, seed + 6);
    run_attention_tiled(d, 1, 1, 8, 2, seed + 8);
}

START_TEST(test_attention_tiled)
{
    attention_tiled_shapes(gpu, 300);
    /* the two GPU paths agree: tiled against naive (fp32 table) */
    const int B = 2, T = 96, C = 128, NH = 2;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = rand_floats(nqkv, -1, 1, 320), *naive = falloc(nout);
    float *g_qkv = upf(qkv, nqkv), *g_out = gpu->alloc(nout * sizeof(float)), *g_att = gpu->alloc(natt * sizeof(float));
    float *g_tiled = gpu->alloc(nout * sizeof(float)), *g_lse = gpu->alloc((size_t)B * NH * T * sizeof(float));
    gpu->attention_forward(g_out, g_att, g_qkv, B, T, C, NH);
    gpu->to_host(naive, g_out, nout * sizeof(float));
    gpu->attention_forward_tiled(g_tiled, g_lse, g_qkv, B, T, C, NH);
    expect_close_tol("tiled vs naive attention out (cuda)", naive, g_tiled, nout, gemm_rtol, gemm_atol);
    gpu->free(g_qkv), gpu->free(g_out), gpu->free(g_att), gpu->free(g_tiled), gpu->free(g_lse);
    free(qkv), free(naive);
}
END_TEST

START_TEST(test_bf16_attention_tiled)
{
    attention_tiled_shapes(gpu16, 400);
}
END_TEST

/* The bf16 tiled attention with its tile products on tensor cores (OSDP_CUDA_ATTENTION_MMA,
 * osdp_cuda_set_attention_mma) against the CPU's tiled attention on the operands rounded to bf16 and against
 * the CUDA-core bf16 kernels on the same inputs: lse and rowdot within BF16_SAME_TOL (the scores are exact
 * bf16 products summed in fp32; rowdot is the same kernel); out and dqkv within MMA_TOL relative + MMA_TOL of
 * the largest entry (the tensor-core kernels round P and dS to bf16 before the products that read them:
 * 2^-9 relative per entry).  The backward runs on the CPU's forward, twice (the same bits).  The switch must
 * take effect where the head size is a multiple of 16 (osdp_cuda_attention_mma_launches: the forward and the
 * backward's two kernels), and elsewhere (head size 8) leave the CUDA-core kernels' bits. */
#define MMA_TOL 1e-2
static void run_attention_mma(int B, int T, int C, int NH, uint64_t seed)
{
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    const int HS = C / NH, tensor_cores = HS % 16 == 0;
    float *qkv = rand_floats(nqkv, -2, 2, seed), *dout = rand_floats(nout, -1, 1, seed + 1);
    float *rqkv = bf16_rounded(qkv, nqkv), *rdout = bf16_rounded(dout, nout);
    float *out = nan_floats(nout), *lse = nan_floats(nlse), *dqkv = nan_floats(nqkv), *rowdot = nan_floats(nlse);
    cpu->attention_forward_tiled(out, lse, rqkv, B, T, C, NH);
    cpu->attention_backward_tiled(dqkv, rowdot, rdout, out, rqkv, lse, B, T, C, NH);
    float *g_qkv = upf(qkv, nqkv), *g_dout = upf(dout, nout), *g_cout = upf(out, nout), *g_clse = upf(lse, nlse);
    float *nans = nan_floats(nqkv);   /* every output starts NaN: every entry must be written */
    float *g_out[2], *g_lse[2], *g_dqkv[2], *g_rowdot[2], *g_dqkv2 = upf(nans, nqkv);
    long launches[2];
    for (int k = 0; k < 2; k++) {   /* 0: the CUDA-core kernels, 1: tensor cores */
        g_out[k] = upf(nans, nout), g_lse[k] = upf(nans, nlse), g_dqkv[k] = upf(nans, nqkv);
        g_rowdot[k] = upf(nans, nlse);
        osdp_cuda_set_attention_mma(k);
        const long before = osdp_cuda_attention_mma_launches();
        gpu16->attention_forward_tiled(g_out[k], g_lse[k], g_qkv, B, T, C, NH);
        gpu16->attention_backward_tiled(g_dqkv[k], g_rowdot[k], g_dout, g_cout, g_qkv, g_clse, B, T, C, NH);
        if (k) gpu16->attention_backward_tiled(g_dqkv2, g_rowdot[k], g_dout, g_cout, g_qkv, g_clse, B, T, C, NH);
        launches[k] = osdp_cuda_attention_mma_launches() - before;
    }
    osdp_cuda_set_attention_mma(0);
    char what[160];
    snprintf(what, sizeof what, "B %d T %d C %d NH %d", B, T, C, NH);
    ck_assert_msg(launches[0] == 0, "%s: %ld tensor-core launches with the switch off", what, launches[0]);
    ck_assert_msg(launches[1] == (tensor_cores ? 5 : 0), "%s: %ld tensor-core launches, want %d", what, launches[1],
                  tensor_cores ? 5 : 0);
    expect_close_tol("tensor-core attention out vs cpu", out, g_out[1], nout, MMA_TOL, MMA_TOL);
    expect_close_tol("tensor-core attention lse vs cpu", lse, g_lse[1], nlse, BF16_SAME_TOL, BF16_SAME_TOL);
    expect_close_tol("tensor-core attention dqkv vs cpu", dqkv, g_dqkv[1], nqkv, MMA_TOL, MMA_TOL);
    expect_close_tol("tensor-core attention rowdot vs cpu", rowdot, g_rowdot[1], nlse, BF16_SAME_TOL, BF16_SAME_TOL);
    expect_same_device("tensor-core attention dqkv (rerun)", g_dqkv[1], g_dqkv2, nqkv);
    float *c_out = down(g_out[0], nout), *c_lse = down(g_lse[0], nlse), *c_dqkv = down(g_dqkv[0], nqkv);
    if (tensor_cores) {
        expect_close_tol("tensor-core vs CUDA-core attention out", c_out, g_out[1], nout, MMA_TOL, MMA_TOL);
        expect_close_tol("tensor-core vs CUDA-core attention lse", c_lse, g_lse[1], nlse, BF16_SAME_TOL,
                         BF16_SAME_TOL);
        expect_close_tol("tensor-core vs CUDA-core attention dqkv", c_dqkv, g_dqkv[1], nqkv, MMA_TOL, MMA_TOL);
    } else {   /* the switch does not apply: the CUDA-core kernels ran both times */
        expect_bitwise("attention out, head size 8 (CUDA-core both times)", c_out, g_out[1], nout);
        expect_bitwise("attention dqkv, head size 8 (CUDA-core both times)", c_dqkv, g_dqkv[1], nqkv);
    }
    for (int k = 0; k < 2; k++) gpu->free(g_out[k]), gpu->free(g_lse[k]), gpu->free(g_dqkv[k]), gpu->free(g_rowdot[k]);
    gpu->free(g_qkv), gpu->free(g_dout), gpu->free(g_cout), gpu->free(g_clse), gpu->free(g_dqkv2);
    free(qkv), free(dout), free(rqkv), free(rdout), free(out), free(lse), free(dqkv), free(rowdot);
    free(c_out), free(c_lse), free(c_dqkv), free(nans);
}

START_TEST(test_bf16_attention_mma)
{
    run_attention_mma(2, 13, 24, 3, 420);      /* head size 8: not for tensor cores */
    run_attention_mma(3, 70, 64, 4, 421);      /* head size 16, a partial last tile */
    run_attention_mma(2, 64, 128, 2, 422);     /* GPT-2's head size 64, one whole tile */
    run_attention_mma(1, 100, 256, 2, 423);    /* head size 128 */
    run_attention_mma(1, 1, 32, 2, 424);       /* T 1 */
    run_attention_mma(2, 1024, 768, 12, 425);  /* GPT-2's attention at T 1024: 16 tiles of 64 */
}
END_TEST

/* ------------------------------------------------------------ the fused head */

/* crossentropy_lse and crossentropy_backward_lse (--head fused) against the
 * CPU's: the group's statistics of 1 and 3 ranks (the CPU's
 * crossentropy_stats of random logits, the last range partly padding and
 * one rank holding only padding), targets in and out of each range; losses
 * and lse within RTOL / ATOL, d(logits) too, the padding's exactly 0 */
static void run_fused_head(int ranges, int BT, int VL, int V, float scale, uint64_t seed)
{
    int *tgt = rand_ints(BT, V, seed), *g_tgt;
    tgt[0] = V - 1;
    g_tgt = up(tgt, BT * sizeof(int));
    const size_t nstats = (size_t)ranges * 3 * BT, nl = (size_t)BT * VL;
    float *group = falloc(nstats), *logits[3];
    for (int r = 0; r < ranges; r++) {
        const int lo = r * VL, valid = V - lo < 0 ? 0 : V - lo < VL ? V - lo : VL;
        logits[r] = rand_floats(nl, -6, 6, seed + 1 + r);
        cpu->crossentropy_stats(group + (size_t)r * 3 * BT, logits[r], tgt, BT, VL, valid, lo);
    }
    float *g_group = upf(group, nstats);
    float *losses = nan_floats(BT), *lse = nan_floats(BT), *g_losses = upf(losses, BT), *g_lse = upf(lse, BT);
    cpu->crossentropy_lse(losses, lse, group, BT, ranges);
    gpu->crossentropy_lse(g_losses, g_lse, g_group, BT, ranges);
    expect_close("fused head losses", losses, g_losses, BT);
    expect_close("fused head lse", lse, g_lse, BT);
    for (int r = 0; r < ranges; r++) {
        const int lo = r * VL, valid = V - lo < 0 ? 0 : V - lo < VL ? V - lo : VL;
        float *g_logits = upf(logits[r], nl);
        cpu->crossentropy_backward_lse(logits[r], lse, tgt, scale, BT, VL, valid, lo);
        gpu->crossentropy_backward_lse(g_logits, g_lse, g_tgt, scale, BT, VL, valid, lo);
        expect_close("fused head dlogits", logits[r], g_logits, nl);
        float *got = down(g_logits, nl);
        for (int i = 0; i < BT; i++)
            for (int j = valid; j < VL; j++) ck_assert_msg(got[(size_t)i * VL + j] == 0.0f, "fused head padding dlogit");
        gpu->free(g_logits);
        free(got), free(logits[r]);
    }
    gpu->free(g_tgt), gpu->free(g_group), gpu->free(g_losses), gpu->free(g_lse);
    free(tgt), free(group), free(losses), free(lse);
}

/* The bf16 table's head_backward_lse (d(logits) written in bf16, then the two
 * products) against the same table's unfused path (crossentropy_backward_lse,
 * then matmul_backward / matmul_backward_out_in, which round d(logits) to bf16
 * themselves): dln and dw (accumulated onto random values) within RTOL / ATOL,
 * lm_head (d, V) and tied wte (V, d), a padded vocabulary range, rows of one
 * sub-chunk and (V 8192: 4 MiB per 256 rows) several. */
static void run_head_backward_bf16(int rows, int d, int VL, int valid, int lo, int out_in, uint64_t seed)
{
    ck_assert(gpu16->head_backward_lse != NULL);
    const size_t nl = (size_t)rows * VL, nw = (size_t)d * VL, nx = (size_t)rows * d;
    int *tgt = rand_ints(rows, lo + VL + 5, seed), *g_tgt = up(tgt, rows * sizeof(int));
    float *logits = rand_floats(nl, -6, 6, seed + 1), *lse = rand_floats(rows, 6, 9, seed + 2);
    float *ln = rand_floats(nx, -2, 2, seed + 3), *wf = rand_floats(nw, -0.1f, 0.1f, seed + 4);
    float *dw0 = rand_floats(nw, -1, 1, seed + 5);
    void *w = malloc(nw * sizeof(uint16_t));
    ck_assert(w != NULL);
    cpu16->convert_weights(w, wf, nw);
    void *g_w = up(w, nw * sizeof(uint16_t));
    float *g_logits = upf(logits, nl), *g_logits2 = upf(logits, nl), *g_lse = upf(lse, rows), *g_ln = upf(ln, nx);
    float *g_dw = upf(dw0, nw), *g_dw2 = upf(dw0, nw), *g_dln = upf(ln, nx), *g_dln2 = upf(ln, nx);
    const float scale = 0.3f;
    gpu16->head_backward_lse(g_dln, g_dw, g_logits, g_lse, g_tgt, scale, g_ln, g_w, rows, d, VL, valid, lo, out_in);
    gpu16->crossentropy_backward_lse(g_logits2, g_lse, g_tgt, scale, rows, VL, valid, lo);
    if (out_in) gpu16->matmul_backward_out_in(g_dln2, g_dw2, g_logits2, g_ln, g_w, rows, d, VL, 0);
    else gpu16->matmul_backward(g_dln2, g_dw2, NULL, g_logits2, g_ln, g_w, rows, d, VL, 0);
    float *dln = down(g_dln2, nx), *dw = down(g_dw2, nw);
    expect_close(out_in ? "bf16 head backward (tied) dln" : "bf16 head backward dln", dln, g_dln, nx);
    expect_close(out_in ? "bf16 head backward (tied) dw" : "bf16 head backward dw", dw, g_dw, nw);
    float *bufs[] = {g_logits, g_logits2, g_lse, g_ln, g_dw, g_dw2, g_dln, g_dln2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu->free(bufs[i]);
    gpu->free(g_w), gpu->free(g_tgt);
    free(tgt), free(logits), free(lse), free(ln), free(wf), free(dw0), free(w), free(dln), free(dw);
}

START_TEST(test_bf16_head_backward)
{
    run_head_backward_bf16(37, 64, 384, 300, 0, 0, 530);      /* padded vocabulary, lm_head */
    run_head_backward_bf16(37, 64, 384, 300, 0, 1, 540);      /* the tied head's wte */
    run_head_backward_bf16(66, 48, 128, 100, 256, 0, 550);    /* a rank's range, partly padding */
    run_head_backward_bf16(5000, 96, 8192, 8192, 0, 0, 560);  /* several sub-chunks of the staging */
    ck_assert(gpu->head_backward_lse == NULL);                /* the fp32 table: the CPU's three calls */
}
END_TEST

START_TEST(test_fused_head)
{
    run_fused_head(1, 37, 384, 300, 0.25f, 500);   /* one rank, a padded vocabulary */
    run_fused_head(3, 66, 128, 300, 0.37f, 510);   /* three ranks, the last one partly padding */
    run_fused_head(3, 20, 128, 200, 1.0f, 520);    /* the third rank only padding */
    ck_assert(gpu16->crossentropy_lse == gpu->crossentropy_lse);
    ck_assert(gpu16->crossentropy_backward_lse == gpu->crossentropy_backward_lse);
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

/* logit gaps beyond fp32 exp's range (89, the 1238.2 of a real run, 1e4):
 * the loss is max + log-sum-exp - target logit on both backends, finite */
START_TEST(test_crossentropy_large_gap)
{
    const int BT = 3, V = 1000;
    const float gaps[3] = {89.0f, 1238.2f, 1.0e4f};
    float *logits = rand_floats((size_t)BT * V, -4, 4, 72), *losses = nan_floats(BT);
    int tgt[3] = {3, 500, 999};
    for (int i = 0; i < BT; i++) logits[(size_t)i * V + tgt[i]] = -gaps[i];
    float *g_probs = upf(logits, (size_t)BT * V), *g_losses = upf(losses, BT);
    int *g_tgt = up(tgt, sizeof tgt);
    cpu->crossentropy_forward(losses, logits, tgt, BT, V);
    gpu->crossentropy_forward(g_losses, g_probs, g_tgt, BT, V);
    float *got = down(g_losses, BT);
    for (int i = 0; i < BT; i++) {
        ck_assert_msg(isfinite(losses[i]) && isfinite(got[i]), "gap %g: losses cpu %g, cuda %g", (double)gaps[i],
                      (double)losses[i], (double)got[i]);
        ck_assert_msg(losses[i] > gaps[i], "gap %g: cpu loss %g below the gap", (double)gaps[i], (double)losses[i]);
    }
    expect_close("crossentropy losses (large gaps)", losses, g_losses, BT);
    gpu->free(g_probs), gpu->free(g_losses), gpu->free(g_tgt);
    free(logits), free(losses), free(got);
}
END_TEST

/* The vocab-parallel entries: a vocabulary of V cut in ranges of VL, the
 * last partly padding, each range through both backends.  The lookups and
 * the embedding backward (the CPU's order) must match bitwise; the
 * statistics, losses, probabilities and d(logits) as the fp32 kernels do;
 * the padding's probabilities and d(logits) are exactly 0.  GPT-2's width
 * (C = 768) gives the embedding backward several column blocks per token. */
START_TEST(test_vocab_parallel)
{
    const int B = 2, T = 33, C = 768, V = 300, VL = 128, ranges = 3, BT = B * T;
    int *tok = rand_ints(BT, V, 90), *g_tok = up(tok, BT * sizeof(int));
    int *tgt = rand_ints(BT, V, 91), *g_tgt = up(tgt, BT * sizeof(int));
    tgt[0] = V - 1;
    gpu->to_device(g_tgt, tgt, BT * sizeof(int));
    float *wpe = rand_floats((size_t)T * C, -1, 1, 92), *g_wpe = upf(wpe, (size_t)T * C);
    float *dx = rand_floats((size_t)BT * C, -1, 1, 93), *g_dx = upf(dx, (size_t)BT * C);
    float *group = falloc((size_t)ranges * 3 * BT), *g_group = upf(group, (size_t)ranges * 3 * BT);
    float *logits[3], *g_logits[3];
    for (int r = 0; r < ranges; r++) {
        const int lo = r * VL, valid = V - lo < VL ? V - lo : VL;
        float *wte = rand_floats((size_t)VL * C, -1, 1, 94 + r), *g_wte = upf(wte, (size_t)VL * C);
        float *x = nan_floats((size_t)BT * C), *g_x = upf(x, (size_t)BT * C);
        cpu->embedding_forward_range(x, tok, wte, r == 0 ? wpe : NULL, B, T, C, lo, VL);
        gpu->embedding_forward_range(g_x, g_tok, g_wte, r == 0 ? g_wpe : NULL, B, T, C, lo, VL);
        expect_bitwise("embedding range x", x, g_x, (size_t)BT * C);
        float *dpe = rand_floats((size_t)T * C, -1, 1, 97), *g_dpe = upf(dpe, (size_t)T * C);
        cpu->embedding_backward_range(wte, r == 1 ? dpe : NULL, dx, tok, B, T, C, lo, VL);
        gpu->embedding_backward_range(g_wte, r == 1 ? g_dpe : NULL, g_dx, g_tok, B, T, C, lo, VL);
        expect_bitwise("embedding range dwte", wte, g_wte, (size_t)VL * C);
        expect_bitwise("embedding range dwpe", dpe, g_dpe, (size_t)T * C);
        logits[r] = rand_floats((size_t)BT * VL, -4, 4, 98 + r);
        g_logits[r] = upf(logits[r], (size_t)BT * VL);
        float *st = group + (size_t)r * 3 * BT;
        cpu->crossentropy_stats(st, logits[r], tgt, BT, VL, valid, lo);
        gpu->crossentropy_stats(g_group + (size_t)r * 3 * BT, g_logits[r], g_tgt, BT, VL, valid, lo);
        expect_close("crossentropy statistics", st, g_group + (size_t)r * 3 * BT, 3 * (size_t)BT);
        gpu->free(g_wte), gpu->free(g_x), gpu->free(g_dpe);
        free(wte), free(x), free(dpe);
    }
    /* both finish from the CPU's statistics: the same input */
    gpu->to_device(g_group, group, (size_t)ranges * 3 * BT * sizeof(float));
    for (int r = 0; r < ranges; r++) {
        const int lo = r * VL, valid = V - lo < VL ? V - lo : VL;
        float *losses = nan_floats(BT), *g_losses = upf(losses, BT);
        cpu->crossentropy_finish(losses, logits[r], group, BT, VL, valid, ranges);
        gpu->crossentropy_finish(g_losses, g_logits[r], g_group, BT, VL, valid, ranges);
        expect_close("crossentropy range losses", losses, g_losses, BT);
        expect_close("crossentropy range probs", logits[r], g_logits[r], (size_t)BT * VL);
        gpu->to_device(g_logits[r], logits[r], (size_t)BT * VL * sizeof(float));
        cpu->crossentropy_backward_range(logits[r], logits[r], tgt, 0.37f, BT, VL, lo);
        gpu->crossentropy_backward_range(g_logits[r], g_logits[r], g_tgt, 0.37f, BT, VL, lo);
        expect_close("crossentropy range dlogits", logits[r], g_logits[r], (size_t)BT * VL);
        float *got = down(g_logits[r], (size_t)BT * VL);
        for (int i = 0; i < BT; i++)
            for (int j = valid; j < VL; j++) ck_assert_msg(got[(size_t)i * VL + j] == 0.0f, "padding dlogit");
        gpu->free(g_losses), gpu->free(g_logits[r]);
        free(losses), free(logits[r]), free(got);
    }
    ck_assert_int_eq(gpu->vocab_quantum, 128);
    ck_assert_int_eq(gpu16->vocab_quantum, 128);
    gpu->free(g_tok), gpu->free(g_tgt), gpu->free(g_wpe), gpu->free(g_dx), gpu->free(g_group);
    free(tok), free(tgt), free(wpe), free(dx), free(group);
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
        /* accumulate_sum: the same sums added to device doubles, read once */
        double acc[2] = {1.5, -2.0}, *g_acc = up(acc, sizeof acc);
        gpu->accumulate_sum(&g_acc[0], g_x, n, 0);
        gpu->accumulate_sum(&g_acc[0], g_x, n, 0);
        gpu->accumulate_sum(&g_acc[1], g_x, n, 1);
        gpu->to_host(acc, g_acc, sizeof acc);
        ck_assert_msg(acc[0] == (1.5 + s_gpu) + s_gpu, "accumulate_sum n=%zu: %.17g", n, acc[0]);
        ck_assert_msg(acc[1] == -2.0 + q_gpu, "accumulate_sum squares n=%zu: %.17g", n, acc[1]);
        double cacc = 1.5;
        cpu->accumulate_sum(&cacc, x, n, 0);
        ck_assert(cacc == 1.5 + s_cpu);
        gpu->free(g_acc);
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

/* ------------------------------------------------------------ bf16 weights */

START_TEST(test_tables)
{
    ck_assert(osdp_compute_find("cuda", OSDP_FLOAT32) == &osdp_compute_cuda);
    ck_assert(osdp_compute_find("cuda", OSDP_BFLOAT16) == &osdp_compute_cuda_bf16);
    ck_assert(osdp_compute_find("cpu", OSDP_BFLOAT16) == &osdp_compute_cpu_bf16);
    ck_assert(gpu->weight_dtype == OSDP_FLOAT32 && gpu->convert_weights == NULL);
    ck_assert(gpu16->weight_dtype == OSDP_BFLOAT16 && gpu16->convert_weights != NULL);
    ck_assert_str_eq(gpu16->name, "cuda");
    /* the entries that read no weights are the fp32 table's */
    ck_assert(gpu16->init == gpu->init && gpu16->alloc == gpu->alloc && gpu16->free == gpu->free);
    ck_assert(gpu16->fill_zero == gpu->fill_zero && gpu16->copy == gpu->copy);
    ck_assert(gpu16->to_device == gpu->to_device && gpu16->to_host == gpu->to_host);
    ck_assert(gpu16->synchronize == gpu->synchronize);
    ck_assert(gpu16->gelu_forward == gpu->gelu_forward && gpu16->gelu_backward == gpu->gelu_backward);
    /* attention: the same kernels, its products on TF32 tensor cores */
    ck_assert(gpu16->attention_forward != gpu->attention_forward);
    ck_assert(gpu16->attention_backward != gpu->attention_backward);
    /* the tiled attention: every table has it, bf16 tiles on the bf16 table */
    ck_assert(gpu->attention_forward_tiled && gpu->attention_backward_tiled);
    ck_assert(gpu16->attention_forward_tiled != gpu->attention_forward_tiled);
    ck_assert(gpu16->attention_backward_tiled != gpu->attention_backward_tiled);
    ck_assert(gpu16->embedding_backward == gpu->embedding_backward);
    ck_assert(gpu16->crossentropy_forward == gpu->crossentropy_forward);
    ck_assert(gpu16->crossentropy_backward == gpu->crossentropy_backward);
    ck_assert(gpu16->embedding_forward_range != gpu->embedding_forward_range);
    ck_assert(gpu16->embedding_backward_range == gpu->embedding_backward_range);
    ck_assert(gpu16->crossentropy_stats == gpu->crossentropy_stats);
    ck_assert(gpu16->crossentropy_finish == gpu->crossentropy_finish);
    ck_assert(gpu16->crossentropy_backward_range == gpu->crossentropy_backward_range);
    ck_assert(gpu16->residual_forward == gpu->residual_forward);
    /* the fused residual + LayerNorm reads weights: one per table */
    ck_assert(gpu->residual_layernorm_forward && gpu16->residual_layernorm_forward != gpu->residual_layernorm_forward);
    ck_assert(gpu16->vector_accumulate == gpu->vector_accumulate);
    ck_assert(gpu16->sum == gpu->sum && gpu16->sum_squares == gpu->sum_squares);
    ck_assert(gpu16->adamw == gpu->adamw);
}
END_TEST

START_TEST(test_bf16_convert)
{
    const size_t n = 100003;
    float *src = falloc(n);
    uint64_t s = 130;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)(rng_next(&s) >> 32);
        if ((u & 0x7f800000u) == 0x7f800000u) u &= 0xbfffffffu;   /* no NaN or infinity here */
        if (i % 7 == 0) u = (u & 0xffff0000u) | 0x8000u;          /* ties: to even */
        memcpy(&src[i], &u, sizeof u);
    }
    const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 1e-40f, -1e-40f, 1.17549435e-38f,
                             3.4028235e38f, -3.4028235e38f, INFINITY, -INFINITY, 1.00390625f,
                             1.01171875f, 65504.0f};
    memcpy(src, special, sizeof special);   /* the largest finite rounds up to infinity */
    uint16_t *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    ck_assert(want != NULL && got != NULL);
    for (size_t i = 0; i < n; i++) want[i] = osdp_bf16_from_float(src[i]);
    uint16_t *cpu_out = bf16_weights(src, n);
    ck_assert_msg(memcmp(cpu_out, want, n * sizeof *want) == 0, "cpu bf16 convert_weights");

    float *g_src = upf(src, n);
    uint16_t *g_dst = gpu->alloc(n * sizeof *g_dst);
    ck_assert(g_dst != NULL);
    gpu16->convert_weights(g_dst, g_src, n);
    gpu->to_host(got, g_dst, n * sizeof *got);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "convert_weights[%zu]: %.9g -> 0x%04x, want 0x%04x", i, src[i],
                      got[i], want[i]);

    /* at odd offsets (a shard inside a buffer), with the element before untouched */
    gpu->fill_zero(g_dst, n * sizeof *g_dst);
    gpu16->convert_weights(g_dst + 1, g_src + 3, n - 4);
    gpu->to_host(got, g_dst, n * sizeof *got);
    ck_assert_msg(got[0] == 0 && got[n - 3] == 0, "convert_weights wrote outside its range");
    for (size_t i = 0; i < n - 4; i++)
        ck_assert_msg(got[i + 1] == want[i + 3], "convert_weights at an offset [%zu]", i);

    /* NaN stays NaN (the payload may differ) */
    const float nans[2] = {NAN, -NAN};
    gpu->to_device(g_src, nans, sizeof nans);
    gpu16->convert_weights(g_dst, g_src, 2);
    gpu->to_host(got, g_dst, 2 * sizeof *got);
    ck_assert(isnan(osdp_bf16_to_float(got[0])) && isnan(osdp_bf16_to_float(got[1])));
    gpu16->convert_weights(g_dst, g_src, 0);   /* nothing to do */
    gpu->synchronize();
    gpu->free(g_src), gpu->free(g_dst);
    free(src), free(want), free(got), free(cpu_out);
}
END_TEST

/* the bf16 residual stream's entries (--residual-dtype bf16): residual_round gives the CPU bf16 table's
 * values bit for bit (ties to even, the largest finite to infinity), residual_widen the exact widening, and
 * the fp32 tables have neither */
START_TEST(test_bf16_residual)
{
    ck_assert(gpu->residual_round == NULL && gpu->residual_widen == NULL);
    ck_assert(gpu16->residual_round != NULL && gpu16->residual_widen != NULL);
    const size_t n = 65537;
    float *x = falloc(n), *want = falloc(n), *got = falloc(n);
    uint64_t s = 131;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)(rng_next(&s) >> 32);
        if ((u & 0x7f800000u) == 0x7f800000u) u &= 0xbfffffffu;
        if (i % 5 == 0) u = (u & 0xffff0000u) | 0x8000u;   /* ties */
        memcpy(&x[i], &u, sizeof u);
    }
    x[0] = 3.4028235e38f;
    x[1] = -0.0f;
    memcpy(want, x, n * sizeof *x);
    osdp_compute_cpu_bf16.residual_round(want, n);
    float *g = upf(x, n);
    gpu16->residual_round(g, n);
    gpu->to_host(got, g, n * sizeof *got);
    ck_assert_msg(memcmp(got, want, n * sizeof *got) == 0, "residual_round differs from the CPU bf16 table's");
    ck_assert(isinf(got[0]));
    /* narrowed (convert_weights) and widened back: the rounded values exactly */
    uint16_t *g16 = gpu->alloc(n * sizeof *g16);
    ck_assert(g16 != NULL);
    gpu16->convert_weights(g16, g, n);
    gpu->fill_zero(g, n * sizeof(float));
    gpu16->residual_widen(g, g16, n);
    gpu->to_host(got, g, n * sizeof *got);
    ck_assert_msg(memcmp(got, want, n * sizeof *got) == 0, "residual_widen(convert_weights(x)) is not x");
    gpu->free(g), gpu->free(g16);
    free(x), free(want), free(got);
}
END_TEST

/* the layout of a one-layer model of tiny's width (d 64) with bf16 activations, at T tokens; attention_naive:
 * the naive attention instead of the tiled one */
static void act_bf16_layout_as(osdp_layout *L, int T, int attention_naive)
{
    static const char text[] = "[model]\nname = t_act\nn_layer = 1\nn_head = 4\nn_embd = 64\nvocab = 256\nctx = 64\n";
    osdp_model_config cfg;
    ck_assert_msg(osdp_model_config_parse(&cfg, text, "act_bf16_layout") == OSDP_OK, "%s", osdp_error_message());
    cfg.act_bf16 = 1;
    cfg.attention_naive = attention_naive;
    ck_assert(osdp_layout_build(L, &cfg, T) == OSDP_OK);
}
static void act_bf16_layout(osdp_layout *L, int T) { act_bf16_layout_as(L, T, 0); }

/* bf16 activations (--activation-dtype bf16, osdp/layout.h): a forward and a backward of attn.0 and mlp.0 of
 * a one-layer model of tiny's width through gpt_ops.c on the CUDA bf16 table against the CPU bf16 table, both
 * storing ln, qkv, heads, fc and gelu in bf16 and staging them in the workspace: the output, every stored bf16
 * piece (widened), the gradients and d(input).  Within the bf16 products' tolerance (both multiply the same
 * bf16 operands in the forward; the GPU's backward products also round d(out)) */
START_TEST(test_bf16_activations_ops)
{
    const int B = 2, T = 64;
    osdp_layout L;
    act_bf16_layout(&L, T);
    const size_t btd = (size_t)B * T * 64, nws = osdp_workspace_floats(&L, B);
    for (int o = 1; o <= 2; o++) {
        const osdp_op_layout *op = &L.op[o];
        const size_t n = op->numel, nacts = (size_t)B * op->act_floats_per_seq;
        float *w = rand_floats(n, -0.1f, 0.1f, 40 + (uint64_t)o), *x = rand_floats(btd, -1, 1, 50 + (uint64_t)o);
        float *dout = rand_floats(btd, -1, 1, 60 + (uint64_t)o);
        uint16_t *w16 = bf16_weights(w, n);
        float *c_acts = falloc(nacts), *c_ws = falloc(nws), *c_g = falloc(n);
        memset(c_g, 0, n * sizeof *c_g);
        void *g_w16 = upb(w16, n);
        float *g_x = upf(x, btd), *g_acts = gpu->alloc(nacts * sizeof(float)), *g_ws = gpu->alloc(nws * sizeof(float));
        float *g_g = gpu->alloc(n * sizeof(float));
        ck_assert(g_acts && g_ws && g_g);
        gpu->fill_zero(g_g, n * sizeof(float));
        osdp_op_acts ca, ga;
        osdp_workspace cw, gw;
        osdp_op_acts_carve(&L, o, B, c_acts, &ca);
        osdp_op_acts_carve(&L, o, B, g_acts, &ga);
        osdp_workspace_carve(&L, B, c_ws, &cw);
        osdp_workspace_carve(&L, B, g_ws, &gw);
        memcpy(cw.dres[0], dout, btd * sizeof(float));
        gpu->to_device(gw.dres[0], dout, btd * sizeof(float));
        osdp_op_context cc = {.backend = cpu16, .layout = &L, .B = B, .T = T, .act_scratch = cw.scratch};
        osdp_op_context gc = {.backend = gpu16, .layout = &L, .B = B, .T = T, .act_scratch = gw.scratch};
        osdp_op_forward(&cc, o, w16, x, &ca);
        osdp_op_forward(&gc, o, g_w16, g_x, &ga);
        gpu->synchronize();
        expect_close_tol("bf16 activations: out", ca.out, ga.out, btd, 2e-2, 2e-2);
        /* the stored pieces, widened on the host side by the CPU table (the bits are bf16 on both) */
        for (int k = 0; k < OSDP_A_N_SLOTS; k++) {
            if (!op->act[k].floats || !osdp_act_slot_bf16((osdp_act_slot)k)) continue;
            const size_t elems = 2 * (size_t)B * op->act[k].floats;
            float *want = falloc(elems), *got = falloc(elems), *host = falloc(elems / 2);
            cpu16->residual_widen(want, c_acts + (size_t)B * op->act[k].offset, elems);
            gpu->to_host(host, g_acts + (size_t)B * op->act[k].offset, elems / 2 * sizeof(float));
            cpu16->residual_widen(got, host, elems);
            float *g_got = upf(got, elems);
            expect_close_tol("bf16 activations: a stored piece", want, g_got, elems, 2e-2, 2e-2);
            gpu->free(g_got);
            free(want), free(got), free(host);
        }
        osdp_op_backward(&cc, o, w16, c_g, x, &ca, &cw, 1.0f);
        osdp_op_backward(&gc, o, g_w16, g_g, g_x, &ga, &gw, 1.0f);
        gpu->synchronize();
        expect_close_tol("bf16 activations: gradients", c_g, g_g, n, 3e-2, 3e-2);
        expect_close_tol("bf16 activations: d(input)", cw.dres[cw.cur], gw.dres[gw.cur], btd, 3e-2, 3e-2);
        gpu->free(g_w16), gpu->free(g_x), gpu->free(g_acts), gpu->free(g_ws), gpu->free(g_g);
        free(w), free(x), free(dout), free(w16), free(c_acts), free(c_ws), free(c_g);
    }
    osdp_layout_free(&L);
}
END_TEST

/* One forward and backward of operator o through gpt_ops.c on table t (the GPU's), from the same weights,
 * input and d(out); returns the device buffers in r (acts, gradients, workspace), freed by the caller.
 * g_residual (NULL: none): the previous operator's residual, added to g_x in place by the forward's
 * LayerNorm (the fused residual + LayerNorm). */
typedef struct gpu_op_run {
    float *acts, *grads, *ws;
    osdp_op_acts a;
    osdp_workspace w;
} gpu_op_run;

static void run_gpu_op(gpu_op_run *r, const osdp_compute_backend *t, const osdp_layout *L, int o, int B, int T,
                       const void *g_w16, const float *g_x, const float *dout, size_t btd, const float *g_residual)
{
    const size_t n = L->op[o].numel, nacts = (size_t)B * L->op[o].act_floats_per_seq;
    const size_t nws = osdp_workspace_floats(L, B);
    r->acts = gpu->alloc(nacts * sizeof(float)), r->ws = gpu->alloc(nws * sizeof(float));
    r->grads = gpu->alloc(n * sizeof(float));
    ck_assert(r->acts && r->ws && r->grads);
    gpu->fill_zero(r->grads, n * sizeof(float));
    gpu->fill_zero(r->acts, nacts * sizeof(float));   /* the stored bf16 pieces' padding compares too */
    osdp_op_acts_carve(L, o, B, r->acts, &r->a);
    osdp_workspace_carve(L, B, r->ws, &r->w);
    gpu->to_device(r->w.dres[0], dout, btd * sizeof(float));
    osdp_op_context c = {.backend = t, .layout = L, .B = B, .T = T, .act_scratch = r->w.scratch,
                         .input_residual = g_residual};
    osdp_op_forward(&c, o, g_w16, g_x, &r->a);
    osdp_op_backward(&c, o, g_w16, r->grads, g_x, &r->a, &r->w, 1.0f);
    gpu->synchronize();
}

/* bf16 activations with the CUDA bf16 table's products reading the stored bf16 pieces in place
 * (matmul_forward_bf16_x, matmul_backward_bf16_x) against the same table with those entries off (the
 * products read the fp32 copies, staged in the forward and widened in the backward, and round them
 * again): bit for bit, the output, every activation, the gradients and d(input), with cuBLASLt's
 * epilogues off and on; each operator's four products (two forward, two weight gradients) must have
 * read their piece in place (osdp_cuda_bf16_direct_products), so a silent fallback fails.  Against
 * the CPU bf16 table: test_bf16_activations_ops (which runs with the direct entries). */
START_TEST(test_bf16_activations_direct)
{
    const int B = 2, T = 64;
    osdp_layout L;
    act_bf16_layout(&L, T);
    const size_t btd = (size_t)B * T * 64;
    ck_assert(gpu16->matmul_forward_bf16_x && gpu16->matmul_backward_bf16_x);
    osdp_compute_backend widened = *gpu16, direct = *gpu16;
    widened.matmul_forward_bf16_x = NULL, widened.matmul_backward_bf16_x = NULL;
    /* the MLP's fc and GELU in one cuBLASLt product (lt 1) are not the unfused bits:
     * test_bf16_activations_gelu_epilogue */
    widened.matmul_forward_gelu_bf16 = direct.matmul_forward_gelu_bf16 = NULL;
    for (int lt = 0; lt <= 1; lt++) {
        osdp_cuda_set_lt_epilogues(lt);
        for (int o = 1; o <= 2; o++) {
            const size_t n = L.op[o].numel, nacts = (size_t)B * L.op[o].act_floats_per_seq;
            float *w = rand_floats(n, -0.1f, 0.1f, 70 + (uint64_t)o), *x = rand_floats(btd, -1, 1, 80 + (uint64_t)o);
            float *dout = rand_floats(btd, -1, 1, 90 + (uint64_t)o);
            uint16_t *w16 = bf16_weights(w, n);
            void *g_w16 = upb(w16, n);
            float *g_x = upf(x, btd);
            gpu_op_run ref, dir;
            const long before = osdp_cuda_bf16_direct_products();
            run_gpu_op(&ref, &widened, &L, o, B, T, g_w16, g_x, dout, btd, NULL);
            ck_assert_msg(osdp_cuda_bf16_direct_products() == before, "the widened path read a piece in place");
            run_gpu_op(&dir, &direct, &L, o, B, T, g_w16, g_x, dout, btd, NULL);
            ck_assert_msg(osdp_cuda_bf16_direct_products() - before == 4,
                          "%s (lt %d): %ld products read the stored bf16 pieces in place, 4 expected", L.op[o].name,
                          lt, osdp_cuda_bf16_direct_products() - before);
            float *h = down(ref.acts, nacts);
            expect_bitwise("bf16 direct: activations", h, dir.acts, nacts);
            free(h);
            h = down(ref.grads, n);
            expect_bitwise("bf16 direct: gradients", h, dir.grads, n);
            free(h);
            ck_assert(ref.w.cur == dir.w.cur);
            h = down(ref.w.dres[ref.w.cur], btd);
            expect_bitwise("bf16 direct: d(input)", h, dir.w.dres[dir.w.cur], btd);
            free(h);
            gpu->free(ref.acts), gpu->free(ref.grads), gpu->free(ref.ws);
            gpu->free(dir.acts), gpu->free(dir.grads), gpu->free(dir.ws);
            gpu->free(g_w16), gpu->free(g_x);
            free(w), free(x), free(dout), free(w16);
        }
    }
    osdp_cuda_set_lt_epilogues(0);
    osdp_layout_free(&L);
}
END_TEST

/* bf16 activations with the CUDA bf16 table's producers writing the stored bf16 pieces themselves
 * (layernorm_forward_bf16_y, residual_layernorm_forward_bf16_y, attention_forward_tiled_bf16_out,
 * gelu_forward_bf16, and gelu_backward_bf16_x reading the stored fc, osdp/compute.h) against the same table
 * with those entries off (the path before them: the fp32 copy in the workspace, rounded, narrowed; the
 * backward's fc widened): bit for bit, the output, every activation, the gradients, d(input) and the input the
 * fused residual made; attn on the tiled and the naive attention (whose heads keep cuBLAS's fp32 copy, narrowed
 * without the rounding pass), mlp; each with and without the previous operator's residual fused into its
 * LayerNorm; the products' in-place entries on (no fp32 copy of ln, heads, gelu at all) and off (the pieces
 * widened for them).  The producers' kernels are counted (osdp_cuda_bf16_stored_outputs): attn 2 (tiled) or
 * 1 (naive), mlp 3, so a silent fallback fails. */
START_TEST(test_bf16_activations_producers)
{
    const int B = 2, T = 64;
    const size_t btd = (size_t)B * T * 64;
    ck_assert(gpu16->layernorm_forward_bf16_y && gpu16->residual_layernorm_forward_bf16_y &&
              gpu16->gelu_forward_bf16 && gpu16->gelu_backward_bf16_x && gpu16->attention_forward_tiled_bf16_out);
    osdp_cuda_set_lt_epilogues(0);   /* the unfused products (matmul_forward_gelu_bf16 queues nothing) */
    for (int naive = 0; naive <= 1; naive++) {
        osdp_layout L;
        act_bf16_layout_as(&L, T, naive);
        for (int direct = 0; direct <= 1; direct++) {
            osdp_compute_backend producers = *gpu16, staged = *gpu16;
            staged.layernorm_forward_bf16_y = NULL, staged.residual_layernorm_forward_bf16_y = NULL;
            staged.gelu_forward_bf16 = NULL, staged.gelu_backward_bf16_x = NULL;
            staged.attention_forward_tiled_bf16_out = NULL;
            if (!direct) {
                producers.matmul_forward_bf16_x = staged.matmul_forward_bf16_x = NULL;
                producers.matmul_backward_bf16_x = staged.matmul_backward_bf16_x = NULL;
            }
            for (int o = 1; o <= (naive ? 1 : 2); o++)   /* mlp has no attention: once */
                for (int fused = 0; fused <= 1; fused++) {
                    const size_t n = L.op[o].numel, nacts = (size_t)B * L.op[o].act_floats_per_seq;
                    float *w = rand_floats(n, -0.1f, 0.1f, 100 + (uint64_t)o), *x = rand_floats(btd, -1, 1, 110);
                    float *dout = rand_floats(btd, -1, 1, 120 + (uint64_t)o), *res = rand_floats(btd, -1, 1, 130);
                    uint16_t *w16 = bf16_weights(w, n);
                    void *g_w16 = upb(w16, n);
                    float *g_x_ref = upf(x, btd), *g_x_new = upf(x, btd), *g_res = upf(res, btd);
                    gpu_op_run ref, got;
                    char tag[96];
                    snprintf(tag, sizeof tag, "bf16 producers, %s, %s attention, direct %d, fused residual %d",
                             L.op[o].name, naive ? "naive" : "tiled", direct, fused);
                    const long before = osdp_cuda_bf16_stored_outputs();
                    run_gpu_op(&ref, &staged, &L, o, B, T, g_w16, g_x_ref, dout, btd, fused ? g_res : NULL);
                    ck_assert_msg(osdp_cuda_bf16_stored_outputs() == before, "%s: the staged path ran a producer",
                                  tag);
                    run_gpu_op(&got, &producers, &L, o, B, T, g_w16, g_x_new, dout, btd, fused ? g_res : NULL);
                    const long want = o == 2 ? 3 : naive ? 1 : 2;
                    ck_assert_msg(osdp_cuda_bf16_stored_outputs() - before == want,
                                  "%s: %ld producer kernels wrote or read the stored pieces, %ld expected", tag,
                                  osdp_cuda_bf16_stored_outputs() - before, want);
                    float *h = down(ref.acts, nacts);
                    expect_bitwise(tag, h, got.acts, nacts);
                    free(h);
                    h = down(ref.grads, n);
                    expect_bitwise(tag, h, got.grads, n);
                    free(h);
                    ck_assert(ref.w.cur == got.w.cur);
                    h = down(ref.w.dres[ref.w.cur], btd);
                    expect_bitwise(tag, h, got.w.dres[got.w.cur], btd);
                    free(h);
                    h = down(g_x_ref, btd);
                    expect_bitwise(tag, h, g_x_new, btd);
                    free(h);
                    gpu->free(ref.acts), gpu->free(ref.grads), gpu->free(ref.ws);
                    gpu->free(got.acts), gpu->free(got.grads), gpu->free(got.ws);
                    gpu->free(g_w16), gpu->free(g_x_ref), gpu->free(g_x_new), gpu->free(g_res);
                    free(w), free(x), free(dout), free(res), free(w16);
                }
        }
        osdp_layout_free(&L);
    }
}
END_TEST

/* bf16 activations with cuBLASLt's epilogues on (OSDP_CUDA_LT_EPILOGUES=1): the MLP's fc product writes the
 * stored fc and gelu in bf16 with the bias and GELU in its epilogue (matmul_forward_gelu_bf16: GELU_AUX_BIAS,
 * bf16 output and aux), the GELU's backward reading that fc; against the unfused path with the same switch
 * (the entry NULL: the bias epilogue, our GELU of the rounded fc): the stored pieces, the statistics and out within 2e-2 relative + 2e-2 of the largest (cuBLASLt's GELU of the unrounded pre-activation
 * against ours of the rounded one: a bf16 step or two), gradients and d(input) within 3e-2 (the ops test's);
 * the fused products counted (osdp_cuda_lt_gelu_bf16_products: one per forward), so a silent fallback fails.
 * Shapes: tiny's width (4d = 256, a multiple of 8). */
START_TEST(test_bf16_activations_gelu_epilogue)
{
    const int B = 2, T = 64, o = 2;
    osdp_layout L;
    act_bf16_layout(&L, T);
    const size_t btd = (size_t)B * T * 64, n = L.op[o].numel, nacts = (size_t)B * L.op[o].act_floats_per_seq;
    ck_assert(gpu16->matmul_forward_gelu_bf16 != NULL);
    osdp_compute_backend unfused = *gpu16;
    unfused.matmul_forward_gelu_bf16 = NULL;
    osdp_cuda_set_lt_epilogues(1);
    float *w = rand_floats(n, -0.1f, 0.1f, 140), *x = rand_floats(btd, -1, 1, 141);
    float *dout = rand_floats(btd, -1, 1, 142);
    uint16_t *w16 = bf16_weights(w, n);
    void *g_w16 = upb(w16, n);
    float *g_x = upf(x, btd);
    gpu_op_run ref, got;
    long before = osdp_cuda_lt_gelu_bf16_products();
    run_gpu_op(&ref, &unfused, &L, o, B, T, g_w16, g_x, dout, btd, NULL);
    ck_assert_msg(osdp_cuda_lt_gelu_bf16_products() == before, "the unfused path ran the fused product");
    run_gpu_op(&got, gpu16, &L, o, B, T, g_w16, g_x, dout, btd, NULL);
    ck_assert_msg(osdp_cuda_lt_gelu_bf16_products() - before == 1,
                  "%ld fused fc + GELU products with bf16 outputs, 1 expected (cuBLASLt offered none?)",
                  osdp_cuda_lt_gelu_bf16_products() - before);
    osdp_cuda_set_lt_epilogues(0);
    /* the stored pieces widened on the host (the CPU table's residual_widen), then compared */
    float *h_ref = down(ref.acts, nacts), *h_got = down(got.acts, nacts);
    for (int k = 0; k < OSDP_A_N_SLOTS; k++) {
        if (!L.op[o].act[k].floats) continue;
        const size_t off = (size_t)B * L.op[o].act[k].offset, floats = (size_t)B * L.op[o].act[k].floats;
        const int is16 = osdp_act_slot_bf16((osdp_act_slot)k);
        const size_t elems = is16 ? 2 * floats : floats;
        float *want = falloc(elems), *have = falloc(elems);
        if (is16) {
            cpu16->residual_widen(want, h_ref + off, elems);
            cpu16->residual_widen(have, h_got + off, elems);
        } else {
            memcpy(want, h_ref + off, elems * sizeof(float));
            memcpy(have, h_got + off, elems * sizeof(float));
        }
        float *g_have = upf(have, elems);
        expect_close_tol("bf16 GELU epilogue: an activation", want, g_have, elems, 2e-2, 2e-2);
        gpu->free(g_have);
        free(want), free(have);
    }
    float *h = down(ref.grads, n);
    expect_close_tol("bf16 GELU epilogue: gradients", h, got.grads, n, 3e-2, 3e-2);
    free(h);
    h = down(ref.w.dres[ref.w.cur], btd);
    expect_close_tol("bf16 GELU epilogue: d(input)", h, got.w.dres[got.w.cur], btd, 3e-2, 3e-2);
    free(h);
    free(h_ref), free(h_got);
    gpu->free(ref.acts), gpu->free(ref.grads), gpu->free(ref.ws);
    gpu->free(got.acts), gpu->free(got.grads), gpu->free(got.ws);
    gpu->free(g_w16), gpu->free(g_x);
    free(w), free(x), free(dout), free(w16);
    osdp_layout_free(&L);
}
END_TEST

/* bf16 product forward; x is (BT, ldx) and the product reads its columns
 * [c0, c0 + IC) (ldx == IC: the plain entry) */
static void run_bf16_matmul_forward(int BT, int IC, int OC, int ldx, int c0, int with_bias, int accumulate,
                                    uint64_t seed)
{
    const size_t nx = (size_t)BT * ldx, nw = (size_t)IC * OC, ny = (size_t)BT * OC;
    float *x = rand_floats(nx, -1, 1, seed);
    float *wf = rand_floats(nw, -0.5f, 0.5f, seed + 1), *bf = rand_floats(OC, -1, 1, seed + 2);
    uint16_t *w = bf16_weights(wf, nw), *b = bf16_weights(bf, OC);
    float *y0 = accumulate ? rand_floats(ny, -1, 1, seed + 3) : nan_floats(ny), *y = fcopy(y0, ny);
    float *g_x = upf(x, nx), *g_y = upf(y0, ny), *g_y2 = upf(y0, ny);
    void *g_w = upb(w, nw), *g_b = upb(b, OC);
    const void *bias = with_bias ? (const void *)b : NULL, *g_bias = with_bias ? g_b : NULL;
    if (ldx == IC) {
        cpu16->matmul_forward(y, x, w, bias, BT, IC, OC, accumulate);
        gpu16->matmul_forward(g_y, g_x, g_w, g_bias, BT, IC, OC, accumulate);
        gpu16->matmul_forward(g_y2, g_x, g_w, g_bias, BT, IC, OC, accumulate);
    } else {
        cpu16->matmul_forward_strided(y, x + c0, ldx, w, bias, BT, IC, OC, accumulate);
        gpu16->matmul_forward_strided(g_y, g_x + c0, ldx, g_w, g_bias, BT, IC, OC, accumulate);
        gpu16->matmul_forward_strided(g_y2, g_x + c0, ldx, g_w, g_bias, BT, IC, OC, accumulate);
    }
    expect_close_tol("bf16 matmul_forward y", y, g_y, ny, 0.0, BF16_TOL);
    expect_same_device("bf16 matmul_forward y (rerun)", g_y, g_y2, ny);
    if (IC <= TIGHT_MAX_K) {
        float *xr = bf16_rounded(x, nx), *yr = fcopy(y0, ny);
        cpu16->matmul_forward_strided(yr, xr + c0, ldx, w, bias, BT, IC, OC, accumulate);
        expect_close_tol("bf16 matmul_forward y (x rounded on the cpu too)", yr, g_y, ny, BF16_SAME_TOL,
                         BF16_SAME_TOL);
        free(xr), free(yr);
    }
    gpu->free(g_x), gpu->free(g_y), gpu->free(g_y2), gpu->free(g_w), gpu->free(g_b);
    free(x), free(wf), free(bf), free(w), free(b), free(y0), free(y);
}

/* The bf16 table's products with the bias, and the bias and GELU, in
 * cuBLASLt's epilogues (osdp_cuda_set_lt_epilogues) against the same table's
 * unfused path (cublasGemmEx, the bias kernel, the GELU kernel) on the same
 * bf16 operands: y and pre within 1e-4 relative (the epilogue adds the bias
 * to the fp32 sum in another order), the GELU within 1e-3 (cuBLASLt's GELU
 * is its own formula).  OC not a multiple of 8: the GELU falls back to the
 * unfused path, the bias alone stays in the epilogue.  With lt on the products
 * must have gone through cuBLASLt (osdp_cuda_lt_products). */
static void run_lt_epilogues(int BT, int IC, int OC, uint64_t seed)
{
    const size_t nx = (size_t)BT * IC, nw = (size_t)IC * OC, ny = (size_t)BT * OC;
    float *x = rand_floats(nx, -1, 1, seed), *wf = rand_floats(nw, -0.2f, 0.2f, seed + 1);
    float *bf = rand_floats(OC, -1, 1, seed + 2);
    void *w = malloc(nw * sizeof(uint16_t)), *b = malloc(OC * sizeof(uint16_t));
    ck_assert(w && b);
    cpu16->convert_weights(w, wf, nw);
    cpu16->convert_weights(b, bf, OC);
    float *g_x = upf(x, nx);
    void *g_w = up(w, nw * sizeof(uint16_t)), *g_b = up(b, OC * sizeof(uint16_t));
    float *g[6];
    for (int k = 0; k < 6; k++) g[k] = gpu->alloc(ny * sizeof(float));
    osdp_cuda_set_lt_epilogues(0);
    gpu16->matmul_forward(g[0], g_x, g_w, g_b, BT, IC, OC, 0);
    gpu16->matmul_forward_gelu(g[1], g[2], g_x, g_w, g_b, BT, IC, OC);
    osdp_cuda_set_lt_epilogues(1);
    const long before = osdp_cuda_lt_products();
    gpu16->matmul_forward(g[3], g_x, g_w, g_b, BT, IC, OC, 0);
    const long by_bias = osdp_cuda_lt_products() - before;
    gpu16->matmul_forward_gelu(g[4], g[5], g_x, g_w, g_b, BT, IC, OC);
    const long by_gelu = osdp_cuda_lt_products() - before - by_bias;
    osdp_cuda_set_lt_epilogues(0);
    ck_assert_msg(by_bias >= 1, "lt on: matmul_forward with a bias queued no cuBLASLt product (BIAS): cuBLASLt "
                  "offered no algorithm, the unfused path ran");
    ck_assert_msg(by_gelu >= (OC % 8 == 0 ? 1 : 0), "lt on: matmul_forward_gelu queued no cuBLASLt product "
                  "(GELU_AUX_BIAS): cuBLASLt offered no algorithm, the unfused path ran");
    float *y = down(g[0], ny), *gelu = down(g[1], ny), *pre = down(g[2], ny);
    expect_close_tol("cuBLASLt bias epilogue y", y, g[3], ny, 1e-4, 1e-5);
    expect_close_tol("cuBLASLt bias + GELU epilogue pre", pre, g[5], ny, 1e-4, 1e-5);
    expect_close_tol("cuBLASLt bias + GELU epilogue y", gelu, g[4], ny, 1e-3, 1e-4);
    for (int k = 0; k < 6; k++) gpu->free(g[k]);
    gpu->free(g_x), gpu->free(g_w), gpu->free(g_b);
    free(x), free(wf), free(bf), free(w), free(b), free(y), free(gelu), free(pre);
}

START_TEST(test_bf16_lt_epilogues)
{
    ck_assert(gpu16->matmul_forward_gelu != NULL && gpu->matmul_forward_gelu == NULL);
    run_lt_epilogues(64, 128, 256, 170);   /* GPT-2's shapes in small: OC = 4 IC */
    run_lt_epilogues(37, 96, 200, 171);    /* rows not a multiple of anything */
    run_lt_epilogues(33, 64, 36, 172);     /* OC not a multiple of 8: the GELU unfused */
}
END_TEST

/* host: db (n) += the column sums of a (rows, n), in double */
static void column_sums_add_host(float *db, const float *a, int rows, int n)
{
    for (int j = 0; j < n; j++) {
        double s = 0;
        for (int i = 0; i < rows; i++) s += a[(size_t)i * n + j];
        db[j] = (float)(db[j] + s);
    }
}

/* The backward's epilogues: matmul_backward_dgelu (the MLP's second product's backward and the GELU's:
 * d(pre) and the first product's db by DGELU_BGRAD on the d(x) product, db by BGRADA on the d(w)
 * product) and matmul_backward with a bias (db by BGRADA), with OSDP_CUDA_LT_EPILOGUES on against off
 * on the same operands; gradients accumulate (dw, db, db_pre pre-filled), d(pre) and dx are written
 * whole (NaN-filled).  Tolerances, of the largest entry where not said: d(pre) 2e-3 relative + 1e-3
 * (cuBLASLt's GELU gradient is its own evaluation, as its GELU: near the gradient's zero, x = -0.75, a
 * small difference of GELU' times a large d(gelu) is large against the entry itself); db_pre 1e-3 (sums
 * of those, in another order); dw and dx 1e-4 relative + 1e-4 (the same bf16 products, other chunks and kernels); db 4e-3
 * (BGRADA sums the bf16-rounded dy, the unfused path the fp32 dy: 2^-9 relative per entry, random
 * signs).  With lt off the entry must give the bits of matmul_backward and gelu_backward, and (cpu_too)
 * the CPU bf16 table's matmul_backward, gelu_backward and column sums within the bf16 products'
 * BF16_TOL.  With lt on the products must have gone through cuBLASLt (osdp_cuda_lt_products): a
 * failure there means this cuBLASLt offers no algorithm for the epilogue with bf16 A, B and fp32 D. */
static void run_lt_backward(int BT, int IC, int OC, int cpu_too, uint64_t seed)
{
    const size_t nx = (size_t)BT * IC, nw = (size_t)IC * OC, ny = (size_t)BT * OC;
    float *x = rand_floats(nx, 0, 1, seed), *pre = rand_floats(nx, -3, 3, seed + 1);
    float *dy = rand_floats(ny, -1, 1, seed + 2), *wf = rand_floats(nw, -0.2f, 0.2f, seed + 3);
    float *dw0 = rand_floats(nw, -1, 1, seed + 4), *db0 = rand_floats(OC, -1, 1, seed + 5);
    float *dbp0 = rand_floats(IC, -1, 1, seed + 6), *nans = nan_floats(nx);
    uint16_t *w = bf16_weights(wf, nw);
    float *g_x = upf(x, nx), *g_pre = upf(pre, nx), *g_dy = upf(dy, ny);
    void *g_w = upb(w, nw);
    /* [0]: lt off, [1]: lt on, [2]: the unfused calls one by one */
    float *g_dpre[3], *g_dw[3], *g_db[3], *g_dbp[2], *g_dx[2], *g_dw2[2], *g_db2[2];
    for (int k = 0; k < 3; k++) g_dpre[k] = upf(nans, nx), g_dw[k] = upf(dw0, nw), g_db[k] = upf(db0, OC);
    for (int k = 0; k < 2; k++) {
        g_dbp[k] = upf(dbp0, IC), g_dx[k] = upf(nans, nx), g_dw2[k] = upf(dw0, nw), g_db2[k] = upf(db0, OC);
        osdp_cuda_set_lt_epilogues(k);
        const long before = osdp_cuda_lt_products();
        gpu16->matmul_backward_dgelu(g_dpre[k], g_dw[k], g_db[k], g_dbp[k], g_dy, g_x, g_pre, g_w, BT, IC, OC);
        const long by_dgelu = osdp_cuda_lt_products() - before;
        gpu16->matmul_backward(g_dx[k], g_dw2[k], g_db2[k], g_dy, g_x, g_w, BT, IC, OC, 0);
        const long by_plain = osdp_cuda_lt_products() - before - by_dgelu;
        if (!k) ck_assert_msg(by_dgelu == 0 && by_plain == 0, "lt off: %ld + %ld cuBLASLt products", by_dgelu,
                              by_plain);
        else {
            ck_assert_msg(by_dgelu >= (IC % 8 == 0 ? 2 : 1),
                          "lt on: matmul_backward_dgelu queued %ld cuBLASLt products (want DGELU%s and BGRADA): "
                          "cuBLASLt offered no algorithm, the unfused path ran", by_dgelu,
                          IC % 8 == 0 ? "_BGRAD" : " unfused (IC % 8 != 0)");
            ck_assert_msg(by_plain >= 1, "lt on: matmul_backward with db queued no cuBLASLt product (BGRADA)");
        }
    }
    osdp_cuda_set_lt_epilogues(0);
    gpu16->matmul_backward(g_dpre[2], g_dw[2], g_db[2], g_dy, g_x, g_w, BT, IC, OC, 0);
    gpu16->gelu_backward(g_dpre[2], g_pre, g_dpre[2], nx);
    expect_same_device("matmul_backward_dgelu (lt off) dpre: matmul_backward + gelu_backward", g_dpre[2], g_dpre[0],
                       nx);
    expect_same_device("matmul_backward_dgelu (lt off) dw: matmul_backward's", g_dw[2], g_dw[0], nw);
    expect_same_device("matmul_backward_dgelu (lt off) db: matmul_backward's", g_db[2], g_db[0], OC);
    float *dpre = down(g_dpre[0], nx), *dw = down(g_dw[0], nw), *db = down(g_db[0], OC);
    float *dbp = down(g_dbp[0], IC), *dx = down(g_dx[0], nx), *dw2 = down(g_dw2[0], nw), *db2 = down(g_db2[0], OC);
    expect_close_tol("cuBLASLt DGELU epilogue dpre", dpre, g_dpre[1], nx, 2e-3, 1e-3);
    expect_close_tol("cuBLASLt DGELU_BGRAD epilogue db_pre", dbp, g_dbp[1], IC, 1e-3, 1e-3);
    expect_close_tol("cuBLASLt backward (dgelu entry) dw", dw, g_dw[1], nw, 1e-4, 1e-4);
    expect_close_tol("cuBLASLt BGRADA epilogue db (dgelu entry)", db, g_db[1], OC, 0.0, 4e-3);
    expect_close_tol("cuBLASLt backward dx", dx, g_dx[1], nx, 1e-4, 1e-4);
    expect_close_tol("cuBLASLt backward dw", dw2, g_dw2[1], nw, 1e-4, 1e-4);
    expect_close_tol("cuBLASLt BGRADA epilogue db", db2, g_db2[1], OC, 0.0, 4e-3);
    if (cpu_too) {   /* the unfused entry against the CPU bf16 table's calls */
        float *c_dpre = falloc(nx), *c_dw = fcopy(dw0, nw), *c_db = fcopy(db0, OC), *c_dbp = fcopy(dbp0, IC);
        cpu16->matmul_backward(c_dpre, c_dw, c_db, dy, x, w, BT, IC, OC, 0);
        cpu16->gelu_backward(c_dpre, pre, c_dpre, nx);
        column_sums_add_host(c_dbp, c_dpre, BT, IC);
        expect_close_tol("bf16 matmul_backward_dgelu dpre", c_dpre, g_dpre[0], nx, 0.0, BF16_TOL);
        expect_close_tol("bf16 matmul_backward_dgelu dw", c_dw, g_dw[0], nw, 0.0, BF16_TOL);
        expect_close("bf16 matmul_backward_dgelu db (fp32 dy)", c_db, g_db[0], OC);
        expect_close_tol("bf16 matmul_backward_dgelu db_pre", c_dbp, g_dbp[0], IC, 0.0, BF16_TOL);
        free(c_dpre), free(c_dw), free(c_db), free(c_dbp);
    }
    for (int k = 0; k < 3; k++) gpu->free(g_dpre[k]), gpu->free(g_dw[k]), gpu->free(g_db[k]);
    for (int k = 0; k < 2; k++) gpu->free(g_dbp[k]), gpu->free(g_dx[k]), gpu->free(g_dw2[k]), gpu->free(g_db2[k]);
    gpu->free(g_x), gpu->free(g_pre), gpu->free(g_dy), gpu->free(g_w);
    free(x), free(pre), free(dy), free(wf), free(dw0), free(db0), free(dbp0), free(nans), free(w);
    free(dpre), free(dw), free(db), free(dbp), free(dx), free(dw2), free(db2);
}

START_TEST(test_bf16_lt_backward)
{
    ck_assert(gpu16->matmul_backward_dgelu != NULL && gpu->matmul_backward_dgelu == NULL);
    ck_assert(cpu->matmul_backward_dgelu == NULL && cpu16->matmul_backward_dgelu == NULL);
    run_lt_backward(64, 256, 64, 1, 180);      /* GPT-2's MLP projection in small: IC = 4 OC */
    run_lt_backward(37, 200, 48, 1, 181);      /* rows not a multiple of anything */
    run_lt_backward(33, 36, 20, 1, 182);       /* IC not a multiple of 8: DGELU unfused, BGRADA fused */
    run_lt_backward(8200, 3072, 768, 0, 183);  /* GPT-2's widths: two row chunks of the staging with lt on */
}
END_TEST

START_TEST(test_bf16_matmul_forward)
{
    run_bf16_matmul_forward(37, 45, 29, 45, 0, 1, 0, 140);
    run_bf16_matmul_forward(37, 45, 29, 45, 0, 0, 0, 141);
    run_bf16_matmul_forward(64, 128, 96, 128, 0, 1, 1, 142);
    run_bf16_matmul_forward(5, 300, 7, 300, 0, 0, 1, 143);
    /* strided: a column block of a wider x */
    run_bf16_matmul_forward(37, 20, 29, 64, 24, 1, 0, 144);
    run_bf16_matmul_forward(50, 33, 17, 100, 67, 1, 1, 145);
    run_bf16_matmul_forward(50, 33, 17, 100, 5, 0, 1, 146);
    /* x rows of 16411 bf16: BT = 2100 rows take two chunks of the 64 MiB staging */
    run_bf16_matmul_forward(2100, 16411, 16, 16411, 0, 1, 0, 147);
}
END_TEST

/* bf16 product backward; x and dx are (BT, ld) and the product uses their
 * columns [c0, c0 + IC) (ld == IC: the plain entry).  dx outside the block
 * must stay as it was. */
static void run_bf16_matmul_backward(int BT, int IC, int OC, int ld, int c0, int with_dx, int dx_acc,
                                     int with_db, uint64_t seed)
{
    const size_t nx = (size_t)BT * ld, nw = (size_t)IC * OC, ny = (size_t)BT * OC;
    float *x = rand_floats(nx, -1, 1, seed), *wf = rand_floats(nw, -0.5f, 0.5f, seed + 1);
    uint16_t *w = bf16_weights(wf, nw);
    float *dy = rand_floats(ny, -1, 1, seed + 2);
    float *dx0 = dx_acc || ld != IC ? rand_floats(nx, -1, 1, seed + 3) : nan_floats(nx);
    float *dw0 = rand_floats(nw, -1, 1, seed + 4), *db0 = rand_floats(OC, -1, 1, seed + 5);
    float *dx = fcopy(dx0, nx), *dw = fcopy(dw0, nw), *db = fcopy(db0, OC);
    float *g_x = upf(x, nx), *g_dy = upf(dy, ny), *g_dx = upf(dx0, nx), *g_dw = upf(dw0, nw);
    float *g_db = upf(db0, OC), *g_dx2 = upf(dx0, nx), *g_dw2 = upf(dw0, nw);
    void *g_w = upb(w, nw);
    if (ld == IC) {
        cpu16->matmul_backward(with_dx ? dx : NULL, dw, with_db ? db : NULL, dy, x, w, BT, IC, OC, dx_acc);
        gpu16->matmul_backward(with_dx ? g_dx : NULL, g_dw, with_db ? g_db : NULL, g_dy, g_x, g_w, BT, IC, OC,
                               dx_acc);
        gpu16->matmul_backward(with_dx ? g_dx2 : NULL, g_dw2, NULL, g_dy, g_x, g_w, BT, IC, OC, dx_acc);
    } else {
        cpu16->matmul_backward_strided(with_dx ? dx + c0 : NULL, ld, dw, with_db ? db : NULL, dy, x + c0, ld, w,
                                       BT, IC, OC, dx_acc);
        gpu16->matmul_backward_strided(with_dx ? g_dx + c0 : NULL, ld, g_dw, with_db ? g_db : NULL, g_dy,
                                       g_x + c0, ld, g_w, BT, IC, OC, dx_acc);
        gpu16->matmul_backward_strided(with_dx ? g_dx2 + c0 : NULL, ld, g_dw2, NULL, g_dy, g_x + c0, ld, g_w,
                                       BT, IC, OC, dx_acc);
    }
    if (with_dx) expect_close_tol("bf16 matmul_backward dx", dx, g_dx, nx, 0.0, BF16_TOL);
    else expect_bitwise("bf16 matmul_backward dx (NULL: untouched)", dx, g_dx, nx);
    expect_close_tol("bf16 matmul_backward dw", dw, g_dw, nw, 0.0, BF16_TOL);
    expect_close("bf16 matmul_backward db (fp32 dy)", db, g_db, OC);
    expect_same_device("bf16 matmul_backward dx (rerun)", g_dx, g_dx2, nx);
    expect_same_device("bf16 matmul_backward dw (rerun)", g_dw, g_dw2, nw);
    if (BT <= TIGHT_MAX_K && OC <= TIGHT_MAX_K) {
        float *xr = bf16_rounded(x, nx), *dyr = bf16_rounded(dy, ny);
        memcpy(dx, dx0, nx * sizeof *dx), memcpy(dw, dw0, nw * sizeof *dw);
        cpu16->matmul_backward_strided(with_dx ? dx + c0 : NULL, ld, dw, NULL, dyr, xr + c0, ld, w, BT, IC, OC,
                                       dx_acc);
        expect_close_tol("bf16 matmul_backward dx (x, dy rounded on the cpu too)", dx, g_dx, nx, BF16_SAME_TOL,
                         BF16_SAME_TOL);
        expect_close_tol("bf16 matmul_backward dw (x, dy rounded on the cpu too)", dw, g_dw, nw, BF16_SAME_TOL,
                         BF16_SAME_TOL);
        free(xr), free(dyr);
    }
    gpu->free(g_x), gpu->free(g_dy), gpu->free(g_dx), gpu->free(g_dw), gpu->free(g_db);
    gpu->free(g_dx2), gpu->free(g_dw2), gpu->free(g_w);
    free(x), free(wf), free(w), free(dy), free(dx0), free(dw0), free(db0), free(dx), free(dw), free(db);
}

START_TEST(test_bf16_matmul_backward)
{
    run_bf16_matmul_backward(37, 45, 29, 45, 0, 1, 0, 1, 150);
    run_bf16_matmul_backward(37, 45, 29, 45, 0, 1, 1, 1, 151);
    run_bf16_matmul_backward(100, 64, 70, 64, 0, 0, 0, 0, 152);
    run_bf16_matmul_backward(1000, 16, 33, 16, 0, 1, 0, 1, 153);
    /* strided: a column block of wider x and dx */
    run_bf16_matmul_backward(37, 20, 29, 64, 24, 1, 0, 1, 154);
    run_bf16_matmul_backward(50, 33, 17, 100, 67, 1, 1, 1, 155);
    run_bf16_matmul_backward(50, 33, 17, 100, 5, 0, 0, 1, 156);
    /* an LM-head-like dy, rows of 16411 (odd: unaligned chunk offsets): two
     * chunks of the staging for dx, dw in two column slices of one product
     * each (15936 + 475 columns), x and dx strided */
    run_bf16_matmul_backward(2100, 16, 16411, 40, 8, 1, 1, 1, 157);
    /* x too wide to stage whole beside 64 columns of dy (2100 x 16000 bf16 > 64 MiB): dw in row chunks */
    run_bf16_matmul_backward(2100, 16000, 64, 16000, 0, 1, 0, 0, 158);
}
END_TEST

START_TEST(test_bf16_layernorm)
{
    check_layernorm(cpu16, gpu16, 160, 45, 72);
    check_layernorm(cpu16, gpu16, 161, 4096, 768);
}
END_TEST

START_TEST(test_bf16_embedding)
{
    const int B = 3, T = 17, C = 40, V = 11;
    const int BT = B * T;
    int *tok = rand_ints(BT, V, 170);
    float *tef = rand_floats((size_t)V * C, -1, 1, 171), *pef = rand_floats((size_t)T * C, -1, 1, 172);
    uint16_t *wte = bf16_weights(tef, (size_t)V * C), *wpe = bf16_weights(pef, (size_t)T * C);
    float *x = nan_floats((size_t)BT * C);
    int *g_tok = up(tok, BT * sizeof(int));
    void *g_wte = upb(wte, (size_t)V * C), *g_wpe = upb(wpe, (size_t)T * C);
    float *g_x = upf(x, (size_t)BT * C);
    cpu16->embedding_forward(x, tok, wte, wpe, B, T, C);
    gpu16->embedding_forward(g_x, g_tok, g_wte, g_wpe, B, T, C);
    expect_bitwise("bf16 embedding x", x, g_x, (size_t)BT * C);
    gpu->free(g_tok), gpu->free(g_wte), gpu->free(g_wpe), gpu->free(g_x);
    free(tok), free(tef), free(pef), free(wte), free(wpe), free(x);
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
    const TTest *cuda_vs_cpu[] = {test_memory, test_memory_pool, test_matmul_forward, test_matmul_backward,
                                  test_matmul_out_in,
                                  test_layernorm, test_gelu, test_attention, test_embedding, test_crossentropy,
                                  test_crossentropy_large_gap, test_vocab_parallel,
                                  test_residual_accumulate, test_sums, test_adamw, test_tables, test_bf16_convert,
                                  test_bf16_residual, test_bf16_activations_ops, test_bf16_activations_direct,
                                  test_bf16_activations_producers, test_bf16_activations_gelu_epilogue,
                                  test_bf16_matmul_forward, test_bf16_lt_epilogues, test_bf16_lt_backward,
                                  test_bf16_matmul_backward, test_bf16_layernorm,
                                  test_bf16_attention, test_attention_tiled, test_bf16_attention_tiled,
                                  test_bf16_attention_mma,
                                  test_fused_head, test_bf16_head_backward, test_bf16_embedding, test_nccl_one_rank,
                                  test_nccl_many_in_flight, NULL};
    const osdp_check_case cases[] = {
        {.name = "cuda_vs_cpu", .tests = cuda_vs_cpu},
    };
    return osdp_check_suite("cuda", cases, sizeof cases / sizeof cases[0]);
}

/* no CUDA device: SKIP (77); otherwise MPI and both backends up before the run */
static int cuda_setup(void)
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
    return 0;
}

static void cuda_teardown(void)
{
    MPI_Finalize();
}

/* a CUDA context does not survive fork(): tests/lib/check_main.c runs the tests in this process */
const osdp_check_program osdp_check_this_program = {.suite = cuda_suite, .setup = cuda_setup,
                                                    .teardown = cuda_teardown};

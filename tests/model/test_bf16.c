/* bf16 conversions (osdp/dtype.h) and the CPU bf16 table
 * (osdp_compute_cpu_bf16): its weight-reading kernels must give what the
 * fp32 table gives on the same weights widened to fp32 — bit for bit while
 * a weight is widened in one piece, within fp32 summation-order noise when
 * a large one is widened in pieces (their products are summed). */
#include "osdp/compute.h"
#include "osdp/dtype.h"

#include "check_main.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

START_TEST(test_rounding)
{
    ck_assert_uint_eq(osdp_bf16_from_float(1.0f), 0x3F80);
    ck_assert_uint_eq(osdp_bf16_from_float(-2.0f), 0xC000);
    /* halfway between 1 and 1 + 2^-7: to the even one (1); just above: up */
    ck_assert_uint_eq(osdp_bf16_from_float(from_bits(0x3F808000u)), 0x3F80);
    ck_assert_uint_eq(osdp_bf16_from_float(from_bits(0x3F808001u)), 0x3F81);
    ck_assert_uint_eq(osdp_bf16_from_float(from_bits(0x3F807FFFu)), 0x3F80);
    /* halfway between 0x3F81 (odd) and 0x3F82: up to the even one */
    ck_assert_uint_eq(osdp_bf16_from_float(from_bits(0x3F818000u)), 0x3F82);
    /* the largest float rounds to infinity; infinities and NaN stay so */
    ck_assert_uint_eq(osdp_bf16_from_float(from_bits(0x7F7FFFFFu)), 0x7F80);
    ck_assert_uint_eq(osdp_bf16_from_float(INFINITY), 0x7F80);
    ck_assert_uint_eq(osdp_bf16_from_float(-INFINITY), 0xFF80);
    ck_assert(isnan(osdp_bf16_to_float(osdp_bf16_from_float(NAN))));
    ck_assert(isnan(osdp_bf16_to_float(osdp_bf16_from_float(from_bits(0x7F800001u)))));   /* a NaN with low bits only */
    /* every bf16 value survives the trip through fp32 (scanned, then one
     * assertion: under CK_FORK=no each passing ck_assert writes to Check's
     * message file, a system call per element) */
    uint32_t h = 0;
    for (; h < 65536; h++) {
        float f = osdp_bf16_to_float((uint16_t)h);
        if (bits(f) != h << 16 || (!isnan(f) && osdp_bf16_from_float(f) != h)) break;
    }
    ck_assert_msg(h == 65536, "bf16 0x%04x: widened to 0x%08x, rounded back to 0x%04x", (unsigned)h,
                  (unsigned)bits(osdp_bf16_to_float((uint16_t)h)),
                  (unsigned)osdp_bf16_from_float(osdp_bf16_to_float((uint16_t)h)));
    /* relative error of the rounding: at most half a unit in the 8th bit, 2^-8 */
    int i = 1;
    for (; i < 2000; i++) {
        float f = (float)i * 0.7317f - 700.0f;
        if (f != 0 && !(fabsf(osdp_bf16_to_float(osdp_bf16_from_float(f)) - f) <= fabsf(f) * 0x1p-8f)) break;
    }
    float f = (float)i * 0.7317f - 700.0f;
    ck_assert_msg(i == 2000, "%g rounded to %g", (double)f, (double)osdp_bf16_to_float(osdp_bf16_from_float(f)));
}
END_TEST

static uint64_t g_seed = 99;
static float *random_floats(size_t n, float scale)
{
    float *a = malloc(n * sizeof *a);
    ck_assert(a != NULL);
    for (size_t i = 0; i < n; i++) {
        g_seed = g_seed * 6364136223846793005ULL + 1442695040888963407ULL;
        a[i] = scale * ((float)(g_seed >> 40) / 16777216.0f - 0.5f);
    }
    return a;
}

/* bf16 copy of src through the table, and its widening in fp32 */
static void rounded(const float *src, size_t n, uint16_t **h, float **wide)
{
    *h = malloc(n * sizeof **h);
    *wide = malloc(n * sizeof **wide);
    ck_assert(*h && *wide);
    osdp_compute_cpu_bf16.convert_weights(*h, src, n);
    size_t i = 0;
    for (; i < n && (*h)[i] == osdp_bf16_from_float(src[i]); i++) (*wide)[i] = osdp_bf16_to_float((*h)[i]);
    ck_assert_msg(i == n, "convert_weights[%zu]: 0x%04x, osdp_bf16_from_float: 0x%04x", i, (unsigned)(*h)[i],
                  (unsigned)osdp_bf16_from_float(src[i]));
}

static void assert_close(const float *a, const float *b, size_t n, double rtol, const char *what)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(b[i]));
    size_t i = 0;
    while (i < n && fabs((double)a[i] - b[i]) <= rtol * m) i++;   /* the first element out of tolerance, if any */
    ck_assert_msg(i == n, "%s[%zu]: %.9g against %.9g", what, i, i < n ? (double)a[i] : 0.0, i < n ? (double)b[i] : 0.0);
}

/* one product shape: forward (bias, accumulate), backward, strided halves */
static void check_matmul(int BT, int IC, int OC, double rtol)
{
    const osdp_compute_backend *f32 = &osdp_compute_cpu, *b16 = &osdp_compute_cpu_bf16;
    ck_assert(osdp_compute_find("cpu", OSDP_BFLOAT16) == b16 && osdp_compute_find("cpu", OSDP_FLOAT32) == f32);
    size_t nx = (size_t)BT * IC, ny = (size_t)BT * OC, nw = (size_t)IC * OC;
    float *x = random_floats(nx, 2), *w32 = random_floats(nw, 0.2f), *b32 = random_floats((size_t)OC, 1);
    float *dy = random_floats(ny, 1);
    uint16_t *w, *b;
    float *ww, *bw;
    rounded(w32, nw, &w, &ww);
    rounded(b32, (size_t)OC, &b, &bw);
    float *y1 = random_floats(ny, 1), *y2 = malloc(ny * sizeof *y2);
    memcpy(y2, y1, ny * sizeof *y2);
    for (int acc = 0; acc < 2; acc++) {
        b16->matmul_forward(y1, x, w, b, BT, IC, OC, acc);
        f32->matmul_forward(y2, x, ww, bw, BT, IC, OC, acc);
        assert_close(y1, y2, ny, rtol, "matmul_forward y");
    }
    float *dx1 = random_floats(nx, 1), *dx2 = malloc(nx * sizeof *dx2), *dw1 = random_floats(nw, 1),
          *dw2 = malloc(nw * sizeof *dw2), *db1 = random_floats((size_t)OC, 1), *db2 = malloc((size_t)OC * sizeof *db2);
    memcpy(dx2, dx1, nx * sizeof *dx2);
    memcpy(dw2, dw1, nw * sizeof *dw2);
    memcpy(db2, db1, (size_t)OC * sizeof *db2);
    b16->matmul_backward(dx1, dw1, db1, dy, x, w, BT, IC, OC, 1);
    f32->matmul_backward(dx2, dw2, db2, dy, x, ww, BT, IC, OC, 1);
    assert_close(dx1, dx2, nx, rtol, "matmul_backward dx");
    assert_close(dw1, dw2, nw, rtol, "matmul_backward dw");
    assert_close(db1, db2, (size_t)OC, rtol, "matmul_backward db");
    /* rows [h, IC) of w against columns [h, IC) of x (a split slice) */
    int h = IC / 2;
    b16->matmul_forward_strided(y1, x + h, IC, w + (size_t)h * OC, b, BT, IC - h, OC, 1);
    f32->matmul_forward_strided(y2, x + h, IC, ww + (size_t)h * OC, bw, BT, IC - h, OC, 1);
    assert_close(y1, y2, ny, rtol, "matmul_forward_strided y");
    b16->matmul_backward_strided(dx1 + h, IC, dw1 + (size_t)h * OC, NULL, dy, x + h, IC, w + (size_t)h * OC, BT,
                                 IC - h, OC, 0);
    f32->matmul_backward_strided(dx2 + h, IC, dw2 + (size_t)h * OC, NULL, dy, x + h, IC, ww + (size_t)h * OC, BT,
                                 IC - h, OC, 0);
    assert_close(dx1, dx2, nx, rtol, "matmul_backward_strided dx");
    assert_close(dw1, dw2, nw, rtol, "matmul_backward_strided dw");
    free(x); free(w32); free(b32); free(dy); free(w); free(b); free(ww); free(bw);
    free(y1); free(y2); free(dx1); free(dx2); free(dw1); free(dw2); free(db1); free(db2);
}

/* w^T (IC, OC) of w (OC, IC) */
static float *transposed(const float *w, int OC, int IC)
{
    float *t = malloc((size_t)OC * IC * sizeof *t);
    ck_assert(t != NULL);
    for (int o = 0; o < OC; o++)
        for (int i = 0; i < IC; i++) t[(size_t)i * OC + o] = w[(size_t)o * IC + i];
    return t;
}

/* The products with the weight stored (OC, IC) (the tied head's): the fp32
 * table's equal its (IC, OC) products on w^T within rtol_f32 (another GEMM
 * transpose flag, the same sums), and the bf16 table's equal the fp32
 * table's on the widened weights within rtol (0: bitwise) */
static void check_matmul_out_in(int BT, int IC, int OC, double rtol_f32, double rtol)
{
    const osdp_compute_backend *f32 = &osdp_compute_cpu, *b16 = &osdp_compute_cpu_bf16;
    size_t nx = (size_t)BT * IC, ny = (size_t)BT * OC, nw = (size_t)IC * OC;
    float *x = random_floats(nx, 2), *w32 = random_floats(nw, 0.2f), *dy = random_floats(ny, 1);
    uint16_t *w;
    float *ww;
    rounded(w32, nw, &w, &ww);
    float *wt = transposed(ww, OC, IC);
    float *y[3], *dx[3], *dw[3];
    for (int k = 0; k < 3; k++) {   /* 0: bf16 out_in, 1: fp32 out_in, 2: fp32 on w^T */
        y[k] = random_floats(ny, 1);
        dx[k] = random_floats(nx, 1);
        dw[k] = random_floats(nw, 1);
        if (k) {
            memcpy(y[k], y[0], ny * sizeof(float));
            memcpy(dx[k], dx[0], nx * sizeof(float));
        }
    }
    memcpy(dw[1], dw[0], nw * sizeof(float));
    float *dw_t = transposed(dw[0], OC, IC);   /* the same accumulator, in (IC, OC) */
    memcpy(dw[2], dw_t, nw * sizeof(float));
    for (int acc = 0; acc < 2; acc++) {
        b16->matmul_forward_out_in(y[0], x, w, BT, IC, OC, acc);
        f32->matmul_forward_out_in(y[1], x, ww, BT, IC, OC, acc);
        f32->matmul_forward(y[2], x, wt, NULL, BT, IC, OC, acc);
        assert_close(y[0], y[1], ny, rtol, "matmul_forward_out_in y (bf16)");
        assert_close(y[1], y[2], ny, rtol_f32, "matmul_forward_out_in y against matmul_forward");
    }
    b16->matmul_backward_out_in(dx[0], dw[0], dy, x, w, BT, IC, OC, 1);
    f32->matmul_backward_out_in(dx[1], dw[1], dy, x, ww, BT, IC, OC, 1);
    f32->matmul_backward(dx[2], dw[2], NULL, dy, x, wt, BT, IC, OC, 1);
    assert_close(dx[0], dx[1], nx, rtol, "matmul_backward_out_in dx (bf16)");
    assert_close(dw[0], dw[1], nw, rtol, "matmul_backward_out_in dw (bf16)");
    assert_close(dx[1], dx[2], nx, rtol_f32, "matmul_backward_out_in dx against matmul_backward");
    float *dw2 = transposed(dw[2], IC, OC);
    assert_close(dw[1], dw2, nw, rtol_f32, "matmul_backward_out_in dw against matmul_backward");
    free(x); free(w32); free(dy); free(w); free(ww); free(wt); free(dw_t); free(dw2);
    for (int k = 0; k < 3; k++) { free(y[k]); free(dx[k]); free(dw[k]); }
}

START_TEST(test_matmul_bitwise)
{
    check_matmul(7, 13, 11, 0);
    check_matmul(64, 96, 80, 0);
    check_matmul_out_in(7, 13, 11, 1e-6, 0);
    check_matmul_out_in(64, 96, 80, 1e-6, 0);
}
END_TEST

START_TEST(test_matmul_in_pieces)
{
    /* 2100 x 2048 weights: more than the 4 Mi elements widened at once */
    check_matmul(3, 2100, 2048, 1e-5);
    check_matmul_out_in(3, 2048, 2100, 1e-5, 1e-5);   /* (OC, IC) = (2100, 2048): widened in pieces of rows */
}
END_TEST

START_TEST(test_layernorm_and_embedding)
{
    const osdp_compute_backend *f32 = &osdp_compute_cpu, *b16 = &osdp_compute_cpu_bf16;
    const int BT = 12, C = 40, B = 3, T = 4, V = 17;
    float *x = random_floats((size_t)BT * C, 4), *g32 = random_floats((size_t)C, 2), *b32 = random_floats((size_t)C, 1);
    float *dy = random_floats((size_t)BT * C, 1);
    uint16_t *g, *b;
    float *gw, *bw;
    rounded(g32, (size_t)C, &g, &gw);
    rounded(b32, (size_t)C, &b, &bw);
    float y[2][12 * 40], mean[2][12], rstd[2][12], dx[2][12 * 40] = {{0}}, dg[2][40] = {{0}}, db[2][40] = {{0}};
    b16->layernorm_forward(y[0], mean[0], rstd[0], x, g, b, BT, C);
    f32->layernorm_forward(y[1], mean[1], rstd[1], x, gw, bw, BT, C);
    ck_assert(memcmp(y[0], y[1], sizeof y[0]) == 0 && memcmp(rstd[0], rstd[1], sizeof rstd[0]) == 0);
    b16->layernorm_backward(dx[0], dg[0], db[0], dy, x, g, mean[0], rstd[0], BT, C);
    f32->layernorm_backward(dx[1], dg[1], db[1], dy, x, gw, mean[1], rstd[1], BT, C);
    ck_assert(memcmp(dx[0], dx[1], sizeof dx[0]) == 0 && memcmp(dg[0], dg[1], sizeof dg[0]) == 0);

    float *te32 = random_floats((size_t)V * C, 1), *pe32 = random_floats((size_t)T * C, 1);
    uint16_t *te, *pe;
    float *tew, *pew;
    rounded(te32, (size_t)V * C, &te, &tew);
    rounded(pe32, (size_t)T * C, &pe, &pew);
    int tokens[12];
    for (int i = 0; i < B * T; i++) tokens[i] = (i * 7 + 3) % V;
    float e[2][12 * 40];
    b16->embedding_forward(e[0], tokens, te, pe, B, T, C);
    f32->embedding_forward(e[1], tokens, tew, pew, B, T, C);
    ck_assert(memcmp(e[0], e[1], sizeof e[0]) == 0);
    free(x); free(g32); free(b32); free(dy); free(g); free(b); free(gw); free(bw);
    free(te32); free(pe32); free(te); free(pe); free(tew); free(pew);
}
END_TEST

static Suite *bf16_suite(void)
{
    const TTest *core[] = {test_rounding, test_matmul_bitwise, test_layernorm_and_embedding, NULL};
    const TTest *core_slow[] = {test_matmul_in_pieces, NULL};
    const osdp_check_case cases[] = {
        {.name = "core", .tests = core}, {.name = "core_slow", .tests = core_slow, .slow = 1},
    };
    return osdp_check_suite("bf16", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = bf16_suite};

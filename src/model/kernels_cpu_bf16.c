/* Kernels of the CPU bf16 table (osdp_compute_cpu_bf16): the working weights
 * are bf16, everything else fp32.  A product widens the weight rows it needs
 * to fp32 (a bounded scratch) and runs the fp32 kernel on them, so the
 * results are those of the fp32 table on weights rounded to bf16.  It exists
 * so that the mixed-precision path of the runtime (bf16 copies of the master
 * shards, bf16 all-gathers, fp32 gradients) runs and is tested on MPI ranks
 * without a GPU; the widening costs time, and it is not meant for speed.
 *
 * bf16 activations (--activation-dtype bf16, osdp/layout.h) need nothing
 * here: the operators (gpt_ops.c) compute each bf16 activation in fp32 in a
 * piece of the runtime's workspace, round it, store it narrow, and widen it
 * there again for the backward, so every kernel keeps reading fp32.  That
 * copy is counted (the size table's OSDP_S_ACT), where a widening inside
 * these kernels would add an uncounted scratch the size of the largest
 * activation and a second path through every product; the counted copy is
 * the simpler design that keeps memory exact, and the same on every table. */
#include "osdp/dtype.h"
#include "osdp/error.h"
#include "model/kernels_cpu.h"

#include "kernels_cpu_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

/* weight elements widened at once: 16 MiB of fp32 */
#define WIDEN_MAX_ELEMENTS ((size_t)1 << 22)

/* One process-wide scratch, grown on demand: the kernels run one at a time
 * on the rank's thread (OpenMP parallelism is inside them).  Kept until exit.
 * NULL when it cannot grow (an unrecoverable error is recorded): the kernel
 * then does nothing. */
static float *widen_scratch(size_t n)
{
    static float *buf;
    static size_t cap;
    if (n > cap) {
        free(buf);
        buf = malloc(n * sizeof *buf);
        cap = buf ? n : 0;
        if (!buf)   /* a kernel cannot return an error (osdp/compute.h) */
            osdp_error_unrecoverable(OSDP_ERR_OOM, "out of host memory for %zu bytes of bf16 widening scratch",
                                     n * sizeof *buf);
    }
    return buf;
}

OSDP_VECTOR_CLONES static void widen(float *dst, const uint16_t *src, size_t n)
{
    OMP(parallel for simd if(n > 4 * PAR_MIN_WORK) schedule(static))
    for (size_t i = 0; i < n; i++) dst[i] = osdp_bf16_to_float(src[i]);
}

OSDP_VECTOR_CLONES void cpu_bf16_convert_weights(void *dst, const float *src, size_t n)
{
    uint16_t *d = dst;
    OMP(parallel for simd if(n > 4 * PAR_MIN_WORK) schedule(static))
    for (size_t i = 0; i < n; i++) d[i] = osdp_bf16_from_float(src[i]);
}

OSDP_VECTOR_CLONES void cpu_bf16_residual_round(float *x, size_t n)
{
    OMP(parallel for simd if(n > 4 * PAR_MIN_WORK) schedule(static))
    for (size_t i = 0; i < n; i++) x[i] = osdp_bf16_to_float(osdp_bf16_from_float(x[i]));
}

void cpu_bf16_residual_widen(float *dst, const void *src, size_t n)
{
    widen(dst, src, n);
}

/* rows of a (IC, OC) weight widened per product: all of them when they fit */
static int rows_per_piece(int IC, int OC)
{
    size_t r = WIDEN_MAX_ELEMENTS / (size_t)(OC > 0 ? OC : 1);
    if (r < 1) r = 1;
    return r >= (size_t)IC ? IC : (int)r;
}

void cpu_bf16_matmul_forward_strided(float *y, const float *x, int ldx, const void *w, const void *b,
                                     int BT, int IC, int OC, int accumulate)
{
    const uint16_t *W = w;
    const int rows = rows_per_piece(IC, OC);
    float *buf = widen_scratch((size_t)rows * OC + (size_t)OC);
    if (!buf) return;
    float *bias = b ? buf + (size_t)rows * OC : NULL;
    if (b) widen(bias, b, (size_t)OC);
    for (int r0 = 0; r0 < IC; r0 += rows) {
        int r1 = r0 + rows < IC ? r0 + rows : IC;
        widen(buf, W + (size_t)r0 * OC, (size_t)(r1 - r0) * OC);
        matmul_forward_strided(y, x + r0, ldx, buf, r0 == 0 ? bias : NULL, BT, r1 - r0, OC, accumulate || r0 > 0);
    }
}

void cpu_bf16_matmul_forward(float *y, const float *x, const void *w, const void *b, int BT, int IC, int OC,
                             int accumulate)
{
    cpu_bf16_matmul_forward_strided(y, x, IC, w, b, BT, IC, OC, accumulate);
}

/* Calls use(arg, rows, r0, r1) for consecutive blocks of rows [r0, r1) of the
 * bf16 matrix w (n_rows, row_len), rows holding them widened to fp32 */
typedef void (*widened_rows_fn)(void *arg, const float *rows, int r0, int r1);
static void for_widened_rows(const void *w, int n_rows, int row_len, widened_rows_fn use, void *arg)
{
    const uint16_t *W = w;
    const int rows = rows_per_piece(n_rows, row_len);
    float *buf = widen_scratch((size_t)rows * row_len);
    if (!buf) return;
    for (int r0 = 0; r0 < n_rows; r0 += rows) {
        int r1 = r0 + rows < n_rows ? r0 + rows : n_rows;
        widen(buf, W + (size_t)r0 * row_len, (size_t)(r1 - r0) * row_len);
        use(arg, buf, r0, r1);
    }
}

/* a product's operands, for the pieces of for_widened_rows */
typedef struct product_args {
    float *y, *dx, *dw, *db;
    const float *x, *dy;
    int ldx, lddx, BT, IC, OC, accumulate;
} product_args;

/* rows [r0, r1) of an (IC, OC) weight: dx's columns, dw's rows */
static void backward_rows(void *arg, const float *w, int r0, int r1)
{
    const product_args *a = arg;
    matmul_backward_strided(a->dx ? a->dx + r0 : NULL, a->lddx, a->dw + (size_t)r0 * a->OC, r0 == 0 ? a->db : NULL,
                            a->dy, a->x + r0, a->ldx, w, a->BT, r1 - r0, a->OC, a->accumulate);
}

/* dW (fp32) needs no weights; dx = dy W^T column block by column block */
void cpu_bf16_matmul_backward_strided(float *dx, int lddx, float *dw, float *db, const float *dy, const float *x,
                                      int ldx, const void *w, int BT, int IC, int OC, int dx_accumulate)
{
    product_args a = {.dx = dx, .dw = dw, .db = db, .x = x, .dy = dy, .ldx = ldx, .lddx = lddx, .BT = BT, .IC = IC,
                      .OC = OC, .accumulate = dx_accumulate};
    for_widened_rows(w, IC, OC, backward_rows, &a);
}

void cpu_bf16_matmul_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const void *w,
                              int BT, int IC, int OC, int dx_accumulate)
{
    cpu_bf16_matmul_backward_strided(dx, IC, dw, db, dy, x, IC, w, BT, IC, OC, dx_accumulate);
}

/* rows [r0, r1) of an (OC, IC) weight: y's columns */
static void forward_out_in_rows(void *arg, const float *w, int r0, int r1)
{
    const product_args *a = arg;
    matmul_out_in_forward(a->y + r0, a->OC, a->x, w, a->BT, a->IC, r1 - r0, a->accumulate);
}

/* rows [r0, r1) of an (OC, IC) weight: dy's columns, dw's rows; dx sums the pieces' products */
static void backward_out_in_rows(void *arg, const float *w, int r0, int r1)
{
    const product_args *a = arg;
    matmul_out_in_backward(a->dx, a->dw + (size_t)r0 * a->IC, a->dy + r0, a->OC, a->x, w, a->BT, a->IC, r1 - r0,
                           a->accumulate || r0 > 0);
}

void cpu_bf16_matmul_forward_out_in(float *y, const float *x, const void *w, int BT, int IC, int OC, int accumulate)
{
    product_args a = {.y = y, .x = x, .BT = BT, .IC = IC, .OC = OC, .accumulate = accumulate};
    for_widened_rows(w, OC, IC, forward_out_in_rows, &a);
}

void cpu_bf16_matmul_backward_out_in(float *dx, float *dw, const float *dy, const float *x, const void *w, int BT,
                                     int IC, int OC, int dx_accumulate)
{
    product_args a = {.dx = dx, .dw = dw, .x = x, .dy = dy, .BT = BT, .IC = IC, .OC = OC, .accumulate = dx_accumulate};
    for_widened_rows(w, OC, IC, backward_out_in_rows, &a);
}

void cpu_bf16_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const void *w, const void *b,
                                int BT, int C)
{
    float *buf = widen_scratch(2 * (size_t)C);
    if (!buf) return;
    widen(buf, w, (size_t)C);
    widen(buf + C, b, (size_t)C);
    layernorm_forward(y, mean, rstd, x, buf, buf + C, BT, C);
}

void cpu_bf16_residual_layernorm_forward(float *res, float *y, float *mean, float *rstd, const float *a,
                                         const float *b, const void *w, const void *bias, int BT, int C)
{
    float *buf = widen_scratch(2 * (size_t)C);
    if (!buf) return;
    widen(buf, w, (size_t)C);
    widen(buf + C, bias, (size_t)C);
    residual_layernorm_forward(res, y, mean, rstd, a, b, buf, buf + C, BT, C);
}

void cpu_bf16_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const void *w,
                                 const float *mean, const float *rstd, int BT, int C)
{
    float *buf = widen_scratch((size_t)C);
    if (!buf) return;
    widen(buf, w, (size_t)C);
    layernorm_backward(dx, dw, db, dy, x, buf, mean, rstd, BT, C);
}

void cpu_bf16_embedding_forward_range(float *x, const int *tokens, const void *wte, const void *wpe, int B, int T,
                                      int C, int vocab_lo, int vocab_n)
{
    const uint16_t *te = wte, *pe = wpe;
    OMP(parallel for if((long)B * T * C > PAR_MIN_WORK) schedule(static))
    for (long bt = 0; bt < (long)B * T; bt++) {
        const long row = (long)tokens[bt] - vocab_lo;
        const uint16_t *a = row >= 0 && row < vocab_n ? te + (size_t)row * C : NULL;
        const uint16_t *p = pe ? pe + (size_t)(bt % T) * C : NULL;
        float *out = x + (size_t)bt * C;
        for (int c = 0; c < C; c++)
            out[c] = (a ? osdp_bf16_to_float(a[c]) : 0.0f) + (p ? osdp_bf16_to_float(p[c]) : 0.0f);
    }
}

void cpu_bf16_embedding_forward(float *x, const int *tokens, const void *wte, const void *wpe, int B, int T, int C)
{
    cpu_bf16_embedding_forward_range(x, tokens, wte, wpe, B, T, C, 0, INT_MAX);
}

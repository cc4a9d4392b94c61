/* The CPU compute backend: host memory, OpenBLAS GEMMs, C kernels. */
#include "config.h"
#include "osdp/compute.h"
#include "model/kernels_cpu.h"

#include "kernels_cpu_internal.h"

#include <cblas.h>
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

extern void openblas_set_num_threads(int);

static osdp_status cpu_init(int local_rank, int threads)
{
    (void)local_rank;
    /* The runtime allocates and frees activations and gathered weights every
     * micro-step.  Keep blocks up to 32 MiB in the heap rather than mmap'ing
     * them, and never give the heap back: otherwise each step pays page faults
     * on memory it just released. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, -1);
    if (threads > 0) {
        openblas_set_num_threads(threads);
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
    }
    return OSDP_OK;
}

static void *cpu_alloc(size_t bytes)
{
    /* 64-byte alignment for vector loads; contents undefined, like cudaMalloc */
    size_t rounded = (bytes + 63) / 64 * 64;
    return aligned_alloc(64, rounded ? rounded : 64);
}

static void cpu_free(void *p) { free(p); }
static void cpu_fill_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_synchronize(void) {}

static double cpu_sum(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    return s;
}

/* in double, 8 lanes in a fixed order (vectorised; the same bits on any
 * thread count: it runs on one) */
OSDP_VECTOR_CLONES static double cpu_sum_squares(const float *x, size_t n)
{
    double s = 0;
    OMP(simd reduction(+:s) simdlen(8))
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

static void cpu_accumulate_sum(double *acc, const float *x, size_t n, int squares)
{
    *acc += squares ? cpu_sum_squares(x, n) : cpu_sum(x, n);
}

/* memory-bound: w, m, v read and written, g read, in one pass; the bias
 * corrections are folded into two constants */
OSDP_VECTOR_CLONES static void cpu_adamw(float *w, const float *g, float *m, float *v, size_t n, float lr,
                                         float beta1, float beta2, float eps, float weight_decay,
                                         float grad_scale, long t)
{
    const float inv_c1 = 1.0f / (1.0f - powf(beta1, (float)t));
    const float inv_c2 = 1.0f / (1.0f - powf(beta2, (float)t));
    OMP(parallel for simd if(n > 65536) schedule(static))
    for (size_t i = 0; i < n; i++) {
        float grad = g[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * grad;
        float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
        m[i] = mi;
        v[i] = vi;
        w[i] -= lr * (mi * inv_c1 / (sqrtf(vi * inv_c2) + eps) + weight_decay * w[i]);
    }
}

/* The fp32 table's weight entries: the kernels of osdp/kernels_cpu.h take
 * float weights, the table's `const void *` (osdp/compute.h) */
static void cpu_matmul_forward(float *y, const float *x, const void *w, const void *b, int BT, int IC, int OC,
                               int accumulate)
{
    matmul_forward(y, x, w, b, BT, IC, OC, accumulate);
}
static void cpu_matmul_forward_strided(float *y, const float *x, int ldx, const void *w, const void *b, int BT,
                                       int IC, int OC, int accumulate)
{
    matmul_forward_strided(y, x, ldx, w, b, BT, IC, OC, accumulate);
}
static void cpu_matmul_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const void *w,
                                int BT, int IC, int OC, int dx_accumulate)
{
    matmul_backward(dx, dw, db, dy, x, w, BT, IC, OC, dx_accumulate);
}
static void cpu_matmul_backward_strided(float *dx, int lddx, float *dw, float *db, const float *dy,
                                        const float *x, int ldx, const void *w, int BT, int IC, int OC,
                                        int dx_accumulate)
{
    matmul_backward_strided(dx, lddx, dw, db, dy, x, ldx, w, BT, IC, OC, dx_accumulate);
}
static void cpu_matmul_forward_out_in(float *y, const float *x, const void *w, int BT, int IC, int OC,
                                      int accumulate)
{
    matmul_out_in_forward(y, OC, x, w, BT, IC, OC, accumulate);
}
static void cpu_matmul_backward_out_in(float *dx, float *dw, const float *dy, const float *x, const void *w,
                                       int BT, int IC, int OC, int dx_accumulate)
{
    matmul_out_in_backward(dx, dw, dy, OC, x, w, BT, IC, OC, dx_accumulate);
}
static void cpu_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const void *w,
                                  const void *b, int BT, int C)
{
    layernorm_forward(y, mean, rstd, x, w, b, BT, C);
}
static void cpu_residual_layernorm_forward(float *res, float *y, float *mean, float *rstd, const float *a,
                                           const float *b, const void *w, const void *bias, int BT, int C)
{
    residual_layernorm_forward(res, y, mean, rstd, a, b, w, bias, BT, C);
}
static void cpu_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                                   const void *w, const float *mean, const float *rstd, int BT, int C)
{
    layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, BT, C);
}
static void cpu_embedding_forward(float *x, const int *tokens, const void *wte, const void *wpe, int B, int T,
                                  int C)
{
    embedding_forward(x, tokens, wte, wpe, B, T, C);
}
static void cpu_embedding_forward_range(float *x, const int *tokens, const void *wte, const void *wpe, int B,
                                        int T, int C, int vocab_lo, int vocab_n)
{
    embedding_forward_range(x, tokens, wte, wpe, B, T, C, vocab_lo, vocab_n);
}

/* the entries both CPU tables share: those that never read weights */
#define CPU_COMMON_ENTRIES \
    .name = "cpu", \
    .init = cpu_init, \
    .alloc = cpu_alloc, \
    .free = cpu_free, \
    .fill_zero = cpu_fill_zero, \
    .copy = cpu_copy, \
    .to_device = cpu_copy, \
    .to_host = cpu_copy, \
    .synchronize = cpu_synchronize, \
    .gelu_forward = gelu_forward, \
    .gelu_backward = gelu_backward, \
    .attention_forward = attention_forward, \
    .attention_backward = attention_backward, \
    .attention_forward_tiled = attention_forward_tiled, \
    .attention_backward_tiled = attention_backward_tiled, \
    .crossentropy_lse = crossentropy_lse, \
    .crossentropy_backward_lse = crossentropy_backward_lse, \
    .embedding_backward = embedding_backward, \
    .embedding_backward_range = embedding_backward_range, \
    .crossentropy_stats = crossentropy_stats, \
    .crossentropy_finish = crossentropy_finish, \
    .crossentropy_backward_range = crossentropy_backward_range, \
    .crossentropy_forward = crossentropy_forward, \
    .crossentropy_backward = crossentropy_backward, \
    .residual_forward = residual_forward, \
    .vector_accumulate = vector_accumulate, \
    .sum = cpu_sum, \
    .sum_squares = cpu_sum_squares, \
    .accumulate_sum = cpu_accumulate_sum, \
    .adamw = cpu_adamw, \
    .pad_quantum = 1, \
    .vocab_quantum = 1

/* the eleven entries that read weights, one function each per weight type:
 * PREFIX##matmul_forward and so on (cpu_ for float32, cpu_bf16_ for bfloat16) */
#define CPU_WEIGHT_ENTRIES(prefix) \
    .matmul_forward = prefix##matmul_forward, \
    .matmul_backward = prefix##matmul_backward, \
    .matmul_forward_strided = prefix##matmul_forward_strided, \
    .matmul_backward_strided = prefix##matmul_backward_strided, \
    .matmul_forward_out_in = prefix##matmul_forward_out_in, \
    .matmul_backward_out_in = prefix##matmul_backward_out_in, \
    .layernorm_forward = prefix##layernorm_forward, \
    .residual_layernorm_forward = prefix##residual_layernorm_forward, \
    .layernorm_backward = prefix##layernorm_backward, \
    .embedding_forward = prefix##embedding_forward, \
    .embedding_forward_range = prefix##embedding_forward_range

const osdp_compute_backend osdp_compute_cpu = {
    CPU_COMMON_ENTRIES,
    .weight_dtype = OSDP_FLOAT32,
    .convert_weights = NULL,
    CPU_WEIGHT_ENTRIES(cpu_),
};

const osdp_compute_backend osdp_compute_cpu_bf16 = {
    CPU_COMMON_ENTRIES,
    .weight_dtype = OSDP_BFLOAT16,
    .convert_weights = cpu_bf16_convert_weights,
    .residual_round = cpu_bf16_residual_round,
    .residual_widen = cpu_bf16_residual_widen,
    .matmul_forward_bf16_x = NULL,    /* the products widen inside; gpt_ops.c passes the widened copy */
    .matmul_backward_bf16_x = NULL,
    CPU_WEIGHT_ENTRIES(cpu_bf16_),
};

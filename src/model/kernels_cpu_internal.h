/* Shared by the CPU kernel files (kernels_cpu.c: products and attention;
 * kernels_cpu_rowwise.c: the row-wise and element-wise kernels): OpenMP
 * helpers, the vector clones and the fast exponential. */
#ifndef OSDP_KERNELS_CPU_INTERNAL_H
#define OSDP_KERNELS_CPU_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef _OPENMP
#define OSDP_PRAGMA(x) _Pragma(#x)
#define OMP(x) OSDP_PRAGMA(omp x)
#else
#define OMP(x)
#endif

/* elements of work below which a loop stays serial (thread start-up costs more) */
#define PAR_MIN_WORK 32768L

/* AVX-512 / AVX2 versions chosen at load time (ifunc), SSE2 otherwise: the
 * binary stays portable across cluster nodes. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OSDP_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OSDP_VECTOR_CLONES
#endif

/* e^t for t <= 0, without libm: libm's expf and tanhf do not vectorise, and
 * they took a third of a training step (tanh in GELU) and most of the softmax
 * time.  e^t = 2^n * 2^f, n the nearest integer to t log2(e) (the 1.5*2^23
 * rounding trick) and 2^f, |f| <= 1/2, from a degree-6 Taylor polynomial
 * (relative error < 3e-8); 2^n is built in the exponent bits, and a negative
 * biased exponent (e^t below 2^-126) is masked to 0 without a branch — a
 * float clamp would stop GCC from vectorising the loop.  Relative error
 * against expf < 2e-7.  Pure arithmetic: vectorised, and the same bits on
 * every thread count. */
static inline float exp_nonpositive(float t)
{
    float l = t * 1.44269504088896341f;                   /* log2(e^t) */
    float n = (l + 12582912.0f) - 12582912.0f;            /* round to nearest */
    float f = (l - n) * 0.693147180559945309f;            /* e^f = 2^(l-n) */
    float p = 1.0f + f * (1.0f + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720))))));
    int32_t biased = (int32_t)n + 127;
    biased &= ~(biased >> 31);                            /* < 0 -> 0: underflows to 0 */
    union { int32_t i; float f; } scale = {.i = biased << 23};
    return p * scale.f;
}

/* The largest of start and s[0, n): the max of a softmax row (exact in any
 * order, so the simd reduction gives the same bits as a loop) */
static inline float row_max(const float *s, int n, float start)
{
    float mx = start;
    OMP(simd reduction(max:mx))
    for (int j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    return mx;
}

/* s[j] = e^(s[j] - shift) over [0, n), their sum returned: a softmax row's
 * numerators, shift its max (so every exponent is <= 0) */
static inline float exp_shifted_in_place(float *s, int n, float shift)
{
    float sum = 0.0f;
    OMP(simd reduction(+:sum))
    for (int j = 0; j < n; j++) {
        float e = exp_nonpositive(s[j] - shift);
        s[j] = e;
        sum += e;
    }
    return sum;
}

/* kernels_cpu_bf16.c: the bf16-weight entries of osdp_compute_cpu_bf16 */
void cpu_bf16_convert_weights(void *dst, const float *src, size_t n);
void cpu_bf16_residual_round(float *x, size_t n);
void cpu_bf16_residual_widen(float *dst, const void *src, size_t n);
void cpu_bf16_matmul_forward(float *y, const float *x, const void *w, const void *b, int BT, int IC, int OC,
                             int accumulate);
void cpu_bf16_matmul_forward_strided(float *y, const float *x, int ldx, const void *w, const void *b,
                                     int BT, int IC, int OC, int accumulate);
void cpu_bf16_matmul_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const void *w,
                              int BT, int IC, int OC, int dx_accumulate);
void cpu_bf16_matmul_backward_strided(float *dx, int lddx, float *dw, float *db, const float *dy, const float *x,
                                      int ldx, const void *w, int BT, int IC, int OC, int dx_accumulate);
void cpu_bf16_matmul_forward_out_in(float *y, const float *x, const void *w, int BT, int IC, int OC, int accumulate);
void cpu_bf16_matmul_backward_out_in(float *dx, float *dw, const float *dy, const float *x, const void *w, int BT,
                                     int IC, int OC, int dx_accumulate);
void cpu_bf16_residual_layernorm_forward(float *res, float *y, float *mean, float *rstd, const float *a,
                                         const float *b, const void *w, const void *bias, int BT, int C);
void cpu_bf16_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const void *w, const void *b,
                                int BT, int C);
void cpu_bf16_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const void *w,
                                 const float *mean, const float *rstd, int BT, int C);
void cpu_bf16_embedding_forward(float *x, const int *tokens, const void *wte, const void *wpe, int B, int T, int C);
void cpu_bf16_embedding_forward_range(float *x, const int *tokens, const void *wte, const void *wpe, int B, int T,
                                      int C, int vocab_lo, int vocab_n);

#endif

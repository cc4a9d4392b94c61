/* Host-side launchers of the CUDA kernels in kernels_cuda.cu, and the bf16
 * matrix products of matmul_bf16.cu (C++ linkage, used only by the .cu files
 * of src/cuda/).  Every launcher queues its work on `s` (or ctx.stream)
 * and returns at once; the semantics are those of src/model/kernels_cpu.h.
 *
 * Weight types.  The launchers that read working weights (bias_rows,
 * layernorm_*, embedding_forward) are templates on the weight element type W,
 * instantiated for float (the fp32 table) and __nv_bfloat16 (the bf16 table);
 * a bf16 weight is widened to float as it is read, and all arithmetic is fp32.
 *
 * Determinism: no kernel here uses floating-point atomics.  Every reduction
 * is a fixed tree (warp butterflies, then shared memory in lane order) or a
 * loop in a fixed order, and launch shapes depend only on the problem sizes,
 * so identical inputs give bitwise identical outputs run after run. */
#ifndef OSDP_KERNELS_CUDA_CUH
#define OSDP_KERNELS_CUDA_CUH

#include <cstddef>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace osdp_cuda {

/* y (BT,OC) = b broadcast over rows, or y += b when accumulate != 0 */
template <class W>
void bias_rows(float *y, const W *b, int BT, int OC, int accumulate, cudaStream_t s);
/* db (OC) += column sums of dy (BT,OC), each summed over rows in a fixed order */
void column_sums_add(float *db, const float *dy, int BT, int OC, cudaStream_t s);

/* Y, y's element type: float, or __nv_bfloat16 (the bf16 table's stored activations, rounded as stored; the bits
 * of the float form rounded: layernorm_gelu.cuh) */
template <class W, class Y>
void layernorm_forward(Y *y, float *mean, float *rstd, const float *x, const W *w, const W *b, int BT, int C,
                       cudaStream_t s);
/* res = a + b, then y = layernorm(res) (res may alias a or b): one kernel,
 * a warp per row (residual_layernorm.cuh) */
template <class W, class Y>
void residual_layernorm_forward(float *res, Y *y, float *mean, float *rstd, const float *a, const float *b,
                                const W *w, const W *bias, int BT, int C, cudaStream_t s);
/* partials: 2 * layernorm_dwdb_chunks(BT, C) * C floats of scratch for the
 * two-pass sums of dw and db (contents undefined; free after the call in
 * stream order) */
int layernorm_dwdb_chunks(int BT, int C);
template <class W>
void layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                        const W *w, const float *mean, const float *rstd, int BT, int C,
                        float *partials, cudaStream_t s);

/* X, Y: float, or __nv_bfloat16 for both (a stored bf16 fc in, the stored bf16 GELU output out); the
 * backward's x (the pre-activation) float or __nv_bfloat16, widened as read (layernorm_gelu.cuh) */
template <class X, class Y> void gelu_forward(Y *y, const X *x, size_t n, cudaStream_t s);
template <class X> void gelu_backward(float *dx, const X *x, const float *dy, size_t n, cudaStream_t s);

/* att: `rows` = B*NH*T rows of length T, row r has query index r % T.
 * In: scaled scores (anything above the diagonal).  Out: causal softmax,
 * exact zeros above the diagonal. */
void causal_softmax_forward(float *att, long rows, int T, cudaStream_t s);
/* d (in: datt, out: dpre) = scale * att * (datt - sum_j att*datt) on and
 * below the diagonal, exact zeros above it. */
void causal_softmax_backward(float *d, const float *att, long rows, int T, float scale,
                             cudaStream_t s);

template <class W>
void embedding_forward(float *x, const int *tokens, const W *wte, const W *wpe,
                       int B, int T, int C, cudaStream_t s);
/* over the vocabulary rows [vocab_lo, vocab_lo + vocab_n) wte holds; wpe NULL: none */
template <class W>
void embedding_forward_range(float *x, const int *tokens, const W *wte, const W *wpe, int B,
                             int T, int C, int vocab_lo, int vocab_n, cudaStream_t s);
/* dwte (V,C) +=, dwpe (T,C) +=; every row accumulated in token-position
 * order, the same order (and so the same bits) as the CPU kernel.  `scratch`
 * is device memory of at least embedding_backward_scratch_bytes(B, T) bytes
 * (the sort of the token ids), free for the kernels queued on `s`. */
size_t embedding_backward_scratch_bytes(int B, int T);
void embedding_backward(float *dwte, float *dwpe, const float *dx, const int *tokens,
                        int B, int T, int C, void *scratch, size_t scratch_bytes,
                        cudaStream_t s);
/* over the rows [vocab_lo, vocab_lo + vocab_n) dwte holds; dwpe NULL: none */
void embedding_backward_range(float *dwte, float *dwpe, const float *dx, const int *tokens,
                              int B, int T, int C, int vocab_lo, int vocab_n, void *scratch,
                              size_t scratch_bytes, cudaStream_t s);

void crossentropy_forward(float *losses, float *probs, const int *targets, int BT, int V,
                          cudaStream_t s);
void crossentropy_backward(float *dlogits, const float *probs, const int *targets,
                           float scale, int BT, int V, cudaStream_t s);
/* the vocab-parallel cross-entropy (osdp/compute.h) */
void crossentropy_stats(float *stats, const float *logits, const int *targets, int BT, int V,
                        int valid, int vocab_lo, cudaStream_t s);
void crossentropy_finish(float *losses, float *probs, const float *group_stats, int BT, int V,
                         int valid, int group_size, cudaStream_t s);
void crossentropy_backward_range(float *dlogits, const float *probs, const int *targets,
                                 float scale, int BT, int V, int vocab_lo, cudaStream_t s);

/* the fused head's halves (osdp/compute.h): losses and log-sum-exp (BT) from
 * the group's statistics; d(logits) of a chunk of recomputed logits in place */
void crossentropy_lse(float *losses, float *lse, const float *group_stats, int BT, int group_size,
                      cudaStream_t s);
void crossentropy_backward_lse(float *dlogits, const float *lse, const int *targets, float scale, int BT,
                               int V, int valid, int vocab_lo, cudaStream_t s);

/* The tiled causal attention (attention_tiled.cu; attention_forward_tiled /
 * attention_backward_tiled of src/model/kernels_cpu.h): E, the element type
 * of the Q, K, V, dO tiles, is float or __nv_bfloat16 (rounded as loaded;
 * fp32 arithmetic either way).  Out, the heads' element type: float, or
 * __nv_bfloat16 (with E bf16: the stored bf16 heads under --activation-dtype
 * bf16, each value rounded as written).  The backward overwrites dqkv and
 * uses rowdot (B,NH,T) as scratch. */
template <class E, class Out = float>
void attention_tiled_forward(Out *out, float *lse, const float *qkv, int B, int T, int C, int NH,
                             cudaStream_t s);
template <class E>
void attention_tiled_backward(float *dqkv, float *rowdot, const float *dout, const float *out,
                              const float *qkv, const float *lse, int B, int T, int C, int NH,
                              cudaStream_t s);

void residual_forward(float *out, const float *a, const float *b, size_t n, cudaStream_t s);
void vector_accumulate(float *y, const float *x, size_t n, cudaStream_t s);

/* Sum (squares != 0: sum of squares) of x in double.  `partials` is device
 * scratch of at least REDUCE_PARTIALS + 1 doubles; the result is written to
 * partials[REDUCE_PARTIALS] (device memory), or added to *acc (device
 * memory) when acc is not NULL. */
enum { REDUCE_PARTIALS = 512 };
void reduce_sum(const float *x, size_t n, int squares, double *partials, double *acc, cudaStream_t s);

void adamw(float *w, const float *g, float *m, float *v, size_t n, float lr, float beta1,
           float beta2, float c1, float c2, float eps, float weight_decay, float grad_scale,
           cudaStream_t s);

/* ------------------------------------------------ bf16 (matmul_bf16.cu) */

/* dst (n bf16) = src (n fp32), round to nearest even (__float2bfloat16) */
void convert_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n, cudaStream_t s);
/* x (n fp32) rounded to bf16 values in place, the same rounding; dst (n fp32) = src (n bf16), exact */
void round_to_bf16_values(float *x, size_t n, cudaStream_t s);
void widen_from_bf16(float *dst, const __nv_bfloat16 *src, size_t n, cudaStream_t s);

/* What the bf16 products need from the backend: its cuBLAS handle (bound to
 * `stream`), the compute stream, and its scratch, `scratch(bytes)` returning
 * at least `bytes` of device memory free for the work queued on `stream` from
 * then on (contents undefined). */
struct GemmContext {
    cublasHandle_t cublas;
    cudaStream_t stream;
    void *(*scratch)(size_t bytes);
    /* non-NULL: the products with a bias (and GELU) put them, and in the backward their
     * gradients, in cuBLASLt's epilogues (OSDP_CUDA_LT_EPILOGUES=1, backend_cuda.cu);
     * NULL: cuBLAS and our kernels */
    cublasLtHandle_t lt;
};

/* Most bytes of bf16 staging (x and dy rounded to bf16) that one product asks
 * the scratch for; rows are processed in chunks to stay below it (one row
 * more than fits is still staged whole). */
const size_t BF16_STAGING_MAX_BYTES = (size_t)64 << 20;

/* matmul_forward_strided / matmul_backward_strided of kernels_cpu.h with w
 * (IC,OC) and b (OC) in bf16: cublasGemmEx with bf16 A and B, fp32 C and
 * CUBLAS_COMPUTE_32F; x and dy are rounded to bf16 chunk by chunk in the
 * scratch; db is summed from the fp32 dy. */
void matmul_bf16_forward(const GemmContext &ctx, float *y, const float *x, int ldx,
                         const __nv_bfloat16 *w, const __nv_bfloat16 *b, int BT, int IC, int OC,
                         int accumulate);
void matmul_bf16_backward(const GemmContext &ctx, float *dx, int lddx, float *dw, float *db,
                          const float *dy, const float *x, int ldx, const __nv_bfloat16 *w,
                          int BT, int IC, int OC, int dx_accumulate);
/* matmul_forward_bf16_x / matmul_backward_bf16_x of osdp/compute.h: matmul_bf16_forward and
 * matmul_bf16_backward (ldx = lddx = IC) with x already bf16 (a stored activation), read in place where
 * they stage x; the same products, hence the same results as on x widened */
void matmul_bf16_forward_direct(const GemmContext &ctx, float *y, const __nv_bfloat16 *x,
                                const __nv_bfloat16 *w, const __nv_bfloat16 *b, int BT, int IC, int OC,
                                int accumulate);
void matmul_bf16_backward_direct(const GemmContext &ctx, float *dx, float *dw, float *db, const float *dy,
                                 const __nv_bfloat16 *x, const __nv_bfloat16 *w, int BT, int IC, int OC,
                                 int dx_accumulate);
/* matmul_forward_gelu of osdp/compute.h with w (IC,OC) and b (OC) in bf16:
 * pre = x w + b, y = GELU(pre).  With ctx.lt, one cuBLASLt product per row
 * chunk with CUBLASLT_EPILOGUE_GELU_AUX_BIAS (pre its aux output; the bias
 * widened to fp32, the output's type) where cuBLASLt has an algorithm for
 * it (OC a multiple of 8); else matmul_bf16_forward and gelu_forward. */
void matmul_bf16_forward_gelu(const GemmContext &ctx, float *y, float *pre, const float *x,
                              const __nv_bfloat16 *w, const __nv_bfloat16 *b, int BT, int IC, int OC);

/* matmul_forward_gelu_bf16 of osdp/compute.h (--activation-dtype bf16, ctx.lt): pre = x w + b and y = GELU(pre)
 * both bf16 (the stored fc and gelu), x the stored bf16 ln, by one cuBLASLt product with GELU_AUX_BIAS and a
 * bf16 output; false (nothing queued) without ctx.lt, or where cuBLASLt offers no algorithm or OC is not a
 * multiple of 8 */
bool matmul_bf16_forward_gelu_bf16(const GemmContext &ctx, __nv_bfloat16 *y, __nv_bfloat16 *pre,
                                   const __nv_bfloat16 *x, const __nv_bfloat16 *w, const __nv_bfloat16 *b, int BT,
                                   int IC, int OC);

/* matmul_backward_dgelu of osdp/compute.h with w (IC,OC) in bf16: dw += x^T dy, db += dy's column sums,
 * dpre = GELU'(pre) * (dy w^T), db_pre += dpre's column sums (NULL: none).  Without ctx.lt the calls
 * gpt_ops.c makes otherwise (the same bits); with ctx.lt the products' epilogues in cuBLASLt
 * (DGELU_BGRAD on the dx product, BGRADA on the dw product) where it offers an algorithm.  With ctx.lt
 * matmul_bf16_backward's row chunks make db by BGRADA too. */
void matmul_bf16_backward_dgelu(const GemmContext &ctx, float *dpre, float *dw, float *db, float *db_pre,
                                const float *dy, const float *x, const float *pre, const __nv_bfloat16 *w, int BT,
                                int IC, int OC);

/* matmul_out_in_forward / _backward of kernels_cpu.h (w stored (OC,IC), no
 * bias; contiguous y, dy) with w in bf16, staged and chunked as above */
void matmul_bf16_forward_out_in(const GemmContext &ctx, float *y, const float *x,
                                const __nv_bfloat16 *w, int BT, int IC, int OC, int accumulate);
void matmul_bf16_backward_out_in(const GemmContext &ctx, float *dx, float *dw, const float *dy,
                                 const float *x, const __nv_bfloat16 *w, int BT, int IC, int OC,
                                 int dx_accumulate);

/* head_backward_lse of osdp/compute.h with w in bf16 (out_in: the tied
 * head's wte (V,d), else lm_head (d,V)): d(logits) of the chunk's logits
 * written in bf16 into the staging, then dln = dlogits w^T (overwrite), dw +=
 * ln^T dlogits; the logits are left unchanged */
void head_bf16_backward_lse(const GemmContext &ctx, float *dln, float *dw, const float *logits, const float *lse,
                            const int *targets, float scale, const float *ln, const __nv_bfloat16 *w, int rows,
                            int d, int V, int valid, int vocab_lo, int out_in);

}  // namespace osdp_cuda

#endif

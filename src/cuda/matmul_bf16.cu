/* The matrix products of the CUDA bf16 table (osdp_compute_cuda_bf16): bf16
 * operands, fp32 accumulation and fp32 results, on cuBLAS tensor cores.
 * Launchers declared in kernels_cuda.cuh; semantics of matmul_forward_strided
 * and matmul_backward_strided in src/model/kernels_cpu.h.
 *
 * The weights arrive in bf16 (the runtime's working copy); the activations x
 * and dy are fp32 in memory, or x is a stored bf16 activation (the _direct
 * products, --activation-dtype bf16: read in place, XOperand).  Each product
 * rounds an fp32 operand to bf16 (round to nearest even) into the backend's
 * scratch, then calls
 * cublasGemmEx with CUDA_R_16BF A and B, CUDA_R_32F C and CUBLAS_COMPUTE_32F.
 * The staging is bounded: the BT rows are processed in chunks of at most
 * BF16_STAGING_MAX_BYTES of bf16 (x rows, plus dy rows in the backward), so
 * the LM head's dy (BT x V, e.g. 16384 x 50257) never has a whole bf16 copy.
 * Rows of y and dx are independent between chunks.  dw = x^T dy sums over
 * the rows: where dy's rows take more than one chunk (the LM head), dw is
 * made by output-feature slices instead, each ONE product over all the rows
 * (dw_by_columns: dw read and written once, not once per chunk); else the
 * one chunk adds its part with beta = 1 (dw accumulates by contract).  The
 * slicing depends only on the sizes, so results are reproducible run after
 * run.
 *
 * Row-major to column-major, as in backend_cuda.cu: a row-major (m,n) matrix
 * with leading dimension ld is, to cuBLAS, the column-major (n,m) matrix of
 * its transpose, so the row-major C = A B is issued as C^T = B^T A^T.  The
 * operand order of every cublasGemmEx here is that of the fp32 table's
 * cublasSgemm for the same product. */
#include "kernels_cuda.cuh"
#include "cuda_check.h"
#include "head_backward.cuh"

#include <stdint.h>

namespace osdp_cuda {

namespace {

const int kThreads = 256;

unsigned grid_for(size_t n)
{
    size_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > (1u << 20)) blocks = 1u << 20;   /* grid-stride loops do the rest */
    return blocks ? (unsigned)blocks : 1u;
}

__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(src[i]);
}

__global__ void round_to_bf16_values_kernel(float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = __bfloat162float(__float2bfloat16(x[i]));
}

__global__ void widen_from_bf16_kernel(float *dst, const __nv_bfloat16 *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

/* dst (rows, cols) packed = src (rows, cols) with row stride lds; the blocks
 * take the rows in turn, the threads of a block the columns */
__global__ void rows_to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t lds, int rows,
                                    int cols)
{
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *s = src + (size_t)r * lds;
        __nv_bfloat16 *d = dst + (size_t)r * cols;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) d[c] = __float2bfloat16(s[c]);
    }
}

void rows_to_bf16(__nv_bfloat16 *dst, const float *src, int lds, int rows, int cols,
                  cudaStream_t s)
{
    if (rows <= 0 || cols <= 0) return;
    if (lds == cols) {
        convert_to_bf16(dst, src, (size_t)rows * cols, s);
        return;
    }
    const unsigned blocks = rows < (1 << 20) ? (unsigned)rows : (1u << 20);
    rows_to_bf16_kernel<<<blocks, kThreads, 0, s>>>(dst, src, (size_t)lds, rows, cols);
    CUDA_CHECK_LAUNCH();
}

/* column-major C (m,n) = op(A) op(B) + beta C: bf16 A and B, fp32 C, fp32
 * accumulation (tensor cores; CUBLAS_DEFAULT_MATH allows them for bf16) */
void gemm_bf16(const GemmContext &ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
               int k, const __nv_bfloat16 *A, int lda, const __nv_bfloat16 *B, int ldb, float beta,
               float *C, int ldc)
{
    const float alpha = 1.0f;
    CUBLAS_LAUNCH(cublasGemmEx(ctx.cublas, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, B,
                              CUDA_R_16BF, ldb, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

/* Rows per chunk when a row stages `per_row` bf16 elements: as many as fit in
 * BF16_STAGING_MAX_BYTES, a multiple of 64 when more than 64 fit (chunk
 * offsets stay aligned), at least 1, at most BT. */
int chunk_rows(int BT, size_t per_row)
{
    size_t r = BF16_STAGING_MAX_BYTES / (per_row * sizeof(__nv_bfloat16));
    if (r > 64) r = r / 64 * 64;
    if (r < 1) r = 1;
    return r >= (size_t)BT ? BT : (int)r;
}

/* n elements rounded up to 64 (128 bytes of bf16): keeps a second staging
 * array behind the first aligned for the tensor-core kernels */
size_t round64(size_t n) { return (n + 63) / 64 * 64; }

/* A product's activation operand x (rows of ld elements): fp32 (f), staged to bf16 chunk by chunk, or
 * already bf16 (h: a stored bf16 activation, packed, ld == IC), read in place with no staging pass.  The
 * chunks, products and operand orders are the same either way, and so are the bf16 values (the stored
 * piece holds what the staging would round to), hence the results. */
struct XOperand {
    const float *f;
    const __nv_bfloat16 *h;
    XOperand at(size_t off) const { return XOperand{f ? f + off : nullptr, h ? h + off : nullptr}; }
    /* rows [r0, r0+n) of IC elements as packed bf16: staged into xb from f, or h's own (ld == IC) */
    const __nv_bfloat16 *rows(__nv_bfloat16 *xb, int r0, int ld, int n, int IC, cudaStream_t s) const
    {
        if (h) return h + (size_t)r0 * ld;
        rows_to_bf16(xb, f + (size_t)r0 * ld, ld, n, IC, s);
        return xb;
    }
};

/* products that read a stored bf16 activation in place (osdp_cuda_bf16_direct_products) */
long direct_products_queued = 0;
/* cuBLASLt products with the GELU and bf16 outputs (osdp_cuda_lt_gelu_bf16_products) */
long gelu_bf16_products_queued = 0;

}  // namespace

void convert_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n, cudaStream_t s)
{
    if (!n) return;
    to_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(dst, src, n);
    CUDA_CHECK_LAUNCH();
}

void round_to_bf16_values(float *x, size_t n, cudaStream_t s)
{
    if (!n) return;
    round_to_bf16_values_kernel<<<grid_for(n), kThreads, 0, s>>>(x, n);
    CUDA_CHECK_LAUNCH();
}

void widen_from_bf16(float *dst, const __nv_bfloat16 *src, size_t n, cudaStream_t s)
{
    if (!n) return;
    widen_from_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(dst, src, n);
    CUDA_CHECK_LAUNCH();
}

namespace {

/* The weight's orientation: (IC,OC), osdp's linear layers, or (OC,IC), nn.Linear's (a tied head's wte).
 * To cuBLAS a row-major (IC,OC) weight is a column-major (OC,IC) matrix, a row-major (OC,IC) one a
 * column-major (IC,OC) matrix; op_out_by_in gives the (OC,IC) operand of y^T = A x^T, op_in_by_out the
 * (IC,OC) operand of dx^T = B dy^T, ld the weight's leading dimension either way. */
struct WeightOrder {
    bool out_in;
    cublasOperation_t op_out_by_in() const { return out_in ? CUBLAS_OP_T : CUBLAS_OP_N; }
    cublasOperation_t op_in_by_out() const { return out_in ? CUBLAS_OP_N : CUBLAS_OP_T; }
    int ld(int IC, int OC) const { return out_in ? IC : OC; }
};

void forward_any(const GemmContext &ctx, WeightOrder order, float *y, XOperand x, int ldx,
                 const __nv_bfloat16 *w, const __nv_bfloat16 *b, int BT, int IC, int OC, int accumulate);

__global__ void widen_kernel(float *dst, const __nv_bfloat16 *src, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

/* What a cuBLASLt product does after the sum (cublasLt.h's cublasLtEpilogue_t), and its vectors:
 *   BIAS, GELU_AUX_BIAS: bias (D's rows) added to each column of D before the GELU;
 *   DGELU_BGRAD, BGRADA: the bias gradient (D's rows) written to `bias` (overwritten, not added):
 *     DGELU_BGRAD the row sums of D after the GELU's gradient, BGRADA those of op(A) over k;
 *   GELU_AUX_BIAS writes, DGELU_BGRAD reads, the GELU's input as `aux` (column-major, aux_ld: a
 *     multiple of 8, at least D's rows).
 * The bias, the bias gradient and aux are D's type (cublasLt.h: CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE and
 * _EPILOGUE_AUX_DATA_TYPE default to the output's type, which a non-fp8 product cannot change; the bias
 * gradient is the output's type): fp32 here, or bf16 for the bf16-output product of the stored bf16
 * activations (matmul_bf16_forward_gelu_bf16). */
struct LtEpilogue {
    cublasLtEpilogue_t kind;
    void *bias;
    void *aux;
    int64_t aux_ld;
};

/* products queued through cuBLASLt since the process started (osdp_cuda_lt_products) */
long lt_products_queued = 0;

/* the largest power of two up to 256 that divides a pointer's address: its alignment in bytes */
uint32_t alignment_of(const void *p)
{
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a != 0) a /= 2;
    return a;
}

/* column-major D (m,n) = epilogue(op(A) op(B) + beta D), gemm_bf16's product (bf16 A and B, fp32 D,
 * fp32 accumulation) through cuBLASLt with the epilogue e, `workspace` bytes of cuBLASLt workspace
 * at ws (may be 0); d_type CUDA_R_16BF: D (C too) bf16, rounded from the fp32 result by cuBLASLt.  false
 * (nothing queued) when cuBLASLt offers no algorithm for it. */
bool lt_gemm(const GemmContext &ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
             const __nv_bfloat16 *A, int lda, const __nv_bfloat16 *B, int ldb, float beta, void *D, int ldd,
             const LtEpilogue &e, void *ws, size_t workspace, cudaDataType_t d_type = CUDA_R_32F)
{
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e.kind, sizeof e.kind));
    if (e.bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias, sizeof e.bias));
    if (e.aux) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux,
                                                    sizeof e.aux));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &e.aux_ld,
                                                    sizeof e.aux_ld));
    }
    /* the stored matrices: op(A) (m,k) is A (m,k) or, transposed, A (k,m); op(B) (k,n) likewise */
    const bool an = ta == CUBLAS_OP_N, bn = tb == CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, an ? m : k, an ? k : m, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, bn ? k : n, bn ? n : k, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d, d_type, m, n, ldd));
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                      sizeof workspace));
    /* the heuristic assumes 256-byte-aligned matrices unless told (cublasLt.h: CUBLASLT_MATMUL_PREF_MIN_
     * ALIGNMENT_*_BYTES, default 256); a weight inside a parameter slice, a chunk's rows or a gradient slice
     * may be less aligned, so each gets its own, and the algorithms that need more are left out */
    const uint32_t align_a = alignment_of(A), align_b = alignment_of(B), align_d = alignment_of(D);
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                      sizeof align_a));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                      sizeof align_b));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                      sizeof align_d));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                      sizeof align_d));
    cublasLtMatmulHeuristicResult_t found;
    int n_found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.lt, op, a, b, d, d, pref, 1, &found, &n_found);
    const bool ok = st == CUBLAS_STATUS_SUCCESS && n_found > 0;
    if (ok) {
        const float one = 1.0f;
        CUBLAS_LAUNCH(cublasLtMatmul(ctx.lt, op, &one, A, a, B, b, &beta, D, d, D, d, &found.algo, ws, workspace,
                                     ctx.stream));
        lt_products_queued++;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(op);
    return ok;
}

/* One cuBLASLt product y^T (OC,n) = w^T (OC,IC) xb^T (IC,n) (w (IC,OC) row-major, xb (n,IC) packed: the
 * operands of forward_any's cublasGemmEx) with the bias (fp32, OC) and, when pre is not NULL, the GELU in
 * the epilogue, pre (n rows of OC) its aux output (the GELU's input).  false (nothing queued) when
 * cuBLASLt offers no algorithm for it. */
bool lt_product(const GemmContext &ctx, float *y, float *pre, const __nv_bfloat16 *xb, const __nv_bfloat16 *w,
                float *bias, int n, int IC, int OC)
{
    const LtEpilogue e{pre ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS, bias, pre,
                       (int64_t)OC};   /* OC a multiple of 8 with pre (the caller checks) */
    return lt_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, OC, n, IC, w, OC, xb, IC, 0.0f, y, OC, e, nullptr, 0);
}

/* y = x w + b, and with pre, pre = that and y = GELU(pre), by cuBLASLt
 * products with the epilogue, x staged to bf16 in row chunks as forward_any
 * does (the bias widened to fp32 behind it); false (nothing queued, or the
 * first chunk's product not offered: then nothing either) when cuBLASLt has
 * no algorithm, and the caller runs the unfused path */
bool forward_lt(const GemmContext &ctx, float *y, float *pre, XOperand x, int ldx, const __nv_bfloat16 *w,
                const __nv_bfloat16 *b, int BT, int IC, int OC)
{
    if (!ctx.lt || !b || BT <= 0 || IC <= 0 || OC <= 0 || (pre && OC % 8 != 0)) return false;
    /* rows of x in bf16 and the fp32 bias within the staging's bound (chunk_rows' rule) */
    const size_t cap = BF16_STAGING_MAX_BYTES / sizeof(__nv_bfloat16), bias_elems = 2 * round64((size_t)OC);
    if (bias_elems + 64 + (size_t)IC > cap) return false;
    size_t r = (cap - bias_elems - 64) / (size_t)IC;   /* 64: x's round64 */
    if (r > 64) r = r / 64 * 64;
    const int rows = r >= (size_t)BT ? BT : (int)r;
    const size_t x_elems = round64((size_t)rows * IC);
    __nv_bfloat16 *xb = (__nv_bfloat16 *)ctx.scratch(x_elems * sizeof(__nv_bfloat16) + (size_t)OC * sizeof(float));
    float *bias = (float *)(xb + x_elems);   /* 128-byte aligned: x_elems is a multiple of 64 */
    widen_kernel<<<(OC + kThreads - 1) / kThreads, kThreads, 0, ctx.stream>>>(bias, b, OC);
    CUDA_CHECK_LAUNCH();
    for (int r0 = 0; r0 < BT; r0 += rows) {
        const int n = BT - r0 < rows ? BT - r0 : rows;
        const __nv_bfloat16 *xr = x.rows(xb, r0, ldx, n, IC, ctx.stream);
        if (!lt_product(ctx, y + (size_t)r0 * OC, pre ? pre + (size_t)r0 * OC : nullptr, xr, w, bias, n, IC, OC)) {
            if (r0 == 0) return false;
            /* a later chunk (fewer rows) without an algorithm: the unfused path for the rest */
            forward_any(ctx, WeightOrder{false}, pre ? pre + (size_t)r0 * OC : y + (size_t)r0 * OC,
                        x.at((size_t)r0 * ldx), ldx, w, b, BT - r0, IC, OC, 0);
            if (pre) gelu_forward(y + (size_t)r0 * OC, pre + (size_t)r0 * OC, (size_t)(BT - r0) * OC, ctx.stream);
            return true;
        }
    }
    return true;
}

/* The MLP's first product and its GELU with both outputs stored bf16 activations (--activation-dtype bf16):
 * y^T (OC,BT) = GELU(w^T x^T + b) and pre its input, both bf16 (D's type, and so aux's, cublasLt.h), x the
 * stored bf16 ln read in place (no staging: one product over all the rows), the bias the bf16 weight itself
 * (D's type, no widening).  false (nothing queued) without ctx.lt or an algorithm, or OC not a multiple of 8
 * (aux's leading dimension). */
bool forward_gelu_lt_bf16(const GemmContext &ctx, __nv_bfloat16 *y, __nv_bfloat16 *pre, const __nv_bfloat16 *x,
                          const __nv_bfloat16 *w, const __nv_bfloat16 *b, int BT, int IC, int OC)
{
    if (!ctx.lt || !b || BT <= 0 || IC <= 0 || OC <= 0 || OC % 8 != 0) return false;
    const LtEpilogue e{CUBLASLT_EPILOGUE_GELU_AUX_BIAS, (void *)b, pre, (int64_t)OC};
    return lt_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, OC, BT, IC, w, OC, x, IC, 0.0f, y, OC, e, nullptr, 0,
                   CUDA_R_16BF);
}

void forward_any(const GemmContext &ctx, WeightOrder order, float *y, XOperand x, int ldx,
                 const __nv_bfloat16 *w, const __nv_bfloat16 *b, int BT, int IC, int OC, int accumulate)
{
    /* as the fp32 table: lay the bias into y first, then y += x @ w with beta = 1 */
    float beta = accumulate ? 1.0f : 0.0f;
    if (b) {
        bias_rows(y, b, BT, OC, accumulate, ctx.stream);
        beta = 1.0f;
    }
    if (BT <= 0 || OC <= 0) return;
    if (IC <= 0) {  /* an empty product: y = bias, y unchanged, or y = 0 */
        if (beta == 0.0f)
            CUDA_CHECK(cudaMemsetAsync(y, 0, (size_t)BT * OC * sizeof(float), ctx.stream));
        return;
    }
    const int rows = chunk_rows(BT, (size_t)IC);
    __nv_bfloat16 *xb = (__nv_bfloat16 *)ctx.scratch((size_t)rows * IC * sizeof(__nv_bfloat16));
    for (int r0 = 0; r0 < BT; r0 += rows) {
        const int n = BT - r0 < rows ? BT - r0 : rows;
        const __nv_bfloat16 *xr = x.rows(xb, r0, ldx, n, IC, ctx.stream);  /* xr (n,IC) packed */
        /* y rows [r0, r0+n): y^T (OC,n) = w^T (OC,IC) xr^T (IC,n) */
        gemm_bf16(ctx, order.op_out_by_in(), CUBLAS_OP_N, OC, n, IC, w, order.ld(IC, OC), xr, IC, beta,
                  y + (size_t)r0 * OC, OC);
    }
}

/* dW when dy's rows do not fit the staging at once (the LM head: BT x V):
 * x's rows staged whole in bf16, dy's columns (the output features) taken in
 * slices, and each slice's part of dW (its rows or columns, disjoint) made
 * by ONE product over all BT rows: dW is read and written once per
 * micro-batch, where row chunks re-read all of it (154 MB of fp32 for GPT-2's
 * head) once per chunk (26 chunks at B 16, T 1024), and each sum runs over
 * all the rows in one fp32 accumulation.  false (nothing done) when x's rows
 * and 64 columns of dy do not fit the staging: the caller takes row chunks. */
bool dw_by_columns(const GemmContext &ctx, WeightOrder order, float *dw, const float *dy, XOperand x,
                   int ldx, int BT, int IC, int OC)
{
    const size_t cap = BF16_STAGING_MAX_BYTES / sizeof(__nv_bfloat16);
    const size_t x_elems = round64((size_t)BT * IC);
    if (x_elems + (size_t)BT * 64 > cap) return false;
    size_t cols = (cap - x_elems) / (size_t)BT / 64 * 64;
    if (cols > (size_t)OC) cols = (size_t)OC;
    __nv_bfloat16 *xs = (__nv_bfloat16 *)ctx.scratch((x_elems + (size_t)BT * cols) * sizeof(__nv_bfloat16));
    __nv_bfloat16 *dyb = xs + x_elems;
    const __nv_bfloat16 *xb = x.rows(xs, 0, ldx, BT, IC, ctx.stream);   /* xb (BT,IC) packed */
    for (int c0 = 0; c0 < OC; c0 += (int)cols) {
        const int n = OC - c0 < (int)cols ? OC - c0 : (int)cols;
        rows_to_bf16(dyb, dy + c0, OC, BT, n, ctx.stream);   /* dyb (BT,n) packed: dy's columns [c0, c0+n) */
        if (order.out_in)   /* dw rows [c0, c0+n) (OC,IC): dw^T (IC,n) at dw + c0 IC += xb^T (IC,BT) dyb (BT,n) */
            gemm_bf16(ctx, CUBLAS_OP_N, CUBLAS_OP_T, IC, n, BT, xb, IC, dyb, n, 1.0f, dw + (size_t)c0 * IC, IC);
        else                /* dw columns [c0, c0+n) (IC,OC): rows [c0, c0+n) of dw^T (OC,IC) += dyb^T (n,BT) xb (BT,IC) */
            gemm_bf16(ctx, CUBLAS_OP_N, CUBLAS_OP_T, n, IC, BT, dyb, n, xb, IC, 1.0f, dw + c0, OC);
    }
    return true;
}

/* cuBLASLt's workspace for the backward's epilogues (the bias gradient's reductions may ask for one),
 * carved from the staging within BF16_STAGING_MAX_BYTES */
const size_t kLtWorkspace = (size_t)4 << 20;

/* The row chunks of a backward: per chunk of dy's and x's rows staged in bf16, dx's rows = dy w^T (with
 * pre, the GELU's input: times GELU'(pre), and dx_bias += dx's column sums), dw += x^T dy, db += dy's
 * column sums.  Without ctx.lt: the chunks of chunk_rows(BT, IC + OC), db summed once from the fp32 dy
 * first (pre must then be NULL: matmul_bf16_backward_dgelu runs the GELU's gradient after).  With
 * ctx.lt (OSDP_CUDA_LT_EPILOGUES=1): fewer rows per chunk so that the two bias-gradient vectors and
 * cuBLASLt's workspace fit the staging too; the dx product with pre through cuBLASLt with DGELU_BGRAD
 * (DGELU without dx_bias), the dw product with db through cuBLASLt with BGRADA (op(A) is dy's chunk
 * (OC, n): the reduction over k is the sum over the chunk's rows); each chunk's bias gradient, which
 * cuBLASLt overwrites, is added to db / dx_bias (gradients accumulate).  Where cuBLASLt offers no
 * algorithm for a chunk's product, that chunk takes cublasGemmEx and our kernels. */
void backward_rows(const GemmContext &ctx, WeightOrder order, float *dx, int lddx, float *dw, float *db,
                   float *dx_bias, const float *pre, const float *dy, XOperand x, int ldx, const __nv_bfloat16 *w,
                   int BT, int IC, int OC, int dx_accumulate)
{
    const bool lt = ctx.lt != nullptr;
    const bool db_by_chunk = lt && db;
    if (db && !db_by_chunk) column_sums_add(db, dy, BT, OC, ctx.stream);   /* from the fp32 dy, as the fp32 table */
    int rows = chunk_rows(BT, (size_t)IC + OC);
    size_t extra = 0;   /* bytes behind the bf16 rows: the two bias gradients and the workspace */
    if (lt) {
        extra = (round64((size_t)OC) + round64((size_t)IC)) * sizeof(float) + 256 + kLtWorkspace;   /* 256: alignment */
        const size_t cap = BF16_STAGING_MAX_BYTES / sizeof(__nv_bfloat16);
        const size_t extra_elems = extra / sizeof(__nv_bfloat16) + 128;   /* 128: the two round64 */
        size_t r = cap > extra_elems + (size_t)IC + OC ? (cap - extra_elems) / ((size_t)IC + OC) : 1;
        if (r > 64) r = r / 64 * 64;
        rows = r >= (size_t)BT ? BT : (int)r;
    }
    const size_t dy_elems = round64((size_t)rows * OC), x_elems = round64((size_t)rows * IC);
    __nv_bfloat16 *dyb = (__nv_bfloat16 *)ctx.scratch((dy_elems + x_elems) * sizeof(__nv_bfloat16) + extra);
    __nv_bfloat16 *xs = dyb + dy_elems;
    float *db_part = (float *)(xs + x_elems);   /* 128-byte aligned: x_elems is a multiple of 64 */
    float *dx_bias_part = db_part + round64((size_t)OC);
    /* cuBLASLt's workspace 256-byte aligned (the scratch is: the rows before it are multiples of 128 bytes) */
    void *workspace = (void *)(((uintptr_t)(dx_bias_part + round64((size_t)IC)) + 255) / 256 * 256);
    for (int r0 = 0; r0 < BT; r0 += rows) {
        const int n = BT - r0 < rows ? BT - r0 : rows;
        rows_to_bf16(dyb, dy + (size_t)r0 * OC, OC, n, OC, ctx.stream);   /* dyb (n,OC) packed */
        const __nv_bfloat16 *xb = x.rows(xs, r0, ldx, n, IC, ctx.stream);   /* xb (n,IC) packed */
        /* dx rows [r0, r0+n) = dyb @ w^T  ->  dx^T (IC,n) = w (IC,OC) dyb^T (OC,n) */
        if (dx) {
            float *dxr = dx + (size_t)r0 * lddx;
            const float *prer = pre ? pre + (size_t)r0 * IC : nullptr;
            const LtEpilogue dgelu{dx_bias ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU,
                                   dx_bias ? dx_bias_part : nullptr, const_cast<float *>(prer), (int64_t)IC};
            if (pre && IC % 8 == 0 && !dx_accumulate &&
                lt_gemm(ctx, order.op_in_by_out(), CUBLAS_OP_N, IC, n, OC, w, order.ld(IC, OC), dyb, OC, 0.0f,
                        dxr, lddx, dgelu, workspace, kLtWorkspace)) {
                if (dx_bias) vector_accumulate(dx_bias, dx_bias_part, (size_t)IC, ctx.stream);
            } else {
                gemm_bf16(ctx, order.op_in_by_out(), CUBLAS_OP_N, IC, n, OC, w, order.ld(IC, OC), dyb, OC,
                          dx_accumulate ? 1.0f : 0.0f, dxr, lddx);
                if (pre) {   /* lddx == IC here (matmul_bf16_backward_dgelu) */
                    gelu_backward(dxr, prer, dxr, (size_t)n * IC, ctx.stream);
                    if (dx_bias) column_sums_add(dx_bias, dxr, n, IC, ctx.stream);
                }
            }
        }
        if (order.out_in) {   /* dw (OC,IC) += dyb^T @ xb  ->  dw^T (IC,OC) += xb^T (IC,n) dyb (n,OC) */
            gemm_bf16(ctx, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, n, xb, IC, dyb, OC, 1.0f, dw, IC);
            if (db_by_chunk) column_sums_add(db, dy + (size_t)r0 * OC, n, OC, ctx.stream);
            continue;
        }
        /* dw (IC,OC) += xb^T @ dyb  ->  dw^T (OC,IC) += dyb^T (OC,n) xb (n,IC) */
        if (db_by_chunk && lt_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, OC, IC, n, dyb, OC, xb, IC, 1.0f, dw, OC,
                                   LtEpilogue{CUBLASLT_EPILOGUE_BGRADA, db_part, nullptr, 0}, workspace,
                                   kLtWorkspace)) {
            vector_accumulate(db, db_part, (size_t)OC, ctx.stream);
        } else {
            gemm_bf16(ctx, CUBLAS_OP_N, CUBLAS_OP_T, OC, IC, n, dyb, OC, xb, IC, 1.0f, dw, OC);
            if (db_by_chunk) column_sums_add(db, dy + (size_t)r0 * OC, n, OC, ctx.stream);
        }
    }
}

void backward_any(const GemmContext &ctx, WeightOrder order, float *dx, int lddx, float *dw, float *db,
                  const float *dy, XOperand x, int ldx, const __nv_bfloat16 *w, int BT, int IC, int OC,
                  int dx_accumulate)
{
    if (BT <= 0 || IC <= 0 || OC <= 0) return;
    if (chunk_rows(BT, (size_t)IC + OC) < BT && dw_by_columns(ctx, order, dw, dy, x, ldx, BT, IC, OC)) {
        /* db from the fp32 dy, exactly as the fp32 table; dW done in one pass; dx = dy w^T, whose rows are
         * independent, in row chunks of dy alone */
        if (db) column_sums_add(db, dy, BT, OC, ctx.stream);
        if (!dx) return;
        const int rows = chunk_rows(BT, (size_t)OC);
        __nv_bfloat16 *dyb = (__nv_bfloat16 *)ctx.scratch((size_t)rows * OC * sizeof(__nv_bfloat16));
        for (int r0 = 0; r0 < BT; r0 += rows) {
            const int n = BT - r0 < rows ? BT - r0 : rows;
            rows_to_bf16(dyb, dy + (size_t)r0 * OC, OC, n, OC, ctx.stream);
            gemm_bf16(ctx, order.op_in_by_out(), CUBLAS_OP_N, IC, n, OC, w, order.ld(IC, OC), dyb, OC,
                      dx_accumulate ? 1.0f : 0.0f, dx + (size_t)r0 * lddx, lddx);
        }
        return;
    }
    backward_rows(ctx, order, dx, lddx, dw, db, nullptr, nullptr, dy, x, ldx, w, BT, IC, OC, dx_accumulate);
}

}  // namespace

void matmul_bf16_forward(const GemmContext &ctx, float *y, const float *x, int ldx,
                         const __nv_bfloat16 *w, const __nv_bfloat16 *b, int BT, int IC, int OC,
                         int accumulate)
{
    /* the bias in cuBLASLt's epilogue where selected (a product that overwrites y) */
    if (!accumulate && forward_lt(ctx, y, nullptr, XOperand{x, nullptr}, ldx, w, b, BT, IC, OC)) return;
    forward_any(ctx, WeightOrder{false}, y, XOperand{x, nullptr}, ldx, w, b, BT, IC, OC, accumulate);
}

void matmul_bf16_forward_gelu(const GemmContext &ctx, float *y, float *pre, const float *x,
                              const __nv_bfloat16 *w, const __nv_bfloat16 *b, int BT, int IC, int OC)
{
    if (forward_lt(ctx, y, pre, XOperand{x, nullptr}, IC, w, b, BT, IC, OC)) return;
    forward_any(ctx, WeightOrder{false}, pre, XOperand{x, nullptr}, IC, w, b, BT, IC, OC, 0);
    gelu_forward(y, pre, (size_t)BT * OC, ctx.stream);
}

bool matmul_bf16_forward_gelu_bf16(const GemmContext &ctx, __nv_bfloat16 *y, __nv_bfloat16 *pre,
                                   const __nv_bfloat16 *x, const __nv_bfloat16 *w, const __nv_bfloat16 *b, int BT,
                                   int IC, int OC)
{
    if (!forward_gelu_lt_bf16(ctx, y, pre, x, w, b, BT, IC, OC)) return false;
    gelu_bf16_products_queued++;
    return true;
}

void matmul_bf16_forward_out_in(const GemmContext &ctx, float *y, const float *x,
                                const __nv_bfloat16 *w, int BT, int IC, int OC, int accumulate)
{
    forward_any(ctx, WeightOrder{true}, y, XOperand{x, nullptr}, IC, w, nullptr, BT, IC, OC, accumulate);
}

void matmul_bf16_backward(const GemmContext &ctx, float *dx, int lddx, float *dw, float *db,
                          const float *dy, const float *x, int ldx, const __nv_bfloat16 *w,
                          int BT, int IC, int OC, int dx_accumulate)
{
    backward_any(ctx, WeightOrder{false}, dx, lddx, dw, db, dy, XOperand{x, nullptr}, ldx, w, BT, IC, OC,
                 dx_accumulate);
}

void matmul_bf16_forward_direct(const GemmContext &ctx, float *y, const __nv_bfloat16 *x,
                                const __nv_bfloat16 *w, const __nv_bfloat16 *b, int BT, int IC, int OC,
                                int accumulate)
{
    direct_products_queued++;
    const XOperand xo{nullptr, x};
    if (!accumulate && forward_lt(ctx, y, nullptr, xo, IC, w, b, BT, IC, OC)) return;
    forward_any(ctx, WeightOrder{false}, y, xo, IC, w, b, BT, IC, OC, accumulate);
}

void matmul_bf16_backward_direct(const GemmContext &ctx, float *dx, float *dw, float *db, const float *dy,
                                 const __nv_bfloat16 *x, const __nv_bfloat16 *w, int BT, int IC, int OC,
                                 int dx_accumulate)
{
    direct_products_queued++;
    backward_any(ctx, WeightOrder{false}, dx, IC, dw, db, dy, XOperand{nullptr, x}, IC, w, BT, IC, OC,
                 dx_accumulate);
}

/* The MLP's second product's backward and the GELU's (matmul_backward_dgelu of osdp/compute.h).  Without
 * ctx.lt: matmul_bf16_backward, the GELU's gradient and dpre's column sums, the three calls gpt_ops.c
 * makes otherwise, so the same bits.  With ctx.lt: backward_rows' chunks, d(pre) and db_pre from
 * cuBLASLt's DGELU_BGRAD on the dx product (the GELU's input pre its aux input: the forward's
 * GELU_AUX_BIAS output), db from BGRADA on the dw product; IC not a multiple of 8 (aux's leading
 * dimension must be) or no algorithm: those products unfused. */
void matmul_bf16_backward_dgelu(const GemmContext &ctx, float *dpre, float *dw, float *db, float *db_pre,
                                const float *dy, const float *x, const float *pre, const __nv_bfloat16 *w, int BT,
                                int IC, int OC)
{
    if (BT <= 0 || IC <= 0 || OC <= 0) return;
    if (ctx.lt) {
        backward_rows(ctx, WeightOrder{false}, dpre, IC, dw, db, db_pre, pre, dy, XOperand{x, nullptr}, IC, w, BT,
                      IC, OC, 0);
        return;
    }
    backward_any(ctx, WeightOrder{false}, dpre, IC, dw, db, dy, XOperand{x, nullptr}, IC, w, BT, IC, OC, 0);
    gelu_backward(dpre, pre, dpre, (size_t)BT * IC, ctx.stream);
    if (db_pre) column_sums_add(db_pre, dpre, BT, IC, ctx.stream);
}

/* The fused head's backward over one chunk of rows: dlogits in bf16 straight
 * from the logits (head_backward.cuh), then the two products on them.  The
 * rows are taken in sub-chunks whose bf16 ln and dlogits fit the staging
 * (chunk_rows: one sub-chunk for GPT-2's head up to 640 rows, i.e. B 10 at
 * 64 rows per sequence); per sub-chunk dln's rows = dlogits w^T and dW +=
 * ln^T dlogits with beta = 1, the products and operand orders of
 * backward_any's row chunks.  dW is not made as one product over all B T
 * rows: that needs every row's dlogits at once, a (B T, V) buffer the fused
 * head exists not to have (doc/gpu.md). */
void head_bf16_backward_lse(const GemmContext &ctx, float *dln, float *dw, const float *logits, const float *lse,
                            const int *targets, float scale, const float *ln, const __nv_bfloat16 *w, int rows,
                            int d, int V, int valid, int vocab_lo, int out_in)
{
    if (rows <= 0 || d <= 0 || V <= 0) return;
    const WeightOrder order{out_in != 0};
    const int sub = chunk_rows(rows, (size_t)d + V);
    const size_t dy_elems = round64((size_t)sub * V);
    __nv_bfloat16 *dyb = (__nv_bfloat16 *)ctx.scratch((dy_elems + (size_t)sub * d) * sizeof(__nv_bfloat16));
    __nv_bfloat16 *xb = dyb + dy_elems;
    for (int r0 = 0; r0 < rows; r0 += sub) {
        const int n = rows - r0 < sub ? rows - r0 : sub;
        const size_t entries = (size_t)n * V;
        with_index_type(entries, [&](auto i) {
            crossentropy_backward_lse_kernel<decltype(i)><<<grid_for(entries), kThreads, 0, ctx.stream>>>(
                dyb, logits + (size_t)r0 * V, lse + r0, targets + r0, scale, n, V, valid, vocab_lo);
        });
        CUDA_CHECK_LAUNCH();
        rows_to_bf16(xb, ln + (size_t)r0 * d, d, n, d, ctx.stream);   /* xb (n,d) packed */
        /* dln rows [r0, r0+n) = dyb w^T */
        gemm_bf16(ctx, order.op_in_by_out(), CUBLAS_OP_N, d, n, V, w, order.ld(d, V), dyb, V, 0.0f,
                  dln + (size_t)r0 * d, d);
        if (order.out_in)   /* dw (V,d) += dyb^T xb */
            gemm_bf16(ctx, CUBLAS_OP_N, CUBLAS_OP_T, d, V, n, xb, d, dyb, V, 1.0f, dw, d);
        else                /* dw (d,V) += xb^T dyb */
            gemm_bf16(ctx, CUBLAS_OP_N, CUBLAS_OP_T, V, d, n, dyb, V, xb, d, 1.0f, dw, V);
    }
}

void matmul_bf16_backward_out_in(const GemmContext &ctx, float *dx, float *dw, const float *dy,
                                 const float *x, const __nv_bfloat16 *w, int BT, int IC, int OC,
                                 int dx_accumulate)
{
    backward_any(ctx, WeightOrder{true}, dx, IC, dw, nullptr, dy, XOperand{x, nullptr}, IC, w, BT, IC, OC,
                 dx_accumulate);
}

}  // namespace osdp_cuda

extern "C" long osdp_cuda_lt_products(void) { return osdp_cuda::lt_products_queued; }
extern "C" long osdp_cuda_bf16_direct_products(void) { return osdp_cuda::direct_products_queued; }
extern "C" long osdp_cuda_lt_gelu_bf16_products(void) { return osdp_cuda::gelu_bf16_products_queued; }

/* fp32 CPU kernels of the GPT operators: the matrix products and attention
 * (the row-wise kernels are in kernels_cpu_rowwise.c); the contract is in
 * src/model/kernels_cpu.h.
 *
 * Matrix products go through cblas_sgemm, the softmax loops are C with OpenMP.
 * Every reduction has a fixed order that does not depend on the thread count,
 * so each kernel returns bitwise identical results for identical inputs (no
 * atomics, no racy sums). */
#include "model/kernels_cpu.h"

#include "kernels_cpu_internal.h"

#include <cblas.h>
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ------------------------------------------------------------------ matmul */

/* OpenBLAS threads one GEMM by cutting it into panels that share packed
 * operands and meet at barriers; on the shapes of a GPT step (K = 256..1024)
 * two such threads reach 120-150 GFLOP/s where two independent single-thread
 * GEMMs on halves of the rows reach 175-190 (measured on 2 Zen 4 cores).  So
 * products large enough are cut here by rows of the output, one block per
 * OpenMP thread, and OpenBLAS runs each block on one thread (it does inside
 * an OpenMP region).  Each output element is still one dot product over the
 * same K in the same order, so the bits do not depend on the thread count. */
#define GEMM_SPLIT_MIN_MNK (1L << 22) /* per thread: far above OpenBLAS's small-matrix path */
#define GEMM_ROW_ALIGN 16             /* rows per block: a multiple of the kernel's unroll */

static int gemm_row_blocks(int M, int N, int K)
{
    int threads = 1;
#ifdef _OPENMP
    if (!omp_in_parallel()) threads = omp_get_max_threads();
#endif
    while (threads > 1 && ((long)M * N * K / threads < GEMM_SPLIT_MIN_MNK || M / threads < GEMM_ROW_ALIGN))
        threads--;
    return threads;
}

/* C (M,N) = alpha op(A) op(B) + beta C, row-major; op(A) has M rows */
static void gemm_by_rows(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                         int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    const int blocks = gemm_row_blocks(M, N, K);
    OMP(parallel for if(blocks > 1) num_threads(blocks) schedule(static, 1))
    for (int t = 0; t < blocks; t++) {
        int m0 = (int)((long)M * t / blocks) / GEMM_ROW_ALIGN * GEMM_ROW_ALIGN;
        int m1 = t == blocks - 1 ? M : (int)((long)M * (t + 1) / blocks) / GEMM_ROW_ALIGN * GEMM_ROW_ALIGN;
        if (m1 <= m0) continue;
        const float *a = trans_a ? A + m0 : A + (size_t)m0 * lda;
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    m1 - m0, N, K, alpha, a, lda, B, ldb, beta, C + (size_t)m0 * ldc, ldc);
    }
}

void matmul_forward_strided(float *y, const float *x, int ldx, const float *w, const float *b,
                            int BT, int IC, int OC, int accumulate)
{
    /* The bias is laid into y first and sgemm adds x @ w with beta = 1: one pass
     * over y fewer than beta = 0 (OpenBLAS zeroes C in a separate pass) followed
     * by a bias loop. */
    float beta = accumulate ? 1.0f : 0.0f;
    if (b) {
        OMP(parallel for if((long)BT * OC >= 4 * PAR_MIN_WORK) schedule(static))
        for (int i = 0; i < BT; i++) {
            float *row = y + (size_t)i * OC;
            if (accumulate)
                for (int o = 0; o < OC; o++) row[o] += b[o];
            else
                memcpy(row, b, (size_t)OC * sizeof *row);
        }
        beta = 1.0f;
    }
    gemm_by_rows(0, 0, BT, OC, IC, 1.0f, x, ldx, w, OC, beta, y, OC);
}

void matmul_forward(float *y, const float *x, const float *w, const float *b,
                    int BT, int IC, int OC, int accumulate)
{
    matmul_forward_strided(y, x, IC, w, b, BT, IC, OC, accumulate);
}

/* db (OC) += column sums of dy (BT, OC): each column summed over the rows in
 * order (a fixed order: bitwise reproducible); threads own blocks of columns */
OSDP_VECTOR_CLONES static void column_sums(float *db, const float *dy, int BT, int OC)
{
    enum { W = 64 };
    const int nblocks = (OC + W - 1) / W;
    OMP(parallel for if((long)BT * OC >= 4 * PAR_MIN_WORK) schedule(static))
    for (int blk = 0; blk < nblocks; blk++) {
        const int o0 = blk * W, n = OC - o0 < W ? OC - o0 : W;
        float acc[W] = {0};
        for (int i = 0; i < BT; i++) {
            const float *row = dy + (size_t)i * OC + o0;
            OMP(simd)
            for (int j = 0; j < n; j++) acc[j] += row[j];
        }
        for (int j = 0; j < n; j++) db[o0 + j] += acc[j];
    }
}

void matmul_backward_strided(float *dx, int lddx, float *dw, float *db, const float *dy,
                             const float *x, int ldx, const float *w, int BT, int IC, int OC,
                             int dx_accumulate)
{
    /* dx (BT,IC) = dy (BT,OC) @ w^T, w stored (IC,OC) */
    if (dx)
        gemm_by_rows(0, 1, BT, IC, OC, 1.0f, dy, OC, w, OC, dx_accumulate ? 1.0f : 0.0f, dx, lddx);
    /* dw (IC,OC) += x^T (IC,BT) @ dy (BT,OC) */
    gemm_by_rows(1, 0, IC, OC, BT, 1.0f, x, ldx, dy, OC, 1.0f, dw, OC);
    if (db) column_sums(db, dy, BT, OC);
}
void matmul_backward(float *dx, float *dw, float *db, const float *dy,
                     const float *x, const float *w, int BT, int IC, int OC,
                     int dx_accumulate)
{
    matmul_backward_strided(dx, IC, dw, db, dy, x, IC, w, BT, IC, OC, dx_accumulate);
}

void matmul_out_in_forward(float *y, int ldy, const float *x, const float *w, int BT, int IC, int OC,
                           int accumulate)
{
    gemm_by_rows(0, 1, BT, OC, IC, 1.0f, x, IC, w, IC, accumulate ? 1.0f : 0.0f, y, ldy);
}

void matmul_out_in_backward(float *dx, float *dw, const float *dy, int lddy, const float *x, const float *w,
                            int BT, int IC, int OC, int dx_accumulate)
{
    /* dx (BT,IC) = dy (BT,OC) @ w (OC,IC) */
    if (dx) gemm_by_rows(0, 0, BT, IC, OC, 1.0f, dy, lddy, w, IC, dx_accumulate ? 1.0f : 0.0f, dx, IC);
    /* dw (OC,IC) += dy^T (OC,BT) @ x (BT,IC) */
    gemm_by_rows(1, 0, OC, IC, BT, 1.0f, dy, lddy, x, IC, 1.0f, dw, IC);
}

/* --------------------------------------------------------------- attention */

/* The T x T products are done by blocks of ATT_BLOCK query rows: block [r0,r1)
 * only needs keys [0,r1), so about half of the upper triangle is never computed.
 * All blocks are sgemm calls on strided views of qkv/out (no copies).
 *
 * Threading: the small per-head products gain nothing from OpenBLAS threads, so
 * the (b,h) loop is shared among OpenMP threads instead.  A pthreads OpenBLAS
 * should not start its own threads from inside an OpenMP region (some builds warn
 * "Detect OpenMP Loop and this application may hang", others serialise the
 * calls on a lock); it runs a GEMM on one thread when
 * M*N*K <= 65536 * GEMM_MULTITHREAD_THRESHOLD (default 4).  The largest product
 * here is ATT_BLOCK x T x HS, so heads go parallel only below that bound; above
 * it (long sequences) heads run in turn, OpenBLAS threads each product and the
 * softmax rows are shared among OpenMP threads. */
#define ATT_BLOCK 32
#define BLAS_SERIAL_MNK 262144L

static int heads_in_parallel(int B, int T, int NH, int HS)
{
    return (long)ATT_BLOCK * T * HS <= BLAS_SERIAL_MNK &&
           (long)B * NH * T * T >= PAR_MIN_WORK;
}

/* What the forward and backward passes derive from the shape alike: the head
 * size, the softmax scale 1/sqrt(HS), and which loop goes parallel (heads,
 * or else the softmax rows of a long enough sequence). */
typedef struct attention_dims {
    int head_size;
    float scale;
    int heads_parallel, rows_parallel;
} attention_dims;

static attention_dims attention_dims_of(int B, int T, int C, int NH)
{
    attention_dims dims;
    dims.head_size = C / NH;
    dims.scale = 1.0f / sqrtf((float)dims.head_size);
    dims.heads_parallel = heads_in_parallel(B, T, NH, dims.head_size);
    dims.rows_parallel = !dims.heads_parallel && (long)T * T >= PAR_MIN_WORK;
    return dims;
}

/* row i of a causal softmax in place: entries [0, i] normalised, (i, T) zero */
OSDP_VECTOR_CLONES static void causal_softmax_row(float *row, int i, int T)
{
    const float maxv = row_max(row + 1, i, row[0]);
    const float sum = exp_shifted_in_place(row, i + 1, maxv);
    const float inv = 1.0f / sum;
    OMP(simd)
    for (int j = 0; j <= i; j++) row[j] *= inv;
    for (int j = i + 1; j < T; j++) row[j] = 0.0f;
}

/* d = scale * a * (d - sum_j a d) over [0, i]; zero over (i, rend) */
OSDP_VECTOR_CLONES static void softmax_row_backward(float *d, const float *a, int i, int rend, float scale)
{
    float dot = 0.0f;
    OMP(simd reduction(+:dot))
    for (int j = 0; j <= i; j++) dot += a[j] * d[j];
    OMP(simd)
    for (int j = 0; j <= i; j++) d[j] = scale * a[j] * (d[j] - dot);
    for (int j = i + 1; j < rend; j++) d[j] = 0.0f; /* read by the products below */
}

/* The row blocks [r0, r1) of causal attention (ATT_BLOCK rows at a time:
 * columns past r1 are 0 or unused).  P is T x T; the HS-wide row matrices
 * a, b, y, out have strides lda, ldb, ldy, ldout. */

/* P[r0:r1, 0:r1] = alpha * a[r0:r1] @ b[0:r1]^T */
static void causal_scores(float *P, const float *a, const float *b, int r0, int r1, int T, int HS, int lda, int ldb,
                          float alpha)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, HS, alpha,
                a + (size_t)r0 * lda, lda, b, ldb, 0.0f, P + (size_t)r0 * T, T);
}

/* out[r0:r1] = P[r0:r1, 0:r1] @ y[0:r1] */
static void causal_product(float *out, const float *P, const float *y, int r0, int r1, int T, int HS, int ldy,
                           int ldout)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, HS, r1, 1.0f,
                P + (size_t)r0 * T, T, y, ldy, 0.0f, out + (size_t)r0 * ldout, ldout);
}

/* out[r0:r1] = P[r0:T, r0:r1]^T @ y[r0:T] (P is 0 above the diagonal: its
 * rows before r0 add nothing to columns r0..r1) */
static void causal_transposed_product(float *out, const float *P, const float *y, int r0, int r1, int T, int HS,
                                      int ldy, int ldout)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, HS, T - r0, 1.0f,
                P + (size_t)r0 * T + r0, T, y + (size_t)r0 * ldy, ldy, 0.0f,
                out + (size_t)r0 * ldout, ldout);
}

static void attention_head_forward(float *out, float *att, const float *q,
                                   const float *k, const float *v, int T, int ld,
                                   int ldo, int HS, float scale, int rows_parallel)
{
    (void)rows_parallel; /* used only by the OpenMP pragma */
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        /* pre[r0:r1, 0:r1] = scale * q[r0:r1] @ k[0:r1]^T */
        causal_scores(att, q, k, r0, r1, T, HS, ld, ld, scale);
    }
    OMP(parallel for if(rows_parallel) schedule(static))
    for (int i = 0; i < T; i++) causal_softmax_row(att + (size_t)i * T, i, T);
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        /* out[r0:r1] = att[r0:r1, 0:r1] @ v[0:r1] */
        causal_product(out, att, v, r0, r1, T, HS, ld, ldo);
    }
}

void attention_forward(float *out, float *att, const float *qkv, int B, int T,
                       int C, int NH)
{
    const attention_dims dims = attention_dims_of(B, T, C, NH);
    const int HS = dims.head_size, ld = 3 * C;
    OMP(parallel for if(dims.heads_parallel) schedule(static))
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * ld + (size_t)h * HS;
        attention_head_forward(out + (size_t)b * T * C + (size_t)h * HS,
                               att + (size_t)bh * T * T, q, q + C, q + 2 * C, T, ld,
                               C, HS, dims.scale, dims.rows_parallel);
    }
}

static void attention_head_backward(float *dq, float *dk, float *dv, float *s,
                                    const float *dout, const float *q,
                                    const float *k, const float *v,
                                    const float *att, int T, int ld, int ldo, int HS,
                                    float scale, int rows_parallel)
{
    (void)rows_parallel; /* used only by the OpenMP pragma */
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        /* datt[r0:r1, 0:r1] = dout[r0:r1] @ v[0:r1]^T */
        causal_scores(s, dout, v, r0, r1, T, HS, ldo, ld, 1.0f);
        /* dv[r0:r1] = att[r0:T, r0:r1]^T @ dout[r0:T] */
        causal_transposed_product(dv, att, dout, r0, r1, T, HS, ldo, ld);
    }
    /* softmax backward in place: dpre = scale * att * (datt - sum_j att*datt) */
    OMP(parallel for if(rows_parallel) schedule(static))
    for (int i = 0; i < T; i++) {
        const float *a = att + (size_t)i * T;
        float *d = s + (size_t)i * T;
        int rend = (i / ATT_BLOCK + 1) * ATT_BLOCK;
        if (rend > T) rend = T;
        softmax_row_backward(d, a, i, rend, scale);
    }
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        /* dq[r0:r1] = dpre[r0:r1, 0:r1] @ k[0:r1] */
        causal_product(dq, s, k, r0, r1, T, HS, ld, ld);
        /* dk[r0:r1] = dpre[r0:T, r0:r1]^T @ q[r0:T] */
        causal_transposed_product(dk, s, q, r0, r1, T, HS, ld, ld);
    }
}

void attention_backward(float *dqkv, float *scratch, const float *dout,
                        const float *qkv, const float *att, int B, int T, int C,
                        int NH)
{
    /* Every row of dq, dk and dv is written by exactly one sgemm with beta = 0,
     * which overwrites C, so dqkv needs no zeroing pass. */
    const attention_dims dims = attention_dims_of(B, T, C, NH);
    const int HS = dims.head_size, ld = 3 * C;
    OMP(parallel for if(dims.heads_parallel) schedule(static))
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        size_t off = (size_t)b * T * ld + (size_t)h * HS;
        const float *q = qkv + off;
        float *dq = dqkv + off;
        attention_head_backward(dq, dq + C, dq + 2 * C, scratch + (size_t)bh * T * T,
                                dout + (size_t)b * T * C + (size_t)h * HS, q, q + C,
                                q + 2 * C, att + (size_t)bh * T * T, T, ld, C, HS,
                                dims.scale, dims.rows_parallel);
    }
}

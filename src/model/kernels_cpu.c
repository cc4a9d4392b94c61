/* fp32 CPU kernels of the GPT operators; the contract is in
 * include/osdp/kernels_cpu.h.
 *
 * Matrix products go through cblas_sgemm; everything else is plain C loops,
 * parallelised with OpenMP over independent rows/columns when the work is large
 * enough (the `if` clauses keep small calls serial).  Every reduction has a fixed
 * order that does not depend on the thread count, so each kernel returns bitwise
 * identical results for identical inputs (no atomics, no racy sums). */
#include "osdp/kernels_cpu.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#define OSDP_PRAGMA(x) _Pragma(#x)
#define OMP(x) OSDP_PRAGMA(omp x)
#else
#define OMP(x)
#endif

/* elements of work below which a loop stays serial (thread start-up costs more) */
#define PAR_MIN_WORK 32768L

/* ------------------------------------------------------------------ matmul */

/* sums of the columns [o0, o0+n) of dy (BT, OC) added into db; rows in order */
static void column_sums_block(float *db, const float *dy, int BT, int OC, int o0,
                              int n)
{
    float acc[64];
    for (int j = 0; j < n; j++) acc[j] = 0.0f;
    for (int i = 0; i < BT; i++) {
        const float *row = dy + (size_t)i * OC + o0;
        for (int j = 0; j < n; j++) acc[j] += row[j];
    }
    for (int j = 0; j < n; j++) db[o0 + j] += acc[j];
}

void matmul_forward_strided(float *y, const float *x, int ldx, const float *w, const float *b,
                            int BT, int IC, int OC, int accumulate)
{
    /* The bias is laid into y first and sgemm adds x @ w with beta = 1: one pass
     * over y fewer than beta = 0 (OpenBLAS zeroes C in a separate pass) followed
     * by a bias loop. */
    float beta = accumulate ? 1.0f : 0.0f;
    if (b) {
        /* serial on purpose, like the column sums in matmul_backward: an OpenMP
         * region next to a threaded sgemm leaves OpenMP threads spinning on the
         * cores OpenBLAS needs (measured: the qkv GEMM pair 2x slower on 2 cores) */
        for (int i = 0; i < BT; i++) {
            float *row = y + (size_t)i * OC;
            if (accumulate)
                for (int o = 0; o < OC; o++) row[o] += b[o];
            else
                memcpy(row, b, (size_t)OC * sizeof *row);
        }
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BT, OC, IC, 1.0f, x, ldx,
                w, OC, beta, y, OC);
}

void matmul_forward(float *y, const float *x, const float *w, const float *b,
                    int BT, int IC, int OC, int accumulate)
{
    matmul_forward_strided(y, x, IC, w, b, BT, IC, OC, accumulate);
}

void matmul_backward_strided(float *dx, int lddx, float *dw, float *db, const float *dy,
                             const float *x, int ldx, const float *w, int BT, int IC, int OC,
                             int dx_accumulate)
{
    /* dx (BT,IC) = dy (BT,OC) @ w^T, w stored (IC,OC) */
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BT, IC, OC, 1.0f, dy,
                    OC, w, OC, dx_accumulate ? 1.0f : 0.0f, dx, lddx);
    /* dw (IC,OC) += x^T (IC,BT) @ dy (BT,OC) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, IC, OC, BT, 1.0f, x, ldx, dy,
                OC, 1.0f, dw, OC);
    if (db) {
        /* blocks of 64 columns, each summed over the rows in order (cache
         * friendly; a fixed order, so bitwise reproducible) */
        int nblocks = (OC + 63) / 64;
        for (int blk = 0; blk < nblocks; blk++) {
            int o0 = blk * 64;
            int n = OC - o0 < 64 ? OC - o0 : 64;
            column_sums_block(db, dy, BT, OC, o0, n);
        }
    }
}

void matmul_backward(float *dx, float *dw, float *db, const float *dy,
                     const float *x, const float *w, int BT, int IC, int OC,
                     int dx_accumulate)
{
    matmul_backward_strided(dx, IC, dw, db, dy, x, IC, w, BT, IC, OC, dx_accumulate);
}

/* --------------------------------------------------------------- layernorm */

void layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                       const float *w, const float *b, int BT, int C)
{
    const float eps = 1e-5f;
    OMP(parallel for if((long)BT * C >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++) {
        const float *xi = x + (size_t)i * C;
        float *yi = y + (size_t)i * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += xi[c];
        m /= (float)C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = xi[c] - m;
            v += d * d;
        }
        v /= (float)C;
        float s = 1.0f / sqrtf(v + eps);
        for (int c = 0; c < C; c++) yi[c] = (xi[c] - m) * s * w[c] + b[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

void layernorm_backward(float *dx, float *dw, float *db, const float *dy,
                        const float *x, const float *w, const float *mean,
                        const float *rstd, int BT, int C)
{
    /* dx: rows are independent */
    OMP(parallel for if((long)BT * C >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++) {
        const float *dyi = dy + (size_t)i * C;
        const float *xi = x + (size_t)i * C;
        float *dxi = dx + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float norm = (xi[c] - m) * s;
            float dnorm = w[c] * dyi[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= (float)C;
        dnorm_norm_mean /= (float)C;
        for (int c = 0; c < C; c++) {
            float norm = (xi[c] - m) * s;
            float dnorm = w[c] * dyi[c];
            dxi[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
    /* dw, db: sums over rows, split among threads by blocks of columns so
     * that each sum runs over the rows in order */
    int nblocks = (C + 63) / 64;
    OMP(parallel for if((long)BT * C >= 4 * PAR_MIN_WORK) schedule(static))
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * 64;
        int n = C - c0 < 64 ? C - c0 : 64;
        float aw[64], ab[64];
        for (int j = 0; j < n; j++) aw[j] = ab[j] = 0.0f;
        for (int i = 0; i < BT; i++) {
            const float *dyi = dy + (size_t)i * C + c0;
            const float *xi = x + (size_t)i * C + c0;
            float m = mean[i], s = rstd[i];
            for (int j = 0; j < n; j++) {
                aw[j] += (xi[j] - m) * s * dyi[j];
                ab[j] += dyi[j];
            }
        }
        for (int j = 0; j < n; j++) {
            dw[c0 + j] += aw[j];
            db[c0 + j] += ab[j];
        }
    }
}

/* -------------------------------------------------------------------- gelu */

#define GELU_SCALING 0.7978845608028654f /* sqrt(2/pi) */

/* AVX-512 / AVX2 versions chosen at load time (ifunc), SSE2 otherwise: the
 * binary stays portable across cluster nodes. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OSDP_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OSDP_VECTOR_CLONES
#endif

/* tanh without libm: libm's tanhf does not vectorise and took a third of a
 * training step.  tanh|u| = (1 - e) / (1 + e) with e = e^{-2|u|} in (0, 1]:
 * e = 2^n * 2^f, n the nearest integer to -2|u| log2(e) (the 1.5*2^23
 * rounding trick) and 2^f, |f| <= 1/2, from a degree-6 Taylor polynomial
 * (relative error < 3e-8); 2^n is built in the exponent bits, and a negative
 * biased exponent (e below 2^-126) is masked to 0 without a branch — a float
 * clamp would stop GCC from vectorising the loop.  Absolute error against
 * tanh < 1.5e-7.  Pure arithmetic: vectorised, and the same bits on every
 * thread count. */
static inline float tanh_fast(float u)
{
    float t = -2.0f * 1.44269504088896341f * fabsf(u);   /* log2(e^{-2|u|}) */
    float n = (t + 12582912.0f) - 12582912.0f;            /* round to nearest */
    float f = (t - n) * 0.693147180559945309f;            /* e^f = 2^(t-n) */
    float p = 1.0f + f * (1.0f + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720))))));
    int32_t biased = (int32_t)n + 127;
    biased &= ~(biased >> 31);                            /* < 0 -> 0: e underflows to 0 */
    union { int32_t i; float f; } scale = {.i = biased << 23};
    float e = p * scale.f;
    return copysignf((1.0f - e) / (1.0f + e), u);
}

OSDP_VECTOR_CLONES void gelu_forward(float *y, const float *x, size_t n)
{
    OMP(parallel for simd if(n >= (size_t)PAR_MIN_WORK) schedule(static))
    for (size_t i = 0; i < n; i++) {
        float xi = x[i];
        float cube = 0.044715f * xi * xi * xi;
        y[i] = 0.5f * xi * (1.0f + tanh_fast(GELU_SCALING * (xi + cube)));
    }
}

OSDP_VECTOR_CLONES void gelu_backward(float *dx, const float *x, const float *dy, size_t n)
{
    OMP(parallel for simd if(n >= (size_t)PAR_MIN_WORK) schedule(static))
    for (size_t i = 0; i < n; i++) {
        float xi = x[i];
        float cube = 0.044715f * xi * xi * xi;
        float th = tanh_fast(GELU_SCALING * (xi + cube));
        float sech2 = 1.0f - th * th; /* sech^2 = 1 - tanh^2, no coshf overflow */
        float grad = 0.5f * (1.0f + th) +
                     xi * 0.5f * sech2 * GELU_SCALING * (1.0f + 3.0f * 0.044715f * xi * xi);
        dx[i] = grad * dy[i];
    }
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

static void attention_head_forward(float *out, float *att, const float *q,
                                   const float *k, const float *v, int T, int ld,
                                   int ldo, int HS, float scale, int rows_parallel)
{
    (void)rows_parallel; /* used only by the OpenMP pragma */
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        /* pre[r0:r1, 0:r1] = scale * q[r0:r1] @ k[0:r1]^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, HS, scale,
                    q + (size_t)r0 * ld, ld, k, ld, 0.0f, att + (size_t)r0 * T, T);
    }
    OMP(parallel for if(rows_parallel) schedule(static))
    for (int i = 0; i < T; i++) {
        float *row = att + (size_t)i * T;
        float maxv = row[0];
        for (int j = 1; j <= i; j++)
            if (row[j] > maxv) maxv = row[j];
        float sum = 0.0f;
        for (int j = 0; j <= i; j++) {
            float e = expf(row[j] - maxv);
            row[j] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
        for (int j = 0; j <= i; j++) row[j] *= inv;
        for (int j = i + 1; j < T; j++) row[j] = 0.0f;
    }
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        /* out[r0:r1] = att[r0:r1, 0:r1] @ v[0:r1] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, HS, r1, 1.0f,
                    att + (size_t)r0 * T, T, v, ld, 0.0f, out + (size_t)r0 * ldo, ldo);
    }
}

void attention_forward(float *out, float *att, const float *qkv, int B, int T,
                       int C, int NH)
{
    int HS = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    int nbh = B * NH;
    int heads_par = heads_in_parallel(B, T, NH, HS);
    int rows_par = !heads_par && (long)T * T >= PAR_MIN_WORK;
    OMP(parallel for if(heads_par) schedule(static))
    for (int bh = 0; bh < nbh; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * ld + (size_t)h * HS;
        attention_head_forward(out + (size_t)b * T * C + (size_t)h * HS,
                               att + (size_t)bh * T * T, q, q + C, q + 2 * C, T, ld,
                               C, HS, scale, rows_par);
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
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, HS, 1.0f,
                    dout + (size_t)r0 * ldo, ldo, v, ld, 0.0f, s + (size_t)r0 * T, T);
        /* dv[r0:r1] = att[r0:T, r0:r1]^T @ dout[r0:T]  (att is 0 above the diagonal) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, HS, T - r0, 1.0f,
                    att + (size_t)r0 * T + r0, T, dout + (size_t)r0 * ldo, ldo, 0.0f,
                    dv + (size_t)r0 * ld, ld);
    }
    /* softmax backward in place: dpre = scale * att * (datt - sum_j att*datt) */
    OMP(parallel for if(rows_parallel) schedule(static))
    for (int i = 0; i < T; i++) {
        const float *a = att + (size_t)i * T;
        float *d = s + (size_t)i * T;
        int rend = (i / ATT_BLOCK + 1) * ATT_BLOCK;
        if (rend > T) rend = T;
        float dot = 0.0f;
        for (int j = 0; j <= i; j++) dot += a[j] * d[j];
        for (int j = 0; j <= i; j++) d[j] = scale * a[j] * (d[j] - dot);
        for (int j = i + 1; j < rend; j++) d[j] = 0.0f; /* read by the products below */
    }
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        /* dq[r0:r1] = dpre[r0:r1, 0:r1] @ k[0:r1] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, HS, r1, 1.0f,
                    s + (size_t)r0 * T, T, k, ld, 0.0f, dq + (size_t)r0 * ld, ld);
        /* dk[r0:r1] = dpre[r0:T, r0:r1]^T @ q[r0:T] */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, HS, T - r0, 1.0f,
                    s + (size_t)r0 * T + r0, T, q + (size_t)r0 * ld, ld, 0.0f,
                    dk + (size_t)r0 * ld, ld);
    }
}

void attention_backward(float *dqkv, float *scratch, const float *dout,
                        const float *qkv, const float *att, int B, int T, int C,
                        int NH)
{
    /* Every row of dq, dk and dv is written by exactly one sgemm with beta = 0,
     * which overwrites C, so dqkv needs no zeroing pass. */
    int HS = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    int nbh = B * NH;
    int heads_par = heads_in_parallel(B, T, NH, HS);
    int rows_par = !heads_par && (long)T * T >= PAR_MIN_WORK;
    OMP(parallel for if(heads_par) schedule(static))
    for (int bh = 0; bh < nbh; bh++) {
        int b = bh / NH, h = bh % NH;
        size_t off = (size_t)b * T * ld + (size_t)h * HS;
        const float *q = qkv + off;
        float *dq = dqkv + off;
        attention_head_backward(dq, dq + C, dq + 2 * C, scratch + (size_t)bh * T * T,
                                dout + (size_t)b * T * C + (size_t)h * HS, q, q + C,
                                q + 2 * C, att + (size_t)bh * T * T, T, ld, C, HS,
                                scale, rows_par);
    }
}

/* --------------------------------------------------------------- embedding */

void embedding_forward(float *x, const int *tokens, const float *wte,
                       const float *wpe, int B, int T, int C)
{
    int BT = B * T;
    OMP(parallel for if((long)BT * C >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++) {
        float *xi = x + (size_t)i * C;
        const float *e = wte + (size_t)tokens[i] * C;
        const float *p = wpe + (size_t)(i % T) * C;
        for (int c = 0; c < C; c++) xi[c] = e[c] + p[c];
    }
}

void embedding_backward(float *dwte, float *dwpe, const float *dx,
                        const int *tokens, int B, int T, int C)
{
    /* Threads own blocks of columns and walk the rows in order, so a token
     * that occurs several times is accumulated in a fixed order. */
    int BT = B * T;
    int nblocks = (C + 63) / 64;
    OMP(parallel for if((long)BT * C >= 4 * PAR_MIN_WORK) schedule(static))
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * 64;
        int c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int i = 0; i < BT; i++) {
            const float *g = dx + (size_t)i * C;
            float *e = dwte + (size_t)tokens[i] * C;
            float *p = dwpe + (size_t)(i % T) * C;
            for (int c = c0; c < c1; c++) {
                e[c] += g[c];
                p[c] += g[c];
            }
        }
    }
}

/* ------------------------------------------------------------ crossentropy */

void crossentropy_forward(float *losses, float *probs, const int *targets, int BT,
                          int V)
{
    OMP(parallel for if((long)BT * V >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++) {
        float *p = probs + (size_t)i * V;
        float maxv = p[0];
        for (int j = 1; j < V; j++)
            if (p[j] > maxv) maxv = p[j];
        float sum = 0.0f;
        for (int j = 0; j < V; j++) {
            float e = expf(p[j] - maxv);
            p[j] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
        for (int j = 0; j < V; j++) p[j] *= inv;
        losses[i] = -logf(p[targets[i]]);
    }
}

void crossentropy_backward(float *dlogits, const float *probs, const int *targets,
                           float scale, int BT, int V)
{
    OMP(parallel for if((long)BT * V >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++) {
        const float *p = probs + (size_t)i * V;
        float *d = dlogits + (size_t)i * V;
        const float p_target = p[targets[i]];   /* read first: d may alias p */
        for (int j = 0; j < V; j++) d[j] = scale * p[j];
        d[targets[i]] = scale * (p_target - 1.0f);
    }
}

/* ---------------------------------------------------------------- residual */

void residual_forward(float *out, const float *a, const float *b, size_t n)
{
    OMP(parallel for if(n >= (size_t)4 * PAR_MIN_WORK) schedule(static))
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void vector_accumulate(float *y, const float *x, size_t n)
{
    OMP(parallel for if(n >= (size_t)4 * PAR_MIN_WORK) schedule(static))
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* Tiled causal attention with an online softmax (FlashAttention-2's
 * algorithm): the forward keeps the output and one log-sum-exp per (head,
 * row), never the (T, T) probabilities; the backward recomputes each tile's
 * probabilities from Q, K and that log-sum-exp.
 *
 * One (sequence, head) is one task, run whole by one thread: its tiles in a
 * fixed order, so the bits do not depend on the thread count, and d(Q) sums
 * over key tiles without atomics.  The tile products are cblas_sgemm calls on
 * strided views of qkv (no copies); tiles above the diagonal are never
 * computed.  Each thread holds its tiles (a few tens of KiB, the score tile
 * fits in L1/L2) in one buffer it allocates per call. */
#include "model/kernels_cpu.h"

#include "kernels_cpu_internal.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

/* key rows per tile; query rows per tile (TILE_Q at most, fewer for wide
 * heads: see tile_rows) */
#define TILE_K 64
#define TILE_Q 64
/* OpenBLAS runs a product on one thread when M*N*K <= 65536 x 4 (its default
 * GEMM_MULTITHREAD_THRESHOLD): tasks go parallel only while a tile product
 * stays under it (kernels_cpu.c's attention says why) */
#define TILE_SERIAL_MNK 262144L

typedef struct tiled_dims {
    int HS, ld, tq;            /* head size, qkv row stride, query rows per tile */
    float scale;               /* 1 / sqrt(HS) */
    int tasks_parallel;
} tiled_dims;

static tiled_dims tiled_dims_of(int B, int T, int C, int NH)
{
    tiled_dims d;
    d.HS = C / NH;
    d.ld = 3 * C;
    d.scale = 1.0f / sqrtf((float)d.HS);
    long tq = TILE_SERIAL_MNK / ((long)TILE_K * d.HS);
    d.tq = tq >= TILE_Q ? TILE_Q : tq >= 8 ? (int)tq : 8;
    d.tasks_parallel = (long)d.tq * TILE_K * d.HS <= TILE_SERIAL_MNK && (long)B * NH * T * d.HS >= PAR_MIN_WORK;
    return d;
}

static float *tile_buffer(size_t floats)
{
    float *buf = malloc(floats * sizeof *buf);
    if (!buf) {
        /* a few tens of KiB: if even that fails the process cannot go on */
        fprintf(stderr, "osdp: attention: out of host memory for a %zu-byte tile\n", floats * sizeof *buf);
        abort();
    }
    return buf;
}

/* how many keys of the tile starting at key j0 (nk of them) row i sees: keys <= i */
static inline int visible_keys(int i, int j0, int nk)
{
    int n = i - j0 + 1;
    return n < 0 ? 0 : n < nk ? n : nk;
}

/* One row of a forward tile: s (nk scores) become exp(s - m_new) over the
 * n visible keys, 0 past them; m and l (running max and sum) updated; the
 * returned factor rescales the row's accumulated output. */
OSDP_VECTOR_CLONES static float online_softmax_row(float *s, int n, int nk, float *m, float *l)
{
    const float mx = row_max(s, n, *m);
    const float sum = exp_shifted_in_place(s, n, mx);
    for (int j = n; j < nk; j++) s[j] = 0.0f;
    const float corr = n == 0 ? 1.0f : *m == -INFINITY ? 0.0f : exp_nonpositive(*m - mx);
    *l = *l * corr + sum;
    *m = mx;
    return corr;
}

static void head_forward(float *out, float *lse, const float *q, const float *k, const float *v, int T, int ldo,
                         const tiled_dims *d, float *buf)
{
    const int HS = d->HS, ld = d->ld, tq = d->tq;
    float *s = buf, *acc = s + (size_t)tq * TILE_K, *m = acc + (size_t)tq * HS, *l = m + tq;
    for (int i0 = 0; i0 < T; i0 += tq) {
        const int nq = i0 + tq < T ? tq : T - i0, i1 = i0 + nq;
        for (int r = 0; r < nq; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        for (int j0 = 0; j0 < i1; j0 += TILE_K) {
            const int nk = j0 + TILE_K < i1 ? TILE_K : i1 - j0;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, HS, d->scale, q + (size_t)i0 * ld, ld,
                        k + (size_t)j0 * ld, ld, 0.0f, s, TILE_K);
            for (int r = 0; r < nq; r++) {
                float corr = online_softmax_row(s + (size_t)r * TILE_K, visible_keys(i0 + r, j0, nk), nk, &m[r], &l[r]);
                float *a = acc + (size_t)r * HS;
                if (j0 == 0) continue;          /* the first tile overwrites acc (beta 0 below) */
                if (corr != 1.0f)
                    for (int c = 0; c < HS; c++) a[c] *= corr;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, HS, nk, 1.0f, s, TILE_K,
                        v + (size_t)j0 * ld, ld, j0 == 0 ? 0.0f : 1.0f, acc, HS);
        }
        for (int r = 0; r < nq; r++) {
            const float inv = 1.0f / l[r];
            float *o = out + (size_t)(i0 + r) * ldo;
            const float *a = acc + (size_t)r * HS;
            for (int c = 0; c < HS; c++) o[c] = a[c] * inv;
            lse[i0 + r] = m[r] + logf(l[r]);
        }
    }
}

void attention_forward_tiled(float *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    const tiled_dims d = tiled_dims_of(B, T, C, NH);
    const size_t buf_floats = (size_t)d.tq * (TILE_K + d.HS + 2);
    OMP(parallel if(d.tasks_parallel))
    {
        float *buf = tile_buffer(buf_floats);
        OMP(for schedule(dynamic, 1))
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            const float *q = qkv + (size_t)b * T * d.ld + (size_t)h * d.HS;
            head_forward(out + (size_t)b * T * C + (size_t)h * d.HS, lse + (size_t)bh * T, q, q + C, q + 2 * C, T,
                         C, &d, buf);
        }
        free(buf);
    }
}

/* p (nq x nk tile) = exp(s - lse_row) over each row's visible keys, 0 past them */
OSDP_VECTOR_CLONES static void tile_probabilities(float *p, const float *lse, int i0, int nq, int j0, int nk)
{
    for (int r = 0; r < nq; r++) {
        float *row = p + (size_t)r * TILE_K;
        const int n = visible_keys(i0 + r, j0, nk);
        const float base = lse[i0 + r];
        OMP(simd)
        for (int j = 0; j < n; j++) row[j] = exp_nonpositive(row[j] - base);
        for (int j = n; j < nk; j++) row[j] = 0.0f;
    }
}

/* ds = scale * p * (dp - D_row), in place over dp */
OSDP_VECTOR_CLONES static void tile_score_gradient(float *dp, const float *p, const float *rowdot, int i0, int nq,
                                                    int nk, float scale)
{
    for (int r = 0; r < nq; r++) {
        float *g = dp + (size_t)r * TILE_K;
        const float *pr = p + (size_t)r * TILE_K;
        const float D = rowdot[i0 + r];
        OMP(simd)
        for (int j = 0; j < nk; j++) g[j] = scale * pr[j] * (g[j] - D);
    }
}

static void head_backward(float *dq, float *dk, float *dv, float *rowdot, const float *dout, const float *out,
                          const float *q, const float *k, const float *v, const float *lse, int T, int ldo,
                          const tiled_dims *d, float *buf)
{
    const int HS = d->HS, ld = d->ld, tq = d->tq;
    float *p = buf, *dp = p + (size_t)tq * TILE_K;
    /* D = rowsum(dO * O): the softmax backward's sum_j P dP without P's rows */
    for (int i = 0; i < T; i++) {
        const float *g = dout + (size_t)i * ldo, *o = out + (size_t)i * ldo;
        float dot = 0.0f;
        for (int c = 0; c < HS; c++) dot += g[c] * o[c];
        rowdot[i] = dot;
        for (int c = 0; c < HS; c++) dq[(size_t)i * ld + c] = 0.0f;
    }
    for (int j0 = 0; j0 < T; j0 += TILE_K) {
        const int nk = j0 + TILE_K < T ? TILE_K : T - j0;
        for (int j = j0; j < j0 + nk; j++)
            for (int c = 0; c < HS; c++) dk[(size_t)j * ld + c] = dv[(size_t)j * ld + c] = 0.0f;
        /* the query tiles that see any of these keys: rows >= j0 */
        for (int i0 = j0 / tq * tq; i0 < T; i0 += tq) {
            const int nq = i0 + tq < T ? tq : T - i0;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, HS, d->scale, q + (size_t)i0 * ld, ld,
                        k + (size_t)j0 * ld, ld, 0.0f, p, TILE_K);
            tile_probabilities(p, lse, i0, nq, j0, nk);
            /* dV += P^T dO */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, HS, nq, 1.0f, p, TILE_K,
                        dout + (size_t)i0 * ldo, ldo, 1.0f, dv + (size_t)j0 * ld, ld);
            /* dP = dO V^T, then dS in place */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, HS, 1.0f, dout + (size_t)i0 * ldo, ldo,
                        v + (size_t)j0 * ld, ld, 0.0f, dp, TILE_K);
            tile_score_gradient(dp, p, rowdot, i0, nq, nk, d->scale);
            /* dQ += dS K, dK += dS^T Q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, HS, nk, 1.0f, dp, TILE_K,
                        k + (size_t)j0 * ld, ld, 1.0f, dq + (size_t)i0 * ld, ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, HS, nq, 1.0f, dp, TILE_K,
                        q + (size_t)i0 * ld, ld, 1.0f, dk + (size_t)j0 * ld, ld);
        }
    }
}

void attention_backward_tiled(float *dqkv, float *rowdot, const float *dout, const float *out, const float *qkv,
                              const float *lse, int B, int T, int C, int NH)
{
    const tiled_dims d = tiled_dims_of(B, T, C, NH);
    const size_t buf_floats = 2 * (size_t)d.tq * TILE_K;
    OMP(parallel if(d.tasks_parallel))
    {
        float *buf = tile_buffer(buf_floats);
        OMP(for schedule(dynamic, 1))
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            const size_t off = (size_t)b * T * d.ld + (size_t)h * d.HS, ooff = (size_t)b * T * C + (size_t)h * d.HS;
            const float *q = qkv + off;
            float *dq = dqkv + off;
            head_backward(dq, dq + C, dq + 2 * C, rowdot + (size_t)bh * T, dout + ooff, out + ooff, q, q + C,
                          q + 2 * C, lse + (size_t)bh * T, T, C, &d, buf);
        }
        free(buf);
    }
}

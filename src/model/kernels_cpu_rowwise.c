/* The row-wise and element-wise fp32 CPU kernels (contract:
 * src/model/kernels_cpu.h): LayerNorm, GELU, embedding, cross-entropy,
 * residual.
 *
 * Rows (or blocks of columns) are shared among OpenMP threads when the work
 * is large enough; inside a row the loops are `omp simd`, with the AVX-512 /
 * AVX2 clone picked at load time.  A simd reduction sums in a fixed lane
 * order chosen at compile time, never by the thread count, so every kernel
 * returns the same bits for the same inputs on any number of threads. */
#include "model/kernels_cpu.h"

#include "kernels_cpu_internal.h"

#include <limits.h>
#include <math.h>
#include <string.h>

/* --------------------------------------------------------------- layernorm */

/* one row of layernorm_forward: the body both it and
 * residual_layernorm_forward run, so that the two give the same bits */
static inline __attribute__((always_inline)) void layernorm_row(float *yi, float *mean, float *rstd,
                                                                const float *xi, const float *w, const float *b,
                                                                int C)
{
    const float eps = 1e-5f;
    float m = 0.0f;
    OMP(simd reduction(+:m))
    for (int c = 0; c < C; c++) m += xi[c];
    m /= (float)C;
    float v = 0.0f;
    OMP(simd reduction(+:v))
    for (int c = 0; c < C; c++) {
        float d = xi[c] - m;
        v += d * d;
    }
    v /= (float)C;
    float s = 1.0f / sqrtf(v + eps);
    OMP(simd)
    for (int c = 0; c < C; c++) yi[c] = (xi[c] - m) * s * w[c] + b[c];
    *mean = m;
    *rstd = s;
}

OSDP_VECTOR_CLONES void layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                                          const float *w, const float *b, int BT, int C)
{
    OMP(parallel for if((long)BT * C >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++)
        layernorm_row(y + (size_t)i * C, &mean[i], &rstd[i], x + (size_t)i * C, w, b, C);
}

/* residual_forward's sum, then layernorm_forward's row, one row at a time
 * while the row is in cache: the same arithmetic, so the same bits */
OSDP_VECTOR_CLONES void residual_layernorm_forward(float *res, float *y, float *mean, float *rstd, const float *a,
                                                   const float *b, const float *w, const float *bias, int BT, int C)
{
    OMP(parallel for if((long)BT * C >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++) {
        float *ri = res + (size_t)i * C;
        const float *ai = a + (size_t)i * C, *bi = b + (size_t)i * C;
        OMP(simd)
        for (int c = 0; c < C; c++) ri[c] = ai[c] + bi[c];
        layernorm_row(y + (size_t)i * C, &mean[i], &rstd[i], ri, w, bias, C);
    }
}

/* dw, db (C) += sums over the rows, threads owning blocks of 64 columns so
 * that each sum runs over the rows in order */
OSDP_VECTOR_CLONES static void layernorm_param_grads(float *dw, float *db, const float *dy, const float *x,
                                                     const float *mean, const float *rstd, int BT, int C)
{
    enum { W = 64 };
    const int nblocks = (C + W - 1) / W;
    OMP(parallel for if((long)BT * C >= 4 * PAR_MIN_WORK) schedule(static))
    for (int blk = 0; blk < nblocks; blk++) {
        const int c0 = blk * W, n = C - c0 < W ? C - c0 : W;
        float aw[W] = {0}, ab[W] = {0};
        for (int i = 0; i < BT; i++) {
            const float *dyi = dy + (size_t)i * C + c0;
            const float *xi = x + (size_t)i * C + c0;
            const float m = mean[i], s = rstd[i];
            OMP(simd)
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

OSDP_VECTOR_CLONES void layernorm_backward(float *dx, float *dw, float *db, const float *dy,
                                           const float *x, const float *w, const float *mean,
                                           const float *rstd, int BT, int C)
{
    /* dx: rows are independent */
    OMP(parallel for if((long)BT * C >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++) {
        const float *dyi = dy + (size_t)i * C;
        const float *xi = x + (size_t)i * C;
        float *dxi = dx + (size_t)i * C;
        const float m = mean[i], s = rstd[i];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        OMP(simd reduction(+:dnorm_mean, dnorm_norm_mean))
        for (int c = 0; c < C; c++) {
            float norm = (xi[c] - m) * s;
            float dnorm = w[c] * dyi[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= (float)C;
        dnorm_norm_mean /= (float)C;
        OMP(simd)
        for (int c = 0; c < C; c++) {
            float norm = (xi[c] - m) * s;
            float dnorm = w[c] * dyi[c];
            dxi[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
    layernorm_param_grads(dw, db, dy, x, mean, rstd, BT, C);
}

/* -------------------------------------------------------------------- gelu */

#define GELU_SCALING 0.7978845608028654f /* sqrt(2/pi) */

/* tanh u = sign(u) (1 - e) / (1 + e), e = e^{-2|u|} in (0, 1]: absolute error
 * against tanhf < 1.5e-7 */
static inline float tanh_fast(float u)
{
    float e = exp_nonpositive(-2.0f * fabsf(u));
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

/* --------------------------------------------------------------- embedding */

void embedding_forward_range(float *x, const int *tokens, const float *wte,
                             const float *wpe, int B, int T, int C, int vocab_lo, int vocab_n)
{
    int BT = B * T;
    OMP(parallel for if((long)BT * C >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++) {
        float *xi = x + (size_t)i * C;
        const int row = tokens[i] - vocab_lo;
        const float *e = row >= 0 && row < vocab_n ? wte + (size_t)row * C : NULL;
        const float *p = wpe ? wpe + (size_t)(i % T) * C : NULL;
        if (e && p) {
            OMP(simd)
            for (int c = 0; c < C; c++) xi[c] = e[c] + p[c];
        } else if (e || p) {
            memcpy(xi, e ? e : p, (size_t)C * sizeof *xi);
        } else {
            memset(xi, 0, (size_t)C * sizeof *xi);
        }
    }
}

void embedding_forward(float *x, const int *tokens, const float *wte,
                       const float *wpe, int B, int T, int C)
{
    embedding_forward_range(x, tokens, wte, wpe, B, T, C, 0, INT_MAX);
}

void embedding_backward_range(float *dwte, float *dwpe, const float *dx,
                              const int *tokens, int B, int T, int C, int vocab_lo, int vocab_n)
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
            const int row = tokens[i] - vocab_lo;
            if (row >= 0 && row < vocab_n) {
                float *e = dwte + (size_t)row * C;
                OMP(simd)
                for (int c = c0; c < c1; c++) e[c] += g[c];
            }
            if (dwpe) {
                float *p = dwpe + (size_t)(i % T) * C;
                OMP(simd)
                for (int c = c0; c < c1; c++) p[c] += g[c];
            }
        }
    }
}

void embedding_backward(float *dwte, float *dwpe, const float *dx,
                        const int *tokens, int B, int T, int C)
{
    embedding_backward_range(dwte, dwpe, dx, tokens, B, T, C, 0, INT_MAX);
}

/* ------------------------------------------------------------ crossentropy */

OSDP_VECTOR_CLONES void crossentropy_forward(float *losses, float *probs, const int *targets, int BT, int V)
{
    OMP(parallel for if((long)BT * V >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++) {
        float *p = probs + (size_t)i * V;
        const float maxv = row_max(p + 1, V - 1, p[0]);
        const float target_shifted = p[targets[i]] - maxv;   /* read before p becomes probabilities */
        const float sum = exp_shifted_in_place(p, V, maxv);
        const float inv = 1.0f / sum;
        OMP(simd)
        for (int j = 0; j < V; j++) p[j] *= inv;
        /* max + log-sum-exp - target logit, not -log p[target]: p[target]
         * underflows to 0 (an infinite loss) once the target's logit is
         * ~88 below the max; sum >= 1 here, so its log is finite */
        losses[i] = logf(sum) - target_shifted;
    }
}

/* The vocab-parallel form: the same max, sum of exponentials and target
 * logit, per rank over its valid columns, combined from the group's. */
OSDP_VECTOR_CLONES void crossentropy_stats(float *stats, const float *logits, const int *targets, int BT, int V,
                                           int valid, int vocab_lo)
{
    OMP(parallel for if((long)BT * V >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++) {
        const float *l = logits + (size_t)i * V;
        float *st = stats + 3 * (size_t)i;
        if (valid <= 0) {   /* a rank holding only padding */
            st[0] = -INFINITY;
            st[1] = 0.0f;
            st[2] = 0.0f;
            continue;
        }
        const float maxv = row_max(l + 1, valid - 1, l[0]);
        float sum = 0.0f;
        OMP(simd reduction(+:sum))
        for (int j = 0; j < valid; j++) sum += exp_nonpositive(l[j] - maxv);
        const int target = targets[i] - vocab_lo;
        st[0] = maxv;
        st[1] = sum;
        st[2] = target >= 0 && target < valid ? l[target] : 0.0f;
    }
}

/* Row i's max, sum of exponentials and target logit over the group's
 * statistics (group_size x BT x 3): ranks in order, so that every rank of the
 * group gets the same bits; a rank with no valid column (sum 0) adds nothing */
static inline void group_row_stats(const float *group_stats, int BT, int group_size, int i, float *max_out,
                                   float *sum_out, float *target_out)
{
    const size_t rank_stride = 3 * (size_t)BT;
    float maxv = -INFINITY, target_logit = 0.0f;
    for (int r = 0; r < group_size; r++) {
        const float *st = group_stats + r * rank_stride + 3 * (size_t)i;
        if (st[1] > 0.0f && st[0] > maxv) maxv = st[0];
        target_logit += st[2];
    }
    float sum = 0.0f;
    for (int r = 0; r < group_size; r++) {
        const float *st = group_stats + r * rank_stride + 3 * (size_t)i;
        if (st[1] > 0.0f) sum += st[1] * exp_nonpositive(st[0] - maxv);
    }
    *max_out = maxv;
    *sum_out = sum;
    *target_out = target_logit;
}

OSDP_VECTOR_CLONES void crossentropy_finish(float *losses, float *probs, const float *group_stats, int BT, int V,
                                            int valid, int group_size)
{
    OMP(parallel for if((long)BT * V >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++) {
        float maxv, sum, target_logit;
        group_row_stats(group_stats, BT, group_size, i, &maxv, &sum, &target_logit);
        float *p = probs + (size_t)i * V;
        const float inv = 1.0f / sum;
        OMP(simd)
        for (int j = 0; j < valid; j++) p[j] = exp_nonpositive(p[j] - maxv) * inv;
        for (int j = valid > 0 ? valid : 0; j < V; j++) p[j] = 0.0f;
        losses[i] = logf(sum) - (target_logit - maxv);
    }
}

OSDP_VECTOR_CLONES void crossentropy_backward_range(float *dlogits, const float *probs, const int *targets,
                                                    float scale, int BT, int V, int vocab_lo)
{
    OMP(parallel for if((long)BT * V >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++) {
        const float *p = probs + (size_t)i * V;
        float *d = dlogits + (size_t)i * V;
        const int target = targets[i] - vocab_lo;
        const int has_target = target >= 0 && target < V;
        const float p_target = has_target ? p[target] : 0.0f;   /* read first: d may alias p */
        OMP(simd)
        for (int j = 0; j < V; j++) d[j] = scale * p[j];
        if (has_target) d[target] = scale * (p_target - 1.0f);
    }
}

void crossentropy_backward(float *dlogits, const float *probs, const int *targets, float scale, int BT, int V)
{
    crossentropy_backward_range(dlogits, probs, targets, scale, BT, V, 0);
}

/* The fused head's two halves: from the group's statistics, the loss and the
 * log-sum-exp of each row (no probabilities kept); and, from that
 * log-sum-exp, d(logits) of a chunk of recomputed logits, in place. */
void crossentropy_lse(float *losses, float *lse, const float *group_stats, int BT, int group_size)
{
    for (int i = 0; i < BT; i++) {
        float maxv, sum, target_logit;
        group_row_stats(group_stats, BT, group_size, i, &maxv, &sum, &target_logit);
        const float log_sum = logf(sum);
        losses[i] = log_sum - (target_logit - maxv);
        lse[i] = maxv + log_sum;
    }
}

OSDP_VECTOR_CLONES void crossentropy_backward_lse(float *dlogits, const float *lse, const int *targets, float scale,
                                                  int BT, int V, int valid, int vocab_lo)
{
    OMP(parallel for if((long)BT * V >= PAR_MIN_WORK) schedule(static))
    for (int i = 0; i < BT; i++) {
        float *d = dlogits + (size_t)i * V;
        const float base = lse[i];
        const int n = valid < 0 ? 0 : valid;
        OMP(simd)
        for (int j = 0; j < n; j++) d[j] = scale * exp_nonpositive(d[j] - base);
        for (int j = n; j < V; j++) d[j] = 0.0f;
        const int target = targets[i] - vocab_lo;
        if (target >= 0 && target < n) d[target] -= scale;
    }
}

/* ---------------------------------------------------------------- residual */

void residual_forward(float *out, const float *a, const float *b, size_t n)
{
    OMP(parallel for simd if(n >= (size_t)4 * PAR_MIN_WORK) schedule(static))
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void vector_accumulate(float *y, const float *x, size_t n)
{
    OMP(parallel for simd if(n >= (size_t)4 * PAR_MIN_WORK) schedule(static))
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

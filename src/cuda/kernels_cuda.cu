/* CUDA kernels of the GPT operators other than the matrix products (those are
 * cuBLAS calls in backend_cuda.cu).  The contract of each is in
 * src/model/kernels_cpu.h; the launchers are declared in kernels_cuda.cuh.
 *
 * Layout of the work:
 *   - elementwise kernels: one thread per element, grid-stride loops;
 *   - row kernels (layernorm, causal softmax): one warp per row;
 *   - cross-entropy (rows of V ~ 50k): one block per row;
 *   - sums over rows (bias / layernorm parameter gradients): one block per
 *     32 columns, 32 row-strided partial sums per column combined in a fixed
 *     order in shared memory;
 *   - embedding backward: a stable radix sort of the positions by token
 *     (CUB), then per distinct token one block per chunk of 256 columns
 *     (one column per thread) summing its rows in position order — the
 *     CPU kernel's order, so the result is bitwise the CPU's;
 *   - vocab-parallel cross-entropy: one block per row for the rank's
 *     statistics and for the probabilities from the group's.
 * No kernel uses floating-point atomics: results are reproducible bit for bit.
 * The kernels that read weights are templates on the weight type (float or
 * __nv_bfloat16), reading every weight through wload(), which widens it to
 * float; the arithmetic is the same fp32 code for both. */
#include "kernels_cuda.cuh"
#include "cuda_check.h"
#include "device_math.cuh"
#include "head_backward.cuh"
#include "layernorm_gelu.cuh"
#include "residual_layernorm.cuh"

#include <cub/cub.cuh>
#include <limits.h>
#include <math.h>

namespace osdp_cuda {

namespace {

const int kThreads = 256;                 /* block size of the 1-D kernels */

unsigned grid_for(size_t n, int threads = kThreads)
{
    size_t blocks = (n + threads - 1) / threads;
    if (blocks > (1u << 20)) blocks = 1u << 20;   /* grid-stride loops do the rest */
    return blocks ? (unsigned)blocks : 1u;
}

/* ---------------------------------------------------------- matmul helpers */

template <class W, class I>
__global__ void bias_rows_kernel(float *y, const W *b, int BT, int OC, int accumulate)
{
    const I n = (I)BT * (I)OC;
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        float bias = wload(b[i % (I)OC]);
        y[i] = accumulate ? y[i] + bias : bias;
    }
}

/* block (32,32): column c = 32*blockIdx.x + threadIdx.x; thread row ty sums
 * rows ty, ty+32, ... in order; the 32 partials are added in ty order */
__global__ void column_sums_kernel(float *db, const float *dy, int BT, int OC)
{
    __shared__ float part[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    float acc = 0.0f;
    if (c < OC)
        for (int i = ty; i < BT; i += 32) acc += dy[(size_t)i * OC + c];
    part[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < OC) {
        float s = 0.0f;
        for (int k = 0; k < 32; k++) s += part[k][tx];
        db[c] += s;
    }
}

/* ---------------------------------------------------------------- layernorm */

template <class W, class I>
__global__ void layernorm_backward_dx_kernel(float *dx, const float *dy, const float *x,
                                             const W *w, const float *mean,
                                             const float *rstd, int BT, int C)
{
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= BT) return;
    const I base = (I)row * (I)C;
    const float *dyr = dy + base;
    const float *xr = x + base;
    float *dxr = dx + base;
    const float m = mean[row], s = rstd[row];
    float dmean = 0.0f, dnmean = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (xr[c] - m) * s;
        float dnorm = wload(w[c]) * dyr[c];
        dmean += dnorm;
        dnmean += dnorm * norm;
    }
    dmean = warp_reduce<SumOp>(dmean) / (float)C;
    dnmean = warp_reduce<SumOp>(dnmean) / (float)C;
    for (int c = lane; c < C; c += 32) {
        float norm = (xr[c] - m) * s;
        float dnorm = wload(w[c]) * dyr[c];
        dxr[c] += (dnorm - dmean - norm * dnmean) * s;
    }
}

/* The parameter gradients of layernorm, in two passes so that GPT-2's
 * shapes fill the GPU (C = 768 gives only 24 column blocks): pass 1 sums
 * the rows of chunk blockIdx.y for 32 columns per block into
 * partials[chunk][c] (dw) and partials[chunks + chunk][c] (db); pass 2 adds
 * the chunks to dw, db in chunk order.  Deterministic: the same sums in the
 * same order on every run. */
__global__ void layernorm_dwdb_partial_kernel(float *partials, const float *dy, const float *x,
                                              const float *mean, const float *rstd, int BT, int C,
                                              int rows_per_chunk, int chunks)
{
    __shared__ float pw[32][33], pb[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx, chunk = blockIdx.y;
    const int lo = chunk * rows_per_chunk;
    const int hi = lo + rows_per_chunk < BT ? lo + rows_per_chunk : BT;
    float aw = 0.0f, ab = 0.0f;
    if (c < C)
        for (int i = lo + ty; i < hi; i += 32) {
            size_t k = (size_t)i * C + c;
            float d = dy[k];
            aw += (x[k] - mean[i]) * rstd[i] * d;
            ab += d;
        }
    pw[ty][tx] = aw;
    pb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && c < C) {
        float sw = 0.0f, sb = 0.0f;
        for (int k = 0; k < 32; k++) {
            sw += pw[k][tx];
            sb += pb[k][tx];
        }
        partials[(size_t)chunk * C + c] = sw;
        partials[(size_t)(chunks + chunk) * C + c] = sb;
    }
}

__global__ void layernorm_dwdb_finish_kernel(float *dw, float *db, const float *partials, int C,
                                             int chunks)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < chunks; k++) {
        sw += partials[(size_t)k * C + c];
        sb += partials[(size_t)(chunks + k) * C + c];
    }
    dw[c] += sw;
    db[c] += sb;
}

/* ---------------------------------------------------------------- attention */

__global__ void causal_softmax_forward_kernel(float *att, long rows, int T)
{
    const long row = (long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const int i = (int)(row % T);
    float *p = att + (size_t)row * T;
    float maxv = -INFINITY;
    for (int j = lane; j <= i; j += 32) maxv = fmaxf(maxv, p[j]);
    maxv = warp_reduce<MaxOp>(maxv);
    float sum = 0.0f;
    for (int j = lane; j <= i; j += 32) {
        float e = expf(p[j] - maxv);
        p[j] = e;
        sum += e;
    }
    const float inv = 1.0f / warp_reduce<SumOp>(sum);
    for (int j = lane; j <= i; j += 32) p[j] *= inv;
    for (int j = i + 1 + lane; j < T; j += 32) p[j] = 0.0f;
}

__global__ void causal_softmax_backward_kernel(float *d, const float *att, long rows, int T,
                                               float scale)
{
    const long row = (long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const int i = (int)(row % T);
    const float *a = att + (size_t)row * T;
    float *dr = d + (size_t)row * T;
    float dot = 0.0f;
    for (int j = lane; j <= i; j += 32) dot += a[j] * dr[j];
    dot = warp_reduce<SumOp>(dot);
    for (int j = lane; j <= i; j += 32) dr[j] = scale * a[j] * (dr[j] - dot);
    for (int j = i + 1 + lane; j < T; j += 32) dr[j] = 0.0f;  /* read by the full-size GEMMs */
}

/* ---------------------------------------------------------------- embedding */

/* x = wte row (token - lo) where it is in [lo, lo + vocab_n), else 0, + wpe
 * (NULL: none) */
template <class W>
__global__ void embedding_forward_kernel(float *x, const int *tokens, const W *wte,
                                         const W *wpe, int BT, int T, int C, int lo, int vocab_n)
{
    const size_t n = (size_t)BT * C;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t i = k / C, c = k % C;
        const int row = tokens[i] - lo;
        const float e = row >= 0 && row < vocab_n ? wload(wte[(size_t)row * C + c]) : 0.0f;
        x[k] = wpe ? e + wload(wpe[(i % T) * C + c]) : e;
    }
}

__global__ void iota_kernel(int *v, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v[i] = i;
}

/* block (k, y) for sorted position k and the y-th chunk of blockDim.x
 * columns: the block at the first occurrence of a token in [lo, lo +
 * vocab_n) adds all that token's rows, in position order, into its dwte row
 * (row token - lo).  The column chunks give GPT-2 widths (768..1600) several
 * blocks per token, one column per thread. */
__global__ void embedding_backward_wte_kernel(float *dwte, const float *dx, const int *keys,
                                              const int *pos, int BT, int C, int lo, int vocab_n)
{
    const int k = blockIdx.x;
    const int tok = keys[k];
    if (k > 0 && keys[k - 1] == tok) return;
    if (tok < lo || tok - lo >= vocab_n) return;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float *e = dwte + (size_t)(tok - lo) * C;
    float acc = e[c];
    for (int kk = k; kk < BT && keys[kk] == tok; kk++) acc += dx[(size_t)pos[kk] * C + c];
    e[c] = acc;
}

/* dwpe (t,c) += dx (b,t,c) for b = 0..B-1 in order */
__global__ void embedding_backward_wpe_kernel(float *dwpe, const float *dx, int B, int T, int C)
{
    const size_t n = (size_t)T * C;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        float acc = dwpe[k];
        for (int b = 0; b < B; b++) acc += dx[(size_t)b * n + k];
        dwpe[k] = acc;
    }
}

/* ------------------------------------------------------------- crossentropy */

__global__ void crossentropy_forward_kernel(float *losses, float *probs, const int *targets,
                                            int V)
{
    __shared__ float shared[32];
    float *p = probs + (size_t)blockIdx.x * V;
    /* read before any thread overwrites p (block_reduce's barriers order it) */
    const float target_logit = p[targets[blockIdx.x]];
    float maxv = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) maxv = fmaxf(maxv, p[j]);
    maxv = block_reduce<MaxOp>(maxv, shared);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float e = expf(p[j] - maxv);
        p[j] = e;
        sum += e;
    }
    const float total = block_reduce<SumOp>(sum, shared);
    const float inv = 1.0f / total;
    for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] *= inv;
    /* log-sum-exp - (target - max), as on the CPU: -logf(p[target]) is
     * infinite once the target's logit is ~88 below the max (total >= 1) */
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(total) - (target_logit - maxv);
}

/* one block per row: this rank's (max, sum of exponentials, target logit)
 * over the row's first `valid` columns */
__global__ void crossentropy_stats_kernel(float *stats, const float *logits, const int *targets,
                                          int V, int valid, int lo)
{
    __shared__ float shared[32];
    const float *l = logits + (size_t)blockIdx.x * V;
    float *st = stats + 3 * (size_t)blockIdx.x;
    float maxv = -INFINITY;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) maxv = fmaxf(maxv, l[j]);
    maxv = block_reduce<MaxOp>(maxv, shared);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) sum += expf(l[j] - maxv);
    sum = block_reduce<SumOp>(sum, shared);
    if (threadIdx.x == 0) {
        const int target = targets[blockIdx.x] - lo;
        st[0] = maxv;      /* -inf on a rank holding only padding, its sum 0 */
        st[1] = sum;
        st[2] = target >= 0 && target < valid ? l[target] : 0.0f;
    }
}

/* row i's statistics of the group (group_size x BT x 3, in rank order)
 * combined in rank order: the largest max, the sum of exponentials
 * relative to it, the target's logit (the CPU's group_row_stats) */
__device__ void group_row_stats(const float *group, int BT, int group_size, size_t i, float *max_out,
                                float *sum_out, float *target_out)
{
    const size_t stride = 3 * (size_t)BT;
    float maxv = -INFINITY, target_logit = 0.0f, sum = 0.0f;
    for (int r = 0; r < group_size; r++) {
        const float *st = group + r * stride + 3 * i;
        if (st[1] > 0.0f && st[0] > maxv) maxv = st[0];
        target_logit += st[2];
    }
    for (int r = 0; r < group_size; r++) {
        const float *st = group + r * stride + 3 * i;
        if (st[1] > 0.0f) sum += st[1] * expf(st[0] - maxv);
    }
    *max_out = maxv;
    *sum_out = sum;
    *target_out = target_logit;
}

/* one block per row: the group's statistics combined in rank order (every
 * thread alike), then the row's probabilities and its loss */
__global__ void crossentropy_finish_kernel(float *losses, float *probs, const float *group,
                                           int BT, int V, int valid, int group_size)
{
    float maxv, sum, target_logit;
    group_row_stats(group, BT, group_size, blockIdx.x, &maxv, &sum, &target_logit);
    float *p = probs + (size_t)blockIdx.x * V;
    const float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] = j < valid ? expf(p[j] - maxv) * inv : 0.0f;
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) - (target_logit - maxv);
}

/* the one-hot at column target - lo, when it is one of this rank's V */
template <class I>
__global__ void crossentropy_backward_kernel(float *dlogits, const float *probs,
                                             const int *targets, float scale, int BT, int V, int lo)
{
    const I n = (I)BT * (I)V;
    for (I k = blockIdx.x * (I)blockDim.x + threadIdx.x; k < n; k += (I)gridDim.x * blockDim.x) {
        const I i = k / (I)V;
        int j = (int)(k % (I)V);
        float p = probs[k];
        dlogits[k] = j == targets[i] - lo ? scale * (p - 1.0f) : scale * p;
    }
}

/* the fused head: one thread per row, the group's statistics into the loss and lse */
__global__ void crossentropy_lse_kernel(float *losses, float *lse, const float *group, int BT,
                                        int group_size)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < BT; i += gridDim.x * blockDim.x) {
        float maxv, sum, target_logit;
        group_row_stats(group, BT, group_size, (size_t)i, &maxv, &sum, &target_logit);
        const float log_sum = logf(sum);
        losses[i] = log_sum - (target_logit - maxv);
        lse[i] = maxv + log_sum;
    }
}

/* crossentropy_backward_lse's kernel: head_backward.cuh's, in place in fp32 */

/* ----------------------------------------------------------------- residual */

template <class I>
__global__ void residual_kernel(float *out, const float *a, const float *b, I n)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n;
         i += (I)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

template <class I>
__global__ void accumulate_kernel(float *y, const float *x, I n)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n;
         i += (I)gridDim.x * blockDim.x)
        y[i] += x[i];
}

/* ------------------------------------------------------------ sums (double) */

/* fixed grid of REDUCE_PARTIALS blocks: the summation tree depends only on n */
__global__ void reduce_partials_kernel(const float *x, size_t n, int squares, double *partials)
{
    __shared__ double shared[32];
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        double v = x[i];
        acc += squares ? v * v : v;
    }
    acc = block_reduce<SumOp>(acc, shared);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

/* the partials' sum to partials[REDUCE_PARTIALS], or added to *acc */
__global__ void reduce_final_kernel(double *partials, double *acc)
{
    __shared__ double shared[32];
    double v = partials[threadIdx.x];      /* blockDim.x == REDUCE_PARTIALS */
    v = block_reduce<SumOp>(v, shared);
    if (threadIdx.x == 0) {
        if (acc) *acc += v;
        else partials[REDUCE_PARTIALS] = v;
    }
}

/* -------------------------------------------------------------------- adamw */

template <class I>
__global__ void adamw_kernel(float *w, const float *g, float *m, float *v, I n, float lr,
                             float beta1, float beta2, float c1, float c2, float eps,
                             float weight_decay, float grad_scale)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        float grad = g[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * grad;
        float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
        m[i] = mi;
        v[i] = vi;
        float m_hat = mi / c1;
        float v_hat = vi / c2;
        float wi = w[i];
        w[i] = wi - lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * wi);
    }
}

}  // namespace

/* ---------------------------------------------------------------- launchers */

template <class W>
void bias_rows(float *y, const W *b, int BT, int OC, int accumulate, cudaStream_t s)
{
    size_t n = (size_t)BT * OC;
    if (!n) return;
    with_index_type(n, [&](auto i) {
        bias_rows_kernel<W, decltype(i)><<<grid_for(n), kThreads, 0, s>>>(y, b, BT, OC, accumulate);
    });
    CUDA_CHECK_LAUNCH();
}

void column_sums_add(float *db, const float *dy, int BT, int OC, cudaStream_t s)
{
    if (OC <= 0) return;
    column_sums_kernel<<<(OC + 31) / 32, dim3(32, 32), 0, s>>>(db, dy, BT, OC);
    CUDA_CHECK_LAUNCH();
}

template <class W, class Y>
void layernorm_forward(Y *y, float *mean, float *rstd, const float *x, const W *w, const W *b, int BT, int C,
                       cudaStream_t s)
{
    if (BT <= 0) return;
    const int rows_per_block = kThreads / 32;
    with_index_type((size_t)BT * (size_t)C, [&](auto i) {
        layernorm_forward_kernel<W, decltype(i), Y><<<(BT + rows_per_block - 1) / rows_per_block, kThreads, 0, s>>>(
            y, mean, rstd, x, w, b, BT, C);
    });
    CUDA_CHECK_LAUNCH();
}

template <class W, class Y>
void residual_layernorm_forward(float *res, Y *y, float *mean, float *rstd, const float *a, const float *b,
                                const W *w, const W *bias, int BT, int C, cudaStream_t s)
{
    if (BT <= 0) return;
    const int rows_per_block = kResidualLayernormThreads / 32;
    const unsigned blocks = (unsigned)((BT + rows_per_block - 1) / rows_per_block);
    with_index_type((size_t)BT * (size_t)C, [&](auto i) {
        residual_layernorm_kernel<W, decltype(i), Y><<<blocks, kResidualLayernormThreads, 0, s>>>(
            res, y, mean, rstd, a, b, w, bias, BT, C);
    });
    CUDA_CHECK_LAUNCH();
}

int layernorm_dwdb_chunks(int BT, int C)
{
    /* about 1024 blocks of 1024 threads in all, at least 128 rows per chunk */
    const int column_blocks = (C + 31) / 32;
    int chunks = 1024 / column_blocks;
    const int by_rows = (BT + 127) / 128;
    if (chunks > by_rows) chunks = by_rows;
    return chunks > 1 ? chunks : 1;
}

template <class W>
void layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                        const W *w, const float *mean, const float *rstd, int BT, int C,
                        float *partials, cudaStream_t s)
{
    if (BT <= 0 || C <= 0) return;
    const int rows_per_block = kThreads / 32;
    with_index_type((size_t)BT * (size_t)C, [&](auto i) {
        layernorm_backward_dx_kernel<W, decltype(i)><<<(BT + rows_per_block - 1) / rows_per_block, kThreads, 0,
                                                       s>>>(dx, dy, x, w, mean, rstd, BT, C);
    });
    CUDA_CHECK_LAUNCH();
    const int chunks = layernorm_dwdb_chunks(BT, C);
    const int rows_per_chunk = (BT + chunks - 1) / chunks;
    layernorm_dwdb_partial_kernel<<<dim3((C + 31) / 32, chunks), dim3(32, 32), 0, s>>>(
        partials, dy, x, mean, rstd, BT, C, rows_per_chunk, chunks);
    CUDA_CHECK_LAUNCH();
    layernorm_dwdb_finish_kernel<<<(C + kThreads - 1) / kThreads, kThreads, 0, s>>>(dw, db, partials,
                                                                                 C, chunks);
    CUDA_CHECK_LAUNCH();
}

template <class X, class Y>
void gelu_forward(Y *y, const X *x, size_t n, cudaStream_t s)
{
    if (!n) return;
    with_index_type(n, [&](auto i) {
        gelu_forward_kernel<decltype(i), X, Y><<<grid_for(n), kThreads, 0, s>>>(y, x, (decltype(i))n);
    });
    CUDA_CHECK_LAUNCH();
}

template <class X>
void gelu_backward(float *dx, const X *x, const float *dy, size_t n, cudaStream_t s)
{
    if (!n) return;
    with_index_type(n, [&](auto i) {
        gelu_backward_kernel<decltype(i), X><<<grid_for(n), kThreads, 0, s>>>(dx, x, dy, (decltype(i))n);
    });
    CUDA_CHECK_LAUNCH();
}

void causal_softmax_forward(float *att, long rows, int T, cudaStream_t s)
{
    if (rows <= 0) return;
    const int rows_per_block = kThreads / 32;
    causal_softmax_forward_kernel<<<(unsigned)((rows + rows_per_block - 1) / rows_per_block),
                                    kThreads, 0, s>>>(att, rows, T);
    CUDA_CHECK_LAUNCH();
}

void causal_softmax_backward(float *d, const float *att, long rows, int T, float scale,
                             cudaStream_t s)
{
    if (rows <= 0) return;
    const int rows_per_block = kThreads / 32;
    causal_softmax_backward_kernel<<<(unsigned)((rows + rows_per_block - 1) / rows_per_block),
                                     kThreads, 0, s>>>(d, att, rows, T, scale);
    CUDA_CHECK_LAUNCH();
}

template <class W>
void embedding_forward_range(float *x, const int *tokens, const W *wte, const W *wpe, int B,
                             int T, int C, int vocab_lo, int vocab_n, cudaStream_t s)
{
    size_t n = (size_t)B * T * C;
    if (!n) return;
    embedding_forward_kernel<<<grid_for(n), kThreads, 0, s>>>(x, tokens, wte, wpe, B * T, T, C,
                                                              vocab_lo, vocab_n);
    CUDA_CHECK_LAUNCH();
}

template <class W>
void embedding_forward(float *x, const int *tokens, const W *wte, const W *wpe,
                       int B, int T, int C, cudaStream_t s)
{
    embedding_forward_range(x, tokens, wte, wpe, B, T, C, 0, INT_MAX, s);
}

/* the weight-reading launchers for both weight types */
#define OSDP_INSTANTIATE_WEIGHT_LAUNCHERS(W)                                                   \
    template void bias_rows<W>(float *, const W *, int, int, int, cudaStream_t);             \
    template void layernorm_forward<W>(float *, float *, float *, const float *, const W *,  \
                                       const W *, int, int, cudaStream_t);                   \
    template void residual_layernorm_forward<W>(float *, float *, float *, float *, const float *, \
                                                const float *, const W *, const W *, int, int,     \
                                                cudaStream_t);                                     \
    template void layernorm_backward<W>(float *, float *, float *, const float *,            \
                                        const float *, const W *, const float *,             \
                                        const float *, int, int, float *, cudaStream_t);     \
    template void embedding_forward<W>(float *, const int *, const W *, const W *, int, int, \
                                       int, cudaStream_t);                                   \
    template void embedding_forward_range<W>(float *, const int *, const W *, const W *, int, \
                                             int, int, int, int, cudaStream_t);
OSDP_INSTANTIATE_WEIGHT_LAUNCHERS(float)
OSDP_INSTANTIATE_WEIGHT_LAUNCHERS(__nv_bfloat16)
#undef OSDP_INSTANTIATE_WEIGHT_LAUNCHERS
/* the stored bf16 activations' forms (--activation-dtype bf16, the bf16 table) */
template void layernorm_forward<__nv_bfloat16>(__nv_bfloat16 *, float *, float *, const float *,
                                               const __nv_bfloat16 *, const __nv_bfloat16 *, int, int, cudaStream_t);
template void residual_layernorm_forward<__nv_bfloat16>(float *, __nv_bfloat16 *, float *, float *, const float *,
                                                        const float *, const __nv_bfloat16 *,
                                                        const __nv_bfloat16 *, int, int, cudaStream_t);
template void gelu_forward<float, float>(float *, const float *, size_t, cudaStream_t);
template void gelu_forward<__nv_bfloat16, __nv_bfloat16>(__nv_bfloat16 *, const __nv_bfloat16 *, size_t,
                                                         cudaStream_t);
template void gelu_backward<float>(float *, const float *, const float *, size_t, cudaStream_t);
template void gelu_backward<__nv_bfloat16>(float *, const __nv_bfloat16 *, const float *, size_t, cudaStream_t);

/* bytes of the int arrays (positions in, keys and positions out), rounded so
 * that CUB's temporary storage after them stays 256-byte aligned */
static size_t embedding_ints_bytes(int BT) { return (3 * (size_t)BT * sizeof(int) + 255) / 256 * 256; }

size_t embedding_backward_scratch_bytes(int B, int T)
{
    const int BT = B * T;
    if (BT <= 0) return 0;
    size_t temp_bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, (const int *)nullptr,
                                               (int *)nullptr, (const int *)nullptr,
                                               (int *)nullptr, BT, 0, (int)(8 * sizeof(int))));
    return embedding_ints_bytes(BT) + temp_bytes;
}

void embedding_backward_range(float *dwte, float *dwpe, const float *dx, const int *tokens, int B,
                              int T, int C, int vocab_lo, int vocab_n, void *scratch,
                              size_t scratch_bytes, cudaStream_t s)
{
    const int BT = B * T;
    if (BT <= 0 || C <= 0) return;

    /* stable sort of the positions 0..BT-1 by token: equal tokens keep their
     * position order.  The caller's scratch holds the three int arrays, then
     * CUB's temporary storage. */
    size_t temp_bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, (const int *)nullptr,
                                               (int *)nullptr, (const int *)nullptr,
                                               (int *)nullptr, BT, 0, (int)(8 * sizeof(int)), s));
    const size_t ints_bytes = embedding_ints_bytes(BT);
    if (scratch_bytes < ints_bytes + temp_bytes) {   /* a kernel returns no error (osdp/error.h) */
        osdp_error_unrecoverable(OSDP_ERR_INTERNAL, "embedding_backward: scratch of %zu bytes, %zu needed",
                                 scratch_bytes, ints_bytes + temp_bytes);
        return;
    }
    int *pos_in = (int *)scratch;
    int *keys_out = pos_in + BT;
    int *pos_out = keys_out + BT;
    void *temp = (char *)scratch + ints_bytes;

    iota_kernel<<<grid_for((size_t)BT), kThreads, 0, s>>>(pos_in, BT);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, keys_out, pos_in,
                                               pos_out, BT, 0, (int)(8 * sizeof(int)), s));
    const int threads = C < kThreads ? (C + 31) / 32 * 32 : kThreads;
    const dim3 grid((unsigned)BT, (unsigned)((C + threads - 1) / threads));
    embedding_backward_wte_kernel<<<grid, threads, 0, s>>>(dwte, dx, keys_out, pos_out, BT, C,
                                                           vocab_lo, vocab_n);
    CUDA_CHECK_LAUNCH();

    if (dwpe) {
        embedding_backward_wpe_kernel<<<grid_for((size_t)T * C), kThreads, 0, s>>>(dwpe, dx, B, T, C);
        CUDA_CHECK_LAUNCH();
    }
}

void embedding_backward(float *dwte, float *dwpe, const float *dx, const int *tokens, int B,
                        int T, int C, void *scratch, size_t scratch_bytes, cudaStream_t s)
{
    embedding_backward_range(dwte, dwpe, dx, tokens, B, T, C, 0, INT_MAX, scratch, scratch_bytes, s);
}

void crossentropy_forward(float *losses, float *probs, const int *targets, int BT, int V,
                          cudaStream_t s)
{
    if (BT <= 0) return;
    crossentropy_forward_kernel<<<BT, 512, 0, s>>>(losses, probs, targets, V);
    CUDA_CHECK_LAUNCH();
}

void crossentropy_stats(float *stats, const float *logits, const int *targets, int BT, int V,
                        int valid, int vocab_lo, cudaStream_t s)
{
    if (BT <= 0) return;
    crossentropy_stats_kernel<<<BT, 512, 0, s>>>(stats, logits, targets, V, valid, vocab_lo);
    CUDA_CHECK_LAUNCH();
}

void crossentropy_finish(float *losses, float *probs, const float *group_stats, int BT, int V,
                         int valid, int group_size, cudaStream_t s)
{
    if (BT <= 0) return;
    crossentropy_finish_kernel<<<BT, 512, 0, s>>>(losses, probs, group_stats, BT, V, valid,
                                                  group_size);
    CUDA_CHECK_LAUNCH();
}

void crossentropy_backward_range(float *dlogits, const float *probs, const int *targets,
                                 float scale, int BT, int V, int vocab_lo, cudaStream_t s)
{
    size_t n = (size_t)BT * V;
    if (!n) return;
    with_index_type(n, [&](auto i) {
        crossentropy_backward_kernel<decltype(i)><<<grid_for(n), kThreads, 0, s>>>(dlogits, probs, targets, scale,
                                                                                    BT, V, vocab_lo);
    });
    CUDA_CHECK_LAUNCH();
}

void crossentropy_backward(float *dlogits, const float *probs, const int *targets, float scale,
                           int BT, int V, cudaStream_t s)
{
    crossentropy_backward_range(dlogits, probs, targets, scale, BT, V, 0, s);
}

void crossentropy_lse(float *losses, float *lse, const float *group_stats, int BT, int group_size,
                      cudaStream_t s)
{
    if (BT <= 0) return;
    crossentropy_lse_kernel<<<grid_for((size_t)BT), kThreads, 0, s>>>(losses, lse, group_stats, BT, group_size);
    CUDA_CHECK_LAUNCH();
}

void crossentropy_backward_lse(float *dlogits, const float *lse, const int *targets, float scale, int BT,
                               int V, int valid, int vocab_lo, cudaStream_t s)
{
    const size_t n = (size_t)BT * V;
    if (!n) return;
    with_index_type(n, [&](auto i) {
        crossentropy_backward_lse_kernel<decltype(i), float><<<grid_for(n), kThreads, 0, s>>>(
            dlogits, dlogits, lse, targets, scale, BT, V, valid, vocab_lo);
    });
    CUDA_CHECK_LAUNCH();
}

void residual_forward(float *out, const float *a, const float *b, size_t n, cudaStream_t s)
{
    if (!n) return;
    with_index_type(n, [&](auto i) { residual_kernel<<<grid_for(n), kThreads, 0, s>>>(out, a, b, (decltype(i))n); });
    CUDA_CHECK_LAUNCH();
}

void vector_accumulate(float *y, const float *x, size_t n, cudaStream_t s)
{
    if (!n) return;
    with_index_type(n, [&](auto i) { accumulate_kernel<<<grid_for(n), kThreads, 0, s>>>(y, x, (decltype(i))n); });
    CUDA_CHECK_LAUNCH();
}

void reduce_sum(const float *x, size_t n, int squares, double *partials, double *acc, cudaStream_t s)
{
    reduce_partials_kernel<<<REDUCE_PARTIALS, kThreads, 0, s>>>(x, n, squares, partials);
    CUDA_CHECK_LAUNCH();
    reduce_final_kernel<<<1, REDUCE_PARTIALS, 0, s>>>(partials, acc);
    CUDA_CHECK_LAUNCH();
}

void adamw(float *w, const float *g, float *m, float *v, size_t n, float lr, float beta1,
           float beta2, float c1, float c2, float eps, float weight_decay, float grad_scale,
           cudaStream_t s)
{
    if (!n) return;
    with_index_type(n, [&](auto i) {
        adamw_kernel<<<grid_for(n), kThreads, 0, s>>>(w, g, m, v, (decltype(i))n, lr, beta1, beta2, c1, c2, eps,
                                                      weight_decay, grad_scale);
    });
    CUDA_CHECK_LAUNCH();
}

}  // namespace osdp_cuda

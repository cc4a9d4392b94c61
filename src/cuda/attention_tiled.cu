/* Tiled causal attention with an online softmax on the GPU (FlashAttention-2's
 * algorithm, written here): the CUDA half of attention_forward_tiled /
 * attention_backward_tiled (src/model/kernels_cpu.h, the CPU half in
 * src/model/kernels_cpu_attention_tiled.c), with the same buffers: the
 * forward writes the heads (B,T,C) and one fp32 log-sum-exp per (head, row)
 * (B,NH,T); the backward recomputes each tile's probabilities from Q, K and
 * that log-sum-exp, with rowdot (B,NH,T) = rowsum(dO * O) as its only
 * scratch, and overwrites dqkv.  No (T,T) buffer, no cuBLAS call, no
 * per-sequence loop: one launch covers every (sequence, head).
 *
 * Work.  One block of kThreads threads per (sequence x head, tile of `tile`
 * rows): grid (B * NH, ceil(T / tile)), the tiles with the most work
 * scheduled first.  Query and key tiles have the same
 * size, so the key tiles a query tile sees are those at or left of the
 * diagonal, and tiles above it are never loaded.
 *   - forward: a block holds its query tile, the running max m and sum l
 *     of each row and the unnormalised output in shared memory; per key
 *     tile it loads K and V, forms the scores (one thread per entry), updates
 *     m and l (one warp per row) and rescales and accumulates the output
 *     (one thread per output entry);
 *   - backward: rowdot first (one warp per row); then d(K) and d(V) with a
 *     block per key tile walking the query tiles at or below the diagonal,
 *     and d(Q) with a block per query tile walking the key tiles; both
 *     recompute P = exp(S - lse) and dS = scale P (dP - rowdot).  Splitting
 *     d(Q) from d(K), d(V) recomputes the scores once more but needs no
 *     atomics: every sum runs in a fixed order and the results are the same
 *     bits run after run (kernels_cuda.cuh's rule).
 *
 * Precision.  The kernels are templates on the element type E of the tiles
 * in shared memory: float (the fp32 table), or __nv_bfloat16 (the bf16
 * table: Q, K, V and dO rounded to bf16 as they are loaded, half the shared
 * memory).  Every product, the softmax, the log-sum-exp and every
 * accumulator are fp32.  The products are CUDA-core FMAs: the tensor-core
 * (mma) form of the bf16 variant is the next step for speed (doc/gpu.md).
 *
 * Shared memory: tile 32 (tile 16 when a head is too wide for the device's
 * per-block limit).  GPT-2's HS = 64 in fp32 needs 38 KiB (forward), 58 KiB
 * (d(K), d(V)) and 41 KiB (d(Q)); above 48 KiB the kernel is opted in
 * (cudaFuncAttributeMaxDynamicSharedMemorySize). */
#include "kernels_cuda.cuh"
#include "cuda_check.h"
#include "device_math.cuh"

#include <math.h>

namespace osdp_cuda {

namespace {

const int kAttnThreads = 256;   /* 8 warps */
const int kWarps = kAttnThreads / 32;

/* a value rounded to the tile's element type, and back */
template <class E> __device__ __forceinline__ E to_elem(float v);
template <> __device__ __forceinline__ float to_elem<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 to_elem<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

/* row stride of an (n, HS) tile of E in shared memory: padded by 4 bytes so
 * that the threads of a warp reading one column of consecutive rows (the
 * score products) hit different banks */
template <class E> __host__ __device__ inline int tile_ld(int HS) { return HS + (int)(4 / sizeof(E)); }

/* Sizes of the shared-memory layouts, in bytes: the fp32 pieces first, then
 * `tiles` (tile, tile_ld) tiles of E (4-byte aligned after the floats). */
template <class E> size_t smem_bytes(int tile, int HS, size_t floats, int tiles)
{
    return floats * sizeof(float) + (size_t)tiles * tile * tile_ld<E>(HS) * sizeof(E);
}
/* forward: S (tile, tile+1), O (tile, HS), m, l, corr (tile each); Q, K, V */
template <class E> size_t forward_smem(int tile, int HS)
{
    return smem_bytes<E>(tile, HS, (size_t)tile * (tile + 1) + (size_t)tile * HS + 3 * (size_t)tile, 3);
}
/* d(K), d(V): P, dS (tile, tile+1), dK, dV (tile, HS), lse, rowdot (tile); K, V, Q, dO */
template <class E> size_t dkv_smem(int tile, int HS)
{
    return smem_bytes<E>(tile, HS, 2 * (size_t)tile * (tile + 1) + 2 * (size_t)tile * HS + 2 * (size_t)tile, 4);
}
/* d(Q): dS (tile, tile+1), dQ (tile, HS), lse, rowdot (tile); Q, dO, K, V */
template <class E> size_t dq_smem(int tile, int HS)
{
    return smem_bytes<E>(tile, HS, (size_t)tile * (tile + 1) + (size_t)tile * HS + 2 * (size_t)tile, 4);
}

/* rows [r0, r0 + tile) of one head's column block of qkv (row stride ld; rows
 * >= T are zeros) into an (tile, tile_ld) tile of E */
template <class E>
__device__ void load_tile(E *dst, const float *src, int r0, int T, int ld, int HS, int tile)
{
    const int lds = tile_ld<E>(HS);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
        const int r = e / HS, c = e % HS;
        dst[r * lds + c] = to_elem<E>(r0 + r < T ? src[(size_t)(r0 + r) * ld + c] : 0.0f);
    }
}

template <class E> __device__ __forceinline__ float dot_rows(const E *a, const E *b, int HS)
{
    float acc = 0.0f;
    for (int c = 0; c < HS; c++) acc += wload(a[c]) * wload(b[c]);
    return acc;
}

/* the causal mask of a tile entry: key kj is visible to query qi (a real row) */
__device__ __forceinline__ bool visible(int qi, int kj, int T) { return qi < T && kj <= qi; }

template <class E>
__global__ void __launch_bounds__(kAttnThreads)
    attention_tiled_forward_kernel(float *out, float *lse, const float *qkv, int T, int C, int NH, int tile,
                                   float scale)
{
    extern __shared__ float smem[];
    const int HS = C / NH, bh = blockIdx.x, b = bh / NH, h = bh % NH, ld = 3 * C, lds = tile_ld<E>(HS);
    const int i0 = (int)(gridDim.y - 1 - blockIdx.y) * tile, sld = tile + 1;   /* the longest rows first */
    float *S = smem, *O = S + tile * sld, *m = O + tile * HS, *l = m + tile, *corr = l + tile;
    E *Qs = reinterpret_cast<E *>(corr + tile), *Ks = Qs + tile * lds, *Vs = Ks + tile * lds;
    const float *q = qkv + (size_t)b * T * ld + (size_t)h * HS;

    load_tile(Qs, q, i0, T, ld, HS, tile);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) O[e] = 0.0f;
    for (int r = threadIdx.x; r < tile; r += blockDim.x) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    const int last = (i0 + tile < T ? i0 + tile : T) - 1;   /* the tile's last real row */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int j0 = 0; j0 <= last; j0 += tile) {
        __syncthreads();   /* the previous key tile's readers are done (and Q, O, m, l are set) */
        load_tile(Ks, q + C, j0, T, ld, HS, tile);
        load_tile(Vs, q + 2 * C, j0, T, ld, HS, tile);
        __syncthreads();
        for (int e = threadIdx.x; e < tile * tile; e += blockDim.x) {
            const int r = e / tile, j = e % tile;
            S[r * sld + j] = scale * dot_rows(Qs + r * lds, Ks + j * lds, HS);
        }
        __syncthreads();
        /* the online softmax, one warp per row: S becomes exp(S - m_new) on
         * the visible keys and 0 elsewhere; corr rescales the row's O */
        for (int r = warp; r < tile; r += kWarps) {
            const int qi = i0 + r;
            float *s = S + r * sld;
            float mx = -INFINITY;
            for (int j = lane; j < tile; j += 32)
                if (visible(qi, j0 + j, T)) mx = fmaxf(mx, s[j]);
            mx = warp_reduce<MaxOp>(mx);
            const float m_old = m[r], m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
            for (int j = lane; j < tile; j += 32) {
                const float p = visible(qi, j0 + j, T) ? expf(s[j] - m_new) : 0.0f;
                s[j] = p;
                sum += p;
            }
            sum = warp_reduce<SumOp>(sum);
            if (lane == 0) {
                /* no visible key yet: nothing to rescale (and no inf - inf) */
                const float c = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
                l[r] = l[r] * c + sum;
                m[r] = m_new;
                corr[r] = c;
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
            const int r = e / HS, c = e % HS;
            const float *p = S + r * sld;
            float acc = O[e] * corr[r];
            for (int j = 0; j < tile; j++) acc += p[j] * wload(Vs[j * lds + c]);
            O[e] = acc;
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
        const int r = e / HS, c = e % HS;
        if (i0 + r < T) out[((size_t)b * T + i0 + r) * C + (size_t)h * HS + c] = O[e] / l[r];
    }
    for (int r = threadIdx.x; r < tile; r += blockDim.x)
        if (i0 + r < T) lse[(size_t)bh * T + i0 + r] = m[r] + logf(l[r]);
}

/* rowdot (B,NH,T) = sum over the head's columns of dout * out, dout rounded
 * to E as the products use it (so that rowdot = sum_j P dP of those
 * products): one warp per row */
template <class E>
__global__ void attention_rowdot_kernel(float *rowdot, const float *dout, const float *out, int B, int T, int C,
                                        int NH)
{
    const int HS = C / NH, lane = threadIdx.x & 31;
    const long rows = (long)B * NH * T;
    for (long row = (long)blockIdx.x * kWarps + (threadIdx.x >> 5); row < rows; row += (long)gridDim.x * kWarps) {
        const int t = (int)(row % T), bh = (int)(row / T), b = bh / NH, h = bh % NH;
        const size_t off = ((size_t)b * T + t) * C + (size_t)h * HS;
        float acc = 0.0f;
        for (int c = lane; c < HS; c += 32) acc += wload(to_elem<E>(dout[off + c])) * out[off + c];
        acc = warp_reduce<SumOp>(acc);
        if (lane == 0) rowdot[row] = acc;
    }
}

/* P and dS of the tile (query rows i0.., key rows j0..) into P (may be NULL:
 * not kept) and dS, each (tile, tile+1): P = exp(scale q.k - lse), dS = scale
 * P (dO.v - rowdot) on the visible entries, 0 elsewhere */
template <class E>
__device__ void tile_gradients(float *P, float *dS, const E *Qs, const E *dOs, const E *Ks, const E *Vs,
                               const float *lse_s, const float *rowdot_s, int i0, int j0, int T, int HS, int tile,
                               float scale)
{
    const int lds = tile_ld<E>(HS), sld = tile + 1;
    for (int e = threadIdx.x; e < tile * tile; e += blockDim.x) {
        const int r = e / tile, j = e % tile;
        float p = 0.0f, ds = 0.0f;
        if (visible(i0 + r, j0 + j, T)) {
            p = expf(scale * dot_rows(Qs + r * lds, Ks + j * lds, HS) - lse_s[r]);
            ds = scale * p * (dot_rows(dOs + r * lds, Vs + j * lds, HS) - rowdot_s[r]);
        }
        if (P) P[r * sld + j] = p;
        dS[r * sld + j] = ds;
    }
}

/* lse and rowdot of rows [i0, i0 + tile) of head bh (0 past T) */
__device__ void load_row_stats(float *lse_s, float *rowdot_s, const float *lse, const float *rowdot, int bh, int i0,
                               int T, int tile)
{
    for (int r = threadIdx.x; r < tile; r += blockDim.x) {
        const bool real = i0 + r < T;
        lse_s[r] = real ? lse[(size_t)bh * T + i0 + r] : 0.0f;
        rowdot_s[r] = real ? rowdot[(size_t)bh * T + i0 + r] : 0.0f;
    }
}

/* d(K) and d(V) of one key tile: dV = sum over query tiles of P^T dO, dK = dS^T Q */
template <class E>
__global__ void __launch_bounds__(kAttnThreads)
    attention_tiled_dkv_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse,
                               const float *rowdot, int T, int C, int NH, int tile, float scale)
{
    extern __shared__ float smem[];
    const int HS = C / NH, bh = blockIdx.x, b = bh / NH, h = bh % NH, ld = 3 * C, lds = tile_ld<E>(HS);
    const int j0 = (int)blockIdx.y * tile, sld = tile + 1;   /* the first keys, seen by the most rows, first */
    float *P = smem, *dS = P + tile * sld, *dK = dS + tile * sld, *dV = dK + tile * HS, *lse_s = dV + tile * HS;
    float *rowdot_s = lse_s + tile;
    E *Ks = reinterpret_cast<E *>(rowdot_s + tile), *Vs = Ks + tile * lds, *Qs = Vs + tile * lds;
    E *dOs = Qs + tile * lds;
    const float *q = qkv + (size_t)b * T * ld + (size_t)h * HS;
    const float *dO = dout + (size_t)b * T * C + (size_t)h * HS;

    load_tile(Ks, q + C, j0, T, ld, HS, tile);
    load_tile(Vs, q + 2 * C, j0, T, ld, HS, tile);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) dK[e] = dV[e] = 0.0f;
    for (int i0 = j0; i0 < T; i0 += tile) {   /* the query tiles that see these keys */
        __syncthreads();   /* the previous query tile's readers are done (and K, V are loaded) */
        load_tile(Qs, q, i0, T, ld, HS, tile);
        load_tile(dOs, dO, i0, T, C, HS, tile);
        load_row_stats(lse_s, rowdot_s, lse, rowdot, bh, i0, T, tile);
        __syncthreads();
        tile_gradients(P, dS, Qs, dOs, Ks, Vs, lse_s, rowdot_s, i0, j0, T, HS, tile, scale);
        __syncthreads();
        for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
            const int j = e / HS, c = e % HS;
            float av = dV[e], ak = dK[e];
            for (int r = 0; r < tile; r++) {
                av += P[r * sld + j] * wload(dOs[r * lds + c]);
                ak += dS[r * sld + j] * wload(Qs[r * lds + c]);
            }
            dV[e] = av;
            dK[e] = ak;
        }
    }
    /* each thread writes the entries it summed: no barrier needed */
    float *dk = dqkv + (size_t)b * T * ld + C + (size_t)h * HS;
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
        const int j = e / HS, c = e % HS;
        if (j0 + j < T) {
            dk[(size_t)(j0 + j) * ld + c] = dK[e];
            dk[(size_t)(j0 + j) * ld + C + c] = dV[e];
        }
    }
}

/* d(Q) of one query tile: sum over the key tiles at or left of the diagonal of dS K */
template <class E>
__global__ void __launch_bounds__(kAttnThreads)
    attention_tiled_dq_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse,
                              const float *rowdot, int T, int C, int NH, int tile, float scale)
{
    extern __shared__ float smem[];
    const int HS = C / NH, bh = blockIdx.x, b = bh / NH, h = bh % NH, ld = 3 * C, lds = tile_ld<E>(HS);
    const int i0 = (int)(gridDim.y - 1 - blockIdx.y) * tile, sld = tile + 1;   /* the longest rows first */
    float *dS = smem, *dQ = dS + tile * sld, *lse_s = dQ + tile * HS, *rowdot_s = lse_s + tile;
    E *Qs = reinterpret_cast<E *>(rowdot_s + tile), *dOs = Qs + tile * lds, *Ks = dOs + tile * lds;
    E *Vs = Ks + tile * lds;
    const float *q = qkv + (size_t)b * T * ld + (size_t)h * HS;

    load_tile(Qs, q, i0, T, ld, HS, tile);
    load_tile(dOs, dout + (size_t)b * T * C + (size_t)h * HS, i0, T, C, HS, tile);
    load_row_stats(lse_s, rowdot_s, lse, rowdot, bh, i0, T, tile);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) dQ[e] = 0.0f;
    const int last = (i0 + tile < T ? i0 + tile : T) - 1;
    for (int j0 = 0; j0 <= last; j0 += tile) {
        __syncthreads();
        load_tile(Ks, q + C, j0, T, ld, HS, tile);
        load_tile(Vs, q + 2 * C, j0, T, ld, HS, tile);
        __syncthreads();
        tile_gradients<E>(NULL, dS, Qs, dOs, Ks, Vs, lse_s, rowdot_s, i0, j0, T, HS, tile, scale);
        __syncthreads();
        for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
            const int r = e / HS, c = e % HS;
            const float *g = dS + r * sld;
            float acc = dQ[e];
            for (int j = 0; j < tile; j++) acc += g[j] * wload(Ks[j * lds + c]);
            dQ[e] = acc;
        }
    }
    float *dq = dqkv + (size_t)b * T * ld + (size_t)h * HS;
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
        const int r = e / HS, c = e % HS;
        if (i0 + r < T) dq[(size_t)(i0 + r) * ld + c] = dQ[e];
    }
}

/* the device's per-block shared-memory limit with opt-in (the current device) */
size_t max_smem_optin()
{
    int device = 0, bytes = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return (size_t)bytes;
}

/* The tile of a head size: 32, or 16 when the largest of the three kernels'
 * layouts (d(K), d(V)'s) does not fit the device at 32.  A head too wide for
 * 16 is a configuration this kernel cannot run: the job ends with a message
 * (--attention naive runs it). */
template <class E> int choose_tile(int HS)
{
    static size_t limit = 0;   /* one device per process (the backend's init) */
    if (!limit) limit = max_smem_optin();
    for (int tile = 32; tile >= 16; tile /= 2)
        if (dkv_smem<E>(tile, HS) <= limit) return tile;
    char why[160];
    snprintf(why, sizeof why, "head size %d needs %zu bytes of shared memory per block, the device has %zu "
             "(use --attention naive)", HS, dkv_smem<E>(16, HS), limit);
    OSDP_CUDA_ABORT_(__FILE__, __LINE__, "attention_tiled", why);
    return 16;
}

/* opts a kernel in to `bytes` of dynamic shared memory (above the default 48 KiB) */
template <class K> void allow_smem(K kernel, size_t bytes)
{
    if (bytes > (size_t)48 << 10)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

}  // namespace

template <class E>
void attention_tiled_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, cudaStream_t s)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    const int HS = C / NH, tile = choose_tile<E>(HS);
    const size_t bytes = forward_smem<E>(tile, HS);
    allow_smem(attention_tiled_forward_kernel<E>, bytes);
    const dim3 grid((unsigned)(B * NH), (unsigned)((T + tile - 1) / tile));
    attention_tiled_forward_kernel<E><<<grid, kAttnThreads, bytes, s>>>(out, lse, qkv, T, C, NH, tile,
                                                                        1.0f / sqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
}

template <class E>
void attention_tiled_backward(float *dqkv, float *rowdot, const float *dout, const float *out, const float *qkv,
                              const float *lse, int B, int T, int C, int NH, cudaStream_t s)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    const int HS = C / NH, tile = choose_tile<E>(HS);
    const float scale = 1.0f / sqrtf((float)HS);
    const long rows = (long)B * NH * T;
    long blocks = (rows + kWarps - 1) / kWarps;
    if (blocks > (1L << 20)) blocks = 1L << 20;   /* the kernel strides over the rest */
    attention_rowdot_kernel<E><<<(unsigned)blocks, kAttnThreads, 0, s>>>(rowdot, dout, out, B, T, C, NH);
    CUDA_CHECK_LAUNCH();
    const dim3 grid((unsigned)(B * NH), (unsigned)((T + tile - 1) / tile));
    const size_t kv_bytes = dkv_smem<E>(tile, HS), q_bytes = dq_smem<E>(tile, HS);
    allow_smem(attention_tiled_dkv_kernel<E>, kv_bytes);
    allow_smem(attention_tiled_dq_kernel<E>, q_bytes);
    attention_tiled_dkv_kernel<E><<<grid, kAttnThreads, kv_bytes, s>>>(dqkv, dout, qkv, lse, rowdot, T, C, NH, tile,
                                                                       scale);
    CUDA_CHECK_LAUNCH();
    attention_tiled_dq_kernel<E><<<grid, kAttnThreads, q_bytes, s>>>(dqkv, dout, qkv, lse, rowdot, T, C, NH, tile,
                                                                     scale);
    CUDA_CHECK_LAUNCH();
}

template void attention_tiled_forward<float>(float *, float *, const float *, int, int, int, int, cudaStream_t);
template void attention_tiled_forward<__nv_bfloat16>(float *, float *, const float *, int, int, int, int,
                                                     cudaStream_t);
template void attention_tiled_backward<float>(float *, float *, const float *, const float *, const float *,
                                              const float *, int, int, int, int, cudaStream_t);
template void attention_tiled_backward<__nv_bfloat16>(float *, float *, const float *, const float *,
                                                      const float *, const float *, int, int, int, int,
                                                      cudaStream_t);

}  // namespace osdp_cuda

/* The kernels of the tiled causal attention (attention_tiled.cu says what
 * they do and how the work is laid out) and the sizes of their shared
 * memory.  A header of its own so that tests/test_cuda_emulated.cc can
 * compile the same source for the host (threads and barriers emulated) and
 * check it against the CPU's kernels where no GPU is: included by
 * attention_tiled.cu alone in the build. */
#ifndef OSDP_ATTENTION_TILED_CUH
#define OSDP_ATTENTION_TILED_CUH

#include "device_math.cuh"

#include <math.h>
#include <stddef.h>

namespace osdp_cuda {
namespace attention_tiles {


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
template <class E, class I>
__device__ void load_tile(E *dst, const float *src, int r0, int T, int ld, int HS, int tile)
{
    const int lds = tile_ld<E>(HS);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
        const int r = e / HS, c = e % HS;
        dst[r * lds + c] = to_elem<E>(r0 + r < T ? src[(I)(r0 + r) * (I)ld + c] : 0.0f);
    }
}

template <class E> __device__ __forceinline__ float dot_rows(const E *a, const E *b, int HS)
{
    float acc = 0.0f;
    for (int c = 0; c < HS; c++) acc += wload(a[c]) * wload(b[c]);
    return acc;
}

/* A block's (sequence, head) of grid (B * NH, tiles): its head size, the
 * row strides of qkv (ld) and of the tiles in shared memory (lds), its Q
 * columns in qkv (K at + C, V at + 2C) and the offset of its columns in the
 * heads (B,T,C) (out, dout) */
template <class E> struct HeadView {
    int HS, bh, b, h, ld, lds;
    const float *q;
    size_t heads_off;
    __device__ HeadView(const float *qkv, int T, int C, int NH)
        : HS(C / NH), bh((int)blockIdx.x), b(bh / NH), h(bh % NH), ld(3 * C), lds(tile_ld<E>(HS)),
          q(qkv + (size_t)b * T * ld + (size_t)h * HS), heads_off((size_t)b * T * C + (size_t)h * HS)
    {
    }
};

/* the first row of this block's query tile: the last tiles (the longest rows) first */
__device__ __forceinline__ int query_tile_start(int tile) { return (int)(gridDim.y - 1 - blockIdx.y) * tile; }

/* the causal mask of a tile entry: key kj is visible to query qi (a real row) */
__device__ __forceinline__ bool visible(int qi, int kj, int T) { return qi < T && kj <= qi; }

template <class E, class I, class Out = float>
__global__ void __launch_bounds__(kAttnThreads)
    attention_tiled_forward_kernel(Out *out, float *lse, const float *qkv, int T, int C, int NH, int tile,
                                   float scale)
{
    extern __shared__ float smem[];
    const HeadView<E> hv(qkv, T, C, NH);
    const int HS = hv.HS, ld = hv.ld, lds = hv.lds, i0 = query_tile_start(tile), sld = tile + 1;
    float *S = smem, *O = S + tile * sld, *m = O + tile * HS, *l = m + tile, *corr = l + tile;
    E *Qs = reinterpret_cast<E *>(corr + tile), *Ks = Qs + tile * lds, *Vs = Ks + tile * lds;
    const float *q = hv.q;

    load_tile<E, I>(Qs, q, i0, T, ld, HS, tile);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) O[e] = 0.0f;
    for (int r = threadIdx.x; r < tile; r += blockDim.x) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    const int last = (i0 + tile < T ? i0 + tile : T) - 1;   /* the tile's last real row */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int j0 = 0; j0 <= last; j0 += tile) {
        __syncthreads();   /* the previous key tile's readers are done (and Q, O, m, l are set) */
        load_tile<E, I>(Ks, q + C, j0, T, ld, HS, tile);
        load_tile<E, I>(Vs, q + 2 * C, j0, T, ld, HS, tile);
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
        if (i0 + r < T) store_as(out + hv.heads_off + (I)(i0 + r) * (I)C + c, O[e] / l[r]);
    }
    for (int r = threadIdx.x; r < tile; r += blockDim.x)
        if (i0 + r < T) lse[(size_t)hv.bh * T + i0 + r] = m[r] + logf(l[r]);
}

/* rowdot (B,NH,T) = sum over the head's columns of dout * out, dout rounded
 * to E as the products use it (so that rowdot = sum_j P dP of those
 * products): one warp per row */
template <class E, class I>
__global__ void attention_rowdot_kernel(float *rowdot, const float *dout, const float *out, int B, int T, int C,
                                        int NH)
{
    const int HS = C / NH, lane = threadIdx.x & 31;
    const I rows = (I)B * (I)NH * (I)T;
    for (I row = (I)blockIdx.x * kWarps + (threadIdx.x >> 5); row < rows; row += (I)gridDim.x * kWarps) {
        const int t = (int)(row % (I)T), bh = (int)(row / (I)T), b = bh / NH, h = bh % NH;
        const I off = ((I)b * (I)T + (I)t) * (I)C + (I)h * (I)HS;
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

/* The backward kernels' arguments: the forward's inputs and statistics, and d(out) */
struct AttnBackward {
    float *dqkv;
    const float *dout, *qkv, *lse, *rowdot;
    int T, C, NH, tile;
    float scale;
};

/* The query side of query tile i0: Q and d(O) rows, and their lse and rowdot
 * (0 past T) */
template <class E, class I>
__device__ inline void load_query_side(E *Qs, E *dOs, float *lse_s, float *rowdot_s, const AttnBackward &a,
                                       const HeadView<E> &hv, int i0)
{
    load_tile<E, I>(Qs, hv.q, i0, a.T, hv.ld, hv.HS, a.tile);
    load_tile<E, I>(dOs, a.dout + hv.heads_off, i0, a.T, a.C, hv.HS, a.tile);
    for (int r = threadIdx.x; r < a.tile; r += blockDim.x) {
        const bool real = i0 + r < a.T;
        lse_s[r] = real ? a.lse[(size_t)hv.bh * a.T + i0 + r] : 0.0f;
        rowdot_s[r] = real ? a.rowdot[(size_t)hv.bh * a.T + i0 + r] : 0.0f;
    }
}

/* The key side of key tile j0: K and V rows (0 past T) */
template <class E, class I>
__device__ inline void load_key_side(E *Ks, E *Vs, const HeadView<E> &hv, int j0, int T, int C, int tile)
{
    load_tile<E, I>(Ks, hv.q + C, j0, T, hv.ld, hv.HS, tile);
    load_tile<E, I>(Vs, hv.q + 2 * C, j0, T, hv.ld, hv.HS, tile);
}

/* d(K) and d(V) of one key tile: dV = sum over query tiles of P^T dO, dK = dS^T Q */
template <class E, class I>
__global__ void __launch_bounds__(kAttnThreads)
    attention_tiled_dkv_kernel(const AttnBackward a)
{
    extern __shared__ float smem[];
    const int T = a.T, C = a.C, tile = a.tile;
    const HeadView<E> hv(a.qkv, T, C, a.NH);
    const int HS = hv.HS, ld = hv.ld, lds = hv.lds, sld = tile + 1;
    const int j0 = (int)blockIdx.y * tile;   /* the first keys, seen by the most rows, first */
    float *P = smem, *dS = P + tile * sld, *dK = dS + tile * sld, *dV = dK + tile * HS, *lse_s = dV + tile * HS;
    float *rowdot_s = lse_s + tile;
    E *Ks = reinterpret_cast<E *>(rowdot_s + tile), *Vs = Ks + tile * lds, *Qs = Vs + tile * lds;
    E *dOs = Qs + tile * lds;

    load_key_side<E, I>(Ks, Vs, hv, j0, T, C, tile);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) dK[e] = dV[e] = 0.0f;
    for (int i0 = j0; i0 < T; i0 += tile) {   /* the query tiles that see these keys */
        __syncthreads();   /* the previous query tile's readers are done (and K, V are loaded) */
        load_query_side<E, I>(Qs, dOs, lse_s, rowdot_s, a, hv, i0);
        __syncthreads();
        tile_gradients(P, dS, Qs, dOs, Ks, Vs, lse_s, rowdot_s, i0, j0, T, HS, tile, a.scale);
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
    float *dk = a.dqkv + (hv.q - a.qkv) + C;
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
        const int j = e / HS, c = e % HS;
        if (j0 + j < T) {
            dk[(I)(j0 + j) * (I)ld + c] = dK[e];
            dk[(I)(j0 + j) * (I)ld + C + c] = dV[e];
        }
    }
}

/* d(Q) of one query tile: sum over the key tiles at or left of the diagonal of dS K */
template <class E, class I>
__global__ void __launch_bounds__(kAttnThreads)
    attention_tiled_dq_kernel(const AttnBackward a)
{
    extern __shared__ float smem[];
    const int T = a.T, C = a.C, tile = a.tile;
    const HeadView<E> hv(a.qkv, T, C, a.NH);
    const int HS = hv.HS, ld = hv.ld, lds = hv.lds, i0 = query_tile_start(tile), sld = tile + 1;
    float *dS = smem, *dQ = dS + tile * sld, *lse_s = dQ + tile * HS, *rowdot_s = lse_s + tile;
    E *Qs = reinterpret_cast<E *>(rowdot_s + tile), *dOs = Qs + tile * lds, *Ks = dOs + tile * lds;
    E *Vs = Ks + tile * lds;

    load_query_side<E, I>(Qs, dOs, lse_s, rowdot_s, a, hv, i0);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) dQ[e] = 0.0f;
    const int last = (i0 + tile < T ? i0 + tile : T) - 1;
    for (int j0 = 0; j0 <= last; j0 += tile) {
        __syncthreads();
        load_key_side<E, I>(Ks, Vs, hv, j0, T, C, tile);
        __syncthreads();
        tile_gradients<E>(NULL, dS, Qs, dOs, Ks, Vs, lse_s, rowdot_s, i0, j0, T, HS, tile, a.scale);
        __syncthreads();
        for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
            const int r = e / HS, c = e % HS;
            const float *g = dS + r * sld;
            float acc = dQ[e];
            for (int j = 0; j < tile; j++) acc += g[j] * wload(Ks[j * lds + c]);
            dQ[e] = acc;
        }
    }
    float *dq = a.dqkv + (hv.q - a.qkv);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
        const int r = e / HS, c = e % HS;
        if (i0 + r < T) dq[(I)(i0 + r) * (I)ld + c] = dQ[e];
    }
}

}  // namespace attention_tiles
}  // namespace osdp_cuda

#endif

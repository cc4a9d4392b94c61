/* The bf16 tiled attention's kernels with their tile products on tensor
 * cores (sm_80+: nvcuda::wmma, 16x16x16 fragments of bf16 with fp32
 * accumulators): the algorithm, the work per block, the loops over tiles
 * (causal tiles above the diagonal never loaded) and the fixed summation
 * orders of attention_tiled.cuh's kernels, whose helpers they share.  What
 * differs:
 *   - the products S = Q K^T, dP = dO V^T, O += P V, dV += P^T dO,
 *     dK += dS^T Q and dQ += dS K are wmma products: a warp owns 16x16
 *     blocks of the result (block w, w + 8, ...), loads its accumulator from
 *     shared memory, runs over the inner dimension 16 at a time, stores it
 *     back; every block's sum runs in the same order on every run, so the
 *     results are the same bits run after run;
 *   - P and dS are rounded to bf16 before the products that read them (the
 *     operands tensor cores take, as FlashAttention-2 does); the scores, the
 *     softmax, the log-sum-exp, rowdot and every accumulator stay fp32;
 *   - the tiles are `tile` = 64 rows (32 when that does not fit the device's
 *     shared memory), and the head size a multiple of 16 (the fragments'
 *     inner dimension): the launchers (attention_tiled.cu) run the CUDA-core
 *     kernels otherwise.
 * Shared memory: bf16 tiles with rows of HS + 8 elements, fp32 score tiles
 * of tile + 4 and bf16 P, dS of tile + 8, fp32 accumulators of HS + 4:
 * every fragment's first element 32-byte aligned and every leading dimension
 * a multiple of 16 bytes (wmma's load and store rules), the padding keeping
 * a fragment's rows off one bank.  Each region starts on a 128-byte boundary.
 * tests/test_cuda checks these kernels on a GPU against the CPU's tiled
 * attention and the CUDA-core bf16 kernels; tests/test_cuda_emulated.cc
 * compiles them for the host with wmma emulated (each lane holding a whole
 * fragment; the alignment and leading-dimension rules checked) and checks
 * them against the CPU's where no GPU is. */
#ifndef OSDP_ATTENTION_MMA_CUH
#define OSDP_ATTENTION_MMA_CUH

#include "attention_tiled.cuh"

#ifndef OSDP_CUDA_EMULATION
#include <mma.h>   /* tests/test_cuda_emulated.cc brings its own nvcuda::wmma */
#endif

namespace osdp_cuda {
namespace attention_mma {

using attention_tiles::AttnBackward;
using attention_tiles::HeadView;
using attention_tiles::kAttnThreads;
using attention_tiles::kWarps;
using attention_tiles::query_tile_start;
using attention_tiles::visible;
typedef __nv_bfloat16 bf16;
namespace wmma = nvcuda::wmma;

/* leading dimensions, in elements: bf16 rows of HS (Q, K, V, dO), fp32 scores, bf16 P and dS, fp32 accumulators */
__host__ __device__ inline int ld_rows(int HS) { return HS + 8; }
__host__ __device__ inline int ld_scores(int tile) { return tile + 4; }
__host__ __device__ inline int ld_probs(int tile) { return tile + 8; }
__host__ __device__ inline int ld_acc(int HS) { return HS + 4; }
__host__ __device__ inline size_t align128(size_t bytes) { return (bytes + 127) / 128 * 128; }

/* The regions of a kernel's shared memory, carved in order from one base. */
struct Carver {
    unsigned char *p;
    size_t used;
    __host__ __device__ explicit Carver(unsigned char *base) : p(base), used(0) {}
    template <class T> __host__ __device__ T *take(size_t n)
    {
        T *r = reinterpret_cast<T *>(p ? p + used : nullptr);
        used += align128(n * sizeof(T));
        return r;
    }
};

/* the pointers of each kernel's layout; with base NULL, Carver::used is the size */
struct ForwardSmem {
    bf16 *Q, *K, *V, *P;
    float *S, *O, *m, *l, *corr;
    size_t bytes;
    __host__ __device__ ForwardSmem(unsigned char *base, int tile, int HS)
    {
        Carver c(base);
        Q = c.take<bf16>((size_t)tile * ld_rows(HS)), K = c.take<bf16>((size_t)tile * ld_rows(HS));
        V = c.take<bf16>((size_t)tile * ld_rows(HS)), P = c.take<bf16>((size_t)tile * ld_probs(tile));
        S = c.take<float>((size_t)tile * ld_scores(tile)), O = c.take<float>((size_t)tile * ld_acc(HS));
        m = c.take<float>(tile), l = c.take<float>(tile), corr = c.take<float>(tile);
        bytes = c.used;
    }
};
/* d(K), d(V) and d(Q) alike: the four bf16 tiles, S and dP, P and dS, two accumulators (dK, dV; dQ uses one) */
struct BackwardSmem {
    bf16 *Q, *dO, *K, *V, *P, *dS;
    float *S, *dP, *acc0, *acc1, *lse, *rowdot;
    size_t bytes;
    __host__ __device__ BackwardSmem(unsigned char *base, int tile, int HS, int accumulators)
    {
        Carver c(base);
        Q = c.take<bf16>((size_t)tile * ld_rows(HS)), dO = c.take<bf16>((size_t)tile * ld_rows(HS));
        K = c.take<bf16>((size_t)tile * ld_rows(HS)), V = c.take<bf16>((size_t)tile * ld_rows(HS));
        P = c.take<bf16>((size_t)tile * ld_probs(tile)), dS = c.take<bf16>((size_t)tile * ld_probs(tile));
        S = c.take<float>((size_t)tile * ld_scores(tile)), dP = c.take<float>((size_t)tile * ld_scores(tile));
        acc0 = c.take<float>((size_t)tile * ld_acc(HS));
        acc1 = accumulators > 1 ? c.take<float>((size_t)tile * ld_acc(HS)) : nullptr;
        lse = c.take<float>(tile), rowdot = c.take<float>(tile);
        bytes = c.used;
    }
};

/* rows [r0, r0 + tile) of one head's column block (row stride ld; rows >= T are zeros) into a bf16 tile of
 * leading dimension ld_rows(HS) */
template <class I>
__device__ void load_rows(bf16 *dst, const float *src, int r0, int T, int ld, int HS, int tile)
{
    const int ldd = ld_rows(HS);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
        const int r = e / HS, c = e % HS;
        dst[r * ldd + c] = __float2bfloat16(r0 + r < T ? src[(I)(r0 + r) * (I)ld + c] : 0.0f);
    }
}

/* element (r, c) of a matrix stored row-major or column-major with leading dimension ld */
template <class L> __device__ __forceinline__ int at(int r, int c, int ld);
template <> __device__ __forceinline__ int at<wmma::row_major>(int r, int c, int ld) { return r * ld + c; }
template <> __device__ __forceinline__ int at<wmma::col_major>(int r, int c, int ld) { return r + c * ld; }

/* C (M,N) fp32 row-major (ldc) = [C +] A (M,K) B (K,N), A and B bf16 stored as LA, LB; M, N, K multiples of
 * 16.  Warp w makes the 16x16 blocks w, w + kWarps, ... of C, each a sum over K in increasing order. */
template <class LA, class LB>
__device__ void warp_products(float *C, int ldc, const bf16 *A, int lda, const bf16 *B, int ldb, int M, int N, int K,
                              bool accumulate)
{
    const int warp = threadIdx.x >> 5, nb = N / 16;
    for (int f = warp; f < (M / 16) * nb; f += kWarps) {
        const int i = f / nb * 16, j = f % nb * 16;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        if (accumulate) wmma::load_matrix_sync(acc, C + i * ldc + j, (unsigned)ldc, wmma::mem_row_major);
        else wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < K; k += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> b;
            wmma::load_matrix_sync(a, A + at<LA>(i, k, lda), (unsigned)lda);
            wmma::load_matrix_sync(b, B + at<LB>(k, j, ldb), (unsigned)ldb);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(C + i * ldc + j, acc, (unsigned)ldc, wmma::mem_row_major);
    }
}

/* S (tile, tile) = X Y^T for two (tile, HS) bf16 tiles (Q K^T, dO V^T): Y^T is Y read column-major */
__device__ inline void row_products(float *S, const bf16 *X, const bf16 *Y, int tile, int HS)
{
    warp_products<wmma::row_major, wmma::col_major>(S, ld_scores(tile), X, ld_rows(HS), Y, ld_rows(HS), tile, tile,
                                                    HS, false);
}

template <class I, class Out = float>
__global__ void __launch_bounds__(kAttnThreads)
    attention_mma_forward_kernel(Out *out, float *lse, const float *qkv, int T, int C, int NH, int tile,
                                 float scale)
{
    extern __shared__ __align__(128) unsigned char attn_mma_smem[];
    const HeadView<bf16> hv(qkv, T, C, NH);
    const int HS = hv.HS, ld = hv.ld, i0 = query_tile_start(tile), lsc = ld_scores(tile), lp = ld_probs(tile);
    const int lo = ld_acc(HS);
    const ForwardSmem sm(attn_mma_smem, tile, HS);
    const float *q = hv.q;

    load_rows<I>(sm.Q, q, i0, T, ld, HS, tile);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) sm.O[e / HS * lo + e % HS] = 0.0f;
    for (int r = threadIdx.x; r < tile; r += blockDim.x) {
        sm.m[r] = -INFINITY;
        sm.l[r] = 0.0f;
    }
    const int last = (i0 + tile < T ? i0 + tile : T) - 1;   /* the tile's last real row */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int j0 = 0; j0 <= last; j0 += tile) {
        __syncthreads();   /* the previous key tile's readers are done (and Q, O, m, l are set) */
        load_rows<I>(sm.K, q + C, j0, T, ld, HS, tile);
        load_rows<I>(sm.V, q + 2 * C, j0, T, ld, HS, tile);
        __syncthreads();
        row_products(sm.S, sm.Q, sm.K, tile, HS);
        __syncthreads();
        /* the online softmax, one warp per row, as attention_tiled.cuh's: P = exp(scale S - m_new) in bf16 on
         * the visible keys, 0 elsewhere; l sums the fp32 values */
        for (int r = warp; r < tile; r += kWarps) {
            const int qi = i0 + r;
            const float *s = sm.S + r * lsc;
            float mx = -INFINITY;
            for (int j = lane; j < tile; j += 32)
                if (visible(qi, j0 + j, T)) mx = fmaxf(mx, scale * s[j]);
            mx = warp_reduce<MaxOp>(mx);
            const float m_old = sm.m[r], m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
            for (int j = lane; j < tile; j += 32) {
                const float p = visible(qi, j0 + j, T) ? expf(scale * s[j] - m_new) : 0.0f;
                sm.P[r * lp + j] = __float2bfloat16(p);
                sum += p;
            }
            sum = warp_reduce<SumOp>(sum);
            if (lane == 0) {
                const float c = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
                sm.l[r] = sm.l[r] * c + sum;
                sm.m[r] = m_new;
                sm.corr[r] = c;
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) sm.O[e / HS * lo + e % HS] *= sm.corr[e / HS];
        __syncthreads();
        warp_products<wmma::row_major, wmma::row_major>(sm.O, lo, sm.P, lp, sm.V, ld_rows(HS), tile, HS, tile, true);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
        const int r = e / HS, c = e % HS;
        if (i0 + r < T) store_as(out + hv.heads_off + (I)(i0 + r) * (I)C + c, sm.O[r * lo + c] / sm.l[r]);
    }
    for (int r = threadIdx.x; r < tile; r += blockDim.x)
        if (i0 + r < T) lse[(size_t)hv.bh * T + i0 + r] = sm.m[r] + logf(sm.l[r]);
}

/* The query side of query tile i0 (Q, dO rows; lse, rowdot, 0 past T) and the key side of key tile j0 */
template <class I>
__device__ inline void load_query_side(const BackwardSmem &sm, const AttnBackward &a, const HeadView<bf16> &hv,
                                       int i0)
{
    load_rows<I>(sm.Q, hv.q, i0, a.T, hv.ld, hv.HS, a.tile);
    load_rows<I>(sm.dO, a.dout + hv.heads_off, i0, a.T, a.C, hv.HS, a.tile);
    for (int r = threadIdx.x; r < a.tile; r += blockDim.x) {
        const bool real = i0 + r < a.T;
        sm.lse[r] = real ? a.lse[(size_t)hv.bh * a.T + i0 + r] : 0.0f;
        sm.rowdot[r] = real ? a.rowdot[(size_t)hv.bh * a.T + i0 + r] : 0.0f;
    }
}
template <class I>
__device__ inline void load_key_side(const BackwardSmem &sm, const AttnBackward &a, const HeadView<bf16> &hv, int j0)
{
    load_rows<I>(sm.K, hv.q + a.C, j0, a.T, hv.ld, hv.HS, a.tile);
    load_rows<I>(sm.V, hv.q + 2 * a.C, j0, a.T, hv.ld, hv.HS, a.tile);
}

/* S = Q K^T and dP = dO V^T on tensor cores, then P = exp(scale S - lse) and dS = scale P (dP - rowdot) in bf16
 * on the visible entries, 0 elsewhere (barriers inside; the caller's tiles are loaded and synchronised) */
__device__ inline void tile_gradients(const BackwardSmem &sm, int i0, int j0, int T, int HS, int tile, float scale)
{
    row_products(sm.S, sm.Q, sm.K, tile, HS);
    row_products(sm.dP, sm.dO, sm.V, tile, HS);
    __syncthreads();
    const int lsc = ld_scores(tile), lp = ld_probs(tile);
    for (int e = threadIdx.x; e < tile * tile; e += blockDim.x) {
        const int r = e / tile, j = e % tile;
        float p = 0.0f, ds = 0.0f;
        if (visible(i0 + r, j0 + j, T)) {
            p = expf(scale * sm.S[r * lsc + j] - sm.lse[r]);
            ds = scale * p * (sm.dP[r * lsc + j] - sm.rowdot[r]);
        }
        sm.P[r * lp + j] = __float2bfloat16(p);
        sm.dS[r * lp + j] = __float2bfloat16(ds);
    }
    __syncthreads();
}

/* d(K) and d(V) of one key tile: dV += P^T dO, dK += dS^T Q over the query tiles at or below the diagonal */
template <class I>
__global__ void __launch_bounds__(kAttnThreads) attention_mma_dkv_kernel(const AttnBackward a)
{
    extern __shared__ __align__(128) unsigned char attn_mma_smem[];
    const int T = a.T, C = a.C, tile = a.tile;
    const HeadView<bf16> hv(a.qkv, T, C, a.NH);
    const int HS = hv.HS, ld = hv.ld, lo = ld_acc(HS), lp = ld_probs(tile), lr = ld_rows(HS);
    const int j0 = (int)blockIdx.y * tile;
    const BackwardSmem sm(attn_mma_smem, tile, HS, 2);
    float *dK = sm.acc0, *dV = sm.acc1;

    load_key_side<I>(sm, a, hv, j0);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
        const int at_e = e / HS * lo + e % HS;
        dK[at_e] = dV[at_e] = 0.0f;
    }
    for (int i0 = j0; i0 < T; i0 += tile) {
        __syncthreads();   /* the previous query tile's readers are done (and K, V, dK, dV are set) */
        load_query_side<I>(sm, a, hv, i0);
        __syncthreads();
        tile_gradients(sm, i0, j0, T, HS, tile, a.scale);
        /* P^T and dS^T: P and dS read column-major */
        warp_products<wmma::col_major, wmma::row_major>(dV, lo, sm.P, lp, sm.dO, lr, tile, HS, tile, true);
        warp_products<wmma::col_major, wmma::row_major>(dK, lo, sm.dS, lp, sm.Q, lr, tile, HS, tile, true);
    }
    __syncthreads();   /* a warp's blocks are not the threads' entries below */
    float *dk = a.dqkv + (hv.q - a.qkv) + C;
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
        const int j = e / HS, c = e % HS;
        if (j0 + j < T) {
            dk[(I)(j0 + j) * (I)ld + c] = dK[j * lo + c];
            dk[(I)(j0 + j) * (I)ld + C + c] = dV[j * lo + c];
        }
    }
}

/* d(Q) of one query tile: dQ += dS K over the key tiles at or left of the diagonal */
template <class I>
__global__ void __launch_bounds__(kAttnThreads) attention_mma_dq_kernel(const AttnBackward a)
{
    extern __shared__ __align__(128) unsigned char attn_mma_smem[];
    const int T = a.T, C = a.C, tile = a.tile;
    const HeadView<bf16> hv(a.qkv, T, C, a.NH);
    const int HS = hv.HS, ld = hv.ld, lo = ld_acc(HS), i0 = query_tile_start(tile);
    const BackwardSmem sm(attn_mma_smem, tile, HS, 1);
    float *dQ = sm.acc0;

    load_query_side<I>(sm, a, hv, i0);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) dQ[e / HS * lo + e % HS] = 0.0f;
    const int last = (i0 + tile < T ? i0 + tile : T) - 1;
    for (int j0 = 0; j0 <= last; j0 += tile) {
        __syncthreads();
        load_key_side<I>(sm, a, hv, j0);
        __syncthreads();
        tile_gradients(sm, i0, j0, T, HS, tile, a.scale);
        warp_products<wmma::row_major, wmma::row_major>(dQ, lo, sm.dS, ld_probs(tile), sm.K, ld_rows(HS), tile, HS,
                                                        tile, true);
    }
    __syncthreads();
    float *dq = a.dqkv + (hv.q - a.qkv);
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
        const int r = e / HS, c = e % HS;
        if (i0 + r < T) dq[(I)(i0 + r) * (I)ld + c] = dQ[r * lo + c];
    }
}

}  // namespace attention_mma
}  // namespace osdp_cuda

#endif

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
 * accumulator are fp32.  The products are CUDA-core FMAs; the bf16 variant
 * has a second form with its tile products on tensor cores
 * (attention_mma.cuh, selected by OSDP_CUDA_ATTENTION_MMA=1:
 * attention_switch.h), which the launchers below run where it applies.
 *
 * Shared memory: tile 32 (tile 16 when a head is too wide for the device's
 * per-block limit).  GPT-2's HS = 64 in fp32 needs 38 KiB (forward), 58 KiB
 * (d(K), d(V)) and 45 KiB (d(Q)); above 48 KiB the kernel is opted in
 * (cudaFuncAttributeMaxDynamicSharedMemorySize).
 *
 * The kernels live in attention_tiled.cuh, which tests/test_cuda_emulated.cc
 * also compiles for the host, and attention_mma.cuh; this file holds their
 * launchers. */
#include "kernels_cuda.cuh"
#include "cuda_check.h"
#include "attention_tiled.cuh"
#include "attention_mma.cuh"
#include "attention_switch.h"

#include <math.h>
#include <type_traits>

namespace osdp_cuda {

using namespace attention_tiles;

namespace {

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

/* the largest tensor the kernels index, qkv (B,T,3C) (out, dout, rowdot and
 * lse are smaller): below 2^31 elements every index is 32-bit (the index
 * type I, device_math.cuh) */
size_t qkv_numel(int B, int T, int C) { return (size_t)B * (size_t)T * 3 * (size_t)C; }

int attention_mma_on = 0;        /* attention_switch.h */
long attention_mma_launches = 0;

/* The tensor-core kernels' tile for the bf16 tiles of a head size: 64 rows, or 32 where the backward's layout
 * (the largest) does not fit the device at 64; 0 where they do not run: switched off, or a head size that is
 * not a multiple of 16 (the fragments' inner dimension) or too wide even at 32. */
template <class E> int mma_tile(int HS)
{
    if (!std::is_same<E, __nv_bfloat16>::value || !attention_mma_on || HS <= 0 || HS % 16 != 0) return 0;
    static size_t limit = 0;
    if (!limit) limit = max_smem_optin();
    for (int tile = 64; tile >= 32; tile /= 2)
        if (attention_mma::BackwardSmem(nullptr, tile, HS, 2).bytes <= limit) return tile;
    return 0;
}

template <class Out>
void forward_mma(Out *out, float *lse, const float *qkv, int B, int T, int C, int NH, int tile, cudaStream_t s)
{
    const int HS = C / NH;
    const size_t bytes = attention_mma::ForwardSmem(nullptr, tile, HS).bytes;
    const dim3 grid((unsigned)(B * NH), (unsigned)((T + tile - 1) / tile));
    with_index_type(qkv_numel(B, T, C), [&](auto i) {
        using I = decltype(i);
        allow_smem(attention_mma::attention_mma_forward_kernel<I, Out>, bytes);
        attention_mma::attention_mma_forward_kernel<I, Out><<<grid, kAttnThreads, bytes, s>>>(
            out, lse, qkv, T, C, NH, tile, 1.0f / sqrtf((float)HS));
    });
    CUDA_CHECK_LAUNCH();
    attention_mma_launches++;
}

/* the backward's d(K), d(V) and d(Q) kernels on tensor cores, after rowdot (args.tile: mma_tile's) */
template <class I> void backward_mma(const AttnBackward &args, int B, int HS, cudaStream_t s)
{
    const size_t kv_bytes = attention_mma::BackwardSmem(nullptr, args.tile, HS, 2).bytes;
    const size_t q_bytes = attention_mma::BackwardSmem(nullptr, args.tile, HS, 1).bytes;
    const dim3 grid((unsigned)(B * args.NH), (unsigned)((args.T + args.tile - 1) / args.tile));
    allow_smem(attention_mma::attention_mma_dkv_kernel<I>, kv_bytes);
    allow_smem(attention_mma::attention_mma_dq_kernel<I>, q_bytes);
    attention_mma::attention_mma_dkv_kernel<I><<<grid, kAttnThreads, kv_bytes, s>>>(args);
    CUDA_CHECK_LAUNCH();
    attention_mma::attention_mma_dq_kernel<I><<<grid, kAttnThreads, q_bytes, s>>>(args);
    CUDA_CHECK_LAUNCH();
    attention_mma_launches += 2;
}

}  // namespace

template <class E, class Out>
void attention_tiled_forward(Out *out, float *lse, const float *qkv, int B, int T, int C, int NH, cudaStream_t s)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    const int mma = mma_tile<E>(C / NH);
    if (mma) {
        forward_mma(out, lse, qkv, B, T, C, NH, mma, s);
        return;
    }
    const int HS = C / NH, tile = choose_tile<E>(HS);
    const size_t bytes = forward_smem<E>(tile, HS);
    const dim3 grid((unsigned)(B * NH), (unsigned)((T + tile - 1) / tile));
    with_index_type(qkv_numel(B, T, C), [&](auto i) {
        using I = decltype(i);
        allow_smem(attention_tiled_forward_kernel<E, I, Out>, bytes);
        attention_tiled_forward_kernel<E, I, Out><<<grid, kAttnThreads, bytes, s>>>(out, lse, qkv, T, C, NH, tile,
                                                                                    1.0f / sqrtf((float)HS));
    });
    CUDA_CHECK_LAUNCH();
}

template <class E>
void attention_tiled_backward(float *dqkv, float *rowdot, const float *dout, const float *out, const float *qkv,
                              const float *lse, int B, int T, int C, int NH, cudaStream_t s)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    const int HS = C / NH, mma = mma_tile<E>(HS), tile = mma ? mma : choose_tile<E>(HS);
    const float scale = 1.0f / sqrtf((float)HS);
    const long rows = (long)B * NH * T;
    long blocks = (rows + kWarps - 1) / kWarps;
    if (blocks > (1L << 20)) blocks = 1L << 20;   /* the kernel strides over the rest */
    const dim3 grid((unsigned)(B * NH), (unsigned)((T + tile - 1) / tile));
    const size_t kv_bytes = dkv_smem<E>(tile, HS), q_bytes = dq_smem<E>(tile, HS);
    with_index_type(qkv_numel(B, T, C), [&](auto i) {
        using I = decltype(i);
        attention_rowdot_kernel<E, I><<<(unsigned)blocks, kAttnThreads, 0, s>>>(rowdot, dout, out, B, T, C, NH);
        CUDA_CHECK_LAUNCH();
        const AttnBackward args = {dqkv, dout, qkv, lse, rowdot, T, C, NH, tile, scale};
        if (mma) {
            backward_mma<I>(args, B, HS, s);
            return;
        }
        allow_smem(attention_tiled_dkv_kernel<E, I>, kv_bytes);
        allow_smem(attention_tiled_dq_kernel<E, I>, q_bytes);
        attention_tiled_dkv_kernel<E, I><<<grid, kAttnThreads, kv_bytes, s>>>(args);
        CUDA_CHECK_LAUNCH();
        attention_tiled_dq_kernel<E, I><<<grid, kAttnThreads, q_bytes, s>>>(args);
    });
    CUDA_CHECK_LAUNCH();
}

template void attention_tiled_forward<float, float>(float *, float *, const float *, int, int, int, int,
                                                   cudaStream_t);
template void attention_tiled_forward<__nv_bfloat16, float>(float *, float *, const float *, int, int, int, int,
                                                            cudaStream_t);
/* the heads stored in bf16 (--activation-dtype bf16), rounded as written */
template void attention_tiled_forward<__nv_bfloat16, __nv_bfloat16>(__nv_bfloat16 *, float *, const float *, int,
                                                                    int, int, int, cudaStream_t);
template void attention_tiled_backward<float>(float *, float *, const float *, const float *, const float *,
                                              const float *, int, int, int, int, cudaStream_t);
template void attention_tiled_backward<__nv_bfloat16>(float *, float *, const float *, const float *,
                                                      const float *, const float *, int, int, int, int,
                                                      cudaStream_t);

}  // namespace osdp_cuda

extern "C" void osdp_cuda_set_attention_mma(int on) { osdp_cuda::attention_mma_on = on; }
extern "C" long osdp_cuda_attention_mma_launches(void) { return osdp_cuda::attention_mma_launches; }

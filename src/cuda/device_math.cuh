/* Device helpers shared by the kernel files of src/cuda/ (kernels_cuda.cu,
 * attention_tiled.cu): fixed-tree warp and block reductions, the
 * widening of bf16 values to float, and the host's choice of a kernel's
 * index type. */
#ifndef OSDP_DEVICE_MATH_CUH
#define OSDP_DEVICE_MATH_CUH

/* OSDP_CUDA_EMULATION: compiled for the host by tests/test_cuda_emulated.cc,
 * which brings its own __nv_bfloat16 and warp shuffle */
#ifndef OSDP_CUDA_EMULATION
#include <cuda_bf16.h>
#endif
#include <math.h>
#include <stddef.h>

namespace osdp_cuda {

struct SumOp {
    template <class T> __device__ static T apply(T a, T b) { return a + b; }
    template <class T> __device__ static T identity() { return T(0); }
};
struct MaxOp {
    template <class T> __device__ static T apply(T a, T b) { return a > b ? a : b; }
    template <class T> __device__ static T identity() { return -INFINITY; }
};

/* xor butterfly: every lane ends with the same value, summed in the same tree */
template <class Op, class T> __device__ T warp_reduce(T v)
{
    for (int o = 16; o > 0; o >>= 1) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* whole-block reduction; every thread gets the result.  `shared` holds 32 T. */
template <class Op, class T> __device__ T block_reduce(T v, T *shared)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = (blockDim.x + 31) >> 5;
    v = warp_reduce<Op>(v);
    __syncthreads();                       /* `shared` may still be read from a previous call */
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        T w = lane < nwarps ? shared[lane] : Op::template identity<T>();
        w = warp_reduce<Op>(w);
        if (lane == 0) shared[0] = w;
    }
    __syncthreads();
    return shared[0];
}

/* Host side: 32-bit index arithmetic (issue 31).  The kernels whose index
 * type is a template parameter I (kernels_cuda.cu, attention_tiled.cuh,
 * residual_layernorm.cuh) run with I = unsigned when the host proves here that
 * the tensor they index has fewer than 2^31 elements, size_t otherwise.
 * Below 2^31 every index, and an index below n plus a grid-stride step (at
 * most grid_for's 2^20 blocks of 1024 threads, 2^30), stays below 2^32: no
 * unsigned wrap-around in a grid-stride loop.  The 32-bit forms save the
 * 64-bit multiplies and, above all, the 64-bit divisions by V (the
 * cross-entropy's row of an element) that the GPU emulates in software. */
inline bool fits_32bit(size_t n) { return n < ((size_t)1 << 31); }

/* f(I()) with I the index type fits_32bit(n) allows: the launch of the
 * kernel's variant for it (a generic lambda, `using I = decltype(i)`) */
template <class F> inline void with_index_type(size_t n, F &&f)
{
    if (fits_32bit(n)) f(0u);
    else f((size_t)0);
}

/* a weight (or stored activation) element as float */
__device__ __forceinline__ float wload(float v) { return v; }
__device__ __forceinline__ float wload(__nv_bfloat16 v) { return __bfloat162float(v); }

/* an fp32 result stored as the output's element type: as it is, or rounded to the nearest bf16 (ties to even,
 * the rounding of convert_weights and residual_round, so a kernel that stores bf16 gives the bits its fp32 form
 * followed by that rounding gives) */
__device__ __forceinline__ void store_as(float *dst, float v) { *dst = v; }
__device__ __forceinline__ void store_as(__nv_bfloat16 *dst, float v) { *dst = __float2bfloat16(v); }

}  // namespace osdp_cuda

#endif

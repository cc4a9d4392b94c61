/* Device helpers shared by the kernel files of src/cuda/ (kernels_cuda.cu,
 * attention_tiled.cu): fixed-tree warp and block reductions, and the
 * widening of bf16 values to float. */
#ifndef OSDP_DEVICE_MATH_CUH
#define OSDP_DEVICE_MATH_CUH

/* OSDP_CUDA_EMULATION: compiled for the host by tests/test_cuda_emulated.cc,
 * which brings its own __nv_bfloat16 and warp shuffle */
#ifndef OSDP_CUDA_EMULATION
#include <cuda_bf16.h>
#endif
#include <math.h>

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

/* a weight element as float */
__device__ __forceinline__ float wload(float v) { return v; }
__device__ __forceinline__ float wload(__nv_bfloat16 v) { return __bfloat162float(v); }

}  // namespace osdp_cuda

#endif

/* The fused head's d(logits) (crossentropy_backward_lse of osdp/compute.h):
 * over a chunk of recomputed fp32 logits, dlogits = scale (exp(logit - lse)
 * - onehot(target - lo)) over the first `valid` columns, 0 over the padding,
 * written as D: float in place over the logits (the fp32 path,
 * kernels_cuda.cu), or __nv_bfloat16, rounded as written into the staging
 * the head's two products read (the bf16 table's head_backward_lse,
 * matmul_bf16.cu), where the unfused path writes fp32 and rounds them in a
 * second pass: the logits read once, 2 bytes written per entry instead of
 * 4 + 4 + 2.  One thread per entry, grid-stride; I the index type
 * (device_math.cuh).  A header of its own so that
 * tests/cuda/test_cuda_emulated.cc compiles the same source for the host. */
#ifndef OSDP_HEAD_BACKWARD_CUH
#define OSDP_HEAD_BACKWARD_CUH

#include "device_math.cuh"

namespace osdp_cuda {

template <class I, class D>
__global__ void crossentropy_backward_lse_kernel(D *dlogits, const float *logits, const float *lse,
                                                 const int *targets, float scale, int rows, int V, int valid, int lo)
{
    const I n = (I)rows * (I)V;
    for (I k = blockIdx.x * (I)blockDim.x + threadIdx.x; k < n; k += (I)gridDim.x * blockDim.x) {
        const I i = k / (I)V;
        const int j = (int)(k % (I)V), target = targets[i] - lo;
        float d = j < valid ? scale * expf(logits[k] - lse[i]) : 0.0f;   /* read before the write: in place */
        if (j == target && target < valid) d -= scale;   /* target >= 0 as j is */
        store_as(dlogits + k, d);
    }
}

}  // namespace osdp_cuda

#endif

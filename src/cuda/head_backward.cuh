/* The fused head's d(logits) in bf16 (the bf16 table's head_backward_lse,
 * matmul_bf16.cu): over a chunk of recomputed fp32 logits, dlogits = scale
 * (exp(logit - lse) - onehot(target - lo)) over the first `valid` columns, 0
 * over the padding -- crossentropy_backward_lse's arithmetic -- rounded to
 * bf16 as it is written, into the staging the head's two products read.  The
 * unfused bf16 path writes the same values in fp32 and rounds them in a
 * second pass; this one reads the logits once and writes 2 bytes per entry
 * instead of 4 + 4 + 2.  One thread per entry, grid-stride; I the index
 * type (device_math.cuh).  A header of its own so that
 * tests/cuda/test_cuda_emulated.cc compiles the same source for the host;
 * included by matmul_bf16.cu alone in the build. */
#ifndef OSDP_HEAD_BACKWARD_CUH
#define OSDP_HEAD_BACKWARD_CUH

#include "device_math.cuh"

namespace osdp_cuda {

template <class I>
__global__ void crossentropy_backward_lse_bf16_kernel(__nv_bfloat16 *dlogits, const float *logits,
                                                      const float *lse, const int *targets, float scale, int rows,
                                                      int V, int valid, int lo)
{
    const I n = (I)rows * (I)V;
    for (I k = blockIdx.x * (I)blockDim.x + threadIdx.x; k < n; k += (I)gridDim.x * blockDim.x) {
        const I i = k / (I)V;
        const int j = (int)(k % (I)V), target = targets[i] - lo;
        float d = j < valid ? scale * expf(logits[k] - lse[i]) : 0.0f;
        if (j == target && target < valid) d -= scale;   /* target >= 0 as j is */
        dlogits[k] = __float2bfloat16(d);
    }
}

}  // namespace osdp_cuda

#endif

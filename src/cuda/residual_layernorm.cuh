/* The fused residual + LayerNorm kernel (residual_layernorm_forward of
 * osdp/compute.h): res = a + b, then y = layernorm(res) with its mean and
 * rstd, one warp per row.  Each lane adds its columns (c = lane, lane + 32,
 * ...), writes them to res and sums them; the row's mean is the warp's
 * butterfly sum; the variance is a second pass over the lane's own columns
 * of res (its own writes, in L1), and y a third.  a, b and res are touched
 * once each from memory where residual_forward and layernorm_forward read
 * res back: one read of the row and a launch saved.  Statistics in fp32, the
 * sums in a fixed tree (no atomics): bitwise reproducible.  A header of its
 * own so that tests/cuda/test_cuda_emulated.cc compiles the same source for
 * the host; included by kernels_cuda.cu alone in the build.  I, the index
 * type, is unsigned where the launcher proved BT C < 2^31, size_t else.  Y,
 * y's element type: float, or __nv_bfloat16 for a stored bf16 activation
 * (--activation-dtype bf16), each value rounded as it is stored (store_as):
 * the bits of the fp32 form followed by residual_round and the narrowing. */
#ifndef OSDP_RESIDUAL_LAYERNORM_CUH
#define OSDP_RESIDUAL_LAYERNORM_CUH

#include "device_math.cuh"

namespace osdp_cuda {

const int kResidualLayernormThreads = 256;   /* 8 rows per block */

template <class W, class I, class Y = float>
__global__ void __launch_bounds__(kResidualLayernormThreads)
residual_layernorm_kernel(float *res, Y *y, float *mean, float *rstd, const float *a, const float *b,
                          const W *w, const W *bias, int BT, int C)
{
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= BT) return;                 /* the whole warp leaves together */
    const I base = (I)row * (I)C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float r = a[base + c] + b[base + c];
        res[base + c] = r;
        s += r;
    }
    const float m = warp_reduce<SumOp>(s) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float d = res[base + c] - m;
        v += d * d;
    }
    v = warp_reduce<SumOp>(v) / (float)C;
    const float rs = 1.0f / sqrtf(v + 1e-5f);
    for (int c = lane; c < C; c += 32) store_as(y + base + c, (res[base + c] - m) * rs * wload(w[c]) + wload(bias[c]));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = rs;
    }
}

}  // namespace osdp_cuda

#endif

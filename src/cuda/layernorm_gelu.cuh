/* The LayerNorm forward and the GELU forward and backward kernels
 * (layernorm_forward, gelu_forward, gelu_backward of osdp/compute.h), in a
 * header of their own so that tests/cuda/test_cuda_emulated.cc compiles the
 * same source for the host; included by kernels_cuda.cu alone in the build.
 *
 * Element types.  Besides the fp32 form (every type float), the bf16 table
 * under --activation-dtype bf16 runs them on the stored bf16 activations
 * (osdp/layout.h): the LayerNorm's output Y and the GELU's output Y in bf16,
 * each fp32 result rounded as it is stored (store_as, device_math.cuh), and
 * the GELU's input X in bf16, widened as it is read (wload).  The arithmetic
 * is the fp32 form's, line for line, so the bf16 outputs are the bits of the
 * fp32 kernel followed by residual_round and the narrowing (convert_weights),
 * and a bf16 input gives the bits of the fp32 kernel on its widened copy:
 * what gpt_ops.c's staging pass made, without the fp32 copy and the two
 * passes over it.  I, the index type, as everywhere (device_math.cuh). */
#ifndef OSDP_LAYERNORM_GELU_CUH
#define OSDP_LAYERNORM_GELU_CUH

#include "device_math.cuh"

namespace osdp_cuda {

const float kGeluScaling = 0.7978845608028654f; /* sqrt(2/pi) */

/* one warp per row: the mean and the variance by the warp's butterfly sums, statistics in fp32 */
template <class W, class I, class Y = float>
__global__ void layernorm_forward_kernel(Y *y, float *mean, float *rstd, const float *x, const W *w, const W *b,
                                         int BT, int C)
{
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= BT) return;                 /* the whole warp leaves together */
    const float *xr = x + (I)row * (I)C;
    Y *yr = y + (I)row * (I)C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += xr[c];
    const float m = warp_reduce<SumOp>(s) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = xr[c] - m;
        v += d * d;
    }
    v = warp_reduce<SumOp>(v) / (float)C;
    const float rs = 1.0f / sqrtf(v + 1e-5f);
    for (int c = lane; c < C; c += 32) store_as(yr + c, (xr[c] - m) * rs * wload(w[c]) + wload(b[c]));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = rs;
    }
}

/* grid-stride, one thread per element; y may alias x (same types) */
template <class I, class X = float, class Y = float>
__global__ void gelu_forward_kernel(Y *y, const X *x, I n)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n;
         i += (I)gridDim.x * blockDim.x) {
        float xi = wload(x[i]);
        float cube = 0.044715f * xi * xi * xi;
        store_as(y + i, 0.5f * xi * (1.0f + tanhf(kGeluScaling * (xi + cube))));
    }
}

template <class I, class X = float>
__global__ void gelu_backward_kernel(float *dx, const X *x, const float *dy, I n)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n;
         i += (I)gridDim.x * blockDim.x) {
        float xi = wload(x[i]);
        float cube = 0.044715f * xi * xi * xi;
        float th = tanhf(kGeluScaling * (xi + cube));
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) +
                     xi * 0.5f * sech2 * kGeluScaling * (1.0f + 3.0f * 0.044715f * xi * xi);
        dx[i] = grad * dy[i];              /* dx may alias dy: read before write */
    }
}

}  // namespace osdp_cuda

#endif

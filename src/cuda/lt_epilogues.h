/* Whether the CUDA bf16 table puts the bias, and the bias and GELU, of its
 * products in cuBLASLt's epilogues (matmul_bf16.cu), in the forward (BIAS,
 * GELU_AUX_BIAS) and the backward (BGRADA, DGELU_BGRAD): off by default, on
 * with OSDP_CUDA_LT_EPILOGUES=1 in the environment at init; tests/test_cuda
 * turns it on and off to compare the two paths.  Makes the cuBLASLt handle on
 * first use; call after the backend's init.  osdp_cuda_lt_products: how many
 * products have been queued through cuBLASLt (the tests check that the fused
 * path ran, not the fallback). */
#ifndef OSDP_LT_EPILOGUES_H
#define OSDP_LT_EPILOGUES_H

#ifdef __cplusplus
extern "C" {
#endif
void osdp_cuda_set_lt_epilogues(int on);
long osdp_cuda_lt_products(void);
/* products that read a stored bf16 activation in place (matmul_forward_bf16_x, matmul_backward_bf16_x) */
long osdp_cuda_bf16_direct_products(void);
/* kernels that wrote a stored bf16 activation themselves, or read the stored fc in the GELU's backward
 * (layernorm_forward_bf16_y and the other producers' entries of osdp/compute.h) */
long osdp_cuda_bf16_stored_outputs(void);
/* cuBLASLt products that wrote the MLP's stored bf16 fc and gelu with the GELU in the epilogue
 * (matmul_forward_gelu_bf16 of osdp/compute.h) */
long osdp_cuda_lt_gelu_bf16_products(void);
#ifdef __cplusplus
}
#endif

#endif

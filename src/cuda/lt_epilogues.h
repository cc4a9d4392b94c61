/* Whether the CUDA bf16 table puts the bias, and the bias and GELU, of its
 * products in cuBLASLt's epilogues (matmul_bf16.cu): off by default, on with
 * OSDP_CUDA_LT_EPILOGUES=1 in the environment at init; tests/test_cuda turns
 * it on and off to compare the two paths.  Makes the cuBLASLt handle on
 * first use; call after the backend's init. */
#ifndef OSDP_LT_EPILOGUES_H
#define OSDP_LT_EPILOGUES_H

#ifdef __cplusplus
extern "C" {
#endif
void osdp_cuda_set_lt_epilogues(int on);
#ifdef __cplusplus
}
#endif

#endif

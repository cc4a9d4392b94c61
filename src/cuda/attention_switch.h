/* Whether the CUDA bf16 table's tiled attention runs its tile products on
 * tensor cores (attention_mma.cuh: wmma, bf16 operands, fp32 accumulation)
 * instead of CUDA-core FMAs (attention_tiled.cuh): off by default, on with
 * OSDP_CUDA_ATTENTION_MMA=1 in the environment at init; tests/test_cuda
 * turns it on and off to compare the two.  Where the head size is not a
 * multiple of 16, or a tile of 32 rows does not fit the device's shared
 * memory, the CUDA-core kernels run either way.
 * osdp_cuda_attention_mma_launches: how many tensor-core kernels have been
 * launched (the tests check that the switch took effect). */
#ifndef OSDP_ATTENTION_SWITCH_H
#define OSDP_ATTENTION_SWITCH_H

#ifdef __cplusplus
extern "C" {
#endif
void osdp_cuda_set_attention_mma(int on);
long osdp_cuda_attention_mma_launches(void);
#ifdef __cplusplus
}
#endif

#endif

/* libosdp_cuda.so's one export (include/osdp/cuda_plugin.h): the CUDA compute tables and the NCCL
 * communicator's constructor, found by the program's loader (src/util/cuda_plugin.c). */
#include "config.h"
#include "osdp/cuda_plugin.h"

const osdp_cuda_plugin osdp_cuda_plugin_entry = {
    .abi = OSDP_CUDA_PLUGIN_ABI,
    .fp32 = &osdp_compute_cuda,
    .bf16 = &osdp_compute_cuda_bf16,
    .comm_create_nccl = osdp_comm_create_nccl,
};

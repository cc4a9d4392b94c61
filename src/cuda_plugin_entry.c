/* libosdp_cuda.so's one export (include/osdp/cuda_plugin.h): the CUDA compute tables and the NCCL
 * communicator's constructor, found by the program's loader (src/util/cuda_plugin.c).  The plugin's
 * top, as main.c is the program's: it gathers src/cuda/ and src/comm/comm_nccl.c, so it lives in
 * neither (in src/cuda/ it made the folders call each other: it calls comm, whose NCCL backend calls
 * the CUDA compute table). */
#include "config.h"
#include "osdp/cuda_plugin.h"

const osdp_cuda_plugin osdp_cuda_plugin_entry = {
    .abi = OSDP_CUDA_PLUGIN_ABI,
    .fp32 = &osdp_compute_cuda,
    .bf16 = &osdp_compute_cuda_bf16,
    .comm_create_nccl = osdp_comm_create_nccl,
};

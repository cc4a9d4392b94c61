/* The CUDA/NCCL backend as a plugin: libosdp_cuda.so (src/cuda/, src/comm/comm_nccl.c), opened
 * with dlopen only when --backend cuda or an NCCL communicator is chosen, so that a CPU run never
 * maps cudart, cuBLAS and NCCL (their loading and constructors cost each rank's start) and a CUDA
 * build runs --backend cpu where no CUDA library is installed.  The plugin exports one object,
 * osdp_cuda_plugin_entry; it calls back into the program's libosdp (linked whole, -rdynamic), so
 * the error state is one copy.  A program that links the CUDA objects itself (libosdp_cuda.a:
 * tests/cuda/test_cuda, tests/comm/test_nccl) gets that entry instead of the plugin's. */
#ifndef OSDP_CUDA_PLUGIN_H
#define OSDP_CUDA_PLUGIN_H

#include "osdp/comm.h"
#include "osdp/compute.h"

#ifdef __cplusplus
extern "C" {
#endif

/* raised with every change of osdp_cuda_plugin, osdp_compute_backend or osdp_comm's layout */
#define OSDP_CUDA_PLUGIN_ABI 1
#define OSDP_CUDA_PLUGIN_FILE "libosdp_cuda.so"
/* $OSDP_CUDA_PLUGIN: the plugin's file, instead of the search beside the program and in the
 * install directory */
#define OSDP_CUDA_PLUGIN_ENV "OSDP_CUDA_PLUGIN"

typedef struct osdp_cuda_plugin {
    int abi;                                  /* OSDP_CUDA_PLUGIN_ABI of the plugin's build */
    const osdp_compute_backend *fp32, *bf16;  /* osdp_compute_cuda, osdp_compute_cuda_bf16 */
    osdp_status (*comm_create_nccl)(osdp_comm *c, const void *mpi_comm, int local_device);
} osdp_cuda_plugin;

extern const osdp_cuda_plugin osdp_cuda_plugin_entry;   /* src/cuda_plugin_entry.c */

/* The CUDA backend (src/util/cuda_plugin.c): the entry linked into the program, else the plugin
 * opened once (RTLD_NOW | RTLD_LOCAL) from $OSDP_CUDA_PLUGIN, or else the first of the program's
 * directory and the install directory that holds libosdp_cuda.so.  NULL when there is none, or it
 * could not be opened; osdp_cuda_plugin_error then says why (the files tried, dlerror's text). */
const osdp_cuda_plugin *osdp_cuda_plugin_load(void);
const char *osdp_cuda_plugin_error(void);
/* The file osdp_cuda_plugin_load would open, without opening it, into buf (1); else why there is none
 * (0: a build without CUDA, no such file, the entry linked into the program).  `osdp_gpt --version`
 * prints it, for scripts (slurm/osdp_gpt.sh) that check the plugin's libraries. */
int osdp_cuda_plugin_where(char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif

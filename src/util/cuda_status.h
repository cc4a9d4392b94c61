/* The check of a CUDA runtime call, for every file that calls CUDA: the
 * compute backend (src/cuda/, nvcc) and the NCCL communication backend
 * (src/comm/comm_nccl.c, mpicc).  A failed call is a bug or a dead device,
 * not something a caller can recover from: the macros hand file:line and
 * the error string to osdp_error_unrecoverable (osdp/error.h), whose
 * handler in osdp_gpt aborts the whole job (exit() on one rank would leave
 * the others hanging in their next collective); the library itself never
 * ends the process. */
#ifndef OSDP_UTIL_CUDA_STATUS_H
#define OSDP_UTIL_CUDA_STATUS_H

#include <cuda_runtime.h>
#include "osdp/error.h"

#define OSDP_CUDA_ABORT_(file, line, what, msg)                                      \
    osdp_error_unrecoverable(OSDP_ERR_INTERNAL, "%s:%d: %s failed: %s", (file), (line), (what), (msg))

/* one check for both libraries' status types */
#define OSDP_CUDA_STATUS_CHECK_(type, ok, to_string, call)                           \
    do {                                                                             \
        type osdp_cuda_status_ = (call);                                             \
        if (osdp_cuda_status_ != (ok))                                               \
            OSDP_CUDA_ABORT_(__FILE__, __LINE__, #call, to_string(osdp_cuda_status_)); \
    } while (0)

#define CUDA_CHECK(call) OSDP_CUDA_STATUS_CHECK_(cudaError_t, cudaSuccess, cudaGetErrorString, call)

#endif

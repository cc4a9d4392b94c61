/* Error checks of the CUDA backends, and what the CUDA compute backend shares
 * with the NCCL communication backend.
 *
 * Usable from C (src/comm/comm_nccl.c, compiled by mpicc) and from C++ (the
 * .cu files, compiled by nvcc).  A failed CUDA or cuBLAS call is a bug or a
 * dead device, not something a caller can recover from: the macros hand
 * file:line and the error string to osdp_error_unrecoverable (osdp/error.h),
 * whose handler in osdp_gpt aborts the whole job (exit() on one rank would
 * leave the others hanging in their next collective); the library itself
 * never ends the process.  Out-of-memory from cudaMalloc is not checked with these: the
 * alloc entry returns NULL so that the runtime can report it. */
#ifndef OSDP_CUDA_CHECK_H
#define OSDP_CUDA_CHECK_H

#include <mpi.h>
#include <stdio.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include "osdp/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The stream every compute kernel and cuBLAS call runs on (created by the
 * CUDA compute backend's init); NULL (the legacy default stream) before it.
 * The NCCL backend orders its collectives after the work queued on it. */
cudaStream_t osdp_cuda_compute_stream(void);

/* n launches (kernels, cuBLAS products) were queued on the compute stream:
 * the launch bound (src/util/launch_gate.h) may make the host wait here,
 * within the communication timeout, so that it never blocks inside a launch
 * on a full queue (a dead peer's collective holding the stream). */
void osdp_cuda_launched(unsigned n);

/* cuBLAS has no cublasGetErrorString before 11.4; ours works everywhere. */
const char *osdp_cublas_status_string(cublasStatus_t s);

#ifdef __cplusplus
}
#endif

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
#define CUBLAS_CHECK(call) OSDP_CUDA_STATUS_CHECK_(cublasStatus_t, CUBLAS_STATUS_SUCCESS, osdp_cublas_status_string, call)

/* after a kernel launch: catches bad launch configurations at once, and counts it for the launch bound */
#define CUDA_CHECK_LAUNCH()                \
    do {                                   \
        CUDA_CHECK(cudaGetLastError());    \
        osdp_cuda_launched(1);             \
    } while (0)
/* a cuBLAS product: checked, and counted for the launch bound */
#define CUBLAS_LAUNCH(call)                \
    do {                                   \
        CUBLAS_CHECK(call);                \
        osdp_cuda_launched(1);             \
    } while (0)

#endif

/* Error checks of the CUDA compute backend (src/cuda/), beside the CUDA
 * runtime's (src/util/cuda_status.h): cuBLAS's, and the launch bound's
 * count.  A failed cuBLAS call, like a failed CUDA one, aborts the job
 * through osdp_error_unrecoverable.  Out-of-memory from cudaMalloc is not checked with these: the
 * alloc entry returns NULL so that the runtime can report it. */
#ifndef OSDP_CUDA_CHECK_H
#define OSDP_CUDA_CHECK_H

#include <mpi.h>
#include <stdio.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include "osdp/error.h"
#include "util/cuda_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Defined in cuda_check.cu, below backend_cuda.cu and the kernels' files. */

/* The compute backend's init hands over its compute stream when it succeeds:
 * the launch bound (launch_bound launches between marks) and the host's waits
 * below start from here. */
void osdp_cuda_stream_ready(cudaStream_t stream, double timeout_s, unsigned launch_bound);

/* The stream every compute kernel and cuBLAS call runs on (created by the
 * CUDA compute backend's init); NULL (the legacy default stream) before it.
 * The NCCL backend orders its collectives against it through the backend
 * table's record_event / wait_event (osdp/compute.h). */
cudaStream_t osdp_cuda_compute_stream(void);

/* The host waits for `ev` (recorded on the compute stream), polling, within
 * the communication timeout; past it the job ends with a message naming
 * `what` (a dead peer's collective can hold the stream for ever). */
void osdp_cuda_wait_event_timed(cudaEvent_t ev, const char *what);

/* The host waits, within the timeout, for everything queued on the compute
 * stream (nothing before osdp_cuda_stream_ready). */
void osdp_cuda_wait_compute(const char *what);

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

/* What cuda_check.h declares: the host's side of the compute stream (the
 * launch bound's count, src/util/launch_gate.h, and the host's timed waits
 * for the stream) and cuBLAS's status strings.  A file of its own below
 * backend_cuda.cu, which creates the stream and hands it over with
 * osdp_cuda_stream_ready: the kernels' files (kernels_cuda.cu,
 * attention_tiled.cu, matmul_bf16.cu) count their launches here, so none of
 * them calls the backend that calls them. */
#include "cuda_check.h"

extern "C" {
#include "util/clock.h"
#include "util/launch_gate.h"
}

#include <sched.h>
#include <stdio.h>

namespace {

struct ComputeStream {
    int ready;             /* osdp_cuda_stream_ready was called (the backend's init succeeded) */
    cudaStream_t stream;   /* the backend's compute stream */
    double timeout_s;      /* the communication timeout (osdp_comm_timeout_from_env) for the host's waits */
    osdp_launch_gate gate; /* the launch bound (OSDP_CUDA_LAUNCH_BOUND) */
    cudaEvent_t mark;      /* the gate's mark on the compute stream */
    cudaEvent_t drained;   /* recorded on the compute stream by osdp_cuda_wait_compute */
};
ComputeStream cs;

}  // namespace

extern "C" void osdp_cuda_stream_ready(cudaStream_t stream, double timeout_s, unsigned launch_bound)
{
    CUDA_CHECK(cudaEventCreateWithFlags(&cs.mark, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&cs.drained, cudaEventDisableTiming));
    osdp_launch_gate_init(&cs.gate, launch_bound);
    cs.stream = stream;
    cs.timeout_s = timeout_s;
    cs.ready = 1;
}

extern "C" cudaStream_t osdp_cuda_compute_stream(void) { return cs.ready ? cs.stream : NULL; }

/* The host polls `ev` (recorded on the compute stream) within the
 * communication timeout: the compute stream may wait on the GPU for a
 * collective (the NCCL backend's wait), which a dead or stuck peer never
 * completes.  On time-out the job ends here with a message (the entries that
 * wait return nothing to report it through). */
extern "C" void osdp_cuda_wait_event_timed(cudaEvent_t ev, const char *what)
{
    const double start = osdp_now_seconds();
    for (unsigned long polls = 0;; polls++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        if (cs.timeout_s > 0 && (polls & 255) == 255 && osdp_now_seconds() - start > cs.timeout_s) {
            char why[192];
            snprintf(why, sizeof why,
                     "the compute stream did not finish within %g s (OSDP_COMM_TIMEOUT_S): it waits for a "
                     "collective that a peer rank never completed (it died or hangs)", cs.timeout_s);
            OSDP_CUDA_ABORT_(__FILE__, __LINE__, what, why);
        }
        sched_yield();
    }
}

extern "C" void osdp_cuda_wait_compute(const char *what)
{
    if (!cs.ready) return;
    CUDA_CHECK(cudaEventRecord(cs.drained, cs.stream));
    osdp_cuda_wait_event_timed(cs.drained, what);
    osdp_launch_gate_drained(&cs.gate);
}

extern "C" void osdp_cuda_launched(unsigned n)
{
    if (!cs.ready) return;
    switch (osdp_launch_gate_note(&cs.gate, n)) {
    case OSDP_GATE_GO: return;
    case OSDP_GATE_WAIT_AND_MARK:
        osdp_cuda_wait_event_timed(cs.mark, "the launch bound's wait for the compute stream (OSDP_CUDA_LAUNCH_BOUND)");
        /* fall through */
    case OSDP_GATE_MARK: CUDA_CHECK(cudaEventRecord(cs.mark, cs.stream)); return;
    }
}

extern "C" const char *osdp_cublas_status_string(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED (no cublasCreate?)";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE (bad size or leading dimension)";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "unknown cuBLAS status";
}

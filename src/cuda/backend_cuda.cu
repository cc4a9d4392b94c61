/* The CUDA compute backends: device memory, cuBLAS GEMMs, our kernels
 * (kernels_cuda.cu, matmul_bf16.cu).  Semantics of every entry:
 * include/osdp/compute.h and src/model/kernels_cpu.h.
 *
 * Two tables.  osdp_compute_cuda is fp32 throughout (weights included).
 * osdp_compute_cuda_bf16 reads bf16 working weights: its matrix products are
 * bf16 x bf16 with fp32 accumulation (cublasGemmEx on tensor cores, fp32
 * results), and its layernorm and embedding kernels widen the bf16 weights
 * to fp32 as they read them.  Activations stay fp32 in memory: a product
 * rounds its activation operand (x, or dy in the backward) to bf16 as it
 * runs, in chunks in the scratch (matmul_bf16.cu).  Gradients (dw, db,
 * dwte, ...) are fp32, and the fp32 master weights and AdamW moments are held
 * by the runtime, which makes the bf16 working copy with convert_weights
 * (round to nearest even).  Both tables share every entry that reads no
 * weights but attention's: the bf16 table runs attention's fp32 products on
 * TF32 tensor cores (10-bit mantissas, still finer than bf16's 7), as
 * OSDP_CUDA_TF32=1 does for every fp32 product.  Expected agreement of a bf16 product with the CPU fp32 reference:
 * about 1e-2 relative (of the output's largest entries), from the 8-bit
 * mantissas of the operands; against the CPU bf16 table (same bf16 weights,
 * fp32 activations) the difference comes from rounding x / dy alone.
 *
 * Streams.  All kernels, cuBLAS calls, fill_zero, copy and to_device (from
 * pinned staging buffers: see cuda_to_device) run on one compute stream
 * created by init with cudaStreamCreate, i.e. a *blocking* stream: the
 * synchronous cudaMemcpy of to_host (legacy default stream) is ordered after
 * the work queued on it, so to_host always sees finished results.
 *
 * Memory.  Device memory comes from a stream-ordered pool of our own
 * (cudaMemPoolCreate on the device; cudaMallocFromPoolAsync / cudaFreeAsync on
 * the compute stream), with cudaMemPoolAttrReleaseThreshold = UINT64_MAX: a
 * freed block stays in the pool and is handed out again without going back to
 * the driver, and neither alloc nor free synchronises the device.  (cudaFree
 * waits for the whole device: once per ZDP operator per pass it would stall
 * the host until the prefetched all-gathers had finished, i.e. no overlap.)
 * Freeing is ordered after the work already queued on the compute stream,
 * and a block handed out again is ready for everything queued after the alloc
 * on that stream, for the legacy default stream (it synchronises with the
 * blocking compute stream) and for the NCCL stream (which waits for an event
 * recorded on the compute stream before each collective).  The one rule for
 * callers, the same as for the MPI backend: free a buffer only after the
 * non-blocking collectives on it have been waited for.  The runtime's
 * accounting (src/runtime/memory.c) counts the bytes it asks for; the pool
 * holds at most its peak in use plus fragmentation, and never returns memory
 * to the driver before the process ends, except when an allocation fails: the
 * pool is then trimmed (cudaMemPoolTrimTo) and the allocation tried once
 * more before it reports out of memory.  New blocks are not filled (compute.h
 * promises nothing about the contents; the runtime writes or zeroes them);
 * OSDP_CUDA_POISON=1 fills them with all bits set (NaN as floats) so that a
 * read of memory nobody wrote shows in the losses.  A
 * device without memory-pool support, or OSDP_CUDA_POOL=0 in the environment
 * (e.g. for compute-sanitizer), gets plain cudaMalloc / cudaFree.
 *
 * Outside the accounting, on the device: the CUDA context, cuBLAS's
 * workspace, NCCL's buffers (the GPU device files in input/devices/ leave room
 * for them below the card's size), REDUCE_PARTIALS + 1 doubles for sum / sum_squares, and
 * this backend's scratch for the embedding backward's sort (about 20 bytes
 * per token of the micro-batch, 12 B T for three int arrays plus CUB's radix
 * sort storage, rounded up to 1 MiB; kept and grown on demand: 1 MiB for
 * GPT-2 at 16 x 1024 tokens).  The same scratch holds the bf16 table's
 * staging of x and dy rounded to bf16: at most
 * osdp_cuda::BF16_STAGING_MAX_BYTES = 64 MiB per product (the rows are taken
 * in chunks to stay below it; only a single row wider than 32 Mi elements
 * would exceed it), and only 2 BT (IC + OC) bytes (rounded up to 1 MiB)
 * when that is less.
 * The layernorm backward's partial sums have a buffer of their own (at
 * most 256 KiB, or 8 C bytes for C > 32768).
 * So the scratch is at most max(64 MiB, the sort's need) — 64 MiB for GPT-2
 * at 16 x 1024 tokens with bf16 weights, 1 MiB with fp32 ones.
 *
 * Math mode.  cuBLAS runs with CUBLAS_DEFAULT_MATH: true fp32 products, no
 * TF32 tensor cores, so results match the CPU backend to ~1e-5 relative and
 * the loss curve does not depend on the backend.  Setting the environment
 * variable OSDP_CUDA_TF32=1 before init selects CUBLAS_TF32_TENSOR_OP_MATH
 * instead (about 10 bits of mantissa in the products: expect ~1e-3 relative
 * differences from the CPU; several times faster GEMMs on A100/H100).  The
 * bf16 table's cublasGemmEx calls (bf16 inputs, CUBLAS_COMPUTE_32F) use
 * tensor cores under either mode; the mode changes only the fp32 products
 * (the attention GEMMs of both tables, every product of the fp32 table).
 *
 * Row-major to column-major.  A row-major (m,n) matrix with leading dimension
 * ld is, to cuBLAS, the column-major (n,m) matrix of its transpose.  So a
 * row-major product C = A B is issued as the column-major C^T = B^T A^T:
 * operands swapped, dimensions (n, m, k).  The bf16 products
 * (matmul_bf16.cu) pass the same operands in the same order to cublasGemmEx. */
#include "cuda_check.h"
#include "kernels_cuda.cuh"
#include "attention_switch.h"
#include "lt_epilogues.h"

extern "C" {
#include "config.h"
#include "osdp/compute.h"
#include "util/clock.h"
#include "util/launch_gate.h"
}

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

namespace {

/* pinned host buffers of to_device, used in turn */
const int STAGING_SLOTS = 4;
const size_t STAGING_BYTES = (size_t)4 << 20;
struct Staging {
    void *host;        /* STAGING_BYTES of pinned memory; NULL until first used */
    cudaEvent_t done;  /* recorded after the copy that last read it */
};

/* a device buffer kept between calls and grown on demand (grow) */
struct GrowingBuffer {
    void *ptr;
    size_t bytes;
};

struct CudaState {
    int initialised;
    int device;
    cudaStream_t stream;
    cublasHandle_t cublas;
    cublasLtHandle_t lt;     /* cuBLASLt, made when its epilogues are first selected */
    int lt_epilogues;        /* bias and bias + GELU in cuBLASLt's epilogues (lt_epilogues.h) */
    double *partials;  /* REDUCE_PARTIALS + 1 doubles for sum / sum_squares */
    cublasMath_t math; /* the handle's math mode set at init (OSDP_CUDA_TF32) */
    cudaMemPool_t pool;  /* NULL: plain cudaMalloc / cudaFree */
    GrowingBuffer scratch;      /* backend scratch (embedding backward, bf16 staging) */
    GrowingBuffer ln_partials;  /* layernorm backward's partial sums */
    Staging staging[STAGING_SLOTS];
    int staging_next;
    int poison;          /* OSDP_CUDA_POISON=1: new blocks are all bits set (NaN), to catch reads of unset memory */
    cudaEvent_t timer[2];    /* timer_start / timer_stop */
};
CudaState g;

inline cudaStream_t S() { return g.stream; }

const float kOne = 1.0f, kZero = 0.0f;

/* ------------------------------------------------------------------ setup */

osdp_status cuda_init(int local_rank, int threads)
{
    (void)threads;  /* host threads play no part: the GPU does the work */
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count <= 0) {
        const char *why = err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device found";
        (void)cudaGetLastError();  /* leave no pending error for later calls */
        /* a binary built against a newer CUDA than the node's driver runs
         * (CUDA 13 needs a 580+ driver) fails here: say both versions */
        int driver = 0, runtime = 0;
        cudaDriverGetVersion(&driver);
        cudaRuntimeGetVersion(&runtime);
        (void)cudaGetLastError();
        char versions[160] = "";
        if (driver == 0)
            snprintf(versions, sizeof versions, "; no NVIDIA driver found (osdp_gpt was built with CUDA %d.%d)",
                     runtime / 1000, runtime % 1000 / 10);
        else if (err == cudaErrorInsufficientDriver || driver < runtime)
            snprintf(versions, sizeof versions,
                     "; the driver supports CUDA %d.%d, osdp_gpt was built with CUDA %d.%d: build on the cluster "
                     "with its CUDA module",
                     driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
        else
            snprintf(versions, sizeof versions, " (driver CUDA %d.%d, runtime %d.%d)", driver / 1000,
                     driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
        return osdp_error_set(OSDP_ERR_INPUT, "--backend cuda: no usable GPU on this node (%s)%s", why, versions);
    }
    int device = (local_rank < 0 ? 0 : local_rank) % count;
    if (g.initialised) {
        if (g.device == device) return OSDP_OK;
        return osdp_error_set(OSDP_ERR_INTERNAL, "cuda backend: already initialised on device %d, asked for %d",
                              g.device, device);
    }
    err = cudaSetDevice(device);
    if (err != cudaSuccess)
        return osdp_error_set(OSDP_ERR_INPUT, "--backend cuda: cannot use GPU %d: %s", device,
                              cudaGetErrorString(err));
    CUDA_CHECK(cudaStreamCreate(&g.stream));
    CUBLAS_CHECK(cublasCreate(&g.cublas));
    CUBLAS_CHECK(cublasSetStream(g.cublas, g.stream));
    const char *tf32 = getenv("OSDP_CUDA_TF32");
    int use_tf32 = tf32 && tf32[0] && strcmp(tf32, "0") != 0;
    g.math = use_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    CUBLAS_CHECK(cublasSetMathMode(g.cublas, g.math));
    const char *lt = getenv("OSDP_CUDA_LT_EPILOGUES");
    osdp_cuda_set_lt_epilogues(lt && lt[0] && strcmp(lt, "0") != 0);
    const char *mma = getenv("OSDP_CUDA_ATTENTION_MMA");
    osdp_cuda_set_attention_mma(mma && mma[0] && strcmp(mma, "0") != 0);
    CUDA_CHECK(cudaMalloc((void **)&g.partials, (osdp_cuda::REDUCE_PARTIALS + 1) * sizeof(double)));
    const double timeout_s = osdp_comm_timeout_from_env(local_rank);   /* node-local rank 0 warns of a bad value */
    unsigned bound = OSDP_LAUNCH_BOUND_DEFAULT;
    osdp_status bad_bound = osdp_launch_bound_parse(getenv("OSDP_CUDA_LAUNCH_BOUND"), &bound);
    if (bad_bound != OSDP_OK) return bad_bound;
    CUDA_CHECK(cudaEventCreate(&g.timer[0]));
    CUDA_CHECK(cudaEventCreate(&g.timer[1]));

    /* the stream-ordered pool of the memory entries (see the top of the file) */
    int pools = 0;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess) {
        (void)cudaGetLastError();
        pools = 0;
    }
    const char *poison = getenv("OSDP_CUDA_POISON");
    g.poison = poison && strcmp(poison, "1") == 0;
    const char *pool_env = getenv("OSDP_CUDA_POOL");
    if (pool_env && strcmp(pool_env, "0") == 0) pools = 0;
    g.pool = NULL;
    if (pools) {
        cudaMemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypeNone;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = device;
        if (cudaMemPoolCreate(&g.pool, &props) != cudaSuccess) {
            (void)cudaGetLastError();  /* no pool: fall back to cudaMalloc / cudaFree */
            g.pool = NULL;
        } else {
            uint64_t keep = UINT64_MAX;  /* never give freed blocks back to the driver */
            CUDA_CHECK(cudaMemPoolSetAttribute(g.pool, cudaMemPoolAttrReleaseThreshold, &keep));
        }
    }
    g.device = device;
    g.initialised = 1;
    osdp_cuda_stream_ready(g.stream, timeout_s, bound);
    return OSDP_OK;
}

/* n bytes of device memory, or NULL when the device (or the pool) is out of
 * memory; zero-filled when `zero` (stream-ordered in pool mode), else
 * undefined (all bits set, NaN as floats, under OSDP_CUDA_POISON=1) */
void *raw_alloc(size_t n, int zero)
{
    void *p = NULL;
    if (g.pool) {
        cudaError_t err = cudaMallocFromPoolAsync(&p, n, g.pool, S());
        if (err == cudaErrorMemoryAllocation) {
            /* blocks freed behind work still queued on the stream become
             * reusable without ordering once that work has run */
            (void)cudaGetLastError();
            osdp_cuda_wait_compute("alloc: waiting for the compute stream before retrying");
            err = cudaMallocFromPoolAsync(&p, n, g.pool, S());
        }
        if (err == cudaErrorMemoryAllocation) {
            /* the pool's free blocks may be too small or too scattered for
             * n: give them back to the driver, which can then map n afresh */
            (void)cudaGetLastError();
            CUDA_CHECK(cudaMemPoolTrimTo(g.pool, 0));
            err = cudaMallocFromPoolAsync(&p, n, g.pool, S());
        }
        if (err == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();  /* out of memory is not sticky: clear it and report NULL */
            return NULL;
        }
        CUDA_CHECK(err);
        if (zero || g.poison) CUDA_CHECK(cudaMemsetAsync(p, zero ? 0 : 0xFF, n, S()));
        return p;
    }
    if (cudaMalloc(&p, n) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    if (zero || g.poison) CUDA_CHECK(cudaMemset(p, zero ? 0 : 0xFF, n));
    return p;
}

void raw_free(void *p)
{
    if (!p) return;
    if (g.pool) CUDA_CHECK(cudaFreeAsync(p, S()));
    else CUDA_CHECK(cudaFree(p));
}

void *cuda_alloc(size_t bytes)
{
    if (!g.initialised) {
        /* the pool (or not) is chosen by init: a block from before it could not be freed right */
        fprintf(stderr, "cuda backend: alloc of %zu bytes before init\n", bytes);
        return NULL;
    }
    /* a real, distinct pointer even for 0 bytes (the runtime treats NULL as
     * OOM); contents undefined as compute.h says: the runtime overwrites or
     * zeroes (fill_zero) what it allocates, so no fill here */
    return raw_alloc(bytes ? bytes : 256, 0);
}

void cuda_free(void *p) { raw_free(p); }

/* At least `want` bytes of the kept buffer b, for the kernels queued on the
 * compute stream from now on (the previous, smaller block is freed in stream
 * order behind the work that used it).  Not counted by the runtime's
 * accounting: see the top of the file.  Out of device memory ends the job,
 * naming `what`. */
void *grow(GrowingBuffer *b, size_t want, const char *what)
{
    if (want <= b->bytes) return b->ptr;
    raw_free(b->ptr);
    b->ptr = raw_alloc(want, 0);
    b->bytes = b->ptr ? want : 0;
    if (!b->ptr) {
        char why[96];
        snprintf(why, sizeof why, "out of device memory for %zu bytes", want);
        OSDP_CUDA_ABORT_(__FILE__, __LINE__, what, why);
    }
    return b->ptr;
}

/* the backend scratch, in whole MiB */
void *backend_scratch(size_t bytes)
{
    const size_t MiB = (size_t)1 << 20;
    return grow(&g.scratch, (bytes + MiB - 1) / MiB * MiB,
                "backend scratch: embedding sort or bf16 staging (outside --mem-limit accounting)");
}

/* The layernorm backward's partial sums (osdp_cuda::layernorm_dwdb_chunks):
 * a buffer of its own, since a bf16 product may hold the backend scratch;
 * 2 x chunks x C floats, at most max(2 x 32768, 2 C) (260 KiB for GPT-2's
 * C = 768), outside the runtime's accounting like the scratch. */
float *layernorm_partials(int BT, int C)
{
    const size_t bytes = 2 * (size_t)osdp_cuda::layernorm_dwdb_chunks(BT, C) * (size_t)C * sizeof(float);
    return (float *)grow(&g.ln_partials, bytes, "layernorm backward's partial sums");
}

void cuda_fill_zero(void *p, size_t bytes)
{
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, S()));
}

void cuda_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, S()));
}

/* Host-to-device copies go through pinned staging buffers, asynchronously on
 * the compute stream: cudaMemcpy from pageable memory on the legacy stream
 * waits for all the work queued on the compute stream, i.e. drains the GPU
 * at every micro-step's batch.  The source is copied into the next of
 * STAGING_SLOTS pinned buffers of STAGING_BYTES (in pieces when larger), so
 * the caller may reuse it at once; a buffer is reused once the copy that
 * last read it has completed (its event: the compute stream, which no peer
 * can hold up). */
void cuda_to_device(void *dst, const void *host_src, size_t bytes)
{
    const char *from = (const char *)host_src;
    char *to = (char *)dst;
    while (bytes) {
        Staging *st = &g.staging[g.staging_next];
        g.staging_next = (g.staging_next + 1) % STAGING_SLOTS;
        if (!st->host) {
            CUDA_CHECK(cudaMallocHost(&st->host, STAGING_BYTES));
            CUDA_CHECK(cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming));
        } else {
            osdp_cuda_wait_event_timed(st->done, "to_device: waiting for a staging buffer");
        }
        const size_t n = bytes < STAGING_BYTES ? bytes : STAGING_BYTES;
        memcpy(st->host, from, n);
        CUDA_CHECK(cudaMemcpyAsync(to, st->host, n, cudaMemcpyHostToDevice, S()));
        CUDA_CHECK(cudaEventRecord(st->done, S()));
        from += n;
        to += n;
        bytes -= n;
    }
}

void cuda_to_host(void *host_dst, const void *src, size_t bytes)
{
    if (!bytes) return;
    osdp_cuda_wait_compute("to_host: waiting for the compute stream");   /* then the copy cannot hang */
    CUDA_CHECK(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
}

/* The compute stream only (cudaDeviceSynchronize would also wait for the
 * NCCL stream's collectives, prefetches included), polled within the
 * communication timeout. */
void cuda_synchronize(void) { osdp_cuda_wait_compute("synchronize"); }

/* ----------------------------------------------------------------- matmul */

void cuda_matmul_forward_strided(float *y, const float *x, int ldx, const void *w_,
                                 const void *b_, int BT, int IC, int OC, int accumulate)
{
    const float *w = (const float *)w_, *b = (const float *)b_;
    /* as on the CPU: lay the bias into y first, then y += x @ w with beta = 1 */
    const float *beta = accumulate ? &kOne : &kZero;
    if (b) {
        osdp_cuda::bias_rows(y, b, BT, OC, accumulate, S());
        beta = &kOne;
    }
    if (BT <= 0 || OC <= 0) return;
    /* y^T (OC,BT) = w^T (OC,IC) x^T (IC,BT) */
    CUBLAS_LAUNCH(cublasSgemm(g.cublas, CUBLAS_OP_N, CUBLAS_OP_N, OC, BT, IC, &kOne, w, OC, x, ldx,
                             beta, y, OC));
}

void cuda_matmul_forward(float *y, const float *x, const void *w, const void *b, int BT, int IC,
                         int OC, int accumulate)
{
    cuda_matmul_forward_strided(y, x, IC, w, b, BT, IC, OC, accumulate);
}

/* A linear's backward products, for either weight layout: w stored (IC,OC)
 * (out_in 0: to cuBLAS the column-major (OC,IC) matrix) or (OC,IC) (out_in 1). */
static void linear_backward_products(float *dx, int lddx, float *dw, const float *dy, const float *x, int ldx,
                                     const float *w, int BT, int IC, int OC, int dx_accumulate, int out_in)
{
    /* dx (BT,IC) = dy @ w^T (or dy @ w)  ->  dx^T (IC,BT) = op(w) dy^T (OC,BT) */
    if (dx)
        CUBLAS_LAUNCH(cublasSgemm(g.cublas, out_in ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, IC, BT, OC, &kOne, w,
                                 out_in ? IC : OC, dy, OC, dx_accumulate ? &kOne : &kZero, dx, lddx));
    if (out_in)   /* dw (OC,IC) += dy^T @ x  ->  dw^T (IC,OC) += x^T (IC,BT) dy (BT,OC) */
        CUBLAS_LAUNCH(cublasSgemm(g.cublas, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, BT, &kOne, x, ldx, dy, OC, &kOne, dw, IC));
    else          /* dw (IC,OC) += x^T @ dy  ->  dw^T (OC,IC) += dy^T (OC,BT) x (BT,IC) */
        CUBLAS_LAUNCH(cublasSgemm(g.cublas, CUBLAS_OP_N, CUBLAS_OP_T, OC, IC, BT, &kOne, dy, OC, x, ldx, &kOne, dw, OC));
}

void cuda_matmul_backward_strided(float *dx, int lddx, float *dw, float *db, const float *dy,
                                  const float *x, int ldx, const void *w, int BT, int IC, int OC,
                                  int dx_accumulate)
{
    if (BT <= 0 || IC <= 0 || OC <= 0) return;
    linear_backward_products(dx, lddx, dw, dy, x, ldx, (const float *)w, BT, IC, OC, dx_accumulate, 0);
    if (db) osdp_cuda::column_sums_add(db, dy, BT, OC, S());
}

void cuda_matmul_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                          const void *w, int BT, int IC, int OC, int dx_accumulate)
{
    cuda_matmul_backward_strided(dx, IC, dw, db, dy, x, IC, w, BT, IC, OC, dx_accumulate);
}

/* w stored (OC,IC): to cuBLAS the column-major (IC,OC) matrix w^T */
void cuda_matmul_forward_out_in(float *y, const float *x, const void *w_, int BT, int IC, int OC,
                                int accumulate)
{
    const float *w = (const float *)w_;
    if (BT <= 0 || OC <= 0) return;
    /* y^T (OC,BT) = w (OC,IC) x^T (IC,BT) */
    CUBLAS_LAUNCH(cublasSgemm(g.cublas, CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, IC, &kOne, w, IC, x, IC,
                             accumulate ? &kOne : &kZero, y, OC));
}

void cuda_matmul_backward_out_in(float *dx, float *dw, const float *dy, const float *x,
                                 const void *w, int BT, int IC, int OC, int dx_accumulate)
{
    if (BT <= 0 || IC <= 0 || OC <= 0) return;
    linear_backward_products(dx, IC, dw, dy, x, IC, (const float *)w, BT, IC, OC, dx_accumulate, 1);
}

/* -------------------------------------------------------------- layernorm */

void cuda_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const void *w,
                            const void *b, int BT, int C)
{
    osdp_cuda::layernorm_forward(y, mean, rstd, x, (const float *)w, (const float *)b, BT, C,
                                 S());
}

void cuda_residual_layernorm_forward(float *res, float *y, float *mean, float *rstd, const float *a,
                                     const float *b, const void *w, const void *bias, int BT, int C)
{
    osdp_cuda::residual_layernorm_forward(res, y, mean, rstd, a, b, (const float *)w, (const float *)bias, BT, C,
                                          S());
}

void cuda_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                             const void *w, const float *mean, const float *rstd, int BT, int C)
{
    osdp_cuda::layernorm_backward(dx, dw, db, dy, x, (const float *)w, mean, rstd, BT, C,
                                  layernorm_partials(BT, C), S());
}

void cuda_gelu_forward(float *y, const float *x, size_t n) { osdp_cuda::gelu_forward(y, x, n, S()); }

void cuda_gelu_backward(float *dx, const float *x, const float *dy, size_t n)
{
    osdp_cuda::gelu_backward(dx, x, dy, n, S());
}

/* -------------------------------------------------------------- attention */

/* Per batch element b, one strided-batched GEMM over the NH heads: head h of
 * q/k/v starts HS columns after head h-1 (rows 3C apart), head h of att
 * T*T floats after head h-1, head h of out HS columns after head h-1.  The
 * full T x T products are computed; the softmax writes exact zeros above the
 * diagonal, so the products with att are the causal ones. */
void cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    if (B <= 0 || T <= 0 || NH <= 0) return;
    const int HS = C / NH, ld = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
    const long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * ld, *k = q + C;
        float *a = att + (size_t)b * NH * TT;
        /* pre (T,T) = scale * q k^T  ->  pre^T = k (col-major T x HS, op T) q^T */
        CUBLAS_LAUNCH(cublasSgemmStridedBatched(g.cublas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, &scale,
                                               k, ld, HS, q, ld, HS, &kZero, a, T, TT, NH));
    }
    osdp_cuda::causal_softmax_forward(att, (long)B * NH * T, T, S());
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * ld + 2 * C;
        const float *a = att + (size_t)b * NH * TT;
        float *o = out + (size_t)b * T * C;
        /* out (T,HS) = att v  ->  out^T (HS,T) = v^T att^T */
        CUBLAS_LAUNCH(cublasSgemmStridedBatched(g.cublas, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, &kOne,
                                               v, ld, HS, a, T, TT, &kZero, o, C, HS, NH));
    }
}

void cuda_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                             const float *att, int B, int T, int C, int NH)
{
    if (B <= 0 || T <= 0 || NH <= 0) return;
    const int HS = C / NH, ld = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
    const long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * ld + 2 * C;
        const float *a = att + (size_t)b * NH * TT;
        const float *d = dout + (size_t)b * T * C;
        float *ds = scratch + (size_t)b * NH * TT;
        float *dv = dqkv + (size_t)b * T * ld + 2 * C;
        /* datt (T,T) = dout v^T  ->  datt^T = v (op T) dout^T */
        CUBLAS_LAUNCH(cublasSgemmStridedBatched(g.cublas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, &kOne,
                                               v, ld, HS, d, C, HS, &kZero, ds, T, TT, NH));
        /* dv (T,HS) = att^T dout  ->  dv^T = dout^T att (op T) */
        CUBLAS_LAUNCH(cublasSgemmStridedBatched(g.cublas, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, &kOne,
                                               d, C, HS, a, T, TT, &kZero, dv, ld, HS, NH));
    }
    /* dpre = scale * att * (datt - rowsum(att * datt)), zeros above the diagonal */
    osdp_cuda::causal_softmax_backward(scratch, att, (long)B * NH * T, T, scale, S());
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * ld, *k = q + C;
        const float *ds = scratch + (size_t)b * NH * TT;
        float *dq = dqkv + (size_t)b * T * ld, *dk = dq + C;
        /* dq (T,HS) = dpre k  ->  dq^T = k^T dpre^T */
        CUBLAS_LAUNCH(cublasSgemmStridedBatched(g.cublas, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, &kOne,
                                               k, ld, HS, ds, T, TT, &kZero, dq, ld, HS, NH));
        /* dk (T,HS) = dpre^T q  ->  dk^T = q^T dpre (op T) */
        CUBLAS_LAUNCH(cublasSgemmStridedBatched(g.cublas, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, &kOne,
                                               q, ld, HS, ds, T, TT, &kZero, dk, ld, HS, NH));
    }
}

/* The bf16 table's attention: the same products on TF32 tensor cores (the
 * handle's mode is host state, switched around the calls; one table serves a
 * process, and the handle's stream orders the work) */
void cuda_bf16_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    CUBLAS_CHECK(cublasSetMathMode(g.cublas, CUBLAS_TF32_TENSOR_OP_MATH));
    cuda_attention_forward(out, att, qkv, B, T, C, NH);
    CUBLAS_CHECK(cublasSetMathMode(g.cublas, g.math));
}

void cuda_bf16_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                  const float *att, int B, int T, int C, int NH)
{
    CUBLAS_CHECK(cublasSetMathMode(g.cublas, CUBLAS_TF32_TENSOR_OP_MATH));
    cuda_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    CUBLAS_CHECK(cublasSetMathMode(g.cublas, g.math));
}

/* The tiled attention (--attention tiled, attention_tiled.cu): fp32 tiles on
 * the fp32 table, bf16 tiles (fp32 arithmetic) on the bf16 table */
void cuda_attention_forward_tiled(float *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    osdp_cuda::attention_tiled_forward<float>(out, lse, qkv, B, T, C, NH, S());
}

void cuda_attention_backward_tiled(float *dqkv, float *rowdot, const float *dout, const float *out,
                                   const float *qkv, const float *lse, int B, int T, int C, int NH)
{
    osdp_cuda::attention_tiled_backward<float>(dqkv, rowdot, dout, out, qkv, lse, B, T, C, NH, S());
}

void cuda_bf16_attention_forward_tiled(float *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    osdp_cuda::attention_tiled_forward<__nv_bfloat16>(out, lse, qkv, B, T, C, NH, S());
}

void cuda_bf16_attention_backward_tiled(float *dqkv, float *rowdot, const float *dout, const float *out,
                                        const float *qkv, const float *lse, int B, int T, int C, int NH)
{
    osdp_cuda::attention_tiled_backward<__nv_bfloat16>(dqkv, rowdot, dout, out, qkv, lse, B, T, C, NH, S());
}

/* ------------------------------------------------------ embedding, losses */

void cuda_embedding_forward(float *x, const int *tokens, const void *wte, const void *wpe, int B,
                            int T, int C)
{
    osdp_cuda::embedding_forward(x, tokens, (const float *)wte, (const float *)wpe, B, T, C, S());
}


void cuda_embedding_forward_range(float *x, const int *tokens, const void *wte, const void *wpe,
                                  int B, int T, int C, int vocab_lo, int vocab_n)
{
    osdp_cuda::embedding_forward_range(x, tokens, (const float *)wte, (const float *)wpe, B, T, C,
                                       vocab_lo, vocab_n, S());
}

void cuda_embedding_backward_range(float *dwte, float *dwpe, const float *dx, const int *tokens,
                                   int B, int T, int C, int vocab_lo, int vocab_n)
{
    if (B <= 0 || T <= 0 || C <= 0) return;
    const size_t need = osdp_cuda::embedding_backward_scratch_bytes(B, T);
    void *scratch = backend_scratch(need);
    osdp_cuda::embedding_backward_range(dwte, dwpe, dx, tokens, B, T, C, vocab_lo, vocab_n, scratch,
                                        g.scratch.bytes, S());
}

void cuda_crossentropy_stats(float *stats, const float *logits, const int *targets, int BT, int V,
                             int valid, int vocab_lo)
{
    osdp_cuda::crossentropy_stats(stats, logits, targets, BT, V, valid, vocab_lo, S());
}

void cuda_crossentropy_finish(float *losses, float *probs, const float *group_stats, int BT, int V,
                              int valid, int group_size)
{
    osdp_cuda::crossentropy_finish(losses, probs, group_stats, BT, V, valid, group_size, S());
}

void cuda_crossentropy_backward_range(float *dlogits, const float *probs, const int *targets,
                                      float scale, int BT, int V, int vocab_lo)
{
    osdp_cuda::crossentropy_backward_range(dlogits, probs, targets, scale, BT, V, vocab_lo, S());
}

/* the fused head (--head fused): gpt_ops.c chunks the logits and runs the
 * head's products through the matmul entries (cuBLAS) */
void cuda_crossentropy_lse(float *losses, float *lse, const float *group_stats, int BT, int group_size)
{
    osdp_cuda::crossentropy_lse(losses, lse, group_stats, BT, group_size, S());
}

void cuda_crossentropy_backward_lse(float *dlogits, const float *lse, const int *targets, float scale, int BT,
                                    int V, int valid, int vocab_lo)
{
    osdp_cuda::crossentropy_backward_lse(dlogits, lse, targets, scale, BT, V, valid, vocab_lo, S());
}

void cuda_embedding_backward(float *dwte, float *dwpe, const float *dx, const int *tokens, int B,
                             int T, int C)
{
    cuda_embedding_backward_range(dwte, dwpe, dx, tokens, B, T, C, 0, INT_MAX);
}

void cuda_crossentropy_forward(float *losses, float *probs, const int *targets, int BT, int V)
{
    osdp_cuda::crossentropy_forward(losses, probs, targets, BT, V, S());
}

void cuda_crossentropy_backward(float *dlogits, const float *probs, const int *targets, float scale,
                                int BT, int V)
{
    osdp_cuda::crossentropy_backward(dlogits, probs, targets, scale, BT, V, S());
}

void cuda_residual_forward(float *out, const float *a, const float *b, size_t n)
{
    osdp_cuda::residual_forward(out, a, b, n, S());
}

void cuda_vector_accumulate(float *y, const float *x, size_t n)
{
    osdp_cuda::vector_accumulate(y, x, n, S());
}

/* ---------------------------------------------- bf16 weights (the bf16 table) */

typedef __nv_bfloat16 bf16;

void cuda_bf16_convert_weights(void *dst, const float *src, size_t n)
{
    osdp_cuda::convert_to_bf16((bf16 *)dst, src, n, S());
}

void cuda_bf16_residual_round(float *x, size_t n)
{
    osdp_cuda::round_to_bf16_values(x, n, S());
}

void cuda_bf16_residual_widen(float *dst, const void *src, size_t n)
{
    osdp_cuda::widen_from_bf16(dst, (const bf16 *)src, n, S());
}

osdp_cuda::GemmContext gemm_context()
{
    return {g.cublas, g.stream, backend_scratch, g.lt_epilogues ? g.lt : nullptr};
}

void cuda_bf16_matmul_forward_gelu(float *y, float *pre, const float *x, const void *w, const void *b, int BT,
                                   int IC, int OC)
{
    osdp_cuda::matmul_bf16_forward_gelu(gemm_context(), y, pre, x, (const bf16 *)w, (const bf16 *)b, BT, IC, OC);
}

void cuda_bf16_matmul_backward_dgelu(float *dpre, float *dw, float *db, float *db_pre, const float *dy,
                                     const float *x, const float *pre, const void *w, int BT, int IC, int OC)
{
    osdp_cuda::matmul_bf16_backward_dgelu(gemm_context(), dpre, dw, db, db_pre, dy, x, pre, (const bf16 *)w, BT, IC,
                                          OC);
}

void cuda_bf16_matmul_forward_strided(float *y, const float *x, int ldx, const void *w,
                                      const void *b, int BT, int IC, int OC, int accumulate)
{
    osdp_cuda::matmul_bf16_forward(gemm_context(), y, x, ldx, (const bf16 *)w, (const bf16 *)b, BT,
                                   IC, OC, accumulate);
}

void cuda_bf16_matmul_forward(float *y, const float *x, const void *w, const void *b, int BT,
                              int IC, int OC, int accumulate)
{
    cuda_bf16_matmul_forward_strided(y, x, IC, w, b, BT, IC, OC, accumulate);
}

void cuda_bf16_matmul_backward_strided(float *dx, int lddx, float *dw, float *db,
                                       const float *dy, const float *x, int ldx, const void *w,
                                       int BT, int IC, int OC, int dx_accumulate)
{
    osdp_cuda::matmul_bf16_backward(gemm_context(), dx, lddx, dw, db, dy, x, ldx, (const bf16 *)w,
                                    BT, IC, OC, dx_accumulate);
}

void cuda_bf16_matmul_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                               const void *w, int BT, int IC, int OC, int dx_accumulate)
{
    cuda_bf16_matmul_backward_strided(dx, IC, dw, db, dy, x, IC, w, BT, IC, OC, dx_accumulate);
}

void cuda_bf16_matmul_forward_bf16_x(float *y, const void *x, const void *w, const void *b, int BT, int IC,
                                     int OC, int accumulate)
{
    osdp_cuda::matmul_bf16_forward_direct(gemm_context(), y, (const bf16 *)x, (const bf16 *)w, (const bf16 *)b, BT,
                                          IC, OC, accumulate);
}

void cuda_bf16_matmul_backward_bf16_x(float *dx, float *dw, float *db, const float *dy, const void *x,
                                      const void *w, int BT, int IC, int OC, int dx_accumulate)
{
    osdp_cuda::matmul_bf16_backward_direct(gemm_context(), dx, dw, db, dy, (const bf16 *)x, (const bf16 *)w, BT,
                                           IC, OC, dx_accumulate);
}

void cuda_bf16_matmul_forward_out_in(float *y, const float *x, const void *w, int BT, int IC, int OC,
                                     int accumulate)
{
    osdp_cuda::matmul_bf16_forward_out_in(gemm_context(), y, x, (const bf16 *)w, BT, IC, OC, accumulate);
}

void cuda_bf16_matmul_backward_out_in(float *dx, float *dw, const float *dy, const float *x,
                                      const void *w, int BT, int IC, int OC, int dx_accumulate)
{
    osdp_cuda::matmul_bf16_backward_out_in(gemm_context(), dx, dw, dy, x, (const bf16 *)w, BT, IC, OC,
                                           dx_accumulate);
}

void cuda_bf16_layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                                 const void *w, const void *b, int BT, int C)
{
    osdp_cuda::layernorm_forward(y, mean, rstd, x, (const bf16 *)w, (const bf16 *)b, BT, C, S());
}

void cuda_bf16_head_backward_lse(float *dln, float *dw, float *logits, const float *lse, const int *targets,
                                 float scale, const float *ln, const void *w, int rows, int d, int V, int valid,
                                 int vocab_lo, int out_in)
{
    osdp_cuda::head_bf16_backward_lse(gemm_context(), dln, dw, logits, lse, targets, scale, ln, (const bf16 *)w, rows,
                                      d, V, valid, vocab_lo, out_in);
}

void cuda_bf16_residual_layernorm_forward(float *res, float *y, float *mean, float *rstd, const float *a,
                                          const float *b, const void *w, const void *bias, int BT, int C)
{
    osdp_cuda::residual_layernorm_forward(res, y, mean, rstd, a, b, (const bf16 *)w, (const bf16 *)bias, BT, C,
                                          S());
}

/* the stored bf16 activations' producers (--activation-dtype bf16, osdp/compute.h): the same kernels with a bf16
 * output (and the GELU's a bf16 input), rounded as they store; counted for the tests (lt_epilogues.h) */
static long bf16_stored_outputs = 0;
extern "C" long osdp_cuda_bf16_stored_outputs(void) { return bf16_stored_outputs; }

void cuda_bf16_layernorm_forward_bf16_y(void *y, float *mean, float *rstd, const float *x, const void *w,
                                        const void *b, int BT, int C)
{
    bf16_stored_outputs++;
    osdp_cuda::layernorm_forward((bf16 *)y, mean, rstd, x, (const bf16 *)w, (const bf16 *)b, BT, C, S());
}

void cuda_bf16_residual_layernorm_forward_bf16_y(float *res, void *y, float *mean, float *rstd, const float *a,
                                                 const float *b, const void *w, const void *bias, int BT, int C)
{
    bf16_stored_outputs++;
    osdp_cuda::residual_layernorm_forward(res, (bf16 *)y, mean, rstd, a, b, (const bf16 *)w, (const bf16 *)bias, BT,
                                          C, S());
}

void cuda_bf16_gelu_forward_bf16(void *y, const void *x, size_t n)
{
    bf16_stored_outputs++;
    osdp_cuda::gelu_forward((bf16 *)y, (const bf16 *)x, n, S());
}

void cuda_bf16_gelu_backward_bf16_x(float *dx, const void *x, const float *dy, size_t n)
{
    bf16_stored_outputs++;
    osdp_cuda::gelu_backward(dx, (const bf16 *)x, dy, n, S());
}

int cuda_bf16_matmul_forward_gelu_bf16(void *y, void *pre, const void *x, const void *w, const void *b, int BT,
                                       int IC, int OC)
{
    return osdp_cuda::matmul_bf16_forward_gelu_bf16(gemm_context(), (bf16 *)y, (bf16 *)pre, (const bf16 *)x,
                                                    (const bf16 *)w, (const bf16 *)b, BT, IC, OC);
}

void cuda_bf16_attention_forward_tiled_bf16_out(void *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    bf16_stored_outputs++;
    osdp_cuda::attention_tiled_forward<bf16>((bf16 *)out, lse, qkv, B, T, C, NH, S());
}

void cuda_bf16_layernorm_backward(float *dx, float *dw, float *db, const float *dy,
                                  const float *x, const void *w, const float *mean,
                                  const float *rstd, int BT, int C)
{
    osdp_cuda::layernorm_backward(dx, dw, db, dy, x, (const bf16 *)w, mean, rstd, BT, C,
                                  layernorm_partials(BT, C), S());
}

void cuda_bf16_embedding_forward(float *x, const int *tokens, const void *wte, const void *wpe,
                                 int B, int T, int C)
{
    osdp_cuda::embedding_forward(x, tokens, (const bf16 *)wte, (const bf16 *)wpe, B, T, C, S());
}

void cuda_bf16_embedding_forward_range(float *x, const int *tokens, const void *wte,
                                       const void *wpe, int B, int T, int C, int vocab_lo,
                                       int vocab_n)
{
    osdp_cuda::embedding_forward_range(x, tokens, (const bf16 *)wte, (const bf16 *)wpe, B, T, C,
                                       vocab_lo, vocab_n, S());
}

/* ------------------------------------------------------ sums, optimizer */

double reduce_to_host(const float *x, size_t n, int squares)
{
    if (!n) return 0.0;
    osdp_cuda::reduce_sum(x, n, squares, g.partials, NULL, S());
    double r = 0.0;
    osdp_cuda_wait_compute("sum: reading the result back");   /* timed; then the copy cannot hang */
    CUDA_CHECK(cudaMemcpy(&r, g.partials + osdp_cuda::REDUCE_PARTIALS, sizeof r, cudaMemcpyDeviceToHost));
    return r;
}

double cuda_sum(const float *x, size_t n) { return reduce_to_host(x, n, 0); }
double cuda_sum_squares(const float *x, size_t n) { return reduce_to_host(x, n, 1); }

void cuda_accumulate_sum(double *acc, const float *x, size_t n, int squares)
{
    if (n) osdp_cuda::reduce_sum(x, n, squares, g.partials, acc, S());
}

void cuda_adamw(float *w, const float *g_, float *m, float *v, size_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, float grad_scale, long t)
{
    /* bias corrections on the host, in float, exactly as the CPU backend */
    const float c1 = 1.0f - powf(beta1, (float)t);
    const float c2 = 1.0f - powf(beta2, (float)t);
    osdp_cuda::adamw(w, g_, m, v, n, lr, beta1, beta2, c1, c2, eps, weight_decay, grad_scale, S());
}

}  // namespace

/* ------------------------------------------- memory, the device's clock */

osdp_status cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return osdp_error_set(OSDP_ERR_INTERNAL, "cudaMemGetInfo: %s", cudaGetErrorString(e));
    }
    return OSDP_OK;
}

void cuda_timer_start(void) { CUDA_CHECK(cudaEventRecord(g.timer[0], S())); }

double cuda_timer_stop(void)
{
    CUDA_CHECK(cudaEventRecord(g.timer[1], S()));
    osdp_cuda_wait_event_timed(g.timer[1], "timer_stop's wait for the compute stream");
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, g.timer[0], g.timer[1]));
    return ms / 1e3;
}

/* ------------------------------------------------------ shared with NCCL */

extern "C" void osdp_cuda_set_lt_epilogues(int on)
{
    if (on && !g.lt) CUBLAS_CHECK(cublasLtCreate(&g.lt));
    g.lt_epilogues = on;
}

static void cuda_record_event(void *event) { CUDA_CHECK(cudaEventRecord((cudaEvent_t)event, osdp_cuda_compute_stream())); }
static void cuda_wait_event(void *event) { CUDA_CHECK(cudaStreamWaitEvent(osdp_cuda_compute_stream(), (cudaEvent_t)event, 0)); }

/* ----------------------------------------------------------------- tables */

/* Fields in declaration order (C++17 accepts in-order designators as a GNU
 * extension; a field added to compute.h without an entry here is left NULL
 * and must be filled).  The bf16 table differs from the fp32 one in
 * weight_dtype, convert_weights, the entries that read weights and those of
 * the bf16 residual stream and the stored bf16 activations. */
extern "C" const osdp_compute_backend osdp_compute_cuda = {
    .name = "cuda",
    .weight_dtype = OSDP_FLOAT32,
    .pad_quantum = 64,   /* 256-byte aligned fp32 chunks per rank in NCCL collectives */
    .vocab_quantum = 128, /* the head's GEMMs on multiples of 128 columns (llm.c: 50257 -> 50304) */
    .init = cuda_init,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .fill_zero = cuda_fill_zero,
    .copy = cuda_copy,
    .to_device = cuda_to_device,
    .to_host = cuda_to_host,
    .synchronize = cuda_synchronize,
    .record_event = cuda_record_event,
    .wait_event = cuda_wait_event,
    .convert_weights = NULL,
    .matmul_forward = cuda_matmul_forward,
    .matmul_backward = cuda_matmul_backward,
    .matmul_forward_strided = cuda_matmul_forward_strided,
    .matmul_backward_strided = cuda_matmul_backward_strided,
    .matmul_forward_out_in = cuda_matmul_forward_out_in,
    .matmul_backward_out_in = cuda_matmul_backward_out_in,
    .layernorm_forward = cuda_layernorm_forward,
    .residual_layernorm_forward = cuda_residual_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .attention_forward_tiled = cuda_attention_forward_tiled,
    .attention_backward_tiled = cuda_attention_backward_tiled,
    .embedding_forward = cuda_embedding_forward,
    .embedding_backward = cuda_embedding_backward,
    .crossentropy_forward = cuda_crossentropy_forward,
    .crossentropy_backward = cuda_crossentropy_backward,
    .embedding_forward_range = cuda_embedding_forward_range,
    .embedding_backward_range = cuda_embedding_backward_range,
    .crossentropy_stats = cuda_crossentropy_stats,
    .crossentropy_finish = cuda_crossentropy_finish,
    .crossentropy_backward_range = cuda_crossentropy_backward_range,
    .crossentropy_lse = cuda_crossentropy_lse,
    .crossentropy_backward_lse = cuda_crossentropy_backward_lse,
    .matmul_forward_gelu = NULL,   /* the fp32 table: cuBLAS's product, then the GELU kernel */
    .head_backward_lse = NULL,   /* the fp32 table: the kernel and the two products, as the CPU's */
    .matmul_backward_dgelu = NULL,   /* the fp32 table: cuBLAS's products, then the GELU's gradient kernel */
    .residual_forward = cuda_residual_forward,
    .vector_accumulate = cuda_vector_accumulate,
    .sum = cuda_sum,
    .sum_squares = cuda_sum_squares,
    .accumulate_sum = cuda_accumulate_sum,
    .adamw = cuda_adamw,
    .mem_info = cuda_mem_info,
    .timer_start = cuda_timer_start,
    .timer_stop = cuda_timer_stop,
};

/* the fp32 table with the entries that read weights, attention (naive and tiled) and the fused head's backward
 * replaced, and the bf16 residual stream's and stored bf16 activations' entries added (a copy made at load
 * time: C++ has no designators out of declaration order) */
static osdp_compute_backend make_bf16_table()
{
    osdp_compute_backend t = osdp_compute_cuda;
    t.weight_dtype = OSDP_BFLOAT16;
    t.convert_weights = cuda_bf16_convert_weights;
    t.residual_round = cuda_bf16_residual_round;
    t.residual_widen = cuda_bf16_residual_widen;
    t.matmul_forward = cuda_bf16_matmul_forward;
    t.matmul_backward = cuda_bf16_matmul_backward;
    t.matmul_forward_strided = cuda_bf16_matmul_forward_strided;
    t.matmul_backward_strided = cuda_bf16_matmul_backward_strided;
    t.matmul_forward_out_in = cuda_bf16_matmul_forward_out_in;
    t.matmul_backward_out_in = cuda_bf16_matmul_backward_out_in;
    t.matmul_forward_bf16_x = cuda_bf16_matmul_forward_bf16_x;
    t.matmul_backward_bf16_x = cuda_bf16_matmul_backward_bf16_x;
    t.layernorm_forward = cuda_bf16_layernorm_forward;
    t.residual_layernorm_forward = cuda_bf16_residual_layernorm_forward;
    t.head_backward_lse = cuda_bf16_head_backward_lse;
    t.matmul_forward_gelu = cuda_bf16_matmul_forward_gelu;
    t.matmul_backward_dgelu = cuda_bf16_matmul_backward_dgelu;
    t.layernorm_backward = cuda_bf16_layernorm_backward;
    t.embedding_forward = cuda_bf16_embedding_forward;
    t.embedding_forward_range = cuda_bf16_embedding_forward_range;
    t.attention_forward = cuda_bf16_attention_forward;
    t.attention_backward = cuda_bf16_attention_backward;
    t.attention_forward_tiled = cuda_bf16_attention_forward_tiled;
    t.attention_backward_tiled = cuda_bf16_attention_backward_tiled;
    t.layernorm_forward_bf16_y = cuda_bf16_layernorm_forward_bf16_y;
    t.residual_layernorm_forward_bf16_y = cuda_bf16_residual_layernorm_forward_bf16_y;
    t.gelu_forward_bf16 = cuda_bf16_gelu_forward_bf16;
    t.gelu_backward_bf16_x = cuda_bf16_gelu_backward_bf16_x;
    t.attention_forward_tiled_bf16_out = cuda_bf16_attention_forward_tiled_bf16_out;
    t.matmul_forward_gelu_bf16 = cuda_bf16_matmul_forward_gelu_bf16;
    return t;
}

extern "C" const osdp_compute_backend osdp_compute_cuda_bf16 = make_bf16_table();

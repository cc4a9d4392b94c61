/* The NCCL communication backend (GPUs).
 *
 * Set-up: the communicator is bootstrapped over MPI (rank 0 makes the NCCL
 * unique id, MPI_Bcast hands it out, every rank calls ncclCommInitRank), and a
 * duplicate of the MPI communicator is kept for the barrier and for host
 * buffers (below).
 *
 * Buffers.  NCCL moves device memory only.  The runtime must pass device
 * pointers (memory from the CUDA compute backend's alloc) to every
 * collective it wants on NCCL.  So that the existing host-side calls keep
 * working — the 2-double loss/norm all-reduce in runtime.c and the host
 * buffers of dump_weights in train.c — a collective whose buffers are all host
 * memory falls back to the blocking MPI collective on the duplicated
 * communicator (and completes before returning: its request is left empty).
 * Mixing a host and a device buffer in one call is an error.  Every rank must
 * pass the same kind of memory to the same call.
 *
 * Ordering.  Collectives run on a stream of their own, created non-blocking so
 * that the synchronous cudaMemcpy/cudaMemset of the compute backend (legacy
 * default stream) are never held up behind an in-flight prefetch.  Before
 * each collective an event is recorded on the compute stream and the
 * collective stream waits for it: everything queued before the call (the
 * kernels that produced the input, and whatever the legacy stream ran before
 * them) is finished before NCCL reads or writes the buffers.
 *
 * Completion.  The non-blocking form records an event after the collective
 * (in one of MAX_PENDING slots) and returns a ticket for it in the request;
 * wait blocks the host until that event has completed (polling it, and
 * ncclCommGetAsyncError so that a failed peer gives an error rather than a
 * hang).  After wait the buffers are complete for the host and for any later
 * GPU work — the same guarantee as the MPI backend.  The blocking form is
 * start + wait.  progress is a no-op: NCCL progresses on the GPU by itself.
 *
 * Slots.  A ticket is (slot, issue number), so a request that is copied,
 * waited twice or never waited cannot confuse the slots.  When all slots are
 * in use, those whose collective has completed are taken back (a later wait on
 * their tickets returns at once: the collective is done), and if none has,
 * the host waits for the oldest one (the collectives complete in issue order
 * on the one stream; every rank issues them in the same order, so this never
 * deadlocks).  Any number of requests may be in flight.
 *
 * Timeout.  A collective that does not complete within OSDP_NCCL_TIMEOUT_S
 * seconds of the host starting to wait for it (default 600; 0 waits for ever)
 * — a peer died, hangs, or called a different collective — aborts the NCCL
 * communicator (ncclCommAbort: the kernels stop) and returns OSDP_ERR_COMM
 * with a message naming the collective, its size and the timeout; every later
 * call on device buffers returns OSDP_ERR_COMM.  The training loop turns an
 * error of a step into osdp_fatal, i.e. MPI_Abort of the whole job.
 *
 * Barrier: the work queued on the compute stream and on the collective stream
 * is finished on this rank (the latter within the timeout), then
 * MPI_Barrier.
 *
 * Grouping (ncclGroupStart/End over the collectives of consecutive small
 * operators) needs the caller to say where a group begins and ends, which
 * the backend table of osdp/comm.h cannot express yet: not done here. */
#include "config.h"
#include "osdp/comm.h"
#include "../cuda/cuda_check.h"

#include <mpi.h>
#include <nccl.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_PENDING 64
#define MAX_GROUP 32   /* collectives in one ncclGroupStart/End (at most half the slots) */
#define DEFAULT_TIMEOUT_S 600.0

typedef struct nccl_slot {
    cudaEvent_t done;
    int busy;
    unsigned long long seq;  /* issue number of the collective in the slot (from 1) */
    const char *what;        /* for messages: "all-gather", ... */
    size_t count;
    osdp_dtype dtype;
    int deferred;            /* issued inside a group: its event is recorded at the group's end */
} nccl_slot;

typedef struct nccl_comm_impl {
    MPI_Comm mpi;          /* bootstrap, barrier, host-buffer fallback */
    ncclComm_t nccl;       /* NULL once aborted after an error */
    cudaStream_t stream;   /* collectives */
    cudaEvent_t ready;     /* recorded on the compute stream before each collective */
    cudaEvent_t drained;   /* barrier: recorded on the collective stream */
    double timeout_s;      /* OSDP_NCCL_TIMEOUT_S; 0: no timeout */
    unsigned long long issued;  /* collectives issued on device buffers */
    nccl_slot slots[MAX_PENDING];
    int in_group;          /* between group_start and group_end */
    int group_n;           /* slots issued in the open group */
    nccl_slot *group[MAX_GROUP];
} nccl_comm_impl;

static ncclDataType_t nccl_type(osdp_dtype t)
{
    switch (t) {
    case OSDP_FLOAT32: return ncclFloat32;
    case OSDP_FLOAT64: return ncclFloat64;
    case OSDP_BFLOAT16: return ncclBfloat16;
    case OSDP_UINT64: return ncclUint64;
    case OSDP_BYTE: return ncclUint8;
    }
    return ncclUint8;
}

static MPI_Datatype mpi_type(osdp_dtype t)
{
    switch (t) {
    case OSDP_FLOAT32: return MPI_FLOAT;
    case OSDP_FLOAT64: return MPI_DOUBLE;
    case OSDP_BFLOAT16: return MPI_UINT16_T;  /* moved, never reduced, on the host */
    case OSDP_UINT64: return MPI_UINT64_T;
    case OSDP_BYTE: return MPI_BYTE;
    }
    return MPI_BYTE;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* OSDP_NCCL_TIMEOUT_S: seconds >= 0 (0: wait for ever); anything else keeps
 * the default, with a warning */
static double timeout_from_env(int rank)
{
    const char *v = getenv("OSDP_NCCL_TIMEOUT_S");
    if (!v || !*v) return DEFAULT_TIMEOUT_S;
    char *end;
    double t = strtod(v, &end);
    if (end != v && *end == '\0' && t >= 0 && t < 1e12) return t;
    if (rank == 0)
        fprintf(stderr, "osdp_gpt: warning: OSDP_NCCL_TIMEOUT_S=%s is not a number of seconds >= 0; using %.0f\n", v,
                DEFAULT_TIMEOUT_S);
    return DEFAULT_TIMEOUT_S;
}

/* After a timeout or an asynchronous error: the collectives in flight will
 * never complete as such; free every slot (their tickets then return the
 * abort error, see nccl_wait). */
static void release_slots(nccl_comm_impl *impl)
{
    for (int i = 0; i < MAX_PENDING; i++) impl->slots[i].busy = 0;
}

/* Record the error (before the abort frees NCCL's message), then abort the
 * communicator: after a failed collective its state is unknown. */
static osdp_status nccl_fail(nccl_comm_impl *impl, ncclResult_t r, const char *what)
{
    const char *last = impl->nccl ? ncclGetLastError(impl->nccl) : NULL;
    osdp_status s = osdp_error_set(OSDP_ERR_COMM, "%s failed: %s%s%s", what, ncclGetErrorString(r),
                                   last && *last ? ": " : "", last && *last ? last : "");
    if (impl->nccl) {
        ncclCommAbort(impl->nccl);
        impl->nccl = NULL;
    }
    release_slots(impl);
    return s;
}

static osdp_status mpi_fail(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return osdp_error_set(OSDP_ERR_COMM, "%s (host buffers) failed: %s", what, msg);
}

/* 1: device (or managed) memory NCCL can use; 0: host memory */
static int on_device(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* Which path a call takes: *use_nccl = 1 for device buffers, 0 for host
 * buffers (MPI fallback). */
static osdp_status route(nccl_comm_impl *impl, const void *a, const void *b, size_t count, const char *what,
                         int *use_nccl)
{
    int da = on_device(a), db = on_device(b);
    *use_nccl = da;
    if (da != db)
        return osdp_error_set(OSDP_ERR_INPUT, "%s: one buffer in host and one in device memory", what);
    if (!da && count > INT_MAX)
        return osdp_error_set(OSDP_ERR_INPUT, "%s: %zu elements of host memory is too many for MPI", what, count);
    if (da && !impl->nccl)
        return osdp_error_set(OSDP_ERR_COMM, "%s: the NCCL communicator was aborted after an earlier error", what);
    return OSDP_OK;
}

static void order_after_compute(nccl_comm_impl *impl)
{
    if (impl->in_group) return;   /* done once by group_start */
    CUDA_CHECK(cudaEventRecord(impl->ready, osdp_cuda_compute_stream()));
    CUDA_CHECK(cudaStreamWaitEvent(impl->stream, impl->ready, 0));
}

/* "NCCL all-gather of 1024 float32 elements (collective #12 of this rank)" */
static void describe(char *buf, size_t n, const char *what, size_t count, osdp_dtype dtype, unsigned long long seq)
{
    if (count)
        snprintf(buf, n, "NCCL %s of %zu %s elements (collective #%llu of this rank)", what, count, osdp_dtype_name(dtype),
                 seq);
    else
        snprintf(buf, n, "NCCL %s (after collective #%llu of this rank)", what, seq);
}

/* The host waits for `ev`, watching for asynchronous NCCL errors and for the
 * timeout meanwhile; `what`, `count`, `dtype` and `seq` name the collective
 * (count 0: the barrier's drain) in the messages. */
static osdp_status wait_event(nccl_comm_impl *impl, cudaEvent_t ev, const char *what, size_t count,
                              osdp_dtype dtype, unsigned long long seq)
{
    const double start = now_s();
    char label[192];
    for (unsigned long polls = 0;; polls++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return OSDP_OK;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        ncclResult_t async = ncclSuccess;
        if (impl->nccl && ncclCommGetAsyncError(impl->nccl, &async) == ncclSuccess &&
            async != ncclSuccess && async != ncclInProgress) {
            describe(label, sizeof label, what, count, dtype, seq);
            return nccl_fail(impl, async, label);
        }
        if (impl->timeout_s > 0 && (polls & 255) == 0 && now_s() - start > impl->timeout_s) {
            describe(label, sizeof label, what, count, dtype, seq);
            osdp_status s = osdp_error_set(OSDP_ERR_COMM,
                "%s did not complete within %g s (OSDP_NCCL_TIMEOUT_S): a peer rank died, hangs, or called a "
                "different collective; the NCCL communicator was aborted", label, impl->timeout_s);
            if (impl->nccl) {
                ncclCommAbort(impl->nccl);
                impl->nccl = NULL;
            }
            release_slots(impl);
            return s;
        }
        sched_yield();
    }
}

static osdp_status wait_slot(nccl_comm_impl *impl, nccl_slot *slot)
{
    osdp_status s = wait_event(impl, slot->done, slot->what, slot->count, slot->dtype, slot->seq);
    slot->busy = 0;
    return s;
}

/* A free slot: one never used or waited, else one whose collective has
 * completed, else (after waiting for it) the oldest. */
static osdp_status take_slot(nccl_comm_impl *impl, nccl_slot **out)
{
    *out = NULL;
    for (int i = 0; i < MAX_PENDING; i++)
        if (!impl->slots[i].busy) {
            *out = &impl->slots[i];
            return OSDP_OK;
        }
    nccl_slot *oldest = NULL;
    for (int i = 0; i < MAX_PENDING; i++) {
        nccl_slot *sl = &impl->slots[i];
        if (sl->deferred) continue;   /* its event is not recorded yet */
        cudaError_t e = cudaEventQuery(sl->done);
        if (e == cudaSuccess) {
            sl->busy = 0;  /* its ticket's wait will find it done */
            if (!*out) *out = sl;
        } else if (e != cudaErrorNotReady) {
            CUDA_CHECK(e);
        }
        if (!oldest || sl->seq < oldest->seq) oldest = sl;
    }
    if (*out) return OSDP_OK;
    osdp_status s = wait_slot(impl, oldest);
    if (s != OSDP_OK) return s;
    *out = oldest;
    return OSDP_OK;
}

/* request tickets: slot index and issue number in one non-NULL value */
static void *ticket(const nccl_comm_impl *impl, const nccl_slot *slot)
{
    return (void *)(uintptr_t)(slot->seq * MAX_PENDING + (unsigned long long)(slot - impl->slots) + 1);
}

/* after an NCCL call: check it, then either wait at once or hand out a ticket */
static osdp_status finish(nccl_comm_impl *impl, ncclResult_t r, osdp_request *req, const char *what, size_t count,
                          osdp_dtype dtype)
{
    if (r != ncclSuccess) {
        char label[192];
        describe(label, sizeof label, what, count, dtype, impl->issued + 1);
        return nccl_fail(impl, r, label);
    }
    if (impl->in_group && (!req || impl->group_n == MAX_GROUP))
        return osdp_error_set(OSDP_ERR_INTERNAL, "NCCL %s: %s inside a collective group", what,
                              req ? "too many collectives" : "a blocking call");
    nccl_slot *slot;
    osdp_status s = take_slot(impl, &slot);
    if (s != OSDP_OK) return s;
    /* inside a group NCCL enqueues the work at ncclGroupEnd: an event
     * recorded now would complete before it */
    if (impl->in_group) {
        slot->deferred = 1;
        impl->group[impl->group_n++] = slot;
    } else {
        CUDA_CHECK(cudaEventRecord(slot->done, impl->stream));
    }
    slot->busy = 1;
    slot->seq = ++impl->issued;
    slot->what = what;
    slot->count = count;
    slot->dtype = dtype;
    if (!req) return wait_slot(impl, slot);
    req->impl = ticket(impl, slot);
    return OSDP_OK;
}

static osdp_status nccl_all_gather(osdp_comm *c, const void *shard, void *full, size_t count, osdp_dtype t,
                                   osdp_request *req)
{
    nccl_comm_impl *impl = c->impl;
    if (req) req->impl = NULL;
    int nccl;
    osdp_status s = route(impl, shard, full, count, "all-gather", &nccl);
    if (s != OSDP_OK) return s;
    if (!nccl) {
        int rc = MPI_Allgather(shard, (int)count, mpi_type(t), full, (int)count, mpi_type(t), impl->mpi);
        return rc == MPI_SUCCESS ? OSDP_OK : mpi_fail(rc, "MPI_Allgather");
    }
    order_after_compute(impl);
    return finish(impl, ncclAllGather(shard, full, count, nccl_type(t), impl->nccl, impl->stream), req,
                  "all-gather", count * (size_t)c->size, t);
}

static osdp_status nccl_reduce_scatter(osdp_comm *c, const void *full, void *shard, size_t count, osdp_dtype t,
                                       osdp_request *req)
{
    nccl_comm_impl *impl = c->impl;
    if (req) req->impl = NULL;
    int nccl;
    osdp_status s = route(impl, full, shard, count, "reduce-scatter", &nccl);
    if (s != OSDP_OK) return s;
    if (!nccl) {
        int rc = MPI_Reduce_scatter_block(full, shard, (int)count, mpi_type(t), MPI_SUM, impl->mpi);
        return rc == MPI_SUCCESS ? OSDP_OK : mpi_fail(rc, "MPI_Reduce_scatter_block");
    }
    order_after_compute(impl);
    return finish(impl, ncclReduceScatter(full, shard, count, nccl_type(t), ncclSum, impl->nccl, impl->stream),
                  req, "reduce-scatter", count * (size_t)c->size, t);
}

static osdp_status nccl_all_reduce(osdp_comm *c, void *buf, size_t count, osdp_dtype t, osdp_request *req)
{
    nccl_comm_impl *impl = c->impl;
    if (req) req->impl = NULL;
    int nccl;
    osdp_status s = route(impl, buf, buf, count, "all-reduce", &nccl);
    if (s != OSDP_OK) return s;
    if (!nccl) {
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(t), MPI_SUM, impl->mpi);
        return rc == MPI_SUCCESS ? OSDP_OK : mpi_fail(rc, "MPI_Allreduce");
    }
    order_after_compute(impl);
    return finish(impl, ncclAllReduce(buf, buf, count, nccl_type(t), ncclSum, impl->nccl, impl->stream), req,
                  "all-reduce", count, t);
}

static osdp_status nccl_broadcast(osdp_comm *c, void *buf, size_t bytes, int root, osdp_request *req)
{
    nccl_comm_impl *impl = c->impl;
    if (req) req->impl = NULL;
    int nccl;
    osdp_status s = route(impl, buf, buf, bytes, "broadcast", &nccl);
    if (s != OSDP_OK) return s;
    if (!nccl) {
        int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, impl->mpi);
        return rc == MPI_SUCCESS ? OSDP_OK : mpi_fail(rc, "MPI_Bcast");
    }
    order_after_compute(impl);
    return finish(impl, ncclBroadcast(buf, buf, bytes, ncclUint8, root, impl->nccl, impl->stream), req,
                  "broadcast", bytes, OSDP_BYTE);
}

static osdp_status nccl_barrier(osdp_comm *c)
{
    nccl_comm_impl *impl = c->impl;
    /* this rank's issued work first, so that the barrier means "all issued
     * work done": the compute stream, then the collectives (within the
     * timeout; nothing to drain once the communicator is aborted) */
    CUDA_CHECK(cudaStreamSynchronize(osdp_cuda_compute_stream()));
    osdp_status s = OSDP_OK;
    if (impl->nccl) {
        CUDA_CHECK(cudaEventRecord(impl->drained, impl->stream));
        s = wait_event(impl, impl->drained, "barrier's drain of the collective stream", 0, OSDP_BYTE, impl->issued);
    }
    if (s != OSDP_OK) return s;   /* no MPI_Barrier: a peer may be gone */
    int rc = MPI_Barrier(impl->mpi);
    return rc == MPI_SUCCESS ? OSDP_OK : mpi_fail(rc, "MPI_Barrier");
}

/* A ticket whose slot holds a later collective (or none) was taken back once
 * its collective had completed: nothing to wait for. */
static osdp_status nccl_wait(osdp_comm *c, osdp_request *req)
{
    nccl_comm_impl *impl = c->impl;
    unsigned long long t = (unsigned long long)(uintptr_t)req->impl - 1;
    req->impl = NULL;
    nccl_slot *slot = &impl->slots[t % MAX_PENDING];
    unsigned long long seq = t / MAX_PENDING;
    if (slot->busy && slot->seq == seq) return wait_slot(impl, slot);
    if (!impl->nccl && seq > 0)
        return osdp_error_set(OSDP_ERR_COMM, "NCCL collective #%llu: the communicator was aborted after an earlier "
                              "error or timeout before it completed", seq);
    return OSDP_OK;
}

/* The collectives between group_start and group_end are fused by NCCL into
 * one launch (ncclGroupStart/End): for the slices of one operator, whose
 * collectives are small, it saves a launch and a ring start-up per slice. */
static osdp_status nccl_group_start(osdp_comm *c)
{
    nccl_comm_impl *impl = c->impl;
    if (impl->in_group) return osdp_error_set(OSDP_ERR_INTERNAL, "NCCL: nested collective groups");
    if (!impl->nccl) return OSDP_OK;   /* aborted: every call reports it */
    order_after_compute(impl);
    impl->in_group = 1;
    impl->group_n = 0;
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) {
        impl->in_group = 0;
        return nccl_fail(impl, r, "ncclGroupStart");
    }
    return OSDP_OK;
}

static osdp_status nccl_group_end(osdp_comm *c)
{
    nccl_comm_impl *impl = c->impl;
    if (!impl->in_group) return OSDP_OK;
    impl->in_group = 0;
    ncclResult_t r = ncclGroupEnd();
    for (int i = 0; i < impl->group_n; i++) {
        impl->group[i]->deferred = 0;
        if (r == ncclSuccess) CUDA_CHECK(cudaEventRecord(impl->group[i]->done, impl->stream));
        else impl->group[i]->busy = 0;
    }
    impl->group_n = 0;
    return r == ncclSuccess ? OSDP_OK : nccl_fail(impl, r, "ncclGroupEnd of a group of collectives");
}

static void nccl_progress(osdp_comm *c) { (void)c; }

static void nccl_destroy(osdp_comm *c)
{
    nccl_comm_impl *impl = c->impl;
    if (!impl) return;
    if (impl->nccl) {
        cudaStreamSynchronize(impl->stream);
        ncclCommDestroy(impl->nccl);
    }
    for (int i = 0; i < MAX_PENDING; i++)
        if (impl->slots[i].done) cudaEventDestroy(impl->slots[i].done);
    if (impl->ready) cudaEventDestroy(impl->ready);
    if (impl->drained) cudaEventDestroy(impl->drained);
    if (impl->stream) cudaStreamDestroy(impl->stream);
    MPI_Comm_free(&impl->mpi);
    free(impl);
    c->impl = NULL;
}

static const osdp_comm_backend nccl_backend = {
    .name = "nccl",
    .all_gather = nccl_all_gather,
    .reduce_scatter = nccl_reduce_scatter,
    .all_reduce = nccl_all_reduce,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .wait = nccl_wait,
    .group_start = nccl_group_start,
    .group_end = nccl_group_end,
    .progress = nccl_progress,
    .destroy = nccl_destroy,
};

/* Collective over the ranks of `mpi_comm`: call it on all of them.  The
 * device is local_device modulo the number of visible GPUs, as in the CUDA
 * compute backend's init. */
osdp_status osdp_comm_create_nccl(osdp_comm *c, const void *mpi_comm, int local_device)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    int have = err == cudaSuccess && count > 0, all_have = 0;
    if (err != cudaSuccess) (void)cudaGetLastError();
    MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, *(const MPI_Comm *)mpi_comm);
    if (!all_have)
        return osdp_error_set(OSDP_ERR_INPUT, "NCCL: %s", have ? "another rank has no usable GPU"
                              : err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device found");
    CUDA_CHECK(cudaSetDevice((local_device < 0 ? 0 : local_device) % count));

    nccl_comm_impl *impl = calloc(1, sizeof *impl);
    int ok = impl != NULL, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, *(const MPI_Comm *)mpi_comm);
    if (!all_ok) {
        free(impl);
        return osdp_error_set(OSDP_ERR_OOM, "NCCL comm: out of host memory");
    }
    MPI_Comm_dup(*(const MPI_Comm *)mpi_comm, &impl->mpi);
    MPI_Comm_set_errhandler(impl->mpi, MPI_ERRORS_RETURN);
    MPI_Comm_rank(impl->mpi, &c->rank);
    MPI_Comm_size(impl->mpi, &c->size);

    /* rank 0 makes the id; its success travels with it so nobody hangs */
    struct { ncclUniqueId id; int ok; } boot;
    ncclResult_t r = ncclSuccess;
    boot.ok = 1;
    if (c->rank == 0) {
        r = ncclGetUniqueId(&boot.id);
        boot.ok = r == ncclSuccess;
    }
    MPI_Bcast(&boot, (int)sizeof boot, MPI_BYTE, 0, impl->mpi);
    if (!boot.ok) {
        MPI_Comm_free(&impl->mpi);
        free(impl);
        return osdp_error_set(OSDP_ERR_COMM, "ncclGetUniqueId failed on rank 0%s%s",
                              c->rank == 0 ? ": " : "", c->rank == 0 ? ncclGetErrorString(r) : "");
    }
    r = ncclCommInitRank(&impl->nccl, c->size, boot.id, c->rank);
    ok = r == ncclSuccess;
    if (!ok) impl->nccl = NULL;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, impl->mpi);
    if (!all_ok) {
        osdp_status s = ok ? osdp_error_set(OSDP_ERR_COMM, "ncclCommInitRank failed on another rank")
                           : nccl_fail(impl, r, "ncclCommInitRank");
        if (impl->nccl) ncclCommAbort(impl->nccl);
        MPI_Comm_free(&impl->mpi);
        free(impl);
        return s;
    }

    CUDA_CHECK(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&impl->ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&impl->drained, cudaEventDisableTiming));
    impl->timeout_s = timeout_from_env(c->rank);
    for (int i = 0; i < MAX_PENDING; i++)
        CUDA_CHECK(cudaEventCreateWithFlags(&impl->slots[i].done, cudaEventDisableTiming));
    c->ops = &nccl_backend;
    c->impl = impl;
    osdp_traffic_reset(&c->traffic);
    return OSDP_OK;
}

/* The NCCL communication backend (GPUs).
 *
 * Set-up: the communicator is bootstrapped over MPI (rank 0 makes the NCCL
 * unique id, MPI_Bcast hands it out, every rank calls
 * ncclCommInitRankConfig), a second one is split from it for the
 * reduce-scatters (ncclCommSplit, NCCL >= 2.18), and a duplicate of the MPI
 * communicator is kept for the barrier and for host buffers (below).
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
 * Ordering.  Collectives run on two streams of their own: the
 * reduce-scatters on one (with their own communicator), everything else on
 * the other, so that a prefetch's all-gather never queues behind the
 * previous operator's reduce-scatter; each communicator's collectives are
 * issued in the same order on every rank, so the two never wait for each
 * other (OSDP_NCCL_ONE_STREAM=1: one communicator and stream for all, to
 * tell the two set-ups apart on a first run).  The streams are created
 * non-blocking so that the synchronous cudaMemcpy of the compute backend's
 * to_host (legacy default stream) is never held up behind an in-flight
 * prefetch.  Before each collective an
 * event is recorded on the compute stream and both collective streams wait
 * for it: everything queued before the call (the kernels that produced the
 * input, and whatever the legacy stream ran before them) is finished before
 * NCCL reads or writes the buffers.
 *
 * Completion.  The non-blocking form records an event after the collective
 * (in one of MAX_PENDING slots) and returns a ticket for it in the request;
 * wait makes the compute stream wait for that event on the GPU
 * (cudaStreamWaitEvent) and returns at once, after a look at
 * ncclCommGetAsyncError: the host goes on queueing kernels while the
 * collective runs, and every later kernel, copy, free, to_host or
 * collective on the buffers is ordered after it — the same guarantee as
 * the MPI backend's for everything that reads device memory through the
 * compute backend.  The host's own waits for the compute stream (to_host,
 * synchronize, the sums) are polled within the timeout by the CUDA backend.
 * OSDP_NCCL_HOST_WAIT=1 makes wait block the host until the event has
 * completed instead (polling it and ncclCommGetAsyncError), as the blocking
 * form always does (start + host wait).  progress is a no-op: NCCL
 * progresses on the GPU by itself.  The traffic counters' wait time is then
 * the host's blocked time only.
 *
 * Slots.  A ticket is (slot, issue number), so a request that is copied,
 * waited twice or never waited cannot confuse the slots.  When all slots are
 * in use, those whose collective has completed are taken back (a later wait on
 * their tickets returns at once: the collective is done), and if none has,
 * the host waits for the oldest one (every rank issues each communicator's
 * collectives in the same order, so the oldest completes: this never
 * deadlocks).  Any number of requests may be in flight.
 *
 * Timeout.  Every wait of this backend is bounded by the communication
 * timeout (osdp_comm_timeout_from_env: OSDP_COMM_TIMEOUT_S or
 * OSDP_NCCL_TIMEOUT_S, default 600 s; 0 waits for ever): a collective the
 * host waits for, NCCL's set-up (the communicator is non-blocking, config
 * .blocking = 0: ncclCommInitRankConfig returns at once and its completion
 * is polled), every NCCL call that returns ncclInProgress (lazy connection
 * set-up at a first collective), the warm-up, the barrier's drains, the
 * host-buffer MPI fallback, and the teardown (ncclCommFinalize, polled,
 * before ncclCommDestroy).  A peer that died, hangs, or called a different
 * collective then aborts the NCCL communicator (ncclCommAbort: the kernels
 * stop) and returns OSDP_ERR_COMM with a message naming what was pending,
 * its size and the timeout; every later call on device buffers returns
 * OSDP_ERR_COMM.  The training loop turns an error of a step into
 * osdp_fatal, i.e. MPI_Abort of the whole job; the teardown, which has no
 * caller to return to, reports through osdp_error_unrecoverable, whose
 * handler in osdp_gpt aborts the job.
 *
 * Memory.  NCCL allocates its buffers when a connection is first used (an
 * algorithm, a protocol, NVLS on NVSwitch nodes, a point-to-point peer),
 * i.e. after the compute backend's pool may hold most of the card.  create
 * runs each collective once, small and large, and a send and a receive with
 * both neighbours (a pipeline's stage boundaries), right after init (the
 * warm-up), so that these buffers exist before the runtime allocates; train
 * then caps the runtime's limit at what the card has left
 * (osdp_memory_device_limit).
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
#include "comm_internal.h"
#include "osdp/compute.h"
#include "util/cuda_status.h"

#include <mpi.h>
#include <nccl.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_PENDING 64
#define MAX_GROUP 32   /* collectives in one ncclGroupStart/End (at most half the slots) */

typedef struct nccl_slot {
    cudaEvent_t done;
    int busy;
    unsigned long long seq;  /* issue number of the collective in the slot (from 1) */
    const char *what;        /* for messages: "all-gather", ... */
    size_t count;
    osdp_dtype dtype;
    int deferred;            /* issued inside a group: its event is recorded at the group's end */
    cudaStream_t stream;     /* the stream the collective runs on */
} nccl_slot;

typedef struct nccl_comm_impl {
    MPI_Comm mpi;          /* bootstrap, barrier, host-buffer fallback */
    ncclComm_t nccl;       /* all-gathers, all-reduces, broadcasts; NULL once aborted after an error */
    cudaStream_t stream;   /* their stream */
    ncclComm_t nccl_rs;    /* reduce-scatters (split from nccl), aborted with it; NULL: they use nccl */
    cudaStream_t stream_rs;/* their stream: a prefetch's all-gather never queues behind a reduce-scatter;
                              NULL with nccl_rs (OSDP_NCCL_ONE_STREAM=1: one stream for all) */
    cudaEvent_t ready;     /* recorded on the compute stream before each collective */
    cudaEvent_t drained;   /* barrier: recorded on the collective stream */
    double timeout_s;      /* OSDP_COMM_TIMEOUT_S; 0: no timeout */
    int host_wait;         /* OSDP_NCCL_HOST_WAIT=1: wait blocks the host (else the compute stream waits) */
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

/* After a timeout or an asynchronous error: the collectives in flight will
 * never complete as such; free every slot (their tickets then return the
 * abort error, see nccl_wait). */
static void release_slots(nccl_comm_impl *impl)
{
    for (int i = 0; i < MAX_PENDING; i++) impl->slots[i].busy = 0;
}

/* Both communicators go together: after a failure or a time-out their
 * state is unknown (ncclCommAbort stops their kernels). */
static void abort_comms(nccl_comm_impl *impl)
{
    if (impl->nccl_rs) ncclCommAbort(impl->nccl_rs);
    if (impl->nccl) ncclCommAbort(impl->nccl);
    impl->nccl_rs = NULL;
    impl->nccl = NULL;
}

/* 1 and the first asynchronous error of the two communicators in *r, or 0 */
static int async_error(const nccl_comm_impl *impl, ncclResult_t *r)
{
    ncclComm_t comms[2] = {impl->nccl, impl->nccl_rs};
    for (int i = 0; i < 2; i++) {
        *r = ncclSuccess;
        if (comms[i] && ncclCommGetAsyncError(comms[i], r) == ncclSuccess && *r != ncclSuccess && *r != ncclInProgress)
            return 1;
    }
    return 0;
}

/* Record the error (before the abort frees NCCL's message), then abort the
 * communicators: after a failed collective their state is unknown. */
static osdp_status nccl_fail(nccl_comm_impl *impl, ncclResult_t r, const char *what)
{
    const char *last = impl->nccl ? ncclGetLastError(impl->nccl) : NULL;
    osdp_status s = osdp_error_set(OSDP_ERR_COMM, "%s failed: %s%s%s", what, ncclGetErrorString(r),
                                   last && *last ? ": " : "", last && *last ? last : "");
    abort_comms(impl);
    release_slots(impl);
    return s;
}

/* The host-buffer fallback: the non-blocking MPI call started with status
 * rc, waited for within the timeout.  `what` and `count` (elements of t; 0:
 * none) name it in the messages. */
static osdp_status host_wait(nccl_comm_impl *impl, int rc, MPI_Request *r, const char *what, size_t count,
                             osdp_dtype t)
{
    if (rc != MPI_SUCCESS) return osdp_comm_mpi_error(rc, what);
    char label[192];
    osdp_comm_describe(label, sizeof label, what, count, t, impl->issued);
    return osdp_comm_mpi_wait(r, impl->timeout_s, label);
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
    osdp_compute_cuda.record_event(impl->ready);
    CUDA_CHECK(cudaStreamWaitEvent(impl->stream, impl->ready, 0));
    if (impl->stream_rs) CUDA_CHECK(cudaStreamWaitEvent(impl->stream_rs, impl->ready, 0));
}

/* "NCCL all-gather of 1024 float32 elements (collective #12 of this rank)" */
static void describe(char *buf, size_t n, const char *what, size_t count, osdp_dtype dtype, unsigned long long seq)
{
    char inner[160];
    osdp_comm_describe(inner, sizeof inner, what, count, dtype, seq);
    snprintf(buf, n, "NCCL %s", inner);
}

/* The communication timeout ran out while waiting for `label`: abort the
 * communicator (its kernels stop) and say what was pending. */
static osdp_status give_up(nccl_comm_impl *impl, const char *label)
{
    osdp_status s = osdp_error_set(OSDP_ERR_COMM,
        "%s did not complete within %g s (OSDP_COMM_TIMEOUT_S): a peer rank died, hangs, or called a "
        "different collective; the NCCL communicator was aborted", label, impl->timeout_s);
    abort_comms(impl);
    release_slots(impl);
    return s;
}

static int expired(const nccl_comm_impl *impl, double start, unsigned long polls)
{
    return impl->timeout_s > 0 && (polls & 255) == 255 && osdp_now_seconds() - start > impl->timeout_s;
}

/* A call on the non-blocking communicator `comm` returned r: while it is
 * ncclInProgress (NCCL is still setting up a connection or the
 * communicator) poll the communicator's state, within the timeout.  `label`
 * names the call. */
static osdp_status settle(nccl_comm_impl *impl, ncclComm_t comm, ncclResult_t r, const char *label)
{
    const double start = osdp_now_seconds();
    for (unsigned long polls = 0; r == ncclInProgress && comm && impl->nccl; polls++) {
        if (expired(impl, start, polls)) return give_up(impl, label);
        sched_yield();
        if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
    }
    return r == ncclSuccess ? OSDP_OK : nccl_fail(impl, r, label);
}

/* The host waits for `ev`, watching for asynchronous NCCL errors and for the
 * timeout meanwhile; `what`, `count`, `dtype` and `seq` name the collective
 * (count 0: the barrier's drain) in the messages. */
static osdp_status wait_event(nccl_comm_impl *impl, cudaEvent_t ev, const char *what, size_t count,
                              osdp_dtype dtype, unsigned long long seq)
{
    const double start = osdp_now_seconds();
    char label[192];
    for (unsigned long polls = 0;; polls++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return OSDP_OK;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        ncclResult_t async = ncclSuccess;
        if (async_error(impl, &async)) {
            describe(label, sizeof label, what, count, dtype, seq);
            return nccl_fail(impl, async, label);
        }
        if (expired(impl, start, polls)) {
            describe(label, sizeof label, what, count, dtype, seq);
            return give_up(impl, label);
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
static osdp_status finish(nccl_comm_impl *impl, ncclComm_t comm, cudaStream_t stream, ncclResult_t r,
                          osdp_request *req, const char *what, size_t count, osdp_dtype dtype)
{
    if (r != ncclSuccess) {
        char label[192];
        describe(label, sizeof label, what, count, dtype, impl->issued + 1);
        osdp_status s = settle(impl, comm, r, label);   /* ncclInProgress: connecting; errors: fail */
        if (s != OSDP_OK) return s;
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
        CUDA_CHECK(cudaEventRecord(slot->done, stream));
    }
    slot->stream = stream;
    slot->busy = 1;
    slot->seq = ++impl->issued;
    slot->what = what;
    slot->count = count;
    slot->dtype = dtype;
    if (!req) return wait_slot(impl, slot);
    req->impl = ticket(impl, slot);
    return OSDP_OK;
}

typedef enum { ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE, BROADCAST, SEND, RECV } collective_kind;

/* An all-gather in c's block order (osdp_comm_set_block_order): each
 * rank's part broadcast from it into its block, the broadcasts fused into
 * one launch (a group nests inside an open one) */
static ncclResult_t ordered_all_gather(const osdp_comm *c, const void *shard, void *full, size_t count, osdp_dtype t,
                                       ncclComm_t comm, cudaStream_t stream)
{
    const size_t bytes = count * osdp_dtype_size(t);
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return r;
    for (int root = 0; root < c->size && r == ncclSuccess; root++)
        r = ncclBroadcast(shard, (char *)full + (size_t)c->block_of[root] * bytes, count, nccl_type(t), root, comm,
                          stream);
    ncclResult_t end = ncclGroupEnd();
    return r != ncclSuccess ? r : end;
}

/* The four collectives' one path: route by where the buffers are, then the
 * MPI host-buffer fallback or the NCCL call on its stream.  count: elements
 * of t per rank (all-gather, reduce-scatter), or in all (all-reduce,
 * broadcast: bytes); root: broadcast's root, the peer of a send or receive. */
static osdp_status collective(osdp_comm *c, collective_kind kind, const void *src, void *dst, size_t count,
                              osdp_dtype t, int root, osdp_request *req)
{
    static const char *const what[] = {"all-gather", "reduce-scatter", "all-reduce", "broadcast", "send", "receive"};
    static const char *const host_what[] = {"all-gather (host buffers)", "reduce-scatter (host buffers)",
                                            "all-reduce (host buffers)", "broadcast (host buffers)",
                                            "send (host buffers)", "receive (host buffers)"};
    nccl_comm_impl *impl = c->impl;
    if (req) req->impl = NULL;
    int nccl;
    osdp_status s = route(impl, src, dst, count, what[kind], &nccl);
    if (s != OSDP_OK) return s;
    const size_t total = kind == ALL_GATHER || kind == REDUCE_SCATTER ? count * (size_t)c->size : count;
    if (!nccl) {
        MPI_Request r;
        int rc = MPI_ERR_OTHER;
        switch (kind) {
        case ALL_GATHER: rc = osdp_comm_mpi_iallgather(c, impl->mpi, src, dst, count, t, &r); break;
        case REDUCE_SCATTER:   /* in place (src == dst): MPI leaves the block at the start, moved below */
            rc = MPI_Ireduce_scatter_block(src == dst ? MPI_IN_PLACE : src, dst, (int)count, osdp_comm_mpi_type(t),
                                           MPI_SUM, impl->mpi, &r);
            break;
        case ALL_REDUCE: {
            MPI_Op sum;
            rc = osdp_comm_mpi_sum_op(t, &sum);
            if (rc == MPI_SUCCESS)
                rc = MPI_Iallreduce(MPI_IN_PLACE, dst, (int)count, osdp_comm_mpi_type(t), sum, impl->mpi, &r);
            break;
        }
        case BROADCAST: rc = MPI_Ibcast(dst, (int)count, MPI_BYTE, root, impl->mpi, &r); break;
        case SEND: rc = MPI_Isend(src, (int)count, osdp_comm_mpi_type(t), root, 0, impl->mpi, &r); break;
        case RECV: rc = MPI_Irecv(dst, (int)count, osdp_comm_mpi_type(t), root, 0, impl->mpi, &r); break;
        }
        s = host_wait(impl, rc, &r, host_what[kind], total, t);
        if (s == OSDP_OK && kind == REDUCE_SCATTER && src == dst && c->rank > 0)   /* this backend's in-place place */
            memmove((char *)dst + (size_t)c->rank * count * osdp_dtype_size(t), dst, count * osdp_dtype_size(t));
        return s;
    }
    order_after_compute(impl);
    ncclComm_t comm = impl->nccl;
    cudaStream_t stream = impl->stream;
    if (kind == REDUCE_SCATTER) {   /* on their own communicator and stream where there are */
        if (impl->nccl_rs) comm = impl->nccl_rs;
        if (impl->stream_rs) stream = impl->stream_rs;
    }
    ncclResult_t r = ncclInvalidUsage;
    switch (kind) {
    case ALL_GATHER:
        r = c->block_of ? ordered_all_gather(c, src, dst, count, t, comm, stream)
                        : ncclAllGather(src, dst, count, nccl_type(t), comm, stream);
        break;
    case REDUCE_SCATTER:   /* in place (src == dst): NCCL's form, the block at this rank's own place */
        if (src == dst) dst = (char *)dst + (size_t)c->rank * count * osdp_dtype_size(t);
        r = ncclReduceScatter(src, dst, count, nccl_type(t), ncclSum, comm, stream);
        break;
    case ALL_REDUCE: r = ncclAllReduce(dst, dst, count, nccl_type(t), ncclSum, comm, stream); break;
    case BROADCAST: r = ncclBroadcast(dst, dst, count, ncclUint8, root, comm, stream); break;
    case SEND: r = ncclSend(src, count, nccl_type(t), root, comm, stream); break;
    case RECV: r = ncclRecv(dst, count, nccl_type(t), root, comm, stream); break;
    }
    return finish(impl, comm, stream, r, req, what[kind], total, t);
}

static osdp_status nccl_all_gather(osdp_comm *c, const void *shard, void *full, size_t count, osdp_dtype t,
                                   osdp_request *req)
{
    return collective(c, ALL_GATHER, shard, full, count, t, 0, req);
}

static osdp_status nccl_reduce_scatter(osdp_comm *c, const void *full, void *shard, size_t count, osdp_dtype t,
                                       osdp_request *req)
{
    return collective(c, REDUCE_SCATTER, full, shard, count, t, 0, req);
}

static osdp_status nccl_all_reduce(osdp_comm *c, void *buf, size_t count, osdp_dtype t, osdp_request *req)
{
    return collective(c, ALL_REDUCE, buf, buf, count, t, 0, req);
}

static osdp_status nccl_broadcast(osdp_comm *c, void *buf, size_t bytes, int root, osdp_request *req)
{
    return collective(c, BROADCAST, buf, buf, bytes, OSDP_BYTE, root, req);
}

/* Point to point on the communicator's first stream: a pipeline's sends and
 * receives in one direction share a communicator (osdp/mesh.h), so they
 * queue in the order the schedule issues them, as MPI's do. */
static osdp_status nccl_send(osdp_comm *c, const void *buf, size_t count, osdp_dtype t, int peer, osdp_request *req)
{
    /* dst only routes (device or host) and is never written by a send */
    return collective(c, SEND, buf, (void *)(uintptr_t)buf, count, t, peer, req);
}

static osdp_status nccl_recv(osdp_comm *c, void *buf, size_t count, osdp_dtype t, int peer, osdp_request *req)
{
    return collective(c, RECV, buf, buf, count, t, peer, req);
}

/* The host waits for the collectives queued on both streams, within the
 * timeout (nothing to drain once the communicators are aborted). */
static osdp_status drain_collectives(nccl_comm_impl *impl, const char *what)
{
    cudaStream_t streams[2] = {impl->stream, impl->stream_rs};
    osdp_status s = OSDP_OK;
    for (int i = 0; i < 2 && s == OSDP_OK && impl->nccl; i++) {
        if (!streams[i]) continue;
        CUDA_CHECK(cudaEventRecord(impl->drained, streams[i]));
        s = wait_event(impl, impl->drained, what, 0, OSDP_BYTE, impl->issued);
    }
    return s;
}

static osdp_status nccl_barrier(osdp_comm *c)
{
    nccl_comm_impl *impl = c->impl;
    /* this rank's issued work first, so that the barrier means "all issued
     * work done": the compute stream, then the collectives, each drain
     * polled within the timeout (nothing to drain on the collective stream
     * once the communicator is aborted) */
    osdp_compute_cuda.record_event(impl->drained);
    osdp_status s = wait_event(impl, impl->drained, "barrier's drain of the compute stream", 0, OSDP_BYTE,
                               impl->issued);
    if (s == OSDP_OK) s = drain_collectives(impl, "barrier's drain of the collective streams");
    if (s != OSDP_OK) return s;   /* no MPI barrier: a peer may be gone */
    MPI_Request r;
    int rc = MPI_Ibarrier(impl->mpi, &r);
    return host_wait(impl, rc, &r, "barrier (MPI)", 0, OSDP_BYTE);
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
    if (slot->busy && slot->seq == seq) {
        if (impl->host_wait) return wait_slot(impl, slot);
        ncclResult_t async = ncclSuccess;
        if (async_error(impl, &async)) {
            char label[192];
            describe(label, sizeof label, slot->what, slot->count, slot->dtype, slot->seq);
            return nccl_fail(impl, async, label);
        }
        /* the GPU waits; the event's later re-recording (slot reuse) does
         * not change what this wait waits for */
        osdp_compute_cuda.wait_event(slot->done);
        slot->busy = 0;
        return OSDP_OK;
    }
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
    if (r == ncclInProgress) {   /* non-blocking communicators: the group is still being enqueued */
        osdp_status s = settle(impl, impl->nccl, r, "ncclGroupEnd of a group of collectives");
        if (s == OSDP_OK && impl->nccl_rs)
            s = settle(impl, impl->nccl_rs, r, "ncclGroupEnd of a group of collectives");
        if (s != OSDP_OK) {
            impl->group_n = 0;
            return s;
        }
        r = ncclSuccess;
    }
    for (int i = 0; i < impl->group_n; i++) {
        impl->group[i]->deferred = 0;
        if (r == ncclSuccess) CUDA_CHECK(cudaEventRecord(impl->group[i]->done, impl->group[i]->stream));
        else impl->group[i]->busy = 0;
    }
    impl->group_n = 0;
    return r == ncclSuccess ? OSDP_OK : nccl_fail(impl, r, "ncclGroupEnd of a group of collectives");
}

static int nccl_progress(osdp_comm *c)   /* the device advances the collectives on its streams */
{
    (void)c;
    return 0;
}

/* Teardown: the collectives still in flight, then ncclCommFinalize (on a
 * non-blocking communicator it returns ncclInProgress while it flushes, with
 * the peers), both within the timeout; then ncclCommDestroy, local once
 * finalized. */
static osdp_status teardown(nccl_comm_impl *impl)
{
    if (!impl->nccl) return OSDP_OK;   /* aborted after an error: nothing to flush */
    osdp_status s = drain_collectives(impl, "teardown's drain of the collective streams");
    if (s == OSDP_OK && impl->nccl_rs)
        s = settle(impl, impl->nccl_rs, ncclCommFinalize(impl->nccl_rs), "ncclCommFinalize of the reduce-scatter "
                   "communicator (teardown)");
    if (s == OSDP_OK) s = settle(impl, impl->nccl, ncclCommFinalize(impl->nccl), "ncclCommFinalize (teardown)");
    if (s != OSDP_OK) return s;
    if (impl->nccl_rs) ncclCommDestroy(impl->nccl_rs);
    ncclCommDestroy(impl->nccl);
    impl->nccl_rs = NULL;
    impl->nccl = NULL;
    return OSDP_OK;
}

/* destroy has no caller to return an error to: a teardown that times out
 * (a peer died during it) ends the job here, with the message */
static void nccl_destroy(osdp_comm *c)
{
    nccl_comm_impl *impl = c->impl;
    if (!impl) return;
    if (teardown(impl) != OSDP_OK)   /* no caller to tell (osdp/error.h): osdp_gpt's handler ends the job */
        osdp_error_unrecoverable(OSDP_ERR_COMM, "rank %d: %s", c->rank, osdp_error_message());
    for (int i = 0; i < MAX_PENDING; i++)
        if (impl->slots[i].done) cudaEventDestroy(impl->slots[i].done);
    if (impl->ready) cudaEventDestroy(impl->ready);
    if (impl->drained) cudaEventDestroy(impl->drained);
    if (impl->stream) cudaStreamDestroy(impl->stream);
    if (impl->stream_rs) cudaStreamDestroy(impl->stream_rs);
    osdp_comm_release(c, &impl->mpi);
}

static const osdp_comm_backend nccl_backend = {
    .name = "nccl",
    OSDP_COMM_BACKEND_ENTRIES(nccl_),
    .group_start = nccl_group_start,
    .group_end = nccl_group_end,
    .in_place_at_rank = 1,   /* NCCL's in-place reduce-scatter; the host fallback moves it there too */
    .advances_alone = 1,     /* on the device's streams */
};

/* All ranks agree on `ok` (1: this rank succeeded) within the timeout:
 * *all_ok = the minimum over the ranks.  `label` names the step. */
static osdp_status agree(MPI_Comm comm, double timeout_s, int ok, int *all_ok, const char *label)
{
    MPI_Request r;
    int rc = MPI_Iallreduce(&ok, all_ok, 1, MPI_INT, MPI_MIN, comm, &r);
    if (rc != MPI_SUCCESS) return osdp_comm_mpi_error(rc, label);
    return osdp_comm_mpi_wait(&r, timeout_s, label);
}

/* One of each collective, small and large, on scratch device memory (not
 * the compute backend's pool), so that NCCL connects its algorithms and
 * protocols, and allocates their buffers, now: before the runtime's
 * allocations fill the card.  The large all-gather moves WARM_UP_BYTES. */
#define WARM_UP_BYTES ((size_t)32 << 20)
static osdp_status warm_up(osdp_comm *c)
{
    const size_t per_rank[2] = {64, WARM_UP_BYTES / sizeof(float) / (size_t)c->size};
    const size_t full_bytes = per_rank[1] * (size_t)c->size * sizeof(float);
    void *full = NULL, *shard = NULL;
    if (cudaMalloc(&full, full_bytes) != cudaSuccess || cudaMalloc(&shard, per_rank[1] * sizeof(float)) != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(full);
        return osdp_error_set(OSDP_ERR_OOM, "NCCL warm-up: no device memory for %zu bytes",
                              full_bytes + per_rank[1] * sizeof(float));
    }
    CUDA_CHECK(cudaMemset(full, 0, full_bytes));
    CUDA_CHECK(cudaMemset(shard, 0, per_rank[1] * sizeof(float)));
    osdp_status s = OSDP_OK;
    for (int k = 0; k < 2 && s == OSDP_OK; k++) {
        size_t n = per_rank[k];
        s = nccl_all_gather(c, shard, full, n, OSDP_FLOAT32, NULL);
        if (s == OSDP_OK) s = nccl_all_gather(c, shard, full, n, OSDP_BFLOAT16, NULL);
        if (s == OSDP_OK) s = nccl_reduce_scatter(c, full, shard, n, OSDP_FLOAT32, NULL);
        if (s == OSDP_OK) s = nccl_all_reduce(c, full, n, OSDP_FLOAT32, NULL);
        if (s == OSDP_OK) s = nccl_broadcast(c, full, n * sizeof(float), 0, NULL);
    }
    /* point to point, as a pipeline's stage boundaries use it: every rank sends to and receives from both
     * neighbours in one group, so that NCCL's p2p connections and buffers are made now too */
    if (s == OSDP_OK && c->size > 1) {
        const int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size;
        const size_t n = per_rank[1];
        osdp_request r[4] = {{NULL}, {NULL}, {NULL}, {NULL}};
        s = nccl_group_start(c);
        if (s == OSDP_OK) s = nccl_send(c, shard, n, OSDP_FLOAT32, next, &r[0]);
        if (s == OSDP_OK) s = nccl_recv(c, full, n, OSDP_FLOAT32, prev, &r[1]);
        if (s == OSDP_OK) s = nccl_send(c, shard, n, OSDP_FLOAT32, prev, &r[2]);
        if (s == OSDP_OK) s = nccl_recv(c, (float *)full + n, n, OSDP_FLOAT32, next, &r[3]);
        const osdp_status ended = nccl_group_end(c);   /* closed whatever happened inside */
        if (s == OSDP_OK) s = ended;
        for (int i = 0; i < 4 && s == OSDP_OK; i++) s = nccl_wait(c, &r[i]);
        if (s == OSDP_OK) s = drain_collectives(c->impl, "the warm-up's point-to-point messages");
    }
    cudaFree(full);
    cudaFree(shard);
    return s;
}

/* Collective over the ranks of `mpi_comm`: call it on all of them.  The
 * device is local_device modulo the number of visible GPUs, as in the CUDA
 * compute backend's init. */
osdp_status osdp_comm_create_nccl(osdp_comm *c, const void *mpi_comm, int local_device)
{
    MPI_Comm parent = *(const MPI_Comm *)mpi_comm;
    int my_rank = 0;
    MPI_Comm_rank(parent, &my_rank);
    /* every agreement below is timed too: a peer that stopped before set-up
     * must not hold this rank for ever */
    const double timeout_s = osdp_comm_timeout_from_env(my_rank);
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    int have = err == cudaSuccess && count > 0, all_have = 0;
    if (err != cudaSuccess) (void)cudaGetLastError();
    osdp_status agreed = agree(parent, timeout_s, have, &all_have, "agreement on a usable GPU (NCCL set-up)");
    if (agreed != OSDP_OK) return agreed;
    if (!all_have)
        return osdp_error_set(OSDP_ERR_INPUT, "NCCL: %s", have ? "another rank has no usable GPU"
                              : err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device found");
    CUDA_CHECK(cudaSetDevice((local_device < 0 ? 0 : local_device) % count));

    nccl_comm_impl *impl = calloc(1, sizeof *impl);
    int all_ok = 0;
    agreed = agree(parent, timeout_s, impl != NULL, &all_ok, "agreement on host memory (NCCL set-up)");
    if (agreed != OSDP_OK || !all_ok) {
        free(impl);
        if (agreed != OSDP_OK) return agreed;
        return osdp_error_set(OSDP_ERR_OOM, "NCCL comm: out of host memory");
    }
    MPI_Request dup_req;
    int rc = MPI_Comm_idup(parent, &impl->mpi, &dup_req);
    agreed = rc == MPI_SUCCESS ? osdp_comm_mpi_wait(&dup_req, timeout_s, "MPI_Comm_idup (NCCL set-up)")
                               : osdp_comm_mpi_error(rc, "MPI_Comm_idup");
    if (agreed != OSDP_OK) {
        free(impl);
        return agreed;
    }
    MPI_Comm_set_errhandler(impl->mpi, MPI_ERRORS_RETURN);
    MPI_Comm_rank(impl->mpi, &c->rank);
    MPI_Comm_size(impl->mpi, &c->size);

    impl->timeout_s = timeout_s;
    const char *host_wait = getenv("OSDP_NCCL_HOST_WAIT");
    impl->host_wait = host_wait && strcmp(host_wait, "1") == 0;

    /* rank 0 makes the id; its success travels with it so nobody hangs */
    struct { ncclUniqueId id; int ok; } boot;
    ncclResult_t r = ncclSuccess;
    boot.ok = 1;
    if (c->rank == 0) {
        r = ncclGetUniqueId(&boot.id);
        boot.ok = r == ncclSuccess;
    }
    MPI_Request boot_req;
    rc = MPI_Ibcast(&boot, (int)sizeof boot, MPI_BYTE, 0, impl->mpi, &boot_req);
    osdp_status s = rc == MPI_SUCCESS ? osdp_comm_mpi_wait(&boot_req, impl->timeout_s, "broadcast of the NCCL unique id")
                                      : osdp_comm_mpi_error(rc, "MPI_Ibcast of the NCCL unique id");
    if (s == OSDP_OK && !boot.ok)
        s = osdp_error_set(OSDP_ERR_COMM, "ncclGetUniqueId failed on rank 0%s%s", c->rank == 0 ? ": " : "",
                           c->rank == 0 ? ncclGetErrorString(r) : "");
    if (s != OSDP_OK) {
        MPI_Comm_free(&impl->mpi);
        free(impl);
        return s;
    }

    /* a non-blocking communicator: the init returns at once and is polled
     * within the timeout (a peer that dies during it would otherwise hold
     * every rank until the job's time limit), and so is every later call
     * that returns ncclInProgress */
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    char label[96];
    snprintf(label, sizeof label, "ncclCommInitRankConfig (rank %d of %d)", c->rank, c->size);
    r = ncclCommInitRankConfig(&impl->nccl, c->size, boot.id, c->rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) impl->nccl = NULL;   /* no handle to poll */
    s = r == ncclSuccess ? OSDP_OK : impl->nccl ? settle(impl, impl->nccl, r, label) : nccl_fail(impl, r, label);
    /* the reduce-scatters' communicator, split from it (same ranks, same
     * order), so that their stream runs beside the all-gathers'; every rank
     * must make the same choice (OSDP_NCCL_ONE_STREAM=1 in the job's
     * environment: one communicator and stream for all, for diagnosis) */
    const char *one_stream = getenv("OSDP_NCCL_ONE_STREAM");
    if (s == OSDP_OK && !(one_stream && strcmp(one_stream, "1") == 0)) {
        ncclConfig_t rs_config = NCCL_CONFIG_INITIALIZER;
        rs_config.blocking = 0;
        r = ncclCommSplit(impl->nccl, 0, c->rank, &impl->nccl_rs, &rs_config);
        if (r != ncclSuccess && r != ncclInProgress) impl->nccl_rs = NULL;
        s = r == ncclSuccess ? OSDP_OK
            : impl->nccl_rs ? settle(impl, impl->nccl_rs, r, "ncclCommSplit (the reduce-scatter communicator)")
                            : nccl_fail(impl, r, "ncclCommSplit (the reduce-scatter communicator)");
    }
    agreed = agree(impl->mpi, impl->timeout_s, s == OSDP_OK, &all_ok, "agreement on ncclCommInitRankConfig");
    if (s == OSDP_OK && agreed != OSDP_OK) s = agreed;
    if (s == OSDP_OK && !all_ok) s = osdp_error_set(OSDP_ERR_COMM, "ncclCommInitRankConfig failed on another rank");
    if (s != OSDP_OK) {
        abort_comms(impl);
        MPI_Comm_free(&impl->mpi);
        free(impl);
        return s;
    }

    CUDA_CHECK(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
    if (impl->nccl_rs) CUDA_CHECK(cudaStreamCreateWithFlags(&impl->stream_rs, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&impl->ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&impl->drained, cudaEventDisableTiming));
    for (int i = 0; i < MAX_PENDING; i++)
        CUDA_CHECK(cudaEventCreateWithFlags(&impl->slots[i].done, cudaEventDisableTiming));
    c->ops = &nccl_backend;
    c->impl = impl;
    osdp_traffic_reset(&c->traffic);
    c->tensor_axis = 0;   /* the data axis unless osdp_comm_set_tensor_axis says otherwise */
    c->level = OSDP_LEVEL_FLAT;
    c->block_of = NULL;   /* rank order */
    osdp_comm_link_attach(c, impl->mpi);
    osdp_comm_track(impl->mpi);   /* freed by its destroy, or by osdp_comm_release_all on an early exit */
    /* every rank warms up; a failure (out of memory, a timeout) ends the job
     * through the caller's collective check, the communicator aborted */
    s = warm_up(c);
    return s;
}

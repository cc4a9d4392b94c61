/* The MPI communication backend.
 *
 * Every collective is issued in its non-blocking form, and the blocking form
 * is start + wait: MPICH may pick a different algorithm (and so a different
 * summation order) for MPI_Reduce_scatter_block than for its non-blocking
 * twin, and we want results that do not depend on whether prefetch is on.
 *
 * Hangs.  Every wait (the blocking forms, wait, the barrier) polls its
 * request with MPI_Test for at most the communication timeout
 * (osdp_comm_timeout_from_env: OSDP_COMM_TIMEOUT_S, default 600 s); a rank
 * that stops (stopped, swapping, stuck in a different collective) then
 * makes its peers return OSDP_ERR_COMM naming the collective that was
 * pending, which the training loop turns into a message and MPI_Abort of
 * the job, instead of every rank waiting until the job's time limit.  A rank
 * that dies is the launcher's to report: mpiexec and srun
 * --kill-on-bad-exit end the others.  Between polls a wait yields now and
 * then, or sleeps where ranks outnumber the cores (osdp_comm_share_cores). */
#include "config.h"
#include "osdp/comm.h"
#include "osdp/dtype.h"
#include "comm_internal.h"

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define MAX_PENDING 64

/* what a pending request is, for the time-out message */
typedef struct mpi_pending {
    const char *what;
    size_t count;
    osdp_dtype dtype;
    unsigned long long seq;
} mpi_pending;

typedef struct mpi_comm_impl {
    MPI_Comm comm;
    MPI_Request pending[MAX_PENDING];   /* requests handed out and not yet waited (MPI_REQUEST_NULL: a free
                                           slot), for mpi_progress */
    mpi_pending about[MAX_PENDING];
    unsigned long long issued;          /* collectives started on this rank */
    double timeout_s;                   /* 0: wait for ever */
} mpi_comm_impl;

MPI_Datatype osdp_comm_mpi_type(osdp_dtype t)
{
    switch (t) {
    case OSDP_FLOAT32: return MPI_FLOAT;
    case OSDP_FLOAT64: return MPI_DOUBLE;
    case OSDP_BFLOAT16: return MPI_UINT16_T;  /* moved, never reduced (no_bf16_sum) */
    case OSDP_UINT64: return MPI_UINT64_T;
    case OSDP_BYTE: return MPI_BYTE;
    }
    return MPI_BYTE;
}

osdp_status osdp_comm_mpi_error(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return osdp_error_set(OSDP_ERR_COMM, "%s failed: %s", what, msg);
}

/* the communicators the comm layer made and has not freed, oldest first (osdp_comm_release_all): handles,
 * which stay valid wherever their owner is copied to; one that could not be recorded (no memory) is only
 * left to MPI_Finalize */
static MPI_Comm *live;
static int n_live, live_cap;

void osdp_comm_track(MPI_Comm comm)
{
    if (comm == MPI_COMM_NULL) return;
    if (n_live == live_cap) {
        MPI_Comm *more = realloc(live, sizeof *live * (size_t)(live_cap ? 2 * live_cap : 8));
        if (!more) return;
        live = more;
        live_cap = live_cap ? 2 * live_cap : 8;
    }
    live[n_live++] = comm;
}

void osdp_comm_free_tracked(MPI_Comm *comm)
{
    if (*comm == MPI_COMM_NULL) return;
    for (int i = n_live - 1; i >= 0; i--)
        if (live[i] == *comm) {
            memmove(live + i, live + i + 1, sizeof *live * (size_t)(n_live - i - 1));
            n_live--;
            break;
        }
    MPI_Comm_free(comm);
}

void osdp_comm_release_all(void)
{
    for (int i = n_live - 1; i >= 0; i--) MPI_Comm_free(&live[i]);   /* the newest first; the same order on every rank */
    free(live);
    live = NULL;
    n_live = live_cap = 0;
}

void osdp_comm_release(osdp_comm *c, MPI_Comm *duplicate)
{
    osdp_comm_free_tracked(duplicate);
    free(c->impl);
    c->impl = NULL;
}

/* 1: this machine's ranks outnumber its cores (osdp_comm_share_cores) */
static int g_shared_cores;

void osdp_comm_share_cores(int shared)
{
    g_shared_cores = shared;
#ifdef __linux__
    /* the short sleeps below would otherwise last the default 50 us of slack */
    if (shared) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
}

osdp_status osdp_comm_mpi_wait(MPI_Request *req, double timeout_s, const char *label)
{
    const double start = osdp_now_seconds();
    for (unsigned long polls = 0;; polls++) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return osdp_comm_mpi_error(rc, label);
        if (done) return OSDP_OK;
        /* the clock every 256 polls: MPI_Test is the cheaper call */
        if (timeout_s > 0 && (polls & 255) == 255 && osdp_now_seconds() - start > timeout_s)
            return osdp_error_set(OSDP_ERR_COMM,
                                  "MPI %s did not complete within %g s (OSDP_COMM_TIMEOUT_S): a peer rank died, "
                                  "hangs, or called a different collective",
                                  label, timeout_s);
        /* let a rank sharing the core run.  Where ranks outnumber the cores, sleep after 100 us of polling
         * (short waits keep their latency): a rank that spins or yields stays runnable, and the peer it waits
         * for, descheduled behind a computing rank on its core, runs only when that rank's time slice ends
         * (a tensor group's all-reduce, 8 ranks on 2 cores, waited about 3 ms a call); a sleeping rank
         * leaves its core, and its timer wakes it ahead of the running ones */
        if (g_shared_cores && (polls & 15) == 15 && osdp_now_seconds() - start > 100e-6)
            nanosleep(&(struct timespec){0, 10000}, NULL);
        else if ((polls & 1023) == 1023) sched_yield();
    }
}

/* The timed wait of the request in slot i (its description in about[i]). */
static osdp_status wait_slot(mpi_comm_impl *impl, int i)
{
    char label[192];
    const mpi_pending *p = &impl->about[i];
    osdp_comm_describe(label, sizeof label, p->what, p->count, p->dtype, p->seq);
    return osdp_comm_mpi_wait(&impl->pending[i], impl->timeout_s, label);
}

/* Park a started request in a slot; blocking callers wait on it at once. */
static osdp_status finish(osdp_comm *c, MPI_Request r, osdp_request *req, const char *what, size_t count,
                          osdp_dtype dtype)
{
    mpi_comm_impl *impl = c->impl;
    for (int i = 0; i < MAX_PENDING; i++)
        if (impl->pending[i] == MPI_REQUEST_NULL) {
            impl->pending[i] = r;
            impl->about[i] = (mpi_pending){what, count, dtype, ++impl->issued};
            if (!req) return wait_slot(impl, i);   /* sets the slot back to MPI_REQUEST_NULL */
            req->impl = &impl->pending[i];
            return OSDP_OK;
        }
    return osdp_error_set(OSDP_ERR_INTERNAL, "%s: more than %d collectives in flight", what, MAX_PENDING);
}

int osdp_comm_mpi_iallgather(const osdp_comm *c, MPI_Comm comm, const void *shard, void *full, size_t count,
                             osdp_dtype t, MPI_Request *r)
{
    MPI_Datatype type = osdp_comm_mpi_type(t);
    const int mine = c->block_of ? c->block_of[c->rank] : c->rank;
    const void *send = shard == (const char *)full + (size_t)mine * count * osdp_dtype_size(t) ? MPI_IN_PLACE : shard;
    if (!c->block_of) return MPI_Iallgather(send, (int)count, type, full, (int)count, type, comm, r);
    /* one block per rank, at its displacement in blocks: the arrays stay constant */
    MPI_Datatype block;
    int rc = MPI_Type_contiguous((int)count, type, &block);
    if (rc != MPI_SUCCESS) return rc;
    rc = MPI_Type_commit(&block);
    if (rc == MPI_SUCCESS)
        rc = MPI_Iallgatherv(send, (int)count, type, full, c->block_of + c->size, c->block_of, block, comm, r);
    MPI_Type_free(&block);   /* freed once the call in flight no longer needs it */
    return rc;
}

/* MPI's counts are ints: a call of more elements (a block's, a message's) than INT_MAX would be cut to
 * another count, and is refused, naming it, before any rank starts it (every rank of a collective gives
 * the same count); the NCCL backend's host path refuses such calls alike */
static osdp_status count_fits(size_t count, const char *what)
{
    if (count <= (size_t)INT_MAX) return OSDP_OK;
    return osdp_error_set(OSDP_ERR_INPUT, "%s: %zu elements in one call, more than MPI's int count takes (%d)", what,
                          count, INT_MAX);
}

static osdp_status mpi_all_gather(osdp_comm *c, const void *shard, void *full, size_t count, osdp_dtype t, osdp_request *req)
{
    mpi_comm_impl *impl = c->impl;
    MPI_Request r;
    osdp_status s = count_fits(count, "all-gather");
    if (s != OSDP_OK) return s;
    int rc = osdp_comm_mpi_iallgather(c, impl->comm, shard, full, count, t, &r);
    return rc == MPI_SUCCESS ? finish(c, r, req, "all-gather", count * (size_t)c->size, t)
                             : osdp_comm_mpi_error(rc, c->block_of ? "MPI_Iallgatherv" : "MPI_Iallgather");
}

/* MPI has no bf16 type: bf16 travels as 16-bit words, which MPI_SUM would add
 * as integers.  The runtime reduces gradients in fp32 (osdp/runtime.h); a
 * bf16 residual stream's tensor-parallel all-reduces (osdp/schedule.h) sum
 * bf16 with osdp_comm_mpi_sum_op's user-defined operation. */
static osdp_status no_bf16_sum(osdp_dtype t, const char *what)
{
    if (t != OSDP_BFLOAT16) return OSDP_OK;
    return osdp_error_set(OSDP_ERR_INPUT, "%s: the MPI backend cannot sum bf16 elements (reduce in fp32)", what);
}

/* inout[i] = bf16(in[i] + inout[i]): both widened (exact), added in fp32,
 * the sum rounded to nearest even, as NCCL's ncclBfloat16 ncclSum does;
 * commutative bit for bit (fp32 addition is), so every rank of a recursive
 * doubling or a ring ends with the same bits */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = osdp_bf16_from_float(osdp_bf16_to_float(a[i]) + osdp_bf16_to_float(b[i]));
}

int osdp_comm_mpi_sum_op(osdp_dtype t, MPI_Op *op)
{
    static MPI_Op bf16_op = MPI_OP_NULL;   /* made once, at the first bf16 sum; MPI_Finalize frees it */
    if (t != OSDP_BFLOAT16) {
        *op = MPI_SUM;
        return MPI_SUCCESS;
    }
    if (bf16_op == MPI_OP_NULL) {
        int rc = MPI_Op_create(bf16_sum, 1, &bf16_op);
        if (rc != MPI_SUCCESS) return rc;
    }
    *op = bf16_op;
    return MPI_SUCCESS;
}

static osdp_status mpi_reduce_scatter(osdp_comm *c, const void *full, void *shard, size_t count, osdp_dtype t, osdp_request *req)
{
    mpi_comm_impl *impl = c->impl;
    MPI_Request r;
    osdp_status s = no_bf16_sum(t, "reduce-scatter");
    if (s == OSDP_OK) s = count_fits(count, "reduce-scatter");
    if (s != OSDP_OK) return s;
    /* in place (full == shard): MPI_IN_PLACE leaves this rank's block at the start (in_place_at_rank 0) */
    int rc = MPI_Ireduce_scatter_block(full == shard ? MPI_IN_PLACE : full, shard, (int)count, osdp_comm_mpi_type(t),
                                       MPI_SUM, impl->comm, &r);
    return rc == MPI_SUCCESS ? finish(c, r, req, "reduce-scatter", count * (size_t)c->size, t)
                             : osdp_comm_mpi_error(rc, "MPI_Ireduce_scatter_block");
}

static osdp_status mpi_all_reduce(osdp_comm *c, void *buf, size_t count, osdp_dtype t, osdp_request *req)
{
    mpi_comm_impl *impl = c->impl;
    MPI_Request r;
    MPI_Op sum;
    osdp_status s = count_fits(count, "all-reduce");
    if (s != OSDP_OK) return s;
    int rc = osdp_comm_mpi_sum_op(t, &sum);
    if (rc != MPI_SUCCESS) return osdp_comm_mpi_error(rc, "MPI_Op_create");
    rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, osdp_comm_mpi_type(t), sum, impl->comm, &r);
    return rc == MPI_SUCCESS ? finish(c, r, req, "all-reduce", count, t) : osdp_comm_mpi_error(rc, "MPI_Iallreduce");
}

static osdp_status mpi_broadcast(osdp_comm *c, void *buf, size_t bytes, int root, osdp_request *req)
{
    mpi_comm_impl *impl = c->impl;
    MPI_Request r;
    osdp_status s = count_fits(bytes, "broadcast");
    if (s != OSDP_OK) return s;
    int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, impl->comm, &r);
    return rc == MPI_SUCCESS ? finish(c, r, req, "broadcast", bytes, OSDP_BYTE) : osdp_comm_mpi_error(rc, "MPI_Ibcast");
}

static osdp_status mpi_barrier(osdp_comm *c)
{
    mpi_comm_impl *impl = c->impl;
    MPI_Request r;
    int rc = MPI_Ibarrier(impl->comm, &r);
    return rc == MPI_SUCCESS ? finish(c, r, NULL, "barrier", 0, OSDP_BYTE) : osdp_comm_mpi_error(rc, "MPI_Ibarrier");
}

/* tag 0: MPI keeps the order of messages between a pair on one communicator */
static osdp_status mpi_send(osdp_comm *c, const void *buf, size_t count, osdp_dtype t, int peer, osdp_request *req)
{
    mpi_comm_impl *impl = c->impl;
    MPI_Request r;
    osdp_status s = count_fits(count, "send");
    if (s != OSDP_OK) return s;
    int rc = MPI_Isend(buf, (int)count, osdp_comm_mpi_type(t), peer, 0, impl->comm, &r);
    return rc == MPI_SUCCESS ? finish(c, r, req, "send", count, t) : osdp_comm_mpi_error(rc, "MPI_Isend");
}

static osdp_status mpi_recv(osdp_comm *c, void *buf, size_t count, osdp_dtype t, int peer, osdp_request *req)
{
    mpi_comm_impl *impl = c->impl;
    MPI_Request r;
    osdp_status s = count_fits(count, "receive");
    if (s != OSDP_OK) return s;
    int rc = MPI_Irecv(buf, (int)count, osdp_comm_mpi_type(t), peer, 0, impl->comm, &r);
    return rc == MPI_SUCCESS ? finish(c, r, req, "receive", count, t) : osdp_comm_mpi_error(rc, "MPI_Irecv");
}

static osdp_status mpi_wait(osdp_comm *c, osdp_request *req)
{
    mpi_comm_impl *impl = c->impl;
    MPI_Request *r = req->impl;
    req->impl = NULL;
    /* MPI_Test sets *r to MPI_REQUEST_NULL once complete: the slot is free */
    return wait_slot(impl, (int)(r - impl->pending));
}

/* MPI_Request_get_status runs MPI's progress engine and, unlike MPI_Test or
 * MPI_Testall, neither frees a completed request nor its slot: the slot
 * stays taken until its own wait, which a later call's request could
 * otherwise take over.  A slot is free exactly when it is MPI_REQUEST_NULL
 * (a completed wait sets it so), so the scan costs 64 compares when
 * nothing is in flight. */
static int mpi_progress(osdp_comm *c)
{
    mpi_comm_impl *impl = c->impl;
    int in_flight = 0;
    for (int i = 0; i < MAX_PENDING; i++)
        if (impl->pending[i] != MPI_REQUEST_NULL) {
            int done = 0;
            if (MPI_Request_get_status(impl->pending[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 0;
            in_flight += !done;
        }
    return in_flight;
}

static void mpi_destroy(osdp_comm *c)
{
    mpi_comm_impl *impl = c->impl;
    if (!impl) return;
    osdp_comm_release(c, &impl->comm);
}

static const osdp_comm_backend mpi_backend = {
    .name = "mpi",
    OSDP_COMM_BACKEND_ENTRIES(mpi_),
    .in_place_at_rank = 0,   /* MPI_IN_PLACE: the block at the start */
    .advances_alone = 0,     /* MPICH without a progress thread: only inside MPI calls */
};

/* *value = its largest over the ranks of `comm`, waited for as a backend's call is (osdp_comm_mpi_wait) */
static osdp_status max_over(MPI_Comm comm, void *value, MPI_Datatype type, const char *what)
{
    static double timeout_s = -1;   /* read once: the warning for a bad value too */
    if (timeout_s < 0) {
        int rank = 0;
        MPI_Comm_rank(comm, &rank);
        timeout_s = osdp_comm_timeout_from_env(rank);
    }
    MPI_Request r;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, value, 1, type, MPI_MAX, comm, &r);
    return rc == MPI_SUCCESS ? osdp_comm_mpi_wait(&r, timeout_s, what) : osdp_comm_mpi_error(rc, what);
}

osdp_status osdp_comm_max_int(const void *mpi_comm, int *value, const char *what)
{
    return max_over(*(const MPI_Comm *)mpi_comm, value, MPI_INT, what);
}

osdp_status osdp_comm_max_double(const void *mpi_comm, double *value, const char *what)
{
    return max_over(*(const MPI_Comm *)mpi_comm, value, MPI_DOUBLE, what);
}

osdp_status osdp_comm_create_mpi(osdp_comm *c, const void *mpi_comm)
{
    mpi_comm_impl *impl = calloc(1, sizeof *impl);
    /* MPI_Comm_dup is collective: the ranks agree first (one out of memory alone would leave the others in it) */
    int failed = impl == NULL;
    const osdp_status agreed = osdp_comm_max_int(mpi_comm, &failed, "agreement on host memory (communicator set-up)");
    if (agreed != OSDP_OK || failed) {
        const int here = impl == NULL;
        free(impl);
        return agreed != OSDP_OK ? agreed
             : osdp_error_set(OSDP_ERR_OOM, "comm: out of host memory%s", here ? "" : " on another rank");
    }
    for (int i = 0; i < MAX_PENDING; i++) impl->pending[i] = MPI_REQUEST_NULL;
    MPI_Comm_dup(*(const MPI_Comm *)mpi_comm, &impl->comm);
    osdp_comm_track(impl->comm);
    MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
    c->ops = &mpi_backend;
    c->impl = impl;
    MPI_Comm_rank(impl->comm, &c->rank);
    MPI_Comm_size(impl->comm, &c->size);
    impl->timeout_s = osdp_comm_timeout_from_env(c->rank);
    osdp_traffic_reset(&c->traffic);
    c->tensor_axis = 0;   /* the data axis unless osdp_comm_set_tensor_axis says otherwise */
    c->level = OSDP_LEVEL_FLAT;
    c->block_of = NULL;   /* rank order */
    osdp_comm_link_attach(c, impl->comm);
    return OSDP_OK;
}

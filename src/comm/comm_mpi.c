/* The MPI communication backend.
 *
 * Every collective is issued in its non-blocking form, and the blocking form
 * is start + wait: MPICH may pick a different algorithm (and so a different
 * summation order) for MPI_Reduce_scatter_block than for its non-blocking
 * twin, and we want results that do not depend on whether prefetch is on. */
#include "osdp/comm.h"

#include <mpi.h>
#include <stdlib.h>

#define MAX_PENDING 64

typedef struct mpi_comm_impl {
    MPI_Comm comm;
    MPI_Request pending[MAX_PENDING];   /* requests handed out, for progress() */
} mpi_comm_impl;

static MPI_Datatype mpi_type(osdp_dtype t)
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

static osdp_status mpi_error(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return osdp_error_set(OSDP_ERR_COMM, "%s failed: %s", what, msg);
}

/* Park a started request in a slot; blocking callers wait on it at once. */
static osdp_status finish(osdp_comm *c, MPI_Request r, osdp_request *req, const char *what)
{
    mpi_comm_impl *impl = c->impl;
    if (!req) {
        int rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
        return rc == MPI_SUCCESS ? OSDP_OK : mpi_error(rc, what);
    }
    for (int i = 0; i < MAX_PENDING; i++)
        if (impl->pending[i] == MPI_REQUEST_NULL) {
            impl->pending[i] = r;
            req->impl = &impl->pending[i];
            return OSDP_OK;
        }
    return osdp_error_set(OSDP_ERR_INTERNAL, "%s: more than %d collectives in flight", what, MAX_PENDING);
}

static osdp_status mpi_all_gather(osdp_comm *c, const void *shard, void *full, size_t count, osdp_dtype t, osdp_request *req)
{
    mpi_comm_impl *impl = c->impl;
    MPI_Request r;
    int rc = MPI_Iallgather(shard, (int)count, mpi_type(t), full, (int)count, mpi_type(t), impl->comm, &r);
    return rc == MPI_SUCCESS ? finish(c, r, req, "MPI_Iallgather") : mpi_error(rc, "MPI_Iallgather");
}

/* MPI has no bf16 type: bf16 travels as 16-bit words, which MPI_SUM would add
 * as integers.  The runtime reduces gradients in fp32 (osdp/runtime.h). */
static osdp_status no_bf16_sum(osdp_dtype t, const char *what)
{
    if (t != OSDP_BFLOAT16) return OSDP_OK;
    return osdp_error_set(OSDP_ERR_INPUT, "%s: the MPI backend cannot sum bf16 elements (reduce in fp32)", what);
}

static osdp_status mpi_reduce_scatter(osdp_comm *c, const void *full, void *shard, size_t count, osdp_dtype t, osdp_request *req)
{
    mpi_comm_impl *impl = c->impl;
    MPI_Request r;
    osdp_status s = no_bf16_sum(t, "reduce-scatter");
    if (s != OSDP_OK) return s;
    int rc = MPI_Ireduce_scatter_block(full, shard, (int)count, mpi_type(t), MPI_SUM, impl->comm, &r);
    return rc == MPI_SUCCESS ? finish(c, r, req, "MPI_Ireduce_scatter_block") : mpi_error(rc, "MPI_Ireduce_scatter_block");
}

static osdp_status mpi_all_reduce(osdp_comm *c, void *buf, size_t count, osdp_dtype t, osdp_request *req)
{
    mpi_comm_impl *impl = c->impl;
    MPI_Request r;
    osdp_status s = no_bf16_sum(t, "all-reduce");
    if (s != OSDP_OK) return s;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(t), MPI_SUM, impl->comm, &r);
    return rc == MPI_SUCCESS ? finish(c, r, req, "MPI_Iallreduce") : mpi_error(rc, "MPI_Iallreduce");
}

static osdp_status mpi_broadcast(osdp_comm *c, void *buf, size_t bytes, int root, osdp_request *req)
{
    mpi_comm_impl *impl = c->impl;
    MPI_Request r;
    int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, impl->comm, &r);
    return rc == MPI_SUCCESS ? finish(c, r, req, "MPI_Ibcast") : mpi_error(rc, "MPI_Ibcast");
}

static osdp_status mpi_barrier(osdp_comm *c)
{
    mpi_comm_impl *impl = c->impl;
    int rc = MPI_Barrier(impl->comm);
    return rc == MPI_SUCCESS ? OSDP_OK : mpi_error(rc, "MPI_Barrier");
}

static osdp_status mpi_wait(osdp_comm *c, osdp_request *req)
{
    (void)c;
    MPI_Request *r = req->impl;
    int rc = MPI_Wait(r, MPI_STATUS_IGNORE);   /* sets *r to MPI_REQUEST_NULL: the slot is free */
    req->impl = NULL;
    return rc == MPI_SUCCESS ? OSDP_OK : mpi_error(rc, "MPI_Wait");
}

static void mpi_progress(osdp_comm *c)
{
    mpi_comm_impl *impl = c->impl;
    int flag;
    /* MPI_Testall would free completed requests that callers still wait on;
     * MPI_Test on a copy-less slot is fine since wait() accepts a completed
     * (null) request.  One MPI_Testsome-like poke is enough to advance. */
    for (int i = 0; i < MAX_PENDING; i++)
        if (impl->pending[i] != MPI_REQUEST_NULL) {
            MPI_Request_get_status(impl->pending[i], &flag, MPI_STATUS_IGNORE);
        }
}

static void mpi_destroy(osdp_comm *c)
{
    mpi_comm_impl *impl = c->impl;
    if (!impl) return;
    MPI_Comm_free(&impl->comm);
    free(impl);
    c->impl = NULL;
}

static const osdp_comm_backend mpi_backend = {
    .name = "mpi",
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
    .all_reduce = mpi_all_reduce,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .wait = mpi_wait,
    .progress = mpi_progress,
    .destroy = mpi_destroy,
};

osdp_status osdp_comm_create_mpi(osdp_comm *c, const void *mpi_comm)
{
    mpi_comm_impl *impl = calloc(1, sizeof *impl);
    if (!impl) return osdp_error_set(OSDP_ERR_OOM, "comm: out of host memory");
    for (int i = 0; i < MAX_PENDING; i++) impl->pending[i] = MPI_REQUEST_NULL;
    MPI_Comm_dup(*(const MPI_Comm *)mpi_comm, &impl->comm);
    MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
    c->ops = &mpi_backend;
    c->impl = impl;
    MPI_Comm_rank(impl->comm, &c->rank);
    MPI_Comm_size(impl->comm, &c->size);
    osdp_traffic_reset(&c->traffic);
    return OSDP_OK;
}

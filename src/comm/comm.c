/* Backend-independent collective wrappers: traffic accounting + dispatch. */
#include "osdp/comm.h"
#include "comm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *osdp_collective_name(osdp_collective c)
{
    static const char *names[OSDP_COLL_N_TYPES] = {"all-gather", "reduce-scatter", "all-reduce", "broadcast",
                                                   "tp all-reduce", "tp all-gather", "p2p",
                                                   "node all-gather", "node reduce-scatter", "cross reduce-scatter",
                                                   "cross all-gather"};
    return c < OSDP_COLL_N_TYPES ? names[c] : "?";
}



void osdp_comm_describe(char *buf, size_t n, const char *what, size_t count, osdp_dtype dtype,
                        unsigned long long seq)
{
    if (count)
        snprintf(buf, n, "%s of %zu %s elements (collective #%llu of this rank)", what, count, osdp_dtype_name(dtype),
                 seq);
    else
        snprintf(buf, n, "%s (after collective #%llu of this rank)", what, seq);
}

/* a blocking call (req NULL) counts as waited in full */
static osdp_status timed(osdp_comm *c, osdp_request *req, double t0, osdp_status s)
{
    if (!req) c->traffic.wait_seconds += osdp_now_seconds() - t0;
    return s;
}

/* the emulated link's floor (src/comm/link_emulation.c) once the call has
 * returned, then the wait time of a blocking call */
static osdp_status over_link(osdp_comm *c, osdp_collective kind, size_t bytes, int peer, osdp_request *req, double t0,
                             osdp_status s)
{
    if (s == OSDP_OK && c->link) osdp_comm_link_issued(c, kind, bytes, peer, t0, req);
    return timed(c, req, t0, s);
}

static void account(osdp_comm *c, osdp_collective type, size_t full_bytes, double wire_fraction)
{
    if (c->tensor_axis && type == OSDP_COLL_ALL_REDUCE) type = OSDP_COLL_TP_ALL_REDUCE;
    if (c->tensor_axis && type == OSDP_COLL_ALL_GATHER) type = OSDP_COLL_TP_ALL_GATHER;
    if (c->level == OSDP_LEVEL_NODE && type == OSDP_COLL_ALL_GATHER) type = OSDP_COLL_NODE_ALL_GATHER;
    if (c->level == OSDP_LEVEL_NODE && type == OSDP_COLL_REDUCE_SCATTER) type = OSDP_COLL_NODE_REDUCE_SCATTER;
    if (c->level == OSDP_LEVEL_CROSS && type == OSDP_COLL_ALL_GATHER) type = OSDP_COLL_CROSS_ALL_GATHER;
    if (c->level == OSDP_LEVEL_CROSS && type == OSDP_COLL_REDUCE_SCATTER) type = OSDP_COLL_CROSS_REDUCE_SCATTER;
    c->traffic.logical[type] += full_bytes;
    c->traffic.wire[type] += (unsigned long long)((double)full_bytes * wire_fraction);
    c->traffic.calls[type]++;
}

osdp_status osdp_comm_all_gather(osdp_comm *c, const void *shard, void *full, size_t count, osdp_dtype t, osdp_request *req)
{
    const size_t bytes = count * (size_t)c->size * osdp_dtype_size(t);
    account(c, OSDP_COLL_ALL_GATHER, bytes, (double)(c->size - 1) / c->size);
    double t0 = osdp_now_seconds();
    return over_link(c, OSDP_COLL_ALL_GATHER, bytes, -1, req, t0, c->ops->all_gather(c, shard, full, count, t, req));
}

osdp_status osdp_comm_reduce_scatter(osdp_comm *c, const void *full, void *shard, size_t count, osdp_dtype t, osdp_request *req)
{
    const size_t bytes = count * (size_t)c->size * osdp_dtype_size(t);
    account(c, OSDP_COLL_REDUCE_SCATTER, bytes, (double)(c->size - 1) / c->size);
    double t0 = osdp_now_seconds();
    return over_link(c, OSDP_COLL_REDUCE_SCATTER, bytes, -1, req, t0,
                     c->ops->reduce_scatter(c, full, shard, count, t, req));
}

osdp_status osdp_comm_reduce_scatter_in_place(osdp_comm *c, void *buf, size_t count, osdp_dtype t, osdp_request *req)
{
    return osdp_comm_reduce_scatter(c, buf, buf, count, t, req);   /* the backends read full == shard as in place */
}

size_t osdp_comm_in_place_offset(const osdp_comm *c, size_t count)
{
    return c->ops->in_place_at_rank ? (size_t)c->rank * count : 0;
}

osdp_status osdp_comm_set_block_order(osdp_comm *c, const int *block_of)
{
    int *order = NULL;
    if (block_of) {
        order = calloc(2 * (size_t)c->size, sizeof *order);
        if (!order) return osdp_error_set(OSDP_ERR_OOM, "comm: out of host memory for a block order");
        for (int r = 0; r < c->size; r++) {
            const int b = block_of[r];
            if (b < 0 || b >= c->size || order[c->size + b]) {
                free(order);
                return osdp_error_set(OSDP_ERR_INPUT, "comm: block %d of rank %d is not a free block of 0..%d", b, r,
                                      c->size - 1);
            }
            order[r] = b;
            order[c->size + b] = 1;   /* taken; once every block is, these are the ones of the counts */
        }
    }
    free(c->block_of);
    c->block_of = order;
    return OSDP_OK;
}

osdp_status osdp_comm_all_reduce(osdp_comm *c, void *buf, size_t count, osdp_dtype t, osdp_request *req)
{
    account(c, OSDP_COLL_ALL_REDUCE, count * osdp_dtype_size(t), 2.0 * (c->size - 1) / c->size);
    double t0 = osdp_now_seconds();
    return over_link(c, OSDP_COLL_ALL_REDUCE, count * osdp_dtype_size(t), -1, req, t0,
                     c->ops->all_reduce(c, buf, count, t, req));
}

osdp_status osdp_comm_broadcast(osdp_comm *c, void *buf, size_t bytes, int root, osdp_request *req)
{
    account(c, OSDP_COLL_BROADCAST, bytes, c->rank == root ? 1.0 : 0.0);
    double t0 = osdp_now_seconds();
    return over_link(c, OSDP_COLL_BROADCAST, bytes, -1, req, t0, c->ops->broadcast(c, buf, bytes, root, req));
}

osdp_status osdp_comm_barrier(osdp_comm *c) { return c->ops->barrier(c); }

/* a call that stays in the backend until it completes: on MPI the collectives in flight advance there
 * (their emulated floors start: osdp_comm_link_inside_backend) */
static void inside_backend(const osdp_comm *c, const void *request)
{
    if (!c->ops->advances_alone) osdp_comm_link_inside_backend(request);
}

osdp_status osdp_comm_send(osdp_comm *c, const void *buf, size_t count, osdp_dtype t, int peer, osdp_request *req)
{
    account(c, OSDP_COLL_P2P, count * osdp_dtype_size(t), 1.0);
    if (!req) inside_backend(c, NULL);
    double t0 = osdp_now_seconds();
    return over_link(c, OSDP_COLL_P2P, count * osdp_dtype_size(t), peer, req, t0, c->ops->send(c, buf, count, t, peer, req));
}

osdp_status osdp_comm_recv(osdp_comm *c, void *buf, size_t count, osdp_dtype t, int peer, osdp_request *req)
{
    if (!req) inside_backend(c, NULL);
    double t0 = osdp_now_seconds();
    return over_link(c, OSDP_COLL_P2P, count * osdp_dtype_size(t), peer, req, t0, c->ops->recv(c, buf, count, t, peer, req));
}

osdp_status osdp_comm_wait(osdp_comm *c, osdp_request *req)
{
    if (!req || !req->impl) return OSDP_OK;
    double t0 = osdp_now_seconds();
    void *request = req->impl;   /* the backend's wait clears it */
    inside_backend(c, request);
    osdp_status s = c->ops->wait(c, req);
    if (s == OSDP_OK) osdp_comm_link_waited(c, request);
    c->traffic.wait_seconds += osdp_now_seconds() - t0;
    return s;
}

osdp_status osdp_comm_group_start(osdp_comm *c)
{
    return c->ops->group_start ? c->ops->group_start(c) : OSDP_OK;
}

osdp_status osdp_comm_group_end(osdp_comm *c)
{
    return c->ops->group_end ? c->ops->group_end(c) : OSDP_OK;
}

int osdp_comm_progress(osdp_comm *c)
{
    return c && c->ops->progress ? c->ops->progress(c) : 0;
}

void osdp_comm_destroy(osdp_comm *c)
{
    if (c && c->ops) {
        osdp_comm_link_detach(c);
        c->ops->destroy(c);
        free(c->block_of);
    }
    memset(c, 0, sizeof *c);
}

void osdp_traffic_reset(osdp_traffic *t) { memset(t, 0, sizeof *t); }

void osdp_traffic_add(osdp_traffic *sum, const osdp_traffic *t)
{
    for (int k = 0; k < OSDP_COLL_N_TYPES; k++) {
        sum->logical[k] += t->logical[k];
        sum->wire[k] += t->wire[k];
        sum->calls[k] += t->calls[k];
    }
    sum->wait_seconds += t->wait_seconds;
}

void osdp_comm_set_tensor_axis(osdp_comm *c) { c->tensor_axis = 1; }
void osdp_comm_set_level(osdp_comm *c, osdp_comm_level level) { c->level = (int)level; }

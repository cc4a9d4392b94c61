/* The communication backend: a table of collectives chosen once at start
 * (MPI on CPU; NCCL on GPUs), with blocking and non-blocking forms.  Callers
 * go through the osdp_comm_* wrappers below, which also account the traffic
 * by collective type — one code path for every backend. */
#ifndef OSDP_COMM_H
#define OSDP_COMM_H

#include <stddef.h>
#include "osdp/dtype.h"
#include "osdp/error.h"

typedef enum osdp_collective {
    OSDP_COLL_ALL_GATHER,
    OSDP_COLL_REDUCE_SCATTER,
    OSDP_COLL_ALL_REDUCE,
    OSDP_COLL_BROADCAST,
    /* the tensor-parallel group's (a communicator made with
     * osdp_comm_set_tensor_axis): kinds of their own, so that a step's
     * traffic tells the mesh's two axes apart */
    OSDP_COLL_TP_ALL_REDUCE,
    OSDP_COLL_TP_ALL_GATHER,
    /* the pipeline axis: point-to-point messages between adjacent stages
     * (activations forward, their gradients backward); a rank counts what it
     * sends (logical = wire = the message's bytes), not what it receives */
    OSDP_COLL_P2P,
    /* the two levels of a data group that spans nodes (osdp/runtime.h: every
     * slice's gradients reduced node-first): the reduce-scatters and a
     * hierarchical slice's gathers inside the node (a communicator set to
     * OSDP_LEVEL_NODE), the reduce-scatters and a hierarchical slice's
     * all-gathers across the nodes (OSDP_LEVEL_CROSS) */
    OSDP_COLL_NODE_ALL_GATHER,
    OSDP_COLL_NODE_REDUCE_SCATTER,
    OSDP_COLL_CROSS_REDUCE_SCATTER,
    OSDP_COLL_CROSS_ALL_GATHER,
    OSDP_COLL_N_TYPES
} osdp_collective;
const char *osdp_collective_name(osdp_collective c);

/* Bytes per collective type.  `logical` counts the full (unsharded) buffer
 * of each call — Ψ for one all-gather of the padded parameters — which is
 * what DESIGN.md §5's 2Ψ / 3Ψ refers to; `wire` is what this rank actually
 * sends ((N-1)/N of it for the ring algorithms). */
typedef struct osdp_traffic {
    unsigned long long logical[OSDP_COLL_N_TYPES];
    unsigned long long wire[OSDP_COLL_N_TYPES];
    unsigned long long calls[OSDP_COLL_N_TYPES];
    double wait_seconds;    /* time blocked in osdp_comm_wait and blocking calls:
                               what compute did not hide */
} osdp_traffic;

typedef struct osdp_request { void *impl; } osdp_request;  /* impl NULL: nothing pending */

typedef struct osdp_comm osdp_comm;

typedef struct osdp_comm_backend {
    const char *name;
    /* shard (count elements) from every rank -> full (N*count), rank order
     * (or the communicator's block order: osdp_comm_set_block_order); shard
     * at this rank's own block of full: in place */
    osdp_status (*all_gather)(osdp_comm *c, const void *shard, void *full, size_t count,
                              osdp_dtype t, osdp_request *req);
    /* sum of full (N*count) over ranks; this rank's block -> shard (count);
     * shard == full: in place, the block left where in_place_at_rank says */
    osdp_status (*reduce_scatter)(osdp_comm *c, const void *full, void *shard, size_t count,
                                  osdp_dtype t, osdp_request *req);
    /* in-place sum over ranks */
    osdp_status (*all_reduce)(osdp_comm *c, void *buf, size_t count, osdp_dtype t, osdp_request *req);
    osdp_status (*broadcast)(osdp_comm *c, void *buf, size_t bytes, int root, osdp_request *req);
    osdp_status (*barrier)(osdp_comm *c);
    /* point to point with rank `peer` of the communicator (tag: the order of
     * the calls between the two ranks; messages between a pair arrive in the
     * order they were sent); waited like the collectives */
    osdp_status (*send)(osdp_comm *c, const void *buf, size_t count, osdp_dtype t, int peer, osdp_request *req);
    osdp_status (*recv)(osdp_comm *c, void *buf, size_t count, osdp_dtype t, int peer, osdp_request *req);
    osdp_status (*wait)(osdp_comm *c, osdp_request *req);
    /* optional (NULL: no-op): the non-blocking collectives issued between
     * them may be fused into one launch (NCCL's ncclGroupStart/End); no
     * blocking call inside, no nesting, and a request issued inside is
     * waited only after group_end */
    osdp_status (*group_start)(osdp_comm *c);
    osdp_status (*group_end)(osdp_comm *c);
    /* Lets c's non-blocking calls in flight advance while the rank computes:
     * MPI moves a non-blocking collective's data only inside the rank's MPI
     * calls (no progress thread), so the runtime pokes its communicators
     * often (osdp/gpt.h's progress hook: between kernels, at every slice use
     * and pass end) and a collective started early moves its rounds then,
     * not all in its wait.  Cheap: one MPI_Request_get_status per request
     * in flight, none when there is none; it completes and frees nothing
     * (each request stays for its wait).  Returns how many of c's calls
     * the host still has to advance: MPI's not yet complete; NCCL's none
     * (the device advances them on its stream: a no-op). */
    int (*progress)(osdp_comm *c);
    void (*destroy)(osdp_comm *c);
    /* where an in-place reduce-scatter leaves this rank's block: 1 at its own
     * block (NCCL's in-place form), 0 at the start of the buffer (MPI_IN_PLACE) */
    int in_place_at_rank;
    /* 1: a non-blocking collective moves its data while the rank computes
     * (NCCL, on the device); 0: only inside the backend's calls (MPI without
     * a progress thread), so an emulated link's floor starts at its wait
     * (osdp/link_emulation.h) */
    int advances_alone;
} osdp_comm_backend;

struct osdp_comm {
    const osdp_comm_backend *ops;
    int rank, size;
    void *impl;
    osdp_traffic traffic;
    int tensor_axis;        /* the mesh's tensor-parallel group: its all-reduces and all-gathers
                               count as OSDP_COLL_TP_ALL_REDUCE / _TP_ALL_GATHER */
    int level;              /* osdp_comm_level: a hierarchical slice's group counts its kinds */
    struct osdp_comm_link *link;   /* the emulated link of a group that spans emulated nodes
                                      (osdp/link_emulation.h); NULL: none */
    int *block_of;          /* (2 size) osdp_comm_set_block_order's: the block of an all-gather's result
                               each rank's part lands at, then size ones (MPI_Iallgatherv's counts);
                               NULL: rank order */
};

/* MPI backend over a duplicate of `mpi_comm` (an MPI_Comm passed as void*
 * to keep mpi.h out of this header). */
osdp_status osdp_comm_create_mpi(osdp_comm *c, const void *mpi_comm);
#ifdef OSDP_HAVE_CUDA
/* in the CUDA plugin (osdp/cuda_plugin.h) or libosdp_cuda.a */
osdp_status osdp_comm_create_nccl(osdp_comm *c, const void *mpi_comm, int local_device);
#endif
/* nccl 1: the CUDA plugin's osdp_comm_create_nccl (OSDP_ERR_INPUT in a build without CUDA or when
 * the plugin could not be loaded), else osdp_comm_create_mpi */
osdp_status osdp_comm_create(osdp_comm *c, const void *mpi_comm, int nccl, int local_device);

/* shared 1: this machine's ranks x threads outnumber its cores (emulated
 * ranks, make check).  The MPI backend's waits then sleep between polls
 * after a short spin instead of yielding now and then: a waiting rank must
 * give its core to the peer it waits for, and a yielding one keeps it until
 * the running peer's time slice ends.  Once, before the first wait. */
void osdp_comm_share_cores(int shared);

/* *value = its largest over the ranks of mpi_comm (an MPI_Comm passed as
 * void*), waited for within the communication timeout (OSDP_COMM_TIMEOUT_S):
 * for the host-side agreements made once per step outside a backend (the
 * stop-signal check); `what` names it in the time-out message. */
osdp_status osdp_comm_max_int(const void *mpi_comm, int *value, const char *what);
osdp_status osdp_comm_max_double(const void *mpi_comm, double *value, const char *what);

/* req == NULL: blocking.  Otherwise the call starts and osdp_comm_wait completes it. */
osdp_status osdp_comm_all_gather(osdp_comm *c, const void *shard, void *full, size_t count, osdp_dtype t, osdp_request *req);
osdp_status osdp_comm_reduce_scatter(osdp_comm *c, const void *full, void *shard, size_t count, osdp_dtype t, osdp_request *req);
osdp_status osdp_comm_all_reduce(osdp_comm *c, void *buf, size_t count, osdp_dtype t, osdp_request *req);
osdp_status osdp_comm_broadcast(osdp_comm *c, void *buf, size_t bytes, int root, osdp_request *req);
osdp_status osdp_comm_barrier(osdp_comm *c);
/* In place: buf (count x size elements) summed over the ranks, this rank's
 * block of the sum left at buf + osdp_comm_in_place_offset(c, count)
 * elements (the backend's place: MPI_IN_PLACE leaves it at the start, NCCL
 * at block `rank`).  The reduce-scatter that needs no destination of its
 * own: a node-first reduction's first stage (osdp/runtime.h). */
osdp_status osdp_comm_reduce_scatter_in_place(osdp_comm *c, void *buf, size_t count, osdp_dtype t, osdp_request *req);
size_t osdp_comm_in_place_offset(const osdp_comm *c, size_t count);
/* From now on c's all-gathers put the part of rank r at block block_of[r]
 * of the result (c->size entries, a permutation of 0..size-1, the same on
 * every rank; copied), in one call (MPI_Iallgatherv with a displacement per
 * rank, NCCL one broadcast per root in a group); traffic and the emulated
 * link count it as any all-gather.  NULL: rank order again.  Local: set it
 * while none of c's all-gathers is in flight.  OSDP_ERR_INPUT when block_of
 * is no permutation, OSDP_ERR_OOM. */
osdp_status osdp_comm_set_block_order(osdp_comm *c, const int *block_of);
/* point to point (OSDP_COLL_P2P: the sender counts count x size bytes) */
osdp_status osdp_comm_send(osdp_comm *c, const void *buf, size_t count, osdp_dtype t, int peer, osdp_request *req);
osdp_status osdp_comm_recv(osdp_comm *c, void *buf, size_t count, osdp_dtype t, int peer, osdp_request *req);
osdp_status osdp_comm_wait(osdp_comm *c, osdp_request *req);
osdp_status osdp_comm_group_start(osdp_comm *c);
osdp_status osdp_comm_group_end(osdp_comm *c);
/* the backend's progress (above); c NULL: 0 */
int osdp_comm_progress(osdp_comm *c);
void osdp_comm_destroy(osdp_comm *c);
/* An early exit's last step before MPI_Finalize (every rank together): frees the MPI communicators the
 * comm layer made and has not freed (its MPI backend's duplicates, the mesh's groups), which MPI_Finalize
 * would leave allocated; what used them is unusable after it */
void osdp_comm_release_all(void);
void osdp_traffic_reset(osdp_traffic *t);
/* *sum += *t, every kind and the wait time (a step's traffic over the mesh's communicators) */
void osdp_traffic_add(osdp_traffic *sum, const osdp_traffic *t);
/* from now on c's all-reduces and all-gathers count as the tensor-parallel kinds */
void osdp_comm_set_tensor_axis(osdp_comm *c);
/* the level of a group of a data group that spans nodes: from now on a
 * NODE or CROSS group's all-gathers and reduce-scatters count as the node /
 * cross kinds */
typedef enum osdp_comm_level { OSDP_LEVEL_FLAT, OSDP_LEVEL_NODE, OSDP_LEVEL_CROSS } osdp_comm_level;
void osdp_comm_set_level(osdp_comm *c, osdp_comm_level level);

#endif

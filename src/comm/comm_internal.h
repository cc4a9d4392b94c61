/* What the MPI and NCCL communication backends share: the time limit of
 * every wait for a collective, and the timed wait for an MPI request (the
 * MPI backend's collectives, the NCCL backend's host-buffer fallback). */
#ifndef OSDP_COMM_INTERNAL_H
#define OSDP_COMM_INTERNAL_H

#include <mpi.h>
#include <stddef.h>
#include "osdp/comm.h"

#include "util/clock.h"   /* osdp_now_seconds, osdp_comm_timeout_from_env: the waits' clock and bound */

/* "all-reduce of 2 float64 elements (collective #7 of this rank)" into buf;
 * count 0 leaves out the size */
void osdp_comm_describe(char *buf, size_t n, const char *what, size_t count, osdp_dtype dtype,
                        unsigned long long seq);

/* The MPI type that carries osdp_dtype t (bfloat16 as uint16: moved, and
 * summed only by osdp_comm_mpi_sum_op's operation) */
MPI_Datatype osdp_comm_mpi_type(osdp_dtype t);
/* the sum of elements of t: MPI_SUM, or for bf16 a user-defined operation
 * (widen, add in fp32, round to nearest even: NCCL's bf16 sum); an MPI error code */
int osdp_comm_mpi_sum_op(osdp_dtype t, MPI_Op *op);
/* OSDP_ERR_COMM "WHAT failed: MPI's message for rc" */
osdp_status osdp_comm_mpi_error(int rc, const char *what);

/* MPI_Iallgather of count elements of t per rank over comm (c's ranks),
 * or with c's block order MPI_Iallgatherv with a displacement per rank (a
 * contiguous block type of count elements: the displacements and counts
 * are c->block_of's own, which outlive the call); shard at this rank's
 * own block of full: MPI_IN_PLACE.  Returns MPI's code. */
int osdp_comm_mpi_iallgather(const osdp_comm *c, MPI_Comm comm, const void *shard, void *full, size_t count,
                             osdp_dtype t, MPI_Request *r);

/* The communicators the comm layer makes (its backends' duplicates, the mesh's groups): recorded when
 * made, freed through osdp_comm_free_tracked (which forgets them; MPI_COMM_NULL: nothing), and on an early
 * exit by osdp_comm_release_all (osdp/comm.h) */
void osdp_comm_track(MPI_Comm comm);
void osdp_comm_free_tracked(MPI_Comm *comm);

/* The last step of a backend's destroy: free its duplicate of the MPI
 * communicator and its state (c->impl, then NULL) */
void osdp_comm_release(osdp_comm *c, MPI_Comm *duplicate);

/* Waits for *req (MPI_Test in a loop) at most timeout_s seconds (0: for
 * ever).  On time-out: OSDP_ERR_COMM with a message naming `label` (what was
 * pending) and the limit; the request is left as it is (the caller ends the
 * job: a collective cannot be cancelled). */
osdp_status osdp_comm_mpi_wait(MPI_Request *req, double timeout_s, const char *label);

/* The emulated link (osdp/link_emulation.h).  attach: at the end of a
 * backend's create, c->link set when the group (ranks of `group`) spans
 * emulated nodes and a link is emulated (NULL otherwise: every call below
 * is then a no-op); detach: before its destroy.  issued: after a call
 * started at t0 has returned (kind: the call's own, bytes: the full buffer
 * or the message; peer: the other rank of a send or receive, -1 for a
 * collective): a blocking call (req NULL) sleeps out the rest of the floor
 * now, a non-blocking one's deadline is kept for waited(c, req->impl),
 * which sleeps it out after the wait. */
struct osdp_comm_link;
void osdp_comm_link_attach(osdp_comm *c, MPI_Comm group);
void osdp_comm_link_detach(osdp_comm *c);
void osdp_comm_link_issued(osdp_comm *c, osdp_collective kind, size_t bytes, int peer, double t0, osdp_request *req);
void osdp_comm_link_waited(osdp_comm *c, void *request);
/* The rank stays inside a backend that moves data only inside its calls (MPI) until a message completes
 * (a blocking send or receive, `request` NULL) or until `request` completes (a wait): the backend's
 * progress engine runs there and advances every collective in flight, so the collectives whose floor has
 * not started start it now, in issue order, on any communicator.  A wait for such a collective itself
 * changes nothing here: its floor starts once it has completed (osdp_comm_link_waited), as a blocking
 * call's. */
void osdp_comm_link_inside_backend(const void *request);

/* The entries every backend's table has, its functions named after them:
 * PREFIX##all_gather and so on (a backend adds .name and what only it has) */
#define OSDP_COMM_BACKEND_ENTRIES(prefix) \
    .all_gather = prefix##all_gather, .reduce_scatter = prefix##reduce_scatter, \
    .all_reduce = prefix##all_reduce, .broadcast = prefix##broadcast, \
    .barrier = prefix##barrier, .send = prefix##send, .recv = prefix##recv, .wait = prefix##wait, .progress = prefix##progress, .destroy = prefix##destroy

#endif

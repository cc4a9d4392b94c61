/* The device mesh (DESIGN.md §9): N = P x D x T ranks on three axes, the
 * tensor-parallel axis innermost (consecutive ranks: a TP group sits inside
 * a node), the data-parallel axis next, the pipeline axis outermost.  Rank r
 * has
 *     tensor index   r mod T
 *     data index     (r / T) mod D
 *     pipeline index r / (T D)
 * One MPI communicator per group (MPI_Comm_split): the T ranks of its tensor
 * group and the D ranks of its data group (same pipeline stage, same tensor
 * index).  The pipeline degree P is 1 for now; its field and index are the
 * formula's, so that the pipeline axis only adds its own groups.  T = P = 1
 * is the one-axis job of before: the data group is every rank, in order. */
#ifndef OSDP_MESH_H
#define OSDP_MESH_H

#include <mpi.h>
#include "osdp/comm.h"
#include "osdp/error.h"

typedef struct osdp_mesh {
    int world_size, world_rank;
    int tp, dp, pp;                 /* the degrees: world_size = pp x dp x tp */
    int tp_rank, dp_rank, pp_rank;  /* this rank's indices on the axes */
    MPI_Comm tp_comm;               /* the tp ranks of this rank's tensor-parallel group, by tensor index */
    MPI_Comm dp_comm;               /* the dp ranks of this rank's data-parallel group, by data index */
    MPI_Comm pp_comm;               /* the pp ranks of this rank's pipeline, by stage */
} osdp_mesh;

/* Splits world_comm (every rank calls it with the same tp and pp, which
 * --tp and --pp gave).  OSDP_ERR_INPUT, the same on every rank and naming
 * --tp / --pp with the numbers, when tp or pp is below 1 or tp x pp does not
 * divide the rank count; no communicator is made then. */
osdp_status osdp_mesh_create(osdp_mesh *mesh, MPI_Comm world_comm, int tp, int pp);
void osdp_mesh_free(osdp_mesh *mesh);

/* "8 ranks = tp 2 x dp 4 x pp 1" into buf */
const char *osdp_mesh_describe(const osdp_mesh *mesh, char *buf, size_t n);

/* The mesh axes a communicator of osdp_mesh_comm_create can span. */
typedef enum osdp_mesh_axis { OSDP_MESH_TENSOR, OSDP_MESH_DATA, OSDP_MESH_PIPELINE } osdp_mesh_axis;

/* The communication backend over one of this rank's groups: NCCL when nccl
 * is set (GPU buffers; local_device: the rank's GPU on its node), MPI
 * otherwise.  The tensor group's counts its all-reduces and all-gathers as
 * the tensor-parallel kinds (osdp/comm.h).  The pipeline's carries the
 * point-to-point messages between stages; the runtime makes two, one per
 * direction (activations forward, gradients backward), so that on NCCL each
 * direction queues on a stream of its own. */
osdp_status osdp_mesh_comm_create(const osdp_mesh *mesh, osdp_mesh_axis axis, int nccl, int local_device,
                                  osdp_comm *out);

#endif

/* The device mesh and its groups (see osdp/mesh.h). */
#include "config.h"
#include "osdp/mesh.h"
#include "comm_internal.h"

#include <stdio.h>
#include <string.h>

/* Every check reads only the arguments and the rank count, which every rank
 * shares: every rank takes the same branch, with the same message. */
static osdp_status check_degrees(int world_size, int tp, int pp)
{
    if (tp < 1) return osdp_error_set(OSDP_ERR_INPUT, "--tp %d: the tensor-parallel degree must be at least 1", tp);
    if (pp < 1) return osdp_error_set(OSDP_ERR_INPUT, "--pp %d: the pipeline-parallel degree must be at least 1", pp);
    if (world_size % (tp * pp) != 0) {   /* name only the option given when the other is 1 */
        char degrees[64];
        if (pp == 1) snprintf(degrees, sizeof degrees, "--tp %d", tp);
        else if (tp == 1) snprintf(degrees, sizeof degrees, "--pp %d", pp);
        else snprintf(degrees, sizeof degrees, "--tp %d x --pp %d", tp, pp);
        return osdp_error_set(OSDP_ERR_INPUT,
                              "%s does not divide the %d ranks: the mesh is ranks = tp x dp x pp, so the rank count "
                              "must be a multiple of %d",
                              degrees, world_size, tp * pp);
    }
    return OSDP_OK;
}

osdp_status osdp_mesh_create(osdp_mesh *mesh, MPI_Comm world_comm, int tp, int pp)
{
    memset(mesh, 0, sizeof *mesh);
    mesh->tp_comm = mesh->dp_comm = mesh->pp_comm = MPI_COMM_NULL;
    MPI_Comm_size(world_comm, &mesh->world_size);
    MPI_Comm_rank(world_comm, &mesh->world_rank);
    osdp_status s = check_degrees(mesh->world_size, tp, pp);
    if (s != OSDP_OK) return s;
    const int r = mesh->world_rank;
    mesh->tp = tp;
    mesh->pp = pp;
    mesh->dp = mesh->world_size / (tp * pp);
    mesh->tp_rank = r % tp;
    mesh->dp_rank = r / tp % mesh->dp;
    mesh->pp_rank = r / (tp * mesh->dp);
    /* colour: what the group's members share; key: the index along the axis */
    const int tp_group = r / tp, dp_group = mesh->pp_rank * tp + mesh->tp_rank, pp_group = r % (tp * mesh->dp);
    if (MPI_Comm_split(world_comm, tp_group, mesh->tp_rank, &mesh->tp_comm) != MPI_SUCCESS ||
        MPI_Comm_split(world_comm, dp_group, mesh->dp_rank, &mesh->dp_comm) != MPI_SUCCESS ||
        MPI_Comm_split(world_comm, pp_group, mesh->pp_rank, &mesh->pp_comm) != MPI_SUCCESS) {
        osdp_mesh_free(mesh);
        return osdp_error_set(OSDP_ERR_COMM, "mesh: MPI_Comm_split failed");
    }
    osdp_comm_track(mesh->tp_comm);
    osdp_comm_track(mesh->dp_comm);
    osdp_comm_track(mesh->pp_comm);
    return OSDP_OK;
}

void osdp_mesh_free(osdp_mesh *mesh)
{
    osdp_comm_free_tracked(&mesh->tp_comm);
    osdp_comm_free_tracked(&mesh->dp_comm);
    osdp_comm_free_tracked(&mesh->pp_comm);
}

const char *osdp_mesh_describe(const osdp_mesh *mesh, char *buf, size_t n)
{
    snprintf(buf, n, "%d rank%s = tp %d x dp %d x pp %d", mesh->world_size, mesh->world_size == 1 ? "" : "s",
             mesh->tp, mesh->dp, mesh->pp);
    return buf;
}

osdp_status osdp_mesh_comm_create(const osdp_mesh *mesh, osdp_mesh_axis axis, int nccl, int local_device,
                                  osdp_comm *out)
{
    const MPI_Comm *group = axis == OSDP_MESH_TENSOR ? &mesh->tp_comm
                          : axis == OSDP_MESH_PIPELINE ? &mesh->pp_comm : &mesh->dp_comm;
    osdp_status s = osdp_comm_create(out, group, nccl, local_device);
    if (s == OSDP_OK && axis == OSDP_MESH_TENSOR) osdp_comm_set_tensor_axis(out);
    return s;
}

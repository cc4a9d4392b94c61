/* The two groups of a data group that spans nodes (osdp/runtime.h): its
 * ranks split by node, then by index inside the node. */
#include "config.h"
#include "osdp/runtime.h"

#include <mpi.h>

osdp_status osdp_node_groups_create(const void *data_mpi_comm, int node, int nccl, int local_device, int for_h,
                                    osdp_comm *node_comm, osdp_comm *cross_comm, int *made)
{
    const MPI_Comm data = *(const MPI_Comm *)data_mpi_comm;
    int data_rank, data_size, node_rank, sizes[2];
    MPI_Comm by_node = MPI_COMM_NULL, by_index = MPI_COMM_NULL;
    *made = 0;
    MPI_Comm_rank(data, &data_rank);
    MPI_Comm_size(data, &data_size);
    /* colour: the node (the index in it); key: the data index, so both groups keep the data group's order */
    if (MPI_Comm_split(data, node, data_rank, &by_node) != MPI_SUCCESS)
        return osdp_error_set(OSDP_ERR_COMM, "node groups: MPI_Comm_split by node failed");
    MPI_Comm_rank(by_node, &node_rank);
    MPI_Comm_size(by_node, &sizes[0]);
    sizes[1] = -sizes[0];
    /* every rank sees the same sizes: the same verdict everywhere */
    MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, data);
    const int equal = sizes[0] == -sizes[1], spans = sizes[0] < data_size;
    if (!(equal && (spans || for_h))) {   /* one node without h, or unequal nodes: the flat reduction */
        MPI_Comm_free(&by_node);
        if (!for_h) return OSDP_OK;
        return osdp_error_set(OSDP_ERR_INPUT, "hierarchical sharding (h) needs as many ranks of each data-parallel "
                              "group on every node (here %d on one, %d on another): use equal nodes "
                              "(--ranks-per-node) or plan without h", sizes[0], -sizes[1]);
    }
    osdp_status s = MPI_Comm_split(data, node_rank, data_rank, &by_index) == MPI_SUCCESS
                  ? OSDP_OK : osdp_error_set(OSDP_ERR_COMM, "node groups: MPI_Comm_split by index failed");
    if (s == OSDP_OK) s = osdp_comm_create(node_comm, &by_node, nccl, local_device);
    if (s == OSDP_OK) {
        s = osdp_comm_create(cross_comm, &by_index, nccl, local_device);
        if (s != OSDP_OK) osdp_comm_destroy(node_comm);
    }
    if (s == OSDP_OK) {
        osdp_comm_set_level(node_comm, OSDP_LEVEL_NODE);
        osdp_comm_set_level(cross_comm, OSDP_LEVEL_CROSS);
        *made = 1;
    }
    MPI_Comm_free(&by_node);   /* the backends made duplicates */
    if (by_index != MPI_COMM_NULL) MPI_Comm_free(&by_index);
    return s;
}

/* Failing together under MPI (see osdp/agree.h). */
#include "osdp/agree.h"
#include "osdp/comm.h"

#include <stdio.h>
#include <string.h>

osdp_status osdp_status_agree(osdp_status s, MPI_Comm comm)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    /* the lowest failing rank as the largest of size - rank, waited for within the communication timeout:
     * a peer stopped between the step's last collective and this one must not hold the others here forever */
    int lowest_failing = size - (s != OSDP_OK ? rank : size);
    osdp_status waited = osdp_comm_max_int(&comm, &lowest_failing, "all-reduce of the ranks' status (their agreement)");
    if (waited != OSDP_OK) return waited;
    const int first = size - lowest_failing;
    if (first == size) return OSDP_OK;
    struct { int code; char msg[1500]; } m;
    memset(&m, 0, sizeof m);
    if (rank == first) {
        m.code = (int)s;
        if (first != 0) snprintf(m.msg, sizeof m.msg, "rank %d: %s", rank, osdp_error_message());
        else snprintf(m.msg, sizeof m.msg, "%s", osdp_error_message());
    }
    MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, first, comm);
    return osdp_error_set((osdp_status)m.code, "%s", m.msg);
}

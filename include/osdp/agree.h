/* Failing together under MPI (STYLE.md): before a rank leaves a path that
 * every rank follows, all ranks agree on one outcome. */
#ifndef OSDP_AGREE_H
#define OSDP_AGREE_H

#include <mpi.h>
#include "osdp/error.h"

/* Collective: every rank passes its status and gets back the same status
 * and message, the lowest failing rank's (its message prefixed "rank R: "
 * when R is not 0); OSDP_OK when no rank failed.  The agreement is waited
 * for within the communication timeout (OSDP_COMM_TIMEOUT_S): a rank whose
 * peer hangs gets OSDP_ERR_COMM naming it, on its own (no agreement is
 * possible then: end the job, osdp_fatal). */
osdp_status osdp_status_agree(osdp_status s, MPI_Comm comm);

#endif

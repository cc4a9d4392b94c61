/* Failing together under MPI (STYLE.md): before a rank leaves a path that
 * every rank follows, all ranks agree on one outcome. */
#ifndef OSDP_AGREE_H
#define OSDP_AGREE_H

#include <mpi.h>
#include "osdp/error.h"

/* Collective: every rank passes its status and gets back the same status
 * and message, the lowest failing rank's (its message prefixed "rank R: "
 * when R is not 0); OSDP_OK when no rank failed. */
osdp_status osdp_status_agree(osdp_status s, MPI_Comm comm);

#endif

/* Error codes and the per-thread error message every module sets.
 *
 * Library code never exits: it returns an osdp_status and records a message
 * with osdp_error_set().  The binary's top level decides what to do (usually
 * osdp_fatal(), which flushes and MPI_Aborts the whole job). */
#ifndef OSDP_ERROR_H
#define OSDP_ERROR_H

#include <stddef.h>

typedef enum osdp_status {
    OSDP_OK = 0,
    OSDP_ERR_INPUT = 1,      /* malformed file, bad option, out-of-range value */
    OSDP_ERR_OOM = 2,        /* allocation refused (real or emulated device limit) */
    OSDP_ERR_IO = 3,         /* open/read/write failed */
    OSDP_ERR_COMM = 4,       /* a collective failed */
    OSDP_ERR_NUMERIC = 5,    /* NaN/Inf loss or gradient */
    OSDP_ERR_INFEASIBLE = 6, /* no plan fits the memory limit */
    OSDP_ERR_INTERNAL = 7
} osdp_status;

/* printf-style; keeps the message until the next call on this thread.
 * Returns `code` so that callers can write `return osdp_error_set(...)`. */
osdp_status osdp_error_set(osdp_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *osdp_error_message(void);
const char *osdp_status_name(osdp_status code);

#endif

/* Error codes and the per-thread error message every module sets.
 *
 * Library code never exits or aborts: it returns an osdp_status and records a
 * message with osdp_error_set() (or, where it cannot return one, with
 * osdp_error_unrecoverable() below).  The binary's top level decides what to
 * do (osdp_gpt: osdp_fatal(), which flushes and MPI_Aborts the whole job). */
#ifndef OSDP_ERROR_H
#define OSDP_ERROR_H

#include <stddef.h>

#ifdef __cplusplus   /* the CUDA sources report through it too */
extern "C" {
#endif

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

/* An error no caller can be told of, because the code that meets it returns
 * nothing: a kernel out of scratch memory, a CUDA or cuBLAS call that failed
 * (a dead device), a communicator whose teardown timed out.  The library does
 * not end the process: osdp_error_unrecoverable() records the first such
 * error of the process (osdp_error_pending() returns its status and
 * osdp_error_pending_message() its message from then on) and calls the
 * handler the program installed, if any.  osdp_gpt installs one that prints
 * the message and aborts the MPI job, since the other ranks may be waiting in
 * a collective this rank will never join; a program without a handler sees
 * the error as the status of its next osdp_runtime_step, which checks
 * osdp_error_pending() after every step.  The code that met the error goes on
 * without doing its work (a kernel leaves its output as it was). */
typedef void (*osdp_unrecoverable_handler)(osdp_status code, const char *message);
void osdp_error_set_unrecoverable_handler(osdp_unrecoverable_handler handler);
void osdp_error_unrecoverable(osdp_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
osdp_status osdp_error_pending(void);
const char *osdp_error_pending_message(void);

#ifdef __cplusplus
}
#endif

#endif

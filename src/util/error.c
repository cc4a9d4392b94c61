#include "osdp/error.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char error_message[2048];   /* room for a no-fit message's breakdown behind a stage's prefix */

osdp_status osdp_error_set(osdp_status code, const char *fmt, ...)
{
    if (!strchr(fmt, '%')) {   /* a message without arguments (the planner's searches set thousands): as it is */
        size_t n = strlen(fmt);
        if (n >= sizeof error_message) n = sizeof error_message - 1;
        memcpy(error_message, fmt, n);
        error_message[n] = '\0';
        return code;
    }
    va_list args;
    va_start(args, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, args);
    va_end(args);
    return code;
}

const char *osdp_error_message(void) { return error_message; }

const char *osdp_status_name(osdp_status code)
{
    switch (code) {
    case OSDP_OK: return "ok";
    case OSDP_ERR_INPUT: return "bad input";
    case OSDP_ERR_OOM: return "out of memory";
    case OSDP_ERR_IO: return "I/O error";
    case OSDP_ERR_COMM: return "communication error";
    case OSDP_ERR_NUMERIC: return "numerical error";
    case OSDP_ERR_INFEASIBLE: return "infeasible";
    case OSDP_ERR_INTERNAL: return "internal error";
    }
    return "unknown error";
}

/* ---- errors no caller can be told of (osdp/error.h) ---- */

static osdp_unrecoverable_handler unrecoverable_handler;
static atomic_int pending_status;      /* the first unrecoverable error's status, 0 before */
static char pending_message[1024];     /* written once, by the thread that set pending_status */

void osdp_error_set_unrecoverable_handler(osdp_unrecoverable_handler handler) { unrecoverable_handler = handler; }

void osdp_error_unrecoverable(osdp_status code, const char *fmt, ...)
{
    char message[sizeof pending_message];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    int expected = 0;
    if (atomic_compare_exchange_strong(&pending_status, &expected, code ? (int)code : (int)OSDP_ERR_INTERNAL))
        snprintf(pending_message, sizeof pending_message, "%s", message);
    if (unrecoverable_handler) unrecoverable_handler(code, message);
}

osdp_status osdp_error_pending(void) { return (osdp_status)atomic_load(&pending_status); }

const char *osdp_error_pending_message(void) { return osdp_error_pending() ? pending_message : ""; }

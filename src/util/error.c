#include "osdp/error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char error_message[1024];

osdp_status osdp_error_set(osdp_status code, const char *fmt, ...)
{
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

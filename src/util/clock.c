/* The one clock, and the bound on every wait (see util/clock.h). */
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double osdp_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double osdp_comm_timeout_from_env(int rank)
{
    const char *name = "OSDP_COMM_TIMEOUT_S";
    const char *v = getenv(name);
    if (!v || !*v) {
        name = "OSDP_NCCL_TIMEOUT_S";
        v = getenv(name);
    }
    if (!v || !*v) return OSDP_COMM_DEFAULT_TIMEOUT_S;
    char *end;
    double t = strtod(v, &end);
    if (end != v && *end == '\0' && t >= 0 && t < 1e12) return t;
    if (rank == 0)
        fprintf(stderr, "osdp_gpt: warning: %s=%s is not a number of seconds >= 0; using %.0f\n", name, v,
                OSDP_COMM_DEFAULT_TIMEOUT_S);
    return OSDP_COMM_DEFAULT_TIMEOUT_S;
}

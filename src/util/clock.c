/* The one clock (see osdp/clock.h). */
#include "util/clock.h"

#include <time.h>

double osdp_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

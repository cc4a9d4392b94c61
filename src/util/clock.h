/* The one clock: monotonic seconds, for step times, timeouts and benchmarks. */
#ifndef OSDP_CLOCK_H
#define OSDP_CLOCK_H

/* seconds since an arbitrary fixed point (CLOCK_MONOTONIC) */
double osdp_now_seconds(void);

#endif

/* The one clock: monotonic seconds, for step times, timeouts and benchmarks;
 * and the bound on every wait that the timeouts measure against it. */
#ifndef OSDP_CLOCK_H
#define OSDP_CLOCK_H

/* seconds since an arbitrary fixed point (CLOCK_MONOTONIC) */
double osdp_now_seconds(void);

#define OSDP_COMM_DEFAULT_TIMEOUT_S 600.0

/* Seconds a rank waits for one collective (or NCCL's set-up or teardown)
 * before it gives up with a message naming what was pending: a peer died,
 * hangs, or called a different collective.  From OSDP_COMM_TIMEOUT_S, or
 * OSDP_NCCL_TIMEOUT_S (its older name); 0 waits for ever; default 600.
 * A value that is not a number of seconds >= 0 keeps the default, and rank
 * 0 warns. */
double osdp_comm_timeout_from_env(int rank);

#endif

/* A collective's cost fitted to measured times (the profiler's: osdp_gpt
 * profile, src/cli/profile_cmd.c).
 *
 * A call over a ring of n ranks moving S bytes in total takes
 *     t = call + (n-1) alpha + (n-1)/n S beta
 * (osdp/device.h, osdp_collective_time): `steps` = n - 1 ring steps and
 * `step_bytes` = (n-1)/n S bytes through each rank.  `call` is what a call
 * costs once whatever the ring's length (a sleeping rank waking up, the
 * call's own bookkeeping); alpha is the latency of one step.  On one group
 * size the two are the same constant and cannot be told apart (the fit
 * then puts everything into alpha, which is right for that size only); on
 * two or more sizes, e.g. the two ranks of a pair of nodes and the whole
 * group across them, they are.  A point may also count its steps
 * otherwise (an all-reduce: 2 (n-1) steps, 2 (n-1)/n S bytes).
 *
 * The fit: least squares weighted by 1 / t^2 (relative errors, so that the
 * small sizes fix the latencies and the large ones the bandwidth) under
 * call >= 0 and alpha >= 0, solved exactly by trying every subset of
 * {call, alpha} as the free terms (the others 0) and keeping the feasible
 * solution of the least residual. */
#ifndef OSDP_COLLECTIVE_FIT_H
#define OSDP_COLLECTIVE_FIT_H

#include "osdp/device.h"
#include "osdp/error.h"

/* Fits *out (call, alpha, beta) to n points (steps[i], step_bytes[i],
 * seconds[i], every seconds[i] > 0); with_call 0: call stays 0 (the old
 * one-size fit).  *r2 (may be NULL): 1 - weighted residual / weighted
 * total.  OSDP_ERR_INPUT when the fit with every latency term free has
 * beta <= 0 (times that do not grow with size: a disturbed measurement)
 * or a time is not > 0. */
osdp_status osdp_collective_fit(const double *steps, const double *step_bytes, const double *seconds, int n, int with_call,
                                osdp_collective_cost *out, double *r2);

#endif

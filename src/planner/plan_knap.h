/* The planner's knapsacks (plan_knap.c): one multiple-choice knapsack
 * (osdp/search.h) over the allowed choices of a context, cached by allow
 * set (plan_knap_cache.c), and the LP and byte-threshold bounds on it.
 * Calls only the context below it (map in osdp/planner.h). */
#ifndef OSDP_PLAN_KNAP_H
#define OSDP_PLAN_KNAP_H

#include "plan_context.h"

/* The knapsack over the allowed choices (NULL: all) with budget lim;
 * plans slower than cap are not wanted (INFINITY: any).  OSDP_ERR_INFEASIBLE
 * when none fits.  Results for an allow set are cached in ctx and reused
 * while they still answer the question (lim and cap no larger). */
osdp_status osdp_ps_knapsack(osdp_ps_context *ctx, const unsigned char *allow, long long lim, double cap, int *out,
                             double *obj);
/* The knapsack of the peak at one moment alone: moment u (plan_context.h:
 * an operator's backward or forward), where a plan holds
 * cst + sum_i osdp_ps_moment_bytes(u, i, c_i) (every held byte, the later
 * operators' activations not alive, the neighbours' terms); budget room = the limit less cst.  Every plan that fits
 * the limit fits it, so its optimum bounds theirs from below, whatever the
 * transient bound.  OSDP_ERR_INFEASIBLE when none fits or none is faster
 * than cap.  Not cached. */
osdp_status osdp_ps_moment_knapsack(osdp_ps_context *ctx, const unsigned char *allow, int u, long long room, double cap,
                                    int *out, double *obj);
/* the fewest bytes of any plan faster than best (LLONG_MAX: none) */
osdp_status osdp_ps_fewest_bytes_faster(osdp_ps_context *ctx, double best, int *ch, long long *out);
/* LP lower bound of the knapsack over the allowed choices (NULL: all) with budget lim */
double osdp_ps_lp_bound(const osdp_ps_context *ctx, const unsigned char *allow, long long lim);
/* the same for osdp_ps_moment_knapsack's knapsack (moment u, budget room) */
double osdp_ps_moment_lp_bound(const osdp_ps_context *ctx, const unsigned char *allow, int u, long long room);
/* Drops from A, operator by operator in order, each allowed choice c of
 * operator i for which drop(arg, v) says so, v the LP bound of the knapsack
 * over A with operator i's row {c} alone and budget lim (osdp_ps_lp_bound's
 * value, up to the rounding its loosening covers); the rows of the
 * operators before i are those left by their own turn.  The same as that
 * loop of whole LP bounds, each choice one binary search (plan_knap.c).
 * 1, or 0 when some operator is left without a choice (or allowed none),
 * -1 out of memory. */
int osdp_ps_lp_prune_forced(const osdp_ps_context *ctx, unsigned char *A, long long lim,
                            int (*drop)(void *arg, double bound), void *arg);

#endif

/* The planner's branch and bound for one transient bound d (plan_bnb.c):
 * knapsacks (plan_knap.h) under the constraints Z_u <= d, and constraint
 * propagation.  Calls only the layers below it (map in osdp/planner.h). */
#ifndef OSDP_PLAN_BNB_H
#define OSDP_PLAN_BNB_H

#include "plan_knap.h"

/* the best plan with every true Z_u <= d and knapsack budget lim among the
 * choices `base` allows (base is left as it was) */
osdp_status osdp_ps_bnb(osdp_ps_context *ctx, unsigned char *base, long long d, long long lim, osdp_ps_best *best,
                        int *ch);
/* Proves a range of transient bounds [d_lo, d_hi] at once (plan_bnb.c
 * says how): *proved 1 when no plan of base whose true Z lies in the range
 * beats the best (plans found on the way that settle their node are
 * offered); 0 when the range must be searched in smaller pieces.  lim: the
 * held-bytes budget at d_lo; room_total: the limit less the fixed bytes
 * (the time search's test that a plan fits). */
osdp_status osdp_ps_bnb_prove(osdp_ps_context *ctx, unsigned char *base, long long d_lo, long long d_hi, long long lim,
                              long long room_total, osdp_ps_best *best, int *ch, int *proved);
/* drops from A the choices no plan of A respecting every moment <= d (Z_u
 * and F_u, plan_context.h) takes; 0 when A is left empty.  mn: scratch of
 * PS_PROPAGATE_SCRATCH n_ops */
#define PS_PROPAGATE_SCRATCH 10
int osdp_ps_propagate(const osdp_ps_context *ctx, unsigned char *A, long long d, long long *mn);

#endif

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
/* drops from A the choices no plan of A respecting every Z_u <= d takes;
 * 0 when A is left empty.  mn: scratch of 7 n_ops */
int osdp_ps_propagate(const osdp_ps_context *ctx, unsigned char *A, long long d, long long *mn);

#endif

/* The planner's search over the transient bound (plan_search.c): the
 * candidates d, each solved by branch and bound (plan_bnb.h).  Called by
 * the planner driver (planner.c); map in osdp/planner.h. */
#ifndef OSDP_PLAN_SEARCH_H
#define OSDP_PLAN_SEARCH_H

#include "plan_bnb.h"

/* the best plan with peak <= limit (minimise_memory: the smallest peak);
 * best->choice caller-allocated [n_ops] */
osdp_status osdp_ps_search(osdp_ps_context *ctx, long long limit, osdp_ps_best *best);

#endif

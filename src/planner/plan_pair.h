/* The planner's bound of a branch-and-bound node (plan_bnb.c) by its two
 * knapsack constraints at once: held bytes sum R <= lim and one moment's
 * true transient (plan_context.h: Z_u or F_u, the terms of u-1, u, u+1 and
 * the later operators' -acts) <= d.  Calls only the context below it. */
#ifndef OSDP_PLAN_PAIR_H
#define OSDP_PLAN_PAIR_H

#include "plan_context.h"

/* The least objective of any plan of the allowed choices with sum R <= lim
 * and moment m's true transient <= d, by dynamic programming over the
 * operators on states (moment terms so far, R so far, objective so far),
 * those with the same terms kept on their (R, objective) Pareto front:
 * exact when the moment's terms take few distinct sums (a stage's identical
 * blocks, --recompute auto), a lower bound on every plan of a node that
 * respects both constraints.  States whose objective plus the least of the
 * operators after reaches cap are dropped (the answer is then INFINITY
 * when no plan is below cap).  -INFINITY (no bound) when the states of
 * all operators together outnumber max_states, an operator allows more than 16 choices, or
 * memory runs out.  A finite answer's plan
 * (choices per operator) goes to plan[n_ops]. */
double osdp_ps_pair_bound(const osdp_ps_context *ctx, const unsigned char *allow, int m, long long lim, long long d,
                          double cap, size_t max_states, int *plan);

#endif

/* Lower bounds on a pipeline's step for the 3D search (src/planner/planner_3d.c):
 * from each operator's fastest choice alone (no memory limit), before any
 * stage is searched.
 *
 * The simulated step (osdp_pipe_simulate) of P stages whose passes take
 * c_s = f_s + b_s per micro-batch, M micro-batches: stage s starts its
 * first forward no earlier than the forwards of the stages before it, runs
 * its 2M passes one after another, and stage 0's last backward follows
 * stage s's through the backwards of the stages between, so
 *     step >= g_s = sum_{q<s} c_q + M c_s     for every s
 * (messages and waits only add; this holds for 1F1B and GPipe, whose every
 * stage runs micro-batch M-1's backward last).  With c_s at least the sum
 * of its operators' fastest times, that is the bound of one split
 * (osdp_3d_split_bound).  Over every split of operators of total W: if
 * every g_s <= L then L - sum_{q<=s} c_q >= (L - sum_{q<s} c_q)(1 - 1/M),
 * so L - W >= L (1 - 1/M)^P, L >= W / (1 - (1 - 1/M)^P); and L >= M c_s
 * >= M max_i t_i (osdp_3d_step_bound).  The step's closing all-reduce is
 * added by the caller.
 * Interleaved (V chunks per stage, any split into P V chunks): rank s runs
 * its chunks' 2 V M passes one after another, so the step is at least the
 * busiest rank's work, at least M W / P, and at least M max_i t_i (the
 * chunk holding operator i runs it M times): osdp_3d_chunks_bound, a bound
 * of every V and every split at once. */
#ifndef OSDP_PLANNER_3D_BOUND_H
#define OSDP_PLANNER_3D_BOUND_H

#include "osdp/planner.h"

/* whether the bounds above hold for the schedule's pass orders */
int osdp_3d_schedule_bounded(osdp_pipe_schedule schedule);
/* op_s[i]: operator i's fastest choice's time per micro-batch on the mesh T x D x P at micro-batch b of M
 * per step (the fastest the stage search could give it: osdp_ps_context_build's choices, all kept); *sync_s
 * the step's closing all-reduce on that mesh; layout: one rank's parts at T; dev: the device as read */
osdp_status osdp_3d_op_times(const osdp_layout *layout, const osdp_device *dev, const osdp_planner_options *o, int tp,
                             int dp, int pp, int b, int M, double *op_s, double *sync_s);
double osdp_3d_step_bound(const double *op_s, int n_ops, int P, int M);
double osdp_3d_chunks_bound(const double *op_s, int n_ops, int P, int M);
double osdp_3d_split_bound(const double *op_s, const int *bounds, int P, int M);

#endif

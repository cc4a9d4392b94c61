/* The pipeline's planner as the 3D search calls it (src/planner/planner_3d.c):
 * osdp_planner_pipeline with a cache of stage results (stage_cache.h; NULL:
 * none), and the check of a chosen pipeline's stage peaks against the
 * runtime's stage schedule, which the search runs once on its answer
 * rather than on every candidate (o->verify is then 0 for the candidates).
 * layout: the layout of one rank's parts at T, built once by the caller
 * (NULL: built here); classes: its operators' osdp_stage_classes (NULL:
 * computed here when there is a cache).
 * cutoff >= 0: only a step of at most this is wanted (INFINITY: any); when
 * bounds on the stages' plans (each stage's LP bound, then the planned
 * stages' own times, in osdp_3d_split_bound's chain) show that no
 * micro-batch can give one, or that some stage cannot fit whatever its
 * plan, OSDP_ERR_INFEASIBLE without a message and *bounded = 1; cutoff < 0:
 * no bounds, every micro-batch searched (osdp_planner_pipeline).
 * chunks_bound: the caller may interleave the answer (osdp_pipe_interleave_choose): at an M that is a multiple
 * of P the bounds are those of either schedule, the smaller (planner_3d_bound.h). */
#ifndef OSDP_PLANNER_PIPELINE_H
#define OSDP_PLANNER_PIPELINE_H

#include "osdp/planner.h"
#include "osdp/schedule.h"
#include "stage_cache.h"

osdp_status osdp_planner_pipeline_cached(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                                         const osdp_planner_options *o, int tp, int pp, const int *bounds,
                                         osdp_pipe_schedule schedule, const osdp_layout *layout,
                                         const int *classes, osdp_stage_cache *cache, double cutoff,
                                         int chunks_bound, int *bounded, osdp_pipe_choice *out);
/* every stage's peak on the runtime's stage schedule (osdp_schedule_predict) into schedule_peak, where the
 * planner verifies peaks (o->verify and the runtime's element sizes on dev); a difference from the cost
 * model's is OSDP_ERR_INTERNAL */
osdp_status osdp_pipe_choice_verify(const osdp_device *dev, const osdp_planner_options *o, osdp_pipe_choice *c);

/* the runtime's schedule options of stage s of c's pipeline: c's step, its node groups at c's levels, the
 * weights of dev's element size */
void osdp_pipe_choice_stage_schedule(const osdp_pipe_choice *c, const osdp_device *dev, int s, osdp_schedule_options *so);

/* a lower bound on the step of the split `bounds` of the mesh P x T (D = o->geo.n_ranks / (T P)) at micro-batch
 * b of M: each stage's LP bound under its memory limit in the chain of planner_3d_bound.h, INFINITY when some
 * stage cannot fit; layout: one rank's parts at T; classes: their osdp_stage_classes (NULL: none; with them
 * the stages of one stage-cache key share one bound); dev: the device as read; chunks: the smaller of that
 * and the interleaved schedule's bound (chunks_bound above), *bound_1f1b (unless NULL) the first alone */
osdp_status osdp_pipe_split_bound(const osdp_layout *layout, const int *classes, const osdp_device *dev,
                                  const osdp_planner_options *o, int tp, int pp, osdp_pipe_schedule schedule,
                                  const int *bounds, int b, int M, int chunks, double *bound, double *bound_1f1b);
/* the split osdp_planner_pipeline takes when none is given (osdp_planner_stage_split of all-DP times) */
osdp_status osdp_pipe_balanced_split(const osdp_layout *layout, const osdp_device *dev, const osdp_planner_options *o,
                                     int tp, int pp, int *bounds);

#endif

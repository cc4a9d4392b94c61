/* Per-stage results of the pipeline's planner, reused across the meshes,
 * stage splits and micro-batches of one 3D search (src/planner/planner_3d.c).
 *
 * A stage's search (osdp_planner_plan_batch over its operators, then its
 * peak on the pipeline's pass order, osdp_pipe_stage_peak) depends on its
 * operators' contents (sizes, costs, cuts: not their names nor block
 * numbers), its recompute flags, the mesh (T, D, P: the network levels),
 * whether it receives a boundary (s > 0: its message buffers), the
 * micro-batch b, the micro-batches per step M, the schedule and the
 * micro-batches it holds in flight (for 1F1B and GPipe these and M fix its
 * pass order); the options and the device are those of one search.  Two
 * stages that agree on all of these get the same result: the second is a
 * copy of the first.  A schedule whose stage order needs more than (in
 * flight, M) (e.g. virtual stages) must add it to the key. */
#ifndef OSDP_STAGE_CACHE_H
#define OSDP_STAGE_CACHE_H

#include "osdp/layout.h"
#include "osdp/planner.h"

typedef struct osdp_stage_key {
    /* the mesh (geo.tp_size, geo.n_ranks: D, geo.pp_size), b = geo.micro_batch, M = geo.accum_steps and
     * geo.pipe_schedule; its other fields are not part of the key */
    osdp_step_geometry geo;
    int receives, in_flight, n_ops;
    const int *classes;       /* [n_ops] each operator's content class (osdp_stage_classes) */
    const int *recompute;     /* [n_ops] the stage's fixed recompute flags, or NULL */
} osdp_stage_key;

typedef struct osdp_stage_cache osdp_stage_cache;

osdp_stage_cache *osdp_stage_cache_new(void);   /* NULL: out of memory (the caller plans without one) */
void osdp_stage_cache_free(osdp_stage_cache *cache);
/* classes[i] = the first operator of layout with the contents of operator i */
void osdp_stage_classes(const osdp_layout *layout, int *classes);
/* a stored result for key: 1 with its status, peak and message (OSDP_OK: *result a copy to free), else 0 */
int osdp_stage_cache_find(const osdp_stage_cache *cache, const osdp_stage_key *key, osdp_status *status,
                          osdp_planner_result *result, long long *peak_bytes, const char **message);
/* store a stage's outcome (OSDP_OK with its result and peak, or OSDP_ERR_INFEASIBLE with why); out of memory
 * stores nothing */
void osdp_stage_cache_put(osdp_stage_cache *cache, const osdp_stage_key *key, osdp_status status,
                          const osdp_planner_result *result, long long peak_bytes, const char *message);
/* whether two stages agree on everything the key holds (the cache's own test) */
int osdp_stage_key_equal(const osdp_stage_key *a, const osdp_stage_key *b);
/* lookups answered from the cache */
long long osdp_stage_cache_hits(const osdp_stage_cache *cache);

#endif

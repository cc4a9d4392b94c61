/* The pipeline axis of the planner (osdp/planner.h): the default stage
 * split, and OSDP inside every stage (each stage's operators planned by the
 * exact per-operator search over its data group, with the micro-batches it
 * holds), the pipeline's step by osdp/pipeline_cost.h. */
#include "osdp/cost_model.h"
#include "osdp/planner.h"
#include "osdp/schedule.h"
#include "choice_memo.h"
#include "plan_context.h"
#include "plan_knap.h"
#include "planner_pipeline.h"
#include "util/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

osdp_status osdp_planner_stage_split(const osdp_cost_model *cm_in, const osdp_plan *plan, int micro_batch, int accum,
                                     int P, int *bounds)
{
    const int n = cm_in->layout->n_ops;
    osdp_cost_model cm = *cm_in;
    cm.recompute = plan ? plan->recompute : NULL;
    cm.reduce_once = plan ? plan->reduce_once : NULL;
    double *op_time = malloc(sizeof *op_time * (size_t)n);
    if (!op_time) return osdp_error_set(OSDP_ERR_OOM, "stage split: out of host memory");
    for (int i = 0; i < n; i++) {
        osdp_op_time t;
        osdp_cost_op_time(&cm, i, plan ? plan->slices[i] : 1, plan ? plan->zdp_slices[i] : 0, micro_batch, accum, &t);
        op_time[i] = t.total;
    }
    osdp_status s = osdp_stage_split_balanced(op_time, n, P, bounds);
    free(op_time);
    return s;
}

void osdp_pipe_choice_free(osdp_pipe_choice *choice)
{
    if (!choice) return;
    for (int s = 0; s < choice->n_stages_planned; s++) osdp_planner_result_free(&choice->stage[s].result);
    choice->n_stages_planned = 0;
    osdp_plan_free(&choice->plan);
    if (choice->layout_built) osdp_layout_free(&choice->layout);
    choice->layout_built = 0;
}

/* a stage's plan into the whole model's, from operator lo on */
static void copy_stage_plan(const osdp_plan *stage, int lo, osdp_plan *whole)
{
    for (int i = 0; i < stage->n_ops; i++) {
        whole->slices[lo + i] = stage->slices[i];
        whole->zdp_slices[lo + i] = stage->zdp_slices[i];
        whole->recompute[lo + i] = stage->recompute[i];
        whole->hierarchical[lo + i] = stage->hierarchical[i];
        whole->reduce_once[lo + i] = stage->reduce_once[i];
    }
}

const osdp_cost_hierarchy *osdp_pipe_choice_hierarchy(const osdp_pipe_choice *c)
{
    return c->hierarchical ? &c->hierarchy : NULL;
}

void osdp_pipe_choice_stage_schedule(const osdp_pipe_choice *c, const osdp_device *dev, int s, osdp_schedule_options *so)
{
    *so = (osdp_schedule_options){.geo = c->geo, .pp_stage = s};   /* its prefetch and padding: the options' */
    so->geo.node_ranks = c->hierarchical ? c->hierarchy.node_ranks : 0;
    so->geo.weight_dtype = dev->param_bytes == 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32;
}

void osdp_pipe_choice_cost_model(osdp_cost_model *cm, const osdp_pipe_choice *c, const osdp_device *dev,
                                 const osdp_planner_options *o, const osdp_layout *layout)
{
    osdp_step_geometry geo = o->geo;
    geo.n_ranks = c->geo.n_ranks;
    osdp_cost_model_init(cm, layout, dev, &geo, o->cost, osdp_pipe_choice_hierarchy(c));
}

/* bytes per rank of a baseline's replicated state for operators [lo, hi) over D data-parallel ranks */
static long long stage_replicated_bytes(const osdp_layout *layout, int lo, int hi, int D, int bytes_per_param)
{
    if (bytes_per_param <= 0 || D <= 1) return 0;
    long long params = 0;
    for (int i = lo; i < hi; i++) params += (long long)layout->op[i].numel;
    return params * bytes_per_param - params * bytes_per_param / D;
}

/* every stage planned at micro-batch b and M micro-batches into *c (whose
 * stages are freed first); OSDP_ERR_INFEASIBLE names the stage that does
 * not fit */
/* stage s's search options at micro-batch b of M (its in-flight micro-batches and message buffers, its
 * operators' recompute flags) and its limit less a baseline's replicated state */
static void stage_options(const osdp_device *dev, const osdp_planner_options *o, int b, int M, const osdp_pipe_choice *c,
                          int s, osdp_stage_plan *st, osdp_planner_options *so, long long *replicated, long long *limit)
{
    const int P = c->geo.pp_size;
    memset(st, 0, sizeof *st);
    st->lo = c->geo.stage_bounds[s];
    st->hi = c->geo.stage_bounds[s + 1];
    st->in_flight = osdp_pipe_in_flight(c->geo.pipe_schedule, P, s, M);
    st->schedule_peak = -1;
    *so = *o;
    so->geo.n_ranks = c->geo.n_ranks;
    so->hierarchy = osdp_pipe_choice_hierarchy(c);
    so->global_batch = 0;
    so->geo.micro_batch = b;
    so->verify = 0;   /* the stage's peak is checked against its schedule below, on the whole layout */
    so->recompute = o->recompute ? o->recompute + st->lo : NULL;
    so->stage_in_flight = st->in_flight;
    so->stage_buffer_bytes = osdp_pipe_stage_buffer_bytes(&c->layout, c->geo.stage_bounds, s, b, st->in_flight);
    so->stage_next_passes = osdp_pipe_after_backward(c->geo.pipe_schedule, P, s, M);
    /* a baseline's replicated state (osdp_planner_options) is resident all
     * step: the stage's search sees the limit less it */
    *replicated = stage_replicated_bytes(&c->layout, st->lo, st->hi, c->geo.n_ranks, o->replicated_bytes_per_param);
    *limit = (o->mem_limit > 0 ? o->mem_limit : dev->mem_limit) - *replicated;
    if (*replicated > 0) so->mem_limit = *limit;
}

/* a lower bound on the step of the stages' plans: each stage's operators' time at least the LP bound of
 * its search (osdp_ps_lp_bound: the fastest choices the memory limit allows, fractionally), the planned
 * stages' their own (busy[s] >= 0), in osdp_3d_split_bound's chain; INFINITY when a stage cannot fit.
 * chunks: the plan may also run interleaved (osdp_pipe_interleave_choose), whose step is at least the
 * busiest rank's work, at least the operators' total over P: the smaller of the two bounds.  stage_lp
 * (NULL: none): each stage's LP bound once computed (< 0: not yet), kept across calls on one (c, b, M).
 * classes (osdp_stage_classes of c's layout; NULL: none): a stage whose stage-cache key (stage_cache.h:
 * contents, recompute flags, receiving, in flight; the mesh, b, M and schedule are the call's) equals an
 * earlier stage's takes its bound, the same context built from the same options (under 1F1B the stages
 * before the last M all hold M micro-batches: a 64-stage pipeline at M = 8 has 57 of one key but for
 * their contents) */
/* stage s's stage-cache key (stage_cache.h) at micro-batch b of M: what its search's result depends on */
static osdp_stage_key stage_key(const osdp_pipe_choice *c, const osdp_planner_options *o, const int *classes, int b,
                                int M, int s)
{
    const int *sb = c->geo.stage_bounds, P = c->geo.pp_size;
    return (osdp_stage_key){.geo = {.tp_size = c->geo.tp_size, .n_ranks = c->geo.n_ranks, .pp_size = P,
                                    .micro_batch = b, .accum_steps = M, .pipe_schedule = c->geo.pipe_schedule},
                            .receives = s > 0, .in_flight = osdp_pipe_in_flight(c->geo.pipe_schedule, P, s, M),
                            .n_ops = sb[s + 1] - sb[s], .classes = classes ? classes + sb[s] : NULL,
                            .recompute = o->recompute ? o->recompute + sb[s] : NULL};
}

static int same_stage_key(const osdp_pipe_choice *c, const osdp_planner_options *o, const int *classes, int b, int M,
                          int s, int q)
{
    const osdp_stage_key ks = stage_key(c, o, classes, b, M, s), kq = stage_key(c, o, classes, b, M, q);
    return osdp_stage_key_equal(&ks, &kq);
}

static osdp_status stages_bound(const osdp_device *dev, const osdp_planner_options *o, int b, int M,
                                const osdp_pipe_choice *c, const double *busy, int chunks, const int *classes,
                                double *stage_lp, double *bound, double *chain_bound)
{
    const int P = c->geo.pp_size;
    double before = 0, most = 0, total = 0;
    double lp[OSDP_MAX_STAGES];   /* this call's stage bounds, for the stages of one key */
    for (int s = 0; s < P; s++) {
        double t = busy ? busy[s] : -1;
        lp[s] = stage_lp ? stage_lp[s] : -1;
        for (int q = 0; q < s && t < 0 && lp[s] < 0 && classes; q++)
            if (lp[q] >= 0 && same_stage_key(c, o, classes, b, M, s, q)) lp[s] = lp[q];
        if (t < 0 && lp[s] >= 0) t = lp[s];
        else if (t < 0) {
            osdp_stage_plan st;
            osdp_planner_options so;
            long long replicated, limit;
            stage_options(dev, o, b, M, c, s, &st, &so, &replicated, &limit);
            osdp_layout sub = osdp_pipe_stage_layout(&c->layout, st.lo, st.hi);
            osdp_planner_result counters;
            memset(&counters, 0, sizeof counters);
            osdp_ps_context ctx;
            osdp_status status = osdp_ps_context_build(&ctx, &sub, dev, &so, b, M, 2, NULL, &counters);
            if (status != OSDP_OK) return status;
            t = limit <= 0 ? INFINITY : osdp_ps_lp_bound(&ctx, NULL, limit - ctx.fixed_bytes - osdp_ps_min_transient(&ctx));
            osdp_ps_context_free(&ctx);
            lp[s] = t;
        }
        if (stage_lp) stage_lp[s] = lp[s];
        if (isinf(t)) {
            *bound = INFINITY;
            if (chain_bound) *chain_bound = INFINITY;
            return OSDP_OK;
        }
        most = fmax(most, before + t);
        before += t / M;
        total += t;
    }
    const double sync = osdp_cost_step_sync_time(dev, c->geo.tp_size, c->geo.n_ranks, P);
    if (chain_bound) *chain_bound = most + sync;
    *bound = (chunks ? fmin(most, total / P) : most) + sync;
    return OSDP_OK;
}

/* every stage planned at micro-batch b and M micro-batches into *c (whose
 * stages are freed first); OSDP_ERR_INFEASIBLE names the stage that does
 * not fit.  cutoff >= 0: only a step of at most this (INFINITY: any) is
 * wanted; *bounded = 1 (with OSDP_ERR_INFEASIBLE, no message) when a bound
 * shows the stages cannot give one, or some stage cannot fit; < 0: no bounds */
static osdp_status plan_stages_memo(const osdp_device *dev, const osdp_planner_options *o, int b, int M,
                                    osdp_pipe_choice *c, osdp_stage_cache *cache, const int *classes, double cutoff,
                                    int chunks, int *bounded)
{
    const int P = c->geo.pp_size;
    osdp_cost_model cm;
    osdp_pipe_choice_cost_model(&cm, c, dev, o, &c->layout);
    for (int s = 0; s < c->n_stages_planned; s++) osdp_planner_result_free(&c->stage[s].result);
    c->n_stages_planned = 0;
    *bounded = 0;
    /* busy: the planned stages' times; stage_lp: the others' bounds, each built once (their contexts were
     * built again after every planned stage: P^2 / 2 of them, most of a 32-stage pipeline's search) */
    double busy[OSDP_MAX_STAGES], stage_lp[OSDP_MAX_STAGES];
    for (int s = 0; s < P; s++) busy[s] = stage_lp[s] = -1;
    if (cutoff >= 0) {
        double bound;
        osdp_status status = stages_bound(dev, o, b, M, c, NULL, chunks, classes, stage_lp, &bound, NULL);
        if (status != OSDP_OK) return status;
        if (isinf(bound) || bound > cutoff) {   /* INFINITY: some stage cannot fit whatever its plan */
            *bounded = 1;
            return OSDP_ERR_INFEASIBLE;
        }
    }
    for (int s = 0; s < P; s++) {
        osdp_stage_plan *st = &c->stage[s];
        osdp_planner_options so;
        long long replicated, limit;
        stage_options(dev, o, b, M, c, s, st, &so, &replicated, &limit);
        osdp_layout sub = osdp_pipe_stage_layout(&c->layout, st->lo, st->hi);
        if (limit <= 0) {
            c->n_stages_planned = s;
            return osdp_error_set(OSDP_ERR_INFEASIBLE, "pipeline stage %d of %d (operators %d:%d): the replicated "
                                  "state alone, %lld bytes per rank, exceeds the memory limit", s, P, st->lo, st->hi,
                                  replicated);
        }
        osdp_status status = OSDP_OK;
        /* a stage of the same contents, mesh, batch and pass order planned before: its result */
        const osdp_stage_key key = stage_key(c, o, classes, b, M, s);
        const char *cached_why = NULL;
        int cached = cache && classes
                     && osdp_stage_cache_find(cache, &key, &status, &st->result, &st->peak_bytes, &cached_why);
        if (cached) {
            c->n_stages_planned = s + 1;
            if (status == OSDP_OK) copy_stage_plan(&st->result.plan, st->lo, &c->plan);
            else osdp_error_set(status, "%s", cached_why);
        }
        /* The search's peak is the stage's, its wrap moment included (osdp/cost_model.h): the stage's own
         * closed form differing, or above the limit, is a bug, not a reason to search again. */
        if (!cached) {
            status = osdp_planner_plan_batch(&sub, dev, &so, b, M, &st->result);
            c->n_stages_planned = s + 1;
            if (status == OSDP_OK) {
                copy_stage_plan(&st->result.plan, st->lo, &c->plan);
                st->peak_bytes = osdp_pipe_stage_peak(&cm, &c->plan, c->geo.stage_bounds, P, s, c->geo.pipe_schedule,
                                                      b, M, NULL);
                st->result.mem_limit = limit;
                if (st->peak_bytes != st->result.peak_bytes || st->peak_bytes > limit)
                    return osdp_error_set(OSDP_ERR_INTERNAL, "planner: pipeline stage %d of %d at micro-batch %d of %d: "
                                          "the search's peak (%lld bytes) and the stage's (%lld bytes) differ or exceed "
                                          "the limit (%lld bytes)", s, P, b, M, st->result.peak_bytes, st->peak_bytes,
                                          limit);
            }
        }
        if (!cached && cache && classes)
            osdp_stage_cache_put(cache, &key, status, &st->result, st->peak_bytes, osdp_error_message());
        if (status != OSDP_OK) {
            if (status != OSDP_ERR_INFEASIBLE) return status;
            char why[2048], split[OSDP_STAGE_SPLIT_CHARS + 32] = "";
            snprintf(why, sizeof why, "%s", osdp_error_message());
            /* the split it measured (other splits may need less) */
            if (P > 1) {
                char b[OSDP_STAGE_SPLIT_CHARS];
                snprintf(split, sizeof split, " of the %ssplit %s", c->bounds_given ? "" : "balanced ",
                         osdp_stage_split_format(c->geo.stage_bounds, P, b, sizeof b));
            }
            return osdp_error_set(status, "pipeline stage %d of %d (operators %d:%d, %s .. %s, %d micro-batches in "
                                  "flight)%s: %s", s, P, st->lo, st->hi, c->layout.op[st->lo].name,
                                  c->layout.op[st->hi - 1].name, st->in_flight, split, why);
        }
        /* its operators' T_i: the stage plan's step less the scalar all-reduce that osdp_cost_step_time adds
         * (the pipeline's step adds it once, after the passes) */
        st->busy_s = st->result.step_s - osdp_cost_step_sync_time(dev, c->geo.tp_size, c->geo.n_ranks, 1);
        st->replicated_bytes = replicated;
        st->p2p_bytes = osdp_pipe_stage_p2p_bytes(&c->layout, c->geo.stage_bounds, P, s, b, M, c->geo.residual_dtype);
        if (cutoff >= 0 && isfinite(cutoff) && s + 1 < P) {   /* its own time for its bound: the rest may be left unplanned */
            busy[s] = st->busy_s;
            double bound;
            osdp_status status = stages_bound(dev, o, b, M, c, busy, chunks, classes, stage_lp, &bound, NULL);
            if (status != OSDP_OK) return status;
            if (bound > cutoff) {
                *bounded = 1;
                return OSDP_ERR_INFEASIBLE;
            }
        }
    }
    return OSDP_OK;
}

/* plan_stages_memo with the operators' choices costed once for the call's stages, their bounds and
 * their searches (choice_memo.h; out of memory: none kept, each costed again) */
static osdp_status plan_stages(const osdp_device *dev, const osdp_planner_options *o, int b, int M, osdp_pipe_choice *c,
                               osdp_stage_cache *cache, const int *classes, double cutoff, int chunks, int *bounded)
{
    osdp_planner_options om = *o;
    om.choice_memo = osdp_choice_memo_new();
    const osdp_status s = plan_stages_memo(dev, &om, b, M, c, cache, classes, cutoff, chunks, bounded);
    osdp_choice_memo_free(om.choice_memo);
    return s;
}

/* the stages' plans into the whole model's plan, the step by simulation,
 * and each stage's peak on its runtime schedule */
static osdp_status assemble(const osdp_device *dev, const osdp_planner_options *o, int b, int M, osdp_pipe_choice *c)
{
    const int P = c->geo.pp_size;
    osdp_plan *whole = &c->plan;   /* the stages' plans, copied in by plan_stages */
    c->geo.micro_batch = b;
    c->geo.accum_steps = M;
    whole->geo = c->geo;
    osdp_cost_model cm;
    osdp_pipe_choice_cost_model(&cm, c, dev, o, &c->layout);
    const osdp_cost_model *cms[OSDP_MAX_STAGES];
    const osdp_plan *plans[OSDP_MAX_STAGES];
    for (int s = 0; s < P; s++) {
        cms[s] = &cm;
        plans[s] = whole;
    }
    osdp_status status = osdp_pipe_step_time(cms, plans, c->geo.stage_bounds, P, c->geo.pipe_schedule, b, M, &c->timing);
    if (status != OSDP_OK) return status;
    for (int s = 0; s < P; s++)
        osdp_pipe_stage_passes(&cm, whole, c->geo.stage_bounds[s], c->geo.stage_bounds[s + 1], b, M, &c->stage[s].pass);
    c->step_s = c->timing.step_s;
    c->samples_per_s = (double)b * c->geo.n_ranks * M / c->step_s;
    whole->predicted_step_s = c->step_s;
    c->memory_bottleneck = 0;
    long long most = -1;
    for (int s = 0; s < P; s++) {
        osdp_stage_plan *st = &c->stage[s];
        st->schedule_peak = -1;
        /* the baseline's replicated state on top (the runtime schedule has no such mode) */
        st->peak_bytes += st->replicated_bytes;
        if (st->peak_bytes > most) {
            most = st->peak_bytes;
            c->memory_bottleneck = s;
        }
    }
    whole->predicted_peak_bytes = (double)most;
    return osdp_pipe_choice_verify(dev, o, c);
}

osdp_status osdp_pipe_choice_verify(const osdp_device *dev, const osdp_planner_options *o, osdp_pipe_choice *c)
{
    const int check = o->verify && (dev->param_bytes == 4 || dev->param_bytes == 2) && dev->grad_bytes == 4
                      && dev->act_bytes == 4;
    if (!check) return OSDP_OK;
    const int P = c->geo.pp_size;
    for (int s = 0; s < P; s++) {
        osdp_stage_plan *st = &c->stage[s];
        osdp_schedule_options so;
        osdp_pipe_choice_stage_schedule(c, dev, s, &so);
        osdp_memory_prediction pr;
        osdp_status status = osdp_schedule_predict(&c->layout, &c->plan, &so, &pr);
        if (status != OSDP_OK) return status;
        const long long model = st->peak_bytes - st->replicated_bytes;
        if ((long long)pr.peak_total != model)
            return osdp_error_set(OSDP_ERR_INTERNAL, "planner: stage %d's peak in the cost model (%lld bytes) and in "
                                  "the runtime's stage schedule (%lld bytes) differ", s, model, (long long)pr.peak_total);
        st->schedule_peak = (long long)pr.peak_total + st->replicated_bytes;
    }
    return OSDP_OK;
}

osdp_status osdp_planner_pipeline(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                                  const osdp_planner_options *o, int tp, int pp, const int *bounds,
                                  osdp_pipe_schedule schedule, osdp_pipe_choice *out)
{
    int bounded;
    return osdp_planner_pipeline_cached(cfg, seq_len, dev, o, tp, pp, bounds, schedule, NULL, NULL, NULL, -1, 0,
                                        &bounded, out);
}

osdp_status osdp_planner_pipeline_cached(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                                         const osdp_planner_options *o, int tp, int pp, const int *bounds,
                                         osdp_pipe_schedule schedule, const osdp_layout *layout,
                                         const int *classes_in, osdp_stage_cache *cache, double cutoff,
                                         int chunks_bound, int *bounded, osdp_pipe_choice *out)
{
    *bounded = 0;
    const double t0 = osdp_now_seconds();
    memset(out, 0, sizeof *out);
    const int N = o->geo.n_ranks;
    out->geo = o->geo;   /* its prefetch, padding and weights; the mesh, the stages, b and M set below */
    out->geo.micro_batch = out->geo.accum_steps = 0;
    if (tp < 1 || pp < 1 || pp > OSDP_MAX_STAGES || N % (tp * pp) != 0)
        return osdp_error_set(OSDP_ERR_INPUT, "--pp %d x --tp %d does not divide the %d ranks (--ranks): the mesh is "
                              "N = P x D x T, P at most %d", pp, tp, N, OSDP_MAX_STAGES);
    char why[256];
    if (osdp_planner_tp_node_why(tp, dev, why, sizeof why)) return osdp_error_set(OSDP_ERR_INPUT, "%s", why);
    out->geo.pp_size = pp;
    out->geo.tp_size = tp;
    out->geo.n_ranks = N / (tp * pp);
    /* plan mode h at this mesh's levels (from the device as read), when offered and a data group spans nodes */
    out->hierarchical = osdp_planner_hierarchy(o, dev, tp, out->geo.n_ranks, pp, &out->hierarchy) != NULL;
    osdp_device level;   /* two-level network: each group's collectives and messages at its level */
    osdp_cost_device_for_mesh(dev, tp, out->geo.n_ranks, pp, &level);
    dev = &level;
    out->geo.pipe_schedule = schedule;
    osdp_status s = OSDP_OK;
    if (layout) {   /* the caller's, built for T: a copy (the choice owns its layout) */
        out->layout = *layout;
        if (!(out->layout.op = malloc(sizeof *out->layout.op * (size_t)layout->n_ops)))
            return osdp_error_set(OSDP_ERR_OOM, "pipeline planner: out of host memory");
        memcpy(out->layout.op, layout->op, sizeof *out->layout.op * (size_t)layout->n_ops);
    } else if ((s = osdp_layout_build_tp(&out->layout, cfg, seq_len, tp, o->vocab_quantum)) != OSDP_OK) {
        return s;
    }
    out->layout_built = 1;
    const int n_ops = out->layout.n_ops, D = out->geo.n_ranks, G = o->global_batch;
    if (pp > n_ops)
        return osdp_error_set(OSDP_ERR_INPUT, "--pp %d: the model has %d operators, a stage needs at least one", pp, n_ops);
    if (G > 0 && G % D != 0)
        return osdp_error_set(OSDP_ERR_INPUT, "--global-batch %d is not a multiple of the %d data-parallel ranks of each "
                              "stage (%d ranks = PP %d x DP %d x TP %d)", G, D, N, pp, D, tp);
    if ((s = osdp_plan_alloc(&out->plan, n_ops)) != OSDP_OK) return s;
    if (bounds) {
        memcpy(out->geo.stage_bounds, bounds, sizeof(int) * (size_t)(pp + 1));
        out->bounds_given = 1;
    } else {
        osdp_step_geometry geo = o->geo;
        geo.n_ranks = D;
        osdp_cost_model cm;
        osdp_cost_model_init(&cm, &out->layout, dev, &geo, o->cost, NULL);
        if ((s = osdp_planner_stage_split(&cm, NULL, 1, 1, pp, out->geo.stage_bounds)) != OSDP_OK) return s;
    }
    /* the operators' content classes, for the cache's keys (none: every stage searched) */
    int *own_classes = cache && !classes_in ? malloc(sizeof *own_classes * (size_t)n_ops) : NULL;
    if (own_classes) osdp_stage_classes(&out->layout, own_classes);
    const int *classes = classes_in ? classes_in : own_classes;
    const int per_group = G > 0 ? G / D : 0;
    const int b_first = o->geo.micro_batch > 0 ? o->geo.micro_batch : 1;
    const int b_last = o->geo.micro_batch > 0 ? o->geo.micro_batch : per_group > 0 ? per_group
                     : o->max_micro_batch > 0 ? o->max_micro_batch : 256;
    osdp_status first = OSDP_OK;
    char first_message[2048] = "";
    osdp_pipe_choice best = {0};
    int have_best = 0, bounded_b = 0;
    for (int b = b_first; b <= b_last; b++) {
        if (per_group > 0 && per_group % b != 0) continue;
        const int M = per_group > 0 ? per_group / b : OSDP_PIPE_DEFAULT_MICRO_PER_STAGE * pp;
        out->batches_tried++;
        int out_of_bound = 0;
        s = plan_stages(dev, o, b, M, out, cache, classes, cutoff, chunks_bound && M % pp == 0, &out_of_bound);
        if (s == OSDP_OK) s = assemble(dev, o, b, M, out);
        if (out_of_bound) {   /* slower than the cutoff whatever its stages' plans: the next b */
            s = OSDP_OK;
            bounded_b++;
            continue;
        }
        if (s == OSDP_ERR_INFEASIBLE) {
            if (first == OSDP_OK) {
                first = s;
                snprintf(first_message, sizeof first_message, "%s", osdp_error_message());
            }
            break;   /* a larger micro-batch needs more memory on every stage */
        }
        if (s != OSDP_OK) break;
        out->geo.micro_batch = b;
        out->geo.accum_steps = M;
        if (!have_best || out->samples_per_s > best.samples_per_s) {
            /* keep this one: move its stages' plans into best */
            if (have_best) {
                for (int q = 0; q < best.n_stages_planned; q++) osdp_planner_result_free(&best.stage[q].result);
                osdp_plan_free(&best.plan);
            }
            best = *out;
            have_best = 1;
            out->n_stages_planned = 0;
            memset(&out->plan, 0, sizeof out->plan);
            if ((s = osdp_plan_alloc(&out->plan, n_ops)) != OSDP_OK) break;
        }
    }
    free(own_classes);
    const int tried = out->batches_tried;
    if (s != OSDP_OK && s != OSDP_ERR_INFEASIBLE) {
        char why[2048];
        snprintf(why, sizeof why, "%s", osdp_error_message());
        if (have_best) {
            for (int q = 0; q < best.n_stages_planned; q++) osdp_planner_result_free(&best.stage[q].result);
            osdp_plan_free(&best.plan);
        }
        return osdp_error_set(s, "%s", why);
    }
    if (!have_best && first == OSDP_OK && bounded_b > 0) {
        *bounded = 1;
        return OSDP_ERR_INFEASIBLE;
    }
    if (!have_best) return osdp_error_set(first, "%s", first_message);
    /* out's layout is best's (shared, built once): hand best over */
    for (int q = 0; q < out->n_stages_planned; q++) osdp_planner_result_free(&out->stage[q].result);
    osdp_plan_free(&out->plan);
    *out = best;
    out->batches_tried = tried;
    out->total_s = osdp_now_seconds() - t0;
    return OSDP_OK;
}

osdp_status osdp_pipe_split_bound(const osdp_layout *layout, const int *classes, const osdp_device *dev_in,
                                  const osdp_planner_options *o, int tp, int pp, osdp_pipe_schedule schedule,
                                  const int *bounds, int b, int M, int chunks, double *bound, double *bound_1f1b)
{
    osdp_pipe_choice *c = calloc(1, sizeof *c);   /* the mesh's view of the layout; nothing planned, nothing owned */
    if (!c) return osdp_error_set(OSDP_ERR_OOM, "3D search: out of host memory");
    c->geo.pp_size = pp;
    c->geo.tp_size = tp;
    c->geo.n_ranks = o->geo.n_ranks / (tp * pp);
    c->geo.pipe_schedule = schedule;
    c->layout = *layout;
    memcpy(c->geo.stage_bounds, bounds, sizeof(int) * (size_t)(pp + 1));
    c->hierarchical = osdp_planner_hierarchy(o, dev_in, tp, c->geo.n_ranks, pp, &c->hierarchy) != NULL;
    osdp_device level;
    osdp_cost_device_for_mesh(dev_in, tp, c->geo.n_ranks, pp, &level);
    osdp_planner_options om = *o;   /* the stages' choices costed once (choice_memo.h) */
    om.choice_memo = osdp_choice_memo_new();
    osdp_status s = stages_bound(&level, &om, b, M, c, NULL, chunks, classes, NULL, bound, bound_1f1b);
    osdp_choice_memo_free(om.choice_memo);
    free(c);
    return s;
}

osdp_status osdp_pipe_balanced_split(const osdp_layout *layout, const osdp_device *dev_in, const osdp_planner_options *o,
                                     int tp, int pp, int *bounds)
{
    const int dp = o->geo.n_ranks / (tp * pp);
    osdp_device level;
    osdp_cost_device_for_mesh(dev_in, tp, dp, pp, &level);
    osdp_step_geometry geo = o->geo;
    geo.n_ranks = dp;
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, layout, &level, &geo, o->cost, NULL);
    return osdp_planner_stage_split(&cm, NULL, 1, 1, pp, bounds);   /* as osdp_planner_pipeline's default */
}

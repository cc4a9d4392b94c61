/* Interleaving a planned pipeline (formulas in osdp/pipeline_interleave.h). */
#include "osdp/pipeline_interleave.h"
#include "osdp/pipeline_cost.h"
#include "osdp/schedule.h"
#include "planner_pipeline.h"

#include <stdio.h>
#include <string.h>

/* the step and each stage's messages of option x over the chunks x->bounds */
static osdp_status price(const osdp_pipe_choice *c, const osdp_cost_model *cm, osdp_interleave_option *x)
{
    const int P = c->geo.pp_size;
    const osdp_cost_model *cms[OSDP_MAX_STAGES];
    const osdp_plan *plans[OSDP_MAX_STAGES];
    for (int s = 0; s < P; s++) {
        cms[s] = cm;
        plans[s] = &c->plan;
    }
    const osdp_pipe_schedule kind = x->V > 1 ? OSDP_PIPE_INTERLEAVED : c->geo.pipe_schedule;
    osdp_status st = osdp_pipe_step_time_chunks(cms, plans, x->bounds, P, x->V, kind, c->geo.micro_batch, c->geo.accum_steps,
                                                &x->timing);
    if (st != OSDP_OK) return st;
    x->bubble_of_ideal = (double)(P - 1) / ((double)x->V * c->geo.accum_steps);
    for (int s = 0; s < P; s++)
        x->p2p_bytes[s] = osdp_pipe_stage_p2p_bytes_chunks(&c->layout, x->bounds, P, x->V, s, c->geo.micro_batch,
                                                           c->geo.accum_steps);
    return OSDP_OK;
}

/* every stage's peak on the runtime's schedule of its chunks, against the limit it was planned under */
static osdp_status fit(const osdp_pipe_choice *c, const osdp_device *dev, osdp_interleave_option *x)
{
    const int P = c->geo.pp_size;
    x->fits = 1;
    for (int s = 0; s < P; s++) {
        osdp_schedule_options so;
        osdp_pipe_choice_stage_schedule(c, dev, s, &so);
        so.geo.pipe_schedule = OSDP_PIPE_INTERLEAVED;
        so.geo.virtual_stages = x->V;
        memcpy(so.geo.stage_bounds, x->bounds, sizeof x->bounds);
        osdp_memory_prediction pr;
        osdp_status st = osdp_schedule_predict(&c->layout, &c->plan, &so, &pr);
        if (st != OSDP_OK) return st;
        x->stage_peak[s] = (long long)pr.peak_total + c->stage[s].replicated_bytes;
        if (x->stage_peak[s] > x->stage_peak[x->largest_stage]) x->largest_stage = s;
        const long long limit = c->stage[s].result.mem_limit;
        if (limit > 0 && x->stage_peak[s] > limit && x->fits) {
            x->fits = 0;
            snprintf(x->why, sizeof x->why, "stage %d peaks at %lld bytes per rank, over its limit of %lld", s,
                     x->stage_peak[s], limit);
        }
    }
    return OSDP_OK;
}

/* option V = 1: the choice as planned */
static osdp_status as_planned(const osdp_pipe_choice *c, const osdp_cost_model *cm, osdp_interleave_option *x)
{
    memset(x, 0, sizeof *x);
    x->V = 1;
    x->fits = 1;
    memcpy(x->bounds, c->geo.stage_bounds, sizeof c->geo.stage_bounds);
    for (int s = 0; s < c->geo.pp_size; s++) {
        const osdp_stage_plan *st = &c->stage[s];
        x->stage_peak[s] = st->schedule_peak >= 0 ? st->schedule_peak : st->peak_bytes;
        if (x->stage_peak[s] > x->stage_peak[x->largest_stage]) x->largest_stage = s;
    }
    return price(c, cm, x);
}

osdp_status osdp_pipe_interleave_search(const osdp_pipe_choice *c, const osdp_device *dev,
                                        const osdp_planner_options *o, int n_layer, int v_asked,
                                        osdp_interleave_result *out)
{
    memset(out, 0, sizeof *out);
    const int P = c->geo.pp_size, M = c->geo.accum_steps, n_ops = c->layout.n_ops;
    osdp_device level;   /* each group's collectives and messages at its level, as the pipeline was planned */
    osdp_cost_device_for_mesh(dev, c->geo.tp_size, c->geo.n_ranks, P, &level);
    dev = &level;
    osdp_cost_model cm;
    osdp_pipe_choice_cost_model(&cm, c, dev, o, &c->layout);
    osdp_status st = as_planned(c, &cm, &out->option[0]);
    if (st != OSDP_OK) return st;
    out->n = 1;
    if (P < 2) return OSDP_OK;
    for (int V = 2; V * P <= OSDP_MAX_STAGES && V * P <= n_ops && out->n < OSDP_INTERLEAVE_MAX_OPTIONS; V++) {
        const int asked = v_asked > 1 && V == v_asked, divides = n_layer % P == 0 && (n_layer / P) % V == 0;
        if (v_asked > 1 ? !asked : !divides) continue;
        osdp_interleave_option *x = &out->option[out->n++];
        memset(x, 0, sizeof *x);
        x->V = V;
        st = osdp_planner_stage_split(&cm, &c->plan, c->geo.micro_batch, M, P * V, x->bounds);
        if (st != OSDP_OK) return st;
        if (M % P != 0) {   /* the order has no pass for the last group's missing micro-batches */
            snprintf(x->why, sizeof x->why, "%d micro-batches per step is not a multiple of --pp %d", M, P);
            continue;
        }
        if ((st = price(c, &cm, x)) != OSDP_OK || (st = fit(c, dev, x)) != OSDP_OK) return st;
    }
    if (v_asked > 1 && out->n == 1) {
        osdp_interleave_option *x = &out->option[out->n++];
        memset(x, 0, sizeof *x);
        x->V = v_asked;
        snprintf(x->why, sizeof x->why, "--pp %d x --virtual-stages %d: %d chunks for %d operators (at most %d)", P,
                 v_asked, P * v_asked, n_ops, n_ops < OSDP_MAX_STAGES ? n_ops : OSDP_MAX_STAGES);
    }
    for (int k = 1; k < out->n; k++)
        if (out->option[k].fits && out->option[k].timing.step_s < out->option[out->best].timing.step_s) out->best = k;
    return OSDP_OK;
}

/* Interleaving a planned pipeline (formulas in osdp/pipeline_interleave.h). */
#include "osdp/pipeline_interleave.h"
#include "osdp/pipeline_cost.h"
#include "osdp/schedule.h"
#include "planner_pipeline.h"

#include <stdio.h>
#include <stdlib.h>
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
                                                           c->geo.accum_steps, c->geo.residual_dtype);
    return OSDP_OK;
}

/* every stage's peak on the runtime's schedule of its chunks, a baseline's replicated state of its chunks'
 * parameters on top, against the limit less that state (as the stages were planned, planner_pipeline.c).
 * until_unfit: stop at the first stage over its limit (its why the same; the later stages' peaks left 0), for a
 * caller that keeps only an option that fits (at 128 chunks each stage's schedule is most of a 3D search's time) */
static osdp_status fit(const osdp_pipe_choice *c, const osdp_device *dev, const osdp_planner_options *o,
                       osdp_interleave_option *x, int until_unfit)
{
    const int P = c->geo.pp_size, D = c->geo.n_ranks;
    x->fits = 1;
    for (int s = 0; s < P && (x->fits || !until_unfit); s++) {
        osdp_schedule_options so;
        osdp_pipe_choice_stage_schedule(c, dev, s, &so);
        so.geo.pipe_schedule = OSDP_PIPE_INTERLEAVED;
        so.geo.virtual_stages = x->V;
        memcpy(so.geo.stage_bounds, x->bounds, sizeof x->bounds);
        osdp_memory_prediction pr;
        osdp_status st = osdp_schedule_predict(&c->layout, &c->plan, &so, &pr);
        if (st != OSDP_OK) return st;
        long long params = 0, replicated = 0;
        for (int k = 0; k < x->V; k++)
            for (int i = x->bounds[k * P + s]; i < x->bounds[k * P + s + 1]; i++) params += (long long)c->layout.op[i].numel;
        const long long per_param = o->replicated_bytes_per_param;
        if (per_param > 0 && D > 1) replicated = params * per_param - params * per_param / D;
        x->stage_peak[s] = (long long)pr.peak_total + replicated;
        x->replicated_bytes[s] = replicated;
        if (x->stage_peak[s] > x->stage_peak[x->largest_stage]) x->largest_stage = s;
        const long long limit = (o->mem_limit > 0 ? o->mem_limit : dev->mem_limit) - replicated;
        if ((o->mem_limit > 0 || dev->mem_limit > 0) && x->stage_peak[s] - replicated > limit && x->fits) {
            x->fits = 0;
            snprintf(x->why, sizeof x->why, "stage %d peaks at %lld bytes per rank, over its limit of %lld", s,
                     x->stage_peak[s], limit + replicated);
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

int osdp_pipe_interleave_candidate(int P, int V, int n_layer, int n_ops)
{
    return P >= 2 && V >= 2 && V * P <= OSDP_MAX_CHUNKS && V * P <= n_ops && n_layer % P == 0 && (n_layer / P) % V == 0;
}

int osdp_pipe_interleave_possible(int P, int M, int n_layer, int n_ops, int v_lo, int v_hi)
{
    if (P < 2 || M % P != 0) return 0;
    int listed = 0;   /* osdp_pipe_interleave_search lists at most OSDP_INTERLEAVE_MAX_OPTIONS - 1 of them */
    for (int V = 2; V * P <= OSDP_MAX_CHUNKS && listed < OSDP_INTERLEAVE_MAX_OPTIONS - 1; V++) {
        if (!osdp_pipe_interleave_candidate(P, V, n_layer, n_ops)) continue;
        if (V >= v_lo && V <= v_hi) return 1;
        listed++;
    }
    return 0;
}

/* options V = 1 (as planned) and the V >= 2 of the rule (v_asked > 1: that one alone), priced but not yet
 * fitted (fits 0 on them; why set where M is not a multiple of P) */
static osdp_status priced_options(const osdp_pipe_choice *c, const osdp_cost_model *cm, int n_layer, int v_asked,
                                  const int *chunks, osdp_interleave_result *out)
{
    memset(out, 0, sizeof *out);
    const int P = c->geo.pp_size, M = c->geo.accum_steps, n_ops = c->layout.n_ops;
    osdp_status st = as_planned(c, cm, &out->option[0]);
    if (st != OSDP_OK) return st;
    out->n = 1;
    if (P < 2) return OSDP_OK;
    for (int V = 2; V * P <= OSDP_MAX_CHUNKS && V * P <= n_ops && out->n < OSDP_INTERLEAVE_MAX_OPTIONS; V++) {
        const int asked = v_asked > 1 && V == v_asked, divides = osdp_pipe_interleave_candidate(P, V, n_layer, n_ops);
        if (v_asked > 1 ? !asked : !divides) continue;
        osdp_interleave_option *x = &out->option[out->n++];
        memset(x, 0, sizeof *x);
        x->V = V;
        if (chunks && asked) memcpy(x->bounds, chunks, sizeof(int) * (size_t)(P * V + 1));
        else if ((st = osdp_planner_stage_split(cm, &c->plan, c->geo.micro_batch, M, P * V, x->bounds)) != OSDP_OK)
            return st;
        if (M % P != 0) {   /* the order has no pass for the last group's missing micro-batches */
            snprintf(x->why, sizeof x->why, "%d micro-batches per step is not a multiple of --pp %d", M, P);
            continue;
        }
        if ((st = price(c, cm, x)) != OSDP_OK) return st;
    }
    return OSDP_OK;
}

osdp_status osdp_pipe_interleave_search(const osdp_pipe_choice *c, const osdp_device *dev,
                                        const osdp_planner_options *o, int n_layer, int v_asked,
                                        const int *chunks, osdp_interleave_result *out)
{
    const int P = c->geo.pp_size, n_ops = c->layout.n_ops;
    osdp_device level;   /* each group's collectives and messages at its level, as the pipeline was planned */
    osdp_cost_device_for_mesh(dev, c->geo.tp_size, c->geo.n_ranks, P, &level);
    dev = &level;
    osdp_cost_model cm;
    osdp_pipe_choice_cost_model(&cm, c, dev, o, &c->layout);
    osdp_status st = priced_options(c, &cm, n_layer, v_asked, chunks, out);
    if (st != OSDP_OK) return st;
    for (int k = 1; k < out->n; k++)
        if (out->option[k].timing.step_s > 0 && (st = fit(c, dev, o, &out->option[k], 0)) != OSDP_OK) return st;
    if (v_asked > 1 && out->n == 1) {
        osdp_interleave_option *x = &out->option[out->n++];
        memset(x, 0, sizeof *x);
        x->V = v_asked;
        snprintf(x->why, sizeof x->why, "--pp %d x --virtual-stages %d: %d chunks for %d operators (at most %d)", P,
                 v_asked, P * v_asked, n_ops, n_ops < OSDP_MAX_CHUNKS ? n_ops : OSDP_MAX_CHUNKS);
    }
    for (int k = 1; k < out->n; k++)
        if (out->option[k].fits && out->option[k].timing.step_s < out->option[out->best].timing.step_s) out->best = k;
    return OSDP_OK;
}

/* c becomes option x (V >= 2): the interleaved schedule of x's chunks, its step, each stage's peak and messages */
static void adopt(osdp_pipe_choice *c, const osdp_cost_model *cm, const osdp_interleave_option *x)
{
    const int P = c->geo.pp_size, V = x->V, b = c->geo.micro_batch, M = c->geo.accum_steps;
    c->geo.pipe_schedule = OSDP_PIPE_INTERLEAVED;
    c->geo.virtual_stages = V;
    memcpy(c->geo.stage_bounds, x->bounds, sizeof c->geo.stage_bounds);
    c->timing = x->timing;
    c->step_s = x->timing.step_s;
    c->samples_per_s = (double)b * c->geo.n_ranks * M / c->step_s;
    c->memory_bottleneck = x->largest_stage;
    for (int s = 0; s < P; s++) {
        osdp_stage_plan *st = &c->stage[s];
        st->peak_bytes = st->schedule_peak = x->stage_peak[s];
        st->replicated_bytes = x->replicated_bytes[s];
        st->in_flight = osdp_pipe_in_flight_chunks(OSDP_PIPE_INTERLEAVED, P, V, s, M);
        st->busy_s = x->timing.busy_s[s];   /* its chunks' passes */
        st->p2p_bytes = x->p2p_bytes[s];
        st->pass = (osdp_pipe_stage_cost){0};
        for (int k = 0; k < V; k++) {   /* its chunks' passes, one micro-batch each, and their once-per-step work */
            osdp_pipe_stage_cost chunk;
            osdp_pipe_stage_passes(cm, &c->plan, x->bounds[k * P + s], x->bounds[k * P + s + 1], b, M, &chunk);
            st->pass.forward_s += chunk.forward_s;
            st->pass.backward_s += chunk.backward_s;
            st->pass.step_start_s += chunk.step_start_s;
            st->pass.step_end_s += chunk.step_end_s;
        }
    }
    c->plan.geo = c->geo;
    c->plan.predicted_step_s = c->step_s;
    c->plan.predicted_peak_bytes = (double)x->stage_peak[x->largest_stage];
}

osdp_status osdp_pipe_interleave_choose(osdp_pipe_choice *c, const osdp_device *dev_in, const osdp_planner_options *o,
                                        int n_layer, int v_lo, int v_hi, double cutoff, int *bounded)
{
    *bounded = 0;
    const int P = c->geo.pp_size;
    osdp_device level;
    osdp_cost_device_for_mesh(dev_in, c->geo.tp_size, c->geo.n_ranks, P, &level);
    osdp_cost_model cm;
    osdp_pipe_choice_cost_model(&cm, c, &level, o, &c->layout);
    osdp_interleave_result *r = malloc(sizeof *r);
    if (!r) return osdp_error_set(OSDP_ERR_OOM, "interleaving: out of host memory");
    osdp_status st = priced_options(c, &cm, n_layer, v_lo >= 2 && v_lo == v_hi ? v_lo : 0, NULL, r);
    /* the fastest first: only it needs its memory checked, then the next should it not fit; V = 1 (as
     * planned) always fits, so nothing slower than it (nor than the cutoff) is looked at */
    int chosen = v_lo <= 1 ? 0 : -1, beyond = 0;
    char why[192] = "";
    while (st == OSDP_OK) {
        int k = -1;
        for (int q = 1; q < r->n; q++) {
            const osdp_interleave_option *x = &r->option[q];
            if (x->timing.step_s <= 0 || x->why[0] || x->V < v_lo || x->V > v_hi) continue;
            if (k < 0 || x->timing.step_s < r->option[k].timing.step_s) k = q;
        }
        if (k < 0) break;
        osdp_interleave_option *x = &r->option[k];
        if (chosen == 0 && x->timing.step_s >= r->option[0].timing.step_s) break;
        if (cutoff >= 0 && x->timing.step_s > cutoff) {
            beyond = 1;
            break;
        }
        if ((st = fit(c, &level, o, x, 1)) != OSDP_OK) break;
        if (x->fits) {
            chosen = k;
            break;
        }
        if (!why[0]) snprintf(why, sizeof why, "V %d: %s", x->V, x->why);
        x->timing.step_s = 0;   /* out of the running */
    }
    if (st == OSDP_OK && chosen > 0) adopt(c, &cm, &r->option[chosen]);
    if (st == OSDP_OK && chosen < 0) {
        *bounded = beyond && !why[0];
        st = osdp_error_set(OSDP_ERR_INFEASIBLE, "--schedule interleaved on PP %d, %d micro-batches: %s", P,
                            c->geo.accum_steps, why[0] ? why : beyond ? "slower than the best found" : "no V fits the "
                            "layers (V divides the layers per stage), the operators and the micro-batches (a multiple "
                            "of P)");
    }
    free(r);
    return st;
}

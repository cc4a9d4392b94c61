/* The peak of a plan and what it is made of (osdp/cost_model.h): the operators' peak terms by part, the
 * largest moment, and its breakdown, whose sum is the peak. */
#include "osdp/cost_model.h"

#include <stdlib.h>
#include <string.h>

/* One operator's peak terms (osdp_op_peak_terms) by part of the peak (osdp_peak_part): the one statement of
 * which buffers each term holds, which osdp_cost_peak_terms sums and osdp_cost_peak_breakdown reads whole. */
typedef struct op_term_parts {
    osdp_peak_parts held, acts, pass_peak, prefetch, in_flight, forward_peak, forward_next, view;
    osdp_peak_parts pass_peak_then_forward, pass_peak_again;
    long long tied;     /* of pass_peak's gradients, a tied head's d(wte): the embedding's */
} op_term_parts;

static void parts_add(osdp_peak_parts *to, const osdp_peak_parts *p)
{
    for (int k = 0; k < OSDP_PEAK_N_PARTS; k++) to->bytes[k] += p->bytes[k];
}

static void term_parts(const osdp_cost_model *cm, int op, const osdp_op_mem *m, op_term_parts *out)
{
    enum { STATE = OSDP_PEAK_STATE, RESIDENT = OSDP_PEAK_RESIDENT, GATHERED = OSDP_PEAK_GATHERED,
           ACTS = OSDP_PEAK_ACTIVATIONS, GRADS = OSDP_PEAK_GRADS, ACCUM = OSDP_PEAK_ACCUM };
    memset(out, 0, sizeof *out);
    /* held: a pipeline stage's other micro-batches; accum: a reduce-once operator's summed gradients */
    out->held.bytes[STATE] = m->state;
    out->held.bytes[RESIDENT] = m->resident;
    out->held.bytes[ACTS] = m->held;
    out->held.bytes[ACCUM] = m->accum;
    out->acts.bytes[ACTS] = m->acts;
    /* its backward: rebuilt + G (+ G_0 of a tied head), then its gathered slices or its receive buffer */
    out->tied = osdp_cost_tied_grads(cm, op);
    osdp_peak_parts base = {{0}};
    base.bytes[ACTS] = m->rebuilt;
    base.bytes[GRADS] = m->grads + out->tied;
    out->pass_peak = base;
    if (m->work > m->recv) out->pass_peak.bytes[GATHERED] = m->work;
    else out->pass_peak.bytes[GRADS] += m->recv;
    out->prefetch.bytes[GATHERED] = cm->geo.prefetch ? m->prefetch : 0;
    out->prefetch.bytes[ACTS] = m->view;
    /* reduce-once, every slice: G is freed once added into accum, its reduction needs no buffer */
    out->in_flight.bytes[GRADS] = cm->geo.prefetch && !m->once_all ? m->grads + m->recv : 0;
    out->forward_peak.bytes[ACTS] = m->rebuilt;
    out->forward_peak.bytes[GATHERED] = op == cm->layout->n_ops - 1 ? m->forward_work_last : m->forward_work;
    out->forward_next.bytes[GATHERED] = cm->geo.prefetch ? m->forward_first : 0;
    out->view.bytes[ACTS] = m->view;
    /* the wrap moment's X (osdp/cost_model.h): the pass's peak, or rebuilt + G with a (a: gathered) or r
     * (its slice 0 or its receive buffer, and f) */
    const long long pass = osdp_peak_parts_sum(&out->pass_peak), b = osdp_peak_parts_sum(&base);
    out->pass_peak_then_forward = out->pass_peak;
    if (!(pass > b + m->wrap_forward)) {
        out->pass_peak_then_forward = base;
        out->pass_peak_then_forward.bytes[GATHERED] += m->wrap_forward;
    }
    out->pass_peak_again = out->pass_peak;
    if (!(pass > b + m->wrap_again)) {
        out->pass_peak_again = base;
        out->pass_peak_again.bytes[GATHERED] += m->wrap_again - m->wrap_again_recv;
        out->pass_peak_again.bytes[GRADS] += m->wrap_again_recv;
    }
}

static void terms_of_parts(const op_term_parts *p, osdp_op_peak_terms *out)
{
#define SUM(term) .term = osdp_peak_parts_sum(&p->term)
    *out = (osdp_op_peak_terms){SUM(held), SUM(acts), SUM(pass_peak), SUM(prefetch), SUM(in_flight),
                                SUM(pass_peak_then_forward), SUM(pass_peak_again), SUM(forward_peak), SUM(forward_next),
                                SUM(view)};
#undef SUM
}

void osdp_cost_peak_terms(const osdp_cost_model *cm, int op, const osdp_op_mem *m, osdp_op_peak_terms *out)
{
    op_term_parts p;
    term_parts(cm, op, m, &p);
    terms_of_parts(&p, out);
}

long long osdp_cost_peak(const osdp_cost_model *cm, const osdp_plan *plan, int b, int *at_op)
{
    return osdp_cost_peak_moment(cm, plan, b, at_op, NULL);
}

long long osdp_cost_peak_moment(const osdp_cost_model *cm, const osdp_plan *plan, int b, int *at_op, int *forward)
{
    osdp_peak_breakdown br;
    const long long peak = osdp_cost_peak_breakdown(cm, plan, b, &br, NULL);
    if (at_op) *at_op = br.at_op;
    if (forward) *forward = br.forward;
    return peak;
}

const char *osdp_peak_part_name(osdp_peak_part part)
{
    static const char *const name[OSDP_PEAK_N_PARTS] = {
        [OSDP_PEAK_STATE] = "sharded state", [OSDP_PEAK_RESIDENT] = "resident DP weights",
        [OSDP_PEAK_GATHERED] = "gathered weights", [OSDP_PEAK_ACTIVATIONS] = "activations",
        [OSDP_PEAK_GRADS] = "gradients in flight", [OSDP_PEAK_ACCUM] = "reduce-once gradients",
        [OSDP_PEAK_WORKSPACE] = "workspace", [OSDP_PEAK_TP_STAGING] = "cross-entropy staging",
        [OSDP_PEAK_STAGE_INPUTS] = "stage inputs"};
    return part >= 0 && part < OSDP_PEAK_N_PARTS ? name[part] : "?";
}

osdp_memory_category osdp_peak_part_category(osdp_peak_part part)
{
    static const osdp_memory_category category[OSDP_PEAK_N_PARTS] = {
        [OSDP_PEAK_STATE] = OSDP_MEMORY_STATE, [OSDP_PEAK_RESIDENT] = OSDP_MEMORY_WEIGHTS,
        [OSDP_PEAK_GATHERED] = OSDP_MEMORY_WEIGHTS, [OSDP_PEAK_ACTIVATIONS] = OSDP_MEMORY_ACTIVATIONS,
        [OSDP_PEAK_GRADS] = OSDP_MEMORY_GRADS, [OSDP_PEAK_ACCUM] = OSDP_MEMORY_GRADS,
        [OSDP_PEAK_WORKSPACE] = OSDP_MEMORY_WORKSPACE, [OSDP_PEAK_TP_STAGING] = OSDP_MEMORY_TP_COMM,
        [OSDP_PEAK_STAGE_INPUTS] = OSDP_MEMORY_ACTIVATIONS};
    return category[part];
}

/* the moment's kinds (osdp_cost_peak_breakdown) */
enum { AT_BACKWARD, AT_FORWARD, AT_WRAP };

/* operator i's buffers at the moment `kind` of operator u (wrap: its case w, osdp_cost_wrap_case), from the
 * terms' parts of the n operators: the sums osdp_cost_backward_moment, _forward_moment and _wrap_moment make,
 * term by term */
static void op_at_moment(const op_term_parts *p, int n, int i, int u, int kind, int w, osdp_peak_parts *out)
{
    *out = p[i].held;
    if (kind == AT_WRAP) {
        if (i == 0) {
            parts_add(out, &p[0].acts);
            parts_add(out, w == OSDP_WRAP_THEN_FORWARD ? &p[0].pass_peak_then_forward
                         : w == OSDP_WRAP_THEN_BACKWARD ? &p[0].pass_peak : &p[0].pass_peak_again);
        }
        if (i == 1 && n > 1) parts_add(out, &p[1].in_flight);
        if (i == n - 1 && w == OSDP_WRAP_THEN_BACKWARD) parts_add(out, &p[n - 1].prefetch);
        return;
    }
    if (i <= u) parts_add(out, &p[i].acts);
    const int forward = kind == AT_FORWARD;
    if (i == u) parts_add(out, forward ? &p[i].forward_peak : &p[i].pass_peak);
    if (i == u + 1) parts_add(out, forward ? &p[i].forward_next : &p[i].in_flight);
    if (i + 1 == u) parts_add(out, forward ? &p[i].view : &p[i].prefetch);
}

long long osdp_cost_peak_breakdown(const osdp_cost_model *cm_in, const osdp_plan *plan, int b, osdp_peak_breakdown *out,
                                   osdp_peak_parts *per_op)
{
    osdp_cost_model with_plan = *cm_in, *cm = &with_plan;
    with_plan.recompute = plan->recompute;
    with_plan.reduce_once = plan->reduce_once;
    const int n = cm->layout->n_ops;
    memset(out, 0, sizeof *out);
    out->total = -1;
    osdp_op_peak_terms *t = malloc(sizeof *t * (size_t)n);
    op_term_parts *p = malloc(sizeof *p * (size_t)n);
    if (!t || !p) {
        free(t);
        free(p);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        osdp_op_mem m;
        osdp_cost_plan_op_mem(cm, plan, i, b, &m);
        term_parts(cm, i, &m, &p[i]);
        terms_of_parts(&p[i], &t[i]);
    }
    /* the largest moment (the first on ties, a backward before its forward, the wrap moment last) */
    long long acts = 0, best = -1;
    int where = 0, kind = AT_BACKWARD, w = 0;
    for (int u = 0; u < n; u++) {
        const long long v = osdp_cost_backward_moment(t, n, u, acts), fv = osdp_cost_forward_moment(t, n, u, acts);
        acts += t[u].acts;
        if (v > best || fv > best) {
            best = v > fv ? v : fv;
            where = u;
            kind = fv > v ? AT_FORWARD : AT_BACKWARD;
        }
    }
    if (cm->geo.prefetch && cm->next_passes && n > 0 && osdp_cost_wrap_moment(t, n, cm->next_passes) > best) {
        where = 0;
        kind = AT_WRAP;
        w = osdp_cost_wrap_case(t, n, cm->next_passes);
    }
    /* the plan-independent buffers (osdp_cost_workspace), then every operator's at that moment */
    osdp_cost_workspace_parts(cm, b, &out->parts);
    for (int i = 0; i < n; i++) {
        osdp_peak_parts at;
        op_at_moment(p, n, i, where, kind, w, &at);
        parts_add(&out->parts, &at);
        if (per_op) per_op[i] = at;
    }
    if (per_op && kind == AT_BACKWARD && where > 0) {   /* d(wte), held from the head's backward: the embedding's */
        per_op[where].bytes[OSDP_PEAK_GRADS] -= p[where].tied;
        per_op[0].bytes[OSDP_PEAK_GRADS] += p[where].tied;
    }
    free(t);
    free(p);
    out->total = osdp_peak_parts_sum(&out->parts);
    out->at_op = where;
    out->forward = kind == AT_FORWARD;
    out->wrap = kind == AT_WRAP;
    return out->total;
}

/* The pipeline's cost (formulas in osdp/pipeline_cost.h). */
#include "osdp/pipeline_cost.h"
#include "osdp/schedule.h"

#include <math.h>
#include <stdlib.h>

size_t osdp_pipe_boundary_bytes(const osdp_layout *layout, int first_op, int micro_batch)
{
    const osdp_step_geometry geo = {.micro_batch = micro_batch};
    const osdp_buffer_dims d = {.layout = layout, .op = first_op, .geo = &geo};
    return osdp_buffer_bytes(OSDP_BUF_STAGE_INPUT, &d, 0);
}

double osdp_pipe_message_time(const osdp_device *dev, double bytes)
{
    return dev->p2p.alpha + bytes * dev->p2p.beta;
}

size_t osdp_pipe_message_bytes(const osdp_layout *layout, int first_op, int micro_batch, osdp_dtype residual,
                               int backward)
{
    const size_t n = osdp_pipe_boundary_bytes(layout, first_op, micro_batch) / sizeof(float);
    const size_t width = !backward && residual == OSDP_BFLOAT16 ? osdp_dtype_size(OSDP_BFLOAT16) : sizeof(float);
    return osdp_pipe_piece_of(n, layout->tp_size, 0).count * width;
}

osdp_pipe_message osdp_pipe_boundary_message(const osdp_device *level, const osdp_device *dev, const osdp_layout *layout,
                                             int first_op, int micro_batch, osdp_dtype residual)
{
    const int t = layout->tp_size > 1 ? layout->tp_size : 1;
    double transfer[2], gather[2];
    for (int backward = 0; backward < 2; backward++) {
        /* a piece crosses (t equal ones: osdp_pipe_piece_of); the group gathers them */
        const double piece = (double)osdp_pipe_message_bytes(layout, first_op, micro_batch, residual, backward);
        transfer[backward] = osdp_pipe_message_time(level, piece);
        gather[backward] = t > 1 ? osdp_cost_tp_all_gather_time(dev, t, piece) : 0;
    }
    return (osdp_pipe_message){.forward_s = transfer[0], .backward_s = transfer[1], .forward_gather_s = gather[0],
                               .backward_gather_s = gather[1]};
}

/* spread: the once-per-step parts spread over the passes with the rest (one stage: the same step wherever
 * they sit, and the same sum, bit for bit, as the flat step it was before they were placed) */
static void stage_passes(const osdp_cost_model *cm_in, const osdp_plan *plan, int lo, int hi, int micro_batch,
                         int accum, int spread, osdp_pipe_stage_cost *out)
{
    osdp_cost_model with_plan = *cm_in, *cm = &with_plan;
    with_plan.recompute = plan->recompute;
    with_plan.reduce_once = plan->reduce_once;
    *out = (osdp_pipe_stage_cost){0};
    for (int i = lo; i < hi; i++) {
        osdp_op_time t;
        osdp_cost_plan_op_time(cm, plan, i, micro_batch, accum, &t);   /* h priced at its levels */
        /* the forward's share of forward + backward: 1 of 3, or 1 of 4 when the backward computes it again */
        const double forward_share = plan->recompute[i] ? 0.25 : 1.0 / 3.0;
        const double per_micro = spread ? t.total / accum : (t.total - t.step_start - t.step_end) / accum;
        out->forward_s += per_micro * forward_share;
        out->backward_s += per_micro * (1 - forward_share);
        if (spread) continue;
        out->step_start_s += t.step_start;
        out->step_end_s += t.step_end;
    }
}

void osdp_pipe_stage_passes(const osdp_cost_model *cm, const osdp_plan *plan, int lo, int hi, int micro_batch,
                            int accum, osdp_pipe_stage_cost *out)
{
    stage_passes(cm, plan, lo, hi, micro_batch, accum, 0, out);
}

long long osdp_pipe_stage_p2p_bytes(const osdp_layout *layout, const int *bounds, int P, int s, int micro_batch,
                                    int accum, osdp_dtype residual)
{
    return osdp_pipe_stage_p2p_bytes_chunks(layout, bounds, P, 1, s, micro_batch, accum, residual);
}

long long osdp_pipe_stage_p2p_bytes_chunks(const osdp_layout *layout, const int *bounds, int P, int V, int s,
                                           int micro_batch, int accum, osdp_dtype residual)
{
    long long bytes = 0;
    for (int c = 0; c < V; c++) {
        const int g = c * P + s;
        if (g + 1 < P * V)   /* activations */
            bytes += (long long)osdp_pipe_message_bytes(layout, bounds[g + 1], micro_batch, residual, 0);
        if (g > 0)           /* gradients */
            bytes += (long long)osdp_pipe_message_bytes(layout, bounds[g], micro_batch, residual, 1);
    }
    return bytes * accum;
}

static int valid_time(double t)
{
    return isfinite(t) && t >= 0;
}

static int valid_message(const osdp_pipe_message *m)
{
    return valid_time(m->forward_s) && valid_time(m->backward_s) && valid_time(m->forward_gather_s)
        && valid_time(m->backward_gather_s);
}

osdp_status osdp_pipe_simulate_chunks(osdp_pipe_schedule schedule, int P, int V, int M, const osdp_pipe_stage_cost *chunk,
                                      const double *message_s, osdp_pipe_timing *out)
{
    osdp_pipe_message message[OSDP_MAX_CHUNKS];
    for (int g = 0; message_s && g + 1 < P * V && g < OSDP_MAX_CHUNKS; g++)
        message[g] = (osdp_pipe_message){.forward_s = message_s[g], .backward_s = message_s[g]};
    return osdp_pipe_simulate_messages(schedule, P, V, M, chunk, message_s ? message : NULL, out);
}

osdp_status osdp_pipe_simulate_messages(osdp_pipe_schedule schedule, int P, int V, int M, const osdp_pipe_stage_cost *chunk,
                                        const osdp_pipe_message *message, osdp_pipe_timing *out)
{
    if (P < 1 || P > OSDP_MAX_STAGES || V < 1 || (long long)P * V > OSDP_MAX_CHUNKS || M < 1)
        return osdp_error_set(OSDP_ERR_INPUT, "pipeline cost: %d stages (1..%d) x %d chunks (1..%d in all) and %d "
                              "micro-batches (>= 1)", P, OSDP_MAX_STAGES, V, OSDP_MAX_CHUNKS, M);
    if (V > 1 && (schedule != OSDP_PIPE_INTERLEAVED || M % P != 0))
        return osdp_pipe_check(schedule, P, V, M, 0);
    const int G = P * V;   /* global chunks; chunk g on stage g mod P */
    for (int g = 0; g < G; g++)
        if (!valid_time(chunk[g].forward_s) || !valid_time(chunk[g].backward_s) || !valid_time(chunk[g].step_start_s)
            || !valid_time(chunk[g].step_end_s) || (g + 1 < G && message && !valid_message(&message[g])))
            return osdp_error_set(OSDP_ERR_INPUT, "pipeline cost: %s %d has a negative or non-finite time",
                                  V > 1 ? "chunk" : "stage", g);
    const size_t passes = 2 * (size_t)M * (size_t)V, per_chunk = 2 * (size_t)M;
    osdp_pipe_pass *order = malloc(sizeof *order * passes * (size_t)P);
    /* done[g][2m + backward]: when that pass's compute ended on chunk g, its message's send began (-1: not yet) */
    double *done = malloc(sizeof *done * per_chunk * (size_t)G);
    if (!order || !done) {
        free(order), free(done);
        return osdp_error_set(OSDP_ERR_OOM, "pipeline cost: out of host memory");
    }
    for (int s = 0; s < P; s++) osdp_pipe_order_chunks(schedule, P, V, s, M, order + (size_t)s * passes);
    for (size_t i = 0; i < per_chunk * (size_t)G; i++) done[i] = -1;
    /* a gradient send holds its stage for the message's time, unless the schedule defers its wait */
    const int held = !(schedule == OSDP_PIPE_INTERLEAVED && P > 1);
    double free_at[OSDP_MAX_STAGES] = {0}, end_work[OSDP_MAX_STAGES] = {0}, gathered[OSDP_MAX_STAGES] = {0};
    size_t next[OSDP_MAX_STAGES] = {0}, left = passes * (size_t)P;
    *out = (osdp_pipe_timing){.P = P, .M = M, .V = V, .schedule = schedule,
                              .bubble_closed = osdp_pipe_bubble_chunks(P, V, M)};
    /* Each round runs, on every stage, the passes whose input is there, in
     * the stage's order; a round without one is a dependency cycle, which a
     * valid pass order never has. */
    while (left > 0) {
        size_t ran = 0;
        for (int s = 0; s < P; s++)
            while (next[s] < passes) {
                const osdp_pipe_pass p = order[(size_t)s * passes + next[s]];
                const int g = p.chunk * P + s, from = p.backward ? g + 1 : g - 1;   /* the chunk its input comes from */
                double start = free_at[s];
                if (from >= 0 && from < G) {
                    /* the receive, posted when the stage gets here, ends a message's time later, and not before
                     * the message was sent */
                    double sent = done[(size_t)from * per_chunk + 2 * (size_t)p.micro + (size_t)p.backward];
                    if (sent < 0) break;
                    const osdp_pipe_message *m = message ? &message[p.backward ? g : g - 1] : NULL;
                    start += m ? (p.backward ? m->backward_s : m->forward_s) : 0;
                    if (sent > start) start = sent;
                    /* then the tensor group gathers the pieces (stage_message.c) */
                    start += m ? (p.backward ? m->backward_gather_s : m->forward_gather_s) : 0;
                } else if (p.backward && done[(size_t)g * per_chunk + 2 * (size_t)p.micro] < 0) {
                    break;   /* the last chunk: its own forward first (the order guarantees it) */
                }
                /* the step's once-only work (the runtime's order, osdp/schedule.h): its gathers start with
                 * the stage's step, one chunk's after another's, while the stage waits for its first input,
                 * and the chunk's first forward waits for its own; its reductions, started in its last
                 * backward, are waited at the end of the stage's step, after its gradient sends, so they
                 * hold no other stage */
                if (!p.backward && p.micro == 0) {
                    gathered[s] += chunk[g].step_start_s;
                    out->busy_s[s] += chunk[g].step_start_s;
                    if (gathered[s] > start) start = gathered[s];
                }
                const double took = p.backward ? chunk[g].backward_s : chunk[g].forward_s;
                if (p.backward && p.micro == M - 1) {
                    end_work[s] += chunk[g].step_end_s;
                    out->busy_s[s] += chunk[g].step_end_s;
                }
                done[(size_t)g * per_chunk + 2 * (size_t)p.micro + (size_t)p.backward] = start + took;
                /* a backward's gradient send (g > 0) holds the stage for the message's time; a forward's
                 * activation send does not (waited only once its gradient is back) */
                free_at[s] = start + took + (held && p.backward && g > 0 && message ? message[g - 1].backward_s : 0);
                out->busy_s[s] += took;
                next[s]++;
                ran++;
            }
        if (ran == 0) {
            free(order), free(done);
            return osdp_error_set(OSDP_ERR_INTERNAL, "pipeline cost: the %s pass orders of %d stages deadlock",
                                  osdp_pipe_schedule_name(schedule), P);
        }
        left -= ran;
    }
    double busy = 0;
    for (int s = 0; s < P; s++) {
        free_at[s] += end_work[s];
        out->end_s[s] = free_at[s];
        if (free_at[s] > out->step_s) out->step_s = free_at[s];
        if (out->busy_s[s] > out->busy_s[out->slowest_stage]) out->slowest_stage = s;
        busy += out->busy_s[s];
    }
    out->idle_fraction = out->step_s > 0 ? 1 - busy / (P * out->step_s) : 0;
    free(order), free(done);
    return OSDP_OK;
}

osdp_status osdp_pipe_simulate(osdp_pipe_schedule schedule, int P, int M, const osdp_pipe_stage_cost *stage,
                               const double *message_s, osdp_pipe_timing *out)
{
    return osdp_pipe_simulate_chunks(schedule, P, 1, M, stage, message_s, out);
}

osdp_status osdp_pipe_step_time_chunks(const osdp_cost_model *const *stage_cm, const osdp_plan *const *plans,
                                       const int *bounds, int P, int V, osdp_pipe_schedule schedule, int micro_batch,
                                       int accum, osdp_pipe_timing *out)
{
    if (P < 1 || P > OSDP_MAX_STAGES || V < 1 || (long long)P * V > OSDP_MAX_CHUNKS)
        return osdp_error_set(OSDP_ERR_INPUT, "pipeline cost: %d stages (1..%d) x %d chunks (1..%d in all)", P,
                              OSDP_MAX_STAGES, V, OSDP_MAX_CHUNKS);
    const int G = P * V;
    osdp_pipe_stage_cost chunk[OSDP_MAX_CHUNKS];
    osdp_pipe_message message[OSDP_MAX_CHUNKS];
    /* the wrap from the last stage to the first crosses nodes when any boundary of the pipeline does */
    int wrap_spans = 0;
    for (int s = 0; s + 1 < P; s++)
        wrap_spans |= osdp_cost_pp_boundary_spans_nodes(stage_cm[s]->dev->ranks_per_node, stage_cm[s]->layout->tp_size,
                                                        stage_cm[s]->geo.n_ranks, s);
    for (int g = 0; g < G; g++) {
        const int s = g % P;
        stage_passes(stage_cm[s], plans[s], bounds[g], bounds[g + 1], micro_batch, accum, G == 1, &chunk[g]);
        if (g + 1 < G) {
            /* each boundary at its network level: [internode_p2p] when its messages cross nodes */
            const osdp_device *dev = stage_cm[s]->dev;
            osdp_device at_level = *dev;
            const int spans = s + 1 < P ? osdp_cost_pp_boundary_spans_nodes(dev->ranks_per_node,
                                                                            stage_cm[s]->layout->tp_size,
                                                                            stage_cm[s]->geo.n_ranks, s)
                                        : wrap_spans;
            if (dev->internode.given && spans) at_level.p2p = dev->internode.p2p;
            message[g] = osdp_pipe_boundary_message(&at_level, dev, stage_cm[s]->layout, bounds[g + 1], micro_batch,
                                                    stage_cm[s]->geo.residual_dtype);
        }
    }
    osdp_status status = osdp_pipe_simulate_messages(schedule, P, V, accum, chunk, message, out);
    if (status != OSDP_OK) return status;
    /* after the last pass, every rank's scalar all-reduce over its data group, tensor group and the pipeline */
    const int tp = stage_cm[0]->layout->tp_size > 0 ? stage_cm[0]->layout->tp_size : 1;
    out->sync_s = osdp_cost_step_sync_time(stage_cm[0]->dev, tp, stage_cm[0]->geo.n_ranks, P);
    out->step_s += out->sync_s;
    return OSDP_OK;
}

osdp_status osdp_pipe_step_time(const osdp_cost_model *const *stage_cm, const osdp_plan *const *plans, const int *bounds,
                                int P, osdp_pipe_schedule schedule, int micro_batch, int accum, osdp_pipe_timing *out)
{
    return osdp_pipe_step_time_chunks(stage_cm, plans, bounds, P, 1, schedule, micro_batch, accum, out);
}

osdp_layout osdp_pipe_stage_layout(const osdp_layout *whole, int lo, int hi)
{
    osdp_layout sub = *whole;
    sub.op = whole->op + lo;
    sub.n_ops = hi - lo;
    sub.total_params = 0;
    sub.max_op_numel = 0;
    for (int i = 0; i < sub.n_ops; i++) {
        sub.total_params += sub.op[i].numel;
        if (sub.op[i].numel > sub.max_op_numel) sub.max_op_numel = sub.op[i].numel;
    }
    return sub;
}

long long osdp_pipe_stage_buffer_bytes(const osdp_layout *whole, const int *bounds, int s, int micro_batch, int in_flight)
{
    return s > 0 ? (long long)in_flight * (long long)osdp_pipe_boundary_bytes(whole, bounds[s], micro_batch) : 0;
}

long long osdp_pipe_stage_peak(const osdp_cost_model *cm, const osdp_plan *plan, const int *bounds, int P, int s,
                               osdp_pipe_schedule schedule, int micro_batch, int accum, int *at_op)
{
    osdp_peak_breakdown br;
    const long long peak = osdp_pipe_stage_peak_breakdown(cm, plan, bounds, P, s, schedule, micro_batch, accum, &br);
    if (at_op) *at_op = br.at_op;
    return peak;
}

long long osdp_pipe_stage_peak_breakdown(const osdp_cost_model *cm, const osdp_plan *plan, const int *bounds, int P,
                                         int s, osdp_pipe_schedule schedule, int micro_batch, int accum,
                                         osdp_peak_breakdown *out)
{
    const int lo = bounds[s], hi = bounds[s + 1];
    osdp_layout sub = osdp_pipe_stage_layout(cm->layout, lo, hi);
    osdp_cost_model stage_cm = *cm;
    stage_cm.layout = &sub;
    stage_cm.cuts = NULL;   /* cached by the whole layout's operator index */
    stage_cm.in_flight = osdp_pipe_in_flight(schedule, P, s, accum);
    stage_cm.stage_buffer_bytes = osdp_pipe_stage_buffer_bytes(cm->layout, bounds, s, micro_batch, stage_cm.in_flight);
    osdp_plan view = *plan;   /* the stage's entries, in place */
    view.n_ops = hi - lo;
    view.slices = plan->slices + lo;
    view.zdp_slices = plan->zdp_slices + lo;
    view.recompute = plan->recompute + lo;
    view.hierarchical = plan->hierarchical ? plan->hierarchical + lo : NULL;
    view.reduce_once = plan->reduce_once ? plan->reduce_once + lo : NULL;
    /* with the wrap moment: the backward of its first operator prefetching the next pass's first slice */
    stage_cm.next_passes = osdp_pipe_after_backward(schedule, P, s, accum);
    const long long peak = osdp_cost_peak_breakdown(&stage_cm, &view, micro_batch, out, NULL);
    out->at_op += lo;
    return peak;
}

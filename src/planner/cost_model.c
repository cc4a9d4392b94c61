/* The cost model (formulas in osdp/cost_model.h). */
#include "osdp/cost_model.h"
#include "osdp/gpt.h"

#include <stdlib.h>

double osdp_cost_op_flops(const osdp_op_layout *op)
{
    if (op->type == OSDP_OP_EMBED) return 3.0 * (double)op->width; /* nominal: no matmul */
    return 3.0 * ((double)op->flops_per_token + (double)op->attn_flops_per_token);
}

size_t osdp_cost_slice_numel(const osdp_cost_model *cm, int op, int g)
{
    size_t numel = cm->layout->op[op].numel;
    size_t per = (numel + (size_t)g - 1) / (size_t)g;
    return osdp_padded_numel(per, cm->N);
}

void osdp_cost_op_mem(const osdp_cost_model *cm, int op, int g, int k, int b, osdp_op_mem *out)
{
    const long long N = cm->N, e = cm->dev->param_bytes, a = cm->dev->act_bytes;
    const long long q = (long long)osdp_cost_slice_numel(cm, op, g);
    out->state = 16 * (long long)g * (q / N);
    out->resident = (long long)(g - k) * q * e;
    out->acts = (long long)b * (long long)cm->layout->op[op].act_floats_per_seq * a;
    out->grads = (long long)g * q * e;
    out->recv = (long long)g * (q / N) * e;
    if (k == 0) out->work = 0;
    else out->work = (g > 1 && k >= 2 && cm->prefetch ? 2 : 1) * q * e;
    out->prefetch = k > 0 ? q * e : 0;
}

long long osdp_cost_workspace(const osdp_cost_model *cm, int b)
{
    return (long long)osdp_workspace_floats(cm->layout, b) * cm->dev->act_bytes;
}

void osdp_cost_op_time(const osdp_cost_model *cm, int op, int g, int k, int b, int accum, osdp_op_time *out)
{
    const osdp_op_layout *o = &cm->layout->op[op];
    const osdp_device *d = cm->dev;
    const double N = cm->N, A = accum;
    out->compute = A * (double)b * (double)cm->layout->T * osdp_cost_op_flops(o) * d->gamma[o->type];
    double S = (double)osdp_cost_slice_numel(cm, op, g) * (double)d->param_bytes;
    double ag = (N - 1) * (d->all_gather.alpha + S / N * d->all_gather.beta);
    double rs = (N - 1) * (d->reduce_scatter.alpha + S / N * d->reduce_scatter.beta);
    out->comm = (double)(g - k) * (ag + A * rs) + (double)k * (2 * A * ag + A * rs);
    if (cm->kind == OSDP_COST_OVERLAP && cm->prefetch)
        out->total = out->compute > out->comm ? out->compute : out->comm;
    else
        out->total = out->compute + out->comm;
}

long long osdp_cost_peak(const osdp_cost_model *cm, const osdp_plan *plan, int b, int *at_op)
{
    const int n = cm->layout->n_ops;
    osdp_op_mem *m = malloc(sizeof *m * (size_t)n);
    if (!m) return -1;
    long long base = osdp_cost_workspace(cm, b);
    for (int i = 0; i < n; i++) {
        osdp_cost_op_mem(cm, i, plan->slices[i], plan->zdp_slices[i], b, &m[i]);
        base += m[i].state + m[i].resident;
    }
    long long acts = 0, best = -1;
    int where = 0;
    for (int u = 0; u < n; u++) {
        acts += m[u].acts;
        long long v = acts + m[u].grads + (m[u].work > m[u].recv ? m[u].work : m[u].recv);
        if (cm->prefetch && u + 1 < n) v += m[u + 1].grads + m[u + 1].recv;
        if (cm->prefetch && u > 0) v += m[u - 1].prefetch;
        if (v > best) {
            best = v;
            where = u;
        }
    }
    free(m);
    if (at_op) *at_op = where;
    return base + best;
}

double osdp_cost_step_time(const osdp_cost_model *cm, const osdp_plan *plan, int b, int accum)
{
    double t = 0;
    for (int i = 0; i < cm->layout->n_ops; i++) {
        osdp_op_time ot;
        osdp_cost_op_time(cm, i, plan->slices[i], plan->zdp_slices[i], b, accum, &ot);
        t += ot.total;
    }
    return t;
}

#include "osdp/optim.h"

#include <math.h>

void osdp_optim_defaults(osdp_optim_config *c)
{
    c->lr = 1e-3f;
    c->min_lr_frac = 0.1f;
    c->warmup_steps = 10;
    c->total_steps = 1000;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->grad_clip = 1.0f;
}

float osdp_lr_at(const osdp_optim_config *c, long step)
{
    if (c->warmup_steps > 0 && step < c->warmup_steps)
        return c->lr * (float)(step + 1) / (float)c->warmup_steps;
    long decay = c->total_steps - c->warmup_steps;
    if (decay <= 0) return c->lr;
    double progress = (double)(step - c->warmup_steps) / (double)decay;
    if (progress > 1.0) progress = 1.0;
    double coeff = 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    double min_lr = (double)c->lr * c->min_lr_frac;
    return (float)(min_lr + coeff * ((double)c->lr - min_lr));
}

float osdp_clip_scale(const osdp_optim_config *c, double grad_norm)
{
    if (c->grad_clip <= 0 || !(grad_norm > c->grad_clip)) return 1.0f;
    return (float)(c->grad_clip / grad_norm);
}

void osdp_adamw_shard(const osdp_compute_backend *be, const osdp_op_layout *op, size_t lo, size_t n,
                      float *w, const float *g, float *m, float *v, const osdp_optim_config *c,
                      float lr, float grad_scale, long t)
{
    size_t hi = lo + n;
    for (int k = 0; k < op->n_tensors; k++) {
        const osdp_tensor_desc *td = &op->tensor[k];
        size_t a = td->offset > lo ? td->offset : lo;
        size_t b = td->offset + td->numel < hi ? td->offset + td->numel : hi;
        if (a >= b) continue;
        size_t o = a - lo;
        be->adamw(w + o, g + o, m + o, v + o, b - a, lr, c->beta1, c->beta2, c->eps,
                  td->ndim == 2 ? c->weight_decay : 0.0f, grad_scale, t);
    }
    /* padding elements past op->numel keep their zeros: they are never updated */
}

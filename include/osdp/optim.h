/* AdamW on shards, global-norm clipping, and the learning-rate schedule. */
#ifndef OSDP_OPTIM_H
#define OSDP_OPTIM_H

#include <stddef.h>
#include "osdp/compute.h"
#include "osdp/layout.h"

typedef struct osdp_optim_config {
    float lr;              /* peak learning rate */
    float min_lr_frac;     /* cosine decays to lr * min_lr_frac */
    int warmup_steps;      /* linear warmup from lr/warmup to lr */
    long total_steps;      /* cosine horizon */
    float beta1, beta2, eps;
    float weight_decay;    /* decoupled, on 2-D tensors only */
    float grad_clip;       /* global L2 norm; <= 0: off */
} osdp_optim_config;

void osdp_optim_defaults(osdp_optim_config *c);
/* learning rate used for optimizer step `step` (0-based) */
float osdp_lr_at(const osdp_optim_config *c, long step);
/* multiply gradients by this before the update */
float osdp_clip_scale(const osdp_optim_config *c, double grad_norm);
/* AdamW over the operator elements [lo, lo + n) held in w/g/m/v (a shard),
 * weight decay only where the element belongs to a 2-D tensor. t: 1-based. */
void osdp_adamw_shard(const osdp_compute_backend *be, const osdp_op_layout *op, size_t lo, size_t n,
                      float *w, const float *g, float *m, float *v, const osdp_optim_config *c,
                      float lr, float grad_scale, long t);

#endif

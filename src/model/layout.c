/* The per-operator size table (see osdp/layout.h for the layout itself). */
#include "osdp/layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_tensor(osdp_op_layout *op, osdp_param_slot slot, const char *name, int rows, int cols, int ndim,
                       osdp_init_kind init, float std)
{
    op->param[slot] = op->n_tensors;
    osdp_tensor_desc *t = &op->tensor[op->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows;
    t->cols = cols;
    t->ndim = ndim;
    t->offset = op->numel;
    t->numel = (size_t)rows * (size_t)cols;
    t->init = init;
    t->init_std = std;
    op->numel += t->numel;
}

/* bias_slot < 0: no bias */
static void add_linear(osdp_op_layout *op, osdp_param_slot weight_slot, int bias_slot, const char *prefix, int in,
                       int out, float std)
{
    char name[48];
    snprintf(name, sizeof name, "%s.weight", prefix);
    add_tensor(op, weight_slot, name, in, out, 2, OSDP_INIT_NORMAL, std);
    op->flops_per_token += 2 * (size_t)in * (size_t)out;
    if (bias_slot >= 0) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        add_tensor(op, (osdp_param_slot)bias_slot, name, 1, out, 1, OSDP_INIT_ZEROS, 0);
    }
}

static void add_layernorm(osdp_op_layout *op, const char *prefix, int width)
{
    char name[48];
    snprintf(name, sizeof name, "%s.weight", prefix);
    add_tensor(op, OSDP_P_LN_W, name, 1, width, 1, OSDP_INIT_ONES, 0);
    snprintf(name, sizeof name, "%s.bias", prefix);
    add_tensor(op, OSDP_P_LN_B, name, 1, width, 1, OSDP_INIT_ZEROS, 0);
}

/* the next piece of the operator's activation block (osdp/layout.h) */
static void add_act(osdp_op_layout *op, osdp_act_slot slot, size_t floats_per_seq)
{
    op->act[slot] = (osdp_piece){.offset = op->act_floats_per_seq, .floats = floats_per_seq};
    op->act_floats_per_seq += floats_per_seq;
}

/* the next piece of the operator's backward scratch */
static void add_scratch(osdp_op_layout *op, osdp_scratch_slot slot, size_t floats_per_seq)
{
    op->scratch[slot] = (osdp_piece){.offset = op->scratch_floats_per_seq, .floats = floats_per_seq};
    op->scratch_floats_per_seq += floats_per_seq;
}

static void start_op(osdp_op_layout *op, const char *name, osdp_op_type type, int block, int width, int width_in)
{
    snprintf(op->name, sizeof op->name, "%s", name);
    op->type = type;
    op->block = block;
    op->width = width;
    op->width_in = width_in;
    for (int k = 0; k < OSDP_P_N_SLOTS; k++) op->param[k] = -1;
}

osdp_status osdp_layout_build(osdp_layout *layout, const osdp_model_config *cfg, int T)
{
    memset(layout, 0, sizeof *layout);
    if (T < 1 || T > cfg->ctx)
        return osdp_error_set(OSDP_ERR_INPUT, "sequence length %d out of range [1, ctx = %d]", T, cfg->ctx);
    layout->cfg = *cfg;
    layout->T = T;
    int L = cfg->n_layer;
    layout->n_ops = 2 * L + 2;
    layout->op = calloc((size_t)layout->n_ops, sizeof *layout->op);
    if (!layout->op) return osdp_error_set(OSDP_ERR_OOM, "layout: out of host memory");
    const float std = 0.02f;
    const float residual_std = 0.02f / sqrtf(2.0f * (float)L);  /* GPT-2 scaled residual projections */
    const size_t t = (size_t)T;

    osdp_op_layout *embed = &layout->op[0];
    start_op(embed, "embed", OSDP_OP_EMBED, -1, cfg->width[0], cfg->width[0]);
    add_tensor(embed, OSDP_P_WTE, "wte", cfg->vocab, cfg->width[0], 2, OSDP_INIT_NORMAL, std);
    add_tensor(embed, OSDP_P_WPE, "wpe", cfg->ctx, cfg->width[0], 2, OSDP_INIT_NORMAL, std);
    add_act(embed, OSDP_A_TOKENS, t);
    add_act(embed, OSDP_A_OUT, t * (size_t)cfg->width[0]);

    for (int i = 0; i < L; i++) {
        size_t d = (size_t)cfg->width[i];
        int d_in = i == 0 ? cfg->width[0] : cfg->width[i - 1];
        char name[32];
        const size_t att = (size_t)cfg->n_head * t * t;
        osdp_op_layout *attn = &layout->op[1 + 2 * i];
        snprintf(name, sizeof name, "attn.%d", i);
        start_op(attn, name, OSDP_OP_ATTN, i, (int)d, d_in);
        if (d_in != (int)d) add_linear(attn, OSDP_P_IN_PROJ_W, OSDP_P_IN_PROJ_B, "in_proj", d_in, (int)d, std);
        add_layernorm(attn, "ln_1", (int)d);
        add_linear(attn, OSDP_P_QKV_W, OSDP_P_QKV_B, "qkv", (int)d, 3 * (int)d, std);
        add_linear(attn, OSDP_P_PROJ_W, OSDP_P_PROJ_B, "proj", (int)d, (int)d, residual_std);
        attn->attn_flops_per_token = 4 * t * d;
        if (d_in != (int)d) add_act(attn, OSDP_A_XIN, t * d);
        add_act(attn, OSDP_A_LN, t * d);
        add_act(attn, OSDP_A_MEAN, t);
        add_act(attn, OSDP_A_RSTD, t);
        add_act(attn, OSDP_A_QKV, 3 * t * d);
        add_act(attn, OSDP_A_ATT, att);
        add_act(attn, OSDP_A_HEADS, t * d);
        add_act(attn, OSDP_A_OUT, t * d);
        attn->kept_floats_per_seq = attn->act[OSDP_A_OUT].floats;
        add_scratch(attn, OSDP_S_DHEADS, t * d);
        add_scratch(attn, OSDP_S_DQKV, 3 * t * d);
        add_scratch(attn, OSDP_S_DLN, t * d);
        add_scratch(attn, OSDP_S_DATT, att);

        osdp_op_layout *mlp = &layout->op[2 + 2 * i];
        snprintf(name, sizeof name, "mlp.%d", i);
        start_op(mlp, name, OSDP_OP_MLP, i, (int)d, (int)d);
        add_layernorm(mlp, "ln_2", (int)d);
        add_linear(mlp, OSDP_P_FC_W, OSDP_P_FC_B, "fc", (int)d, 4 * (int)d, std);
        add_linear(mlp, OSDP_P_PROJ_W, OSDP_P_PROJ_B, "proj", 4 * (int)d, (int)d, residual_std);
        add_act(mlp, OSDP_A_LN, t * d);
        add_act(mlp, OSDP_A_MEAN, t);
        add_act(mlp, OSDP_A_RSTD, t);
        add_act(mlp, OSDP_A_FC, 4 * t * d);
        add_act(mlp, OSDP_A_GELU, 4 * t * d);
        add_act(mlp, OSDP_A_OUT, t * d);
        mlp->kept_floats_per_seq = mlp->act[OSDP_A_OUT].floats;
        add_scratch(mlp, OSDP_S_DGELU, 4 * t * d);
        add_scratch(mlp, OSDP_S_DLN, t * d);
    }

    osdp_op_layout *head = &layout->op[layout->n_ops - 1];
    size_t d_last = (size_t)cfg->width[L - 1];
    start_op(head, "head", OSDP_OP_HEAD, -1, (int)d_last, (int)d_last);
    add_layernorm(head, "ln_f", (int)d_last);
    add_linear(head, OSDP_P_LM_HEAD_W, -1, "lm_head", (int)d_last, cfg->vocab, std);
    add_act(head, OSDP_A_LN, t * d_last);
    add_act(head, OSDP_A_MEAN, t);
    add_act(head, OSDP_A_RSTD, t);
    add_act(head, OSDP_A_PROBS, t * (size_t)cfg->vocab);
    add_act(head, OSDP_A_LOSSES, t);
    add_act(head, OSDP_A_TOKENS, t);
    add_scratch(head, OSDP_S_DLN, t * d_last);

    for (int i = 0; i < layout->n_ops; i++) {
        layout->total_params += layout->op[i].numel;
        if (layout->op[i].numel > layout->max_op_numel) layout->max_op_numel = layout->op[i].numel;
        if (layout->op[i].scratch_floats_per_seq > layout->max_scratch_floats_per_seq)
            layout->max_scratch_floats_per_seq = layout->op[i].scratch_floats_per_seq;
    }
    for (int i = 0; i < L; i++)
        if ((size_t)cfg->width[i] > layout->max_width) layout->max_width = (size_t)cfg->width[i];
    return OSDP_OK;
}

void osdp_layout_free(osdp_layout *layout)
{
    free(layout->op);
    layout->op = NULL;
}

int osdp_layout_find_op(const osdp_layout *layout, const char *name)
{
    for (int i = 0; i < layout->n_ops; i++)
        if (strcmp(layout->op[i].name, name) == 0) return i;
    return -1;
}

int osdp_layout_find_tensor(const osdp_layout *layout, const char *full_name, int *op, int *tensor)
{
    const char *slash = strchr(full_name, '/');
    if (!slash || (size_t)(slash - full_name) >= 32) return -1;
    char op_name[32];
    memcpy(op_name, full_name, (size_t)(slash - full_name));
    op_name[slash - full_name] = '\0';
    int o = osdp_layout_find_op(layout, op_name);
    if (o < 0) return -1;
    for (int k = 0; k < layout->op[o].n_tensors; k++)
        if (strcmp(layout->op[o].tensor[k].name, slash + 1) == 0) {
            *op = o;
            *tensor = k;
            return 0;
        }
    return -1;
}

static int is_bias(const osdp_tensor_desc *t)
{
    size_t n = strlen(t->name);
    return n >= 5 && strcmp(t->name + n - 5, ".bias") == 0;
}

/* the allowed cut inside or at the start of tensor t nearest to target */
static size_t nearest_cut_in(const osdp_op_layout *op, const osdp_tensor_desc *t, size_t target)
{
    if (t->ndim == 2 && op->type != OSDP_OP_EMBED && t->rows > 1) {
        double r = ((double)target - (double)t->offset) / (double)t->cols;
        long row = lround(r);
        if (row < 0) row = 0;
        if (row > t->rows - 1) row = t->rows - 1;
        return t->offset + (size_t)row * (size_t)t->cols;
    }
    return t->offset;
}

osdp_status osdp_op_split(const osdp_op_layout *op, int g, size_t *bounds)
{
    if (g < 1 || g > OSDP_MAX_SLICES)
        return osdp_error_set(OSDP_ERR_INPUT, "operator %s: %d slices is out of range [1, %d]", op->name, g, OSDP_MAX_SLICES);
    bounds[0] = 0;
    bounds[g] = op->numel;
    if (g == 1) return OSDP_OK;
    if (op->type == OSDP_OP_EMBED)
        return osdp_error_set(OSDP_ERR_INPUT, "operator %s is a lookup, not a matrix product: it cannot be split (use 1 slice)",
                              op->name);
    for (int s = 1; s < g; s++) {
        size_t target = (size_t)((double)op->numel * s / g), best = 0;
        int found = 0;
        for (int k = 0; k < op->n_tensors; k++) {
            const osdp_tensor_desc *t = &op->tensor[k];
            if (is_bias(t)) continue;
            size_t c = nearest_cut_in(op, t, target);
            /* the nearest candidate above the previous cut; rows further up
             * in the same tensor are candidates too when c is not */
            if (c <= bounds[s - 1] && t->ndim == 2 && op->type != OSDP_OP_EMBED) {
                size_t row = (bounds[s - 1] - t->offset) / (size_t)t->cols + 1;
                c = row < (size_t)t->rows ? t->offset + row * (size_t)t->cols : 0;
            }
            if (c <= bounds[s - 1] || c >= op->numel) continue;
            size_t dist = c > target ? c - target : target - c;
            size_t best_dist = best > target ? best - target : target - best;
            if (!found || dist < best_dist) { best = c; found = 1; }
        }
        if (!found)
            return osdp_error_set(OSDP_ERR_INPUT, "operator %s (%zu parameters) cannot be cut into %d slices", op->name,
                                  op->numel, g);
        bounds[s] = best;
    }
    return OSDP_OK;
}

double osdp_layout_flops_per_token(const osdp_layout *layout)
{
    double flops = 0;
    for (int i = 0; i < layout->n_ops; i++)
        flops += 3.0 * (double)(layout->op[i].flops_per_token + layout->op[i].attn_flops_per_token);
    return flops;
}

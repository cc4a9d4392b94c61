/* The per-operator size table (see osdp/layout.h for the layout itself). */
#include "osdp/layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How the tensor added next is cut over the tensor-parallel group, and its
 * whole shape; add_tensor's rows and cols are the rank's part. */
typedef struct tp_cut {
    osdp_tp_split split;
    int groups;                  /* column groups (OSDP_TP_COLS) */
    int logical_rows, logical_cols;
} tp_cut;

static osdp_tensor_desc *add_tensor_cut(osdp_op_layout *op, osdp_param_slot slot, const char *name, int rows,
                                        int cols, int ndim, osdp_init_kind init, float std, tp_cut cut)
{
    op->param[slot] = op->n_tensors;
    osdp_tensor_desc *t = &op->tensor[op->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows;
    t->cols = cols;
    t->logical_rows = cut.logical_rows;
    t->logical_cols = cut.logical_cols;
    t->tp_split = cut.split;
    t->tp_groups = cut.groups;
    t->ndim = ndim;
    t->offset = op->numel;
    t->numel = (size_t)rows * (size_t)cols;
    t->init = init;
    t->init_std = std;
    op->numel += t->numel;
    return t;
}

/* a tensor every rank of the group holds whole */
static void add_tensor(osdp_op_layout *op, osdp_param_slot slot, const char *name, int rows, int cols, int ndim,
                       osdp_init_kind init, float std)
{
    add_tensor_cut(op, slot, name, rows, cols, ndim, init, std,
                   (tp_cut){.split = OSDP_TP_REPLICATED, .groups = 1, .logical_rows = rows, .logical_cols = cols});
}

/* How a linear layer is cut over the group (Megatron): whole, by output
 * columns (column-parallel: weight and bias cut alike, in `groups` column
 * groups), or by input rows (row-parallel: the bias stays whole, added once
 * after the partial products are summed). */
typedef enum linear_cut { LINEAR_WHOLE, LINEAR_COLUMNS, LINEAR_ROWS } linear_cut;

/* bias_slot < 0: no bias.  in, out: the whole layer's; tp divides the cut dimension. */
static void add_linear(osdp_op_layout *op, osdp_param_slot weight_slot, int bias_slot, const char *prefix, int in,
                       int out, float std, linear_cut how, int groups, int tp)
{
    char name[48];
    snprintf(name, sizeof name, "%s.weight", prefix);
    const int rows = how == LINEAR_ROWS ? in / tp : in, cols = how == LINEAR_COLUMNS ? out / tp : out;
    const osdp_tp_split split = how == LINEAR_ROWS ? OSDP_TP_ROWS : how == LINEAR_COLUMNS ? OSDP_TP_COLS
                                                                                         : OSDP_TP_REPLICATED;
    add_tensor_cut(op, weight_slot, name, rows, cols, 2, OSDP_INIT_NORMAL, std,
                   (tp_cut){.split = split, .groups = how == LINEAR_COLUMNS ? groups : 1, .logical_rows = in,
                            .logical_cols = out});
    op->flops_per_token += 2 * (size_t)rows * (size_t)cols;
    if (bias_slot >= 0) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        add_tensor_cut(op, (osdp_param_slot)bias_slot, name, 1, cols, 1, OSDP_INIT_ZEROS, 0,
                       (tp_cut){.split = how == LINEAR_COLUMNS ? OSDP_TP_COLS : OSDP_TP_REPLICATED,
                                .groups = how == LINEAR_COLUMNS ? groups : 1, .logical_rows = 1,
                                .logical_cols = out});
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

/* the next piece of the operator's activation block (osdp/layout.h): n
 * elements per sequence, fp32, or bf16 in ceil(n / 2) floats */
static void add_act_of(osdp_op_layout *op, osdp_act_slot slot, size_t n, int act_bf16)
{
    const size_t floats_per_seq = act_bf16 && osdp_act_slot_bf16(slot) ? (n + 1) / 2 : n;
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
    op->allowed_modes = OSDP_MODE_DP | OSDP_MODE_ZDP;
    for (int k = 0; k < OSDP_P_N_SLOTS; k++) op->param[k] = -1;
}

osdp_status osdp_layout_build(osdp_layout *layout, const osdp_model_config *cfg, int T)
{
    return osdp_layout_build_tp(layout, cfg, T, 1, 1);
}

osdp_status osdp_layout_build_tp(osdp_layout *layout, const osdp_model_config *cfg, int T, int tp,
                                 int vocab_quantum)
{
    memset(layout, 0, sizeof *layout);
    if (T < 1 || T > cfg->ctx)
        return osdp_error_set(OSDP_ERR_INPUT, "sequence length %d out of range [1, ctx = %d]", T, cfg->ctx);
    if (tp < 1)
        return osdp_error_set(OSDP_ERR_INPUT, "--tp %d: the tensor-parallel degree must be at least 1", tp);
    /* heads are what qkv's columns are cut by: every rank gets whole heads,
     * and then tp divides d, 3d and 4d too */
    if (cfg->n_head % tp != 0)
        return osdp_error_set(OSDP_ERR_INPUT,
                              "--tp %d does not divide the model's %d attention heads: each rank of a tensor-parallel "
                              "group holds whole heads (choose a divisor of %d)",
                              tp, cfg->n_head, cfg->n_head);
    /* the pipeline's messages (b T d of a width) are cut into tp equal pieces (osdp_pipe_piece_of): the
     * check above implies it for a configuration read from a model file (n_head divides every width) */
    for (int i = 0; i < cfg->n_layer; i++)
        if (cfg->width[i] % tp != 0)
            return osdp_error_set(OSDP_ERR_INPUT, "--tp %d does not divide the width %d of block %d: the tensor-parallel "
                                  "ranks split every width (and the pipeline's messages) evenly", tp, cfg->width[i], i);
    const int quantum = (vocab_quantum > 1 ? vocab_quantum : 1) * tp;
    layout->cfg = *cfg;
    layout->T = T;
    layout->tp_size = tp;
    layout->vocab_padded = (cfg->vocab + quantum - 1) / quantum * quantum;
    layout->vocab_local = layout->vocab_padded / tp;
    const int V = cfg->vocab, VL = layout->vocab_local, NH = cfg->n_head / tp;
    int L = cfg->n_layer;
    layout->n_ops = 2 * L + 2;
    layout->op = calloc((size_t)layout->n_ops, sizeof *layout->op);
    if (!layout->op) return osdp_error_set(OSDP_ERR_OOM, "layout: out of host memory");
#define add_act(op, slot, n) add_act_of(op, slot, n, cfg->act_bf16)
    const float std = 0.02f;
    const float residual_std = 0.02f / sqrtf(2.0f * (float)L);  /* GPT-2 scaled residual projections */
    const size_t t = (size_t)T;

    osdp_op_layout *embed = &layout->op[0];
    start_op(embed, "embed", OSDP_OP_EMBED, -1, cfg->width[0], cfg->width[0]);
    add_tensor_cut(embed, OSDP_P_WTE, "wte", VL, cfg->width[0], 2, OSDP_INIT_NORMAL, std,
                   (tp_cut){.split = OSDP_TP_ROWS, .groups = 1, .logical_rows = V, .logical_cols = cfg->width[0]});
    add_tensor(embed, OSDP_P_WPE, "wpe", cfg->ctx, cfg->width[0], 2, OSDP_INIT_NORMAL, std);
    add_act(embed, OSDP_A_TOKENS, t);
    add_act(embed, OSDP_A_OUT, t * (size_t)cfg->width[0]);

    for (int i = 0; i < L; i++) {
        size_t d = (size_t)cfg->width[i];
        int d_in = i == 0 ? cfg->width[0] : cfg->width[i - 1];
        char name[32];
        const size_t att = (size_t)NH * t * t, dp = d / (size_t)tp;   /* this rank's heads and their width */
        osdp_op_layout *attn = &layout->op[1 + 2 * i];
        snprintf(name, sizeof name, "attn.%d", i);
        start_op(attn, name, OSDP_OP_ATTN, i, (int)d, d_in);
        if (d_in != (int)d)
            add_linear(attn, OSDP_P_IN_PROJ_W, OSDP_P_IN_PROJ_B, "in_proj", d_in, (int)d, std, LINEAR_WHOLE, 1, tp);
        add_layernorm(attn, "ln_1", (int)d);
        add_linear(attn, OSDP_P_QKV_W, OSDP_P_QKV_B, "qkv", (int)d, 3 * (int)d, std, LINEAR_COLUMNS, 3, tp);
        add_linear(attn, OSDP_P_PROJ_W, OSDP_P_PROJ_B, "proj", (int)d, (int)d, residual_std, LINEAR_ROWS, 1, tp);
        attn->attn_flops_per_token = 4 * t * dp;
        if (d_in != (int)d) add_act(attn, OSDP_A_XIN, t * d);
        add_act(attn, OSDP_A_LN, t * d);
        add_act(attn, OSDP_A_MEAN, t);
        add_act(attn, OSDP_A_RSTD, t);
        add_act(attn, OSDP_A_QKV, 3 * t * dp);
        attn->attn_tiled = !cfg->attention_naive;
        if (attn->attn_tiled) add_act(attn, OSDP_A_LSE, (size_t)NH * t);
        else add_act(attn, OSDP_A_ATT, att);
        add_act(attn, OSDP_A_HEADS, t * dp);
        add_act(attn, OSDP_A_OUT, t * d);
        attn->kept_floats_per_seq = attn->act[OSDP_A_OUT].floats;
        add_scratch(attn, OSDP_S_DHEADS, t * dp);
        add_scratch(attn, OSDP_S_DQKV, 3 * t * dp);
        add_scratch(attn, OSDP_S_DLN, t * d);
        if (attn->attn_tiled) add_scratch(attn, OSDP_S_ROWDOT, (size_t)NH * t);
        else add_scratch(attn, OSDP_S_DATT, att);
        if (cfg->act_bf16) add_scratch(attn, OSDP_S_ACT, t * d + 3 * t * dp);   /* ln then heads; qkv */

        osdp_op_layout *mlp = &layout->op[2 + 2 * i];
        snprintf(name, sizeof name, "mlp.%d", i);
        start_op(mlp, name, OSDP_OP_MLP, i, (int)d, (int)d);
        add_layernorm(mlp, "ln_2", (int)d);
        add_linear(mlp, OSDP_P_FC_W, OSDP_P_FC_B, "fc", (int)d, 4 * (int)d, std, LINEAR_COLUMNS, 1, tp);
        add_linear(mlp, OSDP_P_PROJ_W, OSDP_P_PROJ_B, "proj", 4 * (int)d, (int)d, residual_std, LINEAR_ROWS, 1, tp);
        add_act(mlp, OSDP_A_LN, t * d);
        add_act(mlp, OSDP_A_MEAN, t);
        add_act(mlp, OSDP_A_RSTD, t);
        add_act(mlp, OSDP_A_FC, 4 * t * dp);
        add_act(mlp, OSDP_A_GELU, 4 * t * dp);
        add_act(mlp, OSDP_A_OUT, t * d);
        mlp->kept_floats_per_seq = mlp->act[OSDP_A_OUT].floats;
        add_scratch(mlp, OSDP_S_DGELU, 4 * t * dp);
        add_scratch(mlp, OSDP_S_DLN, t * d);
        if (cfg->act_bf16) add_scratch(mlp, OSDP_S_ACT, t * d + 4 * t * dp);   /* ln; fc then gelu */
    }

    /* the tied-head rule: the head reads the embedding's resident wte, so the embedding is DP */
    if (cfg->tied_head) layout->op[0].allowed_modes = OSDP_MODE_DP;
    osdp_op_layout *head = &layout->op[layout->n_ops - 1];
    size_t d_last = (size_t)cfg->width[L - 1];
    start_op(head, "head", OSDP_OP_HEAD, -1, (int)d_last, (int)d_last);
    add_layernorm(head, "ln_f", (int)d_last);
    /* tied: the product reads the embedding's wte, the same vocab_local rows (d_last = d_0, checked at parse) */
    if (!cfg->tied_head)
        add_tensor_cut(head, OSDP_P_LM_HEAD_W, "lm_head.weight", (int)d_last, VL, 2, OSDP_INIT_NORMAL, std,
                       (tp_cut){.split = OSDP_TP_COLS, .groups = 1, .logical_rows = (int)d_last, .logical_cols = V});
    head->flops_per_token += 2 * d_last * (size_t)VL;
    if (tp > 1 || VL != V || !cfg->head_naive) head->tp_floats_per_seq = 3 * t * (size_t)(tp + 1);
    if (!cfg->head_naive) {
        /* the fused head's chunk of logits lives in the staging, after the statistics */
        head->head_chunk_rows = T < OSDP_HEAD_CHUNK_ROWS ? T : OSDP_HEAD_CHUNK_ROWS;
        head->tp_floats_per_seq += (size_t)head->head_chunk_rows * (size_t)VL;
    }
    add_act(head, OSDP_A_LN, t * d_last);
    add_act(head, OSDP_A_MEAN, t);
    add_act(head, OSDP_A_RSTD, t);
    if (head->head_chunk_rows) add_act(head, OSDP_A_LSE, t);
    else add_act(head, OSDP_A_PROBS, t * (size_t)VL);
    add_act(head, OSDP_A_LOSSES, t);
    add_act(head, OSDP_A_TOKENS, t);
    add_scratch(head, OSDP_S_DLN, t * d_last);
    if (cfg->act_bf16) add_scratch(head, OSDP_S_ACT, t * d_last);
#undef add_act

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
    if (!osdp_op_can_split(op) && op->head_chunk_rows > 0 && op->param[OSDP_P_LM_HEAD_W] >= 0)
        return osdp_error_set(OSDP_ERR_INPUT, "operator %s is the fused linear + cross-entropy head (--head fused): each "
                              "chunk of logits needs its whole weight, so it cannot be split (use 1 slice, or "
                              "--head naive)", op->name);
    if (!osdp_op_can_split(op))
        return osdp_error_set(OSDP_ERR_INPUT, "operator %s is tied to the embedding's wte (tied_head = true): it holds "
                              "ln_f alone and cannot be split (use 1 slice)", op->name);
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

int osdp_tensor_logical_run(const osdp_tensor_desc *t, int tp_rank, size_t e, size_t *logical, size_t *run)
{
    const size_t cols = (size_t)t->cols, r = e / cols, c = e % cols;
    switch (t->tp_split) {
    case OSDP_TP_REPLICATED: break;
    case OSDP_TP_ROWS: {
        /* whole rows, consecutive; the rows past the logical ones are the vocabulary padding, at the end */
        const size_t rows = (size_t)t->rows, row = (size_t)tp_rank * rows + r, logical_rows = (size_t)t->logical_rows;
        if (row >= logical_rows) {
            *run = t->numel - e;
            return 0;
        }
        *logical = row * cols + c;
        const size_t valid_end = (logical_rows - (size_t)tp_rank * rows) * cols;   /* local elements with a row */
        *run = (valid_end < t->numel ? valid_end : t->numel) - e;
        return 1;
    }
    case OSDP_TP_COLS: {
        /* within a row, group g's local columns are the rank's share of logical group g */
        const size_t group_cols = cols / (size_t)t->tp_groups, g = c / group_cols, within = c % group_cols;
        const size_t logical_group = (size_t)t->logical_cols / (size_t)t->tp_groups;
        const size_t col = g * logical_group + (size_t)tp_rank * group_cols + within;
        const size_t group_end = (g + 1) * logical_group;   /* vocabulary padding: columns at or past it */
        if (col >= group_end || col >= (size_t)t->logical_cols) {
            *run = cols - c;        /* padding columns end the row (one group) */
            return 0;
        }
        *logical = r * (size_t)t->logical_cols + col;
        size_t left = group_cols - within;
        if (col + left > group_end) left = group_end - col;
        *run = left;
        return 1;
    }
    }
    *logical = e;
    *run = t->numel - e;
    return 1;
}

double osdp_layout_flops_per_token(const osdp_layout *layout)
{
    double flops = 0;
    for (int i = 0; i < layout->n_ops; i++)
        flops += 3.0 * (double)(layout->op[i].flops_per_token + layout->op[i].attn_flops_per_token);
    return flops;
}

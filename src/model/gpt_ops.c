/* Forward and backward of the GPT operators (see osdp/gpt.h). */
#include "osdp/gpt.h"

#include <string.h>

static float *take(float **cursor, size_t n, size_t *used)
{
    float *p = *cursor;
    if (*cursor) *cursor += n;
    *used += n;
    return p;
}

size_t osdp_op_acts_carve(const osdp_layout *layout, int op_index, int B, float *base, osdp_op_acts *a)
{
    const osdp_op_layout *op = &layout->op[op_index];
    const size_t bt = (size_t)B * (size_t)layout->T;
    const size_t d = (size_t)op->width;
    const size_t nh = (size_t)layout->cfg.n_head;
    size_t used = 0;
    float *c = base;
    memset(a, 0, sizeof *a);
    switch (op->type) {
    case OSDP_OP_EMBED:
        a->tokens = (int *)take(&c, bt, &used);   /* int and float are both 4 bytes */
        a->out = take(&c, bt * d, &used);
        break;
    case OSDP_OP_ATTN:
        if (op->width_in != op->width) a->xin = take(&c, bt * d, &used);
        a->ln = take(&c, bt * d, &used);
        a->mean = take(&c, bt, &used);
        a->rstd = take(&c, bt, &used);
        a->qkv = take(&c, 3 * bt * d, &used);
        a->att = take(&c, (size_t)B * nh * (size_t)layout->T * (size_t)layout->T, &used);
        a->heads = take(&c, bt * d, &used);
        a->out = take(&c, bt * d, &used);
        break;
    case OSDP_OP_MLP:
        a->ln = take(&c, bt * d, &used);
        a->mean = take(&c, bt, &used);
        a->rstd = take(&c, bt, &used);
        a->fc = take(&c, 4 * bt * d, &used);
        a->gelu = take(&c, 4 * bt * d, &used);
        a->out = take(&c, bt * d, &used);
        break;
    case OSDP_OP_HEAD:
        a->ln = take(&c, bt * d, &used);
        a->mean = take(&c, bt, &used);
        a->rstd = take(&c, bt, &used);
        a->probs = take(&c, bt * (size_t)layout->cfg.vocab, &used);
        a->losses = take(&c, bt, &used);
        a->tokens = (int *)take(&c, bt, &used);
        break;
    }
    return used;
}

/* Largest per-operator backward scratch: attn needs d(heads), d(qkv), d(ln)
 * and a (B,NH,T,T) buffer; mlp d(gelu) and d(ln); head d(ln). */
static size_t scratch_floats(const osdp_layout *layout, int B)
{
    const size_t bt = (size_t)B * (size_t)layout->T;
    size_t best = 0;
    for (int i = 0; i < layout->n_ops; i++) {
        const osdp_op_layout *op = &layout->op[i];
        size_t d = (size_t)op->width, need = 0;
        if (op->type == OSDP_OP_ATTN)
            need = 5 * bt * d + (size_t)B * (size_t)layout->cfg.n_head * (size_t)layout->T * (size_t)layout->T;
        else if (op->type == OSDP_OP_MLP) need = 5 * bt * d;
        else if (op->type == OSDP_OP_HEAD) need = bt * d;
        if (need > best) best = need;
    }
    return best;
}

size_t osdp_workspace_floats(const osdp_layout *layout, int B)
{
    return 2 * (size_t)B * (size_t)layout->T * layout->max_width + scratch_floats(layout, B);
}

void osdp_workspace_carve(const osdp_layout *layout, int B, float *base, osdp_workspace *ws)
{
    size_t res = (size_t)B * (size_t)layout->T * layout->max_width;
    ws->dres[0] = base;
    ws->dres[1] = base + res;
    ws->scratch = base + 2 * res;
    ws->cur = 0;
}

static inline const float *tensor(const osdp_op_layout *op, const float *w, int k)
{
    return w + op->tensor[k].offset;
}
static inline float *gtensor(const osdp_op_layout *op, float *g, int k)
{
    return g + op->tensor[k].offset;
}
static inline void poke(const osdp_op_context *ctx)
{
    if (ctx->progress) ctx->progress(ctx->progress_arg);
}

void osdp_op_forward(const osdp_op_context *ctx, int op_index, const float *w,
                     const float *input, osdp_op_acts *a)
{
    const osdp_compute_backend *be = ctx->backend;
    const osdp_op_layout *op = &ctx->layout->op[op_index];
    const int B = ctx->B, T = ctx->T, BT = B * T, d = op->width;
    const int NH = ctx->layout->cfg.n_head, V = ctx->layout->cfg.vocab;
    switch (op->type) {
    case OSDP_OP_EMBED:
        be->embedding_forward(a->out, a->tokens, tensor(op, w, 0), tensor(op, w, 1), B, T, d);
        break;
    case OSDP_OP_ATTN: {
        int k = 0;
        const float *x = input;
        if (op->width_in != d) {
            be->matmul_forward(a->xin, input, tensor(op, w, 0), tensor(op, w, 1), BT, op->width_in, d, 0);
            x = a->xin;
            k = 2;
            poke(ctx);
        }
        be->layernorm_forward(a->ln, a->mean, a->rstd, x, tensor(op, w, k), tensor(op, w, k + 1), BT, d);
        be->matmul_forward(a->qkv, a->ln, tensor(op, w, k + 2), tensor(op, w, k + 3), BT, d, 3 * d, 0);
        poke(ctx);
        be->attention_forward(a->heads, a->att, a->qkv, B, T, d, NH);
        poke(ctx);
        be->matmul_forward(a->out, a->heads, tensor(op, w, k + 4), tensor(op, w, k + 5), BT, d, d, 0);
        be->residual_forward(a->out, a->out, x, (size_t)BT * d);
        break;
    }
    case OSDP_OP_MLP:
        be->layernorm_forward(a->ln, a->mean, a->rstd, input, tensor(op, w, 0), tensor(op, w, 1), BT, d);
        be->matmul_forward(a->fc, a->ln, tensor(op, w, 2), tensor(op, w, 3), BT, d, 4 * d, 0);
        poke(ctx);
        be->gelu_forward(a->gelu, a->fc, (size_t)BT * 4 * d);
        be->matmul_forward(a->out, a->gelu, tensor(op, w, 4), tensor(op, w, 5), BT, 4 * d, d, 0);
        be->residual_forward(a->out, a->out, input, (size_t)BT * d);
        break;
    case OSDP_OP_HEAD:
        be->layernorm_forward(a->ln, a->mean, a->rstd, input, tensor(op, w, 0), tensor(op, w, 1), BT, d);
        be->matmul_forward(a->probs, a->ln, tensor(op, w, 2), NULL, BT, d, V, 0);
        poke(ctx);
        be->crossentropy_forward(a->losses, a->probs, a->tokens, BT, V);
        break;
    }
    poke(ctx);
}

void osdp_op_backward(const osdp_op_context *ctx, int op_index, const float *w, float *g,
                      const float *input, const osdp_op_acts *a, osdp_workspace *ws,
                      float loss_scale)
{
    const osdp_compute_backend *be = ctx->backend;
    const osdp_op_layout *op = &ctx->layout->op[op_index];
    const int B = ctx->B, T = ctx->T, BT = B * T, d = op->width;
    const int NH = ctx->layout->cfg.n_head, V = ctx->layout->cfg.vocab;
    const size_t btd = (size_t)BT * (size_t)d;
    float *dout = ws->dres[ws->cur];
    float *s = ws->scratch;
    switch (op->type) {
    case OSDP_OP_EMBED:
        be->embedding_backward(gtensor(op, g, 0), gtensor(op, g, 1), dout, a->tokens, B, T, d);
        break;
    case OSDP_OP_ATTN: {
        int k = op->width_in != d ? 2 : 0;
        const float *x = k ? a->xin : input;
        float *dheads = s, *dqkv = s + btd, *dln = s + 4 * btd, *datt = s + 5 * btd;
        be->matmul_backward(dheads, gtensor(op, g, k + 4), gtensor(op, g, k + 5), dout, a->heads,
                            tensor(op, w, k + 4), BT, d, d, 0);
        poke(ctx);
        be->attention_backward(dqkv, datt, dheads, a->qkv, a->att, B, T, d, NH);
        poke(ctx);
        be->matmul_backward(dln, gtensor(op, g, k + 2), gtensor(op, g, k + 3), dqkv, a->ln,
                            tensor(op, w, k + 2), BT, d, 3 * d, 0);
        poke(ctx);
        /* residual: d(x) = d(out) + layernorm path, accumulated in place */
        be->layernorm_backward(dout, gtensor(op, g, k), gtensor(op, g, k + 1), dln, x,
                               tensor(op, w, k), a->mean, a->rstd, BT, d);
        if (k) {
            float *dprev = ws->dres[1 - ws->cur];
            be->matmul_backward(dprev, gtensor(op, g, 0), gtensor(op, g, 1), dout, input,
                                tensor(op, w, 0), BT, op->width_in, d, 0);
            ws->cur = 1 - ws->cur;
        }
        break;
    }
    case OSDP_OP_MLP: {
        float *dgelu = s, *dln = s + 4 * btd;
        be->matmul_backward(dgelu, gtensor(op, g, 4), gtensor(op, g, 5), dout, a->gelu,
                            tensor(op, w, 4), BT, 4 * d, d, 0);
        poke(ctx);
        be->gelu_backward(dgelu, a->fc, dgelu, 4 * btd);
        be->matmul_backward(dln, gtensor(op, g, 2), gtensor(op, g, 3), dgelu, a->ln,
                            tensor(op, w, 2), BT, d, 4 * d, 0);
        poke(ctx);
        be->layernorm_backward(dout, gtensor(op, g, 0), gtensor(op, g, 1), dln, input,
                               tensor(op, w, 0), a->mean, a->rstd, BT, d);
        break;
    }
    case OSDP_OP_HEAD: {
        float *dln = s;
        /* probabilities become d(logits) in place: they are not needed after */
        float *dlogits = a->probs;
        be->crossentropy_backward(dlogits, a->probs, a->tokens, loss_scale, BT, V);
        be->matmul_backward(dln, gtensor(op, g, 2), NULL, dlogits, a->ln, tensor(op, w, 2), BT, d, V, 0);
        poke(ctx);
        be->fill_zero(dout, btd * sizeof(float));
        be->layernorm_backward(dout, gtensor(op, g, 0), gtensor(op, g, 1), dln, input,
                               tensor(op, w, 0), a->mean, a->rstd, BT, d);
        break;
    }
    }
    poke(ctx);
}

/* Forward and backward of the GPT operators (see osdp/gpt.h), whole or as
 * one rank's tensor-parallel parts (osdp/layout.h): Megatron's conjugate
 * pair around each cut product, a vocab-parallel embedding, and a
 * vocab-parallel cross-entropy that never gathers the logits.  With
 * tp_size 1 and an unpadded vocabulary the kernels called are today's, in
 * the same order: the same bits. */
#include "osdp/gpt.h"

#include <string.h>

size_t osdp_op_acts_carve(const osdp_layout *layout, int op_index, int B, float *base, osdp_op_acts *a)
{
    const osdp_op_layout *op = &layout->op[op_index];
    float *at[OSDP_A_N_SLOTS] = {0};
    for (int k = 0; k < OSDP_A_N_SLOTS; k++)
        if (base && op->act[k].floats) at[k] = base + (size_t)B * op->act[k].offset;
    *a = (osdp_op_acts){.tokens = (int *)at[OSDP_A_TOKENS],   /* int and float are both 4 bytes */
                        .out = at[OSDP_A_OUT], .xin = at[OSDP_A_XIN], .ln = at[OSDP_A_LN],
                        .mean = at[OSDP_A_MEAN], .rstd = at[OSDP_A_RSTD], .qkv = at[OSDP_A_QKV],
                        .att = at[OSDP_A_ATT], .heads = at[OSDP_A_HEADS], .fc = at[OSDP_A_FC],
                        .gelu = at[OSDP_A_GELU], .probs = at[OSDP_A_PROBS], .losses = at[OSDP_A_LOSSES],
                        .lse = at[OSDP_A_LSE]};
    return (size_t)B * op->act_floats_per_seq;
}

size_t osdp_workspace_floats(const osdp_layout *layout, int B)
{
    return 2 * (size_t)B * (size_t)layout->T * layout->max_width + (size_t)B * layout->max_scratch_floats_per_seq;
}

void osdp_workspace_carve(const osdp_layout *layout, int B, float *base, osdp_workspace *ws)
{
    size_t res = (size_t)B * (size_t)layout->T * layout->max_width;
    ws->dres[0] = base;
    ws->dres[1] = base + res;
    ws->scratch = base + 2 * res;
    ws->cur = 0;
}

/* the operator's scratch piece `slot` for B sequences */
static float *scratch_at(const osdp_op_context *ctx, const osdp_op_layout *op, const osdp_workspace *ws,
                         osdp_scratch_slot slot)
{
    return ws->scratch + (size_t)ctx->B * op->scratch[slot].offset;
}

/* ---- bf16 activations (osdp/layout.h) -----------------------------------
 * A bf16 piece is computed in fp32 in the operator's OSDP_S_ACT scratch,
 * rounded there and narrowed into the piece (store_act); the products read
 * the rounded fp32 copy, or, where the table has the entries, the piece
 * itself (direct_act).  The backward widens the piece there again
 * (load_act), exact, for the readers that need fp32.  Without bf16
 * activations both return the piece.  Where the table has the producers'
 * bf16 entries (osdp/compute.h: the layernorm, the residual + layernorm,
 * the tiled attention and the GELU) they write the piece itself, the same
 * bits, and the fp32 copy is made (widened, exact) only for a reader that
 * needs it; a piece no reader needs in fp32 is narrowed without the
 * rounding pass over its copy (convert_weights rounds as residual_round does). */

static int acts_bf16(const osdp_op_context *ctx) { return ctx->layout->cfg.act_bf16; }

/* part `second` of the operator's OSDP_S_ACT in the scratch at `base` (osdp/layout.h) */
static float *act_copy(const osdp_op_context *ctx, const osdp_op_layout *op, float *base, int second)
{
    const size_t first = second ? (size_t)ctx->T * (size_t)op->width : 0;
    return base + (size_t)ctx->B * (op->scratch[OSDP_S_ACT].offset + first);
}

/* where the forward computes a bf16 piece (the piece itself when fp32) */
static float *act_stage(const osdp_op_context *ctx, const osdp_op_layout *op, float *piece, int second)
{
    return acts_bf16(ctx) ? act_copy(ctx, op, ctx->act_scratch, second) : piece;
}

/* The staged values rounded to bf16 ones and stored into the piece; returns what the products read: the rounded
 * copy, or, `wide` 0 (every reader takes the piece itself), NULL, and the copy is not rounded, only narrowed */
static const float *store_act(const osdp_op_context *ctx, float *piece, float *stage, size_t n, int wide)
{
    if (stage == piece) return piece;
    if (!wide) {
        ctx->backend->convert_weights(piece, stage, n);   /* rounds: the bits of the two passes below */
        return NULL;
    }
    ctx->backend->residual_round(stage, n);
    ctx->backend->convert_weights(piece, stage, n);   /* exact: bf16 values already */
    return stage;
}

/* the forward's fp32 copy of a piece a producer wrote in bf16 (OSDP_S_ACT part `second`, widened, exact), for a
 * reader that needs it (`wide`); NULL when none does */
static const float *widen_act(const osdp_op_context *ctx, const osdp_op_layout *op, const float *piece, size_t n,
                              int second, int wide)
{
    if (!wide) return NULL;
    float *copy = act_copy(ctx, op, ctx->act_scratch, second);
    ctx->backend->residual_widen(copy, piece, n);
    return copy;
}

/* the piece as fp32 for the backward: widened into OSDP_S_ACT (bf16), or itself */
static const float *load_act(const osdp_op_context *ctx, const osdp_op_layout *op, const osdp_workspace *ws,
                             const float *piece, size_t n, int second)
{
    if (!acts_bf16(ctx)) return piece;
    float *wide = act_copy(ctx, op, ws->scratch, second);
    ctx->backend->residual_widen(wide, piece, n);
    return wide;
}

/* ---- weights and gradients through slices ------------------------------- */

/* A pass over one operator: resolves flat element offsets to pointers in the
 * slice buffers, asking the runtime for each slice before its first use. */
typedef struct pass {
    const osdp_op_context *ctx;
    const osdp_op_layout *op;
    const osdp_op_slices *sl;
    int cur;                   /* slice acquired last, -1 none */
    size_t wsize;              /* bytes per weight element (backend->weight_dtype) */
    osdp_status status;
} pass;

/* element e of the operator's flat weights, held by slice s */
static const void *weight_at(const pass *p, int s, size_t e)
{
    return (const char *)p->sl->weights[s] + (e - p->sl->bounds[s]) * p->wsize;
}

static int slice_of(const osdp_op_slices *sl, size_t e)
{
    int s = 0;
    while (s + 1 < sl->n && sl->bounds[s + 1] <= e) s++;
    return s;
}

static int acquire(pass *p, int s)
{
    if (p->status != OSDP_OK) return 0;
    if (s != p->cur && p->sl->acquire) p->status = p->sl->acquire(p->sl->arg, s);
    p->cur = s;
    return p->status == OSDP_OK;
}

/* weights / gradients of the tensor in `slot` (a tensor never spans two slices
 * unless it is a linear weight, which goes through linear_forward / linear_backward) */
static const void *tw(pass *p, osdp_param_slot slot)
{
    size_t e = p->op->tensor[p->op->param[slot]].offset;
    int s = slice_of(p->sl, e);
    if (!acquire(p, s)) return NULL;
    return weight_at(p, s, e);
}
static float *tg(pass *p, osdp_param_slot slot)
{
    size_t e = p->op->tensor[p->op->param[slot]].offset;
    int s = slice_of(p->sl, e);
    if (!acquire(p, s)) return NULL;
    return p->sl->grads[s] + (e - p->sl->bounds[s]);
}
static inline void poke(const osdp_op_context *ctx)
{
    if (ctx->progress) ctx->progress(ctx->progress_arg);
}

/* ---- the tensor-parallel group ------------------------------------------ */

static int tp_size(const osdp_op_context *ctx) { return ctx->layout->tp_size; }
static int tp_rank(const osdp_op_context *ctx) { return tp_size(ctx) > 1 ? ctx->tp->rank : 0; }

/* a context whose layout is cut for a group must come with that group */
static osdp_status check_group(const osdp_op_context *ctx)
{
    if (tp_size(ctx) == 1) return OSDP_OK;
    if (!ctx->tp || ctx->tp->size != tp_size(ctx) || ctx->tp->rank < 0 || ctx->tp->rank >= tp_size(ctx))
        return osdp_error_set(OSDP_ERR_INTERNAL, "operator context: the layout is for a tensor-parallel group of %d "
                              "ranks but the context's group is %s (size %d)",
                              tp_size(ctx), ctx->tp ? "another" : "missing", ctx->tp ? ctx->tp->size : 0);
    return OSDP_OK;
}

/* the group's sum of buf in place (nothing to do alone); an error stops the pass */
static void tp_all_reduce(pass *p, float *buf, size_t n)
{
    if (p->status != OSDP_OK || tp_size(p->ctx) == 1) return;
    p->status = p->ctx->tp->all_reduce(p->ctx->tp->arg, buf, n);
}

/* this rank's first vocabulary entry (row of wte, column of lm_head), and how
 * many of its vocab_local entries are real words rather than padding */
static int vocab_lo(const osdp_op_context *ctx) { return tp_rank(ctx) * ctx->layout->vocab_local; }
static int vocab_valid(const osdp_op_context *ctx)
{
    const int left = ctx->layout->cfg.vocab - vocab_lo(ctx);
    return left < 0 ? 0 : left < ctx->layout->vocab_local ? left : ctx->layout->vocab_local;
}

/* The vocab-parallel cross-entropy (tp > 1 or a padded vocabulary: the head's
 * tp_floats_per_seq): this rank's statistics of its logits (in a->probs) into
 * the staging's first 3 BT floats, the group's gathered after them in rank
 * order (alone: the rank's own are the group's), then losses and
 * probabilities from the group's, on every rank the same bits. */
static void crossentropy_vocab_parallel(pass *p, osdp_op_acts *a, int BT)
{
    const osdp_op_context *ctx = p->ctx;
    const osdp_compute_backend *be = ctx->backend;
    const int V = ctx->layout->vocab_local, valid = vocab_valid(ctx);
    if (!ctx->tp_staging) {
        p->status = osdp_error_set(OSDP_ERR_INTERNAL, "head: the vocab-parallel cross-entropy needs the context's "
                                   "tp_staging (%zu floats per sequence)", p->op->tp_floats_per_seq);
        return;
    }
    float *local = ctx->tp_staging, *group = tp_size(ctx) > 1 ? local + 3 * (size_t)BT : local;
    be->crossentropy_stats(local, a->probs, a->tokens, BT, V, valid, vocab_lo(ctx));
    if (tp_size(ctx) > 1) p->status = ctx->tp->all_gather(ctx->tp->arg, local, group, 3 * (size_t)BT);
    if (p->status != OSDP_OK) return;
    be->crossentropy_finish(a->losses, a->probs, group, BT, V, valid, tp_size(ctx));
}

/* rows [*r0, r1) of weight tensor k held by the slice containing row r1 - 1
 * (backward walks rows downwards) or row r0 (forward, upwards) */
static int piece_slice(const pass *p, int k, int row)
{
    const osdp_tensor_desc *t = &p->op->tensor[k];
    return slice_of(p->sl, t->offset + (size_t)row * (size_t)t->cols);
}

/* y = x W + b, W = the tensor in w_slot (IC, OC), b that in b_slot (< 0: no
 * bias).  A weight cut by slice boundaries runs one product per piece (its
 * rows in one slice), the pieces summed into y; the bias is in the slice of
 * the last rows. */
static void linear_forward(pass *p, float *y, const float *x, const void *x16, osdp_param_slot w_slot, int b_slot,
                           int BT)
{
    const osdp_compute_backend *be = p->ctx->backend;
    const int k = p->op->param[w_slot];
    const osdp_tensor_desc *t = &p->op->tensor[k];
    const int IC = t->rows, OC = t->cols;
    int r0 = 0;
    while (r0 < IC) {
        int s = piece_slice(p, k, r0);
        if (!acquire(p, s)) return;
        size_t hi = p->sl->bounds[s + 1];
        int r1 = hi >= t->offset + t->numel ? IC : (int)((hi - t->offset) / (size_t)t->cols);
        const void *w = weight_at(p, s, t->offset + (size_t)r0 * OC);
        const void *b = r1 == IC && b_slot >= 0 ? tw(p, (osdp_param_slot)b_slot) : NULL;
        if (r0 == 0 && r1 == IC && x16) be->matmul_forward_bf16_x(y, x16, w, b, BT, IC, OC, 0);
        else if (r0 == 0 && r1 == IC) be->matmul_forward(y, x, w, b, BT, IC, OC, 0);
        else be->matmul_forward_strided(y, x + r0, IC, w, b, BT, r1 - r0, OC, r0 > 0);
        r0 = r1;
    }
}

/* dW += x^T dy, db += sum dy, dx = [dx +] dy W^T (dx may be NULL), pieces in
 * decreasing slice order; x16 (direct_act) not NULL: x read from it, and x may be NULL */
static void linear_backward(pass *p, float *dx, const float *dy, const float *x, const void *x16,
                            osdp_param_slot w_slot, int b_slot, int BT, int dx_accumulate)
{
    const osdp_compute_backend *be = p->ctx->backend;
    const int k = p->op->param[w_slot];
    const osdp_tensor_desc *t = &p->op->tensor[k];
    const int IC = t->rows, OC = t->cols;
    int r1 = IC;
    while (r1 > 0) {
        int s = piece_slice(p, k, r1 - 1);
        if (!acquire(p, s)) return;
        size_t lo = p->sl->bounds[s];
        int r0 = lo <= t->offset ? 0 : (int)((lo - t->offset) / (size_t)t->cols);
        size_t off = t->offset + (size_t)r0 * OC - lo;
        float *db = r1 == IC && b_slot >= 0 ? tg(p, (osdp_param_slot)b_slot) : NULL;
        const void *w = weight_at(p, s, t->offset + (size_t)r0 * OC);
        if (r0 == 0 && r1 == IC && x16)
            be->matmul_backward_bf16_x(dx, p->sl->grads[s] + off, db, dy, x16, w, BT, IC, OC, dx_accumulate);
        else if (r0 == 0 && r1 == IC)
            be->matmul_backward(dx, p->sl->grads[s] + off, db, dy, x, w, BT, IC, OC, dx_accumulate);
        else
            be->matmul_backward_strided(dx ? dx + r0 : NULL, IC, p->sl->grads[s] + off, db, dy, x + r0, IC, w, BT,
                                        r1 - r0, OC, dx_accumulate);
        r1 = r0;
    }
}

/* The stored bf16 activation `piece` when the table's product with the weight in w_slot reads it as it
 * is (matmul_forward_bf16_x, or with `backward` matmul_backward_bf16_x, osdp/compute.h): bf16
 * activations, the entry, and the weight in one slice (one product, not strided pieces).  NULL: the
 * product reads the fp32 copy (the forward's staged one, the backward's widened one). */
static const void *direct_act(const pass *p, const float *piece, osdp_param_slot w_slot, int backward)
{
    const osdp_compute_backend *be = p->ctx->backend;
    const int has = backward ? be->matmul_backward_bf16_x != NULL : be->matmul_forward_bf16_x != NULL;
    if (!acts_bf16(p->ctx) || !has) return NULL;
    const osdp_tensor_desc *t = &p->op->tensor[p->op->param[w_slot]];
    return slice_of(p->sl, t->offset) == slice_of(p->sl, t->offset + t->numel - 1) ? piece : NULL;
}

const float *osdp_op_residual(const osdp_layout *layout, int op_index, const float *input, const osdp_op_acts *a)
{
    const osdp_op_layout *op = &layout->op[op_index];
    if (op->type == OSDP_OP_MLP) return input;
    if (op->type == OSDP_OP_ATTN) return op->width_in != op->width ? a->xin : input;
    return NULL;
}

int osdp_op_starts_with_layernorm(const osdp_layout *layout, int op_index)
{
    const osdp_op_layout *op = &layout->op[op_index];
    return op->type == OSDP_OP_MLP || op->type == OSDP_OP_HEAD ||
           (op->type == OSDP_OP_ATTN && op->width_in == op->width);
}

/* The operator's LayerNorm of x into a->ln (mean, rstd); returns what the
 * products read (a->ln, or its rounded fp32 copy under bf16 activations;
 * NULL where `wide` is 0 and the table writes the bf16 piece itself: every
 * reader takes the piece).  When x is the input and the previous operator
 * left its residual to this one (ctx->input_residual), the input becomes
 * what it would have been, in place (it is the previous operator's `out`),
 * in the same pass. */
static const float *layernorm_of(pass *p, osdp_op_acts *a, const float *x, const void *lw, const void *lb, int BT,
                                 int d, int wide)
{
    const osdp_op_context *ctx = p->ctx;
    const osdp_compute_backend *be = ctx->backend;
    const size_t n = (size_t)BT * (size_t)d;
    if (acts_bf16(ctx) && be->layernorm_forward_bf16_y && be->residual_layernorm_forward_bf16_y) {
        if (ctx->input_residual)
            be->residual_layernorm_forward_bf16_y((float *)x, a->ln, a->mean, a->rstd, x, ctx->input_residual, lw,
                                                  lb, BT, d);
        else
            be->layernorm_forward_bf16_y(a->ln, a->mean, a->rstd, x, lw, lb, BT, d);
        return widen_act(ctx, p->op, a->ln, n, 0, wide);
    }
    float *y = act_stage(ctx, p->op, a->ln, 0);
    if (ctx->input_residual)
        be->residual_layernorm_forward((float *)x, y, a->mean, a->rstd, x, ctx->input_residual, lw, lb, BT, d);
    else
        be->layernorm_forward(y, a->mean, a->rstd, x, lw, lb, BT, d);
    return store_act(ctx, a->ln, y, n, wide);
}

/* The start every operator after the embedding shares: its LayerNorm of x
 * into a->ln, then its first product into y (attn: qkv, mlp: fc, head: the
 * logits; b_slot -1: no bias).  p->status says whether it ran. */
static void layernorm_then_linear(pass *p, osdp_op_acts *a, const float *x, float *y, osdp_param_slot w_slot,
                                  int b_slot, int BT, int d)
{
    const void *lw = tw(p, OSDP_P_LN_W), *lb = tw(p, OSDP_P_LN_B);
    if (p->status != OSDP_OK) return;
    const void *ln16 = direct_act(p, a->ln, w_slot, 0);
    const float *ln = layernorm_of(p, a, x, lw, lb, BT, d, ln16 == NULL);
    linear_forward(p, y, ln, ln16, w_slot, b_slot, BT);
}

/* where the tied head's wte lies in the embedding's flat buffers (element offset) */
static size_t wte_offset(const osdp_op_context *ctx)
{
    const osdp_op_layout *embed = &ctx->layout->op[0];
    return embed->tensor[embed->param[OSDP_P_WTE]].offset;
}

/* the embedding's working wte (vocab_local, d) for a tied head; NULL (and an
 * error that stops the pass) when the context lacks what the pass needs */
static const void *tied_wte(pass *p, int backward)
{
    if (p->status != OSDP_OK) return NULL;
    if (!p->ctx->embed_weights || (backward && !p->ctx->embed_grads)) {
        p->status = osdp_error_set(OSDP_ERR_INTERNAL, "head: the head is tied but the context has no embedding %s",
                                   p->ctx->embed_weights ? "gradients" : "weights");
        return NULL;
    }
    return (const char *)p->ctx->embed_weights + wte_offset(p->ctx) * p->wsize;
}

/* The tied head's start: ln_f, then logits (BT, vocab_local) = ln wte^T */
static void head_tied_logits(pass *p, osdp_op_acts *a, const float *x, int BT, int d)
{
    const void *lw = tw(p, OSDP_P_LN_W), *lb = tw(p, OSDP_P_LN_B), *wte = tied_wte(p, 0);
    if (!wte) return;
    const float *ln = layernorm_of(p, a, x, lw, lb, BT, d, 1);
    p->ctx->backend->matmul_forward_out_in(a->probs, ln, wte, BT, d, p->ctx->layout->vocab_local, 0);
}

/* ---- the fused linear + cross-entropy head --------------------------------
 * Its logits exist one chunk of rows at a time (B head_chunk_rows rows, in
 * the staging after the statistics): the forward keeps each row's log-sum-exp
 * and loss, the backward recomputes each chunk's logits, turns them into
 * d(logits) in place and feeds them to the head's two gradient products.  No
 * (B T, V) buffer; under tensor parallelism the statistics are gathered once,
 * as the naive vocab-parallel head does. */

/* the staging's pieces: this rank's statistics, the group's, the chunk of logits */
static float *fused_stats(const osdp_op_context *ctx) { return ctx->tp_staging; }
static float *fused_group_stats(const osdp_op_context *ctx, int BT)
{
    return tp_size(ctx) > 1 ? ctx->tp_staging + 3 * (size_t)BT : ctx->tp_staging;
}
static float *fused_logits(const osdp_op_context *ctx, int BT)
{
    return ctx->tp_staging + 3 * (size_t)BT * (size_t)(tp_size(ctx) + 1);
}

/* logits (rows, vocab_local) = ln rows times the head's weight (wte: the tied head's) */
static void head_chunk_logits(pass *p, float *logits, const float *ln, int rows, int d, const void *wte)
{
    if (wte) p->ctx->backend->matmul_forward_out_in(logits, ln, wte, rows, d, p->ctx->layout->vocab_local, 0);
    else linear_forward(p, logits, ln, NULL, OSDP_P_LM_HEAD_W, -1, rows);
}

static void head_fused_forward(pass *p, osdp_op_acts *a, const float *x, int BT, int d)
{
    const osdp_op_context *ctx = p->ctx;
    const osdp_compute_backend *be = ctx->backend;
    const int V = ctx->layout->vocab_local, valid = vocab_valid(ctx), chunk = ctx->B * p->op->head_chunk_rows;
    const int tied = ctx->layout->cfg.tied_head;
    const void *lw = tw(p, OSDP_P_LN_W), *lb = tw(p, OSDP_P_LN_B), *wte = tied ? tied_wte(p, 0) : NULL;
    if (p->status != OSDP_OK) return;
    if (!ctx->tp_staging) {
        p->status = osdp_error_set(OSDP_ERR_INTERNAL, "head: the fused cross-entropy needs the context's tp_staging "
                                   "(%zu floats per sequence)", p->op->tp_floats_per_seq);
        return;
    }
    const float *ln = layernorm_of(p, a, x, lw, lb, BT, d, 1);
    float *logits = fused_logits(ctx, BT);
    for (int r0 = 0; r0 < BT && p->status == OSDP_OK; r0 += chunk) {
        const int n = r0 + chunk < BT ? chunk : BT - r0;
        head_chunk_logits(p, logits, ln + (size_t)r0 * d, n, d, wte);
        be->crossentropy_stats(fused_stats(ctx) + 3 * (size_t)r0, logits, a->tokens + r0, n, V, valid,
                               vocab_lo(ctx));
        poke(ctx);
    }
    if (p->status == OSDP_OK && tp_size(ctx) > 1)
        p->status = ctx->tp->all_gather(ctx->tp->arg, fused_stats(ctx), fused_group_stats(ctx, BT), 3 * (size_t)BT);
    if (p->status != OSDP_OK) return;
    be->crossentropy_lse(a->losses, a->lse, fused_group_stats(ctx, BT), BT, tp_size(ctx));
}

/* d(ln) (BT, d) of this rank's vocabulary (the caller sums it over the
 * group); d(lm_head), or the tied head's d(wte), accumulated */
static void head_fused_backward(pass *p, float *dln, const osdp_op_acts *a, const float *ln_all, int BT, int d,
                                float loss_scale)
{
    const osdp_op_context *ctx = p->ctx;
    const osdp_compute_backend *be = ctx->backend;
    const int V = ctx->layout->vocab_local, valid = vocab_valid(ctx), chunk = ctx->B * p->op->head_chunk_rows;
    const void *wte = ctx->layout->cfg.tied_head ? tied_wte(p, 1) : NULL;
    if (p->status != OSDP_OK) return;
    float *logits = fused_logits(ctx, BT);
    for (int r0 = 0; r0 < BT && p->status == OSDP_OK; r0 += chunk) {
        const int n = r0 + chunk < BT ? chunk : BT - r0;
        const float *ln = ln_all + (size_t)r0 * d;
        head_chunk_logits(p, logits, ln, n, d, wte);
        if (be->head_backward_lse) {   /* the table's own form of the next three calls (osdp/compute.h) */
            const void *w = wte ? wte : tw(p, OSDP_P_LM_HEAD_W);
            float *dw = wte ? ctx->embed_grads + wte_offset(ctx) : tg(p, OSDP_P_LM_HEAD_W);
            if (p->status != OSDP_OK) return;
            be->head_backward_lse(dln + (size_t)r0 * d, dw, logits, a->lse + r0, a->tokens + r0, loss_scale, ln, w,
                                  n, d, V, valid, vocab_lo(ctx), wte != NULL);
            poke(ctx);
            continue;
        }
        be->crossentropy_backward_lse(logits, a->lse + r0, a->tokens + r0, loss_scale, n, V, valid, vocab_lo(ctx));
        if (wte)   /* d(wte) += dlogits^T ln, into the embedding's gradients */
            be->matmul_backward_out_in(dln + (size_t)r0 * d, ctx->embed_grads + wte_offset(ctx), logits, ln, wte, n,
                                       d, V, 0);
        else
            linear_backward(p, dln + (size_t)r0 * d, logits, ln, NULL, OSDP_P_LM_HEAD_W, -1, n, 0);
        poke(ctx);
    }
}

/* attention's and the MLP's output: the row-parallel projection of `in` (the
 * partial products summed over the group, the replicated bias added once, by
 * rank 0), then the residual added.  p->status says whether it ran. */
static void projection_then_residual(pass *p, osdp_op_acts *a, const float *in, const float *in_piece,
                                     const float *residual, int BT)
{
    const size_t btd = (size_t)BT * (size_t)p->op->width;
    linear_forward(p, a->out, in, direct_act(p, in_piece, OSDP_P_PROJ_W, 0), OSDP_P_PROJ_W,
                   tp_rank(p->ctx) == 0 ? OSDP_P_PROJ_B : -1, BT);
    tp_all_reduce(p, a->out, btd);
    if (p->status != OSDP_OK) return;
    if (!p->ctx->defer_residual) p->ctx->backend->residual_forward(a->out, a->out, residual, btd);
}

osdp_status osdp_op_forward_sliced(const osdp_op_context *ctx, int op_index, const osdp_op_slices *sl,
                                   const float *input, osdp_op_acts *a)
{
    const osdp_compute_backend *be = ctx->backend;
    const osdp_op_layout *op = &ctx->layout->op[op_index];
    const int B = ctx->B, T = ctx->T, BT = B * T, d = op->width;
    const size_t btd = (size_t)BT * (size_t)d;
    /* this rank's heads, and their width (qkv's columns are 3 groups of it) */
    const int NH = ctx->layout->cfg.n_head / tp_size(ctx);
    pass P = {.ctx = ctx, .op = op, .sl = sl, .cur = -1, .wsize = osdp_dtype_size(be->weight_dtype),
              .status = check_group(ctx)}, *p = &P;
#define OK_OR_RETURN() do { if (p->status != OSDP_OK) return p->status; } while (0)
    if (ctx->input_residual && !osdp_op_starts_with_layernorm(ctx->layout, op_index))
        p->status = osdp_error_set(OSDP_ERR_INTERNAL, "operator %s: given its input's residual to add, but its "
                                   "forward does not start with a LayerNorm of its input", op->name);
    if (ctx->round_residual && (ctx->defer_residual || ctx->input_residual || !be->residual_round))
        p->status = osdp_error_set(OSDP_ERR_INTERNAL, "operator %s: a bf16 residual stream is rounded whole, "
                                   "never fused across operators, and only by a table that rounds", op->name);
    if (acts_bf16(ctx) && op->type != OSDP_OP_EMBED &&
        (!ctx->act_scratch || !be->residual_round || !be->residual_widen || !be->convert_weights))
        p->status = osdp_error_set(OSDP_ERR_INTERNAL, "operator %s: bf16 activations need the context's act_scratch "
                                   "and a table that rounds (bf16 weights)", op->name);
    if (ctx->defer_residual && op->type != OSDP_OP_ATTN && op->type != OSDP_OP_MLP)
        p->status = osdp_error_set(OSDP_ERR_INTERNAL, "operator %s: asked to leave its residual to the next "
                                   "operator, but it adds none", op->name);
    OK_OR_RETURN();
    switch (op->type) {
    case OSDP_OP_EMBED: {
        const void *wte = tw(p, OSDP_P_WTE), *wpe = tw(p, OSDP_P_WPE);
        OK_OR_RETURN();
        if (tp_size(ctx) == 1) {
            be->embedding_forward(a->out, a->tokens, wte, wpe, B, T, d);
        } else {
            /* each rank looks up the tokens of its rows, rank 0 adds the
             * positions: one non-zero term per element besides wpe, so the
             * group's sum is exact */
            be->embedding_forward_range(a->out, a->tokens, wte, tp_rank(ctx) == 0 ? wpe : NULL, B, T, d,
                                        vocab_lo(ctx), ctx->layout->vocab_local);
            tp_all_reduce(p, a->out, btd);
            OK_OR_RETURN();
        }
        break;
    }
    case OSDP_OP_ATTN: {
        const float *x = input;
        if (op->width_in != d) {
            linear_forward(p, a->xin, input, NULL, OSDP_P_IN_PROJ_W, OSDP_P_IN_PROJ_B, BT);
            x = a->xin;
            poke(ctx);
        }
        float *qkv_stage = act_stage(ctx, op, a->qkv, 1);
        layernorm_then_linear(p, a, x, qkv_stage, OSDP_P_QKV_W, OSDP_P_QKV_B, BT, d);
        OK_OR_RETURN();
        const float *qkv = store_act(ctx, a->qkv, qkv_stage, 3 * btd / (size_t)tp_size(ctx), 1);
        poke(ctx);
        /* bf16 activations: the heads' fp32 copy only where the projection does not read the piece */
        const int heads_wide = direct_act(p, a->heads, OSDP_P_PROJ_W, 0) == NULL;
        const size_t nheads = btd / (size_t)tp_size(ctx);
        const float *heads;
        if (acts_bf16(ctx) && op->attn_tiled && be->attention_forward_tiled_bf16_out) {
            be->attention_forward_tiled_bf16_out(a->heads, a->lse, qkv, B, T, d / tp_size(ctx), NH);
            heads = widen_act(ctx, op, a->heads, nheads, 0, heads_wide);   /* over the ln copy, read no more */
        } else {
            float *stage = act_stage(ctx, op, a->heads, 0);   /* over the ln copy, read no more */
            if (op->attn_tiled) be->attention_forward_tiled(stage, a->lse, qkv, B, T, d / tp_size(ctx), NH);
            else be->attention_forward(stage, a->att, qkv, B, T, d / tp_size(ctx), NH);
            heads = store_act(ctx, a->heads, stage, nheads, heads_wide);
        }
        poke(ctx);
        projection_then_residual(p, a, heads, a->heads, x, BT);
        OK_OR_RETURN();
        break;
    }
    case OSDP_OP_MLP: {
        const size_t n4 = 4 * btd / (size_t)tp_size(ctx);
        const float *gelu = a->gelu;
        /* not under bf16 activations, which round fc before the GELU */
        if (be->matmul_forward_gelu && sl->n == 1 && !acts_bf16(ctx)) {   /* the table's fc product + GELU (osdp/compute.h) */
            const osdp_tensor_desc *fc = &op->tensor[op->param[OSDP_P_FC_W]];
            const void *lw = tw(p, OSDP_P_LN_W), *lb = tw(p, OSDP_P_LN_B);
            const void *w = tw(p, OSDP_P_FC_W), *b = tw(p, OSDP_P_FC_B);
            OK_OR_RETURN();
            layernorm_of(p, a, input, lw, lb, BT, d, 1);
            poke(ctx);
            be->matmul_forward_gelu(a->gelu, a->fc, a->ln, w, b, BT, fc->rows, fc->cols);
        } else {
            /* bf16 activations: the GELU reads the stored fc where the table has its bf16 entry, and the
             * projection the stored gelu (direct_act): then neither has an fp32 copy the products read; or
             * the table's product writes both pieces with the GELU in its epilogue (osdp/compute.h) */
            const int gelu16 = acts_bf16(ctx) && be->gelu_forward_bf16;
            const int gelu_wide = direct_act(p, a->gelu, OSDP_P_PROJ_W, 0) == NULL;
            const void *lw = tw(p, OSDP_P_LN_W), *lb = tw(p, OSDP_P_LN_B);
            OK_OR_RETURN();
            const void *ln16 = direct_act(p, a->ln, OSDP_P_FC_W, 0);
            const float *ln = layernorm_of(p, a, input, lw, lb, BT, d, ln16 == NULL);
            int fused = 0;
            if (ln16 && gelu16 && be->matmul_forward_gelu_bf16) {
                const osdp_tensor_desc *fct = &op->tensor[op->param[OSDP_P_FC_W]];
                const void *w = tw(p, OSDP_P_FC_W), *b = tw(p, OSDP_P_FC_B);
                OK_OR_RETURN();
                fused = be->matmul_forward_gelu_bf16(a->gelu, a->fc, ln16, w, b, BT, fct->rows, fct->cols);
            }
            float *fc_stage = act_stage(ctx, op, a->fc, 1);
            if (!fused) linear_forward(p, fc_stage, ln, ln16, OSDP_P_FC_W, OSDP_P_FC_B, BT);
            OK_OR_RETURN();
            const float *fc = fused ? NULL : store_act(ctx, a->fc, fc_stage, n4, !gelu16);
            poke(ctx);
            if (fused) {
                gelu = widen_act(ctx, op, a->gelu, n4, 1, gelu_wide);
            } else if (gelu16) {
                be->gelu_forward_bf16(a->gelu, a->fc, n4);
                gelu = widen_act(ctx, op, a->gelu, n4, 1, gelu_wide);   /* over the fc copy, read no more */
            } else {
                float *gelu_stage = act_stage(ctx, op, a->gelu, 1);   /* bf16: over the fc copy, in place */
                be->gelu_forward(gelu_stage, fc, n4);
                gelu = store_act(ctx, a->gelu, gelu_stage, n4, gelu_wide);
            }
        }
        projection_then_residual(p, a, gelu, a->gelu, input, BT);
        OK_OR_RETURN();
        break;
    }
    case OSDP_OP_HEAD: {
        if (op->head_chunk_rows) {
            head_fused_forward(p, a, input, BT, d);
            break;
        }
        if (ctx->layout->cfg.tied_head) {
            head_tied_logits(p, a, input, BT, d);
        } else {
            layernorm_then_linear(p, a, input, a->probs, OSDP_P_LM_HEAD_W, -1, BT, d);
        }
        OK_OR_RETURN();
        poke(ctx);
        if (op->tp_floats_per_seq)
            crossentropy_vocab_parallel(p, a, BT);
        else
            be->crossentropy_forward(a->losses, a->probs, a->tokens, BT, ctx->layout->cfg.vocab);
        break;
    }
    }
    if (ctx->round_residual && op->type != OSDP_OP_HEAD && p->status == OSDP_OK) be->residual_round(a->out, btd);
    poke(ctx);
    return p->status;
}

/* The operator's LayerNorm backward: its parameter gradients, and d(x) added
 * into dx (the residual's gradient, accumulated in place).  p->status says
 * whether it ran. */
static void layernorm_backward_into(pass *p, float *dx, const float *dln, const float *x, const osdp_op_acts *a,
                                    int BT, int d)
{
    float *glw = tg(p, OSDP_P_LN_W), *glb = tg(p, OSDP_P_LN_B);
    const void *lw = tw(p, OSDP_P_LN_W);
    if (p->status != OSDP_OK) return;
    p->ctx->backend->layernorm_backward(dx, glw, glb, dln, x, lw, a->mean, a->rstd, BT, d);
}

/* d(ln), this rank's share from a column-parallel product (qkv, fc, the
 * vocab-parallel head), summed over the group; then the LayerNorm backward
 * adds its path into dx.  p->status says whether it ran. */
static void group_dln_then_layernorm_backward(pass *p, float *dx, float *dln, const float *x, const osdp_op_acts *a,
                                              int BT, int d)
{
    tp_all_reduce(p, dln, (size_t)BT * (size_t)d);
    if (p->status != OSDP_OK) return;
    poke(p->ctx);
    layernorm_backward_into(p, dx, dln, x, a, BT, d);
}

osdp_status osdp_op_backward_sliced(const osdp_op_context *ctx, int op_index, const osdp_op_slices *sl,
                                    const float *input, const osdp_op_acts *a, osdp_workspace *ws,
                                    float loss_scale)
{
    const osdp_compute_backend *be = ctx->backend;
    const osdp_op_layout *op = &ctx->layout->op[op_index];
    const int B = ctx->B, T = ctx->T, BT = B * T, d = op->width;
    const int NH = ctx->layout->cfg.n_head / tp_size(ctx), V = ctx->layout->cfg.vocab;
    const size_t btd = (size_t)BT * (size_t)d;
    float *dout = ws->dres[ws->cur];
    pass P = {.ctx = ctx, .op = op, .sl = sl, .cur = -1, .wsize = osdp_dtype_size(be->weight_dtype),
              .status = check_group(ctx)}, *p = &P;
    OK_OR_RETURN();
    switch (op->type) {
    case OSDP_OP_EMBED: {
        float *gte = tg(p, OSDP_P_WTE), *gpe = tg(p, OSDP_P_WPE);
        OK_OR_RETURN();
        if (tp_size(ctx) == 1)
            be->embedding_backward(gte, gpe, dout, a->tokens, B, T, d);
        else   /* d(out) is the group's: every rank gets the same d(wpe) */
            be->embedding_backward_range(gte, gpe, dout, a->tokens, B, T, d, vocab_lo(ctx),
                                         ctx->layout->vocab_local);
        break;
    }
    case OSDP_OP_ATTN: {
        const int in_proj = op->width_in != d;
        const float *x = in_proj ? a->xin : input;
        float *dheads = scratch_at(ctx, op, ws, OSDP_S_DHEADS), *dqkv = scratch_at(ctx, op, ws, OSDP_S_DQKV);
        float *dln = scratch_at(ctx, op, ws, OSDP_S_DLN), *datt = scratch_at(ctx, op, ws, OSDP_S_DATT);
        /* bf16 activations: the products read the stored heads and ln (direct_act), the attention the
         * widened heads (tiled only) and qkv */
        const void *heads16 = direct_act(p, a->heads, OSDP_P_PROJ_W, 1), *ln16 = direct_act(p, a->ln, OSDP_P_QKV_W, 1);
        const float *heads = heads16 && !op->attn_tiled ? NULL
                                                        : load_act(ctx, op, ws, a->heads, btd / (size_t)tp_size(ctx), 0);
        const float *qkv = load_act(ctx, op, ws, a->qkv, 3 * btd / (size_t)tp_size(ctx), 1);
        linear_backward(p, dheads, dout, heads, heads16, OSDP_P_PROJ_W, OSDP_P_PROJ_B, BT, 0);
        OK_OR_RETURN();
        poke(ctx);
        if (op->attn_tiled)
            be->attention_backward_tiled(dqkv, scratch_at(ctx, op, ws, OSDP_S_ROWDOT), dheads, heads, qkv,
                                         a->lse, B, T, d / tp_size(ctx), NH);
        else
            be->attention_backward(dqkv, datt, dheads, qkv, a->att, B, T, d / tp_size(ctx), NH);
        poke(ctx);
        /* column-parallel: this rank's heads' share of d(ln); the residual:
         * d(x) = d(out) + layernorm path, accumulated in place */
        linear_backward(p, dln, dqkv, ln16 ? NULL : load_act(ctx, op, ws, a->ln, btd, 0), ln16, OSDP_P_QKV_W,
                        OSDP_P_QKV_B, BT, 0);
        group_dln_then_layernorm_backward(p, dout, dln, x, a, BT, d);
        OK_OR_RETURN();
        if (in_proj) {
            float *dprev = ws->dres[1 - ws->cur];
            linear_backward(p, dprev, dout, input, NULL, OSDP_P_IN_PROJ_W, OSDP_P_IN_PROJ_B, BT, 0);
            OK_OR_RETURN();
            ws->cur = 1 - ws->cur;
        }
        break;
    }
    case OSDP_OP_MLP: {
        float *dgelu = scratch_at(ctx, op, ws, OSDP_S_DGELU), *dln = scratch_at(ctx, op, ws, OSDP_S_DLN);
        const size_t n4 = 4 * btd / (size_t)tp_size(ctx);
        /* bf16 activations: the products read the stored gelu and ln (direct_act), the GELU's backward the
         * widened fc */
        const void *gelu16 = direct_act(p, a->gelu, OSDP_P_PROJ_W, 1), *ln16 = direct_act(p, a->ln, OSDP_P_FC_W, 1);
        const float *gelu = gelu16 ? NULL : load_act(ctx, op, ws, a->gelu, n4, 1);
        /* not under bf16 activations: its gelu and fc copies would share OSDP_S_ACT */
        if (be->matmul_backward_dgelu && sl->n == 1 && !acts_bf16(ctx)) {   /* the table's proj and GELU backward (osdp/compute.h) */
            const osdp_tensor_desc *proj = &op->tensor[op->param[OSDP_P_PROJ_W]];
            const void *w = tw(p, OSDP_P_PROJ_W);
            float *dw = tg(p, OSDP_P_PROJ_W), *db = tg(p, OSDP_P_PROJ_B), *db_fc = tg(p, OSDP_P_FC_B);
            OK_OR_RETURN();
            be->matmul_backward_dgelu(dgelu, dw, db, db_fc, dout, gelu, a->fc, w, BT, proj->rows, proj->cols);
            poke(ctx);
            linear_backward(p, dln, dgelu, a->ln, NULL, OSDP_P_FC_W, -1, BT, 0);   /* db_fc made above */
        } else {
            linear_backward(p, dgelu, dout, gelu, gelu16, OSDP_P_PROJ_W, OSDP_P_PROJ_B, BT, 0);
            OK_OR_RETURN();
            poke(ctx);
            if (acts_bf16(ctx) && be->gelu_backward_bf16_x)   /* the stored fc, widened as read */
                be->gelu_backward_bf16_x(dgelu, a->fc, dgelu, n4);
            else   /* bf16: fc's copy over gelu's, read no more */
                be->gelu_backward(dgelu, load_act(ctx, op, ws, a->fc, n4, 1), dgelu, n4);
            linear_backward(p, dln, dgelu, ln16 ? NULL : load_act(ctx, op, ws, a->ln, btd, 0), ln16, OSDP_P_FC_W,
                            OSDP_P_FC_B, BT, 0);
        }
        group_dln_then_layernorm_backward(p, dout, dln, input, a, BT, d);
        OK_OR_RETURN();
        break;
    }
    case OSDP_OP_HEAD: {
        float *dln = scratch_at(ctx, op, ws, OSDP_S_DLN);
        const void *wte;
        /* probabilities become d(logits) in place: they are not needed after */
        float *dlogits = a->probs;
        const float *ln = load_act(ctx, op, ws, a->ln, btd, 0);
        if (op->head_chunk_rows)
            head_fused_backward(p, dln, a, ln, BT, d, loss_scale);
        else {
            if (op->tp_floats_per_seq)   /* padding columns: probability 0, gradient 0 */
                be->crossentropy_backward_range(dlogits, a->probs, a->tokens, loss_scale, BT,
                                                ctx->layout->vocab_local, vocab_lo(ctx));
            else
                be->crossentropy_backward(dlogits, a->probs, a->tokens, loss_scale, BT, V);
            if (!ctx->layout->cfg.tied_head)
                linear_backward(p, dln, dlogits, ln, NULL, OSDP_P_LM_HEAD_W, -1, BT, 0);
            else if ((wte = tied_wte(p, 1)) != NULL)   /* d(wte) += dlogits^T ln, into the embedding's gradients */
                be->matmul_backward_out_in(dln, ctx->embed_grads + wte_offset(ctx), dlogits, ln, wte, BT, d,
                                           ctx->layout->vocab_local, 0);
        }
        /* the residual's gradient starts here: 0 plus the layernorm path */
        be->fill_zero(dout, btd * sizeof(float));
        group_dln_then_layernorm_backward(p, dout, dln, input, a, BT, d);
        OK_OR_RETURN();
        break;
    }
    }
#undef OK_OR_RETURN
    poke(ctx);
    return p->status;
}

/* the whole operator as one slice: nothing to acquire */
static void one_slice(const osdp_op_layout *op, const void *const *w, float *const *g, size_t *bounds,
                      osdp_op_slices *sl)
{
    bounds[0] = 0;
    bounds[1] = op->numel;
    *sl = (osdp_op_slices){.n = 1, .bounds = bounds, .weights = w, .grads = g};
}

void osdp_op_forward(const osdp_op_context *ctx, int op_index, const void *w,
                     const float *input, osdp_op_acts *a)
{
    size_t bounds[2];
    osdp_op_slices sl;
    one_slice(&ctx->layout->op[op_index], &w, NULL, bounds, &sl);
    /* fails only where a tensor-parallel collective does (no acquire): gpt.h */
    (void)osdp_op_forward_sliced(ctx, op_index, &sl, input, a);
}

void osdp_op_backward(const osdp_op_context *ctx, int op_index, const void *w, float *g,
                      const float *input, const osdp_op_acts *a, osdp_workspace *ws,
                      float loss_scale)
{
    size_t bounds[2];
    osdp_op_slices sl;
    one_slice(&ctx->layout->op[op_index], &w, &g, bounds, &sl);
    (void)osdp_op_backward_sliced(ctx, op_index, &sl, input, a, ws, loss_scale);
}

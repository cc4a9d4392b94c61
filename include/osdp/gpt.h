/* GPT operators: forward and backward of one operator (embed, attn.i,
 * mlp.i, head) over the compute backend, given that operator's full working
 * weights.  The runtime decides where the weights come from (resident DP
 * copy or a transient ZDP gather); these functions only compute. */
#ifndef OSDP_GPT_H
#define OSDP_GPT_H

#include <stddef.h>
#include "osdp/compute.h"
#include "osdp/layout.h"

/* Pointers into one operator's activation block (sizes: osdp/layout.h). */
typedef struct osdp_op_acts {
    int *tokens;        /* embed (B,T) input ids;  head: targets (B,T) */
    float *out;         /* (B,T,d) the residual stream after the operator */
    float *xin;         /* attn with in_proj: (B,T,d) projected residual */
    float *ln;          /* (B,T,d) layernorm output (bf16 elements with layout cfg.act_bf16, as heads, gelu) */
    float *mean, *rstd; /* (B,T) */
    float *qkv;         /* attn: (B,T,3d) */
    float *att;         /* attn, naive: (B,NH,T,T) probabilities */
    float *heads;       /* attn: (B,T,d) concatenated head outputs */
    float *fc;          /* mlp: (B,T,4d) before GELU */
    float *gelu;        /* mlp: (B,T,4d) after GELU */
    float *probs;       /* head: (B,T,V) */
    float *losses;      /* head: (B,T) */
    float *lse;         /* attn, tiled: (B,NH,T); head, fused: (B,T) log-sum-exp per row */
} osdp_op_acts;

/* Carves `base` (may be NULL: pointers stay NULL) for B sequences of T;
 * returns the floats used, which equals B * op->act_floats_per_seq. */
size_t osdp_op_acts_carve(const osdp_layout *layout, int op, int B, float *base, osdp_op_acts *acts);

/* Backward scratch shared by all operators. */
typedef struct osdp_workspace {
    float *dres[2];     /* (B,T,max width) residual-stream gradients, ping-pong */
    int cur;            /* which dres holds d(output) of the operator running */
    float *scratch;     /* per-operator intermediate gradients */
} osdp_workspace;

size_t osdp_workspace_floats(const osdp_layout *layout, int B);
void osdp_workspace_carve(const osdp_layout *layout, int B, float *base, osdp_workspace *ws);

/* The tensor-parallel group an operator's parts run in (osdp/layout.h):
 * blocking collectives over its ranks, issued by the operators in the same
 * order on every rank.  all_reduce sums buf (n floats) in place;
 * all_gather puts every rank's part (n floats) into all (size x n), in rank
 * order.  The runtime supplies them over its tensor-parallel communicator;
 * the operators call them at the points Megatron does: after each
 * row-parallel product in the forward (and after the vocab-parallel
 * embedding), before the LayerNorm backward that follows each
 * column-parallel product in the backward, and for the vocab-parallel
 * cross-entropy's statistics. */
typedef struct osdp_tp_group {
    int size, rank;
    osdp_status (*all_reduce)(void *arg, float *buf, size_t n);
    osdp_status (*all_gather)(void *arg, const float *part, float *all, size_t n);
    void *arg;
} osdp_tp_group;

/* tp_staging, when the head's cross-entropy is vocab-parallel (a group of
 * more than one rank, or a padded vocabulary): per token this rank's 3
 * statistics (max logit, sum of exponentials, target logit) in its first
 * 3 B T floats, the group's (tp_size x 3 B T, rank order) after them; at
 * tp_size 1 the rank's own are the group's (gpt_ops.c).  A fused head has
 * it at any tp_size, with one chunk of logits (B head_chunk_rows x
 * vocab_local floats) after the statistics. */
typedef struct osdp_op_context {
    const osdp_compute_backend *backend;
    const osdp_layout *layout;      /* this rank's parts (layout->tp_size ranks in the group) */
    const osdp_tp_group *tp;        /* NULL when layout->tp_size is 1 */
    float *tp_staging;              /* head: layout tp_floats_per_seq x B floats when non-zero */
    /* A tied head (layout cfg.tied_head) reads wte from the embedding operator's working weights
     * (its whole flat buffer, weight dtype) in its forward and backward, and adds d(wte) into the
     * embedding's full gradients (fp32 flat buffer, backward only): set by whoever holds them */
    const void *embed_weights;
    float *embed_grads;
    /* The residual that ends an attn or mlp operator fused with the LayerNorm that starts the next
     * (compute.h residual_layernorm_forward), for one forward pass each, set by whoever runs the
     * next forward at once on the same micro-batch (the runtime, executor.c; 0 / NULL: no fusion).
     * defer_residual: this attn or mlp forward leaves `out` without its residual (the branch
     * alone).  input_residual: this forward's input (the previous operator's `out`, left so) lacks
     * this residual (osdp_op_residual of the previous forward); the LayerNorm of the input adds it
     * in place, so that `out` ends as it would have been. */
    int defer_residual;
    const float *input_residual;
    /* A bf16 residual stream (osdp/schedule.h): every forward (and recomputed forward) of the embedding,
     * attn and mlp ends by rounding its `out` to bf16 values (the backend's residual_round), so the
     * plan and recompute never change the numbers; never with defer_residual */
    int round_residual;
    /* bf16 activations (layout cfg.act_bf16, osdp/layout.h): the workspace's scratch (osdp_workspace's
     * scratch, B max_scratch_floats_per_seq floats), whose OSDP_S_ACT piece the forward computes each
     * bf16 piece in; NULL otherwise */
    float *act_scratch;
    int B, T;
    void (*progress)(void *arg);   /* called between kernels: lets collectives advance */
    void *progress_arg;
} osdp_op_context;

/* An operator's working weights and gradients as g slices (osdp_op_split):
 * weights[s] and grads[s] hold elements [bounds[s], bounds[s+1]) of the
 * operator's flat buffers.  acquire(arg, s), when set, is called before slice
 * s is first touched; a forward pass touches slices in increasing order, a
 * backward pass in decreasing order (tensors are laid out in the order the
 * forward uses them), so the runtime can gather a ZDP slice, let it be used,
 * and free it before the next.  The runtime may change weights[s] and
 * grads[s] inside acquire.  An acquire error (an emulated out-of-memory)
 * stops the operator, which returns it.  Weights are elements of the
 * backend's weight_dtype (osdp/compute.h); gradients are fp32. */
typedef struct osdp_op_slices {
    int n;
    const size_t *bounds;           /* n + 1 */
    const void *const *weights;     /* n, elements of backend->weight_dtype */
    float *const *grads;            /* n (backward only) */
    osdp_status (*acquire)(void *arg, int slice);
    void *arg;
} osdp_op_slices;

osdp_status osdp_op_forward_sliced(const osdp_op_context *ctx, int op, const osdp_op_slices *slices,
                                   const float *input, osdp_op_acts *acts);
osdp_status osdp_op_backward_sliced(const osdp_op_context *ctx, int op, const osdp_op_slices *slices,
                                    const float *input, const osdp_op_acts *acts, osdp_workspace *ws,
                                    float loss_scale);

/* What may be fused across two operators (osdp_op_context's defer_residual,
 * input_residual): the residual an attn or mlp operator adds to its `out`
 * (its input, or its projected input acts->xin), NULL for the others; and
 * whether an operator's forward starts with the LayerNorm of its input (mlp,
 * head, attn without in_proj). */
const float *osdp_op_residual(const osdp_layout *layout, int op, const float *input, const osdp_op_acts *acts);
int osdp_op_starts_with_layernorm(const osdp_layout *layout, int op);

/* The same with the operator's whole flat buffers (one slice).
 * input: previous operator's `out` (NULL for embed).  For embed, acts->tokens
 * and for head, acts->tokens (targets) must be filled before the call. */
/* (They return no status: with a tensor-parallel group whose collectives can
 * fail, call the _sliced forms, which return the group's errors.) */
void osdp_op_forward(const osdp_op_context *ctx, int op, const void *weights,
                     const float *input, osdp_op_acts *acts);
/* grads (op numel) accumulate.  On entry ws->dres[ws->cur] holds d(out)
 * (for head: ignored, zeroed); on return it holds d(input) (ws->cur may flip).
 * loss_scale: d(loss)/d(per-token loss), i.e. 1 / (tokens in the global batch). */
void osdp_op_backward(const osdp_op_context *ctx, int op, const void *weights, float *grads,
                      const float *input, const osdp_op_acts *acts, osdp_workspace *ws,
                      float loss_scale);

#endif

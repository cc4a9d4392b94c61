/* fp32 CPU kernels of the GPT operators (row-major, contiguous).
 *
 * Conventions used by every kernel here:
 *   BT = B*T rows; C = width; a linear weight is stored (IC, OC), i.e. y = x W + b,
 *   so that operator splitting along the input dimension cuts contiguous rows.
 *   Backward kernels ACCUMULATE (+=) into parameter gradients (dw, db, dwte...)
 *   so that one gradient buffer can collect several contributions; activation
 *   gradients are documented per kernel (overwrite or accumulate).
 *   Matrix products go through cblas_sgemm (OpenBLAS); other loops use OpenMP. */
#ifndef OSDP_KERNELS_CPU_H
#define OSDP_KERNELS_CPU_H

#include <stddef.h>

/* y (BT,OC) = x (BT,IC) @ w (IC,OC) + b (OC).  b may be NULL.
 * accumulate != 0: y += x @ w (+ b), used for split slices summed together. */
void matmul_forward(float *y, const float *x, const float *w, const float *b,
                    int BT, int IC, int OC, int accumulate);
/* dx (BT,IC) = dy @ w^T (dx_accumulate != 0: +=); dx may be NULL.
 * dw (IC,OC) += x^T @ dy;  db (OC) += column sums of dy (db may be NULL). */
void matmul_backward(float *dx, float *dw, float *db, const float *dy,
                     const float *x, const float *w, int BT, int IC, int OC,
                     int dx_accumulate);
/* The same on a block of columns of wider x / dx (operator splitting, where
 * one slice holds rows [r0, r0 + IC) of w): x and dx rows have strides ldx,
 * lddx >= IC.  matmul_forward / matmul_backward are these with strides IC. */
void matmul_forward_strided(float *y, const float *x, int ldx, const float *w, const float *b,
                            int BT, int IC, int OC, int accumulate);
void matmul_backward_strided(float *dx, int lddx, float *dw, float *db, const float *dy,
                             const float *x, int ldx, const float *w, int BT, int IC, int OC,
                             int dx_accumulate);
/* The weight stored (OC, IC) (nn.Linear's order: the tied head reads wte
 * (V, C) so), no bias.  y (BT,OC), row stride ldy >= OC: y = [y +] x @ w^T.
 * Backward, dy with row stride lddy >= OC: dx (BT,IC) = [dx +] dy @ w (dx may
 * be NULL); dw (OC,IC) += dy^T @ x.  The strides let a caller run a block of
 * w's rows (y's columns) at a time. */
void matmul_out_in_forward(float *y, int ldy, const float *x, const float *w, int BT, int IC, int OC,
                           int accumulate);
void matmul_out_in_backward(float *dx, float *dw, const float *dy, int lddy, const float *x, const float *w,
                            int BT, int IC, int OC, int dx_accumulate);

/* y = (x - mean) * rstd * w + b per row; mean, rstd (BT) saved for backward. eps 1e-5. */
void layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                       const float *w, const float *b, int BT, int C);
/* res = a + b (residual_forward; res may alias a or b), then y = layernorm(res) with mean,
 * rstd as layernorm_forward: one pass over the rows, the same bits as the two calls */
void residual_layernorm_forward(float *res, float *y, float *mean, float *rstd, const float *a, const float *b,
                                const float *w, const float *bias, int BT, int C);
/* dx (BT,C) += ;  dw, db (C) += */
void layernorm_backward(float *dx, float *dw, float *db, const float *dy,
                        const float *x, const float *w, const float *mean,
                        const float *rstd, int BT, int C);

/* tanh-approximation GELU, elementwise over n. */
void gelu_forward(float *y, const float *x, size_t n);
/* dx = gelu'(x) * dy  (overwrite; dx may alias dy) */
void gelu_backward(float *dx, const float *x, const float *dy, size_t n);

/* Causal multi-head self-attention.
 * qkv (B,T,3C): q in columns [0,C), k in [C,2C), v in [2C,3C); head h uses
 * columns [h*HS,(h+1)*HS) of each, HS = C/NH.
 * att (B,NH,T,T): softmax probabilities, saved for backward (upper triangle 0).
 * out (B,T,C): concatenated heads. Scale 1/sqrt(HS). */
void attention_forward(float *out, float *att, const float *qkv,
                       int B, int T, int C, int NH);
/* dqkv (B,T,3C) = (overwrite).  scratch: at least B*NH*T*T floats. */
void attention_backward(float *dqkv, float *scratch, const float *dout,
                        const float *qkv, const float *att,
                        int B, int T, int C, int NH);

/* The same attention, tiled with an online softmax (FlashAttention-2's
 * algorithm, kernels_cpu_attention_tiled.c): no (T,T) buffer.  The forward
 * writes out (B,T,C) and lse (B,NH,T), each row's log-sum-exp of its scaled
 * scores; the backward recomputes the probabilities tile by tile from qkv and
 * lse, with out (the forward's) and rowdot (B,NH,T), its scratch for
 * rowsum(dout * out).  dqkv (B,T,3C) = (overwrite). */
void attention_forward_tiled(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
void attention_backward_tiled(float *dqkv, float *rowdot, const float *dout, const float *out, const float *qkv,
                              const float *lse, int B, int T, int C, int NH);

/* x (B,T,C) = wte[tokens] + wpe[t] */
void embedding_forward(float *x, const int *tokens, const float *wte,
                       const float *wpe, int B, int T, int C);
/* dwte (V,C) +=, dwpe (T,C) += */
void embedding_backward(float *dwte, float *dwpe, const float *dx,
                        const int *tokens, int B, int T, int C);
/* The same over the vocabulary rows [vocab_lo, vocab_lo + vocab_n) that wte
 * and dwte hold (vocab-parallel): tokens outside them read 0 and add
 * nothing; wpe / dwpe NULL: none.  With vocab_lo 0 and every token in range
 * these are bitwise embedding_forward / embedding_backward. */
void embedding_forward_range(float *x, const int *tokens, const float *wte,
                             const float *wpe, int B, int T, int C, int vocab_lo, int vocab_n);
void embedding_backward_range(float *dwte, float *dwpe, const float *dx,
                              const int *tokens, int B, int T, int C, int vocab_lo, int vocab_n);

/* In: logits (BT,V) in `probs`; out: softmax probabilities in place and
 * losses (BT) = -log p[target], computed as log-sum-exp of the logits minus
 * the target's logit (finite for any logit gap). */
void crossentropy_forward(float *losses, float *probs, const int *targets,
                          int BT, int V);
/* dlogits (BT,V) = scale * (probs - onehot(target))  (overwrite; dlogits may alias probs) */
void crossentropy_backward(float *dlogits, const float *probs,
                           const int *targets, float scale, int BT, int V);
/* The vocab-parallel cross-entropy (osdp/compute.h says what each computes):
 * this rank's statistics per row, the loss and probabilities from the
 * group's, and the backward with the rank's first vocabulary entry. */
void crossentropy_stats(float *stats, const float *logits, const int *targets,
                        int BT, int V, int valid, int vocab_lo);
void crossentropy_finish(float *losses, float *probs, const float *group_stats,
                         int BT, int V, int valid, int group_size);
void crossentropy_backward_range(float *dlogits, const float *probs, const int *targets,
                                 float scale, int BT, int V, int vocab_lo);

/* The fused linear + cross-entropy head (osdp/compute.h): loss and
 * log-sum-exp per row from the group's statistics (crossentropy_finish's
 * order, no probabilities); and d(logits) in place over a chunk of logits
 * recomputed in the backward: scale * (exp(logit - lse) - onehot(target -
 * vocab_lo)) over the first `valid` columns, 0 over the padding. */
void crossentropy_lse(float *losses, float *lse, const float *group_stats, int BT, int group_size);
void crossentropy_backward_lse(float *dlogits, const float *lse, const int *targets, float scale, int BT, int V,
                               int valid, int vocab_lo);

/* out = a + b (out may alias a or b) */
void residual_forward(float *out, const float *a, const float *b, size_t n);
/* y += x */
void vector_accumulate(float *y, const float *x, size_t n);

#endif

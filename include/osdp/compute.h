/* The compute backend: a table of function pointers chosen once at start
 * (CPU: OpenBLAS + C kernels; CUDA: cuBLAS + our kernels).  Everything above
 * it — model operators, runtime, optimizer — has one code path.
 * Kernel semantics are those documented in osdp/kernels_cpu.h.
 *
 * Precision.  Activations, gradients and optimizer state are fp32 on every
 * table (a bf16 residual stream, osdp/schedule.h, rounds the operators'
 * outputs to bf16 values in fp32 buffers: residual_round below).  The working weights a kernel reads (w, b, wte, wpe, as `const
 * void *`) are elements of the table's weight_dtype: fp32, or bf16 for the
 * mixed-precision tables, whose products run with bf16 inputs and fp32
 * accumulation (cuBLAS tensor cores on CUDA).  The runtime keeps the fp32
 * master weights and makes the bf16 working copy with convert_weights; the
 * gathered weights, and their all-gathers, are then half the bytes. */
#ifndef OSDP_COMPUTE_H
#define OSDP_COMPUTE_H

#include <stddef.h>
#include "osdp/dtype.h"
#include "osdp/error.h"

typedef struct osdp_compute_backend {
    const char *name;
    osdp_dtype weight_dtype;                 /* OSDP_FLOAT32 or OSDP_BFLOAT16 */
    int pad_quantum;                         /* shards padded to multiples of this many elements
                                                (osdp_padded_numel_quantum): CPU 1, CUDA 64 */
    int vocab_quantum;                       /* the vocabulary padded to a multiple of this many rows of
                                                wte / columns of lm_head (times the tensor-parallel
                                                degree, osdp_layout_build_tp): CPU 1, CUDA 128, as
                                                llm.c pads GPT-2's 50257 to 50304 */
    osdp_status (*init)(int local_rank, int threads);
    void *(*alloc)(size_t bytes);            /* contents undefined; NULL on failure */
    void (*free)(void *ptr);
    void (*fill_zero)(void *ptr, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);        /* device to device */
    void (*to_device)(void *dst, const void *host_src, size_t bytes);
    void (*to_host)(void *host_dst, const void *src, size_t bytes);
    void (*synchronize)(void);
    /* a communication backend's order against the compute stream (src/comm/comm_nccl.c): record
     * `event` (a cudaEvent_t) after the work queued so far, or make the work queued later wait for it;
     * NULL on a backend without streams (the CPU's) */
    void (*record_event)(void *event);
    void (*wait_event)(void *event);
    /* dst (n of weight_dtype) = src (n fp32), rounded; NULL for fp32 tables */
    void (*convert_weights)(void *dst, const float *src, size_t n);

    void (*matmul_forward)(float *y, const float *x, const void *w, const void *b,
                           int BT, int IC, int OC, int accumulate);
    void (*matmul_backward)(float *dx, float *dw, float *db, const float *dy,
                            const float *x, const void *w, int BT, int IC, int OC,
                            int dx_accumulate);
    /* column blocks of wider x / dx (operator splitting): strides ldx, lddx */
    void (*matmul_forward_strided)(float *y, const float *x, int ldx, const void *w, const void *b,
                                   int BT, int IC, int OC, int accumulate);
    void (*matmul_backward_strided)(float *dx, int lddx, float *dw, float *db, const float *dy,
                                    const float *x, int ldx, const void *w, int BT, int IC, int OC,
                                    int dx_accumulate);
    /* The weight stored (OC, IC), nn.Linear's order (the tied head's product with wte (V, d)), no
     * bias: y (BT,OC) = [y +] x (BT,IC) w^T; backward dx (BT,IC) = [dx +] dy w, dw (OC,IC) += dy^T x */
    void (*matmul_forward_out_in)(float *y, const float *x, const void *w, int BT, int IC, int OC,
                                  int accumulate);
    void (*matmul_backward_out_in)(float *dx, float *dw, const float *dy, const float *x, const void *w,
                                   int BT, int IC, int OC, int dx_accumulate);
    void (*layernorm_forward)(float *y, float *mean, float *rstd, const float *x,
                              const void *w, const void *b, int BT, int C);
    /* res = a + b (res may alias a or b), then layernorm_forward's y, mean, rstd of res, in one pass
     * over the rows (the residual that ends an operator fused with the LayerNorm that starts the
     * next, gpt_ops.c); on the CPU the same bits as residual_forward then layernorm_forward */
    void (*residual_layernorm_forward)(float *res, float *y, float *mean, float *rstd, const float *a,
                                       const float *b, const void *w, const void *bias, int BT, int C);
    void (*layernorm_backward)(float *dx, float *dw, float *db, const float *dy,
                               const float *x, const void *w, const float *mean,
                               const float *rstd, int BT, int C);
    void (*gelu_forward)(float *y, const float *x, size_t n);
    void (*gelu_backward)(float *dx, const float *x, const float *dy, size_t n);
    void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH);
    /* The tiled attention (--attention tiled, osdp/kernels_cpu.h): lse (B,NH,T) instead of the
     * (B,NH,T,T) probabilities, the backward's scratch rowdot (B,NH,T); NULL where the backend
     * has none (the CLI then runs the naive attention) */
    void (*attention_forward_tiled)(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
    void (*attention_backward_tiled)(float *dqkv, float *rowdot, const float *dout, const float *out,
                                     const float *qkv, const float *lse, int B, int T, int C, int NH);
    void (*embedding_forward)(float *x, const int *tokens, const void *wte, const void *wpe,
                              int B, int T, int C);
    void (*embedding_backward)(float *dwte, float *dwpe, const float *dx, const int *tokens,
                               int B, int T, int C);
    void (*crossentropy_forward)(float *losses, float *probs, const int *targets, int BT, int V);
    void (*crossentropy_backward)(float *dlogits, const float *probs, const int *targets,
                                  float scale, int BT, int V);
    /* The vocabulary-parallel entries (tensor parallelism, padded vocabularies, osdp/layout.h):
     * this rank holds rows [vocab_lo, vocab_lo + vocab_n) of wte and the same columns of
     * lm_head (its logits, BT x vocab_n).
     * x (B,T,C) = wte row (token - vocab_lo) for tokens in the range, 0 for the others,
     * + wpe[t] (wpe NULL: nothing added) */
    void (*embedding_forward_range)(float *x, const int *tokens, const void *wte, const void *wpe,
                                    int B, int T, int C, int vocab_lo, int vocab_n);
    /* dwte (vocab_n, C) += the rows of the tokens in the range; dwpe (T, C) += (NULL: none);
     * each row summed in token-position order (deterministic) */
    void (*embedding_backward_range)(float *dwte, float *dwpe, const float *dx, const int *tokens,
                                     int B, int T, int C, int vocab_lo, int vocab_n);
    /* This rank's cross-entropy statistics of each row of logits (BT, V) over its first
     * `valid` columns (the rest is vocabulary padding): stats[3i] = their max (-inf when
     * valid is 0), stats[3i+1] = sum of exp(logit - max) (0 when valid is 0), stats[3i+2]
     * = the target's logit when the target lies in [vocab_lo, vocab_lo + valid), else 0.
     * The logits are left unchanged. */
    void (*crossentropy_stats)(float *stats, const float *logits, const int *targets, int BT, int V,
                               int valid, int vocab_lo);
    /* From the group's statistics (group_size x BT x 3, in rank order, every rank the same):
     * M = the largest max, S = sum over ranks in order of sum x exp(max - M), the target
     * logit = the sum of the ranks' (one is non-zero); losses (BT) = log S - (target logit
     * - M), and the logits (BT, V) in `probs` become probabilities in place: exp(logit -
     * M) / S over the first `valid` columns, 0 over the padding. */
    void (*crossentropy_finish)(float *losses, float *probs, const float *group_stats, int BT, int V,
                                int valid, int group_size);
    /* dlogits (BT,V) = scale * (probs - onehot(target - vocab_lo)), the one-hot empty when
     * the target is outside [vocab_lo, vocab_lo + V) (overwrite; dlogits may alias probs) */
    void (*crossentropy_backward_range)(float *dlogits, const float *probs, const int *targets,
                                        float scale, int BT, int V, int vocab_lo);
    /* The fused head (--head fused): no (BT, V) probabilities.  From the group's statistics (as
     * crossentropy_finish) losses (BT) and each row's log-sum-exp lse (BT) = M + log S; and in
     * the backward, over a chunk of recomputed logits (BT, V) in place: dlogits = scale *
     * (exp(logit - lse) - onehot(target - vocab_lo)) over the first `valid` columns, 0 over the
     * padding.  NULL where the backend has none (the CLI then runs the naive head). */
    void (*crossentropy_lse)(float *losses, float *lse, const float *group_stats, int BT, int group_size);
    void (*crossentropy_backward_lse)(float *dlogits, const float *lse, const int *targets, float scale, int BT,
                                      int V, int valid, int vocab_lo);
    /* pre (BT, OC) = x w + b (w (IC, OC), b (OC)), y (BT, OC) = gelu_forward's GELU of pre: the MLP's
     * first product and its GELU as one entry, where a table can fuse them (the CUDA bf16 table, with
     * OSDP_CUDA_LT_EPILOGUES=1: one cuBLASLt product with the bias and GELU in its epilogue); NULL:
     * gpt_ops.c runs matmul_forward then gelu_forward. */
    void (*matmul_forward_gelu)(float *y, float *pre, const float *x, const void *w, const void *b, int BT, int IC,
                                int OC);
    /* The fused head's backward over one chunk of rows in one entry, where a table does better than
     * crossentropy_backward_lse and the head's gradient products one by one (NULL: gpt_ops.c runs
     * those, as the CPU and CUDA fp32 tables do): from the chunk's recomputed logits (rows, V), the
     * d(logits) of crossentropy_backward_lse, then dln (rows, d) = dlogits w^T (overwrite) and dw +=
     * ln^T dlogits, w the lm_head (d, V) or, out_in != 0, the tied head's wte (V, d).  The logits are
     * scratch to it (contents after the call unspecified).  The CUDA bf16 table writes d(logits) in
     * bf16 straight from the logits, the operands its products round them to anyway. */
    void (*head_backward_lse)(float *dln, float *dw, float *logits, const float *lse, const int *targets,
                              float scale, const float *ln, const void *w, int rows, int d, int V, int valid,
                              int vocab_lo, int out_in);
    /* The MLP's second product's backward and the GELU's in one entry, where a table can fuse them (the CUDA
     * bf16 table, with OSDP_CUDA_LT_EPILOGUES=1: the d(x) product through cuBLASLt with the GELU's gradient
     * and the bias gradient in its epilogue, DGELU_BGRAD): matmul_backward's dw (IC, OC) += x^T dy and db
     * (OC) += the column sums of dy, dpre (BT, IC) = gelu_backward of pre (the GELU's input, matmul_forward
     * _gelu's pre) and dy w^T (overwrite), and db_pre (IC) += the column sums of dpre (the first product's
     * bias gradient; NULL: none).  x is the GELU's output, w (IC, OC).  NULL: gpt_ops.c runs matmul_backward,
     * gelu_backward and the first product's backward with its bias. */
    void (*matmul_backward_dgelu)(float *dpre, float *dw, float *db, float *db_pre, const float *dy, const float *x,
                                  const float *pre, const void *w, int BT, int IC, int OC);
    void (*residual_forward)(float *out, const float *a, const float *b, size_t n);
    /* The bf16 residual stream (--residual-dtype bf16, osdp/schedule.h); NULL for the fp32 tables: x rounded
     * to bf16 values in place (round to nearest even, as convert_weights), and dst (n fp32) = src (n bf16)
     * widened, exact.  A recomputed operator's output goes to bf16 with convert_weights. */
    void (*residual_round)(float *x, size_t n);
    void (*residual_widen)(float *dst, const void *src, size_t n);
    /* matmul_forward and matmul_backward with x (BT, IC) a stored bf16 activation (--activation-dtype bf16,
     * osdp/layout.h), read as it is: the product's own rounding of x to bf16 is skipped, so the results are
     * those of matmul_forward / matmul_backward on x widened.  NULL: gpt_ops.c passes the widened copy to
     * matmul_forward / matmul_backward (the CPU tables, the fp32 ones). */
    void (*matmul_forward_bf16_x)(float *y, const void *x, const void *w, const void *b, int BT, int IC, int OC,
                                  int accumulate);
    void (*matmul_backward_bf16_x)(float *dx, float *dw, float *db, const float *dy, const void *x, const void *w,
                                   int BT, int IC, int OC, int dx_accumulate);
    /* The producers of the stored bf16 activations (--activation-dtype bf16) writing the stored piece itself (y,
     * out: bf16), each value rounded to the nearest bf16 (ties to even) as it is stored: the bits of
     * layernorm_forward, residual_layernorm_forward, gelu_forward and attention_forward_tiled followed by
     * residual_round and convert_weights, with no fp32 copy and no pass over one.  The GELU's x is the stored fc
     * (bf16), widened as read, in the forward and in gelu_backward_bf16_x (whose results are gelu_backward's on
     * the widened copy).  NULL (the CPU tables, the fp32 ones): gpt_ops.c computes the fp32 copy in the
     * workspace's OSDP_S_ACT, rounds it and narrows it into the piece, and widens fc there for the backward. */
    void (*layernorm_forward_bf16_y)(void *y, float *mean, float *rstd, const float *x, const void *w, const void *b,
                                     int BT, int C);
    void (*residual_layernorm_forward_bf16_y)(float *res, void *y, float *mean, float *rstd, const float *a,
                                              const float *b, const void *w, const void *bias, int BT, int C);
    void (*gelu_forward_bf16)(void *y, const void *x, size_t n);
    void (*gelu_backward_bf16_x)(float *dx, const void *x, const float *dy, size_t n);
    void (*attention_forward_tiled_bf16_out)(void *out, float *lse, const float *qkv, int B, int T, int C, int NH);
    /* matmul_forward_gelu with the stored bf16 pieces (--activation-dtype bf16): pre (BT, OC) = x w + b and y =
     * GELU of pre, both written bf16 (the stored fc and gelu), x the stored bf16 ln read in place.  Returns 1, or
     * 0 with nothing done where the table cannot (the CUDA bf16 table: one cuBLASLt product with GELU_AUX_BIAS
     * and bf16 outputs where OSDP_CUDA_LT_EPILOGUES=1 and cuBLASLt offers an algorithm); gpt_ops.c then runs
     * the unfused path.  Not the unfused path's bits: the GELU is cuBLASLt's, of the unrounded pre.  NULL:
     * never (the CPU tables, the fp32 ones). */
    int (*matmul_forward_gelu_bf16)(void *y, void *pre, const void *x, const void *w, const void *b, int BT, int IC,
                                    int OC);
    void (*vector_accumulate)(float *y, const float *x, size_t n);
    /* sum of losses (BT) in double, result to the host */
    double (*sum)(const float *x, size_t n);
    /* sum of squares in double, result to the host */
    double (*sum_squares)(const float *x, size_t n);
    /* *acc (one double in this backend's memory) += the sum (squares != 0:
     * of squares) of x in double, in order with the other kernels and
     * without waiting for them: a step reads its sums back once */
    void (*accumulate_sum)(double *acc, const float *x, size_t n, int squares);
    /* AdamW on one contiguous range; t is the 1-based step; grad_scale
     * multiplies the gradient first (global-norm clipping). */
    void (*adamw)(float *w, const float *g, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, long t);
    /* Device memory now: *free_bytes left to allocate, *total_bytes of the card
     * (cudaMemGetInfo).  NULL where the backend's memory is the host's (the CPU
     * tables: the limit is --mem-limit's, emulated). */
    osdp_status (*mem_info)(size_t *free_bytes, size_t *total_bytes);
    /* The device's own clock around the work queued between timer_start and
     * timer_stop (CUDA events on the compute stream): timer_stop waits for
     * that work (within the communication timeout) and returns its seconds.
     * NULL where the host's clock after synchronize is the time (the CPU
     * tables, whose work is done when a call returns). */
    void (*timer_start)(void);
    double (*timer_stop)(void);
} osdp_compute_backend;

extern const osdp_compute_backend osdp_compute_cpu;
/* bf16 working weights on the CPU: widened to fp32 for OpenBLAS, so that the
 * mixed-precision runtime path (bf16 gathers, fp32 master) runs on real MPI
 * ranks where no GPU is; not a speed mode */
extern const osdp_compute_backend osdp_compute_cpu_bf16;
#ifdef OSDP_HAVE_CUDA
/* src/cuda/, in the CUDA plugin (osdp/cuda_plugin.h) or libosdp_cuda.a: programs reach them through
 * osdp_compute_find */
extern const osdp_compute_backend osdp_compute_cuda;        /* fp32 */
extern const osdp_compute_backend osdp_compute_cuda_bf16;   /* bf16 products, fp32 accumulation */
#endif
/* name "cpu" or "cuda" (which loads the CUDA plugin), weights OSDP_FLOAT32 or OSDP_BFLOAT16; NULL if
 * not built or the plugin could not be loaded */
const osdp_compute_backend *osdp_compute_find(const char *name, osdp_dtype weight_dtype);
/* why osdp_compute_find(name, ...) returned NULL, to follow "--backend NAME: " */
const char *osdp_compute_find_failure(const char *name);

/* The pad quantum a run uses: the backend's, or OSDP_PAD_QUANTUM, a test knob
 * (a whole number from 1 to 4096) that lets the CPU pad like CUDA, to prove
 * that checkpoints load across paddings.  OSDP_ERR_INPUT names the variable
 * when its value is not one. */
osdp_status osdp_compute_pad_quantum(const osdp_compute_backend *be, int *pad_quantum);

/* The vocabulary quantum a run uses (osdp_layout_build_tp): the backend's, or
 * OSDP_VOCAB_QUANTUM, a test knob (a whole number from 1 to 4096) that lets
 * the CPU pad the vocabulary like CUDA, to run the vocab-parallel
 * cross-entropy on padding columns.  OSDP_ERR_INPUT names the variable when
 * its value is not one. */
osdp_status osdp_compute_vocab_quantum(const osdp_compute_backend *be, int *vocab_quantum);

#endif

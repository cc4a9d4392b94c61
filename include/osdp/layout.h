/* The per-operator size table: the single source of truth for everything an
 * operator allocates: its parameters (by role, osdp_param_slot), the
 * activations it saves for its backward (osdp_act_slot), what it keeps
 * under recompute, and its backward scratch (osdp_scratch_slot).  The
 * runtime's schedule (sizes), the carving (osdp/gpt.h), the sharder, the
 * optimizer, the cost model and the checkpoint layout all read it, so they
 * cannot disagree.
 *
 * Operators (paper Table 1, 2L + 2 of them), in execution order:
 *   op 0          embed   : wte (V, d_0), wpe (T, d_0)
 *   op 1 + 2i     attn.i  : [in_proj.weight (d_{i-1}, d_i), in_proj.bias (d_i)]
 *                           ln_1.weight (d), ln_1.bias (d),
 *                           qkv.weight (d, 3d), qkv.bias (3d),
 *                           proj.weight (d, d), proj.bias (d)
 *   op 2 + 2i     mlp.i   : ln_2.weight (d), ln_2.bias (d),
 *                           fc.weight (d, 4d), fc.bias (4d),
 *                           proj.weight (4d, d), proj.bias (d)
 *   op 2L + 1     head    : ln_f.weight (d_L), ln_f.bias (d_L), lm_head.weight (d_L, V)
 * Linear weights are stored (in, out): y = x W + b.
 *
 * A tied head (model option tied_head, GPT-2's): the head holds ln_f only;
 * its logits are x wte^T with the embedding's working wte, and its backward
 * adds d(wte) into the embedding's gradients (the FSDP way: the tied weight
 * lives in one unit, the embedding, which must then be DP so that its
 * weights stay resident from its forward to the head's backward; the
 * planner offers it nothing else).  Under tensor parallelism wte's
 * vocab_local rows are exactly the columns lm_head would hold.
 *
 * Blocks of different widths ("I&C" models): when block i is wider or
 * narrower than block i-1, attn.i owns an input projection
 * in_proj (d_{i-1} -> d_i, with bias) applied to the residual stream before
 * the block; the projected stream is the block's residual.  The embedding
 * has the width of block 0 and the head that of the last block.
 *
 * Tensor parallelism (DESIGN.md §9, Megatron).  A layout is built for one
 * rank of a tensor-parallel group of tp_size ranks (osdp_layout_build_tp):
 * its tensors are that rank's parts, so everything above (slices, shards,
 * the schedule, the optimizer) works on the parts unchanged.  Every rank of
 * the group has the same shapes; only which logical rows or columns it holds
 * differs (osdp_tensor_logical_run).
 *   wte           rows split: vocab-parallel, V padded to vocab_padded
 *                 (a multiple of tp_size x the backend's vocab quantum),
 *                 rank t holding rows [t vocab_local, (t+1) vocab_local)
 *   qkv           columns split by heads: each of q, k, v (3 column groups
 *                 of d) gives rank t its d / tp_size columns of heads
 *                 [t NH/tp, (t+1) NH/tp): weight (d, 3d/tp), bias (3d/tp)
 *   attn proj     rows split (row-parallel): weight (d/tp, d)
 *   fc            columns split: weight (d, 4d/tp), bias (4d/tp)
 *   mlp proj      rows split: weight (4d/tp, d)
 *   lm_head       columns split: vocab-parallel (d, vocab_local)
 *   the rest      replicated in the group (wpe, in_proj, LayerNorms, the
 *                 biases of the row-parallel products), with identical
 *                 gradients on every rank of the group
 * Activations and scratch are sized for the rank's part (qkv, attention
 * probabilities, heads, fc, gelu, probs); the residual stream stays whole.
 * tp_size 1 with vocab quantum 1 is the unsharded model, exactly. */
#ifndef OSDP_LAYOUT_H
#define OSDP_LAYOUT_H

#include <stddef.h>
#include "osdp/model_config.h"

#define OSDP_MAX_TENSORS_PER_OP 10
/* the fused head's chunk: token rows per sequence whose logits exist at once
 * (fewer when T is shorter); B sequences make one chunk of B x this many rows */
#define OSDP_HEAD_CHUNK_ROWS 64

typedef enum osdp_op_type { OSDP_OP_EMBED, OSDP_OP_ATTN, OSDP_OP_MLP, OSDP_OP_HEAD } osdp_op_type;
typedef enum osdp_init_kind { OSDP_INIT_NORMAL, OSDP_INIT_ONES, OSDP_INIT_ZEROS } osdp_init_kind;
/* how a tensor is cut over the tensor-parallel group */
typedef enum osdp_tp_split {
    OSDP_TP_REPLICATED,     /* every rank holds the whole tensor */
    OSDP_TP_ROWS,           /* rank t holds logical rows [t rows, (t+1) rows) */
    OSDP_TP_COLS            /* each of tp_groups column groups gives rank t its share */
} osdp_tp_split;

typedef struct osdp_tensor_desc {
    char name[48];          /* within the operator, e.g. "qkv.weight" */
    int rows, cols;         /* this rank's shape (its tensor-parallel part); 1-D tensors have rows = 1 */
    int logical_rows, logical_cols;     /* the whole tensor, as checkpoints store it (vocabulary unpadded) */
    osdp_tp_split tp_split;
    int tp_groups;          /* OSDP_TP_COLS: column groups, each cut in tp_size (qkv: 3), else 1 */
    int ndim;               /* 1 or 2 (2-D tensors get weight decay) */
    size_t offset;          /* first element in the operator's flat buffer */
    size_t numel;
    osdp_init_kind init;
    float init_std;         /* for OSDP_INIT_NORMAL */
} osdp_tensor_desc;

/* Parameter tensors by role (osdp_op_layout.param: index into tensor[], -1
 * where the operator has none).  Shapes (in, out), as in the table above. */
typedef enum osdp_param_slot {
    OSDP_P_WTE,             /* embed: (V, d_0) */
    OSDP_P_WPE,             /* embed: (ctx, d_0) */
    OSDP_P_IN_PROJ_W,       /* attn, width change: (d_{i-1}, d_i) */
    OSDP_P_IN_PROJ_B,       /* (d_i) */
    OSDP_P_LN_W,            /* ln_1 (attn), ln_2 (mlp), ln_f (head): (d) */
    OSDP_P_LN_B,            /* (d) */
    OSDP_P_QKV_W,           /* attn: (d, 3d) */
    OSDP_P_QKV_B,           /* attn: (3d) */
    OSDP_P_FC_W,            /* mlp: (d, 4d) */
    OSDP_P_FC_B,            /* mlp: (4d) */
    OSDP_P_PROJ_W,          /* attn: (d, d); mlp: (4d, d) */
    OSDP_P_PROJ_B,          /* (d) */
    OSDP_P_LM_HEAD_W,       /* head: (d_L, V); none when the head is tied */
    OSDP_P_N_SLOTS
} osdp_param_slot;

/* Activations an operator saves from its forward for its backward, by role,
 * in floats (token ids: 4-byte ints) per sequence of T tokens; B sequences
 * take B times as much.  An operator's pieces lie in one block in the order
 * it declares them (osdp_op_layout.act); attn and mlp declare `out` last, so
 * that recompute keeps it alone.
 *
 * bf16 activations (cfg.act_bf16, --activation-dtype bf16, only beside bf16
 * weights, Megatron-LM's way): the products' inputs and outputs that the
 * backward reads, LN, QKV, HEADS, FC and GELU (osdp_act_slot_bf16), hold
 * bf16 elements, a piece of n per sequence taking ceil(n / 2) floats.  The
 * forward computes each in fp32 in the operator's backward scratch piece
 * OSDP_S_ACT (free then: the scratch is live only inside one operator's
 * backward), rounds it there to bf16 values and narrows it into its piece;
 * whatever reads it next (a product, the attention, the GELU) reads the
 * rounded fp32 copy, so forward, recompute and backward see the same values.
 * The backward widens each piece into OSDP_S_ACT again before its readers.
 * OSDP_S_ACT has two parts: the first (T, d) for ln, then heads (which
 * replace it once qkv is made), the second for qkv (attn) or fc, then gelu in
 * place (mlp).  The copy is a piece of the accounted workspace, so memory is
 * exact on every table with no kernel of its own; the price is a rounding,
 * a narrowing and (backward) a widening pass per piece.  A table with
 * matmul_forward_bf16_x / matmul_backward_bf16_x (osdp/compute.h: CUDA bf16)
 * has its products read the stored pieces in place instead: the forward's
 * products no staging pass of their own, the backward's weight gradients no
 * widened copy (ln and gelu, and heads under the naive attention, are then
 * not widened at all); the fp32 copies stay for the other readers (the
 * attention, the GELU's backward) and in the size table.  The CPU bf16 table
 * widens nothing more inside its kernels.  fp32 stay: the layernorm
 * statistics, the attention's lse, the losses, the head's probabilities or
 * logits, the residual (--residual-dtype's). */
typedef enum osdp_act_slot {
    OSDP_A_TOKENS,          /* embed: input ids, head: target ids (T) */
    OSDP_A_XIN,             /* attn, width change: the projected residual (T, d) */
    OSDP_A_LN,              /* layernorm output (T, d) */
    OSDP_A_MEAN,            /* layernorm mean (T) */
    OSDP_A_RSTD,            /* layernorm 1/std (T) */
    OSDP_A_QKV,             /* attn: (T, 3d) */
    OSDP_A_ATT,             /* attn, naive: probabilities (NH, T, T) */
    OSDP_A_HEADS,           /* attn: head outputs concatenated (T, d) */
    OSDP_A_FC,              /* mlp: before GELU (T, 4d) */
    OSDP_A_GELU,            /* mlp: after GELU (T, 4d) */
    OSDP_A_PROBS,           /* head, naive: probabilities (T, V) */
    OSDP_A_LSE,             /* attn, tiled: log-sum-exp per (head, row) (NH, T); head, fused: per row (T) */
    OSDP_A_LOSSES,          /* head: per-token losses (T) */
    OSDP_A_OUT,             /* embed, attn, mlp: the residual stream after the operator (T, d) */
    OSDP_A_N_SLOTS
} osdp_act_slot;

/* The operator's backward scratch, by role (floats per sequence), inside the
 * workspace shared by every operator (osdp_workspace_floats). */
typedef enum osdp_scratch_slot {
    OSDP_S_DHEADS,          /* attn: d(heads) (T, d) */
    OSDP_S_DQKV,            /* attn: d(qkv) (T, 3d) */
    OSDP_S_DGELU,           /* mlp: d(gelu), then d(fc) in place (T, 4d) */
    OSDP_S_DLN,             /* attn, mlp, head: d(layernorm output) (T, d) */
    OSDP_S_DATT,            /* attn, naive: d(probabilities) (NH, T, T) */
    OSDP_S_ROWDOT,          /* attn, tiled: rowsum(d(heads) * heads) per (head, row) (NH, T) */
    OSDP_S_ACT,             /* bf16 activations only: the fp32 copies of the bf16 pieces (above): attn
                               (T, d + 3d/tp), mlp (T, d + 4d/tp), head (T, d) */
    OSDP_S_N_SLOTS
} osdp_scratch_slot;

/* is slot stored in bf16 when cfg.act_bf16 (above)? */
static inline int osdp_act_slot_bf16(osdp_act_slot slot)
{
    return slot == OSDP_A_LN || slot == OSDP_A_QKV || slot == OSDP_A_HEADS || slot == OSDP_A_FC ||
           slot == OSDP_A_GELU;
}

/* one piece of a block: where it starts and how long it is, per sequence */
typedef struct osdp_piece {
    size_t offset, floats;
} osdp_piece;

/* The plan modes an operator may take (osdp/plan.h), osdp_op_layout's
 * allowed_modes: DP always; ZDP (k > 0 slices of any g, and h) unless the
 * weights must stay resident all step: the embedding's when the head is
 * tied to its wte (the head reads it from the embedding's forward to its
 * own backward).  Every check of a mode, the planner's choices included,
 * reads this entry. */
enum { OSDP_MODE_DP = 1, OSDP_MODE_ZDP = 2 };

typedef struct osdp_op_layout {
    char name[32];          /* "embed", "attn.3", "mlp.3", "head" */
    osdp_op_type type;
    unsigned allowed_modes; /* OSDP_MODE_* bits */
    int block;              /* block index for attn/mlp, -1 otherwise */
    int width;              /* d of the operator (input width for embed: d_0) */
    int width_in;           /* attn: width of the incoming residual (d_{i-1}) */
    int n_tensors;
    osdp_tensor_desc tensor[OSDP_MAX_TENSORS_PER_OP];
    int param[OSDP_P_N_SLOTS];  /* tensor index per role, -1: none */
    size_t numel;           /* parameters of the operator */
    osdp_piece act[OSDP_A_N_SLOTS];         /* saved activations per role (floats 0: none) */
    size_t act_floats_per_seq;              /* their sum: the activation block */
    size_t kept_floats_per_seq;             /* recompute: what stays, the output (attn, mlp) */
    osdp_piece scratch[OSDP_S_N_SLOTS];     /* backward scratch per role */
    size_t scratch_floats_per_seq;          /* their sum */
    size_t tp_floats_per_seq;   /* head, when its cross-entropy is vocab-parallel (tp_size > 1 or a
                                   padded vocabulary): per token this rank's 3 statistics (max logit,
                                   sum of exponentials, target logit) and the group's 3 x tp_size,
                                   the staging of their all-gather (0 otherwise); a fused head
                                   (head_chunk_rows > 0) always has it, and after the statistics
                                   one chunk of logits, head_chunk_rows x vocab_local */
    int attn_tiled;             /* attn: tiled attention (cfg.attention_naive 0): lse, not probabilities */
    int head_chunk_rows;        /* head, fused (cfg.head_naive 0): rows per sequence of one chunk of
                                   logits (0: the naive head keeps all its probabilities) */
    size_t flops_per_token;     /* forward matmul FLOPs per token of this rank's part (x3 for fwd+bwd) */
    size_t attn_flops_per_token;/* forward attention score/value FLOPs per token, this rank's heads */
} osdp_op_layout;

/* whether an operator has a matrix product of its own to cut into slices:
 * not the embedding (a lookup), nor a tied head (ln_f alone, its product
 * reads the embedding's wte) */
static inline int osdp_op_can_split(const osdp_op_layout *op)
{
    /* nor a fused head: each chunk of logits needs the whole weight, and slices are taken once, in order */
    return op->type != OSDP_OP_EMBED &&
           !(op->type == OSDP_OP_HEAD && (op->param[OSDP_P_LM_HEAD_W] < 0 || op->head_chunk_rows > 0));
}

/* the block operators (attn, mlp): the only ones that can recompute their activations */
static inline int osdp_op_can_recompute(osdp_op_type type) { return type == OSDP_OP_ATTN || type == OSDP_OP_MLP; }

typedef struct osdp_layout {
    osdp_model_config cfg;
    int n_ops;
    int T;                      /* sequence length the activations are sized for */
    osdp_op_layout *op;         /* [n_ops] */
    int tp_size;                /* tensor-parallel group the parts are for (1: whole operators) */
    int vocab_padded;           /* V rounded up to a multiple of tp_size x the vocab quantum */
    int vocab_local;            /* vocab_padded / tp_size: this rank's rows of wte, columns of lm_head */
    size_t total_params;        /* of this rank's parts */
    size_t max_width;           /* largest residual width */
    size_t max_op_numel;
    size_t max_scratch_floats_per_seq;  /* the largest operator's backward scratch */
} osdp_layout;

/* whether operator op may be ZDP (k > 0, or h): its allowed_modes entry */
static inline int osdp_op_allows_zdp(const osdp_layout *layout, int op)
{
    return (layout->op[op].allowed_modes & OSDP_MODE_ZDP) != 0;
}

/* T: sequence length used for activation sizes (<= cfg->ctx).  The whole
 * model: tp_size 1, vocabulary unpadded. */
osdp_status osdp_layout_build(osdp_layout *layout, const osdp_model_config *cfg, int T);
/* One rank's parts for a tensor-parallel group of tp_size ranks, the
 * vocabulary padded to a multiple of tp_size x vocab_quantum (the compute
 * backend's; below 1 reads as 1).  OSDP_ERR_INPUT, naming --tp, when
 * tp_size does not divide every block's heads. */
osdp_status osdp_layout_build_tp(osdp_layout *layout, const osdp_model_config *cfg, int T, int tp_size,
                                 int vocab_quantum);
/* Where this rank's element e (0 <= e < t->numel) of tensor t lies in the
 * logical tensor (logical_rows x logical_cols, row-major) on tensor-parallel
 * rank tp_rank: returns 1 and sets *logical to its flat logical index, or
 * returns 0 when e is vocabulary padding (no logical element).  *run is how
 * many elements from e on (e included, within the tensor) continue alike:
 * consecutive logical indices, or padding.  The identity for replicated
 * tensors and tp_size 1 without padding. */
int osdp_tensor_logical_run(const osdp_tensor_desc *t, int tp_rank, size_t e, size_t *logical, size_t *run);
void osdp_layout_free(osdp_layout *layout);
int osdp_layout_find_op(const osdp_layout *layout, const char *name);
/* Index of the operator tensor `name` ("attn.3/qkv.weight"): op and tensor index */
int osdp_layout_find_tensor(const osdp_layout *layout, const char *full_name, int *op, int *tensor);

/* Sharding: each slice of an operator's flat buffer is padded to a multiple
 * of N x q and cut into N contiguous shards of a multiple of q elements.  q,
 * the pad quantum, is the compute backend's (osdp_compute_pad_quantum): 1 on
 * the CPU (the least padding), 64 on CUDA, so that every rank's chunk of an
 * NCCL collective starts 256-byte aligned.  A quantum below 1 reads as 1. */
static inline size_t osdp_padded_numel_quantum(size_t numel, int n_ranks, int pad_quantum)
{
    const size_t unit = (size_t)n_ranks * (size_t)(pad_quantum > 1 ? pad_quantum : 1);
    return (numel + unit - 1) / unit * unit;
}
/* padded to a multiple of N (quantum 1, the CPU's) */
static inline size_t osdp_padded_numel(size_t numel, int n_ranks)
{
    return osdp_padded_numel_quantum(numel, n_ranks, 1);
}
static inline size_t osdp_shard_numel(size_t numel, int n_ranks)
{
    return osdp_padded_numel(numel, n_ranks) / (size_t)n_ranks;
}

/* Operator splitting (DESIGN.md §3): cuts operator `op` into g slices,
 * contiguous ranges [bounds[s], bounds[s+1]) of its flat buffer, bounds[0] = 0,
 * bounds[g] = numel.  Since linear weights are stored (in, out), a range of
 * whole rows of a weight is a block of its input dimension: a slice holds the
 * rows of one or more linear layers (plus whole LayerNorm tensors), and a
 * linear layer cut by a slice boundary runs as one matrix product per piece,
 * the pieces' outputs summed.  Cuts fall only on row boundaries of linear
 * weights or at the start of a LayerNorm or weight tensor, never between a
 * weight and its bias, so that a bias is always in the slice of its weight's
 * last rows.  Each cut is the allowed point nearest to s * numel / g.
 * The embedding is a lookup, not a product: it cannot be split (g = 1 only).
 * Returns OSDP_ERR_INPUT (message names the operator) when g slices cannot be
 * cut. */
#define OSDP_MAX_SLICES 16
osdp_status osdp_op_split(const osdp_op_layout *op, int g, size_t *bounds);

/* Model FLOPs per token for forward + backward (6 per parameter in matmuls plus
 * attention), the number MFU is computed from. */
double osdp_layout_flops_per_token(const osdp_layout *layout);

#endif

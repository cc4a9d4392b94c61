/* The cost model: time and memory of every operator in every mode, and the
 * peak memory of a whole plan, for N ranks and a micro-batch of b sequences.
 *
 * Sizes come from the per-operator size table (osdp/layout.h), exactly as
 * the runtime allocates them.  Operator i with g slices of which k are ZDP
 * (g = 1: k = 0 DP, k = 1 ZDP); every slice is its own flat buffer of
 *   q   = osdp_padded_numel(ceil(numel_i / g), N) elements     (g = 1: the op's padded numel)
 * e = device param_bytes (gathered weights, gradients, collectives),
 * a = device act_bytes (activations, workspace).  Bytes per rank:
 *   state    16 g q / N      fp32 master, gradient, AdamW m and v of the shards
 *   resident (g - k) q e     DP slices' full weights, kept all step
 *   acts     b act_floats_per_seq a     alive from its forward to its backward
 *   grads    G = g q e       full gradients during its backward
 *   recv     H = g q e / N   reduce-scatter destination during its backward
 *   work     w = ZDP weights gathered while it computes:
 *              k = 0: 0;  g = 1: q e;  g > 1: q e, or 2 q e when k >= 2 and
 *              prefetch is on (the next slice is prefetched)
 *   prefetch f = k > 0 ? q e : 0: its first ZDP slice, gathered while the
 *              operator before it (backward order) still computes
 *   workspace W = osdp_workspace_floats(layout, b) a     (one, all step)
 *
 * Peak (the runtime's schedule, osdp/runtime.h; ops 0..n-1):
 *   peak = W + sum_i (state_i + resident_i) + max_u ( K_u + Y_u )
 *   K_u  = sum_{j <= u} acts_j + G_u + [prefetch, u + 1 < n] (G_{u+1} + H_{u+1})
 *   Y_u  = max(w_u, H_u) + [prefetch, u > 0] f_{u-1}
 * The maximum is reached during some operator's backward: its gradients,
 * its gathered weights (or, just after, its receive buffer), the next
 * backward operator's prefetched weights and, with prefetch, the previous
 * operator's reduce-scatter still in flight (its gradients and receive
 * buffer), on top of the activations of every operator not yet
 * back-propagated.  Forward moments never exceed it.  For g = 1 and
 * e = a = 4 this equals osdp_memory_predict()'s peak_total byte for byte
 * (tests/test_planner.c proves it on random plans); split plans (g > 1)
 * are not run by the runtime yet, so for them the model is analytical.
 *
 * Time per operator for one optimizer step of A micro-steps (accum_steps):
 *   compute  = A b T F_i gamma_type           (F_i: osdp_cost_op_flops)
 *   AG = (N-1)(alpha_ag + S/N beta_ag),  RS = (N-1)(alpha_rs + S/N beta_rs),
 *   S  = q e bytes (one slice)
 *   comm     = (g - k)(AG + A RS) + k (2 A AG + A RS)
 *              (DP: weights gathered once per step, ZDP: twice per
 *              micro-step; gradients reduce-scattered every micro-step.
 *              A = 1, g = 1 and equal AG/RS costs give the paper's eq. 2:
 *              c (N-1)(alpha + S/N beta) with c = 2 DP, 3 ZDP)
 *   paper    T_i = compute + comm
 *   overlap  T_i = max(compute, comm) when prefetch is on (the operator's
 *              collectives run while compute proceeds, so the slower of the
 *              two bounds it), compute + comm without prefetch.
 * Step time = sum_i T_i. */
#ifndef OSDP_COST_MODEL_H
#define OSDP_COST_MODEL_H

#include "osdp/device.h"
#include "osdp/layout.h"
#include "osdp/plan.h"

typedef enum osdp_cost_kind { OSDP_COST_PAPER, OSDP_COST_OVERLAP } osdp_cost_kind;

typedef struct osdp_cost_model {
    const osdp_layout *layout;
    const osdp_device *dev;
    int N;                  /* ranks */
    int prefetch;           /* the runtime's prefetch (train's default: on) */
    osdp_cost_kind kind;
} osdp_cost_model;

typedef struct osdp_op_mem {
    long long state, resident, acts, grads, recv, work, prefetch;
} osdp_op_mem;

typedef struct osdp_op_time {
    double compute, comm, total;
} osdp_op_time;

/* FLOPs per token, forward + backward */
double osdp_cost_op_flops(const osdp_op_layout *op);
/* slice buffer elements q */
size_t osdp_cost_slice_numel(const osdp_cost_model *cm, int op, int g);
void osdp_cost_op_mem(const osdp_cost_model *cm, int op, int g, int k, int b, osdp_op_mem *out);
void osdp_cost_op_time(const osdp_cost_model *cm, int op, int g, int k, int b, int accum, osdp_op_time *out);
long long osdp_cost_workspace(const osdp_cost_model *cm, int b);

/* Peak bytes per rank of `plan` at micro-batch b (formula above); *at_op
 * (may be NULL) gets the operator whose backward reaches it. */
long long osdp_cost_peak(const osdp_cost_model *cm, const osdp_plan *plan, int b, int *at_op);
/* Step time of `plan` (sum of T_i, i = 0..n-1 in order) */
double osdp_cost_step_time(const osdp_cost_model *cm, const osdp_plan *plan, int b, int accum);

#endif

/* The plan: per operator, how its parameters are held.
 *
 * An operator is cut into `slices` (g >= 1) along its input dimension; the
 * first `zdp_slices` (k, 0..g) of them are ZDP, the rest DP.  Without
 * splitting g = 1 and k is 0 (DP) or 1 (ZDP).  The plan also carries the
 * batch geometry the planner chose and its predictions.
 *
 * Plan file format (INI without sections, one operator per line):
 *     # comment
 *     default = dp          ; optional: mode of every operator not listed
 *     embed   = dp
 *     attn.0  = zdp
 *     mlp.0   = 2/4         ; 2 of 4 slices ZDP (operator splitting)
 *     attn.2  = h           ; hierarchical ZDP: sharded over the ranks of the
 *                           ; rank's node, replicated across nodes (unsplit)
 *     attn.1  = zdp recompute   ; activation checkpointing (attn and mlp only)
 *     tp      = 2           ; optional: the tensor-parallel degree the plan is for
 *                           ; (the modes apply to each rank's parts; absent: not stated)
 * A default with `recompute` applies it to attn and mlp operators; a split
 * default gives the embedding (which cannot be split) ZDP when k > 0.
 *
 * Gradient accumulation (`reduce-once`, a token after the mode, in either
 * order with `recompute`):
 *     attn.3  = zdp reduce-once
 *     default = dp recompute reduce-once
 * The operator keeps its full fp32 gradients (all its slices: the backward
 * writes them as one buffer) resident across the step's accum_steps
 * micro-batches, adds every micro-batch's into them, and reduce-scatters
 * them once, in the last micro-batch's backward (overlapped with the rest
 * of that backward like every reduce-scatter): gradient traffic once per
 * optimizer step instead of once per micro-batch, for P e_g bytes held
 * all run instead of during its backward alone (DDP's no_sync, Megatron's
 * main_grad, ZeRO-1).  Without the token the operator reduces every
 * micro-batch (ZeRO-2/3's behaviour, the default).  A DP slice's weights are
 * resident but its full gradient is not (its optimizer state is sharded like
 * ZDP's), so the choice costs DP and ZDP slices the same bytes; the planner
 * weighs them per operator (osdp/cost_model.h).  With accum_steps 1 the
 * traffic is the same either way and only the memory differs.
 *
 * Hierarchical sharding (`h`, DESIGN.md §9): the operator's one slice is
 * sharded over the ranks of the rank's node within its data-parallel group
 * and replicated across nodes: its gathers stay inside the node, its
 * gradients are reduce-scattered inside the node, then across the nodes
 * (over the ranks with the same in-node index) and all-gathered back across
 * them: the node-first order in which every slice of such a data group is
 * reduced, so that h never changes the numbers (osdp/runtime.h).  On one
 * node it holds and moves what ZDP does. */
#ifndef OSDP_PLAN_H
#define OSDP_PLAN_H

#include <stdio.h>
#include "osdp/geometry.h"
#include "osdp/layout.h"

typedef struct osdp_plan {
    int n_ops;
    int *slices;          /* g per operator */
    int *zdp_slices;      /* k per operator */
    int *recompute;       /* per operator: recompute activations in backward (blocks only) */
    int *hierarchical;    /* per operator: its ZDP slice is sharded inside the node (then k = g = 1) */
    int *reduce_once;     /* per operator: 1 its gradients are accumulated in full and reduced once per
                             optimizer step (plan token reduce-once), 0 reduced every micro-batch */
    /* the step the plan is for (osdp/geometry.h): what the planner decides, geo.micro_batch (0: not
     * chosen), geo.accum_steps and geo.tp_size, the mesh's tensor-parallel degree (0: not stated; the
     * operators' choices apply to each rank's tensor-parallel parts); the pipeline's planner also its
     * geo.n_ranks (the data group's), geo.pp_size, stage_bounds and pipe_schedule (osdp_pipe_choice) */
    osdp_step_geometry geo;
    double predicted_step_s;
    double predicted_peak_bytes;
} osdp_plan;

osdp_status osdp_plan_alloc(osdp_plan *plan, int n_ops);
void osdp_plan_free(osdp_plan *plan);
osdp_status osdp_plan_copy(osdp_plan *dst, const osdp_plan *src);
/* every operator DP (zdp = 0) or ZDP (zdp = 1), unsplit */
void osdp_plan_fill(osdp_plan *plan, int zdp);
/* Makes every operator the layout does not allow to be ZDP (its
 * allowed_modes, osdp/layout.h: a tied head's embedding) DP (its k 0)
 * whatever the plan said; returns 1 when that changed the plan (for a
 * caller's note), 0 otherwise */
int osdp_plan_tie_embedding(osdp_plan *plan, const osdp_layout *layout);
osdp_status osdp_plan_load(osdp_plan *plan, const osdp_layout *layout, const char *path);
osdp_status osdp_plan_parse(osdp_plan *plan, const osdp_layout *layout, const char *text, const char *origin);
/* The longest line a plan file may have: osdp_plan_parse reads lines of up
 * to this many characters (inih's INI_MAX_LINE, 200 bytes, less the newline
 * and the terminator); every writer's comment lines stay under it. */
#define OSDP_PLAN_LINE_MAX 198
/* writes the plan-file form (round-trips through osdp_plan_parse) */
void osdp_plan_write(const osdp_plan *plan, const osdp_layout *layout, FILE *out);
/* "dp", "zdp", "h", "2/4" for operator i into buf */
const char *osdp_plan_mode_name(const osdp_plan *plan, int op, char *buf, size_t n);
/* hashes the modes, the micro-batch and a tp_size above 1 (so that plans
 * without one hash as before; hierarchical and reduce-once operators alike) */
unsigned long long osdp_plan_hash(const osdp_plan *plan);
/* OSDP_ERR_INPUT naming both degrees when the plan states a tp_size other
 * than tp_size (origin: the plan's file name, for the message) */
/* does any operator shard hierarchically? (the runtime then needs the node groups) */
int osdp_plan_has_hierarchical(const osdp_plan *plan);
/* operators that reduce their gradients once per step */
int osdp_plan_count_reduce_once(const osdp_plan *plan);
osdp_status osdp_plan_check_tp(const osdp_plan *plan, int tp_size, const char *origin);

#endif

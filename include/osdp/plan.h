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
 * The operator keeps its full fp32 gradients (all its slices; per slice
 * below) resident across the step's accum_steps
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
 * Per slice of a split operator (`reduce-once J`, 1 <= J <= g):
 *     mlp.3   = 2/4 reduce-once 2      ; its 2 DP slices once, its 2 ZDP slices every micro-batch
 *     attn.3  = 1/4 reduce-once 1      ; its last slice (DP) once
 * the LAST J slices reduce once (its DP slices first, then its ZDP ones from
 * the last): contiguous, so their accumulated gradients are one buffer of
 * just those slices (the sum of their padded elements, e_g each), and the
 * other g - J slices reduce-scatter every micro-batch into a receive buffer
 * of their shards alone.  Which slices is no loss: a DP slice and a ZDP one
 * reduce alike (the same reduce-scatter into the same sharded gradient), so
 * only their count is a choice.  `reduce-once` alone (J = g) is what it
 * always was, so is no token (J = 0); a default's J applies to every
 * operator as its k does (the unsplit embedding: once when J > 0).
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
    int *reduce_once;     /* per operator: J, 0..g, its last J slices' gradients are accumulated in full and
                             reduced once per optimizer step (plan token reduce-once [J]; g: all of them, 1 for
                             an unsplit operator), the others' reduced every micro-batch */
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
/* operators that reduce their gradients once per step (some slices or all) */
int osdp_plan_count_reduce_once(const osdp_plan *plan);
/* the bare `reduce-once` of a plan file while it is parsed: every slice */
#define OSDP_PLAN_ONCE_ALL (-1)
/* J: operator op's slices that reduce once per step, the last J of its g (0: none; g: all) */
static inline int osdp_plan_once_slices(const osdp_plan *plan, int op)
{
    return plan->reduce_once ? plan->reduce_once[op] : 0;
}
/* the plan-file words of operator op's reduce-once: "", "reduce-once" (all slices) or "reduce-once J" */
const char *osdp_plan_once_word(const osdp_plan *plan, int op, char *buf, size_t n);
osdp_status osdp_plan_check_tp(const osdp_plan *plan, int tp_size, const char *origin);

#endif

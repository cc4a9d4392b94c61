/* The choices of operators already costed in one pipeline planning call
 * (plan_choices.c's make_choices): a stage's search, its memory search and
 * its bound each build a context of the same operators, and the stages of
 * one pipeline hold operators of the same shapes; with --split auto each
 * operator has some 200-400 choices, each priced through the cost model,
 * which was half of the 3D search.  An operator's raw choices (before
 * dominated ones are dropped) depend on its shape and on what the call
 * holds fixed (the device at the mesh's levels, the data group, the
 * micro-batch and accumulation, the options), and on the stage only
 * through the few facts of choice_key; the stage's micro-batches in
 * flight only add (in_flight - 1) acts to each choice's held bytes, so
 * they are kept at in_flight 0 and that added on the way out.  What a
 * context keeps of them, the dominated dropped, is kept too, per in-flight
 * count and objective.  Below planner.h's layer map, beside
 * plan_context.h. */
#ifndef OSDP_CHOICE_MEMO_H
#define OSDP_CHOICE_MEMO_H

#include "osdp/cost_model.h"

/* the terms of one choice that the peak and the time see */
typedef struct choice_terms {
    int slices, zdp_slices, recompute; /* k = zdp_slices of g = slices ZDP */
    int hierarchical;                  /* g = k = 1, sharded inside the node (osdp/plan.h) */
    int reduce_once;                   /* gradients reduced once per step (osdp/plan.h) */
    osdp_op_peak_terms mem;    /* what it adds to the peak (osdp/cost_model.h); a wrapped stage's first
                                  operator: mem.pass_peak with the wrap moments of its own (plan_context.h) */
    long long first_pass;      /* and its pass_peak without them, for the pairing with the last operator */
    double time;               /* its step time (0 when minimising memory) */
} choice_terms;

/* What an operator's raw choices depend on: its shape (op, compared by
 * osdp_op_same_shape), whether it sends to the next stage and is its
 * layout's last (its forward's gathered slices), a tied head's gradients
 * in its pass, whether it may be ZDP and whether the plan recomputes it;
 * and what the call holds fixed, compared all the same: the device (at the
 * mesh's levels) and the hierarchical levels, the step geometry (b and the
 * accumulation in it), the sequence length, the pricing, and the options
 * that shape the choices. */
typedef struct choice_key {
    const osdp_op_layout *op;
    int sends, last, allows_zdp, recompute;
    long long tied;
    const osdp_device *dev;
    const osdp_cost_hierarchy *hier;
    osdp_step_geometry geo;
    int seq_len;
    osdp_cost_kind kind;
    int split_auto, split, split_max, recompute_auto, modes, grad_reduce;
} choice_key;

/* operators a and b have the same sizes, cuts and costs (different blocks of one width): the same
 * choices where the rest of choice_key agrees (osdp_ps_context_build groups them by it too) */
int osdp_op_same_shape(const osdp_op_layout *a, const osdp_op_layout *b);

typedef struct osdp_choice_memo osdp_choice_memo;

osdp_choice_memo *osdp_choice_memo_new(void);
void osdp_choice_memo_free(osdp_choice_memo *memo);
/* Kept per key, in variants: OSDP_CHOICES_RAW, the raw choices at in_flight 0; or
 * osdp_choices_kept(in_flight, minimise_memory), the choices a context of those keeps once the dominated
 * are dropped (a stage's search builds one context per value of its wrap moment: the same choices each) */
#define OSDP_CHOICES_RAW (-1)
static inline int osdp_choices_kept(int in_flight, int minimise_memory) { return 2 * in_flight + !!minimise_memory; }
/* the choices of key in that variant into out, their number; -1: not kept */
int osdp_choice_memo_find(osdp_choice_memo *memo, const choice_key *key, int variant, choice_terms *out);
/* keeps n choices of key in that variant; nothing when out of memory (the memo only saves time) */
void osdp_choice_memo_add(osdp_choice_memo *memo, const choice_key *key, int variant, const choice_terms *c, int n);
/* how many finds answered */
long long osdp_choice_memo_hits(const osdp_choice_memo *memo);

#endif

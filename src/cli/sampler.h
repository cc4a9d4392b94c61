/* Text generation from a model's weights, on one rank.
 *
 * The sampler holds a host copy of every operator's fp32 weights on one
 * rank (the owner), gathered from a runtime operator by operator
 * (osdp_runtime_gather_op: whatever the plan and rank count, the same
 * values), and generates with a host-side forward over the CPU compute
 * table: osdp_op_forward per operator, one sequence, the tokens so far
 * cropped to the model's context (the last ctx tokens, positions from 0),
 * no key/value cache (each new token runs the whole cropped sequence).
 * The head runs on the last position only; its probabilities p (float,
 * softmax of the logits) give the next token:
 *   temperature 0   the argmax (greedy; the lowest id among equals)
 *   temperature X   p^(1/X), renormalised in double: the softmax of
 *                   logits / X, up to the float rounding of p (a token
 *                   whose p underflowed to 0 stays impossible)
 *   top-k K         only the K most probable tokens (ties by the lowest id)
 * and a uniform number from the project's counter-based RNG
 * (osdp_hash3(seed, stream, position)), so a seed gives the same text on
 * any rank count, plan or thread count.
 *
 *     osdp_sampler sm;
 *     osdp_sampler_init(&sm, &cfg, rank == 0);
 *     osdp_sampler_gather(&sm, &rt, MPI_COMM_WORLD);       // collective
 *     if (rank == 0) osdp_sampler_generate(&sm, prompt, n, &settings, out);
 *     osdp_sampler_wait(MPI_COMM_WORLD);                    // the others sleep meanwhile
 *     osdp_sampler_free(&sm); */
#ifndef OSDP_CLI_SAMPLER_H
#define OSDP_CLI_SAMPLER_H

#include <mpi.h>
#include <stdint.h>
#include "osdp/compute.h"
#include "osdp/layout.h"
#include "osdp/runtime.h"

typedef struct osdp_sample_settings {
    int tokens;             /* tokens to generate */
    double temperature;     /* 0: greedy */
    int top_k;              /* the K most probable tokens; 0: the whole vocabulary */
    uint64_t seed;
} osdp_sample_settings;

typedef struct osdp_sampler {
    osdp_layout layout;                     /* the whole model, activations for T = ctx */
    const osdp_compute_backend *backend;    /* the CPU table, fp32 */
    int owner;                              /* this rank holds the weights and generates */
    float **weights;                        /* owner: [n_ops] each operator's flat weights */
    float *acts[2];                         /* owner: ping-pong activation blocks of one sequence */
    double *probs;                          /* owner: (vocab) the next token's distribution */
    int *order;                             /* owner: (vocab) token ids, for top-k */
} osdp_sampler;

/* Not collective: the layout of cfg (T = ctx) and, on the owner, the
 * buffers. */
osdp_status osdp_sampler_init(osdp_sampler *sm, const osdp_model_config *cfg, int owner);
/* Collective over comm (the runtime's ranks): the runtime's current master
 * weights into the owner's copy, one operator at a time (the other ranks
 * hold one operator's buffer at most).  The runtime's model must be the
 * sampler's, whole (tensor-parallel parts are refused). */
osdp_status osdp_sampler_gather(osdp_sampler *sm, osdp_runtime *rt, MPI_Comm comm);
/* Owner only: out[0 .. settings->tokens) follow prompt[0 .. n_prompt)
 * (n_prompt >= 1, every id < vocab). */
osdp_status osdp_sampler_generate(const osdp_sampler *sm, const int *prompt, int n_prompt,
                                  const osdp_sample_settings *settings, int *out);
/* Collective: returns when every rank of comm has called it, the waiting
 * ranks sleeping rather than spinning, so that their cores serve the owner's
 * generation. */
void osdp_sampler_wait(MPI_Comm comm);
void osdp_sampler_free(osdp_sampler *sm);

#endif

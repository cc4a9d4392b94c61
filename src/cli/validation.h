/* osdp_gpt train's validation loss (--val-data, --eval-every, --eval-batches).
 *
 * The validation set is fixed: --eval-batches batches of the global batch's
 * size, sampled from the validation stream as training batches are
 * (osdp_data_batch) but with a seed of their own and steps 0 .. K-1, so it
 * depends neither on --seed, nor on the training step, nor on the rank
 * count; each batch is split over the ranks and micro-steps exactly as a
 * training batch.  Its token ids are read once, at the start.
 *
 * osdp_gpt eval (cli/eval.h) evaluates through the same code: with --batches
 * K the same set, so the same loss; without, every sequence of its data
 * once, in order (the sweep): windows of T tokens one after the other, each
 * with the token after it as its last target, in whole global batches, read
 * a chunk of batches at a time. */
#ifndef OSDP_CLI_VALIDATION_H
#define OSDP_CLI_VALIDATION_H

#include "osdp/data.h"
#include "osdp/runtime.h"
#include "options.h"

typedef struct osdp_validation {
    int on;                 /* there is validation data */
    osdp_dataset data;
    long every;             /* evaluate after every N-th step (0: after the last only) */
    int n_batches;
    int *tokens;            /* this rank's micro-batches: (n_batches x accum, 2, B, T); the sweep's: a chunk's */
    /* eval */
    int sweep;              /* every sequence once, in order (eval without --batches) */
    int from_val_shards;    /* the data is a directory's *_val_*.bin shards */
    long sweep_left_out;    /* the sweep: sequences after the last whole global batch */
    int sweep_chunk;        /* the sweep: global batches read and evaluated at a time */
} osdp_validation;

/* The validation data of the job: --val-data, else the *_val_*.bin shards of
 * a --data directory (rank 0 says so), else none; refuses --eval-every and
 * --eval-batches without any.  eval: the same, else --data itself (refused
 * without either).  Not collective: pass the status to osdp_check_all. */
osdp_status osdp_validation_open(osdp_validation *v, const osdp_job *job, const osdp_dataset *train_data, int vocab,
                                 int seq_len, int rank);
/* reads this rank's share of the validation set for the runtime's batch
 * geometry (the sweep: counts its batches; refuses data shorter than one) */
osdp_status osdp_validation_prepare(osdp_validation *v, const osdp_runtime *rt);
/* is a validation loss due after optimizer step `step` (1-based) of `last`? */
int osdp_validation_due(const osdp_validation *v, long step, long last);
/* collective: the validation loss of the current weights */
osdp_status osdp_validation_run(osdp_validation *v, osdp_runtime *rt, double *loss);
void osdp_validation_close(osdp_validation *v);

#endif

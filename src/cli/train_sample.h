/* osdp_gpt train --sample-every N: after every N-th optimizer step and after
 * the last, rank 0 prints --sample-tokens tokens generated from the
 * current weights (src/cli/sampler.h: gathered from the training runtime
 * operator by operator, generated on the host), from the start of a
 * document (a newline for bytes, the --tokenizer's end-of-text token),
 * temperature 1, the whole vocabulary, seeded by --seed and the step.
 * Sampling reads the weights and changes nothing of the run: its
 * collectives come after the step's traffic is counted, its buffers are
 * host memory outside the accounting allocator, and the losses are the
 * same bits with or without it (tests/system/test_sample.sh). */
#ifndef OSDP_CLI_TRAIN_SAMPLE_H
#define OSDP_CLI_TRAIN_SAMPLE_H

#include "osdp/runtime.h"
#include "options.h"
#include "sample_text.h"
#include "sampler.h"

typedef struct osdp_train_sample {
    int on;                 /* --sample-every given */
    long every;
    int tokens;             /* --sample-tokens */
    unsigned long long seed;
    osdp_sample_text text;
    int start;              /* the token a sample starts from */
    osdp_sampler sampler;
} osdp_train_sample;

/* The job's sampling options (refuses --sample-tokens without
 * --sample-every, a bad --tokenizer).  Not collective: pass the status to
 * osdp_check_all. */
osdp_status osdp_train_sample_open(osdp_train_sample *ts, const osdp_job *job, const osdp_model_config *cfg, int rank);
/* is a sample due after optimizer step `step` (1-based) of `last`? */
int osdp_train_sample_due(const osdp_train_sample *ts, long step, long last);
/* Collective: gathers the runtime's weights, rank 0 generates and prints
 * "sample after step N:" and the text; the same status on every rank. */
osdp_status osdp_train_sample_run(osdp_train_sample *ts, osdp_runtime *rt);
void osdp_train_sample_close(osdp_train_sample *ts);

#endif

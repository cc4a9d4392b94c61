/* Samples during training (see train_sample.h). */
#include "config.h"
#include "train_sample.h"
#include "osdp/agree.h"
#include "osdp/init.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

/* the RNG stream of training samples (osdp_hash3's second word) */
#define TRAIN_SAMPLE_STREAM 0x747261696eULL   /* "train" */

osdp_status osdp_train_sample_open(osdp_train_sample *ts, const osdp_job *job, const osdp_model_config *cfg, int rank)
{
    memset(ts, 0, sizeof *ts);
    if (!job->sample_every) {
        if (osdp_option_given(job, "sample-tokens"))
            return osdp_error_set(OSDP_ERR_INPUT, "--sample-tokens needs --sample-every N (when to sample)");
        if (job->tokenizer)   /* it decodes the samples alone: without them it would go unread, a wrong file unseen */
            return osdp_error_set(OSDP_ERR_INPUT, "--tokenizer %s needs --sample-every N (train decodes only its samples)",
                                  job->tokenizer);
        return OSDP_OK;
    }
    ts->on = 1;
    ts->every = (long)job->sample_every;
    ts->tokens = (int)job->sample_tokens;
    ts->seed = (unsigned long long)job->seed;
    osdp_status s = osdp_sample_text_open(&ts->text, job, cfg->vocab);
    int *start = NULL, n = 0;
    if (s == OSDP_OK) s = osdp_sample_text_prompt(&ts->text, job, &start, &n);   /* train has no prompt: the document start */
    if (s == OSDP_OK) ts->start = start[0];
    free(start);
    if (s == OSDP_OK) s = osdp_sampler_init(&ts->sampler, cfg, rank == 0);
    return s;
}

int osdp_train_sample_due(const osdp_train_sample *ts, long step, long last)
{
    return ts->on && (step % ts->every == 0 || step == last);
}

osdp_status osdp_train_sample_run(osdp_train_sample *ts, osdp_runtime *rt)
{
    osdp_status s = osdp_sampler_gather(&ts->sampler, rt, MPI_COMM_WORLD);
    if (s == OSDP_OK && ts->sampler.owner) {
        osdp_sample_settings settings = {.tokens = ts->tokens, .temperature = 1.0,
                                         .seed = osdp_hash3(ts->seed, TRAIN_SAMPLE_STREAM, (uint64_t)rt->step)};
        int *out = malloc((size_t)ts->tokens * sizeof *out);
        s = out ? osdp_sampler_generate(&ts->sampler, &ts->start, 1, &settings, out)
                : osdp_error_set(OSDP_ERR_OOM, "--sample-every: out of host memory");
        if (s == OSDP_OK) {
            printf("sample after step %ld%s:\n", rt->step, ts->text.decodes ? "" : " (token ids: no --tokenizer)");
            osdp_sample_text_write(&ts->text, out, ts->tokens, stdout);
            printf("\n");
            fflush(stdout);
        }
        free(out);
    }
    osdp_sampler_wait(MPI_COMM_WORLD);
    return osdp_status_agree(s, MPI_COMM_WORLD);
}

void osdp_train_sample_close(osdp_train_sample *ts)
{
    if (ts->on) {
        osdp_sampler_free(&ts->sampler);
        osdp_sample_text_close(&ts->text);
    }
    memset(ts, 0, sizeof *ts);
}

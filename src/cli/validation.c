/* osdp_gpt train's validation loss (see validation.h). */
#include "validation.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the validation set's own sampling seed: the same sequences whatever --seed */
#define VALIDATION_SEED 0x76616c69646174ULL

/* the data error, said to be about `what` */
static osdp_status prefixed(osdp_status s, const char *what)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", osdp_error_message());   /* not the buffer osdp_error_set writes */
    return osdp_error_set(s, "%s: %s", what, msg);
}

osdp_status osdp_validation_open(osdp_validation *v, const osdp_job *job, const osdp_dataset *train_data, int vocab,
                                 int seq_len, int rank)
{
    memset(v, 0, sizeof *v);
    v->every = (long)job->eval_every;
    v->n_batches = (int)job->eval_batches;
    osdp_status s = OSDP_OK;
    if (job->val_data) {
        s = osdp_data_open(&v->data, job->val_data, vocab, seq_len);
        if (s != OSDP_OK) return prefixed(s, "--val-data");
        v->on = 1;
    } else if (train_data->n_val_shards > 0) {
        s = osdp_data_open_val(&v->data, job->data, vocab, seq_len);
        if (s != OSDP_OK) return prefixed(s, "--data's validation shards");
        v->on = 1;
        if (rank == 0 && !job->quiet) {
            printf("validation: the %d *_val_*.bin shard%s of %s (%zu tokens, never trained on; --val-data chooses others)\n",
                   train_data->n_val_shards, train_data->n_val_shards == 1 ? "" : "s", job->data, v->data.n_tokens);
            fflush(stdout);
        }
    } else if (osdp_option_given(job, "eval-every") || osdp_option_given(job, "eval-batches")) {
        return osdp_error_set(OSDP_ERR_INPUT, "--%s: there is no validation data (give --val-data FILE|DIR, or a --data "
                              "directory holding *_val_*.bin shards)",
                              osdp_option_given(job, "eval-every") ? "eval-every" : "eval-batches");
    }
    return OSDP_OK;
}

osdp_status osdp_validation_prepare(osdp_validation *v, const osdp_runtime *rt)
{
    if (!v->on) return OSDP_OK;
    const int accum = rt->opt.accum_steps;
    const size_t bt = (size_t)rt->B * (size_t)rt->T;
    v->tokens = malloc(2 * bt * (size_t)accum * (size_t)v->n_batches * sizeof(int));
    if (!v->tokens) return osdp_error_set(OSDP_ERR_OOM, "--eval-batches %d: out of host memory for the validation set",
                                          v->n_batches);
    /* batch k's global sequence j goes where training puts sequence j of a
     * step: by data-parallel rank (rt->rank of rt->N), the ranks of a
     * tensor-parallel group reading the same sequences */
    for (int k = 0; k < v->n_batches; k++)
        for (int micro = 0; micro < accum; micro++) {
            int *inputs = v->tokens + 2 * bt * ((size_t)k * (size_t)accum + (size_t)micro);
            long first = ((long)micro * rt->N + rt->rank) * rt->B;
            osdp_data_batch(&v->data, VALIDATION_SEED, k, first, rt->B, rt->T, inputs, inputs + bt);
        }
    return OSDP_OK;
}

int osdp_validation_due(const osdp_validation *v, long step, long last)
{
    return v->on && (step == last || (v->every > 0 && step % v->every == 0));
}

osdp_status osdp_validation_run(osdp_validation *v, osdp_runtime *rt, double *loss)
{
    return osdp_runtime_evaluate(rt, v->tokens, v->n_batches, loss);
}

void osdp_validation_close(osdp_validation *v)
{
    free(v->tokens);
    osdp_data_close(&v->data);
    memset(v, 0, sizeof *v);
}

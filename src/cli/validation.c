/* osdp_gpt train's validation loss (see validation.h). */
#include "validation.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the validation set's own sampling seed: the same sequences whatever --seed */
#define VALIDATION_SEED 0x76616c69646174ULL
/* the sweep reads and evaluates at most this many global batches at a time, and at most this many of a
 * rank's tokens (32 MiB of inputs and targets) unless one global batch holds more */
#define SWEEP_CHUNK_BATCHES 16
#define SWEEP_CHUNK_TOKENS ((size_t)1 << 22)

/* the data error, said to be about `what` */
static osdp_status prefixed(osdp_status s, const char *what)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", osdp_error_message());   /* not the buffer osdp_error_set writes */
    return osdp_error_set(s, "%s: %s", what, msg);
}

/* eval's data: --val-data, else a --data directory's *_val_*.bin shards, else --data */
static osdp_status open_eval_data(osdp_validation *v, const osdp_job *job, int vocab, int seq_len)
{
    v->sweep = job->eval_batches == 0;
    v->on = 1;
    osdp_status s;
    if (job->val_data) {
        if ((s = osdp_data_open(&v->data, job->val_data, vocab, seq_len)) != OSDP_OK) return prefixed(s, "--val-data");
    } else if (!job->data) {
        return osdp_error_set(OSDP_ERR_INPUT, "eval: no data to evaluate: give --data FILE|DIR or --val-data FILE|DIR");
    } else if (osdp_data_val_shards(job->data) > 0) {
        if ((s = osdp_data_open_val(&v->data, job->data, vocab, seq_len)) != OSDP_OK)
            return prefixed(s, "--data's validation shards");
        v->from_val_shards = 1;
    } else if ((s = osdp_data_open(&v->data, job->data, vocab, seq_len)) != OSDP_OK) {
        return prefixed(s, "--data");
    }
    return OSDP_OK;
}

osdp_status osdp_validation_open(osdp_validation *v, const osdp_job *job, const osdp_dataset *train_data, int vocab,
                                 int seq_len, int rank)
{
    memset(v, 0, sizeof *v);
    v->every = (long)job->eval_every;
    v->n_batches = (int)job->eval_batches;
    if (job->command == OSDP_CMD_EVAL) return open_eval_data(v, job, vocab, seq_len);
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

/* the sweep: sequence j of the data starts at token j T */
static osdp_status sweep_count(osdp_validation *v, const osdp_runtime *rt)
{
    const long global = (long)rt->B * rt->N * rt->opt.geo.accum_steps;
    const long sequences = (long)((v->data.n_tokens - 1) / (size_t)rt->T);
    if (sequences / global > (1L << 30))
        return osdp_error_set(OSDP_ERR_INPUT, "%s: more than 2^30 global batches: give --batches K", v->data.path);
    v->n_batches = (int)(sequences / global);
    v->sweep_left_out = sequences - (long)v->n_batches * global;
    if (v->n_batches == 0)
        return osdp_error_set(OSDP_ERR_INPUT, "%s: %zu tokens make %ld sequences of %d tokens, fewer than one global "
                              "batch of %ld: give a smaller --global-batch or --seq-len, or --batches K (sampled)",
                              v->data.path, v->data.n_tokens, sequences, rt->T, global);
    return OSDP_OK;
}

/* this rank's micro-batches of the sweep's batches [first, first + n) into v->tokens */
static void sweep_read(osdp_validation *v, const osdp_runtime *rt, int first, int n)
{
    const int accum = rt->opt.geo.accum_steps;
    const size_t bt = (size_t)rt->B * (size_t)rt->T;
    const long global = (long)rt->B * rt->N * accum;
    for (int k = 0; k < n; k++)
        for (int micro = 0; micro < accum; micro++) {
            int *inputs = v->tokens + 2 * bt * ((size_t)k * (size_t)accum + (size_t)micro);
            long seq = (long)(first + k) * global + ((long)micro * rt->N + rt->rank) * rt->B;   /* as training's */
            for (int i = 0; i < rt->B; i++)
                osdp_data_window(&v->data, (size_t)(seq + i) * (size_t)rt->T, rt->T, inputs + (size_t)i * (size_t)rt->T,
                                 inputs + bt + (size_t)i * (size_t)rt->T);
        }
}

osdp_status osdp_validation_prepare(osdp_validation *v, const osdp_runtime *rt)
{
    if (!v->on) return OSDP_OK;
    const int accum = rt->opt.geo.accum_steps;
    const size_t bt = (size_t)rt->B * (size_t)rt->T;
    if (v->sweep) {
        osdp_status s = sweep_count(v, rt);
        if (s != OSDP_OK) return s;
        const size_t fit = SWEEP_CHUNK_TOKENS / (bt * (size_t)accum);
        v->sweep_chunk = fit < 1 ? 1 : fit < SWEEP_CHUNK_BATCHES ? (int)fit : SWEEP_CHUNK_BATCHES;
        if (v->sweep_chunk > v->n_batches) v->sweep_chunk = v->n_batches;
        v->tokens = malloc(2 * bt * (size_t)accum * (size_t)v->sweep_chunk * sizeof(int));
        return v->tokens ? OSDP_OK
                         : osdp_error_set(OSDP_ERR_OOM, "eval: out of host memory for %d batches", v->sweep_chunk);
    }
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
    if (!v->sweep) return osdp_runtime_evaluate(rt, v->tokens, v->n_batches, loss);
    /* the sweep, a chunk at a time: the mean of the chunks' means, weighed by their batches */
    double sum = 0;
    for (int first = 0; first < v->n_batches; first += v->sweep_chunk) {
        const int n = v->n_batches - first < v->sweep_chunk ? v->n_batches - first : v->sweep_chunk;
        double chunk;
        sweep_read(v, rt, first, n);
        osdp_status s = osdp_runtime_evaluate(rt, v->tokens, n, &chunk);
        if (s != OSDP_OK) return s;
        sum += chunk * n;
    }
    *loss = sum / v->n_batches;
    return OSDP_OK;
}

void osdp_validation_close(osdp_validation *v)
{
    free(v->tokens);
    osdp_data_close(&v->data);
    memset(v, 0, sizeof *v);
}

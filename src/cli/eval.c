/* osdp_gpt eval's own part: the options, the printed result, the log record
 * (see eval.h; the set-up is osdp_cmd_train's, the evaluation train's). */
#include "config.h"
#include "eval.h"
#include "log_record.h"
#include "osdp/agree.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

osdp_status osdp_eval_check_options(const osdp_job *job)
{
    if (job->ckpt && job->init_from)
        return osdp_error_set(OSDP_ERR_INPUT, "eval: --ckpt and --init-from exclude each other: give the weights once "
                              "(--ckpt FILE: with the batches of the run that saved it; --init-from WEIGHTS: with "
                              "train's defaults)");
    if (!job->ckpt && !job->init_from)
        return osdp_error_set(OSDP_ERR_INPUT, "eval: no weights to evaluate: give --ckpt FILE or --init-from WEIGHTS");
    return OSDP_OK;
}

const char *osdp_eval_weights(const osdp_job *job) { return job->ckpt ? job->ckpt : job->init_from; }

const char *osdp_eval_weights_option(const osdp_job *job) { return job->ckpt ? "--ckpt" : "--init-from"; }

/* the weights file's error, said to be about the option that named it */
static osdp_status blame_option(const osdp_job *job, osdp_status s)
{
    if (s == OSDP_OK) return s;
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", osdp_error_message());
    return osdp_error_set(s, "%s: %s", osdp_eval_weights_option(job), msg);
}

osdp_status osdp_eval_peek(const osdp_job *job, osdp_ckpt_info *info)
{
    return blame_option(job, osdp_ckpt_read_info(osdp_eval_weights(job), MPI_COMM_WORLD, info));
}

osdp_status osdp_eval_model(const osdp_job *job, osdp_model_config *cfg)
{
    return blame_option(job, osdp_ckpt_read_model(osdp_eval_weights(job), MPI_COMM_SELF, cfg));
}

/* "the 1 *_val_*.bin shard of DIR" or the file's name */
static void describe_data(const osdp_validation *v, char *buf, size_t n)
{
    if (v->from_val_shards)
        snprintf(buf, n, "the %d *_val_*.bin shard%s of %s", v->data.n_val_shards, v->data.n_val_shards == 1 ? "" : "s",
                 v->data.path);
    else snprintf(buf, n, "%s", v->data.path);
}

/* 0, or -1 when the record could not be written (errno: why) */
static int write_record(FILE *log, const osdp_job *job, const osdp_validation *v, const osdp_runtime *rt,
                         const osdp_ckpt_info *loaded, const osdp_mesh *mesh, double loss)
{
    osdp_log_record rec;
    char hex[64];
    snprintf(hex, sizeof hex, "%a", loss);
    const long global = (long)rt->B * rt->N * rt->opt.geo.accum_steps;
    osdp_log_begin(&rec, log, osdp_log_format_of(job->log), "eval");
    osdp_log_text(&rec, "weights", osdp_eval_weights(job));
    if (loaded->weights_only) osdp_log_missing(&rec, "step");
    else osdp_log_count(&rec, "step", (unsigned long long)loaded->step);
    osdp_log_text(&rec, "data", v->data.path);
    osdp_log_text(&rec, "set", v->sweep ? "sweep" : "validation");
    osdp_log_count(&rec, "batches", (unsigned long long)v->n_batches);
    osdp_log_count(&rec, "global_batch", (unsigned long long)global);
    osdp_log_count(&rec, "seq_len", (unsigned long long)rt->T);
    osdp_log_count(&rec, "tokens", (unsigned long long)v->n_batches * (unsigned long long)(global * rt->T));
    osdp_log_count(&rec, "ranks", (unsigned long long)mesh->world_size);
    osdp_log_count(&rec, "tp", (unsigned long long)mesh->tp);
    osdp_log_count(&rec, "dp", (unsigned long long)mesh->dp);
    osdp_log_count(&rec, "pp", (unsigned long long)mesh->pp);
    osdp_log_number(&rec, "loss", "%.9g", loss);
    osdp_log_text(&rec, "loss_hex", hex);
    osdp_log_number(&rec, "perplexity", "%.9g", exp(loss));
    return osdp_log_end(&rec);
}

osdp_status osdp_eval_run(osdp_validation *v, osdp_runtime *rt, const osdp_job *job, const osdp_ckpt_info *loaded,
                          const osdp_mesh *mesh)
{
    const int rank = mesh->world_rank;
    const long global = (long)rt->B * rt->N * rt->opt.geo.accum_steps;
    char data[OSDP_DATA_PATH_MAX + 64], mesh_text[96];
    describe_data(v, data, sizeof data);
    osdp_mesh_describe(mesh, mesh_text, sizeof mesh_text);
    FILE *log = NULL;
    osdp_status s = OSDP_OK;
    if (rank == 0 && job->log && !(log = fopen(job->log, "w")))   /* before the work: a bad --log costs nothing */
        s = osdp_error_set(OSDP_ERR_IO, "--log: cannot write %s: %s", job->log, strerror(errno));
    if ((s = osdp_status_agree(s, MPI_COMM_WORLD)) != OSDP_OK) return s;
    if (rank == 0 && !job->quiet) {
        char step[64] = "a weights file";
        if (!loaded->weights_only) snprintf(step, sizeof step, "step %ld of the run that saved it", loaded->step);
        printf("eval: weights of %s (%s), data %s\n", osdp_eval_weights(job), step, data);
        fflush(stdout);
    }
    double loss = 0;
    s = osdp_validation_run(v, rt, &loss);
    if (s == OSDP_OK && rank == 0) {
        char set[160] = "every sequence once";
        if (!v->sweep) snprintf(set, sizeof set, "train's validation set (--batches %d)", v->n_batches);
        else if (v->sweep_left_out)
            snprintf(set, sizeof set, "every sequence once but the last %ld (fewer than a global batch)",
                     v->sweep_left_out);
        printf("eval: loss %.6f | perplexity %.4f | %d batch%s x %ld sequences x %d tokens = %ld tokens, %s | %s\n",
               loss, exp(loss), v->n_batches, v->n_batches == 1 ? "" : "es", global, rt->T,
               (long)v->n_batches * global * rt->T, set, mesh_text);
        fflush(stdout);
        if (log && write_record(log, job, v, rt, loaded, mesh, loss) != 0)
            s = osdp_error_set(OSDP_ERR_IO, "--log: cannot write the record to %s: %s", job->log, strerror(errno));
    }
    /* the record is only known written once the file is closed (a full disk) */
    if (log && fclose(log) != 0 && s == OSDP_OK)
        s = osdp_error_set(OSDP_ERR_IO, "--log: cannot write %s: %s", job->log, strerror(errno));
    return osdp_status_agree(s, MPI_COMM_WORLD);
}

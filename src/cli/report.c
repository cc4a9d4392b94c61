/* Progress output of a training run (see osdp/report.h). */
#include "config.h"
#include "cli/report.h"
#include "osdp/link_emulation.h"
#include "util/clock.h"
#include "log_record.h"
#include "report_stages.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#define SGEMM_REF_REPS 5             /* timed runs; the best counts */
#define SGEMM_REF_MIN_SECONDS 0.02   /* each run repeats the product at least this long */
#define SGEMM_REF_MAX_FLOATS (1 << 24)  /* 64 MiB per matrix */
#define SGEMM_REF_MAX_FLOP 4e9       /* per product: a large model's reference takes a second, not a minute */

double osdp_measure_sgemm_flops(int m, int n, int k, int reps, double min_seconds)
{
    size_t na = (size_t)m * (size_t)k, nb = (size_t)k * (size_t)n, nc = (size_t)m * (size_t)n;
    float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float)), *c = malloc(nc * sizeof(float));
    if (!a || !b || !c) { free(a); free(b); free(c); return 0; }
    for (size_t i = 0; i < na; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < nb; i++) b[i] = (float)(i % 5) * 0.1f;
    memset(c, 0, nc * sizeof(float));
    /* one untimed call first: it starts OpenBLAS's threads and faults c in */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        long calls = 0;
        double t0 = osdp_now_seconds(), elapsed;
        do {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
            calls++;
            elapsed = osdp_now_seconds() - t0;
        } while (elapsed < min_seconds);
        double rate = 2.0 * m * (double)n * k * (double)calls / elapsed;
        if (rate > best) best = rate;
    }
    free(a); free(b); free(c);
    return best;
}

/* The reference the model's MFU is measured against: the sgemm rate of its
 * largest matrix product (a micro-batch's rows times the widest of the MLP's
 * 4C and the vocabulary), with every rank measuring at once so that shared
 * cores are shared as in training.  The mean over ranks is the rate per rank.
 * A product too big for the limits above is halved, its larger side first:
 * at that size sgemm runs at its full rate anyway. */
static double measured_peak_flops(osdp_report *r)
{
    const osdp_model_config *cfg = &r->rt->layout->cfg;
    long rows = (long)r->rt->B * r->rt->layout->T;
    long width = cfg->n_embd, cols = 4 * cfg->n_embd > cfg->vocab ? 4 * cfg->n_embd : cfg->vocab;
    while ((rows > 1 || cols > 1)
           && ((double)rows * (double)cols > SGEMM_REF_MAX_FLOATS || (double)width * (double)cols > SGEMM_REF_MAX_FLOATS
               || (double)rows * (double)width > SGEMM_REF_MAX_FLOATS
               || 2.0 * (double)rows * (double)cols * (double)width > SGEMM_REF_MAX_FLOP)) {
        if (rows >= cols) rows = (rows + 1) / 2;
        else cols = (cols + 1) / 2;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double mine = osdp_measure_sgemm_flops((int)rows, (int)cols, (int)width, SGEMM_REF_REPS, SGEMM_REF_MIN_SECONDS);
    double sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    snprintf(r->peak_source, sizeof r->peak_source, "measured OpenBLAS sgemm %ldx%ldx%ld", rows, cols, width);
    return sum / r->world->size;
}

/* rank 0: ends a --log record; a record that could not be written (a full
 * disk) stops the log, and the run unless --on-write-error continue (the
 * step's agreement then stops every rank with this message) */
static void log_end(osdp_report *r, osdp_log_record *rec)
{
    if (osdp_log_end(rec) == 0) return;
    char why[sizeof r->log_message];
    snprintf(why, sizeof why, "--log %s: cannot write it: %s; the records from step %ld on are lost", r->log_path,
             errno ? strerror(errno) : "write error", r->steps_done);
    fclose(r->log);
    r->log = NULL;
    if (r->continue_on_write_error) {
        fprintf(stderr, "osdp_gpt: warning: %s; training goes on without the log (--on-write-error continue)\n", why);
        fflush(stderr);
        return;
    }
    r->log_status = OSDP_ERR_IO;
    snprintf(r->log_message, sizeof r->log_message, "%s", why);
}

osdp_status osdp_report_log_status(const osdp_report *r)
{
    return r->log_status == OSDP_OK ? OSDP_OK : osdp_error_set(r->log_status, "%s", r->log_message);
}

void osdp_report_open(osdp_report *r, const osdp_runtime *rt, const osdp_world *world, const osdp_mesh *mesh,
                      const osdp_layout *whole_model, const osdp_memory_prediction *predicted, double peak_flops,
                      const char *log_path, int quiet, long log_every)
{
    memset(r, 0, sizeof *r);
    r->rt = rt;
    r->world = world;
    r->mesh = mesh;
    r->predicted = *predicted;
    r->quiet = quiet;
    r->log_every = log_every > 0 ? log_every : 1;
    r->flops_per_token = osdp_layout_flops_per_token(whole_model);
    r->model_params = whole_model->total_params;
    if (peak_flops > 0) {
        r->peak_flops_per_rank = peak_flops;
        r->peak_given = 1;
        snprintf(r->peak_source, sizeof r->peak_source, "--peak-flops");
    } else {
        r->peak_flops_per_rank = measured_peak_flops(r);
    }
    if (log_path && world->rank == 0) {
        r->log_format = osdp_log_format_of(log_path);
        r->log = fopen(log_path, "w");
        r->log_path = log_path;
        if (!r->log) r->status = osdp_error_set(OSDP_ERR_IO, "--log: cannot write the log file %s: %s", log_path,
                                                strerror(errno));
    }
}

/* The model FLOP/s of `tokens_per_s` over the job's peak, or NAN when the
 * reference is unknown or below what was done (an MFU above 100% says the
 * reference is wrong, not that the run beat the machine). */
static double model_flops_utilization(const osdp_report *r, double tokens_per_s)
{
    double mfu = tokens_per_s * r->flops_per_token / (r->peak_flops_per_rank * r->world->size);
    return isfinite(mfu) && mfu >= 0 && mfu <= 1.0 ? mfu : NAN;
}

static const char *format_mfu(double mfu, char *buf, size_t size)
{
    if (isnan(mfu)) snprintf(buf, size, "MFU n/a (reference unreliable)");
    else snprintf(buf, size, "MFU %5.1f%%", 100.0 * mfu);
    return buf;
}

static void log_mfu(osdp_log_record *rec, double mfu)
{
    if (isnan(mfu)) osdp_log_missing(rec, "mfu");
    else osdp_log_number(rec, "mfu", "%.4f", mfu);
}

void osdp_report_header(osdp_report *r, const osdp_model_config *cfg, const osdp_dataset *data,
                        const osdp_plan *plan, long steps, int global_batch)
{
    r->steps_total = steps;
    const osdp_runtime *rt = r->rt;
    const int pipelined = r->mesh->pp > 1;
    osdp_stage_peaks stages;
    char bounds[OSDP_STAGE_SPLIT_CHARS] = "";
    if (pipelined) {   /* collective: the stages' predictions, for the bottleneck */
        osdp_stage_peaks_gather(rt, r->mesh, &r->predicted, &stages);
        osdp_stage_split_format(rt->opt.geo.stage_bounds, r->mesh->pp * osdp_pipe_chunks_per_stage(rt->opt.geo.virtual_stages),
                                bounds, sizeof bounds);
    }
    if (r->log) {
        osdp_log_record rec;
        osdp_log_begin(&rec, r->log, (osdp_log_format)r->log_format, "config");
        osdp_log_text(&rec, "model", cfg->name);
        osdp_log_count(&rec, "ranks", (unsigned long long)r->world->size);
        osdp_log_count(&rec, "tp", (unsigned long long)r->mesh->tp);
        osdp_log_count(&rec, "dp", (unsigned long long)r->mesh->dp);
        osdp_log_count(&rec, "pp", (unsigned long long)r->mesh->pp);
        if (pipelined) {
            osdp_log_text(&rec, "schedule", osdp_pipe_schedule_name(rt->opt.geo.pipe_schedule));
            osdp_log_text(&rec, "stages", bounds);
            osdp_log_count(&rec, "virtual_stages", (unsigned long long)osdp_pipe_chunks_per_stage(rt->opt.geo.virtual_stages));
            osdp_log_number(&rec, "pred_bubble", "%.6g",
                            osdp_pipe_bubble_chunks(r->mesh->pp, osdp_pipe_chunks_per_stage(rt->opt.geo.virtual_stages),
                                                    rt->opt.geo.accum_steps));
            osdp_log_count(&rec, "pred_bottleneck_stage", (unsigned long long)osdp_stage_peaks_bottleneck(&stages, 1));
        }
        osdp_log_count(&rec, "threads", (unsigned long long)r->world->threads);
        osdp_log_count(&rec, "micro_batch", (unsigned long long)r->rt->B);
        osdp_log_count(&rec, "accum", (unsigned long long)r->rt->opt.geo.accum_steps);
        osdp_log_count(&rec, "global_batch", (unsigned long long)global_batch);
        osdp_log_count(&rec, "T", (unsigned long long)r->rt->layout->T);
        osdp_log_count(&rec, "params", r->model_params);
        if (r->mesh->tp > 1) osdp_log_count(&rec, "params_per_rank", r->rt->layout->total_params);
        osdp_log_number(&rec, "flops_per_token", "%.0f", r->flops_per_token);
        osdp_log_number(&rec, "peak_flops_per_rank", "%.6g", r->peak_flops_per_rank);
        osdp_log_text(&rec, "peak_source", r->peak_given ? "given" : "sgemm");
        osdp_log_count(&rec, "prefetch", (unsigned long long)r->rt->opt.geo.prefetch);
        if (r->rt->opt.geo.residual_dtype == OSDP_BFLOAT16) osdp_log_text(&rec, "residual", "bf16");   /* fp32: as ever */
        if (rt->layout->cfg.act_bf16) osdp_log_text(&rec, "activations", "bf16");   /* fp32: as ever */
        /* the kernels that ran (--attention, --head; naive where the backend lacks the lean ones) */
        osdp_log_text(&rec, "attention", rt->layout->cfg.attention_naive ? "naive" : "tiled");
        osdp_log_text(&rec, "head", rt->layout->cfg.head_naive ? "naive" : "fused");
        osdp_log_number(&rec, "pred_step_s", "%.6g", r->predicted_step_s);
        const osdp_link_emulation *emulated = osdp_comm_emulation();
        if (emulated) {   /* the step times depend on it */
            osdp_log_count(&rec, "emulated_nodes", (unsigned long long)emulated->n_nodes);
            osdp_log_count(&rec, "emulated_ranks_per_node", (unsigned long long)emulated->ranks_per_node);
            if (emulated->has_link) {
                osdp_log_number(&rec, "emulated_link_bytes_per_s", "%.6g", 1 / emulated->beta);
                osdp_log_number(&rec, "emulated_link_latency_s", "%.6g", emulated->alpha);
            }
        }
        log_end(r, &rec);
    }
    if (r->world->rank != 0 || r->quiet) return;
    const osdp_layout *L = rt->layout;
    char b1[32];
    int zdp = 0, split = 0, recompute = 0;
    for (int i = 0; i < plan->n_ops; i++) {
        zdp += plan->zdp_slices[i] == plan->slices[i] && plan->slices[i] > 0 && plan->zdp_slices[i] > 0;
        split += plan->slices[i] > 1 && plan->zdp_slices[i] > 0 && plan->zdp_slices[i] < plan->slices[i];
        recompute += plan->recompute[i] != 0;
    }
    printf("osdp %s | model %s: %d layers, %d heads, width %d, vocab %d, T %d | %.2fM parameters in %d operators\n",
           PACKAGE_VERSION, cfg->name, cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->vocab, L->T,
           (double)r->model_params / 1e6, L->n_ops);
    if (r->mesh->tp > 1) {
        char mesh[96];
        printf("mesh %s: each rank holds its tensor-parallel parts, %.2fM parameters (vocabulary %d padded to %d)\n",
               osdp_mesh_describe(r->mesh, mesh, sizeof mesh), (double)L->total_params / 1e6, cfg->vocab,
               L->vocab_padded);
    }
    if (pipelined) {
        char peaks[512];
        const int M = rt->opt.geo.accum_steps, V = osdp_pipe_chunks_per_stage(rt->opt.geo.virtual_stages);
        char chunks[48] = "";
        if (V > 1) snprintf(chunks, sizeof chunks, " x %d chunks (chunk c on stage c mod %d)", V, r->mesh->pp);
        printf("pipeline: %d stages%s, operators %s | %s over %d micro-batches (in flight on stage 0: %d, bubble %.1f%%) | "
               "predicted peak per stage %s: stage %d is the memory bottleneck\n",
               r->mesh->pp, chunks, bounds, osdp_pipe_schedule_name(rt->opt.geo.pipe_schedule), M,
               osdp_pipe_in_flight_chunks(rt->opt.geo.pipe_schedule, r->mesh->pp, V, 0, M),
               100.0 * osdp_pipe_bubble_chunks(r->mesh->pp, V, M),
               osdp_stage_peaks_format(&stages, 1, peaks, sizeof peaks), osdp_stage_peaks_bottleneck(&stages, 1));
    }
    printf("data %s: %zu tokens | %d ranks x %d threads, backend %s (%s weights%s%s) | batch %d per rank x %d micro-steps = %d sequences/step\n",
           data->path, data->n_tokens, r->world->size, r->world->threads, rt->backend->name,
           osdp_dtype_name(rt->weight_dtype), rt->opt.geo.residual_dtype == OSDP_BFLOAT16 ? ", bf16 residual stream" : "",
           rt->layout->cfg.act_bf16 ? ", bf16 activations" : "", rt->B, rt->opt.geo.accum_steps, global_batch);
    printf("plan: %d DP + %d ZDP + %d partly ZDP (k of g slices) operators, %d recompute, prefetch %s | predicted peak per rank %s",
           plan->n_ops - zdp - split, zdp, split, recompute, rt->opt.geo.prefetch ? "on" : "off",
           osdp_format_bytes((double)r->predicted.peak_total, b1, sizeof b1));
    if (rt->opt.mem_limit) printf(" (limit %s)", osdp_format_bytes((double)rt->opt.mem_limit, b1, sizeof b1));
    printf(" | MFU against %s: %.1f GFLOP/s per rank\n", r->peak_source, r->peak_flops_per_rank / 1e9);
    printf("training %ld steps\n", steps);
    fflush(stdout);
}

static int compare_doubles(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The median of the recent step times: one slow step (a checkpoint, a
 * neighbour's burst on shared cores) does not swing the ETA. */
static double median_step_seconds(const osdp_report *r)
{
    double sorted[OSDP_REPORT_ETA_WINDOW];
    int n = r->n_recent < OSDP_REPORT_ETA_WINDOW ? r->n_recent : OSDP_REPORT_ETA_WINDOW;
    memcpy(sorted, r->recent_seconds, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, compare_doubles);
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

/* "ETA 42s", "ETA 3m07s", "ETA 2h15m" */
static const char *format_eta(double seconds, char *buf, size_t size)
{
    long s = (long)(seconds + 0.5);
    if (s < 60) snprintf(buf, size, "ETA %lds", s);
    else if (s < 3600) snprintf(buf, size, "ETA %ldm%02lds", s / 60, s % 60);
    else snprintf(buf, size, "ETA %ldh%02ldm", s / 3600, s / 60 % 60);
    return buf;
}

/* the first step of a run, every log_every-th step and the last */
static int progress_line_due(const osdp_report *r, long step)
{
    return r->steps_done == 1 || step % r->log_every == 0 || step >= r->steps_total;
}

static void print_progress(const osdp_report *r, const osdp_step_stats *st, double tok_s, double mfu,
                           const osdp_stage_peaks *stages)
{
    const osdp_memory *m = &r->rt->mem;
    const osdp_traffic *t = &st->traffic;
    char pk[32], c[OSDP_MEMORY_N_CATEGORIES][32], ag[32], rs[32], ar[32], mfu_text[48], eta[32];
    long remaining = r->steps_total > st->step ? r->steps_total - st->step : 0;
    printf("step %5ld/%ld | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tokens/s | %s | %s | "
           "peak/rank %s [state %s, weights %s, grads %s, act %s, ws %s] | moved AG %s RS %s AR %s",
           st->step, r->steps_total, st->loss, (double)st->lr, st->grad_norm, st->seconds * 1e3, tok_s,
           format_mfu(mfu, mfu_text, sizeof mfu_text),
           format_eta((double)remaining * median_step_seconds(r), eta, sizeof eta),
           osdp_format_bytes((double)m->peak_total, pk, sizeof pk),
           osdp_format_bytes((double)m->peak[0], c[0], 32), osdp_format_bytes((double)m->peak[1], c[1], 32),
           osdp_format_bytes((double)m->peak[2], c[2], 32), osdp_format_bytes((double)m->peak[3], c[3], 32),
           osdp_format_bytes((double)m->peak[4], c[4], 32),
           osdp_format_bytes((double)t->logical[OSDP_COLL_ALL_GATHER], ag, sizeof ag),
           osdp_format_bytes((double)t->logical[OSDP_COLL_REDUCE_SCATTER], rs, sizeof rs),
           osdp_format_bytes((double)t->logical[OSDP_COLL_ALL_REDUCE], ar, sizeof ar));
    if (r->rt->tp_size > 1) {   /* the tensor-parallel group's: staging and collectives */
        char tar[32], tag[32];
        printf(" | tp_comm %s, moved TP-AR %s TP-AG %s",
               osdp_format_bytes((double)m->peak[OSDP_MEMORY_TP_COMM], c[OSDP_MEMORY_TP_COMM], 32),
               osdp_format_bytes((double)t->logical[OSDP_COLL_TP_ALL_REDUCE], tar, sizeof tar),
               osdp_format_bytes((double)t->logical[OSDP_COLL_TP_ALL_GATHER], tag, sizeof tag));
    }
    if (r->rt->node_comm) {   /* the data group's nodes: in-node and cross-node collectives (osdp/runtime.h) */
        char nag[32], nrs[32], crs[32], cag[32];
        printf(" | in-node AG %s RS %s, cross-node RS %s AG %s",
               osdp_format_bytes((double)t->logical[OSDP_COLL_NODE_ALL_GATHER], nag, sizeof nag),
               osdp_format_bytes((double)t->logical[OSDP_COLL_NODE_REDUCE_SCATTER], nrs, sizeof nrs),
               osdp_format_bytes((double)t->logical[OSDP_COLL_CROSS_REDUCE_SCATTER], crs, sizeof crs),
               osdp_format_bytes((double)t->logical[OSDP_COLL_CROSS_ALL_GATHER], cag, sizeof cag));
    }
    if (stages) {   /* the pipeline's messages, and the stage whose memory bounds the job */
        char p2p[32], worst[32];
        const int s = osdp_stage_peaks_bottleneck(stages, 0);
        printf(" | moved P2P %s | bottleneck stage %d (%s)",
               osdp_format_bytes((double)t->logical[OSDP_COLL_P2P], p2p, sizeof p2p), s,
               osdp_format_bytes((double)stages->highest[s][OSDP_MEMORY_N_CATEGORIES], worst, sizeof worst));
    }
    if (!isnan(st->val_loss)) printf(" | val_loss %.4f", st->val_loss);
    printf("%s%s\n", r->world->emulated ? " | " : "", r->world->emulation);   /* the times depend on it */
    fflush(stdout);
}

static void log_step(osdp_report *r, const osdp_step_stats *st, double tok_s, double mfu,
                     const osdp_stage_peaks *stages)
{
    const osdp_memory *m = &r->rt->mem;
    const osdp_traffic *t = &st->traffic;
    char loss_hex[48];
    snprintf(loss_hex, sizeof loss_hex, "%a", st->loss);
    osdp_log_record rec;
    osdp_log_begin(&rec, r->log, (osdp_log_format)r->log_format, "step");
    osdp_log_count(&rec, "step", (unsigned long long)st->step);
    osdp_log_number(&rec, "loss", "%.9g", st->loss);
    osdp_log_text(&rec, "loss_hex", loss_hex);
    osdp_log_number(&rec, "norm", "%.9g", st->grad_norm);
    osdp_log_number(&rec, "lr", "%.9g", (double)st->lr);
    osdp_log_number(&rec, "ms", "%.3f", st->seconds * 1e3);
    osdp_log_count(&rec, "tokens", (unsigned long long)st->tokens);
    osdp_log_number(&rec, "tokens_per_s", "%.1f", tok_s);
    log_mfu(&rec, mfu);
    for (int k = 0; k < OSDP_COLL_N_TYPES; k++) {
        static const char *coll[OSDP_COLL_N_TYPES] = {"ag", "rs", "ar", "bc", "tp_ar", "tp_ag", "p2p",
                                                               "node_ag", "node_rs", "cross_rs", "cross_ag"};
        char key[32];
        snprintf(key, sizeof key, "%s_bytes", coll[k]);
        osdp_log_count(&rec, key, t->logical[k]);
        snprintf(key, sizeof key, "%s_wire", coll[k]);
        osdp_log_count(&rec, key, t->wire[k]);
        snprintf(key, sizeof key, "%s_calls", coll[k]);
        osdp_log_count(&rec, key, t->calls[k]);
    }
    for (int k = 0; k < OSDP_MEMORY_N_CATEGORIES; k++) {
        const char *category = osdp_memory_category_name((osdp_memory_category)k);
        char key[48];
        snprintf(key, sizeof key, "peak_%s", category);
        osdp_log_count(&rec, key, m->peak[k]);
        snprintf(key, sizeof key, "pred_%s", category);
        osdp_log_count(&rec, key, r->predicted.peak[k]);
    }
    if (!isnan(st->val_loss)) {
        char val_hex[48];
        snprintf(val_hex, sizeof val_hex, "%a", st->val_loss);
        osdp_log_number(&rec, "val_loss", "%.9g", st->val_loss);
        osdp_log_text(&rec, "val_loss_hex", val_hex);
    }
    osdp_log_count(&rec, "peak_total", m->peak_total);
    osdp_log_count(&rec, "pred_total", r->predicted.peak_total);
    osdp_log_number(&rec, "comm_wait_ms", "%.3f", t->wait_seconds * 1e3);
    if (stages) {
        const int s = osdp_stage_peaks_bottleneck(stages, 0);
        osdp_log_count(&rec, "bottleneck_stage", (unsigned long long)s);
        osdp_log_count(&rec, "bottleneck_peak", stages->highest[s][OSDP_MEMORY_N_CATEGORIES]);
    }
    log_end(r, &rec);
}

void osdp_report_step(osdp_report *r, const osdp_step_stats *st)
{
    if (r->steps_done == 0) r->first_loss = st->loss;
    r->last_loss = st->loss;
    r->steps_done++;
    /* the first step pays for page faults and warm-up: keep it out of the rate,
     * and out of the ETA once another step has been timed */
    if (r->steps_done > 1 || r->steps_total == 1) {
        r->seconds += st->seconds;
        r->tokens += (double)st->tokens;
    }
    if (r->steps_done == 2) r->n_recent = 0;
    r->recent_seconds[r->n_recent % OSDP_REPORT_ETA_WINDOW] = st->seconds;
    r->n_recent++;
    /* the stages' peaks once, after the first step (collective): every step
     * allocates the same, so they stay; not every step, since a plain MPI
     * collective has no time-out (src/comm) and a rank that died mid-pipeline
     * must not leave the others waiting here */
    if (r->mesh->pp > 1 && r->steps_done == 1) {
        r->stages = malloc(sizeof *r->stages);
        if (r->stages) osdp_stage_peaks_gather(r->rt, r->mesh, &r->predicted, r->stages);
    }
    if (r->world->rank != 0) return;
    double tok_s = (double)st->tokens / st->seconds;
    double mfu = model_flops_utilization(r, tok_s);
    const osdp_stage_peaks *per_stage = r->stages;
    if (!r->quiet && (progress_line_due(r, st->step) || !isnan(st->val_loss)))   /* an evaluation is always shown */
        print_progress(r, st, tok_s, mfu, per_stage);
    if (r->log) log_step(r, st, tok_s, mfu, per_stage);
}

/* Every rank's measured peaks, per category and in total: their smallest and
 * largest over the ranks (collective), for the summary record.  The
 * prediction is the same on every rank, so min = max = predicted says every
 * rank peaked where it was predicted to. */
static void peaks_over_ranks(const osdp_report *r, size_t *lowest, size_t *highest)
{
    unsigned long long mine[OSDP_MEMORY_N_CATEGORIES + 1], lo[OSDP_MEMORY_N_CATEGORIES + 1], hi[OSDP_MEMORY_N_CATEGORIES + 1];
    for (int k = 0; k < OSDP_MEMORY_N_CATEGORIES; k++) mine[k] = r->rt->mem.peak[k];
    mine[OSDP_MEMORY_N_CATEGORIES] = r->rt->mem.peak_total;
    MPI_Allreduce(mine, lo, OSDP_MEMORY_N_CATEGORIES + 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(mine, hi, OSDP_MEMORY_N_CATEGORIES + 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    for (int k = 0; k <= OSDP_MEMORY_N_CATEGORIES; k++) {
        lowest[k] = (size_t)lo[k];
        highest[k] = (size_t)hi[k];
    }
}

static void log_rank_peaks(osdp_log_record *rec, const size_t *lowest, const size_t *highest)
{
    for (int k = 0; k <= OSDP_MEMORY_N_CATEGORIES; k++) {
        const char *category = k < OSDP_MEMORY_N_CATEGORIES ? osdp_memory_category_name((osdp_memory_category)k) : "total";
        char key[48];
        snprintf(key, sizeof key, "rank_peak_min_%s", category);
        osdp_log_count(rec, key, lowest[k]);
        snprintf(key, sizeof key, "rank_peak_max_%s", category);
        osdp_log_count(rec, key, highest[k]);
    }
}

void osdp_report_summary(osdp_report *r)
{
    if (r->steps_done == 0) return;
    size_t lowest[OSDP_MEMORY_N_CATEGORIES + 1], highest[OSDP_MEMORY_N_CATEGORIES + 1];
    peaks_over_ranks(r, lowest, highest);   /* every rank takes part */
    osdp_stage_peaks stages;
    if (r->mesh->pp > 1) osdp_stage_peaks_gather(r->rt, r->mesh, &r->predicted, &stages);
    if (r->world->rank != 0) return;
    double tok_s = r->seconds > 0 ? r->tokens / r->seconds : 0;
    double mfu = model_flops_utilization(r, tok_s);
    char pk[32], pred[32], mfu_text[48];
    printf("done: %ld steps | loss %.4f -> %.4f | %.0f tokens/s | %s | peak/rank %s (predicted %s)%s%s\n",
           r->steps_done, r->first_loss, r->last_loss, tok_s, format_mfu(mfu, mfu_text, sizeof mfu_text),
           osdp_format_bytes((double)r->rt->mem.peak_total, pk, sizeof pk),
           osdp_format_bytes((double)r->predicted.peak_total, pred, sizeof pred), r->world->emulated ? " | " : "",
           r->world->emulation);
    if (r->log) {
        osdp_log_record rec;
        osdp_log_begin(&rec, r->log, (osdp_log_format)r->log_format, "summary");
        osdp_log_count(&rec, "steps", (unsigned long long)r->steps_done);
        osdp_log_number(&rec, "first_loss", "%.9g", r->first_loss);
        osdp_log_number(&rec, "last_loss", "%.9g", r->last_loss);
        osdp_log_number(&rec, "tokens_per_s", "%.1f", tok_s);
        log_mfu(&rec, mfu);
        log_rank_peaks(&rec, lowest, highest);
        if (r->mesh->pp > 1) osdp_stage_peaks_log(&stages, &rec);
        log_end(r, &rec);
    }
    fflush(stdout);
}

osdp_status osdp_report_close(osdp_report *r)
{
    free(r->stages);
    r->stages = NULL;
    if (r->log && fclose(r->log) != 0 && r->log_status == OSDP_OK && !r->continue_on_write_error) {
        r->log_status = OSDP_ERR_IO;
        snprintf(r->log_message, sizeof r->log_message, "--log %s: cannot write it: %s (its last records are lost)",
                 r->log_path, strerror(errno));
    }
    r->log = NULL;
    return osdp_report_log_status(r);
}

/* Progress output of a training run (see osdp/report.h). */
#include "config.h"
#include "osdp/report.h"
#include "osdp/clock.h"

#include <cblas.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double osdp_measure_sgemm_flops(int n, int reps)
{
    size_t sz = (size_t)n * (size_t)n;
    float *a = malloc(sz * sizeof(float)), *b = malloc(sz * sizeof(float)), *c = malloc(sz * sizeof(float));
    if (!a || !b || !c) { free(a); free(b); free(c); return 0; }
    for (size_t i = 0; i < sz; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; c[i] = 0; }
    double best = 1e30;
    /* one untimed call first: it starts OpenBLAS's threads and faults c in */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < reps; r++) {
        double t0 = osdp_now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double t = osdp_now_seconds() - t0;
        if (t < best) best = t;
    }
    free(a); free(b); free(c);
    return 2.0 * n * (double)n * n / best;
}

void osdp_report_open(osdp_report *r, const osdp_runtime *rt, const osdp_world *world,
                      const osdp_memory_prediction *predicted, double peak_flops,
                      const char *log_path, int quiet)
{
    memset(r, 0, sizeof *r);
    r->rt = rt;
    r->world = world;
    r->predicted = *predicted;
    r->quiet = quiet;
    r->flops_per_token = osdp_layout_flops_per_token(rt->layout);
    if (peak_flops > 0) {
        r->peak_flops_per_rank = peak_flops;
        r->peak_source = "--peak-flops";
    } else {
        /* every rank measures at once, so shared cores are shared as in training */
        MPI_Barrier(MPI_COMM_WORLD);
        double mine = osdp_measure_sgemm_flops(1024, 5), sum = 0;
        MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        r->peak_flops_per_rank = sum / world->size;
        r->peak_source = "measured OpenBLAS sgemm";
    }
    if (log_path && world->rank == 0) {
        r->log = fopen(log_path, "w");
        if (!r->log) r->status = osdp_error_set(OSDP_ERR_IO, "cannot write the log file %s", log_path);
    }
}

void osdp_report_header(osdp_report *r, const osdp_model_config *cfg, const osdp_dataset *data,
                        const osdp_plan *plan, long steps, int global_batch)
{
    r->steps_total = steps;
    if (r->log)
        fprintf(r->log, "config model=%s ranks=%d threads=%d micro_batch=%d accum=%d global_batch=%d T=%d params=%zu "
                "flops_per_token=%.0f peak_flops_per_rank=%.6g peak_source=%s prefetch=%d pred_step_s=%.6g\n",
                cfg->name, r->world->size, r->world->threads, r->rt->B, r->rt->opt.accum_steps, global_batch,
                r->rt->layout->T, r->rt->layout->total_params, r->flops_per_token, r->peak_flops_per_rank,
                r->peak_flops_per_rank > 0 && strcmp(r->peak_source, "--peak-flops") == 0 ? "given" : "sgemm",
                r->rt->opt.prefetch, r->predicted_step_s);
    if (r->world->rank != 0 || r->quiet) return;
    const osdp_runtime *rt = r->rt;
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
           (double)L->total_params / 1e6, L->n_ops);
    printf("data %s: %zu tokens | %d ranks x %d threads, backend %s (%s weights) | batch %d per rank x %d micro-steps = %d sequences/step\n",
           data->path, data->n_tokens, r->world->size, r->world->threads, rt->backend->name,
           osdp_dtype_name(rt->weight_dtype), rt->B, rt->opt.accum_steps, global_batch);
    printf("plan: %d DP + %d ZDP + %d partly ZDP (k of g slices) operators, %d recompute, prefetch %s | predicted peak per rank %s",
           plan->n_ops - zdp - split, zdp, split, recompute, rt->opt.prefetch ? "on" : "off",
           osdp_format_bytes((double)r->predicted.peak_total, b1, sizeof b1));
    if (rt->opt.mem_limit) printf(" (limit %s)", osdp_format_bytes((double)rt->opt.mem_limit, b1, sizeof b1));
    printf(" | MFU against %s: %.1f GFLOP/s per rank\n", r->peak_source, r->peak_flops_per_rank / 1e9);
    printf("training %ld steps\n", steps);
    fflush(stdout);
}

void osdp_report_step(osdp_report *r, const osdp_step_stats *st)
{
    const osdp_runtime *rt = r->rt;
    if (r->steps_done == 0) r->first_loss = st->loss;
    r->last_loss = st->loss;
    r->steps_done++;
    /* the first step pays for page faults and warm-up: keep it out of the rate */
    if (r->steps_done > 1 || r->steps_total == 1) {
        r->seconds += st->seconds;
        r->tokens += (double)st->tokens;
    }
    if (r->world->rank != 0) return;
    double tok_s = (double)st->tokens / st->seconds;
    double mfu = tok_s * r->flops_per_token / (r->peak_flops_per_rank * r->world->size);
    const osdp_memory *m = &rt->mem;
    const osdp_traffic *t = &st->traffic;
    if (!r->quiet) {
        char pk[32], c[5][32], ag[32], rs[32], ar[32];
        printf("step %5ld/%ld | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tokens/s | MFU %5.1f%% | "
               "peak/rank %s [state %s, weights %s, grads %s, act %s, ws %s] | moved AG %s RS %s AR %s",
               st->step, r->steps_total, st->loss, (double)st->lr, st->grad_norm, st->seconds * 1e3, tok_s,
               100.0 * mfu, osdp_format_bytes((double)m->peak_total, pk, sizeof pk),
               osdp_format_bytes((double)m->peak[0], c[0], 32), osdp_format_bytes((double)m->peak[1], c[1], 32),
               osdp_format_bytes((double)m->peak[2], c[2], 32), osdp_format_bytes((double)m->peak[3], c[3], 32),
               osdp_format_bytes((double)m->peak[4], c[4], 32),
               osdp_format_bytes((double)t->logical[OSDP_COLL_ALL_GATHER], ag, sizeof ag),
               osdp_format_bytes((double)t->logical[OSDP_COLL_REDUCE_SCATTER], rs, sizeof rs),
               osdp_format_bytes((double)t->logical[OSDP_COLL_ALL_REDUCE], ar, sizeof ar));
        if (isnan(st->val_loss)) printf("\n");
        else printf(" | val_loss %.4f\n", st->val_loss);
        fflush(stdout);
    }
    if (r->log) {
        fprintf(r->log, "step=%ld loss=%.9g loss_hex=%a norm=%.9g lr=%.9g ms=%.3f tokens=%ld tokens_per_s=%.1f mfu=%.4f",
                st->step, st->loss, st->loss, st->grad_norm, (double)st->lr, st->seconds * 1e3, st->tokens, tok_s, mfu);
        for (int k = 0; k < OSDP_COLL_N_TYPES; k++) {
            static const char *key[] = {"ag", "rs", "ar", "bc"};
            fprintf(r->log, " %s_bytes=%llu %s_wire=%llu %s_calls=%llu", key[k], t->logical[k], key[k], t->wire[k],
                    key[k], t->calls[k]);
        }
        for (int k = 0; k < OSDP_MEM_N_CATEGORIES; k++)
            fprintf(r->log, " peak_%s=%zu pred_%s=%zu", osdp_mem_category_name((osdp_mem_category)k), m->peak[k],
                    osdp_mem_category_name((osdp_mem_category)k), r->predicted.peak[k]);
        if (!isnan(st->val_loss)) fprintf(r->log, " val_loss=%.9g val_loss_hex=%a", st->val_loss, st->val_loss);
        fprintf(r->log, " peak_total=%zu pred_total=%zu comm_wait_ms=%.3f\n", m->peak_total, r->predicted.peak_total,
                t->wait_seconds * 1e3);
        fflush(r->log);
    }
}

void osdp_report_summary(osdp_report *r)
{
    if (r->world->rank != 0 || r->steps_done == 0) return;
    double tok_s = r->seconds > 0 ? r->tokens / r->seconds : 0;
    double mfu = tok_s * r->flops_per_token / (r->peak_flops_per_rank * r->world->size);
    char pk[32];
    printf("done: %ld steps | loss %.4f -> %.4f | %.0f tokens/s | MFU %.1f%% | peak/rank %s (predicted %s)\n",
           r->steps_done, r->first_loss, r->last_loss, tok_s, 100.0 * mfu,
           osdp_format_bytes((double)r->rt->mem.peak_total, pk, sizeof pk),
           osdp_format_bytes((double)r->predicted.peak_total, (char[32]){0}, 32));
    if (r->log)
        fprintf(r->log, "summary steps=%ld first_loss=%.9g last_loss=%.9g tokens_per_s=%.1f mfu=%.4f\n",
                r->steps_done, r->first_loss, r->last_loss, tok_s, mfu);
    fflush(stdout);
}

void osdp_report_close(osdp_report *r)
{
    if (r->log) fclose(r->log);
    r->log = NULL;
}

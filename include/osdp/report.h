/* What a training run shows: the header, one line per step on rank 0, the
 * summary, and an optional machine-readable log (key=value per step) that
 * the tests and benchmarks read. */
#ifndef OSDP_REPORT_H
#define OSDP_REPORT_H

#include <stdio.h>
#include "osdp/app.h"
#include "osdp/data.h"
#include "osdp/runtime.h"

typedef struct osdp_report {
    osdp_status status;
    const osdp_runtime *rt;
    const osdp_world *world;
    osdp_memory_prediction predicted;
    double predicted_step_s;      /* the cost model's step time for the plan (0: unknown) */
    double peak_flops_per_rank;   /* for MFU */
    const char *peak_source;      /* "measured sgemm" or "--peak-flops" */
    double flops_per_token;
    FILE *log;
    int quiet;
    long steps_total;
    double first_loss, last_loss, seconds, tokens;
    long steps_done;
} osdp_report;

/* Measures the sgemm FLOP/s of one rank's threads (all ranks at once) unless
 * peak_flops > 0. */
void osdp_report_open(osdp_report *r, const osdp_runtime *rt, const osdp_world *world,
                      const osdp_memory_prediction *predicted, double peak_flops,
                      const char *log_path, int quiet);
void osdp_report_header(osdp_report *r, const osdp_model_config *cfg, const osdp_dataset *data,
                        const osdp_plan *plan, long steps, int global_batch);
void osdp_report_step(osdp_report *r, const osdp_step_stats *st);
void osdp_report_summary(osdp_report *r);
void osdp_report_close(osdp_report *r);
/* sgemm FLOP/s on square matrices of size n, best of reps */
double osdp_measure_sgemm_flops(int n, int reps);

#endif

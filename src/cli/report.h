/* What a training run shows: the header, a progress line on rank 0 (every
 * --log-every steps, with an ETA), the summary, and an optional
 * machine-readable log of every step (--log: key=value lines, or JSON Lines
 * for a .jsonl name; see src/cli/log_record.h) that tests and plots read. */
#ifndef OSDP_REPORT_H
#define OSDP_REPORT_H

#include <stdio.h>
#include "cli/app.h"
#include "osdp/data.h"
#include "osdp/mesh.h"
#include "osdp/runtime.h"

#define OSDP_REPORT_ETA_WINDOW 16     /* recent step times the ETA takes the median of */

typedef struct osdp_report {
    osdp_status status;
    const osdp_runtime *rt;
    const osdp_world *world;
    const osdp_mesh *mesh;
    osdp_memory_prediction predicted;
    double predicted_step_s;      /* the cost model's step time for the plan (0: unknown) */
    double peak_flops_per_rank;   /* for MFU */
    int peak_given;               /* --peak-flops, not measured */
    char peak_source[96];         /* "--peak-flops" or the measured sgemm and its shape */
    double flops_per_token;       /* the whole model's (every tensor-parallel part), for MFU */
    size_t model_params;          /* the whole model's */
    FILE *log;
    const char *log_path;         /* --log (rank 0) */
    int log_format;               /* osdp_log_format */
    osdp_status log_status;       /* rank 0: a --log write failed (osdp_report_log_status) */
    char log_message[1280];       /* and why */
    int continue_on_write_error;  /* --on-write-error continue: a failed log write stops the log, not the run */
    int quiet;
    long log_every;               /* the progress line every N steps */
    long steps_total;
    double first_loss, last_loss, seconds, tokens;
    long steps_done;
    double recent_seconds[OSDP_REPORT_ETA_WINDOW];   /* a ring of step times */
    int n_recent;
    struct osdp_stage_peaks *stages;  /* a pipeline's peaks per stage after the first step
                                         (cli/report_stages.h); NULL without one */
} osdp_report;

/* Measures the sgemm FLOP/s of one rank's threads (all ranks at once) on the
 * shape of the model's largest matrix product unless peak_flops > 0.
 * whole_model: the model's tp 1 layout, whose FLOPs per token MFU counts
 * over every rank (rt->layout is the rank's tensor-parallel parts). */
void osdp_report_open(osdp_report *r, const osdp_runtime *rt, const osdp_world *world, const osdp_mesh *mesh,
                      const osdp_layout *whole_model, const osdp_memory_prediction *predicted, double peak_flops,
                      const char *log_path, int quiet, long log_every);
void osdp_report_header(osdp_report *r, const osdp_model_config *cfg, const osdp_dataset *data,
                        const osdp_plan *plan, long steps, int global_batch);
void osdp_report_step(osdp_report *r, const osdp_step_stats *st);
/* collective: every rank calls it (the summary record has every rank's peaks) */
void osdp_report_summary(osdp_report *r);
/* The --log file's state on this rank (rank 0 writes it): OSDP_ERR_IO, with
 * a message naming the file and the cause, once a record could not be
 * written (a full disk) unless r->continue_on_write_error, which warns once
 * and stops logging instead; OSDP_OK otherwise.  For the step's agreement
 * (osdp_train_ckpt_after_step). */
osdp_status osdp_report_log_status(const osdp_report *r);
/* closes the log: its status, the close checked too (not collective) */
osdp_status osdp_report_close(osdp_report *r);
/* sgemm FLOP/s of C[m x n] = A[m x k] B[k x n]: after a warm-up call, the
 * best of `reps` timed runs, each repeating the product for at least
 * min_seconds so that short products are not lost in the timer's grain. */
double osdp_measure_sgemm_flops(int m, int n, int k, int reps, double min_seconds);

#endif

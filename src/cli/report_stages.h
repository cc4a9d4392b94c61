/* A pipeline's memory per stage, for the report (src/cli/report.c): every
 * rank's measured peak and its prediction gathered by stage (issue 15: the
 * stages' peaks differ, and the log says which stage is the bottleneck). */
#ifndef OSDP_CLI_REPORT_STAGES_H
#define OSDP_CLI_REPORT_STAGES_H

#include "cli/log_record.h"
#include "osdp/mesh.h"
#include "osdp/pipeline.h"
#include "osdp/runtime.h"

/* per stage, per memory category and in total (index OSDP_MEMORY_N_CATEGORIES):
 * the smallest and the largest measured peak over the stage's ranks, and
 * the largest prediction (every rank of a stage predicts the same) */
typedef struct osdp_stage_peaks {
    int n_stages;
    unsigned long long lowest[OSDP_MAX_STAGES][OSDP_MEMORY_N_CATEGORIES + 1];
    unsigned long long highest[OSDP_MAX_STAGES][OSDP_MEMORY_N_CATEGORIES + 1];
    unsigned long long predicted[OSDP_MAX_STAGES][OSDP_MEMORY_N_CATEGORIES + 1];
} osdp_stage_peaks;

/* collective over MPI_COMM_WORLD: every rank's peaks, by its stage */
void osdp_stage_peaks_gather(const osdp_runtime *rt, const osdp_mesh *mesh, const osdp_memory_prediction *predicted,
                             osdp_stage_peaks *out);
/* the stage of the largest total, measured (or predicted: predicted = 1);
 * the earliest on a tie */
int osdp_stage_peaks_bottleneck(const osdp_stage_peaks *sp, int predicted);
/* "1.15 MiB, 790.00 KiB" into buf: the stages' totals, measured or predicted */
const char *osdp_stage_peaks_format(const osdp_stage_peaks *sp, int predicted, char *buf, size_t n);
/* stage_S_peak_min_CAT, stage_S_peak_max_CAT, stage_S_pred_CAT for every
 * stage and category (CAT: osdp_memory_category_name, or total) */
void osdp_stage_peaks_log(const osdp_stage_peaks *sp, osdp_log_record *rec);

#endif

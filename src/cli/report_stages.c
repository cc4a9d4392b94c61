/* A pipeline's memory per stage (see report_stages.h). */
#include "config.h"
#include "cli/report_stages.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define CATEGORIES (OSDP_MEMORY_N_CATEGORIES + 1)   /* and the total */

void osdp_stage_peaks_gather(const osdp_runtime *rt, const osdp_mesh *mesh, const osdp_memory_prediction *predicted,
                             osdp_stage_peaks *out)
{
    /* signed: MPICH's MPI_MIN compares MPI_UNSIGNED_LONG_LONG as signed, so
     * that a neutral ULLONG_MAX would win; bytes fit in 63 bits */
    long long lowest[OSDP_MAX_STAGES][CATEGORIES], highest[OSDP_MAX_STAGES][CATEGORIES];
    long long pred[OSDP_MAX_STAGES][CATEGORIES];
    const int P = mesh->pp, s = mesh->pp_rank, n = P * CATEGORIES;
    for (int t = 0; t < P; t++)   /* other stages' entries neutral */
        for (int k = 0; k < CATEGORIES; k++) {
            lowest[t][k] = LLONG_MAX;
            highest[t][k] = pred[t][k] = 0;
        }
    for (int k = 0; k < CATEGORIES; k++) {
        lowest[s][k] = highest[s][k] = (long long)(k < OSDP_MEMORY_N_CATEGORIES ? rt->mem.peak[k] : rt->mem.peak_total);
        pred[s][k] = (long long)(k < OSDP_MEMORY_N_CATEGORIES ? predicted->peak[k] : predicted->peak_total);
    }
    MPI_Allreduce(MPI_IN_PLACE, &lowest[0][0], n, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &highest[0][0], n, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &pred[0][0], n, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    out->n_stages = P;
    for (int t = 0; t < P; t++)
        for (int k = 0; k < CATEGORIES; k++) {
            out->lowest[t][k] = (unsigned long long)lowest[t][k];
            out->highest[t][k] = (unsigned long long)highest[t][k];
            out->predicted[t][k] = (unsigned long long)pred[t][k];
        }
}

static unsigned long long stage_total(const osdp_stage_peaks *sp, int stage, int predicted)
{
    return predicted ? sp->predicted[stage][OSDP_MEMORY_N_CATEGORIES] : sp->highest[stage][OSDP_MEMORY_N_CATEGORIES];
}

int osdp_stage_peaks_bottleneck(const osdp_stage_peaks *sp, int predicted)
{
    int worst = 0;
    for (int s = 1; s < sp->n_stages; s++)
        if (stage_total(sp, s, predicted) > stage_total(sp, worst, predicted)) worst = s;
    return worst;
}

const char *osdp_stage_peaks_format(const osdp_stage_peaks *sp, int predicted, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int s = 0; s < sp->n_stages && used < n; s++) {
        char bytes[32];
        used += (size_t)snprintf(buf + used, n - used, "%s%s", s ? ", " : "",
                                 osdp_format_bytes((double)stage_total(sp, s, predicted), bytes, sizeof bytes));
    }
    return buf;
}

void osdp_stage_peaks_log(const osdp_stage_peaks *sp, osdp_log_record *rec)
{
    for (int s = 0; s < sp->n_stages; s++)
        for (int k = 0; k < CATEGORIES; k++) {
            const char *category = k < OSDP_MEMORY_N_CATEGORIES ? osdp_memory_category_name((osdp_memory_category)k) : "total";
            char key[64];
            snprintf(key, sizeof key, "stage_%d_peak_min_%s", s, category);
            osdp_log_count(rec, key, sp->lowest[s][k]);
            snprintf(key, sizeof key, "stage_%d_peak_max_%s", s, category);
            osdp_log_count(rec, key, sp->highest[s][k]);
            snprintf(key, sizeof key, "stage_%d_pred_%s", s, category);
            osdp_log_count(rec, key, sp->predicted[s][k]);
        }
}

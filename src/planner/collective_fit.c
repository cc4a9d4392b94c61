/* A collective's cost fitted to measured times (formula in osdp/collective_fit.h). */
#include "osdp/collective_fit.h"

#include <math.h>

enum { TERM_CALL, TERM_ALPHA, TERM_BETA, N_TERMS };

/* the point's value of each term's coefficient */
static double term(int which, double steps, double step_bytes)
{
    return which == TERM_CALL ? 1.0 : which == TERM_ALPHA ? steps : step_bytes;
}

/* Weighted least squares over the terms in `free_terms` (a bit mask), the
 * others 0: solves the normal equations by Gaussian elimination with
 * partial pivoting.  0 when they are singular (two free terms that the
 * points cannot tell apart). */
static int solve_subset(const double *steps, const double *step_bytes, const double *seconds, int n, unsigned free_terms,
                        double coef[N_TERMS])
{
    int idx[N_TERMS], k = 0;
    for (int t = 0; t < N_TERMS; t++)
        if (free_terms & (1u << t)) idx[k++] = t;
    double a[N_TERMS][N_TERMS + 1] = {{0}};
    for (int i = 0; i < n; i++) {
        const double w = 1 / (seconds[i] * seconds[i]);
        for (int r = 0; r < k; r++) {
            const double xr = term(idx[r], steps[i], step_bytes[i]);
            for (int c = 0; c < k; c++) a[r][c] += w * xr * term(idx[c], steps[i], step_bytes[i]);
            a[r][k] += w * xr * seconds[i];
        }
    }
    double scale = 0;   /* singularity relative to the matrix's size */
    for (int r = 0; r < k; r++) scale = fmax(scale, fabs(a[r][r]));
    for (int col = 0; col < k; col++) {
        int pivot = col;
        for (int r = col + 1; r < k; r++)
            if (fabs(a[r][col]) > fabs(a[pivot][col])) pivot = r;
        for (int c = 0; c <= k; c++) {
            const double swap = a[col][c];
            a[col][c] = a[pivot][c];
            a[pivot][c] = swap;
        }
        if (!(fabs(a[col][col]) > 1e-12 * scale)) return 0;
        for (int r = 0; r < k; r++) {
            if (r == col) continue;
            const double f = a[r][col] / a[col][col];
            for (int c = col; c <= k; c++) a[r][c] -= f * a[col][c];
        }
    }
    for (int t = 0; t < N_TERMS; t++) coef[t] = 0;
    for (int r = 0; r < k; r++) coef[idx[r]] = a[r][k] / a[r][r];
    return 1;
}

static double predicted(const double coef[N_TERMS], double steps, double step_bytes)
{
    return coef[TERM_CALL] + coef[TERM_ALPHA] * steps + coef[TERM_BETA] * step_bytes;
}

osdp_status osdp_collective_fit(const double *steps, const double *step_bytes, const double *seconds, int n, int with_call,
                                osdp_collective_cost *out, double *r2)
{
    double sw = 0, swy = 0;
    for (int i = 0; i < n; i++) {
        if (!(seconds[i] > 0) || !isfinite(seconds[i]))
            return osdp_error_set(OSDP_ERR_INPUT, "collective fit: point %d has time %g s (must be > 0)", i, seconds[i]);
        sw += 1 / (seconds[i] * seconds[i]);
        swy += 1 / seconds[i];
    }
    /* one ring length only: call and alpha are the same constant; alpha takes it (the one-size meaning) */
    int lengths_differ = 0;
    for (int i = 1; i < n; i++) lengths_differ |= steps[i] != steps[0];
    if (!lengths_differ) with_call = 0;
    /* the times must grow with size: the bandwidth of the unconstrained fit (every latency term free) */
    const unsigned all_terms = (1u << TERM_BETA) | (1u << TERM_ALPHA) | ((unsigned)with_call << TERM_CALL);
    double unconstrained[N_TERMS];
    if ((solve_subset(steps, step_bytes, seconds, n, all_terms, unconstrained)
         || solve_subset(steps, step_bytes, seconds, n, (1u << TERM_BETA) | (1u << TERM_ALPHA), unconstrained))
        && !(unconstrained[TERM_BETA] > 0))
        return osdp_error_set(OSDP_ERR_INPUT, "collective fit: the times do not grow with size (bandwidth term %.3g)",
                              unconstrained[TERM_BETA]);
    double best[N_TERMS] = {0}, best_residual = INFINITY;
    /* beta always free; call and alpha free or held at 0: every feasible subset, the least residual wins */
    for (unsigned latency = 0; latency < 4; latency++) {
        const unsigned free_terms = (1u << TERM_BETA) | ((latency & 1u) << TERM_CALL) | ((latency >> 1) << TERM_ALPHA);
        double coef[N_TERMS];
        if ((latency & 1u) && !with_call) continue;
        if (!solve_subset(steps, step_bytes, seconds, n, free_terms, coef)) continue;
        if (coef[TERM_CALL] < 0 || coef[TERM_ALPHA] < 0 || !(coef[TERM_BETA] > 0)) continue;
        double residual = 0;
        for (int i = 0; i < n; i++) {
            const double e = (seconds[i] - predicted(coef, steps[i], step_bytes[i])) / seconds[i];
            residual += e * e;
        }
        if (residual < best_residual) {
            best_residual = residual;
            for (int t = 0; t < N_TERMS; t++) best[t] = coef[t];
        }
    }
    if (!isfinite(best_residual))
        return osdp_error_set(OSDP_ERR_INPUT, "collective fit: the times do not grow with size (no fit with beta > 0)");
    *out = (osdp_collective_cost){.call = best[TERM_CALL], .alpha = best[TERM_ALPHA], .beta = best[TERM_BETA]};
    if (r2) {
        const double mean = swy / sw;   /* weighted mean of the times */
        double total = 0;
        for (int i = 0; i < n; i++) total += (seconds[i] - mean) * (seconds[i] - mean) / (seconds[i] * seconds[i]);
        *r2 = total > 0 ? 1 - best_residual / total : 1;
    }
    return OSDP_OK;
}

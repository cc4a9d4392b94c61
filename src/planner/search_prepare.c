/* What the three plan searches share (osdp/search.h): validation of the
 * problem, the fixed-point times they all compare, and the reported sums. */
#include "planner/search.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

osdp_status osdp_search_prepare(const osdp_search_problem *p, osdp_search_result *r,
                                osdp_search_prep *prep)
{
    if (prep) memset(prep, 0, sizeof *prep);
    if (!p || !r || !prep) return osdp_error_set(OSDP_ERR_INPUT, "plan search: NULL problem, result or workspace");
    r->nodes = 0;
    r->timed_out = 0;
    r->total_time = 0.0;
    r->total_mem = 0;
    r->min_mem = 0;
    int n = p->n_items;
    if (n < 0) return osdp_error_set(OSDP_ERR_INPUT, "plan search: n_items = %d is negative", n);
    if (n > 0 && (!p->n_choices || !p->mem || !p->time || !r->choice))
        return osdp_error_set(OSDP_ERR_INPUT, "plan search: NULL n_choices, mem, time or choice array");
    if (!(p->time_limit_s >= 0.0) || isinf(p->time_limit_s))
        return osdp_error_set(OSDP_ERR_INPUT, "plan search: time_limit_s = %g must be finite and >= 0",
                              p->time_limit_s);

    long long min_mem = 0, max_mem = 0;
    double t_small = 0.0; /* time of the smallest-memory plan (ties: faster choice) */
    long long total_choices = 0;
    for (int i = 0; i < n; i++) {
        int k = p->n_choices[i];
        if (k < 1) return osdp_error_set(OSDP_ERR_INPUT, "plan search: item %d has %d choices (need >= 1)", i, k);
        if (!p->mem[i] || !p->time[i])
            return osdp_error_set(OSDP_ERR_INPUT, "plan search: item %d has NULL mem or time", i);
        long long lo = LLONG_MAX, hi = 0;
        double tlo = 0.0;
        for (int c = 0; c < k; c++) {
            long long m = p->mem[i][c];
            double t = p->time[i][c];
            if (m < 0)
                return osdp_error_set(OSDP_ERR_INPUT, "plan search: item %d choice %d has negative memory %lld",
                                      i, c, m);
            if (!(t >= 0.0) || isinf(t))
                return osdp_error_set(OSDP_ERR_INPUT, "plan search: item %d choice %d has time %g (need finite, >= 0)",
                                      i, c, t);
            if (m < lo || (m == lo && t < tlo)) {
                lo = m;
                tlo = t;
            }
            if (m > hi) hi = m;
        }
        /* all partial sums stay below LLONG_MAX / 4, so bounds never overflow */
        if (hi > LLONG_MAX / 4 - max_mem)
            return osdp_error_set(OSDP_ERR_INPUT, "plan search: memory values too large (sum overflows)");
        max_mem += hi;
        min_mem += lo;
        t_small += tlo;
        total_choices += k;
    }
    if (isinf(t_small)) return osdp_error_set(OSDP_ERR_INPUT, "plan search: times too large (sum overflows)");
    r->min_mem = min_mem;
    prep->min_mem = min_mem;
    if (min_mem > p->mem_limit)
        return osdp_error_set(OSDP_ERR_INFEASIBLE,
                              "no plan fits the memory limit: the smallest memory any plan needs is %lld bytes "
                              "(%.3f GiB), the limit is %lld bytes (%.3f GiB)",
                              min_mem, (double)min_mem / GIB, p->mem_limit, (double)p->mem_limit / GIB);

    /* Fixed point.  A choice slower than t_cap can be in no best plan: the
     * smallest-memory plan fits and is faster.  Such times are capped, and the
     * scale puts the slowest capped plan just under 2^60 units, so the unit
     * is at most n 2^-60 t_cap.  A capped choice still costs more units than
     * the whole smallest-memory plan (by about 2^40 / n units), so no plan
     * with one wins. */
    double t_cap = t_small * (1.0 + 0x1p-20) + DBL_MIN, max_time = 0.0;
    for (int i = 0; i < n; i++) {
        double thi = 0.0;
        for (int c = 0; c < p->n_choices[i]; c++)
            if (p->time[i][c] > thi) thi = p->time[i][c];
        max_time += thi < t_cap ? thi : t_cap;
    }
    int e = 0;
    if (max_time > 0.0) (void)frexp(max_time, &e); /* max_time < 2^e */
    prep->shift = max_time > 0.0 ? 60 - e : 0;
    prep->n = n;
    prep->off = malloc(sizeof *prep->off * (size_t)(n + 1));
    prep->q = malloc(sizeof *prep->q * (size_t)(total_choices > 0 ? total_choices : 1));
    if (!prep->off || !prep->q) {
        osdp_search_prep_free(prep);
        return osdp_error_set(OSDP_ERR_OOM, "plan search: out of memory for %lld choices", total_choices);
    }
    int o = 0;
    for (int i = 0; i < n; i++) {
        prep->off[i] = o;
        for (int c = 0; c < p->n_choices[i]; c++) {
            double t = p->time[i][c] < t_cap ? p->time[i][c] : t_cap;
            prep->q[o++] = llround(ldexp(t, prep->shift));
        }
    }
    prep->off[n] = o;
    return OSDP_OK;
}

void osdp_search_prep_free(osdp_search_prep *prep)
{
    if (!prep) return;
    free(prep->off);
    free(prep->q);
    prep->off = NULL;
    prep->q = NULL;
}

void osdp_search_finish(const osdp_search_problem *p, osdp_search_result *r)
{
    double t = 0.0;
    long long m = 0;
    for (int i = 0; i < p->n_items; i++) {
        t += p->time[i][r->choice[i]];
        m += p->mem[i][r->choice[i]];
    }
    r->total_time = t;
    r->total_mem = m;
}

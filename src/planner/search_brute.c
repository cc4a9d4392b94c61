/* Exhaustive plan search, for tests: every choice vector in lexicographic
 * order, sums recomputed from scratch for each, the tie rule of
 * osdp/search.h applied literally. */
#include "planner/search.h"

#include <stdlib.h>
#include <string.h>

osdp_status osdp_search_brute(const osdp_search_problem *p, osdp_search_result *r)
{
    osdp_search_prep prep;
    osdp_status st = osdp_search_prepare(p, r, &prep);
    if (st != OSDP_OK) return st;
    int n = p->n_items;
    long long plans = 1;
    for (int i = 0; i < n; i++) {
        if (plans > OSDP_SEARCH_BRUTE_MAX / p->n_choices[i]) {
            osdp_search_prep_free(&prep);
            return osdp_error_set(OSDP_ERR_INPUT, "plan search (brute force): more than %lld plans",
                                  OSDP_SEARCH_BRUTE_MAX);
        }
        plans *= p->n_choices[i];
    }
    int *cur = calloc((size_t)n + 1, sizeof *cur);
    if (!cur) {
        osdp_search_prep_free(&prep);
        return osdp_error_set(OSDP_ERR_OOM, "plan search (brute force): out of memory");
    }
    int have = 0;
    long long best_m = 0, best_q = 0;
    for (long long plan = 0; plan < plans; plan++) {
        long long m = 0, q = 0;
        for (int i = 0; i < n; i++) {
            m += p->mem[i][cur[i]];
            q += prep.q[prep.off[i] + cur[i]];
        }
        /* strictly better only: the first of equals (lexicographically smallest) stays */
        if (m <= p->mem_limit && (!have || q < best_q || (q == best_q && m < best_m))) {
            have = 1;
            best_m = m;
            best_q = q;
            if (n > 0) memcpy(r->choice, cur, sizeof *cur * (size_t)n);
        }
        for (int i = n - 1; i >= 0; i--) { /* odometer, last item fastest */
            if (++cur[i] < p->n_choices[i]) break;
            cur[i] = 0;
        }
    }
    r->nodes = plans;
    free(cur);
    osdp_search_prep_free(&prep);
    if (!have) /* cannot happen: prepare checked that the min-memory plan fits */
        return osdp_error_set(OSDP_ERR_INTERNAL, "plan search (brute force): no plan found");
    osdp_search_finish(p, r);
    return OSDP_OK;
}

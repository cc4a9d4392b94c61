/* The paper's depth-first plan search.  See osdp/search.h for the tie rule
 * and the guarantees. */
#define _POSIX_C_SOURCE 200809L

#include "planner/search.h"
#include "util/clock.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

osdp_status osdp_search_dfs(const osdp_search_problem *p, osdp_search_result *r)
{
    osdp_search_prep prep;
    osdp_status st = osdp_search_prepare(p, r, &prep);
    if (st != OSDP_OK) return st;
    int n = p->n_items;
    size_t nn = (size_t)n + 1;
    /* suffix minima of memory and time over items i..n-1 */
    long long *suf_m = malloc(sizeof *suf_m * nn), *suf_q = malloc(sizeof *suf_q * nn);
    long long *part_m = malloc(sizeof *part_m * nn), *part_q = malloc(sizeof *part_q * nn);
    int *cur = malloc(sizeof *cur * nn);
    if (!suf_m || !suf_q || !part_m || !part_q || !cur) {
        st = osdp_error_set(OSDP_ERR_OOM, "plan search (dfs): out of memory for %d items", n);
        goto done;
    }
    suf_m[n] = 0;
    suf_q[n] = 0;
    for (int i = n - 1; i >= 0; i--) {
        long long lm = LLONG_MAX, lq = LLONG_MAX;
        const long long *q = prep.q + prep.off[i];
        for (int c = 0; c < p->n_choices[i]; c++) {
            if (p->mem[i][c] < lm) lm = p->mem[i][c];
            if (q[c] < lq) lq = q[c];
        }
        suf_m[i] = suf_m[i + 1] + lm;
        suf_q[i] = suf_q[i + 1] + lq;
    }

    const long long limit = p->mem_limit;
    const double deadline = p->time_limit_s > 0.0 ? osdp_now_seconds() + p->time_limit_s : 0.0;
    int have = 0;
    long long best_m = 0, best_q = 0, nodes = 0;
    if (n == 0) {
        have = 1;
    } else {
        int d = 0;
        part_m[0] = 0;
        part_q[0] = 0;
        cur[0] = -1;
        while (d >= 0) {
            int c = ++cur[d];
            if (c >= p->n_choices[d]) {
                d--;
                continue;
            }
            if ((++nodes & 4095) == 0 && deadline > 0.0 && osdp_now_seconds() > deadline) {
                r->timed_out = 1;
                break;
            }
            long long m = part_m[d] + p->mem[d][c];
            long long q = part_q[d] + prep.q[prep.off[d] + c];
            int nx = d + 1;
            long long lb_m = m + suf_m[nx], lb_q = q + suf_q[nx];
            if (lb_m > limit) continue;                                    /* pruning (1) */
            if (have && (lb_q > best_q || (lb_q == best_q && lb_m >= best_m))) /* pruning (2) */
                continue;
            if (nx == n) { /* a leaf that passed (2) is strictly better */
                have = 1;
                best_m = m;
                best_q = q;
                memcpy(r->choice, cur, sizeof *cur * (size_t)n);
                continue;
            }
            part_m[nx] = m;
            part_q[nx] = q;
            cur[nx] = -1;
            d = nx;
        }
    }
    r->nodes = nodes;
    if (!have) { /* timed out before any plan: every item's smallest-memory choice fits */
        for (int i = 0; i < n; i++) {
            int bc = 0;
            for (int c = 1; c < p->n_choices[i]; c++)
                if (p->mem[i][c] < p->mem[i][bc]) bc = c;
            r->choice[i] = bc;
        }
    }
    osdp_search_finish(p, r);
done:
    free(suf_m);
    free(suf_q);
    free(part_m);
    free(part_q);
    free(cur);
    osdp_search_prep_free(&prep);
    return st;
}

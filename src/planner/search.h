/* The plan search: one choice per operator, a multiple-choice knapsack.
 *
 * Item i (an operator) has k_i >= 1 choices; choice c costs mem[i][c] bytes
 * (>= 0) and time[i][c] seconds (finite, >= 0).  A plan picks one choice per
 * item; it fits when the sum of its memories is <= mem_limit.  The searches
 * return the best plan that fits, by this rule (the "tie rule"):
 *   1. smallest total time, then
 *   2. among equal times, smallest total memory, then
 *   3. among those, the lexicographically smallest choice vector
 *      (choice[0] first).
 * Memory is compared exactly (int64 sums).  Times are compared exactly as
 * well, on a fixed-point copy (osdp_search_prepare): every time is rounded
 * once to a multiple of a unit u = 2^-s seconds, and plan times are int64
 * sums of those units.  A choice slower than the whole smallest-memory plan
 * can be in no best plan, so such times are capped just above that plan's
 * time T0; s puts the slowest capped plan just under 2^60 units, so
 * u <= n 2^-60 T0 (about 2^-52 T0 for 200 items): two plans are told apart
 * whenever their times differ by more than about n u, i.e. to within a few
 * ulps of a double when the best plan is not much faster than T0.  Being
 * exact integers, the sums do not depend on the order of addition, which
 * is what lets three quite different algorithms agree to the bit.
 *
 * Guarantee: osdp_search_dfs (when not timed out), osdp_search_exact and
 * osdp_search_brute return the SAME choice vector, hence identical
 * total_time and total_mem.  total_time is reported as the plain double sum
 * of time[i][choice[i]] in item order i = 0..n-1 and total_mem as the sum of
 * mem[i][choice[i]], so a caller that recomputes them that way gets the
 * same bits.
 *
 * No quantisation of memory, and no approximation anywhere in what is
 * returned: the exact method's pruning bounds are computed partly in
 * floating point but loosened by a margin (1e-10 relative plus 2^14 units
 * per edge) far above their rounding, so they can never prune an optimal
 * plan.
 *
 * Every function:
 *   - fills r->min_mem (the smallest memory any plan needs: the sum of the
 *     per-item minimum) whenever the input is well formed;
 *   - returns OSDP_ERR_INFEASIBLE with a message giving that smallest memory
 *     and the limit when min_mem > mem_limit;
 *   - returns OSDP_ERR_INPUT for a malformed problem (NULL arrays, k < 1,
 *     negative memory, negative/NaN/Inf time, sums that overflow int64);
 *   - returns OSDP_ERR_OOM when an allocation fails.
 * r->choice is caller-allocated with n_items entries. */
#ifndef OSDP_SEARCH_H
#define OSDP_SEARCH_H

#include "osdp/error.h"

/* Scratch memory osdp_search_exact keeps between calls (optional): a caller
 * solving many knapsacks in a row passes the same workspace to each, so
 * that the group fronts' buffers are not given back to the system and
 * faulted in again every time; free it with osdp_search_workspace_free. */
typedef struct osdp_search_workspace osdp_search_workspace;
osdp_search_workspace *osdp_search_workspace_new(void); /* NULL: out of memory */
void osdp_search_workspace_free(osdp_search_workspace *ws);

typedef struct osdp_search_problem {
    int n_items;
    const int *n_choices;            /* [n_items], each >= 1 */
    const long long *const *mem;     /* mem[i][c] bytes, >= 0 */
    const double *const *time;       /* time[i][c] seconds, finite, >= 0 */
    long long mem_limit;             /* bytes; a plan fits when sum mem <= mem_limit */
    double time_limit_s;             /* wall-clock budget for osdp_search_dfs (0 = none);
                                      * ignored by the other two (but must be >= 0) */
    osdp_search_workspace *workspace; /* osdp_search_exact's scratch between calls (NULL: none) */
    double time_cap;                 /* osdp_search_exact only (0 or inf: none): plans slower than
                                      * this are not wanted; OSDP_ERR_INFEASIBLE when the best is
                                      * slower (a plan slower by a few units of the fixed-point
                                      * time may still be returned) */
} osdp_search_problem;

typedef struct osdp_search_result {
    int *choice;           /* [n_items], caller-allocated */
    double total_time;     /* sum of time[i][choice[i]], i = 0..n-1 in order */
    long long total_mem;   /* sum of mem[i][choice[i]] */
    long long nodes;       /* dfs: nodes visited; exact: states examined;
                            * brute: plans examined */
    int timed_out;         /* dfs only: 1 when time_limit_s ran out (see below) */
    long long min_mem;     /* smallest memory any plan needs (sum of per-item minimum) */
} osdp_search_result;

/* The paper's depth-first search: items in order 0..n-1, choices in order
 * 0..k-1, with its two prunings, both using suffix minima of the items not
 * yet decided: (1) partial memory + their minimum memory > limit, and
 * (2) partial time + their minimum time no better than the best plan so far
 * (by the tie rule).  Worst case exponential.  When time_limit_s > 0 and
 * runs out, it stops and returns OSDP_OK with r->timed_out = 1 and the best
 * plan found so far (or, if none was found yet, the plan taking each item's
 * smallest-memory choice, which always fits); that plan need not be
 * optimal. */
osdp_status osdp_search_dfs(const osdp_search_problem *p, osdp_search_result *r);

/* Exact and fast: identical items are grouped; per group, the Pareto front
 * of (memory, time) over the multisets of choices is built along the chain
 * of its non-dominated choices, pruned by the LP of the remaining items;
 * groups are combined by Pareto merges from two ends that meet in the
 * middle, pruned by the memory limit and by lower bounds (the
 * multiple-choice-knapsack LP relaxation and a Lagrangian bound with a
 * cardinality cut) against a rising threshold (src/planner/search_exact.c
 * has the method).  Ties are resolved during the merges by the tie rule, so
 * the result is exactly the plan described above.  Typically well under
 * 10 ms for ~200 items (see tests/bench/bench_search.c; split operators in groups
 * of ~100 identical items: a few ms to ~20 ms); its hard cases are many
 * distinct items whose choices all lie on one line (time exactly linear in
 * bytes saved), where it can take seconds.  time_limit_s is not used. */
osdp_status osdp_search_exact(const osdp_search_problem *p, osdp_search_result *r);

/* Every plan, for tests; OSDP_ERR_INPUT when there are more than
 * OSDP_SEARCH_BRUTE_MAX plans. */
#define OSDP_SEARCH_BRUTE_MAX 50000000LL
osdp_status osdp_search_brute(const osdp_search_problem *p, osdp_search_result *r);

/* ---- shared by the three searches (src/planner/search_prepare.c) ------ */

typedef struct osdp_search_prep {
    int n;
    int *off;            /* [n + 1]: item i's choices are q[off[i] .. off[i+1]) */
    long long *q;        /* fixed-point times: llround(ldexp(time[i][c], shift)) */
    int shift;
    long long min_mem;
} osdp_search_prep;

/* Validates p and r, resets r's counters, fills r->min_mem, reports
 * infeasibility, and builds the fixed-point times.  On failure nothing is
 * left allocated. */
osdp_status osdp_search_prepare(const osdp_search_problem *p, osdp_search_result *r,
                                osdp_search_prep *prep);
void osdp_search_prep_free(osdp_search_prep *prep);
/* total_time and total_mem of r->choice, as documented above */
void osdp_search_finish(const osdp_search_problem *p, osdp_search_result *r);

#endif

/* Exact plan search, part 2 (method in search_exact.c): a group's front,
 * the Pareto set of (memory, time) over the multisets of its items' choices,
 * pruned by the round's threshold. */
#include "search_exact.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* group fronts                                                              */

/* The tie rule on two multisets with equal sums: 1 when a plus one item at
 * choice `plus` has more of the smallest differing choice than b (its
 * items, in ascending index, then take the lexicographically smaller
 * choices) */
static int counts_better_plus(const int *a, int plus, const int *b, int k)
{
    for (int c = 0; c < k; c++) {
        int v = a[c] + (c == plus);
        if (v != b[c]) return v > b[c];
    }
    return 0;
}


/* Group fronts: the Pareto front of (memory, time) over the multisets of
 * choices of a group's r identical items, restricted to multisets whose
 * bound does not exceed the round's threshold (no plan within it has any
 * other part).  The choices are taken in the order of the non-dominated
 * chain par (memory ascending), like an unbounded knapsack over choice
 * types: G_d(j), the front of j items using par[0..d] only, is
 *     Pareto( G_{d-1}(j)  u  G_d(j-1) + par[d] ),
 * and the front is G_{np-1}(r).  A point of G_d(j) is completed by r - j
 * items that take par[d..] only, so it is dropped when its sums plus the LP
 * relaxation of those items (restricted to par[d..]) with every other group
 * (osdp_sx_rest_bound) exceed the threshold; the completions of the points of one
 * G_d(j) are the same, so dominance within it is exact, and a dominator's
 * bound is no larger than the dominated point's.  Why not one item at a
 * time (front(j) = Pareto(front(j-1) + each choice)): there a partial
 * multiset's r - j remaining items are free, and the LP completes almost
 * any partial multiset of near-collinear choices (split operators, k of g
 * slices ZDP) fractionally, so intermediate fronts held millions of points
 * for final fronts of hundreds. */

/* room for need points of k counts each, contents not kept (every caller
 * fills the points afresh: a realloc's copy of the old points was a fifth
 * of a search's time on N&D with --split auto --recompute auto); the
 * buffers are reused by groups with different k, so the counts' room is
 * kept per k (v->kc) */
static int pts_reserve(osdp_sx_points *v, size_t need, int k)
{
    if ((size_t)v->cap >= need && k <= v->kc && v->c) return 0;
    size_t cap = v->cap > 0 ? (size_t)v->cap : 64;
    while (cap < need) cap *= 2;
    const int kk = k > v->kc ? k : v->kc;
    if (cap > INT_MAX) return -1;
    free(v->m); free(v->q); free(v->c);
    v->m = malloc(sizeof *v->m * cap);
    v->q = malloc(sizeof *v->q * cap);
    v->c = malloc(sizeof *v->c * cap * (size_t)kk);
    v->n = 0;
    if (!v->m || !v->q || !v->c) {
        osdp_sx_pts_free(v);
        return -1;
    }
    v->cap = (int)cap;
    v->kc = kk;
    return 0;
}

void osdp_sx_pts_free(osdp_sx_points *v)
{
    free(v->m); free(v->q); free(v->c);
    v->m = v->q = NULL;
    v->c = NULL;
    v->n = v->cap = v->kc = 0;
}

/* The LP relaxation of the completion of a point of G_d(j) as a function of
 * the bytes left: the n = r - j remaining items at par[d] and the other
 * groups at their smallest (base), then their edges by efficiency: the
 * other groups' (fixed during a build) merged with the remaining items'
 * hull over par[d..] (n copies of each edge), an other edge first on equal
 * efficiency.  The other groups' edges are summed once per build
 * (x->lcm, x->lcq: bytes and time units before edge i; x->leff: edge i's
 * efficiency); a line only places its own few edges among them (pos[e]:
 * the other edges before own edge e), and a query finds its place by
 * binary search: O(own edges + log edges) instead of a walk over every
 * edge per line (the walk was most of the time of a search on distinct
 * operators).  The sums are the same integers and the partial edge the
 * same efficiency as those of the merged walk, so the bound is the same
 * number. */
typedef struct lp_line {
    int n_own;                 /* own edges */
    long long base_m, base_q;
    const long long *own_m, *own_q; /* [n_own + 1] own bytes, time units before own edge e */
    const double *own_eff;     /* [n_own] */
    const int *pos;            /* [n_own + 1]: pos[n_own] = the number of other edges */
} lp_line;

/* the other groups' edges of this build: prefix sums and efficiencies */
static void line_others(osdp_sx_context *x)
{
    x->lcm[0] = x->lcq[0] = 0;
    for (int i = 0; i < x->n_edges; i++) {
        x->lcm[i + 1] = x->lcm[i] + x->edm[i];
        x->lcq[i + 1] = x->lcq[i] + x->edq[i];
        x->leff[i] = (double)x->edges[i].dq / (double)x->edges[i].dm;
    }
}

/* the first other edge at or after `from` whose efficiency is below ee */
static int others_below(const osdp_sx_context *x, int from, double ee)
{
    int lo = from, hi = x->n_edges;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (x->edges[mid].eff >= ee) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void line_build(osdp_sx_context *x, const osdp_sx_group *g, const osdp_sx_fenwick *f, int d, long long n,
                       lp_line *L)
{
    const int *h = g->pareto_hull + (size_t)d * (size_t)g->n_choices, nh = n > 0 ? g->pareto_hull_n[d] : 1;
    L->base_m = n * g->mem[h[0]] + f->m0;
    L->base_q = n * g->units[h[0]] + f->q0;
    L->n_own = nh - 1;
    x->own_m[0] = x->own_q[0] = 0;
    for (int e = 0; e + 1 < nh; e++) {
        long long dm = g->mem[h[e + 1]] - g->mem[h[e]], dq = g->units[h[e]] - g->units[h[e + 1]];
        double ee = (double)dq / (double)dm;
        x->own_eff[e] = ee;
        x->own_m[e + 1] = x->own_m[e] + dm * n;
        x->own_q[e + 1] = x->own_q[e] + dq * n;
        x->own_pos[e] = others_below(x, e > 0 ? x->own_pos[e - 1] : 0, ee); /* after the previous own edge */
    }
    x->own_pos[nh - 1] = x->n_edges;
    L->own_m = x->own_m;
    L->own_q = x->own_q;
    L->own_eff = x->own_eff;
    L->pos = x->own_pos;
}

/* the largest i in [lo, hi] with x->lcm[i] <= v (x->lcm[lo] <= v) */
static int others_fit(const osdp_sx_context *x, int lo, int hi, long long v)
{
    while (lo < hi) {
        int mid = hi - (hi - lo) / 2;
        if (x->lcm[mid] <= v) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* the line's lower bound with `budget` bytes for everything not yet decided:
 * the merged edges taken whole while they fit, the next one in part */
static double line_query(const osdp_sx_context *x, const lp_line *L, long long budget)
{
    budget -= L->base_m;
    if (budget < 0) return INFINITY;
    int e = 0; /* own edges taken whole */
    while (e < L->n_own && x->lcm[L->pos[e]] + L->own_m[e + 1] <= budget) e++;
    double gain;
    const long long left = budget - L->own_m[e]; /* for the other edges */
    if (e < L->n_own && x->lcm[L->pos[e]] <= left) { /* every other edge before own edge e fits; e in part */
        gain = (double)(x->lcq[L->pos[e]] + L->own_q[e]) + (double)(left - x->lcm[L->pos[e]]) * L->own_eff[e];
    } else { /* the budget ends among the other edges before own edge e (or after the last) */
        int i = others_fit(x, e > 0 ? L->pos[e - 1] : 0, L->pos[e], left);
        gain = (double)(x->lcq[i] + L->own_q[e]);
        if (i < x->n_edges) gain += (double)(left - x->lcm[i]) * x->leff[i];
    }
    return (double)L->base_q - gain;
}

/* out = Pareto(a u (b + choice c)) under the bound of G_d(j) (j items);
 * out must be neither a nor b */
static int front_merge(osdp_sx_context *x, const osdp_sx_group *g, const osdp_sx_fenwick *f, int d, long long j,
                       long long cap, const osdp_sx_points *a, const osdp_sx_points *b, int c, osdp_sx_points *out)
{
    const int k = g->n_choices, last = d == g->n_pareto - 1 && j == g->n_items;
    const long long left = g->n_items - j, low = g->mem[g->pareto[d]]; /* the rest's smallest memory each */
    int ia = 0, ib = 0;
    out->n = 0;
    if (pts_reserve(out, (size_t)(a->n + (b ? b->n : 0)) + 1, k)) return -1;
    lp_line line;
    line_build(x, g, f, d, left, &line);
    for (;;) {
        long long m, q;
        const int *cnt;
        int from_b;
        int has_a = ia < a->n, has_b = b && ib < b->n;
        if (!has_a && !has_b) break;
        long long mb = has_b ? b->m[ib] + g->mem[c] : 0, qb = has_b ? b->q[ib] + g->units[c] : 0;
        from_b = has_b && (!has_a || mb < a->m[ia] || (mb == a->m[ia] && qb < a->q[ia]));
        if (has_a && has_b && mb == a->m[ia] && qb == a->q[ia]) /* a tie: the tie rule's counts decide */
            from_b = counts_better_plus(b->c + (size_t)ib * (size_t)k, c, a->c + (size_t)ia * (size_t)k, k);
        if (from_b) {
            m = mb;
            q = qb;
            cnt = b->c + (size_t)ib * (size_t)k;
        } else {
            m = a->m[ia];
            q = a->q[ia];
            cnt = a->c + (size_t)ia * (size_t)k;
        }
        int tie_other = has_a && has_b && mb == a->m[ia] && qb == a->q[ia];
        if (from_b) ib++;
        else ia++;
        if (tie_other) { /* the loser of the tie goes too */
            if (from_b) ia++;
            else ib++;
        }
        x->nodes++;
        if (out->n > 0 && q >= out->q[out->n - 1]) continue; /* dominated (or an equal that came later) */
        if (m + left * low > cap) break;                     /* memory ascends */
        double lb = last ? osdp_sx_bound(x, f, m, q) : (double)q + line_query(x, &line, x->problem->mem_limit - m);
        if (lb > x->threshold) {
            if (lb < x->next) x->next = lb;
            continue;
        }
        int at = out->n++;
        out->m[at] = m;
        out->q[at] = q;
        memcpy(out->c + (size_t)at * (size_t)k, cnt, sizeof *cnt * (size_t)k);
        if (from_b) out->c[(size_t)at * (size_t)k + (size_t)c]++;
    }
    return 0;
}

/* group gi's front under the round's threshold; f: scratch bound data */
int osdp_sx_build_front(osdp_sx_context *x, int gi, long long cap, osdp_sx_fenwick *f)
{
    osdp_sx_group *g = &x->groups[gi];
    const int k = g->n_choices, r = g->n_items;
    int rc = -1;
    if (x->fpts_n < r + 1) { /* scratch for every group: the largest r */
        for (int t = 0; t < 2; t++) {
            for (int j = 0; x->fpts[t] && j < x->fpts_n; j++) osdp_sx_pts_free(&x->fpts[t][j]);
            free(x->fpts[t]);
            x->fpts[t] = calloc((size_t)r + 1, sizeof *x->fpts[t]);
        }
        x->fpts_n = x->fpts[0] && x->fpts[1] ? r + 1 : 0;
    }
    osdp_sx_points *prev = x->fpts[0], *cur = x->fpts[1];
    free(g->front_mem); free(g->front_units); free(g->front_counts);
    g->front_mem = g->front_units = NULL;
    g->front_counts = NULL;
    g->front_size = 0;
    if (!prev || !cur || pts_reserve(&prev[0], 1, k)) goto done;
    for (int j = 0; j <= r; j++) prev[j].n = cur[j].n = 0;
    if (!x->edm) { /* LP line scratch, for every group */
        x->edm = malloc(sizeof *x->edm * (size_t)(x->n_edges + 1));
        x->edq = malloc(sizeof *x->edq * (size_t)(x->n_edges + 1));
        x->lcm = malloc(sizeof *x->lcm * (size_t)(x->n_edges + 1));
        x->lcq = malloc(sizeof *x->lcq * (size_t)(x->n_edges + 1));
        x->leff = malloc(sizeof *x->leff * (size_t)(x->n_edges + 1));
        x->own_m = malloc(sizeof *x->own_m * 2 * (size_t)(x->max_choices + 1));
        x->own_q = x->own_m ? x->own_m + x->max_choices + 1 : NULL;
        x->own_eff = malloc(sizeof *x->own_eff * (size_t)(x->max_choices + 1));
        x->own_pos = malloc(sizeof *x->own_pos * (size_t)(x->max_choices + 1));
        if (!x->edm || !x->edq || !x->lcm || !x->lcq || !x->leff || !x->own_m || !x->own_eff || !x->own_pos) goto done;
    }
    osdp_sx_fen_copy(x, f, &x->full);
    osdp_sx_fen_remove(x, f, gi, r);
    osdp_sx_fen_edges(x, f, x->edm, x->edq);
    line_others(x);
    prev[0].n = 1; /* G_{-1}(0): no item yet */
    prev[0].m[0] = prev[0].q[0] = 0;
    memset(prev[0].c, 0, sizeof *prev[0].c * (size_t)k);
    for (int d = 0; d < g->n_pareto; d++) {
        for (int j = 0; j <= r; j++)
            if (front_merge(x, g, f, d, j, cap, &prev[j], j > 0 ? &cur[j - 1] : NULL, g->pareto[d], &cur[j])) goto done;
        osdp_sx_points *t = prev;
        prev = cur;
        cur = t;
    }
    const osdp_sx_points *F = &prev[r]; /* the front: G_{np-1}(r) */
    g->front_mem = malloc(sizeof *g->front_mem * (size_t)(F->n + 1));
    g->front_units = malloc(sizeof *g->front_units * (size_t)(F->n + 1));
    g->front_counts = malloc(sizeof *g->front_counts * (size_t)(F->n + 1) * (size_t)k);
    if (!g->front_mem || !g->front_units || !g->front_counts) goto done;
    memcpy(g->front_mem, F->m, sizeof *g->front_mem * (size_t)F->n);
    memcpy(g->front_units, F->q, sizeof *g->front_units * (size_t)F->n);
    memcpy(g->front_counts, F->c, sizeof *g->front_counts * (size_t)F->n * (size_t)k);
    g->front_size = F->n;
    rc = 0;
done:
    return rc;
}


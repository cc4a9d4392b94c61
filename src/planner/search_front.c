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

/* room for need points of k counts each; the buffers are reused by groups
 * with different k, so the counts' room is kept per k (v->kc) */
static int pts_reserve(osdp_sx_points *v, size_t need, int k)
{
    int c1 = v->cap, c2 = v->cap;
    if (osdp_sx_grow((void **)&v->m, sizeof *v->m, need, &c1) || osdp_sx_grow((void **)&v->q, sizeof *v->q, need, &c2))
        return -1;
    if (c1 != v->cap || k > v->kc || !v->c) {
        int kk = k > v->kc ? k : v->kc;
        int *nc = realloc(v->c, sizeof *v->c * (size_t)c1 * (size_t)kk);
        if (!nc) return -1;
        v->c = nc;
        v->kc = kk;
    }
    v->cap = c1;
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
 * other groups' (x->edm, x->edq, fixed during a build) merged with the
 * remaining items' hull over par[d..] (n copies of each edge).  Queried in
 * ascending memory, i.e. descending budget, so a pointer walks it down. */
typedef struct lp_line {
    int n, p;                  /* edges; query position */
    long long base_m, base_q;
    long long *cm, *cq;        /* [n + 1] bytes, time units before edge t */
    double *eff;               /* [n] units per byte of edge t */
} lp_line;

static void line_build(const osdp_sx_context *x, const osdp_sx_group *g, const osdp_sx_fenwick *f, int d, long long n,
                       lp_line *L)
{
    const int *h = g->pareto_hull + (size_t)d * (size_t)g->n_choices, nh = n > 0 ? g->pareto_hull_n[d] : 1;
    L->base_m = n * g->mem[h[0]] + f->m0;
    L->base_q = n * g->units[h[0]] + f->q0;
    L->cm = x->lcm;
    L->cq = x->lcq;
    L->eff = x->leff;
    int t = 0, i = 0, e = 0;
    L->cm[0] = L->cq[0] = 0;
    for (;;) {
        while (i < x->n_edges && x->edm[i] == 0) i++;
        double ei = i < x->n_edges ? x->edges[i].eff : -INFINITY, ee = -INFINITY;
        long long dm = 0, dq = 0;
        if (e + 1 < nh) {
            dm = g->mem[h[e + 1]] - g->mem[h[e]];
            dq = g->units[h[e]] - g->units[h[e + 1]];
            ee = (double)dq / (double)dm;
        }
        if (i >= x->n_edges && e + 1 >= nh) break;
        if (i < x->n_edges && ei >= ee) {
            L->eff[t] = (double)x->edges[i].dq / (double)x->edges[i].dm;
            dm = x->edm[i];
            dq = x->edq[i];
            i++;
        } else {
            L->eff[t] = ee;
            dm *= n;
            dq *= n;
            e++;
        }
        L->cm[t + 1] = L->cm[t] + dm;
        L->cq[t + 1] = L->cq[t] + dq;
        t++;
    }
    L->n = L->p = t;
}

/* the line's lower bound with `budget` bytes for everything not yet decided */
static double line_query(lp_line *L, long long budget)
{
    budget -= L->base_m;
    if (budget < 0) return INFINITY;
    while (L->p > 0 && L->cm[L->p] > budget) L->p--;
    double gain = (double)L->cq[L->p];
    if (L->p < L->n) gain += (double)(budget - L->cm[L->p]) * L->eff[L->p];
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
        double lb = last ? osdp_sx_bound(x, f, m, q) : (double)q + line_query(&line, x->problem->mem_limit - m);
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
        x->lcm = malloc(sizeof *x->lcm * (size_t)(x->n_edges + x->max_choices + 1));
        x->lcq = malloc(sizeof *x->lcq * (size_t)(x->n_edges + x->max_choices + 1));
        x->leff = malloc(sizeof *x->leff * (size_t)(x->n_edges + x->max_choices + 1));
        if (!x->edm || !x->edq || !x->lcm || !x->lcq || !x->leff) goto done;
    }
    osdp_sx_fen_copy(x, f, &x->full);
    osdp_sx_fen_remove(x, f, gi, r);
    osdp_sx_fen_edges(x, f, x->edm, x->edq);
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


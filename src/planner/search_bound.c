/* Exact plan search, part 3 (method in search_exact.c): lower bounds on the
 * time of the groups a state has not decided (the LP relaxation, the
 * Lagrangian bound with a cardinality cut, the LP of a group's remaining
 * items restricted to later choices), kept in Fenwick trees so that removing
 * a group and evaluating a bound cost O(log). */
#include "search_exact.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* bounds for the groups not on a side                                       */

/* Removing a group costs O(log) per edge and step, a bound O(log). */
static void fen_add(long long *t, int n, int p, long long v)
{
    for (; p <= n; p += p & -p) t[p] += v;
}

static int fen_len(const osdp_sx_context *x, int k) { return k < KC ? x->n_edges : x->n_steps; }

static void fen_build(long long *t, int n)
{
    for (int i = 1; i <= n; i++)
        if (i + (i & -i) <= n) t[i + (i & -i)] += t[i];
}

/* the largest p in [0, n] with prefix_a(p) <= v, and the prefixes there */
static int fen_find(const long long *a, const long long *b, int n, long long v, long long *sa, long long *sb)
{
    int p = 0, w = 1;
    long long A = 0, B = 0;
    while (w * 2 <= n) w *= 2;
    for (; n > 0 && w > 0; w /= 2)
        if (p + w <= n && A + a[p + w] <= v) {
            p += w;
            A += a[p];
            B += b[p];
        }
    *sa = A;
    *sb = B;
    return p;
}

/* Lagrangian bound with a cardinality cut: for the steps a plan takes off
 * the base, gain = sum r + lam sum dm <= (sum of its r > 0 steps) + lam
 * budget, and at most K steps fit in the budget (the K smallest do), so
 * their r sum is at most the K largest r.  It sees fixed costs per step
 * (latencies) that the LP spreads over fractions. */
static double card_bound(const osdp_sx_context *x, const osdp_sx_fenwick *f, long long budget, long long q0)
{
    long long sz, K, c2, top;
    int p = fen_find(f->t[KS], f->t[KC], x->n_steps, budget, &sz, &K);
    if (p < x->n_steps) {
        const osdp_sx_step *e = &x->steps[x->by_dm[p]];
        long long more = (budget - sz) / e->dm;
        K += more < x->groups[e->g].n_items ? more : x->groups[e->g].n_items;
    }
    p = fen_find(f->t[TC], f->t[TR], x->n_steps, K, &c2, &top);
    double t = (double)top;
    if (p < x->n_steps) t += (double)(K - c2) * (double)x->steps[x->by_r[p]].rc;
    return (double)q0 - x->lambda * (double)budget - t;
}

/* prefix sums of the first n entries of two trees */
static void fen_prefix(const long long *a, const long long *b, int n, long long *sa, long long *sb)
{
    long long A = 0, B = 0;
    for (int p = n; p > 0; p -= p & -p) {
        A += a[p];
        B += b[p];
    }
    *sa = A;
    *sb = B;
}

/* the edges' weights in f, in efficiency order (bytes, time units; 0 for
 * the groups taken out of f) */
void osdp_sx_fen_edges(const osdp_sx_context *x, const osdp_sx_fenwick *f, long long *dm, long long *dq)
{
    long long pm = 0, pq = 0;
    for (int t = 0; t < x->n_edges; t++) {
        long long cm, cq;
        fen_prefix(f->t[LM], f->t[LQ], t + 1, &cm, &cq);
        dm[t] = cm - pm;
        dq[t] = cq - pq;
        pm = cm;
        pq = cq;
    }
}

/* a lower bound on the time of any plan extending a state (m, q): the
 * larger of the LP bound and the cardinality bound */
double osdp_sx_bound(const osdp_sx_context *x, const osdp_sx_fenwick *f, long long m, long long q)
{
    long long budget = x->problem->mem_limit - m - f->m0, cm, cq;
    if (budget < 0) return INFINITY;
    int p = fen_find(f->t[LM], f->t[LQ], x->n_edges, budget, &cm, &cq);
    double lb = (double)(q + f->q0 - cq);
    if (p < x->n_edges) lb -= (double)(budget - cm) * ((double)x->edges[p].dq / (double)x->edges[p].dm);
    double cb = card_bound(x, f, budget, q + f->q0);
    return cb > lb ? cb : lb;
}

/* takes r copies of group j's items out of the bound data f */
void osdp_sx_fen_remove(const osdp_sx_context *x, osdp_sx_fenwick *f, int j, long long r)
{
    const osdp_sx_group *g = &x->groups[j];
    f->m0 -= r * g->mem[g->hull[0]];
    f->q0 -= r * g->units[g->hull[0]];
    for (int t = x->eg_off[j]; t < x->eg_off[j + 1]; t++) {
        int p = x->eg_pos[t];
        fen_add(f->t[LM], x->n_edges, p + 1, -r * x->edges[p].dm);
        fen_add(f->t[LQ], x->n_edges, p + 1, -r * x->edges[p].dq);
    }
    for (int t = x->sg_off[j]; t < x->sg_off[j + 1]; t++) {
        const osdp_sx_step *e = &x->steps[t];
        if (e->rc <= 0) continue;
        fen_add(f->t[KC], x->n_steps, e->pos_dm + 1, -r);
        fen_add(f->t[KS], x->n_steps, e->pos_dm + 1, -r * e->dm);
        fen_add(f->t[TC], x->n_steps, e->pos_r + 1, -r);
        fen_add(f->t[TR], x->n_steps, e->pos_r + 1, -r * e->rc);
    }
}

void osdp_sx_fen_copy(const osdp_sx_context *x, osdp_sx_fenwick *dst, const osdp_sx_fenwick *src)
{
    for (int k = 0; k < NTREE; k++) memcpy(dst->t[k], src->t[k], sizeof *src->t[k] * (size_t)(fen_len(x, k) + 1));
    dst->m0 = src->m0;
    dst->q0 = src->q0;
}

static int fen_alloc(const osdp_sx_context *x, osdp_sx_fenwick *f)
{
    for (int k = 0; k < NTREE; k++)
        if (!(f->t[k] = calloc((size_t)fen_len(x, k) + 1, sizeof *f->t[k]))) return -1;
    return 0;
}

void osdp_sx_fen_free(osdp_sx_fenwick *f)
{
    for (int k = 0; k < NTREE; k++) free(f->t[k]);
}

/* x->full: the trees of every group, steps' r for lambda = x->lambda */
static void full_trees(osdp_sx_context *x, osdp_sx_keyed *kd)
{
    osdp_sx_fenwick *f = &x->full;
    for (int t = 0; t < x->n_steps; t++) {
        osdp_sx_step *e = &x->steps[t];
        double r = (double)e->dq - x->lambda * (double)e->dm;
        e->rc = r > 0 ? (long long)ceil(r) : 0; /* rounded up: the bound stays valid */
        kd[t] = (osdp_sx_keyed){r, t};
    }
    qsort(kd, (size_t)x->n_steps, sizeof *kd, osdp_sx_cmp_keyed);
    for (int k = KC; k < NTREE; k++) memset(f->t[k], 0, sizeof *f->t[k] * (size_t)(x->n_steps + 1));
    for (int t = 0; t < x->n_steps; t++) {
        x->by_r[t] = kd[t].id;
        osdp_sx_step *e = &x->steps[kd[t].id];
        e->pos_r = t;
        if (e->rc <= 0) continue;
        long long r = x->groups[e->g].n_items;
        f->t[KC][e->pos_dm + 1] = r;
        f->t[KS][e->pos_dm + 1] = r * e->dm;
        f->t[TC][t + 1] = r;
        f->t[TR][t + 1] = r * e->rc;
    }
    for (int k = KC; k < NTREE; k++) fen_build(f->t[k], x->n_steps);
}

/* The sum of the k largest of vals (val[t] counted w[t] times; every one
 * when they number fewer): a selection by partition, O(n) expected, that
 * reorders val and w. */
static long long top_sum(long long *val, long long *w, int n, long long k)
{
    long long sum = 0;
    int lo = 0, hi = n; /* the candidates: [lo, hi) */
    while (lo < hi && k > 0) {
        const long long pivot = val[lo + (hi - lo) / 2];
        int gt = lo, eq_end = lo; /* [lo, gt) > pivot, [gt, eq_end) == pivot, [eq_end, i) < pivot */
        long long w_gt = 0, s_gt = 0, w_eq = 0;
        for (int i = lo; i < hi; i++) {
            long long v = val[i], c = w[i];
            if (v < pivot) continue;
            val[i] = val[eq_end];
            w[i] = w[eq_end];
            if (v > pivot) { /* the first of the equal run moves to its end */
                val[eq_end] = val[gt];
                w[eq_end] = w[gt];
                val[gt] = v;
                w[gt] = c;
                gt++;
                w_gt += c;
                s_gt += v * c;
            } else {
                val[eq_end] = v;
                w[eq_end] = c;
                w_eq += c;
            }
            eq_end++;
        }
        if (k <= w_gt) {
            hi = gt;
            continue;
        }
        sum += s_gt;
        k -= w_gt;
        if (k <= w_eq) return sum + k * pivot;
        sum += w_eq * pivot;
        k -= w_eq;
        lo = eq_end;
    }
    return sum;
}

/* card_bound of the whole problem at lambda, without the trees (the grid
 * below asks it for 15 lambdas; sorting the steps by r for each, as
 * full_trees does, was the largest part of a search's setup): the same
 * count K by size, the same sum of the K largest r.  scratch: 2 n_steps */
static double card_bound_at(const osdp_sx_context *x, double lambda, long long budget, long long q0, long long *scratch)
{
    long long *val = scratch, *w = scratch + x->n_steps, size = 0, K = 0;
    int n = 0, full = 1;
    for (int p = 0; p < x->n_steps; p++) { /* by size: the K smallest steps with r > 0 fit */
        const osdp_sx_step *e = &x->steps[x->by_dm[p]];
        const double r = (double)e->dq - lambda * (double)e->dm;
        if (!(r > 0)) continue;
        const long long cnt = x->groups[e->g].n_items;
        val[n] = (long long)ceil(r);
        w[n++] = cnt;
        if (!full) continue;
        if (size + cnt * e->dm <= budget) {
            size += cnt * e->dm;
            K += cnt;
        } else {
            long long more = (budget - size) / e->dm;
            K += more < cnt ? more : cnt;
            full = 0;
        }
    }
    return (double)q0 - lambda * (double)budget - (double)top_sum(val, w, n, K);
}

/* Steps, group lists, the LP trees, and lambda: of a grid of fractions of
 * the break efficiency, the one whose cardinality bound of the whole problem
 * is the largest. */
int osdp_sx_setup_bounds(osdp_sx_context *x)
{
    int ne = x->n_edges, ns = 0;
    osdp_sx_keyed *kd = malloc(sizeof *kd * (size_t)(x->n_steps + 1));
    x->steps = malloc(sizeof *x->steps * (size_t)(x->n_steps + 1));
    x->by_dm = malloc(sizeof *x->by_dm * (size_t)(x->n_steps + 1));
    x->by_r = malloc(sizeof *x->by_r * (size_t)(x->n_steps + 1));
    x->eg_off = calloc((size_t)x->n_groups + 1, sizeof *x->eg_off);
    x->sg_off = calloc((size_t)x->n_groups + 1, sizeof *x->sg_off);
    x->eg_pos = malloc(sizeof *x->eg_pos * (size_t)(ne + 1));
    int *fill = calloc((size_t)x->n_groups + 1, sizeof *fill);
    long long *scratch = malloc(sizeof *scratch * 2 * (size_t)(x->n_steps + 1));
    if (!kd || !fill || !scratch || !x->steps || !x->by_dm || !x->by_r || !x->eg_off || !x->sg_off || !x->eg_pos ||
        fen_alloc(x, &x->full) || fen_alloc(x, &x->sides[0].f) || fen_alloc(x, &x->sides[1].f)) {
        free(kd);
        free(fill);
        free(scratch);
        return -1;
    }
    for (int j = 0; j < x->n_groups; j++) {
        const osdp_sx_group *g = &x->groups[j];
        x->sg_off[j] = ns;
        for (int v = 0; v + 1 < g->n_pareto; v++)
            x->steps[ns++] = (osdp_sx_step){g->mem[g->pareto[v + 1]] - g->mem[g->pareto[v]],
                                          g->units[g->pareto[v]] - g->units[g->pareto[v + 1]], 0, j, 0, 0};
    }
    x->sg_off[x->n_groups] = ns;
    for (int t = 0; t < ne; t++) x->eg_off[x->edges[t].g + 1]++;
    for (int j = 0; j < x->n_groups; j++) x->eg_off[j + 1] += x->eg_off[j];
    memcpy(fill, x->eg_off, sizeof *fill * (size_t)x->n_groups);
    for (int t = 0; t < ne; t++) x->eg_pos[fill[x->edges[t].g]++] = t;
    for (int t = 0; t < ns; t++) kd[t] = (osdp_sx_keyed){-(double)x->steps[t].dm, t};
    qsort(kd, (size_t)ns, sizeof *kd, osdp_sx_cmp_keyed);
    for (int t = 0; t < ns; t++) {
        x->by_dm[t] = kd[t].id;
        x->steps[kd[t].id].pos_dm = t;
    }
    osdp_sx_fenwick *f = &x->full;
    f->m0 = f->q0 = 0;
    for (int j = 0; j < x->n_groups; j++) {
        f->m0 += (long long)x->groups[j].n_items * x->groups[j].mem[x->groups[j].hull[0]];
        f->q0 += (long long)x->groups[j].n_items * x->groups[j].units[x->groups[j].hull[0]];
    }
    for (int t = 0; t < ne; t++) {
        f->t[LM][t + 1] = x->groups[x->edges[t].g].n_items * x->edges[t].dm;
        f->t[LQ][t + 1] = x->groups[x->edges[t].g].n_items * x->edges[t].dq;
    }
    fen_build(f->t[LM], ne);
    fen_build(f->t[LQ], ne);
    double best = -INFINITY, best_f = 1.0; /* lambda / brk: eighths, then halving steps */
    for (int t = 0; t < 15; t++) {
        double fr = t < 9 ? t / 8.0 : best_f + ((t - 9) % 2 ? -1 : 1) * ldexp(1.0, -4 - (t - 9) / 2);
        if (fr < 0.0 || fr > 1.0) continue;
        double b = card_bound_at(x, x->break_eff * fr, x->problem->mem_limit - f->m0, f->q0, scratch);
        if (b > best) {
            best = b;
            best_f = fr;
        }
    }
    x->lambda = x->break_eff * best_f;
    full_trees(x, kd);
    free(kd);
    free(fill);
    free(scratch);
    return 0;
}


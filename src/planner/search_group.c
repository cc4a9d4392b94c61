/* Exact plan search, part 1 (method in search_exact.c): identical items
 * form groups; each group's lower convex hull and non-dominated chain; the
 * greedy plan (LP edges by efficiency, whole items) that bounds the
 * optimum from above; the groups' order by distance from the LP's break. */
#include "search_exact.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int osdp_sx_grow(void **ptr, size_t elem, size_t need, int *cap)
{
    if ((size_t)*cap >= need) return 0;
    size_t c = *cap ? (size_t)*cap : 64;
    while (c < need) c *= 2;
    if (c > INT_MAX) return -1;
    void *q = realloc(*ptr, c * elem);
    if (!q) return -1;
    *ptr = q;
    *cap = (int)c;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* groups, hulls, greedy plan, order                                         */

static int same_item(const osdp_search_problem *p, int a, int b)
{
    int k = p->n_choices[a];
    if (k != p->n_choices[b]) return 0;
    if (p->mem[a] == p->mem[b] && p->time[a] == p->time[b]) return 1;
    for (int c = 0; c < k; c++)
        if (p->mem[a][c] != p->mem[b][c] || p->time[a][c] != p->time[b][c]) return 0;
    return 1;
}

/* a * b < c * d for a, b, c, d in [0, 2^63), exactly */
static int mul_less(unsigned long long a, unsigned long long b, unsigned long long c, unsigned long long d)
{
    unsigned long long h[2], l[2], x[2] = {a, c}, y[2] = {b, d};
    for (int i = 0; i < 2; i++) { /* 64 x 64 -> 128 bits by 32-bit halves */
        unsigned long long x0 = x[i] & 0xffffffffULL, x1 = x[i] >> 32, y0 = y[i] & 0xffffffffULL, y1 = y[i] >> 32;
        unsigned long long p00 = x0 * y0, p01 = x0 * y1, p10 = x1 * y0, p11 = x1 * y1;
        unsigned long long mid = (p00 >> 32) + (p01 & 0xffffffffULL) + (p10 & 0xffffffffULL);
        l[i] = (mid << 32) | (p00 & 0xffffffffULL);
        h[i] = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
    }
    return h[0] < h[1] || (h[0] == h[1] && l[0] < l[1]);
}

/* choice b strictly below the chord from a to c (memory ascending, time
 * descending) */
static int below(const osdp_sx_group *g, int a, int b, int c)
{
    return mul_less((unsigned long long)(g->units[a] - g->units[c]), (unsigned long long)(g->mem[b] - g->mem[a]),
                    (unsigned long long)(g->units[a] - g->units[b]), (unsigned long long)(g->mem[c] - g->mem[a]));
}

/* hull: the lower convex hull of the non-dominated choices, memory ascending */
static void make_hull(osdp_sx_group *g)
{
    int *h = g->hull, nh = 0;
    for (int c = 0; c < g->n_choices; c++) { /* insertion sort by (memory, time, index) */
        int t = c;
        while (t > 0
               && (g->mem[h[t - 1]] > g->mem[c] || (g->mem[h[t - 1]] == g->mem[c] && g->units[h[t - 1]] > g->units[c]))) {
            h[t] = h[t - 1];
            t--;
        }
        h[t] = c;
    }
    g->n_pareto = 0;
    for (int t = 0; t < g->n_choices; t++)
        if (g->n_pareto == 0 || g->units[h[t]] < g->units[g->pareto[g->n_pareto - 1]]) g->pareto[g->n_pareto++] = h[t];
    for (int t = 0; t < g->n_pareto; t++) {
        int c = g->pareto[t];
        while (nh >= 2 && !below(g, h[nh - 2], h[nh - 1], c)) nh--;
        h[nh++] = c;
    }
    g->n_hull = nh;
    for (int d = 0; d < g->n_pareto; d++) { /* the same chain over par[d..] */
        int *rh = g->pareto_hull + (size_t)d * (size_t)g->n_choices, n = 0;
        for (int t = d; t < g->n_pareto; t++) {
            int c = g->pareto[t];
            while (n >= 2 && !below(g, rh[n - 2], rh[n - 1], c)) n--;
            rh[n++] = c;
        }
        g->pareto_hull_n[d] = n;
    }
}

int osdp_sx_make_groups(osdp_sx_context *x)
{
    const osdp_search_problem *p = x->problem;
    int n = p->n_items, rc = -1;
    int *gid = malloc(sizeof *gid * (size_t)n), *rep = malloc(sizeof *rep * (size_t)n);
    x->groups = calloc((size_t)n, sizeof *x->groups);
    if (!gid || !rep || !x->groups) goto done;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < x->n_groups && !same_item(p, rep[j], i)) j++;
        if (j == x->n_groups) rep[x->n_groups++] = i;
        gid[i] = j;
        x->groups[j].n_items++;
    }
    for (int j = 0; j < x->n_groups; j++) {
        osdp_sx_group *g = &x->groups[j];
        g->n_choices = p->n_choices[rep[j]];
        g->mem = p->mem[rep[j]];
        g->units = x->prep.q + x->prep.off[rep[j]];
        g->items = malloc(sizeof *g->items * (size_t)g->n_items);
        g->hull = malloc(sizeof *g->hull * (size_t)g->n_choices);
        g->pareto = malloc(sizeof *g->pareto * (size_t)g->n_choices);
        g->pareto_hull = malloc(sizeof *g->pareto_hull * (size_t)g->n_choices * (size_t)g->n_choices);
        g->pareto_hull_n = malloc(sizeof *g->pareto_hull_n * (size_t)g->n_choices);
        if (!g->items || !g->hull || !g->pareto || !g->pareto_hull || !g->pareto_hull_n) goto done;
        g->n_items = 0;
        make_hull(g);
        x->n_edges += g->n_hull - 1;
        if (g->n_choices > x->max_choices) x->max_choices = g->n_choices;
        x->n_steps += g->n_pareto - 1;
    }
    for (int i = 0; i < n; i++) x->groups[gid[i]].items[x->groups[gid[i]].n_items++] = i;
    rc = 0;
done:
    free(gid);
    free(rep);
    return rc;
}

static int cmp_seg(const void *a, const void *b)
{
    const osdp_sx_edge *s = a, *t = b;
    if (s->eff != t->eff) return s->eff > t->eff ? -1 : 1;
    if (s->g != t->g) return s->g < t->g ? -1 : 1;
    return s->v < t->v ? -1 : s->v > t->v;
}

int osdp_sx_cmp_keyed(const void *a, const void *b)
{
    const osdp_sx_keyed *s = a, *t = b;
    if (s->key != t->key) return s->key > t->key ? -1 : 1;
    return s->id < t->id ? -1 : s->id > t->id;
}

/* Edges sorted by efficiency; the greedy plan (edges in that order, whole
 * items, while they fit); the order (distance from the break efficiency). */
int osdp_sx_plan_order(osdp_sx_context *x)
{
    int ns = 0, na = 0, rc = -1;
    long long budget = x->problem->mem_limit;
    int *at = NULL, *at_off = malloc(sizeof *at_off * (size_t)(x->n_groups + 1));
    osdp_sx_keyed *kd = malloc(sizeof *kd * (size_t)x->n_groups);
    x->edges = malloc(sizeof *x->edges * (size_t)(x->n_edges + 1));
    x->group_order = malloc(sizeof *x->group_order * (size_t)x->n_groups);
    if (!at_off || !kd || !x->edges || !x->group_order) goto done;
    for (int j = 0; j < x->n_groups; j++) {
        osdp_sx_group *g = &x->groups[j];
        at_off[j] = na;
        na += g->n_hull;
        budget -= (long long)g->n_items * g->mem[g->hull[0]];
        for (int v = 0; v + 1 < g->n_hull; v++) {
            osdp_sx_edge *s = &x->edges[ns++];
            s->g = j;
            s->v = v;
            s->dm = g->mem[g->hull[v + 1]] - g->mem[g->hull[v]];
            s->dq = g->units[g->hull[v]] - g->units[g->hull[v + 1]];
            s->eff = (double)s->dq / (double)s->dm;
        }
    }
    at_off[x->n_groups] = na;
    qsort(x->edges, (size_t)ns, sizeof *x->edges, cmp_seg);
    if (!(at = calloc((size_t)na + 1, sizeof *at))) goto done;
    for (int j = 0; j < x->n_groups; j++) at[at_off[j]] = x->groups[j].n_items;
    double brk = 0.0;
    int broken = 0;
    for (int t = 0; t < ns; t++) {
        const osdp_sx_edge *s = &x->edges[t];
        int *a = at + at_off[s->g] + s->v;
        long long take = budget / s->dm;
        if (take > a[0]) take = a[0];
        if (!broken && take < a[0]) { /* the LP's fractional edge */
            broken = 1;
            brk = s->eff;
        }
        a[0] -= (int)take;
        a[1] += (int)take;
        budget -= take * s->dm;
    }
    x->break_eff = brk;
    x->greedy_units = 0;
    for (int j = 0; j < x->n_groups; j++) {
        const osdp_sx_group *g = &x->groups[j];
        for (int v = 0; v < g->n_hull; v++) x->greedy_units += (long long)at[at_off[j] + v] * g->units[g->hull[v]];
        x->groups[j].dist = INFINITY;
    }
    for (int t = 0; t < ns; t++) {
        osdp_sx_group *g = &x->groups[x->edges[t].g];
        double d = broken ? fabs(x->edges[t].eff - brk) / brk : x->edges[t].eff;
        if (d < g->dist) g->dist = d;
    }
    for (int j = 0; j < x->n_groups; j++) kd[j] = (osdp_sx_keyed){x->groups[j].dist, j};
    qsort(kd, (size_t)x->n_groups, sizeof *kd, osdp_sx_cmp_keyed);
    for (int j = 0; j < x->n_groups; j++) x->group_order[j] = kd[j].id;
    rc = 0;
done:
    free(at);
    free(at_off);
    free(kd);
    return rc;
}


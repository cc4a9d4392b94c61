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
    return mul_less((unsigned long long)(g->q[a] - g->q[c]), (unsigned long long)(g->m[b] - g->m[a]),
                    (unsigned long long)(g->q[a] - g->q[b]), (unsigned long long)(g->m[c] - g->m[a]));
}

/* hull: the lower convex hull of the non-dominated choices, memory ascending */
static void make_hull(osdp_sx_group *g)
{
    int *h = g->hull, nh = 0;
    for (int c = 0; c < g->k; c++) { /* insertion sort by (memory, time, index) */
        int t = c;
        while (t > 0 && (g->m[h[t - 1]] > g->m[c] || (g->m[h[t - 1]] == g->m[c] && g->q[h[t - 1]] > g->q[c]))) {
            h[t] = h[t - 1];
            t--;
        }
        h[t] = c;
    }
    g->np = 0;
    for (int t = 0; t < g->k; t++)
        if (g->np == 0 || g->q[h[t]] < g->q[g->par[g->np - 1]]) g->par[g->np++] = h[t];
    for (int t = 0; t < g->np; t++) {
        int c = g->par[t];
        while (nh >= 2 && !below(g, h[nh - 2], h[nh - 1], c)) nh--;
        h[nh++] = c;
    }
    g->nh = nh;
    for (int d = 0; d < g->np; d++) { /* the same chain over par[d..] */
        int *rh = g->rh + (size_t)d * (size_t)g->k, n = 0;
        for (int t = d; t < g->np; t++) {
            int c = g->par[t];
            while (n >= 2 && !below(g, rh[n - 2], rh[n - 1], c)) n--;
            rh[n++] = c;
        }
        g->rhn[d] = n;
    }
}

int osdp_sx_make_groups(osdp_sx_context *x)
{
    const osdp_search_problem *p = x->p;
    int n = p->n_items, rc = -1;
    int *gid = malloc(sizeof *gid * (size_t)n), *rep = malloc(sizeof *rep * (size_t)n);
    x->g = calloc((size_t)n, sizeof *x->g);
    if (!gid || !rep || !x->g) goto done;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < x->ng && !same_item(p, rep[j], i)) j++;
        if (j == x->ng) rep[x->ng++] = i;
        gid[i] = j;
        x->g[j].r++;
    }
    for (int j = 0; j < x->ng; j++) {
        osdp_sx_group *g = &x->g[j];
        g->k = p->n_choices[rep[j]];
        g->m = p->mem[rep[j]];
        g->q = x->prep.q + x->prep.off[rep[j]];
        g->pos = malloc(sizeof *g->pos * (size_t)g->r);
        g->hull = malloc(sizeof *g->hull * (size_t)g->k);
        g->par = malloc(sizeof *g->par * (size_t)g->k);
        g->rh = malloc(sizeof *g->rh * (size_t)g->k * (size_t)g->k);
        g->rhn = malloc(sizeof *g->rhn * (size_t)g->k);
        if (!g->pos || !g->hull || !g->par || !g->rh || !g->rhn) goto done;
        g->r = 0;
        make_hull(g);
        x->nseg += g->nh - 1;
        if (g->k > x->kmax) x->kmax = g->k;
        x->nstp += g->np - 1;
    }
    for (int i = 0; i < n; i++) x->g[gid[i]].pos[x->g[gid[i]].r++] = i;
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
    long long budget = x->p->mem_limit;
    int *at = NULL, *at_off = malloc(sizeof *at_off * (size_t)(x->ng + 1));
    osdp_sx_keyed *kd = malloc(sizeof *kd * (size_t)x->ng);
    x->seg = malloc(sizeof *x->seg * (size_t)(x->nseg + 1));
    x->gorder = malloc(sizeof *x->gorder * (size_t)x->ng);
    if (!at_off || !kd || !x->seg || !x->gorder) goto done;
    for (int j = 0; j < x->ng; j++) {
        osdp_sx_group *g = &x->g[j];
        at_off[j] = na;
        na += g->nh;
        budget -= (long long)g->r * g->m[g->hull[0]];
        for (int v = 0; v + 1 < g->nh; v++) {
            osdp_sx_edge *s = &x->seg[ns++];
            s->g = j;
            s->v = v;
            s->dm = g->m[g->hull[v + 1]] - g->m[g->hull[v]];
            s->dq = g->q[g->hull[v]] - g->q[g->hull[v + 1]];
            s->eff = (double)s->dq / (double)s->dm;
        }
    }
    at_off[x->ng] = na;
    qsort(x->seg, (size_t)ns, sizeof *x->seg, cmp_seg);
    if (!(at = calloc((size_t)na + 1, sizeof *at))) goto done;
    for (int j = 0; j < x->ng; j++) at[at_off[j]] = x->g[j].r;
    double brk = 0.0;
    int broken = 0;
    for (int t = 0; t < ns; t++) {
        const osdp_sx_edge *s = &x->seg[t];
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
    x->brk = brk;
    x->ub = 0;
    for (int j = 0; j < x->ng; j++) {
        const osdp_sx_group *g = &x->g[j];
        for (int v = 0; v < g->nh; v++) x->ub += (long long)at[at_off[j] + v] * g->q[g->hull[v]];
        x->g[j].dist = INFINITY;
    }
    for (int t = 0; t < ns; t++) {
        osdp_sx_group *g = &x->g[x->seg[t].g];
        double d = broken ? fabs(x->seg[t].eff - brk) / brk : x->seg[t].eff;
        if (d < g->dist) g->dist = d;
    }
    for (int j = 0; j < x->ng; j++) kd[j] = (osdp_sx_keyed){x->g[j].dist, j};
    qsort(kd, (size_t)x->ng, sizeof *kd, osdp_sx_cmp_keyed);
    for (int j = 0; j < x->ng; j++) x->gorder[j] = kd[j].id;
    rc = 0;
done:
    free(at);
    free(at_off);
    free(kd);
    return rc;
}


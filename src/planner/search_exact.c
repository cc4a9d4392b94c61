/* Exact plan search by Pareto fronts meeting in the middle (osdp/search.h
 * has the tie rule and the guarantee).
 *
 * 1. Identical items (same choices, memories and times) form a group; for r
 *    of them only the multiset of choices matters.  A group's front of
 *    non-dominated (memory, time) multisets is built one item at a time,
 *    each point keeping its choice counts.  The lexicographically smallest
 *    vector for a multiset gives the group's items (ascending index)
 *    ascending choices, so of two multisets with equal sums the one with
 *    more of the smallest differing choice wins.
 * 2. Groups are ordered by the distance of their LP efficiencies from the
 *    LP's break efficiency.  Side A merges groups from the far end (clear
 *    decisions, cut at once), side B from the near end (the "core", where
 *    the combinatorics are); each step extends the side with the smaller
 *    front.  Stage s of a side holds the non-dominated states of its first s
 *    groups, with back-pointers.  A state is dropped when its memory plus
 *    the minimum of the groups off its side exceeds the limit, or when its
 *    time plus a lower bound for those groups exceeds a threshold.  The
 *    bound is the larger of the LP relaxation (convex hulls of the choices,
 *    filled by efficiency) and a Lagrangian bound with a cardinality cut
 *    (card_bound), kept in Fenwick trees so that it costs O(log).  When the
 *    sides meet, each A state is joined with the best B state that fits
 *    beside it (a two-pointer sweep).
 * 3. Threshold rounds: the threshold rises from just above the bound of the
 *    whole problem towards the time of a greedy plan.  When a joined plan
 *    with time <= threshold exists, the best joined plan is optimal: the
 *    optimum's time is no larger, so none of its states was dropped.
 * 4. Ties: states with equal (memory, time) keep the one whose partial vector
 *    is lexicographically smaller (a common completion cannot change which of
 *    two partial vectors is smaller); joined plans with equal sums are
 *    compared as whole vectors.  A dominated state never leads to the best
 *    plan: the same completion of its dominator is strictly better.
 * Sums are int64 (bytes, fixed-point time units); floating point appears only
 * in the bounds, which are loosened by 1e-10 relative (plus 2 units).
 *
 * Cost: typically well under 10 ms for 200 items.  Hard cases are cores of
 * many distinct items with almost equal efficiencies and choices on a line
 * (time exactly linear in the bytes saved): there the best plan is a
 * subset-sum question and the fronts near the limit grow to millions of
 * states (seconds). */
#include "osdp/search.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct group {
    int r, k;                  /* r identical items with k choices */
    int *pos;                  /* [r] their indices, ascending */
    const long long *m, *q;    /* memory and fixed-point time per choice */
    int *hull, nh;             /* lower convex hull of the choices, memory ascending */
    int *par, np;              /* the non-dominated choices, memory ascending */
    int *rh, *rhn;             /* [np][k], [np]: lower hull of par[d..np-1] (rest_bound) */
    long long *rpm, *rpq;      /* [np][k]: prefix sums of the other groups' edges more efficient
                                * than rh row d's edge e (e = rhn[d] - 1: all), for one build_front */
    int fsize;                 /* Pareto front of the group's multisets, memory */
    long long *fm, *fq;        /* ascending and time strictly descending */
    int *cnt;                  /* [fsize][k] choice counts */
    double dist;               /* distance from the LP's break efficiency */
} group;

typedef struct seg { /* a hull edge of one item: dm more bytes for dq fewer time units */
    double eff;
    long long dm, dq;
    int g, v;
} seg;

typedef struct step { /* between consecutive non-dominated choices of one item */
    long long dm, dq;
    long long rc;              /* ceil(dq - lam dm) when positive, else 0 */
    int g, pos_dm, pos_r;      /* positions in by_dm, by_r */
} step;

/* Fenwick trees (1-based): over the edges in efficiency order (bytes LM,
 * time units LQ; nseg + 1 long), over the steps with r > 0 by size (count
 * KC, bytes KS) and by r (count TC, r TR; nstp + 1 long) */
enum { LM, LQ, KC, KS, TC, TR, NTREE };
typedef struct fen {           /* bound data of the groups not on a side */
    long long m0, q0;          /* their base: all at the smallest-memory choice */
    long long *t[NTREE];
} fen;

typedef struct stage {
    int size, cap;
    long long *m, *q;          /* memory ascending, time strictly descending */
    int *prev, *gi;            /* state of the previous stage, front point of the group */
} stage;

typedef struct side {
    int n;                     /* groups merged */
    int *order;                /* [ng] in merge order */
    stage *st;                 /* [ng + 1] */
    fen f;
} side;

typedef struct ctx {
    const osdp_search_problem *p;
    osdp_search_prep prep;
    int ng, nseg, nstp;
    group *g;
    seg *seg;                  /* hull edges, efficiency descending */
    step *stp;                 /* steps, by group */
    int *by_dm, *by_r;         /* step ids by size ascending / by r descending */
    int *eg_off, *eg_pos;      /* group j's edges: eg_pos[eg_off[j] .. eg_off[j + 1]) */
    int *sg_off;               /* group j's steps: stp[sg_off[j] .. sg_off[j + 1]) */
    int *gorder;               /* groups, farthest from the break first */
    side s[2];                 /* A, B */
    fen full;                  /* bound data of all groups */
    double brk, lam;           /* LP break efficiency; lambda of the cardinality bound */
    long long ub;              /* time of the greedy plan */
    double thr;                /* states whose bound exceeds it are dropped */
    double next;               /* the smallest bound dropped */
    double cap;                /* the time of the best plan found but not proven */
    int *tmp[2];               /* [n] vectors for tie comparisons */
    struct pts *fpts[2];       /* [max r + 1] build_front's G_{d-1}(.), G_d(.): reused, they grow */
    int fpts_n;
    long long nodes;
} ctx;

static int grow(void **ptr, size_t elem, size_t need, int *cap)
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

static int stage_reserve(stage *s, int need)
{
    int c = s->cap, c2 = s->cap, c3 = s->cap, c4 = s->cap;
    if (grow((void **)&s->m, sizeof *s->m, (size_t)need, &c) || grow((void **)&s->q, sizeof *s->q, (size_t)need, &c2) ||
        grow((void **)&s->prev, sizeof *s->prev, (size_t)need, &c3) ||
        grow((void **)&s->gi, sizeof *s->gi, (size_t)need, &c4))
        return -1;
    s->cap = c;
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
static int below(const group *g, int a, int b, int c)
{
    return mul_less((unsigned long long)(g->q[a] - g->q[c]), (unsigned long long)(g->m[b] - g->m[a]),
                    (unsigned long long)(g->q[a] - g->q[b]), (unsigned long long)(g->m[c] - g->m[a]));
}

/* hull: the lower convex hull of the non-dominated choices, memory ascending */
static void make_hull(group *g)
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

static int make_groups(ctx *x)
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
        group *g = &x->g[j];
        g->k = p->n_choices[rep[j]];
        g->m = p->mem[rep[j]];
        g->q = x->prep.q + x->prep.off[rep[j]];
        g->pos = malloc(sizeof *g->pos * (size_t)g->r);
        g->hull = malloc(sizeof *g->hull * (size_t)g->k);
        g->par = malloc(sizeof *g->par * (size_t)g->k);
        g->rh = malloc(sizeof *g->rh * (size_t)g->k * (size_t)g->k);
        g->rhn = malloc(sizeof *g->rhn * (size_t)g->k);
        g->rpm = malloc(sizeof *g->rpm * (size_t)g->k * (size_t)g->k);
        g->rpq = malloc(sizeof *g->rpq * (size_t)g->k * (size_t)g->k);
        if (!g->pos || !g->hull || !g->par || !g->rh || !g->rhn || !g->rpm || !g->rpq) goto done;
        g->r = 0;
        make_hull(g);
        x->nseg += g->nh - 1;
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
    const seg *s = a, *t = b;
    if (s->eff != t->eff) return s->eff > t->eff ? -1 : 1;
    if (s->g != t->g) return s->g < t->g ? -1 : 1;
    return s->v < t->v ? -1 : s->v > t->v;
}

typedef struct keyed { double key; int id; } keyed;
static int cmp_keyed(const void *a, const void *b)
{
    const keyed *s = a, *t = b;
    if (s->key != t->key) return s->key > t->key ? -1 : 1;
    return s->id < t->id ? -1 : s->id > t->id;
}

/* Edges sorted by efficiency; the greedy plan (edges in that order, whole
 * items, while they fit); the order (distance from the break efficiency). */
static int plan_order(ctx *x)
{
    int ns = 0, na = 0, rc = -1;
    long long budget = x->p->mem_limit;
    int *at = NULL, *at_off = malloc(sizeof *at_off * (size_t)(x->ng + 1));
    keyed *kd = malloc(sizeof *kd * (size_t)x->ng);
    x->seg = malloc(sizeof *x->seg * (size_t)(x->nseg + 1));
    x->gorder = malloc(sizeof *x->gorder * (size_t)x->ng);
    if (!at_off || !kd || !x->seg || !x->gorder) goto done;
    for (int j = 0; j < x->ng; j++) {
        group *g = &x->g[j];
        at_off[j] = na;
        na += g->nh;
        budget -= (long long)g->r * g->m[g->hull[0]];
        for (int v = 0; v + 1 < g->nh; v++) {
            seg *s = &x->seg[ns++];
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
        const seg *s = &x->seg[t];
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
        const group *g = &x->g[j];
        for (int v = 0; v < g->nh; v++) x->ub += (long long)at[at_off[j] + v] * g->q[g->hull[v]];
        x->g[j].dist = INFINITY;
    }
    for (int t = 0; t < ns; t++) {
        group *g = &x->g[x->seg[t].g];
        double d = broken ? fabs(x->seg[t].eff - brk) / brk : x->seg[t].eff;
        if (d < g->dist) g->dist = d;
    }
    for (int j = 0; j < x->ng; j++) kd[j] = (keyed){x->g[j].dist, j};
    qsort(kd, (size_t)x->ng, sizeof *kd, cmp_keyed);
    for (int j = 0; j < x->ng; j++) x->gorder[j] = kd[j].id;
    rc = 0;
done:
    free(at);
    free(at_off);
    free(kd);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* group fronts                                                              */

static int counts_better(const int *a, const int *b, int k)
{
    for (int c = 0; c < k; c++)
        if (a[c] != b[c]) return a[c] > b[c];
    return 0;
}

static double bound(const ctx *x, const fen *f, long long m, long long q);
static void fen_remove(const ctx *x, fen *f, int j, long long r);
static void fen_copy(const ctx *x, fen *dst, const fen *src);
static double rest_bound(const ctx *x, const fen *f, const group *g, int d, long long n, long long budget);
static void rest_prefixes(const ctx *x, const fen *f, group *g);

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
 * (rest_bound) exceed the threshold; the completions of the points of one
 * G_d(j) are the same, so dominance within it is exact, and a dominator's
 * bound is no larger than the dominated point's.  Why not one item at a
 * time (front(j) = Pareto(front(j-1) + each choice)): there a partial
 * multiset's r - j remaining items are free, and the LP completes almost
 * any partial multiset of near-collinear choices (split operators, k of g
 * slices ZDP) fractionally, so intermediate fronts held millions of points
 * for final fronts of hundreds. */
typedef struct pts { int n, cap; long long *m, *q; int *c; } pts; /* memory ascending, time descending */

static int pts_reserve(pts *v, size_t need, int k)
{
    int c1 = v->cap, c2 = v->cap, c3 = v->cap;
    if (grow((void **)&v->m, sizeof *v->m, need, &c1) || grow((void **)&v->q, sizeof *v->q, need, &c2) ||
        grow((void **)&v->c, sizeof *v->c * (size_t)k, need, &c3))
        return -1;
    v->cap = c1;
    return 0;
}

static void pts_free(pts *v)
{
    free(v->m); free(v->q); free(v->c);
    v->m = v->q = NULL;
    v->c = NULL;
    v->n = v->cap = 0;
}

/* out = Pareto(a u (b + choice c)) under the bound of G_d(j) (j items);
 * out must be neither a nor b */
static int front_merge(ctx *x, const group *g, const fen *f, int d, long long j, long long cap, const pts *a,
                       const pts *b, int c, pts *out)
{
    const int k = g->k, last = d == g->np - 1 && j == g->r;
    const long long left = g->r - j, low = g->m[g->par[d]]; /* the rest's smallest memory each */
    int ia = 0, ib = 0;
    out->n = 0;
    if (pts_reserve(out, (size_t)(a->n + (b ? b->n : 0)) + 1, k)) return -1;
    for (;;) {
        long long m, q;
        const int *cnt;
        int from_b;
        int has_a = ia < a->n, has_b = b && ib < b->n;
        if (!has_a && !has_b) break;
        long long mb = has_b ? b->m[ib] + g->m[c] : 0, qb = has_b ? b->q[ib] + g->q[c] : 0;
        from_b = has_b && (!has_a || mb < a->m[ia] || (mb == a->m[ia] && qb < a->q[ia]));
        if (has_a && has_b && mb == a->m[ia] && qb == a->q[ia]) { /* a tie: the tie rule's counts decide */
            int cb[64], *cc = k <= 64 ? cb : NULL;
            if (cc) {
                memcpy(cc, b->c + (size_t)ib * (size_t)k, sizeof *cc * (size_t)k);
                cc[c]++;
                from_b = counts_better(cc, a->c + (size_t)ia * (size_t)k, k);
            }
        }
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
        double lb = last ? bound(x, f, m, q) : (double)q + rest_bound(x, f, g, d, left, x->p->mem_limit - m);
        if (lb > x->thr) {
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
static int build_front(ctx *x, int gi, long long cap, fen *f)
{
    group *g = &x->g[gi];
    const int k = g->k, r = g->r;
    int rc = -1;
    if (x->fpts_n < r + 1) { /* scratch for every group: the largest r */
        for (int t = 0; t < 2; t++) {
            for (int j = 0; x->fpts[t] && j < x->fpts_n; j++) pts_free(&x->fpts[t][j]);
            free(x->fpts[t]);
            x->fpts[t] = calloc((size_t)r + 1, sizeof *x->fpts[t]);
        }
        x->fpts_n = x->fpts[0] && x->fpts[1] ? r + 1 : 0;
    }
    pts *prev = x->fpts[0], *cur = x->fpts[1];
    free(g->fm); free(g->fq); free(g->cnt);
    g->fm = g->fq = NULL;
    g->cnt = NULL;
    g->fsize = 0;
    if (!prev || !cur || pts_reserve(&prev[0], 1, k)) goto done;
    for (int j = 0; j <= r; j++) prev[j].n = cur[j].n = 0;
    fen_copy(x, f, &x->full);
    fen_remove(x, f, gi, r);
    rest_prefixes(x, f, g);
    prev[0].n = 1; /* G_{-1}(0): no item yet */
    prev[0].m[0] = prev[0].q[0] = 0;
    memset(prev[0].c, 0, sizeof *prev[0].c * (size_t)k);
    for (int d = 0; d < g->np; d++) {
        for (int j = 0; j <= r; j++)
            if (front_merge(x, g, f, d, j, cap, &prev[j], j > 0 ? &cur[j - 1] : NULL, g->par[d], &cur[j])) goto done;
        pts *t = prev;
        prev = cur;
        cur = t;
    }
    const pts *F = &prev[r]; /* the front: G_{np-1}(r) */
    g->fm = malloc(sizeof *g->fm * (size_t)(F->n + 1));
    g->fq = malloc(sizeof *g->fq * (size_t)(F->n + 1));
    g->cnt = malloc(sizeof *g->cnt * (size_t)(F->n + 1) * (size_t)k);
    if (!g->fm || !g->fq || !g->cnt) goto done;
    memcpy(g->fm, F->m, sizeof *g->fm * (size_t)F->n);
    memcpy(g->fq, F->q, sizeof *g->fq * (size_t)F->n);
    memcpy(g->cnt, F->c, sizeof *g->cnt * (size_t)F->n * (size_t)k);
    g->fsize = F->n;
    rc = 0;
done:
    return rc;
}

/* ------------------------------------------------------------------------ */
/* bounds for the groups not on a side                                       */

/* Removing a group costs O(log) per edge and step, a bound O(log). */
static void fen_add(long long *t, int n, int p, long long v)
{
    for (; p <= n; p += p & -p) t[p] += v;
}

static int fen_len(const ctx *x, int k) { return k < KC ? x->nseg : x->nstp; }

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
static double card_bound(const ctx *x, const fen *f, long long budget, long long q0)
{
    long long sz, K, c2, top;
    int p = fen_find(f->t[KS], f->t[KC], x->nstp, budget, &sz, &K);
    if (p < x->nstp) {
        const step *e = &x->stp[x->by_dm[p]];
        long long more = (budget - sz) / e->dm;
        K += more < x->g[e->g].r ? more : x->g[e->g].r;
    }
    p = fen_find(f->t[TC], f->t[TR], x->nstp, K, &c2, &top);
    double t = (double)top;
    if (p < x->nstp) t += (double)(K - c2) * (double)x->stp[x->by_r[p]].rc;
    return (double)q0 - x->lam * (double)budget - t;
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

/* edges with efficiency above eff (x->seg is efficiency descending) */
static int seg_count_above(const ctx *x, double eff)
{
    int lo = 0, hi = x->nseg;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (x->seg[mid].eff > eff) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* g->rpm, g->rpq for the bound data f (f fixed during one build_front) */
static void rest_prefixes(const ctx *x, const fen *f, group *g)
{
    for (int d = 0; d < g->np; d++) {
        const int *h = g->rh + (size_t)d * (size_t)g->k, nh = g->rhn[d];
        for (int e = 0; e < nh; e++) {
            int P = x->nseg;
            if (e + 1 < nh)
                P = seg_count_above(x, (double)(g->q[h[e]] - g->q[h[e + 1]]) / (double)(g->m[h[e + 1]] - g->m[h[e]]));
            size_t at = (size_t)d * (size_t)g->k + (size_t)e;
            fen_prefix(f->t[LM], f->t[LQ], P, &g->rpm[at], &g->rpq[at]);
        }
    }
}

/* The LP relaxation's time for n items of group g restricted to its choices
 * par[d..np-1] together with the groups in f, within `budget` bytes: the
 * restricted items' hull edges (g->rh row d, n copies each) merged by
 * efficiency with f's edges (their prefix sums: rest_prefixes).  A lower
 * bound on any such completion (+inf when even the smallest memories do
 * not fit). */
static double rest_bound(const ctx *x, const fen *f, const group *g, int d, long long n, long long budget)
{
    const int *h = g->rh + (size_t)d * (size_t)g->k, nh = g->rhn[d];
    budget -= n * g->m[h[0]] + f->m0;
    if (budget < 0) return INFINITY;
    double base = (double)(n * g->q[h[0]] + f->q0), gain = 0;
    long long used = 0; /* bytes of restricted edges taken */
    for (int e = 0; e < nh; e++) { /* e = nh - 1: no restricted edge left */
        long long dm = 0, dq = 0;
        double eff = -INFINITY;
        if (e + 1 < nh) {
            dm = g->m[h[e + 1]] - g->m[h[e]];
            dq = g->q[h[e]] - g->q[h[e + 1]];
            eff = (double)dq / (double)dm;
        }
        const long long Mp = g->rpm[(size_t)d * (size_t)g->k + (size_t)e], Qp = g->rpq[(size_t)d * (size_t)g->k + (size_t)e];
        if (Mp + used > budget) { /* the budget runs out among f's edges */
            long long cm, cq;
            int p = fen_find(f->t[LM], f->t[LQ], x->nseg, budget - used, &cm, &cq);
            gain += (double)cq;
            if (p < x->nseg) gain += (double)(budget - used - cm) * ((double)x->seg[p].dq / (double)x->seg[p].dm);
            return base - gain;
        }
        if (e + 1 == nh) return base - gain - (double)Qp;
        if (Mp + used + n * dm > budget) return base - gain - (double)Qp - (double)(budget - Mp - used) * eff;
        used += n * dm;
        gain += (double)(n * dq);
    }
    return base - gain;
}

/* a lower bound on the time of any plan extending a state (m, q): the
 * larger of the LP bound and the cardinality bound */
static double bound(const ctx *x, const fen *f, long long m, long long q)
{
    long long budget = x->p->mem_limit - m - f->m0, cm, cq;
    if (budget < 0) return INFINITY;
    int p = fen_find(f->t[LM], f->t[LQ], x->nseg, budget, &cm, &cq);
    double lb = (double)(q + f->q0 - cq);
    if (p < x->nseg) lb -= (double)(budget - cm) * ((double)x->seg[p].dq / (double)x->seg[p].dm);
    double cb = card_bound(x, f, budget, q + f->q0);
    return cb > lb ? cb : lb;
}

/* takes r copies of group j's items out of the bound data f */
static void fen_remove(const ctx *x, fen *f, int j, long long r)
{
    const group *g = &x->g[j];
    f->m0 -= r * g->m[g->hull[0]];
    f->q0 -= r * g->q[g->hull[0]];
    for (int t = x->eg_off[j]; t < x->eg_off[j + 1]; t++) {
        int p = x->eg_pos[t];
        fen_add(f->t[LM], x->nseg, p + 1, -r * x->seg[p].dm);
        fen_add(f->t[LQ], x->nseg, p + 1, -r * x->seg[p].dq);
    }
    for (int t = x->sg_off[j]; t < x->sg_off[j + 1]; t++) {
        const step *e = &x->stp[t];
        if (e->rc <= 0) continue;
        fen_add(f->t[KC], x->nstp, e->pos_dm + 1, -r);
        fen_add(f->t[KS], x->nstp, e->pos_dm + 1, -r * e->dm);
        fen_add(f->t[TC], x->nstp, e->pos_r + 1, -r);
        fen_add(f->t[TR], x->nstp, e->pos_r + 1, -r * e->rc);
    }
}

static void fen_copy(const ctx *x, fen *dst, const fen *src)
{
    for (int k = 0; k < NTREE; k++) memcpy(dst->t[k], src->t[k], sizeof *src->t[k] * (size_t)(fen_len(x, k) + 1));
    dst->m0 = src->m0;
    dst->q0 = src->q0;
}

static int fen_alloc(const ctx *x, fen *f)
{
    for (int k = 0; k < NTREE; k++)
        if (!(f->t[k] = calloc((size_t)fen_len(x, k) + 1, sizeof *f->t[k]))) return -1;
    return 0;
}

static void fen_free(fen *f)
{
    for (int k = 0; k < NTREE; k++) free(f->t[k]);
}

/* x->full: the trees of every group, steps' r for lambda = x->lam */
static void full_trees(ctx *x, keyed *kd)
{
    fen *f = &x->full;
    for (int t = 0; t < x->nstp; t++) {
        step *e = &x->stp[t];
        double r = (double)e->dq - x->lam * (double)e->dm;
        e->rc = r > 0 ? (long long)ceil(r) : 0; /* rounded up: the bound stays valid */
        kd[t] = (keyed){r, t};
    }
    qsort(kd, (size_t)x->nstp, sizeof *kd, cmp_keyed);
    for (int k = KC; k < NTREE; k++) memset(f->t[k], 0, sizeof *f->t[k] * (size_t)(x->nstp + 1));
    for (int t = 0; t < x->nstp; t++) {
        x->by_r[t] = kd[t].id;
        step *e = &x->stp[kd[t].id];
        e->pos_r = t;
        if (e->rc <= 0) continue;
        long long r = x->g[e->g].r;
        f->t[KC][e->pos_dm + 1] = r;
        f->t[KS][e->pos_dm + 1] = r * e->dm;
        f->t[TC][t + 1] = r;
        f->t[TR][t + 1] = r * e->rc;
    }
    for (int k = KC; k < NTREE; k++) fen_build(f->t[k], x->nstp);
}

/* Steps, group lists, the LP trees, and lambda: of a grid of fractions of
 * the break efficiency, the one whose cardinality bound of the whole problem
 * is the largest. */
static int setup_bounds(ctx *x)
{
    int ne = x->nseg, ns = 0;
    keyed *kd = malloc(sizeof *kd * (size_t)(x->nstp + 1));
    x->stp = malloc(sizeof *x->stp * (size_t)(x->nstp + 1));
    x->by_dm = malloc(sizeof *x->by_dm * (size_t)(x->nstp + 1));
    x->by_r = malloc(sizeof *x->by_r * (size_t)(x->nstp + 1));
    x->eg_off = calloc((size_t)x->ng + 1, sizeof *x->eg_off);
    x->sg_off = calloc((size_t)x->ng + 1, sizeof *x->sg_off);
    x->eg_pos = malloc(sizeof *x->eg_pos * (size_t)(ne + 1));
    int *fill = calloc((size_t)x->ng + 1, sizeof *fill);
    if (!kd || !fill || !x->stp || !x->by_dm || !x->by_r || !x->eg_off || !x->sg_off || !x->eg_pos ||
        fen_alloc(x, &x->full) || fen_alloc(x, &x->s[0].f) || fen_alloc(x, &x->s[1].f)) {
        free(kd);
        free(fill);
        return -1;
    }
    for (int j = 0; j < x->ng; j++) {
        const group *g = &x->g[j];
        x->sg_off[j] = ns;
        for (int v = 0; v + 1 < g->np; v++)
            x->stp[ns++] = (step){g->m[g->par[v + 1]] - g->m[g->par[v]], g->q[g->par[v]] - g->q[g->par[v + 1]], 0, j,
                                  0, 0};
    }
    x->sg_off[x->ng] = ns;
    for (int t = 0; t < ne; t++) x->eg_off[x->seg[t].g + 1]++;
    for (int j = 0; j < x->ng; j++) x->eg_off[j + 1] += x->eg_off[j];
    memcpy(fill, x->eg_off, sizeof *fill * (size_t)x->ng);
    for (int t = 0; t < ne; t++) x->eg_pos[fill[x->seg[t].g]++] = t;
    for (int t = 0; t < ns; t++) kd[t] = (keyed){-(double)x->stp[t].dm, t};
    qsort(kd, (size_t)ns, sizeof *kd, cmp_keyed);
    for (int t = 0; t < ns; t++) {
        x->by_dm[t] = kd[t].id;
        x->stp[kd[t].id].pos_dm = t;
    }
    fen *f = &x->full;
    f->m0 = f->q0 = 0;
    for (int j = 0; j < x->ng; j++) {
        f->m0 += (long long)x->g[j].r * x->g[j].m[x->g[j].hull[0]];
        f->q0 += (long long)x->g[j].r * x->g[j].q[x->g[j].hull[0]];
    }
    for (int t = 0; t < ne; t++) {
        f->t[LM][t + 1] = x->g[x->seg[t].g].r * x->seg[t].dm;
        f->t[LQ][t + 1] = x->g[x->seg[t].g].r * x->seg[t].dq;
    }
    fen_build(f->t[LM], ne);
    fen_build(f->t[LQ], ne);
    double best = -INFINITY, best_f = 1.0; /* lambda / brk: eighths, then halving steps */
    for (int t = 0; t < 15; t++) {
        double fr = t < 9 ? t / 8.0 : best_f + ((t - 9) % 2 ? -1 : 1) * ldexp(1.0, -4 - (t - 9) / 2);
        if (fr < 0.0 || fr > 1.0) continue;
        x->lam = x->brk * fr;
        full_trees(x, kd);
        double b = card_bound(x, f, x->p->mem_limit - f->m0, f->q0);
        if (b > best) {
            best = b;
            best_f = fr;
        }
    }
    x->lam = x->brk * best_f;
    full_trees(x, kd);
    free(kd);
    free(fill);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* merging                                                                   */

/* 1 when state a of stage s of side S has a lexicographically smaller
 * partial vector than state b (equal sums): the first differing item decides */
static int lex_better(const ctx *x, const side *S, int s, int a, int b)
{
    int best_pos = INT_MAX, a_wins = 0;
    for (int t = s; t >= 1 && a != b; t--) {
        const stage *T = &S->st[t];
        if (T->gi[a] != T->gi[b]) {
            const group *g = &x->g[S->order[t - 1]];
            const int *ca = g->cnt + (size_t)T->gi[a] * (size_t)g->k, *cb = g->cnt + (size_t)T->gi[b] * (size_t)g->k;
            int c = 0, j = 0;
            while (c < g->k && ca[c] == cb[c]) j += ca[c++];
            if (c < g->k) {
                j += ca[c] < cb[c] ? ca[c] : cb[c];
                if (g->pos[j] < best_pos) {
                    best_pos = g->pos[j];
                    a_wins = ca[c] > cb[c];
                }
            }
        }
        a = T->prev[a];
        b = T->prev[b];
    }
    return a_wins;
}

/* the next entry >= a of list l (stage state + group point l) that survives */
static int advance(ctx *x, const side *S, const stage *A, const group *g, int l, int a)
{
    for (; a < A->size; a++) {
        long long m = A->m[a] + g->fm[l];
        x->nodes++;
        if (m + S->f.m0 > x->p->mem_limit) return A->size; /* memory ascends */
        double lb = bound(x, &S->f, m, A->q[a] + g->fq[l]);
        if (lb <= x->thr) return a;
        if (lb < x->next) x->next = lb;
    }
    return A->size;
}

static int heap_less(const stage *A, const group *g, const int *cur, int u, int v)
{
    long long mu = A->m[cur[u]] + g->fm[u], mv = A->m[cur[v]] + g->fm[v];
    if (mu != mv) return mu < mv;
    return A->q[cur[u]] + g->fq[u] < A->q[cur[v]] + g->fq[v];
}

static void sift_down(const stage *A, const group *g, const int *cur, int *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, s = i;
        if (l < n && heap_less(A, g, cur, h[l], h[s])) s = l;
        if (l + 1 < n && heap_less(A, g, cur, h[l + 1], h[s])) s = l + 1;
        if (s == i) return;
        int t = h[i];
        h[i] = h[s];
        h[s] = t;
        i = s;
    }
}

/* stage s of side S = Pareto(stage s-1 + front of its s-th group): a heap
 * merge of one memory-ascending list per front point */
static int merge_stage(ctx *x, side *S, int s)
{
    const stage *A = &S->st[s - 1];
    stage *B = &S->st[s];
    const group *g = &x->g[S->order[s - 1]];
    int L = g->fsize, hn = 0, nk = 0, rc = -1;
    int *cur = malloc(sizeof *cur * (size_t)L), *h = malloc(sizeof *h * (size_t)L);
    if (!cur || !h || stage_reserve(B, 64)) goto done;
    for (int l = 0; l < L; l++) {
        cur[l] = advance(x, S, A, g, l, 0);
        if (cur[l] < A->size) h[hn++] = l;
    }
    for (int i = hn / 2 - 1; i >= 0; i--) sift_down(A, g, cur, h, hn, i);
    while (hn > 0) {
        int l = h[0], a = cur[l];
        long long m = A->m[a] + g->fm[l], q = A->q[a] + g->fq[l];
        if (stage_reserve(B, nk + 2)) goto done;
        int tie = nk > 0 && m == B->m[nk - 1] && q == B->q[nk - 1];
        if (tie || nk == 0 || q < B->q[nk - 1]) {
            B->m[nk] = m;
            B->q[nk] = q;
            B->prev[nk] = a;
            B->gi[nk] = l;
            if (!tie) nk++;
            else if (lex_better(x, S, s, nk, nk - 1)) {
                B->prev[nk - 1] = a;
                B->gi[nk - 1] = l;
            }
        }
        cur[l] = advance(x, S, A, g, l, a + 1);
        if (cur[l] >= A->size) h[0] = h[--hn];
        sift_down(A, g, cur, h, hn, 0);
    }
    rc = 0;
done:
    B->size = nk;
    free(cur);
    free(h);
    return rc;
}

/* the choices of the groups on side S, from state e of its last stage */
static void unwind(const ctx *x, const side *S, int e, int *choice)
{
    for (int s = S->n; s >= 1; s--) {
        const group *g = &x->g[S->order[s - 1]];
        const int *cnt = g->cnt + (size_t)S->st[s].gi[e] * (size_t)g->k;
        for (int c = 0, j = 0; c < g->k; c++)
            for (int t = 0; t < cnt[c]; t++) choice[g->pos[j++]] = c;
        e = S->st[s].prev[e];
    }
}

/* One threshold round.  Returns -1 on allocation failure, else 0 with
 * *found = 1 and the best joined plan in best[0..1] when one exists. */
static int round_at(ctx *x, int *found, int best[2])
{
    side *A = &x->s[0], *B = &x->s[1];
    int lo = 0, hi = x->ng - 1, n = x->p->n_items;
    for (int t = 0; t < 2; t++) {
        x->s[t].n = 0;
        fen_copy(x, &x->s[t].f, &x->full);
    }
    *found = 0;
    while (lo <= hi) {
        side *S = A->st[A->n].size <= B->st[B->n].size ? A : B;
        int j = S == A ? x->gorder[lo++] : x->gorder[hi--];
        S->order[S->n++] = j;
        fen_remove(x, &S->f, j, x->g[j].r);
        if (merge_stage(x, S, S->n)) return -1;
        if (S->st[S->n].size == 0) return 0;
    }
    const stage *a = &A->st[A->n], *b = &B->st[B->n];
    long long bq = 0, bm = 0;
    for (int i = 0, j = b->size - 1; i < a->size; i++) { /* a: memory ascending */
        while (j >= 0 && a->m[i] + b->m[j] > x->p->mem_limit) j--;
        if (j < 0) break;
        long long q = a->q[i] + b->q[j], m = a->m[i] + b->m[j];
        x->nodes++;
        int better = !*found || q < bq || (q == bq && m < bm);
        if (!better && q == bq && m == bm) {
            unwind(x, A, i, x->tmp[0]);
            unwind(x, B, j, x->tmp[0]);
            unwind(x, A, best[0], x->tmp[1]);
            unwind(x, B, best[1], x->tmp[1]);
            int t = 0;
            while (t < n && x->tmp[0][t] == x->tmp[1][t]) t++;
            better = t < n && x->tmp[0][t] < x->tmp[1][t];
        }
        if (better) {
            *found = 1;
            bq = q;
            bm = m;
            best[0] = i;
            best[1] = j;
        }
    }
    if (*found && (double)bq > x->thr) { /* not proven optimal; the next round will be */
        *found = 0;
        x->cap = (double)bq;
    }
    return 0;
}

osdp_status osdp_search_exact(const osdp_search_problem *p, osdp_search_result *r)
{
    ctx x;
    memset(&x, 0, sizeof x);
    x.p = p;
    osdp_status st = osdp_search_prepare(p, r, &x.prep);
    if (st != OSDP_OK) return st;
    int n = p->n_items;
    if (n == 0) {
        osdp_search_prep_free(&x.prep);
        osdp_search_finish(p, r);
        return OSDP_OK;
    }
    st = OSDP_ERR_OOM;
    if (make_groups(&x) || plan_order(&x)) goto done;
    x.tmp[0] = malloc(sizeof *x.tmp[0] * (size_t)n);
    x.tmp[1] = malloc(sizeof *x.tmp[1] * (size_t)n);
    if (!x.tmp[0] || !x.tmp[1] || setup_bounds(&x)) goto done;
    for (int t = 0; t < 2; t++) {
        side *S = &x.s[t];
        S->order = malloc(sizeof *S->order * (size_t)x.ng);
        S->st = calloc((size_t)x.ng + 1, sizeof *S->st);
        if (!S->order || !S->st || stage_reserve(&S->st[0], 1)) goto done;
        S->st[0].size = 1;
        S->st[0].m[0] = S->st[0].q[0] = 0;
        S->st[0].prev[0] = S->st[0].gi[0] = -1;
    }
    /* slack: far above the rounding in the bounds (a few ulps of 2^62 per
     * term), far below anything that matters (2^60 units is the slowest plan) */
    double lb0 = bound(&x, &x.full, 0, 0), ub = (double)x.ub;
    double slack = 1e-10 * ub + 0x1p14 * (x.nseg + x.nstp + 16);
    int found = 0, best[2] = {0, 0};
    double front_thr = -INFINITY, front_next = INFINITY; /* the fronts' threshold, their smallest bound dropped */
    for (double thr = lb0 + 0x1p-16 * (ub - lb0); !found;) {
        int final = !(thr < ub);
        x.thr = (final ? ub : thr) + slack;
        x.next = x.cap = INFINITY;
        if (x.thr > front_thr) {
            /* the groups' fronts, built for a threshold 16 times as far
             * (a front for a larger threshold holds every point a smaller
             * one needs), so that most rounds reuse them; s[0].f: scratch */
            double want = lb0 + 16 * (x.thr - lb0);
            front_thr = want < ub + slack ? want : ub + slack;
            if (front_thr < x.thr) front_thr = x.thr;
            double round_thr = x.thr;
            x.thr = front_thr;
            for (int j = 0; j < x.ng; j++) {
                const group *g = &x.g[j];
                if (build_front(&x, j, p->mem_limit - (x.prep.min_mem - (long long)g->r * g->m[g->hull[0]]), &x.s[0].f))
                    goto done;
            }
            front_next = x.next;
            x.thr = round_thr;
            x.next = INFINITY;
        }
        if (front_next < x.next) x.next = front_next;
        if (round_at(&x, &found, best)) goto done;
        if (final && !found) {
            st = osdp_error_set(OSDP_ERR_INTERNAL, "plan search (exact): the greedy plan was lost");
            goto done;
        }
        /* at least 4 times the distance and at least to the smallest bound
         * dropped (below that the round would repeat), but no further than a
         * plan already found (at that threshold it survives) */
        thr = lb0 + 4 * (thr - lb0);
        if (x.next > thr) thr = x.next;
        if (x.cap < thr) thr = x.cap;
    }
    unwind(&x, &x.s[0], best[0], r->choice);
    unwind(&x, &x.s[1], best[1], r->choice);
    r->nodes = x.nodes;
    osdp_search_finish(p, r);
    st = OSDP_OK;
done:
    if (st == OSDP_ERR_OOM) osdp_error_set(OSDP_ERR_OOM, "plan search (exact): out of memory");
    for (int j = 0; x.g && j < x.ng; j++) {
        group *g = &x.g[j];
        free(g->pos); free(g->hull); free(g->par); free(g->rh); free(g->rhn); free(g->rpm); free(g->rpq); free(g->fm); free(g->fq); free(g->cnt);
    }
    for (int t = 0; t < 2; t++) {
        for (int s = 0; x.s[t].st && s <= x.ng; s++) {
            stage *T = &x.s[t].st[s];
            free(T->m); free(T->q); free(T->prev); free(T->gi);
        }
        free(x.s[t].st);
        free(x.s[t].order);
        fen_free(&x.s[t].f);
        free(x.tmp[t]);
    }
    fen_free(&x.full);
    for (int t = 0; t < 2; t++) {
        for (int j = 0; x.fpts[t] && j < x.fpts_n; j++) pts_free(&x.fpts[t][j]);
        free(x.fpts[t]);
    }
    free(x.g); free(x.seg); free(x.gorder); free(x.stp);
    free(x.by_dm); free(x.by_r); free(x.eg_off); free(x.eg_pos); free(x.sg_off);
    osdp_search_prep_free(&x.prep);
    return st;
}

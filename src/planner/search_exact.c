/* Exact plan search by Pareto fronts (see osdp/search.h for the tie rule).
 *
 * 1. Identical items (same number of choices, same memories, same times)
 *    form a group.  For a group of r items only the multiset of choices
 *    matters; the front of non-dominated (memory, time) multisets is built
 *    one item at a time, keeping for each point its choice counts.  Within a
 *    group the lexicographically smallest vector for a multiset gives the
 *    group's items (ascending index) ascending choices, so between two
 *    multisets with equal sums the one with more of the smallest differing
 *    choice wins.
 * 2. Groups are merged one at a time: stage s holds the non-dominated
 *    (memory, time) states of the first s groups, each with a back-pointer.
 *    A state is dropped when its memory plus the remaining groups' minimum
 *    exceeds the limit, or when its time plus the LP-relaxation bound of the
 *    remaining groups (convex hulls of their choices, filled greedily by
 *    efficiency) exceeds the time of a greedy plan (loosened by 1e-10).
 *    Groups far from the LP's break efficiency are merged first, so that
 *    wrong decisions for them are cut at once.
 * 3. States with equal (memory, time) are resolved by the tie rule: the one
 *    whose partial vector (over the items merged so far) is lexicographically
 *    smaller is kept.  That is exact: a common completion cannot change
 *    which of two partial vectors is smaller.  A dominated state never
 *    leads to the best plan, since the same completion of its dominator is
 *    strictly better by rule 1 or 2.
 * All sums are int64 (memory bytes, fixed-point time units), so the result
 * is exactly the brute-force answer. */
#include "osdp/search.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef SEARCH_DEBUG
#include <stdio.h>
#endif

typedef struct group {
    int r, k;                  /* r identical items with k choices */
    int *pos;                  /* [r] their indices, ascending */
    const long long *m, *q;    /* memory and fixed-point time per choice */
    int *hull, nh;             /* lower convex hull of the choices, memory ascending */
    int fsize;                 /* Pareto front of the group's multisets: */
    long long *fm, *fq;        /* memory ascending, time strictly descending */
    int *cnt;                  /* [fsize][k] choice counts */
    double dist;               /* merge order key */
} group;

typedef struct seg { /* one hull edge of one item: dm more bytes for dq fewer time units */
    double eff;
    long long dm, dq;
    int g, v;
} seg;

typedef struct stage {
    int size, cap;
    long long *m, *q;
    int *prev, *gi;            /* state of the previous stage, front point of the group */
} stage;

typedef struct ctx {
    const osdp_search_problem *p;
    osdp_search_prep prep;
    int ng;
    group *g;
    int *order, *rank;         /* merge order of the groups, and its inverse */
    seg *seg;
    int nseg;
    long long b_m0, b_q0;      /* LP bound of the groups not merged yet: their base, */
    int b_len;                 /* and their hull edges in efficiency order: */
    long long *b_cm, *b_cq;    /* [b_len + 1] cumulative bytes / time units */
    int *b_sid;                /* [b_len] edge ids */
    long long ub;              /* time of the greedy plan */
    double thr;                /* states whose bound exceeds this are dropped */
    stage *st;                 /* [ng + 1] */
    long long nodes;
} ctx;

static osdp_status oom(void) { return osdp_error_set(OSDP_ERR_OOM, "plan search (exact): out of memory"); }

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
    int c = s->cap;
    if (grow((void **)&s->m, sizeof *s->m, (size_t)need, &c)) return -1;
    c = s->cap;
    if (grow((void **)&s->q, sizeof *s->q, (size_t)need, &c)) return -1;
    c = s->cap;
    if (grow((void **)&s->prev, sizeof *s->prev, (size_t)need, &c)) return -1;
    c = s->cap;
    if (grow((void **)&s->gi, sizeof *s->gi, (size_t)need, &c)) return -1;
    s->cap = c;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* groups and hulls                                                          */

static int same_item(const osdp_search_problem *p, int a, int b)
{
    int k = p->n_choices[a];
    if (k != p->n_choices[b]) return 0;
    if (p->mem[a] == p->mem[b] && p->time[a] == p->time[b]) return 1;
    for (int c = 0; c < k; c++)
        if (p->mem[a][c] != p->mem[b][c] || p->time[a][c] != p->time[b][c]) return 0;
    return 1;
}

static const long long *g_sort_m, *g_sort_q;
static int cmp_choice(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    if (g_sort_m[x] != g_sort_m[y]) return g_sort_m[x] < g_sort_m[y] ? -1 : 1;
    if (g_sort_q[x] != g_sort_q[y]) return g_sort_q[x] < g_sort_q[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int make_groups(ctx *x)
{
    const osdp_search_problem *p = x->p;
    int n = p->n_items;
    int *gid = malloc(sizeof *gid * (size_t)n), *rep = malloc(sizeof *rep * (size_t)n);
    x->g = calloc((size_t)n, sizeof *x->g);
    if (!gid || !rep || !x->g) goto fail;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < x->ng && !same_item(p, rep[j], i)) j++;
        if (j == x->ng) rep[x->ng++] = i;
        gid[i] = j;
        x->g[j].r++;
    }
    for (int j = 0; j < x->ng; j++) {
        group *g = &x->g[j];
        int i = rep[j];
        g->k = p->n_choices[i];
        g->m = p->mem[i];
        g->q = x->prep.q + x->prep.off[i];
        g->pos = malloc(sizeof *g->pos * (size_t)g->r);
        g->hull = malloc(sizeof *g->hull * (size_t)g->k);
        if (!g->pos || !g->hull) goto fail;
        g->r = 0;
        /* lower convex hull of the non-dominated choices (monotone chain) */
        for (int c = 0; c < g->k; c++) g->hull[c] = c;
        g_sort_m = g->m;
        g_sort_q = g->q;
        qsort(g->hull, (size_t)g->k, sizeof *g->hull, cmp_choice);
        int nh = 0;
        for (int t = 0; t < g->k; t++) {
            int c = g->hull[t];
            if (nh > 0 && g->q[c] >= g->q[g->hull[nh - 1]]) continue; /* dominated */
            while (nh >= 2) {
                int a = g->hull[nh - 2], b = g->hull[nh - 1];
                long double lhs = (long double)(g->q[b] - g->q[a]) * (long double)(g->m[c] - g->m[a]);
                long double rhs = (long double)(g->q[c] - g->q[a]) * (long double)(g->m[b] - g->m[a]);
                if (lhs < rhs) break; /* b strictly below the chord a-c */
                nh--;
            }
            g->hull[nh++] = c;
        }
        g->nh = nh;
        x->nseg += nh - 1;
    }
    for (int i = 0; i < n; i++) {
        group *g = &x->g[gid[i]];
        g->pos[g->r++] = i;
    }
    free(gid);
    free(rep);
    return 0;
fail:
    free(gid);
    free(rep);
    return -1;
}

static int cmp_seg(const void *a, const void *b)
{
    const seg *s = a, *t = b;
    if (s->eff != t->eff) return s->eff > t->eff ? -1 : 1;
    if (s->g != t->g) return s->g < t->g ? -1 : 1;
    return s->v < t->v ? -1 : s->v > t->v;
}

static const group *g_sort_groups;
static int cmp_order(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    double dx = g_sort_groups[x].dist, dy = g_sort_groups[y].dist;
    if (dx != dy) return dx > dy ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Hull edges sorted by efficiency; the greedy plan (upper bound); the merge
 * order (distance of each group's edges from the LP's break efficiency). */
static int plan_merges(ctx *x)
{
    x->seg = malloc(sizeof *x->seg * (size_t)(x->nseg > 0 ? x->nseg : 1));
    int *at = NULL, *at_off = malloc(sizeof *at_off * (size_t)(x->ng + 1));
    x->order = malloc(sizeof *x->order * (size_t)x->ng);
    x->rank = malloc(sizeof *x->rank * (size_t)x->ng);
    if (!x->seg || !at_off || !x->order || !x->rank) goto fail;
    int ns = 0, na = 0;
    long long budget = x->p->mem_limit;
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
    at = calloc((size_t)(na > 0 ? na : 1), sizeof *at);
    if (!at) goto fail;
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
    long long ub = 0;
    for (int j = 0; j < x->ng; j++) {
        const group *g = &x->g[j];
        for (int v = 0; v < g->nh; v++) ub += (long long)at[at_off[j] + v] * g->q[g->hull[v]];
        x->g[j].dist = INFINITY;
    }
    x->ub = ub;
    for (int t = 0; t < ns; t++) {
        group *g = &x->g[x->seg[t].g];
        double d = broken ? fabs(x->seg[t].eff - brk) / brk : x->seg[t].eff;
        if (d < g->dist) g->dist = d;
    }
    for (int j = 0; j < x->ng; j++) x->order[j] = j;
    g_sort_groups = x->g;
    qsort(x->order, (size_t)x->ng, sizeof *x->order, cmp_order);
    for (int s = 0; s < x->ng; s++) x->rank[x->order[s]] = s;
    free(at);
    free(at_off);
    return 0;
fail:
    free(at);
    free(at_off);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* group fronts                                                              */

static int counts_better(const int *a, const int *b, int k)
{
    for (int c = 0; c < k; c++)
        if (a[c] != b[c]) return a[c] > b[c];
    return 0;
}


typedef struct fbuf {
    int cap;
    long long *m, *q;
    int *c; /* [cap][k] */
} fbuf;

static int fbuf_reserve(fbuf *b, size_t need, int k)
{
    int c = b->cap;
    if (grow((void **)&b->m, sizeof *b->m, need, &c)) return -1;
    c = b->cap;
    if (grow((void **)&b->q, sizeof *b->q, need, &c)) return -1;
    c = b->cap;
    if (grow((void **)&b->c, sizeof *b->c * (size_t)k, need, &c)) return -1;
    b->cap = c;
    return 0;
}

/* Front of the group's multisets whose memory can still fit (<= cap), built
 * one item at a time: front(j) = Pareto(front(j-1) + each choice), a k-way
 * merge of lists that ascend in memory. */
static int build_front(ctx *x, group *g, long long cap)
{
    int k = g->k, fa = 1, rc = -1;
    long long min_m = g->m[g->hull[0]];
    fbuf a = {0, NULL, NULL, NULL}, b = {0, NULL, NULL, NULL};
    int *cur = malloc(sizeof *cur * (size_t)k);
    if (!cur || fbuf_reserve(&a, 1, k)) goto done;
    a.m[0] = a.q[0] = 0;
    memset(a.c, 0, sizeof *a.c * (size_t)k);
    for (int j = 1; j <= g->r && fa > 0; j++) {
        long long room = cap - (long long)(g->r - j) * min_m;
        if (fbuf_reserve(&b, (size_t)fa * (size_t)k + 1, k)) goto done;
        for (int c = 0; c < k; c++) cur[c] = 0;
        int nk = 0;
        for (;;) {
            int bestc = -1;
            long long m = 0, q = 0;
            for (int c = 0; c < k; c++) {
                if (cur[c] >= fa) continue;
                long long mm = a.m[cur[c]] + g->m[c], qq = a.q[cur[c]] + g->q[c];
                if (mm > room) { /* memory ascends along the list: the rest is too big too */
                    cur[c] = fa;
                    continue;
                }
                if (bestc < 0 || mm < m || (mm == m && qq < q)) {
                    bestc = c;
                    m = mm;
                    q = qq;
                }
            }
            if (bestc < 0) break;
            x->nodes++;
            int *cand = b.c + (size_t)nk * k;
            memcpy(cand, a.c + (size_t)cur[bestc] * k, sizeof *cand * (size_t)k);
            cand[bestc]++;
            cur[bestc]++;
            if (nk > 0 && m == b.m[nk - 1] && q == b.q[nk - 1]) {
                if (counts_better(cand, cand - k, k)) memcpy(cand - k, cand, sizeof *cand * (size_t)k);
            } else if (nk == 0 || q < b.q[nk - 1]) {
                b.m[nk] = m;
                b.q[nk] = q;
                nk++;
            }
        }
        fbuf t = a;
        a = b;
        b = t;
        fa = nk;
    }
    g->fsize = fa;
    g->fm = a.m;
    g->fq = a.q;
    g->cnt = a.c;
    a.m = a.q = NULL;
    a.c = NULL;
    rc = 0;
done:
    free(a.m); free(a.q); free(a.c);
    free(b.m); free(b.q); free(b.c);
    free(cur);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* merging                                                                   */

/* LP bound of the groups merged after stage s (ranks >= s). */
static void build_bound(ctx *x, int s)
{
    x->b_m0 = x->b_q0 = 0;
    for (int t = s; t < x->ng; t++) {
        const group *g = &x->g[x->order[t]];
        x->b_m0 += (long long)g->r * g->m[g->hull[0]];
        x->b_q0 += (long long)g->r * g->q[g->hull[0]];
    }
    int len = 0;
    x->b_cm[0] = x->b_cq[0] = 0;
    for (int t = 0; t < x->nseg; t++) {
        const seg *e = &x->seg[t];
        if (x->rank[e->g] < s) continue;
        long long r = x->g[e->g].r;
        x->b_sid[len] = t;
        x->b_cm[len + 1] = x->b_cm[len] + r * e->dm;
        x->b_cq[len + 1] = x->b_cq[len] + r * e->dq;
        len++;
    }
    x->b_len = len;
}

/* lower bound on the time of any fitting completion of a state (m, q) */
static double lp_bound(const ctx *x, long long m, long long q)
{
    long long budget = x->p->mem_limit - m - x->b_m0;
    if (budget < 0) return INFINITY;
    int lo = 0, hi = x->b_len; /* largest lo with b_cm[lo] <= budget */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (x->b_cm[mid] <= budget) lo = mid;
        else hi = mid - 1;
    }
    double lb = (double)(q + x->b_q0 - x->b_cq[lo]);
    if (lo < x->b_len) {
        const seg *e = &x->seg[x->b_sid[lo]];
        lb -= (double)(budget - x->b_cm[lo]) * ((double)e->dq / (double)e->dm);
    }
    return lb;
}

/* 1 when state a of stage s has a lexicographically smaller partial vector
 * than state b (equal sums assumed): the first differing item decides. */
static int lex_better(const ctx *x, int s, int a, int b)
{
    int best_pos = INT_MAX, a_wins = 0;
    for (int t = s; t >= 1 && a != b; t--) {
        const stage *S = &x->st[t];
        int ga = S->gi[a], gb = S->gi[b];
        if (ga != gb) {
            const group *g = &x->g[x->order[t - 1]];
            const int *ca = g->cnt + (size_t)ga * g->k, *cb = g->cnt + (size_t)gb * g->k;
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
        a = S->prev[a];
        b = S->prev[b];
    }
    return a_wins;
}

/* next entry >= a of list l (stage state + group point l) that survives */
static int advance(ctx *x, const stage *A, const group *g, int l, int a)
{
    for (; a < A->size; a++) {
        long long m = A->m[a] + g->fm[l];
        x->nodes++;
        if (m + x->b_m0 > x->p->mem_limit) return A->size; /* memory ascends */
        if (lp_bound(x, m, A->q[a] + g->fq[l]) <= x->thr) return a;
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

/* stage s = Pareto(stage s-1 + front of group order[s-1]): a heap merge of
 * one memory-ascending list per front point. */
static int merge_stage(ctx *x, int s)
{
    const stage *A = &x->st[s - 1];
    stage *B = &x->st[s];
    const group *g = &x->g[x->order[s - 1]];
    int L = g->fsize, hn = 0, nk = 0;
    int *cur = malloc(sizeof *cur * (size_t)L), *h = malloc(sizeof *h * (size_t)L);
    if (!cur || !h || stage_reserve(B, 64)) goto fail;
    for (int l = 0; l < L; l++) {
        cur[l] = advance(x, A, g, l, 0);
        if (cur[l] < A->size) h[hn++] = l;
    }
    for (int i = hn / 2 - 1; i >= 0; i--) sift_down(A, g, cur, h, hn, i);
    while (hn > 0) {
        int l = h[0], a = cur[l];
        long long m = A->m[a] + g->fm[l], q = A->q[a] + g->fq[l];
        if (stage_reserve(B, nk + 2)) goto fail;
        int tie = nk > 0 && m == B->m[nk - 1] && q == B->q[nk - 1];
        if (tie || nk == 0 || q < B->q[nk - 1]) {
            B->m[nk] = m;
            B->q[nk] = q;
            B->prev[nk] = a;
            B->gi[nk] = l;
            if (!tie) nk++;
            else if (lex_better(x, s, nk, nk - 1)) {
                B->prev[nk - 1] = a;
                B->gi[nk - 1] = l;
            }
        }
        cur[l] = advance(x, A, g, l, a + 1);
        if (cur[l] >= A->size) h[0] = h[--hn];
        sift_down(A, g, cur, h, hn, 0);
    }
    B->size = nk;
    free(cur);
    free(h);
    return 0;
fail:
    free(cur);
    free(h);
    return -1;
}

/* ------------------------------------------------------------------------ */

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
    if (make_groups(&x) || plan_merges(&x)) goto done;
    for (int j = 0; j < x.ng; j++) {
        group *g = &x.g[j];
        long long cap = p->mem_limit - (x.prep.min_mem - (long long)g->r * g->m[g->hull[0]]);
        if (build_front(&x, g, cap)) goto done;
    }
    x.b_cm = malloc(sizeof *x.b_cm * (size_t)(x.nseg + 1));
    x.b_cq = malloc(sizeof *x.b_cq * (size_t)(x.nseg + 1));
    x.b_sid = malloc(sizeof *x.b_sid * (size_t)(x.nseg + 1));
    x.st = calloc((size_t)x.ng + 1, sizeof *x.st);
    if (!x.b_cm || !x.b_cq || !x.b_sid || !x.st || stage_reserve(&x.st[0], 1)) goto done;
    x.st[0].size = 1;
    x.st[0].m[0] = x.st[0].q[0] = 0;
    x.st[0].prev[0] = x.st[0].gi[0] = -1;
    /* Threshold rounds: keep only states whose bound is <= thr, thr rising
     * from just above the LP bound of the whole problem to the greedy plan's
     * time.  If any plan survives a round, the best survivor is optimal: the
     * optimum has time <= that survivor's <= thr, so none of its states was
     * dropped.  Near-subset-sum instances (time almost proportional to the
     * bytes saved) are solved in an early round with few states. */
    build_bound(&x, 0);
    double lb0 = lp_bound(&x, 0, 0), ub = (double)x.ub, slack = 1e-10 * ub + 2.0;
    for (double frac = 0x1p-24;; frac *= 16) {
        int final = frac >= 1.0 || !(lb0 < ub);
        x.thr = (final ? ub : lb0 + frac * (ub - lb0)) + slack;
        for (int s = 1; s <= x.ng; s++) {
            build_bound(&x, s);
            if (merge_stage(&x, s)) goto done;
        }
#ifdef SEARCH_DEBUG
        { long long tot = 0; int mx = 0; for (int s = 1; s <= x.ng; s++) { tot += x.st[s].size; if (x.st[s].size > mx) mx = x.st[s].size; }
          fprintf(stderr, "round frac %g lb0 %.6g ub %.6g thr %.6g: states %lld max %d final %d best %.6g\n", frac, lb0, ub, x.thr, tot, mx, x.st[x.ng].size, x.st[x.ng].size ? (double)x.st[x.ng].q[x.st[x.ng].size-1] : -1.0); }
#endif
        if (x.st[x.ng].size > 0 || final) break;
    }
    const stage *last = &x.st[x.ng];
    if (last->size == 0) {
        st = osdp_error_set(OSDP_ERR_INTERNAL, "plan search (exact): no plan survived the merges");
        goto done;
    }
    /* fronts ascend in memory and descend in time: the last state is the best */
    int e = last->size - 1;
    for (int s = x.ng; s >= 1; s--) {
        const group *g = &x.g[x.order[s - 1]];
        const int *cnt = g->cnt + (size_t)x.st[s].gi[e] * g->k;
        int j = 0;
        for (int c = 0; c < g->k; c++)
            for (int t = 0; t < cnt[c]; t++) r->choice[g->pos[j++]] = c;
        e = x.st[s].prev[e];
    }
    r->nodes = x.nodes;
    osdp_search_finish(p, r);
    st = OSDP_OK;
done:
    if (st == OSDP_ERR_OOM) oom();
    for (int j = 0; x.g && j < x.ng; j++) {
        free(x.g[j].pos);
        free(x.g[j].hull);
        free(x.g[j].fm);
        free(x.g[j].fq);
        free(x.g[j].cnt);
    }
    for (int s = 0; x.st && s <= x.ng; s++) {
        free(x.st[s].m);
        free(x.st[s].q);
        free(x.st[s].prev);
        free(x.st[s].gi);
    }
    free(x.g);
    free(x.st);
    free(x.order);
    free(x.rank);
    free(x.seg);
    free(x.b_cm);
    free(x.b_cq);
    free(x.b_sid);
    osdp_search_prep_free(&x.prep);
    return st;
}

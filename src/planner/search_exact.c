/* Exact plan search by Pareto fronts, meeting in the middle (see
 * osdp/search.h for the tie rule and the guarantee).
 *
 * 1. Identical items (same choices, memories and times) form a group; for r
 *    such items only the multiset of choices matters.  A group's front of
 *    non-dominated (memory, time) multisets is built one item at a time,
 *    each point keeping its choice counts.  The lexicographically smallest
 *    vector for a multiset gives the group's items (ascending index)
 *    ascending choices, so of two multisets with equal sums the one with
 *    more of the smallest differing choice wins.
 * 2. Groups are ordered by the distance of their LP efficiencies from the
 *    LP's break efficiency.  Side A merges groups from the far end (their
 *    decisions are clear and cut at once), side B from the near end (the
 *    "core", where the combinatorics are); each step extends the side whose
 *    front is smaller.  A side's stage s holds the non-dominated states of
 *    its first s groups, with back-pointers.  A state is dropped when its
 *    memory plus the minimum of the groups not on its side exceeds the
 *    limit, or when its time plus the LP-relaxation bound of those groups
 *    (convex hulls of their choices, filled by efficiency) exceeds a
 *    threshold.  When the sides meet, each A state is joined with the best B
 *    state that fits beside it (a two-pointer sweep).
 * 3. Threshold rounds: the threshold rises geometrically from just above the
 *    LP bound of the whole problem to the time of a greedy plan.  If a joined
 *    plan with time <= threshold is found, the best joined plan is optimal:
 *    the optimum's time is no larger, so none of its states was dropped.
 * 4. Ties: states with equal (memory, time) keep the one whose partial vector
 *    is lexicographically smaller (a common completion cannot change which of
 *    two partial vectors is smaller); joined plans with equal sums are
 *    compared as whole vectors.  A dominated state never leads to the best
 *    plan: the same completion of its dominator is strictly better.
 * Sums are int64 (bytes, fixed-point time units); floating point appears only
 * in the bounds, which are loosened by 1e-10 relative. */
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
    int *par, np;              /* the non-dominated choices, memory ascending */
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
    double r;                  /* dq - lambda dm */
    int g;
} step;

typedef struct stage {
    int size, cap;
    long long *m, *q;          /* memory ascending, time strictly descending */
    int *prev, *gi;            /* state of the previous stage, front point of the group */
} stage;

typedef struct side {
    int n;                     /* groups merged */
    int *order;                /* [ng] in merge order */
    char *in;                  /* [ng] merged on this side */
    stage *st;                 /* [ng + 1] */
} side;

typedef struct ctx {
    const osdp_search_problem *p;
    osdp_search_prep prep;
    int ng, nseg;
    group *g;
    seg *seg;                  /* efficiency descending */
    int *gorder;               /* groups, farthest from the break first */
    side s[2];                 /* A, B */
    long long b_m0, b_q0;      /* LP bound of the groups off a side: their base, */
    int b_len;                 /* and their edges in efficiency order, */
    long long *b_cm, *b_cq;    /* [b_len + 1] cumulated */
    int *b_sid;                /* [b_len] edge ids */
    step *stp;                 /* the steps of all groups */
    int nstp, *by_dm, *by_r;   /* step ids by size ascending / by r descending */
    double brk, lam;           /* LP break efficiency; lambda of the cardinality bound */
    int k_len, t_len;          /* cardinality bound of the groups off a side: */
    long long *k_cnt, *k_sz;   /* [k_len + 1] cumulated counts and sizes, steps by size */
    long long *t_cnt;          /* [t_len + 1] cumulated counts, steps by r */
    double *t_r;               /* [t_len + 1] cumulated r */
    int *k_id, *t_id;
    long long ub;              /* time of the greedy plan */
    double thr;                /* states whose bound exceeds it are dropped */
    double next;               /* the smallest bound dropped */
    double cap;                /* the time of the best plan found but not proven */
    int *tmp[2];               /* [n] vectors for tie comparisons */
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
        while (nh >= 2) {
            int a = h[nh - 2], b = h[nh - 1];
            long double lhs = (long double)(g->q[b] - g->q[a]) * (long double)(g->m[c] - g->m[a]);
            long double rhs = (long double)(g->q[c] - g->q[a]) * (long double)(g->m[b] - g->m[a]);
            if (lhs < rhs) break; /* b strictly below the chord a-c */
            nh--;
        }
        h[nh++] = c;
    }
    g->nh = nh;
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
        if (!g->pos || !g->hull || !g->par) goto done;
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
        x->brk = brk;
        a[0] -= (int)take;
        a[1] += (int)take;
        budget -= take * s->dm;
    }
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

typedef struct fbuf { int cap; long long *m, *q; int *c; } fbuf;

static int fbuf_reserve(fbuf *b, size_t need, int k)
{
    int c = b->cap, c2 = b->cap, c3 = b->cap;
    if (grow((void **)&b->m, sizeof *b->m, need, &c) || grow((void **)&b->q, sizeof *b->q, need, &c2) ||
        grow((void **)&b->c, sizeof *b->c * (size_t)k, need, &c3))
        return -1;
    b->cap = c;
    return 0;
}

/* The front of the group's multisets of total memory <= cap, one item at a
 * time: front(j) = Pareto(front(j-1) + each choice), a k-way merge of lists
 * ascending in memory. */
static int build_front(ctx *x, group *g, long long cap)
{
    int k = g->k, fa = 1, rc = -1;
    fbuf a = {0, NULL, NULL, NULL}, b = {0, NULL, NULL, NULL};
    int *cur = malloc(sizeof *cur * (size_t)k);
    if (!cur || fbuf_reserve(&a, 1, k)) goto done;
    a.m[0] = a.q[0] = 0;
    memset(a.c, 0, sizeof *a.c * (size_t)k);
    for (int j = 1; j <= g->r && fa > 0; j++) {
        long long room = cap - (long long)(g->r - j) * g->m[g->hull[0]];
        if (fbuf_reserve(&b, (size_t)fa * (size_t)k + 1, k)) goto done;
        for (int c = 0; c < k; c++) cur[c] = 0;
        int nk = 0;
        for (;;) {
            int bc = -1;
            long long m = 0, q = 0;
            for (int c = 0; c < k; c++) {
                if (cur[c] >= fa) continue;
                long long mm = a.m[cur[c]] + g->m[c], qq = a.q[cur[c]] + g->q[c];
                if (mm > room) { /* memory ascends along the list */
                    cur[c] = fa;
                    continue;
                }
                if (bc < 0 || mm < m || (mm == m && qq < q)) {
                    bc = c;
                    m = mm;
                    q = qq;
                }
            }
            if (bc < 0) break;
            x->nodes++;
            int *cand = b.c + (size_t)nk * k;
            memcpy(cand, a.c + (size_t)cur[bc] * k, sizeof *cand * (size_t)k);
            cand[bc]++;
            cur[bc]++;
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

/* the LP bound of the groups not on side S */
static void build_bound(ctx *x, const side *S)
{
    x->b_m0 = x->b_q0 = 0;
    for (int j = 0; j < x->ng; j++)
        if (!S->in[j]) {
            x->b_m0 += (long long)x->g[j].r * x->g[j].m[x->g[j].hull[0]];
            x->b_q0 += (long long)x->g[j].r * x->g[j].q[x->g[j].hull[0]];
        }
    int len = 0;
    x->b_cm[0] = x->b_cq[0] = 0;
    for (int t = 0; t < x->nseg; t++) {
        const seg *e = &x->seg[t];
        if (S->in[e->g]) continue;
        x->b_sid[len] = t;
        x->b_cm[len + 1] = x->b_cm[len] + x->g[e->g].r * e->dm;
        x->b_cq[len + 1] = x->b_cq[len] + x->g[e->g].r * e->dq;
        len++;
    }
    x->b_len = len;
    long long c = 0, z = 0;
    double rr = 0.0;
    len = 0;
    x->k_cnt[0] = x->k_sz[0] = 0;
    for (int t = 0; t < x->nstp; t++) {
        const step *e = &x->stp[x->by_dm[t]];
        if (S->in[e->g] || !(e->r > 0)) continue;
        x->k_id[len++] = x->by_dm[t];
        x->k_cnt[len] = c += x->g[e->g].r;
        x->k_sz[len] = z += x->g[e->g].r * e->dm;
    }
    x->k_len = len;
    len = 0;
    c = 0;
    x->t_cnt[0] = 0;
    x->t_r[0] = 0.0;
    for (int t = 0; t < x->nstp; t++) {
        const step *e = &x->stp[x->by_r[t]];
        if (S->in[e->g] || !(e->r > 0)) continue;
        x->t_id[len++] = x->by_r[t];
        x->t_cnt[len] = c += x->g[e->g].r;
        x->t_r[len] = rr += (double)x->g[e->g].r * e->r;
    }
    x->t_len = len;
}

/* the largest i in [0, len] with a[i] <= v (a ascending, a[0] <= v) */
static int last_le(const long long *a, int len, long long v)
{
    int lo = 0, hi = len;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (a[mid] <= v) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Lagrangian bound with a cardinality cut: for the steps a plan takes off
 * the base, gain = sum (dq - lam dm) + lam sum dm <= (sum of the r > 0 steps
 * taken) + lam budget; at most K of those fit in the budget (the K smallest
 * do), so their r sum is at most the K largest r.  Catches fixed costs per
 * step (latencies) that the LP spreads over fractions. */
static double card_bound(const ctx *x, long long budget, long long q0)
{
    int i = last_le(x->k_sz, x->k_len, budget);
    long long K = x->k_cnt[i];
    if (i < x->k_len) {
        const step *e = &x->stp[x->k_id[i]];
        long long more = (budget - x->k_sz[i]) / e->dm;
        K += more < x->g[e->g].r ? more : x->g[e->g].r;
    }
    int j = last_le(x->t_cnt, x->t_len, K);
    double top = x->t_r[j];
    if (j < x->t_len) top += (double)(K - x->t_cnt[j]) * x->stp[x->t_id[j]].r;
    return (double)q0 - x->lam * (double)budget - top;
}

/* a lower bound on the time of any plan extending a state (m, q) */
static double lp_bound(const ctx *x, long long m, long long q)
{
    long long budget = x->p->mem_limit - m - x->b_m0;
    if (budget < 0) return INFINITY;
    int lo = last_le(x->b_cm, x->b_len, budget);
    double lb = (double)(q + x->b_q0 - x->b_cq[lo]);
    if (lo < x->b_len) {
        const seg *e = &x->seg[x->b_sid[lo]];
        lb -= (double)(budget - x->b_cm[lo]) * ((double)e->dq / (double)e->dm);
    }
    double cb = card_bound(x, budget, q + x->b_q0);
    return cb > lb ? cb : lb;
}

/* 1 when state a of stage s of side S has a lexicographically smaller
 * partial vector than state b (equal sums): the first differing item decides */
static int lex_better(const ctx *x, const side *S, int s, int a, int b)
{
    int best_pos = INT_MAX, a_wins = 0;
    for (int t = s; t >= 1 && a != b; t--) {
        const stage *T = &S->st[t];
        if (T->gi[a] != T->gi[b]) {
            const group *g = &x->g[S->order[t - 1]];
            const int *ca = g->cnt + (size_t)T->gi[a] * g->k, *cb = g->cnt + (size_t)T->gi[b] * g->k;
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
static int advance(ctx *x, const stage *A, const group *g, int l, int a)
{
    for (; a < A->size; a++) {
        long long m = A->m[a] + g->fm[l];
        x->nodes++;
        if (m + x->b_m0 > x->p->mem_limit) return A->size; /* memory ascends */
        double lb = lp_bound(x, m, A->q[a] + g->fq[l]);
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
        cur[l] = advance(x, A, g, l, 0);
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
        cur[l] = advance(x, A, g, l, a + 1);
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
        const int *cnt = g->cnt + (size_t)S->st[s].gi[e] * g->k;
        for (int c = 0, j = 0; c < g->k; c++)
            for (int t = 0; t < cnt[c]; t++) choice[g->pos[j++]] = c;
        e = S->st[s].prev[e];
    }
}

static void sort_steps(ctx *x, keyed *kd, int *out, int by_r)
{
    for (int t = 0; t < x->nstp; t++) kd[t] = (keyed){by_r ? x->stp[t].r : -(double)x->stp[t].dm, t};
    qsort(kd, (size_t)x->nstp, sizeof *kd, cmp_keyed);
    for (int t = 0; t < x->nstp; t++) out[t] = kd[t].id;
}

/* The steps, and lambda: of a few fractions of the break efficiency, the one
 * whose cardinality bound is best for the whole problem.  S: an empty side. */
static int setup_card(ctx *x, const side *S)
{
    int n1 = x->nstp + 1, ns = 0;
    keyed *kd = malloc(sizeof *kd * (size_t)n1);
    x->stp = malloc(sizeof *x->stp * (size_t)n1);
    x->by_dm = malloc(sizeof *x->by_dm * (size_t)n1);
    x->by_r = malloc(sizeof *x->by_r * (size_t)n1);
    x->k_cnt = malloc(sizeof *x->k_cnt * (size_t)n1);
    x->k_sz = malloc(sizeof *x->k_sz * (size_t)n1);
    x->t_cnt = malloc(sizeof *x->t_cnt * (size_t)n1);
    x->t_r = malloc(sizeof *x->t_r * (size_t)n1);
    x->k_id = malloc(sizeof *x->k_id * (size_t)n1);
    x->t_id = malloc(sizeof *x->t_id * (size_t)n1);
    if (!kd || !x->stp || !x->by_dm || !x->by_r || !x->k_cnt || !x->k_sz || !x->t_cnt || !x->t_r || !x->k_id ||
        !x->t_id) {
        free(kd);
        return -1;
    }
    for (int j = 0; j < x->ng; j++) {
        const group *g = &x->g[j];
        for (int v = 0; v + 1 < g->np; v++)
            x->stp[ns++] = (step){g->m[g->par[v + 1]] - g->m[g->par[v]], g->q[g->par[v]] - g->q[g->par[v + 1]], 0, j};
    }
    sort_steps(x, kd, x->by_dm, 0);
    /* lambda / brk: a grid of eighths, then halving steps around the best */
    double best = -INFINITY, best_f = 1.0;
    long long budget = x->p->mem_limit - x->prep.min_mem;
    for (int t = 0; t < 15; t++) {
        double f = t < 9 ? t / 8.0 : best_f + ((t - 9) % 2 ? -1 : 1) * ldexp(1.0, -4 - (t - 9) / 2);
        if (f < 0.0 || f > 1.0) continue;
        x->lam = x->brk * f;
        for (int i = 0; i < ns; i++) x->stp[i].r = (double)x->stp[i].dq - x->lam * (double)x->stp[i].dm;
        sort_steps(x, kd, x->by_r, 1);
        build_bound(x, S);
        double b = card_bound(x, budget, x->b_q0);
        if (b > best) {
            best = b;
            best_f = f;
        }
    }
    double best_lam = x->brk * best_f;
    x->lam = best_lam;
    for (int t = 0; t < ns; t++) x->stp[t].r = (double)x->stp[t].dq - x->lam * (double)x->stp[t].dm;
    sort_steps(x, kd, x->by_r, 1);
    free(kd);
    return 0;
}

/* One threshold round.  Returns -1 on allocation failure, else 0 with
 * *found = 1 and the best joined plan in best[0..1] when one exists. */
static int round_at(ctx *x, int *found, int best[2])
{
    side *A = &x->s[0], *B = &x->s[1];
    int lo = 0, hi = x->ng - 1, n = x->p->n_items;
    for (int t = 0; t < 2; t++) {
        x->s[t].n = 0;
        memset(x->s[t].in, 0, (size_t)x->ng);
    }
    *found = 0;
    while (lo <= hi) {
        side *S = A->st[A->n].size <= B->st[B->n].size ? A : B;
        int j = S == A ? x->gorder[lo++] : x->gorder[hi--];
        S->order[S->n++] = j;
        S->in[j] = 1;
        build_bound(x, S);
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
    for (int j = 0; j < x.ng; j++) {
        group *g = &x.g[j];
        if (build_front(&x, g, p->mem_limit - (x.prep.min_mem - (long long)g->r * g->m[g->hull[0]]))) goto done;
    }
    x.b_cm = malloc(sizeof *x.b_cm * (size_t)(x.nseg + 1));
    x.b_cq = malloc(sizeof *x.b_cq * (size_t)(x.nseg + 1));
    x.b_sid = malloc(sizeof *x.b_sid * (size_t)(x.nseg + 1));
    x.tmp[0] = malloc(sizeof *x.tmp[0] * (size_t)n);
    x.tmp[1] = malloc(sizeof *x.tmp[1] * (size_t)n);
    if (!x.b_cm || !x.b_cq || !x.b_sid || !x.tmp[0] || !x.tmp[1]) goto done;
    for (int t = 0; t < 2; t++) {
        side *S = &x.s[t];
        S->order = malloc(sizeof *S->order * (size_t)x.ng);
        S->in = calloc((size_t)x.ng, 1);
        S->st = calloc((size_t)x.ng + 1, sizeof *S->st);
        if (!S->order || !S->in || !S->st || stage_reserve(&S->st[0], 1)) goto done;
        S->st[0].size = 1;
        S->st[0].m[0] = S->st[0].q[0] = 0;
        S->st[0].prev[0] = S->st[0].gi[0] = -1;
    }
    if (setup_card(&x, &x.s[0])) goto done;
    build_bound(&x, &x.s[0]); /* nothing merged: the bound of everything */
    double lb0 = lp_bound(&x, 0, 0), ub = (double)x.ub, slack = 1e-10 * ub + 2.0;
    int found = 0, best[2] = {0, 0};
    for (double thr = lb0 + 0x1p-16 * (ub - lb0); !found;) {
        int final = !(thr < ub);
        x.thr = (final ? ub : thr) + slack;
        x.next = x.cap = INFINITY;
        if (round_at(&x, &found, best)) goto done;
#ifdef SEARCH_DEBUG
        fprintf(stderr, "round thr-lb0 %.4g ub-lb0 %.4g next-lb0 %.4g: nodes %lld A %d groups %d states, B %d groups %d states, found %d\n", x.thr - lb0, ub - lb0, x.next - lb0, x.nodes, x.s[0].n, x.s[0].st[x.s[0].n].size, x.s[1].n, x.s[1].st[x.s[1].n].size, found);
#endif
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
#ifdef SEARCH_DEBUG
    fprintf(stderr, "lam/brk %g\n", x.lam / x.brk);
    fprintf(stderr, "optimum - lb0 = %.4g (ub - lb0 = %.4g), shift %d\n", (double)(x.s[0].st[x.s[0].n].q[best[0]] + x.s[1].st[x.s[1].n].q[best[1]]) - lb0, ub - lb0, x.prep.shift);
#endif
    unwind(&x, &x.s[0], best[0], r->choice);
    unwind(&x, &x.s[1], best[1], r->choice);
    r->nodes = x.nodes;
    osdp_search_finish(p, r);
    st = OSDP_OK;
done:
    if (st == OSDP_ERR_OOM) osdp_error_set(OSDP_ERR_OOM, "plan search (exact): out of memory");
    for (int j = 0; x.g && j < x.ng; j++) {
        free(x.g[j].pos);
        free(x.g[j].hull);
        free(x.g[j].par);
        free(x.g[j].fm);
        free(x.g[j].fq);
        free(x.g[j].cnt);
    }
    for (int t = 0; t < 2; t++) {
        for (int s = 0; x.s[t].st && s <= x.ng; s++) {
            free(x.s[t].st[s].m);
            free(x.s[t].st[s].q);
            free(x.s[t].st[s].prev);
            free(x.s[t].st[s].gi);
        }
        free(x.s[t].st);
        free(x.s[t].order);
        free(x.s[t].in);
        free(x.tmp[t]);
    }
    free(x.g);
    free(x.seg);
    free(x.gorder);
    free(x.b_cm);
    free(x.b_cq);
    free(x.b_sid);
    free(x.stp);
    free(x.by_dm);
    free(x.by_r);
    free(x.k_cnt);
    free(x.k_sz);
    free(x.t_cnt);
    free(x.t_r);
    free(x.k_id);
    free(x.t_id);
    osdp_search_prep_free(&x.prep);
    return st;
}

/* Exact plan search by Pareto fronts meeting in the middle (osdp/search.h
 * has the tie rule and the guarantee).
 *
 * 1. Identical items (same choices, memories and times) form a group; for r
 *    of them only the multiset of choices matters.  A group's front of
 *    non-dominated (memory, time) multisets is built along its chain of
 *    non-dominated choices (search_front.c: G_d(j), the front of j items
 *    using the first d + 1 choices, pruned by the LP of the remaining items
 *    restricted to the later choices), each point keeping its choice
 *    counts; fronts are built once, for the last round's threshold (the
 *    greedy plan's time).  The lexicographically smallest vector for a
 *    multiset gives the group's items (ascending index) ascending choices,
 *    so of two multisets with equal sums the one with more of the smallest
 *    differing choice wins.
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
 * Parts: search_group.c (groups, hulls, greedy plan, order), search_front.c
 * (group fronts), search_bound.c (bounds), this file (merges, rounds).
 *
 * Cost: typically well under 10 ms for 200 items.  Split operators (k of g
 * slices ZDP: five near-collinear choices, slices of slightly different
 * sizes) in large groups take longer when the optimum lies far above the LP
 * (the budget falls between the coarse steps a whole slice makes): the
 * fronts then hold every multiset within that distance (N&D 96 layers with
 * 5 choices: some 10^5 points per knapsack).  Hard cases are cores of many
 * distinct items with almost equal efficiencies and choices on a line (time
 * exactly linear in the bytes saved): there the best plan is a subset-sum
 * question and the fronts near the limit grow to millions of states
 * (seconds). */
#include "search_exact.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int stage_reserve(osdp_sx_stage *s, int need)
{
    int c = s->cap, c2 = s->cap, c3 = s->cap, c4 = s->cap;
    if (osdp_sx_grow((void **)&s->m, sizeof *s->m, (size_t)need, &c)
        || osdp_sx_grow((void **)&s->q, sizeof *s->q, (size_t)need, &c2) ||
        osdp_sx_grow((void **)&s->prev, sizeof *s->prev, (size_t)need, &c3) ||
        osdp_sx_grow((void **)&s->gi, sizeof *s->gi, (size_t)need, &c4))
        return -1;
    s->cap = c;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* merging                                                                   */

/* 1 when state a of stage s of side S has a lexicographically smaller
 * partial vector than state b (equal sums): the first differing item decides */
static int lex_better(const osdp_sx_context *x, const osdp_sx_side *S, int s, int a, int b)
{
    int best_pos = INT_MAX, a_wins = 0;
    for (int t = s; t >= 1 && a != b; t--) {
        const osdp_sx_stage *T = &S->st[t];
        if (T->gi[a] != T->gi[b]) {
            const osdp_sx_group *g = &x->groups[S->order[t - 1]];
            const int *ca = g->front_counts + (size_t)T->gi[a] * (size_t)g->n_choices;
            const int *cb = g->front_counts + (size_t)T->gi[b] * (size_t)g->n_choices;
            int c = 0, j = 0;
            while (c < g->n_choices && ca[c] == cb[c]) j += ca[c++];
            if (c < g->n_choices) {
                j += ca[c] < cb[c] ? ca[c] : cb[c];
                if (g->items[j] < best_pos) {
                    best_pos = g->items[j];
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
static int advance(osdp_sx_context *x, const osdp_sx_side *S, const osdp_sx_stage *A, const osdp_sx_group *g, int l,
                   int a)
{
    for (; a < A->size; a++) {
        long long m = A->m[a] + g->front_mem[l];
        x->nodes++;
        if (m + S->f.m0 > x->problem->mem_limit) return A->size; /* memory ascends */
        double lb = osdp_sx_bound(x, &S->f, m, A->q[a] + g->front_units[l]);
        if (lb <= x->threshold) return a;
        if (lb < x->next) x->next = lb;
    }
    return A->size;
}

static int heap_less(const osdp_sx_stage *A, const osdp_sx_group *g, const int *cur, int u, int v)
{
    long long mu = A->m[cur[u]] + g->front_mem[u], mv = A->m[cur[v]] + g->front_mem[v];
    if (mu != mv) return mu < mv;
    return A->q[cur[u]] + g->front_units[u] < A->q[cur[v]] + g->front_units[v];
}

static void sift_down(const osdp_sx_stage *A, const osdp_sx_group *g, const int *cur, int *h, int n, int i)
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
static int merge_stage(osdp_sx_context *x, osdp_sx_side *S, int s)
{
    const osdp_sx_stage *A = &S->st[s - 1];
    osdp_sx_stage *B = &S->st[s];
    const osdp_sx_group *g = &x->groups[S->order[s - 1]];
    int L = g->front_size, hn = 0, nk = 0, rc = -1;
    int *cur = malloc(sizeof *cur * (size_t)L), *h = malloc(sizeof *h * (size_t)L);
    if (!cur || !h || stage_reserve(B, 64)) goto done;
    for (int l = 0; l < L; l++) {
        cur[l] = advance(x, S, A, g, l, 0);
        if (cur[l] < A->size) h[hn++] = l;
    }
    for (int i = hn / 2 - 1; i >= 0; i--) sift_down(A, g, cur, h, hn, i);
    while (hn > 0) {
        int l = h[0], a = cur[l];
        long long m = A->m[a] + g->front_mem[l], q = A->q[a] + g->front_units[l];
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
static void unwind(const osdp_sx_context *x, const osdp_sx_side *S, int e, int *choice)
{
    for (int s = S->n; s >= 1; s--) {
        const osdp_sx_group *g = &x->groups[S->order[s - 1]];
        const int *cnt = g->front_counts + (size_t)S->st[s].gi[e] * (size_t)g->n_choices;
        for (int c = 0, j = 0; c < g->n_choices; c++)
            for (int t = 0; t < cnt[c]; t++) choice[g->items[j++]] = c;
        e = S->st[s].prev[e];
    }
}

/* One threshold round.  Returns -1 on allocation failure, else 0 with
 * *found = 1 and the best joined plan in best[0..1] when one exists. */
static int round_at(osdp_sx_context *x, int *found, int best[2])
{
    osdp_sx_side *A = &x->sides[0], *B = &x->sides[1];
    int lo = 0, hi = x->n_groups - 1, n = x->problem->n_items;
    for (int t = 0; t < 2; t++) {
        x->sides[t].n = 0;
        osdp_sx_fen_copy(x, &x->sides[t].f, &x->full);
    }
    *found = 0;
    while (lo <= hi) {
        osdp_sx_side *S = A->st[A->n].size <= B->st[B->n].size ? A : B;
        int j = S == A ? x->group_order[lo++] : x->group_order[hi--];
        S->order[S->n++] = j;
        osdp_sx_fen_remove(x, &S->f, j, x->groups[j].n_items);
        if (merge_stage(x, S, S->n)) return -1;
        if (S->st[S->n].size == 0) return 0;
    }
    const osdp_sx_stage *a = &A->st[A->n], *b = &B->st[B->n];
    long long bq = 0, bm = 0;
    for (int i = 0, j = b->size - 1; i < a->size; i++) { /* a: memory ascending */
        while (j >= 0 && a->m[i] + b->m[j] > x->problem->mem_limit) j--;
        if (j < 0) break;
        long long q = a->q[i] + b->q[j], m = a->m[i] + b->m[j];
        x->nodes++;
        int better = !*found || q < bq || (q == bq && m < bm);
        if (!better && q == bq && m == bm) {
            unwind(x, A, i, x->tie_choice[0]);
            unwind(x, B, j, x->tie_choice[0]);
            unwind(x, A, best[0], x->tie_choice[1]);
            unwind(x, B, best[1], x->tie_choice[1]);
            int t = 0;
            while (t < n && x->tie_choice[0][t] == x->tie_choice[1][t]) t++;
            better = t < n && x->tie_choice[0][t] < x->tie_choice[1][t];
        }
        if (better) {
            *found = 1;
            bq = q;
            bm = m;
            best[0] = i;
            best[1] = j;
        }
    }
    if (*found && (double)bq > x->threshold) { /* not proven optimal; the next round will be */
        *found = 0;
        x->cap = (double)bq;
    }
    return 0;
}

static void workspace_release(osdp_search_workspace *ws);

osdp_status osdp_search_exact(const osdp_search_problem *p, osdp_search_result *r)
{
    osdp_sx_context x;
    memset(&x, 0, sizeof x);
    x.problem = p;
    osdp_status st = osdp_search_prepare(p, r, &x.prep);
    if (st != OSDP_OK) return st;
    int n = p->n_items;
    if (n == 0) {
        osdp_search_prep_free(&x.prep);
        osdp_search_finish(p, r);
        return OSDP_OK;
    }
    if (p->workspace) { /* the previous call's buffers */
        x.fpts[0] = p->workspace->fpts[0];
        x.fpts[1] = p->workspace->fpts[1];
        x.fpts_n = p->workspace->fpts_n;
    }
    st = OSDP_ERR_OOM;
    if (osdp_sx_make_groups(&x) || osdp_sx_plan_order(&x)) goto done;
    x.tie_choice[0] = malloc(sizeof *x.tie_choice[0] * (size_t)n);
    x.tie_choice[1] = malloc(sizeof *x.tie_choice[1] * (size_t)n);
    if (!x.tie_choice[0] || !x.tie_choice[1] || osdp_sx_setup_bounds(&x)) goto done;
    for (int t = 0; t < 2; t++) {
        osdp_sx_side *S = &x.sides[t];
        S->order = malloc(sizeof *S->order * (size_t)x.n_groups);
        S->st = calloc((size_t)x.n_groups + 1, sizeof *S->st);
        if (!S->order || !S->st || stage_reserve(&S->st[0], 1)) goto done;
        S->st[0].size = 1;
        S->st[0].m[0] = S->st[0].q[0] = 0;
        S->st[0].prev[0] = S->st[0].gi[0] = -1;
    }
    /* slack: far above the rounding in the bounds (a few ulps of 2^62 per
     * term), far below anything that matters (2^60 units is the slowest plan) */
    double lb0 = osdp_sx_bound(&x, &x.full, 0, 0), ub = (double)x.greedy_units;
    double slack = 1e-10 * ub + 0x1p14 * (x.n_edges + x.n_steps + 16);
    int found = 0, best[2] = {0, 0}, capped = 0;
    if (p->time_cap > 0 && isfinite(p->time_cap)) { /* no plan slower than the cap is wanted */
        double cq = floor(ldexp(p->time_cap, x.prep.shift)) + n; /* + the rounding of n terms */
        if (cq < ub) {
            ub = cq;
            capped = 1;
            if (lb0 > ub + slack) {
                st = osdp_error_set(OSDP_ERR_INFEASIBLE, "plan search (exact): no plan within the time cap");
                goto done;
            }
        }
    }
    /* The groups' fronts, once, for the last round's threshold (a front for
     * a larger threshold holds every point a smaller one needs): rebuilding
     * them for each round's threshold cost more than the points the smaller
     * thresholds save (s[0].f: scratch) */
    x.threshold = ub + slack;
    for (int j = 0; j < x.n_groups; j++) {
        const osdp_sx_group *g = &x.groups[j];
        const long long others_min = x.prep.min_mem - (long long)g->n_items * g->mem[g->hull[0]];
        if (osdp_sx_build_front(&x, j, p->mem_limit - others_min, &x.sides[0].f))
            goto done;
    }
    for (double thr = lb0 + 0x1p-16 * (ub - lb0); !found;) {
        int final = !(thr < ub);
        x.threshold = (final ? ub : thr) + slack;
        x.next = x.cap = INFINITY;
        if (round_at(&x, &found, best)) goto done;
        if (final && !found) {
            st = capped ? osdp_error_set(OSDP_ERR_INFEASIBLE, "plan search (exact): no plan within the time cap")
                        : osdp_error_set(OSDP_ERR_INTERNAL, "plan search (exact): the greedy plan was lost");
            goto done;
        }
        /* at least 4 times the distance and at least to the smallest bound
         * dropped (below that the round would repeat), but no further than a
         * plan already found (at that threshold it survives) */
        thr = lb0 + 4 * (thr - lb0);
        if (x.next > thr) thr = x.next;
        if (x.cap < thr) thr = x.cap;
    }
    unwind(&x, &x.sides[0], best[0], r->choice);
    unwind(&x, &x.sides[1], best[1], r->choice);
    r->nodes = x.nodes;
    osdp_search_finish(p, r);
    st = OSDP_OK;
done:
    if (st == OSDP_ERR_OOM) osdp_error_set(OSDP_ERR_OOM, "plan search (exact): out of memory");
    for (int j = 0; x.groups && j < x.n_groups; j++) {
        osdp_sx_group *g = &x.groups[j];
        free(g->items); free(g->hull); free(g->pareto); free(g->pareto_hull); free(g->pareto_hull_n);
        free(g->front_mem); free(g->front_units); free(g->front_counts);
    }
    for (int t = 0; t < 2; t++) {
        for (int s = 0; x.sides[t].st && s <= x.n_groups; s++) {
            osdp_sx_stage *T = &x.sides[t].st[s];
            free(T->m); free(T->q); free(T->prev); free(T->gi);
        }
        free(x.sides[t].st);
        free(x.sides[t].order);
        osdp_sx_fen_free(&x.sides[t].f);
        free(x.tie_choice[t]);
    }
    osdp_sx_fen_free(&x.full);
    if (p->workspace) { /* kept for the next call */
        p->workspace->fpts[0] = x.fpts[0];
        p->workspace->fpts[1] = x.fpts[1];
        p->workspace->fpts_n = x.fpts_n;
    } else {
        osdp_search_workspace ws = {{x.fpts[0], x.fpts[1]}, x.fpts_n};
        workspace_release(&ws);
    }
    free(x.edm); free(x.edq); free(x.lcm); free(x.lcq); free(x.leff); free(x.own_m); free(x.own_eff); free(x.own_pos);
    free(x.groups); free(x.edges); free(x.group_order); free(x.steps);
    free(x.by_dm); free(x.by_r); free(x.eg_off); free(x.eg_pos); free(x.sg_off);
    osdp_search_prep_free(&x.prep);
    return st;
}

osdp_search_workspace *osdp_search_workspace_new(void) { return calloc(1, sizeof(osdp_search_workspace)); }

/* frees a workspace's buffers, not the struct */
static void workspace_release(osdp_search_workspace *ws)
{
    for (int t = 0; t < 2; t++) {
        for (int j = 0; ws->fpts[t] && j < ws->fpts_n; j++) osdp_sx_pts_free(&ws->fpts[t][j]);
        free(ws->fpts[t]);
        ws->fpts[t] = NULL;
    }
    ws->fpts_n = 0;
}

void osdp_search_workspace_free(osdp_search_workspace *ws)
{
    if (!ws) return;
    workspace_release(ws);
    free(ws);
}

/* The branch-and-bound node's relaxation by its two knapsack constraints
 * at once (plan_pair.h): dynamic programming over the operators. */
#include "plan_pair.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* the merge below scans one list per allowed choice for every state it makes: beyond this many choices
 * of one operator (--split auto's hundreds) no bound is made */
#define PAIR_MAX_CHOICES 16

/* a partial plan of the operators so far: its moment terms, held bytes, objective, and where it came from
 * (the state of the layer before, the choice taken) */
typedef struct pair_state { long long z, r; double t; uint32_t from; int choice; } pair_state;

static int before(const pair_state *a, const pair_state *b)   /* by (z, R, t) */
{
    if (a->z != b->z) return a->z < b->z;
    if (a->r != b->r) return a->r < b->r;
    return a->t < b->t;
}

static int cmp_ll(const void *x, const void *y)
{
    const long long a = *(const long long *)x, b = *(const long long *)y;
    return (a > b) - (a < b);
}

/* the 1-based rank of r among the distinct ascending r[0 .. nr): how many are <= r */
static size_t rank_of(const long long *sorted, size_t nr, long long r)
{
    size_t lo = 0, hi = nr;
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (sorted[mid] <= r) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* scratch of drop_dominated: the layer's distinct R, ascending, and a Fenwick tree of the least objective */
typedef struct dom_scratch { long long *r; double *fen; size_t cap; } dom_scratch;

/* Drops from the layer (ns states, sorted by z, each z's (R, t) front) every state another of smaller z and
 * no larger R and t dominates: all of its completions are no better than the other's same ones.  The kept
 * states move up in order; *total shrinks by the dropped.  -1 when out of memory. */
static int drop_dominated(pair_state *layer, size_t ns, size_t *total, dom_scratch *sc)
{
    if (ns > sc->cap) {
        long long *r = realloc(sc->r, sizeof *r * ns);
        if (r) sc->r = r;
        double *fen = realloc(sc->fen, sizeof *fen * (ns + 1));
        if (fen) sc->fen = fen;
        if (!r || !fen) return -1;
        sc->cap = ns;
    }
    for (size_t s = 0; s < ns; s++) sc->r[s] = layer[s].r;
    qsort(sc->r, ns, sizeof *sc->r, cmp_ll);
    size_t nr = 0;
    for (size_t s = 0; s < ns; s++)
        if (nr == 0 || sc->r[s] != sc->r[nr - 1]) sc->r[nr++] = sc->r[s];
    for (size_t k = 0; k <= nr; k++) sc->fen[k] = INFINITY;
    size_t w = 0;
    for (size_t g = 0; g < ns;) {   /* one z at a time: tested against the smaller z, then entered */
        size_t e = g;
        while (e < ns && layer[e].z == layer[g].z) e++;
        const size_t w0 = w;
        for (size_t s = g; s < e; s++) {
            const size_t lo = rank_of(sc->r, nr, layer[s].r);
            double least = INFINITY;
            for (size_t k = lo; k > 0; k -= k & (~k + 1)) least = fmin(least, sc->fen[k]);
            if (least <= layer[s].t) continue;
            layer[w++] = layer[s];
        }
        for (size_t s = w0; s < w; s++) {
            const size_t lo = rank_of(sc->r, nr, layer[s].r);
            for (size_t k = lo; k <= nr; k += k & (~k + 1)) sc->fen[k] = fmin(sc->fen[k], layer[s].t);
        }
        g = e;
    }
    *total -= ns - w;
    return 0;
}

double osdp_ps_pair_bound(const osdp_ps_context *ctx, const unsigned char *allow, int m, long long lim, long long d,
                          double cap, size_t max_states, int *plan)
{
    const int n = ctx->n_ops, stride = ctx->stride;
    /* per operator, the least z, R and objective over its allowed choices, summed over the operators after */
    long long *zrest = malloc(sizeof *zrest * (size_t)(n + 1)), *rrest = malloc(sizeof *rrest * (size_t)(n + 1));
    double *trest = malloc(sizeof *trest * (size_t)(n + 1));
    long long *dz = malloc(sizeof *dz * (size_t)stride), *dr = malloc(sizeof *dr * (size_t)stride);
    double *dt = malloc(sizeof *dt * (size_t)stride);
    size_t *at = malloc(sizeof *at * (size_t)stride), *layer = malloc(sizeof *layer * (size_t)(n + 1));
    int *cs = malloc(sizeof *cs * (size_t)stride);
    size_t cap_states = max_states < 1024 ? max_states : 1024;
    pair_state *st = malloc(sizeof *st * cap_states);   /* every layer's states, layer i at st[layer[i] ..) */
    double bound = -INFINITY;   /* no bound (out of memory, or too many states) */
    dom_scratch scratch = {NULL, NULL, 0};
    if (!zrest || !rrest || !trest || !dz || !dr || !dt || !at || !layer || !cs || !st) goto out;
    zrest[n] = rrest[n] = 0;
    trest[n] = 0;
    for (int i = n - 1; i >= 0; i--) {
        long long zl = 0, rl = 0;
        double tl = INFINITY;
        int any = 0;
        for (int c = 0; c < ctx->n_choices[i]; c++) {
            const size_t a = PS_CHOICE(ctx, i, c);
            if (!allow[a]) continue;
            const long long r = ctx->held_bytes[a], z = osdp_ps_moment_bytes(ctx, m, i, c) - r;
            if (!any || z < zl) zl = z;
            if (!any || r < rl) rl = r;
            if (ctx->objective[a] < tl) tl = ctx->objective[a];
            any = 1;
        }
        if (!any) {
            bound = INFINITY;
            goto out;
        }
        zrest[i] = zrest[i + 1] + zl;
        rrest[i] = rrest[i + 1] + rl;
        trest[i] = trest[i + 1] + tl;
    }
    st[0] = (pair_state){0, 0, 0.0, 0, -1};
    layer[0] = 0;
    size_t total = 1;
    for (int i = 0; i < n; i++) {
        /* each allowed choice shifts the layer's states, sorted by (z, R, t), by constants: the shifted
         * lists stay sorted and merge in order; the merged layer keeps, per z, its (R, t) Pareto front */
        const size_t lo = layer[i], hi = total;
        int k = 0;
        for (int c = 0; c < ctx->n_choices[i]; c++) {
            const size_t a = PS_CHOICE(ctx, i, c);
            if (!allow[a]) continue;
            if (k == PAIR_MAX_CHOICES) goto out;
            dr[k] = ctx->held_bytes[a];
            dz[k] = osdp_ps_moment_bytes(ctx, m, i, c) - dr[k];
            dt[k] = ctx->objective[a];
            cs[k] = c;
            at[k++] = lo;
        }
        layer[i + 1] = total;
        for (;;) {
            int bk = -1;
            pair_state bp = {0, 0, 0.0, 0, 0};
            for (int q = 0; q < k; q++) {
                while (at[q] < hi) {   /* the list's next state that can still complete below cap */
                    const pair_state *s = &st[at[q]];
                    const pair_state p = {s->z + dz[q], s->r + dr[q], s->t + dt[q], (uint32_t)at[q], cs[q]};
                    if (p.z + zrest[i + 1] > d || p.r + rrest[i + 1] > lim || p.t + trest[i + 1] >= cap) {
                        at[q]++;
                        continue;
                    }
                    if (bk < 0 || before(&p, &bp)) bk = q, bp = p;
                    break;
                }
            }
            if (bk < 0) break;
            at[bk]++;
            if (total > layer[i + 1] && st[total - 1].z == bp.z && st[total - 1].t <= bp.t) continue;
            if (total == max_states || total >= UINT32_MAX) goto out;
            if (total == cap_states) {
                pair_state *ns = realloc(st, sizeof *st * cap_states * 2);
                if (!ns) goto out;
                st = ns;
                cap_states *= 2;
            }
            st[total++] = bp;
        }
        if (total == layer[i + 1]) {   /* nothing below cap respects both */
            bound = INFINITY;
            goto out;
        }
        if (drop_dominated(st + layer[i + 1], total - layer[i + 1], &total, &scratch)) goto out;
    }
    size_t best = layer[n];
    for (size_t s = layer[n]; s < total; s++)
        if (st[s].t < st[best].t) best = s;
    bound = st[best].t;
    for (int i = n - 1; i >= 0; i--) {
        plan[i] = st[best].choice;
        best = st[best].from;
    }
out:
    free(zrest); free(rrest); free(trest); free(dz); free(dr); free(dt); free(at); free(layer); free(cs); free(st);
    free(scratch.r); free(scratch.fen);
    return bound;
}

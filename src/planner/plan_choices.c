/* The planner's choices per operator for one micro-batch (the arrays of
 * plan_search.h): DP / ZDP, k of g slices ZDP for one granularity or, with
 * --split auto, for every g of the set; recompute fixed or, with
 * --recompute auto, both ways for attn and mlp operators.  Choices that
 * another choice of the same operator dominates in every term of the peak
 * and in time are dropped; so are, for operators no transient constraint
 * can touch, those dominated in memory and time alone (prune_free).
 * Operators of one shape (blocks of one width) are costed once. */
#include "plan_search.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void osdp_ps_ctx_free(pctx *x)
{
    free(x->nc); free(x->grp); free(x->cg); free(x->ck); free(x->crc);
    free(x->R); free(x->wp); free(x->f); free(x->nx); free(x->acts); free(x->t);
    free(x->Kopt); free(x->Kpes);
    free(x->perm); free(x->nch); free(x->map); free(x->sol); free(x->pm); free(x->pt); free(x->mb); free(x->tb);
    osdp_search_workspace_free(x->ws);
    osdp_ps_kcache_free(x->kcache);
    memset(x, 0, sizeof *x);
}

/* the granularities operator i may take under o (ascending), their number */
static int granularities(const osdp_cost_model *cm, const osdp_planner_options *o, int i, int *gs)
{
    int n = 0;
    if (!o->split_auto) {
        gs[n++] = osdp_cost_can_split(cm, i, o->split) ? o->split : 1;
        return n;
    }
    const int most = o->split_max > 0 ? o->split_max : 8;
    for (int g = 1; g <= most && g <= OSDP_MAX_SLICES; g *= 2)
        if (osdp_cost_can_split(cm, i, g)) gs[n++] = g;
    return n;
}

/* the terms of one choice that the peak and the time see */
typedef struct cterm {
    int g, k, rc;
    long long mm, acts, wpx, f, gh; /* state + resident; acts; rebuilt + G + max(work, recv); prefetch; G + H */
    double t;
} cterm;

/* a is no worse than b in every term */
static int no_worse(const cterm *a, const cterm *b)
{
    return a->mm <= b->mm && a->acts <= b->acts && a->wpx <= b->wpx && a->f <= b->f && a->gh <= b->gh && a->t <= b->t;
}

/* Drops the dominated choices of one operator: b goes when some a is no
 * worse in every term and strictly better in one, or equal in all and
 * earlier.  Exchanging b for a in any plan then raises neither the step
 * time nor the peak at any moment (activations only ever count from their
 * operator on), so a best plan among the remaining choices is a best plan. */
static int prune(cterm *c, int n)
{
    int m = 0;
    for (int j = 0; j < n; j++) {
        int gone = 0;
        for (int i = 0; i < n && !gone; i++) {
            if (i == j || !no_worse(&c[i], &c[j])) continue;
            gone = i < j || !no_worse(&c[j], &c[i]);
        }
        if (!gone) c[m++] = c[j];
    }
    return m;
}

static int make_choices(const pctx *x, int i, int b, int accum, cterm *out)
{
    const osdp_planner_options *o = x->o;
    const osdp_op_layout *op = &x->cm.layout->op[i];
    int gs[8], ng = granularities(&x->cm, o, i, gs), n = 0;
    int can_rc = op->type == OSDP_OP_ATTN || op->type == OSDP_OP_MLP;
    int rc_lo = o->recompute ? o->recompute[i] != 0 : 0, rc_hi = rc_lo;
    if (o->recompute_auto && can_rc) {
        rc_lo = 0;
        rc_hi = 1;
    }
    for (int rc = rc_lo; rc <= rc_hi; rc++)
        for (int gi = 0; gi < ng; gi++)
            for (int k = 0; k <= gs[gi]; k++) {
                if (o->modes == OSDP_MODES_ALL_DP && k != 0) continue;
                if (o->modes == OSDP_MODES_ALL_ZDP && k != gs[gi]) continue;
                osdp_op_mem m;
                osdp_op_time ot;
                osdp_cost_op_mem_rc(&x->cm, i, gs[gi], k, rc, b, &m);
                osdp_cost_op_time_rc(&x->cm, i, gs[gi], k, rc, b, accum, &ot);
                cterm *c = &out[n++];
                c->g = gs[gi];
                c->k = k;
                c->rc = rc;
                c->mm = m.state + m.resident;
                c->acts = m.acts;
                c->wpx = m.rebuilt + m.grads + (m.work > m.recv ? m.work : m.recv);
                c->f = o->prefetch ? m.prefetch : 0;
                c->gh = o->prefetch ? m.grads + m.recv : 0;
                c->t = x->minmem ? 0 : ot.total; /* minimising memory: time tells nothing apart */
            }
    return x->bound_only ? n : prune(out, n);
}

/* operators a and b have the same sizes, cuts and costs (different blocks of
 * one width): their choices are the same */
static int same_op(const osdp_op_layout *a, const osdp_op_layout *b)
{
    if (a->type != b->type || a->width != b->width || a->width_in != b->width_in || a->n_tensors != b->n_tensors
        || a->numel != b->numel || a->act_floats_per_seq != b->act_floats_per_seq
        || a->flops_per_token != b->flops_per_token || a->attn_flops_per_token != b->attn_flops_per_token)
        return 0;
    for (int t = 0; t < a->n_tensors; t++) {
        const osdp_tensor_desc *p = &a->tensor[t], *q = &b->tensor[t];
        if (p->rows != q->rows || p->cols != q->cols || p->ndim != q->ndim || p->offset != q->offset
            || p->numel != q->numel || strcmp(p->name, q->name) != 0)
            return 0;
    }
    return 1;
}

static osdp_status order_items(pctx *x);

/* K[u] = - sum_{j >= u+2} acts_j: at its smallest (Kopt) and largest (Kpes) */
static void make_k(pctx *x)
{
    long long smax = 0, smin = 0;
    for (int u = x->n - 1; u >= 0; u--) {
        x->Kopt[u] = -smax;
        x->Kpes[u] = -smin;
        int j = u + 1;
        if (j < x->n) {
            long long hi = LLONG_MIN, lo = LLONG_MAX;
            for (int q = 0; q < x->nc[j]; q++) {
                long long v = x->acts[AT(x, j, q)];
                if (v > hi) hi = v;
                if (v < lo) lo = v;
            }
            smax += hi;
            smin += lo;
        }
    }
    x->K = x->Kopt;
}

/* lo / hi of v over operator i's choices (0, 0 when i is out of range) */
static void span(const pctx *x, const long long *v, int i, long long *lo, long long *hi)
{
    *lo = *hi = 0;
    if (i < 0 || i >= x->n) return;
    *lo = LLONG_MAX;
    *hi = LLONG_MIN;
    for (int c = 0; c < x->nc[i]; c++) {
        long long a = v[AT(x, i, c)];
        if (a < *lo) *lo = a;
        if (a > *hi) *hi = a;
    }
}

/* Operators no constraint Z_u <= d of any plan can touch.  Every plan's
 * transient is at least dlo = max_u min Z_u; a constraint whose largest
 * value (later activations at their smallest) is below dlo is never the
 * maximum.  An operator whose constraints (Z at u-1, u, u+1 and, when its
 * activations vary, every Z before) are all such only adds memory and time:
 * its choices dominated in (R, t) alone go too (ties: the earlier stays). */
static int prune_free(pctx *x)
{
    const int n = x->n;
    long long *zlo = malloc(sizeof *zlo * 2 * (size_t)n), *zhi = zlo + n;
    unsigned char *slack = malloc((size_t)n), *kept = calloc((size_t)n, 1), *keeps = malloc((size_t)n * (size_t)x->kc);
    if (!zlo || !slack || !kept || !keeps) {
        free(zlo); free(slack); free(kept); free(keeps);
        return -1;
    }
    long long dlo = LLONG_MIN;
    for (int u = 0; u < n; u++) {
        long long wl, wh, fl, fh, xl, xh;
        span(x, x->wp, u, &wl, &wh);
        span(x, x->f, u - 1, &fl, &fh);
        span(x, x->nx, u + 1, &xl, &xh);
        zlo[u] = x->Kopt[u] + wl + fl + xl;
        zhi[u] = x->Kpes[u] + wh + fh + xh;
        if (zlo[u] > dlo) dlo = zlo[u];
    }
    int prefix = 1; /* every Z before u - 1 slack */
    for (int u = 0; u < n; u++) slack[u] = zhi[u] < dlo;
    for (int i = 0; i < n; i++) {
        if (i >= 2) prefix &= slack[i - 2];
        long long al, ah;
        span(x, x->acts, i, &al, &ah);
        int free_op = (i == 0 || slack[i - 1]) && slack[i] && (i + 1 >= n || slack[i + 1]) && (al == ah || prefix);
        if (!free_op) continue;
        const int rep = x->grp[i] / 2;
        unsigned char *keep = keeps + (size_t)rep * (size_t)x->kc;
        x->grp[i] = 2 * rep + 1; /* pruned alike for every free operator of its group */
        if (!kept[rep]) { /* the first free operator of its group: which of its choices stay */
            kept[rep] = 1;
            for (int j = 0; j < x->nc[i]; j++) {
                size_t b = AT(x, i, j);
                int gone = 0;
                for (int q = 0; q < x->nc[i] && !gone; q++) {
                    size_t a = AT(x, i, q);
                    if (q == j || x->R[a] > x->R[b] || x->t[a] > x->t[b]) continue;
                    gone = q < j || x->R[a] < x->R[b] || x->t[a] < x->t[b];
                }
                keep[j] = (unsigned char)!gone;
            }
        }
        int m = 0;
        for (int j = 0; j < x->nc[i]; j++) {
            if (!keep[j]) continue;
            size_t b = AT(x, i, j);
            size_t d = AT(x, i, m++);
            x->cg[d] = x->cg[b]; x->ck[d] = x->ck[b]; x->crc[d] = x->crc[b];
            x->R[d] = x->R[b]; x->wp[d] = x->wp[b]; x->f[d] = x->f[b];
            x->nx[d] = x->nx[b]; x->acts[d] = x->acts[b]; x->t[d] = x->t[b];
        }
        x->nc[i] = m;
    }
    free(zlo); free(slack); free(kept); free(keeps);
    return 0;
}

osdp_status osdp_ps_ctx_build(pctx *x, const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o,
                              int b, int accum, int minmem, osdp_cost_cuts *cuts, osdp_planner_result *acc)
{
    memset(x, 0, sizeof *x);
    x->cm = (osdp_cost_model){.layout = L, .dev = dev, .N = o->n_ranks, .prefetch = o->prefetch, .kind = o->cost,
                              .recompute = o->recompute, .cuts = cuts};
    x->o = o;
    x->n = L->n_ops;
    x->minmem = minmem == 1;
    x->bound_only = minmem == 2;
    x->cutoff = INFINITY;
    x->acc = acc;
    const int n = x->n, cap = 2 * (2 + 3 + 5 + 9 + 17);   /* every k of every g in 1, 2, 4, 8, 16, both ways */
    cterm *c = malloc(sizeof *c * (size_t)cap * (size_t)n);
    x->nc = malloc(sizeof *x->nc * (size_t)n);
    x->grp = malloc(sizeof *x->grp * (size_t)n);
    int *reps = malloc(sizeof *reps * (size_t)n), nreps = 0;
    if (!c || !x->nc || !x->grp || !reps) {
        free(reps);
        goto oom;
    }
    for (int i = 0; i < n; i++) {
        cterm *ci = c + (size_t)i * (size_t)cap;
        int r = -1, rci = o->recompute ? o->recompute[i] != 0 : 0;
        for (int q = nreps - 1; q >= 0 && r < 0; q--) /* an earlier operator just like it: its choices */
            if (same_op(&L->op[reps[q]], &L->op[i]) && (o->recompute ? o->recompute[reps[q]] != 0 : 0) == rci) r = reps[q];
        if (r >= 0) {
            x->nc[i] = x->nc[r];
        } else {
            x->nc[i] = make_choices(x, i, b, accum, ci);
            reps[nreps++] = r = i;
        }
        x->grp[i] = 2 * r;
        if (x->nc[i] > x->kc) x->kc = x->nc[i];
    }
    free(reps);
    size_t nk = (size_t)n * (size_t)x->kc;
    x->cg = malloc(nk); x->ck = malloc(nk); x->crc = malloc(nk);
    x->R = malloc(nk * sizeof *x->R); x->wp = malloc(nk * sizeof *x->wp); x->f = malloc(nk * sizeof *x->f);
    x->nx = malloc(nk * sizeof *x->nx); x->acts = malloc(nk * sizeof *x->acts); x->t = malloc(nk * sizeof *x->t);
    x->Kopt = malloc((size_t)n * sizeof *x->Kopt); x->Kpes = malloc((size_t)n * sizeof *x->Kpes);
    x->nch = malloc((size_t)n * sizeof *x->nch); x->perm = malloc((size_t)n * sizeof *x->perm);
    x->map = malloc(nk * sizeof *x->map); x->sol = malloc((size_t)n * sizeof *x->sol);
    x->pm = malloc((size_t)n * sizeof *x->pm); x->pt = malloc((size_t)n * sizeof *x->pt);
    x->mb = malloc(nk * sizeof *x->mb); x->tb = malloc(nk * sizeof *x->tb);
    x->ws = osdp_search_workspace_new();
    if (!x->cg || !x->ck || !x->crc || !x->R || !x->wp || !x->f || !x->nx || !x->acts || !x->t || !x->Kopt || !x->Kpes
        || !x->nch || !x->perm || !x->map || !x->sol || !x->pm || !x->pt || !x->mb || !x->tb || !x->ws)
        goto oom;
    x->cst = osdp_cost_workspace(&x->cm, b);
    for (int i = 0; i < n; i++) {
        const cterm *ci = c + (size_t)(x->grp[i] / 2) * (size_t)cap; /* its representative's choices */
        long long lo = LLONG_MAX;
        for (int j = 0; j < x->nc[i]; j++)
            if (ci[j].mm + ci[j].acts < lo) lo = ci[j].mm + ci[j].acts;
        x->cst += lo;
        for (int j = 0; j < x->kc; j++) {
            const cterm *e = &ci[j < x->nc[i] ? j : 0]; /* past nc[i]: never read, kept defined */
            size_t a = AT(x, i, j);
            x->cg[a] = (signed char)e->g;
            x->ck[a] = (signed char)e->k;
            x->crc[a] = (signed char)e->rc;
            x->R[a] = e->mm + e->acts - lo;
            x->wp[a] = e->wpx;
            x->f[a] = e->f;
            x->nx[a] = e->gh - e->acts;
            x->acts[a] = e->acts;
            x->t[a] = x->minmem ? (double)x->R[a] : e->t;
        }
    }
    free(c);
    c = NULL;
    make_k(x);
    if (minmem == 2) return OSDP_OK; /* bounds only: every choice, no search */
    if (prune_free(x)) goto oom;
    make_k(x);
    osdp_status s = order_items(x);
    if (s != OSDP_OK) osdp_ps_ctx_free(x);
    return s;
oom:
    free(c);
    osdp_ps_ctx_free(x);
    return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
}

int osdp_ps_transient_scan(const pctx *x, const int *ch, long long d, long long *max_z)
{
    long long best = LLONG_MIN, suffix = 0; /* sum_{j >= u+2} acts_j */
    for (int u = x->n - 1; u >= 0; u--) {
        long long v = -suffix + x->wp[AT(x, u, ch[u])];
        if (u > 0) v += x->f[AT(x, u - 1, ch[u - 1])];
        if (u + 1 < x->n) {
            v += x->nx[AT(x, u + 1, ch[u + 1])];
            suffix += x->acts[AT(x, u + 1, ch[u + 1])];
        }
        if (v > best) best = v;
        if (v > d && !max_z) return u;
    }
    if (max_z) *max_z = best;
    return -1;
}

long long osdp_ps_true_transient(const pctx *x, const int *ch)
{
    long long best;
    osdp_ps_transient_scan(x, ch, LLONG_MAX, &best);
    return best;
}

typedef struct okey { long long swing; int op; } okey;
static int cmp_okey(const void *a, const void *b)
{
    const okey *p = a, *q = b;
    if (p->swing != q->swing) return p->swing > q->swing ? -1 : 1;
    return p->op < q->op ? -1 : p->op > q->op;
}

/* Knapsack item order: operators by decreasing memory swing (the additive
 * bytes their choices span), model order among equals. */
static osdp_status order_items(pctx *x)
{
    okey *k = malloc(sizeof *k * (size_t)x->n);
    if (!k) return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    for (int i = 0; i < x->n; i++) {
        long long lo = LLONG_MAX, hi = LLONG_MIN;
        for (int c = 0; c < x->nc[i]; c++) {
            long long r = x->R[AT(x, i, c)];
            if (r < lo) lo = r;
            if (r > hi) hi = r;
        }
        k[i].swing = hi - lo;
        k[i].op = i;
    }
    qsort(k, (size_t)x->n, sizeof *k, cmp_okey);
    for (int j = 0; j < x->n; j++) x->perm[j] = k[j].op;
    free(k);
    return OSDP_OK;
}

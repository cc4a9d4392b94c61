/* The planner: builds the knapsacks, searches over the transient bound,
 * verifies, and schedules micro-batches (method and guarantee in
 * osdp/planner.h). */
#include "osdp/planner.h"
#include "osdp/memory.h"
#include "osdp/runtime.h"
#include "osdp/search.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void osdp_planner_defaults(osdp_planner_options *o)
{
    memset(o, 0, sizeof *o);
    o->n_ranks = 1;
    o->max_micro_batch = 256;
    o->prefetch = 1;
    o->split = 1;
    o->search = OSDP_SEARCH_EXACT;
    o->cost = OSDP_COST_PAPER;
    o->modes = OSDP_MODES_ANY;
    o->dfs_time_limit_s = 60;
    o->verify = 1;
}

void osdp_planner_result_free(osdp_planner_result *res)
{
    if (res) osdp_plan_free(&res->plan);
}

/* ------------------------------------------------------------------------ */
/* one micro-batch: the arrays the search works on                          */

typedef struct pctx {
    osdp_cost_model cm;
    const osdp_planner_options *o;
    int n, kc, g;
    int kval[66];             /* ZDP slices of choice c */
    long long *R, *wp, *f;    /* [n * kc]: resident, max(work, recv), prefetch footprint */
    double *t;                /* [n * kc]: what is minimised per choice */
    long long *K;             /* [n] */
    long long cst;            /* workspace + all sharded state */
    int minmem;               /* minimise the peak instead of the time */
    int *nch, *map, *sol;     /* knapsack buffers */
    int *perm;                /* knapsack item j is operator perm[j] */
    const long long **pm;
    const double **pt;
    long long *mb;
    double *tb;
    double deadline;          /* dfs: wall-clock end (0: none) */
    osdp_planner_result *acc; /* counters */
} pctx;

static osdp_status order_items(pctx *x);

static void ctx_free(pctx *x)
{
    free(x->R); free(x->wp); free(x->f); free(x->t); free(x->K);
    free(x->perm); free(x->nch); free(x->map); free(x->sol); free(x->pm); free(x->pt); free(x->mb); free(x->tb);
}

static osdp_status ctx_build(pctx *x, const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o,
                             int b, int accum, int minmem, osdp_planner_result *acc)
{
    memset(x, 0, sizeof *x);
    x->cm = (osdp_cost_model){.layout = L, .dev = dev, .N = o->n_ranks, .prefetch = o->prefetch, .kind = o->cost};
    x->o = o;
    x->n = L->n_ops;
    x->g = o->split;
    x->minmem = minmem;
    x->acc = acc;
    if (o->modes == OSDP_MODES_ANY) {
        x->kc = x->g + 1;
        for (int c = 0; c < x->kc; c++) x->kval[c] = c;
    } else {
        x->kc = 1;
        x->kval[0] = o->modes == OSDP_MODES_ALL_DP ? 0 : x->g;
    }
    size_t nk = (size_t)x->n * (size_t)x->kc;
    x->R = malloc(nk * sizeof *x->R);
    x->wp = malloc(nk * sizeof *x->wp);
    x->f = malloc(nk * sizeof *x->f);
    x->t = malloc(nk * sizeof *x->t);
    x->K = malloc((size_t)x->n * sizeof *x->K);
    x->nch = malloc((size_t)x->n * sizeof *x->nch);
    x->perm = malloc((size_t)x->n * sizeof *x->perm);
    x->map = malloc(nk * sizeof *x->map);
    x->sol = malloc((size_t)x->n * sizeof *x->sol);
    x->pm = malloc((size_t)x->n * sizeof *x->pm);
    x->pt = malloc((size_t)x->n * sizeof *x->pt);
    x->mb = malloc(nk * sizeof *x->mb);
    x->tb = malloc(nk * sizeof *x->tb);
    if (!x->R || !x->wp || !x->f || !x->t || !x->K || !x->nch || !x->perm || !x->map || !x->sol || !x->pm || !x->pt || !x->mb
        || !x->tb) {
        ctx_free(x);
        return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    }
    x->cst = osdp_cost_workspace(&x->cm, b);
    long long acts = 0;
    osdp_op_mem m0, m1;
    for (int i = 0; i < x->n; i++) {
        for (int c = 0; c < x->kc; c++) {
            osdp_op_mem m;
            osdp_op_time ot;
            osdp_cost_op_mem(&x->cm, i, x->g, x->kval[c], b, &m);
            osdp_cost_op_time(&x->cm, i, x->g, x->kval[c], b, accum, &ot);
            size_t at = (size_t)i * (size_t)x->kc + (size_t)c;
            x->R[at] = m.resident;
            x->wp[at] = m.work > m.recv ? m.work : m.recv;
            x->f[at] = o->prefetch ? m.prefetch : 0;
            x->t[at] = minmem ? (double)m.resident : ot.total;
        }
        osdp_cost_op_mem(&x->cm, i, x->g, 0, b, &m0); /* state, acts, grads, recv: mode-independent */
        x->cst += m0.state;
        acts += m0.acts;
        x->K[i] = acts + m0.grads;
        if (o->prefetch && i + 1 < x->n) {
            osdp_cost_op_mem(&x->cm, i + 1, x->g, 0, b, &m1);
            x->K[i] += m1.grads + m1.recv;
        }
    }
    osdp_status s = order_items(x);
    if (s != OSDP_OK) ctx_free(x);
    return s;
}

#define AT(x, i, c) ((size_t)(i) * (size_t)(x)->kc + (size_t)(c))

/* max_u (K_u + Y_u) of a choice vector */
static long long transient(const pctx *x, const int *ch)
{
    long long best = LLONG_MIN;
    for (int u = 0; u < x->n; u++) {
        long long v = x->K[u] + x->wp[AT(x, u, ch[u])] + (u > 0 ? x->f[AT(x, u - 1, ch[u - 1])] : 0);
        if (v > best) best = v;
    }
    return best;
}

/* first u whose (u-1, u) pair exceeds d, -1 if none */
static int violated(const pctx *x, const int *ch, long long d)
{
    for (int u = 0; u < x->n; u++)
        if (x->K[u] + x->wp[AT(x, u, ch[u])] + (u > 0 ? x->f[AT(x, u - 1, ch[u - 1])] : 0) > d) return u;
    return -1;
}

/* The knapsack over the allowed choices; *obj = sum of t.  OSDP_ERR_INFEASIBLE
 * when nothing fits (or an operator has no allowed choice). */
static osdp_status knap(pctx *x, const unsigned char *allow, long long lim, int *out, double *obj)
{
    for (int j = 0; j < x->n; j++) {
        int i = x->perm[j], k = 0;
        for (int c = 0; c < x->kc; c++) {
            if (allow && !allow[AT(x, i, c)]) continue;
            x->mb[AT(x, j, k)] = x->R[AT(x, i, c)];
            x->tb[AT(x, j, k)] = x->t[AT(x, i, c)];
            x->map[AT(x, j, k)] = c;
            k++;
        }
        if (k == 0) return OSDP_ERR_INFEASIBLE;
        x->nch[j] = k;
        x->pm[j] = x->mb + AT(x, j, 0);
        x->pt[j] = x->tb + AT(x, j, 0);
    }
    osdp_search_problem p = {.n_items = x->n, .n_choices = x->nch, .mem = x->pm, .time = x->pt, .mem_limit = lim};
    osdp_search_result r = {.choice = x->sol};
    double t0 = now_s();
    osdp_status s;
    if (x->o->search == OSDP_SEARCH_DFS && !x->minmem) {
        if (x->deadline > 0) {
            p.time_limit_s = x->deadline - t0;
            if (p.time_limit_s < 1e-6) p.time_limit_s = 1e-6;
        }
        s = osdp_search_dfs(&p, &r);
    } else {
        s = osdp_search_exact(&p, &r);
    }
    x->acc->search_s += now_s() - t0;
    x->acc->searches++;
    x->acc->nodes += r.nodes;
    if (s != OSDP_OK) return s;
    if (r.timed_out) x->acc->timed_out = 1;
    for (int j = 0; j < x->n; j++) out[x->perm[j]] = x->map[AT(x, j, x->sol[j])];
    *obj = r.total_time;
    return OSDP_OK;
}

typedef struct okey { long long swing; int op; } okey;
static int cmp_okey(const void *a, const void *b)
{
    const okey *p = a, *q = b;
    if (p->swing != q->swing) return p->swing > q->swing ? -1 : 1;
    return p->op < q->op ? -1 : p->op > q->op;
}

/* Knapsack item order: operators by decreasing memory swing (the resident
 * bytes a ZDP choice saves), model order among equals. */
static osdp_status order_items(pctx *x)
{
    okey *k = malloc(sizeof *k * (size_t)x->n);
    if (!k) return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    const char *env = getenv("OSDP_PLAN_ORDER");
    for (int i = 0; i < x->n; i++) {
        long long lo = LLONG_MAX, hi = LLONG_MIN;
        for (int c = 0; c < x->kc; c++) {
            long long r = x->R[AT(x, i, c)];
            if (r < lo) lo = r;
            if (r > hi) hi = r;
        }
        k[i].swing = env && env[0] == 'm' ? 0 : env && env[0] == 'a' ? lo - hi : hi - lo;
        k[i].op = i;
    }
    qsort(k, (size_t)x->n, sizeof *k, cmp_okey);
    for (int j = 0; j < x->n; j++) x->perm[j] = k[j].op;
    free(k);
    return OSDP_OK;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

typedef struct best_t {
    int found;
    double obj;
    int *ch;
} best_t;

static void offer(const pctx *x, best_t *bt, const int *ch, double obj)
{
    if (bt->found && !(obj < bt->obj)) return;
    bt->found = 1;
    bt->obj = obj;
    memcpy(bt->ch, ch, sizeof *ch * (size_t)x->n);
}

/* Branch and bound over the pair constraints for one transient bound d. */
static osdp_status bnb(pctx *x, unsigned char *base, long long d, long long lim, best_t *bt, int *ch)
{
    size_t nk = (size_t)x->n * (size_t)x->kc;
    int cap = 16, sp = 0;
    unsigned char **stack = malloc(sizeof *stack * (size_t)cap);
    if (!stack) return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    stack[sp++] = base;
    osdp_status s = OSDP_OK;
    const double lam = x->minmem ? (double)d : 0.0;
    while (sp > 0) {
        unsigned char *A = stack[--sp];
        double obj;
        osdp_status ks = knap(x, A, lim, ch, &obj);
        if (ks == OSDP_ERR_INFEASIBLE || (ks == OSDP_OK && bt->found && !(obj + lam < bt->obj))) {
            if (A != base) free(A);
            continue;
        }
        if (ks != OSDP_OK) {
            if (A != base) free(A);
            s = ks;
            break;
        }
        int u = violated(x, ch, d);
        if (u < 0) {
            offer(x, bt, ch, obj + lam);
            if (A != base) free(A);
            continue;
        }
        /* u > 0: single choices over d were removed from `base` */
        long long fb = x->f[AT(x, u - 1, ch[u - 1])], room = d - x->K[u] - fb;
        if (sp + 2 > cap) {
            unsigned char **ns = realloc(stack, sizeof *stack * (size_t)(cap * 2));
            if (!ns) {
                if (A != base) free(A);
                s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
                break;
            }
            stack = ns;
            cap *= 2;
        }
        unsigned char *A2 = malloc(nk);
        if (!A2) {
            if (A != base) free(A);
            s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
            break;
        }
        memcpy(A2, A, nk);
        /* A becomes branch 1 (in place; `base` stays the caller's) */
        for (int c = 0; c < x->kc; c++) {
            if (x->f[AT(x, u - 1, c)] >= fb) A[AT(x, u - 1, c)] = 0;
            else A2[AT(x, u - 1, c)] = 0;
            if (x->wp[AT(x, u, c)] > room) A2[AT(x, u, c)] = 0;
        }
        stack[sp++] = A2;
        stack[sp++] = A;
    }
    while (sp > 0) {
        unsigned char *A = stack[--sp];
        if (A != base) free(A);
    }
    free(stack);
    return s;
}

/* The best plan with peak <= limit (or, minmem, the smallest peak). */
static osdp_status search(pctx *x, long long limit, best_t *bt)
{
    const int n = x->n, kc = x->kc;
    size_t nk = (size_t)n * (size_t)kc, ncand = 0;
    bt->found = 0;
    long long *cand = malloc(sizeof *cand * nk * (size_t)kc);
    unsigned char *allow = malloc(nk);
    int *ch = malloc(sizeof *ch * (size_t)n);
    long long *minw = malloc(sizeof *minw * (size_t)n), *minf = malloc(sizeof *minf * (size_t)n);
    osdp_status s = OSDP_OK;
    if (!cand || !allow || !ch || !minw || !minf) {
        s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
        goto done;
    }
    long long dlo = LLONG_MIN;
    for (int u = 0; u < n; u++) {
        minw[u] = minf[u] = LLONG_MAX;
        for (int c = 0; c < kc; c++) {
            if (x->wp[AT(x, u, c)] < minw[u]) minw[u] = x->wp[AT(x, u, c)];
            if (x->f[AT(x, u, c)] < minf[u]) minf[u] = x->f[AT(x, u, c)];
        }
        long long lo = x->K[u] + minw[u] + (u > 0 ? minf[u - 1] : 0);
        if (lo > dlo) dlo = lo;
        for (int a = 0; a < kc; a++)
            for (int c = 0; c < (u > 0 ? kc : 1); c++) {
                long long v = x->K[u] + x->wp[AT(x, u, a)] + (u > 0 ? x->f[AT(x, u - 1, c)] : 0);
                if (v >= lo) cand[ncand++] = v;
            }
    }
    qsort(cand, ncand, sizeof *cand, cmp_ll);
    for (size_t j = 0; j < ncand; j++) {
        long long d = cand[j];
        if (d < dlo || (j > 0 && d == cand[j - 1])) continue;
        long long lim = limit - x->cst - d;
        if (lim < 0) break;
        const double lam = x->minmem ? (double)d : 0.0;
        /* the unrestricted knapsack: a bound for this d and every larger one */
        double obj;
        osdp_status ks = knap(x, NULL, lim, ch, &obj);
        if (ks == OSDP_ERR_INFEASIBLE) break;
        if (ks != OSDP_OK) { s = ks; goto done; }
        if (bt->found && !(obj + lam < bt->obj)) break;
        if (transient(x, ch) <= d) {
            offer(x, bt, ch, obj + lam);
            break;
        }
        /* choices whose transient exceeds d whatever their neighbour takes */
        int empty = 0;
        for (int u = 0; u < n && !empty; u++) {
            int any = 0;
            for (int c = 0; c < kc; c++) {
                int ok = x->K[u] + x->wp[AT(x, u, c)] + (u > 0 ? minf[u - 1] : 0) <= d
                      && (u + 1 >= n || x->K[u + 1] + minw[u + 1] + x->f[AT(x, u, c)] <= d);
                allow[AT(x, u, c)] = (unsigned char)ok;
                any |= ok;
            }
            empty = !any;
        }
        if (empty) continue;
        s = bnb(x, allow, d, lim, bt, ch);
        if (s != OSDP_OK) goto done;
    }
done:
    free(cand); free(allow); free(ch); free(minw); free(minf);
    return s;
}

/* ------------------------------------------------------------------------ */
/* public entry points                                                       */

static osdp_status check_options(const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o)
{
    (void)L;
    if (o->n_ranks < 1) return osdp_error_set(OSDP_ERR_INPUT, "planner: ranks must be at least 1 (got %d)", o->n_ranks);
    if (o->split < 1 || o->split > 64)
        return osdp_error_set(OSDP_ERR_INPUT, "planner: --split %d out of range [1, 64]", o->split);
    if (o->mem_limit < 0 || (o->mem_limit == 0 && dev->mem_limit <= 0))
        return osdp_error_set(OSDP_ERR_INPUT, "planner: no positive memory limit (device mem_limit or --mem-limit)");
    return OSDP_OK;
}

static void fill_plan(const pctx *x, const int *ch, osdp_plan *plan)
{
    for (int i = 0; i < x->n; i++) {
        plan->slices[i] = x->g;
        plan->zdp_slices[i] = x->kval[ch[i]];
    }
}

osdp_status osdp_planner_min_memory(const osdp_layout *layout, const osdp_device *dev,
                                    const osdp_planner_options *o, int b, long long *bytes, osdp_plan *plan)
{
    osdp_status s = check_options(layout, dev, o);
    if (s != OSDP_OK) return s;
    osdp_planner_result acc;
    memset(&acc, 0, sizeof acc);
    pctx x;
    s = ctx_build(&x, layout, dev, o, b, 1, 1, &acc);
    if (s != OSDP_OK) return s;
    best_t bt = {.ch = malloc(sizeof(int) * (size_t)x.n)};
    if (!bt.ch) s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    if (s == OSDP_OK) s = search(&x, LLONG_MAX / 8, &bt);
    if (s == OSDP_OK && !bt.found) s = osdp_error_set(OSDP_ERR_INTERNAL, "planner: no plan at all (memory search)");
    if (s == OSDP_OK) {
        *bytes = x.cst + (long long)bt.obj;
        if (plan && (s = osdp_plan_alloc(plan, x.n)) == OSDP_OK) fill_plan(&x, bt.ch, plan);
    }
    free(bt.ch);
    ctx_free(&x);
    return s;
}

static osdp_status infeasible(const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o, int b,
                              long long limit)
{
    long long need = 0;
    osdp_plan p;
    char l1[32], l2[32];
    osdp_status s = osdp_planner_min_memory(L, dev, o, b, &need, &p);
    if (s != OSDP_OK) return s;
    osdp_cost_model cm = {.layout = L, .dev = dev, .N = o->n_ranks, .prefetch = o->prefetch, .kind = o->cost};
    int at = 0;
    (void)osdp_cost_peak(&cm, &p, b, &at);
    int top[3] = {-1, -1, -1};
    long long val[3] = {-1, -1, -1};
    for (int i = 0; i < L->n_ops; i++) {
        osdp_op_mem m;
        osdp_cost_op_mem(&cm, i, p.slices[i], p.zdp_slices[i], b, &m);
        long long v = m.state + m.resident + m.acts;
        for (int r = 0; r < 3; r++)
            if (v > val[r]) {
                for (int q = 2; q > r; q--) { val[q] = val[q - 1]; top[q] = top[q - 1]; }
                val[r] = v;
                top[r] = i;
                break;
            }
    }
    char parts[768] = "";
    for (int r = 0; r < 3 && top[r] >= 0; r++) {
        osdp_op_mem m;
        char a[32], w[32], st[32], buf[256];
        osdp_cost_op_mem(&cm, top[r], p.slices[top[r]], p.zdp_slices[top[r]], b, &m);
        snprintf(buf, sizeof buf, "%s%s %s (state %s, resident weights %s, activations %s)", r ? "; " : "",
                 L->op[top[r]].name, osdp_format_bytes((double)val[r], a, sizeof a),
                 osdp_format_bytes((double)m.state, st, sizeof st), osdp_format_bytes((double)m.resident, w, sizeof w),
                 osdp_format_bytes((double)m.acts, l1, sizeof l1));
        strncat(parts, buf, sizeof parts - strlen(parts) - 1);
    }
    osdp_plan_free(&p);
    return osdp_error_set(OSDP_ERR_INFEASIBLE,
        "no plan fits the memory limit of %s per rank at micro-batch %d on %d ranks: the smallest peak any plan "
        "needs is %s (%lld bytes, reached in the backward of %s); the operators that dominate it: %s. "
        "Raise the memory limit, use more ranks, a shorter sequence or a smaller model",
        osdp_format_bytes((double)limit, l2, sizeof l2), b, o->n_ranks,
        osdp_format_bytes((double)need, l1, sizeof l1), need, L->op[at].name, parts);
}

static int verify_applies(const osdp_device *dev, const osdp_planner_options *o)
{
    return o->verify && o->split == 1 && dev->param_bytes == 4 && dev->act_bytes == 4;
}

static osdp_status plan_batch(const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o, int b,
                              int accum, double deadline, osdp_planner_result *res)
{
    double t0 = now_s();
    memset(res, 0, sizeof *res);
    res->runtime_peak = -1;
    osdp_status s = check_options(L, dev, o);
    if (s != OSDP_OK) return s;
    if (b < 1 || accum < 1)
        return osdp_error_set(OSDP_ERR_INPUT, "planner: micro-batch %d and accumulation %d must be >= 1", b, accum);
    const long long limit = o->mem_limit > 0 ? o->mem_limit : dev->mem_limit;
    res->mem_limit = limit;
    res->batches_tried = 1;
    pctx x;
    s = ctx_build(&x, L, dev, o, b, accum, 0, res);
    if (s != OSDP_OK) return s;
    x.deadline = deadline;
    best_t bt = {.ch = malloc(sizeof(int) * (size_t)x.n)};
    if (!bt.ch) s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    if (s == OSDP_OK) s = osdp_plan_alloc(&res->plan, x.n);
    long long eff = limit;
    for (int round = 0; s == OSDP_OK; round++) {
        if (round == 8) {
            s = osdp_error_set(OSDP_ERR_INTERNAL, "planner: the runtime's memory prediction keeps exceeding the model's");
            break;
        }
        s = search(&x, eff, &bt);
        if (s != OSDP_OK) break;
        if (!bt.found) {
            s = infeasible(L, dev, o, b, limit);
            break;
        }
        fill_plan(&x, bt.ch, &res->plan);
        res->peak_bytes = osdp_cost_peak(&x.cm, &res->plan, b, &res->peak_op);
        if (verify_applies(dev, o)) {
            osdp_memory_prediction pr;
            s = osdp_memory_predict(L, &res->plan, o->n_ranks, b, accum, o->prefetch, &pr);
            if (s != OSDP_OK) break;
            res->runtime_peak = (long long)pr.peak_total;
            if (res->runtime_peak > limit) {
                eff -= res->runtime_peak - limit;
                res->tightened++;
                continue;
            }
        }
        break;
    }
    if (s == OSDP_OK) {
        res->step_s = osdp_cost_step_time(&x.cm, &res->plan, b, accum);
        res->samples_per_s = (double)b * o->n_ranks * accum / res->step_s;
        res->plan.micro_batch = b;
        res->plan.accum_steps = accum;
        res->plan.predicted_step_s = res->step_s;
        res->plan.predicted_peak_bytes = (double)(res->runtime_peak >= 0 ? res->runtime_peak : res->peak_bytes);
    }
    free(bt.ch);
    ctx_free(&x);
    res->total_s = now_s() - t0;
    return s;
}

osdp_status osdp_planner_plan_batch(const osdp_layout *layout, const osdp_device *dev, const osdp_planner_options *o,
                                    int b, int accum, osdp_planner_result *res)
{
    double dl = o->search == OSDP_SEARCH_DFS ? now_s() + (o->dfs_time_limit_s > 0 ? o->dfs_time_limit_s : 60) : 0;
    return plan_batch(layout, dev, o, b, accum, dl, res);
}

osdp_status osdp_planner_run(const osdp_layout *layout, const osdp_device *dev, const osdp_planner_options *o,
                             osdp_planner_result *res)
{
    double t0 = now_s();
    memset(res, 0, sizeof *res);
    res->runtime_peak = -1;
    osdp_status s = check_options(layout, dev, o);
    if (s != OSDP_OK) return s;
    const int N = o->n_ranks, G = o->global_batch;
    if (G < 0 || (G > 0 && G % N != 0))
        return osdp_error_set(OSDP_ERR_INPUT, "--global-batch %d is not a multiple of the %d ranks", G, N);
    if (o->micro_batch > 0 && G > 0 && (G / N) % o->micro_batch != 0)
        return osdp_error_set(OSDP_ERR_INPUT, "--global-batch %d is not a multiple of micro-batch %d x %d ranks", G,
                              o->micro_batch, N);
    const int bmax = o->micro_batch > 0 ? o->micro_batch : G > 0 ? G / N
                   : (o->max_micro_batch > 0 ? o->max_micro_batch : 256);
    double dl = o->search == OSDP_SEARCH_DFS ? now_s() + (o->dfs_time_limit_s > 0 ? o->dfs_time_limit_s : 60) : 0;
    int have = 0, tried = 0, timed_out = 0;
    long long searches = 0, nodes = 0;
    double search_s = 0;
    for (int b = o->micro_batch > 0 ? o->micro_batch : 1; b <= bmax; b++) {
        if (G > 0 && (G / N) % b != 0) continue;
        int accum = G > 0 ? G / (N * b) : 1;
        osdp_planner_result r;
        s = plan_batch(layout, dev, o, b, accum, dl, &r);
        tried++;
        searches += r.searches;
        nodes += r.nodes;
        search_s += r.search_s;
        timed_out |= r.timed_out;
        if (s == OSDP_ERR_INFEASIBLE && have) {
            osdp_planner_result_free(&r);
            s = OSDP_OK;
            break;
        }
        if (s != OSDP_OK) {
            osdp_planner_result_free(&r);
            if (have) osdp_planner_result_free(res);
            return s;
        }
        if (!have || r.samples_per_s > res->samples_per_s) {
            if (have) osdp_planner_result_free(res);
            *res = r;
            have = 1;
        } else {
            osdp_planner_result_free(&r);
        }
    }
    res->batches_tried = tried;
    res->searches = searches;
    res->nodes = nodes;
    res->search_s = search_s;
    res->timed_out = timed_out;
    res->total_s = now_s() - t0;
    return OSDP_OK;
}

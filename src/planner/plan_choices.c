/* The planner's choices per operator for one micro-batch (the arrays of
 * plan_context.h): DP / ZDP, k of g slices ZDP for one granularity or, with
 * --split auto, for every g of the set; recompute fixed or, with
 * --recompute auto, both ways for attn and mlp operators.  Choices that
 * another choice of the same operator dominates in every term of the peak
 * and in time are dropped; so are, for operators no transient constraint
 * can touch, those dominated in memory and time alone (prune_free).
 * Operators of one shape (blocks of one width) are costed once. */
#include "osdp/pipeline.h"
#include "choice_memo.h"
#include "plan_context.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* a is no worse than b in every term */
static int no_worse(const choice_terms *a, const choice_terms *b)
{
    const osdp_op_peak_terms *p = &a->mem, *q = &b->mem;
    return p->held <= q->held && p->acts <= q->acts && p->pass_peak <= q->pass_peak && p->prefetch <= q->prefetch
        && p->in_flight <= q->in_flight && p->forward_peak <= q->forward_peak && p->forward_next <= q->forward_next
        && p->view <= q->view && a->first_pass <= b->first_pass && a->time <= b->time;
}

/* Drops the dominated choices of one operator: b goes when some a is no
 * worse in every term and strictly better in one, or equal in all and
 * earlier.  Exchanging b for a in any plan then raises neither the step
 * time nor the peak at any moment (activations only ever count from their
 * operator on), so a best plan among the remaining choices is a best plan. */
static int prune(choice_terms *c, int n)
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

/* the stage's wrap moment applies (osdp/cost_model.h: prefetch on, some pass after a backward) */
static int wraps(const osdp_ps_context *ctx)
{
    return ctx->cost.geo.prefetch && ctx->cost.next_passes;
}

/* the terms the search sees of one choice's memory and time */
static void set_terms(const osdp_ps_context *ctx, int i, const osdp_op_mem *m, const osdp_op_time *ot, choice_terms *c)
{
    memset(c, 0, sizeof *c);
    osdp_cost_peak_terms(&ctx->cost, i, m, &c->mem);
    c->first_pass = c->mem.pass_peak;
    if (i == 0 && wraps(ctx)) {   /* the wrap moments of the first operator alone (plan_context.h) */
        osdp_op_peak_terms *t = &c->mem;
        if ((ctx->cost.next_passes & OSDP_PIPE_THEN_FORWARD) && t->pass_peak_then_forward > t->pass_peak)
            t->pass_peak = t->pass_peak_then_forward;
        if ((ctx->cost.next_passes & OSDP_PIPE_THEN_BACKWARD) && ctx->n_ops == 1 && t->pass_peak_again > t->pass_peak)
            t->pass_peak = t->pass_peak_again;
    }
    c->time = ctx->minimise_memory ? 0 : ot->total; /* minimising memory: time tells nothing apart */
}

/* The reduce-once slices J (osdp/plan.h: the last J of the g) a choice may
 * take, in three rounds: none (round 0), all (1), some, 0 < J < g (2).
 * The options allow none (every), all (once), or any count under auto when
 * the step accumulates (A > 1: with one micro-batch the traffic is the
 * same).  The rounds keep the choices of none and all in the order they had
 * before counts were choices, so ties between them break as they did. */
static int reduce_once_round(const osdp_ps_context *ctx, int accum, int round)
{
    const osdp_grad_reduce r = ctx->opts->grad_reduce;
    const int any = r == OSDP_GRAD_REDUCE_AUTO && accum > 1;
    return round == 0 ? r != OSDP_GRAD_REDUCE_ONCE : round == 1 ? r == OSDP_GRAD_REDUCE_ONCE || any : any;
}

/* operator i's choices: every (g, k, recompute) with each count of
 * reduce-once slices, and hierarchical (unsplit) where the levels allow;
 * none dropped */
static int raw_choices(const osdp_ps_context *ctx, int i, int b, int accum, choice_terms *out)
{
    const osdp_planner_options *o = ctx->opts;
    const osdp_op_layout *op = &ctx->cost.layout->op[i];
    int gs[8], ng = granularities(&ctx->cost, o, i, gs), n = 0;
    int can_rc = osdp_op_can_recompute(op->type);
    int rc_lo = o->recompute ? o->recompute[i] != 0 : 0, rc_hi = rc_lo;
    if (o->recompute_auto && can_rc) {
        rc_lo = 0;
        rc_hi = 1;
    }
    /* an operator that may not be ZDP (the layout's allowed modes: a tied head's embedding) is DP whatever
     * the modes */
    const int dp_only = !osdp_op_allows_zdp(ctx->cost.layout, i);
    for (int round = 0; round < 3; round++) {
        if (!reduce_once_round(ctx, accum, round)) continue;
        for (int rc = rc_lo; rc <= rc_hi; rc++)
            for (int gi = 0; gi < ng; gi++)
                for (int k = 0; k <= gs[gi]; k++) {
                    if (dp_only && k != 0) continue;
                    if (!dp_only && o->modes == OSDP_MODES_ALL_DP && k != 0) continue;
                    if (!dp_only && o->modes == OSDP_MODES_ALL_ZDP && k != gs[gi]) continue;
                    const int ro_lo = round == 0 ? 0 : round == 1 ? gs[gi] : 1;
                    const int ro_hi = round == 0 ? 0 : gs[gi] - (round == 2);
                    for (int ro = ro_lo; ro <= ro_hi; ro++) {
                        osdp_op_time ot;
                        osdp_cost_op_time_choice(&ctx->cost, i, gs[gi], k, rc, ro, b, accum, &ot);
                        choice_terms *c = &out[n++];
                        if (ctx->times_only) {
                            memset(c, 0, sizeof *c);
                            c->time = ot.total;
                        } else {
                            osdp_op_mem m;
                            osdp_cost_op_mem_choice(&ctx->cost, i, gs[gi], k, rc, ro, b, &m);
                            set_terms(ctx, i, &m, &ot, c);
                        }
                        c->slices = gs[gi];
                        c->zdp_slices = k;
                        c->recompute = rc;
                        c->reduce_once = ro;
                    }
                }
        /* hierarchical (a two-level network whose data group spans nodes): unsplit, for any operator ZDP may
         * take */
        osdp_ps_context view = *ctx;
        view.cost.reduce_once = round == 1 ? ctx->all_once : NULL;
        for (int rc = rc_lo; rc <= rc_hi && round < 2 && ctx->cost.hier && !dp_only && o->modes == OSDP_MODES_ANY; rc++) {
            osdp_op_time ot;
            osdp_cost_op_time_hier(&view.cost, i, rc, b, accum, &ot);
            choice_terms *c = &out[n++];
            if (ctx->times_only) {
                memset(c, 0, sizeof *c);
                c->time = ot.total;
            } else {
                osdp_op_mem m;
                osdp_cost_op_mem_hier(&view.cost, i, rc, b, &m);
                set_terms(&view, i, &m, &ot, c);
            }
            c->slices = c->zdp_slices = c->hierarchical = 1;
            c->recompute = rc;
            c->reduce_once = round == 1;
        }
    }
    return n;
}

/* what operator i's raw choices depend on beyond the pipeline planning call (choice_memo.h) */
static choice_key key_of(const osdp_ps_context *ctx, int i)
{
    const osdp_cost_model *cm = &ctx->cost;
    const osdp_planner_options *o = ctx->opts;
    return (choice_key){.op = &cm->layout->op[i], .sends = osdp_cost_op_sends(cm->layout, i),
                        .last = i == cm->layout->n_ops - 1, .allows_zdp = osdp_op_allows_zdp(cm->layout, i),
                        .recompute = o->recompute ? o->recompute[i] != 0 : 0, .tied = osdp_cost_tied_grads(cm, i),
                        .dev = cm->dev, .hier = cm->hier, .geo = cm->geo, .seq_len = cm->layout->T,
                        .kind = cm->kind, .split_auto = o->split_auto, .split = o->split,
                        .split_max = o->split_max, .recompute_auto = o->recompute_auto, .modes = (int)o->modes,
                        .grad_reduce = (int)o->grad_reduce};
}

/* operator i's choices, those another dominates dropped (unless the context is for bounds).  With the
 * options' memo (not for a wrapped stage's first operator, whose terms are its own): the choices a context
 * like this one kept before; else its raw choices at in_flight 0, made once, then the stage's micro-batches
 * in flight, (in_flight - 1) acts held more, and the dominated dropped */
static int make_choices(const osdp_ps_context *ctx, int i, int b, int accum, choice_terms *out)
{
    osdp_choice_memo *memo = ctx->times_only || (i == 0 && wraps(ctx)) ? NULL : ctx->opts->choice_memo;
    if (!memo) {
        const int n = raw_choices(ctx, i, b, accum, out);
        return ctx->bound_only ? n : prune(out, n);
    }
    const choice_key key = key_of(ctx, i);
    const int kept = osdp_choices_kept(ctx->cost.in_flight, ctx->minimise_memory);
    int n = ctx->bound_only ? -1 : osdp_choice_memo_find(memo, &key, kept, out);
    if (n >= 0) return n;
    if ((n = osdp_choice_memo_find(memo, &key, OSDP_CHOICES_RAW, out)) < 0) {
        osdp_ps_context raw = *ctx;   /* the same terms, none held for other micro-batches, every time */
        raw.cost.in_flight = 0;
        raw.minimise_memory = 0;
        n = raw_choices(&raw, i, b, accum, out);
        osdp_choice_memo_add(memo, &key, OSDP_CHOICES_RAW, out, n);
    }
    const long long more = ctx->cost.in_flight > 1 ? ctx->cost.in_flight - 1 : 0;
    for (int j = 0; j < n; j++) {
        out[j].mem.held += more * out[j].mem.acts;
        if (ctx->minimise_memory) out[j].time = 0;   /* minimising memory: time tells nothing apart */
    }
    if (ctx->bound_only) return n;
    n = prune(out, n);
    osdp_choice_memo_add(memo, &key, kept, out, n);
    return n;
}

/* the last of the representatives reps[0 .. nreps) whose choices operator i shares (its shape, its plan's
 * recompute and whether it sends: its terms are its own otherwise), -1 if none */
static int earlier_like(const osdp_layout *L, const osdp_planner_options *o, const int *reps, int nreps, int i)
{
    const int rci = o->recompute ? o->recompute[i] != 0 : 0;
    for (int q = nreps - 1; q >= 0; q--)
        if (osdp_op_same_shape(&L->op[reps[q]], &L->op[i]) && (o->recompute ? o->recompute[reps[q]] != 0 : 0) == rci
            && osdp_cost_op_sends(L, reps[q]) == osdp_cost_op_sends(L, i))
            return reps[q];
    return -1;
}

static osdp_status order_items(osdp_ps_context *ctx);

/* K[u] = - sum_{j >= u+2} acts_j: at its smallest (Kopt) and largest (Kpes) */
static void make_later_acts_bounds(osdp_ps_context *ctx)
{
    long long smax = 0, smin = 0;
    for (int u = ctx->n_ops - 1; u >= 0; u--) {
        ctx->later_acts_optimistic[u] = -smax;
        ctx->later_acts_pessimistic[u] = -smin;
        int j = u + 1;
        if (j < ctx->n_ops) {
            long long hi = LLONG_MIN, lo = LLONG_MAX;
            for (int q = 0; q < ctx->n_choices[j]; q++) {
                long long v = ctx->act_bytes[PS_CHOICE(ctx, j, q)];
                if (v > hi) hi = v;
                if (v < lo) lo = v;
            }
            smax += hi;
            smin += lo;
        }
    }
    ctx->later_acts_bound = ctx->later_acts_optimistic;
}

/* lo / hi of v over operator i's choices (0, 0 when i is out of range) */
static void span(const osdp_ps_context *ctx, const long long *v, int i, long long *lo, long long *hi)
{
    *lo = *hi = 0;
    if (i < 0 || i >= ctx->n_ops) return;
    *lo = LLONG_MAX;
    *hi = LLONG_MIN;
    for (int c = 0; c < ctx->n_choices[i]; c++) {
        long long a = v[PS_CHOICE(ctx, i, c)];
        if (a < *lo) *lo = a;
        if (a > *hi) *hi = a;
    }
}

/* operator i keeps its choices j of keep[j] (in order) */
static void keep_choices(osdp_ps_context *ctx, int i, const unsigned char *keep)
{
    int m = 0;
    for (int j = 0; j < ctx->n_choices[i]; j++) {
        if (!keep[j]) continue;
        size_t b = PS_CHOICE(ctx, i, j);
        size_t d = PS_CHOICE(ctx, i, m++);
        ctx->choice_slices[d] = ctx->choice_slices[b];
        ctx->choice_zdp_slices[d] = ctx->choice_zdp_slices[b];
        ctx->choice_recompute[d] = ctx->choice_recompute[b];
        ctx->choice_hierarchical[d] = ctx->choice_hierarchical[b];
        ctx->choice_reduce_once[d] = ctx->choice_reduce_once[b];
        ctx->held_bytes[d] = ctx->held_bytes[b];
        ctx->pass_peak_bytes[d] = ctx->pass_peak_bytes[b];
        ctx->prefetch_bytes[d] = ctx->prefetch_bytes[b];
        ctx->next_op_bytes[d] = ctx->next_op_bytes[b];
        ctx->act_bytes[d] = ctx->act_bytes[b];
        ctx->forward_peak_bytes[d] = ctx->forward_peak_bytes[b];
        ctx->view_bytes[d] = ctx->view_bytes[b];
        ctx->forward_next_bytes[d] = ctx->forward_next_bytes[b];
        ctx->objective[d] = ctx->objective[b];
    }
    ctx->n_choices[i] = m;
}

/* Operators no constraint Z_u <= d or F_u <= d of any plan can touch.
 * Every plan's transient is at least dlo = the largest min Z_u or min F_u;
 * a constraint whose largest value (later activations at their smallest)
 * is below dlo is never the maximum.  An operator whose constraints (Z and
 * F at u-1, u, u+1 and, when its activations vary, every Z and F before)
 * are all such only adds memory and time:
 * its choices dominated in (R, t) alone go too (ties: the earlier stays). */
static int prune_free(osdp_ps_context *ctx)
{
    const int n = ctx->n_ops;
    long long *zlo = malloc(sizeof *zlo * 2 * (size_t)n), *zhi = zlo + n;   /* per u, of Z_u and F_u together */
    unsigned char *slack = malloc((size_t)n), *kept = calloc((size_t)n, 1);
    unsigned char *keeps = malloc((size_t)n * (size_t)ctx->stride);
    if (!zlo || !slack || !kept || !keeps) {
        free(zlo); free(slack); free(kept); free(keeps);
        return -1;
    }
    long long dlo = LLONG_MIN;
    for (int u = 0; u < n; u++) {
        zlo[u] = LLONG_MIN;
        zhi[u] = LLONG_MIN;
        for (int forward = 0; forward < 2; forward++) {   /* Z_u, then F_u */
            const osdp_ps_moment t = osdp_ps_moment_of(ctx, forward * n + u);
            long long wl, wh, fl, fh, xl, xh;
            span(ctx, t.mid, u, &wl, &wh);
            span(ctx, t.left, u - 1, &fl, &fh);
            span(ctx, t.right, u + 1, &xl, &xh);
            const long long lo = ctx->later_acts_optimistic[u] + wl + fl + xl;
            const long long hi = ctx->later_acts_pessimistic[u] + wh + fh + xh;
            if (lo > zlo[u]) zlo[u] = lo;
            if (hi > zhi[u]) zhi[u] = hi;
        }
        if (zlo[u] > dlo) dlo = zlo[u];
    }
    int prefix = 1; /* every Z before u - 1 slack */
    for (int u = 0; u < n; u++) slack[u] = zhi[u] < dlo;
    for (int i = 0; i < n; i++) {
        if (i >= 2) prefix &= slack[i - 2];
        long long al, ah;
        span(ctx, ctx->act_bytes, i, &al, &ah);
        int free_op = (i == 0 || slack[i - 1]) && slack[i] && (i + 1 >= n || slack[i + 1]) && (al == ah || prefix);
        if (!free_op) continue;
        const int rep = ctx->group[i] / 2;
        unsigned char *keep = keeps + (size_t)rep * (size_t)ctx->stride;
        ctx->group[i] = 2 * rep + 1; /* pruned alike for every free operator of its group */
        if (!kept[rep]) { /* the first free operator of its group: which of its choices stay */
            kept[rep] = 1;
            for (int j = 0; j < ctx->n_choices[i]; j++) {
                size_t b = PS_CHOICE(ctx, i, j);
                int gone = 0;
                for (int q = 0; q < ctx->n_choices[i] && !gone; q++) {
                    size_t a = PS_CHOICE(ctx, i, q);
                    if (q == j || ctx->held_bytes[a] > ctx->held_bytes[b] || ctx->objective[a] > ctx->objective[b])
                        continue;
                    gone = q < j || ctx->held_bytes[a] < ctx->held_bytes[b] || ctx->objective[a] < ctx->objective[b];
                }
                keep[j] = (unsigned char)!gone;
            }
        }
        keep_choices(ctx, i, keep);
    }
    free(zlo); free(slack); free(kept); free(keeps);
    return 0;
}

/* The context's arrays, each its own allocation (one block per element
 * type measured about 7% slower on N&D with --split auto, whose scheduler
 * builds a context per micro-batch); -1 when out of memory, what was
 * allocated left for osdp_ps_context_free. */
static int alloc_arrays(osdp_ps_context *ctx)
{
    const size_t n = (size_t)ctx->n_ops, nk = n * (size_t)ctx->stride;
    signed char **flags[] = {&ctx->choice_slices, &ctx->choice_zdp_slices, &ctx->choice_recompute,
                             &ctx->choice_hierarchical, &ctx->choice_reduce_once};
    long long **choice_bytes[] = {&ctx->held_bytes, &ctx->pass_peak_bytes, &ctx->prefetch_bytes, &ctx->next_op_bytes,
                                  &ctx->act_bytes, &ctx->forward_peak_bytes, &ctx->view_bytes,
                                  &ctx->forward_next_bytes, &ctx->knap_mem_buf};
    long long **op_bytes[] = {&ctx->later_acts_optimistic, &ctx->later_acts_pessimistic};
    double **choice_reals[] = {&ctx->objective, &ctx->knap_time_buf};
    int **op_ints[] = {&ctx->knap_order, &ctx->knap_n_choices, &ctx->knap_solution};
    int ok = 1;
    for (size_t a = 0; a < sizeof flags / sizeof *flags; a++) ok &= (*flags[a] = malloc(nk)) != NULL;
    for (size_t a = 0; a < sizeof choice_bytes / sizeof *choice_bytes; a++)
        ok &= (*choice_bytes[a] = malloc(nk * sizeof **choice_bytes[a])) != NULL;
    for (size_t a = 0; a < sizeof op_bytes / sizeof *op_bytes; a++)
        ok &= (*op_bytes[a] = malloc(n * sizeof **op_bytes[a])) != NULL;
    for (size_t a = 0; a < sizeof choice_reals / sizeof *choice_reals; a++)
        ok &= (*choice_reals[a] = malloc(nk * sizeof **choice_reals[a])) != NULL;
    for (size_t a = 0; a < sizeof op_ints / sizeof *op_ints; a++)
        ok &= (*op_ints[a] = malloc(n * sizeof **op_ints[a])) != NULL;
    ok &= (ctx->knap_choice = malloc(nk * sizeof *ctx->knap_choice)) != NULL;
    ok &= (ctx->knap_mem = malloc(n * sizeof *ctx->knap_mem)) != NULL;
    ok &= (ctx->knap_time = malloc(n * sizeof *ctx->knap_time)) != NULL;
    ok &= (ctx->search_workspace = osdp_search_workspace_new()) != NULL;
    return ok ? 0 : -1;
}

static int cmp_bytes(const void *a, const void *b)
{
    const long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* The pairing of the wrap moment (plan_context.h) on a stage of n > 1
 * operators whose backward follows a backward: the distinct f of the last
 * operator into wrap_values; for F = wrap_values[wrap], the last operator's
 * choices of f = F alone and F folded into the first operator's wp
 * (first_pass: its wp without the wrap moments, per choice); wrap -1 (or
 * past the values), a bound-only context: first_pass kept for the true
 * transient.  -1 when out of memory. */
static int pair_wrap(osdp_ps_context *ctx, const choice_terms *first, int wrap)
{
    const int n = ctx->n_ops, last = n - 1;
    if (!wraps(ctx) || !(ctx->cost.next_passes & OSDP_PIPE_THEN_BACKWARD) || n < 2) return 0;
    long long *v = malloc(sizeof *v * (size_t)ctx->n_choices[last]);
    unsigned char *keep = malloc((size_t)ctx->n_choices[last]);
    if (!v || !keep) {
        free(v), free(keep);
        return -1;
    }
    int nv = 0;
    for (int c = 0; c < ctx->n_choices[last]; c++) v[nv++] = ctx->prefetch_bytes[PS_CHOICE(ctx, last, c)];
    qsort(v, (size_t)nv, sizeof *v, cmp_bytes);
    int w = 0;
    for (int j = 0; j < nv; j++)
        if (w == 0 || v[j] != v[w - 1]) v[w++] = v[j];
    ctx->wrap_values = v;
    ctx->n_wrap_values = w;
    if (wrap >= 0 && wrap < w) {
        const long long F = v[wrap];
        for (int c = 0; c < ctx->n_choices[last]; c++) keep[c] = ctx->prefetch_bytes[PS_CHOICE(ctx, last, c)] == F;
        keep_choices(ctx, last, keep);
        ctx->group[last] = 2 * last;   /* its own choices now: a group of its own */
        for (int c = 0; c < ctx->n_choices[0]; c++) {
            long long *wp = &ctx->pass_peak_bytes[PS_CHOICE(ctx, 0, c)];
            if (first[c].first_pass + F > *wp) *wp = first[c].first_pass + F;
        }
    } else if (ctx->bound_only) {
        if (!(ctx->wrap_first_pass = malloc(sizeof *ctx->wrap_first_pass * (size_t)ctx->stride))) {
            free(keep);
            return -1;
        }
        for (int c = 0; c < ctx->stride; c++) ctx->wrap_first_pass[c] = first[c < ctx->n_choices[0] ? c : 0].first_pass;
    }
    free(keep);
    return 0;
}

/* The start of a context for micro-batch b of accum: its cost model as the options say (in_flight,
 * stage buffers, next passes: a pipeline stage's), the cuts cache (NULL: its own), no choices yet; the
 * cost model's reduce_once for the choices that reduce once, and for every operator under once.  -1
 * when out of memory (what was allocated left for osdp_ps_context_free). */
static int context_start(osdp_ps_context *ctx, const osdp_layout *L, const osdp_device *dev,
                         const osdp_planner_options *o, int b, int accum, osdp_cost_cuts *cuts,
                         osdp_planner_result *counters)
{
    memset(ctx, 0, sizeof *ctx);
    osdp_cost_model_init(&ctx->cost, L, dev, &o->geo, o->cost, o->hierarchy);
    ctx->cost.recompute = o->recompute;
    /* the cuts of each operator and g once, not once per (k, recompute, reduce-once) choice: with --split
     * auto and --grad-reduce auto a hundred choices or more per g (the 3D search's bound contexts, built
     * per stage and candidate, spent 40% of their time cutting) */
    if (!cuts) cuts = ctx->own_cuts = osdp_cost_cuts_new(L->n_ops);   /* NULL: uncached, as before */
    ctx->cost.cuts = cuts;
    ctx->cost.in_flight = o->stage_in_flight;
    ctx->cost.stage_buffer_bytes = o->stage_buffer_bytes;
    ctx->cost.next_passes = o->stage_next_passes;
    ctx->opts = o;
    ctx->n_ops = L->n_ops;
    ctx->cutoff = INFINITY;
    ctx->counters = counters;
    ctx->cost.geo.micro_batch = b;   /* what it was built for */
    ctx->cost.geo.accum_steps = accum;
    const int n = L->n_ops;
    if (!(ctx->all_once = malloc(sizeof *ctx->all_once * (size_t)(n > 0 ? n : 1)))) return -1;
    for (int i = 0; i < n; i++) ctx->all_once[i] = OSDP_MAX_SLICES;   /* at least g: every slice */
    if (o->grad_reduce == OSDP_GRAD_REDUCE_ONCE) ctx->cost.reduce_once = ctx->all_once;
    return 0;
}

/* the most choices of one operator: every k of every g in 1, 2, 4, 8, 16 and hierarchical, recompute both
 * ways, each with every count of reduce-once slices (g + 1 of them) under auto */
static int choices_cap(const osdp_planner_options *o, int accum)
{
    const int ro_auto = o->grad_reduce == OSDP_GRAD_REDUCE_AUTO && accum > 1;
    return ro_auto ? 2 * (2 * 2 + 3 * 3 + 5 * 5 + 9 * 9 + 17 * 17 + 2) : 2 * (2 + 3 + 5 + 9 + 17 + 1);
}

osdp_status osdp_ps_context_build(osdp_ps_context *ctx, const osdp_layout *L, const osdp_device *dev,
                                  const osdp_planner_options *o, int b, int accum, int minimise_memory,
                                  osdp_cost_cuts *cuts, osdp_planner_result *counters)
{
    return osdp_ps_context_build_wrap(ctx, L, dev, o, b, accum, minimise_memory, cuts, counters, -1);
}

osdp_status osdp_ps_context_build_wrap(osdp_ps_context *ctx, const osdp_layout *L, const osdp_device *dev,
                                       const osdp_planner_options *o, int b, int accum, int minimise_memory,
                                       osdp_cost_cuts *cuts, osdp_planner_result *counters, int wrap)
{
    const int started = context_start(ctx, L, dev, o, b, accum, cuts, counters);
    ctx->minimise_memory = minimise_memory == 1;
    ctx->bound_only = minimise_memory == 2;
    const int n = ctx->n_ops, cap = choices_cap(o, accum);
    choice_terms *c = malloc(sizeof *c * (size_t)cap * (size_t)n);
    ctx->n_choices = malloc(sizeof *ctx->n_choices * (size_t)n);
    ctx->group = malloc(sizeof *ctx->group * (size_t)n);
    int *reps = malloc(sizeof *reps * (size_t)n), nreps = 0;
    if (started || !c || !ctx->n_choices || !ctx->group || !reps) {
        free(reps);
        goto oom;
    }
    for (int i = 0; i < n; i++) {
        choice_terms *ci = c + (size_t)i * (size_t)cap;
        int r = earlier_like(L, o, reps, nreps, i);   /* an earlier operator just like it: its choices */
        if (r >= 0) {
            ctx->n_choices[i] = ctx->n_choices[r];
        } else {
            ctx->n_choices[i] = make_choices(ctx, i, b, accum, ci);
            r = i;
            /* a wrapped stage's first operator has terms of its own (set_terms): no other operator's */
            if (i > 0 || !wraps(ctx)) reps[nreps++] = i;
        }
        ctx->group[i] = 2 * r;
        if (ctx->n_choices[i] > ctx->stride) ctx->stride = ctx->n_choices[i];
    }
    free(reps);
    if (alloc_arrays(ctx)) goto oom;
    ctx->fixed_bytes = osdp_cost_workspace(&ctx->cost, b);
    for (int i = 0; i < n; i++) {
        const choice_terms *ci = c + (size_t)(ctx->group[i] / 2) * (size_t)cap; /* its representative's choices */
        long long lo = LLONG_MAX;
        for (int j = 0; j < ctx->n_choices[i]; j++)
            if (ci[j].mem.held + ci[j].mem.acts < lo) lo = ci[j].mem.held + ci[j].mem.acts;
        ctx->fixed_bytes += lo;
        for (int j = 0; j < ctx->stride; j++) {
            const choice_terms *e = &ci[j < ctx->n_choices[i] ? j : 0]; /* past n_choices[i]: never read, kept defined */
            size_t a = PS_CHOICE(ctx, i, j);
            ctx->choice_slices[a] = (signed char)e->slices;
            ctx->choice_zdp_slices[a] = (signed char)e->zdp_slices;
            ctx->choice_recompute[a] = (signed char)e->recompute;
            ctx->choice_hierarchical[a] = (signed char)e->hierarchical;
            ctx->choice_reduce_once[a] = (signed char)e->reduce_once;
            ctx->held_bytes[a] = e->mem.held + e->mem.acts - lo;
            ctx->pass_peak_bytes[a] = e->mem.pass_peak;
            ctx->prefetch_bytes[a] = e->mem.prefetch;
            ctx->next_op_bytes[a] = e->mem.in_flight - e->mem.acts;
            ctx->act_bytes[a] = e->mem.acts;
            ctx->forward_peak_bytes[a] = e->mem.forward_peak;
            ctx->view_bytes[a] = e->mem.view;
            ctx->forward_next_bytes[a] = e->mem.forward_next - e->mem.acts;
            ctx->objective[a] = ctx->minimise_memory ? (double)ctx->held_bytes[a] : e->time;
        }
    }
    if (pair_wrap(ctx, c, wrap)) goto oom;
    free(c);
    c = NULL;
    make_later_acts_bounds(ctx);
    if (minimise_memory == 2) return OSDP_OK; /* bounds only: every choice, no search */
    if (prune_free(ctx)) goto oom;
    make_later_acts_bounds(ctx);
    osdp_status s = order_items(ctx);
    if (s != OSDP_OK) osdp_ps_context_free(ctx);
    return s;
oom:
    free(c);
    osdp_ps_context_free(ctx);
    return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
}

typedef struct op_swing { long long swing; int op; } op_swing;
static int cmp_op_swing(const void *a, const void *b)
{
    const op_swing *p = a, *q = b;
    if (p->swing != q->swing) return p->swing > q->swing ? -1 : 1;
    return p->op < q->op ? -1 : p->op > q->op;
}

/* Knapsack item order: operators by decreasing memory swing (the additive
 * bytes their choices span), model order among equals. */
static osdp_status order_items(osdp_ps_context *ctx)
{
    op_swing *k = malloc(sizeof *k * (size_t)ctx->n_ops);
    if (!k) return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    for (int i = 0; i < ctx->n_ops; i++) {
        long long lo = LLONG_MAX, hi = LLONG_MIN;
        for (int c = 0; c < ctx->n_choices[i]; c++) {
            long long r = ctx->held_bytes[PS_CHOICE(ctx, i, c)];
            if (r < lo) lo = r;
            if (r > hi) hi = r;
        }
        k[i].swing = hi - lo;
        k[i].op = i;
    }
    qsort(k, (size_t)ctx->n_ops, sizeof *k, cmp_op_swing);
    for (int j = 0; j < ctx->n_ops; j++) ctx->knap_order[j] = k[j].op;
    free(k);
    return OSDP_OK;
}

osdp_status osdp_ps_fastest_times(const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o, int b,
                                  int accum, double *fastest)
{
    /* a context of the options' operators with nothing but what make_choices reads: no arrays (the 3D
     * search asks this of every candidate; a whole context each, its per-choice arrays filled for every
     * operator, was a tenth of it) */
    osdp_ps_context ctx;
    const int started = context_start(&ctx, L, dev, o, b, accum, NULL, NULL);
    ctx.bound_only = ctx.times_only = 1;
    const int n = L->n_ops;
    choice_terms *c = malloc(sizeof *c * (size_t)choices_cap(o, accum));
    int *reps = malloc(sizeof *reps * (size_t)(n > 0 ? n : 1)), nreps = 0;
    if (started || !c || !reps) {
        free(c), free(reps);
        osdp_ps_context_free(&ctx);
        return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    }
    for (int i = 0; i < n; i++) {
        const int r = earlier_like(L, o, reps, nreps, i);   /* as osdp_ps_context_build groups them */
        if (r >= 0) {
            fastest[i] = fastest[r];
            continue;
        }
        const int m = make_choices(&ctx, i, b, accum, c);
        fastest[i] = INFINITY;
        for (int j = 0; j < m; j++)
            if (c[j].time < fastest[i]) fastest[i] = c[j].time;
        if (i > 0 || !wraps(&ctx)) reps[nreps++] = i;
    }
    free(c), free(reps);
    osdp_ps_context_free(&ctx);
    return OSDP_OK;
}

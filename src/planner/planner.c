/* The planner: builds the knapsacks, searches over the transient bound,
 * verifies, and schedules micro-batches (method and guarantee in
 * osdp/planner.h). */
#include "osdp/planner.h"
#include "util/clock.h"
#include "osdp/memory.h"
#include "osdp/runtime.h"
#include "planner/search.h"
#include "plan_search.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

void osdp_planner_defaults(osdp_planner_options *o)
{
    memset(o, 0, sizeof *o);
    o->geo.n_ranks = 1;
    o->max_micro_batch = 256;
    o->geo.prefetch = 1;
    o->split = 1;
    o->search = OSDP_SEARCH_EXACT;
    o->cost = OSDP_COST_PAPER;
    o->modes = OSDP_MODES_ANY;
    o->dfs_time_limit_s = 60;
    o->verify = 1;
}

const osdp_cost_hierarchy *osdp_planner_hierarchy(const osdp_planner_options *o, const osdp_device *dev, int tp, int dp,
                                                  int pp, osdp_cost_hierarchy *buf)
{
    return o->offer_hierarchical && osdp_cost_hierarchy_for_mesh(dev, tp, dp, pp, buf) ? buf : NULL;
}

void osdp_planner_result_free(osdp_planner_result *res)
{
    if (res) osdp_plan_free(&res->plan);
}

/* ------------------------------------------------------------------------ */
/* public entry points                                                       */

static osdp_status check_options(const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o)
{
    (void)L;
    if (o->geo.n_ranks < 1) return osdp_error_set(OSDP_ERR_INPUT, "planner: ranks must be at least 1 (got %d)", o->geo.n_ranks);
    if (o->split < 1 || o->split > OSDP_MAX_SLICES)
        return osdp_error_set(OSDP_ERR_INPUT, "planner: --split %d out of range [1, %d]", o->split, OSDP_MAX_SLICES);
    if (o->split_max < 0 || o->split_max > OSDP_MAX_SLICES)
        return osdp_error_set(OSDP_ERR_INPUT, "planner: split_max %d out of range [0, %d]", o->split_max, OSDP_MAX_SLICES);
    if (o->mem_limit < 0 || (o->mem_limit == 0 && dev->mem_limit <= 0))
        return osdp_error_set(OSDP_ERR_INPUT, "planner: no positive memory limit (device mem_limit or --mem-limit)");
    return OSDP_OK;
}

static void fill_plan(const osdp_ps_context *ctx, const int *ch, osdp_plan *plan)
{
    for (int i = 0; i < ctx->n_ops; i++) {
        size_t a = PS_CHOICE(ctx, i, ch[i]);
        plan->slices[i] = ctx->choice_slices[a];
        plan->zdp_slices[i] = ctx->choice_zdp_slices[a];
        plan->recompute[i] = ctx->choice_recompute[a];
        plan->hierarchical[i] = ctx->choice_hierarchical[a];
        plan->reduce_once[i] = ctx->choice_reduce_once[a];
    }
}

/* The search's best plan into *plan (allocated for L), over every context
 * it needs (plan_context.h): one, or on a pipeline stage whose wrap moment
 * pairs its first operator with its last, one per value of the last's f,
 * the best of them (the first on ties).  minimise_memory: the smallest peak
 * (*value: its bytes); else the fastest plan of peak <= limit and time <=
 * cutoff (*value: its time).  *found 0: no plan; *cost: the cost model of
 * the search (its next_passes: the peak with the wrap moment). */
static osdp_status search_plan(const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o, int b,
                               int accum, int minimise_memory, double deadline, double cutoff, long long limit,
                               osdp_cost_cuts *cuts, osdp_planner_result *counters, osdp_plan *plan, int *found,
                               double *value, osdp_cost_model *cost)
{
    osdp_status s = OSDP_OK;
    *found = 0;
    for (int wrap = 0, n_wrap = 1; wrap < n_wrap && s == OSDP_OK; wrap++) {
        osdp_ps_context ctx;
        s = osdp_ps_context_build_wrap(&ctx, L, dev, o, b, accum, minimise_memory, cuts, counters, wrap);
        if (s != OSDP_OK) break;
        if (ctx.n_wrap_values > 1) n_wrap = ctx.n_wrap_values;
        *cost = ctx.cost;
        cost->reduce_once = NULL;   /* the context's own array (peak and time read the plan's) */
        cost->cuts = cuts;          /* not the context's own cache, freed with it */
        ctx.deadline = deadline;
        /* after a plan: only a faster one (the memory search compares peaks across contexts below) */
        ctx.cutoff = *found && !minimise_memory ? nextafter(*value, -INFINITY) : cutoff;
        osdp_ps_best best = {.choice = malloc(sizeof(int) * (size_t)ctx.n_ops)};
        if (!best.choice) s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
        if (s == OSDP_OK) s = osdp_ps_search(&ctx, minimise_memory ? LLONG_MAX / 8 : limit, &best);
        if (s == OSDP_OK && best.found) {
            const double v = minimise_memory ? (double)(ctx.fixed_bytes + (long long)best.objective) : best.objective;
            if (!*found || v < *value) {
                *found = 1;
                *value = v;
                fill_plan(&ctx, best.choice, plan);
            }
        }
        free(best.choice);
        osdp_ps_context_free(&ctx);
    }
    return s;
}

/* the smallest peak at micro-batch b of accum micro-batches a step (with accumulation, the reduce-once choices
 * too: the same choices as the search's) */
static osdp_status min_memory(const osdp_layout *layout, const osdp_device *dev, const osdp_planner_options *o, int b,
                              int accum, long long *bytes, osdp_plan *plan)
{
    osdp_status s = check_options(layout, dev, o);
    if (s != OSDP_OK) return s;
    osdp_planner_result acc;
    memset(&acc, 0, sizeof acc);
    osdp_plan p;
    if ((s = osdp_plan_alloc(&p, layout->n_ops)) != OSDP_OK) return s;
    int found;
    double peak;
    osdp_cost_model cost;
    s = search_plan(layout, dev, o, b, accum, 1, 0, INFINITY, LLONG_MAX / 8, NULL, &acc, &p, &found, &peak, &cost);
    if (s == OSDP_OK && !found) s = osdp_error_set(OSDP_ERR_INTERNAL, "planner: no plan at all (memory search)");
    if (s == OSDP_OK) *bytes = (long long)peak;
    if (s == OSDP_OK && plan) *plan = p;
    else osdp_plan_free(&p);
    return s;
}

osdp_status osdp_planner_min_memory(const osdp_layout *layout, const osdp_device *dev,
                                    const osdp_planner_options *o, int b, long long *bytes, osdp_plan *plan)
{
    return min_memory(layout, dev, o, b, 1, bytes, plan);
}

/* OSDP_ERR_INFEASIBLE with the smallest peak any plan needs at micro-batch
 * b, what it is made of at its moment (osdp_cost_peak_breakdown: the parts,
 * in bytes too, sum to it), and the three operators that hold most then. */
static osdp_status infeasible(const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o, int b,
                              int accum, long long limit)
{
    long long need = 0;
    osdp_plan p;
    osdp_status s = min_memory(L, dev, o, b, accum, &need, &p);
    if (s != OSDP_OK) return s;
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, L, dev, &o->geo, o->cost, o->hierarchy);
    cm.geo.accum_steps = accum;
    cm.in_flight = o->stage_in_flight;
    cm.stage_buffer_bytes = o->stage_buffer_bytes;
    cm.next_passes = o->stage_next_passes;
    osdp_peak_parts *per_op = malloc(sizeof *per_op * (size_t)L->n_ops);
    osdp_peak_breakdown br;
    if (!per_op || osdp_cost_peak_breakdown(&cm, &p, b, &br, per_op) < 0) {
        free(per_op);
        osdp_plan_free(&p);
        return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    }
    osdp_plan_free(&p);
    if (br.total != need) {
        free(per_op);
        return osdp_error_set(OSDP_ERR_INTERNAL, "planner: the memory search's smallest peak (%lld bytes) is not its "
                              "plan's (%lld bytes)", need, br.total);
    }
    int top[3] = {-1, -1, -1};
    long long val[3] = {-1, -1, -1};
    for (int i = 0; i < L->n_ops; i++) {
        const long long v = osdp_peak_parts_sum(&per_op[i]);
        for (int r = 0; r < 3; r++)
            if (v > val[r]) {
                for (int q = 2; q > r; q--) { val[q] = val[q - 1]; top[q] = top[q - 1]; }
                val[r] = v;
                top[r] = i;
                break;
            }
    }
    free(per_op);
    /* the parts that hold something, named with their sizes, and their bytes summed */
    char named[512] = "", sum[256] = "", parts[512] = "", f[2][32];
    for (int k = 0; k < OSDP_PEAK_N_PARTS; k++) {
        if (!br.parts.bytes[k]) continue;
        char buf[128];
        snprintf(buf, sizeof buf, "%s%s %s", *named ? " + " : "", osdp_peak_part_name((osdp_peak_part)k),
                 osdp_format_bytes((double)br.parts.bytes[k], f[0], sizeof f[0]));
        strncat(named, buf, sizeof named - strlen(named) - 1);
        snprintf(buf, sizeof buf, "%s%lld", *sum ? " + " : "", br.parts.bytes[k]);
        strncat(sum, buf, sizeof sum - strlen(sum) - 1);
    }
    for (int r = 0; r < 3 && top[r] >= 0; r++) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s%s %s", r ? ", " : "", L->op[top[r]].name,
                 osdp_format_bytes((double)val[r], f[0], sizeof f[0]));
        strncat(parts, buf, sizeof parts - strlen(parts) - 1);
    }
    char steps[64] = "", lim[32];
    if (accum > 1) snprintf(steps, sizeof steps, " (%d micro-batches a step)", accum);
    return osdp_error_set(OSDP_ERR_INFEASIBLE,
        "no plan fits the memory limit of %s per rank at micro-batch %d%s on %d rank%s: the smallest peak any plan "
        "needs is %s (%lld bytes, in the %s of %s%s: %s; in bytes %s); the operators that dominate it: %s. "
        "Raise the memory limit, use more ranks, a shorter sequence or a smaller model",
        osdp_format_bytes((double)limit, lim, sizeof lim), b, steps, o->geo.n_ranks, o->geo.n_ranks == 1 ? "" : "s",
        osdp_format_bytes((double)need, f[1], sizeof f[1]), need, br.forward ? "forward" : "backward",
        L->op[br.at_op].name, br.wrap ? ", the next pass's first weights prefetched" : "", named, sum, parts);
}

static int verify_applies(const osdp_device *dev, const osdp_planner_options *o)
{
    (void)o->split;   /* split plans run on the runtime too: verified alike */
    /* the runtime's element sizes: fp32 or bf16 weights, fp32 gradients and activations */
    return o->verify && (dev->param_bytes == 4 || dev->param_bytes == 2) && dev->grad_bytes == 4 && dev->act_bytes == 4;
}

/* The closed form is a rewrite of the runtime schedule's evaluation
 * (osdp/schedule.h), proven equal by tests/runtime/test_schedule.c: a difference is
 * a bug, not a reason to search again. */
static osdp_status verify_peak(const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o, int b,
                               int accum, osdp_planner_result *res)
{
    osdp_memory_prediction pr;
    osdp_schedule_options so = {.geo.n_ranks = o->geo.n_ranks, .geo.node_ranks = o->hierarchy ? o->hierarchy->node_ranks : 0,
                                .geo.micro_batch = b, .geo.accum_steps = accum, .geo.prefetch = o->geo.prefetch,
                                .geo.weight_dtype = dev->param_bytes == 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32,
                                .geo.pad_quantum = o->geo.pad_quantum, .geo.residual_dtype = o->geo.residual_dtype};
    osdp_status s = osdp_schedule_predict(L, &res->plan, &so, &pr);
    if (s != OSDP_OK) return s;
    res->runtime_peak = (long long)pr.peak_total;
    if (res->runtime_peak != res->peak_bytes)
        return osdp_error_set(OSDP_ERR_INTERNAL, "planner: the cost model's peak (%lld bytes) and the runtime "
                              "schedule's (%lld bytes) differ for the chosen plan", res->peak_bytes, res->runtime_peak);
    return OSDP_OK;
}

/* cutoff: only a plan of step time <= cutoff is wanted (INFINITY: any);
 * quiet: no plan is OSDP_ERR_INFEASIBLE without the message (which costs a
 * search of its own: infeasible()); *no_plan (may be NULL): 1 when the
 * search found none, the case of that message */
static osdp_status plan_batch(const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o, int b,
                              int accum, double deadline, double cutoff, int quiet, osdp_cost_cuts *cuts,
                              osdp_planner_result *res, int *no_plan)
{
    if (no_plan) *no_plan = 0;
    double t0 = osdp_now_seconds();
    memset(res, 0, sizeof *res);
    res->runtime_peak = -1;
    osdp_status s = check_options(L, dev, o);
    if (s != OSDP_OK) return s;
    if (b < 1 || accum < 1)
        return osdp_error_set(OSDP_ERR_INPUT, "planner: micro-batch %d and accumulation %d must be >= 1", b, accum);
    const long long limit = o->mem_limit > 0 ? o->mem_limit : dev->mem_limit;
    res->mem_limit = limit;
    res->batches_tried = 1;
    int found = 0;
    double objective;
    osdp_cost_model cost;
    s = osdp_plan_alloc(&res->plan, L->n_ops);
    if (s == OSDP_OK)
        s = search_plan(L, dev, o, b, accum, 0, deadline, cutoff, limit, cuts, res, &res->plan, &found, &objective, &cost);
    if (s == OSDP_OK && !found) {
        if (no_plan) *no_plan = 1;
        s = quiet || !isinf(cutoff) ? OSDP_ERR_INFEASIBLE : infeasible(L, dev, o, b, accum, limit);
    }
    if (s == OSDP_OK) {
        res->peak_bytes = osdp_cost_peak_moment(&cost, &res->plan, b, &res->peak_op, &res->peak_forward);
        if (verify_applies(dev, o)) s = verify_peak(L, dev, o, b, accum, res);
        /* the search's terms (plan_context.h) bound every moment, the forward ones included: a plan over the
         * limit is a bug in them, not a reason to search again */
        if (s == OSDP_OK && res->peak_bytes > limit)
            s = osdp_error_set(OSDP_ERR_INTERNAL, "planner: at micro-batch %d the chosen plan's peak (%lld bytes, "
                               "in %s's %s) is over the memory limit (%lld bytes) that the search bounds it by",
                               b, res->peak_bytes, L->op[res->peak_op].name,
                               res->peak_forward ? "forward" : "backward", limit);
    }
    if (s == OSDP_OK) {
        res->step_s = osdp_cost_step_time(&cost, &res->plan, b, accum);
        res->samples_per_s = (double)b * o->geo.n_ranks * accum / res->step_s;
        res->plan.geo.micro_batch = b;
        res->plan.geo.accum_steps = accum;
        res->plan.predicted_step_s = res->step_s;
        res->plan.predicted_peak_bytes = (double)(res->runtime_peak >= 0 ? res->runtime_peak : res->peak_bytes);
    }
    res->total_s = osdp_now_seconds() - t0;
    return s;
}

osdp_status osdp_planner_plan_batch(const osdp_layout *layout, const osdp_device *dev, const osdp_planner_options *o,
                                    int b, int accum, osdp_planner_result *res)
{
    double dl = o->search == OSDP_SEARCH_DFS ? osdp_now_seconds() + (o->dfs_time_limit_s > 0 ? o->dfs_time_limit_s : 60) : 0;
    const osdp_status s = plan_batch(layout, dev, o, b, accum, dl, INFINITY, o->quiet_infeasible, NULL, res, NULL);
    if (s == OSDP_ERR_INFEASIBLE && o->quiet_infeasible)
        return osdp_error_set(s, "no plan fits the memory limit at micro-batch %d on %d rank%s (its smallest peak "
                              "not searched)", b, o->geo.n_ranks, o->geo.n_ranks == 1 ? "" : "s");
    return s;
}

typedef struct cand_b { int b, accum; double ub; } cand_b;
static int cmp_cand(const void *a, const void *b)
{
    const cand_b *p = a, *q = b;
    if (p->ub != q->ub) return p->ub > q->ub ? -1 : 1;
    return p->b < q->b ? -1 : p->b > q->b;
}

/* the scheduler over micro-batches; cuts: the operators' cuts, cached */
static osdp_status run_sched(const osdp_layout *layout, const osdp_device *dev, const osdp_planner_options *o,
                             osdp_cost_cuts *cuts, osdp_planner_result *res)
{
    double t0 = osdp_now_seconds();
    memset(res, 0, sizeof *res);
    res->runtime_peak = -1;
    osdp_status s = check_options(layout, dev, o);
    if (s != OSDP_OK) return s;
    const int N = o->geo.n_ranks, G = o->global_batch;
    if (G < 0 || (G > 0 && G % N != 0))
        return osdp_error_set(OSDP_ERR_INPUT, "--global-batch %d is not a multiple of the %d ranks", G, N);
    if (o->geo.micro_batch > 0 && G > 0 && (G / N) % o->geo.micro_batch != 0)
        return osdp_error_set(OSDP_ERR_INPUT, "--global-batch %d is not a multiple of micro-batch %d x %d ranks", G,
                              o->geo.micro_batch, N);
    const int b0 = o->geo.micro_batch > 0 ? o->geo.micro_batch : 1;
    const int bmax = o->geo.micro_batch > 0 ? o->geo.micro_batch : G > 0 ? G / N
                   : (o->max_micro_batch > 0 ? o->max_micro_batch : 256);
    const long long limit = o->mem_limit > 0 ? o->mem_limit : dev->mem_limit;
    double dl = o->search == OSDP_SEARCH_DFS ? osdp_now_seconds() + (o->dfs_time_limit_s > 0 ? o->dfs_time_limit_s : 60) : 0;
    cand_b *cb = malloc(sizeof *cb * (size_t)(bmax - b0 + 1));
    if (!cb) return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    /* pass 1: every micro-batch's throughput bound, up to the first that cannot fit */
    int nc = 0;
    osdp_planner_result acc;
    memset(&acc, 0, sizeof acc);
    for (int b = b0; b <= bmax; b++) {
        if (G > 0 && (G / N) % b != 0) continue;
        int accum = G > 0 ? G / (N * b) : 1;
        osdp_ps_context ctx;
        s = osdp_ps_context_build(&ctx, layout, dev, o, b, accum, 2, cuts, &acc);
        if (s != OSDP_OK) { free(cb); return s; }
        double lb = osdp_ps_lp_bound(&ctx, NULL, limit - ctx.fixed_bytes - osdp_ps_min_transient(&ctx));
        osdp_ps_context_free(&ctx);
        if (isinf(lb)) break; /* memory grows with b: no larger b fits either */
        cb[nc++] = (cand_b){b, accum, lb > 0 ? (double)b * N * accum / lb : INFINITY};
    }
    /* nothing fits: the message is the smallest micro-batch's (b_unfit); pass 2 searches it (any cutoff while
     * no plan is found), and its outcome gives the message without that search again */
    int b_unfit = b0;
    while (G > 0 && (G / N) % b_unfit != 0) b_unfit++;
    int unfit_searched = 0, unfit_no_plan = 0;
    char unfit_why[2048] = "";
    /* pass 2: the best bound first; stop when no bound beats the best plan */
    qsort(cb, (size_t)nc, sizeof *cb, cmp_cand);
    int have = 0, tried = 0, timed_out = 0;
    long long searches = 0, nodes = 0, hits = 0;
    double search_s = 0, gap = 0;
    for (int j = 0; j < nc; j++) {
        if (have && cb[j].ub < res->samples_per_s) break;
        osdp_planner_result r;
        /* only a plan faster than the best so far per sample (ties within
         * rounding kept, for the smaller micro-batch) */
        double cut = have ? (double)cb[j].b * N * cb[j].accum / res->samples_per_s * (1 + 1e-9) : INFINITY;
        int no_plan = 0;
        s = plan_batch(layout, dev, o, cb[j].b, cb[j].accum, dl, cut, 1, cuts, &r, &no_plan);
        if (!have && cb[j].b == b_unfit && s == OSDP_ERR_INFEASIBLE) {
            unfit_searched = 1;
            unfit_no_plan = no_plan;
            snprintf(unfit_why, sizeof unfit_why, "%s", osdp_error_message());   /* a plan over the limit: why */
        }
        tried++;
        searches += r.searches;
        hits += r.cache_hits;
        nodes += r.nodes;
        search_s += r.search_s;
        timed_out |= r.timed_out;
        if (r.gap > gap) gap = r.gap;
        if (s == OSDP_ERR_INFEASIBLE) {
            osdp_planner_result_free(&r);
            continue;
        }
        if (s != OSDP_OK) {
            osdp_planner_result_free(&r);
            if (have) osdp_planner_result_free(res);
            free(cb);
            return s;
        }
        if (!have || r.samples_per_s > res->samples_per_s
            || (r.samples_per_s == res->samples_per_s && r.plan.geo.micro_batch < res->plan.geo.micro_batch)) {
            if (have) osdp_planner_result_free(res);
            *res = r;
            have = 1;
        } else {
            osdp_planner_result_free(&r);
        }
    }
    free(cb);
    if (!have) { /* nothing fits: the message for the smallest micro-batch */
        const int accum = G > 0 ? G / (N * b_unfit) : 1;
        if (unfit_searched)   /* its search found no plan (the smallest peak's message), or one over the limit */
            return unfit_no_plan ? infeasible(layout, dev, o, b_unfit, accum, limit)
                                 : osdp_error_set(OSDP_ERR_INFEASIBLE, "%s", unfit_why);
        osdp_planner_result r;   /* its bound said no plan: searched once, for the message */
        s = plan_batch(layout, dev, o, b_unfit, accum, dl, INFINITY, 0, cuts, &r, NULL);
        osdp_planner_result_free(&r);
        return s == OSDP_OK ? osdp_error_set(OSDP_ERR_INTERNAL, "planner: inconsistent feasibility") : s;
    }
    res->batches_tried = tried;
    res->searches = searches;
    res->cache_hits = hits;
    res->nodes = nodes;
    res->search_s = search_s;
    res->timed_out = timed_out;
    res->gap = gap;
    res->total_s = osdp_now_seconds() - t0;
    return OSDP_OK;
}

/* --split auto and --recompute auto are choices of the search itself
 * (plan_choices.c): one scheduler run. */
osdp_status osdp_planner_run(const osdp_layout *layout, const osdp_device *dev, const osdp_planner_options *o,
                             osdp_planner_result *res)
{
    osdp_cost_cuts *cuts = osdp_cost_cuts_new(layout->n_ops); /* NULL: no cache */
    osdp_status s = run_sched(layout, dev, o, cuts, res);
    osdp_cost_cuts_free(cuts);
    return s;
}

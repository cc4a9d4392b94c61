/* Tests for the planner's per-operator choices (issue 7): --split auto
 * (any k of any g in 1, 2, 4, .. per operator) and --recompute auto
 * (recompute per attn / mlp operator) against brute force over every plan
 * of every choice (before the planner drops dominated ones), with the
 * model peak (osdp_cost_peak, equal to the runtime's accounting by
 * test_split's peak test); exact and dfs alike.  With recompute auto the
 * planner either proves its plan optimal (gap 0: the brute-force optimum)
 * or returns a plan that fits within its stated gap.  With accumulation
 * (A = 3) each choice also reduces the gradients of its last J slices
 * once per step (grad-reduce auto, J = 0..g), the hundreds of choices per
 * operator that --split auto then has at cluster scale; and the forced-choice
 * LP bounds the branch and bound prunes its first node by
 * (osdp_ps_lp_prune_forced, one binary search per choice) equal the whole
 * LP of each choice forced (osdp_ps_lp_bound). */
#include "config.h"

#include "check_main.h"

#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/planner.h"
#include "osdp/runtime.h"
#include "planner/plan_knap.h"

#include "test_inputs.h"

static osdp_device test_device(void)
{
    osdp_device d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "test");
    d.mem_limit = 1;
    d.param_bytes = d.grad_bytes = d.act_bytes = 4;
    d.all_gather = (osdp_collective_cost){.alpha = 2e-5, .beta = 1e-9};
    d.reduce_scatter = (osdp_collective_cost){.alpha = 3e-5, .beta = 1.5e-9};
    for (int t = 0; t < OSDP_N_OP_TYPES; t++) d.gamma[t] = (1 + 0.3 * t) * 2e-11;
    return d;
}

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)); }

typedef struct opt3 { int g, k, rc, once; } opt3;
#define MAX_CHOICES 128

/* the accumulation of the brute-force checks: above 1, every choice also with each count J = 0..g of
 * reduce-once slices (grad-reduce auto) */
static int g_accum = 1;

/* every choice of operator i: k of g for g = 1, 2, .., gmax that the
 * operator can be cut into, recompute both ways for attn / mlp when rc,
 * each with every J under accumulation */
static int all_choices(const osdp_layout *L, int i, int gmax, int rc, opt3 *out)
{
    const osdp_op_layout *op = &L->op[i];
    int n = 0, rc_hi = rc && osdp_op_can_recompute(op->type);
    for (int r = 0; r <= rc_hi; r++)
        for (int g = 1; g <= gmax; g *= 2) {
            size_t bounds[OSDP_MAX_SLICES + 1];
            if (g > 1 && (op->type == OSDP_OP_EMBED || osdp_op_split(op, g, bounds) != OSDP_OK)) continue;
            for (int k = 0; k <= g; k++)
                for (int once = 0; once <= (g_accum > 1 ? g : 0); once++) {
                    ck_assert(n < MAX_CHOICES);
                    out[n++] = (opt3){g, k, r, once};
                }
        }
    return n;
}

typedef struct brute { long long n; double *time; long long *peak; unsigned char *unsplit; } brute;

static void brute_all(brute *B, const osdp_layout *L, const osdp_device *d, int N, int pf, int b, int gmax, int rc)
{
    const int n = L->n_ops;
    static opt3 ch[32][MAX_CHOICES];
    int nc[32];
    ck_assert(n <= 32);
    B->n = 1;
    for (int i = 0; i < n; i++) {
        nc[i] = all_choices(L, i, gmax, rc, ch[i]);
        B->n *= nc[i];
    }
    ck_assert(B->n <= 4000000);
    B->time = malloc(sizeof *B->time * (size_t)B->n);
    B->peak = malloc(sizeof *B->peak * (size_t)B->n);
    B->unsplit = malloc((size_t)B->n);
    ck_assert(B->time && B->peak && B->unsplit);
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, n) == OSDP_OK);
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, L, d, &(osdp_step_geometry){.n_ranks = N, .prefetch = pf}, OSDP_COST_PAPER, NULL);
    for (long long code = 0; code < B->n; code++) {
        long long c = code;
        B->unsplit[code] = 1;
        for (int i = 0; i < n; i++) {
            const opt3 *o = &ch[i][c % nc[i]];
            B->unsplit[code] &= o->g == 1;
            c /= nc[i];
            p.slices[i] = o->g;
            p.zdp_slices[i] = o->k;
            p.recompute[i] = o->rc;
            p.reduce_once[i] = o->once;
        }
        B->time[code] = osdp_cost_step_time(&cm, &p, b, g_accum);
        B->peak[code] = osdp_cost_peak(&cm, &p, b, NULL);
    }
    osdp_plan_free(&p);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

static unsigned long long g_rng = 777;
static unsigned rnd(void)
{
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(g_rng >> 33);
}

static int n_split_mixed, n_rc_mixed, n_split_won, n_once_some;
static long long n_bound_cuts;   /* the branch and bound's moment and forced-choice bounds at work (plan_bnb.c) */

/* the planner (exact and dfs) at 17 limits across the range of plan peaks
 * equals brute force; returns the number of unproven plans.  random: a
 * device with random latency, bandwidth and compute scales */
static int check(const char *model, int T, int N, int pf, int b, int gmax, int rc, int random)
{
    osdp_layout L;
    load_layout(&L, model, T);
    osdp_device d = test_device();
    if (random) {
        randomize_device(&d, rnd);
    }
    brute B;
    brute_all(&B, &L, &d, N, pf, b, gmax, rc);
    long long *sorted = malloc(sizeof *sorted * (size_t)B.n);
    ck_assert(sorted);
    memcpy(sorted, B.peak, sizeof *sorted * (size_t)B.n);
    qsort(sorted, (size_t)B.n, sizeof *sorted, cmp_ll);
    int unproven = 0, split_mixed = 0, rc_mixed = 0, split_won = 0, once_some = 0;
    for (int li = 0; li <= 16; li++) {
        long long limit = li == 0 ? sorted[0] - 1 : sorted[(size_t)(B.n - 1) * (size_t)(li - 1) / 15] - (li & 1) * 3;
        if (li == 16) limit = sorted[B.n - 1] + 1000;
        double best = INFINITY, unsplit_best = INFINITY;   /* of every plan; of the plans of no split operator */
        for (long long c = 0; c < B.n; c++) {
            if (B.peak[c] > limit) continue;
            if (B.time[c] < best) best = B.time[c];
            if (B.time[c] < unsplit_best && B.unsplit[c]) unsplit_best = B.time[c];
        }
        double got[2] = {0, 0};
        for (int se = 0; se < 2; se++) {
            osdp_planner_options o;
            osdp_planner_defaults(&o);
            o.geo.n_ranks = N;
            o.geo.prefetch = pf;
            o.split_auto = gmax > 1;
            o.split_max = gmax;
            o.recompute_auto = rc;
            o.mem_limit = limit;
            o.search = se ? OSDP_SEARCH_DFS : OSDP_SEARCH_EXACT;
            o.grad_reduce = g_accum > 1 ? OSDP_GRAD_REDUCE_AUTO : OSDP_GRAD_REDUCE_EVERY;
            osdp_planner_result r;
            osdp_status s = osdp_planner_plan_batch(&L, &d, &o, b, g_accum, &r);
            const char *what = se ? "dfs" : "exact";
            n_bound_cuts += r.bound_cuts;
            if (isinf(best)) {
                ck_assert_msg(s == OSDP_ERR_INFEASIBLE, "%s N=%d pf=%d limit %lld (%s): status %d", model, N, pf, limit,
                              what, s);
            } else if (s == OSDP_ERR_INFEASIBLE) {
                ck_assert_msg(r.gap > 0, "%s N=%d pf=%d g<=%d rc=%d limit %lld (%s): infeasible, brute %.17g", model, N,
                              pf, gmax, rc, limit, what, best);
                unproven++;
            } else {
                ck_assert_msg(s == OSDP_OK, "%s limit %lld: %s", model, limit, osdp_error_message());
                ck_assert(!r.timed_out);
                osdp_cost_model cm;
                osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = N, .prefetch = pf}, OSDP_COST_PAPER, NULL);
                ck_assert(osdp_cost_peak(&cm, &r.plan, b, NULL) == r.peak_bytes && r.peak_bytes <= limit);
                osdp_memory_prediction pr;
                ck_assert(osdp_memory_predict(&L, &r.plan, N, b, g_accum, pf, OSDP_FLOAT32, &pr) == OSDP_OK);
                ck_assert_msg((long long)pr.peak_total == r.peak_bytes, "runtime %zu, model %lld", pr.peak_total,
                              r.peak_bytes);
                if (r.gap == 0)
                    ck_assert_msg(close_rel(r.step_s, best, 1e-12),
                                  "%s N=%d pf=%d b=%d g<=%d rc=%d limit %lld (%s): planner %.17g, brute %.17g", model, N,
                                  pf, b, gmax, rc, limit, what, r.step_s, best);
                else {
                    ck_assert(r.step_s >= best * (1 - 1e-12) && r.step_s * (1 - r.gap) <= best * (1 + 1e-12));
                    unproven++;
                }
                int g0 = 0, gm = 0, r1 = 0;
                for (int i = 1; i < L.n_ops; i++) {
                    g0 = g0 ? g0 : r.plan.slices[i];
                    gm |= r.plan.slices[i] != g0;
                    r1 += r.plan.recompute[i];
                    once_some += r.plan.reduce_once[i] > 0 && r.plan.reduce_once[i] < r.plan.slices[i];
                }
                split_mixed += gm;
                split_won += gm && best < unsplit_best * (1 - 1e-9);
                if (getenv("OSDP_TEST_DEBUG")) {
                    for (int i = 0; i < L.n_ops; i++)
                        fprintf(stderr, "%d/%d%s ", r.plan.zdp_slices[i], r.plan.slices[i], r.plan.recompute[i] ? "r" : "");
                    fprintf(stderr, " limit %lld step %.9g gap %g\n", limit, r.step_s, r.gap);
                }
                rc_mixed += r1 > 0 && r1 < 2 * L.cfg.n_layer;
                got[se] = r.step_s;
            }
            osdp_planner_result_free(&r);
        }
        /* dfs and exact: the same step time.  Up to the rounding of its sums: plans whose times are equal but
         * for the order of their terms (blocks of one shape, ZDP in one or the other) are ties, and which of
         * them a search meets first depends on its transient bounds (exact also tries first plans) */
        ck_assert_msg(close_rel(got[0], got[1], 1e-15), "%s limit %lld: exact %.17g, dfs %.17g", model, limit, got[0],
                      got[1]);
    }
    if (getenv("OSDP_TEST_VERBOSE"))
        fprintf(stderr, "%s N=%d pf=%d b=%d g<=%d rc=%d: %lld plans, %d with mixed g, %d with some recompute, %d unproven\n",
                model, N, pf, b, gmax, rc, B.n, split_mixed, rc_mixed, unproven);
    n_split_mixed += split_mixed;
    n_rc_mixed += rc_mixed;
    n_split_won += split_won;
    n_once_some += once_some;
    free(sorted);
    free(B.time);
    free(B.peak);
    free(B.unsplit);
    osdp_layout_free(&L);
    return unproven;
}

START_TEST(test_split_auto_brute)
{
    n_split_mixed = 0;
    check("tiny", 16, 4, 1, 1, 4, 0, 0);        /* 10 choices per block operator */
    check("tiny", 32, 3, 0, 2, 4, 0, 0);        /* N = 3: slices of different padding */
    check("bench_l4_d512", 32, 4, 1, 1, 2, 0, 0);
    check("bench_l4_d512", 64, 3, 0, 1, 2, 0, 1);
    for (int r = 0; r < 6; r++) check("tiny", 16 + 16 * (r % 3), 2 + (int)(rnd() % 7), r & 1, 1 + r % 2, 4, 0, 1);
    ck_assert_int_ge(n_split_mixed, 8); /* plans with different g per operator were optimal */
}
END_TEST

START_TEST(test_recompute_auto_brute)
{
    int unproven = 0;
    n_rc_mixed = 0;
    n_bound_cuts = 0;
    unproven += check("tiny", 16, 4, 1, 1, 1, 1, 0);
    unproven += check("tiny", 64, 2, 1, 2, 1, 1, 0);
    unproven += check("tiny", 32, 3, 0, 1, 2, 1, 0); /* both at once: 10 choices per block operator */
    unproven += check("tiny", 64, 4, 1, 2, 2, 1, 0);
    unproven += check("tiny", 32, 3, 1, 1, 4, 1, 0); /* 20 choices per block operator */
    unproven += check("bench_l4_d512", 64, 4, 1, 2, 1, 1, 0);
    unproven += check("bench_l4_d512", 128, 2, 0, 1, 1, 1, 1);
    for (int r = 0; r < 8; r++) unproven += check("tiny", 16 + 16 * (r % 4), 2 + (int)(rnd() % 7), r & 1, 1 + r % 3, 1 + (r & 2), 1, 1);
    ck_assert_int_ge(n_rc_mixed, 16); /* plans recomputing some operators, not all, were optimal */
    ck_assert_int_eq(unproven, 0);    /* every plan proven optimal (gap 0) */
    printf("recompute auto against brute force: %lld bound cuts\n", n_bound_cuts);
    ck_assert_int_gt(n_bound_cuts, 0);   /* the bounds cut nodes and choices, the answers still brute force's */
}
END_TEST

/* --split auto with accumulation (A = 3) and grad-reduce auto: every (g, k, J) per operator (up to 38 with
 * g <= 4), at limits where memory binds and split operators are what beats the unsplit plans */
START_TEST(test_split_auto_accum_brute)
{
    n_split_mixed = n_split_won = n_once_some = 0;
    n_bound_cuts = 0;
    g_accum = 3;
    check("tiny", 16, 4, 1, 1, 2, 0, 0);        /* 13 choices per block operator */
    check("tiny", 32, 3, 0, 2, 2, 0, 0);
    for (int r = 0; r < 6; r++) check("tiny", 16 + 16 * (r % 3), 2 + (int)(rnd() % 7), r & 1, 1 + r % 2, 2, 0, 1);
    g_accum = 1;
    if (getenv("OSDP_TEST_VERBOSE"))
        fprintf(stderr, "split auto, A = 3: %d optima with mixed g, %d where a split beat every unsplit plan, %d "
                "reducing some slices once, %lld bound cuts\n", n_split_mixed, n_split_won, n_once_some, n_bound_cuts);
    ck_assert_int_ge(n_split_won, 4);    /* memory binds and splits win */
    ck_assert_int_ge(n_once_some, 1);    /* some slices of an operator reduce once, the others every micro-batch */
    ck_assert_int_gt(n_bound_cuts, 0);   /* the forced-choice bounds at work, the answers brute force's */
}
END_TEST

/* the reference: the LP bound of A with row i forced to {c} (osdp_ps_lp_bound), the way the branch and
 * bound's first node computed every one of them */
typedef struct forced_check { const osdp_ps_context *ctx; unsigned char *ref; long long lim; double cut; int i, c;
                              int calls, drops; double worst; } forced_check;

/* drop callback of osdp_ps_lp_prune_forced: called for operator i's allowed choices in order; checks its
 * bound against the reference and drops the choices at or above the cut (mirrored in the reference set) */
static int forced_drop(void *arg, double v)
{
    forced_check *f = arg;
    const osdp_ps_context *ctx = f->ctx;
    while (!f->ref[PS_CHOICE(ctx, f->i, f->c)]) {   /* the next allowed choice, operator by operator */
        if (++f->c == ctx->n_choices[f->i]) f->c = 0, f->i++;
        ck_assert(f->i < ctx->n_ops);
    }
    unsigned char *row = f->ref + PS_CHOICE(ctx, f->i, 0), *keep = malloc((size_t)ctx->stride);
    ck_assert(keep);
    memcpy(keep, row, (size_t)ctx->stride);
    memset(row, 0, (size_t)ctx->stride);
    row[f->c] = 1;
    const double want = osdp_ps_lp_bound(ctx, f->ref, f->lim);
    memcpy(row, keep, (size_t)ctx->stride);
    free(keep);
    if (isinf(want)) ck_assert_msg(isinf(v), "operator %d choice %d: bound %.17g, reference inf", f->i, f->c, v);
    else {
        const double err = fabs(v - want) / fmax(fabs(want), 1e-300);
        ck_assert_msg(err <= 1e-12, "operator %d choice %d: bound %.17g, reference %.17g", f->i, f->c, v, want);
        if (err > f->worst) f->worst = err;
    }
    const int gone = v >= f->cut;
    if (gone) row[f->c] = 0, f->drops++;
    f->calls++;
    if (++f->c == ctx->n_choices[f->i]) f->c = 0, f->i++;
    return gone;
}

START_TEST(test_lp_forced_reference)
{
    const char *models[] = {"tiny", "bench_l4_d512", "ic_tiny_mixed"};
    int total_calls = 0, total_drops = 0, emptied = 0;
    double worst = 0;
    for (int m = 0; m < 3; m++)
        for (int v = 0; v < 4; v++) {
            osdp_layout L;
            load_layout(&L, models[m], 32);
            osdp_device d = test_device();
            if (v & 1) randomize_device(&d, rnd);
            osdp_planner_options o;
            osdp_planner_defaults(&o);
            o.geo.n_ranks = 2 + v;
            o.geo.prefetch = 1;
            o.split_auto = 1;
            o.split_max = v < 2 ? 4 : 8;
            o.recompute_auto = v >= 1;
            o.grad_reduce = OSDP_GRAD_REDUCE_AUTO;
            osdp_planner_result counters;
            memset(&counters, 0, sizeof counters);
            osdp_ps_context ctx;
            ck_assert(osdp_ps_context_build(&ctx, &L, &d, &o, 1 + v % 2, 3, 0, NULL, &counters) == OSDP_OK);
            const size_t nk = (size_t)ctx.n_ops * (size_t)ctx.stride;
            unsigned char *A = malloc(nk), *ref = malloc(nk);
            ck_assert(A && ref);
            long long rmin = 0, rmax = 0;   /* the held bytes' range over plans */
            for (int i = 0; i < ctx.n_ops; i++) {
                long long lo = LLONG_MAX, hi = 0;
                for (int c = 0; c < ctx.n_choices[i]; c++) {
                    const long long r = ctx.held_bytes[PS_CHOICE(&ctx, i, c)];
                    lo = r < lo ? r : lo;
                    hi = r > hi ? r : hi;
                }
                rmin += lo;
                rmax += hi;
            }
            for (int trial = 0; trial < 12; trial++) {
                memset(A, 0, nk);
                for (int i = 0; i < ctx.n_ops; i++)   /* a random node: most choices allowed, some operators one */
                    for (int c = 0; c < ctx.n_choices[i]; c++) A[PS_CHOICE(&ctx, i, c)] = trial % 4 == 0 || rnd() % 8 != 0;
                const long long lim = rmin - (trial == 11) + (long long)((double)(rmax - rmin) * (rnd() % 1000) / 1000.0);
                memcpy(ref, A, nk);
                const double lp = osdp_ps_lp_bound(&ctx, A, lim);
                forced_check f = {.ctx = &ctx, .ref = ref, .lim = lim, .cut = lp * (1 + 1e-4 * (rnd() % 200))};
                const int ret = osdp_ps_lp_prune_forced(&ctx, A, lim, forced_drop, &f);
                ck_assert_int_ge(ret, 0);
                if (ret == 1) ck_assert(memcmp(A, ref, nk) == 0);   /* the same choices dropped */
                emptied += ret == 0;
                total_calls += f.calls;
                total_drops += f.drops;
                if (f.worst > worst) worst = f.worst;
            }
            free(A);
            free(ref);
            osdp_ps_context_free(&ctx);
            osdp_layout_free(&L);
        }
    if (getenv("OSDP_TEST_VERBOSE"))
        fprintf(stderr, "forced LP bounds: %d checked, %d dropped, %d nodes emptied, worst relative error %.3g\n",
                total_calls, total_drops, emptied, worst);
    ck_assert_int_gt(total_drops, 100);   /* the cuts bite: later operators' bounds see the dropped rows */
    ck_assert_int_gt(total_calls - total_drops, 100);   /* and keep choices too */
    ck_assert_int_gt(emptied, 0);         /* some nodes lose every choice of an operator (0 returned) */
}
END_TEST

static Suite *plan_auto_suite(void)
{
    const TTest *brute_slow[] = {test_split_auto_brute, test_recompute_auto_brute, test_split_auto_accum_brute, NULL};
    const TTest *bounds[] = {test_lp_forced_reference, NULL};
    const osdp_check_case cases[] = {
        {.name = "brute_slow", .tests = brute_slow, .slow = 1},
        {.name = "bounds", .tests = bounds},
    };
    return osdp_check_suite("plan_auto", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = plan_auto_suite};

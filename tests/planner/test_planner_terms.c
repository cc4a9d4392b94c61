/* The planner's memory terms against the runtime's schedule (issue 32).
 *
 * The search (src/planner/plan_context.h) sees a plan's peak as
 *     fixed_bytes + sum_i R[i][c_i] + max_u Z_u
 * from per-choice terms that plan_choices.c reads off the size table
 * (osdp_buffer_bytes, osdp/schedule.h).  Here the search's context is built
 * with every choice kept (no dominated choice dropped), random choices are
 * drawn for every operator, and the peak the search would report for them
 * is compared with osdp_schedule_peak of the same plan, built into the
 * events the runtime executes, to the byte:
 *   meshes   DP groups of 1, 4 and 8 ranks; hierarchical (nodes of 2 and 4
 *            of the data group's ranks, plan mode h among the choices);
 *            tensor-parallel layouts (tp 2, 4); a tied head
 *   choices  k of g slices ZDP for g in 1, 2, 4 (split auto), recompute
 *            both ways (recompute auto), gradients reduced once per step or
 *            every micro-batch (grad-reduce auto with accumulation; once:
 *            a tied head's embedding too), fp32 and bf16 weights (a bf16
 *            residual stream with some of the latter), prefetch
 *            on and off, the CPU's and CUDA's shard padding
 *   pipeline first, middle and last stages of 2 to 4 (1F1B, GPipe and
 *            interleaved of one chunk): the stage's wrap moment, its first
 *            operator's backward prefetching the next pass's first slice,
 *            among the terms (plan_context.h), so that the search's peak,
 *            osdp_pipe_stage_peak and the schedule's are equal; the plans
 *            whose peak that moment sets are counted (some are).
 * Every plan drawn is also broken down (osdp_cost_peak_breakdown): its parts
 * sum to the peak to the byte and, by the runtime's category, are what the
 * schedule holds at its peak (random small models too).
 * And the stage's search against every plan of a stage (the fastest that
 * fits, at limits where the wrap moment decides), and the claim of
 * osdp_pipe_after_backward on the pass orders. */
#include "config.h"

#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/cost_model.h"
#include "osdp/pipeline.h"
#include "osdp/pipeline_cost.h"
#include "osdp/planner.h"
#include "osdp/schedule.h"
#include "planner/plan_context.h"

#include "check_main.h"
#include "test_inputs.h"

static unsigned long long g_rng = 20261127;
static unsigned rnd(void)
{
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(g_rng >> 33);
}

/* one mesh and step: what the context and the schedule are built for */
typedef struct step_case {
    int N, node_ranks;          /* node_ranks 0: one node, no plan mode h */
    int B, accum, prefetch, quantum;
    osdp_dtype weights;
    osdp_dtype residual;        /* the residual stream (0: fp32; bf16 with bf16 weights) */
    int P, stage;               /* P 1: no pipeline */
    int bounds[OSDP_MAX_CHUNKS + 1];   /* as osdp_geometry.stage_bounds (copied whole into it) */
    osdp_pipe_schedule schedule;
    osdp_grad_reduce grad_reduce;   /* 0 reads as auto */
    int no_wrap;                /* a stage's context without its wrap moment (to tell which plans it decides) */
} step_case;

/* the search's context for operators [lo, hi) of L (the stage's, or every one), every choice kept */
static void build_context(osdp_ps_context *ctx, const osdp_layout *sub, const osdp_layout *whole, const osdp_device *d,
                          const osdp_cost_hierarchy *hier, const step_case *c, osdp_planner_options *o,
                          osdp_planner_result *counters)
{
    memset(o, 0, sizeof *o);
    o->geo.n_ranks = c->N;
    o->geo.prefetch = c->prefetch;
    o->geo.pad_quantum = c->quantum;
    o->geo.residual_dtype = c->residual;
    o->split_auto = 1;
    o->split_max = 4;
    o->recompute_auto = 1;
    o->modes = OSDP_MODES_ANY;
    o->hierarchy = hier;
    o->grad_reduce = c->grad_reduce ? c->grad_reduce : OSDP_GRAD_REDUCE_AUTO;
    if (c->P > 1) {
        o->stage_in_flight = osdp_pipe_in_flight(c->schedule, c->P, c->stage, c->accum);
        o->stage_buffer_bytes = osdp_pipe_stage_buffer_bytes(whole, c->bounds, c->stage, c->B, o->stage_in_flight);
        o->stage_next_passes = c->no_wrap ? 0 : osdp_pipe_after_backward(c->schedule, c->P, c->stage, c->accum);
    }
    memset(counters, 0, sizeof *counters);
    ck_assert_msg(osdp_ps_context_build(ctx, sub, d, o, c->B, c->accum, 2, NULL, counters) == OSDP_OK, "%s",
                  osdp_error_message());
}

/* plans drawn with some slices only of an operator reducing once (0 < J < g, osdp/plan.h) */
static int g_some_once;

/* Random choices of the context for operators [lo, hi) into plan p (the
 * other operators: random plans of their own); returns the peak the search
 * sees for them. */
static long long random_choices(const osdp_ps_context *ctx, const osdp_layout *L, int lo, osdp_plan *p, int *ch)
{
    ck_assert_int_le(ctx->n_ops, 256);
    for (int i = 0; i < L->n_ops; i++) {   /* outside the stage: DP or ZDP, unsplit */
        p->slices[i] = 1;
        p->zdp_slices[i] = osdp_op_allows_zdp(L, i) ? (int)(rnd() % 2) : 0;
        p->recompute[i] = 0;
        p->hierarchical[i] = 0;
        p->reduce_once[i] = 0;
    }
    for (int i = 0; i < ctx->n_ops; i++) {
        ch[i] = (int)(rnd() % (unsigned)ctx->n_choices[i]);
        const size_t a = PS_CHOICE(ctx, i, ch[i]);
        p->slices[lo + i] = ctx->choice_slices[a];
        p->zdp_slices[lo + i] = ctx->choice_zdp_slices[a];
        p->recompute[lo + i] = ctx->choice_recompute[a];
        p->hierarchical[lo + i] = ctx->choice_hierarchical[a];
        p->reduce_once[lo + i] = ctx->choice_reduce_once[a];
        g_some_once += p->reduce_once[lo + i] > 0 && p->reduce_once[lo + i] < p->slices[lo + i];
    }
    return ctx->fixed_bytes + osdp_ps_held_sum(ctx, ch) + osdp_ps_true_transient(ctx, ch);
}

/* the breakdown's counts (check_breakdown): plans checked, the moments they were at, and those the schedule's
 * first peak moment holds other bytes per category at (an equal total reached at another moment) */
static struct { long long plans, forward, wrap, reduce_once, recompute, other_moment; } g_parts;

/* 1 when some moment of the schedule (setup, then the step's micro list; a test's own walk of its ALLOC and
 * FREE events) holds `total` bytes made of cat per category */
static int schedule_has_moment(const osdp_layout *L, const osdp_plan *p, const osdp_schedule_options *so,
                               const long long *cat, long long total)
{
    osdp_schedule sc;
    ck_assert(osdp_schedule_build(&sc, L, p, so) == OSDP_OK);
    long long current[OSDP_MEMORY_N_CATEGORIES] = {0}, held = 0;
    int found = 0;
    for (int pass = 0; pass < 2 && !found; pass++) {
        const osdp_event *list = pass ? sc.micro : sc.setup;
        for (int e = 0; e < (pass ? sc.n_micro : sc.n_setup) && !found; e++) {
            if (list[e].kind != OSDP_EV_ALLOC && list[e].kind != OSDP_EV_FREE) continue;
            const long long sign = list[e].kind == OSDP_EV_ALLOC ? 1 : -1;
            current[osdp_buffer_category(list[e].buffer)] += sign * (long long)list[e].bytes;
            held += sign * (long long)list[e].bytes;
            if (held != total) continue;
            found = 1;
            for (int q = 0; q < OSDP_MEMORY_N_CATEGORIES; q++) found &= current[q] == cat[q];
        }
    }
    osdp_schedule_free(&sc);
    return found;
}

/* The peak's breakdown (osdp_cost_peak_breakdown) of plan p against the schedule's evaluation pr of it: the
 * parts sum to the peak to the byte, the operators' parts and the plan-independent ones to the parts, and
 * the parts by the runtime's category are the schedule's at its peak (at_peak: the first moment it is
 * reached), or else an equal total at another moment holds those bytes per category (the two forms
 * break ties between moments differently; counted). */
static void check_breakdown(const osdp_layout *L, const osdp_plan *p, const osdp_schedule_options *so,
                            const step_case *c, const osdp_layout *sub, const osdp_peak_breakdown *br,
                            const osdp_peak_parts *per_op, const osdp_memory_prediction *pr)
{
    long long sum = 0, by_op[OSDP_PEAK_N_PARTS] = {0}, cat[OSDP_MEMORY_N_CATEGORIES] = {0};
    for (int k = 0; k < OSDP_PEAK_N_PARTS; k++) {
        ck_assert_int_ge(br->parts.bytes[k], 0);
        sum += br->parts.bytes[k];
        cat[osdp_peak_part_category((osdp_peak_part)k)] += br->parts.bytes[k];
    }
    ck_assert_msg(sum == br->total && br->total == (long long)pr->peak_total, "%s N=%d B=%d: parts %lld, total %lld, "
                  "schedule %zu", sub->cfg.name, c->N, c->B, sum, br->total, pr->peak_total);
    for (int i = 0; per_op && i < sub->n_ops; i++)
        for (int k = 0; k < OSDP_PEAK_N_PARTS; k++) {
            ck_assert_int_ge(per_op[i].bytes[k], 0);
            by_op[k] += per_op[i].bytes[k];
        }
    by_op[OSDP_PEAK_WORKSPACE] += br->parts.bytes[OSDP_PEAK_WORKSPACE];
    by_op[OSDP_PEAK_TP_STAGING] += br->parts.bytes[OSDP_PEAK_TP_STAGING];
    by_op[OSDP_PEAK_STAGE_INPUTS] += br->parts.bytes[OSDP_PEAK_STAGE_INPUTS];
    for (int k = 0; per_op && k < OSDP_PEAK_N_PARTS; k++) ck_assert_int_eq(by_op[k], br->parts.bytes[k]);
    int same = 1;
    for (int q = 0; q < OSDP_MEMORY_N_CATEGORIES; q++) same &= cat[q] == (long long)pr->at_peak[q];
    g_parts.plans++;
    g_parts.forward += br->forward;
    g_parts.wrap += br->wrap;
    for (int i = 0; i < p->n_ops; i++) {
        g_parts.reduce_once += p->reduce_once[i] > 0;
        g_parts.recompute += p->recompute[i] > 0;
    }
    if (same) return;
    g_parts.other_moment++;
    same = schedule_has_moment(L, p, so, cat, br->total);
    char a[256] = "", b[256] = "";
    for (int q = 0; q < OSDP_MEMORY_N_CATEGORIES; q++) {
        snprintf(a + strlen(a), sizeof a - strlen(a), " %s %lld", osdp_memory_category_name((osdp_memory_category)q),
                 cat[q]);
        snprintf(b + strlen(b), sizeof b - strlen(b), " %zu", pr->at_peak[q]);
    }
    ck_assert_msg(same, "%s N=%d B=%d prefetch %d P %d stage %d: the peak (%lld) at %s of op %d%s: cost model%s, "
                  "schedule%s", sub->cfg.name, c->N, c->B, c->prefetch, c->P, c->stage, br->total,
                  br->forward ? "forward" : "backward", br->at_op, br->wrap ? " (wrap)" : "", a, b);
}

/* what check_breakdown saw in one test (each test runs in a process of its own) */
static void report_breakdowns(const char *what)
{
    printf("%s: %lld peak breakdowns equal to the schedule's peak, to the byte and by category (%lld at a forward "
           "moment, %lld at a stage's wrap moment; %lld operators reducing once, %lld recomputed); %lld at an equal "
           "total the schedule reaches at another moment than its first\n", what, g_parts.plans, g_parts.forward,
           g_parts.wrap, g_parts.reduce_once, g_parts.recompute, g_parts.other_moment);
    ck_assert_int_gt(g_parts.plans, 0);
    memset(&g_parts, 0, sizeof g_parts);   /* the next test's own (the tests may share a process) */
}

/* trials random plans of one case: the search's peak against the schedule's
 * and, at a pipeline stage, osdp_pipe_stage_peak (all equal); returns how
 * many plans the stage's wrap moment set the peak of */
static int check_case(const osdp_layout *L, const step_case *c, int trials)
{
    const osdp_device d = sizes_device(c->weights);
    const osdp_cost_hierarchy hier = {.node_ranks = c->node_ranks};
    const int pipelined = c->P > 1, lo = pipelined ? c->bounds[c->stage] : 0;
    const int hi = pipelined ? c->bounds[c->stage + 1] : L->n_ops;
    osdp_layout sub = osdp_pipe_stage_layout(L, lo, hi);
    osdp_ps_context ctx;
    osdp_planner_options o;
    osdp_planner_result counters;
    build_context(&ctx, &sub, L, &d, c->node_ranks ? &hier : NULL, c, &o, &counters);
    /* the same without the wrap moment (bound-only contexts: the same choices, in the same order) */
    osdp_ps_context plain;
    osdp_planner_options o_plain;
    step_case c_plain = *c;
    c_plain.no_wrap = 1;
    if (pipelined) {
        build_context(&plain, &sub, L, &d, c->node_ranks ? &hier : NULL, &c_plain, &o_plain, &counters);
        ck_assert_int_eq(plain.stride, ctx.stride);
    }
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L->n_ops) == OSDP_OK);
    osdp_schedule_options so = {.geo.n_ranks = c->N, .geo.node_ranks = c->node_ranks, .geo.micro_batch = c->B,
                                .geo.accum_steps = c->accum, .geo.prefetch = c->prefetch, .geo.weight_dtype = c->weights,
                                .geo.pad_quantum = c->quantum, .geo.pp_size = c->P, .pp_stage = c->stage,
                                .geo.pipe_schedule = c->schedule, .geo.residual_dtype = c->residual};
    memcpy(so.geo.stage_bounds, c->bounds, sizeof so.geo.stage_bounds);
    int moments = 0;
    for (int t = 0; t < trials; t++) {
        int ch[256];
        const long long search = random_choices(&ctx, L, lo, &p, ch);
        osdp_memory_prediction pr;
        ck_assert_msg(osdp_schedule_predict(L, &p, &so, &pr) == OSDP_OK, "%s", osdp_error_message());
        const long long schedule = (long long)pr.peak_total;
        if (!pipelined) {
            osdp_cost_model cm;
            const osdp_step_geometry geo = {.n_ranks = c->N, .pad_quantum = c->quantum, .prefetch = c->prefetch,
                                            .residual_dtype = c->residual};
            osdp_cost_model_init(&cm, L, &d, &geo, OSDP_COST_PAPER, c->node_ranks ? &hier : NULL);
            osdp_peak_breakdown br;
            osdp_peak_parts per_op[256];
            ck_assert_int_le(L->n_ops, 256);
            osdp_cost_peak_breakdown(&cm, &p, c->B, &br, per_op);
            check_breakdown(L, &p, &so, c, L, &br, per_op, &pr);
            ck_assert_msg(search == schedule, "%s N=%d R=%d B=%d prefetch=%d %s quantum %d: search %lld, schedule %lld",
                          L->cfg.name, c->N, c->node_ranks, c->B, c->prefetch, osdp_dtype_name(c->weights), c->quantum,
                          search, schedule);
            continue;
        }
        osdp_cost_model cm;
        const osdp_step_geometry geo = {.n_ranks = c->N, .pad_quantum = c->quantum, .prefetch = c->prefetch,
                                        .residual_dtype = c->residual};
        osdp_cost_model_init(&cm, L, &d, &geo, OSDP_COST_PAPER, c->node_ranks ? &hier : NULL);
        osdp_peak_breakdown br;
        const long long stage = osdp_pipe_stage_peak_breakdown(&cm, &p, c->bounds, c->P, c->stage, c->schedule, c->B,
                                                               c->accum, &br);
        check_breakdown(L, &p, &so, c, &sub, &br, NULL, &pr);
        ck_assert_msg(search == schedule && stage == schedule,
                      "%s stage %d of %d (%s, M=%d) B=%d prefetch=%d: search %lld, stage closed form %lld, schedule %lld",
                      L->cfg.name, c->stage, c->P, osdp_pipe_schedule_name(c->schedule), c->accum, c->B, c->prefetch,
                      search, stage, schedule);
        const long long without = plain.fixed_bytes + osdp_ps_held_sum(&plain, ch) + osdp_ps_true_transient(&plain, ch);
        ck_assert(without <= schedule);
        moments += without < schedule;
    }
    osdp_plan_free(&p);
    osdp_ps_context_free(&ctx);
    if (pipelined) osdp_ps_context_free(&plain);
    return moments;
}

static const char *const MODELS[] = {"tests/inputs/t_small.ini", "tests/inputs/t_ic.ini", "tests/inputs/t_tied.ini"};

START_TEST(test_search_terms_equal_schedule_dp_and_hierarchical)
{
    for (size_t m = 0; m < sizeof MODELS / sizeof *MODELS; m++) {
        osdp_layout L;
        load_layout(&L, MODELS[m], 0);
        const int meshes[][2] = {{1, 0}, {4, 0}, {8, 0}, {8, 2}, {8, 4}};   /* N, node ranks */
        for (size_t k = 0; k < sizeof meshes / sizeof *meshes; k++)
            for (int v = 0; v < 8; v++) {
                const step_case c = {.N = meshes[k][0], .node_ranks = meshes[k][1], .B = 1 + v % 3, .accum = 1 + v % 2,
                                     .prefetch = v % 4 != 3, .quantum = v % 2 ? 64 : 1,
                                     .weights = v % 3 ? OSDP_BFLOAT16 : OSDP_FLOAT32, .P = 1,
                                     .residual = v % 3 == 1 ? OSDP_BFLOAT16 : OSDP_FLOAT32,
                                     .grad_reduce = v == 7 ? OSDP_GRAD_REDUCE_ONCE : OSDP_GRAD_REDUCE_AUTO};
                check_case(&L, &c, 25);
            }
        osdp_layout_free(&L);
    }
    ck_assert_int_gt(g_some_once, 0);   /* split operators reducing some slices once were among the plans */
    ck_assert_int_gt(g_parts.reduce_once, 0);
    ck_assert_int_gt(g_parts.recompute, 0);
    report_breakdowns("dp and hierarchical");
}
END_TEST

/* bf16 activations (cfg.act_bf16, osdp/layout.h: halved ln, qkv, heads, fc and gelu pieces, the workspace's fp32
 * copy): the search's terms against the schedule, bf16 weights with either residual stream, one node and
 * two, whole operators and tensor-parallel parts, and the stages of a 2-stage pipeline */
START_TEST(test_search_terms_bf16_activations)
{
    int cases = 0;
    for (size_t m = 0; m < sizeof MODELS / sizeof *MODELS; m++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", src_dir(), MODELS[m]);
        osdp_model_config cfg;
        ck_assert_msg(osdp_model_config_load(&cfg, path) == OSDP_OK, "%s", osdp_error_message());
        cfg.act_bf16 = 1;
        for (int tp = 1; tp <= 2; tp++) {
            osdp_layout L;
            ck_assert(osdp_layout_build_tp(&L, &cfg, cfg.ctx, tp, 1) == OSDP_OK);
            for (int v = 0; v < 6; v++) {
                step_case c = {.N = v % 2 ? 4 : 8, .node_ranks = v == 3 ? 2 : 0, .B = 1 + v % 3, .accum = 1 + v % 2,
                               .prefetch = v != 4, .quantum = v % 3 ? 1 : 64, .weights = OSDP_BFLOAT16, .P = 1,
                               .residual = v % 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32};
                check_case(&L, &c, 15);
                cases++;
                if (cfg.tied_head || tp > 1) continue;   /* a tied head has no pipeline */
                c.P = 2;
                c.accum = 2 + v % 2;
                c.schedule = v % 2 ? OSDP_PIPE_1F1B : OSDP_PIPE_GPIPE;
                c.bounds[1] = L.n_ops / 2;
                c.bounds[2] = L.n_ops;
                for (c.stage = 0; c.stage < 2; c.stage++, cases++) check_case(&L, &c, 10);
            }
            osdp_layout_free(&L);
        }
    }
    ck_assert_int_eq(cases, 3 * 2 * 6 + 2 * 6 * 2);
    report_breakdowns("bf16 activations");
}
END_TEST

START_TEST(test_search_terms_equal_schedule_tp)
{
    for (size_t m = 0; m < sizeof MODELS / sizeof *MODELS; m++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", src_dir(), MODELS[m]);
        osdp_model_config cfg;
        ck_assert_msg(osdp_model_config_load(&cfg, path) == OSDP_OK, "%s", osdp_error_message());
        for (int tp = 2; tp <= 4; tp *= 2) {
            osdp_layout L;
            if (osdp_layout_build_tp(&L, &cfg, cfg.ctx, tp, 1 + tp % 3) != OSDP_OK) continue;   /* heads tp does not divide */
            for (int v = 0; v < 6; v++) {
                const step_case c = {.N = v % 2 ? 4 : 2, .node_ranks = v == 5 ? 2 : 0, .B = 1 + v % 2, .accum = 1 + v % 2,
                                     .prefetch = v != 4, .quantum = v % 3 ? 1 : 64,
                                     .weights = v % 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32, .P = 1,
                                     .residual = v % 2 && v > 1 ? OSDP_BFLOAT16 : OSDP_FLOAT32};
                check_case(&L, &c, 25);
            }
            osdp_layout_free(&L);
        }
    }
    report_breakdowns("tensor-parallel");
}
END_TEST

/* every stage of 2- to 4-stage pipelines of the untied models, stages of
 * one operator and more: recompute both ways and reduce-once both ways
 * among the choices (auto), every operator reducing once (v 5), prefetch
 * off once (v 4, one micro-batch: no wrap moment); interleaved (one chunk)
 * with micro-batches a multiple of P */
START_TEST(test_search_terms_pipeline_stage)
{
    int moments = 0, plans = 0;
    for (size_t m = 0; m < 2; m++) {
        osdp_layout L;
        load_layout(&L, MODELS[m], 0);
        for (int P = 2; P <= 4; P++)
            for (int v = 0; v < 6; v++) {
                static const osdp_pipe_schedule kinds[] = {OSDP_PIPE_1F1B, OSDP_PIPE_GPIPE, OSDP_PIPE_INTERLEAVED};
                step_case c = {.N = v % 2 ? 4 : 2, .node_ranks = v == 3 ? 2 : 0, .B = 1 + v % 2,
                               .accum = v == 4 ? 1 : v % 3 == 2 ? 2 * P : 2 + v, .prefetch = v != 4,
                               .quantum = v == 5 ? 64 : 1,
                               .weights = v % 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32, .P = P, .schedule = kinds[v % 3],
                               .residual = v % 2 && v != 3 ? OSDP_BFLOAT16 : OSDP_FLOAT32,
                               .grad_reduce = v == 5 ? OSDP_GRAD_REDUCE_ONCE : OSDP_GRAD_REDUCE_AUTO};
                for (int s = 0; s <= P; s++) c.bounds[s] = s * L.n_ops / P;
                if (v % 2) c.bounds[1] = 1;   /* a first stage of the embedding alone */
                for (c.stage = 0; c.stage < P; c.stage++) {
                    moments += check_case(&L, &c, 20);
                    plans += 20;
                }
            }
        osdp_layout_free(&L);
    }
    /* a bf16 residual stream on a first stage of every operator but the head: its last operator (sent on, not
     * narrow) is just like an earlier one of the stage (narrow), and must not share that one's terms */
    for (size_t m = 0; m < 2; m++) {
        osdp_layout L;
        load_layout(&L, MODELS[m], 0);
        step_case c = {.N = 2, .B = 1, .accum = 4, .prefetch = 1, .quantum = 1, .weights = OSDP_BFLOAT16,
                       .residual = OSDP_BFLOAT16, .P = 2, .schedule = OSDP_PIPE_1F1B};
        c.bounds[1] = L.n_ops - 1;
        c.bounds[2] = L.n_ops;
        ck_assert_int_eq(L.op[c.bounds[1] - 1].type, L.op[c.bounds[1] - 3].type);
        for (c.stage = 0; c.stage < 2; c.stage++) {
            moments += check_case(&L, &c, 40);
            plans += 40;
        }
        osdp_layout_free(&L);
    }
    ck_assert_int_gt(plans, 0);
    /* the wrap moment is real: some plans' peak is set by it */
    printf("pipeline stages: %d random plans, the wrap moment sets the peak of %d\n", plans, moments);
    ck_assert_int_gt(moments, 0);
    ck_assert_int_gt(g_parts.wrap, 0);
    report_breakdowns("pipeline stages");
}
END_TEST

/* The peak's breakdown on random small models (layers, heads, widths block by block, vocabulary, context,
 * a tied head, naive or tiled attention, a naive or chunked head, bf16 activations) on random steps:
 * DP groups of 1 to 8 ranks, nodes of 2 (plan mode h), tensor parallelism 1 or 2, micro-batches and
 * accumulation, prefetch, padding, fp32 or bf16 weights and residual stream, gradients reduced auto or once,
 * and the stages of random 2- to 3-stage pipelines (1F1B, GPipe, interleaved of one chunk): random plans
 * of every choice (check_case: k of g slices, recompute, reduce-once slices), each plan's breakdown against
 * the schedule's peak (check_breakdown) */
START_TEST(test_breakdown_random_models)
{
    g_rng = 20261128;
    int models = 0, stages = 0;
    for (int r = 0; r < 40; r++) {
        const int layers = 1 + (int)(rnd() % 3), heads = 1 << (rnd() % 3), head_dim = 8 << (rnd() % 2);
        const int T = 8 << (rnd() % 3), vocab = 64 + (int)(rnd() % 500), tied = rnd() % 4 == 0;
        char text[1024];
        int n = snprintf(text, sizeof text, "[model]\nname = random_%d\nn_layer = %d\nn_head = %d\nn_embd = %d\n"
                         "vocab = %d\nctx = %d\ntied_head = %s\n", r, layers, heads, heads * head_dim, vocab, T,
                         tied ? "true" : "false");
        if (rnd() % 3 == 0) {   /* blocks of their own widths */
            n += snprintf(text + n, sizeof text - (size_t)n, "widths =");
            for (int l = 0; l < layers; l++)
                n += snprintf(text + n, sizeof text - (size_t)n, " %d", heads * head_dim * (1 + (int)(rnd() % 2)));
            snprintf(text + n, sizeof text - (size_t)n, "\n");
        }
        osdp_model_config cfg;
        ck_assert_msg(osdp_model_config_parse(&cfg, text, "random") == OSDP_OK, "%s: %s", text, osdp_error_message());
        cfg.attention_naive = rnd() % 2;
        cfg.head_naive = rnd() % 2;
        const osdp_dtype weights = rnd() % 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32;
        cfg.act_bf16 = weights == OSDP_BFLOAT16 && rnd() % 3 == 0;
        const int tp = heads % 2 == 0 && rnd() % 3 == 0 ? 2 : 1;
        osdp_layout L;
        ck_assert_msg(osdp_layout_build_tp(&L, &cfg, T, tp, 1 + (int)(rnd() % 3)) == OSDP_OK, "%s",
                      osdp_error_message());
        models++;
        static const int ranks[] = {1, 2, 4, 8};
        step_case c = {.N = ranks[rnd() % 4], .B = 1 + (int)(rnd() % 3), .accum = 1 + (int)(rnd() % 4),
                       .prefetch = rnd() % 5 != 0, .quantum = rnd() % 2 ? 64 : 1, .weights = weights,
                       .residual = weights == OSDP_BFLOAT16 && rnd() % 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32, .P = 1,
                       .grad_reduce = rnd() % 4 == 0 ? OSDP_GRAD_REDUCE_ONCE : OSDP_GRAD_REDUCE_AUTO};
        c.node_ranks = c.N >= 4 && rnd() % 2 ? 2 : 0;
        check_case(&L, &c, 15);
        if (!tied && tp == 1 && L.n_ops >= 3) {   /* a pipeline (a tied head has none) */
            static const osdp_pipe_schedule kinds[] = {OSDP_PIPE_1F1B, OSDP_PIPE_GPIPE, OSDP_PIPE_INTERLEAVED};
            c.P = 2 + (int)(rnd() % (L.n_ops >= 4 ? 2 : 1));
            c.schedule = kinds[rnd() % 3];
            c.accum = c.schedule == OSDP_PIPE_INTERLEAVED ? c.P * (1 + (int)(rnd() % 2)) : 1 + (int)(rnd() % 6);
            c.node_ranks = 0;
            c.bounds[0] = 0;
            for (int s = 1; s < c.P; s++)   /* at least one operator a stage */
                c.bounds[s] = c.bounds[s - 1] + 1 + (int)(rnd() % (unsigned)(L.n_ops - c.bounds[s - 1] - (c.P - s)));
            c.bounds[c.P] = L.n_ops;
            for (c.stage = 0; c.stage < c.P; c.stage++, stages++) check_case(&L, &c, 10);
        }
        osdp_layout_free(&L);
    }
    ck_assert_int_eq(models, 40);
    ck_assert_int_gt(stages, 0);
    report_breakdowns("random models");
}
END_TEST

/* osdp_pipe_after_backward: whatever pass follows a backward of a stage
 * holding fewer than its most micro-batches also follows one holding the
 * most (so the wrap moment's flags give every such moment), on every order */
START_TEST(test_after_backward_at_most)
{
    static const osdp_pipe_schedule kinds[] = {OSDP_PIPE_1F1B, OSDP_PIPE_GPIPE, OSDP_PIPE_INTERLEAVED};
    int both = 0;
    for (int k = 0; k < 3; k++)
        for (int P = 1; P <= 8; P++)
            for (int s = 0; s < P; s++)
                for (int M = 1; M <= 16; M++) {
                    osdp_pipe_pass order[32];
                    osdp_pipe_order(kinds[k], P, s, M, order);
                    const int most = osdp_pipe_in_flight(kinds[k], P, s, M), then = osdp_pipe_after_backward(kinds[k], P, s, M);
                    int held = 0, any = 0;
                    for (int q = 0; q < 2 * M; q++) {
                        if (!order[q].backward) {
                            held++;
                            continue;
                        }
                        ck_assert_int_le(held, most);
                        if (q + 1 < 2 * M) {
                            const int next = order[q + 1].backward ? OSDP_PIPE_THEN_BACKWARD : OSDP_PIPE_THEN_FORWARD;
                            ck_assert_msg(then & next, "%s P %d s %d M %d: pass %d after a backward at %d held of %d",
                                          osdp_pipe_schedule_name(kinds[k]), P, s, M, q + 1, held, most);
                            any |= next;
                        }
                        held--;
                    }
                    ck_assert_int_eq(then, any);
                    both += then == (OSDP_PIPE_THEN_FORWARD | OSDP_PIPE_THEN_BACKWARD);
                }
    ck_assert_int_gt(both, 0);
}
END_TEST

/* the wrap moment decides: the stage's search against every plan of its operators */
typedef struct stage_plans {
    int n;
    long long *peak;    /* osdp_pipe_stage_peak */
    double *time;       /* the stage's step time */
} stage_plans;

/* every plan of stage s's operators (k of g ZDP, g = split where the operator splits; recompute where it can;
 * reduce-once for each count of slices, 0..g: its last J), the rest DP */
static void every_stage_plan(stage_plans *E, const osdp_layout *L, const osdp_device *d, const step_case *c, int split)
{
    const int lo = c->bounds[c->stage], n = c->bounds[c->stage + 1] - lo;
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, L, d, &(osdp_step_geometry){.n_ranks = c->N, .prefetch = 1}, OSDP_COST_PAPER, NULL);
    osdp_layout sub = osdp_pipe_stage_layout(L, lo, lo + n);
    osdp_cost_model scm = cm;
    scm.layout = &sub;
    int g[16], rc[16], per[16];
    long long total = 1;
    ck_assert(n <= 16);
    for (int i = 0; i < n; i++) {
        g[i] = osdp_cost_can_split(&scm, i, split) ? split : 1;
        rc[i] = osdp_op_can_recompute(sub.op[i].type) ? 2 : 1;
        per[i] = (g[i] + 1) * rc[i] * (g[i] + 1);
        total *= per[i];
    }
    ck_assert(total <= 200000);
    E->n = (int)total;
    E->peak = malloc(sizeof *E->peak * (size_t)total);
    E->time = malloc(sizeof *E->time * (size_t)total);
    ck_assert(E->peak && E->time);
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L->n_ops) == OSDP_OK);
    for (long long code = 0; code < total; code++) {
        long long r = code;
        for (int i = 0; i < n; i++) {
            int digit = (int)(r % per[i]);
            r /= per[i];
            p.slices[lo + i] = g[i];
            p.zdp_slices[lo + i] = digit % (g[i] + 1);
            digit /= g[i] + 1;
            p.recompute[lo + i] = digit % rc[i];
            p.reduce_once[lo + i] = digit / rc[i];
        }
        E->peak[code] = osdp_pipe_stage_peak(&cm, &p, c->bounds, c->P, c->stage, c->schedule, c->B, c->accum, NULL);
        osdp_plan view = p;
        view.n_ops = n;
        view.slices += lo, view.zdp_slices += lo, view.recompute += lo, view.hierarchical += lo, view.reduce_once += lo;
        E->time[code] = osdp_cost_step_time(&scm, &view, c->B, c->accum);
    }
    osdp_plan_free(&p);
}

START_TEST(test_stage_search_against_every_plan)
{
    int decided = 0, cases = 0, memory_checked = 0, messages = 0, floors_tight = 0;
    const osdp_device d = sizes_device(OSDP_FLOAT32);
    for (size_t m = 0; m < 2; m++) {
        osdp_layout L;
        load_layout(&L, MODELS[m], 0);
        for (int v = 0; v < 6; v++) {
            static const osdp_pipe_schedule kinds[] = {OSDP_PIPE_1F1B, OSDP_PIPE_GPIPE};
            step_case c = {.N = 2 + 2 * (v % 2), .B = 1 + v % 2, .accum = 2 + v % 3, .prefetch = 1,
                           .P = 2 + v % 2, .schedule = kinds[v / 3]};
            for (int s = 0; s <= c.P; s++) c.bounds[s] = s * L.n_ops / c.P;
            for (c.stage = 0; c.stage < c.P; c.stage++) {
                const int lo = c.bounds[c.stage], hi = c.bounds[c.stage + 1];
                if (hi - lo > 4) continue;   /* every plan: up to (3 x 2 x 2)^4 */
                const int split = hi - lo > 3 ? 1 : 2;
                stage_plans E;
                every_stage_plan(&E, &L, &d, &c, split);
                long long least = -1, most = 0;
                for (int q = 0; q < E.n; q++) {
                    if (least < 0 || E.peak[q] < least) least = E.peak[q];
                    if (E.peak[q] > most) most = E.peak[q];
                }
                osdp_layout sub = osdp_pipe_stage_layout(&L, lo, hi);
                osdp_planner_options o;
                osdp_planner_defaults(&o);
                o.geo.n_ranks = c.N;
                o.split = split;
                o.recompute_auto = 1;
                o.grad_reduce = OSDP_GRAD_REDUCE_AUTO;
                o.verify = 0;
                o.stage_in_flight = osdp_pipe_in_flight(c.schedule, c.P, c.stage, c.accum);
                o.stage_buffer_bytes = osdp_pipe_stage_buffer_bytes(&L, c.bounds, c.stage, c.B, o.stage_in_flight);
                o.stage_next_passes = osdp_pipe_after_backward(c.schedule, c.P, c.stage, c.accum);
                for (int li = 0; li < 8; li++) {
                    const long long limit = li == 0 ? least - 1 : least + (most - least) * (li - 1) / 7;
                    double best = INFINITY;
                    for (int q = 0; q < E.n; q++)
                        if (E.peak[q] <= limit && E.time[q] < best) best = E.time[q];
                    /* the fastest plan under the limit had the search not seen the moment: one the moment rules out */
                    o.mem_limit = limit;
                    o.stage_next_passes = 0;
                    osdp_planner_result blind;
                    if (osdp_planner_plan_batch(&sub, &d, &o, c.B, c.accum, &blind) == OSDP_OK)
                        decided += blind.step_s < best;
                    osdp_planner_result_free(&blind);   /* whatever the status (osdp/planner.h) */
                    o.stage_next_passes = osdp_pipe_after_backward(c.schedule, c.P, c.stage, c.accum);
                    osdp_planner_result r;
                    const osdp_status st = osdp_planner_plan_batch(&sub, &d, &o, c.B, c.accum, &r);
                    if (isinf(best)) {
                        ck_assert_msg(st == OSDP_ERR_INFEASIBLE, "%s stage %d of %d limit %lld (least %lld): status %d",
                                      L.cfg.name, c.stage, c.P, limit, least, st);
                        /* the message names the smallest peak of every plan at this accumulation (reduce-once
                         * choices included), so that a limit of that fits */
                        const char *at = strstr(osdp_error_message(), "smallest peak any plan needs is ");
                        at = at ? strchr(at, '(') : NULL;
                        ck_assert_msg(at && atoll(at + 1) == least, "%s stage %d of %d M %d: %s (every plan: %lld)",
                                      L.cfg.name, c.stage, c.P, c.accum, osdp_error_message(), least);
                        messages++;
                    } else {
                        ck_assert_msg(st == OSDP_OK, "%s stage %d of %d limit %lld: %s", L.cfg.name, c.stage, c.P, limit,
                                      osdp_error_message());
                        ck_assert_int_le(r.peak_bytes, limit);
                        ck_assert_msg(fabs(r.step_s - best) <= 1e-12 * best, "%s stage %d of %d (%s M %d) limit %lld: "
                                      "search %.17g, every plan %.17g", L.cfg.name, c.stage, c.P,
                                      osdp_pipe_schedule_name(c.schedule), c.accum, limit, r.step_s, best);
                        osdp_plan whole;
                        ck_assert(osdp_plan_alloc(&whole, L.n_ops) == OSDP_OK);
                        for (int i = 0; i < hi - lo; i++) {
                            whole.slices[lo + i] = r.plan.slices[i];
                            whole.zdp_slices[lo + i] = r.plan.zdp_slices[i];
                            whole.recompute[lo + i] = r.plan.recompute[i];
                            whole.hierarchical[lo + i] = r.plan.hierarchical[i];
                            whole.reduce_once[lo + i] = r.plan.reduce_once[i];
                        }
                        osdp_cost_model cm;
                        osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = c.N, .prefetch = 1},
                                             OSDP_COST_PAPER, NULL);
                        ck_assert_int_eq(osdp_pipe_stage_peak(&cm, &whole, c.bounds, c.P, c.stage, c.schedule, c.B,
                                                              c.accum, NULL), r.peak_bytes);
                        osdp_plan_free(&whole);
                    }
                    osdp_planner_result_free(&r);
                    cases++;
                }
                /* the peak's floor (plan_context.h, the search's no-fit proof without a search) is at most
                 * the smallest peak of every plan */
                {
                    osdp_planner_result counters;
                    memset(&counters, 0, sizeof counters);
                    osdp_ps_context ctx;
                    ck_assert(osdp_ps_context_build(&ctx, &sub, &d, &o, c.B, c.accum, 0, NULL, &counters) == OSDP_OK);
                    const long long floor = osdp_ps_peak_floor(&ctx);
                    ck_assert_msg(floor <= least, "%s stage %d of %d: floor %lld, every plan %lld", L.cfg.name, c.stage,
                                  c.P, floor, least);
                    floors_tight += floor == least;
                    osdp_ps_context_free(&ctx);
                }
                /* the memory search (the no-fit message's smallest peak; accumulation 1: no reduce-once
                 * choice) against every plan that reduces on every micro-batch */
                long long least_every = -1, need = -1;
                osdp_cost_model scm;   /* every_stage_plan's, for its operators' choices */
                osdp_cost_model_init(&scm, &L, &d, &(osdp_step_geometry){.n_ranks = c.N, .prefetch = 1},
                                     OSDP_COST_PAPER, NULL);
                scm.layout = &sub;
                for (int q = 0; q < E.n; q++) {
                    long long code = q;
                    int once = 0;
                    for (int i = 0; i < hi - lo; i++) {
                        const int g = osdp_cost_can_split(&scm, i, split) ? split : 1;
                        const int rc = osdp_op_can_recompute(sub.op[i].type) ? 2 : 1, per = (g + 1) * rc * (g + 1);
                        once |= (int)(code % per) / ((g + 1) * rc);
                        code /= per;
                    }
                    if (!once && (least_every < 0 || E.peak[q] < least_every)) least_every = E.peak[q];
                }
                ck_assert(osdp_planner_min_memory(&sub, &d, &o, c.B, &need, NULL) == OSDP_OK);
                ck_assert_msg(need == least_every, "%s stage %d of %d: memory search %lld, every plan %lld",
                              L.cfg.name, c.stage, c.P, need, least_every);
                memory_checked++;
                free(E.peak);
                free(E.time);
            }
        }
        osdp_layout_free(&L);
    }
    printf("stage searches against every plan: %d limits, %d where the search blind to the wrap moment picks a plan "
           "over the limit, %d no-fit messages, %d peak floors equal to the smallest peak\n", cases, decided, messages,
           floors_tight);
    ck_assert_int_gt(cases, 0);
    ck_assert_int_gt(messages, 0);
    ck_assert_int_gt(floors_tight, 0);   /* where the floor alone proves a byte less does not fit */
    ck_assert_int_gt(decided, 0);
    ck_assert_int_gt(memory_checked, 0);
}
END_TEST

/* The largest backward moment of a plan alone (K_u + Y_u, osdp/cost_model.h): the peak a search blind to the
 * forward moments would have seen */
static long long backward_peak(const osdp_cost_model *cm_in, const osdp_plan *p, int b)
{
    osdp_cost_model cm = *cm_in;
    cm.recompute = p->recompute;
    cm.reduce_once = p->reduce_once;
    const int n = cm.layout->n_ops;
    osdp_op_peak_terms t[16];
    ck_assert_int_le(n, 16);
    long long base = osdp_cost_workspace(&cm, b), acts = 0, most = LLONG_MIN;
    for (int i = 0; i < n; i++) {
        osdp_op_mem m;
        osdp_cost_plan_op_mem(&cm, p, i, b, &m);
        osdp_cost_peak_terms(&cm, i, &m, &t[i]);
        base += t[i].held;
    }
    for (int u = 0; u < n; u++) {
        const long long v = osdp_cost_backward_moment(t, n, u, acts);
        if (v > most) most = v;
        acts += t[u].acts;
    }
    return base + most;
}

/* The search bounds the forward moments too (issue 28): a head 4 to 8x an mlp's weights after blocks that
 * may recompute, gradients reduced once or every micro-batch per slice (grad-reduce auto, or once), where an
 * operator's forward is the peak of many plans.  At limits spread over every plan's peaks, the planner's
 * plan against every plan of the model (k of g ZDP, recompute both ways, each count of reduce-once slices):
 * the fastest that fits (every moment, osdp_cost_peak) has the planner's step time, its peak fits, and it is
 * the cost model's and the schedule's; and the limits where the fastest plan by its backward moments alone
 * is over by a forward moment are counted (where the search once refused: some must be). */
START_TEST(test_search_bounds_forward_moments)
{
    typedef struct { int layers, vocab, split, N, B, accum; osdp_dtype weights; osdp_grad_reduce reduce; } fcase;
    static const fcase cases[] = {{2, 1024, 1, 4, 8, 2, OSDP_BFLOAT16, OSDP_GRAD_REDUCE_AUTO},
                                  {2, 2048, 1, 2, 8, 3, OSDP_FLOAT32, OSDP_GRAD_REDUCE_AUTO},
                                  {1, 1024, 2, 4, 4, 2, OSDP_BFLOAT16, OSDP_GRAD_REDUCE_AUTO},
                                  {2, 1024, 1, 4, 8, 2, OSDP_BFLOAT16, OSDP_GRAD_REDUCE_ONCE},
                                  {1, 2048, 2, 2, 8, 2, OSDP_FLOAT32, OSDP_GRAD_REDUCE_ONCE}};
    int limits = 0, forward_binds = 0, forward_peaks = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const fcase *fc = &cases[ci];
        char path[4096];
        osdp_model_config cfg;
        snprintf(path, sizeof path, "%s/tests/inputs/t_small.ini", src_dir());
        ck_assert_msg(osdp_model_config_load(&cfg, path) == OSDP_OK, "%s", osdp_error_message());
        cfg.vocab = fc->vocab;
        cfg.n_layer = fc->layers;
        osdp_layout L;
        ck_assert_msg(osdp_layout_build(&L, &cfg, 32) == OSDP_OK, "%s", osdp_error_message());
        osdp_device d;
        load_device(&d, "cpu_2core");
        d.param_bytes = (int)osdp_dtype_size(fc->weights);
        osdp_cost_model cm;
        osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = fc->N, .prefetch = 1}, OSDP_COST_PAPER,
                             NULL);
        const int n = L.n_ops;
        int g[16], rc[16], per[16];
        long long total = 1;
        ck_assert_int_le(n, 16);
        for (int i = 0; i < n; i++) {
            g[i] = osdp_cost_can_split(&cm, i, fc->split) ? fc->split : 1;
            rc[i] = osdp_op_can_recompute(L.op[i].type) ? 2 : 1;
            per[i] = (g[i] + 1) * rc[i] * (fc->reduce == OSDP_GRAD_REDUCE_ONCE ? 1 : g[i] + 1);
            total *= per[i];
        }
        ck_assert(total <= 100000);
        long long *peak = malloc(sizeof *peak * (size_t)total), *back = malloc(sizeof *back * (size_t)total);
        double *time = malloc(sizeof *time * (size_t)total);
        ck_assert(peak && back && time);
        osdp_plan p;
        ck_assert(osdp_plan_alloc(&p, n) == OSDP_OK);
        long long least = LLONG_MAX, most = 0;
        for (long long code = 0; code < total; code++) {
            long long r = code;
            for (int i = 0; i < n; i++) {
                int digit = (int)(r % per[i]);
                r /= per[i];
                p.slices[i] = g[i];
                p.zdp_slices[i] = digit % (g[i] + 1);
                digit /= g[i] + 1;
                p.recompute[i] = digit % rc[i];
                p.reduce_once[i] = fc->reduce == OSDP_GRAD_REDUCE_ONCE ? g[i] : digit / rc[i];
            }
            peak[code] = osdp_cost_peak(&cm, &p, fc->B, NULL);
            back[code] = backward_peak(&cm, &p, fc->B);
            if (peak[code] > back[code] && g_parts.forward < 200 * (long long)(ci + 1)) {
                /* a forward moment's breakdown against the schedule's */
                const step_case sc = {.N = fc->N, .B = fc->B, .accum = fc->accum, .prefetch = 1, .quantum = 1,
                                      .weights = fc->weights, .P = 1};
                const osdp_schedule_options so = {.geo.n_ranks = fc->N, .geo.micro_batch = fc->B,
                                                  .geo.accum_steps = fc->accum, .geo.prefetch = 1,
                                                  .geo.weight_dtype = fc->weights, .geo.pad_quantum = 1};
                osdp_memory_prediction pr;
                ck_assert(osdp_schedule_predict(&L, &p, &so, &pr) == OSDP_OK);
                osdp_peak_breakdown br;
                osdp_peak_parts per_op[16];
                osdp_cost_peak_breakdown(&cm, &p, fc->B, &br, per_op);
                ck_assert(br.forward);
                check_breakdown(&L, &p, &so, &sc, &L, &br, per_op, &pr);
            }
            time[code] = osdp_cost_step_time(&cm, &p, fc->B, fc->accum);
            if (peak[code] < least) least = peak[code];
            if (peak[code] > most) most = peak[code];
        }
        osdp_planner_options o;
        osdp_planner_defaults(&o);
        o.geo.n_ranks = fc->N;
        o.split = fc->split;
        o.recompute_auto = 1;
        o.grad_reduce = fc->reduce;
        long long n_fwd = 0;   /* the plans whose forward moment is over their backward ones */
        for (long long q = 0; q < total; q++) n_fwd += peak[q] > back[q];
        for (int li = 0; li < 32; li++) {
            /* a third spread evenly, a third random over [least - 1, most], a third where a random plan's
             * backward moments fit and its forward does not */
            long long limit = li < 11 ? least - 1 + (most - least + 1) * li / 10
                                      : least + (long long)(rnd() % (unsigned)(most - least + 1));
            if (li >= 22 && n_fwd > 0) {
                long long q = 0, pick = (long long)(rnd() % (unsigned)n_fwd);
                for (;; q++)
                    if (peak[q] > back[q] && pick-- == 0) break;
                limit = back[q] + (long long)(rnd() % (unsigned)(peak[q] - back[q]));
            }
            double best = INFINITY, blind = INFINITY;
            long long blind_code = -1;
            for (long long q = 0; q < total; q++) {
                if (peak[q] <= limit && time[q] < best) best = time[q];
                if (back[q] <= limit && time[q] < blind) blind = time[q], blind_code = q;
            }
            forward_binds += blind_code >= 0 && peak[blind_code] > limit;
            o.mem_limit = limit;
            osdp_planner_result res;
            const osdp_status st = osdp_planner_plan_batch(&L, &d, &o, fc->B, fc->accum, &res);
            if (isinf(best)) {
                ck_assert_msg(st == OSDP_ERR_INFEASIBLE, "case %zu limit %lld (least %lld): status %d (%s)", ci, limit,
                              least, st, osdp_error_message());
            } else {
                ck_assert_msg(st == OSDP_OK, "case %zu limit %lld: %s", ci, limit, osdp_error_message());
                ck_assert_int_le(res.peak_bytes, limit);
                ck_assert_int_eq(osdp_cost_peak(&cm, &res.plan, fc->B, NULL), res.peak_bytes);
                ck_assert_int_eq(res.runtime_peak, res.peak_bytes);
                ck_assert_msg(fabs(res.step_s - best) <= 1e-12 * best, "case %zu limit %lld: search %.17g, every plan "
                              "%.17g", ci, limit, res.step_s, best);
                forward_peaks += res.peak_forward;
            }
            osdp_planner_result_free(&res);
            limits++;
        }
        osdp_plan_free(&p);
        free(peak); free(back); free(time);
        osdp_layout_free(&L);
    }
    printf("forward moments: %d limits against every plan, %d where the fastest plan by its backward moments is over "
           "by a forward one, %d plans whose peak is a forward moment\n", limits, forward_binds, forward_peaks);
    ck_assert_int_gt(forward_binds, 0);
    ck_assert_int_gt(forward_peaks, 0);
    ck_assert_int_gt(g_parts.forward, 0);
    report_breakdowns("forward moments");
}
END_TEST

/* The cost model per slice (osdp/cost_model.h, osdp/plan.h): an operator of
 * g slices whose last J reduce once holds their accumulated gradients
 * (Q e_g, Q their padded elements) and receives the others' shards
 * ((P - Q) e_g / N); its comm is every-micro-batch's less (A - 1) RS_s of
 * each of the J slices, its compute A Q step_full_param more; J = g is
 * reduce-once as it was (a count past g reads as g), J = 0 as without. */
START_TEST(test_cost_per_slice)
{
    osdp_layout L;
    load_layout(&L, "tests/inputs/t_small.ini", 0);
    osdp_device d = sizes_device(OSDP_BFLOAT16);
    d.all_gather = (osdp_collective_cost){.alpha = 3e-6, .beta = 2e-10};
    d.reduce_scatter = (osdp_collective_cost){.alpha = 5e-6, .beta = 7e-10};
    for (int t = 0; t < OSDP_N_OP_TYPES; t++) d.gamma[t] = 1e-12;
    d.step_full_param = 3e-10;
    d.step_shard_param = 2e-9;
    const int N = 4, A = 5, g = 4, op = osdp_layout_find_op(&L, "mlp.0");
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = N, .prefetch = 1}, OSDP_COST_PAPER, NULL);
    size_t bounds[OSDP_MAX_SLICES + 1], p[OSDP_MAX_SLICES], P = 0;
    ck_assert(osdp_op_split(&L.op[op], g, bounds) == OSDP_OK);
    for (int s = 0; s < g; s++) P += p[s] = osdp_padded_numel(bounds[s + 1] - bounds[s], N);
    ck_assert(p[0] != p[1] || p[1] != p[2] || p[2] != p[3]);   /* slices of unequal sizes: which ones counts */
    for (int k = 0; k <= g; k += 2) {
        osdp_op_time every, all, past;
        osdp_cost_op_time_choice(&cm, op, g, k, 0, 0, 1, A, &every);
        osdp_cost_op_time_choice(&cm, op, g, k, 0, g, 1, A, &all);
        osdp_cost_op_time_choice(&cm, op, g, k, 0, OSDP_MAX_SLICES, 1, A, &past);
        ck_assert(all.total == past.total && all.comm == past.comm);
        size_t Q = 0;
        double saved = 0;
        for (int J = 0; J <= g; J++) {
            if (J > 0) {
                Q += p[g - J];
                saved += (A - 1) * osdp_collective_time(&d.reduce_scatter, N, (double)p[g - J] * d.grad_bytes);
            }
            osdp_op_time t;
            osdp_op_mem m;
            osdp_op_peak_terms pt;
            osdp_cost_op_time_choice(&cm, op, g, k, 0, J, 1, A, &t);
            osdp_cost_op_mem_choice(&cm, op, g, k, 0, J, 1, &m);
            osdp_cost_peak_terms(&cm, op, &m, &pt);
            ck_assert_msg(fabs(t.comm - (every.comm - saved)) <= 1e-12 * every.comm, "k %d J %d: comm %.17g, every %.17g "
                          "less %.17g", k, J, t.comm, every.comm, saved);
            ck_assert(fabs(t.compute - (every.compute + A * (double)Q * d.step_full_param)) <= 1e-12 * t.compute);
            ck_assert_int_eq(m.accum, (long long)Q * d.grad_bytes);
            ck_assert_int_eq(m.recv, (long long)(P - Q) / N * d.grad_bytes);
            ck_assert_int_eq(pt.held, m.state + m.resident + m.accum);
            ck_assert_int_eq(pt.in_flight, J < g ? m.grads + m.recv : 0);   /* all once: freed after its backward */
        }
        ck_assert(fabs(all.comm - (every.comm - saved)) <= 1e-12 * every.comm);
    }
    osdp_layout_free(&L);
}
END_TEST

static Suite *planner_terms_suite(void)
{
    const TTest *terms[] = {test_search_terms_equal_schedule_dp_and_hierarchical, test_search_terms_equal_schedule_tp,
                            test_search_terms_bf16_activations,
                            test_search_terms_pipeline_stage, test_after_backward_at_most,
                            test_stage_search_against_every_plan, test_search_bounds_forward_moments,
                            test_cost_per_slice, test_breakdown_random_models, NULL};
    const osdp_check_case cases[] = {{.name = "terms", .tests = terms}};
    return osdp_check_suite("planner_terms", cases, sizeof cases / sizeof cases[0]);
}
const osdp_check_program osdp_check_this_program = {.suite = planner_terms_suite};

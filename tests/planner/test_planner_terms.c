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
 *            a tied head's embedding too), fp32 and bf16 weights, prefetch
 *            on and off, the CPU's and CUDA's shard padding
 *   pipeline stage s of P (1F1B and GPipe): the search's terms for the
 *            stage see every moment but the one at the stage's first
 *            operator's backward that prefetches the next pass's first
 *            slice (osdp_pipe_stage_peak); so the search's peak is never
 *            above the schedule's, and osdp_pipe_stage_peak (that peak and
 *            the moment) equals it. */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/cost_model.h"
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
    int P, stage;               /* P 1: no pipeline */
    int bounds[OSDP_MAX_STAGES + 1];
    osdp_pipe_schedule schedule;
    osdp_grad_reduce grad_reduce;   /* 0 reads as auto */
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
    o->split_auto = 1;
    o->split_max = 4;
    o->recompute_auto = 1;
    o->modes = OSDP_MODES_ANY;
    o->hierarchy = hier;
    o->grad_reduce = c->grad_reduce ? c->grad_reduce : OSDP_GRAD_REDUCE_AUTO;
    if (c->P > 1) {
        o->stage_in_flight = osdp_pipe_in_flight(c->schedule, c->P, c->stage, c->accum);
        o->stage_buffer_bytes = osdp_pipe_stage_buffer_bytes(whole, c->bounds, c->stage, c->B, o->stage_in_flight);
    }
    memset(counters, 0, sizeof *counters);
    ck_assert_msg(osdp_ps_context_build(ctx, sub, d, o, c->B, c->accum, 2, NULL, counters) == OSDP_OK, "%s",
                  osdp_error_message());
}

/* Random choices of the context for operators [lo, hi) into plan p (the
 * other operators: random plans of their own); returns the peak the search
 * sees for them. */
static long long random_choices(const osdp_ps_context *ctx, const osdp_layout *L, int lo, osdp_plan *p)
{
    int ch[256];
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
    }
    return ctx->fixed_bytes + osdp_ps_held_sum(ctx, ch) + osdp_ps_true_transient(ctx, ch);
}

/* trials random plans of one case: the search's peak against the schedule's
 * (equal; at a pipeline stage never above it, and osdp_pipe_stage_peak equal
 * to it); returns how many plans the stage's prefetch moment set the peak of */
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
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L->n_ops) == OSDP_OK);
    osdp_schedule_options so = {.geo.n_ranks = c->N, .geo.node_ranks = c->node_ranks, .geo.micro_batch = c->B,
                                .geo.accum_steps = c->accum, .geo.prefetch = c->prefetch, .geo.weight_dtype = c->weights,
                                .geo.pad_quantum = c->quantum, .geo.pp_size = c->P, .pp_stage = c->stage,
                                .geo.pipe_schedule = c->schedule};
    memcpy(so.geo.stage_bounds, c->bounds, sizeof so.geo.stage_bounds);
    int moments = 0;
    for (int t = 0; t < trials; t++) {
        const long long search = random_choices(&ctx, L, lo, &p);
        osdp_memory_prediction pr;
        ck_assert_msg(osdp_schedule_predict(L, &p, &so, &pr) == OSDP_OK, "%s", osdp_error_message());
        const long long schedule = (long long)pr.peak_total;
        if (!pipelined) {
            ck_assert_msg(search == schedule, "%s N=%d R=%d B=%d prefetch=%d %s quantum %d: search %lld, schedule %lld",
                          L->cfg.name, c->N, c->node_ranks, c->B, c->prefetch, osdp_dtype_name(c->weights), c->quantum,
                          search, schedule);
            continue;
        }
        osdp_cost_model cm;
        const osdp_step_geometry geo = {.n_ranks = c->N, .pad_quantum = c->quantum, .prefetch = c->prefetch};
        osdp_cost_model_init(&cm, L, &d, &geo, OSDP_COST_PAPER, c->node_ranks ? &hier : NULL);
        const long long stage = osdp_pipe_stage_peak(&cm, &p, c->bounds, c->P, c->stage, c->schedule, c->B, c->accum,
                                                     NULL);
        ck_assert_msg(search <= schedule && stage == schedule,
                      "%s stage %d of %d (%s, M=%d) B=%d prefetch=%d: search %lld, stage closed form %lld, schedule %lld",
                      L->cfg.name, c->stage, c->P, osdp_pipe_schedule_name(c->schedule), c->accum, c->B, c->prefetch,
                      search, stage, schedule);
        moments += search < schedule;
    }
    osdp_plan_free(&p);
    osdp_ps_context_free(&ctx);
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
                                     .grad_reduce = v == 7 ? OSDP_GRAD_REDUCE_ONCE : OSDP_GRAD_REDUCE_AUTO};
                check_case(&L, &c, 25);
            }
        osdp_layout_free(&L);
    }
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
                                     .weights = v % 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32, .P = 1};
                check_case(&L, &c, 25);
            }
            osdp_layout_free(&L);
        }
    }
}
END_TEST

/* every stage of 2- and 3-stage pipelines of the untied models */
START_TEST(test_search_terms_pipeline_stage)
{
    int moments = 0, plans = 0;
    for (size_t m = 0; m < 2; m++) {
        osdp_layout L;
        load_layout(&L, MODELS[m], 0);
        for (int P = 2; P <= 3; P++)
            for (int v = 0; v < 4; v++) {
                step_case c = {.N = v % 2 ? 4 : 2, .node_ranks = v == 3 ? 2 : 0, .B = 1 + v % 2, .accum = 2 + v,
                               .prefetch = v != 2, .quantum = 1, .weights = v % 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32,
                               .P = P, .schedule = v % 2 ? OSDP_PIPE_GPIPE : OSDP_PIPE_1F1B};
                for (int s = 0; s <= P; s++) c.bounds[s] = s * L.n_ops / P;
                for (c.stage = 0; c.stage < P; c.stage++) {
                    moments += check_case(&L, &c, 20);
                    plans += 20;
                }
            }
        osdp_layout_free(&L);
    }
    ck_assert_int_gt(plans, 0);
    /* the moment the search does not see is real: some plans' peak is set by it */
    ck_assert_int_gt(moments, 0);
}
END_TEST

static Suite *planner_terms_suite(void)
{
    const TTest *terms[] = {test_search_terms_equal_schedule_dp_and_hierarchical, test_search_terms_equal_schedule_tp,
                            test_search_terms_pipeline_stage, NULL};
    const osdp_check_case cases[] = {{.name = "terms", .tests = terms}};
    return osdp_check_suite("planner_terms", cases, sizeof cases / sizeof cases[0]);
}
const osdp_check_program osdp_check_this_program = {.suite = planner_terms_suite};

/* The operators' choices costed once per pipeline planning call
 * (src/planner/choice_memo.h) change nothing the search sees: every stage
 * context of a pipeline (first, middle and last stages, their search,
 * memory-search and bound contexts, the wrap moment's pairings) built with
 * one memo shared by all of them equals, array by array and to the bit,
 * the same context built without it, on GPT-2 small and a tied-head model,
 * over meshes of one and two nodes (plan mode h among the choices), TP 1
 * and 2, micro-batches 1 and 2, M below, at and above P, under 1F1B and
 * GPipe, with --split auto, --recompute auto (and a plan's fixed
 * recompute), --grad-reduce auto, once and every, fp32 and bf16 weights;
 * the memo answers most operators (its hits counted).  And
 * osdp_ps_fastest_times, the 3D search's per-operator fastest times, equals
 * the least objective of each operator in a bound context of the same
 * options. */
#include "config.h"

#include "check_main.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/pipeline.h"
#include "osdp/pipeline_cost.h"
#include "osdp/planner.h"
#include "planner/choice_memo.h"
#include "planner/plan_context.h"
#include "planner/planner_pipeline.h"

#include "test_inputs.h"

#define SEQ 64

/* nodes of 2 ranks, the link between them slower (plan mode h where the data group spans nodes) */
static void two_level_device(osdp_device *d, int bf16)
{
    char text[2048];
    snprintf(text, sizeof text,
             "[device]\nname = memo\nmem_limit = 1G\nranks_per_node = 2\nprecision = %s\n"
             "[all_gather]\nalpha = 1e-5\nbeta = 2e-10\n[reduce_scatter]\nalpha = 3e-5\nbeta = 4e-10\n"
             "[tp_all_reduce]\nalpha = 1e-5\nbeta = 3e-10\n[p2p]\nalpha = 1e-5\nbeta = 1e-10\n"
             "[internode_all_gather]\nalpha = 5e-5\nbeta = 4e-9\n[internode_reduce_scatter]\nalpha = 5e-5\nbeta = 8e-9\n"
             "[internode_p2p]\nalpha = 5e-5\nbeta = 2e-9\n"
             "[gamma]\nembed = 1e-12\nattn = 2e-12\nmlp = 3e-12\nhead = 4e-12\n",
             bf16 ? "bf16" : "fp32");
    ck_assert_msg(osdp_device_parse(d, text, "memo.ini") == OSDP_OK, "%s", osdp_error_message());
}

#define SAME(field) ck_assert_msg(a->field == b->field, "%s: " #field " differs", where)
#define SAME_ARRAY(array, count)                                                                              \
    ck_assert_msg(((a->array) == NULL) == ((b->array) == NULL)                                               \
                      && (!(a->array) || memcmp(a->array, b->array, sizeof *(a->array) * (size_t)(count)) == 0), \
                  "%s: " #array " differs", where)

/* the two contexts are the same, every array the search reads */
static void same_context(const osdp_ps_context *a, const osdp_ps_context *b, const char *where)
{
    SAME(n_ops);
    SAME(stride);
    SAME(fixed_bytes);
    SAME(n_wrap_values);
    SAME(bound_only);
    SAME(minimise_memory);
    const int n = a->n_ops;
    SAME_ARRAY(n_choices, n);
    SAME_ARRAY(group, n);
    SAME_ARRAY(later_acts_optimistic, n);
    SAME_ARRAY(later_acts_pessimistic, n);
    SAME_ARRAY(wrap_values, a->n_wrap_values);
    SAME_ARRAY(wrap_first_pass, a->stride);
    if (!a->bound_only) SAME_ARRAY(knap_order, n);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < a->n_choices[i]; c++) {
            const size_t at = PS_CHOICE(a, i, c);
            ck_assert_msg(a->choice_slices[at] == b->choice_slices[at] && a->choice_zdp_slices[at] == b->choice_zdp_slices[at]
                              && a->choice_recompute[at] == b->choice_recompute[at]
                              && a->choice_hierarchical[at] == b->choice_hierarchical[at]
                              && a->choice_reduce_once[at] == b->choice_reduce_once[at],
                          "%s: operator %d choice %d: another choice", where, i, c);
            ck_assert_msg(a->held_bytes[at] == b->held_bytes[at] && a->pass_peak_bytes[at] == b->pass_peak_bytes[at]
                              && a->prefetch_bytes[at] == b->prefetch_bytes[at]
                              && a->next_op_bytes[at] == b->next_op_bytes[at] && a->act_bytes[at] == b->act_bytes[at]
                              && a->forward_peak_bytes[at] == b->forward_peak_bytes[at]
                              && a->view_bytes[at] == b->view_bytes[at]
                              && a->forward_next_bytes[at] == b->forward_next_bytes[at],
                          "%s: operator %d choice %d: other bytes", where, i, c);
            ck_assert_msg(a->objective[at] == b->objective[at], "%s: operator %d choice %d: objective %.17g vs %.17g",
                          where, i, c, a->objective[at], b->objective[at]);
        }
}

typedef struct memo_case {
    const char *model;
    int ranks, tp, pp, bf16;
    osdp_pipe_schedule schedule;
    osdp_grad_reduce reduce;
    int fixed_recompute;   /* 1: a plan's recompute on every other operator instead of --recompute auto */
} memo_case;

/* every stage of the balanced split of one case, at b and M: each context built with the shared memo and
 * without; the memo's hits added to *hits, the contexts compared to *built */
static void check_case(const memo_case *mc, int b, int M, long long *hits, int *built, int *with_h)
{
    osdp_model_config cfg;
    load_config(&cfg, mc->model);
    osdp_layout L;
    ck_assert(osdp_layout_build_tp(&L, &cfg, SEQ, mc->tp, 1) == OSDP_OK);
    osdp_device dev;
    two_level_device(&dev, mc->bf16);
    osdp_planner_options o;
    osdp_planner_defaults(&o);
    o.geo.n_ranks = mc->ranks;
    o.verify = 0;
    o.split_auto = 1;
    o.grad_reduce = mc->reduce;
    int *rc = calloc((size_t)L.n_ops, sizeof *rc);
    ck_assert(rc);
    for (int i = 0; i < L.n_ops; i++) rc[i] = (i / 2) % 2 && osdp_op_can_recompute(L.op[i].type);   /* both kinds both ways */
    if (mc->fixed_recompute) o.recompute = rc;
    else o.recompute_auto = 1;
    const int P = mc->pp, D = mc->ranks / (mc->tp * P);
    int bounds[OSDP_MAX_STAGES + 1];
    ck_assert(osdp_pipe_balanced_split(&L, &dev, &o, mc->tp, P, bounds) == OSDP_OK);
    osdp_device level;
    osdp_cost_device_for_mesh(&dev, mc->tp, D, P, &level);
    osdp_cost_hierarchy hier;
    osdp_planner_options base = o;
    base.offer_hierarchical = 1;
    base.geo.n_ranks = D;
    base.geo.micro_batch = b;
    base.geo.tp_size = mc->tp;
    base.hierarchy = osdp_planner_hierarchy(&base, &dev, mc->tp, D, P, &hier);
    *with_h += base.hierarchy != NULL;
    osdp_choice_memo *memo = osdp_choice_memo_new();
    ck_assert(memo);
    for (int s = 0; s < P; s++) {
        osdp_planner_options so = base;   /* as the pipeline planner's stage options */
        const int in_flight = osdp_pipe_in_flight(mc->schedule, P, s, M);
        so.recompute = o.recompute ? o.recompute + bounds[s] : NULL;
        so.stage_in_flight = in_flight;
        so.stage_buffer_bytes = osdp_pipe_stage_buffer_bytes(&L, bounds, s, b, in_flight);
        so.stage_next_passes = osdp_pipe_after_backward(mc->schedule, P, s, M);
        osdp_layout sub = osdp_pipe_stage_layout(&L, bounds[s], bounds[s + 1]);
        for (int kind = 0; kind <= 2; kind++)
            for (int wrap = -1; wrap <= 1; wrap++) {
                osdp_planner_result counters;
                memset(&counters, 0, sizeof counters);
                osdp_ps_context with, without;
                osdp_planner_options om = so, on = so;
                om.choice_memo = memo;
                on.choice_memo = NULL;
                ck_assert(osdp_ps_context_build_wrap(&with, &sub, &level, &om, b, M, kind, NULL, &counters, wrap) == OSDP_OK);
                ck_assert(osdp_ps_context_build_wrap(&without, &sub, &level, &on, b, M, kind, NULL, &counters, wrap)
                          == OSDP_OK);
                char where[256];
                snprintf(where, sizeof where, "%s ranks %d tp %d P %d stage %d b %d M %d kind %d wrap %d", mc->model,
                         mc->ranks, mc->tp, P, s, b, M, kind, wrap);
                same_context(&with, &without, where);
                (*built)++;
                osdp_ps_context_free(&with);
                osdp_ps_context_free(&without);
            }
    }
    *hits += osdp_choice_memo_hits(memo);
    osdp_choice_memo_free(memo);
    free(rc);
    osdp_layout_free(&L);
}

START_TEST(test_memo_contexts_equal)
{
    const memo_case cases[] = {
        {"gpt2_small", 8, 1, 2, 0, OSDP_PIPE_1F1B, OSDP_GRAD_REDUCE_AUTO, 0},
        {"gpt2_small", 16, 1, 4, 1, OSDP_PIPE_1F1B, OSDP_GRAD_REDUCE_AUTO, 0},     /* D 4 over two nodes: h */
        {"gpt2_small", 16, 2, 4, 1, OSDP_PIPE_GPIPE, OSDP_GRAD_REDUCE_ONCE, 0},
        {"gpt2_small", 8, 1, 4, 0, OSDP_PIPE_1F1B, OSDP_GRAD_REDUCE_EVERY, 1},
        {"gpt2_small_tied", 8, 1, 2, 1, OSDP_PIPE_1F1B, OSDP_GRAD_REDUCE_AUTO, 0},       /* a tied head */
        {"tiny", 4, 1, 1, 0, OSDP_PIPE_1F1B, OSDP_GRAD_REDUCE_AUTO, 1},       /* no pipeline */
    };
    long long hits = 0;
    int built = 0, with_h = 0;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        for (int b = 1; b <= 2; b++) {
            const int P = cases[k].pp, Ms[] = {1, P > 1 ? P - 1 : 2, P, P + 3};
            for (size_t m = 0; m < sizeof Ms / sizeof *Ms; m++) check_case(&cases[k], b, Ms[m], &hits, &built, &with_h);
        }
    printf("choice memo: %d stage contexts equal with and without it (%d pipelines with plan mode h); %lld operators "
           "answered by it\n", built, with_h, hits);
    ck_assert_int_gt(built, 500);
    ck_assert_int_gt(with_h, 0);
    ck_assert_int_gt(hits, 2000);   /* it is used: most operators of most contexts */
}
END_TEST

/* osdp_ps_fastest_times against a bound context's least objective per operator */
START_TEST(test_fastest_times)
{
    const char *models[] = {"gpt2_small", "gpt2_small_tied"};
    int compared = 0;
    for (size_t k = 0; k < sizeof models / sizeof *models; k++)
        for (int tp = 1; tp <= 2; tp++)
            for (int reduce = 0; reduce < 3; reduce++) {
                osdp_model_config cfg;
                load_config(&cfg, models[k]);
                osdp_layout L;
                ck_assert(osdp_layout_build_tp(&L, &cfg, SEQ, tp, 1) == OSDP_OK);
                osdp_device dev, level;
                two_level_device(&dev, reduce == 1);
                osdp_cost_device_for_mesh(&dev, tp, 4, 2, &level);
                osdp_planner_options o;
                osdp_planner_defaults(&o);
                o.geo.n_ranks = 4;
                o.geo.tp_size = tp;
                o.offer_hierarchical = 1;
                osdp_cost_hierarchy hier;
                o.hierarchy = osdp_planner_hierarchy(&o, &dev, tp, 4, 2, &hier);
                o.split_auto = 1;
                o.recompute_auto = 1;
                o.grad_reduce = reduce == 0 ? OSDP_GRAD_REDUCE_AUTO : reduce == 1 ? OSDP_GRAD_REDUCE_ONCE
                                                                                   : OSDP_GRAD_REDUCE_EVERY;
                for (int b = 1; b <= 2; b++) {
                    double *fastest = malloc(sizeof *fastest * (size_t)L.n_ops);
                    ck_assert(fastest);
                    ck_assert(osdp_ps_fastest_times(&L, &level, &o, b, 6, fastest) == OSDP_OK);
                    osdp_planner_result counters;
                    memset(&counters, 0, sizeof counters);
                    osdp_ps_context ctx;
                    ck_assert(osdp_ps_context_build(&ctx, &L, &level, &o, b, 6, 2, NULL, &counters) == OSDP_OK);
                    for (int i = 0; i < L.n_ops; i++) {
                        double least = INFINITY;
                        for (int c = 0; c < ctx.n_choices[i]; c++)
                            least = fmin(least, ctx.objective[PS_CHOICE(&ctx, i, c)]);
                        ck_assert_msg(fastest[i] == least, "%s tp %d operator %d b %d: fastest %.17g, the context's %.17g",
                                      models[k], tp, i, b, fastest[i], least);
                        compared++;
                    }
                    osdp_ps_context_free(&ctx);
                    free(fastest);
                }
                osdp_layout_free(&L);
            }
    printf("fastest times: %d operators equal the bound context's least objective\n", compared);
    ck_assert_int_gt(compared, 100);
}
END_TEST

static Suite *choice_memo_suite(void)
{
    const TTest *memo[] = {test_memo_contexts_equal, test_fastest_times, NULL};
    const osdp_check_case cases[] = {{.name = "memo", .tests = memo}};
    return osdp_check_suite("choice_memo", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = choice_memo_suite};

/* Tests for the interleaved schedule's V in the 3D search (osdp_planner_3d
 * with osdp_3d_options.virtual_stages, issue 28 item 2): on an 8-layer
 * model over 4 ranks, the search's answer against exhaustive enumeration of
 * meshes x stage splits x micro-batches x V, each (mesh, split, b) planned
 * by the pipeline's planner under 1F1B (each stage's plan the fastest that
 * fits, osdp_planner_pipeline) and V >= 2 priced and fitted by
 * osdp_pipe_interleave_search on the balanced split; a device whose
 * point-to-point messages are cheap (interleaving wins, V > 1 chosen) and
 * one where they are dear (V = 1); a schedule the caller fixes is kept. */
#include "config.h"

#include "check_main.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/pipeline.h"
#include "osdp/pipeline_interleave.h"
#include "osdp/planner.h"

#define SEQ 16
#define RANKS 4
#define GLOBAL_BATCH 8
#define SPLIT_LIMIT 512   /* the 3D search's default enumeration limit */

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)); }

/* 8 layers (V 2 on 4 stages, V 2 or 4 on 2), 18 operators */
static void model(osdp_model_config *cfg)
{
    const char *text = "[model]\nname = t_il8\nn_layer = 8\nn_head = 4\nn_embd = 32\nvocab = 256\nctx = 32\n";
    ck_assert_msg(osdp_model_config_parse(cfg, text, "t_il8.ini") == OSDP_OK, "%s", osdp_error_message());
}

/* data- and tensor-parallel collectives dear, compute cheap: pipelines win; p2p_alpha prices the messages */
static void device(osdp_device *d, double p2p_alpha)
{
    char text[2048];
    snprintf(text, sizeof text,
             "[device]\nname = t_il\nmem_limit = 12638255104\nparam_bytes = 4\nact_bytes = 4\nranks_per_node = 2\n"
             "[all_gather]\nalpha = 1e-3\nbeta = 1e-7\n[reduce_scatter]\nalpha = 1e-3\nbeta = 1e-7\n"
             "[tp_all_reduce]\nalpha = 1e-3\nbeta = 1e-7\n[p2p]\nalpha = %g\nbeta = 1e-11\n"
             "[gamma]\nembed = 1e-10\nattn = 1e-10\nmlp = 1e-10\nhead = 1e-10\n", p2p_alpha);
    ck_assert_msg(osdp_device_parse(d, text, "t_il.ini") == OSDP_OK, "%s", osdp_error_message());
}

/* the search's options: the ranks, the global batch, micro-batch b (0: searched), peaks not verified */
static osdp_planner_options options_at(int b)
{
    osdp_planner_options o;
    osdp_planner_defaults(&o);
    o.verify = 0;
    o.geo = (osdp_step_geometry){.n_ranks = RANKS, .micro_batch = b, .pad_quantum = o.geo.pad_quantum,
                                 .prefetch = o.geo.prefetch};
    o.global_batch = GLOBAL_BATCH;
    return o;
}

typedef struct brute_best {
    double step_s;
    int tp, pp, b, V;
    long long evaluated;
} brute_best;

static void consider(brute_best *best, double step, int tp, int pp, int b, int V)
{
    best->evaluated++;
    if (best->step_s < 0 || step < best->step_s * (1 - 1e-12)) *best = (brute_best){step, tp, pp, b, V, best->evaluated};
}

/* C(n - 1, P - 1) contiguous splits of n operators into P stages, at most cap + 1 counted */
static long long splits(int n, int P, long long cap)
{
    long long c = 1;
    for (int i = 1; i <= P - 1; i++) {
        c = c * (n - P + i) / i;
        if (c > cap) return cap + 1;
    }
    return c;
}

/* every (T, P, split, b) the 3D search covers (every split up to the limit, else the balanced one), planned
 * under 1F1B; on the balanced split, every V of the range with its fit (osdp_pipe_interleave_search) */
static brute_best brute_force(const osdp_model_config *cfg, const osdp_device *dev, int v_lo, int v_hi)
{
    brute_best best = {.step_s = -1};
    for (int tp = 1; tp <= 2; tp++) {
        for (int pp = 1; pp * tp <= RANKS; pp++) {
            if ((RANKS / tp) % pp != 0) continue;
            const int D = RANKS / (tp * pp), n = 2 * cfg->n_layer + 2;
            for (int b = 1; b <= GLOBAL_BATCH / D; b++) {
                if ((GLOBAL_BATCH / D) % b != 0) continue;
                osdp_planner_options o = options_at(b);
                /* the balanced split (the pipeline planner's default) and its interleaving */
                osdp_pipe_choice c;
                osdp_status s = osdp_planner_pipeline(cfg, SEQ, dev, &o, tp, pp, NULL, OSDP_PIPE_1F1B, &c);
                ck_assert_msg(s == OSDP_OK || s == OSDP_ERR_INFEASIBLE, "%s", osdp_error_message());
                int balanced[OSDP_MAX_STAGES + 1];
                memcpy(balanced, c.geo.stage_bounds, sizeof balanced);
                if (s == OSDP_OK) {
                    if (v_lo <= 1) consider(&best, c.step_s, tp, pp, b, 1);
                    if (pp > 1 && v_hi >= 2) {
                        osdp_interleave_result il;
                        ck_assert(osdp_pipe_interleave_search(&c, dev, &o, cfg->n_layer, v_lo == v_hi ? v_lo : 0,
                                                              NULL, &il) == OSDP_OK);
                        for (int k = 1; k < il.n; k++)
                            if (il.option[k].fits && il.option[k].V >= v_lo && il.option[k].V <= v_hi)
                                consider(&best, il.option[k].timing.step_s, tp, pp, b, il.option[k].V);
                    }
                }
                osdp_pipe_choice_free(&c);
                if (v_lo >= 2 || pp == 1 || splits(n, pp, SPLIT_LIMIT) > SPLIT_LIMIT) continue;
                int bounds[OSDP_MAX_STAGES + 1];   /* every other split, 1F1B */
                for (int q = 0; q < pp; q++) bounds[q] = q;
                bounds[pp] = n;
                for (;;) {
                    if (memcmp(bounds, balanced, sizeof(int) * (size_t)(pp + 1)) != 0) {
                        s = osdp_planner_pipeline(cfg, SEQ, dev, &o, tp, pp, bounds, OSDP_PIPE_1F1B, &c);
                        ck_assert_msg(s == OSDP_OK || s == OSDP_ERR_INFEASIBLE, "%s", osdp_error_message());
                        if (s == OSDP_OK) consider(&best, c.step_s, tp, pp, b, 1);
                        osdp_pipe_choice_free(&c);
                    }
                    int j = pp - 1;
                    while (j >= 1 && bounds[j] >= n - (pp - j)) j--;
                    if (j < 1) break;
                    bounds[j]++;
                    for (int q = j + 1; q < pp; q++) bounds[q] = bounds[q - 1] + 1;
                }
            }
        }
    }
    return best;
}

static void search(const osdp_model_config *cfg, const osdp_device *dev, osdp_pipe_schedule schedule, int V,
                   osdp_3d_result *res)
{
    osdp_planner_options o = options_at(0);
    const osdp_3d_options o3 = {.schedule = schedule, .virtual_stages = V};
    ck_assert_msg(osdp_planner_3d(cfg, SEQ, dev, &o, &o3, OSDP_3D_OSDP, res) == OSDP_OK, "%s", osdp_error_message());
    ck_assert_msg(res->status == OSDP_OK, "%s", res->message);
}

/* the answer's geometry names its schedule and V, and its chunks cover the operators */
static int chosen_V(const osdp_3d_result *res)
{
    const osdp_pipe_choice *c = &res->best;
    const int V = c->geo.pipe_schedule == OSDP_PIPE_INTERLEAVED ? c->geo.virtual_stages : 1;
    ck_assert(c->plan.geo.pipe_schedule == c->geo.pipe_schedule);
    ck_assert(c->geo.stage_bounds[0] == 0 && c->geo.stage_bounds[c->geo.pp_size * V] == c->layout.n_ops);
    for (int g = 0; g < c->geo.pp_size * V; g++) ck_assert(c->geo.stage_bounds[g] < c->geo.stage_bounds[g + 1]);
    return V;
}

/* the model on the device of messages of p2p_alpha: the search with V searched into *res, and its exhaustive
 * optimum */
static brute_best searched_and_exhaustive(double p2p_alpha, osdp_model_config *cfg, osdp_device *dev,
                                          osdp_3d_result *res)
{
    model(cfg);
    device(dev, p2p_alpha);
    search(cfg, dev, OSDP_PIPE_1F1B, OSDP_3D_V_AUTO, res);
    return brute_force(cfg, dev, 1, OSDP_MAX_STAGES);
}

/* cheap messages: interleaving wins; the search's answer is the exhaustive optimum over (T, P, split, b, V) */
START_TEST(test_interleave_wins_matches_exhaustive)
{
    osdp_model_config cfg;
    osdp_device dev;
    osdp_3d_result res;
    const brute_best want = searched_and_exhaustive(1e-6, &cfg, &dev, &res);
    const int V = chosen_V(&res);
    ck_assert_msg(want.V > 1 && V == want.V && res.best.geo.pp_size == want.pp && res.best.geo.tp_size == want.tp
                  && res.best.geo.micro_batch == want.b && close_rel(res.best.step_s, want.step_s, 1e-12),
                  "3D search: T %d P %d b %d V %d step %.9g; exhaustive (%lld): T %d P %d b %d V %d step %.9g",
                  res.best.geo.tp_size, res.best.geo.pp_size, res.best.geo.micro_batch, V, res.best.step_s,
                  want.evaluated, want.tp, want.pp, want.b, want.V, want.step_s);
    /* faster than the best 1F1B pipeline; the step is the interleaved chunks' (bubble (P-1)/(VM+P-1)) */
    osdp_3d_result plain;
    search(&cfg, &dev, OSDP_PIPE_1F1B, 0, &plain);
    ck_assert(chosen_V(&plain) == 1 && plain.best.geo.pipe_schedule == OSDP_PIPE_1F1B);
    ck_assert(res.best.step_s < plain.best.step_s);
    ck_assert(res.best.timing.V == V && res.best.timing.schedule == OSDP_PIPE_INTERLEAVED);
    ck_assert(close_rel(res.best.timing.bubble_closed, osdp_pipe_bubble_chunks(res.best.geo.pp_size, V,
                                                                               res.best.geo.accum_steps), 1e-12));
    /* every stage's peak is the runtime schedule's of its chunks, within the limit */
    for (int s = 0; s < res.best.geo.pp_size; s++)
        ck_assert(res.best.stage[s].peak_bytes == res.best.stage[s].schedule_peak
                  && res.best.stage[s].peak_bytes <= dev.mem_limit);
    osdp_3d_result_free(&plain);
    osdp_3d_result_free(&res);
}
END_TEST

/* dear messages: V candidates exist but lose; V = 1, the exhaustive optimum */
START_TEST(test_interleave_loses)
{
    osdp_model_config cfg;
    osdp_device dev;
    osdp_3d_result res;
    const brute_best want = searched_and_exhaustive(2e-2, &cfg, &dev, &res);
    ck_assert_msg(want.V == 1 && chosen_V(&res) == 1 && res.best.geo.pipe_schedule == OSDP_PIPE_1F1B
                  && close_rel(res.best.step_s, want.step_s, 1e-12),
                  "3D search: P %d V %d step %.9g; exhaustive: P %d V %d step %.9g", res.best.geo.pp_size,
                  chosen_V(&res), res.best.step_s, want.pp, want.V, want.step_s);
    osdp_3d_result_free(&res);
}
END_TEST

/* a fixed schedule is kept: 1F1B and GPipe without interleaving, interleaved with its V (or V >= 2 searched)
 * even where it is slower, each the exhaustive optimum of what it allows */
START_TEST(test_fixed_schedule)
{
    osdp_model_config cfg;
    osdp_device dev;
    model(&cfg);
    device(&dev, 1e-6);
    osdp_3d_result res;
    search(&cfg, &dev, OSDP_PIPE_1F1B, 0, &res);
    ck_assert(chosen_V(&res) == 1 && res.best.geo.pipe_schedule == OSDP_PIPE_1F1B);
    brute_best want = brute_force(&cfg, &dev, 1, 1);
    ck_assert(close_rel(res.best.step_s, want.step_s, 1e-12));
    osdp_3d_result_free(&res);
    search(&cfg, &dev, OSDP_PIPE_GPIPE, 0, &res);
    ck_assert(chosen_V(&res) == 1 && (res.best.geo.pp_size == 1 || res.best.geo.pipe_schedule == OSDP_PIPE_GPIPE));
    osdp_3d_result_free(&res);
    device(&dev, 2e-2);   /* interleaving loses here, and is kept all the same */
    search(&cfg, &dev, OSDP_PIPE_INTERLEAVED, 2, &res);
    ck_assert(chosen_V(&res) == 2 && res.best.geo.pipe_schedule == OSDP_PIPE_INTERLEAVED);
    want = brute_force(&cfg, &dev, 2, 2);
    ck_assert_msg(want.V == 2 && close_rel(res.best.step_s, want.step_s, 1e-12), "V 2: %.9g, exhaustive %.9g",
                  res.best.step_s, want.step_s);
    osdp_3d_result_free(&res);
    search(&cfg, &dev, OSDP_PIPE_INTERLEAVED, 0, &res);   /* interleaved, V searched: V >= 2 */
    want = brute_force(&cfg, &dev, 2, OSDP_MAX_STAGES);
    ck_assert(chosen_V(&res) >= 2 && chosen_V(&res) == want.V && close_rel(res.best.step_s, want.step_s, 1e-12));
    osdp_3d_result_free(&res);
}
END_TEST

/* more chunks than stages: P = OSDP_MAX_STAGES stages of 2 layers, V 2 (Megatron-LM's 1T row's shape, 128 chunks
 * of one layer, past OSDP_MAX_STAGES): the cost model prices it, its closed-form bubble (P-1)/(V M + P-1) and
 * Megatron's (P-1)/(V M), every stage's peak the runtime schedule's; a V past OSDP_MAX_CHUNKS is not a candidate */
START_TEST(test_chunks_past_stages)
{
    enum { P = OSDP_MAX_STAGES, V = OSDP_MAX_CHUNKS / OSDP_MAX_STAGES, M = P };
    osdp_model_config cfg;
    char text[256];
    snprintf(text, sizeof text, "[model]\nname = t_il128\nn_layer = %d\nn_head = 4\nn_embd = 32\nvocab = 256\n"
             "ctx = 32\n", P * V);
    ck_assert_msg(osdp_model_config_parse(&cfg, text, "t_il128.ini") == OSDP_OK, "%s", osdp_error_message());
    osdp_device dev;
    device(&dev, 1e-6);
    osdp_planner_options o;
    osdp_planner_defaults(&o);
    o.verify = 0;
    o.geo = (osdp_step_geometry){.n_ranks = P, .micro_batch = 1, .pad_quantum = o.geo.pad_quantum,
                                 .prefetch = o.geo.prefetch};
    o.global_batch = M;
    osdp_pipe_choice c;
    ck_assert_msg(osdp_planner_pipeline(&cfg, SEQ, &dev, &o, 1, P, NULL, OSDP_PIPE_1F1B, &c) == OSDP_OK, "%s",
                  osdp_error_message());
    ck_assert_int_eq(c.geo.accum_steps, M);
    ck_assert(osdp_pipe_interleave_candidate(P, V, cfg.n_layer, c.layout.n_ops));
    ck_assert(!osdp_pipe_interleave_candidate(P, 2 * V, 2 * cfg.n_layer, 2 * c.layout.n_ops));
    osdp_interleave_result il;
    ck_assert_msg(osdp_pipe_interleave_search(&c, &dev, &o, cfg.n_layer, V, NULL, &il) == OSDP_OK, "%s",
                  osdp_error_message());
    ck_assert_int_eq(il.n, 2);
    const osdp_interleave_option *x = &il.option[1];
    ck_assert_msg(x->V == V && x->fits && x->timing.step_s > 0, "V %d fits %d step %g: %s", x->V, x->fits,
                  x->timing.step_s, x->why);
    ck_assert_int_eq(x->bounds[0], 0);
    ck_assert_int_eq(x->bounds[P * V], c.layout.n_ops);
    for (int g = 0; g < P * V; g++) ck_assert(x->bounds[g + 1] > x->bounds[g]);
    ck_assert(fabs(x->timing.bubble_closed - (double)(P - 1) / (V * M + P - 1)) < 1e-15);
    ck_assert(fabs(x->bubble_of_ideal - (double)(P - 1) / (V * M)) < 1e-15);
    /* half 1F1B's closed-form bubble, and a shorter step (cheap messages) */
    ck_assert(x->timing.bubble_closed < il.option[0].timing.bubble_closed);
    ck_assert_msg(x->timing.step_s < il.option[0].timing.step_s, "V %d %g vs V 1 %g", V, x->timing.step_s,
                  il.option[0].timing.step_s);
    for (int s = 0; s < P; s++) ck_assert(x->stage_peak[s] > 0);
    osdp_pipe_choice_free(&c);
}
END_TEST

static Suite *planner_3d_interleave_suite(void)
{
    const TTest *search_tests[] = {test_interleave_wins_matches_exhaustive, test_interleave_loses, test_fixed_schedule,
                                   test_chunks_past_stages, NULL};
    const osdp_check_case cases[] = {{.name = "interleave", .tests = search_tests}};
    return osdp_check_suite("planner_3d_interleave", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = planner_3d_interleave_suite};

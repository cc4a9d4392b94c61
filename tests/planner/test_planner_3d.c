/* Tests for the 3D search (osdp_planner_3d, issue 16 item 3): on a small
 * model over two emulated nodes, the search's answer against exhaustive
 * enumeration of meshes x stage splits x micro-batches x every operator's
 * DP / ZDP choice, priced by the same cost model (each stage's peak by
 * osdp_pipe_stage_peak, the step by osdp_pipe_step_time); the baselines'
 * modes, their replicated state in the peak, and OSDP never slower than
 * any of them; a pipeline's stage bounds shared by the stages of one
 * stage-cache key equal those built stage by stage. */
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
#include "osdp/plan.h"
#include "osdp/planner.h"
#include "planner/planner_pipeline.h"

#include "test_inputs.h"

#define SEQ 64
#define RANKS 4
#define GLOBAL_BATCH 8

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)); }

/* two nodes of 2 ranks; the link between them 20x slower than inside */
static void two_level_device(osdp_device *d, long long mem_limit)
{
    char text[2048];
    snprintf(text, sizeof text,
             "[device]\nname = t3d\nmem_limit = %lld\nranks_per_node = 2\n"
             "[all_gather]\nalpha = 1e-5\nbeta = 2e-10\n[reduce_scatter]\nalpha = 3e-5\nbeta = 4e-10\n"
             "[tp_all_reduce]\nalpha = 1e-5\nbeta = 3e-10\n[p2p]\nalpha = 1e-5\nbeta = 1e-10\n"
             "[internode_all_gather]\nalpha = 5e-5\nbeta = 4e-9\n[internode_reduce_scatter]\nalpha = 5e-5\nbeta = 8e-9\n"
             "[internode_p2p]\nalpha = 5e-5\nbeta = 2e-9\n"
             "[gamma]\nembed = 1e-12\nattn = 2e-12\nmlp = 3e-12\nhead = 4e-12\n",
             mem_limit);
    ck_assert_msg(osdp_device_parse(d, text, "t3d.ini") == OSDP_OK, "%s", osdp_error_message());
}

/* the tiny model, the two-node device with no memory bound (a test sets its limit) */
static void tiny_on_two_nodes(osdp_model_config *cfg, osdp_device *dev)
{
    load_config(cfg, "tiny");
    two_level_device(dev, 1LL << 40);
}

static osdp_planner_options options(void)
{
    osdp_planner_options o;
    osdp_planner_defaults(&o);
    o.geo.n_ranks = RANKS;
    o.global_batch = GLOBAL_BATCH;
    o.verify = 0;
    return o;
}

typedef struct brute_best {
    double step_s;
    osdp_step_geometry geo;   /* its mesh (tp_size, pp_size) and micro_batch */
    long long evaluated;
} brute_best;

/* recompute in the enumeration: none, every attn / mlp operator, or each either way */
typedef enum rc_mode { RC_NONE, RC_ALL, RC_EACH } rc_mode;
static rc_mode brute_rc = RC_NONE;

/* every plan (DP / ZDP per operator, unsplit, recompute as brute_rc says)
 * of one mesh, split and micro-batch; `modes` restricts them as a
 * baseline's */
static void brute_split(const osdp_layout *L, const osdp_device *lvl, int tp, int pp, int D, const int *bounds, int b,
                        int M, long long limit, osdp_mode_set modes, brute_best *best)
{
    unsigned can = 0;   /* the operators that may recompute */
    for (int i = 0; i < L->n_ops; i++) can |= (unsigned)osdp_op_can_recompute(L->op[i].type) << i;
    const int n = L->n_ops;
    osdp_plan plan;
    ck_assert(osdp_plan_alloc(&plan, n) == OSDP_OK);
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, L, lvl, &(osdp_step_geometry){.n_ranks = D, .pad_quantum = 1, .prefetch = 1},
                         OSDP_COST_PAPER, NULL);
    const osdp_cost_model *cms[OSDP_MAX_STAGES];
    const osdp_plan *plans[OSDP_MAX_STAGES];
    for (int s = 0; s < pp; s++) {
        cms[s] = &cm;
        plans[s] = &plan;
    }
    for (unsigned both = 0; both < 1u << (2 * n); both++) {
        const unsigned mask = both & ((1u << n) - 1), rc = both >> n;
        if (modes == OSDP_MODES_ALL_DP && mask != 0) continue;
        if (modes == OSDP_MODES_ALL_ZDP && mask != (1u << n) - 1) continue;
        if ((rc & ~can) || (brute_rc == RC_NONE && rc) || (brute_rc == RC_ALL && rc != can)) continue;
        for (int i = 0; i < n; i++) {
            plan.slices[i] = 1;
            plan.zdp_slices[i] = (int)(mask >> i & 1u);
            plan.recompute[i] = (int)(rc >> i & 1u);
        }
        int fits = 1;
        for (int s = 0; s < pp && fits; s++)
            fits = osdp_pipe_stage_peak(&cm, &plan, bounds, pp, s, OSDP_PIPE_1F1B, b, M, NULL) <= limit;
        best->evaluated++;
        if (!fits) continue;
        osdp_pipe_timing t;
        ck_assert(osdp_pipe_step_time(cms, plans, bounds, pp, OSDP_PIPE_1F1B, b, M, &t) == OSDP_OK);
        if (best->step_s < 0 || t.step_s < best->step_s * (1 - 1e-12)) {
            best->step_s = t.step_s;
            best->geo.tp_size = tp;
            best->geo.pp_size = pp;
            best->geo.micro_batch = b;
        }
    }
    osdp_plan_free(&plan);
}

/* the exhaustive optimum over meshes (T inside a node of 2) x splits x b x plans */
static brute_best brute_force(const osdp_model_config *cfg, const osdp_device *dev, osdp_mode_set modes, int only_flat)
{
    brute_best best = {.step_s = -1};
    for (int tp = 1; tp <= 2; tp++) {
        osdp_layout L;
        ck_assert(osdp_layout_build_tp(&L, cfg, SEQ, tp, 1) == OSDP_OK);
        for (int pp = 1; pp * tp <= RANKS; pp++) {
            if ((RANKS / tp) % pp != 0 || (only_flat && (tp > 1 || pp > 1))) continue;
            const int D = RANKS / (tp * pp), n = L.n_ops;
            osdp_device lvl;
            osdp_cost_device_for_mesh(dev, tp, D, pp, &lvl);
            int bounds[OSDP_MAX_STAGES + 1];
            for (int q = 0; q < pp; q++) bounds[q] = q;
            bounds[pp] = n;
            for (;;) {
                for (int b = 1; b <= GLOBAL_BATCH / D; b++) {
                    if ((GLOBAL_BATCH / D) % b != 0) continue;
                    brute_split(&L, &lvl, tp, pp, D, bounds, b, GLOBAL_BATCH / (D * b), dev->mem_limit, modes, &best);
                }
                int j = pp - 1;   /* the next contiguous split */
                while (j >= 1 && bounds[j] >= n - (pp - j)) j--;
                if (j < 1) break;
                bounds[j]++;
                for (int q = j + 1; q < pp; q++) bounds[q] = bounds[q - 1] + 1;
            }
        }
        osdp_layout_free(&L);
    }
    return best;
}

static void search_reducing(const osdp_model_config *cfg, const osdp_device *dev, osdp_3d_kind kind,
                            osdp_grad_reduce grad_reduce, osdp_3d_result *res)
{
    osdp_planner_options o = options();
    o.grad_reduce = grad_reduce;   /* the baselines' own override it (osdp_planner_3d) */
    osdp_3d_options o3 = {.schedule = OSDP_PIPE_1F1B};
    ck_assert_msg(osdp_planner_3d(cfg, SEQ, dev, &o, &o3, kind, res) == OSDP_OK, "%s", osdp_error_message());
}

static void search(const osdp_model_config *cfg, const osdp_device *dev, osdp_3d_kind kind, osdp_3d_result *res)
{
    osdp_planner_options o = options();
    int all[16] = {0};   /* --recompute all: every attn and mlp operator (the tiny model's 6) */
    osdp_layout L;
    ck_assert(osdp_layout_build(&L, cfg, SEQ) == OSDP_OK && L.n_ops <= 16);
    for (int i = 0; i < L.n_ops; i++) all[i] = osdp_op_can_recompute(L.op[i].type);
    osdp_layout_free(&L);
    if (brute_rc == RC_ALL) o.recompute = all;
    o.recompute_auto = brute_rc == RC_EACH;
    osdp_3d_options o3 = {.schedule = OSDP_PIPE_1F1B};
    ck_assert_msg(osdp_planner_3d(cfg, SEQ, dev, &o, &o3, kind, res) == OSDP_OK, "%s", osdp_error_message());
}

/* the largest all-DP peak of the whole model at P = T = 1 over the micro-batches (the limits below are fractions) */
static long long flat_dp_peak(const osdp_model_config *cfg, const osdp_device *dev)
{
    osdp_layout L;
    ck_assert(osdp_layout_build(&L, cfg, SEQ) == OSDP_OK);
    osdp_plan plan;
    ck_assert(osdp_plan_alloc(&plan, L.n_ops) == OSDP_OK);
    osdp_plan_fill(&plan, 0);
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, &L, dev, &(osdp_step_geometry){.n_ranks = RANKS, .pad_quantum = 1, .prefetch = 1},
                         OSDP_COST_PAPER, NULL);
    const long long peak = osdp_cost_peak(&cm, &plan, GLOBAL_BATCH / RANKS, NULL);
    osdp_plan_free(&plan);
    osdp_layout_free(&L);
    return peak;
}

/* the search's optimum = the exhaustive one, under limits from loose to tight */
START_TEST(test_3d_matches_exhaustive)
{
    osdp_model_config cfg;
    osdp_device dev;
    tiny_on_two_nodes(&cfg, &dev);
    const long long full = flat_dp_peak(&cfg, &dev);
    const double fractions[] = {4.0, 1.0, 0.7, 0.5, 0.35};
    int fitted = 0, skipped = 0;
    for (size_t f = 0; f < sizeof fractions / sizeof fractions[0]; f++) {
        two_level_device(&dev, (long long)(fractions[f] * (double)full));
        const brute_best brute = brute_force(&cfg, &dev, OSDP_MODES_ANY, 0);
        osdp_3d_result res;
        search(&cfg, &dev, OSDP_3D_OSDP, &res);
        skipped += res.candidates_bounded + res.splits_bounded;
        ck_assert_msg(brute.evaluated > 1000, "the enumeration covered %lld plans", brute.evaluated);
        if (brute.step_s < 0) {
            ck_assert_msg(res.status == OSDP_ERR_INFEASIBLE, "limit x%.2f: nothing fits, the search found PP %d TP %d",
                          fractions[f], res.best.geo.pp_size, res.best.geo.tp_size);
            osdp_3d_result_free(&res);
            continue;
        }
        fitted++;
        ck_assert_msg(res.status == OSDP_OK, "limit x%.2f: the search found nothing: %s", fractions[f], res.message);
        ck_assert_msg(close_rel(res.best.step_s, brute.step_s, 1e-9),
                      "limit x%.2f: search PP %d TP %d b %d step %.9g s, exhaustive PP %d TP %d b %d step %.9g s",
                      fractions[f], res.best.geo.pp_size, res.best.geo.tp_size, res.best.geo.micro_batch, res.best.step_s,
                      brute.geo.pp_size, brute.geo.tp_size, brute.geo.micro_batch, brute.step_s);
        for (int s = 0; s < res.best.geo.pp_size; s++)
            ck_assert(res.best.stage[s].peak_bytes <= dev.mem_limit);
        osdp_3d_result_free(&res);
    }
    ck_assert_msg(fitted >= 3, "only %d limits had a plan", fitted);
    ck_assert_msg(skipped > 0, "the bounds left no candidate nor split unplanned");   /* yet the optimum above */
}
END_TEST

/* recompute in the 3D search (issue 28 item 3): with every attn / mlp
 * operator recomputing (--recompute all), and with the choice per operator
 * (--recompute auto), the search's optimum = the exhaustive one over meshes
 * x splits x b x DP / ZDP x recompute per operator; under a limit where
 * nothing fits without recompute, recompute auto's plan recomputes */
START_TEST(test_3d_recompute_matches_exhaustive)
{
    osdp_model_config cfg;
    osdp_device dev;
    tiny_on_two_nodes(&cfg, &dev);
    const long long full = flat_dp_peak(&cfg, &dev);
    const double fractions[] = {1.0, 0.5, 0.4, 0.35, 0.3};
    const rc_mode modes[] = {RC_ALL, RC_EACH};
    int fitted = 0, only_with_recompute = 0;
    for (size_t m = 0; m < 2; m++)
        for (size_t f = 0; f < sizeof fractions / sizeof fractions[0]; f++) {
            two_level_device(&dev, (long long)(fractions[f] * (double)full));
            brute_rc = RC_NONE;
            const brute_best none = brute_force(&cfg, &dev, OSDP_MODES_ANY, 0);
            brute_rc = modes[m];
            const brute_best brute = brute_force(&cfg, &dev, OSDP_MODES_ANY, 0);
            osdp_3d_result res;
            search(&cfg, &dev, OSDP_3D_OSDP, &res);
            brute_rc = RC_NONE;
            if (brute.step_s < 0) {
                ck_assert_msg(res.status == OSDP_ERR_INFEASIBLE, "recompute %d, limit x%.2f: nothing fits, the search "
                              "found PP %d TP %d", (int)modes[m], fractions[f], res.best.geo.pp_size, res.best.geo.tp_size);
                osdp_3d_result_free(&res);
                continue;
            }
            fitted++;
            ck_assert_msg(res.status == OSDP_OK, "recompute %d, limit x%.2f: the search found nothing: %s",
                          (int)modes[m], fractions[f], res.message);
            ck_assert_msg(close_rel(res.best.step_s, brute.step_s, 1e-9), "recompute %d, limit x%.2f: search PP %d TP %d b "
                          "%d step %.9g s, exhaustive PP %d TP %d b %d step %.9g s", (int)modes[m], fractions[f],
                          res.best.geo.pp_size, res.best.geo.tp_size, res.best.geo.micro_batch, res.best.step_s,
                          brute.geo.pp_size, brute.geo.tp_size, brute.geo.micro_batch, brute.step_s);
            int rc = 0, can = 0;
            for (int i = 0; i < res.best.plan.n_ops; i++) {
                const int may = osdp_op_can_recompute(res.best.layout.op[i].type);
                can += may;
                rc += res.best.plan.recompute[i];
                ck_assert_msg(may || !res.best.plan.recompute[i], "operator %d recomputes", i);
            }
            if (modes[m] == RC_ALL) ck_assert_msg(rc == can, "--recompute all: %d of %d operators recompute", rc, can);
            if (modes[m] == RC_EACH && none.step_s < 0) {
                only_with_recompute++;
                ck_assert_msg(rc > 0, "limit x%.2f: nothing fits without recompute, yet the plan has none", fractions[f]);
            }
            for (int s = 0; s < res.best.geo.pp_size; s++) ck_assert(res.best.stage[s].peak_bytes <= dev.mem_limit);
            osdp_3d_result_free(&res);
        }
    ck_assert_msg(fitted >= 6, "only %d searches had a plan", fitted);
    ck_assert_msg(only_with_recompute >= 1, "no limit needed recompute: the test does not reach it");
}
END_TEST

/* FSDP and DDP: the flat mesh, every operator ZDP / DP; FSDP's step the
 * exhaustive all-ZDP optimum; the baselines' replicated state in their
 * peaks; 3D+OSDP never slower than any baseline */
START_TEST(test_3d_baselines)
{
    osdp_model_config cfg;
    osdp_device dev;
    tiny_on_two_nodes(&cfg, &dev);
    two_level_device(&dev, 2 * flat_dp_peak(&cfg, &dev));
    osdp_3d_result res[OSDP_3D_KINDS];
    for (int k = 0; k < OSDP_3D_KINDS; k++) {   /* 3D+OSDP chooses reduce-once per operator, as train and plan do */
        search_reducing(&cfg, &dev, (osdp_3d_kind)k, OSDP_GRAD_REDUCE_AUTO, &res[k]);
        ck_assert_msg(res[k].status == OSDP_OK, "%s: %s", osdp_3d_kind_name((osdp_3d_kind)k), res[k].message);
    }
    const brute_best fsdp = brute_force(&cfg, &dev, OSDP_MODES_ALL_ZDP, 1);
    ck_assert_msg(close_rel(res[OSDP_3D_FSDP].best.step_s, fsdp.step_s, 1e-9), "FSDP %.9g, exhaustive %.9g",
                  res[OSDP_3D_FSDP].best.step_s, fsdp.step_s);
    for (int k = OSDP_3D_FSDP; k <= OSDP_3D_DDP; k++)
        ck_assert(res[k].best.geo.pp_size == 1 && res[k].best.geo.tp_size == 1);
    for (int k = 0; k < OSDP_3D_KINDS; k++) {
        const osdp_pipe_choice *c = &res[k].best;
        const int zdp_wanted = k == OSDP_3D_FSDP ? 1 : 0;
        for (int i = 0; i < c->plan.n_ops && k != OSDP_3D_OSDP; i++)
            ck_assert_msg(c->plan.zdp_slices[i] == zdp_wanted, "%s: operator %d", osdp_3d_kind_name((osdp_3d_kind)k), i);
        ck_assert_msg(res[OSDP_3D_OSDP].best.step_s <= c->step_s * (1 + 1e-12), "3D+OSDP %.9g slower than %s %.9g",
                      res[OSDP_3D_OSDP].best.step_s, osdp_3d_kind_name((osdp_3d_kind)k), c->step_s);
        /* the replicated state: (1 - 1/D) of the state but the gradients (plain DP: its gradients are held whole
         * by reduce-once, as ZeRO-1's, whose replicated state is nothing more) per parameter */
        const int per_param = k == OSDP_3D_MEGATRON || k == OSDP_3D_DDP ? 12 + (dev.param_bytes < 4 ? dev.param_bytes : 0)
                                                                        : 0;
        const int once_wanted = k == OSDP_3D_DEEPSPEED || k == OSDP_3D_MEGATRON || k == OSDP_3D_DDP;
        for (int i = 0; i < c->plan.n_ops && k != OSDP_3D_OSDP; i++)
            ck_assert_msg(c->plan.reduce_once[i] == once_wanted, "%s: operator %d reduce-once %d",
                          osdp_3d_kind_name((osdp_3d_kind)k), i, c->plan.reduce_once[i]);
        for (int s = 0; s < c->geo.pp_size; s++) {
            long long params = 0;
            for (int i = c->stage[s].lo; i < c->stage[s].hi; i++) params += (long long)c->layout.op[i].numel;
            const long long want = c->geo.n_ranks > 1 ? params * per_param - params * per_param / c->geo.n_ranks : 0;
            ck_assert_msg(c->stage[s].replicated_bytes == want, "%s stage %d: %lld, want %lld",
                          osdp_3d_kind_name((osdp_3d_kind)k), s, c->stage[s].replicated_bytes, want);
        }
    }
    /* DDP replicates more than FSDP shards: its peak is the larger */
    ck_assert(res[OSDP_3D_DDP].best.stage[0].peak_bytes > res[OSDP_3D_FSDP].best.stage[0].peak_bytes);
    for (int k = 0; k < OSDP_3D_KINDS; k++) osdp_3d_result_free(&res[k]);
}
END_TEST

/* a fixed mesh is that mesh; one whose state cannot fit is pruned unsearched */
START_TEST(test_3d_fixed_and_pruned)
{
    osdp_model_config cfg;
    osdp_device dev;
    tiny_on_two_nodes(&cfg, &dev);
    osdp_planner_options o = options();
    osdp_3d_options o3 = {.pp = 2, .tp = 1, .schedule = OSDP_PIPE_1F1B};
    osdp_3d_result res;
    ck_assert(osdp_planner_3d(&cfg, SEQ, &dev, &o, &o3, OSDP_3D_OSDP, &res) == OSDP_OK);
    ck_assert(res.status == OSDP_OK && res.best.geo.pp_size == 2 && res.best.geo.tp_size == 1 && res.meshes == 1);
    osdp_3d_result_free(&res);
    two_level_device(&dev, 1024);   /* nothing fits: every mesh pruned by its state */
    o3.pp = o3.tp = 0;
    ck_assert(osdp_planner_3d(&cfg, SEQ, &dev, &o, &o3, OSDP_3D_OSDP, &res) == OSDP_OK);
    ck_assert(res.status == OSDP_ERR_INFEASIBLE && res.meshes_pruned == res.meshes && res.splits_planned == 0);
    ck_assert_msg(strstr(res.message, "no mesh") != NULL, "%s", res.message);
    osdp_3d_result_free(&res);
}
END_TEST

/* nothing fits, the stages searched: the search's stages skip their messages' memory searches
 * (quiet_infeasible), the message it gives is the full one of its first no-fit, searched again; a stage's search
 * quiet or not finds the same no-fit */
START_TEST(test_3d_no_fit_message)
{
    osdp_model_config cfg;
    osdp_device dev;
    tiny_on_two_nodes(&cfg, &dev);
    const long long full = flat_dp_peak(&cfg, &dev);
    osdp_planner_options o = options();
    osdp_3d_options o3 = {.pp = 2, .tp = 1, .schedule = OSDP_PIPE_1F1B};
    osdp_3d_result res;
    int searched = 0;
    for (double f = 0.5; f > 0.01 && !searched; f *= 0.8) {
        two_level_device(&dev, (long long)(f * (double)full));
        ck_assert(osdp_planner_3d(&cfg, SEQ, &dev, &o, &o3, OSDP_3D_OSDP, &res) == OSDP_OK);
        if (res.status == OSDP_ERR_INFEASIBLE && res.meshes_pruned < res.meshes && strstr(res.message, "pipeline stage")) {
            searched = 1;
            ck_assert_msg(strstr(res.message, "PP 2 x TP 1: ") == res.message
                          && strstr(res.message, "the smallest peak any plan needs is")
                          && !strstr(res.message, "not searched"), "%s", res.message);
        }
        osdp_3d_result_free(&res);
    }
    ck_assert_msg(searched, "no limit where the stages were searched and none fit");
    /* one stage, the whole model on 4 ranks: quiet or not, no plan; only the message differs */
    osdp_layout L;
    ck_assert(osdp_layout_build(&L, &cfg, SEQ) == OSDP_OK);
    osdp_planner_options q = options();
    q.global_batch = 0;
    osdp_planner_result r;
    ck_assert_int_eq(osdp_planner_plan_batch(&L, &dev, &q, 1, 1, &r), OSDP_ERR_INFEASIBLE);
    ck_assert_msg(strstr(osdp_error_message(), "the smallest peak any plan needs is"), "%s", osdp_error_message());
    osdp_planner_result_free(&r);
    q.quiet_infeasible = 1;
    ck_assert_int_eq(osdp_planner_plan_batch(&L, &dev, &q, 1, 1, &r), OSDP_ERR_INFEASIBLE);
    ck_assert_msg(strstr(osdp_error_message(), "not searched") && !strstr(osdp_error_message(), "smallest peak any"),
                  "%s", osdp_error_message());
    osdp_planner_result_free(&r);
    osdp_layout_free(&L);
}
END_TEST

/* osdp_pipe_split_bound with the layout's classes (stages of one key share one bound: under 1F1B those that
 * hold M micro-batches when M < P) equals the bound built stage by stage (classes NULL), to the bit, on GPT-2
 * small's 26 operators in 2, 4 and 8 stages, M below, at and above P, under memory limits from where no stage
 * fits to where none binds, with --split auto and --recompute auto */
START_TEST(test_3d_stage_bounds_shared)
{
    osdp_model_config cfg;
    load_config(&cfg, "gpt2_small");
    osdp_layout L;
    ck_assert(osdp_layout_build(&L, &cfg, SEQ) == OSDP_OK);
    int *classes = malloc(sizeof *classes * (size_t)L.n_ops);
    ck_assert(classes);
    osdp_stage_classes(&L, classes);
    int finite = 0, differ_by_limit = 0;
    for (int e = 20; e <= 30; e++) {   /* 1 MiB .. 1 GiB per rank */
        osdp_device dev;
        two_level_device(&dev, 1LL << e);
        osdp_planner_options o = options();
        o.geo.n_ranks = 16;
        o.split_auto = 1;
        o.recompute_auto = 1;
        o.grad_reduce = OSDP_GRAD_REDUCE_AUTO;
        for (int pp = 2; pp <= 8; pp *= 2) {
            int bounds[OSDP_MAX_STAGES + 1];
            ck_assert(osdp_pipe_balanced_split(&L, &dev, &o, 1, pp, bounds) == OSDP_OK);
            const int Ms[] = {1, 2, 3, pp - 1, pp, pp + 1, 2 * pp};
            for (int b = 1; b <= 2; b++)
                for (size_t m = 0; m < sizeof Ms / sizeof *Ms; m++) {
                    double shared, each, shared_1f1b, each_1f1b;
                    ck_assert(osdp_pipe_split_bound(&L, classes, &dev, &o, 1, pp, OSDP_PIPE_1F1B, bounds, b, Ms[m], 0,
                                                    &shared, &shared_1f1b) == OSDP_OK);
                    ck_assert(osdp_pipe_split_bound(&L, NULL, &dev, &o, 1, pp, OSDP_PIPE_1F1B, bounds, b, Ms[m], 0,
                                                    &each, &each_1f1b) == OSDP_OK);
                    ck_assert_msg(shared == each || (isinf(shared) && isinf(each)),
                                  "P %d b %d M %d limit 2^%d: shared %.17g, stage by stage %.17g", pp, b, Ms[m], e,
                                  shared, each);
                    ck_assert(shared_1f1b == each_1f1b || (isinf(shared_1f1b) && isinf(each_1f1b)));
                    finite += isfinite(each);
                    /* the memory limit moves the bound: it binds */
                    double free_bound, free_1f1b;
                    osdp_device roomy;
                    two_level_device(&roomy, 1LL << 40);
                    ck_assert(osdp_pipe_split_bound(&L, NULL, &roomy, &o, 1, pp, OSDP_PIPE_1F1B, bounds, b, Ms[m], 0,
                                                    &free_bound, &free_1f1b) == OSDP_OK);
                    differ_by_limit += isfinite(each) && each > free_bound;
                }
        }
    }
    printf("stage bounds shared: %d finite, %d above the unbounded memory's\n", finite, differ_by_limit);
    ck_assert_int_gt(finite, 20);
    ck_assert_int_gt(differ_by_limit, 10);   /* where the stages' in-flight counts change their bounds */
    free(classes);
    osdp_layout_free(&L);
}
END_TEST

/* The memory-aware bounds made only for the candidates the search reaches (issue 28 item 4): with every
 * pipeline's split the balanced one (split_enum_limit 1, as at scale), GPT-2 small on 16 ranks over two
 * nodes, --recompute auto: under limits from where little fits to where none binds, the 3D search's answer
 * is the best of every mesh x micro-batch planned on its own by the pipeline planner (no bounds; ties to
 * the smaller T, then P, then b; in that order, each wanted only if it can beat the best before it),
 * and some candidates were never given a memory-aware bound */
START_TEST(test_3d_lazy_bounds)
{
    osdp_model_config cfg;
    load_config(&cfg, "gpt2_small");
    const int N = 16, G = 32;
    int fitted = 0, lazy = 0, nothing = 0;
    const double limits_mib[] = {192, 320, 384, 640, 768, 1024, 2048};
    for (size_t l = 0; l < sizeof limits_mib / sizeof *limits_mib; l++) {
        const int e = (int)limits_mib[l];   /* (named in the messages) */
        osdp_device dev;
        two_level_device(&dev, (long long)(limits_mib[l] * 1048576));
        osdp_planner_options o = options();
        o.geo.n_ranks = N;
        o.global_batch = G;
        o.recompute_auto = 1;
        /* the reference: every candidate planned whole */
        double best = INFINITY;
        int best_tp = 0, best_pp = 0, best_b = 0;
        for (int tp = 1; tp <= 2; tp++)
            for (int pp = 1; pp <= N / tp; pp *= 2) {
                const int D = N / (tp * pp);
                if (G % D) continue;
                osdp_layout L;
                ck_assert(osdp_layout_build_tp(&L, &cfg, SEQ, tp, 1) == OSDP_OK);
                int bounds[OSDP_MAX_STAGES + 1];
                if (pp > 1) ck_assert(osdp_pipe_balanced_split(&L, &dev, &o, tp, pp, bounds) == OSDP_OK);
                for (int b = 1; b <= G / D; b++) {
                    if ((G / D) % b) continue;
                    osdp_planner_options ob = o;
                    ob.geo.micro_batch = b;
                    ob.quiet_infeasible = 1;
                    int bounded = 0;
                    osdp_pipe_choice c;
                    /* (only a step that can beat the best so far, or tie it, wanted: the stages' bounds on) */
                    const osdp_status s = osdp_planner_pipeline_cached(&cfg, SEQ, &dev, &ob, tp, pp, pp > 1 ? bounds : NULL,
                                                                       OSDP_PIPE_1F1B, NULL, NULL, NULL,
                                                                       best * (1 + 1e-9), 0, &bounded, &c);
                    ck_assert_msg(s == OSDP_OK || s == OSDP_ERR_INFEASIBLE, "%s", osdp_error_message());
                    if (s == OSDP_OK && !bounded && c.step_s < best) {
                        best = c.step_s;
                        best_tp = tp, best_pp = pp, best_b = b;
                    }
                    osdp_pipe_choice_free(&c);
                }
                osdp_layout_free(&L);
            }
        osdp_3d_options o3 = {.schedule = OSDP_PIPE_1F1B, .split_enum_limit = 1};
        osdp_3d_result res;
        ck_assert_msg(osdp_planner_3d(&cfg, SEQ, &dev, &o, &o3, OSDP_3D_OSDP, &res) == OSDP_OK, "%s", osdp_error_message());
        if (!isfinite(best)) {
            ck_assert_msg(res.status == OSDP_ERR_INFEASIBLE, "%d MiB: nothing fits, the search found PP %d TP %d", e,
                          res.best.geo.pp_size, res.best.geo.tp_size);
            ck_assert_msg(res.message[0] != '\0', "%d MiB: no message", e);
            nothing++;
            osdp_3d_result_free(&res);
            continue;
        }
        ck_assert_msg(res.status == OSDP_OK, "%d MiB: the search found nothing: %s", e, res.message);
        ck_assert_msg(res.best.step_s == best && res.best.geo.tp_size == best_tp && res.best.geo.pp_size == best_pp
                          && res.best.geo.micro_batch == best_b,
                      "%d MiB: search TP %d PP %d b %d step %.17g s, every candidate planned: TP %d PP %d b %d %.17g s", e,
                      res.best.geo.tp_size, res.best.geo.pp_size, res.best.geo.micro_batch, res.best.step_s, best_tp,
                      best_pp, best_b, best);
        ck_assert_int_le(res.aware_bounds, res.candidates);
        lazy += res.aware_bounds < res.candidates;
        fitted++;
        osdp_3d_result_free(&res);
    }
    printf("lazy bounds: %d limits with a plan, equal to every candidate planned; %d of them made fewer memory-aware "
           "bounds than candidates; %d where nothing fits\n", fitted, lazy, nothing);
    ck_assert_int_ge(fitted, 4);
    ck_assert_int_gt(lazy, 0);
}
END_TEST

/* One stage search that took minutes: GPT-2 small on TP 2 x DP 8 at 512 MiB, micro-batch 4 (one per step),
 * --recompute auto.  The plan sits at the limit (to 4 KiB) with its peak in the embedding's backward, where
 * every later activation is freed: the branch and bound at each transient bound enumerated which operators
 * keep their activations (4 794 194 knapsacks, 4 minutes of CPU, before plan_pair.c); the two-constraint
 * bound settles it in a few dozen.  The step is the exact search's of before (its printed 9 digits). */
START_TEST(test_3d_tight_stage_search)
{
    osdp_model_config cfg;
    load_config(&cfg, "gpt2_small");
    osdp_device dev;
    two_level_device(&dev, 512LL << 20);
    osdp_planner_options o = options();
    o.geo.n_ranks = 16;
    o.global_batch = 32;
    o.geo.micro_batch = 4;
    o.recompute_auto = 1;
    osdp_mesh_choice m;
    ck_assert_msg(osdp_planner_mesh(&cfg, SEQ, &dev, &o, 2, &m) == OSDP_OK, "%s", osdp_error_message());
    const osdp_planner_result *r = &m.result;
    ck_assert_int_eq(r->plan.geo.tp_size, 2);
    ck_assert_int_eq(r->plan.geo.micro_batch, 4);
    ck_assert_msg(close_rel(r->step_s, 4.32034567, 2e-9), "step %.17g s", r->step_s);
    ck_assert_int_le(r->peak_bytes, 512LL << 20);
    ck_assert_int_gt(r->peak_bytes, (512LL << 20) - (64 << 10));   /* the limit binds */
    printf("tight stage search: step %.9f s, peak %lld, %lld knapsacks, %lld nodes\n", r->step_s, r->peak_bytes,
           r->searches, r->nodes);
    ck_assert_msg(r->searches < 2000, "%lld knapsacks", r->searches);
    osdp_mesh_choice_free(&m);
}
END_TEST

/* The candidate of the least memory-aware bound is planned first, before the heap's order: Megatron-LM's
 * 145.6B on 1536 A100-40GB (--recompute auto, global batch 2304), where PP 2's enumerated splits have the
 * least step bounds, which know nothing of the memory, and fit only slowly.  Planned in the heap's order alone
 * the search planned 1445 splits in 174 s for the same answer; with that candidate first its step
 * bounds most of them out (700) */
START_TEST(test_3d_memory_aware_first)
{
    osdp_model_config cfg;
    load_config(&cfg, "megatron_145p6b");
    osdp_device dev;
    load_device(&dev, "a100_40gb");
    osdp_planner_options o;
    osdp_planner_defaults(&o);
    o.geo.n_ranks = 1536;
    o.global_batch = 2304;
    o.recompute_auto = 1;
    o.grad_reduce = OSDP_GRAD_REDUCE_AUTO;   /* plan's defaults: reduce-once searched, the lean kernels */
    cfg.attention_naive = cfg.head_naive = 0;
    o.verify = 0;
    osdp_3d_options o3 = {.schedule = OSDP_PIPE_1F1B, .virtual_stages = OSDP_3D_V_AUTO};
    osdp_3d_result res;
    ck_assert_msg(osdp_planner_3d(&cfg, 2048, &dev, &o, &o3, OSDP_3D_OSDP, &res) == OSDP_OK, "%s", osdp_error_message());
    ck_assert_msg(res.status == OSDP_OK, "%s", res.message);
    printf("memory-aware first: PP %d x TP %d b %d, step %.9f s, %d splits planned, %d memory-aware bounds\n",
           res.best.geo.pp_size, res.best.geo.tp_size, res.best.geo.micro_batch, res.best.step_s, res.splits_planned,
           res.aware_bounds);
    ck_assert_msg(close_rel(res.best.step_s, 26.6383345, 1e-8), "step %.17g s", res.best.step_s);
    ck_assert_int_eq(res.best.geo.pp_size, 48);
    ck_assert_int_eq(res.best.geo.tp_size, 4);
    ck_assert_msg(res.splits_planned <= 900, "%d splits planned", res.splits_planned);
    osdp_3d_result_free(&res);
}
END_TEST

static Suite *planner_3d_suite(void)
{
    const TTest *search[] = {test_3d_matches_exhaustive, test_3d_recompute_matches_exhaustive, test_3d_baselines,
                             test_3d_fixed_and_pruned, test_3d_no_fit_message, test_3d_stage_bounds_shared, test_3d_lazy_bounds,
                             test_3d_tight_stage_search, test_3d_memory_aware_first, NULL};
    const osdp_check_case cases[] = {{.name = "search", .tests = search}};
    return osdp_check_suite("planner_3d", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = planner_3d_suite};

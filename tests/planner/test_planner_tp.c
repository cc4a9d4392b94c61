/* Tests for the planner's tensor-parallel side (issue 14): the device
 * file's node size and [tp_all_reduce], the cost model's TP terms by hand
 * (and tp 1 bit for bit as before), the mesh in plan files, and
 * osdp_planner_mesh (plan --tp T | auto): the candidates, the choice, the
 * errors. */
#include "config.h"

#include "check_main.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/plan.h"
#include "osdp/planner.h"

#include "test_inputs.h"

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)); }

static const char *DEVICE_HEAD =
    "[device]\nname = t\nmem_limit = 8G\n"
    "[all_gather]\nalpha = 1e-5\nbeta = 2e-10\n[reduce_scatter]\nalpha = 3e-5\nbeta = 4e-10\n"
    "[gamma]\nembed = 1e-12\nattn = 2e-12\nmlp = 3e-12\nhead = 4e-12\n";

/* DEVICE_HEAD + extra, parsed */
static osdp_status parse_with(osdp_device *d, const char *extra)
{
    return parse_device_text(d, DEVICE_HEAD, extra, "tp.ini");
}

START_TEST(test_device_node_and_tp_keys)
{
    osdp_device d;
    /* absent: no node size stated, the all-reduce = reduce-scatter + all-gather */
    ck_assert_msg(parse_with(&d, "") == OSDP_OK, "%s", osdp_error_message());
    ck_assert_int_eq(d.ranks_per_node, 0);
    ck_assert(d.tp_all_reduce.alpha == 2e-5 && d.tp_all_reduce.beta == 3e-10);
    /* given */
    ck_assert_msg(parse_with(&d, "[tp_all_reduce]\nalpha = 2e-6\nbeta = 5e-12\n[device]\nranks_per_node = 4\n") == OSDP_OK,
                  "%s", osdp_error_message());
    ck_assert_int_eq(d.ranks_per_node, 4);
    ck_assert(d.tp_all_reduce.alpha == 2e-6 && d.tp_all_reduce.beta == 5e-12);
    /* written and read back */
    char tmp[] = "/tmp/osdp_test_tp_device_XXXXXX";
    int fd = mkstemp(tmp);
    ck_assert(fd >= 0);
    close(fd);
    ck_assert_msg(osdp_device_write(&d, NULL, tmp) == OSDP_OK, "%s", osdp_error_message());
    osdp_device back;
    ck_assert_msg(osdp_device_load(&back, tmp) == OSDP_OK, "%s", osdp_error_message());
    unlink(tmp);
    ck_assert_int_eq(back.ranks_per_node, 4);
    ck_assert(close_rel(back.tp_all_reduce.alpha, 2e-6, 1e-6) && close_rel(back.tp_all_reduce.beta, 5e-12, 1e-6));
    /* errors name the section and key */
    static const struct { const char *extra, *expect; } bad[] = {
        {"[device]\nranks_per_node = 0\n", "ranks_per_node = '0'"},
        {"[device]\nranks_per_node = 2.5\n", "ranks_per_node = '2.5'"},
        {"[device]\nranks_per_node = eight\n", "whole number of ranks"},
        {"[tp_all_reduce]\nalpha = 1e-6\n", "[tp_all_reduce] needs both alpha and beta (missing 'beta')"},
        {"[tp_all_reduce]\nbeta = 1e-12\n", "missing 'alpha'"},
        {"[tp_all_reduce]\nalpha = 1e-6\nbeta = 0\n", "[tp_all_reduce] beta = '0'"},
        {"[tp_all_reduce]\nalpha = -1\nbeta = 1e-12\n", "[tp_all_reduce] alpha = '-1'"},
        {"[tp_all_reduce]\ngamma = 1\n", "unknown key 'gamma' in [tp_all_reduce]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(parse_with(&d, bad[i].extra), OSDP_ERR_INPUT);
        ck_assert_msg(strstr(osdp_error_message(), bad[i].expect), "'%s': got '%s'", bad[i].extra, osdp_error_message());
    }
    /* the shipped GPU files state their node */
    static const char *const gpus[] = {"a100_40gb", "a100_80gb", "h100_80gb", "paper_8gb", "paper_16gb"};
    for (size_t i = 0; i < sizeof gpus / sizeof gpus[0]; i++) {
        load_device(&d, gpus[i]);
        ck_assert_msg(d.ranks_per_node == 8, "%s: ranks_per_node %d", gpus[i], d.ranks_per_node);
        ck_assert(d.tp_all_reduce.beta > 0);
    }
}
END_TEST

/* tiny (d 64, T 64, 4 heads) on a tensor-parallel group of 2, micro-batch 3:
 * a ring all-reduce of the residual stream S = 3 x 64 x 64 x 4 = 49152 bytes
 * takes 2 (2-1)(1e-5 + 49152/2 x 2e-10) = 2.98304e-5 s; the head's gather
 * of 3 statistics per token, (2-1)(1e-5 + 3 x 3 x 64 x 4 x 2e-10) =
 * 1.04608e-5 s. */
START_TEST(test_cost_tp_terms_by_hand)
{
    osdp_model_config cfg;
    load_config(&cfg, "tiny");
    osdp_device d;
    ck_assert(parse_with(&d, "[tp_all_reduce]\nalpha = 1e-5\nbeta = 2e-10\n") == OSDP_OK);
    osdp_layout L1, L2;
    ck_assert(osdp_layout_build(&L1, &cfg, 64) == OSDP_OK);
    ck_assert(osdp_layout_build_tp(&L2, &cfg, 64, 2, 1) == OSDP_OK);
    const int b = 3, N = 2;
    const double AR = 2.98304e-5, GATHER = 1.04608e-5;
    osdp_cost_model cm1;
    osdp_cost_model_init(&cm1, &L1, &d, &(osdp_step_geometry){.n_ranks = N, .prefetch = 1}, OSDP_COST_PAPER, NULL);
    osdp_cost_model cm2;
    osdp_cost_model_init(&cm2, &L2, &d, &cm1.geo, OSDP_COST_PAPER, NULL);
    /* embed, attn.0, mlp.0, attn.1, mlp.1, head: all-reduces per micro-step */
    const double per_op[6] = {AR, 2 * AR, 2 * AR, 2 * AR, 2 * AR, AR + GATHER};
    ck_assert_int_eq(L2.n_ops, 6);
    for (int i = 0; i < L2.n_ops; i++) {
        ck_assert_msg(close_rel(osdp_cost_tp_comm(&cm2, i, 0, b), per_op[i], 1e-12), "%s: %.9g vs %.9g", L2.op[i].name,
                      osdp_cost_tp_comm(&cm2, i, 0, b), per_op[i]);
        for (int A = 1; A <= 2; A++)
            for (int k = 0; k <= 1; k++) {
                osdp_op_time t1, t2;
                osdp_cost_op_time(&cm1, i, 1, k, b, A, &t1);
                osdp_cost_op_time(&cm2, i, 1, k, b, A, &t2);
                /* blocking: added to the operator's time, once per micro-step */
                ck_assert(close_rel(t2.tp_comm, A * per_op[i], 1e-12));
                ck_assert(close_rel(t2.total, t2.compute + t2.comm + t2.tp_comm, 1e-12));
                /* the part's compute: half the whole operator's (the embedding's nominal FLOPs aside) */
                if (L2.op[i].type != OSDP_OP_EMBED)
                    ck_assert_msg(close_rel(2 * t2.compute, t1.compute, 1e-12), "%s: %g vs %g", L2.op[i].name,
                                  2 * t2.compute, t1.compute);
                /* tp 1: no term, the total as before */
                ck_assert(t1.tp_comm == 0 && t1.total == t1.compute + t1.comm);
            }
    }
    /* recompute repeats the forward's all-reduce */
    ck_assert(close_rel(osdp_cost_tp_comm(&cm2, 1, 1, b), 3 * AR, 1e-12));
    ck_assert(close_rel(osdp_cost_tp_comm(&cm2, 2, 1, b), 3 * AR, 1e-12));
    /* overlap does not hide them */
    cm2.kind = OSDP_COST_OVERLAP;
    osdp_op_time t;
    osdp_cost_op_time(&cm2, 2, 1, 1, b, 1, &t);
    ck_assert(close_rel(t.total, fmax(t.compute, t.comm) + 2 * AR, 1e-12));
    /* a bf16 residual stream's all-reduces move bf16 (osdp/schedule.h): S = 24576 bytes,
     * 2 (2-1)(1e-5 + 24576/2 x 2e-10) = 2.49152e-5 s; the statistics' gather stays fp32 */
    osdp_step_geometry g16 = cm1.geo;
    g16.residual_dtype = OSDP_BFLOAT16;
    osdp_cost_model cm3;
    osdp_cost_model_init(&cm3, &L2, &d, &g16, OSDP_COST_PAPER, NULL);
    const double AR16 = 2.49152e-5;
    const double per_op16[6] = {AR16, 2 * AR16, 2 * AR16, 2 * AR16, 2 * AR16, AR16 + GATHER};
    for (int i = 0; i < L2.n_ops; i++)
        ck_assert_msg(close_rel(osdp_cost_tp_comm(&cm3, i, 0, b), per_op16[i], 1e-12), "bf16 %s: %.9g vs %.9g",
                      L2.op[i].name, osdp_cost_tp_comm(&cm3, i, 0, b), per_op16[i]);
    ck_assert(close_rel(osdp_cost_tp_comm(&cm3, 2, 1, b), 3 * AR16, 1e-12));
    osdp_layout_free(&L1);
    osdp_layout_free(&L2);
}
END_TEST

/* tp 1 through osdp_layout_build_tp is today's cost model bit for bit */
START_TEST(test_cost_tp1_bitwise)
{
    osdp_model_config cfg;
    load_config(&cfg, "bench_l6_d256");
    osdp_device d;
    load_device(&d, "cpu_2core");
    osdp_layout L0, L1;
    ck_assert(osdp_layout_build(&L0, &cfg, cfg.ctx) == OSDP_OK);
    ck_assert(osdp_layout_build_tp(&L1, &cfg, cfg.ctx, 1, 1) == OSDP_OK);
    osdp_cost_model a, c;
    osdp_cost_model_init(&a, &L0, &d, &(osdp_step_geometry){.n_ranks = 4, .prefetch = 1}, OSDP_COST_OVERLAP, NULL);
    osdp_cost_model_init(&c, &L1, &d, &a.geo, OSDP_COST_OVERLAP, NULL);
    for (int i = 0; i < L0.n_ops; i++)
        for (int rc = 0; rc <= 1; rc++) {
            osdp_op_time x, y;
            osdp_cost_op_time_rc(&a, i, 2, 1, rc, 3, 2, &x);
            osdp_cost_op_time_rc(&c, i, 2, 1, rc, 3, 2, &y);
            ck_assert(memcmp(&x.total, &y.total, sizeof x.total) == 0 && y.tp_comm == 0);
        }
    osdp_layout_free(&L0);
    osdp_layout_free(&L1);
}
END_TEST

START_TEST(test_plan_file_tp)
{
    osdp_layout L;
    load_layout(&L, "tiny", 0);
    osdp_plan p, q, c;
    ck_assert_msg(osdp_plan_parse(&p, &L, "tp = 2\ndefault = zdp\nmlp.0 = 1/2\n", "a.plan") == OSDP_OK, "%s",
                  osdp_error_message());
    ck_assert_int_eq(p.geo.tp_size, 2);
    /* round trip through the file form */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    osdp_plan_write(&p, &L, f);
    fclose(f);
    ck_assert_msg(strstr(text, "\ntp = 2"), "%s", text);
    ck_assert_msg(osdp_plan_parse(&q, &L, text, "written") == OSDP_OK, "%s", osdp_error_message());
    free(text);
    ck_assert_int_eq(q.geo.tp_size, 2);
    ck_assert(osdp_plan_hash(&q) == osdp_plan_hash(&p));
    ck_assert_int_eq(q.slices[2], 2);
    ck_assert_int_eq(q.zdp_slices[2], 1);
    ck_assert(osdp_plan_copy(&c, &p) == OSDP_OK);
    ck_assert_int_eq(c.geo.tp_size, 2);
    /* the hash tells the mesh apart; no tp or tp 1 hashes as before */
    unsigned long long h2 = osdp_plan_hash(&c);
    c.geo.tp_size = 0;
    unsigned long long h0 = osdp_plan_hash(&c);
    c.geo.tp_size = 1;
    ck_assert(h2 != h0 && osdp_plan_hash(&c) == h0);
    /* a plan for another tp: both named */
    ck_assert_int_eq(osdp_plan_check_tp(&p, 4, "a.plan"), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "a.plan") && strstr(osdp_error_message(), "tp = 2")
                  && strstr(osdp_error_message(), "--tp 4"), "%s", osdp_error_message());
    ck_assert_int_eq(osdp_plan_check_tp(&p, 2, "a.plan"), OSDP_OK);
    ck_assert_int_eq(osdp_plan_check_tp(&c, 1, "a.plan"), OSDP_OK);
    c.geo.tp_size = 0;   /* not stated: any mesh */
    ck_assert_int_eq(osdp_plan_check_tp(&c, 4, "a.plan"), OSDP_OK);
    osdp_plan_free(&p);
    osdp_plan_free(&q);
    osdp_plan_free(&c);
    /* bad values */
    static const char *const bad[] = {"tp = 0\ndefault = dp\n", "tp = two\ndefault = dp\n", "tp = 2\ntp = 2\ndefault = dp\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(osdp_plan_parse(&p, &L, bad[i], "bad.plan"), OSDP_ERR_INPUT);
        ck_assert_msg(strstr(osdp_error_message(), "bad.plan:") && strstr(osdp_error_message(), "tp"), "%s",
                      osdp_error_message());
    }
    osdp_layout_free(&L);
}
END_TEST

/* a CPU-like device: tensor-parallel all-reduces at `tp_beta` s/B */
static osdp_device mesh_device(double tp_beta, int ranks_per_node)
{
    osdp_device d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "mesh");
    d.mem_limit = 1LL << 30;
    d.param_bytes = d.grad_bytes = d.act_bytes = 4;
    d.ranks_per_node = ranks_per_node;
    d.all_gather = (osdp_collective_cost){.alpha = 2e-5, .beta = 1e-9};
    d.reduce_scatter = (osdp_collective_cost){.alpha = 3e-5, .beta = 1.5e-9};
    d.tp_all_reduce = (osdp_collective_cost){.alpha = 1e-6, .beta = tp_beta};
    for (int t = 0; t < OSDP_N_OP_TYPES; t++) d.gamma[t] = (1 + 0.3 * t) * 2e-11;
    return d;
}

/* --tp auto: every divisor of N planned on its own layout; the chosen one
 * has the most samples/s of those that fit; each candidate's figures are
 * what the planner gives on that mesh */
static int check_auto(const osdp_model_config *cfg, const osdp_device *d, int N, int G)
{
    osdp_planner_options o;
    osdp_planner_defaults(&o);
    o.geo.n_ranks = N;
    o.global_batch = G;
    osdp_mesh_choice m;
    ck_assert_msg(osdp_planner_mesh(cfg, cfg->ctx, d, &o, OSDP_TP_AUTO, &m) == OSDP_OK, "%s", osdp_error_message());
    int divisors = 0;
    for (int t = 1; t <= N; t++) divisors += N % t == 0;
    ck_assert_int_eq(m.n_candidates, divisors);
    ck_assert(m.best >= 0);
    const osdp_tp_candidate *best = &m.cand[m.best];
    for (int c = 0; c < m.n_candidates; c++) {
        const osdp_tp_candidate *k = &m.cand[c];
        ck_assert_int_eq(k->geo.tp_size * k->geo.n_ranks, N);
        if (k->excluded[0] || k->status != OSDP_OK) continue;
        ck_assert(best->samples_per_s >= k->samples_per_s);
        ck_assert(k->geo.micro_batch * k->geo.accum_steps * k->geo.n_ranks == G);
        osdp_layout L;
        ck_assert(osdp_layout_build_tp(&L, cfg, cfg->ctx, k->geo.tp_size, 1) == OSDP_OK);
        osdp_planner_options per = o;
        per.geo.n_ranks = k->geo.n_ranks;
        osdp_planner_result r;
        ck_assert(osdp_planner_run(&L, d, &per, &r) == OSDP_OK);
        ck_assert(r.step_s == k->step_s && r.peak_bytes == k->peak_bytes);
        osdp_planner_result_free(&r);
        osdp_layout_free(&L);
    }
    ck_assert_int_eq(m.result.plan.geo.tp_size, best->geo.tp_size);
    ck_assert_int_eq(m.layout.tp_size, best->geo.tp_size);
    ck_assert(m.result.step_s == best->step_s);
    int chosen = best->geo.tp_size;
    osdp_mesh_choice_free(&m);
    return chosen;
}

START_TEST(test_mesh_auto_picks_best)
{
    osdp_model_config cfg;
    load_config(&cfg, "bench_l6_d256");   /* 8 heads */
    /* all-reduces inside the node nearly free: the data-parallel traffic
     * shrinks with T, so the largest T wins; dear: T = 1 wins */
    osdp_device cheap = mesh_device(1e-15, 0), dear = mesh_device(1e-7, 0);
    int t_cheap = check_auto(&cfg, &cheap, 4, 32), t_dear = check_auto(&cfg, &dear, 4, 32);
    ck_assert_msg(t_cheap > 1 && t_dear == 1, "cheap TP chose %d, dear TP %d", t_cheap, t_dear);
    /* the node bounds T: ranks_per_node 2 excludes 4 */
    osdp_device node2 = mesh_device(1e-15, 2);
    osdp_planner_options o;
    osdp_planner_defaults(&o);
    o.geo.n_ranks = 4;
    o.global_batch = 32;
    osdp_mesh_choice m;
    ck_assert(osdp_planner_mesh(&cfg, cfg.ctx, &node2, &o, OSDP_TP_AUTO, &m) == OSDP_OK);
    ck_assert_int_eq(m.n_candidates, 3);
    ck_assert_msg(strstr(m.cand[2].excluded, "--tp 4 exceeds the node size of 2 ranks"), "%s", m.cand[2].excluded);
    ck_assert_int_eq(m.cand[m.best].geo.tp_size, 2);
    osdp_mesh_choice_free(&m);
}
END_TEST

START_TEST(test_mesh_errors)
{
    osdp_model_config cfg;
    load_config(&cfg, "bench_l6_d256");   /* 8 heads */
    osdp_device d = mesh_device(1e-12, 8);
    osdp_planner_options o;
    osdp_planner_defaults(&o);
    osdp_mesh_choice m;
    osdp_device flat = mesh_device(1e-12, 0);   /* no node stated: T bounded by the heads alone */
    static const struct { int ranks, tp, node; const char *expect; } bad[] = {
        {8, 3, 8, "--tp 3 does not divide the 8 ranks"},
        {12, 3, 0, "--tp 3 does not divide the model's 8 attention heads"},
        {16, 16, 8, "--tp 16 exceeds the node size of 8 ranks (ranks_per_node of device mesh)"},
        /* 3 consecutive ranks of 24 on nodes of 8: ranks 6..8 straddle two nodes */
        {24, 3, 8, "--tp 3 does not divide the node size of 8 ranks (ranks_per_node of device mesh)"},
        {4, -1, 8, "--tp -1: the tensor-parallel degree must be at least 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o.geo.n_ranks = bad[i].ranks;
        ck_assert_int_eq(osdp_planner_mesh(&cfg, cfg.ctx, bad[i].node ? &d : &flat, &o, bad[i].tp, &m), OSDP_ERR_INPUT);
        ck_assert_msg(strstr(osdp_error_message(), bad[i].expect), "got '%s'", osdp_error_message());
        osdp_mesh_choice_free(&m);
    }
    /* an explicit T plans that mesh */
    o.geo.n_ranks = 8;
    ck_assert_msg(osdp_planner_mesh(&cfg, cfg.ctx, &d, &o, 4, &m) == OSDP_OK, "%s", osdp_error_message());
    ck_assert(m.n_candidates == 1 && m.best == 0 && m.cand[0].geo.n_ranks == 2 && m.result.plan.geo.tp_size == 4);
    osdp_mesh_choice_free(&m);
    /* nothing fits: the scheduler's message */
    d.mem_limit = 1 << 20;
    ck_assert_int_eq(osdp_planner_mesh(&cfg, cfg.ctx, &d, &o, OSDP_TP_AUTO, &m), OSDP_ERR_INFEASIBLE);
    ck_assert_msg(strstr(osdp_error_message(), "no plan fits"), "%s", osdp_error_message());
    ck_assert_int_eq(m.best, -1);
    osdp_mesh_choice_free(&m);
}
END_TEST

/* A given T whose groups would straddle nodes is refused by every search that takes it: one stage (above),
 * --pp P and --pp auto, with the same message; the predicate is T dividing the node */
START_TEST(test_tp_straddling_nodes_refused)
{
    ck_assert(!osdp_cost_tp_spans_nodes(8, 1) && !osdp_cost_tp_spans_nodes(8, 2) && !osdp_cost_tp_spans_nodes(8, 8));
    ck_assert(osdp_cost_tp_spans_nodes(8, 3) && osdp_cost_tp_spans_nodes(8, 16) && osdp_cost_tp_spans_nodes(6, 4));
    ck_assert(!osdp_cost_tp_spans_nodes(0, 16));   /* no node stated: no bound */
    osdp_model_config cfg;
    load_config(&cfg, "bench_l6_d256");   /* 8 heads */
    osdp_device d = mesh_device(1e-12, 4);
    osdp_planner_options o;
    osdp_planner_defaults(&o);
    o.geo.n_ranks = 16;
    o.global_batch = 16;
    char why[256];
    ck_assert(osdp_planner_tp_node_why(8, &d, why, sizeof why));
    ck_assert_str_eq(why, "--tp 8 exceeds the node size of 4 ranks (ranks_per_node of device mesh): a tensor-parallel "
                          "group must sit inside one node");
    ck_assert(!osdp_planner_tp_node_why(4, &d, why, sizeof why) && why[0] == '\0');
    osdp_pipe_choice pc;
    ck_assert_int_eq(osdp_planner_pipeline(&cfg, cfg.ctx, &d, &o, 8, 2, NULL, OSDP_PIPE_1F1B, &pc), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "--tp 8 exceeds the node size of 4 ranks"), "%s", osdp_error_message());
    osdp_pipe_choice_free(&pc);
    /* T = 4 fits the node: planned */
    ck_assert_msg(osdp_planner_pipeline(&cfg, cfg.ctx, &d, &o, 4, 2, NULL, OSDP_PIPE_1F1B, &pc) == OSDP_OK, "%s",
                  osdp_error_message());
    ck_assert_int_eq(pc.geo.tp_size, 4);
    osdp_pipe_choice_free(&pc);
    osdp_3d_options o3 = {.pp = 0, .tp = 8, .schedule = OSDP_PIPE_1F1B};
    osdp_3d_result res;
    ck_assert_int_eq(osdp_planner_3d(&cfg, cfg.ctx, &d, &o, &o3, OSDP_3D_OSDP, &res), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "--tp 8 exceeds the node size of 4 ranks"), "%s", osdp_error_message());
    osdp_3d_result_free(&res);
    o3.tp = 3;   /* not a divisor of the 16 ranks */
    ck_assert_int_eq(osdp_planner_3d(&cfg, cfg.ctx, &d, &o, &o3, OSDP_3D_OSDP, &res), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "--tp 3 does not divide the 16 ranks"), "%s", osdp_error_message());
    osdp_3d_result_free(&res);
}
END_TEST

static Suite *planner_tp_suite(void)
{
    const TTest *device[] = {test_device_node_and_tp_keys, NULL};
    const TTest *cost[] = {test_cost_tp_terms_by_hand, test_cost_tp1_bitwise, NULL};
    const TTest *plan[] = {test_plan_file_tp, NULL};
    const TTest *mesh[] = {test_mesh_auto_picks_best, test_mesh_errors, test_tp_straddling_nodes_refused, NULL};
    const osdp_check_case cases[] = {
        {.name = "device", .tests = device}, {.name = "cost_model", .tests = cost},
        {.name = "plan_file", .tests = plan}, {.name = "mesh", .tests = mesh},
    };
    return osdp_check_suite("planner_tp", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = planner_tp_suite};

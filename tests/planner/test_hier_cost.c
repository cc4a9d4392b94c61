/* Tests for the cost model's hierarchical slices (plan mode h; osdp/cost_model.h's
 * osdp_cost_hierarchy): the closed-form peak equals the schedule's
 * evaluation to the byte on varied plans with hierarchical operators, the
 * two levels are priced by their own figures (one node: exactly ZDP's
 * time), a flat slice on a group that spans nodes is reduced node-first
 * (in-node RS + cross RS), and a mesh offers the mode only when its data
 * group spans nodes of a two-level device; the step's scalar all-reduce
 * at each mesh axis's level. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/plan.h"
#include "osdp/planner.h"
#include "osdp/schedule.h"

#include "check_main.h"
#include "test_inputs.h"

/* plan r's mode of operator i, spread over DP, ZDP, h and k of g in {2, 4}
 * (the embedding unsplit; a tied head's embedding DP), recompute on every
 * other block: every combination of neighbours' modes comes up over r */
static void varied_plan(const osdp_layout *L, int r, osdp_plan *p)
{
    for (int i = 0; i < L->n_ops; i++) {
        const unsigned v = (unsigned)(r * 7 + i * 3 + r / 4 * i);
        const unsigned mode = v % 4;
        const int g = mode == 3 && osdp_op_can_split(&L->op[i]) ? 2 << (v / 4 % 2) : 1;   /* not embed, a fused head */
        p->slices[i] = g;
        p->zdp_slices[i] = mode == 0 ? 0 : g == 1 ? 1 : (int)(v / 8 % (unsigned)(g + 1));
        p->hierarchical[i] = mode == 2;
        if (i == 0 && L->cfg.tied_head) p->zdp_slices[i] = p->hierarchical[i] = 0;   /* the head reads its wte */
        p->recompute[i] = osdp_op_can_recompute(L->op[i].type) && (v / 2) % 2;
    }
}

START_TEST(test_peak_equals_schedule)
{
    const char *models[] = {"tests/inputs/t_small.ini", "tests/inputs/t_ic.ini"};
    const int meshes[][2] = {{4, 2}, {8, 2}, {8, 4}, {4, 4}};   /* N, R */
    int checked = 0, with_h = 0;
    for (int mi = 0; mi < 2; mi++) {
        osdp_layout L;
        load_layout(&L, models[mi], 0);
        for (int r = 0; r < 40; r++) {
            const int N = meshes[r % 4][0], R = meshes[r % 4][1], quantum = r % 3 ? 1 : 64, prefetch = r % 2;
            const osdp_dtype weights = r % 5 ? OSDP_FLOAT32 : OSDP_BFLOAT16;
            const int b = 1 + r % 3;
            osdp_plan plan;
            ck_assert(osdp_plan_alloc(&plan, L.n_ops) == OSDP_OK);
            varied_plan(&L, r, &plan);
            with_h += osdp_plan_has_hierarchical(&plan);
            osdp_schedule_options so = {.geo.n_ranks = N, .geo.node_ranks = R, .geo.micro_batch = b, .geo.accum_steps = 2,
                                        .geo.prefetch = prefetch, .geo.weight_dtype = weights, .geo.pad_quantum = quantum};
            osdp_memory_prediction pred;
            ck_assert_msg(osdp_schedule_predict(&L, &plan, &so, &pred) == OSDP_OK, "%s", osdp_error_message());
            const osdp_device dev = {.param_bytes = (int)osdp_dtype_size(weights), .grad_bytes = 4, .act_bytes = 4};
            const osdp_cost_hierarchy hier = {.node_ranks = R};
            osdp_cost_model cm;
            osdp_cost_model_init(&cm, &L, &dev, &(osdp_step_geometry){.n_ranks = N, .pad_quantum = quantum,
                                                                      .prefetch = prefetch}, OSDP_COST_PAPER, &hier);
            ck_assert_msg(osdp_cost_peak(&cm, &plan, b, NULL) == (long long)pred.peak_total,
                          "%s N=%d R=%d b=%d prefetch %d: closed form %lld, schedule %zu", models[mi], N, R, b, prefetch,
                          osdp_cost_peak(&cm, &plan, b, NULL), pred.peak_total);
            osdp_plan_free(&plan);
            checked++;
        }
        osdp_layout_free(&L);
    }
    ck_assert_int_eq(checked, 80);
    ck_assert_int_ge(with_h, 40);   /* most plans have a hierarchical operator (54 of 80) */
}
END_TEST

/* a device whose in-node and cross-node figures differ */
static osdp_device two_level_device(void)
{
    osdp_device d;
    char path[4096];
    snprintf(path, sizeof path, "%s/input/devices/a100_40gb.ini", src_dir());
    ck_assert_msg(osdp_device_load(&d, path) == OSDP_OK, "%s", osdp_error_message());
    osdp_device_set_link(&d, 4, &(osdp_collective_cost){.alpha = 2e-5, .beta = 1.0 / 12.5e9});
    return d;
}

START_TEST(test_time_per_level)
{
    osdp_layout L;
    load_layout(&L, "tests/inputs/t_ic.ini", 0);
    const osdp_device d = two_level_device();
    const int N = 8, b = 2, A = 3;
    /* one node (R = N, the levels the flat device's): exactly ZDP's time */
    osdp_device one_node = d;
    one_node.ranks_per_node = N;
    const osdp_cost_hierarchy one = {.node_ranks = N, .node_all_gather = d.all_gather,
                                     .node_reduce_scatter = d.reduce_scatter, .cross_all_gather = d.internode.all_gather,
                                     .cross_reduce_scatter = d.internode.reduce_scatter};
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, &L, &one_node, &(osdp_step_geometry){.n_ranks = N, .prefetch = 1}, OSDP_COST_PAPER, &one);
    for (int i = 0; i < L.n_ops; i++)
        for (int rc = 0; rc <= osdp_op_can_recompute(L.op[i].type); rc++) {
            osdp_op_time h, z;
            osdp_cost_op_time_hier(&cm, i, rc, b, A, &h);
            osdp_cost_op_time_rc(&cm, i, 1, 1, rc, b, A, &z);
            ck_assert_msg(h.comm == z.comm && h.compute == z.compute && h.total == z.total,
                          "op %d rc %d: one node's h %g s, zdp %g s", i, rc, h.total, z.total);
        }
    /* 2 nodes of 4: the closed form, each level with its own figures */
    const osdp_cost_hierarchy two = {.node_ranks = 4, .node_all_gather = d.all_gather,
                                     .node_reduce_scatter = d.reduce_scatter, .cross_all_gather = d.internode.all_gather,
                                     .cross_reduce_scatter = d.internode.reduce_scatter};
    cm.hier = &two;
    cm.dev = &d;
    const int op = 1;
    const double p = (double)osdp_cost_slice_numel(&cm, op, 1), S = p * d.param_bytes, G = p * d.grad_bytes, H = G / 4;
    const double ag = 3 * (d.all_gather.alpha + S / 4 * d.all_gather.beta);
    const double rs = 3 * (d.reduce_scatter.alpha + G / 4 * d.reduce_scatter.beta);
    const double cross = 1 * (d.internode.reduce_scatter.alpha + H / 2 * d.internode.reduce_scatter.beta)
                       + 1 * (d.internode.all_gather.alpha + H / 2 * d.internode.all_gather.beta);
    osdp_op_time h;
    osdp_cost_op_time_hier(&cm, op, 0, b, A, &h);
    const double want = 2.0 * A * ag + A * (rs + cross);
    ck_assert_msg(h.comm > 0.999999 * want && h.comm < 1.000001 * want, "h comm %g s, closed form %g s", h.comm, want);
    /* the slow link carries only the in-node shard's all-reduce: cheaper than a flat ZDP over the link */
    osdp_device over_link = d;
    osdp_cost_device_for_mesh(&d, 1, N, 1, &over_link);
    osdp_cost_model flat;
    osdp_cost_model_init(&flat, &L, &over_link, &(osdp_step_geometry){.n_ranks = N, .prefetch = 1}, OSDP_COST_PAPER, NULL);
    osdp_op_time z;
    osdp_cost_op_time_rc(&flat, op, 1, 1, 0, b, A, &z);
    ck_assert_msg(h.comm < z.comm, "h %g s should beat zdp over the link %g s", h.comm, z.comm);
    osdp_layout_free(&L);
}
END_TEST

/* A flat slice on a data group that spans nodes of equal shares is reduced
 * node-first: its reduce-scatter costs the in-node one over R plus the
 * cross-node one over the nodes of G / R, on the device as read and as
 * osdp_cost_device_for_mesh gives it (which keeps the in-node reduce-scatter
 * figures, the all-gather at the link's); on unequal nodes one flat ring
 * over the link, as before. */
START_TEST(test_flat_slice_node_first)
{
    osdp_layout L;
    load_layout(&L, "tests/inputs/t_ic.ini", 0);
    const osdp_device d = two_level_device();   /* 4 ranks per node */
    const int N = 8, b = 2, A = 3, op = 1;
    osdp_device level;
    osdp_cost_device_for_mesh(&d, 1, N, 1, &level);
    ck_assert(level.reduce_scatter.beta == d.reduce_scatter.beta);
    ck_assert(level.all_gather.beta == d.internode.all_gather.beta);
    const double p = (double)osdp_padded_numel_quantum(L.op[op].numel, N, 1);
    const double S = p * d.param_bytes, G = p * d.grad_bytes;
    const double ag = 7 * (d.internode.all_gather.alpha + S / 8 * d.internode.all_gather.beta);
    const double rs = 3 * (d.reduce_scatter.alpha + G / 4 * d.reduce_scatter.beta)
                    + 1 * (d.internode.reduce_scatter.alpha + G / 4 / 2 * d.internode.reduce_scatter.beta);
    for (int k = 0; k <= 1; k++) {   /* DP: one gather per step; ZDP: two per micro-step */
        osdp_op_time t, as_read;
        osdp_cost_model cm;
        osdp_cost_model_init(&cm, &L, &level, &(osdp_step_geometry){.n_ranks = N}, OSDP_COST_PAPER, NULL);
        osdp_cost_op_time(&cm, op, 1, k, b, A, &t);
        const double want = (k ? 2 * A : 1) * ag + A * rs;
        ck_assert_msg(fabs(t.comm - want) <= 1e-12 * want, "k %d: comm %.12g s, in-node RS + cross RS %.12g s", k,
                      t.comm, want);
        osdp_cost_model read;
        osdp_cost_model_init(&read, &L, &d, &(osdp_step_geometry){.n_ranks = N}, OSDP_COST_PAPER, NULL);
        osdp_cost_op_time(&read, op, 1, k, b, A, &as_read);   /* the same reduce-scatter, the in-node all-gather */
        const double want_read = (k ? 2 * A : 1) * 7 * (d.all_gather.alpha + S / 8 * d.all_gather.beta) + A * rs;
        ck_assert_msg(fabs(as_read.comm - want_read) <= 1e-12 * want_read, "k %d as read: %.12g s, %.12g s", k, as_read.comm,
                      want_read);
    }
    /* 6 ranks on nodes of 4: 4 and 2, unequal: the flat ring over the link */
    osdp_cost_device_for_mesh(&d, 1, 6, 1, &level);
    ck_assert(level.reduce_scatter.beta == d.internode.reduce_scatter.beta);
    osdp_cost_model six;
    osdp_cost_model_init(&six, &L, &level, &(osdp_step_geometry){.n_ranks = 6}, OSDP_COST_PAPER, NULL);
    osdp_op_time t;
    osdp_cost_op_time(&six, op, 1, 0, b, 1, &t);
    const double p6 = (double)osdp_padded_numel_quantum(L.op[op].numel, 6, 1) / 6;   /* a ring step's elements */
    const osdp_collective_cost ag6 = d.internode.all_gather, rs6 = d.internode.reduce_scatter;
    const double flat = 5 * (ag6.alpha + p6 * d.param_bytes * ag6.beta) + 5 * (rs6.alpha + p6 * d.grad_bytes * rs6.beta);
    ck_assert_msg(fabs(t.comm - flat) <= 1e-12 * flat, "unequal nodes: %.12g s, flat %.12g s", t.comm, flat);
    osdp_layout_free(&L);
}
END_TEST

START_TEST(test_hierarchy_for_mesh)
{
    const osdp_device d = two_level_device();   /* 4 ranks per node */
    osdp_cost_hierarchy h;
    ck_assert_int_eq(osdp_cost_hierarchy_for_mesh(&d, 1, 8, 1, &h), 1);
    ck_assert_int_eq(h.node_ranks, 4);
    ck_assert(h.node_all_gather.beta == d.all_gather.beta && h.cross_all_gather.beta == d.internode.all_gather.beta);
    ck_assert_int_eq(osdp_cost_hierarchy_for_mesh(&d, 2, 8, 1, &h), 1);   /* tp 2: 2 data ranks per node */
    ck_assert_int_eq(h.node_ranks, 2);
    ck_assert_int_eq(osdp_cost_hierarchy_for_mesh(&d, 1, 4, 2, &h), 0);   /* each stage's group on one node */
    ck_assert_int_eq(osdp_cost_hierarchy_for_mesh(&d, 1, 6, 1, &h), 0);   /* nodes of unequal shares */
    osdp_device flat = d;
    osdp_device_default_internode(&flat);
    ck_assert_int_eq(osdp_cost_hierarchy_for_mesh(&flat, 1, 8, 1, &h), 0);   /* one level */
}
END_TEST

/* the step's scalar all-reduce (16 bytes) over each mesh axis at its
 * group's level: nothing on one rank; in-node figures for a group inside
 * a node, the link's for one that crosses, [tp_all_reduce]'s for the
 * tensor group; the same on the device as read and as
 * osdp_cost_device_for_mesh gives it; and osdp_cost_step_time adds it to
 * sum T_i */
static double ring_all_reduce(const osdp_collective_cost *rs, const osdp_collective_cost *ag, int n)
{
    return (n - 1) * (rs->alpha + ag->alpha + 16.0 / n * (rs->beta + ag->beta)) + (rs->call + ag->call) / 2;
}

START_TEST(test_step_sync_per_level)
{
    osdp_device d = two_level_device();   /* 4 ranks per node */
    d.internode.all_gather.call = 3e-6;
    d.internode.reduce_scatter.call = 5e-6;
    ck_assert(osdp_cost_step_sync_time(&d, 1, 1, 1) == 0);
    const double in_node = ring_all_reduce(&d.reduce_scatter, &d.all_gather, 4);
    const double across = ring_all_reduce(&d.internode.reduce_scatter, &d.internode.all_gather, 8);
    ck_assert(fabs(osdp_cost_step_sync_time(&d, 1, 4, 1) - in_node) <= 1e-15);
    ck_assert(fabs(osdp_cost_step_sync_time(&d, 1, 8, 1) - across) <= 1e-15 && across > 2 * in_node);
    /* TP 2 x DP 2 x PP 2: the tensor and data groups inside a node, the pipeline (ranks r and r + 4) across */
    const double mesh = ring_all_reduce(&d.tp_all_reduce, &d.tp_all_reduce, 2)
                      + ring_all_reduce(&d.reduce_scatter, &d.all_gather, 2)
                      + ring_all_reduce(&d.internode.reduce_scatter, &d.internode.all_gather, 2);
    ck_assert(fabs(osdp_cost_step_sync_time(&d, 2, 2, 2) - mesh) <= 1e-15);
    osdp_device level;
    osdp_cost_device_for_mesh(&d, 1, 8, 1, &level);
    ck_assert(osdp_cost_step_sync_time(&level, 1, 8, 1) == osdp_cost_step_sync_time(&d, 1, 8, 1));
    osdp_layout L;
    load_layout(&L, "tests/inputs/t_ic.ini", 0);
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, &L, &level, &(osdp_step_geometry){.n_ranks = 8, .prefetch = 1}, OSDP_COST_OVERLAP, NULL);
    double ops = 0;
    for (int i = 0; i < L.n_ops; i++) {
        osdp_op_time t;
        osdp_cost_plan_op_time(&cm, &p, i, 2, 1, &t);
        ops += t.total;
    }
    const double step = osdp_cost_step_time(&cm, &p, 2, 1);
    ck_assert_msg(fabs(step - (ops + across)) <= 1e-12 * step, "step %.12g s, ops %.12g s + sync %.12g s", step, ops,
                  across);
    osdp_plan_free(&p);
    osdp_layout_free(&L);
}
END_TEST

/* The exact search (and the DFS) with hierarchical slices offered returns
 * the optimum of its own cost model: every plan of DP / ZDP / h per
 * operator enumerated, at memory limits across the range of their peaks. */
START_TEST(test_search_against_brute_force)
{
    osdp_layout L;
    load_layout(&L, "tests/inputs/t_small.ini", 0);
    osdp_device d;
    memset(&d, 0, sizeof d);
    d.param_bytes = d.grad_bytes = d.act_bytes = 4;
    d.all_gather = (osdp_collective_cost){.alpha = 2e-4, .beta = 1e-8};      /* the data group's level: across the nodes */
    d.reduce_scatter = (osdp_collective_cost){.alpha = 3e-4, .beta = 1.5e-8};
    for (int t = 0; t < OSDP_N_OP_TYPES; t++) d.gamma[t] = (1 + 0.3 * t) * 2e-11;
    const osdp_cost_hierarchy hier = {.node_ranks = 2, .node_all_gather = {2e-6, 1e-10}, .node_reduce_scatter = {3e-6, 1.5e-10},
                                      .cross_all_gather = d.all_gather, .cross_reduce_scatter = d.reduce_scatter};
    const int N = 4, b = 2, n = L.n_ops;
    int plans = 1;
    for (int i = 0; i < n; i++) plans *= 3;
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, n) == OSDP_OK);
    double *time = malloc(sizeof *time * (size_t)plans);
    long long *peak = malloc(sizeof *peak * (size_t)plans), lo = -1, hi = -1;
    ck_assert(time && peak);
    for (int pf = 0; pf <= 1; pf++) {
        osdp_cost_model cm;
        osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = N, .prefetch = pf}, OSDP_COST_PAPER, &hier);
        for (int c = 0; c < plans; c++) {
            for (int i = 0, rest = c; i < n; i++, rest /= 3) {   /* digit 0 DP, 1 ZDP, 2 h */
                p.zdp_slices[i] = rest % 3 > 0;
                p.hierarchical[i] = rest % 3 == 2;
            }
            time[c] = osdp_cost_step_time(&cm, &p, b, 1);
            peak[c] = osdp_cost_peak(&cm, &p, b, NULL);
            lo = lo < 0 || peak[c] < lo ? peak[c] : lo;
            hi = peak[c] > hi ? peak[c] : hi;
        }
        int chose_h = 0;
        for (int li = 0; li <= 12; li++) {
            const long long limit = lo + (hi - lo) * li / 12 - (li % 2) * 7;
            double best = INFINITY;
            for (int c = 0; c < plans; c++)
                if (peak[c] <= limit && time[c] < best) best = time[c];
            for (int se = 0; se < 2; se++) {
                osdp_planner_options o;
                osdp_planner_defaults(&o);
                o.geo.n_ranks = N;
                o.geo.prefetch = pf;
                o.cost = OSDP_COST_PAPER;
                o.mem_limit = limit;
                o.search = se ? OSDP_SEARCH_DFS : OSDP_SEARCH_EXACT;
                o.hierarchy = &hier;
                osdp_planner_result r;
                const osdp_status s = osdp_planner_plan_batch(&L, &d, &o, b, 1, &r);
                if (isinf(best)) {
                    ck_assert_int_eq(s, OSDP_ERR_INFEASIBLE);
                } else {
                    ck_assert_msg(s == OSDP_OK, "limit %lld: %s", limit, osdp_error_message());
                    ck_assert_msg(fabs(r.step_s - best) <= 1e-12 * best, "pf %d limit %lld (%s): planner %.17g s, brute force %.17g s",
                                  pf, limit, se ? "dfs" : "exact", r.step_s, best);
                    ck_assert(r.peak_bytes <= limit && r.runtime_peak == r.peak_bytes);
                    chose_h += osdp_plan_has_hierarchical(&r.plan);
                }
                osdp_planner_result_free(&r);
            }
        }
        ck_assert_int_gt(chose_h, 0);   /* the mode is taken where it pays */
    }
    free(time);
    free(peak);
    osdp_plan_free(&p);
    osdp_layout_free(&L);
}
END_TEST

static Suite *hier_cost_suite(void)
{
    const TTest *cost[] = {test_peak_equals_schedule, test_time_per_level, test_flat_slice_node_first,
                           test_hierarchy_for_mesh, test_step_sync_per_level, test_search_against_brute_force, NULL};
    const osdp_check_case cases[] = {{.name = "hier_cost", .tests = cost}};
    return osdp_check_suite("hier_cost", cases, sizeof cases / sizeof cases[0]);
}
const osdp_check_program osdp_check_this_program = {.suite = hier_cost_suite};

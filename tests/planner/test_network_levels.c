/* Tests of the two-level network (issue 16 item 1) that need no ranks: the
 * device file's [internode_*] sections (values, defaults, errors, written
 * and read back; the shipped files keep their one-level meaning), which
 * meshes' data-parallel groups span nodes, the cost model's pricing of each
 * level against hand-computed times, and the --emulate-link /
 * --ranks-per-node parsing and the emulated link's floor.  The floor on real
 * ranks: tests/comm/test_link_emulation.c (tests/system/test_emulated_link.sh). */
#include "config.h"

#include "check_main.h"

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/link_emulation.h"

#include "test_inputs.h"

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)); }

static const char *DEVICE_HEAD =
    "[device]\nname = two\nmem_limit = 8G\nranks_per_node = 4\n"
    "[all_gather]\nalpha = 1e-5\nbeta = 1e-10\n[reduce_scatter]\nalpha = 2e-5\nbeta = 2e-10\n"
    "[gamma]\nembed = 1e-12\nattn = 2e-12\nmlp = 3e-12\nhead = 4e-12\n";
static const char *INTERNODE =
    "[internode_all_gather]\nalpha = 5e-5\nbeta = 1e-9\n[internode_reduce_scatter]\nalpha = 6e-5\nbeta = 2e-9\n";

static osdp_status parse_with(osdp_device *d, const char *head, const char *extra)
{
    return parse_device_text(d, head, extra, "two.ini");
}

static int same_cost(osdp_collective_cost a, osdp_collective_cost b) { return a.alpha == b.alpha && a.beta == b.beta; }

START_TEST(test_device_internode_sections)
{
    osdp_device d;
    /* absent: one level, the inter-node figures are the in-node ones */
    ck_assert_msg(parse_with(&d, DEVICE_HEAD, "") == OSDP_OK, "%s", osdp_error_message());
    ck_assert_int_eq(d.internode.given, 0);
    ck_assert(same_cost(d.internode.all_gather, d.all_gather) && same_cost(d.internode.reduce_scatter, d.reduce_scatter));
    /* given; [internode_p2p] absent: one ring step's figures */
    ck_assert_msg(parse_with(&d, DEVICE_HEAD, INTERNODE) == OSDP_OK, "%s", osdp_error_message());
    ck_assert_int_eq(d.internode.given, 1);
    ck_assert(d.internode.all_gather.alpha == 5e-5 && d.internode.all_gather.beta == 1e-9);
    ck_assert(d.internode.reduce_scatter.alpha == 6e-5 && d.internode.reduce_scatter.beta == 2e-9);
    ck_assert(same_cost(d.internode.p2p, d.internode.all_gather));
    ck_assert(d.all_gather.alpha == 1e-5 && d.all_gather.beta == 1e-10);   /* the in-node ones stay */
    char with_p2p[1024];
    snprintf(with_p2p, sizeof with_p2p, "%s[internode_p2p]\nalpha = 7e-6\nbeta = 3e-10\n", INTERNODE);
    ck_assert_msg(parse_with(&d, DEVICE_HEAD, with_p2p) == OSDP_OK, "%s", osdp_error_message());
    ck_assert(d.internode.p2p.alpha == 7e-6 && d.internode.p2p.beta == 3e-10);
    /* written and read back */
    char tmp[] = "/tmp/osdp_test_network_levels_XXXXXX";
    int fd = mkstemp(tmp);
    ck_assert(fd >= 0);
    close(fd);
    ck_assert_msg(osdp_device_write(&d, "two levels", tmp) == OSDP_OK, "%s", osdp_error_message());
    osdp_device back;
    ck_assert_msg(osdp_device_load(&back, tmp) == OSDP_OK, "%s", osdp_error_message());
    unlink(tmp);
    ck_assert_int_eq(back.internode.given, 1);
    ck_assert_int_eq(back.ranks_per_node, 4);
    ck_assert(close_rel(back.internode.reduce_scatter.beta, 2e-9, 1e-6) && close_rel(back.internode.p2p.alpha, 7e-6, 1e-6));
}
END_TEST

START_TEST(test_device_internode_errors)
{
    static const char *no_node =
        "[device]\nname = two\nmem_limit = 8G\n"
        "[all_gather]\nalpha = 1e-5\nbeta = 1e-10\n[reduce_scatter]\nalpha = 2e-5\nbeta = 2e-10\n"
        "[gamma]\nembed = 1e-12\nattn = 2e-12\nmlp = 3e-12\nhead = 4e-12\n";
    static const struct { const char *head, *extra, *expect; } bad[] = {
        {NULL, "[internode_all_gather]\nalpha = 5e-5\n[internode_reduce_scatter]\nalpha = 1\nbeta = 1\n",
         "[internode_all_gather] needs both alpha and beta (missing 'beta')"},
        {NULL, "[internode_all_gather]\nalpha = 5e-5\nbeta = 1e-9\n",
         "[internode_all_gather] and [internode_reduce_scatter] go together (missing [internode_reduce_scatter])"},
        {NULL, "[internode_p2p]\nalpha = 5e-5\nbeta = 1e-9\n", "[internode_p2p] needs [internode_all_gather]"},
        {NULL, "[internode_all_gather]\nalpha = 5e-5\nbeta = 0\n", "[internode_all_gather] beta = '0'"},
        {NULL, "[internode_reduce_scatter]\nalpha = -1\n", "[internode_reduce_scatter] alpha = '-1'"},
        {NULL, "[internode_all_gather]\nlatency = 1\n", "unknown key 'latency' in [internode_all_gather]"},
        {NULL, "[internode_all_reduce]\nalpha = 1\n", "unknown section [internode_all_reduce]"},
        {NULL, "[internode_all_gather]\nalpha = 5e-5\nalpha = 5e-5\n", "[internode_all_gather] alpha given twice"},
        {"no_node", "[internode_all_gather]\nalpha = 5e-5\nbeta = 1e-9\n[internode_reduce_scatter]\nalpha = 6e-5\nbeta = 2e-9\n",
         "need ranks_per_node in [device]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        osdp_device d;
        ck_assert_int_eq(parse_with(&d, bad[i].head ? no_node : DEVICE_HEAD, bad[i].extra), OSDP_ERR_INPUT);
        ck_assert_msg(strstr(osdp_error_message(), bad[i].expect) && strstr(osdp_error_message(), "two.ini"),
                      "case %zu: '%s' lacks '%s'", i, osdp_error_message(), bad[i].expect);
    }
}
END_TEST

/* every shipped device file without [internode_*] keeps its meaning: one
 * level; one that gives them (a two-level cluster, for the 3D search) has
 * its node size */
START_TEST(test_shipped_devices_one_level)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/input/devices", src_dir());
    DIR *d = opendir(dir);
    ck_assert(d != NULL);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!strstr(e->d_name, ".ini")) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        osdp_device dev, level;
        ck_assert_msg(osdp_device_load(&dev, path) == OSDP_OK, "%s", osdp_error_message());
        if (dev.internode.given) {
            ck_assert_msg(dev.ranks_per_node > 1, "%s: two levels without a node size", e->d_name);
            continue;
        }
        ck_assert_msg(!dev.internode.given && same_cost(dev.internode.all_gather, dev.all_gather), "%s", e->d_name);
        /* a mesh over many nodes is priced as before: the device unchanged */
        osdp_cost_device_for_mesh(&dev, 1, 64, 1, &level);
        ck_assert_msg(memcmp(&level, &dev, sizeof dev) == 0, "%s", e->d_name);
        n++;
    }
    closedir(d);
    ck_assert_int_ge(n, 5);
}
END_TEST

START_TEST(test_spans_nodes)
{
    static const struct { int per_node, tp, dp, pp, spans; } c[] = {
        {0, 1, 64, 1, 0},   /* no node size: one node */
        {4, 1, 4, 1, 0},  {4, 1, 8, 1, 1},  {4, 2, 2, 1, 0},  {4, 2, 4, 1, 1},
        {4, 4, 2, 1, 1},    /* {0, 4}: one rank per node */
        {4, 1, 2, 2, 0},    /* {0, 1}, {2, 3} */
        {3, 1, 2, 2, 1},    /* {2, 3}: nodes 0 and 1 */
        {8, 2, 1, 4, 0},    /* no data parallelism */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        ck_assert_msg(osdp_cost_dp_spans_nodes(c[i].per_node, c[i].tp, c[i].dp, c[i].pp) == c[i].spans,
                      "case %zu: R %d tp %d dp %d pp %d", i, c[i].per_node, c[i].tp, c[i].dp, c[i].pp);
    /* messages between stages: rank r to r + tp dp */
    static const struct { int per_node, tp, dp, pp, spans; } m[] = {
        {0, 1, 1, 8, 0}, {8, 2, 2, 2, 0}, {4, 2, 2, 2, 1}, {4, 1, 2, 2, 0} /* {0,1} -> {2,3}: 0->2, 1->3 */,
        {4, 1, 2, 3, 1} /* 2 -> 4 */, {4, 2, 2, 1, 0},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        ck_assert_msg(osdp_cost_pp_spans_nodes(m[i].per_node, m[i].tp, m[i].dp, m[i].pp) == m[i].spans,
                      "pp case %zu: R %d tp %d dp %d pp %d", i, m[i].per_node, m[i].tp, m[i].dp, m[i].pp);
}
END_TEST

/* the pipeline's messages at [internode_p2p]'s figures when stages sit on different nodes */
START_TEST(test_p2p_level)
{
    osdp_device dev, level;
    char with_p2p[1024];
    snprintf(with_p2p, sizeof with_p2p, "%s[p2p]\nalpha = 1e-6\nbeta = 1e-11\n[internode_p2p]\nalpha = 7e-6\nbeta = 3e-10\n",
             INTERNODE);
    ck_assert_msg(parse_with(&dev, DEVICE_HEAD, with_p2p) == OSDP_OK, "%s", osdp_error_message());
    osdp_cost_device_for_mesh(&dev, 1, 4, 2, &level);   /* stage 0 on node 0, stage 1 on node 1; groups inside */
    ck_assert(level.p2p.alpha == 7e-6 && level.p2p.beta == 3e-10);
    ck_assert(same_cost(level.all_gather, dev.all_gather));
    osdp_cost_device_for_mesh(&dev, 1, 2, 2, &level);   /* 4 ranks, one node */
    ck_assert(level.p2p.alpha == 1e-6 && level.p2p.beta == 1e-11);
    /* a flat file: [p2p] is the inter-node message too */
    ck_assert_msg(parse_with(&dev, DEVICE_HEAD, "[p2p]\nalpha = 1e-6\nbeta = 1e-11\n") == OSDP_OK, "%s", osdp_error_message());
    ck_assert(same_cost(dev.internode.p2p, dev.p2p));
    osdp_cost_device_for_mesh(&dev, 1, 4, 2, &level);
    ck_assert(memcmp(&level, &dev, sizeof dev) == 0);
}
END_TEST

/* an operator's collectives at the level of its data-parallel group, by hand */
START_TEST(test_level_pricing)
{
    osdp_device dev;
    ck_assert_msg(parse_with(&dev, DEVICE_HEAD, INTERNODE) == OSDP_OK, "%s", osdp_error_message());
    osdp_layout whole;
    load_layout(&whole, "tiny", 0);
    const int op = 1;   /* attn.0 */
    static const struct { int tp, dp, spans; } mesh[] = {{1, 8, 1}, {1, 4, 0}, {2, 2, 0}, {2, 4, 1}};
    for (size_t m = 0; m < sizeof mesh / sizeof mesh[0]; m++) {
        osdp_layout L;   /* one rank's parts, as the planner prices a mesh */
        ck_assert(osdp_layout_build_tp(&L, &whole.cfg, whole.T, mesh[m].tp, 1) == OSDP_OK);
        osdp_device level;
        osdp_cost_device_for_mesh(&dev, mesh[m].tp, mesh[m].dp, 1, &level);
        const int N = mesh[m].dp;
        osdp_cost_model cm;
        osdp_cost_model_init(&cm, &L, &level, &(osdp_step_geometry){.n_ranks = N}, OSDP_COST_PAPER, NULL);
        const double P = (double)osdp_padded_numel_quantum(L.op[op].numel, N, 1), S = 4 * P;
        const double ag_a = mesh[m].spans ? 5e-5 : 1e-5, ag_b = mesh[m].spans ? 1e-9 : 1e-10;
        const double rs_a = mesh[m].spans ? 6e-5 : 2e-5, rs_b = mesh[m].spans ? 2e-9 : 2e-10;
        /* across nodes of equal shares the reduce-scatter runs node-first: in-node over the R = 4 / tp data ranks
         * of a node, then across the nodes of each rank's S / R (osdp/cost_model.h) */
        const double R = 4 / mesh[m].tp, K = N / R, ag = (N - 1) * (ag_a + S / N * ag_b);
        const double rs = mesh[m].spans ? (R - 1) * (2e-5 + S / R * 2e-10) + (K - 1) * (rs_a + S / R / K * rs_b)
                                        : (N - 1) * (rs_a + S / N * rs_b);
        osdp_op_time dp_time, zdp_time;
        osdp_cost_op_time(&cm, op, 1, 0, 2, 1, &dp_time);    /* DP: one gather, one reduce-scatter */
        osdp_cost_op_time(&cm, op, 1, 1, 2, 1, &zdp_time);   /* ZDP: two gathers */
        ck_assert_msg(close_rel(dp_time.comm, ag + rs, 1e-12), "mesh %zu: DP comm %.9g, by hand %.9g", m, dp_time.comm,
                      ag + rs);
        ck_assert_msg(close_rel(zdp_time.comm, 2 * ag + rs, 1e-12), "mesh %zu: ZDP comm %.9g, by hand %.9g", m,
                      zdp_time.comm, 2 * ag + rs);
        osdp_layout_free(&L);
    }
    /* the emulated link over a file: each figure the slower of the two */
    osdp_device_set_link(&dev, 2, &(osdp_collective_cost){.alpha = 2e-5, .beta = 5e-9});
    ck_assert_int_eq(dev.ranks_per_node, 2);
    ck_assert(dev.internode.all_gather.alpha == 5e-5 && dev.internode.all_gather.beta == 5e-9);
    ck_assert(dev.internode.reduce_scatter.alpha == 6e-5 && dev.internode.reduce_scatter.beta == 5e-9);
    ck_assert(dev.all_gather.beta == 1e-10);   /* inside a node: unchanged */
    osdp_layout_free(&whole);
}
END_TEST

START_TEST(test_link_options)
{
    osdp_link_emulation e;
    ck_assert_msg(osdp_link_emulation_parse(&e, 2, "12.5G,5us", 4) == OSDP_OK, "%s", osdp_error_message());
    ck_assert(e.has_link && e.ranks_per_node == 2 && e.n_nodes == 2);
    ck_assert(close_rel(e.alpha, 5e-6, 1e-12) && close_rel(e.beta, 1 / 12.5e9, 1e-12));
    char text[128];
    ck_assert_str_eq(osdp_link_emulation_describe(&e, text, sizeof text), "emulated: 2 nodes x 2 ranks, link 12.5 GB/s 5 us");
    static const struct { const char *link; double alpha, beta; } good[] = {
        {"100M,0s", 0, 1e-8}, {"1T,2ms", 2e-3, 1e-12}, {"3e9,10ns", 1e-8, 1 / 3e9}, {"50K,1s", 1, 2e-5},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ck_assert_msg(osdp_link_emulation_parse(&e, 4, good[i].link, 8) == OSDP_OK, "%s", osdp_error_message());
        ck_assert_msg(close_rel(e.alpha, good[i].alpha, 1e-12) && close_rel(e.beta, good[i].beta, 1e-12), "%s",
                      good[i].link);
    }
    /* no link: nodes only */
    ck_assert(osdp_link_emulation_parse(&e, 4, NULL, 8) == OSDP_OK && !e.has_link && e.n_nodes == 2);
    ck_assert_str_eq(osdp_link_emulation_describe(&e, text, sizeof text), "emulated: 2 nodes x 4 ranks, no link");
    ck_assert(osdp_link_emulation_parse(&e, 0, NULL, 8) == OSDP_OK && e.ranks_per_node == 0);
    static const char *bad_link[] = {"12.5G", "0G,5us", "-1G,5us", "12.5G,5", "12.5G,-5us", "12.5Q,5us", "12.5G,5min",
                                     ",5us", "12.5G,"};
    for (size_t i = 0; i < sizeof bad_link / sizeof bad_link[0]; i++) {
        ck_assert_int_eq(osdp_link_emulation_parse(&e, 2, bad_link[i], 4), OSDP_ERR_INPUT);
        ck_assert_msg(strstr(osdp_error_message(), "--emulate-link") && strstr(osdp_error_message(), bad_link[i]), "%s",
                      osdp_error_message());
    }
    ck_assert_int_eq(osdp_link_emulation_parse(&e, 3, NULL, 4), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "--ranks-per-node 3 does not divide the 4 ranks"), "%s", osdp_error_message());
    ck_assert_int_eq(osdp_link_emulation_parse(&e, 0, "12.5G,5us", 4), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "needs --ranks-per-node"), "%s", osdp_error_message());
}
END_TEST

START_TEST(test_link_floor)
{
    osdp_link_emulation e;
    ck_assert(osdp_link_emulation_parse(&e, 2, "100M,100us", 4) == OSDP_OK);
    const size_t S = 4000000;   /* 4 MB over 4 ranks: 1 MB per ring step, 10 ms at 100 MB/s */
    ck_assert(close_rel(osdp_link_floor_seconds(&e, OSDP_COLL_ALL_GATHER, 4, S), 3 * (1e-4 + 1e-2), 1e-12));
    ck_assert(close_rel(osdp_link_floor_seconds(&e, OSDP_COLL_REDUCE_SCATTER, 4, S), 3 * (1e-4 + 1e-2), 1e-12));
    ck_assert(close_rel(osdp_link_floor_seconds(&e, OSDP_COLL_ALL_REDUCE, 4, S), 6 * (1e-4 + 1e-2), 1e-12));
    /* a node-first reduction's cross stage over the group of one rank per node (2 nodes): one ring step */
    ck_assert(close_rel(osdp_link_floor_seconds(&e, OSDP_COLL_CROSS_REDUCE_SCATTER, 2, S), 1e-4 + 2e-2, 1e-12));
    ck_assert(close_rel(osdp_link_floor_seconds(&e, OSDP_COLL_CROSS_ALL_GATHER, 2, S), 1e-4 + 2e-2, 1e-12));
    ck_assert(close_rel(osdp_link_floor_seconds(&e, OSDP_COLL_P2P, 2, S), 1e-4 + 4e-2, 1e-12));
    ck_assert(close_rel(osdp_link_floor_seconds(&e, OSDP_COLL_BROADCAST, 4, S), 1e-4 + 4e-2, 1e-12));
}
END_TEST

static Suite *network_levels_suite(void)
{
    const TTest *device[] = {test_device_internode_sections, test_device_internode_errors, test_shipped_devices_one_level,
                             NULL};
    const TTest *pricing[] = {test_spans_nodes, test_level_pricing, test_p2p_level, NULL};
    const TTest *link[] = {test_link_options, test_link_floor, NULL};
    const osdp_check_case cases[] = {
        {.name = "device", .tests = device},
        {.name = "pricing", .tests = pricing},
        {.name = "link", .tests = link},
    };
    return osdp_check_suite("network_levels", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = network_levels_suite};

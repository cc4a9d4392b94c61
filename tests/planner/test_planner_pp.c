/* Tests for the pipeline's cost model and planner (issue 15): the
 * simulated step of hand-built pipelines against the hand computation,
 * GPipe against 1F1B, the bubble's closed form, the balanced split against
 * brute force, [p2p] in device files, a stage's in-flight activations in
 * the peak, and osdp_planner_pipeline (plan --pp). */
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
#include "osdp/pipeline.h"
#include "osdp/pipeline_cost.h"
#include "osdp/plan.h"
#include "osdp/planner.h"
#include "osdp/schedule.h"

#include "test_inputs.h"

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)); }

static const char *DEVICE_HEAD =
    "[device]\nname = t\nmem_limit = 8G\n"
    "[all_gather]\nalpha = 1e-5\nbeta = 2e-10\n[reduce_scatter]\nalpha = 3e-5\nbeta = 4e-10\n"
    "[gamma]\nembed = 1e-12\nattn = 2e-12\nmlp = 3e-12\nhead = 4e-12\n";

static osdp_status parse_with(osdp_device *d, const char *extra)
{
    return parse_device_text(d, DEVICE_HEAD, extra, "pp.ini");
}

/* the tiny model at T 64, DEVICE_HEAD + device_extra, and a plan of every
 * operator DP (zdp 0) or ZDP (zdp 1) */
static void tiny_case(osdp_layout *L, osdp_device *d, const char *device_extra, osdp_plan *p, int zdp)
{
    load_layout(L, "tiny", 64);
    ck_assert_msg(parse_with(d, device_extra) == OSDP_OK, "%s", osdp_error_message());
    ck_assert(osdp_plan_alloc(p, L->n_ops) == OSDP_OK);
    osdp_plan_fill(p, zdp);
}

static osdp_pipe_timing simulate(osdp_pipe_schedule kind, int P, int M, const osdp_pipe_stage_cost *st, const double *msg)
{
    osdp_pipe_timing t;
    ck_assert_msg(osdp_pipe_simulate(kind, P, M, st, msg, &t) == OSDP_OK, "%s", osdp_error_message());
    return t;
}

/* P = 2, M = 3, equal stages (forward f, backward b), messages of c < f;
 * a receive ends c after it is posted and not before the send, a
 * backward's gradient send holds its stage c (osdp/pipeline_cost.h).
 * GPipe, by hand: stage 1's forwards run f-2f, 2f+c - 3f+c, 3f+2c - 4f+2c
 * (each receive posted when the last forward ended); each backward then
 * holds it c for its send: B0 ends 4f+2c+b, B1 4f+3c+2b, B2 4f+4c+3b, and
 * it is free at 4f+5c+3b.  Stage 0's backwards start at those sends (its
 * receives, posted at its previous pass's end, end c later, which is no
 * later than the send): step = 4f+4c+4b = (M + P - 1)(f + b) + (M + 1) c.
 * 1F1B, by hand (stage 0: F0 F1 B0 F2 B1 B2; stage 1: F0 B0 F1 B1 F2 B2):
 * stage 1 F0 f-2f, B0 2f-2f+b (free +c), F1 2f+b+2c - 3f+b+2c, B1 - 3f+2b+2c
 * (free +c), F2 3f+2b+4c - 4f+2b+4c, B2 - 4f+3b+4c; stage 0's B2 starts
 * there: step = 4 (f + b) + 4c. */
START_TEST(test_hand_built_two_stages)
{
    const double f = 1.0, b = 2.0, c = 0.25;
    osdp_pipe_stage_cost st[2] = {{.forward_s = f, .backward_s = b}, {.forward_s = f, .backward_s = b}};
    const double msg[1] = {c};
    osdp_pipe_timing g = simulate(OSDP_PIPE_GPIPE, 2, 3, st, msg);
    ck_assert_msg(g.step_s == 4 * (f + b) + 4 * c, "GPipe %.17g", g.step_s);
    ck_assert_msg(g.end_s[1] == 4 * f + 3 * b + 5 * c, "GPipe stage 1 free at %.17g (its last send)", g.end_s[1]);
    osdp_pipe_timing o = simulate(OSDP_PIPE_1F1B, 2, 3, st, msg);
    ck_assert_msg(o.step_s == 4 * (f + b) + 4 * c, "1F1B %.17g", o.step_s);
    ck_assert(g.busy_s[0] == 3 * (f + b) && g.busy_s[1] == 3 * (f + b));
    /* no message time: both (M + P - 1)(f + b), and the idle fraction is the closed form */
    osdp_pipe_timing g0 = simulate(OSDP_PIPE_GPIPE, 2, 3, st, NULL), o0 = simulate(OSDP_PIPE_1F1B, 2, 3, st, NULL);
    ck_assert(g0.step_s == 4 * (f + b) && o0.step_s == g0.step_s);
    ck_assert(close_rel(g0.idle_fraction, 1.0 / 4.0, 1e-15) && close_rel(o0.idle_fraction, 1.0 / 4.0, 1e-15));
    ck_assert(g0.bubble_closed == osdp_pipe_bubble(2, 3) && g0.bubble_closed == 0.25);
}
END_TEST

/* Unbalanced, by hand: stage 0 (f 1, b 2), stage 1 (f 2, b 4), M = 2, no
 * message time.  GPipe: stage 1 runs F0 1-3, F1 3-5, B0 5-9, B1 9-13, stage
 * 0 B0 9-11, B1 13-15.  1F1B: stage 1 F0 1-3, B0 3-7, F1 7-9, B1 9-13;
 * stage 0 B0 7-9, B1 13-15.  Both 15; the slowest stage is 1. */
START_TEST(test_unbalanced_by_hand)
{
    osdp_pipe_stage_cost st[2] = {{.forward_s = 1, .backward_s = 2}, {.forward_s = 2, .backward_s = 4}};
    osdp_pipe_timing g = simulate(OSDP_PIPE_GPIPE, 2, 2, st, NULL), o = simulate(OSDP_PIPE_1F1B, 2, 2, st, NULL);
    ck_assert_msg(g.step_s == 15 && o.step_s == 15, "GPipe %g 1F1B %g", g.step_s, o.step_s);
    ck_assert_int_eq(g.slowest_stage, 1);
    ck_assert(g.end_s[0] == 15 && g.end_s[1] == 13);
    ck_assert(close_rel(g.idle_fraction, 1 - (6.0 + 12.0) / (2 * 15.0), 1e-15));
}
END_TEST

/* The step's once-only work (osdp/pipeline_cost.h): X, each stage's DP
 * gathers, started with its step (while it waits for its first input) and
 * waited by its first forward; Y, its reduce-once reductions, waited at the
 * end of its step, after its last gradient send.  P = 2, M = 2, f 1, b 2,
 * no message time, 1F1B by hand (stage 0: F0 F1 B0 B1; stage 1: F0 B0 F1
 * B1): stage 0 F0 X - 1+X, F1 - 2+X; stage 1 (its gathers done at X) F0
 * 1+X - 2+X, B0 - 4+X, F1 - 5+X, B1 - 7+X, then Y: ends 7+X+Y; stage 0 B0
 * 4+X - 6+X, B1 7+X - 9+X, then Y: 9+X+Y.  Only the first stage's X and Y
 * lie on the critical path: step 9 + X + Y (9 + 2X + 2Y while the gathers
 * came after the input and the waits before the send), where spreading them
 * over the passes gave 9 + 1.5 (X + Y).  GPipe (stage 0: F0 F1 B0 B1;
 * stage 1: F0 F1 B0 B1): stage 1 F0 1+X - 2+X, F1 - 3+X, B0 - 5+X, B1 -
 * 7+X, ends 7+X+Y; stage 0 B0 5+X - 7+X, B1 - 9+X, ends 9+X+Y: the same.
 * The busy time still sums everything. */
START_TEST(test_step_work_by_hand)
{
    const double X = 0.5, Y = 0.25;
    osdp_pipe_stage_cost st[2];
    for (int s = 0; s < 2; s++)
        st[s] = (osdp_pipe_stage_cost){.forward_s = 1, .backward_s = 2, .step_start_s = X, .step_end_s = Y};
    osdp_pipe_timing o = simulate(OSDP_PIPE_1F1B, 2, 2, st, NULL), g = simulate(OSDP_PIPE_GPIPE, 2, 2, st, NULL);
    ck_assert_msg(o.step_s == 9 + X + Y, "1F1B %.17g", o.step_s);
    ck_assert_msg(g.step_s == 9 + X + Y, "GPipe %.17g", g.step_s);
    ck_assert(o.end_s[1] == 7 + X + Y && o.end_s[0] == o.step_s && g.end_s[1] == 7 + X + Y);
    ck_assert(o.busy_s[0] == 2 * 3 + X + Y && o.busy_s[1] == o.busy_s[0]);
    /* one stage: its passes one after the other, wherever the once-only work sits */
    osdp_pipe_timing one = simulate(OSDP_PIPE_1F1B, 1, 3, st, NULL);
    ck_assert(close_rel(one.step_s, 3 * 3 + X + Y, 1e-15));
    /* interleaved, V = 2 (P 2, M 2; a chunk's X before its first forward, Y after its last backward):
     * every rank's busy time is its chunks' work, and the step at least that */
    osdp_pipe_stage_cost chunk[4];
    for (int c = 0; c < 4; c++)
        chunk[c] = (osdp_pipe_stage_cost){.forward_s = 0.5, .backward_s = 1, .step_start_s = X, .step_end_s = Y};
    osdp_pipe_timing il;
    ck_assert_msg(osdp_pipe_simulate_chunks(OSDP_PIPE_INTERLEAVED, 2, 2, 2, chunk, NULL, &il) == OSDP_OK, "%s",
                  osdp_error_message());
    ck_assert(close_rel(il.busy_s[0], 2 * (2 * 1.5 + X + Y), 1e-15) && il.step_s >= il.busy_s[0]);
    /* a negative once-only time is refused */
    st[1].step_end_s = -1;
    ck_assert_int_eq(osdp_pipe_simulate(OSDP_PIPE_1F1B, 2, 2, st, NULL, &(osdp_pipe_timing){0}), OSDP_ERR_INPUT);
}
END_TEST

/* Equal stages without message time: GPipe and 1F1B take (M + P - 1)(f + b)
 * and their idle fraction is (P - 1) / (M + P - 1), for every P and M */
START_TEST(test_bubble_closed_form)
{
    osdp_pipe_stage_cost st[8];
    for (int s = 0; s < 8; s++) st[s] = (osdp_pipe_stage_cost){.forward_s = 0.5, .backward_s = 1.25};
    for (int P = 1; P <= 8; P++)
        for (int M = 1; M <= 12; M++) {
            osdp_pipe_timing g = simulate(OSDP_PIPE_GPIPE, P, M, st, NULL), o = simulate(OSDP_PIPE_1F1B, P, M, st, NULL);
            const double want = (M + P - 1) * 1.75;
            ck_assert_msg(close_rel(g.step_s, want, 1e-14) && close_rel(o.step_s, want, 1e-14), "P %d M %d: %g %g %g", P,
                          M, g.step_s, o.step_s, want);
            ck_assert(close_rel(g.idle_fraction, osdp_pipe_bubble(P, M), 1e-12) || (P == 1 && g.idle_fraction < 1e-15));
            ck_assert(close_rel(o.idle_fraction, osdp_pipe_bubble(P, M), 1e-12) || (P == 1 && o.idle_fraction < 1e-15));
        }
    /* bad input */
    ck_assert_int_eq(osdp_pipe_simulate(OSDP_PIPE_1F1B, 0, 3, st, NULL, &(osdp_pipe_timing){0}), OSDP_ERR_INPUT);
    st[1].backward_s = -1;
    ck_assert_int_eq(osdp_pipe_simulate(OSDP_PIPE_1F1B, 2, 3, st, NULL, &(osdp_pipe_timing){0}), OSDP_ERR_INPUT);
}
END_TEST

/* the largest stage sum of bounds */
static double largest_stage(const double *cost, const int *bounds, int P)
{
    double most = 0;
    for (int s = 0; s < P; s++) {
        double sum = 0;
        for (int i = bounds[s]; i < bounds[s + 1]; i++) sum += cost[i];
        if (sum > most) most = sum;
    }
    return most;
}

/* the smallest largest stage over every split of n operators in P stages (brute force) */
static double brute_best(const double *cost, int n, int P, int *bounds, int s)
{
    if (s == P) return bounds[P] == n ? largest_stage(cost, bounds, P) : INFINITY;
    double best = INFINITY;
    const int last = s + 1 == P;
    for (int hi = bounds[s] + 1; hi <= n - (P - s - 1); hi++) {
        if (last && hi != n) continue;
        bounds[s + 1] = hi;
        double v = brute_best(cost, n, P, bounds, s + 1);
        if (v < best) best = v;
    }
    return best;
}

START_TEST(test_balanced_split_is_optimal)
{
    srand(15);
    for (int trial = 0; trial < 60; trial++) {
        const int n = 2 + rand() % 9, P = 1 + rand() % (n < 5 ? n : 5);
        double cost[16];
        for (int i = 0; i < n; i++) cost[i] = 0.1 + (double)(rand() % 1000) / 100.0;
        int bounds[OSDP_MAX_STAGES + 1], scratch[OSDP_MAX_STAGES + 1] = {0};
        ck_assert_msg(osdp_stage_split_balanced(cost, n, P, bounds) == OSDP_OK, "%s", osdp_error_message());
        ck_assert(bounds[0] == 0 && bounds[P] == n);
        for (int s = 0; s < P; s++) ck_assert(bounds[s] < bounds[s + 1]);
        const double want = brute_best(cost, n, P, scratch, 0);
        ck_assert_msg(largest_stage(cost, bounds, P) == want, "trial %d n %d P %d: %g, brute force %g", trial, n, P,
                      largest_stage(cost, bounds, P), want);
    }
}
END_TEST

/* the split's dynamic program over every (k, i), each j tried (as before its pruning): the reference for ties */
static void split_every_entry(const double *cost, int n, int P, int *bounds)
{
    static double prefix[OSDP_MAX_CHUNKS + 1], best[OSDP_MAX_CHUNKS + 1][OSDP_MAX_CHUNKS + 1];
    static int cut[OSDP_MAX_CHUNKS + 1][OSDP_MAX_CHUNKS + 1];   /* off the stack */
    for (int i = 0; i < n; i++) prefix[i + 1] = prefix[i] + cost[i];
    for (int i = 0; i <= n; i++) best[0][i] = i == 0 ? 0 : -1;
    for (int k = 1; k <= P; k++)
        for (int i = 0; i <= n; i++) {
            best[k][i] = -1;
            for (int j = k - 1; j < i; j++) {
                if (best[k - 1][j] < 0) continue;
                const double stage = prefix[i] - prefix[j], worst = best[k - 1][j] > stage ? best[k - 1][j] : stage;
                if (best[k][i] < 0 || worst < best[k][i]) {
                    best[k][i] = worst;
                    cut[k][i] = j;
                }
            }
        }
    bounds[P] = n;
    for (int k = P; k >= 1; k--) bounds[k - 1] = cut[k][bounds[k]];
}

/* the pruned program (only the entries the answer reads, j stopped once it cannot win) cuts where the whole
 * one does, ties included (costs of few distinct values, zeros among them), up to OSDP_MAX_CHUNKS parts */
START_TEST(test_balanced_split_ties)
{
    srand(28);
    for (int trial = 0; trial < 300; trial++) {
        const int n = 1 + rand() % 100, P = 1 + rand() % n;
        double cost[OSDP_MAX_CHUNKS];
        for (int i = 0; i < n; i++) cost[i] = trial % 3 == 0 ? 1.0 : (double)(rand() % 4) * 0.25;
        int got[OSDP_MAX_CHUNKS + 1], want[OSDP_MAX_CHUNKS + 1];
        ck_assert(osdp_stage_split_balanced(cost, n, P, got) == OSDP_OK);
        split_every_entry(cost, n, P, want);
        for (int k = 0; k <= P; k++)
            ck_assert_msg(got[k] == want[k], "trial %d n %d P %d: bound %d %d, want %d", trial, n, P, k, got[k],
                          want[k]);
    }
    double cost[OSDP_MAX_CHUNKS];
    for (int i = 0; i < OSDP_MAX_CHUNKS; i++) cost[i] = 1 + i % 3;
    int got[OSDP_MAX_CHUNKS + 1], want[OSDP_MAX_CHUNKS + 1];
    ck_assert(osdp_stage_split_balanced(cost, OSDP_MAX_CHUNKS, OSDP_MAX_CHUNKS, got) == OSDP_OK);
    split_every_entry(cost, OSDP_MAX_CHUNKS, OSDP_MAX_CHUNKS, want);
    for (int k = 0; k <= OSDP_MAX_CHUNKS; k++) ck_assert_int_eq(got[k], want[k]);
}
END_TEST

/* osdp_planner_stage_split: the balanced split of the cost model's
 * all-DP operator times (or a plan's) */
START_TEST(test_planner_stage_split)
{
    osdp_layout L;
    osdp_device d;
    osdp_plan p;
    tiny_case(&L, &d, "[gamma_fixed]\nattn = 1e-3\n", &p, 1);
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = 2, .prefetch = 1}, OSDP_COST_PAPER, NULL);
    double cost[16];
    for (int i = 0; i < L.n_ops; i++) {
        osdp_op_time t;
        osdp_cost_op_time(&cm, i, 1, 0, 2, 3, &t);
        cost[i] = t.total;
    }
    for (int P = 1; P <= L.n_ops; P++) {
        int bounds[OSDP_MAX_STAGES + 1], scratch[OSDP_MAX_STAGES + 1] = {0};
        ck_assert(osdp_planner_stage_split(&cm, NULL, 2, 3, P, bounds) == OSDP_OK);
        ck_assert(largest_stage(cost, bounds, P) == brute_best(cost, L.n_ops, P, scratch, 0));
    }
    /* a plan's times: all-ZDP costs more per operator, the split follows them */
    int bounds[OSDP_MAX_STAGES + 1], scratch[OSDP_MAX_STAGES + 1] = {0};
    ck_assert(osdp_planner_stage_split(&cm, &p, 2, 3, 3, bounds) == OSDP_OK);
    for (int i = 0; i < L.n_ops; i++) {
        osdp_op_time t;
        osdp_cost_op_time(&cm, i, 1, 1, 2, 3, &t);
        cost[i] = t.total;
    }
    ck_assert(largest_stage(cost, bounds, 3) == brute_best(cost, L.n_ops, 3, scratch, 0));
    ck_assert_int_eq(osdp_planner_stage_split(&cm, NULL, 2, 3, L.n_ops + 1, bounds), OSDP_ERR_INPUT);
    osdp_plan_free(&p);
    osdp_layout_free(&L);
}
END_TEST

START_TEST(test_device_p2p)
{
    osdp_device d;
    /* absent: the all-gather's ring step */
    ck_assert_msg(parse_with(&d, "") == OSDP_OK, "%s", osdp_error_message());
    ck_assert(d.p2p.alpha == 1e-5 && d.p2p.beta == 2e-10);
    ck_assert(osdp_pipe_message_time(&d, 1e6) == 1e-5 + 1e6 * 2e-10);
    ck_assert_msg(parse_with(&d, "[p2p]\nalpha = 3e-6\nbeta = 1e-11\n") == OSDP_OK, "%s", osdp_error_message());
    ck_assert(d.p2p.alpha == 3e-6 && d.p2p.beta == 1e-11);
    /* written and read back */
    char tmp[] = "/tmp/osdp_test_pp_device_XXXXXX";
    int fd = mkstemp(tmp);
    ck_assert(fd >= 0);
    close(fd);
    ck_assert(osdp_device_write(&d, "p2p", tmp) == OSDP_OK);
    osdp_device back;
    ck_assert_msg(osdp_device_load(&back, tmp) == OSDP_OK, "%s", osdp_error_message());
    unlink(tmp);
    ck_assert(close_rel(back.p2p.alpha, 3e-6, 1e-6) && close_rel(back.p2p.beta, 1e-11, 1e-6));
    /* half a section, a bad value, an unknown key: refused, naming [p2p] */
    ck_assert_int_eq(parse_with(&d, "[p2p]\nalpha = 3e-6\n"), OSDP_ERR_INPUT);
    ck_assert(strstr(osdp_error_message(), "[p2p]") && strstr(osdp_error_message(), "beta"));
    ck_assert_int_eq(parse_with(&d, "[p2p]\nalpha = 3e-6\nbeta = 0\n"), OSDP_ERR_INPUT);
    ck_assert(strstr(osdp_error_message(), "[p2p] beta"));
    ck_assert_int_eq(parse_with(&d, "[p2p]\nlatency = 3e-6\n"), OSDP_ERR_INPUT);
    ck_assert(strstr(osdp_error_message(), "[p2p]"));
}
END_TEST

/* Megatron-LM's messages (src/runtime/stage_message.c): on TP 2 each rank
 * sends half of the b T d elements, the forward in 2 bytes under a bf16
 * stream, the backward in 4; the receiving group gathers the halves at
 * [tp_all_reduce]'s figures; the pieces (equal: a width --tp does not divide is refused); and the
 * simulated step with the two directions and the gathers apart, by hand. */
START_TEST(test_messages_pieces_and_bf16)
{
    /* pieces: 12 elements over 4 ranks: 3 each, in order; one rank: the whole */
    for (int r = 0; r < 4; r++) {
        const osdp_pipe_piece piece = osdp_pipe_piece_of(12, 4, r);
        ck_assert(piece.at == 3 * (size_t)r && piece.count == 3);
    }
    ck_assert(osdp_pipe_piece_of(10, 1, 0).at == 0 && osdp_pipe_piece_of(10, 1, 0).count == 10);

    osdp_model_config cfg;
    load_config(&cfg, "tiny");
    osdp_layout L;
    /* a message t does not divide cannot be made: a width that --tp does not divide is refused, even where
     * the configuration did not come from a model file (which refuses a width n_head does not divide) */
    osdp_model_config odd = cfg;
    odd.width[1] = 66;   /* 4 heads: tp 2 divides 66, tp 4 does not */
    ck_assert_int_eq(osdp_layout_build_tp(&L, &odd, 32, 4, 1), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "--tp 4 does not divide the width 66 of block 1"), "%s",
                  osdp_error_message());
    ck_assert(osdp_layout_build_tp(&L, &cfg, 32, 2, 1) == OSDP_OK);
    const int first = 2, b = 3;
    const size_t n = (size_t)b * 32 * (size_t)L.op[first - 1].width;   /* the boundary's b T d elements */
    ck_assert_uint_eq(osdp_pipe_boundary_bytes(&L, first, b), n * 4);   /* the buffer stays fp32 */
    ck_assert_uint_eq(osdp_pipe_message_bytes(&L, first, b, OSDP_FLOAT32, 0), n / 2 * 4);
    ck_assert_uint_eq(osdp_pipe_message_bytes(&L, first, b, OSDP_BFLOAT16, 0), n / 2 * 2);
    ck_assert_uint_eq(osdp_pipe_message_bytes(&L, first, b, OSDP_BFLOAT16, 1), n / 2 * 4);
    const int bounds[3] = {0, first, L.n_ops}, M = 5;
    ck_assert_int_eq(osdp_pipe_stage_p2p_bytes(&L, bounds, 2, 0, b, M, OSDP_BFLOAT16), (long long)M * (long long)n);
    ck_assert_int_eq(osdp_pipe_stage_p2p_bytes(&L, bounds, 2, 1, b, M, OSDP_BFLOAT16), 2LL * M * (long long)n);

    osdp_device d;
    ck_assert_msg(parse_with(&d, "[tp_all_reduce]\nalpha = 7e-6\nbeta = 3e-11\n[p2p]\nalpha = 2e-5\nbeta = 5e-10\n")
                  == OSDP_OK, "%s", osdp_error_message());
    const osdp_pipe_message m = osdp_pipe_boundary_message(&d, &d, &L, first, b, OSDP_BFLOAT16);
    ck_assert(close_rel(m.forward_s, 2e-5 + (double)n * 5e-10, 1e-12));
    ck_assert(close_rel(m.backward_s, 2e-5 + 2.0 * (double)n * 5e-10, 1e-12));
    ck_assert(close_rel(m.forward_gather_s, 7e-6 + (double)n * 3e-11, 1e-12));
    ck_assert(close_rel(m.backward_gather_s, 7e-6 + 2.0 * (double)n * 3e-11, 1e-12));
    osdp_layout_free(&L);

    /* P 2, M 1, f 1, b 2; forward c 0.1 + gather 0.05, backward c 0.2 + gather 0.03.  Stage 1's forward
     * starts at max(0 + 0.1, 1) + 0.05, its backward at 2.05 and ends 4.05, its gradient send holds it to
     * 4.25; stage 0's backward starts at max(1 + 0.2, 4.05) + 0.03 = 4.08 and ends 6.08: the step */
    const osdp_pipe_stage_cost st[2] = {{1, 2, 0, 0}, {1, 2, 0, 0}};
    const osdp_pipe_message msg[1] = {{.forward_s = 0.1, .backward_s = 0.2, .forward_gather_s = 0.05,
                                       .backward_gather_s = 0.03}};
    osdp_pipe_timing t;
    ck_assert_msg(osdp_pipe_simulate_messages(OSDP_PIPE_1F1B, 2, 1, 1, st, msg, &t) == OSDP_OK, "%s",
                  osdp_error_message());
    ck_assert(close_rel(t.step_s, 6.08, 1e-12) && close_rel(t.end_s[1], 4.25, 1e-12));
}
END_TEST

/* a stage's passes share its operators' T_i: M (forward + backward) = sum
 * T_i; with one stage the pipeline's step is the flat step time */
START_TEST(test_stage_passes_and_one_stage)
{
    osdp_layout L;
    osdp_device d;
    osdp_plan p;
    tiny_case(&L, &d, "[gamma_fixed]\nmlp = 1e-4\n[step]\nshard_param = 1e-9\n", &p, 0);
    p.zdp_slices[2] = 1;
    p.recompute[3] = 1;
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = 2, .prefetch = 1}, OSDP_COST_PAPER, NULL);
    const int M = 5, bnd[2] = {0, L.n_ops};
    osdp_pipe_stage_cost st;
    osdp_pipe_stage_passes(&cm, &p, 0, L.n_ops, 2, M, &st);
    const double flat = osdp_cost_step_time(&cm, &p, 2, M), sync = osdp_cost_step_sync_time(&d, 1, 2, 1);
    ck_assert(sync > 0);   /* the step's scalar all-reduce over the 2 ranks */
    ck_assert(close_rel(M * (st.forward_s + st.backward_s) + st.step_start_s + st.step_end_s, flat - sync, 1e-12));
    /* the once-only work: every DP operator's gathers before the first forward (the ZDP one's are every
     * micro-step's); nothing after the last backward without reduce-once (the optimizer step stays spread) */
    osdp_cost_model with_plan = cm;
    with_plan.recompute = p.recompute;
    double gathers = 0, optimizer = 0;
    for (int i = 0; i < L.n_ops; i++) {
        osdp_op_time ot;
        osdp_cost_op_time(&with_plan, i, p.slices[i], p.zdp_slices[i], 2, M, &ot);
        const double S = (double)osdp_cost_slice_numel(&cm, i, 1), ag = osdp_collective_time(&d.all_gather, 2, S * 4);
        optimizer += S / 2 * d.step_shard_param;
        if (i == 2) ck_assert(ot.step_start == 0);
        else ck_assert(close_rel(ot.step_start, ag, 1e-12));
        ck_assert(ot.step_end == 0);
        gathers += ot.step_start;
    }
    ck_assert(gathers > 0 && optimizer > 0);
    ck_assert(close_rel(st.step_start_s, gathers, 1e-12) && st.step_end_s == 0);
    /* a reduce-once operator adds its one reduction to its step_end: the reduce-scatter of its accumulated
     * gradients, which the stage waits for at the end of its step */
    int once[64] = {0};
    once[1] = 1;
    with_plan.reduce_once = once;
    osdp_op_time o1;
    osdp_cost_op_time(&with_plan, 1, 1, 0, 2, M, &o1);
    const double S1 = (double)osdp_cost_slice_numel(&cm, 1, 1);
    ck_assert(close_rel(o1.step_end, osdp_collective_time(&d.reduce_scatter, 2, S1 * 4), 1e-12));
    /* under the overlap kind (max(compute, comm)) nothing is once-only: spread as ever */
    osdp_cost_model overlap = with_plan;
    overlap.kind = OSDP_COST_OVERLAP;
    osdp_cost_op_time(&overlap, 1, 1, 0, 2, M, &o1);
    ck_assert(o1.step_start == 0 && o1.step_end == 0);
    const osdp_cost_model *cms[1] = {&cm};
    const osdp_plan *plans[1] = {&p};
    osdp_pipe_timing t;
    ck_assert(osdp_pipe_step_time(cms, plans, bnd, 1, OSDP_PIPE_1F1B, 2, M, &t) == OSDP_OK);
    ck_assert(close_rel(t.step_s, flat, 1e-12) && t.bubble_closed == 0);
    /* the recomputing operator's forward is a quarter of its time, the others' a third */
    osdp_pipe_stage_cost one;
    osdp_op_time ot;
    with_plan.reduce_once = NULL;
    osdp_pipe_stage_passes(&cm, &p, 3, 4, 2, M, &one);
    osdp_cost_op_time(&with_plan, 3, 1, 0, 2, M, &ot);
    const double per_micro = (ot.total - ot.step_start - ot.step_end) / M;
    ck_assert(close_rel(one.forward_s, per_micro / 4, 1e-14) && close_rel(one.backward_s, per_micro * 0.75, 1e-14));
    osdp_pipe_stage_passes(&cm, &p, 1, 2, 2, M, &one);
    osdp_cost_op_time(&with_plan, 1, 1, 0, 2, M, &ot);
    ck_assert(close_rel(one.forward_s, (ot.total - ot.step_start - ot.step_end) / M / 3, 1e-14));
    /* messages: b T d fp32 of the boundary's operator before it, M each way */
    const int bounds3[4] = {0, 2, 4, L.n_ops};
    ck_assert_uint_eq(osdp_pipe_boundary_bytes(&L, 2, 3), (size_t)3 * 64 * 64 * 4);
    ck_assert_int_eq(osdp_pipe_stage_p2p_bytes(&L, bounds3, 3, 0, 3, M, OSDP_FLOAT32), (long long)M * 3 * 64 * 64 * 4);
    ck_assert_int_eq(osdp_pipe_stage_p2p_bytes(&L, bounds3, 3, 1, 3, M, OSDP_FLOAT32), 2LL * M * 3 * 64 * 64 * 4);
    ck_assert_int_eq(osdp_pipe_stage_p2p_bytes(&L, bounds3, 3, 2, 3, M, OSDP_FLOAT32), (long long)M * 3 * 64 * 64 * 4);
    osdp_plan_free(&p);
    osdp_layout_free(&L);
}
END_TEST

/* the other in-flight micro-batches' activations and the stage's buffers
 * add to the peak, plan by plan; in_flight 1 changes nothing */
START_TEST(test_in_flight_peak)
{
    osdp_layout L;
    osdp_device d;
    osdp_plan p;
    tiny_case(&L, &d, "", &p, 1);
    p.recompute[1] = 1;
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = 2, .prefetch = 1}, OSDP_COST_PAPER, NULL);
    const long long flat = osdp_cost_peak(&cm, &p, 2, NULL);
    cm.in_flight = 1;
    ck_assert_int_eq(osdp_cost_peak(&cm, &p, 2, NULL), flat);
    cm.in_flight = 3;
    cm.stage_buffer_bytes = 12345;
    long long acts = 0;
    osdp_cost_model with_plan = cm;
    with_plan.recompute = p.recompute;
    for (int i = 0; i < L.n_ops; i++) {
        osdp_op_mem m;
        osdp_cost_op_mem(&with_plan, i, 1, 1, 2, &m);
        ck_assert_int_eq(m.held, 2 * m.acts);
        acts += m.acts;
    }
    ck_assert_int_eq(osdp_cost_peak(&cm, &p, 2, NULL), flat + 2 * acts + 12345);
    osdp_plan_free(&p);
    osdp_layout_free(&L);
}
END_TEST

static unsigned long long g_rng = 15;
static unsigned rnd(void)
{
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(g_rng >> 33);
}

/* A stage's closed-form peak (osdp_pipe_stage_peak) against the runtime's
 * stage schedule (osdp_schedule_peak with the pipeline options), to the
 * byte: random plans (g 1..4, any k, recompute), stages, schedules, M,
 * prefetch on and off, fp32 and bf16 weights, tensor-parallel parts. */
START_TEST(test_stage_peak_is_the_schedule)
{
    const char *models[] = {"tiny", "ic_tiny_mixed", "gpt2_small"};
    int checked = 0;
    for (int mi = 0; mi < 3; mi++)
        for (int tp = 1; tp <= 2; tp++) {
            osdp_model_config cfg;
            load_config(&cfg, models[mi]);
            osdp_layout L;
            if (osdp_layout_build_tp(&L, &cfg, mi == 2 ? 4 : cfg.ctx < 32 ? cfg.ctx : 32, tp, 1) != OSDP_OK) continue;
            osdp_plan p;
            ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
            for (int trial = 0; trial < 200; trial++) {
                for (int i = 0; i < L.n_ops; i++) {
                    int g = L.op[i].type == OSDP_OP_EMBED ? 1 : 1 + (int)(rnd() % 4);
                    if (g > 1 && osdp_op_split(&L.op[i], g, (size_t[OSDP_MAX_SLICES + 1]){0}) != OSDP_OK) g = 1;
                    p.slices[i] = g;
                    p.zdp_slices[i] = (int)(rnd() % (unsigned)(g + 1));
                    p.recompute[i] = osdp_op_can_recompute(L.op[i].type) && rnd() % 2;
                }
                const int P = 2 + (int)(rnd() % (unsigned)(L.n_ops < 4 ? L.n_ops - 1 : 3));
                int bounds[OSDP_MAX_STAGES + 1];
                double cost[64];
                for (int i = 0; i < L.n_ops; i++) cost[i] = 1 + rnd() % 7;
                ck_assert(osdp_stage_split_balanced(cost, L.n_ops, P, bounds) == OSDP_OK);
                const int N = 1 + (int)(rnd() % 3), B = 1 + (int)(rnd() % 2), M = 1 + (int)(rnd() % 5);
                const int prefetch = (int)(rnd() % 2), bf16 = (int)(rnd() % 2);
                const osdp_pipe_schedule kind = rnd() % 2 ? OSDP_PIPE_GPIPE : OSDP_PIPE_1F1B;
                osdp_device d;
                memset(&d, 0, sizeof d);
                d.param_bytes = bf16 ? 2 : 4;
                d.grad_bytes = d.act_bytes = 4;
                osdp_cost_model cm;
                osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = N, .prefetch = prefetch},
                                     OSDP_COST_PAPER, NULL);
                for (int s = 0; s < P; s++) {
                    osdp_schedule_options so = {.geo.n_ranks = N, .geo.micro_batch = B, .geo.accum_steps = M,
                                                .geo.prefetch = prefetch,
                                                .geo.weight_dtype = bf16 ? OSDP_BFLOAT16 : OSDP_FLOAT32, .geo.pp_size = P,
                                                .pp_stage = s, .geo.pipe_schedule = kind};
                    memcpy(so.geo.stage_bounds, bounds, sizeof(int) * (size_t)(P + 1));
                    osdp_memory_prediction pr;
                    ck_assert_msg(osdp_schedule_predict(&L, &p, &so, &pr) == OSDP_OK, "%s", osdp_error_message());
                    const long long closed = osdp_pipe_stage_peak(&cm, &p, bounds, P, s, kind, B, M, NULL);
                    ck_assert_msg(closed == (long long)pr.peak_total,
                                  "%s tp %d trial %d: stage %d of %d (%d:%d) %s M %d N %d B %d prefetch %d %s: closed form "
                                  "%lld, schedule %zu (%+lld)", models[mi], tp, trial, s, P, bounds[s], bounds[s + 1],
                                  osdp_pipe_schedule_name(kind), M, N, B, prefetch, bf16 ? "bf16" : "fp32", closed,
                                  pr.peak_total, closed - (long long)pr.peak_total);
                    checked++;
                }
            }
            osdp_plan_free(&p);
            osdp_layout_free(&L);
        }
    ck_assert(checked > 100);
}
END_TEST

/* bench_l6_d256 on the shipped CPU device, the planner for N ranks, global batch G and a memory limit */
static void bench_case(osdp_model_config *cfg, osdp_device *d, osdp_planner_options *o, int N, int G, long long limit)
{
    load_config(cfg, "bench_l6_d256");
    load_device(d, "cpu_2core");
    osdp_planner_defaults(o);
    o->geo.n_ranks = N;
    o->global_batch = G;
    o->mem_limit = limit;
}

/* one stage: the flat planner's plan and step (same micro-batches) */
START_TEST(test_pipeline_one_stage_is_flat)
{
    osdp_model_config cfg;
    osdp_device d;
    osdp_planner_options o;
    bench_case(&cfg, &d, &o, 4, 32, 200ll << 20);
    osdp_pipe_choice pc;
    osdp_status s = osdp_planner_pipeline(&cfg, cfg.ctx, &d, &o, 1, 1, NULL, OSDP_PIPE_1F1B, &pc);
    ck_assert_msg(s == OSDP_OK, "%s", osdp_error_message());
    osdp_layout L;
    load_layout(&L, "bench_l6_d256", 0);
    osdp_planner_result r;
    ck_assert(osdp_planner_run(&L, &d, &o, &r) == OSDP_OK);
    ck_assert_int_eq(pc.geo.micro_batch, r.plan.geo.micro_batch);
    ck_assert_int_eq(pc.geo.accum_steps, r.plan.geo.accum_steps);
    ck_assert_msg(close_rel(pc.step_s, r.step_s, 1e-12), "%.17g %.17g", pc.step_s, r.step_s);
    ck_assert_int_eq(pc.stage[0].peak_bytes, r.peak_bytes);
    for (int i = 0; i < L.n_ops; i++)
        ck_assert(pc.plan.slices[i] == r.plan.slices[i] && pc.plan.zdp_slices[i] == r.plan.zdp_slices[i]);
    osdp_planner_result_free(&r);
    osdp_layout_free(&L);
    osdp_pipe_choice_free(&pc);
}
END_TEST

/* PP 2 and PP 4: every stage planned, its in-flight micro-batches as the
 * schedule says, the stages' operators covering the model, its peak in the
 * limit; the balanced default split, a given one kept; infeasible names a
 * stage */
START_TEST(test_pipeline_plans)
{
    osdp_model_config cfg;
    osdp_device d;
    osdp_planner_options o;
    bench_case(&cfg, &d, &o, 8, 32, 120ll << 20);
    for (int P = 2; P <= 4; P += 2)
        for (int sched = 0; sched < 2; sched++) {
            const osdp_pipe_schedule kind = sched ? OSDP_PIPE_GPIPE : OSDP_PIPE_1F1B;
            osdp_pipe_choice pc;
            osdp_status s = osdp_planner_pipeline(&cfg, cfg.ctx, &d, &o, 1, P, NULL, kind, &pc);
            ck_assert_msg(s == OSDP_OK, "P %d: %s", P, osdp_error_message());
            ck_assert_int_eq(pc.geo.n_ranks, 8 / P);
            ck_assert_int_eq(pc.geo.micro_batch * pc.geo.accum_steps * pc.geo.n_ranks, 32);
            ck_assert(pc.geo.stage_bounds[0] == 0 && pc.geo.stage_bounds[P] == pc.layout.n_ops);
            long long p2p = 0;
            for (int st = 0; st < P; st++) {
                const osdp_stage_plan *sp = &pc.stage[st];
                ck_assert_int_eq(sp->in_flight, osdp_pipe_in_flight(kind, P, st, pc.geo.accum_steps));
                ck_assert_int_eq(sp->result.plan.n_ops, sp->hi - sp->lo);
                ck_assert(sp->peak_bytes > 0 && sp->peak_bytes <= o.mem_limit);
                ck_assert_int_eq(sp->schedule_peak, sp->peak_bytes);   /* the runtime's stage schedule, to the byte */
                ck_assert(close_rel(sp->busy_s, pc.timing.busy_s[st], 1e-12));
                p2p += sp->p2p_bytes;
            }
            ck_assert(p2p > 0);
            if (kind == OSDP_PIPE_1F1B && pc.geo.accum_steps >= P) {
                ck_assert_int_eq(pc.stage[0].in_flight, P);
                ck_assert_int_eq(pc.stage[P - 1].in_flight, 1);
            }
            ck_assert(pc.step_s >= pc.timing.busy_s[pc.timing.slowest_stage]);
            ck_assert(pc.memory_bottleneck >= 0 && pc.memory_bottleneck < P);
            osdp_pipe_choice_free(&pc);
        }
    /* a given split is kept */
    const int given[3] = {0, 3, 14};
    osdp_pipe_choice pc;
    ck_assert_msg(osdp_planner_pipeline(&cfg, cfg.ctx, &d, &o, 1, 2, given, OSDP_PIPE_1F1B, &pc) == OSDP_OK, "%s",
                  osdp_error_message());
    ck_assert(pc.bounds_given && pc.geo.stage_bounds[1] == 3 && pc.stage[1].lo == 3);
    osdp_pipe_choice_free(&pc);
    /* nothing fits: the stage is named */
    o.mem_limit = 1 << 20;
    ck_assert_int_eq(osdp_planner_pipeline(&cfg, cfg.ctx, &d, &o, 1, 2, NULL, OSDP_PIPE_1F1B, &pc), OSDP_ERR_INFEASIBLE);
    ck_assert_msg(strstr(osdp_error_message(), "pipeline stage 0 of 2"), "%s", osdp_error_message());
    osdp_pipe_choice_free(&pc);
    /* a mesh that does not divide the ranks */
    ck_assert_int_eq(osdp_planner_pipeline(&cfg, cfg.ctx, &d, &o, 1, 3, NULL, OSDP_PIPE_1F1B, &pc), OSDP_ERR_INPUT);
    ck_assert(strstr(osdp_error_message(), "--pp 3"));
    osdp_pipe_choice_free(&pc);
}
END_TEST

/* A stage where nothing fits under recompute auto (GPT-2 small, PP 2 x DP 1, 700 MiB): the no-fit
 * message's smallest peak comes from the memory search, whose smallest peaks lie at transient bounds
 * the search reaches last (it ran for minutes).  The peak it names is exact: a limit of exactly that
 * fits the stage, a byte less does not. */
static long long stage0_need(const osdp_model_config *cfg, const osdp_device *d, osdp_planner_options *o,
                             long long limit, osdp_status *status, int *stage)
{
    o->mem_limit = limit;
    osdp_pipe_choice pc;
    *status = osdp_planner_pipeline(cfg, cfg->ctx, d, o, 1, 2, NULL, OSDP_PIPE_1F1B, &pc);
    const char *msg = osdp_error_message();
    *stage = *status == OSDP_OK ? -1
           : strstr(msg, "pipeline stage 0 of 2") ? 0
           : strstr(msg, "pipeline stage 1 of 2") ? 1 : -2;
    long long need = -1;
    const char *at = *status == OSDP_OK ? NULL : strstr(msg, "smallest peak any plan needs is ");
    if (at) at = strchr(at, '(');
    if (at) need = atoll(at + 1);
    long long peak0 = *status == OSDP_OK ? pc.stage[0].peak_bytes : -1;
    osdp_pipe_choice_free(&pc);   /* whatever the status, as the command does (cli/plan_pipeline.c) */
    return *status == OSDP_OK ? peak0 : need;
}

START_TEST(test_pipeline_no_fit_recompute_auto)
{
    osdp_model_config cfg;
    osdp_device d;
    osdp_planner_options o;
    load_config(&cfg, "gpt2_small");
    load_device(&d, "cpu_2core");
    osdp_planner_defaults(&o);
    o.geo.n_ranks = 2;
    o.global_batch = 32;
    o.recompute_auto = 1;
    osdp_status s;
    int stage;
    const long long need = stage0_need(&cfg, &d, &o, 700ll << 20, &s, &stage);
    ck_assert_msg(s == OSDP_ERR_INFEASIBLE && stage == 0 && need > (700ll << 20), "%d %d %lld: %s", s, stage, need,
                  osdp_error_message());
    /* a byte less: stage 0 still does not fit, and names the same peak */
    ck_assert_int_eq(stage0_need(&cfg, &d, &o, need - 1, &s, &stage), need);
    ck_assert_msg(s == OSDP_ERR_INFEASIBLE && stage == 0, "%d %d: %s", s, stage, osdp_error_message());
    /* exactly that: stage 0 fits (at that peak when the whole pipeline does) */
    const long long at = stage0_need(&cfg, &d, &o, need, &s, &stage);
    ck_assert_msg(stage == 1 || (s == OSDP_OK && at == need), "%d %d %lld: %s", s, stage, at, osdp_error_message());
    /* On 8 ranks (DP 4 a stage) the memory search has ten times the transient bounds to try: it
     * proves ranges of them at once (plan_search.c; it took over 20 s of CPU a search before).  The
     * named peak is the smallest of stage 0's operators 0:17; at that limit the pipeline plans. */
    o.geo.n_ranks = 8;
    const long long need8 = stage0_need(&cfg, &d, &o, 700ll << 20, &s, &stage);
    ck_assert_msg(s == OSDP_ERR_INFEASIBLE && stage == 0 && need8 > (700ll << 20) && need8 < need, "%d %d %lld: %s", s,
                  stage, need8, osdp_error_message());
    ck_assert_msg(strstr(osdp_error_message(), "operators 0:17") && strstr(osdp_error_message(), "balanced split 0:17,17:26")
                  && strstr(osdp_error_message(), "8 micro-batches a step"), "%s", osdp_error_message());
    /* the peak named is the smallest at the step's 8 micro-batches (its reduce-once choices too, as the
     * search's): a byte less still does not fit and names it again; that limit plans */
    ck_assert_int_eq(stage0_need(&cfg, &d, &o, need8 - 1, &s, &stage), need8);
    ck_assert_msg(s == OSDP_ERR_INFEASIBLE && stage == 0, "%d %d: %s", s, stage, osdp_error_message());
    (void)stage0_need(&cfg, &d, &o, need8, &s, &stage);
    ck_assert_msg(s == OSDP_OK, "%d %d: %s", s, stage, osdp_error_message());
}
END_TEST

static Suite *planner_pp_suite(void)
{
    const TTest *sim[] = {test_hand_built_two_stages, test_unbalanced_by_hand, test_step_work_by_hand, test_bubble_closed_form,
                         NULL};
    const TTest *split[] = {test_balanced_split_is_optimal, test_balanced_split_ties, test_planner_stage_split, NULL};
    const TTest *model[] = {test_device_p2p, test_messages_pieces_and_bf16, test_stage_passes_and_one_stage, test_in_flight_peak,
                            test_stage_peak_is_the_schedule, NULL};
    const TTest *planner[] = {test_pipeline_one_stage_is_flat, test_pipeline_plans, test_pipeline_no_fit_recompute_auto,
                              NULL};
    const osdp_check_case cases[] = {
        {.name = "simulate", .tests = sim},
        {.name = "split", .tests = split},
        {.name = "cost_model", .tests = model},
        {.name = "planner", .tests = planner},
    };
    return osdp_check_suite("planner_pp", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = planner_pp_suite};

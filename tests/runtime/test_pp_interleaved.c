/* Tests for interleaved 1F1B (osdp/pipeline.h: Megatron-LM's virtual
 * stages; osdp/schedule.h: the chunks of a stage):
 *   order     every stage's 2 V M passes name each (chunk, micro-batch) once
 *             each way, the forward first; each chunk runs its forwards and
 *             its backwards in micro-batch order (so an operator adds its
 *             gradients in 1F1B's order: the same losses bit for bit); V = 1
 *             is 1F1B; stage 0 holds osdp_pipe_in_flight_chunks
 *   messages  the runtime's message semantics over the ring of stages
 *             (blocking receives posted when reached, activation sends
 *             waited in the backward, gradient sends waited after the next
 *             backward's receive) never deadlock, for P 2..8, V 1..4, M up
 *             to 4 P; a blocking gradient send would (P 2, V 2, M 2)
 *   bubble    the cost model's simulation of equal chunks without message
 *             time idles (P - 1) / (V M + P - 1) (osdp_pipe_bubble_chunks),
 *             the step (M + (P - 1) / V) (f + b) of a stage; messages
 *             cost V times 1F1B's bytes
 *   schedule  a stage's step list over its chunks: state of its chunks'
 *             operators only, M backwards per operator in micro-batch order,
 *             one message per chunk boundary and micro-batch each way, every
 *             gradient send waited once; its peak is the events' walk
 *   errors    V without interleaving, M not a multiple of P, more chunks
 *             than operators: refused naming the options; --stages's
 *             errors say chunk where V > 1
 * Bitwise equality with 1F1B and measured = predicted memory on real ranks:
 * tests/system/test_pp_interleaved.sh. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/pipeline.h"
#include "osdp/pipeline_cost.h"
#include "osdp/schedule.h"

#include "check_main.h"
#include "test_inputs.h"

#define MAX_PASSES 4096

START_TEST(test_order)
{
    static osdp_pipe_pass order[MAX_PASSES], plain[MAX_PASSES];
    for (int P = 2; P <= 8; P++)
        for (int V = 1; V <= 4; V++)
            for (int M = P; M <= 4 * P; M += P)
                for (int s = 0; s < P; s++) {
                    osdp_pipe_order_chunks(OSDP_PIPE_INTERLEAVED, P, V, s, M, order);
                    int fwd_next[8] = {0}, bwd_next[8] = {0}, held = 0, most = 0;
                    for (int q = 0; q < 2 * V * M; q++) {
                        const osdp_pipe_pass p = order[q];
                        ck_assert(p.chunk >= 0 && p.chunk < V);
                        if (!p.backward) {
                            ck_assert_int_eq(p.micro, fwd_next[p.chunk]++);
                        } else {
                            ck_assert_int_eq(p.micro, bwd_next[p.chunk]++);
                            ck_assert_int_gt(fwd_next[p.chunk], p.micro);   /* its forward ran */
                        }
                        held += p.backward ? -1 : 1;
                        if (held > most) most = held;
                    }
                    for (int c = 0; c < V; c++) ck_assert(fwd_next[c] == M && bwd_next[c] == M);
                    ck_assert_int_eq(most, osdp_pipe_in_flight_chunks(OSDP_PIPE_INTERLEAVED, P, V, s, M));
                    if (V == 1) {
                        osdp_pipe_order(OSDP_PIPE_1F1B, P, s, M, plain);
                        for (int q = 0; q < 2 * M; q++)
                            ck_assert(plain[q].micro == order[q].micro && plain[q].backward == order[q].backward);
                    }
                }
    /* Megatron's warm-up on stage 0 of 4, V 2, M 8: 2 (P - 1) + (V - 1) P = 10 forwards, 11 in flight */
    ck_assert_int_eq(osdp_pipe_in_flight_chunks(OSDP_PIPE_INTERLEAVED, 4, 2, 0, 8), 11);
}
END_TEST

/* The runtime's messages between the P stages (osdp/schedule.h), step by
 * step: a stage advances while its next operation can complete.  Returns 1
 * when every stage finishes. */
enum { RA, SA, RG, SG, WG, WA };
typedef struct msg_op { int kind, chunk, micro; } msg_op;

static int stage_ops(int P, int V, int s, int M, int defer, msg_op *out)
{
    static osdp_pipe_pass order[MAX_PASSES];
    osdp_pipe_order_chunks(OSDP_PIPE_INTERLEAVED, P, V, s, M, order);
    const int last = P * V - 1;
    int n = 0, pending = -1, pending_micro = 0;
    for (int q = 0; q < 2 * V * M; q++) {
        const int g = order[q].chunk * P + s, m = order[q].micro;
        if (!order[q].backward) {
            if (g > 0) out[n++] = (msg_op){RA, g, m};
            if (g < last) out[n++] = (msg_op){SA, g, m};
            continue;
        }
        if (g < last) out[n++] = (msg_op){RG, g, m};
        if (pending >= 0) out[n++] = (msg_op){WG, pending, pending_micro};
        pending = -1;
        if (g > 0) {
            out[n++] = (msg_op){SG, g, m};
            if (defer) pending = g, pending_micro = m;
            else out[n++] = (msg_op){WG, g, m};   /* blocking: waits for its receive */
        }
        if (g < last) out[n++] = (msg_op){WA, g, m};
    }
    if (pending >= 0) out[n++] = (msg_op){WG, pending, pending_micro};
    return n;
}

static int find(const msg_op *ops, int n, int kind, int chunk, int micro)
{
    for (int i = 0; i < n; i++)
        if (ops[i].kind == kind && ops[i].chunk == chunk && ops[i].micro == micro) return i;
    return -1;
}

static int runs_through(int P, int V, int M, int defer)
{
    static msg_op ops[8][4 * MAX_PASSES];
    int n[8], pos[8] = {0};
    for (int s = 0; s < P; s++) n[s] = stage_ops(P, V, s, M, defer, ops[s]);
    for (;;) {
        int moved = 0, done = 1;
        for (int s = 0; s < P; s++)
            while (pos[s] < n[s]) {
                const msg_op o = ops[s][pos[s]];
                const int prev = (s + P - 1) % P, next = (s + 1) % P;
                int ok = 1;
                /* a receive completes once the send was started; a wait once the receive was posted */
                if (o.kind == RA) ok = pos[prev] > find(ops[prev], n[prev], SA, o.chunk - 1, o.micro);
                if (o.kind == RG) ok = pos[next] > find(ops[next], n[next], SG, o.chunk + 1, o.micro);
                if (o.kind == WG) ok = pos[prev] >= find(ops[prev], n[prev], RG, o.chunk - 1, o.micro);
                if (o.kind == WA) ok = pos[next] >= find(ops[next], n[next], RA, o.chunk + 1, o.micro);
                if (!ok) break;
                pos[s]++;
                moved = 1;
            }
        for (int s = 0; s < P; s++) done &= pos[s] == n[s];
        if (done) return 1;
        if (!moved) return 0;
    }
}

START_TEST(test_messages)
{
    int cases = 0;
    for (int P = 2; P <= 8; P++)
        for (int V = 1; V <= 4; V++)
            for (int M = P; M <= 4 * P; M += P, cases++)
                ck_assert_msg(runs_through(P, V, M, 1), "P %d V %d M %d deadlocks", P, V, M);
    ck_assert_int_eq(cases, 7 * 4 * 4);
    /* why the gradient sends are deferred: two stages each in a send whose receive the other posts later */
    ck_assert(!runs_through(2, 2, 2, 0));
    ck_assert(runs_through(4, 1, 8, 0));   /* 1F1B's blocking sends are fine */
}
END_TEST

START_TEST(test_bubble)
{
    osdp_pipe_stage_cost chunk[OSDP_MAX_CHUNKS];
    /* the last: more chunks than stages allowed (Megatron-LM's 1T row's P 64 x V 2, 128 chunks of one layer) */
    const int cases[][3] = {{2, 2, 2}, {2, 2, 4}, {4, 2, 8}, {4, 3, 8}, {4, 2, 4}, {3, 2, 6}, {8, 4, 16}, {4, 1, 8},
                            {OSDP_MAX_STAGES, OSDP_MAX_CHUNKS / OSDP_MAX_STAGES, 2 * OSDP_MAX_STAGES}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int P = cases[k][0], V = cases[k][1], M = cases[k][2];
        for (int g = 0; g < P * V; g++) chunk[g] = (osdp_pipe_stage_cost){.forward_s = 1.0 / V, .backward_s = 2.0 / V};
        osdp_pipe_timing t;
        ck_assert(osdp_pipe_simulate_chunks(OSDP_PIPE_INTERLEAVED, P, V, M, chunk, NULL, &t) == OSDP_OK);
        ck_assert_msg(fabs(t.idle_fraction - osdp_pipe_bubble_chunks(P, V, M)) < 1e-12, "P %d V %d M %d: %g vs %g", P,
                      V, M, t.idle_fraction, osdp_pipe_bubble_chunks(P, V, M));
        ck_assert(fabs(t.step_s - (M + (double)(P - 1) / V) * 3) < 1e-9);
        ck_assert(fabs(t.bubble_closed - (double)(P - 1) / (V * M + P - 1)) < 1e-15);
    }
    /* V = 1 is 1F1B's simulation, message times included */
    osdp_pipe_stage_cost stage[3] = {{.forward_s = 1, .backward_s = 2}, {.forward_s = 1.5, .backward_s = 2.5},
                                     {.forward_s = 0.5, .backward_s = 1}};
    const double msg[2] = {0.25, 0.5};
    osdp_pipe_timing a, b;
    ck_assert(osdp_pipe_simulate(OSDP_PIPE_1F1B, 3, 6, stage, msg, &a) == OSDP_OK);
    ck_assert(osdp_pipe_simulate_chunks(OSDP_PIPE_1F1B, 3, 1, 6, stage, msg, &b) == OSDP_OK);
    ck_assert(a.step_s == b.step_s && a.idle_fraction == b.idle_fraction);
    /* V chunks of a model cut into P V equal boundaries: V times 1F1B's p2p bytes on a middle stage */
    osdp_layout L;
    load_layout(&L, "tests/inputs/t_ic.ini", 8);   /* 8 operators */
    const int eight[] = {0, 2, 4, 6, 8};
    const long long plain = osdp_pipe_stage_p2p_bytes(&L, (const int[]){0, 4, 8}, 2, 0, 2, 4, OSDP_FLOAT32);
    const long long chunks = osdp_pipe_stage_p2p_bytes_chunks(&L, eight, 2, 2, 0, 2, 4, OSDP_FLOAT32);
    ck_assert_int_eq(plain, 4LL * 2 * 8 * L.op[3].width * 4);   /* M B T d fp32, d of the operator before the boundary */
    /* stage 0 of P 2, V 2: chunk 0's output (d 32), chunk 2's output (after op 5: d 32) and chunk 2's input gradient
     * (after op 3: d 48) */
    ck_assert_int_eq(chunks, 4LL * 2 * 8 * (L.op[1].width + L.op[5].width + L.op[3].width) * 4);
    osdp_layout_free(&L);
}
END_TEST

/* the stage's chunks as the schedule holds them */
static void check_chunk_schedule(const osdp_schedule *sc, const int *bounds, int P, int V, int s, int M)
{
    const osdp_layout *L = sc->layout;
    ck_assert_int_eq(sc->n_chunks, V);
    int mine[16] = {0};
    for (int c = 0; c < V; c++) {
        ck_assert_int_eq(sc->chunk_lo[c], bounds[c * P + s]);
        ck_assert_int_eq(sc->chunk_hi[c], bounds[c * P + s + 1]);
        for (int i = sc->chunk_lo[c]; i < sc->chunk_hi[c]; i++) mine[i] = 1;
    }
    for (int i = 0; i < L->n_ops; i++) ck_assert_int_eq(osdp_schedule_has_op(sc, i), mine[i]);
    for (int e = 0; e < sc->n_setup; e++)
        if (sc->setup[e].buffer == OSDP_BUF_STATE) ck_assert(mine[sc->setup[e].op]);
    int backward_next[16] = {0}, recv_acts = 0, send_acts = 0, recv_grad = 0, send_grad = 0, waits = 0, open_send = 0;
    for (int e = 0; e < sc->n_micro; e++) {
        const osdp_event *ev = &sc->micro[e];
        if (ev->kind == OSDP_EV_COMPUTE && ev->pass == OSDP_PASS_BACKWARD) {
            ck_assert(mine[ev->op]);
            ck_assert_int_eq(ev->micro, backward_next[ev->op]++);   /* micro-batch order, as 1F1B */
        }
        recv_acts += ev->kind == OSDP_EV_RECV_ACTS;
        send_acts += ev->kind == OSDP_EV_SEND_ACTS;
        recv_grad += ev->kind == OSDP_EV_RECV_GRAD;
        if (ev->kind == OSDP_EV_SEND_GRAD) {
            ck_assert(!ev->blocking && !open_send);
            open_send = 1;
            send_grad++;
        }
        if (ev->kind == OSDP_EV_SEND_GRAD_WAIT) {
            ck_assert(open_send);
            open_send = 0;
            waits++;
        }
        /* the workspace is written by a backward only once the previous send is waited */
        if (ev->kind == OSDP_EV_COMPUTE && ev->pass != OSDP_PASS_FORWARD) ck_assert(!open_send);
    }
    ck_assert(!open_send);
    for (int i = 0; i < L->n_ops; i++) ck_assert_int_eq(backward_next[i], mine[i] ? M : 0);
    int inputs = 0, outputs = 0;   /* the stage's chunk boundaries */
    for (int c = 0; c < V; c++) {
        inputs += sc->chunk_lo[c] > 0;
        outputs += sc->chunk_hi[c] < L->n_ops;
    }
    ck_assert_int_eq(recv_acts, M * inputs);
    ck_assert_int_eq(send_grad, M * inputs);
    ck_assert_int_eq(waits, M * inputs);
    ck_assert_int_eq(send_acts, M * outputs);
    ck_assert_int_eq(recv_grad, M * outputs);
}

START_TEST(test_schedule)
{
    osdp_layout L;
    load_layout(&L, "tests/inputs/t_ic.ini", 8);   /* 8 operators */
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
    unsigned rng = 7;
    const int shapes[][3] = {{2, 2, 2}, {2, 2, 4}, {2, 3, 6}, {2, 4, 4}, {4, 2, 8}, {4, 2, 4}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int P = shapes[k][0], V = shapes[k][1], M = shapes[k][2], G = P * V;
        for (int i = 0; i < L.n_ops; i++) {
            rng = rng * 1103515245u + 12345u;
            /* the embedding, and a fused head (the default), are never split */
            const int g = L.op[i].type == OSDP_OP_EMBED || L.op[i].type == OSDP_OP_HEAD ? 1 : 1 + (int)((rng >> 16) % 3);
            p.slices[i] = g;
            p.zdp_slices[i] = (int)((rng >> 8) % (unsigned)(g + 1));
            p.recompute[i] = osdp_op_can_recompute(L.op[i].type) && (rng >> 20) % 2;
        }
        osdp_schedule_options so = {.geo.n_ranks = 2, .geo.micro_batch = 1, .geo.accum_steps = M, .geo.prefetch = (int)(k % 2),
                                    .geo.weight_dtype = OSDP_FLOAT32, .geo.pad_quantum = 1, .geo.pp_size = P,
                                    .geo.pipe_schedule = OSDP_PIPE_INTERLEAVED, .geo.virtual_stages = V};
        for (int g = 0; g <= G; g++) so.geo.stage_bounds[g] = g * L.n_ops / G;
        for (int s = 0; s < P; s++) {
            so.pp_stage = s;
            osdp_schedule sc;
            ck_assert_msg(osdp_schedule_build(&sc, &L, &p, &so) == OSDP_OK, "%s", osdp_error_message());
            check_chunk_schedule(&sc, so.geo.stage_bounds, P, V, s, M);
            /* the peak is the walk of its lists' allocations */
            osdp_memory_prediction pred, eval;
            osdp_schedule_peak(&sc, &pred);
            osdp_schedule_eval_peak(&sc, &eval);
            ck_assert_uint_le(eval.peak_total, pred.peak_total);
            size_t total = 0, most = 0;
            const osdp_event *lists[] = {sc.setup, sc.micro, sc.optim, sc.eval};
            const int lens[] = {sc.n_setup, sc.n_micro, sc.n_optim, sc.n_eval};
            for (int l = 0; l < 4; l++)
                for (int e = 0; e < lens[l]; e++) {
                    if (lists[l][e].kind == OSDP_EV_ALLOC) total += lists[l][e].bytes;
                    if (lists[l][e].kind == OSDP_EV_FREE) total -= lists[l][e].bytes;
                    if (total > most) most = total;
                }
            ck_assert_uint_eq(most, pred.peak_total);
            osdp_schedule_free(&sc);
        }
    }
    osdp_plan_free(&p);
    osdp_layout_free(&L);
}
END_TEST

START_TEST(test_errors)
{
    ck_assert_int_eq(osdp_pipe_check(OSDP_PIPE_1F1B, 2, 2, 4, 8), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "--virtual-stages 2 needs --schedule interleaved"), "%s",
                  osdp_error_message());
    ck_assert_int_eq(osdp_pipe_check(OSDP_PIPE_INTERLEAVED, 4, 2, 6, 10), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "6 micro-batches per step is not a multiple of --pp 4"), "%s",
                  osdp_error_message());
    ck_assert_int_eq(osdp_pipe_check(OSDP_PIPE_INTERLEAVED, 4, 2, 8, 6), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "8 model chunks for a model of 6 operators"), "%s", osdp_error_message());
    ck_assert_int_eq(osdp_pipe_check(OSDP_PIPE_INTERLEAVED, 1, 2, 8, 6), OSDP_ERR_INPUT);
    ck_assert_int_eq(osdp_pipe_check(OSDP_PIPE_INTERLEAVED, 4, 2, 8, 8), OSDP_OK);
    osdp_pipe_schedule kind;
    ck_assert(osdp_pipe_schedule_parse("interleaved", &kind) == OSDP_OK && kind == OSDP_PIPE_INTERLEAVED);
    ck_assert_str_eq(osdp_pipe_schedule_name(kind), "interleaved");
    /* the schedule refuses them too */
    osdp_layout L;
    load_layout(&L, "tests/inputs/t_small.ini", 8);   /* 6 operators */
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
    osdp_schedule sc;
    osdp_schedule_options so = {.geo.n_ranks = 1, .geo.micro_batch = 1, .geo.accum_steps = 3, .geo.weight_dtype = OSDP_FLOAT32,
                                .geo.pp_size = 2, .geo.pipe_schedule = OSDP_PIPE_INTERLEAVED, .geo.virtual_stages = 2,
                                .geo.stage_bounds = {0, 2, 3, 5, 6}};
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "not a multiple of --pp 2"), "%s", osdp_error_message());
    so.geo.accum_steps = 4;
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_OK);
    osdp_schedule_free(&sc);
    so.geo.stage_bounds[2] = 2;   /* chunk 1 empty */
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "chunk 1 of the pipeline has no operator"), "%s", osdp_error_message());
    osdp_plan_free(&p);
    osdp_layout_free(&L);
}
END_TEST

/* --stages with V > 1 lists chunks: its errors say chunk, with V = 1 stage */
START_TEST(test_stages_say_chunk)
{
    static const struct {
        const char *text;
        int V;
        const char *says;
    } cases[] = {
        {"0:2,3:4,4:5,5:6", 2, "chunk 1 starts at operator 3, where chunk 0 ended at 2"},
        {"0:2,2:2,2:5,5:6", 2, "chunk 1's range 2:2 is empty"},
        {"0:2,2:4,4:6", 2, "3 ranges for the 4 chunks of --pp 2 x --virtual-stages 2"},
        {"0:1,1:2,2:3,3:4,4:6", 2, "more ranges than the 4 chunks of --pp 2 x --virtual-stages 2"},
        {"0:2,3:6", 1, "stage 1 starts at operator 3, where stage 0 ended at 2"},
        {"0:2,2:2", 1, "stage 1's range 2:2 is empty"},
        {"0:6", 1, "1 range for the 2 stages of --pp 2"},
    };
    int bounds[OSDP_MAX_CHUNKS + 1];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_int_eq(osdp_chunk_split_parse(cases[i].text, 6, 2, cases[i].V, bounds), OSDP_ERR_INPUT);
        ck_assert_msg(strstr(osdp_error_message(), cases[i].says), "%s: %s", cases[i].text, osdp_error_message());
        ck_assert_msg(cases[i].V == 1 || !strstr(osdp_error_message(), "stage "), "%s", osdp_error_message());
    }
    ck_assert_int_eq(osdp_chunk_split_parse("0:2,2:3,3:5,5:6", 6, 2, 2, bounds), OSDP_OK);
    ck_assert_int_eq(bounds[4], 6);
    ck_assert_int_eq(osdp_chunk_split_parse("0:1,1:2", 6, OSDP_MAX_STAGES, OSDP_MAX_CHUNKS / OSDP_MAX_STAGES + 1, bounds),
                     OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "model chunks, at most"), "%s", osdp_error_message());
    /* P V up to OSDP_MAX_CHUNKS, past OSDP_MAX_STAGES: one operator a chunk */
    char text[OSDP_STAGE_SPLIT_CHARS];
    int one_each[OSDP_MAX_CHUNKS + 1];
    for (int c = 0; c <= OSDP_MAX_CHUNKS; c++) one_each[c] = c;
    osdp_stage_split_format(one_each, OSDP_MAX_CHUNKS, text, sizeof text);
    ck_assert_int_eq(osdp_chunk_split_parse(text, OSDP_MAX_CHUNKS, OSDP_MAX_STAGES, OSDP_MAX_CHUNKS / OSDP_MAX_STAGES,
                                            bounds), OSDP_OK);
    ck_assert_int_eq(bounds[OSDP_MAX_CHUNKS], OSDP_MAX_CHUNKS);
    ck_assert_int_eq(osdp_pipe_check(OSDP_PIPE_INTERLEAVED, OSDP_MAX_STAGES, OSDP_MAX_CHUNKS / OSDP_MAX_STAGES,
                                     OSDP_MAX_STAGES, 0), OSDP_OK);
    ck_assert_int_eq(osdp_pipe_check(OSDP_PIPE_INTERLEAVED, OSDP_MAX_STAGES, OSDP_MAX_CHUNKS / OSDP_MAX_STAGES + 1,
                                     OSDP_MAX_STAGES, 0), OSDP_ERR_INPUT);
}
END_TEST

static Suite *pp_interleaved_suite(void)
{
    const TTest *tests[] = {test_order, test_messages, test_bubble, test_schedule, test_errors, test_stages_say_chunk,
                            NULL};
    const osdp_check_case cases[] = {{.name = "pp_interleaved", .tests = tests}};
    return osdp_check_suite("pp_interleaved", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = pp_interleaved_suite};

/* Tests for a pipeline stage's schedule (osdp/schedule.h, the pipeline
 * paragraph; osdp/pipeline.h), on random plans, stage splits, micro-batch
 * counts and both schedules, for every stage:
 *   shape    setup holds the state of the stage's operators only; the step
 *            list touches only them, frees every buffer it allocates (per
 *            buffer, operator and micro-batch), runs every operator's
 *            backward and reduce-scatter once per micro-batch, in
 *            micro-batch order, adds the loss M times on the last stage
 *            only, and its optimizer updates the stage's operators
 *   bound    the micro-batches whose activations the stage holds at once
 *            are osdp_pipe_in_flight's: min(P - s, M) under 1F1B, M under
 *            GPipe (so 1F1B's activation peak never exceeds GPipe's)
 *   messages per step a stage before the last sends M (B, T, d) outputs
 *            forward, one after the first M input gradients back, and
 *            receives as many; a send is waited before its buffer's free
 *   peak     osdp_schedule_peak equals the test's own walk of the setup,
 *            the step, the optimizer and the eval list, and the step's
 *            alone: the validation pass stays within it
 *   sharding the stages' sharded state adds up to the unpipelined schedule's
 *   errors   stage splits that are not contiguous covers are refused
 * Measured = predicted per stage on real ranks: tests/system/test_pp.sh. */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/pipeline.h"
#include "osdp/schedule.h"

#include "check_main.h"
#include "test_inputs.h"

static unsigned long long g_rng = 20261115;
static unsigned rnd(void)
{
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(g_rng >> 33);
}

static const char *const MODELS[] = {"tests/inputs/t_small.ini", "tests/inputs/t_ic.ini"};

/* a random plan (splits, ZDP slices, recompute) and a random contiguous split into P stages */
static void random_case(const osdp_layout *L, osdp_plan *p, int P, int *bounds)
{
    for (int i = 0; i < L->n_ops; i++) {
        int g = L->op[i].type == OSDP_OP_EMBED ? 1 : 1 + (int)(rnd() % 3);
        if (!osdp_op_can_split(&L->op[i])) g = 1;   /* a fused head is never cut */
        p->slices[i] = g;
        p->zdp_slices[i] = (int)(rnd() % (unsigned)(g + 1));
        p->recompute[i] = osdp_op_can_recompute(L->op[i].type) && rnd() % 2;
    }
    bounds[0] = 0;
    bounds[P] = L->n_ops;
    for (int s = 1; s < P; s++) {   /* at least one operator per stage */
        const int lo = bounds[s - 1] + 1, hi = L->n_ops - (P - s);
        bounds[s] = lo + (int)(rnd() % (unsigned)(hi - lo + 1));
    }
}

static size_t boundary_bytes(const osdp_layout *L, int B, int op)
{
    return (size_t)B * (size_t)L->T * (size_t)L->op[op].width * sizeof(float);
}

static int is_activation(osdp_buffer_kind kind)
{
    return kind == OSDP_BUF_ACTS || kind == OSDP_BUF_KEPT || kind == OSDP_BUF_STAGE_INPUT;
}

/* peak of setup + the first n_lists of step, optimizer, eval, walked here */
static void walk_peak(const osdp_schedule *sc, int n_lists, size_t *peak_total)
{
    const osdp_event *lists[] = {sc->setup, sc->micro, sc->optim, sc->eval};
    const int lens[] = {sc->n_setup, sc->n_micro, sc->n_optim, sc->n_eval};
    size_t total = 0;
    *peak_total = 0;
    for (int l = 0; l <= n_lists; l++)
        for (int e = 0; e < lens[l]; e++) {
            const osdp_event *ev = &lists[l][e];
            if (ev->kind == OSDP_EV_ALLOC) total += ev->bytes;
            if (ev->kind == OSDP_EV_FREE) total -= ev->bytes;
            if (total > *peak_total) *peak_total = total;
        }
}

/* the stage's step list: shape, in-flight bound, messages; returns the
 * activation bytes' peak of the list */
static size_t check_step(const osdp_schedule *sc, int P, int s, int M, int B)
{
    const osdp_layout *L = sc->layout;
    const int lo = sc->op_lo, hi = sc->op_hi, n = L->n_ops;
    /* held[kind][op][micro or slice]: bytes of that buffer (activations are
     * per micro-batch, the other buffers per slice: a prefetch may start in
     * one micro-batch's pass for the next one's) */
    size_t held[OSDP_BUF_N_KINDS][16][OSDP_MAX_SLICES];
    memset(held, 0, sizeof held);
    ck_assert(L->n_ops <= 16 && M <= OSDP_MAX_SLICES);   /* the table's bounds */
    int in_flight = 0, most_in_flight = 0, loss_sums = 0, send_waits = 0;
    int backwards[16] = {0}, scatters[16] = {0};   /* per operator */
    size_t acts = 0, acts_peak = 0, sent_fwd = 0, sent_bwd = 0, recv_fwd = 0, recv_bwd = 0;
    int holding[OSDP_MAX_SLICES] = {0};   /* activation buffers held per micro-batch */
    for (int e = 0; e < sc->n_micro; e++) {
        const osdp_event *ev = &sc->micro[e];
        ck_assert_int_ge(ev->micro, 0);
        ck_assert_int_lt(ev->micro, M);
        if (ev->kind != OSDP_EV_SUMS_ALL_REDUCE) {
            ck_assert_msg(ev->op >= lo && ev->op < hi, "stage %d: event %d on operator %d", s, e, ev->op);
        }
        size_t *h = &held[ev->buffer][ev->op][is_activation(ev->buffer) ? ev->micro : ev->slice];
        switch (ev->kind) {
        case OSDP_EV_ALLOC:
            ck_assert_msg(*h == 0, "stage %d: buffer %d of op %d micro %d slice %d allocated twice", s, ev->buffer,
                          ev->op, ev->micro, ev->slice);
            *h = ev->bytes;
            if (is_activation(ev->buffer)) {
                acts += ev->bytes;
                if (acts > acts_peak) acts_peak = acts;
                if (holding[ev->micro]++ == 0 && ++in_flight > most_in_flight) most_in_flight = in_flight;
            }
            break;
        case OSDP_EV_FREE:
            ck_assert_uint_eq(*h, ev->bytes);
            *h = 0;
            if (is_activation(ev->buffer)) {
                acts -= ev->bytes;
                if (--holding[ev->micro] == 0) in_flight--;
            }
            break;
        case OSDP_EV_COMPUTE:
            if (ev->pass == OSDP_PASS_BACKWARD) {   /* micro-batch order */
                ck_assert_int_eq(backwards[ev->op], ev->micro);
                backwards[ev->op]++;
            }
            break;
        case OSDP_EV_REDUCE_SCATTER: scatters[ev->op]++; break;
        case OSDP_EV_LOSS_SUM: loss_sums++; break;
        case OSDP_EV_SEND_ACTS:
            ck_assert_int_eq(ev->op, hi - 1);
            sent_fwd += ev->bytes;
            break;
        case OSDP_EV_SEND_ACTS_WAIT: {   /* once its gradient is back, before the output's buffer is used again */
            const osdp_event *prev = &sc->micro[e - 1];
            ck_assert(e > 0 && prev->kind == OSDP_EV_RECV_GRAD && prev->op == hi - 1 && prev->micro == ev->micro);
            ck_assert(held[OSDP_BUF_ACTS][hi - 1][ev->micro] || held[OSDP_BUF_KEPT][hi - 1][ev->micro]);
            send_waits++;
            break;
        }
        case OSDP_EV_SEND_GRAD: ck_assert_int_eq(ev->op, lo); sent_bwd += ev->bytes; break;
        case OSDP_EV_RECV_ACTS:
            ck_assert_uint_eq(held[OSDP_BUF_STAGE_INPUT][lo][ev->micro], ev->bytes);   /* into its buffer */
            recv_fwd += ev->bytes;
            break;
        case OSDP_EV_RECV_GRAD: ck_assert_int_eq(ev->op, hi - 1); recv_bwd += ev->bytes; break;
        default: break;
        }
    }
    for (int k = 0; k < OSDP_BUF_N_KINDS; k++)
        for (int op = 0; op < n; op++)
            for (int m = 0; m < M; m++) ck_assert_msg(held[k][op][m] == 0, "stage %d: buffer %d of op %d micro %d kept", s, k, op, m);
    for (int op = lo; op < hi; op++) {
        ck_assert_int_eq(backwards[op], M);
        ck_assert_int_eq(scatters[op], M);
    }
    ck_assert_int_eq(loss_sums, hi == n ? M : 0);
    ck_assert_int_eq(most_in_flight, osdp_pipe_in_flight(sc->opt.geo.pipe_schedule, P, s, M));
    const size_t out = s < P - 1 ? (size_t)M * boundary_bytes(L, B, hi - 1) : 0;
    const size_t in = s > 0 ? (size_t)M * boundary_bytes(L, B, lo - 1) : 0;
    ck_assert_uint_eq(sent_fwd, out);
    ck_assert_uint_eq(recv_bwd, out);
    ck_assert_int_eq(send_waits, s < P - 1 ? M : 0);
    ck_assert_uint_eq(sent_bwd, in);
    ck_assert_uint_eq(recv_fwd, in);
    return acts_peak;
}

/* setup, optimizer and eval of stage s */
static void check_lists(const osdp_schedule *sc, int P, int s)
{
    const int lo = sc->op_lo, hi = sc->op_hi;
    int states = 0;
    for (int e = 0; e < sc->n_setup; e++)
        if (sc->setup[e].buffer == OSDP_BUF_STATE) {
            ck_assert(sc->setup[e].op >= lo && sc->setup[e].op < hi);
            states++;
        }
    ck_assert_int_eq(states, hi - lo);
    ck_assert_int_eq(sc->n_optim, 2 * (hi - lo) + 1);
    int recv = 0, send = 0;
    size_t held = 0;
    for (int e = 0; e < sc->n_eval; e++) {
        const osdp_event *ev = &sc->eval[e];
        ck_assert(ev->kind != OSDP_EV_RECV_GRAD && ev->kind != OSDP_EV_SEND_GRAD && ev->kind != OSDP_EV_REDUCE_SCATTER);
        recv += ev->kind == OSDP_EV_RECV_ACTS;
        send += ev->kind == OSDP_EV_SEND_ACTS;
        if (ev->kind == OSDP_EV_ALLOC) held += ev->bytes;
        if (ev->kind == OSDP_EV_FREE) held -= ev->bytes;
    }
    ck_assert_int_eq(recv, s > 0);
    ck_assert_int_eq(send, s < P - 1);
    ck_assert_uint_eq(held, 0);
}

static size_t state_bytes(const osdp_schedule *sc)
{
    size_t sum = 0;
    for (int e = 0; e < sc->n_setup; e++)
        if (sc->setup[e].buffer == OSDP_BUF_STATE) sum += sc->setup[e].bytes;
    return sum;
}

START_TEST(test_stage_schedules)
{
    int checked = 0;
    for (int mi = 0; mi < 2; mi++) {
        osdp_layout L;
        load_layout(&L, MODELS[mi], 8);
        osdp_plan p;
        ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
        for (int r = 0; r < 40; r++) {
            const int P = 2 + (int)(rnd() % 3), M = 1 + (int)(rnd() % 6), B = 1 + (int)(rnd() % 2);
            osdp_schedule_options so = {.geo.n_ranks = 1 + (int)(rnd() % 4), .geo.micro_batch = B, .geo.accum_steps = M,
                                        .geo.prefetch = (int)(rnd() % 2), .geo.weight_dtype = OSDP_FLOAT32,
                                        .geo.pad_quantum = 1, .geo.pp_size = P};
            random_case(&L, &p, P, so.geo.stage_bounds);
            osdp_schedule whole;
            osdp_schedule_options none = so;
            none.geo.pp_size = 1;
            ck_assert(osdp_schedule_build(&whole, &L, &p, &none) == OSDP_OK);
            size_t states = 0;
            for (int s = 0; s < P; s++) {
                size_t acts[2];
                for (int k = 0; k < 2; k++) {
                    so.pp_stage = s;
                    so.geo.pipe_schedule = k ? OSDP_PIPE_GPIPE : OSDP_PIPE_1F1B;
                    osdp_schedule sc;
                    ck_assert_msg(osdp_schedule_build(&sc, &L, &p, &so) == OSDP_OK, "%s", osdp_error_message());
                    ck_assert_int_eq(sc.op_lo, so.geo.stage_bounds[s]);
                    ck_assert_int_eq(sc.op_hi, so.geo.stage_bounds[s + 1]);
                    acts[k] = check_step(&sc, P, s, M, B);
                    check_lists(&sc, P, s);
                    osdp_memory_prediction pred, eval;
                    size_t walked, step;
                    osdp_schedule_peak(&sc, &pred);
                    walk_peak(&sc, 3, &walked);
                    ck_assert_uint_eq(pred.peak_total, walked);
                    /* validation within the step's peak: the step alone reaches the prediction */
                    walk_peak(&sc, 1, &step);
                    osdp_schedule_eval_peak(&sc, &eval);
                    ck_assert_uint_le(eval.peak_total, step);
                    ck_assert_uint_eq(step, pred.peak_total);
                    if (k == 0) states += state_bytes(&sc);
                    osdp_schedule_free(&sc);
                    checked++;
                }
                ck_assert_uint_le(acts[0], acts[1]);   /* 1F1B's activations within GPipe's */
            }
            ck_assert_uint_eq(states, state_bytes(&whole));
            osdp_schedule_free(&whole);
        }
        osdp_plan_free(&p);
        osdp_layout_free(&L);
    }
    ck_assert_int_gt(checked, 2 * 40 * 2 * 2);
}
END_TEST

/* splits that are not contiguous covers of the operators, and bad stages */
START_TEST(test_stage_errors)
{
    osdp_layout L;
    load_layout(&L, MODELS[0], 8);
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
    osdp_schedule sc;
    osdp_schedule_options so = {.geo.n_ranks = 2, .geo.micro_batch = 1, .geo.accum_steps = 2, .geo.weight_dtype = OSDP_FLOAT32,
                                .geo.pp_size = 2, .pp_stage = 1, .geo.stage_bounds = {0, 3, 6}};
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_OK);
    osdp_schedule_free(&sc);
    so.geo.stage_bounds[2] = 5;
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "cover operators 0 to 6") != NULL, "%s", osdp_error_message());
    so.geo.stage_bounds[2] = 6;
    so.geo.stage_bounds[1] = 0;
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "stage 0 of the pipeline has no operator") != NULL, "%s",
                  osdp_error_message());
    so.geo.stage_bounds[1] = 3;
    so.pp_stage = 2;
    ck_assert_int_eq(osdp_schedule_build(&sc, &L, &p, &so), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "stage 2 of a pipeline of 2 stages") != NULL, "%s", osdp_error_message());
    osdp_plan_free(&p);
    osdp_layout_free(&L);
}
END_TEST

static Suite *pp_schedule_suite(void)
{
    const TTest *tests[] = {test_stage_schedules, test_stage_errors, NULL};
    const osdp_check_case cases[] = {{.name = "pp_schedule", .tests = tests}};
    return osdp_check_suite("pp_schedule", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = pp_schedule_suite};

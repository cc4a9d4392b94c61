/* The ranks' agreement on a status (osdp/agree.h) on real MPI ranks
 * (tests/system/test_hang.sh runs it under mpiexec -n 4 with OSDP_COMM_TIMEOUT_S=1):
 * every rank gets the lowest failing rank's status and message; and a rank
 * whose peer never arrives (stopped between the step's last collective and
 * the agreement) gives up within the timeout with OSDP_ERR_COMM naming the
 * agreement, instead of waiting in it forever. */
#include "config.h"

#include "check_main.h"

#include <check.h>
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "osdp/agree.h"
#include "osdp/comm.h"
#include "osdp/dtype.h"
#include "osdp/error.h"
#include "osdp/job.h"
#include "util/clock.h"

static int world_rank(void)
{
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

/* ranks 1 and 3 fail: every rank gets rank 1's status and message */
START_TEST(test_lowest_failing_rank_wins)
{
    const int r = world_rank();
    osdp_status mine = OSDP_OK;
    if (r == 1) mine = osdp_error_set(OSDP_ERR_INPUT, "bad input on this rank");
    if (r == 3) mine = osdp_error_set(OSDP_ERR_OOM, "out of memory on this rank");
    osdp_status got = osdp_status_agree(mine, MPI_COMM_WORLD);
    ck_assert_int_eq(got, OSDP_ERR_INPUT);
    ck_assert_str_eq(osdp_error_message(), "rank 1: bad input on this rank");
    ck_assert_int_eq(osdp_status_agree(OSDP_OK, MPI_COMM_WORLD), OSDP_OK);
}
END_TEST

/* the host-side maxima over the ranks (osdp/comm.h): every rank gets the largest, of an int and of a double */
START_TEST(test_max_over_ranks)
{
    const int r = world_rank();
    MPI_Comm world = MPI_COMM_WORLD;
    int n, largest = 10 * r;
    double seconds = r == 2 ? 1.5e-3 : 1e-6 * r;   /* a rank's time: the slowest is rank 2's */
    MPI_Comm_size(world, &n);
    ck_assert_int_eq(osdp_comm_max_int(&world, &largest, "test's int maximum"), OSDP_OK);
    ck_assert_int_eq(largest, 10 * (n - 1));
    ck_assert_int_eq(osdp_comm_max_double(&world, &seconds, "test's double maximum"), OSDP_OK);
    ck_assert(seconds == (n > 2 ? 1.5e-3 : 1e-6 * (n - 1)));
}
END_TEST

/* rank 3 arrives 3 s late: the others leave after the 1 s timeout with
 * OSDP_ERR_COMM naming the agreement; rank 3 then completes it alone (the
 * others' calls were posted) */
START_TEST(test_a_missing_peer_times_out)
{
    const int r = world_rank(), size = 4;
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    ck_assert_int_eq(n, size);
    ck_assert_str_eq(getenv("OSDP_COMM_TIMEOUT_S") ? getenv("OSDP_COMM_TIMEOUT_S") : "", "1");
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == size - 1) {
        nanosleep(&(struct timespec){3, 0}, NULL);
        ck_assert_int_eq(osdp_status_agree(OSDP_OK, MPI_COMM_WORLD), OSDP_OK);
    } else {
        const double t0 = osdp_now_seconds();
        osdp_status got = osdp_status_agree(OSDP_OK, MPI_COMM_WORLD);
        const double took = osdp_now_seconds() - t0;
        ck_assert_int_eq(got, OSDP_ERR_COMM);
        ck_assert_msg(strstr(osdp_error_message(), "the ranks' status") &&
                          strstr(osdp_error_message(), "did not complete within 1 s (OSDP_COMM_TIMEOUT_S)"),
                      "message: %s", osdp_error_message());
        /* no upper bound: the time-out status above already says it gave up before the peer came,
         * and a loaded machine may wake the rank late */
        ck_assert_msg(took >= 1.0, "gave up after %.2f s, before the 1 s timeout", took);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}
END_TEST

/* a plan from rank 0 (osdp/job.h): its failure is every rank's, with its message and no plan held; its
 * plan, batch geometry and tensor-parallel degree are every rank's */
START_TEST(test_plan_broadcast)
{
    const int r = world_rank(), n_ops = 5;
    osdp_plan plan = {0};
    osdp_status root = r == 0 ? osdp_error_set(OSDP_ERR_INFEASIBLE, "no plan fits on rank 0") : OSDP_OK;
    ck_assert_int_eq(osdp_plan_broadcast(&plan, root, 0, MPI_COMM_WORLD), OSDP_ERR_INFEASIBLE);
    ck_assert_str_eq(osdp_error_message(), "no plan fits on rank 0");
    ck_assert_ptr_null(plan.slices);
    if (r == 0) {
        ck_assert_int_eq(osdp_plan_alloc(&plan, n_ops), OSDP_OK);
        for (int i = 0; i < n_ops; i++) {
            plan.slices[i] = i + 1;
            plan.zdp_slices[i] = i % 2 ? i + 1 : 0;
            plan.recompute[i] = i == 2;
            plan.hierarchical[i] = i == 3;
            plan.reduce_once[i] = i == 4;
        }
        plan.geo.micro_batch = 3;
        plan.geo.accum_steps = 7;
        plan.geo.tp_size = 2;
    }
    ck_assert_int_eq(osdp_plan_broadcast(&plan, OSDP_OK, 0, MPI_COMM_WORLD), OSDP_OK);
    ck_assert_int_eq(plan.n_ops, n_ops);
    ck_assert_int_eq(plan.geo.micro_batch, 3);
    ck_assert_int_eq(plan.geo.accum_steps, 7);
    ck_assert_int_eq(plan.geo.tp_size, 2);
    for (int i = 0; i < n_ops; i++) {
        ck_assert_int_eq(plan.slices[i], i + 1);
        ck_assert_int_eq(plan.zdp_slices[i], i % 2 ? i + 1 : 0);
        ck_assert_int_eq(plan.recompute[i], i == 2);
        ck_assert_int_eq(plan.hierarchical[i], i == 3);
        ck_assert_int_eq(plan.reduce_once[i], i == 4);
    }
    osdp_plan_free(&plan);
}
END_TEST

/* the bf16 sum of an all-reduce (a bf16 residual stream's tensor-parallel all-reduces, osdp/schedule.h):
 * MPI has no bf16 type, so the MPI backend sums with a user-defined operation: on pairs of ranks each
 * element is the two widened, added in fp32 and rounded to nearest even (never the 16-bit words added as
 * integers); on all ranks integer values sum exactly, the same bits on every rank and call after call */
START_TEST(test_bf16_sum_over_ranks)
{
    const int r = world_rank(), n = 1000;
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ck_assert_int_eq(size % 2, 0);
    uint16_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    ck_assert(x && y);
    MPI_Comm pair_mpi;
    MPI_Comm_split(MPI_COMM_WORLD, r / 2, r, &pair_mpi);
    osdp_comm pair, world;
    ck_assert(osdp_comm_create_mpi(&pair, &pair_mpi) == OSDP_OK);
    ck_assert(osdp_comm_create_mpi(&world, &(MPI_Comm){MPI_COMM_WORLD}) == OSDP_OK);
    /* pairs: 1 + k 2^-9 (rank 0 of the pair) and k 2^-10 + 3 2^-12 (rank 1): ties, halves and carries */
    const float a0 = 1.0f, step0 = 0x1p-9f, step1 = 0x1p-10f;
    for (int i = 0; i < n; i++) {
        const float v = r % 2 == 0 ? a0 + (float)(i % 64) * step0 : (float)(i % 32) * step1 + 3 * 0x1p-12f;
        x[i] = osdp_bf16_from_float(v);
    }
    ck_assert(osdp_comm_all_reduce(&pair, x, (size_t)n, OSDP_BFLOAT16, NULL) == OSDP_OK);
    int rounded = 0;
    for (int i = 0; i < n; i++) {
        const float p0 = osdp_bf16_to_float(osdp_bf16_from_float(a0 + (float)(i % 64) * step0));
        const float p1 = osdp_bf16_to_float(osdp_bf16_from_float((float)(i % 32) * step1 + 3 * 0x1p-12f));
        const uint16_t want = osdp_bf16_from_float(p0 + p1);
        ck_assert_msg(x[i] == want, "element %d: 0x%04x, want 0x%04x", i, x[i], want);
        rounded += osdp_bf16_to_float(want) != p0 + p1;
    }
    ck_assert(rounded > 0);   /* the sums were rounded, not all exact */
    /* all ranks: small integers sum exactly in bf16 whatever the order */
    for (int i = 0; i < n; i++) x[i] = osdp_bf16_from_float((float)(i % 7 + r));
    memcpy(y, x, n * sizeof *x);
    ck_assert(osdp_comm_all_reduce(&world, x, (size_t)n, OSDP_BFLOAT16, NULL) == OSDP_OK);
    for (int i = 0; i < n; i++)
        ck_assert_msg(osdp_bf16_to_float(x[i]) == (float)(size * (i % 7) + size * (size - 1) / 2), "element %d", i);
    /* inexact sums: every rank the same bits, run after run */
    for (int i = 0; i < n; i++) x[i] = y[i] = osdp_bf16_from_float(1.0f / (float)(i + 3 + r));
    ck_assert(osdp_comm_all_reduce(&world, x, (size_t)n, OSDP_BFLOAT16, NULL) == OSDP_OK);
    ck_assert(osdp_comm_all_reduce(&world, y, (size_t)n, OSDP_BFLOAT16, NULL) == OSDP_OK);
    ck_assert(memcmp(x, y, n * sizeof *x) == 0);
    memcpy(y, x, n * sizeof *x);
    MPI_Bcast(y, n, MPI_UINT16_T, 0, MPI_COMM_WORLD);
    ck_assert(memcmp(x, y, n * sizeof *x) == 0);
    osdp_comm_destroy(&pair);
    osdp_comm_destroy(&world);
    MPI_Comm_free(&pair_mpi);
    free(x);
    free(y);
}
END_TEST

/* MPI's counts are ints: a call of more than INT_MAX elements is refused on every rank with a message
 * naming it, before MPI sees a count cut to another one (the buffers are never touched) */
START_TEST(test_counts_past_int_refused)
{
    osdp_comm world;
    ck_assert(osdp_comm_create_mpi(&world, &(MPI_Comm){MPI_COMM_WORLD}) == OSDP_OK);
    float small[4] = {0};
    const size_t huge = (size_t)INT_MAX + 1;
    ck_assert_int_eq(osdp_comm_all_reduce(&world, small, huge, OSDP_FLOAT32, NULL), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "all-reduce: 2147483648 elements in one call, more than MPI's int count"),
                  "%s", osdp_error_message());
    ck_assert_int_eq(osdp_comm_all_gather(&world, small, small, huge, OSDP_FLOAT32, NULL), OSDP_ERR_INPUT);
    ck_assert_int_eq(osdp_comm_reduce_scatter(&world, small, small, huge, OSDP_FLOAT32, NULL), OSDP_ERR_INPUT);
    ck_assert_int_eq(osdp_comm_broadcast(&world, small, huge, 0, NULL), OSDP_ERR_INPUT);
    ck_assert_int_eq(osdp_comm_send(&world, small, huge, OSDP_FLOAT32, 0, NULL), OSDP_ERR_INPUT);
    ck_assert_msg(strstr(osdp_error_message(), "send: 2147483648 elements"), "%s", osdp_error_message());
    ck_assert_int_eq(osdp_comm_recv(&world, small, huge, OSDP_FLOAT32, 0, NULL), OSDP_ERR_INPUT);
    ck_assert(small[0] == 0 && small[3] == 0);
    /* INT_MAX itself is a count MPI takes: the communicator still works after the refusals */
    small[0] = 1;
    ck_assert(osdp_comm_all_reduce(&world, small, 1, OSDP_FLOAT32, NULL) == OSDP_OK);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ck_assert(small[0] == (float)size);
    osdp_comm_destroy(&world);
}
END_TEST

static Suite *agree_suite(void)
{
    const TTest *agree[] = {test_lowest_failing_rank_wins, test_max_over_ranks, test_plan_broadcast,
                            test_bf16_sum_over_ranks, test_counts_past_int_refused, test_a_missing_peer_times_out, NULL};
    const osdp_check_case cases[] = {{.name = "agree", .tests = agree}};
    return osdp_check_suite("agree", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = agree_suite, .setup = osdp_check_mpi_cpu_setup,
                                                    .teardown = osdp_check_mpi_teardown};

/* Errors no caller can be told of (osdp/error.h): the library records the
 * first, calls the program's handler, never ends the process itself, and the
 * runtime returns a pending one as the status of its next step.  A program of
 * its own: the pending error is process-wide and stays. */
#include "config.h"

#include <check.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/comm.h"
#include "osdp/compute.h"
#include "osdp/error.h"
#include "osdp/runtime.h"

#include "check_main.h"
#include "test_inputs.h"

static int handler_calls;
static osdp_status handler_code;
static char handler_message[256];

static void record_handler(osdp_status code, const char *message)
{
    handler_calls++;
    handler_code = code;
    snprintf(handler_message, sizeof handler_message, "%s", message);
}

START_TEST(test_unrecoverable_reaches_the_step)
{
    osdp_comm comm;
    ck_assert(osdp_comm_create_mpi(&comm, &(MPI_Comm){MPI_COMM_WORLD}) == OSDP_OK);
    osdp_layout L;
    load_layout(&L, "tests/inputs/t_small.ini", 8);
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
    for (int i = 0; i < L.n_ops; i++) p.slices[i] = 1;
    osdp_runtime_options opt = {.geo.micro_batch = 1, .geo.accum_steps = 1, .geo.prefetch = 1, .seed = 7,
                                .geo.weight_dtype = OSDP_FLOAT32};
    osdp_optim_defaults(&opt.optim);
    osdp_runtime rt;
    ck_assert_msg(osdp_runtime_create(&rt, &L, &p, &comm, osdp_compute_find("cpu", OSDP_FLOAT32), &opt) == OSDP_OK,
                  "%s", osdp_error_message());
    int tokens[2 * 8] = {0};
    osdp_step_stats stats;
    ck_assert_int_eq(osdp_error_pending(), OSDP_OK);
    ck_assert_int_eq(osdp_runtime_step(&rt, tokens, &stats), OSDP_OK);

    /* with a handler: it is called with the error, and the call returns */
    osdp_error_set_unrecoverable_handler(record_handler);
    osdp_error_unrecoverable(OSDP_ERR_OOM, "scratch of %d bytes", 64);
    ck_assert_int_eq(handler_calls, 1);
    ck_assert_int_eq(handler_code, OSDP_ERR_OOM);
    ck_assert_str_eq(handler_message, "scratch of 64 bytes");
    /* the first error stays the pending one */
    osdp_error_set_unrecoverable_handler(NULL);
    osdp_error_unrecoverable(OSDP_ERR_INTERNAL, "a later one");
    ck_assert_int_eq(handler_calls, 1);
    ck_assert_int_eq(osdp_error_pending(), OSDP_ERR_OOM);
    ck_assert_str_eq(osdp_error_pending_message(), "scratch of 64 bytes");
    /* the next step reports it as its status */
    ck_assert_int_eq(osdp_runtime_step(&rt, tokens, &stats), OSDP_ERR_OOM);
    ck_assert(strstr(osdp_error_message(), "scratch of 64 bytes") != NULL);
    osdp_runtime_destroy(&rt);
    osdp_plan_free(&p);
    osdp_layout_free(&L);
    osdp_comm_destroy(&comm);
}
END_TEST

static Suite *unrecoverable_suite(void)
{
    const TTest *errors[] = {test_unrecoverable_reaches_the_step, NULL};
    const osdp_check_case cases[] = {{.name = "errors", .tests = errors}};
    return osdp_check_suite("unrecoverable", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {
    .suite = unrecoverable_suite, .setup = osdp_check_mpi_cpu_setup, .teardown = osdp_check_mpi_teardown};

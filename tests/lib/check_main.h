/* The one main() of the Check unit tests (tests/lib/check_main.c), and the
 * table a test program registers its tests with.
 *
 * A test program (tests/MODULE/test_NAME.c, MODULE the src/ folder it tests)
 * writes no main(); it lists its tests
 * by module, one test case per module, and defines the program:
 *
 *     static Suite *name_suite(void)
 *     {
 *         const TTest *layout[] = {test_layout_ops, test_layout_shard, NULL};
 *         const TTest *grad_slow[] = {test_grad_whole_model, NULL};
 *         const osdp_check_case cases[] = {
 *             {.name = "layout", .tests = layout},
 *             {.name = "grad_slow", .tests = grad_slow, .slow = 1},
 *         };
 *         return osdp_check_suite("name", cases, sizeof cases / sizeof cases[0]);
 *     }
 *     const osdp_check_program osdp_check_this_program = {.suite = name_suite};
 *
 * (.setup / .teardown: optional, below) and links tests/lib/check_main.c
 * (Makefile.am: tests_MODULE_test_NAME_SOURCES = tests/MODULE/test_NAME.c
 * tests/lib/check_main.c, its _CFLAGS with $(TESTS_LIB_INCLUDES)).  A test that takes more than about 5 s here goes to
 * a case named "<module>_slow" with .slow = 1: it is tagged OSDP_CHECK_SLOW,
 * and `make check-fast` (CK_EXCLUDE_TAGS=slow) leaves it out.  One case
 * alone: CK_RUN_CASE=layout tests/MODULE/test_NAME. */
#ifndef OSDP_CHECK_MAIN_H
#define OSDP_CHECK_MAIN_H

#include <check.h>

#define OSDP_CHECK_SLOW "slow"

/* the tests of one module */
typedef struct osdp_check_case {
    const char *name;            /* the module; "<module>_slow" for its slow tests */
    const TTest *const *tests;   /* NULL-terminated */
    int slow;                    /* 1: tagged OSDP_CHECK_SLOW */
    const TTest *loop_test;      /* optional: one more test, run for _i = 0 .. loop_end - 1 */
    int loop_end;
} osdp_check_case;

/* a Suite of the n_cases cases (allocated; srunner_free frees it) */
Suite *osdp_check_suite(const char *name, const osdp_check_case *cases, int n_cases);

typedef struct osdp_check_program {
    Suite *(*suite)(void);
    /* before the run: 0 to run the tests; otherwise the program's exit
     * code without running them (77: the test is skipped) */
    int (*setup)(void);
    void (*teardown)(void);      /* after the run, whatever its result */
} osdp_check_program;

extern const osdp_check_program osdp_check_this_program;

/* .setup / .teardown for programs whose tests run a real runtime: MPI on
 * one rank (the runtime needs a communicator) and the CPU backend */
int osdp_check_mpi_cpu_setup(void);
void osdp_check_mpi_teardown(void);

#endif

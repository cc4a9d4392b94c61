/* The shared main() of the Check unit tests and their registration table
 * (tests/lib/check_main.h says how a test program plugs in).  Tests run in
 * this process (CK_FORK=no, the default here; CK_FORK=yes in the
 * environment forks them again): MPI and CUDA, which some tests
 * initialise, do not survive fork().  Check prints the summary; the exit
 * code is 0 when every test passed. */
#include "check_main.h"

#include <mpi.h>
#include "osdp/compute.h"

#include <stdlib.h>

/* Under CK_FORK=yes a case is killed after its timeout: generous for the
 * slow ones, which take up to a minute on a shared 2-core machine. */
enum { FAST_TIMEOUT_S = 120, SLOW_TIMEOUT_S = 600 };

Suite *osdp_check_suite(const char *name, const osdp_check_case *cases, int n_cases)
{
    Suite *suite = suite_create(name);
    for (int c = 0; c < n_cases; c++) {
        TCase *tc = tcase_create(cases[c].name);
        tcase_set_timeout(tc, cases[c].slow ? SLOW_TIMEOUT_S : FAST_TIMEOUT_S);
        if (cases[c].slow) tcase_set_tags(tc, OSDP_CHECK_SLOW);
        for (const TTest *const *test = cases[c].tests; test && *test; test++) tcase_add_test(tc, *test);
        if (cases[c].loop_test) tcase_add_loop_test(tc, cases[c].loop_test, 0, cases[c].loop_end);
        suite_add_tcase(suite, tc);
    }
    return suite;
}

int main(void)
{
    const osdp_check_program *program = &osdp_check_this_program;
    if (program->setup) {
        int status = program->setup();
        if (status != 0) return status;
    }
    SRunner *runner = srunner_create(program->suite());
    const char *fork_env = getenv("CK_FORK");
    srunner_set_fork_status(runner, fork_env && fork_env[0] ? CK_FORK_GETENV : CK_NOFORK);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    if (program->teardown) program->teardown();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

int osdp_check_mpi_cpu_setup(void)
{
    MPI_Init(NULL, NULL);
    osdp_compute_find("cpu", OSDP_FLOAT32)->init(0, 1);
    return 0;
}

void osdp_check_mpi_teardown(void) { MPI_Finalize(); }

/* osdp_gpt: one SPMD binary; the commands live in libosdp. */
#include "config.h"
#include "osdp/app.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out,
        "osdp_gpt %s — GPT training with Optimal Sharded Data Parallelism\n\n"
        "usage: osdp_gpt COMMAND [options]     (COMMAND --help for its options)\n"
        "  train     train a model on N ranks (mpiexec -n N / srun)\n"
        "  plan      plan a model for N ranks and a device (one process)\n"
        "  profile   measure the device file's alpha, beta, gamma (mpiexec -n N / srun)\n"
        "  --help    this text\n"
        "  --version the version\n", PACKAGE_VERSION);
}

/* OpenMP threads that spin after a parallel region take the cores that the
 * next OpenBLAS sgemm needs (measured: a qkv matmul pair 2x slower on 2
 * cores).  libgomp reads OMP_WAIT_POLICY when it loads, so setting it here is
 * too late for this process: set it and re-execute once, before MPI_Init.
 * A user's own OMP_WAIT_POLICY is respected. */
static void ensure_passive_openmp_wait(char **argv)
{
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);   /* returns only on failure: then go on as we are */
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("osdp_gpt %s\n", PACKAGE_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "train") == 0) {
        ensure_passive_openmp_wait(argv);
        MPI_Init(&argc, &argv);
        return osdp_cmd_train(argc - 1, argv + 1);
    }
    if (strcmp(argv[1], "plan") == 0) return osdp_cmd_plan(argc - 1, argv + 1);
    if (strcmp(argv[1], "profile") == 0) {
        MPI_Init(&argc, &argv);
        return osdp_cmd_profile(argc - 1, argv + 1);
    }
    fprintf(stderr, "osdp_gpt: unknown command '%s' (try osdp_gpt --help)\n", argv[1]);
    return 2;
}

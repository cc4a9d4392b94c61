/* osdp_gpt: one SPMD binary; the commands live in libosdp. */
#include "config.h"
#include "osdp/app.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
        "osdp_gpt %s — GPT training with Optimal Sharded Data Parallelism\n\n"
        "usage: osdp_gpt COMMAND [options]     (COMMAND --help for its options)\n"
        "  train     train a model on N ranks (mpiexec -n N / srun)\n"
        "  --help    this text\n"
        "  --version the version\n", PACKAGE_VERSION);
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
        MPI_Init(&argc, &argv);
        return osdp_cmd_train(argc - 1, argv + 1);
    }
    fprintf(stderr, "osdp_gpt: unknown command '%s' (try osdp_gpt --help)\n", argv[1]);
    return 2;
}

/* osdp_gpt: one SPMD binary; the commands live in libosdp. */
#include "config.h"
#include "cli/app.h"
#include "cli/options.h"
#include "osdp/cuda_plugin.h"

#include <mpi.h>
#include <signal.h>
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
        "  sample    generate text from a checkpoint (any number of ranks)\n"
        "  eval      the loss and perplexity of a checkpoint on data (any number of ranks and mesh)\n"
        "  --help    this text\n"
        "  --version the version, and the CUDA plugin --backend cuda would open\n", PACKAGE_VERSION);
}

/* Ranks on this node, from the launcher's environment (before MPI_Init):
 * MPICH's hydra, Open MPI, Slurm; 1 for a singleton run. */
static long local_ranks_from_launcher(void)
{
    static const char *vars[] = {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        long n = v ? strtol(v, NULL, 10) : 0;
        if (n > 0) return n;
    }
    return 1;
}

/* How OpenMP threads wait between parallel regions.  Spinning ("active")
 * answers the next region at once: the kernels of a step open hundreds of
 * regions, and on 1 rank x 2 threads it measured 7-10% faster than sleeping.
 * But a spinning thread takes a core that another rank on the node needs
 * (measured: 4 ranks on 2 cores 25% slower), so the threads spin only when
 * the node's ranks x threads fit its cores, and sleep ("passive") otherwise.
 * libgomp reads OMP_WAIT_POLICY when it loads, so setting it here is too
 * late for this process: set it and re-execute once, before MPI_Init.  A
 * user's own OMP_WAIT_POLICY is respected.  `threads`: --threads (0: not
 * given). */
static void choose_openmp_wait_policy(char **argv, long threads)
{
    if (getenv("OMP_WAIT_POLICY")) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN), ranks = local_ranks_from_launcher();
    if (threads <= 0) threads = cores / ranks > 0 ? cores / ranks : 1;   /* the default of osdp_world_init */
    setenv("OMP_WAIT_POLICY", threads > 1 && ranks * threads <= cores ? "active" : "passive", 1);
    /* a stop signal during the new image's start waits (blocked: the mask survives exec) for its handler */
    sigset_t stops, old;
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGUSR1);
    sigprocmask(SIG_BLOCK, &stops, &old);
    execv("/proc/self/exe", argv);   /* returns only on failure: then go on as we are */
    sigprocmask(SIG_SETMASK, &old, NULL);
}

/* SIGTERM or SIGUSR1 before a command has anything to save (train installs
 * its own handler, which finishes the step and saves, once it can): say so
 * and exit, instead of dying silently by the default action.  Only
 * async-signal-safe calls. */
static void on_early_stop_signal(int sig)
{
    static const char term[] = "osdp_gpt: received SIGTERM before the first training step: exiting, nothing to save\n";
    static const char usr1[] = "osdp_gpt: received SIGUSR1 before the first training step: exiting, nothing to save\n";
    if (sig == SIGTERM) { if (write(STDERR_FILENO, term, sizeof term - 1) < 0) { /* nowhere to say it */ } }
    else if (write(STDERR_FILENO, usr1, sizeof usr1 - 1) < 0) { /* nowhere to say it */ }
    _exit(128 + sig);
}

static void catch_early_stop_signals(int argc, char **argv, char **envp)
{
    (void)argc;
    (void)argv;
    (void)envp;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_early_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigset_t stops;   /* blocked across choose_openmp_wait_policy's exec: delivered now */
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGUSR1);
    sigprocmask(SIG_UNBLOCK, &stops, NULL);
}

/* Installed before the shared libraries' initializers (ELF .preinit_array):
 * CUDA's, MPI's and OpenBLAS's take about 0.2 s before main here, and a
 * SIGTERM then would end the process silently by the default action. */
__attribute__((section(".preinit_array"), used))
static void (*const early_stop_signals)(int, char **, char **) = catch_early_stop_signals;

/* A command-line error before any command runs: under mpiexec every process
 * gets the same argv, so rank 0 alone says it and all exit 2. */
static int refuse_once(int *argc, char ***argv, const char *fmt, const char *arg)
{
    int rank = 0;
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\n");
        usage(stderr);
    }
    MPI_Finalize();
    return 2;
}

/* the library's errors that no caller can be told of (osdp/error.h): this
 * rank cannot go on, and the others may wait for it in a collective */
static void end_job_on_unrecoverable(osdp_status code, const char *message) { osdp_fatal(code, message); }

int main(int argc, char **argv)
{
    osdp_fatal_note_main_thread();
    osdp_error_set_unrecoverable_handler(end_job_on_unrecoverable);
    if (argc < 2)
        return refuse_once(&argc, &argv, "osdp_gpt: error: no command given%s (train, plan, profile, sample or eval)\n", "");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {   /* no MPI: scripts run it outside the launcher */
        char plugin[4200];
        const int found = osdp_cuda_plugin_where(plugin, sizeof plugin);
        printf("osdp_gpt %s\nCUDA plugin: %s%s\n", PACKAGE_VERSION, found ? "" : "none: ", plugin);
        return 0;
    }
    osdp_command command = strcmp(argv[1], "train") == 0 ? OSDP_CMD_TRAIN
                         : strcmp(argv[1], "plan") == 0 ? OSDP_CMD_PLAN
                         : strcmp(argv[1], "profile") == 0 ? OSDP_CMD_PROFILE
                         : strcmp(argv[1], "sample") == 0 ? OSDP_CMD_SAMPLE
                         : strcmp(argv[1], "eval") == 0 ? OSDP_CMD_EVAL : 0;
    if (!command)
        return refuse_once(&argc, &argv, "osdp_gpt: error: unknown command '%s' (train, plan, profile, sample or eval)\n",
                           argv[1]);
    osdp_job job;
    osdp_status s = osdp_options_parse(command, argc - 1, argv + 1, &job);
    if (command == OSDP_CMD_PLAN) {   /* one process, no MPI */
        if (s != OSDP_OK) osdp_fatal(s, osdp_error_message());
        if (job.help) osdp_options_usage(command, stdout);
        return job.help ? 0 : osdp_cmd_plan(&job);
    }
    if ((command == OSDP_CMD_TRAIN || command == OSDP_CMD_EVAL) && s == OSDP_OK && !job.help)
        choose_openmp_wait_policy(argv, (long)job.threads);
    MPI_Init(&argc, &argv);
    osdp_check_all(s);   /* the message once (rank 0), every rank exits non-zero */
    if (job.help) {
        int rank;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0) osdp_options_usage(command, stdout);
        MPI_Finalize();
        return 0;
    }
    return command == OSDP_CMD_TRAIN || command == OSDP_CMD_EVAL ? osdp_cmd_train(&job)
         : command == OSDP_CMD_SAMPLE ? osdp_cmd_sample(&job) : osdp_cmd_profile(&job);
}

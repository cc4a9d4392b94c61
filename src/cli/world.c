/* MPI-level helpers for the binary's top level (see osdp/app.h). */
#include "config.h"
#include "cli/app.h"
#include "osdp/agree.h"
#include "osdp/comm.h"
#include "osdp/device.h"
#include "osdp/link_emulation.h"

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* the node index of this rank among the real nodes: the rank of its node's
 * first rank among the nodes' first ranks */
static void real_nodes(osdp_world *w, MPI_Comm node)
{
    MPI_Comm firsts;
    MPI_Comm_split(MPI_COMM_WORLD, w->local_rank == 0 ? 0 : MPI_UNDEFINED, w->rank, &firsts);
    int index_count[2] = {0, 1};
    if (firsts != MPI_COMM_NULL) {
        MPI_Comm_rank(firsts, &index_count[0]);
        MPI_Comm_size(firsts, &index_count[1]);
        MPI_Comm_free(&firsts);
    }
    MPI_Bcast(index_count, 2, MPI_INT, 0, node);
    w->node = index_count[0];
    w->n_nodes = index_count[1];
    w->node_size = w->local_size;
    w->node_rank = w->local_rank;
    w->emulated = 0;
    w->emulation[0] = '\0';
}

void osdp_world_emulate(osdp_world *w, long long ranks_per_node, const char *link, int quiet)
{
    osdp_link_emulation e;
    osdp_check_all(osdp_link_emulation_parse(&e, ranks_per_node, link, w->size));
    if (e.ranks_per_node == 0) return;
    osdp_comm_emulate(&e);
    w->emulated = 1;
    w->node_size = e.ranks_per_node;
    w->n_nodes = e.n_nodes;
    w->node = w->rank / e.ranks_per_node;
    w->node_rank = w->rank % e.ranks_per_node;
    osdp_link_emulation_describe(&e, w->emulation, sizeof w->emulation);
    if (w->rank == 0 && !quiet) {
        printf("%s (--ranks-per-node%s; not the real network)\n", w->emulation, link ? ", --emulate-link" : "");
        fflush(stdout);
    }
}

void osdp_emulation_to_device(const osdp_link_emulation *e, osdp_device *dev)
{
    if (!e || e->ranks_per_node <= 0) return;
    if (e->has_link) osdp_device_set_link(dev, e->ranks_per_node, &(osdp_collective_cost){.alpha = e->alpha, .beta = e->beta});
    else dev->ranks_per_node = e->ranks_per_node;
}

void osdp_world_init(osdp_world *w, int requested_threads)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w->size);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &w->local_rank);
    MPI_Comm_size(node, &w->local_size);
    real_nodes(w, node);
    MPI_Comm_free(&node);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    /* share the node's cores between its ranks: oversubscribed BLAS threads
     * spin against each other and against MPI's progress */
    long share = cores / w->local_size;
    w->threads = requested_threads > 0 ? requested_threads : (int)(share > 0 ? share : 1);
    const char *ntasks = getenv("SLURM_NTASKS");
    osdp_status s = OSDP_OK;
    /* more threads than cores never helps and, with spinning BLAS and
     * OpenMP threads, can stall a step for minutes: refuse it */
    if (requested_threads > cores)
        s = osdp_error_set(OSDP_ERR_INPUT, "--threads %d: this node has %ld cores (accepted: 1 to %ld threads per rank)",
                           requested_threads, cores, cores);
    else if (ntasks && atoi(ntasks) != w->size)
        s = osdp_error_set(OSDP_ERR_INPUT,
                           "MPI_Comm_size is %d but SLURM_NTASKS is %s: the MPI library and srun disagree "
                           "(try srun --mpi=pmix, or --mpi=pmi2 for MPICH built without PMIx)",
                           w->size, ntasks);
    osdp_check_all(s);
    /* fewer cores than ranks x threads: allowed (tests emulate many ranks on
     * few cores); the MPI backend's waits then sleep (osdp_comm_share_cores).
     * Slower than it looks with threads: say so once */
    w->shares_cores = (long)w->threads * w->local_size > cores;
    osdp_comm_share_cores(w->shares_cores);
    if (w->shares_cores && w->threads > 1 && w->rank == 0)
        fprintf(stderr, "osdp_gpt: note: %d ranks x %d threads on a node of %ld cores oversubscribe it\n", w->local_size,
                w->threads, cores);
}

static pthread_t main_thread;
static int main_thread_noted;

void osdp_fatal_note_main_thread(void)
{
    main_thread = pthread_self();
    main_thread_noted = 1;
}

_Noreturn void osdp_fatal(osdp_status code, const char *msg)
{
    int rank = 0, size = 1, initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    }
    fflush(stdout);
    fprintf(stderr, "osdp_gpt: rank %d: error: %s\n", rank, msg);
    fflush(stderr);
    if (initialized && !finalized && size == 1 && main_thread_noted && pthread_equal(pthread_self(), main_thread)) {
        /* no peer waits for this process: a normal end gives the launcher
         * CODE for certain.  After MPI_Abort, MPICH 4.0's hydra proxy reads
         * either the abort message or the closed PMI socket first and
         * reports CODE or 1 (seen: 1 time in 60 under load), which made
         * the docs' one-rank out-of-memory example flaky in CI */
        MPI_Finalize();
        exit(code ? (int)code : 1);
    }
    if (initialized && !finalized) {
        /* MPI_Abort makes the launcher kill every rank and tear down its
         * output forwarding: when all ranks fail together (an emulated OOM
         * is reached by every rank at the same allocation) the first to
         * abort can take the others' messages, and even its own, with it.
         * A moment's grace lets the launcher forward what was written. */
        struct timespec grace = {0, 300 * 1000 * 1000};
        nanosleep(&grace, NULL);
        MPI_Abort(MPI_COMM_WORLD, code ? (int)code : 1);
    }
    exit(code ? (int)code : 1);
}

void osdp_check_all(osdp_status s)
{
    if (s == OSDP_ERR_COMM) osdp_fatal(s, osdp_error_message());   /* a peer is gone or stuck: no agreement */
    s = osdp_status_agree(s, MPI_COMM_WORLD);
    if (s == OSDP_OK) return;
    if (s == OSDP_ERR_COMM) osdp_fatal(s, osdp_error_message());   /* the agreement itself timed out: a peer hangs */
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {   /* the lowest failing rank's message, named when it is not rank 0 */
        fflush(stdout);
        fprintf(stderr, "osdp_gpt: error: %s\n", osdp_error_message());
        fflush(stderr);
    }
    osdp_comm_release_all();   /* the communicators made so far: MPI_Finalize would leave them allocated */
    MPI_Finalize();
    exit((int)s);
}

void osdp_check_same(uint64_t value, const char *what)
{
    uint64_t root = value;
    MPI_Bcast(&root, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    osdp_status s = root == value ? OSDP_OK
        : osdp_error_set(OSDP_ERR_INPUT, "this rank's %s differs from rank 0's (hash %016llx vs %016llx): every rank must read the same inputs",
                         what, (unsigned long long)value, (unsigned long long)root);
    osdp_check_all(s);
}

const char *osdp_default_input(const char *relative, char *buf, int n)
{
    const char *dir = getenv("OSDP_INPUT_DIR");
    snprintf(buf, (size_t)n, "%s/%s", dir ? dir : OSDP_SOURCE_DIR "/input", relative);
    return buf;
}

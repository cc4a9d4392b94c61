/* The commands of the osdp_gpt binary and the helpers their top levels
 * share.  Only code here decides to exit: library modules return codes. */
#ifndef OSDP_APP_H
#define OSDP_APP_H

#include <stdint.h>
#include "osdp/error.h"

#define OSDP_VERSION_STRING PACKAGE_VERSION

/* Each command runs the job its options resolved to (src/cli/options.h):
 * main parses the command line once, before MPI_Init. */
struct osdp_job;
/* training on the MPI ranks (after MPI_Init); also `eval` (job->command
 * OSDP_CMD_EVAL): the same set-up of mesh, plan and runtime, the weights
 * of --ckpt / --init-from, train's validation instead of steps (cli/eval.h) */
int osdp_cmd_train(const struct osdp_job *job);
/* the planner alone, one process (no MPI needed) */
int osdp_cmd_plan(const struct osdp_job *job);
/* measures alpha, beta and gamma over the MPI ranks; writes a device file (after MPI_Init) */
int osdp_cmd_profile(const struct osdp_job *job);
/* text from a checkpoint's weights, any number of ranks (after MPI_Init; src/cli/sample_cmd.c) */
int osdp_cmd_sample(const struct osdp_job *job);
struct osdp_layout;
struct osdp_device;
struct osdp_planner_options;
struct osdp_planner_result;
/* the plan table, totals, predicted throughput and peak (src/cli/plan_print.c) */
void osdp_plan_print(const struct osdp_layout *layout, const struct osdp_device *dev,
                     const struct osdp_planner_options *o, const struct osdp_planner_result *r);

/* MPI world facts gathered once */
typedef struct osdp_world {
    int rank, size;
    int local_rank, local_size;   /* within the node (MPI_COMM_TYPE_SHARED) */
    int threads;                  /* compute threads for this rank */
    int shares_cores;             /* 1: the node's ranks x threads outnumber its cores (osdp_comm_share_cores) */
    /* the nodes as the network sees them: the real ones (MPI_COMM_TYPE_SHARED; node_size = local_size)
     * or, after osdp_world_emulate with --ranks-per-node R, the emulated ones (rank r on node r / R) */
    int node, n_nodes, node_size, node_rank;
    int emulated;                 /* 1: the nodes are emulated (every line that depends on it says so) */
    char emulation[128];          /* "emulated: 2 nodes x 2 ranks, link 12.5 GB/s 5 us"; "" when not */
} osdp_world;

/* requested_threads: --threads (0: the node's cores / its ranks); more than
 * the node's cores is refused on every rank (a message naming --threads);
 * ranks x threads above the cores is allowed, with a note from rank 0. */
void osdp_world_init(osdp_world *w, int requested_threads);
/* --ranks-per-node R and --emulate-link (NULL: not given): emulated nodes
 * and link (osdp/link_emulation.h), for every communicator made after it;
 * bad values end the job on every rank with a message naming the option.
 * Rank 0 prints w->emulation on stdout unless quiet.  R 0: the real nodes. */
void osdp_world_emulate(osdp_world *w, long long ranks_per_node, const char *link, int quiet);
struct osdp_link_emulation;
/* The emulated network as the cost model's device: ranks_per_node, and with
 * a link each inter-node figure the larger of the file's and the link's
 * (osdp_device_set_link); e NULL: dev unchanged */
void osdp_emulation_to_device(const struct osdp_link_emulation *e, struct osdp_device *dev);
/* Print "osdp_gpt: rank R: error: MSG" and abort the whole job.  A job of
 * one process, on its main thread, finalizes and exits with CODE instead:
 * there is no peer to stop, and the launcher then reports CODE (under
 * MPI_Abort MPICH's hydra reports CODE or 1, whichever of the abort message
 * and the closed PMI socket it reads first). */
_Noreturn void osdp_fatal(osdp_status code, const char *msg);
/* Call first in main: osdp_fatal finalizes only on this thread (a watchdog
 * thread's fatal error may find the main thread inside MPI). */
void osdp_fatal_note_main_thread(void);
/* Every rank passes its status; if any failed, rank 0 prints the lowest
 * failing rank's message (osdp_status_agree), all ranks finalize MPI and
 * exit with its status together.  Use on paths every rank follows (input
 * checks), not inside collectives. */
void osdp_check_all(osdp_status s);
/* all ranks must pass the same value; on mismatch every rank exits with a
 * message naming `what` */
void osdp_check_same(uint64_t value, const char *what);
/* default input file under the source tree (input/...) */
const char *osdp_default_input(const char *relative, char *buf, int n);

#endif

/* osdp_gpt profile's network figures (src/cli/profile_cmd.c runs them):
 * the collectives at each level of the network, the point-to-point
 * messages, the tensor group's all-reduce.  Every time is the median over
 * repetitions of the slowest rank (every group of the world at once), at
 * N_SIZES sizes geometric from 4 KiB to the largest the model moves; each
 * fit is osdp/collective_fit.h's (relative errors).  Every wait here, the
 * timings' own barriers and all-reduces included, yields the core as the
 * runtime's do (osdp_comm_*): with more ranks than cores, MPI's blocking
 * all-reduce of the times spun, and the ranks still in a collective waited
 * a scheduler tick behind it (2-4 ms a call at any size, where training
 * met 0.1-0.3 ms). */
#include "profile_network.h"
#include "util/clock.h"
#include "osdp/agree.h"
#include "osdp/collective_fit.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Where the figures are measured (osdp_profile_network_on): host buffers over
 * MPI (NULL backend), or the compute backend's device buffers over NCCL */
static const osdp_compute_backend *net_be;
static int net_nccl, net_device;

void osdp_profile_network_on(const osdp_compute_backend *be, int nccl, int local_device)
{
    net_be = be;
    net_nccl = nccl;
    net_device = local_device;
}

/* count floats, value i % mod at i, in the measured memory; NULL when out of memory */
static float *net_buffer(size_t count, int mod)
{
    float *host = malloc(count * sizeof(float) + 1);
    if (!host) return NULL;
    for (size_t i = 0; i < count; i++) host[i] = (float)(i % (size_t)mod);
    if (!net_be) return host;
    float *dev = net_be->alloc(count * sizeof(float) + 1);
    if (dev) net_be->to_device(dev, host, count * sizeof(float));
    free(host);
    return dev;
}

static void net_buffer_free(float *p)
{
    if (!p) return;
    if (net_be) net_be->free(p);
    else free(p);
}

static osdp_status net_comm(osdp_comm *c, MPI_Comm *group)
{
    return osdp_comm_create(c, group, net_nccl, net_device);
}

int osdp_profile_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef enum collective_kind { COLL_ALL_GATHER, COLL_REDUCE_SCATTER, COLL_ALL_REDUCE } collective_kind;

/* median over reps of the slowest rank of `slowest_over` (every group of it at once) */
static osdp_status time_collective_on(osdp_comm *comm, MPI_Comm slowest_over, collective_kind kind, size_t total_bytes,
                                      int reps, double *out)
{
    int N = comm->size;
    size_t count = total_bytes / sizeof(float) / (size_t)N;
    float *full = net_buffer(count * (size_t)N, 13), *shard = net_buffer(count, 7);
    osdp_status s = !full || !shard ? osdp_error_set(OSDP_ERR_OOM, "profile: out of %s memory for %zu bytes",
                                                     net_be ? "device" : "host", count * (size_t)(N + 1) * sizeof(float))
                                    : OSDP_OK;
    /* every rank timed here (slowest_over) agrees before the first barrier: one out of memory alone would leave
     * the others waiting in it */
    if ((s = osdp_status_agree(s, slowest_over)) != OSDP_OK) {
        net_buffer_free(full);
        net_buffer_free(shard);
        return s;
    }
    double t[OSDP_PROFILE_MAX_REPS + 1];
    for (int r = 0; r <= reps && s == OSDP_OK; r++) { /* r = 0: warm-up */
        osdp_comm_barrier(comm);
        double t0 = osdp_now_seconds();
        s = kind == COLL_REDUCE_SCATTER ? osdp_comm_reduce_scatter(comm, full, shard, count, OSDP_FLOAT32, NULL)
          : kind == COLL_ALL_GATHER ? osdp_comm_all_gather(comm, shard, full, count, OSDP_FLOAT32, NULL)
                                    : osdp_comm_all_reduce(comm, full, count * (size_t)N, OSDP_FLOAT32, NULL);
        t[r] = osdp_now_seconds() - t0;
        /* every rank takes it, failed or not (a failure then ends the loop on every rank that saw it) */
        const osdp_status agreed = osdp_comm_max_double(&slowest_over, &t[r], "profile: all-reduce of a collective's times");
        if (s == OSDP_OK) s = agreed;
    }
    qsort(t + 1, (size_t)reps, sizeof *t, osdp_profile_cmp_double);
    *out = t[1 + reps / 2];
    net_buffer_free(full);
    net_buffer_free(shard);
    return s;
}

/* The world waits here without spinning: a rank idle while another node
 * measures must leave this machine's cores to it */
static void wait_for_world_idle(void)
{
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    for (int done = 0; !done;) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) nanosleep(&(struct timespec){0, 200000}, NULL);
    }
}

/* After every rank's turn: the slowest turn's figure into *out, and one
 * verdict for every rank, the failed rank's status and message (a failure
 * on one node fails all: the next turns stay paired). */
static osdp_status slowest_turn(osdp_status s, double mine, double *out)
{
    MPI_Comm world = MPI_COMM_WORLD;
    *out = mine;
    osdp_status agreed = osdp_comm_max_double(&world, out, "profile: all-reduce of the turns' times");
    if (agreed != OSDP_OK) return agreed;
    return osdp_status_agree(s, world);
}

/* Median over reps of the slowest rank of a collective over `comm`.
 * node_comm MPI_COMM_NULL (groups that span nodes), real nodes, or one
 * node: every group of the world at once, the slowest rank of the world.
 * Groups that each sit inside one emulated node (node_comm: the world's
 * ranks on this rank's node): emulated nodes share this machine's cores
 * where real ones each have their own, so the nodes take turns (the others
 * idle, sleeping), each node's median is its slowest rank's, and the
 * figure is the slowest node's, as on separate machines. */
static osdp_status time_collective(const osdp_world *world, MPI_Comm node_comm, osdp_comm *comm, collective_kind kind,
                                   size_t total_bytes, int reps, double *out)
{
    if (node_comm == MPI_COMM_NULL || !world->emulated || world->n_nodes <= 1)
        return time_collective_on(comm, MPI_COMM_WORLD, kind, total_bytes, reps, out);
    osdp_status s = OSDP_OK;
    double mine = 0;
    for (int turn = 0; turn < world->n_nodes; turn++) {   /* every rank takes every turn, failed or not */
        if (turn == world->node) s = time_collective_on(comm, node_comm, kind, total_bytes, reps, &mine);
        wait_for_world_idle();
    }
    return slowest_turn(s, mine, out);
}

/* The tensor-parallel group's all-reduce: for every T > 1 that divides the
 * N ranks and fits in a node (T <= ranks on the node), the world split into
 * groups of T consecutive ranks as the mesh forms them, every group
 * all-reducing at once (as the mesh's groups do between kernels), at total
 * sizes S geometric from 4 KiB to `top` (the model's residual stream at
 * micro-batch 8); a least-squares fit through the origin (relative errors)
 * of t = 2 (T-1) alpha + 2 (T-1)/T S beta over every (T, S) gives
 * [tp_all_reduce] (a negative alpha is clamped to 0 and beta refitted).
 * only_tp > 1 (profile --tp T): that T alone.
 * Without such a T (2 ranks on 2 nodes...) the section keeps the mean of
 * the all-gather's and reduce-scatter's figures.  Collective over the
 * world; *note gets what was done. */
osdp_status osdp_profile_tp_all_reduce(const osdp_world *world, int only_tp, size_t top, int reps, osdp_device *dev,
                                         char *note, size_t note_size)
{
    const int N = world->size, max_points = 8 * N_SIZES;
    double x1[8 * N_SIZES], x2[8 * N_SIZES], y[8 * N_SIZES];
    int n = 0, len = 0;
    osdp_device_default_tp_all_reduce(dev);
    len += snprintf(note + len, note_size - (size_t)len,
                    "tp_all_reduce: blocking fp32 all-reduce over groups of T consecutive ranks,\n%s, median of %d runs "
                    "of the slowest rank; T =",
                    world->emulated && world->n_nodes > 1 ? "the emulated nodes in turn (a node's groups at once, the "
                                                            "slowest node)" : "all groups at once", reps);
    MPI_Comm node_comm;   /* the ranks of this rank's node: emulated nodes take turns */
    MPI_Comm_split(MPI_COMM_WORLD, world->node, world->rank, &node_comm);
    for (int T = 2; T <= N && T <= world->node_size; T++) {
        if (N % T != 0 || n + N_SIZES > max_points || (only_tp > 1 && T != only_tp)) continue;
        MPI_Comm group;
        MPI_Comm_split(MPI_COMM_WORLD, world->rank / T, world->rank, &group);
        osdp_comm comm;
        osdp_status s = net_comm(&comm, &group);
        MPI_Comm_free(&group);
        if (s != OSDP_OK) {
            MPI_Comm_free(&node_comm);
            return s;
        }
        /* groups inside the nodes when T divides the node */
        const MPI_Comm turns = world->node_size % T == 0 ? node_comm : MPI_COMM_NULL;
        if (world->rank == 0) printf("  all-reduce T=%-3d", T);
        for (int i = 0; i < N_SIZES && s == OSDP_OK; i++, n++) {
            double at = 4096.0 * pow((double)top / 4096.0, (double)i / (N_SIZES - 1));
            size_t bytes = ((size_t)at + 4 * (size_t)T - 1) / (4 * (size_t)T) * (4 * (size_t)T);
            const int n_reps = bytes > (8u << 20) ? (reps + 1) / 2 : reps;
            s = time_collective(world, turns, &comm, COLL_ALL_REDUCE, bytes, n_reps, &y[n]);
            x1[n] = 2.0 * (T - 1);
            x2[n] = 2.0 * (T - 1) / T * (double)bytes;
            if (world->rank == 0) printf(" %6.0fKiB:%8.3fms", (double)bytes / 1024, 1e3 * y[n]);
        }
        if (world->rank == 0) printf("\n");
        osdp_comm_destroy(&comm);
        if (s != OSDP_OK) {
            MPI_Comm_free(&node_comm);
            return s;
        }
        len += snprintf(note + len, note_size - (size_t)len, " %d", T);
    }
    MPI_Comm_free(&node_comm);
    if (n == 0) {
        snprintf(note + len, note_size - (size_t)len, " none (no T > 1 divides the ranks inside a node): the mean of the "
                 "all-gather's and reduce-scatter's figures\n");
        return OSDP_OK;
    }
    /* t = alpha x1 + beta x2 (relative errors, alpha >= 0): no per-call term, as the model prices it */
    osdp_collective_cost fitted;
    if (osdp_collective_fit(x1, x2, y, n, 0, &fitted, NULL) != OSDP_OK) {
        /* too noisy to fit: keep the flat figures rather than fail the whole profile */
        if (world->rank == 0)
            printf("  all-reduce     times do not grow with size: noisy machine? [tp_all_reduce] keeps the "
                   "mean of the all-gather's and reduce-scatter's figures (--reps 21 may help)\n");
        snprintf(note + len, note_size - (size_t)len, ";\nthe times did not grow with size: the mean of "
                 "the all-gather's and reduce-scatter's figures\n");
        return OSDP_OK;
    }
    const double alpha = fitted.alpha, beta = fitted.beta;
    dev->tp_all_reduce.alpha = alpha;
    dev->tp_all_reduce.beta = beta;
    if (world->rank == 0)
        printf("  all-reduce     fit: alpha %.3e s, beta %.3e s/B (%.2f GB/s) per ring step\n", alpha, beta, 1e-9 / beta);
    snprintf(note + len, note_size - (size_t)len, ";\nfit t = 2 (T-1) alpha + 2 (T-1)/T beta S: alpha %.3e s, beta %.3e s/B (%.2f GB/s)\n", alpha, beta, 1e-9 / beta);
    return OSDP_OK;
}

/* Half the round trip of a ping-pong of `count` floats between the ranks
 * of `comm` paired (2i, 2i+1) (with an odd size the last rank waits):
 * the median over reps of the slowest pair of `slowest_over`. */
static osdp_status time_ping_pong(osdp_comm *comm, MPI_Comm slowest_over, float *buf, size_t count, int reps,
                                  double *out)
{
    const int peer = comm->rank ^ 1, paired = peer < comm->size, first = !(comm->rank & 1);
    double t[OSDP_PROFILE_MAX_REPS + 1];
    osdp_status s = OSDP_OK;
    for (int r = 0; r <= reps && s == OSDP_OK; r++) {   /* r = 0: warm-up */
        if ((s = osdp_comm_barrier(comm)) != OSDP_OK) break;
        const double t0 = osdp_now_seconds();
        if (paired && first) {
            s = osdp_comm_send(comm, buf, count, OSDP_FLOAT32, peer, NULL);
            if (s == OSDP_OK) s = osdp_comm_recv(comm, buf, count, OSDP_FLOAT32, peer, NULL);
        } else if (paired) {
            s = osdp_comm_recv(comm, buf, count, OSDP_FLOAT32, peer, NULL);
            if (s == OSDP_OK) s = osdp_comm_send(comm, buf, count, OSDP_FLOAT32, peer, NULL);
        }
        t[r] = (osdp_now_seconds() - t0) / 2;
        const osdp_status agreed = osdp_comm_max_double(&slowest_over, &t[r], "profile: all-reduce of the messages' times");
        if (s == OSDP_OK) s = agreed;
    }
    qsort(t + 1, (size_t)reps, sizeof *t, osdp_profile_cmp_double);
    *out = t[1 + reps / 2];
    return s;
}

/* A point-to-point message (the pipeline's, between stages): the ranks
 * of `comm` paired (2i, 2i+1), every pair of every such communicator at
 * once (as every stage boundary of a pipeline sends at once; with an odd
 * size the last rank waits), a ping-pong of S bytes through the comm layer
 * (blocking fp32 send / receive), S geometric from 4 KiB to `top`; one
 * message takes half the round trip, the median over reps of the slowest
 * pair; a least-squares line t = alpha + beta S (relative errors) gives
 * alpha (a negative intercept: 0, the slope through the origin) and beta
 * into *out, or *fallback when the times do not grow with size.  `section`
 * names the figures ("p2p", "internode_p2p").  n_turns > 0 (emulated
 * nodes, which share this machine's cores where real ones do not): the
 * communicators take turns, this rank's in turn `turn`, the others idle,
 * and each size's figure is the slowest turn's.  Collective over the
 * world; appends to note. */
static osdp_status profile_p2p(const osdp_world *world, osdp_comm *comm, int turn, int n_turns, const char *section,
                               size_t top, int reps, const osdp_collective_cost *fallback, osdp_collective_cost *out,
                               char *note, size_t note_size)
{
    float *buf = net_buffer(top / sizeof(float), 11);
    /* collective over the world: agreed before the first turn or barrier (a rank out of memory alone would
     * leave the others waiting there) */
    osdp_status s = osdp_status_agree(buf ? OSDP_OK : osdp_error_set(OSDP_ERR_OOM, "profile: out of memory for a "
                                                                      "%zu-byte message", top), MPI_COMM_WORLD);
    if (s != OSDP_OK) {
        net_buffer_free(buf);
        return s;
    }
    MPI_Comm turn_comm = MPI_COMM_NULL;
    if (n_turns > 0) MPI_Comm_split(MPI_COMM_WORLD, turn, world->rank, &turn_comm);
    double one_step[N_SIZES], x[N_SIZES], y[N_SIZES];
    if (world->rank == 0) printf("  %-13s", section);
    for (int i = 0; i < N_SIZES && s == OSDP_OK; i++) {
        const double at = 4096.0 * pow((double)top / 4096.0, (double)i / (N_SIZES - 1));
        const size_t count = (size_t)at / sizeof(float);
        const int r_reps = count * sizeof(float) > (8u << 20) ? (reps + 1) / 2 : reps;
        if (n_turns > 0) {
            double mine = 0;
            for (int t = 0; t < n_turns; t++) {   /* every rank takes every turn, failed or not */
                if (t == turn) s = time_ping_pong(comm, turn_comm, buf, count, r_reps, &mine);
                wait_for_world_idle();
            }
            s = slowest_turn(s, mine, &y[i]);
        } else {
            s = time_ping_pong(comm, MPI_COMM_WORLD, buf, count, r_reps, &y[i]);
        }
        one_step[i] = 1;   /* a message: t = alpha + S beta */
        x[i] = (double)(count * sizeof(float));
        if (world->rank == 0) printf(" %6.0fKiB:%8.3fms", x[i] / 1024, 1e3 * y[i]);
    }
    net_buffer_free(buf);
    if (turn_comm != MPI_COMM_NULL) MPI_Comm_free(&turn_comm);
    if (world->rank == 0) printf("\n");
    if (s != OSDP_OK) return s;
    const size_t len = strlen(note);
    osdp_collective_cost f;
    double r2 = 0;
    if (osdp_collective_fit(one_step, x, y, N_SIZES, 0, &f, &r2) != OSDP_OK) {
        /* too noisy to fit: keep the fallback rather than fail the whole profile */
        *out = *fallback;
        if (world->rank == 0)
            printf("  %-13s  times do not grow with size: noisy machine? [%s] keeps one ring step's figures (--reps 21 "
                   "may help)\n", section, section);
        snprintf(note + len, note_size - len, "%s: the times did not grow with size: one ring step's figures\n", section);
        return OSDP_OK;
    }
    *out = f;
    if (world->rank == 0)
        printf("  %-13s  fit: alpha %.3e s, beta %.3e s/B (%.2f GB/s), R^2 %.5f\n", section, f.alpha, f.beta,
               1e-9 / f.beta, r2);
    snprintf(note + len, note_size - len, "%s: ping-pong of ranks (2i, 2i+1) of %s, %s, half the "
             "round trip,\nmedian of %d runs of the slowest pair, sizes 4 KiB to %.1f MiB; fit t = alpha + beta S: "
             "alpha %.3e s, beta %.3e s/B (%.2f GB/s), R^2 %.5f\n", section,
             strcmp(section, "p2p") == 0 ? "each node" : "the ranks of equal index on the nodes",
             n_turns > 0 ? "the pairs of the emulated nodes in turn" : "every pair at once", reps,
             (double)top / 1048576.0, f.alpha, f.beta, 1e-9 / f.beta, r2);
    return OSDP_OK;
}

/* call, alpha and beta of the all-gather and the reduce-scatter
 * (osdp/collective_fit.h) measured over each of the n_groups
 * communicators in turn (every group of the world that the split made at
 * once, the slowest rank; groups inside the nodes, node_comm not
 * MPI_COMM_NULL: time_collective), at total sizes S geometric from 4 KiB to `top`,
 * into *ag and *rs; one fit through every group's points, with a per-call
 * term when the groups have more than one size (on one size, call and
 * alpha are one constant: alpha takes it).  `level` names them in the
 * output.  Collective over the world; appends to note. */
static osdp_status profile_collectives(const osdp_world *world, osdp_comm *const *groups, int n_groups,
                                       MPI_Comm node_comm, const char *level, size_t top, int reps, osdp_collective_cost *ag, osdp_collective_cost *rs,
                                       char *note, size_t note_size)
{
    enum { MAX_GROUPS = 2 };
    const int root = world->rank == 0;
    int sizes_differ = 0;
    for (int g = 1; g < n_groups; g++) sizes_differ |= groups[g]->size != groups[0]->size;
    for (int coll = 0; coll < 2; coll++) {
        double steps[MAX_GROUPS * N_SIZES], step_bytes[MAX_GROUPS * N_SIZES], y[MAX_GROUPS * N_SIZES];
        int n = 0;
        char cn[64];
        snprintf(cn, sizeof cn, "%s%s", level, coll ? "reduce-scatter" : "all-gather");
        for (int g = 0; g < n_groups && g < MAX_GROUPS; g++) {
            const int N = groups[g]->size;
            if (root) printf("  %-14s n=%-2d", cn, N);
            for (int i = 0; i < N_SIZES; i++, n++) {
                /* geometric from 4 KiB to `top`: the model's operator sizes */
                double at = 4096.0 * pow((double)top / 4096.0, (double)i / (N_SIZES - 1));
                size_t bytes = ((size_t)at + 4 * (size_t)N - 1) / (4 * (size_t)N) * (4 * (size_t)N);
                const collective_kind kind = coll ? COLL_REDUCE_SCATTER : COLL_ALL_GATHER;
                const int n_reps = bytes > (8u << 20) ? (reps + 1) / 2 : reps;
                osdp_status s = time_collective(world, node_comm, groups[g], kind, bytes, n_reps, &y[n]);
                if (s != OSDP_OK) return s;
                steps[n] = N - 1;
                step_bytes[n] = (double)(N - 1) / N * (double)bytes;
                if (root) printf(" %6.0fKiB:%8.3fms", (double)bytes / 1024, 1e3 * y[n]);
            }
            if (root) printf("\n");
        }
        osdp_collective_cost *cc = coll ? rs : ag;
        double r2 = 0;
        if (osdp_collective_fit(steps, step_bytes, y, n, sizes_differ, cc, &r2) != OSDP_OK)
            return osdp_error_set(OSDP_ERR_COMM, "profile: the %s times do not grow with size: noisy machine? try --reps 21",
                                  cn);
        char call[64] = "";
        if (sizes_differ) snprintf(call, sizeof call, "call %.3e s, ", cc->call);
        if (root)
            printf("  %-14s fit: %salpha %.3e s, beta %.3e s/B (%.2f GB/s), R^2 %.5f\n", cn, call, cc->alpha, cc->beta,
                   1e-9 / cc->beta, r2);
        const size_t len = strlen(note);
        snprintf(note + len, note_size - len, "%s: %salpha %.3e s, beta %.3e s/B (%.2f GB/s), R^2 %.5f\n", cn, call,
                 cc->alpha, cc->beta, 1e-9 / cc->beta, r2);
    }
    return OSDP_OK;
}

/* The network's two levels, and [p2p] at each.  One node (real or
 * emulated): [all_gather] and [reduce_scatter] over all ranks, as ever,
 * [p2p] over pairs of them.  More than one node: [all_gather] /
 * [reduce_scatter] over the ranks of each node (every real node at once,
 * emulated nodes in turn: time_collective) and [p2p] over pairs
 * of them (every real node at once, emulated nodes in turn); [internode_all_gather] / [internode_reduce_scatter] over two
 * group sizes that span nodes, the ranks of equal index on their nodes
 * (one per node: each ring step crosses the link; every such group at
 * once) and the whole world, fitted together so that a call's once-only
 * cost (`call`) and a ring step's (alpha) come apart: a ring of n ranks
 * across the link is priced call + (n-1)(alpha + S/n beta) at any n, not
 * (n-1) times what one 2-rank call costs; [internode_p2p] a ping-pong of
 * pairs of ranks of equal index on two nodes (emulated: one node index at
 * a time).  Nodes of one rank each:
 * every group spans nodes, so both levels get the world's figures.
 * `stream`: the p2p messages' largest size.  Collective over the world;
 * appends to note. */
void osdp_profile_levels(const osdp_world *world, osdp_comm *all, size_t top, size_t stream, int reps, osdp_device *dev,
                           char *note, size_t note_size)
{
    if (world->n_nodes <= 1 || world->node_size <= 1) {
        osdp_check_all(profile_collectives(world, &all, 1, MPI_COMM_NULL, "", top, reps, &dev->all_gather,
                                           &dev->reduce_scatter, note, note_size));
        osdp_check_all(profile_p2p(world, all, 0, 0, "p2p", stream, reps, &dev->all_gather, &dev->p2p, note, note_size));
        if (world->n_nodes > 1) osdp_device_set_link(dev, world->node_size, &dev->all_gather);
        return;
    }
    size_t len = strlen(note);
    snprintf(note + len, note_size - len,
             "Two levels (%s%s%d nodes x %d ranks): in-node figures over the ranks of each node%s, inter-node\n"
             "figures over the ranks of equal index on their nodes and over all %d ranks (call: once per call, alpha:\n"
             "per ring step, fitted together: t = call + (n-1) alpha + (n-1)/n beta S).\n",
             world->emulated ? world->emulation : "nodes from MPI_COMM_TYPE_SHARED", world->emulated ? "; " : ": ",
             world->n_nodes, world->node_size,
             world->emulated ? "\n(the emulated nodes in turn, the others idle: real nodes do not share cores)" : "",
             world->size);
    MPI_Comm node_group, across_group;
    MPI_Comm_split(MPI_COMM_WORLD, world->node, world->rank, &node_group);
    MPI_Comm_split(MPI_COMM_WORLD, world->node_rank, world->rank, &across_group);
    osdp_comm in_node, across;
    osdp_check_all(net_comm(&in_node, &node_group));
    osdp_check_all(net_comm(&across, &across_group));
    MPI_Comm_free(&across_group);
    osdp_comm *in_node_groups[1] = {&in_node}, *spanning[2] = {&across, all};
    osdp_check_all(profile_collectives(world, in_node_groups, 1, node_group, "", top, reps, &dev->all_gather,
                                       &dev->reduce_scatter, note, note_size));
    MPI_Comm_free(&node_group);
    osdp_check_all(profile_collectives(world, spanning, 2, MPI_COMM_NULL, world->emulated ? "emulated internode " : "internode ", top,
                                       reps, &dev->internode.all_gather, &dev->internode.reduce_scatter, note, note_size));
    /* emulated nodes take turns: one node's pairs at a time; across, one pair of nodes' ranks of equal index */
    const int turns = world->emulated;
    osdp_check_all(profile_p2p(world, &in_node, world->node, turns ? world->n_nodes : 0, "p2p", stream, reps,
                               &dev->all_gather, &dev->p2p, note, note_size));
    const osdp_collective_cost ring_step = {.alpha = dev->internode.all_gather.alpha,
                                            .beta = dev->internode.all_gather.beta};
    osdp_check_all(profile_p2p(world, &across, world->node_rank, turns ? world->node_size : 0, "internode_p2p", stream,
                               reps, &ring_step, &dev->internode.p2p, note, note_size));
    dev->internode.given = 1;
    osdp_comm_destroy(&in_node);
    osdp_comm_destroy(&across);
}

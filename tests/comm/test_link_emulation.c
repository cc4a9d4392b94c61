/* The emulated link on real MPI ranks (tests/system/test_emulated_link.sh runs it under
 * mpiexec -n 4, as 2 emulated nodes of 2 ranks): a collective or message
 * whose group spans the two nodes takes at least the link's time
 * (osdp_link_floor_seconds, measured on every rank from the call to its
 * completion), blocking and non-blocking, and moves the same numbers; a
 * group inside one node gets no link; a non-blocking collective's floor
 * starts at its wait on MPI, or at a blocking message before it (MPI's
 * progress runs there), at its issue where the backend advances alone.
 * And the MPI backend's progress entry completes a collective alone. */
#include "config.h"

#include "check_main.h"

#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "osdp/comm.h"
#include "osdp/link_emulation.h"
#include "util/clock.h"

#define LINK "50M,200us"   /* 1 MiB all-gathered over 4 ranks: 3 ring steps of 256 KiB, 16 ms */

static int world_rank(void)
{
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

/* the emulation of 2 nodes x 2 ranks and a communicator over the ranks of
 * `colour` (world ranks in order) */
static void make_comm(osdp_comm *c, int colour)
{
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ck_assert_int_eq(size, 4);
    osdp_link_emulation e;
    ck_assert_msg(osdp_link_emulation_parse(&e, 2, LINK, size) == OSDP_OK, "%s", osdp_error_message());
    osdp_comm_emulate(&e);
    MPI_Comm group;
    MPI_Comm_split(MPI_COMM_WORLD, colour, world_rank(), &group);
    ck_assert(osdp_comm_create_mpi(c, &group) == OSDP_OK);
    MPI_Comm_free(&group);
}

/* the communicator gone, and the emulation with it */
static void end_comm(osdp_comm *c)
{
    osdp_comm_destroy(c);
    osdp_comm_emulate(NULL);
}

/* the rank computes for s seconds, outside MPI */
static void compute_for(double s)
{
    const struct timespec t = {(time_t)s, (long)(1e9 * (s - (double)(time_t)s))};
    nanosleep(&t, NULL);
}

/* once every rank is here: how long this rank's wait for req takes */
static double wait_after_barrier(osdp_comm *c, osdp_request *req)
{
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = osdp_now_seconds();
    ck_assert(osdp_comm_wait(c, req) == OSDP_OK);
    return osdp_now_seconds() - t0;
}

START_TEST(test_groups_get_the_link)
{
    const int r = world_rank();
    osdp_comm all, in_node, across;
    make_comm(&all, 0);
    make_comm(&in_node, r / 2);      /* {0, 1}, {2, 3}: inside a node */
    make_comm(&across, r % 2);       /* {0, 2}, {1, 3}: one rank per node */
    ck_assert(all.link != NULL);
    ck_assert(in_node.link == NULL);
    ck_assert(across.link != NULL);
    osdp_comm_destroy(&all);
    osdp_comm_destroy(&in_node);
    osdp_comm_destroy(&across);
    osdp_comm_emulate(NULL);   /* no emulation: no link */
    osdp_comm plain;
    ck_assert(osdp_comm_create_mpi(&plain, &(MPI_Comm){MPI_COMM_WORLD}) == OSDP_OK);
    ck_assert(plain.link == NULL);
    osdp_comm_destroy(&plain);
}
END_TEST

/* every collective kind over the 4 ranks, blocking and non-blocking:
 * measured >= the floor, and the right sums */
START_TEST(test_collectives_take_the_link_time)
{
    osdp_comm c;
    make_comm(&c, 0);
    const osdp_link_emulation *e = osdp_comm_emulation();
    const size_t count = 65536;   /* floats per rank: 1 MiB gathered */
    float *shard = malloc(count * sizeof(float)), *full = malloc(4 * count * sizeof(float));
    ck_assert(shard && full);
    const int r = world_rank();
    for (int blocking = 1; blocking >= 0; blocking--) {
        for (size_t i = 0; i < count; i++) shard[i] = (float)(r + 1);
        osdp_request req = {NULL};
        double t0 = osdp_now_seconds();
        ck_assert(osdp_comm_all_gather(&c, shard, full, count, OSDP_FLOAT32, blocking ? NULL : &req) == OSDP_OK);
        ck_assert(osdp_comm_wait(&c, &req) == OSDP_OK);
        double took = osdp_now_seconds() - t0, floor_s = osdp_link_floor_seconds(e, OSDP_COLL_ALL_GATHER, 4, 4 * count * 4);
        ck_assert_msg(took >= floor_s, "all-gather (%s) took %.6f s < the link's %.6f s", blocking ? "blocking" : "waited",
                      took, floor_s);
        ck_assert(floor_s > 0.015);
        for (int k = 0; k < 4; k++) ck_assert(full[(size_t)k * count] == (float)(k + 1));

        t0 = osdp_now_seconds();
        ck_assert(osdp_comm_reduce_scatter(&c, full, shard, count, OSDP_FLOAT32, blocking ? NULL : &req) == OSDP_OK);
        ck_assert(osdp_comm_wait(&c, &req) == OSDP_OK);
        took = osdp_now_seconds() - t0;
        floor_s = osdp_link_floor_seconds(e, OSDP_COLL_REDUCE_SCATTER, 4, 4 * count * 4);
        ck_assert_msg(took >= floor_s, "reduce-scatter took %.6f s < %.6f s", took, floor_s);
        ck_assert(shard[0] == 4.0f * (float)(r + 1));   /* every rank's block r is r + 1 */

        t0 = osdp_now_seconds();
        ck_assert(osdp_comm_all_reduce(&c, shard, count, OSDP_FLOAT32, blocking ? NULL : &req) == OSDP_OK);
        ck_assert(osdp_comm_wait(&c, &req) == OSDP_OK);
        took = osdp_now_seconds() - t0;
        floor_s = osdp_link_floor_seconds(e, OSDP_COLL_ALL_REDUCE, 4, count * 4);
        ck_assert_msg(took >= floor_s, "all-reduce took %.6f s < %.6f s", took, floor_s);
        ck_assert(shard[0] == 4.0f * (1 + 2 + 3 + 4));
    }
    /* a node-first reduction's pieces: an all-gather in a block order (rank r's part at block 3 - r), one call
     * that the link floors like any all-gather; an in-place reduce-scatter whose block lies where the backend says */
    const int reversed[4] = {3, 2, 1, 0};
    ck_assert(osdp_comm_set_block_order(&c, reversed) == OSDP_OK);
    for (size_t i = 0; i < count; i++) shard[i] = (float)(r + 1);
    double t0 = osdp_now_seconds();
    ck_assert(osdp_comm_all_gather(&c, shard, full, count, OSDP_FLOAT32, NULL) == OSDP_OK);
    double took = osdp_now_seconds() - t0, floor_s = osdp_link_floor_seconds(e, OSDP_COLL_ALL_GATHER, 4, 4 * count * 4);
    ck_assert_msg(took >= floor_s, "ordered all-gather took %.6f s < the link's %.6f s", took, floor_s);
    for (int k = 0; k < 4; k++)
        ck_assert(full[(size_t)k * count] == (float)(4 - k) && full[(size_t)k * count + count - 1] == (float)(4 - k));
    ck_assert_int_eq(c.traffic.calls[OSDP_COLL_ALL_GATHER], 3);
    ck_assert(osdp_comm_set_block_order(&c, NULL) == OSDP_OK && c.block_of == NULL);
    const int twice[4] = {0, 1, 1, 2};
    ck_assert_int_eq(osdp_comm_set_block_order(&c, twice), OSDP_ERR_INPUT);
    ck_assert(osdp_comm_reduce_scatter_in_place(&c, full, count, OSDP_FLOAT32, NULL) == OSDP_OK);
    ck_assert(full[osdp_comm_in_place_offset(&c, count)] == 4.0f * (float)(4 - r));
    free(shard);
    free(full);
    end_comm(&c);
}
END_TEST

/* two calls in flight on one communicator share its link: the second's
 * floor starts when the first's ends, so two back-to-back non-blocking
 * all-gathers take at least the sum of their floors (each alone: one);
 * a blocking call behind one in flight returns after both floors */
START_TEST(test_calls_on_one_communicator_queue)
{
    osdp_comm c;
    make_comm(&c, 0);
    const osdp_link_emulation *e = osdp_comm_emulation();
    const size_t count = 65536;
    float *shard = malloc(2 * count * sizeof(float)), *full = malloc(2 * 4 * count * sizeof(float));
    ck_assert(shard && full);
    for (size_t i = 0; i < 2 * count; i++) shard[i] = (float)(world_rank() + 1);
    const double floor_s = osdp_link_floor_seconds(e, OSDP_COLL_ALL_GATHER, 4, 4 * count * 4);
    osdp_request first = {NULL}, second = {NULL};
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = osdp_now_seconds();
    ck_assert(osdp_comm_all_gather(&c, shard, full, count, OSDP_FLOAT32, &first) == OSDP_OK);
    ck_assert(osdp_comm_all_gather(&c, shard + count, full + 4 * count, count, OSDP_FLOAT32, &second) == OSDP_OK);
    ck_assert(osdp_comm_wait(&c, &second) == OSDP_OK);   /* waited out of order: its floor is still the second */
    double took = osdp_now_seconds() - t0;
    ck_assert_msg(took >= 2 * floor_s, "two all-gathers in flight took %.6f s < the sum of their floors %.6f s", took,
                  2 * floor_s);
    ck_assert(osdp_comm_wait(&c, &first) == OSDP_OK);
    for (int k = 0; k < 4; k++) ck_assert(full[4 * count + (size_t)k * count] == (float)(k + 1));
    t0 = osdp_now_seconds();
    ck_assert(osdp_comm_all_gather(&c, shard, full, count, OSDP_FLOAT32, &first) == OSDP_OK);
    ck_assert(osdp_comm_all_gather(&c, shard, full + 4 * count, count, OSDP_FLOAT32, NULL) == OSDP_OK);
    took = osdp_now_seconds() - t0;
    ck_assert(osdp_comm_wait(&c, &first) == OSDP_OK);
    ck_assert_msg(took >= 2 * floor_s, "a blocking all-gather behind one in flight returned after %.6f s < the two "
                  "floors %.6f s", took, 2 * floor_s);
    free(shard);
    free(full);
    end_comm(&c);
}
END_TEST

/* collectives on two communicators share the rank's link too: an
 * all-gather in flight on one (a prefetch) and a blocking one on the other
 * (the node-first reduction's cross stage) take at least the sum */
START_TEST(test_collectives_on_two_communicators_queue)
{
    osdp_comm first_comm, second_comm;
    make_comm(&first_comm, 0);
    make_comm(&second_comm, 0);
    const osdp_link_emulation *e = osdp_comm_emulation();
    const size_t count = 65536;
    float *shard = malloc(count * sizeof(float)), *full = malloc(2 * 4 * count * sizeof(float));
    ck_assert(shard && full);
    for (size_t i = 0; i < count; i++) shard[i] = (float)(world_rank() + 1);
    const double floor_s = osdp_link_floor_seconds(e, OSDP_COLL_ALL_GATHER, 4, 4 * count * 4);
    osdp_request in_flight = {NULL};
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = osdp_now_seconds();
    ck_assert(osdp_comm_all_gather(&first_comm, shard, full, count, OSDP_FLOAT32, &in_flight) == OSDP_OK);
    ck_assert(osdp_comm_all_gather(&second_comm, shard, full + 4 * count, count, OSDP_FLOAT32, NULL) == OSDP_OK);
    const double took = osdp_now_seconds() - t0;
    ck_assert(osdp_comm_wait(&first_comm, &in_flight) == OSDP_OK);
    ck_assert_msg(took >= 2 * floor_s, "a blocking all-gather behind one in flight on another communicator returned "
                  "after %.6f s < the two floors %.6f s", took, 2 * floor_s);
    for (int k = 0; k < 4; k++) ck_assert(full[4 * count + (size_t)k * count] == (float)(k + 1));
    free(shard);
    free(full);
    osdp_comm_destroy(&first_comm);
    end_comm(&second_comm);
}
END_TEST

/* A rank that computes between a collective's issue and its wait: the MPI
 * backend moves no data meanwhile (no progress thread), so the floor starts
 * at the wait and the wait takes all of it; a backend whose collectives
 * advance alone (NCCL's flag, set here on a copy of the MPI table) has its
 * floor run from the issue, spent by the time the rank waits */
START_TEST(test_floor_starts_at_the_wait_without_progress)
{
    osdp_comm c;
    make_comm(&c, 0);
    const osdp_link_emulation *e = osdp_comm_emulation();
    const size_t count = 4 * 65536;   /* 4 MiB all-gathered: 3 ring steps of 1 MiB, about 63 ms */
    float *shard = malloc(count * sizeof(float)), *full = malloc(4 * count * sizeof(float));
    ck_assert(shard && full);
    for (size_t i = 0; i < count; i++) shard[i] = (float)(world_rank() + 1);
    const double floor_s = osdp_link_floor_seconds(e, OSDP_COLL_ALL_GATHER, 4, 4 * count * 4);
    /* 3 floors of compute, so that a backend advancing alone has spent its floor long before the
     * wait; the wait may then take up to a whole floor (63 ms) of a loaded machine's late wake-ups */
    ck_assert(c.ops->advances_alone == 0);
    osdp_comm_backend alone = *c.ops;
    alone.advances_alone = 1;
    for (int advances = 0; advances < 2; advances++) {
        if (advances) c.ops = &alone;
        osdp_request req = {NULL};
        MPI_Barrier(MPI_COMM_WORLD);
        ck_assert(osdp_comm_all_gather(&c, shard, full, count, OSDP_FLOAT32, &req) == OSDP_OK);
        compute_for(3 * floor_s);
        const double waited = wait_after_barrier(&c, &req);   /* every rank has issued it and computed */
        if (advances)
            ck_assert_msg(waited < floor_s, "advancing alone: the wait took %.6f s of a floor of %.6f s spent "
                          "while the rank computed", waited, floor_s);
        else
            ck_assert_msg(waited >= floor_s, "MPI: the wait took %.6f s < the link's %.6f s (its data moves only in "
                          "the wait)", waited, floor_s);
        for (int k = 0; k < 4; k++) ck_assert(full[(size_t)k * count] == (float)(k + 1));
    }
    free(shard);
    free(full);
    end_comm(&c);
}
END_TEST

/* A rank that stays in MPI until a message arrives (a blocking receive:
 * the pipeline's wait for its stage's input) advances the collectives it
 * has in flight there, so their floors start at the receive: an all-gather
 * issued before a receive that blocks 3 floors is done by its wait; the
 * sender, which computed those 3 floors outside MPI, starts its floor at
 * its own blocking send and waits most of a floor (the message itself stays
 * inside a node: no floor of its own) */
START_TEST(test_blocking_message_starts_the_floors)
{
    osdp_comm c, in_node;
    const int r = world_rank(), receiver = r % 2;   /* 0 -> 1 and 2 -> 3: inside each node */
    make_comm(&c, 0);
    make_comm(&in_node, r / 2);
    ck_assert(c.link != NULL && in_node.link == NULL);
    const osdp_link_emulation *e = osdp_comm_emulation();
    const size_t count = 16 * 65536;   /* 16 MiB all-gathered: 3 ring steps of 4 MiB, about 252 ms */
    float *shard = malloc(count * sizeof(float)), *full = malloc(4 * count * sizeof(float)), token = (float)r;
    ck_assert(shard && full);
    for (size_t i = 0; i < count; i++) shard[i] = (float)(r + 1);
    const double floor_s = osdp_link_floor_seconds(e, OSDP_COLL_ALL_GATHER, 4, 4 * count * 4);
    osdp_request req = {NULL};
    MPI_Barrier(MPI_COMM_WORLD);
    ck_assert(osdp_comm_all_gather(&c, shard, full, count, OSDP_FLOAT32, &req) == OSDP_OK);
    if (receiver) {
        ck_assert(osdp_comm_recv(&in_node, &token, 1, OSDP_FLOAT32, 0, NULL) == OSDP_OK);
        ck_assert(token == (float)(r - 1));
    } else {
        compute_for(3 * floor_s);   /* the sender computes */
        ck_assert(osdp_comm_send(&in_node, &token, 1, OSDP_FLOAT32, 1, NULL) == OSDP_OK);
    }
    const double waited = wait_after_barrier(&c, &req);
    if (receiver)
        ck_assert_msg(waited < floor_s, "after a receive that blocked 3 floors the wait took %.6f s of a floor of "
                      "%.6f s (its data should have moved in the receive)", waited, floor_s);
    else
        ck_assert_msg(waited >= 0.5 * floor_s, "a rank that computed outside MPI waited %.6f s of a floor of %.6f s "
                      "(its floor starts at its blocking send)", waited, floor_s);
    for (int k = 0; k < 4; k++) ck_assert(full[(size_t)k * count] == (float)(k + 1));
    free(shard);
    free(full);
    osdp_comm_destroy(&in_node);
    end_comm(&c);
}
END_TEST

/* The MPI backend's progress entry (osdp/comm.h): nothing in flight, 0; a
 * non-blocking all-reduce of 4 MiB (beyond MPICH's eager sizes: its rounds
 * need the ranks' MPI calls) completes through progress calls alone, before
 * its wait, which then finds the sums there; no emulation */
START_TEST(test_progress_completes_a_collective)
{
    osdp_comm c;
    ck_assert(osdp_comm_create_mpi(&c, &(MPI_Comm){MPI_COMM_WORLD}) == OSDP_OK);
    const int r = world_rank();
    const size_t count = 1 << 20;
    float *buf = malloc(count * sizeof(float));
    ck_assert(buf != NULL);
    for (size_t i = 0; i < count; i++) buf[i] = (float)(r + 1) * (float)(i % 7);
    ck_assert_int_eq(osdp_comm_progress(&c), 0);
    osdp_request req = {NULL};
    ck_assert(osdp_comm_all_reduce(&c, buf, count, OSDP_FLOAT32, &req) == OSDP_OK);
    const double t0 = osdp_now_seconds();
    long polls = 0;
    int left = 1;
    while (left > 0 && osdp_now_seconds() - t0 < 60) {
        left = osdp_comm_progress(&c);
        ck_assert(left == 0 || left == 1);   /* the one request, still in its slot */
        polls++;
    }
    ck_assert_msg(left == 0, "the all-reduce did not complete in 60 s of progress calls (%ld polls)", polls);
    ck_assert(req.impl != NULL);   /* not waited: the progress calls completed it */
    for (size_t i = 0; i < count; i += 4099) ck_assert(buf[i] == 10.0f * (float)(i % 7));   /* 1 + 2 + 3 + 4 */
    ck_assert(osdp_comm_wait(&c, &req) == OSDP_OK && req.impl == NULL);
    ck_assert_int_eq(osdp_comm_progress(&c), 0);   /* its slot free again */
    free(buf);
    osdp_comm_destroy(&c);
}
END_TEST

/* a message from node 0 to node 1 waits out the link on both ends; one
 * inside a node has no floor to wait (its link entry is never consulted) */
START_TEST(test_messages_across_nodes)
{
    osdp_comm c;
    make_comm(&c, 0);
    const osdp_link_emulation *e = osdp_comm_emulation();
    const int r = world_rank(), peer = r ^ 2;   /* 0 <-> 2, 1 <-> 3: across */
    const size_t count = 65536;
    float *buf = malloc(count * sizeof(float));
    ck_assert(buf != NULL);
    for (size_t i = 0; i < count; i++) buf[i] = (float)r;
    double t0 = osdp_now_seconds();
    osdp_request req = {NULL};
    if (r < 2) ck_assert(osdp_comm_send(&c, buf, count, OSDP_FLOAT32, peer, &req) == OSDP_OK);
    else ck_assert(osdp_comm_recv(&c, buf, count, OSDP_FLOAT32, peer, &req) == OSDP_OK);
    ck_assert(osdp_comm_wait(&c, &req) == OSDP_OK);
    const double took = osdp_now_seconds() - t0, floor_s = osdp_link_floor_seconds(e, OSDP_COLL_P2P, 2, count * 4);
    ck_assert_msg(took >= floor_s, "message took %.6f s < the link's %.6f s", took, floor_s);
    if (r >= 2) ck_assert(buf[0] == (float)peer);
    free(buf);
    end_comm(&c);
}
END_TEST

static Suite *link_suite(void)
{
    const TTest *link[] = {test_groups_get_the_link, test_collectives_take_the_link_time, test_calls_on_one_communicator_queue,
                            test_collectives_on_two_communicators_queue, test_floor_starts_at_the_wait_without_progress,
                            test_messages_across_nodes, test_blocking_message_starts_the_floors, NULL};
    const TTest *progress[] = {test_progress_completes_a_collective, NULL};
    const osdp_check_case cases[] = {{.name = "link", .tests = link}, {.name = "progress", .tests = progress}};
    return osdp_check_suite("link_emulation", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = link_suite, .setup = osdp_check_mpi_cpu_setup,
                                                    .teardown = osdp_check_mpi_teardown};

/* Emulated nodes and an emulated link between them (DESIGN.md §9), so that
 * the two levels of a network can be measured on one machine: with
 * --ranks-per-node R world rank r sits on emulated node r / R, and with
 * --emulate-link BANDWIDTH,LATENCY every collective or message of a group
 * whose ranks sit on more than one emulated node takes at least the time the
 * link would need.  Never the default; every log line that depends on it says
 * "emulated".
 *
 * The floor (osdp_link_floor_seconds).  A ring over the n ranks of a group
 * that spans nodes has a step over the link between two nodes, and every
 * step waits for its slowest link; the link moves a step's S/n bytes in
 * latency + (S/n) / bandwidth (alpha = latency, beta = 1 / bandwidth):
 *   all-gather, reduce-scatter  (n-1)(alpha + S/n beta)     S: the full buffer
 *                               (the node and cross kinds alike: a node-first
 *                               reduction's cross stage over the K-rank group)
 *   all-reduce                  2 (n-1)(alpha + S/n beta)   (reduce-scatter + all-gather)
 *   broadcast                   alpha + S beta              (pipelined: the link carries S once)
 *   send / receive              alpha + S beta              (peer on another node; else none)
 * which is the cost model's own form with the link's alpha and beta, so a
 * profile through the emulated link reads them back.  The wrapper
 * (src/comm/link_emulation.c) times each call from its start on this rank
 * and, once the real operation has completed (a blocking call's return, or
 * osdp_comm_wait of a non-blocking one), sleeps out what remains of the
 * floor: the measured time is max(real, floor).  A rank's floors queue,
 * blocking and non-blocking alike: a call's floor starts when the previous
 * one's ends,
 *   deadline = max(start, the previous deadline) + floor,
 * as one link carries one transfer at a time (the cost model prices them in
 * sequence).  Collectives queue across all of the rank's communicators: a
 * ring uses both directions of the link, so a data group's prefetched
 * all-gather and the node-first reduction's cross reduce-scatter, on two
 * communicators, share it.  Messages queue per communicator: on two
 * emulated nodes a rank's messages that cross the link on one communicator
 * all go one way (the pipeline's forward communicator: sends to the next
 * stage or receives from the previous one), and the link carries both
 * directions at once.  A message inside a node has no floor and does not
 * queue.  start is when a blocking call completed (every rank it waits for
 * has entered it); for a non-blocking collective, its issue where the
 * backend moves data while the rank computes (NCCL: advances_alone,
 * osdp/comm.h), and else (MPI without a progress thread: a nonblocking
 * collective's rounds advance only inside MPI calls) the first moment the
 * rank stays inside MPI after its issue: its next wait (of any request), a
 * blocking collective, or a blocking send or receive (a pipeline stage's
 * wait for its input: MPI's progress engine runs there for every request in
 * flight), where every collective issued before and not yet started starts,
 * in issue order; a collective's own wait or a blocking collective starts
 * it once the real operation has completed, as above.  The runtime's
 * progress pokes (osdp/comm.h: one MPI_Request_get_status per request
 * between kernels) start none: a poke advances a collective by the rounds
 * whose data has already arrived, the floor models the whole transfer as
 * one interval.  On the CPU path the link's time then adds to the compute
 * between a collective's issue and its wait, as the default cost model
 * (paper: compute + comm) prices it; from the issue, it hid behind that
 * compute (DDP and FSDP on 8 emulated ranks ran 17-22% under the
 * prediction, doc/benchmarks.md).  A message's start is its issue on either
 * backend: the receiver's call moves it. */
#ifndef OSDP_LINK_EMULATION_H
#define OSDP_LINK_EMULATION_H

#include <stddef.h>
#include "osdp/comm.h"
#include "osdp/error.h"

typedef struct osdp_link_emulation {
    int ranks_per_node;     /* emulated node size R; 0: not emulated (the real nodes, MPI_COMM_TYPE_SHARED) */
    int n_nodes;            /* world ranks / R */
    int has_link;           /* 1: --emulate-link given */
    double alpha;           /* the link's latency, s */
    double beta;            /* s per byte: 1 / the link's bandwidth */
} osdp_link_emulation;

/* From --ranks-per-node (0: not given) and --emulate-link (NULL: not
 * given) for a world of world_size ranks.  OSDP_ERR_INPUT naming the option:
 * R that does not divide the ranks, a link without --ranks-per-node, a
 * bandwidth that is not a number > 0 with an optional K, M, G or T suffix
 * (decimal, bytes per second: 12.5G is 12.5e9 B/s), a latency that is not a
 * number >= 0 with a unit s, ms, us or ns.  Every rank gets the same answer. */
osdp_status osdp_link_emulation_parse(osdp_link_emulation *e, long long ranks_per_node, const char *link,
                                      int world_size);
/* "emulated: 2 nodes x 2 ranks, link 12.5 GB/s 5 us" ("..., no link" without
 * --emulate-link); "" when not emulated */
const char *osdp_link_emulation_describe(const osdp_link_emulation *e, char *buf, size_t n);
/* the floor above for a call of `kind` over a group of n ranks moving
 * `bytes` (the full buffer; a message's bytes) across the link */
double osdp_link_floor_seconds(const osdp_link_emulation *e, osdp_collective kind, int n, size_t bytes);

/* Process-wide, set once before any communicator is made: communicators
 * created afterwards whose group spans emulated nodes get the floor
 * (e->has_link; e NULL or without a link: none). */
void osdp_comm_emulate(const osdp_link_emulation *e);
/* the setting (NULL: none) */
const osdp_link_emulation *osdp_comm_emulation(void);

#endif

/* osdp_gpt profile's network figures (src/cli/profile_network.c): what
 * the device file's collective, message and tensor-group sections hold,
 * measured on the real ranks.  Every function is collective over the
 * world and appends what it did to `note` (the file's comment). */
#ifndef OSDP_CLI_PROFILE_NETWORK_H
#define OSDP_CLI_PROFILE_NETWORK_H

#include <stddef.h>
#include "cli/app.h"
#include "osdp/comm.h"
#include "osdp/compute.h"
#include "osdp/device.h"
#include "options.h"

#define N_SIZES 8   /* message sizes per measured line: geometric from 4 KiB to the top */

/* The buffers and communicators the figures are measured with, for every
 * function below: be NULL, host memory over MPI (the CPU backend); else be's
 * device memory over NCCL when nccl (the CUDA backend; local_device: the
 * rank's GPU), as training moves it.  Default: host memory over MPI. */
void osdp_profile_network_on(const osdp_compute_backend *be, int nccl, int local_device);

/* qsort's comparison of doubles, ascending */
int osdp_profile_cmp_double(const void *a, const void *b);

/* The network's two levels and [p2p] at each: one node, [all_gather],
 * [reduce_scatter] and [p2p] over all ranks; more than one, the in-node
 * figures over each node's ranks and [internode_*] across the nodes, the
 * collectives fitted on two group sizes (the ranks of equal index on the
 * nodes and the whole world) so that a call's once-only cost (`call`)
 * and a ring step's (alpha) come apart.  Sizes up to `top` for the
 * collectives and `stream` for the messages. */
void osdp_profile_levels(const osdp_world *world, osdp_comm *all, size_t top, size_t stream, int reps, osdp_device *dev,
                         char *note, size_t note_size);

/* [tp_all_reduce] over groups of T consecutive ranks inside a node, for
 * every such T (only_tp > 1: that one), sizes up to `top`; without a T,
 * the mean of the all-gather's and reduce-scatter's figures. */
osdp_status osdp_profile_tp_all_reduce(const osdp_world *world, int only_tp, size_t top, int reps, osdp_device *dev,
                                       char *note, size_t note_size);

#endif

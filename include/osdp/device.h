/* Device information: what the cost model knows about the machine.
 * An INI file in input/devices/, written by `osdp_gpt profile` or by hand:
 *
 *   [device]
 *   name        = a100_40gb
 *   mem_limit   = 36G        ; bytes per rank the plan may use (8G, 512M, ...; > 0)
 *   precision   = bf16       ; fp32 | bf16: element size of the gathered weights and
 *                            ; their all-gathers (4 or 2 bytes)
 *   param_bytes = 2          ; optional: that element size as a number (instead of precision)
 *   grad_bytes  = 4          ; optional (default: the weights'): full gradients and
 *                            ; their reduce-scatters; osdp's GPU runtime reduces in fp32
 *   act_bytes   = 4          ; optional (default 4): bytes per activation and
 *                            ; workspace element
 *   ranks_per_node = 8       ; optional: ranks one node holds (its GPUs); a tensor-parallel
 *                            ; group must fit in one node (plan --tp).  Absent: not stated,
 *                            ; the whole job is taken as one node (no bound on --tp)
 *   [all_gather]
 *   alpha = 5e-6             ; s, latency per ring step            (>= 0)
 *   beta  = 4.3e-12          ; s/byte per ring step = 1 / busbw    (> 0)
 *   [reduce_scatter]
 *   alpha = 5e-6
 *   beta  = 4.3e-12
 *   [tp_all_reduce]          ; optional: the tensor-parallel group's all-reduce of
 *   alpha = 3e-6             ; activations, over consecutive ranks inside one node
 *   beta  = 4.3e-12          ; (both or neither; absent: the mean of the all-gather's
 *                            ; and the reduce-scatter's, so that an all-reduce costs
 *                            ; their sum, as on the flat network the file describes)
 *   [p2p]                    ; optional: a point-to-point message between two ranks (the
 *   alpha = 5e-6             ; pipeline's, between stages): S bytes take alpha + S beta
 *   beta  = 4.3e-12          ; (both or neither; absent: the all-gather's figures, since one
 *                            ; ring step of an all-gather is such a message, S/N bytes sent
 *                            ; to the next rank, with no arithmetic)
 *   [internode_all_gather]   ; optional (two-level network): a ring whose group spans
 *   alpha = 5e-6             ; nodes, per ring step, bounded by the link between nodes
 *   beta  = 8e-11            ; (with [internode_reduce_scatter]: both or neither;
 *   call  = 2e-6             ; they need ranks_per_node); call: optional (>= 0, default 0),
 *   [internode_reduce_scatter] ; s once per call whatever the group's size (the profiler
 *   alpha = 5e-6             ; tells it from alpha by measuring two group sizes)
 *   beta  = 8e-11
 *   call  = 2e-6
 *   [internode_p2p]          ; optional: a message between ranks of two nodes (the
 *   alpha = 5e-6             ; [p2p] of the link; absent: [internode_all_gather]'s
 *   beta  = 8e-11            ; figures: one ring step is one message over the link)
 *   [gamma]                  ; s per FLOP, forward + backward, per operator type (> 0)
 *   embed = 6.4e-15
 *   attn  = 6.4e-15
 *   mlp   = 6.4e-15
 *   head  = 6.4e-15
 *   [gamma_fixed]            ; optional: s per operator per micro-step (>= 0, default 0)
 *   attn  = 2e-4
 *   [step]                   ; optional (>= 0, default 0): work outside the operators
 *   shard_param = 3e-9       ; s per element of the rank's shards per optimizer step
 *                            ; (AdamW, the gradient norm, the gradient copy)
 *   full_param  = 1e-10      ; s per element of the full (padded) buffers per micro-step
 *                            ; (zeroing the full gradients before the backward)
 *
 * A collective over N ranks moving S bytes in total (the full, gathered
 * buffer) takes call + (N-1)(alpha + S/N beta): N-1 ring steps of S/N bytes
 * each (paper eq. 2), plus what the call costs once (osdp_collective_time;
 * call is 0 but for the inter-node figures that state it, so a file
 * without it keeps its meaning).  In nccl-tests terms beta = 1 / busbw.  A ring all-reduce
 * over the T ranks of a tensor-parallel group is a reduce-scatter and an
 * all-gather: 2 (T-1)(alpha + S/T beta) with [tp_all_reduce]'s figures (it
 * moves 2 (T-1)/T of the buffer S per rank).
 *
 * gamma: an operator of type t that performs F FLOPs per token, forward and
 * backward together (osdp_cost_op_flops: 3 x (matmul + attention FLOPs) of
 * the forward; the embedding, which has no matmul, counts a nominal 3 d_0),
 * computes a micro-batch of b sequences of T tokens in
 * gamma_fixed_t + b T F gamma_t seconds.  gamma_fixed is what does not shrink
 * with the micro-batch (kernel launches, per-call overheads, small matrix
 * products running below the machine's rate); the profiler fits both.
 *
 * Two levels.  Without [internode_*] the network is flat: every rank sits on
 * one bus, and the inter-node figures are the in-node ones (dev->internode
 * is filled with them, .given 0), which is what every file written before
 * the two levels means.  With them, [all_gather] and [reduce_scatter] are
 * the figures of a group inside one node, and a group that spans nodes is
 * priced with the inter-node figures (osdp/cost_model.h,
 * osdp_cost_device_for_mesh); a tensor-parallel group sits inside a node.
 *
 * Every key of [all_gather], [reduce_scatter] and [gamma] and mem_limit are
 * required ([gamma_fixed] and [step] are optional); unknown sections or keys are errors, so that typos are caught. */
#ifndef OSDP_DEVICE_H
#define OSDP_DEVICE_H

#include "osdp/error.h"
#include "osdp/layout.h"

#define OSDP_N_OP_TYPES 4

typedef struct osdp_collective_cost {
    double alpha;   /* s per ring step */
    double beta;    /* s per byte per ring step */
    double call;    /* s once per call (0 unless a file's [internode_*] states it) */
} osdp_collective_cost;

/* call + (n-1)(alpha + bytes/n beta): a ring's all-gather or reduce-scatter
 * of `bytes` in total over n ranks (0 for n <= 1: nothing moves) */
double osdp_collective_time(const osdp_collective_cost *c, double n, double bytes);

/* The figures of a group whose ranks sit on more than one node: its ring
 * has a step over the link between nodes, and the slowest link bounds every
 * step. */
typedef struct osdp_device_internode {
    int given;                            /* 1: the file has [internode_*] (two levels); 0: flat */
    osdp_collective_cost all_gather, reduce_scatter;
    osdp_collective_cost p2p;             /* a message from one node to another (flat: [p2p]'s) */
} osdp_device_internode;

typedef struct osdp_device {
    char name[64];
    long long mem_limit;                  /* bytes per rank */
    int param_bytes;                      /* gathered weights and all-gathers: 2 or 4 */
    int grad_bytes;                       /* full gradients and reduce-scatters: 2 or 4 */
    int act_bytes;                        /* activations and workspace: 2 or 4 */
    int ranks_per_node;                   /* ranks a node holds; 0: not stated (one node: no bound) */
    osdp_collective_cost all_gather, reduce_scatter;
    osdp_collective_cost tp_all_reduce;   /* the tensor-parallel group's all-reduce, inside a node */
    osdp_collective_cost p2p;             /* one message between two ranks: alpha + bytes beta */
    osdp_device_internode internode;      /* a group that spans nodes (flat file: the in-node figures) */
    double gamma[OSDP_N_OP_TYPES];        /* s per FLOP, indexed by osdp_op_type */
    double gamma_fixed[OSDP_N_OP_TYPES];  /* s per operator per micro-step (optional, default 0) */
    double step_shard_param;              /* s per shard element per optimizer step (optional) */
    double step_full_param;               /* s per full-buffer element per micro-step (optional) */
} osdp_device;

/* "embed", "attn", "mlp", "head" */
const char *osdp_op_type_name(osdp_op_type t);

/* Errors (OSDP_ERR_INPUT) name the origin, the line when known, the section
 * and the key: a missing key, a value that is not a number, a zero or
 * negative bandwidth (beta <= 0), a negative latency, gamma <= 0, a memory
 * limit of 0. */
osdp_status osdp_device_parse(osdp_device *dev, const char *text, const char *origin);
osdp_status osdp_device_load(osdp_device *dev, const char *path);
/* [tp_all_reduce] from the all-gather's and reduce-scatter's figures (their
 * mean per ring step): what a file without the section gets */
void osdp_device_default_tp_all_reduce(osdp_device *dev);
/* [p2p] from the all-gather's figures (one ring step is one message):
 * what a file without the section gets */
void osdp_device_default_p2p(osdp_device *dev);
/* A flat network: dev->internode gets the in-node figures (p2p: [p2p]'s; given 0); what
 * a file without [internode_*] gets */
void osdp_device_default_internode(osdp_device *dev);
/* The two levels of an emulated (or stated) network: ranks_per_node R and
 * a link of latency link->alpha (s) and link->beta (s per byte); each
 * inter-node figure is the larger of the in-node one and the link's (a
 * step over the link takes at least the link's time), given 1 */
void osdp_device_set_link(osdp_device *dev, int ranks_per_node, const osdp_collective_cost *link);
/* Writes the file form (round-trips through osdp_device_parse); `comment`
 * (may be NULL) is written as '; ' lines at the top. */
osdp_status osdp_device_write(const osdp_device *dev, const char *comment, const char *path);

#endif

/* The bound on the work a host queues on a GPU stream ahead of the stream
 * (issue 30).  A CUDA launch returns at once while the launch queue has room;
 * when it is full the launch blocks inside the driver until the stream moves
 * on.  If the stream waits for a collective that a dead peer never completes,
 * the host then blocks in a launch for ever, where no time-out of ours runs.
 * The gate keeps the queue short of full: every `bound` launches the host
 * marks the stream (an event), and before it marks again it waits for the
 * previous mark, polling within the communication timeout (which ends the
 * job with a message).  At most 2 x (bound + one call's launches) are then
 * queued past the last mark the host has seen done — below the driver's
 * queue (about a thousand launches; one table call queues at most ~80), so
 * the host always reaches its poll.
 *
 * Pure state machine, no CUDA: the CUDA backend records and waits for the
 * events the actions name (src/cuda/backend_cuda.cu). */
#ifndef OSDP_UTIL_LAUNCH_GATE_H
#define OSDP_UTIL_LAUNCH_GATE_H

#include "osdp/error.h"

/* the default bound, and the largest allowed: both well under the driver's queue */
#define OSDP_LAUNCH_BOUND_DEFAULT 256u
#define OSDP_LAUNCH_BOUND_MAX 384u

typedef struct osdp_launch_gate {
    unsigned bound;        /* launches between marks */
    unsigned since_mark;   /* launches since the last mark */
    int marked;            /* a mark is outstanding (the host has not waited for it) */
} osdp_launch_gate;

typedef enum osdp_gate_action {
    OSDP_GATE_GO,              /* nothing to do */
    OSDP_GATE_MARK,            /* record a mark (no earlier one outstanding) */
    OSDP_GATE_WAIT_AND_MARK    /* wait for the outstanding mark, then record a new one */
} osdp_gate_action;

void osdp_launch_gate_init(osdp_launch_gate *g, unsigned bound);
/* n launches were queued: what the host must do now */
osdp_gate_action osdp_launch_gate_note(osdp_launch_gate *g, unsigned n);
/* the host waited for the whole stream (synchronize, to_host): no mark is outstanding */
void osdp_launch_gate_drained(osdp_launch_gate *g);
/* the bound from OSDP_CUDA_LAUNCH_BOUND's value (NULL or empty: the default): a whole
 * number from 1 to OSDP_LAUNCH_BOUND_MAX, else OSDP_ERR_INPUT naming the variable */
osdp_status osdp_launch_bound_parse(const char *value, unsigned *bound);

#endif

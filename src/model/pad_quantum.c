/* The pad quantum of a run's shards (osdp/compute.h, osdp/layout.h). */
#include "osdp/compute.h"

#include <errno.h>
#include <stdlib.h>

#define MAX_PAD_QUANTUM 4096

osdp_status osdp_compute_pad_quantum(const osdp_compute_backend *be, int *pad_quantum)
{
    /* a test knob: the CPU padding like CUDA (64) proves that a checkpoint
     * saved under one padding resumes under another */
    const char *knob = getenv("OSDP_PAD_QUANTUM");
    if (!knob || !*knob) {
        *pad_quantum = be->pad_quantum;
        return OSDP_OK;
    }
    char *end;
    errno = 0;
    long v = strtol(knob, &end, 10);
    if (errno || *end || v < 1 || v > MAX_PAD_QUANTUM)
        return osdp_error_set(OSDP_ERR_INPUT, "OSDP_PAD_QUANTUM=%s: expected a whole number of elements from 1 to %d "
                              "(a test knob; unset it to use the %s backend's %d)",
                              knob, MAX_PAD_QUANTUM, be->name, be->pad_quantum);
    *pad_quantum = (int)v;
    return OSDP_OK;
}

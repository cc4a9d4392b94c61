/* The quanta a run pads by (osdp/compute.h, osdp/layout.h): the shards' pad
 * quantum and the vocabulary quantum, each the backend's unless a test knob
 * in the environment says otherwise. */
#include "osdp/compute.h"

#include <errno.h>
#include <stdlib.h>

#define MAX_QUANTUM 4096

/* *quantum = the environment variable `knob` when set, else backend_value;
 * `what` says what the quantum counts, for the message on a bad value */
static osdp_status quantum_from_env(const char *knob, const char *what, const osdp_compute_backend *be,
                                    int backend_value, int *quantum)
{
    const char *text = getenv(knob);
    if (!text || !*text) {
        *quantum = backend_value;
        return OSDP_OK;
    }
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < 1 || v > MAX_QUANTUM)
        return osdp_error_set(OSDP_ERR_INPUT, "%s=%s: expected a whole number of %s from 1 to %d "
                              "(a test knob; unset it to use the %s backend's %d)",
                              knob, text, what, MAX_QUANTUM, be->name, backend_value);
    *quantum = (int)v;
    return OSDP_OK;
}

osdp_status osdp_compute_pad_quantum(const osdp_compute_backend *be, int *pad_quantum)
{
    /* the CPU padding like CUDA (64) proves that a checkpoint saved under one
     * padding resumes under another */
    return quantum_from_env("OSDP_PAD_QUANTUM", "elements", be, be->pad_quantum, pad_quantum);
}

osdp_status osdp_compute_vocab_quantum(const osdp_compute_backend *be, int *vocab_quantum)
{
    /* the CPU padding like CUDA (128) runs the vocab-parallel cross-entropy
     * over padding columns at tensor-parallel degree 1 */
    return quantum_from_env("OSDP_VOCAB_QUANTUM", "vocabulary entries", be, be->vocab_quantum, vocab_quantum);
}

/* The accounting allocator: every runtime allocation goes through it, by
 * category, so that peak bytes per rank can be measured and compared with
 * the cost model, and an emulated device limit (--mem-limit) can be enforced
 * like a device OOM.  The prediction adds up the same bytes from the
 * runtime's schedule (osdp/schedule.h). */
#ifndef OSDP_MEMORY_H
#define OSDP_MEMORY_H

#include <stddef.h>
#include "osdp/error.h"

typedef enum osdp_memory_category {
    OSDP_MEMORY_STATE,        /* sharded master weights, gradients, AdamW moments */
    OSDP_MEMORY_WEIGHTS,      /* gathered full working weights */
    OSDP_MEMORY_GRADS,        /* full (unsharded) gradients before reduce-scatter */
    OSDP_MEMORY_ACTIVATIONS,  /* saved for backward, and token ids */
    OSDP_MEMORY_WORKSPACE,    /* backward scratch */
    OSDP_MEMORY_TP_COMM,      /* the tensor-parallel collectives' staging (the vocab-parallel loss statistics) */
    OSDP_MEMORY_N_CATEGORIES
} osdp_memory_category;

struct osdp_compute_backend;

typedef struct osdp_memory {
    const struct osdp_compute_backend *backend; /* where bytes live */
    size_t limit;                               /* 0: no limit */
    size_t current[OSDP_MEMORY_N_CATEGORIES];
    size_t peak[OSDP_MEMORY_N_CATEGORIES];
    size_t current_total, peak_total;
} osdp_memory;

const char *osdp_memory_category_name(osdp_memory_category c);
void osdp_memory_init(osdp_memory *mem, const struct osdp_compute_backend *backend, size_t limit);

/* What a GPU's card leaves the runtime (issue 30).  Outside the runtime's
 * accounting the card holds the CUDA context, cuBLAS, NCCL's buffers (made at
 * the communicators' warm-up), and, later, cuBLAS's workspace, the backend's
 * scratch and the pool's fragmentation: the limit is what the card reports
 * free once every communicator is made and warmed up, less this margin for
 * the later ones. */
#define OSDP_DEVICE_MEM_MARGIN ((size_t)1 << 30)
/* *limit = the smaller of `requested` (0: none asked) and free_bytes - margin;
 * *capped = 1 when the free memory set it.  OSDP_ERR_OOM, with a message
 * naming the figures, when free_bytes does not exceed the margin. */
osdp_status osdp_memory_cap_to_free(size_t requested, size_t free_bytes, size_t margin, size_t *limit, int *capped);
/* The runtime's limit on `backend` after the communicators' warm-up: its
 * mem_info's free memory through osdp_memory_cap_to_free with
 * OSDP_DEVICE_MEM_MARGIN; `requested` unchanged where the backend has no
 * mem_info (the CPU: the limit is --mem-limit's, emulated). */
osdp_status osdp_memory_device_limit(const struct osdp_compute_backend *backend, size_t requested, size_t *limit,
                                     int *capped, size_t *free_bytes);
/* Uninitialised bytes (callers fill them); `what` names the operator or purpose for the OOM message. */
osdp_status osdp_memory_alloc(osdp_memory *mem, osdp_memory_category cat, size_t bytes, const char *what, void **out);
void osdp_memory_free(osdp_memory *mem, osdp_memory_category cat, void *ptr, size_t bytes);
/* "8G", "512M", "1.5G", "1000000" -> bytes; 0 on success */
int osdp_parse_bytes(const char *text, size_t *out);
/* human-readable, e.g. "1.23 GiB", into buf */
const char *osdp_format_bytes(double bytes, char *buf, size_t n);

#endif

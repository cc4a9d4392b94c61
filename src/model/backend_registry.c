/* The compute backends built into this binary, chosen once at start by name. */
#include "config.h"
#include "osdp/compute.h"

#include <string.h>

static const osdp_compute_backend *const registry[] = {
    &osdp_compute_cpu,
    &osdp_compute_cpu_bf16,
#ifdef OSDP_HAVE_CUDA
    &osdp_compute_cuda,
    &osdp_compute_cuda_bf16,
#endif
    NULL,
};

const osdp_compute_backend *osdp_compute_find(const char *name, osdp_dtype weight_dtype)
{
    for (int i = 0; registry[i]; i++)
        if (strcmp(registry[i]->name, name) == 0 && registry[i]->weight_dtype == weight_dtype) return registry[i];
    return NULL;
}

/* The compute backends built into this binary, chosen once at start by name. */
#include "config.h"
#include "osdp/compute.h"

#include <string.h>

static const osdp_compute_backend *const registry[] = {
    &osdp_compute_cpu,
#ifdef OSDP_HAVE_CUDA
    &osdp_compute_cuda,
#endif
    NULL,
};

const osdp_compute_backend *osdp_compute_find(const char *name)
{
    for (int i = 0; registry[i]; i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

/* The compute backends, chosen once at start by name: the CPU's built in, CUDA's from its plugin
 * (src/util/cuda_plugin.c), loaded only when asked for. */
#include "config.h"
#include "osdp/compute.h"
#include "osdp/cuda_plugin.h"

#include <string.h>

static const osdp_compute_backend *const built_in[] = {
    &osdp_compute_cpu,
    &osdp_compute_cpu_bf16,
    NULL,
};

const osdp_compute_backend *osdp_compute_find(const char *name, osdp_dtype weight_dtype)
{
    for (int i = 0; built_in[i]; i++)
        if (strcmp(built_in[i]->name, name) == 0 && built_in[i]->weight_dtype == weight_dtype) return built_in[i];
    if (strcmp(name, "cuda") != 0) return NULL;
    const osdp_cuda_plugin *cuda = osdp_cuda_plugin_load();
    if (!cuda) return NULL;
    if (cuda->fp32->weight_dtype == weight_dtype) return cuda->fp32;
    if (cuda->bf16->weight_dtype == weight_dtype) return cuda->bf16;
    return NULL;
}

const char *osdp_compute_find_failure(const char *name)
{
#ifdef OSDP_HAVE_CUDA
    if (strcmp(name, "cuda") == 0 && !osdp_cuda_plugin_load()) return osdp_cuda_plugin_error();
    return "not built (have: cpu, cuda)";
#else
    (void)name;
    return "not built (have: cpu)";
#endif
}

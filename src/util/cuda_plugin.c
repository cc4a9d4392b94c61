/* The CUDA plugin's loader (include/osdp/cuda_plugin.h).  In util because both the compute
 * registry (model) and the communicator's constructor (comm) need it; it only names their types. */
#include "config.h"
#include "osdp/cuda_plugin.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef OSDP_PLUGIN_DIR   /* the install directory: Makefile.am passes $(pkglibdir) */
#define OSDP_PLUGIN_DIR ""
#endif

static int tried;
static const osdp_cuda_plugin *plugin;
static char why[3 * PATH_MAX];

#ifdef OSDP_HAVE_CUDA
/* defined where the program links the CUDA objects itself (libosdp_cuda.a); NULL otherwise */
extern const osdp_cuda_plugin osdp_cuda_plugin_entry __attribute__((weak));

/* dlopen `path` into `plugin`, or why[] says why not */
static void open_plugin(const char *path)
{
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *e = dlerror();
        snprintf(why, sizeof why, "the CUDA backend's plugin %s could not be loaded: %s", path, e ? e : "(no reason given)");
        return;
    }
    const osdp_cuda_plugin *p = (const osdp_cuda_plugin *)dlsym(handle, "osdp_cuda_plugin_entry");
    if (!p) {
        snprintf(why, sizeof why, "%s is not osdp's CUDA plugin (no osdp_cuda_plugin_entry)", path);
    } else if (p->abi != OSDP_CUDA_PLUGIN_ABI) {
        snprintf(why, sizeof why, "the CUDA plugin %s was built for another osdp_gpt (plugin ABI %d, this program's %d): "
                 "use the libosdp_cuda.so of the same build", path, p->abi, OSDP_CUDA_PLUGIN_ABI);
    } else {
        plugin = p;
        return;
    }
    dlclose(handle);
}

#endif

static void load(void)
{
#ifndef OSDP_HAVE_CUDA
    snprintf(why, sizeof why, "this osdp_gpt was built without CUDA (configure --with-cuda)");
#else
    if (&osdp_cuda_plugin_entry) {
        plugin = &osdp_cuda_plugin_entry;
        return;
    }
    const char *env = getenv(OSDP_CUDA_PLUGIN_ENV);
    if (env && *env) {
        if (access(env, F_OK) != 0) snprintf(why, sizeof why, "the CUDA backend's plugin %s (%s) does not exist", env, OSDP_CUDA_PLUGIN_ENV);
        else open_plugin(env);
        return;
    }
    /* beside the program (a build tree, the GPU kit), then where `make install` puts it */
    char candidates[2][PATH_MAX + 32];
    int n = 0;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(candidates[n++], sizeof candidates[0], "%s/%s", exe, OSDP_CUDA_PLUGIN_FILE);
        }
    }
    if (OSDP_PLUGIN_DIR[0]) snprintf(candidates[n++], sizeof candidates[0], "%s/%s", OSDP_PLUGIN_DIR, OSDP_CUDA_PLUGIN_FILE);
    for (int i = 0; i < n; i++) {
        if (access(candidates[i], F_OK) == 0) {
            open_plugin(candidates[i]);
            return;
        }
    }
    snprintf(why, sizeof why, "the CUDA backend's plugin %s was not found (looked for %s%s%s; %s names it)",
             OSDP_CUDA_PLUGIN_FILE, n > 0 ? candidates[0] : "", n > 1 ? " and " : "", n > 1 ? candidates[1] : "",
             OSDP_CUDA_PLUGIN_ENV);
#endif
}

const osdp_cuda_plugin *osdp_cuda_plugin_load(void)
{
    if (!tried) {
        tried = 1;
        load();
    }
    return plugin;
}

const char *osdp_cuda_plugin_error(void)
{
    osdp_cuda_plugin_load();
    return plugin ? "" : why;
}

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

/* The file the loader opens into path[] (1), or why[] says why there is none (0): $OSDP_CUDA_PLUGIN, else
 * the first of the program's directory (a build tree, the GPU kit) and where `make install` puts it
 * that holds the plugin */
static int find(char *path, size_t n_path, char *reason, size_t n_reason)
{
#ifndef OSDP_HAVE_CUDA
    (void)path;
    (void)n_path;
    snprintf(reason, n_reason, "this osdp_gpt was built without CUDA (configure --with-cuda)");
    return 0;
#else
    const char *env = getenv(OSDP_CUDA_PLUGIN_ENV);
    if (env && *env) {
        if (access(env, F_OK) == 0) {
            snprintf(path, n_path, "%s", env);
            return 1;
        }
        snprintf(reason, n_reason, "the CUDA backend's plugin %s (%s) does not exist", env, OSDP_CUDA_PLUGIN_ENV);
        return 0;
    }
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
            snprintf(path, n_path, "%s", candidates[i]);
            return 1;
        }
    }
    snprintf(reason, n_reason, "the CUDA backend's plugin %s was not found (looked for %s%s%s; %s names it)",
             OSDP_CUDA_PLUGIN_FILE, n > 0 ? candidates[0] : "", n > 1 ? " and " : "", n > 1 ? candidates[1] : "",
             OSDP_CUDA_PLUGIN_ENV);
    return 0;
#endif
}

static void load(void)
{
    char path[PATH_MAX + 32];
#ifndef OSDP_HAVE_CUDA
    find(path, sizeof path, why, sizeof why);
#else
    if (&osdp_cuda_plugin_entry) {
        plugin = &osdp_cuda_plugin_entry;
        return;
    }
    if (find(path, sizeof path, why, sizeof why)) open_plugin(path);
#endif
}

int osdp_cuda_plugin_where(char *buf, size_t n)
{
#ifdef OSDP_HAVE_CUDA
    if (&osdp_cuda_plugin_entry) {
        snprintf(buf, n, "linked into this program (no file to open)");
        return 0;
    }
#endif
    return find(buf, n, buf, n);
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

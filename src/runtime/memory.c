/* The accounting allocator (see osdp/memory.h). */
#include "osdp/memory.h"
#include "osdp/compute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *osdp_memory_category_name(osdp_memory_category c)
{
    static const char *names[OSDP_MEMORY_N_CATEGORIES] = {
        "state", "weights", "grads", "activations", "workspace", "tp_comm"};
    return c < OSDP_MEMORY_N_CATEGORIES ? names[c] : "?";
}

void osdp_memory_init(osdp_memory *mem, const osdp_compute_backend *backend, size_t limit)
{
    memset(mem, 0, sizeof *mem);
    mem->backend = backend;
    mem->limit = limit;
}

osdp_status osdp_memory_cap_to_free(size_t requested, size_t free_bytes, size_t margin, size_t *limit, int *capped)
{
    char f[32], m[32];
    *limit = requested;
    *capped = 0;
    if (free_bytes <= margin)
        return osdp_error_set(OSDP_ERR_OOM, "the device has %s free after the communicators' set-up, no more than the "
                              "%s it must keep for cuBLAS's workspace, scratch and fragmentation",
                              osdp_format_bytes((double)free_bytes, f, sizeof f),
                              osdp_format_bytes((double)margin, m, sizeof m));
    const size_t room = free_bytes - margin;
    if (requested == 0 || requested > room) {
        *limit = room;
        *capped = 1;
    }
    return OSDP_OK;
}

osdp_status osdp_memory_device_limit(const osdp_compute_backend *backend, size_t requested, size_t *limit,
                                     int *capped, size_t *free_bytes)
{
    *limit = requested;
    *capped = 0;
    *free_bytes = 0;
    if (!backend->mem_info) return OSDP_OK;
    size_t total = 0;
    osdp_status s = backend->mem_info(free_bytes, &total);
    if (s != OSDP_OK) return s;
    return osdp_memory_cap_to_free(requested, *free_bytes, OSDP_DEVICE_MEM_MARGIN, limit, capped);
}

osdp_status osdp_memory_alloc(osdp_memory *mem, osdp_memory_category cat, size_t bytes, const char *what, void **out)
{
    char a[32], b[32], c[32];
    *out = NULL;
    if (mem->limit && mem->current_total + bytes > mem->limit)
        return osdp_error_set(OSDP_ERR_OOM,
            "out of memory: %s needs %s of %s with %s in use; the memory limit is %s",
            what, osdp_format_bytes((double)bytes, a, sizeof a), osdp_memory_category_name(cat),
            osdp_format_bytes((double)mem->current_total, b, sizeof b),
            osdp_format_bytes((double)mem->limit, c, sizeof c));
    if (bytes) {
        *out = mem->backend->alloc(bytes);
        if (!*out)
            return osdp_error_set(OSDP_ERR_OOM, "out of memory: the %s allocator refused %s of %s for %s",
                                  mem->backend->name, osdp_format_bytes((double)bytes, a, sizeof a),
                                  osdp_memory_category_name(cat), what);
    }
    mem->current[cat] += bytes;
    mem->current_total += bytes;
    if (mem->current[cat] > mem->peak[cat]) mem->peak[cat] = mem->current[cat];
    if (mem->current_total > mem->peak_total) mem->peak_total = mem->current_total;
    return OSDP_OK;
}

void osdp_memory_free(osdp_memory *mem, osdp_memory_category cat, void *ptr, size_t bytes)
{
    if (ptr) mem->backend->free(ptr);
    mem->current[cat] -= bytes;
    mem->current_total -= bytes;
}

int osdp_parse_bytes(const char *text, size_t *out)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || !(v > 0)) return -1;
    double mult = 1;
    switch (*end) {
    case 'k': case 'K': mult = 1024.0; end++; break;
    case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' && mult > 1) end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0') return -1;
    double bytes = v * mult;
    if (bytes >= 1.8e19) return -1;
    *out = (size_t)bytes;
    return 0;
}

const char *osdp_format_bytes(double bytes, char *buf, size_t n)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) { bytes /= 1024.0; u++; }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

/* The accounting allocator (see osdp/memory.h). */
#include "osdp/memory.h"
#include "osdp/compute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *osdp_mem_category_name(osdp_mem_category c)
{
    static const char *names[OSDP_MEM_N_CATEGORIES] = {
        "state", "weights", "grads", "activations", "workspace", "tp_comm"};
    return c < OSDP_MEM_N_CATEGORIES ? names[c] : "?";
}

void osdp_memory_init(osdp_memory *mem, const osdp_compute_backend *backend, size_t limit)
{
    memset(mem, 0, sizeof *mem);
    mem->backend = backend;
    mem->limit = limit;
}

osdp_status osdp_mem_alloc(osdp_memory *mem, osdp_mem_category cat, size_t bytes, const char *what, void **out)
{
    char a[32], b[32], c[32];
    *out = NULL;
    if (mem->limit && mem->current_total + bytes > mem->limit)
        return osdp_error_set(OSDP_ERR_OOM,
            "out of memory: %s needs %s of %s with %s in use; the memory limit is %s",
            what, osdp_format_bytes((double)bytes, a, sizeof a), osdp_mem_category_name(cat),
            osdp_format_bytes((double)mem->current_total, b, sizeof b),
            osdp_format_bytes((double)mem->limit, c, sizeof c));
    if (bytes) {
        *out = mem->backend->alloc(bytes);
        if (!*out)
            return osdp_error_set(OSDP_ERR_OOM, "out of memory: the %s allocator refused %s of %s for %s",
                                  mem->backend->name, osdp_format_bytes((double)bytes, a, sizeof a),
                                  osdp_mem_category_name(cat), what);
    }
    mem->current[cat] += bytes;
    mem->current_total += bytes;
    if (mem->current[cat] > mem->peak[cat]) mem->peak[cat] = mem->current[cat];
    if (mem->current_total > mem->peak_total) mem->peak_total = mem->current_total;
    return OSDP_OK;
}

void osdp_mem_free(osdp_memory *mem, osdp_mem_category cat, void *ptr, size_t bytes)
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

/* The knapsack cache: one entry per slot (direct-mapped by the hash of the
 * allow set).  An entry answers a later question on the same allow set
 *   - found, its plan's bytes <= lim <= its lim: the optimum there fits
 *     the smaller budget, so it is still the optimum (tie rule included);
 *   - none, lim <= its lim and cap <= its cap: still none.
 * The transient bounds d of one search differ by a few bytes, and their
 * branch and bound trees repeat most of their nodes. */
#include "plan_knap_cache.h"

#include <stdlib.h>
#include <string.h>

#define CACHE_SLOTS 1024

enum { ENTRY_EMPTY, ENTRY_FOUND, ENTRY_NONE };
typedef struct cache_entry {
    unsigned long long hash;
    long long lim;             /* the budget it was solved for */
    long long plan_bytes;      /* its plan's held bytes (found) */
    double cap, obj;           /* the objective cap it was solved for; its plan's objective */
    int state;                 /* ENTRY_* */
    unsigned char *allow;      /* [n_flags] */
    int *plan;                 /* [n_ops] */
} cache_entry;
struct osdp_ps_knap_cache { cache_entry entry[CACHE_SLOTS]; };

osdp_ps_knap_key osdp_ps_knap_cache_key(const unsigned char *allow, size_t n_flags, int n_ops)
{
    unsigned long long h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n_flags; i++) h = (h ^ allow[i]) * 1099511628211ULL;
    return (osdp_ps_knap_key){.allow = allow, .n_flags = n_flags, .n_ops = n_ops, .hash = h};
}

static cache_entry *slot(osdp_ps_knap_cache *cache, const osdp_ps_knap_key *key)
{
    return cache ? &cache->entry[key->hash % CACHE_SLOTS] : NULL;
}

int osdp_ps_knap_cache_find(osdp_ps_knap_cache **cache, const osdp_ps_knap_key *key, long long lim, double cap,
                            int *plan, double *obj, osdp_status *status)
{
    if (!*cache) *cache = calloc(1, sizeof **cache);
    const cache_entry *e = slot(*cache, key);
    if (!e || e->state == ENTRY_EMPTY || e->hash != key->hash || memcmp(e->allow, key->allow, key->n_flags) != 0)
        return 0;
    if (e->state == ENTRY_FOUND && e->plan_bytes <= lim && lim <= e->lim) {
        memcpy(plan, e->plan, sizeof *plan * (size_t)key->n_ops);
        *obj = e->obj;
        *status = OSDP_OK;
        return 1;
    }
    if (e->state == ENTRY_NONE && lim <= e->lim && cap <= e->cap) {
        *status = OSDP_ERR_INFEASIBLE;
        return 1;
    }
    return 0;
}

void osdp_ps_knap_cache_store(osdp_ps_knap_cache *cache, const osdp_ps_knap_key *key, long long lim, double cap,
                              osdp_status status, const int *plan, double obj, long long plan_bytes)
{
    cache_entry *e = slot(cache, key);
    if (!e) return;
    if (!e->allow) e->allow = malloc(key->n_flags);
    if (!e->plan) e->plan = malloc(sizeof *e->plan * (size_t)key->n_ops);
    if (!e->allow || !e->plan) { /* no room: the entry is forgotten, the answer stays right */
        e->state = ENTRY_EMPTY;
        return;
    }
    memcpy(e->allow, key->allow, key->n_flags);
    e->hash = key->hash;
    e->lim = lim;
    e->cap = cap;
    e->state = status == OSDP_OK ? ENTRY_FOUND : ENTRY_NONE;
    if (status == OSDP_OK) {
        memcpy(e->plan, plan, sizeof *plan * (size_t)key->n_ops);
        e->obj = obj;
        e->plan_bytes = plan_bytes;
    }
}

void osdp_ps_knap_cache_free(osdp_ps_knap_cache *cache)
{
    if (!cache) return;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        free(cache->entry[i].allow);
        free(cache->entry[i].plan);
    }
    free(cache);
}

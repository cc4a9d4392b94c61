/* The planner's knapsack cache (plan_knap_cache.c): knapsack answers by
 * allow set, reused across transient bounds.  A leaf of the planner's
 * search: it knows nothing of the context, only flags and plans. */
#ifndef OSDP_PLAN_KNAP_CACHE_H
#define OSDP_PLAN_KNAP_CACHE_H

#include "osdp/error.h"

#include <stddef.h>

typedef struct osdp_ps_knap_cache osdp_ps_knap_cache;

/* one question: an allow set (n_flags flags) over n_ops operators */
typedef struct osdp_ps_knap_key {
    const unsigned char *allow;
    size_t n_flags;
    int n_ops;
    unsigned long long hash;  /* of the allow set (osdp_ps_knap_cache_key fills it) */
} osdp_ps_knap_key;

osdp_ps_knap_key osdp_ps_knap_cache_key(const unsigned char *allow, size_t n_flags, int n_ops);
/* 1 when *cache (created on first use; NULL stays a cache that never
 * answers) still answers the knapsack (key, budget lim, objective cap):
 * *status is OSDP_OK with plan[n_ops] and *obj, or OSDP_ERR_INFEASIBLE */
int osdp_ps_knap_cache_find(osdp_ps_knap_cache **cache, const osdp_ps_knap_key *key, long long lim, double cap,
                            int *plan, double *obj, osdp_status *status);
/* remembers the knapsack's answer (status OSDP_OK: plan, obj and the plan's
 * held bytes; OSDP_ERR_INFEASIBLE: none) */
void osdp_ps_knap_cache_store(osdp_ps_knap_cache *cache, const osdp_ps_knap_key *key, long long lim, double cap,
                              osdp_status status, const int *plan, double obj, long long plan_bytes);
void osdp_ps_knap_cache_free(osdp_ps_knap_cache *cache);

#endif

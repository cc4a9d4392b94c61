/* Per-stage results reused across a 3D search (src/planner/stage_cache.h). */
#include "stage_cache.h"

#include <stdlib.h>
#include <string.h>

#define BUCKETS 4096

typedef struct entry {
    struct entry *next;
    unsigned long long hash;
    osdp_stage_key key;       /* classes and recompute owned by the entry */
    osdp_status status;
    osdp_planner_result result;   /* OSDP_OK: its plan owned by the entry */
    long long peak_bytes;
    char *message;            /* OSDP_ERR_INFEASIBLE: why */
} entry;

struct osdp_stage_cache {
    entry *bucket[BUCKETS];
    long long hits;
};

osdp_stage_cache *osdp_stage_cache_new(void)
{
    return calloc(1, sizeof(osdp_stage_cache));
}

void osdp_stage_cache_free(osdp_stage_cache *cache)
{
    if (!cache) return;
    for (int i = 0; i < BUCKETS; i++)
        for (entry *e = cache->bucket[i], *next; e; e = next) {
            next = e->next;
            if (e->status == OSDP_OK) osdp_planner_result_free(&e->result);
            free((void *)e->key.classes);
            free((void *)e->key.recompute);
            free(e->message);
            free(e);
        }
    free(cache);
}

/* the contents of two operators equal but for their names and block numbers */
static int same_contents(const osdp_op_layout *a, const osdp_op_layout *b)
{
    osdp_op_layout x, y;
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    memset(x.name, 0, sizeof x.name);
    memset(y.name, 0, sizeof y.name);
    x.block = y.block = 0;
    return memcmp(&x, &y, sizeof x) == 0;   /* padding that differs only misses a reuse */
}

void osdp_stage_classes(const osdp_layout *layout, int *classes)
{
    int reps[64], n_reps = 0;   /* the classes seen so far (a GPT has a few); past 64, each op its own */
    for (int i = 0; i < layout->n_ops; i++) {
        classes[i] = i;
        for (int r = 0; r < n_reps; r++)
            if (same_contents(&layout->op[reps[r]], &layout->op[i])) {
                classes[i] = reps[r];
                break;
            }
        if (classes[i] == i && n_reps < 64) reps[n_reps++] = i;
    }
}

static unsigned long long mix(unsigned long long h, long long v)
{
    return (h ^ (unsigned long long)v) * 1099511628211ULL;
}

static unsigned long long key_hash(const osdp_stage_key *k)
{
    const int head[] = {k->geo.tp_size, k->geo.n_ranks, k->geo.pp_size, k->receives, k->in_flight, k->geo.micro_batch,
                        k->geo.accum_steps, (int)k->geo.pipe_schedule, k->n_ops};
    unsigned long long h = 1469598103934665603ULL;
    for (size_t i = 0; i < sizeof head / sizeof *head; i++) h = mix(h, head[i]);
    for (int i = 0; i < k->n_ops; i++) h = mix(h, k->classes[i] * 2 + (k->recompute && k->recompute[i] ? 1 : 0));
    return h;
}

int osdp_stage_key_equal(const osdp_stage_key *a, const osdp_stage_key *b)
{
    if (a->geo.tp_size != b->geo.tp_size || a->geo.n_ranks != b->geo.n_ranks || a->geo.pp_size != b->geo.pp_size
        || a->receives != b->receives || a->in_flight != b->in_flight || a->geo.micro_batch != b->geo.micro_batch
        || a->geo.accum_steps != b->geo.accum_steps || a->geo.pipe_schedule != b->geo.pipe_schedule || a->n_ops != b->n_ops)
        return 0;
    for (int i = 0; i < a->n_ops; i++)
        if (a->classes[i] != b->classes[i]
            || (a->recompute && a->recompute[i] ? 1 : 0) != (b->recompute && b->recompute[i] ? 1 : 0))
            return 0;
    return 1;
}

int osdp_stage_cache_find(const osdp_stage_cache *cache_in, const osdp_stage_key *key, osdp_status *status,
                          osdp_planner_result *result, long long *peak_bytes, const char **message)
{
    osdp_stage_cache *cache = (osdp_stage_cache *)cache_in;
    if (!cache) return 0;
    const unsigned long long h = key_hash(key);
    for (const entry *e = cache->bucket[h % BUCKETS]; e; e = e->next) {
        if (e->hash != h || !osdp_stage_key_equal(&e->key, key)) continue;
        *status = e->status;
        *peak_bytes = e->peak_bytes;
        *message = e->message ? e->message : "";
        if (e->status == OSDP_OK) {
            *result = e->result;
            memset(&result->plan, 0, sizeof result->plan);
            if (osdp_plan_copy(&result->plan, &e->result.plan) != OSDP_OK) return 0;
        }
        cache->hits++;
        return 1;
    }
    return 0;
}

void osdp_stage_cache_put(osdp_stage_cache *cache, const osdp_stage_key *key, osdp_status status,
                          const osdp_planner_result *result, long long peak_bytes, const char *message)
{
    if (!cache || (status != OSDP_OK && status != OSDP_ERR_INFEASIBLE)) return;
    entry *e = calloc(1, sizeof *e);
    int *classes = malloc(sizeof *classes * (size_t)(key->n_ops > 0 ? key->n_ops : 1));
    int *rc = key->recompute ? malloc(sizeof *rc * (size_t)(key->n_ops > 0 ? key->n_ops : 1)) : NULL;
    if (!e || !classes || (key->recompute && !rc)) goto fail;
    memcpy(classes, key->classes, sizeof *classes * (size_t)key->n_ops);
    if (rc) memcpy(rc, key->recompute, sizeof *rc * (size_t)key->n_ops);
    e->key = *key;
    e->key.classes = classes;
    e->key.recompute = rc;
    e->status = status;
    e->peak_bytes = peak_bytes;
    if (status == OSDP_OK) {
        e->result = *result;
        memset(&e->result.plan, 0, sizeof e->result.plan);
        if (osdp_plan_copy(&e->result.plan, &result->plan) != OSDP_OK) goto fail;
    } else if (!(e->message = strdup(message ? message : ""))) {
        goto fail;
    }
    e->hash = key_hash(&e->key);
    e->next = cache->bucket[e->hash % BUCKETS];
    cache->bucket[e->hash % BUCKETS] = e;
    return;
fail:
    free(classes);
    free(rc);
    free(e);
}

long long osdp_stage_cache_hits(const osdp_stage_cache *cache)
{
    return cache ? cache->hits : 0;
}

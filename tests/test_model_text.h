/* Shared by the model and runtime Check tests (tests/test_model.c,
 * tests/test_runtime.c): a seeded generator, a checked allocation, and
 * layouts built from model descriptions written in the test. */
#ifndef OSDP_TEST_MODEL_TEXT_H
#define OSDP_TEST_MODEL_TEXT_H

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/layout.h"
#include "osdp/model_config.h"

static uint64_t g_rng = 0x1234567887654321ULL;
static inline uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline double rnd_unit(void) { return (double)(rnd() >> 11) * 0x1.0p-53; } /* [0,1) */
static inline size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % (uint64_t)n) : 0; }

static inline void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_msg(p != NULL, "out of host memory (%zu bytes)", bytes);
    return p;
}

static inline void parse_ok(osdp_model_config *cfg, const char *text)
{
    osdp_status s = osdp_model_config_parse(cfg, text, "test.ini");
    ck_assert_msg(s == OSDP_OK, "parse failed (%d): %s", (int)s, osdp_error_message());
}

static inline void layout_ok(osdp_layout *L, const char *text, int T)
{
    osdp_model_config cfg;
    parse_ok(&cfg, text);
    osdp_status s = osdp_layout_build(L, &cfg, T);
    ck_assert_msg(s == OSDP_OK, "layout failed (%d): %s", (int)s, osdp_error_message());
}

/* tensor index by name within an operator, -1 if absent */
static inline int find_tensor(const osdp_op_layout *op, const char *name)
{
    for (int k = 0; k < op->n_tensors; k++)
        if (strcmp(op->tensor[k].name, name) == 0) return k;
    return -1;
}

#endif

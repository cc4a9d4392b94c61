/* Shared by the model and runtime Check tests (tests/model/test_model.c,
 * tests/runtime/test_runtime.c): a seeded generator, a checked allocation,
 * layouts built from model descriptions written in the test, and the
 * check of an input error's message. */
#ifndef OSDP_TEST_MODEL_TEXT_H
#define OSDP_TEST_MODEL_TEXT_H

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/error.h"
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

/* an input error's message names what the case `what` expects: word1,
 * word2 (NULL: none) and the file it came from */
static inline void check_error_words(const char *what, const char *word1, const char *word2, const char *file)
{
    const char *msg = osdp_error_message();
    ck_assert_msg(strstr(msg, word1) != NULL, "%s: message '%s' lacks '%s'", what, msg, word1);
    if (word2) ck_assert_msg(strstr(msg, word2) != NULL, "%s: message '%s' lacks '%s'", what, msg, word2);
    ck_assert_msg(strstr(msg, file) != NULL, "%s: message '%s' does not name the file %s", what, msg, file);
}

#endif

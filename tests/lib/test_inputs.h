/* Shared by the Check tests that read the shipped inputs: where the source
 * tree is (OSDP_SRCDIR from `make check`, else the configure-time path) and
 * how a model description or device file is loaded into the test. */
#ifndef OSDP_TEST_INPUTS_H
#define OSDP_TEST_INPUTS_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/device.h"
#include "osdp/dtype.h"
#include "osdp/layout.h"
#include "osdp/model_config.h"

static inline const char *src_dir(void)
{
    const char *d = getenv("OSDP_SRCDIR");
    return d && d[0] ? d : OSDP_SOURCE_DIR;
}

/* model: a name under input/models/ */
static inline void load_config(osdp_model_config *cfg, const char *model)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/input/models/%s.ini", src_dir(), model);
    ck_assert_msg(osdp_model_config_load(cfg, path) == OSDP_OK, "%s", osdp_error_message());
}

/* model: a name under input/models/, or a path below the source tree (tests/inputs/...);
 * T 0: the model's context; the naive attention and head (--attention naive, --head naive)
 * where asked, else the tiled and fused ones */
static inline void load_layout_kernels(osdp_layout *L, const char *model, int T, int attention_naive, int head_naive)
{
    char path[4096];
    osdp_model_config cfg;
    if (strchr(model, '/')) snprintf(path, sizeof path, "%s/%s", src_dir(), model);
    else snprintf(path, sizeof path, "%s/input/models/%s.ini", src_dir(), model);
    ck_assert_msg(osdp_model_config_load(&cfg, path) == OSDP_OK, "%s", osdp_error_message());
    cfg.attention_naive = attention_naive;
    cfg.head_naive = head_naive;
    ck_assert_msg(osdp_layout_build(L, &cfg, T > 0 ? T : cfg.ctx) == OSDP_OK, "%s", osdp_error_message());
}

static inline void load_layout(osdp_layout *L, const char *model, int T) { load_layout_kernels(L, model, T, 0, 0); }

/* the model with its vocabulary replaced (a head of another size than the blocks') */
static inline void load_layout_vocab(osdp_layout *L, const char *model, int T, int vocab, int naive)
{
    char path[4096];
    osdp_model_config cfg;
    snprintf(path, sizeof path, "%s/%s", src_dir(), model);
    ck_assert_msg(osdp_model_config_load(&cfg, path) == OSDP_OK, "%s", osdp_error_message());
    cfg.vocab = vocab;
    cfg.attention_naive = cfg.head_naive = naive;
    ck_assert_msg(osdp_layout_build(L, &cfg, T) == OSDP_OK, "%s", osdp_error_message());
}

/* a device file's text, head then extra, parsed (origin: its name in the errors) */
static inline osdp_status parse_device_text(osdp_device *d, const char *head, const char *extra, const char *origin)
{
    char text[4096];
    snprintf(text, sizeof text, "%s%s", head, extra);
    return osdp_device_parse(d, text, origin);
}

/* a device of the runtime's element sizes (weights of that dtype, fp32
 * gradients and activations), the one the closed form and the planner's
 * terms equal the schedule on */
static inline osdp_device sizes_device(osdp_dtype weights)
{
    osdp_device d;
    memset(&d, 0, sizeof d);
    d.param_bytes = (int)osdp_dtype_size(weights);
    d.grad_bytes = d.act_bytes = 4;
    return d;
}

/* name: a device file under input/devices/ */
static inline void load_device(osdp_device *d, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/input/devices/%s.ini", src_dir(), name);
    ck_assert_msg(osdp_device_load(d, path) == OSDP_OK, "%s", osdp_error_message());
}

/* latency-, bandwidth- and compute-bound mixes: alpha and beta scaled by
 * 10^[-2, 2) (reduce-scatter by a further [0.5, 1.5)), each gamma by
 * 10^[-1.5, 1.5), from the test's own generator */
static inline void randomize_device(osdp_device *d, unsigned (*rnd)(void))
{
    double sa = pow(10, (double)(rnd() % 400) / 100 - 2), sb = pow(10, (double)(rnd() % 400) / 100 - 2);
    d->all_gather.alpha *= sa;
    d->reduce_scatter.alpha *= sa * (0.5 + (rnd() % 100) / 100.0);
    d->all_gather.beta *= sb;
    d->reduce_scatter.beta *= sb * (0.5 + (rnd() % 100) / 100.0);
    for (int t = 0; t < OSDP_N_OP_TYPES; t++) d->gamma[t] *= pow(10, (double)(rnd() % 300) / 100 - 1.5);
}

#endif

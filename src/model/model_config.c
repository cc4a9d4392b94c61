/* Model description reader (INI via libinih). */
#include "osdp/model_config.h"
#include "util/text_file.h"

#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct config_parse_state {
    osdp_model_config *cfg;
    int n_widths;             /* widths read so far (over all `widths` lines) */
    int seen_section;
    osdp_status status;
    char origin[256];
} config_parse_state;

static int parse_int(const char *value, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    while (*end == ' ' || *end == '\t') end++;
    if (errno || end == value || *end != '\0' || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* the widths on one line of the `widths` list, after those of earlier lines
 * (n_layer may come later in the file: the count is checked at the end) */
static osdp_status append_widths(config_parse_state *st, const char *list)
{
    char buf[INI_MAX_LINE + 1];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        if (st->n_widths >= OSDP_MAX_LAYERS)
            return osdp_error_set(OSDP_ERR_INPUT, "widths lists more than %d values (the most blocks a model may have)",
                                  OSDP_MAX_LAYERS);
        if (parse_int(tok, 1, 1 << 20, &st->cfg->width[st->n_widths]) != 0)
            return osdp_error_set(OSDP_ERR_INPUT, "widths: '%s' is not a positive integer", tok);
        st->n_widths++;
    }
    return OSDP_OK;
}

static int config_handler(void *user, const char *section, const char *key, const char *value)
{
    config_parse_state *st = user;
    osdp_model_config *cfg = st->cfg;
    if (st->status != OSDP_OK) return 0;
    if (strcmp(section, "model") != 0) {
        st->status = osdp_error_set(OSDP_ERR_INPUT, "unknown section [%s] (expected [model])",
                                    section);
        return 0;
    }
    st->seen_section = 1;
    struct { const char *key; int *field; long lo, hi; } ints[] = {
        {"n_layer", &cfg->n_layer, 1, OSDP_MAX_LAYERS},
        {"n_head", &cfg->n_head, 1, 4096},
        {"n_embd", &cfg->n_embd, 1, 1 << 20},
        {"vocab", &cfg->vocab, 2, 65536},   /* tokens are stored as uint16 */
        {"ctx", &cfg->ctx, 1, 1 << 20},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if (strcmp(key, ints[i].key) == 0) {
            if (parse_int(value, ints[i].lo, ints[i].hi, ints[i].field) != 0) {
                st->status = osdp_error_set(OSDP_ERR_INPUT,
                    "%s = '%s' is not an integer in [%ld, %ld]",
                    key, value, ints[i].lo, ints[i].hi);
                return 0;
            }
            return 1;
        }
    }
    if (strcmp(key, "name") == 0) {
        snprintf(cfg->name, sizeof cfg->name, "%s", value);
        return 1;
    }
    if (strcmp(key, "tied_head") == 0) {
        if (strcmp(value, "true") == 0 || strcmp(value, "false") == 0) {
            cfg->tied_head = strcmp(value, "true") == 0;
            return 1;
        }
        st->status = osdp_error_set(OSDP_ERR_INPUT, "tied_head = '%s' is not true or false", value);
        return 0;
    }
    if (strcmp(key, "widths") == 0) {   /* the first line, an indented continuation line, or the key again */
        st->status = append_widths(st, value);
        return st->status == OSDP_OK;
    }
    st->status = osdp_error_set(OSDP_ERR_INPUT,
        "unknown key '%s' (known: name, n_layer, n_head, n_embd, vocab, ctx, widths, tied_head)",
        key);
    return 0;
}

osdp_status osdp_model_config_parse(osdp_model_config *cfg, const char *text, const char *origin)
{
    memset(cfg, 0, sizeof *cfg);
    config_parse_state st = {.cfg = cfg, .status = OSDP_OK};
    snprintf(st.origin, sizeof st.origin, "%s", origin);
    cfg->n_layer = cfg->n_head = cfg->n_embd = cfg->vocab = cfg->ctx = -1;
    int rc = ini_parse_string(text, config_handler, &st);
    if (st.status != OSDP_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", osdp_error_message());
        return osdp_error_set(st.status, "%s:%d: %s", origin, rc, msg);
    }
    if (rc != 0) {
        const char *line = text;   /* line rc (1-based): too long for the INI reader? */
        for (int i = 1; i < rc && line; i++) line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL;
        if (line && strcspn(line, "\r\n") >= INI_MAX_LINE - 1)
            return osdp_error_set(OSDP_ERR_INPUT, "%s:%d: line longer than %d characters: continue a long value (widths) "
                                  "on indented lines", origin, rc, INI_MAX_LINE - 2);
        return osdp_error_set(OSDP_ERR_INPUT, "%s:%d: malformed line (expected key = value)", origin, rc);
    }
    if (!st.seen_section)
        return osdp_error_set(OSDP_ERR_INPUT, "%s: no [model] section", origin);
    const char *missing = cfg->n_layer < 0 ? "n_layer" : cfg->n_head < 0 ? "n_head"
                        : cfg->vocab < 0 ? "vocab" : cfg->ctx < 0 ? "ctx"
                        : (cfg->n_embd < 0 && !st.n_widths) ? "n_embd" : NULL;
    if (missing) return osdp_error_set(OSDP_ERR_INPUT, "%s: missing key '%s' in [model]", origin, missing);
    if (st.n_widths) {
        if (st.n_widths > cfg->n_layer)
            return osdp_error_set(OSDP_ERR_INPUT, "%s: widths lists more than n_layer = %d values", origin, cfg->n_layer);
        if (st.n_widths != cfg->n_layer)
            return osdp_error_set(OSDP_ERR_INPUT, "%s: widths lists %d values, n_layer is %d", origin, st.n_widths,
                                  cfg->n_layer);
        if (cfg->n_embd < 0) cfg->n_embd = cfg->width[0];
    } else {
        for (int i = 0; i < cfg->n_layer; i++) cfg->width[i] = cfg->n_embd;
    }
    for (int i = 0; i < cfg->n_layer; i++)
        if (cfg->width[i] % cfg->n_head != 0)
            return osdp_error_set(OSDP_ERR_INPUT, "%s: n_head = %d does not divide the width %d of block %d",
                                  origin, cfg->n_head, cfg->width[i], i);
    /* the head's logits are x wte^T: its input (the last block's stream) has wte's width */
    if (cfg->tied_head && cfg->width[cfg->n_layer - 1] != cfg->width[0])
        return osdp_error_set(OSDP_ERR_INPUT, "%s: tied_head = true needs the embedding width (block 0: %d) to equal "
                              "the last block's (block %d: %d): the head's product reads wte",
                              origin, cfg->width[0], cfg->n_layer - 1, cfg->width[cfg->n_layer - 1]);
    if (!cfg->name[0]) snprintf(cfg->name, sizeof cfg->name, "unnamed");
    snprintf(cfg->text, sizeof cfg->text, "%s", text);
    return OSDP_OK;
}

osdp_status osdp_model_config_load(osdp_model_config *cfg, const char *path)
{
    char *text;
    osdp_status s = osdp_read_text_file(path, sizeof cfg->text - 1, "model description", &text);
    if (s != OSDP_OK) return s;
    s = osdp_model_config_parse(cfg, text, path);
    free(text);
    return s;
}

unsigned long long osdp_model_config_hash(const osdp_model_config *cfg)
{
    unsigned long long h = 1469598103934665603ULL;
    int fields[] = {cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->vocab, cfg->ctx};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) h = (h ^ (unsigned)fields[i]) * 1099511628211ULL;
    for (int i = 0; i < cfg->n_layer; i++) h = (h ^ (unsigned)cfg->width[i]) * 1099511628211ULL;
    /* only when tied: an untied model hashes as it always did (checkpoints keep their model_hash) */
    if (cfg->tied_head) h = (h ^ 0x7469656455ULL) * 1099511628211ULL;
    return h;
}

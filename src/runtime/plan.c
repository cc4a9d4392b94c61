/* Plan structure and plan files (format in osdp/plan.h). */
#include "osdp/plan.h"
#include "util/text_file.h"

#include <errno.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>

osdp_status osdp_plan_alloc(osdp_plan *plan, int n_ops)
{
    memset(plan, 0, sizeof *plan);
    plan->n_ops = n_ops;
    plan->slices = calloc((size_t)n_ops, sizeof(int));
    plan->zdp_slices = calloc((size_t)n_ops, sizeof(int));
    plan->recompute = calloc((size_t)n_ops, sizeof(int));
    plan->hierarchical = calloc((size_t)n_ops, sizeof(int));
    plan->reduce_once = calloc((size_t)n_ops, sizeof(int));
    if (!plan->slices || !plan->zdp_slices || !plan->recompute || !plan->hierarchical || !plan->reduce_once) {
        osdp_plan_free(plan);
        return osdp_error_set(OSDP_ERR_OOM, "plan: out of host memory");
    }
    plan->geo.accum_steps = 1;
    osdp_plan_fill(plan, 0);
    return OSDP_OK;
}

void osdp_plan_free(osdp_plan *plan)
{
    free(plan->slices);
    free(plan->zdp_slices);
    free(plan->recompute);
    free(plan->hierarchical);
    free(plan->reduce_once);
    memset(plan, 0, sizeof *plan);
}

osdp_status osdp_plan_copy(osdp_plan *dst, const osdp_plan *src)
{
    osdp_status s = osdp_plan_alloc(dst, src->n_ops);
    if (s != OSDP_OK) return s;
    size_t bytes = (size_t)src->n_ops * sizeof(int);
    memcpy(dst->slices, src->slices, bytes);
    memcpy(dst->zdp_slices, src->zdp_slices, bytes);
    memcpy(dst->recompute, src->recompute, bytes);
    memcpy(dst->hierarchical, src->hierarchical, bytes);
    if (src->reduce_once) memcpy(dst->reduce_once, src->reduce_once, bytes);
    dst->geo = src->geo;
    dst->predicted_step_s = src->predicted_step_s;
    dst->predicted_peak_bytes = src->predicted_peak_bytes;
    return OSDP_OK;
}

void osdp_plan_fill(osdp_plan *plan, int zdp)
{
    for (int i = 0; i < plan->n_ops; i++) {
        plan->slices[i] = 1;
        plan->zdp_slices[i] = zdp ? 1 : 0;
        plan->hierarchical[i] = 0;
    }
}

int osdp_plan_tie_embedding(osdp_plan *plan, const osdp_layout *layout)
{
    int changed = 0;
    for (int i = 0; i < plan->n_ops; i++)
        if (plan->zdp_slices[i] > 0 && !osdp_op_allows_zdp(layout, i)) {
            plan->zdp_slices[i] = 0;
            plan->hierarchical[i] = 0;
            changed = 1;
        }
    return changed;
}

/* the words after the mode: "recompute" and "reduce-once" (optionally
 * followed by its count of slices J, 1..OSDP_MAX_SLICES), each at most once,
 * in either order; -1 for anything else.  *reduce_once: J, or
 * OSDP_PLAN_ONCE_ALL for the bare word (every slice, whatever g). */
static int parse_flags(const char *rest, int *recompute, int *reduce_once)
{
    int seen_once = 0;
    while (*rest) {
        rest += strspn(rest, " \t");
        size_t len = strcspn(rest, " \t");
        if (!len) break;
        if (len == strlen("recompute") && strncmp(rest, "recompute", len) == 0 && !*recompute) {
            *recompute = 1;
        } else if (len == strlen("reduce-once") && strncmp(rest, "reduce-once", len) == 0 && !seen_once) {
            seen_once = 1;
            *reduce_once = OSDP_PLAN_ONCE_ALL;
            const char *next = rest + len + strspn(rest + len, " \t");
            if (*next >= '0' && *next <= '9') {   /* its count of slices */
                char *end;
                errno = 0;
                long j = strtol(next, &end, 10);
                if (errno || (*end && *end != ' ' && *end != '\t') || j < 1 || j > OSDP_MAX_SLICES) return -1;
                *reduce_once = (int)j;
                rest = end;
                continue;
            }
        } else {
            return -1;
        }
        rest += len;
    }
    return 0;
}

/* "dp" | "zdp" | "h" | "k/g", optionally followed by " recompute" and / or
 * " reduce-once"; -1 when malformed, -2 when it joins h to slices ("1/2 h",
 * "h/2"): h shards the whole operator, a split operator has no h
 * (osdp/plan.h) */
static int parse_mode(const char *value, int *k, int *g, int *hier, int *recompute, int *reduce_once)
{
    const char *space = value + strcspn(value, " \t");
    *recompute = 0;
    *reduce_once = 0;
    *hier = 0;
    if (strchr(value, '/') && strchr(value, 'h')) return -2;   /* neither word after the mode has an h */
    char mode[64];
    if (*space) {
        if ((size_t)(space - value) >= sizeof mode || parse_flags(space, recompute, reduce_once) != 0) return -1;
    } else {
        space = NULL;
    }
    size_t len = space ? (size_t)(space - value) : strlen(value);
    if (len >= sizeof mode) return -1;
    memcpy(mode, value, len);
    mode[len] = '\0';
    if (strcmp(mode, "dp") == 0) { *k = 0; *g = 1; }
    else if (strcmp(mode, "zdp") == 0) { *k = 1; *g = 1; }
    else if (strcmp(mode, "h") == 0) { *k = 1; *g = 1; *hier = 1; }
    else {
        char *end;
        errno = 0;
        long kk = strtol(mode, &end, 10);
        if (errno || end == mode || *end != '/') return -1;
        const char *gs = end + 1;
        long gg = strtol(gs, &end, 10);
        if (errno || end == gs || *end != '\0' || gg < 1 || gg > OSDP_MAX_SLICES || kk < 0 || kk > gg) return -1;
        *k = (int)kk;
        *g = (int)gg;
    }
    if (*reduce_once == OSDP_PLAN_ONCE_ALL) *reduce_once = *g;   /* the bare word: every slice */
    else if (*reduce_once > *g) return -3;
    return 0;
}


typedef struct plan_parse_state {
    osdp_plan *plan;
    const osdp_layout *layout;
    int *seen;
    int default_k, default_g, default_hier, default_recompute, default_reduce_once, have_default;
    osdp_status status;
    const char *origin;
} plan_parse_state;

static int plan_handler(void *user, const char *section, const char *key, const char *value)
{
    plan_parse_state *st = user;
    if (st->status != OSDP_OK) return 0;
    if (section[0]) {
        st->status = osdp_error_set(OSDP_ERR_INPUT, "plan files have no sections ([%s])", section);
        return 0;
    }
    if (strcmp(key, "tp") == 0) {
        char *end;
        errno = 0;
        long tp = strtol(value, &end, 10);
        if (errno || end == value || *end || tp < 1 || tp > 1 << 20) {
            st->status = osdp_error_set(OSDP_ERR_INPUT, "tp = '%s': the tensor-parallel degree must be a whole number >= 1",
                                        value);
            return 0;
        }
        if (st->plan->geo.tp_size) {
            st->status = osdp_error_set(OSDP_ERR_INPUT, "tp given twice");
            return 0;
        }
        st->plan->geo.tp_size = (int)tp;
        return 1;
    }
    int k, g, hier, rc, once;
    const int parsed = parse_mode(value, &k, &g, &hier, &rc, &once);
    if (parsed == -2) {
        st->status = osdp_error_set(OSDP_ERR_INPUT, "%s = '%s': mode h (hierarchical ZDP) shards the whole operator inside "
                                    "the node and cannot be split into slices: give h or k/g, not both", key, value);
        return 0;
    }
    if (parsed == -3) {
        st->status = osdp_error_set(OSDP_ERR_INPUT, "%s = '%s': 'reduce-once J' names J of the operator's %d slice%s "
                                    "(1 <= J <= %d; 'reduce-once' alone: all of them)", key, value, g, g > 1 ? "s" : "", g);
        return 0;
    }
    if (parsed != 0) {
        st->status = osdp_error_set(OSDP_ERR_INPUT,
            "%s = '%s': mode must be dp, zdp, h (hierarchical ZDP) or k/g (k of g slices ZDP, 0 <= k <= g <= %d), "
            "optionally followed by 'recompute' and / or 'reduce-once' (or 'reduce-once J': the last J slices)",
            key, value, OSDP_MAX_SLICES);
        return 0;
    }
    if (strcmp(key, "default") == 0) {
        st->default_k = k; st->default_g = g; st->default_hier = hier; st->default_recompute = rc;
        st->default_reduce_once = once; st->have_default = 1;
        return 1;
    }
    int op = osdp_layout_find_op(st->layout, key);
    if (op < 0) {
        st->status = osdp_error_set(OSDP_ERR_INPUT, "unknown operator '%s' (the model has embed, attn.0..attn.%d, mlp.0..mlp.%d, head)",
                                    key, st->layout->cfg.n_layer - 1, st->layout->cfg.n_layer - 1);
        return 0;
    }
    if (st->seen[op]) {
        st->status = osdp_error_set(OSDP_ERR_INPUT, "operator '%s' listed twice", key);
        return 0;
    }
    if (k > 0 && !osdp_op_allows_zdp(st->layout, op)) {
        st->status = osdp_error_set(OSDP_ERR_INPUT, "%s = '%s': the head is tied to the embedding's wte (tied_head = "
                                    "true), so operator %s must be dp (not %s)", key, value, key,
                                    hier ? "h, which gathers it per pass like zdp" : "zdp or k/g");
        return 0;
    }
    if (rc && !osdp_op_can_recompute(st->layout->op[op].type)) {
        st->status = osdp_error_set(OSDP_ERR_INPUT, "%s = '%s': only attn and mlp operators can recompute their activations",
                                    key, value);
        return 0;
    }
    st->seen[op] = 1;
    st->plan->zdp_slices[op] = k;
    st->plan->slices[op] = g;
    st->plan->recompute[op] = rc;
    st->plan->hierarchical[op] = hier;
    st->plan->reduce_once[op] = once;
    return 1;
}

_Static_assert(OSDP_PLAN_LINE_MAX <= INI_MAX_LINE - 2, "a plan file's longest line must fit inih's line buffer");

/* the first line of text longer than a plan file's lines may be (1-based), 0 if none */
static int long_line(const char *text)
{
    int n = 1;
    for (const char *line = text; *line; n++) {
        const size_t len = strcspn(line, "\r\n");
        if (len > OSDP_PLAN_LINE_MAX) return n;
        line += len;
        if (*line == '\r') line++;
        if (*line == '\n') line++;
    }
    return 0;
}

osdp_status osdp_plan_parse(osdp_plan *plan, const osdp_layout *layout, const char *text, const char *origin)
{
    osdp_status s = osdp_plan_alloc(plan, layout->n_ops);
    if (s != OSDP_OK) return s;
    int *seen = calloc((size_t)layout->n_ops, sizeof(int));
    if (!seen) {
        osdp_plan_free(plan);
        return osdp_error_set(OSDP_ERR_OOM, "plan: out of host memory");
    }
    plan_parse_state st = {.plan = plan, .layout = layout, .seen = seen, .status = OSDP_OK, .origin = origin};
    int rc = ini_parse_string(text, plan_handler, &st);
    const int too_long = rc != 0 || st.status != OSDP_OK ? long_line(text) : 0;   /* inih read it in pieces */
    if (too_long) {
        st.status = osdp_error_set(OSDP_ERR_INPUT, "%s:%d: line longer than %d characters, the most a plan file's line "
                                   "may have (shorten it or make it two comment lines)", origin, too_long,
                                   OSDP_PLAN_LINE_MAX);
    } else if (st.status != OSDP_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", osdp_error_message());
        st.status = osdp_error_set(st.status, "%s:%d: %s", origin, rc, msg);
    }
    if (st.status == OSDP_OK && rc != 0)
        st.status = osdp_error_set(OSDP_ERR_INPUT, "%s:%d: malformed line (expected operator = mode)", origin, rc);
    for (int i = 0; st.status == OSDP_OK && i < layout->n_ops; i++) {
        if (seen[i]) continue;
        if (!st.have_default) {
            st.status = osdp_error_set(OSDP_ERR_INPUT, "%s: operator '%s' has no mode (list it, or give 'default = dp|zdp')",
                                       origin, layout->op[i].name);
            break;
        }
        /* the default applies where it can: the embedding cannot be split,
         * so a split default makes it ZDP when any slice is ZDP */
        int unsplittable = st.default_g > 1 && !osdp_op_can_split(&layout->op[i]);
        plan->zdp_slices[i] = unsplittable ? st.default_k > 0 : st.default_k;
        plan->slices[i] = unsplittable ? 1 : st.default_g;
        plan->recompute[i] = st.default_recompute && osdp_op_can_recompute(layout->op[i].type);   /* blocks only */
        plan->hierarchical[i] = st.default_hier;
        /* likewise the reduce-once slices: the unsplit embedding reduces once when any slice of the default does */
        plan->reduce_once[i] = unsplittable ? st.default_reduce_once > 0 : st.default_reduce_once;
    }
    free(seen);
    if (st.status == OSDP_OK) (void)osdp_plan_tie_embedding(plan, layout);   /* a default's ZDP: the embedding stays DP */
    if (st.status != OSDP_OK) osdp_plan_free(plan);
    return st.status;
}

osdp_status osdp_plan_load(osdp_plan *plan, const osdp_layout *layout, const char *path)
{
    char *text;
    osdp_status s = osdp_read_text_file(path, 1 << 20, "plan file", &text);
    if (s != OSDP_OK) return s;
    s = osdp_plan_parse(plan, layout, text, path);
    free(text);
    return s;
}

const char *osdp_plan_mode_name(const osdp_plan *plan, int op, char *buf, size_t n)
{
    int k = plan->zdp_slices[op], g = plan->slices[op];
    if (g == 1) snprintf(buf, n, "%s", k ? (plan->hierarchical[op] ? "h" : "zdp") : "dp");
    else snprintf(buf, n, "%d/%d", k, g);
    return buf;
}

void osdp_plan_write(const osdp_plan *plan, const osdp_layout *layout, FILE *out)
{
    char mode[16];
    fprintf(out, "# osdp plan for %s: operator = dp | zdp | h | k/g (k of g slices ZDP) [recompute] [reduce-once]\n",
            layout->cfg.name);
    if (plan->geo.tp_size > 0)
        fprintf(out, "tp = %d   ; the tensor-parallel degree: the modes apply to each rank's parts\n", plan->geo.tp_size);
    for (int i = 0; i < plan->n_ops; i++) {
        char once[32];
        osdp_plan_once_word(plan, i, once, sizeof once);
        fprintf(out, "%s = %s%s%s%s\n", layout->op[i].name, osdp_plan_mode_name(plan, i, mode, sizeof mode),
                plan->recompute[i] ? " recompute" : "", *once ? " " : "", once);
    }
}

const char *osdp_plan_once_word(const osdp_plan *plan, int op, char *buf, size_t n)
{
    const int j = osdp_plan_once_slices(plan, op);
    if (j == 0) snprintf(buf, n, "%s", "");
    else if (j >= plan->slices[op]) snprintf(buf, n, "reduce-once");
    else snprintf(buf, n, "reduce-once %d", j);
    return buf;
}

unsigned long long osdp_plan_hash(const osdp_plan *plan)
{
    unsigned long long h = 1469598103934665603ULL;
    for (int i = 0; i < plan->n_ops; i++) {
        h = (h ^ (unsigned)plan->slices[i]) * 1099511628211ULL;
        h = (h ^ (unsigned)plan->zdp_slices[i]) * 1099511628211ULL;
        h = (h ^ (unsigned)plan->recompute[i]) * 1099511628211ULL;
        if (plan->hierarchical[i]) h = (h ^ 0x68u) * 1099511628211ULL;   /* without one: as before */
        const int once = osdp_plan_once_slices(plan, i);
        if (once) h = (h ^ 0x72u) * 1099511628211ULL;   /* likewise */
        if (once && once < plan->slices[i]) h = (h ^ (unsigned)once) * 1099511628211ULL;   /* some slices: their count */
    }
    h = (h ^ (unsigned)plan->geo.micro_batch) * 1099511628211ULL;
    if (plan->geo.tp_size > 1) h = (h ^ (unsigned)plan->geo.tp_size) * 1099511628211ULL;   /* tp 1 or unstated: as before */
    return h;
}

int osdp_plan_has_hierarchical(const osdp_plan *plan)
{
    for (int i = 0; i < plan->n_ops; i++)
        if (plan->hierarchical[i] && plan->zdp_slices[i] > 0) return 1;
    return 0;
}

int osdp_plan_count_reduce_once(const osdp_plan *plan)
{
    int n = 0;
    for (int i = 0; plan->reduce_once && i < plan->n_ops; i++) n += plan->reduce_once[i] != 0;
    return n;
}

osdp_status osdp_plan_check_tp(const osdp_plan *plan, int tp_size, const char *origin)
{
    if (plan->geo.tp_size == 0 || plan->geo.tp_size == tp_size) return OSDP_OK;
    return osdp_error_set(OSDP_ERR_INPUT, "%s is a plan for tensor-parallel degree tp = %d, but this run has --tp %d "
                          "(plan again with --tp %d, or run with --tp %d)", origin, plan->geo.tp_size, tp_size, tp_size,
                          plan->geo.tp_size);
}

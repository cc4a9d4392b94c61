/* Device information files (format in osdp/device.h). */
#include "osdp/device.h"
#include "util/text_file.h"
#include "osdp/memory.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[OSDP_N_OP_TYPES] = {"embed", "attn", "mlp", "head"};

const char *osdp_op_type_name(osdp_op_type t)
{
    return (unsigned)t < OSDP_N_OP_TYPES ? type_names[t] : "?";
}

enum { K_MEM, K_PREC, K_PBYTES, K_ABYTES, K_GBYTES, K_NODE, K_AG_A, K_AG_B, K_RS_A, K_RS_B, K_TP_A, K_TP_B, K_P2P_A, K_P2P_B, K_SHARD,
       K_FULL, K_G0,
       K_F0 = K_G0 + OSDP_N_OP_TYPES, K_N = K_F0 + OSDP_N_OP_TYPES };

typedef struct dev_parse {
    osdp_device *dev;
    int seen[K_N];
    int internode_seen[3][2];   /* [internode_all_gather], _reduce_scatter, _p2p: alpha, beta */
    int internode_call_seen[2]; /* [internode_all_gather], _reduce_scatter: call */
    osdp_status status;
} dev_parse;

static int parse_double(const char *v, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    while (*end == ' ' || *end == '\t') end++;
    if (errno || end == v || *end || !isfinite(x)) return -1;
    *out = x;
    return 0;
}

static int fail(dev_parse *st, const char *section, const char *key, const char *why, const char *value)
{
    st->status = osdp_error_set(OSDP_ERR_INPUT, "[%s] %s = '%s': %s", section, key, value, why);
    return 0;
}

/* ---- the two-level network: the [internode_*] sections ---- */

static const char *const internode_sections[3] = {"internode_all_gather", "internode_reduce_scatter", "internode_p2p"};

static osdp_collective_cost *internode_cost(osdp_device *d, int which)
{
    return which == 0 ? &d->internode.all_gather : which == 1 ? &d->internode.reduce_scatter : &d->internode.p2p;
}

/* one key of an [internode_*] section (the same rules as [all_gather]'s) */
static int internode_handler(dev_parse *st, const char *section, const char *key, const char *value)
{
    int which = -1;
    for (int w = 0; w < 3; w++)
        if (strcmp(section, internode_sections[w]) == 0) which = w;
    if (which < 0) {
        st->status = osdp_error_set(OSDP_ERR_INPUT,
                                    "unknown section [%s] (the inter-node ones: [internode_all_gather], "
                                    "[internode_reduce_scatter], [internode_p2p])", section);
        return 0;
    }
    const int is_beta = strcmp(key, "beta") == 0;
    double x;
    if (strcmp(key, "call") == 0 && which < 2) {   /* a collective's once-per-call cost */
        if (parse_double(value, &x) != 0 || x < 0)
            return fail(st, section, key, "call (seconds once per collective call) must be a number >= 0", value);
        if (st->internode_call_seen[which]) {
            st->status = osdp_error_set(OSDP_ERR_INPUT, "[%s] %s given twice", section, key);
            return 0;
        }
        st->internode_call_seen[which] = 1;
        internode_cost(st->dev, which)->call = x;
        return 1;
    }
    if (!is_beta && strcmp(key, "alpha") != 0) {
        st->status = osdp_error_set(OSDP_ERR_INPUT, "unknown key '%s' in [%s] (known: alpha, beta%s)", key, section,
                                    which < 2 ? ", call" : "");
        return 0;
    }
    if (!is_beta && (parse_double(value, &x) != 0 || x < 0))
        return fail(st, section, key, "alpha (latency, seconds per ring step) must be a number >= 0", value);
    if (is_beta && (parse_double(value, &x) != 0 || x <= 0))
        return fail(st, section, key,
                    "beta (seconds per byte = 1 / bandwidth) must be > 0: a zero or negative bandwidth is meaningless",
                    value);
    if (st->internode_seen[which][is_beta]) {
        st->status = osdp_error_set(OSDP_ERR_INPUT, "[%s] %s given twice", section, key);
        return 0;
    }
    st->internode_seen[which][is_beta] = 1;
    osdp_collective_cost *c = internode_cost(st->dev, which);
    if (is_beta) c->beta = x;
    else c->alpha = x;
    return 1;
}

/* after the whole file: each section complete, the collectives' two both or
 * neither, and a node size to tell the levels apart */
static osdp_status internode_finish(osdp_device *dev, const dev_parse *st, const char *origin)
{
    int any = 0;
    for (int w = 0; w < 3; w++) {
        if (st->internode_seen[w][0] != st->internode_seen[w][1])
            return osdp_error_set(OSDP_ERR_INPUT, "device file %s: [%s] needs both alpha and beta (missing '%s')", origin,
                                  internode_sections[w], st->internode_seen[w][0] ? "beta" : "alpha");
        if (w < 2 && st->internode_call_seen[w] && !st->internode_seen[w][0])
            return osdp_error_set(OSDP_ERR_INPUT, "device file %s: [%s] call needs alpha and beta", origin,
                                  internode_sections[w]);
        any |= st->internode_seen[w][0];
    }
    if (!any) {
        osdp_device_default_internode(dev);
        return OSDP_OK;
    }
    if (st->internode_seen[0][0] != st->internode_seen[1][0])
        return osdp_error_set(OSDP_ERR_INPUT,
                              "device file %s: [internode_all_gather] and [internode_reduce_scatter] go together (missing "
                              "[%s])", origin, internode_sections[st->internode_seen[0][0] ? 1 : 0]);
    if (!st->internode_seen[0][0])
        return osdp_error_set(OSDP_ERR_INPUT,
                              "device file %s: [internode_p2p] needs [internode_all_gather] and [internode_reduce_scatter]",
                              origin);
    if (!st->seen[K_NODE])
        return osdp_error_set(OSDP_ERR_INPUT,
                              "device file %s: [internode_*] sections need ranks_per_node in [device] (the ranks one node "
                              "holds: which groups span nodes)", origin);
    if (!st->internode_seen[2][0]) dev->internode.p2p = dev->internode.all_gather;   /* one ring step: one message */
    dev->internode.given = 1;
    return OSDP_OK;
}

double osdp_collective_time(const osdp_collective_cost *c, double n, double bytes)
{
    return n > 1 ? c->call + (n - 1) * (c->alpha + bytes / n * c->beta) : 0;
}

void osdp_device_default_internode(osdp_device *dev)
{
    dev->internode.given = 0;
    dev->internode.all_gather = dev->all_gather;
    dev->internode.reduce_scatter = dev->reduce_scatter;
    dev->internode.p2p = dev->p2p;
}

static osdp_collective_cost slower(osdp_collective_cost a, const osdp_collective_cost *b)
{
    if (b->alpha > a.alpha) a.alpha = b->alpha;
    if (b->beta > a.beta) a.beta = b->beta;
    if (b->call > a.call) a.call = b->call;
    return a;
}

void osdp_device_set_link(osdp_device *dev, int ranks_per_node, const osdp_collective_cost *link)
{
    /* a file's own inter-node figures (flat: the in-node ones) are the floor the link adds to */
    dev->ranks_per_node = ranks_per_node;
    dev->internode.all_gather = slower(dev->internode.all_gather, link);
    dev->internode.reduce_scatter = slower(dev->internode.reduce_scatter, link);
    dev->internode.p2p = slower(dev->internode.p2p, link);
    dev->internode.given = 1;
}

static void internode_write(FILE *f, const osdp_device *dev)
{
    if (!dev->internode.given) return;
    const osdp_collective_cost *c[3] = {&dev->internode.all_gather, &dev->internode.reduce_scatter, &dev->internode.p2p};
    for (int w = 0; w < 3; w++) {
        fprintf(f, "[%s]\nalpha = %.6e\nbeta = %.6e\n", internode_sections[w], c[w]->alpha, c[w]->beta);
        if (w < 2 && c[w]->call > 0) fprintf(f, "call = %.6e\n", c[w]->call);
        fprintf(f, "\n");
    }
}

/* ---- the rest of the file ---- */

static int dev_handler(void *user, const char *section, const char *key, const char *value)
{
    dev_parse *st = user;
    osdp_device *d = st->dev;
    if (st->status != OSDP_OK) return 0;
    if (strncmp(section, "internode_", 10) == 0) return internode_handler(st, section, key, value);
    int id = -1;
    double x = 0;
    if (strcmp(section, "device") == 0) {
        if (strcmp(key, "name") == 0) {
            snprintf(d->name, sizeof d->name, "%s", value);
            return 1;
        }
        if (strcmp(key, "mem_limit") == 0) {
            size_t b;
            if (osdp_parse_bytes(value, &b) != 0 || b == 0 || b > (size_t)1 << 60)
                return fail(st, section, key, "the memory limit must be a positive size such as 8G, 512M or 1000000", value);
            d->mem_limit = (long long)b;
            id = K_MEM;
        } else if (strcmp(key, "precision") == 0) {
            if (strcmp(value, "fp32") == 0) d->param_bytes = 4;
            else if (strcmp(value, "bf16") == 0 || strcmp(value, "fp16") == 0) d->param_bytes = 2;
            else return fail(st, section, key, "expected fp32, bf16 or fp16", value);
            if (st->seen[K_PBYTES]) return fail(st, section, key, "give precision or param_bytes, not both", value);
            id = K_PREC;
        } else if (strcmp(key, "param_bytes") == 0 || strcmp(key, "act_bytes") == 0 || strcmp(key, "grad_bytes") == 0) {
            int is_p = key[0] == 'p';
            if (parse_double(value, &x) != 0 || (x != 2 && x != 4))
                return fail(st, section, key, "expected 2 or 4 (bytes per element)", value);
            if (is_p && st->seen[K_PREC]) return fail(st, section, key, "give precision or param_bytes, not both", value);
            if (is_p) d->param_bytes = (int)x;
            else if (key[0] == 'g') d->grad_bytes = (int)x;
            else d->act_bytes = (int)x;
            id = is_p ? K_PBYTES : key[0] == 'g' ? K_GBYTES : K_ABYTES;
        } else if (strcmp(key, "ranks_per_node") == 0) {
            if (parse_double(value, &x) != 0 || x < 1 || x > 1 << 20 || x != floor(x))
                return fail(st, section, key, "expected a whole number of ranks >= 1 (the ranks one node holds)", value);
            d->ranks_per_node = (int)x;
            id = K_NODE;
        } else {
            st->status = osdp_error_set(OSDP_ERR_INPUT,
                "unknown key '%s' in [device] (known: name, mem_limit, precision, param_bytes, grad_bytes, act_bytes, "
                "ranks_per_node)", key);
            return 0;
        }
    } else if (strcmp(section, "all_gather") == 0 || strcmp(section, "reduce_scatter") == 0
               || strcmp(section, "tp_all_reduce") == 0 || strcmp(section, "p2p") == 0) {
        int which = section[0] == 'a' ? 0 : section[0] == 'r' ? 1 : section[0] == 't' ? 2 : 3;
        osdp_collective_cost *const cost_of[4] = {&d->all_gather, &d->reduce_scatter, &d->tp_all_reduce, &d->p2p};
        osdp_collective_cost *c = cost_of[which];
        static const int alpha_id[4] = {K_AG_A, K_RS_A, K_TP_A, K_P2P_A}, beta_id[4] = {K_AG_B, K_RS_B, K_TP_B, K_P2P_B};
        if (strcmp(key, "alpha") == 0) {
            if (parse_double(value, &x) != 0 || x < 0)
                return fail(st, section, key, "alpha (latency, seconds per ring step) must be a number >= 0", value);
            c->alpha = x;
            id = alpha_id[which];
        } else if (strcmp(key, "beta") == 0) {
            if (parse_double(value, &x) != 0 || x <= 0)
                return fail(st, section, key,
                            "beta (seconds per byte = 1 / bandwidth) must be > 0: a zero or negative bandwidth is meaningless",
                            value);
            c->beta = x;
            id = beta_id[which];
        } else {
            st->status = osdp_error_set(OSDP_ERR_INPUT, "unknown key '%s' in [%s] (known: alpha, beta)", key, section);
            return 0;
        }
    } else if (strcmp(section, "gamma") == 0) {
        for (int t = 0; t < OSDP_N_OP_TYPES; t++)
            if (strcmp(key, type_names[t]) == 0) id = K_G0 + t;
        if (id < 0) {
            st->status = osdp_error_set(OSDP_ERR_INPUT, "unknown key '%s' in [gamma] (known: embed, attn, mlp, head)", key);
            return 0;
        }
        if (parse_double(value, &x) != 0 || x <= 0)
            return fail(st, section, key, "gamma (seconds per FLOP) must be a number > 0", value);
        d->gamma[id - K_G0] = x;
    } else if (strcmp(section, "gamma_fixed") == 0) {
        for (int t = 0; t < OSDP_N_OP_TYPES; t++)
            if (strcmp(key, type_names[t]) == 0) id = K_F0 + t;
        if (id < 0) {
            st->status = osdp_error_set(OSDP_ERR_INPUT, "unknown key '%s' in [gamma_fixed] (known: embed, attn, mlp, head)",
                                        key);
            return 0;
        }
        if (parse_double(value, &x) != 0 || x < 0)
            return fail(st, section, key, "gamma_fixed (seconds per operator per micro-step) must be a number >= 0", value);
        d->gamma_fixed[id - K_F0] = x;
    } else if (strcmp(section, "step") == 0) {
        int shard = strcmp(key, "shard_param") == 0;
        if (!shard && strcmp(key, "full_param") != 0) {
            st->status = osdp_error_set(OSDP_ERR_INPUT, "unknown key '%s' in [step] (known: shard_param, full_param)", key);
            return 0;
        }
        if (parse_double(value, &x) != 0 || x < 0)
            return fail(st, section, key, "seconds per element must be a number >= 0", value);
        if (shard) d->step_shard_param = x;
        else d->step_full_param = x;
        id = shard ? K_SHARD : K_FULL;
    } else {
        st->status = osdp_error_set(OSDP_ERR_INPUT,
            "unknown section [%s] (expected [device], [all_gather], [reduce_scatter], [tp_all_reduce], [p2p], [gamma], "
            "[gamma_fixed], [step], [internode_all_gather], [internode_reduce_scatter], [internode_p2p])",
            section);
        return 0;
    }
    if (st->seen[id]) {
        st->status = osdp_error_set(OSDP_ERR_INPUT, "[%s] %s given twice", section, key);
        return 0;
    }
    st->seen[id] = 1;
    return 1;
}

osdp_status osdp_device_parse(osdp_device *dev, const char *text, const char *origin)
{
    memset(dev, 0, sizeof *dev);
    dev->param_bytes = 4;
    dev->act_bytes = 4;
    snprintf(dev->name, sizeof dev->name, "unnamed");
    dev_parse st = {.dev = dev, .status = OSDP_OK};
    int rc = ini_parse_string(text, dev_handler, &st);
    if (st.status != OSDP_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", osdp_error_message());
        return osdp_error_set(st.status, "device file %s:%d: %s", origin, rc, msg);
    }
    if (rc != 0)
        return osdp_error_set(OSDP_ERR_INPUT, "device file %s:%d: malformed line (expected [section] or key = value)",
                              origin, rc);
    static const struct { int id; const char *section, *key; } req[] = {
        {K_MEM, "device", "mem_limit"},
        {K_AG_A, "all_gather", "alpha"}, {K_AG_B, "all_gather", "beta"},
        {K_RS_A, "reduce_scatter", "alpha"}, {K_RS_B, "reduce_scatter", "beta"},
        {K_G0 + 0, "gamma", "embed"}, {K_G0 + 1, "gamma", "attn"},
        {K_G0 + 2, "gamma", "mlp"}, {K_G0 + 3, "gamma", "head"},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (!st.seen[req[i].id])
            return osdp_error_set(OSDP_ERR_INPUT, "device file %s: missing key '%s' in [%s]", origin, req[i].key,
                                  req[i].section);
    if (!st.seen[K_GBYTES]) dev->grad_bytes = dev->param_bytes;   /* the gradients as the weights */
    if (st.seen[K_TP_A] != st.seen[K_TP_B])
        return osdp_error_set(OSDP_ERR_INPUT, "device file %s: [tp_all_reduce] needs both alpha and beta (missing '%s')",
                              origin, st.seen[K_TP_A] ? "beta" : "alpha");
    if (!st.seen[K_TP_A]) osdp_device_default_tp_all_reduce(dev);
    if (st.seen[K_P2P_A] != st.seen[K_P2P_B])
        return osdp_error_set(OSDP_ERR_INPUT, "device file %s: [p2p] needs both alpha and beta (missing '%s')", origin,
                              st.seen[K_P2P_A] ? "beta" : "alpha");
    if (!st.seen[K_P2P_A]) osdp_device_default_p2p(dev);
    return internode_finish(dev, &st, origin);
}

void osdp_device_default_p2p(osdp_device *dev)
{
    dev->p2p = dev->all_gather;   /* one ring step: S/N bytes to the next rank, nothing added */
}

void osdp_device_default_tp_all_reduce(osdp_device *dev)
{
    /* an all-reduce is a reduce-scatter then an all-gather: 2 (T-1) ring
     * steps at the mean of their costs take the time of the two */
    dev->tp_all_reduce.alpha = (dev->all_gather.alpha + dev->reduce_scatter.alpha) / 2;
    dev->tp_all_reduce.beta = (dev->all_gather.beta + dev->reduce_scatter.beta) / 2;
}

osdp_status osdp_device_load(osdp_device *dev, const char *path)
{
    char *text;
    osdp_status s = osdp_read_text_file(path, 65536, "device file", &text);
    if (s != OSDP_OK) return s;
    s = osdp_device_parse(dev, text, path);
    free(text);
    return s;
}

osdp_status osdp_device_write(const osdp_device *dev, const char *comment, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return osdp_error_set(OSDP_ERR_IO, "cannot write device file %s: %s", path, strerror(errno));
    if (comment) {
        /* a line of the file is at most INI_MAX_LINE (200) characters when read back: a longer comment line is
         * cut at its last space before that, the rest on the next comment line */
        enum { MOST = 180 };
        const char *p = comment;
        while (*p) {
            const char *nl = strchr(p, '\n');
            int len = nl ? (int)(nl - p) : (int)strlen(p), cut = len;
            if (len > MOST) {
                for (cut = MOST; cut > 0 && p[cut] != ' '; cut--) continue;
                if (cut == 0) cut = MOST;   /* no space: cut anyway */
            }
            fprintf(f, "; %.*s\n", cut, p);
            p += cut;
            if (cut == len) p += nl != NULL;
            else while (*p == ' ') p++;
        }
    }
    fprintf(f, "[device]\nname = %s\nmem_limit = %lld\nparam_bytes = %d\ngrad_bytes = %d\nact_bytes = %d\n",
            dev->name, dev->mem_limit, dev->param_bytes, dev->grad_bytes, dev->act_bytes);
    if (dev->ranks_per_node > 0) fprintf(f, "ranks_per_node = %d\n", dev->ranks_per_node);
    fprintf(f, "\n");
    fprintf(f, "[all_gather]\nalpha = %.6e\nbeta = %.6e\n\n", dev->all_gather.alpha, dev->all_gather.beta);
    fprintf(f, "[reduce_scatter]\nalpha = %.6e\nbeta = %.6e\n\n", dev->reduce_scatter.alpha, dev->reduce_scatter.beta);
    fprintf(f, "[tp_all_reduce]\nalpha = %.6e\nbeta = %.6e\n\n", dev->tp_all_reduce.alpha, dev->tp_all_reduce.beta);
    fprintf(f, "[p2p]\nalpha = %.6e\nbeta = %.6e\n\n", dev->p2p.alpha, dev->p2p.beta);
    internode_write(f, dev);
    fprintf(f, "[gamma]\n");
    for (int t = 0; t < OSDP_N_OP_TYPES; t++) fprintf(f, "%-5s = %.6e\n", type_names[t], dev->gamma[t]);
    int fixed = 0;
    for (int t = 0; t < OSDP_N_OP_TYPES; t++) fixed |= dev->gamma_fixed[t] > 0;
    if (fixed) {
        fprintf(f, "\n[gamma_fixed]\n");
        for (int t = 0; t < OSDP_N_OP_TYPES; t++) fprintf(f, "%-5s = %.6e\n", type_names[t], dev->gamma_fixed[t]);
    }
    if (dev->step_shard_param > 0 || dev->step_full_param > 0)
        fprintf(f, "\n[step]\nshard_param = %.6e\nfull_param = %.6e\n", dev->step_shard_param, dev->step_full_param);
    if (fclose(f) != 0) return osdp_error_set(OSDP_ERR_IO, "cannot write device file %s", path);
    return OSDP_OK;
}

/* The one table of osdp_gpt's options and its parser (see options.h). */
#include "config.h"
#include "options.h"
#include "osdp/app.h"
#include "osdp/layout.h"
#include "osdp/optim.h"
#include "osdp/planner.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum option_type {
    OPT_FLAG,        /* no value */
    OPT_INT,         /* a decimal integer in [lo, hi] (or the option's word) */
    OPT_SIZE,        /* bytes: a number with an optional K/M/G/T suffix (binary), whole bytes in [lo, hi] */
    OPT_FLOAT,       /* a finite number in [lo, hi] ((lo, hi] when lo_open) */
    OPT_ENUM,        /* one of the words of `choices`, "a|b|c": stored as its index */
    OPT_TEXT,        /* a non-empty file name or text */
    OPT_TEXT_MAYBE   /* as OPT_TEXT, but the value is optional: taken from the next argument unless that starts with '-' */
} option_type;

#define TRAIN OSDP_CMD_TRAIN
#define PLAN OSDP_CMD_PLAN
#define PROFILE OSDP_CMD_PROFILE
#define FIELD(f) offsetof(osdp_job, f)
#define OSDP_MAX_MEM_LIMIT 1152921504606846976.0   /* 2^60 bytes, as device files */

typedef struct option_row {
    const char *name;          /* without the leading dashes */
    char short_name;           /* -m for --model, or 0 */
    option_type type;
    unsigned commands;         /* the commands that take it */
    unsigned required;         /* the commands that need it */
    size_t field;              /* where the value goes in osdp_job */
    size_t flag_field;         /* OPT_TEXT_MAYBE: the int set when the option is given */
    double lo, hi;             /* OPT_INT, OPT_SIZE, OPT_FLOAT */
    int lo_open;               /* OPT_FLOAT: lo itself is refused */
    const char *choices;       /* OPT_ENUM: "none|all|auto"; OPT_INT: a word besides the numbers */
    long long word_value;      /* OPT_INT: the value of that word */
    const char *default_value; /* parsed like a given value before the command line (NULL: none) */
    const char *default_text;  /* for --help when the default is not a plain value */
    const char *metavar;
    const char *help;          /* continuation lines start with '\n' */
} option_row;

/* Ranges: what the runtime can honour (int fields, uint16 tokens, device
 * limits), never what a C type happens to hold. */
static const option_row g_options[] = {
    /* files */
    {"model", 'm', OPT_TEXT, TRAIN, 0, FIELD(model), 0, 0, 0, 0, NULL, 0, "input:models/tiny.ini", NULL, "FILE",
     "model description"},
    {"model", 0, OPT_TEXT, PLAN | PROFILE, PLAN | PROFILE, FIELD(model), 0, 0, 0, 0, NULL, 0, NULL, NULL, "FILE",
     "model description (input/models/*.ini)"},
    {"data", 'd', OPT_TEXT, TRAIN, 0, FIELD(data), 0, 0, 0, 0, NULL, 0, "input:data/addition.txt", NULL, "FILE|DIR",
     "llm.c .bin shard, directory of shards, or a text file"},
    {"device", 0, OPT_TEXT, TRAIN, 0, FIELD(device), 0, 0, 0, 0, NULL, 0, "input:devices/cpu_2core.ini", NULL, "FILE",
     "device information for --plan auto (--mem-limit overrides its limit)"},
    {"device", 0, OPT_TEXT, PLAN, PLAN, FIELD(device), 0, 0, 0, 0, NULL, 0, NULL, NULL, "FILE",
     "device information (input/devices/*.ini)"},
    {"out", 0, OPT_TEXT, PLAN, 0, FIELD(out), 0, 0, 0, 0, NULL, 0, NULL, NULL, "FILE",
     "write the plan file (for osdp_gpt train --plan FILE)"},
    {"out", 0, OPT_TEXT, PROFILE, PROFILE, FIELD(out), 0, 0, 0, 0, NULL, 0, NULL, NULL, "FILE",
     "the device file to write"},
    {"name", 0, OPT_TEXT, PROFILE, 0, FIELD(name), 0, 0, 0, 0, NULL, 0, "profiled", NULL, "NAME",
     "the device's name in the file"},
    {"log", 0, OPT_TEXT, TRAIN, 0, FIELD(log), 0, 0, 0, 0, NULL, 0, NULL, NULL, "FILE",
     "machine-readable per-step record (rank 0)"},
    {"dump-weights", 0, OPT_TEXT, TRAIN, 0, FIELD(dump_weights), 0, 0, 0, 0, NULL, 0, NULL, NULL, "FILE",
     "after training, write every parameter as float32 (rank 0)"},
    /* what to run */
    {"ranks", 0, OPT_INT, PLAN, PLAN, FIELD(ranks), 0, 1, 1 << 20, 0, NULL, 0, NULL, NULL, "N",
     "data-parallel ranks to plan for"},
    {"steps", 's', OPT_INT, TRAIN, 0, FIELD(steps), 0, 0, 1e12, 0, NULL, 0, "100", NULL, "N",
     "optimizer steps in all: a resumed run continues up to step N"},
    {"batch", 'b', OPT_INT, TRAIN, 0, FIELD(batch), 0, 1, 1 << 20, 0, NULL, 0, NULL,
     "the planner's choice with --plan auto, else 8", "B", "sequences per rank per micro-step"},
    {"batch", 0, OPT_INT, PLAN, 0, FIELD(batch), 0, 1, 1 << 20, 0, NULL, 0, NULL, "the scheduler tries 1, 2, ...", "B",
     "plan for this micro-batch only"},
    {"max-batch", 0, OPT_INT, PLAN, 0, FIELD(max_batch), 0, 1, 1 << 20, 0, NULL, 0, NULL, NULL, "B",
     "the scheduler's largest micro-batch"},
    {"global-batch", 0, OPT_INT, TRAIN, 0, FIELD(global_batch), 0, 1, 1 << 30, 0, NULL, 0, NULL,
     "B x ranks (8 x ranks when the planner picks B); a resume keeps the checkpoint's", "G",
     "sequences per optimizer step over all ranks (a multiple of B x ranks)"},
    {"global-batch", 0, OPT_INT, PLAN, 0, FIELD(global_batch), 0, 1, 1 << 30, 0, NULL, 0, NULL, "none: accumulation 1",
     "G", "sequences per optimizer step: micro-batch b divides G/N, accumulation G/(N b)"},
    {"seq-len", 0, OPT_INT, TRAIN, 0, FIELD(seq_len), 0, 1, 1 << 20, 0, NULL, 0, NULL,
     "the model's ctx; a resume keeps the checkpoint's", "T", "tokens per sequence (at most the model's ctx)"},
    {"seq-len", 0, OPT_INT, PLAN | PROFILE, 0, FIELD(seq_len), 0, 1, 1 << 20, 0, NULL, 0, NULL, "the model's ctx", "T",
     "tokens per sequence (at most the model's ctx)"},
    {"plan", 'p', OPT_TEXT, TRAIN, 0, FIELD(plan), 0, 0, 0, 0, NULL, 0, "auto", NULL, "auto|dp|zdp|FILE",
     "the planner's plan (modes per operator, and the micro-batch and accumulation\n"
     "unless --batch is given), DP or ZDP for every operator, or a plan file"},
    {"split", 0, OPT_INT, TRAIN | PLAN, 0, FIELD(split), 0, 1, OSDP_MAX_SLICES, 0, "auto", OSDP_SPLIT_AUTO, "1", NULL,
     "G|auto", "operator splitting: G+1 choices per operator, k of G slices ZDP (auto: k of any\n"
     "G in 1, 2, 4, 8, the planner chooses G per operator; train --plan zdp makes every operator G/G)"},
    {"recompute", 0, OPT_ENUM, TRAIN | PLAN, 0, FIELD(recompute), 0, 0, 0, 0, "none|all|auto", 0, "none", NULL,
     "none|all|auto", "activation checkpointing of attn and mlp operators (auto: the planner\n"
     "chooses per operator, with --plan auto; train: a plan file's 'recompute' also counts)"},
    {"search", 0, OPT_ENUM, PLAN, 0, FIELD(search), 0, 0, 0, 0, "exact|dfs", 0, "exact", NULL, "exact|dfs",
     "plan search (dfs: the paper's, with a time budget)"},
    {"dfs-limit", 0, OPT_FLOAT, PLAN, 0, FIELD(dfs_limit), 0, 0, 86400, 1, NULL, 0, NULL, NULL, "S",
     "wall-clock budget of --search dfs for the whole run, seconds"},
    {"cost-model", 0, OPT_ENUM, TRAIN | PLAN, 0, FIELD(cost_model), 0, 0, 0, 0, "paper|overlap", 0, "paper", NULL,
     "paper|overlap", "step time: compute + comm (paper eq. 2), or per operator max(compute, comm)\n"
     "with prefetch (train: for --plan auto and the logged pred_step_s)"},
    {"json", 0, OPT_FLAG, PLAN, 0, FIELD(json), 0, 0, 0, 0, NULL, 0, NULL, NULL, NULL,
     "one JSON object on stdout instead of the tables"},
    {"mem-limit", 0, OPT_SIZE, TRAIN, 0, FIELD(mem_limit), 0, 1, OSDP_MAX_MEM_LIMIT, 0, NULL, 0, NULL,
     "none (with --plan auto: the device file's)", "BYTES", "emulated device memory per rank: 8G, 512M, 1000000"},
    {"mem-limit", 0, OPT_SIZE, PLAN, 0, FIELD(mem_limit), 0, 1, OSDP_MAX_MEM_LIMIT, 0, NULL, 0, NULL,
     "the device file's mem_limit", "BYTES", "memory per rank: 8G, 512M, 1000000"},
    {"mem-limit", 0, OPT_SIZE, PROFILE, 0, FIELD(mem_limit), 0, 1, OSDP_MAX_MEM_LIMIT, 0, NULL, 0, NULL,
     "physical memory / ranks on the node", "BYTES", "the device file's mem_limit: 8G, 512M, 1000000"},
    {"no-prefetch", 0, OPT_FLAG, TRAIN | PLAN, 0, FIELD(no_prefetch), 0, 0, 0, 0, NULL, 0, NULL, NULL, NULL,
     "do not overlap all-gathers / reduce-scatters with compute"},
    /* optimizer */
    {"seed", 0, OPT_INT, TRAIN, 0, FIELD(seed), 0, 0, 1e18, 0, NULL, 0, "1337", NULL, "S",
     "weights and data order"},
    {"lr", 0, OPT_FLOAT, TRAIN, 0, FIELD(lr), 0, 0, 10, 1, NULL, 0, NULL, NULL, "X", "AdamW peak learning rate"},
    {"warmup", 0, OPT_INT, TRAIN, 0, FIELD(warmup), 0, 0, 1e9, 0, NULL, 0, NULL, NULL, "N", "linear warm-up steps"},
    {"min-lr-frac", 0, OPT_FLOAT, TRAIN, 0, FIELD(min_lr_frac), 0, 0, 1, 0, NULL, 0, NULL, NULL, "X",
     "the cosine decays to lr x X"},
    {"weight-decay", 0, OPT_FLOAT, TRAIN, 0, FIELD(weight_decay), 0, 0, 10, 0, NULL, 0, NULL, NULL, "X",
     "AdamW decoupled weight decay"},
    {"grad-clip", 0, OPT_FLOAT, TRAIN, 0, FIELD(grad_clip), 0, 0, 1e9, 0, NULL, 0, NULL, NULL, "X",
     "global gradient norm clipping (0: off)"},
    {"lr-steps", 0, OPT_INT, TRAIN, 0, FIELD(lr_steps), 0, 1, 1e12, 0, NULL, 0, NULL,
     "--steps; a resume keeps the checkpoint's", "N", "cosine horizon"},
    /* the machine */
    {"threads", 0, OPT_INT, TRAIN | PROFILE, 0, FIELD(threads), 0, 1, 4096, 0, NULL, 0, NULL,
     "node cores / ranks on the node", "N", "compute threads per rank (at most the node's cores)"},
    {"backend", 0, OPT_ENUM, TRAIN, 0, FIELD(backend), 0, 0, 0, 0, "cpu|cuda", 0, "cpu", NULL, "cpu|cuda",
     "compute backend"},
    {"precision", 0, OPT_ENUM, TRAIN, 0, FIELD(precision), 0, 0, 0, 0, "bf16|fp32", 0, NULL,
     "bf16 with cuda, fp32 on cpu", "bf16|fp32", "working weights and their all-gathers (on cpu bf16 only tests the\n"
     "mixed-precision path); master weights, moments, gradients, activations: always fp32"},
    {"peak-flops", 0, OPT_FLOAT, TRAIN, 0, FIELD(peak_flops), 0, 1e3, 1e18, 0, NULL, 0, NULL, "measured sgemm rate", "X",
     "device peak FLOP/s for MFU"},
    {"reps", 0, OPT_INT, PROFILE, 0, FIELD(reps), 0, 1, OSDP_PROFILE_MAX_REPS, 0, NULL, 0, "7", NULL, "R",
     "repetitions per measurement (the median counts)"},
    {"quiet", 0, OPT_FLAG, TRAIN, 0, FIELD(quiet), 0, 0, 0, 0, NULL, 0, NULL, NULL, NULL, "only the summary line"},
    /* checkpoints */
    {"ckpt-dir", 0, OPT_TEXT, TRAIN, 0, FIELD(ckpt_dir), 0, 0, 0, 0, NULL, 0, NULL, NULL, "DIR",
     "checkpoints go to DIR/step_XXXXXXXX.h5; DIR/latest names the newest (saved at the end\n"
     "of the run, every --save-every steps, and on SIGTERM / SIGUSR1: finish the step, save, exit 0)"},
    {"save-every", 0, OPT_INT, TRAIN, 0, FIELD(save_every), 0, 1, 1e12, 0, NULL, 0, NULL, NULL, "K",
     "save after every K-th optimizer step"},
    {"keep", 0, OPT_INT, TRAIN, 0, FIELD(keep), 0, 0, 1e9, 0, NULL, 0, "3", NULL, "K", "keep the last K saves (0: all)"},
    {"resume", 0, OPT_TEXT_MAYBE, TRAIN, 0, FIELD(resume_file), FIELD(resume), 0, 0, 0, NULL, 0, NULL, NULL, "[FILE]",
     "continue from FILE or DIR/latest: weights, AdamW moments, step, seed, global batch,\n"
     "cosine horizon, sequence length (any rank count, any plan)"},
    {"resume-fallback", 0, OPT_FLAG, TRAIN, 0, FIELD(resume_fallback), 0, 0, 0, 0, NULL, 0, NULL, NULL, NULL,
     "if the checkpoint is refused, try the previous save in its directory"},
    {"init-from", 0, OPT_TEXT, TRAIN, 0, FIELD(init_from), 0, 0, 0, 0, NULL, 0, NULL, NULL, "FILE",
     "start from the weights of a checkpoint (fresh optimizer, step 0)"},
};
#define N_OPTIONS ((int)(sizeof g_options / sizeof g_options[0]))
_Static_assert(sizeof g_options / sizeof g_options[0] <= OSDP_MAX_OPTIONS, "raise OSDP_MAX_OPTIONS");

const char *osdp_command_name(osdp_command command)
{
    return command == OSDP_CMD_TRAIN ? "train" : command == OSDP_CMD_PLAN ? "plan" : "profile";
}

/* the row of `name` for `command`, -1 when the command has no such option */
static int find_row(osdp_command command, const char *name, size_t len)
{
    for (int i = 0; i < N_OPTIONS; i++)
        if ((g_options[i].commands & command) && strlen(g_options[i].name) == len &&
            strncmp(g_options[i].name, name, len) == 0)
            return i;
    return -1;
}

/* index of `word` among the '|'-separated words of `choices`, -1 if absent */
static int choice_index(const char *choices, const char *word)
{
    size_t n = strlen(word);
    int index = 0;
    for (const char *p = choices; *p; index++) {
        size_t len = strcspn(p, "|");
        if (len == n && strncmp(p, word, n) == 0) return index;
        p += len;
        if (*p == '|') p++;
    }
    return -1;
}

/* "none, all or auto" */
static void choices_text(const char *choices, char *buf, size_t n)
{
    size_t at = 0;
    int count = 1;
    for (const char *p = choices; *p; p++) count += *p == '|';
    int index = 0;
    for (const char *p = choices; *p && at < n; index++) {
        size_t len = strcspn(p, "|");
        const char *sep = index == 0 ? "" : index == count - 1 ? " or " : ", ";
        at += (size_t)snprintf(buf + at, n - at, "%s%.*s", sep, (int)len, p);
        p += len;
        if (*p == '|') p++;
    }
}

const char *osdp_option_word(const char *name, int value)
{
    static char word[32];
    for (int i = 0; i < N_OPTIONS; i++) {
        if (strcmp(g_options[i].name, name) != 0 || !g_options[i].choices) continue;
        const char *p = g_options[i].choices;
        for (int index = 0; *p; index++) {
            size_t len = strcspn(p, "|");
            if (index == value) {
                snprintf(word, sizeof word, "%.*s", (int)len, p);
                return word;
            }
            p += len;
            if (*p == '|') p++;
        }
    }
    return "?";
}

/* "[1, 1048576]" for the range of an integer, size or float row */
static void range_text(const option_row *o, char *buf, size_t n)
{
    if (o->type == OPT_FLOAT)
        snprintf(buf, n, "%s%.17g, %.17g]", o->lo_open ? "(" : "[", o->lo, o->hi);
    else
        snprintf(buf, n, "[%.0f, %.0f]", o->lo, o->hi);
}

static osdp_status refuse(const option_row *o, const char *value, const char *expected)
{
    return osdp_error_set(OSDP_ERR_INPUT, "--%s '%s': expected %s", o->name, value, expected);
}

static osdp_status parse_int(const option_row *o, const char *value, long long *out)
{
    char range[96], expected[160];
    range_text(o, range, sizeof range);
    if (o->choices) snprintf(expected, sizeof expected, "an integer in %s or %s", range, o->choices);
    else snprintf(expected, sizeof expected, "an integer in %s", range);
    if (o->choices && strcmp(value, o->choices) == 0) {
        *out = o->word_value;
        return OSDP_OK;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    /* strtoll skips leading blanks and takes "+"; a value is its digits alone */
    int digits_only = value[0] == '-' ? value[1] >= '0' && value[1] <= '9' : value[0] >= '0' && value[0] <= '9';
    if (end == value || *end || errno == ERANGE || !digits_only || (double)v < o->lo || (double)v > o->hi)
        return refuse(o, value, expected);
    *out = v;
    return OSDP_OK;
}

static osdp_status parse_size(const option_row *o, const char *value, long long *out)
{
    char range[96], expected[200];
    range_text(o, range, sizeof range);
    snprintf(expected, sizeof expected, "a whole number of bytes in %s, such as 8G, 512M or 1000000", range);
    char *end = NULL;
    int starts_with_digit = value[0] >= '0' && value[0] <= '9';
    double v = strtod(value, &end);
    if (!starts_with_digit || end == value) return refuse(o, value, expected);
    double mult = 1;
    const char *units = "KMGT";
    const char *u = *end ? strchr(units, *end >= 'a' ? *end - 'a' + 'A' : *end) : NULL;
    if (u && *end) {
        for (const char *p = units; p <= u; p++) mult *= 1024.0;
        end++;
        if (*end == 'i') end++;
    }
    if (*end == 'B' || *end == 'b') end++;
    double bytes = v * mult;
    if (*end || !isfinite(bytes) || bytes != floor(bytes) || bytes < o->lo || bytes > o->hi)
        return refuse(o, value, expected);
    *out = (long long)bytes;
    return OSDP_OK;
}

static osdp_status parse_float(const option_row *o, const char *value, double *out)
{
    char range[96], expected[160];
    range_text(o, range, sizeof range);
    snprintf(expected, sizeof expected, "a number in %s", range);
    char *end = NULL;
    errno = 0;
    double v = strtod(value, &end);
    if (end == value || *end || value[0] == ' ' || !isfinite(v) || (o->lo_open ? v <= o->lo : v < o->lo) || v > o->hi)
        return refuse(o, value, expected);
    *out = v;
    return OSDP_OK;
}

/* the value of row o into the job */
static osdp_status set_value(const option_row *o, const char *value, osdp_job *job)
{
    char *at = (char *)job + o->field;
    switch (o->type) {
    case OPT_FLAG: *(int *)at = 1; return OSDP_OK;
    case OPT_INT: return parse_int(o, value, (long long *)at);
    case OPT_SIZE: return parse_size(o, value, (long long *)at);
    case OPT_FLOAT: return parse_float(o, value, (double *)at);
    case OPT_ENUM: {
        int index = choice_index(o->choices, value);
        if (index < 0) {
            char words[128];
            choices_text(o->choices, words, sizeof words);
            return refuse(o, value, words);
        }
        *(int *)at = index;
        return OSDP_OK;
    }
    case OPT_TEXT:
    case OPT_TEXT_MAYBE:
        if (o->flag_field) *(int *)((char *)job + o->flag_field) = 1;
        if (value && !*value) return osdp_error_set(OSDP_ERR_INPUT, "--%s: empty %s", o->name, o->metavar);
        *(const char **)at = value;
        return OSDP_OK;
    }
    return OSDP_ERR_INTERNAL;
}

/* defaults that are not options' values: the optimizer's and the planner's
 * own, so that each lives in one place */
static void job_defaults(osdp_command command, osdp_job *job)
{
    static char paths[4][4096];
    int n_paths = 0;
    memset(job, 0, sizeof *job);
    job->command = command;
    osdp_optim_config optim;
    osdp_optim_defaults(&optim);
    job->lr = optim.lr;
    job->min_lr_frac = optim.min_lr_frac;
    job->weight_decay = optim.weight_decay;
    job->grad_clip = optim.grad_clip;
    job->warmup = optim.warmup_steps;
    osdp_planner_options planner;
    osdp_planner_defaults(&planner);
    job->max_batch = planner.max_micro_batch;
    job->dfs_limit = planner.dfs_time_limit_s;
    for (int i = 0; i < N_OPTIONS; i++) {
        const option_row *o = &g_options[i];
        if (!(o->commands & command) || !o->default_value) continue;
        const char *value = o->default_value;
        if (strncmp(value, "input:", 6) == 0 && n_paths < 4)   /* a default input file of the source tree */
            value = osdp_default_input(value + 6, paths[n_paths++], (int)sizeof paths[0]);
        if (set_value(o, value, job) != OSDP_OK) abort();   /* a default outside its own range: a bug in the table */
    }
}

osdp_status osdp_options_parse(osdp_command command, int argc, char *const *argv, osdp_job *job)
{
    job_defaults(command, job);
    const char *cmd = osdp_command_name(command);
    int i = 1;
    for (; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0) { i++; break; }
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            job->help = 1;
            return OSDP_OK;
        }
        int row = -1;
        const char *value = NULL;
        if (arg[0] == '-' && arg[1] == '-') {
            const char *eq = strchr(arg + 2, '=');
            row = find_row(command, arg + 2, eq ? (size_t)(eq - arg - 2) : strlen(arg + 2));
            if (eq) value = eq + 1;
        } else if (arg[0] == '-' && arg[1] && !arg[2]) {
            for (int r = 0; r < N_OPTIONS && row < 0; r++)
                if (g_options[r].short_name == arg[1] && (g_options[r].commands & command)) row = r;
        } else {
            return osdp_error_set(OSDP_ERR_INPUT, "%s: unexpected argument '%s' (see osdp_gpt %s --help)", cmd, arg, cmd);
        }
        if (row < 0)
            return osdp_error_set(OSDP_ERR_INPUT, "%s: unknown option '%s' (see osdp_gpt %s --help)", cmd, arg, cmd);
        const option_row *o = &g_options[row];
        if (o->type == OPT_FLAG && value)
            return osdp_error_set(OSDP_ERR_INPUT, "--%s takes no value (given '%s')", o->name, value);
        if (!value && o->type == OPT_TEXT_MAYBE && i + 1 < argc && argv[i + 1][0] != '-') value = argv[++i];
        else if (!value && o->type != OPT_FLAG && o->type != OPT_TEXT_MAYBE) {
            if (i + 1 >= argc)
                return osdp_error_set(OSDP_ERR_INPUT, "--%s needs a value: %s", o->name, o->metavar);
            value = argv[++i];
        }
        osdp_status s = set_value(o, value, job);
        if (s != OSDP_OK) return s;
        job->given[row] = 1;
    }
    if (i < argc)
        return osdp_error_set(OSDP_ERR_INPUT, "%s: unexpected argument '%s' (see osdp_gpt %s --help)", cmd, argv[i], cmd);
    for (int r = 0; r < N_OPTIONS; r++)
        if ((g_options[r].required & command) && !job->given[r])
            return osdp_error_set(OSDP_ERR_INPUT, "%s: --%s %s is required", cmd, g_options[r].name, g_options[r].metavar);
    return OSDP_OK;
}

int osdp_option_given(const osdp_job *job, const char *name)
{
    for (int i = 0; i < N_OPTIONS; i++)
        if (job->given[i] && strcmp(g_options[i].name, name) == 0) return 1;
    return 0;
}

/* the default as --help shows it: the table's text, else the value a job
 * without options holds */
static void default_text(const option_row *o, const osdp_job *defaults, char *buf, size_t n)
{
    buf[0] = 0;
    const char *at = (const char *)defaults + o->field;
    if (o->default_text) snprintf(buf, n, "%s", o->default_text);
    else if (o->type == OPT_INT && o->choices && *(const long long *)at == o->word_value) snprintf(buf, n, "%s", o->choices);
    else if ((o->type == OPT_INT || o->type == OPT_SIZE) && (*(const long long *)at || o->default_value))
        snprintf(buf, n, "%lld", *(const long long *)at);
    else if (o->type == OPT_FLOAT && (*(const double *)at || o->default_value)) snprintf(buf, n, "%g", *(const double *)at);
    else if (o->type == OPT_ENUM && o->default_value) snprintf(buf, n, "%s", o->default_value);
    else if (o->type == OPT_TEXT && o->default_value)
        snprintf(buf, n, "%s%s", strncmp(o->default_value, "input:", 6) == 0 ? "input/" : "",
                 strncmp(o->default_value, "input:", 6) == 0 ? o->default_value + 6 : o->default_value);
}

void osdp_options_usage(osdp_command command, FILE *out)
{
    static const char *const synopsis[] = {
        [OSDP_CMD_TRAIN] = "usage: osdp_gpt train [options]        (under mpiexec / srun for N ranks)",
        [OSDP_CMD_PLAN] = "usage: osdp_gpt plan --model FILE --device FILE --ranks N [options]     (one process)",
        [OSDP_CMD_PROFILE] = "usage: mpiexec -n N osdp_gpt profile --model FILE --out FILE [options]     (N >= 2)\n"
                             "  measures alpha/beta (all-gather, reduce-scatter over the N ranks) and gamma per\n"
                             "  operator type (forward + backward of the model's operators), writes a device file",
    };
    osdp_job defaults;
    job_defaults(command, &defaults);
    fprintf(out, "%s\n", synopsis[command]);
    for (int i = 0; i < N_OPTIONS; i++) {
        const option_row *o = &g_options[i];
        if (!(o->commands & command)) continue;
        char head[64], range[160] = "", dflt[160];
        snprintf(head, sizeof head, "--%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        fprintf(out, "  %-22s", head);
        if (strlen(head) > 22) fprintf(out, "\n  %-22s", "");
        for (const char *p = o->help; *p; p++) {
            fputc(*p, out);
            if (*p == '\n') fprintf(out, "  %-22s", "");
        }
        fprintf(out, "\n");
        if (o->type == OPT_INT || o->type == OPT_SIZE || o->type == OPT_FLOAT) {
            char r[64];
            range_text(o, r, sizeof r);
            snprintf(range, sizeof range, "%s %s%s%s", o->type == OPT_FLOAT ? "a number in" : o->type == OPT_SIZE
                     ? "bytes in" : "an integer in", r, o->choices ? " or " : "", o->choices ? o->choices : "");
        }
        default_text(o, &defaults, dflt, sizeof dflt);
        const char *required = o->required & command ? "required" : NULL;
        if (range[0] || dflt[0] || required)
            fprintf(out, "  %-22s(%s%s%s%s)\n", "", range, range[0] && (dflt[0] || required) ? "; " : "",
                    required ? required : dflt[0] ? "default " : "", required ? "" : dflt);
    }
    fprintf(out, "  --help                this text (exit 0)\n");
}

osdp_status osdp_job_check_seq_len(const osdp_job *job, int ctx)
{
    if (job->seq_len > ctx)
        return osdp_error_set(OSDP_ERR_INPUT, "--seq-len %lld: above the model's ctx = %d (%s)", job->seq_len, ctx, job->model);
    return OSDP_OK;
}

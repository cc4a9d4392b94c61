/* osdp_gpt plan: the planner alone, one process, any N (DESIGN.md §4, §7). */
#include "config.h"
#include "osdp/app.h"
#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/layout.h"
#include "osdp/memory.h"
#include "osdp/plan.h"
#include "osdp/planner.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void plan_usage(FILE *out)
{
    fprintf(out,
        "usage: osdp_gpt plan --model FILE --device FILE --ranks N [options]     (one process)\n"
        "  --model FILE          model description (input/models/*.ini)\n"
        "  --device FILE         device information (input/devices/*.ini)\n"
        "  --ranks N             data-parallel ranks to plan for\n"
        "  --mem-limit BYTES     memory per rank (default: the device file's mem_limit)\n"
        "  --global-batch G      sequences per optimizer step: micro-batch b divides G/N, accumulation G/(N b)\n"
        "  --batch B             plan for this micro-batch only (default: the scheduler tries 1, 2, ...)\n"
        "  --max-batch B         the scheduler's largest micro-batch (default 256)\n"
        "  --seq-len T           tokens per sequence (default: the model's ctx)\n"
        "  --split G|auto        cut every operator into G slices: G+1 choices each (default 1;\n"
        "                        auto: k of any G in 1, 2, 4, 8, the planner chooses G per operator)\n"
        "  --recompute none|all|auto  activation recompute of attn and mlp operators (auto: the\n"
        "                        planner chooses per operator; default none)\n"
        "  --search exact|dfs    plan search (default exact; dfs: the paper's, 60 s budget)\n"
        "  --cost-model paper|overlap   step time: compute + comm (paper eq. 2), or\n"
        "                        per operator max(compute, comm) with prefetch (default paper)\n"
        "  --dfs-limit S         wall-clock budget of --search dfs for the whole run (default 60 s)\n"
        "  --no-prefetch         plan for a runtime without prefetch\n"
        "  --json                one JSON object on stdout instead of the tables\n"
        "  --out FILE            write the plan file (for osdp_gpt train --plan FILE)\n");
}

typedef struct plan_args {
    const char *model, *device, *out;
    int json, seq_len;
    int recompute;          /* --recompute: 0 none, 1 all (attn and mlp), 2 auto */
    osdp_planner_options o;
} plan_args;

static osdp_status parse_plan_args(int argc, char **argv, plan_args *a)
{
    memset(a, 0, sizeof *a);
    osdp_planner_defaults(&a->o);
    a->o.n_ranks = 0;
    enum { O_MODEL = 256, O_DEVICE, O_RANKS, O_MEM, O_GB, O_BATCH, O_MAXB, O_SEQ, O_SPLIT, O_SEARCH, O_COST,
           O_NOPF, O_JSON, O_OUT, O_HELP, O_DFSLIM, O_RECOMPUTE };
    static const struct option opts[] = {
        {"model", required_argument, 0, O_MODEL}, {"device", required_argument, 0, O_DEVICE},
        {"ranks", required_argument, 0, O_RANKS}, {"mem-limit", required_argument, 0, O_MEM},
        {"global-batch", required_argument, 0, O_GB}, {"batch", required_argument, 0, O_BATCH},
        {"max-batch", required_argument, 0, O_MAXB}, {"seq-len", required_argument, 0, O_SEQ},
        {"split", required_argument, 0, O_SPLIT}, {"search", required_argument, 0, O_SEARCH},
        {"cost-model", required_argument, 0, O_COST}, {"no-prefetch", no_argument, 0, O_NOPF},
        {"json", no_argument, 0, O_JSON}, {"out", required_argument, 0, O_OUT},
        {"dfs-limit", required_argument, 0, O_DFSLIM}, {"help", no_argument, 0, O_HELP},
        {"recompute", required_argument, 0, O_RECOMPUTE}, {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        char *end = NULL;
        long v = 0;
        if (c == O_SPLIT && strcmp(optarg, "auto") == 0) {
            a->o.split_auto = 1;
            continue;
        }
        if (c == O_RANKS || c == O_GB || c == O_BATCH || c == O_MAXB || c == O_SEQ || c == O_SPLIT) {
            v = strtol(optarg, &end, 10);
            long hi = c == O_SPLIT ? OSDP_MAX_SLICES : 1L << 30;
            if (end == optarg || *end || v < 1 || v > hi)
                return osdp_error_set(OSDP_ERR_INPUT, "%s '%s': expected an integer in [1, %ld]", name, optarg, hi);
        }
        switch (c) {
        case O_MODEL: a->model = optarg; break;
        case O_DEVICE: a->device = optarg; break;
        case O_RANKS: a->o.n_ranks = (int)v; break;
        case O_MEM: {
            size_t b;
            if (osdp_parse_bytes(optarg, &b) != 0 || b > (size_t)1 << 60)
                return osdp_error_set(OSDP_ERR_INPUT, "--mem-limit '%s': expected bytes such as 8G, 512M or 1000000", optarg);
            a->o.mem_limit = (long long)b;
            break;
        }
        case O_GB: a->o.global_batch = (int)v; break;
        case O_BATCH: a->o.micro_batch = (int)v; break;
        case O_MAXB: a->o.max_micro_batch = (int)v; break;
        case O_SEQ: a->seq_len = (int)v; break;
        case O_SPLIT: a->o.split = (int)v; break;
        case O_SEARCH:
            if (strcmp(optarg, "exact") == 0) a->o.search = OSDP_SEARCH_EXACT;
            else if (strcmp(optarg, "dfs") == 0) a->o.search = OSDP_SEARCH_DFS;
            else return osdp_error_set(OSDP_ERR_INPUT, "--search '%s': expected exact or dfs", optarg);
            break;
        case O_COST:
            if (strcmp(optarg, "paper") == 0) a->o.cost = OSDP_COST_PAPER;
            else if (strcmp(optarg, "overlap") == 0) a->o.cost = OSDP_COST_OVERLAP;
            else return osdp_error_set(OSDP_ERR_INPUT, "--cost-model '%s': expected paper or overlap", optarg);
            break;
        case O_NOPF: a->o.prefetch = 0; break;
        case O_RECOMPUTE:
            if (strcmp(optarg, "none") == 0) a->recompute = 0;
            else if (strcmp(optarg, "all") == 0) a->recompute = 1;
            else if (strcmp(optarg, "auto") == 0) a->recompute = 2;
            else return osdp_error_set(OSDP_ERR_INPUT, "--recompute '%s': expected none, all or auto", optarg);
            a->o.recompute_auto = a->recompute == 2;
            break;
        case O_DFSLIM: {
            double x = strtod(optarg, &end);
            if (end == optarg || *end || !(x > 0 && x <= 86400))
                return osdp_error_set(OSDP_ERR_INPUT, "--dfs-limit '%s': expected seconds in (0, 86400]", optarg);
            a->o.dfs_time_limit_s = x;
            break;
        }
        case O_JSON: a->json = 1; break;
        case O_OUT: a->out = optarg; break;
        case O_HELP: plan_usage(stdout); return OSDP_ERR_INTERNAL + 100;
        default:
            return osdp_error_set(OSDP_ERR_INPUT, "plan: unknown option or missing value: %s (see osdp_gpt plan --help)",
                                  argv[optind - 1]);
        }
    }
    if (optind < argc)
        return osdp_error_set(OSDP_ERR_INPUT, "plan: unexpected argument '%s' (see osdp_gpt plan --help)", argv[optind]);
    if (!a->model) return osdp_error_set(OSDP_ERR_INPUT, "plan: --model FILE is required");
    if (!a->device) return osdp_error_set(OSDP_ERR_INPUT, "plan: --device FILE is required");
    if (!a->o.n_ranks) return osdp_error_set(OSDP_ERR_INPUT, "plan: --ranks N is required");
    return OSDP_OK;
}

/* "dp", "zdp", "2/4", with "+rc" when the operator recomputes its activations */
static const char *mode_name(const osdp_plan *p, int op, char *buf, size_t n)
{
    char base[16];
    snprintf(buf, n, "%s%s", osdp_plan_mode_name(p, op, base, sizeof base), p->recompute[op] ? "+rc" : "");
    return buf;
}

static const char *mib(double bytes, char *buf, size_t n)
{
    snprintf(buf, n, "%.1f", bytes / (1024.0 * 1024.0));
    return buf;
}

static void print_table(const osdp_layout *L, const osdp_cost_model *cm_in, const osdp_planner_result *r)
{
    const osdp_plan *p = &r->plan;
    osdp_cost_model with_plan = *cm_in, *cm = &with_plan;   /* the plan's recompute flags */
    with_plan.recompute = p->recompute;
    int b = p->micro_batch, A = p->accum_steps;
    char m1[32], m2[32], m3[32], m4[32], mode[16];
    printf("  %-9s %-8s %12s %10s %10s %10s %10s %10s %10s %10s\n", "operator", "mode", "params", "state MiB",
           "weights", "acts MiB", "gathered", "comm ms", "compute ms", "T ms");
    osdp_op_mem tot = {0};
    osdp_op_time tt = {0};
    size_t params = 0;
    for (int i = 0; i < L->n_ops; i++) {
        osdp_op_mem m;
        osdp_op_time t;
        osdp_cost_op_mem(cm, i, p->slices[i], p->zdp_slices[i], b, &m);
        osdp_cost_op_time(cm, i, p->slices[i], p->zdp_slices[i], b, A, &t);
        printf("  %-9s %-8s %12zu %10s %10s %10s %10s %10.3f %10.3f %10.3f\n", L->op[i].name,
               mode_name(p, i, mode, sizeof mode), L->op[i].numel, mib((double)m.state, m1, sizeof m1),
               mib((double)m.resident, m2, sizeof m2), mib((double)m.acts, m3, sizeof m3),
               mib((double)m.work, m4, sizeof m4), 1e3 * t.comm, 1e3 * t.compute, 1e3 * t.total);
        tot.state += m.state;
        tot.resident += m.resident;
        tot.acts += m.acts;
        tt.comm += t.comm;
        tt.compute += t.compute;
        tt.total += t.total;
        params += L->op[i].numel;
    }
    printf("  %-9s %-8s %12zu %10s %10s %10s %10s %10.3f %10.3f %10.3f\n", "total", "", params,
           mib((double)tot.state, m1, sizeof m1), mib((double)tot.resident, m2, sizeof m2),
           mib((double)tot.acts, m3, sizeof m3), "", 1e3 * tt.comm, 1e3 * tt.compute, 1e3 * tt.total);
    printf("  (gathered: ZDP weights held while the operator computes; peak = workspace %s MiB + state + weights"
           " + the largest backward transient)\n", mib((double)osdp_cost_workspace(cm, b), m1, sizeof m1));
}

static void print_summary(const char *label, const osdp_layout *L, const osdp_planner_result *r, osdp_status s,
                          const char *err)
{
    char a[32], l[32];
    if (s != OSDP_OK) {
        printf("%-28s does not fit: %s\n", label, err);
        return;
    }
    int zdp = 0;
    for (int i = 0; i < L->n_ops; i++) zdp += r->plan.zdp_slices[i] > 0;
    printf("%-28s micro-batch %d x accum %d: step %.2f ms, %.2f samples/s (%.0f tokens/s), peak %s of %s "
           "(backward of %s)%s, %d of %d operators ZDP\n",
           label, r->plan.micro_batch, r->plan.accum_steps, 1e3 * r->step_s, r->samples_per_s,
           r->samples_per_s * L->T, osdp_format_bytes((double)r->peak_bytes, a, sizeof a),
           osdp_format_bytes((double)r->mem_limit, l, sizeof l), L->op[r->peak_op].name,
           r->runtime_peak >= 0 ? (r->runtime_peak == r->peak_bytes ? ", runtime check equal" : ", RUNTIME CHECK DIFFERS")
                                : "",
           zdp, L->n_ops);
}

void osdp_plan_print(const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o,
                     const osdp_planner_result *r)
{
    osdp_cost_model cm = {.layout = L, .dev = dev, .N = o->n_ranks, .prefetch = o->prefetch, .kind = o->cost};
    printf("osdp planner: device %s, %d ranks, limit %.3f GiB per rank; micro-batch %d, accumulation %d\n", dev->name,
           o->n_ranks, (double)r->mem_limit / (1024.0 * 1024.0 * 1024.0), r->plan.micro_batch, r->plan.accum_steps);
    print_table(L, &cm, r);
    print_summary("plan:", L, r, OSDP_OK, "");
    printf("search: %lld knapsacks over %d micro-batches in %.2f ms\n", r->searches, r->batches_tried, 1e3 * r->total_s);
    fflush(stdout);
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

static void json_result(const char *key, const osdp_layout *L, const osdp_cost_model *cm, const osdp_planner_result *r,
                        osdp_status s, const char *err, int ops)
{
    printf(",\"%s\":", key);
    if (s != OSDP_OK) {
        printf("{\"fits\":false,\"error\":");
        json_str(err);
        printf("}");
        return;
    }
    int zdp = 0;
    for (int i = 0; i < L->n_ops; i++) zdp += r->plan.zdp_slices[i] > 0;
    printf("{\"fits\":true,\"micro_batch\":%d,\"accum_steps\":%d,\"step_s\":%.9g,\"samples_per_s\":%.9g,"
           "\"tokens_per_s\":%.9g,\"peak_bytes\":%lld,\"runtime_peak_bytes\":%lld,\"peak_op\":\"%s\",\"mem_limit\":%lld,"
           "\"zdp_ops\":%d,\"batches_tried\":%d,\"searches\":%lld,\"nodes\":%lld,\"search_ms\":%.6g,\"planner_ms\":%.6g,"
           "\"timed_out\":%s,\"proven\":%s,\"tightened\":%d",
           r->plan.micro_batch, r->plan.accum_steps, r->step_s, r->samples_per_s, r->samples_per_s * L->T,
           r->peak_bytes, r->runtime_peak, L->op[r->peak_op].name, r->mem_limit, zdp, r->batches_tried, r->searches,
           r->nodes, 1e3 * r->search_s, 1e3 * r->total_s, r->timed_out ? "true" : "false",
           r->timed_out || r->gap > 0 ? "false" : "true", r->tightened);
    if (ops) {
        printf(",\"ops\":[");
        char mode[16];
        osdp_cost_model with_plan = *cm;   /* the plan's recompute flags */
        with_plan.recompute = r->plan.recompute;
        cm = &with_plan;
        for (int i = 0; i < L->n_ops; i++) {
            osdp_op_mem m;
            osdp_op_time t;
            osdp_cost_op_mem(cm, i, r->plan.slices[i], r->plan.zdp_slices[i], r->plan.micro_batch, &m);
            osdp_cost_op_time(cm, i, r->plan.slices[i], r->plan.zdp_slices[i], r->plan.micro_batch,
                              r->plan.accum_steps, &t);
            printf("%s{\"name\":\"%s\",\"mode\":\"%s\",\"params\":%zu,\"state_bytes\":%lld,\"weight_bytes\":%lld,"
                   "\"act_bytes\":%lld,\"gathered_bytes\":%lld,\"comm_s\":%.9g,\"compute_s\":%.9g,\"time_s\":%.9g}",
                   i ? "," : "", L->op[i].name, mode_name(&r->plan, i, mode, sizeof mode), L->op[i].numel,
                   m.state, m.resident, m.acts, m.work, t.comm, t.compute, t.total);
        }
        printf("]");
    }
    printf("}");
}

int osdp_cmd_plan(int argc, char **argv)
{
    plan_args a;
    osdp_status s = parse_plan_args(argc, argv, &a);
    if (s == OSDP_ERR_INTERNAL + 100) return 0;
    if (s != OSDP_OK) osdp_fatal(s, osdp_error_message());
    osdp_model_config cfg;
    osdp_device dev;
    osdp_layout L;
    if ((s = osdp_model_config_load(&cfg, a.model)) != OSDP_OK) osdp_fatal(s, osdp_error_message());
    if ((s = osdp_device_load(&dev, a.device)) != OSDP_OK) osdp_fatal(s, osdp_error_message());
    if ((s = osdp_layout_build(&L, &cfg, a.seq_len ? a.seq_len : cfg.ctx)) != OSDP_OK) osdp_fatal(s, osdp_error_message());

    int *recompute_all = NULL;
    if (a.recompute == 1) {   /* every attn and mlp operator */
        if (!(recompute_all = calloc((size_t)L.n_ops, sizeof *recompute_all))) osdp_fatal(OSDP_ERR_OOM, "plan: out of host memory");
        for (int i = 0; i < L.n_ops; i++)
            recompute_all[i] = L.op[i].type == OSDP_OP_ATTN || L.op[i].type == OSDP_OP_MLP;
        a.o.recompute = recompute_all;
    }
    osdp_planner_result r[3];
    osdp_status st[3];
    char err[3][2048];
    const osdp_mode_set sets[3] = {OSDP_MODES_ANY, OSDP_MODES_ALL_DP, OSDP_MODES_ALL_ZDP};
    for (int v = 0; v < 3; v++) {
        osdp_planner_options o = a.o;
        o.modes = sets[v];
        st[v] = osdp_planner_run(&L, &dev, &o, &r[v]);
        snprintf(err[v], sizeof err[v], "%s", st[v] == OSDP_OK ? "" : osdp_error_message());
        if (st[v] != OSDP_OK && st[v] != OSDP_ERR_INFEASIBLE) osdp_fatal(st[v], err[v]);
    }
    osdp_cost_model cm = {.layout = &L, .dev = &dev, .N = a.o.n_ranks, .prefetch = a.o.prefetch, .kind = a.o.cost};
    const char *search = a.o.search == OSDP_SEARCH_DFS ? "dfs" : "exact";
    const char *cost = a.o.cost == OSDP_COST_OVERLAP ? "overlap" : "paper";
    double sp_dp = st[0] == OSDP_OK && st[1] == OSDP_OK ? r[0].samples_per_s / r[1].samples_per_s : 0;
    double sp_zdp = st[0] == OSDP_OK && st[2] == OSDP_OK ? r[0].samples_per_s / r[2].samples_per_s : 0;
    if (a.json) {
        printf("{\"model\":");
        json_str(cfg.name);
        printf(",\"device\":");
        json_str(dev.name);
        printf(",\"ranks\":%d,\"params\":%zu,\"operators\":%d,\"T\":%d,", a.o.n_ranks, L.total_params, L.n_ops, L.T);
        if (a.o.split_auto) printf("\"split\":\"auto\",");
        else printf("\"split\":%d,\"choices_per_op\":%d,", a.o.split, a.o.split + 1);
        printf("\"recompute\":\"%s\",\"search\":\"%s\",\"cost_model\":\"%s\",\"prefetch\":%d,\"param_bytes\":%d,"
               "\"grad_bytes\":%d",
               a.recompute == 2 ? "auto" : a.recompute == 1 ? "all" : "none", search, cost, a.o.prefetch,
               dev.param_bytes, dev.grad_bytes);
        json_result("osdp", &L, &cm, &r[0], st[0], err[0], 1);
        json_result("all_dp", &L, &cm, &r[1], st[1], err[1], 0);
        json_result("all_zdp", &L, &cm, &r[2], st[2], err[2], 0);
        printf(",\"speedup_vs_all_dp\":%.6g,\"speedup_vs_all_zdp\":%.6g}\n", sp_dp, sp_zdp);
    } else {
        char l[32], split_s[16];
        if (a.o.split_auto) snprintf(split_s, sizeof split_s, "auto");
        else snprintf(split_s, sizeof split_s, "%d", a.o.split);
        printf("osdp plan | model %s: %d layers, width %d, vocab %d, T %d | %.3fM parameters in %d operators\n",
               cfg.name, cfg.n_layer, cfg.n_embd, cfg.vocab, L.T, (double)L.total_params / 1e6, L.n_ops);
        printf("device %s: %s per rank, %d-byte gathers, %d-byte reduce-scatters, all-gather alpha %.3g s beta %.3g s/B, reduce-scatter "
               "alpha %.3g s beta %.3g s/B | %d ranks, search %s, cost model %s, prefetch %s, split %s, recompute %s\n",
               dev.name, osdp_format_bytes((double)(a.o.mem_limit ? a.o.mem_limit : dev.mem_limit), l, sizeof l),
               dev.param_bytes, dev.grad_bytes, dev.all_gather.alpha, dev.all_gather.beta, dev.reduce_scatter.alpha,
               dev.reduce_scatter.beta, a.o.n_ranks, search, cost, a.o.prefetch ? "on" : "off", split_s,
               a.recompute == 2 ? "auto" : a.recompute == 1 ? "all" : "none");
        if (st[0] == OSDP_OK) {
            printf("\nOSDP plan (micro-batch %d, accumulation %d):\n", r[0].plan.micro_batch, r[0].plan.accum_steps);
            print_table(&L, &cm, &r[0]);
            printf("\nsearch: %lld knapsacks (%lld nodes, %lld more from the cache) over %d micro-batches: %.2f ms in the "
                   "solver, %.2f ms in all%s%s\n",
                   r[0].searches, r[0].nodes, r[0].cache_hits, r[0].batches_tried, 1e3 * r[0].search_s, 1e3 * r[0].total_s,
                   r[0].timed_out ? " — DFS TIMED OUT: the plan may not be optimal" : "",
                   r[0].gap > 0 ? " — NOT PROVEN OPTIMAL (too many activation sums, see osdp/planner.h)" : "");
        }
        printf("\n");
        print_summary("OSDP:", &L, &r[0], st[0], err[0]);
        print_summary("all-DP (ZeRO-2/DDP traffic):", &L, &r[1], st[1], err[1]);
        print_summary("all-ZDP (FSDP/ZeRO-3):", &L, &r[2], st[2], err[2]);
        if (sp_dp > 0) printf("OSDP predicted speedup over all-DP:  %.3fx\n", sp_dp);
        if (sp_zdp > 0) printf("OSDP predicted speedup over all-ZDP: %.3fx\n", sp_zdp);
    }
    int rc = 0;
    if (st[0] != OSDP_OK) {
        if (!a.json) fprintf(stderr, "osdp_gpt: error: %s\n", err[0]);
        rc = (int)st[0];
    } else if (a.out) {
        FILE *f = fopen(a.out, "w");
        if (!f) {
            fprintf(stderr, "osdp_gpt: error: cannot write the plan file %s\n", a.out);
            rc = OSDP_ERR_IO;
        } else {
            fprintf(f, "# planned by osdp_gpt plan for %d ranks on device %s: micro-batch %d, accumulation %d\n"
                       "# (train with --batch %d --global-batch %d); predicted step %.6g s, peak %lld bytes\n",
                    a.o.n_ranks, dev.name, r[0].plan.micro_batch, r[0].plan.accum_steps, r[0].plan.micro_batch,
                    r[0].plan.micro_batch * r[0].plan.accum_steps * a.o.n_ranks, r[0].step_s, r[0].peak_bytes);
            osdp_plan_write(&r[0].plan, &L, f);
            if (fclose(f) != 0) rc = OSDP_ERR_IO;
        }
    }
    for (int v = 0; v < 3; v++) osdp_planner_result_free(&r[v]);
    free(recompute_all);
    osdp_layout_free(&L);
    return rc;
}

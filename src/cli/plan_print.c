/* The planner's answers printed: the per-operator table, the summary
 * lines, and the JSON pieces that `plan` and `train --plan auto` share
 * (src/cli/plan_print.h). */
#include "config.h"
#include "cli/app.h"
#include "osdp/memory.h"
#include "plan_print.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *osdp_plan_mode_label(const osdp_plan *p, int op, char *buf, size_t n)
{
    char base[16], once[24] = "";
    const int j = osdp_plan_once_slices(p, op);   /* "+once": every slice, "+once2": its last 2 (osdp/plan.h) */
    if (j && j < p->slices[op]) snprintf(once, sizeof once, "+once%d", j);
    else if (j) snprintf(once, sizeof once, "+once");
    snprintf(buf, n, "%s%s%s", osdp_plan_mode_name(p, op, base, sizeof base), p->recompute[op] ? "+rc" : "", once);
    return buf;
}

int osdp_plan_hierarchical_ops(const osdp_plan *p, int lo, int hi)
{
    int hier = 0;
    for (int i = lo; i < hi; i++) hier += p->hierarchical[i] && p->zdp_slices[i] > 0;
    return hier;
}

const char *osdp_mib(double bytes, char *buf, size_t n)
{
    snprintf(buf, n, "%.1f", bytes / (1024.0 * 1024.0));
    return buf;
}

void osdp_plan_ops_table(const osdp_layout *L, const osdp_cost_model *cm_in, const osdp_planner_result *r)
{
    const osdp_plan *p = &r->plan;
    osdp_cost_model with_plan = *cm_in, *cm = &with_plan;   /* the plan's recompute flags */
    with_plan.recompute = p->recompute;
    with_plan.reduce_once = p->reduce_once;
    int b = p->geo.micro_batch, A = p->geo.accum_steps;
    char m1[32], m2[32], m3[32], m4[32], mode[24];
    const int tp = L->tp_size > 1;   /* the tensor-parallel collectives' column (tp 1: none) */
    printf("  %-9s %-8s %12s %10s %10s %10s %10s %10s %10s%s %10s\n", "operator", "mode", "params", "state MiB",
           "weights", "acts MiB", "gathered", "comm ms", "compute ms", tp ? "      TP ms" : "", "T ms");
    osdp_op_mem tot = {0};
    osdp_op_time tt = {0};
    size_t params = 0;
    for (int i = 0; i < L->n_ops; i++) {
        osdp_op_mem m;
        osdp_op_time t;
        osdp_cost_plan_op_mem(cm, p, i, b, &m);
        osdp_cost_plan_op_time(cm, p, i, b, A, &t);
        char tp_ms[16] = "";
        if (tp) snprintf(tp_ms, sizeof tp_ms, " %10.3f", 1e3 * t.tp_comm);
        printf("  %-9s %-8s %12zu %10s %10s %10s %10s %10.3f %10.3f%s %10.3f\n", L->op[i].name,
               osdp_plan_mode_label(p, i, mode, sizeof mode), L->op[i].numel, osdp_mib((double)m.state, m1, sizeof m1),
               osdp_mib((double)m.resident, m2, sizeof m2), osdp_mib((double)m.acts, m3, sizeof m3),
               osdp_mib((double)m.work, m4, sizeof m4), 1e3 * t.comm, 1e3 * t.compute, tp_ms, 1e3 * t.total);
        tot.state += m.state;
        tot.resident += m.resident;
        tot.acts += m.acts;
        tt.comm += t.comm;
        tt.compute += t.compute;
        tt.tp_comm += t.tp_comm;
        tt.total += t.total;
        params += L->op[i].numel;
    }
    char tp_ms[16] = "";
    if (tp) snprintf(tp_ms, sizeof tp_ms, " %10.3f", 1e3 * tt.tp_comm);
    printf("  %-9s %-8s %12zu %10s %10s %10s %10s %10.3f %10.3f%s %10.3f\n", "total", "", params,
           osdp_mib((double)tot.state, m1, sizeof m1), osdp_mib((double)tot.resident, m2, sizeof m2),
           osdp_mib((double)tot.acts, m3, sizeof m3), "", 1e3 * tt.comm, 1e3 * tt.compute, tp_ms, 1e3 * tt.total);
    if (tp)
        printf("  (params: one rank's tensor-parallel parts; TP ms: the tensor-parallel group's blocking all-reduces"
               " and gather, in T ms)\n");
    printf("  (gathered: ZDP weights held while the operator computes; peak = workspace %s MiB + state + weights"
           " + the largest backward transient)\n", osdp_mib((double)osdp_cost_workspace(cm, b), m1, sizeof m1));
}

void osdp_plan_print_summary(const char *label, const osdp_layout *L, const osdp_planner_result *r, osdp_status s,
                          const char *err)
{
    char a[32], l[32];
    if (s != OSDP_OK) {
        printf("%-28s does not fit: %s\n", label, err);
        return;
    }
    int zdp = 0;
    for (int i = 0; i < L->n_ops; i++) zdp += r->plan.zdp_slices[i] > 0;
    const int hier = osdp_plan_hierarchical_ops(&r->plan, 0, L->n_ops);
    char of_them[48] = "";   /* only where h was chosen: one-node outputs as before */
    if (hier) snprintf(of_them, sizeof of_them, " (%d of them h)", hier);
    printf("%-28s micro-batch %d x accum %d: step %.2f ms, %.2f samples/s (%.0f tokens/s), peak %s of %s "
           "(%s of %s)%s, %d of %d operators ZDP%s\n",
           label, r->plan.geo.micro_batch, r->plan.geo.accum_steps, 1e3 * r->step_s, r->samples_per_s,
           r->samples_per_s * L->T, osdp_format_bytes((double)r->peak_bytes, a, sizeof a),
           osdp_format_bytes((double)r->mem_limit, l, sizeof l), r->peak_forward ? "forward" : "backward",
           L->op[r->peak_op].name,
           r->runtime_peak >= 0 ? (r->runtime_peak == r->peak_bytes ? ", runtime check equal" : ", RUNTIME CHECK DIFFERS")
                                : "",
           zdp, L->n_ops, of_them);
}

void osdp_plan_print(const osdp_layout *L, const osdp_device *dev, const osdp_planner_options *o,
                     const osdp_planner_result *r)
{
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, L, dev, &o->geo, o->cost, NULL);
    char mesh[64] = "";
    if (L->tp_size > 1) snprintf(mesh, sizeof mesh, " (data-parallel; mesh TP %d x DP %d)", L->tp_size, o->geo.n_ranks);
    printf("osdp planner: device %s, %d ranks%s, limit %.3f GiB per rank; micro-batch %d, accumulation %d\n", dev->name,
           o->geo.n_ranks, mesh, (double)r->mem_limit / (1024.0 * 1024.0 * 1024.0), r->plan.geo.micro_batch, r->plan.geo.accum_steps);
    osdp_plan_ops_table(L, &cm, r);
    osdp_plan_print_summary("plan:", L, r, OSDP_OK, "");
    printf("search: %lld knapsacks over %d micro-batches in %.2f ms\n", r->searches, r->batches_tried, 1e3 * r->total_s);
    fflush(stdout);
}

void osdp_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

/* {"alpha":..,"beta":..} */
static void json_collective(const char *key, const osdp_collective_cost *c)
{
    printf("\"%s\":{\"alpha\":%.9g,\"beta\":%.9g}", key, c->alpha, c->beta);
}

void osdp_plan_json_network(const osdp_device *dev, int n_ranks, int tp, int dp, int pp, const osdp_cost_hierarchy *hier)
{
    const int R = dev->ranks_per_node;
    printf(",\"network\":{\"two_level\":%s", dev->internode.given ? "true" : "false");
    if (R > 0) printf(",\"ranks_per_node\":%d,\"nodes\":%d", R, (n_ranks + R - 1) / R);
    else printf(",\"ranks_per_node\":null,\"nodes\":null");
    if (tp > 0)
        printf(",\"data_groups_span_nodes\":%s,\"tensor_groups_span_nodes\":%s,\"pipeline_spans_nodes\":%s",
               osdp_cost_dp_spans_nodes(R, tp, dp, pp) ? "true" : "false", osdp_cost_tp_spans_nodes(R, tp) ? "true" : "false",
               osdp_cost_pp_spans_nodes(R, tp, dp, pp) ? "true" : "false");
    printf(",\"hierarchical_offered\":%s", hier ? "true" : "false");
    if (hier) printf(",\"hierarchical_node_ranks\":%d", hier->node_ranks);
    else printf(",\"hierarchical_node_ranks\":null");
    printf(",\"internode\":");
    if (dev->internode.given) {
        printf("{");
        json_collective("all_gather", &dev->internode.all_gather);
        printf(",");
        json_collective("reduce_scatter", &dev->internode.reduce_scatter);
        printf(",");
        json_collective("p2p", &dev->internode.p2p);
        printf("}");
    } else {
        printf("null");
    }
    printf("}");
}

void osdp_plan_file_comment(FILE *f, const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!text) {   /* no room to break it: as given (a plan file's comments only) */
        vfprintf(f, fmt, again);
        va_end(again);
        return;
    }
    vsnprintf(text, (size_t)n + 1, fmt, again);
    va_end(again);
    static const char more[] = "#   ";
    for (const char *line = text; *line;) {
        size_t len = strcspn(line, "\n");
        const char *prefix = "";
        while (strlen(prefix) + len > OSDP_PLAN_LINE_MAX) {
            const size_t room = OSDP_PLAN_LINE_MAX - strlen(prefix);
            size_t cut = room;   /* after a comma, or before a space; else where the room ends */
            while (cut > 0 && line[cut - 1] != ',' && line[cut] != ' ') cut--;
            if (cut == 0) cut = room;
            fprintf(f, "%s%.*s\n", prefix, (int)cut, line);
            line += cut;
            len -= cut;
            while (*line == ' ') line++, len--;
            prefix = more;
        }
        fprintf(f, "%s%.*s\n", prefix, (int)len, line);
        line += len;
        if (*line == '\n') line++;
    }
    free(text);
}

const char *osdp_plan_train_extra_options(const osdp_job *job, int ctx, char *buf, size_t n)
{
    char seq[40] = "";
    if (job->seq_len > 0 && job->seq_len != ctx) snprintf(seq, sizeof seq, " --seq-len %lld", job->seq_len);
    snprintf(buf, n, "%s%s%s%s%s%s", seq, job->attention == OSDP_KERNEL_NAIVE ? " --attention naive" : "",
             job->head == OSDP_KERNEL_NAIVE ? " --head naive" : "", job->no_prefetch ? " --no-prefetch" : "",
             job->residual_dtype == OSDP_RESIDUAL_BF16 ? " --residual-dtype bf16" : "",
             job->activation_dtype == OSDP_RESIDUAL_BF16 ? " --activation-dtype bf16" : "");
    return buf;
}

void osdp_plan_file_train_line(FILE *f, const char *opts, const char *split, int n_ranges)
{
    if (strlen(opts) + strlen(split) < 160) {
        fprintf(f, "# (train with %s --stages %s)\n", opts, split);
        return;
    }
    osdp_plan_file_comment(f, "# (train with %s --stages S, S the %d ranges below joined)\n", opts, n_ranges);
    for (size_t at = 0, n = strlen(split); at < n;) {
        size_t take = n - at > 150 ? 150 : n - at;
        while (at + take < n && split[at + take - 1] != ',') take--;   /* whole ranges per line */
        fprintf(f, "#   %.*s\n", (int)take, split + at);
        at += take;
    }
}

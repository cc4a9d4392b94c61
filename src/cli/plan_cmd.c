/* osdp_gpt plan: the planner alone, one process, any N (DESIGN.md §4, §7). */
#include "config.h"
#include "cli/app.h"
#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/layout.h"
#include "osdp/link_emulation.h"
#include "osdp/memory.h"
#include "osdp/plan.h"
#include "osdp/planner.h"
#include "options.h"
#include "plan_cmd.h"
#include "plan_inputs.h"
#include "plan_print.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void json_result(const char *key, const osdp_layout *L, const osdp_cost_model *cm, const osdp_planner_result *r,
                        osdp_status s, const char *err, int ops)
{
    printf(",\"%s\":", key);
    if (s != OSDP_OK) {
        printf("{\"fits\":false,\"error\":");
        osdp_json_string(err);
        printf("}");
        return;
    }
    int zdp = 0;
    for (int i = 0; i < L->n_ops; i++) zdp += r->plan.zdp_slices[i] > 0;
    printf("{\"fits\":true,\"hierarchical_ops\":%d,", osdp_plan_hierarchical_ops(&r->plan, 0, L->n_ops));
    printf("\"micro_batch\":%d,\"accum_steps\":%d,\"step_s\":%.9g,\"samples_per_s\":%.9g,"
           "\"tokens_per_s\":%.9g,\"peak_bytes\":%lld,\"runtime_peak_bytes\":%lld,\"peak_op\":\"%s\",\"mem_limit\":%lld,"
           "\"zdp_ops\":%d,\"batches_tried\":%d,\"searches\":%lld,\"nodes\":%lld,\"search_ms\":%.6g,\"planner_ms\":%.6g,"
           "\"timed_out\":%s,\"proven\":%s,\"tightened\":%d",
           r->plan.geo.micro_batch, r->plan.geo.accum_steps, r->step_s, r->samples_per_s, r->samples_per_s * L->T,
           r->peak_bytes, r->runtime_peak, L->op[r->peak_op].name, r->mem_limit, zdp, r->batches_tried, r->searches,
           r->nodes, 1e3 * r->search_s, 1e3 * r->total_s, r->timed_out ? "true" : "false",
           r->timed_out || r->gap > 0 ? "false" : "true", r->tightened);
    if (ops) {
        printf(",\"ops\":[");
        char mode[24];
        osdp_cost_model with_plan = *cm;   /* the plan's recompute flags */
        with_plan.recompute = r->plan.recompute;
        with_plan.reduce_once = r->plan.reduce_once;
        cm = &with_plan;
        for (int i = 0; i < L->n_ops; i++) {
            osdp_op_mem m;
            osdp_op_time t;
            osdp_cost_plan_op_mem(cm, &r->plan, i, r->plan.geo.micro_batch, &m);   /* h at its levels */
            osdp_cost_plan_op_time(cm, &r->plan, i, r->plan.geo.micro_batch, r->plan.geo.accum_steps, &t);
            printf("%s{\"name\":\"%s\",\"mode\":\"%s\",\"hierarchical\":%s,\"params\":%zu,\"state_bytes\":%lld,"
                   "\"weight_bytes\":%lld,\"act_bytes\":%lld,\"gathered_bytes\":%lld,\"comm_s\":%.9g,\"compute_s\":%.9g,"
                   "\"time_s\":%.9g}",
                   i ? "," : "", L->op[i].name, osdp_plan_mode_label(&r->plan, i, mode, sizeof mode),
                   osdp_plan_hierarchical_ops(&r->plan, i, i + 1) ? "true" : "false", L->op[i].numel,
                   m.state, m.resident, m.acts, m.work, t.comm, t.compute, t.total);
        }
        printf("]");
    }
    printf("}");
}

/* the mesh's lines (--tp): the chosen T and, for --tp auto, every candidate */
static void print_mesh(const osdp_mesh_choice *mesh, int is_auto, int n_ranks, int tp, const osdp_device *dev)
{
    char node[64];
    if (dev->ranks_per_node > 0) snprintf(node, sizeof node, "%d ranks", dev->ranks_per_node);
    else snprintf(node, sizeof node, "not stated");
    printf("mesh: %d ranks = TP %d x DP %d (tensor-parallel degree %s; node size %s)\n", n_ranks, tp, n_ranks / tp,
           is_auto ? "chosen by --tp auto" : "--tp", node);
    if (!is_auto) return;
    char pk[32];
    printf("  %5s %5s %12s %6s %12s %12s %12s\n", "TP", "DP", "micro-batch", "accum", "step ms", "samples/s", "peak MiB");
    for (int c = 0; c < mesh->n_candidates; c++) {
        const osdp_tp_candidate *k = &mesh->cand[c];
        if (k->excluded[0]) printf("  %5d %5d  excluded: %s\n", k->geo.tp_size, k->geo.n_ranks, k->excluded);
        else if (k->status != OSDP_OK) printf("  %5d %5d  no plan fits the memory limit\n", k->geo.tp_size, k->geo.n_ranks);
        else
            printf("  %5d %5d %12d %6d %12.3f %12.3f %12s%s\n", k->geo.tp_size, k->geo.n_ranks, k->geo.micro_batch, k->geo.accum_steps,
                   1e3 * k->step_s, k->samples_per_s, osdp_mib((double)k->peak_bytes, pk, sizeof pk),
                   c == mesh->best ? "   <- chosen: highest samples/s" : "");
    }
}

/* "mesh":{...}, with the candidates of --tp auto */
static void json_mesh(const osdp_mesh_choice *mesh, int is_auto, int n_ranks, int tp, const osdp_device *dev)
{
    printf("\"mesh\":{\"ranks\":%d,\"tp\":%d,\"dp\":%d,\"ranks_per_node\":%d,\"tp_auto\":%s", n_ranks, tp, n_ranks / tp,
           dev->ranks_per_node, is_auto ? "true" : "false");
    if (is_auto) {
        printf(",\"candidates\":[");
        for (int c = 0; c < mesh->n_candidates; c++) {
            const osdp_tp_candidate *k = &mesh->cand[c];
            printf("%s{\"tp\":%d,\"dp\":%d", c ? "," : "", k->geo.tp_size, k->geo.n_ranks);
            if (k->excluded[0]) {
                printf(",\"excluded\":");
                osdp_json_string(k->excluded);
            } else if (k->status != OSDP_OK) {
                printf(",\"fits\":false");
            } else {
                printf(",\"fits\":true,\"micro_batch\":%d,\"accum_steps\":%d,\"step_s\":%.9g,\"samples_per_s\":%.9g,"
                       "\"peak_bytes\":%lld,\"chosen\":%s", k->geo.micro_batch, k->geo.accum_steps, k->step_s, k->samples_per_s,
                       k->peak_bytes, c == mesh->best ? "true" : "false");
            }
            printf("}");
        }
        printf("]");
    }
    printf("},");
}

/* "alpha A s beta B s/B", with "call C s, " before it when the figure has a per-call term */
static const char *format_collective(const osdp_collective_cost *c, char *buf, size_t n)
{
    char call[48] = "";
    if (c->call > 0) snprintf(call, sizeof call, "call %.3g s, ", c->call);
    snprintf(buf, n, "%salpha %.3g s beta %.3g s/B", call, c->alpha, c->beta);
    return buf;
}

/* "network: ..." — which level prices the data-parallel group's all-gather and reduce-scatter (a device
 * with two levels), and whether plan mode h is offered (hier) */
static void print_network(const osdp_device *dev, int n_ranks, int tp, int dp, const osdp_cost_hierarchy *hier,
                          int withheld)
{
    const int spans = osdp_cost_dp_spans_nodes(dev->ranks_per_node, tp, dp, 1);
    const osdp_collective_cost *ag = spans ? &dev->internode.all_gather : &dev->all_gather;
    const osdp_collective_cost *rs = spans ? &dev->internode.reduce_scatter : &dev->reduce_scatter;
    char h[128] = "", ag_text[96], rs_text[96];
    if (hier) snprintf(h, sizeof h, "; plan mode h offered (sharded over a group's %d ranks on each node)", hier->node_ranks);
    else if (spans) snprintf(h, sizeof h, "; plan mode h not offered (%s)", withheld ? "--no-hierarchical"
                             : "the nodes do not hold equal parts of every data-parallel group");
    printf("network: %d ranks on nodes of %d; the data-parallel groups (TP %d x DP %d) %s: all-gather %s, "
           "reduce-scatter %s%s\n",
           n_ranks, dev->ranks_per_node, tp, dp, spans ? "span nodes, priced at the inter-node figures"
                                                       : "sit inside a node, priced at the in-node figures",
           format_collective(ag, ag_text, sizeof ag_text), format_collective(rs, rs_text, sizeof rs_text), h);
}

int osdp_cmd_plan(const osdp_job *job)
{
    if (job->pp == OSDP_PP_AUTO) return osdp_cmd_plan_3d(job);
    if (job->pp > 1) return osdp_cmd_plan_pipeline(job);
    if (osdp_option_given(job, "stages") || osdp_option_given(job, "schedule") || osdp_option_given(job, "virtual-stages"))
        osdp_fatal(OSDP_ERR_INPUT, osdp_option_given(job, "stages") ? "--stages needs a pipeline: --pp P with P > 1"
                                   : osdp_option_given(job, "schedule") ? "--schedule needs a pipeline: --pp P with P > 1"
                                   : "--virtual-stages needs a pipeline: --pp P with P > 1 and --schedule interleaved");
    osdp_planner_options planner;
    osdp_status s;
    osdp_model_config cfg;
    osdp_device dev;
    osdp_layout L;
    osdp_plan_load_inputs(job, &planner, &cfg, &dev);
    const int seq_len = job->seq_len ? (int)job->seq_len : cfg.ctx, n_ranks = planner.geo.n_ranks;
    const osdp_device as_given = dev;   /* both levels, for the network line */
    if ((s = osdp_layout_build(&L, &cfg, seq_len)) != OSDP_OK) osdp_fatal(s, osdp_error_message());

    int *recompute_all = NULL;
    if (job->recompute == OSDP_RECOMPUTE_ALL) {   /* every attn and mlp operator */
        if (!(recompute_all = calloc((size_t)L.n_ops, sizeof *recompute_all))) osdp_fatal(OSDP_ERR_OOM, "plan: out of host memory");
        for (int i = 0; i < L.n_ops; i++)
            recompute_all[i] = osdp_op_can_recompute(L.op[i].type);
        planner.recompute = recompute_all;
    }
    /* --tp: the mesh N = T x D; the planner then plans one rank's parts over D */
    osdp_mesh_choice mesh;
    memset(&mesh, 0, sizeof mesh);
    int tp = 1;
    const int tp_given = osdp_option_given(job, "tp");   /* not given: the planner as before, tp 1 */
    if (tp_given) {
        s = osdp_planner_mesh(&cfg, seq_len, &dev, &planner, (int)job->tp, &mesh);
        if (s != OSDP_OK && s != OSDP_ERR_INFEASIBLE) osdp_fatal(s, osdp_error_message());
        tp = mesh.best >= 0 ? mesh.cand[mesh.best].geo.tp_size : job->tp == OSDP_TP_AUTO ? 1 : (int)job->tp;
        const int chosen = mesh.best;
        osdp_mesh_choice_free(&mesh);   /* its candidates stay, for the table */
        mesh.best = chosen;
        if (tp > 1) {
            osdp_layout_free(&L);
            if ((s = osdp_layout_build_tp(&L, &cfg, seq_len, tp, planner.vocab_quantum)) != OSDP_OK)
                osdp_fatal(s, osdp_error_message());
        }
        planner.geo.n_ranks = n_ranks / tp;
    }
    osdp_cost_hierarchy hier;   /* two levels whose data group spans nodes: mode h offered (not --no-hierarchical) */
    planner.hierarchy = osdp_planner_hierarchy(&planner, &dev, tp, planner.geo.n_ranks, 1, &hier);
    osdp_cost_device_for_mesh(&dev, tp, planner.geo.n_ranks, 1, &dev);   /* the data-parallel group's level */
    osdp_planner_result r[3];
    osdp_status st[3];
    char err[3][2048];
    const osdp_mode_set sets[3] = {OSDP_MODES_ANY, OSDP_MODES_ALL_DP, OSDP_MODES_ALL_ZDP};
    for (int v = 0; v < 3; v++) {
        osdp_planner_options o = planner;
        o.modes = sets[v];
        /* the baselines are what `train --plan dp|zdp` runs: with --grad-reduce auto, every micro-batch */
        if (v > 0 && o.grad_reduce == OSDP_GRAD_REDUCE_AUTO) o.grad_reduce = OSDP_GRAD_REDUCE_EVERY;
        st[v] = osdp_planner_run(&L, &dev, &o, &r[v]);
        snprintf(err[v], sizeof err[v], "%s", st[v] == OSDP_OK ? "" : osdp_error_message());
        if (st[v] != OSDP_OK && st[v] != OSDP_ERR_INFEASIBLE) osdp_fatal(st[v], err[v]);
    }
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, &L, &dev, &planner.geo, planner.cost, planner.hierarchy);
    const char *search = planner.search == OSDP_SEARCH_DFS ? "dfs" : "exact";
    const char *cost = planner.cost == OSDP_COST_OVERLAP ? "overlap" : "paper";
    double sp_dp = st[0] == OSDP_OK && st[1] == OSDP_OK ? r[0].samples_per_s / r[1].samples_per_s : 0;
    double sp_zdp = st[0] == OSDP_OK && st[2] == OSDP_OK ? r[0].samples_per_s / r[2].samples_per_s : 0;
    if (job->json) {
        printf("{\"model\":");
        osdp_json_string(cfg.name);
        printf(",\"device\":");
        osdp_json_string(dev.name);
        printf(",\"ranks\":%d,\"params\":%zu,\"operators\":%d,\"T\":%d,", n_ranks, L.total_params, L.n_ops, L.T);
        json_mesh(&mesh, job->tp == OSDP_TP_AUTO, n_ranks, tp, &dev);
        if (planner.split_auto) printf("\"split\":\"auto\",");
        else printf("\"split\":%d,\"choices_per_op\":%d,", planner.split, planner.split + 1);
        printf("\"recompute\":\"%s\",\"search\":\"%s\",\"cost_model\":\"%s\",\"prefetch\":%d,\"param_bytes\":%d,"
               "\"grad_bytes\":%d,\"residual_dtype\":\"%s\",\"activation_dtype\":\"%s\"",
               osdp_option_word("recompute", job->recompute), search, cost, planner.geo.prefetch,
               dev.param_bytes, dev.grad_bytes, osdp_dtype_name(planner.geo.residual_dtype),
               cfg.act_bf16 ? "bf16" : "fp32");
        osdp_plan_json_network(&as_given, n_ranks, tp, planner.geo.n_ranks, 1, planner.hierarchy);
        json_result("osdp", &L, &cm, &r[0], st[0], err[0], 1);
        json_result("all_dp", &L, &cm, &r[1], st[1], err[1], 0);
        json_result("all_zdp", &L, &cm, &r[2], st[2], err[2], 0);
        printf(",\"speedup_vs_all_dp\":%.6g,\"speedup_vs_all_zdp\":%.6g}\n", sp_dp, sp_zdp);
    } else {
        char l[32], split_s[16];
        if (planner.split_auto) snprintf(split_s, sizeof split_s, "auto");
        else snprintf(split_s, sizeof split_s, "%d", planner.split);
        printf("osdp plan | model %s: %d layers, width %d, vocab %d, T %d | %.3fM parameters in %d operators\n",
               cfg.name, cfg.n_layer, cfg.n_embd, cfg.vocab, L.T, (double)L.total_params / 1e6, L.n_ops);
        printf("device %s: %s per rank, %d-byte gathers, %d-byte reduce-scatters, all-gather alpha %.3g s beta %.3g s/B, reduce-scatter "
               "alpha %.3g s beta %.3g s/B | %d ranks, search %s, cost model %s, prefetch %s, split %s, recompute %s\n",
               dev.name, osdp_format_bytes((double)(planner.mem_limit ? planner.mem_limit : dev.mem_limit), l, sizeof l),
               dev.param_bytes, dev.grad_bytes, as_given.all_gather.alpha, as_given.all_gather.beta,
               as_given.reduce_scatter.alpha, as_given.reduce_scatter.beta, n_ranks, search, cost, planner.geo.prefetch ? "on" : "off", split_s,
               osdp_option_word("recompute", job->recompute));
        if (planner.geo.residual_dtype == OSDP_BFLOAT16)
            printf("residual stream bf16: a recomputed operator keeps its output in 2 bytes an element\n");
        if (cfg.act_bf16)
            printf("activations bf16: ln, qkv, heads, fc and gelu saved in 2 bytes an element\n");
        if (tp_given) print_mesh(&mesh, job->tp == OSDP_TP_AUTO, n_ranks, tp, &dev);
        if (as_given.internode.given)
            print_network(&as_given, n_ranks, tp, planner.geo.n_ranks, planner.hierarchy, job->no_hierarchical);
        if (st[0] == OSDP_OK) {
            printf("\nOSDP plan (micro-batch %d, accumulation %d):\n", r[0].plan.geo.micro_batch, r[0].plan.geo.accum_steps);
            osdp_plan_ops_table(&L, &cm, &r[0]);
            printf("\nsearch: %lld knapsacks (%lld nodes, %lld more from the cache) over %d micro-batches: %.2f ms in the "
                   "solver, %.2f ms in all%s%s\n",
                   r[0].searches, r[0].nodes, r[0].cache_hits, r[0].batches_tried, 1e3 * r[0].search_s, 1e3 * r[0].total_s,
                   r[0].timed_out ? " — DFS TIMED OUT: the plan may not be optimal" : "",
                   r[0].gap > 0 ? " — NOT PROVEN OPTIMAL (too many activation sums, see osdp/planner.h)" : "");
        }
        printf("\n");
        osdp_plan_print_summary("OSDP:", &L, &r[0], st[0], err[0]);
        osdp_plan_print_summary("all-DP (ZeRO-2/DDP traffic):", &L, &r[1], st[1], err[1]);
        osdp_plan_print_summary("all-ZDP (FSDP/ZeRO-3):", &L, &r[2], st[2], err[2]);
        if (sp_dp > 0) printf("OSDP predicted speedup over all-DP:  %.3fx\n", sp_dp);
        if (sp_zdp > 0) printf("OSDP predicted speedup over all-ZDP: %.3fx\n", sp_zdp);
    }
    int rc = 0;
    if (st[0] != OSDP_OK) {
        if (!job->json) fprintf(stderr, "osdp_gpt: error: %s\n", err[0]);
        rc = (int)st[0];
    } else if (job->out) {
        FILE *f = fopen(job->out, "w");
        if (!f) {
            fprintf(stderr, "osdp_gpt: error: cannot write the plan file %s\n", job->out);
            rc = OSDP_ERR_IO;
        } else {
            char tp_arg[32] = "", extra[160];
            if (tp_given) snprintf(tp_arg, sizeof tp_arg, " --tp %d", tp);
            osdp_plan_file_comment(f, "# planned by osdp_gpt plan for %d ranks (TP %d x DP %d) on device %s: micro-batch "
                                   "%d, accumulation %d\n# (train with --batch %d --global-batch %d%s%s); predicted step "
                                   "%.6g s, peak %lld bytes\n",
                                   n_ranks, tp, planner.geo.n_ranks, dev.name, r[0].plan.geo.micro_batch,
                                   r[0].plan.geo.accum_steps, r[0].plan.geo.micro_batch,
                                   r[0].plan.geo.micro_batch * r[0].plan.geo.accum_steps * planner.geo.n_ranks, tp_arg,
                                   osdp_plan_train_extra_options(job, cfg.ctx, extra, sizeof extra), r[0].step_s,
                                   r[0].peak_bytes);
            r[0].plan.geo.tp_size = tp;   /* the plan states its mesh, tp = 1 too: train --tp 2 refuses it then */
            osdp_plan_write(&r[0].plan, &L, f);
            if (fclose(f) != 0) rc = OSDP_ERR_IO;
        }
    }
    for (int v = 0; v < 3; v++) osdp_planner_result_free(&r[v]);
    free(recompute_all);
    osdp_layout_free(&L);
    return rc;
}

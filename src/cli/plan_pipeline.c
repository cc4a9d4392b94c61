/* osdp_gpt plan --pp P: the pipeline's planner alone (osdp_planner_pipeline):
 * per stage its operators, in-flight micro-batches, time and memory (the
 * cost model's and the runtime stage schedule's peak), the step, the bubble
 * (closed form and simulated), the p2p bytes, the memory bottleneck; beside
 * it the same pipeline with every operator DP and every operator ZDP. */
#include "config.h"
#include "cli/app.h"
#include "osdp/memory.h"
#include "osdp/pipeline_cost.h"
#include "osdp/pipeline_interleave.h"
#include "plan_cmd.h"
#include "plan_inputs.h"
#include "plan_print.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ZDP operators of stage s */
static int stage_zdp_ops(const osdp_pipe_choice *c, int s)
{
    int zdp = 0;
    for (int i = c->stage[s].lo; i < c->stage[s].hi; i++) zdp += c->plan.zdp_slices[i] > 0;
    return zdp;
}


/* p2p bytes per step over the whole mesh: every rank of a stage sends its piece (equal ones: t divides d) */
static long long mesh_p2p_bytes(const osdp_pipe_choice *c)
{
    long long bytes = 0;
    for (int s = 0; s < c->geo.pp_size; s++) bytes += c->stage[s].p2p_bytes;
    return bytes * c->geo.n_ranks * c->geo.tp_size;
}

/* the stage's cost model: its operators alone, its in-flight micro-batches and message buffers */
static osdp_cost_model stage_cost_model(const osdp_pipe_choice *c, int s, const osdp_device *dev,
                                        const osdp_planner_options *o, osdp_layout *sub)
{
    *sub = osdp_pipe_stage_layout(&c->layout, c->stage[s].lo, c->stage[s].hi);
    osdp_cost_model cm;
    osdp_pipe_choice_cost_model(&cm, c, dev, o, sub);
    cm.in_flight = c->stage[s].in_flight;
    cm.stage_buffer_bytes = osdp_pipe_stage_buffer_bytes(&c->layout, c->geo.stage_bounds, s, c->geo.micro_batch,
                                                         c->stage[s].in_flight);
    return cm;
}

static void print_text(const osdp_model_config *cfg, const osdp_device *dev, const osdp_planner_options *o,
                       const osdp_job *job, const osdp_pipe_choice *c, const osdp_pipe_choice *base, const osdp_status *bst)
{
    char a[32], b[32], split[OSDP_STAGE_SPLIT_CHARS];
    const int P = c->geo.pp_size;
    const osdp_layout *L = &c->layout;
    printf("osdp plan | model %s: %d layers, width %d, vocab %d, T %d | %.3fM parameters in %d operators\n", cfg->name,
           cfg->n_layer, cfg->n_embd, cfg->vocab, L->T, (double)L->total_params / 1e6, L->n_ops);
    printf("device %s: %s per rank, p2p alpha %.3g s beta %.3g s/B | search %s, cost model %s, prefetch %s\n", dev->name,
           osdp_format_bytes((double)(o->mem_limit ? o->mem_limit : dev->mem_limit), a, sizeof a), dev->p2p.alpha,
           dev->p2p.beta, o->search == OSDP_SEARCH_DFS ? "dfs" : "exact", o->cost == OSDP_COST_OVERLAP ? "overlap" : "paper",
           o->geo.prefetch ? "on" : "off");
    printf("mesh: %lld ranks = PP %d x DP %d x TP %d; schedule %s; stages %s (%s)\n", job->ranks, P, c->geo.n_ranks,
           c->geo.tp_size, osdp_pipe_schedule_name(c->geo.pipe_schedule),
           osdp_stage_split_format(c->geo.stage_bounds, P, split, sizeof split),
           c->bounds_given ? "--stages" : "balanced by the cost model's all-DP operator times");
    printf("pipeline: micro-batch %d x %d micro-batches per step: step %.3f ms, %.2f samples/s (%.0f tokens/s)\n",
           c->geo.micro_batch, c->geo.accum_steps, 1e3 * c->step_s, c->samples_per_s, c->samples_per_s * L->T);
    printf("bubble: closed form (P-1)/(M+P-1) = %.4f; simulated idle fraction %.4f (the stages' pass orders with their "
           "times and messages)\n", c->timing.bubble_closed, c->timing.idle_fraction);
    printf("p2p: %s per step over the mesh (each rank of a stage sends its micro-batches' activations forward%s and "
           "gradients back%s; per rank in the table)\n", osdp_format_bytes((double)mesh_p2p_bytes(c), a, sizeof a),
           c->geo.residual_dtype == OSDP_BFLOAT16 ? " in bf16" : "",
           c->geo.tp_size > 1 ? ", its 1/T piece of each, gathered by the receiving tensor group" : "");
    printf("\n  %-5s %-9s %-22s %9s %9s %9s %9s %9s %11s %11s %5s %7s %9s\n", "stage", "ops", "operators", "in-flight",
           "busy ms", "fwd ms", "bwd ms", "ends ms", "peak MiB", "sched MiB", "=", "ZDP", "p2p MiB");
    for (int s = 0; s < P; s++) {
        const osdp_stage_plan *st = &c->stage[s];
        char range[24], names[80], pk[32], sp[32], pp[32];
        snprintf(range, sizeof range, "%d:%d", st->lo, st->hi);
        snprintf(names, sizeof names, "%s..%s", L->op[st->lo].name, L->op[st->hi - 1].name);
        printf("  %-5d %-9s %-22s %9d %9.3f %9.3f %9.3f %9.3f %11s %11s %5s %3d/%-3d %9s%s\n", s, range, names,
               st->in_flight, 1e3 * st->busy_s, 1e3 * st->pass.forward_s, 1e3 * st->pass.backward_s,
               1e3 * c->timing.end_s[s], osdp_mib((double)st->peak_bytes, pk, sizeof pk),
               st->schedule_peak >= 0 ? osdp_mib((double)st->schedule_peak, sp, sizeof sp) : "-",
               st->schedule_peak < 0 ? "" : st->schedule_peak == st->peak_bytes ? "yes" : "NO", stage_zdp_ops(c, s),
               st->hi - st->lo, osdp_mib((double)st->p2p_bytes, pp, sizeof pp),
               st->result.gap > 0 ? "  (not proven optimal: too many activation sums, osdp/planner.h)" : "");
    }
    const osdp_stage_plan *bn = &c->stage[c->memory_bottleneck];
    printf("memory bottleneck: stage %d (%s .. %s), peak %s of %s per rank; slowest stage: %d\n", c->memory_bottleneck,
           L->op[bn->lo].name, L->op[bn->hi - 1].name,
           osdp_format_bytes((double)(bn->schedule_peak >= 0 ? bn->schedule_peak : bn->peak_bytes), a, sizeof a),
           osdp_format_bytes((double)bn->result.mem_limit, b, sizeof b), c->timing.slowest_stage);
    printf("(busy: the stage's operators' T_i, M x (fwd + bwd) + the step's once-only work (its DP gathers before the "
           "first forward, reduce-once reductions in the last backward); ends: when its last pass ends "
           "in the simulation; peak: the cost model's, sched: the runtime's stage schedule, = : equal to the byte)\n");
    osdp_device level;   /* the operators' collectives at the mesh's levels, as the pipeline was priced */
    osdp_cost_device_for_mesh(dev, c->geo.tp_size, c->geo.n_ranks, P, &level);
    for (int s = 0; s < P; s++) {
        osdp_layout sub;
        osdp_cost_model cm = stage_cost_model(c, s, &level, o, &sub);
        printf("\nstage %d: operators %d:%d over %d data-parallel ranks, %d micro-batch%s in flight:\n", s, c->stage[s].lo,
               c->stage[s].hi, c->geo.n_ranks, c->stage[s].in_flight, c->stage[s].in_flight == 1 ? "" : "es");
        osdp_plan_ops_table(&sub, &cm, &c->stage[s].result);
    }
    printf("\n");
    static const char *const labels[2] = {"all-DP (ZeRO-2/DDP traffic):", "all-ZDP (FSDP/ZeRO-3):"};
    for (int v = 0; v < 2; v++) {
        if (bst[v] != OSDP_OK) printf("%-28s does not fit\n", labels[v]);
        else
            printf("%-28s micro-batch %d x %d: step %.3f ms, %.2f samples/s, bottleneck stage %d; OSDP %.3fx\n", labels[v],
                   base[v].geo.micro_batch, base[v].geo.accum_steps, 1e3 * base[v].step_s, base[v].samples_per_s,
                   base[v].memory_bottleneck, c->samples_per_s / base[v].samples_per_s);
    }
    printf("OSDP:                        micro-batch %d x %d: step %.3f ms, %.2f samples/s, bottleneck stage %d; planned "
           "in %.2f ms (%d micro-batches)\n", c->geo.micro_batch, c->geo.accum_steps, 1e3 * c->step_s, c->samples_per_s,
           c->memory_bottleneck, 1e3 * c->total_s, c->batches_tried);
}

/* --schedule interleaved: V per stage on the 1F1B pipeline above (osdp_pipe_interleave_search) */
static void print_interleave(const osdp_pipe_choice *c, const osdp_interleave_result *il)
{
    char a[32], split[OSDP_STAGE_SPLIT_CHARS];
    const int P = c->geo.pp_size;
    printf("\ninterleaved 1F1B (Megatron-LM's virtual stages) on this pipeline's operator plan, %d micro-batches:\n",
           c->geo.accum_steps);
    printf("  %-3s %-6s %-12s %-12s %-11s %10s %13s %15s  %s\n", "V", "chunks", "bubble", "of ideal", "simulated",
           "step ms", "p2p MiB/step", "largest peak", "fits");
    for (int k = 0; k < il->n; k++) {
        const osdp_interleave_option *x = &il->option[k];
        char pk[32] = "-", pp[32] = "-", step[32] = "-", bub[32] = "-", ideal[32] = "-", sim[32] = "-";
        const int priced = x->timing.step_s > 0;
        if (priced) {
            long long bytes = 0;
            for (int s = 0; s < P; s++) bytes += x->p2p_bytes[s];
            osdp_mib((double)(bytes * c->geo.n_ranks * c->geo.tp_size), pp, sizeof pp);
            snprintf(step, sizeof step, "%.3f", 1e3 * x->timing.step_s);
            snprintf(bub, sizeof bub, "%.4f", x->timing.bubble_closed);
            snprintf(ideal, sizeof ideal, "%.4f", x->bubble_of_ideal);
            snprintf(sim, sizeof sim, "%.4f", x->timing.idle_fraction);
        }
        if (x->fits || x->stage_peak[x->largest_stage] > 0)
            snprintf(pk, sizeof pk, "%s (s%d)", osdp_mib((double)x->stage_peak[x->largest_stage], a, sizeof a),
                     x->largest_stage);
        printf("  %-3d %-6d %-12s %-12s %-11s %10s %13s %15s  %s%s\n", x->V, P * x->V, bub, ideal, sim, step, pp, pk,
               x->fits ? "yes" : "no: ", x->fits ? (k == il->best ? "  <- chosen" : "") : x->why);
    }
    const osdp_interleave_option *b = &il->option[il->best];
    printf("(bubble: (P-1)/(VM+P-1) of the step; of ideal: (P-1)/(VM), Megatron's; simulated: the chunks' pass orders "
           "with their times and messages; peak: the runtime's stage schedule, MiB per rank)\n");
    printf("interleaving: V = %d, chunks %s%s\n", b->V,
           osdp_stage_split_format(b->bounds, P * b->V, split, sizeof split),
           b->V > 1 ? "" : " (no V > 1 fits or is faster: plain 1F1B)");
}

/* "key":{"best":V,"options":[...]}: each V's chunks, step, bubbles, largest peak, fits or why */
static void json_interleave(const char *key, const osdp_interleave_result *il, int P)
{
    char split[OSDP_STAGE_SPLIT_CHARS];
    printf(",\"%s\":{\"best\":%d,\"options\":[", key, il->option[il->best].V);
    for (int k = 0; k < il->n; k++) {
        const osdp_interleave_option *x = &il->option[k];
        printf("%s{\"V\":%d,\"fits\":%s,\"why\":", k ? "," : "", x->V, x->fits ? "true" : "false");
        osdp_json_string(x->why);
        printf(",\"chunks\":\"%s\",\"step_s\":%.9g,\"bubble_closed\":%.9g,\"bubble_of_ideal\":%.9g,"
               "\"bubble_simulated\":%.9g,\"largest_stage_peak_bytes\":%lld}",
               osdp_stage_split_format(x->bounds, P * x->V, split, sizeof split), x->timing.step_s,
               x->timing.bubble_closed, x->bubble_of_ideal, x->timing.idle_fraction, x->stage_peak[x->largest_stage]);
    }
    printf("]}");
}

void osdp_plan_json_pipe_choice(const char *key, const osdp_pipe_choice *c, osdp_status st)
{
    printf(",\"%s\":", key);
    if (st != OSDP_OK) {
        printf("{\"fits\":false}");
        return;
    }
    printf("{\"fits\":true,\"micro_batch\":%d,\"micro_batches\":%d,\"step_s\":%.9g,\"samples_per_s\":%.9g,"
           "\"tokens_per_s\":%.9g,\"bubble_closed\":%.9g,\"bubble_simulated\":%.9g,\"p2p_bytes_per_step\":%lld,"
           "\"memory_bottleneck_stage\":%d,\"slowest_stage\":%d,\"planner_ms\":%.6g,\"stages\":[",
           c->geo.micro_batch, c->geo.accum_steps, c->step_s, c->samples_per_s, c->samples_per_s * c->layout.T,
           c->timing.bubble_closed, c->timing.idle_fraction, mesh_p2p_bytes(c), c->memory_bottleneck,
           c->timing.slowest_stage, 1e3 * c->total_s);
    for (int s = 0; s < c->geo.pp_size; s++) {
        const osdp_stage_plan *sp = &c->stage[s];
        printf("%s{\"stage\":%d,\"lo\":%d,\"hi\":%d,\"first\":\"%s\",\"last\":\"%s\",\"in_flight\":%d,\"busy_s\":%.9g,"
               "\"forward_s\":%.9g,\"backward_s\":%.9g,\"step_start_s\":%.9g,\"step_end_s\":%.9g,\"end_s\":%.9g,"
               "\"peak_bytes\":%lld,\"schedule_peak_bytes\":%lld,"
               "\"mem_limit\":%lld,\"p2p_bytes\":%lld,\"zdp_ops\":%d,\"hierarchical_ops\":%d,\"proven\":%s,\"modes\":[",
               s ? "," : "", s, sp->lo, sp->hi, c->layout.op[sp->lo].name, c->layout.op[sp->hi - 1].name,
               sp->in_flight, sp->busy_s, sp->pass.forward_s, sp->pass.backward_s, sp->pass.step_start_s,
               sp->pass.step_end_s, c->timing.end_s[s],
               sp->peak_bytes, sp->schedule_peak, sp->result.mem_limit, sp->p2p_bytes, stage_zdp_ops(c, s),
               osdp_plan_hierarchical_ops(&c->plan, sp->lo, sp->hi),
               sp->result.gap > 0 || sp->result.timed_out ? "false" : "true");
        for (int i = sp->lo; i < sp->hi; i++) {
            char mode[24];
            printf("%s", i > sp->lo ? "," : "");
            osdp_json_string(osdp_plan_mode_label(&c->plan, i, mode, sizeof mode));
        }
        printf("]}");
    }
    printf("]}");
}

int osdp_cmd_plan_pipeline(const osdp_job *job)
{
    osdp_planner_options o;
    osdp_model_config cfg;
    osdp_device dev;
    osdp_plan_load_inputs(job, &o, &cfg, &dev);
    osdp_status s;
    if (job->tp == OSDP_TP_AUTO)
        osdp_fatal(OSDP_ERR_INPUT, "--tp auto with --pp P: give the tensor-parallel degree (--tp T), or --pp auto for "
                                   "the search over (P, T, D)");
    const int seq_len = job->seq_len ? (int)job->seq_len : cfg.ctx, P = (int)job->pp, T = (int)job->tp;
    int bounds[OSDP_MAX_STAGES + 1];
    osdp_layout L;   /* the operators and their types: the same at every T */
    if ((s = osdp_layout_build(&L, &cfg, seq_len)) != OSDP_OK) osdp_fatal(s, osdp_error_message());
    const osdp_pipe_schedule schedule = (osdp_pipe_schedule)job->pipe_schedule;
    const int interleave = schedule == OSDP_PIPE_INTERLEAVED;
    if (!interleave && job->virtual_stages > 1)
        osdp_fatal(OSDP_ERR_INPUT, "--virtual-stages needs --schedule interleaved (it sets the chunks per stage)");
    if (interleave && job->stages && job->virtual_stages < 2)
        osdp_fatal(OSDP_ERR_INPUT, "--stages with --schedule interleaved: plan chooses the P V chunks (train takes "
                                   "them with --stages); give --pp P alone, or the P V chunks with --virtual-stages V");
    /* interleaved with --virtual-stages V and --stages: the P V chunks priced as given (the stages planned on the
     * balanced split) */
    int chunks[OSDP_MAX_CHUNKS + 1];
    const int given_chunks = interleave && job->stages;
    if (given_chunks && (s = osdp_chunk_split_parse(job->stages, L.n_ops, P, (int)job->virtual_stages, chunks)) != OSDP_OK)
        osdp_fatal(s, osdp_error_message());
    if (job->stages && !given_chunks && (s = osdp_stage_split_parse(job->stages, L.n_ops, P, bounds)) != OSDP_OK)
        osdp_fatal(s, osdp_error_message());
    int *recompute_all = NULL;
    if (job->recompute == OSDP_RECOMPUTE_ALL) {   /* every attn and mlp operator */
        if (!(recompute_all = calloc((size_t)L.n_ops, sizeof *recompute_all))) osdp_fatal(OSDP_ERR_OOM, "plan: out of host memory");
        for (int i = 0; i < L.n_ops; i++) recompute_all[i] = osdp_op_can_recompute(L.op[i].type);
        o.recompute = recompute_all;
    }
    osdp_layout_free(&L);
    /* interleaved: the stages planned under 1F1B, then V searched on them */
    const osdp_pipe_schedule planned = interleave ? OSDP_PIPE_1F1B : schedule;
    osdp_pipe_choice c, base[2];
    osdp_interleave_result il = {0};
    s = osdp_planner_pipeline(&cfg, seq_len, &dev, &o, T, P, job->stages && !given_chunks ? bounds : NULL, planned, &c);
    if (s == OSDP_OK && interleave)
        s = osdp_pipe_interleave_search(&c, &dev, &o, cfg.n_layer, (int)job->virtual_stages,
                                        given_chunks ? chunks : NULL, &il);
    if (s != OSDP_OK) {
        char why[4096];
        /* the balanced split is the only one --pp P plans: say so, other splits may need less */
        snprintf(why, sizeof why, "%s%s", osdp_error_message(),
                 s == OSDP_ERR_INFEASIBLE && !job->stages && P > 1 ? " (other stage splits were not tried: --stages "
                 "gives one, --pp auto searches them)" : "");
        osdp_pipe_choice_free(&c);
        free(recompute_all);
        if (job->json) {
            printf("{\"model\":");
            osdp_json_string(cfg.name);
            printf(",\"ranks\":%lld,\"osdp\":{\"fits\":false,\"error\":", job->ranks);
            osdp_json_string(why);
            printf("}}\n");
        }
        fprintf(stderr, "osdp_gpt: error: %s\n", why);
        return (int)s;
    }
    osdp_status bst[2];
    osdp_interleave_result il_dp = {0};   /* given chunks: the all-DP row on them too (a Megatron configuration) */
    for (int v = 0; v < 2; v++) {   /* the same pipeline, every operator DP / ZDP */
        osdp_planner_options baseline = o;
        baseline.modes = v ? OSDP_MODES_ALL_ZDP : OSDP_MODES_ALL_DP;
        /* what `train --plan dp|zdp` runs: with --grad-reduce auto, every micro-batch */
        if (baseline.grad_reduce == OSDP_GRAD_REDUCE_AUTO) baseline.grad_reduce = OSDP_GRAD_REDUCE_EVERY;
        bst[v] = osdp_planner_pipeline(&cfg, seq_len, &dev, &baseline, T, P, c.geo.stage_bounds, planned, &base[v]);
        if (bst[v] != OSDP_OK && bst[v] != OSDP_ERR_INFEASIBLE) osdp_fatal(bst[v], osdp_error_message());
        if (v == 0 && given_chunks && bst[0] == OSDP_OK &&
            (s = osdp_pipe_interleave_search(&base[0], &dev, &baseline, cfg.n_layer, (int)job->virtual_stages, chunks,
                                             &il_dp)) != OSDP_OK)
            osdp_fatal(s, osdp_error_message());
    }
    if (job->json) {
        char split[OSDP_STAGE_SPLIT_CHARS];
        printf("{\"model\":");
        osdp_json_string(cfg.name);
        printf(",\"device\":");
        osdp_json_string(dev.name);
        printf(",\"ranks\":%lld,\"params\":%zu,\"operators\":%d,\"T\":%d,\"mesh\":{\"ranks\":%lld,\"pp\":%d,\"dp\":%d,"
               "\"tp\":%d,\"schedule\":\"%s\",\"stages\":\"%s\",\"stages_given\":%s},\"p2p_alpha\":%.9g,\"p2p_beta\":%.9g",
               job->ranks, c.layout.total_params, c.layout.n_ops, c.layout.T, job->ranks, P, c.geo.n_ranks, c.geo.tp_size,
               osdp_pipe_schedule_name(schedule), osdp_stage_split_format(c.geo.stage_bounds, P, split, sizeof split),
               c.bounds_given ? "true" : "false", dev.p2p.alpha, dev.p2p.beta);
        osdp_plan_json_network(&dev, (int)job->ranks, c.geo.tp_size, c.geo.n_ranks, P, osdp_pipe_choice_hierarchy(&c));
        osdp_plan_json_pipe_choice("osdp", &c, OSDP_OK);
        osdp_plan_json_pipe_choice("all_dp", &base[0], bst[0]);
        osdp_plan_json_pipe_choice("all_zdp", &base[1], bst[1]);
        if (interleave) json_interleave("interleave", &il, P);
        if (given_chunks && bst[0] == OSDP_OK) json_interleave("all_dp_interleave", &il_dp, P);
        printf("}\n");
    } else {
        print_text(&cfg, &dev, &o, job, &c, base, bst);
        if (interleave) print_interleave(&c, &il);
    }
    int rc = 0;
    if (job->out) {
        FILE *f = fopen(job->out, "w");
        char split[OSDP_STAGE_SPLIT_CHARS];
        const osdp_interleave_option *chosen = interleave ? &il.option[il.best] : NULL;
        const int V = chosen ? chosen->V : 1;
        if (!f) {
            fprintf(stderr, "osdp_gpt: error: cannot write the plan file %s\n", job->out);
            rc = OSDP_ERR_IO;
        } else {
            char vs[48] = "", opts[416], line[OSDP_PLAN_LINE_MAX + 2], extra[160];
            if (V > 1) snprintf(vs, sizeof vs, " --virtual-stages %d", V);
            osdp_plan_train_extra_options(job, cfg.ctx, extra, sizeof extra);
            osdp_stage_split_format(chosen ? chosen->bounds : c.geo.stage_bounds, P * V, split, sizeof split);
            const double step_s = chosen ? chosen->timing.step_s : c.step_s;
            const double peak = chosen ? (double)chosen->stage_peak[chosen->largest_stage] : c.plan.predicted_peak_bytes;
            osdp_plan_file_comment(f, "# planned by osdp_gpt plan for %lld ranks (PP %d x DP %d x TP %d) on device %s: "
                                   "micro-batch %d, %d micro-batches\n", job->ranks, P, c.geo.n_ranks, c.geo.tp_size,
                                   dev.name, c.geo.micro_batch, c.geo.accum_steps);
            const int n = snprintf(line, sizeof line, "# (train with --pp %d --stages %s --schedule %s%s --tp %d --batch %d "
                                   "--global-batch %d%s); predicted step %.6g s, largest stage peak %.0f bytes", P, split,
                                   osdp_pipe_schedule_name(V > 1 ? schedule : planned), vs, c.geo.tp_size,
                                   c.geo.micro_batch, c.geo.micro_batch * c.geo.accum_steps * c.geo.n_ranks, extra, step_s,
                                   peak);
            if (n >= 0 && n <= OSDP_PLAN_LINE_MAX) {
                fprintf(f, "%s\n", line);
            } else {   /* a long split: the train options, the split and the prediction on lines of their own */
                snprintf(opts, sizeof opts, "--pp %d --schedule %s%s --tp %d --batch %d --global-batch %d%s", P,
                         osdp_pipe_schedule_name(V > 1 ? schedule : planned), vs, c.geo.tp_size, c.geo.micro_batch,
                         c.geo.micro_batch * c.geo.accum_steps * c.geo.n_ranks, extra);
                osdp_plan_file_train_line(f, opts, split, P * V);
                fprintf(f, "# predicted step %.6g s, largest stage peak %.0f bytes\n", step_s, peak);
            }
            osdp_plan_write(&c.plan, &c.layout, f);
            if (fclose(f) != 0) rc = OSDP_ERR_IO;
        }
    }
    for (int v = 0; v < 2; v++) osdp_pipe_choice_free(&base[v]);
    osdp_pipe_choice_free(&c);
    free(recompute_all);
    return rc;
}

/* osdp_gpt plan --pp auto: the 3D search (osdp_planner_3d) and, beside it,
 * the best DeepSpeed-3D-like, Megatron-like, FSDP and DDP plans, each at
 * its own best mesh and micro-batch; the chosen mesh's stages and
 * per-operator modes; --out writes its plan. */
#include "config.h"
#include "cli/app.h"
#include "osdp/memory.h"
#include "osdp/pipeline_cost.h"
#include "plan_cmd.h"
#include "plan_inputs.h"
#include "plan_print.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long largest_peak(const osdp_pipe_choice *c)
{
    long long most = 0;
    for (int s = 0; s < c->geo.pp_size; s++) {
        const long long p = c->stage[s].schedule_peak >= 0 ? c->stage[s].schedule_peak : c->stage[s].peak_bytes;
        if (p > most) most = p;
    }
    return most;
}

/* the pipeline's chunks: P, or P V interleaved (geo.stage_bounds holds as many ranges) */
static int chunk_count(const osdp_pipe_choice *c)
{
    return c->geo.pp_size * (c->geo.pipe_schedule == OSDP_PIPE_INTERLEAVED ? osdp_pipe_chunks_per_stage(c->geo.virtual_stages) : 1);
}

/* "1f1b", or "interleaved V=2" */
static const char *schedule_label(const osdp_pipe_choice *c, char *buf, size_t n)
{
    if (c->geo.pipe_schedule == OSDP_PIPE_INTERLEAVED)
        snprintf(buf, n, "interleaved V=%d", osdp_pipe_chunks_per_stage(c->geo.virtual_stages));
    else
        snprintf(buf, n, "%s", osdp_pipe_schedule_name(c->geo.pipe_schedule));
    return buf;
}

static void print_row(osdp_3d_kind kind, const osdp_3d_result *r, const osdp_3d_result *osdp)
{
    if (r->status != OSDP_OK) {
        printf("  %-18s does not fit (%s)\n", osdp_3d_kind_name(kind), r->message);
        return;
    }
    const osdp_pipe_choice *c = &r->best;
    char split[OSDP_STAGE_SPLIT_CHARS], mesh[48], batch[32], peak[32];
    snprintf(mesh, sizeof mesh, "%dx%dx%d", c->geo.pp_size, c->geo.n_ranks, c->geo.tp_size);
    snprintf(batch, sizeof batch, "%d x %d", c->geo.micro_batch, c->geo.accum_steps);
    int zdp = 0;
    for (int i = 0; i < c->plan.n_ops; i++) zdp += c->plan.zdp_slices[i] > 0;
    char sched[48] = "";   /* interleaved: the chunks' split, V named after it */
    if (chunk_count(c) > c->geo.pp_size) snprintf(sched, sizeof sched, " (interleaved V=%d)", chunk_count(c) / c->geo.pp_size);
    printf("  %-18s %-9s %-8s %10.3f %12.2f %10s %5d/%-4d %8.3fx %6d %6d  %s%s\n", osdp_3d_kind_name(kind), mesh, batch,
           1e3 * c->step_s, c->samples_per_s, osdp_mib((double)largest_peak(c), peak, sizeof peak), zdp, c->plan.n_ops,
           osdp->status == OSDP_OK ? osdp->best.samples_per_s / c->samples_per_s : 0.0, r->meshes, r->splits_planned,
           osdp_stage_split_format(c->geo.stage_bounds, chunk_count(c), split, sizeof split), sched);
}

static void print_text(const osdp_model_config *cfg, const osdp_device *dev, const osdp_job *job,
                       const osdp_3d_result *res)
{
    char a[32];
    printf("osdp plan --pp auto | model %s: %d layers, width %d, vocab %d | %lld ranks", cfg->name, cfg->n_layer,
           cfg->n_embd, cfg->vocab, job->ranks);
    if (dev->ranks_per_node > 0) printf(" on nodes of %d", dev->ranks_per_node);
    printf(" | device %s, %s per rank\n", dev->name,
           osdp_format_bytes((double)(job->mem_limit ? job->mem_limit : dev->mem_limit), a, sizeof a));
    printf("the 3D search: meshes PP x DP x TP (TP inside a node), stage splits, micro-batch x micro-batches per step;"
           " per stage the exact per-operator search\n\n");
    printf("  %-18s %-9s %-8s %10s %12s %10s %10s %9s %6s %6s  %s\n", "plan", "PPxDPxTP", "b x M", "step ms",
           "samples/s", "peak MiB", "ZDP ops", "3D+OSDP", "meshes", "splits", "stages");
    for (int k = 0; k < OSDP_3D_KINDS; k++) print_row((osdp_3d_kind)k, &res[k], &res[OSDP_3D_OSDP]);
    printf("  (DeepSpeed-3D-like: every operator DP, ZeRO-1 on the data axis (gradients whole, reduced once per step); Megatron-like: "
           "plain DP;\n   FSDP: every operator ZDP, DDP: plain DP, both PP 1 x TP 1; 3D+OSDP: its samples/s over the "
           "row's)\n");
    if (res[OSDP_3D_OSDP].status != OSDP_OK) return;
    const osdp_pipe_choice *c = &res[OSDP_3D_OSDP].best;
    const osdp_3d_result *r = &res[OSDP_3D_OSDP];
    char sched[48];
    printf("\n3D+OSDP: PP %d x DP %d x TP %d, schedule %s, micro-batch %d x %d micro-batches: step %.3f ms; %d meshes "
           "(%d pruned by their state), %d stage splits planned in %.1f ms (%.1f ms CPU)\n", c->geo.pp_size, c->geo.n_ranks,
           c->geo.tp_size, schedule_label(c, sched, sizeof sched), c->geo.micro_batch, c->geo.accum_steps, 1e3 * c->step_s,
           r->meshes, r->meshes_pruned, r->splits_planned, 1e3 * r->total_s, 1e3 * r->cpu_s);
    printf("  (bounds: %d of %d mesh x micro-batch candidates and %d splits left unplanned, their bound above the best "
           "step, %d memory-aware bounds made; %lld stage searches reused)\n", r->candidates_bounded, r->candidates,
           r->splits_bounded, r->aware_bounds, r->stage_reuses);
    const int P = c->geo.pp_size, V = chunk_count(c) / P;
    if (V > 1)
        printf("  (interleaved 1F1B: stage s runs chunks s, s + %d, ..; bubble (P-1)/(VM) = %.4f of the ideal, against "
               "%.4f under 1F1B; each stage's operator plan searched on its 1F1B stage, operators lo:hi below)\n", P,
               (double)(P - 1) / ((double)V * c->geo.accum_steps), (double)(P - 1) / c->geo.accum_steps);
    for (int s = 0; s < P; s++) {
        const osdp_stage_plan *st = &c->stage[s];
        char pk[32], mode[24];
        printf("  stage %d: operators %d:%d", s, st->lo, st->hi);
        for (int k = 0; V > 1 && k < V; k++)
            printf("%s%d:%d", k ? "," : ", chunks ", c->geo.stage_bounds[k * P + s], c->geo.stage_bounds[k * P + s + 1]);
        printf(", %d in flight, busy %.3f ms, peak %s MiB%s:", st->in_flight, 1e3 * st->busy_s,
               osdp_mib((double)st->peak_bytes, pk, sizeof pk),
               st->result.gap > 0 ? " (not proven optimal: too many activation sums, osdp/planner.h)" : "");
        for (int i = st->lo; i < st->hi; i++)
            printf(" %s=%s", c->layout.op[i].name, osdp_plan_mode_label(&c->plan, i, mode, sizeof mode));
        printf("\n");
    }
}

static void print_json(const osdp_model_config *cfg, const osdp_device *dev, const osdp_job *job,
                       const osdp_3d_result *res)
{
    static const char *const keys[OSDP_3D_KINDS] = {"osdp", "deepspeed_3d", "megatron", "fsdp", "ddp"};
    printf("{\"model\":");
    osdp_json_string(cfg->name);
    printf(",\"device\":");
    osdp_json_string(dev->name);
    printf(",\"ranks\":%lld,\"ranks_per_node\":%d,\"search\":\"3d\"", job->ranks, dev->ranks_per_node);
    const osdp_pipe_choice *best = res[OSDP_3D_OSDP].status == OSDP_OK ? &res[OSDP_3D_OSDP].best : NULL;
    if (best)   /* the network as the chosen 3D+OSDP mesh sees it */
        osdp_plan_json_network(dev, (int)job->ranks, best->geo.tp_size, best->geo.n_ranks, best->geo.pp_size,
                               osdp_pipe_choice_hierarchy(best));
    else
        osdp_plan_json_network(dev, (int)job->ranks, 0, 0, 0, NULL);
    for (int k = 0; k < OSDP_3D_KINDS; k++) {
        const osdp_3d_result *r = &res[k];
        printf(",\"%s\":{\"name\":\"%s\",\"fits\":%s,\"meshes\":%d,\"meshes_pruned\":%d,\"splits_planned\":%d,"
               "\"search_ms\":%.6g,\"search_cpu_ms\":%.6g,\"candidates\":%d,\"candidates_bounded\":%d,\"splits_bounded\":%d,"
               "\"aware_bounds\":%d,\"stage_reuses\":%lld", keys[k], osdp_3d_kind_name((osdp_3d_kind)k),
               r->status == OSDP_OK ? "true" : "false", r->meshes, r->meshes_pruned, r->splits_planned, 1e3 * r->total_s,
               1e3 * r->cpu_s, r->candidates, r->candidates_bounded, r->splits_bounded, r->aware_bounds, r->stage_reuses);
        if (r->status == OSDP_OK) {
            char split[OSDP_STAGE_SPLIT_CHARS];
            printf(",\"mesh\":{\"pp\":%d,\"dp\":%d,\"tp\":%d,\"stages\":\"%s\",\"schedule\":\"%s\","
                   "\"virtual_stages\":%d},\"peak_bytes\":%lld", r->best.geo.pp_size, r->best.geo.n_ranks,
                   r->best.geo.tp_size,
                   osdp_stage_split_format(r->best.geo.stage_bounds, chunk_count(&r->best), split, sizeof split),
                   osdp_pipe_schedule_name(r->best.geo.pipe_schedule), chunk_count(&r->best) / r->best.geo.pp_size,
                   largest_peak(&r->best));
            osdp_plan_json_pipe_choice("plan", &r->best, OSDP_OK);
        } else {
            printf(",\"error\":");
            osdp_json_string(r->message);
        }
        printf("}");
    }
    printf("}\n");
}

static int write_plan(const osdp_job *job, const osdp_device *dev, int ctx, const osdp_pipe_choice *c)
{
    FILE *f = fopen(job->out, "w");
    char split[OSDP_STAGE_SPLIT_CHARS], opts[416], chunks[48] = "", extra[160];
    if (!f) {
        fprintf(stderr, "osdp_gpt: error: cannot write the plan file %s\n", job->out);
        return OSDP_ERR_IO;
    }
    if (chunk_count(c) > c->geo.pp_size) snprintf(chunks, sizeof chunks, " --virtual-stages %d", chunk_count(c) / c->geo.pp_size);
    snprintf(opts, sizeof opts, "--pp %d --schedule %s%s --tp %d --batch %d --global-batch %d%s", c->geo.pp_size,
             osdp_pipe_schedule_name(c->geo.pipe_schedule), chunks, c->geo.tp_size, c->geo.micro_batch,
             c->geo.micro_batch * c->geo.accum_steps * c->geo.n_ranks,
             osdp_plan_train_extra_options(job, ctx, extra, sizeof extra));
    osdp_stage_split_format(c->geo.stage_bounds, chunk_count(c), split, sizeof split);
    osdp_plan_file_comment(f, "# planned by osdp_gpt plan --pp auto for %lld ranks (PP %d x DP %d x TP %d) on device %s: "
                           "micro-batch %d, %d micro-batches\n", job->ranks, c->geo.pp_size, c->geo.n_ranks,
                           c->geo.tp_size, dev->name, c->geo.micro_batch, c->geo.accum_steps);
    osdp_plan_file_train_line(f, opts, split, chunk_count(c));
    fprintf(f, "# predicted step %.6g s, largest stage peak %.0f bytes\n", c->step_s, c->plan.predicted_peak_bytes);
    osdp_plan_write(&c->plan, &c->layout, f);
    return fclose(f) != 0 ? OSDP_ERR_IO : 0;
}

int osdp_cmd_plan_3d(const osdp_job *job)
{
    if (osdp_option_given(job, "stages"))
        osdp_fatal(OSDP_ERR_INPUT, "--stages with --pp auto: the 3D search chooses the split; give --pp P to fix it");
    if (job->virtual_stages > 1 && job->pipe_schedule != OSDP_PIPE_INTERLEAVED)
        osdp_fatal(OSDP_ERR_INPUT, "--virtual-stages needs --schedule interleaved (it sets the chunks per stage; "
                                   "without --schedule and --virtual-stages the 3D search chooses V)");
    osdp_planner_options o;
    osdp_model_config cfg;
    osdp_device dev;
    osdp_plan_load_inputs(job, &o, &cfg, &dev);
    osdp_status s;
    const int seq_len = job->seq_len ? (int)job->seq_len : cfg.ctx;
    int *recompute_all = NULL;   /* --recompute all: every attn and mlp operator, on every stage of every mesh */
    if (job->recompute == OSDP_RECOMPUTE_ALL) {
        osdp_layout L;   /* the operators and their types: the same at every T */
        if ((s = osdp_layout_build(&L, &cfg, seq_len)) != OSDP_OK) osdp_fatal(s, osdp_error_message());
        if (!(recompute_all = calloc((size_t)L.n_ops, sizeof *recompute_all)))
            osdp_fatal(OSDP_ERR_OOM, "plan: out of host memory");
        for (int i = 0; i < L.n_ops; i++) recompute_all[i] = osdp_op_can_recompute(L.op[i].type);
        osdp_layout_free(&L);
        o.recompute = recompute_all;
    }
    /* --tp T fixes the tensor-parallel degree; not given or auto: searched.  --schedule / --virtual-stages
     * fix the schedule (interleaved without V: V >= 2 searched); neither: 1F1B or interleaved, V searched */
    const int schedule_fixed = osdp_option_given(job, "schedule") || osdp_option_given(job, "virtual-stages");
    const osdp_3d_options o3 = {.pp = 0, .tp = osdp_option_given(job, "tp") ? (int)job->tp : 0,
                                .schedule = (osdp_pipe_schedule)job->pipe_schedule,
                                .virtual_stages = schedule_fixed ? (int)job->virtual_stages : OSDP_3D_V_AUTO};
    osdp_3d_result res[OSDP_3D_KINDS];
    for (int k = 0; k < OSDP_3D_KINDS; k++) {
        if ((s = osdp_planner_3d(&cfg, seq_len, &dev, &o, &o3, (osdp_3d_kind)k, &res[k])) != OSDP_OK)
            osdp_fatal(s, osdp_error_message());
    }
    if (job->json) print_json(&cfg, &dev, job, res);
    else print_text(&cfg, &dev, job, res);
    int rc = 0;
    if (res[OSDP_3D_OSDP].status != OSDP_OK) {
        fprintf(stderr, "osdp_gpt: error: %s\n", res[OSDP_3D_OSDP].message);
        rc = (int)res[OSDP_3D_OSDP].status;
    } else if (job->out) {
        rc = write_plan(job, &dev, cfg.ctx, &res[OSDP_3D_OSDP].best);
    }
    for (int k = 0; k < OSDP_3D_KINDS; k++) osdp_3d_result_free(&res[k]);
    free(recompute_all);
    return rc;
}

/* The planner's answers printed (src/cli/plan_print.c): what `plan`, its
 * pipeline and 3D forms and `train --plan auto` share.  osdp_plan_print
 * itself is declared in cli/app.h. */
#ifndef OSDP_CLI_PLAN_PRINT_H
#define OSDP_CLI_PLAN_PRINT_H

#include <stddef.h>
#include <stdio.h>
#include "osdp/cost_model.h"
#include "osdp/planner.h"
#include "options.h"

/* "dp", "zdp", "2/4", with "+rc" when the operator recomputes its activations */
const char *osdp_plan_mode_label(const osdp_plan *p, int op, char *buf, size_t n);
/* operators lo..hi-1 of p in plan mode h (hierarchical) */
int osdp_plan_hierarchical_ops(const osdp_plan *p, int lo, int hi);
/* bytes as MiB with one decimal */
const char *osdp_mib(double bytes, char *buf, size_t n);
/* the per-operator table of r's plan over L's operators under cm (its
 * in-flight micro-batches and stage buffers included), with totals */
void osdp_plan_ops_table(const osdp_layout *L, const osdp_cost_model *cm, const osdp_planner_result *r);
/* one line: label, the batch, step, throughput, peak and ZDP operators of r (s OSDP_OK), else "does not fit: err" */
void osdp_plan_print_summary(const char *label, const osdp_layout *L, const osdp_planner_result *r, osdp_status s,
                             const char *err);
/* s as a JSON string on stdout */
void osdp_json_string(const char *s);
/* ,"network":{...} on stdout: the two levels (ranks per node, nodes, the [internode_*] figures or
 * null), which groups of the mesh tp x dp x pp span nodes (tp 0: not reported) and whether plan mode h
 * was offered (hier); dev as read, before osdp_cost_device_for_mesh */
void osdp_plan_json_network(const osdp_device *dev, int n_ranks, int tp, int dp, int pp, const osdp_cost_hierarchy *hier);
/* Plan files (--out): their comment lines stay within OSDP_PLAN_LINE_MAX, the most a plan file's line may have.
 * osdp_plan_file_comment writes the printf-formatted text, lines that start with '#', breaking a longer line
 * after its last space or comma that fits and going on on a line "#   ...". */
void osdp_plan_file_comment(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "# (train with OPTS --stages SPLIT)", or, when that is long, "# (train with OPTS --stages S, S the N ranges below
 * joined)" and the ranges of SPLIT on lines "#   a:b,c:d,..." of whole ranges */
void osdp_plan_file_train_line(FILE *f, const char *opts, const char *split, int n_ranges);
/* The options beyond the mesh and the batch that the plan's prediction assumed and that train takes too, each
 * with a leading space, into buf (where the plan used the defaults: ""): --seq-len when not the model's ctx,
 * --attention / --head naive, --no-prefetch, --residual-dtype / --activation-dtype bf16.  A plan file's
 * "train with" line carries them: a run without them has another peak than the one predicted (an fp32 stream
 * where the plan assumed bf16: more memory than the plan fits in) */
const char *osdp_plan_train_extra_options(const osdp_job *job, int ctx, char *buf, size_t n);

#endif

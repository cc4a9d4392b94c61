/* What `osdp_gpt plan` (src/cli/plan_cmd.c) and its pipeline form
 * (src/cli/plan_pipeline.c, --pp P > 1) share. */
#ifndef OSDP_CLI_PLAN_CMD_H
#define OSDP_CLI_PLAN_CMD_H

#include <stddef.h>
#include "options.h"
#include "osdp/cost_model.h"
#include "osdp/planner.h"

/* the planner's options from the job */
void osdp_plan_options_from_job(const osdp_job *job, osdp_planner_options *o);
/* "dp", "zdp", "2/4", with "+rc" when the operator recomputes its activations */
const char *osdp_plan_mode_label(const osdp_plan *p, int op, char *buf, size_t n);
/* operators lo..hi-1 of p in plan mode h (hierarchical) */
int osdp_plan_hierarchical_ops(const osdp_plan *p, int lo, int hi);
/* bytes as MiB with one decimal */
const char *osdp_mib(double bytes, char *buf, size_t n);
/* the per-operator table of r's plan over L's operators under cm (its
 * in-flight micro-batches and stage buffers included), with totals */
void osdp_plan_ops_table(const osdp_layout *L, const osdp_cost_model *cm, const osdp_planner_result *r);
/* s as a JSON string on stdout */
void osdp_json_string(const char *s);
/* plan --pp P > 1: the pipeline's stages, step, bubble and messages */
int osdp_cmd_plan_pipeline(const osdp_job *job);
/* ,"key":{...} on stdout: a pipeline choice's batch, step, bubble, stages and modes ({"fits":false} unless st is OSDP_OK) */
void osdp_plan_json_pipe_choice(const char *key, const osdp_pipe_choice *c, osdp_status st);
/* the planner's options, the job's model (its --seq-len checked) and device file with --nodes /
 * --ranks-per-node / --emulate-link; a clear message and exit on a bad one */
void osdp_plan_load_inputs(const osdp_job *job, osdp_planner_options *o, osdp_model_config *cfg, osdp_device *dev);
/* ,"network":{...} on stdout: the two levels (ranks per node, nodes, the [internode_*] figures or
 * null), which groups of the mesh tp x dp x pp span nodes (tp 0: not reported) and whether plan mode h
 * was offered (hier); dev as read, before osdp_cost_device_for_mesh */
void osdp_plan_json_network(const osdp_device *dev, int n_ranks, int tp, int dp, int pp, const osdp_cost_hierarchy *hier);
/* plan --pp auto: the 3D search beside its baselines (src/cli/plan_3d.c) */
int osdp_cmd_plan_3d(const osdp_job *job);

#endif

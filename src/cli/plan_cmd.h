/* The forms of `osdp_gpt plan` beside the flat one (src/cli/plan_cmd.c),
 * which dispatches to them; they print with src/cli/plan_print.h and read
 * their inputs with src/cli/plan_inputs.h, never calling back. */
#ifndef OSDP_CLI_PLAN_CMD_H
#define OSDP_CLI_PLAN_CMD_H

#include "options.h"
#include "osdp/planner.h"

/* plan --pp P > 1: the pipeline's stages, step, bubble and messages (src/cli/plan_pipeline.c) */
int osdp_cmd_plan_pipeline(const osdp_job *job);
/* ,"key":{...} on stdout: a pipeline choice's batch, step, bubble, stages and modes ({"fits":false} unless st is OSDP_OK) */
void osdp_plan_json_pipe_choice(const char *key, const osdp_pipe_choice *c, osdp_status st);
/* plan --pp auto: the 3D search beside its baselines (src/cli/plan_3d.c) */
int osdp_cmd_plan_3d(const osdp_job *job);

#endif

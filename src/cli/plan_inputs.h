/* What `plan` plans with (src/cli/plan_inputs.c). */
#ifndef OSDP_CLI_PLAN_INPUTS_H
#define OSDP_CLI_PLAN_INPUTS_H

#include "options.h"
#include "osdp/device.h"
#include "osdp/planner.h"

/* the planner's options from the job */
void osdp_plan_options_from_job(const osdp_job *job, osdp_planner_options *o);
/* the planner's options, the job's model (its --seq-len checked) and device file with --nodes /
 * --ranks-per-node / --emulate-link; a clear message and exit on a bad one */
void osdp_plan_load_inputs(const osdp_job *job, osdp_planner_options *o, osdp_model_config *cfg, osdp_device *dev);

#endif

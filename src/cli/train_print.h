/* What train prints of its resolved job on rank 0 (src/cli/train_print.c):
 * the searches' choices, the mesh, the resume's changes and the plan. */
#ifndef OSDP_CLI_TRAIN_PRINT_H
#define OSDP_CLI_TRAIN_PRINT_H

#include "osdp/job.h"

/* the device file profiled on nodes of file_node ranks, priced at the job's nodes of node_size */
void osdp_train_print_device_nodes(const char *path, int file_node, int node_size);
/* --tp auto's degree, or the 3D search's mesh, stages and batch (nothing when no search ran) */
void osdp_train_print_search(const osdp_job_resolved *job, int n_ranks);
/* "mesh: ..." with the pipeline's schedule */
void osdp_train_print_mesh(const osdp_job_resolved *job);
/* a resume's global batch, horizon and sequence length, and what the options changed */
void osdp_train_print_resume(const osdp_job_resolved *job);
/* --plan zdp's tied embedding, or --plan auto's plan table */
void osdp_train_print_plan(const osdp_job_resolved *job);

#endif

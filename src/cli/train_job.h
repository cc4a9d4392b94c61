/* train's options as the library's job request (osdp/job.h), with the
 * cross-option rules of train (each value alone was checked by the options
 * table, src/cli/options.c). */
#ifndef OSDP_CLI_TRAIN_JOB_H
#define OSDP_CLI_TRAIN_JOB_H

#include "options.h"
#include "osdp/job.h"
#include "osdp/memory.h"
#include "train_checkpoint.h"

/* cross-option rules of train and eval; OSDP_ERR_INPUT names the options */
osdp_status osdp_train_check_options(const osdp_job *job);
/* --virtual-stages as the schedule reads it: 1 unless interleaved */
int osdp_train_virtual_stages(const osdp_job *job);
/* the request of the job: the options, the job's nodes (node_size: 0 when they differ), this rank's
 * node, and the backend's paddings; the device file, the resume and the optimizer's horizon are the
 * caller's (req->device NULL) */
void osdp_train_request(const osdp_job *job, int node_size, int rank_node_size, int nodes_emulated,
                        int pad_quantum, int vocab_quantum, osdp_job_request *req);
/* the model: --model's, or for eval the one its weights file holds, with the kernels of --attention and
 * --head */
osdp_status osdp_train_model(const osdp_job *job, osdp_model_config *cfg);
/* The checkpoint --resume loaded must be the one the run was set up from (--resume-fallback may
 * have gone back to an older save of another geometry) */
osdp_status osdp_train_check_resumed(const osdp_train_ckpt *ckpt, const osdp_job *job, const osdp_job_resolved *r);
/* The runtime's memory limit: on a GPU the card's free memory less a margin, or --mem-limit where that
 * is smaller (a plan whose predicted peak does not fit is refused: OSDP_ERR_OOM); on the CPU
 * --mem-limit's.  Rank 0 says the limit on a GPU unless quiet. */
osdp_status osdp_train_device_mem_limit(const osdp_compute_backend *be, const osdp_job *job,
                                        const osdp_memory_prediction *predicted, int rank, size_t *limit);

#endif

/* Sharded HDF5 checkpoints (DESIGN.md §6, §9, doc/checkpoint-format.md).
 *
 * One HDF5 file per save, opened with the MPI-IO driver on every rank of
 * `comm` (every rank of the mesh: pp x dp x tp ranks, the tensor axis
 * innermost, DESIGN.md §9; rt->comm is the data-parallel group) and written
 * collectively: each rank writes only its tensor-parallel part of each
 * operator intersected with its data-parallel shard [shard_lo, shard_lo +
 * shard), as hyperslabs of the logical tensors (osdp/logical.h: a
 * column-split tensor's part is a set of column blocks per row).  Tensors
 * replicated in a tensor-parallel group are written by its rank 0 alone.
 * On a pipeline a rank holds only its stage's operators: it writes and
 * reads those, and takes part in the other stages' collective transfers
 * selecting nothing, so every operator is written once and a load reads
 * only the loading rank's stage.
 * Tensors are stored in their full logical shapes (the vocabulary unpadded)
 * under
 *     /model/<op>/<tensor>        fp32 master weights, e.g. /model/attn.3/qkv.weight
 *     /optim/m/<op>/<tensor>      AdamW first moment
 *     /optim/v/<op>/<tensor>      AdamW second moment
 * so a checkpoint loads on any mesh and any plan: each loading rank reads
 * the pieces of its own part and shards (vocabulary padding zero).  The
 * mesh it was saved on is in the root attributes mesh_tp, mesh_dp, mesh_pp
 * (and, from a pipeline, pipeline_stages and pipeline_schedule: for
 * information, a load needs neither).
 * No rank ever holds more than one operator shard of host memory for the
 * transfer.
 *
 * Every function here is collective over `comm`: all ranks must call it with
 * the same arguments, and all ranks return the same status and the same
 * error message (statuses are agreed with MPI_Allreduce after every step that
 * can fail, before the next collective).  Nothing here exits. */
#ifndef OSDP_CHECKPOINT_H
#define OSDP_CHECKPOINT_H

#include <mpi.h>
#include "osdp/agree.h"   /* osdp_status_agree, used by every collective path here */
#include "osdp/error.h"
#include "osdp/model_config.h"
#include "osdp/optim.h"
#include "osdp/plan.h"
#include "osdp/runtime.h"

#define OSDP_CKPT_FORMAT_VERSION 1
#define OSDP_CKPT_CHECKSUM_ALGORITHM "osdp-sum64-v1"

/* What a checkpoint says about itself (root attributes), plus I/O figures. */
typedef struct osdp_ckpt_info {
    int format_version;
    long step;                     /* optimizer steps done = data position */
    unsigned long long seed;       /* weights and data order (RNG state: seed, step) */
    int n_ranks;                   /* ranks at save time */
    /* the step at save time (osdp/geometry.h; the root attributes mesh_tp, mesh_dp, mesh_pp, micro_batch
     * and accum_steps): the mesh geo.tp_size x geo.n_ranks (data) x geo.pp_size = n_ranks (files from
     * before the mesh: 1 x n_ranks x 1), geo.micro_batch and geo.accum_steps; its other fields 0 */
    osdp_step_geometry geo;
    unsigned long long model_hash; /* osdp_model_config_hash() */
    char model_name[64];
    unsigned long long plan_hash;  /* osdp_plan_hash() of the plan at save time */
    long global_batch;             /* sequences per optimizer step */
    int seq_len;
    osdp_optim_config optim;       /* optimizer settings at save time */
    int weights_only;              /* a weights file (root attribute content = "weights": scripts/osdp_weights.py):
                                      model and /model only; step, seed, geometry and optim are 0 */
    /* filled by save / load: */
    double bytes;                  /* dataset bytes written or read, all ranks */
    double seconds;                /* wall time of the whole call */
} osdp_ckpt_info;

/* Flags for osdp_ckpt_load */
#define OSDP_CKPT_WEIGHTS_ONLY 1   /* /model only: m, v zeroed, step 0 (for --init-from) */

/* Write the runtime's state as `path`, atomically: the data go to
 * "<path>.tmp", which is closed collectively; once every rank has closed
 * it rank 0 flushes it to disk and renames it to `path`.  A crash on any
 * rank before that rename leaves `path` (and anything else) untouched.
 * Every write, flush and close is checked and the outcome agreed after each
 * phase; a failed save (a full disk) removes "<path>.tmp" and returns the
 * same error on every rank, naming the file, the dataset and the cause.
 * Every wait is bounded by the communication timeout (OSDP_COMM_TIMEOUT_S):
 * the agreements by their timed all-reduce, the calls into HDF5's
 * collective MPI-IO and the save's few plain MPI collectives (the strings,
 * the checksums) by a watchdog (util/watchdog.h) that, when a rank is
 * stopped or falls out of step, removes the temporary file and ends the
 * job through the unrecoverable-error handler (osdp/error.h) with a message
 * naming the save and the dataset.  cfg, plan: NULL for the runtime's own
 * (rt->layout->cfg, rt->plan).  info (may be NULL) receives the metadata
 * written and the I/O figures.
 *
 * Test hook: the environment variable OSDP_CKPT_CRASH_AT=mid_write |
 * before_rename makes rank OSDP_CKPT_CRASH_RANK (default 1, or 0 on one
 * rank) raise(SIGKILL) at that point (SIGSTOP with
 * OSDP_CKPT_CRASH_SIGNAL=STOP), for the save of step
 * OSDP_CKPT_CRASH_STEP only when that is set. */
osdp_status osdp_ckpt_save(osdp_runtime *rt, const osdp_model_config *cfg, const osdp_plan *plan,
                           const char *path, MPI_Comm comm, osdp_ckpt_info *info);

/* Read `path` into the runtime, which may have any rank count and plan:
 * master weights, and unless OSDP_CKPT_WEIGHTS_ONLY also m, v, step and seed
 * (rt->step, rt->opt.seed).  Gradients are not stored: every step recomputes
 * them.  Refused with OSDP_ERR_INPUT (a message naming the file and the
 * dataset or attribute): not an HDF5 file / truncated, a newer
 * format_version, a model description (cfg; NULL: rt->layout->cfg) that
 * differs, a missing dataset or attribute, a wrong shape or type, a checksum
 * mismatch.  OSDP_ERR_IO: the file cannot be opened or read.  On failure
 * the runtime state is partly overwritten: load again or stop. */
osdp_status osdp_ckpt_load(osdp_runtime *rt, const osdp_model_config *cfg, const char *path, int flags,
                           MPI_Comm comm, osdp_ckpt_info *info);

/* Only the root attributes, validated (format version) but not compared with
 * any model. */
osdp_status osdp_ckpt_read_info(const char *path, MPI_Comm comm, osdp_ckpt_info *info);
/* The model description a checkpoint or weights file holds (attribute
 * model_description, metadata checksum verified), parsed into *cfg: what
 * a command that only reads a file (osdp_gpt sample) builds its model from. */
osdp_status osdp_ckpt_read_model(const char *path, MPI_Comm comm, osdp_model_config *cfg);

/* "step_00000042.h5" for step 42 */
void osdp_ckpt_step_name(long step, char *buf, size_t n);
/* step number of a name made by osdp_ckpt_step_name (with or without a
 * directory), -1 when `name` is not one */
long osdp_ckpt_parse_step_name(const char *name);

#endif

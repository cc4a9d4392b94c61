/* The training loop's checkpoint glue: options, periodic and signal-driven
 * saves with rotation and a `latest` pointer, resume, --init-from.
 *
 *   --ckpt-dir DIR       where saves go: DIR/step_XXXXXXXX.h5 and DIR/latest
 *   --save-every K       save after every K-th optimizer step (also at the end
 *                        of the run and on SIGTERM / SIGUSR1)
 *   --keep K             keep the last K saves (default 3; 0 keeps all)
 *   --resume [FILE]      continue from FILE, or from DIR/latest
 *   --resume-fallback    if the checkpoint is refused, try the previous save
 *   --init-from FILE     weights of any checkpoint, fresh optimizer, step 0
 *
 * Use (see the integration note in doc/checkpoint-format.md):
 *     osdp_train_ckpt ck;
 *     s = osdp_train_ckpt_init(&ck, job);               // the job's checkpoint options
 *     ... create the runtime ...
 *     s = osdp_train_ckpt_start(&ck, &rt, &cfg, &plan, MPI_COMM_WORLD);
 *     s = osdp_train_ckpt_check_steps(&ck, steps, dump);  // a resume with nothing to do
 *     for (long step = rt.step; step < steps; step++) {
 *         ... osdp_runtime_step, report ...
 *         int stop = 0;
 *         s = osdp_train_ckpt_after_step(&ck, OSDP_OK, &stop);
 *         if (stop) break;
 *     }
 *     s = osdp_train_ckpt_finish(&ck);
 * start, after_step and finish are collective and return the same status on
 * every rank. */
#ifndef OSDP_TRAIN_CHECKPOINT_H
#define OSDP_TRAIN_CHECKPOINT_H

#include <mpi.h>
#include <stdio.h>
#include "osdp/checkpoint.h"

typedef struct osdp_train_ckpt {
    /* options */
    const char *dir;            /* --ckpt-dir, NULL: no saves */
    long save_every;            /* --save-every, 0: only at the end and on a signal */
    int keep;                   /* --keep */
    int resume;                 /* --resume given */
    const char *resume_file;    /* --resume FILE, NULL: DIR/latest */
    int resume_fallback;        /* --resume-fallback */
    const char *init_from;      /* --init-from FILE */
    int quiet;                  /* --quiet */
    int continue_on_write_error; /* --on-write-error continue: a failed save is skipped with a warning */
    /* state, set by start */
    osdp_runtime *rt;
    const osdp_model_config *cfg;
    const osdp_plan *plan;
    MPI_Comm comm;
    int rank, started;
    long last_saved;            /* step of the newest save in dir, -1: none this run */
    long last_tried;            /* step of the last save tried (skipped when it failed under continue), -1: none */
    int stop_signal;            /* the signal that stopped the run, 0: none */
    osdp_ckpt_info loaded;      /* what start loaded (when resume or init_from) */
} osdp_train_ckpt;

struct osdp_job;
/* The checkpoint options of the job (src/cli/options.h), with their
 * cross-checks (--save-every needs --ckpt-dir, ...).  Not collective:
 * every rank has the same job; OSDP_ERR_INPUT names the options. */
osdp_status osdp_train_ckpt_init(osdp_train_ckpt *tc, const struct osdp_job *job);

/* On --resume, before the runtime exists: the path of the checkpoint the
 * resume starts from (FILE, or what DIR/latest names) and its root
 * attributes (batch geometry, schedule, sequence length), metadata checksum
 * verified.  Collective. */
osdp_status osdp_train_ckpt_peek(const osdp_train_ckpt *tc, MPI_Comm comm, char *path, size_t n, osdp_ckpt_info *info);

/* After start: a resumed checkpoint already at or past --steps is an error
 * (--steps counts all steps of the run), except at exactly --steps when the
 * run still has work: a save into another --ckpt-dir, or other_work
 * (--dump-weights).  Every rank returns the same status. */
osdp_status osdp_train_ckpt_check_steps(const osdp_train_ckpt *tc, long steps, int other_work);

/* After the runtime exists, before the first step: installs the SIGTERM /
 * SIGUSR1 handlers, creates --ckpt-dir, and does --resume (rt->step, the
 * weights, moments and seed from the checkpoint) or --init-from (weights).
 * cfg and plan must outlive the training loop. */
osdp_status osdp_train_ckpt_start(osdp_train_ckpt *tc, osdp_runtime *rt, const osdp_model_config *cfg,
                                  const osdp_plan *plan, MPI_Comm comm);

/* After each optimizer step: saves when rt->step is a multiple of
 * --save-every, and when any rank received SIGTERM / SIGUSR1 (all ranks
 * agree through one timed all-reduce per step); then *stop = 1 and a message
 * has been printed: the caller leaves the loop and exits 0.  `local`: a
 * failure of this rank alone in the step (rank 0's --log write), folded into
 * the same all-reduce: every rank then returns it, with its message.  A
 * save that fails for want of I/O is skipped with a warning under
 * --on-write-error continue (returns OSDP_OK); otherwise its error. */
osdp_status osdp_train_ckpt_after_step(osdp_train_ckpt *tc, osdp_status local, int *stop);

/* After the loop: saves the final state when --ckpt-dir is set and the
 * current step has not been saved yet. */
osdp_status osdp_train_ckpt_finish(osdp_train_ckpt *tc);

/* Save now into --ckpt-dir (step_XXXXXXXX.h5, latest, rotation). */
osdp_status osdp_train_ckpt_save_now(osdp_train_ckpt *tc);

/* --dump-weights: the logical parameters (osdp/logical.h: every operator's
 * tensors in their whole shapes, vocabulary unpadded, in layout order), as
 * raw float32 written by rank 0 of comm (every rank of the mesh, in mesh
 * order).  Operator by operator, never the whole model at once: the stage
 * that owns the operator gathers it over its data-parallel groups and the
 * tensor-parallel parts of its data index 0 go to world rank 0, which puts
 * them in place (osdp_gather_op_to_root, cli/gather_root.h).  Collective;
 * every rank returns the same status. */
osdp_status osdp_train_dump_weights(osdp_runtime *rt, const char *path, MPI_Comm comm);

#endif

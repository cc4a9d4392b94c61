/* train --plan auto with a pipeline (--pp P, --pp auto; --tp T or auto):
 * rank 0 runs the 3D search (osdp_planner_3d: the mesh when auto, the
 * stage split, the micro-batch and M for the global batch, each stage's
 * per-operator plan) and every rank receives its answer. */
#ifndef OSDP_CLI_TRAIN_PIPE_PLAN_H
#define OSDP_CLI_TRAIN_PIPE_PLAN_H

#include "osdp/pipeline.h"
#include "osdp/plan.h"
#include "osdp/planner.h"

typedef struct osdp_train_pipe_plan {
    int active;                       /* the search chose the run's mesh and plan */
    int pp, tp;
    int bounds[OSDP_MAX_STAGES + 1];  /* the stages' operators */
    osdp_plan plan;                   /* the whole model's (one rank's tensor-parallel parts), b and M in it */
} osdp_train_pipe_plan;

/* Collective over MPI_COMM_WORLD.  cfg, dev and o (o->geo.n_ranks: the world's
 * ranks, o->global_batch given) are read on rank 0 only; pp and tp: the
 * fixed values or 0 (auto).  Rank 0 prints the choice unless quiet.  Every
 * rank returns the same status (rank 0's message; the others name it). */
osdp_status osdp_train_pipe_plan_choose(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                                        const osdp_planner_options *o, int pp, int tp, osdp_pipe_schedule schedule,
                                        int rank, int quiet, osdp_train_pipe_plan *out);
void osdp_train_pipe_plan_free(osdp_train_pipe_plan *p);

#endif

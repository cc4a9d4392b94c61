/* A training job resolved: the options, the model and the device file in;
 * the mesh, the batch geometry, the layouts, the plan and the pipeline's
 * stages out, the same on every rank (src/planner/job.c).
 *
 * osdp_job_resolve is the one call: rank 0 searches where a search is asked
 * for (--tp auto, --plan auto with or without a pipeline) and broadcasts its
 * answer (osdp_plan_broadcast); every rank builds the rest from the same
 * inputs.  It prints nothing: what a run reports of its resolution (the
 * choices, the plan table, the resume's changes) stays in the result for
 * the caller to print.  Every rank returns the same status and message
 * (osdp/agree.h), so a rank never waits in a collective another left. */
#ifndef OSDP_JOB_H
#define OSDP_JOB_H

#include <mpi.h>
#include "osdp/checkpoint.h"
#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/dtype.h"
#include "osdp/layout.h"
#include "osdp/mesh.h"
#include "osdp/model_config.h"
#include "osdp/pipeline.h"
#include "osdp/geometry.h"
#include "osdp/plan.h"
#include "osdp/planner.h"

/* sequences per rank per micro-step when neither --batch nor the planner says */
#define OSDP_JOB_DEFAULT_MICRO_BATCH 8

/* What the command line asked for, as the library reads it. */
typedef struct osdp_job_request {
    /* the mesh */
    int tp, pp;                    /* degrees, or OSDP_TP_AUTO / 0 (--pp auto) */
    int node_size;                 /* the job's ranks per node (real or emulated); 0: they differ */
    int rank_node_size;            /* the ranks of this rank's node */
    int nodes_emulated;            /* the nodes are emulated (--ranks-per-node) */
    osdp_pipe_schedule pipe_schedule;
    int virtual_stages;            /* V as the schedule reads it: 1 unless interleaved */
    int schedule_auto;             /* neither --schedule nor --virtual-stages: the 3D search (--plan auto with a
                                    * pipeline) chooses between pipe_schedule and interleaved with its V; the
                                    * resolved job's req holds the schedule and V it chose */
    const char *stages;            /* --stages; NULL: balanced by the cost model */
    /* the plan */
    const char *plan;              /* --plan: "auto", "dp", "zdp" or a plan file */
    int split;                     /* --split G (1: none) */
    int split_auto;                /* --split auto */
    int recompute_all, recompute_auto;
    osdp_grad_reduce grad_reduce;
    long long mem_limit;           /* bytes per rank; 0: none */
    int prefetch;
    osdp_cost_kind cost;
    int offer_hierarchical;        /* not --no-hierarchical */
    /* the batch */
    int seq_len;                   /* --seq-len; 0: the model's ctx (checked against it by the caller) */
    int batch;                     /* --batch; 0: not given */
    int global_batch;              /* --global-batch; 0: not given */
    long total_steps;              /* the cosine horizon the options give (--lr-steps, else --steps) */
    int lr_steps_given;            /* --lr-steps */
    int seed_given;
    unsigned long long seed;
    /* the run resumed (NULL: a fresh one) and the file it came from; eval reads any length */
    const osdp_ckpt_info *resumed;
    const char *resumed_path;
    int evaluating;
    /* the device file for this run (osdp_job_device_for_run); NULL when it could not be read: its
     * status and message (only --plan auto and --tp auto need one) */
    const osdp_device *device;
    osdp_status device_status;
    const char *device_error;
    /* the backend's */
    osdp_dtype weights;            /* working weights (--precision) */
    osdp_dtype residual;           /* the residual stream (--residual-dtype; bf16 only with bf16 weights) */
    int pad_quantum, vocab_quantum;
} osdp_job_request;

/* The resolved job.  Rank 0 alone holds the search's report (planned,
 * searched); every rank holds the rest. */
typedef struct osdp_job_resolved {
    osdp_mesh mesh;
    int seq_len;                   /* T */
    osdp_step_geometry geo;        /* before the plan: its micro_batch --batch (or 8, or the checkpoint's;
                                      0: the planner's); the plan's own geometry is plan.geo */
    int global_batch;
    long total_steps;              /* the cosine horizon (a resume keeps the checkpoint's unless --lr-steps) */
    char resume_changes[512];      /* "; global batch 8 -> 16 (--global-batch)..." ("": as saved) */
    osdp_layout layout;            /* this rank's tensor-parallel parts */
    osdp_layout whole_model;       /* what MFU and the parameter count are of */
    osdp_plan plan;                /* micro-batch and accumulation in it */
    int stage_bounds[OSDP_MAX_CHUNKS + 1];   /* pp > 1: the chunks' operators (P V + 1 bounds) */
    int embedding_tied;            /* --plan zdp kept the embedding DP (its head is tied) */
    /* rank 0: what the searches chose, for the caller to report */
    int tp_chosen;                 /* --tp auto: the degree chosen (0: no such search) */
    int searched_3d;               /* --plan auto with a pipeline: the 3D search ran */
    int search_meshes, search_splits;
    int search_pp, search_dp, search_tp;   /* the 3D search's mesh */
    double search_s, search_step_s;
    int planned;                   /* --plan auto, flat: planner_result, planner_options and planner_device hold it */
    osdp_planner_result planner_result;
    osdp_planner_options planner_options;
    osdp_device planner_device;    /* the data-parallel group's level */
    osdp_cost_hierarchy planner_hierarchy;   /* planner_options.hierarchy points here */
    /* how far the resolution came (a failed one: what the caller may still report) */
    int have_mesh, have_geometry, have_layouts, have_plan;
    int *recompute_all;
    osdp_job_request req;
} osdp_job_resolved;

/* The device file as a run of this binary plans with: the runtime's element
 * sizes whatever the file gives (weights of `weights`, fp32 gradients and
 * activations), and a two-level file priced at the job's nodes of node_size
 * ranks when they differ from the file's (returns 1 then; 0 otherwise). */
int osdp_job_device_for_run(osdp_device *dev, osdp_dtype weights, int node_size, int world_size);

/* Collective over world; cfg: the model (the same on every rank). */
osdp_status osdp_job_resolve(const osdp_job_request *req, const osdp_model_config *cfg, MPI_Comm world,
                             osdp_job_resolved *out);
void osdp_job_resolved_free(osdp_job_resolved *job);

/* Collective over comm: root's plan (and root_status) to every rank; the
 * others allocate theirs.  Every rank returns the same status (root's
 * message when it failed); on failure no rank but root holds a plan. */
osdp_status osdp_plan_broadcast(osdp_plan *plan, osdp_status root_status, int root, MPI_Comm comm);

/* The cost model's step time (--cost-model) for the resolved plan with the
 * request's device file (the pipeline's stages' passes and messages when
 * pp > 1), whatever chose the plan; 0 without a device file. */
double osdp_job_predicted_step_s(const osdp_job_resolved *job);

#endif

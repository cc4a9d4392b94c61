/* One operator's master weights at world rank 0, wherever the mesh keeps
 * them (DESIGN.md §9): what weight dumps and samples during training read.
 *
 * comm holds every rank of the mesh in mesh order: world rank
 *     stage x (T D) + data index x T + tensor index
 * (T tensor-parallel ranks, D data-parallel ones).  The ranks of the stage
 * that owns the operator (every rank without a pipeline) gather it over
 * their data-parallel groups (osdp_runtime_gather_op), so each of them
 * holds its tensor-parallel part; the parts of data index 0 then go to
 * world rank 0 point to point (MPI; the gathered copies are host memory on
 * every backend), in tensor order.  The other stages' ranks take no part in
 * the gather and send nothing: an operator that lives on another stage
 * costs them nothing. */
#ifndef OSDP_CLI_GATHER_ROOT_H
#define OSDP_CLI_GATHER_ROOT_H

#include <mpi.h>
#include "osdp/runtime.h"

/* what world rank 0 does with tensor-parallel part `tp_part` of the operator
 * (the layout's op numel floats in `part`) */
typedef void (*osdp_part_sink)(int tp_part, const float *part, void *ctx);

/* The stage (0 .. P-1) that owns operator op; 0 without a pipeline. */
int osdp_op_stage(const osdp_runtime *rt, int op);

/* Collective over comm: world rank 0 receives the tensor-parallel parts of
 * operator op one after the other into part (op numel floats on every rank;
 * scratch on the others) and hands each to sink(t, part, ctx), t = 0 .. T-1
 * (sink may be NULL: with T = 1 part then holds the whole operator).  The
 * returned status is the same on every rank: OSDP_ERR_INPUT for an operator
 * of more than INT_MAX elements, or the gather's failure. */
osdp_status osdp_gather_op_to_root(osdp_runtime *rt, int op, float *part, MPI_Comm comm, osdp_part_sink sink, void *ctx);

#endif

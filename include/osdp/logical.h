/* The logical view of an operator: its tensors in their whole shapes
 * (logical_rows x logical_cols, the vocabulary unpadded), one after the
 * other in tensor order, whatever the tensor-parallel degree or the
 * vocabulary padding of the layout (osdp/layout.h).  The logical operator is
 * what initialisation numbers its random stream by, what checkpoints store
 * and what weight dumps write: at tp 1 without padding it is the operator's
 * flat buffer itself.
 *
 * A rank's part of a tensor maps to the logical tensor in runs
 * (osdp_tensor_logical_run); osdp_tensor_next_run joins the layout's runs
 * into maximal ones: consecutive logical indices, or padding. */
#ifndef OSDP_LOGICAL_H
#define OSDP_LOGICAL_H

#include <stddef.h>
#include "osdp/layout.h"

/* elements of the whole tensor */
size_t osdp_tensor_logical_numel(const osdp_tensor_desc *t);
/* first element of tensor k in the logical operator */
size_t osdp_op_logical_offset(const osdp_op_layout *op, int k);
/* elements of the logical operator */
size_t osdp_op_logical_numel(const osdp_op_layout *op);

/* The maximal run of tensor t's local elements from e on, below end (at most
 * t->numel), on tensor-parallel rank tp_rank: returns 1 and sets *logical
 * (the first one's logical index in the tensor) when they are logical
 * elements with consecutive indices, 0 when they are vocabulary padding;
 * *run >= 1 when e < end. */
int osdp_tensor_next_run(const osdp_tensor_desc *t, int tp_rank, size_t e, size_t end, size_t *logical, size_t *run);

/* Does tensor-parallel rank tp_rank own tensor t's logical elements, i.e.
 * is it the one rank of its group that writes and counts them?  Split
 * tensors: every rank (its own elements); replicated ones: rank 0. */
int osdp_tensor_tp_owner(const osdp_tensor_desc *t, int tp_rank);

/* Put the part `part` (op->numel local elements of tensor-parallel rank
 * tp_rank) into the logical operator `logical` (osdp_op_logical_numel
 * elements): the tensors the rank owns (osdp_tensor_tp_owner), padding
 * dropped.  Called for every rank of a group, it fills the whole operator. */
void osdp_op_part_to_logical(const osdp_op_layout *op, int tp_rank, const float *part, float *logical);

#endif

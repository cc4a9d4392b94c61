/* The logical view of an operator (see osdp/logical.h). */
#include "osdp/logical.h"

#include <string.h>

size_t osdp_tensor_logical_numel(const osdp_tensor_desc *t)
{
    return (size_t)t->logical_rows * (size_t)t->logical_cols;
}

size_t osdp_op_logical_offset(const osdp_op_layout *op, int k)
{
    size_t offset = 0;
    for (int j = 0; j < k; j++) offset += osdp_tensor_logical_numel(&op->tensor[j]);
    return offset;
}

size_t osdp_op_logical_numel(const osdp_op_layout *op)
{
    return osdp_op_logical_offset(op, op->n_tensors);
}

int osdp_tensor_next_run(const osdp_tensor_desc *t, int tp_rank, size_t e, size_t end, size_t *logical, size_t *run)
{
    size_t first = 0, n = 0;
    const int valid = osdp_tensor_logical_run(t, tp_rank, e, &first, &n);
    /* the layout's runs stop at column groups and rows; a neighbour that
     * continues alike (tp 1: the next group, the next row) joins the run */
    while (e + n < end) {
        size_t next = 0, more = 0;
        const int next_valid = osdp_tensor_logical_run(t, tp_rank, e + n, &next, &more);
        if (next_valid != valid || (valid && next != first + n)) break;
        n += more;
    }
    *logical = first;
    *run = e + n < end ? n : end - e;
    return valid;
}

int osdp_tensor_tp_owner(const osdp_tensor_desc *t, int tp_rank)
{
    return t->tp_split != OSDP_TP_REPLICATED || tp_rank == 0;
}

void osdp_op_part_to_logical(const osdp_op_layout *op, int tp_rank, const float *part, float *logical)
{
    for (int k = 0; k < op->n_tensors; k++) {
        const osdp_tensor_desc *t = &op->tensor[k];
        if (!osdp_tensor_tp_owner(t, tp_rank)) continue;
        const float *src = part + t->offset;
        float *dst = logical + osdp_op_logical_offset(op, k);
        size_t first, run;
        for (size_t e = 0; e < t->numel; e += run)
            if (osdp_tensor_next_run(t, tp_rank, e, t->numel, &first, &run))
                memcpy(dst + first, src + e, run * sizeof(float));
    }
}

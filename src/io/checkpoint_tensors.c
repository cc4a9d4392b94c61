/* Checkpoints: one operator's datasets, the part the reader and the writer
 * share (moving every tensor's pieces of one kind, closing the datasets). */
#include "config.h"
#include "checkpoint_internal.h"
#include "osdp/logical.h"
#include "util/watchdog.h"

#include <stdlib.h>

float *ck_shard_buffer(osdp_runtime *rt)
{
    size_t max_shard = 0;
    for (int i = 0; i < rt->layout->n_ops; i++) {
        float *state[OSDP_STATE_N_KINDS];
        size_t shard = osdp_runtime_op_shard(rt, i, state);
        if (shard > max_shard) max_shard = shard;
    }
    return malloc(max_shard * sizeof(float));
}

osdp_status ck_check_mesh(const osdp_runtime *rt, MPI_Comm comm, const char *path)
{
    int size;
    MPI_Comm_size(comm, &size);
    const int pp = ck_pp_size(rt);
    if (size == pp * rt->layout->tp_size * rt->N) return OSDP_OK;
    return osdp_error_set(OSDP_ERR_INPUT, "checkpoint %s: called on %d ranks, but the mesh is tp %d x dp %d x pp %d: the "
                          "communicator must hold every rank of the mesh", path, size, rt->layout->tp_size, rt->N, pp);
}

void ck_op_calls(const osdp_runtime *rt, int i, MPI_Comm comm, int *calls)
{
    const osdp_op_layout *op = &rt->layout->op[i];
    for (int t = 0; t < op->n_tensors; t++) {
        calls[t] = 0;
        osdp_shard_iter it = osdp_runtime_shards(rt, i);
        osdp_shard_segment seg;
        while (osdp_shard_next(&it, &seg)) calls[t] += ck_piece_calls(&op->tensor[t], seg.numel);
    }
    MPI_Allreduce(MPI_IN_PLACE, calls, op->n_tensors, MPI_INT, MPI_MAX, comm);
}

void ck_transfer_kind(osdp_runtime *rt, int tp_rank, int i, int kind, const hid_t *d, const int *calls, hid_t dxpl,
                      float *buf, int write, const char *path, uint64_t *sums, double *bytes, osdp_status *s)
{
    const osdp_op_layout *op = &rt->layout->op[i];
    char h5msg[512], name[200];
    for (int t = 0; t < op->n_tensors; t++) {
        herr_t e = 0;
        int made = 0;
        ck_dataset_name(kind, op, t, name, sizeof name);
        osdp_watchdog_phase("checkpoint %s %s: %s dataset %s", write ? "save" : "load", path, write ? "writing" : "reading",
                            name);
        osdp_shard_iter it = osdp_runtime_shards(rt, i);
        osdp_shard_segment seg;
        while (osdp_shard_next(&it, &seg)) {   /* each slice's segment of this rank */
            const int pieces = ck_piece_calls(&op->tensor[t], seg.numel);
            /* a hierarchical slice's copy on another node than the first: written by that node's rank,
             * read by all, its checksum counted once */
            uint64_t uncounted = 0;
            if (write && seg.replica) {
                for (int c = 0; c < pieces; c++)
                    if (ck_transfer_none(d[t], &op->tensor[t], dxpl, buf, write) < 0) e = -1;
            } else if (ck_transfer(d[t], &op->tensor[t], tp_rank, seg.flat_lo, seg.numel, seg.flat_hi, dxpl,
                                   buf + seg.local, write, seg.replica ? &uncounted : &sums[t]) < 0) {
                e = -1;
            }
            made += pieces;
        }
        for (; made < calls[t]; made++)   /* another stage's operator: take part in its transfers */
            if (ck_transfer_none(d[t], &op->tensor[t], dxpl, buf, write) < 0) e = -1;
        if (e < 0 && *s == OSDP_OK) {   /* the message now: a later HDF5 call clears the error stack */
            if (write)
                *s = osdp_error_set(OSDP_ERR_IO, "checkpoint %s: cannot write dataset %s: %s", path, name,
                                    ck_h5_error(h5msg, sizeof h5msg));
            else
                *s = osdp_error_set(OSDP_ERR_INPUT,
                                    "checkpoint %s: cannot read dataset %s (truncated or corrupt file?): %s", path,
                                    name, ck_h5_error(h5msg, sizeof h5msg));
            osdp_watchdog_failed(osdp_error_message());   /* the ranks must agree on it soon, or the job ends */
        }
        *bytes += (double)osdp_tensor_logical_numel(&op->tensor[t]) * sizeof(float);
    }
}

void ck_close_datasets(hid_t d[][OSDP_MAX_TENSORS_PER_OP], int kinds, int n_tensors)
{
    for (int k = 0; k < kinds; k++)
        for (int t = 0; t < n_tensors; t++)
            if (d[k][t] >= 0) H5Dclose(d[k][t]);
}

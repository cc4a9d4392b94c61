/* Checkpoints, phase one: the list of pieces (which elements of which
 * tensor this rank moves, and where they sit in its shard buffer), built
 * once from the layout and the rank's shards; and the walk over that list
 * that the writer and the reader share (checkpoint_write.c,
 * checkpoint_read.c), which only makes HDF5 calls. */
#include "config.h"
#include "checkpoint_internal.h"
#include "osdp/logical.h"
#include "util/watchdog.h"

#include <stdlib.h>
#include <string.h>

float *ckpt_shard_buffer(osdp_runtime *rt)
{
    size_t max_shard = 0;
    for (int i = 0; i < rt->layout->n_ops; i++) {
        float *state[OSDP_STATE_N_KINDS];
        size_t shard = osdp_runtime_op_shard(rt, i, state);
        if (shard > max_shard) max_shard = shard;
    }
    return malloc(max_shard * sizeof(float));
}

osdp_status ckpt_check_mesh(const osdp_runtime *rt, MPI_Comm comm, const char *path)
{
    int size;
    MPI_Comm_size(comm, &size);
    const int pp = ckpt_pp_size(rt);
    if (size == pp * rt->layout->tp_size * rt->N) return OSDP_OK;
    return osdp_error_set(OSDP_ERR_INPUT, "checkpoint %s: called on %d ranks, but the mesh is tp %d x dp %d x pp %d: the "
                          "communicator must hold every rank of the mesh", path, size, rt->layout->tp_size, rt->N, pp);
}

/* the (operator, tensor) slot of the list's ranges */
static size_t slot(int op, int t) { return (size_t)op * OSDP_MAX_TENSORS_PER_OP + (size_t)t; }

osdp_status ckpt_pieces_build(const osdp_runtime *rt, MPI_Comm comm, ckpt_piece_list *list)
{
    const osdp_layout *L = rt->layout;
    const size_t n_slots = (size_t)L->n_ops * OSDP_MAX_TENSORS_PER_OP;
    memset(list, 0, sizeof *list);
    /* every rank makes as many transfers of a tensor as the rank that makes
     * the most (collective MPI-IO needs it): one all-reduce for the file */
    int *calls = calloc(n_slots ? n_slots : 1, sizeof *calls);
    list->first = calloc(n_slots + 1, sizeof *list->first);
    int ok = calls && list->first;
    if (ok)
        for (int i = 0; i < L->n_ops; i++) {
            const osdp_op_layout *op = &L->op[i];
            for (int t = 0; t < op->n_tensors; t++) {
                osdp_shard_iter it = osdp_runtime_shards(rt, i);
                osdp_shard_segment seg;
                while (osdp_shard_next(&it, &seg)) calls[slot(i, t)] += ckpt_piece_calls(&op->tensor[t], seg.numel);
            }
        }
    /* the all-reduce is made whatever failed here: every rank takes part */
    int all_ok = ok;
    MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    if (all_ok) MPI_Allreduce(MPI_IN_PLACE, calls, (int)n_slots, MPI_INT, MPI_MAX, comm);
    size_t total = 0;
    for (size_t k = 0; all_ok && k < n_slots; k++) total += (size_t)calls[k];
    list->piece = all_ok ? calloc(total ? total : 1, sizeof *list->piece) : NULL;
    osdp_status s = list->piece ? OSDP_OK : osdp_error_set(OSDP_ERR_OOM, "checkpoint: out of host memory for the pieces");
    s = osdp_status_agree(s, comm);
    if (s != OSDP_OK) {
        free(calls);
        ckpt_pieces_free(list);
        return s;
    }
    size_t n = 0;
    for (int i = 0; i < L->n_ops; i++) {
        const osdp_op_layout *op = &L->op[i];
        for (int t = 0; t < OSDP_MAX_TENSORS_PER_OP; t++) {
            list->first[slot(i, t)] = n;
            if (t >= op->n_tensors) continue;
            const osdp_tensor_desc *td = &op->tensor[t];
            const int owner = osdp_tensor_tp_owner(td, rt->tp_rank);
            const size_t start = n;
            osdp_shard_iter it = osdp_runtime_shards(rt, i);
            osdp_shard_segment seg;
            while (osdp_shard_next(&it, &seg)) {   /* each slice's segment of this rank */
                const int pieces = ckpt_piece_calls(td, seg.numel);
                for (int c = 0; c < pieces; c++) {
                    ckpt_piece *p = &list->piece[n++];
                    size_t a = 0, b = 0, off = 0;
                    if (!ckpt_piece_range(td, seg.flat_lo, seg.numel, seg.flat_hi, c, &a, &b, &off)) continue;
                    p->a = a;
                    p->b = b;
                    p->buf_off = seg.local + off;
                    p->reads = 1;
                    /* a replicated tensor is written (and counted) by tensor-parallel rank 0 alone; a
                     * hierarchical slice's copy on another node than the first is read by its ranks but
                     * written, and counted, by the first node's */
                    p->writes = owner && !seg.replica;
                }
            }
            n = start + (size_t)calls[slot(i, t)];   /* the rest: empty transfers (another stage's operator) */
        }
    }
    list->first[n_slots] = n;
    list->n = n;
    free(calls);
    return OSDP_OK;
}

void ckpt_pieces_free(ckpt_piece_list *list)
{
    free(list->piece);
    free(list->first);
    memset(list, 0, sizeof *list);
}

/* one piece between dataset d and buf (the operator's shard): its logical
 * elements, or an empty transfer when this rank has nothing to move */
static herr_t move_piece(hid_t d, hid_t space, const osdp_tensor_desc *td, int tp_rank, const ckpt_piece *p, hid_t dxpl,
                         float *buf, int write)
{
    const int have = write ? p->writes : p->reads;
    if (!have) return ckpt_transfer_none(d, td, dxpl, buf, write);
    hsize_t count = (hsize_t)(p->b - p->a);
    hid_t mspace = H5Screate_simple(1, &count, NULL);
    herr_t e = mspace < 0 || space < 0 ? -1 : ckpt_select_part(space, mspace, td, tp_rank, p->a, p->b);
    float *at = buf + p->buf_off;
    if (e >= 0)
        e = write ? H5Dwrite(d, H5T_NATIVE_FLOAT, mspace, space, dxpl, at)
                  : H5Dread(d, H5T_NATIVE_FLOAT, mspace, space, dxpl, at);
    else
        ckpt_transfer_none(d, td, dxpl, at, write);   /* still take part */
    if (mspace >= 0) H5Sclose(mspace);
    return e;
}

void ckpt_move_kind(const ckpt_piece_list *list, const osdp_runtime *rt, int i, int kind, const hid_t *d, hid_t dxpl,
                    float *buf, int write, const char *path, uint64_t *sums, double *bytes, osdp_status *s)
{
    const osdp_op_layout *op = &rt->layout->op[i];
    char h5msg[512], name[200];
    for (int t = 0; t < op->n_tensors; t++) {
        const osdp_tensor_desc *td = &op->tensor[t];
        herr_t e = 0;
        ckpt_dataset_name(kind, op, t, name, sizeof name);
        osdp_watchdog_phase("checkpoint %s %s: %s dataset %s", write ? "save" : "load", path, write ? "writing" : "reading",
                            name);
        hid_t space = ckpt_tensor_space(td);
        for (size_t k = list->first[slot(i, t)]; k < list->first[slot(i, t) + 1]; k++) {
            const ckpt_piece *p = &list->piece[k];
            if (move_piece(d[t], space, td, rt->tp_rank, p, dxpl, buf, write) < 0) e = -1;
            else if (p->writes) sums[t] += ckpt_checksum_part(td, rt->tp_rank, buf + p->buf_off, p->a, p->b);
        }
        if (space >= 0) H5Sclose(space);
        if (e < 0 && *s == OSDP_OK) {   /* the message now: a later HDF5 call clears the error stack */
            if (write)
                *s = osdp_error_set(OSDP_ERR_IO, "checkpoint %s: cannot write dataset %s: %s", path, name,
                                    ckpt_h5_error(h5msg, sizeof h5msg));
            else
                *s = osdp_error_set(OSDP_ERR_INPUT,
                                    "checkpoint %s: cannot read dataset %s (truncated or corrupt file?): %s", path,
                                    name, ckpt_h5_error(h5msg, sizeof h5msg));
            osdp_watchdog_failed(osdp_error_message());   /* the ranks must agree on it soon, or the job ends */
        }
        *bytes += (double)osdp_tensor_logical_numel(td) * sizeof(float);
    }
}

void ckpt_close_datasets(hid_t d[][OSDP_MAX_TENSORS_PER_OP], int kinds, int n_tensors)
{
    for (int k = 0; k < kinds; k++)
        for (int t = 0; t < n_tensors; t++)
            if (d[k][t] >= 0) H5Dclose(d[k][t]);
}

/* Shared pieces of the checkpoint reader and writer (not a public header). */
#ifndef OSDP_CHECKPOINT_INTERNAL_H
#define OSDP_CHECKPOINT_INTERNAL_H

#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include "osdp/checkpoint.h"
#include "util/clock.h"
#include "osdp/layout.h"

/* the three stored state kinds, in file order */
enum { CKPT_MASTER, CKPT_M, CKPT_V, CKPT_N_KINDS };
/* the runtime's state kind each checkpoint kind holds (osdp/runtime.h) */
static const osdp_state_kind ckpt_state_kind[CKPT_N_KINDS] = {OSDP_STATE_MASTER, OSDP_STATE_M, OSDP_STATE_V};
extern const char *const ckpt_kind_group[CKPT_N_KINDS];    /* "/model", "/optim/m", "/optim/v" */

/* "/model/attn.3/qkv.weight" */
void ckpt_dataset_name(int kind, const osdp_op_layout *op, int t, char *buf, size_t n);

/* Agreement: every rank passes its status; if any failed, the first failing
 * rank's status and message become every rank's (returned and set). */

/* HDF5 error handling: silence the automatic stack printing for the
 * duration of a call, and turn the current error stack into a message. */
typedef struct ckpt_h5_quiet { H5E_auto2_t func; void *data; } ckpt_h5_quiet;
void ckpt_h5_quiet_begin(ckpt_h5_quiet *q);
void ckpt_h5_quiet_end(const ckpt_h5_quiet *q);
/* the innermost description of the last failing HDF5 call since the last
 * ckpt_h5_error (or "HDF5 reported no detail") */
const char *ckpt_h5_error(char *buf, size_t n);

/* The N-independent checksum: sum over elements i (row-major index in the
 * logical tensor) of fmix64(fmix64(i) ^ bits(x_i)) mod 2^64. */
uint64_t ckpt_checksum_partial(const float *x, size_t n, uint64_t first_index);

/* Pieces: the intersection of this rank's shard segment [lo, min(lo + shard,
 * limit)) with tensor t (limit: the end of the operator slice the segment
 * belongs to; what lies past it is padding), split into `n_calls` sub-ranges no longer than ckpt_max_elems() so that
 * one MPI-IO transfer stays below 2 GiB.  n_calls is the same on every rank
 * (computed from the shard size, not from this rank's piece). */
size_t ckpt_max_elems(void);
int ckpt_piece_calls(const osdp_tensor_desc *td, size_t shard);
/* sub-range `call` of the piece: tensor elements [*a, *b) and the position
 * of *a in the shard buffer; returns 0 when this rank has nothing */
int ckpt_piece_range(const osdp_tensor_desc *td, size_t lo, size_t shard, size_t limit, int call, size_t *a, size_t *b, size_t *buf_off);

/* Dataspace of the logical tensor (osdp/logical.h): (logical_rows,
 * logical_cols) for 2-D, (logical_cols) for 1-D */
hid_t ckpt_tensor_space(const osdp_tensor_desc *td);
/* Select the local elements [a, b) of tensor td on tensor-parallel rank
 * tp_rank (a piece of its part) that are logical elements: their logical
 * places in fspace (ckpt_tensor_space) and their places in mspace (1-D, b - a
 * elements, element 0 = local a), in the same (row-major) order; vocabulary
 * padding is left out; nothing when a == b.  A handful of hyperslab blocks
 * per piece: up to three row ranges (the tail of the first row, whole rows,
 * the head of the last row), each a block per column run of a
 * column-split tensor. */
herr_t ckpt_select_part(hid_t fspace, hid_t mspace, const osdp_tensor_desc *td, int tp_rank, size_t a, size_t b);
/* ckpt_checksum_partial over the logical elements of the piece (local [a, b),
 * piece[0] = local a) with their logical indices */
uint64_t ckpt_checksum_part(const osdp_tensor_desc *td, int tp_rank, const float *piece, size_t a, size_t b);
/* the pipeline degree of the runtime's mesh (1 without a pipeline) */
static inline int ckpt_pp_size(const osdp_runtime *rt) { return rt->opt.geo.pp_size > 1 ? rt->opt.geo.pp_size : 1; }
/* OSDP_ERR_INPUT (naming `path`) unless comm holds the whole mesh:
 * pp x tp_size x rt->N ranks (not collective: every rank finds the same) */
osdp_status ckpt_check_mesh(const osdp_runtime *rt, MPI_Comm comm, const char *path);

/* MPI-IO hints for the file: romio_cb_read / romio_cb_write set to
 * OSDP_CKPT_ROMIO_CB (automatic | enable | disable; default disable).  Free with
 * ckpt_mpi_info_free. */
MPI_Info ckpt_mpi_info(void);
void ckpt_mpi_info_free(MPI_Info *info);

/* Transfer property list: independent MPI-IO, or collective when
 * OSDP_CKPT_MPIO=collective or OSDP_CKPT_FLETCHER32=1 (see doc/checkpoint-format.md) */
hid_t ckpt_dxpl(void);
const char *ckpt_mpio_mode(void);
/* In collective mode, one H5Dwrite / H5Dread that selects nothing: the part
 * a rank without a piece takes in a collective transfer (buf: any host
 * buffer); nothing in independent mode.  Returns < 0 if it failed. */
herr_t ckpt_transfer_none(hid_t d, const osdp_tensor_desc *td, hid_t dxpl, float *buf, int write);
/* A host buffer of the largest operator shard's elements (NULL: out of memory) */
float *ckpt_shard_buffer(osdp_runtime *rt);

/* Phase one of a save or a load: the pieces.  One piece is one H5Dwrite /
 * H5Dread of one tensor: this rank's local elements [a, b) of tensor t of
 * operator op (its tensor-parallel part), at buf_off in the operator's
 * shard buffer.  reads: this rank reads them (every copy is read); writes:
 * this rank writes them and counts them in the tensor's checksum (a
 * replicated tensor: tensor-parallel rank 0 alone; a hierarchical slice's
 * copy on another node than the first: not that node's ranks), on a load
 * too.  A piece that moves nothing is an empty transfer: every rank makes
 * as many transfers of a tensor as the rank that makes the most (collective
 * MPI-IO needs it); on a pipeline the ranks of other stages make only
 * empty ones. */
typedef struct ckpt_piece {
    size_t a, b, buf_off;
    unsigned char reads, writes;
} ckpt_piece;
typedef struct ckpt_piece_list {
    ckpt_piece *piece;
    size_t n;
    /* operator i's tensor t: pieces [first[i * OSDP_MAX_TENSORS_PER_OP + t], the next entry) */
    size_t *first;
} ckpt_piece_list;
/* Collective over comm (one all-reduce and one agreement); OSDP_ERR_OOM on
 * every rank if any ran out of memory.  Free with ckpt_pieces_free. */
osdp_status ckpt_pieces_build(const osdp_runtime *rt, MPI_Comm comm, ckpt_piece_list *list);
void ckpt_pieces_free(ckpt_piece_list *list);
/* Phase two: kind `kind` of operator i, its pieces between buf (the
 * operator's shard) and datasets d[t]; adds each tensor's checksum to
 * sums[t] and its logical size to *bytes.  Every rank makes the same calls
 * whatever fails here; the first failure is kept in *s (left as it is
 * unless OSDP_OK), with a message naming the dataset (and, reading, the file
 * `path`), and told to the watchdog (util/watchdog.h: the ranks must agree
 * on it within its grace), whose label names `path` and each dataset as it
 * is moved. */
void ckpt_move_kind(const ckpt_piece_list *list, const osdp_runtime *rt, int i, int kind, const hid_t *d, hid_t dxpl,
                    float *buf, int write, const char *path, uint64_t *sums, double *bytes, osdp_status *s);
/* H5Dclose the open datasets (>= 0) of d[0..kinds)[0..n_tensors) */
void ckpt_close_datasets(hid_t d[][OSDP_MAX_TENSORS_PER_OP], int kinds, int n_tensors);

/* Attributes (scalar unless said) */
herr_t ckpt_attr_write_i64(hid_t loc, const char *name, int64_t v);
herr_t ckpt_attr_write_u64(hid_t loc, const char *name, uint64_t v);
herr_t ckpt_attr_write_u64v(hid_t loc, const char *name, const uint64_t *v, size_t n);
herr_t ckpt_attr_write_f32(hid_t loc, const char *name, float v);
herr_t ckpt_attr_write_str(hid_t loc, const char *name, const char *s);
/* readers: OSDP_OK, or OSDP_ERR_INPUT with a message naming `where` and the
 * attribute (missing / wrong type) */
osdp_status ckpt_attr_read_i64(hid_t loc, const char *where, const char *name, int64_t *v);
osdp_status ckpt_attr_read_u64(hid_t loc, const char *where, const char *name, uint64_t *v);
osdp_status ckpt_attr_read_f32(hid_t loc, const char *where, const char *name, float *v);
/* *s is malloc'd (free it) */
osdp_status ckpt_attr_read_str(hid_t loc, const char *where, const char *name, char **s);

/* The metadata checksum (doc/checkpoint-format.md): attribute
 * "metadata_manifest" of the root lists a digest of every root and /optim
 * attribute and seals itself.  write: once every metadata attribute is
 * written (collective, as every attribute write).  verify: OSDP_ERR_INPUT
 * naming the attribute that was added, removed or changed since the save. */
#define CKPT_MANIFEST_ATTR "metadata_manifest"
herr_t ckpt_manifest_write(hid_t file);
osdp_status ckpt_manifest_verify(hid_t file, const char *where);

/* Test hook: raise(SIGKILL) on the chosen rank when OSDP_CKPT_CRASH_AT == point */
void ckpt_crash_point(const char *point, long step, int rank, int n_ranks);

#endif

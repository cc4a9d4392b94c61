/* Checkpoints: what the reader and the writer share — names,
 * HDF5 error messages, the checksum, piece and selection arithmetic,
 * attributes (see osdp/checkpoint.h and doc/checkpoint-format.md). */
#include "checkpoint_internal.h"
#include "osdp/logical.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const ckpt_kind_group[CKPT_N_KINDS] = {"/model", "/optim/m", "/optim/v"};

void ckpt_dataset_name(int kind, const osdp_op_layout *op, int t, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s/%s", ckpt_kind_group[kind], op->name, op->tensor[t].name);
}

void osdp_ckpt_step_name(long step, char *buf, size_t n)
{
    snprintf(buf, n, "step_%08ld.h5", step);
}

long osdp_ckpt_parse_step_name(const char *name)
{
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strncmp(base, "step_", 5) != 0) return -1;
    const char *p = base + 5;
    long step = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (step > (long)1e15) return -1;
        step = step * 10 + (*p - '0');
    }
    if (digits < 8 || strcmp(p, ".h5") != 0) return -1;
    return step;
}

/* ---- HDF5 errors ----------------------------------------------------------------- */

/* The automatic error handler, while a checkpoint call runs: instead of
 * printing the stack, keep the innermost description of the last failing
 * API call (later API calls clear the stack itself). */
static char g_h5_last[512];

typedef struct { char *buf; size_t n; int found; } walk_ctx;

static herr_t walk_cb(unsigned n, const H5E_error2_t *err, void *data)
{
    (void)n;
    walk_ctx *w = data;
    if (w->found) return 0;
    if (err->desc && err->desc[0]) {
        snprintf(w->buf, w->n, "%s", err->desc);
        w->found = 1;
    } else {
        char minor[256] = "";
        if (H5Eget_msg(err->min_num, NULL, minor, sizeof minor) > 0) {
            snprintf(w->buf, w->n, "%s (in %s)", minor, err->func_name ? err->func_name : "HDF5");
            w->found = 1;
        }
    }
    return 0;
}

static herr_t capture_cb(hid_t estack, void *data)
{
    (void)data;
    walk_ctx w = {g_h5_last, sizeof g_h5_last, 0};
    H5Ewalk2(estack, H5E_WALK_UPWARD, walk_cb, &w);   /* innermost first */
    return 0;
}

void ckpt_h5_quiet_begin(ckpt_h5_quiet *q)
{
    H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data);
    H5Eset_auto2(H5E_DEFAULT, capture_cb, NULL);
    g_h5_last[0] = 0;
}

void ckpt_h5_quiet_end(const ckpt_h5_quiet *q)
{
    H5Eclear2(H5E_DEFAULT);
    H5Eset_auto2(H5E_DEFAULT, q->func, q->data);
}

const char *ckpt_h5_error(char *buf, size_t n)
{
    snprintf(buf, n, "%s", g_h5_last[0] ? g_h5_last : "HDF5 reported no detail");
    g_h5_last[0] = 0;
    for (char *c = buf; *c; c++)   /* one line: MPI-IO's error stack comes in several */
        if (*c == '\n') *c = ' ';
    return buf;
}

/* ---- checksum ---------------------------------------------------------------------- */

static inline uint64_t fmix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

uint64_t ckpt_checksum_partial(const float *x, size_t n, uint64_t first_index)
{
    uint64_t sum = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t bits;
        memcpy(&bits, &x[k], sizeof bits);
        sum += fmix64(fmix64(first_index + k) ^ (uint64_t)bits);
    }
    return sum;
}

/* ---- pieces and selections --------------------------------------------------------------- */

size_t ckpt_max_elems(void)
{
    static size_t cached = 0;
    if (!cached) {
        const char *e = getenv("OSDP_CKPT_MAX_ELEMS");   /* for tests of the split path */
        long v = e ? strtol(e, NULL, 10) : 0;
        cached = v > 0 ? (size_t)v : (size_t)1 << 28;      /* 1 GiB of floats per transfer */
    }
    return cached;
}

int ckpt_piece_calls(const osdp_tensor_desc *td, size_t shard)
{
    size_t most = td->numel < shard ? td->numel : shard, m = ckpt_max_elems();
    size_t calls = (most + m - 1) / m;
    return calls < 1 ? 1 : (int)calls;
}

int ckpt_piece_range(const osdp_tensor_desc *td, size_t lo, size_t shard, size_t limit, int call, size_t *a, size_t *b,
             size_t *buf_off)
{
    size_t t_lo = td->offset, t_hi = td->offset + td->numel, s_hi = lo + shard < limit ? lo + shard : limit;
    size_t pa = lo > t_lo ? lo : t_lo, pb = s_hi < t_hi ? s_hi : t_hi;
    if (pa >= pb) return 0;
    size_t m = ckpt_max_elems();
    size_t s = pa + (size_t)call * m;
    if (s >= pb) return 0;
    size_t e = pb - s > m ? s + m : pb;
    *a = s - t_lo;
    *b = e - t_lo;
    *buf_off = s - lo;
    return 1;
}

hid_t ckpt_tensor_space(const osdp_tensor_desc *td)
{
    hsize_t dims[2] = {(hsize_t)td->logical_rows, (hsize_t)td->logical_cols};
    if (td->ndim == 1) return H5Screate_simple(1, &dims[1], NULL);
    return H5Screate_simple(2, dims, NULL);
}

/* A selection being built block by block: the first block sets it, the
 * others are added (H5S_SELECT_OR). */
typedef struct selection { hid_t space; H5S_seloper_t op; } selection;

static herr_t select_block(selection *sel, int ndim, hsize_t row, hsize_t col, hsize_t rows, hsize_t cols)
{
    hsize_t start[2] = {row, col}, count[2] = {rows, cols};
    herr_t e = ndim == 1 ? H5Sselect_hyperslab(sel->space, sel->op, &start[1], NULL, &count[1], NULL)
                         : H5Sselect_hyperslab(sel->space, sel->op, start, NULL, count, NULL);
    sel->op = H5S_SELECT_OR;
    return e;
}

/* Add the row-major elements [a, b) of a (rows x cols) space: up to three
 * blocks (the tail of the first row, whole rows, the head of the last row). */
static herr_t select_range(selection *sel, int ndim, hsize_t C, size_t a, size_t b)
{
    hsize_t r0 = a / C, c0 = a % C, r1 = (b - 1) / C, c1 = (b - 1) % C;   /* inclusive end */
    if (r0 == r1) return select_block(sel, ndim, r0, c0, 1, c1 - c0 + 1);
    hsize_t full_first = r0, full_last = r1;   /* whole rows [full_first, full_last] */
    herr_t e = 0;
    if (c0 > 0) {
        e = select_block(sel, ndim, r0, c0, 1, C - c0);
        full_first = r0 + 1;
    }
    if (c1 < C - 1) full_last = r1 - 1;
    if (e >= 0 && full_first <= full_last && full_last != (hsize_t)-1)
        e = select_block(sel, ndim, full_first, 0, full_last - full_first + 1, C);
    if (e >= 0 && c1 < C - 1) e = select_block(sel, ndim, r1, 0, 1, c1 + 1);
    return e;
}

/* Add local rows [row, row + rows) x columns [c_lo, c_hi) of a column-split
 * tensor: every row of a rectangle holds the same logical columns, so each
 * run of the first row is one block of the file (logical columns) and one
 * strided block of the piece in memory (its first element: local a). */
static herr_t select_column_rows(selection *file, selection *mem, const osdp_tensor_desc *td, int tp_rank, size_t a,
                                 size_t row, size_t rows, size_t c_lo, size_t c_hi)
{
    const size_t C = (size_t)td->cols, LC = (size_t)td->logical_cols;
    size_t logical, run;
    herr_t e = 0;
    for (size_t c = c_lo; c < c_hi && e >= 0; c += run) {
        if (!osdp_tensor_next_run(td, tp_rank, row * C + c, row * C + c_hi, &logical, &run)) continue;
        e = select_block(file, td->ndim, logical / LC, logical % LC, rows, run);
        if (e < 0) break;
        /* whole local rows are one contiguous block (tp 1: the selection of a plain range) */
        const int whole_rows = run == C;
        hsize_t start = row * C + c - a, stride = C, count = whole_rows ? 1 : rows, block = whole_rows ? rows * C : run;
        e = H5Sselect_hyperslab(mem->space, mem->op, &start, count > 1 ? &stride : NULL, &count, &block);
        mem->op = H5S_SELECT_OR;
    }
    return e;
}

herr_t ckpt_select_part(hid_t fspace, hid_t mspace, const osdp_tensor_desc *td, int tp_rank, size_t a, size_t b)
{
    herr_t e = H5Sselect_none(fspace);
    if (e >= 0) e = H5Sselect_none(mspace);
    if (e < 0 || a >= b) return e;
    selection file = {fspace, H5S_SELECT_SET}, mem = {mspace, H5S_SELECT_SET};
    const size_t C = (size_t)td->cols;
    if (td->tp_split == OSDP_TP_COLS) {
        /* a partial first row, whole rows, a partial last row */
        size_t r0 = a / C, c0 = a % C, r1 = (b - 1) / C, c1 = (b - 1) % C + 1;
        if (r0 == r1) return select_column_rows(&file, &mem, td, tp_rank, a, r0, 1, c0, c1);
        size_t full_first = r0, full_end = r1 + 1;
        if (c0 > 0) {
            e = select_column_rows(&file, &mem, td, tp_rank, a, r0, 1, c0, C);
            full_first = r0 + 1;
        }
        if (c1 < C) full_end = r1;
        if (e >= 0 && full_first < full_end)
            e = select_column_rows(&file, &mem, td, tp_rank, a, full_first, full_end - full_first, 0, C);
        if (e >= 0 && c1 < C) e = select_column_rows(&file, &mem, td, tp_rank, a, r1, 1, 0, c1);
        return e;
    }
    /* whole rows or the whole tensor: each run is a range of the logical tensor */
    size_t logical, run;
    for (size_t x = a; x < b && e >= 0; x += run) {
        if (!osdp_tensor_next_run(td, tp_rank, x, b, &logical, &run)) continue;
        e = select_range(&file, td->ndim, (hsize_t)td->logical_cols, logical, logical + run);
        if (e >= 0) e = select_block(&mem, 1, 0, x - a, 1, run);
    }
    return e;
}

uint64_t ckpt_checksum_part(const osdp_tensor_desc *td, int tp_rank, const float *piece, size_t a, size_t b)
{
    uint64_t sum = 0;
    size_t logical, run;
    for (size_t x = a; x < b; x += run)
        if (osdp_tensor_next_run(td, tp_rank, x, b, &logical, &run))
            sum += ckpt_checksum_partial(piece + (x - a), run, logical);
    return sum;
}

/* ---- transfers ------------------------------------------------------------------------------- */

MPI_Info ckpt_mpi_info(void)
{
    /* Each rank's piece of a contiguous dataset is one contiguous byte
     * range: ROMIO's two-phase collective buffering only adds copies and
     * rounds (4x slower saves measured, doc/checkpoint-format.md), so it is
     * off unless asked for. */
    const char *cb = getenv("OSDP_CKPT_ROMIO_CB");
    if (!cb || !*cb) cb = "disable";
    MPI_Info info;
    if (MPI_Info_create(&info) != MPI_SUCCESS) return MPI_INFO_NULL;
    MPI_Info_set(info, "romio_cb_write", cb);
    MPI_Info_set(info, "romio_cb_read", cb);
    /* no data sieving on writes: the metadata flush (one collective write of
     * scattered entries) would otherwise read and rewrite the whole extent
     * between them, the raw data included, which needs the whole file's
     * space again: the close of a save that failed on a full disk (emptied
     * to make room, empty_failed_file) then fails too, and leaves the file
     * open in HDF5 until MPI_Finalize crashes in it */
    MPI_Info_set(info, "romio_ds_write", "disable");
    return info;
}

void ckpt_mpi_info_free(MPI_Info *info)
{
    if (*info != MPI_INFO_NULL) MPI_Info_free(info);
}

const char *ckpt_mpio_mode(void)
{
    const char *e = getenv("OSDP_CKPT_MPIO"), *f = getenv("OSDP_CKPT_FLETCHER32");
    if (f && strcmp(f, "1") == 0) return "collective";   /* parallel filtered writes need collective I/O */
    /* independent by default: a transfer that fails on one rank (a full disk)
     * then leaves the ranks in step, the next agreement tells them all, and
     * the save fails cleanly; a collective H5Dwrite that fails on one rank
     * skips MPI_File_set_view while the others wait in it (measured: both
     * ranks spin for ever).  Also the faster here (doc/checkpoint-format.md) */
    return e && strcmp(e, "collective") == 0 ? "collective" : "independent";
}

hid_t ckpt_dxpl(void)
{
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    if (dxpl < 0) return dxpl;
    if (H5Pset_dxpl_mpio(dxpl, strcmp(ckpt_mpio_mode(), "independent") == 0 ? H5FD_MPIO_INDEPENDENT
                                                                          : H5FD_MPIO_COLLECTIVE) < 0) {
        H5Pclose(dxpl);
        return -1;
    }
    return dxpl;
}

herr_t ckpt_transfer_none(hid_t d, const osdp_tensor_desc *td, hid_t dxpl, float *buf, int write)
{
    if (strcmp(ckpt_mpio_mode(), "collective") != 0) return 0;
    hsize_t one = 1;
    hid_t none_m = H5Screate_simple(1, &one, NULL), none_f = ckpt_tensor_space(td);
    herr_t e = none_m >= 0 && none_f >= 0 && H5Sselect_none(none_m) >= 0 && H5Sselect_none(none_f) >= 0 ? 0 : -1;
    if (e >= 0)
        e = write ? H5Dwrite(d, H5T_NATIVE_FLOAT, none_m, none_f, dxpl, buf)
                  : H5Dread(d, H5T_NATIVE_FLOAT, none_m, none_f, dxpl, buf);
    if (none_m >= 0) H5Sclose(none_m);
    if (none_f >= 0) H5Sclose(none_f);
    return e;
}

/* ---- attributes ------------------------------------------------------------------------------ */

static herr_t attr_write(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, hid_t space, const void *v)
{
    if (space < 0) return -1;
    hid_t a = H5Acreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = a < 0 ? -1 : H5Awrite(a, mem_type, v);
    if (a >= 0 && H5Aclose(a) < 0) e = -1;
    H5Sclose(space);
    return e;
}

herr_t ckpt_attr_write_i64(hid_t loc, const char *name, int64_t v)
{
    return attr_write(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, H5Screate(H5S_SCALAR), &v);
}

herr_t ckpt_attr_write_u64(hid_t loc, const char *name, uint64_t v)
{
    return attr_write(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, H5Screate(H5S_SCALAR), &v);
}

herr_t ckpt_attr_write_u64v(hid_t loc, const char *name, const uint64_t *v, size_t n)
{
    hsize_t dim = n;
    return attr_write(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, H5Screate_simple(1, &dim, NULL), v);
}

herr_t ckpt_attr_write_f32(hid_t loc, const char *name, float v)
{
    return attr_write(loc, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, H5Screate(H5S_SCALAR), &v);
}

herr_t ckpt_attr_write_str(hid_t loc, const char *name, const char *s)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return -1;
    herr_t e = H5Tset_size(t, strlen(s) + 1);
    if (e >= 0) e = H5Tset_strpad(t, H5T_STR_NULLTERM);
    if (e >= 0) e = attr_write(loc, name, t, t, H5Screate(H5S_SCALAR), s);
    H5Tclose(t);
    return e;
}

/* open attribute `name` of loc and check its class and element count */
static osdp_status attr_open(hid_t loc, const char *where, const char *name, H5T_class_t cls, hid_t *out)
{
    htri_t ex = H5Aexists(loc, name);
    if (ex <= 0) return osdp_error_set(OSDP_ERR_INPUT, "%s: missing attribute '%s'", where, name);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return osdp_error_set(OSDP_ERR_INPUT, "%s: cannot open attribute '%s' (corrupt file?)", where, name);
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    hssize_t npoints = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    H5T_class_t c = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    if (c != cls || npoints != 1) {
        H5Aclose(a);
        return osdp_error_set(OSDP_ERR_INPUT, "%s: attribute '%s' has the wrong type or shape", where, name);
    }
    *out = a;
    return OSDP_OK;
}

static osdp_status attr_read_num(hid_t loc, const char *where, const char *name, H5T_class_t cls, hid_t mem_type, void *v)
{
    hid_t a;
    osdp_status s = attr_open(loc, where, name, cls, &a);
    if (s != OSDP_OK) return s;
    herr_t e = H5Aread(a, mem_type, v);
    H5Aclose(a);
    return e < 0 ? osdp_error_set(OSDP_ERR_INPUT, "%s: cannot read attribute '%s' (corrupt file?)", where, name) : OSDP_OK;
}

osdp_status ckpt_attr_read_i64(hid_t loc, const char *where, const char *name, int64_t *v)
{
    return attr_read_num(loc, where, name, H5T_INTEGER, H5T_NATIVE_INT64, v);
}

osdp_status ckpt_attr_read_u64(hid_t loc, const char *where, const char *name, uint64_t *v)
{
    return attr_read_num(loc, where, name, H5T_INTEGER, H5T_NATIVE_UINT64, v);
}

osdp_status ckpt_attr_read_f32(hid_t loc, const char *where, const char *name, float *v)
{
    return attr_read_num(loc, where, name, H5T_FLOAT, H5T_NATIVE_FLOAT, v);
}

osdp_status ckpt_attr_read_str(hid_t loc, const char *where, const char *name, char **out)
{
    hid_t a;
    *out = NULL;
    osdp_status s = attr_open(loc, where, name, H5T_STRING, &a);
    if (s != OSDP_OK) return s;
    hid_t t = H5Aget_type(a);
    herr_t e = -1;
    char *str = NULL;
    if (t >= 0 && H5Tis_variable_str(t) > 0) {          /* written by h5py and friends */
        char *vl = NULL;
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        e = H5Aread(a, mt, &vl);
        if (e >= 0 && vl) {
            str = strdup(vl);
            H5free_memory(vl);
        }
        H5Tclose(mt);
    } else if (t >= 0) {
        size_t n = H5Tget_size(t);
        str = calloc(n + 1, 1);
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, n + 1);
        H5Tset_strpad(mt, H5T_STR_NULLTERM);
        if (str) e = H5Aread(a, mt, str);
        H5Tclose(mt);
    }
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    if (e < 0 || !str) {
        free(str);
        return osdp_error_set(OSDP_ERR_INPUT, "%s: cannot read attribute '%s' (corrupt file?)", where, name);
    }
    *out = str;
    return OSDP_OK;
}

/* ---- metadata manifest ------------------------------------------------------------------------ */

/* One line per metadata attribute, "NAME DIGEST" (root attributes by name,
 * then /optim's as "/optim/NAME"), and a last line "manifest DIGEST" over
 * the lines before it.  The digest covers the name, the type class, the
 * element count and the stored bytes (a variable-length string: its
 * characters). */
typedef struct manifest_text { char *text; size_t len, cap; int failed; const char *prefix; } manifest_text;

static void manifest_append(manifest_text *m, const char *s)
{
    size_t n = strlen(s);
    if (m->len + n + 1 > m->cap) {
        size_t cap = (m->len + n + 1) * 2;
        char *p = realloc(m->text, cap);
        if (!p) { m->failed = 1; return; }
        m->text = p;
        m->cap = cap;
    }
    memcpy(m->text + m->len, s, n + 1);
    m->len += n;
}

static uint64_t digest_bytes(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;   /* FNV-1a */
    return h;
}

static herr_t manifest_attr(hid_t loc, const char *name, const H5A_info_t *info, void *data)
{
    (void)info;
    manifest_text *m = data;
    if (strcmp(name, CKPT_MANIFEST_ATTR) == 0) return 0;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT), t = a >= 0 ? H5Aget_type(a) : -1, sp = a >= 0 ? H5Aget_space(a) : -1;
    hssize_t npoints = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    H5T_class_t cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    uint64_t h = digest_bytes(14695981039346656037ULL, name, strlen(name) + 1);
    h = digest_bytes(h, &cls, sizeof cls);
    h = digest_bytes(h, &npoints, sizeof npoints);
    herr_t e = a < 0 || t < 0 || npoints < 0 ? -1 : 0;
    if (e >= 0 && H5Tis_variable_str(t) > 0) {   /* written by h5py and friends: the characters count */
        char **strs = calloc((size_t)npoints, sizeof *strs);
        e = strs ? H5Aread(a, t, strs) : -1;
        for (hssize_t i = 0; e >= 0 && i < npoints; i++) h = digest_bytes(h, strs[i] ? strs[i] : "", strs[i] ? strlen(strs[i]) + 1 : 1);
        if (e >= 0) H5Dvlen_reclaim(t, sp, H5P_DEFAULT, strs);
        free(strs);
    } else if (e >= 0) {
        size_t bytes = H5Tget_size(t) * (size_t)npoints;
        unsigned char *raw = malloc(bytes ? bytes : 1);
        e = raw ? H5Aread(a, t, raw) : -1;
        if (e >= 0) h = digest_bytes(h, raw, bytes);
        free(raw);
    }
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    if (a >= 0) H5Aclose(a);
    if (e < 0) { m->failed = 1; return -1; }
    char line[320];
    snprintf(line, sizeof line, "%s%s %016llx\n", m->prefix, name, (unsigned long long)fmix64(h));
    manifest_append(m, line);
    return 0;
}

/* the manifest of the file as it is now, without its last line; NULL on failure */
static char *manifest_build(hid_t file)
{
    manifest_text m = {NULL, 0, 0, 0, ""};
    manifest_append(&m, "");
    if (H5Aiterate2(file, H5_INDEX_NAME, H5_ITER_INC, NULL, manifest_attr, &m) < 0) m.failed = 1;
    hid_t g = H5Lexists(file, "/optim", H5P_DEFAULT) > 0 ? H5Gopen2(file, "/optim", H5P_DEFAULT) : -1;
    m.prefix = "/optim/";
    if (g >= 0 && H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_INC, NULL, manifest_attr, &m) < 0) m.failed = 1;
    if (g >= 0) H5Gclose(g);
    if (m.failed) { free(m.text); return NULL; }
    return m.text;
}

static void manifest_seal_line(const char *body, char *line, size_t n)
{
    snprintf(line, n, "manifest %016llx\n", (unsigned long long)fmix64(digest_bytes(14695981039346656037ULL, body, strlen(body))));
}

herr_t ckpt_manifest_write(hid_t file)
{
    char *body = manifest_build(file), seal[64];
    if (!body) return -1;
    manifest_seal_line(body, seal, sizeof seal);
    manifest_text m = {body, strlen(body), strlen(body) + 1, 0, ""};
    manifest_append(&m, seal);
    herr_t e = m.failed ? -1 : ckpt_attr_write_str(file, CKPT_MANIFEST_ATTR, m.text);
    free(m.text);
    return e;
}

/* the digest of `name` in a manifest text, NULL when absent */
static const char *manifest_find(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ') return p + n + 1;
    return NULL;
}

osdp_status ckpt_manifest_verify(hid_t file, const char *where)
{
    char *stored = NULL;
    osdp_status s = ckpt_attr_read_str(file, where, CKPT_MANIFEST_ATTR, &stored);
    if (s != OSDP_OK) return s;
    char *now = manifest_build(file), seal[64];
    if (!now) {
        free(stored);
        return osdp_error_set(OSDP_ERR_INPUT, "%s: cannot read the metadata attributes (corrupt file?)", where);
    }
    /* the manifest itself: its last line seals the lines before it */
    size_t len = strlen(stored);
    char *last = NULL;
    if (len > 1 && stored[len - 1] == '\n') {
        stored[len - 1] = 0;
        last = strrchr(stored, '\n');
        stored[len - 1] = '\n';
        last = last ? last + 1 : stored;
    }
    int sealed = 0;
    if (last && strncmp(last, "manifest ", 9) == 0) {
        char first = *last;
        *last = 0;   /* the body alone */
        manifest_seal_line(stored, seal, sizeof seal);
        *last = first;
        sealed = strcmp(last, seal) == 0;
    }
    if (!sealed) s = osdp_error_set(OSDP_ERR_INPUT, "%s: attribute %s does not match its own checksum (edited?)", where,
                                    CKPT_MANIFEST_ATTR);
    /* every attribute as it is now against its line, and every line against the file */
    for (const char *p = now; s == OSDP_OK && *p; p = strchr(p, '\n') + 1) {
        char name[256];
        size_t n = strcspn(p, " ");
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), p);
        const char *want = manifest_find(stored, name);
        if (!want)
            s = osdp_error_set(OSDP_ERR_INPUT, "%s: attribute %s is not in the metadata manifest (added after the save?)",
                               where, name);
        else if (strncmp(want, p + n + 1, 16) != 0)
            s = osdp_error_set(OSDP_ERR_INPUT, "%s: attribute %s does not match the metadata checksum (changed after the "
                               "save): the file is refused", where, name);
    }
    for (const char *p = stored; s == OSDP_OK && last && p < last; p = strchr(p, '\n') + 1) {
        char name[256];
        size_t n = strcspn(p, " ");
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), p);
        if (!manifest_find(now, name))
            s = osdp_error_set(OSDP_ERR_INPUT, "%s: attribute %s of the metadata manifest is missing", where, name);
    }
    free(stored);
    free(now);
    return s;
}

/* ---- test hook ------------------------------------------------------------------------------- */

void ckpt_crash_point(const char *point, long step, int rank, int n_ranks)
{
    const char *at = getenv("OSDP_CKPT_CRASH_AT");
    if (!at || strcmp(at, point) != 0) return;
    const char *st = getenv("OSDP_CKPT_CRASH_STEP");
    if (st && *st && strtol(st, NULL, 10) != step) return;
    const char *rk = getenv("OSDP_CKPT_CRASH_RANK");
    int victim = rk && *rk ? (int)strtol(rk, NULL, 10) : (n_ranks > 1 ? 1 : 0);
    if (rank != victim) return;
    const char *how = getenv("OSDP_CKPT_CRASH_SIGNAL");   /* STOP: hang without dying (a rank stuck in a driver) */
    const int stop = how && strcmp(how, "STOP") == 0;
    fprintf(stderr, "osdp_gpt: rank %d: OSDP_CKPT_CRASH_AT=%s: %s myself during the save of step %ld\n",
            rank, point, stop ? "stopping" : "killing", step);
    fflush(stderr);
    raise(stop ? SIGSTOP : SIGKILL);
}

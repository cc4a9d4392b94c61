/* Checkpoints: the collective reader (see osdp/checkpoint.h). */
#include "checkpoint_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Open `path` read-only with the MPI-IO driver on every rank. */
static osdp_status open_file(const char *path, MPI_Comm comm, hid_t *fapl_out, hid_t *file_out)
{
    char h5msg[512];
    struct stat sb;
    *fapl_out = *file_out = -1;
    osdp_status s = OSDP_OK;
    if (stat(path, &sb) != 0)
        s = osdp_error_set(OSDP_ERR_IO, "checkpoint %s: cannot open: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        s = osdp_error_set(OSDP_ERR_IO, "checkpoint %s: not a regular file", path);
    s = osdp_status_agree(s, comm);
    if (s != OSDP_OK) return s;
    int rank;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0 && H5Fis_hdf5(path) <= 0)
        s = osdp_error_set(OSDP_ERR_INPUT, "checkpoint %s: not an HDF5 file (no HDF5 signature: corrupt, truncated or another format)", path);
    s = osdp_status_agree(s, comm);
    if (s != OSDP_OK) return s;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0) {
        MPI_Info hints = ckpt_mpi_info();
        H5Pset_fapl_mpio(fapl, comm, hints);   /* copies the hints */
        ckpt_mpi_info_free(&hints);
    }
    hid_t file = fapl >= 0 ? H5Fopen(path, H5F_ACC_RDONLY, fapl) : -1;
    if (file < 0)
        s = osdp_error_set(OSDP_ERR_INPUT, "checkpoint %s: not a readable HDF5 file (truncated or corrupt): %s", path,
                           ckpt_h5_error(h5msg, sizeof h5msg));
    s = osdp_status_agree(s, comm);
    if (s != OSDP_OK) {
        if (file >= 0) H5Fclose(file);
        if (fapl >= 0) H5Pclose(fapl);
        return s;
    }
    *fapl_out = fapl;
    *file_out = file;
    return OSDP_OK;
}

/* The mesh the file was saved on; files from before the mesh were saved on
 * n_ranks data-parallel ranks. */
static osdp_status read_mesh(hid_t file, const char *where, osdp_ckpt_info *info)
{
    int64_t tp = 1, dp = info->n_ranks, pp = 1;
    osdp_status s = OSDP_OK;
    if (H5Aexists(file, "mesh_tp") > 0) {
        s = ckpt_attr_read_i64(file, where, "mesh_tp", &tp);
        if (s == OSDP_OK) s = ckpt_attr_read_i64(file, where, "mesh_dp", &dp);
        if (s == OSDP_OK) s = ckpt_attr_read_i64(file, where, "mesh_pp", &pp);
        if (s == OSDP_OK && (tp < 1 || dp < 1 || pp < 1 || tp * dp * pp != info->n_ranks))
            s = osdp_error_set(OSDP_ERR_INPUT, "%s: attributes mesh_tp x mesh_dp x mesh_pp = %lld x %lld x %lld do not "
                               "make n_ranks = %d", where, (long long)tp, (long long)dp, (long long)pp, info->n_ranks);
    }
    info->geo.tp_size = (int)tp;
    info->geo.n_ranks = (int)dp;
    info->geo.pp_size = (int)pp;
    return s;
}

/* Root and /optim attributes into info; *model_text (malloc'd) is the stored
 * description when asked.  Refuses a newer (or invalid) format version. */
static osdp_status read_root(hid_t file, const char *path, osdp_ckpt_info *info, char **model_text)
{
    char where[4300];
    int64_t v;
    uint64_t u;
    memset(info, 0, sizeof *info);
    snprintf(where, sizeof where, "checkpoint %s", path);
#define TRYS(expr) do { osdp_status s_ = (expr); if (s_ != OSDP_OK) return s_; } while (0)
    TRYS(ckpt_attr_read_i64(file, where, "format_version", &v));
    if (v > OSDP_CKPT_FORMAT_VERSION)
        return osdp_error_set(OSDP_ERR_INPUT, "%s: attribute format_version = %lld is newer than this osdp_gpt supports (%d): "
                              "use a newer osdp_gpt", where, (long long)v, OSDP_CKPT_FORMAT_VERSION);
    if (v < 1) return osdp_error_set(OSDP_ERR_INPUT, "%s: attribute format_version = %lld is invalid", where, (long long)v);
    info->format_version = (int)v;
    TRYS(ckpt_manifest_verify(file, where));   /* before any other attribute is believed */
    char *str = NULL;
    TRYS(ckpt_attr_read_str(file, where, "checksum_algorithm", &str));
    int known = strcmp(str, OSDP_CKPT_CHECKSUM_ALGORITHM) == 0;
    free(str);
    if (!known) return osdp_error_set(OSDP_ERR_INPUT, "%s: attribute checksum_algorithm: unknown algorithm", where);
    if (H5Aexists(file, "content") > 0) {   /* absent in training checkpoints */
        TRYS(ckpt_attr_read_str(file, where, "content", &str));
        info->weights_only = strcmp(str, "weights") == 0;
        int training = strcmp(str, "training-state") == 0;
        free(str);
        if (!info->weights_only && !training)
            return osdp_error_set(OSDP_ERR_INPUT, "%s: attribute content: expected \"weights\"", where);
    }
    if (info->weights_only) {   /* the model, nothing of a run */
        TRYS(ckpt_attr_read_u64(file, where, "model_hash", &u));
        info->model_hash = u;
        TRYS(ckpt_attr_read_str(file, where, "model_name", &str));
        snprintf(info->model_name, sizeof info->model_name, "%s", str);
        free(str);
        if (model_text) TRYS(ckpt_attr_read_str(file, where, "model_description", model_text));
        return OSDP_OK;
    }
    TRYS(ckpt_attr_read_i64(file, where, "step", &v));
    if (v < 0) return osdp_error_set(OSDP_ERR_INPUT, "%s: attribute step = %lld is invalid", where, (long long)v);
    info->step = (long)v;
    TRYS(ckpt_attr_read_u64(file, where, "seed", &u));
    info->seed = u;
    TRYS(ckpt_attr_read_i64(file, where, "n_ranks", &v));
    info->n_ranks = (int)v;
    TRYS(read_mesh(file, where, info));
    TRYS(ckpt_attr_read_u64(file, where, "model_hash", &u));
    info->model_hash = u;
    TRYS(ckpt_attr_read_str(file, where, "model_name", &str));
    snprintf(info->model_name, sizeof info->model_name, "%s", str);
    free(str);
    TRYS(ckpt_attr_read_u64(file, where, "plan_hash", &u));
    info->plan_hash = u;
    TRYS(ckpt_attr_read_i64(file, where, "micro_batch", &v));
    info->geo.micro_batch = (int)v;
    TRYS(ckpt_attr_read_i64(file, where, "accum_steps", &v));
    info->geo.accum_steps = (int)v;
    TRYS(ckpt_attr_read_i64(file, where, "global_batch", &v));
    info->global_batch = (long)v;
    TRYS(ckpt_attr_read_i64(file, where, "seq_len", &v));
    info->seq_len = (int)v;
    if (model_text) TRYS(ckpt_attr_read_str(file, where, "model_description", model_text));

    htri_t has = H5Lexists(file, "/optim", H5P_DEFAULT);
    if (has <= 0) return osdp_error_set(OSDP_ERR_INPUT, "%s: missing group /optim", where);
    hid_t g = H5Gopen2(file, "/optim", H5P_DEFAULT);
    if (g < 0) return osdp_error_set(OSDP_ERR_INPUT, "%s: cannot open group /optim (corrupt file?)", where);
    snprintf(where, sizeof where, "checkpoint %s: /optim", path);
    osdp_optim_config *o = &info->optim;
    osdp_status s = ckpt_attr_read_f32(g, where, "lr", &o->lr);
    if (s == OSDP_OK) s = ckpt_attr_read_f32(g, where, "min_lr_frac", &o->min_lr_frac);
    if (s == OSDP_OK && (s = ckpt_attr_read_i64(g, where, "warmup_steps", &v)) == OSDP_OK) o->warmup_steps = (int)v;
    if (s == OSDP_OK && (s = ckpt_attr_read_i64(g, where, "total_steps", &v)) == OSDP_OK) o->total_steps = (long)v;
    if (s == OSDP_OK) s = ckpt_attr_read_f32(g, where, "beta1", &o->beta1);
    if (s == OSDP_OK) s = ckpt_attr_read_f32(g, where, "beta2", &o->beta2);
    if (s == OSDP_OK) s = ckpt_attr_read_f32(g, where, "eps", &o->eps);
    if (s == OSDP_OK) s = ckpt_attr_read_f32(g, where, "weight_decay", &o->weight_decay);
    if (s == OSDP_OK) s = ckpt_attr_read_f32(g, where, "grad_clip", &o->grad_clip);
    H5Gclose(g);
#undef TRYS
    return s;
}

static void close_file(hid_t fapl, hid_t file)
{
    if (file >= 0) H5Fclose(file);
    if (fapl >= 0) H5Pclose(fapl);
}

/* A weights file holds no run to continue (every rank reads the same attribute: no agreement needed) */
static osdp_status weights_file_refused(const char *path)
{
    return osdp_error_set(OSDP_ERR_INPUT, "checkpoint %s holds weights only (attribute content = \"weights\"): there is no "
                          "run to resume; start from its weights with --init-from", path);
}

osdp_status osdp_ckpt_read_info(const char *path, MPI_Comm comm, osdp_ckpt_info *info)
{
    double t0 = osdp_now_seconds();
    ckpt_h5_quiet quiet;
    ckpt_h5_quiet_begin(&quiet);
    hid_t fapl, file;
    osdp_status s = open_file(path, comm, &fapl, &file);
    if (s == OSDP_OK) s = osdp_status_agree(read_root(file, path, info, NULL), comm);
    if (s == OSDP_OK && info->weights_only) s = weights_file_refused(path);
    close_file(fapl, file);
    ckpt_h5_quiet_end(&quiet);
    if (s == OSDP_OK) info->seconds = osdp_now_seconds() - t0;
    return s;
}

osdp_status osdp_ckpt_read_model(const char *path, MPI_Comm comm, osdp_model_config *cfg)
{
    ckpt_h5_quiet quiet;
    ckpt_h5_quiet_begin(&quiet);
    hid_t fapl, file;
    osdp_ckpt_info info;
    char *text = NULL;
    osdp_status s = open_file(path, comm, &fapl, &file);
    if (s == OSDP_OK) s = osdp_status_agree(read_root(file, path, &info, &text), comm);
    if (s == OSDP_OK) s = osdp_status_agree(osdp_model_config_parse(cfg, text, path), comm);
    close_file(fapl, file);
    ckpt_h5_quiet_end(&quiet);
    free(text);
    return s;
}

/* does every component of the absolute path `name` exist? */
static int object_exists(hid_t file, const char *name)
{
    char part[256];
    const char *p = name;
    for (;;) {
        p = strchr(p + 1, '/');
        size_t n = p ? (size_t)(p - name) : strlen(name);
        if (n >= sizeof part) return 0;
        memcpy(part, name, n);
        part[n] = 0;
        if (H5Lexists(file, part, H5P_DEFAULT) <= 0) return 0;
        if (!p) return 1;
    }
}

static void describe_model(const osdp_model_config *c, char *buf, size_t n)
{
    snprintf(buf, n, "'%s' (n_layer=%d n_head=%d n_embd=%d vocab=%d ctx=%d)", c->name, c->n_layer, c->n_head, c->n_embd,
             c->vocab, c->ctx);
}

/* Open dataset `name` and check that it is a float32 tensor of td's shape;
 * read its checksum attribute. */
static osdp_status open_tensor(hid_t file, const char *path, const char *name, const osdp_tensor_desc *td, hid_t *out,
                               uint64_t *checksum)
{
    char h5msg[512];
    *out = -1;
    if (!object_exists(file, name))
        return osdp_error_set(OSDP_ERR_INPUT, "checkpoint %s: missing dataset %s", path, name);
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0)
        return osdp_error_set(OSDP_ERR_INPUT, "checkpoint %s: cannot open dataset %s (corrupt file?): %s", path, name,
                              ckpt_h5_error(h5msg, sizeof h5msg));
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    int ok_type = t >= 0 && H5Tget_class(t) == H5T_FLOAT && H5Tget_size(t) == 4;
    hsize_t dims[2] = {0, 0};
    int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (nd >= 1 && nd <= 2) H5Sget_simple_extent_dims(sp, dims, NULL);
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    osdp_status s = OSDP_OK;
    int ok_shape = td->ndim == 1 ? nd == 1 && dims[0] == (hsize_t)td->logical_cols
                                 : nd == 2 && dims[0] == (hsize_t)td->logical_rows && dims[1] == (hsize_t)td->logical_cols;
    if (!ok_type)
        s = osdp_error_set(OSDP_ERR_INPUT, "checkpoint %s: dataset %s is not 32-bit float", path, name);
    else if (!ok_shape) {
        char want[64], have[64];
        if (td->ndim == 1) snprintf(want, sizeof want, "(%d)", td->logical_cols);
        else snprintf(want, sizeof want, "(%d, %d)", td->logical_rows, td->logical_cols);
        if (nd == 1) snprintf(have, sizeof have, "(%llu)", (unsigned long long)dims[0]);
        else if (nd == 2) snprintf(have, sizeof have, "(%llu, %llu)", (unsigned long long)dims[0], (unsigned long long)dims[1]);
        else snprintf(have, sizeof have, "%d dimensions", nd);
        s = osdp_error_set(OSDP_ERR_INPUT, "checkpoint %s: dataset %s has shape %s, this model needs %s: "
                           "the model description differs", path, name, have, want);
    } else {
        char where[4400];
        snprintf(where, sizeof where, "checkpoint %s: dataset %s", path, name);
        s = ckpt_attr_read_u64(d, where, "checksum", checksum);
    }
    if (s != OSDP_OK) {
        H5Dclose(d);
        return s;
    }
    *out = d;
    return OSDP_OK;
}

/* One operator: open and check its datasets, read this rank's pieces of
 * every kind into the shards, verify the checksums. */
static osdp_status read_op(osdp_runtime *rt, const ckpt_piece_list *pieces, int i, int kinds, hid_t file,
                           const char *path, hid_t dxpl, float *buf, MPI_Comm comm, double *bytes)
{
    const osdp_op_layout *op = &rt->layout->op[i];
    float *state[OSDP_STATE_N_KINDS];
    const size_t shard = osdp_runtime_op_shard(rt, i, state);
    const int nt = op->n_tensors;
    char name[200];
    hid_t d[CKPT_N_KINDS][OSDP_MAX_TENSORS_PER_OP];
    uint64_t stored[CKPT_N_KINDS * OSDP_MAX_TENSORS_PER_OP] = {0}, sums[CKPT_N_KINDS * OSDP_MAX_TENSORS_PER_OP] = {0};
    osdp_status s = OSDP_OK;
    for (int k = 0; k < kinds; k++)
        for (int t = 0; t < nt; t++) {
            d[k][t] = -1;
            if (s != OSDP_OK) continue;
            ckpt_dataset_name(k, op, t, name, sizeof name);
            s = open_tensor(file, path, name, &op->tensor[t], &d[k][t], &stored[k * nt + t]);
        }
    s = osdp_status_agree(s, comm);
    if (s != OSDP_OK) goto close;
    /* every rank makes the same read calls whatever fails locally; the
     * ranks of other stages (shard 0) select nothing */
    for (int k = 0; k < kinds; k++) {
        memset(buf, 0, shard * sizeof(float));   /* padding (shard and vocabulary) stays 0 */
        ckpt_move_kind(pieces, rt, i, k, d[k], dxpl, buf, 0, path, &sums[k * nt], bytes, &s);
        if (shard) rt->backend->to_device(state[ckpt_state_kind[k]], buf, shard * sizeof(float));
    }
    MPI_Allreduce(MPI_IN_PLACE, sums, kinds * nt, MPI_UINT64_T, MPI_SUM, comm);
    s = osdp_status_agree(s, comm);
    for (int k = 0; k < kinds && s == OSDP_OK; k++)   /* identical on every rank */
        for (int t = 0; t < nt && s == OSDP_OK; t++)
            if (sums[k * nt + t] != stored[k * nt + t]) {
                ckpt_dataset_name(k, op, t, name, sizeof name);
                s = osdp_error_set(OSDP_ERR_INPUT, "checkpoint %s: checksum mismatch in dataset %s (stored 0x%016llx, "
                                   "computed 0x%016llx): the file is corrupt", path, name,
                                   (unsigned long long)stored[k * nt + t], (unsigned long long)sums[k * nt + t]);
            }
close:
    ckpt_close_datasets(d, kinds, nt);
    return s;
}

osdp_status osdp_ckpt_load(osdp_runtime *rt, const osdp_model_config *cfg, const char *path, int flags,
                           MPI_Comm comm, osdp_ckpt_info *info_out)
{
    const double t0 = osdp_now_seconds();
    const osdp_layout *L = rt->layout;
    if (!cfg) cfg = &L->cfg;
    const int weights_only = (flags & OSDP_CKPT_WEIGHTS_ONLY) != 0;
    osdp_ckpt_info info;
    ckpt_h5_quiet quiet;
    ckpt_h5_quiet_begin(&quiet);
    hid_t fapl, file, dxpl = -1;
    float *buf = NULL;
    char *model_text = NULL;
    double bytes = 0;
    osdp_status s = open_file(path, comm, &fapl, &file);
    if (s != OSDP_OK) goto out;
    s = osdp_status_agree(read_root(file, path, &info, &model_text), comm);
    if (s == OSDP_OK && info.weights_only && !weights_only) s = weights_file_refused(path);
    if (s != OSDP_OK) goto out;

    if (info.model_hash != osdp_model_config_hash(cfg)) {
        osdp_model_config *theirs = calloc(1, sizeof *theirs);
        char a[256] = "(unreadable)", b[256];
        if (theirs && osdp_model_config_parse(theirs, model_text, "checkpoint") == OSDP_OK) describe_model(theirs, a, sizeof a);
        describe_model(cfg, b, sizeof b);
        free(theirs);
        s = osdp_error_set(OSDP_ERR_INPUT, "checkpoint %s: the model description differs (attribute model_hash): "
                           "the checkpoint holds %s, this run is %s", path, a, b);
    }
    s = osdp_status_agree(s, comm);
    if (s != OSDP_OK) goto out;

    buf = ckpt_shard_buffer(rt);
    dxpl = ckpt_dxpl();
    s = buf && dxpl >= 0 ? ckpt_check_mesh(rt, comm, path)
                         : osdp_error_set(OSDP_ERR_OOM, "checkpoint %s: out of host memory", path);
    s = osdp_status_agree(s, comm);
    ckpt_piece_list pieces = {0};
    if (s == OSDP_OK) s = ckpt_pieces_build(rt, comm, &pieces);   /* agreed */

    const int kinds = weights_only ? 1 : CKPT_N_KINDS;
    for (int i = 0; i < L->n_ops && s == OSDP_OK; i++)
        s = read_op(rt, &pieces, i, kinds, file, path, dxpl, buf, comm, &bytes);
    ckpt_pieces_free(&pieces);
    if (s == OSDP_OK) {
        rt->backend->synchronize();
        if (weights_only) {
            osdp_runtime_reset_moments(rt);
            osdp_runtime_set_position(rt, 0, rt->opt.seed);
        } else {
            osdp_runtime_set_position(rt, info.step, info.seed);
        }
        osdp_runtime_invalidate_weights(rt);   /* DP copies are re-gathered */
    }

out:
    if (dxpl >= 0) H5Pclose(dxpl);
    close_file(fapl, file);
    ckpt_h5_quiet_end(&quiet);
    free(buf);
    free(model_text);
    s = osdp_status_agree(s, comm);
    if (s == OSDP_OK && info_out) {
        *info_out = info;
        info_out->bytes = bytes;
        info_out->seconds = osdp_now_seconds() - t0;
    }
    return s;
}

/* Checkpoints: the collective writer (see osdp/checkpoint.h). */
#include "config.h"
#include "checkpoint_internal.h"
#include "osdp/logical.h"
#include "osdp/pipeline.h"
#include "util/path.h"
#include "util/watchdog.h"
#include "util/clock.h"   /* osdp_comm_timeout_from_env: the save's waits are bounded as collectives are */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define CKPT_PATH_MAX 4200

/* fsync a file or directory by name (best effort for directories) */
static int sync_path(const char *path, int is_dir)
{
    int fd = open(path, is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) return is_dir ? 0 : -1;
    int e = fsync(fd);
    close(fd);
    return is_dir ? 0 : e;
}

/* Rank 0's strings, the same bytes on every rank (attributes written
 * collectively must be identical). */
static char *bcast_string(const char *s, MPI_Comm comm)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    long len = rank == 0 ? (long)strlen(s) : 0;
    MPI_Bcast(&len, 1, MPI_LONG, 0, comm);
    char *out = malloc((size_t)len + 1);
    int ok = out != NULL, all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    if (!all_ok) { free(out); return NULL; }
    if (rank == 0) memcpy(out, s, (size_t)len);
    MPI_Bcast(out, (int)len, MPI_CHAR, 0, comm);
    out[len] = 0;
    return out;
}

static char *plan_text(const osdp_plan *plan, const osdp_layout *layout)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    osdp_plan_write(plan, layout, f);
    fclose(f);
    return buf;
}

/* the parameters of the whole model, as the file holds them */
static int64_t logical_params(const osdp_layout *L)
{
    size_t n = 0;
    for (int i = 0; i < L->n_ops; i++) n += osdp_op_logical_numel(&L->op[i]);
    return (int64_t)n;
}

static herr_t write_root_attrs(hid_t file, const osdp_runtime *rt, const osdp_plan *plan, int n_ranks,
                               const char *model_text, const char *plan_txt, unsigned long long model_hash,
                               const char *model_name)
{
    herr_t e = 0;
    uint64_t rng[2] = {rt->opt.seed, (uint64_t)rt->step};
    e |= ckpt_attr_write_str(file, "format", "osdp-checkpoint");
    const char *fv = getenv("OSDP_CKPT_TEST_FORMAT_VERSION");   /* test hook: a "newer" file */
    e |= ckpt_attr_write_i64(file, "format_version", fv && *fv ? strtol(fv, NULL, 10) : OSDP_CKPT_FORMAT_VERSION);
    e |= ckpt_attr_write_str(file, "writer", "osdp_gpt " PACKAGE_VERSION);
    e |= ckpt_attr_write_i64(file, "step", rt->step);
    e |= ckpt_attr_write_i64(file, "data_position", rt->step);
    e |= ckpt_attr_write_u64(file, "seed", rt->opt.seed);
    e |= ckpt_attr_write_u64v(file, "rng_state", rng, 2);
    e |= ckpt_attr_write_i64(file, "n_ranks", n_ranks);
    e |= ckpt_attr_write_i64(file, "mesh_tp", rt->layout->tp_size);   /* the mesh it was saved on: tp x dp x pp */
    e |= ckpt_attr_write_i64(file, "mesh_dp", rt->N);
    e |= ckpt_attr_write_i64(file, "mesh_pp", ckpt_pp_size(rt));
    if (ckpt_pp_size(rt) > 1) {   /* informational: a load needs neither the same split nor the same schedule */
        char split[OSDP_STAGE_SPLIT_CHARS];
        const int chunks = rt->opt.geo.pp_size * osdp_pipe_chunks_per_stage(rt->opt.geo.virtual_stages);
        e |= ckpt_attr_write_str(file, "pipeline_stages", osdp_stage_split_format(rt->opt.geo.stage_bounds, chunks,
                                                                                 split, sizeof split));
        e |= ckpt_attr_write_str(file, "pipeline_schedule", osdp_pipe_schedule_name(rt->opt.geo.pipe_schedule));
    }
    e |= ckpt_attr_write_str(file, "model_name", model_name);
    e |= ckpt_attr_write_str(file, "model_description", model_text);
    e |= ckpt_attr_write_u64(file, "model_hash", model_hash);
    e |= ckpt_attr_write_str(file, "plan", plan_txt);
    e |= ckpt_attr_write_u64(file, "plan_hash", osdp_plan_hash(plan));
    e |= ckpt_attr_write_i64(file, "micro_batch", rt->B);
    e |= ckpt_attr_write_i64(file, "accum_steps", rt->opt.geo.accum_steps);
    e |= ckpt_attr_write_i64(file, "global_batch", (int64_t)rt->B * rt->N * rt->opt.geo.accum_steps);
    e |= ckpt_attr_write_i64(file, "seq_len", rt->T);
    e |= ckpt_attr_write_i64(file, "total_params", logical_params(rt->layout));
    e |= ckpt_attr_write_str(file, "checksum_algorithm", OSDP_CKPT_CHECKSUM_ALGORITHM);
    return e < 0 ? -1 : 0;
}

static herr_t write_optim_attrs(hid_t g, const osdp_optim_config *o, long step)
{
    herr_t e = 0;
    e |= ckpt_attr_write_f32(g, "lr", o->lr);
    e |= ckpt_attr_write_f32(g, "min_lr_frac", o->min_lr_frac);
    e |= ckpt_attr_write_i64(g, "warmup_steps", o->warmup_steps);
    e |= ckpt_attr_write_i64(g, "total_steps", o->total_steps);
    e |= ckpt_attr_write_f32(g, "beta1", o->beta1);
    e |= ckpt_attr_write_f32(g, "beta2", o->beta2);
    e |= ckpt_attr_write_f32(g, "eps", o->eps);
    e |= ckpt_attr_write_f32(g, "weight_decay", o->weight_decay);
    e |= ckpt_attr_write_f32(g, "grad_clip", o->grad_clip);
    e |= ckpt_attr_write_i64(g, "adam_t", step);
    e |= ckpt_attr_write_str(g, "algorithm", "AdamW (decoupled weight decay on 2-D tensors), global-norm clipping");
    return e < 0 ? -1 : 0;
}

/* groups /model/<op>, /optim/m/<op>, /optim/v/<op> (collective metadata) */
static herr_t create_groups(hid_t file, const osdp_layout *L, const osdp_optim_config *o, long step)
{
    hid_t g = H5Gcreate2(file, "/model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return -1;
    H5Gclose(g);
    g = H5Gcreate2(file, "/optim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return -1;
    herr_t e = write_optim_attrs(g, o, step);
    H5Gclose(g);
    if (e < 0) return -1;
    for (int k = 0; k < CKPT_N_KINDS; k++) {
        if (k != CKPT_MASTER) {
            g = H5Gcreate2(file, ckpt_kind_group[k], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            if (g < 0) return -1;
            H5Gclose(g);
        }
        for (int i = 0; i < L->n_ops; i++) {
            char name[160];
            snprintf(name, sizeof name, "%s/%s", ckpt_kind_group[k], L->op[i].name);
            g = H5Gcreate2(file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            if (g < 0) return -1;
            H5Gclose(g);
        }
    }
    return 0;
}

/* dataset creation properties: contiguous without fill (every element is
 * written), or chunked with the fletcher32 filter when OSDP_CKPT_FLETCHER32=1 */
static hid_t make_dcpl(const osdp_tensor_desc *td)
{
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (dcpl < 0) return dcpl;
    const char *f32 = getenv("OSDP_CKPT_FLETCHER32");
    if (f32 && strcmp(f32, "1") == 0) {
        hsize_t target = 1 << 18;   /* ~1 MiB chunks: whole rows */
        hsize_t chunk[2];
        if (td->ndim == 1) chunk[0] = (hsize_t)td->cols < target ? (hsize_t)td->cols : target;
        else {
            chunk[0] = target / (hsize_t)td->cols;
            if (chunk[0] < 1) chunk[0] = 1;
            if (chunk[0] > (hsize_t)td->rows) chunk[0] = (hsize_t)td->rows;
            chunk[1] = (hsize_t)td->cols;
        }
        H5Pset_chunk(dcpl, td->ndim, chunk);
        H5Pset_fletcher32(dcpl);
    } else {
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    }
    return dcpl;
}

/* One operator: create its datasets (all kinds), write this rank's pieces,
 * attach the checksums.  Two agreements and one all-reduce per operator. */
static osdp_status write_op(osdp_runtime *rt, const ckpt_piece_list *pieces, int i, hid_t file, hid_t dxpl, float *buf,
                            MPI_Comm comm, double *bytes, const char *tmp)
{
    const osdp_op_layout *op = &rt->layout->op[i];
    float *state[OSDP_STATE_N_KINDS];
    const size_t shard = osdp_runtime_op_shard(rt, i, state);
    const int nt = op->n_tensors;
    char h5msg[512], name[200];
    hid_t d[CKPT_N_KINDS][OSDP_MAX_TENSORS_PER_OP];
    osdp_status s = OSDP_OK;
    osdp_watchdog_phase("checkpoint save %s: creating the datasets of operator %s", tmp, op->name);
    for (int k = 0; k < CKPT_N_KINDS; k++)
        for (int t = 0; t < nt; t++) {
            d[k][t] = -1;
            if (s != OSDP_OK) continue;
            const osdp_tensor_desc *td = &op->tensor[t];
            ckpt_dataset_name(k, op, t, name, sizeof name);
            hid_t space = ckpt_tensor_space(td), dcpl = make_dcpl(td);
            if (space >= 0 && dcpl >= 0) d[k][t] = H5Dcreate2(file, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
            if (dcpl >= 0) H5Pclose(dcpl);
            if (space >= 0) H5Sclose(space);
            if (d[k][t] < 0) {
                s = osdp_error_set(OSDP_ERR_IO, "checkpoint %s: cannot create dataset %s: %s", tmp, name,
                                   ckpt_h5_error(h5msg, sizeof h5msg));
                osdp_watchdog_failed(osdp_error_message());
            }
        }
    s = osdp_status_agree(s, comm);
    if (s != OSDP_OK) goto close;
    /* from here on every rank makes the same HDF5 calls whatever fails
     * locally (collective writes, identical metadata); one agreement at the end */
    uint64_t sums[CKPT_N_KINDS * OSDP_MAX_TENSORS_PER_OP] = {0};
    for (int k = 0; k < CKPT_N_KINDS; k++) {
        if (shard) rt->backend->to_host(buf, state[ckpt_state_kind[k]], shard * sizeof(float));   /* 0: another stage's */
        ckpt_move_kind(pieces, rt, i, k, d[k], dxpl, buf, 1, tmp, &sums[k * nt], bytes, &s);
    }
    osdp_watchdog_phase("checkpoint save %s: the checksums of operator %s", tmp, op->name);
    MPI_Allreduce(MPI_IN_PLACE, sums, CKPT_N_KINDS * nt, MPI_UINT64_T, MPI_SUM, comm);
    for (int k = 0; k < CKPT_N_KINDS; k++)
        for (int t = 0; t < nt; t++) {
            herr_t e = ckpt_attr_write_u64(d[k][t], "checksum", sums[k * nt + t]);
            if (e >= 0) e = ckpt_attr_write_u64(d[k][t], "op_offset", osdp_op_logical_offset(op, t));
            if (e < 0 && s == OSDP_OK) {
                ckpt_dataset_name(k, op, t, name, sizeof name);
                s = osdp_error_set(OSDP_ERR_IO, "checkpoint %s: cannot write the attributes of dataset %s: %s", tmp, name,
                                   ckpt_h5_error(h5msg, sizeof h5msg));
                osdp_watchdog_failed(osdp_error_message());
            }
        }
close:
    ckpt_close_datasets(d, CKPT_N_KINDS, nt);
    return osdp_status_agree(s, comm);
}

/* MPI-IO's errors as they happen, inside HDF5's calls.  A write that fails
 * inside one of HDF5's collective calls (the metadata flush of H5Fclose, a
 * cache eviction) leaves this rank out of step within that call, before
 * HDF5 returns: the watchdog hears of it here, so the job ends within its
 * grace with the cause (No space left on device), not after the timeout
 * with none.  The error still returns to HDF5 as MPI's code. */
static void on_mpi_io_error(MPI_File *fh, int *code, ...)
{
    (void)fh;
    char mpi[MPI_MAX_ERROR_STRING], msg[MPI_MAX_ERROR_STRING + 64];
    int len = 0;
    if (MPI_Error_string(*code, mpi, &len) != MPI_SUCCESS) snprintf(mpi, sizeof mpi, "MPI error %d", *code);
    for (char *c = mpi; *c; c++)
        if (*c == '\n') *c = ' ';
    snprintf(msg, sizeof msg, "an MPI-IO call failed here: %s", mpi);
    osdp_watchdog_suspect(msg);   /* HDF5 may recover; if it returns the error, the caller confirms it */
}

/* The save's MPI-IO file reports to on_mpi_io_error, which returns MPI's
 * code to HDF5 as the default MPI_ERRORS_RETURN does (it only tells an
 * armed watchdog).  Set on the file itself: MPICH does not count the
 * reference of a default set on MPI_FILE_NULL that files inherit. */
static void report_mpi_io_errors(hid_t file, hid_t fapl)
{
    static MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
    if (handler == MPI_ERRHANDLER_NULL && MPI_File_create_errhandler(on_mpi_io_error, &handler) != MPI_SUCCESS) return;
    void *fh = NULL;
    if (H5Fget_vfd_handle(file, fapl, &fh) >= 0 && fh) MPI_File_set_errhandler(*(MPI_File *)fh, handler);
}

/* The space a save needs at least: its datasets' bytes (the file adds its
 * metadata).  Rank 0 checks the file system before the first byte: a full
 * disk is then refused by every rank together, cleanly, before HDF5's
 * collective calls can meet it (OSDP_CKPT_SPACE_CHECK=0: no check, for the
 * tests of a disk that fills during the save). */
static osdp_status check_space(const osdp_layout *L, const char *path)
{
    const char *check = getenv("OSDP_CKPT_SPACE_CHECK");
    if (check && strcmp(check, "0") == 0) return OSDP_OK;
    char dir[CKPT_PATH_MAX];
    osdp_parent_dir(path, dir, sizeof dir);
    struct statvfs fs;
    if (statvfs(dir, &fs) != 0) return OSDP_OK;   /* unknown: the writes will tell */
    const double need = (double)logical_params(L) * sizeof(float) * CKPT_N_KINDS;
    const double have = (double)fs.f_bavail * (double)fs.f_frsize;
    if (have >= need) return OSDP_OK;
    return osdp_error_set(OSDP_ERR_IO, "checkpoint %s: No space left on device: it needs at least %.1f MB, the file "
                          "system of %s has %.1f MB free", path, need / 1e6, dir, have / 1e6);
}

/* After an agreed failure: make room for the close.  A save that failed on
 * a full disk cannot flush its metadata, and an HDF5 file whose close
 * failed stays open in the library until MPI_Finalize, which then crashes
 * in it; the file is going anyway, so rank 0 empties it first (its blocks
 * are freed, the close writes a few KB of metadata into a sparse file). */
static void empty_failed_file(const char *tmp, int rank, MPI_Comm comm)
{
    if (rank == 0 && truncate(tmp, 0) != 0) { /* gone or unreachable: the close says what it can */ }
    osdp_status_agree(OSDP_OK, comm);   /* before any rank's close writes */
}

osdp_status osdp_ckpt_save(osdp_runtime *rt, const osdp_model_config *cfg, const osdp_plan *plan,
                           const char *path, MPI_Comm comm, osdp_ckpt_info *info)
{
    const double t0 = osdp_now_seconds();
    const osdp_layout *L = rt->layout;
    if (!cfg) cfg = &L->cfg;
    if (!plan) plan = &rt->plan;
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    char tmp[CKPT_PATH_MAX], h5msg[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    /* Every wait of the save is bounded as a collective's is: HDF5's
     * collective MPI-IO calls and the plain MPI collectives here by the
     * watchdog (util/watchdog.h), which names the phase and the dataset;
     * the agreements by their own timed all-reduce. */
    const double timeout = osdp_comm_timeout_from_env(rank);
    osdp_watchdog_remove_on_expiry(NULL);
    osdp_watchdog_arm(timeout, "checkpoint save %s: the ranks' agreement before it", tmp);

    ckpt_h5_quiet quiet;
    ckpt_h5_quiet_begin(&quiet);
    hid_t fapl = -1, file = -1, dxpl = -1;
    float *buf = NULL;
    double bytes = 0;
    ckpt_piece_list pieces = {0};
    char *ptext_local = rank == 0 ? plan_text(plan, L) : NULL;
    char *ptext = bcast_string(rank == 0 ? (ptext_local ? ptext_local : "") : "", comm);
    char *mtext = bcast_string(cfg->text, comm);
    char *mname = bcast_string(cfg->name, comm);
    free(ptext_local);
    buf = ckpt_shard_buffer(rt);
    osdp_status s = ptext && mtext && mname && buf ? OSDP_OK
                    : osdp_error_set(OSDP_ERR_OOM, "checkpoint %s: out of host memory", path);
    if (s == OSDP_OK) s = ckpt_check_mesh(rt, comm, path);
    if (s == OSDP_OK && rank == 0) s = check_space(L, path);
    s = osdp_status_agree(s, comm);
    if (s == OSDP_OK) s = ckpt_pieces_build(rt, comm, &pieces);   /* agreed */
    if (s != OSDP_OK) goto out;

    osdp_watchdog_phase("checkpoint save %s: creating the file", tmp);
    osdp_watchdog_remove_on_expiry(tmp);
    fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0) {
        MPI_Info hints = ckpt_mpi_info();
        H5Pset_fapl_mpio(fapl, comm, hints);   /* copies the hints */
        ckpt_mpi_info_free(&hints);
        H5Pset_coll_metadata_write(fapl, 1);   /* metadata flushed by one collective write */
    }
    file = fapl >= 0 ? H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl) : -1;
    if (file >= 0) report_mpi_io_errors(file, fapl);
    if (file < 0) {
        s = osdp_error_set(OSDP_ERR_IO, "cannot create checkpoint %s: %s", tmp, ckpt_h5_error(h5msg, sizeof h5msg));
        osdp_watchdog_failed(osdp_error_message());
    }
    s = osdp_status_agree(s, comm);
    if (s != OSDP_OK) goto out;

    osdp_watchdog_phase("checkpoint save %s: writing the metadata", tmp);
    dxpl = ckpt_dxpl();
    herr_t e = dxpl < 0 ? -1 : 0;
    if (e >= 0) e = write_root_attrs(file, rt, plan, size, mtext, ptext, osdp_model_config_hash(cfg), mname);
    if (e >= 0) e = create_groups(file, L, &rt->opt.optim, rt->step);
    if (e >= 0) e = ckpt_manifest_write(file);   /* after every metadata attribute */
    if (e < 0) {
        s = osdp_error_set(OSDP_ERR_IO, "checkpoint %s: cannot write the metadata: %s", tmp, ckpt_h5_error(h5msg, sizeof h5msg));
        osdp_watchdog_failed(osdp_error_message());
    }
    s = osdp_status_agree(s, comm);

    for (int i = 0; i < L->n_ops && s == OSDP_OK; i++) {
        s = write_op(rt, &pieces, i, file, dxpl, buf, comm, &bytes, tmp);
        if (i == L->n_ops / 2) ckpt_crash_point("mid_write", rt->step, rank, size);
    }

out:
    /* here every rank has the same s (agreed): a failed save is closed with
     * a short bound (the grace), a good one with the timeout */
    if (s != OSDP_OK)   /* the label keeps the cause: a hang in the close must still say it */
        osdp_watchdog_arm(timeout > 0 && timeout < OSDP_WATCHDOG_GRACE_S ? timeout : OSDP_WATCHDOG_GRACE_S,
                          "checkpoint save %s: closing the failed save (%.600s)", tmp, osdp_error_message());
    else osdp_watchdog_phase("checkpoint save %s: closing the file (the metadata flush)", tmp);
    if (dxpl >= 0) H5Pclose(dxpl);
    if (file >= 0 && s != OSDP_OK) empty_failed_file(tmp, rank, comm);
    const herr_t closed = file >= 0 ? H5Fclose(file) : 0;
    if (closed < 0 && s == OSDP_OK) {
        s = osdp_error_set(OSDP_ERR_IO, "cannot close checkpoint %s: %s", tmp, ckpt_h5_error(h5msg, sizeof h5msg));
        osdp_watchdog_failed(osdp_error_message());
    }
    if (fapl >= 0) H5Pclose(fapl);
    ckpt_h5_quiet_end(&quiet);
    free(buf);
    ckpt_pieces_free(&pieces);
    free(ptext);
    free(mtext);
    free(mname);
    if (s == OSDP_OK) ckpt_crash_point("before_rename", rt->step, rank, size);   /* closed here, not agreed yet */
    s = osdp_status_agree(s, comm);   /* after it every rank has closed: the file is complete, or failed */
    if (s == OSDP_OK) {
        osdp_watchdog_phase("checkpoint save %s: flushing it to disk and renaming it to %s", tmp, path);
        if (rank == 0) {
            char dir[CKPT_PATH_MAX];
            osdp_parent_dir(path, dir, sizeof dir);
            if (sync_path(tmp, 0) != 0)
                s = osdp_error_set(OSDP_ERR_IO, "cannot flush checkpoint %s to disk: %s", tmp, strerror(errno));
            else if (rename(tmp, path) != 0)
                s = osdp_error_set(OSDP_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
            else
                sync_path(dir, 1);
        }
        s = osdp_status_agree(s, comm);
    }
    if (s != OSDP_OK && rank == 0 && file >= 0) unlink(tmp);   /* a failed save leaves nothing behind */
    osdp_watchdog_disarm();
    osdp_watchdog_remove_on_expiry(NULL);
    if (info && s == OSDP_OK) {
        memset(info, 0, sizeof *info);
        info->format_version = OSDP_CKPT_FORMAT_VERSION;
        info->step = rt->step;
        info->seed = rt->opt.seed;
        info->n_ranks = size;
        info->geo.tp_size = rt->layout->tp_size;
        info->geo.n_ranks = rt->N;
        info->geo.pp_size = ckpt_pp_size(rt);
        info->model_hash = osdp_model_config_hash(cfg);
        snprintf(info->model_name, sizeof info->model_name, "%s", cfg->name);
        info->plan_hash = osdp_plan_hash(plan);
        info->geo.micro_batch = rt->B;
        info->geo.accum_steps = rt->opt.geo.accum_steps;
        info->global_batch = (long)rt->B * rt->N * rt->opt.geo.accum_steps;
        info->seq_len = rt->T;
        info->optim = rt->opt.optim;
        info->bytes = bytes;
        info->seconds = osdp_now_seconds() - t0;   /* to the last agreement: every rank's part */
    }
    return s;
}

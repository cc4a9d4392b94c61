/* The training loop's checkpoint glue (see osdp/train_checkpoint.h). */
#define _XOPEN_SOURCE 700
#include "config.h"
#include "cli/train_checkpoint.h"
#include "cli/gather_root.h"
#include "osdp/logical.h"
#include "osdp/comm.h"
#include "util/path.h"
#include "util/watchdog.h"
#include "options.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TC_PATH_MAX 4200

static volatile sig_atomic_t g_signal = 0;

static void on_signal(int sig)
{
    g_signal = sig;
    osdp_watchdog_signal(sig);   /* during a save: it gets a grace to finish, then the job ends */
}

static const char *signal_name(int sig)
{
    return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

/* ---- options ------------------------------------------------------------------ */

osdp_status osdp_train_ckpt_init(osdp_train_ckpt *tc, const osdp_job *job)
{
    memset(tc, 0, sizeof *tc);
    tc->dir = job->ckpt_dir;
    tc->save_every = (long)job->save_every;
    tc->keep = (int)job->keep;
    tc->resume = job->resume;
    tc->resume_file = job->resume_file;
    tc->resume_fallback = job->resume_fallback;
    tc->init_from = job->init_from ? job->init_from : job->ckpt;   /* eval --ckpt: its weights, as --init-from */
    tc->quiet = job->quiet;
    tc->continue_on_write_error = job->on_write_error == OSDP_ON_WRITE_ERROR_CONTINUE;
    tc->last_saved = tc->last_tried = -1;
    if (tc->save_every && !tc->dir) return osdp_error_set(OSDP_ERR_INPUT, "--save-every needs --ckpt-dir DIR");
    if (tc->resume && !tc->resume_file && !tc->dir)
        return osdp_error_set(OSDP_ERR_INPUT, "--resume needs a FILE or --ckpt-dir DIR (whose 'latest' names the checkpoint)");
    if (tc->resume && tc->init_from) return osdp_error_set(OSDP_ERR_INPUT, "--resume and --init-from exclude each other");
    if (tc->resume_fallback && !tc->resume) return osdp_error_set(OSDP_ERR_INPUT, "--resume-fallback needs --resume");
    return OSDP_OK;
}

/* append a step number to a growing list; -1 when out of memory */
static int push_step(long **steps, int *count, int *cap, long s)
{
    if (*count == *cap) {
        int grown = *cap ? 2 * *cap : 16;
        long *p = realloc(*steps, (size_t)grown * sizeof *p);
        if (!p) return -1;
        *steps = p;
        *cap = grown;
    }
    (*steps)[(*count)++] = s;
    return 0;
}

/* ---- helpers ------------------------------------------------------------------- */


static osdp_status mkdir_p(const char *dir)
{
    char buf[TC_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return osdp_error_set(OSDP_ERR_IO, "--ckpt-dir: cannot create %s: %s", buf, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return osdp_error_set(OSDP_ERR_IO, "--ckpt-dir %s: not a directory", dir);
    return OSDP_OK;
}

static void join(char *out, size_t n, const char *dir, const char *name)
{
    int r = name[0] == '/' ? snprintf(out, n, "%s", name) : snprintf(out, n, "%s/%s", dir, name);
    if (r < 0 || (size_t)r >= n) out[0] = 0;   /* too long: an empty path fails to open, with its name */
}

static int same_dir(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    if (!realpath(a, ra) || !realpath(b, rb)) return 0;
    return strcmp(ra, rb) == 0;
}

static int cmp_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* steps of the step_XXXXXXXX.h5 files in dir, newest first (rank 0 lists,
 * every rank gets the list); *n = count. */
static long *list_saves(const char *dir, int *n, MPI_Comm comm)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    long *steps = NULL;
    int count = 0, cap = 0;
    if (rank == 0) {
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            long s = osdp_ckpt_parse_step_name(e->d_name);
            if (s < 0) continue;
            if (push_step(&steps, &count, &cap, s) != 0) break;
        }
        if (d) closedir(d);
        if (count) qsort(steps, (size_t)count, sizeof *steps, cmp_desc);
    }
    MPI_Bcast(&count, 1, MPI_INT, 0, comm);
    if (rank != 0) steps = count ? malloc((size_t)count * sizeof *steps) : NULL;
    if (count) MPI_Bcast(steps, count, MPI_LONG, 0, comm);
    *n = count;
    return steps;
}

/* VmRSS / VmHWM of this process in bytes (0 when unknown) */
static double proc_status_bytes(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double v = 0;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0) { v = atof(line + n + 1) * 1024.0; break; }
    if (f) fclose(f);
    return v;
}

static void reset_peak_rss(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd >= 0) {
        if (write(fd, "5", 1) < 0) { /* older kernels: the peak is the lifetime peak */ }
        close(fd);
    }
}

/* ---- save -------------------------------------------------------------------------- */

/* rank 0: DIR/latest <- name, through a temporary name and rename */
static osdp_status write_latest(const char *dir, const char *name)
{
    char tmp[TC_PATH_MAX], fin[TC_PATH_MAX];
    join(tmp, sizeof tmp, dir, "latest.tmp");
    join(fin, sizeof fin, dir, "latest");
    FILE *f = fopen(tmp, "w");
    if (!f) return osdp_error_set(OSDP_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    int bad = fprintf(f, "%s\n", name) < 0;
    bad |= fflush(f) != 0;
    bad |= fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad) {
        unlink(tmp);
        return osdp_error_set(OSDP_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    }
    if (rename(tmp, fin) != 0) {
        unlink(tmp);
        return osdp_error_set(OSDP_ERR_IO, "cannot rename %s to %s: %s", tmp, fin, strerror(errno));
    }
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) { fsync(fd); close(fd); }
    return OSDP_OK;
}

/* rank 0: keep the newest `keep` saves up to `step` (never touching saves of
 * later steps, e.g. of an abandoned run resumed from an earlier point), and
 * remove temporaries of crashed saves */
static void rotate(const char *dir, long step, int keep)
{
    DIR *d = opendir(dir);
    if (!d) return;
    long *steps = NULL;
    int count = 0, cap = 0;
    struct dirent *e;
    char path[TC_PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0 && strncmp(e->d_name, "step_", 5) == 0) {
            char base[300];
            snprintf(base, sizeof base, "%.*s", (int)(len - 4), e->d_name);
            long s = osdp_ckpt_parse_step_name(base);
            if (s >= 0 && s <= step) {   /* a save that never completed */
                join(path, sizeof path, dir, e->d_name);
                unlink(path);
            }
            continue;
        }
        long s = osdp_ckpt_parse_step_name(e->d_name);
        if (s < 0 || s > step) continue;
        if (push_step(&steps, &count, &cap, s) != 0) break;
    }
    closedir(d);
    if (keep > 0 && count > keep) {
        qsort(steps, (size_t)count, sizeof *steps, cmp_desc);
        for (int i = keep; i < count; i++) {
            char name[64];
            osdp_ckpt_step_name(steps[i], name, sizeof name);
            join(path, sizeof path, dir, name);
            if (unlink(path) != 0)
                fprintf(stderr, "osdp_gpt: warning: --keep: cannot remove %s: %s\n", path, strerror(errno));
        }
    }
    free(steps);
}

/* --on-write-error continue: a save that failed for want of I/O (a full
 * disk) is skipped with a warning on rank 0, each time; `latest` still
 * names the last good save.  Any other failure (a rank that hangs: no
 * agreement is possible) stops the run whatever the option says. */
static osdp_status skip_failed_save(const osdp_train_ckpt *tc, osdp_status s)
{
    if (s != OSDP_ERR_IO || !tc->continue_on_write_error) return s;
    if (tc->rank == 0) {
        char last[64] = "none";
        if (tc->last_saved >= 0) osdp_ckpt_step_name(tc->last_saved, last, sizeof last);
        fprintf(stderr, "osdp_gpt: warning: the checkpoint of step %ld was not saved: %s; training goes on without it "
                "(--on-write-error continue); the last good save: %s\n", tc->rt->step, osdp_error_message(), last);
        fflush(stderr);
    }
    return OSDP_OK;
}

osdp_status osdp_train_ckpt_save_now(osdp_train_ckpt *tc)
{
    if (!tc->dir) return osdp_error_set(OSDP_ERR_INPUT, "no --ckpt-dir to save into");
    char name[64], path[TC_PATH_MAX];
    osdp_ckpt_step_name(tc->rt->step, name, sizeof name);
    join(path, sizeof path, tc->dir, name);
    tc->last_tried = tc->rt->step;
    double rss0 = proc_status_bytes("VmRSS:");
    reset_peak_rss();
    osdp_ckpt_info info;
    osdp_status s = osdp_ckpt_save(tc->rt, tc->cfg, tc->plan, path, tc->comm, &info);
    if (s != OSDP_OK) return skip_failed_save(tc, s);
    double mem[2] = {rss0, proc_status_bytes("VmHWM:")};
    if (osdp_comm_max_double(&tc->comm, &mem[0], "all-reduce of the RSS before the save") != OSDP_OK ||
        osdp_comm_max_double(&tc->comm, &mem[1], "all-reduce of the RSS during the save") != OSDP_OK)
        return OSDP_ERR_COMM;
    if (tc->rank == 0) s = write_latest(tc->dir, name);
    s = osdp_status_agree(s, tc->comm);
    if (s != OSDP_OK) {   /* the save is whole but `latest` does not name it: remove it, as a failed save */
        if (tc->rank == 0) unlink(path);
        return skip_failed_save(tc, s);
    }
    tc->last_saved = tc->rt->step;
    if (tc->rank == 0) {
        rotate(tc->dir, tc->rt->step, tc->keep);
        if (!tc->quiet) {
            printf("checkpoint: saved %s at step %ld: %.1f MB in %.3f s (%.1f MB/s); RSS per rank (max) %.1f MB before, "
                   "peak %.1f MB during the save\n", path, tc->rt->step, info.bytes / 1e6, info.seconds,
                   info.seconds > 0 ? info.bytes / 1e6 / info.seconds : 0.0, mem[0] / 1e6, mem[1] / 1e6);
            fflush(stdout);
        }
    }
    return OSDP_OK;
}

/* ---- weight dump ------------------------------------------------------------------ */

/* world rank 0: tensor-parallel part t of the operator into its logical tensors */
typedef struct dump_sink { const osdp_op_layout *op; float *logical; } dump_sink;

static void part_to_logical(int tp_part, const float *part, void *ctx)
{
    const dump_sink *d = ctx;
    osdp_op_part_to_logical(d->op, tp_part, part, d->logical);
}

osdp_status osdp_train_dump_weights(osdp_runtime *rt, const char *path, MPI_Comm comm)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    FILE *f = NULL;
    osdp_status s = OSDP_OK;
    if (rank == 0 && !(f = fopen(path, "wb")))
        s = osdp_error_set(OSDP_ERR_IO, "--dump-weights: cannot write %s: %s", path, strerror(errno));
    s = osdp_status_agree(s, comm);
    for (int i = 0; i < rt->layout->n_ops && s == OSDP_OK; i++) {
        const osdp_op_layout *op = &rt->layout->op[i];
        const size_t logical_numel = osdp_op_logical_numel(op);
        float *part = malloc(op->numel * sizeof(float));
        dump_sink sink = {op, rank == 0 ? malloc(logical_numel * sizeof(float)) : NULL};
        s = osdp_status_agree(part && (rank != 0 || sink.logical) ? OSDP_OK
                              : osdp_error_set(OSDP_ERR_OOM, "--dump-weights: out of host memory for operator %s", op->name),
                              comm);
        if (s == OSDP_OK) s = osdp_gather_op_to_root(rt, i, part, comm, part_to_logical, &sink);
        if (s == OSDP_OK && rank == 0 && fwrite(sink.logical, sizeof(float), logical_numel, f) != logical_numel)
            s = osdp_error_set(OSDP_ERR_IO, "--dump-weights: short write to %s", path);
        s = osdp_status_agree(s, comm);
        free(part);
        free(sink.logical);
    }
    if (f && fclose(f) != 0 && s == OSDP_OK) s = osdp_error_set(OSDP_ERR_IO, "--dump-weights: cannot close %s", path);
    return osdp_status_agree(s, comm);
}

/* ---- resume ---------------------------------------------------------------------------- */

/* DIR/latest -> path of the checkpoint it names (rank 0 reads, all get it) */
static osdp_status read_latest(const char *dir, char *path, size_t n, MPI_Comm comm)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    osdp_status s = OSDP_OK;
    char name[TC_PATH_MAX] = "";
    if (rank == 0) {
        char lp[TC_PATH_MAX];
        join(lp, sizeof lp, dir, "latest");
        FILE *f = fopen(lp, "r");
        if (!f) s = osdp_error_set(OSDP_ERR_IO, "--resume: cannot read %s (%s): no checkpoint to resume from", lp, strerror(errno));
        else {
            if (!fgets(name, sizeof name, f)) name[0] = 0;
            fclose(f);
            name[strcspn(name, "\r\n")] = 0;
            if (!name[0]) s = osdp_error_set(OSDP_ERR_INPUT, "--resume: %s is empty", lp);
        }
    }
    s = osdp_status_agree(s, comm);
    if (s != OSDP_OK) return s;
    MPI_Bcast(name, (int)sizeof name, MPI_CHAR, 0, comm);
    join(path, n, dir, name);
    return OSDP_OK;
}

osdp_status osdp_train_ckpt_peek(const osdp_train_ckpt *tc, MPI_Comm comm, char *path, size_t n, osdp_ckpt_info *info)
{
    osdp_status s = OSDP_OK;
    if (tc->resume_file) snprintf(path, n, "%s", tc->resume_file);
    else s = read_latest(tc->dir, path, n, comm);
    if (s == OSDP_OK) s = osdp_ckpt_read_info(path, comm, info);
    return s;
}

osdp_status osdp_train_ckpt_check_steps(const osdp_train_ckpt *tc, long steps, int other_work)
{
    if (!tc->resume || tc->rt->step < steps) return OSDP_OK;
    /* a checkpoint at --steps still has a use: re-saved into another
     * --ckpt-dir (resharded to this rank count) or exported by --dump-weights */
    int resaves = tc->dir && tc->last_saved != tc->rt->step;
    if (tc->rt->step == steps && (resaves || other_work)) {
        if (tc->rank == 0 && !tc->quiet) {
            printf("checkpoint: already at --steps %ld: no step to run%s\n", steps,
                   resaves ? "; saving it into --ckpt-dir" : "");
            fflush(stdout);
        }
        return OSDP_OK;
    }
    return osdp_error_set(OSDP_ERR_INPUT, "--steps %ld: the checkpoint is already at step %ld, nothing to train; --steps "
                          "counts all steps of the run, resumed ones included: give --steps above %ld", steps,
                          tc->rt->step, tc->rt->step);
}

/* "tp 2 x dp 2" (and "x pp P" when there is a pipeline) */
static void describe_mesh(int tp, int dp, int pp, char *buf, size_t n)
{
    if (pp > 1) snprintf(buf, n, "tp %d x dp %d x pp %d", tp, dp, pp);
    else snprintf(buf, n, "tp %d x dp %d", tp, dp);
}

/* rank 0, at start: a save replaces step_XXXXXXXX.h5 and latest by rename,
 * which a directory of that name refuses; found now, not after the hours
 * of training before that save */
static osdp_status check_save_names(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return osdp_error_set(OSDP_ERR_IO, "--ckpt-dir %s: cannot list it: %s", dir, strerror(errno));
    osdp_status s = OSDP_OK;
    struct dirent *e;
    char path[TC_PATH_MAX];
    while (s == OSDP_OK && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        char base[300];
        snprintf(base, sizeof base, "%.*s", (int)(len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0 ? len - 4 : len),
                 e->d_name);
        if (osdp_ckpt_parse_step_name(base) < 0 && strcmp(base, "latest") != 0) continue;
        struct stat sb;
        join(path, sizeof path, dir, e->d_name);
        if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
            s = osdp_error_set(OSDP_ERR_INPUT, "--ckpt-dir %s: %s is a directory named like a save, which a save could not "
                               "replace: move it out of the checkpoint directory", dir, path);
    }
    closedir(d);
    return s;
}

static osdp_status resume(osdp_train_ckpt *tc)
{
    char path[TC_PATH_MAX], dir[TC_PATH_MAX];
    osdp_status s;
    if (tc->resume_file) {
        snprintf(path, sizeof path, "%s", tc->resume_file);
        s = OSDP_OK;
    } else {
        s = read_latest(tc->dir, path, sizeof path, tc->comm);
        if (s != OSDP_OK && !tc->resume_fallback) return s;
    }
    long *saves = NULL;
    int n_saves = 0, listed = 0;
    long refused_step = LONG_MAX;
    for (;;) {
        if (s == OSDP_OK) {
            s = osdp_ckpt_load(tc->rt, tc->cfg, path, 0, tc->comm, &tc->loaded);
            if (s == OSDP_OK || (s != OSDP_ERR_INPUT && s != OSDP_ERR_IO)) break;
            long st = osdp_ckpt_parse_step_name(path);
            refused_step = st >= 0 ? st : refused_step;
        }
        if (!tc->resume_fallback) {
            char msg[1600];
            snprintf(msg, sizeof msg, "%s", osdp_error_message());
            s = osdp_error_set(s, "%s (--resume-fallback would try the previous save)", msg);
            break;
        }
        /* fall back to the newest save older than the refused one */
        if (!listed) {
            if (tc->resume_file) osdp_parent_dir(tc->resume_file, dir, sizeof dir);
            else snprintf(dir, sizeof dir, "%s", tc->dir);
            saves = list_saves(dir, &n_saves, tc->comm);
            listed = 1;
        }
        long next = -1;
        for (int i = 0; i < n_saves && next < 0; i++)
            if (saves[i] < refused_step) next = saves[i];
        if (tc->rank == 0) fprintf(stderr, "osdp_gpt: warning: %s\n", osdp_error_message());
        if (next < 0) {
            s = osdp_error_set(OSDP_ERR_INPUT, "--resume-fallback: no good checkpoint left in %s", dir);
            break;
        }
        char name[64];
        osdp_ckpt_step_name(next, name, sizeof name);
        join(path, sizeof path, dir, name);
        if (tc->rank == 0) fprintf(stderr, "osdp_gpt: --resume-fallback: trying the previous save %s\n", path);
        refused_step = next;
        s = OSDP_OK;
    }
    free(saves);
    if (s != OSDP_OK) return s;
    /* a checkpoint in our own directory counts as saved; from elsewhere, the
     * final save copies it here */
    osdp_parent_dir(path, dir, sizeof dir);
    if (tc->dir && same_dir(dir, tc->dir)) tc->last_saved = tc->rt->step;
    if (tc->rank == 0 && !tc->quiet) {
        const osdp_ckpt_info *in = &tc->loaded;
        int n;
        MPI_Comm_size(tc->comm, &n);
        printf("checkpoint: resumed from %s at step %ld (saved on %d rank%s, now %d; plan %s%s)\n", path, in->step,
               in->n_ranks, in->n_ranks == 1 ? "" : "s", n,
               in->plan_hash == osdp_plan_hash(tc->plan) ? "unchanged" : "changed",
               in->global_batch != (long)tc->rt->B * tc->rt->N * tc->rt->opt.geo.accum_steps ? "; global batch changed" : "");
        char saved_mesh[64], our_mesh[64];
        describe_mesh(in->geo.tp_size, in->geo.n_ranks, in->geo.pp_size, saved_mesh, sizeof saved_mesh);
        describe_mesh(tc->rt->layout->tp_size, tc->rt->N, tc->rt->opt.geo.pp_size > 1 ? tc->rt->opt.geo.pp_size : 1,
                      our_mesh, sizeof our_mesh);
        printf("checkpoint: resuming a %s checkpoint on %s\n", saved_mesh, our_mesh);
        printf("checkpoint: loaded %.1f MB in %.3f s (%.1f MB/s)\n", in->bytes / 1e6, in->seconds,
               in->seconds > 0 ? in->bytes / 1e6 / in->seconds : 0.0);
        fflush(stdout);
    }
    return OSDP_OK;
}

osdp_status osdp_train_ckpt_start(osdp_train_ckpt *tc, osdp_runtime *rt, const osdp_model_config *cfg,
                                  const osdp_plan *plan, MPI_Comm comm)
{
    tc->rt = rt;
    tc->cfg = cfg;
    tc->plan = plan;
    tc->comm = comm;
    MPI_Comm_rank(comm, &tc->rank);
    tc->started = 1;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);

    osdp_status s = OSDP_OK;
    if (tc->dir && tc->rank == 0) s = mkdir_p(tc->dir);
    if (tc->dir && tc->rank == 0 && s == OSDP_OK) s = check_save_names(tc->dir);
    s = osdp_status_agree(s, comm);
    if (s != OSDP_OK) return s;
    if (tc->init_from) {
        s = osdp_ckpt_load(rt, cfg, tc->init_from, OSDP_CKPT_WEIGHTS_ONLY, comm, &tc->loaded);
        if (s == OSDP_OK && tc->rank == 0 && !tc->quiet) {
            if (tc->loaded.weights_only)
                printf("checkpoint: weights from the weights file %s; fresh optimizer, step 0\n", tc->init_from);
            else
                printf("checkpoint: weights from %s (step %ld of the run that wrote it); fresh optimizer, step 0\n",
                       tc->init_from, tc->loaded.step);
            fflush(stdout);
        }
        return s;
    }
    if (tc->resume) return resume(tc);
    return OSDP_OK;
}

/* a save of this step into --ckpt-dir is still to be made (none made or tried and skipped) */
static int save_due(const osdp_train_ckpt *tc)
{
    return tc->dir && tc->last_saved != tc->rt->step && tc->last_tried != tc->rt->step;
}

#define STEP_FAILED (1 << 16)   /* above any signal number: a rank's local failure in the step's one agreement */

osdp_status osdp_train_ckpt_after_step(osdp_train_ckpt *tc, osdp_status local, int *stop)
{
    *stop = 0;
    int sig = g_signal | (local != OSDP_OK ? STEP_FAILED : 0);
    if (osdp_comm_max_int(&tc->comm, &sig, "all-reduce of the stop-signal check") != OSDP_OK) return OSDP_ERR_COMM;
    if (sig & STEP_FAILED) return osdp_status_agree(local, tc->comm);   /* the failing rank's message, on every rank */
    if (sig) {
        osdp_status s = OSDP_OK;
        if (save_due(tc)) s = osdp_train_ckpt_save_now(tc);
        if (s != OSDP_OK) return s;
        tc->stop_signal = sig;
        *stop = 1;
        if (tc->rank == 0) {
            char name[64], path[TC_PATH_MAX] = "";
            osdp_ckpt_step_name(tc->rt->step, name, sizeof name);
            if (tc->dir) join(path, sizeof path, tc->dir, name);
            fprintf(stderr, "osdp_gpt: received %s: stopping after step %ld; %s%s\n", signal_name(sig), tc->rt->step,
                    !tc->dir ? "no --ckpt-dir, nothing saved"
                    : tc->last_saved != tc->rt->step ? "its checkpoint could not be saved (see the warning)"
                    : "checkpoint saved as ", tc->dir && tc->last_saved == tc->rt->step ? path : "");
            fflush(stderr);
        }
        return OSDP_OK;
    }
    if (tc->save_every > 0 && tc->rt->step % tc->save_every == 0 && save_due(tc)) return osdp_train_ckpt_save_now(tc);
    return OSDP_OK;
}

osdp_status osdp_train_ckpt_finish(osdp_train_ckpt *tc)
{
    if (save_due(tc)) return osdp_train_ckpt_save_now(tc);
    return OSDP_OK;
}

/* The operators' tensor-parallel paths (src/model/gpt_ops.c, issue 14) on
 * real MPI ranks: tests/model/test_tp_ops.sh runs this program under mpiexec -n 2
 * and -n 4, every rank of MPI_COMM_WORLD one rank of the tensor-parallel
 * group (its collectives: MPI_Allreduce and MPI_Allgather, below).  Each
 * rank also runs the whole model (tp 1) by itself as the reference.
 * Weights are filled by logical index, so the tp-T parts are cut from the
 * same logical tensors as the reference (osdp_tensor_logical_run); the
 * vocabulary padding gets large values that must never reach the loss.
 *
 *   match      every operator, forward and backward, at tp = T against
 *              tp = 1 on the tiny model and on a mixed-width one: the
 *              embedding's output bitwise, every other output, every
 *              parameter gradient (mapped back to logical) and every input
 *              gradient within 1e-5 of the largest value; the collectives
 *              called as Megatron does (one all-reduce per row-parallel
 *              product and per column-parallel input gradient, one
 *              all-gather of the cross-entropy statistics)
 *   padded     a vocabulary padded by quantum 7 and 128, at tp 1 (the
 *              vocab-parallel cross-entropy alone) and at tp T: the
 *              unpadded losses within 1e-6, zero gradients on the padding
 *   fd         central differences of the loss in elements of every
 *              tensor-parallel-split tensor (and replicated ones) on the
 *              tp-T path
 *   sliced     an operator cut into slices under TP equals it whole
 *              (within 1e-5: a product cut by slices sums in another
 *              order), slices acquired in pass order; an acquire error
 *              and a group-collective error stop the operator, which
 *              returns them; a layout for a group without one is refused
 *
 * Every verdict is agreed over the ranks (the worst error of any rank)
 * before it is asserted, so that all ranks take the same path. */
#include "osdp/gpt.h"
#include "osdp/layout.h"
#include "osdp/model_config.h"

#include "check_main.h"

#include <check.h>
#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ the group */

typedef struct counted_group {
    MPI_Comm comm;
    int all_reduces, all_gathers;   /* calls since the counts were zeroed */
    osdp_status fail;               /* != OSDP_OK: every call fails with it, no collective */
} counted_group;

/* Waits for a started collective, giving the core away between polls: with
 * more ranks than cores (4 on 2 here) a rank spinning in a blocking
 * collective takes the time slice of the rank it waits for. */
static osdp_status wait_yielding(MPI_Request *request, int started)
{
    if (started != MPI_SUCCESS) return osdp_error_set(OSDP_ERR_COMM, "test group: a collective failed to start");
    for (int done = 0;;) {
        if (MPI_Test(request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return osdp_error_set(OSDP_ERR_COMM, "test group: a collective failed");
        if (done) return OSDP_OK;
        sched_yield();
    }
}

static osdp_status group_all_reduce(void *arg, float *buf, size_t n)
{
    counted_group *g = arg;
    g->all_reduces++;
    if (g->fail != OSDP_OK) return osdp_error_set(g->fail, "test group: all_reduce refused");
    MPI_Request request;
    return wait_yielding(&request, MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, g->comm, &request));
}

static osdp_status group_all_gather(void *arg, const float *part, float *all, size_t n)
{
    counted_group *g = arg;
    g->all_gathers++;
    if (g->fail != OSDP_OK) return osdp_error_set(g->fail, "test group: all_gather refused");
    MPI_Request request;
    return wait_yielding(&request,
                         MPI_Iallgather(part, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, g->comm, &request));
}

static int world_rank(void)
{
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
static int world_size(void)
{
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

/* the worst value over the ranks: every rank asserts on the same number */
static double world_reduce(double v, MPI_Op op)
{
    double all;
    MPI_Request request;
    ck_assert(wait_yielding(&request, MPI_Iallreduce(&v, &all, 1, MPI_DOUBLE, op, MPI_COMM_WORLD, &request)) ==
              OSDP_OK);
    return all;
}
static double agree_max(double v) { return world_reduce(v, MPI_MAX); }

/* ------------------------------------------------------------ the model */

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    ck_assert_msg(p != NULL, "out of memory");
    return p;
}

/* a number in [-1, 1) from (op, tensor, logical element, salt) */
static float hashed_unit(uint64_t op, uint64_t tensor, uint64_t element, uint64_t salt)
{
    uint64_t z = (op * 1000003u + tensor) * 0x9E3779B97F4A7C15ull ^ (element + salt * 0x632BE59BD9B4E5ADull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct model {
    osdp_layout L;
    int B, T, n;
    float **w, **g, **act;
    osdp_op_acts *acts;
    float *wsb, *staging;
    osdp_workspace ws;
    counted_group group;
    osdp_tp_group tp;
    osdp_op_context ctx;
    int *in, *tg;
} model;

#define WEIGHT_SCALE 0.3f   /* weights of std ~0.3: scores and logits O(1), every path a measurable gradient */
#define PADDING_VALUE 1e3f  /* the vocabulary padding: would dominate the loss if it ever reached it */

static void model_config(osdp_model_config *cfg, const char *text)
{
    ck_assert_msg(osdp_model_config_parse(cfg, text, "test") == OSDP_OK, "model: %s", osdp_error_message());
}

/* tp 1: the whole model on this rank alone; tp > 1: this rank's parts in
 * the group of MPI_COMM_WORLD */
static void model_setup(model *M, const osdp_model_config *cfg, int tp, int vocab_quantum, int B, int T)
{
    memset(M, 0, sizeof *M);
    ck_assert_msg(osdp_layout_build_tp(&M->L, cfg, T, tp, vocab_quantum) == OSDP_OK, "layout: %s",
                  osdp_error_message());
    const int rank = tp > 1 ? world_rank() : 0;
    M->B = B;
    M->T = T;
    M->n = M->L.n_ops;
    M->w = xcalloc((size_t)M->n, sizeof(float *));
    M->g = xcalloc((size_t)M->n, sizeof(float *));
    M->act = xcalloc((size_t)M->n, sizeof(float *));
    M->acts = xcalloc((size_t)M->n, sizeof(osdp_op_acts));
    for (int i = 0; i < M->n; i++) {
        const osdp_op_layout *op = &M->L.op[i];
        M->w[i] = xcalloc(op->numel, sizeof(float));
        M->g[i] = xcalloc(op->numel, sizeof(float));
        for (int k = 0; k < op->n_tensors; k++) {
            const osdp_tensor_desc *t = &op->tensor[k];
            float *x = M->w[i] + t->offset;
            for (size_t e = 0, logical, run; e < t->numel; e += run) {
                int real = osdp_tensor_logical_run(t, rank, e, &logical, &run);
                for (size_t j = 0; j < run; j++) {
                    float u = hashed_unit((uint64_t)i, (uint64_t)k, real ? logical + j : e + j, real ? 1 : 2);
                    if (!real) x[e + j] = PADDING_VALUE * u;
                    else if (t->init == OSDP_INIT_NORMAL) x[e + j] = WEIGHT_SCALE * u;
                    else if (t->init == OSDP_INIT_ONES) x[e + j] = 1.0f + 0.2f * u;   /* LayerNorm gains */
                    else x[e + j] = 0.1f * u;                                        /* biases */
                }
            }
        }
        size_t floats = (size_t)B * op->act_floats_per_seq;
        M->act[i] = xcalloc(floats, sizeof(float));
        for (size_t e = 0; e < floats; e++) M->act[i][e] = NAN;   /* the forward must write what it reads */
        ck_assert_uint_eq(osdp_op_acts_carve(&M->L, i, B, M->act[i], &M->acts[i]), floats);
    }
    size_t wsf = osdp_workspace_floats(&M->L, B);
    M->wsb = xcalloc(wsf, sizeof(float));
    osdp_workspace_carve(&M->L, B, M->wsb, &M->ws);
    const size_t staging = (size_t)B * M->L.op[M->n - 1].tp_floats_per_seq;
    M->staging = staging ? xcalloc(staging, sizeof(float)) : NULL;
    M->group = (counted_group){.comm = MPI_COMM_WORLD, .fail = OSDP_OK};
    M->tp = (osdp_tp_group){.size = tp, .rank = rank, .all_reduce = group_all_reduce,
                            .all_gather = group_all_gather, .arg = &M->group};
    M->ctx = (osdp_op_context){.backend = &osdp_compute_cpu, .layout = &M->L, .tp = tp > 1 ? &M->tp : NULL,
                               .tp_staging = M->staging, .B = B, .T = T};
    /* the same tokens on every rank and in every model of a test */
    const size_t bt = (size_t)B * (size_t)T;
    M->in = xcalloc(bt, sizeof(int));
    M->tg = xcalloc(bt, sizeof(int));
    for (size_t j = 0; j < bt; j++) {
        M->in[j] = (int)((hashed_unit(7, 0, j, 3) + 1.0f) * 0.5f * (float)cfg->vocab) % cfg->vocab;
        M->tg[j] = (int)((hashed_unit(7, 1, j, 4) + 1.0f) * 0.5f * (float)cfg->vocab) % cfg->vocab;
    }
    /* a target in the vocabulary's last entry: next to the padding */
    M->tg[bt - 1] = cfg->vocab - 1;
}

static void model_free(model *M)
{
    for (int i = 0; i < M->n; i++) {
        free(M->w[i]);
        free(M->g[i]);
        free(M->act[i]);
    }
    free(M->w); free(M->g); free(M->act); free(M->acts); free(M->wsb); free(M->staging); free(M->in); free(M->tg);
    osdp_layout_free(&M->L);
}

static const float *input_of(const model *M, int i) { return i ? M->acts[i - 1].out : NULL; }

/* forward of operators first..n-1; the mean token loss, summed in double */
static double forward_from(model *M, int first)
{
    const size_t bt = (size_t)M->B * (size_t)M->T;
    for (int i = first; i < M->n; i++) {
        if (i == 0) memcpy(M->acts[0].tokens, M->in, bt * sizeof(int));
        if (i == M->n - 1) memcpy(M->acts[i].tokens, M->tg, bt * sizeof(int));
        osdp_op_forward(&M->ctx, i, M->w[i], input_of(M, i), &M->acts[i]);
    }
    double s = 0;
    for (size_t j = 0; j < bt; j++) s += (double)M->acts[M->n - 1].losses[j];
    return s / (double)bt;
}

static float loss_scale(const model *M) { return 1.0f / (float)(M->B * M->T); }

static void zero_grads(model *M)
{
    for (int i = 0; i < M->n; i++) memset(M->g[i], 0, M->L.op[i].numel * sizeof(float));
    M->ws.cur = 0;
}

/* ------------------------------------------------------------ comparing */

/* max |a - b| over the largest |b| */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double diff = 0, mag = 0;
    for (size_t e = 0; e < n; e++) {
        diff = fmax(diff, fabs((double)a[e] - (double)b[e]));
        mag = fmax(mag, fabs((double)b[e]));
    }
    return mag > 0 ? diff / mag : diff;
}

/* M's probabilities (its vocabulary columns) against the reference's */
static double probs_diff(const model *M, const model *R)
{
    const int VL = M->L.vocab_local, V = R->L.cfg.vocab, lo = M->tp.rank * VL;
    const size_t bt = (size_t)M->B * (size_t)M->T;
    const float *p = M->acts[M->n - 1].probs, *q = R->acts[R->n - 1].probs;
    double diff = 0, mag = 0;
    for (size_t i = 0; i < bt; i++)
        for (int j = 0; j < VL; j++) {
            double ref = lo + j < V ? q[i * (size_t)V + (size_t)(lo + j)] : 0.0;
            diff = fmax(diff, fabs(p[i * (size_t)VL + (size_t)j] - ref));
            mag = fmax(mag, fabs(ref));
        }
    return mag > 0 ? diff / mag : diff;   /* a rank holding only padding: its probabilities must be 0 */
}

/* M's gradients of op i mapped to logical against the reference's (tp 1,
 * unpadded); *padding_max: the largest |gradient| on vocabulary padding */
static double grads_diff(const model *M, const model *R, int i, double *padding_max)
{
    const osdp_op_layout *op = &M->L.op[i], *ref = &R->L.op[i];
    double worst = 0;
    for (int k = 0; k < op->n_tensors; k++) {
        const osdp_tensor_desc *t = &op->tensor[k];
        const float *g = M->g[i] + t->offset, *gr = R->g[i] + ref->tensor[k].offset;
        double diff = 0, mag = 0;
        for (size_t e = 0; e < ref->tensor[k].numel; e++) mag = fmax(mag, fabs(gr[e]));
        for (size_t e = 0, logical, run; e < t->numel; e += run) {
            int real = osdp_tensor_logical_run(t, M->tp.rank, e, &logical, &run);
            for (size_t j = 0; j < run; j++) {
                if (real) diff = fmax(diff, fabs((double)g[e + j] - (double)gr[logical + j]));
                else *padding_max = fmax(*padding_max, fabs(g[e + j]));
            }
        }
        worst = fmax(worst, mag > 0 ? diff / mag : diff);
    }
    return worst;
}

#define MATCH_TOL 1e-5

/* Forward and backward of M (tp T, quantum q) and R (tp 1) operator by
 * operator, comparing as they go; the collectives counted. */
static void compare_models(const char *label, model *M, model *R)
{
    const size_t bt = (size_t)M->B * (size_t)M->T;
    const int T = M->L.tp_size;
    double embed_bits = 0, out_worst = 0, loss_worst = 0, prob_worst = 0, grad_worst = 0, din_worst = 0;
    double padding_max = 0;
    char out_where[64] = "", grad_where[64] = "", din_where[64] = "";
    M->group.all_reduces = M->group.all_gathers = 0;
    forward_from(R, 0);
    for (int i = 0; i < M->n; i++) {
        if (i == 0) memcpy(M->acts[0].tokens, M->in, bt * sizeof(int));
        if (i == M->n - 1) memcpy(M->acts[i].tokens, M->tg, bt * sizeof(int));
        osdp_op_forward(&M->ctx, i, M->w[i], input_of(M, i), &M->acts[i]);
        const osdp_op_layout *op = &M->L.op[i];
        if (op->type == OSDP_OP_HEAD) {
            loss_worst = rel_diff(M->acts[i].losses, R->acts[i].losses, bt);
            /* the fused head (the default) keeps no probabilities: its losses and gradients say it all */
            if (M->acts[i].probs && R->acts[i].probs) prob_worst = probs_diff(M, R);
        } else {
            const size_t n = bt * (size_t)op->width;
            if (op->type == OSDP_OP_EMBED) embed_bits = memcmp(M->acts[i].out, R->acts[i].out, n * sizeof(float)) != 0;
            double d = rel_diff(M->acts[i].out, R->acts[i].out, n);
            if (d > out_worst) {
                out_worst = d;
                snprintf(out_where, sizeof out_where, "%s", op->name);
            }
        }
    }
    const int fwd_reduces = M->group.all_reduces, fwd_gathers = M->group.all_gathers;
    zero_grads(M);
    zero_grads(R);
    for (int i = M->n - 1; i >= 0; i--) {
        osdp_op_backward(&R->ctx, i, R->w[i], R->g[i], input_of(R, i), &R->acts[i], &R->ws, loss_scale(R));
        osdp_op_backward(&M->ctx, i, M->w[i], M->g[i], input_of(M, i), &M->acts[i], &M->ws, loss_scale(M));
        const osdp_op_layout *op = &M->L.op[i];
        double d = grads_diff(M, R, i, &padding_max);
        if (d > grad_worst) {
            grad_worst = d;
            snprintf(grad_where, sizeof grad_where, "%s", op->name);
        }
        if (i > 0) {
            d = rel_diff(M->ws.dres[M->ws.cur], R->ws.dres[R->ws.cur], bt * (size_t)op->width_in);
            if (d > din_worst) {
                din_worst = d;
                snprintf(din_where, sizeof din_where, "%s", op->name);
            }
        }
    }
    const int bwd_reduces = M->group.all_reduces - fwd_reduces;
    embed_bits = agree_max(embed_bits);
    out_worst = agree_max(out_worst);
    loss_worst = agree_max(loss_worst);
    prob_worst = agree_max(prob_worst);
    grad_worst = agree_max(grad_worst);
    din_worst = agree_max(din_worst);
    padding_max = agree_max(padding_max);
    if (world_rank() == 0)
        printf("%s, tp %d (vocab %d padded to %d): outputs %.2g (%s), losses %.2g, probabilities %.2g, parameter "
               "gradients %.2g (%s), input gradients %.2g (%s)\n",
               label, T, M->L.cfg.vocab, M->L.vocab_padded, out_worst, out_where, loss_worst, prob_worst, grad_worst,
               grad_where, din_worst, din_where);
    ck_assert_msg(embed_bits == 0, "%s: the embedding's output is not bitwise the tp 1 one", label);
    ck_assert_msg(out_worst <= MATCH_TOL, "%s: outputs differ by %g (%s)", label, out_worst, out_where);
    ck_assert_msg(loss_worst <= MATCH_TOL, "%s: losses differ by %g", label, loss_worst);
    ck_assert_msg(prob_worst <= MATCH_TOL, "%s: probabilities differ by %g", label, prob_worst);
    ck_assert_msg(grad_worst <= MATCH_TOL, "%s: parameter gradients differ by %g (%s)", label, grad_worst, grad_where);
    ck_assert_msg(din_worst <= MATCH_TOL, "%s: input gradients differ by %g (%s)", label, din_worst, din_where);
    ck_assert_msg(padding_max == 0, "%s: a padding gradient is %g", label, padding_max);
    if (T > 1) {
        /* embedding, each row-parallel product; each column-parallel input gradient, the head's */
        const int L = M->L.cfg.n_layer;
        ck_assert_msg(fwd_reduces == 1 + 2 * L && fwd_gathers == 1 && bwd_reduces == 2 * L + 1,
                      "%s: forward %d all-reduces, %d all-gathers, backward %d all-reduces; want %d, 1, %d", label,
                      fwd_reduces, fwd_gathers, bwd_reduces, 1 + 2 * L, 2 * L + 1);
    } else {
        ck_assert_int_eq(M->group.all_reduces + M->group.all_gathers, 0);
    }
}

static const char *const TINY = "[model]\nname = tiny\nn_layer = 2\nn_head = 4\nn_embd = 64\nvocab = 256\nctx = 64\n";
/* blocks of widths 32, 64, 32 (in_proj in attn.1 and attn.2), a vocabulary no group size divides */
static const char *const MIXED = "[model]\nname = mixed\nn_layer = 3\nn_head = 4\nwidths = 32, 64, 32\n"
                                 "vocab = 250\nctx = 16\n";

static void match_case(const char *label, const char *desc, int vocab_quantum)
{
    osdp_model_config cfg;
    model_config(&cfg, desc);
    model M, R;
    model_setup(&R, &cfg, 1, 1, 2, 8);
    model_setup(&M, &cfg, world_size(), vocab_quantum, 2, 8);
    compare_models(label, &M, &R);
    model_free(&M);
    model_free(&R);
}

START_TEST(test_match_tiny) { match_case("tiny", TINY, 1); }
END_TEST

START_TEST(test_match_mixed) { match_case("mixed widths", MIXED, 1); }
END_TEST

/* the naive attention and head (--attention naive --head naive) at tp T, vocabulary padded, against the
 * tiled and fused ones at tp 1: the reference path keeps its tensor-parallel form, probabilities included */
START_TEST(test_match_naive)
{
    osdp_model_config cfg, naive;
    model_config(&cfg, MIXED);
    naive = cfg;
    naive.attention_naive = naive.head_naive = 1;
    model M, R, N1;
    model_setup(&R, &cfg, 1, 1, 2, 8);
    model_setup(&M, &naive, world_size(), 7, 2, 8);
    compare_models("naive kernels", &M, &R);
    /* and the naive probabilities at tp T against the naive ones at tp 1 */
    model_setup(&N1, &naive, 1, 1, 2, 8);
    compare_models("naive kernels, probabilities", &M, &N1);
    ck_assert_ptr_nonnull(M.acts[M.n - 1].probs);
    model_free(&M);
    model_free(&R);
    model_free(&N1);
}
END_TEST

/* ------------------------------------------------------------ padding */

#define PADDED_LOSS_TOL 1e-6

/* the losses of a padded vocabulary (quantum q) at tp 1 and at tp T
 * against the unpadded ones; compare_models checks the padding gradients */
static void padded_case(int vocab_quantum)
{
    osdp_model_config cfg;
    model_config(&cfg, MIXED);
    model R, P1, PT;
    model_setup(&R, &cfg, 1, 1, 2, 8);
    model_setup(&P1, &cfg, 1, vocab_quantum, 2, 8);
    model_setup(&PT, &cfg, world_size(), vocab_quantum, 2, 8);
    ck_assert_int_gt(P1.L.vocab_padded, cfg.vocab);
    ck_assert_msg(P1.staging != NULL, "a padded vocabulary at tp 1 needs the cross-entropy staging");
    const double ref = forward_from(&R, 0), at1 = forward_from(&P1, 0), atT = forward_from(&PT, 0);
    const double worst = agree_max(fmax(fabs(at1 - ref), fabs(atT - ref)) / ref);
    if (world_rank() == 0)
        printf("vocabulary 250 padded by quantum %d (%d at tp 1, %d at tp %d): loss %.9g unpadded, %.9g tp 1, "
               "%.9g tp %d\n", vocab_quantum, P1.L.vocab_padded, PT.L.vocab_padded, world_size(), ref, at1, atT,
               world_size());
    ck_assert_msg(worst <= PADDED_LOSS_TOL, "quantum %d: padded losses %.9g, %.9g against %.9g", vocab_quantum, at1,
                  atT, ref);
    compare_models("padded", &P1, &R);
    compare_models("padded", &PT, &R);
    model_free(&R);
    model_free(&P1);
    model_free(&PT);
}

START_TEST(test_padded_7) { padded_case(7); }
END_TEST

START_TEST(test_padded_128) { padded_case(128); }
END_TEST

/* ------------------------------------------------------------ finite differences */

/* as tests/model/test_model.c: eps 1e-3 in fp32 leaves ~1e-4 of noise on the
 * quotient; a missing term is O(the gradient) */
#define FD_EPS 1e-3f
#define FD_ATOL 2e-3
#define FD_SAMPLES 3

/* d(loss)/d(element e of op i's tensor) by central differences, element e
 * of `owner`'s part (owner < 0: a replicated tensor, perturbed on every
 * rank alike); every rank runs the passes */
static double fd_numeric(model *M, int i, size_t e, int owner)
{
    const int mine = owner < 0 || owner == M->tp.rank;
    float *w = &M->w[i][e];
    const float w0 = *w, wp = w0 + FD_EPS, wm = w0 - FD_EPS;
    if (mine) *w = wp;
    const double lp = forward_from(M, i);
    if (mine) *w = wm;
    const double lm = forward_from(M, i);
    if (mine) *w = w0;
    return (lp - lm) / ((double)wp - (double)wm);
}

static void fd_case(const char *label, const char *desc, int vocab_quantum)
{
    osdp_model_config cfg;
    model_config(&cfg, desc);
    model M;
    const int T = world_size();
    model_setup(&M, &cfg, T, vocab_quantum, 2, 5);
    forward_from(&M, 0);
    zero_grads(&M);
    for (int i = M.n - 1; i >= 0; i--)
        osdp_op_backward(&M.ctx, i, M.w[i], M.g[i], input_of(&M, i), &M.acts[i], &M.ws, loss_scale(&M));
    double worst = 0, largest = 0;
    int checked = 0, split_checked = 0;
    char where[96] = "";
    for (int i = 0; i < M.n; i++) {
        const osdp_op_layout *op = &M.L.op[i];
        forward_from(&M, 0);   /* the activations of ops before i at the unperturbed weights */
        for (int k = 0; k < op->n_tensors; k++) {
            const osdp_tensor_desc *t = &op->tensor[k];
            /* every split tensor; of the replicated, the LayerNorm gain, wpe, in_proj and the proj biases */
            const int split = t->tp_split != OSDP_TP_REPLICATED;
            if (!split && k != op->param[OSDP_P_LN_W] && k != op->param[OSDP_P_WPE] &&
                k != op->param[OSDP_P_IN_PROJ_W] && k != op->param[OSDP_P_PROJ_B])
                continue;
            for (int s = 0; s < FD_SAMPLES; s++) {
                int owner = split ? (k + s) % T : -1;
                size_t e = (t->numel * (size_t)(2 * s + 1) / (2 * FD_SAMPLES) + (size_t)s * 7) % t->numel;
                if (k == op->param[OSDP_P_WTE] || k == op->param[OSDP_P_LM_HEAD_W]) {
                    /* a row of wte the input uses, a column of lm_head a target names */
                    const int token = k == op->param[OSDP_P_WTE] ? M.in[s] : M.tg[s];
                    const int VL = M.L.vocab_local, local = token % VL;
                    owner = token / VL;
                    e = k == op->param[OSDP_P_WTE] ? (size_t)local * (size_t)t->cols + (size_t)s
                                                   : (size_t)s * (size_t)t->cols + (size_t)local;
                }
                const double num = fd_numeric(&M, i, t->offset + e, owner);
                double ana = owner < 0 || owner == M.tp.rank ? M.g[i][t->offset + e] : 0.0;
                if (owner >= 0) ana = world_reduce(ana, MPI_SUM);   /* the owner's */
                const double err = fabs(ana - num) / fmax(1.0, fabs(num));
                largest = fmax(largest, fabs(num));
                checked++;
                split_checked += split;
                if (err > worst) {
                    worst = err;
                    snprintf(where, sizeof where, "%s/%s[%zu] of rank %d: analytic %.6g, numeric %.6g", op->name,
                             t->name, e, owner, ana, num);
                }
            }
        }
    }
    worst = agree_max(worst);
    if (world_rank() == 0)
        printf("finite differences, %s, tp %d: %d elements (%d of split tensors), largest gradient %.3g, worst error "
               "%.2g (%s)\n", label, T, checked, split_checked, largest, worst, where);
    ck_assert_msg(worst <= FD_ATOL, "%s: %s", label, where);
    ck_assert_msg(largest > 1e-2, "%s: the gradients checked are all below 1e-2: the check says nothing", label);
    model_free(&M);
}

START_TEST(test_fd_tiny) { fd_case("tiny", TINY, 1); }
END_TEST

START_TEST(test_fd_mixed_padded) { fd_case("mixed widths, vocabulary padded by 7", MIXED, 7); }
END_TEST

/* ------------------------------------------------------------ slices and errors */

typedef struct slice_log {
    int order[64], n;
    int fail_at;             /* acquire of this slice fails (-1: never) */
} slice_log;

static osdp_status log_acquire(void *arg, int s)
{
    slice_log *log = arg;
    if (log->n < 64) log->order[log->n++] = s;
    if (s == log->fail_at) return osdp_error_set(OSDP_ERR_OOM, "test: slice %d refused", s);
    return OSDP_OK;
}

/* operator i of M in g slices, each in an allocation of its own */
static void sliced_case(model *M, int i, int g)
{
    const osdp_op_layout *op = &M->L.op[i];
    const size_t bt = (size_t)M->B * (size_t)M->T, nout = bt * (size_t)op->width;
    size_t bounds[OSDP_MAX_SLICES + 1];
    ck_assert_msg(osdp_op_split(op, g, bounds) == OSDP_OK, "%s in %d: %s", op->name, g, osdp_error_message());
    float *wpart[OSDP_MAX_SLICES], *gpart[OSDP_MAX_SLICES];
    for (int s = 0; s < g; s++) {
        wpart[s] = xcalloc(bounds[s + 1] - bounds[s], sizeof(float));
        gpart[s] = xcalloc(bounds[s + 1] - bounds[s], sizeof(float));
        memcpy(wpart[s], M->w[i] + bounds[s], (bounds[s + 1] - bounds[s]) * sizeof(float));
    }
    slice_log log = {.fail_at = -1};
    osdp_op_slices sl = {.n = g, .bounds = bounds, .weights = (const void *const *)wpart, .grads = gpart,
                         .acquire = log_acquire, .arg = &log};
    /* whole: the reference output, input gradient and gradients */
    forward_from(M, 0);
    float *out_whole = xcalloc(nout, sizeof(float)), *din_whole = xcalloc(bt * (size_t)op->width_in, sizeof(float));
    float *losses_whole = xcalloc(bt, sizeof(float));
    const int head = op->type == OSDP_OP_HEAD;
    memcpy(head ? losses_whole : out_whole, head ? M->acts[i].losses : M->acts[i].out,
           (head ? bt : nout) * sizeof(float));
    float *dout = xcalloc(nout, sizeof(float));
    for (size_t e = 0; e < nout; e++) dout[e] = 0.01f * hashed_unit(9, (uint64_t)i, e, 5);
    zero_grads(M);
    memcpy(M->ws.dres[0], dout, nout * sizeof(float));
    osdp_op_backward(&M->ctx, i, M->w[i], M->g[i], input_of(M, i), &M->acts[i], &M->ws, loss_scale(M));
    memcpy(din_whole, M->ws.dres[M->ws.cur], bt * (size_t)op->width_in * sizeof(float));
    /* sliced */
    ck_assert_int_eq(osdp_op_forward_sliced(&M->ctx, i, &sl, input_of(M, i), &M->acts[i]), OSDP_OK);
    for (int k = 0; k < log.n; k++) ck_assert_int_eq(log.order[k], k);   /* increasing, each once */
    double out_diff = head ? rel_diff(M->acts[i].losses, losses_whole, bt) : rel_diff(M->acts[i].out, out_whole, nout);
    M->ws.cur = 0;
    memcpy(M->ws.dres[0], dout, nout * sizeof(float));
    log.n = 0;
    ck_assert_int_eq(osdp_op_backward_sliced(&M->ctx, i, &sl, input_of(M, i), &M->acts[i], &M->ws, loss_scale(M)),
                     OSDP_OK);
    for (int k = 0; k < log.n; k++) ck_assert_int_eq(log.order[k], g - 1 - k);   /* decreasing */
    double din_diff = rel_diff(M->ws.dres[M->ws.cur], din_whole, bt * (size_t)op->width_in), grad_diff = 0;
    for (int s = 0; s < g; s++)
        grad_diff = fmax(grad_diff, rel_diff(gpart[s], M->g[i] + bounds[s], bounds[s + 1] - bounds[s]));
    out_diff = agree_max(out_diff);
    din_diff = agree_max(din_diff);
    grad_diff = agree_max(grad_diff);
    if (world_rank() == 0)
        printf("%s in %d slices at tp %d: output %.2g, input gradient %.2g, gradients %.2g from whole\n", op->name, g,
               M->L.tp_size, out_diff, din_diff, grad_diff);
    ck_assert_msg(out_diff <= MATCH_TOL && din_diff <= MATCH_TOL && grad_diff <= MATCH_TOL,
                  "%s in %d slices: output %g, input gradient %g, gradients %g", op->name, g, out_diff, din_diff,
                  grad_diff);
    /* an acquire error in the middle stops the operator on every rank, before its collective */
    log = (slice_log){.fail_at = g / 2};
    ck_assert_int_eq(osdp_op_forward_sliced(&M->ctx, i, &sl, input_of(M, i), &M->acts[i]), OSDP_ERR_OOM);
    ck_assert_int_eq(log.order[log.n - 1], g / 2);
    for (int s = 0; s < g; s++) {
        free(wpart[s]);
        free(gpart[s]);
    }
    free(out_whole); free(din_whole); free(losses_whole); free(dout);
}

START_TEST(test_sliced)
{
    osdp_model_config cfg;
    model_config(&cfg, MIXED);
    cfg.head_naive = 1;   /* the fused head is never cut (test_split.c) */
    model M;
    model_setup(&M, &cfg, world_size(), 7, 2, 8);
    const char *ops[] = {"attn.1", "mlp.0", "head"};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) sliced_case(&M, osdp_layout_find_op(&M.L, ops[k]), 3);
    model_free(&M);
}
END_TEST

/* a group collective's error stops the operator, which returns it; a layout
 * cut for a group with no group in the context is refused */
START_TEST(test_group_errors)
{
    const int T = world_size();
    if (T == 1) return;   /* no collective at tp 1 */
    osdp_model_config cfg;
    model_config(&cfg, TINY);
    model M;
    model_setup(&M, &cfg, T, 1, 2, 8);
    forward_from(&M, 0);
    M.group.fail = OSDP_ERR_COMM;   /* every rank alike: no rank enters MPI */
    size_t bounds[2] = {0, 0};
    for (int i = 0; i < M.n; i++) {
        bounds[1] = M.L.op[i].numel;
        const void *w = M.w[i];
        float *g = M.g[i];
        osdp_op_slices sl = {.n = 1, .bounds = bounds, .weights = &w, .grads = &g};
        M.group.all_reduces = M.group.all_gathers = 0;
        ck_assert_int_eq(osdp_op_forward_sliced(&M.ctx, i, &sl, input_of(&M, i), &M.acts[i]), OSDP_ERR_COMM);
        ck_assert_int_eq(M.group.all_reduces + M.group.all_gathers, 1);   /* stopped at the first */
        if (M.L.op[i].type == OSDP_OP_EMBED) continue;   /* its backward needs no collective */
        M.ws.cur = 0;
        ck_assert_int_eq(osdp_op_backward_sliced(&M.ctx, i, &sl, input_of(&M, i), &M.acts[i], &M.ws, 1.0f),
                         OSDP_ERR_COMM);
    }
    M.group.fail = OSDP_OK;
    M.ctx.tp = NULL;
    bounds[1] = M.L.op[1].numel;
    const void *w = M.w[1];
    osdp_op_slices sl = {.n = 1, .bounds = bounds, .weights = &w};
    ck_assert_int_eq(osdp_op_forward_sliced(&M.ctx, 1, &sl, input_of(&M, 1), &M.acts[1]), OSDP_ERR_INTERNAL);
    ck_assert_msg(strstr(osdp_error_message(), "tensor-parallel group") != NULL, "%s", osdp_error_message());
    model_free(&M);
}
END_TEST

static Suite *tp_ops_suite(void)
{
    const TTest *match[] = {test_match_tiny, test_match_mixed, test_match_naive, NULL};
    const TTest *padded[] = {test_padded_7, test_padded_128, NULL};
    const TTest *fd[] = {test_fd_tiny, test_fd_mixed_padded, NULL};
    const TTest *sliced[] = {test_sliced, test_group_errors, NULL};
    const osdp_check_case cases[] = {
        {.name = "match", .tests = match},
        {.name = "padded", .tests = padded},
        {.name = "fd", .tests = fd},
        {.name = "sliced", .tests = sliced},
    };
    return osdp_check_suite("tp_ops", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = tp_ops_suite, .setup = osdp_check_mpi_cpu_setup,
                                                    .teardown = osdp_check_mpi_teardown};

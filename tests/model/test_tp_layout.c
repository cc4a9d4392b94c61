/* Tensor-parallel parts and the logical view (osdp/layout.h, osdp/logical.h):
 * for random models, tensor-parallel degrees 1, 2, 4 and vocabulary quanta
 * 1, 7, 128,
 *   - mapping: every logical element is held by exactly one rank of the
 *     group (split tensors) or by all (replicated), vocabulary padding by
 *     none; the layout's runs are correct, osdp_tensor_next_run's are
 *     correct and maximal;
 *   - initialisation: the logical weights assembled from the parts are
 *     bitwise those of tp 1 without padding (the flat buffer of today), any
 *     sub-range gives the same values, padding is 0;
 *   - checkpoint selections: each rank's pieces written through
 *     ckpt_select_part into a logical HDF5 dataset (in memory) give the
 *     logical tensor, read back give the parts (padding 0), and the
 *     pieces' checksums add up to the logical tensor's. */
#include "check_main.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/checkpoint_internal.h"
#include "osdp/init.h"
#include "osdp/layout.h"
#include "osdp/logical.h"
#include "osdp/model_config.h"

static const int tp_sizes[] = {1, 2, 4};
static const int vocab_quanta[] = {1, 7, 128};
enum { N_TP = 3, N_QUANTA = 3, N_MODELS = 6 };

static uint64_t rng_state = 88172645463325252ULL;

static size_t rnd_below(size_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return n ? (size_t)(rng_state % n) : 0;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Random model m: 4 or 8 heads (every tp divides them), 1-3 blocks of
 * widths that are multiples of the heads (mixed widths: in_proj), any
 * vocabulary. */
static void random_model(int m, osdp_model_config *cfg)
{
    rng_state = 0x9E3779B97F4A7C15ULL * (uint64_t)(m + 1);
    const int heads = rnd_below(2) ? 8 : 4, layers = 1 + (int)rnd_below(3);
    char text[512], widths[128] = "";
    for (int i = 0; i < layers; i++) {
        char w[16];
        snprintf(w, sizeof w, "%s%d", i ? ", " : "", heads * (1 + (int)rnd_below(3)));
        strcat(widths, w);
    }
    snprintf(text, sizeof text, "[model]\nname = tp%d\nn_layer = %d\nn_head = %d\nwidths = %s\nvocab = %d\nctx = 8\n", m,
             layers, heads, widths, 3 + (int)rnd_below(300));
    ck_assert_msg(osdp_model_config_parse(cfg, text, "test_tp_layout") == OSDP_OK, "%s: %s", text,
                  osdp_error_message());
}

static void build(osdp_layout *L, const osdp_model_config *cfg, int tp, int quantum)
{
    ck_assert_msg(osdp_layout_build_tp(L, cfg, cfg->ctx, tp, quantum) == OSDP_OK, "tp %d quantum %d: %s", tp, quantum,
                  osdp_error_message());
}

/* visit(cfg, L, arg) for every random model (the first n_models), every
 * tensor-parallel degree and every vocabulary quantum */
typedef void (*layout_visit)(const osdp_model_config *cfg, const osdp_layout *L, void *arg);

static void each_layout(int n_models, layout_visit visit, void *arg)
{
    for (int m = 0; m < n_models; m++) {
        osdp_model_config cfg;
        random_model(m, &cfg);
        for (int ti = 0; ti < N_TP; ti++)
            for (int qi = 0; qi < N_QUANTA; qi++) {
                osdp_layout L;
                build(&L, &cfg, tp_sizes[ti], vocab_quanta[qi]);
                visit(&cfg, &L, arg);
                osdp_layout_free(&L);
            }
    }
}

/* The mapping as layout.h describes it, element by element: the logical
 * index of local element e of tensor t on rank tp_rank, or -1 (padding). */
static long reference_logical(const osdp_tensor_desc *t, int tp_rank, size_t e)
{
    const long r = (long)(e / (size_t)t->cols), c = (long)(e % (size_t)t->cols), LC = t->logical_cols;
    switch (t->tp_split) {
    case OSDP_TP_REPLICATED: return (long)e;
    case OSDP_TP_ROWS: {
        long row = (long)tp_rank * t->rows + r;
        return row < t->logical_rows ? row * LC + c : -1;
    }
    case OSDP_TP_COLS: {
        const long group_cols = t->cols / t->tp_groups, logical_group = LC / t->tp_groups;
        const long within = (long)tp_rank * group_cols + c % group_cols;
        return within < logical_group ? r * LC + (c / group_cols) * logical_group + within : -1;
    }
    }
    return -2;
}

static void check_mapping(const osdp_model_config *cfg, const osdp_layout *L, void *arg)
{
    long *checked = arg;
    const int tp = L->tp_size;
    ck_assert_int_eq(L->vocab_padded % tp, 0);
    ck_assert_int_ge(L->vocab_padded, cfg->vocab);
    for (int i = 0; i < L->n_ops; i++)
        for (int k = 0; k < L->op[i].n_tensors; k++) {
            const osdp_tensor_desc *t = &L->op[i].tensor[k];
            const size_t logical_numel = osdp_tensor_logical_numel(t);
            int *held = calloc(logical_numel, sizeof *held);
            ck_assert_ptr_nonnull(held);
            size_t padding = 0;
            for (int r = 0; r < tp; r++) {
                /* the layout's runs: every element as the reference says */
                size_t logical, run;
                for (size_t e = 0; e < t->numel; e += run) {
                    int valid = osdp_tensor_logical_run(t, r, e, &logical, &run);
                    ck_assert_msg(run >= 1 && e + run <= t->numel, "%s/%s: run %zu at %zu", L->op[i].name, t->name,
                                  run, e);
                    for (size_t j = 0; j < run; j++) {
                        long want = reference_logical(t, r, e + j);
                        ck_assert_msg(valid ? want == (long)(logical + j) : want == -1,
                                      "tp %d rank %d %s/%s element %zu: layout says %s %zu, expected %ld", tp, r,
                                      L->op[i].name, t->name, e + j, valid ? "logical" : "padding", logical + j, want);
                        if (valid) held[logical + j]++;
                        else padding++;
                    }
                }
                /* the joined runs: the same map, and maximal */
                for (size_t e = 0; e < t->numel; e += run) {
                    int valid = osdp_tensor_next_run(t, r, e, t->numel, &logical, &run);
                    for (size_t j = 0; j < run; j++)
                        ck_assert(reference_logical(t, r, e + j) == (valid ? (long)(logical + j) : -1));
                    if (e + run < t->numel) {
                        long next = reference_logical(t, r, e + run);
                        ck_assert_msg(valid ? next != (long)(logical + run) : next != -1,
                                      "tp %d rank %d %s/%s: the run at %zu (%zu elements) is not maximal", tp, r,
                                      L->op[i].name, t->name, e, run);
                    }
                    (*checked)++;
                }
            }
            const int want = t->tp_split == OSDP_TP_REPLICATED ? tp : 1;
            for (size_t x = 0; x < logical_numel; x++)
                ck_assert_msg(held[x] == want, "tp %d vocabulary %d %s/%s: logical element %zu held by %d ranks", tp,
                              L->vocab_padded, L->op[i].name, t->name, x, held[x]);
            ck_assert_uint_eq(padding + want * logical_numel, (size_t)tp * t->numel);
            if (t->tp_split == OSDP_TP_REPLICATED) ck_assert_uint_eq(t->numel, logical_numel);
            if (tp == 1 && L->vocab_padded == cfg->vocab) ck_assert_uint_eq(padding, 0);
            free(held);
        }
}

START_TEST(test_mapping)
{
    long checked = 0;
    each_layout(N_MODELS, check_mapping, &checked);
    ck_assert_int_gt(checked, 1000);
}
END_TEST

/* the logical weights of operator i of a layout, assembled from every rank's part */
static float *logical_init(const osdp_layout *L, int i, uint64_t seed)
{
    const osdp_op_layout *op = &L->op[i];
    float *logical = xmalloc(osdp_op_logical_numel(op) * sizeof(float));
    float *part = xmalloc(op->numel * sizeof(float)), *rank0 = xmalloc(op->numel * sizeof(float));
    for (int r = 0; r < L->tp_size; r++) {
        osdp_init_op_range_tp(op, i, seed, r, 0, op->numel, r ? part : rank0);
        const float *p = r ? part : rank0;
        for (int k = 0; k < op->n_tensors; k++) {
            const osdp_tensor_desc *t = &op->tensor[k];
            for (size_t e = 0; e < t->numel; e++) {
                if (t->tp_split == OSDP_TP_REPLICATED)   /* every rank starts from the same bits */
                    ck_assert(memcmp(&p[t->offset + e], &rank0[t->offset + e], sizeof(float)) == 0);
                if (reference_logical(t, r, e) < 0)
                    ck_assert_msg(p[t->offset + e] == 0.0f, "%s/%s: padding element %zu is %g", op->name, t->name, e,
                                  (double)p[t->offset + e]);
            }
        }
        osdp_op_part_to_logical(op, r, p, logical);
        /* any sub-range gives the same values */
        for (int trial = 0; trial < 4; trial++) {
            size_t a = rnd_below(op->numel), b = a + 1 + rnd_below(op->numel - a);
            float *range = xmalloc((b - a) * sizeof(float));
            osdp_init_op_range_tp(op, i, seed, r, a, b, range);
            ck_assert_msg(memcmp(range, p + a, (b - a) * sizeof(float)) == 0, "%s rank %d: range [%zu, %zu) differs",
                          op->name, r, a, b);
            free(range);
        }
    }
    free(part);
    free(rank0);
    return logical;
}

static void check_init(const osdp_model_config *cfg, const osdp_layout *L, void *arg)
{
    const uint64_t seed = *(const uint64_t *)arg;
    osdp_layout whole;
    ck_assert_int_eq(osdp_layout_build(&whole, cfg, cfg->ctx), OSDP_OK);
    for (int i = 0; i < L->n_ops; i++) {
        const osdp_op_layout *op = &whole.op[i];
        ck_assert_uint_eq(osdp_op_logical_numel(&L->op[i]), op->numel);
        float *today = xmalloc(op->numel * sizeof(float));
        osdp_init_op_range(op, i, seed, 0, op->numel, today);   /* tp 1, unpadded: the flat buffer */
        float *logical = logical_init(L, i, seed);
        ck_assert_msg(memcmp(today, logical, op->numel * sizeof(float)) == 0,
                      "%s tp %d vocabulary %d: operator %s's logical weights differ from tp 1's", cfg->name, L->tp_size,
                      L->vocab_padded, op->name);
        free(today);
        free(logical);
    }
    osdp_layout_free(&whole);
}

START_TEST(test_init_independent_of_mesh)
{
    uint64_t seed = 1234567;
    each_layout(N_MODELS, check_init, &seed);
}
END_TEST

/* Pieces of a part as shards cut them: random consecutive ranges covering [0, n). */
static size_t random_cuts(size_t n, size_t *cuts, size_t max_cuts)
{
    size_t count = 0;
    cuts[count++] = 0;
    while (cuts[count - 1] < n && count < max_cuts - 1) {
        size_t step = 1 + rnd_below(n / 3 + 1);
        cuts[count] = cuts[count - 1] + step < n ? cuts[count - 1] + step : n;
        count++;
    }
    cuts[count - 1] = n;
    return count;
}

/* Move rank r's part of tensor t (part: its numel elements) to or from
 * dataset d in random pieces, as ckpt_transfer does; returns the pieces'
 * checksum. */
static uint64_t transfer_pieces(hid_t d, hid_t space, const osdp_tensor_desc *t, int r, float *part, int write)
{
    size_t cuts[64];
    uint64_t sum = 0;
    const size_t n_cuts = random_cuts(t->numel, cuts, 64);
    for (size_t c = 0; c + 1 < n_cuts; c++) {
        const size_t a = cuts[c], b = cuts[c + 1];
        hsize_t count = b - a;
        hid_t mspace = H5Screate_simple(1, &count, NULL);
        ck_assert_int_ge(ckpt_select_part(space, mspace, t, r, a, b), 0);
        ck_assert_int_eq(H5Sget_select_npoints(space), H5Sget_select_npoints(mspace));
        herr_t e = write ? H5Dwrite(d, H5T_NATIVE_FLOAT, mspace, space, H5P_DEFAULT, part + a)
                         : H5Dread(d, H5T_NATIVE_FLOAT, mspace, space, H5P_DEFAULT, part + a);
        ck_assert_int_ge(e, 0);
        sum += ckpt_checksum_part(t, r, part + a, a, b);
        H5Sclose(mspace);
    }
    return sum;
}

typedef struct selection_run { hid_t file; int datasets; } selection_run;

static void check_selections(const osdp_model_config *cfg, const osdp_layout *L, void *arg)
{
    (void)cfg;
    selection_run *sr = arg;
    const uint64_t seed = 99;
    for (int i = 0; i < L->n_ops; i++) {
        const osdp_op_layout *op = &L->op[i];
        float *logical = logical_init(L, i, seed);
        float *part = xmalloc(op->numel * sizeof(float)), *back = xmalloc(op->numel * sizeof(float));
        for (int k = 0; k < op->n_tensors; k++) {
            const osdp_tensor_desc *t = &op->tensor[k];
            char name[32];
            snprintf(name, sizeof name, "/d%d", sr->datasets++);
            hid_t space = ckpt_tensor_space(t);
            hid_t d = H5Dcreate2(sr->file, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            ck_assert_int_ge(d, 0);
            /* write each owner's pieces: the dataset is the logical tensor, the checksums add up to its own */
            uint64_t sum = 0;
            for (int r = 0; r < L->tp_size; r++) {
                if (!osdp_tensor_tp_owner(t, r)) continue;
                osdp_init_op_range_tp(op, i, seed, r, 0, op->numel, part);
                sum += transfer_pieces(d, space, t, r, part + t->offset, 1);
            }
            const size_t n = osdp_tensor_logical_numel(t);
            const float *want = logical + osdp_op_logical_offset(op, k);
            float *stored = xmalloc(n * sizeof(float));
            ck_assert_int_ge(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, stored), 0);
            ck_assert_msg(memcmp(stored, want, n * sizeof(float)) == 0,
                          "tp %d vocabulary %d %s/%s: the written dataset is not the logical tensor", L->tp_size,
                          L->vocab_padded, op->name, t->name);
            ck_assert_msg(sum == ckpt_checksum_partial(want, n, 0), "%s/%s: the pieces' checksums do not add up to the "
                          "tensor's", op->name, t->name);
            free(stored);
            /* read: every rank gets its part back, padding left as it was (0) */
            for (int r = 0; r < L->tp_size; r++) {
                osdp_init_op_range_tp(op, i, seed, r, 0, op->numel, part);
                memset(back, 0, t->numel * sizeof(float));
                transfer_pieces(d, space, t, r, back, 0);
                ck_assert_msg(memcmp(back, part + t->offset, t->numel * sizeof(float)) == 0,
                              "tp %d vocabulary %d rank %d %s/%s: the part read back differs", L->tp_size,
                              L->vocab_padded, r, op->name, t->name);
            }
            H5Dclose(d);
            H5Sclose(space);
        }
        free(part);
        free(back);
        free(logical);
    }
}

START_TEST(test_checkpoint_selections)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    ck_assert_int_ge(H5Pset_fapl_core(fapl, 1 << 20, 0), 0);   /* in memory, never on disk */
    selection_run sr = {.file = H5Fcreate("test_tp_layout.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl), .datasets = 0};
    ck_assert_int_ge(sr.file, 0);
    each_layout(3, check_selections, &sr);
    H5Fclose(sr.file);
    H5Pclose(fapl);
    ck_assert_int_gt(sr.datasets, 100);
}
END_TEST

static Suite *tp_layout_suite(void)
{
    const TTest *mapping[] = {test_mapping, NULL};
    const TTest *init[] = {test_init_independent_of_mesh, NULL};
    const TTest *checkpoint[] = {test_checkpoint_selections, NULL};
    const osdp_check_case cases[] = {
        {.name = "mapping", .tests = mapping},
        {.name = "init", .tests = init},
        {.name = "checkpoint", .tests = checkpoint},
    };
    return osdp_check_suite("tp_layout", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = tp_layout_suite};

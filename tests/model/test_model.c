/* Tests of the model layer (no MPI):
 *
 *   config   model descriptions (osdp_model_config_parse): good input, per-block
 *            widths, and every class of input error with its message
 *   layout   the per-operator size table: order, tensor shapes, parameter
 *            counts (GPT-2 small), contiguity, I&C input projections, sharding
 *   init     counter-based initialisation: any slice equals the same slice of
 *            the whole, padding is 0, LayerNorm 1/0, normal statistics,
 *            scaled residual projections
 *   grad     whole-model finite-difference gradient check of osdp_op_forward /
 *            osdp_op_backward on a uniform and an I&C model (every parameter)
 *
 * The runtime's pieces that need no MPI (optimizer, memory prediction, plan
 * files) are tested in tests/runtime/test_runtime.c. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "check_main.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/compute.h"
#include "osdp/gpt.h"
#include "osdp/init.h"
#include "osdp/layout.h"
#include "osdp/memory.h"
#include "osdp/model_config.h"
#include "osdp/optim.h"
#include "osdp/plan.h"
#include "osdp/runtime.h"
#include "test_model_text.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */

static int is_layernorm(const char *name) { return strncmp(name, "ln_", 3) == 0; }

/* ------------------------------------------------------------------------ */
/* 1. model descriptions                                                     */

START_TEST(test_config_good)
{
    const char *text =
        "; a comment\n"
        "[model]\n"
        "name    = tiny\n"
        "n_layer = 3\n"
        "n_head  = 2     ; inline comment\n"
        "n_embd  = 16\n"
        "vocab   = 100\n"
        "ctx     = 32\n";
    osdp_model_config cfg;
    parse_ok(&cfg, text);
    ck_assert_str_eq(cfg.name, "tiny");
    ck_assert_int_eq(cfg.n_layer, 3);
    ck_assert_int_eq(cfg.n_head, 2);
    ck_assert_int_eq(cfg.n_embd, 16);
    ck_assert_int_eq(cfg.vocab, 100);
    ck_assert_int_eq(cfg.ctx, 32);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(cfg.width[i], 16);
    ck_assert_str_eq(cfg.text, text);   /* stored verbatim for checkpoints */

    /* the hash is a function of the semantic content only */
    osdp_model_config same, other;
    parse_ok(&same, "[model]\nname = renamed\nn_layer=3\nn_head=2\nn_embd=16\nvocab=100\nctx=32\n");
    ck_assert_str_eq(same.name, "renamed");
    ck_assert(osdp_model_config_hash(&same) == osdp_model_config_hash(&cfg));
    parse_ok(&other, "[model]\nn_layer=3\nn_head=2\nn_embd=16\nvocab=101\nctx=32\n");
    ck_assert(osdp_model_config_hash(&other) != osdp_model_config_hash(&cfg));
    ck_assert_str_eq(other.name, "unnamed");   /* default name */
}
END_TEST

START_TEST(test_config_widths)
{
    osdp_model_config cfg;
    parse_ok(&cfg, "[model]\nname = ic\nn_layer = 4\nn_head = 4\nwidths = 8, 16,32 , 8\nvocab = 50\nctx = 8\n");
    ck_assert_int_eq(cfg.n_layer, 4);
    ck_assert_int_eq(cfg.width[0], 8);
    ck_assert_int_eq(cfg.width[1], 16);
    ck_assert_int_eq(cfg.width[2], 32);
    ck_assert_int_eq(cfg.width[3], 8);
    ck_assert_int_eq(cfg.n_embd, 8);   /* n_embd defaults to the first width */

    /* widths of the same value as n_embd: the model is uniform, same hash */
    osdp_model_config u1, u2;
    parse_ok(&u1, "[model]\nn_layer = 2\nn_head = 2\nn_embd = 8\nwidths = 8,8\nvocab = 50\nctx = 8\n");
    parse_ok(&u2, "[model]\nn_layer = 2\nn_head = 2\nn_embd = 8\nvocab = 50\nctx = 8\n");
    ck_assert(osdp_model_config_hash(&u1) == osdp_model_config_hash(&u2));
    /* and different widths give a different hash */
    osdp_model_config u3;
    parse_ok(&u3, "[model]\nn_layer = 2\nn_head = 2\nn_embd = 8\nwidths = 8,16\nvocab = 50\nctx = 8\n");
    ck_assert(osdp_model_config_hash(&u3) != osdp_model_config_hash(&u2));
}
END_TEST

typedef struct config_error_case {
    const char *what;
    const char *text;
    const char *word1, *word2;   /* must occur in the message (word2 may be NULL) */
} config_error_case;

#define BASE_KEYS "n_layer = 2\nn_head = 2\nn_embd = 8\nvocab = 10\nctx = 4\n"

static const config_error_case config_errors[] = {
    {"unknown key", "[model]\n" BASE_KEYS "dropout = 0.1\n", "unknown key", "dropout"},
    {"missing vocab", "[model]\nn_layer = 2\nn_head = 2\nn_embd = 8\nctx = 4\n", "missing", "vocab"},
    {"missing n_layer", "[model]\nn_head = 2\nn_embd = 8\nvocab = 10\nctx = 4\n", "missing", "n_layer"},
    {"missing n_embd and widths", "[model]\nn_layer = 2\nn_head = 2\nvocab = 10\nctx = 4\n", "missing", "n_embd"},
    {"non-numeric", "[model]\nn_layer = 2\nn_head = two\nn_embd = 8\nvocab = 10\nctx = 4\n", "n_head", "integer"},
    {"trailing junk", "[model]\nn_layer = 2\nn_head = 2\nn_embd = 8x\nvocab = 10\nctx = 4\n", "n_embd", "integer"},
    {"n_layer = 0", "[model]\nn_layer = 0\nn_head = 2\nn_embd = 8\nvocab = 10\nctx = 4\n", "n_layer", "[1,"},
    {"negative ctx", "[model]\nn_layer = 2\nn_head = 2\nn_embd = 8\nvocab = 10\nctx = -4\n", "ctx", NULL},
    {"vocab too large for uint16 tokens", "[model]\nn_layer = 2\nn_head = 2\nn_embd = 8\nvocab = 70000\nctx = 4\n", "vocab", NULL},
    {"heads do not divide", "[model]\nn_layer = 2\nn_head = 3\nn_embd = 8\nvocab = 10\nctx = 4\n", "divide", NULL},
    {"heads do not divide a block width", "[model]\nn_layer = 2\nn_head = 4\nwidths = 8, 10\nvocab = 10\nctx = 4\n", "divide", "10"},
    {"too few widths", "[model]\nn_layer = 3\nn_head = 2\nwidths = 8, 16\nvocab = 10\nctx = 4\n", "widths", NULL},
    {"too many widths", "[model]\nn_layer = 2\nn_head = 2\nwidths = 8, 16, 8\nvocab = 10\nctx = 4\n", "widths", NULL},
    {"bad width", "[model]\nn_layer = 2\nn_head = 2\nwidths = 8, x\nvocab = 10\nctx = 4\n", "widths", "x"},
    {"unknown section", "[training]\nlr = 0.1\n", "section", "training"},
    {"second unknown section", "[model]\n" BASE_KEYS "[optim]\nlr = 0.1\n", "section", "optim"},
    {"key before any section", "n_layer = 2\n[model]\nn_head = 2\nn_embd = 8\nvocab = 10\nctx = 4\n", "section", NULL},
    {"no section at all", "", "[model]", NULL},
    {"malformed line", "[model]\n" BASE_KEYS "this line has no equals sign\n", "malformed", NULL},
    {"tied_head not a boolean", "[model]\n" BASE_KEYS "tied_head = yes\n", "tied_head", "yes"},
    {"tied head, embedding and last block of different widths",
     "[model]\nn_layer = 2\nn_head = 2\nwidths = 8, 16\nvocab = 10\nctx = 4\ntied_head = true\n", "tied_head", "16"},
};

START_TEST(test_config_errors)
{
    const config_error_case *c = &config_errors[_i];
    osdp_model_config cfg;
    osdp_status s = osdp_model_config_parse(&cfg, c->text, "bad.ini");
    ck_assert_msg(s == OSDP_ERR_INPUT, "%s: status %d, expected OSDP_ERR_INPUT", c->what, (int)s);
    check_error_words(c->what, c->word1, c->word2, "bad.ini");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* 2. layout                                                                 */

static void check_contiguous(const osdp_op_layout *op)
{
    size_t off = 0;
    for (int k = 0; k < op->n_tensors; k++) {
        const osdp_tensor_desc *t = &op->tensor[k];
        ck_assert_msg(t->offset == off, "%s/%s: offset %zu, expected %zu", op->name, t->name, t->offset, off);
        ck_assert_uint_eq(t->numel, (size_t)t->rows * (size_t)t->cols);
        ck_assert_msg(t->ndim == (t->rows == 1 ? 1 : 2), "%s/%s: ndim %d with shape (%d,%d)",
                      op->name, t->name, t->ndim, t->rows, t->cols);
        off += t->numel;
    }
    ck_assert_msg(op->numel == off, "%s: numel %zu, tensors sum to %zu", op->name, op->numel, off);
}

static void check_tensor(const osdp_op_layout *op, int k, const char *name, int rows, int cols,
                         osdp_init_kind init)
{
    ck_assert_msg(k < op->n_tensors, "%s: no tensor %d (%s)", op->name, k, name);
    const osdp_tensor_desc *t = &op->tensor[k];
    ck_assert_msg(strcmp(t->name, name) == 0, "%s: tensor %d is '%s', expected '%s'", op->name, k, t->name, name);
    ck_assert_msg(t->rows == rows && t->cols == cols, "%s/%s: shape (%d,%d), expected (%d,%d)",
                  op->name, name, t->rows, t->cols, rows, cols);
    ck_assert_msg(t->init == init, "%s/%s: init kind %d, expected %d", op->name, name, (int)t->init, (int)init);
}

START_TEST(test_layout_ops)
{
    const int Lb = 3, d = 16, V = 50, ctx = 32, T = 16, NH = 2;
    osdp_layout L;
    layout_ok(&L, "[model]\nname = t\nn_layer = 3\nn_head = 2\nn_embd = 16\nvocab = 50\nctx = 32\n", T);
    ck_assert_int_eq(L.n_ops, 2 * Lb + 2);
    ck_assert_int_eq(L.T, T);
    ck_assert_str_eq(L.op[0].name, "embed");
    ck_assert_int_eq(L.op[0].type, OSDP_OP_EMBED);
    ck_assert_str_eq(L.op[L.n_ops - 1].name, "head");
    ck_assert_int_eq(L.op[L.n_ops - 1].type, OSDP_OP_HEAD);
    for (int i = 0; i < Lb; i++) {
        char a[32], m[32];
        snprintf(a, sizeof a, "attn.%d", i);
        snprintf(m, sizeof m, "mlp.%d", i);
        ck_assert_str_eq(L.op[1 + 2 * i].name, a);
        ck_assert_str_eq(L.op[2 + 2 * i].name, m);
        ck_assert_int_eq(L.op[1 + 2 * i].type, OSDP_OP_ATTN);
        ck_assert_int_eq(L.op[2 + 2 * i].type, OSDP_OP_MLP);
        ck_assert_int_eq(L.op[1 + 2 * i].block, i);
        ck_assert_int_eq(L.op[2 + 2 * i].block, i);
        ck_assert_int_eq(osdp_layout_find_op(&L, a), 1 + 2 * i);
        ck_assert_int_eq(osdp_layout_find_op(&L, m), 2 + 2 * i);
    }
    ck_assert_int_eq(osdp_layout_find_op(&L, "attn.3"), -1);
    ck_assert_int_eq(osdp_layout_find_op(&L, "mlp"), -1);

    const size_t dd = (size_t)d;
    size_t total = 0, maxn = 0;
    for (int i = 0; i < L.n_ops; i++) {
        const osdp_op_layout *op = &L.op[i];
        check_contiguous(op);
        total += op->numel;
        if (op->numel > maxn) maxn = op->numel;
        switch (op->type) {
        case OSDP_OP_EMBED:
            ck_assert_int_eq(op->n_tensors, 2);
            check_tensor(op, 0, "wte", V, d, OSDP_INIT_NORMAL);
            check_tensor(op, 1, "wpe", ctx, d, OSDP_INIT_NORMAL);
            ck_assert_uint_eq(op->numel, (size_t)(V + ctx) * dd);
            break;
        case OSDP_OP_ATTN:
            ck_assert_int_eq(op->n_tensors, 6);
            check_tensor(op, 0, "ln_1.weight", 1, d, OSDP_INIT_ONES);
            check_tensor(op, 1, "ln_1.bias", 1, d, OSDP_INIT_ZEROS);
            check_tensor(op, 2, "qkv.weight", d, 3 * d, OSDP_INIT_NORMAL);
            check_tensor(op, 3, "qkv.bias", 1, 3 * d, OSDP_INIT_ZEROS);
            check_tensor(op, 4, "proj.weight", d, d, OSDP_INIT_NORMAL);
            check_tensor(op, 5, "proj.bias", 1, d, OSDP_INIT_ZEROS);
            ck_assert_uint_eq(op->numel, 4 * dd * dd + 6 * dd);
            ck_assert_int_eq(op->width, d);
            ck_assert_int_eq(op->width_in, d);
            break;
        case OSDP_OP_MLP:
            ck_assert_int_eq(op->n_tensors, 6);
            check_tensor(op, 0, "ln_2.weight", 1, d, OSDP_INIT_ONES);
            check_tensor(op, 1, "ln_2.bias", 1, d, OSDP_INIT_ZEROS);
            check_tensor(op, 2, "fc.weight", d, 4 * d, OSDP_INIT_NORMAL);
            check_tensor(op, 3, "fc.bias", 1, 4 * d, OSDP_INIT_ZEROS);
            check_tensor(op, 4, "proj.weight", 4 * d, d, OSDP_INIT_NORMAL);
            check_tensor(op, 5, "proj.bias", 1, d, OSDP_INIT_ZEROS);
            ck_assert_uint_eq(op->numel, 8 * dd * dd + 7 * dd);
            break;
        case OSDP_OP_HEAD:
            ck_assert_int_eq(op->n_tensors, 3);
            check_tensor(op, 0, "ln_f.weight", 1, d, OSDP_INIT_ONES);
            check_tensor(op, 1, "ln_f.bias", 1, d, OSDP_INIT_ZEROS);
            check_tensor(op, 2, "lm_head.weight", d, V, OSDP_INIT_NORMAL);
            ck_assert_uint_eq(op->numel, 2 * dd + dd * (size_t)V);
            break;
        }
        if (osdp_op_can_recompute(op->type)) {
            /* a uniform block: attn + mlp = 12 d^2 + 13 d */
            if (op->type == OSDP_OP_MLP)
                ck_assert_uint_eq(L.op[i - 1].numel + op->numel, 12 * dd * dd + 13 * dd);
        }
        /* the activation size matches what the carver takes, for several B */
        for (int B = 1; B <= 3; B++) {
            osdp_op_acts acts;
            size_t used = osdp_op_acts_carve(&L, i, B, NULL, &acts);
            ck_assert_msg(used == (size_t)B * op->act_floats_per_seq, "%s: carve %zu floats for B=%d, layout says %zu",
                          op->name, used, B, (size_t)B * op->act_floats_per_seq);
        }
    }
    ck_assert_uint_eq(L.total_params, total);
    ck_assert_uint_eq(L.max_op_numel, maxn);
    ck_assert_uint_eq(L.max_width, dd);
    /* the tiled attention keeps a log-sum-exp per (head, row); the fused head one per row, its chunk of
     * logits in the staging */
    ck_assert_uint_eq(L.op[1].act_floats_per_seq, (size_t)T * dd * 6 + 2 * (size_t)T + (size_t)NH * T);
    ck_assert_uint_eq(L.op[1].scratch[OSDP_S_ROWDOT].floats, (size_t)NH * T);
    const osdp_op_layout *head = &L.op[L.n_ops - 1];
    ck_assert_uint_eq(head->act_floats_per_seq, (size_t)T * dd + 5 * (size_t)T);
    ck_assert_int_eq(head->head_chunk_rows, T);
    ck_assert_uint_eq(head->tp_floats_per_seq, 6 * (size_t)T + (size_t)T * V);
    osdp_layout_free(&L);
    /* the naive ones (--attention naive --head naive) keep the (NH, T, T) and (T, V) probabilities */
    osdp_model_config naive;
    parse_ok(&naive, "[model]\nname = t\nn_layer = 3\nn_head = 2\nn_embd = 16\nvocab = 50\nctx = 32\n");
    naive.attention_naive = naive.head_naive = 1;
    ck_assert_int_eq(osdp_layout_build(&L, &naive, T), OSDP_OK);
    ck_assert_uint_eq(L.op[1].act_floats_per_seq, (size_t)T * dd * 6 + 2 * (size_t)T + (size_t)NH * T * T);
    ck_assert_uint_eq(L.op[1].scratch[OSDP_S_DATT].floats, (size_t)NH * T * T);
    ck_assert_uint_eq(L.op[L.n_ops - 1].act_floats_per_seq, (size_t)T * dd + 4 * (size_t)T + (size_t)T * V);
    ck_assert_uint_eq(L.op[L.n_ops - 1].tp_floats_per_seq, 0);

    int o = -1, k = -1;
    ck_assert_int_eq(osdp_layout_find_tensor(&L, "attn.1/qkv.weight", &o, &k), 0);
    ck_assert_int_eq(o, 3);
    ck_assert_int_eq(k, 2);
    ck_assert_int_eq(osdp_layout_find_tensor(&L, "head/lm_head.weight", &o, &k), 0);
    ck_assert_int_eq(o, L.n_ops - 1);
    ck_assert_int_eq(k, 2);
    ck_assert_int_eq(osdp_layout_find_tensor(&L, "head/qkv.weight", &o, &k), -1);
    ck_assert_int_eq(osdp_layout_find_tensor(&L, "nohead", &o, &k), -1);
    osdp_layout_free(&L);

    /* T must be in [1, ctx] */
    osdp_model_config cfg;
    parse_ok(&cfg, "[model]\nn_layer = 1\nn_head = 1\nn_embd = 4\nvocab = 10\nctx = 8\n");
    ck_assert_int_eq(osdp_layout_build(&L, &cfg, 9), OSDP_ERR_INPUT);
    ck_assert_int_eq(osdp_layout_build(&L, &cfg, 0), OSDP_ERR_INPUT);
    ck_assert_int_eq(osdp_layout_build(&L, &cfg, 8), OSDP_OK);
    osdp_layout_free(&L);
}
END_TEST

START_TEST(test_layout_gpt2_small)
{
    osdp_layout L;
    layout_ok(&L, "[model]\nname = gpt2_small\nn_layer = 12\nn_head = 12\nn_embd = 768\nvocab = 50257\nctx = 1024\n", 1024);
    ck_assert_int_eq(L.n_ops, 26);
    /* GPT-2 small has 124,439,808 parameters with the LM head tied to wte;
     * osdp keeps the head untied: + 50257 * 768 */
    ck_assert_uint_eq(L.total_params, (size_t)124439808 + (size_t)50257 * 768);
    const size_t d = 768;
    ck_assert_uint_eq(L.op[5].numel + L.op[6].numel, 12 * d * d + 13 * d);
    ck_assert_uint_eq(L.max_op_numel, (size_t)(50257 + 1024) * 768);   /* embed */
    osdp_layout_free(&L);
    /* tied (tied_head = true): exactly GPT-2's count; the head holds ln_f alone */
    layout_ok(&L, "[model]\nname = gpt2_small\nn_layer = 12\nn_head = 12\nn_embd = 768\nvocab = 50257\nctx = 1024\n"
                  "tied_head = true\n", 1024);
    ck_assert_uint_eq(L.total_params, 124439808);
    const osdp_op_layout *head = &L.op[L.n_ops - 1];
    ck_assert_int_eq(head->n_tensors, 2);
    ck_assert_int_eq(head->param[OSDP_P_LM_HEAD_W], -1);
    ck_assert_uint_eq(head->numel, 2 * d);
    ck_assert_uint_eq(head->flops_per_token, 2 * d * 50257);   /* the product still runs, on wte */
    osdp_layout_free(&L);
}
END_TEST

/* issue 31: at T = 1024 the tiled attention and the fused head keep at most 45% of the naive activations
 * (1,354 MiB per sequence: the (NH, T, T) and (T, V) probabilities were 57% of them) */
START_TEST(test_layout_lean_activations)
{
    size_t per_seq[2] = {0, 0};
    for (int naive = 0; naive < 2; naive++) {
        osdp_model_config cfg;
        parse_ok(&cfg, "[model]\nname = gpt2_small\nn_layer = 12\nn_head = 12\nn_embd = 768\nvocab = 50257\n"
                       "ctx = 1024\n");
        cfg.attention_naive = cfg.head_naive = naive;
        osdp_layout L;
        ck_assert_int_eq(osdp_layout_build(&L, &cfg, 1024), OSDP_OK);
        for (int i = 0; i < L.n_ops; i++) per_seq[naive] += L.op[i].act_floats_per_seq * sizeof(float);
        osdp_layout_free(&L);
    }
    ck_assert_uint_eq(per_seq[1], 1420320768);   /* 1,354.5 MiB */
    ck_assert_msg(per_seq[0] <= per_seq[1] * 45 / 100, "%zu bytes per sequence, naive %zu", per_seq[0], per_seq[1]);
}
END_TEST

START_TEST(test_layout_ic)
{
    osdp_layout L;
    layout_ok(&L, "[model]\nname = ic\nn_layer = 2\nn_head = 2\nwidths = 8, 16\nvocab = 11\nctx = 6\n", 5);
    ck_assert_int_eq(L.n_ops, 6);
    const osdp_op_layout *e = &L.op[0], *a0 = &L.op[1], *m0 = &L.op[2], *a1 = &L.op[3], *m1 = &L.op[4], *h = &L.op[5];
    for (int i = 0; i < L.n_ops; i++) check_contiguous(&L.op[i]);
    check_tensor(e, 0, "wte", 11, 8, OSDP_INIT_NORMAL);
    check_tensor(e, 1, "wpe", 6, 8, OSDP_INIT_NORMAL);
    /* block 0 has the embedding's width: no input projection */
    ck_assert_int_eq(a0->n_tensors, 6);
    ck_assert_int_eq(find_tensor(a0, "in_proj.weight"), -1);
    ck_assert_int_eq(a0->width, 8);
    ck_assert_int_eq(a0->width_in, 8);
    ck_assert_uint_eq(a0->numel + m0->numel, 12 * 64 + 13 * 8);
    /* block 1 is wider: attn.1 owns in_proj (8 -> 16) first */
    ck_assert_int_eq(a1->n_tensors, 8);
    check_tensor(a1, 0, "in_proj.weight", 8, 16, OSDP_INIT_NORMAL);
    check_tensor(a1, 1, "in_proj.bias", 1, 16, OSDP_INIT_ZEROS);
    check_tensor(a1, 2, "ln_1.weight", 1, 16, OSDP_INIT_ONES);
    check_tensor(a1, 4, "qkv.weight", 16, 48, OSDP_INIT_NORMAL);
    ck_assert_int_eq(a1->width, 16);
    ck_assert_int_eq(a1->width_in, 8);
    ck_assert_uint_eq(a1->numel, 8 * 16 + 16 + 4 * 256 + 6 * 16);
    ck_assert_uint_eq(m1->numel, 8 * 256 + 7 * 16);
    /* the head has the last block's width */
    ck_assert_int_eq(h->width, 16);
    check_tensor(h, 2, "lm_head.weight", 16, 11, OSDP_INIT_NORMAL);
    ck_assert_uint_eq(L.max_width, 16);
    /* attn.1 also saves the projected residual (T * 16 more floats than a plain block) */
    ck_assert_uint_eq(a1->act_floats_per_seq, 5 * 16 * 7 + 2 * 5 + 2 * 5);   /* + the tiled attention's lse (NH, T) */
    osdp_op_acts acts;
    osdp_op_acts_carve(&L, 3, 2, NULL, &acts);
    ck_assert_ptr_null(acts.xin);   /* NULL base: pointers stay NULL */
    float *base = xmalloc(2 * a1->act_floats_per_seq * sizeof(float));
    osdp_op_acts_carve(&L, 3, 2, base, &acts);
    ck_assert_ptr_nonnull(acts.xin);
    osdp_op_acts_carve(&L, 1, 2, base, &acts);
    ck_assert_ptr_null(acts.xin);
    free(base);

    /* narrowing also gets a projection */
    osdp_layout N;
    layout_ok(&N, "[model]\nn_layer = 3\nn_head = 2\nwidths = 16, 8, 8\nvocab = 11\nctx = 6\n", 6);
    check_tensor(&N.op[3], 0, "in_proj.weight", 16, 8, OSDP_INIT_NORMAL);
    ck_assert_int_eq(find_tensor(&N.op[5], "in_proj.weight"), -1);
    ck_assert_int_eq(N.op[0].width, 16);
    ck_assert_int_eq(N.op[N.n_ops - 1].width, 8);
    osdp_layout_free(&N);
    osdp_layout_free(&L);
}
END_TEST

START_TEST(test_layout_shard)
{
    ck_assert_uint_eq(osdp_padded_numel(0, 3), 0);
    ck_assert_uint_eq(osdp_padded_numel(1, 3), 3);
    ck_assert_uint_eq(osdp_padded_numel(9, 3), 9);
    ck_assert_uint_eq(osdp_padded_numel(10, 3), 12);
    ck_assert_uint_eq(osdp_padded_numel(11, 3), 12);
    ck_assert_uint_eq(osdp_shard_numel(1, 3), 1);
    ck_assert_uint_eq(osdp_shard_numel(9, 3), 3);
    ck_assert_uint_eq(osdp_shard_numel(10, 3), 4);
    ck_assert_uint_eq(osdp_shard_numel(12, 3), 4);
    ck_assert_uint_eq(osdp_padded_numel(7, 1), 7);
    ck_assert_uint_eq(osdp_shard_numel(7, 1), 7);

    osdp_layout L;
    layout_ok(&L, "[model]\nn_layer = 2\nn_head = 2\nwidths = 8, 16\nvocab = 11\nctx = 6\n", 5);
    for (int i = 0; i < L.n_ops; i++) {
        size_t n = L.op[i].numel, p = osdp_padded_numel(n, 3), s = osdp_shard_numel(n, 3);
        ck_assert_uint_eq(p % 3, 0);
        ck_assert(p >= n && p - n < 3);
        ck_assert_uint_eq(3 * s, p);
    }
    /* embed: (11 + 6) * 8 = 136 -> 138, shard 46 */
    ck_assert_uint_eq(osdp_padded_numel(L.op[0].numel, 3), 138);
    ck_assert_uint_eq(osdp_shard_numel(L.op[0].numel, 3), 46);
    osdp_layout_free(&L);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* 3. counter-based initialisation                                           */

START_TEST(test_init_ranges)
{
    osdp_layout L;
    layout_ok(&L, "[model]\nn_layer = 3\nn_head = 2\nwidths = 8, 16, 16\nvocab = 37\nctx = 12\n", 12);
    const uint64_t seed = 4242;
    const size_t pad = 7;
    for (int i = 0; i < L.n_ops; i++) {
        const osdp_op_layout *op = &L.op[i];
        size_t n = op->numel + pad;
        float *whole = xmalloc(n * sizeof(float)), *part = xmalloc(n * sizeof(float));
        osdp_init_op_range(op, i, seed, 0, n, whole);
        for (size_t e = op->numel; e < n; e++)
            ck_assert_msg(whole[e] == 0.0f, "%s: padding element %zu is %g", op->name, e, (double)whole[e]);
        for (int r = 0; r < 40; r++) {
            size_t a = rnd_below(n), b = a + 1 + rnd_below(n - a);
            if (r == 0) { a = op->numel - 1; b = n; }              /* straddles the end */
            if (r == 1) { a = op->numel; b = n; }                  /* padding only */
            if (r == 2) { a = 0; b = 1; }
            for (size_t e = 0; e < n; e++) part[e] = NAN;
            osdp_init_op_range(op, i, seed, a, b, part);
            for (size_t e = a; e < b; e++)
                ck_assert_msg(part[e - a] == whole[e], "%s [%zu,%zu): element %zu is %g, whole-range call gives %g",
                              op->name, a, b, e, (double)part[e - a], (double)whole[e]);
            for (size_t e = b - a; e < n; e++)
                ck_assert_msg(isnan(part[e]), "%s [%zu,%zu): wrote past hi - lo", op->name, a, b);
        }
        /* a different seed changes the normal tensors */
        osdp_init_op_range(op, i, seed + 1, 0, n, part);
        int k0 = find_tensor(op, op->type == OSDP_OP_EMBED ? "wte" : op->type == OSDP_OP_HEAD ? "lm_head.weight"
                                 : op->type == OSDP_OP_ATTN ? "qkv.weight" : "fc.weight");
        ck_assert_int_ge(k0, 0);
        const osdp_tensor_desc *t = &op->tensor[k0];
        size_t differ = 0;
        for (size_t e = t->offset; e < t->offset + t->numel; e++) differ += part[e] != whole[e];
        ck_assert_msg(differ > t->numel * 9 / 10, "%s: seed change altered only %zu of %zu elements",
                      op->name, differ, t->numel);
        free(whole);
        free(part);
    }
    /* identical operators at different indices (mlp.1, mlp.2) get different values */
    size_t n = L.op[4].numel;
    ck_assert_uint_eq(n, L.op[6].numel);
    float *x = xmalloc(n * sizeof(float)), *y = xmalloc(n * sizeof(float));
    osdp_init_op_range(&L.op[4], 4, seed, 0, n, x);
    osdp_init_op_range(&L.op[6], 6, seed, 0, n, y);
    int k = find_tensor(&L.op[4], "fc.weight");
    size_t same = 0;
    for (size_t e = L.op[4].tensor[k].offset; e < L.op[4].tensor[k].offset + L.op[4].tensor[k].numel; e++)
        same += x[e] == y[e];
    ck_assert_msg(same < 10, "mlp.1 and mlp.2 share %zu fc.weight values", same);
    free(x);
    free(y);
    osdp_layout_free(&L);
}
END_TEST

static void tensor_stats(const float *x, size_t n, double *mean, double *std, double *frac2)
{
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    *mean = s / (double)n;
    for (size_t i = 0; i < n; i++) s2 += ((double)x[i] - *mean) * ((double)x[i] - *mean);
    *std = sqrt(s2 / (double)(n - 1));
    size_t beyond = 0;
    for (size_t i = 0; i < n; i++) beyond += fabs((double)x[i] - *mean) > 2.0 * *std;
    *frac2 = (double)beyond / (double)n;
}

START_TEST(test_init_values)
{
    const int Lb = 4;
    osdp_layout L;
    layout_ok(&L, "[model]\nn_layer = 4\nn_head = 4\nn_embd = 64\nvocab = 4096\nctx = 64\n", 64);
    const double std = 0.02, res_std = 0.02 / sqrt(2.0 * Lb);
    for (int i = 0; i < L.n_ops; i++) {
        const osdp_op_layout *op = &L.op[i];
        float *w = xmalloc(op->numel * sizeof(float));
        osdp_init_op_range(op, i, 7, 0, op->numel, w);
        for (int k = 0; k < op->n_tensors; k++) {
            const osdp_tensor_desc *t = &op->tensor[k];
            const float *x = w + t->offset;
            if (is_layernorm(t->name)) {
                float want = strstr(t->name, ".weight") ? 1.0f : 0.0f;
                ck_assert_int_eq(t->init, want == 1.0f ? OSDP_INIT_ONES : OSDP_INIT_ZEROS);
                for (size_t e = 0; e < t->numel; e++)
                    ck_assert_msg(x[e] == want, "%s/%s[%zu] = %g, expected %g", op->name, t->name, e,
                                  (double)x[e], (double)want);
            } else if (t->ndim == 1) {   /* linear biases start at 0 */
                for (size_t e = 0; e < t->numel; e++)
                    ck_assert_msg(x[e] == 0.0f, "%s/%s[%zu] = %g", op->name, t->name, e, (double)x[e]);
            } else {
                int residual = strcmp(t->name, "proj.weight") == 0;
                double want = residual ? res_std : std;
                ck_assert_msg(fabs(t->init_std - want) <= 1e-6 * want, "%s/%s: init_std %g, expected %g",
                              op->name, t->name, (double)t->init_std, want);
                double mean, sd, frac2;
                tensor_stats(x, t->numel, &mean, &sd, &frac2);
                /* n >= 4096: sample std has relative error ~1/sqrt(2n) < 1.2% */
                ck_assert_msg(fabs(sd - want) <= 0.1 * want, "%s/%s: sample std %g, expected %g (n = %zu)",
                              op->name, t->name, sd, want, t->numel);
                ck_assert_msg(fabs(mean) <= 0.1 * want, "%s/%s: sample mean %g (std %g)", op->name, t->name, mean, want);
                /* normal, not uniform: P(|x| > 2 sigma) = 4.55% (0 for a uniform of this std) */
                ck_assert_msg(frac2 > 0.03 && frac2 < 0.065, "%s/%s: %.2f%% beyond 2 sigma",
                              op->name, t->name, 100 * frac2);
            }
        }
        free(w);
    }
    /* the large tensor: wte (4096 x 64 = 262144 values) */
    float *w = xmalloc(L.op[0].numel * sizeof(float));
    osdp_init_op_range(&L.op[0], 0, 99, 0, L.op[0].numel, w);
    double mean, sd, frac2;
    tensor_stats(w, L.op[0].tensor[0].numel, &mean, &sd, &frac2);
    ck_assert_msg(fabs(sd - std) <= 0.1 * std, "wte std %g", sd);
    ck_assert_msg(fabs(sd - std) <= 0.01 * std, "wte std %g is off by more than 1%% over 262144 values", sd);
    ck_assert_msg(fabs(mean) <= 0.01 * std, "wte mean %g", mean);
    free(w);
    osdp_layout_free(&L);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* 4. whole-model finite-difference gradient check                           */

typedef struct gc_model {
    osdp_layout L;
    int B, T, n;
    float **w, **g, **act;
    uint16_t **w16;     /* the CPU bf16 table's working weights, rounded from w before each pass (NULL: fp32) */
    osdp_op_acts *acts;
    float *wsb, *staging;
    osdp_workspace ws;
    osdp_op_context ctx;
    int *in, *tg;
} gc_model;

/* which kernels a gradient check runs, and the vocabulary quantum (above 1: padding rows and columns) */
typedef struct gc_kernels {
    int naive;          /* --attention naive --head naive; 0: tiled and fused */
    int vocab_quantum;
    int bf16_weights;   /* the CPU bf16 table (bf16 working weights rounded from the fp32 ones) */
    int bf16_acts;      /* and bf16 activations (cfg.act_bf16, osdp/layout.h) */
} gc_kernels;

/* Normal-initialised weights are scaled by this: at std 0.02 the attention is
 * uniform and the gradients through q and k are ~1e-6, too small for a
 * finite-difference check to say anything about them.  At std 0.3 scores
 * and logits are O(1) and every path carries a measurable gradient. */
#define GC_WEIGHT_SCALE 15.0f

static void gc_setup_kernels(gc_model *M, const char *desc, int T, int B, uint64_t seed, gc_kernels k)
{
    memset(M, 0, sizeof *M);
    osdp_model_config cfg;
    parse_ok(&cfg, desc);
    cfg.attention_naive = cfg.head_naive = k.naive;
    cfg.act_bf16 = k.bf16_acts;
    ck_assert_int_eq(osdp_layout_build_tp(&M->L, &cfg, T, 1, k.vocab_quantum), OSDP_OK);
    M->B = B;
    M->T = T;
    M->n = M->L.n_ops;
    M->w = xmalloc((size_t)M->n * sizeof(float *));
    M->g = xmalloc((size_t)M->n * sizeof(float *));
    M->act = xmalloc((size_t)M->n * sizeof(float *));
    M->acts = xmalloc((size_t)M->n * sizeof(osdp_op_acts));
    if (k.bf16_weights) M->w16 = xmalloc((size_t)M->n * sizeof(uint16_t *));
    for (int i = 0; i < M->n; i++) {
        const osdp_op_layout *op = &M->L.op[i];
        M->w[i] = xmalloc(op->numel * sizeof(float));
        M->g[i] = xmalloc(op->numel * sizeof(float));
        if (M->w16) M->w16[i] = xmalloc(op->numel * sizeof(uint16_t));
        osdp_init_op_range(op, i, seed, 0, op->numel, M->w[i]);
        for (int k = 0; k < op->n_tensors; k++) {
            const osdp_tensor_desc *t = &op->tensor[k];
            float *x = M->w[i] + t->offset;
            for (size_t e = 0; e < t->numel; e++) {
                switch (t->init) {
                case OSDP_INIT_NORMAL: x[e] *= GC_WEIGHT_SCALE; break;
                /* LayerNorm gains around 1, all biases small and non-zero */
                case OSDP_INIT_ONES: x[e] = 1.0f + (float)(0.4 * (rnd_unit() - 0.5)); break;
                case OSDP_INIT_ZEROS: x[e] = (float)(0.2 * (rnd_unit() - 0.5)); break;
                }
            }
        }
        size_t floats = (size_t)B * op->act_floats_per_seq;
        M->act[i] = xmalloc(floats * sizeof(float));
        for (size_t e = 0; e < floats; e++) M->act[i][e] = NAN;   /* the forward must write what it reads */
        size_t used = osdp_op_acts_carve(&M->L, i, B, M->act[i], &M->acts[i]);
        ck_assert_uint_eq(used, floats);
    }
    size_t wsf = osdp_workspace_floats(&M->L, B);
    M->wsb = xmalloc(wsf * sizeof(float));
    for (size_t e = 0; e < wsf; e++) M->wsb[e] = NAN;
    osdp_workspace_carve(&M->L, B, M->wsb, &M->ws);
    const size_t staging = (size_t)B * M->L.op[M->n - 1].tp_floats_per_seq;   /* a fused or padded head's */
    M->staging = staging ? xmalloc(staging * sizeof(float)) : NULL;
    M->ctx = (osdp_op_context){.backend = M->w16 ? &osdp_compute_cpu_bf16 : &osdp_compute_cpu, .layout = &M->L,
                               .B = B, .T = T, .tp_staging = M->staging,
                               .act_scratch = k.bf16_acts ? M->ws.scratch : NULL,
                               /* read by a tied head */
                               .embed_weights = M->w16 ? (const void *)M->w16[0] : (const void *)M->w[0],
                               .embed_grads = M->g[0]};
    size_t bt = (size_t)B * (size_t)T;
    M->in = xmalloc(bt * sizeof(int));
    M->tg = xmalloc(bt * sizeof(int));
    for (size_t j = 0; j < bt; j++) {
        M->in[j] = (int)rnd_below((size_t)M->L.cfg.vocab);
        M->tg[j] = (int)rnd_below((size_t)M->L.cfg.vocab);
    }
}

static void gc_setup(gc_model *M, const char *desc, int T, int B, uint64_t seed)
{
    gc_setup_kernels(M, desc, T, B, seed, (gc_kernels){.naive = 0, .vocab_quantum = 1});
}

static void gc_free(gc_model *M)
{
    for (int i = 0; i < M->n; i++) {
        free(M->w[i]);
        free(M->g[i]);
        free(M->act[i]);
        if (M->w16) free(M->w16[i]);
    }
    free(M->w16);
    free(M->w); free(M->g); free(M->act); free(M->acts); free(M->wsb); free(M->staging); free(M->in); free(M->tg);
    osdp_layout_free(&M->L);
}

/* operator i's working weights: w, or its bf16 copy made now */
static const void *gc_weights(gc_model *M, int i)
{
    if (!M->w16) return M->w[i];
    osdp_compute_cpu_bf16.convert_weights(M->w16[i], M->w[i], M->L.op[i].numel);
    return M->w16[i];
}

/* forward of ops first..n-1 (earlier ops' activations are still valid);
 * returns the mean token loss accumulated in double */
static double gc_forward_from(gc_model *M, int first)
{
    const size_t bt = (size_t)M->B * (size_t)M->T;
    for (int i = first; i < M->n; i++) {
        if (i == 0) memcpy(M->acts[0].tokens, M->in, bt * sizeof(int));
        if (i == M->n - 1) memcpy(M->acts[i].tokens, M->tg, bt * sizeof(int));
        if (M->w16 && first > 0) (void)gc_weights(M, 0);   /* a tied head reads the embedding's */
        osdp_op_forward(&M->ctx, i, gc_weights(M, i), i ? M->acts[i - 1].out : NULL, &M->acts[i]);
    }
    double s = 0;
    for (size_t j = 0; j < bt; j++) s += (double)M->acts[M->n - 1].losses[j];
    return s / (double)bt;
}

/* backward into M->g (accumulating: the caller zeroes) */
static void gc_backward(gc_model *M)
{
    const float scale = 1.0f / (float)(M->B * M->T);
    M->ws.cur = 0;
    for (int i = M->n - 1; i >= 0; i--)
        osdp_op_backward(&M->ctx, i, gc_weights(M, i), M->g[i], i ? M->acts[i - 1].out : NULL, &M->acts[i], &M->ws,
                         scale);
}

static void gc_zero_grads(gc_model *M)
{
    for (int i = 0; i < M->n; i++) memset(M->g[i], 0, M->L.op[i].numel * sizeof(float));
}

/* Tolerances (the values measured are printed by the test).
 *
 * The loss is evaluated in fp32 (per-token losses ~2, each carrying rounding
 * of ~1e-7 relative through a few dozen dependent operations) and summed in
 * double, so every loss evaluation carries noise of ~1e-7 absolute.  A central
 * difference over 2 eps turns that into ~1e-7 / eps on the quotient: ~1e-4 at
 * eps = 1e-3 (observed maximum 1-2.5e-4 on these models).  The truncation
 * error, eps^2 f'''/6, is ~1e-6 at eps = 1e-3.
 *
 *  - absolute check, every parameter, eps = 1e-3:
 *      |analytic - numeric| <= 2e-3 * max(1, |numeric|)
 *    about 10x above the observed noise, while a missing or wrong term changes
 *    a gradient by O(its size), 1e-2..1 for these weights (the in-place
 *    cross-entropy bug this test found gave errors of 0.04-0.14).
 *  - relative check, elements with |analytic| > 1e-4: at least 90% within
 *    1e-2 relative.  At eps = 1e-3 the 1e-4 noise is already 1% of a 1e-2
 *    gradient, so ~10% of the small ones fail on noise alone (measured 89-93%
 *    passing).  The relative check therefore uses a second quotient at
 *    eps = 3e-3 (noise ~3e-5, truncation ~1e-5 f'''): 96-98% pass with correct
 *    code, while a systematically wrong gradient fails nearly all of them. */
#define GC_EPS 1e-3f
#define GC_EPS_REL 3e-3f
#define GC_ATOL 2e-3
#define GC_REL 1e-2
#define GC_REL_MIN 1e-4

typedef struct gc_result {
    double max_abs_err, max_rel_err_big, max_grad;
    size_t checked, big, big_ok;
    char worst[96];
} gc_result;

/* central difference of the loss in element e of op i, divided by the
 * perturbation actually applied in fp32 */
static double gc_numeric(gc_model *M, int i, size_t e, float eps)
{
    float w0 = M->w[i][e];
    float wp = w0 + eps, wm = w0 - eps;
    M->w[i][e] = wp;
    double lp = gc_forward_from(M, i);
    M->w[i][e] = wm;
    double lm = gc_forward_from(M, i);
    M->w[i][e] = w0;
    return (lp - lm) / ((double)wp - (double)wm);
}

static void gc_run_kernels(const char *label, const char *desc, int T, int B, gc_kernels k, gc_result *r)
{
    gc_model M;
    gc_setup_kernels(&M, desc, T, B, 31337, k);
    memset(r, 0, sizeof *r);
    double loss = gc_forward_from(&M, 0);
    ck_assert_msg(isfinite(loss) && loss > 0, "%s: loss %g", label, loss);
    /* the forward is a pure function of weights and tokens */
    ck_assert_msg(gc_forward_from(&M, 0) == loss, "%s: forward is not deterministic", label);
    gc_zero_grads(&M);
    gc_backward(&M);
    for (int i = 0; i < M.n; i++)
        for (size_t e = 0; e < M.L.op[i].numel; e++)
            ck_assert_msg(isfinite(M.g[i][e]), "%s: %s gradient %zu is %g", label, M.L.op[i].name, e, (double)M.g[i][e]);
    /* the vocabulary padding (rows of wte, columns of lm_head past the words) reaches no loss: gradient 0 */
    size_t padding = 0;
    for (int i = 0; i < M.n; i++)
        for (int k2 = 0; k2 < M.L.op[i].n_tensors; k2++) {
            const osdp_tensor_desc *t = &M.L.op[i].tensor[k2];
            for (size_t e = 0, logical, run; e < t->numel; e += run)
                if (!osdp_tensor_logical_run(t, 0, e, &logical, &run))
                    for (size_t j = 0; j < run; j++, padding++)
                        ck_assert_msg(M.g[i][t->offset + e + j] == 0.0f, "%s: %s/%s padding element %zu has gradient %g",
                                      label, M.L.op[i].name, t->name, e + j, (double)M.g[i][t->offset + e + j]);
        }
    ck_assert_int_eq(padding > 0, M.L.vocab_padded > M.L.cfg.vocab);

    for (int i = 0; i < M.n; i++) {
        const osdp_op_layout *op = &M.L.op[i];
        double tensor_max[OSDP_MAX_TENSORS_PER_OP] = {0};
        /* the perturbed evaluations only rerun ops i..n-1: bring the activations
         * of ops < i back to the unperturbed weights first (the last evaluation
         * for op i-1 left them at its last element minus eps) */
        gc_forward_from(&M, 0);
        for (int k = 0; k < op->n_tensors; k++) {
            const osdp_tensor_desc *t = &op->tensor[k];
            for (size_t e = t->offset; e < t->offset + t->numel; e++) {
                double num = gc_numeric(&M, i, e, GC_EPS);
                double ana = M.g[i][e];
                double err = fabs(ana - num);
                r->checked++;
                if (fabs(num) > r->max_grad) r->max_grad = fabs(num);
                if (fabs(num) > tensor_max[k]) tensor_max[k] = fabs(num);
                if (err > r->max_abs_err) {
                    r->max_abs_err = err;
                    snprintf(r->worst, sizeof r->worst, "%s/%s[%zu]", op->name, t->name, e - t->offset);
                }
                ck_assert_msg(err <= GC_ATOL * fmax(1.0, fabs(num)),
                              "%s: %s/%s[%zu]: analytic %.6g, numeric %.6g", label, op->name, t->name,
                              e - t->offset, ana, num);
                if (fabs(ana) > GC_REL_MIN) {
                    double num3 = gc_numeric(&M, i, e, GC_EPS_REL);
                    double rel = fabs(ana - num3) / fmax(fabs(ana), fabs(num3));
                    r->big++;
                    r->big_ok += rel < GC_REL;
                    if (rel > r->max_rel_err_big) r->max_rel_err_big = rel;
                }
            }
        }
        /* no tensor is dead: each has some gradient well above the noise */
        for (int k = 0; k < op->n_tensors; k++)
            ck_assert_msg(tensor_max[k] > 1e-2, "%s: %s/%s has no measurable gradient (max %g)", label, op->name,
                          op->tensor[k].name, tensor_max[k]);
    }
    /* the perturbations restored every weight: the loss is back bit for bit */
    ck_assert_msg(gc_forward_from(&M, 0) == loss, "%s: loss changed after the check", label);
    printf("gradient check %-7s: %zu parameters, max |analytic - numeric| = %.3g at %s (eps %g), max |grad| %.3g;"
           " %zu of %zu with |grad| > %g within %g relative (eps %g, worst %.3g)\n",
           label, r->checked, r->max_abs_err, r->worst, (double)GC_EPS, r->max_grad, r->big_ok, r->big, GC_REL_MIN,
           GC_REL, (double)GC_EPS_REL, r->max_rel_err_big);
    ck_assert_uint_eq(r->checked, M.L.total_params);
    ck_assert_msg(r->big > r->checked / 2, "%s: only %zu of %zu gradients above %g", label, r->big, r->checked,
                  GC_REL_MIN);
    ck_assert_msg((double)r->big_ok >= 0.9 * (double)r->big, "%s: only %zu of %zu gradients within %g relative",
                  label, r->big_ok, r->big, GC_REL);
    gc_free(&M);
}

static void gc_run(const char *label, const char *desc, gc_result *r)
{
    gc_run_kernels(label, desc, 5, 2, (gc_kernels){.naive = 0, .vocab_quantum = 1}, r);
}

START_TEST(test_grad_uniform)
{
    gc_result r;
    gc_run("uniform", "[model]\nname = gc\nn_layer = 2\nn_head = 2\nn_embd = 8\nvocab = 11\nctx = 6\n", &r);
}
END_TEST

START_TEST(test_grad_ic)
{
    gc_result r;
    gc_run("I&C", "[model]\nname = gc_ic\nn_layer = 2\nn_head = 2\nwidths = 8, 16\nvocab = 11\nctx = 6\n", &r);
}
END_TEST

START_TEST(test_grad_narrowing)
{
    gc_result r;
    gc_run("narrow", "[model]\nname = gc_nr\nn_layer = 3\nn_head = 2\nwidths = 8, 4, 4\nvocab = 7\nctx = 6\n", &r);
}
END_TEST

/* a tied head: d(wte) sums the embedding's lookups and the head's product
 * (a wte perturbation reruns every operator: gc_numeric from op 0) */
START_TEST(test_grad_tied)
{
    gc_result r;
    gc_run("tied", "[model]\nname = gc_tied\nn_layer = 2\nn_head = 2\nwidths = 8, 8\nvocab = 11\nctx = 6\n"
                   "tied_head = true\n", &r);
}
END_TEST

/* issue 31: the tiled attention and the fused head over several tiles and chunks of logits (T = 70: key
 * tiles of 64 and 6 rows; B = 2: chunks of 128 and 12 rows), the vocabulary padded (quantum 4: 11 -> 12),
 * untied and tied; and the naive kernels, the reference, on the same model */
START_TEST(test_grad_long_lean)
{
    gc_result r;
    gc_run_kernels("long", "[model]\nname = gc_long\nn_layer = 1\nn_head = 2\nn_embd = 8\nvocab = 11\nctx = 70\n", 70, 2,
                   (gc_kernels){.naive = 0, .vocab_quantum = 4}, &r);
}
END_TEST

START_TEST(test_grad_long_lean_tied)
{
    gc_result r;
    gc_run_kernels("long tied", "[model]\nname = gc_long\nn_layer = 1\nn_head = 2\nn_embd = 8\nvocab = 11\nctx = 70\n"
                   "tied_head = true\n", 70, 2, (gc_kernels){.naive = 0, .vocab_quantum = 4}, &r);
}
END_TEST

START_TEST(test_grad_naive)
{
    gc_result r;
    gc_run_kernels("naive", "[model]\nname = gc\nn_layer = 2\nn_head = 2\nn_embd = 8\nvocab = 11\nctx = 6\n"
                   "tied_head = true\n", 5, 2, (gc_kernels){.naive = 1, .vocab_quantum = 3}, &r);
}
END_TEST

/* two models of desc at T = 150 or 64 (B 2, seed 77) with kernels ka and kb on the same weights and tokens
 * (the setup draws gains, biases and tokens from one stream, so b takes a's) */
static void gc_twins(gc_model *a, gc_model *b, const char *desc, int T, gc_kernels ka, gc_kernels kb)
{
    gc_setup_kernels(a, desc, T, 2, 77, ka);
    gc_setup_kernels(b, desc, T, 2, 77, kb);
    for (int i = 0; i < a->n; i++) memcpy(b->w[i], a->w[i], a->L.op[i].numel * sizeof(float));
    memcpy(b->in, a->in, 2 * (size_t)T * sizeof(int));
    memcpy(b->tg, a->tg, 2 * (size_t)T * sizeof(int));
}

/* both backward passes from zero, then every operator's gradients of a within rel of b's largest; returns
 * the largest difference over each operator's largest */
static double gc_grads_close(gc_model *a, gc_model *b, double rel, const char *label)
{
    gc_zero_grads(a);
    gc_zero_grads(b);
    gc_backward(a);
    gc_backward(b);
    double worst_rel = 0;
    for (int i = 0; i < a->n; i++) {
        double scale = 0, worst = 0;
        for (size_t e = 0; e < a->L.op[i].numel; e++) scale = fmax(scale, fabs(b->g[i][e]));
        for (size_t e = 0; e < a->L.op[i].numel; e++) worst = fmax(worst, fabs(a->g[i][e] - b->g[i][e]));
        ck_assert_msg(scale > 0 && worst <= rel * scale, "%s: %s gradients differ by %g (largest %g)", label,
                      a->L.op[i].name, worst, scale);
        worst_rel = fmax(worst_rel, worst / scale);
    }
    return worst_rel;
}

/* the lean kernels against the naive on the same weights and tokens: losses and every gradient within
 * fp32 rounding (the two differ in summation order and exponential only) */
START_TEST(test_lean_equals_naive)
{
    static const char *const descs[] = {
        "[model]\nname = eq\nn_layer = 2\nn_head = 4\nn_embd = 32\nvocab = 97\nctx = 150\n",
        "[model]\nname = eq_tied\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab = 97\nctx = 150\ntied_head = true\n",
    };
    for (int m = 0; m < 2; m++) {
        gc_model lean, naive;
        gc_twins(&lean, &naive, descs[m], 150, (gc_kernels){.naive = 0, .vocab_quantum = 1 + 4 * m},
                 (gc_kernels){.naive = 1, .vocab_quantum = 1 + 4 * m});
        const double l_lean = gc_forward_from(&lean, 0), l_naive = gc_forward_from(&naive, 0);
        ck_assert_msg(fabs(l_lean - l_naive) <= 1e-5 * fabs(l_naive), "%s: loss %.9g, naive %.9g", descs[m], l_lean,
                      l_naive);
        gc_grads_close(&lean, &naive, 1e-4, descs[m]);
        gc_free(&lean);
        gc_free(&naive);
    }
}
END_TEST

/* bf16 activations (cfg.act_bf16, osdp/layout.h) on the CPU bf16 table: the loss and every gradient against
 * fp32 activations on the same bf16 weights and tokens, within the activations' bf16 rounding (8 bits) and not
 * the same bits; the forward run twice gives the same bits.  No finite-difference check: the rounded
 * activations make the loss a step function of the weights. */
START_TEST(test_bf16_activations_grads)
{
    static const char *const descs[] = {
        "[model]\nname = a16\nn_layer = 2\nn_head = 4\nn_embd = 32\nvocab = 97\nctx = 64\n",
        "[model]\nname = a16_tied\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab = 97\nctx = 64\ntied_head = true\n",
    };
    for (int m = 0; m < 2; m++) {
        gc_model a16, a32;
        gc_twins(&a16, &a32, descs[m], 64, (gc_kernels){.vocab_quantum = 1 + 4 * m, .bf16_weights = 1, .bf16_acts = 1},
                 (gc_kernels){.vocab_quantum = 1 + 4 * m, .bf16_weights = 1});
        ck_assert_uint_lt(a16.L.op[1].act_floats_per_seq, a32.L.op[1].act_floats_per_seq);
        const double l32 = gc_forward_from(&a32, 0), l16 = gc_forward_from(&a16, 0);
        ck_assert_msg(gc_forward_from(&a16, 0) == l16, "%s: the forward is not deterministic", descs[m]);
        ck_assert_msg(fabs(l16 - l32) <= 1e-2 * fabs(l32) && l16 != l32, "%s: loss %.9g, with fp32 activations %.9g",
                      descs[m], l16, l32);
        const double worst_rel = gc_grads_close(&a16, &a32, 5e-2, descs[m]);
        ck_assert_msg(worst_rel > 0, "%s: the gradients are the fp32 activations' bit for bit", descs[m]);
        printf("bf16 activations, %s head: loss %.9g against %.9g, gradients within %.3g of each operator's largest\n",
               m ? "tied" : "untied", l16, l32, worst_rel);
        gc_free(&a32);
        gc_free(&a16);
    }
}
END_TEST

/* gradients accumulate: two backward passes without zeroing give twice one */
START_TEST(test_grad_accumulates)
{
    gc_model M;
    gc_setup(&M, "[model]\nn_layer = 2\nn_head = 2\nwidths = 8, 16\nvocab = 11\nctx = 6\n", 5, 2, 5);
    gc_forward_from(&M, 0);
    gc_zero_grads(&M);
    gc_backward(&M);
    float **once = xmalloc((size_t)M.n * sizeof(float *));
    for (int i = 0; i < M.n; i++) {
        once[i] = xmalloc(M.L.op[i].numel * sizeof(float));
        memcpy(once[i], M.g[i], M.L.op[i].numel * sizeof(float));
    }
    gc_forward_from(&M, 0);   /* the head's backward consumed the probabilities */
    gc_backward(&M);
    for (int i = 0; i < M.n; i++) {
        for (size_t e = 0; e < M.L.op[i].numel; e++)
            ck_assert_msg(fabs(M.g[i][e] - 2.0 * once[i][e]) <= 1e-5 * fabs(once[i][e]) + 1e-9,
                          "%s[%zu]: %g after two passes, %g after one", M.L.op[i].name, e, (double)M.g[i][e],
                          (double)once[i][e]);
        free(once[i]);
    }
    free(once);
    gc_free(&M);
}
END_TEST

/* ------------------------------------------------------------------------ */

static Suite *model_suite(void)
{
    const TTest *config[] = {test_config_good, test_config_widths, NULL};
    const TTest *layout[] = {test_layout_ops, test_layout_gpt2_small, test_layout_lean_activations, test_layout_ic,
                             test_layout_shard, NULL};
    const TTest *init[] = {test_init_ranges, test_init_values, NULL};
    const TTest *grad[] = {test_grad_uniform, test_grad_ic, test_grad_narrowing, test_grad_tied, test_grad_long_lean,
                           test_grad_long_lean_tied, test_grad_naive, test_lean_equals_naive, test_bf16_activations_grads,
                           test_grad_accumulates, NULL};
    const osdp_check_case cases[] = {
        {.name = "config", .tests = config, .loop_test = test_config_errors,
         .loop_end = (int)(sizeof config_errors / sizeof config_errors[0])},
        {.name = "layout", .tests = layout}, {.name = "init", .tests = init}, {.name = "grad", .tests = grad},
    };
    return osdp_check_suite("model", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = model_suite};

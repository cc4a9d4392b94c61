/* The choices of operators already costed in one pipeline planning call (choice_memo.h). */
#include "choice_memo.h"

#include <stdlib.h>
#include <string.h>

typedef struct memo_entry {
    choice_key key;
    int variant;
    choice_terms *choices;
    int n;
} memo_entry;

struct osdp_choice_memo {
    memo_entry *entry;
    int n, cap;
    long long hits;
};

osdp_choice_memo *osdp_choice_memo_new(void)
{
    return calloc(1, sizeof(osdp_choice_memo));
}

void osdp_choice_memo_free(osdp_choice_memo *memo)
{
    if (!memo) return;
    for (int e = 0; e < memo->n; e++) free(memo->entry[e].choices);
    free(memo->entry);
    free(memo);
}

int osdp_op_same_shape(const osdp_op_layout *a, const osdp_op_layout *b)
{
    if (a == b) return 1;
    if (a->type != b->type || a->allowed_modes != b->allowed_modes || a->width != b->width
        || a->width_in != b->width_in || a->n_tensors != b->n_tensors || a->numel != b->numel
        || a->act_floats_per_seq != b->act_floats_per_seq || a->kept_floats_per_seq != b->kept_floats_per_seq
        || a->flops_per_token != b->flops_per_token || a->attn_flops_per_token != b->attn_flops_per_token)
        return 0;
    for (int t = 0; t < a->n_tensors; t++) {
        const osdp_tensor_desc *p = &a->tensor[t], *q = &b->tensor[t];
        if (p->rows != q->rows || p->cols != q->cols || p->ndim != q->ndim || p->offset != q->offset
            || p->numel != q->numel || strcmp(p->name, q->name) != 0)
            return 0;
    }
    return 1;
}

static int same_key(const choice_key *a, const choice_key *b)
{
    return a->sends == b->sends && a->last == b->last && a->allows_zdp == b->allows_zdp
        && a->recompute == b->recompute && a->tied == b->tied && a->dev == b->dev && a->hier == b->hier
        && memcmp(&a->geo, &b->geo, sizeof a->geo) == 0   /* ints and enums alone: no padding */
        && a->seq_len == b->seq_len && a->kind == b->kind && a->split_auto == b->split_auto
        && a->split == b->split && a->split_max == b->split_max && a->recompute_auto == b->recompute_auto
        && a->modes == b->modes && a->grad_reduce == b->grad_reduce && osdp_op_same_shape(a->op, b->op);
}

int osdp_choice_memo_find(osdp_choice_memo *memo, const choice_key *key, int variant, choice_terms *out)
{
    for (int e = 0; e < memo->n; e++) {
        const memo_entry *m = &memo->entry[e];
        if (m->variant != variant || !same_key(&m->key, key)) continue;
        memcpy(out, m->choices, sizeof *out * (size_t)m->n);
        memo->hits++;
        return m->n;
    }
    return -1;
}

void osdp_choice_memo_add(osdp_choice_memo *memo, const choice_key *key, int variant, const choice_terms *c, int n)
{
    if (memo->n == memo->cap) {
        const int grown = memo->cap ? 2 * memo->cap : 16;
        memo_entry *more = realloc(memo->entry, sizeof *more * (size_t)grown);
        if (!more) return;
        memo->entry = more;
        memo->cap = grown;
    }
    choice_terms *copy = malloc(sizeof *copy * (size_t)(n > 0 ? n : 1));
    if (!copy) return;
    memcpy(copy, c, sizeof *copy * (size_t)n);
    memo->entry[memo->n++] = (memo_entry){.key = *key, .variant = variant, .choices = copy, .n = n};
}

long long osdp_choice_memo_hits(const osdp_choice_memo *memo)
{
    return memo ? memo->hits : 0;
}

/* Text generation on one rank (see sampler.h). */
#include "config.h"
#include "sampler.h"
#include "gather_root.h"
#include "osdp/agree.h"
#include "osdp/gpt.h"
#include "osdp/init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* the RNG stream of sampling (osdp_hash3's second word): apart from the
 * weights' streams, which are operator indices */
#define SAMPLE_STREAM 0x73616d706c65ULL   /* "sample" */

osdp_status osdp_sampler_init(osdp_sampler *sm, const osdp_model_config *cfg, int owner)
{
    memset(sm, 0, sizeof *sm);
    sm->owner = owner;
    sm->backend = &osdp_compute_cpu;
    /* sampling reads the head's probabilities: the naive head keeps them */
    osdp_model_config naive_head = *cfg;
    naive_head.head_naive = 1;
    osdp_status s = osdp_layout_build(&sm->layout, &naive_head, cfg->ctx);
    if (s != OSDP_OK || !owner) return s;
    const osdp_layout *L = &sm->layout;
    size_t act_floats = 0;
    for (int i = 0; i < L->n_ops; i++)
        if (L->op[i].act_floats_per_seq > act_floats) act_floats = L->op[i].act_floats_per_seq;
    sm->weights = calloc((size_t)L->n_ops, sizeof *sm->weights);
    sm->acts[0] = malloc(act_floats * sizeof(float));
    sm->acts[1] = malloc(act_floats * sizeof(float));
    const size_t vocab = cfg->vocab > 0 ? (size_t)cfg->vocab : 1;   /* the model description checked it */
    sm->probs = malloc(vocab * sizeof *sm->probs);
    sm->order = malloc(vocab * sizeof *sm->order);
    int ok = sm->weights && sm->acts[0] && sm->acts[1] && sm->probs && sm->order;
    for (int i = 0; ok && i < L->n_ops; i++) ok = (sm->weights[i] = malloc(L->op[i].numel * sizeof(float))) != NULL;
    return ok ? OSDP_OK : osdp_error_set(OSDP_ERR_OOM, "sample: out of host memory for the model's weights (%zu parameters)",
                                         L->total_params);
}

void osdp_sampler_free(osdp_sampler *sm)
{
    if (sm->weights)
        for (int i = 0; i < sm->layout.n_ops; i++) free(sm->weights[i]);
    free(sm->weights);
    free(sm->acts[0]);
    free(sm->acts[1]);
    free(sm->probs);
    free(sm->order);
    osdp_layout_free(&sm->layout);
    memset(sm, 0, sizeof *sm);
}

osdp_status osdp_sampler_gather(osdp_sampler *sm, osdp_runtime *rt, MPI_Comm comm)
{
    const osdp_layout *mine = &sm->layout, *theirs = rt->layout;
    /* every rank has the same layouts: no agreement needed */
    if (theirs->tp_size != 1)
        return osdp_error_set(OSDP_ERR_INPUT, "sampling gathers whole operators: a tensor-parallel run (--tp %d) cannot sample yet",
                              theirs->tp_size);
    if (theirs->n_ops != mine->n_ops) return osdp_error_set(OSDP_ERR_INTERNAL, "sample: the runtime holds another model");
    for (int i = 0; i < mine->n_ops; i++)
        if (theirs->op[i].numel != mine->op[i].numel)
            return osdp_error_set(OSDP_ERR_INTERNAL, "sample: operator %s of the runtime has %zu parameters, the model %zu",
                                  mine->op[i].name, theirs->op[i].numel, mine->op[i].numel);
    osdp_status s = OSDP_OK;
    for (int i = 0; i < mine->n_ops && s == OSDP_OK; i++) {
        float *host = sm->owner ? sm->weights[i] : malloc(mine->op[i].numel * sizeof(float));
        s = osdp_status_agree(host ? OSDP_OK : osdp_error_set(OSDP_ERR_OOM, "sample: out of host memory gathering %s",
                                                               mine->op[i].name), comm);
        if (s == OSDP_OK) s = osdp_gather_op_to_root(rt, i, host, comm, NULL, NULL);   /* any stage's, to rank 0 */
        if (!sm->owner) free(host);
    }
    return s;
}

/* The forward of tokens[0 .. T) (T <= ctx, positions 0 .. T-1): every
 * operator but the head on the whole sequence, the head on its last
 * position; returns that position's probabilities (vocab floats). */
static const float *forward_last(const osdp_sampler *sm, const int *tokens, int T)
{
    const osdp_layout *L = &sm->layout;
    osdp_op_context ctx = {.backend = sm->backend, .layout = L, .B = 1, .T = T, .embed_weights = sm->weights[0]};
    const float *input = NULL;
    osdp_op_acts a;
    for (int i = 0; i < L->n_ops; i++) {
        const osdp_op_layout *op = &L->op[i];
        osdp_op_acts_carve(L, i, 1, sm->acts[i % 2], &a);   /* the input is the other block's output */
        if (op->type == OSDP_OP_EMBED) memcpy(a.tokens, tokens, (size_t)T * sizeof *tokens);
        if (op->type == OSDP_OP_HEAD) {
            /* LayerNorm and the product are per position: the head of the last one alone */
            ctx.T = 1;
            input += (size_t)(T - 1) * (size_t)op->width;
            a.tokens[0] = 0;   /* a target for the loss the head also computes, unused */
        }
        osdp_op_forward(&ctx, i, sm->weights[i], input, &a);
        input = a.out;
    }
    return a.probs;
}

/* orders token ids by probability, most probable first, then by id */
static const double *g_ranking;
static int by_probability(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    double x = g_ranking[a], y = g_ranking[b];
    return x > y ? -1 : x < y ? 1 : (a > b) - (a < b);
}

/* The next token from the probabilities p (vocab of them, in sm->probs);
 * `index` numbers the draw for the RNG. */
static int choose(const osdp_sampler *sm, const float *p, const osdp_sample_settings *set, uint64_t index)
{
    const int V = sm->layout.cfg.vocab;
    int best = 0;
    for (int i = 1; i < V; i++)
        if (p[i] > p[best]) best = i;
    if (set->temperature == 0 || p[best] <= 0) return best;
    double *w = sm->probs;
    int *ids = sm->order, n = V;
    for (int i = 0; i < V; i++) {
        w[i] = p[i];
        ids[i] = i;
    }
    if (set->top_k > 0 && set->top_k < V) {
        g_ranking = w;
        qsort(ids, (size_t)V, sizeof *ids, by_probability);
        g_ranking = NULL;
        n = set->top_k;
    }
    /* p^(1/X) relative to the largest, which stays 1: no underflow of all */
    double total = 0, inv = 1.0 / set->temperature, top = p[best];
    for (int j = 0; j < n; j++) {
        double v = w[ids[j]] > 0 ? pow(w[ids[j]] / top, inv) : 0;
        w[ids[j]] = v;
        total += v;
    }
    double r = (double)(osdp_hash3(set->seed, SAMPLE_STREAM, index) >> 11) * 0x1p-53 * total, sum = 0;
    int last = best;
    for (int j = 0; j < n; j++) {
        if (w[ids[j]] <= 0) continue;
        last = ids[j];
        sum += w[ids[j]];
        if (r < sum) return last;
    }
    return last;   /* r rounded up to the total */
}

osdp_status osdp_sampler_generate(const osdp_sampler *sm, const int *prompt, int n_prompt,
                                  const osdp_sample_settings *settings, int *out)
{
    const int ctx = sm->layout.cfg.ctx;
    int *seq = malloc(((size_t)n_prompt + (size_t)settings->tokens) * sizeof *seq);
    if (!seq) return osdp_error_set(OSDP_ERR_OOM, "sample: out of host memory for %d tokens", n_prompt + settings->tokens);
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    for (int t = 0; t < settings->tokens; t++) {
        int len = n_prompt + t, first = len > ctx ? len - ctx : 0;
        const float *p = forward_last(sm, seq + first, len - first);
        seq[len] = out[t] = choose(sm, p, settings, (uint64_t)t);
    }
    free(seq);
    return OSDP_OK;
}

void osdp_sampler_wait(MPI_Comm comm)
{
    MPI_Request request;
    int done = 0;
    MPI_Ibarrier(comm, &request);
    for (;;) {
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (done) return;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);   /* 1 ms */
    }
}

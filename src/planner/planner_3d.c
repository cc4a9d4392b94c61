/* The 3D search (osdp/planner.h, osdp_planner_3d): meshes P x D x T with T
 * inside a node, the stage splits of each, and per split the pipeline's
 * planner (the micro-batch, M, and the exact per-operator search of every
 * stage); the baselines are the same search restricted to their modes, with
 * their replicated state priced. */
#include "osdp/planner.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SPLIT_ENUM_LIMIT_DEFAULT 512

const char *osdp_3d_kind_name(osdp_3d_kind kind)
{
    static const char *const names[OSDP_3D_KINDS] = {"3D+OSDP", "DeepSpeed-3D-like", "Megatron-like", "FSDP", "DDP"};
    return kind >= 0 && kind < OSDP_3D_KINDS ? names[kind] : "?";
}

void osdp_3d_result_free(osdp_3d_result *res)
{
    if (!res) return;
    if (res->status == OSDP_OK) osdp_pipe_choice_free(&res->best);
    memset(&res->best, 0, sizeof res->best);
    res->status = OSDP_ERR_INFEASIBLE;
}

/* bytes per parameter the optimizer state of osdp's DP/ZDP takes (sharded
 * over D): fp32 master, AdamW m and v, the gradient, the rounded copy of a
 * master below fp32 (osdp/cost_model.h's state term) */
static int state_bytes_per_param(const osdp_device *dev)
{
    return 12 + dev->grad_bytes + (dev->param_bytes < 4 ? dev->param_bytes : 0);
}

/* the kind's per-operator modes and replicated state (osdp_planner_options) */
static void kind_options(osdp_3d_kind kind, const osdp_device *dev, osdp_planner_options *o)
{
    switch (kind) {
    case OSDP_3D_OSDP: break;
    case OSDP_3D_DEEPSPEED:
        /* ZeRO-1 as it behaves: the gradients whole on every rank, accumulated over the step's micro-batches
         * and reduced once (osdp's DP with reduce-once, whose accumulated gradients are those whole ones) */
        o->modes = OSDP_MODES_ALL_DP;
        o->grad_reduce = OSDP_GRAD_REDUCE_ONCE;
        break;
    case OSDP_3D_MEGATRON:
    case OSDP_3D_DDP:
        /* nothing sharded; the gradients accumulated whole and reduced once per step (Megatron's main_grad,
         * DDP's no_sync): reduce-once holds them, the rest of the state is replicated on top */
        o->modes = OSDP_MODES_ALL_DP;
        o->grad_reduce = OSDP_GRAD_REDUCE_ONCE;
        o->replicated_bytes_per_param = state_bytes_per_param(dev) - dev->grad_bytes;
        break;
    case OSDP_3D_FSDP:   /* ZeRO-3: reduce-scattered every micro-batch */
        o->modes = OSDP_MODES_ALL_ZDP;
        o->grad_reduce = OSDP_GRAD_REDUCE_EVERY;
        break;
    default: break;
    }
    if (kind != OSDP_3D_OSDP) {
        o->split = 1;
        o->split_auto = 0;
    }
}

/* contiguous splits of n operators into P stages, at most `cap` + 1 counted */
static long long count_splits(int n, int P, long long cap)
{
    /* C(n - 1, P - 1) */
    long long c = 1;
    const int k = P - 1 < n - P ? P - 1 : n - P;
    for (int i = 1; i <= k; i++) {
        c = c * (n - P + i) / i;   /* exact: c is C(n - P + i, i) after this step */
        if (c > cap) return cap + 1;
    }
    return c;
}

/* the next contiguous split after bounds (lexicographic on bounds[1..P-1]); 0 after the last */
static int next_split(int *bounds, int P, int n)
{
    for (int j = P - 1; j >= 1; j--) {
        if (bounds[j] < n - (P - j)) {
            bounds[j]++;
            for (int q = j + 1; q < P; q++) bounds[q] = bounds[q - 1] + 1;
            return 1;
        }
    }
    return 0;
}

typedef struct search_state {
    osdp_3d_result *res;
    int have_best;
    int by_step;              /* a global batch: the shortest step wins */
} search_state;

/* c better than the best so far (ties keep the earlier: smaller P, T, split) */
static int better(const search_state *st, const osdp_pipe_choice *c)
{
    if (!st->have_best) return 1;
    const osdp_pipe_choice *b = &st->res->best;
    return st->by_step ? c->step_s < b->step_s : c->samples_per_s > b->samples_per_s;
}

/* one mesh and split: the pipeline's planner; a better answer is kept */
static osdp_status plan_split(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                              const osdp_planner_options *o, const osdp_3d_options *o3, int tp, int pp,
                              const int *bounds, search_state *st)
{
    osdp_pipe_choice c;
    osdp_status s = osdp_planner_pipeline(cfg, seq_len, dev, o, tp, pp, bounds, o3->schedule, &c);
    st->res->splits_planned++;
    if (s == OSDP_OK && better(st, &c)) {
        if (st->have_best) osdp_pipe_choice_free(&st->res->best);
        st->res->best = c;
        st->have_best = 1;
        return OSDP_OK;
    }
    osdp_pipe_choice_free(&c);
    if (s == OSDP_ERR_INFEASIBLE) {
        if (st->res->message[0] == '\0')
            snprintf(st->res->message, sizeof st->res->message, "PP %d x TP %d: %s", pp, tp, osdp_error_message());
        return OSDP_OK;
    }
    return s;
}

/* one mesh (P, T): its splits */
static osdp_status plan_mesh(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                             const osdp_planner_options *o, const osdp_3d_options *o3, int tp, int pp, int n_ops,
                             search_state *st)
{
    const long long limit = o3->split_enum_limit > 0 ? o3->split_enum_limit : SPLIT_ENUM_LIMIT_DEFAULT;
    if (pp == 1 || count_splits(n_ops, pp, limit) > limit)
        return plan_split(cfg, seq_len, dev, o, o3, tp, pp, NULL, st);
    int bounds[OSDP_MAX_STAGES + 1];
    for (int q = 0; q < pp; q++) bounds[q] = q;
    bounds[pp] = n_ops;
    do {
        osdp_status s = plan_split(cfg, seq_len, dev, o, o3, tp, pp, bounds, st);
        if (s != OSDP_OK) return s;
    } while (next_split(bounds, pp, n_ops));
    return OSDP_OK;
}

osdp_status osdp_planner_3d(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                            const osdp_planner_options *o_in, const osdp_3d_options *o3, osdp_3d_kind kind,
                            osdp_3d_result *res)
{
    const double t0 = osdp_now_seconds();
    const clock_t cpu0 = clock();
    memset(res, 0, sizeof *res);
    res->status = OSDP_ERR_INFEASIBLE;
    osdp_planner_options o = *o_in;
    kind_options(kind, dev, &o);
    const int N = o.n_ranks;
    const int fixed_pp = kind == OSDP_3D_FSDP || kind == OSDP_3D_DDP ? 1 : o3->pp;
    const int fixed_tp = kind == OSDP_3D_FSDP || kind == OSDP_3D_DDP ? 1 : o3->tp;
    const long long mem_limit = o.mem_limit > 0 ? o.mem_limit : dev->mem_limit;
    search_state st = {.res = res, .by_step = o.global_batch > 0};
    for (int tp = 1; tp <= N; tp++) {
        if (N % tp != 0 || (fixed_tp > 0 && tp != fixed_tp)) continue;
        /* a tensor-parallel group sits inside a node */
        if (fixed_tp == 0 && dev->ranks_per_node > 0 && dev->ranks_per_node % tp != 0) continue;
        osdp_layout layout;
        osdp_status s = osdp_layout_build_tp(&layout, cfg, seq_len, tp, o.vocab_quantum);
        if (s == OSDP_ERR_INPUT && fixed_tp == 0) continue;   /* T does not divide the heads */
        if (s != OSDP_OK) return s;
        const int n_ops = layout.n_ops;
        const double n_params = (double)layout.total_params;
        const double state = (double)state_bytes_per_param(dev) * n_params;
        osdp_layout_free(&layout);
        for (int pp = 1; pp <= N / tp && pp <= OSDP_MAX_STAGES && pp <= n_ops; pp++) {
            if ((N / tp) % pp != 0 || (fixed_pp > 0 && pp != fixed_pp)) continue;
            const int D = N / (tp * pp);
            if (o.global_batch > 0 && o.global_batch % D != 0) continue;
            res->meshes++;
            /* the optimizer state of its P stages, sharded over D (less what a baseline replicates), alone
             * exceeds the limit on some stage */
            const double replicated = (double)o.replicated_bytes_per_param * (double)n_params * (1.0 - 1.0 / D);
            if ((state / D + replicated) / pp > (double)mem_limit) {
                res->meshes_pruned++;
                continue;
            }
            if ((s = plan_mesh(cfg, seq_len, dev, &o, o3, tp, pp, n_ops, &st)) != OSDP_OK) {
                osdp_3d_result_free(res);
                return s;
            }
        }
    }
    if (st.have_best) {
        res->status = OSDP_OK;
        res->message[0] = '\0';
    } else if (res->message[0] == '\0') {
        snprintf(res->message, sizeof res->message, "%s: no mesh of %d ranks%s", osdp_3d_kind_name(kind), N,
                 res->meshes ? " fits the memory limit" : " is possible (--pp, --tp, the heads, the node size, "
                 "the global batch)");
    }
    res->total_s = osdp_now_seconds() - t0;
    res->cpu_s = (double)(clock() - cpu0) / CLOCKS_PER_SEC;
    return OSDP_OK;
}

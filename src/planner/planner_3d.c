/* The 3D search (osdp/planner.h, osdp_planner_3d): meshes P x D x T with T
 * inside a node, the stage splits of each, and per split the pipeline's
 * planner (the micro-batch, M, and the exact per-operator search of every
 * stage); the baselines are the same search restricted to their modes, with
 * their replicated state priced. */
#include "osdp/planner.h"
#include "planner_3d_bound.h"
#include "planner_pipeline.h"
#include "osdp/pipeline_interleave.h"
#include "util/clock.h"

#include <math.h>
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
    int key[4];               /* the best's place in the enumeration order: T, P, split, b */
    osdp_stage_cache *cache;  /* stage results reused across meshes, splits and micro-batches */
    osdp_pipe_schedule planned;   /* the schedule the stages are planned under (interleaved: 1F1B) */
    int v_lo, v_hi;           /* the V searched (1: the planned schedule as it is; >= 2: interleaved) */
    int n_layer;
    /* the candidate of the smallest micro-batch a bound found unable to fit, no plan found yet: searched for
     * its message should nothing fit */
    int unfit, unfit_tp, unfit_pp, unfit_b, unfit_split, unfit_bounds[OSDP_MAX_STAGES + 1];
    /* the first candidate found not to fit by its search (the stages' searches quiet: osdp_planner_options'
     * quiet_infeasible), the message's: searched again for its words should nothing fit */
    int infeasible, infeasible_tp, infeasible_pp, infeasible_b, infeasible_split, infeasible_chunks;
    int infeasible_bounds[OSDP_MAX_STAGES + 1];
} search_state;

/* c better than the best so far; ties keep the earlier in the order of
 * enumeration (smaller T, then P, then split, then b), whatever the order
 * the candidates were planned in */
static int better(const search_state *st, const osdp_pipe_choice *c, const int *key)
{
    if (!st->have_best) return 1;
    const osdp_pipe_choice *b = &st->res->best;
    const double mine = st->by_step ? c->step_s : -c->samples_per_s, theirs = st->by_step ? b->step_s : -b->samples_per_s;
    if (mine != theirs) return mine < theirs;
    for (int k = 0; k < 4; k++)
        if (key[k] != st->key[k]) return key[k] < st->key[k];
    return 0;
}

/* the best step so far, for the bounds (none: infinite) */
static double best_step(const search_state *st)
{
    return st->have_best && st->by_step ? st->res->best.step_s : INFINITY;
}

/* a bound above the best (rounding aside): nothing it bounds can win, nor tie */
static int bounded_out(double bound, const search_state *st)
{
    return bound > best_step(st) * (1 + 1e-9);
}

/* one mesh, split and micro-batch (b 0: the pipeline's planner chooses it); a better answer is kept */
static osdp_status plan_split(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                              const osdp_planner_options *o_in, const osdp_layout *layout,
                              const int *classes, int tp, int pp, const int *bounds, int split_index, int b,
                              int chunks, search_state *st)
{
    osdp_planner_options o = *o_in;
    if (b > 0) o.geo.micro_batch = b;
    osdp_pipe_choice c;
    int bounded = 0;
    /* with a bound, only a step that can beat the best (or tie it) is wanted */
    const double cutoff = b > 0 ? best_step(st) * (1 + 1e-9) : -1;
    osdp_status s = osdp_planner_pipeline_cached(cfg, seq_len, dev, &o, tp, pp, bounds, st->planned, layout, classes,
                                                 st->cache, cutoff, chunks, &bounded, &c);
    st->res->splits_planned++;
    /* its V (the balanced split): interleaved where faster (or asked for) and within the memory */
    if (s == OSDP_OK && !bounded && chunks)
        s = osdp_pipe_interleave_choose(&c, dev, &o, st->n_layer, st->v_lo, st->v_hi, cutoff, &bounded);
    if (bounded) {
        if (!st->have_best && (!st->unfit || b < st->unfit_b) && st->res->message[0] == '\0') {
            st->unfit = 1;
            st->unfit_tp = tp;
            st->unfit_pp = pp;
            st->unfit_b = b;
            st->unfit_split = bounds != NULL;
            if (bounds) memcpy(st->unfit_bounds, bounds, sizeof(int) * (size_t)(pp + 1));
        }
        st->res->splits_bounded++;
        osdp_pipe_choice_free(&c);
        return OSDP_OK;
    }
    const int key[4] = {tp, pp, split_index, b};
    if (s == OSDP_OK && better(st, &c, key)) {
        if (st->have_best) osdp_pipe_choice_free(&st->res->best);
        st->res->best = c;
        st->have_best = 1;
        memcpy(st->key, key, sizeof key);
        return OSDP_OK;
    }
    osdp_pipe_choice_free(&c);
    if (s == OSDP_ERR_INFEASIBLE) {
        if (st->res->message[0] == '\0') {
            snprintf(st->res->message, sizeof st->res->message, "PP %d x TP %d: %s", pp, tp, osdp_error_message());
            st->infeasible = 1;
            st->infeasible_tp = tp;
            st->infeasible_pp = pp;
            st->infeasible_b = b;
            st->infeasible_chunks = chunks;
            st->infeasible_split = bounds != NULL;
            if (bounds) memcpy(st->infeasible_bounds, bounds, sizeof(int) * (size_t)(pp + 1));
        }
        return OSDP_OK;
    }
    return s;
}

/* nothing fits: the message of the candidate (P, T, split, b) that st recorded, by the pipeline's planner
 * searching it again with messages (cutoff as it was planned, with no best step yet: any step, b > 0) */
static osdp_status unfit_message(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                                 const osdp_planner_options *o, const search_state *st, int tp, int pp, int b,
                                 const int *bounds, int chunks, double cutoff)
{
    osdp_pipe_choice c;
    osdp_planner_options ob = *o;
    ob.quiet_infeasible = 0;
    if (b > 0) ob.geo.micro_batch = b;
    int bounded;
    osdp_status why = osdp_planner_pipeline_cached(cfg, seq_len, dev, &ob, tp, pp, bounds, st->planned, NULL, NULL,
                                                   NULL, cutoff, chunks, &bounded, &c);
    if (why == OSDP_ERR_INFEASIBLE)
        snprintf(st->res->message, sizeof st->res->message, "PP %d x TP %d: %s", pp, tp, osdp_error_message());
    osdp_pipe_choice_free(&c);
    return why == OSDP_ERR_INFEASIBLE ? OSDP_OK : why;
}

/* one candidate: a mesh (P, T) and a micro-batch b (0: every b, the pipeline's planner's loop) */
typedef struct candidate {
    int tp, pp, b, M;
    double bound;             /* osdp_3d_step_bound over every split (0: none); pending: a lower bound of it */
    double first_key;         /* aware: its memory-aware bound under the planned schedule (interleaving aside) */
    double step_bound;        /* osdp_3d_step_bound + sync_s: the bound before the memory-aware one */
    double chunks_step_bound; /* chunks: osdp_3d_chunks_bound + sync_s, likewise */
    int pending;              /* balanced: its memory-aware bound not yet computed (aware_bound) */
    int dropped;              /* interleaved asked for, and its balanced split cannot hold it: never planned */
    double sync_s;            /* the step's closing all-reduce on this mesh */
    double *op_s;             /* [n_ops] each operator's fastest pass time per micro-batch (bound > 0) */
    int aware;                /* the bound is its one split's stages' memory-aware bound (infinite: cannot fit) */
    const osdp_layout *layout;    /* one rank's parts at T, and their content classes (osdp_stage_classes) */
    const int *classes;
    int balanced;             /* one split, the balanced one, in bounds (P past the enumeration limit) */
    int chunks;               /* it may run interleaved (on the balanced split): its bound the smaller of both
                               * schedules' */
    double chunks_bound;      /* osdp_3d_chunks_bound + sync_s (chunks) */
    int balanced_bounds[OSDP_MAX_STAGES + 1];   /* the balanced split (chunks; = bounds when balanced) */
    int bounds[OSDP_MAX_STAGES + 1];
} candidate;

static int cmp_candidate(const void *x, const void *y)
{
    const candidate *a = x, *b = y;
    if (a->bound != b->bound) return a->bound < b->bound ? -1 : 1;
    if (a->tp != b->tp) return a->tp < b->tp ? -1 : 1;
    if (a->pp != b->pp) return a->pp < b->pp ? -1 : 1;
    return (a->b > b->b) - (a->b < b->b);
}

/* one candidate: its splits, each unless its own bound rules it out */
static osdp_status plan_candidate(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                                  const osdp_planner_options *o, const osdp_3d_options *o3, const candidate *c,
                                  int n_ops, search_state *st)
{
    const long long limit = o3->split_enum_limit > 0 ? o3->split_enum_limit : SPLIT_ENUM_LIMIT_DEFAULT;
    const int pp = c->pp;
    if (pp == 1 || count_splits(n_ops, pp, limit) > limit)
        return plan_split(cfg, seq_len, dev, o, c->layout, c->classes, c->tp, pp, c->balanced ? c->bounds : NULL, 0,
                          c->b, c->chunks, st);
    int bounds[OSDP_MAX_STAGES + 1];
    for (int q = 0; q < pp; q++) bounds[q] = q;
    bounds[pp] = n_ops;
    int index = 0;
    do {
        /* interleaving is searched on the balanced split alone (its chunks are cut anew from the stages' plans) */
        const int chunks = c->chunks && memcmp(bounds, c->balanced_bounds, sizeof(int) * (size_t)(pp + 1)) == 0;
        double split_bound = 0;
        if (c->op_s) split_bound = osdp_3d_split_bound(c->op_s, bounds, pp, c->M) + c->sync_s;
        if (c->op_s && chunks) split_bound = st->v_lo >= 2 ? c->chunks_bound : fmin(split_bound, c->chunks_bound);
        if (st->v_lo >= 2 && !chunks) {   /* interleaved asked for: not this split */
            st->res->splits_bounded++;
        } else if (c->op_s && bounded_out(split_bound, st)) {
            st->res->splits_bounded++;
        } else {
            osdp_status s = plan_split(cfg, seq_len, dev, o, c->layout, c->classes, c->tp, pp, bounds, index, c->b,
                                       chunks, st);
            if (s != OSDP_OK) return s;
        }
        index++;
    } while (next_split(bounds, pp, n_ops));
    return OSDP_OK;
}

/* the candidates of one mesh (P, T) over D: each micro-batch b of the global batch with its bound, or
 * (no global batch, or a schedule without the bound) one of b 0 and no bound */
static osdp_status add_candidates(const osdp_layout *layout, const int *classes, const osdp_device *dev,
                                  const osdp_planner_options *o, const osdp_3d_options *o3, const search_state *st,
                                  int tp, int pp, int D,
                                  candidate **list, int *n, int *cap)
{
    const int G = o->global_batch, per_group = G > 0 ? G / D : 0;
    const int bounded = per_group > 0 && osdp_3d_schedule_bounded(st->planned);
    const long long enum_limit = o3->split_enum_limit > 0 ? o3->split_enum_limit : SPLIT_ENUM_LIMIT_DEFAULT;
    int bounds[OSDP_MAX_STAGES + 1];   /* past the limit, or to interleave, the balanced split: the same at every b */
    const int balanced = pp > 1 && count_splits(layout->n_ops, pp, enum_limit) > enum_limit;
    if (pp > 1 && (balanced || st->v_hi >= 2)) {
        osdp_planner_options od = *o;
        osdp_status s = osdp_pipe_balanced_split(layout, dev, &od, tp, pp, bounds);
        if (s != OSDP_OK) return s;
    }
    for (int b = bounded ? 1 : 0; b <= (bounded ? per_group : 0); b++) {
        if (b > 0 && (per_group % b != 0 || (o->geo.micro_batch > 0 && b != o->geo.micro_batch))) continue;
        /* interleaving possible at this M (P > 1, some V of the range for the layers, M a multiple of P; b 0:
         * the pipeline planner's M without a global batch) */
        const int M = b > 0 ? per_group / b : OSDP_PIPE_DEFAULT_MICRO_PER_STAGE * pp;
        const int chunks = st->v_hi >= 2
                           && osdp_pipe_interleave_possible(pp, M, st->n_layer, layout->n_ops, st->v_lo, st->v_hi);
        if (st->v_lo >= 2 && !chunks) continue;   /* interleaved asked for: it cannot run here */
        if (*n == *cap) {
            const int grown = *cap ? 2 * *cap : 64;
            candidate *more = realloc(*list, sizeof *more * (size_t)grown);
            if (!more) return osdp_error_set(OSDP_ERR_OOM, "3D search: out of host memory");
            *list = more;
            *cap = grown;
        }
        candidate *c = &(*list)[*n];
        *c = (candidate){.tp = tp, .pp = pp, .b = b, .M = b > 0 ? per_group / b : 0, .layout = layout,
                         .classes = classes, .balanced = balanced, .chunks = chunks};
        if (balanced) memcpy(c->bounds, bounds, sizeof(int) * (size_t)(pp + 1));
        if (chunks) memcpy(c->balanced_bounds, bounds, sizeof(int) * (size_t)(pp + 1));
        if (b > 0) {
            if (!(c->op_s = malloc(sizeof *c->op_s * (size_t)layout->n_ops)))
                return osdp_error_set(OSDP_ERR_OOM, "3D search: out of host memory");
            osdp_status s = osdp_3d_op_times(layout, dev, o, tp, D, pp, b, c->M, c->op_s, &c->sync_s);
            if (s != OSDP_OK) {
                free(c->op_s);
                return s;
            }
            c->step_bound = osdp_3d_step_bound(c->op_s, layout->n_ops, pp, c->M) + c->sync_s;
            c->chunks_step_bound = chunks ? osdp_3d_chunks_bound(c->op_s, layout->n_ops, pp, c->M) + c->sync_s : INFINITY;
            /* until its memory-aware bound is wanted (aware_bound), the smaller of both schedules' step bounds
             * (interleaved asked for: its own): at most that bound */
            c->bound = !chunks ? c->step_bound : st->v_lo >= 2 ? c->chunks_step_bound
                                                               : fmin(c->step_bound, c->chunks_step_bound);
            c->chunks_bound = c->chunks_step_bound;
            c->pending = balanced;
        }
        (*n)++;
    }
    return OSDP_OK;
}

/* A balanced candidate's memory-aware bound (its split's stages' LP bounds, osdp_pipe_split_bound), made
 * when the search reaches it: most candidates' step bounds alone exceed the best step found (3 in 4 of the
 * bound contexts at 145.6B with --split auto, 60% of that search, were built for candidates never planned).
 * The bound becomes what add_candidates computed before: the smaller of both schedules' (interleaved asked
 * for: its own) and at least the memory-aware one, INFINITY when a stage cannot fit. */
static osdp_status aware_bound(const osdp_device *dev, const osdp_planner_options *o, search_state *st,
                               candidate *c)
{
    st->res->aware_bounds++;
    double aware = 0, aware_1f1b = 0;
    osdp_status s = osdp_pipe_split_bound(c->layout, c->classes, dev, o, c->tp, c->pp, st->planned, c->bounds, c->b,
                                          c->M, c->chunks, &aware, &aware_1f1b);
    if (s != OSDP_OK) return s;
    c->pending = 0;
    if (c->chunks && isinf(aware)) c->chunks = 0;   /* the balanced split cannot hold the plan to interleave */
    c->bound = c->step_bound;
    if (c->chunks) {   /* the smaller of both schedules' (interleaved asked for: its own) */
        c->chunks_bound = fmax(c->chunks_step_bound, aware);
        c->bound = st->v_lo >= 2 ? c->chunks_bound : fmin(c->bound, c->chunks_bound);
    } else if (st->v_lo >= 2) {   /* interleaved asked for: it cannot run here */
        c->dropped = 1;
    }
    c->bound = fmax(c->bound, aware);   /* one split, the balanced one: its memory-aware bound, tighter */
    c->aware = 1;
    c->first_key = fmax(c->bound, aware_1f1b);
    return OSDP_OK;
}

/* 1 when c, aware and of a finite first_key, goes first rather than f (NULL: none yet): the less first_key,
 * ties to the less by cmp_candidate */
static int goes_first(const candidate *c, const candidate *f)
{
    if (!c->aware || !isfinite(c->first_key)) return 0;
    return !f || c->first_key < f->first_key || (c->first_key == f->first_key && cmp_candidate(c, f) < 0);
}

/* candidates by their bounds (cmp_candidate), through pointers to them */
static int cmp_candidate_ptr(const void *x, const void *y)
{
    return cmp_candidate(*(const candidate *const *)x, *(const candidate *const *)y);
}

/* The candidate planned first (*first, -1: none): the one of the least memory-aware bound under the planned
 * schedule (first_key), likely to fit and near the optimum, so that its step bounds the others out early,
 * above all the enumerated splits of small P whose step bounds know nothing of the memory (145.6B on 1536
 * A100-40GB: PP 2's 161 splits at each b were planned first, 687 splits and 74 s, against 113 splits with
 * this first).  The memory-aware bounds it needs are made lazily: the balanced candidates in the order of
 * their bounds before it, a lower bound of first_key, until that bound exceeds the least first_key found;
 * ties go to the least by cmp_candidate.  *dropped counts the candidates dropped. */
static osdp_status first_candidate(const osdp_device *dev, const osdp_planner_options *o, search_state *st,
                                   candidate *list, int n, int *first, int *dropped)
{
    candidate **order = n ? malloc(sizeof *order * (size_t)n) : NULL;
    if (n && !order) return osdp_error_set(OSDP_ERR_OOM, "3D search: out of host memory");
    int m = 0;
    for (int i = 0; i < n; i++)
        if (list[i].pending) order[m++] = &list[i];
    if (m > 1) qsort(order, (size_t)m, sizeof *order, cmp_candidate_ptr);
    osdp_status s = OSDP_OK;
    for (int k = 0; k < m && s == OSDP_OK; k++) {
        candidate *c = order[k];
        if (*first >= 0 && c->bound > list[*first].first_key) break;   /* its first_key is at least that */
        if ((s = aware_bound(dev, o, st, c)) != OSDP_OK) break;
        if (c->dropped) {
            (*dropped)++;
            continue;
        }
        if (goes_first(c, *first >= 0 ? &list[*first] : NULL)) *first = (int)(c - list);
    }
    free(order);
    return s;
}

/* a binary heap of candidate indices, least by cmp_candidate on top */
static int heap_less(const candidate *list, int a, int b)
{
    return cmp_candidate(&list[a], &list[b]) < 0;
}

static void heap_down(const candidate *list, int *heap, int n, int at)
{
    for (;;) {
        int least = at;
        const int l = 2 * at + 1, r = l + 1;
        if (l < n && heap_less(list, heap[l], heap[least])) least = l;
        if (r < n && heap_less(list, heap[r], heap[least])) least = r;
        if (least == at) return;
        const int t = heap[at];
        heap[at] = heap[least];
        heap[least] = t;
        at = least;
    }
}

static void free_candidates(candidate *list, int n)
{
    for (int i = 0; i < n; i++) free(list[i].op_s);
    free(list);
}

/* The search: every mesh's candidates with their bounds (the meshes whose
 * state alone cannot fit left out), planned from the smallest bound up;
 * it stops at the first bound above the best step found, which no later
 * candidate can then beat (nor tie, the bounds being sorted).  Without a
 * global batch (the most samples per second wins, every b up to the first
 * that does not fit) the candidates are the meshes, in their order. */
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
    o.verify = 0;   /* the answer's stage peaks are checked once, at the end */
    o.quiet_infeasible = 1;   /* a stage that cannot fit: no message (a memory search each), but one at the end */
    const int N = o.geo.n_ranks;
    const int fixed_pp = kind == OSDP_3D_FSDP || kind == OSDP_3D_DDP ? 1 : o3->pp;
    const int fixed_tp = kind == OSDP_3D_FSDP || kind == OSDP_3D_DDP ? 1 : o3->tp;
    if (fixed_tp > 0) {   /* a given --tp: refused as plan --tp T and --pp P refuse it, naming the reason */
        char why[256];
        if (N % fixed_tp != 0)
            return osdp_error_set(OSDP_ERR_INPUT, "--tp %d does not divide the %d ranks (--ranks): the mesh is "
                                  "N = P x D x T", fixed_tp, N);
        if (osdp_planner_tp_node_why(fixed_tp, dev, why, sizeof why)) return osdp_error_set(OSDP_ERR_INPUT, "%s", why);
    }
    const long long mem_limit = o.mem_limit > 0 ? o.mem_limit : dev->mem_limit;
    search_state st = {.res = res, .by_step = o.global_batch > 0, .cache = osdp_stage_cache_new(), .n_layer = cfg->n_layer};
    /* the schedule and the V searched (osdp_3d_options): interleaving plans its stages under 1F1B */
    const int interleaved = o3->schedule == OSDP_PIPE_INTERLEAVED;
    st.planned = interleaved ? OSDP_PIPE_1F1B : o3->schedule;
    st.v_lo = interleaved ? (o3->virtual_stages >= 2 ? o3->virtual_stages : 2) : 1;
    st.v_hi = interleaved ? (o3->virtual_stages >= 2 ? o3->virtual_stages : OSDP_MAX_STAGES)
            : o3->virtual_stages == OSDP_3D_V_AUTO ? OSDP_MAX_STAGES : 1;
    candidate *list = NULL;
    int n_cand = 0, cap = 0, n_ops = 0, n_layouts = 0;
    osdp_layout layouts[OSDP_MAX_TP_CANDIDATES];   /* one per T searched */
    int *classes[OSDP_MAX_TP_CANDIDATES];
    osdp_status s = OSDP_OK;
    for (int tp = 1; tp <= N && s == OSDP_OK; tp++) {
        if (N % tp != 0 || (fixed_tp > 0 && tp != fixed_tp)) continue;
        /* a tensor-parallel group sits inside a node */
        if (fixed_tp == 0 && osdp_cost_tp_spans_nodes(dev->ranks_per_node, tp)) continue;
        if (n_layouts == OSDP_MAX_TP_CANDIDATES) break;   /* T divides a node of at most 32: never */
        osdp_layout *lp = &layouts[n_layouts];
        s = osdp_layout_build_tp(lp, cfg, seq_len, tp, o.vocab_quantum);
        if (s == OSDP_ERR_INPUT && fixed_tp == 0) {   /* T does not divide the heads */
            s = OSDP_OK;
            continue;
        }
        if (s != OSDP_OK) break;
        osdp_layout layout = *lp;   /* kept, with its classes, for the candidates' searches */
        if (!(classes[n_layouts++] = malloc(sizeof(int) * (size_t)layout.n_ops))) {
            s = osdp_error_set(OSDP_ERR_OOM, "3D search: out of host memory");
            break;
        }
        osdp_stage_classes(lp, classes[n_layouts - 1]);
        n_ops = layout.n_ops;   /* the same operators at every T */
        const double n_params = (double)layout.total_params;
        const double state = (double)state_bytes_per_param(dev) * n_params;
        for (int pp = 1; pp <= N / tp && pp <= OSDP_MAX_STAGES && pp <= n_ops && s == OSDP_OK; pp++) {
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
            if (pp == 1 && st.v_lo >= 2) continue;   /* interleaved asked for: a pipeline */
            s = add_candidates(lp, classes[n_layouts - 1], dev, &o, o3, &st, tp, pp, D, &list, &n_cand, &cap);
        }
    }
    /* Best first: the candidate of the least bound is planned (its memory-aware bound made first, when it
     * has one pending, and put back), until the least bound exceeds the best step found, which no other
     * candidate can then beat (nor tie).  The answer is the order's: the best step, ties to the earliest
     * in the enumeration (better). */
    int *heap = n_cand ? malloc(sizeof *heap * (size_t)n_cand) : NULL;
    int n_heap = 0, dropped = 0, nothing_fits = 0, first = -1;
    if (n_cand && !heap) s = osdp_error_set(OSDP_ERR_OOM, "3D search: out of host memory");
    if (s == OSDP_OK) s = first_candidate(dev, &o, &st, list, n_cand, &first, &dropped);
    for (int i = 0; i < n_cand && s == OSDP_OK; i++)
        if (i != first && !list[i].dropped) heap[n_heap++] = i;
    for (int i = n_heap / 2 - 1; i >= 0; i--) heap_down(list, heap, n_heap, i);
    if (s == OSDP_OK && first >= 0) s = plan_candidate(cfg, seq_len, dev, &o, o3, &list[first], n_ops, &st);
    while (n_heap > 0 && s == OSDP_OK) {
        candidate *c = &list[heap[0]];
        if (c->pending) {
            if ((s = aware_bound(dev, &o, &st, c)) != OSDP_OK) break;
            if (c->dropped) {
                dropped++;
                heap[0] = heap[--n_heap];
            }
            heap_down(list, heap, n_heap, 0);
            continue;
        }
        if (c->op_s && bounded_out(c->bound, &st)) {   /* every other bound is at least this one */
            res->candidates_bounded = n_heap;
            break;
        }
        if (!st.have_best && c->op_s && isinf(c->bound)) {   /* nothing left can fit, nothing did */
            nothing_fits = 1;
            break;
        }
        heap[0] = heap[--n_heap];
        heap_down(list, heap, n_heap, 0);
        s = plan_candidate(cfg, seq_len, dev, &o, o3, c, n_ops, &st);
    }
    free(heap);
    if (s == OSDP_OK && !st.have_best && n_cand > 0) nothing_fits = 1;
    /* Nothing fits: the message is that of the order below (the candidate of the least memory-aware bound
     * under the planned schedule first, then by bound), every candidate planned again in it for its words
     * (the stage cache answers those planned above). */
    for (int i = 0; i < n_cand && s == OSDP_OK && nothing_fits; i++)
        if (list[i].pending) s = aware_bound(dev, &o, &st, &list[i]);
    if (s == OSDP_OK && nothing_fits) {
        int kept = 0;
        for (int i = 0; i < n_cand; i++)
            if (!list[i].dropped) list[kept++] = list[i];
            else free(list[i].op_s);
        n_cand = kept;
        if (n_cand > 1) qsort(list, (size_t)n_cand, sizeof *list, cmp_candidate);
        res->message[0] = '\0';
        st.infeasible = st.unfit = 0;
        first = -1;   /* (list is sorted now: the same rule, on every candidate) */
        /* (by its bound under the planned schedule: interleaving's, lower, is the likelier to disappoint) */
        for (int i = 0; i < n_cand; i++)
            if (goes_first(&list[i], first >= 0 ? &list[first] : NULL)) first = i;
        for (int j = first >= 0 ? -1 : 0; j < n_cand && s == OSDP_OK; j++) {
            const int i = j < 0 ? first : j;
            if (j >= 0 && j == first) continue;
            s = plan_candidate(cfg, seq_len, dev, &o, o3, &list[i], n_ops, &st);
        }
        dropped = 0;
    }
    free_candidates(list, n_cand);
    if (s == OSDP_OK && !st.have_best && st.infeasible)   /* nothing fits: the first no-fit's message */
        s = unfit_message(cfg, seq_len, dev, &o, &st, st.infeasible_tp, st.infeasible_pp, st.infeasible_b,
                          st.infeasible_split ? st.infeasible_bounds : NULL, st.infeasible_chunks,
                          st.infeasible_b > 0 ? INFINITY : -1);
    else if (s == OSDP_OK && !st.have_best && st.unfit && res->message[0] == '\0')
        /* nothing fits: the message of the first candidate a bound found unable to fit, by its search */
        s = unfit_message(cfg, seq_len, dev, &o, &st, st.unfit_tp, st.unfit_pp, st.unfit_b,
                          st.unfit_split ? st.unfit_bounds : NULL, 0, -1);
    for (int t = 0; t < n_layouts; t++) {
        osdp_layout_free(&layouts[t]);
        free(classes[t]);
    }
    res->candidates = n_cand - dropped;
    res->stage_reuses = osdp_stage_cache_hits(st.cache);
    osdp_stage_cache_free(st.cache);
    if (s == OSDP_OK && st.have_best) s = osdp_pipe_choice_verify(dev, o_in, &res->best);
    if (s != OSDP_OK) {
        if (st.have_best) osdp_pipe_choice_free(&res->best);
        memset(&res->best, 0, sizeof res->best);
        return s;
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

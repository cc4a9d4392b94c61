/* The step as data (see osdp/schedule.h): the events of a step, built by
 * following the weights' states through the step as the runtime will, and
 * their memory evaluated. */
#include "osdp/schedule.h"
#include "osdp/gpt.h"

#include <stdlib.h>
#include <string.h>

#define TRY(expr) do { osdp_status s_ = (expr); if (s_ != OSDP_OK) return s_; } while (0)

osdp_memory_category osdp_buffer_category(osdp_buffer_kind kind)
{
    static const osdp_memory_category category[OSDP_BUF_N_KINDS] = {
        [OSDP_BUF_STATE] = OSDP_MEMORY_STATE,         [OSDP_BUF_MASTER_COPY] = OSDP_MEMORY_STATE,
        [OSDP_BUF_RESIDENT] = OSDP_MEMORY_WEIGHTS,    [OSDP_BUF_WORKSPACE] = OSDP_MEMORY_WORKSPACE,
        [OSDP_BUF_GATHERED] = OSDP_MEMORY_WEIGHTS,    [OSDP_BUF_KEPT] = OSDP_MEMORY_ACTIVATIONS,
        [OSDP_BUF_ACTS] = OSDP_MEMORY_ACTIVATIONS,    [OSDP_BUF_FULL_GRAD] = OSDP_MEMORY_GRADS,
        [OSDP_BUF_GRAD_RECV] = OSDP_MEMORY_GRADS,     [OSDP_BUF_TP_STAGING] = OSDP_MEMORY_TP_COMM,
        [OSDP_BUF_STAGE_INPUT] = OSDP_MEMORY_ACTIVATIONS, [OSDP_BUF_GRAD_ACCUM] = OSDP_MEMORY_GRADS,
        [OSDP_BUF_KEPT_WIDE] = OSDP_MEMORY_ACTIVATIONS,
    };
    return category[kind];
}

size_t osdp_buffer_bytes(osdp_buffer_kind kind, const osdp_buffer_dims *d, size_t slice_padded)
{
    const osdp_op_layout *ol = &d->layout->op[d->op];
    const size_t B = (size_t)d->geo->micro_batch, F = sizeof(float);
    const osdp_buffer_widths *w = &d->width;
    const int narrow = osdp_buffer_kept_narrow(d);
    switch (kind) {
    case OSDP_BUF_STATE: return (3 * F + w->grad) * d->shard;   /* fp32 master, AdamW m and v; the gradient */
    case OSDP_BUF_MASTER_COPY: return w->weight < F ? d->shard * w->weight : 0;
    case OSDP_BUF_RESIDENT: return d->resident * w->weight;
    case OSDP_BUF_WORKSPACE: return osdp_workspace_floats(d->layout, (int)B) * w->act;
    case OSDP_BUF_GATHERED: return slice_padded * w->weight;
    case OSDP_BUF_KEPT: return B * ol->kept_floats_per_seq * (narrow ? w->residual : w->act);
    case OSDP_BUF_KEPT_WIDE: return narrow ? B * ol->kept_floats_per_seq * w->act : 0;
    case OSDP_BUF_ACTS:
        return B * (ol->act_floats_per_seq - (d->recompute && !narrow ? ol->kept_floats_per_seq : 0)) * w->act;
    case OSDP_BUF_FULL_GRAD: return d->padded * w->grad;
    case OSDP_BUF_GRAD_ACCUM: return d->once * w->grad;
    case OSDP_BUF_GRAD_RECV: return (d->shard - d->once_shard) * w->grad;
    case OSDP_BUF_TP_STAGING: return B * osdp_tp_staging_floats_per_seq(d->layout) * w->act;
    case OSDP_BUF_STAGE_INPUT: return B * (size_t)d->layout->T * (size_t)d->layout->op[d->op - 1].width * F;
    case OSDP_BUF_N_KINDS: break;
    }
    return 0;
}

/* does operator op's output go to another stage (the last of a chunk, not the model's last)? */
static int op_sends(const osdp_schedule *sc, int op)
{
    if (!sc->pipelined || op + 1 >= sc->layout->n_ops) return 0;
    const int chunks = sc->opt.geo.pp_size * sc->n_chunks;
    for (int c = 1; c < chunks; c++)
        if (sc->opt.geo.stage_bounds[c] == op + 1) return 1;
    return 0;
}

/* what operator op's buffers are sized by, as the plan slices it */
static osdp_buffer_dims op_dims(const osdp_schedule *sc, int op)
{
    const osdp_sched_op *so = &sc->ops[op];
    return (osdp_buffer_dims){.layout = sc->layout, .op = op, .geo = &sc->opt.geo,
                              .recompute = so->recompute, .padded = so->padded, .shard = so->shard,
                              .resident = so->resident_numel, .once = so->once_padded,
                              .once_shard = so->once_shard, .sends = op_sends(sc, op),
                              .width = {.weight = sc->weight_size, .grad = sizeof(float), .act = sizeof(float),
                                        .residual = osdp_dtype_size(sc->opt.geo.residual_dtype)}};
}

/* Bytes of buffer `kind` of operator op (slice: GATHERED only) as the plan
 * slices it, from the size table. */
static size_t buffer_bytes(const osdp_schedule *sc, osdp_buffer_kind kind, int op, int slice)
{
    const osdp_buffer_dims d = op_dims(sc, op);
    return osdp_buffer_bytes(kind, &d, sc->ops[op].slice[slice].padded);
}

int osdp_schedule_kept_narrow(const osdp_schedule *sc, int op)
{
    if (op < 0) return 0;
    const osdp_buffer_dims d = op_dims(sc, op);
    return osdp_buffer_kept_narrow(&d);
}

/* the output of operator op, (B, T, d): what crosses a stage boundary after it */
static size_t boundary_bytes(const osdp_schedule *sc, int op)
{
    return buffer_bytes(sc, OSDP_BUF_STAGE_INPUT, op + 1, 0);
}

/* ---- the builder ------------------------------------------------------------- */

/* A use of one slice's weights in a micro-step: forward passes go up the
 * slices, backward passes down (osdp/gpt.h). */
typedef struct weight_use { int op, slice; osdp_pass pass; int micro; } weight_use;

/* what the runtime will know of a slice's weights at this point of the step */
typedef struct slice_sim { int present, valid, pending; } slice_sim;

typedef struct builder {
    osdp_schedule *sc;
    osdp_event **list;      /* the list being written: setup or micro */
    int *n, *cap;
    weight_use *uses;
    int n_uses, cur_use;
    slice_sim *sim;         /* [op * OSDP_MAX_SLICES + slice] */
    int pending_scatter;    /* op whose reduce-scatters are in flight, -1 none */
    int micro;              /* the micro-batch the events being written belong to */
    int chunk;              /* the stage's local chunk of the pass being written */
    int grad_send_pending;  /* interleaving: a SEND_GRAD not yet waited */
} builder;

static osdp_status emit(builder *b, osdp_event ev)
{
    if (*b->n == *b->cap) {
        int cap = *b->cap ? 2 * *b->cap : 256;
        osdp_event *grown = realloc(*b->list, sizeof *grown * (size_t)cap);
        if (!grown) return osdp_error_set(OSDP_ERR_OOM, "schedule: out of host memory");
        *b->list = grown;
        *b->cap = cap;
    }
    ev.micro = b->micro;
    (*b->list)[(*b->n)++] = ev;
    return OSDP_OK;
}

static osdp_status emit_buffer(builder *b, osdp_event_kind kind, osdp_buffer_kind buffer, int op, int slice)
{
    return emit(b, (osdp_event){.kind = kind, .buffer = buffer, .op = op, .slice = slice,
                                .bytes = buffer_bytes(b->sc, buffer, op, slice)});
}

static slice_sim *sim_of(builder *b, int u)
{
    return &b->sim[b->uses[u].op * OSDP_MAX_SLICES + b->uses[u].slice];
}

static const osdp_sched_slice *slice_of(builder *b, int u)
{
    return &b->sc->ops[b->uses[u].op].slice[b->uses[u].slice];
}

static int use_needs_gather(builder *b, int u)
{
    const slice_sim *st = sim_of(b, u);
    if (slice_of(b, u)->zdp) return !st->present;
    return !st->valid && !st->pending;
}

/* a ZDP slice gets a buffer for every use; a DP slice is gathered into its
 * resident buffer at its first use in a step (first micro-step only) */
static osdp_status gather_start(builder *b, int u, int blocking)
{
    const weight_use *use = &b->uses[u];
    const osdp_sched_slice *sl = slice_of(b, u);
    slice_sim *st = sim_of(b, u);
    if (sl->zdp) {
        TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_GATHERED, use->op, use->slice));
        st->present = 1;
    }
    TRY(emit(b, (osdp_event){.kind = OSDP_EV_GATHER, .op = use->op, .slice = use->slice, .blocking = blocking,
                             .first_micro_only = !sl->zdp, .bytes = sl->padded * b->sc->weight_size}));
    st->pending = !blocking;
    if (!sl->zdp) st->valid = 1;   /* the gather is under way: nobody starts another */
    return OSDP_OK;
}

static osdp_status wait_gather(builder *b, int u)
{
    sim_of(b, u)->pending = 0;
    return emit(b, (osdp_event){.kind = OSDP_EV_GATHER_WAIT, .op = b->uses[u].op, .slice = b->uses[u].slice,
                                .first_micro_only = !slice_of(b, u)->zdp});
}

static osdp_status make_present(builder *b, int u)
{
    if (use_needs_gather(b, u)) TRY(gather_start(b, u, !b->sc->opt.geo.prefetch));
    if (sim_of(b, u)->pending) TRY(wait_gather(b, u));
    return OSDP_OK;
}

static osdp_status release(builder *b, int u)
{
    slice_sim *st = sim_of(b, u);
    if (!slice_of(b, u)->zdp || !st->present) return OSDP_OK;
    if (st->pending) TRY(wait_gather(b, u));   /* prefetched for a use the pass skipped */
    /* a ZDP slice is gathered anew for every use, even adjacent ones (the
     * head's forward and backward): it never stays across uses */
    TRY(emit_buffer(b, OSDP_EV_FREE, OSDP_BUF_GATHERED, b->uses[u].op, b->uses[u].slice));
    st->present = 0;
    return OSDP_OK;
}

/* Advance to use `target`: release the uses before it, make its slice present
 * and start the gather of the use after it (prefetch). */
static osdp_status advance_to(builder *b, int target)
{
    while (b->cur_use < target) {
        if (b->cur_use >= 0) TRY(release(b, b->cur_use));
        b->cur_use++;
        if (b->cur_use < target) continue;
        TRY(make_present(b, b->cur_use));
        if (!b->sc->opt.geo.prefetch) continue;
        /* ahead: the next slice, and when an operator's pass begins, the first
         * slice of the next pass too, so that its gather has the whole
         * operator's compute to hide behind (and the memory it takes is the
         * same at every slice: osdp/cost_model.h) */
        const weight_use *cur = &b->uses[b->cur_use];
        int next = b->cur_use + 1;
        if (next < b->n_uses && use_needs_gather(b, next)) TRY(gather_start(b, next, 0));
        int first = b->cur_use == 0 || b->uses[b->cur_use - 1].op != cur->op || b->uses[b->cur_use - 1].pass != cur->pass;
        int next_pass = b->cur_use + b->sc->ops[cur->op].n_slices;
        if (first && next_pass < b->n_uses && next_pass != next && use_needs_gather(b, next_pass))
            TRY(gather_start(b, next_pass, 0));
    }
    return OSDP_OK;
}

static int find_use(const builder *b, int op, int slice, osdp_pass pass)
{
    for (int u = b->cur_use < 0 ? 0 : b->cur_use; u < b->n_uses; u++)
        if (b->uses[u].op == op && b->uses[u].slice == slice && b->uses[u].pass == pass && b->uses[u].micro == b->micro)
            return u;
    return -1;
}

/* One pass of operator op: its slices in pass order, each made present when
 * the compute reaches it; the last released as soon as the pass ends, before
 * the reduce-scatter's receive buffer and the next activations. */
static osdp_status pass_events(builder *b, int op, osdp_pass pass)
{
    const int g = b->sc->ops[op].n_slices, fwd = pass != OSDP_PASS_BACKWARD;
    TRY(emit(b, (osdp_event){.kind = OSDP_EV_COMPUTE, .op = op, .pass = pass}));
    for (int k = 0; k < g; k++) {
        int s = fwd ? k : g - 1 - k;
        TRY(advance_to(b, find_use(b, op, s, pass)));
        TRY(emit(b, (osdp_event){.kind = OSDP_EV_USE, .op = op, .slice = s, .pass = pass}));
    }
    TRY(release(b, b->cur_use));
    return emit(b, (osdp_event){.kind = OSDP_EV_COMPUTE_END, .op = op, .pass = pass});
}

/* A reduce-once operator reduces its accumulated gradients (GRAD_ACCUM,
 * setup's) straight into its gradient shard, no receive buffer, in the
 * step's last micro-step only (flagged without a pipeline, whose list runs
 * every micro-step); the wait zeroes them for the next step.  On a pipeline
 * that wait is the step's last event (once_waits), after the stage's last
 * gradient send: the stages before it run their drain while the reductions
 * complete, instead of waiting for them one stage after another. */
static osdp_status scatter_finish(builder *b, int op)
{
    const osdp_sched_op *so = &b->sc->ops[op];
    const int J = so->once_slices, every = J < so->n_slices;
    if (every) TRY(emit(b, (osdp_event){.kind = OSDP_EV_REDUCE_SCATTER_WAIT, .op = op}));
    if (J && !b->sc->pipelined)
        TRY(emit(b, (osdp_event){.kind = OSDP_EV_REDUCE_SCATTER_WAIT, .op = op, .once = 1, .last_micro_only = 1}));
    if (!every) return OSDP_OK;
    TRY(emit_buffer(b, OSDP_EV_FREE, OSDP_BUF_FULL_GRAD, op, 0));
    return emit_buffer(b, OSDP_EV_FREE, OSDP_BUF_GRAD_RECV, op, 0);
}

/* with prefetch an operator's reduce-scatters run during the next
 * operator's backward, and complete when that one's start.  A reduce-once
 * operator (osdp/plan.h: its last J slices) adds those slices' full
 * gradients into its accumulated ones every micro-batch; when J = g it frees
 * its full gradients at once, else its other slices reduce-scatter them
 * every micro-batch as any operator's.  The J slices reduce in its last
 * micro-batch's backward only: flagged last_micro_only without a pipeline,
 * absent from its earlier backwards with one (the stage runs its backwards
 * in micro-batch order). */
static osdp_status scatter_events(builder *b, int op)
{
    const osdp_sched_op *so = &b->sc->ops[op];
    const int J = so->once_slices, every = J < so->n_slices;
    const int reduces_once = J && (!b->sc->pipelined || b->micro == b->sc->opt.geo.accum_steps - 1);
    if (J) TRY(emit(b, (osdp_event){.kind = OSDP_EV_GRAD_ACCUMULATE, .op = op}));
    if (!every) TRY(emit_buffer(b, OSDP_EV_FREE, OSDP_BUF_FULL_GRAD, op, 0));
    if (!every && !reduces_once) {   /* nothing to reduce: the one before completes all the same */
        if (b->pending_scatter >= 0) TRY(scatter_finish(b, b->pending_scatter));
        b->pending_scatter = -1;
        return OSDP_OK;
    }
    if (every) {
        TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_GRAD_RECV, op, 0));
        TRY(emit(b, (osdp_event){.kind = OSDP_EV_REDUCE_SCATTER, .op = op,
                                 .bytes = (so->padded - so->once_padded) * sizeof(float)}));
    }
    if (reduces_once)
        TRY(emit(b, (osdp_event){.kind = OSDP_EV_REDUCE_SCATTER, .op = op, .once = 1,
                                 .last_micro_only = !b->sc->pipelined, .bytes = so->once_padded * sizeof(float)}));
    if (!b->sc->opt.geo.prefetch) return scatter_finish(b, op);
    if (b->pending_scatter >= 0) TRY(scatter_finish(b, b->pending_scatter));
    b->pending_scatter = op;
    return OSDP_OK;
}

/* Operator op's forward, in a micro-step or a validation pass: its
 * activations (under recompute only its output outlives the pass), the
 * token ids for the embedding and the head, the head's loss sum. */
static osdp_status forward_events(builder *b, int op)
{
    const int n = b->sc->layout->n_ops, rc = b->sc->ops[op].recompute;
    const int widen = osdp_schedule_kept_narrow(b->sc, op - 1);   /* its input, a bf16 KEPT (osdp/schedule.h) */
    if (widen) TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_KEPT_WIDE, op - 1, 0));
    if (rc) TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_KEPT, op, 0));
    TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_ACTS, op, 0));
    if (op == 0 || op == n - 1) TRY(emit(b, (osdp_event){.kind = OSDP_EV_LOAD_TOKENS, .op = op}));
    TRY(pass_events(b, op, OSDP_PASS_FORWARD));
    if (op == n - 1) TRY(emit(b, (osdp_event){.kind = OSDP_EV_LOSS_SUM, .op = op}));
    if (rc) TRY(emit_buffer(b, OSDP_EV_FREE, OSDP_BUF_ACTS, op, 0));   /* only the output stays */
    if (widen) TRY(emit_buffer(b, OSDP_EV_FREE, OSDP_BUF_KEPT_WIDE, op - 1, 0));
    return OSDP_OK;
}

/* the message of a stage boundary after operator op (RECV_ACTS, SEND_ACTS,
 * RECV_GRAD, SEND_GRAD) */
static osdp_status message(builder *b, osdp_event_kind kind, int op, int after)
{
    return emit(b, (osdp_event){.kind = kind, .op = op, .bytes = boundary_bytes(b->sc, after)});
}

/* d(input) to the previous stage: blocking, or under interleaving started
 * here and waited by grad_send_wait (osdp_schedule_defers_grad_send) */
static osdp_status grad_send(builder *b, int op)
{
    const int deferred = osdp_schedule_defers_grad_send(b->sc);
    TRY(emit(b, (osdp_event){.kind = OSDP_EV_SEND_GRAD, .op = op, .blocking = !deferred,
                             .bytes = boundary_bytes(b->sc, op - 1)}));
    b->grad_send_pending = deferred;
    return OSDP_OK;
}

static osdp_status grad_send_wait(builder *b)
{
    if (!b->grad_send_pending) return OSDP_OK;
    b->grad_send_pending = 0;
    return emit(b, (osdp_event){.kind = OSDP_EV_SEND_GRAD_WAIT});
}

/* The stage's forward pass over micro-batch b->micro: its input from the
 * previous stage, its operators, its output started towards the next. */
static osdp_status forward_pass(builder *b)
{
    const int lo = b->sc->chunk_lo[b->chunk], hi = b->sc->chunk_hi[b->chunk], n = b->sc->layout->n_ops;
    if (lo > 0) {
        TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_STAGE_INPUT, lo, 0));
        TRY(message(b, OSDP_EV_RECV_ACTS, lo, lo - 1));
    }
    for (int op = lo; op < hi; op++) TRY(forward_events(b, op));
    if (hi < n) TRY(message(b, OSDP_EV_SEND_ACTS, hi - 1, hi - 1));
    return OSDP_OK;
}

/* The stage's backward pass over micro-batch b->micro.  Activation
 * checkpointing (DESIGN.md §3): an operator marked recompute keeps only its
 * output (the next operator's input) from its forward to its backward; the
 * rest of its activation block lives during its forward and again during its
 * recomputed forward + backward.  The last operator's reduce-scatters
 * complete at the pass's end. */
static osdp_status backward_pass(builder *b)
{
    const int lo = b->sc->chunk_lo[b->chunk], hi = b->sc->chunk_hi[b->chunk], n = b->sc->layout->n_ops;
    for (int op = hi - 1; op >= lo; op--) {
        const int rc = b->sc->ops[op].recompute, sends_output = op == hi - 1 && hi < n;
        if (sends_output) {
            TRY(message(b, OSDP_EV_RECV_GRAD, op, op));
            /* the output's send, whose message the next stage has used since (this is its gradient): waited
             * before anything reads or writes the buffer again (a bf16 message narrowed it in place until
             * this wait, stage_message.c; the recomputed forward writes KEPT again) */
            TRY(emit(b, (osdp_event){.kind = OSDP_EV_SEND_ACTS_WAIT, .op = op}));
        }
        if (op == hi - 1) TRY(grad_send_wait(b));   /* the previous pass's, before the compute writes the workspace */
        const int widen = osdp_schedule_kept_narrow(b->sc, op - 1);   /* its input again, for this pass */
        if (widen) TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_KEPT_WIDE, op - 1, 0));
        if (rc) {   /* the activations again, from the kept input */
            TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_ACTS, op, 0));
            TRY(pass_events(b, op, OSDP_PASS_RECOMPUTE));
        }
        /* a tied head adds d(wte) into the embedding's gradients: they live
         * from the head's backward to the embedding's reduce-scatter */
        const int tied = b->sc->layout->cfg.tied_head;
        if (tied && op == n - 1) TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_FULL_GRAD, 0, 0));
        if (!tied || op > 0) TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_FULL_GRAD, op, 0));
        TRY(pass_events(b, op, OSDP_PASS_BACKWARD));
        TRY(scatter_events(b, op));
        if (op == lo && lo > 0) {
            TRY(grad_send(b, op));
            TRY(emit_buffer(b, OSDP_EV_FREE, OSDP_BUF_STAGE_INPUT, op, 0));
        }
        TRY(emit_buffer(b, OSDP_EV_FREE, OSDP_BUF_ACTS, op, 0));
        if (rc) TRY(emit_buffer(b, OSDP_EV_FREE, OSDP_BUF_KEPT, op, 0));
        if (widen) TRY(emit_buffer(b, OSDP_EV_FREE, OSDP_BUF_KEPT_WIDE, op - 1, 0));
    }
    if (b->pending_scatter >= 0) TRY(scatter_finish(b, b->pending_scatter));
    b->pending_scatter = -1;
    return OSDP_OK;
}

/* The passes of the list: one micro-step's F and B without a pipeline; the
 * stage's 2M passes of the step (osdp_pipe_order) with one.  *passes: the
 * caller frees it. */
static osdp_status stage_passes(const osdp_schedule *sc, osdp_pipe_pass **passes, int *n)
{
    const int M = sc->pipelined ? sc->opt.geo.accum_steps : 1, V = sc->n_chunks;
    *passes = malloc(sizeof **passes * 2 * (size_t)M * (size_t)V);
    if (!*passes) return osdp_error_set(OSDP_ERR_OOM, "schedule: out of host memory");
    if (sc->pipelined)
        osdp_pipe_order_chunks(sc->opt.geo.pipe_schedule, sc->opt.geo.pp_size, V, sc->opt.pp_stage, M, *passes);
    else osdp_pipe_order(OSDP_PIPE_GPIPE, 1, 0, 1, *passes);
    *n = 2 * M * V;
    return OSDP_OK;
}

/* a pipeline stage's reduce-once reductions, started in its last
 * micro-batch's backwards, waited at the end of the step (scatter_finish) */
static osdp_status once_waits(builder *b)
{
    b->micro = b->sc->opt.geo.accum_steps - 1;
    for (int op = b->sc->op_lo; op < b->sc->op_hi; op++)
        if (osdp_schedule_has_op(b->sc, op) && b->sc->ops[op].once_slices)
            TRY(emit(b, (osdp_event){.kind = OSDP_EV_REDUCE_SCATTER_WAIT, .op = op, .once = 1}));
    return OSDP_OK;
}

static osdp_status micro_events(builder *b)
{
    osdp_pipe_pass *passes;
    int n_passes;
    TRY(stage_passes(b->sc, &passes, &n_passes));
    osdp_status s = OSDP_OK;
    b->cur_use = -1;
    b->pending_scatter = -1;
    b->micro = b->chunk = 0;
    /* A pipeline stage starts its DP slices' gathers (once per step, into
     * their resident buffers) before it waits for its first input: they
     * run while the stages before it fill, instead of after (each waited at
     * its first use, as ever).  Without prefetch every gather blocks at its
     * use. */
    if (b->sc->pipelined && b->sc->opt.geo.prefetch)
        for (int u = 0; u < b->n_uses && s == OSDP_OK; u++)
            if (!slice_of(b, u)->zdp && use_needs_gather(b, u)) s = gather_start(b, u, 0);
    for (int p = 0; p < n_passes && s == OSDP_OK; p++) {
        b->micro = passes[p].micro;
        b->chunk = passes[p].chunk;
        s = passes[p].backward ? backward_pass(b) : forward_pass(b);
    }
    if (s == OSDP_OK) s = grad_send_wait(b);   /* the step's last gradient send */
    if (s == OSDP_OK && b->sc->pipelined) s = once_waits(b);
    b->micro = b->chunk = 0;
    free(passes);
    return s;
}

/* Validation (osdp/schedule.h): the stage's forward pass, each operator's
 * activations (or its kept output, or the stage's input) freed once the next
 * operator's forward has read them; the last operator's after its output is
 * sent or its loss summed. */
static osdp_status eval_chunk(builder *b, int chunk)
{
    const int lo = b->sc->chunk_lo[chunk], hi = b->sc->chunk_hi[chunk], n = b->sc->layout->n_ops;
    if (lo > 0) {
        TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_STAGE_INPUT, lo, 0));
        TRY(message(b, OSDP_EV_RECV_ACTS, lo, lo - 1));
    }
    for (int op = lo; op < hi; op++) {
        TRY(forward_events(b, op));
        if (op > lo) TRY(emit_buffer(b, OSDP_EV_FREE, b->sc->ops[op - 1].recompute ? OSDP_BUF_KEPT : OSDP_BUF_ACTS,
                                     op - 1, 0));
        else if (lo > 0) TRY(emit_buffer(b, OSDP_EV_FREE, OSDP_BUF_STAGE_INPUT, lo, 0));
    }
    if (hi < n) {
        TRY(message(b, OSDP_EV_SEND_ACTS, hi - 1, hi - 1));
        TRY(emit(b, (osdp_event){.kind = OSDP_EV_SEND_ACTS_WAIT, .op = hi - 1}));
    }
    return emit_buffer(b, OSDP_EV_FREE, b->sc->ops[hi - 1].recompute ? OSDP_BUF_KEPT : OSDP_BUF_ACTS, hi - 1, 0);
}

/* the stage's chunks one after the other (each its input, forwards, output) */
static osdp_status eval_events(builder *b)
{
    b->cur_use = -1;
    b->micro = 0;
    for (int c = 0; c < b->sc->n_chunks; c++) TRY(eval_chunk(b, c));
    return OSDP_OK;
}

static osdp_status setup_events(builder *b)
{
    for (int op = b->sc->op_lo; op < b->sc->op_hi; op++) {
        if (!osdp_schedule_has_op(b->sc, op)) continue;
        TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_STATE, op, 0));
        if (b->sc->opt.geo.weight_dtype != OSDP_FLOAT32) TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_MASTER_COPY, op, 0));
        if (b->sc->ops[op].resident_numel) TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_RESIDENT, op, 0));
        if (b->sc->ops[op].once_slices) TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_GRAD_ACCUM, op, 0));
    }
    TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_WORKSPACE, 0, 0));
    /* the head's, for every step and validation pass: the buffer belongs to no operator's pass */
    if (osdp_tp_staging_floats_per_seq(b->sc->layout) && b->sc->op_hi == b->sc->layout->n_ops)
        TRY(emit_buffer(b, OSDP_EV_ALLOC, OSDP_BUF_TP_STAGING, b->sc->layout->n_ops - 1, 0));
    return OSDP_OK;
}

/* the gradient norm, its all-reduce, then the update, operator by operator */
static osdp_status optim_events(builder *b)
{
    for (int op = b->sc->op_lo; op < b->sc->op_hi; op++)
        if (osdp_schedule_has_op(b->sc, op)) TRY(emit(b, (osdp_event){.kind = OSDP_EV_NORM_SUM, .op = op}));
    TRY(emit(b, (osdp_event){.kind = OSDP_EV_SUMS_ALL_REDUCE, .bytes = 2 * sizeof(double)}));
    for (int op = b->sc->op_lo; op < b->sc->op_hi; op++)
        if (osdp_schedule_has_op(b->sc, op)) TRY(emit(b, (osdp_event){.kind = OSDP_EV_ADAMW, .op = op}));
    return OSDP_OK;
}

/* the order weights are used in the list's passes (osdp/runtime.h) */
static osdp_status build_uses(builder *b)
{
    const osdp_schedule *sc = b->sc;
    osdp_pipe_pass *passes;
    int n_passes, total = 0;
    TRY(stage_passes(sc, &passes, &n_passes));
    for (int i = sc->op_lo; i < sc->op_hi; i++)
        if (osdp_schedule_has_op(sc, i)) total += (2 + sc->ops[i].recompute) * sc->ops[i].n_slices;
    total *= n_passes / 2 / sc->n_chunks;   /* every chunk's passes, M of each way */
    b->uses = malloc(sizeof *b->uses * (size_t)(total ? total : 1));
    b->sim = calloc((size_t)sc->layout->n_ops * OSDP_MAX_SLICES, sizeof *b->sim);
    if (!b->uses || !b->sim) {
        free(passes);
        return osdp_error_set(OSDP_ERR_OOM, "schedule: out of host memory");
    }
    int u = 0;
    for (int p = 0; p < n_passes; p++) {
        const int m = passes[p].micro, lo = sc->chunk_lo[passes[p].chunk], hi = sc->chunk_hi[passes[p].chunk];
        if (!passes[p].backward) {
            for (int i = lo; i < hi; i++)
                for (int s = 0; s < sc->ops[i].n_slices; s++) b->uses[u++] = (weight_use){i, s, OSDP_PASS_FORWARD, m};
            continue;
        }
        for (int i = hi - 1; i >= lo; i--) {
            if (sc->ops[i].recompute)   /* the forward again, then the backward */
                for (int s = 0; s < sc->ops[i].n_slices; s++) b->uses[u++] = (weight_use){i, s, OSDP_PASS_RECOMPUTE, m};
            for (int s = sc->ops[i].n_slices - 1; s >= 0; s--) b->uses[u++] = (weight_use){i, s, OSDP_PASS_BACKWARD, m};
        }
    }
    free(passes);
    b->n_uses = total;
    return OSDP_OK;
}

/* slices and their sharding */
static osdp_status slice_operator(osdp_schedule *sc, const osdp_plan *plan, int i)
{
    osdp_sched_op *so = &sc->ops[i];
    const int N = sc->opt.geo.n_ranks;
    so->n_slices = plan->slices[i];
    so->zdp_slices = plan->zdp_slices[i];
    so->recompute = plan->recompute[i] != 0;
    so->once_slices = osdp_plan_once_slices(plan, i);
    TRY(osdp_op_split(&sc->layout->op[i], so->n_slices, so->bounds));
    for (int s = 0; s < so->n_slices; s++) {
        osdp_sched_slice *sl = &so->slice[s];
        sl->lo = so->bounds[s];
        sl->hi = so->bounds[s + 1];
        sl->padded = osdp_padded_numel_quantum(sl->hi - sl->lo, N, sc->opt.geo.pad_quantum);
        sl->base = so->padded;
        sl->local = so->shard;
        sl->zdp = s < so->zdp_slices;
        sl->hierarchical = sl->zdp && plan->hierarchical[i];
        sl->shard_ranks = sl->hierarchical ? osdp_geometry_node_ranks(&sc->opt.geo) : N;
        so->padded += sl->padded;
        so->shard += osdp_sched_slice_shard_numel(sl);
        if (!sl->zdp) so->resident_numel += sl->padded;
        if (s >= so->n_slices - so->once_slices) {   /* the last J: reduce once (osdp/plan.h) */
            so->once_padded += sl->padded;
            so->once_shard += osdp_sched_slice_shard_numel(sl);
        }
    }
    return OSDP_OK;
}

static osdp_status check_inputs(const osdp_layout *layout, const osdp_plan *plan, const osdp_schedule_options *opt)
{
    if (opt->geo.weight_dtype != OSDP_FLOAT32 && opt->geo.weight_dtype != OSDP_BFLOAT16)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: weights must be fp32 or bf16 (got %s)",
                              osdp_dtype_name(opt->geo.weight_dtype));
    if (opt->geo.n_ranks < 1) return osdp_error_set(OSDP_ERR_INPUT, "runtime: %d ranks is not valid", opt->geo.n_ranks);
    if (opt->geo.node_ranks < 0 || (opt->geo.node_ranks > 0 && opt->geo.n_ranks % opt->geo.node_ranks != 0))
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: %d ranks of the data group per node do not divide its %d ranks",
                              opt->geo.node_ranks, opt->geo.n_ranks);
    if (opt->geo.pad_quantum < 0)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: a pad quantum of %d elements is not valid", opt->geo.pad_quantum);
    if (opt->geo.micro_batch < 1)
        return osdp_error_set(OSDP_ERR_INPUT, "micro-batch must be at least 1 (got %d)", opt->geo.micro_batch);
    if (opt->geo.accum_steps < 1) return osdp_error_set(OSDP_ERR_INPUT, "accumulation steps must be at least 1");
    if (plan->n_ops != layout->n_ops)
        return osdp_error_set(OSDP_ERR_INPUT, "plan has %d operators, the model %d", plan->n_ops, layout->n_ops);
    if (layout->cfg.tied_head) {
        /* the head reads the embedding's resident weights from the embedding's forward to its own backward.
         * Under a pipeline the two are on different stages: Megatron keeps a copy of wte on the last stage
         * and all-reduces the two copies' gradients between the first and last stage; osdp has no such copy */
        if (opt->geo.pp_size > 1)
            return osdp_error_set(OSDP_ERR_INPUT, "--pp %d: a tied head (tied_head = true) needs the embedding and "
                                  "the head on one stage: use --pp 1, or tied_head = false", opt->geo.pp_size);
    }
    for (int i = 0; i < plan->n_ops; i++)
        if (plan->zdp_slices[i] > 0 && !osdp_op_allows_zdp(layout, i))
            return osdp_error_set(OSDP_ERR_INPUT, "operator %s is ZDP in the plan, but the head is tied to its wte "
                                  "(tied_head = true): the embedding must be DP", layout->op[i].name);
    for (int i = 0; i < plan->n_ops; i++)
        if (osdp_plan_once_slices(plan, i) < 0 || osdp_plan_once_slices(plan, i) > plan->slices[i])
            return osdp_error_set(OSDP_ERR_INPUT, "operator %s: %d of its %d slices reduce once: not a count of them",
                                  layout->op[i].name, osdp_plan_once_slices(plan, i), plan->slices[i]);
    for (int i = 0; i < plan->n_ops; i++)
        if (plan->recompute[i] && !osdp_op_can_recompute(layout->op[i].type))
            return osdp_error_set(OSDP_ERR_INPUT, "operator %s: only attn and mlp operators can recompute their activations",
                                  layout->op[i].name);
    if (opt->geo.pp_size <= 1) return OSDP_OK;
    if (opt->geo.pp_size > OSDP_MAX_STAGES || opt->pp_stage < 0 || opt->pp_stage >= opt->geo.pp_size)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: stage %d of a pipeline of %d stages is not valid", opt->pp_stage,
                              opt->geo.pp_size);
    const int V = opt->geo.virtual_stages > 1 ? opt->geo.virtual_stages : 1, chunks = opt->geo.pp_size * V;
    TRY(osdp_pipe_check(opt->geo.pipe_schedule, opt->geo.pp_size, V, opt->geo.accum_steps, layout->n_ops));
    const int *bounds = opt->geo.stage_bounds;
    if (bounds[0] != 0 || bounds[chunks] != layout->n_ops)
        return osdp_error_set(OSDP_ERR_INPUT, "runtime: the stages must cover operators 0 to %d", layout->n_ops);
    for (int s = 0; s < chunks; s++)
        if (bounds[s + 1] <= bounds[s])
            return osdp_error_set(OSDP_ERR_INPUT, "runtime: %s %d of the pipeline has no operator", V > 1 ? "chunk" : "stage", s);
    return OSDP_OK;
}

osdp_status osdp_schedule_build(osdp_schedule *sc, const osdp_layout *layout, const osdp_plan *plan,
                                const osdp_schedule_options *opt)
{
    memset(sc, 0, sizeof *sc);
    TRY(check_inputs(layout, plan, opt));
    sc->layout = layout;
    sc->opt = *opt;
    sc->weight_size = osdp_dtype_size(opt->geo.weight_dtype);
    sc->pipelined = opt->geo.pp_size > 1;
    /* the stage's chunks: global chunk c P + s is local chunk c (osdp/pipeline.h) */
    sc->n_chunks = sc->pipelined && opt->geo.virtual_stages > 1 ? opt->geo.virtual_stages : 1;
    for (int c = 0; c < sc->n_chunks; c++) {
        const int g = c * opt->geo.pp_size + opt->pp_stage;
        sc->chunk_lo[c] = sc->pipelined ? opt->geo.stage_bounds[g] : 0;
        sc->chunk_hi[c] = sc->pipelined ? opt->geo.stage_bounds[g + 1] : layout->n_ops;
    }
    sc->op_lo = sc->chunk_lo[0];
    sc->op_hi = sc->chunk_hi[sc->n_chunks - 1];
    sc->ops = calloc((size_t)layout->n_ops, sizeof *sc->ops);
    if (!sc->ops) return osdp_error_set(OSDP_ERR_OOM, "schedule: out of host memory");
    osdp_status s = OSDP_OK;
    for (int i = 0; i < layout->n_ops && s == OSDP_OK; i++) s = slice_operator(sc, plan, i);
    builder b = {.sc = sc, .list = &sc->setup, .n = &sc->n_setup, .cap = &sc->cap_setup};
    if (s == OSDP_OK) s = setup_events(&b);
    b.list = &sc->micro;
    b.n = &sc->n_micro;
    b.cap = &sc->cap_micro;
    if (s == OSDP_OK) s = build_uses(&b);
    if (s == OSDP_OK) s = micro_events(&b);
    b.list = &sc->optim;
    b.n = &sc->n_optim;
    b.cap = &sc->cap_optim;
    if (s == OSDP_OK) s = optim_events(&b);
    /* the eval list's uses: micro-batch 0's forward passes, chunk after chunk
     * (without interleaving, a prefix of b.uses: the first pass is F0) */
    b.list = &sc->eval;
    b.n = &sc->n_eval;
    b.cap = &sc->cap_eval;
    if (s == OSDP_OK) {
        int u = 0;
        for (int c = 0; c < sc->n_chunks; c++)
            for (int i = sc->chunk_lo[c]; i < sc->chunk_hi[c]; i++)
                for (int k = 0; k < sc->ops[i].n_slices; k++) b.uses[u++] = (weight_use){i, k, OSDP_PASS_FORWARD, 0};
        b.n_uses = u;
        memset(b.sim, 0, sizeof *b.sim * (size_t)layout->n_ops * OSDP_MAX_SLICES);
        s = eval_events(&b);
    }
    free(b.uses);
    free(b.sim);
    if (s != OSDP_OK) osdp_schedule_free(sc);
    return s;
}

void osdp_schedule_free(osdp_schedule *sc)
{
    free(sc->ops);
    free(sc->setup);
    free(sc->micro);
    free(sc->optim);
    free(sc->eval);
    memset(sc, 0, sizeof *sc);
}

/* ---- evaluation ------------------------------------------------------------ */

static void add_up(const osdp_event *ev, int n, size_t *current, size_t *total, osdp_memory_prediction *out)
{
    for (int e = 0; e < n; e++) {
        if (ev[e].kind != OSDP_EV_ALLOC && ev[e].kind != OSDP_EV_FREE) continue;
        osdp_memory_category c = osdp_buffer_category(ev[e].buffer);
        if (ev[e].kind == OSDP_EV_FREE) {
            current[c] -= ev[e].bytes;
            *total -= ev[e].bytes;
            continue;
        }
        current[c] += ev[e].bytes;
        *total += ev[e].bytes;
        if (current[c] > out->peak[c]) out->peak[c] = current[c];
        if (*total > out->peak_total) {
            out->peak_total = *total;
            memcpy(out->at_peak, current, sizeof out->at_peak);
        }
    }
}

/* every micro-step allocates and frees the same bytes (osdp/schedule.h):
 * the setup, one micro-step and the optimizer reach the step's peak */
void osdp_schedule_peak(const osdp_schedule *sc, osdp_memory_prediction *out)
{
    size_t current[OSDP_MEMORY_N_CATEGORIES] = {0}, total = 0;
    memset(out, 0, sizeof *out);
    add_up(sc->setup, sc->n_setup, current, &total, out);
    add_up(sc->micro, sc->n_micro, current, &total, out);
    add_up(sc->optim, sc->n_optim, current, &total, out);
    /* micro and optim free what they allocate: eval starts from the setup's bytes */
    add_up(sc->eval, sc->n_eval, current, &total, out);
}

void osdp_schedule_eval_peak(const osdp_schedule *sc, osdp_memory_prediction *out)
{
    size_t current[OSDP_MEMORY_N_CATEGORIES] = {0}, total = 0;
    memset(out, 0, sizeof *out);
    add_up(sc->setup, sc->n_setup, current, &total, out);
    add_up(sc->eval, sc->n_eval, current, &total, out);
}

osdp_status osdp_schedule_predict(const osdp_layout *layout, const osdp_plan *plan,
                                  const osdp_schedule_options *opt, osdp_memory_prediction *out)
{
    osdp_schedule sc;
    TRY(osdp_schedule_build(&sc, layout, plan, opt));
    osdp_schedule_peak(&sc, out);
    osdp_schedule_free(&sc);
    return OSDP_OK;
}

osdp_status osdp_memory_predict(const osdp_layout *layout, const osdp_plan *plan, int n_ranks,
                                int micro_batch, int accum_steps, int prefetch, osdp_dtype weight_dtype,
                                osdp_memory_prediction *out)
{
    osdp_schedule_options opt = {.geo.n_ranks = n_ranks, .geo.micro_batch = micro_batch, .geo.accum_steps = accum_steps,
                                 .geo.prefetch = prefetch, .geo.weight_dtype = weight_dtype, .geo.pad_quantum = 1};
    return osdp_schedule_predict(layout, plan, &opt, out);
}

/* Queries on a plan's peak terms that every layer of the planner's search
 * asks, the best plan so far, and the context's release (plan_context.h). */
#include "plan_context.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

void osdp_ps_context_free(osdp_ps_context *ctx)
{
    free(ctx->n_choices); free(ctx->group);
    free(ctx->choice_slices); free(ctx->choice_zdp_slices); free(ctx->choice_recompute); free(ctx->choice_hierarchical);
    free(ctx->choice_reduce_once); free(ctx->all_once);
    free(ctx->held_bytes); free(ctx->pass_peak_bytes); free(ctx->prefetch_bytes); free(ctx->next_op_bytes);
    free(ctx->act_bytes); free(ctx->objective);
    free(ctx->later_acts_optimistic); free(ctx->later_acts_pessimistic);
    free(ctx->wrap_values); free(ctx->wrap_first_pass);
    free(ctx->knap_order); free(ctx->knap_n_choices); free(ctx->knap_choice); free(ctx->knap_solution);
    free(ctx->knap_mem); free(ctx->knap_time); free(ctx->knap_mem_buf); free(ctx->knap_time_buf);
    osdp_search_workspace_free(ctx->search_workspace);
    osdp_ps_knap_cache_free(ctx->knap_cache);
    memset(ctx, 0, sizeof *ctx);
}

int osdp_ps_transient_scan(const osdp_ps_context *ctx, const int *ch, long long d, long long *max_z)
{
    long long best = LLONG_MIN, suffix = 0; /* sum_{j >= u+2} acts_j */
    for (int u = ctx->n_ops - 1; u >= 0; u--) {
        long long v = -suffix + ctx->pass_peak_bytes[PS_CHOICE(ctx, u, ch[u])];
        if (u > 0) v += ctx->prefetch_bytes[PS_CHOICE(ctx, u - 1, ch[u - 1])];
        if (u + 1 < ctx->n_ops) {
            v += ctx->next_op_bytes[PS_CHOICE(ctx, u + 1, ch[u + 1])];
            suffix += ctx->act_bytes[PS_CHOICE(ctx, u + 1, ch[u + 1])];
        }
        if (u == 0 && ctx->wrap_first_pass) {   /* the wrap moment's pairing of the first and last operators */
            const int last = ctx->n_ops - 1;
            const long long w = v - ctx->pass_peak_bytes[PS_CHOICE(ctx, 0, ch[0])] + ctx->wrap_first_pass[ch[0]]
                              + ctx->prefetch_bytes[PS_CHOICE(ctx, last, ch[last])];
            if (w > v) v = w;
        }
        if (v > best) best = v;
        if (v > d && !max_z) return u;
    }
    if (max_z) *max_z = best;
    return -1;
}

long long osdp_ps_transient_at(const osdp_ps_context *ctx, const int *ch, int u)
{
    long long v = 0;   /* each operator's bytes at moment u, less what it holds all step */
    for (int i = 0; i < ctx->n_ops; i++)
        v += osdp_ps_moment_bytes(ctx, u, i, ch[i]) - ctx->held_bytes[PS_CHOICE(ctx, i, ch[i])];
    return v;
}

long long osdp_ps_true_transient(const osdp_ps_context *ctx, const int *ch)
{
    long long best;
    osdp_ps_transient_scan(ctx, ch, LLONG_MAX, &best);
    return best;
}

long long osdp_ps_moment_bytes(const osdp_ps_context *ctx, int u, int i, int c)
{
    const size_t a = PS_CHOICE(ctx, i, c);
    long long v = ctx->held_bytes[a];
    if (i >= u + 2) v -= ctx->act_bytes[a];
    else if (i == u - 1) v += ctx->prefetch_bytes[a];
    else if (i == u) v += ctx->pass_peak_bytes[a];
    else if (i == u + 1) v += ctx->next_op_bytes[a];
    return v;
}

long long osdp_ps_peak_floor(const osdp_ps_context *ctx)
{
    long long most = LLONG_MIN;
    for (int u = 0; u < ctx->n_ops; u++) {
        long long at = ctx->fixed_bytes;
        for (int i = 0; i < ctx->n_ops; i++) {
            long long lo = LLONG_MAX;
            for (int c = 0; c < ctx->n_choices[i]; c++) {
                const long long v = osdp_ps_moment_bytes(ctx, u, i, c);
                if (v < lo) lo = v;
            }
            at += lo;
        }
        if (at > most) most = at;
    }
    return most;
}

long long osdp_ps_held_sum(const osdp_ps_context *ctx, const int *ch)
{
    long long r = 0;
    for (int u = 0; u < ctx->n_ops; u++) r += ctx->held_bytes[PS_CHOICE(ctx, u, ch[u])];
    return r;
}

double osdp_ps_objective_sum(const osdp_ps_context *ctx, const int *ch)
{
    double t = 0;
    for (int u = 0; u < ctx->n_ops; u++) t += ctx->objective[PS_CHOICE(ctx, u, ch[u])];
    return t;
}

/* per operator: the smallest wp, f, nx of its choices */
void osdp_ps_term_minima(const osdp_ps_context *ctx, long long *minw, long long *minf, long long *minx)
{
    for (int u = 0; u < ctx->n_ops; u++) {
        minw[u] = minf[u] = minx[u] = LLONG_MAX;
        for (int c = 0; c < ctx->n_choices[u]; c++) {
            size_t a = PS_CHOICE(ctx, u, c);
            if (ctx->pass_peak_bytes[a] < minw[u]) minw[u] = ctx->pass_peak_bytes[a];
            if (ctx->prefetch_bytes[a] < minf[u]) minf[u] = ctx->prefetch_bytes[a];
            if (ctx->next_op_bytes[a] < minx[u]) minx[u] = ctx->next_op_bytes[a];
        }
    }
}

/* the smallest Z_u any plan has at u, given the neighbours' minima */
long long osdp_ps_min_transient_at(const osdp_ps_context *ctx, int u, const long long *minw, const long long *minf,
                                   const long long *minx)
{
    return ctx->later_acts_bound[u] + minw[u] + (u > 0 ? minf[u - 1] : 0) + (u + 1 < ctx->n_ops ? minx[u + 1] : 0);
}

/* the smallest transient any plan has */
long long osdp_ps_min_transient(const osdp_ps_context *ctx)
{
    long long *m = malloc(sizeof *m * 3 * (size_t)ctx->n_ops), dlo = LLONG_MIN;
    if (!m) return LLONG_MIN; /* no bound */
    osdp_ps_term_minima(ctx, m, m + ctx->n_ops, m + 2 * ctx->n_ops);
    for (int u = 0; u < ctx->n_ops; u++) {
        long long lo = osdp_ps_min_transient_at(ctx, u, m, m + ctx->n_ops, m + 2 * ctx->n_ops);
        if (lo > dlo) dlo = lo;
    }
    free(m);
    return dlo;
}

/* 1 when a plan of objective v (or a node bounded below by v) may still
 * be better than the best plan found, or reach ctx->cutoff before one is */
int osdp_ps_beats(const osdp_ps_context *ctx, const osdp_ps_best *best, double v)
{
    return best->found ? v < best->objective : v <= ctx->cutoff;
}

/* the slowest objective still wanted */
double osdp_ps_cap(const osdp_ps_context *ctx, const osdp_ps_best *best)
{
    return best->found ? best->objective : ctx->cutoff;
}

void osdp_ps_offer(const osdp_ps_context *ctx, osdp_ps_best *best, const int *ch, double obj)
{
    if (!osdp_ps_beats(ctx, best, obj)) return;
    best->found = 1;
    best->objective = obj;
    memcpy(best->choice, ch, sizeof *ch * (size_t)ctx->n_ops);
}

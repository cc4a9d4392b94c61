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
    free(ctx->forward_peak_bytes); free(ctx->view_bytes); free(ctx->forward_next_bytes);
    free(ctx->later_acts_optimistic); free(ctx->later_acts_pessimistic);
    free(ctx->wrap_values); free(ctx->wrap_first_pass);
    free(ctx->knap_order); free(ctx->knap_n_choices); free(ctx->knap_choice); free(ctx->knap_solution);
    free(ctx->knap_mem); free(ctx->knap_time); free(ctx->knap_mem_buf); free(ctx->knap_time_buf);
    osdp_search_workspace_free(ctx->search_workspace);
    osdp_ps_knap_cache_free(ctx->knap_cache);
    osdp_cost_cuts_free(ctx->own_cuts);
    memset(ctx, 0, sizeof *ctx);
}

/* Z_u and F_u of a plan (no wrap moment), given suffix = sum_{j >= u+2} acts_j; *right_acts: acts_{u+1}, the
 * next u's suffix less this one's (0 for the last operator) */
static void moments_of(const osdp_ps_context *ctx, const int *ch, int u, long long suffix, long long *z, long long *f,
                       long long *right_acts)
{
    const int n = ctx->n_ops;
    const size_t at = PS_CHOICE(ctx, u, ch[u]);
    *z = -suffix + ctx->pass_peak_bytes[at];
    *f = -suffix + ctx->forward_peak_bytes[at];
    *right_acts = 0;
    if (u > 0) {
        const size_t left = PS_CHOICE(ctx, u - 1, ch[u - 1]);
        *z += ctx->prefetch_bytes[left];
        *f += ctx->view_bytes[left];
    }
    if (u + 1 < n) {
        const size_t right = PS_CHOICE(ctx, u + 1, ch[u + 1]);
        *z += ctx->next_op_bytes[right];
        *f += ctx->forward_next_bytes[right];
        *right_acts = ctx->act_bytes[right];
    }
}

int osdp_ps_transient_scan(const osdp_ps_context *ctx, const int *ch, long long d, long long *max_z)
{
    const int n = ctx->n_ops;
    long long best = LLONG_MIN, suffix = 0; /* sum_{j >= u+2} acts_j */
    for (int u = n - 1; u >= 0; u--) {
        long long v, fv, right_acts;
        moments_of(ctx, ch, u, suffix, &v, &fv, &right_acts);
        suffix += right_acts;
        if (u == 0 && ctx->wrap_first_pass) {   /* the wrap moment's pairing of the first and last operators */
            const int last = n - 1;
            const long long w = v - ctx->pass_peak_bytes[PS_CHOICE(ctx, 0, ch[0])] + ctx->wrap_first_pass[ch[0]]
                              + ctx->prefetch_bytes[PS_CHOICE(ctx, last, ch[last])];
            if (w > v) v = w;
        }
        if (v > best) best = v;
        if (fv > best) best = fv;
        if (!max_z && v > d) return u;
        if (!max_z && fv > d) return n + u;
    }
    if (max_z) *max_z = best;
    return -1;
}

void osdp_ps_moment_values(const osdp_ps_context *ctx, const int *ch, long long *z)
{
    const int n = ctx->n_ops;
    long long suffix = 0, right_acts; /* sum_{j >= u+2} acts_j */
    for (int u = n - 1; u >= 0; u--) {
        moments_of(ctx, ch, u, suffix, &z[u], &z[n + u], &right_acts);
        suffix += right_acts;
    }
}

long long osdp_ps_transient_at(const osdp_ps_context *ctx, const int *ch, int m)
{
    long long v = 0;   /* each operator's bytes at moment m, less what it holds all step */
    for (int i = 0; i < ctx->n_ops; i++)
        v += osdp_ps_moment_bytes(ctx, m, i, ch[i]) - ctx->held_bytes[PS_CHOICE(ctx, i, ch[i])];
    return v;
}

long long osdp_ps_true_transient(const osdp_ps_context *ctx, const int *ch)
{
    long long best;
    osdp_ps_transient_scan(ctx, ch, LLONG_MAX, &best);
    return best;
}

long long osdp_ps_moment_bytes(const osdp_ps_context *ctx, int m, int i, int c)
{
    const osdp_ps_moment t = osdp_ps_moment_of(ctx, m);
    const int u = t.op;
    const size_t a = PS_CHOICE(ctx, i, c);
    long long v = ctx->held_bytes[a];
    if (i >= u + 2) v -= ctx->act_bytes[a];
    else if (i == u - 1) v += t.left[a];
    else if (i == u) v += t.mid[a];
    else if (i == u + 1) v += t.right[a];
    return v;
}

long long osdp_ps_peak_floor(const osdp_ps_context *ctx)
{
    long long most = LLONG_MIN;
    for (int m = 0; m < osdp_ps_n_moments(ctx); m++) {
        long long at = ctx->fixed_bytes;
        for (int i = 0; i < ctx->n_ops; i++) {
            long long lo = LLONG_MAX;
            for (int c = 0; c < ctx->n_choices[i]; c++) {
                const long long v = osdp_ps_moment_bytes(ctx, m, i, c);
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

void osdp_ps_term_minima(const osdp_ps_context *ctx, long long *mins)
{
    for (int forward = 0; forward < 2; forward++) {
        const osdp_ps_moment t = osdp_ps_moment_of(ctx, forward * ctx->n_ops);
        long long *minw = PS_MIN_MID(ctx, mins, forward), *minf = PS_MIN_LEFT(ctx, mins, forward);
        long long *minx = PS_MIN_RIGHT(ctx, mins, forward);
        for (int u = 0; u < ctx->n_ops; u++) {
            minw[u] = minf[u] = minx[u] = LLONG_MAX;
            for (int c = 0; c < ctx->n_choices[u]; c++) {
                size_t a = PS_CHOICE(ctx, u, c);
                if (t.mid[a] < minw[u]) minw[u] = t.mid[a];
                if (t.left[a] < minf[u]) minf[u] = t.left[a];
                if (t.right[a] < minx[u]) minx[u] = t.right[a];
            }
        }
    }
}

long long osdp_ps_min_transient_at(const osdp_ps_context *ctx, int m, const long long *mins)
{
    const osdp_ps_moment t = osdp_ps_moment_of(ctx, m);
    const int u = t.op;
    return ctx->later_acts_bound[u] + PS_MIN_MID(ctx, mins, t.forward)[u]
         + (u > 0 ? PS_MIN_LEFT(ctx, mins, t.forward)[u - 1] : 0)
         + (u + 1 < ctx->n_ops ? PS_MIN_RIGHT(ctx, mins, t.forward)[u + 1] : 0);
}

/* the smallest transient any plan has */
long long osdp_ps_min_transient(const osdp_ps_context *ctx)
{
    long long *m = malloc(sizeof *m * 6 * (size_t)ctx->n_ops), dlo = LLONG_MIN;
    if (!m) return LLONG_MIN; /* no bound */
    osdp_ps_term_minima(ctx, m);
    for (int q = 0; q < osdp_ps_n_moments(ctx); q++) {
        long long lo = osdp_ps_min_transient_at(ctx, q, m);
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

/* The planner's branch and bound over the constraints Z_u <= d for one
 * transient bound d (method and guarantee in osdp/planner.h): the knapsack
 * of each node, the check of its plan against the true Z, the branches,
 * and constraint propagation. */
#include "plan_bnb.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* a copy of A (n_ops x stride flags), NULL when out of memory */
static unsigned char *dup_allow(const osdp_ps_context *ctx, const unsigned char *A)
{
    size_t nk = (size_t)ctx->n_ops * (size_t)ctx->stride;
    unsigned char *B = malloc(nk);
    if (B) memcpy(B, A, nk);
    return B;
}

/* 1 when operator i keeps some allowed choice in A */
static int any_left(const osdp_ps_context *ctx, const unsigned char *A, int i)
{
    for (int c = 0; c < ctx->n_choices[i]; c++)
        if (A[PS_CHOICE(ctx, i, c)]) return 1;
    return 0;
}

/* Constraint propagation for one node (allowed choices A) at transient
 * bound d: Z_u is at least LB_u, the sum of each of its terms' smallest
 * allowed value (f at u-1, wp at u, nx at u+1, -acts at j >= u+2); a choice
 * whose term exceeds its smallest by more than d - LB_u is in no plan of
 * the node that respects Z_u, and goes.  Repeated until nothing changes.
 * Returns 0 when the node is empty.  mn: scratch of 7 n. */
int osdp_ps_propagate(const osdp_ps_context *ctx, unsigned char *A, long long d, long long *mn)
{
    const int n = ctx->n_ops;
    long long *mf = mn, *mw = mn + n, *mx = mn + 2 * n, *ah = mn + 3 * n, *rng = mn + 4 * n, *sa = mn + 5 * n,
              *rs = mn + 6 * n;
    for (int pass = 0, changed = 1; changed && pass < 16; pass++) {
        changed = 0;
        for (int u = 0; u < n; u++) {
            long long al = LLONG_MAX;
            mf[u] = mw[u] = mx[u] = LLONG_MAX;
            ah[u] = LLONG_MIN;
            for (int c = 0; c < ctx->n_choices[u]; c++) {
                size_t a = PS_CHOICE(ctx, u, c);
                if (!A[a]) continue;
                if (ctx->prefetch_bytes[a] < mf[u]) mf[u] = ctx->prefetch_bytes[a];
                if (ctx->pass_peak_bytes[a] < mw[u]) mw[u] = ctx->pass_peak_bytes[a];
                if (ctx->next_op_bytes[a] < mx[u]) mx[u] = ctx->next_op_bytes[a];
                if (ctx->act_bytes[a] > ah[u]) ah[u] = ctx->act_bytes[a];
                if (ctx->act_bytes[a] < al) al = ctx->act_bytes[a];
            }
            if (mw[u] == LLONG_MAX) return 0;
            rng[u] = ah[u] - al;
        }
        /* over j >= u+2: the sum of the largest acts_j, the largest range */
        long long run = 0, rmax = 0;
        for (int u = n - 1; u >= 0; u--) {
            sa[u] = run;
            rs[u] = rmax;
            if (u + 1 < n) {
                run += ah[u + 1];
                if (rng[u + 1] > rmax) rmax = rng[u + 1];
            }
        }
        for (int u = 0; u < n; u++) {
            long long slack = d - (-sa[u] + mw[u] + (u > 0 ? mf[u - 1] : 0) + (u + 1 < n ? mx[u + 1] : 0));
            if (slack < 0) return 0;
            for (int c = 0; c < ctx->n_choices[u]; c++) {
                size_t a = PS_CHOICE(ctx, u, c);
                if (A[a] && ctx->pass_peak_bytes[a] - mw[u] > slack) A[a] = 0, changed = 1;
            }
            for (int c = 0; u > 0 && c < ctx->n_choices[u - 1]; c++) {
                size_t a = PS_CHOICE(ctx, u - 1, c);
                if (A[a] && ctx->prefetch_bytes[a] - mf[u - 1] > slack) A[a] = 0, changed = 1;
            }
            for (int c = 0; u + 1 < n && c < ctx->n_choices[u + 1]; c++) {
                size_t a = PS_CHOICE(ctx, u + 1, c);
                if (A[a] && ctx->next_op_bytes[a] - mx[u + 1] > slack) A[a] = 0, changed = 1;
            }
            if (rs[u] <= slack) continue;
            for (int j = u + 2; j < n; j++) {
                if (rng[j] <= slack) continue;
                for (int c = 0; c < ctx->n_choices[j]; c++) {
                    size_t a = PS_CHOICE(ctx, j, c);
                    if (A[a] && ah[j] - ctx->act_bytes[a] > slack) A[a] = 0, changed = 1;
                }
            }
        }
    }
    return 1;
}

/* the value choice c of operator i adds to a Z: its f, nx or -acts */
enum { T_F, T_NX, T_ACTS };
static long long term_val(const osdp_ps_context *ctx, int kind, int i, int c)
{
    size_t a = PS_CHOICE(ctx, i, c);
    return kind == T_F ? ctx->prefetch_bytes[a] : kind == T_NX ? ctx->next_op_bytes[a] : -ctx->act_bytes[a];
}

/* Branch and bound over the constraints Z_u <= d (true Z) for one
 * transient bound d.  Z_u is a sum of terms, one per operator: f of u-1,
 * nx of u+1, -acts of every j >= u+2, and wp of u.  A knapsack plan P that
 * violates Z_u, with term values v_1..v_m at the other operators, is
 * excluded by the branches
 *     t = 1..m:  v_s >= v_s(P) for s < t, and v_t < v_t(P)
 *     last:      v_s >= v_s(P) for every s, and wp_u <= d - sum_s v_s(P)
 * (a term whose P value is already its smallest in the node has no branch
 * of its own); together they keep every plan of the node that respects
 * Z_u.  The knapsack optimum of a node bounds its branches from below. */
osdp_status osdp_ps_bnb(osdp_ps_context *ctx, unsigned char *base, long long d, long long lim, osdp_ps_best *best,
                        int *ch)
{
    const int n = ctx->n_ops;
    int cap = 16, sp = 0;
    unsigned char **stack = malloc(sizeof *stack * (size_t)cap);
    int *ti = malloc(sizeof *ti * 2 * (size_t)(n + 1)), *tk = ti + n + 1;
    long long *tv = malloc(sizeof *tv * (size_t)(n + 1)), *mn = malloc(sizeof *mn * 7 * (size_t)n);
    if (!stack || !ti || !tv || !mn) {
        free(stack); free(ti); free(tv); free(mn);
        return osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
    }
    stack[sp++] = base;
    osdp_status s = OSDP_OK;
    const double lam = ctx->minimise_memory ? (double)d : 0.0;
    while (sp > 0 && s == OSDP_OK) {
        unsigned char *A = stack[--sp];
        double obj;
        osdp_status ks;
        if (!osdp_ps_beats(ctx, best, osdp_ps_lp_bound(ctx, A, lim) + lam)) ks = OSDP_ERR_INFEASIBLE; /* bounded out */
        else ks = osdp_ps_knapsack(ctx, A, lim, osdp_ps_cap(ctx, best) - lam, ch, &obj);
        int u = -1;
        if (ks == OSDP_OK && osdp_ps_beats(ctx, best, obj + lam)) {
            u = osdp_ps_transient_scan(ctx, ch, d, NULL);
            if (u < 0) osdp_ps_offer(ctx, best, ch, obj + lam);
        } else if (ks != OSDP_OK && ks != OSDP_ERR_INFEASIBLE) {
            s = ks;
        }
        if (u < 0) {
            if (A != base) free(A);
            continue;
        }
        /* Z_0 has no f term (no operator before the first); it exceeds d through the wrap moment's pairing
         * (osdp_ps_transient_scan) when its own sum does not: then its terms are the last operator's f
         * besides nx and the acts, and operator 0's first-pass peak in place of its wp */
        int wrap = 0;
        if (u == 0 && ctx->wrap_first_pass) {
            long long z = ctx->pass_peak_bytes[PS_CHOICE(ctx, 0, ch[0])];
            for (int j = 1; j < n; j++) z += term_val(ctx, j == 1 ? T_NX : T_ACTS, j, ch[j]);
            wrap = z <= d;
        }
        /* the terms of Z_u; those with a branch of their own first */
        long long room = d;
        int nt = 0;
        for (int j = u > 0 ? u - 1 : 0; j <= n; j++) {
            if (j == u || (j == n && !wrap)) continue;
            const int op = j < n ? j : n - 1;   /* j == n: the wrap's f of the last operator */
            int kind = j == n || j == u - 1 ? T_F : j == u + 1 ? T_NX : T_ACTS;
            long long v = term_val(ctx, kind, op, ch[op]);
            room -= v;
            int lower = 0;
            for (int c = 0; c < ctx->n_choices[op] && !lower; c++)
                lower = A[PS_CHOICE(ctx, op, c)] && term_val(ctx, kind, op, c) < v;
            if (lower) {
                ti[nt] = op;
                tk[nt] = kind;
                tv[nt++] = v;
            }
        }
        if (sp + nt + 1 > cap) {
            unsigned char **ns = realloc(stack, sizeof *stack * (size_t)(2 * cap + nt + 1));
            if (!ns) {
                if (A != base) free(A);
                s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
                break;
            }
            stack = ns;
            cap = 2 * cap + nt + 1;
        }
        /* pushed last branch first, so that branch 1 is searched first */
        for (int t = nt; t >= 0 && s == OSDP_OK; t--) {
            unsigned char *B = dup_allow(ctx, A);
            if (!B) {
                s = osdp_error_set(OSDP_ERR_OOM, "planner: out of host memory");
                break;
            }
            int ok = 1;
            for (int q = 0; q <= t && q < nt && ok; q++) {
                const int j = ti[q];
                for (int c = 0; c < ctx->n_choices[j]; c++)
                    if ((term_val(ctx, tk[q], j, c) < tv[q]) != (q == t)) B[PS_CHOICE(ctx, j, c)] = 0;
                ok = any_left(ctx, B, j);
            }
            if (t == nt && ok) {
                for (int c = 0; c < ctx->n_choices[u]; c++)
                    if ((wrap ? ctx->wrap_first_pass[c] : ctx->pass_peak_bytes[PS_CHOICE(ctx, u, c)]) > room)
                        B[PS_CHOICE(ctx, u, c)] = 0;
                ok = any_left(ctx, B, u);
            }
            if (ok) ok = osdp_ps_propagate(ctx, B, d, mn);
            if (ok) stack[sp++] = B;
            else free(B);
        }
        if (A != base) free(A);
    }
    while (sp > 0) {
        unsigned char *A = stack[--sp];
        if (A != base) free(A);
    }
    free(stack); free(ti); free(tv); free(mn);
    return s;
}

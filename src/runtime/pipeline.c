/* Stages and the order of their passes (see osdp/pipeline.h). */
#include "osdp/pipeline.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *osdp_pipe_schedule_name(osdp_pipe_schedule kind)
{
    return kind == OSDP_PIPE_GPIPE ? "gpipe" : kind == OSDP_PIPE_INTERLEAVED ? "interleaved" : "1f1b";
}

osdp_status osdp_pipe_schedule_parse(const char *text, osdp_pipe_schedule *kind)
{
    if (text && strcmp(text, "1f1b") == 0) *kind = OSDP_PIPE_1F1B;
    else if (text && strcmp(text, "gpipe") == 0) *kind = OSDP_PIPE_GPIPE;
    else if (text && strcmp(text, "interleaved") == 0) *kind = OSDP_PIPE_INTERLEAVED;
    else return osdp_error_set(OSDP_ERR_INPUT, "--schedule %s: expected gpipe, 1f1b or interleaved", text ? text : "(none)");
    return OSDP_OK;
}

static int warmup(osdp_pipe_schedule kind, int P, int s, int M)
{
    if (kind == OSDP_PIPE_GPIPE) return M;
    return P - 1 - s < M ? P - 1 - s : M;
}

/* interleaved: the warm-up forwards of stage s (Megatron-LM's) */
static int warmup_chunks(int P, int V, int s, int M)
{
    if (M == P) return V * M;   /* every forward first: the steady phase would wait on itself */
    const int w = 2 * (P - 1 - s) + (V - 1) * P;
    return w < V * M ? w : V * M;
}

/* virtual pass k of stage s (interleaved): groups of P micro-batches, chunk by chunk */
static osdp_pipe_pass virtual_pass(int P, int V, int k, int backward)
{
    const int in_group = k % (P * V), chunk = in_group / P;
    return (osdp_pipe_pass){.micro = k / (P * V) * P + k % P, .backward = backward,
                            .chunk = backward ? V - 1 - chunk : chunk};
}

void osdp_pipe_order_chunks(osdp_pipe_schedule kind, int P, int V, int s, int M, osdp_pipe_pass *out)
{
    if (kind != OSDP_PIPE_INTERLEAVED || V <= 1) {
        /* one chunk: interleaved 1F1B is 1F1B (w = P - 1 - s) */
        const int w = warmup(kind == OSDP_PIPE_INTERLEAVED ? OSDP_PIPE_1F1B : kind, P, s, M);
        int n = 0;
        for (int m = 0; m < w; m++) out[n++] = (osdp_pipe_pass){m, 0, 0};
        for (int j = 0; j < M; j++) {
            if (w + j < M) out[n++] = (osdp_pipe_pass){w + j, 0, 0};
            out[n++] = (osdp_pipe_pass){j, 1, 0};
        }
        return;
    }
    const int total = V * M, w = warmup_chunks(P, V, s, M);
    int n = 0;
    for (int k = 0; k < w; k++) out[n++] = virtual_pass(P, V, k, 0);
    for (int j = 0; j < total; j++) {
        if (w + j < total) out[n++] = virtual_pass(P, V, w + j, 0);
        out[n++] = virtual_pass(P, V, j, 1);
    }
}

void osdp_pipe_order(osdp_pipe_schedule kind, int P, int s, int M, osdp_pipe_pass *out)
{
    osdp_pipe_order_chunks(kind, P, 1, s, M, out);
}

osdp_status osdp_pipe_check(osdp_pipe_schedule kind, int P, int V, int M, int n_ops)
{
    if (V < 1) return osdp_error_set(OSDP_ERR_INPUT, "--virtual-stages %d: give at least 1 model chunk per stage", V);
    if (kind != OSDP_PIPE_INTERLEAVED) {
        if (V > 1)
            return osdp_error_set(OSDP_ERR_INPUT, "--virtual-stages %d needs --schedule interleaved (%s runs one chunk "
                                  "per stage)", V, osdp_pipe_schedule_name(kind));
        return OSDP_OK;
    }
    if (P < 2)
        return osdp_error_set(OSDP_ERR_INPUT, "--schedule interleaved needs a pipeline: --pp P with P > 1");
    if ((long long)P * V > OSDP_MAX_CHUNKS)
        return osdp_error_set(OSDP_ERR_INPUT, "--pp %d x --virtual-stages %d: %d model chunks, at most %d", P, V, P * V,
                              OSDP_MAX_CHUNKS);
    if (n_ops > 0 && P * V > n_ops)
        return osdp_error_set(OSDP_ERR_INPUT, "--pp %d x --virtual-stages %d: %d model chunks for a model of %d "
                              "operators (every chunk holds at least one)", P, V, P * V, n_ops);
    if (M % P != 0)
        return osdp_error_set(OSDP_ERR_INPUT, "--schedule interleaved: %d micro-batches per step is not a multiple of "
                              "--pp %d (Megatron-LM's interleaved 1F1B runs micro-batches in groups of P): choose "
                              "--global-batch / --batch so that the accumulation steps are a multiple of %d", M, P, P);
    return OSDP_OK;
}

int osdp_pipe_chunk_of(const int *bounds, int n_chunks, int op)
{
    int c = 0;
    while (c + 1 < n_chunks && op >= bounds[c + 1]) c++;
    return c;
}

int osdp_pipe_in_flight(osdp_pipe_schedule kind, int P, int s, int M)
{
    const int w = warmup(kind, P, s, M);
    return w < M ? w + 1 : M;
}

int osdp_pipe_after_backward(osdp_pipe_schedule kind, int P, int s, int M)
{
    const int most = osdp_pipe_in_flight(kind, P, s, M);
    osdp_pipe_pass *order = malloc(sizeof *order * 2 * (size_t)M);
    if (!order) return OSDP_PIPE_THEN_FORWARD | OSDP_PIPE_THEN_BACKWARD;   /* the bound: both */
    osdp_pipe_order(kind, P, s, M, order);
    int held = 0, then = 0;
    for (int q = 0; q < 2 * M; q++) {
        if (!order[q].backward) {
            held++;
            continue;
        }
        if (held == most && q + 1 < 2 * M) then |= order[q + 1].backward ? OSDP_PIPE_THEN_BACKWARD : OSDP_PIPE_THEN_FORWARD;
        held--;
    }
    free(order);
    return then;
}

int osdp_pipe_in_flight_chunks(osdp_pipe_schedule kind, int P, int V, int s, int M)
{
    if (V <= 1) return osdp_pipe_in_flight(kind, P, s, M);
    osdp_pipe_pass *order = malloc(sizeof *order * 2 * (size_t)V * (size_t)M);
    if (!order) return V * M;   /* the bound: every pass in flight */
    osdp_pipe_order_chunks(kind, P, V, s, M, order);
    int held = 0, most = 0;
    for (int q = 0; q < 2 * V * M; q++) {
        held += order[q].backward ? -1 : 1;
        if (held > most) most = held;
    }
    free(order);
    return most;
}

double osdp_pipe_bubble_chunks(int P, int V, int M)
{
    const double ideal = (double)V * M;
    return ideal + P - 1 > 0 ? (double)(P - 1) / (ideal + P - 1) : 0.0;
}

double osdp_pipe_bubble(int P, int M)
{
    return osdp_pipe_bubble_chunks(P, 1, M);
}

static osdp_status split_error(const char *text, const char *why)
{
    return osdp_error_set(OSDP_ERR_INPUT, "--stages %s: %s", text, why);
}

static int parse_int(const char **p, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(*p, &end, 10);
    if (end == *p || errno || v < 0 || v > INT_MAX) return 0;
    *out = (int)v;
    *p = end;
    return 1;
}

/* P V ranges into bounds: chunk c of stage c mod P (V = 1: stage s), the errors in those words */
static osdp_status split_parse(const char *text, int n_ops, int P, int V, int *bounds)
{
    const int n = P * V;
    const char *unit = V > 1 ? "chunk" : "stage";
    char of[96];   /* "the 4 stages of --pp 4", "the 8 chunks of --pp 4 x --virtual-stages 2" */
    if (V > 1) snprintf(of, sizeof of, "the %d chunks of --pp %d x --virtual-stages %d", n, P, V);
    else snprintf(of, sizeof of, "the %d stages of --pp %d", P, P);
    const char *p = text;
    int s = 0, prev_hi = 0;
    bounds[0] = 0;
    while (*p) {
        int lo, hi;
        if (!parse_int(&p, &lo) || *p++ != ':' || !parse_int(&p, &hi))
            return split_error(text, "expected ranges of operators LO:HI separated by commas (e.g. 0:13,13:26)");
        if (s == n) {
            char why[160];
            snprintf(why, sizeof why, "more ranges than %s", of);
            return split_error(text, why);
        }
        if (lo != prev_hi) {
            char why[160];
            snprintf(why, sizeof why, "%s %d starts at operator %d, where %s %d ended at %d (ranges must be contiguous "
                     "from 0)", unit, s, lo, unit, s - 1, prev_hi);
            return split_error(text, why);
        }
        if (hi <= lo) {
            char why[96];
            snprintf(why, sizeof why, "%s %d's range %d:%d is empty", unit, s, lo, hi);
            return split_error(text, why);
        }
        bounds[++s] = prev_hi = hi;
        if (*p == ',' && !p[1]) return split_error(text, "a trailing ',' (a comma goes between ranges only)");
        if (*p == ',') p++;
        else if (*p) return split_error(text, "expected ',' between ranges");
    }
    if (s != n) {
        char why[160];
        snprintf(why, sizeof why, "%d range%s for %s", s, s == 1 ? "" : "s", of);
        return split_error(text, why);
    }
    if (prev_hi != n_ops) {
        char why[96];
        snprintf(why, sizeof why, "the ranges end at operator %d, the model has %d", prev_hi, n_ops);
        return split_error(text, why);
    }
    return OSDP_OK;
}

osdp_status osdp_stage_split_parse(const char *text, int n_ops, int P, int *bounds)
{
    if (P < 1 || P > OSDP_MAX_STAGES)
        return osdp_error_set(OSDP_ERR_INPUT, "--pp %d: the pipeline degree must be between 1 and %d", P, OSDP_MAX_STAGES);
    return split_parse(text, n_ops, P, 1, bounds);
}

osdp_status osdp_chunk_split_parse(const char *text, int n_ops, int P, int V, int *bounds)
{
    if (V <= 1) return osdp_stage_split_parse(text, n_ops, P, bounds);
    if (P < 1 || (long long)P * V > OSDP_MAX_CHUNKS)
        return osdp_error_set(OSDP_ERR_INPUT, "--pp %d x --virtual-stages %d: %lld model chunks, at most %d", P, V,
                              (long long)P * V, OSDP_MAX_CHUNKS);
    return split_parse(text, n_ops, P, V, bounds);
}

const char *osdp_stage_split_format(const int *bounds, int P, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int s = 0; s < P && used < n; s++)
        used += (size_t)snprintf(buf + used, n - used, "%s%d:%d", s ? "," : "", bounds[s], bounds[s + 1]);
    return buf;
}

osdp_status osdp_stage_split_balanced(const double *op_cost, int n_ops, int P, int *bounds)
{
    if (P < 1 || P > OSDP_MAX_CHUNKS || P > n_ops)
        return osdp_error_set(OSDP_ERR_INPUT, "--pp %d: a model of %d operators can have between 1 and %d stages", P,
                              n_ops, n_ops < OSDP_MAX_CHUNKS ? n_ops : OSDP_MAX_CHUNKS);
    /* best[k][i]: the smallest largest-stage cost of operators [0, i) in k stages;
     * cut[k][i]: where the k-th stage starts in it */
    const size_t w = (size_t)n_ops + 1;
    double *prefix = malloc(sizeof *prefix * w), *best = malloc(sizeof *best * w * (size_t)(P + 1));
    int *cut = malloc(sizeof *cut * w * (size_t)(P + 1));
    if (!prefix || !best || !cut) {
        free(prefix), free(best), free(cut);
        return osdp_error_set(OSDP_ERR_OOM, "stage split: out of host memory");
    }
    prefix[0] = 0;
    for (int i = 0; i < n_ops; i++) prefix[i + 1] = prefix[i] + op_cost[i];
    for (int i = 0; i <= n_ops; i++) best[i] = i == 0 ? 0 : -1;   /* k = 0 */
    /* Only the entries the answer reads: k stages end at i >= k (each holds one operator at least) and leave
     * n_ops - i >= P - k operators for the rest (k = P: i = n_ops alone).  Costs are not negative, so
     * best[k - 1][j] does not fall as j grows: once it reaches the best so far, no later j beats it (ties keep
     * the earliest). */
    for (int k = 1; k <= P; k++)
        for (int i = k; i <= (k == P ? n_ops : n_ops - (P - k)); i++) {
            double *b = &best[(size_t)k * w + (size_t)i];
            *b = -1;
            for (int j = k - 1; j < i; j++) {   /* stage k: operators [j, i) */
                const double before = best[(size_t)(k - 1) * w + (size_t)j];
                if (before < 0) continue;
                if (*b >= 0 && before >= *b) break;
                const double stage = prefix[i] - prefix[j], worst = before > stage ? before : stage;
                if (*b < 0 || worst < *b) {
                    *b = worst;
                    cut[(size_t)k * w + (size_t)i] = j;
                }
            }
        }
    bounds[P] = n_ops;
    for (int k = P; k >= 1; k--) bounds[k - 1] = cut[(size_t)k * w + (size_t)bounds[k]];
    free(prefix), free(best), free(cut);
    return OSDP_OK;
}

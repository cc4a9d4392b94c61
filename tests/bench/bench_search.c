/* Plan-search benchmark: the exact method against the paper's DFS on
 * GPT-shaped instances (N&D: narrow and deep, W&S: wide and shallow, I&C:
 * inconsecutive widths) and on random ones.  A standalone program:
 *
 *   bench_search [dfs_timeout_s]      (default 60)
 *
 * The cost model is rough on purpose (this measures the search, not the
 * model): 8 devices; per operator with P parameters, DP keeps 16 bytes per
 * parameter (fp32 weights, gradients, two AdamW moments) and ZDP 16/8;
 * every operator also holds its saved activations.  Time = compute
 * (6 P tokens / 100 TFLOP/s) + DP all-reduce (2 (N-1)/N x 2P bytes) or ZDP
 * all-gather x2 + reduce-scatter (3 (N-1)/N x 2P bytes) at 100 GB/s, plus
 * 10 us per collective step.  k = 2: DP or ZDP; k = 5: the operator split in
 * 4 slices, c of them ZDP (slices pay 3% compute overhead and their own
 * latencies).  Instances, each for k = 2 and k = 5: N&D 96 layers of width
 * 1536; W&S 2 and 4 layers of width 8192; I&C 48 layers cycling widths
 * 1024/2048/4096 (9 distinct operators); I&C 96 layers of 96 distinct
 * widths (every operator distinct); random correlated (all distinct, time
 * roughly proportional to the bytes saved, +-20%) and random uncorrelated
 * (all distinct, memory and time independent).  Limits near 8 and 16 GB
 * (12 GB where 8 does not fit).  "agree": the DFS (when it finished) chose
 * the same vector as the exact method. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/search.h"

typedef struct inst {
    int n, k;
    int *nk;
    long long **m;
    double **t;
} inst;

static unsigned long long g_rng = 12345;
static double rnd_unit(void)
{
    unsigned long long z = (g_rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

static void *xcalloc(size_t n, size_t s)
{
    void *p = calloc(n ? n : 1, s);
    if (!p) {
        fprintf(stderr, "bench_search: out of memory\n");
        exit(1);
    }
    return p;
}

static void inst_alloc(inst *I, int n, int k)
{
    I->n = n;
    I->k = k;
    I->nk = xcalloc((size_t)n, sizeof *I->nk);
    I->m = xcalloc((size_t)n, sizeof *I->m);
    I->t = xcalloc((size_t)n, sizeof *I->t);
    for (int i = 0; i < n; i++) {
        I->nk[i] = k;
        I->m[i] = xcalloc((size_t)k, sizeof **I->m);
        I->t[i] = xcalloc((size_t)k, sizeof **I->t);
    }
}

static void inst_free(inst *I)
{
    for (int i = 0; i < I->n; i++) {
        free(I->m[i]);
        free(I->t[i]);
    }
    free(I->nk);
    free(I->m);
    free(I->t);
}

/* one operator of P parameters with `act` bytes of activations */
static void gpt_op(inst *I, int i, double P, double act)
{
    const double tokens = 8 * 1024, ndev = 8, bw = 100e9, alpha = 10e-6, flops = 100e12;
    double comp = 6 * P * tokens / flops;
    double dp = 2 * (ndev - 1) / ndev * 2 * P / bw, zdp = 3 * (ndev - 1) / ndev * 2 * P / bw;
    int k = I->k;
    double sl = k == 2 ? 1 : 4;
    for (int c = 0; c < k; c++) {
        double f = (double)c / (k - 1);
        I->m[i][c] = (long long)(16 * P * (1 - f) + 16 * P / ndev * f + act);
        I->t[i][c] = comp * (k == 2 ? 1.0 : 1.03) + (1 - f) * dp + f * zdp +
                     alpha * (2 * (ndev - 1) * sl * (1 - f) + 3 * (ndev - 1) * sl * f);
    }
}

/* GPT with per-block widths w[0..L-1] (attn of a block whose width differs
 * from the previous one carries an input projection) */
static void gpt(inst *I, int L, const int *w, int k)
{
    const double V = 50257, T = 1024;
    inst_alloc(I, 2 * L + 2, k);
    gpt_op(I, 0, (V + T) * w[0], T * w[0] * 2);
    for (int b = 0; b < L; b++) {
        double d = w[b], proj = b > 0 && w[b - 1] != w[b] ? (double)w[b - 1] * d + d : 0;
        gpt_op(I, 1 + 2 * b, 4 * d * d + 6 * d + proj, T * d * 4);
        gpt_op(I, 2 + 2 * b, 8 * d * d + 7 * d, T * d * 6);
    }
    gpt_op(I, 2 * L + 1, V * w[L - 1] + 2 * w[L - 1], T * w[L - 1] * 2);
}

/* random, all items distinct: DP bytes in [1e6, 5e8], ZDP an eighth of it,
 * time grows with saved bytes plus noise (correlated), or everything
 * uniform and unrelated (uncorrelated) */
static void random_inst(inst *I, int n, int k, int correlated)
{
    inst_alloc(I, n, k);
    for (int i = 0; i < n; i++) {
        double base = 1e6 + rnd_unit() * 5e8, t0 = 1e-3 + 1e-2 * rnd_unit();
        for (int c = 0; c < k; c++) {
            double f = (double)c / (k - 1);
            if (correlated) {
                I->m[i][c] = (long long)(base * (1 - 0.875 * f));
                I->t[i][c] = t0 + f * base * 1.5e-11 * (1 + 0.2 * rnd_unit());
            } else {
                I->m[i][c] = (long long)(1e6 + rnd_unit() * 1e8);
                I->t[i][c] = 1e-3 + rnd_unit() * 1e-2;
            }
        }
    }
}

static int count_groups(const inst *I)
{
    int g = 0;
    for (int i = 0; i < I->n; i++) {
        int j = 0;
        for (; j < i; j++)
            if (I->nk[i] == I->nk[j] && !memcmp(I->m[i], I->m[j], sizeof *I->m[i] * (size_t)I->nk[i]) &&
                !memcmp(I->t[i], I->t[j], sizeof *I->t[i] * (size_t)I->nk[i]))
                break;
        g += j == i;
    }
    return g;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static double g_dfs_timeout = 60;

static void run(const char *name, inst *I, double limit)
{
    osdp_search_problem p = {I->n, I->nk, (const long long *const *)I->m, (const double *const *)I->t,
                             (long long)limit, 0};
    int *ce = xcalloc((size_t)I->n, sizeof *ce), *cd = xcalloc((size_t)I->n, sizeof *cd);
    osdp_search_result re = {.choice = ce}, rd = {.choice = cd};
    /* exact: the best of repeated runs (about 200 ms in all, at least 3 runs
     * unless one takes longer than that) */
    double best = 1e300, start = now_ms();
    osdp_status se = OSDP_OK;
    for (int rep = 0; rep < 1000 && (rep < 3 || now_ms() - start < 200) && !(rep > 0 && best > 200); rep++) {
        double t0 = now_ms();
        se = osdp_search_exact(&p, &re);
        double dt = now_ms() - t0;
        if (dt < best) best = dt;
        if (se != OSDP_OK) break;
    }
    printf("%-20s %4d %2d %6d %6.1f  ", name, I->n, I->k, count_groups(I), limit / 1e9);
    if (se != OSDP_OK) {
        if (se == OSDP_ERR_INFEASIBLE) printf("infeasible: every plan needs >= %.2f GB\n", (double)re.min_mem / 1e9);
        else printf("%s\n", osdp_error_message());
        free(ce);
        free(cd);
        return;
    }
    printf("%9.3f %10lld  ", best, re.nodes);
    fflush(stdout);
    p.time_limit_s = g_dfs_timeout;
    double t0 = now_ms();
    osdp_status sd = osdp_search_dfs(&p, &rd);
    double dt = now_ms() - t0;
    char buf[32];
    if (sd != OSDP_OK) snprintf(buf, sizeof buf, "error");
    else if (rd.timed_out) snprintf(buf, sizeof buf, "timeout >%gs", g_dfs_timeout);
    else snprintf(buf, sizeof buf, "%.3f", dt);
    const char *agree = sd != OSDP_OK || rd.timed_out ? "-" : memcmp(ce, cd, sizeof *ce * (size_t)I->n) ? "NO" : "yes";
    printf("%14s %12lld  %5s  %.6f s %6.2f GB\n", buf, rd.nodes, agree, re.total_time, (double)re.total_mem / 1e9);
    fflush(stdout);
    free(ce);
    free(cd);
}

int main(int argc, char **argv)
{
    if (argc > 1) g_dfs_timeout = atof(argv[1]);
    int w[96];
    inst I;
    printf("%-20s %4s %2s %6s %6s  %9s %10s  %14s %12s  %5s  %s\n", "instance", "n", "k", "groups", "limit",
           "exact ms", "states", "dfs ms", "dfs nodes", "agree", "optimum (time, memory)");
    printf("%-20s %4s %2s %6s %6s\n", "", "", "", "", "(GB)");
    for (int k = 2; k <= 5; k += 3) {
        for (int i = 0; i < 96; i++) w[i] = 1536;
        gpt(&I, 96, w, k);
        run("N&D 96x1536", &I, 8e9);
        run("N&D 96x1536", &I, 16e9);
        inst_free(&I);
        for (int L = 2; L <= 4; L += 2) {
            for (int i = 0; i < L; i++) w[i] = 8192;
            gpt(&I, L, w, k);
            run(L == 2 ? "W&S 2x8192" : "W&S 4x8192", &I, L == 2 ? 8e9 : 12e9);
            run(L == 2 ? "W&S 2x8192" : "W&S 4x8192", &I, 16e9);
            inst_free(&I);
        }
        for (int i = 0; i < 48; i++) w[i] = i % 3 == 0 ? 1024 : i % 3 == 1 ? 2048 : 4096;
        gpt(&I, 48, w, k);
        run("I&C 48x{1,2,4}K", &I, 12e9);
        run("I&C 48x{1,2,4}K", &I, 16e9);
        inst_free(&I);
        for (int i = 0; i < 96; i++) w[i] = 1024 + 16 * ((i * 37) % 96);
        gpt(&I, 96, w, k);
        run("I&C 96 distinct", &I, 12e9);
        run("I&C 96 distinct", &I, 16e9);
        inst_free(&I);
        random_inst(&I, 194, k, 1);
        run("random correlated", &I, 8e9);
        run("random correlated", &I, 16e9);
        inst_free(&I);
        random_inst(&I, 194, k, 0);
        run("random uncorrelated", &I, 8e9);
        run("random uncorrelated", &I, 12e9);
        inst_free(&I);
    }
    return 0;
}

/* Tests for the planner (src/planner/{device,cost_model,planner}.c):
 * device files and their errors, the time formula by hand, the peak model
 * against the runtime's own accounting, the planner against brute force
 * over every plan (true peak from osdp_memory_predict), dfs = exact on the
 * paper's families, the infeasible message, and the scheduler. */
#include "config.h"

#include "check_main.h"

#include <check.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/planner.h"
#include "osdp/runtime.h"

#include "test_inputs.h"

/* a CPU-like device whose communication is expensive enough that ZDP costs */
static osdp_device test_device(long long limit)
{
    osdp_device d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "test");
    d.mem_limit = limit;
    d.param_bytes = d.grad_bytes = d.act_bytes = 4;
    d.all_gather = (osdp_collective_cost){.alpha = 2e-5, .beta = 1e-9};
    d.reduce_scatter = (osdp_collective_cost){.alpha = 3e-5, .beta = 1.5e-9};
    for (int t = 0; t < OSDP_N_OP_TYPES; t++) d.gamma[t] = (1 + 0.3 * t) * 2e-11;
    return d;
}

/* ------------------------------------------------------------------------ */
/* device files                                                              */

static const char *GOOD =
    "; comment\n[device]\nname = t\nmem_limit = 8G\nprecision = bf16\nact_bytes = 2\n"
    "[all_gather]\nalpha = 1e-5\nbeta = 2e-10\n[reduce_scatter]\nalpha = 3e-5\nbeta = 4e-10\n"
    "[gamma]\nembed = 1e-12\nattn = 2e-12\nmlp = 3e-12\nhead = 4e-12\n";

START_TEST(test_device_parse)
{
    osdp_device d;
    ck_assert_msg(osdp_device_parse(&d, GOOD, "good.ini") == OSDP_OK, "%s", osdp_error_message());
    ck_assert_str_eq(d.name, "t");
    ck_assert(d.mem_limit == 8LL << 30);
    ck_assert_int_eq(d.param_bytes, 2);
    ck_assert_int_eq(d.grad_bytes, 2);   /* as the weights when not given */
    ck_assert_int_eq(d.act_bytes, 2);
    ck_assert(d.all_gather.alpha == 1e-5 && d.all_gather.beta == 2e-10);
    ck_assert(d.reduce_scatter.alpha == 3e-5 && d.reduce_scatter.beta == 4e-10);
    ck_assert(d.gamma[OSDP_OP_EMBED] == 1e-12 && d.gamma[OSDP_OP_HEAD] == 4e-12);
    /* every shipped device file reads */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/input/devices", src_dir());
    DIR *dp = opendir(dir);
    ck_assert_msg(dp != NULL, "no %s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(dp));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".ini") != 0) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ck_assert_msg(osdp_device_load(&d, path) == OSDP_OK, "%s", osdp_error_message());
        n++;
    }
    closedir(dp);
    ck_assert_int_ge(n, 6);
    /* write and read back */
    char tmp[] = "/tmp/osdp_test_device_XXXXXX";
    int fd = mkstemp(tmp);
    ck_assert(fd >= 0);
    ck_assert(osdp_device_parse(&d, GOOD, "good.ini") == OSDP_OK);
    ck_assert_msg(osdp_device_write(&d, "line one\nline two", tmp) == OSDP_OK, "%s", osdp_error_message());
    osdp_device e;
    ck_assert_msg(osdp_device_load(&e, tmp) == OSDP_OK, "%s", osdp_error_message());
    ck_assert(e.mem_limit == d.mem_limit && e.param_bytes == 2 && e.grad_bytes == 2 && e.act_bytes == 2);

    ck_assert(fabs(e.reduce_scatter.beta / d.reduce_scatter.beta - 1) < 1e-6);
    ck_assert(fabs(e.gamma[2] / d.gamma[2] - 1) < 1e-6);
    /* a comment line longer than a device file's line may be (the profiler's notes on emulated nodes of one
     * rank): written over several comment lines, every word kept, and the file reads back */
    char long_note[700] = "first line\n", *w = long_note + strlen(long_note);
    for (int i = 0; i < 60; i++) w += sprintf(w, "word%02d ", i);
    w += sprintf(w, "%s", "\nlast line");
    ck_assert_msg(osdp_device_write(&d, long_note, tmp) == OSDP_OK, "%s", osdp_error_message());
    ck_assert_msg(osdp_device_load(&e, tmp) == OSDP_OK, "%s", osdp_error_message());
    FILE *f = fopen(tmp, "r");
    ck_assert(f != NULL);
    char line[512];
    int words = 0, comments = 0;
    while (fgets(line, sizeof line, f)) {
        ck_assert_int_lt(strlen(line), 200);
        if (line[0] != ';') continue;
        comments++;
        for (const char *q = line; (q = strstr(q, "word")) != NULL; q += 4) words++;
    }
    fclose(f);
    ck_assert_int_eq(words, 60);
    ck_assert_int_ge(comments, 4);   /* first, the words over two lines or more, last */
    remove(tmp);
}
END_TEST

/* GOOD with line `from` replaced by `to` ("" removes it) */
static void edit(char *out, size_t n, const char *from, const char *to)
{
    const char *p = strstr(GOOD, from);
    ck_assert(p != NULL);
    snprintf(out, n, "%.*s%s%s", (int)(p - GOOD), GOOD, to, p + strlen(from));
}

START_TEST(test_device_errors)
{
    static const struct { const char *from, *to, *expect[3]; } cases[] = {
        {"mem_limit = 8G\n", "", {"missing key 'mem_limit'", "[device]", NULL}},
        {"beta = 2e-10\n", "", {"missing key 'beta'", "[all_gather]", NULL}},
        {"alpha = 3e-5\n", "", {"missing key 'alpha'", "[reduce_scatter]", NULL}},
        {"mlp = 3e-12\n", "", {"missing key 'mlp'", "[gamma]", NULL}},
        {"beta = 2e-10\n", "beta = 0\n", {"beta", "bandwidth", "[all_gather]"}},
        {"beta = 4e-10\n", "beta = -4e-10\n", {"beta", "bandwidth", "[reduce_scatter]"}},
        {"mem_limit = 8G\n", "mem_limit = 0\n", {"mem_limit", "positive", NULL}},
        {"mem_limit = 8G\n", "mem_limit = -8G\n", {"mem_limit", NULL, NULL}},
        {"alpha = 1e-5\n", "alpha = -1e-5\n", {"alpha", ">= 0", NULL}},
        {"attn = 2e-12\n", "attn = 0\n", {"attn", "gamma", NULL}},
        {"head = 4e-12\n", "head = fast\n", {"head", "fast", NULL}},
        {"precision = bf16\n", "precision = int8\n", {"precision", "int8", NULL}},
        {"act_bytes = 2\n", "act_bytes = 3\n", {"act_bytes", NULL, NULL}},
        {"act_bytes = 2\n", "grad_bytes = 8\nact_bytes = 2\n", {"grad_bytes", "2 or 4", NULL}},
        {"name = t\n", "nmae = t\n", {"unknown key 'nmae'", NULL, NULL}},
        {"[gamma]\n", "[gama]\n", {"unknown section [gama]", NULL, NULL}},
        {"name = t\n", "name = t\nthis is not ini\n", {"malformed", ":4", NULL}},
        {"beta = 2e-10\n", "beta = 2e-10\nbeta = 2e-10\n", {"twice", NULL, NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048];
        osdp_device d;
        edit(text, sizeof text, cases[i].from, cases[i].to);
        osdp_status s = osdp_device_parse(&d, text, "bad.ini");
        const char *msg = osdp_error_message();
        ck_assert_msg(s == OSDP_ERR_INPUT, "case %zu: status %d (%s)", i, s, msg);
        ck_assert_msg(strstr(msg, "bad.ini") != NULL, "case %zu: '%s' does not name the file", i, msg);
        for (int k = 0; k < 3 && cases[i].expect[k]; k++)
            ck_assert_msg(strstr(msg, cases[i].expect[k]) != NULL, "case %zu: '%s' lacks '%s'", i, msg,
                          cases[i].expect[k]);
    }
    osdp_device d;
    ck_assert(osdp_device_load(&d, "/nonexistent/dev.ini") == OSDP_ERR_IO);
    /* grad_bytes apart from the weights' size */
    char text[2048];
    edit(text, sizeof text, "act_bytes = 2\n", "grad_bytes = 4\nact_bytes = 2\n");
    ck_assert_msg(osdp_device_parse(&d, text, "g4.ini") == OSDP_OK, "%s", osdp_error_message());
    ck_assert(d.param_bytes == 2 && d.grad_bytes == 4 && d.act_bytes == 2);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* the cost model                                                            */

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)); }

START_TEST(test_cost_time_by_hand)
{
    osdp_layout L;
    load_layout(&L, "tiny", 0);
    osdp_device d;
    ck_assert(osdp_device_parse(&d, GOOD, "good.ini") == OSDP_OK);
    const int N = 4, b = 3, op = 2; /* mlp.0 */
    ck_assert_str_eq(L.op[op].name, "mlp.0");
    const double dd = L.op[op].width, T = L.T;
    /* mlp: ln_2 (2d) + fc (d x 4d + 4d) + proj (4d x d + d) */
    size_t numel = (size_t)(2 * dd + 4 * dd * dd + 4 * dd + 4 * dd * dd + dd);
    ck_assert_uint_eq(L.op[op].numel, numel);
    size_t padded = (numel + 3) / 4 * 4;
    double S = 2.0 * (double)padded;                         /* bf16 bytes */
    double ag = 3 * (1e-5 + S / 4 * 2e-10), rs = 3 * (3e-5 + S / 4 * 4e-10);
    double compute = b * T * 3 * (16 * dd * dd) * 3e-12;     /* fwd+bwd = 3 x 2 x (d*4d + 4d*d) per token */
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = N, .prefetch = 1}, OSDP_COST_PAPER, NULL);
    osdp_op_time t;
    osdp_cost_op_time(&cm, op, 1, 0, b, 1, &t);
    ck_assert_msg(close_rel(t.compute, compute, 1e-12), "compute %g vs %g", t.compute, compute);
    ck_assert(close_rel(t.comm, ag + rs, 1e-12));
    ck_assert(close_rel(t.total, compute + ag + rs, 1e-12));
    osdp_cost_op_time(&cm, op, 1, 1, b, 1, &t);
    ck_assert(close_rel(t.comm, 2 * ag + rs, 1e-12));
    ck_assert(close_rel(t.total, compute + 2 * ag + rs, 1e-12));
    /* accumulation: DP gathers once per step, ZDP twice per micro-step */
    osdp_cost_op_time(&cm, op, 1, 0, b, 2, &t);
    ck_assert(close_rel(t.comm, ag + 2 * rs, 1e-12) && close_rel(t.compute, 2 * compute, 1e-12));
    osdp_cost_op_time(&cm, op, 1, 1, b, 2, &t);
    ck_assert(close_rel(t.comm, 4 * ag + 2 * rs, 1e-12));
    /* the paper's eq. 2 when both collectives cost the same: c (N-1)(alpha + S/N beta) */
    d.reduce_scatter = d.all_gather;
    double one = 3 * (1e-5 + S / 4 * 2e-10);
    osdp_cost_op_time(&cm, op, 1, 0, b, 1, &t);
    ck_assert(close_rel(t.total, 2 * one + compute, 1e-12));
    osdp_cost_op_time(&cm, op, 1, 1, b, 1, &t);
    ck_assert(close_rel(t.total, 3 * one + compute, 1e-12));
    /* overlap: max(compute, comm) with prefetch, the sum without */
    cm.kind = OSDP_COST_OVERLAP;
    osdp_cost_op_time(&cm, op, 1, 1, b, 1, &t);
    ck_assert(close_rel(t.total, fmax(compute, 3 * one), 1e-12));
    cm.geo.prefetch = 0;
    osdp_cost_op_time(&cm, op, 1, 1, b, 1, &t);
    ck_assert(close_rel(t.total, compute + 3 * one, 1e-12));
    /* one rank: no communication */
    cm.geo.n_ranks = 1;
    osdp_cost_op_time(&cm, op, 1, 1, b, 1, &t);
    ck_assert(t.comm == 0);
    /* osdp's bf16: 2-byte gathers, 4-byte gradients and reduce-scatters, and
     * the bf16 copy of the master shard in the state */
    osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = N, .prefetch = 1}, OSDP_COST_PAPER, NULL);
    d.reduce_scatter = (osdp_collective_cost){.alpha = 3e-5, .beta = 4e-10};
    d.grad_bytes = 4;
    double rs4 = 3 * (3e-5 + 2 * S / 4 * 4e-10);
    osdp_cost_op_time(&cm, op, 1, 0, b, 1, &t);
    ck_assert_msg(close_rel(t.comm, ag + rs4, 1e-12), "comm %g vs %g", t.comm, ag + rs4);
    osdp_op_mem m;
    osdp_cost_op_mem(&cm, op, 1, 0, b, &m);
    ck_assert(m.state == (long long)(18 * padded / 4) && m.resident == (long long)(2 * padded));
    ck_assert(m.grads == (long long)(4 * padded) && m.recv == (long long)padded);
    d.param_bytes = d.grad_bytes = 4;   /* fp32: 16 bytes of state */
    osdp_cost_op_mem(&cm, op, 1, 1, b, &m);
    ck_assert(m.state == (long long)(16 * padded / 4) && m.resident == 0 && m.grads == (long long)(4 * padded));
    osdp_layout_free(&L);
}
END_TEST

static unsigned long long g_rng = 12345;
static unsigned rnd(void)
{
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(g_rng >> 33);
}

START_TEST(test_peak_equals_runtime)
{
    const char *models[] = {"tiny", "bench_l6_d256", "ic_l8_mixed"};
    osdp_device d = test_device(1LL << 40);
    int checked = 0;
    for (int mi = 0; mi < 3; mi++) {
        osdp_layout L;
        load_layout(&L, models[mi], 64);
        osdp_plan p;
        ck_assert(osdp_plan_alloc(&p, L.n_ops) == OSDP_OK);
        const int Ns[] = {1, 2, 3, 8};
        for (int ni = 0; ni < 4; ni++)
            for (int pf = 0; pf < 2; pf++)
                for (int b = 1; b <= 2; b++)
                    for (int r = 0; r < 12; r++) {
                        for (int i = 0; i < L.n_ops; i++) p.zdp_slices[i] = r < 2 ? r : (int)(rnd() & 1);
                        /* fp32 weights, and bf16 weights with fp32 gradients (the runtime's two) */
                        d.param_bytes = r & 2 ? 2 : 4;
                        osdp_dtype wt = r & 2 ? OSDP_BFLOAT16 : OSDP_FLOAT32;
                        osdp_cost_model cm;
                        osdp_cost_model_init(&cm, &L, &d, &(osdp_step_geometry){.n_ranks = Ns[ni], .prefetch = pf},
                                             OSDP_COST_PAPER, NULL);
                        osdp_memory_prediction pr;
                        ck_assert(osdp_memory_predict(&L, &p, Ns[ni], b, 1 + (r & 1), pf, wt, &pr) == OSDP_OK);
                        long long model = osdp_cost_peak(&cm, &p, b, NULL);
                        ck_assert_msg(model == (long long)pr.peak_total,
                                      "%s N=%d prefetch=%d b=%d %s weights: model %lld, runtime %zu", models[mi], Ns[ni],
                                      pf, b, osdp_dtype_name(wt), model, pr.peak_total);
                        checked++;
                    }
        osdp_plan_free(&p);
        osdp_layout_free(&L);
    }
    ck_assert_int_eq(checked, 3 * 4 * 2 * 2 * 12);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* the planner against brute force                                          */

typedef struct brute {
    int n_plans;
    double *time;
    long long *peak;
} brute;

/* every plan (g = 1: 2^n; g > 1: (g+1)^n; tiny has 6 operators,
 * bench_l4_d512 10, bench_l6_d256 14): its step time and its peak, from
 * the runtime (g = 1) or the model (g > 1); under a tied head a plan with a
 * ZDP embedding is no plan (time infinite, peak above every limit) */
/* micro-steps per optimizer step of the brute-force checks; above 1 every
 * operator also reduces some of its g slices once, 0..g of them (the last
 * J, osdp/plan.h), the others every micro-batch (grad-reduce auto) */
static int brute_accum = 1;

static void brute_all(brute *B, const osdp_layout *L, const osdp_device *d, int N, int pf, int b, int g)
{
    const int A = brute_accum, ways = A > 1 ? g + 1 : 1;
    int n = L->n_ops, k = (g + 1) * ways;
    long long total = 1;
    for (int i = 0; i < n; i++) total *= k;
    B->n_plans = (int)total;
    B->time = malloc(sizeof *B->time * (size_t)total);
    B->peak = malloc(sizeof *B->peak * (size_t)total);
    ck_assert(B->time && B->peak);
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, n) == OSDP_OK);
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, L, d, &(osdp_step_geometry){.n_ranks = N, .prefetch = pf}, OSDP_COST_PAPER, NULL);
    for (long long code = 0; code < total; code++) {
        long long c = code;
        for (int i = 0; i < n; i++) {
            p.slices[i] = g;
            p.zdp_slices[i] = (int)(c % k) % (g + 1);
            p.reduce_once[i] = (int)(c % k) / (g + 1);
            c /= k;
        }
        if (L->cfg.tied_head && p.zdp_slices[0] > 0) {
            B->time[code] = INFINITY;
            B->peak[code] = LLONG_MAX;
            continue;
        }
        B->time[code] = osdp_cost_step_time(&cm, &p, b, A);
        if (g == 1) {
            osdp_memory_prediction pr;
            ck_assert(osdp_memory_predict(L, &p, N, b, A, pf, OSDP_FLOAT32, &pr) == OSDP_OK);
            B->peak[code] = (long long)pr.peak_total;
        } else {
            B->peak[code] = osdp_cost_peak(&cm, &p, b, NULL);
        }
    }
    osdp_plan_free(&p);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

static void check_against_brute(const char *model, int T, int N, int pf, int b, int g, const osdp_device *dev)
{
    osdp_layout L;
    load_layout(&L, model, T);
    osdp_device d = dev ? *dev : test_device(1);
    brute B;
    brute_all(&B, &L, &d, N, pf, b, g);
    long long *sorted = malloc(sizeof *sorted * (size_t)B.n_plans);
    ck_assert(sorted);
    memcpy(sorted, B.peak, sizeof *sorted * (size_t)B.n_plans);
    qsort(sorted, (size_t)B.n_plans, sizeof *sorted, cmp_ll);
    long long minpeak = sorted[0];
    int mixed = 0, multi = 0, mixed_once = 0, some_once = 0, valid = B.n_plans;
    while (valid > 0 && sorted[valid - 1] == LLONG_MAX) valid--;   /* no plans (brute_all) */
    /* limits: below the smallest peak, exactly at plan peaks across the range, and between */
    for (int li = 0; li <= 16; li++) {
        long long limit = li == 0 ? minpeak - 1 : sorted[(size_t)(valid - 1) * (size_t)(li - 1) / 15] - (li & 1) * 3;
        if (li == 16) limit = sorted[valid - 1] + 1000;
        double best = INFINITY;
        for (int c = 0; c < B.n_plans; c++)
            if (B.peak[c] <= limit && B.time[c] < best) best = B.time[c];
        for (int se = 0; se < 2; se++) {
            osdp_planner_options o;
            osdp_planner_defaults(&o);
            o.geo.n_ranks = N;
            o.geo.prefetch = pf;
            o.split = g;
            o.mem_limit = limit;
            o.search = se ? OSDP_SEARCH_DFS : OSDP_SEARCH_EXACT;
            o.grad_reduce = brute_accum > 1 ? OSDP_GRAD_REDUCE_AUTO : OSDP_GRAD_REDUCE_EVERY;
            osdp_planner_result r;
            osdp_status s = osdp_planner_plan_batch(&L, &d, &o, b, brute_accum, &r);
            if (isinf(best)) {
                ck_assert_msg(s == OSDP_ERR_INFEASIBLE, "%s N=%d pf=%d g=%d limit %lld: status %d (%s)", model, N, pf, g,
                              limit, s, osdp_error_message());
            } else {
                ck_assert_msg(s == OSDP_OK, "%s N=%d pf=%d g=%d limit %lld: %s", model, N, pf, g, limit,
                              osdp_error_message());
                ck_assert(!r.timed_out);
                ck_assert_msg(close_rel(r.step_s, best, 1e-12), "%s N=%d pf=%d g=%d b=%d limit %lld (%s): planner %.17g, brute %.17g",
                              model, N, pf, g, b, limit, se ? "dfs" : "exact", r.step_s, best);
                ck_assert(r.peak_bytes <= limit);
                if (g == 1) {
                    ck_assert(r.runtime_peak == r.peak_bytes);
                    ck_assert(r.runtime_peak <= limit);
                }
                ck_assert_int_eq(r.tightened, 0);
                int z = 0, once = osdp_plan_count_reduce_once(&r.plan);
                for (int i = 0; i < L.n_ops; i++) {
                    z += r.plan.zdp_slices[i] > 0;
                    some_once += r.plan.reduce_once[i] > 0 && r.plan.reduce_once[i] < r.plan.slices[i];
                }
                mixed += z > 0 && z < L.n_ops;
                mixed_once += once > 0 && once < L.n_ops;
                multi += r.searches > 1;
            }
            osdp_planner_result_free(&r);
        }
    }
    if (getenv("OSDP_TEST_VERBOSE"))
        fprintf(stderr, "%s N=%d pf=%d b=%d g=%d: %d mixed optima, %d needing several knapsacks\n", model, N, pf, b, g,
                mixed, multi);
    ck_assert_int_ge(mixed, 8); /* the limits exercise real trade-offs */
    if (brute_accum > 1) ck_assert_int_ge(mixed_once, 1);   /* reduce-once traded for memory on some operators only */
    if (brute_accum > 1 && g > 1) ck_assert_int_ge(some_once, 1);   /* and on some slices of an operator only */
    free(sorted);
    free(B.time);
    free(B.peak);
    osdp_layout_free(&L);
}

START_TEST(test_planner_brute_tiny)
{
    for (int N = 2; N <= 4; N += 2)
        for (int pf = 1; pf >= 0; pf--)
            for (int b = 1; b <= 2; b++) check_against_brute("tiny", 0, N, pf, b, 1, NULL);
    /* a tied head: the embedding DP only, its gradients held from the head's backward */
    for (int N = 2; N <= 4; N += 2) check_against_brute("tests/inputs/t_tied.ini", 0, N, 1, 1 + N / 4, 1, NULL);
    /* random devices: latency-, bandwidth- and compute-bound mixes */
    for (int r = 0; r < 12; r++) {
        osdp_device d = test_device(1);
        randomize_device(&d, rnd);
        check_against_brute(r < 4 ? "tiny" : "bench_l6_d256", 16 + 16 * (r % 3), 2 + (int)(rnd() % 7), (int)(r & 1),
                            1 + (int)(rnd() % 3), 1, &d);
    }
}
END_TEST

/* with accumulation (A = 3): reduce once or every micro-batch per operator, against every such plan */
START_TEST(test_planner_brute_reduce_once)
{
    brute_accum = 3;
    for (int N = 2; N <= 4; N += 2)
        for (int pf = 1; pf >= 0; pf--) check_against_brute("tiny", 0, N, pf, 1, 1, NULL);
    check_against_brute("tests/inputs/t_tied.ini", 0, 4, 1, 1, 1, NULL);
    /* per slice: 2 slices, each operator 0..2 of them once (9^6 plans) */
    check_against_brute("tiny", 16, 2, 1, 1, 2, NULL);
    brute_accum = 1;
}
END_TEST

START_TEST(test_planner_brute_bench)
{
    check_against_brute("bench_l6_d256", 0, 4, 1, 1, 1, NULL);
    check_against_brute("bench_l6_d256", 64, 3, 1, 2, 1, NULL);
}
END_TEST

START_TEST(test_planner_brute_split)
{
    check_against_brute("bench_l4_d512", 0, 4, 1, 1, 2, NULL); /* 3^10 plans, model peak */
    check_against_brute("bench_l4_d512", 32, 2, 0, 2, 2, NULL);
    check_against_brute("tiny", 16, 3, 1, 3, 4, NULL); /* 5^6 */
}
END_TEST

/* ------------------------------------------------------------------------ */
/* the paper's families: dfs = exact                                          */

/* The paper's DFS is exponential in the number of ZDP operators among the
 * 96 identical blocks of nd_l48 (2 ZDP: ms, 7 ZDP: > 3 s), so its N&D cases
 * use sequence lengths and micro-batches where the optimum needs a few ZDP
 * operators; W&S and I&C also run the whole scheduler. */
START_TEST(test_families_dfs_equals_exact)
{
    static const struct { const char *model, *device; int T, micro_batch, max_b, min_zdp; } fam[] = {
        {"nd_l48_d1024", "paper_8gb", 908, 2, 0, 1},
        {"nd_l48_d1024", "paper_16gb", 912, 5, 0, 1},
        {"ws_l4_d6144", "paper_8gb", 512, 0, 16, 1},
        {"ws_l4_d6144", "paper_16gb", 512, 0, 24, 1},
        {"ic_l8_mixed", "paper_8gb", 512, 0, 16, 0},
        {"ic_l8_mixed", "paper_16gb", 512, 0, 32, 0},
        {"ic_l8_mixed", "paper_8gb", 512, 14, 0, 1},
        {"ic_l8_mixed", "paper_16gb", 512, 34, 0, 1},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        osdp_layout L;
        /* the paper's activations (the naive attention and head): the lengths and micro-batches above are
         * where its optimum needs a few ZDP operators */
        load_layout_kernels(&L, fam[f].model, fam[f].T, 1, 1);
        osdp_device d;
        load_device(&d, fam[f].device);
        ck_assert_int_eq(d.param_bytes, 2);
        osdp_planner_result r[2];
        osdp_status s[2];
        for (int se = 0; se < 2; se++) {
            osdp_planner_options o;
            osdp_planner_defaults(&o);
            o.geo.n_ranks = 8;
            o.geo.micro_batch = fam[f].micro_batch;
            o.max_micro_batch = fam[f].max_b;
            o.dfs_time_limit_s = 10;
            o.search = se ? OSDP_SEARCH_DFS : OSDP_SEARCH_EXACT;
            s[se] = osdp_planner_run(&L, &d, &o, &r[se]);
            ck_assert_msg(s[se] == OSDP_OK, "%s %s: %s", fam[f].model, fam[f].device, osdp_error_message());
        }
        ck_assert_msg(!r[1].timed_out, "%s %s: dfs timed out", fam[f].model, fam[f].device);
        ck_assert_int_eq(r[0].plan.geo.micro_batch, r[1].plan.geo.micro_batch);
        ck_assert(r[0].step_s == r[1].step_s);
        ck_assert(r[0].peak_bytes == r[1].peak_bytes && r[0].peak_bytes <= d.mem_limit);
        int zdp = 0;
        for (int i = 0; i < L.n_ops; i++) {
            ck_assert_int_eq(r[0].plan.zdp_slices[i], r[1].plan.zdp_slices[i]);
            zdp += r[0].plan.zdp_slices[i];
        }
        ck_assert_msg(zdp >= fam[f].min_zdp && zdp < L.n_ops, "%s %s: %d ZDP operators", fam[f].model,
                      fam[f].device, zdp);
        if (getenv("OSDP_TEST_VERBOSE"))
            fprintf(stderr, "%s %s T=%d: b=%d, %d ZDP, exact %.2f ms, dfs %.2f ms\n", fam[f].model, fam[f].device,
                    fam[f].T, r[0].plan.geo.micro_batch, zdp, 1e3 * r[0].total_s, 1e3 * r[1].total_s);
        osdp_planner_result_free(&r[0]);
        osdp_planner_result_free(&r[1]);
        osdp_layout_free(&L);
    }
}
END_TEST

/* ------------------------------------------------------------------------ */
/* infeasible, the smallest memory, the scheduler                             */

START_TEST(test_infeasible_message)
{
    osdp_layout L;
    load_layout(&L, "tiny", 0);
    osdp_device d = test_device(1);
    brute B;
    brute_all(&B, &L, &d, 2, 1, 1, 1);
    long long minpeak = LLONG_MAX;
    for (int c = 0; c < B.n_plans; c++)
        if (B.peak[c] < minpeak) minpeak = B.peak[c];
    osdp_planner_options o;
    osdp_planner_defaults(&o);
    o.geo.n_ranks = 2;
    long long need = 0;
    ck_assert(osdp_planner_min_memory(&L, &d, &o, 1, &need, NULL) == OSDP_OK);
    ck_assert_msg(need == minpeak, "min memory %lld, brute force %lld", need, minpeak);
    o.mem_limit = minpeak - 1;
    osdp_planner_result r;
    osdp_status s = osdp_planner_run(&L, &d, &o, &r);
    ck_assert_int_eq(s, OSDP_ERR_INFEASIBLE);
    const char *msg = osdp_error_message();
    char num[64];
    snprintf(num, sizeof num, "%lld bytes", minpeak);
    ck_assert_msg(strstr(msg, "smallest peak any plan needs") && strstr(msg, num), "%s", msg);
    ck_assert_msg(strstr(msg, "micro-batch 1") && strstr(msg, "dominate"), "%s", msg);
    ck_assert_msg(strstr(msg, "embed") || strstr(msg, "head") || strstr(msg, "attn.") || strstr(msg, "mlp."), "%s", msg);
    osdp_planner_result_free(&r);
    o.mem_limit = minpeak; /* exactly the smallest: fits */
    s = osdp_planner_run(&L, &d, &o, &r);
    ck_assert_msg(s == OSDP_OK, "%s", osdp_error_message());
    ck_assert(r.runtime_peak == minpeak);
    osdp_planner_result_free(&r);
    free(B.time);
    free(B.peak);
    osdp_layout_free(&L);
}
END_TEST

/* the planner's defaults on N ranks with every operator that can recompute recomputing (rc: its flags,
 * n_ops of them) and gradients reduced as gr */
static void recompute_all_options(osdp_planner_options *o, const osdp_layout *L, int *rc, int N, osdp_grad_reduce gr)
{
    for (int i = 0; i < L->n_ops; i++) rc[i] = osdp_op_can_recompute(L->op[i].type);
    osdp_planner_defaults(o);
    o->geo.n_ranks = N;
    o->recompute = rc;
    o->grad_reduce = gr;
}

/* A reduce-once head 4x an mlp's weights after recomputed blocks (t_small,
 * vocabulary 1024): the last mlp's forward, its slices and the head's
 * gathered ahead, is the peak (osdp_cost_forward_moment).  The planner's
 * peak is the schedule's, and no limit gets a plan over it (the search
 * bounds the forward moments too: tests/planner/test_planner_terms.c
 * against every plan). */
START_TEST(test_forward_moment_limit)
{
    osdp_layout L;
    load_layout_vocab(&L, "tests/inputs/t_small.ini", 32, 1024, 0);
    osdp_device d = test_device(1LL << 40);
    d.param_bytes = 2;   /* bf16 weights: verified against the schedule */
    int rc[16] = {0};
    ck_assert_int_le(L.n_ops, 16);
    osdp_planner_options o;
    recompute_all_options(&o, &L, rc, 2, OSDP_GRAD_REDUCE_ONCE);
    o.modes = OSDP_MODES_ALL_ZDP;
    osdp_planner_result r;
    osdp_status s = osdp_planner_plan_batch(&L, &d, &o, 8, 2, &r);
    ck_assert_msg(s == OSDP_OK, "%s", osdp_error_message());
    ck_assert_int_eq(r.runtime_peak, r.peak_bytes);
    ck_assert_str_eq(L.op[r.peak_op].name, "mlp.1");   /* the forward moment, not a backward */
    const long long peak = r.peak_bytes;
    osdp_planner_result_free(&r);
    /* every operator ZDP, recomputed and reducing once: the one plan, so under its peak none fits, and the
     * message says so, at the moment where it is (no longer that the search does not bound forward moments) */
    long long least = -1;
    ck_assert(osdp_planner_min_memory(&L, &d, &o, 8, &least, NULL) == OSDP_OK);
    ck_assert_int_eq(least, peak);
    for (long long under = 1; under <= 1 << 16; under *= 16) {
        o.mem_limit = peak - under;
        s = osdp_planner_plan_batch(&L, &d, &o, 8, 2, &r);
        ck_assert_msg(s == OSDP_ERR_INFEASIBLE && strstr(osdp_error_message(), "smallest peak any plan needs")
                      && strstr(osdp_error_message(), "in the forward of mlp.1:"), "%s", osdp_error_message());
        osdp_planner_result_free(&r);
    }
    osdp_layout_free(&L);
}
END_TEST

/* The case of issue 28 that the planner once refused: megatron_1p7b, every block recomputed, 32 A100s
 * (4 nodes of 8, hierarchical slices among the choices, as `plan` sees them), micro-batch 4 x 4,
 * gradients reduced once or every micro-batch per operator: the fastest plan's peak is mlp.23's forward.
 * A byte and a MiB under it, a plan that fits at every moment (the search bounds the forward moments),
 * the runtime schedule's peak equal, at most a little slower. */
START_TEST(test_forward_bound_megatron)
{
    osdp_layout L;
    load_layout(&L, "megatron_1p7b", 2048);
    osdp_device dev, d;
    load_device(&dev, "a100_80gb_ib");
    int *rc = calloc((size_t)L.n_ops, sizeof *rc);
    ck_assert(rc);
    osdp_planner_options o;
    recompute_all_options(&o, &L, rc, 32, OSDP_GRAD_REDUCE_AUTO);
    o.offer_hierarchical = 1;
    osdp_cost_hierarchy hier;
    o.hierarchy = osdp_planner_hierarchy(&o, &dev, 1, 32, 1, &hier);
    ck_assert(o.hierarchy);
    osdp_cost_device_for_mesh(&dev, 1, 32, 1, &d);
    osdp_planner_result r;
    osdp_status s = osdp_planner_plan_batch(&L, &d, &o, 4, 4, &r);
    ck_assert_msg(s == OSDP_OK, "%s", osdp_error_message());
    ck_assert_msg(r.peak_forward && strcmp(L.op[r.peak_op].name, "mlp.23") == 0, "peak in %s's %s", L.op[r.peak_op].name,
                  r.peak_forward ? "forward" : "backward");
    const long long peak = r.peak_bytes;
    const double step = r.step_s;
    osdp_planner_result_free(&r);
    for (long long under = 1; under <= 1 << 20; under <<= 20) {
        o.mem_limit = peak - under;
        s = osdp_planner_plan_batch(&L, &d, &o, 4, 4, &r);
        ck_assert_msg(s == OSDP_OK, "limit %lld: %s", o.mem_limit, osdp_error_message());
        ck_assert_int_le(r.peak_bytes, o.mem_limit);
        ck_assert_int_eq(r.runtime_peak, r.peak_bytes);
        ck_assert(r.step_s >= step && r.step_s < step * 1.01);
        osdp_planner_result_free(&r);
    }
    free(rc);
    osdp_layout_free(&L);
}
END_TEST

START_TEST(test_scheduler)
{
    osdp_layout L;
    load_layout(&L, "bench_l6_d256", 0);
    osdp_device d = test_device(96LL << 20);
    osdp_planner_options o;
    osdp_planner_defaults(&o);
    o.geo.n_ranks = 4;
    osdp_planner_result r;
    ck_assert_msg(osdp_planner_run(&L, &d, &o, &r) == OSDP_OK, "%s", osdp_error_message());
    /* the best samples/s over every micro-batch b = 1, 2, ... until one does not fit */
    double best = 0;
    int best_b = 0, b = 1;
    for (;; b++) {
        osdp_planner_result q;
        osdp_status s = osdp_planner_plan_batch(&L, &d, &o, b, 1, &q);
        if (s == OSDP_OK && q.samples_per_s > best) { best = q.samples_per_s; best_b = b; }
        osdp_planner_result_free(&q);
        if (s != OSDP_OK) {
            ck_assert_int_eq(s, OSDP_ERR_INFEASIBLE);
            break;
        }
    }
    ck_assert_int_ge(b, 3);
    ck_assert_int_le(r.batches_tried, b - 1); /* the bounds spared some of them */
    ck_assert_int_eq(r.plan.geo.micro_batch, best_b);
    ck_assert(r.samples_per_s == best);
    ck_assert(close_rel(r.samples_per_s, (double)best_b * 4 / r.step_s, 1e-12));
    osdp_planner_result_free(&r);
    /* global batch: the micro-batch divides G/N, accumulation follows */
    o.global_batch = 48;
    ck_assert_msg(osdp_planner_run(&L, &d, &o, &r) == OSDP_OK, "%s", osdp_error_message());
    ck_assert_int_eq(12 % r.plan.geo.micro_batch, 0);
    ck_assert_int_eq(r.plan.geo.accum_steps * r.plan.geo.micro_batch * 4, 48);
    ck_assert(close_rel(r.samples_per_s, 48 / r.step_s, 1e-12));
    osdp_planner_result_free(&r);
    o.global_batch = 50; /* not a multiple of N */
    ck_assert_int_eq(osdp_planner_run(&L, &d, &o, &r), OSDP_ERR_INPUT);
    osdp_planner_result_free(&r);
    osdp_layout_free(&L);
}
END_TEST

static Suite *planner_suite(void)
{
    const TTest *device[] = {test_device_parse, test_device_errors, NULL};
    const TTest *cost_model[] = {test_cost_time_by_hand, test_peak_equals_runtime, NULL};
    const TTest *planner[] = {test_planner_brute_tiny, test_planner_brute_reduce_once, test_planner_brute_bench,
                              test_planner_brute_split,
                              test_families_dfs_equals_exact, test_infeasible_message, test_scheduler, test_forward_moment_limit,
                              test_forward_bound_megatron, NULL};
    const osdp_check_case cases[] = {
        {.name = "device", .tests = device}, {.name = "cost_model", .tests = cost_model},
        {.name = "planner", .tests = planner},
    };
    return osdp_check_suite("planner", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = planner_suite};

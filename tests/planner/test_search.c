/* Tests for the plan search (src/planner/search_{dfs,exact,brute}.c): the
 * three methods against each other and against an independent brute force
 * over double sums, on random small instances; infeasibility and input
 * errors; a GPT-shaped "N&D" instance of 96 layers. */
#define _POSIX_C_SOURCE 200809L

#include "check_main.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/search.h"

/* ------------------------------------------------------------------------ */
/* instances                                                                 */

typedef struct inst {
    int n;
    int *k;
    long long **m;              /* owned per-item arrays */
    double **t;
    const long long **pm;       /* what the problem sees: m[i], or a shared template */
    const double **pt;
    long long tm[4][5];         /* templates for identical items */
    double tt[4][5];
    osdp_search_problem p;
} inst;

static unsigned long long g_rng;
static unsigned long long rnd(void) /* splitmix64 */
{
    unsigned long long z = (g_rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static int rnd_int(int lo, int hi) { return lo + (int)(rnd() % (unsigned long long)(hi - lo + 1)); }
static double rnd_unit(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }

static void inst_alloc(inst *I, int n)
{
    memset(I, 0, sizeof *I);
    I->n = n;
    I->k = calloc((size_t)n + 1, sizeof *I->k);
    I->m = calloc((size_t)n + 1, sizeof *I->m);
    I->t = calloc((size_t)n + 1, sizeof *I->t);
    I->pm = calloc((size_t)n + 1, sizeof *I->pm);
    I->pt = calloc((size_t)n + 1, sizeof *I->pt);
    ck_assert(I->k && I->m && I->t && I->pm && I->pt);
    I->p.n_items = n;
    I->p.n_choices = I->k;
    I->p.mem = I->pm;
    I->p.time = I->pt;
}

static void inst_item(inst *I, int i, int k)
{
    I->k[i] = k;
    I->m[i] = calloc((size_t)k, sizeof **I->m);
    I->t[i] = calloc((size_t)k, sizeof **I->t);
    ck_assert(I->m[i] && I->t[i]);
    I->pm[i] = I->m[i];
    I->pt[i] = I->t[i];
}

static void inst_free(inst *I)
{
    for (int i = 0; i < I->n; i++) {
        free(I->m[i]);
        free(I->t[i]);
    }
    free(I->k);
    free(I->m);
    free(I->t);
    free(I->pm);
    free(I->pt);
}

static void fill_choice(int mode, int k, long long *m, double *t)
{
    double base = 1e6 + rnd_unit() * 1e9, t0 = 1e-3 + rnd_unit();
    for (int c = 0; c < k; c++) {
        switch (mode) {
        case 0: m[c] = 1000000 + (long long)(rnd() % 1000000000ULL); t[c] = 1e-3 + rnd_unit(); break;
        case 1: m[c] = rnd_int(1, 6) * 1000000LL; t[c] = 0.25 * rnd_int(0, 6); break;   /* exact ties */
        case 2: m[c] = rnd_int(0, 9) * 1000000LL; t[c] = 0.1 * rnd_int(1, 9); break;    /* rounding */
        case 3: /* memory falls as time rises, like DP -> ZDP */
            m[c] = (long long)(base * (1.0 - 0.2 * c)) + rnd_int(0, 3);
            t[c] = t0 * (1.0 + 0.1 * c + 0.01 * rnd_unit());
            break;
        case 4: m[c] = rnd_int(0, 2) * 7; t[c] = rnd_int(0, 1) * 0.5; break;              /* zeros */
        case 5: /* times over 12 decades, some "impossible" choices at 1e30 s */
            m[c] = 1000000 + (long long)(rnd() % 1000000000ULL);
            t[c] = c > 0 && rnd_int(0, 9) == 0 ? 1e30 : pow(10.0, -12.0 * rnd_unit());
            break;
        default: /* like a cost model: bytes saved cost time in proportion, plus a latency */
            m[c] = (long long)(base * (1.0 - 0.875 * c / (k > 1 ? k - 1 : 1)));
            t[c] = t0 + 1.25e-12 * (base - (double)m[c]) + 70e-6 * c;
            break;
        }
    }
    if (mode == 5) { /* the smallest-memory choice stays possible (see search.h on the time unit) */
        int lo = 0;
        for (int c = 1; c < k; c++)
            if (m[c] < m[lo]) lo = c;
        if (t[lo] > 1.0) t[lo] = 0.5;
    }
}

/* A random instance of at most max_n items and max_plans plans. */
static void random_instance(inst *I, unsigned seed, int max_n, double max_plans)
{
    g_rng = seed * 7919ULL + 13;
    int uniform_k = rnd_int(0, 1) ? rnd_int(2, 5) : 0;
    int mode = rnd_int(0, 6), n_tmpl = rnd_int(0, 1) ? rnd_int(1, 4) : 0, copy = rnd_int(0, 1);
    int kk[64], tj[64], tk[4];
    for (int j = 0; j < n_tmpl; j++) tk[j] = uniform_k ? uniform_k : rnd_int(2, 5);
    double plans = 1;
    int n = 0;
    while (n < max_n && n < 64) {
        int j = n_tmpl ? rnd_int(0, n_tmpl - 1) : -1;
        int k = j >= 0 ? tk[j] : uniform_k ? uniform_k : (rnd_int(0, 9) == 0 ? 1 : rnd_int(2, 5));
        if (plans * k > max_plans || (n > 0 && rnd_int(0, max_n) == 0)) break;
        tj[n] = j;
        kk[n++] = k;
        plans *= k;
    }
    inst_alloc(I, n);
    for (int j = 0; j < n_tmpl; j++) fill_choice(mode, tk[j], I->tm[j], I->tt[j]);
    for (int i = 0; i < n; i++) {
        inst_item(I, i, kk[i]);
        if (tj[i] >= 0) { /* identical items: copies, or the very same arrays */
            memcpy(I->m[i], I->tm[tj[i]], sizeof I->tm[0][0] * (size_t)kk[i]);
            memcpy(I->t[i], I->tt[tj[i]], sizeof I->tt[0][0] * (size_t)kk[i]);
            if (!copy) {
                I->pm[i] = I->tm[tj[i]];
                I->pt[i] = I->tt[tj[i]];
            }
        } else {
            fill_choice(mode, kk[i], I->m[i], I->t[i]);
        }
    }
    long long lo = 0, hi = 0, any = 0;
    for (int i = 0; i < n; i++) {
        long long a = I->m[i][0], b = I->m[i][0];
        for (int c = 1; c < I->k[i]; c++) {
            if (I->m[i][c] < a) a = I->m[i][c];
            if (I->m[i][c] > b) b = I->m[i][c];
        }
        lo += a;
        hi += b;
        any += I->m[i][rnd_int(0, I->k[i] - 1)];
    }
    switch (rnd_int(0, 5)) {
    case 0: I->p.mem_limit = lo - 1 - rnd_int(0, 5); break;             /* infeasible */
    case 1: I->p.mem_limit = any; break;                               /* a plan exactly at the limit */
    case 2: I->p.mem_limit = lo; break;
    case 3: I->p.mem_limit = hi; break;
    default: I->p.mem_limit = lo + (long long)(rnd_unit() * (double)(hi - lo)); break;
    }
}

/* ------------------------------------------------------------------------ */
/* checks                                                                    */

static void check_plan(const inst *I, const osdp_search_result *r, const char *what)
{
    double t = 0.0;
    long long m = 0;
    for (int i = 0; i < I->n; i++) {
        ck_assert_msg(r->choice[i] >= 0 && r->choice[i] < I->k[i], "%s: choice out of range", what);
        t += I->t[i][r->choice[i]];
        m += I->m[i][r->choice[i]];
    }
    ck_assert_msg(m == r->total_mem, "%s: memory %lld reported %lld", what, m, r->total_mem);
    ck_assert_msg(t == r->total_time, "%s: time %.17g reported %.17g", what, t, r->total_time);
    ck_assert_msg(m <= I->p.mem_limit, "%s: memory %lld over the limit %lld", what, m, I->p.mem_limit);
}

/* Independent brute force on double sums: the best time, and how many plans
 * share the optimal fixed-point (time, memory) (> 1: the lexicographic rule
 * decides). */
static double naive_best(const inst *I, int *n_opt)
{
    osdp_search_prep prep;
    osdp_search_result tmp;
    int cur[16] = {0};
    tmp.choice = cur;
    ck_assert_int_eq(osdp_search_prepare(&I->p, &tmp, &prep), OSDP_OK);
    double best = INFINITY;
    long long bq = 0, bm = 0;
    int cnt = 0;
    for (;;) {
        double t = 0.0;
        long long m = 0, q = 0;
        for (int i = 0; i < I->n; i++) {
            t += I->t[i][cur[i]];
            m += I->m[i][cur[i]];
            q += prep.q[prep.off[i] + cur[i]];
        }
        if (m <= I->p.mem_limit) {
            if (t < best) best = t;
            if (cnt == 0 || q < bq || (q == bq && m < bm)) {
                bq = q;
                bm = m;
                cnt = 1;
            } else if (q == bq && m == bm) {
                cnt++;
            }
        }
        int i = I->n - 1;
        while (i >= 0 && ++cur[i] == I->k[i]) cur[i--] = 0;
        if (i < 0) break;
    }
    osdp_search_prep_free(&prep);
    *n_opt = cnt;
    return best;
}

static long long min_mem_of(const inst *I)
{
    long long s = 0;
    for (int i = 0; i < I->n; i++) {
        long long a = I->m[i][0];
        for (int c = 1; c < I->k[i]; c++)
            if (I->m[i][c] < a) a = I->m[i][c];
        s += a;
    }
    return s;
}

/* ------------------------------------------------------------------------ */
/* tests                                                                     */

START_TEST(test_random_small)
{
    int feasible = 0, infeasible = 0, ties = 0, at_limit = 0, grouped = 0;
    for (unsigned seed = 1; seed <= 1500; seed++) {
        inst I;
        random_instance(&I, seed, 16, 2e5);
        int cb[16], ce[16], cd[16];
        osdp_search_result rb = {.choice = cb}, re = {.choice = ce}, rd = {.choice = cd};
        osdp_status sb = osdp_search_brute(&I.p, &rb);
        osdp_status se = osdp_search_exact(&I.p, &re);
        osdp_status sd = osdp_search_dfs(&I.p, &rd);
        ck_assert_msg(sb == se && se == sd, "seed %u: status brute %d exact %d dfs %d (%s)", seed, sb, se, sd,
                      osdp_error_message());
        long long mm = min_mem_of(&I);
        ck_assert_msg(rb.min_mem == mm && re.min_mem == mm && rd.min_mem == mm, "seed %u: min_mem", seed);
        if (sb == OSDP_ERR_INFEASIBLE) {
            ck_assert(mm > I.p.mem_limit);
            infeasible++;
            inst_free(&I);
            continue;
        }
        ck_assert_msg(sb == OSDP_OK, "seed %u: %s", seed, osdp_error_message());
        feasible++;
        ck_assert(!rd.timed_out);
        check_plan(&I, &rb, "brute");
        check_plan(&I, &re, "exact");
        check_plan(&I, &rd, "dfs");
        for (int i = 0; i < I.n; i++) {
            ck_assert_msg(cb[i] == ce[i], "seed %u: exact differs from brute at item %d", seed, i);
            ck_assert_msg(cb[i] == cd[i], "seed %u: dfs differs from brute at item %d", seed, i);
        }
        int n_opt;
        double best = naive_best(&I, &n_opt);
        ck_assert_msg(fabs(best - rb.total_time) <= 1e-12 * best, "seed %u: best %.17g found %.17g", seed, best,
                      rb.total_time);
        ties += n_opt > 1;
        at_limit += rb.total_mem == I.p.mem_limit;
        for (int i = 1; i < I.n; i++)
            if (I.k[i] == I.k[0] && !memcmp(I.m[i], I.m[0], sizeof *I.m[0] * (size_t)I.k[0]) &&
                !memcmp(I.t[i], I.t[0], sizeof *I.t[0] * (size_t)I.k[0])) {
                grouped++;
                break;
            }
        inst_free(&I);
    }
    printf("random small: %d feasible (%d with several optimal plans, %d exactly at the limit, %d with identical "
           "items), %d infeasible\n",
           feasible, ties, at_limit, grouped, infeasible);
    ck_assert(feasible > 500 && infeasible > 100 && ties > 50 && at_limit > 50 && grouped > 100);
}
END_TEST

/* Up to 48 items, beyond brute force: exact against the DFS where the DFS
 * finishes within its time limit. */
START_TEST(test_random_medium)
{
    int compared = 0, skipped = 0;
    long long most = 0;
    for (unsigned seed = 5001; seed <= 5300; seed++) {
        inst I;
        random_instance(&I, seed, 48, 1e300);
        int ce[64], cd[64];
        osdp_search_result re = {.choice = ce}, rd = {.choice = cd};
        osdp_status se = osdp_search_exact(&I.p, &re);
        I.p.time_limit_s = 0.25;
        osdp_status sd = osdp_search_dfs(&I.p, &rd);
        ck_assert_msg(se == sd, "seed %u: status exact %d dfs %d", seed, se, sd);
        if (se == OSDP_OK) {
            check_plan(&I, &re, "exact");
            check_plan(&I, &rd, "dfs");
            if (rd.timed_out) {
                skipped++; /* its incumbent cannot beat the optimum */
                ck_assert(rd.total_time >= re.total_time * (1 - 1e-12));
            } else {
                compared++;
                if (re.nodes > most) most = re.nodes;
                for (int i = 0; i < I.n; i++)
                    ck_assert_msg(ce[i] == cd[i], "seed %u (n=%d): exact differs from dfs at item %d", seed, I.n, i);
            }
        }
        inst_free(&I);
    }
    printf("random medium: %d compared with the DFS (exact examined up to %lld states), %d skipped (DFS timed "
           "out)\n",
           compared, most, skipped);
    ck_assert(compared > 100);
}
END_TEST

/* Split operators (k of 4 slices ZDP): groups of identical items whose five
 * choices lie almost on a line (slices of slightly different sizes), plus
 * single items with large swings, some choices impossible (1e30 s): the
 * case the exact search's group fronts (G_d(j) with restricted LP bounds)
 * were built for.  Small instances against brute force, larger ones against
 * the DFS. */
/* the smallest and the largest memory any plan of I takes */
static void mem_range(const inst *I, long long *lo, long long *hi)
{
    *lo = *hi = 0;
    for (int i = 0; i < I->n; i++) {
        long long mn = I->m[i][0], mx = I->m[i][0];
        for (int c = 1; c < I->k[i]; c++) {
            if (I->m[i][c] < mn) mn = I->m[i][c];
            if (I->m[i][c] > mx) mx = I->m[i][c];
        }
        *lo += mn;
        *hi += mx;
    }
}

static void split_instance(inst *I, unsigned seed, int n_groups, int r_max)
{
    g_rng = seed * 104729ULL + 7;
    int r[4], n = 0;
    for (int j = 0; j < n_groups; j++) n += r[j] = rnd_int(1, r_max);
    int singles = rnd_int(1, 2);
    inst_alloc(I, n + singles);
    for (int j = 0; j < n_groups; j++) {
        double base = 1e6 * rnd_int(5, 40), a = 1e-5 * rnd_unit(), b = 1e-10 * (1 + rnd_unit()), t0 = 1e-3 + rnd_unit() * 1e-2;
        long long sl[4];
        for (int x = 0; x < 4; x++) sl[x] = (long long)(base / 4 * (1 + 0.002 * (rnd_unit() - 0.5)));
        for (int x = 0; x < 5; x++) { /* x slices ZDP: the first x; the rest resident */
            long long m = 0;
            double t = t0;
            for (int y = 0; y < 4; y++) {
                if (y >= x) m += sl[y];
                else t += a + b * (double)sl[y];
            }
            I->tm[j][x] = m;
            I->tt[j][x] = t;
        }
    }
    int i = 0;
    for (int j = 0; j < n_groups; j++)
        for (int t = 0; t < r[j]; t++, i++) {
            inst_item(I, i, 5);
            memcpy(I->m[i], I->tm[j], sizeof I->tm[0]);
            memcpy(I->t[i], I->tt[j], sizeof I->tt[0]);
        }
    for (int t = 0; t < singles; t++, i++) { /* the embedding: DP or ZDP only */
        inst_item(I, i, 5);
        double big = 1e6 * rnd_int(20, 200);
        for (int x = 0; x < 5; x++) {
            I->m[i][x] = x == 0 ? (long long)big : 0;
            I->t[i][x] = x == 0 ? 1e-3 : x == 4 ? 1e-3 + 2e-10 * big : 1e30;
        }
    }
    long long lo, hi;
    mem_range(I, &lo, &hi);
    I->p.mem_limit = lo + (long long)(rnd_unit() * (double)(hi - lo));
}

START_TEST(test_split_groups)
{
    int brute = 0, dfs = 0, skipped = 0;
    for (unsigned seed = 1; seed <= 60; seed++) {
        inst I;
        int small = seed <= 30;
        split_instance(&I, seed, small ? 2 : 3, small ? 4 : 6);
        int ce[64], co[64];
        osdp_search_result re = {.choice = ce}, ro = {.choice = co};
        osdp_status se = osdp_search_exact(&I.p, &re), so;
        if (small) {
            so = osdp_search_brute(&I.p, &ro);
        } else {
            I.p.time_limit_s = 1;
            so = osdp_search_dfs(&I.p, &ro);
        }
        ck_assert_msg(se == so, "seed %u: status exact %d other %d", seed, se, so);
        if (se == OSDP_OK && !ro.timed_out) {
            check_plan(&I, &re, "exact");
            for (int i = 0; i < I.n; i++)
                ck_assert_msg(ce[i] == co[i], "seed %u (n=%d): exact differs from %s at item %d", seed, I.n,
                              small ? "brute" : "dfs", i);
            if (small) brute++;
            else dfs++;
        } else if (se == OSDP_OK) {
            skipped++;
        }
        inst_free(&I);
    }
    printf("split groups: %d equal to brute force, %d equal to the DFS, %d skipped (DFS timed out)\n", brute, dfs,
           skipped);
    ck_assert(brute >= 25 && dfs >= 10);
}
END_TEST

/* Items whose choices lie on a few shared slopes (time exactly linear in
 * the bytes saved, the same rate across items, on a grid the fixed-point
 * time holds exactly): the LP line of a group front places its own hull
 * edges among the other groups' edges of EQUAL efficiency (search_front.c:
 * an other edge first), and the budget ends on either kind.  Singleton
 * items with up to 8 choices (the distinct operators of --split auto
 * --recompute auto), plus groups of 2 or 3 identical items, some choices
 * off the line (above it: dominated or hull-breaking); limits from below
 * the smallest memory to above the largest.  The exact search must return
 * brute force's plan. */
static void slope_instance(inst *I, unsigned seed)
{
    g_rng = seed * 15485863ULL + 11;
    const int singles = rnd_int(2, 4), groups = rnd_int(0, 2);
    int r[2] = {0, 0}, n = singles, k[6];
    for (int j = 0; j < groups; j++) n += r[j] = rnd_int(2, 3);
    inst_alloc(I, n);
    for (int j = 0; j < singles + groups; j++) k[j] = rnd_int(2, j < singles ? 8 : 4);
    for (int j = 0;; j = (j + 1) % (singles + groups)) { /* keep brute force small: fewer choices, in turn */
        double plans = 1;
        for (int q = 0; q < singles + groups; q++) plans *= pow(k[q], q < singles ? 1 : r[q - singles]);
        if (plans <= 2e5) break;
        if (k[j] > 2) k[j]--;
    }
    const double unit = 0x1p-20; /* seconds per grid step: exact in the search's fixed point */
    for (int j = 0, i = 0; j < singles + groups; j++) {
        const int copies = j < singles ? 1 : r[j - singles];
        long long m[8];
        double t[8];
        const long long step = 1000 * rnd_int(1, 3);
        const int slope = rnd_int(1, 3); /* grid steps per `step` bytes: efficiencies tie across items */
        const int t0 = rnd_int(200, 400);
        for (int c = 0; c < k[j]; c++) {
            int x = rnd_int(0, 6);
            m[c] = 5000 + x * step;
            t[c] = unit * (t0 - slope * x + (rnd_int(0, 3) == 0 ? rnd_int(1, 3) : 0)); /* some above the line */
        }
        for (int q = 0; q < copies; q++, i++) {
            inst_item(I, i, k[j]);
            memcpy(I->m[i], m, sizeof *m * (size_t)k[j]);
            memcpy(I->t[i], t, sizeof *t * (size_t)k[j]);
        }
    }
    long long lo, hi;
    mem_range(I, &lo, &hi);
    I->p.mem_limit = lo - 1000 + (long long)(rnd_unit() * (double)(hi - lo + 2000));
}

START_TEST(test_shared_slopes)
{
    int feasible = 0, infeasible = 0, grouped = 0;
    for (unsigned seed = 1; seed <= 400; seed++) {
        inst I;
        slope_instance(&I, seed);
        int cb[32], ce[32];
        osdp_search_result rb = {.choice = cb}, re = {.choice = ce};
        osdp_status sb = osdp_search_brute(&I.p, &rb), se = osdp_search_exact(&I.p, &re);
        ck_assert_msg(sb == se, "seed %u: status brute %d exact %d (%s)", seed, sb, se, osdp_error_message());
        if (sb == OSDP_OK) {
            check_plan(&I, &re, "exact");
            for (int i = 0; i < I.n; i++)
                ck_assert_msg(cb[i] == ce[i], "seed %u (n=%d): exact differs from brute at item %d", seed, I.n, i);
            feasible++;
            grouped += I.n > 4;
        } else {
            ck_assert_msg(sb == OSDP_ERR_INFEASIBLE, "seed %u: %s", seed, osdp_error_message());
            infeasible++;
        }
        inst_free(&I);
    }
    printf("shared slopes: %d feasible (%d with groups), %d infeasible, all equal to brute force\n", feasible, grouped,
           infeasible);
    ck_assert(feasible >= 300 && infeasible >= 5 && grouped >= 100);
}
END_TEST

/* time_cap: with the optimum's time as the cap the same plan, just below
 * it none; one workspace shared by every instance (items of different
 * choice counts reuse its buffers) */
START_TEST(test_time_cap)
{
    osdp_search_workspace *ws = osdp_search_workspace_new();
    ck_assert(ws);
    int capped = 0, below = 0;
    for (unsigned seed = 1; seed <= 600; seed++) {
        inst I;
        if (seed % 3) random_instance(&I, seed, 16, 2e5);
        else split_instance(&I, seed, 2, 4);
        int cb[64], ce[64];
        osdp_search_result rb = {.choice = cb}, re = {.choice = ce};
        osdp_status sb = osdp_search_brute(&I.p, &rb);
        I.p.workspace = ws;
        if (sb != OSDP_OK || rb.total_time <= 0) {
            inst_free(&I);
            continue;
        }
        I.p.time_cap = rb.total_time;
        ck_assert_msg(osdp_search_exact(&I.p, &re) == OSDP_OK, "seed %u: %s", seed, osdp_error_message());
        for (int i = 0; i < I.n; i++) ck_assert_msg(cb[i] == ce[i], "seed %u: capped exact differs at item %d", seed, i);
        I.p.time_cap = rb.total_time * (1 - 1e-6);
        osdp_status sc = osdp_search_exact(&I.p, &re);
        /* none, or (the cap within the rounding of the fixed-point time) the optimum */
        ck_assert_msg(sc == OSDP_ERR_INFEASIBLE || (sc == OSDP_OK && re.total_time == rb.total_time),
                      "seed %u: %d, %.17g below the optimum %.17g", seed, sc, re.total_time, rb.total_time);
        below += sc == OSDP_ERR_INFEASIBLE;
        I.p.time_cap = 0; /* none */
        ck_assert(osdp_search_exact(&I.p, &re) == OSDP_OK);
        for (int i = 0; i < I.n; i++) ck_assert(cb[i] == ce[i]);
        capped++;
        inst_free(&I);
    }
    osdp_search_workspace_free(ws);
    printf("time cap: %d instances, %d of them with nothing below the optimum\n", capped, below);
    ck_assert(capped > 300 && below > capped / 2);
}
END_TEST

START_TEST(test_infeasible)
{
    inst I;
    inst_alloc(&I, 3);
    for (int i = 0; i < 3; i++) {
        inst_item(&I, i, 2);
        I.m[i][0] = 1000 + i;
        I.m[i][1] = 500 + i;
        I.t[i][0] = 1.0;
        I.t[i][1] = 2.0;
    }
    I.p.mem_limit = 1502; /* min is 1503 */
    int ch[3];
    osdp_status (*fn[3])(const osdp_search_problem *, osdp_search_result *) = {osdp_search_brute,
                                                                              osdp_search_exact, osdp_search_dfs};
    for (int f = 0; f < 3; f++) {
        osdp_search_result r = {.choice = ch};
        ck_assert_int_eq(fn[f](&I.p, &r), OSDP_ERR_INFEASIBLE);
        ck_assert_int_eq(r.min_mem, 1503);
        ck_assert_ptr_nonnull(strstr(osdp_error_message(), "1503"));
        ck_assert_ptr_nonnull(strstr(osdp_error_message(), "1502"));
    }
    I.p.mem_limit = 1503; /* exactly met: all items at their smallest memory */
    for (int f = 0; f < 3; f++) {
        osdp_search_result r = {.choice = ch};
        ck_assert_int_eq(fn[f](&I.p, &r), OSDP_OK);
        ck_assert_int_eq(r.total_mem, 1503);
        ck_assert(r.total_time == 6.0);
    }
    inst_free(&I);
}
END_TEST

START_TEST(test_input_errors)
{
    inst I;
    inst_alloc(&I, 2);
    inst_item(&I, 0, 2);
    inst_item(&I, 1, 2);
    I.p.mem_limit = 100;
    int ch[2];
    osdp_search_result r = {.choice = ch};
    osdp_status (*fn[3])(const osdp_search_problem *, osdp_search_result *) = {osdp_search_brute,
                                                                              osdp_search_exact, osdp_search_dfs};
    for (int f = 0; f < 3; f++) {
        ck_assert_int_eq(fn[f](NULL, &r), OSDP_ERR_INPUT);
        ck_assert_int_eq(fn[f](&I.p, NULL), OSDP_ERR_INPUT);
        I.m[1][1] = -1;
        ck_assert_int_eq(fn[f](&I.p, &r), OSDP_ERR_INPUT);
        I.m[1][1] = 0;
        I.t[0][1] = NAN;
        ck_assert_int_eq(fn[f](&I.p, &r), OSDP_ERR_INPUT);
        I.t[0][1] = -1.0;
        ck_assert_int_eq(fn[f](&I.p, &r), OSDP_ERR_INPUT);
        I.t[0][1] = INFINITY;
        ck_assert_int_eq(fn[f](&I.p, &r), OSDP_ERR_INPUT);
        I.t[0][1] = 0.0;
        I.k[1] = 0;
        ck_assert_int_eq(fn[f](&I.p, &r), OSDP_ERR_INPUT);
        I.k[1] = 2;
        I.m[0][0] = 0x7fffffffffffffffLL; /* overflowing sums */
        ck_assert_int_eq(fn[f](&I.p, &r), OSDP_ERR_INPUT);
        I.m[0][0] = 0;
        r.choice = NULL;
        ck_assert_int_eq(fn[f](&I.p, &r), OSDP_ERR_INPUT);
        r.choice = ch;
        ck_assert_int_eq(fn[f](&I.p, &r), OSDP_OK);
    }
    /* no items: the empty plan */
    osdp_search_problem e = {.n_items = 0, .mem_limit = 0};
    for (int f = 0; f < 3; f++) {
        osdp_search_result r0 = {.choice = NULL};
        ck_assert_int_eq(fn[f](&e, &r0), OSDP_OK);
        ck_assert(r0.total_time == 0.0 && r0.total_mem == 0);
    }
    inst_free(&I);
}
END_TEST

/* GPT-shaped: embed, (attn, mlp) x layers, head; k = 2 (DP / ZDP) or 5 (4
 * slices, c of them ZDP).  Rough cost model, 8 devices. */
static void gpt_instance(inst *I, int layers, int width, int k, double limit)
{
    const double V = 50257, T = 1024, tokens = 8 * T, ndev = 8, bw = 100e9, alpha = 10e-6, flops = 100e12;
    inst_alloc(I, 2 * layers + 2);
    for (int i = 0; i < I->n; i++) {
        double d = width, P = i == 0 ? (V + T) * d : i == I->n - 1 ? V * d + 2 * d
                             : (i % 2 ? 4 * d * d + 6 * d : 8 * d * d + 7 * d);
        double act = T * d * (i % 2 ? 4 : 6), comp = 6 * P * tokens / flops;
        double dp = 2 * (ndev - 1) / ndev * 2 * P / bw, zdp = 3 * (ndev - 1) / ndev * 2 * P / bw;
        inst_item(I, i, k);
        for (int c = 0; c < k; c++) {
            double f = (double)c / (k - 1), sl = k == 2 ? 1 : 4;
            I->m[i][c] = (long long)(16 * P * (1 - f) + 16 * P / ndev * f + act);
            I->t[i][c] = comp * (k == 2 ? 1.0 : 1.03) + (1 - f) * dp + f * zdp +
                         alpha * (2 * (ndev - 1) * sl * (1 - f) + 3 * (ndev - 1) * sl * f);
        }
    }
    I->p.mem_limit = (long long)limit;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static void compare_large(int layers, int k, double limit, double dfs_s)
{
    inst I;
    gpt_instance(&I, layers, 1536, k, limit);
    int *ce = calloc((size_t)I.n, sizeof *ce), *cd = calloc((size_t)I.n, sizeof *cd);
    osdp_search_result re = {.choice = ce}, rd = {.choice = cd};
    double t0 = now_ms();
    ck_assert_msg(osdp_search_exact(&I.p, &re) == OSDP_OK, "%s", osdp_error_message());
    double t1 = now_ms();
    check_plan(&I, &re, "exact");
    I.p.time_limit_s = dfs_s;
    ck_assert_msg(osdp_search_dfs(&I.p, &rd) == OSDP_OK, "%s", osdp_error_message());
    double t2 = now_ms();
    check_plan(&I, &rd, "dfs");
    printf("N&D %d layers k=%d limit %.0e: exact %.2f ms (%lld states), time %.6f s, mem %lld; ", layers, k, limit,
           t1 - t0, re.nodes, re.total_time, re.total_mem);
    if (rd.timed_out) {
        printf("dfs timed out after %.0f s (%lld nodes): comparison skipped\n", (t2 - t1) / 1e3, rd.nodes);
        ck_assert(rd.total_time >= re.total_time * (1 - 1e-12)); /* its incumbent cannot beat the optimum */
    } else {
        printf("dfs agrees, %.1f ms (%lld nodes)\n", t2 - t1, rd.nodes);
        for (int i = 0; i < I.n; i++) ck_assert_int_eq(ce[i], cd[i]);
    }
    free(ce);
    free(cd);
    inst_free(&I);
}

START_TEST(test_nd_small) /* DFS completes: exact and DFS must agree */
{
    compare_large(4, 5, 4e9, 600);
    compare_large(6, 5, 5e9, 600);
    compare_large(12, 2, 8e9, 600);
}
END_TEST

/* Beyond the DFS: it times out, and its incumbent must not beat the optimum.
 * 1 s, not more: on both instances the incumbent after 0.1 s, 1 s and 10 s
 * (22 M to 2.7 G nodes) was the same plan, 0.05% and 0.1% above the optimum,
 * so a longer search only costs the suite time. */
START_TEST(test_nd96)
{
    compare_large(96, 5, 8e9, 1);
    compare_large(96, 2, 16e9, 1);
}
END_TEST

START_TEST(test_dfs_timeout)
{
    inst I;
    gpt_instance(&I, 96, 1536, 5, 8e9);
    I.p.time_limit_s = 0.02;
    int *c = calloc((size_t)I.n, sizeof *c);
    osdp_search_result r = {.choice = c};
    double t0 = now_ms();
    ck_assert_int_eq(osdp_search_dfs(&I.p, &r), OSDP_OK);
    ck_assert(r.timed_out);
    ck_assert(now_ms() - t0 < 2000);
    check_plan(&I, &r, "dfs (timed out)");
    free(c);
    inst_free(&I);
}
END_TEST

static Suite *search_suite(void)
{
    const TTest *small[] = {test_time_cap, test_infeasible, test_input_errors, NULL};
    const TTest *small_slow[] = {test_random_small, test_random_medium, test_split_groups, test_shared_slopes, NULL};
    const TTest *gpt[] = {test_nd_small, test_dfs_timeout, NULL};
    const TTest *gpt_slow[] = {test_nd96, NULL};
    const osdp_check_case cases[] = {
        {.name = "small", .tests = small}, {.name = "small_slow", .tests = small_slow, .slow = 1},
        {.name = "gpt", .tests = gpt}, {.name = "gpt_slow", .tests = gpt_slow, .slow = 1},
    };
    return osdp_check_suite("search", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = search_suite};

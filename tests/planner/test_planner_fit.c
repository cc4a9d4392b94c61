/* The planner's fit / no-fit verdict and its plan against every plan, with
 * recompute a choice of the search (--recompute auto) and operators split
 * (k of g slices ZDP): the search proves a no-fit up front from the
 * smallest peak (plan_search.c) when the plan of fewest held bytes does not
 * fit, so the limits sit a byte below (that proof, in every such case
 * here), at and above the smallest peak of any plan (a plan fits: no
 * verdict of no-fit; on these models the plan of fewest held bytes fits
 * whenever any does, so the proof is not reached there).
 * Brute force: every plan's model peak and step time (osdp_cost_peak,
 * osdp_cost_step_time with the plan's recompute flags). */
#include "config.h"

#include "check_main.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osdp/cost_model.h"
#include "osdp/device.h"
#include "osdp/planner.h"

#include "test_inputs.h"

static unsigned g_seed = 12345;
static unsigned rnd(void)
{
    g_seed = g_seed * 1103515245u + 12345u;
    return (g_seed >> 8) & 0xffffff;
}

typedef struct every_plan {
    int n_plans;
    long long *peak;
    double *time;
    long long least;            /* the smallest peak */
} every_plan;

/* every plan of the planner's choices: per operator k of g ZDP (g = split
 * where the operator can be split, else 1), and recompute or not where the
 * operator can recompute */
static void enumerate(every_plan *E, const osdp_layout *L, const osdp_device *d, int N, int b, int split)
{
    const int n = L->n_ops;
    osdp_cost_model cm;
    osdp_cost_model_init(&cm, L, d, &(osdp_step_geometry){.n_ranks = N, .prefetch = 1}, OSDP_COST_PAPER, NULL);
    int g[64], rc[64], digits[64];
    long long total = 1;
    ck_assert(n <= 64);
    for (int i = 0; i < n; i++) {
        g[i] = osdp_cost_can_split(&cm, i, split) ? split : 1;
        rc[i] = osdp_op_can_recompute(L->op[i].type) ? 2 : 1;
        total *= (g[i] + 1) * rc[i];
    }
    ck_assert(total <= 300000);
    E->n_plans = (int)total;
    E->peak = malloc(sizeof *E->peak * (size_t)total);
    E->time = malloc(sizeof *E->time * (size_t)total);
    ck_assert(E->peak && E->time);
    osdp_plan p;
    ck_assert(osdp_plan_alloc(&p, n) == OSDP_OK);
    E->least = -1;
    for (long long code = 0; code < total; code++) {
        long long c = code;
        for (int i = 0; i < n; i++) {
            digits[i] = (int)(c % ((g[i] + 1) * rc[i]));
            c /= (g[i] + 1) * rc[i];
            p.slices[i] = g[i];
            p.zdp_slices[i] = digits[i] % (g[i] + 1);
            p.recompute[i] = digits[i] / (g[i] + 1);
        }
        cm.recompute = p.recompute;
        E->peak[code] = osdp_cost_peak(&cm, &p, b, NULL);
        E->time[code] = osdp_cost_step_time(&cm, &p, b, 1);
        if (E->least < 0 || E->peak[code] < E->least) E->least = E->peak[code];
    }
    osdp_plan_free(&p);
}

START_TEST(test_verdict_against_every_plan)
{
    static const struct { const char *model; int T, split; } cases[] = {
        {"tiny", 16, 1}, {"tiny", 64, 1}, {"tiny", 32, 2}, {"tiny", 48, 2}, {"bench_l4_d512", 16, 1},
        {"bench_l4_d512", 128, 1}, {"ic_tiny_mixed", 16, 1}, {"ic_tiny_mixed", 64, 1}, {"ic_tiny_mixed", 32, 2},
    };
    int no_fit = 0, fit_at_least = 0, fits = 0;
    for (size_t m = 0; m < sizeof cases / sizeof *cases; m++) {
        osdp_layout L;
        load_layout(&L, cases[m].model, cases[m].T);
        for (int r = 0; r < 4; r++) {
            osdp_device d;
            load_device(&d, "cpu_2core"); /* fp32 throughout: the runtime's schedule checks each plan's peak */
            if (r > 0) randomize_device(&d, rnd);
            const int N = 2 + (int)(rnd() % 7), b = 1 + (int)(rnd() % 4);
            every_plan E;
            enumerate(&E, &L, &d, N, b, cases[m].split);
            long long most = 0;
            for (int c = 0; c < E.n_plans; c++)
                if (E.peak[c] > most) most = E.peak[c];
            for (int li = 0; li < 6; li++) {
                long long limit = li < 3 ? E.least - 1 + li : E.least + (long long)((double)(most - E.least) * li / 8.0);
                double best = INFINITY;
                for (int c = 0; c < E.n_plans; c++)
                    if (E.peak[c] <= limit && E.time[c] < best) best = E.time[c];
                osdp_planner_options o;
                osdp_planner_defaults(&o);
                o.geo.n_ranks = N;
                o.split = cases[m].split;
                o.recompute_auto = 1;
                o.mem_limit = limit;
                osdp_planner_result res;
                osdp_status s = osdp_planner_plan_batch(&L, &d, &o, b, 1, &res);
                const char *what = cases[m].model;
                if (limit < E.least) {
                    ck_assert_msg(s == OSDP_ERR_INFEASIBLE, "%s N=%d b=%d limit %lld (least %lld): status %d", what, N,
                                  b, limit, E.least, s);
                    no_fit++;
                } else {
                    ck_assert_msg(s == OSDP_OK, "%s N=%d b=%d limit %lld (least %lld): a plan fits, planner says %s",
                                  what, N, b, limit, E.least, osdp_error_message());
                    ck_assert(res.peak_bytes <= limit);
                    ck_assert_msg(fabs(res.step_s - best) <= 1e-12 * best, "%s N=%d b=%d limit %lld: %.17g, best %.17g",
                                  what, N, b, limit, res.step_s, best);
                    fits++;
                    fit_at_least += limit == E.least;
                }
                osdp_planner_result_free(&res);
            }
            free(E.peak);
            free(E.time);
        }
        osdp_layout_free(&L);
    }
    printf("verdicts: %d no-fit a byte short, %d fits (%d at the smallest peak exactly), all as every plan says\n",
           no_fit, fits, fit_at_least);
    ck_assert(no_fit == 36 && fit_at_least == 36 && fits == 180);
}
END_TEST

static Suite *verdict_suite(void)
{
    const TTest *tests[] = {test_verdict_against_every_plan, NULL};
    const osdp_check_case cases[] = {{.name = "verdict", .tests = tests}};
    return osdp_check_suite("planner_fit", cases, sizeof cases / sizeof cases[0]);
}

const osdp_check_program osdp_check_this_program = {.suite = verdict_suite};

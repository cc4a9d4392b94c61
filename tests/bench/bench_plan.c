/* Planner timing in CPU time (scripts/bench_planner): the wall time that
 * `osdp_gpt plan --json` reports (planner_ms) counts every moment the
 * process waits for a core, and on a shared machine that is most of it;
 * the process CPU time of the same call does not.  One scheduler run
 * (osdp_planner_run, the OSDP plan only, no baselines), repeated:
 *
 *   make tests/bench/bench_plan
 *   tests/bench/bench_plan MODEL DEVICE RANKS SEQ SPLIT RECOMPUTE [REPEATS [MEM_LIMIT]]
 *
 * SPLIT: g (1 = DP / ZDP) or auto; RECOMPUTE: none or auto.  Prints one line
 *   fits|nofit  cpu_ms  wall_ms  micro_batch  knapsacks
 * (best CPU and best wall time over the repeats, default 5). */
#define _POSIX_C_SOURCE 200809L

#include "osdp/device.h"
#include "osdp/layout.h"
#include "osdp/model_config.h"
#include "osdp/planner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: %s MODEL DEVICE RANKS SEQ SPLIT RECOMPUTE [REPEATS [MEM_LIMIT]]\n", argv[0]);
        return 2;
    }
    osdp_model_config cfg;
    osdp_device dev;
    osdp_layout L;
    if (osdp_model_config_load(&cfg, argv[1]) != OSDP_OK || osdp_device_load(&dev, argv[2]) != OSDP_OK
        || osdp_layout_build(&L, &cfg, atoi(argv[4])) != OSDP_OK) {
        fprintf(stderr, "%s: %s\n", argv[0], osdp_error_message());
        return 1;
    }
    osdp_planner_options o;
    osdp_planner_defaults(&o);
    o.geo.n_ranks = atoi(argv[3]);
    if (strcmp(argv[5], "auto") == 0) o.split_auto = 1;
    else o.split = atoi(argv[5]);
    o.recompute_auto = strcmp(argv[6], "auto") == 0;
    const int repeats = argc > 7 ? atoi(argv[7]) : 5;
    if (argc > 8) o.mem_limit = atoll(argv[8]);
    double best_cpu = 1e30, best_wall = 1e30;
    osdp_planner_result r;
    osdp_status s = OSDP_OK;
    for (int rep = 0; rep < repeats; rep++) {
        double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), w0 = clock_s(CLOCK_MONOTONIC);
        s = osdp_planner_run(&L, &dev, &o, &r);
        double cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0, wall = clock_s(CLOCK_MONOTONIC) - w0;
        if (cpu < best_cpu) best_cpu = cpu;
        if (wall < best_wall) best_wall = wall;
        if (s != OSDP_OK && s != OSDP_ERR_INFEASIBLE) {
            fprintf(stderr, "%s: %s\n", argv[0], osdp_error_message());
            return 1;
        }
        if (rep + 1 < repeats || s != OSDP_OK) osdp_planner_result_free(&r);
    }
    if (s == OSDP_OK) {
        printf("fits %.3f %.3f %d %lld\n", 1e3 * best_cpu, 1e3 * best_wall, r.plan.geo.micro_batch, r.searches);
        osdp_planner_result_free(&r);
    } else {
        printf("nofit %.3f %.3f - -\n", 1e3 * best_cpu, 1e3 * best_wall);
    }
    osdp_layout_free(&L);
    return 0;
}

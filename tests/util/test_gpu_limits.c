/* The GPU path's two bounds as pure functions (issue 30), tested without a GPU:
 *   - the launch bound (src/util/launch_gate.h): however the launches come
 *     (one by one, or many per call), the host marks the stream every
 *     `bound` launches and waits for the previous mark before the next, so
 *     that no more than 2 x (bound + one call's launches) are ever queued
 *     past the last mark it saw done; a wait for the whole stream clears the marks;
 *     OSDP_CUDA_LAUNCH_BOUND's values are checked;
 *   - the memory cap after NCCL's warm-up (osdp/memory.h): the runtime's
 *     limit is the smaller of the one asked for and the card's free memory
 *     less the margin, and a card with no more than the margin free is an
 *     out-of-memory error naming both figures; the CPU tables (no mem_info)
 *     keep --mem-limit's emulated limit. */
#include "config.h"

#include "check_main.h"

#include <check.h>
#include <string.h>

#include "osdp/compute.h"
#include "osdp/memory.h"
#include "util/launch_gate.h"

/* A simulated stream: the host queues `calls` calls of `per_call` launches;
 * queued counts launches the host has not seen done.  A wait makes the
 * stream finish everything up to the waited mark.  Returns the largest
 * number queued past the last mark seen done, at any moment. */
static unsigned simulate(unsigned bound, unsigned per_call, unsigned calls, unsigned *marks, unsigned *waits)
{
    osdp_launch_gate g;
    osdp_launch_gate_init(&g, bound);
    unsigned long long issued = 0, mark_at = 0, seen_done = 0;
    int have_mark = 0;
    unsigned worst = 0;
    *marks = *waits = 0;
    for (unsigned c = 0; c < calls; c++) {
        issued += per_call;   /* the launches go into the queue first: the stream may be stuck */
        if (issued - seen_done > worst) worst = (unsigned)(issued - seen_done);
        switch (osdp_launch_gate_note(&g, per_call)) {
        case OSDP_GATE_GO: break;
        case OSDP_GATE_WAIT_AND_MARK:
            ck_assert(have_mark);
            seen_done = mark_at;   /* the host returns from the wait once the mark is done */
            (*waits)++;
            /* fall through */
        case OSDP_GATE_MARK:
            mark_at = issued;
            have_mark = 1;
            (*marks)++;
            break;
        }
    }
    return worst;
}

START_TEST(test_launch_bound_holds)
{
    const unsigned bounds[] = {1, 7, 64, OSDP_LAUNCH_BOUND_DEFAULT, OSDP_LAUNCH_BOUND_MAX};
    const unsigned per_call[] = {1, 3, 78};   /* 78: the bf16 LM head's chunked backward, 3 per chunk */
    for (size_t i = 0; i < sizeof bounds / sizeof *bounds; i++)
        for (size_t j = 0; j < sizeof per_call / sizeof *per_call; j++) {
            unsigned marks, waits, b = bounds[i], n = per_call[j];
            unsigned worst = simulate(b, n, 10000, &marks, &waits);
            ck_assert_msg(worst <= 2 * (b + n), "bound %u, %u per call: %u queued past the last mark seen", b, n, worst);
            ck_assert_msg(worst > b, "bound %u, %u per call: the host waited too early (%u queued)", b, n, worst);
            ck_assert_uint_eq(waits + 1, marks);   /* every mark but the first waits for the one before */
            ck_assert_uint_ge(marks + 1, 10000u * n / (b + n));
        }
    /* the default leaves the driver's queue (about 1024 launches) room for a call of 78 launches */
    ck_assert_uint_le(2 * (OSDP_LAUNCH_BOUND_DEFAULT + 78), 1024u);
    ck_assert_uint_le(2 * (OSDP_LAUNCH_BOUND_MAX + 78), 1024u);
}
END_TEST

START_TEST(test_launch_gate_drained)
{
    osdp_launch_gate g;
    osdp_launch_gate_init(&g, 4);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(osdp_launch_gate_note(&g, 1), OSDP_GATE_GO);
    ck_assert_int_eq(osdp_launch_gate_note(&g, 1), OSDP_GATE_MARK);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(osdp_launch_gate_note(&g, 1), OSDP_GATE_GO);
    ck_assert_int_eq(osdp_launch_gate_note(&g, 1), OSDP_GATE_WAIT_AND_MARK);
    /* the host waited for the whole stream: the next mark needs no wait, and counts from zero */
    osdp_launch_gate_drained(&g);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(osdp_launch_gate_note(&g, 1), OSDP_GATE_GO);
    ck_assert_int_eq(osdp_launch_gate_note(&g, 1), OSDP_GATE_MARK);
    ck_assert_int_eq(osdp_launch_gate_note(&g, 9), OSDP_GATE_WAIT_AND_MARK);   /* a call of many launches */
}
END_TEST

START_TEST(test_launch_bound_parse)
{
    unsigned b = 0;
    ck_assert_int_eq(osdp_launch_bound_parse(NULL, &b), OSDP_OK);
    ck_assert_uint_eq(b, OSDP_LAUNCH_BOUND_DEFAULT);
    ck_assert_int_eq(osdp_launch_bound_parse("", &b), OSDP_OK);
    ck_assert_uint_eq(b, OSDP_LAUNCH_BOUND_DEFAULT);
    ck_assert_int_eq(osdp_launch_bound_parse("32", &b), OSDP_OK);
    ck_assert_uint_eq(b, 32);
    const char *bad[] = {"0", "-5", "385", "12x", "lots"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(osdp_launch_bound_parse(bad[i], &b), OSDP_ERR_INPUT);
        ck_assert_ptr_nonnull(strstr(osdp_error_message(), "OSDP_CUDA_LAUNCH_BOUND"));
    }
}
END_TEST

#define GiB ((size_t)1 << 30)

START_TEST(test_memory_cap_to_free)
{
    size_t limit;
    int capped;
    /* the case: a device file's 76 GiB, 74.5 GiB free after six communicators warmed up */
    ck_assert_int_eq(osdp_memory_cap_to_free(76 * GiB, 74 * GiB + GiB / 2, GiB, &limit, &capped), OSDP_OK);
    ck_assert_uint_eq(limit, 73 * GiB + GiB / 2);
    ck_assert_int_eq(capped, 1);
    /* a --mem-limit below what is free stays */
    ck_assert_int_eq(osdp_memory_cap_to_free(8 * GiB, 74 * GiB, GiB, &limit, &capped), OSDP_OK);
    ck_assert_uint_eq(limit, 8 * GiB);
    ck_assert_int_eq(capped, 0);
    /* no limit asked (train without --mem-limit): the card's free memory less the margin */
    ck_assert_int_eq(osdp_memory_cap_to_free(0, 79 * GiB, GiB, &limit, &capped), OSDP_OK);
    ck_assert_uint_eq(limit, 78 * GiB);
    ck_assert_int_eq(capped, 1);
    /* exactly what is free less the margin: not capped */
    ck_assert_int_eq(osdp_memory_cap_to_free(10 * GiB, 11 * GiB, GiB, &limit, &capped), OSDP_OK);
    ck_assert_uint_eq(limit, 10 * GiB);
    ck_assert_int_eq(capped, 0);
    /* no more than the margin free: an OOM naming both */
    ck_assert_int_eq(osdp_memory_cap_to_free(0, GiB, GiB, &limit, &capped), OSDP_ERR_OOM);
    ck_assert_ptr_nonnull(strstr(osdp_error_message(), "free after the communicators' set-up"));
    ck_assert_int_eq(osdp_memory_cap_to_free(4 * GiB, 100, GiB, &limit, &capped), OSDP_ERR_OOM);
}
END_TEST

START_TEST(test_memory_device_limit_cpu)
{
    size_t limit, free_bytes;
    int capped;
    ck_assert_ptr_null(osdp_compute_cpu.mem_info);
    ck_assert_int_eq(osdp_memory_device_limit(&osdp_compute_cpu, 8 * GiB, &limit, &capped, &free_bytes), OSDP_OK);
    ck_assert_uint_eq(limit, 8 * GiB);
    ck_assert_int_eq(capped, 0);
    ck_assert_int_eq(osdp_memory_device_limit(&osdp_compute_cpu_bf16, 0, &limit, &capped, &free_bytes), OSDP_OK);
    ck_assert_uint_eq(limit, 0);
    ck_assert_ptr_null(osdp_compute_cpu.timer_start);
}
END_TEST

static Suite *gpu_limits_suite(void)
{
    const TTest *launch[] = {test_launch_bound_holds, test_launch_gate_drained, test_launch_bound_parse, NULL};
    const TTest *memory[] = {test_memory_cap_to_free, test_memory_device_limit_cpu, NULL};
    const osdp_check_case cases[] = {
        {.name = "launch_bound", .tests = launch},
        {.name = "memory_cap", .tests = memory},
    };
    return osdp_check_suite("gpu_limits", cases, sizeof cases / sizeof cases[0]);
}
const osdp_check_program osdp_check_this_program = {.suite = gpu_limits_suite};

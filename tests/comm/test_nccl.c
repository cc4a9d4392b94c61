/* The NCCL communication backend on 2 real ranks, one GPU each (run by
 * tests/comm/test_nccl.sh under mpiexec -n 2).
 *
 *   test_nccl            collectives: fp32 and bf16 (bit patterns) all-gathers,
 *                        fp32 reduce-scatter and all-reduce (values exact in
 *                        fp32, so the checks are bitwise), broadcast, a group
 *                        (ncclGroupStart/End) of mixed non-blocking calls,
 *                        more requests in flight than the backend has slots,
 *                        the host-buffer MPI fallback, the traffic counters,
 *                        the barrier and the teardown (ncclCommFinalize);
 *   test_nccl hang       rank 1 stops itself (SIGSTOP) after set-up; rank 0's
 *                        next collective must return OSDP_ERR_COMM within the
 *                        timeout (OSDP_COMM_TIMEOUT_S, set by the script) with a
 *                        message naming it; rank 0 then ends the job the way
 *                        training does (message, MPI_Abort);
 *   test_nccl hang-init  rank 1 stops before set-up: rank 0's set-up must time
 *                        out the same way;
 *   test_nccl hang-stream rank 1 stops after set-up; rank 0 starts an all-reduce,
 *                        waits for it (the compute stream waits on the GPU)
 *                        and reads the buffer back: to_host's wait for the
 *                        compute stream must time out and end the job with a
 *                        message.
 * The collectives also run on 1 rank (scripts/gpu_selftest on one GPU:
 * mpiexec -n 1 tests/comm/test_nccl), the hang modes need 2.
 * Exit 77 (automake's SKIP) with the reason on every rank when fewer GPUs
 * than ranks are visible on a node (NCCL needs one GPU per rank). */
#include "config.h"
#include "osdp/comm.h"
#include "osdp/compute.h"
#include "osdp/dtype.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rank, failures;

#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond)) {                                                        \
            failures++;                                                       \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

static void pass(const char *what)
{
    if (rank == 0) printf("PASS: %s\n", what);
}

static void *dev(size_t bytes)
{
    void *p = osdp_compute_cuda.alloc(bytes);
    if (!p) {
        fprintf(stderr, "rank %d: cuda alloc of %zu bytes failed\n", rank, bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* fp32 all-gather and bf16 all-gather: every element from its rank, bitwise */
static void check_all_gather(osdp_comm *c, size_t n)
{
    const int N = c->size;
    float *h = malloc(n * N * sizeof *h);
    uint16_t *h16 = malloc(n * N * sizeof *h16);
    for (size_t i = 0; i < n; i++) {
        h[i] = (float)(rank * 100000 + (int)i);
        h16[i] = (uint16_t)(rank * 7919 + (int)i);
    }
    float *shard = dev(n * sizeof *h), *full = dev(n * N * sizeof *h);
    uint16_t *shard16 = dev(n * sizeof *h16), *full16 = dev(n * N * sizeof *h16);
    osdp_compute_cuda.to_device(shard, h, n * sizeof *h);
    osdp_compute_cuda.to_device(shard16, h16, n * sizeof *h16);
    EXPECT(osdp_comm_all_gather(c, shard, full, n, OSDP_FLOAT32, NULL) == OSDP_OK, "%s", osdp_error_message());
    EXPECT(osdp_comm_all_gather(c, shard16, full16, n, OSDP_BFLOAT16, NULL) == OSDP_OK, "%s", osdp_error_message());
    osdp_compute_cuda.to_host(h, full, n * N * sizeof *h);
    osdp_compute_cuda.to_host(h16, full16, n * N * sizeof *h16);
    int bad = 0;
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < n; i++) {
            bad += h[r * n + i] != (float)(r * 100000 + (int)i);
            bad += h16[r * n + i] != (uint16_t)(r * 7919 + (int)i);
        }
    EXPECT(bad == 0, "all-gather of %zu elements per rank: %d wrong elements", n, bad);
    osdp_compute_cuda.free(shard), osdp_compute_cuda.free(full);
    osdp_compute_cuda.free(shard16), osdp_compute_cuda.free(full16);
    free(h), free(h16);
}

/* reduce-scatter and all-reduce of small integers and halves: exact sums */
static void check_reductions(osdp_comm *c, size_t n)
{
    const int N = c->size;
    float *h = malloc(n * N * sizeof *h);
    for (size_t j = 0; j < n * N; j++) h[j] = (float)rank + 0.5f * (float)(j % 1000);
    float *full = dev(n * N * sizeof *h), *shard = dev(n * sizeof *h);
    osdp_compute_cuda.to_device(full, h, n * N * sizeof *h);
    EXPECT(osdp_comm_reduce_scatter(c, full, shard, n, OSDP_FLOAT32, NULL) == OSDP_OK, "%s", osdp_error_message());
    EXPECT(osdp_comm_all_reduce(c, full, n * N, OSDP_FLOAT32, NULL) == OSDP_OK, "%s", osdp_error_message());
    const float rank_sum = (float)(N * (N - 1) / 2);
    osdp_compute_cuda.to_host(h, shard, n * sizeof *h);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != rank_sum + (float)N * 0.5f * (float)((rank * n + i) % 1000);
    osdp_compute_cuda.to_host(h, full, n * N * sizeof *h);
    for (size_t j = 0; j < n * N; j++) bad += h[j] != rank_sum + (float)N * 0.5f * (float)(j % 1000);
    EXPECT(bad == 0, "reduce-scatter / all-reduce of %zu elements per rank: %d wrong sums", n, bad);
    osdp_compute_cuda.free(full), osdp_compute_cuda.free(shard);
    free(h);
}

/* a group of non-blocking all-gathers (fp32, bf16) and a reduce-scatter,
 * then more requests in flight than the backend has slots */
static void check_group_and_many(osdp_comm *c)
{
    const int N = c->size, K = 3, MANY = 150;
    const size_t n = 4099;
    float *h = malloc(n * N * sizeof *h);
    for (size_t i = 0; i < n * N; i++) h[i] = (float)(rank + 1);
    float *src = dev(n * N * sizeof *h), *dst[3], *rs = dev(n * sizeof *h);
    osdp_compute_cuda.to_device(src, h, n * N * sizeof *h);
    osdp_request req[3] = {{0}}, rs_req = {0};
    for (int k = 0; k < K; k++) dst[k] = dev(n * N * sizeof *h);
    EXPECT(osdp_comm_group_start(c) == OSDP_OK, "%s", osdp_error_message());
    for (int k = 0; k < K; k++)
        EXPECT(osdp_comm_all_gather(c, src, dst[k], n >> k, k == 1 ? OSDP_BFLOAT16 : OSDP_FLOAT32, &req[k]) == OSDP_OK,
               "%s", osdp_error_message());
    EXPECT(osdp_comm_reduce_scatter(c, src, rs, n, OSDP_FLOAT32, &rs_req) == OSDP_OK, "%s", osdp_error_message());
    EXPECT(osdp_comm_group_end(c) == OSDP_OK, "%s", osdp_error_message());
    for (int k = K - 1; k >= 0; k--) EXPECT(osdp_comm_wait(c, &req[k]) == OSDP_OK, "%s", osdp_error_message());
    EXPECT(osdp_comm_wait(c, &rs_req) == OSDP_OK, "%s", osdp_error_message());
    int bad = 0;
    osdp_compute_cuda.to_host(h, dst[0], n * N * sizeof *h);
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < n; i++) bad += h[r * n + i] != (float)(r + 1);
    osdp_compute_cuda.to_host(h, rs, n * sizeof *h);
    for (size_t i = 0; i < n; i++) bad += h[i] != (float)(N * (N + 1) / 2);
    EXPECT(bad == 0, "grouped collectives: %d wrong elements", bad);

    osdp_request *many = calloc(MANY, sizeof *many);
    for (int k = 0; k < MANY; k++)
        EXPECT(osdp_comm_all_gather(c, src, dst[k % K], 257, OSDP_FLOAT32, &many[k]) == OSDP_OK, "%s",
               osdp_error_message());
    for (int k = MANY - 1; k >= 0; k--) EXPECT(osdp_comm_wait(c, &many[k]) == OSDP_OK, "%s", osdp_error_message());
    free(many);
    for (int k = 0; k < K; k++) osdp_compute_cuda.free(dst[k]);
    osdp_compute_cuda.free(src), osdp_compute_cuda.free(rs);
    free(h);
}

/* rank 1 stops (as a rank stuck in a driver call does); rank 0 must time out */
static int hang(osdp_comm *c, MPI_Comm world, int before_setup, int on_stream)
{
    if (before_setup) {
        if (rank == 1) raise(SIGSTOP);
    } else {
        osdp_status s = osdp_comm_create_nccl(c, &world, rank);
        if (s != OSDP_OK) {
            fprintf(stderr, "rank %d: set-up failed: %s\n", rank, osdp_error_message());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (rank == 1) raise(SIGSTOP);
    }
    double t0 = now();
    osdp_status s = OSDP_OK;
    if (before_setup) {
        s = osdp_comm_create_nccl(c, &world, rank);
    } else if (on_stream) {
        const size_t n = (1 << 20) / sizeof(float);
        float *buf = dev(n * sizeof(float)), first = 0;
        osdp_request req = {0};
        s = osdp_comm_all_reduce(c, buf, n, OSDP_FLOAT32, &req);
        if (s == OSDP_OK) s = osdp_comm_wait(c, &req);   /* returns: the compute stream waits */
        fprintf(stderr, "rank %d: wait returned %s; reading the buffer back\n", rank, osdp_status_name(s));
        osdp_compute_cuda.to_host(&first, buf, sizeof first);   /* must end the job within the timeout */
    } else {
        float *buf = dev(1 << 20);
        s = osdp_comm_all_reduce(c, buf, (1 << 20) / sizeof(float), OSDP_FLOAT32, NULL);
    }
    fprintf(stderr, "rank %d: after %.1f s: %s: %s\n", rank, now() - t0, osdp_status_name(s),
            s == OSDP_OK ? "completed (a stopped peer cannot have joined)" : osdp_error_message());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, s == OSDP_ERR_COMM ? 3 : 1);   /* as osdp_fatal does */
    return 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm world = MPI_COMM_WORLD;
    int size, local_rank, local_size, gpus = 0;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    MPI_Comm node;
    MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    cudaError_t err = cudaGetDeviceCount(&gpus);
    if (err != cudaSuccess) gpus = 0;
    /* the collectives run on any number of ranks (1: scripts/gpu_selftest's check on one GPU); the hang
     * modes need a peer to stop */
    const int min_ranks = argc > 1 ? 2 : 1;
    int enough = size >= min_ranks && gpus >= local_size, all_enough = 0;
    MPI_Allreduce(&enough, &all_enough, 1, MPI_INT, MPI_MIN, world);
    if (!all_enough) {
        if (rank == 0)
            printf("SKIP: test_nccl%s needs %d rank(s) and one GPU per rank: %d rank(s), %d GPU(s) visible to %d rank(s) "
                   "on rank 0's node (%s)\n", argc > 1 ? " (hang modes)" : "", min_ranks, size, gpus, local_size,
                   err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount succeeded");
        MPI_Finalize();
        return 77;
    }
    osdp_status s = osdp_compute_cuda.init(local_rank, 1);
    if (s != OSDP_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, osdp_error_message());
        MPI_Abort(world, 1);
    }
    osdp_comm c;
    if (argc > 1 && strcmp(argv[1], "hang") == 0) return hang(&c, world, 0, 0);
    if (argc > 1 && strcmp(argv[1], "hang-init") == 0) return hang(&c, world, 1, 0);
    if (argc > 1 && strcmp(argv[1], "hang-stream") == 0) return hang(&c, world, 0, 1);

    /* the device memory outside the runtime's accounting, measured: what
     * the GPU device files' headroom (mem_limit below the card) must cover */
    size_t free_before = 0, free_after = 0, card = 0;
    cudaMemGetInfo(&free_before, &card);
    s = osdp_comm_create_nccl(&c, &world, local_rank);
    EXPECT(s == OSDP_OK, "set-up: %s", osdp_error_message());
    if (s != OSDP_OK) MPI_Abort(world, 1);
    cudaMemGetInfo(&free_after, &card);
    if (rank == 0) printf("PASS: NCCL set-up (non-blocking communicator, polled) and warm-up on %d rank(s)\n", size);
    if (rank == 0)
        printf("MEASURED headroom on rank 0's GPU (%.0f MiB card): CUDA context + cuBLAS + backend %.0f MiB, "
               "NCCL set-up + warm-up %.0f MiB\n", card / 1048576.0, (card - free_before) / 1048576.0,
               ((double)free_before - (double)free_after) / 1048576.0);
    check_all_gather(&c, 1);
    check_all_gather(&c, 1000003);
    pass("all-gathers of 1 and 1000003 elements per rank, fp32 and bf16, bitwise");
    check_reductions(&c, 7);
    check_reductions(&c, 262147);
    pass("reduce-scatter and all-reduce (fp32), exact sums");
    check_group_and_many(&c);
    pass("a group of 3 all-gathers (fp32, bf16) and a reduce-scatter; 150 requests in flight");
    double sums[2] = {1.5 + rank, 2.5};
    EXPECT(osdp_comm_all_reduce(&c, sums, 2, OSDP_FLOAT64, NULL) == OSDP_OK, "%s", osdp_error_message());
    EXPECT(sums[0] == 1.5 * size + size * (size - 1) / 2 && sums[1] == 2.5 * size, "host all-reduce: %g %g", sums[0],
           sums[1]);
    char blob[64] = {0};
    if (rank == 0) strcpy(blob, "from rank 0");
    EXPECT(osdp_comm_broadcast(&c, blob, sizeof blob, 0, NULL) == OSDP_OK, "%s", osdp_error_message());
    EXPECT(strcmp(blob, "from rank 0") == 0, "host broadcast: '%s'", blob);
    pass("host buffers through the MPI fallback (all-reduce, broadcast)");
    /* the counters: the wrappers' calls only (the warm-up is not traffic) */
    EXPECT(c.traffic.calls[OSDP_COLL_ALL_GATHER] == 2 * 2 + 3 + 150, "all-gather calls counted: %llu",
           c.traffic.calls[OSDP_COLL_ALL_GATHER]);
    EXPECT(osdp_comm_barrier(&c) == OSDP_OK, "%s", osdp_error_message());
    osdp_comm_destroy(&c);
    pass("traffic counters, barrier, teardown (ncclCommFinalize + ncclCommDestroy)");
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, world);
    if (rank == 0) printf("%d failure(s)\n", total);
    MPI_Finalize();
    return total ? 1 : 0;
}

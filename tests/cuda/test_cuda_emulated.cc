/* EMULATED, not a GPU run: the CUDA tiled attention's kernels
 * (src/cuda/attention_tiled.cuh, the source nvcc compiles) compiled for the
 * host, a block's 256 threads emulated as contexts switched at each
 * __syncthreads and warp shuffle, checked against the CPU backend's
 * tiled attention (src/model/kernels_cpu_attention_tiled.c).  It catches in
 * CI, where no GPU is, what the source gets wrong: the tiling, the causal
 * mask and the skipped tiles, the online softmax, the recomputation in the
 * backward, the indexing of qkv / dqkv / lse / rowdot, the shared-memory
 * layout (poisoned with NaN: a read of a piece nobody wrote, or one past the
 * size the launcher asks for, turns the results into NaN) and the barriers'
 * places (the threads run in a shuffled order between barriers).  It
 * cannot catch what only the GPU does: the launch configuration and the
 * shared-memory opt-in, nvcc's code generation, its expf and FMA
 * contraction, memory coalescing and speed — tests/test_cuda does, on a GPU.
 *
 * Each case runs the forward (output, lse) and the backward (rowdot, d(qkv),
 * into NaN-filled buffers: every entry written) on random inputs, for fp32
 * tiles against the CPU on the same inputs and for bf16 tiles against the
 * CPU on qkv and dout rounded to bf16 (the operands the kernels multiply),
 * within |cpu - emulated| <= 1e-4 |cpu| + 1e-5 max|cpu| (summation orders
 * differ).  Tiles of 32 and 16 rows (the launcher's two choices); head sizes
 * 8 to 128; T of one partial tile, several with a partial last one, whole
 * tiles, and 1; the 32-bit index variant, and once the 64-bit one (the
 * launchers' choice, by size).  The fused residual + LayerNorm (src/cuda/residual_layernorm.cuh)
 * likewise, against the CPU's residual_layernorm_forward: run_residual_layernorm
 * says how.  The producers of the stored bf16 activations (--activation-dtype
 * bf16: the LayerNorm, the residual + LayerNorm, the GELU forward and
 * backward, the tiled attention's output, src/cuda/layernorm_gelu.cuh and the
 * kernels above with a bf16 output type) against their fp32 form followed by
 * the rounding (today's staging path: bitwise) and against the CPU bf16
 * table's rounded outputs: run_bf16_producers says how.  Exit status: 0 all
 * passed, 1 a mismatch. */
#define OSDP_CUDA_EMULATION 1

#include <algorithm>
#include <functional>
#include <math.h>
#include <random>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <type_traits>
#include <ucontext.h>
#include <vector>

/* ---- the emulated CUDA pieces the kernels use ---------------------------- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define __shared__

struct __nv_bfloat16 {
    uint16_t bits;
};
/* round to nearest even, as cuda_bf16.h's (and osdp_bf16_from_float); no NaNs here */
static inline __nv_bfloat16 __float2bfloat16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return __nv_bfloat16{(uint16_t)(u >> 16)};
}
static inline float __bfloat162float(__nv_bfloat16 b)
{
    uint32_t u = (uint32_t)b.bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
static dim3 threadIdx, blockIdx, blockDim, gridDim;

/* The threads of a block are contexts (ucontext) on this one host thread,
 * switched in rounds: in each round every thread runs until it reaches a
 * barrier or a shuffle, in an order shuffled afresh each round (a fixed
 * seed: the same run every time).  So a thread that reads shared memory
 * before the barrier that should order it likely runs before the thread that
 * writes it and reads NaN: a missing __syncthreads shows. */
static const int kMaxThreads = 256;
static ucontext_t scheduler, contexts[kMaxThreads];
static int current;                        /* the thread running */
static unsigned long synced[kMaxThreads];  /* __syncthreads calls each thread has made */
static bool finished[kMaxThreads];
static float warp_exchange[kMaxThreads / 32][32];
/* the barriers every running thread had reached when this round began: all
 * the threads waiting at one leave it in the same round, so the lanes of a
 * warp stay in step for the shuffles */
static unsigned long released;

static void yield_to_scheduler() { swapcontext(&contexts[current], &scheduler); }

/* every thread of the block calls it the same number of times */
static inline void __syncthreads()
{
    const unsigned long mine = ++synced[current];
    do yield_to_scheduler();
    while (released < mine);
}

/* every lane of the warp calls it, in step (the kernels' reductions do) */
static inline float __shfl_xor_sync(unsigned, float v, int lane_mask)
{
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    warp_exchange[warp][lane] = v;
    yield_to_scheduler();   /* the other lanes write theirs */
    const float r = warp_exchange[warp][lane ^ (unsigned)lane_mask];
    yield_to_scheduler();   /* and read before anyone writes again */
    return r;
}

/* nvcuda::wmma for the tensor-core attention (src/cuda/attention_mma.cuh), 16x16x16 bf16 fragments with fp32
 * accumulators: each lane holds the whole 16x16 matrix of a fragment (the real ones spread it over the warp's
 * lanes, which the kernels never look inside), loads read it all, mma_sync multiplies in fp32 (a bf16 product is
 * exact in fp32), a store is a point where the warp's lanes meet before and after writing (every lane writes the
 * same values), as the hardware's warp-synchronous store.  Each load and store checks wmma's rules: the pointer
 * 256-bit aligned, the leading dimension a multiple of 16 bytes. */
#define __align__(n)
static int wmma_misuse = 0;
namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    float x[16][16];
};
typedef fragment<accumulator, 16, 16, 16, float> acc_fragment;
static inline void check_rules(const void *p, unsigned ld, size_t elem)
{
    if ((uintptr_t)p % 32 != 0 || (ld * elem) % 16 != 0) {
        if (!wmma_misuse++) printf("FAIL: wmma rule broken: pointer %p, leading dimension %u\n", p, ld);
    }
}
template <class F> static inline void fill_fragment(F &f, float v)
{
    for (auto &row : f.x)
        for (float &e : row) e = v;
}
template <class Use, class L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, L> &f, const __nv_bfloat16 *p, unsigned ld)
{
    check_rules(p, ld, sizeof *p);
    const bool row = std::is_same<L, row_major>::value;
    for (unsigned r = 0; r < 16; r++)
        for (unsigned c = 0; c < 16; c++) f.x[r][c] = __bfloat162float(p[row ? r * ld + c : r + c * ld]);
}
static inline void load_matrix_sync(acc_fragment &f, const float *p, unsigned ld, layout_t)
{
    check_rules(p, ld, sizeof *p);
    for (unsigned r = 0; r < 16; r++)
        for (unsigned c = 0; c < 16; c++) f.x[r][c] = p[r * ld + c];
}
template <class LA, class LB>
static inline void mma_sync(acc_fragment &d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b, const acc_fragment &c)
{
    acc_fragment t;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = c.x[i][j];
            for (int k = 0; k < 16; k++) s += a.x[i][k] * b.x[k][j];
            t.x[i][j] = s;
        }
    d = t;
}
static inline void store_matrix_sync(float *p, const acc_fragment &f, unsigned ld, layout_t)
{
    check_rules(p, ld, sizeof *p);
    yield_to_scheduler();   /* the warp's lanes have loaded what they read */
    for (unsigned r = 0; r < 16; r++)
        for (unsigned c = 0; c < 16; c++) p[r * ld + c] = f.x[r][c];
    yield_to_scheduler();   /* and all have written before any reads again */
}
}  // namespace wmma
}  // namespace nvcuda

#include "cuda/attention_tiled.cuh"
#include "cuda/attention_mma.cuh"
#include "cuda/residual_layernorm.cuh"
#include "cuda/head_backward.cuh"
#include "cuda/layernorm_gelu.cuh"

extern "C" {
#include "osdp/compute.h"
}

/* the kernels' dynamic shared memory: one block runs at a time */
namespace osdp_cuda {
namespace attention_tiles {
float smem[1 << 17];
}
namespace attention_mma {
alignas(128) unsigned char attn_mma_smem[256 << 10];
}
}  // namespace osdp_cuda

extern "C" {
void attention_forward_tiled(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
void attention_backward_tiled(float *dqkv, float *rowdot, const float *dout, const float *out, const float *qkv,
                              const float *lse, int B, int T, int C, int NH);
void residual_layernorm_forward(float *res, float *y, float *mean, float *rstd, const float *a, const float *b,
                                const float *w, const float *bias, int BT, int C);
void crossentropy_backward_lse(float *dlogits, const float *lse, const int *targets, float scale, int BT, int V,
                               int valid, int vocab_lo);
}

using namespace osdp_cuda::attention_tiles;
using osdp_cuda::kResidualLayernormThreads;

static const size_t kSmemFloats = sizeof smem / sizeof smem[0];
static const size_t kStackBytes = 64 << 10;   /* each emulated thread's stack */

/* every block of `grid` in turn, its `threads` threads (default kAttnThreads) as contexts;
 * shared memory NaN before each block; `bytes` is what the launcher would
 * ask for */
static const std::function<void()> *launched;
static void thread_entry()
{
    (*launched)();
    finished[current] = true;
}

/* emulated thread t, to start at thread_entry on `stack`: a function of its own, so that no variable of
 * the launch loop lives across getcontext (which returns twice: -Wclobbered) */
static void make_thread(int t, char *stack)
{
    ucontext_t *const c = &contexts[t];
    synced[t] = 0;
    finished[t] = false;
    getcontext(c);
    c->uc_stack.ss_sp = stack;
    c->uc_stack.ss_size = kStackBytes;
    c->uc_link = &scheduler;
    makecontext(c, thread_entry, 0);
}

static void launch(dim3 grid, size_t bytes, const std::function<void()> &body, int threads = kAttnThreads)
{
    using osdp_cuda::attention_mma::attn_mma_smem;
    if (bytes > sizeof smem || bytes > sizeof attn_mma_smem) {
        fprintf(stderr, "emulation: %zu bytes of shared memory asked, %zu emulated\n", bytes,
                std::min(sizeof smem, sizeof attn_mma_smem));
        exit(1);
    }
    static std::vector<char> stacks((size_t)kMaxThreads * kStackBytes);
    static std::mt19937 shuffler(31);
    std::vector<int> order(threads);
    for (int t = 0; t < threads; t++) order[t] = t;
    gridDim = grid;
    blockDim = dim3((unsigned)threads);
    launched = &body;
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            blockIdx = dim3(bx, by);
            for (size_t i = 0; i < kSmemFloats; i++) smem[i] = NAN;
            memset(attn_mma_smem, 0xFF, sizeof attn_mma_smem);   /* NaN as floats and as bf16 */
            for (int t = 0; t < threads; t++) make_thread(t, &stacks[(size_t)t * kStackBytes]);
            for (bool running = true; running;) {
                running = false;
                released = ~0ul;
                for (int t = 0; t < threads; t++)
                    if (!finished[t] && synced[t] < released) released = synced[t];
                std::shuffle(order.begin(), order.end(), shuffler);
                for (int t : order) {
                    if (finished[t]) continue;
                    current = t;
                    threadIdx = dim3((unsigned)t);
                    swapcontext(&scheduler, &contexts[t]);
                    running = true;
                }
            }
        }
}

static int failures = 0;

static void compare(const char *what, const char *tag, const std::vector<float> &ref, const std::vector<float> &got,
                    double rtol = 1e-4, double atol = 1e-5)
{
    double maxref = 0, worst = 0;
    size_t bad = 0, at = 0;
    for (float r : ref) maxref = fmax(maxref, fabs(r));
    for (size_t i = 0; i < ref.size(); i++) {
        const double err = fabs((double)ref[i] - got[i]);
        if (!(err <= rtol * fabs(ref[i]) + atol * maxref)) {   /* NaN fails too */
            if (!bad++) at = i;
        } else if (err > worst) {
            worst = err;
        }
    }
    if (bad) {
        failures++;
        printf("FAIL: %s %s: %zu entries differ, first [%zu]: cpu %.9g, emulated %.9g\n", tag, what, bad, at, ref[at],
               got[at]);
    } else {
        printf("PASS: %s %s (largest |diff| %.3g, max|cpu| %.3g)\n", tag, what, worst, maxref);
    }
}

static float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

/* A case's random inputs (qkv, dout) and the reference: the CPU's tiled attention on them, rounded to bf16
 * first for bf16 tiles (the operands the kernels multiply) */
struct AttentionCase {
    size_t nqkv, nout, nlse;
    std::vector<float> qkv, dout, out, lse, dqkv, rowdot;
    AttentionCase(int B, int T, int C, int NH, bool bf16, uint32_t seed)
        : nqkv((size_t)B * T * 3 * C), nout((size_t)B * T * C), nlse((size_t)B * NH * T), qkv(nqkv), dout(nout),
          out(nout), lse(nlse), dqkv(nqkv), rowdot(nlse)
    {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
        for (float &x : qkv) x = 2.0f * uniform(rng);   /* scores up to ~HS/3: a peaked softmax too */
        for (float &x : dout) x = uniform(rng);
        std::vector<float> rqkv(qkv), rdout(dout);
        if (bf16) {
            for (float &x : rqkv) x = bf16_round(x);
            for (float &x : rdout) x = bf16_round(x);
        }
        attention_forward_tiled(out.data(), lse.data(), rqkv.data(), B, T, C, NH);
        attention_backward_tiled(dqkv.data(), rowdot.data(), rdout.data(), out.data(), rqkv.data(), lse.data(), B, T,
                                 C, NH);
    }
};

/* The kernels a case runs, with the shared memory their launcher asks for and the tolerance of out and dqkv
 * against the CPU (compare()'s rtol and atol of the largest entry): the CUDA-core tiles of element type E, the
 * reference's tolerance (the sums' orders differ) */
template <class E, class I> struct CudaCoreTiles {
    typedef E Elem;
    static constexpr double tol_rel = 1e-4, tol_max = 1e-5;
    static const char *name() { return sizeof(E) == 2 ? "bf16 tiles" : "fp32 tiles"; }
    static size_t forward_bytes(int tile, int HS) { return forward_smem<E>(tile, HS); }
    static size_t dkv_bytes(int tile, int HS) { return dkv_smem<E>(tile, HS); }
    static size_t dq_bytes(int tile, int HS) { return dq_smem<E>(tile, HS); }
    static void forward(float *out, float *lse, const float *qkv, int T, int C, int NH, int tile, float scale)
    {
        attention_tiled_forward_kernel<E, I>(out, lse, qkv, T, C, NH, tile, scale);
    }
    static void dkv(const AttnBackward &a) { attention_tiled_dkv_kernel<E, I>(a); }
    static void dq(const AttnBackward &a) { attention_tiled_dq_kernel<E, I>(a); }
};
/* The tensor-core kernels (src/cuda/attention_mma.cuh) with wmma emulated: lse and rowdot keep the reference's
 * tolerance (the scores are exact bf16 products summed in fp32, rowdot is the CUDA-core kernel's); out and dqkv
 * within 1e-2 relative + 1e-2 of the largest entry, the kernels rounding P and dS to bf16 (2^-9 relative per
 * entry) before the products that read them: a wrong fragment offset, layout or mask moves entries by their own
 * size */
template <class I> struct TensorCoreTiles {
    typedef __nv_bfloat16 Elem;
    static constexpr double tol_rel = 1e-2, tol_max = 1e-2;
    static const char *name() { return "bf16 tensor-core tiles"; }
    typedef osdp_cuda::attention_mma::ForwardSmem ForwardSmem;
    typedef osdp_cuda::attention_mma::BackwardSmem BackwardSmem;
    static size_t forward_bytes(int tile, int HS) { return ForwardSmem(nullptr, tile, HS).bytes; }
    static size_t dkv_bytes(int tile, int HS) { return BackwardSmem(nullptr, tile, HS, 2).bytes; }
    static size_t dq_bytes(int tile, int HS) { return BackwardSmem(nullptr, tile, HS, 1).bytes; }
    static void forward(float *out, float *lse, const float *qkv, int T, int C, int NH, int tile, float scale)
    {
        osdp_cuda::attention_mma::attention_mma_forward_kernel<I>(out, lse, qkv, T, C, NH, tile, scale);
    }
    static void dkv(const AttnBackward &a) { osdp_cuda::attention_mma::attention_mma_dkv_kernel<I>(a); }
    static void dq(const AttnBackward &a) { osdp_cuda::attention_mma::attention_mma_dq_kernel<I>(a); }
};

template <class K, class I> static void run_tiles(int B, int T, int C, int NH, int tile, uint32_t seed)
{
    const bool bf16 = sizeof(typename K::Elem) == 2;
    const int HS = C / NH;
    const AttentionCase ref(B, T, C, NH, bf16, seed);
    std::vector<float> g_out(ref.nout, NAN), g_lse(ref.nlse, NAN), g_dqkv(ref.nqkv, NAN), g_rowdot(ref.nlse, NAN);
    const float scale = 1.0f / sqrtf((float)HS);
    const dim3 grid((unsigned)(B * NH), (unsigned)((T + tile - 1) / tile));
    char tag[112];
    snprintf(tag, sizeof tag, "%s, %s index, B %d T %d C %d NH %d, tile %d:", K::name(),
             sizeof(I) == 4 ? "32-bit" : "64-bit", B, T, C, NH, tile);
    const int misuse = wmma_misuse;
    launch(grid, K::forward_bytes(tile, HS),
           [&] { K::forward(g_out.data(), g_lse.data(), ref.qkv.data(), T, C, NH, tile, scale); });
    compare("out", tag, ref.out, g_out, K::tol_rel, K::tol_max);
    compare("lse", tag, ref.lse, g_lse);
    /* the backward on the CPU's forward, as tests/test_cuda does; rowdot's
     * kernel on one block (it strides over the rows) */
    launch(dim3(1), 0, [&] {
        attention_rowdot_kernel<typename K::Elem, I>(g_rowdot.data(), ref.dout.data(), ref.out.data(), B, T, C, NH);
    });
    const AttnBackward args = {g_dqkv.data(), ref.dout.data(), ref.qkv.data(), ref.lse.data(), g_rowdot.data(),
                               T, C, NH, tile, scale};
    launch(grid, K::dkv_bytes(tile, HS), [&] { K::dkv(args); });
    launch(grid, K::dq_bytes(tile, HS), [&] { K::dq(args); });
    compare("rowdot", tag, ref.rowdot, g_rowdot);
    compare("dqkv", tag, ref.dqkv, g_dqkv, K::tol_rel, K::tol_max);
    if (wmma_misuse != misuse) {
        failures++;
        printf("FAIL: %s %d wmma loads or stores broke the alignment rules\n", tag, wmma_misuse - misuse);
    }
}
template <class E, class I = unsigned> static void run(int B, int T, int C, int NH, int tile, uint32_t seed)
{
    run_tiles<CudaCoreTiles<E, I>, I>(B, T, C, NH, tile, seed);
}
template <class I = unsigned> static void run_mma(int B, int T, int C, int NH, int tile, uint32_t seed)
{
    run_tiles<TensorCoreTiles<I>, I>(B, T, C, NH, tile, seed);
}

/* The fused residual + LayerNorm (src/cuda/residual_layernorm.cuh), W the
 * weights' type and I the index type, against the CPU's
 * residual_layernorm_forward: res bitwise (one fp32 addition either way),
 * ln, mean, rstd within compare()'s tolerance (the sums' orders differ: lanes
 * of a simd reduction against a warp's butterfly).  in_place: res is a, as
 * gpt_ops.c calls it.  BT not a multiple of the 8 rows of a block, C not of
 * the 32 lanes. */
template <class W, class I> static void run_residual_layernorm(int BT, int C, bool in_place, uint32_t seed)
{
    const bool bf16 = sizeof(W) == 2;
    const size_t n = (size_t)BT * C;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> a(n), b(n), w(C), bias(C);
    for (float &x : a) x = 3.0f * uniform(rng) + 0.5f;   /* a mean away from 0 */
    for (float &x : b) x = uniform(rng);
    std::vector<W> gw(C), gbias(C);
    for (int c = 0; c < C; c++) {
        w[c] = 1.0f + 0.5f * uniform(rng);
        bias[c] = 0.1f * uniform(rng);
        if (bf16) {   /* the CPU gets the weights the kernel widens */
            w[c] = bf16_round(w[c]);
            bias[c] = bf16_round(bias[c]);
        }
        gw[c] = to_elem<W>(w[c]);
        gbias[c] = to_elem<W>(bias[c]);
    }
    std::vector<float> res(n), y(n), mean(BT), rstd(BT);
    residual_layernorm_forward(res.data(), y.data(), mean.data(), rstd.data(), a.data(), b.data(), w.data(),
                               bias.data(), BT, C);
    std::vector<float> g_a(a), g_res(n, NAN), g_y(n, NAN), g_mean(BT, NAN), g_rstd(BT, NAN);
    float *out = in_place ? g_a.data() : g_res.data();
    const int rows_per_block = kResidualLayernormThreads / 32;
    launch(dim3((unsigned)((BT + rows_per_block - 1) / rows_per_block)), 0, [&] {
        osdp_cuda::residual_layernorm_kernel<W, I>(out, g_y.data(), g_mean.data(), g_rstd.data(), g_a.data(),
                                                  b.data(), gw.data(), gbias.data(), BT, C);
    }, kResidualLayernormThreads);
    char tag[96];
    snprintf(tag, sizeof tag, "residual+layernorm, %s weights, %s index, BT %d C %d%s:", bf16 ? "bf16" : "fp32",
             sizeof(I) == 4 ? "32-bit" : "64-bit", BT, C, in_place ? ", in place" : "");
    if (memcmp(res.data(), out, n * sizeof(float)) == 0) {
        printf("PASS: %s res (bitwise)\n", tag);
    } else {
        failures++;
        printf("FAIL: %s res differs from the CPU's a + b\n", tag);
    }
    compare("ln", tag, y, g_y);
    compare("mean", tag, mean, g_mean);
    compare("rstd", tag, rstd, g_rstd);
}

/* The fused head's d(logits) (src/cuda/head_backward.cuh) against the CPU's
 * crossentropy_backward_lse: in bf16 (D = __nv_bfloat16, the output starting
 * as NaN bits: every entry written), or in fp32 in place over the logits
 * (D = float); the padding columns exactly 0, the others within one bf16
 * rounding of the CPU's fp32 value (|got - cpu| <= 2^-8 |cpu| + 1e-12), or
 * for fp32 within 1e-6 |cpu| (expf's last bits, host against vectorised) -- a
 * wrong row, column, target or range shows as far more.  A grid smaller
 * than the entries: the grid-stride loop covers the rest. */
static float widened(float v) { return v; }
static float widened(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class I, class D> static void run_head_dlogits(int rows, int V, int valid, int lo, uint32_t seed)
{
    const bool bf16 = sizeof(D) == 2;
    const size_t n = (size_t)rows * V;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> logits(n), lse(rows), ref(n);
    std::vector<int> targets(rows);
    for (float &x : logits) x = 6.0f * uniform(rng);
    for (int i = 0; i < rows; i++) {
        lse[i] = 7.0f + uniform(rng);
        targets[i] = (int)(rng() % (unsigned)(lo + V + 3));   /* in this range, below it, or past it */
    }
    targets[0] = lo;   /* one hit for sure */
    const float scale = 0.37f;
    ref = logits;
    crossentropy_backward_lse(ref.data(), lse.data(), targets.data(), scale, rows, V, valid, lo);
    std::vector<D> got(n);
    for (size_t k = 0; k < n; k++) {
        if (bf16) memcpy(&got[k], "\xC0\x7F", 2);   /* NaN */
        else memcpy(&got[k], &logits[k], sizeof(D));
    }
    const float *in = bf16 ? logits.data() : (const float *)(const void *)got.data();   /* fp32: in place */
    launch(dim3(3), 0, [&] {
        osdp_cuda::crossentropy_backward_lse_kernel<I>(got.data(), in, lse.data(), targets.data(), scale, rows, V,
                                                      valid, lo);
    });
    size_t bad = 0, at = 0;
    for (size_t k = 0; k < n; k++) {
        const float g = widened(got[k]), r = ref[k];
        const bool padding = (int)(k % (size_t)V) >= valid;
        const bool ok = padding ? g == 0.0f : fabsf(g - r) <= (bf16 ? 0x1p-8f : 1e-6f) * fabsf(r) + 1e-12f;
        if (!ok && !bad++) at = k;
    }
    char tag[96];
    snprintf(tag, sizeof tag, "%s head dlogits, %s index, rows %d V %d valid %d lo %d:", bf16 ? "bf16" : "fp32",
             sizeof(I) == 4 ? "32-bit" : "64-bit", rows, V, valid, lo);
    if (bad) {
        failures++;
        printf("FAIL: %s %zu entries differ, first [%zu]: cpu %.9g, emulated %.9g\n", tag, bad, at, ref[at],
               widened(got[at]));
    } else {
        printf("PASS: %s every entry within %s, the padding 0\n", tag, bf16 ? "a bf16 rounding" : "1e-6");
    }
}

/* ---- the stored bf16 activations' producers ------------------------------ */

static std::vector<float> rounded(std::vector<float> v)
{
    for (float &x : v) x = bf16_round(x);
    return v;
}
static std::vector<float> widened_all(const std::vector<__nv_bfloat16> &v)
{
    std::vector<float> w(v.size());
    for (size_t i = 0; i < v.size(); i++) w[i] = __bfloat162float(v[i]);
    return w;
}
static std::vector<__nv_bfloat16> nan_bf16(size_t n) { return std::vector<__nv_bfloat16>(n, __nv_bfloat16{0x7FC0}); }

/* `got` (a kernel's bf16 output) against `staged`, its fp32 form's output rounded as gpt_ops.c's staging path
 * rounds it (residual_round, then the narrowing): the same bits, every entry (NaN bits in `got` fail) */
static void compare_bits(const char *what, const char *tag, const std::vector<__nv_bfloat16> &got,
                         const std::vector<float> &staged)
{
    size_t bad = 0, at = 0;
    for (size_t i = 0; i < got.size(); i++)
        if (got[i].bits != __float2bfloat16(staged[i]).bits && !bad++) at = i;
    if (bad) {
        failures++;
        printf("FAIL: %s %s: %zu of %zu entries differ from the fp32 kernel rounded, first [%zu]: %.9g against %.9g\n",
               tag, what, bad, got.size(), at, __bfloat162float(got[at]), bf16_round(staged[at]));
    } else {
        printf("PASS: %s %s bitwise the fp32 kernel's, rounded (%zu entries)\n", tag, what, got.size());
    }
}

/* `got` against the CPU bf16 table's rounded output `cpu`: the same bf16 value, or its neighbour where the two
 * fp32 results straddle a rounding boundary (the sums' orders differ, and the CPU's GELU has its own tanh), and
 * at least 95% of the entries bitwise; a wrong row, column, weight or rounding moves them far more */
static void compare_cpu(const char *what, const char *tag, const std::vector<__nv_bfloat16> &got,
                        const std::vector<float> &cpu)
{
    size_t same = 0, bad = 0, at = 0;
    for (size_t i = 0; i < got.size(); i++) {
        const __nv_bfloat16 c = __float2bfloat16(cpu[i]);
        const int ulps = abs((int)(int16_t)got[i].bits - (int)(int16_t)c.bits);
        if (got[i].bits == c.bits) same++;
        else if (ulps > 1 && !bad++) at = i;
    }
    if (bad || same < got.size() * 95 / 100) {
        failures++;
        printf("FAIL: %s %s against the CPU bf16 table: %zu bitwise of %zu, %zu over one bf16 step, first [%zu]: "
               "cpu %.9g, emulated %.9g\n", tag, what, same, got.size(), bad, at, cpu[at], __bfloat162float(got[at]));
    } else {
        printf("PASS: %s %s against the CPU bf16 table: %zu of %zu bitwise, the rest one bf16 step\n", tag, what,
               same, got.size());
    }
}

/* The LayerNorm (residual: the residual + LayerNorm) with its output Y = bf16 (the stored ln) against Y = float
 * followed by the rounding (bitwise), mean and rstd bitwise the fp32 form's, res bitwise the fp32 form's; and
 * against the CPU bf16 table's layernorm_forward (residual_layernorm_forward) and residual_round */
template <class I> static void run_layernorm_bf16(int BT, int C, bool residual, uint32_t seed)
{
    const osdp_compute_backend *cpu = &osdp_compute_cpu_bf16;
    const size_t n = (size_t)BT * C;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> a(n), b(n);
    for (float &x : a) x = 3.0f * uniform(rng) + 0.5f;
    for (float &x : b) x = uniform(rng);
    std::vector<__nv_bfloat16> w(C), bias(C);
    for (int c = 0; c < C; c++) {
        w[c] = __float2bfloat16(1.0f + 0.5f * uniform(rng));
        bias[c] = __float2bfloat16(0.1f * uniform(rng));
    }
    std::vector<float> res32(n, NAN), y32(n, NAN), mean32(BT, NAN), rstd32(BT, NAN), res16(n, NAN), mean16(BT, NAN),
        rstd16(BT, NAN);
    std::vector<__nv_bfloat16> y16 = nan_bf16(n);
    const int rows_per_block = (residual ? kResidualLayernormThreads : 256) / 32;
    const dim3 grid((unsigned)((BT + rows_per_block - 1) / rows_per_block));
    if (residual) {
        launch(grid, 0, [&] {
            osdp_cuda::residual_layernorm_kernel<__nv_bfloat16, I, float>(res32.data(), y32.data(), mean32.data(),
                                                                         rstd32.data(), a.data(), b.data(), w.data(),
                                                                         bias.data(), BT, C);
        }, kResidualLayernormThreads);
        launch(grid, 0, [&] {
            osdp_cuda::residual_layernorm_kernel<__nv_bfloat16, I, __nv_bfloat16>(
                res16.data(), y16.data(), mean16.data(), rstd16.data(), a.data(), b.data(), w.data(), bias.data(), BT,
                C);
        }, kResidualLayernormThreads);
    } else {
        launch(grid, 0, [&] {
            osdp_cuda::layernorm_forward_kernel<__nv_bfloat16, I, float>(y32.data(), mean32.data(), rstd32.data(),
                                                                        a.data(), w.data(), bias.data(), BT, C);
        }, 256);
        launch(grid, 0, [&] {
            osdp_cuda::layernorm_forward_kernel<__nv_bfloat16, I, __nv_bfloat16>(
                y16.data(), mean16.data(), rstd16.data(), a.data(), w.data(), bias.data(), BT, C);
        }, 256);
    }
    char tag[112];
    snprintf(tag, sizeof tag, "bf16 %slayernorm output, %s index, BT %d C %d:", residual ? "residual + " : "",
             sizeof(I) == 4 ? "32-bit" : "64-bit", BT, C);
    compare_bits("ln", tag, y16, y32);
    if (memcmp(mean16.data(), mean32.data(), BT * sizeof(float)) || memcmp(rstd16.data(), rstd32.data(), BT * sizeof(float)) ||
        (residual && memcmp(res16.data(), res32.data(), n * sizeof(float)))) {
        failures++;
        printf("FAIL: %s mean, rstd or res differ from the fp32 form's\n", tag);
    } else {
        printf("PASS: %s mean, rstd%s bitwise the fp32 form's\n", tag, residual ? ", res" : "");
    }
    std::vector<float> cpu_y(n), cpu_mean(BT), cpu_rstd(BT), cpu_res(n);
    if (residual)
        cpu->residual_layernorm_forward(cpu_res.data(), cpu_y.data(), cpu_mean.data(), cpu_rstd.data(), a.data(),
                                        b.data(), w.data(), bias.data(), BT, C);
    else
        cpu->layernorm_forward(cpu_y.data(), cpu_mean.data(), cpu_rstd.data(), a.data(), w.data(), bias.data(), BT,
                               C);
    cpu->residual_round(cpu_y.data(), n);
    compare_cpu("ln", tag, y16, cpu_y);
}

/* The GELU with the stored fc in and the stored gelu out (bf16 both) against the fp32 kernel on fc widened,
 * rounded (bitwise); its backward reading the stored fc against the fp32 kernel on the widened copy (bitwise,
 * in place over dy as gpt_ops.c calls it); and the forward against the CPU bf16 table's gelu_forward on the
 * widened fc, rounded.  A grid smaller than n: the grid-stride loop does the rest. */
template <class I> static void run_gelu_bf16(size_t n, uint32_t seed)
{
    const osdp_compute_backend *cpu = &osdp_compute_cpu_bf16;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<__nv_bfloat16> fc(n);
    std::vector<float> dy(n);
    for (auto &x : fc) x = __float2bfloat16(4.0f * uniform(rng));
    for (float &x : dy) x = uniform(rng);
    const std::vector<float> fc32 = widened_all(fc);
    std::vector<float> y32(n, NAN), dx32(dy), dx16(dy);
    std::vector<__nv_bfloat16> y16 = nan_bf16(n);
    launch(dim3(3), 0, [&] { osdp_cuda::gelu_forward_kernel<I, float, float>(y32.data(), fc32.data(), (I)n); });
    launch(dim3(3), 0, [&] {
        osdp_cuda::gelu_forward_kernel<I, __nv_bfloat16, __nv_bfloat16>(y16.data(), fc.data(), (I)n);
    });
    launch(dim3(2), 0, [&] { osdp_cuda::gelu_backward_kernel<I, float>(dx32.data(), fc32.data(), dx32.data(), (I)n); });
    launch(dim3(2), 0, [&] {
        osdp_cuda::gelu_backward_kernel<I, __nv_bfloat16>(dx16.data(), fc.data(), dx16.data(), (I)n);
    });
    char tag[80];
    snprintf(tag, sizeof tag, "bf16 gelu, %s index, n %zu:", sizeof(I) == 4 ? "32-bit" : "64-bit", n);
    compare_bits("forward", tag, y16, y32);
    if (memcmp(dx16.data(), dx32.data(), n * sizeof(float))) {
        failures++;
        printf("FAIL: %s backward on the stored fc differs from the fp32 kernel on the widened copy\n", tag);
    } else {
        printf("PASS: %s backward on the stored fc bitwise the fp32 kernel's on the widened copy\n", tag);
    }
    std::vector<float> cpu_y(n);
    cpu->gelu_forward(cpu_y.data(), fc32.data(), n);
    cpu->residual_round(cpu_y.data(), n);
    compare_cpu("forward", tag, y16, cpu_y);
}

/* The tiled attention's output stored in bf16 (Out = bf16, the stored heads) against its fp32 output rounded
 * (bitwise), lse bitwise the fp32 form's; the CUDA-core bf16 tiles (K = CudaCoreTiles) and the tensor-core ones;
 * and against the CPU bf16 table's tiled attention on the bf16-rounded qkv, rounded */
template <bool mma, class I> static void run_attention_bf16(int B, int T, int C, int NH, int tile, uint32_t seed)
{
    const osdp_compute_backend *cpu = &osdp_compute_cpu_bf16;
    const int HS = C / NH;
    const AttentionCase ref(B, T, C, NH, true, seed);
    std::vector<float> out32(ref.nout, NAN), lse32(ref.nlse, NAN), lse16(ref.nlse, NAN);
    std::vector<__nv_bfloat16> out16 = nan_bf16(ref.nout);
    const float scale = 1.0f / sqrtf((float)HS);
    const dim3 grid((unsigned)(B * NH), (unsigned)((T + tile - 1) / tile));
    const size_t bytes = mma ? TensorCoreTiles<I>::forward_bytes(tile, HS) : forward_smem<__nv_bfloat16>(tile, HS);
    auto forward = [&](auto *out, float *lse) {
        typedef typename std::remove_pointer<decltype(out)>::type Out;
        launch(grid, bytes, [&] {
            if (mma)
                osdp_cuda::attention_mma::attention_mma_forward_kernel<I, Out>(out, lse, ref.qkv.data(), T, C, NH,
                                                                              tile, scale);
            else
                attention_tiled_forward_kernel<__nv_bfloat16, I, Out>(out, lse, ref.qkv.data(), T, C, NH, tile, scale);
        });
    };
    forward(out32.data(), lse32.data());
    forward(out16.data(), lse16.data());
    char tag[112];
    snprintf(tag, sizeof tag, "bf16 heads output, %s, %s index, B %d T %d C %d NH %d, tile %d:",
             mma ? "tensor-core tiles" : "bf16 tiles", sizeof(I) == 4 ? "32-bit" : "64-bit", B, T, C, NH, tile);
    compare_bits("out", tag, out16, out32);
    if (memcmp(lse16.data(), lse32.data(), ref.nlse * sizeof(float))) {
        failures++;
        printf("FAIL: %s lse differs from the fp32 output's run\n", tag);
    } else {
        printf("PASS: %s lse bitwise the fp32 output's run\n", tag);
    }
    if (!mma) {   /* the tensor-core tiles round P to bf16: not within a bf16 step of the CPU (run_mma's tolerance) */
        std::vector<float> cpu_out(ref.nout), cpu_lse(ref.nlse), rqkv = rounded(ref.qkv);
        cpu->attention_forward_tiled(cpu_out.data(), cpu_lse.data(), rqkv.data(), B, T, C, NH);
        cpu->residual_round(cpu_out.data(), ref.nout);
        compare_cpu("out", tag, out16, cpu_out);
    }
}

int main()
{
    run_head_dlogits<unsigned, __nv_bfloat16>(9, 300, 300, 0, 13);     /* a whole vocabulary */
    run_head_dlogits<unsigned, __nv_bfloat16>(7, 128, 100, 256, 14);   /* a rank's range, partly padding */
    run_head_dlogits<size_t, __nv_bfloat16>(5, 64, 0, 512, 15);        /* only padding, the 64-bit index */
    run_head_dlogits<unsigned, float>(7, 128, 100, 256, 16);           /* fp32, in place */
    run_residual_layernorm<float, unsigned>(13, 72, false, 7);     /* partial block, C not a multiple of 32 */
    run_residual_layernorm<float, unsigned>(16, 768, true, 8);     /* GPT-2's width, in place */
    run_residual_layernorm<float, size_t>(9, 40, true, 9);         /* the 64-bit index variant */
    run_residual_layernorm<__nv_bfloat16, unsigned>(11, 100, true, 10);
    run_residual_layernorm<float, unsigned>(3, 1, false, 11);      /* C 1: variance 0 */
    run<float>(2, 13, 24, 3, 32, 1);     /* one partial tile, head size 8 */
    run<float>(1, 70, 64, 4, 16, 2);     /* five tiles, the last partial, head size 16 */
    run<float, size_t>(2, 45, 64, 4, 16, 12);   /* the 64-bit index variant */
    run<float>(1, 64, 128, 2, 32, 3);    /* whole tiles, GPT-2's head size 64 */
    run<float>(1, 40, 256, 2, 16, 4);    /* head size 128 */
    run<float>(1, 1, 8, 2, 32, 5);       /* T 1 */
    run<__nv_bfloat16>(1, 70, 64, 4, 32, 6);
    run_mma(1, 150, 128, 2, 64, 20);         /* GPT-2's head size 64: three tiles of 64, the last partial */
    run_mma(2, 40, 64, 4, 32, 21);           /* head size 16, tile 32, two tiles */
    run_mma<size_t>(1, 64, 128, 1, 64, 22);  /* head size 128, one whole tile, the 64-bit index variant */
    run_mma(1, 1, 32, 2, 32, 23);            /* T 1 */
    run_layernorm_bf16<unsigned>(13, 72, false, 31);      /* partial block, C not a multiple of 32 */
    run_layernorm_bf16<unsigned>(16, 768, false, 32);     /* GPT-2's width */
    run_layernorm_bf16<size_t>(9, 40, false, 33);         /* the 64-bit index variant */
    run_layernorm_bf16<unsigned>(11, 100, true, 34);      /* the residual + LayerNorm */
    run_layernorm_bf16<unsigned>(16, 768, true, 35);
    run_layernorm_bf16<size_t>(5, 40, true, 36);
    run_gelu_bf16<unsigned>(5000, 37);
    run_gelu_bf16<size_t>(1001, 38);
    run_attention_bf16<false, unsigned>(1, 70, 64, 4, 32, 39);    /* three tiles, the last partial */
    run_attention_bf16<false, size_t>(2, 45, 64, 4, 16, 40);
    run_attention_bf16<false, unsigned>(1, 64, 128, 2, 32, 41);   /* GPT-2's head size 64 */
    run_attention_bf16<true, unsigned>(1, 150, 128, 2, 64, 42);
    run_attention_bf16<true, size_t>(2, 40, 64, 4, 32, 43);
    printf("test_cuda_emulated: %s\n", failures ? "FAILED" : "all passed");
    return failures != 0;
}

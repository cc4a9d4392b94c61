#!/bin/bash
# EMULATED, not a GPU run: compiles tests/cuda/test_cuda_emulated.cc (the CUDA tiled
# attention's kernels, src/cuda/attention_tiled.cuh, the fused residual +
# LayerNorm, src/cuda/residual_layernorm.cuh, and the LayerNorm and GELU with
# their bf16 forms for the stored bf16 activations, src/cuda/layernorm_gelu.cuh, built for the host, a
# block's threads emulated as contexts switched at barriers) against this build's libosdp.a (the CPU
# backend's kernels, the reference) and runs it: see the .cc for what
# it checks and what only a GPU can.  It needs no CUDA, so it runs in CI.
# Exit 77 (SKIP), with the reason, when no C++17 compiler is found (CXX,
# default g++) or the build has no libosdp.a.
set -u
. "$(dirname "$0")/../lib/test_lib.sh" cuda-emulated-work
CXX=${CXX:-g++}
if [ ! -f "$BUILD/libosdp.a" ]; then
    echo "SKIP: no libosdp.a in $BUILD (build first)"; exit 77
fi
if ! printf '#include <ucontext.h>\nint main() { ucontext_t c; return getcontext(&c); }\n' |
        "$CXX" -std=c++17 -x c++ -o "$WORK/probe" - > "$WORK/probe.err" 2>&1; then
    echo "SKIP: no C++17 compiler with ucontext.h ($CXX: $(head -1 "$WORK/probe.err"))"; exit 77
fi
# the CPU kernels' libraries: this build's (configure's OpenBLAS and OpenMP flags)
libs=$(sed -n 's/^OPENBLAS_LIBS = //p' "$BUILD/Makefile")
openmp=$(sed -n 's/^OPENMP_CFLAGS = //p' "$BUILD/Makefile")
# a build with sanitizers (scripts/sanitize_check): its libosdp.a needs their runtimes, and the emulation runs under them too
sanitize=$(sed -n 's/^CFLAGS = //p' "$BUILD/Makefile" | tr ' ' '\n' | grep -E '^-f(no-)?sanitize' | tr '\n' ' ')
# shellcheck disable=SC2086   # the flags are words
if ! "$CXX" -std=c++17 -O2 -Wall -Wextra $sanitize -I"$SRC/src" -I"$SRC/include" -o "$WORK/test_cuda_emulated" \
        "$SRC/tests/cuda/test_cuda_emulated.cc" "$BUILD/libosdp.a" $libs $openmp -lm > "$WORK/build.log" 2>&1; then
    bad "tests/cuda/test_cuda_emulated.cc did not build" "$WORK/build.log"
    summary test_cuda_emulated
    exit 1
fi
if [ -s "$WORK/build.log" ]; then
    bad "tests/cuda/test_cuda_emulated.cc builds with warnings" "$WORK/build.log"
fi
if "$WORK/test_cuda_emulated" > "$WORK/run.log" 2>&1; then
    ok "the CUDA tiled attention's, LayerNorm, residual + LayerNorm and GELU kernels (fp32 and bf16 outputs), emulated on the host, match the CPU's and their fp32 forms' ($(grep -c '^PASS' "$WORK/run.log") comparisons)"
else
    grep '^FAIL' "$WORK/run.log" | head -10
    bad "the CUDA tiled attention's, LayerNorm, residual + LayerNorm or GELU kernels, emulated on the host, differ from the CPU's or their fp32 forms'" "$WORK/run.log"
fi
summary test_cuda_emulated

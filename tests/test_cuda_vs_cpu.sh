#!/bin/bash
# The CPU backend is the reference for the CUDA one (issue 6): 10 steps of the
# tiny model on 1 rank, same seed and data, all-DP, with --backend cuda and
# with --backend cpu; the losses read from --log must agree within
#     step 1:      1e-4 relative  (the same initial weights: only the kernels'
#                                  summation orders and expf/tanhf differ)
#     steps 1-10:  1e-3 relative  (fp32 on both sides; the differences of a
#                                  few ulps per operation grow with the updates)
# The CUDA run uses true fp32 GEMMs (OSDP_CUDA_TF32 is unset for it).
# Exit 77 (automake's SKIP), with the reason, when the binary was built
# without CUDA (config.h of the build tree) or this machine has no usable GPU
# (the CUDA run stops at start-up with "no usable GPU").
# Run by `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC set), or by hand
# from the build tree.
set -u
. "$(dirname "$0")/test_lib.sh" cuda-work
MODEL="$SRC/input/models/tiny.ini"
STEPS=10 TOL_FIRST=1e-4 TOL=1e-3

if ! grep -q '^#define OSDP_HAVE_CUDA 1' "$BUILD/config.h" 2>/dev/null; then
    echo "SKIP: osdp_gpt was built without CUDA (configure found no nvcc, or --without-cuda)"
    exit 77
fi
run() {   # run BACKEND: writes $WORK/BACKEND.{out,err,log}
    env -u OSDP_CUDA_TF32 "$MPIEXEC" -n 1 "$BIN" train --backend "$1" --model "$MODEL" --data "$DATA" \
        --steps $STEPS --batch 4 --plan dp --seed 1337 --threads 1 --peak-flops 1e9 --log "$WORK/$1.log" \
        > "$WORK/$1.out" 2> "$WORK/$1.err"
}

# The probe for a GPU is the CUDA run itself: without a usable device the
# backend's init stops at once with "no usable GPU on this node (reason)".
if ! run cuda; then
    if grep -q 'no usable GPU' "$WORK/cuda.err"; then
        smi="nvidia-smi not installed"
        command -v nvidia-smi > /dev/null 2>&1 && smi="nvidia-smi -L: $(nvidia-smi -L 2>&1 | head -1)"
        echo "SKIP: no CUDA device ($(grep -o 'no usable GPU.*' "$WORK/cuda.err" | head -1); $smi)"
        exit 77
    fi
    echo "FAIL: --backend cuda did not run:"; tail -5 "$WORK/cuda.err" | sed 's/^/    /'
    exit 1
fi
if ! run cpu; then
    echo "FAIL: --backend cpu did not run:"; tail -5 "$WORK/cpu.err" | sed 's/^/    /'
    exit 1
fi

paste -d' ' <(field "$WORK/cpu.log" loss) <(field "$WORK/cuda.log" loss) > "$WORK/losses.txt"
echo "step  loss (cpu)      loss (cuda)     rel. difference"
if awk -v steps=$STEPS -v tol1=$TOL_FIRST -v tol=$TOL '
    NF == 2 { n++
              num = "^-?[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$"
              if ($1 !~ num || $2 !~ num || $1 == 0) { printf "%4d  %-15s %-15s not comparable\n", n, $1, $2; bad++; next }
              d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1)
              printf "%4d  %-15s %-15s %.3g\n", n, $1, $2, r
              if (r > (n == 1 ? tol1 : tol)) bad++ }
    END { if (n != steps) { printf "expected %d steps in each log, got %d\n", steps, n; exit 1 }
          exit bad > 0 }' "$WORK/losses.txt"; then
    echo "PASS: cuda vs cpu, tiny model, $STEPS steps: losses within $TOL_FIRST (step 1) and $TOL relative"
    exit 0
fi
echo "FAIL: cuda and cpu losses differ by more than $TOL_FIRST (step 1) / $TOL relative (logs in $WORK)"
exit 1

#!/bin/bash
# The CPU backend is the reference for the CUDA one (issue 6, issue 18): the
# same seed, data and options on 1 rank with --backend cpu (fp32) and
# --backend cuda in both precisions, in four settings; bf16 also, in tiny,
# with OSDP_CUDA_LT_EPILOGUES=1 (the products' bias, GELU and their gradients
# in cuBLASLt's epilogues: run *_lt) and with OSDP_CUDA_ATTENTION_MMA=1 (the
# tiled attention's tile products on tensor cores: *_mma), one at a time, and
# in gpt2 with both (*_lt_mma):
#   tiny       10 steps of the tiny model, all-DP, batch 4;
#   zdp_split  10 steps of the tiny model, --plan zdp --split 2 (every
#              operator in 2 sharded slices), --recompute all, and 2
#              micro-steps of accumulation per step (--global-batch 8,
#              --batch 4): the runtime's sharded, recomputing, accumulating
#              path on the GPU (on the CPU it is bitwise equal to all-DP);
#   gpt2       2 steps of GPT-2 124M at T 1024, batch 1: real shapes (vocab
#              50257, C 768, 12 heads; B·T·V = 51 M logits);
#   naive      the tiny setting with --attention naive --head naive: the
#              reference kernels (the other settings run the defaults, the
#              tiled attention and the fused head, on both backends).
# The losses read from --log must agree with the CPU's within
#   cuda --precision fp32:
#     step 1:      1e-4 relative  (the same initial weights: only the kernels'
#                                  summation orders and expf/tanhf differ; a
#                                  product of K terms moves by ~sqrt(K) ulps,
#                                  1e-5 relative for GPT-2's K = 3072)
#     later steps: 1e-3 relative  (fp32 on both sides; the differences of a
#                                  few ulps per operation grow with the updates)
#   cuda --precision bf16 (the default on GPUs), epilogues off or on:
#     every step:  2e-2 relative  (products of bf16 weights and bf16-rounded
#                                  activations, 8 bits of mantissa, accumulated
#                                  in fp32; the CPU's bf16-weight run of
#                                  tests/system/test_mixed_precision.sh stays within
#                                  6e-4 of fp32, the activations' rounding is
#                                  the GPU's own)
# The CUDA runs set OSDP_CUDA_POISON=1: device memory is handed out filled
# with NaN bits, so a kernel or the runtime reading memory nobody wrote turns
# the losses into NaN and fails the comparison.  The fp32 CUDA run uses true
# fp32 GEMMs (OSDP_CUDA_TF32 is unset for it).
# Exit 77 (automake's SKIP), with the reason, when the binary was built
# without CUDA (config.h of the build tree) or this machine has no usable GPU
# (the CUDA run stops at start-up with "no usable GPU").
# Run by `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC set), or by hand
# from the build tree.
set -u
. "$(dirname "$0")/../lib/test_lib.sh" cuda-work
TINY="$SRC/input/models/tiny.ini" GPT2="$SRC/input/models/gpt2_small.ini"
TOL_FIRST=1e-4 TOL=1e-3 TOL_BF16=2e-2
THREADS=$(nproc)   # the CPU kernels give the same bits on any thread count (tests/model/test_kernels)

if ! grep -q '^#define OSDP_HAVE_CUDA 1' "$BUILD/config.h" 2>/dev/null; then
    echo "SKIP: osdp_gpt was built without CUDA (configure found no nvcc, or --without-cuda)"
    exit 77
fi
# the settings: NAME STEPS train options.  All run the mesh's tensor axis at
# TP 1 (--tp 1 said explicitly once); gpt2's vocabulary 50257 is padded to
# CUDA's quantum (50304), so it also runs the vocab-parallel cross-entropy
# path (statistics, finish, backward with an offset) against the CPU's
# unpadded one.
SETTINGS=(
    "tiny 10 --model $TINY --batch 4 --plan dp --tp 1"
    "zdp_split 10 --model $TINY --batch 4 --global-batch 8 --plan zdp --split 2 --recompute all"
    "gpt2 2 --model $GPT2 --batch 1 --seq-len 1024 --plan dp"
    "naive 10 --model $TINY --batch 4 --plan dp --attention naive --head naive"
)
run() {   # run NAME BACKEND PRECISION STEPS OPTIONS...: writes $WORK/NAME.{out,err,log}; NAME *_lt*, *_mma: switches on
    local name=$1 backend=$2 precision=$3 steps=$4 lt=0 mma=0
    shift 4
    case $name in *_lt|*_lt_mma) lt=1 ;; esac
    case $name in *_mma) mma=1 ;; esac
    env -u OSDP_CUDA_TF32 OSDP_CUDA_POISON=1 OSDP_CUDA_LT_EPILOGUES=$lt OSDP_CUDA_ATTENTION_MMA=$mma "$MPIEXEC" -n 1 "$BIN" train --backend "$backend" \
        --precision "$precision" --data "$DATA" --steps "$steps" --seed 1337 --threads "$THREADS" \
        --peak-flops 1e9 --log "$WORK/$name.log" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
}

# The probe for a GPU is the first CUDA run itself: without a usable device
# the backend's init stops at once with "no usable GPU on this node (reason)".
read -r first_name first_steps first_opts <<< "${SETTINGS[0]}"
# shellcheck disable=SC2086   # the options are words
if ! run "${first_name}_cuda" cuda fp32 "$first_steps" $first_opts; then
    if grep -q 'no usable GPU' "$WORK/${first_name}_cuda.err"; then
        smi="nvidia-smi not installed"
        command -v nvidia-smi > /dev/null 2>&1 && smi="nvidia-smi -L: $(nvidia-smi -L 2>&1 | head -1)"
        echo "SKIP: no CUDA device ($(grep -o 'no usable GPU.*' "$WORK/${first_name}_cuda.err" | head -1); $smi)"
        exit 77
    fi
    echo "FAIL: --backend cuda did not run:"; tail -5 "$WORK/${first_name}_cuda.err" | sed 's/^/    /'
    exit 1
fi

compare() {   # compare NAME STEPS TOL_STEP1 TOL: the losses of NAME against NAME's CPU run
    local name=$1 steps=$2 tol1=$3 tol=$4 ref=${1%_cuda*}_cpu
    paste -d' ' <(field "$WORK/$ref.log" loss) <(field "$WORK/$name.log" loss) > "$WORK/losses_$name.txt"
    echo "step  loss (cpu)      loss ($name)     rel. difference"
    awk -v steps="$steps" -v tol1="$tol1" -v tol="$tol" '
    NF == 2 { n++
              num = "^-?[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$"
              if ($1 !~ num || $2 !~ num || $1 == 0) { printf "%4d  %-15s %-15s not comparable\n", n, $1, $2; bad++; next }
              d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1)
              printf "%4d  %-15s %-15s %.3g\n", n, $1, $2, r
              if (r > (n == 1 ? tol1 : tol)) bad++ }
    END { if (n != steps) { printf "expected %d steps in each log, got %d\n", steps, n; exit 1 }
          exit bad > 0 }' "$WORK/losses_$name.txt"
}

for setting in "${SETTINGS[@]}"; do
    read -r name steps opts <<< "$setting"
    switched=()   # the bf16 runs with a switch on
    case $name in tiny) switched=(lt mma) ;; gpt2) switched=(lt_mma) ;; esac
    runs=("${name}_cpu cpu fp32" "${name}_cuda cuda fp32" "${name}_cuda_bf16 cuda bf16")
    for sw in "${switched[@]}"; do runs+=("${name}_cuda_bf16_$sw cuda bf16"); done
    for r in "${runs[@]}"; do
        read -r run_name backend precision <<< "$r"
        [ "$run_name" = "${first_name}_cuda" ] && continue   # the probe ran it
        # shellcheck disable=SC2086   # the options are words
        if ! run "$run_name" "$backend" "$precision" "$steps" $opts; then
            bad "$name: --backend $backend --precision $precision did not run" "$WORK/$run_name.err"
            continue 2
        fi
    done
    if compare "${name}_cuda" "$steps" $TOL_FIRST $TOL; then
        ok "$name: cuda fp32 vs cpu, $steps steps: losses within $TOL_FIRST (step 1) and $TOL relative"
    else
        bad "$name: cuda fp32 and cpu losses differ by more than $TOL_FIRST (step 1) / $TOL relative (logs in $WORK)"
    fi
    if compare "${name}_cuda_bf16" "$steps" $TOL_BF16 $TOL_BF16; then
        ok "$name: cuda bf16 vs cpu fp32, $steps steps: losses within $TOL_BF16 relative"
    else
        bad "$name: cuda bf16 and cpu fp32 losses differ by more than $TOL_BF16 relative (logs in $WORK)"
    fi
    for sw in "${switched[@]}"; do
        if compare "${name}_cuda_bf16_$sw" "$steps" $TOL_BF16 $TOL_BF16; then
            ok "$name: cuda bf16 ($sw on) vs cpu fp32, $steps steps: losses within $TOL_BF16 relative"
        else
            bad "$name: cuda bf16 ($sw on) and cpu fp32 losses differ by more than $TOL_BF16 relative (logs in $WORK)"
        fi
    done
done
# bf16 activations (--activation-dtype bf16, osdp/layout.h), tiny: the CUDA bf16 table against the CPU bf16
# table, both with them, all-DP and ZDP with recompute (--plan zdp --recompute all: bit for bit the all-DP
# run on each backend, the plan never changes the numbers); measured = predicted memory on the GPU.  Within
# TOL_BF16 relative: the same bf16 weights and stored activations, the GPU's products rounding their other
# operands (d(out), the weights' products' fp32 inputs) where the CPU table widens
act_ok=1
for r in "act_cpu cpu --plan dp" "act_cuda cuda --plan dp" "act_cuda_rc cuda --plan zdp --recompute all"; do
    read -r run_name backend plan_opts <<< "$r"
    # shellcheck disable=SC2086   # the options are words
    run "$run_name" "$backend" bf16 10 --model "$TINY" --batch 4 --activation-dtype bf16 $plan_opts ||
        { act_ok=0; bad "bf16 activations: --backend $backend did not run" "$WORK/$run_name.err"; }
done
if [ $act_ok = 1 ]; then
    if compare act_cuda 10 $TOL_BF16 $TOL_BF16; then
        ok "bf16 activations: cuda bf16 vs cpu bf16, 10 steps: losses within $TOL_BF16 relative"
    else bad "bf16 activations: cuda and cpu losses differ by more than $TOL_BF16 relative (logs in $WORK)"; fi
    mem=1
    for cat in activations workspace total; do
        [ -n "$(field "$WORK/act_cuda.log" "peak_$cat" | tail -1)" ] &&
        [ "$(field "$WORK/act_cuda.log" "peak_$cat" | tail -1)" = "$(field "$WORK/act_cuda.log" "pred_$cat" | tail -1)" ] || mem=0
    done
    if [ "$(losses "$WORK/act_cuda.log")" = "$(losses "$WORK/act_cuda_rc.log")" ] && [ $mem = 1 ]; then
        ok "bf16 activations on the GPU: ZDP with recompute = all-DP bit for bit; measured = predicted memory"
    else bad "bf16 activations on the GPU: recompute changed the losses or memory differs from the prediction"; fi
fi
summary test_cuda_vs_cpu

#!/bin/bash
# The device mesh (issue 14, DESIGN.md §9) with the real binary on real MPI
# ranks (oversubscribed cores are fine):
#   1. losses of TP 2 x DP 2, TP 4 x DP 1 (4 ranks) and TP 2 x DP 4 (8 ranks)
#      agree with the 1-rank run within 1e-5 relative over 10 steps, same
#      global batch, on a uniform and on a mixed-width model
#      and their validation losses (osdp_runtime_evaluate) too
#   2. at a fixed mesh (TP 2 x DP 2) all-DP, all-ZDP, a mixed plan (with
#      recompute) and a split plan give bitwise-identical losses; a split
#      plan that cuts inside linear layers agrees within 1e-5 (a cut product
#      sums its pieces in another order than one GEMM, as at tp 1:
#      tests/system/test_split_recompute.sh)
#   3. every run: measured = predicted peak per category (tp_comm included)
#      to the byte, on every rank (the summary's smallest and largest over
#      the ranks)
#   4. the tensor-parallel traffic per step equals the closed form of
#      include/osdp/runtime.h (all-reduce and all-gather bytes and calls)
#   5. bad --tp values: a clear message and a non-zero exit on every rank
#   6. --plan auto --tp auto: the planner's T, the mesh built on it, the
#      plan's peak measured
# Run by `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC).
set -u
. "$(dirname "$0")/../lib/test_lib.sh" mesh-work

# two models of 4 heads: uniform, and mixed widths (attn.1 owns an input projection)
U="$WORK/t_mesh.ini"; I="$WORK/t_mesh_ic.ini"
printf '[model]\nname = t_mesh\nn_layer = 2\nn_head = 4\nn_embd = 32\nvocab = 256\nctx = 32\n' > "$U"
printf '[model]\nname = t_mesh_ic\nn_layer = 3\nn_head = 4\nwidths = 32, 48, 32\nvocab = 256\nctx = 32\n' > "$I"
SEQ=16; GLOBAL=8; STEPS=10

run() {   # run NRANKS NAME [train options...]: writes $WORK/NAME.{out,err,log}
    local n=$1 name=$2; shift 2
    timeout 120 "$MPIEXEC" -n "$n" "$BIN" train --data "$DATA" --threads 1 --peak-flops 1e9 --seq-len $SEQ \
        --global-batch $GLOBAL --steps $STEPS --lr 1e-3 --log "$WORK/$name.log" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
}

# agree A B: the two logs have STEPS losses each, equal within 1e-5 relative
agree() { losses_within "$1" "$2" $STEPS 1e-5; }

# memory_ok LOG: every step's measured peak = predicted, per category and in total, and the
# summary's smallest and largest over the ranks = predicted
memory_ok() {
    local cat m p
    for cat in state weights grads activations workspace tp_comm total; do
        m=$(field "$1" "peak_$cat" | sort -u); p=$(field "$1" "pred_$cat" | sort -u)
        [ -n "$m" ] && [ "$m" = "$p" ] || { echo "    $1 $cat: measured $m predicted $p"; return 1; }
        [ "$(summary_field "$1" "rank_peak_min_$cat")" = "$p" ] && [ "$(summary_field "$1" "rank_peak_max_$cat")" = "$p" ] ||
            { echo "    $1 $cat: ranks' peaks $(summary_field "$1" "rank_peak_min_$cat")..$(summary_field "$1" "rank_peak_max_$cat"), predicted $p"; return 1; }
    done
}

# traffic_ok LOG TP B ACCUM RECOMPUTING WIDTHS...: the TP kinds of every step = the closed form
# (include/osdp/runtime.h); RECOMPUTING: the sum of the recomputing operators' widths and their count, "sum:count"
traffic_ok() {
    local log=$1 tp=$2 b=$3 a=$4 rc=$5; shift 5
    local widths=("$@") L=$# sum=0 w
    for w in "${widths[@]}"; do sum=$((sum + w)); done
    local d0=${widths[0]} dl=${widths[$((L - 1))]} rc_sum=${rc%:*} rc_n=${rc#*:}
    local ar_bytes=$((4 * a * b * SEQ * (d0 + 2 * sum + rc_sum + 2 * sum + dl) + 16))
    local ar_calls=$((a * (1 + 2 * L + rc_n + 2 * L + 1) + 1))
    local ag_bytes=$((4 * a * 3 * b * SEQ * tp)) ag_calls=$a
    local got="$(field "$log" tp_ar_bytes | sort -u) $(field "$log" tp_ar_calls | sort -u) $(field "$log" tp_ag_bytes | sort -u) $(field "$log" tp_ag_calls | sort -u)"
    [ "$got" = "$ar_bytes $ar_calls $ag_bytes $ag_calls" ] || { echo "    $log: TP traffic $got, closed form $ar_bytes $ar_calls $ag_bytes $ag_calls"; return 1; }
}

# -- 1. every mesh against one rank, on both models (--plan dp: any plan gives the same losses, part 2)
for model in U I; do
    path=${!model}
    run 1 "${model}_ref" --model "$path" --batch 4 --plan dp --val-data "$DATA" --eval-every 5 --eval-batches 1
    run 4 "${model}_tp2dp2" --model "$path" --tp 2 --batch 2 --plan dp --val-data "$DATA" --eval-every 5 --eval-batches 1
    run 4 "${model}_tp4dp1" --model "$path" --tp 4 --batch 4 --plan dp
    run 8 "${model}_tp2dp4" --model "$path" --tp 2 --batch 2 --plan zdp
    for mesh in tp2dp2 tp4dp1 tp2dp4; do
        if agree "$WORK/${model}_$mesh.log" "$WORK/${model}_ref.log"; then
            ok "model $model, $mesh ($(config_field "$WORK/${model}_$mesh.log" ranks) ranks): $STEPS losses within 1e-5 of 1 rank (last $(field "$WORK/${model}_$mesh.log" loss | tail -1) vs $(field "$WORK/${model}_ref.log" loss | tail -1))"
        else
            bad "model $model, $mesh: losses differ from 1 rank" "$WORK/${model}_$mesh.err"
            paste <(field "$WORK/${model}_$mesh.log" loss) <(field "$WORK/${model}_ref.log" loss) | head -3
        fi
    done
done
val_ok=1
for model in U I; do
    v=$(field "$WORK/${model}_tp2dp2.log" val_loss | tr '\n' ' '); r=$(field "$WORK/${model}_ref.log" val_loss | tr '\n' ' ')
    awk -v a="$v" -v b="$r" 'BEGIN { if (split(a, x, " ") != 2 || split(b, y, " ") != 2) exit 1;
        for (i = 1; i <= 2; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (!(d <= 1e-5 * y[i])) exit 1 } }' || val_ok=0
done
[ $val_ok = 1 ] && ok "validation losses after steps 5 and 10 on TP 2 x DP 2 within 1e-5 of 1 rank (model U: $(field "$WORK/U_tp2dp2.log" val_loss | tr '\n' ' ')vs $(field "$WORK/U_ref.log" val_loss | tr '\n' ' '))" ||
    bad "validation on TP 2 x DP 2"
[ "$(config_field "$WORK/U_tp2dp4.log" dp)" = 4 ] && [ "$(config_field "$WORK/U_tp2dp4.log" tp)" = 2 ] &&
   grep -q "^mesh: 8 ranks = tp 2 x dp 4 x pp 1" "$WORK/U_tp2dp4.out" &&
   [ "$(config_field "$WORK/U_tp2dp4.log" global_batch)" = $GLOBAL ] &&
   [ "$(field "$WORK/U_tp2dp4.log" tokens | sort -u)" = $((GLOBAL * SEQ)) ] &&
    ok "8 ranks: mesh printed and logged as tp 2 x dp 4 x pp 1, global batch $GLOBAL x $SEQ tokens per step" ||
    bad "mesh of 8 ranks: $(head -1 "$WORK/U_tp2dp4.out")"

# -- 2. plan invariance on TP 2 x DP 2 (uniform model): all-DP (part 1), all-ZDP, mixed with recompute, split
printf 'embed = zdp\nattn.0 = dp\nmlp.0 = zdp recompute\nattn.1 = zdp\nmlp.1 = dp\nhead = zdp\n' > "$WORK/mixed.plan"
# split.plan: mlp's 2 slices are cut where proj.weight starts (its parts at tp 2: 64 + 2048 + 64 of
# 4256 elements), so no product is cut; cut.plan cuts qkv, fc, proj and lm_head by rows
printf 'embed = zdp\nattn.0 = dp\nmlp.0 = 1/2 recompute\nattn.1 = zdp\nmlp.1 = 2/2\nhead = dp\n' > "$WORK/split.plan"
printf 'embed = dp\nattn.0 = 1/2\nmlp.0 = 2/3 recompute\nattn.1 = 2/2\nmlp.1 = 0/3\nhead = 1/2\n' > "$WORK/cut.plan"
run 4 U_tp2dp2_zdp --model "$U" --tp 2 --batch 2 --plan zdp
run 4 U_tp2dp2_mixed --model "$U" --tp 2 --batch 2 --plan "$WORK/mixed.plan"
run 4 U_tp2dp2_split --model "$U" --tp 2 --batch 2 --plan "$WORK/split.plan"
# (cut.plan cuts the head: the naive head, --head naive; the fused one is never cut)
run 4 U_tp2dp2_cut --model "$U" --tp 2 --batch 2 --plan "$WORK/cut.plan" --head naive
ref=$(losses "$WORK/U_tp2dp2.log")
if [ "$(echo "$ref" | wc -l)" = $STEPS ] && [ "$(losses "$WORK/U_tp2dp2_zdp.log")" = "$ref" ] &&
   [ "$(losses "$WORK/U_tp2dp2_mixed.log")" = "$ref" ] && [ "$(losses "$WORK/U_tp2dp2_split.log")" = "$ref" ]; then
    ok "TP 2 x DP 2: all-DP, all-ZDP, mixed with recompute, split between tensors (1/2, 2/2): $STEPS bitwise-equal losses"
else bad "TP 2 x DP 2: plans give different losses" "$WORK/U_tp2dp2_split.err"; fi
if agree "$WORK/U_tp2dp2_cut.log" "$WORK/U_tp2dp2.log" && [ "$(losses "$WORK/U_tp2dp2_cut.log")" != "$ref" ]; then
    ok "TP 2 x DP 2: a split plan cutting inside linear layers: $STEPS losses within 1e-5 (not bitwise: pieces summed)"
else bad "TP 2 x DP 2: cut plan vs all-DP" "$WORK/U_tp2dp2_cut.err"; fi

# -- 3. memory: measured = predicted on every rank, per category, every run
mem_ok=1; runs=0
for log in "$WORK"/*.log; do
    memory_ok "$log" || mem_ok=0
    runs=$((runs + 1))
done
# the head's staging at B 2: 3 statistics per token for the rank and the group of 2, and the fused head's
# chunk of logits (min(T, 64) tokens x the rank's 128 vocabulary columns)
tp_comm=$(field "$WORK/U_tp2dp4.log" peak_tp_comm | tail -1)
[ $mem_ok = 1 ] && [ $runs = 12 ] && [ "$tp_comm" = $((2 * (3 * (2 + 1) * SEQ + SEQ * 128) * 4)) ] &&
    ok "memory: measured = predicted on every rank for state, weights, grads, activations, workspace, tp_comm, total ($runs runs; TP 2 staging $tp_comm B)" ||
    bad "memory prediction on the mesh ($runs runs, tp_comm $tp_comm)"

# -- 4. the TP traffic's closed form: every TP run (R: mixed recomputes mlp.0, split mlp.0)
tr_ok=1
traffic_ok "$WORK/U_tp2dp2.log" 2 2 2 0:0 32 32 || tr_ok=0
traffic_ok "$WORK/U_tp4dp1.log" 4 4 2 0:0 32 32 || tr_ok=0
traffic_ok "$WORK/U_tp2dp4.log" 2 2 1 0:0 32 32 || tr_ok=0
traffic_ok "$WORK/I_tp2dp2.log" 2 2 2 0:0 32 48 32 || tr_ok=0
traffic_ok "$WORK/I_tp4dp1.log" 4 4 2 0:0 32 48 32 || tr_ok=0
traffic_ok "$WORK/I_tp2dp4.log" 2 2 1 0:0 32 48 32 || tr_ok=0
traffic_ok "$WORK/U_tp2dp2_mixed.log" 2 2 2 32:1 32 32 || tr_ok=0
traffic_ok "$WORK/U_tp2dp2_split.log" 2 2 2 32:1 32 32 || tr_ok=0
traffic_ok "$WORK/U_tp2dp2_cut.log" 2 2 2 32:1 32 32 || tr_ok=0
[ "$(field "$WORK/U_ref.log" tp_ar_calls | sort -u)" = 0 ] && [ "$(field "$WORK/U_ref.log" tp_ag_bytes | sort -u)" = 0 ] || tr_ok=0
[ $tr_ok = 1 ] && ok "TP traffic per step = closed form on 9 runs (e.g. TP 2 x DP 2: all-reduce $(field "$WORK/U_tp2dp2.log" tp_ar_bytes | tail -1) B in $(field "$WORK/U_tp2dp2.log" tp_ar_calls | tail -1) calls, all-gather $(field "$WORK/U_tp2dp2.log" tp_ag_bytes | tail -1) B); none at 1 rank" ||
    bad "TP traffic closed form"

# -- 5. bad --tp values: refused with a message naming --tp, non-zero exit on every rank
refused_tp() {   # refused_tp NAME NRANKS PATTERN [options]
    local name=$1 n=$2 pattern=$3; shift 3
    timeout 120 "$MPIEXEC" -n "$n" "$BIN" train --data "$DATA" --threads 1 --peak-flops 1e9 --steps 1 --plan dp \
        --log "$WORK/bad_$name.log" "$@" >"$WORK/bad_$name.out" 2>"$WORK/bad_$name.err"
    local rc=$? count; count=$(grep -c "error: " "$WORK/bad_$name.err")
    if [ $rc != 0 ] && [ $rc != 124 ] && [ "$count" = 1 ] && grep -q -- "$pattern" "$WORK/bad_$name.err" && [ ! -e "$WORK/bad_$name.log" ]; then
        ok "--tp refused ($name, exit $rc): $(grep -o -- "$pattern.*" "$WORK/bad_$name.err" | cut -c1-90)"
    else bad "--tp $name: rc $rc, $count error lines" "$WORK/bad_$name.err"; fi
}
refused_tp zero 2 "--tp '0': expected an integer in \[1, " --model "$U" --tp 0
refused_tp word 2 "--tp 'abc': expected an integer in \[1, 4096\] or auto" --model "$U" --tp abc
refused_tp ranks 4 "--tp 3 does not divide the 4 ranks" --model "$U" --tp 3
refused_tp heads 4 "--tp 4 does not divide the model's 2 attention heads" --model "$M" --tp 4
refused_tp auto 2 "--tp auto needs --plan auto" --model "$U" --tp auto

# -- 6. --tp auto: rank 0's planner chooses T, every rank builds that mesh
timeout 120 "$MPIEXEC" -n 4 "$BIN" train --data "$DATA" --threads 1 --peak-flops 1e9 --seq-len $SEQ --steps 2 \
    --model "$U" --plan auto --tp auto --log "$WORK/auto.log" >"$WORK/auto.out" 2>"$WORK/auto.err"; rc=$?
chosen=$(sed -n 's/^--tp auto: the planner chooses tensor-parallel degree \([0-9]*\) of the 4 ranks$/\1/p' "$WORK/auto.out")
if [ $rc = 0 ] && [ -n "$chosen" ] && [ "$(config_field "$WORK/auto.log" tp)" = "$chosen" ] &&
   grep -q "^mesh: 4 ranks = tp $chosen x dp $((4 / chosen)) x pp 1" "$WORK/auto.out" && memory_ok "$WORK/auto.log"; then
    ok "--plan auto --tp auto on 4 ranks: the planner chose tp $chosen, the mesh and the log agree, peak = predicted"
else bad "--tp auto (rc $rc, chosen '$chosen')" "$WORK/auto.err"; fi

summary test_mesh

#!/bin/bash
# Mixed precision on real MPI ranks (CPU): --precision bf16 makes the working
# weights bf16 (rounded copies of the fp32 master shards, all-gathered in
# bf16) while gradients, their reduce-scatters, AdamW and activations stay
# fp32 (osdp/runtime.h).  The CPU bf16 table widens the weights for OpenBLAS,
# so this proves the runtime's path that the GPU runs, not the GPU kernels
# (tests/cuda/test_cuda, tests/system/test_cuda_vs_cpu.sh).  Parts 8-11: the
# bf16 residual stream (--residual-dtype bf16) that rides on bf16 weights;
# part 12: bf16 activations (--activation-dtype bf16), the same way.
set -u
. "$(dirname "$0")/../lib/test_lib.sh" mixed-precision-work

run() {   # run NRANKS NAME [train options...]: writes $WORK/NAME.{out,err,log}
    local n=$1 name=$2; shift 2
    "$MPIEXEC" -n "$n" "$BIN" train --data "$DATA" --model "$M" --threads 1 --peak-flops 1e9 \
        --log "$WORK/$name.log" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
}
last() { field "$WORK/$1.log" "$2" | tail -1; }
# memory_equal LOG CATEGORY...: each category's last measured peak = its prediction (tp_comm may be absent)
memory_equal() {
    local log=$1 cat m p r=0
    shift
    for cat in "$@"; do
        m=$(last "$log" "peak_$cat"); p=$(last "$log" "pred_$cat")
        [ "$m" = "$p" ] && { [ -n "$m" ] || [ "$cat" = tp_comm ]; } || { r=1; echo "    $log $cat: measured $m predicted $p"; }
    done
    return $r
}
# stage_fields LOG: every stage category's measured peak on its ranks (min and max) = its prediction;
# prints how many there are, fails (saying why) when one differs or there are fewer than 12
stage_fields() {
    local n
    n=$(tr ' ' '\n' < "$WORK/$1.log" | grep '^stage_[0-9]*_p' | awk -F= '
        { split($1, k, "_"); key = k[2] "_" k[length(k)]; kind = $1; sub(/^stage_[0-9]*_/, "", kind); sub(/_[a-z]*$/, "", kind)
          v[key, kind] = $2; keys[key] = 1 }
        END { n = 0; for (key in keys) { if (v[key, "peak_min"] != v[key, "pred"] || v[key, "peak_max"] != v[key, "pred"]) { print "bad " key; exit 1 } n++ }
              print n }') || { echo "    $1: $n" >&2; return 1; }
    [ "${n:-0}" -ge 12 ] 2>/dev/null || { echo "    $1: $n stage fields" >&2; return 1; }
    echo "$n"
}
# save_and_resume NAME OPTIONS...: NAME_first runs 5 of 10 steps and saves, NAME_rest resumes it to step 10
save_and_resume() {
    local name=$1
    shift
    OSDP_CKPT_MPIO=independent run 4 "${name}_first" --steps 5 --lr-steps 10 "$@" --ckpt-dir "$WORK/$name" ||
        bad "$name: the run with a save" "$WORK/${name}_first.err"
    OSDP_CKPT_MPIO=independent run 4 "${name}_rest" --steps 10 "$@" --resume "$WORK/$name/step_00000005.h5" ||
        bad "$name: the resume" "$WORK/${name}_rest.err"
}
# refused OPTION NAME: OPTION bf16 beside fp32 weights stops train (4 ranks, no log) and plan (a device of fp32
# weights), each naming the option
refused() {
    local option=$1 name=$2 rc rcp
    run 4 "${name}_fp32" --steps 1 --precision fp32 "$option" bf16; rc=$?
    "$BIN" plan --model "$M" --device "$SRC/tests/inputs/t_device.ini" --ranks 4 "$option" bf16 \
        >"$WORK/${name}_plan.out" 2>"$WORK/${name}_plan.err"; rcp=$?
    if [ $rc != 0 ] && [ $rcp != 0 ] && [ ! -s "$WORK/${name}_fp32.log" ] &&
       grep -q -- "$option bf16 needs bf16 weights, and --precision gives fp32" "$WORK/${name}_fp32.err" &&
       grep -q -- "$option bf16 needs bf16 weights" "$WORK/${name}_plan.err"; then
        ok "$option bf16 with fp32 weights: train exit $rc, plan exit $rcp, '$(grep -o -- "$option bf16 needs.*" "$WORK/${name}_fp32.err" | head -1)'"
    else bad "$option bf16 with fp32 weights (train rc $rc, plan rc $rcp)" "$WORK/${name}_fp32.err"; fi
}
# resumed WHOLE FIRST REST: a run saved at step 5 (FIRST) and resumed (REST) gives WHOLE's 10 losses
resumed() {
    [ "$(losses "$WORK/$1.log" | tail -5)" = "$(losses "$WORK/$3.log" | tail -5)" ] &&
    [ "$(losses "$WORK/$2.log")" = "$(losses "$WORK/$1.log" | head -5)" ] &&
    [ "$(losses "$WORK/$3.log" | wc -l)" = 5 ]
}

# -- 1. plan invariance in bf16: every plan gathers the same bf16 weights.
#       Bitwise for whole operators; a split operator sums its products piece
#       by piece (another order of fp32 sums), within 1e-5 relative
{ echo "embed = zdp"; echo "attn.0 = dp"; echo "mlp.0 = zdp"; echo "attn.1 = zdp"; echo "mlp.1 = dp"; echo "head = zdp"; } \
    > "$WORK/mixed.plan"
for p in dp zdp mixed; do
    spec=$p; [ $p = mixed ] && spec="$WORK/mixed.plan"
    run 4 "bf16_$p" --steps 10 --batch 2 --plan "$spec" --precision bf16 || bad "bf16 plan $p ran" "$WORK/bf16_$p.err"
done
run 4 bf16_split --steps 10 --batch 2 --plan zdp --split 2 --precision bf16 || bad "bf16 split ran" "$WORK/bf16_split.err"
run 4 fp32_dp --steps 10 --batch 2 --plan dp --precision fp32 || bad "fp32 dp ran" "$WORK/fp32_dp.err"
if [ "$(losses "$WORK/bf16_dp.log" | wc -l)" = 10 ] &&
   [ "$(losses "$WORK/bf16_dp.log")" = "$(losses "$WORK/bf16_zdp.log")" ] &&
   [ "$(losses "$WORK/bf16_dp.log")" = "$(losses "$WORK/bf16_mixed.log")" ] &&
   paste -d' ' <(field "$WORK/bf16_dp.log" loss) <(field "$WORK/bf16_split.log" loss) |
       awk 'NF == 2 {n++; d=$1-$2; if (d<0) d=-d; if (d > 1e-5*$1) exit 1} END {exit n != 10}'; then
    ok "bf16 plan invariance on 4 ranks: all-DP, all-ZDP, mixed: 10 bitwise-equal losses; every operator split 1/2 ZDP: within 1e-5"
else bad "bf16 plan invariance (losses differ)"; paste <(losses "$WORK/bf16_dp.log") <(losses "$WORK/bf16_split.log") | head -3; fi

# -- 2. bf16 against fp32: the same curve within 1e-2 relative, but not the same bits
if paste -d' ' <(field "$WORK/fp32_dp.log" loss) <(field "$WORK/bf16_dp.log" loss) |
       awk 'NF == 2 {n++; d=$1-$2; if (d<0) d=-d; if (d > m) m = d; if (d > 1e-2*$1) bad=1}
            END {printf "max |difference| %.2e over %d steps\n", m, n; exit (bad || n != 10)}' > "$WORK/curve.txt" &&
   [ "$(losses "$WORK/fp32_dp.log")" != "$(losses "$WORK/bf16_dp.log")" ]; then
    ok "bf16 losses follow fp32 within 1e-2 relative and differ from them ($(cat "$WORK/curve.txt"))"
else bad "bf16 against fp32 losses" "$WORK/curve.txt"; fi

# -- 3. traffic: all-gathers move half the bytes, reduce-scatters the same
ag32=$(last fp32_dp ag_bytes); rs32=$(last fp32_dp rs_bytes)
ag16=$(last bf16_dp ag_bytes); rs16=$(last bf16_dp rs_bytes); agz16=$(last bf16_zdp ag_bytes)
if [ -n "$ag32" ] && [ "$ag16" = $((ag32 / 2)) ] && [ "$rs16" = "$rs32" ] && [ "$agz16" = "$ag32" ]; then
    ok "traffic: bf16 all-DP AG $ag16 B = half of fp32's $ag32, all-ZDP 2 AG = $agz16 B, RS fp32 both ($rs16 B)"
else bad "traffic: fp32 ag=$ag32 rs=$rs32, bf16 ag=$ag16 rs=$rs16 zdp ag=$agz16"; fi

# -- 4. memory: measured = predicted per category; bf16 weights half, state 18/16 of fp32
mem_ok=1
for log in fp32_dp bf16_dp bf16_zdp bf16_mixed bf16_split; do
    for cat in state weights grads activations workspace total; do
        m=$(last "$log" "peak_$cat"); p=$(last "$log" "pred_$cat")
        [ -n "$m" ] && [ "$m" = "$p" ] || { mem_ok=0; echo "    $log $cat: measured $m predicted $p"; }
    done
done
s32=$(last fp32_dp peak_state); s16=$(last bf16_dp peak_state)
w32=$(last fp32_dp peak_weights); w16=$(last bf16_dp peak_weights)
if [ $mem_ok = 1 ] && [ $((s32 * 18)) = $((s16 * 16)) ] && [ $((w16 * 2)) = "$w32" ]; then
    ok "memory: measured = predicted in 5 runs (one split); bf16 weights $w16 B = half of $w32, state $s16 B = 18/16 of $s32"
else bad "memory: state $s32/$s16 weights $w32/$w16"; fi

# -- 5. the planner counts 2-byte gathers: --plan auto under a limit that only
#       bf16 weights meet, measured peak = the planner's prediction
lim=$(( ($(last bf16_dp pred_total) + $(last fp32_dp pred_total)) / 2 ))
run 4 lim_bf16 --steps 2 --batch 2 --plan dp --precision bf16 --mem-limit $lim; rc16=$?
run 4 lim_fp32 --steps 2 --batch 2 --plan dp --precision fp32 --mem-limit $lim; rc32=$?
run 4 plan_bf16 --steps 2 --batch 2 --global-batch 8 --plan auto --precision bf16 --mem-limit $lim \
    --device "$SRC/tests/inputs/t_device.ini"; rca=$?
if [ $rc16 = 0 ] && [ $rc32 != 0 ] && grep -q "out of memory" "$WORK/lim_fp32.err" && [ $rca = 0 ] &&
   [ "$(last plan_bf16 peak_total)" = "$(last plan_bf16 pred_total)" ] && [ "$(last plan_bf16 peak_total)" -le $lim ]; then
    ok "limit $lim B: all-DP fits in bf16, not in fp32 (exit $rc32); --plan auto --precision bf16 peaks at its prediction $(last plan_bf16 peak_total) B"
else bad "limit $lim: bf16 rc=$rc16 fp32 rc=$rc32 auto rc=$rca" "$WORK/plan_bf16.err"; fi

# -- 6. checkpoints hold the fp32 master: a bf16 run resumed at step 5 continues bit for bit.
#       The uninterrupted run is bf16_zdp (part 1: the same options); --lr-steps 10 gives the saved
#       run its schedule.  Independent MPI-IO: the precision does not change what a rank writes or
#       reads (fp32 shards), and collective rounds, slow on oversubscribed cores, are proven by
#       tests/system/test_checkpoint_resume.sh
OSDP_CKPT_MPIO=independent run 4 ck_first --steps 5 --lr-steps 10 --batch 2 --plan zdp --precision bf16 \
    --ckpt-dir "$WORK/ck" || bad "bf16 run with a save" "$WORK/ck_first.err"
OSDP_CKPT_MPIO=independent run 4 ck_rest --steps 10 --batch 2 --plan zdp --precision bf16 \
    --resume "$WORK/ck/step_00000005.h5" || bad "bf16 resume" "$WORK/ck_rest.err"
if [ "$(losses "$WORK/bf16_zdp.log" | tail -5)" = "$(losses "$WORK/ck_rest.log" | tail -5)" ] &&
   [ "$(losses "$WORK/ck_first.log")" = "$(losses "$WORK/bf16_zdp.log" | head -5)" ] &&
   [ "$(losses "$WORK/ck_rest.log" | wc -l)" = 5 ]; then
    ok "bf16 checkpoint: steps 6-10 after a resume at step 5 equal the uninterrupted run's bit for bit"
else bad "bf16 checkpoint resume (losses differ)"; paste <(losses "$WORK/bf16_zdp.log" | tail -5) <(losses "$WORK/ck_rest.log") | head -5; fi

# -- 7. a precision that does not exist is refused, naming it
run 1 bad_precision --steps 1 --precision fp16; rc=$?
if [ $rc != 0 ] && grep -q -- "--precision 'fp16': expected bf16 or fp32" "$WORK/bad_precision.err"; then
    ok "--precision fp16: exit $rc, '$(grep -o -- "--precision 'fp16'.*" "$WORK/bad_precision.err" | head -1)'"
else bad "--precision fp16 (rc $rc)" "$WORK/bad_precision.err"; fi

# -- 8. a bf16 residual stream (--residual-dtype bf16, osdp/schedule.h): every operator's output rounded to
#       bf16 values, a recomputed operator's kept output held in 2 bytes.  Recompute never changes the
#       numbers (bit for bit), on PP 2 x DP 2 (1F1B: stage 0's last operator sends its fp32 output on, the
#       others keep theirs narrow) and on DP 4 with ZDP; measured = predicted per category in every run;
#       against the fp32 stream (part 1's bf16_dp) only rounding differs (within 1e-2, not the same bits)
run 4 res_pp_none --steps 10 --batch 2 --pp 2 --stages 0:3,3:6 --plan dp --precision bf16 --residual-dtype bf16 ||
    bad "bf16 stream PP 2 ran" "$WORK/res_pp_none.err"
run 4 res_pp_all --steps 10 --batch 2 --pp 2 --stages 0:3,3:6 --plan dp --precision bf16 --residual-dtype bf16 \
    --recompute all || bad "bf16 stream PP 2 with recompute ran" "$WORK/res_pp_all.err"
run 4 res_dp_none --steps 10 --batch 2 --plan dp --precision bf16 --residual-dtype bf16 ||
    bad "bf16 stream DP 4 ran" "$WORK/res_dp_none.err"
run 4 res_dp_all --steps 10 --batch 2 --plan zdp --precision bf16 --residual-dtype bf16 --recompute all ||
    bad "bf16 stream DP 4 ZDP with recompute ran" "$WORK/res_dp_all.err"
# interleaved (PP 2 x V 2, 4 chunks: the chunks' last operators send theirs on in fp32)
run 4 res_il_none --steps 6 --batch 1 --global-batch 8 --pp 2 --schedule interleaved --virtual-stages 2 \
    --stages 0:2,2:3,3:5,5:6 --plan dp --precision bf16 --residual-dtype bf16 || bad "bf16 stream interleaved ran" "$WORK/res_il_none.err"
run 4 res_il_all --steps 6 --batch 1 --global-batch 8 --pp 2 --schedule interleaved --virtual-stages 2 \
    --stages 0:2,2:3,3:5,5:6 --plan dp --precision bf16 --residual-dtype bf16 --recompute all ||
    bad "bf16 stream interleaved with recompute ran" "$WORK/res_il_all.err"
if [ "$(losses "$WORK/res_il_none.log" | wc -l)" = 6 ] &&
   [ "$(losses "$WORK/res_il_none.log")" = "$(losses "$WORK/res_il_all.log")" ]; then
    ok "bf16 residual stream, interleaved PP 2 x V 2: recompute all = none bit for bit over 6 steps"
else bad "bf16 residual stream interleaved: recompute changed the losses"; fi
if [ "$(losses "$WORK/res_pp_none.log" | wc -l)" = 10 ] &&
   [ "$(losses "$WORK/res_pp_none.log")" = "$(losses "$WORK/res_pp_all.log")" ] &&
   [ "$(losses "$WORK/res_dp_none.log" | wc -l)" = 10 ] &&
   [ "$(losses "$WORK/res_dp_none.log")" = "$(losses "$WORK/res_dp_all.log")" ]; then
    ok "bf16 residual stream: recompute all = none bit for bit over 10 steps, on PP 2 x DP 2 and on DP 4 (all-ZDP)"
else bad "bf16 residual stream: recompute changed the losses"; paste <(losses "$WORK/res_pp_none.log") <(losses "$WORK/res_pp_all.log") | head -3; fi
if paste -d' ' <(field "$WORK/bf16_dp.log" loss) <(field "$WORK/res_dp_none.log" loss) |
       awk 'NF == 2 {n++; d=$1-$2; if (d<0) d=-d; if (d > m) m = d; if (d > 1e-2*$1) bad=1}
            END {printf "max |difference| %.2e\n", m; exit (bad || n != 10)}' > "$WORK/res_curve.txt" &&
   [ "$(losses "$WORK/bf16_dp.log")" != "$(losses "$WORK/res_dp_none.log")" ]; then
    ok "bf16 residual stream against the fp32 one (bf16 weights both): within 1e-2 relative, not the same bits ($(cat "$WORK/res_curve.txt"))"
else bad "bf16 against fp32 residual stream" "$WORK/res_curve.txt"; fi
mem_ok=1
for log in res_pp_none res_pp_all res_dp_none res_dp_all res_il_none res_il_all; do
    memory_equal "$log" state weights grads activations workspace total || mem_ok=0
done
# every stage of the pipelined runs: each category's measured peak on its ranks (min and max) = its prediction
stage_fields=0
for log in res_pp_none res_pp_all res_il_none res_il_all; do
    n=$(stage_fields "$log") || mem_ok=0
    stage_fields=$((stage_fields + ${n:-0}))
done
if [ $mem_ok = 1 ]; then
    ok "bf16 residual stream: measured = predicted per category in 6 runs, and on every rank of every stage ($stage_fields stage categories; PP 2 stage 0 $(last res_pp_all peak_total) B with recompute)"
else bad "bf16 residual stream: measured and predicted memory differ"; fi

# -- 9. a bf16-stream run with recompute resumed at step 5 continues bit for bit (res_dp_all uninterrupted)
save_and_resume res_ck --batch 2 --plan zdp --precision bf16 --residual-dtype bf16 --recompute all
if resumed res_dp_all res_ck_first res_ck_rest; then
    ok "bf16 residual stream checkpoint: steps 6-10 after a resume at step 5 equal the uninterrupted run's bit for bit"
else bad "bf16 stream checkpoint resume (losses differ)"; paste <(losses "$WORK/res_dp_all.log" | tail -5) <(losses "$WORK/res_ck_rest.log") | head -5; fi

# -- 10. a bf16 stream beside fp32 weights is refused on every rank, naming the option (train, and plan
#        for a device of fp32 weights)
refused --residual-dtype res

# -- 11. a bf16 stream's tensor-parallel all-reduces move bf16 (osdp/schedule.h: partials rounded, summed in
#        fp32, the sum rounded), as Megatron-LM's do: TP 2 x DP 2 against DP 4 (part 8's res_dp_none, the same
#        global batch of 8) differs by that rounding alone, within 1e-3 relative; bit for bit run to run and
#        with recompute; the all-reduce bytes are half the fp32 stream's (whose closed form test_mesh checks),
#        the step's 16-byte scalar sum aside; measured = predicted memory
run 4 res_tp_a --steps 10 --batch 4 --tp 2 --plan dp --precision bf16 --residual-dtype bf16 || bad "bf16 stream TP 2 ran" "$WORK/res_tp_a.err"
run 4 res_tp_b --steps 10 --batch 4 --tp 2 --plan dp --precision bf16 --residual-dtype bf16 || bad "bf16 stream TP 2 again" "$WORK/res_tp_b.err"
run 4 res_tp_rc --steps 10 --batch 4 --tp 2 --plan zdp --precision bf16 --residual-dtype bf16 --recompute all ||
    bad "bf16 stream TP 2 with recompute ran" "$WORK/res_tp_rc.err"
run 4 res_tp_f --steps 2 --batch 4 --tp 2 --plan dp --precision bf16 || bad "fp32 stream TP 2 ran" "$WORK/res_tp_f.err"
if [ "$(losses "$WORK/res_tp_a.log" | wc -l)" = 10 ] &&
   [ "$(losses "$WORK/res_tp_a.log")" = "$(losses "$WORK/res_tp_b.log")" ] &&
   [ "$(losses "$WORK/res_tp_a.log")" = "$(losses "$WORK/res_tp_rc.log")" ] &&
   paste -d' ' <(field "$WORK/res_dp_none.log" loss) <(field "$WORK/res_tp_a.log" loss) |
       awk 'NF == 2 {n++; d=$1-$2; if (d<0) d=-d; if (d > m) m = d; if (d > 1e-3*$1) bad=1}
            END {printf "max |difference| %.2e\n", m; exit (bad || n != 10)}' > "$WORK/res_tp_curve.txt"; then
    ok "bf16 stream, TP 2 x DP 2 (bf16 all-reduces) against DP 4: within 1e-3 relative over 10 steps ($(cat "$WORK/res_tp_curve.txt")); bit for bit run to run and with recompute all"
else bad "bf16 stream TP 2"; cat "$WORK/res_tp_curve.txt" 2>/dev/null; paste <(losses "$WORK/res_dp_none.log") <(losses "$WORK/res_tp_a.log") <(losses "$WORK/res_tp_b.log") | head -3; fi
ar_bf16=$(field "$WORK/res_tp_a.log" tp_ar_bytes | sort -u); ar_fp32=$(field "$WORK/res_tp_f.log" tp_ar_bytes | sort -u)
tp_mem=1
for log in res_tp_a res_tp_rc; do
    for cat in state weights grads activations workspace tp_comm total; do
        m=$(last "$log" "peak_$cat"); p=$(last "$log" "pred_$cat")
        [ -n "$m" ] && [ "$m" = "$p" ] || { tp_mem=0; echo "    $log $cat: measured $m predicted $p"; }
    done
done
if [ -n "$ar_bf16" ] && [ -n "$ar_fp32" ] && [ $((ar_bf16 - 16)) -gt 0 ] && [ $((2 * (ar_bf16 - 16))) = $((ar_fp32 - 16)) ] &&
   [ $tp_mem = 1 ]; then
    ok "bf16 stream TP 2: $ar_bf16 B all-reduced a step against the fp32 stream's $ar_fp32 (half, the 16-byte scalar sum aside); measured = predicted memory with and without recompute"
else bad "bf16 stream TP 2 traffic ($ar_bf16 against $ar_fp32 B) or memory"; fi

# -- 12. bf16 activations (--activation-dtype bf16, osdp/layout.h): the products' saved inputs and outputs
#        (ln, qkv, heads, fc, gelu) stored in bf16, the forward reading the rounded values it stores.  Recompute never changes the
#        numbers (bit for bit) on DP 4 with ZDP, PP 2 x DP 2 and TP 2 x DP 2; TP 2 x DP 2 against DP 4 within
#        1e-3 relative (a fp32 stream's TP sums in another order); against fp32 activations (part 1's bf16_dp)
#        within 1e-2 absolute and not the same bits; measured = predicted per category on every rank of
#        every stage, with fewer activation bytes; a resume continues bit for bit; fp32 weights refused
run 4 act_dp_none --steps 10 --batch 2 --plan dp --precision bf16 --activation-dtype bf16 ||
    bad "bf16 activations DP 4 ran" "$WORK/act_dp_none.err"
run 4 act_dp_all --steps 10 --batch 2 --plan zdp --precision bf16 --activation-dtype bf16 --recompute all ||
    bad "bf16 activations DP 4 ZDP with recompute ran" "$WORK/act_dp_all.err"
run 4 act_pp_none --steps 10 --batch 2 --pp 2 --stages 0:3,3:6 --plan dp --precision bf16 --activation-dtype bf16 ||
    bad "bf16 activations PP 2 ran" "$WORK/act_pp_none.err"
run 4 act_pp_all --steps 10 --batch 2 --pp 2 --stages 0:3,3:6 --plan zdp --precision bf16 --activation-dtype bf16 \
    --recompute all || bad "bf16 activations PP 2 ZDP with recompute ran" "$WORK/act_pp_all.err"
run 4 act_tp_none --steps 10 --batch 4 --tp 2 --plan dp --precision bf16 --activation-dtype bf16 ||
    bad "bf16 activations TP 2 ran" "$WORK/act_tp_none.err"
run 4 act_tp_all --steps 10 --batch 4 --tp 2 --plan zdp --precision bf16 --activation-dtype bf16 --recompute all ||
    bad "bf16 activations TP 2 ZDP with recompute ran" "$WORK/act_tp_all.err"
run 4 act_res_pp --steps 10 --batch 2 --pp 2 --stages 0:3,3:6 --plan zdp --precision bf16 --activation-dtype bf16 \
    --residual-dtype bf16 --recompute all || bad "bf16 activations and stream PP 2 ran" "$WORK/act_res_pp.err"
same=1
for pair in "act_dp_none act_dp_all" "act_pp_none act_pp_all" "act_tp_none act_tp_all"; do
    set -- $pair
    [ "$(losses "$WORK/$1.log" | wc -l)" = 10 ] && [ "$(losses "$WORK/$1.log")" = "$(losses "$WORK/$2.log")" ] ||
        { same=0; echo "    $1 against $2:"; paste <(losses "$WORK/$1.log") <(losses "$WORK/$2.log") | head -3; }
done
if [ $same = 1 ]; then ok "bf16 activations: recompute all (ZDP) = none (DP) bit for bit over 10 steps on DP 4, PP 2 x DP 2, TP 2 x DP 2"
else bad "bf16 activations: recompute or ZDP changed the losses"; fi
if paste -d' ' <(field "$WORK/act_dp_none.log" loss) <(field "$WORK/act_tp_none.log" loss) |
       awk 'NF == 2 {n++; d=$1-$2; if (d<0) d=-d; if (d > m) m = d; if (d > 1e-3*$1) bad=1}
            END {printf "max |difference| %.2e\n", m; exit (bad || n != 10)}' > "$WORK/act_tp_curve.txt"; then
    ok "bf16 activations, TP 2 x DP 2 against DP 4: within 1e-3 relative over 10 steps ($(cat "$WORK/act_tp_curve.txt"))"
else bad "bf16 activations TP 2 against DP 4" "$WORK/act_tp_curve.txt"; fi
if paste -d' ' <(field "$WORK/bf16_dp.log" loss) <(field "$WORK/act_dp_none.log" loss) |
       awk 'NF == 2 {n++; d=$1-$2; if (d<0) d=-d; if (d > m) m = d; if (d > 1e-2) bad=1}
            END {printf "max |difference| %.2e over %d steps\n", m, n; exit (bad || n != 10)}' > "$WORK/act_curve.txt" &&
   [ "$(losses "$WORK/bf16_dp.log")" != "$(losses "$WORK/act_dp_none.log")" ]; then
    ok "bf16 activations against fp32 ones (bf16 weights both): within 1e-2 absolute, not the same bits ($(cat "$WORK/act_curve.txt"))"
else bad "bf16 against fp32 activations" "$WORK/act_curve.txt"; fi
mem_ok=1
for log in act_dp_none act_dp_all act_pp_none act_pp_all act_tp_none act_tp_all act_res_pp; do
    memory_equal "$log" state weights grads activations workspace tp_comm total || mem_ok=0
done
for log in act_pp_none act_pp_all act_res_pp; do stage_fields "$log" > /dev/null || mem_ok=0; done
a32=$(last bf16_dp peak_activations); a16=$(last act_dp_none peak_activations)
if [ $mem_ok = 1 ] && [ -n "$a32" ] && [ -n "$a16" ] && [ "$a16" -lt "$a32" ]; then
    ok "bf16 activations: measured = predicted per category in 7 runs and on every rank of every stage; DP 4 activations $a16 B against fp32's $a32 B"
else bad "bf16 activations: measured and predicted memory differ (or no saving: $a16 against $a32 B)"; fi
save_and_resume act_ck --batch 2 --plan zdp --precision bf16 --activation-dtype bf16 --recompute all
if resumed act_dp_all act_ck_first act_ck_rest; then
    ok "bf16 activations checkpoint: steps 6-10 after a resume at step 5 equal the uninterrupted run's bit for bit"
else bad "bf16 activations checkpoint resume (losses differ)"; fi
refused --activation-dtype act

summary test_mixed_precision

#!/bin/bash
# Hierarchical sharding (plan mode h, issue 16 item 2) on real ranks: 4 ranks
# as 2 emulated nodes x 2 and 8 as 2 x 4.  Against the flat plan on the same
# mesh (every h read as zdp): the losses (bitwise where the sums agree, within
# 1e-6 relative always: see below), memory predicted = measured to the byte
# per category, and the traffic per level equal to its closed form; a
# checkpoint of a hierarchical plan is logical (written once per element,
# loaded under a flat plan bitwise, resumed bitwise); bad input names the
# problem.  Run by `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC set).
#
# Why not always bitwise: a flat ZDP slice's gradient is one reduce-scatter
# over the D ranks, summed in MPI's order; a hierarchical one adds the node's
# ranks, then the nodes' sums: the same numbers in another order.
set -u
. "$(dirname "$0")/test_lib.sh" hier-work

# train NAME RANKS RPN PLANTEXT [options...]: the plan file from its text
train() {
    local name=$1 ranks=$2 rpn=$3 text=$4; shift 4
    printf '%b' "$text" > "$WORK/$name.plan"
    "$MPIEXEC" -n "$ranks" "$BIN" train --model "$M" --data "$DATA" --threads 1 --plan "$WORK/$name.plan" \
        --ranks-per-node "$rpn" --log "$WORK/$name.log" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
}
# total KEY LOG: the key summed over the log's steps
total() { field "$2" "$1" | awk '{s += $1} END {printf "%d", s}'; }
# close_losses A B: every step's loss within 1e-6 relative
close_losses() {
    paste <(field "$1" loss) <(field "$2" loss) | awk 'NF != 2 {bad = 1} {d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * $2) bad = 1; n++}
                                                       END {exit bad || n == 0}'
}
# memory_exact LOG: every category's measured peak = its prediction, every step
memory_exact() {
    local c
    for c in state weights grads activations workspace tp_comm total; do
        [ "$(field "$1" "peak_$c")" = "$(field "$1" "pred_$c")" ] && [ -n "$(field "$1" "peak_$c")" ] || return 1
    done
}

# -- 1 and 2: all-h against all-zdp, 2 accumulation steps, through an emulated link
for mesh in "4 2" "8 4"; do
    set -- $mesh; ranks=$1; rpn=$2; nodes=$((ranks / rpn)); A=2; S=3
    train "zdp_$ranks" "$ranks" "$rpn" 'default = zdp\n' --steps $S --batch 1 --global-batch $((ranks * A)) \
        --emulate-link 1G,10us || bad "$ranks ranks: zdp run" "$WORK/zdp_$ranks.err"
    train "h_$ranks" "$ranks" "$rpn" 'default = h\n' --steps $S --batch 1 --global-batch $((ranks * A)) \
        --emulate-link 1G,10us || bad "$ranks ranks: h run" "$WORK/h_$ranks.err"
    if [ "$(losses "$WORK/h_$ranks.log")" = "$(losses "$WORK/zdp_$ranks.log")" ]; then same="bitwise"
    else same="not bitwise"; fi
    if close_losses "$WORK/h_$ranks.log" "$WORK/zdp_$ranks.log"; then
        ok "$ranks ranks as $nodes emulated nodes x $rpn: all-h losses within 1e-6 of all-zdp's ($same: $(field "$WORK/h_$ranks.log" loss | tr '\n' ' '))"
    else bad "$ranks ranks: losses $(field "$WORK/h_$ranks.log" loss | tr '\n' ' ') vs $(field "$WORK/zdp_$ranks.log" loss | tr '\n' ' ')" "$WORK/h_$ranks.err"; fi
    if memory_exact "$WORK/h_$ranks.log" && memory_exact "$WORK/zdp_$ranks.log"; then
        ok "$ranks ranks: memory measured = predicted to the byte in every category (h state $(field "$WORK/h_$ranks.log" peak_state | head -1) B, zdp $(field "$WORK/zdp_$ranks.log" peak_state | head -1) B)"
    else bad "$ranks ranks: memory measured != predicted" "$WORK/h_$ranks.log"; fi
    # closed form per step, psi = the padded parameters (fp32, 4 bytes), from the flat run's reduce-scatters
    # (A psi 4 per step: tests/run_mpi_tests.sh ties them to psi): in-node all-gather 2 A psi 4 (forward and
    # backward), wire (R-1)/R of it; in-node reduce-scatter A psi 4, wire (R-1)/R; cross-node all-reduce of
    # each rank's in-node shard, A psi 4 / R, wire 2 (n-1)/n of it; nothing flat but the 16-byte sums
    psi4=$(( $(total rs_bytes "$WORK/zdp_$ranks.log") / (S * A) ))
    want="$((S * 2 * A * psi4)) $((S * 2 * A * psi4 * (rpn - 1) / rpn)) $((S * A * psi4)) $((S * A * psi4 * (rpn - 1) / rpn))"
    want="$want $((S * A * psi4 / rpn)) $((S * A * psi4 / rpn * 2 * (nodes - 1) / nodes)) 0 0 $((S * 16))"
    got="$(total node_ag_bytes "$WORK/h_$ranks.log") $(total node_ag_wire "$WORK/h_$ranks.log")"
    got="$got $(total node_rs_bytes "$WORK/h_$ranks.log") $(total node_rs_wire "$WORK/h_$ranks.log")"
    got="$got $(total cross_ar_bytes "$WORK/h_$ranks.log") $(total cross_ar_wire "$WORK/h_$ranks.log")"
    got="$got $(total ag_bytes "$WORK/h_$ranks.log") $(total rs_bytes "$WORK/h_$ranks.log") $(total ar_bytes "$WORK/h_$ranks.log")"
    if [ "$got" = "$want" ] && [ "$psi4" -gt 0 ] && [ "$(field "$WORK/h_$ranks.log" cross_ar_calls | head -1)" = $((A * 6)) ] &&
       grep -q "^step .*in-node AG .* RS .*, cross-node AR .*emulated: $nodes nodes x $rpn ranks" "$WORK/h_$ranks.out"; then
        ok "$ranks ranks: traffic per level = closed form over $S steps (node AG/wire, node RS/wire, cross AR/wire, flat AG RS AR: $got)"
    else bad "$ranks ranks: traffic per level: got $got, want $want" "$WORK/h_$ranks.out"; fi
done

# -- 3. a mixed plan (DP, ZDP, h, split, recompute) on 2 x 2: memory exact, losses close to the flat plan's
MIXED='embed = dp\nattn.0 = h\nmlp.0 = 1/2\nattn.1 = h recompute\nmlp.1 = zdp\nhead = h\n'
FLAT='embed = dp\nattn.0 = zdp\nmlp.0 = 1/2\nattn.1 = zdp recompute\nmlp.1 = zdp\nhead = zdp\n'
train mixed 4 2 "$MIXED" --steps 3 --batch 2 --no-prefetch || bad "mixed plan run" "$WORK/mixed.err"
train mixed_flat 4 2 "$FLAT" --steps 3 --batch 2 --no-prefetch || bad "mixed flat run" "$WORK/mixed_flat.err"
train mixed_pf 4 2 "$MIXED" --steps 3 --batch 2 || bad "mixed plan with prefetch" "$WORK/mixed_pf.err"
if memory_exact "$WORK/mixed.log" && memory_exact "$WORK/mixed_pf.log" && close_losses "$WORK/mixed.log" "$WORK/mixed_flat.log" &&
   [ "$(losses "$WORK/mixed.log")" = "$(losses "$WORK/mixed_pf.log")" ]; then
    ok "mixed plan (dp, h, 1/2, h recompute, zdp, h) on 2 x 2: memory exact with and without prefetch, losses within 1e-6 of the flat plan's, prefetch bitwise"
else bad "mixed plan" "$WORK/mixed.log"; fi

# -- 4. checkpoints: written under h (each element once), loaded under zdp bitwise, resumed under h bitwise
CK="$WORK/ck"
train ck_full 4 2 'default = h\n' --steps 4 --batch 2 --ckpt-dir "$CK" --save-every 2 --dump-weights "$WORK/ck_full.bin" ||
    bad "h run with saves" "$WORK/ck_full.err"
train ck_resume 4 2 'default = h\n' --steps 4 --batch 2 --resume "$CK/step_00000002.h5" || bad "h resume" "$WORK/ck_resume.err"
# a different plan and no emulation reads the same logical weights
"$MPIEXEC" -n 4 "$BIN" train --model "$M" --data "$DATA" --threads 1 --plan zdp --steps 4 --batch 2 \
    --resume "$CK/step_00000004.h5" --dump-weights "$WORK/ck_flat.bin" > "$WORK/ck_flat.out" 2> "$WORK/ck_flat.err" ||
    bad "zdp load of the h checkpoint" "$WORK/ck_flat.err"
if [ "$(losses "$WORK/ck_resume.log")" = "$(losses "$WORK/ck_full.log" | tail -2)" ] && [ -n "$(losses "$WORK/ck_resume.log")" ] &&
   "$CMP" "$WORK/ck_full.bin" "$WORK/ck_flat.bin" 0 > "$WORK/ck_cmp.out"; then
    ok "checkpoint of an h plan: resumed under h steps 3-4 bitwise; loaded under zdp without nodes, weights bitwise ($(cat "$WORK/ck_cmp.out"))"
else bad "h checkpoint" "$WORK/ck_resume.err"; fi

# -- 5. the planner: train --plan auto --hierarchical under a slow emulated link takes h, memory exact
"$MPIEXEC" -n 4 "$BIN" train --model "$M" --data "$DATA" --threads 1 --steps 2 --batch 2 --plan auto --hierarchical \
    --device "$SRC/input/devices/cpu_2core.ini" --ranks-per-node 2 --emulate-link 20M,100us --log "$WORK/auto.log" \
    > "$WORK/auto.out" 2> "$WORK/auto.err" || bad "train --plan auto --hierarchical" "$WORK/auto.err"
taken=$(grep -cE '^  (embed|attn|mlp|head)[.0-9]* +h ' "$WORK/auto.out")
if [ "$taken" -gt 0 ] && memory_exact "$WORK/auto.log" && [ "$(total node_ag_calls "$WORK/auto.log")" -gt 0 ]; then
    ok "train --plan auto --hierarchical on 2 emulated nodes behind a 20 MB/s link: $taken operators h, memory exact, in-node gathers"
else bad "plan auto with h ($taken operators h)" "$WORK/auto.out"; fi

# -- 6. bad input: a message naming the problem, non-zero exit on every rank
train bad_mode 4 2 'default = hh\n' --steps 1 --batch 2
if grep -q "mode must be dp, zdp, h (hierarchical ZDP)" "$WORK/bad_mode.err" && ! grep -q '^step ' "$WORK/bad_mode.out"; then
    ok "plan mode 'hh': the message names the modes, h among them"
else bad "bad plan mode" "$WORK/bad_mode.err"; fi

summary test_hier.sh

#!/bin/bash
# Hierarchical sharding (plan mode h, issue 16 item 2) and the node-first
# reduction on real ranks: 4 ranks as 2 emulated nodes x 2, 8 as 2 x 4 and
# 8 as 4 x 2.  Every slice of a data group that spans nodes is reduced node
# first (in-node reduce-scatter, then across the nodes; osdp/runtime.h), so
# on a fixed mesh every plan gives bitwise-identical losses: all-h against
# all-zdp (and all-dp on 4 nodes, where a reduce-scatter + all-gather across
# 4 nodes must sum as the flat slice's reduce-scatter), a mixed plan against
# its flat twin; memory predicted = measured to the byte per category; the
# traffic per level equal to its closed form, for h and for flat slices; a
# checkpoint written under a flat and under an h plan is logical (loaded on
# one node and on another mesh bitwise, resumed across the two plans
# bitwise); bad input names the problem.  Run by `make check`
# (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC set).
set -u
. "$(dirname "$0")/../lib/test_lib.sh" hier-work

# train NAME RANKS RPN PLANTEXT [options...]: the plan file from its text
train() {
    local name=$1 ranks=$2 rpn=$3 text=$4; shift 4
    printf '%b' "$text" > "$WORK/$name.plan"
    "$MPIEXEC" -n "$ranks" "$BIN" train --model "$M" --data "$DATA" --threads 1 --plan "$WORK/$name.plan" \
        --ranks-per-node "$rpn" --log "$WORK/$name.log" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
}
# total KEY LOG: the key summed over the log's steps
total() { field "$2" "$1" | awk '{s += $1} END {printf "%d", s}'; }
# totals LOG KEY...: each key's total, in order
totals() { local log=$1 k out=""; shift; for k in "$@"; do out="$out $(total "$k" "$log")"; done; echo $out; }
# memory_exact LOG: every category's measured peak = its prediction, every step
memory_exact() {
    local c
    for c in state weights grads activations workspace tp_comm total; do
        [ "$(field "$1" "peak_$c")" = "$(field "$1" "pred_$c")" ] && [ -n "$(field "$1" "peak_$c")" ] || return 1
    done
}

# -- 1. per mesh (ranks, R ranks per node): all-h and all-zdp (and all-dp on 4 nodes), 2 accumulation steps,
#       through an emulated link (all-dp without one: emulation changes the time, never the numbers)
for mesh in "4 2" "8 4" "8 2"; do
    set -- $mesh; ranks=$1; rpn=$2; nodes=$((ranks / rpn)); A=2; S=3; [ "$nodes" -gt 2 ] && S=2
    plans="zdp h"; [ "$nodes" -gt 2 ] && plans="zdp h dp"
    for p in $plans; do
        link="--emulate-link 1G,10us"; [ "$p" = dp ] && link=""
        train "${p}_$ranks$nodes" "$ranks" "$rpn" "default = $p\n" --steps $S --batch 1 --global-batch $((ranks * A)) $link ||
            bad "$ranks ranks as $nodes nodes: $p run" "$WORK/${p}_$ranks$nodes.err"
    done
    H="$WORK/h_$ranks$nodes.log"; Z="$WORK/zdp_$ranks$nodes.log"; same=yes
    for p in $plans; do [ "$(losses "$WORK/${p}_$ranks$nodes.log")" = "$(losses "$Z")" ] || same=no; done
    if [ "$same" = yes ] && [ "$(losses "$Z" | wc -l)" = "$S" ]; then
        ok "$ranks ranks as $nodes emulated nodes x $rpn: all-${plans// /, all-} losses bitwise equal ($(field "$H" loss | tr '\n' ' '))"
    else bad "$ranks ranks as $nodes nodes: losses $(for p in $plans; do echo "$p: $(field "$WORK/${p}_$ranks$nodes.log" loss_hex | tr '\n' ' ')"; done)" "$WORK/h_$ranks$nodes.err"; fi
    exact=yes
    for p in $plans; do memory_exact "$WORK/${p}_$ranks$nodes.log" || exact=no; done
    if [ "$exact" = yes ]; then
        ok "$ranks ranks as $nodes x $rpn: memory measured = predicted to the byte in every category (h state $(field "$H" peak_state | head -1) B, zdp $(field "$Z" peak_state | head -1) B)"
    else bad "$ranks ranks as $nodes x $rpn: memory measured != predicted" "$H"; fi
    # closed forms per step, psi4 = the padded parameters' fp32 bytes (the in-node reduce-scatters' logical bytes,
    # A psi4 per step: each call counts its full buffer).  Both plans reduce node-first: in-node RS A psi4, wire
    # (R-1)/R of it; cross-node RS of each rank's node block, A psi4 / R, wire (n-1)/n.  h: in-node AG 2 A psi4
    # (forward and backward), wire (R-1)/R; cross-node AG A psi4 / R, wire (n-1)/n; nothing flat but the 16-byte
    # sums.  zdp: the flat AG over all ranks, 2 A psi4, wire (D-1)/D; no in-node AG, no cross AG.
    psi4=$(( $(total node_rs_bytes "$Z") / (S * A) ))
    rs="$((S * A * psi4)) $((S * A * psi4 * (rpn - 1) / rpn)) $((S * A * psi4 / rpn)) $((S * A * psi4 / rpn * (nodes - 1) / nodes))"
    keys="node_rs_bytes node_rs_wire cross_rs_bytes cross_rs_wire node_ag_bytes node_ag_wire cross_ag_bytes cross_ag_wire ag_bytes ag_wire rs_bytes ar_bytes"
    want_h="$rs $((S * 2 * A * psi4)) $((S * 2 * A * psi4 * (rpn - 1) / rpn)) $((S * A * psi4 / rpn)) $((S * A * psi4 / rpn * (nodes - 1) / nodes)) 0 0 0 $((S * 16))"
    want_z="$rs 0 0 0 0 $((S * 2 * A * psi4)) $((S * 2 * A * psi4 * (ranks - 1) / ranks)) 0 $((S * 16))"
    got_h=$(totals "$H" $keys); got_z=$(totals "$Z" $keys)
    if [ "$got_h" = "$want_h" ] && [ "$got_z" = "$want_z" ] && [ "$psi4" -gt 0 ] &&
       [ "$(field "$H" cross_rs_calls | head -1)" = $((A * 6)) ] && [ "$(field "$Z" cross_rs_calls | head -1)" = $((A * 6)) ] &&
       grep -q "^step .*in-node AG .* RS .*, cross-node RS .* AG .*emulated: $nodes nodes x $rpn ranks" "$WORK/h_$ranks$nodes.out"; then
        ok "$ranks ranks as $nodes x $rpn: traffic per level = closed form over $S steps (node RS/wire, cross RS/wire, node AG/wire, cross AG/wire, flat AG/wire RS AR: h $got_h; zdp $got_z)"
    else bad "$ranks ranks as $nodes x $rpn: traffic per level: h $got_h, want $want_h; zdp $got_z, want $want_z" "$WORK/h_$ranks$nodes.out"; fi
done

# -- 3. a mixed plan (DP, ZDP, h, split, recompute) on 2 x 2: memory exact, losses bitwise the flat plan's
MIXED='embed = dp\nattn.0 = h\nmlp.0 = 1/2\nattn.1 = h recompute\nmlp.1 = zdp\nhead = h\n'
FLAT='embed = dp\nattn.0 = zdp\nmlp.0 = 1/2\nattn.1 = zdp recompute\nmlp.1 = zdp\nhead = zdp\n'
train mixed 4 2 "$MIXED" --steps 3 --batch 2 --no-prefetch || bad "mixed plan run" "$WORK/mixed.err"
train mixed_flat 4 2 "$FLAT" --steps 3 --batch 2 --no-prefetch || bad "mixed flat run" "$WORK/mixed_flat.err"
train mixed_pf 4 2 "$MIXED" --steps 3 --batch 2 || bad "mixed plan with prefetch" "$WORK/mixed_pf.err"
if memory_exact "$WORK/mixed.log" && memory_exact "$WORK/mixed_pf.log" && [ -n "$(losses "$WORK/mixed.log")" ] &&
   [ "$(losses "$WORK/mixed.log")" = "$(losses "$WORK/mixed_flat.log")" ] &&
   [ "$(losses "$WORK/mixed.log")" = "$(losses "$WORK/mixed_pf.log")" ]; then
    ok "mixed plan (dp, h, 1/2, h recompute, zdp, h) on 2 x 2: memory exact with and without prefetch, losses bitwise the flat plan's, prefetch bitwise"
else bad "mixed plan: $(field "$WORK/mixed.log" loss_hex | tr '\n' ' ') vs flat $(field "$WORK/mixed_flat.log" loss_hex | tr '\n' ' ')" "$WORK/mixed.log"; fi

# -- 4. checkpoints stay logical: written on 2 x 2 under zdp (flat slices in node-first block order) and under h
#       (each element once); the zdp one resumed under h bitwise (every plan sums alike), each loaded on one node
#       or another mesh with the weights bitwise those of the writer
CK="$WORK/ck"; CK_H="$WORK/ck_h"
train ck_full 4 2 'default = zdp\n' --steps 4 --batch 2 --ckpt-dir "$CK" --save-every 2 --dump-weights "$WORK/ck_full.bin" ||
    bad "zdp run with saves" "$WORK/ck_full.err"
train ck_resume 4 2 'default = h\n' --steps 4 --batch 2 --resume "$CK/step_00000002.h5" --ckpt-dir "$CK_H" --save-every 2 ||
    bad "h resume of the zdp checkpoint" "$WORK/ck_resume.err"
# load() NAME RANKS PLAN CHECKPOINT: no nodes, no step: the weights as loaded
load() {
    "$MPIEXEC" -n "$2" "$BIN" train --model "$M" --data "$DATA" --threads 1 --plan "$3" --steps 4 --resume "$4" \
        --dump-weights "$WORK/$1.bin" > "$WORK/$1.out" 2> "$WORK/$1.err" || bad "$1: $3 load of $4 on $2 ranks" "$WORK/$1.err"
}
load ck_h_one 4 dp "$CK_H/step_00000004.h5"
load ck_zdp_two 2 zdp "$CK/step_00000004.h5"
if [ "$(losses "$WORK/ck_resume.log")" = "$(losses "$WORK/ck_full.log" | tail -2)" ] && [ -n "$(losses "$WORK/ck_resume.log")" ] &&
   "$CMP" "$WORK/ck_full.bin" "$WORK/ck_h_one.bin" 0 > "$WORK/ck_cmp.out" && "$CMP" "$WORK/ck_full.bin" "$WORK/ck_zdp_two.bin" 0 >> "$WORK/ck_cmp.out"; then
    ok "checkpoints on 2 x 2: zdp's resumed under h steps 3-4 bitwise; h's loaded on one node under dp, zdp's on 2 ranks, weights bitwise ($(head -1 "$WORK/ck_cmp.out"))"
else bad "checkpoints on 2 x 2" "$WORK/ck_resume.err"; cat "$WORK/ck_cmp.out" 2>/dev/null; fi

# -- 5. the planner: train --plan auto --hierarchical under a slow emulated link takes h, memory exact
"$MPIEXEC" -n 4 "$BIN" train --model "$M" --data "$DATA" --threads 1 --steps 2 --batch 2 --plan auto --hierarchical \
    --device "$SRC/input/devices/cpu_2core.ini" --ranks-per-node 2 --emulate-link 20M,100us --log "$WORK/auto.log" \
    > "$WORK/auto.out" 2> "$WORK/auto.err" || bad "train --plan auto --hierarchical" "$WORK/auto.err"
taken=$(grep -cE '^  (embed|attn|mlp|head)[.0-9]* +h[+ ]' "$WORK/auto.out")
if [ "$taken" -gt 0 ] && memory_exact "$WORK/auto.log" && [ "$(total node_ag_calls "$WORK/auto.log")" -gt 0 ]; then
    ok "train --plan auto --hierarchical on 2 emulated nodes behind a 20 MB/s link: $taken operators h, memory exact, in-node gathers"
else bad "plan auto with h ($taken operators h)" "$WORK/auto.out"; fi

# -- 6. bad input: a message naming the problem, non-zero exit on every rank
train bad_mode 4 2 'default = hh\n' --steps 1 --batch 2
if grep -q "mode must be dp, zdp, h (hierarchical ZDP)" "$WORK/bad_mode.err" && ! grep -q '^step ' "$WORK/bad_mode.out"; then
    ok "plan mode 'hh': the message names the modes, h among them"
else bad "bad plan mode" "$WORK/bad_mode.err"; fi

summary test_hier.sh

#!/bin/bash
# Gradient accumulation as a per-operator choice (issue 28 item 1, plan token
# reduce-once, --grad-reduce) with the real binary on real MPI ranks, 2 steps
# of 4 or 8 micro-batches each:
#   1. DP 4 (DP, ZDP, k of g and recompute in one plan): --grad-reduce once
#      against every micro-batch: losses within 1e-6 relative, reduce-once
#      bitwise deterministic run to run; reduce-scatter bytes per step = the
#      closed form (every = A x once, calls A x as many), all-gathers alike;
#      a plan file with reduce-once on some operators in between
#   2. hierarchical (h) on 2 emulated nodes x 2: node-first bytes once per step
#   3. PP 2 x DP 2 (1F1B and GPipe, 8 micro-batches), TP 2 x DP 2, a tied
#      head: losses as every micro-batch's, reduce-scatter bytes 1/M
#   4. every run: measured = predicted peak per category, to the byte (per
#      stage on the pipeline)
#   5. plan --grad-reduce: auto writes reduce-once where the planner chose
#      it, every writes none; bad --grad-reduce and a bad token after a mode:
#      a message naming the problem, a non-zero exit on every rank
#   6. per slice (reduce-once J: the last J of an operator's g slices, of
#      unequal sizes): DP 4 (twice), DP 4 reduced node-first on 2 emulated
#      nodes, PP 2 x DP 2, TP 2 x DP 2, a tied head: losses within 1e-6 of every micro-batch's,
#      bitwise run to run; reduce-scatter bytes per step = the closed form
#      4 sum_s p_s (A, or 1 for a reduce-once slice) from the slices' padded
#      sizes (tests/tools/slice_sizes); measured = predicted peak to the byte
#   7. a reduce-once head after recomputed blocks: the last mlp's forward is the peak, measured = predicted
#   8. the search bounds the forward moments: under a limit where the plan's peak is a forward moment (once
#      refused), a plan printed within the limit, run on DP 4: measured = predicted to the byte
# Run by `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC).
set -u
. "$(dirname "$0")/../lib/test_lib.sh" grad-reduce-work

U="$WORK/t_gr.ini"   # 4 heads (TP 2 divides them), 6 operators
printf '[model]\nname = t_gr\nn_layer = 2\nn_head = 4\nn_embd = 32\nvocab = 256\nctx = 32\n' > "$U"
T="$WORK/t_gr_tied.ini"
printf '[model]\nname = t_gr_tied\nn_layer = 2\nn_head = 4\nn_embd = 32\nvocab = 256\nctx = 32\ntied_head = true\n' > "$T"
SEQ=16; GLOBAL=16; S=2
printf 'embed = dp\nattn.0 = zdp recompute\nmlp.0 = 1/2\nattn.1 = dp\nmlp.1 = 2/2 recompute\nhead = zdp\n' > "$WORK/mixed.plan"
printf 'embed = dp reduce-once\nattn.0 = zdp recompute\nmlp.0 = 1/2 reduce-once\nattn.1 = dp\nmlp.1 = 2/2 reduce-once recompute\nhead = zdp\n' > "$WORK/partial.plan"

run() {   # run NRANKS NAME MODEL [train options...]: writes $WORK/NAME.{out,err,log}
    local n=$1 name=$2 model=$3; shift 3
    timeout 120 "$MPIEXEC" -n "$n" "$BIN" train --data "$DATA" --model "$model" --threads 1 --peak-flops 1e9 \
        --seq-len $SEQ --global-batch $GLOBAL --batch 1 --lr 1e-3 --steps $S --log "$WORK/$name.log" "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err" || bad "$name ran" "$WORK/$name.err"
}
one() { field "$1" "$2" | sort -u; }   # one LOG KEY: the key's value, the same every step
close() { losses_within "$1" "$2" $S 1e-6; }   # close LOG_A LOG_B: S losses each, within 1e-6 relative
memory_exact() {   # every category's measured peak = its prediction, every step
    local c
    for c in state weights grads activations workspace tp_comm total; do
        [ -n "$(field "$1" "peak_$c")" ] && [ "$(field "$1" "peak_$c")" = "$(field "$1" "pred_$c")" ] ||
            { echo "    $1 $c: measured $(field "$1" "peak_$c" | head -1), predicted $(field "$1" "pred_$c" | head -1)"; return 1; }
    done
}
stages_exact() {   # every stage's ranks peaked where predicted, per category
    local s c p
    for s in 0 1; do
        for c in state weights grads activations workspace tp_comm total; do
            p=$(summary_field "$1" "stage_${s}_pred_$c")
            [ -n "$p" ] && [ "$(summary_field "$1" "stage_${s}_peak_min_$c")" = "$p" ] &&
                [ "$(summary_field "$1" "stage_${s}_peak_max_$c")" = "$p" ] ||
                { echo "    $1 stage $s $c: measured $(summary_field "$1" "stage_${s}_peak_max_$c"), predicted $p"; return 1; }
        done
    done
}

# -- 1. DP 4, A = 4: every micro-batch, once (twice), some operators once
run 4 dp4_every "$U" --plan "$WORK/mixed.plan"
run 4 dp4_once "$U" --plan "$WORK/mixed.plan" --grad-reduce once
run 4 dp4_once_again "$U" --plan "$WORK/mixed.plan" --grad-reduce once
run 4 dp4_partial "$U" --plan "$WORK/partial.plan"
A=4
close "$WORK/dp4_once.log" "$WORK/dp4_every.log" && close "$WORK/dp4_partial.log" "$WORK/dp4_every.log" &&
   [ "$(losses "$WORK/dp4_once.log")" = "$(losses "$WORK/dp4_once_again.log")" ] &&
    ok "DP 4 (dp, zdp, 1/2, 2/2, recompute), $A micro-batches: reduce-once losses within 1e-6 of every micro-batch's ($(field "$WORK/dp4_once.log" loss | tr '\n' ' ')vs $(field "$WORK/dp4_every.log" loss | tr '\n' ' ')), bitwise the same run to run; some operators once: within 1e-6 too" ||
    bad "DP 4: reduce-once losses $(field "$WORK/dp4_once.log" loss_hex | tr '\n' ' ') / $(field "$WORK/dp4_once_again.log" loss_hex | tr '\n' ' '), partial $(field "$WORK/dp4_partial.log" loss | tr '\n' ' '), every $(field "$WORK/dp4_every.log" loss | tr '\n' ' ')" "$WORK/dp4_once.err"
E="$WORK/dp4_every.log"; O="$WORK/dp4_once.log"; P="$WORK/dp4_partial.log"
rs_e=$(one "$E" rs_bytes); rs_o=$(one "$O" rs_bytes); rs_p=$(one "$P" rs_bytes)
if [ -n "$rs_o" ] && [ "$rs_o" -gt 0 ] && [ "$rs_e" = $((A * rs_o)) ] && [ "$(one "$E" rs_calls)" = $((A * $(one "$O" rs_calls))) ] &&
   [ "$(one "$E" rs_wire)" = $((A * $(one "$O" rs_wire))) ] && [ "$(one "$E" ag_bytes)" = "$(one "$O" ag_bytes)" ] &&
   [ "$rs_p" -gt "$rs_o" ] && [ "$rs_p" -lt "$rs_e" ] && [ $(( (rs_e - rs_p) % (A - 1) )) = 0 ]; then
    ok "DP 4: reduce-scatter per step = the closed form: every micro-batch $rs_e B in $(one "$E" rs_calls) calls = $A x once's $rs_o B in $(one "$O" rs_calls); all-gathers unchanged ($(one "$O" ag_bytes) B); some operators once: $rs_p B"
else bad "DP 4 reduce-scatter per step: every $rs_e ($(one "$E" rs_calls) calls), once $rs_o ($(one "$O" rs_calls) calls), partial $rs_p"; fi

# -- 2. hierarchical on 2 emulated nodes x 2: node-first, once per step
printf 'default = h reduce-once\nembed = dp reduce-once\n' > "$WORK/h.plan"
run 4 h_once "$U" --plan "$WORK/h.plan" --ranks-per-node 2
H="$WORK/h_once.log"
close "$H" "$E" && [ "$(one "$H" node_rs_bytes)" = "$rs_o" ] && [ "$(one "$H" cross_rs_bytes)" = $((rs_o / 2)) ] &&
    [ "$(one "$H" rs_bytes)" = 0 ] &&
    ok "h on 2 nodes x 2, reduce-once: losses within 1e-6 of DP 4 every micro-batch; node-first per step once: in-node RS $(one "$H" node_rs_bytes) B, cross-node $(one "$H" cross_rs_bytes) B" ||
    bad "h reduce-once: losses $(field "$H" loss | tr '\n' ' '), node RS $(one "$H" node_rs_bytes) (want $rs_o), cross $(one "$H" cross_rs_bytes)" "$WORK/h_once.err"

# -- 3. PP 2 x DP 2 (M = 8, both schedules), TP 2 x DP 2, a tied head
run 4 pp_every "$U" --pp 2 --plan "$WORK/mixed.plan" --stages 0:3,3:6
run 4 pp_once "$U" --pp 2 --plan "$WORK/mixed.plan" --stages 0:3,3:6 --grad-reduce once
run 4 pp_once_gpipe "$U" --pp 2 --plan "$WORK/mixed.plan" --stages 0:3,3:6 --grad-reduce once --schedule gpipe
M=8
close "$WORK/pp_once.log" "$WORK/pp_every.log" && [ "$(losses "$WORK/pp_once.log")" = "$(losses "$WORK/pp_once_gpipe.log")" ] &&
   [ "$(one "$WORK/pp_every.log" rs_bytes)" = $((M * $(one "$WORK/pp_once.log" rs_bytes))) ] &&
   [ "$(one "$WORK/pp_once.log" p2p_bytes)" = "$(one "$WORK/pp_every.log" p2p_bytes)" ] &&
    ok "PP 2 x DP 2, $M micro-batches: reduce-once losses within 1e-6 of every micro-batch's, 1F1B = GPipe bitwise; stage 0's reduce-scatter per step $(one "$WORK/pp_once.log" rs_bytes) B = 1/$M of $(one "$WORK/pp_every.log" rs_bytes) B, p2p unchanged" ||
    bad "PP 2 x DP 2 reduce-once: losses $(field "$WORK/pp_once.log" loss | tr '\n' ' ') vs $(field "$WORK/pp_every.log" loss | tr '\n' ' '), RS $(one "$WORK/pp_once.log" rs_bytes) vs $(one "$WORK/pp_every.log" rs_bytes)" "$WORK/pp_once.err"
run 4 tp_once "$U" --tp 2 --plan "$WORK/mixed.plan" --grad-reduce once
run 4 tp_every "$U" --tp 2 --plan "$WORK/mixed.plan"
run 4 tied_every "$T" --plan dp
run 4 tied_once "$T" --plan dp --grad-reduce once
close "$WORK/tp_once.log" "$WORK/tp_every.log" && close "$WORK/tied_once.log" "$WORK/tied_every.log" &&
   [ "$(one "$WORK/tp_every.log" rs_bytes)" = $((M * $(one "$WORK/tp_once.log" rs_bytes))) ] &&
   [ "$(one "$WORK/tied_every.log" rs_bytes)" = $((A * $(one "$WORK/tied_once.log" rs_bytes))) ] &&
    ok "TP 2 x DP 2 ($M micro-batches) and a tied head (DP 4, $A): reduce-once losses within 1e-6 of every micro-batch's, reduce-scatter bytes once per step" ||
    bad "TP / tied reduce-once: tp $(field "$WORK/tp_once.log" loss | tr '\n' ' ') vs $(field "$WORK/tp_every.log" loss | tr '\n' ' '); tied $(field "$WORK/tied_once.log" loss | tr '\n' ' ') vs $(field "$WORK/tied_every.log" loss | tr '\n' ' ')" "$WORK/tp_once.err"

# -- 4. memory, to the byte
mem=1; n=0
for name in dp4_every dp4_once dp4_partial h_once tp_once tp_every tied_every tied_once; do
    memory_exact "$WORK/$name.log" || mem=0; n=$((n + 1))
done
for name in pp_every pp_once pp_once_gpipe; do stages_exact "$WORK/$name.log" || mem=0; n=$((n + 1)); done
g_e=$(one "$E" pred_grads); g_o=$(one "$O" pred_grads)
[ $mem = 1 ] && [ "$g_o" -gt "$g_e" ] &&
    ok "memory: measured = predicted per category on every rank of $n runs (DP, ZDP, k of g, h, TP, PP per stage, tied); reduce-once holds more gradients ($g_o B against $g_e B on DP 4)" ||
    bad "memory with reduce-once ($n runs; grads $g_o vs $g_e)"

# -- 5. the planner's choice in plan files; bad input
"$BIN" plan --model "$U" --device "$SRC/input/devices/cpu_2core.ini" --ranks 4 --global-batch 64 --batch 1 --seq-len $SEQ --out "$WORK/auto.plan" > "$WORK/auto.out" 2>&1 &&
"$BIN" plan --model "$U" --device "$SRC/input/devices/cpu_2core.ini" --ranks 4 --global-batch 64 --batch 1 --seq-len $SEQ --grad-reduce every --out "$WORK/every.plan" > "$WORK/every.out" 2>&1 &&
"$BIN" plan --model "$U" --device "$SRC/input/devices/cpu_2core.ini" --ranks 4 --global-batch 4 --batch 1 --seq-len $SEQ --out "$WORK/one.plan" > "$WORK/one.out" 2>&1 &&
    once_ops() { grep -c '^[a-z0-9.]* = .* reduce-once' "$1"; } &&
    [ "$(once_ops "$WORK/auto.plan")" -gt 0 ] && [ "$(once_ops "$WORK/every.plan")" = 0 ] && [ "$(once_ops "$WORK/one.plan")" = 0 ] &&
    ok "plan: with 16 micro-batches the planner writes reduce-once ($(once_ops "$WORK/auto.plan") operators), with --grad-reduce every or one micro-batch none" ||
    bad "plan --grad-reduce" "$WORK/auto.out"
timeout 60 "$MPIEXEC" -n 2 "$BIN" train --data "$DATA" --model "$U" --threads 1 --steps 1 --grad-reduce sometimes > "$WORK/bad1.out" 2>&1
rc=$?
printf 'default = zdp reduce-twice\n' > "$WORK/bad.plan"
timeout 60 "$MPIEXEC" -n 2 "$BIN" train --data "$DATA" --model "$U" --threads 1 --steps 1 --plan "$WORK/bad.plan" > "$WORK/bad2.out" 2>&1
rc2=$?
[ $rc != 0 ] && [ $rc != 124 ] && grep -q -- "--grad-reduce" "$WORK/bad1.out" && grep -q "sometimes" "$WORK/bad1.out" &&
   [ $rc2 != 0 ] && [ $rc2 != 124 ] && grep -q "reduce-twice" "$WORK/bad2.out" && grep -q "reduce-once" "$WORK/bad2.out" &&
    ok "bad --grad-reduce and a bad word after a plan mode: a message naming them, exit $rc / $rc2" ||
    bad "bad input (exit $rc, $rc2)" "$WORK/bad1.out"

# -- 6. per slice: the last J of g slices reduce once, the others every micro-batch
SL="$WORK/slices.plan"
printf 'embed = dp\nattn.0 = 1/3 reduce-once 2 recompute\nmlp.0 = 2/4 reduce-once 3\nattn.1 = zdp\nmlp.1 = 3/4 recompute reduce-once 1\nhead = zdp\n' > "$SL"
run 4 dp4_slices "$U" --plan "$SL"
run 4 dp4_slices_again "$U" --plan "$SL"
run 4 dp4_slices_nodes "$U" --plan "$SL" --ranks-per-node 2
run 4 pp_slices "$U" --pp 2 --plan "$SL" --stages 0:3,3:6
run 4 tp_slices "$U" --tp 2 --plan "$SL"
run 4 tied_slices "$T" --plan "$SL"
# rs_closed_form N MICRO OPS...: 4 sum_s p_s (MICRO every micro-batch, once for the last J), OPS as NAME:G:J
rs_closed_form() {
    local n=$1 micro=$2 total=0 spec name g j p s; shift 2
    for spec in "$@"; do
        IFS=: read -r name g j <<< "$spec"
        s=0
        for p in $("$BUILD/tests/tools/slice_sizes" "$U" $SEQ "$n" "$name" "$g"); do
            total=$((total + 4 * p * (s >= g - j ? 1 : micro))); s=$((s + 1))
        done
    done
    echo $total
}
OPS="embed:1:0 attn.0:3:2 mlp.0:4:3 attn.1:1:0 mlp.1:4:1 head:1:0"
want_dp=$(rs_closed_form 4 $A $OPS); want_pp=$(rs_closed_form 2 $M embed:1:0 attn.0:3:2 mlp.0:4:3)
sizes="attn.0 $("$BUILD/tests/tools/slice_sizes" "$U" $SEQ 4 attn.0 3 | tr ' ' ,), mlp.0 $("$BUILD/tests/tools/slice_sizes" "$U" $SEQ 4 mlp.0 4 | tr ' ' ,)"
D="$WORK/dp4_slices.log"; DN="$WORK/dp4_slices_nodes.log"
close "$D" "$E" && close "$DN" "$E" && close "$WORK/pp_slices.log" "$WORK/pp_every.log" &&
   close "$WORK/tp_slices.log" "$WORK/tp_every.log" && close "$WORK/tied_slices.log" "$WORK/tied_every.log" &&
   [ "$(losses "$D")" = "$(losses "$WORK/dp4_slices_again.log")" ] &&
    ok "per slice (1/3 once 2, 2/4 once 3, 3/4 once 1): losses within 1e-6 of every micro-batch's on DP 4, DP 4 node-first, PP 2 x DP 2, TP 2 x DP 2 and a tied head, bitwise run to run" ||
    bad "per slice: losses $(field "$D" loss | tr '\n' ' ')/ $(field "$WORK/dp4_slices_again.log" loss_hex | tr '\n' ' '), nodes $(field "$DN" loss | tr '\n' ' '), pp $(field "$WORK/pp_slices.log" loss | tr '\n' ' ') vs every $(field "$E" loss | tr '\n' ' ')" "$WORK/dp4_slices.err"
[ -n "$want_dp" ] && [ "$(one "$D" rs_bytes)" = "$want_dp" ] && [ "$(one "$DN" node_rs_bytes)" = "$want_dp" ] &&
   [ "$(one "$DN" cross_rs_bytes)" = $((want_dp / 2)) ] && [ "$(one "$DN" rs_bytes)" = 0 ] &&
   [ "$(one "$WORK/pp_slices.log" rs_bytes)" = "$want_pp" ] &&
    ok "per slice: reduce-scatter bytes per step = the closed form (slices of $sizes elements): DP 4 $want_dp B, node-first in-node $want_dp B and cross-node $((want_dp / 2)) B, PP stage 0 $want_pp B" ||
    bad "per slice bytes: DP 4 $(one "$D" rs_bytes) (closed form $want_dp), nodes $(one "$DN" node_rs_bytes) / $(one "$DN" cross_rs_bytes), PP $(one "$WORK/pp_slices.log" rs_bytes) (closed form $want_pp)"
mem=1
for name in dp4_slices dp4_slices_nodes tp_slices tied_slices; do memory_exact "$WORK/$name.log" || mem=0; done
stages_exact "$WORK/pp_slices.log" || mem=0
[ $mem = 1 ] &&
    ok "per slice: measured = predicted peak per category to the byte (DP 4, node-first, PP 2 x DP 2 per stage, TP 2 x DP 2, tied): grads $(one "$D" pred_grads) B" ||
    bad "per slice memory"

# -- 7. a reduce-once head 4x an mlp's weights (vocabulary 1024) after recomputed blocks, every operator ZDP:
#       the last mlp's forward (its block, its weights and the head's gathered ahead) is the peak, which
#       the closed form once missed (plan: "the cost model's peak and the runtime schedule's differ").
#       DP 4, micro-batch 8: measured = predicted per category, and = plan's all-ZDP peak
W="$WORK/t_wide.ini"
printf '[model]\nname = t_wide\nn_layer = 2\nn_head = 4\nn_embd = 32\nvocab = 1024\nctx = 32\n' > "$W"
printf 'embed = zdp reduce-once\n' > "$WORK/wide.plan"
for op in attn.0 mlp.0 attn.1 mlp.1; do printf '%s = zdp recompute reduce-once\n' $op >> "$WORK/wide.plan"; done
printf 'head = zdp reduce-once\n' >> "$WORK/wide.plan"
timeout 120 "$MPIEXEC" -n 4 "$BIN" train --data "$DATA" --model "$W" --threads 1 --peak-flops 1e9 --seq-len 32 \
    --global-batch 64 --batch 8 --lr 1e-3 --steps $S --plan "$WORK/wide.plan" --log "$WORK/wide.log" \
    >"$WORK/wide.out" 2>"$WORK/wide.err" || bad "wide-vocabulary run" "$WORK/wide.err"
"$BIN" plan --model "$W" --device "$SRC/input/devices/cpu_2core.ini" --ranks 4 --global-batch 64 --batch 8 --seq-len 32 \
    --recompute all --grad-reduce once --json > "$WORK/wide_plan.json" 2>"$WORK/wide_plan.err" ||
    bad "plan of the wide-vocabulary model" "$WORK/wide_plan.err"
zdp_peak=$(sed -n 's/.*"all_zdp":{[^}]*"peak_bytes":\([0-9]*\).*/\1/p' "$WORK/wide_plan.json")
memory_exact "$WORK/wide.log" && [ -n "$zdp_peak" ] && [ "$(one "$WORK/wide.log" peak_total)" = "$zdp_peak" ] &&
    ok "forward moment: a reduce-once head after recomputed blocks, all ZDP, DP 4: measured = predicted = the plan's all-ZDP peak ($zdp_peak B)" ||
    bad "forward moment: measured $(one "$WORK/wide.log" peak_total), plan's all-ZDP peak ${zdp_peak:-none}" "$WORK/wide_plan.err"

# -- 8. the search bounds the forward moments (issue 28): the same model planned with --recompute all
#       --grad-reduce once under limits each a byte under the last plan's peak.  A limit under a plan whose
#       peak is a forward moment (its backward moments fit) was refused before ("the search does not bound
#       forward moments yet"): the first such limit where the new plan's peak is a forward moment too.  That
#       plan printed, its peak <= the limit, and run on DP 4: measured = predicted per category and = the
#       plan's peak, to the byte
plan_wide() {   # plan_wide LIMIT NAME: plan of the wide model under LIMIT (0: none) into $WORK/NAME.{out,plan,json}
    local lim=()
    [ "$1" -gt 0 ] && lim=(--mem-limit "$1")
    "$BIN" plan --model "$W" --device "$SRC/input/devices/cpu_2core.ini" --ranks 4 --global-batch 64 --batch 8 \
        --seq-len 32 --recompute all --grad-reduce once "${lim[@]}" --out "$WORK/$2.plan" > "$WORK/$2.out" 2>&1 &&
    "$BIN" plan --model "$W" --device "$SRC/input/devices/cpu_2core.ini" --ranks 4 --global-batch 64 --batch 8 \
        --seq-len 32 --recompute all --grad-reduce once "${lim[@]}" --json > "$WORK/$2.json" 2>/dev/null
}
osdp_peak() { sed -n 's/.*"osdp":{[^}]*"peak_bytes":\([0-9]*\).*/\1/p' "$WORK/$1.json"; }
forward_of() { sed -n 's/^OSDP: .*(forward of \([^)]*\)).*/\1/p' "$WORK/$1.out"; }
fwd_limit=""; fwd_peak=""; prev_peak=""; prev_op=""
if plan_wide 0 wide_free && prev_peak=$(osdp_peak wide_free) && [ -n "$prev_peak" ]; then
    prev_op=$(forward_of wide_free); free_peak=$prev_peak
    for k in $(seq 1 12); do
        limit=$((prev_peak - 1))
        plan_wide $limit wide_fwd && peak=$(osdp_peak wide_fwd) && [ -n "$peak" ] ||
            { bad "plan of the wide model under $limit bytes (a byte under a plan's peak)" "$WORK/wide_fwd.out"; break; }
        if [ -n "$prev_op" ] && [ -n "$(forward_of wide_fwd)" ]; then fwd_limit=$limit; fwd_peak=$peak; break; fi
        prev_peak=$peak; prev_op=$(forward_of wide_fwd)
    done
fi
if [ -n "$fwd_limit" ] && [ "$fwd_peak" -le "$fwd_limit" ]; then
    timeout 120 "$MPIEXEC" -n 4 "$BIN" train --data "$DATA" --model "$W" --threads 1 --peak-flops 1e9 --seq-len 32 \
        --global-batch 64 --batch 8 --lr 1e-3 --steps $S --plan "$WORK/wide_fwd.plan" --log "$WORK/wide_fwd.log" \
        >"$WORK/wide_fwd_run.out" 2>"$WORK/wide_fwd_run.err" || bad "forward-bound plan's run" "$WORK/wide_fwd_run.err"
    memory_exact "$WORK/wide_fwd.log" && [ "$(one "$WORK/wide_fwd.log" peak_total)" = "$fwd_peak" ] &&
        ok "forward-bound search: --mem-limit $fwd_limit B, a byte under a plan whose peak is $prev_op's forward (once refused; fastest plan's peak $free_peak B): a plan of peak $fwd_peak B in $(forward_of wide_fwd)'s forward, $(grep -c ' = zdp' "$WORK/wide_fwd.plan") operators ZDP; run on DP 4: measured = predicted per category = the plan's peak ($fwd_peak B)" ||
        bad "forward-bound plan on DP 4: measured $(one "$WORK/wide_fwd.log" peak_total), plan's peak $fwd_peak"
else
    bad "no limit a byte under a forward-peaked plan got a plan whose peak is a forward moment within it (last limit ${limit:-none}, peak ${peak:-none})" "$WORK/wide_fwd.out"
fi

summary "grad-reduce"

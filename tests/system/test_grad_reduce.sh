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

summary "grad-reduce"

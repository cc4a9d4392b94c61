#!/bin/bash
# Pipeline parallelism (issue 15, DESIGN.md §9) with the real binary on real
# MPI ranks (oversubscribed cores are fine):
#   1. PP 2 x DP 2, PP 2 x TP 2, PP 4 (4 ranks) and PP 2 x TP 2 x DP 2
#      (8 ranks) agree with the 1-rank run within 1e-5 relative over 10
#      steps, same global batch; PP 2 x DP 2's validation losses too
#   2. GPipe and 1F1B give bitwise-identical losses (PP 4, PP 2 x DP 2)
#   3. on PP 2 x DP 2 all-DP, all-ZDP and a mixed plan with recompute give
#      bitwise-identical losses
#   4. every run: measured = predicted peak per stage, per category, to the
#      byte (the summary's smallest and largest over each stage's ranks);
#      1F1B's bound: over 8 micro-batches on PP 4, stage s holds 4 - s
#      micro-batches' activations where GPipe holds 8 (the activation peaks'
#      ratio, exact)
#   5. p2p bytes per step on rank 0 (stage 0) = M B T d x 4, in M sends;
#      with TP t each rank sends its 1/t piece (Megatron-LM's scatter/gather,
#      src/runtime/stage_message.c) and its tensor group all-gathers the
#      gradients it receives (M B T d x 4 logical); under a bf16 residual
#      stream the activations cross in 2 bytes (M B T d x 2 / t)
#   8. the messages move data only: PP 2 x TP 2 (4 ranks) and PP 2 x TP 2 x
#      DP 2 (8 ranks) give bitwise the losses of TP 2 (2 ranks) and TP 2 x
#      DP 2 (4 ranks) on the same micro-batches, with the fp32 and with the
#      bf16 residual stream (recompute all on 8 ranks)
#   6. a rank stopped mid-pipeline: every rank stops within the time-out
#      with a message naming the pending receive or collective
#   7. bad --pp / --stages / --schedule / --plan auto: a message naming the
#      option, a non-zero exit on every rank
# Run by `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC).
set -u
. "$(dirname "$0")/../lib/test_lib.sh" pp-work

U="$WORK/t_pp.ini"   # 4 heads (TP 2 divides them), 6 operators
printf '[model]\nname = t_pp\nn_layer = 2\nn_head = 4\nn_embd = 32\nvocab = 256\nctx = 32\n' > "$U"
SEQ=16; GLOBAL=8; STEPS=10; D=32

run() {   # run NRANKS NAME [train options...]: writes $WORK/NAME.{out,err,log}
    local n=$1 name=$2; shift 2
    timeout 120 "$MPIEXEC" -n "$n" "$BIN" train --data "$DATA" --model "$U" --threads 1 --peak-flops 1e9 --seq-len $SEQ \
        --global-batch $GLOBAL --lr 1e-3 --log "$WORK/$name.log" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" ||
        bad "$name ran" "$WORK/$name.err"
}

# agree KEY A B: the two logs have the same number (> 0) of KEY values, equal within 1e-5 relative
agree() {
    local a b
    a=$(field "$2" "$1" | tr '\n' ' '); b=$(field "$3" "$1" | tr '\n' ' ')
    awk -v a="$a" -v b="$b" 'BEGIN {
        na = split(a, x, " "); nb = split(b, y, " ");
        if (na == 0 || na != nb) exit 1;
        for (i = 1; i <= na; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (!(d <= 1e-5 * y[i])) exit 1 }
        exit 0 }'
}


# -- 1. every mesh against one rank (--plan dp; any plan gives the same losses, part 3)
run 1 ref --batch 8 --plan dp --steps $STEPS --val-data "$DATA" --eval-every 5 --eval-batches 1
run 4 pp2dp2 --pp 2 --batch 2 --plan dp --steps $STEPS --stages 0:3,3:6 --val-data "$DATA" --eval-every 5 --eval-batches 1
run 4 pp2tp2 --pp 2 --tp 2 --batch 2 --plan dp --steps $STEPS
run 4 pp4 --pp 4 --batch 2 --plan zdp --steps $STEPS
run 8 pp2tp2dp2 --pp 2 --tp 2 --batch 2 --plan zdp --steps $STEPS
BF16="--precision bf16 --residual-dtype bf16"
run 4 pp2tp2_bf16 --pp 2 --tp 2 --batch 2 --plan dp --steps $STEPS $BF16
run 8 pp2tp2dp2_bf16 --pp 2 --tp 2 --batch 2 --plan zdp --steps $STEPS $BF16 --recompute all
for mesh in pp2dp2 pp2tp2 pp4 pp2tp2dp2; do
    if [ "$(field "$WORK/$mesh.log" loss | wc -l)" = $STEPS ] && agree loss "$WORK/$mesh.log" "$WORK/ref.log"; then
        ok "$mesh (tp $(config_field "$WORK/$mesh.log" tp) x dp $(config_field "$WORK/$mesh.log" dp) x pp $(config_field "$WORK/$mesh.log" pp), stages $(config_field "$WORK/$mesh.log" stages)): $STEPS losses within 1e-5 of 1 rank (last $(field "$WORK/$mesh.log" loss | tail -1) vs $(field "$WORK/ref.log" loss | tail -1))"
    else
        bad "$mesh: losses differ from 1 rank" "$WORK/$mesh.err"
        paste <(field "$WORK/$mesh.log" loss) <(field "$WORK/ref.log" loss) | head -3
    fi
done
[ "$(field "$WORK/pp2dp2.log" val_loss | wc -l)" = 2 ] && agree val_loss "$WORK/pp2dp2.log" "$WORK/ref.log" &&
    ok "validation on PP 2 x DP 2 after steps 5 and 10 within 1e-5 of 1 rank ($(field "$WORK/pp2dp2.log" val_loss | tr '\n' ' ')vs $(field "$WORK/ref.log" val_loss | tr '\n' ' '))" ||
    bad "validation on PP 2 x DP 2: $(field "$WORK/pp2dp2.log" val_loss | tr '\n' ' ') vs $(field "$WORK/ref.log" val_loss | tr '\n' ' ')"
grep -q "^mesh: 8 ranks = tp 2 x dp 2 x pp 2, pipeline schedule 1f1b" "$WORK/pp2tp2dp2.out" &&
   grep -q "^pipeline: 2 stages, operators .* | 1f1b over 2 micro-batches .*stage [01] is the memory bottleneck" "$WORK/pp2tp2dp2.out" &&
   grep -q "moved P2P .* | bottleneck stage [01] (" "$WORK/pp2tp2dp2.out" &&
   [ "$(field "$WORK/pp2tp2dp2.log" tokens | sort -u)" = $((GLOBAL * SEQ)) ] &&
    ok "8 ranks: mesh and schedule printed, the predicted and measured bottleneck stage named, $GLOBAL x $SEQ tokens per step" ||
    bad "the pipeline's log lines on 8 ranks" "$WORK/pp2tp2dp2.out"

# -- 2. GPipe = 1F1B, bitwise
run 4 pp4_gpipe --pp 4 --batch 2 --plan zdp --steps $STEPS --schedule gpipe
run 4 pp2dp2_gpipe --pp 2 --batch 2 --plan dp --steps $STEPS --stages 0:3,3:6 --schedule gpipe
for pair in pp4:pp4_gpipe pp2dp2:pp2dp2_gpipe; do
    a=${pair%:*}; b=${pair#*:}
    [ "$(losses "$WORK/$a.log" | wc -l)" = $STEPS ] && [ "$(losses "$WORK/$a.log")" = "$(losses "$WORK/$b.log")" ] &&
        ok "$a: GPipe and 1F1B give $STEPS bitwise-equal losses" || bad "$a: GPipe and 1F1B losses differ"
done

# -- 3. plan invariance on PP 2 x DP 2: all-DP (part 1), all-ZDP, mixed with recompute
printf 'embed = zdp\nattn.0 = dp\nmlp.0 = zdp recompute\nattn.1 = zdp recompute\nmlp.1 = dp\nhead = zdp\n' > "$WORK/mixed.plan"
run 4 pp2dp2_zdp --pp 2 --batch 2 --plan zdp --steps $STEPS --stages 0:3,3:6
run 4 pp2dp2_mixed --pp 2 --batch 2 --plan "$WORK/mixed.plan" --steps $STEPS --stages 0:3,3:6
ref=$(losses "$WORK/pp2dp2.log")
[ "$(echo "$ref" | wc -l)" = $STEPS ] && [ "$(losses "$WORK/pp2dp2_zdp.log")" = "$ref" ] &&
   [ "$(losses "$WORK/pp2dp2_mixed.log")" = "$ref" ] &&
    ok "PP 2 x DP 2: all-DP, all-ZDP, mixed with recompute: $STEPS bitwise-equal losses" ||
    bad "PP 2 x DP 2: plans give different losses" "$WORK/pp2dp2_mixed.err"

# -- 4. memory per stage; 1F1B's in-flight bound over 8 micro-batches on 4 stages
run 4 bound_1f1b --pp 4 --batch 1 --plan dp --steps 2
run 4 bound_gpipe --pp 4 --batch 1 --plan dp --steps 2 --schedule gpipe
mem_ok=1; runs=0
for log in "$WORK"/pp*.log "$WORK"/bound_*.log; do
    stages_ok "$log" || mem_ok=0
    runs=$((runs + 1))
done
[ $mem_ok = 1 ] && [ $runs = 12 ] &&
    ok "memory: measured = predicted on every rank of every stage, per category and in total ($runs runs, both schedules)" ||
    bad "memory per stage ($runs runs)"
bound_ok=1; held=""
for s in 0 1 2 3; do
    f=$(summary_field "$WORK/bound_1f1b.log" "stage_${s}_peak_max_activations")
    g=$(summary_field "$WORK/bound_gpipe.log" "stage_${s}_peak_max_activations")
    # per micro-batch a stage holds A_s bytes: 1F1B (4 - s) A_s, GPipe 8 A_s
    [ -n "$f" ] && [ -n "$g" ] && [ $((g * (4 - s))) = $((f * 8)) ] || bound_ok=0
    held="$held s$s: $f vs $g B;"
done
[ "$(config_field "$WORK/bound_1f1b.log" accum)" = 8 ] && [ $bound_ok = 1 ] &&
    ok "1F1B bound over 8 micro-batches on PP 4: stage s holds 4 - s micro-batches' activations, GPipe 8 (1F1B vs GPipe:$held)" ||
    bad "1F1B's in-flight bound:$held"

# -- 5. p2p bytes: rank 0 (stage 0) sends each micro-batch's output forward, M B T d elements in M messages,
#       its 1/t piece of them in the stream's bytes (4, or 2 under a bf16 stream); with TP its tensor group
#       all-gathers each gradient it receives, M B T d x 4 bytes (logical) in M calls
p2p_ok=1
for spec in pp2dp2:2:2:1:4 pp4:4:2:1:4 pp2tp2:4:2:2:4 bound_1f1b:8:1:1:4 pp2tp2dp2:2:2:2:4 pp2tp2_bf16:4:2:2:2 \
            pp2tp2dp2_bf16:2:2:2:2; do
    IFS=: read -r log m b t w <<< "$spec"
    gathered=$((t > 1 ? m * b * SEQ * D * 4 : 0))
    [ "$(field "$WORK/$log.log" p2p_bytes | sort -u)" = $((m * b * SEQ * D * w / t)) ] &&
        [ "$(field "$WORK/$log.log" p2p_calls | sort -u)" = "$m" ] &&
        [ "$(field "$WORK/$log.log" tp_ag_bytes | sort -u)" = $gathered ] &&
        [ "$(field "$WORK/$log.log" tp_ag_calls | sort -u)" = $((t > 1 ? m : 0)) ] ||
        { p2p_ok=0; echo "    $log: p2p $(field "$WORK/$log.log" p2p_bytes | sort -u) B in $(field "$WORK/$log.log" p2p_calls | sort -u) calls, tp all-gather $(field "$WORK/$log.log" tp_ag_bytes | sort -u) B; closed form $((m * b * SEQ * D * w / t)) in $m, $gathered"; }
done
[ "$(field "$WORK/ref.log" p2p_bytes | sort -u)" = 0 ] || p2p_ok=0
[ $p2p_ok = 1 ] && ok "p2p per step on stage 0 = M B T d x 4 / t bytes in M sends, x 2 / t under a bf16 stream, + M tensor all-gathers of B T d x 4 (7 runs; PP 2 x TP 2: $(field "$WORK/pp2tp2.log" p2p_bytes | tail -1) B, bf16 stream $(field "$WORK/pp2tp2_bf16.log" p2p_bytes | tail -1) B, gathered $(field "$WORK/pp2tp2.log" tp_ag_bytes | tail -1) B); none at 1 rank" ||
    bad "p2p closed form"

# -- 6. a rank stopped mid-pipeline (the last stage's): the others give up within the time-out
OSDP_COMM_TIMEOUT_S=3 "$MPIEXEC" -n 4 "$BIN" train --data "$DATA" --model "$U" --threads 1 --peak-flops 1e9 --seq-len $SEQ \
    --global-batch $GLOBAL --pp 2 --batch 2 --plan dp --steps 1000000 --log "$WORK/hang.log" >"$WORK/hang.out" 2>"$WORK/hang.err" &
launcher=$!
for _ in $(seq 600); do [ "$(grep -s -c '^step=' "$WORK/hang.log")" -ge 3 ] 2>/dev/null && break; sleep 0.1; done
victim=""   # world rank 3: the last stage's (MPICH gives each rank PMI_RANK)
for pid in $(pgrep -f -- "$WORK/hang.log"); do
    [ "$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | head -1)" = "$BIN" ] &&
        tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx 'PMI_RANK=3' && victim=$pid
done
if [ -n "$victim" ] && kill -0 "$launcher" 2>/dev/null; then
    t0=$(date +%s); kill -STOP "$victim"
    for _ in $(seq 400); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$launcher" 2>/dev/null; then
        bad "a stopped rank: the job still runs 40 s later" "$WORK/hang.err"
        kill -KILL "$victim" "$launcher" 2>/dev/null
    else
        wait "$launcher"; rc=$?
        what=$(grep -o -m1 "MPI [a-z-]* of .* did not complete within 3 s" "$WORK/hang.err")
        [ $rc != 0 ] && [ -n "$what" ] &&
            ok "a rank of the last stage stopped: the job ends in $(( $(date +%s) - t0 )) s, status $rc: ${what% did not complete*} timed out" ||
            bad "a stopped rank: status $rc, message '$what'" "$WORK/hang.err"
    fi
    kill -KILL "$victim" 2>/dev/null
else
    bad "the hang run did not start" "$WORK/hang.err"; kill "$launcher" 2>/dev/null
fi
wait "$launcher" 2>/dev/null

# -- 7. bad pipeline options: refused with a message naming the option, non-zero exit on every rank
refused() {   # refused NAME NRANKS PATTERN [options]
    local name=$1 n=$2 pattern=$3; shift 3
    timeout 60 "$MPIEXEC" -n "$n" "$BIN" train --data "$DATA" --model "$U" --threads 1 --peak-flops 1e9 --steps 1 \
        --batch 2 --log "$WORK/bad_$name.log" "$@" >"$WORK/bad_$name.out" 2>"$WORK/bad_$name.err"
    local rc=$?
    if [ $rc != 0 ] && [ $rc != 124 ] && grep -q -- "$pattern" "$WORK/bad_$name.err" && [ ! -e "$WORK/bad_$name.log" ]; then
        ok "refused ($name, exit $rc): $(grep -o -m1 -- "$pattern.*" "$WORK/bad_$name.err" | cut -c1-100)"
    else bad "$name: rc $rc" "$WORK/bad_$name.err"; fi
}
refused stages 2 "--stages 0:2,3:6: stage 1 starts at operator 3" --plan dp --pp 2 --stages 0:2,3:6
refused stages_count 2 "--stages 0:6: 1 range for the 2 stages" --plan dp --pp 2 --stages 0:6
refused no_pp 2 "--stages needs --pp" --plan dp --stages 0:3,3:6
refused schedule 2 "--schedule" --plan dp --pp 2 --schedule zigzag
refused ranks 4 "--pp 3" --plan dp --pp 3
refused auto 2 "--plan auto with a pipeline (--pp) needs --global-batch" --plan auto --pp 2
refused pp_auto 2 "--pp auto needs --plan auto" --plan dp --pp auto

# -- 8. the messages move data only (Megatron-LM's scatter/gather, bf16 activations under a bf16 stream):
#       the pipeline on the same micro-batches as its tensor group alone (M = 4 of 2 on TP 2; M = 2 of 2 on
#       TP 2 x DP 2) gives the same bits
run 2 tp2 --tp 2 --batch 2 --plan dp --steps $STEPS
run 4 tp2dp2 --tp 2 --batch 2 --plan zdp --steps $STEPS
run 2 tp2_bf16 --tp 2 --batch 2 --plan dp --steps $STEPS $BF16
run 4 tp2dp2_bf16 --tp 2 --batch 2 --plan zdp --steps $STEPS $BF16
same_ok=1
for pair in pp2tp2:tp2 pp2tp2dp2:tp2dp2 pp2tp2_bf16:tp2_bf16 pp2tp2dp2_bf16:tp2dp2_bf16; do
    a=${pair%:*}; b=${pair#*:}
    [ "$(losses "$WORK/$a.log" | wc -l)" = $STEPS ] && [ "$(losses "$WORK/$a.log")" = "$(losses "$WORK/$b.log")" ] ||
        { same_ok=0; echo "    $a against $b:"; paste <(losses "$WORK/$a.log") <(losses "$WORK/$b.log") | head -3; }
done
[ $same_ok = 1 ] &&
    ok "PP 2 x TP 2 (4 ranks) and PP 2 x TP 2 x DP 2 (8 ranks), fp32 and bf16 stream: $STEPS losses bitwise those of TP 2 and TP 2 x DP 2 without the pipeline (the pieces gathered are the messages, bit for bit)" ||
    bad "the pipeline's messages changed the numbers"

summary test_pp

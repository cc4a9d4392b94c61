#!/bin/bash
# Interleaved 1F1B (issue 28 item 2: --schedule interleaved --virtual-stages
# V, Megatron-LM's virtual stages) with the real binary on real MPI ranks
# (oversubscribed cores are fine), a 10-operator model, a few steps each:
#   1. the same losses BIT FOR BIT as 1F1B: PP 2 x DP 2 (V 2, M 4, a mixed
#      plan with split and recompute operators), PP 4 x DP 2 (8 ranks, V 2,
#      M 8) and PP 2 x TP 2 x DP 2 (8 ranks, V 2, M 2: every forward first);
#      PP 2 x DP 2's validation loss too (the eval list through the chunks)
#   2. every run: measured = predicted peak per stage, per category and in
#      total, to the byte
#   3. the bubble logged (pred_bubble) is (P - 1) / (V M + P - 1), and the
#      pipeline line prints the chunks; the p2p bytes of stage 0 (rank 0)
#      are every chunk boundary it owns, M messages each: (2V - 1) M B T d x 4
#      at P 2 against 1F1B's M B T d x 4
#   4. a checkpoint saved by an interleaved run holds every operator's
#      logical tensors and the chunks' split; it resumes bitwise on the
#      interleaved mesh and on 1F1B (the same logical layout)
#   5. plan --pp P --schedule interleaved searches V on the 1F1B pipeline:
#      V = 1 prices exactly as the pipeline, V 2's bubble is 3/19 (M 8), the chosen
#      V and its chunks are the plan file's train options
#   6. bad input (V without interleaving, M not a multiple of P, more chunks
#      than operators, --stages with P ranges): a message naming the
#      options, a non-zero exit on every rank, no log written
#   7. the 3D search chooses V (train --plan auto --pp auto, plan --pp auto)
#      on an 8-layer model and a device of cheap messages: interleaved V 2
#      on PP 4; measured = predicted peak per stage to the byte; losses
#      bitwise equal to 1F1B on the same mesh and micro-batch; the plan
#      file's train line reproduces the run; --schedule 1f1b keeps 1F1B,
#      --schedule interleaved alone searches V >= 2
# Run by `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC).
set -u
. "$(dirname "$0")/../lib/test_lib.sh" pp-interleaved-work

U="$WORK/t_il.ini"   # 4 layers, 4 heads (TP 2 divides them): 10 operators
printf '[model]\nname = t_il\nn_layer = 4\nn_head = 4\nn_embd = 32\nvocab = 256\nctx = 32\n' > "$U"
SEQ=16; D=32; STEPS=3

run() {   # run NRANKS NAME [train options...]: writes $WORK/NAME.{out,err,log}
    local n=$1 name=$2; shift 2
    timeout 120 "$MPIEXEC" -n "$n" "$BIN" train --data "$DATA" --model "$U" --threads 1 --peak-flops 1e9 --seq-len $SEQ \
        --lr 1e-3 --steps $STEPS --log "$WORK/$name.log" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" ||
        bad "$name ran" "$WORK/$name.err"
}


# -- 1. interleaved = 1F1B, bitwise
printf 'embed = zdp\nattn.0 = dp\nmlp.0 = zdp recompute\nattn.1 = 1/2\nmlp.1 = dp recompute\nattn.2 = zdp\nmlp.2 = 2/2\nattn.3 = zdp recompute\nmlp.3 = dp\nhead = zdp\n' > "$WORK/mixed.plan"
VAL="--val-data $DATA --eval-every 3 --eval-batches 1"
run 4 pp2dp2 --pp 2 --batch 2 --global-batch 16 --plan "$WORK/mixed.plan" $VAL
run 4 pp2dp2_il --pp 2 --batch 2 --global-batch 16 --plan "$WORK/mixed.plan" --schedule interleaved --virtual-stages 2 \
    --stages 0:3,3:5,5:8,8:10 $VAL
run 8 pp4dp2 --pp 4 --batch 1 --global-batch 16 --plan zdp
run 8 pp4dp2_il --pp 4 --batch 1 --global-batch 16 --plan zdp --schedule interleaved --virtual-stages 2
run 8 pp2tp2dp2 --pp 2 --tp 2 --batch 2 --global-batch 8 --plan dp
run 8 pp2tp2dp2_il --pp 2 --tp 2 --batch 2 --global-batch 8 --plan dp --schedule interleaved --virtual-stages 2
for mesh in pp2dp2 pp4dp2 pp2tp2dp2; do
    a=$(losses "$WORK/$mesh.log"); b=$(losses "$WORK/${mesh}_il.log")
    [ "$(echo "$a" | wc -l)" = $STEPS ] && [ "$a" = "$b" ] &&
        [ "$(config_field "$WORK/${mesh}_il.log" schedule)" = interleaved ] &&
        ok "$mesh: interleaved (V 2, $(config_field "$WORK/${mesh}_il.log" accum) micro-batches, chunks $(config_field "$WORK/${mesh}_il.log" stages)) and 1F1B give $STEPS bitwise-equal losses ($(echo $b))" ||
        { bad "$mesh: interleaved and 1F1B losses differ" "$WORK/${mesh}_il.err"; paste <(echo "$a") <(echo "$b") | head -3; }
done

a=$(field "$WORK/pp2dp2.log" val_loss_hex); b=$(field "$WORK/pp2dp2_il.log" val_loss_hex)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "pp2dp2: validation through the chunks, bitwise 1F1B's ($b)" ||
    bad "pp2dp2: validation losses '$a' (1F1B) and '$b' (interleaved)" "$WORK/pp2dp2_il.err"

# -- 2. memory per stage, to the byte
mem_ok=1; runs=0
for log in "$WORK"/pp*_il.log "$WORK"/pp*dp2.log; do
    stages_ok "$log" || mem_ok=0
    runs=$((runs + 1))
done
[ $mem_ok = 1 ] && [ $runs = 6 ] &&
    ok "memory: measured = predicted on every rank of every stage, per category and in total ($runs runs; PP 4 x DP 2 stage 0: $(summary_field "$WORK/pp4dp2_il.log" stage_0_pred_total) B interleaved, $(summary_field "$WORK/pp4dp2.log" stage_0_pred_total) B 1F1B)" ||
    bad "memory per stage ($runs runs)"

# -- 3. bubble and p2p
bubble_ok=1
for spec in pp2dp2_il:2:4 pp4dp2_il:4:8 pp2tp2dp2_il:2:2; do
    IFS=: read -r log P M <<< "$spec"
    want=$(awk -v p=$P -v m=$M 'BEGIN { printf "%.6g", (p - 1) / (2 * m + p - 1) }')
    [ "$(config_field "$WORK/$log.log" pred_bubble)" = "$want" ] && [ "$(config_field "$WORK/$log.log" virtual_stages)" = 2 ] ||
        { bubble_ok=0; echo "    $log: pred_bubble $(config_field "$WORK/$log.log" pred_bubble), closed form $want"; }
done
grep -q "^pipeline: 4 stages x 2 chunks (chunk c on stage c mod 4), operators .* | interleaved over 8 micro-batches (in flight on stage 0: 11, bubble 15.8%)" "$WORK/pp4dp2_il.out" ||
    { bubble_ok=0; grep '^pipeline' "$WORK/pp4dp2_il.out"; }
[ $bubble_ok = 1 ] && ok "bubble (P - 1) / (V M + P - 1) logged on 3 meshes (PP 4, M 8: $(config_field "$WORK/pp4dp2_il.log" pred_bubble) against 1F1B's 3/11), chunks and in-flight printed" ||
    bad "the interleaved bubble"
M=4; B=2
plain=$(field "$WORK/pp2dp2.log" p2p_bytes | sort -u); il=$(field "$WORK/pp2dp2_il.log" p2p_bytes | sort -u)
[ "$plain" = $((M * B * SEQ * D * 4)) ] && [ "$il" = $((3 * M * B * SEQ * D * 4)) ] &&
    [ "$(field "$WORK/pp2dp2_il.log" p2p_calls | sort -u)" = $((3 * M)) ] &&
    ok "p2p per step on stage 0 of PP 2: 1F1B M B T d x 4 = $plain B, interleaved V 2 (2V - 1) M B T d x 4 = $il B in $((3 * M)) sends" ||
    bad "p2p of stage 0: 1F1B $plain B, interleaved $il B in $(field "$WORK/pp2dp2_il.log" p2p_calls | sort -u) sends"

# -- 4. checkpoints: the same logical layout; resume bitwise on interleaved and 1F1B
export OSDP_CKPT_MPIO=independent
A="$WORK/ckpt"
STEPS=2 run 4 save --pp 2 --batch 2 --global-batch 8 --plan zdp --schedule interleaved --virtual-stages 2 \
    --lr-steps 4 --ckpt-dir "$A"
C2="$A/step_00000002.h5"
STEPS=4 run 4 full --pp 2 --batch 2 --global-batch 8 --plan zdp --schedule interleaved --virtual-stages 2
STEPS=4 run 4 resume_il --pp 2 --batch 2 --global-batch 8 --plan zdp --schedule interleaved --virtual-stages 2 \
    --resume "$C2"
STEPS=4 run 4 resume_1f1b --pp 2 --batch 2 --global-batch 8 --plan zdp --resume "$C2"
names=$(h5ls -r "$C2" 2>/dev/null)
split=$(h5dump -a /pipeline_stages "$C2" 2>/dev/null | sed -n 's/.*(0): "\([^"]*\)".*/\1/p')
tail_full=$(losses "$WORK/full.log" | tail -2)
if [ -n "$tail_full" ] && [ "$(losses "$WORK/resume_il.log")" = "$tail_full" ] &&
   [ "$(losses "$WORK/resume_1f1b.log")" = "$tail_full" ] &&
   [ "$(echo "$names" | grep -cE '^/model/(embed/wte|mlp.3/fc.weight|head/lm_head.weight) +Dataset')" = 3 ] &&
   [ "$(echo "$split" | tr ',' '\n' | wc -l)" = 4 ]; then
    ok "checkpoint of an interleaved run (chunks $split): logical tensors; steps 3-4 resumed bitwise on interleaved and on 1F1B"
else
    bad "interleaved checkpoint: split '$split', resumed $(losses "$WORK/resume_il.log" | tr '\n' ' ')/ $(losses "$WORK/resume_1f1b.log" | tr '\n' ' ')vs $(echo $tail_full)" "$WORK/resume_il.err"
fi

# -- 5. plan --pp P --schedule interleaved: V searched on the 1F1B pipeline (V = 1 is that pipeline, priced the same),
#       the closed-form bubble per V, the chosen V in the plan file's train line
"$BIN" plan --model "$SRC/input/models/gpt2_medium.ini" --device "$SRC/input/devices/a100_80gb_ib.ini" --ranks 64 --pp 4 \
    --tp 8 --global-batch 256 --batch 16 --seq-len 1024 --schedule interleaved --out "$WORK/il.plan" >"$WORK/plan.out" 2>"$WORK/plan.err" ||
    bad "plan --schedule interleaved ran" "$WORK/plan.err"
osdp_step=$(sed -n 's/^OSDP: .* step \([0-9.]*\) ms.*/\1/p' "$WORK/plan.out")
v1=$(awk '$1 == 1 && $2 == 4 { print $6 }' "$WORK/plan.out")
v2=$(awk '$1 == 2 && $2 == 8 { print $3 }' "$WORK/plan.out")
chosen=$(sed -n 's/^interleaving: V = \([0-9]*\), chunks \([^ ]*\).*/\1 \2/p' "$WORK/plan.out")
if [ -n "$osdp_step" ] && [ "$v1" = "$osdp_step" ] && [ "$v2" = 0.1579 ] && [ -n "$chosen" ] &&
   grep -q -- "--schedule interleaved --virtual-stages ${chosen%% *} " "$WORK/il.plan" &&
   grep -qE -- "--stages ${chosen#* }( |\))" "$WORK/il.plan" &&
   awk 'length($0) > 198 { exit 1 }' "$WORK/il.plan"; then   # a plan file's lines: at most 198 characters (osdp/plan.h)
    ok "plan --pp 4 --schedule interleaved (gpt2_medium, 64 A100s): V 1 = the 1F1B step ($v1 ms), V 2's bubble 3/19 = $v2; chosen V ${chosen%% *}, written to the plan file's train line"
else
    bad "plan --schedule interleaved: OSDP $osdp_step ms, V 1 $v1 ms, V 2 bubble $v2, chosen '$chosen'" "$WORK/plan.err"
    sed -n '/^interleaved 1F1B/,$p' "$WORK/plan.out" | head -8
fi

# -- 6. bad input: refused with a message naming the options, a non-zero exit on every rank
refused() {   # refused NAME NRANKS PATTERN [options]
    local name=$1 n=$2 pattern=$3; shift 3
    timeout 60 "$MPIEXEC" -n "$n" "$BIN" train --data "$DATA" --model "$U" --threads 1 --peak-flops 1e9 --steps 1 \
        --seq-len $SEQ --log "$WORK/bad_$name.log" "$@" >"$WORK/bad_$name.out" 2>"$WORK/bad_$name.err"
    local rc=$?
    if [ $rc != 0 ] && [ $rc != 124 ] && grep -q -- "$pattern" "$WORK/bad_$name.err" && [ ! -e "$WORK/bad_$name.log" ]; then
        ok "refused ($name, exit $rc): $(grep -o -m1 -- "$pattern.*" "$WORK/bad_$name.err" | cut -c1-110)"
    else bad "$name: rc $rc" "$WORK/bad_$name.err"; fi
}
refused v_without 2 "--virtual-stages 2 needs --schedule interleaved" --plan dp --pp 2 --batch 2 --virtual-stages 2
refused not_multiple 4 "6 micro-batches per step is not a multiple of --pp 4" --plan dp --pp 4 --batch 1 \
    --global-batch 6 --schedule interleaved --virtual-stages 2
refused chunks 4 "--pp 4 x --virtual-stages 3: 12 model chunks for a model of 10 operators" --plan dp --pp 4 --batch 1 \
    --global-batch 8 --schedule interleaved --virtual-stages 3
refused stages 2 "--stages 0:5,5:10: 2 ranges for the 4 chunks of --pp 2 x --virtual-stages 2" --plan dp --pp 2 --batch 2 --global-batch 8 \
    --schedule interleaved --virtual-stages 2 --stages 0:5,5:10
refused chunk_gap 2 "--stages 0:3,4:6,6:8,8:10: chunk 1 starts at operator 4, where chunk 0 ended at 3" --plan dp --pp 2 \
    --batch 2 --global-batch 8 --schedule interleaved --virtual-stages 2 --stages 0:3,4:6,6:8,8:10
refused no_pp 2 "--virtual-stages needs --pp P" --plan dp --batch 2 --virtual-stages 2
plan_refused() {   # plan_refused NAME PATTERN [options]
    local name=$1 pattern=$2; shift 2
    "$BIN" plan --model "$U" --device "$SRC/input/devices/cpu_2core.ini" --ranks 4 --global-batch 8 "$@" \
        >"$WORK/badplan_$name.out" 2>"$WORK/badplan_$name.err"
    local rc=$?
    [ $rc != 0 ] && grep -q -- "$pattern" "$WORK/badplan_$name.err" &&
        ok "plan refused ($name, exit $rc): $(grep -o -m1 -- "$pattern.*" "$WORK/badplan_$name.err" | cut -c1-100)" ||
        bad "plan $name: rc $rc" "$WORK/badplan_$name.err"
}
plan_refused v_without "--virtual-stages needs --schedule interleaved" --pp 2 --virtual-stages 2
plan_refused pp_auto_v "--virtual-stages needs --schedule interleaved" --pp auto --virtual-stages 2
plan_refused no_pp "--virtual-stages needs a pipeline" --virtual-stages 2

# -- 7. the 3D search's V: interleaving where the cost model says it wins; memory exact; the numbers of 1F1B
U8="$WORK/t_il8.ini"   # 8 layers: V 2 on 4 stages
printf '[model]\nname = t_il8\nn_layer = 8\nn_head = 4\nn_embd = 32\nvocab = 256\nctx = 32\n' > "$U8"
IL_DEV="$WORK/il_dev.ini"   # data- and tensor-parallel collectives dear, messages cheap: a pipeline, interleaved
printf '[device]\nname = t_il\nmem_limit = 12638255104\nparam_bytes = 4\nact_bytes = 4\nranks_per_node = 2\n[all_gather]\nalpha = 1e-3\nbeta = 1e-7\n[reduce_scatter]\nalpha = 1e-3\nbeta = 1e-7\n[tp_all_reduce]\nalpha = 1e-3\nbeta = 1e-7\n[p2p]\nalpha = 1e-6\nbeta = 1e-11\n[gamma]\nembed = 1e-10\nattn = 1e-10\nmlp = 1e-10\nhead = 1e-10\n' > "$IL_DEV"
AUTO="--model $U8 --device $IL_DEV --global-batch 8"
run 4 auto_v --plan auto --pp auto $AUTO
run 4 auto_v_1f1b --plan zdp --pp 4 --batch 1 --model "$U8" --global-batch 8
line=$(grep -m1 '^--plan auto (3D search' "$WORK/auto_v.out")
if grep -q "PP 4 x DP 1 x TP 1, stages [0-9:,]*, micro-batch 1 x 8 micro-batches, .*schedule interleaved with 2 chunks per stage" <<< "$line" &&
   [ "$(config_field "$WORK/auto_v.log" schedule)" = interleaved ] && [ "$(config_field "$WORK/auto_v.log" virtual_stages)" = 2 ] &&
   stages_ok "$WORK/auto_v.log" && [ "$(losses "$WORK/auto_v.log" | wc -l)" = $STEPS ] &&
   [ "$(losses "$WORK/auto_v.log")" = "$(losses "$WORK/auto_v_1f1b.log")" ]; then
    ok "train --plan auto --pp auto chooses interleaved V 2 on PP 4 ($(sed -n 's/.*\(stages [0-9:,]*\),.*/\1/p' <<< "$line")); measured = predicted peak on every stage ($(summary_field "$WORK/auto_v.log" stage_0_pred_total) B on stage 0); $STEPS losses bitwise equal to 1F1B on PP 4"
else bad "train --pp auto: '$line'; losses $(losses "$WORK/auto_v.log" | tr '\n' ' ')vs 1F1B $(losses "$WORK/auto_v_1f1b.log" | tr '\n' ' ')" "$WORK/auto_v.err"; fi
# plan --pp auto: the same choice; its plan file's train line reproduces the run (the same losses and peaks)
"$BIN" plan --model "$U8" --device "$IL_DEV" --ranks 4 --seq-len $SEQ --global-batch 8 --pp auto --json --out "$WORK/auto_v.plan" \
    >"$WORK/auto_v_plan.json" 2>"$WORK/auto_v_plan.err"
train_line=$(sed -n 's/^# (train with \(.*\))$/\1/p' "$WORK/auto_v.plan")
[ -n "$train_line" ] && run 4 auto_v_file --plan "$WORK/auto_v.plan" --model "$U8" --device "$IL_DEV" $train_line
mesh=$(python3 -c 'import json,sys; m = json.load(open(sys.argv[1]))["osdp"]["mesh"]; print(m["schedule"], m["virtual_stages"], m["stages"])' "$WORK/auto_v_plan.json" 2>/dev/null)
if [ "${mesh%% *}" = interleaved ] && grep -q -- "--schedule interleaved --virtual-stages 2 " <<< "$train_line" &&
   grep -q "stages ${mesh##* }, " <<< "$line" &&
   [ "$(losses "$WORK/auto_v_file.log")" = "$(losses "$WORK/auto_v.log")" ] &&
   [ "$(summary_field "$WORK/auto_v_file.log" stage_0_pred_total)" = "$(summary_field "$WORK/auto_v.log" stage_0_pred_total)" ] &&
   stages_ok "$WORK/auto_v_file.log"; then
    ok "plan --pp auto: $mesh, as train chose; its plan file's train line ($train_line) gives the same losses and peaks"
else bad "plan --pp auto: mesh '$mesh', train line '$train_line'" "$WORK/auto_v_file.err"; fi
# a schedule given is kept: --schedule 1f1b stays 1F1B; --schedule interleaved alone searches V >= 2
"$BIN" plan --model "$U8" --device "$IL_DEV" --ranks 4 --seq-len $SEQ --global-batch 8 --pp auto --schedule 1f1b --json \
    >"$WORK/auto_1f1b.json" 2>"$WORK/auto_1f1b.err"
run 4 auto_il --plan auto --pp auto $AUTO --schedule interleaved
fixed=$(python3 -c 'import json,sys; j = json.load(open(sys.argv[1]))["osdp"]; print(j["mesh"]["schedule"], j["mesh"]["virtual_stages"], j["plan"]["step_s"] > json.load(open(sys.argv[2]))["osdp"]["plan"]["step_s"])' "$WORK/auto_1f1b.json" "$WORK/auto_v_plan.json" 2>/dev/null)
if [ "$fixed" = "1f1b 1 True" ] && grep -q "^--plan auto (3D search.*schedule interleaved with [0-9]* chunks per stage" "$WORK/auto_il.out" &&
   [ "$(losses "$WORK/auto_il.log")" = "$(losses "$WORK/auto_v.log")" ]; then
    ok "plan --pp auto --schedule 1f1b keeps 1F1B (V 1, slower); train --pp auto --schedule interleaved searches V >= 2 (the same losses)"
else bad "fixed schedules: plan --schedule 1f1b '$fixed'" "$WORK/auto_il.err"; fi

summary test_pp_interleaved

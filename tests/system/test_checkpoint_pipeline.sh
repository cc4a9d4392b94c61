#!/bin/bash
# Checkpoints on a pipeline (issue 15, DESIGN.md §6, §9) with the real binary
# on real MPI ranks: a rank holds only its stage's operators, the file holds
# every operator's logical tensors once, so
#   1. a PP 2 x DP 2 save has the logical shapes and the mesh attributes
#      (mesh_pp 2, the stage split and the schedule), and its /model is the
#      run's --dump-weights (gathered from both stages to rank 0)
#   2. it resumes bitwise on the same mesh, and within 1e-5 of the
#      uninterrupted run on PP 1 x DP 4, PP 4 and PP 2 x TP 2
#   3. loaded on PP 4 and on PP 2 x TP 2 and saved again, every dataset is
#      identical (h5diff); --init-from on PP 4 starts from its weights
#      exactly; the PP 4 file gives 1 rank the same weights (dump), and
#      `osdp_gpt sample --ckpt` reads it as it reads a 1-rank file
#   4. --sample-every on a pipeline: samples, the losses unchanged
#   5. a rank of the last stage killed in the middle of a save leaves the
#      last good checkpoint and `latest` intact; the resume is bitwise
# Run by `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC).
set -u
. "$(dirname "$0")/../lib/test_lib.sh" checkpoint-pipeline-work
. "$(dirname "$0")/../lib/ckpt_mesh_lib.sh"   # the model (6 operators, 4 heads), run, losses_from, within, attr, export_model, model_is_dump, same_file
show() { paste <(losses_from "$1" 4 loss) <(losses_from "$2" 4 loss) | sed 's/^/    /'; }

# -- 1. PP 2 x DP 2 (stages 0:2 and 2:6), a save at step 3, collective MPI-IO (one: a collective save
#       takes ~10 s of CPU on 4 oversubscribed ranks), in the schedule of the uninterrupted 6-step run
A="$WORK/A"
run 4 full --pp 2 --stages 0:2,2:6 --batch 2 --global-batch 8 --steps 3 --lr-steps 6 --ckpt-dir "$A" \
    --dump-weights "$WORK/full.bin" || bad "PP 2 x DP 2 run with a save" "$WORK/full.err"
C3="$A/step_00000003.h5"
names=$(h5ls -r "$C3")
mesh="$(attr "$C3" mesh_tp) $(attr "$C3" mesh_dp) $(attr "$C3" mesh_pp) $(attr "$C3" n_ranks)"
split="$(attr "$C3" pipeline_stages) $(attr "$C3" pipeline_schedule)"
logical=$(echo "$names" | grep -cE '^/model/embed/wte +Dataset \{256, 32\}|^/model/mlp.1/fc.weight +Dataset \{32, 128\}|^/optim/v/head/lm_head.weight +Dataset \{32, 256\}')
if [ "$logical" = 3 ] && [ "$mesh" = "1 2 2 4" ] && [ "$split" = "0:2,2:6 1f1b" ]; then
    ok "PP 2 x DP 2 save: logical shapes; mesh_tp mesh_dp mesh_pp n_ranks = $mesh; pipeline_stages, schedule = $split"
else bad "logical shapes / mesh attributes: '$mesh' '$split'" "$WORK/full.err"; echo "$names" | head -3; fi
export_model "$C3" "$WORK/exp3.bin"
model_is_dump "$C3" "$WORK/full.bin" \
    && ok "PP 2 x DP 2: /model exported with h5dump = --dump-weights of the run ($(stat -c %s "$WORK/full.bin") bytes, both stages)" \
    || bad "h5dump export of the PP 2 save differs from --dump-weights"

# the rest with independent MPI-IO (collective rounds are slow on oversubscribed cores)
export OSDP_CKPT_MPIO=independent

# -- 2. resume on the same mesh (bitwise, the other schedule too) and on others (within 1e-5), from step 3,
#       against the uninterrupted run (its steps 1-3 bitwise those of the run that saved)
run 4 ref --pp 2 --stages 0:2,2:6 --batch 2 --global-batch 8 --steps 6 || bad "PP 2 x DP 2 uninterrupted run" "$WORK/ref.err"
[ "$(losses_from "$WORK/ref.log" 1 loss_hex | head -3)" = "$(losses_from "$WORK/full.log" 1 loss_hex)" ] \
    || bad "the saved run's steps 1-3 differ from the uninterrupted run's" "$WORK/ref.err"
run 4 same --pp 2 --stages 0:2,2:6 --steps 6 --resume "$C3" || bad "resume on PP 2 x DP 2 ran" "$WORK/same.err"
run 4 same_gpipe --pp 2 --stages 0:2,2:6 --schedule gpipe --steps 6 --resume "$C3" \
    || bad "resume on PP 2 x DP 2 (gpipe) ran" "$WORK/same_gpipe.err"
ref=$(losses_from "$WORK/ref.log" 4 loss_hex)
if [ -n "$ref" ] && [ "$(losses_from "$WORK/same.log" 4 loss_hex)" = "$ref" ] &&
   [ "$(losses_from "$WORK/same_gpipe.log" 4 loss_hex)" = "$ref" ]; then
    ok "PP 2 x DP 2 -> PP 2 x DP 2 (1F1B and GPipe): steps 4-6 bitwise ($(echo $ref))"
else bad "resume on the same mesh is not bitwise" "$WORK/same.err"; show "$WORK/ref.log" "$WORK/same.log"; fi
resume_on() {   # resume_on NAME DESCRIPTION PRINTED [options]: steps 4-6 within 1e-5, the meshes printed
    local name=$1 what=$2 printed=$3; shift 3
    run 4 "$name" --steps 6 --resume "$C3" "$@" || bad "resume on $what ran" "$WORK/$name.err"
    if within "$WORK/ref.log" "$WORK/$name.log" 4 &&
       grep -q "resuming a tp 1 x dp 2 x pp 2 checkpoint on $printed" "$WORK/$name.out"; then
        ok "PP 2 x DP 2 -> $what: steps 4-6 within 1e-5 of the uninterrupted run (the meshes printed)"
    else bad "resume PP 2 x DP 2 -> $what" "$WORK/$name.err"; show "$WORK/ref.log" "$WORK/$name.log"; fi
}
resume_on mesh_dp4 "PP 1 x DP 4" "tp 1 x dp 4" --pp 1
resume_on mesh_pp4 "PP 4 (stages balanced)" "tp 1 x dp 1 x pp 4" --pp 4
resume_on mesh_tp2 "PP 2 x TP 2 (stages 0:3,3:6)" "tp 2 x dp 1 x pp 2" --pp 2 --tp 2 --stages 0:3,3:6

# -- 3. loaded on PP 4 and saved again: the same file; that file on 1 rank: the same weights
run 4 re_pp4 --pp 4 --steps 3 --resume "$C3" --ckpt-dir "$WORK/P4" --dump-weights "$WORK/re_pp4.bin" \
    || bad "re-save on PP 4 ran" "$WORK/re_pp4.err"
P4="$WORK/P4/step_00000003.h5"
same_file "$C3" "$P4" && cmp -s "$WORK/re_pp4.bin" "$WORK/exp3.bin" && [ "$(attr "$P4" mesh_pp)" = 4 ] \
    && ok "PP 2 x DP 2 -> PP 4 -> saved again: /model, /optim/m, /optim/v identical (h5diff), dump = export" \
    || bad "re-save on PP 4" "$WORK/re_pp4.err"
run 4 re_tp2 --pp 2 --tp 2 --stages 0:3,3:6 --steps 3 --resume "$C3" --ckpt-dir "$WORK/T2" --dump-weights "$WORK/re_tp2.bin" \
    || bad "re-save on PP 2 x TP 2 ran" "$WORK/re_tp2.err"
same_file "$C3" "$WORK/T2/step_00000003.h5" && cmp -s "$WORK/re_tp2.bin" "$WORK/exp3.bin" \
    && ok "PP 2 x DP 2 -> PP 2 x TP 2 -> saved again: identical (h5diff); its dump (TP parts of stage 1 sent to rank 0) = export" \
    || bad "re-save on PP 2 x TP 2" "$WORK/re_tp2.err"
run 4 init_pp4 --pp 4 --batch 8 --steps 0 --init-from "$C3" --dump-weights "$WORK/init_pp4.bin" \
    || bad "--init-from on PP 4 ran" "$WORK/init_pp4.err"
cmp -s "$WORK/init_pp4.bin" "$WORK/exp3.bin" && ok "--init-from of the PP 2 x DP 2 save on PP 4: the weights exactly" \
    || bad "--init-from on PP 4" "$WORK/init_pp4.err"
run 1 one --batch 8 --steps 3 --resume "$P4" --ckpt-dir "$WORK/one" --dump-weights "$WORK/one.bin" \
    || bad "PP 4 file on 1 rank ran" "$WORK/one.err"
same_file "$P4" "$WORK/one/step_00000003.h5" && cmp -s "$WORK/one.bin" "$WORK/exp3.bin" \
    && ok "PP 4 save loaded on 1 rank: weights bit-identical (dump), saved again identical (h5diff)" \
    || bad "PP 4 save on 1 rank" "$WORK/one.err"
SET=(--prompt "12+34=" --tokens 30 --temperature 0.8 --seed 7)
"$MPIEXEC" -n 1 "$BIN" sample --ckpt "$P4" "${SET[@]}" > "$WORK/s_pp4.txt" 2> "$WORK/s_pp4.err" &&
"$MPIEXEC" -n 2 "$BIN" sample --ckpt "$WORK/one/step_00000003.h5" "${SET[@]}" > "$WORK/s_one.txt" 2> "$WORK/s_one.err" &&
    [ "$(wc -c < "$WORK/s_pp4.txt")" -ge 36 ] && cmp -s "$WORK/s_pp4.txt" "$WORK/s_one.txt" \
    && ok "osdp_gpt sample --ckpt of the PP 4 save: the text of the 1-rank save ($(head -c 30 "$WORK/s_pp4.txt" | tr -c '[:print:]' '.'))" \
    || bad "sample --ckpt of a PP 4 save" "$WORK/s_pp4.err"

# -- 4. --sample-every on a pipeline: the weights of both stages reach rank 0; the losses unchanged
run 4 sampled --pp 2 --stages 0:2,2:6 --batch 2 --global-batch 8 --steps 3 --sample-every 3 --sample-tokens 20 \
    || bad "--sample-every on PP 2 ran" "$WORK/sampled.err"
if [ "$(losses_from "$WORK/sampled.log" 1 loss_hex)" = "$(losses_from "$WORK/full.log" 1 loss_hex | head -3)" ] &&
   [ "$(grep -a -A1 '^sample after step 3' "$WORK/sampled.out" | tail -1 | wc -c)" -ge 5 ]; then
    ok "--sample-every 3 on PP 2 x DP 2: a sample after step 3 on rank 0, losses bitwise those of the run without"
else bad "--sample-every on PP 2" "$WORK/sampled.err"; fi

# -- 5. rank 3 (the last stage) killed in the middle of the step-6 save: step 3 and latest intact, resume bitwise
K="$WORK/crash"
OSDP_CKPT_CRASH_AT=mid_write OSDP_CKPT_CRASH_STEP=6 OSDP_CKPT_CRASH_RANK=3 \
    run 4 crash --pp 2 --stages 0:2,2:6 --batch 2 --global-batch 8 --steps 6 --ckpt-dir "$K" --save-every 3
rc=$?
after=$(ls "$K" | tr '\n' ' ') latest=$(cat "$K/latest" 2>/dev/null)
same_file "$C3" "$K/step_00000003.h5"; intact=$?
run 4 crash_resume --pp 2 --steps 6 --ckpt-dir "$K" --resume
if [ $rc != 0 ] && grep -q "OSDP_CKPT_CRASH_AT=mid_write" "$WORK/crash.err" && [ $intact = 0 ] &&
   [ "$after" = "latest step_00000003.h5 step_00000006.h5.tmp " ] && [ "$latest" = step_00000003.h5 ] &&
   grep -q "resumed from .*step_00000003.h5 at step 3" "$WORK/crash_resume.out" &&
   [ "$(losses_from "$WORK/crash_resume.log" 4 loss_hex)" = "$ref" ]; then
    ok "rank 3 killed mid-save (exit $rc): left '$after', step 3 identical to the good run's; resume bitwise to step 6"
else bad "kill mid-save: rc=$rc intact=$intact after='$after'" "$WORK/crash_resume.err"; fi

summary "pp checkpoint tests"

#!/bin/bash
# Multi-rank tests of the HDF5 checkpoints (issue 5, DESIGN.md §5.5, §5.6, §6)
# with the real binary on real MPI ranks.  Run by `make check` (which sets
# OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC); OSDP_BIN overrides the binary.
# Prints PASS/FAIL lines and "N passed, N failed"; exits 77 (skipped) when
# the binary has no checkpoint options.
set -u
. "$(dirname "$0")/../lib/test_lib.sh" checkpoint-resume-work
OPS="embed attn.0 mlp.0 attn.1 mlp.1 head"     # t_small's operators in layout order
unset OSDP_CKPT_MPIO OSDP_CKPT_CRASH_AT OSDP_CKPT_CRASH_STEP OSDP_CKPT_CRASH_RANK OSDP_CKPT_MAX_ELEMS \
      OSDP_CKPT_FLETCHER32 OSDP_CKPT_TEST_FORMAT_VERSION

for tool in h5dump h5ls h5diff timeout pgrep; do
    command -v $tool > /dev/null || { echo "SKIP: $tool not found (HDF5 tools: apt-get install hdf5-tools)"; exit 77; }
done
if ! "$MPIEXEC" -n 1 "$BIN" train --help 2>/dev/null | grep -q -- '--ckpt-dir'; then
    echo "SKIP: $BIN train has no --ckpt-dir (checkpoint glue not integrated into train.c)"
    exit 77
fi

run() {   # run NRANKS NAME [train options...]: writes $WORK/NAME.{out,err,log}
    # all-DP unless a test asks for another plan (a later --plan wins): the
    # tests name the plan a checkpoint was saved under, so --plan auto's choice
    # must not decide it
    local n=$1 name=$2; shift 2
    timeout 300 "$MPIEXEC" -n "$n" "$BIN" train --model "$M" --data "$DATA" --threads 1 --peak-flops 1e9 \
        --plan dp --log "$WORK/$name.log" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
}
losses_from() { grep '^step=' "$1" | awk -v k="$2" '{split($1, a, "="); if (a[2] >= k) print}' |
                sed -n 's/.* loss_hex=\([^ ]*\).*/\1/p'; }              # loss_hex of steps >= K
lossv_from() { grep '^step=' "$1" | awk -v k="$2" '{split($1, a, "="); if (a[2] >= k) print}' |
               sed -n 's/.* loss=\([^ ]*\).*/\1/p'; }
steps_of() { grep '^step=' "$1" | sed 's/^step=\([0-9]*\).*/\1/' | tr '\n' ' '; }
latest() { cat "$1/latest" 2>/dev/null; }
within() { paste -d' ' <(lossv_from "$1" "$3") <(lossv_from "$2" "$3") |   # within A B FROM TOL
           awk -v tol="$4" 'NF==2 {n++; d=$1-$2; if (d<0) d=-d; if (d > tol*$1) exit 1} END {exit n==0}'; }
# export CKPT OUT: the /model datasets in layout order (operators, then op_offset), by h5dump alone
export_model() {
    : > "$2"
    for op in $OPS; do
        for t in $(h5ls "$1/model/$op" | awk '{print $1}'); do
            echo "$(h5dump -a "/model/$op/$t/op_offset" "$1" | sed -n 's/.*(0): \([0-9]*\).*/\1/p') $t"
        done | sort -n | while read -r _ t; do
            h5dump -d "/model/$op/$t" -b LE -o "$WORK/piece.bin" "$1" > /dev/null && cat "$WORK/piece.bin" >> "$2"
        done
    done
}
flip_byte() {  # flip_byte FILE DATASET: change one byte inside the dataset's raw data
    local off
    off=$(h5dump -p -H -d "$2" "$1" | sed -n 's/.*OFFSET \([0-9]*\).*/\1/p')
    printf '\x55' | dd of="$1" bs=1 seek=$((off + 101)) conv=notrunc 2>/dev/null
}

# -- 1. periodic saves, latest, layout readable by h5dump alone (default: collective MPI-IO)
A="$WORK/A"
run 4 full --steps 6 --batch 2 --ckpt-dir "$A" --save-every 3 --dump-weights "$WORK/full.bin" || bad "4-rank run with saves" "$WORK/full.err"
if [ -f "$A/step_00000003.h5" ] && [ -f "$A/step_00000006.h5" ] && [ "$(latest "$A")" = step_00000006.h5 ] &&
   [ -z "$(ls "$A" | grep tmp)" ]; then ok "saves every 3 steps on 4 ranks: $(ls "$A" | tr '\n' ' ')(latest -> $(latest "$A"))"
else bad "saves: $(ls "$A" | tr '\n' ' ')" "$WORK/full.err"; fi
export_model "$A/step_00000006.h5" "$WORK/exp6.bin"
export_model "$A/step_00000003.h5" "$WORK/exp3.bin"
cmp -s "$WORK/exp6.bin" "$WORK/full.bin" && [ -s "$WORK/full.bin" ] \
    && ok "layout: /model/<op>/<tensor> exported with h5dump = --dump-weights of the run ($(stat -c %s "$WORK/full.bin") bytes)" \
    || bad "layout: h5dump export differs from --dump-weights"
names=$(h5ls -r "$A/step_00000006.h5")
nd=$(echo "$names" | grep -c ' Dataset ')
if [ "$nd" = 87 ] && echo "$names" | grep -q '^/model/embed/wte *Dataset {256, 32}' &&
   echo "$names" | grep -q '^/model/attn.0/qkv.weight *Dataset {32, 96}' &&
   echo "$names" | grep -q '^/optim/m/mlp.1/fc.bias *Dataset {128}' &&
   echo "$names" | grep -q '^/optim/v/head/lm_head.weight *Dataset {32, 256}' &&
   h5dump -A -H "$A/step_00000006.h5" > "$WORK/h5dump_H.txt" &&
   for a in format_version step seed n_ranks model_description model_hash plan data_position rng_state checksum_algorithm; do
       grep -q "ATTRIBUTE \"$a\"" "$WORK/h5dump_H.txt" || exit 1; done &&
   [ "$(h5dump -a /step "$A/step_00000006.h5" | sed -n 's/.*(0): \([0-9]*\).*/\1/p')" = 6 ]; then
    ok "h5ls -r / h5dump -H: 87 datasets (29 tensors x 3) (/model, /optim/m, /optim/v) with the documented names, shapes and root attributes"
else bad "h5ls -r names ($nd datasets)"; echo "$names" | head -5; fi

# -- 2. resume, same N and plan: steps 4-6 bitwise equal to the uninterrupted run.  Independent
#       MPI-IO: the numbers do not depend on it, a collective load takes ~10 s of CPU on 4
#       oversubscribed ranks, and part 4 proves collective loads (and saves) bit for bit
OSDP_CKPT_MPIO=independent run 4 resume --steps 6 --batch 2 --resume "$A/step_00000003.h5" || bad "resume ran" "$WORK/resume.err"
if [ "$(steps_of "$WORK/resume.log")" = "4 5 6 " ] && [ "$(losses_from "$WORK/resume.log" 4)" = "$(losses_from "$WORK/full.log" 4)" ]; then
    ok "resume on 4 ranks from step 3: steps 4-6 bitwise equal ($(losses_from "$WORK/resume.log" 4 | tr '\n' ' '))"
else bad "resume bitwise: $(losses_from "$WORK/resume.log" 4 | tr '\n' ' ') vs $(losses_from "$WORK/full.log" 4 | tr '\n' ' ')" "$WORK/resume.err"; fi

# -- 3. reshard 4 -> 2 and 1: tensors equal, a re-save equals the original, losses within tolerance
for n in 2 1; do
    run $n "reshard_$n" --steps 3 --batch $((8 / n)) --global-batch 8 --resume "$A/step_00000003.h5" \
        --ckpt-dir "$WORK/R$n" --dump-weights "$WORK/reshard_$n.bin" || bad "reshard N=$n ran" "$WORK/reshard_$n.err"
    run $n "reshard_cont_$n" --steps 6 --batch $((8 / n)) --global-batch 8 --resume --ckpt-dir "$WORK/R$n" \
        || bad "reshard N=$n continue ran" "$WORK/reshard_cont_$n.err"
    if cmp -s "$WORK/reshard_$n.bin" "$WORK/exp3.bin" &&
       h5diff -q "$A/step_00000003.h5" "$WORK/R$n/step_00000003.h5" /model /model &&
       h5diff -q "$A/step_00000003.h5" "$WORK/R$n/step_00000003.h5" /optim/m /optim/m &&
       h5diff -q "$A/step_00000003.h5" "$WORK/R$n/step_00000003.h5" /optim/v /optim/v &&
       [ "$(steps_of "$WORK/reshard_cont_$n.log")" = "4 5 6 " ] && within "$WORK/full.log" "$WORK/reshard_cont_$n.log" 4 1e-5; then
        ok "reshard 4 -> $n ranks: every weight equal, re-saved /model and /optim identical (h5diff, checksums too), steps 4-6 within 1e-5"
    else bad "reshard 4 -> $n"; paste <(lossv_from "$WORK/full.log" 4) <(lossv_from "$WORK/reshard_cont_$n.log" 4) | sed 's/^/    /'; fi
done

# -- 4. N = 3 (shards straddle tensors and rows, padding) with transfers split into pieces, in both
#       MPI-IO modes: at most 100 elements (1-D tensors are cut too) with independent MPI-IO, and
#       at most 2048 with collective MPI-IO, where every rank must make the same number of calls
#       per tensor (a rank without a piece makes empty ones; the 8192-element tensors go in 4 or
#       more).  Collective at 100 elements, ~800 collective calls each way, took 100 s of CPU on 3
#       oversubscribed ranks; at 1000, a third of this test's time on a loaded machine
for spec in independent:100 collective:2048; do
    mode=${spec%:*} max=${spec#*:}
    OSDP_CKPT_MPIO=$mode OSDP_CKPT_MAX_ELEMS=$max run 3 "reshard_3_$mode" --steps 3 --batch 2 --global-batch 6 \
        --resume "$A/step_00000003.h5" --ckpt-dir "$WORK/R3_$mode" --dump-weights "$WORK/reshard_3_$mode.bin" ||
        bad "reshard N=3 ($mode) ran" "$WORK/reshard_3_$mode.err"
    cmp -s "$WORK/reshard_3_$mode.bin" "$WORK/exp3.bin" &&
        h5diff -q "$A/step_00000003.h5" "$WORK/R3_$mode/step_00000003.h5" /model /model &&
        h5diff -q "$A/step_00000003.h5" "$WORK/R3_$mode/step_00000003.h5" /optim/m /optim/m &&
        h5diff -q "$A/step_00000003.h5" "$WORK/R3_$mode/step_00000003.h5" /optim/v /optim/v \
        && ok "reshard 4 -> 3 ranks, $mode MPI-IO, transfers split at $max elements: weights equal, re-save identical" \
        || bad "reshard 4 -> 3 ($mode, split transfers)" "$WORK/reshard_3_$mode.err"
done

# -- 5. plan change on resume: saved under all-DP, resumed under all-ZDP (bitwise: the plan never changes the numbers),
#       and under another shard padding (part 12: the same run proves both).  Independent MPI-IO, as in part 2
OSDP_CKPT_MPIO=independent OSDP_PAD_QUANTUM=64 run 4 plan_zdp --steps 6 --batch 2 --plan zdp --resume "$A/step_00000003.h5" ||
    bad "zdp resume ran" "$WORK/plan_zdp.err"
if [ "$(losses_from "$WORK/plan_zdp.log" 4)" = "$(losses_from "$WORK/full.log" 4)" ] && grep -q "plan changed" "$WORK/plan_zdp.out"; then
    ok "plan change dp -> zdp on resume: steps 4-6 bitwise equal"
else bad "plan change dp -> zdp" "$WORK/plan_zdp.err"; fi

# the rest with independent MPI-IO (collective rounds are slow on oversubscribed cores)
export OSDP_CKPT_MPIO=independent

# -- 6. crash (kill -9 of rank 1) during a save: the previous save and latest are intact and resume exactly
for point in mid_write before_rename; do
    K="$WORK/crash_$point"
    OSDP_CKPT_CRASH_AT=$point OSDP_CKPT_CRASH_STEP=4 run 4 "crash_$point" --steps 6 --batch 2 --ckpt-dir "$K" --save-every 2
    rc=$?
    after=$(ls "$K" | tr '\n' ' ')
    run 4 "crash_${point}_resume" --steps 6 --batch 2 --ckpt-dir "$K" --save-every 2 --resume
    if [ $rc != 0 ] && grep -q "OSDP_CKPT_CRASH_AT=$point" "$WORK/crash_$point.err" && [ "$(latest "$K")" != "" ] &&
       [ "$after" = "latest step_00000002.h5 step_00000004.h5.tmp " ] &&
       grep -q "resumed from .*step_00000002.h5 at step 2" "$WORK/crash_${point}_resume.out" &&
       [ "$(losses_from "$WORK/crash_${point}_resume.log" 3)" = "$(losses_from "$WORK/full.log" 3)" ] &&
       [ "$(ls "$K" | tr '\n' ' ')" = "latest step_00000002.h5 step_00000004.h5 step_00000006.h5 " ]; then
        ok "crash at $point (rank 1 SIGKILL, exit $rc): left '$after'; latest -> step 2, resume bitwise to step 6, temporary removed"
    else bad "crash at $point: rc=$rc after='$after' now='$(ls "$K" | tr '\n' ' ')'" "$WORK/crash_${point}_resume.err"; fi
done

# -- 7. signals: SIGUSR1 to one rank, SIGTERM to all: finish the step, save, exit 0
rank_pids() { for p in $(pgrep -f -- "$1"); do [ "$(readlink "/proc/$p/exe")" = "$(readlink -f "$BIN")" ] && echo "$p"; done; }
for sig in USR1 TERM; do
    S="$WORK/sig_$sig"
    run 4 "sig_$sig" --steps 100000 --lr-steps 1000 --batch 2 --ckpt-dir "$S" &
    job=$!
    for _ in $(seq 600); do n=$(grep -c '^step=' "$WORK/sig_$sig.log" 2>/dev/null); [ "${n:-0}" -ge 2 ] && break; sleep 0.1; done
    pids=$(rank_pids "$S")
    if [ $sig = USR1 ]; then kill -USR1 $(echo "$pids" | tail -1); else kill -TERM $pids; fi
    wait $job; rc=$?
    k=$(steps_of "$WORK/sig_$sig.log" | awk '{print $NF}')
    kk=$(printf 'step_%08d.h5' "${k:-0}")
    if [ $rc = 0 ] && grep -q "received SIG$sig: stopping after step $k" "$WORK/sig_$sig.err" && [ "$(latest "$S")" = "$kk" ]; then
        if [ $sig = USR1 ]; then
            run 4 sig_ref --steps $((k + 2)) --lr-steps 1000 --batch 2
            run 4 sig_resume --steps $((k + 2)) --lr-steps 1000 --batch 2 --ckpt-dir "$S" --resume
            if [ "$(losses_from "$WORK/sig_resume.log" $((k + 1)))" = "$(losses_from "$WORK/sig_ref.log" $((k + 1)))" ] &&
               [ -n "$(losses_from "$WORK/sig_resume.log" $((k + 1)))" ]; then
                ok "SIGUSR1 to one of 4 ranks: all stopped after step $k, saved $kk, exit 0; resume bitwise for 2 more steps"
            else bad "SIGUSR1 resume not bitwise" "$WORK/sig_resume.err"; fi
        else ok "SIGTERM to all 4 ranks: stopped after step $k, saved $kk, exit 0"; fi
    else bad "SIG$sig: rc=$rc step=$k latest=$(latest "$S")" "$WORK/sig_$sig.err"; fi
done

# -- 8. refusals: each with a message naming the problem, non-zero exit, on 2 ranks
expect_refusal() {  # expect_refusal NAME PATTERN [train options]
    local name=$1 pattern=$2; shift 2
    run 2 "bad_$name" --steps 3 --batch 2 "$@"; local rc=$?
    if [ $rc != 0 ] && grep -q -- "$pattern" "$WORK/bad_$name.err"; then
        ok "refused '$name' (exit $rc): $(grep -o -- "$pattern.*" "$WORK/bad_$name.err" | head -1 | cut -c1-90)"
    else bad "refusal '$name' (rc $rc)" "$WORK/bad_$name.err"; fi
}
C3="$A/step_00000003.h5"
sz=$(stat -c %s "$C3")
head -c $((sz * 2 / 3)) "$C3" > "$WORK/truncated.h5"
expect_refusal truncated "truncated file" --resume "$WORK/truncated.h5"
cp "$C3" "$WORK/flipped.h5"; flip_byte "$WORK/flipped.h5" /model/mlp.1/fc.weight
expect_refusal checksum "checksum mismatch in dataset /model/mlp.1/fc.weight" --resume "$WORK/flipped.h5"
cp "$C3" "$WORK/flipped_m.h5"; flip_byte "$WORK/flipped_m.h5" /optim/v/attn.1/qkv.weight
expect_refusal checksum_v "checksum mismatch in dataset /optim/v/attn.1/qkv.weight" --resume "$WORK/flipped_m.h5"
echo "not a checkpoint" > "$WORK/text.h5"
expect_refusal not_hdf5 "not an HDF5 file" --resume "$WORK/text.h5"
printf '[model]\nname = t_wide\nn_layer = 2\nn_head = 2\nn_embd = 64\nvocab = 256\nctx = 32\n' > "$WORK/t_wide.ini"
expect_refusal model_differs "model description differs" --model "$WORK/t_wide.ini" --resume "$C3"
expect_refusal init_model_differs "model description differs" --model "$WORK/t_wide.ini" --init-from "$C3"
cp "$C3" "$WORK/missing.h5"
off=$(grep -obUaP 'wpe\x00' "$WORK/missing.h5" | head -1 | cut -d: -f1)
printf 'X' | dd of="$WORK/missing.h5" bs=1 seek=$((off + 2)) conv=notrunc 2>/dev/null
expect_refusal missing_dataset "missing dataset /.*embed/wpe" --resume "$WORK/missing.h5"
OSDP_CKPT_TEST_FORMAT_VERSION=2 run 2 newer_save --steps 1 --batch 2 --ckpt-dir "$WORK/newer" || bad "newer save" "$WORK/newer_save.err"
expect_refusal newer_version "format_version = 2 is newer" --resume --ckpt-dir "$WORK/newer"
mkdir -p "$WORK/empty"
expect_refusal no_latest "no checkpoint to resume from" --resume --ckpt-dir "$WORK/empty"

# -- 9. a refused latest: refused without --resume-fallback; with it, the previous good save
F="$WORK/fallback"; mkdir -p "$F"
cp "$A/step_00000003.h5" "$A/step_00000006.h5" "$A/latest" "$F/"
flip_byte "$F/step_00000006.h5" /model/embed/wte
run 4 fb_refused --steps 6 --batch 2 --ckpt-dir "$F" --resume; rc1=$?
run 4 fb_used --steps 6 --batch 2 --ckpt-dir "$F" --resume --resume-fallback; rc2=$?
if [ $rc1 != 0 ] && grep -q "step_00000006.h5: checksum mismatch in dataset /model/embed/wte.*--resume-fallback" "$WORK/fb_refused.err" &&
   [ $rc2 = 0 ] && grep -q "trying the previous save .*step_00000003.h5" "$WORK/fb_used.err" &&
   [ "$(losses_from "$WORK/fb_used.log" 4)" = "$(losses_from "$WORK/full.log" 4)" ]; then
    ok "corrupt latest: refused without --resume-fallback (exit $rc1); with it, step 3 loaded and steps 4-6 bitwise"
else bad "fallback: rc1=$rc1 rc2=$rc2" "$WORK/fb_used.err"; fi

# -- 10. --keep 2 and --init-from
run 2 keep --steps 5 --batch 4 --ckpt-dir "$WORK/keep" --save-every 1 --keep 2 || bad "keep ran" "$WORK/keep.err"
[ "$(ls "$WORK/keep" | tr '\n' ' ')" = "latest step_00000004.h5 step_00000005.h5 " ] \
    && ok "--save-every 1 --keep 2: $(ls "$WORK/keep" | tr '\n' ' ')" || bad "--keep 2: $(ls "$WORK/keep" | tr '\n' ' ')"
run 2 init0 --steps 0 --batch 4 --init-from "$C3" --dump-weights "$WORK/init0.bin" || bad "init-from ran" "$WORK/init0.err"
run 2 init2 --steps 2 --batch 4 --init-from "$C3" --ckpt-dir "$WORK/init" || bad "init-from train ran" "$WORK/init2.err"
if cmp -s "$WORK/init0.bin" "$WORK/exp3.bin" && grep -q "fresh optimizer, step 0" "$WORK/init0.out" &&
   [ "$(steps_of "$WORK/init2.log")" = "1 2 " ] && [ "$(latest "$WORK/init")" = step_00000002.h5 ] &&
   [ "$(h5dump -a /optim/m/embed/wte/checksum "$WORK/init/step_00000002.h5" | grep -c '(0)')" = 1 ]; then
    ok "--init-from: the checkpoint's weights exactly, optimizer fresh, training restarts at step 1"
else bad "--init-from" "$WORK/init2.err"; fi

# -- 11. HDF5's fletcher32 filter with parallel (collective) writes: works, detected by HDF5 itself
OSDP_CKPT_FLETCHER32=1 run 2 f32 --steps 3 --batch 4 --ckpt-dir "$WORK/f32" --dump-weights "$WORK/f32.bin" || bad "fletcher32 save" "$WORK/f32.err"
run 3 f32_load --steps 3 --batch 2 --global-batch 6 --resume "$WORK/f32/step_00000003.h5" --dump-weights "$WORK/f32_load.bin" \
    || bad "fletcher32 load" "$WORK/f32_load.err"
cp "$WORK/f32/step_00000003.h5" "$WORK/f32_bad.h5"
off=$(h5dump -p -H -d /model/mlp.0/fc.weight "$WORK/f32_bad.h5" | grep -c FLETCHER32)
h5ls -va "$WORK/f32_bad.h5/model/mlp.0/fc.weight" > "$WORK/f32_ls.txt"
addr=$(awk '/\[0, 0, 0\]/ {print $3; exit}' "$WORK/f32_ls.txt")   # the first chunk's file address
[ -n "$addr" ] && printf '\x55' | dd of="$WORK/f32_bad.h5" bs=1 seek=$((addr + 101)) conv=notrunc 2>/dev/null
run 2 f32_bad --steps 3 --batch 4 --resume "$WORK/f32_bad.h5"; rc=$?
if cmp -s "$WORK/f32.bin" "$WORK/f32_load.bin" && [ "$off" = 1 ] && [ $rc != 0 ] &&
   grep -q "dataset /model/mlp.0/fc.weight" "$WORK/f32_bad.err"; then
    ok "OSDP_CKPT_FLETCHER32=1: chunked + fletcher32 written in parallel, loads on 3 ranks; a flipped byte: '$(grep -o 'cannot read.*\|checksum mismatch.*' "$WORK/f32_bad.err" | head -1 | cut -c1-80)'"
else bad "fletcher32 (filter=$off addr=$addr rc=$rc)" "$WORK/f32_bad.err"; fi

# -- 12. shard padding: CUDA's (OSDP_PAD_QUANTUM=64, a test knob: shards of multiples of 64 elements) on the CPU;
# checkpoints hold logical shapes, so a save under one padding resumes under the other, bitwise
P="$WORK/P"
OSDP_PAD_QUANTUM=64 run 4 pad64 --steps 6 --batch 2 --ckpt-dir "$P" --save-every 3 || bad "quantum 64 run" "$WORK/pad64.err"
# (the save of quantum 1 resumed under quantum 64: part 5's run, under all-ZDP)
run 4 pad64_to_1 --steps 6 --batch 2 --resume "$P/step_00000003.h5" || bad "resume of a quantum-64 save" "$WORK/pad64_to_1.err"
export_model "$P/step_00000006.h5" "$WORK/exp_pad64.bin"
ag_1=$(field "$WORK/full.log" ag_bytes | sort -u); ag_64=$(field "$WORK/pad64.log" ag_bytes | sort -u)
if [ "$ag_64" -gt "$ag_1" ] && [ $((ag_64 % (4 * 4 * 64))) = 0 ] &&
   [ "$(losses_from "$WORK/pad64.log" 1)" = "$(losses_from "$WORK/full.log" 1)" ] &&
   [ "$(losses_from "$WORK/plan_zdp.log" 4)" = "$(losses_from "$WORK/full.log" 4)" ] &&
   [ "$(losses_from "$WORK/pad64_to_1.log" 4)" = "$(losses_from "$WORK/full.log" 4)" ] &&
   [ -n "$(losses_from "$WORK/pad64_to_1.log" 4)" ] && cmp -s "$WORK/exp6.bin" "$WORK/exp_pad64.bin"; then
    ok "shard padding 64 x N (all-gather $ag_64 bytes, $ag_1 with N alone): same losses and saved tensors; saves resume across paddings both ways, steps 4-6 bitwise"
else bad "shard padding: ag $ag_64 vs $ag_1, losses or saved tensors differ" "$WORK/pad64_to_1.err"; fi
OSDP_PAD_QUANTUM=0 run 2 pad_bad --steps 1 --batch 2; rc=$?
if [ $rc != 0 ] && grep -q "OSDP_PAD_QUANTUM=0: expected a whole number" "$WORK/pad_bad.err"; then
    ok "OSDP_PAD_QUANTUM=0 refused (exit $rc): '$(grep -o 'OSDP_PAD_QUANTUM=0.*' "$WORK/pad_bad.err" | head -1 | cut -c1-80)'"
else bad "OSDP_PAD_QUANTUM=0 not refused (exit $rc)" "$WORK/pad_bad.err"; fi

summary "checkpoint tests"

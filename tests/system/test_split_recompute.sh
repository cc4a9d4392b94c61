#!/bin/bash
# Multi-rank tests of operator splitting and activation recompute (issue 7,
# DESIGN.md §3 and §5) with the real binary on 4 MPI ranks.
# Run by `make check` (which sets OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC).
#
# Tolerances: recompute runs the same kernels on the same inputs, so its
# losses are bitwise equal.  A split product sums its pieces in another order
# than one GEMM, so split plans agree with unsplit ones to 1e-5 relative in
# the loss and 1e-4 absolute in the weights after 10 steps (fp32).
set -u
. "$(dirname "$0")/../lib/test_lib.sh" split-work

# the plans here split the head: the naive one (--head naive; the fused head is never cut,
# tests/system/test_lean_kernels.sh); the attention is the default tiled one
run() {   # run NRANKS NAME [train options...]: writes $WORK/NAME.{out,err,log}
    local n=$1 name=$2; shift 2
    "$MPIEXEC" -n "$n" "$BIN" train --model "$M" --data "$DATA" --threads 1 --peak-flops 1e9 --head naive \
        --log "$WORK/$name.log" "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err"
}
last()  { field "$1" "$2" | tail -1; }
close_losses() {   # close_losses A B: every step's loss within 1e-5 relative
    [ "$(field "$1" loss | wc -l)" -gt 0 ] &&
    paste -d' ' <(field "$1" loss) <(field "$2" loss) | awk '{d=$1-$2; if (d<0) d=-d; if (NF != 2 || d > 1e-5*$1) exit 1}'
}

# t_small: d = 32, 2 blocks.  Every slice boundary falls on a row of 32, 96
# or 128 floats, so no slice needs padding on 4 ranks and traffic is exactly
# that of the unsplit plan.
printf 'default = 2/4\nembed = dp\nhead = 3/4\nattn.0 = 4/4\nmlp.1 = 1/3\n' > "$WORK/split.plan"
printf 'default = 4/4\nembed = zdp\n' > "$WORK/zdp4.plan"

# -- 1. split plans: losses and final weights equal to the unsplit run within tolerance
run 4 dp --steps 10 --batch 2 --plan dp --dump-weights "$WORK/dp.bin" || bad "dp ran" "$WORK/dp.err"
run 4 split --steps 10 --batch 2 --plan "$WORK/split.plan" --dump-weights "$WORK/split.bin" || bad "split ran" "$WORK/split.err"
run 4 split_nopf --steps 10 --batch 2 --plan "$WORK/split.plan" --no-prefetch || bad "split --no-prefetch ran" "$WORK/split_nopf.err"
if close_losses "$WORK/dp.log" "$WORK/split.log" && [ "$(field "$WORK/split.log" loss_hex)" = "$(field "$WORK/split_nopf.log" loss_hex)" ] &&
   "$CMP" "$WORK/dp.bin" "$WORK/split.bin" 1e-4 > "$WORK/cmp_split.txt"; then
    ok "split plan ($(tr '\n' ' ' < "$WORK/split.plan" | sed 's/ = /=/g')) = unsplit: 10 losses within 1e-5, weights within 1e-4 ($(cat "$WORK/cmp_split.txt")); prefetch on/off bitwise equal"
else bad "split plan vs unsplit" "$WORK/cmp_split.txt"; fi

# -- 2. traffic unchanged by splitting: all-ZDP in 4 slices moves what all-ZDP moves
run 4 zdp --steps 2 --batch 2 --plan zdp || bad "zdp ran" "$WORK/zdp.err"
run 4 zdp4 --steps 2 --batch 2 --plan "$WORK/zdp4.plan" || bad "zdp 4/4 ran" "$WORK/zdp4.err"
ag1=$(last "$WORK/zdp.log" ag_bytes); rs1=$(last "$WORK/zdp.log" rs_bytes)
ag4=$(last "$WORK/zdp4.log" ag_bytes); rs4=$(last "$WORK/zdp4.log" rs_bytes)
agdp=$(last "$WORK/dp.log" ag_bytes); agsp=$(last "$WORK/split.log" rs_bytes)
if [ -n "$ag1" ] && [ "$ag1" = "$ag4" ] && [ "$rs1" = "$rs4" ] && [ "$ag1" = $((2 * rs1)) ] && [ "$agsp" = "$rs1" ]; then
    ok "traffic: all-ZDP split 4/4 = all-ZDP = 3 passes (all-gather $ag4, reduce-scatter $rs4 bytes per step)"
else bad "traffic: zdp ag=$ag1 rs=$rs1, zdp 4/4 ag=$ag4 rs=$rs4"; fi

# -- 3. memory: measured peak = predicted for split plans; splitting lowers the gathered-weight peak
mem_ok=1
for f in split split_nopf zdp4; do
    [ -n "$(last "$WORK/$f.log" peak_total)" ] && [ "$(last "$WORK/$f.log" peak_total)" = "$(last "$WORK/$f.log" pred_total)" ] || mem_ok=0
done
w1=$(last "$WORK/zdp.log" peak_weights); w4=$(last "$WORK/zdp4.log" peak_weights)
pw1=$(last "$WORK/zdp.log" pred_weights); pw4=$(last "$WORK/zdp4.log" pred_weights)
if [ $mem_ok = 1 ] && [ -n "$w4" ] && [ "$w4" -lt "$w1" ] && [ "$w1" = "$pw1" ] && [ "$w4" = "$pw4" ]; then
    ok "memory: measured peak = predicted for split plans; gathered weights $w1 -> $w4 bytes with 4 slices (as predicted)"
else bad "memory: split peaks vs predictions (weights $w1 -> $w4, predicted $pw1 -> $pw4)"; fi

# -- 4. recompute: bitwise-equal losses, less activation memory (as predicted), a third all-gather for ZDP
printf 'default = zdp recompute\nembed = dp\nhead = dp\n' > "$WORK/zdp_rc.plan"
printf 'default = zdp\nembed = dp\nhead = dp\n' > "$WORK/zdp_blocks.plan"
run 4 zdp_blocks --steps 10 --batch 2 --plan "$WORK/zdp_blocks.plan" || bad "zdp blocks ran" "$WORK/zdp_blocks.err"
run 4 zdp_rc --steps 10 --batch 2 --plan "$WORK/zdp_rc.plan" || bad "zdp recompute ran" "$WORK/zdp_rc.err"
run 4 split_rc --steps 10 --batch 2 --plan "$WORK/split.plan" --recompute all || bad "split --recompute all ran" "$WORK/split_rc.err"
a0=$(last "$WORK/zdp_blocks.log" peak_activations); a1=$(last "$WORK/zdp_rc.log" peak_activations)
pa1=$(last "$WORK/zdp_rc.log" pred_activations)
if [ "$(field "$WORK/dp.log" loss_hex)" = "$(field "$WORK/zdp_rc.log" loss_hex)" ] &&
   [ "$(field "$WORK/split.log" loss_hex)" = "$(field "$WORK/split_rc.log" loss_hex)" ] &&
   [ -n "$a1" ] && [ "$a1" -lt "$a0" ] && [ "$a1" = "$pa1" ] &&
   [ "$(last "$WORK/zdp_rc.log" peak_total)" = "$(last "$WORK/zdp_rc.log" pred_total)" ] &&
   [ "$(last "$WORK/split_rc.log" peak_total)" = "$(last "$WORK/split_rc.log" pred_total)" ]; then
    ok "recompute: 10 bitwise-equal losses (unsplit and split); activation peak $a0 -> $a1 bytes, as predicted"
else bad "recompute: losses or activation memory (peak $a0 -> $a1, predicted $pa1)" "$WORK/zdp_rc.err"; fi
# blocks ZDP with recompute: 3 all-gathers of the blocks; embed and head DP: 1
agb=$(last "$WORK/zdp_blocks.log" ag_bytes); agrc=$(last "$WORK/zdp_rc.log" ag_bytes); rs=$(last "$WORK/zdp_rc.log" rs_bytes)
if [ -n "$agrc" ] && [ $((agrc - agb)) = $((agb - agdp)) ] && [ "$rs" = "$agdp" ]; then
    ok "recompute traffic: ZDP blocks move 4 passes (3 all-gathers + reduce-scatter): all-gather $agdp (DP) -> $agb (ZDP) -> $agrc (ZDP + recompute)"
else bad "recompute traffic: dp $agdp, zdp blocks $agb, with recompute $agrc, rs $rs"; fi

# -- 5. checkpoints of a split plan: resume exact on the same plan, and under another plan.
#       The uninterrupted run is part 1's 10-step split run (same plan and batch); the save at
#       step 3 follows its schedule (--lr-steps 10).  The save uses collective MPI-IO (the default:
#       every rank makes the same number of calls per slice, in ck_transfer, which loads too); the
#       two loads use independent MPI-IO: with 4 slices per operator a collective save or load took
#       40 s of CPU on 4 oversubscribed ranks, and tests/system/test_checkpoint_resume.sh proves collective loads
C="$WORK/ckpt"
run 4 ck_first --steps 3 --lr-steps 10 --batch 2 --plan "$WORK/split.plan" --ckpt-dir "$C" || bad "split run with a save" "$WORK/ck_first.err"
OSDP_CKPT_MPIO=independent run 4 ck_resume --steps 6 --batch 2 --plan "$WORK/split.plan" --resume "$C/step_00000003.h5" || bad "split resume ran" "$WORK/ck_resume.err"
OSDP_CKPT_MPIO=independent run 4 ck_resume_dp --steps 6 --batch 2 --plan zdp --resume "$C/step_00000003.h5" ||
    bad "resume under zdp ran" "$WORK/ck_resume_dp.err"
from4() { grep '^step=[456] ' "$1" | sed -n "s/.* $2=\([^ ]*\).*/\1/p"; }   # from4 LOG KEY: KEY of steps 4-6
if [ "$(from4 "$WORK/split.log" loss | wc -l)" = 3 ] &&
   [ "$(field "$WORK/ck_first.log" loss_hex)" = "$(field "$WORK/split.log" loss_hex | head -3)" ] &&
   [ "$(field "$WORK/ck_resume.log" loss_hex)" = "$(from4 "$WORK/split.log" loss_hex)" ] &&
   paste -d' ' <(from4 "$WORK/split.log" loss) <(field "$WORK/ck_resume_dp.log" loss) | awk '{d=$1-$2; if (d<0) d=-d; if (NF != 2 || d > 1e-5*$1) exit 1}'; then
    ok "checkpoint of a split plan: resume on the same plan bitwise, under all-ZDP within 1e-5"
else bad "checkpoint of a split plan" "$WORK/ck_resume.err"; fi

# -- 6. the planner's per-operator choices (--split auto --recompute auto): at this limit its plan cuts
# operators into different numbers of slices and recomputes some blocks' operators, not all; as a
# plan file and planned inside train alike, it runs with the measured peak equal to the predicted one
LIM=800000
"$BIN" plan --model "$M" --device "$SRC/tests/inputs/t_device.ini" --ranks 2 --batch 2 --split auto --recompute auto \
    --head naive --mem-limit $LIM --out "$WORK/auto.plan" > "$WORK/auto_plan.out" 2>&1 || bad "plan --split auto --recompute auto" "$WORK/auto_plan.out"
run 2 auto_file --steps 3 --batch 2 --plan "$WORK/auto.plan" --mem-limit $LIM || bad "auto plan file ran" "$WORK/auto_file.err"
run 2 auto_train --steps 3 --batch 2 --plan auto --device "$SRC/tests/inputs/t_device.ini" --split auto --recompute auto --mem-limit $LIM || bad "train --split auto --recompute auto ran" "$WORK/auto_train.err"
gs=$(grep -v '^#' "$WORK/auto.plan" | sed -n 's/^[^=]*= *\([0-9]*\/\)\{0,1\}\([0-9a-z]*\).*/\2/p' | sed 's/^z\{0,1\}dp$/1/' | sort -u | wc -l)
nrc=$(grep -c ' recompute' "$WORK/auto.plan"); nblk=$(grep -c '^\(attn\|mlp\)' "$WORK/auto.plan")
if [ "$gs" -ge 2 ] && [ "$nrc" -ge 1 ] && [ "$nrc" -lt "$nblk" ] &&
   [ -n "$(last "$WORK/auto_file.log" peak_total)" ] &&
   [ "$(last "$WORK/auto_file.log" peak_total)" = "$(last "$WORK/auto_file.log" pred_total)" ] &&
   [ "$(last "$WORK/auto_train.log" peak_total)" = "$(last "$WORK/auto_train.log" pred_total)" ] &&
   [ "$(last "$WORK/auto_file.log" peak_total)" -le $LIM ] &&
   [ "$(field "$WORK/auto_file.log" loss_hex)" = "$(field "$WORK/auto_train.log" loss_hex)" ]; then
    ok "split auto + recompute auto: $gs granularities, $nrc of $nblk block operators recompute ($(grep -v '^#' "$WORK/auto.plan" | tr '\n' ' ' | sed 's/ = /=/g')); measured peak = predicted $(last "$WORK/auto_file.log" pred_total) <= $LIM bytes"
else bad "split auto + recompute auto: $gs granularities, $nrc recompute, peak $(last "$WORK/auto_file.log" peak_total) predicted $(last "$WORK/auto_file.log" pred_total)" "$WORK/auto_file.err"; fi

# -- 7. bad split and recompute requests get a message and a non-zero exit
check_bad() {   # check_bad NAME PATTERN PLAN-LINES...
    local name=$1 pat=$2; shift 2
    printf '%s\n' "$@" > "$WORK/$name.plan"
    if run 2 "$name" --steps 1 --batch 1 --plan "$WORK/$name.plan"; then bad "$name: accepted"
    elif grep -q "$pat" "$WORK/$name.err"; then ok "bad input $name: $(grep -m1 "$pat" "$WORK/$name.err" | cut -c1-110)"
    else bad "$name: message lacks '$pat'" "$WORK/$name.err"; fi
}
check_bad split_embed "cannot be split" "default = dp" "embed = 1/2"
check_bad split_too_fine "g <= 16" "default = dp" "head = 17/17"
check_bad recompute_head "only attn and mlp" "default = dp" "head = dp recompute"
check_bad recompute_word "optionally followed by 'recompute'" "default = dp recompute please"

summary "split/recompute tests"

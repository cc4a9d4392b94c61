#!/bin/bash
# The validation loss (issue 17 item 1: --val-data, --eval-every, --eval-batches) with the real
# binary on 1, 2 and 4 MPI ranks.  The validation set is fixed (src/cli/validation.h), so:
#   - its loss is bitwise the same for dp, zdp and recompute plans at a fixed rank count (the plan
#     changes memory and traffic, never the numbers); within 1e-5 for a split plan (a split product
#     sums its pieces in another order, as in training: tests/system/test_split_recompute.sh) and across
#     rank counts (the loss sums in another order);
#   - it is on the step line and in the log at every --eval-every step and after the last only;
#   - the measured peak is still the predicted one to the byte with evaluation on;
#   - an independent numpy forward (scripts/osdp_weights.py loss) of the saved weights gives it;
#   - a directory from scripts/prepare_data.py validates on its *_val_* shard by default, and says so;
#   - bad values are refused with a message naming the option, on every rank.
. "$(dirname "$0")/../lib/test_lib.sh" validation-work
PY=${PYTHON:-python3}
VAL="$WORK/val.txt"
tail -c 30000 "$DATA" > "$VAL"
VALSEED=33321165504405876   # src/cli/validation.c's VALIDATION_SEED

run() {   # run NRANKS NAME [train options...]: writes $WORK/NAME.{out,err,log}
    local n=$1 name=$2; shift 2
    "$MPIEXEC" -n "$n" "$BIN" train --model "$M" --data "$DATA" --threads 1 --peak-flops 1e9 --log "$WORK/$name.log" "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err"
}
EVAL=(--val-data "$VAL" --steps 4 --eval-every 2 --eval-batches 2 --global-batch 8 --batch 2)
peaks_equal() { [ "$(field "$1" peak_total | wc -l)" = 4 ] && [ "$(field "$1" peak_total)" = "$(field "$1" pred_total)" ]; }

close_vals() {   # close_vals A B: both logs' validation losses, pairwise within 1e-5 relative
    [ "$(field "$2" val_loss | wc -l)" = 2 ] &&
    paste -d' ' <(field "$1" val_loss) <(field "$2" val_loss) | awk '{d=$1-$2; if (d<0) d=-d; if (NF != 2 || d > 1e-5*$1) exit 1}'
}

# 1. one rank count, four plans: the same validation losses, measured peak = predicted
run 2 dp "${EVAL[@]}" --plan dp --ckpt-dir "$WORK/ck" || bad "dp ran" "$WORK/dp.err"
run 2 zdp "${EVAL[@]}" --plan zdp || bad "zdp ran" "$WORK/zdp.err"
run 2 split "${EVAL[@]}" --plan zdp --split 2 || bad "zdp --split 2 ran" "$WORK/split.err"
run 2 recompute "${EVAL[@]}" --plan dp --recompute all || bad "dp --recompute all ran" "$WORK/recompute.err"
ref=$(field "$WORK/dp.log" val_loss_hex | tr '\n' ' ')
same=1
for p in zdp recompute; do [ "$(field "$WORK/$p.log" val_loss_hex | tr '\n' ' ')" = "$ref" ] || same=0; done
if [ "$(echo $ref | wc -w)" = 2 ] && [ $same = 1 ]; then
    ok "val loss bitwise equal for dp, zdp, dp --recompute all on 2 ranks ($(field "$WORK/dp.log" val_loss | tr '\n' ' '))"
else bad "val losses across plans: dp '$ref'" "$WORK/zdp.log"; fi
close_vals "$WORK/dp.log" "$WORK/split.log" && ok "val loss of zdp --split 2 within 1e-5 of dp's" \
    || bad "val loss of the split plan" "$WORK/split.log"
all=1
for p in dp zdp split recompute; do peaks_equal "$WORK/$p.log" || all=0; done
[ $all = 1 ] && ok "measured peak = predicted peak, every step of the 4 plans with evaluation on" \
    || bad "measured vs predicted peak with evaluation on" "$WORK/dp.log"

# 2. on the step line and in the log at steps 2 and 4 only (--eval-every 2, 4 steps)
if [ "$(grep -c '^step .*| val_loss ' "$WORK/dp.out")" = 2 ] && grep -q '^step     2/4 .*| val_loss ' "$WORK/dp.out" \
   && grep -q '^step     4/4 .*| val_loss ' "$WORK/dp.out" \
   && [ "$(grep '^step=' "$WORK/dp.log" | grep ' val_loss=' | sed 's/ .*//' | tr '\n' ' ')" = "step=2 step=4 " ]; then
    ok "val_loss on the step line and in the log at steps 2 and 4"
else bad "val_loss placement" "$WORK/dp.out"; fi
run 2 end --val-data "$VAL" --steps 3 --global-batch 8 --batch 2 --plan dp || bad "run without --eval-every" "$WORK/end.err"
[ "$(grep '^step=' "$WORK/end.log" | grep ' val_loss=' | sed 's/ .*//')" = "step=3" ] \
    && ok "without --eval-every: one validation loss, after the last step" || bad "evaluation at the end" "$WORK/end.log"

# 3. other rank counts (the same global batch): within 1e-5
run 1 n1 "${EVAL[@]}" --plan zdp || bad "1 rank ran" "$WORK/n1.err"
run 4 n4 "${EVAL[@]}" --plan zdp --split 2 || bad "4 ranks ran" "$WORK/n4.err"
close=1
for n in n1 n4; do close_vals "$WORK/dp.log" "$WORK/$n.log" || close=0; done
[ $close = 1 ] && ok "val loss on 1 and 4 ranks within 1e-5 of 2 ranks' ($(field "$WORK/n4.log" val_loss | tr '\n' ' '))" \
    || bad "val loss across rank counts" "$WORK/n4.log"

# 4. an independent numpy forward of the final weights on the same two validation batches
CK="$WORK/ck/step_00000004.h5"
if ! $PY -c 'import numpy, h5py' 2> "$WORK/import.err"; then
    echo "SKIP: numpy check of the val loss: needs numpy and h5py ($(tail -1 "$WORK/import.err"))"
elif [ -f "$CK" ]; then
    np0=$($PY "$SRC/scripts/osdp_weights.py" loss "$CK" --data "$VAL" --step 0 --global-batch 8 --seed $VALSEED 2>"$WORK/np.err" | sed -n 's/^loss //p')
    np1=$($PY "$SRC/scripts/osdp_weights.py" loss "$CK" --data "$VAL" --step 1 --global-batch 8 --seed $VALSEED 2>>"$WORK/np.err" | sed -n 's/^loss //p')
    osdp=$(field "$WORK/dp.log" val_loss | tail -1)
    if [ -n "$np0" ] && [ -n "$np1" ] && awk -v a="$np0" -v b="$np1" -v c="$osdp" \
           'BEGIN { d = (a + b) / 2 - c; if (d < 0) d = -d; exit !(d <= 1e-5 * c) }'; then
        ok "numpy forward of the step-4 checkpoint on the validation set: ($np0 + $np1) / 2 = osdp's $osdp within 1e-5"
    else bad "numpy val loss '$np0' '$np1' vs osdp '$osdp'" "$WORK/np.err"; fi
else bad "no checkpoint $CK" "$WORK/dp.err"; fi

# 5. a prepared directory: its val shard is the default validation data, and the run says so
head -c 40000 "$DATA" > "$WORK/text.txt"
$PY "$SRC/scripts/prepare_data.py" "$WORK/text.txt" --out "$WORK/corpus" --val-fraction 0.25 > "$WORK/prep.out" 2>&1 \
    || bad "prepare_data" "$WORK/prep.out"
run 2 dir --data "$WORK/corpus" --steps 2 --global-batch 8 --batch 2 --plan zdp || bad "train on the directory" "$WORK/dir.err"
run 2 dirval --data "$WORK/corpus" --val-data "$WORK/corpus/corpus_val_000000.bin" --steps 2 --global-batch 8 --batch 2 \
    --plan zdp || bad "train with --val-data the val shard" "$WORK/dirval.err"
if grep -q "^validation: the 1 \*_val_\*.bin shard of $WORK/corpus (10000 tokens, never trained on" "$WORK/dir.out" \
   && grep -q "30000 tokens" "$WORK/dir.out" && [ -n "$(field "$WORK/dir.log" val_loss_hex)" ] \
   && [ "$(field "$WORK/dir.log" val_loss_hex)" = "$(field "$WORK/dirval.log" val_loss_hex)" ]; then
    ok "a prepared directory validates on its val shard by default (said on stdout; = --val-data that shard, bitwise)"
else bad "default validation shard" "$WORK/dir.out"; fi

# 6. bad values: non-zero exit, a message naming the option
refused() {   # refused NAME OPTION [train options...]
    local name=$1 opt=$2; shift 2
    if run 2 "$name" --steps 1 --batch 2 "$@"; then bad "$name: accepted"; return; fi
    grep -q -- "$opt" "$WORK/$name.err" && ok "refused: $* ($(grep -m1 -o -- "$opt.*" "$WORK/$name.err" | cut -c1-100))" \
        || bad "$name: message does not name $opt" "$WORK/$name.err"
}
refused bad_every0 --eval-every --val-data "$VAL" --eval-every 0
refused bad_everyabc --eval-every --val-data "$VAL" --eval-every abc
refused bad_batches0 --eval-batches --val-data "$VAL" --eval-batches 0
refused bad_missing --val-data --val-data "$WORK/no_such_file.bin"
refused bad_nodata --eval-every --eval-every 2
refused bad_nodata_batches --eval-batches --eval-batches 2

summary test_validation

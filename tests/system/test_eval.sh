#!/bin/bash
# osdp_gpt eval (issue 29) with the real binary on 1, 2 and 4 MPI ranks:
#   - eval --batches K of a checkpoint prints train's val_loss for the same batches: bitwise on the
#     mesh that trained (DP on 2 ranks, PP 2 on 2 ranks), within 1e-6 on other meshes (1 rank with
#     --plan auto; 4 ranks as TP 2 x DP 2, PP 2 x DP 2); --init-from with train's options the same;
#   - without --batches, every sequence of the data once: the batch count the data gives, the same
#     loss within 1e-6 on 1 and 4 ranks (DP 4) and as the numpy forward of the same windows;
#   - scripts/osdp_weights.py loss (an independent numpy forward) on the validation shard, read as
#     train reads it (header checked), equals osdp's val_loss within 1e-6; it refuses what it
#     cannot read in one line, never a traceback;
#   - bad inputs are refused with a message naming the option, non-zero on every rank.
. "$(dirname "$0")/../lib/test_lib.sh" eval-work
PY=${PYTHON:-python3}
TOOL="$SRC/scripts/osdp_weights.py"
CORPUS="$WORK/corpus"
$PY "$SRC/scripts/prepare_data.py" "$DATA" --out "$CORPUS" > "$WORK/prepare.out" 2>&1 || bad "prepare_data" "$WORK/prepare.out"
COMMON=(--threads 1)

evalrun() {   # evalrun NRANKS NAME [eval options...]: writes $WORK/NAME.{out,log}
    local n=$1 name=$2; shift 2
    "$MPIEXEC" -n "$n" "$BIN" eval "${COMMON[@]}" --log "$WORK/$name.log" "$@" > "$WORK/$name.out" 2>&1
}
evalkey() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" "$1"; }   # evalkey LOG KEY: the eval record's value
within() {   # within A B TOL: |A - B| <= TOL
    [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t) }'
}

# two training runs with a validation loss after step 3 on the corpus' *_val_* shard, and a checkpoint:
# DP on 2 ranks, and a pipeline of 2 stages on 2 ranks
TRAIN=(--model "$M" --data "$CORPUS" --steps 3 --batch 2 --global-batch 8 --eval-batches 2 --threads 1 --peak-flops 1e9)
"$MPIEXEC" -n 2 "$BIN" train "${TRAIN[@]}" --plan dp --ckpt-dir "$WORK/ck" --log "$WORK/train.log" > "$WORK/train.out" 2>&1 \
    || bad "training run (dp)" "$WORK/train.out"
"$MPIEXEC" -n 2 "$BIN" train "${TRAIN[@]}" --plan zdp --pp 2 --ckpt-dir "$WORK/ckpp" --log "$WORK/trainpp.log" \
    > "$WORK/trainpp.out" 2>&1 || bad "training run (pp 2)" "$WORK/trainpp.out"
CK="$WORK/ck/step_00000003.h5"
val_hex=$(field "$WORK/train.log" val_loss_hex | tail -1); val=$(field "$WORK/train.log" val_loss | tail -1)
pp_hex=$(field "$WORK/trainpp.log" val_loss_hex | tail -1)

# 1. the mesh that trained: bitwise; --ckpt takes the run's global batch and micro-batch
evalrun 2 e_dp --ckpt "$CK" --data "$CORPUS" --batches 2 --plan dp || bad "eval on 2 ranks" "$WORK/e_dp.out"
if [ -n "$val_hex" ] && [ "$(evalkey "$WORK/e_dp.log" loss_hex)" = "$val_hex" ] \
   && grep -q "^eval: loss .* | 2 batches x 8 sequences x 32 tokens = 512 tokens, train's validation set" "$WORK/e_dp.out"; then
    ok "eval --ckpt on the training mesh (dp 2): loss $(evalkey "$WORK/e_dp.log" loss) bitwise train's val_loss ($val_hex)"
else bad "eval on 2 ranks: '$(evalkey "$WORK/e_dp.log" loss_hex)' vs train's '$val_hex'" "$WORK/e_dp.out"; fi
evalrun 2 e_pp --ckpt "$WORK/ckpp/step_00000003.h5" --data "$CORPUS" --batches 2 --plan zdp --pp 2 || bad "eval --pp 2" "$WORK/e_pp.out"
[ -n "$pp_hex" ] && [ "$(evalkey "$WORK/e_pp.log" loss_hex)" = "$pp_hex" ] \
    && ok "eval --pp 2 of the pipeline's checkpoint: bitwise its val_loss ($pp_hex)" \
    || bad "eval --pp 2: '$(evalkey "$WORK/e_pp.log" loss_hex)' vs '$pp_hex'" "$WORK/e_pp.out"
# --plan auto --pp 2 (the 3D search) without --global-batch: the checkpoint's global batch of 8
evalrun 2 e_pp_auto --ckpt "$WORK/ckpp/step_00000003.h5" --data "$CORPUS" --batches 2 --plan auto --pp 2 \
    || bad "eval --plan auto --pp 2 without --global-batch" "$WORK/e_pp_auto.out"
if within "$(evalkey "$WORK/e_pp_auto.log" loss)" "$(field "$WORK/trainpp.log" val_loss | tail -1)" 1e-6 \
   && grep -q "^eval: loss .* | 2 batches x 8 sequences x 32 tokens" "$WORK/e_pp_auto.out"; then
    ok "eval --plan auto --pp 2 takes the checkpoint's global batch (8): its val_loss within 1e-6"
else bad "eval --plan auto --pp 2: '$(evalkey "$WORK/e_pp_auto.log" loss)'" "$WORK/e_pp_auto.out"; fi
# ... and so does a resume under --plan auto --pp 2 (train keeps the checkpoint's global batch)
"$MPIEXEC" -n 2 "$BIN" train --model "$M" --data "$CORPUS" --steps 4 --threads 1 --peak-flops 1e9 --plan auto --pp 2 \
    --resume "$WORK/ckpp/step_00000003.h5" --ckpt-dir "$WORK/ckpp_auto" --log "$WORK/resume_auto.log" \
    > "$WORK/resume_auto.out" 2>&1 && [ "$(config_field "$WORK/resume_auto.log" global_batch)" = 8 ] \
    && [ "$(field "$WORK/resume_auto.log" loss | wc -l)" = 1 ] \
    && ok "train --resume --plan auto --pp 2 without --global-batch: the checkpoint's 8, step 4 run" \
    || bad "train --resume --plan auto --pp 2 without --global-batch" "$WORK/resume_auto.out"
# --init-from with train's options: the same batches, the same bits
evalrun 2 e_init --init-from "$CK" --data "$CORPUS" --batches 2 --plan dp --batch 2 --global-batch 8 \
    || bad "eval --init-from" "$WORK/e_init.out"
[ "$(evalkey "$WORK/e_init.log" loss_hex)" = "$val_hex" ] && ok "eval --init-from with train's --global-batch and --batch: bitwise" \
    || bad "eval --init-from: '$(evalkey "$WORK/e_init.log" loss_hex)'" "$WORK/e_init.out"

# 2. other meshes and plans: within 1e-6
close=1; said=""
for mesh in "1 e_1" "4 e_tp --plan dp --tp 2" "4 e_pp4 --plan zdp --pp 2"; do
    set -- $mesh
    n=$1 name=$2; shift 2
    evalrun "$n" "$name" --ckpt "$CK" --data "$CORPUS" --batches 2 "$@" || { close=0; bad "eval $mesh" "$WORK/$name.out"; continue; }
    got=$(evalkey "$WORK/$name.log" loss)
    said="$said $name=$got"
    within "$got" "$val" 1e-6 || { close=0; echo "    $mesh: $got vs $val"; }
done
[ $close = 1 ] && ok "eval on 1 rank (--plan auto), 4 ranks (tp 2 x dp 2, pp 2 x dp 2): train's $val within 1e-6 ($said)" \
    || bad "eval across meshes"
grep -q "^eval: .* | 4 ranks = tp 2 x dp 2 x pp 1$" "$WORK/e_tp.out" && grep -q "^eval: .* | 4 ranks = tp 1 x dp 2 x pp 2$" "$WORK/e_pp4.out" \
    && ok "eval says the mesh it ran on" || bad "eval's mesh" "$WORK/e_tp.out"

# 3. without --batches: every sequence of the validation shard once, in whole global batches of 8
n_val=$($PY -c "import os; print((os.path.getsize('$CORPUS/corpus_val_000000.bin') - 1024) // 2)")
sequences=$(( (n_val - 1) / 32 )); batches=$(( sequences / 8 )); left=$(( sequences - 8 * batches ))
evalrun 1 s1 --ckpt "$CK" --data "$CORPUS" --plan dp || bad "sweep on 1 rank" "$WORK/s1.out"
evalrun 4 s4 --ckpt "$CK" --data "$CORPUS" --plan zdp || bad "sweep on 4 ranks" "$WORK/s4.out"
if [ "$(evalkey "$WORK/s1.log" batches)" = $batches ] && [ "$(evalkey "$WORK/s1.log" set)" = sweep ] \
   && grep -q "every sequence once but the last $left (fewer than a global batch)" "$WORK/s1.out" \
   && within "$(evalkey "$WORK/s1.log" loss)" "$(evalkey "$WORK/s4.log" loss)" 1e-6; then
    ok "eval without --batches: the $n_val tokens' $batches batches of 8 (last $left sequences left out), 1 rank = 4 ranks (dp 4, zdp) within 1e-6"
else bad "the sweep: $(evalkey "$WORK/s1.log" batches) batches (want $batches), losses $(evalkey "$WORK/s1.log" loss) / $(evalkey "$WORK/s4.log" loss)" "$WORK/s1.out"; fi
if $PY -c 'import numpy, h5py' 2> /dev/null; then   # the numpy forward of the same windows, batch by batch
    np=$($PY "$TOOL" loss "$CK" --data "$CORPUS" --sweep --global-batch 8 2> "$WORK/np.err" | sed -n 's/^loss //p')
    within "$np" "$(evalkey "$WORK/s1.log" loss)" 1e-6 \
        && ok "osdp_weights.py loss --sweep: $np = eval's $(evalkey "$WORK/s1.log" loss) within 1e-6 ($batches batches, read in chunks)" \
        || bad "numpy sweep '$np' vs eval's" "$WORK/np.err"
fi
grep -q "perplexity" "$WORK/s1.out" && within "$(evalkey "$WORK/s1.log" perplexity)" \
    "$(awk -v l="$(evalkey "$WORK/s1.log" loss)" 'BEGIN { printf "%.9g", exp(l) }')" 1e-6 \
    && ok "perplexity = exp(loss)" || bad "perplexity" "$WORK/s1.out"
# --val-data (a text file) wins over --data, as in train
evalrun 1 vtext --ckpt "$CK" --data "$CORPUS" --val-data "$DATA" --batches 1 --plan dp \
    && [ "$(evalkey "$WORK/vtext.log" data)" = "$DATA" ] && ok "eval --val-data: evaluates that data (a text file)" \
    || bad "eval --val-data" "$WORK/vtext.out"

# 4. the numpy forward: train's validation set from the directory and from the shard itself
if ! $PY -c 'import numpy, h5py, safetensors' 2> "$WORK/import.err"; then
    echo "SKIP: the numpy checks need numpy, h5py and safetensors ($(tail -1 "$WORK/import.err"))"
else
    for d in "$CORPUS" "$CORPUS/corpus_val_000000.bin"; do
        np=$($PY "$TOOL" loss "$CK" --data "$d" --eval-batches 2 --global-batch 8 2> "$WORK/np.err" | sed -n 's/^loss //p')
        within "$np" "$val" 1e-6 && ok "osdp_weights.py loss --data ${d#$WORK/} --eval-batches 2: $np = val_loss $val within 1e-6" \
            || bad "numpy val loss '$np' vs '$val'" "$WORK/np.err"
    done
    np_refuses() {   # np_refuses NAME PATTERN ARGS...: one line on stderr, non-zero, no traceback
        local name=$1 pat=$2; shift 2
        if $PY "$TOOL" loss "$CK" --global-batch 8 "$@" > "$WORK/npbad.out" 2>&1; then bad "loss $name: accepted" "$WORK/npbad.out"
        elif [ "$(wc -l < "$WORK/npbad.out")" = 1 ] && grep -q -- "$pat" "$WORK/npbad.out" && ! grep -q Traceback "$WORK/npbad.out"
        then ok "osdp_weights.py loss refuses $name in one line ($pat)"
        else bad "loss $name: message" "$WORK/npbad.out"; fi
    }
    mkdir -p "$WORK/empty"
    head -c 3000 "$DATA" > "$WORK/text.bin"
    np_refuses "a directory without shards" "no .bin shard files" --data "$WORK/empty" --step 0
    np_refuses "a .bin that is not an llm.c shard" "bad magic" --data "$WORK/text.bin" --step 0
    np_refuses "a missing file" "no such file" --data "$WORK/nothere.bin" --step 0
    np_refuses "--step and --eval-batches together" "give one of" --data "$CORPUS" --step 0 --eval-batches 2
fi

# 5. bad inputs: a message naming the problem, non-zero exit on every rank (mpiexec fails)
refused() {   # refused NAME PATTERN eval-options...
    local name=$1 pat=$2; shift 2
    if "$MPIEXEC" -n 2 "$BIN" eval --threads 1 "$@" > "$WORK/bad.out" 2>&1; then bad "$name: accepted" "$WORK/bad.out"
    elif grep -q -- "$pat" "$WORK/bad.out"; then ok "eval refuses $name ($pat)"
    else bad "$name: message lacks '$pat'" "$WORK/bad.out"; fi
}
head -c 200 "$DATA" > "$WORK/short.txt"
refused "--ckpt and --init-from together" "exclude each other" --ckpt "$CK" --init-from "$CK" --data "$CORPUS"
refused "no weights" "give --ckpt FILE or --init-from" --data "$CORPUS"
refused "a missing checkpoint" "--ckpt: .*nothere.h5" --ckpt "$WORK/nothere.h5" --data "$CORPUS"
refused "a checkpoint that is not one" "--init-from: " --init-from "$DATA" --data "$CORPUS"
refused "--batches 0" "--batches '0': expected an integer in \[1," --ckpt "$CK" --data "$CORPUS" --batches 0
refused "--batches -3" "--batches '-3'" --ckpt "$CK" --data "$CORPUS" --batches -3
refused "no data" "no data to evaluate" --ckpt "$CK"
refused "missing data" "--data: cannot open data" --ckpt "$CK" --data "$WORK/nothere.txt"
refused "data shorter than a global batch" "fewer than one global batch of 8" --ckpt "$CK" --data "$WORK/short.txt" --plan dp
refused "--plan auto --pp 2 on --init-from weights without --global-batch" \
    "needs --global-batch G: .*eval --ckpt takes the training run's" --init-from "$CK" --data "$CORPUS" --plan auto --pp 2
refused "--steps (a train option)" "unknown option '--steps'" --ckpt "$CK" --data "$CORPUS" --steps 3
refused "a --log it cannot write" "--log: cannot write" --ckpt "$CK" --data "$CORPUS" --plan dp --log "$WORK/nodir/x.jsonl"
# a log on a full disk (/dev/full opens, and its writes fail with ENOSPC): the record is checked, not lost in silence
[ -w /dev/full ] && refused "a --log on a full disk" "--log: cannot write.*No space left on device" \
    --ckpt "$CK" --data "$CORPUS" --plan dp --batches 1 --log /dev/full

summary test_eval

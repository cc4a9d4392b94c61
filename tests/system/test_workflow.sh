#!/bin/bash
# A user's workflow around training (issue 17): prepare a corpus from a text file into llm.c
# shards (scripts/prepare_data.py), train on the directory (validation shards and the token table
# are not trained on), and plot the run (scripts/plot_log); bad inputs to both scripts.
. "$(dirname "$0")/../lib/test_lib.sh" workflow-work
PY=${PYTHON:-python3}
PREP="$SRC/scripts/prepare_data.py"
PLOT="$SRC/scripts/plot_log"
u16() { od -An -t u4 -N 12 "$1" | tr -s ' ' | sed 's/^ //'; }   # the first 3 header words

# 1. prepare: 20000 bytes of the addition corpus, 10% validation, 6000-token training shards
head -c 20000 "$DATA" > "$WORK/text.txt"
if $PY "$PREP" "$WORK/text.txt" --out "$WORK/corpus" --val-fraction 0.1 --shard-tokens 6000 > "$WORK/prep.log" 2>&1 \
   && [ "$(u16 "$WORK/corpus/corpus_val_000000.bin")" = "20240520 1 2000" ] \
   && [ "$(u16 "$WORK/corpus/corpus_train_000000.bin")" = "20240520 1 6000" ] \
   && [ "$(u16 "$WORK/corpus/corpus_train_000002.bin")" = "20240520 1 6000" ] \
   && [ ! -e "$WORK/corpus/corpus_train_000003.bin" ] \
   && [ "$(stat -c %s "$WORK/corpus/corpus_train_000000.bin")" = $((1024 + 2 * 6000)) ]; then
    ok "prepare_data: 2000 val + 3 x 6000 train tokens with llm.c headers"
else bad "prepare_data shards" "$WORK/prep.log"; fi
# the tokens are the bytes, in order: the first training token is byte 2000 of the text
first=$(od -An -t u2 -j 1024 -N 2 "$WORK/corpus/corpus_train_000000.bin" | tr -d ' ')
byte=$(od -An -t u1 -j 2000 -N 1 "$WORK/text.txt" | tr -d ' ')
[ "$first" = "$byte" ] && ok "prepare_data: tokens are the text's bytes after the validation part" \
    || bad "first training token $first, text byte $byte"
# the token table: llm.c's header (magic 20240328, version 2, vocab 256, eot 0), then 256 x (1, byte)
tab="$WORK/corpus/corpus_tokenizer.bin"
if [ "$(od -An -t u4 -N 16 "$tab" | tr -s ' ' | sed 's/^ //')" = "20240328 2 256 0" ] \
   && [ "$(stat -c %s "$tab")" = $((1024 + 2 * 256)) ] \
   && [ "$(od -An -t u1 -j $((1024 + 2 * 65)) -N 2 "$tab" | tr -s ' ' | sed 's/^ //')" = "1 65" ]; then
    ok "prepare_data: token table in llm.c's tokenizer format"
else bad "token table header/size"; fi

# 2. train on the directory: only the training shards are the stream (18000 tokens)
if $MPIEXEC -n 2 "$BIN" train --model "$M" --data "$WORK/corpus" --steps 4 --plan dp --batch 2 \
        --log "$WORK/run1.log" > "$WORK/train1.out" 2>&1 \
   && grep -q "18000 tokens" "$WORK/train1.out"; then
    ok "train on the prepared directory: 18000 training tokens, validation shard left out"
else bad "train on the prepared directory" "$WORK/train1.out"; fi
$MPIEXEC -n 2 "$BIN" train --model "$M" --data "$WORK/corpus" --steps 4 --plan zdp --batch 2 --seed 7 \
    --log "$WORK/run2.log" > "$WORK/train2.out" 2>&1 || bad "second run" "$WORK/train2.out"

# 3. plot both runs on one chart
if "$PLOT" "$WORK/run1.log" "$WORK/run2.log" --label dp --label "zdp seed 7" --out "$WORK/runs.png" \
        > "$WORK/plot.out" 2>&1; then
    if [ "$(od -An -c -j 1 -N 3 "$WORK/runs.png" | tr -d ' ')" = "PNG" ] && [ "$(stat -c %s "$WORK/runs.png")" -gt 10000 ] \
       && [ "$(wc -l < "$WORK/runs.png.d/run1_loss.dat")" = 5 ]; then
        ok "plot_log: one PNG for two runs, 4 steps each"
    else bad "plot_log output" "$WORK/plot.out"; fi
elif grep -q "gnuplot not found" "$WORK/plot.out"; then
    echo "SKIP: plot_log drawing: gnuplot is not installed (apt-get install gnuplot-nox)"
    [ -f "$WORK/runs.png.d/run1_loss.dat" ] && ok "plot_log: data files written without gnuplot" \
        || bad "plot_log data files" "$WORK/plot.out"
else bad "plot_log" "$WORK/plot.out"; fi
# JSON Lines logs are read alike
sed -n 's/^step=\([0-9]*\) loss=\([^ ]*\) .*tokens_per_s=\([^ ]*\) .*peak_total=\([0-9]*\).*/{"step": \1, "loss": \2, "tokens_per_s": \3, "peak_total": \4}/p' \
    "$WORK/run1.log" > "$WORK/run1.jsonl"
"$PLOT" "$WORK/run1.jsonl" --out "$WORK/json.png" > "$WORK/plotj.out" 2>&1
[ "$(wc -l < "$WORK/json.png.d/run0_loss.dat")" = 5 ] && ok "plot_log reads JSON Lines" || bad "plot_log JSON Lines" "$WORK/plotj.out"

# 4. bad inputs: a clear message, a non-zero exit, nothing overwritten
expect_refusal() {  # NAME PATTERN COMMAND...
    local name=$1 pat=$2; shift 2
    if "$@" > "$WORK/bad.out" 2>&1; then bad "$name: accepted" "$WORK/bad.out"
    elif grep -q -- "$pat" "$WORK/bad.out"; then ok "$name refused ($pat)"
    else bad "$name: message lacks '$pat'" "$WORK/bad.out"; fi
}
sum_before=$(cat "$WORK"/corpus/* | cksum)
expect_refusal "prepare_data into an existing corpus" "nothing was overwritten" \
    $PY "$PREP" "$WORK/text.txt" --out "$WORK/corpus"
[ "$(cat "$WORK"/corpus/* | cksum)" = "$sum_before" ] && ok "existing corpus untouched" || bad "existing corpus changed"
mkdir -p "$WORK/partial"; : > "$WORK/partial/corpus_train_000001.bin"
expect_refusal "prepare_data with one clashing shard" "corpus_train_000001.bin exists" \
    $PY "$PREP" "$WORK/text.txt" --out "$WORK/partial" --shard-tokens 6000
[ "$(ls "$WORK/partial")" = "corpus_train_000001.bin" ] && ok "no file written when one clashes" \
    || bad "files written before the clash was found: $(ls "$WORK/partial" | tr '\n' ' ')"
expect_refusal "prepare_data --val-fraction 1.5" "--val-fraction" $PY "$PREP" "$WORK/text.txt" --out "$WORK/x" --val-fraction 1.5
expect_refusal "prepare_data --shard-tokens 0" "--shard-tokens" $PY "$PREP" "$WORK/text.txt" --out "$WORK/x" --shard-tokens 0
expect_refusal "prepare_data missing input" "not a readable file" $PY "$PREP" "$WORK/nope.txt" --out "$WORK/x"
expect_refusal "plot_log on a non-log" "no step records" "$PLOT" "$WORK/text.txt" --out "$WORK/x.png"
expect_refusal "plot_log --label count" "--label given 1 times for 2 logs" \
    "$PLOT" "$WORK/run1.log" "$WORK/run2.log" --label one --out "$WORK/x.png"
mkdir -p "$WORK/valonly"; cp "$WORK/corpus/corpus_val_000000.bin" "$WORK/valonly/"
expect_refusal "train on validation shards only" "only validation shards" \
    $MPIEXEC -n 2 "$BIN" train --model "$M" --data "$WORK/valonly" --steps 2 --plan dp --batch 2

summary test_workflow

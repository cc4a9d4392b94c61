#!/bin/bash
# Logs people use (issue 17 item 6), on 2 real ranks: --log FILE.jsonl writes JSON Lines with
# exactly the keys of the key=value records; --log-every N thins the progress line (the log
# keeps every step); the progress line carries an ETA; MFU never reads above 100% (a reference
# below what the run did is called unreliable); bad --log-every values are refused on every
# rank; scripts/plot_log draws a JSON Lines log.  Run by `make check`.
set -u
. "$(dirname "$0")/../lib/test_lib.sh" logs-work
PY=${PYTHON:-python3}
PLOT="$SRC/scripts/plot_log"

train() {   # train NAME [options]: 7 steps on 2 ranks, output in $WORK/NAME.out
    local name=$1; shift
    timeout 120 "$MPIEXEC" -n 2 "$BIN" train --model "$M" --data "$DATA" --threads 1 --steps 7 --plan dp \
        --batch 2 "$@" > "$WORK/$name.out" 2>&1
}
progress_steps() { grep '^step ' "$1" | sed 's/^step *\([0-9]*\)\/.*/\1/' | tr '\n' ' '; }

# 1. the same run logged both ways, the progress line every 3 steps
train jsonl --log-every 3 --log "$WORK/run.jsonl" || bad "run with --log run.jsonl" "$WORK/jsonl.out"
train kv --log-every 3 --log "$WORK/run.log" || bad "run with --log run.log" "$WORK/kv.out"
if $PY - "$WORK/run.jsonl" "$WORK/run.log" > "$WORK/json.out" 2>&1 <<'PYEOF'
import json, sys
jsonl = [json.loads(line) for line in open(sys.argv[1])]
kinds = [r["record"] for r in jsonl]
assert kinds == ["config"] + ["step"] * 7 + ["summary"], kinds
kv = []
for line in open(sys.argv[2]):
    words = line.split()
    kind = "step" if words[0].startswith("step=") else words.pop(0)
    kv.append((kind, [w.split("=", 1)[0] for w in words]))
for rec, (kind, keys) in zip(jsonl, kv):
    assert rec["record"] == kind, (rec["record"], kind)
    assert [k for k in rec if k != "record"] == keys, (kind, list(rec), keys)
for rec in jsonl[1:8]:
    assert isinstance(rec["loss_hex"], str) and abs(float.fromhex(rec["loss_hex"]) - rec["loss"]) < 1e-8, rec["loss_hex"]
    assert all(isinstance(rec[k], (int, float)) for k in ("step", "loss", "tokens_per_s", "peak_total", "ms"))
assert [r["step"] for r in jsonl[1:8]] == list(range(1, 8))
assert isinstance(jsonl[0]["model"], str) and jsonl[0]["peak_source"] == "sgemm"
print("ok", len(jsonl), "records")
PYEOF
then ok "JSON Lines: valid, config + 7 steps + summary, the keys of the key=value log in order"
else bad "JSON Lines log" "$WORK/json.out"; fi
[ "$(losses "$WORK/run.log" | tr '\n' ' ')" = "$($PY -c 'import json,sys
print(" ".join(json.loads(l)["loss_hex"] for l in open(sys.argv[1]) if "\"step\"" in l.split(",")[0]), end=" ")' \
    "$WORK/run.jsonl")" ] && ok "both logs hold the same losses bitwise" || bad "losses differ between the two logs"
[ "$(progress_steps "$WORK/kv.out")" = "1 3 6 7 " ] && ok "--log-every 3 prints steps 1 3 6 7" \
    || bad "--log-every 3 printed steps '$(progress_steps "$WORK/kv.out")'" "$WORK/kv.out"
[ "$(grep -c '^step=' "$WORK/run.log")" = 7 ] && ok "--log-every 3: the log keeps all 7 steps" \
    || bad "log steps: $(grep -c '^step=' "$WORK/run.log")"
[ "$(grep '^step ' "$WORK/kv.out" | grep -c '| ETA [0-9][0-9hms]* |')" = 4 ] && ok "every progress line has an ETA" \
    || bad "ETA missing" "$WORK/kv.out"
train every1 || bad "run with the default --log-every" "$WORK/every1.out"
[ "$(progress_steps "$WORK/every1.out")" = "1 2 3 4 5 6 7 " ] && ok "by default every step is printed" \
    || bad "default progress steps '$(progress_steps "$WORK/every1.out")'"

# 2. MFU: never above 100%; a reference below what the run did is unreliable, not a number
over=$( { field "$WORK/run.log" mfu; sed -n 's/^summary.* mfu=\([^ ]*\).*/\1/p' "$WORK/run.log"; } \
    | awk '$1 != "n/a" && !($1 >= 0 && $1 <= 1) { print }')
numbers=$(field "$WORK/run.log" mfu | grep -c '^[0-9.]*$')
shown=$(grep -o 'MFU *[0-9.]*%' "$WORK/kv.out" | awk '{ sub("%", "", $2); if ($2 + 0 > 100) print }')
[ -z "$over" ] && [ -z "$shown" ] && ok "measured reference: no MFU above 100% ($numbers of 7 logged as numbers)" \
    || bad "MFU above 100%: log '$over', printed '$shown'" "$WORK/run.log"
train tiny --peak-flops 1e3 --log "$WORK/tiny.log" || bad "run with --peak-flops 1e3" "$WORK/tiny.out"
if [ "$(grep -c 'MFU n/a (reference unreliable)' "$WORK/tiny.out")" = 8 ] \
   && [ "$(field "$WORK/tiny.log" mfu | sort -u)" = "n/a" ] && grep -q '^summary.* mfu=n/a' "$WORK/tiny.log" \
   && ! grep -q 'MFU *[0-9]' "$WORK/tiny.out"; then
    ok "--peak-flops 1e3: 'MFU n/a (reference unreliable)' on 7 steps and the summary, mfu=n/a in the log"
else bad "tiny --peak-flops" "$WORK/tiny.out"; fi
train tinyj --peak-flops 1e3 --log "$WORK/tiny.jsonl" || bad "run with --peak-flops 1e3 --log .jsonl" "$WORK/tinyj.out"
$PY -c 'import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert all(r["mfu"] is None for r in recs[1:]), [r["mfu"] for r in recs]' "$WORK/tiny.jsonl" \
    && ok "--peak-flops 1e3: mfu is null in JSON Lines" || bad "JSON mfu of an unreliable reference"

# 3. bad --log-every: the message names the option, every rank exits non-zero, no log written
bad_log_every() {   # bad_log_every VALUE PATTERN
    local value=$1 pattern=$2 name=bad_$1
    mkdir -p "$WORK/$name.rc"
    timeout 120 "$MPIEXEC" -n 2 sh -c '"$0" "$@"; echo $? > "$RC_DIR/rank${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-x}}"' \
        "$BIN" train --model "$M" --data "$DATA" --steps 2 --log "$WORK/$name.log" --log-every "$value" \
        > "$WORK/$name.out" 2>&1
    local rcs; rcs=$(cat "$WORK/$name.rc"/rank* 2>/dev/null | sort | tr '\n' ' ')
    if grep -q -- "$pattern" "$WORK/$name.out" && [ "$(grep -c 'error: ' "$WORK/$name.out")" = 1 ] \
       && [ "$(ls "$WORK/$name.rc" | wc -l)" = 2 ] && ! echo "$rcs" | grep -qw 0 && [ ! -e "$WORK/$name.log" ]; then
        ok "--log-every $value refused on both ranks (exit $rcs): $(grep -o -- "$pattern.*" "$WORK/$name.out")"
    else bad "--log-every $value: exits '$rcs'" "$WORK/$name.out"; fi
}
export RC_DIR
RC_DIR="$WORK/bad_0.rc"; bad_log_every 0 "--log-every '0': expected an integer in \[1, "
RC_DIR="$WORK/bad_abc.rc"; bad_log_every abc "--log-every 'abc': expected an integer"
RC_DIR="$WORK/bad_2.5.rc"; bad_log_every 2.5 "--log-every '2.5': expected an integer"
"$BIN" train --help | grep -q -- "--log-every N.*--log keeps every step" && ok "--help explains --log-every" \
    || bad "--help lacks --log-every"

# 4. plot_log draws the JSON Lines log beside the key=value one
if "$PLOT" "$WORK/run.jsonl" "$WORK/run.log" --label jsonl --label kv --out "$WORK/runs.png" > "$WORK/plot.out" 2>&1; then
    [ "$(od -An -c -j 1 -N 3 "$WORK/runs.png" | tr -d ' ')" = "PNG" ] \
       && cmp -s <(tail -n +2 "$WORK/runs.png.d/run0_loss.dat") <(tail -n +2 "$WORK/runs.png.d/run1_loss.dat") \
       && [ "$(wc -l < "$WORK/runs.png.d/run0_loss.dat")" = 8 ] \
        && ok "plot_log: a PNG of the JSON Lines and key=value logs, same 7 losses" || bad "plot_log output" "$WORK/plot.out"
elif grep -q "gnuplot not found" "$WORK/plot.out"; then
    echo "SKIP: plot_log drawing: gnuplot is not installed (apt-get install gnuplot-nox)"
    cmp -s <(tail -n +2 "$WORK/runs.png.d/run0_loss.dat") <(tail -n +2 "$WORK/runs.png.d/run1_loss.dat") \
        && ok "plot_log: the same data files from JSON Lines and key=value" || bad "plot_log data files" "$WORK/plot.out"
else bad "plot_log" "$WORK/plot.out"; fi

summary test_logs

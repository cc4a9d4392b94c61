#!/bin/bash
# Weight interop (issue 17): an osdp checkpoint exported to Hugging Face GPT-2 safetensors gives,
# in an independent numpy forward, the loss osdp logged for the next step; imported back as an osdp
# weights file it is bit-exact (values, checksums, model_hash) and trains from --init-from exactly as
# the checkpoint does; bad inputs are refused and nothing is overwritten.
. "$(dirname "$0")/test_lib.sh" interop-work
PY=${PYTHON:-python3}
TOOL="$SRC/scripts/osdp_weights.py"
if ! $PY -c 'import numpy, h5py, safetensors' 2> "$WORK/import.err"; then
    echo "SKIP: needs the Python packages numpy, h5py and safetensors ($(tail -1 "$WORK/import.err"))"
    exit 77
fi

# a 2-rank ZDP run of 3 steps with a save at step 2: its step-3 loss uses the step-2 weights
$MPIEXEC -n 2 "$BIN" train --model "$M" --steps 3 --plan zdp --batch 2 --ckpt-dir "$WORK/ck" --save-every 2 \
    --log "$WORK/run.log" > "$WORK/train.out" 2>&1 || bad "training run" "$WORK/train.out"
CK="$WORK/ck/step_00000002.h5"
osdp_loss=$(grep '^step=3 ' "$WORK/run.log" | sed 's/.* loss=\([^ ]*\).*/\1/')

if $PY "$TOOL" export-hf "$CK" --out "$WORK/hf/model.safetensors" > "$WORK/export.out" 2>&1 \
   && grep -q '"tie_word_embeddings": false' "$WORK/hf/config.json"; then
    ok "export-hf: safetensors and config.json"
else bad "export-hf" "$WORK/export.out"; fi
np_loss=$($PY "$TOOL" loss "$WORK/hf/model.safetensors" --model "$M" --data "$DATA" --step 2 --global-batch 4 \
          2> "$WORK/loss.err" | sed -n 's/^loss //p')
if [ -n "$np_loss" ] && awk -v a="$np_loss" -v b="$osdp_loss" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * b) }'; then
    ok "numpy forward of the exported weights: loss $np_loss = osdp's $osdp_loss within 1e-5"
else bad "numpy loss '$np_loss' vs osdp '$osdp_loss'" "$WORK/loss.err"; fi

$PY "$TOOL" import-hf "$WORK/hf/model.safetensors" --model "$M" --out "$WORK/back.h5" > "$WORK/import.out" 2>&1 \
    || bad "import-hf" "$WORK/import.out"
if $PY - "$CK" "$WORK/back.h5" > "$WORK/cmp.out" 2>&1 <<'PYEOF'
import sys, h5py
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a["model"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
for n in names:
    x, y = a["model/" + n], b["model/" + n]
    assert x[...].tobytes() == y[...].tobytes(), n
    for k in ("checksum", "op_offset"):
        assert x.attrs[k] == y.attrs[k], (n, k)
assert a.attrs["model_hash"] == b.attrs["model_hash"]
assert a.attrs["total_params"] == b.attrs["total_params"]
print(len(names), "tensors bit-exact")
PYEOF
then ok "osdp -> HF -> osdp: $(cat "$WORK/cmp.out")"; else bad "round trip" "$WORK/cmp.out"; fi

# the imported weights file trains as the checkpoint it came from: bitwise-equal losses from --init-from
for src in ck back; do
    f=$CK; [ $src = back ] && f="$WORK/back.h5"
    $MPIEXEC -n 2 "$BIN" train --model "$M" --steps 3 --plan dp --batch 2 --init-from "$f" \
        --log "$WORK/init_$src.log" > "$WORK/init_$src.out" 2>&1 || bad "--init-from $src" "$WORK/init_$src.out"
done
if [ -n "$(losses "$WORK/init_ck.log")" ] && [ "$(losses "$WORK/init_ck.log")" = "$(losses "$WORK/init_back.log")" ] \
   && grep -q "weights from the weights file" "$WORK/init_back.out"; then
    ok "--init-from the imported weights file: losses bitwise equal to --init-from the checkpoint"
else bad "--init-from the weights file" "$WORK/init_back.out"; fi

expect_refusal() {  # NAME PATTERN COMMAND...
    local name=$1 pat=$2; shift 2
    if "$@" > "$WORK/bad.out" 2>&1; then bad "$name: accepted" "$WORK/bad.out"
    elif grep -q -- "$pat" "$WORK/bad.out"; then ok "$name refused ($pat)"
    else bad "$name: message lacks '$pat'" "$WORK/bad.out"; fi
}
before=$(cksum < "$WORK/hf/model.safetensors")
expect_refusal "export-hf over an existing file" "nothing was overwritten" \
    $PY "$TOOL" export-hf "$CK" --out "$WORK/hf/model.safetensors"
[ "$(cksum < "$WORK/hf/model.safetensors")" = "$before" ] && ok "existing export untouched" || bad "export overwritten"
expect_refusal "import-hf into the wrong model" "has shape" \
    $PY "$TOOL" import-hf "$WORK/hf/model.safetensors" --model "$SRC/input/models/tiny.ini" --out "$WORK/wrong.h5"
[ ! -e "$WORK/wrong.h5" ] && ok "no file left by a refused import" || bad "a refused import left a file"
$PY -c "
from safetensors.numpy import load_file, save_file
t = load_file('$WORK/hf/model.safetensors'); del t['lm_head.weight']; save_file(t, '$WORK/tied.safetensors')"
expect_refusal "import-hf of a tied head" "ties its head" \
    $PY "$TOOL" import-hf "$WORK/tied.safetensors" --model "$M" --out "$WORK/tied.h5"
expect_refusal "--resume from a weights file" "holds weights only" \
    $MPIEXEC -n 2 "$BIN" train --model "$M" --steps 3 --plan dp --batch 2 --resume "$WORK/back.h5"
cp "$WORK/back.h5" "$WORK/edited.h5"
$PY -c "import h5py; f = h5py.File('$WORK/edited.h5', 'r+'); f.attrs['model_name'] = b'other'"
expect_refusal "--init-from an edited weights file" "model_name" \
    $MPIEXEC -n 2 "$BIN" train --model "$M" --steps 3 --plan dp --batch 2 --init-from "$WORK/edited.h5"
expect_refusal "export-hf of a non-checkpoint" "not an HDF5 file" $PY "$TOOL" export-hf "$DATA" --out "$WORK/x.safetensors"

summary test_interop

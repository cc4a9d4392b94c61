#!/bin/bash
# Weight interop (issue 17): an osdp checkpoint exported to Hugging Face GPT-2 safetensors gives,
# in an independent numpy forward, the loss osdp logged for the next step; imported back as an osdp
# weights file it is bit-exact (values, checksums, model_hash) and trains from --init-from exactly as
# the checkpoint does; bad inputs are refused and nothing is overwritten.  A tied head (tied_head =
# true): trains on 2 ranks with bitwise-equal losses under three plans and memory as predicted; its
# checkpoint exports to llm.c's model file (layout checked as llm.c reads it) and to HF without
# lm_head, both round-trip bit-exact, and the llm.c file's numpy loss is osdp's.
. "$(dirname "$0")/../lib/test_lib.sh" interop-work
PY=${PYTHON:-python3}
TOOL="$SRC/scripts/osdp_weights.py"
require_python "numpy, h5py and safetensors" numpy h5py safetensors

# same_model A B: the /model groups of two osdp files hold the same datasets, bit for bit (values,
# checksum, op_offset), and the files the same model_hash and total_params
same_model() {
    $PY - "$1" "$2" <<'PYEOF'
import sys, h5py
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
def datasets(f):
    names = []
    f["model"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    return sorted(names)
names = datasets(a)
assert names == datasets(b), (names, datasets(b))
for n in names:
    x, y = a["model/" + n], b["model/" + n]
    assert x[...].tobytes() == y[...].tobytes(), n
    for k in ("checksum", "op_offset"):
        assert x.attrs[k] == y.attrs[k], (n, k)
for k in ("model_hash", "total_params"):
    assert a.attrs[k] == b.attrs[k], k
print(len(names), "tensors bit-exact")
PYEOF
}

# check_numpy_loss WHAT OSDP_LOSS SOURCE [loss options...]: the numpy forward's loss of a global batch of 4
# equals the one osdp logged within 1e-5 relative
check_numpy_loss() {
    local what=$1 want=$2 source=$3; shift 3
    local got
    got=$($PY "$TOOL" loss "$source" "$@" --data "$DATA" --global-batch 4 2> "$WORK/loss.err" | sed -n 's/^loss //p')
    if [ -n "$got" ] && awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * b) }'; then
        ok "numpy forward of $what: loss $got = osdp's $want within 1e-5"
    else bad "numpy loss of $what '$got' vs osdp '$want'" "$WORK/loss.err"; fi
}

# a 2-rank ZDP run of 3 steps with a save at step 2: its step-3 loss uses the step-2 weights
$MPIEXEC -n 2 "$BIN" train --model "$M" --steps 3 --plan zdp --batch 2 --ckpt-dir "$WORK/ck" --save-every 2 \
    --log "$WORK/run.log" > "$WORK/train.out" 2>&1 || bad "training run" "$WORK/train.out"
CK="$WORK/ck/step_00000002.h5"
osdp_loss=$(grep '^step=3 ' "$WORK/run.log" | sed 's/.* loss=\([^ ]*\).*/\1/')

if $PY "$TOOL" export-hf "$CK" --out "$WORK/hf" > "$WORK/export.out" 2>&1 \
   && grep -q '"tie_word_embeddings": false' "$WORK/hf/config.json" && [ -f "$WORK/hf/model.safetensors" ]; then
    ok "export-hf: a directory with model.safetensors and config.json"
else bad "export-hf" "$WORK/export.out"; fi
check_numpy_loss "the exported weights" "$osdp_loss" "$WORK/hf/model.safetensors" --model "$M" --step 2

$PY "$TOOL" import-hf "$WORK/hf" --model "$M" --out "$WORK/back.h5" > "$WORK/import.out" 2>&1 \
    || bad "import-hf" "$WORK/import.out"
if same_model "$CK" "$WORK/back.h5" > "$WORK/cmp.out" 2>&1
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
expect_refusal "export-hf into a directory that holds an export" "nothing was overwritten" \
    $PY "$TOOL" export-hf "$CK" --out "$WORK/hf"
expect_refusal "export-hf --out a file name" "writes a directory" \
    $PY "$TOOL" export-hf "$CK" --out "$WORK/other/model.safetensors"
[ ! -e "$WORK/other" ] && ok "nothing written for --out a file name" || bad "export-hf --out FILE left files"
[ "$(cksum < "$WORK/hf/model.safetensors")" = "$before" ] && ok "existing export untouched" || bad "export overwritten"
expect_refusal "import-hf into the wrong model (config.json)" "n_head = 2: osdp's model computes with 4" \
    $PY "$TOOL" import-hf "$WORK/hf/model.safetensors" --model "$SRC/input/models/tiny.ini" --out "$WORK/wrong.h5"
cp "$WORK/hf/model.safetensors" "$WORK/bare.safetensors"
expect_refusal "import-hf into the wrong model (no config.json)" "has shape" \
    $PY "$TOOL" import-hf "$WORK/bare.safetensors" --model "$SRC/input/models/tiny.ini" --out "$WORK/wrong.h5"
[ ! -e "$WORK/wrong.h5" ] && ok "no file left by a refused import" || bad "a refused import left a file"
# config.json: each setting osdp's model does not compute is refused by its name and nothing is written
# (a key left out counts as GPT2Config's default); the tanh GELU's other name and reorder_and_upcast_attn map
$PY - "$WORK/hf" "$WORK/cfg" <<'PYEOF'
import json, os, shutil, sys
base = json.load(open(os.path.join(sys.argv[1], "config.json")))
cases = {"n_head": {"n_head": 8}, "activation_function": {"activation_function": "gelu"},
         "layer_norm_epsilon": {"layer_norm_epsilon": 1e-3},
         "scale_attn_by_inverse_layer_idx": {"scale_attn_by_inverse_layer_idx": True},
         "n_positions": {"n_positions": None}, "mapped": {"activation_function": "gelu_pytorch_tanh",
                                                          "reorder_and_upcast_attn": True}}
for name, change in cases.items():
    d = os.path.join(sys.argv[2], name)
    os.makedirs(d)
    shutil.copy(os.path.join(sys.argv[1], "model.safetensors"), d)
    c = {k: v for k, v in {**base, **change}.items() if v is not None}
    c.pop("n_ctx", None) if name == "n_positions" else None
    json.dump(c, open(os.path.join(d, "config.json"), "w"))
PYEOF
for key in n_head activation_function layer_norm_epsilon scale_attn_by_inverse_layer_idx n_positions; do
    expect_refusal "import-hf of a config.json with another $key" "config.json: $key = " \
        $PY "$TOOL" import-hf "$WORK/cfg/$key" --model "$M" --out "$WORK/cfg_$key.h5"
    [ -e "$WORK/cfg_$key.h5" ] && bad "a refused import ($key) left a file"
done
grep -q "n_positions = 1024 (GPT2Config's default" "$WORK/bad.out" && ok "a key left out is checked at GPT2Config's default" \
    || bad "the default of a missing key" "$WORK/bad.out"
$PY "$TOOL" import-hf "$WORK/cfg/mapped" --model "$M" --out "$WORK/mapped.h5" > "$WORK/mapped.out" 2>&1 \
    && same_model "$CK" "$WORK/mapped.h5" > /dev/null 2>&1 \
    && ok "gelu_pytorch_tanh and reorder_and_upcast_attn (the same function in float32) import bit-exact" \
    || bad "a config osdp computes the same" "$WORK/mapped.out"
# a tied GPT-2 file (no lm_head.weight) into an untied model: lm_head = wte^T, said on stderr
$PY -c "
from safetensors.numpy import load_file, save_file
t = load_file('$WORK/hf/model.safetensors'); del t['lm_head.weight']; save_file(t, '$WORK/tied.safetensors')"
if $PY "$TOOL" import-hf "$WORK/tied.safetensors" --model "$M" --out "$WORK/untied.h5" > "$WORK/untie.out" 2>&1 \
   && grep -q "is a copy of wte" "$WORK/untie.out" \
   && $PY -c "
import h5py, numpy as np; f = h5py.File('$WORK/untied.h5', 'r')
assert np.array_equal(f['model/head/lm_head.weight'][...], f['model/embed/wte'][...].T)" 2>> "$WORK/untie.out"; then
    ok "import-hf of a tied file into an untied model: lm_head = wte^T"
else bad "import-hf tied -> untied" "$WORK/untie.out"; fi
expect_refusal "--resume from a weights file" "holds weights only" \
    $MPIEXEC -n 2 "$BIN" train --model "$M" --steps 3 --plan dp --batch 2 --resume "$WORK/back.h5"
cp "$WORK/back.h5" "$WORK/edited.h5"
$PY -c "import h5py; f = h5py.File('$WORK/edited.h5', 'r+'); f.attrs['model_name'] = b'other'"
expect_refusal "--init-from an edited weights file" "model_name" \
    $MPIEXEC -n 2 "$BIN" train --model "$M" --steps 3 --plan dp --batch 2 --init-from "$WORK/edited.h5"
expect_refusal "export-hf of a non-checkpoint" "not an HDF5 file" $PY "$TOOL" export-hf "$DATA" --out "$WORK/x.safetensors"

# ---- a tied head (tied_head = true, GPT-2's): training, HF and llm.c ------------------------------
TIED="$SRC/tests/inputs/t_tied.ini"
printf 'default = zdp\nembed = dp\nmlp.0 = dp\nmlp.1 = 1/1\n' > "$WORK/tied_mixed.plan"
for plan in dp zdp mixed; do
    spec=$plan; [ $plan = mixed ] && spec="$WORK/tied_mixed.plan"
    extra=""; [ $plan = zdp ] && extra="--ckpt-dir $WORK/tck --save-every 4"
    $MPIEXEC -n 2 "$BIN" train --model "$TIED" --steps 10 --plan "$spec" --batch 2 --lr 3e-3 $extra \
        --log "$WORK/tied_$plan.log" > "$WORK/tied_$plan.out" 2>&1 || bad "tied head: --plan $plan" "$WORK/tied_$plan.out"
done
l_dp=$(losses "$WORK/tied_dp.log"); first=$(field "$WORK/tied_dp.log" loss | head -1); last=$(field "$WORK/tied_dp.log" loss | tail -1)
if [ -n "$l_dp" ] && [ "$l_dp" = "$(losses "$WORK/tied_zdp.log")" ] && [ "$l_dp" = "$(losses "$WORK/tied_mixed.log")" ] \
   && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.05) }'; then
    ok "tied head on 2 ranks: loss $first -> $last, bitwise equal under all-DP, all-ZDP and a mixed plan"
else bad "tied head training: dp/zdp/mixed losses differ or do not decrease ($first -> $last)" "$WORK/tied_zdp.out"; fi
# tensor parallel (wte's vocab-parallel rows are the head's columns; a padded vocabulary: 256 -> 258) and bf16
OSDP_VOCAB_QUANTUM=3 $MPIEXEC -n 2 "$BIN" train --model "$TIED" --steps 10 --plan zdp --tp 2 --batch 4 --global-batch 4 \
    --lr 3e-3 --log "$WORK/tied_tp.log" > "$WORK/tied_tp.out" 2>&1 || bad "tied head: --tp 2" "$WORK/tied_tp.out"
if [ -n "$l_dp" ] && paste <(field "$WORK/tied_dp.log" loss) <(field "$WORK/tied_tp.log" loss) \
   | awk 'NF != 2 { exit 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) exit 1 } END { exit NR != 10 }'; then
    ok "tied head under --tp 2 (vocabulary padded to 258): the 10 losses of 2 data-parallel ranks within 1e-5"
else bad "tied head --tp 2 losses" "$WORK/tied_tp.out"; fi
for plan in dp zdp; do
    $MPIEXEC -n 2 "$BIN" train --model "$TIED" --steps 4 --plan $plan --batch 2 --precision bf16 \
        --log "$WORK/tied_bf16_$plan.log" > "$WORK/tied_bf16_$plan.out" 2>&1 || bad "tied bf16 $plan" "$WORK/tied_bf16_$plan.out"
done
[ -n "$(losses "$WORK/tied_bf16_dp.log")" ] && [ "$(losses "$WORK/tied_bf16_dp.log")" = "$(losses "$WORK/tied_bf16_zdp.log")" ] \
    && [ "$(field "$WORK/tied_bf16_zdp.log" peak_total | tail -1)" = "$(field "$WORK/tied_bf16_zdp.log" pred_total | tail -1)" ] \
    && ok "tied head with bf16 working weights: all-DP = all-ZDP bitwise, peak = predicted" || bad "tied bf16" "$WORK/tied_bf16_zdp.out"
grep -q "the embedding stays DP" "$WORK/tied_zdp.out" && ok "--plan zdp keeps the tied embedding DP, and says so" \
    || bad "--plan zdp note" "$WORK/tied_zdp.out"
mem_ok=1
for plan in dp zdp mixed; do
    for cat in weights grads total; do
        m=$(field "$WORK/tied_$plan.log" "peak_$cat" | tail -1); p=$(field "$WORK/tied_$plan.log" "pred_$cat" | tail -1)
        [ -n "$m" ] && [ "$m" = "$p" ] || { mem_ok=0; echo "    tied $plan $cat: measured $m predicted $p"; }
    done
done
[ $mem_ok = 1 ] && ok "tied head: measured peak = predicted (weights, grads, total) under the 3 plans" || bad "tied memory"
if ! h5ls -r "$WORK/tck/step_00000004.h5" 2>&1 | grep -q lm_head && h5ls -r "$WORK/tck/step_00000004.h5" | grep -q 'embed/wte'; then
    ok "tied checkpoint: /model/embed/wte and no lm_head dataset"
else bad "tied checkpoint has an lm_head dataset"; fi

# resumed at step 4 of the all-ZDP run, steps 5..10 are its own, bit for bit
$MPIEXEC -n 2 "$BIN" train --model "$TIED" --steps 10 --plan zdp --batch 2 --lr 3e-3 --resume "$WORK/tck/step_00000004.h5" \
    --log "$WORK/tied_resume.log" > "$WORK/tied_resume.out" 2>&1 || bad "tied head: --resume" "$WORK/tied_resume.out"
[ "$(losses "$WORK/tied_resume.log")" = "$(losses "$WORK/tied_zdp.log" | tail -6)" ] \
    && ok "tied head: resumed at step 4, steps 5..10 bitwise those of the uninterrupted run" \
    || bad "tied resume" "$WORK/tied_resume.out"
TCK="$WORK/tck/step_00000004.h5"
tied_loss=$(grep '^step=5 ' "$WORK/tied_zdp.log" | sed 's/.* loss=\([^ ]*\).*/\1/')
$PY "$TOOL" export-llmc "$TCK" --out "$WORK/llmc/model.bin" > "$WORK/llmc.out" 2>&1 || bad "export-llmc" "$WORK/llmc.out"
# the file as llm.c's train_gpt2.c reads it (gpt2_build_from_checkpoint, fill_in_parameter_sizes), written out
# here independently of the script: header, 16 tensors in order, (out, in) weights, wte padded to Vp
if $PY - "$WORK/llmc/model.bin" "$TCK" > "$WORK/llmc_read.out" 2>&1 <<'PYEOF'
import sys, h5py, numpy as np
raw = open(sys.argv[1], "rb").read()
hd = np.frombuffer(raw[:1024], "<i4")
assert list(hd[:2]) == [20240326, 3] and not hd[8:].any(), hd[:8]
maxT, V, L, NH, C, Vp = (int(x) for x in hd[2:8])
assert Vp % 128 == 0 and V <= Vp < V + 128, (V, Vp)
sizes = [Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
         L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C]
p = np.frombuffer(raw[1024:], "<f4")
assert p.size == sum(sizes), (p.size, sum(sizes))
off = np.cumsum([0] + sizes)
t = lambda i, shape: p[off[i]:off[i + 1]].reshape(shape)
f = h5py.File(sys.argv[2], "r")
m = lambda n: f["model/" + n][...]
wte = t(0, (Vp, C))
assert np.array_equal(wte[:V], m("embed/wte")) and not wte[V:].any()
assert np.array_equal(t(1, (maxT, C)), m("embed/wpe"))
for l in range(L):
    assert np.array_equal(t(4, (L, 3 * C, C))[l], m(f"attn.{l}/qkv.weight").T)
    assert np.array_equal(t(6, (L, C, C))[l], m(f"attn.{l}/proj.weight").T)
    assert np.array_equal(t(9, (L, C))[l], m(f"mlp.{l}/ln_2.bias"))
    assert np.array_equal(t(10, (L, 4 * C, C))[l], m(f"mlp.{l}/fc.weight").T)
    assert np.array_equal(t(12, (L, C, 4 * C))[l], m(f"mlp.{l}/proj.weight").T)
    assert np.array_equal(t(13, (L, C))[l], m(f"mlp.{l}/proj.bias"))
assert np.array_equal(t(15, (C,)), m("head/ln_f.bias"))
print(f"maxT {maxT} V {V} Vp {Vp} L {L} NH {NH} C {C}: {p.size} floats in llm.c's order")
PYEOF
then ok "export-llmc: llm.c's layout ($(cat "$WORK/llmc_read.out"))"; else bad "export-llmc layout" "$WORK/llmc_read.out"; fi
check_numpy_loss "the llm.c file (logits x wte^T)" "$tied_loss" "$WORK/llmc/model.bin" --model "$TIED" --step 4
$PY "$TOOL" import-llmc "$WORK/llmc/model.bin" --model "$TIED" --out "$WORK/llmc_back.h5" > "$WORK/llmc_in.out" 2>&1 \
    || bad "import-llmc" "$WORK/llmc_in.out"
$PY "$TOOL" export-hf "$TCK" --out "$WORK/thf" > "$WORK/thf.out" 2>&1 || bad "export-hf tied" "$WORK/thf.out"
$PY "$TOOL" import-hf "$WORK/thf" --model "$TIED" --out "$WORK/thf_back.h5" > "$WORK/thf_in.out" 2>&1 \
    || bad "import-hf tied" "$WORK/thf_in.out"
for back in llmc_back thf_back; do
    if same_model "$TCK" "$WORK/$back.h5" > "$WORK/cmp_$back.out" 2>&1
    then ok "tied: osdp -> ${back%_back} -> osdp: $(cat "$WORK/cmp_$back.out")"; else bad "tied round trip $back" "$WORK/cmp_$back.out"; fi
done
if grep -q '"tie_word_embeddings": true' "$WORK/thf/config.json" \
   && $PY -c "from safetensors.numpy import load_file; assert 'lm_head.weight' not in load_file('$WORK/thf/model.safetensors')"; then
    ok "export-hf of a tied model: no lm_head.weight (as GPT-2's model.safetensors), tie_word_embeddings true"
else bad "export-hf tied config"; fi
# the tied weights file trains as its checkpoint does
for src in ck back; do
    f=$TCK; [ $src = back ] && f="$WORK/llmc_back.h5"
    $MPIEXEC -n 2 "$BIN" train --model "$TIED" --steps 2 --plan dp --batch 2 --init-from "$f" \
        --log "$WORK/tinit_$src.log" > "$WORK/tinit_$src.out" 2>&1 || bad "tied --init-from $src" "$WORK/tinit_$src.out"
done
[ -n "$(losses "$WORK/tinit_ck.log")" ] && [ "$(losses "$WORK/tinit_ck.log")" = "$(losses "$WORK/tinit_back.log")" ] \
    && ok "--init-from the llm.c import: losses bitwise equal to --init-from the checkpoint" || bad "tied --init-from"
# the tied head in the sampler: greedy decoding = numpy's argmax of x wte^T
"$MPIEXEC" -n 2 "$BIN" sample --ckpt "$WORK/tck/step_00000008.h5" --prompt "12+34=" --tokens 20 --temperature 0 \
    > "$WORK/tgreedy.txt" 2> "$WORK/tgreedy.err" || bad "sample of a tied model" "$WORK/tgreedy.err"
mine=$(tail -c +7 "$WORK/tgreedy.txt" | head -c 20 | od -An -tu1 -v | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
ref=$($PY "$TOOL" greedy "$WORK/tck/step_00000008.h5" --prompt "12+34=" --tokens 20 2> "$WORK/tnp.err")
[ "$(echo "$ref" | wc -w)" = 20 ] && [ "$mine" = "$ref" ] && ok "sample --temperature 0 of a tied model: numpy's 20 tokens ($ref)" \
    || bad "tied greedy: osdp '$mine' numpy '$ref'" "$WORK/tnp.err"
expect_refusal "export-llmc of an untied model" "ties its head" $PY "$TOOL" export-llmc "$CK" --out "$WORK/untied.bin"
expect_refusal "import-llmc into another model" "header maxT (ctx) is 32, model tiny has 64" \
    $PY "$TOOL" import-llmc "$WORK/llmc/model.bin" --model "$SRC/input/models/tiny.ini" --out "$WORK/wrong.bin.h5"
head -c 2000 "$DATA" > "$WORK/notllmc.bin"
expect_refusal "import-llmc of a file that is not llm.c's" "magic" \
    $PY "$TOOL" import-llmc "$WORK/notllmc.bin" --model "$TIED" --out "$WORK/wrong2.h5"
$PY -c "
from safetensors.numpy import load_file, save_file
t = load_file('$WORK/thf/model.safetensors'); t['lm_head.weight'] = t['transformer.wte.weight'] * 2
save_file(t, '$WORK/untied_head.safetensors')"
expect_refusal "import-hf of an untied head into a tied model" "differs from transformer.wte.weight" \
    $PY "$TOOL" import-hf "$WORK/untied_head.safetensors" --model "$TIED" --out "$WORK/wrong3.h5"
printf '[model]\nn_layer = 2\nn_head = 2\nwidths = 32, 64\nvocab = 256\nctx = 32\ntied_head = true\n' > "$WORK/tied_ic.ini"
expect_refusal "a tied head whose width differs from the embedding's" "tied_head = true needs the embedding width" \
    $MPIEXEC -n 2 "$BIN" train --model "$WORK/tied_ic.ini" --steps 1
printf 'embed = zdp\ndefault = dp\n' > "$WORK/tied_bad.plan"
expect_refusal "a plan file with a ZDP embedding under a tied head" "embed must be dp" \
    $MPIEXEC -n 2 "$BIN" train --model "$TIED" --steps 1 --plan "$WORK/tied_bad.plan"
# (a tied head under a pipeline, --pp > 1, is refused by the schedule: tests/runtime/test_schedule.c)

summary test_interop

#!/bin/bash
# Hugging Face transformers, the real client (issue 29): a directory that scripts/osdp_weights.py
# export-hf writes loads with AutoModelForCausalLM.from_pretrained(DIR) and AutoTokenizer.from_pretrained(DIR);
# for an untied and a tied (tied_head = true) model its loss on a validation batch is osdp eval's within
# 1e-5, its logits an independent numpy forward's within 1e-5, its greedy generation osdp_gpt sample
# --temperature 0's text; the byte tokenizer encodes text as osdp reads it, and a byte-level BPE token
# table (llm.c's format, as prepare_data.py writes) becomes a tokenizer that encodes by its merges.
# SKIPs where transformers and torch are not installed (CI does not install torch).
. "$(dirname "$0")/../lib/test_lib.sh" hf-work
PY=${PYTHON:-python3}
TOOL="$SRC/scripts/osdp_weights.py"
require_python "transformers and torch beside numpy, h5py and safetensors" numpy h5py safetensors transformers torch
VAL="$WORK/val.txt"
tail -c 20000 "$DATA" > "$VAL"
PROMPT="761+7"

# check_model NAME MODEL.ini: train, export, and compare with transformers
check_model() {
    local name=$1 model=$2 ck="$WORK/$1/step_00000080.h5"
    "$MPIEXEC" -n 2 "$BIN" train --model "$model" --steps 80 --plan dp --batch 8 --lr 1e-2 --threads 1 --peak-flops 1e9 \
        --ckpt-dir "$WORK/$name" > "$WORK/$name.train" 2>&1 || { bad "$name: training" "$WORK/$name.train"; return; }
    "$MPIEXEC" -n 2 "$BIN" eval --ckpt "$ck" --val-data "$VAL" --batches 1 --global-batch 4 --batch 2 --plan dp --threads 1 \
        --log "$WORK/$name.eval" > "$WORK/$name.evalout" 2>&1 || { bad "$name: eval" "$WORK/$name.evalout"; return; }
    "$MPIEXEC" -n 1 "$BIN" sample --ckpt "$ck" --prompt "$PROMPT" --tokens 20 --temperature 0 > "$WORK/$name.sample" \
        2> "$WORK/$name.sample.err" || { bad "$name: sample" "$WORK/$name.sample.err"; return; }
    $PY "$TOOL" export-hf "$ck" --out "$WORK/$name.hf" > "$WORK/$name.export" 2>&1 || { bad "$name: export-hf" "$WORK/$name.export"; return; }
    local loss
    loss=$(sed -n 's/.* loss=\([^ ]*\).*/\1/p' "$WORK/$name.eval")
    if $PY - "$WORK/$name.hf" "$ck" "$VAL" "$loss" "$WORK/$name.sample" "$PROMPT" "$TOOL" > "$WORK/$name.cmp" 2>&1 <<'PYEOF'
import importlib.util, sys
import numpy as np, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
hf, ck, val, osdp_loss, sample, prompt, tool = sys.argv[1:]
spec = importlib.util.spec_from_file_location("osdp_weights", tool)
ow = importlib.util.module_from_spec(spec); spec.loader.exec_module(ow)
model = AutoModelForCausalLM.from_pretrained(hf).eval()
tok = AutoTokenizer.from_pretrained(hf)
text = open(val, "rb").read().decode()
ids = tok(text)["input_ids"]
assert ids == list(text.encode()), "the tokenizer's ids are not the bytes"
assert tok.decode(ids[:100]) == text[:100]
# validation batch 0 of global batch 4 (src/cli/validation.c's seed), as osdp eval --batches 1 drew it
T = model.config.n_positions
tokens = np.array(ids)
base = ow.splitmix64(ow.splitmix64(ow.VALIDATION_SEED) ^ 0)
starts = [ow.splitmix64(base ^ j) % (len(tokens) - T) for j in range(4)]
inputs = torch.tensor(np.stack([tokens[s:s + T] for s in starts]))
targets = torch.tensor(np.stack([tokens[s + 1:s + T + 1] for s in starts]))
with torch.no_grad():
    logits = model(inputs).logits
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).item()
assert abs(loss - float(osdp_loss)) <= 1e-5, (loss, osdp_loss)
om, w = ow.read_osdp(ck)
ref = ow.forward_logits(w, om, inputs.numpy())
dlogits = float(np.abs(logits.double().numpy() - ref).max())
assert dlogits <= 1e-5, dlogits
p = tok(prompt, return_tensors="pt")["input_ids"]
with torch.no_grad():
    out = model.generate(p, max_new_tokens=20, do_sample=False, pad_token_id=0)
raw = open(sample, "rb").read()
assert raw.endswith(b"\n")
assert out[0].tolist() == list(raw[:-1]), (out[0].tolist(), list(raw))   # sample prints the prompt, the text, a newline
print(f"loss {loss:.9g} (osdp eval {osdp_loss}, |d| {abs(loss - float(osdp_loss)):.2e}), logits within {dlogits:.1e} "
      f"of numpy's, greedy {tok.decode(out[0][p.shape[1]:])!r} = osdp sample's")
PYEOF
    then ok "$name: from_pretrained(DIR) model and tokenizer: $(tail -1 "$WORK/$name.cmp")"
    else bad "$name: transformers" "$WORK/$name.cmp"; fi
}
check_model untied "$M"
check_model tied "$SRC/tests/inputs/t_tied.ini"
grep -q '"bos_token_id": null' "$WORK/untied.hf/config.json" && grep -q '"eos_token_id": null' "$WORK/untied.hf/config.json" \
    && ok "a byte vocabulary: config.json has no bos/eos id (none exists)" || bad "bos/eos of bytes" "$WORK/untied.hf/config.json"

# a byte-level BPE token table (llm.c's format): the 256 bytes, three merges, an end-of-text token
sed 's/^vocab = 256/vocab = 260/; s/^name = .*/name = t_bpe/' "$M" > "$WORK/t_bpe.ini"
$PY - "$WORK/bpe_tokenizer.bin" <<'PYEOF'
import struct, sys
tokens = [bytes([b]) for b in range(256)] + [b"12", b"34", b"1234", b"<|endoftext|>"]
out = bytearray(struct.pack("<256I", 20240328, 2, len(tokens), 259, *([0] * 252)))
for t in tokens:
    out += bytes([len(t)]) + t
open(sys.argv[1], "wb").write(out)
PYEOF
"$MPIEXEC" -n 1 "$BIN" train --model "$WORK/t_bpe.ini" --steps 1 --plan dp --batch 2 --threads 1 --peak-flops 1e9 \
    --ckpt-dir "$WORK/bpe" > "$WORK/bpe.train" 2>&1 || bad "t_bpe: training" "$WORK/bpe.train"
if $PY "$TOOL" export-hf "$WORK/bpe/step_00000001.h5" --out "$WORK/bpe.hf" --tokenizer "$WORK/bpe_tokenizer.bin" \
       > "$WORK/bpe.export" 2>&1 \
   && $PY - "$WORK/bpe.hf" > "$WORK/bpe.cmp" 2>&1 <<'PYEOF'
import sys
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
ids = tok("1234+12=34")["input_ids"]
assert ids == [258, ord("+"), 256, ord("="), 257], ids
assert tok.eos_token_id == 259 and model.config.eos_token_id == 259 and model.config.bos_token_id == 259
assert tok.decode(ids) == "1234+12=34"
print(f"'1234+12=34' -> {ids}, eos 259")
PYEOF
then ok "a byte-level BPE table: AutoTokenizer encodes by its merges ($(tail -1 "$WORK/bpe.cmp"))"
else bad "BPE tokenizer" "$WORK/bpe.cmp"; cat "$WORK/bpe.export"; fi

summary test_hf

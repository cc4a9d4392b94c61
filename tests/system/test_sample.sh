#!/bin/bash
# Sampling (issue 17 item 2: osdp_gpt sample, train --sample-every, token tables) with the real binary
# on 1, 2 and 4 MPI ranks:
#   - a seed gives the same text on 1, 2 and 4 ranks (the weights are gathered to rank 0, which
#     generates alone), and another seed another text;
#   - greedy decoding (--temperature 0) is the argmax of an independent numpy forward
#     (scripts/osdp_weights.py greedy) for 40 tokens, past the model's context of 32;
#   - a weights file (import-hf) samples as its checkpoint does;
#   - the token table scripts/prepare_data.py writes (llm.c's tokenizer format) decodes, and a
#     vocabulary that is not bytes decodes only with a table (else its ids are printed, and why);
#     GPT-2's table when tiktoken can load its encoding offline;
#   - train --sample-every prints samples and leaves the losses bitwise unchanged (and the measured
#     peak the predicted one: the sampler's buffers are host memory outside the accounting);
#   - bad values are refused with a message naming the option, non-zero exit.
. "$(dirname "$0")/../lib/test_lib.sh" sample-work
PY=${PYTHON:-python3}
TOOL="$SRC/scripts/osdp_weights.py"

# data the test writes: a byte corpus prepared as llm.c shards and a token table
head -c 40000 "$DATA" > "$WORK/text.txt"
$PY "$SRC/scripts/prepare_data.py" "$WORK/text.txt" --out "$WORK/corpus" > "$WORK/prep.out" 2>&1 \
    || bad "prepare_data --tokenizer bytes" "$WORK/prep.out"
TABLE="$WORK/corpus/corpus_tokenizer.bin"

train() {   # train NAME [options...]: 2 ranks, 8 steps on the corpus; $WORK/NAME.{out,err,log}
    local name=$1; shift
    "$MPIEXEC" -n 2 "$BIN" train --model "$M" --data "$WORK/corpus" --steps 8 --plan dp --batch 4 --threads 1 \
        --peak-flops 1e9 --log "$WORK/$name.log" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
}
sample() {   # sample NRANKS NAME [options...]: stdout to $WORK/NAME.txt, stderr to NAME.err
    local n=$1 name=$2; shift 2
    "$MPIEXEC" -n "$n" "$BIN" sample "$@" > "$WORK/$name.txt" 2> "$WORK/$name.err"
}

# 1. --sample-every: samples after steps 3, 6 and the last (8), the losses the same bits as without
train plain --ckpt-dir "$WORK/ck" --save-every 4 || bad "training run" "$WORK/plain.err"
train sampled --sample-every 3 --sample-tokens 20 || bad "training with --sample-every" "$WORK/sampled.err"
if [ "$(losses "$WORK/plain.log" | wc -l)" = 8 ] && [ "$(losses "$WORK/plain.log")" = "$(losses "$WORK/sampled.log")" ] \
   && [ "$(field "$WORK/sampled.log" peak_total)" = "$(field "$WORK/sampled.log" pred_total)" ] \
   && [ "$(field "$WORK/sampled.log" val_loss_hex)" = "$(field "$WORK/plain.log" val_loss_hex)" ]; then
    ok "--sample-every 3: the 8 losses and the validation loss bitwise those of the run without it; peak = predicted"
else bad "losses with --sample-every differ" "$WORK/sampled.log"; fi
if [ "$(grep -a '^sample after step' "$WORK/sampled.out" | tr -d ':' | awk '{print $4}' | tr '\n' ' ')" = "3 6 8 " ] \
   && [ "$(grep -a -A1 '^sample after step 6:' "$WORK/sampled.out" | tail -1 | wc -c)" -ge 5 ] \
   && ! grep -aq '^sample after' "$WORK/plain.out"; then
    ok "--sample-every 3 of 8 steps: samples after steps 3, 6 and 8 on rank 0"
else bad "sample lines of --sample-every" "$WORK/sampled.out"; fi

# 2. the same text on 1, 2 and 4 ranks for a seed; another seed, another text
CK="$WORK/ck/step_00000008.h5"
SET=(--ckpt "$CK" --prompt "12+34=" --tokens 50 --temperature 0.8 --top-k 20 --seed 7)
for n in 1 2 4; do sample $n n$n "${SET[@]}" || bad "sample on $n ranks" "$WORK/n$n.err"; done
len=$(wc -c < "$WORK/n1.txt")
if [ "$len" -ge 57 ] && head -c 6 "$WORK/n1.txt" | grep -q '^12+34=$' && cmp -s "$WORK/n1.txt" "$WORK/n2.txt" \
   && cmp -s "$WORK/n1.txt" "$WORK/n4.txt"; then
    ok "seed 7: the same $len bytes on 1, 2 and 4 ranks ($(head -c 40 "$WORK/n1.txt" | tr -c '[:print:]' '.')...)"
else bad "samples across rank counts" "$WORK/n4.err"; fi
sample 1 seed8 "${SET[@]}" --seed 8 || bad "sample --seed 8" "$WORK/seed8.err"
cmp -s "$WORK/n1.txt" "$WORK/seed8.txt" && bad "seeds 7 and 8 gave the same text" || ok "seed 8 gives another text than seed 7"

sample 1 unprompted --ckpt "$CK" --tokens 10 || bad "sample without a prompt" "$WORK/unprompted.err"
[ "$(head -c 1 "$WORK/unprompted.txt" | od -An -tu1 | tr -d ' ')" = 10 ] && [ "$(wc -c < "$WORK/unprompted.txt")" = 12 ] \
    && ok "no prompt: a byte model starts from a newline (printed), then 10 tokens" \
    || bad "unprompted sample" "$WORK/unprompted.err"

# 3. greedy = the argmax of an independent numpy forward, 40 tokens (6 + 40 > ctx 32: the crop too)
sample 1 greedy --ckpt "$WORK/ck/step_00000004.h5" --prompt "12+34=" --tokens 40 --temperature 0 \
    || bad "sample --temperature 0" "$WORK/greedy.err"
mine=$(tail -c +7 "$WORK/greedy.txt" | head -c 40 | od -An -tu1 -v | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
if ! $PY -c 'import numpy, h5py' 2> "$WORK/import.err"; then
    echo "SKIP: greedy against numpy: needs numpy and h5py ($(tail -1 "$WORK/import.err"))"
else
    ref=$($PY "$TOOL" greedy "$WORK/ck/step_00000004.h5" --prompt "12+34=" --tokens 40 2> "$WORK/np.err")
    if [ "$(echo "$ref" | wc -w)" = 40 ] && [ "$mine" = "$ref" ]; then
        ok "--temperature 0: the 40 tokens of numpy's greedy argmax ($(echo "$ref" | cut -d' ' -f1-8) ...)"
    else bad "greedy: osdp '$mine' numpy '$ref'" "$WORK/np.err"; fi
fi

# 4. a weights file (export-hf, import-hf) samples as its checkpoint does
if ! $PY -c 'import numpy, h5py, safetensors' 2> "$WORK/import.err"; then
    echo "SKIP: sampling a weights file: needs numpy, h5py and safetensors ($(tail -1 "$WORK/import.err"))"
else
    $PY "$TOOL" export-hf "$CK" --out "$WORK/hf" > "$WORK/hf.out" 2>&1 &&
    $PY "$TOOL" import-hf "$WORK/hf" --model "$M" --out "$WORK/weights.h5" >> "$WORK/hf.out" 2>&1 \
        || bad "export-hf / import-hf" "$WORK/hf.out"
    sample 1 wfile --ckpt "$WORK/weights.h5" "${SET[@]:2}" || bad "sample a weights file" "$WORK/wfile.err"
    cmp -s "$WORK/n1.txt" "$WORK/wfile.txt" && grep -q 'a weights file' "$WORK/wfile.err" \
        && ok "a weights file (import-hf) gives the checkpoint's text" || bad "weights file sample" "$WORK/wfile.err"
fi

# 5. token tables: prepare_data.py's bytes table decodes as the byte vocabulary does
sample 1 table "${SET[@]}" --tokenizer "$TABLE" || bad "sample --tokenizer (bytes table)" "$WORK/table.err"
cmp -s "$WORK/n1.txt" "$WORK/table.txt" && ok "prepare_data.py's bytes table decodes as bytes do" \
    || bad "bytes table decoding" "$WORK/table.err"

# a vocabulary that is not bytes: 300 tokens (bytes + 44 multi-byte tokens), trained on byte data
sed 's/^vocab *=.*/vocab = 300/; s/^name *=.*/name = t_v300/' "$M" > "$WORK/v300.ini"
"$MPIEXEC" -n 2 "$BIN" train --model "$WORK/v300.ini" --data "$WORK/text.txt" --steps 2 --plan dp --batch 2 --threads 1 \
    --ckpt-dir "$WORK/ck300" --quiet > "$WORK/v300.out" 2>&1 || bad "train the 300-token model" "$WORK/v300.out"
$PY - "$WORK/t300.bin" <<'PYEOF' || bad "write the 300-token table"
import struct, sys
extra = [b"%d" % i for i in range(10, 50)] + [b"+", b"=\n", b"12+", b"\n"]   # ids 256..299; 299 is the end of text
toks = [bytes([i]) for i in range(256)] + extra[:44]
header = [20240328, 2, 300, 299] + [0] * 252
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256I", *header) + b"".join(bytes([len(t)]) + t for t in toks))
PYEOF
CK300="$WORK/ck300/step_00000002.h5"
sample 1 ids300 --ckpt "$CK300" --tokens 12 || bad "sample the 300-token model without a table" "$WORK/ids300.err"
if [ "$(wc -w < "$WORK/ids300.txt")" = 13 ] && [ "$(cut -d' ' -f1 "$WORK/ids300.txt")" = 299 ] \
   && grep -q 'no --tokenizer for a vocabulary of 300 tokens (not bytes): printing token ids' "$WORK/ids300.err"; then
    ok "no table for a 300-token vocabulary: 13 ids printed (start 299), and why ($(head -c 40 "$WORK/ids300.txt")...)"
else bad "ids without a table" "$WORK/ids300.err"; fi
# greedy longest match cuts "12+34=" as 12+ | 34 | = (ids 298, 280, 61): the same continuation as those
# ids given with --prompt-ids (printed as ids: no table), and the text is the table's bytes of them
sample 1 text300 --ckpt "$CK300" --tokens 12 --tokenizer "$WORK/t300.bin" --prompt "12+34=" --temperature 0 \
    || bad "sample the 300-token model with its table" "$WORK/text300.err"
sample 1 enc300 --ckpt "$CK300" --tokens 12 --prompt-ids 298,280,61 --temperature 0 \
    || bad "the same prompt as ids" "$WORK/enc300.err"
if $PY - "$WORK/t300.bin" "$WORK/text300.txt" "$WORK/enc300.txt" > "$WORK/dec300.out" 2>&1 <<'PYEOF'
import sys
raw = open(sys.argv[1], "rb").read()
toks, at = [], 1024
while at < len(raw):
    toks.append(raw[at + 1:at + 1 + raw[at]])
    at += 1 + raw[at]
ids = [int(t) for t in open(sys.argv[3]).read().split()]
assert ids[:3] == [298, 280, 61] and len(ids) == 15, ids
text = open(sys.argv[2], "rb").read()
assert text == b"12+34=" + b"".join(toks[i] for i in ids[3:]) + b"\n", (text, ids)
print(ids[3:])
PYEOF
then ok "a 300-token table: --prompt cut by longest match (298,280,61), the ids decoded to its bytes ($(cat "$WORK/dec300.out"))"
else bad "the 300-token table's encoding and decoding" "$WORK/dec300.out"; fi

# GPT-2's table from prepare_data.py, when tiktoken loads its encoding offline
if $PY -c 'import tiktoken; tiktoken.get_encoding("gpt2")' > "$WORK/tiktoken.err" 2>&1; then
    $PY "$SRC/scripts/prepare_data.py" "$WORK/text.txt" --out "$WORK/gpt2" --tokenizer gpt2 > "$WORK/prep2.out" 2>&1 \
        || bad "prepare_data --tokenizer gpt2" "$WORK/prep2.out"
    sed 's/^vocab *=.*/vocab = 50257/; s/^name *=.*/name = t_gpt2/' "$M" > "$WORK/gpt2.ini"
    "$MPIEXEC" -n 2 "$BIN" train --model "$WORK/gpt2.ini" --data "$WORK/gpt2" --steps 1 --plan dp --batch 2 --threads 1 \
        --ckpt-dir "$WORK/ckg" --quiet > "$WORK/gpt2.out" 2>&1 || bad "train a GPT-2-vocabulary model" "$WORK/gpt2.out"
    sample 2 gpt2 --ckpt "$WORK/ckg/step_00000001.h5" --tokenizer "$WORK/gpt2/corpus_tokenizer.bin" --prompt "Hello" \
        --tokens 8 || bad "sample with GPT-2's table" "$WORK/gpt2.err"
    head -c 5 "$WORK/gpt2.txt" | grep -q '^Hello$' && ok "GPT-2's table (prepare_data.py, tiktoken) encodes and decodes" \
        || bad "GPT-2 table sample" "$WORK/gpt2.err"
else
    echo "SKIP: GPT-2's table: tiktoken cannot load the gpt2 encoding offline ($(tail -1 "$WORK/tiktoken.err"))"
fi

# 6. bad values: a message naming the option, non-zero exit on every rank
printf 'not an HDF5 file\n' > "$WORK/corrupt.h5"
head -c 1200 "$TABLE" > "$WORK/short_table.bin"
refused() {   # refused NAME TEXT [sample options...]
    local name=$1 text=$2; shift 2
    if sample 2 "$name" "$@"; then bad "$name: accepted"; return; fi
    grep -q -- "$text" "$WORK/$name.err" && ok "refused: $* ($(grep -m1 -o -- "$text.*" "$WORK/$name.err" | cut -c1-90))" \
        || bad "$name: message does not name $text" "$WORK/$name.err"
}
refused no_ckpt "--ckpt FILE is required" --tokens 5
refused missing_ckpt "--ckpt: checkpoint $WORK/none.h5: cannot open" --ckpt "$WORK/none.h5"
refused corrupt_ckpt "--ckpt: checkpoint $WORK/corrupt.h5: not an HDF5 file" --ckpt "$WORK/corrupt.h5"
refused tokens0 "--tokens '0'" --ckpt "$CK" --tokens 0
refused tokens_huge "--tokens '100000'" --ckpt "$CK" --tokens 100000
refused temperature "--temperature '-1'" --ckpt "$CK" --temperature -1
refused topk0 "--top-k '0'" --ckpt "$CK" --top-k 0
refused topk_vocab "--top-k 257: above the model's vocabulary of 256" --ckpt "$CK" --top-k 257
refused table_vocab "--tokenizer $WORK/t300.bin: a vocabulary of 300 tokens, the model's is 256" --ckpt "$CK" \
    --tokenizer "$WORK/t300.bin"
refused table_short "--tokenizer $WORK/short_table.bin: truncated" --ckpt "$CK" --tokenizer "$WORK/short_table.bin"
refused table_missing "--tokenizer $WORK/none.bin: cannot open" --ckpt "$CK" --tokenizer "$WORK/none.bin"
refused prompt_id "--prompt-ids: token 256 is outside the model's vocabulary of 256" --ckpt "$CK" --prompt-ids 10,256
refused prompt_ids_text "--prompt-ids 'a,b'" --ckpt "$CK" --prompt-ids a,b
refused prompt_300 "--prompt: the model's vocabulary of 300 tokens is not bytes" --ckpt "$CK300" --prompt "12"
refused both_prompts "--prompt and --prompt-ids exclude each other" --ckpt "$CK" --prompt 1 --prompt-ids 1
train_refused() {   # train_refused NAME TEXT [train options...]
    local name=$1 text=$2; shift 2
    if train "$name" --steps 1 "$@"; then bad "$name: accepted"; return; fi
    grep -q -- "$text" "$WORK/$name.err" && ok "refused: train $* ($(grep -m1 -o -- "$text.*" "$WORK/$name.err" | cut -c1-80))" \
        || bad "$name: message does not name $text" "$WORK/$name.err"
}
train_refused every_abc "--sample-every 'abc'" --sample-every abc
train_refused every0 "--sample-every '0'" --sample-every 0
train_refused stokens0 "--sample-tokens '0'" --sample-every 2 --sample-tokens 0
train_refused stokens_alone "--sample-tokens needs --sample-every" --sample-tokens 10
train_refused train_table "--tokenizer $WORK/t300.bin: a vocabulary of 300 tokens" --sample-every 2 --tokenizer "$WORK/t300.bin"

summary test_sample

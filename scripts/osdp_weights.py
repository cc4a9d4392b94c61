#!/usr/bin/env python3
"""Move osdp weights to and from Hugging Face GPT-2 safetensors, and check them with an
independent numpy forward.

    scripts/osdp_weights.py export-hf CKPT --out DIR [--tokenizer NAME_tokenizer.bin]
    scripts/osdp_weights.py import-hf DIR|MODEL.safetensors --model MODEL.ini --out WEIGHTS.h5
    scripts/osdp_weights.py export-llmc CKPT --out MODEL.bin
    scripts/osdp_weights.py import-llmc MODEL.bin --model MODEL.ini --out WEIGHTS.h5
    scripts/osdp_weights.py loss WEIGHTS --data FILE|DIR (--step S | --eval-batches K | --sweep) --global-batch G
                            [--seed N] [--seq-len T]
    scripts/osdp_weights.py greedy WEIGHTS (--prompt TEXT | --prompt-ids 1,2,3) --tokens N

export-hf  reads the /model group of an osdp checkpoint (doc/checkpoint-format.md) and writes the
           directory that transformers' from_pretrained(DIR) loads: model.safetensors, its tensors
           under `GPT2LMHeadModel` names (transformer.wte.weight, transformer.h.0.attn.c_attn.weight,
           ..., lm_head.weight), and config.json.  GPT-2's Conv1D layers store (in, out) as osdp
           does, so only lm_head (nn.Linear, (V, d)) is transposed.  A tied model (tied_head = true)
           has no lm_head.weight: the file omits it, as GPT-2's own model.safetensors does, and
           config.json says tie_word_embeddings true (transformers then ties lm_head to wte when it
           loads); an untied one says false.  With a token table (--tokenizer, the NAME_tokenizer.bin
           that scripts/prepare_data.py wrote beside the shards; a vocabulary of 256 without one:
           bytes, as osdp reads text) the directory also gets the tokenizer AutoTokenizer loads:
           vocab.json and merges.txt of GPT-2's byte-level BPE (the bytes: the 256 byte tokens and
           no merge; GPT-2's: its 50257 tokens and the merges that rebuild them, derived from the
           table), tokenizer_config.json and special_tokens_map.json; config.json's bos_token_id and
           eos_token_id are the table's end-of-text token, or null (bytes have none).  --out names
           a directory (created; a file name such as x.safetensors is refused, and so is a
           directory that already holds one of the files).  Models whose blocks change width
           (the I&C family) have no GPT-2 equivalent.
import-hf  writes an osdp weights file: the /model group of a checkpoint (every dataset with
           its osdp-sum64-v1 checksum and op_offset) and the root attributes that describe the
           model (doc/checkpoint-format.md, "Weights files"); `osdp_gpt train --init-from` loads it.
           The model file says which model the tensors must make; every shape is checked.  A file
           without lm_head.weight (a tied GPT-2) goes into a tied model exactly, or into an untied
           one with lm_head = wte^T (a copy, trained apart from then on); a file whose lm_head.weight
           differs from wte does not go into a tied model.  The source is a directory (its
           model.safetensors and config.json, as from_pretrained reads them) or a .safetensors file
           (with the config.json beside it, when there is one).  The config's settings are what
           transformers computes with (GPT2Config's defaults for the keys it leaves out): each one
           osdp's model does not compute the same way is refused, naming it, and nothing is
           written: model_type, n_layer, n_head, n_embd, vocab_size, n_positions and n_ctx against
           the model file; n_inner (4 n_embd), activation_function (gelu_new or gelu_pytorch_tanh:
           the tanh GELU), layer_norm_epsilon (1e-5), scale_attn_weights (true),
           scale_attn_by_inverse_layer_idx (false), position_embedding_type (absolute),
           add_cross_attention (false).  reorder_and_upcast_attn is accepted: in float32 it orders
           the same products differently, not another function.  tie_word_embeddings (default
           true) maps: transformers then uses wte as the head whatever lm_head.weight holds, so an
           untied model gets lm_head = wte^T; false without lm_head.weight is refused.
export-llmc  writes llm.c's model file (gpt2_124M.bin's format, version 3): a header of 256
           int32 (magic 20240326, version 3, maxT, V, L, NH, C, Vp), then the 16 parameter tensors
           of llm.c's train_gpt2.c (gpt2_build_from_checkpoint, fill_in_parameter_sizes), fp32,
           layers stacked, linear weights in nn.Linear's (out, in) order, wte padded with zero rows
           to Vp (V rounded up to a multiple of 128).  Only models llm.c can express export: a tied
           head and one width for every block.
import-llmc  reads such a file into an osdp weights file for a model file whose sizes match its
           header (wte's padding rows dropped); into an untied model lm_head = wte^T, as import-hf.
loss       the mean token loss of a weights source (an osdp checkpoint / weights file, or a
           .safetensors file) on the global batch of data step S, with the batch drawn as
           osdp_gpt draws it (include/osdp/data.h) from the data as osdp_gpt train --data reads it
           (an llm.c .bin shard, header checked; a directory's shards but *_val_* and token tables,
           in name order; any other file as bytes): a forward in numpy that shares no code with
           osdp, to check exported weights and osdp's loss.  --eval-batches K instead: the mean over
           train's validation set, batches 0 .. K-1 of its own seed, from the data as osdp_gpt eval
           --data reads it (a directory's *_val_*.bin shards when it has them): train's val_loss.  --sweep
           instead: every sequence of that data once, in order, in whole global batches (sequence j
           starts at token j T): what osdp_gpt eval without --batches computes.
greedy     the N tokens that greedy decoding (the argmax of the logits, the sequence cropped to
           the model's last ctx tokens, positions from 0) appends to the prompt (bytes of the
           UTF-8 text, or ids), with the same numpy forward: the reference of
           `osdp_gpt sample --temperature 0`.  Prints the ids, space-separated.

Needs numpy, h5py and safetensors (pip install numpy h5py safetensors).
"""
import argparse
import configparser
import json
import os
import sys

try:
    import numpy as np
    import h5py
    from safetensors.numpy import load_file, save_file
except ImportError as e:
    print(f"osdp_weights: error: needs the Python packages numpy, h5py and safetensors ({e})", file=sys.stderr)
    sys.exit(3)

M64 = (1 << 64) - 1
FNV_OFFSET, FNV_PRIME = 1469598103934665603, 1099511628211
TIED_HASH_WORD = 0x7469656455   # what osdp_model_config_hash() mixes in for tied_head = true


def fail(msg, code=2):
    print(f"osdp_weights: error: {msg}", file=sys.stderr)
    sys.exit(code)


def read_headed(path, name, header):
    """The bytes of a file of llm.c's that starts with a 1024-byte header (a model, a token table, a data
    shard); name and header say what it is in a refusal."""
    try:
        raw = open(path, "rb").read()
    except OSError as e:
        fail(f"{name}: {e.strerror}")
    if len(raw) < 1024:
        fail(f"{name}: file is {len(raw)} bytes, shorter than {header}")
    return raw


# ---- the model description -----------------------------------------------------------------

class Model:
    """The [model] section of an osdp model file (input/models/*.ini)."""

    def __init__(self, text, where):
        cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), comment_prefixes=(";", "#"))
        try:
            cp.read_string(text)
            sec = cp["model"]
            self.name = sec.get("name", "model")
            self.n_layer, self.n_head = int(sec["n_layer"]), int(sec["n_head"])
            self.n_embd, self.vocab, self.ctx = int(sec["n_embd"]), int(sec["vocab"]), int(sec["ctx"])
            widths = sec.get("widths", "").replace(",", " ").split()
            tied = sec.get("tied_head", "false")
            if tied not in ("true", "false"):
                raise ValueError(f"tied_head = '{tied}' is not true or false")
            self.tied = tied == "true"
        except (configparser.Error, KeyError, ValueError) as e:
            fail(f"{where}: not an osdp model description ({type(e).__name__}: {e})")
        self.widths = [int(w) for w in widths] if widths else [self.n_embd] * self.n_layer
        self.text = text
        self.check(where)

    def check(self, where):
        """The rules osdp_gpt's model reader applies (src/model/model_config.c): a file it would refuse is
        refused here too, before anything is written from it."""
        for key, value, lo, hi in [("n_layer", self.n_layer, 1, 1024), ("n_head", self.n_head, 1, 4096),
                                   ("n_embd", self.n_embd, 1, 1 << 20), ("vocab", self.vocab, 2, 65536),
                                   ("ctx", self.ctx, 1, 1 << 20)]:
            if not lo <= value <= hi:
                fail(f"{where}: {key} = {value} is not an integer in [{lo}, {hi}]")
        if len(self.widths) != self.n_layer:
            fail(f"{where}: widths lists {len(self.widths)} values, n_layer is {self.n_layer}")
        for i, w in enumerate(self.widths):
            if w < 1 or w % self.n_head:
                fail(f"{where}: n_head = {self.n_head} does not divide the width {w} of block {i}")
        if self.tied and self.widths[-1] != self.widths[0]:
            fail(f"{where}: tied_head = true needs the embedding width (block 0: {self.widths[0]}) to equal the "
                 f"last block's (block {self.n_layer - 1}: {self.widths[-1]})")

    def uniform(self):
        return all(w == self.n_embd for w in self.widths)

    def hash(self):
        """osdp_model_config_hash(): FNV-1a-style over (n_layer, n_head, n_embd, vocab, ctx, widths), then
        a constant when the head is tied."""
        h = FNV_OFFSET
        for v in [self.n_layer, self.n_head, self.n_embd, self.vocab, self.ctx] + self.widths:
            h = ((h ^ (v & 0xffffffff)) * FNV_PRIME) & M64
        if self.tied:
            h = ((h ^ TIED_HASH_WORD) * FNV_PRIME) & M64
        return h

    def tensors(self):
        """(operator, tensor, shape) in flat-buffer order: the size table of doc/checkpoint-format.md."""
        if not self.uniform():
            fail(f"model {self.name}: blocks of different widths have no GPT-2 equivalent")
        d, V, T = self.n_embd, self.vocab, self.ctx
        out = [("embed", "wte", (V, d)), ("embed", "wpe", (T, d))]
        for i in range(self.n_layer):
            a, m = f"attn.{i}", f"mlp.{i}"
            out += [(a, "ln_1.weight", (d,)), (a, "ln_1.bias", (d,)), (a, "qkv.weight", (d, 3 * d)),
                    (a, "qkv.bias", (3 * d,)), (a, "proj.weight", (d, d)), (a, "proj.bias", (d,)),
                    (m, "ln_2.weight", (d,)), (m, "ln_2.bias", (d,)), (m, "fc.weight", (d, 4 * d)),
                    (m, "fc.bias", (4 * d,)), (m, "proj.weight", (4 * d, d)), (m, "proj.bias", (d,))]
        out += [("head", "ln_f.weight", (d,)), ("head", "ln_f.bias", (d,))]
        return out + ([] if self.tied else [("head", "lm_head.weight", (d, V))])


def hf_name(op, tensor):
    """GPT2LMHeadModel's name for an osdp tensor, and whether its layout is transposed."""
    if op == "embed":
        return f"transformer.{tensor}.weight", False
    if op == "head":
        return ("lm_head.weight", True) if tensor == "lm_head.weight" else (f"transformer.{tensor}", False)
    kind, i = op.split(".")
    part, param = tensor.rsplit(".", 1)
    module = {("attn", "ln_1"): "ln_1", ("attn", "qkv"): "attn.c_attn", ("attn", "proj"): "attn.c_proj",
              ("mlp", "ln_2"): "ln_2", ("mlp", "fc"): "mlp.c_fc", ("mlp", "proj"): "mlp.c_proj"}[(kind, part)]
    return f"transformer.h.{i}.{module}.{param}", False


# ---- osdp files ------------------------------------------------------------------------------

def fmix64(x):
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xff51afd7ed558ccd)
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xc4ceb9fe1a85ec53)
    return x ^ (x >> np.uint64(33))


def sum64(w):
    """osdp-sum64-v1 of one tensor (doc/checkpoint-format.md)."""
    with np.errstate(over="ignore"):
        bits = np.ascontiguousarray(w, dtype=np.float32).ravel().view(np.uint32).astype(np.uint64)
        idx = np.arange(bits.size, dtype=np.uint64)
        return int(fmix64(fmix64(idx) ^ bits).sum(dtype=np.uint64))


def read_osdp(path):
    """(Model, {(op, tensor): array}) of an osdp checkpoint or weights file, checksums verified."""
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        fail(f"{path}: not an HDF5 file osdp wrote ({e})")
    with f:
        if f.attrs.get("format") not in (b"osdp-checkpoint", "osdp-checkpoint"):
            fail(f"{path}: attribute format is not 'osdp-checkpoint'")
        text = f.attrs["model_description"]
        model = Model(text.decode() if isinstance(text, bytes) else text, f"{path}: model_description")
        tensors = {}
        for op, tensor, shape in model.tensors():
            name = f"model/{op}/{tensor}"
            if name not in f:
                fail(f"{path}: dataset /{name} is missing")
            ds = f[name]
            if ds.shape != shape or ds.dtype != np.float32:
                fail(f"{path}: dataset /{name} is {ds.dtype}{ds.shape}, expected float32{shape}")
            w = ds[...]
            if sum64(w) != int(ds.attrs["checksum"]):
                fail(f"{path}: dataset /{name}: checksum mismatch (corrupt file?)")
            tensors[(op, tensor)] = w
    return model, tensors


FNV64_OFFSET = 14695981039346656037
H5T_CLASS = {h5py.h5t.INTEGER: 0, h5py.h5t.FLOAT: 1, h5py.h5t.STRING: 3}   # H5T_class_t's values


def fnv1a(h, data):
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & M64
    return h


def fmix64_int(x):
    x ^= x >> 33
    x = (x * 0xff51afd7ed558ccd) & M64
    x ^= x >> 33
    x = (x * 0xc4ceb9fe1a85ec53) & M64
    return x ^ (x >> 33)


def metadata_manifest(f):
    """The root attribute metadata_manifest of doc/checkpoint-format.md ("Metadata checksum"): one line per
    root attribute in name order, "NAME DIGEST", then /optim's as "/optim/NAME DIGEST", then "manifest DIGEST"
    over those lines."""
    lines = []
    groups = [(f, b"")] + ([(f["optim"], b"/optim/")] if "optim" in f else [])
    for obj, name in ((g, n) for g, prefix in groups for n in sorted(k.encode() for k in g.attrs.keys())):
        if name == b"metadata_manifest":
            continue
        prefix = b"" if obj is f else b"/optim/"
        attr = h5py.h5a.open(obj.id, name)
        ftype, npoints = attr.get_type(), attr.get_space().get_simple_extent_npoints()
        h = fnv1a(FNV64_OFFSET, name + b"\0")
        h = fnv1a(h, H5T_CLASS[ftype.get_class()].to_bytes(4, "little"))
        h = fnv1a(h, npoints.to_bytes(8, "little", signed=True))
        if isinstance(ftype, h5py.h5t.TypeStringID) and ftype.is_variable_str():
            values = obj.attrs[name.decode()]
            for v in (values if isinstance(values, np.ndarray) else [values]):
                h = fnv1a(h, (v.encode() if isinstance(v, str) else bytes(v)) + b"\0")
        else:   # the stored bytes, as H5Aread gives them in the attribute's own type
            raw = np.empty(npoints, dtype=ftype.dtype)
            attr.read(raw, mtype=ftype)
            h = fnv1a(h, raw.tobytes())
        lines.append(b"%s%s %016x\n" % (prefix, name, fmix64_int(h)))
    body = b"".join(lines)
    return body + b"manifest %016x\n" % fmix64_int(fnv1a(FNV64_OFFSET, body))


def write_atomically(path, nbytes, write):
    """write(tmp) makes path's content under path + ".tmp", renamed to path once whole; on any failure the
    temporary is removed and the reason printed in one line (a full disk, a missing directory)."""
    out_dir = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(out_dir):
        fail(f"{path}: the directory {out_dir} does not exist (nothing was written)")
    try:   # a full disk refused before the first byte: h5py's library may crash on one met halfway
        fs = os.statvfs(out_dir)
        if fs.f_bavail * fs.f_frsize < nbytes:
            fail(f"{path}: No space left on device: it needs at least {nbytes / 1e6:.1f} MB, {out_dir} has "
                 f"{fs.f_bavail * fs.f_frsize / 1e6:.1f} MB free (nothing was written)", 3)
    except OSError:
        pass   # unknown: the writes will tell
    tmp = path + ".tmp"
    try:
        write(tmp)
        os.replace(tmp, path)
    except Exception as e:   # OSError, h5py's RuntimeError, safetensors' own error type
        try:
            os.remove(tmp)
        except OSError:
            pass
        fail(f"{path}: cannot write it: {getattr(e, 'strerror', None) or e} (nothing was written)", 3)


def array_bytes(arrays):
    return sum(int(np.asarray(w).nbytes) for w in arrays)


def write_weights(path, model, tensors):
    """An osdp weights file: /model with checksums and op_offsets, and the model's root attributes.  Made in
    memory (HDF5's core driver) and written to disk as one image: HDF5 never meets the disk, whose failures
    (a full disk) crash h5py at close and leave the file behind."""
    image = weights_image(model, tensors)

    def write_image(tmp):
        with open(tmp, "wb") as f:
            f.write(image)
    write_atomically(path, len(image), write_image)


def weights_image(model, tensors):
    with h5py.File("osdp-weights-in-memory.h5", "w", driver="core", backing_store=False) as f:
        str_attr = lambda k, v: f.attrs.create(k, np.bytes_(v.encode()))
        str_attr("format", "osdp-checkpoint")
        f.attrs.create("format_version", np.int64(1))
        str_attr("writer", "osdp_weights.py")
        str_attr("content", "weights")
        str_attr("checksum_algorithm", "osdp-sum64-v1")
        str_attr("model_name", model.name)
        str_attr("model_description", model.text)
        f.attrs.create("model_hash", np.uint64(model.hash()))
        f.attrs.create("total_params", np.int64(sum(int(np.prod(s)) for _, _, s in model.tensors())))
        offset, last_op = 0, None
        for op, tensor, shape in model.tensors():
            if op != last_op:
                offset, last_op = 0, op
            ds = f.create_dataset(f"model/{op}/{tensor}", data=tensors[(op, tensor)], dtype="<f4")
            ds.attrs.create("checksum", np.uint64(sum64(tensors[(op, tensor)])))
            ds.attrs.create("op_offset", np.uint64(offset))
            offset += int(np.prod(shape))
        f.attrs.create("metadata_manifest", np.bytes_(metadata_manifest(f)))
        f.flush()
        return f.id.get_file_image()


# ---- commands -----------------------------------------------------------------------------------

def refuse_existing(path):
    if os.path.lexists(path):
        fail(f"{path} exists: choose another --out (nothing was overwritten)")


HF_FILES = ("model.safetensors", "config.json")


def export_hf(a):
    model, tensors = read_osdp(a.ckpt)
    out_dir = a.out
    if out_dir.endswith((".safetensors", ".json", ".bin", ".h5")) or \
            (os.path.lexists(out_dir) and not os.path.isdir(out_dir)):
        fail(f"--out {out_dir}: export-hf writes a directory (model.safetensors, config.json and the tokenizer) that "
             f"from_pretrained(DIR) loads: give the directory's name (nothing was written)")
    table = read_token_table(a.tokenizer) if a.tokenizer else None
    tokenizer, special, kind = hf_tokenizer_files(model, table, a.tokenizer)
    paths = {name: os.path.join(out_dir, name) for name in HF_FILES + tuple(tokenizer)}
    for path in paths.values():
        refuse_existing(path)
    made_dir = not os.path.isdir(out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        fail(f"--out {out_dir}: cannot make the directory: {e.strerror} (nothing was written)", 3)
    out = {}
    for (op, tensor), w in tensors.items():
        name, transposed = hf_name(op, tensor)
        out[name] = np.ascontiguousarray(w.T if transposed else w)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": model.vocab,
              "n_positions": model.ctx, "n_ctx": model.ctx, "n_embd": model.n_embd, "n_layer": model.n_layer,
              "n_head": model.n_head, "n_inner": 4 * model.n_embd, "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-5, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
              "reorder_and_upcast_attn": False, "tie_word_embeddings": model.tied,
              "bos_token_id": special, "eos_token_id": special, "torch_dtype": "float32"}

    def write_text(text):
        def write(tmp):
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
        return write
    # each file whole or not at all (write_atomically); a failure part-way removes the files written before it
    # and the directory if this call made it: an export is all there or not there
    written = []
    try:
        write_atomically(paths["model.safetensors"], array_bytes(out.values()),
                         lambda tmp: save_file(out, tmp, metadata={"format": "pt"}))
        written.append(paths["model.safetensors"])
        for name, text in [("config.json", json.dumps(config, indent=2))] + list(tokenizer.items()):
            write_atomically(paths[name], len(text.encode()), write_text(text))
            written.append(paths[name])
    except SystemExit:
        for path in written:
            os.remove(path)
        if made_dir:
            os.rmdir(out_dir)
        raise
    print(f"osdp_weights: {out_dir}: {len(out)} tensors of model {model.name}, config.json, {kind}")



# ---- tokenizers -------------------------------------------------------------------------------
# llm.c's token table (doc/tokenizer-format.md, what scripts/prepare_data.py writes as NAME_tokenizer.bin)
# becomes the files of GPT-2's byte-level BPE tokenizer, which transformers' AutoTokenizer loads:
# vocab.json (each token's bytes through GPT-2's byte-to-character map -> id), merges.txt (the pairs
# that build the tokens, in rank order).

TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2


def read_token_table(path):
    """(tokens as bytes by id, end-of-text id) of an llm.c token table, version 2."""
    raw = read_headed(path, f"--tokenizer {path}", "the 1024-byte header of a token table")
    magic, version, vocab, eot = (int(x) for x in np.frombuffer(raw[:16], "<u4"))
    if magic != TOKENIZER_MAGIC or version != TOKENIZER_VERSION:
        fail(f"--tokenizer {path}: magic {magic} version {version}, not llm.c's token table "
             f"({TOKENIZER_MAGIC}, version {TOKENIZER_VERSION})")
    tokens, at = [], 1024
    for i in range(vocab):
        n = raw[at] if at < len(raw) else 0
        if n == 0 or at + 1 + n > len(raw):
            fail(f"--tokenizer {path}: token {i} of {vocab} is cut short")
        tokens.append(raw[at + 1:at + 1 + n])
        at += 1 + n
    if at != len(raw):
        fail(f"--tokenizer {path}: {len(raw) - at} bytes after the last of its {vocab} tokens")
    return tokens, eot


def bytes_to_unicode():
    """GPT-2's map of the 256 bytes to printable characters (the alphabet of vocab.json and merges.txt)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xac + 1)) + list(range(0xae, 0xff + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def bpe_merges(tokens, special, source):
    """The merges that build every multi-byte token of a byte-level BPE table, in rank (id) order: each token
    is cut into single bytes and merged, lowest rank first, with the tokens before it; it must end as one
    pair, which is its merge."""
    rank = {t: i for i, t in enumerate(tokens)}
    merges = []
    for i, tok in enumerate(tokens):
        if len(tok) == 1 or i == special:
            continue
        parts = [tok[k:k + 1] for k in range(len(tok))]
        while len(parts) > 2:
            best = min(range(len(parts) - 1), key=lambda k: rank.get(parts[k] + parts[k + 1], 1 << 62))
            if rank.get(parts[best] + parts[best + 1], 1 << 62) >= i:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        if len(parts) != 2 or rank.get(parts[0], i) >= i or rank.get(parts[1], i) >= i:
            fail(f"--tokenizer {source}: token {i} ({tok!r}) is not the merge of two earlier tokens: not a "
                 f"byte-level BPE table")
        merges.append((parts[0], parts[1]))
    return merges


def hf_tokenizer_files(model, table, source):
    """({file name: text}, the special token's id or None, what it is) of the tokenizer for a model: bytes
    (vocabulary 256 without a table, or a table of the 256 bytes in order) or a byte-level BPE table (GPT-2's)."""
    if table is None and model.vocab != 256:
        return {}, None, "no tokenizer (give --tokenizer NAME_tokenizer.bin)"
    tokens, eot = table if table is not None else ([bytes([b]) for b in range(256)], None)
    if len(tokens) > model.vocab:
        fail(f"--tokenizer {source}: {len(tokens)} tokens, more than model {model.name}'s vocabulary of {model.vocab}")
    is_bytes = tokens == [bytes([b]) for b in range(256)]
    special = None if is_bytes or eot is None or not 0 <= eot < len(tokens) else eot
    if not is_bytes and any(bytes([b]) not in set(tokens) for b in range(256)):
        fail(f"--tokenizer {source}: not every byte is a token: not a byte-level table")
    chars = bytes_to_unicode()
    text = lambda t: "".join(chars[b] for b in t)
    vocab = {text(t) if i != special else t.decode("utf-8", "replace"): i for i, t in enumerate(tokens)}
    merges = [] if is_bytes else bpe_merges(tokens, special, source)
    name = None if special is None else tokens[special].decode("utf-8", "replace")
    config = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": model.ctx, "add_prefix_space": False,
              "add_bos_token": False, "bos_token": name, "eos_token": name, "unk_token": name, "pad_token": None}
    files = {"vocab.json": json.dumps(vocab, ensure_ascii=False),
             "merges.txt": "#version: 0.2\n" + "".join(f"{text(a)} {text(b)}\n" for a, b in merges),
             "tokenizer_config.json": json.dumps(config, indent=2),
             "special_tokens_map.json": json.dumps({} if name is None else
                                                   {"bos_token": name, "eos_token": name, "unk_token": name}, indent=2)}
    return files, special, "tokenizer bytes" if is_bytes else f"tokenizer byte-level BPE ({len(merges)} merges)"


def load_model(path):
    try:
        return Model(open(path).read(), path)
    except OSError as e:
        fail(f"--model {path}: {e.strerror}")


def untie(model, tensors, source):
    """Into an untied model, a tied source's head: lm_head = wte^T (a copy)."""
    if not model.tied and ("head", "lm_head.weight") not in tensors:
        tensors[("head", "lm_head.weight")] = np.ascontiguousarray(tensors[("embed", "wte")].T)
        print(f"osdp_weights: {source} ties its head to wte: lm_head.weight of untied model {model.name} is a copy "
              f"of wte", file=sys.stderr)
    return tensors


def hf_tensors(model, st, source, tie=None):
    """{(op, tensor): array} of model from a GPT2LMHeadModel state dict, shapes and dtypes checked.  tie: the
    config's tie_word_embeddings (None: no config): true makes wte the head whatever lm_head.weight holds,
    as transformers does."""
    tensors = {}
    for op, tensor, shape in model.tensors():
        name, transposed = hf_name(op, tensor)
        if name == "lm_head.weight" and (tie or name not in st):
            if tie is False:
                fail(f"{source}: tensor lm_head.weight is missing and config.json says tie_word_embeddings false")
            continue   # the head is wte: untie() copies it
        if name not in st:
            fail(f"{source}: tensor {name} is missing")
        w = st[name].T if transposed else st[name]
        if w.shape != shape:
            fail(f"{source}: tensor {name} has shape {tuple(st[name].shape)}, model {model.name} needs "
                 f"{tuple(reversed(shape)) if transposed else shape}")
        if w.dtype != np.float32:
            fail(f"{source}: tensor {name} is {w.dtype}: osdp's master weights are float32 (convert first)")
        tensors[(op, tensor)] = np.ascontiguousarray(w)
    layers = {int(k.split(".")[2]) for k in st if k.startswith("transformer.h.") and k.split(".")[2].isdigit()}
    if layers and max(layers) >= model.n_layer:   # the extra blocks would be dropped without a word
        fail(f"{source}: the file has {max(layers) + 1} layers (transformer.h.{max(layers)}.*), model {model.name} "
             f"has n_layer = {model.n_layer}: give the model file of the checkpoint's architecture")
    if model.tied and not tie and "lm_head.weight" in st and \
            not np.array_equal(st["lm_head.weight"], st["transformer.wte.weight"]):
        fail(f"{source}: lm_head.weight differs from transformer.wte.weight: the file's head is untied, the model's "
             f"(tied_head = true) is tied; use a model file without tied_head")
    return untie(model, tensors, source)


# What transformers' GPT2Config takes for a key config.json leaves out
GPT2_DEFAULTS = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
                 "n_head": 12, "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
                 "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
                 "position_embedding_type": "absolute", "add_cross_attention": False, "tie_word_embeddings": True}


def check_hf_config(path, model):
    """The config's tie_word_embeddings, after refusing every setting osdp's model computes otherwise."""
    try:
        with open(path) as f:
            c = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: not a readable JSON config ({e})")
    if not isinstance(c, dict):
        fail(f"{path}: not a JSON object")
    get = lambda key: c.get(key, GPT2_DEFAULTS[key])
    d = model.n_embd
    wanted = [("model_type", lambda v: v == "gpt2", "GPT-2's (gpt2)"),
              ("n_layer", lambda v: v == model.n_layer, f"{model.n_layer} (model {model.name})"),
              ("n_head", lambda v: v == model.n_head, f"{model.n_head} (model {model.name})"),
              ("n_embd", lambda v: v == d, f"{d} (model {model.name})"),
              ("vocab_size", lambda v: v == model.vocab, f"{model.vocab} (model {model.name})"),
              ("n_positions", lambda v: v == model.ctx, f"{model.ctx}, the ctx of model {model.name}"),
              ("n_inner", lambda v: v is None or v == 4 * d, f"4 n_embd = {4 * d} (or null)"),
              ("activation_function", lambda v: v in ("gelu_new", "gelu_pytorch_tanh"),
               "the tanh GELU (gelu_new or gelu_pytorch_tanh)"),
              ("layer_norm_epsilon", lambda v: v == 1e-5, "1e-5"),
              ("scale_attn_weights", lambda v: v is True, "true (scores / sqrt(head size))"),
              ("scale_attn_by_inverse_layer_idx", lambda v: v is False, "false (no 1 / (layer + 1) scaling)"),
              ("position_embedding_type", lambda v: v == "absolute", "absolute (learned wpe)"),
              ("add_cross_attention", lambda v: v is False, "false (a decoder alone)")]
    if "n_ctx" in c:
        wanted.append(("n_ctx", lambda v: v == model.ctx, f"{model.ctx}, the ctx of model {model.name}"))
    for key, ok, what in wanted:
        v = c.get(key, GPT2_DEFAULTS.get(key))
        if not ok(v):
            said = "" if key in c else " (GPT2Config's default: config.json leaves it out)"
            fail(f"{path}: {key} = {json.dumps(v)}{said}: osdp's model computes with {what}; nothing was written")
    tie = get("tie_word_embeddings")
    if not isinstance(tie, bool):
        fail(f"{path}: tie_word_embeddings = {json.dumps(tie)}: expected true or false")
    return tie


def hf_source(path):
    """(safetensors file, config.json or None) of an import-hf source: a from_pretrained directory or a file."""
    if os.path.isdir(path):
        st = os.path.join(path, "model.safetensors")
        if not os.path.isfile(st):
            other = [n for n in ("model.safetensors.index.json", "pytorch_model.bin")
                     if os.path.exists(os.path.join(path, n))]
            fail(f"{path}: no model.safetensors" + (f" ({other[0]} is not read: save_pretrained(DIR, "
                 f"safe_serialization=True, max_shard_size='100GB') writes one file)" if other else ""))
    elif os.path.isfile(path):
        st = path
    else:
        fail(f"{path}: no such file or directory")
    config = os.path.join(os.path.dirname(os.path.abspath(st)), "config.json")
    return st, config if os.path.isfile(config) else None


def load_hf(model, path):
    """{(op, tensor): array} of model from an HF source, its config.json (when there is one) checked."""
    st_path, config = hf_source(path)
    tie = check_hf_config(config, model) if config else None
    try:
        st = load_file(st_path)
    except Exception as e:
        fail(f"{st_path}: not a safetensors file ({e})")
    return hf_tensors(model, st, st_path, tie)


def import_hf(a):
    model = load_model(a.model)
    refuse_existing(a.out)
    write_weights(a.out, model, load_hf(model, a.hf))
    print(f"osdp_weights: {a.out}: weights of model {model.name} from {a.hf}")


# ---- llm.c's model file -------------------------------------------------------------------------
# The format llm.c's train_gpt2.c reads (gpt2_build_from_checkpoint: a header of 256 int32, magic
# 20240326, version 3, then maxT, V, L, NH, C, Vp; fill_in_parameter_sizes: the 16 tensors below,
# in this order, each block's tensors stacked over the L layers), written from PyTorch's GPT-2
# whose nn.Linear weights are (out, in): osdp's (in, out) transposed.

LLMC_MAGIC, LLMC_VERSION, LLMC_VOCAB_MULTIPLE = 20240326, 3, 128
# per block, in file order: (operator kind, osdp tensor, transposed in the file)
LLMC_BLOCK_TENSORS = [("attn", "ln_1.weight", False), ("attn", "ln_1.bias", False), ("attn", "qkv.weight", True),
                      ("attn", "qkv.bias", False), ("attn", "proj.weight", True), ("attn", "proj.bias", False),
                      ("mlp", "ln_2.weight", False), ("mlp", "ln_2.bias", False), ("mlp", "fc.weight", True),
                      ("mlp", "fc.bias", False), ("mlp", "proj.weight", True), ("mlp", "proj.bias", False)]


def llmc_check(model, source):
    if not model.tied:
        fail(f"{source}: llm.c's GPT-2 ties its head to wte and model {model.name} does not (give its model file "
             f"tied_head = true and train that)")
    if not model.uniform():
        fail(f"{source}: llm.c's GPT-2 has one width for every block; model {model.name} has {model.widths}")


def llmc_layout(model):
    """(file shape, osdp shape of one block's tensor or None) of the 16 arrays, in file order."""
    V, d, L, T = model.vocab, model.n_embd, model.n_layer, model.ctx
    Vp = (V + LLMC_VOCAB_MULTIPLE - 1) // LLMC_VOCAB_MULTIPLE * LLMC_VOCAB_MULTIPLE
    shapes = {(op.split(".")[0], t): s for op, t, s in model.tensors() if op in ("attn.0", "mlp.0")}
    out = [((Vp, d), None), ((T, d), None)]
    for kind, tensor, transposed in LLMC_BLOCK_TENSORS:
        s = shapes[(kind, tensor)]
        out.append(((L,) + (tuple(reversed(s)) if transposed else s), s))
    return Vp, out + [((d,), None), ((d,), None)]


def export_llmc(a):
    model, w = read_osdp(a.ckpt)
    llmc_check(model, a.ckpt)
    refuse_existing(a.out)
    Vp, layout = llmc_layout(model)
    wte = np.zeros((Vp, model.n_embd), dtype=np.float32)   # llm.c's padding rows are zeros
    wte[:model.vocab] = w[("embed", "wte")]
    arrays = [wte, w[("embed", "wpe")]]
    for kind, tensor, transposed in LLMC_BLOCK_TENSORS:
        blocks = [w[(f"{kind}.{i}", tensor)] for i in range(model.n_layer)]
        arrays.append(np.stack([b.T if transposed else b for b in blocks]))
    arrays += [w[("head", "ln_f.weight")], w[("head", "ln_f.bias")]]
    header = np.zeros(256, dtype="<i4")
    header[:8] = [LLMC_MAGIC, LLMC_VERSION, model.ctx, model.vocab, model.n_layer, model.n_head, model.n_embd, Vp]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    for arr, (shape, _) in zip(arrays, layout):
        assert arr.shape == shape, (arr.shape, shape)

    def write_llmc(tmp):
        with open(tmp, "wb") as f:
            f.write(header.tobytes())
            for arr in arrays:
                f.write(np.ascontiguousarray(arr, dtype="<f4").tobytes())
    write_atomically(a.out, header.nbytes + array_bytes(arrays), write_llmc)
    print(f"osdp_weights: {a.out}: llm.c model file (version {LLMC_VERSION}, Vp {Vp}) of model {model.name}")


def llmc_tensors(model, path):
    """{(op, tensor): array} of model from llm.c's model file at path, its header checked against model."""
    data = read_headed(path, path, "llm.c's 1024-byte header")
    header = np.frombuffer(data[:1024], dtype="<i4")
    if header[0] != LLMC_MAGIC:
        fail(f"{path}: magic {header[0]}, not llm.c's model file ({LLMC_MAGIC})")
    if header[1] != LLMC_VERSION:
        fail(f"{path}: version {header[1]}: only llm.c's version {LLMC_VERSION} (with the padded vocabulary) is read")
    Vp, layout = llmc_layout(model)
    for k, (what, mine) in enumerate([("maxT (ctx)", model.ctx), ("V (vocab)", model.vocab),
                                      ("L (n_layer)", model.n_layer), ("NH (n_head)", model.n_head),
                                      ("C (n_embd)", model.n_embd), ("Vp (padded vocab)", Vp)]):
        if header[2 + k] != mine:
            fail(f"{path}: header {what} is {header[2 + k]}, model {model.name} has {mine}")
    need = sum(int(np.prod(shape)) for shape, _ in layout)
    if len(data) - 1024 != 4 * need:   # before the bytes are read as floats: a byte short is no whole float
        fail(f"{path}: {len(data) - 1024} bytes of parameters, the header's sizes need {4 * need} (a truncated or "
             f"padded file)")
    floats = np.frombuffer(data[1024:], dtype="<f4")
    arrays, at = [], 0
    for shape, _ in layout:
        n = int(np.prod(shape))
        arrays.append(floats[at:at + n].reshape(shape))
        at += n
    tensors = {("embed", "wte"): arrays[0][:model.vocab], ("embed", "wpe"): arrays[1],
               ("head", "ln_f.weight"): arrays[-2], ("head", "ln_f.bias"): arrays[-1]}
    for (kind, tensor, transposed), stacked in zip(LLMC_BLOCK_TENSORS, arrays[2:-2]):
        for i in range(model.n_layer):
            tensors[(f"{kind}.{i}", tensor)] = stacked[i].T if transposed else stacked[i]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}


def import_llmc(a):
    model = load_model(a.model)
    refuse_existing(a.out)
    write_weights(a.out, model, untie(model, llmc_tensors(model, a.llmc), a.llmc))
    print(f"osdp_weights: {a.out}: weights of model {model.name} from {a.llmc}")


def splitmix64(x):
    x = (x + 0x9e3779b97f4a7c15) & M64
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M64
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M64
    return x ^ (x >> 31)


def forward_logits(w, model, inputs):
    """GPT-2 forward (pre-LN blocks, tanh GELU, causal attention) in float64: logits (B, T, V)."""
    d, H = model.n_embd, model.n_head
    B, T = inputs.shape
    g = lambda op, t: w[(op, t)].astype(np.float64)

    def layernorm(x, op, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * g(op, f"{name}.weight") + g(op, f"{name}.bias")

    x = g("embed", "wte")[inputs] + g("embed", "wpe")[:T]
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    for i in range(model.n_layer):
        a, m = f"attn.{i}", f"mlp.{i}"
        qkv = layernorm(x, a, "ln_1") @ g(a, "qkv.weight") + g(a, "qkv.bias")
        q, k, v = (qkv[..., j * d:(j + 1) * d].reshape(B, T, H, d // H).transpose(0, 2, 1, 3) for j in range(3))
        att = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // H)
        att[..., mask] = -np.inf
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, d)
        x = x + y @ g(a, "proj.weight") + g(a, "proj.bias")
        h = layernorm(x, m, "ln_2") @ g(m, "fc.weight") + g(m, "fc.bias")
        h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
        x = x + h @ g(m, "proj.weight") + g(m, "proj.bias")
    head = g("embed", "wte").T if model.tied else g("head", "lm_head.weight")   # tied: GPT-2's lm_head = wte
    return layernorm(x, "head", "ln_f") @ head


def forward_loss(w, model, inputs, targets):
    """The mean token loss of forward_logits, in float64."""
    logits = forward_logits(w, model, inputs)
    top = logits.max(-1, keepdims=True)
    lse = top[..., 0] + np.log(np.exp(logits - top).sum(-1))
    picked = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
    return float((lse - picked).mean())


def read_weights(path, model_path):
    """(Model, tensors) of any weights source: an osdp checkpoint or weights file, or, with the model
    file they hold, a .safetensors file (GPT2LMHeadModel) or llm.c's model file (.bin)."""
    if not path.endswith((".safetensors", ".bin")) and not os.path.isdir(path):
        return read_osdp(path)
    if not model_path:
        fail(f"{path}: an HF directory, a .safetensors or an llm.c .bin source needs --model MODEL.ini (the model it "
             f"holds)")
    model = load_model(model_path)
    if path.endswith(".bin"):
        return model, untie(model, llmc_tensors(model, path), path)
    return model, load_hf(model, path)


# ---- data, as osdp_gpt reads it (include/osdp/data.h) ----------------------------------------------

SHARD_MAGIC, SHARD_VERSION, SHARD_HEADER_BYTES = 20240520, 1, 1024
VALIDATION_SEED = 0x76616c69646174   # src/cli/validation.c: the validation set's own sampling seed


def read_shard(path):
    """The uint16 tokens of an llm.c shard, its header checked as src/io/data.c checks it."""
    raw = read_headed(path, path, f"the {SHARD_HEADER_BYTES}-byte llm.c shard header")
    magic, version, count = (int(x) for x in np.frombuffer(raw[:12], "<i4"))
    if magic != SHARD_MAGIC:
        fail(f"{path}: bad magic {magic} in llm.c shard header (expected {SHARD_MAGIC})")
    if version != SHARD_VERSION:
        fail(f"{path}: unsupported llm.c shard version {version} (expected {SHARD_VERSION}: uint16 GPT-2 tokens)")
    if count < 0 or len(raw) != SHARD_HEADER_BYTES + 2 * count:
        fail(f"{path}: file size is {len(raw)} bytes but the header's token count {count} needs "
             f"{SHARD_HEADER_BYTES + 2 * count}")
    return np.frombuffer(raw[SHARD_HEADER_BYTES:], "<u2").astype(np.int64)


def shard_names(directory, val):
    """The .bin shards of a data directory in name order (strcmp's): the *_val_* ones or the others; token
    tables and what is not a regular file never."""
    names = [n for n in os.listdir(directory) if n.endswith(".bin") and not n.endswith("_tokenizer.bin")
             and ("_val_" in n) == val and os.path.isfile(os.path.join(directory, n))]
    return sorted(names, key=lambda n: n.encode())


def read_tokens(path, evaluating):
    """The token stream of data path: osdp_gpt train --data's (evaluating False) or eval --data's (a
    directory's *_val_*.bin shards when it has them)."""
    if os.path.isdir(path):
        try:
            val = evaluating and bool(shard_names(path, True))
            names = shard_names(path, val)
        except OSError as e:
            fail(f"data directory {path}: {e.strerror}")
        if not names:
            fail(f"data directory {path} contains no .bin shard files" + (" but validation shards (*_val_*.bin)"
                                                                          if shard_names(path, True) else ""))
        return np.concatenate([read_shard(os.path.join(path, n)) for n in names])
    if not os.path.exists(path):
        fail(f"cannot open data {path}: no such file or directory")
    if path.endswith(".bin"):
        return read_shard(path)
    try:
        return np.frombuffer(open(path, "rb").read(), dtype=np.uint8).astype(np.int64)
    except OSError as e:
        fail(f"cannot read data file {path}: {e.strerror}")


def loss(a):
    if (a.step is not None) + (a.eval_batches is not None) + a.sweep != 1:
        fail("give one of --step S (one batch of the training data), --eval-batches K (train's validation set) and "
             "--sweep (every sequence once)")
    if a.global_batch < 1 or (a.eval_batches is not None and a.eval_batches < 1) or (a.step or 0) < 0:
        fail("--global-batch and --eval-batches must be at least 1, --step at least 0")
    model, w = read_weights(a.weights, a.model)
    T = a.seq_len or model.ctx
    if not 1 <= T <= model.ctx:
        fail(f"--seq-len {T}: expected 1 to the model's ctx = {model.ctx}")
    tokens = read_tokens(a.data, a.step is None)
    if tokens.size and int(tokens.max()) >= model.vocab:
        fail(f"--data {a.data}: token id {int(tokens.max())} is >= vocab {model.vocab}")
    span = len(tokens) - T
    if span <= 0:
        fail(f"--data {a.data}: {len(tokens)} tokens, too few for sequences of {T}")
    seed, steps = (a.seed, [a.step]) if a.step is not None else (VALIDATION_SEED, range(a.eval_batches or 0))
    if a.sweep:   # osdp_gpt eval without --batches: sequence j starts at token j T, whole global batches
        steps = range((len(tokens) - 1) // T // a.global_batch)
        if not steps:
            fail(f"--data {a.data}: {len(tokens)} tokens, fewer than one global batch of sequences of {T}")
    losses = []
    for step in steps:
        base = splitmix64(splitmix64(seed) ^ step)
        starts = [(step * a.global_batch + j) * T if a.sweep else splitmix64(base ^ j) % span
                  for j in range(a.global_batch)]
        inputs = np.stack([tokens[s:s + T] for s in starts])
        targets = np.stack([tokens[s + 1:s + T + 1] for s in starts])
        losses.append(forward_loss(w, model, inputs, targets))
    print(f"loss {sum(losses) / len(losses):.9g}")


def greedy(a):
    model, w = read_weights(a.weights, a.model)
    if (a.prompt is None) == (a.prompt_ids is None):
        fail("give one of --prompt TEXT and --prompt-ids 1,2,3")
    if a.prompt is not None:
        seq = list(a.prompt.encode())
    else:
        try:
            seq = [int(t) for t in a.prompt_ids.split(",")]
        except ValueError:
            fail(f"--prompt-ids '{a.prompt_ids}': expected token ids separated by commas")
    if not seq or any(not 0 <= t < model.vocab for t in seq):
        fail(f"the prompt's ids must be in [0, {model.vocab})")
    out = []
    for _ in range(a.tokens):
        window = np.array([seq[-model.ctx:]], dtype=np.int64)
        out.append(int(np.argmax(forward_logits(w, model, window)[0, -1])))
        seq.append(out[-1])
    print(" ".join(map(str, out)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    converters = [("export-hf", "osdp checkpoint -> from_pretrained directory (GPT2LMHeadModel, tokenizer)", "ckpt",
                   False, export_hf),
                  ("import-hf", "GPT2LMHeadModel directory or safetensors -> osdp weights file", "hf", True, import_hf),
                  ("export-llmc", "osdp checkpoint of a tied model -> llm.c model file (.bin)", "ckpt", False,
                   export_llmc),
                  ("import-llmc", "llm.c model file -> osdp weights file", "llmc", True, import_llmc)]
    for name, what, source, needs_model, run in converters:
        p = sub.add_parser(name, help=what)
        p.add_argument(source)
        if needs_model:
            p.add_argument("--model", required=True)
        p.add_argument("--out", required=True)
        if name == "export-hf":
            p.add_argument("--tokenizer", metavar="NAME_tokenizer.bin",
                           help="the token table of the data (scripts/prepare_data.py writes it beside the shards)")
        p.set_defaults(run=run)
    p = sub.add_parser("loss", help="numpy forward: the mean loss of a global batch")
    p.add_argument("weights")
    p.add_argument("--model", help="the model file (for a .safetensors or llm.c .bin source)")
    p.add_argument("--data", required=True, help="an llm.c .bin shard, a directory of shards, or a text file (bytes)")
    p.add_argument("--step", type=int, help="the data step (osdp's log step - 1)")
    p.add_argument("--eval-batches", type=int, metavar="K",
                   help="instead of --step: train's validation set, its first K batches (train's val_loss)")
    p.add_argument("--sweep", action="store_true",
                   help="instead of --step: every sequence of eval's data once, in order (eval without --batches)")
    p.add_argument("--global-batch", type=int, required=True)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--seq-len", type=int, default=0)
    p.set_defaults(run=loss)
    p = sub.add_parser("greedy", help="numpy forward: greedy decoding of a prompt")
    p.add_argument("weights", help="an osdp checkpoint or weights file (.safetensors, .bin: with --model)")
    p.add_argument("--model", help="the model file (for a .safetensors or llm.c .bin source)")
    p.add_argument("--prompt", help="text (its UTF-8 bytes are the tokens of a byte model)")
    p.add_argument("--prompt-ids", help="token ids, comma-separated")
    p.add_argument("--tokens", type=int, required=True)
    p.set_defaults(run=greedy)
    a = ap.parse_args()
    try:
        a.run(a)
    except OSError as e:   # a file the checks above did not reach: one line, never a traceback
        fail(f"{e.filename or ''}: {e.strerror or e}")


if __name__ == "__main__":
    main()

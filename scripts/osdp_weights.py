#!/usr/bin/env python3
"""Move osdp weights to and from Hugging Face GPT-2 safetensors, and check them with an
independent numpy forward.

    scripts/osdp_weights.py export-hf CKPT --out MODEL.safetensors
    scripts/osdp_weights.py import-hf MODEL.safetensors --model MODEL.ini --out WEIGHTS.h5
    scripts/osdp_weights.py loss WEIGHTS --data FILE --step S --global-batch G [--seed N] [--seq-len T]
    scripts/osdp_weights.py greedy WEIGHTS (--prompt TEXT | --prompt-ids 1,2,3) --tokens N

export-hf  reads the /model group of an osdp checkpoint (doc/checkpoint-format.md) and writes
           its tensors under `GPT2LMHeadModel` names (transformer.wte.weight, transformer.h.0.attn.
           c_attn.weight, ..., lm_head.weight), with a config.json beside the output
           (tie_word_embeddings false: osdp's head is untied).  GPT-2's Conv1D layers store
           (in, out) as osdp does, so only lm_head (nn.Linear, (V, d)) is transposed.  Models
           whose blocks change width (the I&C family) have no GPT-2 equivalent and are refused.
import-hf  writes an osdp weights file: the /model group of a checkpoint (every dataset with
           its osdp-sum64-v1 checksum and op_offset) and the root attributes that describe the
           model (doc/checkpoint-format.md, "Weights files"); `osdp_gpt train --init-from` loads it.
           The model file says which model the tensors must make; every shape is checked.
loss       the mean token loss of a weights source (an osdp checkpoint / weights file, or a
           .safetensors file) on the global batch of data step S, with the batch drawn as
           osdp_gpt draws it (include/osdp/data.h) from a text file read as bytes: a forward in
           numpy that shares no code with osdp, to check exported weights and osdp's loss.
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


def fail(msg, code=2):
    print(f"osdp_weights: error: {msg}", file=sys.stderr)
    sys.exit(code)


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
        except (configparser.Error, KeyError, ValueError) as e:
            fail(f"{where}: not an osdp model description ({type(e).__name__}: {e})")
        self.widths = [int(w) for w in widths] if widths else [self.n_embd] * self.n_layer
        self.text = text

    def uniform(self):
        return all(w == self.n_embd for w in self.widths)

    def hash(self):
        """osdp_model_config_hash(): FNV-1a-style over (n_layer, n_head, n_embd, vocab, ctx, widths)."""
        h = FNV_OFFSET
        for v in [self.n_layer, self.n_head, self.n_embd, self.vocab, self.ctx] + self.widths:
            h = ((h ^ (v & 0xffffffff)) * FNV_PRIME) & M64
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
        out += [("head", "ln_f.weight", (d,)), ("head", "ln_f.bias", (d,)), ("head", "lm_head.weight", (d, V))]
        return out


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


def write_weights(path, model, tensors):
    """An osdp weights file: /model with checksums and op_offsets, and the model's root attributes."""
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
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
    os.replace(tmp, path)


# ---- commands -----------------------------------------------------------------------------------

def refuse_existing(path):
    if os.path.lexists(path):
        fail(f"{path} exists: choose another --out (nothing was overwritten)")


def export_hf(a):
    model, tensors = read_osdp(a.ckpt)
    config_path = os.path.join(os.path.dirname(os.path.abspath(a.out)), "config.json")
    refuse_existing(a.out)
    refuse_existing(config_path)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    out = {}
    for (op, tensor), w in tensors.items():
        name, transposed = hf_name(op, tensor)
        out[name] = np.ascontiguousarray(w.T if transposed else w)
    save_file(out, a.out, metadata={"format": "pt"})
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": model.vocab,
              "n_positions": model.ctx, "n_ctx": model.ctx, "n_embd": model.n_embd, "n_layer": model.n_layer,
              "n_head": model.n_head, "n_inner": 4 * model.n_embd, "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-5, "tie_word_embeddings": False, "torch_dtype": "float32"}
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)
    print(f"osdp_weights: {a.out}: {len(out)} tensors of model {model.name}; {config_path}")


def import_hf(a):
    try:
        model = Model(open(a.model).read(), a.model)
    except OSError as e:
        fail(f"--model {a.model}: {e.strerror}")
    refuse_existing(a.out)
    try:
        st = load_file(a.hf)
    except Exception as e:
        fail(f"{a.hf}: not a safetensors file ({e})")
    tensors = {}
    for op, tensor, shape in model.tensors():
        name, transposed = hf_name(op, tensor)
        if name not in st:
            if name == "lm_head.weight":
                fail(f"{a.hf}: no lm_head.weight: the model ties its head to wte, and osdp's head is untied")
            fail(f"{a.hf}: tensor {name} is missing")
        w = st[name].T if transposed else st[name]
        if w.shape != shape:
            fail(f"{a.hf}: tensor {name} has shape {tuple(st[name].shape)}, model {model.name} needs "
                 f"{tuple(reversed(shape)) if transposed else shape}")
        if w.dtype != np.float32:
            fail(f"{a.hf}: tensor {name} is {w.dtype}: osdp's master weights are float32 (convert first)")
        tensors[(op, tensor)] = np.ascontiguousarray(w)
    write_weights(a.out, model, tensors)
    print(f"osdp_weights: {a.out}: weights of model {model.name} from {a.hf}")


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
    return layernorm(x, "head", "ln_f") @ g("head", "lm_head.weight")


def forward_loss(w, model, inputs, targets):
    """The mean token loss of forward_logits, in float64."""
    logits = forward_logits(w, model, inputs)
    top = logits.max(-1, keepdims=True)
    lse = top[..., 0] + np.log(np.exp(logits - top).sum(-1))
    picked = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
    return float((lse - picked).mean())


def loss(a):
    if a.weights.endswith(".safetensors"):
        if not a.model:
            fail("a .safetensors source needs --model MODEL.ini (the model it holds)")
        model = Model(open(a.model).read(), a.model)
        st = load_file(a.weights)
        w = {}
        for op, tensor, _ in model.tensors():
            name, transposed = hf_name(op, tensor)
            w[(op, tensor)] = st[name].T if transposed else st[name]
    else:
        model, w = read_osdp(a.weights)
    T = a.seq_len or model.ctx
    tokens = np.frombuffer(open(a.data, "rb").read(), dtype=np.uint8).astype(np.int64)
    span = len(tokens) - T
    if span <= 0:
        fail(f"--data {a.data}: {len(tokens)} tokens, too few for sequences of {T}")
    base = splitmix64(splitmix64(a.seed) ^ a.step)
    starts = [splitmix64(base ^ j) % span for j in range(a.global_batch)]
    inputs = np.stack([tokens[s:s + T] for s in starts])
    targets = np.stack([tokens[s + 1:s + T + 1] for s in starts])
    print(f"loss {forward_loss(w, model, inputs, targets):.9g}")


def greedy(a):
    model, w = read_osdp(a.weights)
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
    p = sub.add_parser("export-hf", help="osdp checkpoint -> GPT2LMHeadModel safetensors")
    p.add_argument("ckpt")
    p.add_argument("--out", required=True)
    p.set_defaults(run=export_hf)
    p = sub.add_parser("import-hf", help="GPT2LMHeadModel safetensors -> osdp weights file")
    p.add_argument("hf")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(run=import_hf)
    p = sub.add_parser("loss", help="numpy forward: the mean loss of a global batch")
    p.add_argument("weights")
    p.add_argument("--model", help="the model file (for a .safetensors source)")
    p.add_argument("--data", required=True, help="a text file, read as bytes")
    p.add_argument("--step", type=int, required=True, help="the data step (osdp's log step - 1)")
    p.add_argument("--global-batch", type=int, required=True)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--seq-len", type=int, default=0)
    p.set_defaults(run=loss)
    p = sub.add_parser("greedy", help="numpy forward: greedy decoding of a prompt")
    p.add_argument("weights", help="an osdp checkpoint or weights file")
    p.add_argument("--prompt", help="text (its UTF-8 bytes are the tokens of a byte model)")
    p.add_argument("--prompt-ids", help="token ids, comma-separated")
    p.add_argument("--tokens", type=int, required=True)
    p.set_defaults(run=greedy)
    a = ap.parse_args()
    a.run(a)


if __name__ == "__main__":
    main()

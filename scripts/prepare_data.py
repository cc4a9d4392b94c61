#!/usr/bin/env python3
"""Turn text files into llm.c token shards that `osdp_gpt train --data DIR` reads.

    scripts/prepare_data.py TEXT... --out DIR [--tokenizer bytes|gpt2] [--val-fraction F]
                            [--shard-tokens N] [--name NAME]

Writes, in DIR (created; existing shards of the same NAME are never overwritten):
  NAME_val_000000.bin, NAME_train_000000.bin, NAME_train_000001.bin, ...
      llm.c data shards: a header of 256 little-endian int32 (magic 20240520, version 1,
      token count), then the tokens as little-endian uint16.
  NAME_tokenizer.bin
      the token table in llm.c's tokenizer file format (version 2): a header of 256
      little-endian uint32 (magic 20240328, version 2, vocabulary size, end-of-text token),
      then for each token id in order one byte of length L (1..255) and its L bytes
      (doc/tokenizer-format.md).  `osdp_gpt sample --tokenizer FILE` and
      `osdp_gpt train --sample-every N --tokenizer FILE` decode with it.

Tokenizers:
  bytes  every byte is a token (vocabulary 256, what osdp reads from a plain text file);
         the files are concatenated as they are, with no separator.
  gpt2   GPT-2 BPE through the `tiktoken` package (vocabulary 50257); each file is one
         document, preceded by the end-of-text token 50256 as in llm.c.  tiktoken fetches
         the encoding's tables on first use: offline, point TIKTOKEN_CACHE_DIR at a cache
         that holds them.

The validation split is the first round(F x tokens) tokens of the whole token stream
(default F = 0.05; at least one full shard's worth is not required).  The same inputs
always give the same files.
"""
import argparse
import array
import os
import struct
import sys

DATA_MAGIC, DATA_VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
HEADER_INTS = 256


def fail(msg, code=2):
    print(f"prepare_data: error: {msg}", file=sys.stderr)
    sys.exit(code)


def bytes_tokens(paths):
    toks = array.array("H")
    for p in paths:
        with open(p, "rb") as f:
            toks.extend(f.read())
    table = [bytes([i]) for i in range(256)]
    return toks, table, 256, 0


def gpt2_tokens(paths):
    try:
        import tiktoken
    except ImportError:
        fail("--tokenizer gpt2 needs the Python package tiktoken (pip install tiktoken)")
    try:
        enc = tiktoken.get_encoding("gpt2")
    except Exception as e:  # tiktoken raises several kinds when its download fails
        fail("the GPT-2 encoding could not be loaded (%s: %s). tiktoken downloads it on first use; "
             "offline, set TIKTOKEN_CACHE_DIR to a directory that holds a cached copy" % (type(e).__name__, e))
    eot = enc.eot_token
    toks = array.array("H")
    for p in paths:
        with open(p, "r", encoding="utf-8", errors="replace") as f:
            text = f.read()
        toks.append(eot)
        toks.extend(enc.encode_ordinary(text))
    table = [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
    return toks, table, enc.n_vocab, eot


def write_exclusive(path, payload):
    """Write a new file; never replace one the user has."""
    try:
        with open(path, "xb") as f:
            f.write(payload)
    except FileExistsError:
        fail(f"{path} exists: choose another --out or --name (nothing was overwritten)")


def shard_bytes(tokens):
    header = array.array("i", [0] * HEADER_INTS)
    header[0], header[1], header[2] = DATA_MAGIC, DATA_VERSION, len(tokens)
    body = array.array("H", tokens)
    if sys.byteorder != "little":
        header.byteswap()
        body.byteswap()
    return header.tobytes() + body.tobytes()


def tokenizer_bytes(table, vocab, eot):
    header = [0] * HEADER_INTS
    header[0], header[1], header[2], header[3] = TOKENIZER_MAGIC, TOKENIZER_VERSION, vocab, eot
    out = bytearray(struct.pack("<%dI" % HEADER_INTS, *header))
    for i, tok in enumerate(table):
        if not 1 <= len(tok) <= 255:
            fail(f"token {i} is {len(tok)} bytes long: llm.c's tokenizer format holds 1 to 255")
        out.append(len(tok))
        out += tok
    return bytes(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("texts", nargs="+", metavar="TEXT", help="input text files (UTF-8 for gpt2)")
    ap.add_argument("--out", required=True, metavar="DIR", help="output directory (created if missing)")
    ap.add_argument("--tokenizer", choices=["bytes", "gpt2"], default="bytes", help="default bytes")
    ap.add_argument("--val-fraction", type=float, default=0.05, metavar="F",
                    help="share of tokens for validation, 0 <= F < 1 (default 0.05)")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000, metavar="N",
                    help="tokens per training shard, >= 1 (default 100000000, as llm.c)")
    ap.add_argument("--name", default="corpus", help="file name prefix (default corpus)")
    a = ap.parse_args()
    if not 0.0 <= a.val_fraction < 1.0:
        fail(f"--val-fraction {a.val_fraction}: must be at least 0 and below 1")
    if a.shard_tokens < 1:
        fail(f"--shard-tokens {a.shard_tokens}: must be at least 1")
    if not a.name or "/" in a.name:
        fail(f"--name '{a.name}': must be a non-empty file name prefix without '/'")
    for p in a.texts:
        if not os.path.isfile(p):
            fail(f"input {p}: not a readable file")

    toks, table, vocab, eot = (gpt2_tokens if a.tokenizer == "gpt2" else bytes_tokens)(a.texts)
    n_val = round(a.val_fraction * len(toks))
    if len(toks) - n_val < 2:
        fail(f"the inputs give {len(toks)} tokens, {len(toks) - n_val} for training: too few to train on")

    files = []   # (path, payload, tokens): all made before any is written
    if n_val > 0:
        files.append((f"{a.name}_val_000000.bin", shard_bytes(toks[:n_val]), n_val))
    train = toks[n_val:]
    for i, lo in enumerate(range(0, len(train), a.shard_tokens)):
        part = train[lo:lo + a.shard_tokens]
        files.append((f"{a.name}_train_{i:06d}.bin", shard_bytes(part), len(part)))
    files.append((f"{a.name}_tokenizer.bin", tokenizer_bytes(table, vocab, eot), None))
    files = [(os.path.join(a.out, name), payload, n) for name, payload, n in files]
    for path, _, _ in files:
        if os.path.lexists(path):
            fail(f"{path} exists: choose another --out or --name (nothing was overwritten)")
    os.makedirs(a.out, exist_ok=True)
    for path, payload, n in files:
        write_exclusive(path, payload)
        print(f"prepare_data: {path}: " + (f"{n} tokens" if n is not None else f"{vocab} tokens ({a.tokenizer})"))

if __name__ == "__main__":
    main()

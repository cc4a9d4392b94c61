#!/usr/bin/env python3
"""Write the embedded default training corpus input/data/addition.txt.

Each line is "a+b=c\\n" with a and b drawn uniformly from the integers
[0, 999] (written without zero padding) and c = a + b.  The generator is
seeded, so the file is byte-for-byte reproducible.

Why this corpus: the operand digits are pure noise (nothing can predict
them beyond their distribution), but every answer digit, and the newline
after it, is determined by the operands.  That gives two well separated
loss floors for a byte-level model (exact values, nats per character,
computed by entropy_figures() below and printed when the script runs):

  * a model that has learned addition pays only for the operands,
    2*ln(1000) nats per line, which is ~1.13 nats/char;
  * a model that has learned only the format (where '+', '=' and '\\n' go,
    and how sums are distributed, but not which sum goes with which
    operands) also pays H(a+b) ~ 7.41 nats per answer, ~1.73 nats/char.

So a training loss that falls well below ~1.73 toward ~1.13 shows the
model is actually computing sums, not just reproducing the layout.
(Windows that start mid-line lose some context, so the loss a trainer
reports over short sequences sits slightly above these asymptotic floors.)

Usage: python3 scripts/make_addition_corpus.py [--lines N] [--seed S] [--out PATH]
Standard library only.
"""

import argparse
import math
import os
import random
import sys

LO, HI = 0, 999          # operand range, inclusive
DEFAULT_LINES = 20000
DEFAULT_SEED = 20240520


def digits(n):
    return len(str(n))


def entropy_figures():
    """Exact per-line entropies and expected characters per line (nats)."""
    n = HI - LO + 1
    # operands: uniform over n values; the digit string (with its
    # terminator '+' or '=') is in one-to-one correspondence with the value
    h_operands = 2.0 * math.log(n)
    # the answer c = a + b has a triangular distribution
    counts = {}
    for a in range(LO, HI + 1):
        for b in range(LO, HI + 1):
            counts[a + b] = counts.get(a + b, 0) + 1
    total = float(n * n)
    h_sum = -sum(k / total * math.log(k / total) for k in counts.values())
    mean_len_operand = sum(digits(v) for v in range(LO, HI + 1)) / n
    mean_len_sum = sum(digits(c) * k for c, k in counts.items()) / total
    chars = 2 * mean_len_operand + mean_len_sum + 3   # '+', '=', '\n'
    return {
        "chars_per_line": chars,
        "h_sum": h_sum,
        "adder": h_operands / chars,
        "format_only": (h_operands + h_sum) / chars,
    }


def unigram_entropy(text):
    """Entropy of the character frequencies (a model with no context)."""
    counts = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    n = float(len(text))
    return -sum(k / n * math.log(k / n) for k in counts.values())


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=DEFAULT_LINES)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--out", default=os.path.join(root, "input", "data", "addition.txt"))
    args = ap.parse_args()

    rng = random.Random(args.seed)
    lines = []
    for _ in range(args.lines):
        a = rng.randint(LO, HI)
        b = rng.randint(LO, HI)
        lines.append("%d+%d=%d\n" % (a, b, a + b))
    text = "".join(lines)
    with open(args.out, "w", encoding="ascii", newline="\n") as f:
        f.write(text)

    fig = entropy_figures()
    print("wrote %s: %d lines, %d bytes (seed %d)" % (args.out, args.lines, len(text), args.seed))
    print("expected chars/line      %.4f (this file: %.4f)" % (fig["chars_per_line"], len(text) / args.lines))
    print("H(a+b)                   %.4f nats" % fig["h_sum"])
    print("model that learned addition : %.4f nats/char" % fig["adder"])
    print("model that learned format   : %.4f nats/char" % fig["format_only"])
    print("unigram chars (no context)  : %.4f nats/char (this file)" % unigram_entropy(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The reference for scripts/bench_sharded (issue 3): the same GPT trained
with PyTorch DistributedDataParallel (gloo) on N CPU ranks x 1 thread, so that
osdp's tokens/s can be quoted as a ratio measured on the same machine in the
same run.

Same model as input/models/bench_l6_d256.ini (or --layers/--width/...):
token + position embedding, pre-LayerNorm blocks with causal multi-head
attention (qkv and output projections) and a 4x tanh-GELU MLP, final
LayerNorm, untied LM head without bias; fp32; AdamW; batch B sequences per
rank of T tokens (vocab 256, random tokens: the speed does not depend on
the data).  Prints one line: median step time (first steps excluded) and
tokens/s over all ranks.

PyTorch is not a dependency of osdp: without it the script says so and
exits 77.  Install it into a virtual environment of your own, e.g.
    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch numpy
    /tmp/torchenv/bin/python scripts/bench_pytorch_ddp.py --ranks 2
"""
import argparse
import math
import os
import statistics
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("SKIP: PyTorch is not installed (see the header of this script)")
    sys.exit(77)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, heads, d, vocab, ctx):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def worker(rank, a):
    torch.set_num_threads(a.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    torch.manual_seed(1337)
    model = nn.parallel.DistributedDataParallel(GPT(a.layers, a.heads, a.width, a.vocab, a.seq))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    g = torch.Generator().manual_seed(rank)
    times = []
    for _ in range(a.steps):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
        dist.barrier()
        t0 = time.perf_counter()
        loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    # the slowest rank's step is the step
    t = torch.tensor(times)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        med = statistics.median(t.tolist()[a.warmup:])
        params = sum(p.numel() for p in model.parameters())
        print(f"pytorch {torch.__version__} DDP gloo: {a.ranks} ranks x {a.threads} thread, L {a.layers} d {a.width} "
              f"T {a.seq} B {a.batch}, {params / 1e6:.2f}M params: median step {med * 1e3:.1f} ms, "
              f"{a.ranks * a.batch * a.seq / med:.0f} tokens/s")
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--port", type=int, default=29517)
    a = p.parse_args()
    if a.steps <= a.warmup or a.width % a.heads or min(a.ranks, a.threads, a.layers, a.seq, a.batch) < 1:
        p.error("need steps > warmup, heads dividing width, and positive sizes")
    mp.spawn(worker, args=(a,), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The paper's hybrid evaluation (issue 16 item 5): 3D+OSDP against DeepSpeed-3D-like, Megatron-like,
GPipe-like, FSDP and DDP, measured on emulated ranks (2 emulated nodes, an emulated link) against the
cost model, and predicted at paper scale.  Run through `scripts/bench_paper hybrid` (see its header).

Each system is a mesh (P pipeline stages x D data x T tensor ranks) and a plan the binary runs:
  DDP            P 1, T 1, all-DP
  FSDP           P 1, T 1, all-ZDP
  GPipe-like     P > 1, T 1, GPipe schedule, all-DP                 (best P and micro-batch)
  Megatron-like  T = the node's ranks (Megatron's recipe: TP inside the node), PP and DP over the
                 rest, 1F1B, all-DP                                   (best P and micro-batch)
  DS-3D-like     any (P, T, D), 1F1B, all-DP                         (best mesh and micro-batch)
  3D+OSDP        any (P, T, D), 1F1B, the OSDP planner's per-operator plan (best mesh, micro-batch)
"best" is the cost model's (`osdp_gpt plan --json`), each system at its own best micro-batch.
Our DP mode keeps the optimizer state sharded and moves the gradients by reduce-scatter + all-gather,
whose traffic equals ZeRO-1's all-reduce (2 (n-1)/n S): the data axis of DS-3D-like is ZeRO-1 as
DeepSpeed's; Megatron's plain DP moves the same bytes but replicates the optimizer state, which this
runtime does not emulate (its memory column is ours, not Megatron's)."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

SYSTEMS = ["DDP", "FSDP", "GPipe-like", "Megatron-like", "DS-3D-like", "3D+OSDP"]


def model_heads_layers(path):
    text = open(path).read()
    get = lambda key: int(re.search(r"^\s*%s\s*=\s*(\d+)" % key, text, re.M).group(1))
    return get("n_head"), get("n_layer")


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def ini_section_value(path, section, key):
    current = None
    for line in open(path):
        line = line.split(";")[0].strip()
        if line.startswith("["):
            current = line.strip("[]")
        elif current == section and "=" in line:
            k, v = (s.strip() for s in line.split("=", 1))
            if k == key:
                return float(v)
    raise KeyError("%s: [%s] %s" % (path, section, key))


class Planner:
    """`osdp_gpt plan --json` over meshes, each answer once"""

    def __init__(self, binary, model, device, ranks, ranks_per_node, link, global_batch, mem_limit, pipeline_batches):
        self.base = [binary, "plan", "--model", model, "--device", device, "--ranks", str(ranks),
                     "--ranks-per-node", str(ranks_per_node), "--global-batch", str(global_batch), "--json"]
        if link:
            self.base += ["--emulate-link", link]
        if mem_limit:
            self.base += ["--mem-limit", mem_limit]
        self.ranks, self.global_batch = ranks, global_batch
        self.pipeline_batches = pipeline_batches   # the micro-batches a pipeline is tried at ((None,): plan's)
        self.cache = {}

    def query(self, pp, tp, schedule, batch, out=None):
        key = (pp, tp, schedule, batch)
        if key in self.cache and not out:
            return self.cache[key]
        cmd = self.base + ["--tp", str(tp)]
        if pp > 1:
            cmd += ["--pp", str(pp), "--schedule", schedule] + (["--batch", str(batch)] if batch else [])
        if out:
            cmd += ["--out", out]
        done = subprocess.run(cmd, capture_output=True, text=True)
        try:
            answer = json.loads(done.stdout)
        except ValueError:
            answer = {}
        self.cache[key] = answer
        return answer

    def candidates(self, pp_list, tp_list, schedule, kind):
        """(step_s, row) for every mesh and micro-batch that fits, kind: all_dp, all_zdp or osdp"""
        rows = []
        for pp in pp_list:
            for tp in tp_list:
                if self.ranks % (pp * tp):
                    continue
                dp = self.ranks // (pp * tp)
                if self.global_batch % dp:
                    continue
                # a pipeline needs its micro-batch given; a flat mesh's plan chooses it
                batches = [None] if pp == 1 else [b for b in self.pipeline_batches if b is None or (
                    (self.global_batch // dp) % b == 0 and self.global_batch // dp // b >= pp)]
                for b in batches:
                    j = self.query(pp, tp, schedule, b)
                    o = j.get(kind, {})
                    if not o.get("fits"):
                        continue
                    mesh = j["mesh"]
                    peak = o["stages"][0]["peak_bytes"] if pp > 1 else o.get("runtime_peak_bytes", o["peak_bytes"])
                    rows.append((o["step_s"], dict(pp=pp, tp=tp, dp=dp, schedule=schedule, kind=kind,
                                                   micro_batch=o["micro_batch"], step_s=o["step_s"],
                                                   tokens_per_s=o["tokens_per_s"], peak0=peak,
                                                   stages=mesh.get("stages", ""))))
        rows.sort(key=lambda r: r[0])
        return rows

    def systems(self, ranks_per_node, heads, layers):
        """the six systems' best (mesh, micro-batch, plan) by the cost model; None: none fits"""
        tps = [t for t in divisors(ranks_per_node) if heads % t == 0]
        pps = [p for p in divisors(self.ranks) if p <= min(2 * layers + 2, 16)]
        pick = lambda rows: rows[0][1] if rows else None
        mega_tp = max(tps)
        return {
            "DDP": pick(self.candidates([1], [1], "1f1b", "all_dp")),
            "FSDP": pick(self.candidates([1], [1], "1f1b", "all_zdp")),
            "GPipe-like": pick(self.candidates([p for p in pps if p > 1], [1], "gpipe", "all_dp")),
            "Megatron-like": pick(self.candidates(pps, [mega_tp], "1f1b", "all_dp")),
            "DS-3D-like": pick(self.candidates(pps, tps, "1f1b", "all_dp")),
            "3D+OSDP": pick(self.candidates(pps, tps, "1f1b", "osdp")),
        }


def mesh_name(row):
    parts = ["PP%d" % row["pp"]] if row["pp"] > 1 else []
    parts += ["TP%d" % row["tp"]] if row["tp"] > 1 else []
    parts += ["DP%d" % row["dp"]] if row["dp"] > 1 or not parts else []
    return " x ".join(parts)


def log_summary(path):
    """rank 0's log: the median step after the first, the peak, whether every step's peak = its prediction"""
    ms, peak, equal, pred_total = [], 0, True, 0
    for line in open(path):
        if not line.startswith("step="):
            continue
        kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if int(kv["step"]) > 1:
            ms.append(float(kv["ms"]))
        peak = max(peak, int(kv["peak_total"]))
        pred_total = int(kv["pred_total"])
        equal = equal and kv["peak_total"] == kv["pred_total"]
    return statistics.median(ms), peak, equal, pred_total


def run(cmd, log):
    try:
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        sys.stderr.write("bench_hybrid: %s ran past 600 s\n" % " ".join(cmd))
        return None
    if done.returncode:
        sys.stderr.write("bench_hybrid: %s failed (exit %d): %s\n" % (" ".join(cmd), done.returncode, done.stderr))
        return None
    return log_summary(log)


def launcher(args, ranks, ranks_per_node):
    """mpiexec for RANKS ranks.  --bind node (the default): each emulated node on its own cores, as real nodes
    are (the machine's cores split between the 2 nodes, a node's ranks round robin over its share): a pipeline
    stage that computes while the other node's stage waits then has its node's cores and no more, and a node's
    collectives do not meet the other node's compute (ranks of both nodes on every core made a stage's
    reduce-scatters wait for the other stage's time slices).  --bind core: rank i on core i mod cores; none:
    left to the scheduler (more ranks than cores then move between cores mid-run)"""
    bind = []
    if args.bind == "node":
        cores = sorted(os.sched_getaffinity(0))
        share = max(len(cores) // 2, 1)   # a node's cores: half the machine's (one node alone: still half)
        cpus = [cores[((rank // ranks_per_node) * share + rank % ranks_per_node % share) % len(cores)]
                for rank in range(ranks)]
        bind = ["-bind-to", "user:" + ",".join(str(c) for c in cpus)]
    elif args.bind != "none":
        bind = ["-bind-to", args.bind]
    return [args.mpiexec] + bind + ["-n", str(ranks)]


def profile(args, ranks, ranks_per_node, options, out):
    """osdp_gpt profile on RANKS ranks x 1 thread; a fit that a disturbed measurement spoilt (times that do
    not grow with size: the profiler refuses them) is measured once more with 3x the repetitions"""
    for reps in (args.reps, 3 * args.reps):
        done = subprocess.run(launcher(args, ranks, ranks_per_node) + [args.bin, "profile", "--model", args.model, "--threads",
                               "1", "--reps", str(reps), "--out", out] + options, capture_output=True, text=True)
        if done.returncode == 0:
            return
        sys.stderr.write("bench_hybrid: profile %s at --reps %d failed: %s" % (" ".join(options), reps,
                                                                             (done.stderr.splitlines() or [""])[0] + "\n"))
    raise SystemExit("bench_hybrid: profile failed twice (see above)")


def emulated(args, ranks, out):
    """one rank count: the link chosen from the measured in-node bandwidth, the profiled two-level
    device file, the six systems planned, run ROUNDS times interleaved, measured against predicted"""
    rpn = ranks // 2
    mpi = launcher(args, ranks, rpn) + [args.bin]
    inode = os.path.join(out, "hybrid_inode_n%d.ini" % ranks)
    dev = os.path.join(out, "hybrid_dev_n%d.ini" % ranks)
    if args.link:   # given: the same link whatever the machine's load
        link = args.link
        print("# %d ranks = 2 emulated nodes x %d: emulated link %s (--link)" % (ranks, rpn, link), flush=True)
    else:
        if not os.path.exists(inode) or args.reprofile:   # one node's ranks alone: the in-node bandwidth
            profile(args, rpn, rpn, ["--name", "inode_n%d" % rpn], inode)
        beta_in = ini_section_value(inode, "all_gather", "beta")
        alpha_in = ini_section_value(inode, "all_gather", "alpha")
        bandwidth = args.ratio / beta_in
        latency = max(alpha_in, 1e-6) * args.latency_ratio
        link = "%.4gM,%.4gus" % (bandwidth / 1e6, latency * 1e6)
        print("# %d ranks = 2 emulated nodes x %d: in-node all-gather measured %.3g GB/s, alpha %.3g us -> emulated link "
              "%s (bandwidth x %.3g, latency x %.3g)" % (ranks, rpn, 1e-9 / beta_in, alpha_in * 1e6, link, args.ratio,
                                                        args.latency_ratio), flush=True)
    if not os.path.exists(dev) or args.reprofile:
        profile(args, ranks, rpn, ["--ranks-per-node", str(rpn), "--emulate-link", link, "--name", "emulated_n%d" % ranks], dev)
    heads, layers = model_heads_layers(args.model)
    planner = Planner(args.bin, args.model, dev, ranks, rpn, None, args.global_batch, args.mem_limit, (1, 2, 4, 8))
    chosen = planner.systems(rpn, heads, layers)
    commands = {}
    for name, row in chosen.items():
        if row is None:
            continue
        plan = {"all_dp": "dp", "all_zdp": "zdp"}.get(row["kind"])
        if plan is None:   # the planner's plan, as a file: train runs exactly what was predicted
            plan = os.path.join(out, "hybrid_n%d_%s.plan" % (ranks, name.replace("+", "_")))
            planner.query(row["pp"], row["tp"], row["schedule"], row["micro_batch"] if row["pp"] > 1 else None, out=plan)
        cmd = ["train", "--model", args.model, "--device", dev, "--steps", str(args.steps), "--threads", "1", "--quiet",
               "--ranks-per-node", str(rpn), "--emulate-link", link, "--global-batch", str(args.global_batch),
               "--batch", str(row["micro_batch"]), "--tp", str(row["tp"]), "--plan", plan]
        if args.mem_limit:
            cmd += ["--mem-limit", args.mem_limit]
        if row["pp"] > 1:
            cmd += ["--pp", str(row["pp"]), "--stages", row["stages"], "--schedule", row["schedule"]]
        commands[name] = cmd
    measured = {name: [] for name in commands}
    for rnd in range(args.rounds):
        for name, cmd in commands.items():
            log = os.path.join(out, "hybrid_n%d_%s_r%d.log" % (ranks, name.replace("+", "_"), rnd))
            if os.path.exists(log):
                os.remove(log)
            got = run(mpi + cmd + ["--log", log], log)
            if got:
                measured[name].append(got)
    rows = []
    for name in SYSTEMS:
        row = chosen.get(name)
        if row is None or not measured.get(name):
            rows.append((ranks, name, row, None))
            continue
        runs = measured[name]
        best = min(runs, key=lambda r: r[0])
        spread = (max(r[0] for r in runs) - best[0]) / best[0]
        rows.append((ranks, name, row, dict(ms=best[0], spread=spread, peak=best[1], equal=all(r[2] for r in runs),
                                            pred_peak=best[3])))
    return link, rows


def print_emulated(rows, args, out_file):
    head = "%-5s %-13s %-16s %3s %6s %9s %9s %7s %-8s %10s %6s %7s" % (
        "ranks", "system", "mesh", "b", "sched", "meas ms", "pred ms", "pred/m", "verdict", "peak0 MiB", "=pred",
        "spread")
    lines = [head]
    held = failed = 0
    for ranks, name, row, m in rows:
        if row is None:
            lines.append("%-5d %-13s %s" % (ranks, name, "no mesh fits"))
            continue
        if m is None:
            lines.append("%-5d %-13s %-16s %3d %6s %9s %9.1f  (the run failed)" % (
                ranks, name, mesh_name(row), row["micro_batch"], row["schedule"] if row["pp"] > 1 else "-", "-",
                1e3 * row["step_s"]))
            failed += 1
            continue
        ratio = 1e3 * row["step_s"] / m["ms"]
        ok = abs(ratio - 1) <= 0.15
        held += ok
        failed += not ok
        # the plan's peak of rank 0 (stage 0) against the run's: the log's every-step check and the plan's figure
        mem_ok = m["equal"] and m["peak"] == row["peak0"]
        lines.append("%-5d %-13s %-16s %3d %6s %9.1f %9.1f %7.3f %-8s %10.3f %6s %6.1f%%" % (
            ranks, name, mesh_name(row), row["micro_batch"], row["schedule"] if row["pp"] > 1 else "-", m["ms"],
            1e3 * row["step_s"], ratio, "ok" if ok else "OFF>15%", m["peak"] / 1048576, "yes" if mem_ok else "NO",
            100 * m["spread"]))
    lines.append("(%s, global batch %d sequences, %d steps per run, rank 0's median step after the first, the fastest "
                 "of %d interleaved rounds; spread: (slowest - fastest) / fastest; pred: plan --json's step for the "
                 "mesh and plan run, with the profiled two-level device file; =pred: rank 0's measured peak equals "
                 "the prediction to the byte every step and equals the plan's (stage 0's) peak; within 15%%: %d of %d)"
                 % (os.path.basename(args.model), args.global_batch, args.steps, args.rounds, held, held + failed))
    text = "\n".join(lines)
    print(text, flush=True)
    out_file.write(text + "\n")


PAPER_SCALE = [  # model, device, ranks, nodes, link between nodes, global batch
    ("nd_l96_d1536", "paper_8gb", 8, 1, None, 64), ("nd_l96_d1536", "paper_8gb", 16, 2, "12.5G,5us", 128),
    ("nd_l96_d1536", "paper_16gb", 8, 1, None, 64), ("nd_l96_d1536", "paper_16gb", 16, 2, "12.5G,5us", 128),
    ("ws_l4_d6144", "paper_8gb", 8, 1, None, 64), ("ws_l4_d6144", "paper_8gb", 16, 2, "12.5G,5us", 128),
    ("ws_l4_d6144", "paper_16gb", 8, 1, None, 64), ("ws_l4_d6144", "paper_16gb", 16, 2, "12.5G,5us", 128),
    ("ic_l8_mixed", "paper_8gb", 8, 1, None, 64), ("ic_l8_mixed", "paper_8gb", 16, 2, "12.5G,5us", 128),
    ("ic_l8_mixed", "paper_16gb", 8, 1, None, 64), ("ic_l8_mixed", "paper_16gb", 16, 2, "12.5G,5us", 128),
    ("gpt2_xl", "a100_40gb", 64, 8, "25G,5us", 512),
]


def paper_scale(args, out_file):
    lines = ["Paper scale, predicted by the cost model only (tokens/s of each system at its best mesh and "
             "micro-batch; the mesh below):",
             "%-13s %-10s %5s %-12s " % ("model", "device", "ranks", "link") + " ".join("%-14s" % s for s in SYSTEMS)
             + " %8s" % "3D/best"]
    for model, device, ranks, nodes, link, batch in PAPER_SCALE:
        path = os.path.join(args.src, "input/models/%s.ini" % model)
        heads, layers = model_heads_layers(path)
        planner = Planner(args.bin, path, os.path.join(args.src, "input/devices/%s.ini" % device), ranks,
                          ranks // nodes, link, batch, None, (None,))
        chosen = planner.systems(ranks // nodes, heads, layers)
        tps = {s: (r["tokens_per_s"] if r else 0) for s, r in chosen.items()}
        others = max(v for s, v in tps.items() if s != "3D+OSDP")
        lines.append("%-13s %-10s %5d %-12s " % (model, device, ranks, link or "-") +
                     " ".join("%-14s" % ("%.0f" % tps[s] if chosen[s] else "OOM") for s in SYSTEMS) +
                     " %8s" % ("%.3fx" % (tps["3D+OSDP"] / others) if others and chosen["3D+OSDP"] else "-"))
        lines.append("%-13s %-10s %5s %-12s " % ("", "", "", "") + " ".join(
            "%-14s" % (("%s b%d" % (mesh_name(chosen[s]), chosen[s]["micro_batch"])).replace(" x ", "x")
                       if chosen[s] else "-") for s in SYSTEMS))
        print(lines[-2] + "\n" + lines[-1], flush=True)
    lines.append("(16 GPUs: two of the paper's 8-GPU servers, the inter-node figures the larger of the file's PCIe ones "
                 "and a 100 Gb/s link's; 64 A100s: 8 DGX nodes, one 200 Gb/s HDR port per GPU; 3D/best: 3D+OSDP over "
                 "the best of the others)")
    out_file.write("\n".join(lines) + "\n")
    print(lines[-1])


def rows_wanted(args):
    return bool(args.ranks.split())


def common_arguments(p):
    """the options every emulated-node benchmark takes (scripts/bench_accum.py too)"""
    p.add_argument("--bin", default=os.environ.get("OSDP_BIN", "./osdp_gpt"))
    p.add_argument("--src", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    p.add_argument("--mpiexec", default=os.environ.get("MPIEXEC", "mpiexec"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common_arguments(p)
    p.add_argument("--bind", default="node", help="node: each emulated node on half the cores; else mpiexec -bind-to's "
                   "argument (MPICH's hydra: core, ...; none: not bound)")
    p.add_argument("--ranks", default="4 8", help="rank counts, each as 2 emulated nodes")
    p.add_argument("--model", default=None, help="default input/models/bench_l6_d256.ini (--quick: tiny.ini)")
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--reps", type=int, default=5, help="profile's repetitions")
    p.add_argument("--mem-limit", default=None)
    p.add_argument("--ratio", type=float, default=25.0 / 230.0,
                   help="link / in-node bandwidth (default: one 200 Gb/s HDR port per A100 against NVLink's "
                        "230 GB/s bus bandwidth)")
    p.add_argument("--latency-ratio", type=float, default=5.0 / 3.0, help="link / in-node latency (IB 5 us, NVLink 3 us)")
    p.add_argument("--link", default=None,
                   help="the emulated link as --emulate-link takes it (e.g. 17M,25ms) instead of one derived from the "
                        "in-node figures: the same link whatever the load (the link's floors, being deterministic, "
                        "then dominate the steps)")
    p.add_argument("--reprofile", action="store_true")
    p.add_argument("--no-paper-scale", action="store_true")
    p.add_argument("--quick", action="store_true", help="4 ranks, 3 steps, 1 round, no paper scale (for the test)")
    args = p.parse_args()
    if args.quick:
        args.ranks, args.steps, args.rounds, args.no_paper_scale = "4", 3, 1, True
    args.model = args.model or os.path.join(args.src, "input/models/%s.ini" % ("tiny" if args.quick else "bench_l6_d256"))
    os.makedirs(args.out, exist_ok=True)
    start = time.time()
    with open(os.path.join(args.out, "hybrid_table.txt" if rows_wanted(args) else "hybrid_paper_scale.txt"), "w") as out_file:
        rows = []
        for ranks in (int(r) for r in args.ranks.split()):
            link, got = emulated(args, ranks, args.out)
            rows += got
        if rows:
            print_emulated(rows, args, out_file)
        if not args.no_paper_scale:
            paper_scale(args, out_file)
    print("(%d s)" % (time.time() - start))
    bad = [r for r in rows if r[3] is None and r[2] is not None]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

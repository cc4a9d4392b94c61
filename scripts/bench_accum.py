#!/usr/bin/env python3
"""Gradient accumulation on emulated nodes (issue 28 item 6): reduce-once (--grad-reduce once: each operator's
gradients summed over the step's micro-batches, reduced once) against reduce-every (every micro-batch), measured
on CPU ranks as 2 emulated nodes joined by an emulated link, against the cost model's prediction.

Meshes, each with --plan dp and the same micro-batches per step:
  PP 2 x DP 2   the stages on the two nodes (the pipeline's messages cross the link, each data group in a node)
  PP 2 x DP 2   4 nodes of 1 rank: the data groups' reductions and the pipeline's messages all cross links
  DP 4          one data group over both nodes (its gradients reduced node-first, across the link)
Per mesh and mode: rank 0's median step (after the first) and its bytes per step (every collective's logical
bytes, from the log), against `osdp_gpt plan --json`'s step for that mesh, plan and micro-batch (with a
device file profiled at the runs' T on the row's own emulated nodes: 2 x 2 ranks, or 4 x 1, anew in each
round just before its runs, so that its compute figures see that moment's load; each row the fastest round
against that round's prediction, every round's ratio beside it) and the closed form of the bytes (osdp/cost_model.h: DP weights
gathered once per step, P e; gradients reduce-scattered A or 1 times, P e_g, node-first adding P e_g / R
across the nodes; the 16-byte sums; the pipeline's messages, plan --json's p2p bytes).

  python3 scripts/bench_accum.py [--link 10M,100us] [--seq-len 32] [--steps 5] [--rounds 3] [--out bench-out]

The link is emulated (osdp's --emulate-link: every message that crosses it waits for its latency and bytes
/ bandwidth), the nodes are this machine's cores split in two (mpiexec -bind-to, as scripts/bench_hybrid.py)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_hybrid import common_arguments, launcher, profile   # noqa: E402  (the nodes' cores: mpiexec -bind-to, as there)

KEYS_BYTES = ["ag_bytes", "rs_bytes", "ar_bytes", "node_ag_bytes", "node_rs_bytes", "cross_rs_bytes", "cross_ag_bytes",
              "p2p_bytes"]


def plan_json(args, dev, pp, batch, mode, rpn=2, stages=None):
    cmd = [args.bin, "plan", "--model", args.model, "--device", dev, "--ranks", "4", "--ranks-per-node", str(rpn),
           "--seq-len", str(args.seq_len),
           "--global-batch", str(args.global_batch), "--batch", str(batch), "--tp", "1", "--grad-reduce", mode, "--json"]
    if pp > 1:
        cmd += ["--pp", str(pp), "--schedule", "1f1b"] + (["--stages", stages] if stages else [])
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit("bench_accum: %s: %s" % (" ".join(cmd), done.stderr))
    return json.loads(done.stdout)


def log_steps(path):
    steps = []
    for line in open(path):
        if line.startswith("step="):
            steps.append(dict(f.split("=", 1) for f in line.split() if "=" in f))
    return steps


def predicted_bytes(j, ops, pp, batch, mode, args, rpn):
    """rank 0's bytes per step in closed form: its stage's operators (ops: a flat plan --json's, for their
    parameters) padded to the data group (CPU: quantum 1)"""
    dp = 4 // pp
    stages = j["mesh"].get("stages") or "0:%d" % len(ops)
    lo, hi = (int(x) for x in stages.split(",")[0].split(":"))
    P = sum(-(-op["params"] // dp) * dp for op in ops[lo:hi])
    A = args.global_batch // (dp * batch)
    reductions = 1 if mode == "once" else A
    ag = 4 * P                                    # DP slices gathered once per step (fp32 on CPU)
    # a data group over nodes of R of its ranks: node-first (in-node P e_g, counted whole even at R = 1, then
    # P e_g / R across); inside one node: flat, P e_g
    node_first = pp == 1 or rpn == 1
    rs = reductions * 4 * P * (1 + (1.0 / rpn if node_first else 0))
    p2p = j["all_dp"].get("stages", [{}])[0].get("p2p_bytes", 0) if pp > 1 else 0
    return ag + rs + 16 * (2 if pp > 1 else 1) + p2p


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common_arguments(p)
    p.set_defaults(bind="node")
    p.add_argument("--model", default=None, help="default input/models/bench_l6_d256.ini")
    p.add_argument("--link", default="10M,100us", help="the emulated link (--emulate-link)")
    p.add_argument("--seq-len", type=int, default=32, help="T (short: the gradients' traffic weighs, not compute)")
    p.add_argument("--global-batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=5, help="profile's repetitions")
    p.add_argument("--reuse", action="store_true", help="tabulate the logs (and device files) of an earlier run (--out) again")
    args = p.parse_args()
    args.model = args.model or os.path.join(args.src, "input/models/bench_l6_d256.ini")
    os.makedirs(args.out, exist_ok=True)
    start = time.time()
    # name, pp, micro-batch, ranks per node: 8 micro-batches each at 32
    meshes = [("PP2 x DP2", 2, 2, 2), ("PP2xDP2 4x1", 2, 2, 1), ("DP4 (2 nodes)", 1, 1, 2)]
    runs, stages, ops = {}, {}, None
    for rnd in range(args.rounds):   # interleaved: a disturbance of the machine spreads over every row
        devs = {}
        for rpn in sorted({m[3] for m in meshes}, reverse=True):
            # each round profiles anew, just before its runs (the compute figures are this machine's at that load),
            # each topology its own file: on 4 nodes of 1 every collective crosses the link, and the ranks that
            # share a core are another pair than on 2 nodes of 2; at the runs' T (gamma's intercept not extrapolated)
            devs[rpn] = dev = os.path.join(args.out, "accum_dev_%dx%d_r%d.ini" % (4 // rpn, rpn, rnd))
            if not (args.reuse and os.path.exists(dev)):
                profile(args, 4, rpn, ["--seq-len", str(args.seq_len), "--ranks-per-node", str(rpn), "--emulate-link",
                                       args.link, "--name", "accum_emulated_%dx%d" % (4 // rpn, rpn)], dev)
        ops = ops or plan_json(args, devs[2], 1, 1, "every")["osdp"]["ops"]
        for name, pp, batch, rpn in meshes:
            for mode in ("every", "once"):
                j = plan_json(args, devs[rpn], pp, batch, mode, rpn, stages.get(name))
                if pp > 1:
                    stages.setdefault(name, j["mesh"]["stages"])   # round 0's balanced split, kept
                r = runs.setdefault((name, mode), dict(pp=pp, batch=batch, rpn=rpn, ms=[], wait=[], json=[], bytes=None,
                                                        mem=True))
                cmd = [args.bin, "train", "--model", args.model, "--device", devs[rpn], "--steps", str(args.steps),
                       "--threads", "1", "--quiet", "--ranks-per-node", str(rpn), "--emulate-link", args.link,
                       "--seq-len", str(args.seq_len), "--global-batch", str(args.global_batch), "--batch", str(batch),
                       "--plan", "dp", "--grad-reduce", mode]
                if pp > 1:
                    cmd += ["--pp", str(pp), "--stages", stages[name], "--schedule", "1f1b"]
                log = os.path.join(args.out, "accum_%s_%d_%s_r%d.log" % (name.split()[0], rpn, mode, rnd))
                if not (args.reuse and os.path.exists(log)):
                    if os.path.exists(log):
                        os.remove(log)
                    done = subprocess.run(launcher(args, 4, rpn) + cmd + ["--log", log], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True, timeout=900)
                    if done.returncode:
                        raise SystemExit("bench_accum: %s failed: %s" % (" ".join(cmd), done.stderr))
                steps = log_steps(log)
                r["ms"].append(statistics.median(float(s["ms"]) for s in steps[1:]))
                r["wait"].append(statistics.median(float(s["comm_wait_ms"]) for s in steps[1:]))
                r["json"].append(j)
                r["bytes"] = sum(int(steps[-1].get(k, 0)) for k in KEYS_BYTES)
                r["mem"] = r["mem"] and all(s["peak_total"] == s["pred_total"] for s in steps)
    lines = ["%-14s %-6s %3s %3s %9s %9s %7s %-15s %8s %10s %10s %7s %9s %5s" % (
        "mesh", "grads", "b", "M", "meas ms", "pred ms", "pred/m", "rounds' pred/m", "wait ms", "meas MB", "pred MB",
        "pred/m", "peak0 MiB", "=pred")]
    held = total = 0
    best = {}
    for (name, mode), r in runs.items():
        k = min(range(len(r["ms"])), key=lambda i: r["ms"][i])   # the fastest round, against its own profile
        o = r["json"][k]["all_dp"]
        ms, pred_ms = r["ms"][k], 1e3 * o["step_s"]
        best[(name, mode)] = (ms, pred_ms)
        pb = predicted_bytes(r["json"][k], ops, r["pp"], r["batch"], mode, args, r["rpn"])
        M = args.global_batch // ((4 // r["pp"]) * r["batch"])
        peak = o["stages"][0]["peak_bytes"] if r["pp"] > 1 else o["runtime_peak_bytes"]
        ok = abs(pred_ms / ms - 1) <= 0.15 and abs(pb / r["bytes"] - 1) <= 0.15
        held += ok
        total += 1
        each = ",".join("%.2f" % (1e3 * j["all_dp"]["step_s"] / m) for j, m in zip(r["json"], r["ms"]))
        lines.append("%-14s %-6s %3d %3d %9.1f %9.1f %7.3f %-15s %8.1f %10.3f %10.3f %7.3f %9.2f %5s%s" % (
            name, mode, r["batch"], M, ms, pred_ms, pred_ms / ms, each, r["wait"][k], r["bytes"] / 1e6, pb / 1e6,
            pb / r["bytes"], peak / 1048576, "yes" if r["mem"] else "NO", "" if ok else "  *"))
    if held < total:
        # what the rows outside 15% measured (doc/benchmarks.md, "Gradient accumulation on emulated nodes")
        lines.append("* outside 15%: 4 ranks share this machine's 2 cores (each emulated node of 2 ranks one core) with "
                     "other users' load, which changes between a round's profile and its runs (the compute a step needs "
                     "is the profile's, measured up to minutes before), and an in-node reduce-scatter is waited while the "
                     "rank that shares the core computes: neither is a real node's, where each rank has its own core or GPU")
    for name, _, _, _ in meshes:
        (me, pe), (mo, po) = best[(name, "every")], best[(name, "once")]
        lines.append("%s: reduce-once %s than reduce-every by %.1f%% measured, %.1f%% predicted" % (
            name, "faster" if mo < me else "slower", 100 * (1 - mo / me), 100 * (1 - po / pe)))
    lines.append("(%s at T %d, global batch %d, %d steps per run, rank 0's median step after the first, the fastest of %d "
                 "interleaved rounds against the prediction of the device file profiled in that round (rounds' pred/m: "
                 "every round's); wait: rank 0's median time per step blocked in collectives and messages; bytes: rank "
                 "0's per step, every collective's logical bytes; link %s EMULATED between the emulated nodes (2 x 2 "
                 "ranks, or 4 x 1); within 15%%: %d of %d rows; %d s)" % (
                     os.path.basename(args.model), args.seq_len, args.global_batch, args.steps, args.rounds, args.link, held,
                     total, time.time() - start))
    text = "\n".join(lines)
    print(text)
    open(os.path.join(args.out, "accum_table.txt"), "w").write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/bin/bash
# When no plan fits, `osdp_gpt plan` says what the smallest peak is made of
# (src/planner/planner.c infeasible(), osdp_cost_peak_breakdown): "(N bytes, in
# the backward of OP: part A + part B + ...; in bytes a + b + ...)".  Here, with the real
# binary, on meshes where the parts once did not add up (reduce-once gradients
# held all step with recompute and accumulation, a pipeline stage, tensor
# parallelism with split operators, the plain case): the bytes listed sum to N
# exactly, each named part's size is its listed bytes, and the parts those
# plans hold (reduce-once gradients, activations) are named.  Run by
# `make check`; OSDP_BIN=other/osdp_gpt checks another binary.
set -u
. "$(dirname "$0")/../lib/test_lib.sh" nofit-breakdown-work
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to read the message"; exit 77; }
NF=(--model "$SRC/input/models/nd_l96_d1536.ini" --device "$SRC/input/devices/paper_8gb.ini" --ranks 8)

# check NAME MUST [plan options]: the no-fit message of plan with those options adds up; MUST: parts it must name
check() {
    local name=$1 must=$2; shift 2
    "$BIN" plan "${NF[@]}" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"; local rc=$?
    local why
    why=$(python3 - "$WORK/$name.err" "$must" 2>&1 <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
must = [m for m in sys.argv[2].split(",") if m]
m = re.search(r"the smallest peak any plan needs is [^(]*\((\d+) bytes, in the (forward|backward) of ([\w.]+)[^:]*: "
              r"([^;)]*); in bytes ([\d +]+)\); the operators that dominate it: ", text)
units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
if not m:   # sizes only (an older binary's form): how far their sum is from the peak, then fail all the same
    m = re.search(r"needs is [^(]*\((\d+) bytes, in the \w+ of [\w.]+: ([^)]*)\)", text)
    if not m:
        sys.exit("no breakdown '(N bytes, in the backward of OP: part A + ...; in bytes a + ...)' in the message")
    sizes = [re.search(r"([\d.]+) (B|KiB|MiB|GiB|TiB)$", part) for part in m.group(2).split(" + ")]
    total = sum(float(x.group(1)) * units[x.group(2)] for x in sizes if x)
    sys.exit(f"no bytes of the parts; their sizes sum to {total / (1 << 30):.2f} GiB, the peak is "
             f"{int(m.group(1)) / (1 << 30):.2f} GiB ({int(m.group(1))} bytes)")
need, named, listed = int(m.group(1)), m.group(4).split(" + "), [int(x) for x in m.group(5).split(" + ")]
if sum(listed) != need:
    sys.exit(f"the parts' bytes sum to {sum(listed)}, the peak is {need} ({sum(listed) - need:+d})")
if len(named) != len(listed):
    sys.exit(f"{len(named)} named parts, {len(listed)} byte counts")
names = []
for part, b in zip(named, listed):
    p = re.fullmatch(r"([a-zA-Z -]+) ([\d.]+) (B|KiB|MiB|GiB|TiB)", part)
    if not p:
        sys.exit(f"part '{part}' is not 'name size'")
    size = float(p.group(2)) * units[p.group(3)]
    if abs(size - b) > 0.005 * b + 1:
        sys.exit(f"part '{part}' is not its {b} bytes")
    names.append(p.group(1))
for n in must:
    if n not in names:
        sys.exit(f"no part '{n}' among {names}")
print(f"{need} bytes = {len(listed)} parts ({', '.join(names)}) at the {m.group(2)} of {m.group(3)}")
EOF
)
    local prc=$?
    if [ $rc = 6 ] && [ $prc = 0 ]; then ok "$name: no plan fits (exit 6), $why"
    else bad "$name: exit $rc, ${why:-no message}" "$WORK/$name.err"; fi
}

# reduce-once gradients (every operator: --grad-reduce once) kept across 2 micro-batches, recomputed blocks
check reduce_once_recompute "sharded state,activations,reduce-once gradients,gradients in flight,workspace" \
    --recompute all --grad-reduce once --global-batch 16
check plain "sharded state,activations,workspace"
# a pipeline stage (its first of 2, 2 micro-batches in flight) of reduce-once, recomputed operators
check pipeline_stage "sharded state,activations,reduce-once gradients" \
    --pp 2 --global-batch 16 --recompute all --grad-reduce once
# tensor-parallel parts cut into 2 slices, accumulation 4
check tp_split "sharded state,activations" --tp 2 --split 2 --global-batch 16

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]

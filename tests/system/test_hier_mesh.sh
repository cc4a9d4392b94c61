#!/bin/bash
# Plan mode h beside the other mesh axes, and the plans h cannot take (issue 16's loose ends):
#   1. pp 2 x dp 2 on 4 ranks as 4 emulated nodes of 1 (each stage's data group spans 2 nodes) and
#   2. tp 2 x dp 2 on 4 ranks as 2 emulated nodes of 2 (each data group spans both): all-h against all-zdp
#      on the same mesh, memory measured = predicted to the byte, losses bitwise (the node-first
#      reduction: one summation order per mesh), the hierarchical collectives really used;
#   3. train --plan auto --pp 2 on 8 ranks as 4 nodes of 2 behind a slow link: the 3D search offers h by
#      default and takes it, every rank gets it, memory exact; --no-hierarchical: no h;
#   4. h joined to slices, h on a tied head's embedding: refused at plan load, naming the operator and
#      the mode, non-zero exit, no step run; `default = h` under a tied head runs (the embedding DP).
# Run by `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC set).
set -u
. "$(dirname "$0")/../lib/test_lib.sh" hier-mesh-work

# h and flat add the same gradients in the same order on a mesh (node-first, doc/formats.md): bitwise.
LOSS_TOLERANCE=0

# train NAME RANKS PLAN [options...]: PLAN is a plan file's text, or auto
train() {
    local name=$1 ranks=$2 plan=$3; shift 3
    if [ "$plan" != auto ]; then printf '%b' "$plan" > "$WORK/$name.plan"; plan="$WORK/$name.plan"; fi
    timeout 120 "$MPIEXEC" -n "$ranks" "$BIN" train --model "$M" --data "$DATA" --threads 1 --plan "$plan" \
        --log "$WORK/$name.log" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
}
total() { field "$2" "$1" | awk '{s += $1} END {printf "%d", s}'; }   # total KEY LOG: summed over the steps
# same_losses A B: every step's loss within LOSS_TOLERANCE relative (0: bitwise)
same_losses() {
    [ -n "$(losses "$1")" ] || return 1
    if [ "$LOSS_TOLERANCE" = 0 ]; then [ "$(losses "$1")" = "$(losses "$2")" ]; return; fi
    paste <(field "$1" loss) <(field "$2" loss) |
        awk -v tol="$LOSS_TOLERANCE" 'NF != 2 {bad = 1} {d = $1 - $2; if (d < 0) d = -d; if (d > tol * $2) bad = 1}
                                      END {exit bad}'
}
# memory_exact LOG: every category's measured peak = its prediction, every step
memory_exact() {
    local c
    for c in state weights grads activations workspace tp_comm total; do
        [ -n "$(field "$1" "peak_$c")" ] && [ "$(field "$1" "peak_$c")" = "$(field "$1" "pred_$c")" ] || return 1
    done
}

# -- 1 and 2: all-h against all-zdp with a pipeline and with tensor parallelism
for mesh in "pp --pp 2 --ranks-per-node 1" "tp --tp 2 --ranks-per-node 2"; do
    set -- $mesh; axis=$1; shift
    train "${axis}_zdp" 4 'default = zdp\n' --steps 2 --batch 1 --global-batch 4 "$@" || bad "$axis: zdp run" "$WORK/${axis}_zdp.err"
    train "${axis}_h" 4 'default = h\n' --steps 2 --batch 1 --global-batch 4 "$@" || bad "$axis: h run" "$WORK/${axis}_h.err"
    if same_losses "$WORK/${axis}_h.log" "$WORK/${axis}_zdp.log" && memory_exact "$WORK/${axis}_h.log" &&
       memory_exact "$WORK/${axis}_zdp.log" && [ "$(total node_ag_bytes "$WORK/${axis}_h.log")" -gt 0 ] &&
       [ "$(total cross_rs_bytes "$WORK/${axis}_h.log")" -gt 0 ] &&
       [ "$(total cross_ag_bytes "$WORK/${axis}_h.log")" -gt 0 ] && [ "$(total ag_bytes "$WORK/${axis}_h.log")" = 0 ]; then
        ok "$* on 4 ranks (data groups across nodes): all-h losses bitwise equal to all-zdp's ($(field "$WORK/${axis}_h.log" loss | tr '\n' ' ')), memory exact in every category (h total $(field "$WORK/${axis}_h.log" peak_total | head -1) B, zdp $(field "$WORK/${axis}_zdp.log" peak_total | head -1) B), in-node gathers, the cross-node reduce-scatter and all-gather"
    else bad "$axis: h against zdp (losses $(field "$WORK/${axis}_h.log" loss | tr '\n' ' ') vs $(field "$WORK/${axis}_zdp.log" loss | tr '\n' ' '))" "$WORK/${axis}_h.err"; fi
done

# -- 3. the 3D search offers h by default (--pp 2: the stages and the modes from rank 0)
AUTO=(--pp 2 --ranks-per-node 2 --emulate-link 20M,100us --device "$SRC/input/devices/cpu_2core.ini" --steps 1 --global-batch 8)
train auto_h 8 auto "${AUTO[@]}" || bad "train --plan auto --pp 2" "$WORK/auto_h.err"
train auto_off 8 auto "${AUTO[@]}" --no-hierarchical || bad "train --plan auto --pp 2 --no-hierarchical" "$WORK/auto_off.err"
if memory_exact "$WORK/auto_h.log" && [ "$(total node_ag_bytes "$WORK/auto_h.log")" -gt 0 ] &&
   memory_exact "$WORK/auto_off.log" && [ "$(total node_ag_bytes "$WORK/auto_off.log")" = 0 ] &&
   [ "$(total cross_ag_bytes "$WORK/auto_off.log")" = 0 ]; then
    ok "train --plan auto --pp 2 on 8 ranks as 4 nodes of 2 behind a 20 MB/s link: h taken by default (in-node gathers $(total node_ag_bytes "$WORK/auto_h.log") B), memory exact; --no-hierarchical: none"
else bad "3D search with h (in-node gathers $(total node_ag_bytes "$WORK/auto_h.log") B)" "$WORK/auto_h.out"; fi

# -- 4. plans h cannot take: refused at load on every rank; h under a tied head elsewhere runs
refused() {   # refused NAME EXPECTED PLANTEXT [options...]
    local name=$1 expect=$2 text=$3; shift 3
    if train "$name" 4 "$text" --steps 1 --batch 1 --ranks-per-node 2 "$@"; then bad "$name: exit 0"
    elif grep -qF -- "$expect" "$WORK/$name.err" && ! grep -q '^step ' "$WORK/$name.out"; then ok "$name refused: '$expect'"
    else bad "$name: expected '$expect'" "$WORK/$name.err"; fi
}
TIED="$WORK/tied.ini"
printf '[model]\nname = t_tied\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab = 256\nctx = 32\ntied_head = true\n' > "$TIED"
refused split_h "mlp.0 = '1/2 h': mode h (hierarchical ZDP) shards the whole operator" 'default = zdp\nmlp.0 = 1/2 h\n'
refused h_split "attn.1 = 'h/2': mode h" 'default = dp\nattn.1 = h/2\n'
refused tied_h "operator embed must be dp (not h" 'default = h\nembed = h\n' --model "$TIED"
train tied_default 4 'default = h\n' --model "$TIED" --steps 1 --batch 1 --ranks-per-node 2 || bad "tied default h" "$WORK/tied_default.err"
if memory_exact "$WORK/tied_default.log" && [ "$(total node_ag_bytes "$WORK/tied_default.log")" -gt 0 ]; then
    ok "default = h under a tied head: runs (the embedding DP, the rest h), memory exact"
else bad "default = h under a tied head" "$WORK/tied_default.err"; fi

summary test_hier_mesh.sh

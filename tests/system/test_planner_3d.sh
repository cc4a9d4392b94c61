#!/bin/bash
# The 3D search (issue 16 item 3) with the real binary:
#   1. plan --pp auto --nodes 2: the table of 3D+OSDP beside DeepSpeed-3D-like,
#      Megatron-like, FSDP and DDP; --json: each one's mesh (P D T = ranks,
#      T inside a node), stages covering the operators, peaks within the
#      limit, 3D+OSDP at least as fast as every other; --out writes its plan
#   2. train --plan auto --pp 2 --global-batch on 4 ranks (2 emulated nodes):
#      the search's stages and micro-batch; measured = predicted peak on every
#      stage to the byte; losses bitwise equal to --plan dp on the same mesh,
#      stages and micro-batch (the plan never changes the numbers)
#   3. train --plan auto --pp auto: the mesh plan --pp auto --json chooses
#      for the same device, ranks and nodes
#   4. refusals: --pp auto without --plan auto, --stages with --pp auto
# Run by `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC); needs python3.
set -u
. "$(dirname "$0")/../lib/test_lib.sh" planner-3d-work
DEV="$SRC/input/devices/cpu_2core.ini"
U="$WORK/t_3d.ini"   # 4 heads (TP 2 divides them), 6 operators
printf '[model]\nname = t_3d\nn_layer = 2\nn_head = 4\nn_embd = 32\nvocab = 256\nctx = 32\n' > "$U"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed to check the JSON output"; echo "0 passed, 1 failed"; exit 1; }
js() { python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' "$1" "$2"; }
run() {   # run NRANKS NAME [train options...]: writes $WORK/NAME.{out,err,log}
    local n=$1 name=$2; shift 2
    timeout 120 "$MPIEXEC" -n "$n" "$BIN" train --data "$DATA" --model "$U" --device "$DEV" --threads 1 --peak-flops 1e9 \
        --seq-len 16 --global-batch 8 --steps 3 --ranks-per-node 2 --log "$WORK/$name.log" "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err"
}

# -- 1. plan --pp auto
"$BIN" plan --model "$SRC/input/models/bench_l6_d256.ini" --device "$SRC/input/devices/a100_40gb.ini" --ranks 16 \
    --nodes 2 --pp auto --global-batch 64 --mem-limit 200M >"$WORK/plan.out" 2>"$WORK/plan.err"; rc_text=$?
"$BIN" plan --model "$SRC/input/models/bench_l6_d256.ini" --device "$SRC/input/devices/a100_40gb.ini" --ranks 16 \
    --nodes 2 --pp auto --global-batch 64 --mem-limit 200M --json --out "$WORK/3d.plan" >"$WORK/plan.json" 2>"$WORK/plan_json.err"
if [ $rc_text = 0 ] && [ "$(grep -cE '^  (3D\+OSDP|DeepSpeed-3D-like|Megatron-like|FSDP|DDP) ' "$WORK/plan.out")" = 5 ] &&
   grep -qE '^3D\+OSDP: PP [0-9]+ x DP [0-9]+ x TP [0-9]+' "$WORK/plan.out" &&
   js "$WORK/plan.json" 'all(j[k]["mesh"]["pp"] * j[k]["mesh"]["dp"] * j[k]["mesh"]["tp"] == 16 and 8 % j[k]["mesh"]["tp"] == 0
           and j[k]["plan"]["stages"][0]["lo"] == 0 and j[k]["plan"]["stages"][-1]["hi"] == 14
           and all(s["peak_bytes"] <= 200 * 2**20 for s in j[k]["plan"]["stages"])
           and j["osdp"]["plan"]["step_s"] <= j[k]["plan"]["step_s"] * (1 + 1e-12)
           for k in ("osdp", "deepspeed_3d", "megatron", "fsdp", "ddp") if j[k]["fits"])
       and j["osdp"]["fits"] and j["fsdp"]["mesh"]["pp"] == 1 and j["ddp"]["mesh"]["tp"] == 1
       and all(m == "dp+once" for s in j["deepspeed_3d"]["plan"]["stages"] for m in s["modes"])' &&
   grep -q -- "--pp $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["osdp"]["mesh"]["pp"])' "$WORK/plan.json") " "$WORK/3d.plan"; then
    ok "plan --pp auto --nodes 2 on 16 ranks: 5 rows; every mesh P x D x T = 16 with T inside a node, peaks within the limit, 3D+OSDP the fastest ($(grep -oE '^3D\+OSDP: PP [0-9]+ x DP [0-9]+ x TP [0-9]+' "$WORK/plan.out")); --out names the mesh"
else bad "plan --pp auto (rc $rc_text)" "$WORK/plan.err"; head -c 600 "$WORK/plan.json"; echo; fi

# -- 1b. recompute in the 3D search: --recompute all puts every attn / mlp operator of every stage of every
#        row in +rc; --recompute auto chooses per operator, never slower than none or all
for rc in all auto none; do
    "$BIN" plan --model "$SRC/input/models/bench_l6_d256.ini" --device "$SRC/input/devices/a100_40gb.ini" --ranks 16 \
        --nodes 2 --pp auto --global-batch 64 --mem-limit 200M --recompute $rc --json >"$WORK/rc_$rc.json" 2>"$WORK/rc_$rc.err"
    eval "rc_$rc=\$?"
done
if [ "$rc_all" = 0 ] && [ "$rc_auto" = 0 ] && [ "$rc_none" = 0 ] &&
   js "$WORK/rc_all.json" 'all(("+rc" in m) == (0 < s["lo"] + i < 13)
           for k in ("osdp", "deepspeed_3d", "megatron", "fsdp", "ddp") if j[k]["fits"]
           for s in j[k]["plan"]["stages"] for i, m in enumerate(s["modes"]))
       and sum("+rc" in m for s in j["osdp"]["plan"]["stages"] for m in s["modes"]) == 12' &&
   python3 -c 'import json, sys
a, n, r = (json.load(open(f))["osdp"]["plan"]["step_s"] for f in sys.argv[1:4])
sys.exit(0 if a <= n * (1 + 1e-12) and a <= r * (1 + 1e-12) else 1)' "$WORK/rc_auto.json" "$WORK/rc_none.json" "$WORK/rc_all.json"; then
    ok "plan --pp auto --recompute all: the 12 attn / mlp operators recompute in every row; --recompute auto no slower than none or all"
else bad "plan --pp auto --recompute (rc $rc_all $rc_auto $rc_none)" "$WORK/rc_all.err"; fi

# -- 2. train --plan auto --pp 2: the search's stages; memory exact; losses bitwise as --plan dp on that mesh
run 4 auto_pp2 --plan auto --pp 2
line=$(grep -m1 '^--plan auto (3D search' "$WORK/auto_pp2.out")
stages=$(sed -n 's/.*stages \([0-9:,]*\), micro-batch.*/\1/p' <<< "$line")
b=$(sed -n 's/.*micro-batch \([0-9]*\) x.*/\1/p' <<< "$line")
if [ -n "$stages" ] && [ -n "$b" ]; then run 4 dp_pp2 --plan dp --pp 2 --stages "$stages" --batch "$b"; fi
done_line=$(grep '^done:' "$WORK/auto_pp2.out")
measured=$(sed -n 's/.*peak\/rank \([0-9.]* [KMG]iB\) (predicted \([0-9.]* [KMG]iB\)).*/\1=\2/p' <<< "$done_line")
if [ -n "$stages" ] && grep -q '^mesh: 4 ranks = tp 1 x dp 2 x pp 2' "$WORK/auto_pp2.out" &&
   [ -n "$measured" ] && [ "${measured%=*}" = "${measured#*=}" ] &&
   [ "$(losses "$WORK/auto_pp2.log" | wc -l)" = 3 ] && [ "$(losses "$WORK/auto_pp2.log")" = "$(losses "$WORK/dp_pp2.log")" ]; then
    ok "train --plan auto --pp 2 on 4 ranks: stages $stages, micro-batch $b; peak measured = predicted ($measured); 3 losses bitwise equal to --plan dp on the same stages"
else bad "train --plan auto --pp 2 ('$line', peaks '$measured')" "$WORK/auto_pp2.err"; fi

# -- 3. train --plan auto --pp auto: the mesh of plan --pp auto
run 4 auto_3d --plan auto --pp auto --tp auto
"$BIN" plan --model "$U" --device "$DEV" --ranks 4 --ranks-per-node 2 --seq-len 16 --global-batch 8 --pp auto --tp auto \
    --json >"$WORK/plan4.json" 2>"$WORK/plan4.err"
want=$(python3 -c 'import json,sys; m = json.load(open(sys.argv[1]))["osdp"]["mesh"]; print("PP %d x DP %d x TP %d, stages %s," % (m["pp"], m["dp"], m["tp"], m["stages"]))' "$WORK/plan4.json" 2>/dev/null)
if [ -n "$want" ] && grep -q "^--plan auto (3D search.*: $want" "$WORK/auto_3d.out" && [ "$(losses "$WORK/auto_3d.log" | wc -l)" = 3 ]; then
    ok "train --plan auto --pp auto --tp auto on 4 ranks: the mesh plan --pp auto chooses ($want), 3 steps"
else bad "train --pp auto (want '$want')" "$WORK/auto_3d.err"; grep -m1 '^--plan auto' "$WORK/auto_3d.out"; fi

# -- 4. refusals, on every rank
run 2 bad_pp_auto --plan dp --pp auto; rc=$?
if [ $rc != 0 ] && grep -q -- "--pp auto needs --plan auto" "$WORK/bad_pp_auto.err" && [ ! -e "$WORK/bad_pp_auto.log" ]; then
    ok "train --pp auto --plan dp refused (exit $rc), naming --plan auto"
else bad "--pp auto with --plan dp (rc $rc)" "$WORK/bad_pp_auto.err"; fi
"$BIN" plan --model "$U" --device "$DEV" --ranks 4 --pp auto --stages 0:3,3:6 >/dev/null 2>"$WORK/bad_stages.err"; rc=$?
if [ $rc != 0 ] && grep -q -- "--stages with --pp auto" "$WORK/bad_stages.err"; then
    ok "plan --pp auto --stages refused (exit $rc)"
else bad "plan --pp auto --stages (rc $rc)" "$WORK/bad_stages.err"; fi

summary test_planner_3d

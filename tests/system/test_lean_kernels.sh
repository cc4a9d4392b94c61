#!/bin/bash
# Issue 31: the tiled attention and the fused linear + cross-entropy head (the
# default) against the naive ones (--attention naive --head naive, the
# reference): 20 steps of the tiny model (T 64: one attention tile, one chunk
# of logits) and of bench_l6_d256 (T 128: two tiles, two chunks) on 1 rank and
# on 4 ranks as tp 2 x dp 2 (vocab-parallel head), every step's loss within
# 1e-5; and the options' errors.  Run by `make check`.
set -u
. "$(dirname "$0")/../lib/test_lib.sh" lean-kernels-work

# run NAME RANKS ARGS...: a $STEPS-step training run, its log in $WORK/NAME.log
run() {
    local name=$1 n=$2; shift 2
    "$MPIEXEC" -n "$n" "$BIN" train --steps $STEPS --threads 1 --quiet --log "$WORK/$name.log" "$@" > "$WORK/$name.out" 2>&1
}

# within LOG_A LOG_B: every step's loss within 1e-5, the largest difference in $worst
within() {
    worst=$(paste <(field "$1" loss) <(field "$2" loss) |
            awk -v steps="$STEPS" '{ d = $1 - $2; if (d < 0) d = -d; if (d > w) w = d; n++ } END { if (n != steps) print "steps=" n; else printf "%.3g\n", w }')
    awk -v w="$worst" 'BEGIN { exit !(w ~ /^[0-9.e+-]+$/ && w + 0 <= 1e-5) }'
}

# 20 steps of each model: issue 31's measure of the drift over many updates
for model in "tiny 20 --batch 4" "bench_l6_d256 20 --batch 1"; do
    set -- $model
    name=$1 STEPS=$2; shift 2
    for mesh in "1 --plan dp" "4 --plan dp --tp 2"; do
        set -- $mesh "$@"
        n=$1; shift
        tag="${name}_$n"
        run "${tag}_naive" "$n" --model "$SRC/input/models/$name.ini" --attention naive --head naive "$@" \
            || { bad "$name on $n ranks, naive" "$WORK/${tag}_naive.out"; continue; }
        run "${tag}_lean" "$n" --model "$SRC/input/models/$name.ini" "$@" \
            || { bad "$name on $n ranks, tiled and fused" "$WORK/${tag}_lean.out"; continue; }
        if within "$WORK/${tag}_lean.log" "$WORK/${tag}_naive.log"; then
            ok "$name on $n ranks ($*): $STEPS losses of the tiled attention and the fused head within 1e-5 of the naive (largest difference $worst)"
        else
            bad "$name on $n ranks ($*): losses differ by $worst"
        fi
        set -- $model; shift 2
    done
done

# the log's config record names the kernels that ran: the defaults, the reference, and each option alone
kernels() { echo "$(config_field "$1" attention) $(config_field "$1" head)"; }
STEPS=1
run mixed_attn 1 --model "$SRC/input/models/tiny.ini" --attention naive || bad "--attention naive alone" "$WORK/mixed_attn.out"
run mixed_head 1 --model "$SRC/input/models/tiny.ini" --head naive || bad "--head naive alone" "$WORK/mixed_head.out"
got="$(kernels "$WORK/tiny_1_lean.log") / $(kernels "$WORK/tiny_1_naive.log") / $(kernels "$WORK/mixed_attn.log") / $(kernels "$WORK/mixed_head.log")"
[ "$got" = "tiled fused / naive naive / naive fused / tiled naive" ] \
    && ok "the log's config names the kernels that ran: attention= head= ($got)" \
    || bad "the config's attention and head: $got, expected tiled fused / naive naive / naive fused / tiled naive"

# the options: a bad word is refused naming the option; the fused head cannot be split
if "$BIN" train --steps 1 --attention flash > "$WORK/bad.out" 2>&1; then
    bad "--attention flash was accepted"
else
    grep -q -- "--attention" "$WORK/bad.out" && ok "--attention flash refused, naming the option" || bad "--attention flash: no message naming it" "$WORK/bad.out"
fi
# a plan file that splits the fused head is refused, naming --head naive; --split 2 leaves it whole
printf 'default = dp\nhead = 2/2\n' > "$WORK/head.plan"
if "$BIN" train --model "$M" --steps 1 --plan "$WORK/head.plan" > "$WORK/split.out" 2>&1; then
    bad "a plan splitting the fused head was accepted"
else
    grep -q -- "--head naive" "$WORK/split.out" && ok "a plan splitting the fused head refused, saying --head naive" \
        || bad "a plan splitting the fused head: no message naming --head" "$WORK/split.out"
fi
"$BIN" train --model "$M" --steps 1 --plan "$WORK/head.plan" --head naive --quiet > "$WORK/split_naive.out" 2>&1 \
    && ok "the same plan with --head naive splits the naive head" || bad "head = 2/2 with --head naive" "$WORK/split_naive.out"
"$BIN" train --model "$M" --steps 1 --plan zdp --split 2 --quiet > "$WORK/split_zdp.out" 2>&1 \
    && ok "--plan zdp --split 2 leaves the fused head whole" || bad "--plan zdp --split 2" "$WORK/split_zdp.out"
summary "lean kernels"

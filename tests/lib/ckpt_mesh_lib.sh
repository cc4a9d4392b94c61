# Sourced by the checkpoint tests on a mesh (test_checkpoint_mesh.sh,
# test_checkpoint_pipeline.sh), after test_lib.sh: the HDF5 tools they read files
# with, their model, a training run, losses from a log, attributes and
# tensors of a checkpoint.
unset OSDP_CKPT_MPIO OSDP_CKPT_CRASH_AT OSDP_CKPT_CRASH_STEP OSDP_CKPT_CRASH_RANK OSDP_CKPT_MAX_ELEMS \
      OSDP_CKPT_FLETCHER32 OSDP_VOCAB_QUANTUM
for tool in h5dump h5ls h5diff timeout; do
    command -v $tool > /dev/null || { echo "SKIP: $tool not found (HDF5 tools: apt-get install hdf5-tools)"; exit 77; }
done

# 6 operators: up to 6 pipeline stages; 4 heads: tp 1, 2 and 4 all divide them
U="$WORK/t_mesh.ini"
printf '[model]\nname = t_mesh\nn_layer = 2\nn_head = 4\nn_embd = 32\nvocab = 256\nctx = 32\n' > "$U"
OPS="embed attn.0 mlp.0 attn.1 mlp.1 head"
run() {   # run NRANKS NAME [train options...]: writes $WORK/NAME.{out,err,log}
    local n=$1 name=$2; shift 2
    timeout 300 "$MPIEXEC" -n "$n" "$BIN" train --model "$U" --data "$DATA" --threads 1 --peak-flops 1e9 --seq-len 16 \
        --plan dp --log "$WORK/$name.log" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
}

# losses_from LOG FROM KEY: KEY (loss, loss_hex, ...) of the steps >= FROM, one a line
losses_from() { grep '^step=' "$1" | awk -v k="$2" '{split($1, a, "="); if (a[2] >= k) print}' |
                sed -n "s/.* $3=\([^ ]*\).*/\1/p"; }
within() {   # within A B FROM: the losses of steps >= FROM agree within 1e-5 relative (3 of them)
    paste -d' ' <(losses_from "$1" "$3" loss) <(losses_from "$2" "$3" loss) |
        awk 'NF==2 {n++; d=$1-$2; if (d<0) d=-d; if (!(d <= 1e-5*$1)) exit 1} END {exit n!=3}'
}
# attr FILE PATH: a scalar attribute's value (a number, or a string without its quotes)
attr() { h5dump -a "/$2" "$1" | sed -n 's/.*(0): "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' | head -1; }
export_model() {   # export CKPT OUT: /model in layout order (operators, then op_offset)
    : > "$2"
    for op in $OPS; do
        for t in $(h5ls "$1/model/$op" | awk '{print $1}'); do echo "$(attr "$1" "model/$op/$t/op_offset") $t"; done |
            sort -n | while read -r _ t; do
                h5dump -d "/model/$op/$t" -b LE -o "$WORK/piece.bin" "$1" > /dev/null && cat "$WORK/piece.bin" >> "$2"
            done
    done
}
model_is_dump() {   # model_is_dump CKPT DUMP: CKPT's /model, exported, is the --dump-weights file DUMP (not empty)
    export_model "$1" "$WORK/exported.bin" && [ -s "$2" ] && cmp -s "$WORK/exported.bin" "$2"
}
same_file() {   # same_file A B: every dataset and attribute of /model and /optim equal
    h5diff -q "$1" "$2" /model /model && h5diff -q "$1" "$2" /optim /optim
}

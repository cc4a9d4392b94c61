#!/bin/bash
# Checkpoints on a device mesh (issue 14, DESIGN.md §6, §9) with the real
# binary on real MPI ranks: files hold the logical tensors whatever the mesh
# that wrote them, so
#   1. a TP 2 x DP 2 save has the logical shapes, the mesh attributes, and
#      its /model is the run's --dump-weights (logical too), collective MPI-IO
#   2. it resumes bitwise on the same mesh and plan, and within 1e-5 of the
#      uninterrupted run on TP 1 x DP 4 and TP 4 x DP 1 (the mesh printed)
#   3. loaded on another mesh (and a padded vocabulary: OSDP_VOCAB_QUANTUM)
#      and saved again, every dataset and checksum is identical (h5diff)
#   4. --init-from of the TP 2 save on TP 1 and TP 4 starts from its weights exactly
#   5. bad combinations: a clear message naming the option, non-zero exit
# Run by `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC).
set -u
. "$(dirname "$0")/../lib/test_lib.sh" checkpoint-mesh-work
. "$(dirname "$0")/../lib/ckpt_mesh_lib.sh"   # the model (4 heads), run, losses_from, within, attr, export_model, model_is_dump, same_file

# -- 1. TP 2 x DP 2, a save at step 3 with collective MPI-IO (one: a collective save takes ~10 s of
#       CPU on 4 oversubscribed ranks), in the schedule of the uninterrupted 6-step run (part 2)
A="$WORK/A"
run 4 full --tp 2 --batch 2 --global-batch 8 --steps 3 --lr-steps 6 --ckpt-dir "$A" --dump-weights "$WORK/full.bin" \
    || bad "TP 2 x DP 2 run with a save" "$WORK/full.err"
C3="$A/step_00000003.h5"
names=$(h5ls -r "$C3")
if echo "$names" | grep -q '^/model/embed/wte *Dataset {256, 32}' &&
   echo "$names" | grep -q '^/model/attn.0/qkv.weight *Dataset {32, 96}' &&
   echo "$names" | grep -q '^/optim/m/mlp.1/fc.weight *Dataset {32, 128}' &&
   echo "$names" | grep -q '^/optim/v/head/lm_head.weight *Dataset {32, 256}' &&
   [ "$(attr "$C3" mesh_tp) $(attr "$C3" mesh_dp) $(attr "$C3" mesh_pp) $(attr "$C3" n_ranks)" = "2 2 1 4" ]; then
    ok "TP 2 x DP 2 save: logical shapes (wte 256 x 32, qkv 32 x 96, lm_head 32 x 256), mesh_tp 2, mesh_dp 2, mesh_pp 1"
else bad "logical shapes / mesh attributes: $(attr "$C3" mesh_tp) $(attr "$C3" mesh_dp)"; echo "$names" | head -5; fi
export_model "$C3" "$WORK/exp3.bin"
model_is_dump "$C3" "$WORK/full.bin" \
    && ok "TP 2 x DP 2: /model exported with h5dump = --dump-weights of the run ($(stat -c %s "$WORK/full.bin") bytes)" \
    || bad "h5dump export of the TP 2 save differs from --dump-weights"

# the rest with independent MPI-IO (collective rounds are slow on oversubscribed cores)
export OSDP_CKPT_MPIO=independent

# -- 2. resume on the same mesh (bitwise) and on others (within 1e-5), from step 3, against the
#       uninterrupted run (its steps 1-3 bitwise those of the run that saved)
run 4 ref --tp 2 --batch 2 --global-batch 8 --steps 6 || bad "TP 2 x DP 2 uninterrupted run" "$WORK/ref.err"
[ "$(losses_from "$WORK/ref.log" 1 loss_hex | head -3)" = "$(losses_from "$WORK/full.log" 1 loss_hex)" ] \
    || bad "the saved run's steps 1-3 differ from the uninterrupted run's" "$WORK/ref.err"
run 4 same --tp 2 --steps 6 --resume "$C3" || bad "resume on TP 2 x DP 2 ran" "$WORK/same.err"
[ "$(losses_from "$WORK/same.log" 4 loss_hex)" = "$(losses_from "$WORK/ref.log" 4 loss_hex)" ] &&
    [ -n "$(losses_from "$WORK/same.log" 4 loss_hex)" ] \
    && ok "TP 2 x DP 2 -> TP 2 x DP 2, same plan: steps 4-6 bitwise ($(losses_from "$WORK/same.log" 4 loss_hex | tr '\n' ' '))" \
    || bad "resume on the same mesh is not bitwise" "$WORK/same.err"
for tp in 1 4; do
    dp=$((4 / tp))
    run 4 "mesh_$tp" --tp $tp --steps 6 --resume "$C3" --ckpt-dir "$WORK/R$tp" || bad "resume on TP $tp ran" "$WORK/mesh_$tp.err"
    if within "$WORK/ref.log" "$WORK/mesh_$tp.log" 4 &&
       grep -q "resuming a tp 2 x dp 2 checkpoint on tp $tp x dp $dp" "$WORK/mesh_$tp.out"; then
        ok "TP 2 x DP 2 -> TP $tp x DP $dp: steps 4-6 within 1e-5 of the uninterrupted run (the mesh printed)"
    else bad "resume TP 2 x DP 2 -> TP $tp x DP $dp" "$WORK/mesh_$tp.err"
         paste <(losses_from "$WORK/ref.log" 4 loss) <(losses_from "$WORK/mesh_$tp.log" 4 loss) | sed 's/^/    /'; fi
done

# -- 3. loaded on another mesh and saved again: the same file content
resave() {   # resave NAME NRANKS [options]: load step 3, save it into $WORK/NAME, dump its weights
    local name=$1 n=$2; shift 2
    run "$n" "$name" --steps 3 --resume "$C3" --ckpt-dir "$WORK/$name" --dump-weights "$WORK/$name.bin" "$@" &&
        same_file "$C3" "$WORK/$name/step_00000003.h5" && cmp -s "$WORK/$name.bin" "$WORK/exp3.bin"
}
resave re_tp4 4 --tp 4 && ok "TP 2 x DP 2 -> TP 4 x DP 1 -> saved again: /model, /optim/m, /optim/v identical (h5diff), dump = export" \
    || bad "re-save on TP 4 x DP 1" "$WORK/re_tp4.err"
resave re_tp1 2 --tp 1 --batch 4 && ok "TP 2 x DP 2 -> TP 1 x DP 2 -> saved again: identical" \
    || bad "re-save on TP 1 x DP 2" "$WORK/re_tp1.err"
# a padded vocabulary: OSDP_VOCAB_QUANTUM=7 pads 256 to 266 at TP 2 (a multiple of 2 x 7), to 259 at TP 1
OSDP_VOCAB_QUANTUM=7 resave re_pad2 4 --tp 2 \
    && ok "TP 2 x DP 2, vocabulary padded (OSDP_VOCAB_QUANTUM=7: 266 rows): loaded and saved again, identical" \
    || bad "re-save with a padded vocabulary at TP 2" "$WORK/re_pad2.err"
OSDP_VOCAB_QUANTUM=7 resave re_pad1 1 --tp 1 --batch 8 \
    && ok "TP 1, vocabulary padded (259 rows): loaded and saved again, identical" \
    || bad "re-save with a padded vocabulary at TP 1" "$WORK/re_pad1.err"
OSDP_VOCAB_QUANTUM=7 run 4 pad_mesh --tp 2 --steps 6 --resume "$C3" || bad "padded resume ran" "$WORK/pad_mesh.err"
within "$WORK/ref.log" "$WORK/pad_mesh.log" 4 \
    && ok "padded vocabulary, TP 2 x DP 2: steps 4-6 within 1e-5 of the unpadded run" \
    || bad "padded vocabulary resume" "$WORK/pad_mesh.err"

# -- 4. --init-from the TP 2 save on TP 1: its weights, step 0
run 1 init --tp 1 --batch 8 --steps 0 --init-from "$C3" --dump-weights "$WORK/init.bin" || bad "init-from ran" "$WORK/init.err"
cmp -s "$WORK/init.bin" "$WORK/exp3.bin" && ok "--init-from of the TP 2 x DP 2 save on TP 1 x DP 1: the weights exactly" \
    || bad "--init-from on TP 1" "$WORK/init.err"
run 4 init_tp4 --tp 4 --batch 8 --steps 0 --init-from "$C3" --dump-weights "$WORK/init_tp4.bin" \
    || bad "init-from on TP 4 ran" "$WORK/init_tp4.err"
cmp -s "$WORK/init_tp4.bin" "$WORK/exp3.bin" \
    && ok "--init-from of the TP 2 x DP 2 save on TP 4 x DP 1: the weights exactly (its dump assembles 4 parts)" \
    || bad "--init-from on TP 4" "$WORK/init_tp4.err"

# -- 5. bad combinations: refused on every rank with the option named
expect_error() {   # expect_error NAME PATTERN NRANKS [options]
    local name=$1 pattern=$2 n=$3; shift 3
    if ! run "$n" "$name" "$@" && grep -q -- "$pattern" "$WORK/$name.err"; then ok "refused: $(grep -m1 error "$WORK/$name.err")"
    else bad "$name: expected an error matching '$pattern'" "$WORK/$name.err"; fi
}
expect_error bad_tp3 "--tp 3 .*does not divide the 4 ranks" 4 --tp 3 --steps 6 --resume "$C3"
expect_error bad_heads "--tp 8 does not divide the model's 4 attention heads" 8 --tp 8 --steps 6 --resume "$C3"
printf '[model]\nname = other\nn_layer = 2\nn_head = 4\nn_embd = 64\nvocab = 256\nctx = 32\n' > "$WORK/other.ini"
expect_error bad_model "the model description differs" 4 --tp 2 --steps 6 --resume "$C3" --model "$WORK/other.ini"

summary "tp checkpoint tests"

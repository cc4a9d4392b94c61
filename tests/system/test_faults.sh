#!/bin/bash
# Faults during a save (issue 33), on real ranks:
#   1. a full disk (a small tmpfs mounted here) during a save on 1, 2 and 4
#      ranks, the free-space check off so that the writes themselves fail:
#      every rank exits non-zero within BOUND seconds with one message naming
#      the file and the cause, no temporary or partial checkpoint remains,
#      `latest` names the last good save, and a resume from it continues the
#      losses of an uninterrupted run bit for bit;
#   2. the same disk with the check on: refused before the first byte, naming
#      the space needed; with --on-write-error continue: a warning per step,
#      exit 0, `latest` unchanged;
#   3. --log on a full disk: an error naming the file and the cause;
#   4. a rank stopped (SIGSTOP) in the middle of a save, OSDP_COMM_TIMEOUT_S
#      short: the others end the job within the timeout (plus the launcher's
#      teardown) with a message naming the save and what was pending; the
#      previous save intact;
#   5. scripts/osdp_weights.py: a full disk, a missing directory, an llm.c
#      file a byte short, a model osdp_gpt refuses, an HF file with more
#      layers than the model: one line, a status, no traceback, no .tmp.
# Needs to mount a tmpfs (root): otherwise SKIP (77) and why.  Run by
# `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC set).
set -u
. "$(dirname "$0")/../lib/test_lib.sh" faults-work
BOUND=40                # seconds: "every rank gone", with room for a loaded machine
MNT="$WORK/mnt"
mkdir -p "$MNT"
# 2 saves of t_small fit (0.57 MB each), the third does not
if ! mount -t tmpfs -o size=1300k tmpfs "$MNT" 2> "$WORK/mount.err"; then
    echo "SKIP: cannot mount a tmpfs for the full disk ($(head -1 "$WORK/mount.err")): run as root"
    exit 77
fi
trap 'umount "$MNT" 2> /dev/null' EXIT

# train N NAME [options]: the job's status in $rc, its seconds in $secs
train() {
    local n=$1 name=$2 t0; shift 2
    t0=$(date +%s.%N)
    timeout -s KILL 120 "$MPIEXEC" -n "$n" "$BIN" train --model "$M" --data "$DATA" --threads 1 --peak-flops 1e9 \
        --plan zdp --batch 2 --quiet "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
    rc=$?
    secs=$(awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.1f", t1 - t0 }')
}
# fresh_disk: the tmpfs emptied
fresh_disk() { rm -rf "${MNT:?}"/*; }
# intact DIR STEP: `latest` names step STEP's save, nothing temporary or later is left
intact() {
    local dir=$1 step=$2 name extra
    name=$(printf 'step_%08d.h5' "$step")
    extra=$(cd "$dir" && ls | grep -v -x -e latest -e 'step_0000000[0-9].h5' ; cd "$dir" && ls | grep '\.tmp$')
    [ "$(cat "$dir/latest" 2> /dev/null)" = "$name" ] && [ -f "$dir/$name" ] && [ -z "$extra" ] &&
        [ ! -e "$dir/$(printf 'step_%08d.h5' $((step + 1)))" ]
}
# one message, naming the file and the cause
named() {   # named NAME FILE CAUSE
    [ "$(grep -c 'error: ' "$WORK/$1.err")" -ge 1 ] && grep 'error: ' "$WORK/$1.err" | grep -q -- "$2" &&
        grep 'error: ' "$WORK/$1.err" | grep -q -- "$3"
}

# -- 1. the writes fail: 1, 2, 4 ranks
for n in 1 2 4; do
    fresh_disk
    OSDP_CKPT_SPACE_CHECK=0 train $n full_$n --steps 6 --save-every 1 --ckpt-dir "$MNT/ck"
    if [ $rc != 0 ] && [ $rc != 137 ] && awk -v s="$secs" -v b=$BOUND 'BEGIN { exit !(s <= b) }'; then
        ok "full disk on $n rank(s): the job ends in $secs s, status $rc"
    else bad "full disk on $n rank(s): status $rc after $secs s" "$WORK/full_$n.err"; fi
    named full_$n "step_00000003.h5" "No space left on device" &&
        ok "full disk on $n rank(s): the message names the file and the cause: $(grep -m1 -o 'cannot write dataset [^:]*' "$WORK/full_$n.err")" ||
        bad "full disk on $n rank(s): no message naming the file and the cause" "$WORK/full_$n.err"
    ! grep -q -i "segmentation\|signal 11" "$WORK/full_$n.err" "$WORK/full_$n.out" &&
        ok "full disk on $n rank(s): no crash" || bad "full disk on $n rank(s): a crash" "$WORK/full_$n.err"
    intact "$MNT/ck" 2 && ok "full disk on $n rank(s): latest = step 2, no temporary or partial file" ||
        bad "full disk on $n rank(s): the directory holds $(ls "$MNT/ck" | tr '\n' ' '), latest $(cat "$MNT/ck/latest")"
    # the last good save resumes exactly
    train $n ref_$n --steps 4 --log "$WORK/ref_$n.log"
    train $n resume_$n --steps 4 --resume "$MNT/ck/step_00000002.h5" --ckpt-dir "$WORK/resumed_$n" --log "$WORK/resume_$n.log"
    want=$(losses "$WORK/ref_$n.log" | tail -2 | tr '\n' ' '); got=$(losses "$WORK/resume_$n.log" | tr '\n' ' ')
    [ $rc = 0 ] && [ -n "$got" ] && [ "$want" = "$got" ] &&
        ok "full disk on $n rank(s): the resume from step 2 continues bit for bit ($got)" ||
        bad "full disk on $n rank(s): resume rc $rc, losses '$got', uninterrupted '$want'" "$WORK/resume_$n.err"
done

# -- 2. the free-space check: refused before any write; --on-write-error continue goes on
fresh_disk
train 2 checked --steps 4 --save-every 1 --ckpt-dir "$MNT/ck"
[ $rc = 3 ] && named checked "step_00000003.h5" "No space left on device: it needs at least" && intact "$MNT/ck" 2 &&
    ok "full disk, checked first: refused on every rank before writing ($(grep -o -m1 'it needs.*free' "$WORK/checked.err"))" ||
    bad "full disk, checked first: status $rc" "$WORK/checked.err"
fresh_disk
train 2 goes_on --steps 4 --save-every 1 --ckpt-dir "$MNT/ck" --on-write-error continue
warned=$(grep -c "warning: the checkpoint of step [34] was not saved: .*No space left on device.*--on-write-error continue" "$WORK/goes_on.err")
[ $rc = 0 ] && [ "$warned" = 2 ] && grep -q '^done: 4 steps' "$WORK/goes_on.out" && intact "$MNT/ck" 2 &&
    ok "--on-write-error continue: 4 steps, a warning for each of the 2 failed saves, latest = step 2" ||
    bad "--on-write-error continue: status $rc, $warned warnings" "$WORK/goes_on.err"

# -- 3. --log on a full disk
fresh_disk
head -c 1200k /dev/zero > "$MNT/filler" 2> /dev/null
train 2 log_full --steps 200 --log "$MNT/run.log"
[ $rc != 0 ] && named log_full "run.log" "No space left on device" &&
    ok "--log on a full disk: status $rc, $(grep -o -m1 -- '--log .*' "$WORK/log_full.err" | cut -c1-120)" ||
    bad "--log on a full disk: status $rc, no message naming the log and the cause" "$WORK/log_full.err"
rm -f "$MNT/filler" "$MNT/run.log"

# -- 4. a rank stopped during a save
fresh_disk
TIMEOUT=3
OSDP_COMM_TIMEOUT_S=$TIMEOUT OSDP_CKPT_CRASH_AT=mid_write OSDP_CKPT_CRASH_SIGNAL=STOP OSDP_CKPT_CRASH_STEP=2 \
    train 2 stopped --steps 4 --save-every 1 --ckpt-dir "$WORK/stopped"
if [ $rc != 0 ] && [ $rc != 137 ] && awk -v s="$secs" -v b=$BOUND 'BEGIN { exit !(s <= b) }'; then
    ok "a rank stopped during the save of step 2: the job ends in $secs s (timeout $TIMEOUT s), status $rc"
else bad "a rank stopped during a save: status $rc after $secs s" "$WORK/stopped.err"; fi
what=$(grep -o -m1 "checkpoint save [^ ]*step_00000002.h5.tmp: .* did not complete within $TIMEOUT s" "$WORK/stopped.err")
[ -n "$what" ] && ok "the waiting rank names the save and the phase: ${what% did not*}" ||
    bad "no message naming the save" "$WORK/stopped.err"
intact "$WORK/stopped" 1 && ok "a rank stopped during a save: latest = step 1, no temporary file" ||
    bad "a rank stopped during a save: the directory holds $(ls "$WORK/stopped" | tr '\n' ' ')"

# -- 5. the Python converters (scripts/osdp_weights.py): one line and a status, never a traceback or a crash,
#       and no temporary left, for a full disk, a missing directory, a short llm.c file, a model or a file
#       osdp_gpt would refuse
PY=${PYTHON:-python3}
TOOL="$SRC/scripts/osdp_weights.py"
CK="$WORK/resumed_2/step_00000004.h5"
# tool NAME ARGS...: $rc; the message one line of 'error:', no traceback
tool() { local name=$1; shift; $PY "$TOOL" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"; rc=$?; }
clean_refusal() {   # clean_refusal NAME PATTERN DIR: refused with PATTERN, one line, nothing left in DIR
    local left; left=$(ls "$3" 2> /dev/null | grep -c '\.tmp$')
    [ $rc != 0 ] && [ $rc -lt 128 ] && [ "$(wc -l < "$WORK/$1.err")" = 1 ] && grep -q -- "error: .*$2" "$WORK/$1.err" &&
        [ "$left" = 0 ] && ok "osdp_weights $1: status $rc, $(cut -c1-110 "$WORK/$1.err")" ||
        bad "osdp_weights $1: status $rc, $left temporaries" "$WORK/$1.err"
}
if ! $PY -c "import numpy, h5py, safetensors" 2> /dev/null; then
    echo "SKIP: osdp_weights.py cases: needs numpy, h5py, safetensors"
elif [ ! -f "$CK" ]; then
    bad "no checkpoint for the osdp_weights.py cases ($CK)"
else
    tool hf export-hf "$CK" --out "$WORK/hf" && [ $rc = 0 ] || bad "export-hf" "$WORK/hf.err"
    fresh_disk
    head -c 1200k /dev/zero > "$MNT/filler" 2> /dev/null
    tool hf_full export-hf "$CK" --out "$MNT/hf"
    clean_refusal hf_full "No space left on device" "$MNT/hf"
    [ ! -e "$MNT/hf" ] && ok "export-hf on a full disk leaves no directory behind (it made it)" ||
        bad "export-hf on a full disk left $(ls -A "$MNT/hf" | tr '\n' ' ') in the directory it made"
    tool import_full import-hf "$WORK/hf/model.safetensors" --model "$M" --out "$MNT/w.h5"
    clean_refusal import_full "No space left on device" "$MNT"
    rm -f "$MNT/filler"
    tool no_dir import-hf "$WORK/hf/model.safetensors" --model "$M" --out "$WORK/no/such/dir/w.h5"
    clean_refusal no_dir "does not exist" "$WORK"
    printf '[model]\nname=bad\nn_layer=2\nn_head=3\nn_embd=64\nvocab=256\nctx=32\n' > "$WORK/heads.ini"
    tool heads import-hf "$WORK/hf/model.safetensors" --model "$WORK/heads.ini" --out "$WORK/heads.h5"
    clean_refusal heads "n_head = 3 does not divide the width 64" "$WORK"
    $PY - "$WORK/hf/model.safetensors" "$WORK/three.safetensors" <<'PYEOF'
import sys
from safetensors.numpy import load_file, save_file
st = load_file(sys.argv[1])
st.update({k.replace("h.1.", "h.2."): v for k, v in st.items() if k.startswith("transformer.h.1.")})
save_file(st, sys.argv[2])
PYEOF
    tool layers import-hf "$WORK/three.safetensors" --model "$M" --out "$WORK/layers.h5"
    clean_refusal layers "the file has 3 layers" "$WORK"
    printf '[model]\nname=tied\nn_layer=2\nn_head=2\nn_embd=32\nvocab=256\nctx=32\ntied_head=true\n' > "$WORK/tied.ini"
    $PY - "$TOOL" "$WORK/tied.ini" "$WORK/short.bin" <<'PYEOF'
import sys, importlib.util
import numpy as np
spec = importlib.util.spec_from_file_location("w", sys.argv[1]); w = importlib.util.module_from_spec(spec)
spec.loader.exec_module(w)
m = w.Model(open(sys.argv[2]).read(), sys.argv[2])
vp, layout = w.llmc_layout(m)
h = np.zeros(256, dtype="<i4"); h[:8] = [w.LLMC_MAGIC, w.LLMC_VERSION, m.ctx, m.vocab, m.n_layer, m.n_head, m.n_embd, vp]
n = sum(int(np.prod(s)) for s, _ in layout)
open(sys.argv[3], "wb").write((h.tobytes() + np.zeros(n, dtype="<f4").tobytes())[:-1])
PYEOF
    tool short import-llmc "$WORK/short.bin" --model "$WORK/tied.ini" --out "$WORK/short.h5"
    clean_refusal short "bytes of parameters, the header's sizes need" "$WORK"
fi

summary test_faults

#!/bin/bash
# The hang paths of the MPI communication backend on real ranks: 4 ranks
# train with OSDP_COMM_TIMEOUT_S=3 and, once steps are being logged, one rank
#   1. is stopped (SIGSTOP: it hangs without dying, as a rank stuck in a
#      driver call or swapping does): the others must give up on the
#      collective they wait for within the timeout, print which collective
#      was pending, and end the job (MPI_Abort) — every rank gone, the
#      launcher's status non-zero, within BOUND seconds of the stop;
#   2. is killed (SIGKILL): the job must end within BOUND seconds with a
#      non-zero status and a message (the launcher's, or the timeout's);
#   3. (tests/comm/test_agree) arrives late at the ranks' agreement on a status,
#      the host-side all-reduce after every step: a stop landing between the
#      step's last collective and it must time out there too, not hang.
#   4. `osdp_gpt profile` on 2 ranks, one of them out of memory alone (a real
#      limit: `ulimit -d` on rank 1 only, an MPMD launch): in the network's
#      figures (the p2p message's buffer) and in the operators' timing passes
#      (the model's weights and activations): every rank exits with the
#      out-of-memory status (2) within BOUND s, the default 600 s timeout
#      untouched (before the ranks agreed there, the others waited in a
#      barrier until it), the message once, naming rank 1; no device file.
# Without the timeout the first case waits until the job's time limit.
# Run by `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC set); runs serially.
set -u
. "$(dirname "$0")/../lib/test_lib.sh" hang-work
TIMEOUT=3 BOUND=40

# rank_pids LAUNCHER_PID: the osdp_gpt processes below the launcher
# (each /proc/PID/stat read on its own: on a busy machine a process ends between the listing and the
# read, and mawk stops at the first file it cannot open, so one awk over them all found no child at all)
rank_pids() {
    local parent=$1 stat line pid
    for stat in /proc/[0-9]*/stat; do
        { read -r line < "$stat"; } 2> /dev/null || continue
        line=${line##*) }   # after the command name (which may hold spaces): state, then the parent's pid
        line=${line#* }
        [ "${line%% *}" = "$parent" ] || continue
        pid=${stat#/proc/}; pid=${pid%/stat}
        # the binary re-executes itself (as "exe"): match its first argument
        if [ "$(tr '\0' '\n' < "/proc/$pid/cmdline" 2> /dev/null | head -1)" = "$BIN" ]; then echo "$pid"
        else rank_pids "$pid"; fi
    done
}

# hang_case NAME SIGNAL
hang_case() {
    local name=$1 sig=$2 launcher victim t0 elapsed rc i why pid what
    OSDP_COMM_TIMEOUT_S=$TIMEOUT "$MPIEXEC" -n 4 "$BIN" train --data "$DATA" --model "$M" --threads 1 \
        --peak-flops 1e9 --plan zdp --batch 2 --steps 1000000 --log "$WORK/$name.log" \
        > "$WORK/$name.out" 2> "$WORK/$name.err" &
    launcher=$!
    for i in $(seq 600); do   # up to 60 s for the first logged steps
        [ "$(grep -s -c '^step=' "$WORK/$name.log")" -ge 3 ] 2> /dev/null && break
        sleep 0.1
    done
    victim=$(rank_pids "$launcher" | tail -1)
    if [ -z "$victim" ] || ! kill -0 "$launcher" 2> /dev/null; then
        bad "$name: the 4-rank run did not start" "$WORK/$name.err"
        kill "$launcher" 2> /dev/null; wait "$launcher" 2> /dev/null
        return
    fi
    t0=$(date +%s.%N)
    kill "-$sig" "$victim"
    for _ in $(seq $((BOUND * 10))); do kill -0 "$launcher" 2> /dev/null || break; sleep 0.1; done
    elapsed=$(awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { print t1 - t0 }')
    if kill -0 "$launcher" 2> /dev/null; then
        bad "$name: the job still runs $BOUND s after SIG$sig of one rank" "$WORK/$name.err"
        kill -KILL "$victim" 2> /dev/null
        for pid in $(rank_pids "$launcher"); do kill -KILL "$pid" 2> /dev/null; done
        kill -KILL "$launcher" 2> /dev/null
        wait "$launcher" 2> /dev/null
        return
    fi
    wait "$launcher"; rc=$?
    kill -KILL "$victim" 2> /dev/null   # a stopped rank the launcher left (it should not)
    printf '%s: SIG%s -> job ended after %.1f s, status %d\n' "$name" "$sig" "$elapsed" "$rc"
    [ "$rc" != 0 ] && ok "$name: SIG$sig of one of 4 ranks ends the job in $(printf %.1f "$elapsed") s (bound $BOUND s), status $rc" \
        || bad "$name: the job ended with status 0 after SIG$sig of a rank" "$WORK/$name.err"
    if [ "$sig" = STOP ]; then
        # the pending collective: one of the runtime's (with its size and
        # number) or the per-step stop-signal check
        what=$(grep -o -m1 "MPI [a-z-]* of .* did not complete within $TIMEOUT s (OSDP_COMM_TIMEOUT_S)" "$WORK/$name.err")
        if [ -n "$what" ]; then
            ok "$name: a waiting rank names the pending collective: ${what% did not complete*}"
        else
            bad "$name: no time-out message naming the pending collective" "$WORK/$name.err"
        fi
    else
        # the launcher's words (MPICH: "... EXIT STRING: Killed (signal 9)", on stdout) or the timeout's
        why=$(cat "$WORK/$name.out" "$WORK/$name.err" | grep -i -m1 -E "signal 9|killed|terminat|did not complete")
        [ -n "$why" ] && ok "$name: the job log says why: $why" \
            || bad "$name: no message after a rank was killed" "$WORK/$name.err"
    fi
}

hang_case stop STOP
hang_case kill KILL

# oom_case NAME MODEL LIMIT_KB PATTERN [profile options]: profile on 2 ranks, rank 1 under `ulimit -d LIMIT_KB`
oom_case() {
    local name=$1 model=$2 kb=$3 pattern=$4 launcher t0 elapsed pid r rcs="" count; shift 4
    local args=(profile --model "$model" --threads 1 --reps 1 --out "$WORK/$name.device.ini" "$@")
    t0=$(date +%s.%N)
    "$MPIEXEC" -n 1 bash "$WORK/rank.sh" "$WORK/$name.rc0" 0 "$BIN" "${args[@]}" \
        : -n 1 bash "$WORK/rank.sh" "$WORK/$name.rc1" "$kb" "$BIN" "${args[@]}" > "$WORK/$name.out" 2> "$WORK/$name.err" &
    launcher=$!
    for _ in $(seq $((BOUND * 10))); do kill -0 "$launcher" 2> /dev/null || break; sleep 0.1; done
    elapsed=$(awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.1f", t1 - t0 }')
    if kill -0 "$launcher" 2> /dev/null; then
        bad "$name: profile still runs $BOUND s after starting, one rank out of memory" "$WORK/$name.err"
        for pid in $(rank_pids "$launcher"); do kill -KILL "$pid" 2> /dev/null; done
        kill -KILL "$launcher" 2> /dev/null
        wait "$launcher" 2> /dev/null
        return
    fi
    wait "$launcher"
    for r in 0 1; do rcs="$rcs $(cat "$WORK/$name.rc$r" 2> /dev/null || echo none)"; done
    count=$(grep -c 'error: ' "$WORK/$name.err")
    [ "$rcs" = " 2 2" ] && ok "$name: every rank exits with status 2 (statuses$rcs) in $elapsed s (bound $BOUND s)" ||
        bad "$name: rank statuses$rcs after $elapsed s" "$WORK/$name.err"
    [ "$count" = 1 ] && grep -q "error: rank 1: $pattern" "$WORK/$name.err" &&
        ok "$name: the message once: $(grep -o -m1 "rank 1: .*" "$WORK/$name.err" | cut -c1-110)" ||
        bad "$name: $count error lines, none 'rank 1: $pattern'" "$WORK/$name.err"
    [ ! -e "$WORK/$name.device.ini" ] && ok "$name: no device file written" || bad "$name: a device file was written"
}
# rank.sh RC_FILE LIMIT_KB COMMAND...: COMMAND under `ulimit -d LIMIT_KB` (0: none), its status into RC_FILE
printf '%s\n' '#!/bin/bash' 'rc_file=$1 kb=$2; shift 2' '[ "$kb" = 0 ] || ulimit -d "$kb"' '"$@"; echo $? > "$rc_file"' \
    > "$WORK/rank.sh"
# the limit: above a rank's start (MPI, UCX, BLAS: 150-200 MB here; 150 MB stops MPI itself) and the stage's
# other buffers, below the buffer that fails (each at least 240 MB above the limit, untouched where it fits)
#   p2p: the message of micro-batch 8, 8 T d fp32 = 268 MB; the collectives before it about 25 MB
printf '[model]\nname = oom_p2p\nn_layer = 1\nn_head = 2\nn_embd = 512\nvocab = 256\nctx = 16384\n' > "$WORK/oom_p2p.ini"
#   the timing passes at micro-batch 1: 16 blocks' activations of T 8192, about 540 MB; the messages 17 MB
printf '[model]\nname = oom_passes\nn_layer = 16\nn_head = 2\nn_embd = 64\nvocab = 256\nctx = 8192\n' > "$WORK/oom_passes.ini"
# AddressSanitizer (scripts/sanitize_check) reserves terabytes of shadow memory at start: under ulimit -d the
# rank cannot start, so these two cases run on plain builds only
if sed -n 's/^CFLAGS = //p' "$BUILD/Makefile" 2> /dev/null | grep -q -- '-fsanitize=address'; then
    echo "NOTE: profile out of memory on one rank: not run under AddressSanitizer (its shadow memory does not fit ulimit -d)"
else
    oom_case oom_p2p "$WORK/oom_p2p.ini" 320000 "profile: out of memory for a 268435456-byte message"
    oom_case oom_passes "$WORK/oom_passes.ini" 400000 "profile: out of memory for the model's weights and activations at micro-batch 1"
fi

if OSDP_COMM_TIMEOUT_S=1 "$MPIEXEC" -n 4 "$BUILD/tests/comm/test_agree" > "$WORK/agree.out" 2>&1 &&
   [ "$(grep -c '^100%' "$WORK/agree.out")" = 4 ]; then
    ok "agreement: every rank gets the lowest failing rank's status, and rank 0's plan or its failure (osdp_plan_broadcast); a peer 3 s late makes the others give up after the 1 s timeout with a message naming the agreement; the MPI backend's bf16 sum (widened, added in fp32, rounded) on pairs and on 4 ranks; a call of more than INT_MAX elements refused on every rank, naming it"
else bad "the ranks' agreement with a late peer" "$WORK/agree.out"; fi
summary test_hang

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

if OSDP_COMM_TIMEOUT_S=1 "$MPIEXEC" -n 4 "$BUILD/tests/comm/test_agree" > "$WORK/agree.out" 2>&1 &&
   [ "$(grep -c '^100%' "$WORK/agree.out")" = 4 ]; then
    ok "agreement: every rank gets the lowest failing rank's status, and rank 0's plan or its failure (osdp_plan_broadcast); a peer 3 s late makes the others give up after the 1 s timeout with a message naming the agreement; the MPI backend's bf16 sum (widened, added in fp32, rounded) on pairs and on 4 ranks"
else bad "the ranks' agreement with a late peer" "$WORK/agree.out"; fi
summary test_hang

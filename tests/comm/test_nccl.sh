#!/bin/bash
# The NCCL backend on 2 ranks with a GPU each (tests/comm/test_nccl.c): the
# collectives, then the hang paths — rank 1 stops (SIGSTOP) after set-up, or
# before it, and rank 0 must end the job within the timeout with a message
# naming what was pending: waiting on the host for a collective, in the
# set-up, or reading back a buffer the compute stream waits for.  SKIP (exit 77) with the reason without CUDA or
# without 2 GPUs visible on this node.
# Run by `make check` (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC set).
set -u
. "$(dirname "$0")/../lib/test_lib.sh" nccl-work
TIMEOUT=5 BOUND=90
if ! grep -q '^#define OSDP_HAVE_CUDA 1' "$BUILD/config.h" 2> /dev/null; then
    echo "SKIP: built without CUDA (configure found no nvcc, or --without-cuda)"
    exit 77
fi
"$MPIEXEC" -n 2 "$BUILD/tests/comm/test_nccl" > "$WORK/collectives.out" 2>&1
rc=$?
cat "$WORK/collectives.out"
[ $rc = 77 ] && exit 77
[ $rc = 0 ] && ok "2-rank NCCL collectives" || bad "2-rank NCCL collectives (status $rc)"

# the time-out message: rank 0's own (hang, hang-init), or the CUDA
# backend's when to_host's wait for the compute stream runs out (hang-stream)
for mode in hang hang-init hang-stream; do
    t0=$SECONDS
    OSDP_COMM_TIMEOUT_S=$TIMEOUT timeout -s KILL $BOUND "$MPIEXEC" -n 2 "$BUILD/tests/comm/test_nccl" $mode \
        > "$WORK/$mode.out" 2>&1
    rc=$?
    took=$((SECONDS - t0))
    msg=$(grep -m1 -E "rank 0: after|did not finish within" "$WORK/$mode.out")
    if [ $rc = 137 ]; then
        bad "$mode: still running after $BOUND s (killed)" "$WORK/$mode.out"
    elif [ $rc != 0 ] && grep -q -E "did not (complete|finish) within $TIMEOUT s" <<< "$msg"; then
        ok "$mode: rank 1 stopped; the job ended in $took s (timeout $TIMEOUT s): ${msg#*: }"
    else
        bad "$mode: status $rc after $took s, no time-out message from rank 0" "$WORK/$mode.out"
    fi
done
summary test_nccl

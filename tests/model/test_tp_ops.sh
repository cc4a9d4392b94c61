#!/bin/bash
# The operators' tensor-parallel paths (tests/model/test_tp_ops.c) on real MPI
# ranks: every rank of the job one rank of the tensor-parallel group, at
# group sizes 2 and 4 (more ranks than cores is fine).  Run by `make check`
# (OSDP_BUILDDIR, OSDP_SRCDIR, MPIEXEC set).
set -u
. "$(dirname "$0")/../lib/test_lib.sh" tp-ops-work
for n in 2 4; do
    if "$MPIEXEC" -n $n "$BUILD/tests/model/test_tp_ops" > "$WORK/tp_$n.out" 2>&1; then
        ok "tensor-parallel operators at tp $n: $(grep -c '^100%' "$WORK/tp_$n.out") ranks passed every check"
        grep -v '^100%\|^Running suite' "$WORK/tp_$n.out" | sed 's/^/    /'
    else
        bad "tensor-parallel operators at tp $n" "$WORK/tp_$n.out"
        grep -i 'fail\|error' "$WORK/tp_$n.out" | head -10
    fi
done
summary "tensor-parallel operators"

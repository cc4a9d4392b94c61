#!/bin/bash
# No two files or folders of src/ call or include each other in a loop (issue 32): scripts/layering
# over this build's objects (nm: what each defines and leaves undefined) and the sources' #includes
# finds no cycle.  Then the checker itself: it must fail on a made-up tree whose two folders call
# each other, and on two headers that include each other.
. "$(dirname "$0")/../lib/test_lib.sh" layering-work
PY=${PYTHON:-python3}
LAYERING="$SRC/scripts/layering"
CC_=${CC:-cc}

# 1. this build
if $PY "$LAYERING" "$BUILD" "$SRC" > "$WORK/layering.out" 2>&1; then
    ok "no call or include cycle between the files and folders of src/"
else
    bad "scripts/layering finds a cycle (or no objects) in src/:" "$WORK/layering.out"
fi

# 2. the checker catches a call cycle between two folders, through two files
fake="$WORK/fake"
mkdir -p "$fake/src/low" "$fake/src/high" "$fake/include"
printf 'void high_f(void);\nvoid low_f(void) { high_f(); }\n' > "$fake/src/low/low.c"
printf 'void low_f(void);\nvoid high_f(void) { low_f(); }\n' > "$fake/src/high/high.c"
if "$CC_" -c -o "$fake/src/low/low.o" "$fake/src/low/low.c" && "$CC_" -c -o "$fake/src/high/libx_a-high.o" "$fake/src/high/high.c"; then
    $PY "$LAYERING" "$fake" > "$WORK/fake_calls.out" 2>&1; rc=$?
    [ $rc = 1 ] && grep -q "file call cycles: \[\['src/high/high', 'src/low/low'\]\]" "$WORK/fake_calls.out" \
        && grep -q "folder call cycles: \[\['high', 'low'\]\]" "$WORK/fake_calls.out" \
        && ok "the checker fails on low.c <-> high.c and names both (automake's per-target prefix stripped)" \
        || bad "the checker missed a call cycle (exit $rc)" "$WORK/fake_calls.out"
else
    bad "cannot compile the checker's made-up objects with $CC_"
fi

# 3. ... and an include cycle (the made-up call cycle removed)
rm -f "$fake"/src/*/*.o
printf 'int lone(void) { return 0; }\n' > "$fake/src/low/lone.c"
"$CC_" -c -o "$fake/src/low/lone.o" "$fake/src/low/lone.c"
printf '#include "b.h"\n' > "$fake/src/low/a.h"
printf '#include "a.h"\n' > "$fake/src/low/b.h"
$PY "$LAYERING" "$fake" > "$WORK/fake_includes.out" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "include cycles (files): \[\['src/low/a.h', 'src/low/b.h'\]\]" "$WORK/fake_includes.out" \
    && ok "the checker fails on a.h <-> b.h" || bad "the checker missed an include cycle (exit $rc)" "$WORK/fake_includes.out"
rm -f "$fake/src/low/b.h"
$PY "$LAYERING" "$fake" > "$WORK/fake_none.out" 2>&1 \
    && ok "the checker passes the made-up tree once the cycles are gone" || bad "the checker fails a tree without a cycle" "$WORK/fake_none.out"

summary layering

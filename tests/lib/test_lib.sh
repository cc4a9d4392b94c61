# Sourced by the shell tests (run by `make check`, which sets OSDP_BUILDDIR,
# OSDP_SRCDIR and MPIEXEC; by hand they run from the build tree): where the
# binary and the inputs are, a fresh work folder, and how checks are counted.
#     . "$(dirname "$0")/../lib/test_lib.sh" NAME     -> WORK=$BUILD/tests/NAME, emptied
BUILD=${OSDP_BUILDDIR:-$(pwd)}
SRC=${OSDP_SRCDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
MPIEXEC=${MPIEXEC:-mpiexec}
BIN=${OSDP_BIN:-$BUILD/osdp_gpt}
CMP="$BUILD/tests/tools/compare_weights"
WORK="$BUILD/tests/$1"
DATA="$SRC/input/data/addition.txt"
M="$SRC/tests/inputs/t_small.ini"                  # 6 operators: fast to train, profile and plan
rm -rf "$WORK"; mkdir -p "$WORK"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
passed=0; failed=0

ok()    { echo "PASS: $1"; passed=$((passed + 1)); }
bad()   { echo "FAIL: $1"; [ -n "${2:-}" ] && [ -f "$2" ] && sed 's/^/    /' "$2" | tail -5; failed=$((failed + 1)); }
field() { grep '^step=' "$1" | sed -n "s/.* $2=\([^ ]*\).*/\1/p"; }   # field LOG KEY: one value per step
losses() { field "$1" loss_hex; }
# losses_within A B N REL: the two logs have N losses each, equal within REL relative
losses_within() {
    local a b
    a=$(field "$1" loss | tr '\n' ' '); b=$(field "$2" loss | tr '\n' ' ')
    awk -v a="$a" -v b="$b" -v n="$3" -v rel="$4" 'BEGIN {
        na = split(a, x, " "); nb = split(b, y, " ");
        if (na != n || nb != n) exit 1;
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (!(d <= rel * y[i])) exit 1 }
        exit 0 }'
}

# the log's config and summary fields; stages_ok: the per-stage memory check of a pipeline run
summary_field() { grep '^summary' "$1" | sed -n "s/.* $2=\([^ ]*\).*/\1/p"; }
config_field() { grep '^config' "$1" | sed -n "s/.* $2=\([^ ]*\).*/\1/p"; }

# stages_ok LOG: every stage's ranks peaked where predicted, per category and in total
stages_ok() {
    local pp s cat p
    pp=$(config_field "$1" pp)
    [ -n "$pp" ] && [ "$pp" -gt 1 ] || { echo "    $1: no pipeline"; return 1; }
    for s in $(seq 0 $((pp - 1))); do
        for cat in state weights grads activations workspace tp_comm total; do
            p=$(summary_field "$1" "stage_${s}_pred_$cat")
            [ -n "$p" ] && [ "$(summary_field "$1" "stage_${s}_peak_min_$cat")" = "$p" ] &&
                [ "$(summary_field "$1" "stage_${s}_peak_max_$cat")" = "$p" ] ||
                { echo "    $1 stage $s $cat: measured $(summary_field "$1" "stage_${s}_peak_min_$cat")..$(summary_field "$1" "stage_${s}_peak_max_$cat"), predicted $p"; return 1; }
        done
    done
}

# require_python WHAT MODULE...: SKIP the test (exit 77) unless ${PYTHON:-python3} imports the modules
require_python() {
    local what=$1; shift
    local modules="$*"
    if ! ${PYTHON:-python3} -c "import ${modules// /, }" 2> "$WORK/import.err"; then
        echo "SKIP: needs the Python packages $what ($(tail -1 "$WORK/import.err"))"
        exit 77
    fi
}

# summary NAME: the closing lines (the plain one is what CI reads) and the exit status
summary() {
    echo "$1: $passed passed, $failed failed"
    echo "$passed passed, $failed failed"
    [ $failed = 0 ]
}

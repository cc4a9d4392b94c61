# Sourced by the pipeline's shell tests (test_pp.sh, test_pp_interleaved.sh) after test_lib.sh:
# the log's config and summary fields, and the per-stage memory check.
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

/* The launch gate's state machine (src/util/launch_gate.h says why). */
#include "util/launch_gate.h"

#include <errno.h>
#include <stdlib.h>

void osdp_launch_gate_init(osdp_launch_gate *g, unsigned bound)
{
    g->bound = bound ? bound : 1;
    g->since_mark = 0;
    g->marked = 0;
}

osdp_gate_action osdp_launch_gate_note(osdp_launch_gate *g, unsigned n)
{
    g->since_mark += n;
    if (g->since_mark < g->bound) return OSDP_GATE_GO;
    g->since_mark = 0;
    if (!g->marked) {
        g->marked = 1;
        return OSDP_GATE_MARK;
    }
    return OSDP_GATE_WAIT_AND_MARK;   /* the new mark stays outstanding */
}

void osdp_launch_gate_drained(osdp_launch_gate *g)
{
    g->marked = 0;
    g->since_mark = 0;
}

osdp_status osdp_launch_bound_parse(const char *value, unsigned *bound)
{
    *bound = OSDP_LAUNCH_BOUND_DEFAULT;
    if (!value || !*value) return OSDP_OK;
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || *end || v < 1 || v > (long)OSDP_LAUNCH_BOUND_MAX)
        return osdp_error_set(OSDP_ERR_INPUT, "OSDP_CUDA_LAUNCH_BOUND=%s: want a whole number of launches from 1 to %u "
                              "(default %u)", value, OSDP_LAUNCH_BOUND_MAX, OSDP_LAUNCH_BOUND_DEFAULT);
    *bound = (unsigned)v;
    return OSDP_OK;
}

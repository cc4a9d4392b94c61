/* slice_sizes MODEL T N OP G: the padded elements of operator OP's G
 * slices (osdp_op_split, the runtime's own cut) over a data group of N
 * ranks with the CPU's padding, on one line, first slice first.  For the
 * closed forms of the multi-rank scripts (tests/system/test_grad_reduce.sh:
 * the bytes a per-slice reduce-once plan moves per step). */
#include "osdp/layout.h"
#include "osdp/model_config.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: slice_sizes MODEL T N OP G\n");
        return 2;
    }
    const int T = atoi(argv[2]), N = atoi(argv[3]), g = atoi(argv[5]);
    osdp_model_config cfg;
    osdp_layout L;
    if (osdp_model_config_load(&cfg, argv[1]) != OSDP_OK || osdp_layout_build(&L, &cfg, T) != OSDP_OK) {
        fprintf(stderr, "slice_sizes: %s\n", osdp_error_message());
        return 1;
    }
    const int op = osdp_layout_find_op(&L, argv[4]);
    size_t bounds[OSDP_MAX_SLICES + 1];
    if (op < 0 || N < 1 || osdp_op_split(&L.op[op], g, bounds) != OSDP_OK) {
        fprintf(stderr, "slice_sizes: %s: no such operator, or it cannot be cut into %d slices\n", argv[4], g);
        osdp_layout_free(&L);
        return 1;
    }
    for (int s = 0; s < g; s++)
        printf("%s%zu", s ? " " : "", osdp_padded_numel_quantum(bounds[s + 1] - bounds[s], N, 1));
    printf("\n");
    osdp_layout_free(&L);
    return 0;
}

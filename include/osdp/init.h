/* Counter-based weight initialisation.
 *
 * Element e of operator o gets a value that is a pure function of
 * (seed, o, e): any rank can fill any slice of any tensor without producing
 * the rest, so the initial weights do not depend on the rank count. */
#ifndef OSDP_INIT_H
#define OSDP_INIT_H

#include <stddef.h>
#include <stdint.h>
#include "osdp/layout.h"

/* splitmix64 finaliser of a combination of three words */
uint64_t osdp_hash3(uint64_t a, uint64_t b, uint64_t c);
/* a standard normal sample for counter (seed, stream, index) */
float osdp_normal_at(uint64_t seed, uint64_t stream, uint64_t index);
/* out[0 .. hi-lo) = initial values of the op's flat elements [lo, hi);
 * elements past op->numel (padding) are 0. */
void osdp_init_op_range(const osdp_op_layout *op, int op_index, uint64_t seed,
                        size_t lo, size_t hi, float *out);

#endif

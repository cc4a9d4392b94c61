/* Counter-based weight initialisation.
 *
 * Logical element e of operator o (osdp/logical.h: the tensors in their
 * whole shapes, vocabulary unpadded) gets a value that is a pure function of
 * (seed, o, e): any rank can fill any slice of its part of any tensor without
 * producing the rest, so the initial weights depend neither on the rank
 * count nor on the tensor-parallel degree or the vocabulary padding
 * (padding elements are 0).  At tp 1 without padding e is the element's
 * place in the operator's flat buffer. */
#ifndef OSDP_INIT_H
#define OSDP_INIT_H

#include <stddef.h>
#include <stdint.h>
#include "osdp/layout.h"

/* splitmix64 finaliser of a combination of three words */
uint64_t osdp_hash3(uint64_t a, uint64_t b, uint64_t c);
/* a standard normal sample for counter (seed, stream, index) */
float osdp_normal_at(uint64_t seed, uint64_t stream, uint64_t index);
/* out[0 .. hi-lo) = initial values of the op's flat elements [lo, hi) on
 * tensor-parallel rank tp_rank (the operator being that rank's parts);
 * elements past op->numel (shard padding) and vocabulary padding are 0. */
void osdp_init_op_range_tp(const osdp_op_layout *op, int op_index, uint64_t seed, int tp_rank,
                           size_t lo, size_t hi, float *out);
/* the same on tensor-parallel rank 0 (all of a tp 1 layout) */
void osdp_init_op_range(const osdp_op_layout *op, int op_index, uint64_t seed,
                        size_t lo, size_t hi, float *out);

#endif

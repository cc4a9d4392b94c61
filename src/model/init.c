#include "osdp/init.h"
#include "osdp/logical.h"

#include <math.h>

uint64_t osdp_hash3(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x = a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL) * 0xBF58476D1CE4E5B9ULL
               ^ (c + 0x85EBCA77C2B2AE63ULL) * 0x94D049BB133111EBULL;
    x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27; x *= 0x94D049BB133111EBULL;
    x ^= x >> 31;
    return x;
}

float osdp_normal_at(uint64_t seed, uint64_t stream, uint64_t index)
{
    /* Box-Muller on two 32-bit uniforms from one hash; u1 in (0, 1]. */
    uint64_t h = osdp_hash3(seed, stream, index);
    double u1 = ((double)(h >> 32) + 1.0) / 4294967296.0;
    double u2 = (double)(h & 0xFFFFFFFFu) / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void osdp_init_op_range(const osdp_op_layout *op, int op_index, uint64_t seed,
                        size_t lo, size_t hi, float *out)
{
    osdp_init_op_range_tp(op, op_index, seed, 0, lo, hi, out);
}

void osdp_init_op_range_tp(const osdp_op_layout *op, int op_index, uint64_t seed, int tp_rank,
                           size_t lo, size_t hi, float *out)
{
    for (size_t e = lo; e < hi; e++) out[e - lo] = 0.0f;
    size_t logical_offset = 0;      /* the tensor's first element in the logical operator */
    for (int k = 0; k < op->n_tensors; k++) {
        const osdp_tensor_desc *t = &op->tensor[k];
        const size_t tensor_logical_offset = logical_offset;
        logical_offset += osdp_tensor_logical_numel(t);
        size_t a = t->offset > lo ? t->offset : lo;
        size_t b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        size_t first, run;
        for (size_t e = a; e < b; e += run) {
            /* the counter is the logical element: the same value on any mesh */
            int valid = osdp_tensor_next_run(t, tp_rank, e - t->offset, b - t->offset, &first, &run);
            if (!valid) continue;   /* vocabulary padding stays 0 */
            float *dst = out + (e - lo);
            for (size_t j = 0; j < run; j++) {
                switch (t->init) {
                case OSDP_INIT_NORMAL:
                    dst[j] = t->init_std * osdp_normal_at(seed, (uint64_t)op_index, tensor_logical_offset + first + j);
                    break;
                case OSDP_INIT_ONES: dst[j] = 1.0f; break;
                case OSDP_INIT_ZEROS: dst[j] = 0.0f; break;
                }
            }
        }
    }
}

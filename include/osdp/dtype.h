/* Element types of buffers and collectives, and bf16 conversions.
 *
 * bf16 is the upper half of an fp32: 8 exponent bits, 7 mantissa bits.  It
 * is stored as uint16_t; conversions from fp32 round to nearest, ties to
 * even (as CUDA's __float2bfloat16 and cuBLAS do), and keep NaN a NaN. */
#ifndef OSDP_DTYPE_H
#define OSDP_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum osdp_dtype { OSDP_FLOAT32, OSDP_FLOAT64, OSDP_BFLOAT16, OSDP_UINT64, OSDP_BYTE } osdp_dtype;

/* bytes per element */
size_t osdp_dtype_size(osdp_dtype t);
/* "fp32", "fp64", "bf16", "uint64", "byte" */
const char *osdp_dtype_name(osdp_dtype t);

static inline uint16_t osdp_bf16_from_float(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);   /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);   /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

static inline float osdp_bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif

/* bf16 in place inside an fp32 buffer (osdp_runtime_narrow_in_place, osdp_runtime_widen_in_place in
 * runtime_internal.h): the tensor group's bf16 all-reduces (runtime.c) and the pipeline's bf16 messages
 * (stage_message.c) move the stream's values in 2 bytes without memory of their own. */
#include "runtime_internal.h"

#include <stdint.h>

/* x (n fp32) to n bf16 in its own first 2 n bytes, rounded to nearest even:
 * element 0 alone (its one read comes before its write), then blocks
 * [s, 2s) upwards with the out-of-place convert_weights, each one's bf16
 * (bytes [2s, 4s)) over floats already narrowed, apart from its own fp32
 * (bytes [4s, 8s)).  No memory beyond the buffer: the schedule's bytes
 * stay what they are. */
void osdp_runtime_narrow_in_place(const osdp_compute_backend *be, float *x, size_t n)
{
    uint16_t *h = (uint16_t *)x;
    if (n) be->convert_weights(h, x, 1);
    for (size_t s = 1; s < n; s *= 2) be->convert_weights(h + s, x + s, (2 * s < n ? 2 * s : n) - s);
}

/* osdp_runtime_narrow_in_place's inverse, exact: blocks [s, 2s) downwards (each one's fp32
 * over bf16 already widened, apart from its own bf16), element 0 last */
void osdp_runtime_widen_in_place(const osdp_compute_backend *be, float *x, size_t n)
{
    const uint16_t *h = (const uint16_t *)x;
    size_t s = 1;
    while (2 * s < n) s *= 2;
    for (; s >= 1 && n > 1; s /= 2) be->residual_widen(x + s, h + s, (2 * s < n ? 2 * s : n) - s);
    if (n) be->residual_widen(x, h, 1);
}

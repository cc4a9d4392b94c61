/* Element type sizes and names (osdp/dtype.h). */
#include "osdp/dtype.h"

size_t osdp_dtype_size(osdp_dtype t)
{
    switch (t) {
    case OSDP_FLOAT32: return 4;
    case OSDP_FLOAT64: return 8;
    case OSDP_BFLOAT16: return 2;
    case OSDP_UINT64: return 8;
    case OSDP_BYTE: return 1;
    }
    return 0;
}

const char *osdp_dtype_name(osdp_dtype t)
{
    switch (t) {
    case OSDP_FLOAT32: return "fp32";
    case OSDP_FLOAT64: return "fp64";
    case OSDP_BFLOAT16: return "bf16";
    case OSDP_UINT64: return "uint64";
    case OSDP_BYTE: return "byte";
    }
    return "unknown";
}

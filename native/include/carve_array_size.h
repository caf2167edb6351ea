/*
 * carve_array_size.h: device bytes of a CUDA array from its descriptor.
 *
 * The limiter charges arrays by this estimate, and the fake libcuda consumes the same amount of fake device
 * memory, so "charge exactly what the driver takes" is testable. The driver adds alignment padding that
 * the descriptor cannot tell; docs/limiter.md lists that as a known limit.
 */
#ifndef CARVE_ARRAY_SIZE_H
#define CARVE_ARRAY_SIZE_H

#include <stdint.h>

#include <cuda.h>

/* Bytes per texel (all channels) for a format with `channels` channels. Block-compressed and YUV formats
 * are charged at their uncompressed upper bound: over-counting is the safe side of a quota. */
static inline uint64_t carve_texel_bytes(CUarray_format format, unsigned channels)
{
    unsigned ch = channels ? channels : 1;
    switch ((int)format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return ch;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2ull * ch;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4ull * ch;
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1:
        return 1;
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1:
        return 2;
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2:
        return 4;
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4:
        return 8;
    default:
        return 8; /* compressed, YUV and future formats: an upper bound */
    }
}

static inline uint64_t carve_dim(uint64_t v, unsigned level)
{
    uint64_t d = level < 64 ? v >> level : 0;
    return d ? d : 1;
}

/* a x b, or UINT64_MAX when it does not fit: an absurd descriptor is refused, never charged a wrapped size */
static inline uint64_t carve_mul_sat(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static inline uint64_t carve_add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Bytes of an array (numLevels = 1) or of a mipmapped array's levels. Layered arrays keep their depth
 * (the layer count) at every level. */
static inline uint64_t carve_array3d_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    uint64_t texel = carve_texel_bytes(d->Format, d->NumChannels);
    int layered = (d->Flags & CUDA_ARRAY3D_LAYERED) != 0;
    uint64_t total = 0;
    /* past 64 levels every dimension is 1: the remaining levels cost the same, counted in one step */
    unsigned n = levels ? levels : 1, counted = n < 64 ? n : 64;
    for (unsigned l = 0; l < counted; l++) {
        uint64_t w = carve_dim(d->Width, l);
        uint64_t h = d->Height ? carve_dim(d->Height, l) : 1;
        uint64_t z = d->Depth ? (layered ? d->Depth : carve_dim(d->Depth, l)) : 1;
        uint64_t level = carve_mul_sat(carve_mul_sat(carve_mul_sat(w, h), z), texel);
        total = carve_add_sat(total, l + 1 == counted ? carve_mul_sat(level, n - counted + 1) : level);
    }
    return total;
}

static inline uint64_t carve_array_bytes(const CUDA_ARRAY_DESCRIPTOR *d)
{
    uint64_t h = d->Height ? d->Height : 1;
    return carve_mul_sat(carve_mul_sat(d->Width, h), carve_texel_bytes(d->Format, d->NumChannels));
}

#endif

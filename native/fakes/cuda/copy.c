/*
 * copy.c (fake libcuda): copies and memsets (cuda.h's memory management group; allocations are memory.c's).
 * Both are done at once on the calling thread, by memmove/memset of the host memory that backs device
 * memory (the fake's streams only order modelled kernel time); on a capturing stream they become graph
 * nodes (capture.c). A device side must lie in storage the fake knows (an allocation, or mapped VMM ranges
 * that follow each other): a bad device pointer is CUDA_ERROR_INVALID_VALUE, never a crash
 * (cuda-runtime-facts.md §4 "Data").
 */
#include <stdint.h>
#include <string.h>

#include "fakecuda.h"

/* A device range [p, p+n) has storage: one allocation (device, pool, global, page-locked host), or mapped
 * VMM ranges that follow each other (an expandable segment maps one handle after another). */
static int dev_range_ok(uint64_t p, uint64_t n)
{
    uint64_t end = p + n;
    for (;;) {
        fc_obj_t o;
        if (fc_obj_find(p, &o) != 0 || o.kind == FC_RESERVE) /* reserved but unmapped: no storage */
            return 0;
        if (end <= o.key + o.span)
            return 1;
        if (o.kind != FC_MAPPED)
            return 0;
        p = o.key + o.span;
    }
}

CUresult fc_copy(CUstream s, void *dst, const void *src, size_t n)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!n)
        return CUDA_SUCCESS;
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    if (fc_capture_copy(s, dst, src, n))
        return CUDA_SUCCESS;
    memmove(dst, src, n);
    return CUDA_SUCCESS;
}

/* Checks that the device side(s) of a copy are allocations (a bad device pointer is an error, not a crash). */
static CUresult copy_checked(CUstream s, uint64_t dst, int dst_dev, uint64_t src, int src_dev, size_t n)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (n && ((dst_dev && !dev_range_ok(dst, n)) || (src_dev && !dev_range_ok(src, n))))
        return CUDA_ERROR_INVALID_VALUE;
    return fc_copy(s, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
}

#define U(p) ((uint64_t)(uintptr_t)(p))

#define COPY_HTOD(name)                                                                                    \
    FAKE_EXPORT CUresult name(CUdeviceptr dst, const void *src, size_t n)                                  \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy_checked(NULL, dst, 1, U(src), 0, n);                                                   \
    }
#define COPY_HTOD_ASYNC(name)                                                                              \
    FAKE_EXPORT CUresult name(CUdeviceptr dst, const void *src, size_t n, CUstream s)                      \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy_checked(s, dst, 1, U(src), 0, n);                                                      \
    }
#define COPY_DTOH(name)                                                                                    \
    FAKE_EXPORT CUresult name(void *dst, CUdeviceptr src, size_t n)                                        \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy_checked(NULL, U(dst), 0, src, 1, n);                                                   \
    }
#define COPY_DTOH_ASYNC(name)                                                                              \
    FAKE_EXPORT CUresult name(void *dst, CUdeviceptr src, size_t n, CUstream s)                            \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy_checked(s, U(dst), 0, src, 1, n);                                                      \
    }
#define COPY_DTOD(name)                                                                                    \
    FAKE_EXPORT CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n)                                  \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy_checked(NULL, dst, 1, src, 1, n);                                                      \
    }
#define COPY_DTOD_ASYNC(name)                                                                              \
    FAKE_EXPORT CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)                      \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy_checked(s, dst, 1, src, 1, n);                                                         \
    }
/* Unified addressing: either side may be host or device memory. */
#define COPY_ANY(name)                                                                                     \
    FAKE_EXPORT CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n)                                  \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy_checked(NULL, dst, 0, src, 0, n);                                                      \
    }
#define COPY_ANY_ASYNC(name)                                                                               \
    FAKE_EXPORT CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)                      \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy_checked(s, dst, 0, src, 0, n);                                                         \
    }
#define COPY_PEER(name)                                                                                    \
    FAKE_EXPORT CUresult name(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n)      \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy_checked(NULL, dst, 1, src, 1, n);                                                      \
    }
#define COPY_PEER_ASYNC(name)                                                                              \
    FAKE_EXPORT CUresult name(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n,      \
                              CUstream s)                                                                  \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy_checked(s, dst, 1, src, 1, n);                                                         \
    }

COPY_HTOD(cuMemcpyHtoD_v2)
COPY_HTOD(cuMemcpyHtoD_v2_ptds)
COPY_HTOD_ASYNC(cuMemcpyHtoDAsync_v2)
COPY_HTOD_ASYNC(cuMemcpyHtoDAsync_v2_ptsz)
COPY_DTOH(cuMemcpyDtoH_v2)
COPY_DTOH(cuMemcpyDtoH_v2_ptds)
COPY_DTOH_ASYNC(cuMemcpyDtoHAsync_v2)
COPY_DTOH_ASYNC(cuMemcpyDtoHAsync_v2_ptsz)
COPY_DTOD(cuMemcpyDtoD_v2)
COPY_DTOD(cuMemcpyDtoD_v2_ptds)
COPY_DTOD_ASYNC(cuMemcpyDtoDAsync_v2)
COPY_DTOD_ASYNC(cuMemcpyDtoDAsync_v2_ptsz)
COPY_ANY(cuMemcpy)
COPY_ANY(cuMemcpy_ptds)
COPY_ANY_ASYNC(cuMemcpyAsync)
COPY_ANY_ASYNC(cuMemcpyAsync_ptsz)
COPY_PEER(cuMemcpyPeer)
COPY_PEER(cuMemcpyPeer_ptds)
COPY_PEER_ASYNC(cuMemcpyPeerAsync)
COPY_PEER_ASYNC(cuMemcpyPeerAsync_ptsz)

/* 2D/3D copies between linear memories (host, device, unified); arrays have no storage in the fake. */
static CUresult addr_of(CUmemorytype t, const void *host, CUdeviceptr dev, CUarray array, uint64_t *out)
{
    switch (t) {
    case CU_MEMORYTYPE_HOST: *out = U(host); return CUDA_SUCCESS;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: *out = dev; return CUDA_SUCCESS;
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
}

static CUresult copy3d(CUstream s, const CUDA_MEMCPY3D *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t src, dst;
    CUresult rc = addr_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, &src);
    if (rc == CUDA_SUCCESS)
        rc = addr_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, &dst);
    if (rc != CUDA_SUCCESS)
        return rc;
    size_t depth = p->Depth ? p->Depth : 1, height = p->Height ? p->Height : 1;
    size_t spitch = p->srcPitch ? p->srcPitch : p->WidthInBytes, dpitch = p->dstPitch ? p->dstPitch : p->WidthInBytes;
    size_t sheight = p->srcHeight ? p->srcHeight : height, dheight = p->dstHeight ? p->dstHeight : height;
    for (size_t z = 0; z < depth; z++)
        for (size_t y = 0; y < height; y++) {
            uint64_t so = src + p->srcXInBytes + ((p->srcZ + z) * sheight + p->srcY + y) * spitch;
            uint64_t d = dst + p->dstXInBytes + ((p->dstZ + z) * dheight + p->dstY + y) * dpitch;
            rc = copy_checked(s, d, p->dstMemoryType != CU_MEMORYTYPE_HOST, so,
                              p->srcMemoryType != CU_MEMORYTYPE_HOST, p->WidthInBytes);
            if (rc != CUDA_SUCCESS)
                return rc;
        }
    return CUDA_SUCCESS;
}

static CUresult copy2d(CUstream s, const CUDA_MEMCPY2D *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D q = {
        .srcXInBytes = p->srcXInBytes, .srcY = p->srcY, .srcMemoryType = p->srcMemoryType, .srcHost = p->srcHost,
        .srcDevice = p->srcDevice, .srcArray = p->srcArray, .srcPitch = p->srcPitch, .dstXInBytes = p->dstXInBytes,
        .dstY = p->dstY, .dstMemoryType = p->dstMemoryType, .dstHost = p->dstHost, .dstDevice = p->dstDevice,
        .dstArray = p->dstArray, .dstPitch = p->dstPitch, .WidthInBytes = p->WidthInBytes, .Height = p->Height,
        .Depth = 1,
    };
    return copy3d(s, &q);
}

#define COPY2D(name)                                                                                       \
    FAKE_EXPORT CUresult name(const CUDA_MEMCPY2D *p)                                                      \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy2d(NULL, p);                                                                            \
    }
#define COPY2D_ASYNC(name)                                                                                 \
    FAKE_EXPORT CUresult name(const CUDA_MEMCPY2D *p, CUstream s)                                          \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy2d(s, p);                                                                               \
    }
#define COPY3D(name)                                                                                       \
    FAKE_EXPORT CUresult name(const CUDA_MEMCPY3D *p)                                                      \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy3d(NULL, p);                                                                            \
    }
#define COPY3D_ASYNC(name)                                                                                 \
    FAKE_EXPORT CUresult name(const CUDA_MEMCPY3D *p, CUstream s)                                          \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return copy3d(s, p);                                                                               \
    }
COPY2D(cuMemcpy2D_v2)
COPY2D(cuMemcpy2D_v2_ptds)
COPY2D(cuMemcpy2DUnaligned_v2)
COPY2D(cuMemcpy2DUnaligned_v2_ptds)
COPY2D_ASYNC(cuMemcpy2DAsync_v2)
COPY2D_ASYNC(cuMemcpy2DAsync_v2_ptsz)
COPY3D(cuMemcpy3D_v2)
COPY3D(cuMemcpy3D_v2_ptds)
COPY3D_ASYNC(cuMemcpy3DAsync_v2)
COPY3D_ASYNC(cuMemcpy3DAsync_v2_ptsz)

/* memset of `height` rows of `width` elements of `elem` bytes, rows `pitch` bytes apart. */
CUresult fc_memset_now(uint64_t dst, size_t pitch, uint32_t value, unsigned elem, size_t width, size_t height)
{
    for (size_t y = 0; y < height; y++) {
        uint8_t *row = (uint8_t *)(uintptr_t)(dst + y * pitch);
        if (elem == 1) {
            memset(row, (int)(value & 0xff), width);
        } else if (elem == 2) {
            uint16_t v = (uint16_t)value;
            for (size_t i = 0; i < width; i++)
                memcpy(row + 2 * i, &v, 2);
        } else {
            for (size_t i = 0; i < width; i++)
                memcpy(row + 4 * i, &value, 4);
        }
    }
    return CUDA_SUCCESS;
}

static CUresult memset_checked(CUstream s, CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elem,
                               size_t width, size_t height)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!width || !height)
        return CUDA_SUCCESS;
    if (!pitch)
        pitch = width * elem;
    if ((dst % elem) || !dev_range_ok(dst, (height - 1) * pitch + width * elem))
        return CUDA_ERROR_INVALID_VALUE;
    if (fc_capture_memset(s, dst, pitch, value, elem, width, height))
        return CUDA_SUCCESS;
    return fc_memset_now(dst, pitch, value, elem, width, height);
}

#define MEMSET(name, T, elem)                                                                              \
    FAKE_EXPORT CUresult name(CUdeviceptr dst, T v, size_t n)                                              \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return memset_checked(NULL, dst, 0, v, elem, n, 1);                                                \
    }
#define MEMSET_ASYNC(name, T, elem)                                                                        \
    FAKE_EXPORT CUresult name(CUdeviceptr dst, T v, size_t n, CUstream s)                                  \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return memset_checked(s, dst, 0, v, elem, n, 1);                                                   \
    }
#define MEMSET2D(name, T, elem)                                                                            \
    FAKE_EXPORT CUresult name(CUdeviceptr dst, size_t pitch, T v, size_t w, size_t h)                      \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return memset_checked(NULL, dst, pitch, v, elem, w, h);                                            \
    }
#define MEMSET2D_ASYNC(name, T, elem)                                                                      \
    FAKE_EXPORT CUresult name(CUdeviceptr dst, size_t pitch, T v, size_t w, size_t h, CUstream s)          \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return memset_checked(s, dst, pitch, v, elem, w, h);                                               \
    }
MEMSET(cuMemsetD8_v2, unsigned char, 1)
MEMSET(cuMemsetD8_v2_ptds, unsigned char, 1)
MEMSET(cuMemsetD16_v2, unsigned short, 2)
MEMSET(cuMemsetD16_v2_ptds, unsigned short, 2)
MEMSET(cuMemsetD32_v2, unsigned int, 4)
MEMSET(cuMemsetD32_v2_ptds, unsigned int, 4)
MEMSET_ASYNC(cuMemsetD8Async, unsigned char, 1)
MEMSET_ASYNC(cuMemsetD8Async_ptsz, unsigned char, 1)
MEMSET_ASYNC(cuMemsetD16Async, unsigned short, 2)
MEMSET_ASYNC(cuMemsetD16Async_ptsz, unsigned short, 2)
MEMSET_ASYNC(cuMemsetD32Async, unsigned int, 4)
MEMSET_ASYNC(cuMemsetD32Async_ptsz, unsigned int, 4)
MEMSET2D(cuMemsetD2D8_v2, unsigned char, 1)
MEMSET2D(cuMemsetD2D8_v2_ptds, unsigned char, 1)
MEMSET2D(cuMemsetD2D16_v2, unsigned short, 2)
MEMSET2D(cuMemsetD2D16_v2_ptds, unsigned short, 2)
MEMSET2D(cuMemsetD2D32_v2, unsigned int, 4)
MEMSET2D(cuMemsetD2D32_v2_ptds, unsigned int, 4)
MEMSET2D_ASYNC(cuMemsetD2D8Async, unsigned char, 1)
MEMSET2D_ASYNC(cuMemsetD2D8Async_ptsz, unsigned char, 1)
MEMSET2D_ASYNC(cuMemsetD2D16Async, unsigned short, 2)
MEMSET2D_ASYNC(cuMemsetD2D16Async_ptsz, unsigned short, 2)
MEMSET2D_ASYNC(cuMemsetD2D32Async, unsigned int, 4)
MEMSET2D_ASYNC(cuMemsetD2D32Async_ptsz, unsigned int, 4)

/* hidden aliases: cuGetProcAddress hands out these, never addresses an interposer could replace */
FC_ALIAS(cuMemcpyHtoD_v2)
FC_ALIAS(cuMemcpyHtoD_v2_ptds)
FC_ALIAS(cuMemcpyHtoDAsync_v2)
FC_ALIAS(cuMemcpyHtoDAsync_v2_ptsz)
FC_ALIAS(cuMemcpyDtoH_v2)
FC_ALIAS(cuMemcpyDtoH_v2_ptds)
FC_ALIAS(cuMemcpyDtoHAsync_v2)
FC_ALIAS(cuMemcpyDtoHAsync_v2_ptsz)
FC_ALIAS(cuMemcpyDtoD_v2)
FC_ALIAS(cuMemcpyDtoD_v2_ptds)
FC_ALIAS(cuMemcpyDtoDAsync_v2)
FC_ALIAS(cuMemcpyDtoDAsync_v2_ptsz)
FC_ALIAS(cuMemcpy)
FC_ALIAS(cuMemcpy_ptds)
FC_ALIAS(cuMemcpyAsync)
FC_ALIAS(cuMemcpyAsync_ptsz)
FC_ALIAS(cuMemcpyPeer)
FC_ALIAS(cuMemcpyPeer_ptds)
FC_ALIAS(cuMemcpyPeerAsync)
FC_ALIAS(cuMemcpyPeerAsync_ptsz)
FC_ALIAS(cuMemcpy2D_v2)
FC_ALIAS(cuMemcpy2D_v2_ptds)
FC_ALIAS(cuMemcpy2DUnaligned_v2)
FC_ALIAS(cuMemcpy2DUnaligned_v2_ptds)
FC_ALIAS(cuMemcpy2DAsync_v2)
FC_ALIAS(cuMemcpy2DAsync_v2_ptsz)
FC_ALIAS(cuMemcpy3D_v2)
FC_ALIAS(cuMemcpy3D_v2_ptds)
FC_ALIAS(cuMemcpy3DAsync_v2)
FC_ALIAS(cuMemcpy3DAsync_v2_ptsz)
FC_ALIAS(cuMemsetD8_v2)
FC_ALIAS(cuMemsetD8_v2_ptds)
FC_ALIAS(cuMemsetD16_v2)
FC_ALIAS(cuMemsetD16_v2_ptds)
FC_ALIAS(cuMemsetD32_v2)
FC_ALIAS(cuMemsetD32_v2_ptds)
FC_ALIAS(cuMemsetD8Async)
FC_ALIAS(cuMemsetD8Async_ptsz)
FC_ALIAS(cuMemsetD16Async)
FC_ALIAS(cuMemsetD16Async_ptsz)
FC_ALIAS(cuMemsetD32Async)
FC_ALIAS(cuMemsetD32Async_ptsz)
FC_ALIAS(cuMemsetD2D8_v2)
FC_ALIAS(cuMemsetD2D8_v2_ptds)
FC_ALIAS(cuMemsetD2D16_v2)
FC_ALIAS(cuMemsetD2D16_v2_ptds)
FC_ALIAS(cuMemsetD2D32_v2)
FC_ALIAS(cuMemsetD2D32_v2_ptds)
FC_ALIAS(cuMemsetD2D8Async)
FC_ALIAS(cuMemsetD2D8Async_ptsz)
FC_ALIAS(cuMemsetD2D16Async)
FC_ALIAS(cuMemsetD2D16Async_ptsz)
FC_ALIAS(cuMemsetD2D32Async)
FC_ALIAS(cuMemsetD2D32Async_ptsz)

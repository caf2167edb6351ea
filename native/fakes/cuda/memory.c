/*
 * memory.c (fake libcuda): device memory. Each allocation charges the fake GPU (fake_mem_reserve in
 * common/memory.c, shared with the fake NVML and other processes through CARVE_FAKE_STATE) and is backed by
 * host memory (objects.c), so copies, memsets and cuMemGetInfo behave as on a GPU while kernels do not run
 * (cuda-runtime-facts.md §3 "Memory", §4 "Data"). Copies and memsets are done at once on the calling
 * thread (the fake's streams only order modelled kernel time); on a capturing stream they become graph nodes.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "carve_array_size.h"
#include "fakecuda.h"

CUresult fc_charge(int ordinal, uint64_t bytes)
{
    const fake_gpu_t *g = fc_gpu(ordinal);
    if (!g)
        return CUDA_ERROR_INVALID_DEVICE;
    if (fc_mps_charge(ordinal, bytes) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY; /* MPS's pinned device memory limit */
    if (fake_mem_reserve(g->index, getpid(), bytes) != 0) {
        fc_mps_uncharge(ordinal, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY; /* the GPU, or the driver partition of our cgroup, is full */
    }
    return CUDA_SUCCESS;
}

void fc_uncharge(int ordinal, uint64_t bytes)
{
    const fake_gpu_t *g = fc_gpu(ordinal);
    if (!g || !bytes)
        return;
    fake_mem_release(g->index, getpid(), bytes);
    fc_mps_uncharge(ordinal, bytes);
}

/* Charge `bytes` on the device and record `key` (a fresh handle when *key is 0): arrays, VMM handles. */
static CUresult take(int ordinal, uint64_t bytes, int kind, uint64_t *key)
{
    CUresult rc = fc_charge(ordinal, bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!*key)
        *key = fc_new_handle();
    if (fc_obj_put(*key, kind, ordinal, bytes) != 0) {
        fc_uncharge(ordinal, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

static CUresult give(uint64_t key, int kind)
{
    fc_obj_t o;
    if (fc_obj_remove(key, kind, &o) != 0)
        return kind == FC_MEM ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    fc_uncharge(o.ordinal, o.bytes);
    if (o.span)
        fc_unmap(o.key, o.span);
    return CUDA_SUCCESS;
}

/* A host-backed allocation of `bytes` charged to `ordinal`, recorded as `kind` (FC_MEM, FC_POOLMEM: the
 * pool charges, so charge 0). */
CUresult fc_alloc_backed(int ordinal, uint64_t bytes, uint64_t charge, int kind, void *aux, CUdeviceptr *dptr)
{
    CUresult rc = charge ? fc_charge(ordinal, charge) : CUDA_SUCCESS;
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t base = fc_map(bytes, 4096, PROT_READ | PROT_WRITE);
    fc_obj_t o = {.key = base, .kind = kind, .ordinal = ordinal, .bytes = charge, .span = fc_page_round(bytes),
                  .aux = aux};
    if (!base || fc_obj_add(&o) != 0) {
        fc_unmap(base, bytes);
        fc_uncharge(ordinal, charge);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)base;
    return CUDA_SUCCESS;
}

static CUresult alloc_current(CUdeviceptr *dptr, size_t bytes)
{
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dptr || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    return fc_alloc_backed(ordinal, bytes, bytes, FC_MEM, NULL, dptr);
}

FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    FC_CALLED("cuMemAlloc_v2");
    return alloc_current(dptr, bytesize);
}

FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t width, size_t height,
                                        unsigned int elementSize)
{
    FC_CALLED("cuMemAllocPitch_v2");
    if (!pPitch || !width || !height || (elementSize != 4 && elementSize != 8 && elementSize != 16))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t align = fc_env_u64("CARVE_FAKE_PITCH_ALIGN", 512);
    size_t pitch = (size_t)((width + align - 1) / align * align);
    CUresult rc = alloc_current(dptr, pitch * height);
    if (rc == CUDA_SUCCESS)
        *pPitch = pitch;
    return rc;
}

FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    FC_CALLED("cuMemAllocManaged");
    return alloc_current(dptr, bytesize);
}

FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    FC_CALLED("cuMemFree_v2");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    return dptr ? give(dptr, FC_MEM) : CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    FC_CALLED("cuMemGetInfo_v2");
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    const fake_gpu_t *g = fc_gpu(ordinal);
    uint64_t used = fake_mem_used(g->index);
    uint64_t cap = g->model->memory_bytes;
    uint64_t free_dev = used < cap ? cap - used : 0;
    /* Inside a driver memory partition the driver caps total and free at the cgroup's hard limit. */
    uint64_t hard, part_used;
    if (fake_mem_partition(g->index, &hard, &part_used) && hard < cap) {
        uint64_t left = part_used < hard ? hard - part_used : 0;
        free_dev = left < free_dev ? left : free_dev;
        cap = hard;
    }
    *free_bytes = free_dev;
    *total = cap;
    return CUDA_SUCCESS;
}

/* A variant from a future CUDA (cudaVersion 99000): what cuGetProcAddress hands out when an application
 * asks for a newer version than an interposer's table knows. Same arguments, its own name. */
FAKE_EXPORT CUresult cuMemGetInfo_v99(size_t *free_bytes, size_t *total)
{
    CUresult rc = cuMemGetInfo_v2(free_bytes, total);
    FC_CALLED("cuMemGetInfo_v99");
    return rc;
}

/* --- copies and memsets --------------------------------------------------------------------------- */

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

/* --- pointers ------------------------------------------------------------------------------------- */

FAKE_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
    FC_CALLED("cuMemGetAddressRange_v2");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_obj_t o;
    if (fc_obj_find(dptr, &o) != 0 || o.kind == FC_HOST)
        return CUDA_ERROR_NOT_FOUND;
    if (base)
        *base = o.key;
    if (size)
        *size = o.span;
    return CUDA_SUCCESS;
}

/* One attribute of `ptr`; `known` says whether ptr is in an allocation of the fake. */
static CUresult pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr, int strict)
{
    fc_obj_t o;
    int known = fc_obj_find(ptr, &o) == 0;
    if (!known && strict)
        return CUDA_ERROR_INVALID_VALUE;
    int host = known && o.kind == FC_HOST;
    int ordinal = known ? o.ordinal : -1;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = known && ordinal >= 0 ? (CUcontext)fc_primary(ordinal) : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = !known ? 0 : host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *(uint64_t *)data = known ? ptr : 0; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *(unsigned *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED: *(unsigned *)data = known; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = host ? fc_current_ordinal() : ordinal; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = known ? o.key : 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(uint64_t *)data = known ? o.key : 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = known ? o.span : 0; break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *(uint64_t *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(void **)data = known && o.kind == FC_POOLMEM ? o.aux : NULL;
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    FC_CALLED("cuPointerGetAttribute");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    return pointer_attribute(data, attribute, ptr, 1);
}

/* Unlike the single query, an unknown pointer is not an error here: its attributes read as unregistered
 * host memory (context NULL, memory type 0), which cudaPointerGetAttributes reports for malloc'ed memory. */
FAKE_EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data, CUdeviceptr ptr)
{
    FC_CALLED("cuPointerGetAttributes");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!attrs || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        if (!data[i])
            continue;
        CUresult rc = pointer_attribute(data[i], attrs[i], ptr, 0);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    FC_CALLED("cuPointerSetAttribute");
    fc_obj_t o;
    if (fc_obj_find(ptr, &o) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return attribute == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* --- page-locked host memory ------------------------------------------------------------------------ */

static CUresult host_alloc(void **pp, size_t bytes)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pp)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    CUresult rc = fc_alloc_backed(-1, bytes ? bytes : 1, 0, FC_HOST, NULL, &p);
    if (rc == CUDA_SUCCESS)
        *pp = (void *)(uintptr_t)p;
    return rc;
}

FAKE_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    FC_CALLED("cuMemAllocHost_v2");
    return host_alloc(pp, bytesize);
}

FAKE_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
    FC_CALLED("cuMemHostAlloc");
    return host_alloc(pp, bytesize);
}

FAKE_EXPORT CUresult cuMemFreeHost(void *p)
{
    FC_CALLED("cuMemFreeHost");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    return give(U(p), FC_HOST) == CUDA_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Registered memory belongs to the caller: the table records its range without owning the mapping. */
static CUresult host_register(void *p, size_t bytes)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    fc_obj_t o;
    if (fc_obj_find(U(p), &o) == 0)
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    /* aux 1 marks registered memory: the caller's, never unmapped here */
    fc_obj_t r = {.key = U(p), .kind = FC_HOST, .ordinal = -1, .span = bytes, .aux = (void *)1};
    return fc_obj_add(&r) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FAKE_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags)
{
    FC_CALLED("cuMemHostRegister_v2");
    return host_register(p, bytesize);
}

FAKE_EXPORT CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int flags)
{
    FC_CALLED("cuMemHostRegister");
    return host_register(p, bytesize);
}

FAKE_EXPORT CUresult cuMemHostUnregister(void *p)
{
    FC_CALLED("cuMemHostUnregister");
    fc_obj_t o;
    if (fc_obj_get(U(p), FC_HOST, &o) != 0 || o.aux != (void *)1)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    fc_obj_remove(U(p), FC_HOST, NULL);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
    FC_CALLED("cuMemHostGetDevicePointer_v2");
    fc_obj_t o;
    if (!pdptr || fc_obj_find(U(p), &o) != 0 || o.kind != FC_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = U(p); /* unified addressing: the same address */
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
    FC_CALLED("cuMemHostGetFlags");
    fc_obj_t o;
    if (!flags || fc_obj_find(U(p), &o) != 0 || o.kind != FC_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = CU_MEMHOSTALLOC_DEVICEMAP;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s)
{
    FC_CALLED("cuMemPrefetchAsync_v2");
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc)
{
    FC_CALLED("cuMemAdvise_v2");
    return CUDA_SUCCESS;
}

/* --- arrays -------------------------------------------------------------------------------------- */

static CUresult array_create(uint64_t *key, uint64_t bytes, int kind)
{
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *key = 0;
    return take(ordinal, bytes, kind, key);
}

FAKE_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    FC_CALLED("cuArrayCreate_v2");
    uint64_t key;
    if (!pHandle || !desc || !desc->Width)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = array_create(&key, carve_array_bytes(desc), FC_ARRAY);
    if (rc == CUDA_SUCCESS)
        *pHandle = (CUarray)(uintptr_t)key;
    return rc;
}

FAKE_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    FC_CALLED("cuArray3DCreate_v2");
    uint64_t key;
    if (!pHandle || !desc || !desc->Width)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = array_create(&key, carve_array3d_bytes(desc, 1), FC_ARRAY);
    if (rc == CUDA_SUCCESS)
        *pHandle = (CUarray)(uintptr_t)key;
    return rc;
}

FAKE_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    FC_CALLED("cuArrayDestroy");
    return give((uint64_t)(uintptr_t)hArray, FC_ARRAY);
}

FAKE_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                            unsigned int levels)
{
    FC_CALLED("cuMipmappedArrayCreate");
    uint64_t key;
    if (!pHandle || !desc || !desc->Width || !levels)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = array_create(&key, carve_array3d_bytes(desc, levels), FC_MIPMAP);
    if (rc == CUDA_SUCCESS)
        *pHandle = (CUmipmappedArray)(uintptr_t)key;
    return rc;
}

FAKE_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    FC_CALLED("cuMipmappedArrayDestroy");
    return give((uint64_t)(uintptr_t)h, FC_MIPMAP);
}

/* hidden aliases: cuGetProcAddress hands out these, never addresses an interposer could replace */
FC_ALIAS(cuMemGetInfo_v2)
FC_ALIAS(cuMemGetInfo_v99)
FC_ALIAS(cuMemAlloc_v2)
FC_ALIAS(cuMemAllocPitch_v2)
FC_ALIAS(cuMemFree_v2)
FC_ALIAS(cuMemAllocManaged)
FC_ALIAS(cuArrayCreate_v2)
FC_ALIAS(cuArray3DCreate_v2)
FC_ALIAS(cuArrayDestroy)
FC_ALIAS(cuMipmappedArrayCreate)
FC_ALIAS(cuMipmappedArrayDestroy)
FC_ALIAS(cuMemGetAddressRange_v2)
FC_ALIAS(cuPointerGetAttribute)
FC_ALIAS(cuPointerGetAttributes)
FC_ALIAS(cuPointerSetAttribute)
FC_ALIAS(cuMemAllocHost_v2)
FC_ALIAS(cuMemHostAlloc)
FC_ALIAS(cuMemFreeHost)
FC_ALIAS(cuMemHostRegister_v2)
FC_ALIAS(cuMemHostRegister)
FC_ALIAS(cuMemHostUnregister)
FC_ALIAS(cuMemHostGetDevicePointer_v2)
FC_ALIAS(cuMemHostGetFlags)
FC_ALIAS(cuMemPrefetchAsync_v2)
FC_ALIAS(cuMemAdvise_v2)
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

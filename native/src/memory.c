/*
 * memory.c: every allocation path that takes device memory, and its free.
 *
 * Each allocation reserves its bytes in the region of its device's claim first (binding.c) (carve_charge, a CAS on the device's counter:
 * concurrent processes can never exceed the quota together), then calls the driver, then records what it
 * charged (commit) or gives the reservation back (rollback). Each free releases exactly what was recorded.
 * Stream-ordered frees release when enqueued. VMM handles on host memory (NCCL) are not device memory and
 * are not charged.
 */
#include "carve_array_size.h"
#include "limiter.h"

/* After the driver's answer: record what the new object charged (`key` is read only when the driver succeeded:
 * the handle it wrote), or give the reservation back. */
#define COMMIT(rc, key, kind, dev, bytes)                                                                  \
    (LIKELY((rc) == CUDA_SUCCESS) ? (carve_track((key), (kind), (dev), (bytes)), (rc))                     \
                                  : (carve_uncharge((dev), (bytes)), (rc)))

/* Release what `key` charged, after the driver freed it; restore the record when the driver refused. */
static inline int take(uint64_t key, int kind, int *dev, uint64_t *bytes)
{
    return carve_untrack(key, kind, dev, bytes) == 0;
}

static inline CUresult settle(CUresult rc, int had, uint64_t key, int kind, int dev, uint64_t bytes)
{
    if (!had)
        return rc;
    if (LIKELY(rc == CUDA_SUCCESS))
        carve_uncharge(dev, bytes);
    else
        carve_track(key, kind, dev, bytes);
    return rc;
}

CARVE_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    carve_init();
    int dev = carve_alloc_device();
    if (carve_charge(dev, bytesize) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = REAL(cuMemAlloc_v2)(dptr, bytesize);
    return COMMIT(rc, *dptr, CARVE_KIND_MEM, dev, bytesize);
}

CARVE_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    carve_init();
    int dev = carve_alloc_device(); /* managed memory may migrate; it is charged where it was asked */
    if (carve_charge(dev, bytesize) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = REAL(cuMemAllocManaged)(dptr, bytesize, flags);
    return COMMIT(rc, *dptr, CARVE_KIND_MEM, dev, bytesize);
}

/* The pitch is the driver's choice: reserve a 512-byte-aligned estimate, then settle on pitch x height. */
CARVE_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t width, size_t height,
                                      unsigned int elementSize)
{
    carve_init();
    int dev = carve_alloc_device();
    uint64_t estimate = carve_mul_sat(width > UINT64_MAX - 511 ? UINT64_MAX : (width + 511) & ~(uint64_t)511, height);
    if (carve_charge(dev, estimate) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = REAL(cuMemAllocPitch_v2)(dptr, pPitch, width, height, elementSize);
    if (rc != CUDA_SUCCESS) {
        carve_uncharge(dev, estimate);
        return rc;
    }
    uint64_t actual = carve_mul_sat(*pPitch, height);
    if (actual > estimate && carve_charge(dev, actual - estimate) != 0) {
        REAL(cuMemFree_v2)(*dptr);
        carve_uncharge(dev, estimate);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < estimate)
        carve_uncharge(dev, estimate - actual);
    carve_track(*dptr, CARVE_KIND_MEM, dev, actual);
    return rc;
}

CARVE_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    carve_init();
    int dev = 0;
    uint64_t bytes = 0;
    int had = take(dptr, CARVE_KIND_MEM, &dev, &bytes);
    return settle(REAL(cuMemFree_v2)(dptr), had, dptr, CARVE_KIND_MEM, dev, bytes);
}

#define ASYNC_ALLOC(name)                                                                                  \
    CARVE_API CUresult name(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)                         \
    {                                                                                                      \
        carve_init();                                                                                      \
        int dev = carve_alloc_device();                                                                  \
        if (carve_charge(dev, bytesize) != 0)                                                              \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                               \
        CUresult rc = REAL(name)(dptr, bytesize, hStream);                                                 \
        return COMMIT(rc, *dptr, CARVE_KIND_MEM, dev, bytesize);                                           \
    }
ASYNC_ALLOC(cuMemAllocAsync)
ASYNC_ALLOC(cuMemAllocAsync_ptsz)

#define POOL_ALLOC(name)                                                                                   \
    CARVE_API CUresult name(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)      \
    {                                                                                                      \
        carve_init();                                                                                      \
        int dev = carve_alloc_device();                                                                  \
        if (carve_charge(dev, bytesize) != 0)                                                              \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                               \
        CUresult rc = REAL(name)(dptr, bytesize, pool, hStream);                                           \
        return COMMIT(rc, *dptr, CARVE_KIND_MEM, dev, bytesize);                                           \
    }
POOL_ALLOC(cuMemAllocFromPoolAsync)
POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz)

#define ASYNC_FREE(name)                                                                                   \
    CARVE_API CUresult name(CUdeviceptr dptr, CUstream hStream)                                           \
    {                                                                                                      \
        carve_init();                                                                                      \
        int dev = 0;                                                                                       \
        uint64_t bytes = 0;                                                                                \
        int had = take(dptr, CARVE_KIND_MEM, &dev, &bytes);                                                \
        return settle(REAL(name)(dptr, hStream), had, dptr, CARVE_KIND_MEM, dev, bytes);                   \
    }
ASYNC_FREE(cuMemFreeAsync)
ASYNC_FREE(cuMemFreeAsync_ptsz)

/* VMM (PyTorch expandable segments, NCCL): the physical allocation is what takes memory, not the mapping. */
CARVE_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags)
{
    carve_init();
    if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return REAL(cuMemCreate)(handle, size, prop, flags); /* host memory: not a device quota */
    int dev = carve_bind_ordinal(prop->location.id);
    if (carve_charge(dev, size) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = REAL(cuMemCreate)(handle, size, prop, flags);
    return COMMIT(rc, *handle, CARVE_KIND_VMM, dev, size);
}

CARVE_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    carve_init();
    int dev = 0;
    uint64_t bytes = 0;
    int had = take(handle, CARVE_KIND_VMM, &dev, &bytes);
    return settle(REAL(cuMemRelease)(handle), had, handle, CARVE_KIND_VMM, dev, bytes);
}

/* Arrays: bytes from the descriptor (carve_array_size.h). */
static CUresult array_create(uint64_t bytes, int kind, CUresult (*create)(void *, const void *, unsigned),
                             void *handle, const void *desc, unsigned levels)
{
    int dev = carve_alloc_device();
    if (carve_charge(dev, bytes) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = create(handle, desc, levels);
    return COMMIT(rc, (uint64_t)(uintptr_t) * (void **)handle, kind, dev, bytes);
}

static CUresult create_2d(void *h, const void *d, unsigned levels)
{
    return REAL(cuArrayCreate_v2)(h, d);
}

static CUresult create_3d(void *h, const void *d, unsigned levels)
{
    return REAL(cuArray3DCreate_v2)(h, d);
}

static CUresult create_mipmap(void *h, const void *d, unsigned levels)
{
    return REAL(cuMipmappedArrayCreate)(h, d, levels);
}

CARVE_API CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    carve_init();
    if (!pHandle || !desc)
        return REAL(cuArrayCreate_v2)(pHandle, desc);
    return array_create(carve_array_bytes(desc), CARVE_KIND_ARRAY, create_2d, pHandle, desc, 1);
}

CARVE_API CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    carve_init();
    if (!pHandle || !desc)
        return REAL(cuArray3DCreate_v2)(pHandle, desc);
    return array_create(carve_array3d_bytes(desc, 1), CARVE_KIND_ARRAY, create_3d, pHandle, desc, 1);
}

CARVE_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                          unsigned int levels)
{
    carve_init();
    if (!pHandle || !desc)
        return REAL(cuMipmappedArrayCreate)(pHandle, desc, levels);
    return array_create(carve_array3d_bytes(desc, levels), CARVE_KIND_MIPMAP, create_mipmap, pHandle, desc,
                        levels);
}

CARVE_API CUresult cuArrayDestroy(CUarray h)
{
    carve_init();
    int dev = 0;
    uint64_t bytes = 0;
    uint64_t key = (uint64_t)(uintptr_t)h;
    int had = take(key, CARVE_KIND_ARRAY, &dev, &bytes);
    return settle(REAL(cuArrayDestroy)(h), had, key, CARVE_KIND_ARRAY, dev, bytes);
}

CARVE_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    carve_init();
    int dev = 0;
    uint64_t bytes = 0;
    uint64_t key = (uint64_t)(uintptr_t)h;
    int had = take(key, CARVE_KIND_MIPMAP, &dev, &bytes);
    return settle(REAL(cuMipmappedArrayDestroy)(h), had, key, CARVE_KIND_MIPMAP, dev, bytes);
}

/*
 * vmm.c (fake libcuda): virtual memory management as PyTorch's expandable segments use it
 * (cuda-runtime-facts.md §6): cuMemAddressReserve takes address space only (a PROT_NONE, MAP_NORESERVE
 * mapping, so reserving 1.125 x the device's memory succeeds), cuMemCreate charges its bytes as device
 * memory in use (the shared accounting of common/memory.c), cuMemMap makes a reserved range readable and
 * writable (fresh zero pages, committed as written), cuMemUnmap returns it to reserved address space.
 * Granularity 2 MiB. A handle mapped at two addresses does not alias its data (not emulated).
 */
#include <stdlib.h>
#include <sys/mman.h>

#include "fakecuda.h"

#define VMM_GRANULARITY (2ull << 20)

typedef struct vmm_handle {
    CUmemAllocationProp prop;
    uint64_t size;
    int refs; /* cuMemCreate and each cuMemRetainAllocationHandle */
} vmm_handle_t;

FAKE_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                   CUmemAllocationGranularity_flags option)
{
    FC_CALLED("cuMemGetAllocationGranularity");
    if (!granularity || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = VMM_GRANULARITY;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                 unsigned long long flags)
{
    FC_CALLED("cuMemCreate");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle || !prop || !size || size % VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    vmm_handle_t *h = calloc(1, sizeof *h);
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    h->prop = *prop;
    h->size = size;
    h->refs = 1;
    fc_obj_t o = {.key = fc_new_handle(), .kind = FC_VMM, .ordinal = -1, .span = size, .aux = h};
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        /* device memory; host-located handles (NCCL does this) take none */
        if (!fc_gpu(prop->location.id)) {
            free(h);
            return CUDA_ERROR_INVALID_DEVICE;
        }
        CUresult rc = fc_charge(prop->location.id, size);
        if (rc != CUDA_SUCCESS) {
            free(h);
            return rc;
        }
        o.ordinal = prop->location.id;
        o.bytes = size;
    }
    if (fc_obj_add(&o) != 0) {
        fc_uncharge(o.ordinal, o.bytes);
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *handle = o.key;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    FC_CALLED("cuMemRelease");
    fc_obj_t o;
    if (fc_obj_get(handle, FC_VMM, &o) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    vmm_handle_t *h = o.aux;
    if (__atomic_sub_fetch(&h->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return CUDA_SUCCESS;
    fc_obj_remove(handle, FC_VMM, NULL);
    fc_uncharge(o.ordinal, o.bytes);
    free(h);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                            CUmemGenericAllocationHandle handle)
{
    FC_CALLED("cuMemGetAllocationPropertiesFromHandle");
    fc_obj_t o;
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    if (fc_obj_get(handle, FC_VMM, &o) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    *prop = ((vmm_handle_t *)o.aux)->prop;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                         unsigned long long flags)
{
    FC_CALLED("cuMemAddressReserve");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ptr || !size || size % VMM_GRANULARITY || (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t base = fc_map(size, alignment > VMM_GRANULARITY ? alignment : VMM_GRANULARITY, PROT_NONE);
    if (!base)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fc_obj_t o = {.key = base, .kind = FC_RESERVE, .ordinal = -1, .span = size};
    if (fc_obj_add(&o) != 0) {
        fc_unmap(base, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = base;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    FC_CALLED("cuMemAddressFree");
    fc_obj_t o;
    if (fc_obj_get(ptr, FC_RESERVE, &o) != 0 || o.span != size)
        return CUDA_ERROR_INVALID_VALUE;
    fc_obj_remove(ptr, FC_RESERVE, NULL);
    fc_unmap(ptr, size);
    return CUDA_SUCCESS;
}

/* [ptr, ptr+size) inside one reservation. */
static int reserved(uint64_t ptr, uint64_t size)
{
    fc_obj_t o;
    if (fc_obj_find(ptr, &o) != 0)
        return 0;
    if (o.kind != FC_RESERVE) {
        /* a mapped range inside the reservation: look at the reservation itself */
        return 0;
    }
    return ptr + size <= o.key + o.span;
}

FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                              unsigned long long flags)
{
    FC_CALLED("cuMemMap");
    fc_obj_t h;
    if (fc_obj_get(handle, FC_VMM, &h) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!size || size % VMM_GRANULARITY || ptr % VMM_GRANULARITY || offset + size > h.span || !reserved(ptr, size))
        return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fc_obj_t m = {.key = ptr, .kind = FC_MAPPED, .ordinal = h.ordinal, .span = size,
                  .aux = (void *)(uintptr_t)handle};
    if (fc_obj_add(&m) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    FC_CALLED("cuMemUnmap");
    fc_obj_t m;
    if (fc_obj_get(ptr, FC_MAPPED, &m) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* unmapping may cover several mappings: drop each one that starts inside the range */
    for (uint64_t p = ptr; p < ptr + size; p += VMM_GRANULARITY)
        fc_obj_remove(p, FC_MAPPED, NULL);
    mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    FC_CALLED("cuMemSetAccess");
    fc_obj_t m;
    if (!desc || !count)
        return CUDA_ERROR_INVALID_VALUE;
    if (fc_obj_find(ptr, &m) != 0 || m.kind != FC_MAPPED)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    FC_CALLED("cuMemGetAccess");
    fc_obj_t m;
    if (!flags || !location)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = fc_obj_find(ptr, &m) == 0 && m.kind == FC_MAPPED ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                                                : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    FC_CALLED("cuMemRetainAllocationHandle");
    fc_obj_t m, h;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (fc_obj_find((uint64_t)(uintptr_t)addr, &m) != 0 || m.kind != FC_MAPPED)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key = (uint64_t)(uintptr_t)m.aux;
    if (fc_obj_get(key, FC_VMM, &h) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    __atomic_add_fetch(&((vmm_handle_t *)h.aux)->refs, 1, __ATOMIC_ACQ_REL);
    *handle = key;
    return CUDA_SUCCESS;
}

FC_ALIAS(cuMemGetAllocationGranularity)
FC_ALIAS(cuMemCreate)
FC_ALIAS(cuMemRelease)
FC_ALIAS(cuMemGetAllocationPropertiesFromHandle)
FC_ALIAS(cuMemAddressReserve)
FC_ALIAS(cuMemAddressFree)
FC_ALIAS(cuMemMap)
FC_ALIAS(cuMemUnmap)
FC_ALIAS(cuMemSetAccess)
FC_ALIAS(cuMemGetAccess)
FC_ALIAS(cuMemRetainAllocationHandle)

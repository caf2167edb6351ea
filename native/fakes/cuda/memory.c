/*
 * memory.c (fake libcuda): device memory. Each allocation charges the fake GPU (fake_mem_reserve in
 * common/memory.c, shared with the fake NVML and other processes through CARVE_FAKE_STATE) and is backed by
 * host memory (objects.c), so copies, memsets and cuMemGetInfo behave as on a GPU while kernels do not run
 * (cuda-runtime-facts.md §3 "Memory", §4 "Data"). Here: allocation, free and cuMemGetInfo, address ranges,
 * page-locked host memory and arrays; copies and memsets are copy.c's, pointer attributes unified.c's.
 */
#include <sys/mman.h>
#include <unistd.h>

#include "carve_array_size.h"
#include "fakecuda.h"

#define U(p) ((uint64_t)(uintptr_t)(p))

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
    uint64_t used = fake_mem_used(g->index) + fake_mem_reserved(g->index); /* the driver's own is not free */
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

/* --- address ranges ------------------------------------------------------------------------------ */

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
FC_ALIAS(cuMemAllocHost_v2)
FC_ALIAS(cuMemHostAlloc)
FC_ALIAS(cuMemFreeHost)
FC_ALIAS(cuMemHostRegister_v2)
FC_ALIAS(cuMemHostRegister)
FC_ALIAS(cuMemHostUnregister)
FC_ALIAS(cuMemHostGetDevicePointer_v2)
FC_ALIAS(cuMemHostGetFlags)

/*
 * memory.c (fake libcuda): device memory entry points. Nothing is allocated: each allocation charges the
 * fake GPU (fake_mem_reserve, shared with the fake NVML) and returns a fake device address; an object table
 * remembers what each pointer, array or VMM handle holds so the matching free releases exactly that.
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "carve_array_size.h"
#include "fakecuda.h"

#define VMM_GRANULARITY (2ull << 20)

typedef struct fc_obj {
    uint64_t key;       /* 0 = empty, 1 = deleted */
    int kind, ordinal;
    uint64_t bytes;
} fc_obj_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static fc_obj_t *g_objs;
static uint64_t g_cap, g_used; /* slots, slots not empty (live + deleted) */
static uint64_t g_next_addr = 0x7f0000000000ull;

static uint64_t hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    return k ^ (k >> 33);
}

static int grow(void)
{
    uint64_t cap = g_cap ? g_cap * 2 : 1024;
    fc_obj_t *n = calloc(cap, sizeof *n);
    if (!n)
        return -1;
    for (uint64_t i = 0; i < g_cap; i++) {
        if (g_objs[i].key <= 1)
            continue;
        uint64_t j = hash(g_objs[i].key) & (cap - 1);
        while (n[j].key)
            j = (j + 1) & (cap - 1);
        n[j] = g_objs[i];
    }
    free(g_objs);
    g_objs = n;
    g_cap = cap;
    g_used = 0;
    for (uint64_t i = 0; i < cap; i++)
        g_used += n[i].key != 0;
    return 0;
}

int fc_obj_put(uint64_t key, int kind, int ordinal, uint64_t bytes)
{
    pthread_mutex_lock(&g_lock);
    int rc = 0;
    if ((g_used + 1) * 2 > g_cap && grow() != 0) {
        rc = -1;
    } else {
        uint64_t j = hash(key) & (g_cap - 1);
        while (g_objs[j].key > 1)
            j = (j + 1) & (g_cap - 1);
        g_used += g_objs[j].key == 0;
        g_objs[j] = (fc_obj_t){.key = key, .kind = kind, .ordinal = ordinal, .bytes = bytes};
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int fc_obj_take(uint64_t key, int kind, int *ordinal, uint64_t *bytes)
{
    int rc = -1;
    pthread_mutex_lock(&g_lock);
    if (g_cap) {
        for (uint64_t j = hash(key) & (g_cap - 1); g_objs[j].key; j = (j + 1) & (g_cap - 1)) {
            if (g_objs[j].key == key && g_objs[j].kind == kind) {
                *ordinal = g_objs[j].ordinal;
                *bytes = g_objs[j].bytes;
                g_objs[j].key = 1;
                rc = 0;
                break;
            }
        }
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

uint64_t fc_new_address(uint64_t bytes)
{
    uint64_t span = ((bytes ? bytes : 1) + 0xfff) & ~0xfffull;
    return __atomic_fetch_add(&g_next_addr, span, __ATOMIC_RELAXED);
}

/* Charge `bytes` on the device and record `key` (a fresh address when *key is 0). */
static CUresult take(int ordinal, uint64_t bytes, int kind, uint64_t *key)
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
    if (!*key)
        *key = fc_new_address(bytes);
    if (fc_obj_put(*key, kind, ordinal, bytes) != 0) {
        fake_mem_release(g->index, getpid(), bytes);
        fc_mps_uncharge(ordinal, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

static CUresult give(uint64_t key, int kind)
{
    int ordinal;
    uint64_t bytes;
    if (fc_obj_take(key, kind, &ordinal, &bytes) != 0)
        return kind == FC_MEM ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    fake_mem_release(fc_gpu(ordinal)->index, getpid(), bytes);
    fc_mps_uncharge(ordinal, bytes);
    return CUDA_SUCCESS;
}

static CUresult alloc_current(CUdeviceptr *dptr, size_t bytes, int zero_ok)
{
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dptr || (!bytes && !zero_ok))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key = 0;
    rc = take(ordinal, bytes, FC_MEM, &key);
    if (rc == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)key;
    return rc;
}

FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    FC_CALLED("cuMemAlloc_v2");
    return alloc_current(dptr, bytesize, 0);
}

FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t width, size_t height,
                                        unsigned int elementSize)
{
    FC_CALLED("cuMemAllocPitch_v2");
    if (!pPitch || !width || !height || (elementSize != 4 && elementSize != 8 && elementSize != 16))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t align = fc_env_u64("CARVE_FAKE_PITCH_ALIGN", 512);
    size_t pitch = (size_t)((width + align - 1) / align * align);
    CUresult rc = alloc_current(dptr, pitch * height, 0);
    if (rc == CUDA_SUCCESS)
        *pPitch = pitch;
    return rc;
}

FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    FC_CALLED("cuMemAllocManaged");
    return alloc_current(dptr, bytesize, 0);
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

/* Stream-ordered allocations complete at once in the fake; the stream only picks the variant name. */
#define ASYNC_ALLOC(name)                                                                                  \
    FAKE_EXPORT CUresult name(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)                       \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return alloc_current(dptr, bytesize, 0);                                                           \
    }
ASYNC_ALLOC(cuMemAllocAsync)
ASYNC_ALLOC(cuMemAllocAsync_ptsz)

#define POOL_ALLOC(name)                                                                                   \
    FAKE_EXPORT CUresult name(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)    \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        if (!pool)                                                                                         \
            return CUDA_ERROR_INVALID_VALUE;                                                               \
        return alloc_current(dptr, bytesize, 0);                                                           \
    }
POOL_ALLOC(cuMemAllocFromPoolAsync)
POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz)

#define ASYNC_FREE(name)                                                                                   \
    FAKE_EXPORT CUresult name(CUdeviceptr dptr, CUstream hStream)                                         \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        if (!fc_initialized())                                                                             \
            return CUDA_ERROR_NOT_INITIALIZED;                                                             \
        return give(dptr, FC_MEM);                                                                         \
    }
ASYNC_FREE(cuMemFreeAsync)
ASYNC_FREE(cuMemFreeAsync_ptsz)

/* --- virtual memory management ------------------------------------------------------------------- */

FAKE_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                   CUmemAllocationGranularity_flags option)
{
    FC_CALLED("cuMemGetAllocationGranularity");
    if (!granularity || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = VMM_GRANULARITY;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    FC_CALLED("cuMemCreate");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle || !prop || !size || size % VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key = fc_new_address(size) | 1; /* handles are opaque; odd values never collide with pointers */
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
        /* host memory (NCCL does this): no device memory taken; -1 marks "no device" */
        if (fc_obj_put(key, FC_VMM, -1, 0) != 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        CUresult rc = take(prop->location.id, size, FC_VMM, &key);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    *handle = key;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    FC_CALLED("cuMemRelease");
    int ordinal;
    uint64_t bytes;
    if (fc_obj_take(handle, FC_VMM, &ordinal, &bytes) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    if (ordinal >= 0) {
        fake_mem_release(fc_gpu(ordinal)->index, getpid(), bytes);
        fc_mps_uncharge(ordinal, bytes);
    }
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
FC_ALIAS(cuMemAllocAsync)
FC_ALIAS(cuMemAllocAsync_ptsz)
FC_ALIAS(cuMemAllocFromPoolAsync)
FC_ALIAS(cuMemAllocFromPoolAsync_ptsz)
FC_ALIAS(cuMemFreeAsync)
FC_ALIAS(cuMemFreeAsync_ptsz)
FC_ALIAS(cuMemCreate)
FC_ALIAS(cuMemRelease)
FC_ALIAS(cuMemGetAllocationGranularity)
FC_ALIAS(cuArrayCreate_v2)
FC_ALIAS(cuArray3DCreate_v2)
FC_ALIAS(cuArrayDestroy)
FC_ALIAS(cuMipmappedArrayCreate)
FC_ALIAS(cuMipmappedArrayDestroy)

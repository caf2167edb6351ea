/*
 * pool.c (fake libcuda): memory pools and stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync,
 * cuMemPool*), as cudaMallocAsync and PyTorch's backend:cudaMallocAsync use them.
 *
 * A pool charges the device for what it has reserved (counted as used device memory, as the driver's
 * pools are), hands out host-backed blocks (objects.c, kind FC_POOLMEM), and keeps freed blocks for reuse
 * while its reserve stays within the release threshold (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, default 0: a
 * freed block goes back to the device at once, where the driver would wait for the next synchronisation).
 * cuMemPoolTrimTo releases kept blocks. Allocation completes at once; the stream only orders modelled time.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FC_POOL_MAGIC 0x4c4f4f50u

typedef struct fc_block {
    uint64_t addr, size;
    struct fc_block *next;
} fc_block_t;

typedef struct fc_pool {
    uint32_t magic;
    int ordinal;
    CUmemPoolProps props;
    pthread_mutex_t lock;
    uint64_t threshold, reserved, used, reserved_high, used_high;
    int reuse[3];
    fc_block_t *free_list;
} fc_pool_t;

static fc_pool_t g_default[FAKE_MAX_GPUS];
static fc_pool_t *g_current[FAKE_MAX_GPUS];
static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;

static void pool_init(fc_pool_t *p, int ordinal)
{
    memset(p, 0, sizeof *p);
    p->magic = FC_POOL_MAGIC;
    p->ordinal = ordinal;
    p->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->props.location.id = ordinal;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    pthread_mutex_init(&p->lock, NULL);
    fc_handle_add(p, FC_H_POOL);
}

static fc_pool_t *default_pool(int ordinal)
{
    if (!fc_gpu(ordinal))
        return NULL;
    pthread_mutex_lock(&g_init_lock);
    if (g_default[ordinal].magic != FC_POOL_MAGIC)
        pool_init(&g_default[ordinal], ordinal);
    if (!g_current[ordinal])
        g_current[ordinal] = &g_default[ordinal];
    pthread_mutex_unlock(&g_init_lock);
    return &g_default[ordinal];
}

static fc_pool_t *pool_get(CUmemoryPool h)
{
    fc_pool_t *p = (fc_pool_t *)h;
    return fc_handle_ok(p, FC_H_POOL) && p->magic == FC_POOL_MAGIC ? p : NULL;
}

CUresult fc_pool_default(CUmemoryPool *pool, CUdevice dev)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    fc_pool_t *p = default_pool(dev);
    if (!p)
        return CUDA_ERROR_INVALID_DEVICE;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

CUresult fc_pool_current(CUmemoryPool *pool, CUdevice dev)
{
    CUresult rc = fc_pool_default(pool, dev);
    if (rc == CUDA_SUCCESS)
        *pool = (CUmemoryPool)g_current[dev];
    return rc;
}

CUresult fc_pool_set_current(CUdevice dev, CUmemoryPool pool)
{
    fc_pool_t *p = pool_get(pool);
    if (!fc_gpu(dev) || !default_pool(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!p || p->ordinal != dev)
        return CUDA_ERROR_INVALID_VALUE;
    g_current[dev] = p;
    return CUDA_SUCCESS;
}

/* Releases kept blocks while the reserve is above `keep` (lock held). */
static void trim(fc_pool_t *p, uint64_t keep)
{
    fc_block_t **pp = &p->free_list;
    while (*pp && p->reserved > keep) {
        fc_block_t *b = *pp;
        *pp = b->next;
        fc_obj_remove(b->addr, FC_POOLMEM, NULL);
        fc_unmap(b->addr, b->size);
        fc_uncharge(p->ordinal, b->size);
        p->reserved -= b->size;
        free(b);
    }
}

static CUresult pool_alloc(fc_pool_t *p, CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    if (!dptr || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (s && !fc_stream_get(s))
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t size = fc_page_round(bytes);
    pthread_mutex_lock(&p->lock);
    /* reuse a kept block of a fitting size (at most twice the request) */
    for (fc_block_t **pp = &p->free_list; *pp; pp = &(*pp)->next) {
        fc_block_t *b = *pp;
        if (b->size >= size && b->size <= 2 * size) {
            *pp = b->next;
            p->used += b->size;
            if (p->used > p->used_high)
                p->used_high = p->used;
            *dptr = b->addr;
            free(b);
            pthread_mutex_unlock(&p->lock);
            return CUDA_SUCCESS;
        }
    }
    CUresult rc = fc_charge(p->ordinal, size);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && p->free_list) {
        trim(p, 0); /* the driver gives kept memory back before failing */
        rc = fc_charge(p->ordinal, size);
    }
    if (rc == CUDA_SUCCESS) {
        rc = fc_alloc_backed(p->ordinal, size, 0, FC_POOLMEM, p, dptr);
        if (rc != CUDA_SUCCESS) {
            fc_uncharge(p->ordinal, size);
        } else {
            p->reserved += size;
            p->used += size;
            if (p->reserved > p->reserved_high)
                p->reserved_high = p->reserved;
            if (p->used > p->used_high)
                p->used_high = p->used;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    CUmemoryPool pool;
    rc = fc_pool_current(&pool, ordinal);
    return rc == CUDA_SUCCESS ? pool_alloc(pool_get(pool), dptr, bytes, s) : rc;
}

#define ASYNC_ALLOC(name)                                                                                  \
    FAKE_EXPORT CUresult name(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)                       \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return alloc_async(dptr, bytesize, hStream);                                                       \
    }
ASYNC_ALLOC(cuMemAllocAsync)
ASYNC_ALLOC(cuMemAllocAsync_ptsz)

#define POOL_ALLOC(name)                                                                                   \
    FAKE_EXPORT CUresult name(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)    \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        if (!fc_initialized())                                                                             \
            return CUDA_ERROR_NOT_INITIALIZED;                                                             \
        fc_pool_t *p = pool_get(pool);                                                                     \
        if (!p)                                                                                            \
            return CUDA_ERROR_INVALID_VALUE;                                                               \
        return pool_alloc(p, dptr, bytesize, hStream);                                                     \
    }
POOL_ALLOC(cuMemAllocFromPoolAsync)
POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz)

/* A pool block returns to its pool; memory from cuMemAlloc freed this way is freed. */
static CUresult free_async(CUdeviceptr dptr, CUstream s)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_obj_t o;
    if (fc_obj_get(dptr, FC_POOLMEM, &o) == 0) {
        fc_pool_t *p = o.aux;
        fc_block_t *b = malloc(sizeof *b);
        if (!b)
            return CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_lock(&p->lock);
        b->addr = dptr;
        b->size = o.span;
        b->next = p->free_list;
        p->free_list = b;
        p->used -= o.span;
        trim(p, p->threshold > p->used ? p->threshold : p->used);
        pthread_mutex_unlock(&p->lock);
        return CUDA_SUCCESS;
    }
    return fc_impl_cuMemFree_v2(dptr); /* the fake's own, not an interposer's (no double accounting) */
}

#define ASYNC_FREE(name)                                                                                   \
    FAKE_EXPORT CUresult name(CUdeviceptr dptr, CUstream hStream)                                         \
    {                                                                                                      \
        CUresult rc = free_async(dptr, hStream);                                                           \
        FC_CALLED(#name);                                                                                  \
        return rc;                                                                                         \
    }
ASYNC_FREE(cuMemFreeAsync)
ASYNC_FREE(cuMemFreeAsync_ptsz)

FAKE_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    FC_CALLED("cuMemPoolCreate");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool || !props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_gpu(props->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    fc_pool_t *p = malloc(sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pool_init(p, props->location.id);
    p->props = *props;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    FC_CALLED("cuMemPoolDestroy");
    fc_pool_t *p = pool_get(pool);
    if (!p || p == &g_default[p->ordinal])
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&p->lock);
    trim(p, 0);
    pthread_mutex_unlock(&p->lock);
    if (g_current[p->ordinal] == p)
        g_current[p->ordinal] = &g_default[p->ordinal];
    fc_handle_del(p, FC_H_POOL);
    p->magic = 0; /* blocks still allocated stay charged until freed, as the driver defers destruction */
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    FC_CALLED("cuMemPoolTrimTo");
    fc_pool_t *p = pool_get(pool);
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&p->lock);
    trim(p, keep);
    pthread_mutex_unlock(&p->lock);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    FC_CALLED("cuMemPoolSetAttribute");
    fc_pool_t *p = pool_get(pool);
    if (!p || !value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&p->lock);
    CUresult rc = CUDA_SUCCESS;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: p->reuse[0] = *(int *)value; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: p->reuse[1] = *(int *)value; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: p->reuse[2] = *(int *)value; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->threshold = *(cuuint64_t *)value; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: p->reserved_high = p->reserved; break; /* only reset to 0 allowed */
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: p->used_high = p->used; break;
    default: rc = CUDA_ERROR_INVALID_VALUE; break;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

FAKE_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    FC_CALLED("cuMemPoolGetAttribute");
    fc_pool_t *p = pool_get(pool);
    if (!p || !value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&p->lock);
    CUresult rc = CUDA_SUCCESS;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: *(int *)value = p->reuse[0]; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: *(int *)value = p->reuse[1]; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *(int *)value = p->reuse[2]; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = p->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = p->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = p->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = p->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = p->used_high; break;
    default: rc = CUDA_ERROR_INVALID_VALUE; break;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

FAKE_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    FC_CALLED("cuMemPoolSetAccess");
    return pool_get(pool) && (map || !count) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *location)
{
    FC_CALLED("cuMemPoolGetAccess");
    fc_pool_t *p = pool_get(pool);
    if (!p || !flags || !location)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = location->type == CU_MEM_LOCATION_TYPE_DEVICE && location->id == p->ordinal
                 ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                 : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return CUDA_SUCCESS;
}

/* CUDA 13: pools by location; only device locations of pinned (default) allocations have pools here. */
static CUresult location_device(const CUmemLocation *loc, CUmemAllocationType type, int *dev)
{
    if (!loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE || (type != CU_MEM_ALLOCATION_TYPE_PINNED && type != 0))
        return CUDA_ERROR_NOT_SUPPORTED;
    *dev = loc->id;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool, CUmemLocation *loc, CUmemAllocationType type)
{
    FC_CALLED("cuMemGetDefaultMemPool");
    int dev;
    CUresult rc = location_device(loc, type, &dev);
    return rc == CUDA_SUCCESS ? fc_pool_default(pool, dev) : rc;
}

FAKE_EXPORT CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *loc, CUmemAllocationType type)
{
    FC_CALLED("cuMemGetMemPool");
    int dev;
    CUresult rc = location_device(loc, type, &dev);
    return rc == CUDA_SUCCESS ? fc_pool_current(pool, dev) : rc;
}

FAKE_EXPORT CUresult cuMemSetMemPool(CUmemLocation *loc, CUmemAllocationType type, CUmemoryPool pool)
{
    FC_CALLED("cuMemSetMemPool");
    int dev;
    CUresult rc = location_device(loc, type, &dev);
    return rc == CUDA_SUCCESS ? fc_pool_set_current(dev, pool) : rc;
}

FC_ALIAS(cuMemGetDefaultMemPool)
FC_ALIAS(cuMemGetMemPool)
FC_ALIAS(cuMemSetMemPool)
FC_ALIAS(cuMemAllocAsync)
FC_ALIAS(cuMemAllocAsync_ptsz)
FC_ALIAS(cuMemAllocFromPoolAsync)
FC_ALIAS(cuMemAllocFromPoolAsync_ptsz)
FC_ALIAS(cuMemFreeAsync)
FC_ALIAS(cuMemFreeAsync_ptsz)
FC_ALIAS(cuMemPoolCreate)
FC_ALIAS(cuMemPoolDestroy)
FC_ALIAS(cuMemPoolTrimTo)
FC_ALIAS(cuMemPoolSetAttribute)
FC_ALIAS(cuMemPoolGetAttribute)
FC_ALIAS(cuMemPoolSetAccess)
FC_ALIAS(cuMemPoolGetAccess)

/*
 * context_info.c (fake libcuda): what a context answers and accepts: its device, API version, id and flags,
 * synchronization (until the kernels this process queued on its GPU end), limits, cache and shared memory
 * configuration (accepted, answered with the defaults), stream priorities (six levels, as on Ampere and
 * Hopper). Which context is current is context.c's.
 */
#include <stdint.h>
#include <unistd.h>

#include "fakecuda.h"

FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    FC_CALLED("cuCtxGetDevice");
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc == CUDA_SUCCESS && !device)
        return CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *device = ordinal;
    return rc;
}

/* CUDA 13: the device of a given context (NULL: the current one). */
FAKE_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    FC_CALLED("cuCtxGetDevice_v2");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_ctx_t *c = fc_ctx_from(ctx);
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = c->ordinal;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    FC_CALLED("cuCtxSynchronize_v2");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_ctx_t *c = fc_ctx_from(ctx);
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    const fake_gpu_t *g = fc_gpu(c->ordinal);
    if (g)
        fc_sleep_until(fake_kernel_last_end(g->index, getpid()));
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    FC_CALLED("cuCtxGetApiVersion");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!fc_ctx_from(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 3020; /* what every context created through the v2+ API reports */
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
    FC_CALLED("cuCtxGetFlags");
    fc_ctx_t *c = fc_ctx_from(NULL);
    if (!c)
        return fc_initialized() ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_INITIALIZED;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSetFlags(unsigned int flags)
{
    FC_CALLED("cuCtxSetFlags");
    fc_ctx_t *c = fc_ctx_from(NULL);
    if (!c)
        return fc_initialized() ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_INITIALIZED;
    c->flags = flags;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
    FC_CALLED("cuCtxGetId");
    fc_ctx_t *c = fc_ctx_from(ctx);
    if (!c)
        return fc_initialized() ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_INITIALIZED;
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    *id = (unsigned long long)(uintptr_t)c;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    FC_CALLED("cuCtxGetStreamPriorityRange");
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5; /* six priority levels, as on Ampere and Hopper */
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
    FC_CALLED("cuCtxGetLimit");
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    switch (limit) {
    case CU_LIMIT_STACK_SIZE: *value = 1024; break;
    case CU_LIMIT_PRINTF_FIFO_SIZE: *value = 1 << 20; break;
    case CU_LIMIT_MALLOC_HEAP_SIZE: *value = 8 << 20; break;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH: *value = 2; break;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT: *value = 2048; break;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY: *value = 64; break;
    default: *value = 0; break;
    }
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    FC_CALLED("cuCtxSetLimit");
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *config)
{
    FC_CALLED("cuCtxGetCacheConfig");
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    *config = CU_FUNC_CACHE_PREFER_NONE;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    FC_CALLED("cuCtxSetCacheConfig");
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetSharedMemConfig(CUsharedconfig *config)
{
    FC_CALLED("cuCtxGetSharedMemConfig");
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    *config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    FC_CALLED("cuCtxSetSharedMemConfig");
    return CUDA_SUCCESS;
}

/* hidden aliases: cuGetProcAddress hands out these, never addresses an interposer could replace */
FC_ALIAS(cuCtxGetDevice)
FC_ALIAS(cuCtxGetDevice_v2)
FC_ALIAS(cuCtxSynchronize_v2)
FC_ALIAS(cuCtxGetApiVersion)
FC_ALIAS(cuCtxGetFlags)
FC_ALIAS(cuCtxSetFlags)
FC_ALIAS(cuCtxGetId)
FC_ALIAS(cuCtxGetStreamPriorityRange)
FC_ALIAS(cuCtxGetLimit)
FC_ALIAS(cuCtxSetLimit)
FC_ALIAS(cuCtxGetCacheConfig)
FC_ALIAS(cuCtxSetCacheConfig)
FC_ALIAS(cuCtxGetSharedMemConfig)
FC_ALIAS(cuCtxSetSharedMemConfig)

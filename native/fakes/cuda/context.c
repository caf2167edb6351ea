/*
 * context.c (fake libcuda): primary and created contexts, the per-thread context stack, and the context
 * local storage the runtime keeps its per-context state in (cuda-runtime-facts.md §1 step 13, §2, §7).
 *
 * Facts followed: the runtime works on primary contexts only, and the handle CUDART-interface slot 2 gives
 * must be the one cuDevicePrimaryCtxRetain gives (one static context per device here); the current context
 * is per thread (cuCtxSetCurrent replaces the top of the thread's stack, push/pop nest); context local
 * storage is kept per context, keyed by the runtime's key pointer, and its destructors run when the primary
 * context is reset or a created context destroyed.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FC_CTX_STACK 32

static fc_ctx_t g_primary[FAKE_MAX_GPUS];
static __thread fc_ctx_t *tls_stack[FC_CTX_STACK];
static __thread int tls_depth; /* entries in tls_stack; the top is current */

void fc_ctx_init_primary(int count)
{
    for (int i = 0; i < count && i < FAKE_MAX_GPUS; i++) {
        g_primary[i].magic = FC_CTX_MAGIC;
        g_primary[i].ordinal = i;
        g_primary[i].primary = 1;
        pthread_mutex_init(&g_primary[i].lock, NULL);
    }
}

/* A primary context (static) or a created one (registered): never dereference anything else. */
static int ctx_ok(const fc_ctx_t *c)
{
    if (c >= g_primary && c < g_primary + FAKE_MAX_GPUS)
        return c->magic == FC_CTX_MAGIC;
    return fc_handle_ok(c, FC_H_CTX) && c->magic == FC_CTX_MAGIC;
}

fc_ctx_t *fc_primary(int ordinal)
{
    return fc_gpu(ordinal) ? &g_primary[ordinal] : NULL;
}

fc_ctx_t *fc_current_ctx(void)
{
    return tls_depth > 0 ? tls_stack[tls_depth - 1] : NULL;
}

fc_ctx_t *fc_ctx_from(CUcontext ctx)
{
    fc_ctx_t *c = ctx ? (fc_ctx_t *)ctx : fc_current_ctx();
    return ctx_ok(c) ? c : NULL;
}

static void set_current(fc_ctx_t *c)
{
    if (tls_depth == 0) {
        if (c)
            tls_stack[tls_depth++] = c;
    } else if (c) {
        tls_stack[tls_depth - 1] = c;
    } else {
        tls_depth--; /* cuCtxSetCurrent(NULL) pops the current context */
    }
}

int fc_current_ordinal(void)
{
    fc_ctx_t *c = fc_current_ctx();
    return c ? c->ordinal : -1;
}

CUresult fc_check_ctx(int *ordinal)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_ctx_t *c = fc_current_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    *ordinal = c->ordinal;
    return CUDA_SUCCESS;
}

static CUresult check_dev(CUdevice dev)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    return fc_gpu(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* Streams, events, modules and memory of a reset primary context are not reclaimed in the fake: handles
 * the runtime dropped stay valid (a real driver invalidates them), allocations stay charged until freed. */
void fc_ctx_reset_resources(int ordinal)
{
}

/* --- primary contexts ----------------------------------------------------------------------------- */

FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    FC_CALLED("cuDevicePrimaryCtxRetain");
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_primary[dev].lock);
    g_primary[dev].refs++;
    g_primary[dev].active = 1;
    pthread_mutex_unlock(&g_primary[dev].lock);
    *pctx = (CUcontext)&g_primary[dev];
    return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_primary[dev].lock);
    if (g_primary[dev].refs <= 0) {
        pthread_mutex_unlock(&g_primary[dev].lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    /* The context stays usable while threads hold it current, as with the driver when refs reach 0 it is
     * deactivated; keeping its state is the safe approximation. */
    if (--g_primary[dev].refs == 0)
        g_primary[dev].active = 0;
    pthread_mutex_unlock(&g_primary[dev].lock);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    FC_CALLED("cuDevicePrimaryCtxRelease_v2");
    return primary_release(dev);
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    FC_CALLED("cuDevicePrimaryCtxRelease");
    return primary_release(dev);
}

static CUresult primary_reset(CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_cls_clear(&g_primary[dev]);
    fc_ctx_reset_resources(dev);
    pthread_mutex_lock(&g_primary[dev].lock);
    g_primary[dev].active = 0;
    g_primary[dev].flags = 0;
    pthread_mutex_unlock(&g_primary[dev].lock);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    FC_CALLED("cuDevicePrimaryCtxReset_v2");
    return primary_reset(dev);
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    FC_CALLED("cuDevicePrimaryCtxReset");
    return primary_reset(dev);
}

static CUresult primary_get_state(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = g_primary[dev].flags;
    *active = g_primary[dev].active;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    FC_CALLED("cuDevicePrimaryCtxGetState");
    return primary_get_state(dev, flags, active);
}

static CUresult primary_set_flags(CUdevice dev, unsigned int flags)
{
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    g_primary[dev].flags = flags;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    FC_CALLED("cuDevicePrimaryCtxSetFlags_v2");
    return primary_set_flags(dev, flags);
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    FC_CALLED("cuDevicePrimaryCtxSetFlags");
    return primary_set_flags(dev, flags);
}

/* --- created contexts ----------------------------------------------------------------------------- */

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    fc_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->magic = FC_CTX_MAGIC;
    c->ordinal = dev;
    c->refs = 1;
    c->active = 1;
    c->flags = flags;
    pthread_mutex_init(&c->lock, NULL);
    if (fc_handle_add(c, FC_H_CTX) != 0) {
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (tls_depth < FC_CTX_STACK)
        tls_stack[tls_depth++] = c; /* a created context is pushed current, as in the real driver */
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    FC_CALLED("cuCtxCreate");
    return ctx_create(pctx, flags, dev);
}

FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    FC_CALLED("cuCtxCreate_v2");
    return ctx_create(pctx, flags, dev);
}

FAKE_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned int flags,
                                    CUdevice dev)
{
    FC_CALLED("cuCtxCreate_v3");
    return ctx_create(pctx, flags, dev);
}

FAKE_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    FC_CALLED("cuCtxCreate_v4");
    return ctx_create(pctx, flags, dev);
}

static CUresult ctx_destroy(CUcontext ctx)
{
    fc_ctx_t *c = (fc_ctx_t *)ctx;
    if (!c || !ctx_ok(c) || c->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    for (int i = 0; i < tls_depth; i++)
        if (tls_stack[i] == c) {
            memmove(&tls_stack[i], &tls_stack[i + 1], (size_t)(tls_depth - i - 1) * sizeof tls_stack[0]);
            tls_depth--;
            i--;
        }
    fc_cls_clear(c);
    fc_handle_del(c, FC_H_CTX);
    c->magic = 0;
    free(c);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    FC_CALLED("cuCtxDestroy_v2");
    return ctx_destroy(ctx);
}

FAKE_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    FC_CALLED("cuCtxDestroy");
    return ctx_destroy(ctx);
}

FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    FC_CALLED("cuCtxSetCurrent");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_ctx_t *c = (fc_ctx_t *)ctx;
    if (c && !ctx_ok(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    set_current(c);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    FC_CALLED("cuCtxGetCurrent");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)fc_current_ctx();
    return CUDA_SUCCESS;
}

static CUresult ctx_push(CUcontext ctx)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_ctx_t *c = (fc_ctx_t *)ctx;
    if (!c || !ctx_ok(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth >= FC_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    tls_stack[tls_depth++] = c;
    return CUDA_SUCCESS;
}

static CUresult ctx_pop(CUcontext *pctx)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (tls_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    fc_ctx_t *c = tls_stack[--tls_depth];
    if (pctx)
        *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    FC_CALLED("cuCtxPushCurrent_v2");
    return ctx_push(ctx);
}

FAKE_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx)
{
    FC_CALLED("cuCtxPushCurrent");
    return ctx_push(ctx);
}

FAKE_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    FC_CALLED("cuCtxPopCurrent_v2");
    return ctx_pop(pctx);
}

FAKE_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    FC_CALLED("cuCtxPopCurrent");
    return ctx_pop(pctx);
}

/* hidden aliases: cuGetProcAddress hands out these, never addresses an interposer could replace */
FC_ALIAS(cuDevicePrimaryCtxRetain)
FC_ALIAS(cuDevicePrimaryCtxRelease_v2)
FC_ALIAS(cuDevicePrimaryCtxRelease)
FC_ALIAS(cuDevicePrimaryCtxReset_v2)
FC_ALIAS(cuDevicePrimaryCtxReset)
FC_ALIAS(cuDevicePrimaryCtxGetState)
FC_ALIAS(cuDevicePrimaryCtxSetFlags_v2)
FC_ALIAS(cuDevicePrimaryCtxSetFlags)
FC_ALIAS(cuCtxCreate)
FC_ALIAS(cuCtxCreate_v2)
FC_ALIAS(cuCtxCreate_v3)
FC_ALIAS(cuCtxCreate_v4)
FC_ALIAS(cuCtxDestroy)
FC_ALIAS(cuCtxDestroy_v2)
FC_ALIAS(cuCtxSetCurrent)
FC_ALIAS(cuCtxGetCurrent)
FC_ALIAS(cuCtxPushCurrent)
FC_ALIAS(cuCtxPushCurrent_v2)
FC_ALIAS(cuCtxPopCurrent)
FC_ALIAS(cuCtxPopCurrent_v2)

/*
 * stream.c (fake libcuda): streams on the fake time model (common/kernels.c). A kernel occupies its GPU for
 * ceil(blocks / SMs) waves, all processes' kernels one after another; a stream remembers when the last
 * work queued on it completes, so cuStreamQuery answers CUDA_ERROR_NOT_READY while modelled work pends and
 * cuStreamSynchronize sleeps until then (cuda-runtime-facts.md §7 "Data"/events). The default streams
 * (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) wait for all of the process's work on their device.
 * Like a real driver's bounded push buffer, a launch blocks while the GPU's queue holds more than
 * CARVE_FAKE_QUEUE_NS of work. Capture (cuStreamBeginCapture...) is in capture.c.
 */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda.h"

static fc_stream_t g_default[FAKE_MAX_GPUS];
static unsigned long long g_next_id = 1;

void fc_sleep_until(uint64_t t_ns)
{
    uint64_t now = fake_now_ns();
    if (t_ns <= now)
        return;
    uint64_t ns = t_ns - now;
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

fc_stream_t *fc_stream_get(CUstream s)
{
    if ((uintptr_t)s <= (uintptr_t)CU_STREAM_PER_THREAD) {
        int ordinal = fc_current_ordinal();
        if (ordinal < 0 || ordinal >= FAKE_MAX_GPUS)
            return NULL;
        fc_stream_t *d = &g_default[ordinal];
        if (d->magic != FC_STREAM_MAGIC) {
            d->ordinal = ordinal;
            d->is_default = 1;
            d->magic = FC_STREAM_MAGIC;
        }
        return d;
    }
    fc_stream_t *st = (fc_stream_t *)s;
    return fc_handle_ok(st, FC_H_STREAM) && st->magic == FC_STREAM_MAGIC ? st : NULL;
}

uint64_t fc_stream_end(const fc_stream_t *st)
{
    if (st->is_default) {
        const fake_gpu_t *g = fc_gpu(st->ordinal);
        uint64_t dev_end = g ? fake_kernel_last_end(g->index, getpid()) : 0;
        return dev_end > st->end_ns ? dev_end : st->end_ns;
    }
    return st->end_ns;
}

void fc_stream_submit(fc_stream_t *st, CUfunction f, uint64_t blocks)
{
    const fake_gpu_t *g = fc_gpu(st->ordinal);
    if (!g)
        return;
    uint64_t end = fake_kernel_submit(g->index, getpid(), fc_mps_blocks(blocks), fc_kernel_wave_ns(f));
    if (end > st->end_ns)
        st->end_ns = end;
    uint64_t depth = fc_env_u64("CARVE_FAKE_QUEUE_NS", 5000000);
    if (end > depth)
        fc_sleep_until(end - depth);
}

static CUresult stream_create(CUstream *ph, unsigned flags, int priority)
{
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    fc_stream_t *st = calloc(1, sizeof *st);
    if (!st)
        return CUDA_ERROR_OUT_OF_MEMORY;
    st->magic = FC_STREAM_MAGIC;
    st->ordinal = ordinal;
    st->flags = flags;
    st->priority = priority > 0 ? 0 : priority < -5 ? -5 : priority;
    st->id = __atomic_fetch_add(&g_next_id, 1, __ATOMIC_RELAXED);
    if (fc_handle_add(st, FC_H_STREAM) != 0) {
        free(st);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ph = (CUstream)st;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamCreate(CUstream *ph, unsigned int flags)
{
    FC_CALLED("cuStreamCreate");
    return stream_create(ph, flags, 0);
}

FAKE_EXPORT CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
    FC_CALLED("cuStreamCreateWithPriority");
    return stream_create(ph, flags, priority);
}

static CUresult stream_destroy(CUstream s)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_stream_t *st = fc_stream_get(s);
    if (!st || st->is_default)
        return CUDA_ERROR_INVALID_HANDLE;
    fc_handle_del(st, FC_H_STREAM);
    st->magic = 0; /* work still pending completes on the device regardless */
    free(st);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
    FC_CALLED("cuStreamDestroy_v2");
    return stream_destroy(s);
}

FAKE_EXPORT CUresult cuStreamDestroy(CUstream s)
{
    FC_CALLED("cuStreamDestroy");
    return stream_destroy(s);
}

static CUresult stream_sync(CUstream s)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_stream_t *st = fc_stream_get(s);
    if (!st)
        return (uintptr_t)s <= 2 ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_HANDLE;
    if (st->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    fc_sleep_until(fc_stream_end(st));
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    FC_CALLED("cuStreamSynchronize");
    return stream_sync(s);
}

FAKE_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s)
{
    FC_CALLED("cuStreamSynchronize_ptsz");
    return stream_sync(s);
}

static CUresult stream_query(CUstream s)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_stream_t *st = fc_stream_get(s);
    if (!st)
        return (uintptr_t)s <= 2 ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_HANDLE;
    if (st->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return fc_stream_end(st) > fake_now_ns() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamQuery(CUstream s)
{
    FC_CALLED("cuStreamQuery");
    return stream_query(s);
}

FAKE_EXPORT CUresult cuStreamQuery_ptsz(CUstream s)
{
    FC_CALLED("cuStreamQuery_ptsz");
    return stream_query(s);
}

FAKE_EXPORT CUresult cuCtxSynchronize(void)
{
    FC_CALLED("cuCtxSynchronize");
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_sleep_until(fake_kernel_last_end(fc_gpu(ordinal)->index, getpid()));
    return CUDA_SUCCESS;
}

#define STREAM_GET(name, field, T)                                                                         \
    FAKE_EXPORT CUresult name(CUstream s, T *out)                                                          \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        fc_stream_t *st = fc_stream_get(s);                                                                \
        if (!st)                                                                                           \
            return CUDA_ERROR_INVALID_HANDLE;                                                              \
        if (!out)                                                                                          \
            return CUDA_ERROR_INVALID_VALUE;                                                               \
        *out = (T)st->field;                                                                               \
        return CUDA_SUCCESS;                                                                               \
    }
STREAM_GET(cuStreamGetFlags, flags, unsigned int)
STREAM_GET(cuStreamGetFlags_ptsz, flags, unsigned int)
STREAM_GET(cuStreamGetPriority, priority, int)
STREAM_GET(cuStreamGetPriority_ptsz, priority, int)
STREAM_GET(cuStreamGetId, id, unsigned long long)
STREAM_GET(cuStreamGetId_ptsz, id, unsigned long long)

#define STREAM_CTX(name)                                                                                   \
    FAKE_EXPORT CUresult name(CUstream s, CUcontext *pctx)                                                 \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        fc_stream_t *st = fc_stream_get(s);                                                                \
        if (!st)                                                                                           \
            return CUDA_ERROR_INVALID_HANDLE;                                                              \
        if (!pctx)                                                                                         \
            return CUDA_ERROR_INVALID_VALUE;                                                               \
        *pctx = (CUcontext)fc_primary(st->ordinal);                                                        \
        return CUDA_SUCCESS;                                                                               \
    }
STREAM_CTX(cuStreamGetCtx)
STREAM_CTX(cuStreamGetCtx_ptsz)

#define STREAM_CTX2(name)                                                                                  \
    FAKE_EXPORT CUresult name(CUstream s, CUcontext *pctx, CUgreenCtx *pgreen)                             \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        fc_stream_t *st = fc_stream_get(s);                                                                \
        if (!st)                                                                                           \
            return CUDA_ERROR_INVALID_HANDLE;                                                              \
        if (pctx)                                                                                          \
            *pctx = (CUcontext)fc_primary(st->ordinal);                                                    \
        if (pgreen)                                                                                        \
            *pgreen = NULL;                                                                                \
        return CUDA_SUCCESS;                                                                               \
    }
STREAM_CTX2(cuStreamGetCtx_v2)
STREAM_CTX2(cuStreamGetCtx_v2_ptsz)

#define STREAM_DEVICE(name)                                                                                \
    FAKE_EXPORT CUresult name(CUstream s, CUdevice *dev)                                                   \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        fc_stream_t *st = fc_stream_get(s);                                                                \
        if (!st)                                                                                           \
            return CUDA_ERROR_INVALID_HANDLE;                                                              \
        if (!dev)                                                                                          \
            return CUDA_ERROR_INVALID_VALUE;                                                               \
        *dev = st->ordinal;                                                                                \
        return CUDA_SUCCESS;                                                                               \
    }
STREAM_DEVICE(cuStreamGetDevice)
STREAM_DEVICE(cuStreamGetDevice_ptsz)

/* Host callbacks run at once on the calling thread after the stream's modelled work. */
static CUresult host_func(CUstream s, CUhostFn fn, void *data)
{
    fc_stream_t *st = fc_stream_get(s);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    if (st->capture)
        return CUDA_ERROR_NOT_SUPPORTED;
    fc_sleep_until(fc_stream_end(st));
    fn(data);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
    FC_CALLED("cuLaunchHostFunc");
    return host_func(s, fn, data);
}

FAKE_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data)
{
    FC_CALLED("cuLaunchHostFunc_ptsz");
    return host_func(s, fn, data);
}

FAKE_EXPORT CUresult cuLaunchHostFunc_v2(CUstream s, CUhostFn fn, void *data, unsigned int mode)
{
    FC_CALLED("cuLaunchHostFunc_v2");
    return host_func(s, fn, data);
}

FAKE_EXPORT CUresult cuLaunchHostFunc_v2_ptsz(CUstream s, CUhostFn fn, void *data, unsigned int mode)
{
    FC_CALLED("cuLaunchHostFunc_v2_ptsz");
    return host_func(s, fn, data);
}

FAKE_EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *data, unsigned int flags)
{
    FC_CALLED("cuStreamAddCallback");
    fc_stream_t *st = fc_stream_get(s);
    if (!st || !cb)
        return CUDA_ERROR_INVALID_VALUE;
    fc_sleep_until(fc_stream_end(st));
    cb(s, CUDA_SUCCESS, data);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t n, unsigned int flags)
{
    FC_CALLED("cuStreamAttachMemAsync");
    return fc_stream_get(s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Stream memory operations: a write lands at once; a wait is satisfied when the value is already there. */
FAKE_EXPORT CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    FC_CALLED("cuStreamWriteValue32_v2");
    if (!fc_stream_get(s))
        return CUDA_ERROR_INVALID_HANDLE;
    return fc_copy(s, (void *)(uintptr_t)addr, &value, sizeof value);
}

FAKE_EXPORT CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
    FC_CALLED("cuStreamWriteValue64_v2");
    if (!fc_stream_get(s))
        return CUDA_ERROR_INVALID_HANDLE;
    return fc_copy(s, (void *)(uintptr_t)addr, &value, sizeof value);
}

FC_ALIAS(cuStreamCreate)
FC_ALIAS(cuStreamCreateWithPriority)
FC_ALIAS(cuStreamDestroy_v2)
FC_ALIAS(cuStreamDestroy)
FC_ALIAS(cuStreamSynchronize)
FC_ALIAS(cuStreamSynchronize_ptsz)
FC_ALIAS(cuStreamQuery)
FC_ALIAS(cuStreamQuery_ptsz)
FC_ALIAS(cuCtxSynchronize)
FC_ALIAS(cuStreamGetFlags)
FC_ALIAS(cuStreamGetFlags_ptsz)
FC_ALIAS(cuStreamGetPriority)
FC_ALIAS(cuStreamGetPriority_ptsz)
FC_ALIAS(cuStreamGetId)
FC_ALIAS(cuStreamGetId_ptsz)
FC_ALIAS(cuStreamGetCtx)
FC_ALIAS(cuStreamGetCtx_ptsz)
FC_ALIAS(cuStreamGetDevice)
FC_ALIAS(cuStreamGetDevice_ptsz)
FC_ALIAS(cuStreamGetCtx_v2)
FC_ALIAS(cuStreamGetCtx_v2_ptsz)
FC_ALIAS(cuLaunchHostFunc_v2)
FC_ALIAS(cuLaunchHostFunc_v2_ptsz)
FC_ALIAS(cuLaunchHostFunc)
FC_ALIAS(cuLaunchHostFunc_ptsz)
FC_ALIAS(cuStreamAddCallback)
FC_ALIAS(cuStreamAttachMemAsync)
FC_ALIAS(cuStreamWriteValue32_v2)
FC_ALIAS(cuStreamWriteValue64_v2)

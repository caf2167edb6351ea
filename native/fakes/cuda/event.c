/*
 * event.c (fake libcuda): events on the fake time model. Recording an event stamps it with the time the
 * stream's modelled work completes (or now, when the stream is idle), so cuEventElapsedTime reflects
 * modelled kernel time, and cuEventQuery answers CUDA_ERROR_NOT_READY until that time has passed
 * (cuda-runtime-facts.md §7 "Data"). An event recorded on a capturing stream joins a stream that waits on
 * it to the capture (the fork/join pattern of multi-stream capture, capture.c).
 */
#include <stdlib.h>

#include "fakecuda.h"

#define FC_EVENT_MAGIC 0x544e5645u

typedef struct fc_event {
    uint32_t magic;
    int ordinal;
    unsigned flags;
    int recorded;
    uint64_t t_ns;           /* completion time of the work before it */
    fc_graph_t *capture;     /* recorded while its stream captured into this graph */
    fc_stream_t *capture_stream;
} fc_event_t;

static fc_event_t *event_get(CUevent e)
{
    fc_event_t *ev = (fc_event_t *)e;
    return fc_handle_ok(ev, FC_H_EVENT) && ev->magic == FC_EVENT_MAGIC ? ev : NULL;
}

static CUresult event_create(CUevent *ph, unsigned flags)
{
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    fc_event_t *ev = calloc(1, sizeof *ev);
    if (!ev)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ev->magic = FC_EVENT_MAGIC;
    ev->ordinal = ordinal;
    ev->flags = flags;
    if (fc_handle_add(ev, FC_H_EVENT) != 0) {
        free(ev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ph = (CUevent)ev;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventCreate(CUevent *ph, unsigned int flags)
{
    FC_CALLED("cuEventCreate");
    return event_create(ph, flags);
}

static CUresult event_destroy(CUevent e)
{
    fc_event_t *ev = event_get(e);
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    fc_handle_del(ev, FC_H_EVENT);
    ev->magic = 0;
    free(ev);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
    FC_CALLED("cuEventDestroy_v2");
    return event_destroy(e);
}

FAKE_EXPORT CUresult cuEventDestroy(CUevent e)
{
    FC_CALLED("cuEventDestroy");
    return event_destroy(e);
}

static CUresult event_record(CUevent e, CUstream s)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_event_t *ev = event_get(e);
    fc_stream_t *st = fc_stream_get(s);
    if (!ev || !st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (st->capture) {
        ev->capture = st->capture;
        ev->capture_stream = st;
        return CUDA_SUCCESS;
    }
    uint64_t now = fake_now_ns(), end = fc_stream_end(st);
    ev->t_ns = end > now ? end : now;
    ev->recorded = 1;
    ev->capture = NULL;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
    FC_CALLED("cuEventRecord");
    return event_record(e, s);
}

FAKE_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s)
{
    FC_CALLED("cuEventRecord_ptsz");
    return event_record(e, s);
}

FAKE_EXPORT CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags)
{
    FC_CALLED("cuEventRecordWithFlags");
    return event_record(e, s);
}

FAKE_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags)
{
    FC_CALLED("cuEventRecordWithFlags_ptsz");
    return event_record(e, s);
}

FAKE_EXPORT CUresult cuEventQuery(CUevent e)
{
    FC_CALLED("cuEventQuery");
    fc_event_t *ev = event_get(e);
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    return ev->recorded && ev->t_ns > fake_now_ns() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventSynchronize(CUevent e)
{
    FC_CALLED("cuEventSynchronize");
    fc_event_t *ev = event_get(e);
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    if (ev->recorded)
        fc_sleep_until(ev->t_ns);
    return CUDA_SUCCESS;
}

static CUresult elapsed(float *ms, CUevent a, CUevent b)
{
    fc_event_t *ea = event_get(a), *eb = event_get(b);
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ea || !eb || !ea->recorded || !eb->recorded || (ea->flags | eb->flags) & CU_EVENT_DISABLE_TIMING)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t now = fake_now_ns();
    if (ea->t_ns > now || eb->t_ns > now)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)((int64_t)eb->t_ns - (int64_t)ea->t_ns) / 1e6);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    FC_CALLED("cuEventElapsedTime");
    return elapsed(ms, a, b);
}

FAKE_EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b)
{
    FC_CALLED("cuEventElapsedTime_v2");
    return elapsed(ms, a, b);
}

/* A stream waiting on an event recorded during a capture joins that capture; otherwise its later work
 * starts no earlier than the event. */
static CUresult wait_event(CUstream s, CUevent e)
{
    fc_stream_t *st = fc_stream_get(s);
    fc_event_t *ev = event_get(e);
    if (!st || !ev)
        return CUDA_ERROR_INVALID_HANDLE;
    if (ev->capture && !st->capture && ev->capture_stream && ev->capture_stream->capture == ev->capture) {
        st->capture = ev->capture;
        st->capture_mode = ev->capture_stream->capture_mode;
        st->capture_id = ev->capture_stream->capture_id;
        return CUDA_SUCCESS;
    }
    if (ev->recorded && ev->t_ns > st->end_ns)
        st->end_ns = ev->t_ns;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
    FC_CALLED("cuStreamWaitEvent");
    return wait_event(s, e);
}

FAKE_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags)
{
    FC_CALLED("cuStreamWaitEvent_ptsz");
    return wait_event(s, e);
}

FC_ALIAS(cuEventCreate)
FC_ALIAS(cuEventDestroy_v2)
FC_ALIAS(cuEventDestroy)
FC_ALIAS(cuEventRecord)
FC_ALIAS(cuEventRecord_ptsz)
FC_ALIAS(cuEventRecordWithFlags)
FC_ALIAS(cuEventRecordWithFlags_ptsz)
FC_ALIAS(cuEventQuery)
FC_ALIAS(cuEventSynchronize)
FC_ALIAS(cuEventElapsedTime)
FC_ALIAS(cuEventElapsedTime_v2)
FC_ALIAS(cuStreamWaitEvent)
FC_ALIAS(cuStreamWaitEvent_ptsz)

/*
 * capture.c (fake libcuda): stream capture. While a stream captures, launches, memsets and copies on it become
 * nodes of its graph (graph.h) instead of running; an event recorded on it lets another stream join the
 * capture (event.c). The capture mode is per thread, as cuThreadExchangeStreamCaptureMode documents.
 */
#include <stdlib.h>
#include <string.h>

#include "graph.h"

/* --- capture -------------------------------------------------------------------------------------- */

static __thread int tls_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static unsigned long long g_capture_ids = 1;

static fc_graph_t *capturing(CUstream s)
{
    fc_stream_t *st = fc_stream_get(s);
    return st ? st->capture : NULL;
}

int fc_capture_copy(CUstream s, void *dst, const void *src, size_t n)
{
    fc_graph_t *g = capturing(s);
    if (!g)
        return 0;
    fc_gnode_t *node = fc_node_add(g, N_COPY);
    if (node) {
        node->cp.dst = dst;
        node->cp.src = src;
        node->cp.n = n;
    }
    return 1;
}

int fc_capture_memset(CUstream s, uint64_t dst, size_t pitch, uint32_t value, unsigned elem, size_t width,
                      size_t height)
{
    fc_graph_t *g = capturing(s);
    if (!g)
        return 0;
    fc_gnode_t *node = fc_node_add(g, N_MEMSET);
    if (node) {
        node->ms.dst = dst;
        node->ms.pitch = pitch;
        node->ms.value = value;
        node->ms.elem = elem;
        node->ms.width = width;
        node->ms.height = height;
    }
    return 1;
}

int fc_capture_kernel(fc_stream_t *st, CUfunction f, const unsigned grid[3], const unsigned block[3],
                      unsigned shmem, void **params)
{
    if (!st->capture)
        return 0;
    fc_gnode_t *node = fc_node_add(st->capture, N_KERNEL);
    if (node)
        node->k = (CUDA_KERNEL_NODE_PARAMS){.func = f, .gridDimX = grid[0], .gridDimY = grid[1],
                                            .gridDimZ = grid[2], .blockDimX = block[0], .blockDimY = block[1],
                                            .blockDimZ = block[2], .sharedMemBytes = shmem,
                                            .kernelParams = params};
    return 1;
}

static CUresult begin_capture(CUstream s, int mode, fc_graph_t *into)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_stream_t *st = fc_stream_get(s);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (st->is_default)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot capture */
    if (st->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    fc_graph_t *g = into ? into : fc_graph_new();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    st->capture = g;
    st->capture_mode = mode;
    st->capture_id = __atomic_fetch_add(&g_capture_ids, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

#define BEGIN_CAPTURE(name)                                                                                \
    FAKE_EXPORT CUresult name(CUstream s, CUstreamCaptureMode mode)                                        \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return begin_capture(s, mode, NULL);                                                               \
    }
BEGIN_CAPTURE(cuStreamBeginCapture_v2)
BEGIN_CAPTURE(cuStreamBeginCapture_v2_ptsz)

/* CUDA 10.0's variant has no mode: global. */
FAKE_EXPORT CUresult cuStreamBeginCapture(CUstream s)
{
    FC_CALLED("cuStreamBeginCapture");
    return begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, NULL);
}

FAKE_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream s)
{
    FC_CALLED("cuStreamBeginCapture_ptsz");
    return begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, NULL);
}

#define BEGIN_CAPTURE_TO_GRAPH(name)                                                                       \
    FAKE_EXPORT CUresult name(CUstream s, CUgraph hGraph, const CUgraphNode *deps,                         \
                              const CUgraphEdgeData *edges, size_t n, CUstreamCaptureMode mode)            \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        fc_graph_t *g = fc_graph_get(hGraph);                                                                 \
        if (!g)                                                                                            \
            return CUDA_ERROR_INVALID_VALUE;                                                               \
        return begin_capture(s, mode, g);                                                                  \
    }
BEGIN_CAPTURE_TO_GRAPH(cuStreamBeginCaptureToGraph)
BEGIN_CAPTURE_TO_GRAPH(cuStreamBeginCaptureToGraph_ptsz)

/* Ends the capture of the origin stream and of every stream that joined it. */
static CUresult end_capture(CUstream s, CUgraph *phGraph)
{
    fc_stream_t *st = fc_stream_get(s);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    if (!st->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    *phGraph = (CUgraph)st->capture;
    st->capture = NULL;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *phGraph)
{
    FC_CALLED("cuStreamEndCapture");
    return end_capture(s, phGraph);
}

FAKE_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *phGraph)
{
    FC_CALLED("cuStreamEndCapture_ptsz");
    return end_capture(s, phGraph);
}

static CUresult capture_status(CUstream s, CUstreamCaptureStatus *status, unsigned long long *id)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_stream_t *st = fc_stream_get(s);
    if (!st)
        return (uintptr_t)s <= 2 ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_HANDLE;
    if (status)
        *status = st->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    if (id)
        *id = st->capture ? st->capture_id : 0;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    FC_CALLED("cuStreamIsCapturing");
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    return capture_status(s, status, NULL);
}

FAKE_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *status)
{
    FC_CALLED("cuStreamIsCapturing_ptsz");
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    return capture_status(s, status, NULL);
}

FAKE_EXPORT CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id)
{
    FC_CALLED("cuStreamGetCaptureInfo");
    return capture_status(s, status, (unsigned long long *)id);
}

FAKE_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id)
{
    FC_CALLED("cuStreamGetCaptureInfo_ptsz");
    return capture_status(s, status, (unsigned long long *)id);
}

/* The capture's graph, and no dependency set (the fake keeps no edges). */
static CUresult capture_info(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    CUresult rc = capture_status(s, status, (unsigned long long *)id);
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_stream_t *st = fc_stream_get(s);
    if (graph)
        *graph = (CUgraph)st->capture;
    if (deps)
        *deps = NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = 0;
    return CUDA_SUCCESS;
}

#define CAPTURE_INFO_V2(name)                                                                              \
    FAKE_EXPORT CUresult name(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,    \
                              const CUgraphNode **deps, size_t *ndeps)                                     \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return capture_info(s, status, id, graph, deps, NULL, ndeps);                                      \
    }
#define CAPTURE_INFO_V3(name)                                                                              \
    FAKE_EXPORT CUresult name(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,    \
                              const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)      \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return capture_info(s, status, id, graph, deps, edges, ndeps);                                     \
    }
CAPTURE_INFO_V2(cuStreamGetCaptureInfo_v2)
CAPTURE_INFO_V2(cuStreamGetCaptureInfo_v2_ptsz)
CAPTURE_INFO_V3(cuStreamGetCaptureInfo_v3)
CAPTURE_INFO_V3(cuStreamGetCaptureInfo_v3_ptsz)

#define UPDATE_DEPS(name, ...)                                                                             \
    FAKE_EXPORT CUresult name(CUstream s, CUgraphNode *deps, __VA_ARGS__ size_t n, unsigned int flags)     \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        fc_stream_t *st = fc_stream_get(s);                                                                \
        if (!st)                                                                                           \
            return CUDA_ERROR_INVALID_HANDLE;                                                              \
        return st->capture ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE;                                      \
    }
UPDATE_DEPS(cuStreamUpdateCaptureDependencies, )
UPDATE_DEPS(cuStreamUpdateCaptureDependencies_ptsz, )
UPDATE_DEPS(cuStreamUpdateCaptureDependencies_v2, const CUgraphEdgeData *edges,)
UPDATE_DEPS(cuStreamUpdateCaptureDependencies_v2_ptsz, const CUgraphEdgeData *edges,)

FAKE_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    FC_CALLED("cuThreadExchangeStreamCaptureMode");
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    int old = tls_capture_mode;
    tls_capture_mode = *mode;
    *mode = (CUstreamCaptureMode)old;
    return CUDA_SUCCESS;
}

FC_ALIAS(cuStreamBeginCapture_v2)
FC_ALIAS(cuStreamBeginCapture_v2_ptsz)
FC_ALIAS(cuStreamBeginCapture)
FC_ALIAS(cuStreamBeginCapture_ptsz)
FC_ALIAS(cuStreamBeginCaptureToGraph)
FC_ALIAS(cuStreamBeginCaptureToGraph_ptsz)
FC_ALIAS(cuStreamEndCapture)
FC_ALIAS(cuStreamEndCapture_ptsz)
FC_ALIAS(cuStreamIsCapturing)
FC_ALIAS(cuStreamIsCapturing_ptsz)
FC_ALIAS(cuStreamGetCaptureInfo)
FC_ALIAS(cuStreamGetCaptureInfo_ptsz)
FC_ALIAS(cuStreamGetCaptureInfo_v2)
FC_ALIAS(cuStreamGetCaptureInfo_v2_ptsz)
FC_ALIAS(cuStreamGetCaptureInfo_v3)
FC_ALIAS(cuStreamGetCaptureInfo_v3_ptsz)
FC_ALIAS(cuStreamUpdateCaptureDependencies)
FC_ALIAS(cuStreamUpdateCaptureDependencies_ptsz)
FC_ALIAS(cuStreamUpdateCaptureDependencies_v2)
FC_ALIAS(cuStreamUpdateCaptureDependencies_v2_ptsz)
FC_ALIAS(cuThreadExchangeStreamCaptureMode)

/*
 * graph.c (fake libcuda): CUDA graphs and stream capture, as frameworks use them (torch.cuda.CUDAGraph,
 * cudaStreamBeginCapture ... cudaGraphLaunch; the limiter reads kernel nodes through cuGraphGetNodes /
 * cuGraphNodeGetType / cuGraphKernelNodeGetParams_v2 to charge a graph's blocks).
 *
 * A graph is a list of nodes in the order they were added (dependencies are accepted and not kept: a node's
 * dependencies are always added before it, so the list order is a valid execution order). Kernel, memset,
 * memcpy, host, child-graph and empty nodes are emulated; an instantiated graph copies its nodes, and a
 * launch replays them on the stream: kernels charge their modelled time, memsets and copies are done.
 * While a stream captures, launches, memsets and copies on it become nodes of its graph instead of running;
 * an event recorded on it lets another stream join the capture (event.c).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FC_GRAPH_MAGIC 0x48505247u
#define FC_EXEC_MAGIC 0x43455847u
#define FC_NODE_MAGIC 0x45444f4eu

enum { N_KERNEL, N_MEMSET, N_COPY, N_COPY3D, N_EMPTY, N_HOST, N_CHILD };

typedef struct fc_gnode {
    uint32_t magic;
    int type;
    fc_graph_t *graph;
    CUDA_KERNEL_NODE_PARAMS k;
    struct {
        uint64_t dst;
        size_t pitch;
        uint32_t value;
        unsigned elem;
        size_t width, height;
    } ms;
    struct {
        void *dst;
        const void *src;
        size_t n;
    } cp;
    CUDA_MEMCPY3D c3;
    CUDA_HOST_NODE_PARAMS host;
    fc_graph_t *child;
    const struct fc_gnode *orig; /* in an executable graph: the node it was instantiated from */
} fc_gnode_t;

struct fc_graph {
    uint32_t magic;
    size_t n, cap;
    fc_gnode_t **nodes;
};

typedef struct fc_exec {
    uint32_t magic;
    size_t n;
    fc_gnode_t *nodes;
} fc_exec_t;

static fc_graph_t *graph_get(CUgraph g)
{
    fc_graph_t *p = (fc_graph_t *)g;
    return fc_handle_ok(p, FC_H_GRAPH) && p->magic == FC_GRAPH_MAGIC ? p : NULL;
}

static fc_gnode_t *node_get(CUgraphNode n)
{
    fc_gnode_t *p = (fc_gnode_t *)n;
    return fc_handle_ok(p, FC_H_NODE) && p->magic == FC_NODE_MAGIC ? p : NULL;
}

static fc_exec_t *exec_get(CUgraphExec e)
{
    fc_exec_t *p = (fc_exec_t *)e;
    return fc_handle_ok(p, FC_H_EXEC) && p->magic == FC_EXEC_MAGIC ? p : NULL;
}

static fc_graph_t *graph_new(void)
{
    fc_graph_t *g = calloc(1, sizeof *g);
    if (g && fc_handle_add(g, FC_H_GRAPH) != 0) {
        free(g);
        return NULL;
    }
    if (g)
        g->magic = FC_GRAPH_MAGIC;
    return g;
}

static void graph_free(fc_graph_t *g)
{
    for (size_t i = 0; i < g->n; i++) {
        if (g->nodes[i]->type == N_CHILD && g->nodes[i]->child)
            graph_free(g->nodes[i]->child);
        fc_handle_del(g->nodes[i], FC_H_NODE);
        g->nodes[i]->magic = 0;
        free(g->nodes[i]);
    }
    free(g->nodes);
    fc_handle_del(g, FC_H_GRAPH);
    g->magic = 0;
    free(g);
}

/* Streams of one capture may be driven from several threads: appending to a graph is serialised. */
static pthread_mutex_t g_graph_lock = PTHREAD_MUTEX_INITIALIZER;

static fc_gnode_t *node_add(fc_graph_t *g, int type)
{
    fc_gnode_t *node = calloc(1, sizeof *node);
    if (!node)
        return NULL;
    if (fc_handle_add(node, FC_H_NODE) != 0) {
        free(node);
        return NULL;
    }
    node->magic = FC_NODE_MAGIC;
    node->type = type;
    node->graph = g;
    pthread_mutex_lock(&g_graph_lock);
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        fc_gnode_t **n = realloc(g->nodes, cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&g_graph_lock);
            fc_handle_del(node, FC_H_NODE);
            free(node);
            return NULL;
        }
        g->nodes = n;
        g->cap = cap;
    }
    g->nodes[g->n++] = node;
    pthread_mutex_unlock(&g_graph_lock);
    return node;
}

static fc_graph_t *graph_clone(const fc_graph_t *src)
{
    fc_graph_t *g = graph_new();
    if (!g)
        return NULL;
    for (size_t i = 0; i < src->n; i++) {
        fc_gnode_t *n = node_add(g, src->nodes[i]->type);
        if (!n) {
            graph_free(g);
            return NULL;
        }
        *n = *src->nodes[i];
        n->graph = g;
        if (n->type == N_CHILD && n->child)
            n->child = graph_clone(n->child);
    }
    return g;
}

/* --- building graphs ------------------------------------------------------------------------------ */

FAKE_EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    FC_CALLED("cuGraphCreate");
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    fc_graph_t *g = graph_new();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
    FC_CALLED("cuGraphDestroy");
    fc_graph_t *g = graph_get(hGraph);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    graph_free(g);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphClone(CUgraph *out, CUgraph hGraph)
{
    FC_CALLED("cuGraphClone");
    fc_graph_t *g = graph_get(hGraph);
    if (!g || !out)
        return CUDA_ERROR_INVALID_VALUE;
    fc_graph_t *c = graph_clone(g);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUgraph)c;
    return CUDA_SUCCESS;
}

static CUresult add_node(CUgraphNode *ph, CUgraph hGraph, int type, fc_gnode_t **out)
{
    fc_graph_t *g = graph_get(hGraph);
    if (!g || !ph)
        return CUDA_ERROR_INVALID_VALUE;
    fc_gnode_t *n = node_add(g, type);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ph = (CUgraphNode)n;
    *out = n;
    return CUDA_SUCCESS;
}

/* The v1 kernel parameters are the first fields of the v2 struct. */
static void kernel_params_in(CUDA_KERNEL_NODE_PARAMS *dst, const void *src, int v2)
{
    memset(dst, 0, sizeof *dst);
    memcpy(dst, src, v2 ? sizeof(CUDA_KERNEL_NODE_PARAMS) : sizeof(CUDA_KERNEL_NODE_PARAMS_v1));
    if (v2 && !dst->func && dst->kern)
        dst->func = (CUfunction)dst->kern; /* a CUkernel is a function handle in the fake */
}

static CUresult add_kernel(CUgraphNode *ph, CUgraph hGraph, const void *params, int v2)
{
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    fc_gnode_t *n;
    CUresult rc = add_node(ph, hGraph, N_KERNEL, &n);
    if (rc == CUDA_SUCCESS)
        kernel_params_in(&n->k, params, v2);
    return rc;
}

FAKE_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *phNode, CUgraph hGraph, const CUgraphNode *deps,
                                             size_t ndeps, const CUDA_KERNEL_NODE_PARAMS *params)
{
    FC_CALLED("cuGraphAddKernelNode_v2");
    return add_kernel(phNode, hGraph, params, 1);
}

FAKE_EXPORT CUresult cuGraphAddKernelNode(CUgraphNode *phNode, CUgraph hGraph, const CUgraphNode *deps,
                                          size_t ndeps, const CUDA_KERNEL_NODE_PARAMS_v1 *params)
{
    FC_CALLED("cuGraphAddKernelNode");
    return add_kernel(phNode, hGraph, params, 0);
}

static void memset_in(fc_gnode_t *n, const CUDA_MEMSET_NODE_PARAMS *p)
{
    n->ms.dst = p->dst;
    n->ms.pitch = p->pitch ? p->pitch : p->width * p->elementSize;
    n->ms.value = p->value;
    n->ms.elem = p->elementSize;
    n->ms.width = p->width;
    n->ms.height = p->height ? p->height : 1;
}

FAKE_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *phNode, CUgraph hGraph, const CUgraphNode *deps,
                                          size_t ndeps, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    FC_CALLED("cuGraphAddMemsetNode");
    if (!p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4))
        return CUDA_ERROR_INVALID_VALUE;
    fc_gnode_t *n;
    CUresult rc = add_node(phNode, hGraph, N_MEMSET, &n);
    if (rc == CUDA_SUCCESS)
        memset_in(n, p);
    return rc;
}

FAKE_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *phNode, CUgraph hGraph, const CUgraphNode *deps,
                                          size_t ndeps, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    FC_CALLED("cuGraphAddMemcpyNode");
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    fc_gnode_t *n;
    CUresult rc = add_node(phNode, hGraph, N_COPY3D, &n);
    if (rc == CUDA_SUCCESS)
        n->c3 = *p;
    return rc;
}

FAKE_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *phNode, CUgraph hGraph, const CUgraphNode *deps, size_t ndeps)
{
    FC_CALLED("cuGraphAddEmptyNode");
    fc_gnode_t *n;
    return add_node(phNode, hGraph, N_EMPTY, &n);
}

FAKE_EXPORT CUresult cuGraphAddHostNode(CUgraphNode *phNode, CUgraph hGraph, const CUgraphNode *deps, size_t ndeps,
                                        const CUDA_HOST_NODE_PARAMS *p)
{
    FC_CALLED("cuGraphAddHostNode");
    if (!p || !p->fn)
        return CUDA_ERROR_INVALID_VALUE;
    fc_gnode_t *n;
    CUresult rc = add_node(phNode, hGraph, N_HOST, &n);
    if (rc == CUDA_SUCCESS)
        n->host = *p;
    return rc;
}

FAKE_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *phNode, CUgraph hGraph, const CUgraphNode *deps,
                                              size_t ndeps, CUgraph child)
{
    FC_CALLED("cuGraphAddChildGraphNode");
    fc_graph_t *c = graph_get(child);
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    fc_gnode_t *n;
    CUresult rc = add_node(phNode, hGraph, N_CHILD, &n);
    if (rc == CUDA_SUCCESS && !(n->child = graph_clone(c)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    return rc;
}

/* Event record/wait nodes order work between streams of one graph: nothing to replay in the fake. */
FAKE_EXPORT CUresult cuGraphAddEventRecordNode(CUgraphNode *phNode, CUgraph hGraph, const CUgraphNode *deps,
                                               size_t ndeps, CUevent e)
{
    FC_CALLED("cuGraphAddEventRecordNode");
    fc_gnode_t *n;
    return add_node(phNode, hGraph, N_EMPTY, &n);
}

FAKE_EXPORT CUresult cuGraphAddEventWaitNode(CUgraphNode *phNode, CUgraph hGraph, const CUgraphNode *deps,
                                             size_t ndeps, CUevent e)
{
    FC_CALLED("cuGraphAddEventWaitNode");
    fc_gnode_t *n;
    return add_node(phNode, hGraph, N_EMPTY, &n);
}

#define GRAPH_DEPS(name, ...)                                                                              \
    FAKE_EXPORT CUresult name(CUgraph hGraph, __VA_ARGS__)                                                 \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return graph_get(hGraph) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;                                \
    }
GRAPH_DEPS(cuGraphAddDependencies, const CUgraphNode *from, const CUgraphNode *to, size_t n)
GRAPH_DEPS(cuGraphAddDependencies_v2, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *e,
           size_t n)
GRAPH_DEPS(cuGraphRemoveDependencies, const CUgraphNode *from, const CUgraphNode *to, size_t n)
GRAPH_DEPS(cuGraphRemoveDependencies_v2, const CUgraphNode *from, const CUgraphNode *to,
           const CUgraphEdgeData *e, size_t n)

FAKE_EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    FC_CALLED("cuGraphGetNodes");
    fc_graph_t *g = graph_get(hGraph);
    if (!g || !numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    if (nodes)
        for (size_t i = 0; i < *numNodes && i < g->n; i++)
            nodes[i] = (CUgraphNode)g->nodes[i];
    if (!nodes || *numNodes > g->n)
        *numNodes = g->n;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    FC_CALLED("cuGraphGetRootNodes");
    return fc_impl_cuGraphGetNodes(hGraph, nodes, numNodes); /* no edges kept: every node is a root */
}

#define GRAPH_EDGES(name, ...)                                                                             \
    FAKE_EXPORT CUresult name(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, __VA_ARGS__ size_t *n)    \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        if (!graph_get(hGraph) || !n)                                                                      \
            return CUDA_ERROR_INVALID_VALUE;                                                               \
        *n = 0;                                                                                            \
        return CUDA_SUCCESS;                                                                               \
    }
GRAPH_EDGES(cuGraphGetEdges, )
GRAPH_EDGES(cuGraphGetEdges_v2, CUgraphEdgeData *e,)

FAKE_EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    FC_CALLED("cuGraphNodeGetType");
    fc_gnode_t *n = node_get(hNode);
    if (!n || !type)
        return CUDA_ERROR_INVALID_VALUE;
    static const CUgraphNodeType types[] = {
        [N_KERNEL] = CU_GRAPH_NODE_TYPE_KERNEL, [N_MEMSET] = CU_GRAPH_NODE_TYPE_MEMSET,
        [N_COPY] = CU_GRAPH_NODE_TYPE_MEMCPY,   [N_COPY3D] = CU_GRAPH_NODE_TYPE_MEMCPY,
        [N_EMPTY] = CU_GRAPH_NODE_TYPE_EMPTY,   [N_HOST] = CU_GRAPH_NODE_TYPE_HOST,
        [N_CHILD] = CU_GRAPH_NODE_TYPE_GRAPH,
    };
    *type = types[n->type];
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *deps, size_t *n)
{
    FC_CALLED("cuGraphNodeGetDependencies");
    if (!node_get(hNode) || !n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = 0;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphDestroyNode(CUgraphNode hNode)
{
    FC_CALLED("cuGraphDestroyNode");
    fc_gnode_t *n = node_get(hNode);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    fc_graph_t *g = n->graph;
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i] == n) {
            memmove(&g->nodes[i], &g->nodes[i + 1], (g->n - i - 1) * sizeof g->nodes[0]);
            g->n--;
            break;
        }
    if (n->type == N_CHILD && n->child)
        graph_free(n->child);
    fc_handle_del(n, FC_H_NODE);
    n->magic = 0;
    free(n);
    return CUDA_SUCCESS;
}

static CUresult kernel_get(CUgraphNode hNode, void *params, int v2)
{
    fc_gnode_t *n = node_get(hNode);
    if (!n || !params || n->type != N_KERNEL)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(params, &n->k, v2 ? sizeof(CUDA_KERNEL_NODE_PARAMS) : sizeof(CUDA_KERNEL_NODE_PARAMS_v1));
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *params)
{
    FC_CALLED("cuGraphKernelNodeGetParams_v2");
    return kernel_get(hNode, params, 1);
}

FAKE_EXPORT CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *params)
{
    FC_CALLED("cuGraphKernelNodeGetParams");
    return kernel_get(hNode, params, 0);
}

static CUresult kernel_set(CUgraphNode hNode, const void *params, int v2)
{
    fc_gnode_t *n = node_get(hNode);
    if (!n || !params || n->type != N_KERNEL)
        return CUDA_ERROR_INVALID_VALUE;
    kernel_params_in(&n->k, params, v2);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *params)
{
    FC_CALLED("cuGraphKernelNodeSetParams_v2");
    return kernel_set(hNode, params, 1);
}

FAKE_EXPORT CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *params)
{
    FC_CALLED("cuGraphKernelNodeSetParams");
    return kernel_set(hNode, params, 0);
}

FAKE_EXPORT CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS *p)
{
    FC_CALLED("cuGraphMemsetNodeGetParams");
    fc_gnode_t *n = node_get(hNode);
    if (!n || !p || n->type != N_MEMSET)
        return CUDA_ERROR_INVALID_VALUE;
    *p = (CUDA_MEMSET_NODE_PARAMS){.dst = n->ms.dst, .pitch = n->ms.pitch, .value = n->ms.value,
                                   .elementSize = n->ms.elem, .width = n->ms.width, .height = n->ms.height};
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *p)
{
    FC_CALLED("cuGraphMemsetNodeSetParams");
    fc_gnode_t *n = node_get(hNode);
    if (!n || !p || n->type != N_MEMSET)
        return CUDA_ERROR_INVALID_VALUE;
    memset_in(n, p);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *p)
{
    FC_CALLED("cuGraphMemcpyNodeGetParams");
    fc_gnode_t *n = node_get(hNode);
    if (!n || !p || (n->type != N_COPY && n->type != N_COPY3D))
        return CUDA_ERROR_INVALID_VALUE;
    if (n->type == N_COPY3D) {
        *p = n->c3;
    } else {
        *p = (CUDA_MEMCPY3D){.srcMemoryType = CU_MEMORYTYPE_UNIFIED, .srcDevice = (CUdeviceptr)(uintptr_t)n->cp.src,
                             .dstMemoryType = CU_MEMORYTYPE_UNIFIED, .dstDevice = (CUdeviceptr)(uintptr_t)n->cp.dst,
                             .WidthInBytes = n->cp.n, .Height = 1, .Depth = 1};
    }
    return CUDA_SUCCESS;
}

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
    fc_gnode_t *node = node_add(g, N_COPY);
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
    fc_gnode_t *node = node_add(g, N_MEMSET);
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
    fc_gnode_t *node = node_add(st->capture, N_KERNEL);
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
    fc_graph_t *g = into ? into : graph_new();
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
        fc_graph_t *g = graph_get(hGraph);                                                                 \
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

/* --- executable graphs ---------------------------------------------------------------------------- */

static CUresult instantiate(CUgraphExec *phExec, CUgraph hGraph)
{
    fc_graph_t *g = graph_get(hGraph);
    if (!phExec || !g)
        return CUDA_ERROR_INVALID_VALUE;
    fc_exec_t *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (fc_handle_add(e, FC_H_EXEC) != 0) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->magic = FC_EXEC_MAGIC;
    e->n = g->n;
    e->nodes = calloc(g->n ? g->n : 1, sizeof *e->nodes);
    if (!e->nodes) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < g->n; i++) {
        e->nodes[i] = *g->nodes[i];
        e->nodes[i].orig = g->nodes[i];
        if (e->nodes[i].type == N_CHILD && e->nodes[i].child)
            e->nodes[i].child = graph_clone(e->nodes[i].child);
    }
    *phExec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

static void exec_free_nodes(fc_exec_t *e)
{
    for (size_t i = 0; i < e->n; i++)
        if (e->nodes[i].type == N_CHILD && e->nodes[i].child)
            graph_free(e->nodes[i].child);
    free(e->nodes);
}

FAKE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phExec, CUgraph hGraph, unsigned long long flags)
{
    FC_CALLED("cuGraphInstantiateWithFlags");
    return instantiate(phExec, hGraph);
}

/* CUDA 10/11's five-argument instantiate ("cuGraphInstantiate" for cudaVersion 10000..11999). */
#define INSTANTIATE5(name)                                                                                 \
    FAKE_EXPORT CUresult name(CUgraphExec *phExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer, \
                              size_t bufferSize)                                                           \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        if (phErrorNode)                                                                                   \
            *phErrorNode = NULL;                                                                           \
        if (logBuffer && bufferSize)                                                                       \
            logBuffer[0] = '\0';                                                                           \
        return instantiate(phExec, hGraph);                                                                \
    }
INSTANTIATE5(cuGraphInstantiate_v2)
INSTANTIATE5(cuGraphInstantiate)

#define INSTANTIATE_PARAMS(name)                                                                           \
    FAKE_EXPORT CUresult name(CUgraphExec *phExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *params)  \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        CUresult rc = instantiate(phExec, hGraph);                                                         \
        if (params) {                                                                                      \
            params->hErrNode_out = NULL;                                                                    \
            params->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR; \
        }                                                                                                  \
        return rc;                                                                                         \
    }
INSTANTIATE_PARAMS(cuGraphInstantiateWithParams)
INSTANTIATE_PARAMS(cuGraphInstantiateWithParams_ptsz)

FAKE_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hExec)
{
    FC_CALLED("cuGraphExecDestroy");
    fc_exec_t *e = exec_get(hExec);
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    exec_free_nodes(e);
    fc_handle_del(e, FC_H_EXEC);
    e->magic = 0;
    free(e);
    return CUDA_SUCCESS;
}

static void replay(fc_stream_t *st, const fc_gnode_t *nodes, size_t n);

static void replay_graph(fc_stream_t *st, const fc_graph_t *g)
{
    for (size_t i = 0; i < g->n; i++)
        replay(st, g->nodes[i], 1);
}

static void replay(fc_stream_t *st, const fc_gnode_t *nodes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const fc_gnode_t *x = &nodes[i];
        switch (x->type) {
        case N_KERNEL:
            fc_stream_submit(st, x->k.func, (uint64_t)x->k.gridDimX * x->k.gridDimY * x->k.gridDimZ);
            break;
        case N_MEMSET:
            fc_memset_now(x->ms.dst, x->ms.pitch, x->ms.value, x->ms.elem, x->ms.width, x->ms.height);
            break;
        case N_COPY: memmove(x->cp.dst, x->cp.src, x->cp.n); break;
        case N_COPY3D: fc_impl_cuMemcpy3D_v2(&x->c3); break;
        case N_HOST:
            fc_sleep_until(fc_stream_end(st));
            x->host.fn(x->host.userData);
            break;
        case N_CHILD:
            if (x->child)
                replay_graph(st, x->child);
            break;
        default: break;
        }
    }
}

static CUresult graph_launch(CUgraphExec hExec, CUstream s)
{
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_exec_t *e = exec_get(hExec);
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    fc_stream_t *st = fc_stream_get(s);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (st->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    replay(st, e->nodes, e->n);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec hExec, CUstream s)
{
    FC_CALLED("cuGraphLaunch");
    return graph_launch(hExec, s);
}

FAKE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hExec, CUstream s)
{
    FC_CALLED("cuGraphLaunch_ptsz");
    return graph_launch(hExec, s);
}

FAKE_EXPORT CUresult cuGraphUpload(CUgraphExec hExec, CUstream s)
{
    FC_CALLED("cuGraphUpload");
    return exec_get(hExec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec hExec, CUstream s)
{
    FC_CALLED("cuGraphUpload_ptsz");
    return exec_get(hExec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Whole-graph update: allowed when the new graph has the same nodes, of the same types, in the same order. */
static CUresult exec_update(CUgraphExec hExec, CUgraph hGraph, CUgraphExecUpdateResult *result)
{
    fc_exec_t *e = exec_get(hExec);
    fc_graph_t *g = graph_get(hGraph);
    if (!e || !g)
        return CUDA_ERROR_INVALID_VALUE;
    int ok = g->n == e->n;
    for (size_t i = 0; ok && i < g->n; i++)
        ok = g->nodes[i]->type == e->nodes[i].type;
    if (result)
        *result = ok ? CU_GRAPH_EXEC_UPDATE_SUCCESS : CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    if (!ok)
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    for (size_t i = 0; i < g->n; i++) {
        fc_graph_t *child = e->nodes[i].child;
        e->nodes[i] = *g->nodes[i];
        e->nodes[i].orig = g->nodes[i];
        e->nodes[i].child = child;
    }
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *info)
{
    FC_CALLED("cuGraphExecUpdate_v2");
    CUgraphExecUpdateResult r = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    CUresult rc = exec_update(hExec, hGraph, &r);
    if (info) {
        info->result = r;
        info->errorNode = NULL;
        info->errorFromNode = NULL;
    }
    return rc;
}

FAKE_EXPORT CUresult cuGraphExecUpdate(CUgraphExec hExec, CUgraph hGraph, CUgraphNode *errNode,
                                       CUgraphExecUpdateResult *result)
{
    FC_CALLED("cuGraphExecUpdate");
    if (errNode)
        *errNode = NULL;
    return exec_update(hExec, hGraph, result);
}

static fc_gnode_t *exec_node(fc_exec_t *e, CUgraphNode orig)
{
    for (size_t i = 0; e && i < e->n; i++)
        if (e->nodes[i].orig == (const fc_gnode_t *)orig)
            return &e->nodes[i];
    return NULL;
}

static CUresult exec_kernel_set(CUgraphExec hExec, CUgraphNode hNode, const void *params, int v2)
{
    fc_gnode_t *n = exec_node(exec_get(hExec), hNode);
    if (!n || !params || n->type != N_KERNEL)
        return CUDA_ERROR_INVALID_VALUE;
    kernel_params_in(&n->k, params, v2);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p)
{
    FC_CALLED("cuGraphExecKernelNodeSetParams_v2");
    return exec_kernel_set(e, n, p, 1);
}

FAKE_EXPORT CUresult cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    FC_CALLED("cuGraphExecKernelNodeSetParams");
    return exec_kernel_set(e, n, p, 0);
}

FAKE_EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec e, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *p,
                                                    CUcontext ctx)
{
    FC_CALLED("cuGraphExecMemsetNodeSetParams");
    fc_gnode_t *n = exec_node(exec_get(e), node);
    if (!n || !p || n->type != N_MEMSET)
        return CUDA_ERROR_INVALID_VALUE;
    memset_in(n, p);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec e, CUgraphNode node, const CUDA_MEMCPY3D *p,
                                                    CUcontext ctx)
{
    FC_CALLED("cuGraphExecMemcpyNodeSetParams");
    fc_gnode_t *n = exec_node(exec_get(e), node);
    if (!n || !p || (n->type != N_COPY && n->type != N_COPY3D))
        return CUDA_ERROR_INVALID_VALUE;
    n->type = N_COPY3D;
    n->c3 = *p;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphExecGetFlags(CUgraphExec e, cuuint64_t *flags)
{
    FC_CALLED("cuGraphExecGetFlags");
    if (!exec_get(e) || !flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = 0;
    return CUDA_SUCCESS;
}

FC_ALIAS(cuGraphCreate)
FC_ALIAS(cuGraphDestroy)
FC_ALIAS(cuGraphClone)
FC_ALIAS(cuGraphAddKernelNode_v2)
FC_ALIAS(cuGraphAddKernelNode)
FC_ALIAS(cuGraphAddMemsetNode)
FC_ALIAS(cuGraphAddMemcpyNode)
FC_ALIAS(cuGraphAddEmptyNode)
FC_ALIAS(cuGraphAddHostNode)
FC_ALIAS(cuGraphAddChildGraphNode)
FC_ALIAS(cuGraphAddEventRecordNode)
FC_ALIAS(cuGraphAddEventWaitNode)
FC_ALIAS(cuGraphAddDependencies)
FC_ALIAS(cuGraphAddDependencies_v2)
FC_ALIAS(cuGraphRemoveDependencies)
FC_ALIAS(cuGraphRemoveDependencies_v2)
FC_ALIAS(cuGraphGetNodes)
FC_ALIAS(cuGraphGetRootNodes)
FC_ALIAS(cuGraphGetEdges)
FC_ALIAS(cuGraphGetEdges_v2)
FC_ALIAS(cuGraphNodeGetType)
FC_ALIAS(cuGraphNodeGetDependencies)
FC_ALIAS(cuGraphDestroyNode)
FC_ALIAS(cuGraphKernelNodeGetParams_v2)
FC_ALIAS(cuGraphKernelNodeGetParams)
FC_ALIAS(cuGraphKernelNodeSetParams_v2)
FC_ALIAS(cuGraphKernelNodeSetParams)
FC_ALIAS(cuGraphMemsetNodeGetParams)
FC_ALIAS(cuGraphMemsetNodeSetParams)
FC_ALIAS(cuGraphMemcpyNodeGetParams)
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
FC_ALIAS(cuGraphInstantiateWithFlags)
FC_ALIAS(cuGraphInstantiate_v2)
FC_ALIAS(cuGraphInstantiate)
FC_ALIAS(cuGraphInstantiateWithParams)
FC_ALIAS(cuGraphInstantiateWithParams_ptsz)
FC_ALIAS(cuGraphExecDestroy)
FC_ALIAS(cuGraphLaunch)
FC_ALIAS(cuGraphLaunch_ptsz)
FC_ALIAS(cuGraphUpload)
FC_ALIAS(cuGraphUpload_ptsz)
FC_ALIAS(cuGraphExecUpdate_v2)
FC_ALIAS(cuGraphExecUpdate)
FC_ALIAS(cuGraphExecKernelNodeSetParams_v2)
FC_ALIAS(cuGraphExecKernelNodeSetParams)
FC_ALIAS(cuGraphExecMemsetNodeSetParams)
FC_ALIAS(cuGraphExecMemcpyNodeSetParams)
FC_ALIAS(cuGraphExecGetFlags)

/*
 * graph.c (fake libcuda): building and inspecting CUDA graphs, as frameworks use them (torch.cuda.CUDAGraph,
 * cudaStreamBeginCapture ... cudaGraphLaunch; the limiter reads kernel nodes through cuGraphGetNodes /
 * cuGraphNodeGetType / cuGraphKernelNodeGetParams_v2 to charge a graph's blocks).
 *
 * A graph is a list of nodes in the order they were added (dependencies are accepted and not kept: a node's
 * dependencies are always added before it, so the list order is a valid execution order). Kernel, memset,
 * memcpy, host, child-graph and empty nodes are emulated; an instantiated graph copies its nodes, and a
 * launch replays them on the stream (graph_exec.c); stream capture builds graphs too (capture.c).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

fc_graph_t *fc_graph_get(CUgraph g)
{
    fc_graph_t *p = (fc_graph_t *)g;
    return fc_handle_ok(p, FC_H_GRAPH) && p->magic == FC_GRAPH_MAGIC ? p : NULL;
}

fc_gnode_t *fc_node_get(CUgraphNode n)
{
    fc_gnode_t *p = (fc_gnode_t *)n;
    return fc_handle_ok(p, FC_H_NODE) && p->magic == FC_NODE_MAGIC ? p : NULL;
}

fc_exec_t *fc_exec_get(CUgraphExec e)
{
    fc_exec_t *p = (fc_exec_t *)e;
    return fc_handle_ok(p, FC_H_EXEC) && p->magic == FC_EXEC_MAGIC ? p : NULL;
}

fc_graph_t *fc_graph_new(void)
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

void fc_graph_free(fc_graph_t *g)
{
    for (size_t i = 0; i < g->n; i++) {
        if (g->nodes[i]->type == N_CHILD && g->nodes[i]->child)
            fc_graph_free(g->nodes[i]->child);
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

fc_gnode_t *fc_node_add(fc_graph_t *g, int type)
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

fc_graph_t *fc_graph_clone(const fc_graph_t *src)
{
    fc_graph_t *g = fc_graph_new();
    if (!g)
        return NULL;
    for (size_t i = 0; i < src->n; i++) {
        fc_gnode_t *n = fc_node_add(g, src->nodes[i]->type);
        if (!n) {
            fc_graph_free(g);
            return NULL;
        }
        *n = *src->nodes[i];
        n->graph = g;
        if (n->type == N_CHILD && n->child)
            n->child = fc_graph_clone(n->child);
    }
    return g;
}

/* --- building graphs ------------------------------------------------------------------------------ */

FAKE_EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    FC_CALLED("cuGraphCreate");
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    fc_graph_t *g = fc_graph_new();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
    FC_CALLED("cuGraphDestroy");
    fc_graph_t *g = fc_graph_get(hGraph);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    fc_graph_free(g);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphClone(CUgraph *out, CUgraph hGraph)
{
    FC_CALLED("cuGraphClone");
    fc_graph_t *g = fc_graph_get(hGraph);
    if (!g || !out)
        return CUDA_ERROR_INVALID_VALUE;
    fc_graph_t *c = fc_graph_clone(g);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUgraph)c;
    return CUDA_SUCCESS;
}

static CUresult add_node(CUgraphNode *ph, CUgraph hGraph, int type, fc_gnode_t **out)
{
    fc_graph_t *g = fc_graph_get(hGraph);
    if (!g || !ph)
        return CUDA_ERROR_INVALID_VALUE;
    fc_gnode_t *n = fc_node_add(g, type);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ph = (CUgraphNode)n;
    *out = n;
    return CUDA_SUCCESS;
}

/* The v1 kernel parameters are the first fields of the v2 struct. */
void fc_kernel_params_in(CUDA_KERNEL_NODE_PARAMS *dst, const void *src, int v2)
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
        fc_kernel_params_in(&n->k, params, v2);
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

void fc_memset_in(fc_gnode_t *n, const CUDA_MEMSET_NODE_PARAMS *p)
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
        fc_memset_in(n, p);
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
    fc_graph_t *c = fc_graph_get(child);
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    fc_gnode_t *n;
    CUresult rc = add_node(phNode, hGraph, N_CHILD, &n);
    if (rc == CUDA_SUCCESS && !(n->child = fc_graph_clone(c)))
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
        return fc_graph_get(hGraph) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;                                \
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
    fc_graph_t *g = fc_graph_get(hGraph);
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
        if (!fc_graph_get(hGraph) || !n)                                                                      \
            return CUDA_ERROR_INVALID_VALUE;                                                               \
        *n = 0;                                                                                            \
        return CUDA_SUCCESS;                                                                               \
    }
GRAPH_EDGES(cuGraphGetEdges, )
GRAPH_EDGES(cuGraphGetEdges_v2, CUgraphEdgeData *e,)

FAKE_EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    FC_CALLED("cuGraphNodeGetType");
    fc_gnode_t *n = fc_node_get(hNode);
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
    if (!fc_node_get(hNode) || !n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = 0;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphDestroyNode(CUgraphNode hNode)
{
    FC_CALLED("cuGraphDestroyNode");
    fc_gnode_t *n = fc_node_get(hNode);
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
        fc_graph_free(n->child);
    fc_handle_del(n, FC_H_NODE);
    n->magic = 0;
    free(n);
    return CUDA_SUCCESS;
}

static CUresult kernel_get(CUgraphNode hNode, void *params, int v2)
{
    fc_gnode_t *n = fc_node_get(hNode);
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
    fc_gnode_t *n = fc_node_get(hNode);
    if (!n || !params || n->type != N_KERNEL)
        return CUDA_ERROR_INVALID_VALUE;
    fc_kernel_params_in(&n->k, params, v2);
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
    fc_gnode_t *n = fc_node_get(hNode);
    if (!n || !p || n->type != N_MEMSET)
        return CUDA_ERROR_INVALID_VALUE;
    *p = (CUDA_MEMSET_NODE_PARAMS){.dst = n->ms.dst, .pitch = n->ms.pitch, .value = n->ms.value,
                                   .elementSize = n->ms.elem, .width = n->ms.width, .height = n->ms.height};
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *p)
{
    FC_CALLED("cuGraphMemsetNodeSetParams");
    fc_gnode_t *n = fc_node_get(hNode);
    if (!n || !p || n->type != N_MEMSET)
        return CUDA_ERROR_INVALID_VALUE;
    fc_memset_in(n, p);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *p)
{
    FC_CALLED("cuGraphMemcpyNodeGetParams");
    fc_gnode_t *n = fc_node_get(hNode);
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

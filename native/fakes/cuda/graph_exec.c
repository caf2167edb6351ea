/*
 * graph_exec.c (fake libcuda): executable graphs. Instantiation copies a graph's nodes; a launch replays them
 * on the stream: kernels charge their modelled time, memsets and copies are done; an update swaps the
 * parameters of an executable graph's nodes for those of a graph of the same shape.
 */
#include <stdlib.h>
#include <string.h>

#include "graph.h"

/* --- executable graphs ---------------------------------------------------------------------------- */

static CUresult instantiate(CUgraphExec *phExec, CUgraph hGraph)
{
    fc_graph_t *g = fc_graph_get(hGraph);
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
        fc_handle_del(e, FC_H_EXEC);
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < g->n; i++) {
        e->nodes[i] = *g->nodes[i];
        e->nodes[i].orig = g->nodes[i];
        if (e->nodes[i].type == N_CHILD && e->nodes[i].child)
            e->nodes[i].child = fc_graph_clone(e->nodes[i].child);
    }
    *phExec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

static void exec_free_nodes(fc_exec_t *e)
{
    for (size_t i = 0; i < e->n; i++)
        if (e->nodes[i].type == N_CHILD && e->nodes[i].child)
            fc_graph_free(e->nodes[i].child);
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
    fc_exec_t *e = fc_exec_get(hExec);
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
    fc_exec_t *e = fc_exec_get(hExec);
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
    return fc_exec_get(hExec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec hExec, CUstream s)
{
    FC_CALLED("cuGraphUpload_ptsz");
    return fc_exec_get(hExec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Whole-graph update: allowed when the new graph has the same nodes, of the same types, in the same order. */
static CUresult exec_update(CUgraphExec hExec, CUgraph hGraph, CUgraphExecUpdateResult *result)
{
    fc_exec_t *e = fc_exec_get(hExec);
    fc_graph_t *g = fc_graph_get(hGraph);
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
    fc_gnode_t *n = exec_node(fc_exec_get(hExec), hNode);
    if (!n || !params || n->type != N_KERNEL)
        return CUDA_ERROR_INVALID_VALUE;
    fc_kernel_params_in(&n->k, params, v2);
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
    fc_gnode_t *n = exec_node(fc_exec_get(e), node);
    if (!n || !p || n->type != N_MEMSET)
        return CUDA_ERROR_INVALID_VALUE;
    fc_memset_in(n, p);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec e, CUgraphNode node, const CUDA_MEMCPY3D *p,
                                                    CUcontext ctx)
{
    FC_CALLED("cuGraphExecMemcpyNodeSetParams");
    fc_gnode_t *n = exec_node(fc_exec_get(e), node);
    if (!n || !p || (n->type != N_COPY && n->type != N_COPY3D))
        return CUDA_ERROR_INVALID_VALUE;
    n->type = N_COPY3D;
    n->c3 = *p;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphExecGetFlags(CUgraphExec e, cuuint64_t *flags)
{
    FC_CALLED("cuGraphExecGetFlags");
    if (!fc_exec_get(e) || !flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = 0;
    return CUDA_SUCCESS;
}

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

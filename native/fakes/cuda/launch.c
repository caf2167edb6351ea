/*
 * launch.c (fake libcuda): kernel launches, CUDA graphs and synchronisation on the fake time model.
 *
 * A launch occupies the fake GPU for ceil(blocks / SMs) waves (fake_kernel_submit). Kernel handles from
 * carveFakeKernel(ns_per_wave) carry their wave time; any other non-NULL handle uses CARVE_FAKE_NS_PER_WAVE.
 * Like a real driver's bounded push buffer, a launch blocks while the GPU's queue holds more than
 * CARVE_FAKE_QUEUE_NS of work, so a launch loop cannot run arbitrarily far ahead of the GPU.
 */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* cuLaunchCooperativeKernelMultiDevice */

#define FC_KERNELS 64
#define FC_GRAPH_MAGIC 0x48505247u
#define FC_EXEC_MAGIC 0x43455847u
#define FC_MAX_NODES 64

static uint64_t g_kernel_ns[FC_KERNELS];
static unsigned g_kernel_count;

/* A kernel handle whose waves take `ns_per_wave` (tests pick kernel lengths with it). */
FAKE_EXPORT CUfunction carveFakeKernel(uint64_t ns_per_wave)
{
    unsigned i = __atomic_fetch_add(&g_kernel_count, 1, __ATOMIC_RELAXED) % FC_KERNELS;
    g_kernel_ns[i] = ns_per_wave;
    return (CUfunction)&g_kernel_ns[i];
}

static uint64_t wave_ns(CUfunction f)
{
    uint64_t *p = (uint64_t *)f;
    if (p >= g_kernel_ns && p < g_kernel_ns + FC_KERNELS && *p)
        return *p;
    return fc_env_u64("CARVE_FAKE_NS_PER_WAVE", 100000);
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

void fc_submit(int ordinal, CUfunction f, uint64_t blocks)
{
    const fake_gpu_t *g = fc_gpu(ordinal);
    uint64_t end = fake_kernel_submit(g->index, getpid(), fc_mps_blocks(blocks), wave_ns(f));
    uint64_t depth = fc_env_u64("CARVE_FAKE_QUEUE_NS", 5000000);
    uint64_t now = fake_now_ns();
    if (end > now + depth)
        sleep_ns(end - depth - now);
}

static CUresult launch(CUfunction f, uint64_t gx, uint64_t gy, uint64_t gz)
{
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz)
        return CUDA_ERROR_INVALID_VALUE;
    fc_submit(ordinal, f, gx * gy * gz);
    return CUDA_SUCCESS;
}

#define LAUNCH_KERNEL(name)                                                                                \
    FAKE_EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
                              unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)         \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return launch(f, gx, gy, gz);                                                                      \
    }
LAUNCH_KERNEL(cuLaunchKernel)
LAUNCH_KERNEL(cuLaunchKernel_ptsz)

#define LAUNCH_COOPERATIVE(name)                                                                           \
    FAKE_EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
                              unsigned bz, unsigned shmem, CUstream s, void **params)                       \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return launch(f, gx, gy, gz);                                                                      \
    }
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)

#define LAUNCH_EX(name)                                                                                    \
    FAKE_EXPORT CUresult name(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)     \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        if (!config)                                                                                       \
            return CUDA_ERROR_INVALID_VALUE;                                                               \
        return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ);                            \
    }
LAUNCH_EX(cuLaunchKernelEx)
LAUNCH_EX(cuLaunchKernelEx_ptsz)

/* Deprecated but still exported by CUDA 13 drivers; every launch runs on the current device here. */
FAKE_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n,
                                                          unsigned int flags)
{
    FC_CALLED("cuLaunchCooperativeKernelMultiDevice");
    if (!list || !n)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        CUresult rc = launch(list[i].function, list[i].gridDimX, list[i].gridDimY, list[i].gridDimZ);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return CUDA_SUCCESS;
}

/* --- synchronisation ----------------------------------------------------------------------------- */

static CUresult wait_idle(void)
{
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t end = fake_kernel_last_end(fc_gpu(ordinal)->index, getpid());
    uint64_t now = fake_now_ns();
    if (end > now)
        sleep_ns(end - now);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSynchronize(void)
{
    FC_CALLED("cuCtxSynchronize");
    return wait_idle();
}

FAKE_EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    FC_CALLED("cuStreamSynchronize");
    return wait_idle();
}

FAKE_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s)
{
    FC_CALLED("cuStreamSynchronize_ptsz");
    return wait_idle();
}

/* --- graphs: a graph is a list of kernel nodes; an executable graph replays them ---------------- */

typedef struct fc_node {
    CUDA_KERNEL_NODE_PARAMS params;
} fc_node_t;

typedef struct fc_graph {
    uint32_t magic;
    unsigned n;
    fc_node_t nodes[FC_MAX_NODES];
} fc_graph_t;

typedef struct fc_exec {
    uint32_t magic;
    unsigned n;
    CUfunction f[FC_MAX_NODES];
    uint64_t blocks[FC_MAX_NODES];
} fc_exec_t;

FAKE_EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    FC_CALLED("cuGraphCreate");
    fc_graph_t *g = calloc(1, sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = FC_GRAPH_MAGIC;
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
    FC_CALLED("cuGraphDestroy");
    fc_graph_t *g = (fc_graph_t *)hGraph;
    if (!g || g->magic != FC_GRAPH_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    g->magic = 0;
    free(g);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *phNode, CUgraph hGraph, const CUgraphNode *deps,
                                             size_t ndeps, const CUDA_KERNEL_NODE_PARAMS *params)
{
    FC_CALLED("cuGraphAddKernelNode_v2");
    fc_graph_t *g = (fc_graph_t *)hGraph;
    if (!g || g->magic != FC_GRAPH_MAGIC || !params || !phNode)
        return CUDA_ERROR_INVALID_VALUE;
    if (g->n >= FC_MAX_NODES)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->nodes[g->n].params = *params;
    *phNode = (CUgraphNode)&g->nodes[g->n++];
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    FC_CALLED("cuGraphGetNodes");
    fc_graph_t *g = (fc_graph_t *)hGraph;
    if (!g || g->magic != FC_GRAPH_MAGIC || !numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    if (nodes)
        for (size_t i = 0; i < *numNodes && i < g->n; i++)
            nodes[i] = (CUgraphNode)&g->nodes[i];
    if (!nodes || *numNodes > g->n)
        *numNodes = g->n;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    FC_CALLED("cuGraphNodeGetType");
    if (!hNode || !type)
        return CUDA_ERROR_INVALID_VALUE;
    *type = CU_GRAPH_NODE_TYPE_KERNEL;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *params)
{
    FC_CALLED("cuGraphKernelNodeGetParams_v2");
    if (!hNode || !params)
        return CUDA_ERROR_INVALID_VALUE;
    *params = ((fc_node_t *)hNode)->params;
    return CUDA_SUCCESS;
}

static CUresult instantiate(CUgraphExec *phExec, CUgraph hGraph)
{
    fc_graph_t *g = (fc_graph_t *)hGraph;
    if (!phExec || !g || g->magic != FC_GRAPH_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    fc_exec_t *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = FC_EXEC_MAGIC;
    e->n = g->n;
    for (unsigned i = 0; i < g->n; i++) {
        const CUDA_KERNEL_NODE_PARAMS *p = &g->nodes[i].params;
        e->f[i] = p->func;
        e->blocks[i] = (uint64_t)p->gridDimX * p->gridDimY * p->gridDimZ;
    }
    *phExec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phExec, CUgraph hGraph, unsigned long long flags)
{
    FC_CALLED("cuGraphInstantiateWithFlags");
    return instantiate(phExec, hGraph);
}

/* CUDA 11's five-argument instantiate ("cuGraphInstantiate" for cudaVersion 11000..11999). */
FAKE_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                           char *logBuffer, size_t bufferSize)
{
    FC_CALLED("cuGraphInstantiate_v2");
    if (phErrorNode)
        *phErrorNode = NULL;
    if (logBuffer && bufferSize)
        logBuffer[0] = '\0';
    return instantiate(phExec, hGraph);
}

FAKE_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phExec, CUgraph hGraph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    FC_CALLED("cuGraphInstantiateWithParams");
    return instantiate(phExec, hGraph);
}

FAKE_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phExec, CUgraph hGraph,
                                                       CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    FC_CALLED("cuGraphInstantiateWithParams_ptsz");
    return instantiate(phExec, hGraph);
}

FAKE_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hExec)
{
    FC_CALLED("cuGraphExecDestroy");
    fc_exec_t *e = (fc_exec_t *)hExec;
    if (!e || e->magic != FC_EXEC_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    e->magic = 0;
    free(e);
    return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec hExec)
{
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_exec_t *e = (fc_exec_t *)hExec;
    if (!e || e->magic != FC_EXEC_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < e->n; i++)
        fc_submit(ordinal, e->f[i], e->blocks[i]);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec hExec, CUstream s)
{
    FC_CALLED("cuGraphLaunch");
    return graph_launch(hExec);
}

FAKE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hExec, CUstream s)
{
    FC_CALLED("cuGraphLaunch_ptsz");
    return graph_launch(hExec);
}

/* hidden aliases: cuGetProcAddress hands out these, never addresses an interposer could replace */
FC_ALIAS(cuCtxSynchronize)
FC_ALIAS(cuStreamSynchronize)
FC_ALIAS(cuStreamSynchronize_ptsz)
FC_ALIAS(cuLaunchKernel)
FC_ALIAS(cuLaunchKernel_ptsz)
FC_ALIAS(cuLaunchKernelEx)
FC_ALIAS(cuLaunchKernelEx_ptsz)
FC_ALIAS(cuLaunchCooperativeKernel)
FC_ALIAS(cuLaunchCooperativeKernel_ptsz)
FC_ALIAS(cuLaunchCooperativeKernelMultiDevice)
FC_ALIAS(cuGraphCreate)
FC_ALIAS(cuGraphDestroy)
FC_ALIAS(cuGraphAddKernelNode_v2)
FC_ALIAS(cuGraphGetNodes)
FC_ALIAS(cuGraphNodeGetType)
FC_ALIAS(cuGraphKernelNodeGetParams_v2)
FC_ALIAS(cuGraphInstantiateWithFlags)
FC_ALIAS(cuGraphInstantiate_v2)
FC_ALIAS(cuGraphInstantiateWithParams)
FC_ALIAS(cuGraphInstantiateWithParams_ptsz)
FC_ALIAS(cuGraphExecDestroy)
FC_ALIAS(cuGraphLaunch)
FC_ALIAS(cuGraphLaunch_ptsz)

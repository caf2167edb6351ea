/*
 * throttle.c: every launch path passes the launch gate, charged by its grid size in thread blocks.
 *
 * Hot path: one relaxed load when compute is not limited; otherwise an atomic add (and, while the device
 * is throttled, an atomic subtract from its token bucket). A launch that finds the bucket in debt waits
 * in carve_gate_wait, the slow path, until the feedback thread (feedback.c) has refilled it.
 * Graphs are charged the blocks of their kernel nodes, counted once when they are instantiated.
 */
#include <stdlib.h>
#include <time.h>

#include "limiter.h"

carve_gate_t carve_gates[CARVE_MAX_DEVICES] __attribute__((aligned(64)));
int carve_gate_state;
__thread uint64_t carve_thread_launches __attribute__((tls_model("initial-exec")));

static inline void gate(uint64_t blocks)
{
    carve_thread_launches++;
    int s = __atomic_load_n(&carve_gate_state, __ATOMIC_RELAXED);
    if (LIKELY(s == 1))
        return;
    if (UNLIKELY(s == 0))
        s = carve_gate_decide();
    if (s != 2)
        return;
    int dev = carve_current_device();
    if ((unsigned)dev >= CARVE_MAX_DEVICES)
        return;
    carve_gate_t *g = &carve_gates[dev];
    __atomic_add_fetch(&g->launched, blocks, __ATOMIC_RELAXED);
    if (!__atomic_load_n(&g->active, __ATOMIC_RELAXED))
        return;
    if (__atomic_sub_fetch(&g->tokens, (int64_t)blocks, __ATOMIC_ACQ_REL) < 0)
        carve_gate_wait(g);
}

void carve_gate_wait(carve_gate_t *g)
{
    __atomic_store_n(&g->starved, 1, __ATOMIC_RELAXED);
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 500000};
    while (__atomic_load_n(&g->tokens, __ATOMIC_ACQUIRE) < 0 && __atomic_load_n(&g->active, __ATOMIC_RELAXED))
        nanosleep(&ts, NULL);
}

static inline uint64_t grid(unsigned x, unsigned y, unsigned z)
{
    return (uint64_t)x * y * z;
}

#define LAUNCH_KERNEL(name)                                                                                \
    CARVE_API CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,  \
                            unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)           \
    {                                                                                                      \
        carve_init();                                                                                      \
        gate(grid(gx, gy, gz));                                                                            \
        return REAL(name)(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);                             \
    }
LAUNCH_KERNEL(cuLaunchKernel)
LAUNCH_KERNEL(cuLaunchKernel_ptsz)

#define LAUNCH_COOPERATIVE(name)                                                                           \
    CARVE_API CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,  \
                            unsigned bz, unsigned shmem, CUstream s, void **params)                         \
    {                                                                                                      \
        carve_init();                                                                                      \
        gate(grid(gx, gy, gz));                                                                            \
        return REAL(name)(f, gx, gy, gz, bx, by, bz, shmem, s, params);                                    \
    }
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)

#define LAUNCH_EX(name)                                                                                    \
    CARVE_API CUresult name(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)       \
    {                                                                                                      \
        carve_init();                                                                                      \
        gate(config ? grid(config->gridDimX, config->gridDimY, config->gridDimZ) : 1);                     \
        return REAL(name)(config, f, params, extra);                                                       \
    }
LAUNCH_EX(cuLaunchKernelEx)
LAUNCH_EX(cuLaunchKernelEx_ptsz)

/* Deprecated, still exported: all launches are charged to the calling thread's device. */
CARVE_API CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n,
                                                        unsigned int flags)
{
    carve_init();
    uint64_t blocks = 0;
    for (unsigned i = 0; list && i < n; i++)
        blocks += grid(list[i].gridDimX, list[i].gridDimY, list[i].gridDimZ);
    gate(blocks);
    return REAL(cuLaunchCooperativeKernelMultiDevice)(list, n, flags);
}

/* --- graphs ---------------------------------------------------------------------------------------- */

/* Blocks of all kernel nodes of a graph (child graphs are not walked: see docs/limiter.md). */
static uint64_t graph_blocks(CUgraph graph)
{
    size_t n = 0;
    if (!REAL(cuGraphGetNodes) || !REAL(cuGraphNodeGetType) || !REAL(cuGraphKernelNodeGetParams_v2) ||
        REAL(cuGraphGetNodes)(graph, NULL, &n) != CUDA_SUCCESS || n == 0)
        return 0;
    CUgraphNode *nodes = calloc(n, sizeof *nodes);
    if (!nodes)
        return 0;
    uint64_t blocks = 0;
    if (REAL(cuGraphGetNodes)(graph, nodes, &n) == CUDA_SUCCESS) {
        for (size_t i = 0; i < n; i++) {
            CUgraphNodeType type;
            CUDA_KERNEL_NODE_PARAMS p;
            if (REAL(cuGraphNodeGetType)(nodes[i], &type) == CUDA_SUCCESS && type == CU_GRAPH_NODE_TYPE_KERNEL &&
                REAL(cuGraphKernelNodeGetParams_v2)(nodes[i], &p) == CUDA_SUCCESS)
                blocks += grid(p.gridDimX, p.gridDimY, p.gridDimZ);
        }
    }
    free(nodes);
    return blocks;
}

static CUresult remember_graph(CUresult rc, CUgraphExec *exec, CUgraph graph)
{
    if (rc == CUDA_SUCCESS && exec && *exec)
        carve_track((uint64_t)(uintptr_t)*exec, CARVE_KIND_GRAPH, 0, graph_blocks(graph));
    return rc;
}

CARVE_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
    carve_init();
    return remember_graph(REAL(cuGraphInstantiateWithFlags)(exec, graph, flags), exec, graph);
}

CARVE_API CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph graph,
                                                CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    carve_init();
    return remember_graph(REAL(cuGraphInstantiateWithParams)(exec, graph, params), exec, graph);
}

CARVE_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *exec, CUgraph graph,
                                                     CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    carve_init();
    return remember_graph(REAL(cuGraphInstantiateWithParams_ptsz)(exec, graph, params), exec, graph);
}

CARVE_API CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    carve_init();
    int dev;
    uint64_t blocks;
    carve_untrack((uint64_t)(uintptr_t)exec, CARVE_KIND_GRAPH, &dev, &blocks);
    return REAL(cuGraphExecDestroy)(exec);
}

static inline uint64_t exec_blocks(CUgraphExec exec)
{
    uint64_t blocks = 0;
    if (carve_lookup((uint64_t)(uintptr_t)exec, CARVE_KIND_GRAPH, &blocks) != 0 || blocks == 0)
        blocks = 1; /* instantiated before the limiter saw it: the feedback loop still measures its time */
    return blocks;
}

CARVE_API CUresult cuGraphLaunch(CUgraphExec exec, CUstream s)
{
    carve_init();
    gate(exec_blocks(exec));
    return REAL(cuGraphLaunch)(exec, s);
}

CARVE_API CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s)
{
    carve_init();
    gate(exec_blocks(exec));
    return REAL(cuGraphLaunch_ptsz)(exec, s);
}

/* Launches this thread made through the limiter's hooks (tests check every path is intercepted). */
CARVE_API uint64_t carveLimiterThreadLaunches(void)
{
    return carve_thread_launches;
}

/*
 * throttle.c: every launch path passes the launch gate, charged by its grid size in thread blocks.
 *
 * Hot path: relaxed loads only when the device has no compute limit; with a limit an atomic add (and, while
 * the device is throttled, an atomic subtract from its token bucket). A launch that finds the bucket in debt waits
 * in carve_gate_wait, the slow path, until the feedback thread (feedback.c) has refilled it.
 * Graphs are charged the blocks of their kernel nodes, counted once when they are instantiated.
 */
#include <stdlib.h>
#include <time.h>

#include "limiter.h"

carve_gate_t carve_gates[CARVE_MAX_DEVICES] __attribute__((aligned(64)));
int carve_gate_state;
__thread uint64_t carve_thread_launches __attribute__((tls_model("initial-exec")));

/* 1 while a launch needs nothing from the limiter: initialised, and no device counts or throttles. The
 * feedback thread clears it when a device gets a compute limit; everything else is the slow path. */
int carve_launch_free;

__attribute__((noinline)) static void gate_slow(uint64_t blocks)
{
    carve_init();
    int s = __atomic_load_n(&carve_gate_state, __ATOMIC_RELAXED);
    if (UNLIKELY(s == 0))
        s = carve_gate_decide();
    if (s != 2)
        return;
    int dev = carve_current_device();
    if ((unsigned)dev >= CARVE_MAX_DEVICES)
        return;
    carve_gate_t *g = &carve_gates[dev];
    int mode = __atomic_load_n(&g->mode, __ATOMIC_RELAXED);
    if (mode == CARVE_GATE_IDLE)
        return;
    __atomic_add_fetch(&g->launched, blocks, __ATOMIC_RELAXED);
    if (mode != CARVE_GATE_THROTTLE)
        return;
    if (__atomic_sub_fetch(&g->tokens, (int64_t)blocks, __ATOMIC_ACQ_REL) < 0)
        carve_gate_wait(g);
}

/* Every launch hook has the same shape: the hot path is a thread-local count, one load and a tail call to
 * the driver; anything else happens in a separate out-of-line function that also tail-calls the driver, so
 * the hot path needs no stack frame. */
#define GATED(ret, name, params, args, blocks)                                                             \
    __attribute__((noinline)) static ret slow_##name params                                               \
    {                                                                                                      \
        gate_slow(blocks);                                                                                 \
        return REAL(name) args;                                                                            \
    }                                                                                                      \
    CARVE_API ret name params                                                                              \
    {                                                                                                      \
        carve_thread_launches++;                                                                           \
        if (LIKELY(__atomic_load_n(&carve_launch_free, __ATOMIC_RELAXED)))                                \
            return REAL(name) args;                                                                        \
        return slow_##name args;                                                                           \
    }

void carve_gate_wait(carve_gate_t *g)
{
    __atomic_store_n(&g->starved, 1, __ATOMIC_RELAXED);
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 500000};
    while (__atomic_load_n(&g->tokens, __ATOMIC_ACQUIRE) < 0 &&
           __atomic_load_n(&g->mode, __ATOMIC_RELAXED) == CARVE_GATE_THROTTLE)
        nanosleep(&ts, NULL);
}

static inline uint64_t grid(unsigned x, unsigned y, unsigned z)
{
    return (uint64_t)x * y * z;
}

#define KERNEL_PARAMS                                                                                      \
    (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem, \
     CUstream s, void **params, void **extra)
#define KERNEL_ARGS (f, gx, gy, gz, bx, by, bz, shmem, s, params, extra)
GATED(CUresult, cuLaunchKernel, KERNEL_PARAMS, KERNEL_ARGS, grid(gx, gy, gz))
GATED(CUresult, cuLaunchKernel_ptsz, KERNEL_PARAMS, KERNEL_ARGS, grid(gx, gy, gz))

#define COOP_PARAMS                                                                                        \
    (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem, \
     CUstream s, void **params)
#define COOP_ARGS (f, gx, gy, gz, bx, by, bz, shmem, s, params)
GATED(CUresult, cuLaunchCooperativeKernel, COOP_PARAMS, COOP_ARGS, grid(gx, gy, gz))
GATED(CUresult, cuLaunchCooperativeKernel_ptsz, COOP_PARAMS, COOP_ARGS, grid(gx, gy, gz))

#define EX_PARAMS (const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
#define EX_ARGS (config, f, params, extra)
#define EX_BLOCKS (config ? grid(config->gridDimX, config->gridDimY, config->gridDimZ) : 1)
GATED(CUresult, cuLaunchKernelEx, EX_PARAMS, EX_ARGS, EX_BLOCKS)
GATED(CUresult, cuLaunchKernelEx_ptsz, EX_PARAMS, EX_ARGS, EX_BLOCKS)

/* Deprecated, still exported: all launches are charged to the calling thread's device. */
static uint64_t multi_blocks(const CUDA_LAUNCH_PARAMS *list, unsigned n)
{
    uint64_t blocks = 0;
    for (unsigned i = 0; list && i < n; i++)
        blocks += grid(list[i].gridDimX, list[i].gridDimY, list[i].gridDimZ);
    return blocks;
}
GATED(CUresult, cuLaunchCooperativeKernelMultiDevice, (CUDA_LAUNCH_PARAMS *list, unsigned int n, unsigned int flags),
      (list, n, flags), multi_blocks(list, n))

/* --- graphs ---------------------------------------------------------------------------------------- */

/* Blocks of all kernel nodes of a graph (child graphs are not walked: see docs/limiter.md); at least 1: a
 * graph with no kernel the limiter can count is still a launch the gate passes, and the feedback loop measures
 * its time. */
static uint64_t graph_blocks(CUgraph graph)
{
    size_t n = 0;
    if (!REAL(cuGraphGetNodes) || !REAL(cuGraphNodeGetType) || !REAL(cuGraphKernelNodeGetParams_v2) ||
        REAL(cuGraphGetNodes)(graph, NULL, &n) != CUDA_SUCCESS || n == 0)
        return 1;
    CUgraphNode *nodes = calloc(n, sizeof *nodes);
    if (!nodes)
        return 1;
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
    return blocks ? blocks : 1;
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

/* What "cuGraphInstantiate" resolves to for code built with CUDA 11 (cudaVersion 11000..11999). */
CARVE_API CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node, char *log,
                                         size_t log_size)
{
    carve_init();
    return remember_graph(REAL(cuGraphInstantiate_v2)(exec, graph, error_node, log, log_size), exec, graph);
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
    uint64_t blocks; /* set by a lookup that finds the graph, else below */
    if (carve_lookup((uint64_t)(uintptr_t)exec, CARVE_KIND_GRAPH, &blocks) != 0)
        blocks = 1; /* instantiated before the limiter saw it: the feedback loop still measures its time */
    return blocks;
}

GATED(CUresult, cuGraphLaunch, (CUgraphExec exec, CUstream s), (exec, s), exec_blocks(exec))
GATED(CUresult, cuGraphLaunch_ptsz, (CUgraphExec exec, CUstream s), (exec, s), exec_blocks(exec))

/* Launches this thread made through the limiter's hooks (tests check every path is intercepted). */
CARVE_API uint64_t carveLimiterThreadLaunches(void)
{
    return carve_thread_launches;
}

/*
 * limiter_grid_cuda: how many thread blocks the limiter charges for launches with a 3-D grid.
 *
 *   limiter_grid_cuda GX GY GZ N   N launches of a GX x GY x GZ grid on each launch path (cuLaunchKernel,
 *                                  cuLaunchCooperativeKernel, cuLaunchKernelEx, a graph of one such node),
 *                                  then prints {"expected": ..., "charged": ...} once the limiter's
 *                                  count (carveLimiterLaunchedBlocks, folded in by its feedback thread)
 *                                  stops changing.
 * Run under LD_PRELOAD of libcarve-limiter.so with a compute limit, so launches are counted.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#pragma GCC diagnostic ignored "-Wunused-function" /* client_common.h helpers this probe does not use */
#include "client_common.h"

CUfunction carveFakeKernel(uint64_t ns_per_wave);

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s GX GY GZ N\n", argv[0]);
        return 2;
    }
    unsigned gx = (unsigned)atoi(argv[1]), gy = (unsigned)atoi(argv[2]), gz = (unsigned)atoi(argv[3]);
    int n = atoi(argv[4]);
    uint64_t (*charged)(int) = (uint64_t(*)(int))dlsym(RTLD_DEFAULT, "carveLimiterLaunchedBlocks");
    if (!charged) {
        fprintf(stderr, "FAIL: the limiter is not preloaded\n");
        return 2;
    }
    setup();
    CUfunction f = carveFakeKernel(1000);
    CUlaunchConfig cfg = {.gridDimX = gx, .gridDimY = gy, .gridDimZ = gz, .blockDimX = 32, .blockDimY = 1,
                          .blockDimZ = 1};
    CUDA_KERNEL_NODE_PARAMS np = {.func = f, .gridDimX = gx, .gridDimY = gy, .gridDimZ = gz, .blockDimX = 32,
                                  .blockDimY = 1, .blockDimZ = 1};
    CUgraph graph;
    CUgraphNode node;
    CUgraphExec exec;
    CHECK(cuGraphCreate(&graph, 0) == CUDA_SUCCESS, "cuGraphCreate");
    CHECK(cuGraphAddKernelNode(&node, graph, NULL, 0, &np) == CUDA_SUCCESS, "cuGraphAddKernelNode");
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS, "cuGraphInstantiateWithFlags");
    for (int i = 0; i < n; i++) {
        CHECK(cuLaunchKernel(f, gx, gy, gz, 32, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS, "cuLaunchKernel");
        CHECK(cuLaunchCooperativeKernel(f, gx, gy, gz, 32, 1, 1, 0, NULL, NULL) == CUDA_SUCCESS, "coop");
        CHECK(cuLaunchKernelEx(&cfg, f, NULL, NULL) == CUDA_SUCCESS, "cuLaunchKernelEx");
        CHECK(cuGraphLaunch(exec, NULL) == CUDA_SUCCESS, "cuGraphLaunch");
    }
    cuCtxSynchronize();
    uint64_t expected = 4ull * (uint64_t)n * gx * gy * gz, last = charged(0);
    /* The feedback thread folds each period's launches into the total: wait until it is all there (or
     * has stopped moving for a second). */
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 50 * 1000 * 1000};
    for (int still = 0, waited = 0; last != expected && still < 20 && waited < 200; waited++) {
        nanosleep(&ts, NULL);
        uint64_t now = charged(0);
        still = now == last ? still + 1 : 0;
        last = now;
    }
    printf("{\"expected\": %llu, \"charged\": %llu}\n", (unsigned long long)expected, (unsigned long long)last);
    return g_failures ? 1 : 0;
}

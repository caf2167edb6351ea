/*
 * limiter_grid_cuda: how many thread blocks the limiter charges for launches with a 3-D grid.
 *
 *   limiter_grid_cuda GX GY GZ N   N launches of a GX x GY x GZ grid on each launch path (cuLaunchKernel,
 *                                  cuLaunchCooperativeKernel, cuLaunchKernelEx and their per-thread-stream
 *                                  variants, cuLaunchCooperativeKernelMultiDevice with two launches, a graph
 *                                  of one such node instantiated each way and launched on either stream
 *                                  flavour),
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
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* cuLaunchCooperativeKernelMultiDevice */
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
    typedef CUresult (*instp_fn)(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);
    typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void **, void **);
    typedef CUresult (*coop_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                CUstream, void **);
    typedef CUresult (*ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
    typedef CUresult (*glaunch_fn)(CUgraphExec, CUstream);
    instp_fn inst_pt = (instp_fn)dlsym(RTLD_DEFAULT, "cuGraphInstantiateWithParams_ptsz");
    launch_fn launch_pt = (launch_fn)dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz");
    coop_fn coop_pt = (coop_fn)dlsym(RTLD_DEFAULT, "cuLaunchCooperativeKernel_ptsz");
    ex_fn ex_pt = (ex_fn)dlsym(RTLD_DEFAULT, "cuLaunchKernelEx_ptsz");
    glaunch_fn glaunch_pt = (glaunch_fn)dlsym(RTLD_DEFAULT, "cuGraphLaunch_ptsz");
    if (!inst_pt || !launch_pt || !coop_pt || !ex_pt || !glaunch_pt) {
        fprintf(stderr, "FAIL: a per-thread-stream entry point is missing\n");
        return 2;
    }
    CUgraphExec by_params, by_params_pt;
    CUDA_GRAPH_INSTANTIATE_PARAMS ip = {0};
    CHECK(cuGraphInstantiateWithParams(&by_params, graph, &ip) == CUDA_SUCCESS, "cuGraphInstantiateWithParams");
    CHECK(inst_pt(&by_params_pt, graph, &ip) == CUDA_SUCCESS, "cuGraphInstantiateWithParams_ptsz");
    CUDA_LAUNCH_PARAMS both[2];
    for (int k = 0; k < 2; k++)
        both[k] = (CUDA_LAUNCH_PARAMS){.function = f, .gridDimX = gx, .gridDimY = gy, .gridDimZ = gz,
                                       .blockDimX = 32, .blockDimY = 1, .blockDimZ = 1};
    for (int i = 0; i < n; i++) {
        CHECK(cuLaunchKernel(f, gx, gy, gz, 32, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS, "cuLaunchKernel");
        CHECK(cuLaunchCooperativeKernel(f, gx, gy, gz, 32, 1, 1, 0, NULL, NULL) == CUDA_SUCCESS, "coop");
        CHECK(cuLaunchKernelEx(&cfg, f, NULL, NULL) == CUDA_SUCCESS, "cuLaunchKernelEx");
        CHECK(cuGraphLaunch(exec, NULL) == CUDA_SUCCESS, "cuGraphLaunch");
        CHECK(launch_pt(f, gx, gy, gz, 32, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS, "cuLaunchKernel_ptsz");
        CHECK(coop_pt(f, gx, gy, gz, 32, 1, 1, 0, NULL, NULL) == CUDA_SUCCESS, "coop_ptsz");
        CHECK(ex_pt(&cfg, f, NULL, NULL) == CUDA_SUCCESS, "cuLaunchKernelEx_ptsz");
        CHECK(cuLaunchCooperativeKernelMultiDevice(both, 2, 0) == CUDA_SUCCESS, "multi-device"); /* two grids */
        CHECK(glaunch_pt(by_params, NULL) == CUDA_SUCCESS, "cuGraphLaunch_ptsz");
        CHECK(cuGraphLaunch(by_params_pt, NULL) == CUDA_SUCCESS, "cuGraphLaunch");
    }
    cuCtxSynchronize();
    uint64_t expected = 11ull * (uint64_t)n * gx * gy * gz, last = charged(0);
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

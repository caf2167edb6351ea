/*
 * limiter_refusal_cuda: the limiter's accounting when the driver says no, for
 * tests/integration/limiter/test_limiter_refusals.py. Run under LD_PRELOAD of libcarve-limiter.so with
 * build/refusing first on LD_LIBRARY_PATH (native/tests/refusing/refusing_cuda.c: a libcuda.so.1 that
 * refuses what its environment names and forwards the rest to the fake).
 *
 *   limiter_refusal_cuda STEP...   each step, in order, prints one JSON line:
 *                                  {"step": ..., "rc": CUresult, "used": the claim's region counter}
 *     alloc BYTES                  cuMemAlloc_v2 (BYTES up to 2^64-1); a success is kept for `free`
 *     free                         cuMemFree_v2 of the last allocation kept; it stays kept when refused
 *     afree                        cuMemFreeAsync of it on the default stream, then a synchronize; the same
 *     pitch WIDTH HEIGHT ELEMENT   cuMemAllocPitch_v2 (kept for `free`); also prints the pitch, what the
 *                                  driver holds on the device ("driver") and how many pitched allocations
 *                                  reached the driver so far ("asked")
 *     array W H                    cuArray3DCreate_v2 of W x H 4-byte texels, kept for `destroy`
 *     mipmap W H LEVELS            cuMipmappedArrayCreate of W x H 4-byte texels, LEVELS levels, kept for `destroy`
 *     destroy                      cuArrayDestroy or cuMipmappedArrayDestroy of the last array or mipmapped
 *                                  array kept; it stays kept when refused
 *     env NAME=VALUE               setenv (the refusing driver reads its environment at each call)
 *     graph N                      a one-kernel graph the limiter has no record of, launched N times;
 *                                  "charged" is the blocks the limiter counted for them
 *     regraph N                    a one-kernel graph instantiated through the limiter and destroyed, then one
 *                                  the limiter has no record of, which the driver gives the freed handle
 *                                  ("same": 1), launched N times; "charged" as for `graph`
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client_common.h"
#include "common/fakegpu.h"

CUfunction carveFakeKernel(uint64_t ns_per_wave);

static uint64_t settled(uint64_t (*charged)(int), uint64_t want)
{
    /* the feedback thread folds each period's launches into the total: wait until it stops moving */
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 50 * 1000 * 1000};
    uint64_t last = charged(0);
    for (int still = 0, waited = 0; last < want && still < 20 && waited < 200; waited++) {
        nanosleep(&ts, NULL);
        uint64_t now = charged(0);
        still = now == last ? still + 1 : 0;
        last = now;
    }
    return last;
}

int main(int argc, char **argv)
{
    setup();
    CUdeviceptr kept[64];
    int n = 0;
    struct {
        void *h;
        int mipmap;
    } arrays[64];
    int na = 0;
    for (int i = 1; i < argc; i++) {
        const char *step = argv[i];
        CUresult rc = CUDA_SUCCESS;
        if (!strcmp(step, "alloc") && i + 1 < argc) {
            CUdeviceptr p = 0;
            rc = cuMemAlloc_v2(&p, (size_t)strtoull(argv[++i], NULL, 10));
            if (rc == CUDA_SUCCESS && n < 64)
                kept[n++] = p;
        } else if (!strcmp(step, "pitch") && i + 3 < argc) {
            CUdeviceptr p = 0;
            size_t pitch = 0, width = (size_t)strtoull(argv[i + 1], NULL, 10);
            size_t height = (size_t)strtoull(argv[i + 2], NULL, 10);
            rc = cuMemAllocPitch_v2(&p, &pitch, width, height, (unsigned)atoi(argv[i + 3]));
            i += 3;
            if (rc == CUDA_SUCCESS && n < 64)
                kept[n++] = p;
            uint64_t (*asked)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "refusingCudaPitchCalls");
            printf("{\"step\": \"pitch\", \"rc\": %d, \"used\": %llu, \"pitch\": %zu, \"driver\": %llu, "
                   "\"asked\": %llu}\n", (int)rc, (unsigned long long)used(), rc == CUDA_SUCCESS ? pitch : 0,
                   (unsigned long long)fake_mem_used(0), asked ? (unsigned long long)asked() : 0ull);
            fflush(stdout);
            continue;
        } else if (!strcmp(step, "free") || !strcmp(step, "afree")) {
            CHECK(n > 0, "free with nothing allocated");
            if (n == 0)
                return 2;
            rc = !strcmp(step, "free") ? cuMemFree_v2(kept[n - 1]) : cuMemFreeAsync(kept[n - 1], NULL);
            if (rc == CUDA_SUCCESS && !strcmp(step, "afree"))
                rc = cuCtxSynchronize();
            if (rc == CUDA_SUCCESS)
                n--;
        } else if ((!strcmp(step, "array") && i + 2 < argc) || (!strcmp(step, "mipmap") && i + 3 < argc)) {
            int mipmap = !strcmp(step, "mipmap");
            CUDA_ARRAY3D_DESCRIPTOR d = {.Width = (size_t)strtoull(argv[i + 1], NULL, 10),
                                         .Height = (size_t)strtoull(argv[i + 2], NULL, 10),
                                         .Format = CU_AD_FORMAT_FLOAT,
                                         .NumChannels = 1};
            void *h = NULL;
            if (mipmap)
                rc = cuMipmappedArrayCreate((CUmipmappedArray *)&h, &d, (unsigned)atoi(argv[i + 3]));
            else
                rc = cuArray3DCreate_v2((CUarray *)&h, &d);
            i += 2 + mipmap;
            if (rc == CUDA_SUCCESS && na < 64) {
                arrays[na].h = h;
                arrays[na++].mipmap = mipmap;
            }
        } else if (!strcmp(step, "destroy")) {
            CHECK(na > 0, "destroy with no array kept");
            if (na == 0)
                return 2;
            rc = arrays[na - 1].mipmap ? cuMipmappedArrayDestroy((CUmipmappedArray)arrays[na - 1].h)
                                       : cuArrayDestroy((CUarray)arrays[na - 1].h);
            if (rc == CUDA_SUCCESS)
                na--;
        } else if (!strcmp(step, "env") && i + 1 < argc) {
            char *kv = argv[++i], *eq = strchr(kv, '=');
            CHECK(eq != NULL, "env %s: NAME=VALUE", kv);
            if (eq) {
                *eq = 0;
                setenv(kv, eq + 1, 1);
            }
        } else if ((!strcmp(step, "graph") || !strcmp(step, "regraph")) && i + 1 < argc) {
            int again = !strcmp(step, "regraph");
            int launches = atoi(argv[++i]);
            uint64_t (*charged)(int) = (uint64_t(*)(int))dlsym(RTLD_DEFAULT, "carveLimiterLaunchedBlocks");
            CUresult (*unseen)(CUgraphExec *, CUgraph) =
                (CUresult(*)(CUgraphExec *, CUgraph))dlsym(RTLD_DEFAULT, "refusingCudaInstantiateUnseen");
            CHECK(charged && unseen, "the limiter is not preloaded or the refusing driver not loaded");
            if (!charged || !unseen)
                return 2;
            CUfunction f = carveFakeKernel(1000);
            CUDA_KERNEL_NODE_PARAMS np = {.func = f, .gridDimX = 8, .gridDimY = 1, .gridDimZ = 1,
                                          .blockDimX = 32, .blockDimY = 1, .blockDimZ = 1};
            CUgraph graph;
            CUgraphNode node;
            CUgraphExec exec;
            CHECK(cuGraphCreate(&graph, 0) == CUDA_SUCCESS, "cuGraphCreate");
            CHECK(cuGraphAddKernelNode(&node, graph, NULL, 0, &np) == CUDA_SUCCESS, "cuGraphAddKernelNode");
            CUgraphExec gone = NULL;
            if (again) { /* seen and destroyed: its handle is free for the driver to give again */
                CHECK(cuGraphInstantiateWithFlags(&gone, graph, 0) == CUDA_SUCCESS, "instantiate");
                CHECK(cuGraphExecDestroy(gone) == CUDA_SUCCESS, "destroy");
            }
            rc = unseen(&exec, graph);
            CHECK(rc == CUDA_SUCCESS, "instantiate");
            uint64_t before = charged(0);
            for (int k = 0; k < launches && rc == CUDA_SUCCESS; k++)
                rc = cuGraphLaunch(exec, NULL);
            cuCtxSynchronize();
            uint64_t after = settled(charged, before + (uint64_t)launches);
            printf("{\"step\": \"%s\", \"rc\": %d, \"launches\": %d, \"charged\": %llu, \"same\": %d}\n", step,
                   (int)rc, launches, (unsigned long long)(after - before), again && exec == gone);
            fflush(stdout);
            continue;
        } else {
            fprintf(stderr, "usage: %s [alloc BYTES | pitch W H E | free | afree | array W H | mipmap W H L | destroy | env NAME=VALUE | graph N | regraph N]...\n", argv[0]);
            return 2;
        }
        printf("{\"step\": \"%s\", \"rc\": %d, \"used\": %llu}\n", step, (int)rc, (unsigned long long)used());
        fflush(stdout);
    }
    return g_failures ? 1 : 0;
}

/*
 * limiter_bench_cuda: nanoseconds per call of the intercepted entry points, for tests/benchmarks.
 * Run once plainly (the fake driver alone) and once with libcarve-limiter.so preloaded; the difference is
 * what the limiter adds. Prints one JSON object: {"<op>": ns_per_call, ...}, best of several repetitions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda.h>

#undef cuGetProcAddress

CUfunction carveFakeKernel(uint64_t ns_per_wave);

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*info_fn)(size_t *, size_t *);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);

#define BEST(n, reps, body)                                                                                \
    ({                                                                                                     \
        double best_ = 1e30;                                                                               \
        for (int r_ = 0; r_ < (reps); r_++) {                                                              \
            double t0_ = now();                                                                            \
            for (int i_ = 0; i_ < (n); i_++) {                                                             \
                body;                                                                                      \
            }                                                                                              \
            double per_ = (now() - t0_) / (n);                                                             \
            if (per_ < best_)                                                                              \
                best_ = per_;                                                                              \
        }                                                                                                  \
        best_;                                                                                             \
    })

static void run(const char *label, alloc_fn alloc, free_fn fr, info_fn info, launch_fn launch, int n, int first)
{
    CUfunction f = carveFakeKernel(1);
    CUdeviceptr p;
    size_t a, b;
    double pair = BEST(n, 5, { alloc(&p, 4096); fr(p); });
    double gi = BEST(n, 5, info(&a, &b));
    double la = BEST(n, 5, launch(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    printf("%s\"%s_alloc_free\": %.1f, \"%s_mem_get_info\": %.1f, \"%s_launch\": %.1f", first ? "" : ", ", label,
           pair, label, gi, label, la);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 200000;
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
        fprintf(stderr, "no fake GPU\n");
        return 2;
    }
    void *pa, *pf, *pi, *pl;
    CUdriverProcAddressQueryResult st;
    cuGetProcAddress_v2("cuMemAlloc", &pa, 13000, 0, &st);
    cuGetProcAddress_v2("cuMemFree", &pf, 13000, 0, &st);
    cuGetProcAddress_v2("cuMemGetInfo", &pi, 13000, 0, &st);
    cuGetProcAddress_v2("cuLaunchKernel", &pl, 13000, 0, &st);
    printf("{");
    run("direct", cuMemAlloc_v2, cuMemFree_v2, cuMemGetInfo_v2, cuLaunchKernel, n, 1);
    run("procaddr", (alloc_fn)pa, (free_fn)pf, (info_fn)pi, (launch_fn)pl, n, 0);
    printf("}\n");
    return 0;
}

/*
 * limiter_paths_cuda_nvml: every intercepted entry point, called all three ways an application reaches the
 * driver, run under LD_PRELOAD of libcarve-limiter.so against the fake libcuda.so.1 / libnvidia-ml.so.1.
 *
 *   paths MODE   MODE = direct (linked symbols) | dlsym (a dlopen'ed libcuda handle, as ctypes does) |
 *                procaddr (cuGetProcAddress and cuGetProcAddress_v2, with versions and stream flags).
 *                Every counted allocation path charges and releases exactly, refuses over quota before
 *                reaching the driver, and reaches the same driver variant (legacy or per-thread stream);
 *                reports go through the same path; every launch path (and graph instantiation, CUDA 11
 *                and 12 flavours) is intercepted.
 * The region named by CARVE_REGION must give device 0 a memory limit. Exit status 0 = every check held;
 * failures print "FAIL: ..." on stderr.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <nvml.h>

#include "carve_region.h"
#include "client_common.h"
#include "common/fakegpu.h"

#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

const char *carveFakeCudaLastCall(void);
void carveFakeCudaResetLastCall(void);
CUfunction carveFakeKernel(uint64_t ns_per_wave);


/* --- the API under test, resolved one of three ways ------------------------------------------------- */
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*pitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
typedef CUresult (*managed_fn)(CUdeviceptr *, size_t, unsigned);
typedef CUresult (*async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*afree_fn)(CUdeviceptr, CUstream);
typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*arr_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
typedef CUresult (*arr3_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
typedef CUresult (*arrd_fn)(CUarray);
typedef CUresult (*mip_fn)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned);
typedef CUresult (*mipd_fn)(CUmipmappedArray);
typedef CUresult (*info_fn)(size_t *, size_t *);
typedef CUresult (*total_fn)(size_t *, CUdevice);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
typedef CUresult (*coop_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void **);
typedef CUresult (*ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*multi_fn)(CUDA_LAUNCH_PARAMS *, unsigned, unsigned);
typedef CUresult (*inst_fn)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*inst11_fn)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
typedef CUresult (*glaunch_fn)(CUgraphExec, CUstream);

typedef struct api {
    alloc_fn alloc;
    free_fn free;
    pitch_fn pitch;
    managed_fn managed;
    async_fn async, async_pt;
    pool_fn pool, pool_pt;
    afree_fn afree, afree_pt;
    create_fn create;
    release_fn release;
    arr_fn arr;
    arr3_fn arr3;
    arrd_fn arrd;
    mip_fn mip;
    mipd_fn mipd;
    info_fn info;
    total_fn total;
    launch_fn launch, launch_pt;
    coop_fn coop, coop_pt;
    ex_fn ex, ex_pt;
    multi_fn multi;
    inst_fn inst;
    inst11_fn inst11; /* CUDA 11's cuGraphInstantiate (cuGraphInstantiate_v2, five arguments) */
    glaunch_fn glaunch, glaunch_pt;
} api_t;

static void *via_procaddr_at(const char *base, int version, int per_thread)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    cuuint64_t flags = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    /* alternate the two entry points so both are exercised */
    static int turn;
    CUresult rc = (turn++ & 1) ? cuGetProcAddress(base, &fn, version, flags)
                               : cuGetProcAddress_v2(base, &fn, version, flags, &st);
    CHECK(rc == CUDA_SUCCESS && fn, "cuGetProcAddress(%s, %d, pt=%d) failed: %d", base, version, per_thread,
          (int)rc);
    return fn;
}

static void *via_procaddr(const char *base, int per_thread)
{
    return via_procaddr_at(base, 13000, per_thread);
}

static void *via_dlsym(void *h, const char *name)
{
    void *fn = dlsym(h, name);
    CHECK(fn != NULL, "dlsym(%s) returned NULL", name);
    return fn;
}

static void resolve(api_t *a, const char *mode)
{
    if (strcmp(mode, "direct") == 0) {
        *a = (api_t){cuMemAlloc_v2, cuMemFree_v2, cuMemAllocPitch_v2, cuMemAllocManaged, cuMemAllocAsync,
                     NULL, cuMemAllocFromPoolAsync, NULL, cuMemFreeAsync, NULL, cuMemCreate, cuMemRelease,
                     cuArrayCreate_v2, cuArray3DCreate_v2, cuArrayDestroy, cuMipmappedArrayCreate,
                     cuMipmappedArrayDestroy, cuMemGetInfo_v2, cuDeviceTotalMem_v2, cuLaunchKernel, NULL,
                     cuLaunchCooperativeKernel, NULL, cuLaunchKernelEx, NULL, cuLaunchCooperativeKernelMultiDevice,
                     cuGraphInstantiateWithFlags, NULL, cuGraphLaunch, NULL};
        /* the per-thread variants have no declarations without CUDA_API_PER_THREAD_DEFAULT_STREAM: take the
         * linked symbols by name from the global scope, which is what a direct call binds to */
        a->async_pt = (async_fn)dlsym(RTLD_DEFAULT, "cuMemAllocAsync_ptsz");
        a->pool_pt = (pool_fn)dlsym(RTLD_DEFAULT, "cuMemAllocFromPoolAsync_ptsz");
        a->afree_pt = (afree_fn)dlsym(RTLD_DEFAULT, "cuMemFreeAsync_ptsz");
        a->launch_pt = (launch_fn)dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz");
        a->coop_pt = (coop_fn)dlsym(RTLD_DEFAULT, "cuLaunchCooperativeKernel_ptsz");
        a->ex_pt = (ex_fn)dlsym(RTLD_DEFAULT, "cuLaunchKernelEx_ptsz");
        a->glaunch_pt = (glaunch_fn)dlsym(RTLD_DEFAULT, "cuGraphLaunch_ptsz");
        a->inst11 = (inst11_fn)dlsym(RTLD_DEFAULT, "cuGraphInstantiate_v2");
        CHECK(a->async_pt && a->pool_pt && a->afree_pt && a->launch_pt && a->coop_pt && a->ex_pt && a->glaunch_pt &&
                  a->inst11,
              "a per-thread or CUDA 11 entry point is not exported");
    } else if (strcmp(mode, "dlsym") == 0) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        CHECK(h != NULL, "dlopen(libcuda.so.1) failed");
#define D(field, name) a->field = (__typeof__(a->field))via_dlsym(h, name)
        D(alloc, "cuMemAlloc_v2"); D(free, "cuMemFree_v2"); D(pitch, "cuMemAllocPitch_v2");
        D(managed, "cuMemAllocManaged"); D(async, "cuMemAllocAsync"); D(async_pt, "cuMemAllocAsync_ptsz");
        D(pool, "cuMemAllocFromPoolAsync"); D(pool_pt, "cuMemAllocFromPoolAsync_ptsz");
        D(afree, "cuMemFreeAsync"); D(afree_pt, "cuMemFreeAsync_ptsz"); D(create, "cuMemCreate");
        D(release, "cuMemRelease"); D(arr, "cuArrayCreate_v2"); D(arr3, "cuArray3DCreate_v2");
        D(arrd, "cuArrayDestroy"); D(mip, "cuMipmappedArrayCreate"); D(mipd, "cuMipmappedArrayDestroy");
        D(info, "cuMemGetInfo_v2"); D(total, "cuDeviceTotalMem_v2"); D(launch, "cuLaunchKernel");
        D(launch_pt, "cuLaunchKernel_ptsz"); D(coop, "cuLaunchCooperativeKernel");
        D(coop_pt, "cuLaunchCooperativeKernel_ptsz"); D(ex, "cuLaunchKernelEx"); D(ex_pt, "cuLaunchKernelEx_ptsz");
        D(multi, "cuLaunchCooperativeKernelMultiDevice"); D(inst, "cuGraphInstantiateWithFlags");
        D(glaunch, "cuGraphLaunch"); D(glaunch_pt, "cuGraphLaunch_ptsz"); D(inst11, "cuGraphInstantiate_v2");
#undef D
    } else {
#define P(field, base, pt) a->field = (__typeof__(a->field))via_procaddr(base, pt)
        P(alloc, "cuMemAlloc", 0); P(free, "cuMemFree", 0); P(pitch, "cuMemAllocPitch", 0);
        P(managed, "cuMemAllocManaged", 0); P(async, "cuMemAllocAsync", 0); P(async_pt, "cuMemAllocAsync", 1);
        P(pool, "cuMemAllocFromPoolAsync", 0); P(pool_pt, "cuMemAllocFromPoolAsync", 1);
        P(afree, "cuMemFreeAsync", 0); P(afree_pt, "cuMemFreeAsync", 1); P(create, "cuMemCreate", 0);
        P(release, "cuMemRelease", 0); P(arr, "cuArrayCreate", 0); P(arr3, "cuArray3DCreate", 0);
        P(arrd, "cuArrayDestroy", 0); P(mip, "cuMipmappedArrayCreate", 0); P(mipd, "cuMipmappedArrayDestroy", 0);
        P(info, "cuMemGetInfo", 0); P(total, "cuDeviceTotalMem", 0); P(launch, "cuLaunchKernel", 0);
        P(launch_pt, "cuLaunchKernel", 1); P(coop, "cuLaunchCooperativeKernel", 0);
        P(coop_pt, "cuLaunchCooperativeKernel", 1); P(ex, "cuLaunchKernelEx", 0); P(ex_pt, "cuLaunchKernelEx", 1);
        P(multi, "cuLaunchCooperativeKernelMultiDevice", 0); P(inst, "cuGraphInstantiate", 0);
        P(glaunch, "cuGraphLaunch", 0); P(glaunch_pt, "cuGraphLaunch", 1);
        /* code built with CUDA 11 asks for "cuGraphInstantiate" and gets the five-argument variant */
        a->inst11 = (inst11_fn)via_procaddr_at("cuGraphInstantiate", 11080, 0);
#undef P
    }
}


static uint64_t limit(void)
{
    return g_region ? g_region->devices[0].memory_limit : 0;
}


static void expect_variant(const char *want, const char *what)
{
    const char *got = carveFakeCudaLastCall();
    CHECK(strcmp(got, want) == 0, "%s reached %s, expected %s", what, got, want);
}

/* allocate through one path, check charge, variant, release */
#define CHARGED(expr, expect_bytes, variant, what)                                                         \
    do {                                                                                                   \
        uint64_t before = used();                                                                          \
        CUresult rc_ = (expr);                                                                             \
        CHECK(rc_ == CUDA_SUCCESS, "%s failed: %d", what, (int)rc_);                                       \
        expect_variant(variant, what);                                                                     \
        CHECK(used() - before == (expect_bytes), "%s charged %llu bytes, expected %llu", what,              \
              (unsigned long long)(used() - before), (unsigned long long)(expect_bytes));                  \
    } while (0)

#define RELEASED(expr, base, variant, what)                                                                \
    do {                                                                                                   \
        CUresult rc_ = (expr);                                                                             \
        CHECK(rc_ == CUDA_SUCCESS, "%s failed: %d", what, (int)rc_);                                       \
        expect_variant(variant, what);                                                                     \
        CHECK(used() == (base), "%s left %llu bytes charged (expected %llu)", what,                         \
              (unsigned long long)used(), (unsigned long long)(base));                                     \
    } while (0)

/* over quota: refused with OUT_OF_MEMORY before the driver is called, nothing charged */
#define REFUSED(expr, what)                                                                                \
    do {                                                                                                   \
        uint64_t before = used();                                                                          \
        carveFakeCudaResetLastCall();                                                                      \
        CUresult rc_ = (expr);                                                                             \
        CHECK(rc_ == CUDA_ERROR_OUT_OF_MEMORY, "%s over quota returned %d, expected OUT_OF_MEMORY", what,  \
              (int)rc_);                                                                                   \
        CHECK(carveFakeCudaLastCall()[0] == '\0', "%s over quota reached the driver (%s)", what,            \
              carveFakeCudaLastCall());                                                                    \
        CHECK(used() == before, "%s over quota changed usage", what);                                      \
    } while (0)

static int cmd_paths(const char *mode)
{
    api_t a;
    setup();
    resolve(&a, mode);
    if (g_failures)
        return 1;
    uint64_t base = used(), over = limit() + 1;
    CHECK(limit() > 0, "paths needs a memory limit in the region");
    CUdeviceptr p;
    size_t pitch = 0;
    CUstream s = NULL;
    CUmemoryPool pool = NULL;
    CHECK(cuDeviceGetDefaultMemPool(&pool, 0) == CUDA_SUCCESS && pool, "cuDeviceGetDefaultMemPool failed");

    CHARGED(a.alloc(&p, 1 << 20), 1u << 20, "cuMemAlloc_v2", "cuMemAlloc");
    RELEASED(a.free(p), base, "cuMemFree_v2", "cuMemFree");
    REFUSED(a.alloc(&p, over), "cuMemAlloc");

    uint64_t b0 = used();
    CUresult rc = a.pitch(&p, &pitch, 1100, 100, 4);
    CHECK(rc == CUDA_SUCCESS, "cuMemAllocPitch failed: %d", (int)rc);
    expect_variant("cuMemAllocPitch_v2", "cuMemAllocPitch");
    CHECK(pitch >= 1100 && used() - b0 == (uint64_t)pitch * 100, "cuMemAllocPitch charged %llu for pitch %zu x 100",
          (unsigned long long)(used() - b0), pitch);
    RELEASED(a.free(p), base, "cuMemFree_v2", "cuMemFree(pitch)");
    REFUSED(a.pitch(&p, &pitch, over / 10 + 1, 10, 4), "cuMemAllocPitch");

    CHARGED(a.managed(&p, 3 << 20, CU_MEM_ATTACH_GLOBAL), 3u << 20, "cuMemAllocManaged", "cuMemAllocManaged");
    RELEASED(a.free(p), base, "cuMemFree_v2", "cuMemFree(managed)");
    REFUSED(a.managed(&p, over, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");

    CHARGED(a.async(&p, 5 << 20, s), 5u << 20, "cuMemAllocAsync", "cuMemAllocAsync");
    RELEASED(a.afree(p, s), base, "cuMemFreeAsync", "cuMemFreeAsync");
    REFUSED(a.async(&p, over, s), "cuMemAllocAsync");
    CHARGED(a.async_pt(&p, 5 << 20, s), 5u << 20, "cuMemAllocAsync_ptsz", "cuMemAllocAsync_ptsz");
    RELEASED(a.afree_pt(p, s), base, "cuMemFreeAsync_ptsz", "cuMemFreeAsync_ptsz");
    REFUSED(a.async_pt(&p, over, s), "cuMemAllocAsync_ptsz");

    CHARGED(a.pool(&p, 7 << 20, pool, s), 7u << 20, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync");
    RELEASED(a.afree(p, s), base, "cuMemFreeAsync", "cuMemFreeAsync(pool)");
    REFUSED(a.pool(&p, over, pool, s), "cuMemAllocFromPoolAsync");
    CHARGED(a.pool_pt(&p, 7 << 20, pool, s), 7u << 20, "cuMemAllocFromPoolAsync_ptsz", "cuMemAllocFromPoolAsync_ptsz");
    RELEASED(a.afree_pt(p, s), base, "cuMemFreeAsync_ptsz", "cuMemFreeAsync_ptsz(pool)");
    REFUSED(a.pool_pt(&p, over, pool, s), "cuMemAllocFromPoolAsync_ptsz");

    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h;
    CHARGED(a.create(&h, 4 << 20, &prop, 0), 4u << 20, "cuMemCreate", "cuMemCreate(device)");
    RELEASED(a.release(h), base, "cuMemRelease", "cuMemRelease");
    REFUSED(a.create(&h, ((over >> 21) + 1) << 21, &prop, 0), "cuMemCreate");
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST; /* NCCL's host buffers are not device memory */
    CHARGED(a.create(&h, 4 << 20, &prop, 0), 0u, "cuMemCreate", "cuMemCreate(host)");
    RELEASED(a.release(h), base, "cuMemRelease", "cuMemRelease(host)");

    CUarray arr;
    CUDA_ARRAY_DESCRIPTOR d2 = {.Width = 256, .Height = 128, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
    CHARGED(a.arr(&arr, &d2), 256u * 128 * 16, "cuArrayCreate_v2", "cuArrayCreate");
    RELEASED(a.arrd(arr), base, "cuArrayDestroy", "cuArrayDestroy");
    CUDA_ARRAY_DESCRIPTOR big2 = {.Width = 1u << 16, .Height = (size_t)(over >> 16) + 1,
                                  .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    REFUSED(a.arr(&arr, &big2), "cuArrayCreate");
    CUDA_ARRAY_DESCRIPTOR wraps = {.Width = (size_t)1 << 62, .Height = 8, .Format = CU_AD_FORMAT_FLOAT,
                                   .NumChannels = 4}; /* 2^69 bytes: 0 once wrapped to 64 bits */
    REFUSED(a.arr(&arr, &wraps), "cuArrayCreate(a size that wraps 64 bits)");
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = 64, .Height = 64, .Depth = 8, .Format = CU_AD_FORMAT_HALF,
                                  .NumChannels = 2};
    CHARGED(a.arr3(&arr, &d3), 64u * 64 * 8 * 4, "cuArray3DCreate_v2", "cuArray3DCreate");
    RELEASED(a.arrd(arr), base, "cuArrayDestroy", "cuArrayDestroy(3D)");
    CUDA_ARRAY3D_DESCRIPTOR dl = {.Width = 64, .Height = 64, .Depth = 6, .Format = CU_AD_FORMAT_FLOAT,
                                  .NumChannels = 1, .Flags = CUDA_ARRAY3D_LAYERED};
    CUmipmappedArray mip;
    CUDA_ARRAY3D_DESCRIPTOR dm = {.Width = 256, .Height = 256, .Format = CU_AD_FORMAT_UNSIGNED_INT8,
                                  .NumChannels = 4};
    CHARGED(a.mip(&mip, &dm, 3), 256u * 256 * 4 + 128 * 128 * 4 + 64 * 64 * 4, "cuMipmappedArrayCreate",
            "cuMipmappedArrayCreate");
    RELEASED(a.mipd(mip), base, "cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy");
    CHARGED(a.mip(&mip, &dl, 2), 64u * 64 * 6 * 4 + 32 * 32 * 6 * 4, "cuMipmappedArrayCreate",
            "cuMipmappedArrayCreate(layered)");
    RELEASED(a.mipd(mip), base, "cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy(layered)");
    CUDA_ARRAY3D_DESCRIPTOR bigm = {.Width = 1u << 16, .Height = (size_t)(over >> 18) + 1,
                                    .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 4};
    REFUSED(a.mip(&mip, &bigm, 1), "cuMipmappedArrayCreate");

    /* reports through the same resolution path */
    size_t fr = 0, tot = 0;
    CHECK(a.alloc(&p, 10 << 20) == CUDA_SUCCESS, "cuMemAlloc 10 MiB failed");
    CHECK(a.info(&fr, &tot) == CUDA_SUCCESS, "cuMemGetInfo failed");
    expect_variant("cuMemGetInfo_v2", "cuMemGetInfo");
    CHECK(tot == limit() && fr == limit() - used(), "cuMemGetInfo: free %zu total %zu, limit %llu used %llu", fr,
          tot, (unsigned long long)limit(), (unsigned long long)used());
    CHECK(a.total(&tot, 0) == CUDA_SUCCESS && tot == limit(), "cuDeviceTotalMem: %zu, limit %llu", tot,
          (unsigned long long)limit());
    a.free(p);
    if (strcmp(mode, "procaddr") == 0) {
        /* a variant newer than the limiter's table (a later CUDA) goes to the driver untouched, never to an
         * older hook whose arguments may differ */
        info_fn future = (info_fn)via_procaddr_at("cuMemGetInfo", 99000, 0);
        CHECK(future && future(&fr, &tot) == CUDA_SUCCESS, "cuMemGetInfo (future variant) failed");
        expect_variant("cuMemGetInfo_v99", "cuMemGetInfo (a variant newer than the limiter knows)");
    }

    /* launches: each path is intercepted (the hook counts it) and reaches the same variant */
    uint64_t (*launches)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "carveLimiterThreadLaunches");
    CHECK(launches != NULL, "the limiter is not loaded (carveLimiterThreadLaunches missing)");
    if (!launches)
        return 1;
    CUfunction f = carveFakeKernel(1000);
    CUlaunchConfig cfg = {.gridDimX = 4, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32, .blockDimY = 1,
                          .blockDimZ = 1};
    CUDA_LAUNCH_PARAMS lp = {.function = f, .gridDimX = 4, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
                             .blockDimY = 1, .blockDimZ = 1};
    CUgraph graph;
    CUgraphNode node;
    CUgraphExec exec;
    CUDA_KERNEL_NODE_PARAMS np = {.func = f, .gridDimX = 8, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
                                  .blockDimY = 1, .blockDimZ = 1};
    CHECK(cuGraphCreate(&graph, 0) == CUDA_SUCCESS && cuGraphAddKernelNode(&node, graph, NULL, 0, &np) == 0,
          "cannot build a graph");
    CHECK(a.inst(&exec, graph, 0) == CUDA_SUCCESS, "graph instantiation failed");
    /* the limiter counts the graph's blocks right after instantiating it: the last call proves it did */
    expect_variant("cuGraphKernelNodeGetParams_v2", "cuGraphInstantiate");
    /* CUDA 11's variant: the driver's five-argument function must be reached (it clears the error node) */
    CUgraphExec exec11 = NULL;
    CUgraphNode error_node = (CUgraphNode)(uintptr_t)0x5e5e;
    char log[16] = "unwritten";
    CHECK(a.inst11(&exec11, graph, &error_node, log, sizeof log) == CUDA_SUCCESS && exec11,
          "CUDA 11 graph instantiation failed");
    expect_variant("cuGraphKernelNodeGetParams_v2", "cuGraphInstantiate (CUDA 11)");
    CHECK(error_node == NULL && log[0] == '\0', "CUDA 11 cuGraphInstantiate reached a variant with other arguments");
#define LAUNCHED(expr, variant)                                                                            \
    do {                                                                                                   \
        uint64_t n0 = launches();                                                                          \
        CUresult rc_ = (expr);                                                                             \
        CHECK(rc_ == CUDA_SUCCESS, "%s failed: %d", variant, (int)rc_);                                    \
        expect_variant(variant, variant);                                                                  \
        CHECK(launches() == n0 + 1, "%s was not intercepted by the limiter", variant);                     \
    } while (0)
    LAUNCHED(a.launch(f, 4, 1, 1, 32, 1, 1, 0, s, NULL, NULL), "cuLaunchKernel");
    LAUNCHED(a.launch_pt(f, 4, 1, 1, 32, 1, 1, 0, s, NULL, NULL), "cuLaunchKernel_ptsz");
    LAUNCHED(a.coop(f, 4, 1, 1, 32, 1, 1, 0, s, NULL), "cuLaunchCooperativeKernel");
    LAUNCHED(a.coop_pt(f, 4, 1, 1, 32, 1, 1, 0, s, NULL), "cuLaunchCooperativeKernel_ptsz");
    LAUNCHED(a.ex(&cfg, f, NULL, NULL), "cuLaunchKernelEx");
    LAUNCHED(a.ex_pt(&cfg, f, NULL, NULL), "cuLaunchKernelEx_ptsz");
    if (a.multi)
        LAUNCHED(a.multi(&lp, 1, 0), "cuLaunchCooperativeKernelMultiDevice");
    LAUNCHED(a.glaunch(exec, s), "cuGraphLaunch");
    LAUNCHED(a.glaunch(exec11, s), "cuGraphLaunch");
    LAUNCHED(a.glaunch_pt(exec, s), "cuGraphLaunch_ptsz");
    CHECK(used() == base, "usage after the run: %llu, expected %llu", (unsigned long long)used(),
          (unsigned long long)base);
    printf("paths %s: %s\n", mode, g_failures ? "FAILED" : "ok");
    return g_failures ? 1 : 0;
}


int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "paths") == 0)
        return cmd_paths(argv[2]);
    fprintf(stderr, "usage: %s paths direct|dlsym|procaddr\n", argv[0]);
    return 2;
}

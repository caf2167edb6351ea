/*
 * limiter_client_cuda_nvml: a CUDA application for the limiter's tests, run under LD_PRELOAD of
 * libcarve-limiter.so against the fake libcuda.so.1 / libnvidia-ml.so.1.
 *
 *   paths MODE            every counted allocation path charges and releases exactly, refuses over quota
 *                         before reaching the driver, and reaches the same driver variant (legacy or
 *                         per-thread stream); every launch path is intercepted. MODE: direct|dlsym|procaddr
 *   info                  memory reports as JSON (cuMemGetInfo, cuDeviceTotalMem, NVML v1 and v2)
 *   alloc BYTES           one cuMemAlloc; prints the CUresult; exits holding it
 *   hold BYTES            allocate, print "ready", sleep until killed
 *   race N BYTES LIMIT    N allocations with random frees; fails if the driver's usage ever exceeds LIMIT
 *   launch SECS GRID NS [graph|coop|ex]
 *                         saturating launch loop; prints per-250 ms and overall occupancy of this process
 *   uuids                 the UUID of each CUDA ordinal (cuDeviceGetUuid), as JSON
 *   multi [hold] ORD:BYTES ...
 *                         one cuMemAlloc per argument on CUDA ordinal ORD; prints the results and each
 *                         ordinal's cuMemGetInfo total and cuDeviceTotalMem as JSON; `hold` keeps them
 * CLIENT_ORDINAL=<n> makes the commands above that use one device use ordinal n (default 0).
 * Exit status 0 = every check held; failures print "FAIL: ..." on stderr.
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
#include "common/fakegpu.h"

#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

const char *carveFakeCudaLastCall(void);
void carveFakeCudaResetLastCall(void);
CUfunction carveFakeKernel(uint64_t ns_per_wave);

static int g_failures;
#define CHECK(cond, ...)                                                                                   \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fprintf(stderr, "FAIL: " __VA_ARGS__);                                                         \
            fputc('\n', stderr);                                                                           \
            g_failures++;                                                                                  \
        }                                                                                                  \
    } while (0)

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
    glaunch_fn glaunch, glaunch_pt;
} api_t;

static void *via_procaddr(const char *base, int per_thread)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    cuuint64_t flags = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    /* alternate the two entry points so both are exercised */
    static int turn;
    CUresult rc = (turn++ & 1) ? cuGetProcAddress(base, &fn, 13000, flags)
                               : cuGetProcAddress_v2(base, &fn, 13000, flags, &st);
    CHECK(rc == CUDA_SUCCESS && fn, "cuGetProcAddress(%s, pt=%d) failed: %d", base, per_thread, (int)rc);
    return fn;
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
                     cuGraphInstantiateWithFlags, cuGraphLaunch, NULL};
        /* the per-thread variants have no declarations without CUDA_API_PER_THREAD_DEFAULT_STREAM: take the
         * linked symbols by name from the global scope, which is what a direct call binds to */
        a->async_pt = (async_fn)dlsym(RTLD_DEFAULT, "cuMemAllocAsync_ptsz");
        a->pool_pt = (pool_fn)dlsym(RTLD_DEFAULT, "cuMemAllocFromPoolAsync_ptsz");
        a->afree_pt = (afree_fn)dlsym(RTLD_DEFAULT, "cuMemFreeAsync_ptsz");
        a->launch_pt = (launch_fn)dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz");
        a->coop_pt = (coop_fn)dlsym(RTLD_DEFAULT, "cuLaunchCooperativeKernel_ptsz");
        a->ex_pt = (ex_fn)dlsym(RTLD_DEFAULT, "cuLaunchKernelEx_ptsz");
        a->glaunch_pt = (glaunch_fn)dlsym(RTLD_DEFAULT, "cuGraphLaunch_ptsz");
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
        D(glaunch, "cuGraphLaunch"); D(glaunch_pt, "cuGraphLaunch_ptsz");
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
#undef P
    }
}

/* --- the region, read-only, as the plugin would see it ---------------------------------------------- */
static const carve_region_t *g_region;

static void map_region(void)
{
    const char *path = getenv("CARVE_REGION");
    int fd = path ? open(path, O_RDONLY) : -1;
    void *p = fd >= 0 ? mmap(NULL, sizeof(carve_region_t), PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (p != MAP_FAILED)
        g_region = p;
}

static uint64_t used(void)
{
    return g_region ? __atomic_load_n(&g_region->devices[0].memory_used, __ATOMIC_ACQUIRE) : 0;
}

static uint64_t limit(void)
{
    return g_region ? g_region->devices[0].memory_limit : 0;
}

static void setup(void)
{
    CUdevice dev;
    CUcontext ctx;
    const char *ordinal = getenv("CLIENT_ORDINAL");
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, ordinal ? atoi(ordinal) : 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "FAIL: cannot set up a context on the fake GPU\n");
        exit(2);
    }
    map_region();
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
    CUmemoryPool pool = (CUmemoryPool)(uintptr_t)0x1000;

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
    LAUNCHED(a.glaunch_pt(exec, s), "cuGraphLaunch_ptsz");
    CHECK(used() == base, "usage after the run: %llu, expected %llu", (unsigned long long)used(),
          (unsigned long long)base);
    printf("paths %s: %s\n", mode, g_failures ? "FAILED" : "ok");
    return g_failures ? 1 : 0;
}

static int cmd_info(void)
{
    setup();
    size_t fr = 0, tot = 0, dtot = 0;
    CUresult r1 = cuMemGetInfo_v2(&fr, &tot);
    CUresult r2 = cuDeviceTotalMem_v2(&dtot, 0);
    nvmlDevice_t dev;
    nvmlMemory_t m1 = {0};
    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    nvmlReturn_t n0 = nvmlInit_v2();
    nvmlReturn_t n1 = n0 == NVML_SUCCESS ? nvmlDeviceGetHandleByIndex_v2(0, &dev) : n0;
    nvmlReturn_t n2 = n1 == NVML_SUCCESS ? nvmlDeviceGetMemoryInfo(dev, &m1) : n1;
    nvmlReturn_t n3 = n1 == NVML_SUCCESS ? nvmlDeviceGetMemoryInfo_v2(dev, &m2) : n1;
    printf("{\"cu_rc\": %d, \"free\": %zu, \"total\": %zu, \"device_total_rc\": %d, \"device_total\": %zu, "
           "\"nvml_rc\": %d, \"nvml_total\": %llu, \"nvml_used\": %llu, \"nvml_free\": %llu, "
           "\"nvml2_rc\": %d, \"nvml2_total\": %llu, \"nvml2_used\": %llu, \"nvml2_free\": %llu, "
           "\"region_used\": %llu}\n",
           (int)r1, fr, tot, (int)r2, dtot, (int)n2, m1.total, m1.used, m1.free, (int)n3, m2.total, m2.used,
           m2.free, (unsigned long long)used());
    return 0;
}

static int cmd_alloc(uint64_t bytes, int hold)
{
    setup();
    CUdeviceptr p;
    CUresult rc = cuMemAlloc_v2(&p, bytes);
    printf(hold ? "ready %d\n" : "%d\n", (int)rc);
    fflush(stdout);
    while (hold)
        pause();
    return 0;
}

/* CLIENT_BARRIER=<dir>: announce `<dir>/<what>-<pid>`, then wait for `<dir>/<until>` (60 s at most).
 * Racers meet twice, so that all of them allocate at the same time and hold their memory until every one
 * has finished: otherwise on a busy 2-core machine one racer can finish before the next one starts. */
static void barrier(const char *what, const char *until)
{
    const char *dir = getenv("CLIENT_BARRIER");
    if (!dir || !*dir)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s-%d", dir, what, (int)getpid());
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    CHECK(fd >= 0, "cannot create %s", path);
    if (fd >= 0)
        close(fd);
    snprintf(path, sizeof path, "%s/%s", dir, until);
    struct timespec tick = {0, 1000000};
    for (int i = 0; i < 60000 && access(path, F_OK) != 0; i++)
        nanosleep(&tick, NULL);
    CHECK(access(path, F_OK) == 0, "barrier %s never opened", path);
}

static int cmd_race(int n, uint64_t bytes, uint64_t lim)
{
    setup();
    barrier("ready", "go");
    enum { KEEP = 16 };
    CUdeviceptr live[KEEP] = {0};
    unsigned seed = (unsigned)getpid();
    int ok = 0, refused = 0;
    for (int i = 0; i < n; i++) {
        int k = rand_r(&seed) % KEEP;
        if (live[k]) {
            cuMemFree_v2(live[k]);
            live[k] = 0;
        }
        CUresult rc = cuMemAlloc_v2(&live[k], bytes);
        if (rc == CUDA_SUCCESS) {
            ok++;
            uint64_t real = fake_mem_used(0); /* what the fake driver holds for all processes */
            CHECK(real <= lim, "driver usage %llu exceeds the quota %llu", (unsigned long long)real,
                  (unsigned long long)lim);
        } else {
            live[k] = 0;
            refused++;
            CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY, "allocation failed with %d", (int)rc);
        }
    }
    barrier("finished", "done");
    for (int k = 0; k < KEEP; k++)
        if (live[k])
            cuMemFree_v2(live[k]);
    printf("{\"ok\": %d, \"refused\": %d}\n", ok, refused);
    return g_failures ? 1 : 0;
}

static uint64_t now_ns(void)
{
    return fake_now_ns();
}

static int cmd_launch(double secs, unsigned grid, uint64_t ns, const char *how)
{
    setup();
    CUfunction f = carveFakeKernel(ns);
    const fake_gpu_t *gpus;
    unsigned count;
    fake_topology(&gpus, &count, NULL);
    unsigned gpu = 0;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd && *cvd)
        gpu = (unsigned)atoi(cvd);
    CUgraphExec exec = NULL;
    if (how && strcmp(how, "graph") == 0) {
        CUgraph g;
        CUgraphNode node;
        CUDA_KERNEL_NODE_PARAMS np = {.func = f, .gridDimX = grid / 2 ? grid / 2 : 1, .gridDimY = 1, .gridDimZ = 1,
                                      .blockDimX = 128, .blockDimY = 1, .blockDimZ = 1};
        cuGraphCreate(&g, 0);
        cuGraphAddKernelNode(&node, g, NULL, 0, &np);
        cuGraphAddKernelNode(&node, g, NULL, 0, &np);
        cuGraphInstantiateWithFlags(&exec, g, 0);
    }
    CUlaunchConfig cfg = {.gridDimX = grid, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128, .blockDimY = 1,
                          .blockDimZ = 1};
    uint64_t start = now_ns(), end = start + (uint64_t)(secs * 1e9), window = start;
    printf("{\"windows\": [");
    int first = 1;
    while (now_ns() < end) {
        if (exec)
            cuGraphLaunch(exec, NULL);
        else if (how && strcmp(how, "coop") == 0)
            cuLaunchCooperativeKernel(f, grid, 1, 1, 128, 1, 1, 0, NULL, NULL);
        else if (how && strcmp(how, "ex") == 0)
            cuLaunchKernelEx(&cfg, f, NULL, NULL);
        else
            cuLaunchKernel(f, grid, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
        uint64_t t = now_ns();
        if (t - window >= 250000000ull) {
            printf("%s%u", first ? "" : ", ", fake_utilization(gpu, getpid(), window));
            fflush(stdout);
            first = 0;
            window = t;
        }
    }
    cuCtxSynchronize();
    printf("], \"overall\": %u}\n", fake_utilization(gpu, getpid(), start));
    return 0;
}

static int cmd_uuids(void)
{
    int n = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS)
        return 2;
    printf("[");
    for (int i = 0; i < n; i++) {
        CUuuid u;
        CHECK(cuDeviceGetUuid_v2(&u, i) == CUDA_SUCCESS, "cuDeviceGetUuid_v2(%d) failed", i);
        const unsigned char *b = (const unsigned char *)u.bytes;
        printf("%s\"GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\"", i ? ", " : "",
               b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
    printf("]\n");
    return g_failures ? 1 : 0;
}

/* Allocations on several ordinals, each in its device's primary context. */
static int cmd_multi(int argc, char **argv)
{
    int hold = argc > 0 && strcmp(argv[0], "hold") == 0;
    int n = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS)
        return 2;
    printf("{\"rc\": [");
    for (int i = hold; i < argc; i++) {
        int ord = atoi(argv[i]);
        const char *colon = strchr(argv[i], ':');
        CUcontext ctx;
        CUdeviceptr p;
        CUresult rc = cuDevicePrimaryCtxRetain(&ctx, ord);
        if (rc == CUDA_SUCCESS)
            rc = cuCtxSetCurrent(ctx);
        if (rc == CUDA_SUCCESS)
            rc = cuMemAlloc_v2(&p, colon ? strtoull(colon + 1, NULL, 10) : 0);
        printf("%s%d", i > hold ? ", " : "", (int)rc);
    }
    printf("], \"total\": [");
    for (int o = 0; o < n; o++) {
        CUcontext ctx;
        size_t fr = 0, tot = 0;
        cuDevicePrimaryCtxRetain(&ctx, o);
        cuCtxSetCurrent(ctx);
        cuMemGetInfo_v2(&fr, &tot);
        printf("%s%zu", o ? ", " : "", tot);
    }
    printf("], \"device_total\": [");
    for (int o = 0; o < n; o++) {
        size_t tot = 0;
        cuDeviceTotalMem_v2(&tot, o);
        printf("%s%zu", o ? ", " : "", tot);
    }
    printf("]}\n");
    fflush(stdout);
    while (hold)
        pause();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "uuids") == 0)
        return cmd_uuids();
    if (argc >= 2 && strcmp(argv[1], "multi") == 0)
        return cmd_multi(argc - 2, argv + 2);
    if (argc >= 3 && strcmp(argv[1], "paths") == 0)
        return cmd_paths(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "info") == 0)
        return cmd_info();
    if (argc >= 3 && strcmp(argv[1], "alloc") == 0)
        return cmd_alloc(strtoull(argv[2], NULL, 10), 0);
    if (argc >= 3 && strcmp(argv[1], "hold") == 0)
        return cmd_alloc(strtoull(argv[2], NULL, 10), 1);
    if (argc >= 5 && strcmp(argv[1], "race") == 0)
        return cmd_race(atoi(argv[2]), strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10));
    if (argc >= 5 && strcmp(argv[1], "launch") == 0)
        return cmd_launch(atof(argv[2]), (unsigned)atoi(argv[3]), strtoull(argv[4], NULL, 10),
                          argc >= 6 ? argv[5] : NULL);
    fprintf(stderr, "usage: see the header of limiter_client_cuda_nvml.c\n");
    return 2;
}

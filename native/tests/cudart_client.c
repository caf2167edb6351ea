/*
 * cudart_client: a plain CUDA runtime program (what most CUDA applications are), for the framework tests
 * (tests/frameworks/) and the limiter benchmark. It dlopens the libcudart.so.* given as its first argument,
 * so one binary drives cudart 12 and 13, and reaches the driver only through the runtime: every driver call
 * is resolved by cudart's own cuGetProcAddress, and the VMM calls through cudaGetDriverEntryPointByVersion,
 * as PyTorch's allocator does. Prints one JSON line.
 *
 *   cudart_client LIBCUDART info              device count, attributes, memory reports through each path
 *   cudart_client LIBCUDART fill CHUNK        cudaMalloc CHUNK bytes until it fails, then free
 *   cudart_client LIBCUDART fill-async CHUNK  the same with cudaMallocAsync on the default pool, then trim
 *   cudart_client LIBCUDART vmm CHUNK         reserve 4x the memory, cuMemCreate+cuMemMap CHUNK until it fails
 *   cudart_client LIBCUDART init              how long the first runtime call and the context take (ns)
 *   cudart_client LIBCUDART bench N           ns per alloc+free pair, cudaMemGetInfo, async pair, launch
 *   cudart_client LIBCUDART launch SECS GRID  a saturating launch loop; the SM occupancy the fake GPU measured
 *   cudart_client LIBCUDART graph SECS GRID   the same, as a graph of 2 kernels captured from a stream
 *                                             (cudaStreamBeginCapture) and replayed with cudaGraphLaunch
 * Launches need a kernel, and without nvcc this program has no device code: on the fake GPUs it takes one
 * from the fake driver (carveFakeKernel) and launches it with the cuLaunchKernel that the runtime resolved.
 * Exit status: 0 when the run completed (the answers are in the JSON), 2 when the runtime did not start.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#undef cuMemGetInfo
#undef cuDeviceTotalMem

typedef int rt_err; /* cudaError_t */
typedef void *rt_stream;

static struct {
    rt_err (*GetDeviceCount)(int *);
    rt_err (*DeviceGetAttribute)(int *, int, int);
    rt_err (*SetDevice)(int);
    rt_err (*Free)(void *);
    rt_err (*Malloc)(void **, size_t);
    rt_err (*MemGetInfo)(size_t *, size_t *);
    rt_err (*RuntimeGetVersion)(int *);
    rt_err (*DriverGetVersion)(int *);
    rt_err (*MallocAsync)(void **, size_t, rt_stream);
    rt_err (*FreeAsync)(void *, rt_stream);
    rt_err (*StreamSynchronize)(rt_stream);
    rt_err (*DeviceGetDefaultMemPool)(void **, int);
    rt_err (*MemPoolTrimTo)(void *, size_t);
    rt_err (*GetDriverEntryPointByVersion)(const char *, void **, unsigned, unsigned long long, int *);
    const char *(*GetErrorName)(rt_err);
    rt_err (*StreamCreate)(rt_stream *);
    rt_err (*StreamBeginCapture)(rt_stream, int);
    rt_err (*StreamEndCapture)(rt_stream, void **);
    rt_err (*GraphInstantiate)(void **, void *, unsigned long long);
    rt_err (*GraphLaunch)(void *, rt_stream);
} rt;

enum { ATTR_SMS = 16, ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76 }; /* cudaDeviceAttr */

static void load(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("{\"error\": \"dlopen\", \"detail\": \"%s\"}\n", dlerror());
        exit(2);
    }
#define SYM(name)                                                                                          \
    do {                                                                                                   \
        *(void **)&rt.name = dlsym(h, "cuda" #name);                                                       \
        if (!rt.name) {                                                                                    \
            printf("{\"error\": \"missing cuda" #name "\"}\n");                                            \
            exit(2);                                                                                       \
        }                                                                                                  \
    } while (0)
    SYM(GetDeviceCount); SYM(DeviceGetAttribute); SYM(SetDevice); SYM(Free); SYM(Malloc); SYM(MemGetInfo);
    SYM(RuntimeGetVersion); SYM(DriverGetVersion); SYM(MallocAsync); SYM(FreeAsync); SYM(StreamSynchronize);
    SYM(DeviceGetDefaultMemPool); SYM(MemPoolTrimTo); SYM(GetDriverEntryPointByVersion); SYM(GetErrorName);
    SYM(StreamCreate); SYM(StreamBeginCapture); SYM(StreamEndCapture); SYM(GraphInstantiate); SYM(GraphLaunch);
#undef SYM
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A driver entry point the way PyTorch gets its VMM functions: through the runtime. */
static void *driver_fn(const char *name, unsigned version)
{
    void *fn = NULL;
    int status = 0;
    rt_err e = rt.GetDriverEntryPointByVersion(name, &fn, version, 0, &status);
    return e == 0 && status == 0 ? fn : NULL;
}

static void start(void)
{
    int n = 0;
    rt_err e = rt.GetDeviceCount(&n);
    if (e != 0 || n < 1) {
        printf("{\"error\": \"%s\", \"count\": %d}\n", rt.GetErrorName(e), n);
        exit(2);
    }
    e = rt.SetDevice(0);
    if (e == 0)
        e = rt.Free(NULL); /* creates the primary context */
    if (e != 0) {
        printf("{\"error\": \"%s\", \"count\": %d}\n", rt.GetErrorName(e), n);
        exit(2);
    }
}

static void mem(size_t *free_b, size_t *total)
{
    *free_b = *total = 0;
    rt.MemGetInfo(free_b, total);
}

static int cmd_info(void)
{
    int n = 0, rv = 0, dv = 0;
    rt.RuntimeGetVersion(&rv);
    rt.DriverGetVersion(&dv);
    start();
    rt.GetDeviceCount(&n);
    CUresult (*get_info)(size_t *, size_t *) = driver_fn("cuMemGetInfo", 3020);
    CUresult (*total_mem)(size_t *, CUdevice) = driver_fn("cuDeviceTotalMem", 3020);
    printf("{\"runtime\": %d, \"driver\": %d, \"count\": %d, \"devices\": [", rv, dv, n);
    for (int d = 0; d < n; d++) {
        int sms = 0, major = 0, minor = 0;
        size_t free_b, total, dfree = 0, dtotal = 0, tm = 0;
        rt.SetDevice(d);
        rt.DeviceGetAttribute(&sms, ATTR_SMS, d);
        rt.DeviceGetAttribute(&major, ATTR_CC_MAJOR, d);
        rt.DeviceGetAttribute(&minor, ATTR_CC_MINOR, d);
        mem(&free_b, &total);
        if (get_info)
            get_info(&dfree, &dtotal);
        if (total_mem)
            total_mem(&tm, d);
        printf("%s{\"sms\": %d, \"cc\": \"%d.%d\", \"total\": %zu, \"free\": %zu, \"driver_total\": %zu, "
               "\"driver_free\": %zu, \"device_total_mem\": %zu}",
               d ? ", " : "", sms, major, minor, total, free_b, dtotal, dfree, tm);
    }
    printf("]}\n");
    return 0;
}

#define MAX_CHUNKS (1 << 16)
static void *g_ptrs[MAX_CHUNKS];

static int cmd_fill(size_t chunk, int async)
{
    start();
    size_t free0, total, free_full, free_after;
    mem(&free0, &total);
    unsigned n = 0;
    rt_err e = 0;
    while (n < MAX_CHUNKS) {
        e = async ? rt.MallocAsync(&g_ptrs[n], chunk, NULL) : rt.Malloc(&g_ptrs[n], chunk);
        if (e == 0 && async)
            e = rt.StreamSynchronize(NULL);
        if (e != 0)
            break;
        n++;
    }
    mem(&free_full, &total);
    for (unsigned i = 0; i < n; i++)
        async ? rt.FreeAsync(g_ptrs[i], NULL) : rt.Free(g_ptrs[i]);
    rt.StreamSynchronize(NULL);
    rt_err trim = 0;
    if (async) {
        void *pool = NULL;
        trim = rt.DeviceGetDefaultMemPool(&pool, 0);
        if (trim == 0)
            trim = rt.MemPoolTrimTo(pool, 0);
    }
    mem(&free_after, &total);
    /* Everything freed: the whole quota is there again. */
    void *again = NULL;
    rt_err e2 = async ? rt.MallocAsync(&again, chunk * (n ? n : 1), NULL) : rt.Malloc(&again, chunk * (n ? n : 1));
    printf("{\"chunk\": %zu, \"chunks\": %u, \"allocated\": %zu, \"error\": \"%s\", \"total\": %zu, \"free_start\": %zu, "
           "\"free_full\": %zu, \"free_after\": %zu, \"trim\": \"%s\", \"realloc\": \"%s\"}\n",
           chunk, n, (size_t)n * chunk, rt.GetErrorName(e), total, free0, free_full, free_after,
           rt.GetErrorName(trim), rt.GetErrorName(e2));
    return 0;
}

static int cmd_vmm(size_t chunk)
{
    start();
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags) =
        driver_fn("cuMemGetAllocationGranularity", 10020);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) =
        driver_fn("cuMemAddressReserve", 10020);
    CUresult (*addr_free)(CUdeviceptr, size_t) = driver_fn("cuMemAddressFree", 10020);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) =
        driver_fn("cuMemCreate", 10020);
    CUresult (*release)(CUmemGenericAllocationHandle) = driver_fn("cuMemRelease", 10020);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) =
        driver_fn("cuMemMap", 10020);
    CUresult (*unmap)(CUdeviceptr, size_t) = driver_fn("cuMemUnmap", 10020);
    if (!granularity || !reserve || !addr_free || !create || !release || !map || !unmap) {
        printf("{\"error\": \"a VMM entry point did not resolve through cudaGetDriverEntryPointByVersion\"}\n");
        return 2;
    }
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran = 0, free0, total, free_reserved, free_full, free_after;
    CUresult g = granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (g != CUDA_SUCCESS || !gran) {
        printf("{\"error\": \"cuMemGetAllocationGranularity %d\"}\n", g);
        return 2;
    }
    chunk = (chunk + gran - 1) / gran * gran;
    mem(&free0, &total);
    size_t span = 4 * total / gran * gran;
    CUdeviceptr va = 0;
    CUresult r = reserve(&va, span, 0, 0, 0);
    mem(&free_reserved, &total);
    static CUmemGenericAllocationHandle handles[MAX_CHUNKS];
    unsigned n = 0;
    CUresult c = CUDA_SUCCESS, m = CUDA_SUCCESS;
    while (r == CUDA_SUCCESS && n < MAX_CHUNKS && (size_t)(n + 1) * chunk <= span) {
        c = create(&handles[n], chunk, &prop, 0);
        if (c != CUDA_SUCCESS)
            break;
        m = map(va + (CUdeviceptr)n * chunk, chunk, 0, handles[n], 0);
        n++;
        if (m != CUDA_SUCCESS)
            break;
    }
    mem(&free_full, &total);
    for (unsigned i = 0; i < n; i++) {
        unmap(va + (CUdeviceptr)i * chunk, chunk);
        release(handles[i]);
    }
    if (r == CUDA_SUCCESS)
        addr_free(va, span);
    mem(&free_after, &total);
    printf("{\"granularity\": %zu, \"chunk\": %zu, \"reserve\": %d, \"reserved\": %zu, \"chunks\": %u, "
           "\"allocated\": %zu, \"create\": %d, \"map\": %d, \"total\": %zu, \"free_start\": %zu, "
           "\"free_reserved\": %zu, \"free_full\": %zu, \"free_after\": %zu}\n",
           gran, chunk, r, span, n, (size_t)n * chunk, c, m, total, free0, free_reserved, free_full, free_after);
    return 0;
}

static int cmd_init(void)
{
    int n = 0;
    uint64_t t0 = now_ns();
    rt_err e = rt.GetDeviceCount(&n);
    uint64_t t1 = now_ns();
    if (e == 0)
        e = rt.Free(NULL);
    uint64_t t2 = now_ns();
    printf("{\"error\": \"%s\", \"runtime_init_ns\": %llu, \"context_ns\": %llu}\n", rt.GetErrorName(e),
           (unsigned long long)(t1 - t0), (unsigned long long)(t2 - t1));
    return e == 0 ? 0 : 2;
}

/* The fake driver's kernel factory and clock (native/fakes): NULL on a real driver. */
static void *fake_fn(const char *name)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h ? dlsym(h, name) : NULL;
}

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);

static launch_fn fake_kernel(CUfunction *f, uint64_t ns_per_wave)
{
    CUfunction (*make)(uint64_t) = (CUfunction(*)(uint64_t))fake_fn("carveFakeKernel");
    launch_fn launch = (launch_fn)driver_fn("cuLaunchKernel", 4000);
    if (!make || !launch)
        return NULL;
    *f = make(ns_per_wave);
    return launch;
}

static int cmd_launch(double secs, unsigned grid, int as_graph)
{
    start();
    CUfunction f;
    launch_fn launch = fake_kernel(&f, 1000000);
    uint64_t (*fake_now)(void) = (uint64_t(*)(void))fake_fn("fake_now_ns");
    unsigned (*util)(unsigned, int, uint64_t) = (unsigned (*)(unsigned, int, uint64_t))fake_fn("fake_utilization");
    if (!launch || !fake_now || !util) {
        printf("{\"error\": \"launch needs the fake driver's carveFakeKernel (no device code here)\"}\n");
        return 2;
    }
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    unsigned gpu = cvd && *cvd ? (unsigned)atoi(cvd) : 0;
    rt_stream stream = NULL;
    void *graph = NULL, *exec = NULL;
    CUresult rc = CUDA_SUCCESS;
    if (as_graph) {
        rt_err e = rt.StreamCreate(&stream);
        if (e == 0)
            e = rt.StreamBeginCapture(stream, 0 /* cudaStreamCaptureModeGlobal */);
        for (int k = 0; e == 0 && k < 2; k++)
            e = launch(f, grid / 2 ? grid / 2 : 1, 1, 1, 128, 1, 1, 0, (CUstream)stream, NULL, NULL) ? 999 : 0;
        if (e == 0)
            e = rt.StreamEndCapture(stream, &graph);
        if (e == 0)
            e = rt.GraphInstantiate(&exec, graph, 0);
        if (e != 0) {
            printf("{\"error\": \"capturing a graph: %s\"}\n", e == 999 ? "cuLaunchKernel" : rt.GetErrorName(e));
            return 2;
        }
    }
    uint64_t since = fake_now(), t0 = now_ns(), end = t0 + (uint64_t)(secs * 1e9), n = 0;
    while (rc == CUDA_SUCCESS && now_ns() < end) {
        rc = as_graph ? (CUresult)rt.GraphLaunch(exec, stream) : launch(f, grid, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
        n++;
    }
    if (stream)
        rt.StreamSynchronize(stream);
    rt.StreamSynchronize(NULL);
    printf("{\"launch\": %d, \"steps\": %llu, \"seconds\": %.3f, \"occupancy\": %u}\n", rc,
           (unsigned long long)n, (double)(now_ns() - t0) / 1e9, util(gpu, getpid(), since));
    return rc == CUDA_SUCCESS ? 0 : 2;
}

static int cmd_bench(long n)
{
    start();
    void *p;
    size_t f, t;
    for (int i = 0; i < 1000; i++) { /* warm: the runtime's and the limiter's first-call paths */
        rt.Malloc(&p, 4096);
        rt.Free(p);
        rt.MemGetInfo(&f, &t);
    }
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++) {
        rt.Malloc(&p, 4096);
        rt.Free(p);
    }
    uint64_t t1 = now_ns();
    for (long i = 0; i < n; i++)
        rt.MemGetInfo(&f, &t);
    uint64_t t2 = now_ns();
    for (long i = 0; i < n; i++) {
        rt.MallocAsync(&p, 4096, NULL);
        rt.FreeAsync(p, NULL);
    }
    rt.StreamSynchronize(NULL);
    uint64_t t3 = now_ns();
    CUfunction k;
    launch_fn launch = fake_kernel(&k, 1); /* 1 ns waves: the GPU's queue never holds the loop back */
    double per_launch = -1;
    if (launch) {
        for (long i = 0; i < n; i++)
            launch(k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
        per_launch = (double)(now_ns() - t3) / n;
    }
    printf("{\"alloc_free_pair\": %.1f, \"mem_get_info\": %.1f, \"async_alloc_free_pair\": %.1f, "
           "\"launch\": %.1f}\n", (double)(t1 - t0) / n, (double)(t2 - t1) / n, (double)(t3 - t2) / n, per_launch);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIBCUDART info|fill CHUNK|fill-async CHUNK|vmm CHUNK|init|bench N\n", argv[0]);
        return 1;
    }
    load(argv[1]);
    const char *cmd = argv[2];
    if (strcmp(cmd, "info") == 0)
        return cmd_info();
    if (strcmp(cmd, "init") == 0)
        return cmd_init();
    if (argc >= 4 && strcmp(cmd, "fill") == 0)
        return cmd_fill(strtoull(argv[3], NULL, 10), 0);
    if (argc >= 4 && strcmp(cmd, "fill-async") == 0)
        return cmd_fill(strtoull(argv[3], NULL, 10), 1);
    if (argc >= 4 && strcmp(cmd, "vmm") == 0)
        return cmd_vmm(strtoull(argv[3], NULL, 10));
    if (argc >= 5 && strcmp(cmd, "launch") == 0)
        return cmd_launch(atof(argv[3]), (unsigned)atoi(argv[4]), 0);
    if (argc >= 5 && strcmp(cmd, "graph") == 0)
        return cmd_launch(atof(argv[3]), (unsigned)atoi(argv[4]), 1);
    if (argc >= 4 && strcmp(cmd, "bench") == 0)
        return cmd_bench(atol(argv[3]));
    fprintf(stderr, "unknown command %s\n", cmd);
    return 1;
}

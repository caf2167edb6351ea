/*
 * limiter_client_cuda_nvml: a CUDA application for the limiter's tests, run under LD_PRELOAD of
 * libcarve-limiter.so against the fake libcuda.so.1 / libnvidia-ml.so.1.
 *
 *   info                  memory reports as JSON (cuMemGetInfo, cuDeviceTotalMem, NVML v1 and v2)
 *   nvml2                 NVML's v2 memory report alone, in a process that makes no other NVML or CUDA call
 *   alloc BYTES           one cuMemAlloc; prints the CUresult; exits holding it
 *   hold BYTES            allocate, print "ready", sleep until killed
 *   race N BYTES LIMIT    N allocations with random frees; fails if the driver's usage ever exceeds LIMIT
 *   launch SECS GRID NS [graph|coop|ex]
 *                         saturating launch loop; prints per-250 ms and overall occupancy of this process
 *   uuids                 the UUID of each CUDA ordinal (cuDeviceGetUuid), as JSON
 *   multi [hold] ORD:BYTES ...
 *                         one cuMemAlloc per argument on CUDA ordinal ORD; prints the results and each
 *                         ordinal's cuMemGetInfo total and cuDeviceTotalMem as JSON; `hold` keeps them
 *   fork PARENT CHILD exit|kill|closeall|hold
 *                         the parent allocates PARENT bytes and forks; the child allocates CHILD bytes, prints
 *                         its result and the region's slots, then exits (atexit handlers run) or SIGKILLs
 *                         itself; the parent then allocates CHILD bytes again and prints the same. `hold`: the
 *                         child keeps its memory and waits (2 minutes at most), and so does the parent
 *   relimit BYTES         allocate BYTES (freed when granted) and print the result; then for each line read on
 *                         stdin (the test has rewritten the claim's limits file), launch one block and wait
 *                         for the feedback thread's next tick to count it (its limits refresh comes first in
 *                         a tick), allocate again and print the result and cuMemGetInfo's total, as JSON;
 *                         a line `closeall` first closes every descriptor past 2, as a daemon does, and opens a
 *                         pipe of its own (it takes the lowest numbers); the JSON then says whether both of the
 *                         pipe's descriptors are still open after the tick ("mine": 1)
 *   exitfree BYTES [N] [again]  allocate BYTES (N times: N buffers of BYTES / N) and exit, freeing them in an
 *                         atexit handler registered before the first CUDA call (so it runs after the limiter's
 *                         own: a C++ static destructor's order); `again`: that handler then allocates BYTES once
 *                         more and prints the result
 *   exitalloc BYTES [O]   allocate BYTES and free them, then exit; an atexit handler registered before the first
 *                         CUDA call (it runs after the limiter's own) allocates BYTES and keeps them, then
 *                         allocates and frees BYTES once more, printing each result; with ordinal O, it then
 *                         allocates BYTES on that device too (its primary context) and keeps them
 *   exitgraph N [LIVE]    instantiate a graph of one 8-block kernel and launch it N times, then exit; an atexit
 *                         handler registered before the first CUDA call (it runs after the limiter's own)
 *                         launches it N times more; each prints the blocks the limiter charged device 0 for
 *                         its N launches. LIVE: first allocate LIVE buffers of 4 KiB and keep them, so that past
 *                         the limiter's table the graph's record is on its overflow list
 * CLIENT_ORDINAL=<n> makes the commands above that use one device use ordinal n (default 0).
 * Exit status 0 = every check held; failures print "FAIL: ..." on stderr. Every entry point called all three
 * ways (direct, dlsym, cuGetProcAddress) is limiter_paths_cuda_nvml's job.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <nvml.h>

#include "carve_region.h"
#include "client_common.h"
#include "common/fakegpu.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

CUfunction carveFakeKernel(uint64_t ns_per_wave);






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

static int cmd_nvml2(void)
{
    nvmlDevice_t dev;
    nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
    nvmlReturn_t rc = nvmlInit_v2();
    if (rc == NVML_SUCCESS)
        rc = nvmlDeviceGetHandleByIndex_v2(0, &dev);
    if (rc == NVML_SUCCESS)
        rc = nvmlDeviceGetMemoryInfo_v2(dev, &m);
    printf("{\"rc\": %d, \"total\": %llu, \"used\": %llu, \"free\": %llu, \"reserved\": %llu}\n", (int)rc, m.total,
           m.used, m.free, m.reserved);
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

/* The region's live slots, as the plugin sees them: [[pid, bytes on device 0], ...]. */
static void print_slots(const char *who, CUresult rc)
{
    printf("{\"who\": \"%s\", \"pid\": %d, \"rc\": %d, \"used\": %llu, \"slots\": [", who, (int)getpid(),
           (int)rc, (unsigned long long)used());
    int first = 1;
    for (unsigned i = 0; g_region && i < g_region->max_procs && i < CARVE_MAX_PROCS; i++) {
        const carve_region_proc_t *p = &g_region->procs[i];
        int32_t pid = __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE);
        if (pid == 0)
            continue;
        printf("%s[%d, %llu]", first ? "" : ", ", (int)pid, (unsigned long long)p->used[0]);
        first = 0;
    }
    printf("]}\n");
    fflush(stdout);
}

static int cmd_fork(uint64_t parent_bytes, uint64_t child_bytes, const char *end)
{
    setup();
    CUdeviceptr p, q;
    CHECK(cuMemAlloc_v2(&p, parent_bytes) == CUDA_SUCCESS, "the parent's allocation failed");
    int mine[2] = {-1, -1}; /* the first and the last of the process's own descriptors */
    if (strcmp(end, "closeall") == 0) { /* as a daemon does: every descriptor past 2, then its own */
        for (int fd = 3; fd < 4096; fd++)
            close(fd);
        /* pipes up to descriptor 255: whatever number the limiter held, the process now has a file there */
        int p2[2];
        while (pipe(p2) == 0 && p2[1] < 255)
            mine[1] = p2[1];
        mine[0] = 3;
    }
    fflush(stdout);
    pid_t child = fork();
    CHECK(child >= 0, "fork failed");
    if (child == 0) {
        if (strcmp(end, "hold") == 0) {
            alarm(120); /* the test kills it; a test that failed first leaves it 2 minutes at most */
            print_slots("child", cuMemAlloc_v2(&q, child_bytes));
            for (;;)
                pause();
        }
        if (mine[0] >= 0) { /* the limiter's fork handler ran: the process's own files must be open still */
            for (int fd = mine[0]; fd <= mine[1]; fd++)
                CHECK(fcntl(fd, F_GETFD) != -1, "the limiter's fork handler closed a descriptor of the process's own");
            exit(g_failures ? 1 : 0);
        }
        print_slots("child", cuMemAlloc_v2(&q, child_bytes));
        if (strcmp(end, "kill") == 0)
            kill(getpid(), SIGKILL);
        exit(0); /* atexit handlers run: the limiter's releases this process's slot */
    }
    while (strcmp(end, "hold") == 0)
        pause();
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child, "waitpid failed");
    if (mine[0] >= 0) {
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child found its descriptors closed");
        return g_failures ? 1 : 0;
    }
    print_slots("parent", cuMemAlloc_v2(&q, child_bytes));
    return g_failures ? 1 : 0;
}

static CUdeviceptr *g_kept;
static unsigned g_kept_n;
static uint64_t g_again_bytes; /* exitfree ... again: allocated after the frees at exit */

static void free_at_exit(void)
{
    for (unsigned i = 0; i < g_kept_n; i++)
        CHECK(cuMemFree_v2(g_kept[i]) == CUDA_SUCCESS, "the free at exit failed");
    CUdeviceptr p;
    if (g_again_bytes)
        printf("%d\n", (int)cuMemAlloc_v2(&p, g_again_bytes));
}

static int cmd_exitfree(uint64_t bytes, unsigned n, int again)
{
    g_again_bytes = again ? bytes : 0;
    g_kept = calloc(n, sizeof *g_kept);
    if (!g_kept)
        return 1;
    atexit(free_at_exit);
    setup();
    CUresult rc = CUDA_SUCCESS;
    for (; g_kept_n < n && rc == CUDA_SUCCESS; g_kept_n += rc == CUDA_SUCCESS)
        rc = cuMemAlloc_v2(&g_kept[g_kept_n], bytes / n);
    printf("%d\n", (int)rc);
    return rc == CUDA_SUCCESS ? 0 : 1;
}

static uint64_t g_late_bytes;
static int g_late_other = -1; /* exitalloc ... O: a second device the handler allocates on */

static void alloc_at_exit(void)
{
    CUdeviceptr kept, freed;
    printf("%d\n", (int)cuMemAlloc_v2(&kept, g_late_bytes)); /* left to the driver, which frees it at the end */
    CUresult rc = cuMemAlloc_v2(&freed, g_late_bytes);
    printf("%d\n", (int)rc);
    if (rc == CUDA_SUCCESS)
        CHECK(cuMemFree_v2(freed) == CUDA_SUCCESS, "the free at exit failed");
    CUdevice dev;
    CUcontext ctx;
    if (g_late_other < 0)
        return;
    CHECK(cuDeviceGet(&dev, g_late_other) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS &&
              cuCtxSetCurrent(ctx) == CUDA_SUCCESS,
          "no context on the other device");
    printf("%d\n", (int)cuMemAlloc_v2(&kept, g_late_bytes));
}

static int cmd_exitalloc(uint64_t bytes, int other)
{
    g_late_bytes = bytes;
    g_late_other = other;
    atexit(alloc_at_exit);
    setup();
    CUdeviceptr p;
    CUresult rc = cuMemAlloc_v2(&p, bytes);
    printf("%d\n", (int)rc);
    if (rc == CUDA_SUCCESS)
        CHECK(cuMemFree_v2(p) == CUDA_SUCCESS, "the free failed");
    return rc == CUDA_SUCCESS ? 0 : 1;
}

static CUgraphExec g_exit_graph;
static unsigned g_exit_launches;

/* Device 0's charged blocks once the feedback thread has folded in every launch made so far: the count moves
 * at its ticks, so it is read until it has stood still for 20 polls of 10 ms (60 s at most). */
static uint64_t settled_blocks(void)
{
    uint64_t (*launched)(int) = (uint64_t(*)(int))dlsym(RTLD_DEFAULT, "carveLimiterLaunchedBlocks");
    CHECK(launched != NULL, "the limiter is not loaded");
    if (!launched)
        return 0;
    struct timespec poll = {0, 10000000};
    uint64_t last = launched(0);
    for (int still = 0, i = 0; still < 20 && i < 6000; i++) {
        nanosleep(&poll, NULL);
        uint64_t now = launched(0);
        still = now == last ? still + 1 : 0;
        last = now;
    }
    return last;
}

/* The blocks the limiter charged for N launches of the graph. */
static uint64_t launch_exit_graph(void)
{
    uint64_t before = settled_blocks();
    for (unsigned i = 0; i < g_exit_launches; i++)
        CHECK(cuGraphLaunch(g_exit_graph, NULL) == CUDA_SUCCESS, "the graph's launch failed");
    CHECK(cuCtxSynchronize() == CUDA_SUCCESS, "synchronize failed");
    return settled_blocks() - before;
}

static void graph_at_exit(void)
{
    printf("%llu\n", (unsigned long long)launch_exit_graph());
    fflush(stdout);
}

static int cmd_exitgraph(unsigned n, unsigned live)
{
    g_exit_launches = n;
    atexit(graph_at_exit);
    setup();
    for (unsigned i = 0; i < live; i++) {
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS) {
            fprintf(stderr, "FAIL: live buffer %u of %u refused\n", i, live);
            exit(2);
        }
    }
    CUDA_KERNEL_NODE_PARAMS np = {.func = carveFakeKernel(1000), .gridDimX = 8, .gridDimY = 1, .gridDimZ = 1,
                                  .blockDimX = 32, .blockDimY = 1, .blockDimZ = 1};
    CUgraph graph;
    CUgraphNode node;
    if (cuGraphCreate(&graph, 0) != CUDA_SUCCESS || cuGraphAddKernelNode(&node, graph, NULL, 0, &np) != CUDA_SUCCESS ||
        cuGraphInstantiateWithFlags(&g_exit_graph, graph, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "FAIL: cannot instantiate the graph\n");
        exit(2);
    }
    printf("%llu\n", (unsigned long long)launch_exit_graph());
    fflush(stdout);
    return g_failures ? 1 : 0;
}

static int try_alloc(uint64_t bytes)
{
    CUdeviceptr p;
    CUresult rc = cuMemAlloc_v2(&p, bytes);
    if (rc == CUDA_SUCCESS)
        cuMemFree_v2(p);
    return (int)rc;
}

static int cmd_relimit(uint64_t bytes)
{
    setup();
    uint64_t (*launched)(int) = (uint64_t (*)(int))dlsym(RTLD_DEFAULT, "carveLimiterLaunchedBlocks");
    CHECK(launched != NULL, "the limiter is not loaded");
    if (!launched)
        return 1;
    CUfunction f = carveFakeKernel(1000);
    printf("{\"rc\": %d}\n", try_alloc(bytes));
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        int mine[2] = {-1, -1};
        if (strncmp(line, "closeall", 8) == 0) {
            for (int fd = 3; fd < 4096; fd++)
                close(fd);
            CHECK(pipe(mine) == 0, "pipe failed");
        }
        uint64_t before = launched(0);
        CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS, "launch failed");
        struct timespec tick = {0, 2000000};
        for (int i = 0; i < 30000 && launched(0) == before; i++)
            nanosleep(&tick, NULL);
        CHECK(launched(0) > before, "no tick of the feedback thread counted the launch in 60 s");
        size_t fr = 0, tot = 0;
        int rc = try_alloc(bytes);
        cuMemGetInfo_v2(&fr, &tot);
        if (mine[0] >= 0)
            printf("{\"rc\": %d, \"total\": %zu, \"mine\": %d}\n", rc, tot,
                   fcntl(mine[0], F_GETFD) != -1 && fcntl(mine[1], F_GETFD) != -1);
        else
            printf("{\"rc\": %d, \"total\": %zu}\n", rc, tot);
        fflush(stdout);
    }
    return g_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "nvml2") == 0)
        return cmd_nvml2();
    if (argc >= 3 && strcmp(argv[1], "exitfree") == 0)
        return cmd_exitfree(strtoull(argv[2], NULL, 10), argc >= 4 ? (unsigned)atoi(argv[3]) : 1,
                            argc >= 5 && strcmp(argv[4], "again") == 0);
    if (argc >= 3 && strcmp(argv[1], "exitalloc") == 0)
        return cmd_exitalloc(strtoull(argv[2], NULL, 10), argc >= 4 ? atoi(argv[3]) : -1);
    if (argc >= 3 && strcmp(argv[1], "exitgraph") == 0)
        return cmd_exitgraph((unsigned)atoi(argv[2]), argc >= 4 ? (unsigned)atoi(argv[3]) : 0);
    if (argc >= 3 && strcmp(argv[1], "relimit") == 0)
        return cmd_relimit(strtoull(argv[2], NULL, 10));
    if (argc >= 5 && strcmp(argv[1], "fork") == 0)
        return cmd_fork(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10), argv[4]);
    if (argc >= 2 && strcmp(argv[1], "uuids") == 0)
        return cmd_uuids();
    if (argc >= 2 && strcmp(argv[1], "multi") == 0)
        return cmd_multi(argc - 2, argv + 2);
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

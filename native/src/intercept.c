/*
 * intercept.c: how calls reach the limiter, built from the one symbol table in hooks.h.
 *
 *  - direct symbols: the hooks carry the real names and the library is preloaded, so calls bound by the
 *    dynamic linker reach them first;
 *  - dlsym: overridden; a lookup of a table name that the real lookup finds returns the hook (ctypes,
 *    dlopen-based runtimes);
 *  - cuGetProcAddress / _v2: the driver resolves the name (its versioning, its per-thread-stream flags);
 *    the limiter swaps the returned address for the hook of the same variant, so stream semantics never
 *    change. Addresses the driver returns that are not its exports are matched by name, version and flags.
 * The real libraries are found by soname and looked up with the real dlsym on their own handles, which
 * search those libraries, never the preloaded hooks: no recursion. Lookups the driver libraries make
 * themselves (their own entry points, possibly from their constructors while the limiter is initialising)
 * get the real answer, untouched: the driver never calls a hook, so nothing is counted twice or re-entered.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "limiter.h"

#define CARVE_DEFINE_REAL(symbol, ...) __typeof__(&symbol) carve_real_##symbol;
#define CARVE_DEFINE_CALL(symbol) __typeof__(&symbol) carve_real_##symbol;
CARVE_CUDA_HOOKS(CARVE_DEFINE_REAL, CARVE_SKIP)
CARVE_NVML_HOOKS(CARVE_DEFINE_REAL)
CARVE_CUDA_CALLS(CARVE_DEFINE_CALL)
CARVE_NVML_CALLS(CARVE_DEFINE_CALL)

typedef struct hook {
    const char *symbol, *base;
    int version, per_thread, nvml;
    void **real;
} hook_t;

#define CUDA_ROW(symbol, base, version, pt) {#symbol, #base, version, pt, 0, (void **)&carve_real_##symbol},
/* an NVML row's base, version and variant are never read (cuGetProcAddress skips NVML's rows): left zero */
#define NVML_ROW(name) {.symbol = #name, .base = "", .nvml = 1, .real = (void **)&carve_real_##name},
static const hook_t g_hooks[] = {CARVE_CUDA_HOOKS(CUDA_ROW, CUDA_ROW) CARVE_NVML_HOOKS(NVML_ROW)};
#define N_HOOKS (sizeof g_hooks / sizeof g_hooks[0])
static void *g_hook_fn[N_HOOKS]; /* this library's own definition of each row's symbol */

#define CALL_ROW(symbol) {#symbol, (void **)&carve_real_##symbol},
static const struct {
    const char *symbol;
    void **real;
} g_cuda_calls[] = {CARVE_CUDA_CALLS(CALL_ROW)}, g_nvml_calls[] = {CARVE_NVML_CALLS(CALL_ROW)};

int carve_ready;
int carve_device_count;

static void *(*g_real_dlsym)(void *, const char *);
static __thread int g_initialising __attribute__((tls_model("initial-exec"))); /* inside init_once/nvml_once */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_once_t g_nvml_once = PTHREAD_ONCE_INIT;
static int g_nvml_ok;

/* Stand-ins for functions the installed driver does not export: an error, never a NULL call. */
static CUresult cuda_missing(void) { return CUDA_ERROR_NOT_SUPPORTED; }
static nvmlReturn_t nvml_missing(void) { return NVML_ERROR_FUNCTION_NOT_FOUND; }

static void find_real_dlsym(void)
{
    static const char *versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (unsigned i = 0; i < sizeof versions / sizeof versions[0] && !g_real_dlsym; i++)
        g_real_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", versions[i]);
}

static void resolve(void *lib, int nvml)
{
    for (unsigned i = 0; i < N_HOOKS; i++) {
        if (g_hooks[i].nvml != nvml)
            continue;
        void *p = lib ? g_real_dlsym(lib, g_hooks[i].symbol) : NULL;
        *g_hooks[i].real = p ? p : nvml ? (void *)nvml_missing : (void *)cuda_missing;
    }
}

static void own_hooks(void)
{
    Dl_info info;
    void *self = NULL;
    if (dladdr((void *)carve_init_slow, &info) && info.dli_fname)
        self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    for (unsigned i = 0; i < N_HOOKS; i++)
        g_hook_fn[i] = self ? g_real_dlsym(self, g_hooks[i].symbol) : NULL;
}

static void after_fork_child(void)
{
    carve_region_after_fork();
    carve_feedback_after_fork();
}

static void at_exit(void)
{
    carve_region_exit();
}

static void init_once(void)
{
    carve_config_t cfg;
    g_initialising = 1;
    if (!g_real_dlsym)
        find_real_dlsym();
    carve_config_from_env(&cfg);
    carve_region_setup(&cfg);
    void *cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!cuda)
        CARVE_LOG(CARVE_LOG_ERROR, "libcuda.so.1 not found (%s): CUDA calls fail with NOT_SUPPORTED", dlerror());
    resolve(cuda, 0);
    for (unsigned i = 0; i < sizeof g_cuda_calls / sizeof g_cuda_calls[0]; i++)
        *g_cuda_calls[i].real = cuda ? g_real_dlsym(cuda, g_cuda_calls[i].symbol) : NULL;
    own_hooks();
    atexit(at_exit);
    pthread_atfork(NULL, NULL, after_fork_child);
    CARVE_LOG(CARVE_LOG_INFO, "ready: region %s (%s), %d region file%s under %s and CARVE_REGION",
              cfg.region_path[0] ? cfg.region_path : "-", carve_primary->shared ? "shared" : "private",
              carve_region_count, carve_region_count == 1 ? "" : "s", cfg.region_dir);
    __atomic_store_n(&carve_ready, 1, __ATOMIC_RELEASE);
    g_initialising = 0;
}

void carve_init_slow(void)
{
    pthread_once(&g_once, init_once);
}

static void nvml_once(void)
{
    carve_init();
    g_initialising = 1;
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!nvml)
        CARVE_LOG(CARVE_LOG_WARN, "libnvidia-ml.so.1 not found: no NVML reports, no compute feedback");
    resolve(nvml, 1);
    for (unsigned i = 0; i < sizeof g_nvml_calls / sizeof g_nvml_calls[0]; i++)
        *g_nvml_calls[i].real = nvml ? g_real_dlsym(nvml, g_nvml_calls[i].symbol) : NULL;
    g_nvml_ok = nvml != NULL;
    g_initialising = 0;
}

int carve_nvml_init(void)
{
    pthread_once(&g_nvml_once, nvml_once);
    return g_nvml_ok;
}

int carve_current_device_slow(void)
{
    int n = __atomic_load_n(&carve_device_count, __ATOMIC_RELAXED);
    if (n == 0 && carve_real_cuDeviceGetCount && carve_real_cuDeviceGetCount(&n) == CUDA_SUCCESS && n > 0) {
        __atomic_store_n(&carve_device_count, n, __ATOMIC_RELAXED);
        if (n == 1)
            return 0;
    }
    CUdevice d;
    if (carve_real_cuCtxGetDevice && carve_real_cuCtxGetDevice(&d) == CUDA_SUCCESS && d >= 0)
        return d;
    return 0;
}

/* --- lookups --------------------------------------------------------------------------------------- */

static int hook_index(const char *symbol)
{
    if (!symbol || !((symbol[0] == 'c' && symbol[1] == 'u') || strncmp(symbol, "nvml", 4) == 0))
        return -1;
    for (unsigned i = 0; i < N_HOOKS; i++)
        if (strcmp(g_hooks[i].symbol, symbol) == 0)
            return (int)i;
    return -1;
}

/* 1 when `caller` is code of a CUDA or NVML driver library (libcuda.so.*, libnvidia-ml.so.*), by file name:
 * known before the limiter has loaded them, so it also holds for their constructors. */
static int from_driver(const void *caller)
{
    Dl_info info;
    if (!caller || !dladdr(caller, &info) || !info.dli_fname)
        return 0;
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    return strncmp(base, "libcuda.so", 10) == 0 || strncmp(base, "libnvidia-ml.so", 15) == 0;
}

CARVE_API void *dlsym(void *handle, const char *symbol)
{
    if (UNLIKELY(!g_real_dlsym))
        find_real_dlsym();
    int i = hook_index(symbol);
    if (i < 0 || g_initialising || from_driver(__builtin_return_address(0)))
        return g_real_dlsym(handle, symbol); /* a tail call: RTLD_NEXT still sees the caller */
    void *p = g_real_dlsym(handle, symbol);
    if (!p)
        return NULL;
    if (g_hooks[i].nvml)
        carve_nvml_init();
    else
        carve_init();
    return g_hook_fn[i] ? g_hook_fn[i] : p;
}

/* Replace the driver's answer by the hook of the same variant. */
static void swap_in_hook(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    if (!symbol || !pfn || !*pfn)
        return;
    void *p = *pfn;
    for (unsigned i = 0; i < N_HOOKS; i++) {
        if (g_hook_fn[i] == p)
            return; /* already ours */
        if (!g_hooks[i].nvml && *g_hooks[i].real == p && g_hook_fn[i]) {
            *pfn = g_hook_fn[i];
            return;
        }
    }
    int want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    int best = -1;
    for (unsigned i = 0; i < N_HOOKS; i++) {
        const hook_t *h = &g_hooks[i];
        if (h->nvml || strcmp(h->base, symbol) != 0 || h->version > version || (h->per_thread && !want_pt))
            continue;
        if (best < 0 || (h->per_thread && !g_hooks[best].per_thread) ||
            (h->per_thread == g_hooks[best].per_thread && h->version > g_hooks[best].version))
            best = (int)i;
    }
    if (best < 0 || !g_hook_fn[best])
        return;
    /* The driver gave an internal address: forward through our hook, which calls its export, but only when the
     * driver answers the same at the hook's own version. Otherwise it knows a newer variant than hooks.h (a
     * later CUDA): its arguments may differ, so the call goes to the driver untouched, and that is logged. */
    void *same = NULL;
    CUdriverProcAddressQueryResult st;
    if (REAL(cuGetProcAddress)(symbol, &same, g_hooks[best].version, flags) != CUDA_SUCCESS &&
        REAL(cuGetProcAddress_v2)(symbol, &same, g_hooks[best].version, flags, &st) != CUDA_SUCCESS)
        same = NULL;
    if (same == p)
        *pfn = g_hook_fn[best];
    else
        CARVE_LOG(CARVE_LOG_WARN, "cuGetProcAddress(%s, %d): the driver has a newer variant than this limiter "
                  "knows (%s); it is not intercepted", symbol, version, g_hooks[best].symbol);
}

CARVE_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    carve_init();
    CUresult rc = REAL(cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS)
        swap_in_hook(symbol, pfn, cudaVersion, flags);
    return rc;
}

CARVE_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus)
{
    carve_init();
    CUresult rc = REAL(cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (rc == CUDA_SUCCESS)
        swap_in_hook(symbol, pfn, cudaVersion, flags);
    return rc;
}

/* --- diagnostics (for `carve inspect`, docs/limiter.md and tests) -------------------------------- */

CARVE_API const char *carveLimiterVersion(void)
{
    return "carve-limiter 0.1 (region layout 2, limits layout 1)";
}

/* Thread blocks this process launched on `device` since it started (0 when compute is not limited). */
CARVE_API uint64_t carveLimiterLaunchedBlocks(int device)
{
    if ((unsigned)device >= CARVE_MAX_DEVICES)
        return 0;
    return __atomic_load_n(&carve_gates[device].total, __ATOMIC_RELAXED);
}

/* 1 when this process shares CARVE_REGION's file with the claim, 0 when it enforces limits alone. */
CARVE_API int carveLimiterRegionShared(void)
{
    carve_init();
    return carve_primary->shared;
}

/* How many claim region files this process maps (CARVE_REGION's and those under CARVE_REGION_DIR). */
CARVE_API int carveLimiterRegionCount(void)
{
    carve_init();
    return carve_region_count;
}

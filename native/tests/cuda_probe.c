/*
 * cuda_probe: a tiny CUDA driver API program. It dlopen()s libcuda.so.1 by its SONAME (a loader search, as
 * every CUDA program does), initializes the driver, creates a context on device 0, allocates and frees
 * 64 MiB, and prints one JSON line. Runs against the fake libcuda (CPU tests) or a real driver (tests/gpu).
 */
#include <dlfcn.h>
#include <stdio.h>

typedef int (*init_fn)(unsigned);
typedef int (*count_fn)(int *);
typedef int (*device_fn)(int *, int);
typedef int (*name_fn)(char *, int, int);
typedef int (*ctx_fn)(void **, unsigned, int);
typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*free_fn)(unsigned long long);

#define FAIL(step, rc)                                                                                     \
    do {                                                                                                   \
        printf("{\"ok\": false, \"step\": \"%s\", \"rc\": %d}\n", step, rc);                              \
        return 1;                                                                                          \
    } while (0)

int main(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        printf("{\"ok\": false, \"step\": \"dlopen\", \"error\": \"%s\"}\n", dlerror());
        return 1;
    }
    init_fn cu_init = (init_fn)dlsym(lib, "cuInit");
    count_fn cu_count = (count_fn)dlsym(lib, "cuDeviceGetCount");
    device_fn cu_device = (device_fn)dlsym(lib, "cuDeviceGet");
    name_fn cu_name = (name_fn)dlsym(lib, "cuDeviceGetName");
    ctx_fn cu_ctx = (ctx_fn)dlsym(lib, "cuCtxCreate_v2");
    alloc_fn cu_alloc = (alloc_fn)dlsym(lib, "cuMemAlloc_v2");
    free_fn cu_free = (free_fn)dlsym(lib, "cuMemFree_v2");
    if (!cu_init || !cu_count || !cu_device || !cu_name || !cu_ctx || !cu_alloc || !cu_free)
        FAIL("dlsym", -1);
    int rc, count = 0, dev = 0;
    char name[128] = "";
    void *ctx = NULL;
    unsigned long long ptr = 0;
    if ((rc = cu_init(0)) != 0)
        FAIL("cuInit", rc);
    if ((rc = cu_count(&count)) != 0 || count < 1)
        FAIL("cuDeviceGetCount", rc);
    if ((rc = cu_device(&dev, 0)) != 0)
        FAIL("cuDeviceGet", rc);
    if ((rc = cu_name(name, sizeof name, dev)) != 0)
        FAIL("cuDeviceGetName", rc);
    if ((rc = cu_ctx(&ctx, 0, dev)) != 0)
        FAIL("cuCtxCreate", rc);
    if ((rc = cu_alloc(&ptr, 64u << 20)) != 0)
        FAIL("cuMemAlloc", rc);
    if ((rc = cu_free(ptr)) != 0)
        FAIL("cuMemFree", rc);
    for (char *p = name; *p; p++)
        if (*p == '"' || *p == '\\')
            *p = ' ';
    printf("{\"ok\": true, \"devices\": %d, \"name\": \"%s\"}\n", count, name);
    return 0;
}

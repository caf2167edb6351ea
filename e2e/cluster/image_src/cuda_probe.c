/*
 * cuda-probe BYTES [HOLD_SECONDS]: what a CUDA program does, inside a container of the e2e: dlopen
 * ("libcuda.so.1") by name (the CDI spec mounts the fake driver's), create a context on device 0 and
 * cuMemAlloc BYTES; with HOLD_SECONDS, keep the context that long after printing.
 * Prints one JSON line: the CUresult of the allocation, the file libcuda.so.1 was loaded from, and whether
 * carve's limiter is mapped into the process (preloaded through /etc/ld.so.preload). Exit 0 unless the
 * library or a symbol is missing (then 2).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

typedef int (*cu_init_t)(unsigned int);
typedef int (*cu_device_get_t)(int *, int);
typedef int (*cu_ctx_create_t)(void **, unsigned int, int);
typedef int (*cu_mem_alloc_t)(unsigned long long *, size_t);

static int limiter_mapped(void)
{
    char line[4096];
    int found = 0;
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps)
        return 0;
    while (fgets(line, sizeof line, maps))
        if (strstr(line, "libcarve-limiter"))
            found = 1;
    fclose(maps);
    return found;
}

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "cuda-probe: no %s in libcuda.so.1: %s\n", name, dlerror());
        exit(2);
    }
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: cuda-probe BYTES [HOLD_SECONDS]\n");
        return 2;
    }
    unsigned hold = argc == 3 ? (unsigned)strtoul(argv[2], NULL, 0) : 0;
    size_t bytes = strtoull(argv[1], NULL, 0);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "cuda-probe: dlopen libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    struct link_map *map = NULL;
    dlinfo(lib, RTLD_DI_LINKMAP, &map);
    int dev = 0;
    void *ctx = NULL;
    unsigned long long ptr = 0;
    int init = ((cu_init_t)sym(lib, "cuInit"))(0);
    int get = init ? init : ((cu_device_get_t)sym(lib, "cuDeviceGet"))(&dev, 0);
    int create = get ? get : ((cu_ctx_create_t)sym(lib, "cuCtxCreate_v2"))(&ctx, 0, dev);
    int alloc = create ? create : ((cu_mem_alloc_t)sym(lib, "cuMemAlloc_v2"))(&ptr, bytes);
    printf("{\"init\": %d, \"ctx\": %d, \"alloc\": %d, \"bytes\": %zu, \"library\": \"%s\", \"limiter\": %s}\n",
           init, create, alloc, bytes, map ? map->l_name : "", limiter_mapped() ? "true" : "false");
    fflush(stdout);
    if (hold)
        sleep(hold); /* a client that stays: its context (and an MPS server's client slot) lives on */
    return 0;
}

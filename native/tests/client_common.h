/*
 * client_common.h: what the limiter's C test clients share: the CHECK macro that counts failures, a
 * read-only view of the claim's region (as the plugin sees it), and a context on the fake GPU.
 * Header-only (static functions), because each test program is built from one .c file.
 */
#ifndef CARVE_TESTS_CLIENT_COMMON_H
#define CARVE_TESTS_CLIENT_COMMON_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <cuda.h>

#include "carve_region.h"

static int g_failures;
#define CHECK(cond, ...)                                                                                   \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fprintf(stderr, "FAIL: " __VA_ARGS__);                                                         \
            fputc('\n', stderr);                                                                           \
            g_failures++;                                                                                  \
        }                                                                                                  \
    } while (0)

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

/* A current context on CUDA ordinal $CLIENT_ORDINAL (default 0), then the region mapped. */
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

#endif

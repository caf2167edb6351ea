/*
 * report.c: what the application is told about memory.
 *
 *   cuMemGetInfo_v2       total = min(limit, real total); free = min(limit - claim usage, real free)
 *   cuDeviceTotalMem_v2   min(limit, real)
 *   nvmlDeviceGetMemoryInfo(_v2)  total = min(limit, real), used = claim usage, free = total - used
 * Every subtraction is clamped at zero: nothing ever underflows. Without a limit the real values pass.
 */
#include <stdio.h>
#include <string.h>

#include "limiter.h"

static inline uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline uint64_t sub0(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

static inline uint64_t limit_of(int dev)
{
    if ((unsigned)dev >= CARVE_MAX_DEVICES)
        return 0;
    return __atomic_load_n(&carve_region->devices[dev].memory_limit, __ATOMIC_RELAXED);
}

static inline uint64_t used_of(int dev)
{
    return __atomic_load_n(&carve_region->devices[dev].memory_used, __ATOMIC_RELAXED);
}

CARVE_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    carve_init();
    CUresult rc = REAL(cuMemGetInfo_v2)(free_bytes, total);
    if (rc != CUDA_SUCCESS || !free_bytes || !total)
        return rc;
    int dev = carve_current_device();
    uint64_t limit = limit_of(dev);
    if (!limit)
        return rc;
    *total = (size_t)min_u64(limit, *total);
    *free_bytes = (size_t)min_u64(sub0(limit, used_of(dev)), *free_bytes);
    return rc;
}

CARVE_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    carve_init();
    CUresult rc = REAL(cuDeviceTotalMem_v2)(bytes, dev);
    uint64_t limit = limit_of(dev);
    if (rc == CUDA_SUCCESS && bytes && limit)
        *bytes = (size_t)min_u64(limit, *bytes);
    return rc;
}

/* --- NVML: device handle -> CUDA ordinal ------------------------------------------------------------ */

#define NVML_CACHE 16
static struct {
    nvmlDevice_t handle;
    int ordinal; /* -1: not one of ours */
} g_nvml_map[NVML_CACHE];
static int g_nvml_map_len;

static void uuid_string(const CUuuid *u, char *out, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* Which region device an NVML handle is: by the UUID the plugin wrote, else by asking CUDA. */
static int resolve_ordinal(nvmlDevice_t handle)
{
    char uuid[96];
    if (!REAL(nvmlDeviceGetUUID) || REAL(nvmlDeviceGetUUID)(handle, uuid, sizeof uuid) != NVML_SUCCESS)
        return -1;
    for (unsigned i = 0; i < carve_region->device_count && i < CARVE_MAX_DEVICES; i++)
        if (carve_region->devices[i].uuid[0] && strcmp(carve_region->devices[i].uuid, uuid) == 0)
            return (int)i;
    int count = 0;
    if (!REAL(cuInit) || REAL(cuInit)(0) != CUDA_SUCCESS || REAL(cuDeviceGetCount)(&count) != CUDA_SUCCESS)
        return -1;
    for (int i = 0; i < count && i < CARVE_MAX_DEVICES; i++) {
        CUuuid u;
        char s[96];
        if (REAL(cuDeviceGetUuid_v2)(&u, i) != CUDA_SUCCESS)
            continue;
        uuid_string(&u, s, sizeof s);
        if (strcmp(s, uuid) == 0)
            return i;
    }
    return -1;
}

static int nvml_ordinal(nvmlDevice_t handle)
{
    int n = __atomic_load_n(&g_nvml_map_len, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (g_nvml_map[i].handle == handle)
            return g_nvml_map[i].ordinal;
    int ordinal = resolve_ordinal(handle);
    /* a benign race: two threads may both append the same handle; lookups stay correct */
    int slot = __atomic_fetch_add(&g_nvml_map_len, 0, __ATOMIC_RELAXED);
    if (slot < NVML_CACHE) {
        g_nvml_map[slot].handle = handle;
        g_nvml_map[slot].ordinal = ordinal;
        __atomic_store_n(&g_nvml_map_len, slot + 1, __ATOMIC_RELEASE);
    }
    return ordinal;
}

static void clamp_nvml(int dev, unsigned long long *total, unsigned long long *free_bytes,
                       unsigned long long *used)
{
    uint64_t limit = limit_of(dev);
    if (!limit)
        return;
    uint64_t u = used_of(dev);
    *total = min_u64(limit, *total);
    *used = u;
    *free_bytes = sub0(*total, u);
}

CARVE_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    carve_nvml_init();
    nvmlReturn_t rc = REAL(nvmlDeviceGetMemoryInfo)(device, memory);
    if (rc == NVML_SUCCESS && memory) {
        int dev = nvml_ordinal(device);
        if (dev >= 0)
            clamp_nvml(dev, &memory->total, &memory->free, &memory->used);
    }
    return rc;
}

CARVE_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    carve_nvml_init();
    nvmlReturn_t rc = REAL(nvmlDeviceGetMemoryInfo_v2)(device, memory);
    if (rc == NVML_SUCCESS && memory) {
        int dev = nvml_ordinal(device);
        if (dev >= 0 && limit_of(dev)) {
            clamp_nvml(dev, &memory->total, &memory->free, &memory->used);
            memory->reserved = 0; /* the quota has no driver reservation of its own */
        }
    }
    return rc;
}

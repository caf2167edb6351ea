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

/* The binding of CUDA ordinal `dev` when it has a memory limit, else NULL. */
static inline const carve_binding_t *limited(int dev)
{
    if ((unsigned)dev >= CARVE_MAX_DEVICES)
        return NULL;
    const carve_binding_t *b = &carve_bind[dev];
    return b->dev && __atomic_load_n(&b->memory_limit, __ATOMIC_RELAXED) ? b : NULL;
}

CARVE_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    carve_init();
    CUresult rc = REAL(cuMemGetInfo_v2)(free_bytes, total);
    if (rc != CUDA_SUCCESS || !free_bytes || !total)
        return rc;
    const carve_binding_t *b = limited(carve_alloc_device());
    if (!b)
        return rc;
    uint64_t limit = __atomic_load_n(&b->memory_limit, __ATOMIC_RELAXED);
    *total = (size_t)min_u64(limit, *total);
    *free_bytes = (size_t)min_u64(sub0(limit, __atomic_load_n(&b->dev->memory_used, __ATOMIC_RELAXED)), *free_bytes);
    return rc;
}

CARVE_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    carve_init();
    CUresult rc = REAL(cuDeviceTotalMem_v2)(bytes, dev);
    const carve_binding_t *b = rc == CUDA_SUCCESS && bytes ? limited(carve_bind_ordinal(dev)) : NULL;
    if (b)
        *bytes = (size_t)min_u64(__atomic_load_n(&b->memory_limit, __ATOMIC_RELAXED), *bytes);
    return rc;
}

/* --- NVML: device handle -> the claim device of its GPU -------------------------------------------------- */

/* By the UUID a limits file names (no CUDA needed: nvidia-smi and pynvml work too); else the CUDA ordinal
 * with that UUID, through the same binding allocations use (positional and environment limits). `out` comes
 * zeroed (not limited), which is what a handle whose UUID NVML cannot give stays. */
static void resolve_device(nvmlDevice_t handle, carve_binding_t *out)
{
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE]; /* what nvmlDeviceGetUUID documents for any UUID, MIG ones included */
    if (!REAL(nvmlDeviceGetUUID) || REAL(nvmlDeviceGetUUID)(handle, uuid, sizeof uuid) != NVML_SUCCESS)
        return;
    if (carve_binding_for_uuid(uuid, out))
        return;
    int count = 0;
    if (REAL(cuInit) && REAL(cuInit)(0) == CUDA_SUCCESS && REAL(cuDeviceGetCount)(&count) == CUDA_SUCCESS) {
        for (int i = 0; i < count && i < CARVE_MAX_DEVICES; i++) {
            CUuuid u;
            char s[96];
            if (REAL(cuDeviceGetUuid_v2)(&u, i) != CUDA_SUCCESS)
                continue;
            carve_uuid_string(&u, s, sizeof s);
            if (strcmp(s, uuid) == 0) {
                if (carve_bind_ordinal(i) >= 0)
                    *out = carve_bind[i];
                return;
            }
        }
    }
}

/* Resolved at each call, not cached: NVML's memory queries are a monitoring agent's poll (a UUID and a lookup
 * each), and a binding kept from a handle's first call could only go stale (the clamp reads the claim's quota
 * now in any case). */
static carve_binding_t nvml_device(nvmlDevice_t handle)
{
    carve_binding_t b = {0};
    resolve_device(handle, &b);
    return b;
}

/* The report clamped to the device's memory limit, when it has one. `reserved`: v2's, or NULL. */
static void clamp_nvml(const carve_binding_t *b, unsigned long long *total, unsigned long long *free_bytes,
                       unsigned long long *used, unsigned long long *reserved)
{
    /* the claim's quota now, not the binding's memory_limit (a copy): the plugin may rewrite the limits while
     * the process runs (limits.c, apply) */
    const uint64_t *quota = b->dev ? &b->region->limits.devices[b->index].memory_limit : NULL;
    uint64_t limit = quota ? __atomic_load_n(quota, __ATOMIC_RELAXED) : 0;
    if (!limit)
        return;
    uint64_t u = __atomic_load_n(&b->dev->memory_used, __ATOMIC_RELAXED);
    *total = min_u64(limit, *total);
    *used = u;
    *free_bytes = sub0(*total, u);
    if (reserved)
        *reserved = 0; /* the quota has no driver reservation of its own */
}

CARVE_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    carve_nvml_init();
    nvmlReturn_t rc = REAL(nvmlDeviceGetMemoryInfo)(device, memory);
    if (rc == NVML_SUCCESS && memory) {
        carve_binding_t b = nvml_device(device);
        clamp_nvml(&b, &memory->total, &memory->free, &memory->used, NULL);
    }
    return rc;
}

CARVE_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    carve_nvml_init();
    nvmlReturn_t rc = REAL(nvmlDeviceGetMemoryInfo_v2)(device, memory);
    if (rc == NVML_SUCCESS && memory) {
        carve_binding_t b = nvml_device(device);
        clamp_nvml(&b, &memory->total, &memory->free, &memory->used, &memory->reserved);
    }
    return rc;
}

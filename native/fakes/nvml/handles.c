/*
 * handles.c: NVML handle objects of the fake library and MIG device identities.
 *
 * Every handle is the address of a static object, so a handle obtained once stays equal to later lookups
 * of the same object (pynvml users compare them) and foreign pointers can be refused with
 * NVML_ERROR_INVALID_ARGUMENT instead of being dereferenced blindly.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nvmlfake.h"

static struct nvmlDevice_st g_dev[FAKE_MAX_GPUS];
static struct nvmlDevice_st g_mig_dev[FAKE_MAX_GPUS][FAKE_GI_IDS][FAKE_MAX_CI];
static struct nvmlGpuInstance_st g_gi[FAKE_MAX_GPUS][FAKE_GI_IDS];
static struct nvmlComputeInstance_st g_ci[FAKE_MAX_GPUS][FAKE_GI_IDS][FAKE_MAX_CI];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fill(void)
{
    for (unsigned g = 0; g < FAKE_MAX_GPUS; g++) {
        g_dev[g].gpu = g;
        for (unsigned i = 0; i < FAKE_GI_IDS; i++) {
            g_gi[g][i] = (struct nvmlGpuInstance_st){g, i};
            for (unsigned c = 0; c < FAKE_MAX_CI; c++) {
                g_mig_dev[g][i][c] = (struct nvmlDevice_st){g, 1, i, c};
                g_ci[g][i][c] = (struct nvmlComputeInstance_st){g, i, c};
            }
        }
    }
}

/* Is p the address of an element of the array [base, base + bytes) of elem-sized objects? */
static int in_array(const void *p, const void *base, size_t bytes, size_t elem)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)base;
    return a >= b && a < b + bytes && (a - b) % elem == 0;
}

static unsigned gpu_count(void)
{
    unsigned n = 0;
    fake_topology(NULL, &n, NULL);
    return n;
}

const fake_gpu_t *fake_nvml_gpu(nvmlDevice_t dev)
{
    const fake_gpu_t *gpus;
    unsigned n;
    if (!dev || fake_topology(&gpus, &n, NULL) != 0)
        return NULL;
    if (!in_array(dev, g_dev, sizeof g_dev, sizeof g_dev[0]) &&
        !in_array(dev, g_mig_dev, sizeof g_mig_dev, sizeof g_mig_dev[0][0][0]))
        return NULL;
    pthread_once(&g_once, fill);
    return dev->gpu < n ? &gpus[dev->gpu] : NULL;
}

nvmlDevice_t fake_nvml_device(unsigned gpu)
{
    pthread_once(&g_once, fill);
    return gpu < gpu_count() ? &g_dev[gpu] : NULL;
}

nvmlDevice_t fake_nvml_mig_device(unsigned gpu, unsigned gi_id, unsigned ci_id)
{
    pthread_once(&g_once, fill);
    return gpu < gpu_count() && gi_id < FAKE_GI_IDS && ci_id < FAKE_MAX_CI ? &g_mig_dev[gpu][gi_id][ci_id] : NULL;
}

nvmlGpuInstance_t fake_nvml_gi_handle(unsigned gpu, unsigned gi_id)
{
    pthread_once(&g_once, fill);
    return gpu < gpu_count() && gi_id < FAKE_GI_IDS ? &g_gi[gpu][gi_id] : NULL;
}

nvmlComputeInstance_t fake_nvml_ci_handle(unsigned gpu, unsigned gi_id, unsigned ci_id)
{
    pthread_once(&g_once, fill);
    return gpu < gpu_count() && gi_id < FAKE_GI_IDS && ci_id < FAKE_MAX_CI ? &g_ci[gpu][gi_id][ci_id] : NULL;
}

int fake_nvml_is_gi(nvmlGpuInstance_t gi)
{
    pthread_once(&g_once, fill);
    return gi && in_array(gi, g_gi, sizeof g_gi, sizeof g_gi[0][0]) && gi->gpu < gpu_count();
}

int fake_nvml_is_ci(nvmlComputeInstance_t ci)
{
    pthread_once(&g_once, fill);
    return ci && in_array(ci, g_ci, sizeof g_ci, sizeof g_ci[0][0][0]) && ci->gpu < gpu_count();
}

const fake_mig_table_t *fake_nvml_mig_table(unsigned gpu)
{
    const fake_gpu_t *gpus;
    unsigned n;
    if (fake_topology(&gpus, &n, NULL) != 0 || gpu >= n || !gpus[gpu].model->mig_capable)
        return NULL;
    return fake_mig_table(gpus[gpu].model->mig_table);
}

const fake_gi_profile_t *fake_nvml_profile_by_id(const fake_mig_table_t *t, unsigned id)
{
    for (size_t i = 0; t && i < t->nprofiles; i++)
        if (t->profiles[i].id == id)
            return &t->profiles[i];
    return NULL;
}

/* Same hash family as the GPU UUIDs (fakes/common/topology.c), keyed by the parent UUID so a MIG device's
 * UUID is stable across processes and restarts yet differs between nodes. */
void fake_nvml_mig_uuid(const fake_gpu_t *g, unsigned gi_id, unsigned ci_id, char *out, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *s = g->uuid; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    uint64_t a = h ^ ((uint64_t)gi_id << 8 | ci_id), b;
    a = (a ^ (a >> 30)) * 0xbf58476d1ce4e5b9ull;
    a = (a ^ (a >> 27)) * 0x94d049bb133111ebull;
    a ^= a >> 31;
    b = (a ^ 0x6d6967ull) * 0x9e3779b97f4a7c15ull;
    b ^= b >> 29;
    snprintf(out, len, "MIG-%08x-%04x-%04x-%04x-%012llx", (unsigned)(a >> 32), (unsigned)(a >> 16) & 0xffff,
             (unsigned)a & 0xffff, (unsigned)(b >> 48), (unsigned long long)(b & 0xffffffffffffull));
}

/*
 * device.c: device enumeration and identity queries of the fake NVML (GPUs and MIG devices).
 *
 * MIG device handles answer identity queries the way the driver does: their own UUID ("MIG-..."),
 * name ("<GPU name> MIG <profile>"), memory (the GPU-instance profile's) and attributes, and the parent's
 * architecture, compute capability and PCI location.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nvmlfake.h"

#define MIB (1024ull * 1024ull)

/* Common prologue: library initialised, handle ours, output pointer present. */
#define DEVICE_ARGS(dev, out, g)                                                                               \
    nvmlReturn_t rc_ = fake_nvml_ready();                                                                      \
    if (rc_ != NVML_SUCCESS)                                                                                   \
        return rc_;                                                                                            \
    const fake_gpu_t *g = fake_nvml_gpu(dev);                                                                  \
    if (!g || !(out))                                                                                          \
        return NVML_ERROR_INVALID_ARGUMENT

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    fake_topology(NULL, deviceCount, NULL);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    nvmlDevice_t d = fake_nvml_device(index);
    if (!device || !d)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = d;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    const fake_gpu_t *gpus;
    unsigned n;
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    fake_topology(&gpus, &n, NULL);
    for (unsigned i = 0; i < n; i++) {
        if (strcmp(gpus[i].uuid, uuid) == 0) {
            *device = fake_nvml_device(i);
            return NVML_SUCCESS;
        }
        if (strncmp(uuid, "MIG-", 4) != 0 || !gpus[i].model->mig_capable)
            continue;
        fake_mig_view_t v;
        if (fake_nvml_mig_view(i, &v) != 0)
            continue;
        for (unsigned gi = 0; gi < FAKE_GI_IDS; gi++)
            for (unsigned ci = 0; ci < FAKE_MAX_CI; ci++) {
                char mig[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
                if (!fake_nvml_view_ci(&v, gi, ci))
                    continue;
                fake_nvml_mig_uuid(&gpus[i], gi, ci, mig, sizeof mig);
                if (strcmp(mig, uuid) == 0) {
                    *device = fake_nvml_mig_device(i, gi, ci);
                    return NVML_SUCCESS;
                }
            }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* Accepts NVML's "00000000:3B:00.0" and the short "0000:3b:00.0" form, any case. */
NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    const fake_gpu_t *gpus;
    unsigned n, dom, bus, dev, fn;
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!pciBusId || !device || sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
        return NVML_ERROR_INVALID_ARGUMENT;
    fake_topology(&gpus, &n, NULL);
    for (unsigned i = 0; i < n; i++) {
        unsigned d2, b2, v2, f2;
        sscanf(gpus[i].pci_bus_id, "%x:%x:%x.%x", &d2, &b2, &v2, &f2);
        if (dom == d2 && bus == b2 && dev == v2 && fn == f2) {
            *device = fake_nvml_device(i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    DEVICE_ARGS(device, name, g);
    if (!device->is_mig)
        return fake_nvml_copy_str(name, length, g->model->name);
    const fake_gi_profile_t *gp;
    nvmlReturn_t rc = fake_nvml_mig_lookup(device, &gp, NULL, NULL);
    if (rc != NVML_SUCCESS)
        return rc;
    char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    snprintf(buf, sizeof buf, "%s MIG %s", g->model->name, gp->name);
    return fake_nvml_copy_str(name, length, buf);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    DEVICE_ARGS(device, uuid, g);
    if (!device->is_mig)
        return fake_nvml_copy_str(uuid, length, g->uuid);
    nvmlReturn_t rc = fake_nvml_mig_lookup(device, NULL, NULL, NULL);
    if (rc != NVML_SUCCESS)
        return rc;
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    fake_nvml_mig_uuid(g, device->gi_id, device->ci_id, buf, sizeof buf);
    return fake_nvml_copy_str(uuid, length, buf);
}

NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    DEVICE_ARGS(device, minorNumber, g);
    if (device->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *minorNumber = g->minor;
    return NVML_SUCCESS;
}

/* For a MIG device: its index under the parent, as nvmlDeviceGetMigDeviceHandleByIndex takes it. */
NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    DEVICE_ARGS(device, index, g);
    if (device->is_mig)
        return fake_nvml_mig_lookup(device, NULL, NULL, index);
    *index = g->index;
    return NVML_SUCCESS;
}

/* Is `index` listed in the file named by env `var` (GPU indexes, comma or newline separated)? Read at every
 * call, so a test can change the answer while a process runs. */
int fake_nvml_index_listed(const char *var, unsigned int index)
{
    const char *path = getenv(var);
    if (!path || !*path)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int listed = 0;
    unsigned int v;
    while (!listed && fscanf(f, " %u", &v) == 1) {
        listed = v == index;
        if (fscanf(f, " ,") < 0)
            break;
    }
    fclose(f);
    return listed;
}

/* Emulated GPU loss (as after an Xid 79): the GPU indexes listed in the file named by CARVE_FAKE_LOST_FILE
 * answer memory queries (and event waits, events.c) with NVML_ERROR_GPU_IS_LOST. */
int fake_nvml_gpu_lost(unsigned int index)
{
    return fake_nvml_index_listed("CARVE_FAKE_LOST_FILE", index);
}

/* total, allocated and driver-reserved memory of a GPU or MIG device (nvml.h: v1's `used` is reserved plus
 * allocated, v2 reports the two apart; free is what is left of total either way). */
static nvmlReturn_t memory(nvmlDevice_t device, const fake_gpu_t *g, unsigned long long *total,
                           unsigned long long *used, unsigned long long *reserved)
{
    if (fake_nvml_gpu_lost(g->index))
        return NVML_ERROR_GPU_IS_LOST;
    if (device->is_mig) {
        const fake_gi_profile_t *gp;
        nvmlReturn_t rc = fake_nvml_mig_lookup(device, &gp, NULL, NULL);
        if (rc != NVML_SUCCESS)
            return rc;
        *total = gp->memory_mib * MIB;
        *used = 0;     /* per-instance accounting is not emulated */
        *reserved = 0; /* nor a per-instance reservation */
        return NVML_SUCCESS;
    }
    *total = g->model->memory_bytes;
    *reserved = fake_mem_reserved(g->index);
    *used = fake_mem_used(g->index);
    if (*used > *total - *reserved)
        *used = *total - *reserved;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *mem)
{
    DEVICE_ARGS(device, mem, g);
    unsigned long long total, used, reserved;
    nvmlReturn_t rc = memory(device, g, &total, &used, &reserved);
    if (rc != NVML_SUCCESS)
        return rc;
    mem->total = total;
    mem->used = used + reserved; /* "Sum of Reserved and Allocated device memory" */
    mem->free = total - mem->used;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *mem)
{
    DEVICE_ARGS(device, mem, g);
    if (mem->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long total, used, reserved;
    nvmlReturn_t rc = memory(device, g, &total, &used, &reserved);
    if (rc != NVML_SUCCESS)
        return rc;
    /* Inside a driver memory partition, v2 accounts for it (nvml.h): the cgroup's hard limit is its total
     * and its own use is what is used; the driver's reservation is outside it. v1 keeps the device's view. */
    uint64_t hard, part_used;
    if (!device->is_mig && fake_mem_partition(g->index, &hard, &part_used) && hard < total) {
        total = hard;
        used = part_used < hard ? part_used : hard;
        reserved = 0;
    }
    mem->total = total;
    mem->reserved = reserved;
    mem->used = used;
    mem->free = total - reserved - used;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    DEVICE_ARGS(device, arch, g);
    *arch = g->model->architecture;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    DEVICE_ARGS(device, major, g);
    if (!minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = g->model->cc_major;
    *minor = g->model->cc_minor;
    return NVML_SUCCESS;
}

static void pci_fields(const fake_gpu_t *g, unsigned *domain, unsigned *bus, unsigned *dev)
{
    unsigned fn;
    sscanf(g->pci_bus_id, "%x:%x:%x.%x", domain, bus, dev, &fn);
}

/* Sub-system id: an NVIDIA board id derived from the device id, stable per model. */
#define SUBSYS(g) ((((g)->model->pci_device_id >> 16) ^ 0x1450u) << 16 | 0x10deu)

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    DEVICE_ARGS(device, pci, g);
    memset(pci, 0, sizeof *pci);
    pci_fields(g, &pci->domain, &pci->bus, &pci->device);
    pci->pciDeviceId = g->model->pci_device_id;
    pci->pciSubSystemId = SUBSYS(g);
    snprintf(pci->busId, sizeof pci->busId, "%s", g->pci_bus_id);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", pci->domain & 0xffff, pci->bus,
             pci->device);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci)
{
    DEVICE_ARGS(device, pci, g);
    if (pci->version != nvmlPciInfoExt_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memset(pci, 0, sizeof *pci);
    pci->version = nvmlPciInfoExt_v1;
    pci_fields(g, &pci->domain, &pci->bus, &pci->device);
    pci->pciDeviceId = g->model->pci_device_id;
    pci->pciSubSystemId = SUBSYS(g);
    pci->baseClass = 0x03; /* display controller */
    pci->subClass = 0x02;  /* 3D controller, as data-center GPUs enumerate */
    snprintf(pci->busId, sizeof pci->busId, "%s", g->pci_bus_id);
    return NVML_SUCCESS;
}

/* NUMA affinity of a PCIe GPU: the emulated host has two sockets, one NUMA node each, and the GPUs sit
 * half on each (the first ceil(n/2) on node 0), as on a two-socket server with GPUs under both CPUs.
 * nvml.h: a bitmask of nodes, 64 per unsigned long; scope NODE or SOCKET (one node per socket here, so
 * both answer the same); nodeSetSize 0, a NULL nodeSet or another scope is INVALID_ARGUMENT. A MIG
 * device answers its parent's affinity (it is the same PCIe function). */
NVML_API nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize,
                                                  unsigned long *nodeSet, nvmlAffinityScope_t scope)
{
    DEVICE_ARGS(device, nodeSet, g);
    if (nodeSetSize == 0 || (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET))
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    fake_topology(NULL, &n, NULL);
    memset(nodeSet, 0, nodeSetSize * sizeof *nodeSet);
    nodeSet[0] = 1ul << (g->index < (n + 1) / 2 ? 0 : 1);
    return NVML_SUCCESS;
}

/* CUDA cores: 64 per SM on Turing (7.5) and GA100 (8.0), 128 on GA10x, Ada, Hopper and Blackwell. Not
 * answered for MIG devices or MIG-enabled GPUs, as the header documents. */
NVML_API nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *numCores)
{
    DEVICE_ARGS(device, numCores, g);
    if (device->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    if (g->model->mig_capable) {
        fake_mig_view_t v;
        if (fake_nvml_mig_view(g->index, &v) == 0 && v.current == NVML_DEVICE_MIG_ENABLE)
            return NVML_ERROR_NOT_SUPPORTED;
    }
    int cc = g->model->cc_major * 10 + g->model->cc_minor;
    *numCores = g->model->multiprocessors * (cc == 75 || cc == 80 ? 64 : 128);
    return NVML_SUCCESS;
}

/* Defined for MIG devices by the header; answered for whole GPUs too (SM count, memory, engines of the
 * full-GPU profile when there is one) because drivers do, and it is how SM counts are read. */
NVML_API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attr)
{
    DEVICE_ARGS(device, attr, g);
    memset(attr, 0, sizeof *attr);
    const fake_mig_table_t *t = fake_nvml_mig_table(g->index);
    if (device->is_mig) {
        const fake_gi_profile_t *gp;
        fake_ci_t ci;
        nvmlReturn_t rc = fake_nvml_mig_lookup(device, &gp, &ci, NULL);
        if (rc != NVML_SUCCESS)
            return rc;
        attr->multiprocessorCount = ci.size == gp->compute_slices ? gp->sm_count : ci.size * t->sms_per_slice;
        attr->sharedCopyEngineCount = gp->engines[0];
        attr->sharedDecoderCount = gp->engines[1];
        attr->sharedEncoderCount = gp->engines[2];
        attr->sharedJpegCount = gp->engines[3];
        attr->sharedOfaCount = gp->engines[4];
        attr->gpuInstanceSliceCount = gp->compute_slices;
        attr->computeInstanceSliceCount = ci.size;
        attr->memorySizeMB = gp->memory_mib;
        return NVML_SUCCESS;
    }
    attr->multiprocessorCount = g->model->multiprocessors;
    attr->memorySizeMB = g->model->memory_bytes / MIB;
    for (size_t i = 0; t && i < t->nprofiles; i++)
        if (t->profiles[i].compute_slices == t->compute_slices && t->profiles[i].memory_slices == t->placement_units) {
            attr->sharedCopyEngineCount = t->profiles[i].engines[0];
            attr->sharedDecoderCount = t->profiles[i].engines[1];
            attr->sharedEncoderCount = t->profiles[i].engines[2];
            attr->sharedJpegCount = t->profiles[i].engines[3];
            attr->sharedOfaCount = t->profiles[i].engines[4];
            attr->gpuInstanceSliceCount = attr->computeInstanceSliceCount = t->compute_slices;
            break;
        }
    return NVML_SUCCESS;
}

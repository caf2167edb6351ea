/*
 * memlimits.c: driver memory partitions per cgroup v2 directory (nvmlDeviceSetMemoryLimits_v1 and
 * nvmlDeviceGetMemoryLimits_v1, CUDA 13.4 generation drivers), per GPU, kept in the shared state.
 *
 * As nvml.h documents: Set needs a whole-GPU handle (MIG handles: NOT_SUPPORTED), a driver of the 615
 * generation or later (NOT_SUPPORTED before), soft <= hard <= total memory or NVML_DEVICE_MEMORY_LIMIT_MAX
 * (INVALID_ARGUMENT), and a cgroup directory that exists (OPERATING_SYSTEM). Clearing is soft 0 and hard
 * MAX, which frees the slot. Get answers NOT_FOUND for a cgroup without limits; currentUsed is what the
 * cgroup's processes hold on the GPU (fake libcuda allocations charged under the cgroup's inode). Set also
 * records the directory's path in the initial cgroup namespace (common/cgroup.c: how a process that sees
 * no cgroup2 mount finds its partition).
 * Not emulated: permissions (no root check), eviction between soft and hard (MPS), the dmem backend's
 * propagation of soft limits into ancestors.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "nvmlfake.h"

struct set_op {
    uint64_t cgroup;
    const char *path;
    char canon[FAKE_CGROUP_PATH_MAX];
    uint64_t soft, hard;
    int full;
};

struct get_op {
    const char *path;
    uint64_t soft, hard, used;
};

static nvmlReturn_t check_device(nvmlDevice_t device, const fake_gpu_t **g)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    *g = fake_nvml_gpu(device);
    if (!*g)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (device->is_mig || fake_nvml_driver_major() < FAKE_MEMORY_LIMITS_MAJOR)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* The cgroup directory's inode, 0 when the path is not an absolute directory. */
static uint64_t cgroup_inode(const char *path)
{
    struct stat sb;
    if (!path || path[0] != '/' || strlen(path) >= sizeof(((fake_partition_t *)0)->path))
        return 0;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) ? (uint64_t)sb.st_ino : 0;
}

static int do_set(void *arg, fake_gpu_state_t *st)
{
    struct set_op *op = arg;
    fake_partition_t *p = NULL;
    for (unsigned i = 0; i < FAKE_MAX_PARTS && !p; i++)
        if (st->parts[i].cgroup && strcmp(st->parts[i].path, op->path) == 0)
            p = &st->parts[i]; /* the same path, maybe a recreated directory: a new inode replaces it */
    if (!p)
        p = fake_partition_of(st, op->cgroup);
    if (op->soft == 0 && op->hard == NVML_DEVICE_MEMORY_LIMIT_MAX) {
        if (p)
            memset(p, 0, sizeof *p);
        return 0;
    }
    if (!p) {
        for (unsigned i = 0; i < FAKE_MAX_PARTS && !p; i++)
            if (!st->parts[i].cgroup)
                p = &st->parts[i];
        if (!p) {
            op->full = 1;
            return 0;
        }
    }
    p->cgroup = op->cgroup;
    p->soft = op->soft;
    p->hard = op->hard;
    snprintf(p->path, sizeof p->path, "%s", op->path);
    snprintf(p->canon, sizeof p->canon, "%s", op->canon);
    return 0;
}

NVML_API nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device, nvmlSetMemoryLimits_v1_t *limits)
{
    const fake_gpu_t *g;
    nvmlReturn_t rc = check_device(device, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!limits || !limits->nameSpace)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t total = g->model->memory_bytes;
    if (limits->softLimit > limits->hardLimit || limits->softLimit > total ||
        (limits->hardLimit > total && limits->hardLimit != NVML_DEVICE_MEMORY_LIMIT_MAX))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct set_op op = {.path = limits->nameSpace, .soft = limits->softLimit, .hard = limits->hardLimit};
    op.cgroup = cgroup_inode(limits->nameSpace);
    if (!op.cgroup)
        return NVML_ERROR_OPERATING_SYSTEM;
    if (fake_cgroup_canonical(limits->nameSpace, op.canon, sizeof op.canon) != 0)
        op.canon[0] = '\0'; /* found by inode only (processes that see a cgroup2 mount) */
    if (fake_state_locked(g->index, do_set, &op) != 0)
        return NVML_ERROR_UNKNOWN;
    return op.full ? NVML_ERROR_INSUFFICIENT_RESOURCES : NVML_SUCCESS;
}

static int do_get(void *arg, fake_gpu_state_t *st)
{
    struct get_op *op = arg;
    for (unsigned i = 0; i < FAKE_MAX_PARTS; i++) {
        const fake_partition_t *p = &st->parts[i];
        if (!p->cgroup || strcmp(p->path, op->path) != 0)
            continue;
        fake_proc_sweep(st);
        op->soft = p->soft;
        op->hard = p->hard;
        op->used = fake_partition_used(st, p->cgroup);
        return 1;
    }
    return 0;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t device, nvmlGetMemoryLimits_v1_t *limits)
{
    const fake_gpu_t *g;
    nvmlReturn_t rc = check_device(device, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!limits || !limits->nameSpace)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!cgroup_inode(limits->nameSpace))
        return NVML_ERROR_OPERATING_SYSTEM;
    struct get_op op = {.path = limits->nameSpace};
    int found = fake_state_locked(g->index, do_get, &op);
    if (found < 0)
        return NVML_ERROR_UNKNOWN;
    if (!found)
        return NVML_ERROR_NOT_FOUND;
    limits->softLimit = op.soft;
    limits->hardLimit = op.hard;
    limits->currentUsed = op.used;
    return NVML_SUCCESS;
}

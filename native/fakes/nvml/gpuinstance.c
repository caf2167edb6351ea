/*
 * gpuinstance.c: GPU instances of the fake NVML: capacity, create, destroy, enumerate, info.
 *
 * All decisions are taken under the GPU's state lock on the shared state, so two processes creating
 * instances at once see each other's instances and can never both take overlapping slices.
 */
#include <string.h>

#include "nvmlfake.h"

static nvmlReturn_t enabled_parent(nvmlDevice_t dev, const fake_mig_table_t **t)
{
    nvmlReturn_t rc = fake_nvml_mig_parent(dev, t);
    if (rc != NVML_SUCCESS)
        return rc;
    fake_mig_view_t v;
    if (fake_nvml_mig_view(dev->gpu, &v) != 0)
        return NVML_ERROR_UNKNOWN;
    return v.current == NVML_DEVICE_MIG_ENABLE ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* Placement tree id: the whole GPU is 0, its halves 1-2, quarters 3-6, eighths 7-14 (in units of the
 * smallest group for the GPU), so an id names one node of the tree and overlapping instances never share
 * one. */
static unsigned gi_id_for(const fake_mig_table_t *t, unsigned start, unsigned size)
{
    unsigned groups = t->placement_units / size;
    return groups - 1 + start / size;
}

struct gi_op {
    const fake_mig_table_t *t;
    const fake_gi_profile_t *p;
    int auto_place;           /* choose the placement (CreateGpuInstance) */
    unsigned start, size;
    unsigned gi_id;           /* out (create) / in (destroy) */
    unsigned count;           /* out (capacity) */
    nvmlReturn_t rc;
};

static int overlaps(const fake_gpu_state_t *st, unsigned start, unsigned size)
{
    for (unsigned i = 0; i < FAKE_MAX_MIG; i++) {
        const fake_mig_instance_t *g = &st->gi[i];
        if (g->in_use && start < g->start + g->size && g->start < start + size)
            return 1;
    }
    return 0;
}

/* How many more instances of the profile fit: free non-overlapping placements (greedy by start is exact
 * because a profile's placements are aligned to its size), capped by the profile's instance limit, the
 * GPU's instance limit and the compute slices left. */
static unsigned capacity(const fake_mig_table_t *t, const fake_gi_profile_t *p, const fake_gpu_state_t *st)
{
    unsigned same = 0, ngi = 0, compute_used = 0, fit = 0, taken_end = 0;
    for (unsigned i = 0; i < FAKE_MAX_MIG; i++) {
        if (!st->gi[i].in_use)
            continue;
        ngi++;
        same += st->gi[i].profile_id == p->id;
        const fake_gi_profile_t *q = fake_nvml_profile_by_id(t, st->gi[i].profile_id);
        compute_used += q ? q->compute_slices : 0;
    }
    for (unsigned k = 0; k < p->nplacements; k++) {
        unsigned s = p->placements[k].start, z = p->placements[k].size;
        if (s >= taken_end && !overlaps(st, s, z)) {
            fit++;
            taken_end = s + z;
        }
    }
    unsigned limits[] = {p->max_instances > same ? p->max_instances - same : 0,
                         t->max_gpu_instances > ngi ? t->max_gpu_instances - ngi : 0,
                         (t->compute_slices > compute_used ? t->compute_slices - compute_used : 0) /
                             (p->compute_slices ? p->compute_slices : 1)};
    for (unsigned i = 0; i < 3; i++)
        fit = limits[i] < fit ? limits[i] : fit;
    return fit;
}

static int do_capacity(void *arg, fake_gpu_state_t *st)
{
    struct gi_op *op = arg;
    op->count = capacity(op->t, op->p, st);
    return 0;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                                unsigned int *count)
{
    const fake_mig_table_t *t;
    nvmlReturn_t rc = enabled_parent(device, &t);
    if (rc != NVML_SUCCESS)
        return rc;
    struct gi_op op = {.t = t, .p = fake_nvml_profile_by_id(t, profileId)};
    if (!op.p || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fake_state_locked(device->gpu, do_capacity, &op) != 0)
        return NVML_ERROR_UNKNOWN;
    *count = op.count;
    return NVML_SUCCESS;
}

static int do_create(void *arg, fake_gpu_state_t *st)
{
    struct gi_op *op = arg;
    if (st->mig_current != NVML_DEVICE_MIG_ENABLE) {
        op->rc = NVML_ERROR_NOT_SUPPORTED; /* disabled by another process meanwhile */
        return 0;
    }
    if (capacity(op->t, op->p, st) == 0) {
        op->rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
        return 0;
    }
    if (op->auto_place) {
        int found = 0;
        for (unsigned k = op->p->nplacements; k-- > 0 && !found;)
            if (!overlaps(st, op->p->placements[k].start, op->p->placements[k].size)) {
                op->start = op->p->placements[k].start;
                op->size = op->p->placements[k].size;
                found = 1;
            }
        if (!found) {
            op->rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
            return 0;
        }
    } else if (overlaps(st, op->start, op->size)) {
        op->rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
        return 0;
    }
    for (unsigned i = 0; i < FAKE_MAX_MIG; i++) {
        fake_mig_instance_t *g = &st->gi[i];
        if (g->in_use)
            continue;
        memset(g, 0, sizeof *g);
        memset(st->ci[i], 0, sizeof st->ci[i]);
        g->profile_id = op->p->id;
        g->start = op->start;
        g->size = op->size;
        g->gi_id = op->gi_id = gi_id_for(op->t, op->start, op->size);
        g->in_use = 1;
        op->rc = NVML_SUCCESS;
        return 0;
    }
    op->rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    return 0;
}

static nvmlReturn_t create(nvmlDevice_t device, unsigned profileId, const nvmlGpuInstancePlacement_t *placement,
                           nvmlGpuInstance_t *gpuInstance)
{
    const fake_mig_table_t *t;
    nvmlReturn_t rc = enabled_parent(device, &t);
    if (rc != NVML_SUCCESS)
        return rc;
    struct gi_op op = {.t = t, .p = fake_nvml_profile_by_id(t, profileId), .auto_place = !placement};
    if (!op.p || !gpuInstance)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (placement) {
        int valid = 0;
        for (unsigned k = 0; k < op.p->nplacements; k++)
            valid |= op.p->placements[k].start == placement->start && op.p->placements[k].size == placement->size;
        if (!valid)
            return NVML_ERROR_INVALID_ARGUMENT;
        op.start = placement->start;
        op.size = placement->size;
    }
    if (fake_state_locked(device->gpu, do_create, &op) != 0)
        return NVML_ERROR_UNKNOWN;
    if (op.rc == NVML_SUCCESS) {
        *gpuInstance = fake_nvml_gi_handle(device->gpu, op.gi_id);
        fake_caps_created(fake_nvml_gpu(device)->minor, op.gi_id, -1);
    }
    return op.rc;
}

NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                                  nvmlGpuInstance_t *gpuInstance)
{
    return create(device, profileId, NULL, gpuInstance);
}

NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                               const nvmlGpuInstancePlacement_t *placement,
                                                               nvmlGpuInstance_t *gpuInstance)
{
    if (!placement && fake_nvml_ready() == NVML_SUCCESS)
        return NVML_ERROR_INVALID_ARGUMENT;
    return create(device, profileId, placement, gpuInstance);
}

static int do_destroy(void *arg, fake_gpu_state_t *st)
{
    struct gi_op *op = arg;
    op->rc = NVML_ERROR_INVALID_ARGUMENT; /* already destroyed: the handle is stale */
    for (unsigned i = 0; i < FAKE_MAX_MIG; i++) {
        fake_mig_instance_t *g = &st->gi[i];
        if (!g->in_use || g->gi_id != op->gi_id)
            continue;
        for (unsigned c = 0; c < FAKE_MAX_CI; c++)
            if (st->ci[i][c].in_use) {
                op->rc = NVML_ERROR_IN_USE;
                return 0;
            }
        memset(g, 0, sizeof *g);
        op->rc = NVML_SUCCESS;
    }
    return 0;
}

NVML_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!fake_nvml_is_gi(gpuInstance))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct gi_op op = {.gi_id = gpuInstance->gi_id};
    if (fake_state_locked(gpuInstance->gpu, do_destroy, &op) != 0)
        return NVML_ERROR_UNKNOWN;
    if (op.rc == NVML_SUCCESS)
        fake_caps_destroyed(fake_nvml_gpu(fake_nvml_device(gpuInstance->gpu))->minor, op.gi_id, -1);
    return op.rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                                nvmlGpuInstance_t *gpuInstances, unsigned int *count)
{
    const fake_mig_table_t *t;
    nvmlReturn_t rc = enabled_parent(device, &t);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!fake_nvml_profile_by_id(t, profileId) || !gpuInstances || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    fake_mig_view_t v;
    if (fake_nvml_mig_view(device->gpu, &v) != 0)
        return NVML_ERROR_UNKNOWN;
    unsigned n = 0;
    for (unsigned id = 0; id < FAKE_GI_IDS; id++) { /* in id order, as the driver lists them */
        const fake_mig_instance_t *g = fake_nvml_view_gi(&v, id, NULL);
        if (g && g->profile_id == profileId)
            gpuInstances[n++] = fake_nvml_gi_handle(device->gpu, id);
    }
    *count = n;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                   nvmlGpuInstance_t *gpuInstance)
{
    const fake_mig_table_t *t;
    nvmlReturn_t rc = enabled_parent(device, &t);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!gpuInstance)
        return NVML_ERROR_INVALID_ARGUMENT;
    fake_mig_view_t v;
    if (fake_nvml_mig_view(device->gpu, &v) != 0)
        return NVML_ERROR_UNKNOWN;
    if (!fake_nvml_view_gi(&v, id, NULL))
        return NVML_ERROR_NOT_FOUND;
    *gpuInstance = fake_nvml_gi_handle(device->gpu, id);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!fake_nvml_is_gi(gpuInstance) || !info)
        return NVML_ERROR_INVALID_ARGUMENT;
    fake_mig_view_t v;
    if (fake_nvml_mig_view(gpuInstance->gpu, &v) != 0)
        return NVML_ERROR_UNKNOWN;
    const fake_mig_instance_t *g = fake_nvml_view_gi(&v, gpuInstance->gi_id, NULL);
    if (!g)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    info->device = fake_nvml_device(gpuInstance->gpu);
    info->id = g->gi_id;
    info->profileId = g->profile_id;
    info->placement.start = g->start;
    info->placement.size = g->size;
    return NVML_SUCCESS;
}

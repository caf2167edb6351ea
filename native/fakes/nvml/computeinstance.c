/*
 * computeinstance.c: compute instances of the fake NVML and the MIG devices they expose.
 *
 * A GPU instance of G compute slices offers the compute-instance profiles of c = 1, 2, 3, 4, 7 slices with
 * c <= G, floor(G / c) instances each (3 slices are not offered on a 4-slice instance), placed at multiples
 * of c, as nvidia-smi mig -lcip shows on A100/A30. Every compute instance is one MIG device.
 */
#include <stdio.h>
#include <string.h>

#include "nvmlfake.h"

static const unsigned CI_SLICES[NVML_COMPUTE_INSTANCE_PROFILE_COUNT] = {1, 2, 3, 4, 7, 8, 6, 1, 7};

/* Instances of CI profile `index` on a GI of `g` compute slices; 0 when the profile is not offered. */
static unsigned ci_count(unsigned index, unsigned g)
{
    if (index > NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE)
        return 0; /* 8/6-slice and the REV1/NVL variants exist on no emulated GPU */
    unsigned c = CI_SLICES[index];
    if (c > g || (g == 4 && c == 3))
        return 0;
    return g / c;
}

struct ci_ctx {
    const fake_mig_table_t *t;
    const fake_gi_profile_t *gp;  /* profile of the GPU instance */
    fake_mig_view_t v;
    unsigned slot;                /* GI slot in the state */
};

/* Resolve a GI handle to its table, profile and current state. */
static nvmlReturn_t gi_context(nvmlGpuInstance_t gi, struct ci_ctx *cx)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!fake_nvml_is_gi(gi))
        return NVML_ERROR_INVALID_ARGUMENT;
    cx->t = fake_nvml_mig_table(gi->gpu);
    if (!cx->t)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fake_nvml_mig_view(gi->gpu, &cx->v) != 0)
        return NVML_ERROR_UNKNOWN;
    const fake_mig_instance_t *g = fake_nvml_view_gi(&cx->v, gi->gi_id, &cx->slot);
    if (!g)
        return NVML_ERROR_INVALID_ARGUMENT;
    cx->gp = fake_nvml_profile_by_id(cx->t, g->profile_id);
    return cx->gp ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

#define FILL_CI_PROFILE(info, index, cx)                                                                       \
    do {                                                                                                       \
        unsigned c_ = CI_SLICES[index];                                                                        \
        (info)->id = (index);                                                                                  \
        (info)->sliceCount = c_;                                                                               \
        (info)->instanceCount = ci_count((index), (cx)->gp->compute_slices);                                  \
        (info)->multiprocessorCount =                                                                          \
            c_ == (cx)->gp->compute_slices ? (cx)->gp->sm_count : c_ * (cx)->t->sms_per_slice;                 \
        (info)->sharedCopyEngineCount = (cx)->gp->engines[0];                                                  \
        (info)->sharedDecoderCount = (cx)->gp->engines[1];                                                     \
        (info)->sharedEncoderCount = (cx)->gp->engines[2];                                                     \
        (info)->sharedJpegCount = (cx)->gp->engines[3];                                                        \
        (info)->sharedOfaCount = (cx)->gp->engines[4];                                                         \
    } while (0)

static nvmlReturn_t ci_profile_check(nvmlGpuInstance_t gi, unsigned profile, unsigned engProfile, void *info,
                                     struct ci_ctx *cx)
{
    nvmlReturn_t rc = gi_context(gi, cx);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!info || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
        engProfile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    return ci_count(profile, cx->gp->compute_slices) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance,
                                                                   unsigned int profile, unsigned int engProfile,
                                                                   nvmlComputeInstanceProfileInfo_t *info)
{
    struct ci_ctx cx;
    nvmlReturn_t rc = ci_profile_check(gpuInstance, profile, engProfile, info, &cx);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(info, 0, sizeof *info);
    FILL_CI_PROFILE(info, profile, &cx);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance,
                                                                    unsigned int profile, unsigned int engProfile,
                                                                    nvmlComputeInstanceProfileInfo_v2_t *info)
{
    struct ci_ctx cx;
    nvmlReturn_t rc = ci_profile_check(gpuInstance, profile, engProfile, info, &cx);
    if (rc != NVML_SUCCESS)
        return rc;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned c = CI_SLICES[profile];
    if (c == cx.gp->compute_slices)
        snprintf(name, sizeof name, "MIG %s", cx.gp->name);
    else
        snprintf(name, sizeof name, "MIG %uc.%s", c, cx.gp->name);
    unsigned version = info->version;
    if (version == nvmlComputeInstanceProfileInfo_v3) {
        nvmlComputeInstanceProfileInfo_v3_t *v3 = (nvmlComputeInstanceProfileInfo_v3_t *)info;
        memset(v3, 0, sizeof *v3);
        v3->version = version;
        FILL_CI_PROFILE(v3, profile, &cx);
        memcpy(v3->name, name, sizeof name);
        return NVML_SUCCESS;
    }
    if (version != nvmlComputeInstanceProfileInfo_v2)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    info->version = version;
    FILL_CI_PROFILE(info, profile, &cx);
    memcpy(info->name, name, sizeof name);
    return NVML_SUCCESS;
}

struct ci_op {
    unsigned slot, gi_id, profile, count, slices, ci_id;
    nvmlReturn_t rc;
};

/* Lowest free start among multiples of the profile's size, and the lowest free id. */
static int do_create_ci(void *arg, fake_gpu_state_t *st)
{
    struct ci_op *op = arg;
    fake_mig_instance_t *g = &st->gi[op->slot];
    op->rc = NVML_ERROR_INVALID_ARGUMENT;
    if (!g->in_use || g->gi_id != op->gi_id)
        return 0; /* destroyed by another process meanwhile */
    fake_ci_t *cis = st->ci[op->slot];
    unsigned same = 0, used_ids = 0;
    for (unsigned c = 0; c < FAKE_MAX_CI; c++)
        if (cis[c].in_use) {
            same += cis[c].profile_id == op->profile;
            used_ids |= 1u << cis[c].id;
        }
    op->rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (unsigned k = 0; same < op->count && k < op->count; k++) {
        unsigned start = k * op->slices, clash = 0;
        for (unsigned c = 0; c < FAKE_MAX_CI; c++)
            clash |= cis[c].in_use && start < cis[c].start + cis[c].size && cis[c].start < start + op->slices;
        if (clash)
            continue;
        for (unsigned c = 0; c < FAKE_MAX_CI; c++) {
            if (cis[c].in_use)
                continue;
            unsigned id = 0;
            while (used_ids & (1u << id))
                id++;
            cis[c] = (fake_ci_t){1, id, op->profile, start, op->slices};
            g->has_ci = 1;
            g->ci_id = id;
            g->ci_profile_id = op->profile;
            op->ci_id = id;
            op->rc = NVML_SUCCESS;
            return 0;
        }
    }
    return 0;
}

NVML_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                           nvmlComputeInstance_t *computeInstance)
{
    struct ci_ctx cx;
    nvmlReturn_t rc = gi_context(gpuInstance, &cx);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!computeInstance || profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct ci_op op = {.slot = cx.slot, .gi_id = gpuInstance->gi_id, .profile = profileId,
                       .count = ci_count(profileId, cx.gp->compute_slices), .slices = CI_SLICES[profileId]};
    if (!op.count)
        return NVML_ERROR_NOT_SUPPORTED;
    if (fake_state_locked(gpuInstance->gpu, do_create_ci, &op) != 0)
        return NVML_ERROR_UNKNOWN;
    if (op.rc == NVML_SUCCESS) {
        *computeInstance = fake_nvml_ci_handle(gpuInstance->gpu, gpuInstance->gi_id, op.ci_id);
        fake_caps_created(fake_nvml_gpu(fake_nvml_device(gpuInstance->gpu))->minor, gpuInstance->gi_id,
                          (int)op.ci_id);
    }
    return op.rc;
}

static int do_destroy_ci(void *arg, fake_gpu_state_t *st)
{
    struct ci_op *op = arg;
    op->rc = NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned s = 0; s < FAKE_MAX_MIG; s++) {
        if (!st->gi[s].in_use || st->gi[s].gi_id != op->gi_id)
            continue;
        unsigned left = 0;
        for (unsigned c = 0; c < FAKE_MAX_CI; c++) {
            fake_ci_t *ci = &st->ci[s][c];
            if (ci->in_use && ci->id == op->ci_id) {
                memset(ci, 0, sizeof *ci);
                op->rc = NVML_SUCCESS;
            }
            left += ci->in_use;
        }
        st->gi[s].has_ci = left != 0;
    }
    return 0;
}

NVML_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!fake_nvml_is_ci(computeInstance))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct ci_op op = {.gi_id = computeInstance->gi_id, .ci_id = computeInstance->ci_id};
    if (fake_state_locked(computeInstance->gpu, do_destroy_ci, &op) != 0)
        return NVML_ERROR_UNKNOWN;
    if (op.rc == NVML_SUCCESS)
        fake_caps_destroyed(fake_nvml_gpu(fake_nvml_device(computeInstance->gpu))->minor, op.gi_id,
                            (int)op.ci_id);
    return op.rc;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                         nvmlComputeInstance_t *computeInstances,
                                                         unsigned int *count)
{
    struct ci_ctx cx;
    nvmlReturn_t rc = gi_context(gpuInstance, &cx);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!computeInstances || !count || profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (unsigned id = 0; id < FAKE_MAX_CI; id++)
        for (unsigned c = 0; c < FAKE_MAX_CI; c++) {
            const fake_ci_t *ci = &cx.v.ci[cx.slot][c];
            if (ci->in_use && ci->id == id && ci->profile_id == profileId)
                computeInstances[n++] = fake_nvml_ci_handle(gpuInstance->gpu, gpuInstance->gi_id, id);
        }
    *count = n;
    return NVML_SUCCESS;
}

/* The CI named by a handle in a view; NULL when it no longer exists. */
const fake_ci_t *fake_nvml_view_ci(const fake_mig_view_t *v, unsigned gi_id, unsigned ci_id)
{
    unsigned slot;
    if (!fake_nvml_view_gi(v, gi_id, &slot))
        return NULL;
    for (unsigned c = 0; c < FAKE_MAX_CI; c++)
        if (v->ci[slot][c].in_use && v->ci[slot][c].id == ci_id)
            return &v->ci[slot][c];
    return NULL;
}

NVML_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                                    nvmlComputeInstanceInfo_t *info)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!fake_nvml_is_ci(computeInstance) || !info)
        return NVML_ERROR_INVALID_ARGUMENT;
    fake_mig_view_t v;
    if (fake_nvml_mig_view(computeInstance->gpu, &v) != 0)
        return NVML_ERROR_UNKNOWN;
    const fake_ci_t *ci = fake_nvml_view_ci(&v, computeInstance->gi_id, computeInstance->ci_id);
    if (!ci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    info->device = fake_nvml_mig_device(computeInstance->gpu, computeInstance->gi_id, ci->id);
    info->gpuInstance = fake_nvml_gi_handle(computeInstance->gpu, computeInstance->gi_id);
    info->id = ci->id;
    info->profileId = ci->profile_id;
    info->placement.start = ci->start;
    info->placement.size = ci->size;
    return NVML_SUCCESS;
}

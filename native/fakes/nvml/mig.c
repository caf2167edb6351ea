/*
 * mig.c: MIG mode and GPU instances of the fake NVML, after ../shared/reference/mig-profiles.json.
 *
 * Profiles and placements come from the generated table (fakes/common/mig_tables.c). Instances live in the
 * shared state, so they survive process restarts and every process sees the same ones; every change
 * happens under the GPU's state lock, so concurrent creators never corrupt it.
 *
 * Behaviour copied from the driver: creation needs MIG enabled (NOT_SUPPORTED otherwise); a placement
 * that is not one of the profile's possible placements is INVALID_ARGUMENT; an occupied one, or a profile
 * at its instance limit, INSUFFICIENT_RESOURCES; automatic placement takes the free placement with the
 * highest start (what nvidia-smi -cgi shows on A100); GPU instance ids follow the placement tree (7g = 0,
 * halves 1-2, quarters 3-6, eighths 7-14) as observed on A100/H100. Profile info and possible placements
 * answer whether or not MIG is enabled, so an inventory can describe a GPU before enabling MIG.
 */
#include <stdio.h>
#include <string.h>

#include "nvmlfake.h"

nvmlReturn_t fake_nvml_mig_parent(nvmlDevice_t dev, const fake_mig_table_t **t)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    const fake_gpu_t *g = fake_nvml_gpu(dev);
    if (!g || dev->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *t = fake_nvml_mig_table(g->index);
    return *t ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

static int snapshot(void *arg, fake_gpu_state_t *st)
{
    fake_mig_view_t *v = arg;
    v->current = st->mig_current;
    v->pending = st->mig_pending;
    memcpy(v->gi, st->gi, sizeof v->gi);
    memcpy(v->ci, st->ci, sizeof v->ci);
    v->ngi = 0;
    for (unsigned i = 0; i < FAKE_MAX_MIG; i++)
        v->ngi += st->gi[i].in_use != 0;
    return 0;
}

int fake_nvml_mig_view(unsigned gpu, fake_mig_view_t *view)
{
    memset(view, 0, sizeof *view);
    return fake_state_locked(gpu, snapshot, view);
}

const fake_mig_instance_t *fake_nvml_view_gi(const fake_mig_view_t *v, unsigned gi_id, unsigned *slot)
{
    for (unsigned i = 0; i < FAKE_MAX_MIG; i++)
        if (v->gi[i].in_use && v->gi[i].gi_id == gi_id) {
            if (slot)
                *slot = i;
            return &v->gi[i];
        }
    return NULL;
}

NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    const fake_mig_table_t *t;
    nvmlReturn_t rc = fake_nvml_mig_parent(device, &t);
    if (rc == NVML_SUCCESS && (!currentMode || !pendingMode))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    fake_mig_view_t v;
    if (fake_nvml_mig_view(device->gpu, &v) != 0)
        return NVML_ERROR_UNKNOWN;
    *currentMode = v.current;
    *pendingMode = v.pending;
    return NVML_SUCCESS;
}

struct set_mode { unsigned mode; nvmlReturn_t activation; };

/* The mode becomes pending; it is activated unless a process holds memory on the GPU (the driver cannot
 * reset a GPU in use) or, to disable, GPU instances remain. */
static int do_set_mode(void *arg, fake_gpu_state_t *st)
{
    struct set_mode *op = arg;
    st->mig_pending = op->mode;
    fake_proc_sweep(st);
    int busy = 0;
    for (unsigned i = 0; i < FAKE_MAX_PROCS; i++)
        busy |= st->procs[i].pid && st->procs[i].mem_bytes;
    for (unsigned i = 0; op->mode == NVML_DEVICE_MIG_DISABLE && i < FAKE_MAX_MIG; i++)
        busy |= st->gi[i].in_use != 0;
    if (busy && st->mig_current != op->mode) {
        op->activation = NVML_ERROR_IN_USE;
        return 0;
    }
    st->mig_current = op->mode;
    op->activation = NVML_SUCCESS;
    return 0;
}

NVML_API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus)
{
    const fake_mig_table_t *t;
    nvmlReturn_t rc = fake_nvml_mig_parent(device, &t);
    if (rc == NVML_ERROR_NOT_SUPPORTED && fake_nvml_gpu(device) && activationStatus &&
        (mode == NVML_DEVICE_MIG_DISABLE || mode == NVML_DEVICE_MIG_ENABLE))
        return rc;
    if (rc == NVML_SUCCESS && (!activationStatus || (mode != NVML_DEVICE_MIG_DISABLE && mode != NVML_DEVICE_MIG_ENABLE)))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    struct set_mode op = {mode, NVML_SUCCESS};
    if (fake_state_locked(device->gpu, do_set_mode, &op) != 0)
        return NVML_ERROR_UNKNOWN;
    *activationStatus = op.activation;
    return NVML_SUCCESS;
}

/* --- profiles and placements ---------------------------------------------------------------------- */

static const fake_gi_profile_t *profile_by_index(const fake_mig_table_t *t, unsigned index)
{
    for (size_t i = 0; i < t->nprofiles; i++)
        if (t->profiles[i].index == index)
            return &t->profiles[i];
    return NULL;
}

/* The fields shared by every version of the profile info structure. */
#define FILL_PROFILE(info, p)                                                                                  \
    do {                                                                                                       \
        (info)->id = (p)->id;                                                                                  \
        (info)->sliceCount = (p)->compute_slices;                                                              \
        (info)->instanceCount = (p)->max_instances;                                                            \
        (info)->multiprocessorCount = (p)->sm_count;                                                           \
        (info)->copyEngineCount = (p)->engines[0];                                                             \
        (info)->decoderCount = (p)->engines[1];                                                                \
        (info)->encoderCount = (p)->engines[2];                                                                \
        (info)->jpegCount = (p)->engines[3];                                                                   \
        (info)->ofaCount = (p)->engines[4];                                                                    \
        (info)->memorySizeMB = (p)->memory_mib;                                                                \
    } while (0)

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                          nvmlGpuInstanceProfileInfo_t *info)
{
    const fake_mig_table_t *t;
    nvmlReturn_t rc = fake_nvml_mig_parent(device, &t);
    if (rc == NVML_SUCCESS && (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    const fake_gi_profile_t *p = profile_by_index(t, profile);
    if (!p)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    FILL_PROFILE(info, p);
    info->isP2pSupported = p->p2p;
    return NVML_SUCCESS;
}

static nvmlReturn_t profile_info_v(const fake_gi_profile_t *p, nvmlGpuInstanceProfileInfo_v2_t *info)
{
    unsigned version = info->version;
    if (version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *)info;
        memset(v3, 0, sizeof *v3);
        v3->version = version;
        FILL_PROFILE(v3, p);
        snprintf(v3->name, sizeof v3->name, "MIG %s", p->name);
        v3->capabilities = (p->p2p ? NVML_GPU_INSTANCE_PROFILE_CAPS_P2P : 0) |
                           (strstr(p->name, "+gfx") ? NVML_GPU_INSTANCE_PROFILE_CAPS_GFX : 0);
        return NVML_SUCCESS;
    }
    if (version != nvmlGpuInstanceProfileInfo_v2)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    info->version = version;
    FILL_PROFILE(info, p);
    info->isP2pSupported = p->p2p;
    snprintf(info->name, sizeof info->name, "MIG %s", p->name);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                           nvmlGpuInstanceProfileInfo_v2_t *info)
{
    const fake_mig_table_t *t;
    nvmlReturn_t rc = fake_nvml_mig_parent(device, &t);
    if (rc == NVML_SUCCESS && (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    const fake_gi_profile_t *p = profile_by_index(t, profile);
    return p ? profile_info_v(p, info) : NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId,
                                                               nvmlGpuInstanceProfileInfo_v2_t *info)
{
    const fake_mig_table_t *t;
    nvmlReturn_t rc = fake_nvml_mig_parent(device, &t);
    if (rc == NVML_SUCCESS && !info)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    const fake_gi_profile_t *p = fake_nvml_profile_by_id(t, profileId);
    return p ? profile_info_v(p, info) : NVML_ERROR_INVALID_ARGUMENT;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                                    nvmlGpuInstancePlacement_t *placements,
                                                                    unsigned int *count)
{
    const fake_mig_table_t *t;
    nvmlReturn_t rc = fake_nvml_mig_parent(device, &t);
    if (rc == NVML_SUCCESS && !count)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    const fake_gi_profile_t *p = fake_nvml_profile_by_id(t, profileId);
    if (!p)
        return NVML_ERROR_NOT_SUPPORTED;
    /* A caller-given non-zero count too small for the list is refused rather than overrun. */
    if (placements && *count && *count < p->nplacements) {
        *count = p->nplacements;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; placements && i < p->nplacements; i++) {
        placements[i].start = p->placements[i].start;
        placements[i].size = p->placements[i].size;
    }
    *count = p->nplacements;
    return NVML_SUCCESS;
}

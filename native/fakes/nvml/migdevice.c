/*
 * migdevice.c: MIG device handles of the fake NVML: enumeration by index and the MIG-only queries.
 *
 * MIG devices of a GPU are its compute instances, indexed in (GPU instance id, compute instance id)
 * order; the index space has one entry per compute slice of the GPU (GetMaxMigDeviceCount).
 */
#include <string.h>

#include "nvmlfake.h"

/* Lists the (gi_id, ci_id) of live compute instances in index order; returns the count. */
static unsigned list_mig(const fake_mig_view_t *v, unsigned ids[][2], unsigned max)
{
    unsigned n = 0;
    for (unsigned gi = 0; gi < FAKE_GI_IDS; gi++)
        for (unsigned ci = 0; ci < FAKE_MAX_CI; ci++)
            if (fake_nvml_view_ci(v, gi, ci) && n < max) {
                ids[n][0] = gi;
                ids[n][1] = ci;
                n++;
            }
    return n;
}

nvmlReturn_t fake_nvml_mig_lookup(nvmlDevice_t dev, const fake_gi_profile_t **gp, fake_ci_t *ci, unsigned *index)
{
    fake_mig_view_t v;
    if (!fake_nvml_gpu(dev) || !dev->is_mig || fake_nvml_mig_view(dev->gpu, &v) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    const fake_ci_t *c = fake_nvml_view_ci(&v, dev->gi_id, dev->ci_id);
    const fake_mig_instance_t *g = fake_nvml_view_gi(&v, dev->gi_id, NULL);
    if (!c || !g)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gp)
        *gp = fake_nvml_profile_by_id(fake_nvml_mig_table(dev->gpu), g->profile_id);
    if (ci)
        *ci = *c;
    if (index) {
        unsigned ids[FAKE_MAX_MIG * FAKE_MAX_CI][2], n = list_mig(&v, ids, FAKE_MAX_MIG * FAKE_MAX_CI);
        for (unsigned i = 0; i < n; i++)
            if (ids[i][0] == dev->gi_id && ids[i][1] == dev->ci_id)
                *index = i;
    }
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    const fake_mig_table_t *t;
    nvmlReturn_t rc = fake_nvml_mig_parent(device, &t);
    if (rc == NVML_SUCCESS && !count)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    fake_mig_view_t v;
    if (fake_nvml_mig_view(device->gpu, &v) != 0)
        return NVML_ERROR_UNKNOWN;
    *count = v.current == NVML_DEVICE_MIG_ENABLE ? t->compute_slices : 0;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                          nvmlDevice_t *migDevice)
{
    const fake_mig_table_t *t;
    nvmlReturn_t rc = fake_nvml_mig_parent(device, &t);
    if (rc == NVML_SUCCESS && !migDevice)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    fake_mig_view_t v;
    if (fake_nvml_mig_view(device->gpu, &v) != 0)
        return NVML_ERROR_UNKNOWN;
    if (v.current != NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= t->compute_slices)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned ids[FAKE_MAX_MIG * FAKE_MAX_CI][2], n = list_mig(&v, ids, FAKE_MAX_MIG * FAKE_MAX_CI);
    if (index >= n)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = fake_nvml_mig_device(device->gpu, ids[index][0], ids[index][1]);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!device || !fake_nvml_gpu(migDevice) || !migDevice->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = fake_nvml_device(migDevice->gpu);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!isMigDevice || !fake_nvml_gpu(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = device->is_mig ? 1 : 0;
    return NVML_SUCCESS;
}

static nvmlReturn_t mig_ids(nvmlDevice_t device, unsigned *out, int want_ci)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!out || !fake_nvml_gpu(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    rc = fake_nvml_mig_lookup(device, NULL, NULL, NULL);
    if (rc == NVML_SUCCESS)
        *out = want_ci ? device->ci_id : device->gi_id;
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return mig_ids(device, id, 0);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return mig_ids(device, id, 1);
}

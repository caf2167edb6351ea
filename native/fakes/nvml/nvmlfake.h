/*
 * nvmlfake.h: private glue of the fake libnvidia-ml.so.1: handle objects and argument checks shared by
 * the sources in fakes/nvml. Handles are pointers into static arrays, one per GPU, GPU instance, compute instance
 * and MIG device, so they stay valid for the life of the process (as NVML's do) and can be checked.
 */
#ifndef CARVE_NVMLFAKE_H
#define CARVE_NVMLFAKE_H

#include <nvml.h>

#include "common/fakegpu.h"
#include "common/fakestate.h"
#include "common/migtable.h"

#define NVML_API FAKE_EXPORT
#define FAKE_GI_IDS 16        /* GPU instance ids are 0..14 (a binary tree over <= 8 placement groups) */
#define CARVE_FAKE_VERSION 2  /* returned by carveFakeVersion(): bump on behaviour changes tests rely on */

struct nvmlDevice_st {
    unsigned gpu;
    int is_mig;               /* MIG device handle: gi_id/ci_id name it */
    unsigned gi_id, ci_id;
};

struct nvmlGpuInstance_st {
    unsigned gpu, gi_id;
};

struct nvmlComputeInstance_st {
    unsigned gpu, gi_id, ci_id;
};

/* NVML_SUCCESS when nvmlInit succeeded and has not been shut down. */
nvmlReturn_t fake_nvml_ready(void);

/* The major number of the emulated driver (CARVE_FAKE_DRIVER_VERSION), e.g. 580. */
unsigned fake_nvml_driver_major(void);
/* Drivers from this major on have cgroup memory limits (nvmlDeviceSetMemoryLimits_v1). */
#define FAKE_MEMORY_LIMITS_MAJOR 615

/* Resolve a handle, NULL when it is not one of ours. */
const fake_gpu_t *fake_nvml_gpu(nvmlDevice_t dev);
nvmlDevice_t fake_nvml_device(unsigned gpu);
nvmlDevice_t fake_nvml_mig_device(unsigned gpu, unsigned gi_id, unsigned ci_id);
nvmlGpuInstance_t fake_nvml_gi_handle(unsigned gpu, unsigned gi_id);
nvmlComputeInstance_t fake_nvml_ci_handle(unsigned gpu, unsigned gi_id, unsigned ci_id);
int fake_nvml_is_gi(nvmlGpuInstance_t gi);
int fake_nvml_is_ci(nvmlComputeInstance_t ci);

/* A whole-GPU handle of ours and its MIG table (mig.c): NVML_SUCCESS, else the error the call returns
 * (not initialised, INVALID_ARGUMENT for a foreign or MIG handle, NOT_SUPPORTED without MIG). */
nvmlReturn_t fake_nvml_mig_parent(nvmlDevice_t dev, const fake_mig_table_t **t);

/* The MIG table of a GPU (NULL when not MIG capable) and a profile in it by id or index. */
const fake_mig_table_t *fake_nvml_mig_table(unsigned gpu);
const fake_gi_profile_t *fake_nvml_profile_by_id(const fake_mig_table_t *t, unsigned id);

/* MIG state snapshots under the GPU's lock (mig.c). */
typedef struct fake_mig_view {
    unsigned current, pending;
    unsigned ngi;
    fake_mig_instance_t gi[FAKE_MAX_MIG];
    fake_ci_t ci[FAKE_MAX_MIG][FAKE_MAX_CI];
} fake_mig_view_t;
int fake_nvml_mig_view(unsigned gpu, fake_mig_view_t *view);
/* The GI with this id in a view, NULL when absent. */
const fake_mig_instance_t *fake_nvml_view_gi(const fake_mig_view_t *v, unsigned gi_id, unsigned *slot);

/* The compute instance with these ids in a view, NULL when absent. */
const fake_ci_t *fake_nvml_view_ci(const fake_mig_view_t *v, unsigned gi_id, unsigned ci_id);

/* A live MIG device handle's GPU-instance profile and compute instance (for name, memory, attributes);
 * NVML_ERROR_INVALID_ARGUMENT when the instance behind it is gone. `index` gets its MIG device index. */
nvmlReturn_t fake_nvml_mig_lookup(nvmlDevice_t dev, const fake_gi_profile_t **gp, fake_ci_t *ci, unsigned *index);

/* Copies `s` into buf of `len`: NVML_ERROR_INSUFFICIENT_SIZE when it does not fit. */
nvmlReturn_t fake_nvml_copy_str(char *buf, unsigned len, const char *s);

/* MIG device UUID "MIG-xxxxxxxx-...": deterministic from the parent UUID and the instance ids. */
void fake_nvml_mig_uuid(const fake_gpu_t *g, unsigned gi_id, unsigned ci_id, char *out, size_t len);

/* capsfiles.c: MIG capability files under $CARVE_FAKE_PROC_ROOT (ci < 0: the GPU instance's own). */
void fake_caps_created(unsigned gpu_minor, unsigned gi, int ci);
void fake_caps_destroyed(unsigned gpu_minor, unsigned gi, int ci);

/* device.c: is `index` listed in the file named by env `var` (read at every call); GPU loss
 * (CARVE_FAKE_LOST_FILE). */
int fake_nvml_index_listed(const char *var, unsigned int index);
int fake_nvml_gpu_lost(unsigned int index);

#endif

/*
 * compat.c (fake NVML): the unversioned v1 entry points that behave as their versioned successors for the
 * fake's GPUs (nvml.h's NVML_NO_UNVERSIONED_FUNC_DEFS section): torch.cuda.device_count() calls nvmlInit and
 * nvmlDeviceGetCount_v2 through ctypes to count GPUs without initialising CUDA, and vLLM relies on it to
 * fork safely (cuda-runtime-facts.md §8); PyTorch's out-of-memory message lists processes with the v1
 * nvmlDeviceGetComputeRunningProcesses. The other v1 names are stubs (stubs.c).
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <stdlib.h>

#include "nvmlfake.h"

NVML_API nvmlReturn_t nvmlInit(void)
{
    return nvmlInit_v2();
}

/* v1 counted only the devices the caller may use: all of the fake's. */
NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* v1 process records (pid, memory) from the v2 ones: PyTorch names the processes on a GPU in its
 * out-of-memory message through the unversioned name. */
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                           nvmlProcessInfo_v1_t *infos)
{
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = infos ? *infoCount : 0;
    nvmlProcessInfo_v2_t *v2 = n ? calloc(n, sizeof *v2) : NULL;
    if (n && !v2)
        return NVML_ERROR_MEMORY;
    nvmlReturn_t rc = nvmlDeviceGetComputeRunningProcesses_v2(device, infoCount, v2);
    if (rc == NVML_SUCCESS)
        for (unsigned i = 0; i < *infoCount && i < n; i++)
            infos[i] = (nvmlProcessInfo_v1_t){.pid = v2[i].pid, .usedGpuMemory = v2[i].usedGpuMemory};
    free(v2);
    return rc;
}

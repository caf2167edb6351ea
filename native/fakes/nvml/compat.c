/*
 * compat.c (fake NVML): the unversioned v1 entry points that behave as their versioned successors for the
 * fake's GPUs (nvml.h's NVML_NO_UNVERSIONED_FUNC_DEFS section): torch.cuda.device_count() calls nvmlInit and
 * nvmlDeviceGetCount_v2 through ctypes to count GPUs without initialising CUDA, and vLLM relies on it to
 * fork safely (cuda-runtime-facts.md §8). The other v1 names are stubs (stubs.c).
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
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

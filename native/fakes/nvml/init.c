/*
 * init.c: library life cycle and system queries of the fake libnvidia-ml.so.1.
 *
 * nvmlInit parses CARVE_FAKE_GPUS and opens the shared state; a bad topology fails it with
 * NVML_ERROR_UNKNOWN after one line on stderr naming the bad token and the known models. Init and shutdown
 * are reference counted like NVML's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvmlfake.h"

static int g_refs;

static const char *driver_version(void)
{
    const char *v = getenv("CARVE_FAKE_DRIVER_VERSION");
    return v && *v ? v : "580.95.05";
}

static int cuda_version(void)
{
    const char *v = getenv("CARVE_FAKE_CUDA_VERSION");
    return v && *v ? atoi(v) : 13000;
}

unsigned fake_nvml_driver_major(void)
{
    return (unsigned)strtoul(driver_version(), NULL, 10);
}

nvmlReturn_t fake_nvml_ready(void)
{
    return __atomic_load_n(&g_refs, __ATOMIC_ACQUIRE) > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    const char *err = NULL;
    if (fake_topology(NULL, NULL, &err) != 0 || fake_state_init(&err) != 0) {
        fake_warn_once(1, "%s", err);
        return NVML_ERROR_UNKNOWN;
    }
    __atomic_add_fetch(&g_refs, 1, __ATOMIC_ACQ_REL);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
    int refs = __atomic_load_n(&g_refs, __ATOMIC_ACQUIRE);
    while (refs > 0 && !__atomic_compare_exchange_n(&g_refs, &refs, refs - 1, 0, __ATOMIC_ACQ_REL,
                                                     __ATOMIC_ACQUIRE))
        ;
    return refs > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

NVML_API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt request issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

nvmlReturn_t fake_nvml_copy_str(char *buf, unsigned len, const char *s)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t rc = fake_nvml_ready();
    return rc != NVML_SUCCESS ? rc : fake_nvml_copy_str(version, length, driver_version());
}

NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    char buf[96];
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    snprintf(buf, sizeof buf, "%d.%s", cuda_version() / 1000, driver_version()); /* "13.580.95.05" */
    return fake_nvml_copy_str(version, length, buf);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_version();
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    return nvmlSystemGetCudaDriverVersion(version);
}

/* Not an NVML function: lets tests and tools tell the fake from a real driver. */
NVML_API int carveFakeVersion(void)
{
    return CARVE_FAKE_VERSION;
}

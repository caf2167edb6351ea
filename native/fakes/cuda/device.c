/*
 * device.c (fake libcuda): initialisation, CUDA_VISIBLE_DEVICES, device queries, contexts, error strings
 * and the test hooks (carveFakeCudaLastCall, carveFakeKernel).
 */
#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#undef cuDeviceGetUuid

__thread const char *fc_last_call;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_ok;                       /* topology parsed and at least one device visible */
static int g_init;                     /* cuInit succeeded */
static int g_count;
static unsigned g_map[FAKE_MAX_GPUS];  /* ordinal -> fake GPU index */
static const fake_gpu_t *g_gpus;

uint64_t fc_env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    return *end ? dflt : (uint64_t)x;
}

int fc_trace(void)
{
    static int on = -1; /* read once; a benign race writes the same value */
    if (on < 0) {
        const char *v = getenv("CARVE_FAKE_CUDA_LOG");
        on = v && *v && strcmp(v, "0") != 0;
    }
    return on;
}

void fc_log(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fake libcuda: %s\n", line);
}

/* CUDA_VISIBLE_DEVICES: comma-separated indices or (prefixes of) UUIDs; parsing stops at the first
 * token that names no device, as the real driver does. */
static void parse_visible(unsigned total)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (!cvd) {
        for (unsigned i = 0; i < total; i++)
            g_map[g_count++] = i;
        return;
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", cvd);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*tok))
            tok++;
        int found = -1;
        if (isdigit((unsigned char)*tok)) {
            char *end;
            long idx = strtol(tok, &end, 10);
            if (*end == '\0' && idx >= 0 && (unsigned long)idx < total)
                found = (int)idx;
        } else if (strncmp(tok, "GPU-", 4) == 0 && strlen(tok) > 4) {
            for (unsigned i = 0; i < total; i++)
                if (strncmp(g_gpus[i].uuid, tok, strlen(tok)) == 0)
                    found = (int)i;
        }
        if (found < 0 || g_count >= FAKE_MAX_GPUS)
            break;
        g_map[g_count++] = (unsigned)found;
    }
}

static void init_once(void)
{
    unsigned total = 0;
    const char *err = NULL;
    if (fake_topology(&g_gpus, &total, &err) != 0) {
        fprintf(stderr, "fake libcuda: %s\n", err ? err : "bad CARVE_FAKE_GPUS");
        return;
    }
    parse_visible(total);
    fc_ctx_init_primary(g_count);
    g_ok = g_count > 0;
}

int fc_initialized(void) { return g_init; }
int fc_device_count(void) { return g_count; }

const fake_gpu_t *fc_gpu(int ordinal)
{
    if (!g_init || ordinal < 0 || ordinal >= g_count)
        return NULL;
    return &g_gpus[g_map[ordinal]];
}


FAKE_EXPORT CUresult cuInit(unsigned int flags)
{
    FC_CALLED("cuInit");
    if (flags != 0) /* "Currently, the Flags parameter must be 0" (CUDA Driver API, cuInit) */
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&g_once, init_once);
    if (!g_ok)
        return CUDA_ERROR_NO_DEVICE;
    CUresult rc = fc_mps_connect();
    if (rc != CUDA_SUCCESS)
        return rc;
    g_init = 1;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDriverGetVersion(int *version)
{
    FC_CALLED("cuDriverGetVersion");
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = (int)fc_env_u64("CARVE_FAKE_CUDA_VERSION", 13000);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetCount(int *count)
{
    FC_CALLED("cuDeviceGetCount");
    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = g_count;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    FC_CALLED("cuDeviceGet");
    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!fc_gpu(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    FC_CALLED("cuDeviceGetName");
    const fake_gpu_t *g = fc_gpu(dev);
    if (!g)
        return g_init ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", g->model->name);
    return CUDA_SUCCESS;
}

void fc_device_uuid(int ordinal, uint8_t out[16])
{
    memset(out, 0, 16);
    const fake_gpu_t *g = fc_gpu(ordinal);
    if (!g)
        return;
    const char *p = g->uuid + 4; /* "GPU-" */
    for (int i = 0; i < 16 && *p; i++) {
        if (*p == '-')
            p++;
        unsigned v = 0;
        sscanf(p, "%2x", &v);
        out[i] = (uint8_t)v;
        p += 2;
    }
}

/* From the NVML bus id "00000000:3B:00.0": the same domain, bus and device NVML reports. */
void fc_device_pci(int ordinal, int32_t *domain, int32_t *bus, int32_t *device)
{
    unsigned d = 0, b = 0, s = 0, f = 0;
    const fake_gpu_t *g = fc_gpu(ordinal);
    if (g)
        sscanf(g->pci_bus_id, "%x:%x:%x.%x", &d, &b, &s, &f);
    *domain = (int32_t)d;
    *bus = (int32_t)b;
    *device = (int32_t)s;
}

static CUresult get_uuid(CUuuid *uuid, CUdevice dev)
{
    if (!fc_gpu(dev))
        return g_init ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    fc_device_uuid(dev, (uint8_t *)uuid->bytes);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    FC_CALLED("cuDeviceGetUuid");
    return get_uuid(uuid, dev);
}

FAKE_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    FC_CALLED("cuDeviceGetUuid_v2");
    return get_uuid(uuid, dev);
}

FAKE_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    FC_CALLED("cuDeviceTotalMem_v2");
    const fake_gpu_t *g = fc_gpu(dev);
    if (!g)
        return g_init ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = g->model->memory_bytes;
    return CUDA_SUCCESS;
}

/* CUDA 2.0's 32-bit variant: the size, saturated. */
FAKE_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    FC_CALLED("cuDeviceTotalMem");
    const fake_gpu_t *g = fc_gpu(dev);
    if (!g)
        return g_init ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = g->model->memory_bytes > 0xffffffffull ? 0xffffffffu : (unsigned)g->model->memory_bytes;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    FC_CALLED("cuDeviceGetAttribute");
    const fake_gpu_t *g = fc_gpu(dev);
    if (!g)
        return fc_initialized() ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = fc_attribute(g, dev, attrib);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetProperties(CUdevprop *prop, CUdevice dev)
{
    FC_CALLED("cuDeviceGetProperties");
    const fake_gpu_t *g = fc_gpu(dev);
    if (!g)
        return fc_initialized() ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    *prop = (CUdevprop){
        .maxThreadsPerBlock = 1024,
        .maxThreadsDim = {1024, 1024, 64},
        .maxGridSize = {2147483647, 65535, 65535},
        .sharedMemPerBlock = 49152,
        .totalConstantMemory = 65536,
        .SIMDWidth = 32,
        .memPitch = 2147483647,
        .regsPerBlock = 65536,
        .clockRate = fc_attribute(g, dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
        .textureAlign = 512,
    };
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    FC_CALLED("cuDeviceComputeCapability");
    const fake_gpu_t *g = fc_gpu(dev);
    if (!g)
        return fc_initialized() ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    *major = g->model->cc_major;
    *minor = g->model->cc_minor;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    FC_CALLED("cuDeviceGetPCIBusId");
    const fake_gpu_t *g = fc_gpu(dev);
    if (!g)
        return fc_initialized() ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    int32_t domain, bus, device;
    fc_device_pci(dev, &domain, &bus, &device);
    snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.0", (unsigned)domain, (unsigned)bus, (unsigned)device);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    FC_CALLED("cuDeviceGetByPCIBusId");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dev || !pciBusId)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned d = 0, b = 0, s = 0, f = 0;
    if (sscanf(pciBusId, "%x:%x:%x.%x", &d, &b, &s, &f) < 3)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < fc_device_count(); i++) {
        int32_t domain, bus, device;
        fc_device_pci(i, &domain, &bus, &device);
        if ((unsigned)domain == d && (unsigned)bus == b && (unsigned)device == s) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

FAKE_EXPORT CUresult cuDeviceGetLuid(char *luid, unsigned int *mask, CUdevice dev)
{
    FC_CALLED("cuDeviceGetLuid");
    return CUDA_ERROR_NOT_SUPPORTED; /* Windows only */
}

FAKE_EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
    FC_CALLED("cuDeviceCanAccessPeer");
    if (!fc_gpu(dev) || !fc_gpu(peer))
        return fc_initialized() ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!can)
        return CUDA_ERROR_INVALID_VALUE;
    *can = 0; /* no NVLink or P2P between fake GPUs */
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice src, CUdevice dst)
{
    FC_CALLED("cuDeviceGetP2PAttribute");
    if (!fc_gpu(src) || !fc_gpu(dst))
        return fc_initialized() ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    *value = 0;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *w, CUarray_format fmt, unsigned n, CUdevice dev)
{
    FC_CALLED("cuDeviceGetTexture1DLinearMaxWidth");
    if (!w)
        return CUDA_ERROR_INVALID_VALUE;
    *w = 1u << 28;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    FC_CALLED("cuDeviceGetDefaultMemPool");
    return fc_pool_default(pool, dev);
}

FAKE_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    FC_CALLED("cuDeviceGetMemPool");
    return fc_pool_current(pool, dev);
}

FAKE_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    FC_CALLED("cuDeviceSetMemPool");
    return fc_pool_set_current(dev, pool);
}

/* --- errors -------------------------------------------------------------------------------------- */

static const struct {
    CUresult code;
    const char *name, *text;
} g_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
     "the graph update was not performed because it included changes which violated constraints specific to "
     "instantiated graph update"},
    {CUDA_ERROR_MPS_SERVER_NOT_READY, "CUDA_ERROR_MPS_SERVER_NOT_READY", "MPS client failed to connect to the MPS "
     "control daemon or the MPS server"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static int error_index(CUresult code)
{
    for (unsigned i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].code == code)
            return (int)i;
    return -1;
}

FAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char **str)
{
    FC_CALLED("cuGetErrorString");
    int i = error_index(error);
    if (i < 0 || !str)
        return CUDA_ERROR_INVALID_VALUE;
    *str = g_errors[i].text;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char **str)
{
    FC_CALLED("cuGetErrorName");
    int i = error_index(error);
    if (i < 0 || !str)
        return CUDA_ERROR_INVALID_VALUE;
    *str = g_errors[i].name;
    return CUDA_SUCCESS;
}

/* --- test hooks ---------------------------------------------------------------------------------- */

/* The entry point of this fake that the calling thread reached last ("" when none). */
FAKE_EXPORT const char *carveFakeCudaLastCall(void)
{
    return fc_last_call ? fc_last_call : "";
}

FAKE_EXPORT void carveFakeCudaResetLastCall(void)
{
    fc_last_call = NULL;
}

/* hidden aliases: cuGetProcAddress hands out these, never addresses an interposer could replace */
FC_ALIAS(cuInit)
FC_ALIAS(cuDriverGetVersion)
FC_ALIAS(cuDeviceGet)
FC_ALIAS(cuDeviceGetCount)
FC_ALIAS(cuDeviceGetName)
FC_ALIAS(cuDeviceGetUuid)
FC_ALIAS(cuDeviceGetUuid_v2)
FC_ALIAS(cuDeviceTotalMem_v2)
FC_ALIAS(cuDeviceTotalMem)
FC_ALIAS(cuDeviceGetAttribute)
FC_ALIAS(cuDeviceGetProperties)
FC_ALIAS(cuDeviceComputeCapability)
FC_ALIAS(cuDeviceGetPCIBusId)
FC_ALIAS(cuDeviceGetByPCIBusId)
FC_ALIAS(cuDeviceGetLuid)
FC_ALIAS(cuDeviceCanAccessPeer)
FC_ALIAS(cuDeviceGetP2PAttribute)
FC_ALIAS(cuDeviceGetTexture1DLinearMaxWidth)
FC_ALIAS(cuDeviceGetDefaultMemPool)
FC_ALIAS(cuDeviceGetMemPool)
FC_ALIAS(cuDeviceSetMemPool)
FC_ALIAS(cuGetErrorString)
FC_ALIAS(cuGetErrorName)

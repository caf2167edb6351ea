/*
 * device.c (fake libcuda): initialisation, CUDA_VISIBLE_DEVICES, device queries, contexts, error strings
 * and the test hooks (carveFakeCudaLastCall, carveFakeKernel).
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#undef cuDeviceGetUuid

__thread const char *fc_last_call;

#define FC_CTX_MAGIC 0x43545846u

typedef struct fc_ctx {
    uint32_t magic;
    int ordinal;
    int primary;
    int refs;
} fc_ctx_t;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_ok;                       /* topology parsed and at least one device visible */
static int g_init;                     /* cuInit succeeded */
static int g_count;
static unsigned g_map[FAKE_MAX_GPUS];  /* ordinal -> fake GPU index */
static const fake_gpu_t *g_gpus;
static fc_ctx_t g_primary[FAKE_MAX_GPUS];
static __thread fc_ctx_t *tls_ctx;

uint64_t fc_env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    return *end ? dflt : (uint64_t)x;
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
    for (int i = 0; i < g_count; i++)
        g_primary[i] = (fc_ctx_t){.magic = FC_CTX_MAGIC, .ordinal = i, .primary = 1};
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

int fc_current_ordinal(void) { return tls_ctx ? tls_ctx->ordinal : -1; }

CUresult fc_check_ctx(int *ordinal)
{
    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!tls_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    *ordinal = tls_ctx->ordinal;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuInit(unsigned int flags)
{
    FC_CALLED("cuInit");
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
    *device = ordinal;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    FC_CALLED("cuDeviceGetName");
    const fake_gpu_t *g = fc_gpu(dev);
    if (!g)
        return g_init ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    snprintf(name, (size_t)len, "%s", g->model->name);
    return CUDA_SUCCESS;
}

static CUresult get_uuid(CUuuid *uuid, CUdevice dev)
{
    const fake_gpu_t *g = fc_gpu(dev);
    if (!g)
        return g_init ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    const char *p = g->uuid + 4; /* "GPU-" */
    for (int i = 0; i < 16 && *p; i++) {
        if (*p == '-')
            p++;
        unsigned v = 0;
        sscanf(p, "%2x", &v);
        uuid->bytes[i] = (char)v;
        p += 2;
    }
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
    *bytes = g->model->memory_bytes;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    FC_CALLED("cuDeviceGetAttribute");
    const fake_gpu_t *g = fc_gpu(dev);
    if (!g)
        return g_init ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = (int)g->model->multiprocessors; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = g->model->cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = g->model->cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: *pi = (int)fc_env_u64("CARVE_FAKE_PITCH_ALIGN", 512); break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = (int)g->minor; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *pi = 1; break;
    default: *pi = 0; break;
    }
    return CUDA_SUCCESS;
}

/* --- contexts ------------------------------------------------------------------------------------ */

FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    FC_CALLED("cuDevicePrimaryCtxRetain");
    if (!fc_gpu(dev))
        return g_init ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    __atomic_add_fetch(&g_primary[dev].refs, 1, __ATOMIC_RELAXED);
    *pctx = (CUcontext)&g_primary[dev];
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    FC_CALLED("cuDevicePrimaryCtxRelease_v2");
    if (!fc_gpu(dev))
        return g_init ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    __atomic_sub_fetch(&g_primary[dev].refs, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, CUdevice dev)
{
    if (!fc_gpu(dev))
        return g_init ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    fc_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *c = (fc_ctx_t){.magic = FC_CTX_MAGIC, .ordinal = dev, .refs = 1};
    tls_ctx = c; /* a created context becomes current, as in the real driver */
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    FC_CALLED("cuCtxCreate_v2");
    return ctx_create(pctx, dev);
}

FAKE_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    FC_CALLED("cuCtxCreate_v4");
    return ctx_create(pctx, dev);
}

FAKE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    FC_CALLED("cuCtxDestroy_v2");
    fc_ctx_t *c = (fc_ctx_t *)ctx;
    if (!c || c->magic != FC_CTX_MAGIC || c->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_ctx == c)
        tls_ctx = NULL;
    c->magic = 0;
    free(c);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    FC_CALLED("cuCtxSetCurrent");
    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    fc_ctx_t *c = (fc_ctx_t *)ctx;
    if (c && c->magic != FC_CTX_MAGIC)
        return CUDA_ERROR_INVALID_CONTEXT;
    tls_ctx = c;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    FC_CALLED("cuCtxGetCurrent");
    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    *pctx = (CUcontext)tls_ctx;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    FC_CALLED("cuCtxGetDevice");
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc == CUDA_SUCCESS)
        *device = ordinal;
    return rc;
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
FC_ALIAS(cuDeviceGetAttribute)
FC_ALIAS(cuDevicePrimaryCtxRetain)
FC_ALIAS(cuDevicePrimaryCtxRelease_v2)
FC_ALIAS(cuCtxCreate_v2)
FC_ALIAS(cuCtxCreate_v4)
FC_ALIAS(cuCtxDestroy_v2)
FC_ALIAS(cuCtxSetCurrent)
FC_ALIAS(cuCtxGetCurrent)
FC_ALIAS(cuCtxGetDevice)
FC_ALIAS(cuGetErrorString)
FC_ALIAS(cuGetErrorName)

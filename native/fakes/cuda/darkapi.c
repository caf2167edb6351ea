/*
 * darkapi.c (fake libcuda): cuGetExportTable, the driver's private tables the CUDA runtime needs
 * (cuda-runtime-facts.md §1 steps 2-13, §2, §7), and cuModuleGetLoadingMode.
 *
 * Tables (UUID bytes in the order of the textual form):
 *   CUDART interface     6bd5fb6c-...: slot 0 size, 1/6/8 module from a fatbin wrapper, 2 primary context,
 *                        7 a no-op, 12 "load compilers" (cudart 13); the unknown slots are NULL.
 *   tools runtime hooks  a094798c-...: slots 2 and 6 hand out zeroed process-lifetime buffers.
 *   tools TLS            42d85a81-...: slot 2 (cuBLASLt, §8) writes 0 and succeeds: its meaning is unknown.
 *   context local storage c693336e-...: put/delete/get per context (context_storage.c); no size slot.
 *   context checks       263e8860-...: slot 2 writes 0, slot 3 returns 0.
 *   integrity check      d4082055-...: slot 1 answers HMAC-MD2 of the caller's identity (md2.c).
 *   unknown              21318c60-...: cudart 13.5 fails init (cudaErrorSymbolNotFound) without it but calls
 *                        no slot; every slot answers NOT_SUPPORTED and logs under CARVE_FAKE_CUDA_LOG=1.
 * Any other UUID: CUDA_ERROR_NOT_FOUND and a NULL table.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"

typedef struct uuid16 {
    uint8_t b[16];
} uuid16_t;

static const uuid16_t CUDART_ID = {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12,
                                    0xfd, 0x9d, 0xf9}};
static const uuid16_t HOOKS_ID = {{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20,
                                   0x0c, 0x0a, 0x66}};
static const uuid16_t TOOLS_TLS_ID = {{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7,
                                       0x8a, 0x3a, 0xec, 0xdc}};
static const uuid16_t CLS_ID = {{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55,
                                 0xd8, 0x95, 0x93}};
static const uuid16_t CHECKS_ID = {{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5,
                                    0x00, 0x6d, 0xfa, 0x7e}};
static const uuid16_t INTEGRITY_ID = {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12,
                                       0x3c, 0x66, 0xe1, 0xf2}};

/* --- CUDART interface ------------------------------------------------------------------------------ */

static CUresult cudart_module_from_wrapper(CUmodule *out, const void *wrapper)
{
    return fc_module_load_image(out, wrapper);
}

static CUresult cudart_get_primary_context(CUcontext *out, CUdevice dev)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    fc_ctx_t *c = fc_primary(dev);
    if (!c)
        return fc_initialized() ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    *out = (CUcontext)c; /* not retained, not made active: the runtime retains it when it needs it */
    return CUDA_SUCCESS;
}

static CUresult cudart_module_from_wrapper_ext1(CUmodule *out, const void *wrapper, void *a, void *b, unsigned c)
{
    return fc_module_load_image(out, wrapper);
}

static void cudart_slot7(size_t x) {}

static CUresult cudart_module_from_fatbin_ext2(const void *fatbin, CUmodule *out, void *a, void *b, unsigned c)
{
    return fc_module_load_image(out, fatbin);
}

static CUresult cudart_load_compilers(void)
{
    return CUDA_SUCCESS;
}

static const void *const g_cudart[13] = {
    (void *)(uintptr_t)(13 * sizeof(void *)),
    (void *)cudart_module_from_wrapper,
    (void *)cudart_get_primary_context,
    NULL, NULL, NULL,
    (void *)cudart_module_from_wrapper_ext1,
    (void *)cudart_slot7,
    (void *)cudart_module_from_fatbin_ext2,
    NULL, NULL, NULL,
    (void *)cudart_load_compilers,
};

/* --- tools runtime callback hooks ---------------------------------------------------------------- */

static uint8_t g_hooks_buf1[1024];
static uint32_t g_hooks_buf2[14];

static void hooks_get_buffer1(void **ptr, size_t *size)
{
    if (ptr)
        *ptr = g_hooks_buf1;
    if (size)
        *size = sizeof g_hooks_buf1;
}

static void hooks_get_buffer2(void **ptr, size_t *size)
{
    if (ptr)
        *ptr = g_hooks_buf2;
    if (size)
        *size = sizeof g_hooks_buf2;
}

static const void *const g_hooks[7] = {
    (void *)(uintptr_t)(7 * sizeof(void *)), NULL, (void *)hooks_get_buffer1, NULL, NULL, NULL,
    (void *)hooks_get_buffer2,
};

/* --- tools TLS ------------------------------------------------------------------------------------ */

/* Called by cuBLASLt as (out*, code, ptr, ptr, NULL) (facts §8); what it returns is not known. */
static CUresult tools_tls_slot2(uint64_t *out, unsigned code, void *a, void *b, void *c)
{
    if (out)
        *out = 0;
    return CUDA_SUCCESS;
}

static const void *const g_tools_tls[4] = {(void *)(uintptr_t)(4 * sizeof(void *)), NULL,
                                           (void *)tools_tls_slot2, NULL};

/* --- context local storage (no size slot) -------------------------------------------------------- */

static CUresult cls_put(CUcontext ctx, void *key, void *value, fc_cls_dtor_t dtor)
{
    return fc_cls_put(ctx, key, value, dtor);
}

static CUresult cls_delete(CUcontext ctx, void *key)
{
    return fc_cls_delete(ctx, key);
}

static CUresult cls_get(void **value, CUcontext ctx, void *key)
{
    return fc_cls_get(value, ctx, key);
}

static CUresult cls_slot3(void)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

static const void *const g_cls[4] = {(void *)cls_put, (void *)cls_delete, (void *)cls_get, (void *)cls_slot3};

/* --- context checks ------------------------------------------------------------------------------- */

static CUresult checks_slot2(CUcontext ctx, unsigned *out1, void **out2)
{
    if (out1)
        *out1 = 0;
    return CUDA_SUCCESS;
}

static unsigned checks_slot3(void)
{
    return 0;
}

static const void *const g_checks[4] = {(void *)(uintptr_t)(4 * sizeof(void *)), NULL, (void *)checks_slot2,
                                        (void *)checks_slot3};

/* --- integrity check ------------------------------------------------------------------------------ */

static CUresult integrity_check(unsigned version, unsigned long long unix_seconds, unsigned long long out[2]);

static const void *const g_integrity[3] = {(void *)(uintptr_t)(3 * sizeof(void *)), (void *)integrity_check,
                                           NULL};

static const uint8_t INTEGRITY_KEY[16] = {0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52,
                                          0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F};

#pragma pack(push, 1)
typedef struct integrity_head {
    uint32_t driver_version, version, pid, tid;
    const void *cudart_table, *integrity_table, *fn;
    uint64_t unix_seconds;
} integrity_head_t;
typedef struct integrity_dev {
    uint8_t uuid[16];
    int32_t domain, bus, device;
} integrity_dev_t;
#pragma pack(pop)

_Static_assert(sizeof(integrity_head_t) == 48, "integrity record is 48 bytes");
_Static_assert(sizeof(integrity_dev_t) == 28, "device record is 28 bytes");

static CUresult integrity_check(unsigned version, unsigned long long unix_seconds, unsigned long long out[2])
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (version % 10 == 0) {
        out[0] = 0x3341181C03CB675Cull;
        out[1] = 0x8ED383AA1F4CD1E8ull;
        return CUDA_SUCCESS;
    }
    if (version % 10 == 1) {
        out[0] = 0x1841181C03CB675Cull;
        out[1] = 0x8ED383AA1F4CD1E8ull;
        return CUDA_SUCCESS;
    }
    int driver = 0, count = fc_device_count();
    fc_impl_cuDriverGetVersion(&driver); /* internal: never an interposer's */
    size_t len = sizeof(integrity_head_t) + (size_t)count * sizeof(integrity_dev_t);
    uint8_t msg[sizeof(integrity_head_t) + FAKE_MAX_GPUS * sizeof(integrity_dev_t)];
    integrity_head_t h = {
        .driver_version = (uint32_t)driver,
        .version = version,
        .pid = (uint32_t)getpid(),
        .tid = (uint32_t)pthread_self(),
        .cudart_table = g_cudart,
        .integrity_table = g_integrity,
        .fn = (const void *)integrity_check,
        .unix_seconds = unix_seconds,
    };
    memcpy(msg, &h, sizeof h);
    for (int i = 0; i < count; i++) {
        integrity_dev_t d;
        memset(&d, 0, sizeof d);
        fc_device_uuid(i, d.uuid);
        fc_device_pci(i, &d.domain, &d.bus, &d.device);
        memcpy(msg + sizeof h + (size_t)i * sizeof d, &d, sizeof d);
    }
    uint8_t mac[16];
    fc_hmac_md2(INTEGRITY_KEY, msg, len, mac);
    memcpy(out, mac, 16);
    return CUDA_SUCCESS;
}

/* --- 21318c60-...: asked by cudart 13.5 at init and by cuBLASLt (facts §8); meaning unknown ------- */

static const uuid16_t UNKNOWN_21318C60_ID = {{0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41,
                                              0xff, 0x73, 0x24, 0xc8, 0xf2}};

#define PROBE_SLOT(k)                                                                                      \
    static CUresult probe_slot##k(void *a, void *b, void *c, void *d)                                      \
    {                                                                                                      \
        if (fc_trace())                                                                                    \
            fc_log("21318c60 slot %d called (%p, %p, %p, %p)", k, a, b, c, d);                             \
        return CUDA_ERROR_NOT_SUPPORTED;                                                                   \
    }
PROBE_SLOT(1) PROBE_SLOT(2) PROBE_SLOT(3) PROBE_SLOT(4) PROBE_SLOT(5) PROBE_SLOT(6) PROBE_SLOT(7)
PROBE_SLOT(8) PROBE_SLOT(9) PROBE_SLOT(10) PROBE_SLOT(11) PROBE_SLOT(12) PROBE_SLOT(13) PROBE_SLOT(14) PROBE_SLOT(15)

static const void *const g_unknown_21318c60[16] = {
    (void *)(uintptr_t)(16 * sizeof(void *)), (void *)probe_slot1, (void *)probe_slot2, (void *)probe_slot3,
    (void *)probe_slot4, (void *)probe_slot5, (void *)probe_slot6, (void *)probe_slot7, (void *)probe_slot8,
    (void *)probe_slot9, (void *)probe_slot10, (void *)probe_slot11, (void *)probe_slot12, (void *)probe_slot13,
    (void *)probe_slot14, (void *)probe_slot15,
};

/* --- the export ----------------------------------------------------------------------------------- */

FAKE_EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    FC_CALLED("cuGetExportTable");
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    static const struct {
        const uuid16_t *id;
        const void *const *table;
    } tables[] = {
        {&CUDART_ID, g_cudart}, {&HOOKS_ID, g_hooks}, {&TOOLS_TLS_ID, g_tools_tls},
        {&CLS_ID, g_cls},       {&CHECKS_ID, g_checks}, {&INTEGRITY_ID, g_integrity},
        {&UNKNOWN_21318C60_ID, g_unknown_21318c60},
    };
    const uint8_t *u = (const uint8_t *)pExportTableId->bytes;
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (memcmp(tables[i].id->b, u, 16) == 0) {
            *ppExportTable = tables[i].table;
            if (fc_trace())
                fc_log("cuGetExportTable(%02x%02x%02x%02x-...) -> table %zu", u[0], u[1], u[2], u[3], i);
            return CUDA_SUCCESS;
        }
    if (fc_trace())
        fc_log("cuGetExportTable(%02x%02x%02x%02x-%02x%02x-...) -> NOT_FOUND", u[0], u[1], u[2], u[3], u[4], u[5]);
    *ppExportTable = NULL;
    return CUDA_ERROR_NOT_FOUND;
}

/* CU_MODULE_LAZY_LOADING (2) unless CUDA_MODULE_LOADING=EAGER (facts §8 corrects §1 step 7's values). */
FAKE_EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    FC_CALLED("cuModuleGetLoadingMode");
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    const char *v = getenv("CUDA_MODULE_LOADING");
    *mode = v && strcmp(v, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
    return CUDA_SUCCESS;
}

FC_ALIAS(cuGetExportTable)
FC_ALIAS(cuModuleGetLoadingMode)

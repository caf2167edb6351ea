/*
 * procaddr.c (fake libcuda): cuGetProcAddress / cuGetProcAddress_v2 as the real driver resolves them.
 *
 * The caller names the base entry point ("cuMemAlloc"), the CUDA version it was built for and the stream
 * flavour (flags). The newest variant not newer than that version wins; with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the _ptsz/_ptds variant wins when one exists. Both
 * CU_GET_PROC_ADDRESS_DEFAULT and LEGACY_STREAM resolve to the legacy variants here, as they do for a
 * driver called by code built without per-thread default streams.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#undef cuGetProcAddress

static CUresult resolve(const char *symbol, void **pfn, int version, cuuint64_t flags,
                        CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    int want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const fc_symbol_t *best = NULL;
    int known = 0;
    for (unsigned i = 0; i < fc_symbol_count; i++) {
        const fc_symbol_t *s = &fc_symbols[i];
        if (strcmp(s->base, symbol) != 0 && strcmp(s->name, symbol) != 0)
            continue;
        known = 1;
        if (s->version > version || (s->per_thread && !want_pt))
            continue;
        if (!best || (s->per_thread && !best->per_thread) ||
            (s->per_thread == best->per_thread && s->version > best->version))
            best = s;
    }
    if (fc_trace())
        fc_log("cuGetProcAddress(%s, %d, flags %llu) -> %s", symbol, version, (unsigned long long)flags,
               best ? best->name : "NOT_FOUND");
    if (!best) {
        *pfn = NULL;
        if (status)
            *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    static int thunks = -1; /* read once; a benign race writes the same value */
    if (thunks < 0) {
        const char *v = getenv("CARVE_FAKE_PROCADDR_THUNKS");
        thunks = v && strcmp(v, "1") == 0;
    }
    *pfn = thunks ? best->thunk : best->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    FC_CALLED("cuGetProcAddress");
    return resolve(symbol, pfn, cudaVersion, flags, NULL);
}

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *symbolStatus)
{
    FC_CALLED("cuGetProcAddress_v2");
    return resolve(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* hidden aliases: cuGetProcAddress hands out these, never addresses an interposer could replace */
FC_ALIAS(cuGetProcAddress)
FC_ALIAS(cuGetProcAddress_v2)

/* A driver that looks up its own entry points by name (on its own handle), as some drivers do internally:
 * an interposer that overrides dlsym must hand the driver its own functions, never the hooks (double
 * accounting, or recursion while the interposer itself is initialising). Tests call this, and with
 * CARVE_FAKE_CTOR_LOOKUP=<name> the library does it from its constructor, while it is being loaded. */
FAKE_EXPORT void *carveFakeCudaSelfLookup(const char *name)
{
    void *self = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    void *p = self ? dlsym(self, name) : NULL;
    if (self)
        dlclose(self);
    return p;
}

static void *g_ctor_lookup;

__attribute__((constructor)) static void lookup_at_load(void)
{
    const char *name = getenv("CARVE_FAKE_CTOR_LOOKUP");
    if (name && *name)
        g_ctor_lookup = carveFakeCudaSelfLookup(name);
}

/* What the constructor's lookup returned (NULL without CARVE_FAKE_CTOR_LOOKUP). */
FAKE_EXPORT void *carveFakeCudaCtorLookup(void)
{
    return g_ctor_lookup;
}

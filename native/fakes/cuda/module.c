/*
 * module.c (fake libcuda): modules, libraries, functions and kernels (cuda-runtime-facts.md §4, §5, §6).
 *
 * A module (or library: the same object, cuLibraryGetModule answers it) holds the names its image gives
 * (fatbin.c). cuModuleGetFunction / cuLibraryGetKernel hand out one handle per name, and a CUkernel and a
 * CUfunction are the same object (cudart 13 launches CUkernel handles directly). Unknown names answer
 * CUDA_ERROR_NOT_FOUND, except in a module whose compressed image could not be decoded (any name goes).
 * Globals get host-backed storage of their ELF size on first use. cuFuncGetAttribute answers plausible
 * values for the device (CUB asks them of its EmptyKernel to pick a code path).
 * Here: loading, names and globals of modules and libraries; the objects are module.h's, what a function is
 * asked and told function.c's, occupancy occupancy.c's.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "module.h"

static CUresult module_load(fc_module_t **out, const void *image, uint64_t len, int kind)
{
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || !image)
        return CUDA_ERROR_INVALID_VALUE;
    int ordinal = fc_current_ordinal();
    if (kind == FC_H_MODULE && ordinal < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    fc_module_t *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->ordinal = ordinal < 0 ? 0 : ordinal;
    CUresult rc = fc_image_parse(image, len, device_sm(m->ordinal), &m->img);
    if (rc != CUDA_SUCCESS) {
        fc_image_free(&m->img);
        free(m);
        return rc;
    }
    if (!m->img.known && fc_trace())
        fc_log("module %p: names unknown (compressed image not decoded): any kernel name is accepted", (void *)m);
    m->global_addr = calloc(m->img.n ? m->img.n : 1, sizeof *m->global_addr);
    if (!m->global_addr || fc_handle_add(m, kind) != 0) {
        fc_image_free(&m->img);
        free(m->global_addr);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->magic = FC_MODULE_MAGIC;
    if (fc_trace())
        fc_log("module %p loaded: %zu symbols, sm %d", (void *)m, m->img.n, m->img.sm);
    *out = m;
    return CUDA_SUCCESS;
}

CUresult fc_module_load_image(CUmodule *out, const void *image)
{
    fc_module_t *m;
    CUresult rc = module_load(&m, image, 0, FC_H_MODULE);
    if (rc == CUDA_SUCCESS)
        *out = (CUmodule)m;
    return rc;
}

static void module_free(fc_module_t *m)
{
    for (size_t i = 0; i < m->nfuncs; i++) {
        fc_handle_del(m->funcs[i], FC_H_FUNC);
        m->funcs[i]->magic = 0;
        free(m->funcs[i]->name);
        free(m->funcs[i]);
    }
    for (size_t i = 0; i < m->img.n; i++)
        if (m->global_addr[i]) {
            fc_obj_remove(m->global_addr[i], FC_GLOBAL, NULL);
            fc_unmap(m->global_addr[i], m->img.syms[i].size);
        }
    free(m->funcs);
    free(m->global_addr);
    fc_image_free(&m->img);
    fc_handle_del(m, FC_H_MODULE);
    fc_handle_del(m, FC_H_LIBRARY);
    m->magic = 0;
    free(m);
}

static int find_symbol(const fc_module_t *m, const char *name, int is_global)
{
    for (size_t i = 0; i < m->img.n; i++)
        if (m->img.syms[i].is_global == is_global && strcmp(m->img.syms[i].name, name) == 0)
            return (int)i;
    return -1;
}

static CUresult get_function(fc_module_t *m, const char *name, fc_func_t **out)
{
    if (!name || !out)
        return CUDA_ERROR_INVALID_VALUE;
    if (m->img.known && find_symbol(m, name, 0) < 0)
        return CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nfuncs; i++)
        if (strcmp(m->funcs[i]->name, name) == 0) {
            *out = m->funcs[i];
            pthread_mutex_unlock(&m->lock);
            return CUDA_SUCCESS;
        }
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (m->nfuncs == m->capfuncs) {
        size_t cap = m->capfuncs ? m->capfuncs * 2 : 16;
        fc_func_t **n = realloc(m->funcs, cap * sizeof *n);
        if (!n)
            goto out;
        m->funcs = n;
        m->capfuncs = cap;
    }
    fc_func_t *f = calloc(1, sizeof *f);
    if (!f || !(f->name = strdup(name)) || fc_handle_add(f, FC_H_FUNC) != 0) {
        if (f)
            free(f->name);
        free(f);
        goto out;
    }
    f->magic = FC_FUNC_MAGIC;
    f->mod = m;
    f->max_dyn_smem = 49152;
    f->carveout = -1;
    m->funcs[m->nfuncs++] = f;
    *out = f;
    rc = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static CUresult get_global(fc_module_t *m, const char *name, CUdeviceptr *dptr, size_t *bytes)
{
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    int i = find_symbol(m, name, 1);
    if (i < 0)
        return CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&m->lock);
    CUresult rc = CUDA_SUCCESS;
    uint64_t size = m->img.syms[i].size ? m->img.syms[i].size : 1;
    if (!m->global_addr[i]) {
        uint64_t base = fc_map(size, 4096, PROT_READ | PROT_WRITE);
        fc_obj_t o = {.key = base, .kind = FC_GLOBAL, .ordinal = m->ordinal, .span = fc_page_round(size)};
        if (!base || fc_obj_add(&o) != 0) {
            fc_unmap(base, size);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            m->global_addr[i] = base;
        }
    }
    if (rc == CUDA_SUCCESS) {
        if (dptr)
            *dptr = m->global_addr[i];
        if (bytes)
            *bytes = m->img.syms[i].size;
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

/* --- modules -------------------------------------------------------------------------------------- */

FAKE_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    FC_CALLED("cuModuleLoadData");
    return fc_module_load_image(module, image);
}

FAKE_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int n, CUjit_option *options,
                                        void **values)
{
    FC_CALLED("cuModuleLoadDataEx");
    return fc_module_load_image(module, image);
}

FAKE_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatbin)
{
    FC_CALLED("cuModuleLoadFatBinary");
    return fc_module_load_image(module, fatbin);
}

/* The file's bytes (malloc'ed, NUL-terminated for PTX) or NULL. */
static void *read_file(const char *path, uint64_t *len)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f)
        return NULL;
    struct stat st;
    void *buf = NULL;
    if (fstat(fileno(f), &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size < (1ull << 32) &&
        (buf = calloc(1, (size_t)st.st_size + 1)) && fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = buf ? (uint64_t)st.st_size : 0;
    return buf;
}

FAKE_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    FC_CALLED("cuModuleLoad");
    uint64_t len;
    void *buf = read_file(fname, &len);
    if (!buf)
        return CUDA_ERROR_FILE_NOT_FOUND;
    fc_module_t *m;
    CUresult rc = module_load(&m, buf, len, FC_H_MODULE);
    free(buf);
    if (rc == CUDA_SUCCESS)
        *module = (CUmodule)m;
    return rc;
}

FAKE_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
    FC_CALLED("cuModuleUnload");
    fc_module_t *m = module_get(hmod);
    if (!m || !fc_handle_ok(m, FC_H_MODULE))
        return CUDA_ERROR_INVALID_HANDLE;
    module_free(m);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    FC_CALLED("cuModuleGetFunction");
    fc_module_t *m = module_get(hmod);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    return get_function(m, name, (fc_func_t **)hfunc);
}

FAKE_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
    FC_CALLED("cuModuleGetGlobal_v2");
    fc_module_t *m = module_get(hmod);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    return get_global(m, name, dptr, bytes);
}

FAKE_EXPORT CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule hmod)
{
    FC_CALLED("cuModuleGetFunctionCount");
    fc_module_t *m = module_get(hmod);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned n = 0;
    for (size_t i = 0; i < m->img.n; i++)
        n += !m->img.syms[i].is_global;
    *count = n;
    return CUDA_SUCCESS;
}

/* --- libraries (context-independent modules) ------------------------------------------------------ */

FAKE_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                       void **jitValues, unsigned int numJit, CUlibraryOption *libOptions,
                                       void **libValues, unsigned int numLib)
{
    FC_CALLED("cuLibraryLoadData");
    fc_module_t *m;
    CUresult rc = module_load(&m, code, 0, FC_H_LIBRARY);
    if (rc == CUDA_SUCCESS)
        *library = (CUlibrary)m;
    return rc;
}

FAKE_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fname, CUjit_option *jitOptions,
                                           void **jitValues, unsigned int numJit, CUlibraryOption *libOptions,
                                           void **libValues, unsigned int numLib)
{
    FC_CALLED("cuLibraryLoadFromFile");
    uint64_t len;
    void *buf = read_file(fname, &len);
    if (!buf)
        return CUDA_ERROR_FILE_NOT_FOUND;
    fc_module_t *m;
    CUresult rc = module_load(&m, buf, len, FC_H_LIBRARY);
    free(buf);
    if (rc == CUDA_SUCCESS)
        *library = (CUlibrary)m;
    return rc;
}

FAKE_EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
    FC_CALLED("cuLibraryUnload");
    fc_module_t *m = module_get(library);
    if (!m || !fc_handle_ok(m, FC_H_LIBRARY))
        return CUDA_ERROR_INVALID_HANDLE;
    module_free(m);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name)
{
    FC_CALLED("cuLibraryGetKernel");
    fc_module_t *m = module_get(library);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    return get_function(m, name, (fc_func_t **)kernel);
}

FAKE_EXPORT CUresult cuLibraryGetModule(CUmodule *module, CUlibrary library)
{
    FC_CALLED("cuLibraryGetModule");
    fc_module_t *m = module_get(library);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!module)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_handle_ok(m, FC_H_MODULE) && fc_handle_add(m, FC_H_MODULE) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *module = (CUmodule)m;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    FC_CALLED("cuLibraryGetGlobal");
    fc_module_t *m = module_get(library);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    return get_global(m, name, dptr, bytes);
}

FAKE_EXPORT CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary library)
{
    FC_CALLED("cuLibraryGetKernelCount");
    return fc_impl_cuModuleGetFunctionCount(count, (CUmodule)library);
}

FAKE_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    FC_CALLED("cuKernelGetFunction");
    if (!func_get(kernel))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!pFunc)
        return CUDA_ERROR_INVALID_VALUE;
    *pFunc = (CUfunction)kernel; /* the same object (facts §4) */
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
    FC_CALLED("cuKernelGetLibrary");
    fc_func_t *f = func_get(kernel);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!pLib)
        return CUDA_ERROR_INVALID_VALUE;
    *pLib = (CUlibrary)f->mod;
    return CUDA_SUCCESS;
}

/* hidden aliases: cuGetProcAddress hands out these, never addresses an interposer could replace */
FC_ALIAS(cuModuleLoadData)
FC_ALIAS(cuModuleLoadDataEx)
FC_ALIAS(cuModuleLoadFatBinary)
FC_ALIAS(cuModuleLoad)
FC_ALIAS(cuModuleUnload)
FC_ALIAS(cuModuleGetFunction)
FC_ALIAS(cuModuleGetGlobal_v2)
FC_ALIAS(cuModuleGetFunctionCount)
FC_ALIAS(cuLibraryLoadData)
FC_ALIAS(cuLibraryLoadFromFile)
FC_ALIAS(cuLibraryUnload)
FC_ALIAS(cuLibraryGetKernel)
FC_ALIAS(cuLibraryGetModule)
FC_ALIAS(cuLibraryGetGlobal)
FC_ALIAS(cuLibraryGetKernelCount)
FC_ALIAS(cuKernelGetFunction)
FC_ALIAS(cuKernelGetLibrary)

/*
 * function.c (fake libcuda): what a function or kernel (one object, module.h) is asked and told: its
 * attributes (cuFuncGetAttribute and cuKernelGetAttribute answer plausible values for the device: CUB asks
 * them of its EmptyKernel to pick a code path; the dynamic shared memory limit and carveout are kept as
 * set), cache and shared memory configuration (accepted), its module, name and loading state
 * (cuda-runtime-facts.md §4, §5, §6).
 */
#include "module.h"

static CUresult func_attribute(int *pi, CUfunction_attribute attrib, fc_func_t *f, int ordinal)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    int sm = device_sm(ordinal);
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = sm; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = f->mod->img.sm ? f->mod->img.sm : sm; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dyn_smem; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->carveout; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = sm >= 90; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult func_set_attribute(fc_func_t *f, CUfunction_attribute attrib, int value)
{
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: {
        int ordinal = f->mod->ordinal;
        if (value < 0 || value > fc_attribute(fc_gpu(ordinal), ordinal,
                                               CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN))
            return CUDA_ERROR_INVALID_VALUE;
        f->max_dyn_smem = value;
        return CUDA_SUCCESS;
    }
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: f->carveout = value; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

FAKE_EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    FC_CALLED("cuFuncGetAttribute");
    fc_func_t *f = func_get(hfunc);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    return func_attribute(pi, attrib, f, f->mod->ordinal);
}

FAKE_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    FC_CALLED("cuFuncSetAttribute");
    fc_func_t *f = func_get(hfunc);
    return f ? func_set_attribute(f, attrib, value) : CUDA_ERROR_INVALID_HANDLE;
}

FAKE_EXPORT CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    FC_CALLED("cuKernelGetAttribute");
    fc_func_t *f = func_get(kernel);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!fc_gpu(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return func_attribute(pi, attrib, f, dev);
}

FAKE_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int value, CUkernel kernel, CUdevice dev)
{
    FC_CALLED("cuKernelSetAttribute");
    fc_func_t *f = func_get(kernel);
    return f ? func_set_attribute(f, attrib, value) : CUDA_ERROR_INVALID_HANDLE;
}

#define FUNC_OK(name, T, ...)                                                                              \
    FAKE_EXPORT CUresult name(T h, __VA_ARGS__)                                                            \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        return func_get(h) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;                                     \
    }
FUNC_OK(cuFuncSetCacheConfig, CUfunction, CUfunc_cache config)
FUNC_OK(cuFuncSetSharedMemConfig, CUfunction, CUsharedconfig config)
FUNC_OK(cuKernelSetCacheConfig, CUkernel, CUfunc_cache config, CUdevice dev)

FAKE_EXPORT CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    FC_CALLED("cuFuncGetModule");
    fc_func_t *f = func_get(hfunc);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!hmod)
        return CUDA_ERROR_INVALID_VALUE;
    *hmod = (CUmodule)f->mod;
    return CUDA_SUCCESS;
}

#define NAME_OF(entry, T)                                                                                  \
    FAKE_EXPORT CUresult entry(const char **out, T h)                                                      \
    {                                                                                                      \
        FC_CALLED(#entry);                                                                                  \
        fc_func_t *f = func_get(h);                                                                        \
        if (!f)                                                                                            \
            return CUDA_ERROR_INVALID_HANDLE;                                                              \
        if (!out)                                                                                          \
            return CUDA_ERROR_INVALID_VALUE;                                                               \
        *out = f->name;                                                                                    \
        return CUDA_SUCCESS;                                                                               \
    }
NAME_OF(cuFuncGetName, CUfunction)
NAME_OF(cuKernelGetName, CUkernel)

FAKE_EXPORT CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction hfunc)
{
    FC_CALLED("cuFuncIsLoaded");
    if (!func_get(hfunc))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuFuncLoad(CUfunction hfunc)
{
    FC_CALLED("cuFuncLoad");
    return func_get(hfunc) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* hidden aliases: cuGetProcAddress hands out these, never addresses an interposer could replace */
FC_ALIAS(cuFuncGetAttribute)
FC_ALIAS(cuFuncSetAttribute)
FC_ALIAS(cuKernelGetAttribute)
FC_ALIAS(cuKernelSetAttribute)
FC_ALIAS(cuFuncSetCacheConfig)
FC_ALIAS(cuFuncSetSharedMemConfig)
FC_ALIAS(cuKernelSetCacheConfig)
FC_ALIAS(cuFuncGetModule)
FC_ALIAS(cuFuncGetName)
FC_ALIAS(cuKernelGetName)
FC_ALIAS(cuFuncIsLoaded)
FC_ALIAS(cuFuncLoad)

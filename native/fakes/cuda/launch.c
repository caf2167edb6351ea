/*
 * launch.c (fake libcuda): kernel launches on the fake time model (stream.c). A launch occupies the fake
 * GPU for ceil(blocks / SMs) waves (fake_kernel_submit) on its stream, or becomes a kernel node when the
 * stream captures (capture.c). Kernel handles from carveFakeKernel(ns_per_wave) carry their wave time; any
 * other non-NULL handle (a CUfunction or a CUkernel of module.c: the same object, facts §4) uses
 * CARVE_FAKE_NS_PER_WAVE (default 100000).
 */
#include <stdlib.h>

#include "fakecuda.h"

#define FC_KERNELS 64

static uint64_t g_kernel_ns[FC_KERNELS];
static unsigned g_kernel_count;

/* A kernel handle whose waves take `ns_per_wave` (tests pick kernel lengths with it). */
FAKE_EXPORT CUfunction carveFakeKernel(uint64_t ns_per_wave)
{
    unsigned i = __atomic_fetch_add(&g_kernel_count, 1, __ATOMIC_RELAXED) % FC_KERNELS;
    g_kernel_ns[i] = ns_per_wave;
    return (CUfunction)&g_kernel_ns[i];
}

uint64_t fc_kernel_wave_ns(CUfunction f)
{
    uint64_t *p = (uint64_t *)f;
    if (p >= g_kernel_ns && p < g_kernel_ns + FC_KERNELS && *p)
        return *p;
    return fc_env_u64("CARVE_FAKE_NS_PER_WAVE", 100000);
}

static CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned shmem, CUstream s,
                       void **params)
{
    int ordinal;
    CUresult rc = fc_check_ctx(&ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!grid[0] || !grid[1] || !grid[2])
        return CUDA_ERROR_INVALID_VALUE;
    if ((uint64_t)block[0] * block[1] * block[2] > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    fc_stream_t *st = fc_stream_get(s);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (fc_capture_kernel(st, f, grid, block, shmem, params))
        return CUDA_SUCCESS;
    fc_stream_submit(st, f, (uint64_t)grid[0] * grid[1] * grid[2]);
    return CUDA_SUCCESS;
}

#define LAUNCH_KERNEL(name)                                                                                \
    FAKE_EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
                              unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)         \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};                                    \
        return launch(f, grid, block, shmem, s, params);                                                   \
    }
LAUNCH_KERNEL(cuLaunchKernel)
LAUNCH_KERNEL(cuLaunchKernel_ptsz)

#define LAUNCH_COOPERATIVE(name)                                                                           \
    FAKE_EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
                              unsigned bz, unsigned shmem, CUstream s, void **params)                       \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};                                    \
        return launch(f, grid, block, shmem, s, params);                                                   \
    }
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)

#define LAUNCH_EX(name)                                                                                    \
    FAKE_EXPORT CUresult name(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)     \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        if (!config)                                                                                       \
            return CUDA_ERROR_INVALID_VALUE;                                                               \
        const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};                   \
        const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};               \
        return launch(f, grid, block, config->sharedMemBytes, config->hStream, params);                    \
    }
LAUNCH_EX(cuLaunchKernelEx)
LAUNCH_EX(cuLaunchKernelEx_ptsz)

/* Deprecated but still exported by CUDA 13 drivers; every launch runs on the current device here. */
FAKE_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n,
                                                          unsigned int flags)
{
    FC_CALLED("cuLaunchCooperativeKernelMultiDevice");
    if (!list || !n)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        const unsigned grid[3] = {list[i].gridDimX, list[i].gridDimY, list[i].gridDimZ};
        const unsigned block[3] = {list[i].blockDimX, list[i].blockDimY, list[i].blockDimZ};
        CUresult rc = launch(list[i].function, grid, block, list[i].sharedMemBytes, list[i].hStream,
                             list[i].kernelParams);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return CUDA_SUCCESS;
}

/* hidden aliases: cuGetProcAddress hands out these, never addresses an interposer could replace */
FC_ALIAS(cuLaunchKernel)
FC_ALIAS(cuLaunchKernel_ptsz)
FC_ALIAS(cuLaunchKernelEx)
FC_ALIAS(cuLaunchKernelEx_ptsz)
FC_ALIAS(cuLaunchCooperativeKernel)
FC_ALIAS(cuLaunchCooperativeKernel_ptsz)
FC_ALIAS(cuLaunchCooperativeKernelMultiDevice)

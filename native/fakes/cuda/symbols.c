/*
 * symbols.c (fake libcuda): every entry point of the fake, with the name an application passes to
 * cuGetProcAddress, the CUDA version that introduced this variant, and whether it is the per-thread
 * default stream variant. One line per entry point. Each row also gets a thunk: a jump to the entry point
 * from another address, which cuGetProcAddress hands out instead under CARVE_FAKE_PROCADDR_THUNKS=1.
 */
#include "symbols.h"

#define FC_SYMBOLS(X)                                                                                      \
    X(cuInit, cuInit, 2000, 0)                                                                             \
    X(cuDriverGetVersion, cuDriverGetVersion, 2020, 0)                                                     \
    X(cuDeviceGet, cuDeviceGet, 2000, 0)                                                                   \
    X(cuDeviceGetCount, cuDeviceGetCount, 2000, 0)                                                         \
    X(cuDeviceGetName, cuDeviceGetName, 2000, 0)                                                           \
    X(cuDeviceGetUuid, cuDeviceGetUuid, 9020, 0)                                                           \
    X(cuDeviceGetUuid_v2, cuDeviceGetUuid, 11040, 0)                                                       \
    X(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, 0)                                                      \
    X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, 0)                                                 \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0)                                         \
    X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, 0)                                   \
    X(cuCtxCreate_v2, cuCtxCreate, 3020, 0)                                                                \
    X(cuCtxCreate_v4, cuCtxCreate, 12050, 0)                                                               \
    X(cuCtxDestroy_v2, cuCtxDestroy, 4000, 0)                                                              \
    X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, 0)                                                           \
    X(cuCtxGetCurrent, cuCtxGetCurrent, 4000, 0)                                                           \
    X(cuCtxGetDevice, cuCtxGetDevice, 2000, 0)                                                             \
    X(cuCtxSynchronize, cuCtxSynchronize, 2000, 0)                                                         \
    X(cuStreamSynchronize, cuStreamSynchronize, 2000, 0)                                                   \
    X(cuStreamSynchronize_ptsz, cuStreamSynchronize, 7000, 1)                                              \
    X(cuMemGetInfo_v2, cuMemGetInfo, 3020, 0)                                                              \
    X(cuMemGetInfo_v99, cuMemGetInfo, 99000, 0)                                                            \
    X(cuMemAlloc_v2, cuMemAlloc, 3020, 0)                                                                  \
    X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, 0)                                                        \
    X(cuMemFree_v2, cuMemFree, 3020, 0)                                                                    \
    X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0)                                                       \
    X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0)                                                          \
    X(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, 1)                                                     \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0)                                          \
    X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, 1)                                     \
    X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0)                                                            \
    X(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, 1)                                                       \
    X(cuMemCreate, cuMemCreate, 10020, 0)                                                                  \
    X(cuMemRelease, cuMemRelease, 10020, 0)                                                                \
    X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020, 0)                              \
    X(cuArrayCreate_v2, cuArrayCreate, 3020, 0)                                                            \
    X(cuArray3DCreate_v2, cuArray3DCreate, 3020, 0)                                                        \
    X(cuArrayDestroy, cuArrayDestroy, 2000, 0)                                                             \
    X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, 0)                                             \
    X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, 0)                                           \
    X(cuLaunchKernel, cuLaunchKernel, 4000, 0)                                                             \
    X(cuLaunchKernel_ptsz, cuLaunchKernel, 7000, 1)                                                        \
    X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 0)                                                        \
    X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 11060, 1)                                                   \
    X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, 0)                                       \
    X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 9000, 1)                                  \
    X(cuLaunchCooperativeKernelMultiDevice, cuLaunchCooperativeKernelMultiDevice, 9000, 0)                 \
    X(cuGraphCreate, cuGraphCreate, 10000, 0)                                                              \
    X(cuGraphDestroy, cuGraphDestroy, 10000, 0)                                                            \
    X(cuGraphAddKernelNode_v2, cuGraphAddKernelNode, 12000, 0)                                             \
    X(cuGraphGetNodes, cuGraphGetNodes, 10000, 0)                                                          \
    X(cuGraphNodeGetType, cuGraphNodeGetType, 10000, 0)                                                    \
    X(cuGraphKernelNodeGetParams_v2, cuGraphKernelNodeGetParams, 12000, 0)                                 \
    X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, 0)                                  \
    X(cuGraphInstantiate_v2, cuGraphInstantiate, 11000, 0)                                                 \
    X(cuGraphInstantiateWithFlags, cuGraphInstantiate, 12000, 0)                                           \
    X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, 12000, 0)                                \
    X(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams, 12000, 1)                           \
    X(cuGraphExecDestroy, cuGraphExecDestroy, 10000, 0)                                                    \
    X(cuGraphLaunch, cuGraphLaunch, 10000, 0)                                                              \
    X(cuGraphLaunch_ptsz, cuGraphLaunch, 10000, 1)                                                         \
    X(cuGetProcAddress, cuGetProcAddress, 11030, 0)                                                        \
    X(cuGetProcAddress_v2, cuGetProcAddress, 12000, 0)                                                     \
    X(cuGetErrorString, cuGetErrorString, 6000, 0)                                                         \
    X(cuGetErrorName, cuGetErrorName, 6000, 0)

#define FC_DECLARE(name, base, version, pt) extern void fc_impl_##name(void) __attribute__((visibility("hidden")));
FC_SYMBOLS(FC_DECLARE)

#if defined(__x86_64__)
#define FC_JUMP "jmp"
#elif defined(__aarch64__)
#define FC_JUMP "b"
#else
#error "fake libcuda thunks: add this architecture's jump instruction"
#endif
#define FC_THUNK(name, base, version, pt)                                                                  \
    extern void fc_thunk_##name##_##base(void) __attribute__((visibility("hidden")));                      \
    __asm__(".text\n.p2align 4\n.hidden fc_thunk_" #name "_" #base "\n.type fc_thunk_" #name "_" #base          \
            ", %function\nfc_thunk_" #name "_" #base ":\n\t" FC_JUMP " fc_impl_" #name "\n");
FC_SYMBOLS(FC_THUNK)

#define FC_ROW(name, base, version, pt)                                                                    \
    {#name, #base, version, pt, (void *)fc_impl_##name, (void *)fc_thunk_##name##_##base},
const fc_symbol_t fc_symbols[] = {FC_SYMBOLS(FC_ROW)};
const unsigned fc_symbol_count = sizeof fc_symbols / sizeof fc_symbols[0];

/*
 * hooks.h: THE symbol table of the limiter. Every intercepted entry point is one line here; the exported
 * hook, the pointer to the real function, the dlsym override and the cuGetProcAddress resolution are all
 * generated from it (intercept.c), so adding a hook is one line plus the hook's body.
 *
 * Columns: H(symbol, base, version, per_thread)
 *   symbol      the exported name the hook carries and the real library exports ("cuMemAlloc_v2")
 *   base        the name applications pass to cuGetProcAddress ("cuMemAlloc")
 *   version     the lowest cudaVersion for which cuGetProcAddress(base) resolves to this symbol
 *   per_thread  1 for the per-thread default stream variants (_ptsz/_ptds)
 * A(...) rows add another base name for an already listed symbol.
 */
#ifndef CARVE_HOOKS_H
#define CARVE_HOOKS_H

#include <cuda.h>
#include <nvml.h>

/* cuda.h maps these names to versioned ones with macros; the limiter names every version explicitly. */
#undef cuGetProcAddress

#define CARVE_CUDA_HOOKS(H, A)                                                                             \
    H(cuGetProcAddress, cuGetProcAddress, 11030, 0)                                                        \
    H(cuGetProcAddress_v2, cuGetProcAddress, 12000, 0)                                                     \
    H(cuMemAlloc_v2, cuMemAlloc, 3020, 0)                                                                  \
    H(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, 0)                                                        \
    H(cuMemAllocManaged, cuMemAllocManaged, 6000, 0)                                                       \
    H(cuMemFree_v2, cuMemFree, 3020, 0)                                                                    \
    H(cuMemAllocAsync, cuMemAllocAsync, 11020, 0)                                                          \
    H(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, 1)                                                     \
    H(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0)                                          \
    H(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, 1)                                     \
    H(cuMemFreeAsync, cuMemFreeAsync, 11020, 0)                                                            \
    H(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, 1)                                                       \
    H(cuMemCreate, cuMemCreate, 10020, 0)                                                                  \
    H(cuMemRelease, cuMemRelease, 10020, 0)                                                                \
    H(cuArrayCreate_v2, cuArrayCreate, 3020, 0)                                                            \
    H(cuArray3DCreate_v2, cuArray3DCreate, 3020, 0)                                                        \
    H(cuArrayDestroy, cuArrayDestroy, 2000, 0)                                                             \
    H(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, 0)                                             \
    H(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, 0)                                           \
    H(cuMemGetInfo_v2, cuMemGetInfo, 3020, 0)                                                              \
    H(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, 0)                                                      \
    H(cuLaunchKernel, cuLaunchKernel, 4000, 0)                                                             \
    H(cuLaunchKernel_ptsz, cuLaunchKernel, 7000, 1)                                                        \
    H(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 0)                                                        \
    H(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 11060, 1)                                                   \
    H(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, 0)                                       \
    H(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 9000, 1)                                  \
    H(cuLaunchCooperativeKernelMultiDevice, cuLaunchCooperativeKernelMultiDevice, 9000, 0)                 \
    H(cuGraphInstantiate_v2, cuGraphInstantiate, 11000, 0)                                                 \
    H(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, 0)                                  \
    A(cuGraphInstantiateWithFlags, cuGraphInstantiate, 12000, 0)                                           \
    H(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, 12000, 0)                                \
    H(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams, 12000, 1)                           \
    H(cuGraphExecDestroy, cuGraphExecDestroy, 10000, 0)                                                    \
    H(cuGraphLaunch, cuGraphLaunch, 10000, 0)                                                              \
    H(cuGraphLaunch_ptsz, cuGraphLaunch, 10000, 1)

/* NVML's: the symbol alone (cuGetProcAddress, the one reader of a row's base, version and variant, never
 * hands out NVML's) */
#define CARVE_NVML_HOOKS(H)                                                                                \
    H(nvmlDeviceGetMemoryInfo)                                                                             \
    H(nvmlDeviceGetMemoryInfo_v2)

/* Real functions the limiter calls but does not intercept. */
#define CARVE_CUDA_CALLS(R)                                                                                \
    R(cuInit) R(cuCtxGetDevice) R(cuDeviceGetCount) R(cuDeviceGetUuid_v2) R(cuDeviceGetAttribute)          \
    R(cuGraphGetNodes) R(cuGraphNodeGetType) R(cuGraphKernelNodeGetParams_v2)
#define CARVE_NVML_CALLS(R)                                                                                \
    R(nvmlInit_v2) R(nvmlDeviceGetHandleByUUID) R(nvmlDeviceGetHandleByIndex_v2) R(nvmlDeviceGetUUID)      \
    R(nvmlDeviceGetProcessUtilization)

/* Prototypes cuda.h does not give without CUDA_API_PER_THREAD_DEFAULT_STREAM, or under other names. */
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                     unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra);
CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                       void **extra);
CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                unsigned int gridDimZ, unsigned int blockDimX,
                                                unsigned int blockDimY, unsigned int blockDimZ,
                                                unsigned int sharedMemBytes, CUstream hStream,
                                                void **kernelParams);
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                       char *logBuffer, size_t bufferSize); /* CUDA 11's five arguments */
CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);

/* carve_real_<symbol>: the real library's function, resolved by soname at initialisation. */
#define CARVE_DECLARE_REAL(symbol, ...) extern __typeof__(&symbol) carve_real_##symbol;
#define CARVE_SKIP(...)
#define CARVE_DECLARE_CALL(symbol) extern __typeof__(&symbol) carve_real_##symbol;
CARVE_CUDA_HOOKS(CARVE_DECLARE_REAL, CARVE_SKIP)
CARVE_NVML_HOOKS(CARVE_DECLARE_REAL)
CARVE_CUDA_CALLS(CARVE_DECLARE_CALL)
CARVE_NVML_CALLS(CARVE_DECLARE_CALL)

#define REAL(symbol) (carve_real_##symbol)

#endif

/*
 * refusing_cuda.c: a test-only libcuda.so.1 that refuses the calls its environment names and forwards the
 * rest to the fake driver. It lets the limiter's error paths run as they do when a real driver says no
 * (a sticky error, a free of memory the context lost, an allocation the driver itself cannot place).
 *
 * It is built as build/refusing/libcuda.so.1 (soname libcuda.so.1) with a DT_NEEDED on
 * build/refusing/libcarve-fake-cuda.so: the fake libcuda built from native/fakes/cuda unchanged, under
 * another soname. The limiter dlopen()s "libcuda.so.1" and dlsym()s every entry point on that handle;
 * dlsym on a handle searches the library and then its dependencies, so it gets the refusing entry point
 * for the calls below and the fake's own for every other one. Nothing of the fake is copied or edited.
 *
 * Environment (read at each call, so one process can change it):
 *   REFUSING_CUDA_FREE=N         the first N calls of cuMemFree_v2 and cuMemFreeAsync (counted together) fail
 *                                with CUDA_ERROR_ILLEGAL_ADDRESS, leaving the allocation in place (as a driver
 *                                with a sticky error does)
 *   REFUSING_CUDA_ALLOC_OVER=B   cuMemAlloc_v2 of more than B bytes fails with CUDA_ERROR_OUT_OF_MEMORY
 *                                without reaching the fake
 *   REFUSING_CUDA_DEVICE_COUNT=R cuDeviceGetCount fails with the CUresult R (a driver that cannot say how many
 *                                devices it has)
 *   REFUSING_CUDA_UUID=R         cuDeviceGetUuid_v2 fails with the CUresult R (a driver that cannot tell a
 *                                device's UUID), writing nothing
 *   REFUSING_CUDA_NODE_TYPE=R    cuGraphNodeGetType fails with the CUresult R after the fake has written the
 *                                node's type: the outputs of a failed call are undefined, and a driver may
 *                                leave them set (the caller must not read them)
 *   REFUSING_CUDA_PROCADDR_V1=R  cuGetProcAddress (the first, unversioned one) fails with the CUresult R: a
 *                                driver that resolves only through cuGetProcAddress_v2, which it forwards
 *   REFUSING_CUDA_PROCADDR_V2_BELOW=V  cuGetProcAddress_v2 asked for a CUDA version below V fails with
 *                                CUDA_ERROR_NOT_FOUND after the fake has written its answer (outputs of a
 *                                failed call are undefined); at V or above it is forwarded unchanged
 *   REFUSING_CUDA_DESTROY=N      the first N calls of cuArrayDestroy and of cuMipmappedArrayDestroy (counted
 *                                together) fail with CUDA_ERROR_ILLEGAL_ADDRESS, the array left in place
 * refusingCudaRefusals() returns how many calls it refused (tests check the refusal happened).
 * refusingCudaPitchCalls() returns how many cuMemAllocPitch_v2 calls reached the driver (forwarded unchanged):
 * a pitched allocation the limiter can refuse before the driver places it must not get here.
 * refusingCudaInstantiateUnseen() instantiates a graph by calling the fake directly, as code the limiter
 * does not intercept would (a graph instantiated before the limiter saw it): the limiter has no record of
 * the executable graph it returns.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#include <cuda.h>

#define EXPORT __attribute__((visibility("default")))

static uint64_t g_refusals;
static uint64_t g_frees;
static uint64_t g_destroys;
static uint64_t g_pitch_calls;

/* The fake's own entry point `name`, looked up on the fake's handle (loaded already, as this library's
 * dependency), never through the global scope, where the limiter's hooks come first. */
static void *fake(const char *name)
{
    void *lib = dlopen("libcarve-fake-cuda.so", RTLD_LAZY | RTLD_NOLOAD);
    void *p = lib ? dlsym(lib, name) : NULL;
    if (!p)
        abort(); /* the fake lacks an entry point this library forwards: a build error, not a refusal */
    return p;
}

static uint64_t env_u64(const char *name, uint64_t otherwise)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : otherwise;
}

static int refuse_free(void)
{
    uint64_t nth = __atomic_add_fetch(&g_frees, 1, __ATOMIC_RELAXED);
    if (nth > env_u64("REFUSING_CUDA_FREE", 0))
        return 0;
    __atomic_add_fetch(&g_refusals, 1, __ATOMIC_RELAXED);
    return 1;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    static CUresult (*real)(CUdeviceptr);
    if (!real)
        real = (CUresult(*)(CUdeviceptr))fake("cuMemFree_v2");
    return refuse_free() ? CUDA_ERROR_ILLEGAL_ADDRESS : real(dptr);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    static CUresult (*real)(CUdeviceptr, CUstream);
    if (!real)
        real = (CUresult(*)(CUdeviceptr, CUstream))fake("cuMemFreeAsync");
    return refuse_free() ? CUDA_ERROR_ILLEGAL_ADDRESS : real(dptr, stream);
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    static CUresult (*real)(CUdeviceptr *, size_t);
    if (!real)
        real = (CUresult(*)(CUdeviceptr *, size_t))fake("cuMemAlloc_v2");
    if (bytesize > env_u64("REFUSING_CUDA_ALLOC_OVER", UINT64_MAX)) {
        __atomic_add_fetch(&g_refusals, 1, __ATOMIC_RELAXED);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return real(dptr, bytesize);
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                   unsigned int element)
{
    static CUresult (*real)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
    if (!real)
        real = (CUresult(*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int))fake("cuMemAllocPitch_v2");
    __atomic_add_fetch(&g_pitch_calls, 1, __ATOMIC_RELAXED);
    return real(dptr, pitch, width, height, element);
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
    static CUresult (*real)(int *);
    if (!real)
        real = (CUresult(*)(int *))fake("cuDeviceGetCount");
    uint64_t rc = env_u64("REFUSING_CUDA_DEVICE_COUNT", 0);
    if (rc) {
        __atomic_add_fetch(&g_refusals, 1, __ATOMIC_RELAXED);
        return (CUresult)rc;
    }
    return real(count);
}

#undef cuGetProcAddress
EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    static CUresult (*real)(const char *, void **, int, cuuint64_t);
    if (!real)
        real = (CUresult(*)(const char *, void **, int, cuuint64_t))fake("cuGetProcAddress");
    uint64_t rc = env_u64("REFUSING_CUDA_PROCADDR_V1", 0);
    if (rc) {
        __atomic_add_fetch(&g_refusals, 1, __ATOMIC_RELAXED);
        return (CUresult)rc;
    }
    return real(symbol, pfn, version, flags);
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                   CUdriverProcAddressQueryResult *status)
{
    static CUresult (*real)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    if (!real)
        real = (CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))fake(
            "cuGetProcAddress_v2");
    CUresult rc = real(symbol, pfn, version, flags, status);
    if (rc != CUDA_SUCCESS || (uint64_t)version >= env_u64("REFUSING_CUDA_PROCADDR_V2_BELOW", 0))
        return rc;
    __atomic_add_fetch(&g_refusals, 1, __ATOMIC_RELAXED);
    return CUDA_ERROR_NOT_FOUND; /* *pfn keeps the fake's answer */
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    static CUresult (*real)(CUuuid *, CUdevice);
    if (!real)
        real = (CUresult(*)(CUuuid *, CUdevice))fake("cuDeviceGetUuid_v2");
    uint64_t rc = env_u64("REFUSING_CUDA_UUID", 0);
    if (rc) {
        __atomic_add_fetch(&g_refusals, 1, __ATOMIC_RELAXED);
        return (CUresult)rc;
    }
    return real(uuid, dev);
}

EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type)
{
    static CUresult (*real)(CUgraphNode, CUgraphNodeType *);
    if (!real)
        real = (CUresult(*)(CUgraphNode, CUgraphNodeType *))fake("cuGraphNodeGetType");
    CUresult rc = real(node, type);
    uint64_t refused = env_u64("REFUSING_CUDA_NODE_TYPE", 0);
    if (rc != CUDA_SUCCESS || !refused)
        return rc;
    __atomic_add_fetch(&g_refusals, 1, __ATOMIC_RELAXED);
    return (CUresult)refused;
}

/* A destroy refused as a driver with a sticky error refuses it: the array stays allocated. */
static int refuse_destroy(void)
{
    uint64_t nth = __atomic_add_fetch(&g_destroys, 1, __ATOMIC_RELAXED);
    if (nth > env_u64("REFUSING_CUDA_DESTROY", 0))
        return 0;
    __atomic_add_fetch(&g_refusals, 1, __ATOMIC_RELAXED);
    return 1;
}

EXPORT CUresult cuArrayDestroy(CUarray h)
{
    static CUresult (*real)(CUarray);
    if (!real)
        real = (CUresult(*)(CUarray))fake("cuArrayDestroy");
    return refuse_destroy() ? CUDA_ERROR_ILLEGAL_ADDRESS : real(h);
}

EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    static CUresult (*real)(CUmipmappedArray);
    if (!real)
        real = (CUresult(*)(CUmipmappedArray))fake("cuMipmappedArrayDestroy");
    return refuse_destroy() ? CUDA_ERROR_ILLEGAL_ADDRESS : real(h);
}

EXPORT uint64_t refusingCudaRefusals(void)
{
    return __atomic_load_n(&g_refusals, __ATOMIC_RELAXED);
}

EXPORT uint64_t refusingCudaPitchCalls(void)
{
    return __atomic_load_n(&g_pitch_calls, __ATOMIC_RELAXED);
}

EXPORT CUresult refusingCudaInstantiateUnseen(CUgraphExec *exec, CUgraph graph)
{
    CUresult (*real)(CUgraphExec *, CUgraph, unsigned long long) =
        (CUresult(*)(CUgraphExec *, CUgraph, unsigned long long))fake("cuGraphInstantiateWithFlags");
    return real(exec, graph, 0);
}

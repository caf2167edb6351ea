/*
 * unified.c (fake libcuda): unified addressing (cuda.h's group of that name): what a pointer is
 * (cuPointerGetAttribute(s), from the object table of objects.c), cuPointerSetAttribute (SYNC_MEMOPS only),
 * and the prefetch and advice calls, which have nothing to move in a fake whose device memory is host
 * memory.
 */
#include "fakecuda.h"

/* One attribute of `ptr`; `known` says whether ptr is in an allocation of the fake. */
static CUresult pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr, int strict)
{
    fc_obj_t o;
    int known = fc_obj_find(ptr, &o) == 0;
    if (!known && strict)
        return CUDA_ERROR_INVALID_VALUE;
    int host = known && o.kind == FC_HOST;
    int ordinal = known ? o.ordinal : -1;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = known && ordinal >= 0 ? (CUcontext)fc_primary(ordinal) : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = !known ? 0 : host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *(uint64_t *)data = known ? ptr : 0; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *(unsigned *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED: *(unsigned *)data = known; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = host ? fc_current_ordinal() : ordinal; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = known ? o.key : 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(uint64_t *)data = known ? o.key : 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = known ? o.span : 0; break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *(uint64_t *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(void **)data = known && o.kind == FC_POOLMEM ? o.aux : NULL;
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    FC_CALLED("cuPointerGetAttribute");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    return pointer_attribute(data, attribute, ptr, 1);
}

/* Unlike the single query, an unknown pointer is not an error here: its attributes read as unregistered
 * host memory (context NULL, memory type 0), which cudaPointerGetAttributes reports for malloc'ed memory. */
FAKE_EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data, CUdeviceptr ptr)
{
    FC_CALLED("cuPointerGetAttributes");
    if (!fc_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!attrs || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        if (!data[i])
            continue;
        CUresult rc = pointer_attribute(data[i], attrs[i], ptr, 0);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    FC_CALLED("cuPointerSetAttribute");
    fc_obj_t o;
    if (fc_obj_find(ptr, &o) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return attribute == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s)
{
    FC_CALLED("cuMemPrefetchAsync_v2");
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc)
{
    FC_CALLED("cuMemAdvise_v2");
    return CUDA_SUCCESS;
}

/* hidden aliases: cuGetProcAddress hands out these, never addresses an interposer could replace */
FC_ALIAS(cuPointerGetAttribute)
FC_ALIAS(cuPointerGetAttributes)
FC_ALIAS(cuPointerSetAttribute)
FC_ALIAS(cuMemPrefetchAsync_v2)
FC_ALIAS(cuMemAdvise_v2)

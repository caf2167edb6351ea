/*
 * occupancy.c (fake libcuda): the occupancy calculator: as many 1024-thread-limited blocks per SM as the
 * model's threads and blocks per SM allow (attributes.c), whatever the function's resources.
 */
#include "module.h"

static int blocks_per_sm(int ordinal, int block)
{
    const fake_gpu_t *g = fc_gpu(ordinal);
    if (!g || block <= 0)
        return 0;
    int threads = fc_attribute(g, ordinal, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    int blocks = fc_attribute(g, ordinal, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
    int n = threads / block;
    return n < blocks ? n : blocks;
}

#define OCCUPANCY(name, ...)                                                                               \
    FAKE_EXPORT CUresult name(int *numBlocks, CUfunction f, int blockSize, size_t dynSmem __VA_ARGS__)     \
    {                                                                                                      \
        FC_CALLED(#name);                                                                                  \
        fc_func_t *fn = func_get(f);                                                                       \
        if (!fn)                                                                                           \
            return CUDA_ERROR_INVALID_HANDLE;                                                              \
        if (!numBlocks || blockSize <= 0 || blockSize > 1024)                                              \
            return CUDA_ERROR_INVALID_VALUE;                                                               \
        *numBlocks = blocks_per_sm(fn->mod->ordinal, blockSize);                                           \
        return CUDA_SUCCESS;                                                                               \
    }
OCCUPANCY(cuOccupancyMaxActiveBlocksPerMultiprocessor)
OCCUPANCY(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, , unsigned int flags)

static CUresult potential_block_size(int *minGrid, int *blockSize, CUfunction f, int limit)
{
    fc_func_t *fn = func_get(f);
    if (!fn)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!minGrid || !blockSize)
        return CUDA_ERROR_INVALID_VALUE;
    int block = limit > 0 && limit < 1024 ? limit : 1024;
    const fake_gpu_t *g = fc_gpu(fn->mod->ordinal);
    *blockSize = block;
    *minGrid = blocks_per_sm(fn->mod->ordinal, block) *
               fc_attribute(g, fn->mod->ordinal, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *minGrid, int *blockSize, CUfunction f,
                                                      CUoccupancyB2DSize fn, size_t dynSmem, int limit)
{
    FC_CALLED("cuOccupancyMaxPotentialBlockSize");
    return potential_block_size(minGrid, blockSize, f, limit);
}

FAKE_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGrid, int *blockSize, CUfunction f,
                                                               CUoccupancyB2DSize fn, size_t dynSmem, int limit,
                                                               unsigned int flags)
{
    FC_CALLED("cuOccupancyMaxPotentialBlockSizeWithFlags");
    return potential_block_size(minGrid, blockSize, f, limit);
}

FAKE_EXPORT CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynSmem, CUfunction f, int numBlocks,
                                                             int blockSize)
{
    FC_CALLED("cuOccupancyAvailableDynamicSMemPerBlock");
    fc_func_t *fn = func_get(f);
    if (!fn)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!dynSmem || numBlocks <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    int ordinal = fn->mod->ordinal;
    int per_sm = fc_attribute(fc_gpu(ordinal), ordinal, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    int optin = fc_attribute(fc_gpu(ordinal), ordinal, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    size_t each = (size_t)per_sm / (size_t)numBlocks;
    *dynSmem = each < (size_t)optin ? each : (size_t)optin;
    return CUDA_SUCCESS;
}

/* hidden aliases: cuGetProcAddress hands out these, never addresses an interposer could replace */
FC_ALIAS(cuOccupancyMaxActiveBlocksPerMultiprocessor)
FC_ALIAS(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)
FC_ALIAS(cuOccupancyMaxPotentialBlockSize)
FC_ALIAS(cuOccupancyMaxPotentialBlockSizeWithFlags)
FC_ALIAS(cuOccupancyAvailableDynamicSMemPerBlock)

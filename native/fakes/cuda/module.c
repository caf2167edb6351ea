#include "fakecuda.h"
CUresult fc_module_load_image(CUmodule *out, const void *image) { return CUDA_ERROR_NOT_SUPPORTED; }
void fc_ctx_reset_resources(int ordinal) {}
CUresult fc_pool_default(CUmemoryPool *pool, CUdevice dev) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult fc_pool_current(CUmemoryPool *pool, CUdevice dev) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult fc_pool_set_current(CUdevice dev, CUmemoryPool pool) { return CUDA_ERROR_NOT_SUPPORTED; }

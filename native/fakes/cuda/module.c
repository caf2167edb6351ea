#include "fakecuda.h"
CUresult fc_module_load_image(CUmodule *out, const void *image) { return CUDA_ERROR_NOT_SUPPORTED; }
void fc_ctx_reset_resources(int ordinal) {}

/*
 * stubs.c (fake NVML): a weak definition of every function nvml.h declares (symbols_gen.h), answering
 * NVML_ERROR_NOT_SUPPORTED (3), as a driver does for a feature the GPU lacks. An emulated function is a
 * strong definition elsewhere in fakes/nvml, which the linker takes instead. Why every name: PyTorch asserts
 * that the NVML functions it names resolve, and torch.cuda calls the unversioned nvmlInit
 * (cuda-runtime-facts.md §6, §8). The stubs take no arguments (the caller cleans up; nothing is touched)
 * and this file does not include nvml.h, whose prototypes and renaming macros would clash.
 */
#include "symbols_gen.h"

#define NVML_STUB(name)                                                                                    \
    __attribute__((weak, visibility("default"))) int name(void)                                            \
    {                                                                                                      \
        return 3; /* NVML_ERROR_NOT_SUPPORTED */                                                           \
    }

NVML_GEN_NAMES(NVML_STUB)

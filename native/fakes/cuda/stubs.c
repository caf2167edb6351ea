/*
 * stubs.c (fake libcuda): a weak definition of every driver entry point cuda.h names (symbols_gen.h), both
 * exported under its ABI name and as the hidden fc_impl_<name> that cuGetProcAddress hands out. Each answers
 * CUDA_ERROR_NOT_SUPPORTED (801) and records its name (carveFakeCudaLastCall). An emulated entry point is a
 * strong definition elsewhere (FAKE_EXPORT + FC_ALIAS), which the linker takes instead of the stub.
 *
 * Why: the real runtime resolves ~360 names at init and frameworks dlsym more; a name that does not resolve
 * becomes a sticky runtime error (cuda-runtime-facts.md §3, §7), so every name must resolve and only an
 * unsupported feature's call may fail. A stub takes no arguments: with the C calling convention the caller
 * cleans up, so any argument list is safe, and the stub never touches the caller's pointers.
 *
 * This file does not include cuda.h: its #defines rename the apis (cuMemAlloc -> cuMemAlloc_v2) and its
 * prototypes would clash with the argument-less stubs.
 */
#include "symbols_gen.h"

extern __thread const char *fc_last_call;
int fc_trace(void);
void fc_log(const char *fmt, ...);

#define FC_STUB(name)                                                                                      \
    __attribute__((weak, visibility("default"))) int name(void)                                            \
    {                                                                                                      \
        fc_last_call = #name;                                                                              \
        if (fc_trace())                                                                                    \
            fc_log("%s: not emulated, CUDA_ERROR_NOT_SUPPORTED", #name);                                   \
        return 801; /* CUDA_ERROR_NOT_SUPPORTED */                                                         \
    }                                                                                                      \
    extern int fc_impl_##name(void) __attribute__((weak, alias(#name), visibility("hidden")));

FC_GEN_NAMES(FC_STUB)

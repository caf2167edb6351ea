/*
 * symbols.c (fake libcuda): every entry point of the fake, with the name an application passes to
 * cuGetProcAddress, the CUDA version that introduced this variant, and whether it is the per-thread
 * default stream variant. One line per entry point: the rows are generated from cuda.h into symbols_gen.h
 * (native/fakes/gen_cuda_symbols.py); an entry point the fake does not emulate is a stub (stubs.c), one
 * that it emulates is a FAKE_EXPORT function with an FC_ALIAS in its group's file, which replaces the stub
 * at link time. Each row also gets a thunk: a jump to the entry point
 * from another address, which cuGetProcAddress hands out instead under CARVE_FAKE_PROCADDR_THUNKS=1.
 */
#include "symbols.h"
#include "symbols_gen.h"

/* The generated rows (every variant cuda.h knows) plus the fake's own test variant. */
#define FC_SYMBOLS(X)                                                                                      \
    FC_GEN_SYMBOLS(X)                                                                                      \
    X(cuMemGetInfo_v99, cuMemGetInfo, 99000, 0)

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

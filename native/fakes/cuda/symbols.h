/*
 * symbols.h (fake libcuda): the table of exported entry points that cuGetProcAddress resolves from.
 * Kept free of cuda.h so symbols.c can declare every entry point as a plain address.
 */
#ifndef CARVE_FAKECUDA_SYMBOLS_H
#define CARVE_FAKECUDA_SYMBOLS_H

typedef struct fc_symbol {
    const char *name;   /* exported name */
    const char *base;   /* name given to cuGetProcAddress */
    int version;        /* lowest cudaVersion resolving to this symbol */
    int per_thread;     /* _ptsz/_ptds variant */
    void *fn;
    void *thunk;        /* a jump to fn at another address (CARVE_FAKE_PROCADDR_THUNKS) */
} fc_symbol_t;

extern const fc_symbol_t fc_symbols[];
extern const unsigned fc_symbol_count;

#endif

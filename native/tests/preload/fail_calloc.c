/*
 * libfail_calloc.so, preloaded before the limiter: calloc(n, size) fails with ENOMEM, as when the address space
 * is exhausted, for the one shape CARVE_TEST_FAIL_CALLOC="<n>x<size>" names, and allocates every other. The
 * rest of the process (the Python interpreter, the driver) allocates as before, so a test can refuse one
 * allocation of the limiter's: glibc's own fallbacks (brk when mmap fails) make a syscall fault too blunt.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

extern void *__libc_calloc(size_t n, size_t size); /* glibc's calloc: no dlsym, which may itself calloc */

void *calloc(size_t n, size_t size)
{
    /* read once; getenv allocates nothing */
    static int parsed;
    static size_t fail_n, fail_size;
    if (!parsed) {
        const char *shape = getenv("CARVE_TEST_FAIL_CALLOC");
        if (!shape || sscanf(shape, "%zux%zu", &fail_n, &fail_size) != 2)
            fail_n = fail_size = 0;
        parsed = 1;
    }
    if (fail_n && n == fail_n && size == fail_size) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_calloc(n, size);
}

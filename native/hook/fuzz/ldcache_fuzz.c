/*
 * ldcache_fuzz.c: a libFuzzer-compatible target for update-ldcache's filter of the ld.so.cache that
 * ldconfig wrote from the container's libraries (hook/ldcache_file.c): its SONAMEs and layout come from
 * files the tenant controls, and the hook reads it as root.
 *
 *   make -C native fuzz && native/build/fuzz/ldcache_fuzz <iterations> <seed> <corpus files>
 *
 * Beyond "no crash, no leak, no undefined behaviour" (ASan+UBSan: offsets, counts and lengths are the
 * input's), it checks: the length never grows; bytes past the entry table's strings are untouched in size;
 * the answer is 0 or -1; a cache accepted once is accepted again unchanged (the filter is idempotent) when
 * its strings follow the entry table, as ldconfig lays them out (the tenant picks SONAMEs, not the layout:
 * a string inside the table changes when entries move, which is memory-safe but not a fixed point).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../hook.h"

/* main.c's reporters print to stderr; here they stay silent (millions of inputs). */
void hook_error(const char *fmt, ...)
{
    (void)fmt;
}

void hook_warn(const char *fmt, ...)
{
    (void)fmt;
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* A new-format cache whose entries' strings all lie past the entry table. */
static int strings_after_table(const uint8_t *data, size_t size)
{
    static const char magic[] = "glibc-ld.so.cache1.1";
    if (size < 48 || memcmp(data, magic, sizeof magic - 1) != 0)
        return 0;
    uint64_t end = 48 + (uint64_t)get32(data + 20) * 24;
    if (end > size)
        return 0;
    for (uint64_t e = 48; e < end; e += 24)
        if (get32(data + e + 4) < end || get32(data + e + 8) < end)
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *cache = malloc(size ? size : 1); /* exact size: a read past the end is an ASan error */
    if (!cache)
        return 0;
    memcpy(cache, data, size);
    size_t len = size;
    int rc = ldcache_drop_path_sonames(cache, &len);
    if (len > size || (rc != 0 && rc != -1))
        abort();
    if (rc == 0 && strings_after_table(data, size)) {
        char *copy = malloc(len ? len : 1);
        if (!copy)
            abort();
        memcpy(copy, cache, len);
        size_t len2 = len;
        if (ldcache_drop_path_sonames(cache, &len2) != 0 || len2 != len || memcmp(copy, cache, len) != 0)
            abort(); /* not idempotent */
        free(copy);
    }
    free(cache);
    return 0;
}

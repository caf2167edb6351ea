/*
 * ldcache_file.c: dropping path-like SONAMEs from the ld.so.cache ldconfig wrote.
 *
 * glibc's cache (elf/cache.c, "new" format, the only one ldconfig writes since 2.32, also the second part
 * of the older "compat" files): a 48-byte header ("glibc-ld.so.cache" "1.1", nlibs, len_strings, flags,
 * extension offset, ...) then nlibs sorted 24-byte entries {int32 flags; uint32 key, value; uint32
 * osversion; uint64 hwcap}, key (the SONAME) and value (the path) being offsets of NUL-terminated
 * strings counted from the header. The loader binary-searches the entries by key and reads strings by
 * offset, so entries can be removed (order kept) and the strings left where they are.
 */
#include <stdint.h>
#include <string.h>

#include "hook.h"

#define OLD_MAGIC "ld.so-1.7.0"
#define NEW_MAGIC "glibc-ld.so.cache1.1"
#define NEW_HEADER 48
#define NEW_ENTRY 24
#define OLD_HEADER 16
#define OLD_ENTRY 12

static uint32_t get32(const char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The NUL-terminated string at `off` from `base` within [base, end), or NULL. */
static const char *string_at(const char *base, const char *end, uint32_t off)
{
    if (off >= (size_t)(end - base))
        return NULL;
    const char *s = base + off;
    return memchr(s, '\0', (size_t)(end - s)) ? s : NULL;
}

static int names_a_path(const char *soname)
{
    return !*soname || strchr(soname, '/') || strcmp(soname, ".") == 0 || strcmp(soname, "..") == 0;
}

int ldcache_drop_path_sonames(char *cache, size_t *len)
{
    char *end = cache + *len;
    char *hdr = cache;
    if (*len >= OLD_HEADER && memcmp(cache, OLD_MAGIC, sizeof OLD_MAGIC - 1) == 0) {
        /* compat file: the new table follows the old one, 8-aligned */
        uint64_t old_end = OLD_HEADER + (uint64_t)get32(cache + 12) * OLD_ENTRY;
        hdr = cache + ((old_end + 7) & ~(uint64_t)7);
        if (old_end > *len)
            hdr = end;
    }
    if ((size_t)(end - hdr) < NEW_HEADER || memcmp(hdr, NEW_MAGIC, sizeof NEW_MAGIC - 1) != 0) {
        hook_error("update-ldcache: ldconfig wrote a cache in an unknown format");
        return -1;
    }
    uint32_t nlibs = get32(hdr + 20);
    if ((uint64_t)nlibs * NEW_ENTRY > (uint64_t)(end - hdr - NEW_HEADER)) {
        hook_error("update-ldcache: ldconfig wrote a truncated cache");
        return -1;
    }
    char *entries = hdr + NEW_HEADER;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < nlibs; i++) {
        char *e = entries + (size_t)i * NEW_ENTRY;
        const char *key = string_at(hdr, end, get32(e + 4));
        const char *value = string_at(hdr, end, get32(e + 8));
        if (!key || !value) {
            hook_error("update-ldcache: ldconfig wrote a cache entry out of bounds");
            return -1;
        }
        if (names_a_path(key)) {
            hook_warn("update-ldcache: refusing the SONAME \"%s\" of %s: a SONAME is a file name, not a "
                      "path (not in the cache, no link made)", key, value);
            continue;
        }
        if (kept != i)
            memmove(entries + (size_t)kept * NEW_ENTRY, e, NEW_ENTRY);
        kept++;
    }
    if (kept != nlibs) {
        memset(entries + (size_t)kept * NEW_ENTRY, 0, (size_t)(nlibs - kept) * NEW_ENTRY);
        memcpy(hdr + 20, &kept, sizeof kept);
    }
    return 0;
}

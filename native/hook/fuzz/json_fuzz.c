/*
 * json_fuzz.c: a libFuzzer-compatible target for the hook's JSON reader (hook/json.c), the part of the
 * hook that parses runtime input (the OCI state on stdin, the bundle's config.json).
 *
 *   clang -fsanitize=fuzzer,address,undefined hook/fuzz/json_fuzz.c hook/json.c   (libFuzzer)
 *   make -C native fuzz-json && native/build/fuzz/json_fuzz <iterations> <seed> <corpus files>   (no clang:
 *     fuzz_driver.c runs the same entry over the corpus and mutations of it, under ASan and UBSan)
 *
 * Beyond "no crash, no leak, no undefined behaviour", it checks what callers rely on: an answer is a
 * NUL-free string no longer than the document, a number no larger than the bound asked for, and the same
 * input always gives the same answer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../hook.h"

static void check(const char *doc, size_t len, const char *const *keys)
{
    char *a = json_string_at(doc, len, keys);
    char *b = json_string_at(doc, len, keys);
    if ((a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0))
        abort(); /* not deterministic */
    if (a && strlen(a) > len)
        abort(); /* unescaping only shortens */
    free(a);
    free(b);
}

static void check_uint(const char *doc, size_t len, const char *const *keys, unsigned long long max)
{
    unsigned long long a = 0, b = 0;
    int ra = json_uint_at(doc, len, keys, max, &a), rb = json_uint_at(doc, len, keys, max, &b);
    if (ra != rb || (ra == 0 && a != b))
        abort(); /* not deterministic */
    if (ra == 0 && a > max)
        abort(); /* the bound is the caller's guard (a uid fits 32 bits) */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const bundle[] = {"bundle", NULL};
    static const char *const root[] = {"root", "path", NULL};
    static const char *const deep[] = {"a", "b", "c", "d", NULL};
    /* An exact-size copy: reads past `size` are ASan errors, not reads into a terminator. */
    char *doc = malloc(size ? size : 1);
    if (!doc)
        return 0;
    memcpy(doc, data, size);
    check(doc, size, bundle);
    check(doc, size, root);
    check(doc, size, deep);
    static const char *const uid[] = {"process", "user", "uid", NULL};
    check_uint(doc, size, uid, 0xFFFFFFFFull);
    check_uint(doc, size, bundle, 9);
    free(doc);
    return 0;
}

/*
 * preload_fuzz.c: a libFuzzer-compatible target for the preload sub-command's reading and writing of the
 * image's /etc/ld.so.preload (hook/preload_list.c): the file is the tenant's, read by the hook as root.
 *
 *   make -C native fuzz && native/build/fuzz/preload_fuzz <iterations> <seed> <corpus files>
 *
 * Beyond "no crash, no leak, no undefined behaviour" (ASan+UBSan), it checks what the hook relies on:
 * every parsed name is non-empty and holds no separator or NUL; the composed file names the limiter first;
 * read back as glibc reads it, the composed file gives the limiter once, then the image's names that
 * survive, in order (composing what it read back changes nothing: a fixed point).
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

static const char LIB[] = "/usr/lib/carve/libcarve-limiter.so";

static void check_names(const struct preload_list *l)
{
    for (size_t i = 0; i < l->count; i++) {
        const char *n = l->names[i];
        if (!*n || strpbrk(n, " \t\n:"))
            abort(); /* glibc would have split here */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (memchr(data, '\0', size))
        return 0; /* the hook refuses a file with a NUL before parsing (preload.c) */
    char *text = malloc(size ? size : 1); /* exact size: a read past the end is an ASan error */
    if (!text)
        return 0;
    memcpy(text, data, size);
    struct preload_list image = {0};
    if (preload_parse(text, size, &image) != 0) {
        free(text);
        return 0;
    }
    check_names(&image);
    size_t len = 0;
    char *out = preload_compose(LIB, &image, &len);
    if (!out)
        abort();
    if (strlen(out) != len || strncmp(out, LIB, strlen(LIB)) != 0)
        abort(); /* the limiter's line comes first */
    struct preload_list back = {0};
    if (preload_parse(out, len, &back) != 0)
        abort();
    check_names(&back);
    if (back.count == 0 || strcmp(back.names[0], LIB) != 0)
        abort();
    for (size_t i = 1; i < back.count; i++)
        if (strcmp(back.names[i], LIB) == 0)
            abort(); /* the limiter once */
    if (back.count > image.count + 1)
        abort(); /* composing drops names, never invents them */
    size_t len2 = 0;
    char *again = preload_compose(LIB, &back, &len2);
    if (!again || len2 != len || memcmp(again, out, len) != 0)
        abort(); /* not a fixed point */
    free(again);
    preload_free(&back);
    free(out);
    preload_free(&image);
    free(text);
    return 0;
}

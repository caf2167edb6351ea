/*
 * preload_list.c: /etc/ld.so.preload read exactly as glibc's dynamic loader reads it, and written so
 * that the loader reads back what we mean.
 *
 * glibc (elf/rtld.c, dl_main; unchanged from 2.17 to today) maps the whole file, then:
 *  1. blanks comments: from a '#' up to (not including) the next '\n' every byte becomes ' '. Its loop
 *     never moves its scan start, only shortens the length, so after the first comment it searches
 *     only the first `rest` bytes of the file (rest = what followed that comment): a later '#' is
 *     then NOT a comment but part of a name. We reproduce that, quirk included.
 *  2. splits on ' ', '\t', '\n' and ':' (strsep; empty fields skipped). '\r' is not a separator:
 *     "lib.so\r" names a different file. A last name with no separator after it is taken whole.
 * A NUL byte would end strsep's view early; callers refuse such files before parsing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hook.h"

static int is_sep(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == ':';
}

static int add(struct preload_list *l, const char *name, size_t len)
{
    char **more = realloc(l->names, (l->count + 1) * sizeof *more);
    if (!more)
        return -1;
    l->names = more;
    if (!(l->names[l->count] = strndup(name, len)))
        return -1;
    l->count++;
    return 0;
}

void preload_free(struct preload_list *l)
{
    for (size_t i = 0; i < l->count; i++)
        free(l->names[i]);
    free(l->names);
    l->names = NULL;
    l->count = 0;
}

int preload_parse(const char *text, size_t len, struct preload_list *out)
{
    out->names = NULL;
    out->count = 0;
    if (len == 0)
        return 0; /* glibc cannot map an empty file: nothing is preloaded */
    char *file = malloc(len + 1);
    if (!file)
        return -1;
    memcpy(file, text, len);
    file[len] = '\0';

    /* 1. comments, with glibc's fixed scan start */
    char *runp = file;
    size_t rest = len;
    while (rest > 0) {
        char *comment = memchr(runp, '#', rest);
        if (!comment)
            break;
        rest -= (size_t)(comment - runp);
        do
            *comment = ' ';
        while (--rest > 0 && *++comment != '\n');
    }

    /* 2. the trailing name without a separator after it, then strsep over the rest */
    char *tail = NULL;
    if (!is_sep(file[len - 1])) {
        tail = file + len;
        while (tail > file && !is_sep(tail[-1]))
            tail--;
        if (tail > file)
            tail[-1] = '\0';
    } else {
        file[len - 1] = '\0';
    }
    int rc = 0;
    if (file != tail) {
        char *p;
        runp = file;
        while (rc == 0 && (p = strsep(&runp, ": \t\n")) != NULL)
            if (p[0] != '\0')
                rc = add(out, p, strlen(p));
    }
    if (rc == 0 && tail)
        rc = add(out, tail, len - (size_t)(tail - file));
    free(file);
    if (rc != 0)
        preload_free(out);
    return rc;
}

char *preload_compose(const char *lib, const struct preload_list *image, size_t *len)
{
    size_t cap = strlen(lib) + 2;
    for (size_t i = 0; i < image->count; i++)
        cap += strlen(image->names[i]) + 1;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    size_t n = 0;
    n += (size_t)sprintf(out, "%s\n", lib);
    for (size_t i = 0; i < image->count; i++) {
        const char *name = image->names[i];
        if (strcmp(name, lib) == 0)
            continue; /* the limiter once, first */
        if (strchr(name, '#')) {
            /* glibc read it as a name only through its comment quirk; on a line of its own it would
             * start a comment and could swallow what follows. */
            hook_warn("preload: dropping the image's /etc/ld.so.preload entry %s (contains '#')", name);
            continue;
        }
        n += (size_t)sprintf(out + n, "%s\n", name);
    }
    *len = n;
    return out;
}

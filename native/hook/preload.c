/*
 * preload.c: `preload --library <path>`: make the limiter the first library glibc preloads in the
 * container, keeping the image's own /etc/ld.so.preload entries after it (instead of mounting a file
 * over it, which would drop them).
 *
 * The image's file is read through the contained lookup (a symlink in it resolves inside the root and
 * is then replaced by a regular file), parsed as glibc parses it (preload_list.c), and rewritten
 * atomically: the limiter, then every other entry in order, copies of the limiter removed. The written
 * file is parsed back and must start with the limiter, or the hook fails: a container never starts
 * with a preload file glibc would read differently. Idempotent: a second run writes the same bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hook.h"

#define PRELOAD "/etc/ld.so.preload"

/* The image's file: "" when absent; NULL after a message when unreadable. */
static char *read_image_preload(int rootfd, size_t *len)
{
    *len = 0;
    struct stat st;
    char base[NAME_MAX + 1];
    int dirfd = rooted_parent(rootfd, PRELOAD, 0, base);
    if (dirfd >= 0) {
        if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
            hook_warn(PRELOAD " in the image is a symlink: read inside the container root, then "
                              "replaced by a regular file");
        close(dirfd);
    }
    char *text = rooted_read(rootfd, PRELOAD, HOOK_MAX_PRELOAD, len);
    if (!text && errno == ENOENT)
        return strdup("");
    if (!text) {
        hook_error("preload: the image's " PRELOAD ": %s", contained_error(errno));
        return NULL;
    }
    if (memchr(text, '\0', *len)) {
        hook_error("preload: the image's " PRELOAD " holds a NUL byte");
        free(text);
        return NULL;
    }
    return text;
}

int run_preload(const struct hook_root *root, int argc, char **argv)
{
    const char *lib = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--library") == 0 && i + 1 < argc)
            lib = argv[++i];
        else {
            hook_error("preload: unexpected argument %s", argv[i]);
            return 2;
        }
    }
    if (!lib || lib[0] != '/' || strpbrk(lib, " \t\n\r:#")) {
        hook_error("preload: --library needs an absolute path without blanks, ':' or '#'");
        return 2;
    }
    size_t len;
    char *image = read_image_preload(root->fd, &len);
    if (!image)
        return 1;
    struct preload_list entries, check;
    if (preload_parse(image, len, &entries) != 0) {
        free(image);
        hook_error("preload: out of memory");
        return 1;
    }
    free(image);
    char *merged = preload_compose(lib, &entries, &len);
    int rc = 1;
    if (!merged)
        hook_error("preload: out of memory");
    else if (preload_parse(merged, len, &check) != 0)
        hook_error("preload: out of memory");
    else {
        /* What glibc will read: the limiter first and only once. */
        int ok = check.count > 0 && strcmp(check.names[0], lib) == 0;
        for (size_t i = 1; ok && i < check.count; i++)
            ok = strcmp(check.names[i], lib) != 0;
        preload_free(&check);
        if (!ok)
            hook_error("preload: the merged " PRELOAD " would not load %s first; refusing", lib);
        else if (rooted_write(root->fd, PRELOAD, merged, len, 0644) != 0)
            hook_error("preload: writing the container's " PRELOAD ": %s", contained_error(errno));
        else
            rc = 0;
    }
    preload_free(&entries);
    free(merged);
    return rc;
}

/*
 * preload.c: `preload --library <path>`: put the limiter first in the container's /etc/ld.so.preload and
 * keep every line the image had there, instead of mounting a file over it.
 *
 * Runs inside the container root (enter_root). The image's file is opened O_NOFOLLOW|O_NONBLOCK and read
 * only if it is a regular file of at most HOOK_MAX_PRELOAD bytes; a symlink there is not followed (its
 * lines are dropped, with a warning) and is replaced by a regular file, as is any regular file. Idempotent:
 * a file already naming the library is left as it is.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hook.h"

#define PRELOAD "/etc/ld.so.preload"

/* ld.so.preload is a list separated by whitespace or ':'; true when one entry is exactly `lib`. */
static int lists(const char *text, const char *lib)
{
    size_t n = strlen(lib);
    for (const char *p = text; *p;) {
        p += strspn(p, " \t\n\r:");
        size_t len = strcspn(p, " \t\n\r:");
        if (len == n && memcmp(p, lib, n) == 0)
            return 1;
        p += len;
    }
    return 0;
}

static char *read_image_preload(size_t *len)
{
    *len = 0;
    int fd = open(PRELOAD, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return strdup("");
        if (errno == ELOOP) {
            hook_warn(PRELOAD " in the image is a symlink: not followed, replaced by a regular file");
            return strdup("");
        }
        hook_error("opening the image's " PRELOAD ": %s", strerror(errno));
        return NULL;
    }
    struct stat st;
    char *text = NULL;
    if (fstat(fd, &st) != 0)
        hook_error("stat of the image's " PRELOAD ": %s", strerror(errno));
    else if (!S_ISREG(st.st_mode))
        hook_error("the image's " PRELOAD " is not a regular file");
    else if (!(text = read_file_limited(fd, HOOK_MAX_PRELOAD, len)))
        hook_error("reading the image's " PRELOAD ": %s", strerror(errno));
    close(fd);
    if (text && memchr(text, '\0', *len)) {
        hook_error("the image's " PRELOAD " holds a NUL byte");
        free(text);
        return NULL;
    }
    return text;
}

int run_preload(const char *root, int argc, char **argv)
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
    if (!lib || lib[0] != '/' || strpbrk(lib, " \t\n\r:")) {
        hook_error("preload: --library needs an absolute path without blanks or ':'");
        return 2;
    }
    if (enter_root(root, -1) != 0)
        return 1;
    size_t len;
    char *image = read_image_preload(&len);
    if (!image)
        return 1;
    if (lists(image, lib)) {
        free(image);
        return 0;
    }
    size_t liblen = strlen(lib);
    int need_nl = len > 0 && image[len - 1] != '\n';
    char *merged = malloc(liblen + 1 + len + 2);
    if (!merged) {
        free(image);
        return 1;
    }
    /* The limiter first, so its symbols win over anything the image preloads. */
    memcpy(merged, lib, liblen);
    merged[liblen] = '\n';
    memcpy(merged + liblen + 1, image, len);
    size_t total = liblen + 1 + len;
    if (need_nl)
        merged[total++] = '\n';
    free(image);
    int rc = 0;
    if (make_dirs("/etc", 0755) != 0 || write_replacing(PRELOAD, merged, total, 0644) != 0) {
        hook_error("writing the container's " PRELOAD ": %s", strerror(errno));
        rc = 1;
    }
    free(merged);
    return rc;
}

/*
 * symlinks.c: `create-symlinks --link <target>::<link> ...`: the links a driver installation has and the
 * mounted files lack (libcuda.so -> libcuda.so.1, SONAME -> versioned file), created inside the container
 * root. An existing link with the same target is kept; anything else at <link> but a directory is replaced.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hook.h"

static int create_link(const char *target, const char *link)
{
    char current[PATH_MAX];
    ssize_t n = readlink(link, current, sizeof current - 1);
    if (n >= 0) {
        current[n] = '\0';
        if (strcmp(current, target) == 0)
            return 0;
    }
    struct stat st;
    if (lstat(link, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            hook_error("create-symlinks: %s is a directory in the container", link);
            return -1;
        }
        if (unlink(link) != 0) {
            hook_error("create-symlinks: removing %s: %s", link, strerror(errno));
            return -1;
        }
    }
    char parent[PATH_MAX];
    const char *slash = strrchr(link, '/');
    if (slash > link) {
        memcpy(parent, link, (size_t)(slash - link));
        parent[slash - link] = '\0';
        if (make_dirs(parent, 0755) != 0) {
            hook_error("create-symlinks: creating %s: %s", parent, strerror(errno));
            return -1;
        }
    }
    if (symlink(target, link) != 0) {
        hook_error("create-symlinks: %s -> %s: %s", link, target, strerror(errno));
        return -1;
    }
    return 0;
}

int run_create_symlinks(const char *root, int argc, char **argv)
{
    int failed = 0;
    for (int i = 0; i < argc; i += 2)
        if (strcmp(argv[i], "--link") != 0 || i + 1 >= argc) {
            hook_error("create-symlinks: unexpected argument %s", argv[i]);
            return 2;
        }
    if (enter_root(root, -1) != 0)
        return 1;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--link") != 0 || i + 1 >= argc) {
            hook_error("create-symlinks: unexpected argument %s", argv[i]);
            return 2;
        }
        const char *spec = argv[++i];
        const char *sep = strstr(spec, "::");
        if (!sep || sep == spec || sep[2] != '/' || strlen(spec) >= PATH_MAX) {
            hook_error("create-symlinks: --link %s: expected <target>::<absolute link path>", spec);
            return 2;
        }
        char target[PATH_MAX];
        memcpy(target, spec, (size_t)(sep - spec));
        target[sep - spec] = '\0';
        failed |= create_link(target, sep + 2) != 0;
    }
    return failed ? 1 : 0;
}

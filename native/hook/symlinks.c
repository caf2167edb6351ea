/*
 * symlinks.c: `create-symlinks --link <target>::<link> ...`: the links a driver installation has and the
 * mounted files lack (libcuda.so -> libcuda.so.1, SONAME -> versioned file), created inside the container
 * root. The link's directory is found (and created) by the contained lookup; the link is made there by
 * symlinkat() under a temporary name and renameat() over <link>, so it never follows what is at <link>.
 * An existing link with the same target is kept; anything else at <link> but a directory is replaced.
 * The target is only the link's text: the kernel resolves it later, inside the container.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hook.h"

static int create_link(int rootfd, const char *target, const char *link)
{
    char base[NAME_MAX + 1];
    int dirfd = rooted_parent(rootfd, link, 1, base);
    if (dirfd < 0) {
        hook_error("create-symlinks: %s: %s", link, contained_error(errno));
        return -1;
    }
    int rc = -1;
    char current[PATH_MAX], tmp[NAME_MAX + 1];
    struct stat st;
    ssize_t n = readlinkat(dirfd, base, current, sizeof current - 1);
    if (n >= 0 && (current[n] = '\0', strcmp(current, target) == 0))
        rc = 0;
    else if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
        hook_error("create-symlinks: %s is a directory in the container", link);
    else if (snprintf(tmp, sizeof tmp, ".%.200s.carve-%ld", base, (long)getpid()) >= (int)sizeof tmp)
        hook_error("create-symlinks: %s: name too long", link);
    else {
        unlinkat(dirfd, tmp, 0);
        if (symlinkat(target, dirfd, tmp) != 0 || renameat(dirfd, tmp, dirfd, base) != 0) {
            hook_error("create-symlinks: %s -> %s: %s", link, target, strerror(errno));
            unlinkat(dirfd, tmp, 0);
        } else
            rc = 0;
    }
    close(dirfd);
    return rc;
}

int run_create_symlinks(const struct hook_root *root, int argc, char **argv)
{
    for (int i = 0; i < argc; i += 2) {
        const char *spec = i + 1 < argc ? argv[i + 1] : NULL;
        const char *sep = spec ? strstr(spec, "::") : NULL;
        if (strcmp(argv[i], "--link") != 0 || !spec) {
            hook_error("create-symlinks: unexpected argument %s", argv[i]);
            return 2;
        }
        if (!sep || sep == spec || sep[2] != '/' || strlen(spec) >= PATH_MAX) {
            hook_error("create-symlinks: --link %s: expected <target>::<absolute link path>", spec);
            return 2;
        }
    }
    int failed = 0;
    for (int i = 0; i < argc; i += 2) {
        const char *spec = argv[i + 1];
        const char *sep = strstr(spec, "::");
        char target[PATH_MAX];
        memcpy(target, spec, (size_t)(sep - spec));
        target[sep - spec] = '\0';
        failed |= create_link(root->fd, target, sep + 2) != 0;
    }
    return failed ? 1 : 0;
}

/*
 * contain.c: every file the hook touches in the container root, resolved with kernel-enforced containment.
 *
 * The image is hostile and, in runc's createContainer stage, the process's own "/" is the host's: runc
 * runs the hook from the container's init before pivot_root, so the container's /proc/1/root is the host
 * root, and chroot() does not stop the kernel following that magic link. So nothing here walks a path
 * string the image can influence with plain open(): each lookup is one openat2(2) from a descriptor of
 * the container root with
 *   RESOLVE_IN_ROOT       "/" and ".." (in symlinks too) stop at the container root;
 *   RESOLVE_NO_MAGICLINKS /proc/<pid>/root, /proc/<pid>/cwd, /proc/self/fd/<n> are refused (ELOOP);
 *   RESOLVE_NO_XDEV       no mount point is crossed (EXDEV): the image's own tree only, so a volume a
 *                         sidecar can flip, or the container's /proc and /sys, are never walked into;
 * and files are then created, linked, renamed and chmod'ed relative to the directory descriptors that
 * lookup returned (mkdirat, symlinkat, renameat, fchmod), never by path again. A kernel without openat2
 * (Linux < 5.6) fails the hook: there is no fallback, the container does not start.
 *
 * Before any of that, contain_enter() moves the hook into a private mount namespace (propagation slave,
 * so nothing it unmounts reaches the host or the container) and detaches the container's /proc and /sys
 * there: a magic link that slipped through would have nothing to point into.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hook.h"

#ifndef SYS_openat2
#define SYS_openat2 437 /* the same number on every architecture (asm-generic) */
#endif

#define RESOLVE_CONTAINED (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
/* mkdir -p depth: more components than this in one path is an image playing games. */
#define MAX_DEPTH 128

static int openat2_flags(int dirfd, const char *path, int flags, unsigned mode, unsigned long long resolve)
{
    struct open_how how = {.flags = (unsigned long long)flags, .resolve = resolve};
    if (flags & O_CREAT)
        how.mode = mode;
    for (int attempt = 0;; attempt++) {
        long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
        /* EAGAIN: a rename raced a ".." walk under RESOLVE_IN_ROOT; the kernel asks to retry. */
        if (fd < 0 && (errno == EAGAIN || errno == EINTR) && attempt < 64)
            continue;
        return (int)fd;
    }
}

/* Why a contained lookup failed, in words a user can act on. */
static const char *resolve_error(int err)
{
    switch (err) {
    case ENOSYS:
        return "openat2(2) is not available: carve's hooks need Linux 5.6 or later";
    case ELOOP:
        return "refused: it resolves through a magic link (/proc/<pid>/...) or too many symlinks";
    case EXDEV:
        return "refused: it resolves across a mount point (the hook stays in the image's own tree)";
    case HOOK_ENOTREG:
        return "not a regular file";
    case ENOENT:
        /* the usual outcome of a link through /proc/<pid>/root: /proc is detached for the hook */
        return "not found inside the container root (symlinks resolve inside it; /proc and /sys are "
               "not mounted for the hook)";
    default:
        return strerror(err);
    }
}

const char *contained_error(int err)
{
    return resolve_error(err);
}

int rooted_open(int rootfd, const char *path, int flags, unsigned mode)
{
    /* A path is always taken relative to the container root, whatever its leading slashes. */
    while (*path == '/')
        path++;
    /* openat2 refuses with O_PATH any flag O_PATH ignores (EINVAL): O_NOCTTY only for real opens. */
    int extra = flags & O_PATH ? O_CLOEXEC : O_CLOEXEC | O_NOCTTY;
    return openat2_flags(rootfd, *path ? path : ".", flags | extra, mode, RESOLVE_CONTAINED);
}

/* Splits a container path into its parent (into `parent`) and final component (into `base`), trailing
 * slashes ignored. -1 when the path has no usable final component ("", "/", "x/.", "x/..") or is too long. */
static int split_path(const char *path, char *parent, size_t size, char *base)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    const char *slash = memrchr(path, '/', len);
    const char *b = slash ? slash + 1 : path;
    size_t blen = len - (size_t)(b - path);
    size_t plen = slash ? (size_t)(slash - path) : 0;
    if (blen == 0 || blen > NAME_MAX || plen + 2 > size || (blen == 1 && b[0] == '.') ||
        (blen == 2 && b[0] == '.' && b[1] == '.'))
        return -1;
    memcpy(base, b, blen);
    base[blen] = '\0';
    memcpy(parent, path, plen);
    parent[plen] = '\0';
    if (plen == 0)
        strcpy(parent, "/");
    return 0;
}

static int dir_at(int rootfd, const char *path, unsigned mode, int create, int depth)
{
    int fd = rooted_open(rootfd, path, O_PATH | O_DIRECTORY, 0);
    if (fd >= 0 || errno != ENOENT || !create)
        return fd;
    if (depth > MAX_DEPTH) {
        errno = ELOOP;
        return -1;
    }
    char parent[PATH_MAX], base[NAME_MAX + 1];
    if (split_path(path, parent, sizeof parent, base) != 0) {
        errno = ENOENT;
        return -1;
    }
    int pfd = dir_at(rootfd, parent, mode, 1, depth + 1);
    if (pfd < 0)
        return -1;
    /* One component, created in a directory we hold: nothing here is followed. EEXIST: someone (or
     * a dangling symlink) is there already; the lookup below decides what it is. */
    int rc = mkdirat(pfd, base, mode);
    int saved = errno;
    close(pfd);
    if (rc != 0 && saved != EEXIST) {
        errno = saved;
        return -1;
    }
    return rooted_open(rootfd, path, O_PATH | O_DIRECTORY, 0);
}

int rooted_dir(int rootfd, const char *path, int create)
{
    return dir_at(rootfd, path, 0755, create, 0);
}

int rooted_parent(int rootfd, const char *path, int create, char base[NAME_MAX + 1])
{
    char parent[PATH_MAX];
    if (split_path(path, parent, sizeof parent, base) != 0) {
        errno = EINVAL;
        return -1;
    }
    return rooted_dir(rootfd, parent, create);
}

char *rooted_read(int rootfd, const char *path, size_t max, size_t *len)
{
    int fd = rooted_open(rootfd, path, O_RDONLY | O_NONBLOCK, 0);
    if (fd < 0)
        return NULL;
    struct stat st;
    char *text = NULL;
    if (fstat(fd, &st) != 0)
        ;
    else if (!S_ISREG(st.st_mode))
        errno = HOOK_ENOTREG;
    else
        text = read_file_limited(fd, max, len);
    int saved = errno;
    close(fd);
    errno = saved;
    return text;
}

int write_at(int dirfd, const char *base, const char *data, size_t len, unsigned mode)
{
    char tmp[NAME_MAX + 1];
    if (snprintf(tmp, sizeof tmp, ".%.200s.carve-%ld", base, (long)getpid()) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    unlinkat(dirfd, tmp, 0); /* a leftover of ours, or a trap the image planted: never written through */
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            goto fail;
        done += (size_t)w;
    }
    if (fchmod(fd, mode) != 0 || fsync(fd) != 0)
        goto fail;
    close(fd);
    /* renameat replaces a file or symlink at `base` and never follows it; a directory there fails. */
    if (renameat(dirfd, tmp, dirfd, base) != 0) {
        int saved = errno;
        unlinkat(dirfd, tmp, 0);
        errno = saved;
        return -1;
    }
    return 0;
fail:;
    int saved = errno;
    close(fd);
    unlinkat(dirfd, tmp, 0);
    errno = saved;
    return -1;
}

int rooted_write(int rootfd, const char *path, const char *data, size_t len, unsigned mode)
{
    char base[NAME_MAX + 1];
    int dirfd = rooted_parent(rootfd, path, 1, base);
    if (dirfd < 0)
        return -1;
    /* O_PATH descriptors serve as *at() directories, but fsync needs a real one: reopen it. */
    int wfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(dirfd);
    if (wfd < 0)
        return -1;
    int rc = write_at(wfd, base, data, len, mode);
    int saved = errno;
    if (rc == 0)
        fsync(wfd);
    close(wfd);
    errno = saved;
    return rc;
}

/* Detaches every proc or sysfs mount stacked at <root>/<name> in this (private) namespace. */
static int detach_pseudo(int rootfd, const char *name)
{
    for (int round = 0; round < 16; round++) {
        /* The mount point itself: crossing into it is the point, so no RESOLVE_NO_XDEV here; the
         * final component is not followed (a symlink there is no mount point). */
        int fd = openat2_flags(rootfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0,
                               RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
        if (fd < 0)
            return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
        struct statfs sf;
        int pseudo = fstatfs(fd, &sf) == 0 && (sf.f_type == PROC_SUPER_MAGIC || sf.f_type == SYSFS_MAGIC);
        int rc = 0;
        if (pseudo) {
            /* umount2(".") from inside: needs no /proc of ours to name the mount. */
            rc = fchdir(fd) == 0 && umount2(".", MNT_DETACH) == 0 ? 0 : -1;
        }
        int saved = errno;
        close(fd);
        if (chdir("/") != 0 || rc != 0) {
            errno = saved;
            return -1;
        }
        if (!pseudo)
            return 0;
    }
    errno = EBUSY;
    return -1;
}

int contain_enter(const char *root)
{
    if (strcmp(root, "/") == 0) {
        hook_error("the container root is the host's /: refusing to work there");
        return -1;
    }
    if (unshare(CLONE_NEWNS) != 0) {
        hook_error("entering a private mount namespace: %s", strerror(errno));
        return -1;
    }
    /* Slave, not private: mounts the host adds still arrive, nothing we unmount leaves. */
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0) {
        hook_error("making the private mount namespace a slave: %s", strerror(errno));
        return -1;
    }
    /* Opened after unshare, so lookups from it walk this namespace's mounts. The path is the
     * runtime's (config.json of the bundle), not the image's. */
    int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) {
        hook_error("container root %s: %s", root, strerror(errno));
        return -1;
    }
    /* Probe openat2 before doing anything, so an old kernel fails in one clear place. */
    int probe = rooted_open(rootfd, "/", O_PATH | O_DIRECTORY, 0);
    if (probe < 0) {
        hook_error("container root %s: %s", root, resolve_error(errno));
        close(rootfd);
        return -1;
    }
    close(probe);
    static const char *const pseudo[] = {"proc", "sys"};
    for (size_t i = 0; i < sizeof pseudo / sizeof *pseudo; i++)
        if (detach_pseudo(rootfd, pseudo[i]) != 0) {
            hook_error("detaching the container's /%s in the hook's mount namespace: %s", pseudo[i],
                       strerror(errno));
            close(rootfd);
            return -1;
        }
    return rootfd;
}

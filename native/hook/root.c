/*
 * root.c: finding the container root from the OCI state and working inside it safely.
 *
 * After enter_root() the process is chroot()ed into the container root with no descriptor left open
 * outside it, so every path the image controls (symlinks included) resolves inside the root.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hook.h"

void hook_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("carve-cdi-hook: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void hook_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("carve-cdi-hook: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

char *read_file_limited(int fd, size_t max, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf)
        return NULL;
    for (;;) {
        if (n == cap) {
            if (cap >= max) {
                free(buf);
                errno = EFBIG;
                return NULL;
            }
            cap = cap * 2 > max ? max : cap * 2;
            char *bigger = realloc(buf, cap + 1);
            if (!bigger) {
                free(buf);
                return NULL;
            }
            buf = bigger;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(buf);
            return NULL;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

char *container_root_from_state(int fd)
{
    static const char *const bundle_key[] = {"bundle", NULL};
    static const char *const root_key[] = {"root", "path", NULL};
    size_t len;
    char *state = read_file_limited(fd, HOOK_MAX_STATE, &len);
    if (!state) {
        hook_error("reading the OCI state from stdin: %s", strerror(errno));
        return NULL;
    }
    char *bundle = json_string_at(state, len, bundle_key);
    free(state);
    if (!bundle || bundle[0] != '/') {
        hook_error("OCI state on stdin: no absolute \"bundle\" path");
        free(bundle);
        return NULL;
    }
    char config_path[PATH_MAX];
    if (snprintf(config_path, sizeof config_path, "%s/config.json", bundle) >= (int)sizeof config_path) {
        hook_error("bundle path too long");
        free(bundle);
        return NULL;
    }
    int cfd = open(config_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    char *config = NULL;
    if (cfd >= 0) {
        config = read_file_limited(cfd, HOOK_MAX_CONFIG, &len);
        close(cfd);
    }
    if (!config) {
        hook_error("reading %s: %s", config_path, strerror(errno));
        free(bundle);
        return NULL;
    }
    char *root = json_string_at(config, len, root_key);
    free(config);
    if (!root || !root[0]) {
        hook_error("%s: no \"root\".\"path\"", config_path);
        free(root);
        free(bundle);
        return NULL;
    }
    char *full = root;
    if (root[0] != '/') {
        /* OCI: a relative root path is relative to the bundle. */
        full = malloc(strlen(bundle) + strlen(root) + 2);
        if (full)
            sprintf(full, "%s/%s", bundle, root);
        free(root);
    }
    free(bundle);
    return full;
}

static void close_other_fds(int keep)
{
    /* close_range is not in every libc this is built with: the syscall, with a /proc-free fallback. */
#ifdef SYS_close_range
    if (keep < 0) {
        if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0)
            return;
    } else {
        int ok = 1;
        if (keep > 3)
            ok &= syscall(SYS_close_range, 3u, (unsigned)keep - 1, 0u) == 0;
        ok &= syscall(SYS_close_range, (unsigned)keep + 1, ~0u, 0u) == 0;
        if (ok)
            return;
    }
#endif
    long max = sysconf(_SC_OPEN_MAX);
    for (int fd = 3; fd < (max > 0 ? max : 1024); fd++)
        if (fd != keep)
            close(fd);
}

int enter_root(const char *root, int keep)
{
    struct stat st;
    if (strcmp(root, "/") == 0) {
        hook_error("the container root is the host's /: refusing to work there");
        return -1;
    }
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        hook_error("container root %s: %s", root, errno ? strerror(errno) : "not a directory");
        return -1;
    }
    close_other_fds(keep);
    if (chdir(root) != 0 || chroot(".") != 0 || chdir("/") != 0) {
        hook_error("entering the container root %s: %s", root, strerror(errno));
        return -1;
    }
    return 0;
}

int make_dirs(const char *path, unsigned mode)
{
    char buf[PATH_MAX];
    if (strlen(path) >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(buf, mode) != 0 && errno != EEXIST)
                return -1;
            *p = saved;
            if (!saved)
                return 0;
        }
    }
}

int write_replacing(const char *path, const char *data, size_t len, unsigned mode)
{
    char tmp[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash || path[0] != '/') {
        errno = EINVAL;
        return -1;
    }
    int dirlen = (int)(slash - path);
    if (snprintf(tmp, sizeof tmp, "%.*s/.%s.carve-%ld", dirlen, path, slash + 1, (long)getpid()) >=
        (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    unlink(tmp); /* a leftover of ours, or a trap the image planted: never written through */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
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
    if (rename(tmp, path) != 0) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
        return -1;
    }
    return 0;
fail:;
    int saved = errno;
    close(fd);
    unlink(tmp);
    errno = saved;
    return -1;
}

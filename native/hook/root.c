/*
 * root.c: finding the container root from the OCI state (bundle, then its config.json), and messages.
 * Working inside the root is contain.c's job.
 */
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

char *bundle_config_from_state(int fd, char **bundle_out, size_t *len)
{
    char *state = read_file_limited(fd, HOOK_MAX_STATE, len);
    if (!state) {
        hook_error("reading the OCI state from stdin: %s", strerror(errno));
        return NULL;
    }
    char *config = bundle_config_from_doc(state, *len, bundle_out, len);
    free(state);
    return config;
}

char *bundle_config_from_doc(const char *state, size_t state_len, char **bundle_out, size_t *len)
{
    static const char *const bundle_key[] = {"bundle", NULL};
    char *bundle = json_string_at(state, state_len, bundle_key);
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
        config = read_file_limited(cfd, HOOK_MAX_CONFIG, len);
        close(cfd);
    }
    if (!config) {
        hook_error("reading %s: %s", config_path, strerror(errno));
        free(bundle);
        return NULL;
    }
    *bundle_out = bundle;
    return config;
}

char *container_root_from_state(int fd)
{
    static const char *const root_key[] = {"root", "path", NULL};
    size_t len;
    char *bundle = NULL;
    char *config = bundle_config_from_state(fd, &bundle, &len);
    if (!config)
        return NULL;
    char *root = json_string_at(config, len, root_key);
    free(config);
    if (!root || !root[0]) {
        hook_error("%s/config.json: no \"root\".\"path\"", bundle);
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

void close_other_fds(void)
{
    /* close_range is not in every libc this is built with: the syscall, with a /proc-free fallback. */
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0)
        return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    for (int fd = 3; fd < (max > 0 ? max : 1024); fd++)
        close(fd);
}

/*
 * mpsuser_host.c: what `carve-cdi-hook mps-user` reads of the host besides the daemon's replies, shared by
 * the uid lease (mpsuser.c) and the daemon's word (mpsuser_daemon.c): a host process's real uid and start
 * time under --proc-root (its command name is the tenant's: the stat fields are read after the last ')'),
 * a small regular file of the plugin's state directory (never through a link, a fifo or a device), and
 * the monotonic clock of the hook's one deadline. Every read is bounded.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hook.h"
#include "mpsuser.h"

#define MAX_STATUS (64u << 10)

long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The real uid of host process `pid` (its status file's "Uid:" line, first field); -1 when it is gone. */
long long real_uid(const char *proc_root, long pid)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%ld/status", proc_root, pid) >= (int)sizeof path)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len;
    char *text = read_file_limited(fd, MAX_STATUS, &len);
    close(fd);
    if (!text)
        return -1;
    long long uid = -1;
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, "Uid:", 4) == 0) {
            char *end;
            unsigned long long v = strtoull(line + 4, &end, 10);
            if (end != line + 4 && v <= 0xFFFFFFFFull)
                uid = (long long)v;
            break;
        }
    }
    free(text);
    return uid;
}

/* Field 22 of <proc-root>/<pid>/stat (start time in clock ticks since boot); -1 when the process is gone. */
long long start_time(const char *proc_root, long pid)
{
    char path[PATH_MAX];
    if (pid <= 0 || snprintf(path, sizeof path, "%s/%ld/stat", proc_root, pid) >= (int)sizeof path)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len;
    char *text = read_file_limited(fd, 4096, &len);
    close(fd);
    if (!text)
        return -1;
    long long v = -1;
    char *p = strrchr(text, ')'); /* the command name may hold spaces and parentheses: fields follow the last */
    for (int field = 2; p && *p && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (p) {
        char *end;
        unsigned long long u = strtoull(p + 1, &end, 10);
        if (end != p + 1)
            v = (long long)u;
    }
    free(text);
    return v;
}

/* A small regular file in directory `dirfd`, never through a link, a fifo or a device; NULL (errno) else. */
char *read_state_file(int dirfd, const char *name, size_t max, size_t *len)
{
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    char *text = read_file_limited(fd, max, len);
    close(fd);
    return text;
}

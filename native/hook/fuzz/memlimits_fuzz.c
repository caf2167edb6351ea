/*
 * memlimits_fuzz.c: a libFuzzer-compatible target for what `carve-cdi-hook memory-limits` parses as root
 * before it writes the driver's per-cgroup memory limit: the runtime's state ("pid"), the container's
 * /proc/<pid>/cgroup ("0::" line: the cgroup directory it will write under), the --limit sizes
 * ("uuid:soft:hard", 64-bit) and the container id that names its record file. The static parsers are
 * reached by including hook/memlimits.c.
 *
 *   make -C native fuzz && native/build/fuzz/memlimits_fuzz <iterations> <seed> <corpus files>
 *
 * The first byte picks the parser, the rest is its input. Checks beyond ASan+UBSan: a pid is -1 or in
 * 1..INT_MAX; an accepted cgroup path is absolute with no empty, "." or ".." component, and the directory
 * made of it stays under the cgroup root; an accepted limit's sizes are the decimal digits given (no sign,
 * no wrap-around: "-1" is not 2^64-1) with 0 < hard and soft <= hard; an accepted id is a plain name.
 */
#include <stdint.h>

#include "../memlimits.c"

static char proc_root[64];

static void cleanup(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/1/cgroup", proc_root);
    unlink(path);
    snprintf(path, sizeof path, "%s/1", proc_root);
    rmdir(path);
    rmdir(proc_root);
}

static int digits_only(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

static void check_cgroup_path(const char *p)
{
    if (p[0] != '/' || strstr(p, "//") || strstr(p, "/../") || strstr(p, "/./"))
        abort();
    size_t n = strlen(p);
    if ((n >= 3 && strcmp(p + n - 3, "/..") == 0) || (n >= 2 && strcmp(p + n - 2, "/.") == 0))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int which = data[0] % 4;
    data++, size--;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    switch (which) {
    case 0: { /* the runtime's state on stdin: exact-size buffer, no terminator to lean on */
        char *doc = malloc(size ? size : 1);
        memcpy(doc, data, size);
        long pid = state_pid(doc, size);
        if (pid != -1 && (pid < 1 || pid > INT_MAX))
            abort();
        free(doc);
        break;
    }
    case 1: { /* /proc/<pid>/cgroup of the container's process */
        if (!proc_root[0]) {
            snprintf(proc_root, sizeof proc_root, "/tmp/memlimits-fuzz-%d", (int)getpid());
            char one[96];
            snprintf(one, sizeof one, "%s/1", proc_root);
            if ((mkdir(proc_root, 0700) && errno != EEXIST) || (mkdir(one, 0700) && errno != EEXIST))
                abort();
            atexit(cleanup);
        }
        char path[128];
        snprintf(path, sizeof path, "%s/1/cgroup", proc_root);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, data, size) != (ssize_t)size)
            abort();
        close(fd);
        char out[PATH_MAX];
        if (cgroup_of(proc_root, "/sys/fs/cgroup", 1, out, sizeof out) == 0) {
            if (strncmp(out, "/sys/fs/cgroup", 14) != 0 || (out[14] && out[14] != '/'))
                abort();
            if (out[14])
                check_cgroup_path(out + 14);
        }
        if (valid_cgroup(text))
            check_cgroup_path(text[1] ? text : "/x");
        break;
    }
    case 2: { /* --limit uuid:soft:hard */
        limit_used = 0;
        struct limit l;
        if (parse_limit(text, &l) == 0) {
            const char *c1 = strchr(text, ':'), *c2 = strchr(c1 + 1, ':');
            char soft[128] = {0}, hard[128] = {0};
            memcpy(soft, c1 + 1, (size_t)(c2 - c1 - 1));
            strcpy(hard, c2 + 1);
            if (!digits_only(soft) || !digits_only(hard) || l.hard == 0 || l.soft > l.hard)
                abort();
            if (strtoull(soft, NULL, 10) != l.soft || strtoull(hard, NULL, 10) != l.hard)
                abort();
        }
        break;
    }
    default: /* the container id: a file name under the record directory */
        if (valid_id(text) && (strchr(text, '/') || text[0] == '.' || strlen(text) > 128))
            abort();
    }
    free(text);
    return 0;
}

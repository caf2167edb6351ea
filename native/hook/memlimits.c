/*
 * memlimits.c: `carve-cdi-hook memory-limits`: put a container's cgroup v2 directory under the driver's
 * memory partition on each of its claim's GPUs (nvmlDeviceSetMemoryLimits_v1), failing closed.
 *
 * createRuntime (the runtime's namespaces, the container process created and stopped before its
 * program runs): the OCI state on stdin gives "pid" and "id"; <proc-root>/<pid>/cgroup gives the
 * unified hierarchy's "0::<path>" line (cgroup v1 only: an error); the cgroup directory is
 * <cgroup-root><path>. For every --limit the hook opens NVML (dlopen of --nvml, the driver's library as the
 * host names it), finds the GPU by UUID and sets soft/hard. Any failure is reported with the GPU, the
 * cgroup and NVML's error string, limits already set are cleared, and the hook exits 1: the runtime then
 * refuses to start the container, so no container runs without the limit it was promised.
 * The cgroup path is recorded in <record>/<container id> (a plugin-owned directory) for the poststop step.
 *
 * poststop (--clear): reads the recorded path, and if the directory still exists sets soft 0 and hard
 * unlimited (with the kernel's dmem backend a soft limit left on a leaf that goes away stays reserved in its
 * ancestors); a cgroup already gone had its limits cleared by the driver. Never fails the teardown.
 *
 * Nothing here reads the container's files: the only tenant-influenced input is the pid's cgroup line,
 * which is validated (absolute, no "." or ".." components, bounded) before it is used.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "hook.h"
#include "memlimits.h"

#define MAX_LIMITS 16
#define MAX_CGROUP_FILE (64u << 10)
#define CGROUP2_MAGIC 0x63677270
#define LIMIT_MAX 0xFFFFFFFFFFFFFFFFull

/* The NVML ABI this hook uses (nvml.h, CUDA 13.4 generation); declared here because the hook is built
 * without the NVML headers. */
typedef struct {
    const char *nameSpace;
    unsigned long long softLimit, hardLimit;
} set_limits_v1_t;
typedef int (*init_fn)(void);
typedef int (*by_uuid_fn)(const char *, void **);
typedef int (*set_fn)(void *, set_limits_v1_t *);
typedef const char *(*errstr_fn)(int);

struct limit {
    const char *uuid;
    unsigned long long soft, hard;
};

struct nvml {
    void *lib;
    by_uuid_fn by_uuid;
    set_fn set;
    errstr_fn errstr;
};

/* --- the OCI state: top-level "pid" (a number) and "id" (a string) -------------------------------- */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Skips a JSON string at p ('"'); returns the position after it, NULL when malformed. */
static const char *skip_string(const char *p, const char *end)
{
    if (p >= end || *p != '"')
        return NULL;
    for (p++; p < end; p++) {
        if (*p == '\\') {
            p++;
            continue;
        }
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p == '"')
            return p + 1;
    }
    return NULL;
}

/* Skips any value, nesting bounded (strings, numbers, literals, objects, arrays). */
static const char *skip_value(const char *p, const char *end, int depth)
{
    p = skip_ws(p, end);
    if (p >= end || depth > 64)
        return NULL;
    if (*p == '"')
        return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        int object = *p == '{';
        p = skip_ws(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (object) {
                p = skip_string(skip_ws(p, end), end);
                p = p ? skip_ws(p, end) : NULL;
                if (!p || p >= end || *p != ':')
                    return NULL;
                p++;
            }
            p = skip_value(p, end, depth + 1);
            p = p ? skip_ws(p, end) : NULL;
            if (!p || p >= end)
                return NULL;
            if (*p == close)
                return p + 1;
            if (*p != ',')
                return NULL;
            p++;
        }
    }
    const char *start = p;
    while (p < end && (strchr("+-.eE", *p) || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z')))
        p++;
    return p > start ? p : NULL;
}

/* The top-level integer member "pid" of the state; -1 when missing or not a positive integer. */
static long state_pid(const char *doc, size_t len)
{
    const char *p = skip_ws(doc, doc + len), *end = doc + len;
    long pid = -1;
    if (p >= end || *p != '{')
        return -1;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}')
        return -1;
    for (;;) {
        const char *key = skip_ws(p, end), *after = skip_string(key, end);
        if (!after)
            return -1;
        int is_pid = after - key == 5 && memcmp(key, "\"pid\"", 5) == 0;
        p = skip_ws(after, end);
        if (p >= end || *p != ':')
            return -1;
        p = skip_ws(p + 1, end);
        if (is_pid) {
            /* Digits within [p, end): strtol would read on past `len` when the document is not terminated
             * (found by hook/fuzz/memlimits_fuzz.c under ASan). */
            long long v = 0;
            const char *d = p;
            while (d < end && *d >= '0' && *d <= '9' && v <= INT_MAX)
                v = v * 10 + (*d++ - '0');
            if (d == p || v <= 0 || v > INT_MAX || (d < end && *d >= '0' && *d <= '9'))
                return -1;
            pid = (long)v;
        }
        p = skip_value(p, end, 1);
        p = p ? skip_ws(p, end) : NULL;
        if (!p || p >= end)
            return -1;
        if (*p == '}')
            return pid;
        if (*p != ',')
            return -1;
        p++;
    }
}

static int valid_id(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > 128 || id[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') || (id[i] >= '0' && id[i] <= '9') ||
              id[i] == '-' || id[i] == '_' || id[i] == '.'))
            return 0;
    return 1;
}

/* --- the container's cgroup ----------------------------------------------------------------------- */

/* "/a/b" with no empty, "." or ".." component (or "/" itself). */
static int valid_cgroup(const char *path)
{
    if (path[0] != '/' || strlen(path) >= PATH_MAX / 2)
        return 0;
    for (const char *p = path; *p;) {
        const char *next = strchr(p + 1, '/');
        size_t n = next ? (size_t)(next - p - 1) : strlen(p + 1);
        if ((n == 0 && next) || (n == 1 && p[1] == '.') || (n == 2 && p[1] == '.' && p[2] == '.'))
            return 0;
        if (!next)
            break;
        p = next;
    }
    return 1;
}

/* The cgroup directory of `pid` into out; 0, or -1 with a message. */
static int cgroup_of(const char *proc_root, const char *cgroup_root, long pid, char *out, size_t len)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%ld/cgroup", proc_root, pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t n = 0;
    char *text = fd >= 0 ? read_file_limited(fd, MAX_CGROUP_FILE, &n) : NULL;
    if (fd >= 0)
        close(fd);
    if (!text) {
        hook_error("memory-limits: reading %s: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
        if (strncmp(l, "0::", 3) == 0)
            line = l + 3;
    if (!line) {
        hook_error("memory-limits: %s has no cgroup v2 (\"0::\") line: the driver's memory limits need the "
                   "unified hierarchy (cgroup v1 is not supported)", path);
        free(text);
        return -1;
    }
    if (!valid_cgroup(line)) {
        hook_error("memory-limits: %s: cgroup path is not a plain absolute path", path);
        free(text);
        return -1;
    }
    int w = snprintf(out, len, "%s%s", cgroup_root, strcmp(line, "/") == 0 ? "" : line);
    free(text);
    if (w < 0 || (size_t)w >= len) {
        hook_error("memory-limits: cgroup path too long");
        return -1;
    }
    return 0;
}

/* --- NVML ----------------------------------------------------------------------------------------- */

static int nvml_open(const char *path, struct nvml *n)
{
    n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        hook_error("memory-limits: cannot load NVML %s: %s", path, dlerror());
        return -1;
    }
    init_fn init = (init_fn)dlsym(n->lib, "nvmlInit_v2");
    n->by_uuid = (by_uuid_fn)dlsym(n->lib, "nvmlDeviceGetHandleByUUID");
    n->set = (set_fn)dlsym(n->lib, "nvmlDeviceSetMemoryLimits_v1");
    n->errstr = (errstr_fn)dlsym(n->lib, "nvmlErrorString");
    if (!init || !n->by_uuid) {
        hook_error("memory-limits: %s is not NVML (no nvmlInit_v2)", path);
        return -1;
    }
    if (!n->set) {
        hook_error("memory-limits: %s has no nvmlDeviceSetMemoryLimits_v1: the driver cannot partition memory "
                   "(CUDA 13.4 generation drivers and later)", path);
        return -1;
    }
    int rc = init();
    if (rc != 0) {
        hook_error("memory-limits: nvmlInit: %s (%d)", n->errstr ? n->errstr(rc) : "error", rc);
        return -1;
    }
    return 0;
}

static const char *nvml_error(const struct nvml *n, int rc)
{
    const char *s = n->errstr ? n->errstr(rc) : NULL;
    return s ? s : "NVML error";
}

static int set_one(const struct nvml *n, const struct limit *l, const char *cgroup, int quiet)
{
    void *dev = NULL;
    int rc = n->by_uuid(l->uuid, &dev);
    if (rc != 0) {
        if (!quiet)
            hook_error("memory-limits: GPU %s: nvmlDeviceGetHandleByUUID: %s (%d)", l->uuid, nvml_error(n, rc),
                       rc);
        return -1;
    }
    set_limits_v1_t v = {.nameSpace = cgroup, .softLimit = l->soft, .hardLimit = l->hard};
    rc = n->set(dev, &v);
    if (rc != 0) {
        if (!quiet)
            hook_error("memory-limits: GPU %s, cgroup %s: nvmlDeviceSetMemoryLimits_v1(soft %llu, hard %llu): "
                       "%s (%d)", l->uuid, cgroup, l->soft, l->hard, nvml_error(n, rc), rc);
        return -1;
    }
    return 0;
}

/* --- arguments and the two steps ------------------------------------------------------------------ */

/* The --limit arguments' storage (file scope: the fuzz target starts each input afresh). */
static char limit_buf[MAX_LIMITS][128];
static int limit_used;

/* A size: decimal digits only. strtoull alone would take "-1" (as 2^64-1, no limit at all), " 5" or "+5". */
static int parse_size(const char *s, unsigned long long *out)
{
    if (*s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno || *end ? -1 : 0;
}

static int parse_limit(const char *arg, struct limit *l)
{
    if (limit_used >= MAX_LIMITS || strlen(arg) >= sizeof limit_buf[0])
        return -1;
    char *s = limit_buf[limit_used++];
    strcpy(s, arg);
    char *c1 = strchr(s, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c1 || !c2 || c1 == s)
        return -1;
    *c1 = *c2 = '\0';
    l->uuid = s;
    if (parse_size(c1 + 1, &l->soft) != 0 || parse_size(c2 + 1, &l->hard) != 0 || l->hard == 0 || l->soft > l->hard)
        return -1;
    return 0;
}

static int record_path(const char *dir, const char *id, char *out, size_t len)
{
    int w = snprintf(out, len, "%s/%s", dir, id);
    return w > 0 && (size_t)w < len ? 0 : -1;
}

int run_memory_limits(int argc, char **argv)
{
    const char *nvml_path = NULL, *record = NULL, *cgroup_root = "/sys/fs/cgroup", *proc_root = "/proc";
    int clear = 0, custom_root = 0, nlimits = 0;
    struct limit limits[MAX_LIMITS];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--clear")) {
            clear = 1;
            continue;
        }
        if (!v) {
            hook_error("memory-limits: %s needs a value", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--nvml"))
            nvml_path = v;
        else if (!strcmp(a, "--record"))
            record = v;
        else if (!strcmp(a, "--cgroup-root"))
            cgroup_root = v, custom_root = 1;
        else if (!strcmp(a, "--proc-root"))
            proc_root = v;
        else if (!strcmp(a, "--limit")) {
            if (nlimits >= MAX_LIMITS || parse_limit(v, &limits[nlimits]) != 0) {
                hook_error("memory-limits: --limit %s: expected <gpu-uuid>:<soft bytes>:<hard bytes> with "
                           "0 < hard, soft <= hard (at most %d)", v, MAX_LIMITS);
                return 2;
            }
            nlimits++;
        } else {
            hook_error("memory-limits: unknown argument %s", a);
            return 2;
        }
    }
    if (!nvml_path || nvml_path[0] != '/' || !record || record[0] != '/' || cgroup_root[0] != '/' ||
        proc_root[0] != '/' || !nlimits) {
        hook_error("usage: carve-cdi-hook memory-limits --nvml <abs path> --record <abs dir> [--cgroup-root "
                   "<dir>] [--proc-root <dir>] [--clear] --limit <uuid>:<soft>:<hard> ... (OCI state on stdin)");
        return 2;
    }
    size_t len;
    char *state = read_file_limited(STDIN_FILENO, HOOK_MAX_STATE, &len);
    if (!state) {
        hook_error("memory-limits: reading the OCI state from stdin: %s", strerror(errno));
        return 1;
    }
    static const char *const id_key[] = {"id", NULL};
    char *id = json_string_at(state, len, id_key);
    long pid = clear ? 0 : state_pid(state, len);
    free(state);
    if (!valid_id(id)) {
        hook_error("memory-limits: OCI state: \"id\" missing or not a container id");
        free(id);
        return 1;
    }
    char rec[PATH_MAX], cgroup[PATH_MAX];
    if (record_path(record, id, rec, sizeof rec) != 0) {
        hook_error("memory-limits: record path too long");
        free(id);
        return 1;
    }
    free(id);
    struct nvml n = {0};
    if (clear) {
        int fd = open(rec, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        char *text = fd >= 0 ? read_file_limited(fd, PATH_MAX, &len) : NULL;
        if (fd >= 0)
            close(fd);
        if (!text)
            return 0; /* the createRuntime step never recorded one: nothing was set */
        snprintf(cgroup, sizeof cgroup, "%s", text);
        free(text);
        struct stat sb;
        if (stat(cgroup, &sb) == 0 && S_ISDIR(sb.st_mode) && nvml_open(nvml_path, &n) == 0)
            for (int i = 0; i < nlimits; i++) {
                struct limit l = {limits[i].uuid, 0, LIMIT_MAX};
                if (set_one(&n, &l, cgroup, 0) != 0)
                    hook_warn("memory-limits: the soft limit of GPU %s stays on %s", l.uuid, cgroup);
            }
        unlink(rec);
        return 0;
    }
    if (pid <= 0) {
        hook_error("memory-limits: OCI state: no positive \"pid\" (run as a createRuntime hook)");
        return 1;
    }
    struct statfs fs;
    if (!custom_root && (statfs(cgroup_root, &fs) != 0 || fs.f_type != CGROUP2_MAGIC)) {
        /* A hybrid host mounts cgroup v2 elsewhere (/sys/fs/cgroup/unified): the plugin passes it. */
        hook_error("memory-limits: %s is not a cgroup v2 filesystem; pass --cgroup-root", cgroup_root);
        return 1;
    }
    if (cgroup_of(proc_root, cgroup_root, pid, cgroup, sizeof cgroup) != 0)
        return 1;
    if (nvml_open(nvml_path, &n) != 0) {
        hook_error("memory-limits: cgroup %s: no limit set; refusing to start the container", cgroup);
        return 1;
    }
    /* Record before setting: a poststop after a partial failure still finds what to clear. */
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", rec);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || write(fd, cgroup, strlen(cgroup)) != (ssize_t)strlen(cgroup) || fsync(fd) != 0 ||
        rename(tmp, rec) != 0) {
        hook_error("memory-limits: recording the cgroup in %s: %s", rec, strerror(errno));
        if (fd >= 0)
            close(fd);
        unlink(tmp);
        return 1;
    }
    close(fd);
    for (int i = 0; i < nlimits; i++) {
        if (set_one(&n, &limits[i], cgroup, 0) == 0)
            continue;
        for (int j = 0; j < i; j++) {
            struct limit l = {limits[j].uuid, 0, LIMIT_MAX};
            set_one(&n, &l, cgroup, 1);
        }
        return 1;
    }
    return 0;
}

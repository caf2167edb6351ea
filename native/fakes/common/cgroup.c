/*
 * cgroup.c: which cgroup v2 directory a process of the fake GPUs belongs to, and its memory partition.
 *
 * The real driver learns a process's cgroup from the kernel (the task's cgroup object, whatever the
 * process can see). The fakes have to get there from user space, and a container may see little:
 *
 * - Identity: a partition is keyed by the cgroup directory's inode (the kernfs node id, the cgroup id the
 *   kernel hands out), the same through any mount and any cgroup namespace. The fake NVML's Set takes it
 *   from the path it is given, and also records that path as the initial cgroup namespace names it (the
 *   "canonical" path: the mount's root in /proc/self/mountinfo joined with the part under the mount).
 * - A process reads "0::<P>" from /proc/self/cgroup (the unified hierarchy's line, also on a hybrid host;
 *   P is relative to its cgroup namespace's root) and looks for a cgroup2 mount it can see whose root
 *   holds P (/proc/self/mountinfo: a container with a cgroup namespace has its own leaf mounted at
 *   /sys/fs/cgroup with root "/"; one without, on a v2 host, a bind of its leaf, root = P; a host process
 *   on a hybrid host the /sys/fs/cgroup/unified mount). stat() of the directory gives the inode.
 * - A container on a hybrid (or v1) host sees no cgroup2 mount at all: runc mounts only the v1 hierarchies
 *   into it, and the runtime makes no cgroup namespace there, so P is already the path in the initial
 *   cgroup namespace (checked: /proc/self/ns/cgroup is the kernel's initial one). Such a process finds its
 *   partition by that canonical path in the partition table instead, the one piece of "kernel knowledge"
 *   the fake takes from its own state.
 * $CARVE_FAKE_CGROUP_FS replaces the mounts with one stand-in root (tests, without privileges to make
 * cgroups); $CARVE_FAKE_CGROUP replaces P and counts as canonical.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakestate.h"

/* The inode of the initial cgroup namespace (PROC_CGROUP_INIT_INO, include/linux/proc_ns.h). */
#define CGROUP_NS_INIT_INO 0xEFFFFFFBu
#define MAX_MOUNTS 16
#define MAX_MOUNTINFO_LINES 4096

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static uint64_t g_cgroup;                 /* inode of our cgroup directory, 0 when no mount reaches it */
static char g_canon[FAKE_CGROUP_PATH_MAX]; /* our path in the initial cgroup namespace, "" when unknown */

static const char *fake_cgroup_fs(void)
{
    const char *v = getenv("CARVE_FAKE_CGROUP_FS");
    return v && *v == '/' ? v : NULL;
}

struct cg_mount {
    char point[1024]; /* where it is mounted, as this process names it */
    char root[1024];  /* the cgroup directory at the mount point, in the mounter's cgroup namespace */
};

/* mountinfo's octal escapes (\040 and the like) undone in place. */
static void unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' &&
            r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

/* The cgroup2 mounts this process sees (or the stand-in root); returns how many. */
static unsigned cgroup2_mounts(struct cg_mount *out, unsigned max)
{
    const char *standin = fake_cgroup_fs();
    if (standin) {
        if (strlen(standin) >= sizeof out[0].point)
            return 0;
        snprintf(out[0].point, sizeof out[0].point, "%s", standin);
        snprintf(out[0].root, sizeof out[0].root, "/");
        return 1;
    }
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return 0;
    char line[4096];
    unsigned n = 0, lines = 0;
    while (n < max && lines++ < MAX_MOUNTINFO_LINES && fgets(line, sizeof line, f)) {
        /* id parent major:minor root point options [optional...] - fstype source superoptions */
        char *sep = strstr(line, " - ");
        if (!sep || strncmp(sep + 3, "cgroup2 ", 8) != 0)
            continue;
        *sep = '\0';
        char *save = NULL, *field[5];
        unsigned k = 0;
        for (char *t = strtok_r(line, " ", &save); t && k < 5; t = strtok_r(NULL, " ", &save))
            field[k++] = t;
        if (k < 5 || strlen(field[3]) >= sizeof out[n].root || strlen(field[4]) >= sizeof out[n].point)
            continue;
        unescape(field[3]);
        unescape(field[4]);
        snprintf(out[n].root, sizeof out[n].root, "%s", field[3]);
        snprintf(out[n].point, sizeof out[n].point, "%s", field[4]);
        n++;
    }
    fclose(f);
    return n;
}

/* The rest of `path` under `prefix` ("" when equal, "/x/y" below it), NULL when not under it. */
static const char *under(const char *path, const char *prefix)
{
    if (strcmp(prefix, "/") == 0)
        return strcmp(path, "/") == 0 ? "" : path;
    size_t n = strlen(prefix);
    if (strncmp(path, prefix, n) != 0 || (path[n] != '\0' && path[n] != '/'))
        return NULL;
    return path + n;
}

/* Joins a cgroup path and a rest into out ("/" when both are empty); -1 when it does not fit. */
static int join(char *out, size_t len, const char *base, const char *rest)
{
    int w = snprintf(out, len, "%s%s", strcmp(base, "/") == 0 && *rest ? "" : base, rest);
    return w < 0 || (size_t)w >= len ? -1 : 0;
}

static int in_initial_cgroupns(void)
{
    struct stat sb;
    return stat("/proc/self/ns/cgroup", &sb) == 0 && sb.st_ino == CGROUP_NS_INIT_INO;
}

FAKE_EXPORT int fake_cgroup_canonical(const char *dir, char *out, size_t len)
{
    if (!fake_cgroup_fs() && !in_initial_cgroupns())
        return -1; /* the mounts' roots are relative to our own namespace's root, which we cannot name */
    struct cg_mount mounts[MAX_MOUNTS];
    unsigned n = cgroup2_mounts(mounts, MAX_MOUNTS);
    const struct cg_mount *best = NULL;
    const char *rest = NULL;
    for (unsigned i = 0; i < n; i++) {
        const char *r = under(dir, mounts[i].point);
        if (r && (!best || strlen(mounts[i].point) > strlen(best->point))) {
            best = &mounts[i];
            rest = r;
        }
    }
    if (!best)
        return -1;
    return join(out, len, best->root, rest);
}

/* The "0::" path of /proc/self/cgroup into `out`; 0, or -1 when there is none (cgroup v1 only). */
static int unified_path(char *out, size_t len)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return -1;
    char line[4096];
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3) != 0)
            continue;
        size_t n = strcspn(line + 3, "\n");
        if (n < len) {
            memcpy(out, line + 3, n);
            out[n] = '\0';
            rc = 0;
        }
        break;
    }
    fclose(f);
    return rc;
}

static void read_once(void)
{
    char rel[2048], full[2048 + 1024];
    const char *forced = getenv("CARVE_FAKE_CGROUP");
    if (forced && *forced == '/' && strlen(forced) < sizeof rel)
        snprintf(rel, sizeof rel, "%s", forced);
    else if (unified_path(rel, sizeof rel) != 0 || rel[0] != '/')
        return;
    struct cg_mount mounts[MAX_MOUNTS];
    unsigned n = cgroup2_mounts(mounts, MAX_MOUNTS);
    for (unsigned i = 0; i < n && !g_cgroup; i++) {
        const char *rest = under(rel, mounts[i].root);
        struct stat sb;
        if (rest && join(full, sizeof full, mounts[i].point, rest) == 0 && stat(full, &sb) == 0 &&
            S_ISDIR(sb.st_mode))
            g_cgroup = (uint64_t)sb.st_ino;
    }
    if ((forced && *forced == '/') || in_initial_cgroupns())
        if (strlen(rel) < sizeof g_canon)
            snprintf(g_canon, sizeof g_canon, "%s", rel);
}

FAKE_EXPORT uint64_t fake_self_cgroup(struct fake_gpu_state *st)
{
    pthread_once(&g_once, read_once);
    if (g_cgroup || !g_canon[0])
        return g_cgroup;
    for (unsigned i = 0; i < FAKE_MAX_PARTS; i++)
        if (st->parts[i].cgroup && strcmp(st->parts[i].canon, g_canon) == 0)
            return st->parts[i].cgroup; /* no mount reaches our directory: its partition by path */
    return 0;
}

FAKE_EXPORT fake_partition_t *fake_partition_of(struct fake_gpu_state *st, uint64_t cgroup)
{
    if (!cgroup)
        return NULL;
    for (unsigned i = 0; i < FAKE_MAX_PARTS; i++)
        if (st->parts[i].cgroup == cgroup)
            return &st->parts[i];
    return NULL;
}

FAKE_EXPORT uint64_t fake_partition_used(struct fake_gpu_state *st, uint64_t cgroup)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < FAKE_MAX_PROCS; i++)
        if (st->procs[i].pid && st->procs[i].cgroup == cgroup)
            sum += st->procs[i].mem_bytes;
    return sum;
}

struct part_query {
    uint64_t hard, used;
};

static int do_query(void *arg, fake_gpu_state_t *st)
{
    struct part_query *q = arg;
    uint64_t cgroup = fake_self_cgroup(st);
    const fake_partition_t *p = fake_partition_of(st, cgroup);
    if (!p)
        return 0;
    fake_proc_sweep(st);
    q->hard = p->hard;
    q->used = fake_partition_used(st, cgroup);
    return 1;
}

FAKE_EXPORT int fake_mem_partition(unsigned gpu, uint64_t *hard, uint64_t *used)
{
    struct part_query q = {0};
    if (fake_state_locked(gpu, do_query, &q) != 1)
        return 0;
    *hard = q.hard;
    *used = q.used;
    return 1;
}

/*
 * cgroup.c: which cgroup v2 directory a process of the fake GPUs belongs to, and its memory partition.
 *
 * The real driver learns a process's cgroup from the kernel; the fakes read "0::<path>" from
 * /proc/self/cgroup (the unified hierarchy's line, also present on a hybrid host) and stat the directory
 * under the cgroup v2 root. The directory's inode is the key: NVML's Set stores it next to the path it was
 * given, and a process in a container (cgroup namespace: "0::/", cgroup2 mounted at /sys/fs/cgroup) reaches
 * the same inode through its own mount.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakestate.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static uint64_t g_cgroup;

FAKE_EXPORT const char *fake_cgroup_fs(void)
{
    const char *v = getenv("CARVE_FAKE_CGROUP_FS");
    return v && *v == '/' ? v : "/sys/fs/cgroup";
}

/* The "0::" path of /proc/self/cgroup into `out`; 0, or -1 when there is none (cgroup v1 only). */
static int unified_path(char *out, size_t len)
{
    const char *forced = getenv("CARVE_FAKE_CGROUP");
    if (forced && *forced == '/') {
        snprintf(out, len, "%s", forced);
        return 0;
    }
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
    char rel[2048], full[2048 + 512];
    if (unified_path(rel, sizeof rel) != 0)
        return;
    const char *root = fake_cgroup_fs();
    if (strlen(root) >= 512)
        return;
    snprintf(full, sizeof full, "%s%s", root, strcmp(rel, "/") == 0 ? "" : rel);
    struct stat sb;
    if (stat(full, &sb) == 0 && S_ISDIR(sb.st_mode))
        g_cgroup = (uint64_t)sb.st_ino;
}

FAKE_EXPORT uint64_t fake_self_cgroup(void)
{
    pthread_once(&g_once, read_once);
    return g_cgroup;
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
    uint64_t cgroup, hard, used;
};

static int do_query(void *arg, fake_gpu_state_t *st)
{
    struct part_query *q = arg;
    const fake_partition_t *p = fake_partition_of(st, q->cgroup);
    if (!p)
        return 0;
    fake_proc_sweep(st);
    q->hard = p->hard;
    q->used = fake_partition_used(st, q->cgroup);
    return 1;
}

FAKE_EXPORT int fake_mem_partition(unsigned gpu, uint64_t *hard, uint64_t *used)
{
    struct part_query q = {.cgroup = fake_self_cgroup()};
    if (!q.cgroup || fake_state_locked(gpu, do_query, &q) != 1)
        return 0;
    *hard = q.hard;
    *used = q.used;
    return 1;
}

/*
 * limits.c: the plugin's limits file of a claim (carve_limits_t, <claim dir>/limits/limits).
 *
 * The plugin writes the file atomically (a new inode each time) into a directory it mounts read-only into
 * the claim's containers. The limiter keeps a private copy: the container can neither write the file nor
 * the copy's source, and nothing of the writable region is ever read as a limit.
 *
 * Trust: a limits file is trusted when it lies on a read-only mount and no one but its owner may write it.
 * A container cannot create a read-only mount without CAP_SYS_ADMIN, so a file the tenant made itself
 * (CARVE_REGION pointing elsewhere, a fake directory under /var/run/carve) is never trusted, and binding.c
 * lets a trusted file win over any untrusted one for the same GPU.
 *
 * Fail closed: a limits directory that exists without a valid file in it (missing, a symlink, a device
 * node, a wrong size or version, out-of-range fields) makes the claim "broken": binding.c then refuses
 * every allocation on every GPU no valid trusted file names.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "limiter.h"

void carve_limits_path(const char *region_path, char *out, size_t len)
{
    const char *slash = strrchr(region_path, '/');
    int dir = slash ? (int)(slash - region_path) : 1;
    snprintf(out, len, "%.*s/limits/limits", dir, slash ? region_path : ".");
}

void carve_limits_from_config(carve_limits_t *l, const carve_config_t *cfg)
{
    memset(l, 0, sizeof *l);
    l->magic = CARVE_LIMITS_MAGIC;
    l->version = CARVE_LIMITS_VERSION;
    l->size = sizeof *l;
    l->device_count = CARVE_MAX_DEVICES; /* the environment cannot say how many: cover them all */
    l->core_policy = cfg->core_policy;
    l->priority = cfg->priority;
    l->oom_policy = cfg->oom_policy;
    for (int i = 0; i < CARVE_MAX_DEVICES; i++) {
        l->devices[i].memory_limit = cfg->memory_limit[i];
        l->devices[i].cores_limit = cfg->cores_limit[i];
    }
}

static const char *validate(const carve_limits_t *l)
{
    if (l->magic != CARVE_LIMITS_MAGIC)
        return "bad magic (not a carve limits file)";
    if (l->version != CARVE_LIMITS_VERSION)
        return "foreign limits version";
    if (l->size != sizeof(carve_limits_t))
        return "size field does not match this layout";
    if (l->device_count == 0 || l->device_count > CARVE_MAX_DEVICES)
        return "device count out of range";
    if (l->core_policy > CARVE_CORE_DISABLE || l->priority > CARVE_PRIORITY_LOW || l->oom_policy > CARVE_OOM_KILL)
        return "policy out of range";
    for (unsigned d = 0; d < l->device_count; d++)
        if (l->devices[d].cores_limit > 100 || memchr(l->devices[d].uuid, 0, sizeof l->devices[d].uuid) == NULL)
            return "device field out of range";
    return NULL;
}

static int dir_exists(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        return 0;
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    struct stat st;
    return lstat(dir, &st) == 0;
}

int carve_limits_read(const char *path, carve_limits_t *out, int *trusted, uint64_t *dev, uint64_t *ino,
                      const char **problem)
{
    *problem = NULL;
    *trusted = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT && !dir_exists(path))
            return 0;
        *problem = errno == ELOOP ? "is a symlink" : errno == ENOENT ? "is missing" : "cannot be opened";
        return -1;
    }
    struct stat st;
    struct statvfs vfs;
    ssize_t n = -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        *problem = "is not a regular file";
    else if ((size_t)st.st_size != sizeof(carve_limits_t))
        *problem = "size does not match this layout";
    else if ((n = pread(fd, out, sizeof *out, 0)) != (ssize_t)sizeof *out)
        *problem = "cannot be read whole";
    else
        *problem = validate(out);
    if (!*problem) {
        *trusted = fstatvfs(fd, &vfs) == 0 && (vfs.f_flag & ST_RDONLY) && !(st.st_mode & (S_IWGRP | S_IWOTH));
        *dev = (uint64_t)st.st_dev;
        *ino = (uint64_t)st.st_ino;
    }
    close(fd);
    return *problem ? -1 : 1;
}

/* Apply a rewrite of one claim's limits: each field the limiter reads while running is one aligned store. */
static void apply(carve_open_region_t *r, const carve_limits_t *fresh)
{
    carve_limits_t *l = &r->limits;
    for (unsigned d = 0; d < l->device_count && d < fresh->device_count; d++) {
        __atomic_store_n(&l->devices[d].cores_limit, fresh->devices[d].cores_limit, __ATOMIC_RELAXED);
        __atomic_store_n(&l->devices[d].cores_reserved, fresh->devices[d].cores_reserved, __ATOMIC_RELAXED);
        __atomic_store_n(&l->devices[d].high_neighbours, fresh->devices[d].high_neighbours, __ATOMIC_RELAXED);
        if (!r->closed)
            __atomic_store_n(&l->devices[d].memory_limit, fresh->devices[d].memory_limit, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&l->core_policy, fresh->core_policy, __ATOMIC_RELAXED);
    __atomic_store_n(&l->priority, fresh->priority, __ATOMIC_RELAXED);
    __atomic_store_n(&l->oom_policy, fresh->oom_policy, __ATOMIC_RELAXED);
    __atomic_store_n(&l->generation, fresh->generation, __ATOMIC_RELEASE);
    for (int o = 0; o < CARVE_MAX_DEVICES; o++)
        if (carve_bind[o].region == r)
            __atomic_store_n(&carve_bind[o].memory_limit, l->devices[carve_bind[o].index].memory_limit,
                             __ATOMIC_RELAXED);
}

void carve_limits_refresh(void)
{
    for (int i = 0; i < carve_region_count; i++) {
        carve_open_region_t *r = &carve_regions[i];
        if (r->limits_from != CARVE_LIMITS_FILE)
            continue;
        carve_limits_t fresh;
        int trusted;
        uint64_t dev, ino;
        const char *problem;
        if (carve_limits_read(r->limits_path, &fresh, &trusted, &dev, &ino, &problem) != 1 ||
            trusted < r->trusted || fresh.device_count != r->limits.device_count) {
            /* the last good limits stay: a file that turns bad later never loosens them */
            continue;
        }
        if (fresh.generation != __atomic_load_n(&r->limits.generation, __ATOMIC_RELAXED) || ino != r->limits_ino) {
            r->limits_ino = ino;
            r->limits_dev = dev;
            apply(r, &fresh);
        }
    }
}

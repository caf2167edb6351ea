/*
 * binding.c: every claim a process sees, and which claim device each CUDA ordinal is charged to.
 *
 * A container may get several soft slices (or slots) from several claims. The plugin mounts each claim's
 * region file at /var/run/carve/<claim-uid>/region (read-write: usage accounting) and its limits directory
 * at /var/run/carve/<claim-uid>/limits/ (read-only: limits.c). At start the limiter maps CARVE_REGION's claim
 * (the primary), every <CARVE_REGION_DIR>/<name>/ (tests point it elsewhere) and every /var/run/carve/<name>/,
 * whatever the environment says; at the first allocation, report or launch after the driver is initialised
 * (the slow path, once) it asks the driver for each ordinal's UUID and binds the ordinal to (choose()):
 *   1. the claim whose trusted limits file (the plugin's own mount, limits.c) names that UUID;
 *   2. else, when any claim's limits file is broken, the closed device: every allocation is refused;
 *   3. else the claim whose untrusted limits file names it with the tightest memory limit (a tenant's own
 *      file can only limit it more);
 *   4. else, positionally, device <ordinal> of the primary when that device has no UUID (the environment's
 *      limits, or a limits file without UUIDs) or when the driver cannot tell the ordinal's UUID;
 *   5. else nothing: the device is not limited.
 * Limits come only from limits files and the environment, never from a region file.
 * The hot paths read carve_bind[] only after carve_bound is published; they take no lock.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "limiter.h"

#define MAX_ENTRIES 256 /* names read from the root; more is a misconfiguration, not a container */

carve_open_region_t carve_regions[CARVE_MAX_REGIONS];
int carve_region_count;
carve_open_region_t carve_private;
carve_open_region_t carve_closed;
carve_open_region_t *carve_primary;
carve_binding_t carve_bind[CARVE_MAX_DEVICES];
int carve_bound;
int carve_limits_broken;

static pthread_mutex_t g_bind_lock = PTHREAD_MUTEX_INITIALIZER;
static const carve_config_t *g_cfg; /* the environment, during carve_region_setup */

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* 1 when the claim at region `rst` / limits `lst` is one this process already maps. */
static int already_open(const struct stat *rst, const struct stat *lst)
{
    for (int i = 0; i < carve_region_count; i++) {
        const carve_open_region_t *r = &carve_regions[i];
        struct stat o;
        if (rst && r->fd >= 0 && fstat(r->fd, &o) == 0 && rst->st_dev == o.st_dev && rst->st_ino == o.st_ino)
            return 1;
        if (lst && r->limits_from == CARVE_LIMITS_FILE && (uint64_t)lst->st_dev == r->limits_dev &&
            (uint64_t)lst->st_ino == r->limits_ino)
            return 1;
    }
    return 0;
}

/* One claim: its accounting region and its limits, added at carve_regions[carve_region_count++] unless
 * there is nothing of it to use (no region and no limits file). A claim whose limits file is broken is not
 * added; it sets carve_limits_broken, so every GPU no trusted limits file names is refused (fail closed).
 * `cfg`: the environment's, for CARVE_REGION (a missing region file is then created from it); NULL for a
 * claim the scan of the regions root found. Nothing is returned: carve_region_setup, the one caller that
 * needs to know whether CARVE_REGION's claim (the first) was added, reads carve_region_count. */
static void add_claim(const char *region_path, const carve_config_t *cfg)
{
    char limits_path[4096];
    carve_limits_path(region_path, limits_path, sizeof limits_path);
    struct stat rst, lst;
    int have_r = stat(region_path, &rst) == 0, have_l = stat(limits_path, &lst) == 0;
    if (already_open(have_r ? &rst : NULL, have_l ? &lst : NULL))
        return;
    if (carve_region_count == CARVE_MAX_REGIONS) {
        CARVE_LOG(CARVE_LOG_WARN, "more than %d claim regions; %s is not limited", CARVE_MAX_REGIONS, region_path);
        return;
    }
    /* set by carve_limits_read when it returns 1 (a file found), the only case in which they are read */
    carve_limits_t limits;
    int trusted, limits_fd;
    uint64_t dev, ino;
    const char *problem;
    int found = carve_limits_read(limits_path, &limits, &trusted, &dev, &ino, &limits_fd, &problem);
    if (!found && !have_r && !cfg)
        return; /* a directory of the root that is no claim's (an MPS claim's pipe directory, .../carve/mps) */
    if (found < 0) {
        CARVE_LOG(CARVE_LOG_ERROR, "limits %s %s: allocations on GPUs no valid limits file names are refused",
                  limits_path, problem);
        carve_limits_broken = 1;
        return;
    }
    carve_open_region_t *r = &carve_regions[carve_region_count];
    int closed = 0;
    if (carve_region_open(r, region_path, cfg, cfg && !found) != 0) {
        if (!found)
            return; /* (nothing was read: no limits_fd to close) */
        /* The plugin's claim without usable accounting fails closed: per-process accounting would let each
         * process take the whole quota. Only the container could have broken it; it only hurts itself. */
        carve_region_for_closed(r, g_cfg);
        snprintf(r->path, sizeof r->path, "%s (unusable: closed)", region_path);
        CARVE_LOG(CARVE_LOG_ERROR, "region %s is unusable: allocations on this claim's GPUs are refused", region_path);
        closed = 1;
    }
    if (found) {
        r->limits = limits;
        r->closed = closed;
        for (unsigned d = 0; closed && d < CARVE_MAX_DEVICES; d++) {
            r->limits.devices[d].memory_limit = 1; /* with one byte "in use", nothing fits */
            r->map->devices[d].memory_used = 1;
        }
        r->limits_from = CARVE_LIMITS_FILE;
        r->trusted = trusted;
        r->limits_dev = dev;
        r->limits_ino = ino;
        r->limits_fd = limits_fd;
        snprintf(r->limits_path, sizeof r->limits_path, "%s", limits_path);
    } else if (cfg) {
        carve_limits_from_config(&r->limits, cfg); /* a region without the plugin: the environment's limits */
        r->limits_from = CARVE_LIMITS_ENV;
    } else {
        carve_region_close(r); /* found by the scan, not the plugin's and not ours: nothing to enforce */
        return;
    }
    carve_region_count++;
}

/* <root>/<name>/ for every name, in name order, except claims already mapped. */
static void discover(const char *root)
{
    DIR *dir = opendir(root);
    if (!dir) {
        if (errno != ENOENT)
            CARVE_LOG(CARVE_LOG_WARN, "regions root %s: cannot list it (%s)", root, strerror(errno));
        return;
    }
    char *names[MAX_ENTRIES];
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL && n < MAX_ENTRIES;)
        if (e->d_name[0] != '.' && (names[n] = strdup(e->d_name)) != NULL)
            n++;
    closedir(dir);
    qsort(names, (size_t)n, sizeof names[0], by_name);
    for (int i = 0; i < n; i++) {
        char path[4096];
        int len = snprintf(path, sizeof path, "%s/%s/region", root, names[i]);
        free(names[i]);
        /* "/<name>/region" makes len at least 8; snprintf's -1 (an encoding error, never for %s) reads as
         * SIZE_MAX here: skipped as a cut-off path is */
        if ((size_t)len < sizeof path)
            add_claim(path, NULL);
    }
}

static void setup_closed(const carve_config_t *cfg)
{
    carve_region_for_closed(&carve_closed, cfg);
    snprintf(carve_closed.path, sizeof carve_closed.path, "(closed: a claim's limits are unusable)");
    carve_limits_t *l = &carve_closed.limits;
    l->core_policy = cfg->core_policy == CARVE_CORE_DISABLE ? CARVE_CORE_FORCE : cfg->core_policy;
    for (int i = 0; i < CARVE_MAX_DEVICES; i++) {
        l->devices[i].memory_limit = 1; /* with one byte "in use", every allocation is over the quota */
        carve_closed.map->devices[i].memory_used = 1;
    }
    carve_closed.limits_from = CARVE_LIMITS_CLOSED;
}

void carve_region_setup(const carve_config_t *cfg)
{
    g_cfg = cfg;
    carve_region_private(&carve_private, cfg);
    setup_closed(cfg);
    carve_primary = &carve_private;
    if (!cfg->region_path[0])
        CARVE_LOG(CARVE_LOG_INFO, "no CARVE_REGION: the environment's limits are enforced per process");
    else {
        add_claim(cfg->region_path, cfg);
        /* the first claim: CARVE_REGION's, when it was added */
        if (carve_region_count)
            carve_primary = &carve_regions[0];
    }
    discover(cfg->region_dir);
    /* The plugin's mounts are always looked at: a process cannot hide its claims' regions from the limiter by
     * pointing CARVE_REGION_DIR elsewhere (or clearing CARVE_REGION) in its own environment. */
    if (strcmp(cfg->region_dir, CARVE_DEFAULT_REGION_DIR) != 0)
        discover(CARVE_DEFAULT_REGION_DIR);
    g_cfg = NULL;
}

void carve_uuid_string(const CUuuid *u, char *out, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* A memory limit's order, tightest first: 0 (no limit) is the loosest. */
static uint64_t tightness(uint64_t memory_limit)
{
    return memory_limit ? memory_limit : UINT64_MAX;
}

/* The claim whose limits file names `uuid`, among trusted or untrusted files only. Among trusted files the
 * first (in claim order) wins; among untrusted ones the tightest memory limit does, so a file a tenant
 * forged cannot loosen what the plugin's own file (untrusted too in a process that cleared its
 * environment, limits.c) holds. `uuid` is never empty (choose() asks only for a known one), so a device the file
 * names by position only (no UUID) never matches. */
static int find_uuid(const char *uuid, int trusted, carve_open_region_t **region, int *index)
{
    int found = 0;
    for (int i = 0; i < carve_region_count; i++) {
        const carve_open_region_t *r = &carve_regions[i];
        if (r->limits_from != CARVE_LIMITS_FILE || r->trusted != trusted)
            continue;
        for (unsigned d = 0; d < r->limits.device_count && d < CARVE_MAX_DEVICES; d++)
            if (strncmp(r->limits.devices[d].uuid, uuid, sizeof r->limits.devices[d].uuid) == 0) {
                if (found && (trusted || tightness(r->limits.devices[d].memory_limit) >=
                                             tightness((*region)->limits.devices[*index].memory_limit)))
                    continue;
                *region = &carve_regions[i];
                *index = (int)d;
                found = 1;
            }
    }
    return found;
}

/* What limits the GPU `uuid` (may be "") at CUDA ordinal `o` (-1: not known by ordinal): a trusted limits
 * file first; then, when any claim's limits are broken, nothing may be allocated; then an untrusted limits
 * file (a claim the tenant made up can only limit itself more); then CARVE_REGION's claim by position.
 * `*index` is set where a limits file names the UUID; bound by ordinal (closed, by position), the device's
 * index is the ordinal, which the caller has put there. */
static carve_open_region_t *choose(const char *uuid, int o, int *index)
{
    carve_open_region_t *region = NULL;
    if (uuid[0] && find_uuid(uuid, 1, &region, index))
        return region;
    if (carve_limits_broken && o >= 0)
        return &carve_closed;
    if (uuid[0] && find_uuid(uuid, 0, &region, index))
        return region;
    const carve_limits_t *pos = &carve_primary->limits;
    if (o >= 0 && (unsigned)o < pos->device_count && (!uuid[0] || !pos->devices[o].uuid[0]))
        return carve_primary;
    return NULL;
}

static void fill(carve_binding_t *b, carve_open_region_t *region, int index)
{
    b->region = region;
    b->index = index;
    b->dev = region ? &region->map->devices[index] : NULL;
    b->memory_limit = region ? region->limits.devices[index].memory_limit : 0;
}

int carve_binding_for_uuid(const char *uuid, carve_binding_t *out)
{
    int index = 0;
    carve_open_region_t *region = choose(uuid, -1, &index);
    memset(out, 0, sizeof *out);
    if (!region && carve_limits_broken)
        region = &carve_closed; /* by UUID alone: a broken claim may be this GPU's */
    fill(out, region, index);
    return region != NULL;
}

static void set_mine(carve_binding_t *b)
{
    carve_open_region_t *r = b->region;
    uint64_t *mine = r && r->slot >= 0 ? &r->map->procs[r->slot].used[b->index] : NULL;
    __atomic_store_n(&b->mine, mine, __ATOMIC_RELEASE);
}

/* A charge granted after the exit handler gave this process's slots back (a later atexit handler, a C++ static
 * destructor): counted in a slot taken again, or the claim would keep it for good once the driver has freed it
 * at the process's end. The slot of a dead process is reclaimed, as any. */
void carve_count_late(int dev, uint64_t bytes)
{
    carve_binding_t *b = &carve_bind[dev];
    pthread_mutex_lock(&g_bind_lock);
    carve_region_join(b->region);
    set_mine(b);
    pthread_mutex_unlock(&g_bind_lock);
    uint64_t *mine = __atomic_load_n(&b->mine, __ATOMIC_RELAXED);
    if (mine)
        __atomic_add_fetch(mine, bytes, __ATOMIC_RELAXED);
}

/* 1 when every ordinal is bound; 0 while the driver is not initialised (asked again next time). */
static int resolve(void)
{
    int count = 0;
    CUresult rc = REAL(cuDeviceGetCount) ? REAL(cuDeviceGetCount)(&count) : CUDA_ERROR_NOT_SUPPORTED;
    if (rc == CUDA_ERROR_NOT_INITIALIZED || rc == CUDA_ERROR_DEINITIALIZED)
        return 0;
    if (rc != CUDA_SUCCESS || count > CARVE_MAX_DEVICES)
        count = CARVE_MAX_DEVICES; /* the driver cannot say: positions are all there is */
    for (int o = 0; o < count; o++) {
        char uuid[96] = "";
        CUuuid u;
        if (REAL(cuDeviceGetUuid_v2) && REAL(cuDeviceGetUuid_v2)(&u, o) == CUDA_SUCCESS)
            carve_uuid_string(&u, uuid, sizeof uuid);
        carve_binding_t *b = &carve_bind[o];
        int index = o; /* choose() changes it only for a GPU a limits file names by UUID */
        carve_open_region_t *region = choose(uuid, o, &index);
        fill(b, region, index);
        if (region)
            region->bound = 1;
        const char *name = uuid[0] ? uuid : "uuid unknown";
        if (region)
            CARVE_LOG(CARVE_LOG_DEBUG, "device %d (%s): %s device %d", o, name, region->path, index);
        else
            CARVE_LOG(CARVE_LOG_DEBUG, "device %d (%s): no limit", o, name);
    }
    for (int i = 0; i < carve_region_count; i++)
        if (carve_regions[i].bound)
            carve_region_join(&carve_regions[i]);
    if (carve_limits_broken)
        CARVE_LOG(CARVE_LOG_WARN, "a claim's limits file is unusable: GPUs that no trusted limits file names "
                  "refuse every allocation");
    for (int o = 0; o < count; o++)
        set_mine(&carve_bind[o]);
    return 1;
}

int carve_bind_slow(int dev)
{
    carve_init();
    pthread_mutex_lock(&g_bind_lock);
    if (!__atomic_load_n(&carve_bound, __ATOMIC_RELAXED) && resolve())
        __atomic_store_n(&carve_bound, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_bind_lock);
    return __atomic_load_n(&carve_bound, __ATOMIC_ACQUIRE) ? dev : -1;
}

void carve_bind_after_fork(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    g_bind_lock = fresh;
    /* the child's slots are new (carve_region_after_fork); the private and closed regions keep slot 0 */
    for (int o = 0; o < CARVE_MAX_DEVICES; o++)
        set_mine(&carve_bind[o]);
}

/* Diagnostics: the region file (or "(environment)") and device index that limit CUDA ordinal `ordinal`;
 * -1 when nothing limits it or the driver cannot tell yet. */
CARVE_API int carveLimiterDeviceRegion(int ordinal, char *path, size_t len)
{
    if ((unsigned)ordinal >= CARVE_MAX_DEVICES || carve_bind_ordinal(ordinal) < 0 || !carve_bind[ordinal].dev)
        return -1;
    if (path && len)
        snprintf(path, len, "%s", carve_bind[ordinal].region->path);
    return carve_bind[ordinal].index;
}

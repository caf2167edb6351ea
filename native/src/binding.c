/*
 * binding.c: every claim region a process sees, and which region device each CUDA ordinal is charged to.
 *
 * A container may get several soft slices (or slots) from several claims. The plugin mounts each claim's
 * region directory at /var/run/carve/<claim-uid>/ and writes each GPU's UUID into its region device. At
 * start the limiter maps CARVE_REGION's file (the primary), every <CARVE_REGION_DIR>/<name>/region (tests
 * point it elsewhere) and every /var/run/carve/<name>/region, whatever the environment says; at the first allocation, report or launch after the driver is initialised (the slow
 * path, once) it asks the driver for each ordinal's UUID and binds the ordinal to:
 *   1. the region device carrying that UUID (the primary first, then the others in name order);
 *   2. else, positionally, device <ordinal> of the primary when that device has no UUID (a region the
 *      environment created, or an old plugin's), or when the driver cannot tell the ordinal's UUID; without
 *      a usable CARVE_REGION the primary is the private region of the environment's limits;
 *   3. else nothing: the device is not limited.
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
carve_open_region_t *carve_primary;
carve_binding_t carve_bind[CARVE_MAX_DEVICES];
int carve_bound;

static pthread_mutex_t g_bind_lock = PTHREAD_MUTEX_INITIALIZER;

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* 1 when `st` is a region file this process has already mapped (the primary, or one found before). */
static int already_open(const struct stat *st)
{
    for (int i = 0; i < carve_region_count; i++) {
        struct stat o;
        if (carve_regions[i].fd >= 0 && fstat(carve_regions[i].fd, &o) == 0 && same_file(st, &o))
            return 1;
    }
    return 0;
}

/* <root>/<name>/region for every name, in name order, except files already mapped. */
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
        struct stat st;
        int len = snprintf(path, sizeof path, "%s/%s/region", root, names[i]);
        free(names[i]);
        if (len <= 0 || (size_t)len >= sizeof path || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (already_open(&st))
            continue;
        if (carve_region_count == CARVE_MAX_REGIONS) {
            CARVE_LOG(CARVE_LOG_WARN, "regions root %s: more than %d regions; %s is not limited", root,
                      CARVE_MAX_REGIONS, path);
            continue;
        }
        if (carve_region_open(&carve_regions[carve_region_count], path, NULL, 0) == 0)
            carve_region_count++;
    }
}

void carve_region_setup(const carve_config_t *cfg)
{
    carve_region_private(&carve_private, cfg);
    carve_primary = &carve_private;
    if (!cfg->region_path[0]) {
        CARVE_LOG(CARVE_LOG_INFO, "no CARVE_REGION: the environment's limits are enforced per process");
    } else if (carve_region_open(&carve_regions[0], cfg->region_path, cfg, 1) == 0) {
        carve_primary = &carve_regions[0];
        carve_region_count = 1;
    }
    discover(cfg->region_dir);
    /* The plugin's mounts are always looked at: a process cannot hide its claims' regions from the limiter by
     * pointing CARVE_REGION_DIR elsewhere (or clearing CARVE_REGION) in its own environment. */
    if (strcmp(cfg->region_dir, CARVE_DEFAULT_REGION_DIR) != 0)
        discover(CARVE_DEFAULT_REGION_DIR);
}

void carve_uuid_string(const CUuuid *u, char *out, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static int find_uuid(const char *uuid, carve_open_region_t **region, int *index)
{
    for (int i = 0; i < carve_region_count; i++) {
        carve_region_t *m = carve_regions[i].map;
        for (unsigned d = 0; d < m->device_count && d < CARVE_MAX_DEVICES; d++)
            if (m->devices[d].uuid[0] && strncmp(m->devices[d].uuid, uuid, sizeof m->devices[d].uuid) == 0) {
                *region = &carve_regions[i];
                *index = (int)d;
                return 1;
            }
    }
    return 0;
}

carve_region_device_t *carve_region_device_by_uuid(const char *uuid)
{
    carve_open_region_t *r;
    int index;
    return find_uuid(uuid, &r, &index) ? &r->map->devices[index] : NULL;
}

static void set_mine(carve_binding_t *b)
{
    carve_open_region_t *r = b->region;
    uint64_t *mine = r && r->slot >= 0 ? &r->map->procs[r->slot].used[b->index] : NULL;
    __atomic_store_n(&b->mine, mine, __ATOMIC_RELEASE);
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
    carve_region_t *pos = carve_primary->map;
    for (int o = 0; o < count; o++) {
        char uuid[96] = "";
        CUuuid u;
        if (REAL(cuDeviceGetUuid_v2) && REAL(cuDeviceGetUuid_v2)(&u, o) == CUDA_SUCCESS)
            carve_uuid_string(&u, uuid, sizeof uuid);
        carve_binding_t *b = &carve_bind[o];
        int index = o;
        carve_open_region_t *region = NULL;
        if (uuid[0] && find_uuid(uuid, &region, &index)) {
            /* bound by UUID */
        } else if ((unsigned)o < pos->device_count && (!uuid[0] || !pos->devices[o].uuid[0])) {
            region = carve_primary;
            index = o;
        }
        b->region = region;
        b->index = index;
        b->dev = region ? &region->map->devices[index] : NULL;
        if (region)
            region->bound = 1;
        CARVE_LOG(CARVE_LOG_DEBUG, "device %d (%s): %s%s%d", o, uuid[0] ? uuid : "uuid unknown",
                  region ? region->path : "no limit", region ? " device " : "", region ? index : -1);
    }
    for (int i = 0; i < carve_region_count; i++)
        if (carve_regions[i].bound)
            carve_region_join(&carve_regions[i]);
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
    for (int o = 0; o < CARVE_MAX_DEVICES; o++)
        if (carve_bind[o].region && carve_bind[o].region != &carve_private)
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

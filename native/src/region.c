/*
 * region.c: the claim's shared region (carve_region.h): opening or creating it, this process's slot,
 * the over-quota slow path and the reclaim of dead processes.
 *
 * Liveness: each process holds an open-file-description lock on the first byte of its slot. The kernel
 * drops it when the process dies however it dies (SIGKILL included), in every pid namespace, so a slot
 * whose byte is unlocked belongs to a dead process. Where such locks are unavailable, the pid, its start
 * time and its pid namespace decide instead (a reused pid never inherits usage).
 *
 * Failure is never fatal: a missing directory, an unreadable, corrupt or foreign-version file is logged
 * once and the process enforces its limits alone in a private region.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "limiter.h"

#define INIT_PID_NS_INO 0xEFFFFFFCull /* PROC_PID_INIT_INO: the host's pid namespace */

carve_region_t *carve_region;
int carve_region_shared;
int carve_slot = -1;

static int g_fd = -1;
static int g_locks;              /* OFD locks work on this file */
static char g_path[4096];
static uint64_t g_refusals;      /* this process's refused allocations */
static uint64_t g_my_ns, g_my_start;

static uint64_t pid_ns_of(const char *proc_pid)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%s/ns/pid", proc_pid);
    return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* starttime (field 22 of /proc/<pid>/stat), 0 when unreadable. */
static uint64_t start_time_of(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may contain spaces */
    if (!p)
        return 0;
    unsigned long long v = 0;
    /* after ") ": state(3) ... starttime is the 20th field from here */
    int field = 2;
    for (p++; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    if (sscanf(p, "%llu", &v) != 1)
        return 0;
    return v;
}

/* The pid NVML reports for us: our pid in the outermost namespace we can see, when that is the host's. */
static int32_t host_pid_guess(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return 0;
    char line[256];
    int32_t outer = 0, fields = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "NSpid:", 6) != 0)
            continue;
        char *save = NULL;
        for (char *t = strtok_r(line + 6, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save))
            if (fields++ == 0)
                outer = (int32_t)atoi(t);
        break;
    }
    fclose(f);
    if (fields > 1)
        return outer; /* we can see a parent namespace: its pid is what the host sees */
    return g_my_ns == INIT_PID_NS_INO ? (int32_t)getpid() : 0; /* else the plugin fills it in */
}

static void fill_from_config(carve_region_t *r, const carve_config_t *cfg, uint32_t flags)
{
    memset(r, 0, sizeof *r);
    r->magic = CARVE_REGION_MAGIC;
    r->version = CARVE_REGION_VERSION;
    r->flags = flags;
    r->size = sizeof(carve_region_t);
    r->device_count = CARVE_MAX_DEVICES; /* the environment cannot say how many: cover them all */
    r->max_procs = CARVE_MAX_PROCS;
    r->core_policy = cfg->core_policy;
    r->priority = cfg->priority;
    r->oom_policy = cfg->oom_policy;
    r->generation = 1;
    for (int i = 0; i < CARVE_MAX_DEVICES; i++) {
        r->devices[i].memory_limit = cfg->memory_limit[i];
        r->devices[i].cores_limit = cfg->cores_limit[i];
    }
}

static void use_private(const carve_config_t *cfg)
{
    void *p = mmap(NULL, sizeof(carve_region_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        /* cannot even map 160 KiB: keep a static fallback so hooks still work */
        static carve_region_t fallback;
        p = &fallback;
    }
    carve_region = p;
    fill_from_config(carve_region, cfg, 0);
    carve_region_shared = 0;
    carve_slot = 0; /* the private region has exactly one process */
}

/* Create the file whole under a temporary name, then link it into place: readers see nothing or all. */
static int create_file(const char *path, const carve_config_t *cfg)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0)
        return -1;
    fchmod(fd, 0666); /* every process of the claim, whatever its uid, maps it read-write */
    carve_region_t *r = calloc(1, sizeof *r);
    int ok = r != NULL;
    if (ok) {
        fill_from_config(r, cfg, CARVE_REGION_FROM_ENV);
        const char *p = (const char *)r;
        size_t left = sizeof *r;
        while (ok && left) {
            ssize_t w = write(fd, p, left);
            ok = w > 0;
            p += w > 0 ? w : 0;
            left -= w > 0 ? (size_t)w : 0;
        }
        free(r);
    }
    ok = ok && fsync(fd) == 0 && (link(tmp, path) == 0 || errno == EEXIST);
    close(fd);
    unlink(tmp);
    return ok ? open(path, O_RDWR | O_CLOEXEC) : -1;
}

static const char *validate(const carve_region_t *r)
{
    if (r->magic != CARVE_REGION_MAGIC)
        return "bad magic (not a carve region)";
    if (r->version != CARVE_REGION_VERSION)
        return "foreign layout version";
    if (r->size != sizeof(carve_region_t))
        return "size field does not match this layout";
    if (r->device_count == 0 || r->device_count > CARVE_MAX_DEVICES || r->max_procs == 0 ||
        r->max_procs > CARVE_MAX_PROCS)
        return "device or process count out of range";
    if (r->core_policy > CARVE_CORE_DISABLE || r->priority > CARVE_PRIORITY_LOW ||
        r->oom_policy > CARVE_OOM_KILL)
        return "policy out of range";
    return NULL;
}

static off_t slot_offset(int i)
{
    return (off_t)(offsetof(carve_region_t, procs) + (size_t)i * sizeof(carve_region_proc_t));
}

static int lock_slot(int i, short type, int cmd)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = slot_offset(i), .l_len = 1};
    return fcntl(g_fd, cmd, &fl);
}

static int slot_dead(int i)
{
    carve_region_proc_t *p = &carve_region->procs[i];
    int32_t pid = __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE);
    if (pid <= 0 || i == carve_slot)
        return 0;
    if (g_locks) {
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot_offset(i), .l_len = 1};
        if (fcntl(g_fd, F_OFD_GETLK, &fl) == 0)
            return fl.l_type == F_UNLCK;
    }
    if (p->pid_ns != g_my_ns)
        return 0; /* another namespace's pid: cannot be checked from here */
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    uint64_t st = start_time_of(pid);
    return st && p->start_time && st != p->start_time;
}

int carve_slot_live(int i)
{
    return __atomic_load_n(&carve_region->procs[i].pid, __ATOMIC_ACQUIRE) > 0 && !slot_dead(i);
}

int carve_host_pid_of_slot(int i)
{
    return __atomic_load_n(&carve_region->procs[i].host_pid, __ATOMIC_RELAXED);
}

static void release_slot_usage(carve_region_proc_t *p)
{
    for (int d = 0; d < CARVE_MAX_DEVICES; d++) {
        uint64_t u = __atomic_exchange_n(&p->used[d], 0, __ATOMIC_ACQ_REL);
        if (u)
            carve_sub_clamped(&carve_region->devices[d].memory_used, u);
    }
}

void carve_reclaim_dead(void)
{
    if (!carve_region_shared)
        return;
    unsigned n = carve_region->max_procs;
    for (unsigned i = 0; i < n; i++) {
        carve_region_proc_t *p = &carve_region->procs[i];
        int32_t pid = __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE);
        if (pid <= 0 || !slot_dead((int)i))
            continue;
        if (!__atomic_compare_exchange_n(&p->pid, &pid, CARVE_SLOT_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            continue; /* another process is reclaiming it */
        release_slot_usage(p);
        CARVE_LOG(CARVE_LOG_INFO, "reclaimed the usage of dead process %d (slot %u)", (int)pid, i);
        __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
    }
}

static void claim_slot(void)
{
    pid_t me = getpid();
    unsigned n = carve_region->max_procs;
    for (int attempt = 0; attempt < 2 && carve_slot < 0; attempt++) {
        if (attempt)
            carve_reclaim_dead();
        for (unsigned i = 0; i < n; i++) {
            carve_region_proc_t *p = &carve_region->procs[i];
            int32_t zero = 0;
            if (__atomic_load_n(&p->pid, __ATOMIC_RELAXED) != 0 ||
                !__atomic_compare_exchange_n(&p->pid, &zero, CARVE_SLOT_BUSY, 0, __ATOMIC_ACQ_REL,
                                             __ATOMIC_RELAXED))
                continue;
            if (g_locks && lock_slot((int)i, F_WRLCK, F_OFD_SETLK) != 0) {
                __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE); /* a dying owner still holds it */
                continue;
            }
            memset(p->used, 0, sizeof p->used);
            p->start_time = g_my_start;
            p->pid_ns = g_my_ns;
            p->host_pid = host_pid_guess();
            __atomic_store_n(&p->pid, (int32_t)me, __ATOMIC_RELEASE);
            carve_slot = (int)i;
            break;
        }
    }
    if (carve_slot < 0)
        CARVE_LOG(CARVE_LOG_WARN, "region %s: all %u process slots are taken; this process's usage is "
                  "counted but cannot be reclaimed if it dies", g_path, n);
}

void carve_region_setup(const carve_config_t *cfg)
{
    g_my_ns = pid_ns_of("self");
    g_my_start = start_time_of(getpid());
    snprintf(g_path, sizeof g_path, "%s", cfg->region_path);
    if (!g_path[0]) {
        CARVE_LOG(CARVE_LOG_INFO, "no CARVE_REGION: limits are enforced per process");
        use_private(cfg);
        return;
    }
    int fd = open(g_path, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        fd = create_file(g_path, cfg);
    if (fd < 0) {
        CARVE_LOG(CARVE_LOG_ERROR, "region %s: cannot open or create (%s); limits are enforced per process",
                  g_path, strerror(errno));
        use_private(cfg);
        return;
    }
    struct stat st;
    const char *problem = NULL;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size != sizeof(carve_region_t))
        problem = "file size does not match this layout (corrupt or foreign version)";
    else if ((map = mmap(NULL, sizeof(carve_region_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        problem = "cannot map it";
    else
        problem = validate(map);
    if (problem) {
        CARVE_LOG(CARVE_LOG_ERROR, "region %s: %s; limits from the environment are enforced per process",
                  g_path, problem);
        if (map != MAP_FAILED)
            munmap(map, sizeof(carve_region_t));
        close(fd);
        use_private(cfg);
        return;
    }
    carve_region = map;
    carve_region_shared = 1;
    g_fd = fd;
    struct flock probe = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    g_locks = fcntl(g_fd, F_OFD_GETLK, &probe) == 0;
    claim_slot();
    carve_reclaim_dead();
}

void carve_region_exit(void)
{
    if (!carve_region_shared || carve_slot < 0)
        return;
    carve_region_proc_t *p = &carve_region->procs[carve_slot];
    __atomic_store_n(&p->pid, CARVE_SLOT_BUSY, __ATOMIC_RELEASE);
    release_slot_usage(p); /* the driver frees a process's memory when it exits */
    if (g_locks)
        lock_slot(carve_slot, F_UNLCK, F_OFD_SETLK);
    __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
    carve_slot = -1;
}

void carve_region_after_fork(void)
{
    if (!carve_region_shared) {
        carve_slot = 0;
        return;
    }
    /* The parent's slot, lock and usage stay the parent's. A new descriptor gives the child locks of its own. */
    carve_slot = -1;
    int fd = open(g_path, O_RDWR | O_CLOEXEC);
    if (g_fd >= 0)
        close(g_fd);
    g_fd = fd;
    g_locks = g_locks && fd >= 0;
    g_my_start = start_time_of(getpid());
    if (fd >= 0)
        claim_slot();
}

/* Over quota: reclaim what dead processes hold, retry once, then apply the OOM policy. */
int carve_charge_slow(int dev, uint64_t bytes)
{
    carve_region_device_t *d = &carve_region->devices[dev];
    carve_reclaim_dead();
    uint64_t limit = __atomic_load_n(&d->memory_limit, __ATOMIC_RELAXED);
    uint64_t used = __atomic_load_n(&d->memory_used, __ATOMIC_RELAXED);
    while (!limit || (bytes <= limit && used <= limit - bytes)) {
        if (__atomic_compare_exchange_n(&d->memory_used, &used, used + bytes, 1, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            if (carve_slot >= 0)
                __atomic_add_fetch(&carve_region->procs[carve_slot].used[dev], bytes, __ATOMIC_RELAXED);
            return 0;
        }
    }
    __atomic_add_fetch(&d->oom_refusals, 1, __ATOMIC_RELAXED);
    uint64_t mine = __atomic_add_fetch(&g_refusals, 1, __ATOMIC_RELAXED);
    if (carve_region->oom_policy == CARVE_OOM_KILL) {
        CARVE_LOG(CARVE_LOG_ERROR, "device %d: allocation of %llu bytes exceeds the memory limit (%llu of %llu "
                  "bytes used); CARVE_OOM_POLICY=kill: killing this process", dev, (unsigned long long)bytes,
                  (unsigned long long)used, (unsigned long long)limit);
        kill(getpid(), SIGKILL);
    }
    if (mine == 1)
        CARVE_LOG(CARVE_LOG_WARN, "device %d: allocation of %llu bytes refused: %llu of %llu bytes in use "
                  "(first refusal; further ones are counted in the region, not logged)", dev,
                  (unsigned long long)bytes, (unsigned long long)used, (unsigned long long)limit);
    return -1;
}

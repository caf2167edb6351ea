/*
 * region.c: one claim's shared region (carve_region.h): opening or creating it, this process's slot in
 * it, the over-quota slow path and the reclaim of dead processes. Which regions a process maps and which
 * CUDA device each one limits is binding.c's job.
 *
 * Liveness: each process holds an open-file-description lock on the first byte of its slot. The kernel
 * drops it when the process dies however it dies (SIGKILL included), in every pid namespace, so a slot
 * whose byte is unlocked belongs to a dead process. Where such locks are unavailable, the pid, its start
 * time and its pid namespace decide instead (a reused pid never inherits usage).
 *
 * Nothing in the region is read as a limit (limits.c owns those): the container can write this file.
 * Failure is never fatal: a missing directory, an unreadable, corrupt or foreign-version file is logged
 * once and the process keeps its accounting alone in a private region.
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
    unsigned long long v; /* read only where sscanf set it */
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

/* A region of the limiter's own with the environment's limits, in memory mapped for it; when the kernel refuses
 * even 160 KiB, in `fallback`, static storage, so hooks still work. */
static void own_region(carve_open_region_t *r, const carve_config_t *cfg, carve_region_t *fallback)
{
    void *p = mmap(NULL, sizeof(carve_region_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(r, 0, sizeof *r);
    r->map = p == MAP_FAILED ? fallback : p;
    fill_from_config(r->map, cfg, 0);
    r->fd = -1;
    r->slot = 0; /* the private region has exactly one process */
    snprintf(r->path, sizeof r->path, "(environment)");
    carve_limits_from_config(&r->limits, cfg);
    r->limits_from = CARVE_LIMITS_ENV;
}

/* The environment's limits for this process alone (no CARVE_REGION, or one that cannot be used). */
void carve_region_private(carve_open_region_t *r, const carve_config_t *cfg)
{
    static carve_region_t fallback;
    own_region(r, cfg, &fallback);
}

/* What the caller closes (a claim whose limits or region are unusable: a byte "in use" against a 1-byte quota).
 * The closed regions may share one fallback, as nothing fits in any; the private one may not, or it would start
 * with that byte in use. */
void carve_region_for_closed(carve_open_region_t *r, const carve_config_t *cfg)
{
    static carve_region_t fallback;
    own_region(r, cfg, &fallback);
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
    return ok ? open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK) : -1;
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

/* 1 when the region file open on `fd` takes OFD locks (each slot's lock tells a live owner from a dead one),
 * 0 when its filesystem has none or `fd` is no descriptor (fcntl fails with EBADF). */
static int has_ofd_locks(int fd)
{
    struct flock probe = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    return fcntl(fd, F_OFD_GETLK, &probe) == 0;
}

static int lock_slot(carve_open_region_t *r, int i, short type, int cmd)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = slot_offset(i), .l_len = 1};
    return fcntl(r->fd, cmd, &fl);
}

/* Slot i, which `pid` (> 0) holds, belongs to a dead process. */
static int slot_dead(carve_open_region_t *r, int i, int32_t pid)
{
    carve_region_proc_t *p = &r->map->procs[i];
    if (i == r->slot)
        return 0;
    if (r->locks) {
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot_offset(i), .l_len = 1};
        if (fcntl(r->fd, F_OFD_GETLK, &fl) == 0)
            return fl.l_type == F_UNLCK;
    }
    if (p->pid_ns != g_my_ns)
        return 0; /* another namespace's pid: cannot be checked from here */
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    uint64_t st = start_time_of(pid);
    return st && p->start_time && st != p->start_time;
}

void carve_close_if_same(int fd, uint64_t dev, uint64_t ino)
{
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino)
        close(fd);
}

int carve_host_pid_of_slot(const carve_region_t *map, int i)
{
    return __atomic_load_n(&map->procs[i].host_pid, __ATOMIC_RELAXED);
}

static void release_slot_usage(carve_region_t *map, carve_region_proc_t *p)
{
    for (int d = 0; d < CARVE_MAX_DEVICES; d++) {
        uint64_t u = __atomic_exchange_n(&p->used[d], 0, __ATOMIC_ACQ_REL);
        if (u)
            carve_sub_clamped(&map->devices[d].memory_used, u);
    }
}

void carve_reclaim_dead(carve_open_region_t *r)
{
    if (!r->shared)
        return;
    unsigned n = r->map->max_procs;
    for (unsigned i = 0; i < n; i++) {
        carve_region_proc_t *p = &r->map->procs[i];
        int32_t pid = __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE);
        if (pid <= 0 || !slot_dead(r, (int)i, pid))
            continue; /* free, or being claimed or given back (CARVE_SLOT_BUSY): not dead */
        if (!__atomic_compare_exchange_n(&p->pid, &pid, CARVE_SLOT_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            continue; /* another process is reclaiming it */
        release_slot_usage(r->map, p);
        CARVE_LOG(CARVE_LOG_INFO, "region %s: reclaimed the usage of dead process %d (slot %u)", r->path, (int)pid,
                  i);
        __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
    }
}

/* Take the first free slot whose lock no one holds: r->slot, left -1 when every slot is taken. */
static void take_free_slot(carve_open_region_t *r)
{
    pid_t me = getpid();
    unsigned n = r->map->max_procs;
    for (unsigned i = 0; i < n; i++) {
        carve_region_proc_t *p = &r->map->procs[i];
        int32_t zero = 0;
        if (__atomic_load_n(&p->pid, __ATOMIC_RELAXED) != 0 ||
            !__atomic_compare_exchange_n(&p->pid, &zero, CARVE_SLOT_BUSY, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_RELAXED))
            continue;
        if (r->locks && lock_slot(r, (int)i, F_WRLCK, F_OFD_SETLK) != 0) {
            __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE); /* a dying owner still holds it */
            continue;
        }
        memset(p->used, 0, sizeof p->used);
        p->start_time = g_my_start;
        p->pid_ns = g_my_ns;
        p->host_pid = host_pid_guess();
        __atomic_store_n(&p->pid, (int32_t)me, __ATOMIC_RELEASE);
        r->slot = (int)i;
        return;
    }
}

static void claim_slot(carve_open_region_t *r)
{
    take_free_slot(r);
    if (r->slot < 0) {
        /* Dead processes' slots are reclaimed only when none is free: a process's start reclaims them
         * anyway (carve_region_join), and a forked child is spared a scan of every slot's lock. */
        carve_reclaim_dead(r);
        take_free_slot(r);
    }
    if (r->slot < 0)
        CARVE_LOG(CARVE_LOG_WARN, "region %s: all %u process slots are taken; this process's usage is "
                  "counted but cannot be reclaimed if it dies", r->path, r->map->max_procs);
}

/* Map a claim's region file. 0 on success; otherwise one log line naming the file and the problem, and
 * nothing of it is ever written. `create`: a missing file is created from the environment (CARVE_REGION). */
int carve_region_open(carve_open_region_t *r, const char *path, const carve_config_t *cfg, int create)
{
    if (!g_my_ns) {
        g_my_ns = pid_ns_of("self");
        g_my_start = start_time_of(getpid());
    }
    memset(r, 0, sizeof *r);
    r->fd = -1;
    r->limits_fd = -1; /* 0 would name stdin: only a limits file's own descriptor is ever closed */
    r->slot = -1;
    snprintf(r->path, sizeof r->path, "%s", path);
    /* the container can replace this file: never follow a symlink, never block on a fifo or device */
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT && create)
        fd = create_file(path, cfg);
    if (fd < 0) {
        CARVE_LOG(CARVE_LOG_ERROR, "region %s: cannot open%s (%s); %s", path, create ? " or create" : "",
                  strerror(errno), create ? "limits are enforced per process" : "skipped");
        return -1;
    }
    struct stat st;
    const char *problem = NULL;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        problem = "not a regular file";
    else if ((size_t)st.st_size != sizeof(carve_region_t))
        problem = "file size does not match this layout (corrupt or foreign version)";
    else if ((map = mmap(NULL, sizeof(carve_region_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        problem = "cannot map it";
    else
        problem = validate(map);
    if (problem) {
        CARVE_LOG(CARVE_LOG_ERROR, "region %s: %s; %s", path, problem,
                  create ? "limits from the environment are enforced per process" : "skipped");
        if (map != MAP_FAILED)
            munmap(map, sizeof(carve_region_t));
        close(fd);
        return -1;
    }
    r->map = map;
    r->shared = 1;
    r->fd = fd;
    r->region_dev = (uint64_t)st.st_dev;
    r->region_ino = (uint64_t)st.st_ino;
    r->locks = has_ofd_locks(fd);
    return 0;
}

/* Unmap a region and close its descriptors. Its one caller (add_claim) leaves the entry past carve_region_count,
 * where nothing reads it until carve_region_open or carve_region_private fills it anew. */
void carve_region_close(carve_open_region_t *r)
{
    if (r->map && r->shared)
        munmap(r->map, sizeof(carve_region_t));
    carve_close_if_same(r->fd, r->region_dev, r->region_ino);
    carve_close_if_same(r->limits_fd, r->limits_dev, r->limits_ino);
}

/* This process starts charging the region: a slot of its own, and whatever dead processes held comes back. */
void carve_region_join(carve_open_region_t *r)
{
    if (!r->shared || r->slot >= 0)
        return;
    claim_slot(r);
    carve_reclaim_dead(r);
}

static void leave(carve_open_region_t *r)
{
    if (!r->shared || r->slot < 0)
        return;
    carve_region_proc_t *p = &r->map->procs[r->slot];
    __atomic_store_n(&p->pid, CARVE_SLOT_BUSY, __ATOMIC_RELEASE);
    release_slot_usage(r->map, p); /* the driver frees a process's memory when it exits */
    if (r->locks)
        lock_slot(r, r->slot, F_UNLCK, F_OFD_SETLK);
    __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
    r->slot = -1;
}

int carve_exited;

void carve_region_exit(void)
{
    /* Later frees (other atexit handlers, static destructors) must neither touch a slot that is no longer ours
     * nor release again what the slot's release below gives back. */
    unsigned char gone[CARVE_MAX_DEVICES] = {0};
    __atomic_store_n(&carve_exited, 1, __ATOMIC_RELEASE); /* before `mine` is gone: a later charge takes a slot */
    for (int d = 0; d < CARVE_MAX_DEVICES; d++)
        if (carve_bind[d].region && carve_bind[d].region->shared) {
            gone[d] = carve_bind[d].region->slot >= 0; /* without a slot, its frees are all that release it */
            __atomic_store_n(&carve_bind[d].mine, NULL, __ATOMIC_RELEASE);
        }
    carve_forget_charges(gone);
    for (int i = 0; i < carve_region_count; i++)
        leave(&carve_regions[i]);
}

void carve_region_after_fork(void)
{
    /* The parent's slots, locks and usage stay the parent's. New descriptors give the child locks of its own. */
    g_my_start = start_time_of(getpid());
    for (int i = 0; i < carve_region_count; i++) {
        carve_open_region_t *r = &carve_regions[i];
        r->slot = -1;
        r->refusals = 0;
        if (!r->shared)
            continue;
        int fd = open(r->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        carve_close_if_same(r->fd, r->region_dev, r->region_ino);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0) {
            r->region_dev = (uint64_t)st.st_dev;
            r->region_ino = (uint64_t)st.st_ino;
            /* The mapping inherited from the parent holds the parent's open file description, and with it the
             * parent's slot lock: while this child lived, a killed parent's slot would look alive and its usage
             * never come back. The same file mapped again, in place, through the child's own descriptor (the
             * pointers into it stay valid). */
            if (mmap(r->map, sizeof(carve_region_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
                MAP_FAILED)
                CARVE_LOG(CARVE_LOG_WARN, "region %s: cannot map it again after fork (%s)", r->path, strerror(errno));
        }
        r->fd = fd;
        /* the same file the parent probed: the same answer, and none when the child could not open it */
        r->locks = has_ofd_locks(fd);
        if (fd >= 0 && r->bound)
            claim_slot(r);
    }
    carve_bind_after_fork();
}

/* Over quota: reclaim what dead processes hold, retry once, then apply the OOM policy of the device's claim. */
int carve_charge_slow(int dev, uint64_t bytes)
{
    carve_binding_t *b = &carve_bind[dev];
    carve_open_region_t *r = b->region;
    carve_region_device_t *d = b->dev;
    carve_reclaim_dead(r);
    uint64_t limit = __atomic_load_n(&b->memory_limit, __ATOMIC_RELAXED);
    uint64_t used = __atomic_load_n(&d->memory_used, __ATOMIC_RELAXED);
    while (!limit || (bytes <= limit && used <= limit - bytes)) {
        if (__atomic_compare_exchange_n(&d->memory_used, &used, used + bytes, 1, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            carve_count_mine(dev, bytes);
            return 0;
        }
    }
    __atomic_add_fetch(&d->oom_refusals, 1, __ATOMIC_RELAXED);
    uint64_t mine = __atomic_add_fetch(&r->refusals, 1, __ATOMIC_RELAXED);
    if (__atomic_load_n(&r->limits.oom_policy, __ATOMIC_RELAXED) == CARVE_OOM_KILL) {
        CARVE_LOG(CARVE_LOG_ERROR, "device %d: allocation of %llu bytes exceeds the memory limit (%llu of %llu "
                  "bytes used, region %s); CARVE_OOM_POLICY=kill: killing this process", dev,
                  (unsigned long long)bytes, (unsigned long long)used, (unsigned long long)limit, r->path);
        kill(getpid(), SIGKILL);
    }
    if (mine == 1)
        CARVE_LOG(CARVE_LOG_WARN, "device %d: allocation of %llu bytes refused: %llu of %llu bytes in use, region "
                  "%s (first refusal; further ones are counted in the region, not logged)", dev,
                  (unsigned long long)bytes, (unsigned long long)used, (unsigned long long)limit, r->path);
    return -1;
}

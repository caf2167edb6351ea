/*
 * limiter.h: internals shared by the limiter's sources (not installed, not a contract).
 *
 *   intercept.c  symbol table -> real functions, dlsym override, cuGetProcAddress hooks, initialisation
 *   config.c     environment (CARVE_* and HAMi's names) and logging
 *   region.c     one shared region: open/create/validate, process slots, charge/uncharge, dead reclaim
 *   limits.c     the plugin's read-only limits file of a claim: read, validate, trust, refresh
 *   binding.c    every region of the container, and which region device each CUDA ordinal is charged to
 *   table.c      per-process lock-free table: allocation -> (device, bytes)
 *   memory.c     allocation and free hooks
 *   report.c     memory reports (cuMemGetInfo, cuDeviceTotalMem, NVML memory info)
 *   throttle.c   launch hooks and the launch gate (token bucket)
 *   feedback.c   the feedback thread: NVML utilization -> launch budget
 */
#ifndef CARVE_LIMITER_H
#define CARVE_LIMITER_H

#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* cuLaunchCooperativeKernelMultiDevice */

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "carve_region.h"
#include "glibc_compat.h"
#include "hooks.h"

#define CARVE_API __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* --- config.c -------------------------------------------------------------------------------------- */
enum { CARVE_LOG_ERROR, CARVE_LOG_WARN, CARVE_LOG_INFO, CARVE_LOG_DEBUG };
extern int carve_log_level;
void carve_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define CARVE_LOG(level, ...)                                                                              \
    do {                                                                                                   \
        if ((level) <= carve_log_level)                                                                    \
            carve_log((level), __VA_ARGS__);                                                               \
    } while (0)

typedef struct carve_config {
    uint64_t memory_limit[CARVE_MAX_DEVICES]; /* bytes, 0 = none */
    uint32_t cores_limit[CARVE_MAX_DEVICES];  /* percent, 0 = none */
    uint32_t core_policy, priority, oom_policy;
    char region_path[4096];
    char region_dir[4096]; /* where the claims' region directories are (CARVE_REGION_DIR) */
} carve_config_t;

void carve_config_from_env(carve_config_t *cfg);
const char *carve_getenv(const char *name); /* the limiter's variables as the process started */
int carve_parse_bytes(const char *s, uint64_t *out); /* s not NULL; 0 ok; K/M/G/T suffixes are powers of 1024 */

/* --- intercept.c ----------------------------------------------------------------------------------- */
extern int carve_ready;          /* set once initialisation is complete */
void carve_init_slow(void);
static inline void carve_init(void)
{
    if (UNLIKELY(!__atomic_load_n(&carve_ready, __ATOMIC_ACQUIRE)))
        carve_init_slow();
}
int carve_nvml_init(void); /* resolves libnvidia-ml.so.1 once; 0 when it is absent */

/* The CUDA ordinal of the calling thread's context (0 when the process sees one device). */
extern int carve_device_count;   /* visible CUDA devices; 0 until known */
int carve_current_device_slow(void);
static inline int carve_current_device(void)
{
    if (LIKELY(carve_device_count == 1))
        return 0;
    return carve_current_device_slow();
}

/* --- region.c / binding.c -------------------------------------------------------------------------- */
#define CARVE_MAX_REGIONS 16 /* claim regions one process maps (one per soft claim of its container) */
#define CARVE_DEFAULT_REGION_DIR "/var/run/carve" /* <dir>/<claim-uid>/region, as the plugin mounts them */

/* Where a claim's limits come from (carve_open_region_t.limits_from). */
enum { CARVE_LIMITS_ENV = 0, CARVE_LIMITS_FILE = 1, CARVE_LIMITS_CLOSED = 2 };

/* One claim this process maps: its accounting region (a claim's file, or private memory) and its limits. */
typedef struct carve_open_region {
    carve_region_t *map;
    int shared;          /* 1: a claim's file, shared with the claim's other processes */
    int fd;              /* -1 for private accounting */
    int locks;           /* OFD locks work on this file */
    int slot;            /* this process's slot, -1 when it has none */
    int bound;           /* a visible CUDA device is charged to it: this process takes a slot in it */
    uint64_t refusals;   /* this process's refused allocations here (the first one is logged) */
    /* the region file (no longer path opens), or what logs and diagnostics name instead */
    char path[PATH_MAX];
    /* The limits enforced: a private copy of the plugin's limits file or of the environment's values.
     * Never read from `map`, which the container can write. */
    carve_limits_t limits;
    int limits_from;     /* CARVE_LIMITS_* */
    int trusted;         /* the limits file is on a read-only mount and writable by no one but its owner */
    int closed;          /* the plugin's claim whose region is unusable: nothing may be allocated */
    uint64_t region_dev, region_ino; /* `fd`'s file, to tell it from a file the process reopened at its number */
    uint64_t limits_dev, limits_ino;
    int limits_fd;       /* the limits file applied last, kept open so that its inode number cannot be reused */
    char limits_path[4096];
} carve_open_region_t;

/* What limits one CUDA ordinal of this process. Written once, before carve_bound is published (and again
 * for `mine` at fork and exit); the hot paths only read it. */
typedef struct carve_binding {
    carve_region_device_t *dev;   /* the region device charged for this ordinal; NULL = no limit */
    uint64_t *mine;               /* this process's counter for that device in its slot; NULL without one */
    carve_open_region_t *region;
    int index;                    /* the device's index in its region */
    uint64_t memory_limit;        /* the enforced quota (from region->limits, never from the region file) */
} carve_binding_t;

extern carve_open_region_t carve_regions[CARVE_MAX_REGIONS]; /* files, CARVE_REGION's first when usable */
extern int carve_region_count;
extern carve_open_region_t carve_private;  /* the environment's limits, enforced per process */
extern carve_open_region_t carve_closed;   /* a claim's limits are unusable: nothing may be allocated */
extern int carve_limits_broken;            /* a plugin limits file is missing or malformed: fail closed */
extern carve_open_region_t *carve_primary; /* CARVE_REGION's file, or &carve_private when unset or unusable */
extern carve_binding_t carve_bind[CARVE_MAX_DEVICES];
extern int carve_bound;                    /* 1 once carve_bind is complete (needs an initialised driver) */

void carve_region_setup(const carve_config_t *cfg); /* open CARVE_REGION and every region under the root */
void carve_region_exit(void);        /* release this process's usage and slots */
void carve_region_after_fork(void);  /* child: forget the parent's slots, take new ones */
int carve_region_open(carve_open_region_t *r, const char *path, const carve_config_t *cfg, int create);
void carve_region_private(carve_open_region_t *r, const carve_config_t *cfg);
void carve_region_for_closed(carve_open_region_t *r, const carve_config_t *cfg);
void carve_region_close(carve_open_region_t *r);
void carve_region_join(carve_open_region_t *r); /* take a slot and reclaim the dead (slow path, once) */
int carve_charge_slow(int dev, uint64_t bytes);
extern int carve_exited;             /* the exit handler has given this process's slots back */
void carve_count_late(int dev, uint64_t bytes); /* a charge granted after that: a slot again (binding.c) */
void carve_reclaim_dead(carve_open_region_t *r);
int carve_host_pid_of_slot(const carve_region_t *map, int slot); /* NVML's pid for a slot, 0 when unknown */
/* close(fd) only while it is still the file dev/ino: a process may close every descriptor it did not open (a
 * daemon does) and get the number back for a file of its own, which the limiter must not close under it. */
void carve_close_if_same(int fd, uint64_t dev, uint64_t ino);
int carve_bind_slow(int dev);        /* resolve carve_bind; dev when done, -1 while the driver cannot tell */
int carve_binding_for_uuid(const char *uuid, carve_binding_t *out); /* 1 when a claim limits that GPU */
void carve_bind_after_fork(void);
void carve_uuid_string(const CUuuid *u, char *out, size_t len); /* "GPU-xxxxxxxx-...", as NVML spells it */

/* The ordinal `dev` once every ordinal is mapped to its region device; -1 (no limit) while it cannot be. */
static inline int carve_bind_ordinal(int dev)
{
    if (UNLIKELY(!__atomic_load_n(&carve_bound, __ATOMIC_ACQUIRE)))
        return carve_bind_slow(dev);
    return dev;
}

/* The device an allocation of the calling thread is charged to. */
static inline int carve_alloc_device(void)
{
    return carve_bind_ordinal(carve_current_device());
}

/* A charge granted on `dev` is this process's too: its slot's counter, which the claim takes back when the
 * process is gone. */
static inline void carve_count_mine(int dev, uint64_t bytes)
{
    uint64_t *mine = __atomic_load_n(&carve_bind[dev].mine, __ATOMIC_RELAXED);
    if (LIKELY(mine != NULL))
        __atomic_add_fetch(mine, bytes, __ATOMIC_RELAXED);
    else if (UNLIKELY(__atomic_load_n(&carve_exited, __ATOMIC_ACQUIRE)))
        carve_count_late(dev, bytes);
}

/* Reserve `bytes` on `dev` before allocating: 0 when granted, -1 when over quota (policy applied). */
static inline int carve_charge(int dev, uint64_t bytes)
{
    if (UNLIKELY((unsigned)dev >= CARVE_MAX_DEVICES))
        return 0; /* not a device any region tracks */
    carve_binding_t *b = &carve_bind[dev];
    carve_region_device_t *d = b->dev;
    if (!d)
        return 0;
    uint64_t limit = __atomic_load_n(&b->memory_limit, __ATOMIC_RELAXED);
    uint64_t used = __atomic_load_n(&d->memory_used, __ATOMIC_RELAXED);
    do {
        if (limit && (bytes > limit || used > limit - bytes))
            return carve_charge_slow(dev, bytes);
    } while (!__atomic_compare_exchange_n(&d->memory_used, &used, used + bytes, 1, __ATOMIC_ACQ_REL,
                                          __ATOMIC_RELAXED));
    carve_count_mine(dev, bytes);
    uint64_t now = used + bytes;
    uint64_t peak = __atomic_load_n(&d->memory_peak, __ATOMIC_RELAXED);
    while (now > peak &&
           !__atomic_compare_exchange_n(&d->memory_peak, &peak, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    return 0;
}

/* Subtract without ever going below zero (a counter is never allowed to underflow). */
static inline void carve_sub_clamped(uint64_t *counter, uint64_t bytes)
{
    uint64_t v = __atomic_load_n(counter, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(counter, &v, v > bytes ? v - bytes : 0, 1, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
        ;
}

static inline void carve_uncharge(int dev, uint64_t bytes)
{
    if (UNLIKELY((unsigned)dev >= CARVE_MAX_DEVICES))
        return;
    carve_binding_t *b = &carve_bind[dev];
    if (!b->dev)
        return;
    carve_sub_clamped(&b->dev->memory_used, bytes);
    uint64_t *mine = __atomic_load_n(&b->mine, __ATOMIC_RELAXED);
    if (LIKELY(mine != NULL))
        carve_sub_clamped(mine, bytes);
}

/* --- limits.c ------------------------------------------------------------------------------------- */
/* Read the plugin's limits file: 1 valid, 0 absent (neither the file nor its directory exists), -1 broken
 * (`problem` says why). Opened as untrusted (O_NOFOLLOW|O_NONBLOCK, regular file, exact size). When valid,
 * *fd is the descriptor it was read from (the caller keeps or closes it). */
int carve_limits_read(const char *path, carve_limits_t *out, int *trusted, uint64_t *dev, uint64_t *ino,
                      int *fd, const char **problem);
void carve_limits_from_config(carve_limits_t *l, const carve_config_t *cfg);
void carve_limits_path(const char *region_path, char *out, size_t len); /* <dir of region>/limits/limits */
void carve_limits_refresh(void); /* feedback thread, every tick: apply the plugin's rewrites */

/* --- table.c --------------------------------------------------------------------------------------- */
enum carve_kind { CARVE_KIND_MEM = 1, CARVE_KIND_ARRAY, CARVE_KIND_MIPMAP, CARVE_KIND_VMM, CARVE_KIND_GRAPH };
void carve_track(uint64_t key, int kind, int dev, uint64_t bytes);
int carve_untrack(uint64_t key, int kind, int *dev, uint64_t *bytes); /* 0 when found (and removed) */
int carve_lookup(uint64_t key, int kind, uint64_t *bytes);            /* 0 when found */
void carve_forget_charges(const unsigned char gone[CARVE_MAX_DEVICES]); /* at exit: see table.c */

/* --- throttle.c / feedback.c ----------------------------------------------------------------------- */
enum { CARVE_GATE_IDLE = 0, CARVE_GATE_COUNT = 1, CARVE_GATE_THROTTLE = 2 };
/* IDLE: no compute limit on the device, launches pass untouched; COUNT: limited but bursting (launches are
 * counted so the rate can be calibrated the moment throttling starts); THROTTLE: the token bucket applies. */
typedef struct carve_gate {
    int64_t tokens;      /* launch budget in thread blocks; negative = launches waiting */
    uint64_t launched;   /* blocks launched since the last control tick */
    uint64_t total;      /* blocks launched since start (diagnostics) */
    int mode;            /* CARVE_GATE_IDLE / _COUNT / _THROTTLE, set by the feedback thread */
    int starved;         /* a launch waited since the last control tick */
    char pad[64 - 32];
} carve_gate_t;
extern carve_gate_t carve_gates[CARVE_MAX_DEVICES];
extern int carve_launch_free; /* 1: launches need no gate at all (see throttle.c) */
void carve_launch_free_update(void);
extern int carve_gate_state; /* 0 undecided, 1 off (no compute limit possible), 2 on (feedback thread) */
extern __thread uint64_t carve_thread_launches __attribute__((tls_model("initial-exec"))); /* launches this thread made through the hooks */
void carve_gate_wait(carve_gate_t *g);
int carve_gate_decide(void);
void carve_feedback_after_fork(void);

#endif

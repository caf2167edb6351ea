/*
 * carve_region.h: the two files of one claim.
 *
 *  - The limits (carve_limits_t, <claim dir>/limits/limits): written by the plugin only, atomically, and
 *    mounted read-only into the claim's containers. The limiter enforces these and nothing else: memory
 *    quota, effective compute share, policies, priority, high-priority neighbours, GPU UUIDs.
 *  - The region (carve_region_t, the file named by CARVE_REGION): the usage accounting every process of
 *    the claim maps read-write (memory in use, process slots, measured utilization). The container can
 *    write it, so nothing in it is ever read as a limit; the plugin cross-checks it against NVML.
 *
 * driver/limits/region.py and driver/limits/limitsfile.py mirror these layouts; tests/unit/limits compares
 * offsets and sizes with a compiled probe.
 *
 * Rules:
 *  - Plain fixed-width fields, naturally aligned, no pointers: the layout is the same for every process
 *    and for Python's ctypes mirror. Counters are updated with atomic builtins by the limiter.
 *  - `magic`, `version` and `size` identify the layout. A reader that finds anything else treats the
 *    file as foreign and never writes to it.
 *  - Adding a field means a new version; old limiters fall back to per-process enforcement.
 */
#ifndef CARVE_REGION_H
#define CARVE_REGION_H

#include <stdint.h>

#define CARVE_REGION_MAGIC 0x4745524556524143ULL /* the bytes "CARVEREG" read as a little-endian integer */
#define CARVE_REGION_VERSION 2u /* 2: limits moved to carve_limits_t; the region's copies are informational */
#define CARVE_MAX_DEVICES 16
#define CARVE_MAX_PROCS 1024

/* header.flags */
#define CARVE_REGION_FROM_PLUGIN 1u /* written by the plugin: its limits win over the environment */
#define CARVE_REGION_FROM_ENV 2u    /* created by the first limiter of the claim from its environment */

#define CARVE_LIMITS_MAGIC 0x4d494c4556524143ULL /* "CARVELIM" read as a little-endian integer */
#define CARVE_LIMITS_VERSION 1u

/* proc.pid sentinel while a slot is being claimed or reclaimed */
#define CARVE_SLOT_BUSY (-1)

enum carve_core_policy { CARVE_CORE_DEFAULT = 0, CARVE_CORE_FORCE = 1, CARVE_CORE_DISABLE = 2 };
enum carve_priority { CARVE_PRIORITY_HIGH = 0, CARVE_PRIORITY_LOW = 1 };
enum carve_oom_policy { CARVE_OOM_ERROR = 0, CARVE_OOM_KILL = 1 };

/* One visible device of the claim, by CUDA ordinal inside the container. 128 bytes. */
typedef struct carve_region_device {
    uint64_t memory_limit;    /* bytes; 0 = no memory limit */
    uint64_t memory_used;     /* bytes charged by live processes; the compare-and-swap counter */
    uint64_t memory_peak;     /* high-water mark of memory_used */
    uint64_t oom_refusals;    /* allocations refused over quota, all processes */
    uint32_t cores_limit;     /* percent of the GPU's SMs, 0 = no compute limit; re-read every tick */
    uint32_t high_neighbours; /* high-priority claims sharing this GPU (plugin-written; low priority yields) */
    uint32_t utilization;     /* the claim's SM utilization at the last tick, percent (for metrics) */
    uint32_t target;          /* the share the limiter aimed at during the last tick, percent */
    char uuid[48];            /* "GPU-..." when the plugin knows it (maps NVML handles); else empty */
    uint64_t reserved[4];
} carve_region_device_t;

/* One process of the claim. 160 bytes. */
typedef struct carve_region_proc {
    int32_t pid;              /* 0 = free slot; CARVE_SLOT_BUSY while claimed or reclaimed */
    int32_t host_pid;         /* the pid NVML reports for this process, 0 when unknown */
    uint64_t start_time;      /* /proc/<pid>/stat starttime: a reused pid never inherits usage */
    uint64_t pid_ns;          /* inode of the process's pid namespace (pids compare only within one) */
    uint64_t used[CARVE_MAX_DEVICES]; /* bytes this process holds per device */
    uint64_t reserved;
} carve_region_proc_t;

typedef struct carve_region {
    uint64_t magic;
    uint32_t version;
    uint32_t flags;           /* CARVE_REGION_FROM_* */
    uint64_t size;            /* sizeof(carve_region_t): a file of another size is foreign */
    uint32_t device_count;
    uint32_t max_procs;
    uint32_t core_policy;     /* enum carve_core_policy */
    uint32_t priority;        /* enum carve_priority */
    uint32_t oom_policy;      /* enum carve_oom_policy */
    uint32_t reserved0;
    uint64_t generation;      /* bumped by the plugin whenever it changes a limit */
    uint64_t reserved[8];
    carve_region_device_t devices[CARVE_MAX_DEVICES];
    carve_region_proc_t procs[CARVE_MAX_PROCS];
} carve_region_t;

/* The limits of one device of the claim, as the plugin decided them. 104 bytes. */
typedef struct carve_limits_device {
    uint64_t memory_limit;    /* bytes; 0 = no memory limit */
    uint32_t cores_limit;     /* effective compute share, percent; 0 = no compute limit. For a claim that
                               * reserved cores this is its reservation; for one that did not, what the
                               * GPU's reservations leave (never 0 while another claim reserved cores) */
    uint32_t cores_reserved;  /* what the claim reserved, percent; 0 = best effort (informational) */
    uint32_t high_neighbours; /* high-priority claims sharing this GPU (a low-priority claim yields) */
    uint32_t reserved0;
    char uuid[48];            /* the GPU's UUID, "GPU-..." (binds CUDA ordinals and NVML handles) */
    uint64_t reserved[4];
} carve_limits_device_t;

typedef struct carve_limits {
    uint64_t magic;
    uint32_t version;
    uint32_t flags;           /* 0 */
    uint64_t size;            /* sizeof(carve_limits_t) */
    uint32_t device_count;
    uint32_t core_policy;     /* enum carve_core_policy */
    uint32_t priority;        /* enum carve_priority */
    uint32_t oom_policy;      /* enum carve_oom_policy */
    uint64_t generation;      /* bumped by the plugin at every rewrite */
    uint64_t reserved[4];
    carve_limits_device_t devices[CARVE_MAX_DEVICES];
} carve_limits_t;

#endif

/*
 * fakestate.h: private layout of the fake GPUs' shared state (CARVE_FAKE_STATE) and helpers used by
 * the sources in fakes/common and the fake NVML. Not part of the contract in fakegpu.h: only code that links
 * fakes/common may include it, and every field is accessed under fake_state_locked().
 *
 * The file is a fixed-layout struct (no pointers), mapped MAP_SHARED by every process that uses the same
 * path. Bump FAKE_STATE_VERSION whenever the layout changes: an old file is then re-initialised.
 */
#ifndef CARVE_FAKESTATE_H
#define CARVE_FAKESTATE_H

#include <stdint.h>
#include <sys/types.h>

#include "fakegpu.h"

#define FAKE_STATE_MAGIC 0x45565243u /* "CRVE" little-endian */
#define FAKE_STATE_VERSION 4u /* 2: partitions per cgroup, proc slot cgroup; 3: canonical path; 4: slot locks */
#define FAKE_MAX_CI 8
#define FAKE_MAX_PARTS 64 /* memory partitions (cgroups with limits) per GPU */
#define FAKE_CGROUP_PATH_MAX 256

/* Every non-static function in fakes/common is exported (FAKE_EXPORT), never hidden: when both fake
 * libraries are loaded in one process, the dynamic linker binds all their common calls to the first one
 * loaded, so both see one topology and one state. A hidden common function would bind locally and read
 * the other copy's statics. */                /* compute instances per GPU instance */

typedef struct fake_proc_slot {
    int32_t pid;              /* 0 = free */
    uint32_t reserved;
    uint64_t pidns;           /* inode of the owner's pid namespace: liveness is only checkable there */
    uint64_t mem_bytes;
    uint64_t last_kernel_end; /* fake_now_ns of the end of its last kernel */
    uint64_t cgroup;          /* inode of the process's cgroup v2 directory (0: unknown): its partition */
} fake_proc_slot_t;

/* A driver memory partition (nvmlDeviceSetMemoryLimits_v1): limits of one cgroup v2 directory on a GPU.
 * `cgroup` is the directory's inode (kernfs node id), the same whatever mount or cgroup namespace a
 * process sees it through, so a container (cgroupns: its /proc/self/cgroup reads "0::/") finds its own;
 * `canon` is the directory's path in the initial cgroup namespace, for a process that sees no cgroup2 mount
 * (a container on a hybrid host: its /proc/self/cgroup reads that path). */
typedef struct fake_partition {
    uint64_t cgroup;          /* 0 = free slot */
    uint64_t soft, hard;      /* bytes; hard NVML_DEVICE_MEMORY_LIMIT_MAX = none */
    char path[FAKE_CGROUP_PATH_MAX];  /* the nameSpace given to Set */
    char canon[FAKE_CGROUP_PATH_MAX]; /* its "0::" path in the initial cgroup namespace, "" when unknown */
} fake_partition_t;

typedef struct fake_kernel_rec {
    int32_t pid;
    uint32_t slot;            /* 1 + the submitter's index in procs (0: none), to name it in another namespace */
    uint64_t pidns;           /* the submitter's pid namespace: `pid` means nothing without it */
    uint64_t start_ns, end_ns;
} fake_kernel_rec_t;

typedef struct fake_ci {
    uint32_t in_use;
    uint32_t id;              /* compute instance id within its GPU instance */
    uint32_t profile_id;      /* NVML_COMPUTE_INSTANCE_PROFILE_* id */
    uint32_t start, size;     /* placement in compute slices of the GPU instance */
} fake_ci_t;

struct fake_gpu_state {
    char model_key[32];       /* the model this slot was initialised for; a mismatch resets the slot */
    uint32_t mig_current, mig_pending;
    fake_mig_instance_t gi[FAKE_MAX_MIG];
    fake_ci_t ci[FAKE_MAX_MIG][FAKE_MAX_CI];
    uint64_t busy_until_ns;   /* end of the last queued kernel */
    uint32_t ring_next;       /* next write position in ring */
    uint32_t ring_count;      /* valid entries (<= FAKE_KERNEL_RING) */
    fake_proc_slot_t procs[FAKE_MAX_PROCS];
    fake_partition_t parts[FAKE_MAX_PARTS];
    fake_kernel_rec_t ring[FAKE_KERNEL_RING];
};

typedef struct fake_state_file {
    uint32_t magic;
    uint32_t version;
    uint64_t size;            /* sizeof(fake_state_file_t): guards against a layout change without a bump */
    char boot_id[40];         /* kernel boot id when last opened: a change means the node rebooted */
    struct fake_gpu_state gpus[FAKE_MAX_GPUS];
} fake_state_file_t;

/* Opens (or creates) the state once per process. 0, or -1 with *err set to a static message. Functions
 * of fakegpu.h call it lazily; on failure they fall back to process-local state and warn once. */


/* Slot of `pid` on `st` (created when `create`), NULL when absent or the table is full. Sweeps dead pids
 * when it needs room. Caller holds the GPU's lock. */
FAKE_EXPORT fake_proc_slot_t *fake_proc_slot(struct fake_gpu_state *st, pid_t pid, int create);
/* The calling process's cgroup id (its directory's inode; through `st`'s partitions when only its path is
 * known), 0 when unknown. Caller holds the lock. */
FAKE_EXPORT uint64_t fake_self_cgroup(struct fake_gpu_state *st);
/* The path in the initial cgroup namespace of cgroup directory `dir` (as this process names it); 0, or -1
 * when it is under no cgroup2 mount this process sees or the namespace's root cannot be named. */
FAKE_EXPORT int fake_cgroup_canonical(const char *dir, char *out, size_t len);
/* The partition of cgroup inode `cgroup` on `st`, NULL when it has none. Caller holds the lock. */
FAKE_EXPORT fake_partition_t *fake_partition_of(struct fake_gpu_state *st, uint64_t cgroup);
/* Bytes held by the processes of cgroup inode `cgroup` on `st`. Caller holds the lock. */
FAKE_EXPORT uint64_t fake_partition_used(struct fake_gpu_state *st, uint64_t cgroup);
/* Forget processes that no longer exist, of any pid namespace (another's through its slot lock). Caller
 * holds the lock. */
FAKE_EXPORT void fake_proc_sweep(struct fake_gpu_state *st);
/* The pid of slot `p`'s owner in this process's pid namespace: 0 when it lives but has none here, -1 when
 * it is gone. Caller holds the lock. */
FAKE_EXPORT pid_t fake_proc_visible_pid(struct fake_gpu_state *st, const fake_proc_slot_t *p);
/* The pid a kernel record's submitter has in this process's pid namespace; 0 when it has none here (a
 * process of another namespace that is gone, or invisible from here). Caller holds the lock. */
FAKE_EXPORT pid_t fake_kernel_rec_pid(struct fake_gpu_state *st, const fake_kernel_rec_t *r);
/* The inode of this process's pid namespace. */
FAKE_EXPORT uint64_t fake_self_pidns(void);
/* Empty slot `p` (this process's own: its lock is released too). Caller holds the lock. */
FAKE_EXPORT void fake_proc_free(struct fake_gpu_state *st, fake_proc_slot_t *p);

/* Writes a message to stderr once per process per `key` (a small integer < 32). */
FAKE_EXPORT void fake_warn_once(unsigned key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

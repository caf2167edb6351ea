/*
 * fakegpu.h: the emulated GPUs shared by the fake libnvidia-ml.so.1 and the fake libcuda.so.1.
 *
 * Both fake libraries link the sources in fakes/common, so they see the same topology (CARVE_FAKE_GPUS) and the
 * same shared state (CARVE_FAKE_STATE: an mmap'ed file, or process-local memory when unset). The state
 * holds what real hardware would keep across processes: MIG mode and instances, device memory in use
 * per process, and the kernel-occupancy timeline that NVML's utilization functions report.
 *
 * Environment:
 *   CARVE_FAKE_GPUS   "2xA100-80GB,1xT4" (default "1xA100-80GB")
 *   CARVE_FAKE_SEED   seeds UUIDs and PCI bus ids (default: $NODE_NAME, else the host name)
 *   CARVE_FAKE_STATE  path of the shared state file (created 0600 when missing); unset = process-local
 *   CARVE_FAKE_DRIVER_VERSION / CARVE_FAKE_CUDA_VERSION  override "580.95.05" / 13000
 */
#ifndef CARVE_FAKEGPU_H
#define CARVE_FAKEGPU_H

#include <stdint.h>
#include <sys/types.h>

#define FAKE_MAX_GPUS 16
#define FAKE_MAX_PROCS 64     /* processes tracked per GPU (memory and utilization) */
#define FAKE_MAX_MIG 8        /* GPU instances per GPU */
#define FAKE_KERNEL_RING 4096 /* recent kernel executions kept per GPU for utilization */

#define FAKE_EXPORT __attribute__((visibility("default")))

typedef struct fake_model {
    const char *key;          /* "A100-80GB": the token in CARVE_FAKE_GPUS */
    const char *name;         /* nvmlDeviceGetName: "NVIDIA A100-SXM4-80GB" */
    uint64_t memory_bytes;
    unsigned multiprocessors;
    int cc_major, cc_minor;
    unsigned architecture;    /* NVML_DEVICE_ARCH_* */
    int mig_capable;
    unsigned pci_device_id;   /* PCI device id << 16 | 0x10de */
    const char *mig_table;    /* key into the MIG tables (NULL when not MIG capable) */
} fake_model_t;

typedef struct fake_gpu {
    unsigned index;
    unsigned minor;
    const fake_model_t *model;
    char uuid[80];            /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", deterministic from seed+index */
    char pci_bus_id[32];      /* "00000000:3B:00.0" (NVML's 8-digit domain form) */
} fake_gpu_t;

/* Topology, parsed once per process (thread-safe). Returns 0, or -1 with *err set to a static message. */
int fake_topology(const fake_gpu_t **gpus, unsigned *count, const char **err);
const fake_model_t *fake_model_find(const char *key);
/* The i-th known model (NULL past the end), for listings and error messages. */
const fake_model_t *fake_model_at(unsigned i);
/* Opens the shared state (called lazily by everything below). 0, or -1 with *err set to a static message;
 * after a failure the functions below use process-local state (a warning is printed once). */
int fake_state_init(const char **err);

/* Monotonic clock in ns; the fake GPUs' notion of time. */
uint64_t fake_now_ns(void);

/* --- Device memory (what cuMemAlloc takes and nvmlDeviceGetMemoryInfo reports) ------------------- */
/* Charge `bytes` to `pid` on GPU `gpu`; -1 when the GPU's fake memory is exhausted. */
int fake_mem_reserve(unsigned gpu, pid_t pid, uint64_t bytes);
void fake_mem_release(unsigned gpu, pid_t pid, uint64_t bytes);
uint64_t fake_mem_used(unsigned gpu);
/* What the driver keeps for itself on `gpu` ($CARVE_FAKE_RESERVED_MIB, default 0): never allocatable. */
uint64_t fake_mem_reserved(unsigned gpu);
/* Processes with memory on a GPU (for nvmlDeviceGetComputeRunningProcesses); returns the count. */
unsigned fake_mem_processes(unsigned gpu, pid_t *pids, uint64_t *used, unsigned max);

/* --- Driver memory partitions (cgroup v2; nvmlDeviceSetMemoryLimits_v1) ------------------------------
 * A process's own cgroup is "0::<path>" of /proc/self/cgroup (or $CARVE_FAKE_CGROUP, a test's stand-in for
 * moving a process into a cgroup), found under a cgroup2 mount it sees ($CARVE_FAKE_CGROUP_FS: a stand-in
 * root instead), or by its path in the initial cgroup namespace where it sees none (common/cgroup.c). */
/* The partition of the calling process on `gpu`: 1 with its hard limit and use, 0 when it has none. */
int fake_mem_partition(unsigned gpu, uint64_t *hard, uint64_t *used);

/* --- Kernel time model ---------------------------------------------------------------------------
 * A launch occupies the GPU for a time proportional to its grid: ceil(blocks / SMs) waves of
 * `ns_per_wave` each. Kernels on one GPU run one after another (a single hardware queue shared by all
 * processes). Returns the completion time (fake_now_ns clock). */
uint64_t fake_kernel_submit(unsigned gpu, pid_t pid, uint64_t blocks, uint64_t ns_per_wave);
/* Completion time of the last kernel submitted by `pid` on `gpu` (0 when none). */
uint64_t fake_kernel_last_end(unsigned gpu, pid_t pid);
/* Busy fraction (0..100) of GPU `gpu` over [since_ns, now], all processes; for one pid when pid > 0. */
unsigned fake_utilization(unsigned gpu, pid_t pid, uint64_t since_ns);

/* --- MIG state (owned by the fake NVML; here so the state file has one layout) --------------------- */
typedef struct fake_mig_instance {
    int in_use;
    unsigned profile_id;
    unsigned start, size;      /* placement in memory slices */
    unsigned gi_id, ci_id;     /* ci_id valid when has_ci */
    int has_ci;
    unsigned ci_profile_id;
} fake_mig_instance_t;

/* Run `fn(arg, state_of_gpu)` under the state file's lock; returns fn's result. */
typedef struct fake_gpu_state fake_gpu_state_t;
int fake_state_locked(unsigned gpu, int (*fn)(void *arg, fake_gpu_state_t *st), void *arg);

#endif

/*
 * memory.c: device memory accounting of the fake GPUs, per process.
 *
 * What cuMemAlloc takes (fake libcuda) is what nvmlDeviceGetMemoryInfo and
 * nvmlDeviceGetComputeRunningProcesses report (fake NVML), across processes when the state is shared.
 * Memory of a process that no longer exists is forgotten, as the driver frees it on exit.
 */
#include <stdlib.h>
#include <string.h>

#include "fakestate.h"

#define MIB (1024ull * 1024ull)

struct mem_op {
    unsigned gpu;
    pid_t pid;
    uint64_t bytes;
    uint64_t result;
    pid_t *pids;
    uint64_t *used;
    unsigned max;
};

static uint64_t total_of(unsigned gpu)
{
    const fake_gpu_t *gpus;
    unsigned n;
    if (fake_topology(&gpus, &n, NULL) != 0 || gpu >= n)
        return 0;
    return gpus[gpu].model->memory_bytes;
}

/* $CARVE_FAKE_RESERVED_MIB, read once per process: the memory the driver sets aside on each GPU for itself
 * (nvml.h: v1's `used` includes it, v2 reports it as `reserved`; nothing can allocate it). A real driver
 * reserves some hundreds of MiB; the fake reserves none unless told, so totals stay round in tests. */
static uint64_t reserved_bytes(void)
{
    static int64_t cached = -1; /* a benign race: every thread computes the same value */
    int64_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *env = getenv("CARVE_FAKE_RESERVED_MIB");
        char *end = NULL;
        unsigned long long mib = env && *env ? strtoull(env, &end, 10) : 0;
        v = (end && *end) || mib > (1ull << 30) ? 0 : (int64_t)(mib * MIB);
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return (uint64_t)v;
}

FAKE_EXPORT uint64_t fake_mem_reserved(unsigned gpu)
{
    uint64_t total = total_of(gpu), r = reserved_bytes();
    return r < total ? r : total;
}

static uint64_t sum_used(struct fake_gpu_state *st)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < FAKE_MAX_PROCS; i++)
        if (st->procs[i].pid)
            sum += st->procs[i].mem_bytes;
    return sum;
}

static int do_reserve(void *arg, fake_gpu_state_t *st)
{
    struct mem_op *op = arg;
    uint64_t total = total_of(op->gpu) - fake_mem_reserved(op->gpu); /* the driver's own is not handed out */
    if (sum_used(st) + op->bytes > total) {
        fake_proc_sweep(st); /* a killed process may still hold what we need */
        if (sum_used(st) + op->bytes > total)
            return -1;
    }
    fake_proc_slot_t *p = fake_proc_slot(st, op->pid, 1);
    if (!p)
        return -1;
    /* The driver's partition: what the processes of the caller's cgroup hold together stays within its
     * hard limit, whatever library the caller loaded (the check is in the driver, not in an interposer). */
    const fake_partition_t *part = fake_partition_of(st, p->cgroup);
    if (part && fake_partition_used(st, p->cgroup) + op->bytes > part->hard) {
        fake_proc_sweep(st);
        if (fake_partition_used(st, p->cgroup) + op->bytes > part->hard) {
            if (!p->mem_bytes && p->last_kernel_end <= fake_now_ns())
                fake_proc_free(st, p);
            return -1;
        }
    }
    p->mem_bytes += op->bytes;
    return 0;
}

FAKE_EXPORT int fake_mem_reserve(unsigned gpu, pid_t pid, uint64_t bytes)
{
    struct mem_op op = {.gpu = gpu, .pid = pid, .bytes = bytes};
    return fake_state_locked(gpu, do_reserve, &op) == 0 ? 0 : -1;
}

static int do_release(void *arg, fake_gpu_state_t *st)
{
    struct mem_op *op = arg;
    fake_proc_slot_t *p = fake_proc_slot(st, op->pid, 0);
    if (!p)
        return 0;
    p->mem_bytes -= op->bytes < p->mem_bytes ? op->bytes : p->mem_bytes;
    if (!p->mem_bytes && p->last_kernel_end <= fake_now_ns())
        fake_proc_free(st, p); /* nothing left to report for it */
    return 0;
}

FAKE_EXPORT void fake_mem_release(unsigned gpu, pid_t pid, uint64_t bytes)
{
    struct mem_op op = {.gpu = gpu, .pid = pid, .bytes = bytes};
    fake_state_locked(gpu, do_release, &op);
}

static int do_used(void *arg, fake_gpu_state_t *st)
{
    struct mem_op *op = arg;
    fake_proc_sweep(st);
    op->result = sum_used(st);
    return 0;
}

FAKE_EXPORT uint64_t fake_mem_used(unsigned gpu)
{
    struct mem_op op = {.gpu = gpu};
    return fake_state_locked(gpu, do_used, &op) == 0 ? op.result : 0;
}

static int do_processes(void *arg, fake_gpu_state_t *st)
{
    struct mem_op *op = arg;
    unsigned n = 0;
    fake_proc_sweep(st);
    for (unsigned i = 0; i < FAKE_MAX_PROCS; i++) {
        const fake_proc_slot_t *p = &st->procs[i];
        if (!p->pid || !p->mem_bytes)
            continue;
        /* NVML names processes as the caller's pid namespace does (the host's pid for a container's
         * process); one that lives in a namespace invisible from here keeps the pid it gave itself. */
        pid_t visible = fake_proc_visible_pid(st, p);
        if (n < op->max) {
            if (op->pids)
                op->pids[n] = visible > 0 ? visible : p->pid;
            if (op->used)
                op->used[n] = p->mem_bytes;
        }
        n++;
    }
    op->result = n;
    return 0;
}

/* Returns the number of processes with memory on the GPU, which may exceed `max` (only `max` are written):
 * NVML's INSUFFICIENT_SIZE protocol needs the full count. */
FAKE_EXPORT unsigned fake_mem_processes(unsigned gpu, pid_t *pids, uint64_t *used, unsigned max)
{
    struct mem_op op = {.gpu = gpu, .pids = pids, .used = used, .max = max};
    return fake_state_locked(gpu, do_processes, &op) == 0 ? (unsigned)op.result : 0;
}

/*
 * process.c: processes and utilization of the fake NVML, from the shared state the fake libcuda writes.
 *
 * Running processes are those holding fake device memory; utilization is the share of a window that the
 * GPU spent running kernels (fakes/common/kernels.c), for the whole GPU or per process. Process samples
 * carry wall-clock microseconds, as NVML's do, so callers can pass time.time() based lastSeenTimeStamp.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvmlfake.h"

#define UTIL_WINDOW_NS 1000000000ull /* NVML averages over a sample period of up to a second */

static nvmlReturn_t running(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    const fake_gpu_t *g = fake_nvml_gpu(device);
    if (!g || !infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    pid_t pids[FAKE_MAX_PROCS];
    uint64_t used[FAKE_MAX_PROCS];
    /* Memory is accounted per GPU, not per MIG device: a MIG device lists no processes. */
    unsigned n = device->is_mig ? 0 : fake_mem_processes(g->index, pids, used, FAKE_MAX_PROCS);
    if (n > FAKE_MAX_PROCS)
        n = FAKE_MAX_PROCS;
    if (n > *infoCount || (n && !infos)) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) {
        infos[i].pid = (unsigned)pids[i];
        infos[i].usedGpuMemory = used[i];
        infos[i].gpuInstanceId = 0xFFFFFFFFu;
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *infoCount = n;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_t *infos)
{
    return running(device, infoCount, infos);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_v2_t *infos)
{
    return running(device, infoCount, infos);
}

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    const fake_gpu_t *g = fake_nvml_gpu(device);
    if (!g || !utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (device->is_mig)
        return NVML_ERROR_NOT_SUPPORTED; /* as on real MIG devices */
    uint64_t now = fake_now_ns();
    utilization->gpu = fake_utilization(g->index, 0, now > UTIL_WINDOW_NS ? now - UTIL_WINDOW_NS : 0);
    utilization->memory = 0; /* memory-bandwidth activity is not modelled */
    return NVML_SUCCESS;
}

struct util_op {
    uint64_t since, now;
    unsigned n;
    pid_t pids[FAKE_MAX_PROCS];
    uint64_t busy[FAKE_MAX_PROCS];
};

/* Busy time per pid over [since, now], from the kernel ring (newest first, no overlaps). */
static int do_sample(void *arg, fake_gpu_state_t *st)
{
    struct util_op *op = arg;
    for (uint32_t k = 0; k < st->ring_count; k++) {
        const fake_kernel_rec_t *r = &st->ring[(st->ring_next + FAKE_KERNEL_RING - 1 - k) % FAKE_KERNEL_RING];
        if (r->end_ns <= op->since)
            break;
        uint64_t s = r->start_ns > op->since ? r->start_ns : op->since;
        uint64_t e = r->end_ns < op->now ? r->end_ns : op->now;
        if (e <= s)
            continue; /* queued, not started yet */
        pid_t pid = fake_kernel_rec_pid(st, r); /* the host's pid for a container's process, as NVML's */
        if (!pid)
            continue;
        unsigned i = 0;
        while (i < op->n && op->pids[i] != pid)
            i++;
        if (i == op->n) {
            if (op->n == FAKE_MAX_PROCS)
                continue;
            op->pids[op->n] = pid;
            op->busy[op->n++] = 0;
        }
        op->busy[i] += e - s;
    }
    return 0;
}

static uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000u;
}

#define FIXED_MAX 64

/* CARVE_FAKE_UTIL_FILE: lines `<gpu index> <pid> <smUtil>`, returned for that GPU in their order instead of the
 * modelled samples, read at every call. A real driver may return several samples of one pid, in any order of
 * pids; the model gives one per pid, so a test of how a caller reads such a list names it here. Returns how
 * many lines name `index` (0: the file is unset, unreadable or names another GPU: the model answers). */
static unsigned fixed_samples(unsigned int index, unsigned *pids, unsigned *utils)
{
    const char *path = getenv("CARVE_FAKE_UTIL_FILE");
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    if (!f)
        return 0;
    unsigned n = 0, gpu, pid, util;
    while (n < FIXED_MAX && fscanf(f, " %u %u %u", &gpu, &pid, &util) == 3) {
        if (gpu != index)
            continue;
        pids[n] = pid;
        utils[n++] = util;
    }
    fclose(f);
    return n;
}

NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                                      unsigned int *processSamplesCount,
                                                      unsigned long long lastSeenTimeStamp)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    const fake_gpu_t *g = fake_nvml_gpu(device);
    if (!g || !processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (device->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned fixed_pids[FIXED_MAX], fixed_utils[FIXED_MAX];
    unsigned fixed = fixed_samples(g->index, fixed_pids, fixed_utils);
    if (fixed) {
        if (!utilization || *processSamplesCount < fixed) {
            *processSamplesCount = fixed;
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        for (unsigned i = 0; i < fixed; i++) {
            memset(&utilization[i], 0, sizeof utilization[i]);
            utilization[i].pid = fixed_pids[i];
            utilization[i].timeStamp = wall_us();
            utilization[i].smUtil = fixed_utils[i];
        }
        *processSamplesCount = fixed;
        return NVML_SUCCESS;
    }
    struct util_op op = {.now = fake_now_ns()};
    uint64_t wall = wall_us();
    /* lastSeenTimeStamp is wall-clock us: map it onto the monotonic kernel clock, at most a window back. */
    uint64_t back = lastSeenTimeStamp && lastSeenTimeStamp < wall ? (wall - lastSeenTimeStamp) * 1000ull
                                                                   : UTIL_WINDOW_NS;
    if (back > UTIL_WINDOW_NS)
        back = UTIL_WINDOW_NS;
    if (lastSeenTimeStamp >= wall)
        back = 0;
    op.since = op.now > back ? op.now - back : 0;
    if (op.now > op.since && fake_state_locked(g->index, do_sample, &op) != 0)
        return NVML_ERROR_UNKNOWN;
    if (op.n == 0)
        return NVML_ERROR_NOT_FOUND; /* no samples since lastSeenTimeStamp */
    if (!utilization || *processSamplesCount < op.n) {
        *processSamplesCount = op.n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    uint64_t window = op.now - op.since;
    for (unsigned i = 0; i < op.n; i++) {
        memset(&utilization[i], 0, sizeof utilization[i]);
        utilization[i].pid = (unsigned)op.pids[i];
        utilization[i].timeStamp = wall;
        uint64_t pct = (op.busy[i] * 100 + window / 2) / window;
        utilization[i].smUtil = pct > 100 ? 100 : (unsigned)pct;
    }
    *processSamplesCount = op.n;
    return NVML_SUCCESS;
}

/*
 * events.c: NVML's event API (nvml.h "Event Handling Methods") and the memory-health queries, for the
 * plugin's health monitor.
 *
 * Injection: a test appends lines "<gpu index> <xid>" to the file named by CARVE_FAKE_XID_FILE. Each event
 * set reads that file from its own offset as it grows, as a real set only sees what happens after it was
 * registered: the offset starts at the file's size when the first device is registered. A line for a GPU
 * the set has registered for nvmlEventTypeXidCriticalError becomes one event (eventData = the XID, GPU and
 * compute instance ids 0xFFFFFFFF: not attributable to a MIG instance); other lines are skipped. A
 * malformed or incomplete line is skipped too (an incomplete one is read again once its newline arrives).
 *
 * A registered GPU listed in CARVE_FAKE_LOST_FILE makes nvmlEventSetWait_v2 answer
 * NVML_ERROR_GPU_IS_LOST, as the real call does for a GPU that fell off the bus.
 *
 * Pages pending: the GPU indexes listed in CARVE_FAKE_PAGES_FILE have a pending retirement (pre-Ampere:
 * nvmlDeviceGetRetiredPagesPendingStatus) or a pending row remapping (Ampere and newer:
 * nvmlDeviceGetRemappedRows, which has replaced page retirement there; the other call is NOT_SUPPORTED).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "nvmlfake.h"

#define FAKE_EVENT_SETS 32
#define FAKE_LINE_MAX 64
#define NOT_ATTRIBUTABLE 0xFFFFFFFFu
#define SUPPORTED_EVENTS                                                                                      \
    (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState |                  \
     nvmlEventTypeXidCriticalError | nvmlEventTypeClock)

struct nvmlEventSet_st {
    int in_use;
    int started;                           /* offset set: the first device was registered */
    long offset;                           /* how far CARVE_FAKE_XID_FILE was read */
    unsigned long long mask[FAKE_MAX_GPUS]; /* registered event types per GPU */
};

static struct nvmlEventSet_st g_sets[FAKE_EVENT_SETS];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static struct nvmlEventSet_st *set_of(nvmlEventSet_t set)
{
    for (unsigned i = 0; i < FAKE_EVENT_SETS; i++)
        if (set == &g_sets[i] && g_sets[i].in_use)
            return &g_sets[i];
    return NULL;
}

static long xid_file_size(void)
{
    const char *path = getenv("CARVE_FAKE_XID_FILE");
    struct stat st;
    if (!path || !*path || stat(path, &st) != 0)
        return 0;
    return (long)st.st_size;
}

NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&g_lock);
    for (unsigned i = 0; i < FAKE_EVENT_SETS; i++) {
        if (!g_sets[i].in_use) {
            memset(&g_sets[i], 0, sizeof g_sets[i]);
            g_sets[i].in_use = 1;
            *set = &g_sets[i];
            pthread_mutex_unlock(&g_lock);
            return NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return NVML_ERROR_MEMORY;
}

NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_lock);
    struct nvmlEventSet_st *s = set_of(set);
    if (s)
        s->in_use = 0;
    pthread_mutex_unlock(&g_lock);
    return s ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    const fake_gpu_t *g = fake_nvml_gpu(device);
    if (!g || !eventTypes)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fake_nvml_gpu_lost(g->index))
        return NVML_ERROR_GPU_IS_LOST;
    *eventTypes = SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                               nvmlEventSet_t set)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    const fake_gpu_t *g = fake_nvml_gpu(device);
    if (!g || device->is_mig) /* per-instance registration is not supported (nvml.h) */
        return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~(unsigned long long)nvmlEventTypeAll)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fake_nvml_gpu_lost(g->index))
        return NVML_ERROR_GPU_IS_LOST;
    if (eventTypes & ~(unsigned long long)SUPPORTED_EVENTS)
        return NVML_ERROR_NOT_SUPPORTED; /* none registered, the set stays usable */
    pthread_mutex_lock(&g_lock);
    struct nvmlEventSet_st *s = set_of(set);
    if (s) {
        if (!s->started) {
            s->offset = xid_file_size();
            s->started = 1;
        }
        s->mask[g->index] |= eventTypes;
    }
    pthread_mutex_unlock(&g_lock);
    return s ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* The next event of `s` from the XID file, advancing its offset past what was read. 1 when `data` got one. */
static int next_xid(struct nvmlEventSet_st *s, nvmlEventData_t *data)
{
    const char *path = getenv("CARVE_FAKE_XID_FILE");
    if (!path || !*path || !s->started)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (fseek(f, s->offset, SEEK_SET) != 0) {
        fclose(f);
        return 0;
    }
    char line[FAKE_LINE_MAX];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (line[n - 1] != '\n') {
            if (n == sizeof line - 1) { /* an overlong line: skip the rest of it */
                s->offset += (long)n;
                int c;
                while ((c = fgetc(f)) != EOF && c != '\n')
                    s->offset++;
                if (c == '\n')
                    s->offset++;
                continue;
            }
            break; /* incomplete: read again once the writer finishes it */
        }
        s->offset += (long)n;
        unsigned gpu;
        unsigned long long xid;
        char extra;
        if (sscanf(line, " %u %llu %c", &gpu, &xid, &extra) != 2 || gpu >= FAKE_MAX_GPUS)
            continue;
        if (!(s->mask[gpu] & nvmlEventTypeXidCriticalError))
            continue;
        memset(data, 0, sizeof *data);
        data->device = fake_nvml_device(gpu);
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData = xid;
        data->gpuInstanceId = NOT_ATTRIBUTABLE;
        data->computeInstanceId = NOT_ATTRIBUTABLE;
        found = 1;
    }
    fclose(f);
    return found;
}

static int any_registered_lost(const struct nvmlEventSet_st *s)
{
    for (unsigned i = 0; i < FAKE_MAX_GPUS; i++)
        if (s->mask[i] && fake_nvml_gpu_lost(i))
            return 1;
    return 0;
}

NVML_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!data)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t deadline = fake_now_ns() + (uint64_t)timeoutms * 1000000ull;
    for (;;) {
        pthread_mutex_lock(&g_lock);
        struct nvmlEventSet_st *s = set_of(set);
        int got = 0, lost = 0;
        if (s) {
            got = next_xid(s, data);
            lost = !got && any_registered_lost(s);
        }
        pthread_mutex_unlock(&g_lock);
        if (!s)
            return NVML_ERROR_INVALID_ARGUMENT;
        if (got)
            return NVML_SUCCESS;
        if (lost)
            return NVML_ERROR_GPU_IS_LOST;
        uint64_t now = fake_now_ns();
        if (now >= deadline)
            return NVML_ERROR_TIMEOUT;
        uint64_t step = deadline - now < 20000000ull ? deadline - now : 20000000ull; /* poll every 20 ms */
        struct timespec ts = {(time_t)(step / 1000000000ull), (long)(step % 1000000000ull)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
}

static int pages_pending(unsigned index)
{
    return fake_nvml_index_listed("CARVE_FAKE_PAGES_FILE", index);
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    const fake_gpu_t *g = fake_nvml_gpu(device);
    if (!g || device->is_mig || !isPending)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fake_nvml_gpu_lost(g->index))
        return NVML_ERROR_GPU_IS_LOST;
    if (g->model->architecture >= NVML_DEVICE_ARCH_AMPERE)
        return NVML_ERROR_NOT_SUPPORTED; /* row remapping instead */
    *isPending = pages_pending(g->index) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                               unsigned int *isPending, unsigned int *failureOccurred)
{
    nvmlReturn_t rc = fake_nvml_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    const fake_gpu_t *g = fake_nvml_gpu(device);
    if (!g || device->is_mig || !corrRows || !uncRows || !isPending || !failureOccurred)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fake_nvml_gpu_lost(g->index))
        return NVML_ERROR_GPU_IS_LOST;
    if (g->model->architecture < NVML_DEVICE_ARCH_AMPERE)
        return NVML_ERROR_NOT_SUPPORTED;
    int pending = pages_pending(g->index);
    *corrRows = 0;
    *uncRows = pending ? 1 : 0; /* an uncorrectable error is what leaves a remapping pending */
    *isPending = pending ? 1 : 0;
    *failureOccurred = 0;
    return NVML_SUCCESS;
}

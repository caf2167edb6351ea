/*
 * mps.c (fake libcuda): the MPS client side. cuInit connects to the control daemon at
 * $CUDA_MPS_PIPE_DIRECTORY/control (default /tmp/nvidia-mps; the fake daemon is fakes/mps/control.c) and
 * registers as a client; the connection stays open for the life of the process, so the daemon knows its
 * clients. A client of a live daemon runs under its server with
 *   - an active thread percentage: min(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, the daemon's default); kernels
 *     take 100/pct times as many waves, as on fewer SMs;
 *   - a pinned device memory limit per device ordinal: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=4G,1=512M"),
 *     else the daemon's default; an allocation that would take the process past it fails with
 *     CUDA_ERROR_OUT_OF_MEMORY.
 * No daemon: no MPS, as with CUDA (fail-open). A daemon whose server belongs to another user with live
 * clients answers "wait": cuInit retries for CARVE_FAKE_MPS_WAIT_MS (default 5000) and then fails with
 * CUDA_ERROR_MPS_SERVER_NOT_READY (the real client blocks until the other user's clients are gone).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda.h"

static int g_mps;                                /* a client of a live server */
static int g_fd = -1;
static unsigned g_pct = 100;
static uint64_t g_pinned[FAKE_MAX_GPUS];         /* per ordinal; 0 = no limit */
static uint64_t g_used[FAKE_MAX_GPUS];           /* this process's device memory per ordinal */

static uint64_t parse_size(const char *s, const char **end)
{
    char *e;
    uint64_t v = strtoull(s, &e, 10);
    switch (*e) {
    case 'T': v <<= 10; /* fall through */
    case 'G': v <<= 10; /* fall through */
    case 'M': v <<= 10; /* fall through */
    case 'K': v <<= 10; e++; break;
    default: break;
    }
    if (*e == 'B')
        e++;
    *end = e;
    return v;
}

/* "0=4G,1=512M" (or one value for every device) -> g_pinned, keeping the smaller of two limits. */
static void apply_pinned(const char *spec)
{
    if (!spec || !*spec || !strcmp(spec, "-"))
        return;
    const char *p = spec;
    while (*p) {
        const char *end;
        long dev = -1;
        if (strchr(p, '=')) {
            char *e;
            dev = strtol(p, &e, 10);
            if (*e != '=')
                return;
            p = e + 1;
        }
        uint64_t v = parse_size(p, &end);
        for (int d = 0; d < FAKE_MAX_GPUS; d++)
            if ((dev < 0 || d == dev) && v && (!g_pinned[d] || v < g_pinned[d]))
                g_pinned[d] = v;
        if (*end != ',')
            return;
        p = end + 1;
    }
}

static int connect_daemon(void)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int n = snprintf(addr.sun_path, sizeof addr.sun_path, "%s/control", dir && *dir ? dir : "/tmp/nvidia-mps");
    if (n <= 0 || (size_t)n >= sizeof addr.sun_path)
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

CUresult fc_mps_connect(void)
{
    if (g_mps)
        return CUDA_SUCCESS;
    uint64_t wait_ms = fc_env_u64("CARVE_FAKE_MPS_WAIT_MS", 5000);
    for (uint64_t waited = 0;; waited += 50) {
        int fd = connect_daemon();
        if (fd < 0)
            return CUDA_SUCCESS; /* no daemon: no MPS */
        char line[512];
        int len = snprintf(line, sizeof line, "client %u %d\n", (unsigned)getuid(), (int)getpid());
        ssize_t r = write(fd, line, (size_t)len) == len ? read(fd, line, sizeof line - 1) : -1;
        if (r <= 0) {
            close(fd);
            return CUDA_ERROR_MPS_CONNECTION_FAILED;
        }
        line[r] = '\0';
        int server;
        unsigned pct;
        char spec[400];
        if (sscanf(line, "ok %d %u %399s", &server, &pct, spec) == 3) {
            g_fd = fd;
            g_mps = 1;
            g_pct = pct;
            const char *env = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
            if (env && *env) {
                unsigned long v = strtoul(env, NULL, 10);
                if (v >= 1 && v < g_pct)
                    g_pct = (unsigned)v;
            }
            apply_pinned(spec);
            apply_pinned(getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
            return CUDA_SUCCESS;
        }
        close(fd);
        if (waited >= wait_ms)
            return CUDA_ERROR_MPS_SERVER_NOT_READY;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

uint64_t fc_mps_blocks(uint64_t blocks)
{
    if (!g_mps || g_pct >= 100)
        return blocks;
    return (blocks * 100 + g_pct - 1) / g_pct;
}

int fc_mps_charge(int ordinal, uint64_t bytes)
{
    if (ordinal < 0 || ordinal >= FAKE_MAX_GPUS)
        return 0;
    uint64_t now = __atomic_add_fetch(&g_used[ordinal], bytes, __ATOMIC_ACQ_REL);
    if (g_mps && g_pinned[ordinal] && now > g_pinned[ordinal]) {
        __atomic_sub_fetch(&g_used[ordinal], bytes, __ATOMIC_ACQ_REL);
        return -1;
    }
    return 0;
}

void fc_mps_uncharge(int ordinal, uint64_t bytes)
{
    if (ordinal >= 0 && ordinal < FAKE_MAX_GPUS)
        __atomic_sub_fetch(&g_used[ordinal], bytes, __ATOMIC_ACQ_REL);
}

/* Test hook: 1 when this process is a client of a live MPS server, with its active thread percentage and
 * the pinned limit of `ordinal` (0: none). */
FAKE_EXPORT int carveFakeCudaMps(int ordinal, unsigned *pct, unsigned long long *pinned)
{
    if (pct)
        *pct = g_pct;
    if (pinned)
        *pinned = ordinal >= 0 && ordinal < FAKE_MAX_GPUS ? g_pinned[ordinal] : 0;
    return g_mps;
}

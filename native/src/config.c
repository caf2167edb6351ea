/*
 * config.c: the limiter's environment contract and its logging.
 *
 * CARVE_* variables (docs/limiter.md) win; HAMi's names are read when the CARVE_ ones are absent so
 * workloads migrate unchanged. A value that does not parse is logged and ignored (the plugin validates
 * what it writes; a hand-written typo must not take the application down).
 *
 * The variables are read as the process started: a constructor copies them when the library is loaded,
 * before any code of the application runs, so an application that unsets or rewrites them (unsetenv, putenv,
 * os.environ) before its first CUDA call changes nothing. Parsing and its log lines wait for that first call,
 * so the many processes of a container that never use CUDA pay one scan of environ and log nothing.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "limiter.h"

int carve_log_level = CARVE_LOG_WARN;

#define SNAPSHOT_MAX 256
static char *g_snapshot[SNAPSHOT_MAX];
static int g_snapshot_len = -1; /* -1: not taken (the library was not loaded the usual way) */

static int limiter_variable(const char *entry)
{
    static const char *prefixes[] = {"CARVE_", "CUDA_DEVICE_", "GPU_CORE_UTILIZATION_POLICY=", "ACTIVE_OOM_KILLER=",
                                     "CUDA_TASK_PRIORITY=", "LIBCUDA_LOG_LEVEL="};
    for (unsigned i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (strncmp(entry, prefixes[i], strlen(prefixes[i])) == 0)
            return 1;
    return 0;
}

__attribute__((constructor)) static void snapshot_environment(void)
{
    extern char **environ;
    int n = 0;
    for (char **e = environ; e && *e && n < SNAPSHOT_MAX; e++)
        if (limiter_variable(*e) && (g_snapshot[n] = strdup(*e)) != NULL)
            n++;
    __atomic_store_n(&g_snapshot_len, n, __ATOMIC_RELEASE);
}

const char *carve_getenv(const char *name)
{
    int n = __atomic_load_n(&g_snapshot_len, __ATOMIC_ACQUIRE);
    if (n < 0)
        return getenv(name);
    size_t len = strlen(name);
    for (int i = 0; i < n; i++)
        if (strncmp(g_snapshot[i], name, len) == 0 && g_snapshot[i][len] == '=')
            return g_snapshot[i] + len + 1;
    return NULL;
}

void carve_log(int level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    char line[1024];
    int n = snprintf(line, sizeof line, "carve-limiter[%d] %s: ", (int)getpid(), names[level & 3]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* n is never negative: the prefix always prints (a pid and a level name), and a vsnprintf that fails
     * (-1) only takes one off it */
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    /* one write per line so lines of concurrent processes never interleave */
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

int carve_parse_bytes(const char *s, uint64_t *out)
{
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return -1;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (shift && (*end == 'b' || *end == 'B'))
        end++;
    if (*end != '\0' || (shift && v > (~0ull >> shift)))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static const char *env_indexed(const char *name, int i)
{
    char key[96];
    snprintf(key, sizeof key, "%s_%d", name, i);
    return carve_getenv(key);
}

/* The first of the names that is set, per device: CARVE_X_i, CARVE_X, HAMI_i, HAMI. */
static const char *pick(const char *carve, const char *hami, int i)
{
    const char *v = env_indexed(carve, i);
    if (!v)
        v = carve_getenv(carve);
    if (!v && hami)
        v = env_indexed(hami, i);
    if (!v && hami)
        v = carve_getenv(hami);
    return v && *v ? v : NULL;
}

static int one_of(const char *v, const char *const *names, int n, int dflt, const char *var)
{
    if (!v || !*v)
        return dflt;
    for (int i = 0; i < n; i++)
        if (strcasecmp(v, names[i]) == 0)
            return i;
    CARVE_LOG(CARVE_LOG_ERROR, "%s=%s is not understood; using %s", var, v, names[dflt]);
    return dflt;
}

static void log_level_from_env(void)
{
    static const char *levels[] = {"error", "warn", "info", "debug"};
    const char *v = carve_getenv("CARVE_LOG");
    if (v && *v) {
        carve_log_level = one_of(v, levels, 4, CARVE_LOG_WARN, "CARVE_LOG");
        return;
    }
    v = carve_getenv("LIBCUDA_LOG_LEVEL"); /* HAMi: 0 errors .. 4 debug */
    if (v && isdigit((unsigned char)*v)) {
        int l = atoi(v);
        carve_log_level = l <= 0 ? CARVE_LOG_ERROR : l >= 3 ? CARVE_LOG_DEBUG : l;
    }
}

void carve_config_from_env(carve_config_t *cfg)
{
    static const char *policies[] = {"default", "force", "disable"};
    static const char *priorities[] = {"high", "low"};
    static const char *ooms[] = {"error", "kill"};
    memset(cfg, 0, sizeof *cfg);
    log_level_from_env();

    for (int i = 0; i < CARVE_MAX_DEVICES; i++) {
        const char *mem = pick("CARVE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT", i);
        if (mem && carve_parse_bytes(mem, &cfg->memory_limit[i]) != 0) {
            CARVE_LOG(CARVE_LOG_ERROR, "memory limit '%s' for device %d is not a size; no memory limit", mem, i);
            cfg->memory_limit[i] = 0;
        }
        const char *cores = pick("CARVE_CORES_LIMIT", "CUDA_DEVICE_SM_LIMIT", i);
        if (cores) {
            char *end;
            long v = strtol(cores, &end, 10);
            if (*end || v < 0 || v > 100)
                CARVE_LOG(CARVE_LOG_ERROR, "cores limit '%s' for device %d is not 0..100; no compute limit", cores, i);
            else
                cfg->cores_limit[i] = v >= 100 ? 0 : (uint32_t)v; /* 100% is no limit */
        }
    }

    const char *policy = carve_getenv("CARVE_CORE_POLICY");
    cfg->core_policy = (uint32_t)one_of(policy ? policy : carve_getenv("GPU_CORE_UTILIZATION_POLICY"), policies, 3,
                                        CARVE_CORE_DEFAULT, "CARVE_CORE_POLICY");

    const char *prio = carve_getenv("CARVE_PRIORITY");
    if (!prio) {
        const char *hami = carve_getenv("CUDA_TASK_PRIORITY"); /* HAMi: 0 = high, anything else = low */
        prio = hami && *hami ? (strcmp(hami, "0") == 0 ? "high" : "low") : NULL;
    }
    cfg->priority = (uint32_t)one_of(prio, priorities, 2, CARVE_PRIORITY_HIGH, "CARVE_PRIORITY");

    const char *oom = carve_getenv("CARVE_OOM_POLICY");
    if (!oom) {
        const char *hami = carve_getenv("ACTIVE_OOM_KILLER");
        oom = hami && (strcasecmp(hami, "true") == 0 || strcmp(hami, "1") == 0) ? "kill" : NULL;
    }
    cfg->oom_policy = (uint32_t)one_of(oom, ooms, 2, CARVE_OOM_ERROR, "CARVE_OOM_POLICY");

    const char *region = carve_getenv("CARVE_REGION");
    if (!region || !*region)
        region = carve_getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    if (region) /* an empty one copies as the empty path the memset left */
        snprintf(cfg->region_path, sizeof cfg->region_path, "%s", region);

    /* every claim's region directory is mounted under one root; tests point it elsewhere */
    const char *dir = carve_getenv("CARVE_REGION_DIR");
    snprintf(cfg->region_dir, sizeof cfg->region_dir, "%s", dir && *dir ? dir : CARVE_DEFAULT_REGION_DIR);
}

/*
 * feedback.c: the background thread that turns measured SM utilization into a launch budget.
 *
 * Every 5 ms it refills each throttled device's token bucket at `rate` blocks per second. Every tick
 * (CARVE_TICK_MS, default 100 ms) it re-reads the plugin's limits files (limits.c; so the plugin can change a
 * running claim's share), samples NVML's per-process utilization, sums it over the claim's pids, and sets
 *     rate <- blocks_launched_per_second * (target / measured)
 * The update is a ratio: it holds for any GPU size, kernel length or grid shape, so its gain does not
 * depend on the SM count (HAMi-core's step grows with SMs squared). Policy decides the target:
 *     default  throttle only while another process is busy on the GPU, else burst
 *     force    always hold the share
 *     disable  never throttle (the thread is not even started)
 * and a low-priority claim drops to LOW_SHARE while a high-priority neighbour is busy.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "limiter.h"

#define REFILL_NS 5000000ull
#define NEIGHBOUR_MIN 5    /* percent of SM time by other processes that counts as a busy neighbour */
#define LOW_SHARE 10       /* what a low-priority claim keeps while a high-priority neighbour is busy */
#define GAIN 0.8           /* fraction of the measured error corrected per tick */
#define MAX_SAMPLES 256

typedef struct ctl {
    nvmlDevice_t nvml;
    int have_nvml;
    double rate;                 /* blocks per second while throttled */
    double frac;                 /* fractional tokens carried between refills */
    unsigned long long last_seen; /* NVML sample timestamp (wall-clock us) */
} ctl_t;

static ctl_t g_ctl[CARVE_MAX_DEVICES];
static pthread_mutex_t g_decide_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_devices;
static uint64_t g_tick_ns = 100000000ull;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static unsigned long long wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000u;
}

static void setup_nvml(void)
{
    int nvml = carve_nvml_init() && REAL(nvmlInit_v2) && REAL(nvmlInit_v2)() == NVML_SUCCESS &&
               REAL(nvmlDeviceGetProcessUtilization);
    if (!nvml)
        CARVE_LOG(CARVE_LOG_WARN, "NVML is unavailable: compute limits cannot be measured and are not enforced");
    int n = 0;
    if (REAL(cuDeviceGetCount) && REAL(cuDeviceGetCount)(&n) != CUDA_SUCCESS)
        n = 0;
    g_devices = n < CARVE_MAX_DEVICES ? n : CARVE_MAX_DEVICES;
    for (int d = 0; nvml && d < g_devices; d++) {
        CUuuid u;
        char s[96];
        ctl_t *c = &g_ctl[d];
        if (REAL(cuDeviceGetUuid_v2) && REAL(cuDeviceGetUuid_v2)(&u, d) == CUDA_SUCCESS &&
            REAL(nvmlDeviceGetHandleByUUID)) {
            carve_uuid_string(&u, s, sizeof s);
            c->have_nvml = REAL(nvmlDeviceGetHandleByUUID)(s, &c->nvml) == NVML_SUCCESS;
        }
        if (!c->have_nvml && REAL(nvmlDeviceGetHandleByIndex_v2))
            c->have_nvml = REAL(nvmlDeviceGetHandleByIndex_v2)((unsigned)d, &c->nvml) == NVML_SUCCESS;
        c->last_seen = wall_us() - g_tick_ns / 1000;
    }
}

typedef struct sample {
    unsigned claim, other; /* percent of SM time */
    int neighbour;         /* another process is busy on this GPU */
} sample_t;

/* 1 with a fresh measurement, 0 when NVML has nothing new to say. */
static int measure(int d, uint64_t launched, sample_t *out)
{
    ctl_t *c = &g_ctl[d];
    nvmlProcessUtilizationSample_t s[MAX_SAMPLES];
    unsigned n = MAX_SAMPLES;
    memset(out, 0, sizeof *out);
    if (!c->have_nvml)
        return 0;
    nvmlReturn_t rc = REAL(nvmlDeviceGetProcessUtilization)(c->nvml, s, &n, c->last_seen);
    if (rc == NVML_ERROR_NOT_FOUND)
        return launched == 0; /* idle, unless we launched and the driver has not sampled yet */
    if (rc != NVML_SUCCESS)
        return 0;

    /* the claim's pids: those in the slots of the region this device is charged to */
    const carve_region_t *region = carve_bind[d].region->map;
    int32_t pids[CARVE_MAX_PROCS];
    unsigned npids = 0, live = 0;
    for (unsigned i = 0; i < region->max_procs && i < CARVE_MAX_PROCS; i++) {
        if (__atomic_load_n(&region->procs[i].pid, __ATOMIC_ACQUIRE) <= 0)
            continue;
        live++;
        int hp = carve_host_pid_of_slot(region, (int)i);
        if (hp > 0)
            pids[npids++] = hp;
    }
    /* Average each pid's samples (a driver may return several per pid), then sum per side. */
    unsigned total = 0, active_pids = 0;
    for (unsigned i = 0; i < n; i++) {
        if (s[i].timeStamp > c->last_seen)
            c->last_seen = s[i].timeStamp;
        int seen = 0;
        for (unsigned j = 0; j < i && !seen; j++)
            seen = s[j].pid == s[i].pid;
        if (seen)
            continue;
        unsigned sum = 0, cnt = 0;
        for (unsigned j = i; j < n; j++)
            if (s[j].pid == s[i].pid) {
                sum += s[j].smUtil;
                cnt++;
            }
        unsigned u = sum / (cnt ? cnt : 1);
        int mine = 0;
        for (unsigned j = 0; j < npids && !mine; j++)
            mine = (unsigned)pids[j] == s[i].pid;
        if (mine)
            out->claim += u;
        else
            out->other += u;
        total += u;
        active_pids += u > 0;
    }
    if (npids == 0) {
        /* No pid of ours is known to NVML (a pid namespace the plugin has not resolved yet): count the whole
         * GPU as ours (never more than the share) and guess a neighbour from the number of busy pids. */
        out->claim = total;
        out->other = 0;
        out->neighbour = active_pids > live;
    } else {
        out->neighbour = out->other >= NEIGHBOUR_MIN;
    }
    if (out->claim > 100)
        out->claim = 100;
    return 1;
}

/* One tick of one device: what was measured and what the claim asks for. */
typedef struct tick {
    uint64_t launched; /* blocks launched since the last tick */
    int starved;       /* a launch waited for budget since the last tick */
    int fresh;         /* NVML had a new measurement: m holds it */
    sample_t m;
    unsigned target;   /* percent of SM time the claim is held to while throttled */
    int throttle;
    int counting;      /* not throttled: still count launches (a limit or a low priority that may apply) */
} tick_t;

static double within(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* The law: the gate's mode and the budget from one tick's measurement (see the top of this file). */
static void steer(carve_gate_t *g, ctl_t *c, const tick_t *t, double elapsed_s)
{
    if (!t->throttle) {
        /* waiters see the mode change and go; the bank is read only while throttling, and emptied when that
         * starts again (below) */
        __atomic_store_n(&g->mode, t->counting ? CARVE_GATE_COUNT : CARVE_GATE_IDLE, __ATOMIC_RELEASE);
        return;
    }
    const sample_t *m = &t->m;
    double launched_rate = elapsed_s > 0 ? (double)t->launched / elapsed_s : 0;
    if (__atomic_load_n(&g->mode, __ATOMIC_RELAXED) != CARVE_GATE_THROTTLE) {
        /* switching on: what the claim launched for what it measured, scaled to the target */
        if (t->fresh && m->claim > 0 && launched_rate > 0)
            c->rate = launched_rate * t->target / m->claim;
        else if (c->rate <= 0)
            c->rate = launched_rate > 0 ? launched_rate * t->target / 100.0 : 1000.0;
        c->frac = 0;
        /* the bank starts empty: relaxed, since the store publishes nothing (launches take from the bank with
         * an atomic read-modify-write, and nothing a waiter reads after its acquire load was written here) */
        __atomic_store_n(&g->tokens, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&g->mode, CARVE_GATE_THROTTLE, __ATOMIC_RELEASE);
        return;
    }
    if (!t->fresh)
        return;
    double rate = c->rate;
    if (m->claim > 0) {
        double ratio = (double)t->target / m->claim;
        if (ratio < 1 || t->starved) /* the correction, at most eightfold either way in one tick */
            rate = within(launched_rate * (1 + GAIN * (ratio - 1)), rate / 8, rate * 8);
    } else if (t->starved) {
        rate *= 2; /* launches waited yet nothing ran: the budget is far too small */
    }
    c->rate = rate > 1 ? rate : 1;
}

static void control(int d, double elapsed_s)
{
    static const char *const modes[] = {"idle", "count", "throttle"};
    carve_gate_t *g = &carve_gates[d];
    ctl_t *c = &g_ctl[d];
    carve_region_device_t *rd = carve_bind[d].dev;
    tick_t t;
    t.launched = __atomic_exchange_n(&g->launched, 0, __ATOMIC_ACQ_REL);
    t.starved = __atomic_exchange_n(&g->starved, 0, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(&g->total, t.launched, __ATOMIC_RELAXED);
    if (!rd) { /* no claim limits this device */
        __atomic_store_n(&g->mode, CARVE_GATE_IDLE, __ATOMIC_RELEASE);
        return;
    }
    /* limits, policy and priority are those the plugin wrote for the claim this device belongs to */
    const carve_limits_t *claim = &carve_bind[d].region->limits;
    const carve_limits_device_t *lim = &claim->devices[carve_bind[d].index];

    unsigned limit = __atomic_load_n(&lim->cores_limit, __ATOMIC_RELAXED);
    unsigned policy = __atomic_load_n(&claim->core_policy, __ATOMIC_RELAXED);
    int low = __atomic_load_n(&claim->priority, __ATOMIC_RELAXED) == CARVE_PRIORITY_LOW;
    int high_neighbours = __atomic_load_n(&lim->high_neighbours, __ATOMIC_RELAXED) > 0;
    t.fresh = measure(d, t.launched, &t.m);

    t.target = limit == 0 || limit > 100 ? 100 : limit;
    int yield = low && high_neighbours && t.m.neighbour;
    if (yield && t.target > LOW_SHARE)
        t.target = LOW_SHARE;
    t.throttle = policy != CARVE_CORE_DISABLE && t.target < 100 &&
                 (policy == CARVE_CORE_FORCE || t.m.neighbour || yield);
    t.counting = policy != CARVE_CORE_DISABLE && (t.target < 100 || low);
    if (t.fresh)
        __atomic_store_n(&rd->utilization, t.m.claim, __ATOMIC_RELAXED);
    __atomic_store_n(&rd->target, t.throttle ? t.target : 100, __ATOMIC_RELAXED);
    steer(g, c, &t, elapsed_s);
    /* every input of the law and what it decided, exactly (%.17g round-trips a double): what an operator reads
     * to see why a claim is held where it is, and what a test checks the law against */
    CARVE_LOG(CARVE_LOG_DEBUG,
              "device %d tick: launched %llu in %.17g s, starved %d; %s claim %u other %u neighbour %d; "
              "target %u; %s at %.17g blocks/s",
              d, (unsigned long long)t.launched, elapsed_s, t.starved, t.fresh ? "sample" : "no sample", t.m.claim,
              t.m.other, t.m.neighbour, t.target, modes[__atomic_load_n(&g->mode, __ATOMIC_RELAXED)], c->rate);
}

static void refill(int d, double dt_s)
{
    carve_gate_t *g = &carve_gates[d];
    ctl_t *c = &g_ctl[d];
    if (__atomic_load_n(&g->mode, __ATOMIC_RELAXED) != CARVE_GATE_THROTTLE)
        return;
    double add = c->rate * dt_s + c->frac;
    int64_t whole = (int64_t)add;
    c->frac = add - (double)whole;
    int64_t cap = (int64_t)(c->rate * 0.01) + 1; /* at most 10 ms of budget banked: no long bursts */
    int64_t v = __atomic_load_n(&g->tokens, __ATOMIC_RELAXED), next;
    do {
        next = v + whole;
        if (next > cap)
            next = v > cap ? v : cap;
    } while (!__atomic_compare_exchange_n(&g->tokens, &v, next, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
}

/* Launches skip the gate entirely while no device counts or throttles. */
void carve_launch_free_update(void)
{
    int any = __atomic_load_n(&carve_gate_state, __ATOMIC_RELAXED) != 1;
    if (__atomic_load_n(&carve_gate_state, __ATOMIC_RELAXED) == 2) {
        any = 0;
        for (unsigned d = 0; d < CARVE_MAX_DEVICES && !any; d++)
            any = __atomic_load_n(&carve_gates[d].mode, __ATOMIC_RELAXED) != CARVE_GATE_IDLE;
    }
    __atomic_store_n(&carve_launch_free, !any, __ATOMIC_RELEASE);
}

static void *feedback_main(void *arg)
{
    setup_nvml();
    /* the first tick comes early: until it, launches run unthrottled while the rate is calibrated */
    uint64_t last = mono_ns(), last_ctl = last - g_tick_ns + 25000000ull;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)REFILL_NS};
    for (;;) {
        nanosleep(&ts, NULL);
        uint64_t now = mono_ns();
        for (int d = 0; d < g_devices; d++)
            refill(d, (double)(now - last) / 1e9);
        last = now;
        if (now - last_ctl >= g_tick_ns) {
            carve_limits_refresh(); /* the plugin rewrites shares and neighbours while the claim runs */
            for (int d = 0; d < g_devices; d++)
                control(d, (double)(now - last_ctl) / 1e9);
            carve_launch_free_update();
            last_ctl = now;
        }
    }
    return NULL;
}

/* Once per process, at its first launch: start the feedback thread when a compute limit is possible. */
int carve_gate_decide(void)
{
    pthread_mutex_lock(&g_decide_lock);
    int s = __atomic_load_n(&carve_gate_state, __ATOMIC_RELAXED);
    if (s == 0 && carve_bind_ordinal(0) < 0) {
        /* the driver cannot map devices to claims yet (not initialised): decide at a later launch */
        pthread_mutex_unlock(&g_decide_lock);
        return 1;
    }
    if (s == 0) {
        int wanted = 0;
        for (unsigned d = 0; d < CARVE_MAX_DEVICES && !wanted; d++) {
            const carve_binding_t *b = &carve_bind[d];
            const carve_limits_t *l = b->dev ? &b->region->limits : NULL;
            if (!l || l->core_policy == CARVE_CORE_DISABLE)
                continue;
            /* the plugin's limits can change while we run; the environment's cannot */
            wanted = b->region->limits_from == CARVE_LIMITS_FILE || l->priority == CARVE_PRIORITY_LOW ||
                     l->devices[b->index].cores_limit > 0;
        }
        const char *tick = carve_getenv("CARVE_TICK_MS");
        if (tick && atoi(tick) >= 10 && atoi(tick) <= 1000)
            g_tick_ns = (uint64_t)atoi(tick) * 1000000ull;
        pthread_t t;
        pthread_attr_t attr;
        sigset_t all, old;
        if (wanted) {
            /* the thread must never run the application's signal handlers */
            sigfillset(&all);
            pthread_sigmask(SIG_SETMASK, &all, &old);
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &attr, feedback_main, NULL) != 0) {
                CARVE_LOG(CARVE_LOG_ERROR, "cannot start the feedback thread: compute limits are not enforced");
                wanted = 0;
            }
            pthread_attr_destroy(&attr);
            pthread_sigmask(SIG_SETMASK, &old, NULL);
        }
        /* count from the first launch on limited devices, so the first tick can calibrate */
        for (unsigned d = 0; wanted && d < CARVE_MAX_DEVICES; d++) {
            const carve_binding_t *b = &carve_bind[d];
            const carve_limits_t *l = b->dev ? &b->region->limits : NULL;
            if (l && l->core_policy != CARVE_CORE_DISABLE &&
                (l->devices[b->index].cores_limit > 0 || l->priority == CARVE_PRIORITY_LOW))
                carve_gates[d].mode = CARVE_GATE_COUNT;
        }
        s = wanted ? 2 : 1;
        __atomic_store_n(&carve_gate_state, s, __ATOMIC_RELEASE);
        carve_launch_free_update();
    }
    pthread_mutex_unlock(&g_decide_lock);
    return s;
}

void carve_feedback_after_fork(void)
{
    /* the thread does not exist in the child: decide again at its first launch */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    g_decide_lock = fresh;
    memset(carve_gates, 0, sizeof carve_gates);
    memset(g_ctl, 0, sizeof g_ctl);
    carve_gate_state = 0;
    carve_launch_free = 0;
}

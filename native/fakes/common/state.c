/*
 * state.c: the fake GPUs' shared state: where it lives, how it is locked, and per-process slots.
 *
 * With CARVE_FAKE_STATE set, the state is a file mapped MAP_SHARED by every process that names it, as
 * the driver's state is shared by every process of a real node. Each GPU's part is guarded by a POSIX
 * lock on one byte of the file (an open-file-description lock, see file_lock; kernel-released when a
 * process dies, so a SIGKILLed holder never wedges the others) plus a per-process mutex (the lock does not
 * exclude threads that share the descriptor).
 * Without CARVE_FAKE_STATE the state is private memory of this process.
 *
 * A process slot's owner also holds a shared record lock on the slot's own byte while the slot is its:
 * that is how a process of another pid namespace (the plugin on the host, a container's process) learns
 * whether the owner still lives, and its pid as the asker's namespace numbers it (F_GETLK's l_pid, which
 * the kernel translates). The driver reports host pids and forgets a process's memory when it exits; a
 * container's pid, seen from the host, is neither.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nvml.h>

#include "fakestate.h"

/* Record lock offsets: GPU i at byte i, initialisation after them, then one byte per process slot. */
#define LOCK_INIT_BYTE FAKE_MAX_GPUS
#define LOCK_SLOT_BASE (LOCK_INIT_BYTE + 1)

static fake_state_file_t *g_state;
static int g_fd = -1;
static char g_path[4096]; /* the state file, for a forked child to reopen */
static const char *g_state_err;
static char g_state_err_buf[512];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mutex[FAKE_MAX_GPUS];
static unsigned g_warned;
static uint64_t g_pidns;

FAKE_EXPORT uint64_t fake_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

FAKE_EXPORT void fake_warn_once(unsigned key, const char *fmt, ...)
{
    unsigned bit = 1u << (key & 31);
    if (__atomic_fetch_or(&g_warned, bit, __ATOMIC_RELAXED) & bit)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* The init and GPU locks are open-file-description locks, not process-associated record locks: the fake
 * libcuda and the fake NVML each link this file and open the state on their own descriptor, and both may
 * initialise it at once inside one process (the limiter's NVML thread beside CUDA start-up). Process locks
 * would let the second library in while the first one builds a new file, and truncate it under the first
 * one's mapping (SIGBUS). A forked child reopens the file (fork_child) so its locks exclude its parent's. */
static int file_lock(unsigned byte, int type)
{
    struct flock fl = {.l_type = (short)type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1, .l_pid = 0};
    while (fcntl(g_fd, F_OFD_SETLKW, &fl) != 0)
        if (errno != EINTR)
            return -1;
    return 0;
}

static void reset_gpu(struct fake_gpu_state *st, const char *key)
{
    memset(st, 0, sizeof *st);
    snprintf(st->model_key, sizeof st->model_key, "%s", key);
}

static void read_boot_id(char *out, size_t len)
{
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, out, len - 1) : -1;
    if (fd >= 0)
        close(fd);
    out[n > 0 ? n : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

/* A state file that outlived a reboot: processes and kernel times are from the old boot (the monotonic
 * clock restarted), GPU and compute instances are gone as on hardware, and the MIG mode persists on
 * Ampere (InfoROM, a pending change applies at boot) but not on Hopper and newer (driver state). */
static void after_reboot(struct fake_gpu_state *st, const fake_model_t *m)
{
    memset(st->procs, 0, sizeof st->procs);
    memset(st->gi, 0, sizeof st->gi);
    memset(st->ci, 0, sizeof st->ci);
    memset(st->parts, 0, sizeof st->parts); /* cgroups do not survive a reboot, nor do their limits */
    st->busy_until_ns = 0;
    st->ring_next = st->ring_count = 0;
    st->mig_current = st->mig_pending = m->architecture >= NVML_DEVICE_ARCH_HOPPER ? 0 : st->mig_pending;
}

static int state_error(const char *path, const char *what)
{
    snprintf(g_state_err_buf, sizeof g_state_err_buf, "carve fake GPUs: CARVE_FAKE_STATE=%s: %s", path, what);
    g_state_err = g_state_err_buf;
    return -1;
}

/* Map the file, initialising it under the init lock when it is new or from another layout version.
 * Returns 0 with the init lock held. */
static int open_file(const char *path)
{
    snprintf(g_path, sizeof g_path, "%s", path);
    g_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (g_fd < 0)
        return state_error(path, strerror(errno));
    if (file_lock(LOCK_INIT_BYTE, F_WRLCK) != 0)
        return state_error(path, "cannot lock");
    struct stat sb;
    int rc = fstat(g_fd, &sb);
    fake_state_file_t head = {0};
    if (rc == 0 && sb.st_size >= (off_t)sizeof head.magic * 2 &&
        pread(g_fd, &head, sizeof head.magic * 2, 0) != (ssize_t)(sizeof head.magic * 2))
        rc = -1;
    if (rc == 0 && sb.st_size > 0 && head.magic != FAKE_STATE_MAGIC) {
        file_lock(LOCK_INIT_BYTE, F_UNLCK);
        return state_error(path, "exists and is not a carve fake GPU state file");
    }
    int fresh = sb.st_size != (off_t)sizeof(fake_state_file_t) || head.version != FAKE_STATE_VERSION;
    /* Truncating to 0 first zeroes an old layout's bytes. */
    if (rc == 0 && fresh && (ftruncate(g_fd, 0) != 0 || ftruncate(g_fd, sizeof(fake_state_file_t)) != 0))
        rc = -1;
    void *p = rc == 0 ? mmap(NULL, sizeof(fake_state_file_t), PROT_READ | PROT_WRITE, MAP_SHARED, g_fd, 0)
                      : MAP_FAILED;
    if (p == MAP_FAILED) {
        file_lock(LOCK_INIT_BYTE, F_UNLCK);
        return state_error(path, strerror(errno ? errno : EIO));
    }
    g_state = p;
    if (fresh) {
        g_state->version = FAKE_STATE_VERSION;
        g_state->size = sizeof(fake_state_file_t);
        __atomic_store_n(&g_state->magic, FAKE_STATE_MAGIC, __ATOMIC_RELEASE);
        msync(p, sizeof(fake_state_file_t), MS_SYNC);
    }
    return 0; /* the init lock is still held: init_once releases it after checking the GPU slots */
}

static void fork_prepare(void)
{
    for (unsigned i = 0; i < FAKE_MAX_GPUS; i++)
        pthread_mutex_lock(&g_mutex[i]);
}

static void fork_parent(void)
{
    for (unsigned i = FAKE_MAX_GPUS; i-- > 0;)
        pthread_mutex_unlock(&g_mutex[i]);
}

/* The child shares its parent's open file description, and so its OFD locks: give it one of its own. */
static void fork_child(void)
{
    if (g_fd >= 0 && g_path[0]) {
        int fd = open(g_path, O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
            dup3(fd, g_fd, O_CLOEXEC);
            close(fd);
        }
    }
    fork_parent();
}

static void init_once(void)
{
    for (unsigned i = 0; i < FAKE_MAX_GPUS; i++)
        pthread_mutex_init(&g_mutex[i], NULL);
    /* The mutexes are held across fork so the child never inherits one locked by a thread that does not
     * exist there (and so no GPU lock is held at the fork either). */
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    struct stat sb;
    g_pidns = stat("/proc/self/ns/pid", &sb) == 0 ? (uint64_t)sb.st_ino : 0;
    const char *path = getenv("CARVE_FAKE_STATE");
    if (path && *path && open_file(path) == 0)
        goto slots;
    if (g_fd >= 0)
        close(g_fd);
    g_fd = -1;
    void *p = mmap(NULL, sizeof(fake_state_file_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        if (!g_state_err)
            state_error("(process-local)", "out of memory");
        return;
    }
    g_state = p;
    g_state->magic = FAKE_STATE_MAGIC;
    g_state->version = FAKE_STATE_VERSION;
    g_state->size = sizeof(fake_state_file_t);
slots:;
    char boot[sizeof g_state->boot_id] = "";
    read_boot_id(boot, sizeof boot);
    int rebooted = strcmp(boot, g_state->boot_id) != 0;
    memcpy(g_state->boot_id, boot, sizeof boot);
    const fake_gpu_t *gpus;
    unsigned n = 0;
    if (fake_topology(&gpus, &n, NULL) != 0)
        n = 0;
    for (unsigned i = 0; i < n; i++) {
        if (g_fd >= 0)
            file_lock(i, F_WRLCK); /* always after the init lock: the only nesting, so no deadlock */
        struct fake_gpu_state *st = &g_state->gpus[i];
        if (strcmp(st->model_key, gpus[i].model->key) != 0)
            reset_gpu(st, gpus[i].model->key); /* initialised for another model: the topology changed */
        else if (rebooted)
            after_reboot(st, gpus[i].model);
        if (g_fd >= 0)
            file_lock(i, F_UNLCK);
    }
    if (g_fd >= 0)
        file_lock(LOCK_INIT_BYTE, F_UNLCK);
}

FAKE_EXPORT int fake_state_init(const char **err)
{
    pthread_once(&g_once, init_once);
    if (g_state_err) {
        if (err)
            *err = g_state_err;
        fake_warn_once(0, "%s (falling back to process-local state)", g_state_err);
    }
    if (!g_state)
        return -1;
    return g_state_err ? -1 : 0;
}

FAKE_EXPORT int fake_state_locked(unsigned gpu, int (*fn)(void *arg, fake_gpu_state_t *st), void *arg)
{
    const fake_gpu_t *gpus;
    unsigned n;
    if (fake_topology(&gpus, &n, NULL) != 0 || gpu >= n)
        return -1;
    fake_state_init(NULL);
    if (!g_state)
        return -1;
    pthread_mutex_lock(&g_mutex[gpu]);
    if (g_fd >= 0 && file_lock(gpu, F_WRLCK) != 0) {
        pthread_mutex_unlock(&g_mutex[gpu]);
        return -1;
    }
    int rc = fn(arg, &g_state->gpus[gpu]);
    if (g_fd >= 0)
        file_lock(gpu, F_UNLCK);
    pthread_mutex_unlock(&g_mutex[gpu]);
    return rc;
}

static unsigned slot_byte(const struct fake_gpu_state *st, const fake_proc_slot_t *p)
{
    return LOCK_SLOT_BASE + (unsigned)(st - g_state->gpus) * FAKE_MAX_PROCS + (unsigned)(p - st->procs);
}

static int own_slot(const fake_proc_slot_t *p)
{
    return p->pid == getpid() && p->pidns == g_pidns;
}

/* The owner's pid as this process's pid namespace numbers it: its own pid when it is of our namespace and
 * alive; for another namespace's slot, the pid the kernel gives the holder of the slot's lock (0 when the
 * holder is invisible from here: it lives, but has no pid of ours). -1 when the owner is gone. */
FAKE_EXPORT pid_t fake_proc_visible_pid(struct fake_gpu_state *st, const fake_proc_slot_t *p)
{
    if (!p->pid)
        return -1;
    if (p->pidns == g_pidns)
        return kill(p->pid, 0) != 0 && errno == ESRCH ? -1 : p->pid;
    if (g_fd < 0)
        return 0; /* process-local state: no other namespace can have written it */
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot_byte(st, p), .l_len = 1};
    if (fcntl(g_fd, F_GETLK, &fl) != 0)
        return 0; /* cannot tell: keep it */
    return fl.l_type == F_UNLCK ? -1 : fl.l_pid;
}

FAKE_EXPORT uint64_t fake_self_pidns(void)
{
    return g_pidns;
}

FAKE_EXPORT pid_t fake_kernel_rec_pid(struct fake_gpu_state *st, const fake_kernel_rec_t *r)
{
    if (r->pidns == g_pidns)
        return r->pid;
    const fake_proc_slot_t *p = r->slot && r->slot <= FAKE_MAX_PROCS ? &st->procs[r->slot - 1] : NULL;
    if (!p || p->pid != r->pid || p->pidns != r->pidns)
        return 0; /* its slot is gone or another's: the submitter exited */
    pid_t v = fake_proc_visible_pid(st, p);
    return v > 0 ? v : 0;
}

FAKE_EXPORT void fake_proc_free(struct fake_gpu_state *st, fake_proc_slot_t *p)
{
    if (g_fd >= 0 && own_slot(p)) {
        struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = slot_byte(st, p), .l_len = 1};
        fcntl(g_fd, F_SETLK, &fl);
    }
    memset(p, 0, sizeof *p);
}

FAKE_EXPORT void fake_proc_sweep(struct fake_gpu_state *st)
{
    for (unsigned i = 0; i < FAKE_MAX_PROCS; i++)
        if (st->procs[i].pid && !own_slot(&st->procs[i]) && fake_proc_visible_pid(st, &st->procs[i]) < 0)
            memset(&st->procs[i], 0, sizeof st->procs[i]); /* a dead owner holds no lock to release */
}

FAKE_EXPORT fake_proc_slot_t *fake_proc_slot(struct fake_gpu_state *st, pid_t pid, int create)
{
    fake_proc_slot_t *free_slot = NULL;
    for (int pass = 0; pass < 2; pass++) {
        for (unsigned i = 0; i < FAKE_MAX_PROCS; i++) {
            fake_proc_slot_t *p = &st->procs[i];
            if (p->pid == pid && p->pidns == g_pidns) {
                if (pid == getpid())
                    p->cgroup = fake_self_cgroup(st); /* a partition found by path may be newer than the slot */
                return p;
            }
            if (!p->pid && !free_slot)
                free_slot = p;
        }
        if (!create)
            return NULL;
        if (free_slot)
            break;
        fake_proc_sweep(st);
    }
    if (!free_slot)
        return NULL;
    memset(free_slot, 0, sizeof *free_slot);
    free_slot->pid = pid;
    free_slot->pidns = g_pidns;
    /* Only the calling process creates its own slot (fake_mem_reserve, kernels): its cgroup is ours, and
     * it holds the slot's lock while it lives (shared: no other process ever takes it exclusively). */
    if (pid == getpid()) {
        free_slot->cgroup = fake_self_cgroup(st);
        struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = slot_byte(st, free_slot), .l_len = 1};
        if (g_fd >= 0)
            fcntl(g_fd, F_SETLK, &fl);
    }
    return free_slot;
}

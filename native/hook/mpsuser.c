/*
 * mpsuser.c: `carve-cdi-hook mps-user`: a container of one uid does not start while its MPS GPU belongs to
 * another uid.
 *
 * MPS runs one server per GPU at a time, as the uid of its first client; a client of another uid blocks in
 * cuInit until that server's clients are gone (NVIDIA's MPS manual). carve cannot see a container's uid at
 * prepare (the image's USER decides it when runAsUser is unset), so the check is this createRuntime hook:
 * the runtime has written the bundle's config.json ("process"."user"."uid") and the container's init
 * process exists (the OCI state's "pid") but the program has not started. Two checks, in this order, under
 * an exclusive flock of <state-dir>/users.lock so that the hooks of one GPU never interleave (issue 30:
 * two containers of different uids created in the same instant both passed a check of the daemon alone):
 *
 * 1. The uid lease: <state-dir>/users has a line "<uid> <init pid> <its start time> <container id>" per
 *    admitted container. Lines whose process is gone (pid and start time, from <proc-root>/<pid>/stat) are
 *    dropped; a live line of another uid refuses the container. An admitted container adds its line.
 * 2. The daemon's word: the GPU's control daemon (--control, the host's nvidia-cuda-mps-control, with
 *    CUDA_MPS_PIPE_DIRECTORY=--pipe-dir) is asked for its servers (`get_server_list`); for a server of
 *    another uid (its <proc-root>/<pid>/status), its clients (`get_client_list <pid>`). One with clients
 *    refuses the container. The daemon's word is believed only when <pipe-dir>/control is a socket owned
 *    by us (root) whose peer (SO_PEERCRED of a connection made here) is the daemon the plugin recorded in
 *    <state-dir>/daemon; otherwise it is ignored with a warning and the lease decides.
 * A refusal exits 1 naming the GPU and both uids: the runtime does not start the container, the kubelet
 * retries it with back-off, and it starts once the other uid's containers are gone.
 *
 * Bounds: one deadline for the whole hook (HOOK_DEADLINE_MS: the lock and every command together), replies
 * of at most 64 KiB of pid lines, at most 64 distinct server pids, a pid only used to read the host's /proc.
 * Every file is opened relative to the state directory's descriptor, O_NOFOLLOW | O_NONBLOCK, regular
 * files only, bounded. Nothing here opens the container's root, so it runs without the containment.
 * Fail-open where MPS is: a daemon that does not answer lets the container start with a warning (the
 * plugin's health reports it); the lease still holds. Without --state-dir (a spec of an older plugin) only
 * the daemon's word is asked (docs/security.md, "MPS").
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hook.h"
#include "mpsuser.h"

#define MAX_REPLY (64u << 10)
#define MAX_SERVERS 64
#define MAX_STATUS (64u << 10)
#define HOOK_DEADLINE_MS 15000
#define MAX_LEASES 4096
#define MAX_LEASE_FILE (MAX_LEASES * 128u)

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One command to the control daemon, as `echo <command> | nvidia-cuda-mps-control`: its stdout into
 * `out` (NUL-terminated). 0 when it exited 0, -1 otherwise (a message in `err`). */
static int control(const char *path, const char *pipe_dir, const char *command, long long deadline, char *out,
                   size_t cap, char *err, size_t errlen)
{
    int in[2], outp[2];
    if (pipe2(in, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    if (pipe2(outp, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        close(in[0]), close(in[1]);
        return -1;
    }
    char env_pipe[PATH_MAX + 32];
    snprintf(env_pipe, sizeof env_pipe, "CUDA_MPS_PIPE_DIRECTORY=%s", pipe_dir);
    char *const envp[] = {env_pipe, "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    char *const argv[] = {(char *)path, NULL};
    /* A control binary that exits before reading its command must not kill the hook with SIGPIPE (the
     * runtime would then refuse the container: fail-closed where MPS is fail-open). */
    signal(SIGPIPE, SIG_IGN);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(in[0]), close(in[1]), close(outp[0]), close(outp[1]);
        return -1;
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC); /* dup2 onto 2 clears it there */
        if (dup2(in[0], 0) < 0 || dup2(outp[1], 1) < 0 || (devnull >= 0 && dup2(devnull, 2) < 0))
            _exit(127);
        execve(path, argv, envp);
        _exit(127);
    }
    close(in[0]);
    close(outp[1]);
    /* The command fits the pipe's buffer: written whole before anything is read. */
    ssize_t w = write(in[1], command, strlen(command));
    (void)w;
    close(in[1]);
    size_t n = 0;
    int timed_out = 0;
    for (;;) {
        long long left = deadline - now_ms();
        struct pollfd p = {.fd = outp[0], .events = POLLIN};
        int r = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            timed_out = 1;
            break;
        }
        ssize_t got = read(outp[0], out + n, cap - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        n += (size_t)got;
        if (n == cap - 1)
            break; /* a longer reply than any list we ask for: judged on what fits */
    }
    out[n] = '\0';
    close(outp[0]);
    if (timed_out)
        kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (timed_out) {
        snprintf(err, errlen, "no reply within the hook's %d s", HOOK_DEADLINE_MS / 1000);
        return -1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(err, errlen, "%s exited with status %d", path,
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        return -1;
    }
    return 0;
}

/* The distinct pids of a reply, one a line (at most `max`); blank lines are skipped, anything else makes it
 * unreadable (-1). */
static int parse_pids(const char *reply, long *pids, int max)
{
    int n = 0;
    for (const char *p = reply; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v <= 0 || (*end && *end != '\n' && *end != ' ' && *end != '\r'))
            return -1;
        int seen = 0;
        for (int i = 0; i < n && !seen; i++)
            seen = pids[i] == v;
        if (!seen && n < max)
            pids[n++] = v;
        p = end;
    }
    return n;
}

/* The real uid of host process `pid` (its status file's "Uid:" line, first field); -1 when it is gone. */
static long long real_uid(const char *proc_root, long pid)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%ld/status", proc_root, pid) >= (int)sizeof path)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len;
    char *text = read_file_limited(fd, MAX_STATUS, &len);
    close(fd);
    if (!text)
        return -1;
    long long uid = -1;
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, "Uid:", 4) == 0) {
            char *end;
            unsigned long long v = strtoull(line + 4, &end, 10);
            if (end != line + 4 && v <= 0xFFFFFFFFull)
                uid = (long long)v;
            break;
        }
    }
    free(text);
    return uid;
}

/* Field 22 of <proc-root>/<pid>/stat (start time in clock ticks since boot); -1 when the process is gone. */
static long long start_time(const char *proc_root, long pid)
{
    char path[PATH_MAX];
    if (pid <= 0 || snprintf(path, sizeof path, "%s/%ld/stat", proc_root, pid) >= (int)sizeof path)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len;
    char *text = read_file_limited(fd, 4096, &len);
    close(fd);
    if (!text)
        return -1;
    long long v = -1;
    char *p = strrchr(text, ')'); /* the command name may hold spaces and parentheses: fields follow the last */
    for (int field = 2; p && *p && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (p) {
        char *end;
        unsigned long long u = strtoull(p + 1, &end, 10);
        if (end != p + 1)
            v = (long long)u;
    }
    free(text);
    return v;
}

/* A small regular file in directory `dirfd`, never through a link, a fifo or a device; NULL (errno) else. */
static char *read_state_file(int dirfd, const char *name, size_t max, size_t *len)
{
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    char *text = read_file_limited(fd, max, len);
    close(fd);
    return text;
}

/* Is <pipe-dir>/control our daemon's? A socket owned by us whose peer is the pid the plugin recorded in
 * <state-dir>/daemon. 1 yes; 0 no (why in `why`). */
static int daemon_is_ours(int statefd, const char *pipe_dir, const char *proc_root, char *why, size_t whylen)
{
    size_t len;
    char *record = read_state_file(statefd, "daemon", 64, &len);
    long recorded = 0;
    long long recorded_start = -1;
    if (record) {
        char *end;
        recorded = strtol(record, &end, 10);
        recorded_start = strtoll(end, NULL, 10);
        free(record);
    }
    if (recorded <= 0) {
        snprintf(why, whylen, "the plugin has no record of its daemon");
        return 0;
    }
    if (start_time(proc_root, recorded) != recorded_start) {
        snprintf(why, whylen, "the recorded daemon (pid %ld) is gone", recorded);
        return 0;
    }
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (snprintf(addr.sun_path, sizeof addr.sun_path, "%s/control", pipe_dir) >= (int)sizeof addr.sun_path) {
        snprintf(why, whylen, "its socket path is too long");
        return 0;
    }
    struct stat st;
    if (lstat(addr.sun_path, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) {
        snprintf(why, whylen, "%s is not a socket of uid %u", addr.sun_path, (unsigned)geteuid());
        return 0;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        /* EAGAIN: a full backlog; a daemon that cannot take one connection cannot answer either. */
        snprintf(why, whylen, "connecting to %s: %s", addr.sun_path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 0;
    }
    struct ucred cred;
    socklen_t clen = sizeof cred;
    int ok = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0 && cred.pid == recorded &&
             cred.uid == geteuid();
    if (!ok)
        snprintf(why, whylen, "the peer of %s is pid %ld uid %u, not the plugin's daemon (pid %ld)",
                 addr.sun_path, (long)cred.pid, (unsigned)cred.uid, recorded);
    close(fd);
    return ok;
}

typedef struct lease {
    unsigned long long uid;
    long pid;
    long long start;
    char id[130];
} lease_t;

/* The live leases of <state-dir>/users (dead ones and `self_id`'s dropped) into `out`; their count. */
static int read_leases(int statefd, const char *proc_root, const char *self_id, lease_t *out, int max)
{
    size_t len;
    char *text = read_state_file(statefd, "users", MAX_LEASE_FILE, &len);
    if (!text)
        return 0;
    int n = 0;
    for (char *line = text, *next; line && *line && n < max; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lease_t l = {0};
        if (sscanf(line, "%llu %ld %lld %129s", &l.uid, &l.pid, &l.start, l.id) != 4)
            continue;
        if (!strcmp(l.id, self_id) || start_time(proc_root, l.pid) != l.start)
            continue;
        out[n++] = l;
    }
    free(text);
    return n;
}

static int write_leases(int statefd, const lease_t *leases, int n)
{
    size_t cap = (size_t)n * 192 + 1, used = 0;
    char *text = malloc(cap);
    if (!text)
        return -1;
    text[0] = '\0';
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(text + used, cap - used, "%llu %ld %lld %s\n", leases[i].uid, leases[i].pid,
                                 leases[i].start, leases[i].id);
    int rc = write_at(statefd, "users", text, used, 0600);
    free(text);
    return rc;
}

/* The daemon's word: 1 when a server of another uid than `uid` has clients (named in `msg`), else 0. */
static int daemon_refuses(const char *control_path, const char *pipe_dir, const char *gpu, const char *proc_root,
                          unsigned long long uid, long long deadline, char *msg, size_t msglen)
{
    char *reply = malloc(MAX_REPLY);
    if (!reply) {
        hook_warn("mps-user: out of memory: the daemon is not asked");
        return 0;
    }
    char err[PATH_MAX + 64];
    long servers[MAX_SERVERS];
    int nservers = control(control_path, pipe_dir, "get_server_list\n", deadline, reply, MAX_REPLY, err,
                           sizeof err) == 0
                       ? parse_pids(reply, servers, MAX_SERVERS)
                       : -2;
    if (nservers < 0) {
        hook_warn("mps-user: GPU %s: the MPS control daemon at %s %s; the container starts unchecked by "
                  "the daemon (MPS is fail-open: see the plugin's mps health)",
                  gpu, pipe_dir, nservers == -2 ? err : "gave an unreadable server list");
        free(reply);
        return 0;
    }
    int refused = 0;
    for (int s = 0; s < nservers && !refused && now_ms() < deadline; s++) {
        long long owner = real_uid(proc_root, servers[s]);
        if (owner < 0 || (unsigned long long)owner == uid)
            continue; /* gone since the list, or this container's own user's server */
        char command[64];
        snprintf(command, sizeof command, "get_client_list %ld\n", servers[s]);
        long clients[MAX_SERVERS];
        int nclients = control(control_path, pipe_dir, command, deadline, reply, MAX_REPLY, err, sizeof err) == 0
                           ? parse_pids(reply, clients, MAX_SERVERS)
                           : 0; /* the server went away between the two commands */
        if (nclients <= 0)
            continue; /* idle: the daemon replaces it with this user's server at the first cuInit */
        char list[256] = "";
        size_t used = 0;
        for (int c = 0; c < nclients && used < sizeof list - 16; c++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%ld", c ? ", " : "", clients[c]);
        snprintf(msg, msglen, "its MPS server (pid %ld) serves uid %lld, with %d client(s) (pids %s)", servers[s],
                 owner, nclients, list);
        refused = 1;
    }
    free(reply);
    return refused;
}

int run_mps_user(int argc, char **argv)
{
    const char *control_path = NULL, *pipe_dir = NULL, *gpu = NULL, *proc_root = "/proc", *state_dir = NULL;
    for (int i = 0; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            hook_error("mps-user: %s needs a value", a);
            return 2;
        }
        if (!strcmp(a, "--control"))
            control_path = v;
        else if (!strcmp(a, "--pipe-dir"))
            pipe_dir = v;
        else if (!strcmp(a, "--gpu"))
            gpu = v;
        else if (!strcmp(a, "--proc-root"))
            proc_root = v;
        else if (!strcmp(a, "--state-dir"))
            state_dir = v;
        else {
            hook_error("mps-user: unknown argument %s", a);
            return 2;
        }
    }
    if (!control_path || control_path[0] != '/' || !pipe_dir || pipe_dir[0] != '/' || !gpu || !gpu[0] ||
        proc_root[0] != '/' || strlen(pipe_dir) >= PATH_MAX || (state_dir && state_dir[0] != '/')) {
        hook_error("usage: carve-cdi-hook mps-user --control <abs path of nvidia-cuda-mps-control> --pipe-dir "
                   "<abs dir> --gpu <uuid> [--state-dir <abs dir>] [--proc-root <dir>] (OCI state on stdin)");
        return 2;
    }
    long long deadline = now_ms() + HOOK_DEADLINE_MS;
    static const char *const uid_key[] = {"process", "user", "uid", NULL};
    static const char *const pid_key[] = {"pid", NULL};
    static const char *const id_key[] = {"id", NULL};
    size_t slen, len;
    char *state = read_file_limited(STDIN_FILENO, HOOK_MAX_STATE, &slen);
    if (!state) {
        hook_error("mps-user: reading the OCI state from stdin: %s", strerror(errno));
        return 1;
    }
    unsigned long long pid = 0;
    if (json_uint_at(state, slen, pid_key, 0x7FFFFFFFull, &pid) != 0)
        pid = 0;
    char *id = json_string_at(state, slen, id_key);
    char *bundle = NULL;
    char *config = bundle_config_from_doc(state, slen, &bundle, &len);
    free(state);
    if (!config) {
        free(id);
        return 1;
    }
    unsigned long long uid;
    int bad = json_uint_at(config, len, uid_key, 0xFFFFFFFFull, &uid);
    free(config);
    if (bad) {
        hook_error("mps-user: %s/config.json: no \"process\".\"user\".\"uid\" (a number)", bundle);
        free(bundle);
        free(id);
        return 1;
    }
    free(bundle);
    close_other_fds(); /* nothing the runtime left open reaches the control binary */

    int statefd = -1, lockfd = -1, rc = 0;
    lease_t *leases = NULL;
    int nleases = 0;
    char msg[512] = "";
    if (state_dir) {
        int valid_id = id && id[0] && strlen(id) < sizeof leases[0].id;
        for (const char *c = id; valid_id && *c; c++)
            valid_id = *c > ' ' && *c < 0x7f;
        statefd = open(state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        lockfd = statefd >= 0 ? openat(statefd, "users.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
        leases = malloc(sizeof *leases * (MAX_LEASES + 1));
        if (lockfd < 0 || !leases || !valid_id || pid == 0) {
            hook_error("mps-user: GPU %s: %s", gpu,
                       lockfd < 0 ? "cannot open the plugin's MPS state directory (is the plugin running?)"
                       : !leases  ? "out of memory"
                                  : "the OCI state has no container \"id\" or \"pid\" (run as a createRuntime hook)");
            rc = 1;
            goto out;
        }
        while (flock(lockfd, LOCK_EX | LOCK_NB) != 0) {
            if (errno != EWOULDBLOCK && errno != EINTR) {
                hook_error("mps-user: GPU %s: locking %s/users.lock: %s", gpu, state_dir, strerror(errno));
                rc = 1;
                goto out;
            }
            if (now_ms() >= deadline) {
                hook_error("mps-user: GPU %s: another container's check held %s/users.lock for %d s", gpu,
                           state_dir, HOOK_DEADLINE_MS / 1000);
                rc = 1;
                goto out;
            }
            struct timespec ts = {0, 20 * 1000000L};
            nanosleep(&ts, NULL);
        }
        nleases = read_leases(statefd, proc_root, id, leases, MAX_LEASES);
        for (int i = 0; i < nleases; i++)
            if (leases[i].uid != uid) {
                hook_error("mps-user: GPU %s: it is in use by uid %llu (container %s); this container runs as "
                           "uid %llu, and MPS serves one user per GPU at a time: it would block in cuInit. It "
                           "starts once uid %llu's containers on this GPU have exited (the kubelet retries it); "
                           "give the pods of one mps GPU one runAsUser (docs/enforcement.md)",
                           gpu, leases[i].uid, leases[i].id, uid, leases[i].uid);
                rc = 1;
                goto out;
            }
        char why[PATH_MAX + 128];
        if (!daemon_is_ours(statefd, pipe_dir, proc_root, why, sizeof why)) {
            hook_warn("mps-user: GPU %s: the MPS control socket is not believed: %s; the uid lease decides", gpu,
                      why);
        } else if (daemon_refuses(control_path, pipe_dir, gpu, proc_root, uid, deadline, msg, sizeof msg)) {
            rc = 1;
        }
        if (!rc) {
            long long start = start_time(proc_root, (long)pid);
            if (start < 0) {
                hook_error("mps-user: GPU %s: the container's process %llu is gone", gpu, pid);
                rc = 1;
                goto out;
            }
            leases[nleases] = (lease_t){.uid = uid, .pid = (long)pid, .start = start};
            snprintf(leases[nleases].id, sizeof leases[nleases].id, "%s", id);
            if (write_leases(statefd, leases, nleases + 1) != 0) {
                hook_error("mps-user: GPU %s: writing %s/users: %s", gpu, state_dir, strerror(errno));
                rc = 1;
            }
        }
    } else if (daemon_refuses(control_path, pipe_dir, gpu, proc_root, uid, deadline, msg, sizeof msg)) {
        rc = 1;
    }
    if (rc && msg[0])
        hook_error("mps-user: GPU %s: %s; this container runs as uid %llu, and MPS serves one user per GPU at a "
                   "time: it would block in cuInit. The container starts once the other uid's clients have "
                   "exited (the kubelet retries it); give the pods of one mps GPU one runAsUser "
                   "(docs/enforcement.md)",
                   gpu, msg, uid);
out:
    free(leases);
    free(id);
    if (lockfd >= 0)
        close(lockfd); /* releases the flock */
    if (statefd >= 0)
        close(statefd);
    return rc;
}

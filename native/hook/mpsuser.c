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
 *
 * This file: the command, its lock and the uid lease. The daemon's word: mpsuser_daemon.c; the host's
 * /proc and the state directory's files, read for both: mpsuser_host.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "hook.h"
#include "mpsuser.h"

#define MAX_LEASES 4096
#define MAX_LEASE_FILE (MAX_LEASES * 128u)

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

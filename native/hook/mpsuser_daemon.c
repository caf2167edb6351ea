/*
 * mpsuser_daemon.c: the daemon's word for `carve-cdi-hook mps-user` (the rule and the whole check:
 * mpsuser.c). The GPU's control daemon (--control, the host's nvidia-cuda-mps-control, run with
 * CUDA_MPS_PIPE_DIRECTORY=--pipe-dir, as `echo <command> | nvidia-cuda-mps-control` would) is asked for its
 * servers (`get_server_list`); for a server of another uid (its <proc-root>/<pid>/status), its clients
 * (`get_client_list <pid>`). One with clients refuses the container. The daemon's word is believed only
 * when <pipe-dir>/control is a socket owned by us (root) whose peer (SO_PEERCRED of a connection made here)
 * is the daemon the plugin recorded in <state-dir>/daemon.
 *
 * Bounds: every command within the hook's deadline, replies of at most 64 KiB of pid lines, at most 64
 * distinct server pids, a pid only used to read the host's /proc. Fail-open where MPS is: a daemon that
 * does not answer lets the container start with a warning.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hook.h"
#include "mpsuser.h"

#define MAX_REPLY (64u << 10)
#define MAX_SERVERS 64

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

/* Is <pipe-dir>/control our daemon's? A socket owned by us whose peer is the pid the plugin recorded in
 * <state-dir>/daemon. 1 yes; 0 no (why in `why`). */
int daemon_is_ours(int statefd, const char *pipe_dir, const char *proc_root, char *why, size_t whylen)
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

/* The daemon's word: 1 when a server of another uid than `uid` has clients (named in `msg`), else 0. */
int daemon_refuses(const char *control_path, const char *pipe_dir, const char *gpu, const char *proc_root,
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

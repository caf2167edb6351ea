/*
 * mpsuser.c: `carve-cdi-hook mps-user`: a container of one uid does not start while its MPS GPU's server
 * serves another uid's clients.
 *
 * MPS runs one server per GPU at a time, as the uid of its first client; a client of another uid blocks in
 * cuInit until that server's clients are gone (NVIDIA's MPS manual). carve cannot see a container's uid at
 * prepare (the image's USER decides it when runAsUser is unset), so the check is this createRuntime hook:
 * the runtime has written the bundle's config.json ("process"."user"."uid") and has not started the
 * program yet. The hook asks the GPU's control daemon (--control, the host's nvidia-cuda-mps-control, with
 * CUDA_MPS_PIPE_DIRECTORY=--pipe-dir) for its servers (`get_server_list`), reads each server's real uid
 * from <proc-root>/<pid>/status and, for a server of another uid, its clients (`get_client_list <pid>`).
 * One with clients: exit 1, naming the GPU, both uids and the clients. The runtime does not start the
 * container, the kubelet retries it with back-off, and it starts once the other user's clients are gone,
 * instead of hanging in cuInit with no word to anyone.
 *
 * Fail-open where MPS is: a daemon that does not answer (the plugin's health reports it) or a server that
 * exits while we look lets the container start, with a warning. Two containers of different uids created
 * in the same instant can both pass (the second then waits in cuInit, as without the hook).
 *
 * Nothing here opens the container's root: the inputs are the OCI state on stdin, the runtime's
 * config.json, the daemon's replies and the host's /proc, so it runs without the containment. The replies
 * are tenant input all the same: the pipe directory is mounted read-write into every client, so a root
 * tenant can put its own socket at `control`. They are bounded (10 s, 64 KiB), only lines of pids are
 * accepted, and a pid is only used to read /proc/<pid>/status (docs/security.md, "MPS").
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hook.h"
#include "mpsuser.h"

#define MAX_REPLY (64u << 10)
#define MAX_SERVERS 64
#define MAX_STATUS (64u << 10)
#define CONTROL_TIMEOUT_MS 10000

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One command to the control daemon, as `echo <command> | nvidia-cuda-mps-control`: its stdout into
 * `out` (NUL-terminated). 0 when it exited 0, -1 otherwise (a message in `err`). */
static int control(const char *path, const char *pipe_dir, const char *command, char *out, size_t cap,
                   char *err, size_t errlen)
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
        int devnull = open("/dev/null", O_WRONLY);
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
    long long deadline = now_ms() + CONTROL_TIMEOUT_MS;
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
        snprintf(err, errlen, "no reply in %d s", CONTROL_TIMEOUT_MS / 1000);
        return -1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(err, errlen, "%s exited with status %d", path,
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        return -1;
    }
    return 0;
}

/* The pids of a reply, one a line; blank lines are skipped, anything else makes it unreadable (-1). */
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
        if (n < max)
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

int run_mps_user(int argc, char **argv)
{
    const char *control_path = NULL, *pipe_dir = NULL, *gpu = NULL, *proc_root = "/proc";
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
        else {
            hook_error("mps-user: unknown argument %s", a);
            return 2;
        }
    }
    if (!control_path || control_path[0] != '/' || !pipe_dir || pipe_dir[0] != '/' || !gpu || !gpu[0] ||
        proc_root[0] != '/' || strlen(pipe_dir) >= PATH_MAX) {
        hook_error("usage: carve-cdi-hook mps-user --control <abs path of nvidia-cuda-mps-control> --pipe-dir "
                   "<abs dir> --gpu <uuid> [--proc-root <dir>] (OCI state on stdin)");
        return 2;
    }
    static const char *const uid_key[] = {"process", "user", "uid", NULL};
    char *bundle = NULL;
    size_t len;
    char *config = bundle_config_from_state(STDIN_FILENO, &bundle, &len);
    if (!config)
        return 1;
    unsigned long long uid;
    int bad = json_uint_at(config, len, uid_key, 0xFFFFFFFFull, &uid);
    free(config);
    if (bad) {
        hook_error("mps-user: %s/config.json: no \"process\".\"user\".\"uid\" (a number)", bundle);
        free(bundle);
        return 1;
    }
    free(bundle);
    close_other_fds(); /* nothing the runtime left open reaches the control binary */

    char *reply = malloc(MAX_REPLY);
    if (!reply) {
        hook_error("mps-user: out of memory");
        return 1;
    }
    char err[PATH_MAX + 64];
    long servers[MAX_SERVERS];
    int nservers = control(control_path, pipe_dir, "get_server_list\n", reply, MAX_REPLY, err, sizeof err) == 0
                       ? parse_pids(reply, servers, MAX_SERVERS)
                       : -2;
    if (nservers < 0) {
        hook_warn("mps-user: GPU %s: the MPS control daemon at %s %s; the container starts unchecked (MPS is "
                  "fail-open: see the plugin's mps health)",
                  gpu, pipe_dir, nservers == -2 ? err : "gave an unreadable server list");
        free(reply);
        return 0;
    }
    int rc = 0;
    for (int s = 0; s < nservers && !rc; s++) {
        long long owner = real_uid(proc_root, servers[s]);
        if (owner < 0 || (unsigned long long)owner == uid)
            continue; /* gone since the list, or this container's own user's server */
        char command[64];
        snprintf(command, sizeof command, "get_client_list %ld\n", servers[s]);
        long clients[MAX_SERVERS];
        int nclients = control(control_path, pipe_dir, command, reply, MAX_REPLY, err, sizeof err) == 0
                           ? parse_pids(reply, clients, MAX_SERVERS)
                           : 0; /* the server went away between the two commands */
        if (nclients <= 0)
            continue; /* idle: the daemon replaces it with this user's server at the first cuInit */
        char list[256] = "";
        size_t used = 0;
        for (int c = 0; c < nclients && c < MAX_SERVERS && used < sizeof list - 16; c++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%ld", c ? ", " : "", clients[c]);
        hook_error("mps-user: GPU %s: its MPS server (pid %ld) serves uid %lld, with %d client(s) (pids %s); "
                   "this container runs as uid %llu, and MPS serves one user per GPU at a time: it would block "
                   "in cuInit. The container starts once uid %lld's clients have exited (the kubelet retries "
                   "it); give the pods of one mps GPU one runAsUser (docs/enforcement.md)",
                   gpu, servers[s], owner, nclients, list, uid, owner);
        rc = 1;
    }
    free(reply);
    return rc;
}

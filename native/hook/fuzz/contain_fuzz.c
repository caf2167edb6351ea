/*
 * contain_fuzz.c: a libFuzzer-compatible target for what every root sub-command of carve-cdi-hook does in a
 * hostile container root: the contained lookups of contain.c (rooted_dir, rooted_parent, rooted_write,
 * rooted_read) and the create-symlinks sub-command's arguments and links (symlinks.c).
 *
 *   make -C native fuzz && native/build/fuzz/contain_fuzz <iterations> <seed> <corpus files>
 *
 * An input is lines. The first build an image in a fresh container root (what a tenant ships):
 *   d <path>             a directory          f <path>            a regular file
 *   l <path> <target>    a symlink (any target: absolute, "..", /proc/self/root/..., a loop)
 * then what the hook is asked to do, in order:
 *   w <path>             rooted_write(path) (preload and update-ldcache write this way)
 *   m <path>             rooted_dir(path, create)
 *   r <path>             rooted_read(path)
 *   a <arg>              one argument of create-symlinks (--link <target>::<link>), run at the end
 * Image paths are created beneath the root without following anything (a line whose parent holds a
 * symlink is skipped): the image's own tree, whatever its links say.
 *
 * The process first moves into a private mount namespace with a tmpfs of its own as its "/" (chroot), which
 * holds only /root (the container root) and /host/canary: a lookup that escaped the container root would
 * land there, never on the real host. Beyond ASan+UBSan it checks:
 *   - nothing outside the container root changes: "/" holds root, host, proc (for LeakSanitizer) and
 *     crash (fuzz_driver.c's $FUZZ_CRASH_DIR) only, /host holds canary only, canary keeps its content;
 *   - create-symlinks answers 2 exactly when its arguments are malformed (an independent check of
 *     "--link <non-empty target>::/<path>" pairs), and then it changed nothing in the root;
 *   - every link it reports made reads back, through the same contained lookup, as a symlink with that
 *     target text; every file rooted_write reports written reads back with what was written and its
 *     mode; rooted_dir hands out a directory only, rooted_read no more than its bound.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../hook.h"

#define MAX_LINES 48
#define MAX_ARGS 16
#define MAX_WRITES 4
static const char CANARY[] = "host file: never touched by the hook";
static const char WRITTEN[] = "written by the hook";
static void setup_jail(void)
{
    /* root.c's messages (one per refused input): buffered, not a write(2) each. */
    static char errbuf[1 << 16];
    setvbuf(stderr, errbuf, _IOFBF, sizeof errbuf);
    /* A private mount namespace and a tmpfs as our root: escapes land in it, fsync costs nothing. */
    char base[] = "/tmp/carve-contain-fuzz.XXXXXX";
    const char *tmp = getenv("TMPDIR");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/carve-contain-fuzz.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    char *dir = mkdtemp(path) ? path : mkdtemp(base);
    if (!dir)
        abort();
    /* fuzz_driver.c saves a failing input in $FUZZ_CRASH_DIR: bound into the jail as /crash. */
    char crash[PATH_MAX];
    const char *wanted = getenv("FUZZ_CRASH_DIR");
    if (!realpath(wanted ? wanted : ".", crash))
        abort();
    int jailed = unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
                 mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0755") == 0;
    if (chdir(dir) != 0 || mkdir("host", 0755) != 0)
        abort();
    if (jailed) {
        /* LeakSanitizer reads /proc/<pid>/task at exit; the container root has no /proc of its own. */
        if (mkdir("proc", 0555) != 0 || mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL))
            rmdir("proc");
        if (mkdir("crash", 0755) != 0 || mount(crash, "crash", NULL, MS_BIND, NULL) != 0)
            rmdir("crash");
        else
            setenv("FUZZ_CRASH_DIR", "/crash", 1);
        jailed = chroot(".") == 0;
    }
    if (!jailed)
        fprintf(stderr, "contain_fuzz: no private tmpfs root (not root?): escapes to the real / go unseen\n");
    int fd = open("host/canary", O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0 || write(fd, CANARY, sizeof CANARY - 1) != (ssize_t)(sizeof CANARY - 1))
        abort();
    close(fd);
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (type == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* The jail's top level ("root", "host") and /host's ("canary") are all there is, canary intact. */
static void check_outside(void)
{
    static const char *const top[] = {"host", "root", "proc", "crash"};
    DIR *d = opendir(".");
    if (!d)
        abort();
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (strcmp(e->d_name, top[0]) && strcmp(e->d_name, top[1]) && strcmp(e->d_name, top[2]) &&
            strcmp(e->d_name, top[3]))
            abort(); /* something was created outside the container root */
    }
    closedir(d);
    d = opendir("host");
    if (!d)
        abort();
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "canary"))
            abort(); /* a link or file landed in the host's directory */
    closedir(d);
    struct stat st;
    char buf[sizeof CANARY];
    int fd = open("host/canary", O_RDONLY | O_NOFOLLOW);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_mode % 01000 != 0644)
        abort();
    if (read(fd, buf, sizeof buf) != (ssize_t)(sizeof CANARY - 1) || memcmp(buf, CANARY, sizeof CANARY - 1))
        abort(); /* the host file was written through */
    close(fd);
}

/* A fingerprint of the root's tree (names, types, link texts, sizes): "changed nothing" is equality. */
static uint64_t tree_hash;

static void mix(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        tree_hash = (tree_hash ^ b[i]) * 0x100000001b3ULL;
}

static int hash_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)ftw;
    mix(path, strlen(path) + 1);
    mix(&type, sizeof type);
    mix(&st->st_size, sizeof st->st_size);
    if (type == FTW_SL) {
        char text[PATH_MAX];
        ssize_t n = readlink(path, text, sizeof text);
        if (n > 0)
            mix(text, (size_t)n);
    }
    return 0;
}

static uint64_t root_fingerprint(void)
{
    tree_hash = 0xcbf29ce484222325ULL;
    nftw("root", hash_entry, 16, FTW_PHYS);
    return tree_hash;
}

/* Image set-up: each component created beneath the root, nothing followed (RESOLVE_NO_SYMLINKS). */
static int image_parent(int rootfd, const char *path, char base[NAME_MAX + 1])
{
    while (*path == '/')
        path++;
    const char *slash = strrchr(path, '/');
    const char *b = slash ? slash + 1 : path;
    if (!*b || strlen(b) > NAME_MAX || !strcmp(b, ".") || !strcmp(b, ".."))
        return -1;
    strcpy(base, b);
    char parent[PATH_MAX];
    size_t plen = slash ? (size_t)(slash - path) : 0;
    memcpy(parent, path, plen);
    parent[plen] = '\0';
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    return (int)syscall(SYS_openat2, rootfd, plen ? parent : ".", &how, sizeof how);
}

static void build_image(int rootfd, char op, const char *path, const char *target)
{
    char base[NAME_MAX + 1];
    int dirfd = image_parent(rootfd, path, base);
    if (dirfd < 0)
        return;
    if (op == 'd')
        mkdirat(dirfd, base, 0755);
    else if (op == 'l')
        symlinkat(target, dirfd, base);
    else {
        int fd = openat(dirfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) {
            if (write(fd, "image", 5) != 5)
                abort();
            close(fd);
        }
    }
    close(dirfd);
}

/* What symlinks.c must accept: pairs of "--link" and "<target>::/<link>", target non-empty. */
static int arguments_valid(int argc, char **argv)
{
    for (int i = 0; i < argc; i += 2) {
        if (i + 1 >= argc || strcmp(argv[i], "--link"))
            return 0;
        const char *sep = strstr(argv[i + 1], "::");
        if (!sep || sep == argv[i + 1] || sep[2] != '/' || strlen(argv[i + 1]) >= PATH_MAX)
            return 0;
    }
    return 1;
}

/* The link a create-symlinks pair made, read back through the contained lookup. */
static void check_link(int rootfd, const char *spec)
{
    const char *sep = strstr(spec, "::");
    char base[NAME_MAX + 1], text[PATH_MAX];
    int dirfd = rooted_parent(rootfd, sep + 2, 0, base);
    if (dirfd < 0)
        abort(); /* reported made, but its directory is not there */
    ssize_t n = readlinkat(dirfd, base, text, sizeof text - 1);
    close(dirfd);
    if (n < 0 || (size_t)n != (size_t)(sep - spec) || memcmp(text, spec, (size_t)n))
        abort(); /* not a symlink with the asked target */
}

/* What rooted_write wrote at <parent>/<final component> (trailing slashes ignored, as it does), read back
 * through the same contained lookup without following the final component. */
static void check_written(int rootfd, const char *path)
{
    char base[NAME_MAX + 1], text[sizeof WRITTEN];
    int dirfd = rooted_parent(rootfd, path, 0, base);
    int fd = dirfd < 0 ? -1 : openat(dirfd, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_mode % 01000 != 0644)
        abort(); /* reported written, but no regular file of that mode is there */
    if (read(fd, text, sizeof text) != (ssize_t)(sizeof WRITTEN - 1) || memcmp(text, WRITTEN, sizeof text - 1))
        abort(); /* reported written, reads back otherwise */
    close(fd);
    close(dirfd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        setup_jail();
        ready = 1;
    }
    nftw("root", remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (mkdir("root", 0755) != 0)
        abort();
    int rootfd = open("root", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        abort();
    struct hook_root root = {.path = "/root", .fd = rootfd};

    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    char *argv[MAX_ARGS + 1];
    int argc = 0, lines = 0, writes = 0;
    for (char *line = text, *next; line && lines < MAX_LINES; line = next, lines++) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (strlen(line) < 2 || line[1] != ' ')
            continue;
        char op = line[0], *arg = line + 2;
        if (op == 'a') {
            if (argc < MAX_ARGS)
                argv[argc++] = arg;
        } else if (op == 'd' || op == 'f') {
            build_image(rootfd, op, arg, NULL);
        } else if (op == 'l') {
            char *target = strchr(arg, ' ');
            if (target) {
                *target++ = '\0';
                build_image(rootfd, op, arg, target);
            }
        } else if (op == 'w' && writes < MAX_WRITES) {
            writes++;
            if (rooted_write(rootfd, arg, WRITTEN, sizeof WRITTEN - 1, 0644) == 0)
                check_written(rootfd, arg);
        } else if (op == 'm') {
            int fd = rooted_dir(rootfd, arg, 1);
            struct stat st;
            if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)))
                abort();
            if (fd >= 0)
                close(fd);
        } else if (op == 'r') {
            size_t len = 0;
            char *got = rooted_read(rootfd, arg, 1 << 16, &len);
            if (got && len > (1 << 16))
                abort(); /* past its bound */
            free(got);
        }
    }
    argv[argc] = NULL;
    if (argc) {
        if (!arguments_valid(argc, argv)) {
            uint64_t before = root_fingerprint();
            if (run_create_symlinks(&root, argc, argv) != 2)
                abort(); /* malformed arguments must be refused as such */
            if (root_fingerprint() != before)
                abort(); /* ... before anything is made */
        } else {
            for (int i = 0; i < argc; i += 2) {
                int rc = run_create_symlinks(&root, 2, argv + i);
                if (rc == 0)
                    check_link(rootfd, argv[i + 1]);
                else if (rc != 1)
                    abort();
            }
        }
    }
    check_outside();
    close(rootfd);
    free(text);
    return 0;
}

/*
 * ldcache.c: `update-ldcache --ldconfig <path> --folder <dir> ...`: make the mounted driver libraries
 * known to the container's loader (its /etc/ld.so.cache), whatever the image's distribution.
 *
 * The ldconfig run is carve's own (the plugin image's, copied to the host next to this hook), never the
 * image's: the image is untrusted and this runs as root. It is opened on the host before entering the
 * container root and must be a static ELF (no PT_INTERP), so nothing of the image is loaded into it; it
 * is then run with fexecve() inside the root. The folders also go into
 * /etc/ld.so.conf.d/00-carve-driver.conf, so an ldconfig the container runs later keeps them, and the
 * library directories of both layouts that exist in the image are named on the command line, so a
 * Debian-built ldconfig also caches a RHEL image's /usr/lib64 and the reverse.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hook.h"

#define MAX_FOLDERS 64
#define CONF_DIR "/etc/ld.so.conf.d"
#define CONF_FILE CONF_DIR "/00-carve-driver.conf"

static const char *const SYSTEM_DIRS[] = {
    "/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
};

/* 0 when `fd` is a regular, statically linked 64-bit ELF executable. */
static int check_static_elf(int fd, const char *path)
{
    struct stat st;
    Elf64_Ehdr eh;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        hook_error("update-ldcache: %s is not a regular file", path);
        return -1;
    }
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr)) {
        hook_error("update-ldcache: %s is not a 64-bit ELF executable", path);
        return -1;
    }
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (Elf64_Off)i * sizeof ph)) != (ssize_t)sizeof ph) {
            hook_error("update-ldcache: %s: truncated program headers", path);
            return -1;
        }
        if (ph.p_type == PT_INTERP) {
            /* A dynamic ldconfig would load the image's ld.so and libc, as root. */
            hook_error("update-ldcache: %s is dynamically linked; a static ldconfig is required", path);
            return -1;
        }
    }
    return 0;
}

static int write_conf(const char *const *folders, int n)
{
    char buf[MAX_FOLDERS * (PATH_MAX + 1)];
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s\n", folders[i]);
    struct stat st;
    if (make_dirs(CONF_DIR, 0755) != 0)
        return -1;
    if (lstat("/etc/ld.so.conf", &st) != 0 && errno == ENOENT) {
        /* Distroless images have none: make one that reads the drop-in directory. */
        static const char include[] = "include " CONF_DIR "/*.conf\n";
        if (write_replacing("/etc/ld.so.conf", include, sizeof include - 1, 0644) != 0)
            return -1;
    }
    return write_replacing(CONF_FILE, buf, len, 0644);
}

int run_update_ldcache(const char *root, int argc, char **argv)
{
    const char *ldconfig = NULL;
    const char *folders[MAX_FOLDERS];
    int nfolders = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--ldconfig") == 0 && i + 1 < argc) {
            ldconfig = argv[++i];
        } else if (strcmp(argv[i], "--folder") == 0 && i + 1 < argc) {
            const char *f = argv[++i];
            if (f[0] != '/' || strlen(f) >= PATH_MAX || strchr(f, '\n') || nfolders == MAX_FOLDERS) {
                hook_error("update-ldcache: --folder %s: expected an absolute path (at most %d)", f,
                           MAX_FOLDERS);
                return 2;
            }
            folders[nfolders++] = f;
        } else {
            hook_error("update-ldcache: unexpected argument %s", argv[i]);
            return 2;
        }
    }
    if (!ldconfig || ldconfig[0] != '/') {
        hook_error("update-ldcache: --ldconfig needs the absolute host path of a static ldconfig");
        return 2;
    }
    int fd = open(ldconfig, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        hook_error("update-ldcache: opening %s: %s", ldconfig, strerror(errno));
        return 1;
    }
    if (check_static_elf(fd, ldconfig) != 0 || enter_root(root, fd) != 0)
        return 1;
    if (nfolders > 0 && write_conf(folders, nfolders) != 0) {
        hook_error("update-ldcache: writing %s: %s", CONF_FILE, strerror(errno));
        return 1;
    }

    const char *args[8 + MAX_FOLDERS + sizeof SYSTEM_DIRS / sizeof *SYSTEM_DIRS];
    int n = 0;
    args[n++] = "ldconfig";
    args[n++] = "-f";
    args[n++] = "/etc/ld.so.conf";
    args[n++] = "-C";
    args[n++] = "/etc/ld.so.cache";
    for (int i = 0; i < nfolders; i++)
        args[n++] = folders[i];
    for (size_t i = 0; i < sizeof SYSTEM_DIRS / sizeof *SYSTEM_DIRS; i++) {
        struct stat st;
        if (stat(SYSTEM_DIRS[i], &st) == 0 && S_ISDIR(st.st_mode))
            args[n++] = SYSTEM_DIRS[i];
    }
    args[n] = NULL;
    static char *const no_env[] = {NULL};
    pid_t pid = fork();
    if (pid < 0) {
        hook_error("update-ldcache: fork: %s", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        fexecve(fd, (char *const *)args, no_env);
        hook_error("update-ldcache: running %s: %s", ldconfig, strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            hook_error("update-ldcache: waiting for ldconfig: %s", strerror(errno));
            return 1;
        }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        hook_error("update-ldcache: ldconfig failed (status %d)", status);
        return 1;
    }
    return 0;
}

/*
 * ldcache.c: `update-ldcache --ldconfig <path> --folder <dir> ...`: make the mounted driver libraries
 * known to the container's loader (its /etc/ld.so.cache), whatever the image's distribution.
 *
 * The ldconfig run is carve's own (the plugin image's, copied to the host next to this hook), never the
 * image's: the image is untrusted and this runs as root. It is opened on the host and must be a static
 * ELF (no PT_INTERP), so nothing of the image is loaded into it. It runs contained:
 *  - in a mount namespace of its own (nested in the hook's private one, where the container's /proc and
 *    /sys are already detached), pivot_root()ed into the container root with the host's tree detached:
 *    no path it follows, the image's symlinks and SONAMEs included, can reach a host file;
 *  - with -X: it creates no links at all (a SONAME is the image's text: "../../x" or "/etc/x" would be a
 *    link path), and -i: no auxiliary cache is written;
 *  - writing its cache with -C into a private tmpfs the hook mounted over the (emptied) /proc directory,
 *    never into the image's /etc; it is killed after LDCONFIG_TIMEOUT seconds.
 * The hook then drops every cache entry whose SONAME names a path ('/' in it, ".", "..", empty), with a
 * warning naming it, and writes the result to /etc/ld.so.cache with the contained, atomic write.
 * The folders also go into
 * /etc/ld.so.conf.d/00-carve-driver.conf, so an ldconfig the container runs later keeps them, and the
 * library directories of both layouts that exist in the image are named on the command line, so a
 * Debian-built ldconfig also caches a RHEL image's /usr/lib64 and the reverse.
 */
#include <elf.h>
#include <linux/openat2.h>
#include <sched.h>
#include <signal.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hook.h"

#define MAX_FOLDERS 64
#define CONF_DIR "/etc/ld.so.conf.d"
#define CONF_FILE CONF_DIR "/00-carve-driver.conf"
#define SCRATCH "proc" /* the container dir (emptied by contain_enter) the scratch tmpfs covers */
#define SCRATCH_CACHE "ld.so.cache" /* ldconfig's output in it */
#define MAX_CACHE (64u << 20)
#define LDCONFIG_TIMEOUT 120

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

static int write_conf(int rootfd, const char *const *folders, int n)
{
    char buf[MAX_FOLDERS * (PATH_MAX + 1)];
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s\n", folders[i]);
    char base[NAME_MAX + 1];
    int etc = rooted_parent(rootfd, "/etc/ld.so.conf", 1, base);
    if (etc < 0) {
        hook_error("update-ldcache: /etc: %s", contained_error(errno));
        return -1;
    }
    struct stat st;
    int missing = fstatat(etc, base, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
    close(etc);
    if (missing) {
        /* Distroless images have none: make one that reads the drop-in directory. */
        static const char include[] = "include " CONF_DIR "/*.conf\n";
        if (rooted_write(rootfd, "/etc/ld.so.conf", include, sizeof include - 1, 0644) != 0) {
            hook_error("update-ldcache: writing /etc/ld.so.conf: %s", contained_error(errno));
            return -1;
        }
    }
    if (rooted_write(rootfd, CONF_FILE, buf, len, 0644) != 0) {
        hook_error("update-ldcache: writing %s: %s", CONF_FILE, contained_error(errno));
        return -1;
    }
    return 0;
}

/* A private tmpfs over the container's /proc directory (in the hook's namespace only): ldconfig's
 * only writable place. Returns a readable descriptor of it, or -1 after a message. */
static int mount_scratch(int rootfd)
{
    /* A container root has /proc (the runtime mounts it there); an unpacked image may lack it. */
    int dir = rooted_dir(rootfd, SCRATCH, 1);
    if (dir < 0) {
        hook_error("update-ldcache: /" SCRATCH " in the container (scratch space for ldconfig): %s",
                   contained_error(errno));
        return -1;
    }
    int rc = fchdir(dir) == 0 ? mount("tmpfs", ".", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                      "size=64m,mode=0700") : -1;
    int saved = errno;
    close(dir);
    if (chdir("/") != 0 || rc != 0) {
        hook_error("update-ldcache: mounting a scratch tmpfs on the container's /" SCRATCH ": %s",
                   strerror(saved));
        return -1;
    }
    /* Now a mount point: looked up without RESOLVE_NO_XDEV, and it must be the tmpfs just mounted. */
    struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, rootfd, SCRATCH, &how, sizeof how);
    struct statfs sf;
    if (fd < 0 || fstatfs(fd, &sf) != 0 || sf.f_type != TMPFS_MAGIC) {
        hook_error("update-ldcache: the scratch tmpfs on /" SCRATCH " is not there");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* In the forked child: a namespace of its own, the container root as "/", the host's tree detached,
 * then ldconfig. Never returns. */
static void exec_contained(const char *root, int ldconfig, char *const *args)
{
    static char *const no_env[] = {NULL};
    const char *step = "unshare";
    if (unshare(CLONE_NEWNS) != 0)
        goto fail;
    step = "bind-mounting the root";
    if (mount(root, root, NULL, MS_BIND | MS_REC, NULL) != 0)
        goto fail;
    step = "entering the root";
    if (chdir(root) != 0)
        goto fail;
    /* pivot_root(".", "."): the old root ends up under the new one and is detached at once. */
    if (syscall(SYS_pivot_root, ".", ".") == 0) {
        step = "detaching the host's tree";
        if (umount2(".", MNT_DETACH) != 0)
            goto fail;
    } else {
        /* pivot_root needs "/" to be a mount point (not so under some chroots): then chroot, still in
         * the private namespace without /proc and /sys, with no descriptor open outside. */
        step = "chroot";
        if (chroot(".") != 0)
            goto fail;
    }
    step = "chdir /";
    if (chdir("/") != 0)
        goto fail;
    alarm(LDCONFIG_TIMEOUT); /* kept across exec: a hung ldconfig dies of SIGALRM */
    step = "exec";
    fexecve(ldconfig, args, no_env);
fail:
    hook_error("update-ldcache: running ldconfig in the container root: %s: %s", step, strerror(errno));
    _exit(127);
}

static int run_ldconfig(const struct hook_root *root, int ldconfig, char *const *args)
{
    pid_t pid = fork();
    if (pid < 0) {
        hook_error("update-ldcache: fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0)
        exec_contained(root->path, ldconfig, args);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            hook_error("update-ldcache: waiting for ldconfig: %s", strerror(errno));
            return -1;
        }
    if (WIFSIGNALED(status)) {
        hook_error("update-ldcache: ldconfig killed by signal %d%s", WTERMSIG(status),
                   WTERMSIG(status) == SIGALRM ? " (timed out)" : "");
        return -1;
    }
    if (WEXITSTATUS(status) != 0) {
        hook_error("update-ldcache: ldconfig failed (exit %d)", WEXITSTATUS(status));
        return -1;
    }
    return 0;
}

int run_update_ldcache(const struct hook_root *root, int argc, char **argv)
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
    int rc = 1, scratch = -1;
    char *cache = NULL;
    if (check_static_elf(fd, ldconfig) != 0)
        goto out;
    if (nfolders > 0 && write_conf(root->fd, folders, nfolders) != 0)
        goto out;
    if ((scratch = mount_scratch(root->fd)) < 0)
        goto out;

    const char *args[10 + MAX_FOLDERS + sizeof SYSTEM_DIRS / sizeof *SYSTEM_DIRS];
    int n = 0;
    args[n++] = "ldconfig";
    args[n++] = "-X"; /* no links */
    args[n++] = "-i"; /* no auxiliary cache */
    args[n++] = "-f";
    args[n++] = "/etc/ld.so.conf";
    args[n++] = "-C";
    args[n++] = "/" SCRATCH "/" SCRATCH_CACHE;
    for (int i = 0; i < nfolders; i++)
        args[n++] = folders[i];
    for (size_t i = 0; i < sizeof SYSTEM_DIRS / sizeof *SYSTEM_DIRS; i++) {
        int d = rooted_open(root->fd, SYSTEM_DIRS[i], O_PATH | O_DIRECTORY, 0);
        if (d >= 0) {
            args[n++] = SYSTEM_DIRS[i];
            close(d);
        }
    }
    args[n] = NULL;
    if (run_ldconfig(root, fd, (char *const *)args) != 0)
        goto out;

    int cfd = openat(scratch, SCRATCH_CACHE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    size_t len = 0;
    if (cfd >= 0) {
        cache = read_file_limited(cfd, MAX_CACHE, &len);
        close(cfd);
    }
    if (!cache) {
        hook_error("update-ldcache: reading the cache ldconfig wrote: %s", strerror(errno));
        goto out;
    }
    if (ldcache_drop_path_sonames(cache, &len) != 0)
        goto out;
    if (rooted_write(root->fd, "/etc/ld.so.cache", cache, len, 0644) != 0) {
        hook_error("update-ldcache: writing /etc/ld.so.cache: %s", contained_error(errno));
        goto out;
    }
    rc = 0;
out:
    free(cache);
    if (scratch >= 0)
        close(scratch);
    close(fd);
    return rc;
}

/*
 * limits.c: the plugin's limits file of a claim (carve_limits_t, <claim dir>/limits/limits).
 *
 * The plugin writes the file atomically (a new inode each time) into a directory it mounts read-only into
 * the claim's containers. The limiter keeps a private copy: the container can neither write the file nor
 * the copy's source, and nothing of the writable region is ever read as a limit.
 *
 * Trust: a limits file is trusted only when its directory is the plugin's own mount of that claim's limits
 * directory (mount_is_plugins), not merely a read-only file: a pod spec can make read-only mounts of its own
 * (readOnly volumeMounts, configMaps, readOnlyRootFilesystem). The plugin's CDI spec sets
 *   CARVE_LIMITS_SOURCE=<major>:<minor>:<root>
 * where <major>:<minor> is the device of the filesystem holding the plugin's claims directory on the host and
 * <root> that directory's path inside that filesystem, both as /proc/self/mountinfo writes them (fields 3
 * and 4; octal escapes kept). The runtime applies CDI's environment over the pod's (a variable of the same
 * name is replaced), so the pod spec cannot choose it. A limits file <dir>/<uid>/limits/limits is trusted when
 *   - it is a valid regular file no one but its owner may write, on a read-only filesystem, and
 *   - the last mountinfo entry whose mount point is <dir>/<uid>/limits (canonical) has device <major>:<minor>
 *     (also the file's st_dev), root <root>/<uid>/limits and the per-mount option ro.
 * A mount the pod made shows the kubelet's volume path (or a volume's own tmpfs device) as its root and
 * device, never the plugin's claims directory. Without the variable (a process that cleared its
 * environment) no file is trusted, and binding.c then picks, among the untrusted files naming a GPU, the
 * tightest (a forged file cannot loosen a limit). binding.c lets a trusted file win over any untrusted one.
 *
 * Fail closed: a limits directory that exists without a valid file in it (missing, a symlink, a device
 * node, a wrong size or version, out-of-range fields) makes the claim "broken": binding.c then refuses
 * every allocation on every GPU no valid trusted file names.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "limiter.h"

void carve_limits_path(const char *region_path, char *out, size_t len)
{
    const char *slash = strrchr(region_path, '/');
    int dir = slash ? (int)(slash - region_path) : 1;
    snprintf(out, len, "%.*s/limits/limits", dir, slash ? region_path : ".");
}

void carve_limits_from_config(carve_limits_t *l, const carve_config_t *cfg)
{
    memset(l, 0, sizeof *l);
    l->magic = CARVE_LIMITS_MAGIC;
    l->version = CARVE_LIMITS_VERSION;
    l->size = sizeof *l;
    l->device_count = CARVE_MAX_DEVICES; /* the environment cannot say how many: cover them all */
    l->core_policy = cfg->core_policy;
    l->priority = cfg->priority;
    l->oom_policy = cfg->oom_policy;
    for (int i = 0; i < CARVE_MAX_DEVICES; i++) {
        l->devices[i].memory_limit = cfg->memory_limit[i];
        l->devices[i].cores_limit = cfg->cores_limit[i];
    }
}

static const char *validate(const carve_limits_t *l)
{
    if (l->magic != CARVE_LIMITS_MAGIC)
        return "bad magic (not a carve limits file)";
    if (l->version != CARVE_LIMITS_VERSION)
        return "foreign limits version";
    if (l->size != sizeof(carve_limits_t))
        return "size field does not match this layout";
    if (l->device_count == 0 || l->device_count > CARVE_MAX_DEVICES)
        return "device count out of range";
    if (l->core_policy > CARVE_CORE_DISABLE || l->priority > CARVE_PRIORITY_LOW || l->oom_policy > CARVE_OOM_KILL)
        return "policy out of range";
    for (unsigned d = 0; d < l->device_count; d++)
        if (l->devices[d].cores_limit > 100 || memchr(l->devices[d].uuid, 0, sizeof l->devices[d].uuid) == NULL)
            return "device field out of range";
    return NULL;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo: undo it in place. */
static void unescape(char *s)
{
    char *out = s;
    for (char *in = s; *in; in++) {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' && in[3] >= '0' &&
            in[3] <= '7') {
            *out++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
            in += 3;
        } else {
            *out++ = *in;
        }
    }
    *out = 0;
}

/* The kernel writes a mount's per-mount options with "ro" or "rw" first (fs/proc_namespace.c,
 * show_mountinfo), then the others after commas. */
static int read_only(const char *options)
{
    return strncmp(options, "ro", 2) == 0 && (options[2] == ',' || options[2] == '\0');
}

/* Where the plugin's CDI spec mounts the anchor, read-only, beside the limiter (driver/names.py,
 * LIMITS_SOURCE_CONTAINER_PATH). A process chooses its children's environment, not the container's mounts:
 * where this file is, CARVE_LIMITS_SOURCE is not read (docs/security.md, "The limits file"). */
#define LIMITS_SOURCE_FILE "/usr/local/carve/lib/limits-source"

/* The anchor's text: the file's first line; without the file (an older plugin, a test's own mounts)
 * CARVE_LIMITS_SOURCE; NULL where the file is there but cannot be read (then nothing is trusted). */
static const char *anchor(char *buf, size_t len)
{
    int fd = open(LIMITS_SOURCE_FILE, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return errno == ENOENT ? carve_getenv("CARVE_LIMITS_SOURCE") : NULL;
    ssize_t n = read(fd, buf, len);
    close(fd);
    if (n <= 0 || (size_t)n == len)
        return NULL; /* empty, or longer than any anchor: never cut to another root */
    buf[n] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return buf;
}

/* The plugin's anchor (above), parsed: 0 when absent or malformed (then nothing is trusted). */
static int limits_source(unsigned *major_out, unsigned *minor_out, char *root, size_t len)
{
    char text[PATH_MAX + 64]; /* two numbers, two colons and a root shorter than PATH_MAX (below) */
    const char *v = anchor(text, sizeof text - 1);
    unsigned ma, mi;
    /* without the second colon %n is not reached and `used` stays 0: v[0] then begins the first number
     * (sscanf matched it), never a '/' */
    int used = 0;
    if (!v || sscanf(v, "%u:%u:%n", &ma, &mi, &used) != 2 || v[used] != '/' || strlen(v + used) >= len)
        return 0;
    snprintf(root, len, "%s", v + used);
    unescape(root);
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/')
        root[--n] = 0; /* "/a/claims/" and "/a/claims" name the same directory */
    *major_out = ma;
    *minor_out = mi;
    return 1;
}

/* 1 when the directory of `path` (<dir>/<uid>/limits/limits) is the plugin's own mount of claim <uid>'s
 * limits directory (see the top of this file); `dev` is the file's device. */
static int mount_is_plugins(const char *path, dev_t dev)
{
    char source_root[PATH_MAX], dir[PATH_MAX], mount_point[PATH_MAX];
    /* <source root>/<uid>/limits, never truncated: the uid is a name in mount_point (which also holds
     * "/limits"), so the two buffers' sizes hold it with its NUL; a truncated one could match another root */
    char want_root[sizeof source_root + sizeof mount_point];
    unsigned want_major, want_minor;
    if (!limits_source(&want_major, &want_minor, source_root, sizeof source_root))
        return 0;
    /* `path` is <dir>/limits/limits (carve_limits_path) in a buffer of 4096 bytes (both callers'), and a file
     * was opened at it: it has a slash (cut before its first one, it would be a name of 4095 bytes, which no
     * file has), and its directory fits `dir` */
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (!realpath(dir, mount_point))
        return 0;
    /* the claim's uid: the name of the directory above limits/ */
    char *limits_name = strrchr(mount_point, '/');
    if (!limits_name || strcmp(limits_name, "/limits") != 0 || limits_name == mount_point)
        return 0;
    *limits_name = 0;
    const char *uid = strrchr(mount_point, '/') + 1;
    snprintf(want_root, sizeof want_root, "%s/%s/limits", strcmp(source_root, "/") ? source_root : "", uid);
    *limits_name = '/';

    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return 0;
    int trusted = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        /* id parent major:minor root mount-point options [optional fields...] - fstype source super-options */
        unsigned ma, mi;
        char *save = NULL;
        char *id = strtok_r(line, " ", &save), *parent = strtok_r(NULL, " ", &save);
        char *devno = strtok_r(NULL, " ", &save), *root = strtok_r(NULL, " ", &save);
        char *mp = strtok_r(NULL, " ", &save), *options = strtok_r(NULL, " ", &save);
        if (!id || !parent || !devno || !root || !mp || !options || sscanf(devno, "%u:%u", &ma, &mi) != 2)
            continue;
        unescape(mp);
        if (strcmp(mp, mount_point) != 0)
            continue;
        unescape(root);
        /* the last entry at a mount point is the one on top: an over-mount decides, whoever made it; the file
         * read must be on that mount's device, and it the plugin's */
        trusted = ma == want_major && mi == want_minor && makedev(ma, mi) == dev && strcmp(root, want_root) == 0 &&
                  read_only(options);
    }
    free(line);
    fclose(f);
    return trusted;
}

/* `path` is <dir>/limits/limits (carve_limits_path): it has a slash. */
static int dir_exists(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    struct stat st;
    return lstat(dir, &st) == 0;
}

int carve_limits_read(const char *path, carve_limits_t *out, int *trusted, uint64_t *dev, uint64_t *ino,
                      int *fd_out, const char **problem)
{
    *problem = NULL;
    *trusted = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT && !dir_exists(path))
            return 0;
        *problem = errno == ELOOP ? "is a symlink" : errno == ENOENT ? "is missing" : "cannot be opened";
        return -1;
    }
    struct stat st;
    struct statvfs vfs;
    ssize_t n = -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        *problem = "is not a regular file";
    else if ((size_t)st.st_size != sizeof(carve_limits_t))
        *problem = "size does not match this layout";
    else if ((n = pread(fd, out, sizeof *out, 0)) != (ssize_t)sizeof *out)
        *problem = "cannot be read whole";
    else
        *problem = validate(out);
    if (!*problem) {
        *trusted = fstatvfs(fd, &vfs) == 0 && (vfs.f_flag & ST_RDONLY) && !(st.st_mode & (S_IWGRP | S_IWOTH)) &&
                   mount_is_plugins(path, st.st_dev);
        *dev = (uint64_t)st.st_dev;
        *ino = (uint64_t)st.st_ino;
        *fd_out = fd;
        return 1;
    }
    close(fd);
    return -1;
}

/* Keep `fd` (the limits file applied now) instead of the one applied last, closed if the descriptor is still that
 * file: a process may have closed every descriptor it did not open (a daemon does) and got this number back for
 * a file of its own, which closing it would break. Such a process loses the inode pin, not its file. */
static void replace_limits_fd(carve_open_region_t *r, int fd)
{
    carve_close_if_same(r->limits_fd, r->limits_dev, r->limits_ino);
    r->limits_fd = fd;
}

/* Apply a rewrite of one claim's limits: each field the limiter reads while running is one aligned store. */
static void apply(carve_open_region_t *r, const carve_limits_t *fresh)
{
    carve_limits_t *l = &r->limits;
    for (unsigned d = 0; d < l->device_count && d < fresh->device_count; d++) {
        __atomic_store_n(&l->devices[d].cores_limit, fresh->devices[d].cores_limit, __ATOMIC_RELAXED);
        __atomic_store_n(&l->devices[d].cores_reserved, fresh->devices[d].cores_reserved, __ATOMIC_RELAXED);
        __atomic_store_n(&l->devices[d].high_neighbours, fresh->devices[d].high_neighbours, __ATOMIC_RELAXED);
        if (!r->closed)
            __atomic_store_n(&l->devices[d].memory_limit, fresh->devices[d].memory_limit, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&l->core_policy, fresh->core_policy, __ATOMIC_RELAXED);
    __atomic_store_n(&l->priority, fresh->priority, __ATOMIC_RELAXED);
    __atomic_store_n(&l->oom_policy, fresh->oom_policy, __ATOMIC_RELAXED);
    __atomic_store_n(&l->generation, fresh->generation, __ATOMIC_RELEASE);
    for (int o = 0; o < CARVE_MAX_DEVICES; o++)
        if (carve_bind[o].region == r)
            __atomic_store_n(&carve_bind[o].memory_limit, l->devices[carve_bind[o].index].memory_limit,
                             __ATOMIC_RELAXED);
}

void carve_limits_refresh(void)
{
    for (int i = 0; i < carve_region_count; i++) {
        carve_open_region_t *r = &carve_regions[i];
        if (r->limits_from != CARVE_LIMITS_FILE)
            continue;
        carve_limits_t fresh;
        int trusted;
        uint64_t dev, ino;
        int fd;
        const char *problem;
        struct stat now;
        /* the plugin replaces the file (a new inode) to change it: the same inode is the same limits, and the
         * mount's trust (a read of mountinfo) is checked again only for a new file. The file applied last is
         * kept open (limits_fd), so no later file can get its inode number (ext4 and xfs reuse a freed one) */
        if (stat(r->limits_path, &now) == 0 && (uint64_t)now.st_ino == r->limits_ino &&
            (uint64_t)now.st_dev == r->limits_dev)
            continue;
        if (carve_limits_read(r->limits_path, &fresh, &trusted, &dev, &ino, &fd, &problem) != 1)
            continue; /* the last good limits stay: a file that turns bad later never loosens them */
        if (trusted < r->trusted || fresh.device_count != r->limits.device_count) {
            close(fd); /* not this claim's file as the limiter knows it: ignored, read again next tick */
            continue;
        }
        replace_limits_fd(r, fd);
        r->limits_ino = ino;
        r->limits_dev = dev;
        apply(r, &fresh);
    }
}

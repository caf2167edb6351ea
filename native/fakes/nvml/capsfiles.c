/*
 * capsfiles.c: the files the kernel driver publishes for MIG capabilities, written under a fake proc root.
 *
 * With CARVE_FAKE_PROC_ROOT set, creating a GPU or compute instance writes
 *   <root>/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/access        (and .../gi<G>/ci<C>/access)
 * as "DeviceFileMinor: N\nDeviceFileMode: 292\nDeviceFileModify: 1\n", and <root>/devices naming the
 * nvidia-caps major; destroying the instance removes its file. Minors follow the driver's mig-minors table:
 * 3 + gpu*135 + gi*9 for a GPU instance, plus 1 + ci for a compute instance. Without the variable nothing
 * is written. Failures are ignored: the plugin reports a missing file by name when it needs it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvmlfake.h"

#define FAKE_CAPS_MAJOR 237
#define CAPS_FILE_MODE 292 /* 0444, what the driver reports for MIG access files */

static const char *proc_root(void)
{
    const char *root = getenv("CARVE_FAKE_PROC_ROOT");
    return root && root[0] == '/' ? root : NULL;
}

static void make_parents(char *path)
{
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
}

static void write_text(const char *path, const char *text)
{
    char tmp[PATH_MAX];
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    make_parents(dir);
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    if (n == (ssize_t)strlen(text))
        rename(tmp, path);
    else
        unlink(tmp);
}

static int access_path(char *out, size_t len, unsigned gpu_minor, unsigned gi, int ci)
{
    const char *root = proc_root();
    if (!root)
        return -1;
    int n = ci < 0 ? snprintf(out, len, "%s/driver/nvidia/capabilities/gpu%u/mig/gi%u/access", root, gpu_minor, gi)
                   : snprintf(out, len, "%s/driver/nvidia/capabilities/gpu%u/mig/gi%u/ci%d/access", root,
                              gpu_minor, gi, ci);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

void fake_caps_created(unsigned gpu_minor, unsigned gi, int ci)
{
    char path[PATH_MAX], text[160];
    if (access_path(path, sizeof path, gpu_minor, gi, ci) != 0)
        return;
    unsigned minor = 3 + gpu_minor * 135 + gi * 9 + (ci < 0 ? 0 : 1 + (unsigned)ci);
    snprintf(text, sizeof text, "DeviceFileMinor: %u\nDeviceFileMode: %d\nDeviceFileModify: 1\n", minor,
             CAPS_FILE_MODE);
    write_text(path, text);
    char devices[PATH_MAX];
    snprintf(devices, sizeof devices, "%s/devices", proc_root());
    snprintf(text, sizeof text,
             "Character devices:\n  1 mem\n195 nvidia-frontend\n%d nvidia-caps\n509 nvidia-uvm\n\n"
             "Block devices:\n  8 sd\n",
             FAKE_CAPS_MAJOR);
    write_text(devices, text);
}

void fake_caps_destroyed(unsigned gpu_minor, unsigned gi, int ci)
{
    char path[PATH_MAX];
    if (access_path(path, sizeof path, gpu_minor, gi, ci) == 0)
        unlink(path);
}

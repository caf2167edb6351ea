/*
 * memlimits.h: `carve-cdi-hook memory-limits` (memlimits.c), the driver memory-partition hook.
 *
 *   carve-cdi-hook memory-limits --nvml <host path of libnvidia-ml.so.1> --record <dir>
 *       [--cgroup-root /sys/fs/cgroup] [--proc-root /proc] [--clear] --limit <gpu-uuid>:<soft>:<hard> ...
 *
 * A createRuntime hook: the runtime runs it as root in the host's namespaces once the container's
 * process (and so its cgroup) exists. It reads only the OCI state on stdin ("id", "pid"), the process's
 * <proc-root>/<pid>/cgroup, and NVML. With --clear (the poststop step) it reads the cgroup recorded by
 * the createRuntime run instead of a pid, and zeroes the soft limit while the cgroup still exists.
 */
#ifndef CARVE_HOOK_MEMLIMITS_H
#define CARVE_HOOK_MEMLIMITS_H

int run_memory_limits(int argc, char **argv);

#endif

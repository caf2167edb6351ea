/*
 * mpsuser.h: `carve-cdi-hook mps-user` (mpsuser.c, mpsuser_daemon.c, mpsuser_host.c), MPS's one-user-per-GPU
 * rule at container creation.
 *
 *   carve-cdi-hook mps-user --control <host path of nvidia-cuda-mps-control> --pipe-dir <the GPU's pipe dir>
 *       --gpu <uuid> [--proc-root /proc]
 *
 * A createRuntime hook: the runtime runs it as root in the host's namespaces with the OCI state on stdin.
 * It reads the bundle's config.json ("process"."user"."uid"), asks the GPU's MPS control daemon for its
 * servers and their clients, and exits 1 (the container does not start) while a server of another uid
 * has clients.
 */
#ifndef CARVE_HOOK_MPSUSER_H
#define CARVE_HOOK_MPSUSER_H

#include <stddef.h>

int run_mps_user(int argc, char **argv);

/* Between mps-user's files: mpsuser.c (the command and the uid lease), mpsuser_daemon.c (the daemon's
 * word), mpsuser_host.c (what both read of the host). */

/* One deadline for the whole hook: the lock and every command together. */
#define HOOK_DEADLINE_MS 15000

/* mpsuser_host.c */
/* CLOCK_MONOTONIC in milliseconds. */
long long now_ms(void);
/* The real uid of host process `pid` (its status file's "Uid:" line, first field); -1 when it is gone. */
long long real_uid(const char *proc_root, long pid);
/* Field 22 of <proc-root>/<pid>/stat (start time in clock ticks since boot); -1 when the process is gone. */
long long start_time(const char *proc_root, long pid);
/* A small regular file in directory `dirfd`, never through a link, a fifo or a device; NULL (errno) else. */
char *read_state_file(int dirfd, const char *name, size_t max, size_t *len);

/* mpsuser_daemon.c */
/* Is <pipe-dir>/control our daemon's? A socket owned by us whose peer is the pid the plugin recorded in
 * <state-dir>/daemon. 1 yes; 0 no (why in `why`). */
int daemon_is_ours(int statefd, const char *pipe_dir, const char *proc_root, char *why, size_t whylen);
/* The daemon's word: 1 when a server of another uid than `uid` has clients (named in `msg`), else 0
 * (a daemon that does not answer, with a warning: MPS is fail-open). */
int daemon_refuses(const char *control_path, const char *pipe_dir, const char *gpu, const char *proc_root,
                   unsigned long long uid, long long deadline, char *msg, size_t msglen);

#endif

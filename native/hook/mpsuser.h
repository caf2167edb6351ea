/*
 * mpsuser.h: `carve-cdi-hook mps-user` (mpsuser.c), MPS's one-user-per-GPU rule at container creation.
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

int run_mps_user(int argc, char **argv);

#endif

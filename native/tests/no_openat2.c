/*
 * no_openat2 <program> [args]: runs a program as on a kernel older than 5.6, where openat2(2) does not
 * exist: a seccomp filter answers ENOSYS to it. tests/integration/hook checks the hook then fails closed.
 */
#include <sys/syscall.h>

#include "seccomp_exec.h"

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: no_openat2 <program> [args]\n");
        return 2;
    }
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SECCOMP_EXEC_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    return seccomp_exec("no_openat2", filter, sizeof filter / sizeof *filter, argv + 1);
}

/*
 * no_mmap_of <bytes> <program> [args]: runs a program where every anonymous mmap(2) of exactly <bytes> fails
 * with ENOMEM, as when the address space is exhausted (RLIMIT_AS) at that call and no other: a seccomp
 * filter on the call's length and flags. tests/integration/limiter checks the limiter's own regions then.
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "seccomp_exec.h"

/* the low and high 32 bits of a 64-bit argument (x86_64 and aarch64, the architectures seccomp_exec.h knows, are little-endian) */
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + (i) * sizeof(uint64_t))
#define ARG_HI(i) (ARG_LO(i) + sizeof(uint32_t))

int main(int argc, char **argv)
{
    char *end = NULL;
    unsigned long long bytes = argc >= 3 ? strtoull(argv[1], &end, 10) : 0;
    if (argc < 3 || !end || *end || bytes == 0) {
        fprintf(stderr, "usage: no_mmap_of <bytes> <program> [args]\n");
        return 2;
    }
    /* each failed test jumps to the last instruction, ALLOW: jf = 11 - (its index) - 1 */
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SECCOMP_EXEC_ARCH, 0, 9),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mmap, 0, 7),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(1)), /* length */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)bytes, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_HI(1)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)(bytes >> 32), 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(3)), /* flags */
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, MAP_ANONYMOUS, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOMEM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    return seccomp_exec("no_mmap_of", filter, sizeof filter / sizeof *filter, argv + 2);
}

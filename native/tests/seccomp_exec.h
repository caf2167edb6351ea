/*
 * seccomp_exec.h: what the syscall-fault wrappers (no_openat2, no_mmap_of) share: install a seccomp filter
 * on this process, then exec the program under it. Header-only, as each test program is one .c file.
 */
#ifndef CARVE_TESTS_SECCOMP_EXEC_H
#define CARVE_TESTS_SECCOMP_EXEC_H

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#if defined(__x86_64__)
#define SECCOMP_EXEC_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SECCOMP_EXEC_ARCH AUDIT_ARCH_AARCH64
#else
#error "seccomp_exec.h: unknown architecture"
#endif

/* Runs argv[0] with `filter` installed; returns only on failure (2: the filter, 127: the exec). */
static int seccomp_exec(const char *name, struct sock_filter *filter, unsigned short len, char **argv)
{
    struct sock_fprog prog = {.len = len, .filter = filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        fprintf(stderr, "%s: seccomp: %s\n", name, strerror(errno));
        return 2;
    }
    execv(argv[0], argv);
    fprintf(stderr, "%s: %s: %s\n", name, argv[0], strerror(errno));
    return 127;
}

#endif

/*
 * glibc_compat.h: bind the limiter to symbol versions every glibc since 2.17 has.
 *
 * The limiter is preloaded into every process of a container, whatever its glibc. Built on a new glibc,
 * the linker would pick the newest versions (dlopen@GLIBC_2.34, pthread_create@GLIBC_2.34, stat@GLIBC_2.33,
 * ...) and the dynamic linker of an older image would refuse the library, and with /etc/ld.so.preload every
 * program of the image would exit at start. Each symbol below is pinned to the version it had in the
 * oldest supported glibc; new glibcs keep those as compatibility symbols. stat/lstat/fstat only exist as
 * functions since 2.33: before, they were inline wrappers around __xstat & co., which is what is used here.
 * tests/unit/limits/test_limiter_glibc.py fails when the built library needs anything above GLIBC_2.17.
 */
#ifndef CARVE_GLIBC_COMPAT_H
#define CARVE_GLIBC_COMPAT_H

#include <sys/stat.h>

#if defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__))
#if defined(__x86_64__)
#define CARVE_GLIBC_BASE "GLIBC_2.2.5"
#define CARVE_STAT_VER 1 /* _STAT_VER_LINUX */
#else
#define CARVE_GLIBC_BASE "GLIBC_2.17"
#define CARVE_STAT_VER 0
#endif
#define CARVE_PIN(sym) __asm__(".symver " #sym "," #sym "@" CARVE_GLIBC_BASE)
CARVE_PIN(dlopen);
CARVE_PIN(dlerror);
CARVE_PIN(dladdr);
CARVE_PIN(dlvsym);
CARVE_PIN(dlclose);
CARVE_PIN(pthread_create);
CARVE_PIN(pthread_once);
CARVE_PIN(pthread_sigmask);
CARVE_PIN(pthread_attr_init);
CARVE_PIN(pthread_attr_destroy);
CARVE_PIN(pthread_attr_setdetachstate);
CARVE_PIN(pthread_mutex_lock);
CARVE_PIN(pthread_mutex_unlock);
CARVE_PIN(pthread_atfork);
CARVE_PIN(__xstat);
CARVE_PIN(__lxstat);
CARVE_PIN(__fxstat);
extern int __xstat(int ver, const char *path, struct stat *buf);
extern int __lxstat(int ver, const char *path, struct stat *buf);
extern int __fxstat(int ver, int fd, struct stat *buf);
#define stat(path, buf) __xstat(CARVE_STAT_VER, (path), (buf))
#define lstat(path, buf) __lxstat(CARVE_STAT_VER, (path), (buf))
#define fstat(fd, buf) __fxstat(CARVE_STAT_VER, (fd), (buf))
#endif

#endif

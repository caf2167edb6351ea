/*
 * carve-cdi-hook: the createContainer hook carve's CDI specs name (docs/plugin.md, "CDI hooks").
 *
 * The runtime runs it as root, with the OCI state on stdin, after the container's mounts are set up and
 * before pivot_root: the process's "/" is the host's, and so is the container's /proc/1/root. Everything
 * under the container root belongs to the image, which is untrusted. main() reads the root's path from
 * the bundle's config.json, closes every other descriptor and calls contain_enter() (contain.c): a
 * private mount namespace without the container's /proc and /sys, and a descriptor of the root from
 * which every path is resolved with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV).
 * Any failure exits non-zero with a message naming the path: the runtime then does not start the
 * container.
 *
 *   carve-cdi-hook create-symlinks --link <target>::<link> ...
 *   carve-cdi-hook update-ldcache --ldconfig <host path of a static ldconfig> --folder <dir> ...
 *   carve-cdi-hook preload --library <absolute path in the container>
 *
 * Two createRuntime subcommands open no path of the container root and run without the containment:
 *   carve-cdi-hook memory-limits ...   (memlimits.c: the driver's memory partition)
 *   carve-cdi-hook mps-user ...        (mpsuser*.c: MPS's one user per GPU)
 */
#ifndef CARVE_HOOK_H
#define CARVE_HOOK_H

#include <limits.h>
#include <stddef.h>

/* Upper bounds on what the hook reads: the OCI state, config.json, the image's /etc/ld.so.preload. */
#define HOOK_MAX_STATE (1u << 20)
#define HOOK_MAX_CONFIG (16u << 20)
#define HOOK_MAX_PRELOAD (64u << 10)

/* errno value rooted_read() sets for "exists but is not a regular file" (no errno says exactly that). */
#define HOOK_ENOTREG 4095

/* What a subcommand works on: the container root's runtime path and a descriptor of it opened in the
 * hook's private mount namespace (every image path is resolved from it, see contain.c). */
struct hook_root {
    const char *path;
    int fd;
};

/* json.c: the string at a path of object keys (NULL-terminated), unescaped into a malloc'd string.
 * Returns NULL when the document is malformed or the path does not lead to a string. */
char *json_string_at(const char *doc, size_t len, const char *const *keys);
/* The non-negative integer (at most `max`) at a path of object keys into *out: 0, or -1 when the document
 * is malformed or the path leads elsewhere (a string, a fraction, a sign, a larger number). */
int json_uint_at(const char *doc, size_t len, const char *const *keys, unsigned long long max,
                 unsigned long long *out);

/* root.c */
/* The container's root directory from the OCI state document on `fd` (bundle + config.json root.path). */
char *container_root_from_state(int fd);
/* The bundle's config.json (read whole, at most HOOK_MAX_CONFIG) from the OCI state document on `fd`;
 * *bundle (malloc'd) is the bundle's path. NULL after a message. */
char *bundle_config_from_state(int fd, char **bundle, size_t *len);
/* The same from an OCI state document already read (`state`, `state_len` bytes). */
char *bundle_config_from_doc(const char *state, size_t state_len, char **bundle, size_t *len);
/* Reads at most `max` bytes of a whole file; NULL (errno set) on error or when it is larger. */
char *read_file_limited(int fd, size_t max, size_t *len);
/* Closes every descriptor above stderr. */
void close_other_fds(void);

/* contain.c */
/* Private mount namespace, container /proc and /sys detached, openat2 checked: the root's descriptor,
 * or -1 after a message. */
int contain_enter(const char *root);
/* openat2 from the root with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV (O_CLOEXEC added). */
int rooted_open(int rootfd, const char *path, int flags, unsigned mode);
/* An O_PATH descriptor of the directory `path`, created (mkdir -p, 0755, one mkdirat per component in
 * a directory already held) when `create`. -1 with errno. */
int rooted_dir(int rootfd, const char *path, int create);
/* The directory holding `path` (as rooted_dir) and its final component in `base`; -1 with errno
 * (EINVAL: no final component). */
int rooted_parent(int rootfd, const char *path, int create, char base[NAME_MAX + 1]);
/* A whole regular file of at most `max` bytes; NULL with errno (HOOK_ENOTREG, EFBIG, ...). */
char *rooted_read(int rootfd, const char *path, size_t max, size_t *len);
/* Atomically replaces `base` in directory `dirfd` (temp file, fsync, renameat): never written through a
 * symlink; fails when `base` is a directory. 0 or -1 (errno). */
int write_at(int dirfd, const char *base, const char *data, size_t len, unsigned mode);
/* write_at in the directory holding `path` (created as needed), then fsync of that directory. */
int rooted_write(int rootfd, const char *path, const char *data, size_t len, unsigned mode);
/* errno of a failed contained lookup, in words (ENOSYS, ELOOP, EXDEV explained). */
const char *contained_error(int err);

/* preload_list.c: /etc/ld.so.preload as glibc's loader reads it (elf/rtld.c). */
struct preload_list {
    char **names;
    size_t count;
};
/* Splits `text` into the names glibc would preload, in order. 0, or -1 on allocation failure. */
int preload_parse(const char *text, size_t len, struct preload_list *out);
void preload_free(struct preload_list *list);
/* The file to write: `lib` first, then the image's names but copies of `lib` and names glibc could
 * not read back from a file (see preload_list.c). malloc'd, NUL-terminated; *len its length. */
char *preload_compose(const char *lib, const struct preload_list *image, size_t *len);

/* ldcache_file.c: removes, in place, the entries of an ld.so.cache whose SONAME names a path ('/', ".",
 * "..", empty), with a warning for each. 0, or -1 after a message when the cache is malformed. */
int ldcache_drop_path_sonames(char *cache, size_t *len);

/* The subcommands: each returns the process exit code. To add one: a line in main.c's table. */
int run_create_symlinks(const struct hook_root *root, int argc, char **argv);
int run_update_ldcache(const struct hook_root *root, int argc, char **argv);
int run_preload(const struct hook_root *root, int argc, char **argv);

/* Messages go to stderr (the runtime shows them when the hook fails), prefixed with the program name. */
void hook_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void hook_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

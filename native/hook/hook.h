/*
 * carve-cdi-hook: the createContainer hook carve's CDI specs name (docs/plugin.md, "CDI hooks").
 *
 * The runtime runs it as root, with the OCI state on stdin, after the container's mounts are set up and
 * before pivot_root. Everything under the container root belongs to the image, which is untrusted: the
 * hook reads the root's path from the bundle's config.json, closes every other descriptor, chroot()s into
 * the root and only then touches files, so a symlink in the image (absolute or "..") resolves inside the
 * root. Final path components are opened with O_NOFOLLOW|O_NONBLOCK and must be regular files.
 *
 *   carve-cdi-hook create-symlinks --link <target>::<link> ...
 *   carve-cdi-hook update-ldcache --ldconfig <host path of a static ldconfig> --folder <dir> ...
 *   carve-cdi-hook preload --library <absolute path in the container>
 */
#ifndef CARVE_HOOK_H
#define CARVE_HOOK_H

#include <stddef.h>

/* Upper bounds on what the hook reads: the OCI state, config.json, the image's /etc/ld.so.preload. */
#define HOOK_MAX_STATE (1u << 20)
#define HOOK_MAX_CONFIG (16u << 20)
#define HOOK_MAX_PRELOAD (64u << 10)

/* json.c: the string at a path of object keys (NULL-terminated), unescaped into a malloc'd string.
 * Returns NULL when the document is malformed or the path does not lead to a string. */
char *json_string_at(const char *doc, size_t len, const char *const *keys);

/* root.c */
/* The container's root directory from the OCI state document on `fd` (bundle + config.json root.path). */
char *container_root_from_state(int fd);
/* Reads at most `max` bytes of a whole file; NULL (errno set) on error or when it is larger. */
char *read_file_limited(int fd, size_t max, size_t *len);
/* chroot()s into `root` after closing every descriptor but `keep` (-1: none). 0, or -1 with a message. */
int enter_root(const char *root, int keep);
/* mkdir -p inside the (chroot'ed) root; 0 or -1 (errno). */
int make_dirs(const char *path, unsigned mode);
/* Writes `data` to `path` through a temp file in the same directory and rename(): never through a
 * symlink; replaces whatever `path` is unless it is a directory. 0 or -1 (errno). */
int write_replacing(const char *path, const char *data, size_t len, unsigned mode);

/* The subcommands: each returns the process exit code. */
int run_create_symlinks(const char *root, int argc, char **argv);
int run_update_ldcache(const char *root, int argc, char **argv);
int run_preload(const char *root, int argc, char **argv);

/* Messages go to stderr (the runtime shows them when the hook fails), prefixed with the program name. */
void hook_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void hook_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

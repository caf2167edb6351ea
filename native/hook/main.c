/*
 * main.c: carve-cdi-hook's entry point: the subcommand, the container root from the OCI state on stdin,
 * the containment (contain_enter), then the subcommand (see hook.h for what each does and why it is
 * safe against a hostile image).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hook.h"
#include "memlimits.h"
#include "mpsuser.h"

struct subcommand {
    const char *name;
    int (*run)(const struct hook_root *root, int argc, char **argv);
};

/* One line per subcommand. */
static const struct subcommand SUBCOMMANDS[] = {
    {"create-symlinks", run_create_symlinks},
    {"update-ldcache", run_update_ldcache},
    {"preload", run_preload},
};

static int usage(void)
{
    hook_error("usage: carve-cdi-hook <subcommand> [args] (OCI state on stdin); subcommands:");
    for (size_t i = 0; i < sizeof SUBCOMMANDS / sizeof *SUBCOMMANDS; i++)
        hook_error("  %s", SUBCOMMANDS[i].name);
    hook_error("  memory-limits");
    hook_error("  mps-user");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    /* createRuntime/poststop: opens no path of the container's root (it reads the OCI state and the host's
     * /proc/<pid>/cgroup itself, memlimits.c), so it runs before, and without, the root containment. */
    if (strcmp(argv[1], "memory-limits") == 0)
        return run_memory_limits(argc - 2, argv + 2);
    /* createRuntime: reads config.json, the MPS daemon's replies and the host's /proc (mpsuser*.c). */
    if (strcmp(argv[1], "mps-user") == 0)
        return run_mps_user(argc - 2, argv + 2);
    const struct subcommand *cmd = NULL;
    for (size_t i = 0; i < sizeof SUBCOMMANDS / sizeof *SUBCOMMANDS; i++)
        if (strcmp(argv[1], SUBCOMMANDS[i].name) == 0)
            cmd = &SUBCOMMANDS[i];
    if (!cmd)
        return usage();
    close_other_fds();
    char *path = container_root_from_state(STDIN_FILENO);
    if (!path)
        return 1;
    struct hook_root root = {.path = path, .fd = contain_enter(path)};
    int rc = root.fd < 0 ? 1 : cmd->run(&root, argc - 2, argv + 2);
    if (root.fd >= 0)
        close(root.fd);
    free(path);
    return rc;
}

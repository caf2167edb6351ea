/*
 * main.c: carve-cdi-hook's entry point: the subcommand, then the container root from the OCI state on
 * stdin (see hook.h for what each subcommand does and why it is safe against a hostile image).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hook.h"
#include "memlimits.h"

static int usage(void)
{
    hook_error("usage: carve-cdi-hook create-symlinks --link <target>::<link> ... | "
               "update-ldcache --ldconfig <path> [--folder <dir> ...] | preload --library <path> "
               "(OCI state on stdin)");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    const char *cmd = argv[1];
    if (strcmp(cmd, "memory-limits") == 0) /* createRuntime/poststop: reads the state itself, no root */
        return run_memory_limits(argc - 2, argv + 2);
    if (strcmp(cmd, "create-symlinks") && strcmp(cmd, "update-ldcache") && strcmp(cmd, "preload"))
        return usage();
    char *root = container_root_from_state(STDIN_FILENO);
    if (!root)
        return 1;
    int rc;
    if (strcmp(cmd, "update-ldcache") == 0)
        rc = run_update_ldcache(root, argc - 2, argv + 2);
    else if (strcmp(cmd, "create-symlinks") == 0)
        rc = run_create_symlinks(root, argc - 2, argv + 2);
    else
        rc = run_preload(root, argc - 2, argv + 2);
    free(root);
    return rc;
}

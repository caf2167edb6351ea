/*
 * dlopen_probe: for each library name on the command line, dlopen() it the way a program does (a loader
 * search: LD_LIBRARY_PATH, /etc/ld.so.cache, the default directories) and print "<name> <path loaded>" or
 * "<name> ERROR <dlerror>". Used to check a container root built from a CDI spec (tests/integration/hook).
 */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
        struct link_map *map = NULL;
        if (!h || dlinfo(h, RTLD_DI_LINKMAP, &map) != 0 || !map) {
            const char *err = dlerror();
            printf("%s ERROR %s\n", argv[i], err ? err : "no link map");
            failed = 1;
            continue;
        }
        printf("%s %s\n", argv[i], map->l_name);
    }
    return failed;
}

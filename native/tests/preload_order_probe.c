/*
 * preload_order_probe: prints the path of every shared object the loader mapped, in link-map order
 * (the program, its preloads in order, then its needed libraries). tests/integration/hook runs it in
 * a container root under each /etc/ld.so.preload the hook wrote, to see the limiter first.
 */
#include <link.h>
#include <stdio.h>

static int print_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    if (info->dlpi_name && info->dlpi_name[0])
        printf("%s\n", info->dlpi_name);
    return 0;
}

int main(void)
{
    dl_iterate_phdr(print_object, NULL);
    return 0;
}

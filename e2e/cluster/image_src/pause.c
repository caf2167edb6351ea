/*
 * pause: the pod sandbox's process. As PID 1 of the pod it must exit on SIGTERM/SIGINT (PID 1 ignores
 * signals it has no handler for) and reap the zombies of a shared PID namespace. Built with gcc -static.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig)
{
    _exit(0);
}

static void reap(int sig)
{
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

int main(void)
{
    struct sigaction term = {.sa_handler = stop}, child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGTERM, &term, NULL);
    sigaction(SIGINT, &term, NULL);
    sigaction(SIGCHLD, &child, NULL);
    for (;;)
        pause();
    return 0;
}

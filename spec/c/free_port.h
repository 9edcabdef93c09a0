/*
 * free_port.h — a TCP port on the loopback that nothing listens on now, for
 * the C tests that start a listener or a server of their own, and a listener
 * that never answers. Ports come from
 * below the kernel's ephemeral range: one from that range (bind to port 0)
 * can go to another process's outgoing connection before our own bind.
 */
#ifndef SGW_SPEC_FREE_PORT_H
#define SGW_SPEC_FREE_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static inline int test_port_bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* A port free a moment ago, or -1. */
static inline int test_free_port(void)
{
    int ephemeral_low = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d", &ephemeral_low) != 1)
            ephemeral_low = 32768;
        fclose(f);
    }
    int high = (ephemeral_low > 65536 ? 65536 : ephemeral_low) - 1;
    int low = high - 12000 < 1024 ? 1024 : high - 12000;
    if (high < 1024 + 1000) { /* an ephemeral range from the bottom: no room below it */
        low = 20000;
        high = 30000;
    }
    /* ctest runs the specs of several processes at once: a port given out is
     * marked in the test services' directory, as spec/support/stack.lua does,
     * so that no two get the same one. */
    const char *dir = getenv("SGW_TEST_SERVICES_DIR");
    char ports[PATH_MAX], mark[PATH_MAX + 16];
    int claim = dir && *dir && snprintf(ports, sizeof ports, "%s/ports", dir) < (int)sizeof ports;
    if (claim) mkdir(ports, 0755);
    unsigned seed = 0;
    FILE *r = fopen("/dev/urandom", "rb");
    if (r) {
        if (fread(&seed, sizeof seed, 1, r) != 1)
            seed = (unsigned)getpid();
        fclose(r);
    } else {
        seed = (unsigned)getpid();
    }
    for (int i = 0; i < 200; i++) {
        seed = seed * 1103515245u + 12345u;
        int port = low + (int)((seed >> 8) % (unsigned)(high - low + 1));
        if (!test_port_bindable(port))
            continue;
        if (claim) {
            snprintf(mark, sizeof mark, "%s/%d", ports, port);
            if (mkdir(mark, 0755) != 0)
                continue;
        }
        return port;
    }
    return -1;
}

/* A listener on a free loopback port that nobody accepts from: the kernel
 * completes connections, and nothing ever answers them. Its socket, with
 * *port set, or -1. */
static inline int test_silent_listener(int *port)
{
    *port = test_free_port();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)*port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (*port < 0 || fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

#endif

/*
 * redis_fixture.h — what the Redis tests share: the configuration they run
 * with (a short retry interval, to be waited out) and a server that never
 * answers.
 */
#ifndef SGW_SPEC_REDIS_FIXTURE_H
#define SGW_SPEC_REDIS_FIXTURE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

/* config/sgw.conf with redis.retry_interval_ms = 300; 0 ok. */
static inline int redis_fixture_config(void)
{
    char err[512];
    if (config_load_file("config/sgw.conf", 1, err, sizeof err) != 0 ||
        config_set("redis.retry_interval_ms", "300", err, sizeof err) != 0) {
        printf("config: %s\n", err);
        return -1;
    }
    log_set_level(LOG_ERROR);        /* the failures the tests cause are expected */
    /* as in main.c: a write to a connection the server closed must fail
     * with EPIPE, not kill the process */
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

/* A listener that never accepts: connecting works (the kernel completes the
 * handshake), but no reply ever comes, so only the time-out ends a call.
 * Its socket (close it), or -1; url gets redis://127.0.0.1:port. */
static inline int redis_fixture_silent(char *url, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    snprintf(url, len, "redis://127.0.0.1:%d", ntohs(a.sin_port));
    return fd;
}

#endif

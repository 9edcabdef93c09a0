/*
 * slow_server.c — a deliberately slow HTTP server for the job runner's
 * tests: it answers every request after a delay and counts how many
 * requests it was holding at once, which shows whether a client really runs
 * its calls concurrently. Independent of sgw's code on purpose.
 *
 *   slow_server PORT DELAY_MS     (PORT 0: any free port)
 *
 * Prints "port N" on stdout once listening. Every request gets 200 and a
 * small JSON body after DELAY_MS ({"ok":true,"n":REQUEST,"conn":CONNECTION}:
 * the request's number and that of the connection it came on, both counted
 * from 1 since the start, so a client's connection reuse shows), except:
 *   GET /stats   {"peak":..,"current":..,"requests":..,"peak_connections":..}
 *                at once; peak is the most requests held at the same time
 *   POST /reset  zeroes the counters
 * and these query parameters change one answer: delay=MS, status=CODE,
 * size=BYTES (body of that many 'x').
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEAD 65536

static long        delay_ms;
static atomic_long current, peak, requests, conns, peak_conns, accepted;

static void raise_peak(atomic_long *p, long v) {
    long old = atomic_load(p);
    while (v > old && !atomic_compare_exchange_weak(p, &old, v)) {}
}

static void sleep_ms(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int respond(int fd, int status, const char *body, size_t len, int keep) {
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: %s\r\n\r\n",
                     status, status == 200 ? "OK" : "Status", len, keep ? "keep-alive" : "close");
    return write_all(fd, head, (size_t)n) || write_all(fd, body, len) ? -1 : 0;
}

/* Value of query parameter name in path, or -1. */
static long query_num(const char *path, const char *name) {
    const char *q = strchr(path, '?');
    size_t nl = strlen(name);
    while (q) {
        q++;
        if (strncmp(q, name, nl) == 0 && q[nl] == '=') return strtol(q + nl + 1, NULL, 10);
        q = strchr(q, '&');
    }
    return -1;
}

static void answer(int fd, const char *method, const char *path, int keep, long conn, int *ok) {
    char body[256];
    if (strcmp(path, "/stats") == 0) {
        int n = snprintf(body, sizeof body,
                         "{\"peak\":%ld,\"current\":%ld,\"requests\":%ld,\"peak_connections\":%ld}",
                         atomic_load(&peak), atomic_load(&current), atomic_load(&requests),
                         atomic_load(&peak_conns));
        *ok = respond(fd, 200, body, (size_t)n, keep) == 0;
        return;
    }
    if (strcmp(method, "POST") == 0 && strcmp(path, "/reset") == 0) {
        atomic_store(&peak, atomic_load(&current));
        atomic_store(&requests, 0);
        atomic_store(&peak_conns, atomic_load(&conns));
        *ok = respond(fd, 200, "{}", 2, keep) == 0;
        return;
    }
    long n = atomic_fetch_add(&requests, 1) + 1;
    raise_peak(&peak, atomic_fetch_add(&current, 1) + 1);
    long d = query_num(path, "delay");
    sleep_ms(d >= 0 ? d : delay_ms);
    long status = query_num(path, "status");
    long size = query_num(path, "size");
    /* Counted as held until the answer starts: a client may send its next
     * request as soon as this one's bytes arrive. */
    atomic_fetch_sub(&current, 1);
    if (size >= 0) {
        char *big = malloc((size_t)size + 1);
        if (big) {
            memset(big, 'x', (size_t)size);
            *ok = respond(fd, status > 0 ? (int)status : 200, big, (size_t)size, keep) == 0;
            free(big);
        } else {
            *ok = 0;
        }
    } else {
        int bl = snprintf(body, sizeof body, "{\"ok\":true,\"n\":%ld,\"conn\":%ld}", n, conn);
        *ok = respond(fd, status > 0 ? (int)status : 200, body, (size_t)bl, keep) == 0;
    }
}

static void *serve(void *arg) {
    int fd = (int)(intptr_t)arg;
    raise_peak(&peak_conns, atomic_fetch_add(&conns, 1) + 1);
    long conn = atomic_fetch_add(&accepted, 1) + 1;
    char *buf = malloc(MAX_HEAD + 1);
    size_t have = 0;
    int ok = buf != NULL;
    while (ok) {
        char *end;
        while (!(buf[have] = 0, end = strstr(buf, "\r\n\r\n"))) {
            if (have == MAX_HEAD) { ok = 0; break; }
            ssize_t r = recv(fd, buf + have, MAX_HEAD - have, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) { ok = 0; break; }
            have += (size_t)r;
        }
        if (!ok) break;
        size_t head_len = (size_t)(end - buf) + 4;
        char method[16] = "", path[2048] = "", version[16] = "";
        if (sscanf(buf, "%15s %2047s %15s", method, path, version) != 3) break;
        long clen = 0;
        int keep = strcmp(version, "HTTP/1.1") == 0;
        for (char *line = strstr(buf, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n")) {
            if (strncasecmp(line + 2, "content-length:", 15) == 0) clen = strtol(line + 17, NULL, 10);
            if (strncasecmp(line + 2, "connection:", 11) == 0 && strstr(line + 13, "close") &&
                strstr(line + 13, "close") < strstr(line + 2, "\r\n"))
                keep = 0;
        }
        /* Drop the body: it may extend past what was read. */
        size_t extra = have - head_len;
        long skip = clen - (long)extra;
        memmove(buf, buf + head_len + (clen < (long)extra ? (size_t)clen : extra),
                extra > (size_t)clen ? extra - (size_t)clen : 0);
        have = extra > (size_t)clen ? extra - (size_t)clen : 0;
        while (skip > 0) {
            char sink[4096];
            ssize_t r = recv(fd, sink, skip < (long)sizeof sink ? (size_t)skip : sizeof sink, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) { ok = 0; break; }
            skip -= r;
        }
        if (!ok) break;
        answer(fd, method, path, keep, conn, &ok);
        if (!keep) break;
    }
    free(buf);
    close(fd);
    atomic_fetch_sub(&conns, 1);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PORT DELAY_MS\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    delay_ms = atol(argv[2]);
    signal(SIGPIPE, SIG_IGN);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1024)) {
        perror("slow_server: listen");
        return 1;
    }
    socklen_t al = sizeof a;
    getsockname(ls, (struct sockaddr *)&a, &al);
    printf("port %d\n", ntohs(a.sin_port));
    fflush(stdout);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE) continue;
            perror("slow_server: accept");
            return 1;
        }
        pthread_t t;
        if (pthread_create(&t, &attr, serve, (void *)(intptr_t)fd)) close(fd);
    }
}

/*
 * notify.c — the systemd service notification protocol, without libsystemd.
 *
 * Under a Type=notify unit systemd passes NOTIFY_SOCKET (a unix datagram
 * socket: a path, or an abstract name written with a leading '@'); sgw says
 * READY=1 once it takes requests, RELOADING=1 and READY=1 around a reload and
 * STOPPING=1 when it drains. With WatchdogSec= systemd also passes
 * WATCHDOG_USEC (and WATCHDOG_PID, which must name this process); the main
 * loop then calls notify_watchdog_tick, which pings at half that interval so
 * that one late tick does not get the service killed. Outside systemd every
 * call is a quiet no-op. notify_init runs before any thread starts; sending
 * afterwards is one sendto, safe from any thread.
 */
#include "sgw.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int                notify_fd = -1;
static struct sockaddr_un notify_addr;
static socklen_t          notify_len;
static uint64_t           watchdog_ms;      /* half of WATCHDOG_USEC; 0: no watchdog */
static _Atomic uint64_t   next_ping_ms;

static uint64_t watchdog_from_env(void) {
    const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    if (!usec || !*usec) return 0;
    /* Meant for another process (a wrapper that exec'd us keeps its pid). */
    if (pid && *pid && strtoll(pid, NULL, 10) != (long long)getpid()) return 0;
    char *end;
    errno = 0;
    unsigned long long us = strtoull(usec, &end, 10);
    if (errno || *end || us == 0) {
        log_msg(LOG_WARN, "notify", "WATCHDOG_USEC is not a positive whole number; no watchdog pings");
        return 0;
    }
    uint64_t ms = us / 2000;
    return ms ? ms : 1;
}

int notify_init(void) {
    watchdog_ms = 0;
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path) return 0;
    size_t n = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || n >= sizeof notify_addr.sun_path) {
        log_msg(LOG_WARN, "notify", "NOTIFY_SOCKET is neither an absolute path nor an abstract name; not notifying");
        return -1;
    }
    memset(&notify_addr, 0, sizeof notify_addr);
    notify_addr.sun_family = AF_UNIX;
    memcpy(notify_addr.sun_path, path, n);
    if (path[0] == '@') notify_addr.sun_path[0] = 0;   /* abstract: no terminating NUL counted */
    notify_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/'));
    notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (notify_fd < 0) {
        log_msg(LOG_WARN, "notify", "cannot open a datagram socket: %s; not notifying", strerror(errno));
        return -1;
    }
    watchdog_ms = watchdog_from_env();
    atomic_store(&next_ping_ms, clock_mono_ms() + watchdog_ms);
    return 0;
}

void notify_close(void) {
    if (notify_fd >= 0) close(notify_fd);
    notify_fd = -1;
    watchdog_ms = 0;
}

int notify_send(const char *fmt, ...) {
    if (notify_fd < 0) return 0;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof msg) return -1;
    if (sendto(notify_fd, msg, (size_t)n, MSG_NOSIGNAL, (struct sockaddr *)&notify_addr, notify_len) < 0) {
        log_msg(LOG_WARN, "notify", "cannot notify the service manager: %s", strerror(errno));
        return -1;
    }
    return 0;
}

void notify_reloading(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    notify_send("RELOADING=1\nSTATUS=reloading handlers\nMONOTONIC_USEC=%llu",
                (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL);
}

uint64_t notify_watchdog_ms(void) { return watchdog_ms; }

void notify_watchdog_tick(void) {
    if (!watchdog_ms) return;
    uint64_t now = clock_mono_ms();
    if (now < atomic_load(&next_ping_ms)) return;
    atomic_store(&next_ping_ms, now + watchdog_ms);
    notify_send("WATCHDOG=1");
}

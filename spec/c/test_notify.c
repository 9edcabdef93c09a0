/*
 * test_notify.c — the systemd notification protocol (notify.c) against a
 * datagram socket the test binds where NOTIFY_SOCKET says, as systemd would:
 * a quiet no-op without it; READY=1 and a reload's RELOADING=1 with
 * MONOTONIC_USEC arrive as sent, to a path and to an abstract name; the
 * watchdog pings at half of WATCHDOG_USEC, not before, and only for the
 * process WATCHDOG_PID names; a NOTIFY_SOCKET that is neither is refused.
 */
#include "sgw.h"
#include "check.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* A datagram socket bound at name ("/path" or "@abstract"); -1 on failure. */
static int listen_at(const char *name) {
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    size_t n = strlen(name);
    memcpy(a.sun_path, name, n);
    if (name[0] == '@') a.sun_path[0] = 0;
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (name[0] == '/'));
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, len) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

/* The next datagram within ms into buf ("" when none came). */
static const char *next_message(int fd, int ms, char *buf, size_t len) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    buf[0] = 0;
    if (poll(&p, 1, ms) == 1) {
        ssize_t n = recv(fd, buf, len - 1, 0);
        buf[n > 0 ? n : 0] = 0;
    }
    return buf;
}

static void test_without_socket(void) {
    unsetenv("NOTIFY_SOCKET");
    check(notify_init() == 0, "no NOTIFY_SOCKET: nothing to set up", NULL);
    check(notify_send("READY=1") == 0, "and sending is a quiet no-op", NULL);
    check(notify_watchdog_ms() == 0, "and there is no watchdog", NULL);
    setenv("NOTIFY_SOCKET", "relative/path", 1);
    check(notify_init() == -1, "a NOTIFY_SOCKET that is neither a path nor an abstract name is refused", NULL);
    check(notify_send("READY=1") == 0, "and sending stays a no-op", NULL);
}

static void test_messages(const char *name) {
    char buf[600], label[160];
    int fd = listen_at(name);
    snprintf(label, sizeof label, "a socket at %s", name);
    check(fd >= 0, label, NULL);
    if (fd < 0) return;
    setenv("NOTIFY_SOCKET", name, 1);
    unsetenv("WATCHDOG_USEC");
    check(notify_init() == 0, "NOTIFY_SOCKET taken", name);
    check(notify_send("READY=1") == 0, "READY=1 sent", NULL);
    check(strcmp(next_message(fd, 2000, buf, sizeof buf), "READY=1") == 0, "READY=1 arrives", buf);
    notify_reloading();
    next_message(fd, 2000, buf, sizeof buf);
    check(strncmp(buf, "RELOADING=1\n", 12) == 0 && strstr(buf, "\nMONOTONIC_USEC=") != NULL,
          "a reload says RELOADING=1 with MONOTONIC_USEC", buf);
    notify_close();
    close(fd);
}

static void test_watchdog(const char *name) {
    char buf[600], pid[32];
    int fd = listen_at(name);
    check(fd >= 0, "a socket for the watchdog", name);
    if (fd < 0) return;
    setenv("NOTIFY_SOCKET", name, 1);
    setenv("WATCHDOG_USEC", "400000", 1);
    snprintf(pid, sizeof pid, "%ld", (long)getpid() + 1);
    setenv("WATCHDOG_PID", pid, 1);
    check(notify_init() == 0 && notify_watchdog_ms() == 0, "no watchdog for another process's WATCHDOG_PID", NULL);
    notify_close();

    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    setenv("WATCHDOG_PID", pid, 1);
    check(notify_init() == 0 && notify_watchdog_ms() == 200, "pings at half of WATCHDOG_USEC", NULL);
    uint64_t started = clock_mono_ms();
    notify_watchdog_tick();
    check(strcmp(next_message(fd, 0, buf, sizeof buf), "") == 0 || clock_mono_ms() - started >= 200,
          "no ping before the interval", buf);
    uint64_t deadline = started + 5000;
    buf[0] = 0;
    while (!buf[0] && clock_mono_ms() < deadline) {
        notify_watchdog_tick();
        next_message(fd, 20, buf, sizeof buf);
    }
    check(strcmp(buf, "WATCHDOG=1") == 0 && clock_mono_ms() - started >= 200, "WATCHDOG=1 once the interval passed", buf);
    notify_close();
    close(fd);
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
}

int main(void) {
    log_set_level(LOG_ERROR);
    char path[128], abstract[128];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/sgw_test_notify_%ld.sock", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    snprintf(abstract, sizeof abstract, "@sgw_test_notify_%ld", (long)getpid());

    test_without_socket();
    unlink(path);
    test_messages(path);
    unlink(path);
    test_messages(abstract);
    test_watchdog(abstract);
    unsetenv("NOTIFY_SOCKET");
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/*
 * test_admin.c — the operator listener (admin.c) on a port of its own, over
 * real HTTP: admin.token asked as a Bearer token (any case of "Bearer",
 * spaces around it), refused with 401 and WWW-Authenticate otherwise;
 * /healthz; /readyz saying unavailable without a database; /metrics in the
 * text format; the clock control only when clock.allow_control is set, and
 * its argument checked; 404 for other paths and methods.
 */
#include "sgw.h"
#include "check.h"
#include "free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int port;

/* One HTTP/1.0 request; the whole answer in buf; returns the status (0 on failure). */
static int request(const char *method, const char *path, const char *auth, char *buf, size_t len) {
    buf[0] = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { 0 };
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0) close(fd);
        return 0;
    }
    char req[512];
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: localhost\r\n%s%s%sContent-Length: 0\r\n\r\n", method,
                     path, auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "");
    size_t got = 0;
    if (write(fd, req, (size_t)n) == n) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        while (got < len - 1 && poll(&p, 1, 5000) == 1) {
            ssize_t r = read(fd, buf + got, len - 1 - got);
            if (r <= 0) break;
            got += (size_t)r;
        }
    }
    buf[got] = 0;
    close(fd);
    int status = 0;
    sscanf(buf, "HTTP/1.%*d %d", &status);
    return status;
}

static void test_token(void) {
    char buf[4096];
    check(request("GET", "/healthz", NULL, buf, sizeof buf) == 401, "no token: 401", buf);
    check(strstr(buf, "WWW-Authenticate: Bearer realm=\"sgw-admin\"") != NULL, "with WWW-Authenticate", buf);
    check(request("GET", "/healthz", "Bearer t0keX", buf, sizeof buf) == 401, "a wrong token of the same length: 401", buf);
    check(request("GET", "/healthz", "Bearer t0ken-and-more", buf, sizeof buf) == 401, "a longer one: 401", buf);
    check(request("GET", "/healthz", "Basic t0ken", buf, sizeof buf) == 401, "another scheme: 401", buf);
    check(request("GET", "/healthz", "bearer   t0ken  ", buf, sizeof buf) == 200, "the token, any case, spaces around", buf);
    check(strstr(buf, "{\"status\":\"ok\"}") != NULL, "healthz says ok", buf);
}

static void test_paths(void) {
    char buf[65536], err[128];
    const char *auth = "Bearer t0ken";
    check(request("GET", "/readyz", auth, buf, sizeof buf) == 503, "readyz without a database: 503", buf);
    check(strstr(buf, "\"status\":\"unavailable\"") && strstr(buf, "\"database\":\"unreachable\""),
          "and says why", buf);
    check(request("GET", "/metrics", auth, buf, sizeof buf) == 200, "metrics: 200", buf);
    check(strstr(buf, "text/plain; version=0.0.4") && strstr(buf, "\nsgw_redis_up 0"), "in the text format", NULL);
    check(request("POST", "/clock/advance?seconds=2", auth, buf, sizeof buf) == 404,
          "the clock control is not there without clock.allow_control", buf);
    check(config_set("clock.allow_control", "true", err, sizeof err) == 0, "clock.allow_control set", err);
    double before = clock_offset();
    check(request("POST", "/clock/advance?seconds=2.5", auth, buf, sizeof buf) == 200, "the clock moves", buf);
    check(clock_offset() - before > 2.49 && clock_offset() - before < 2.51, "by what was asked", buf);
    check(request("POST", "/clock/advance?seconds=-1", auth, buf, sizeof buf) == 400, "never back", buf);
    check(request("POST", "/clock/advance?seconds=soon", auth, buf, sizeof buf) == 400, "only by a number", buf);
    check(request("POST", "/clock/advance", auth, buf, sizeof buf) == 400, "and one is needed", buf);
    check(request("GET", "/reload", auth, buf, sizeof buf) == 404, "reload is a POST", buf);
    check(request("GET", "/nowhere", auth, buf, sizeof buf) == 404 && strstr(buf, "\"paths\""),
          "other paths: 404 naming the paths", buf);
}

int main(void) {
    char err[512], listen[64];
    if (config_load_file("config/sgw.conf", 1, err, sizeof err)) {
        printf("config: %s\n", err);
        return 1;
    }
    log_set_level(LOG_ERROR);
    port = test_free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    if (port <= 0 || config_set("admin.listen", listen, err, sizeof err) || config_set("admin.token", "t0ken", err, sizeof err) ||
        config_set("database.url", "", err, sizeof err) || config_set("redis.url", "", err, sizeof err) ||
        config_set("clock.allow_control", "false", err, sizeof err)) {
        printf("config: %s\n", err);
        return 1;
    }
    if (admin_start() != 0) {
        printf("admin_start failed on %s\n", listen);
        return 1;
    }
    test_token();
    test_paths();
    admin_stop();
    config_free();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

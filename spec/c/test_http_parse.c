/*
 * test_http_parse.c — what the listeners make of http.listen and admin.listen
 * (host/http.c: http_parse_listen), and the string arena of a request
 * (host/request.c): copies that live in the request while they fit, the rest
 * malloc'd, and a free that only frees what was malloc'd.
 */
#include "sgw.h"
#include "check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* s is accepted as family/addr/port (addr as inet_ntop writes it). */
static void expect_listen(const char *s, int family, const char *addr, unsigned port) {
    struct sockaddr_storage ss;
    unsigned int len = 0;
    char name[512], got[INET6_ADDRSTRLEN + 16] = "refused";
    snprintf(name, sizeof name, "listen '%s' is %s port %u", s, addr, port);
    if (http_parse_listen(s, &ss, &len) == 0) {
        char a[INET6_ADDRSTRLEN] = "?";
        unsigned p = 0;
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &in->sin_addr, a, sizeof a);
            p = ntohs(in->sin_port);
            if (len != sizeof *in) snprintf(a, sizeof a, "(length %u)", len);
        } else if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &in6->sin6_addr, a, sizeof a);
            p = ntohs(in6->sin6_port);
            if (len != sizeof *in6) snprintf(a, sizeof a, "(length %u)", len);
        }
        snprintf(got, sizeof got, "%s port %u", a, p);
        check(ss.ss_family == family && strcmp(a, addr) == 0 && p == port, name, got);
    } else {
        check(0, name, got);
    }
}

static void expect_bad_listen(const char *s) {
    struct sockaddr_storage ss;
    unsigned int len = 0;
    char name[512];
    snprintf(name, sizeof name, "listen '%.200s' refused", s);
    check(http_parse_listen(s, &ss, &len) != 0, name, NULL);
}

static void test_listen(void) {
    expect_listen("127.0.0.1:8080", AF_INET, "127.0.0.1", 8080);
    expect_listen("0.0.0.0:80", AF_INET, "0.0.0.0", 80);
    expect_listen("192.0.2.10:65535", AF_INET, "192.0.2.10", 65535);
    expect_listen(":8080", AF_INET, "0.0.0.0", 8080);
    expect_listen("*:8080", AF_INET, "0.0.0.0", 8080);
    expect_listen("localhost:9000", AF_INET, "127.0.0.1", 9000);
    expect_listen("[::1]:8080", AF_INET6, "::1", 8080);
    expect_listen("[::]:443", AF_INET6, "::", 443);
    expect_listen("[2001:db8::7]:1", AF_INET6, "2001:db8::7", 1);
    expect_listen("[::ffff:127.0.0.1]:8080", AF_INET6, "::ffff:127.0.0.1", 8080);
    /* Port 0, written out, is the kernel's choice of a free port. */
    expect_listen("127.0.0.1:0", AF_INET, "127.0.0.1", 0);

    /* No port, or not one. */
    expect_bad_listen("127.0.0.1");
    expect_bad_listen("8080");
    expect_bad_listen("");
    expect_bad_listen("127.0.0.1:");
    expect_bad_listen(":");
    expect_bad_listen("127.0.0.1:65536");
    expect_bad_listen("127.0.0.1:-1");
    expect_bad_listen("127.0.0.1:-0");
    expect_bad_listen("127.0.0.1:+80");
    expect_bad_listen("127.0.0.1: 80");
    expect_bad_listen("127.0.0.1:80 ");
    expect_bad_listen("127.0.0.1:http");
    expect_bad_listen("127.0.0.1:80x");
    expect_bad_listen("127.0.0.1:0x50");
    expect_bad_listen("127.0.0.1:99999999999999999999999");
    /* Hosts that are not addresses (no name is looked up but localhost). */
    expect_bad_listen("example.com:80");
    expect_bad_listen("127.0.0:80");
    expect_bad_listen("256.0.0.1:80");
    expect_bad_listen("localhost.:80");
    expect_bad_listen("**:80");
    /* IPv6 only in brackets, and only IPv6 in them. */
    expect_bad_listen("::1:8080");
    expect_bad_listen("[::1]");
    expect_bad_listen("[::1:8080");
    expect_bad_listen("::1]:8080");
    expect_bad_listen("[]:8080");
    expect_bad_listen("[127.0.0.1]:8080");
    expect_bad_listen("[::1]x:8080");
    expect_bad_listen("[fe80::1%lo]:8080");

    /* A host longer than any address is refused, whatever its length. */
    char s[600];
    memset(s, '1', sizeof s);
    snprintf(s + 250, sizeof s - 250, ":80");
    expect_bad_listen(s);
    memset(s, '1', sizeof s);
    snprintf(s + 500, sizeof s - 500, ":80");
    expect_bad_listen(s);
    /* A port of more digits than any port has, even if their value is one. */
    snprintf(s, sizeof s, "127.0.0.1:%0300d", 80);
    expect_bad_listen(s);
    expect_bad_listen("127.0.0.1:008080");
    expect_listen("127.0.0.1:08080", AF_INET, "127.0.0.1", 8080);
}

/* A request as http.c makes one: zeroed up to its arena, the arena left as
 * malloc gave it. */
static sgw_request *new_request(void) {
    sgw_request *req = malloc(sizeof *req);
    if (req) memset(req, 0, offsetof(sgw_request, arena));
    return req;
}

static int in_arena(const sgw_request *req, const char *p) {
    return p >= req->arena && p < req->arena + sizeof req->arena;
}

static void test_arena(void) {
    sgw_request *req = new_request();
    if (!req) {
        check(0, "a request", "out of memory");
        return;
    }
    /* Copies of s[0..n) of a longer buffer, NUL-terminated, one after the
     * other in the arena. */
    const char *text = "GET /v1/things?x=1";
    char *method = req_strndup(req, text, 3);
    char *path = req_strndup(req, text + 4, 10);
    char *empty = req_strndup(req, "", 0);
    check(method && strcmp(method, "GET") == 0 && in_arena(req, method), "a small string goes to the arena", method);
    check(path && strcmp(path, "/v1/things") == 0 && in_arena(req, path), "a second one too", path);
    check(empty && *empty == 0 && in_arena(req, empty), "an empty one takes its NUL", NULL);
    check(path == method + 4 && empty == path + 11 && req->arena_used == 4 + 11 + 1,
          "arena strings follow each other, each with its NUL", NULL);
    /* The copies do not overlap: writing each whole leaves the others. */
    memset(method, 'm', 3);
    memset(path, 'p', 10);
    check(strcmp(method, "mmm") == 0 && strcmp(path, "pppppppppp") == 0 && *empty == 0,
          "arena strings do not overlap", NULL);

    /* A string larger than what is left is malloc'd, and the arena stays
     * for the small ones after it. */
    char big[1000];
    memset(big, 'b', sizeof big);
    char *large = req_strndup(req, big, sizeof big);
    check(large && !in_arena(req, large) && strlen(large) == sizeof big && req->arena_used == 16,
          "a large string is malloc'd", NULL);
    char *after = req_strndup(req, "x-after", 7);
    check(after && in_arena(req, after) && after == empty + 1, "small strings after it still fit", after);

    /* Filling the arena to its last byte, then the next string, however
     * small, falls back to malloc. */
    size_t left = sizeof req->arena - req->arena_used;
    char *fill = req_strndup(req, big, left - 1);
    check(fill && in_arena(req, fill) && fill[left - 1] == 0 && req->arena_used == sizeof req->arena,
          "a string that takes what is left to the last byte fits", NULL);
    char *one = req_strndup(req, "y", 1);
    char *none = req_strndup(req, "", 0);
    check(one && !in_arena(req, one) && strcmp(one, "y") == 0, "a full arena falls back to malloc", NULL);
    check(none && !in_arena(req, none) && *none == 0, "even for an empty string", NULL);
    check(req->arena_used == sizeof req->arena, "the arena is not overrun", NULL);

    /* Freeing: arena strings are left alone (freeing them would be an
     * invalid free; the sanitizer build says so), malloc'd ones are freed
     * (the leak checker says so), NULL is nothing. */
    req_strfree(req, method);
    req_strfree(req, path);
    req_strfree(req, empty);
    req_strfree(req, after);
    req_strfree(req, fill);
    req_strfree(req, large);
    req_strfree(req, one);
    req_strfree(req, none);
    req_strfree(req, NULL);
    free(req);

    /* A fresh request: a string exactly the arena's size less its NUL fits,
     * one byte more does not. */
    req = new_request();
    if (!req) return;
    char *whole = req_strndup(req, big, sizeof req->arena - 1);
    check(whole && whole == req->arena && strlen(whole) == sizeof req->arena - 1, "the arena holds one string of its size less one", NULL);
    req->arena_used = 0;
    char *over = req_strndup(req, big, sizeof req->arena);
    check(over && !in_arena(req, over) && req->arena_used == 0, "one byte more is malloc'd", NULL);
    req_strfree(req, whole);
    req_strfree(req, over);
    free(req);
}

int main(void) {
    test_listen();
    test_arena();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

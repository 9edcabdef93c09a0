/*
 * test_request.c — a request's strings (host/request.c): copies live in the
 * request's arena while they fit, exactly up to its last byte, and on the
 * heap after; each is a faithful NUL-terminated copy (bytes after an
 * embedded NUL included) that no later copy overwrites, and req_strfree
 * frees only what came from the heap (the sanitizer build would report a
 * free of an arena address or a leak of a heap one).
 */
#include "sgw.h"
#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int in_arena(const sgw_request *req, const char *p) {
    uintptr_t a = (uintptr_t)req->arena, at = (uintptr_t)p;
    return at >= a && at < a + sizeof req->arena;
}

int main(void) {
    sgw_request *req = calloc(1, sizeof *req);
    if (!req) return 1;
    const size_t cap = sizeof req->arena;

    char *method = req_strndup(req, "GETX", 3);
    check(method && strcmp(method, "GET") == 0 && in_arena(req, method), "a short copy is in the arena, cut at n",
          method);
    check(req->arena_used == 4, "it takes n + 1 bytes", NULL);

    /* Bytes after an embedded NUL are copied too (a header value may hold one). */
    char *bin = req_strndup(req, "a\0b", 3);
    check(bin && memcmp(bin, "a\0b\0", 4) == 0 && in_arena(req, bin), "an embedded NUL is copied with what follows",
          NULL);

    /* A copy that fills the arena to its last byte still fits. */
    size_t rest = cap - req->arena_used;
    char *fill = malloc(rest);
    if (!fill) return 1;
    memset(fill, 'x', rest);
    char *last = req_strndup(req, fill, rest - 1);
    check(last && in_arena(req, last) && last[rest - 2] == 'x' && last[rest - 1] == 0 && req->arena_used == cap,
          "a copy ending on the arena's last byte is in the arena", NULL);

    /* The arena is full: even one byte goes to the heap. */
    char *one = req_strndup(req, "y", 1);
    check(one && !in_arena(req, one) && strcmp(one, "y") == 0, "once full, a copy comes from the heap", one);

    /* Earlier copies are untouched by later ones. */
    check(strcmp(method, "GET") == 0 && memcmp(bin, "a\0b\0", 4) == 0, "earlier copies are intact", NULL);

    /* On a fresh request, a copy one byte too big for the arena goes to the heap. */
    sgw_request *req2 = calloc(1, sizeof *req2);
    if (!req2) return 1;
    char *big_src = malloc(cap + 1);
    if (!big_src) return 1;
    memset(big_src, 'z', cap + 1);
    char *big = req_strndup(req2, big_src, cap);
    check(big && !in_arena(req2, big) && strlen(big) == cap && req2->arena_used == 0,
          "a copy of the arena's size (no room for its NUL) comes from the heap, leaving the arena free", NULL);
    char *empty = req_strndup(req2, "", 0);
    check(empty && in_arena(req2, empty) && empty[0] == 0, "an empty copy is one byte of the arena", NULL);

    /* Each is released its own way (the sanitizer build reports a wrong free
     * or a leak); NULL is fine. */
    req_strfree(req, method);
    req_strfree(req, bin);
    req_strfree(req, last);
    req_strfree(req, one);
    req_strfree(req2, big);
    req_strfree(req2, empty);
    req_strfree(req2, NULL);

    free(big_src);
    free(fill);
    free(req2);
    free(req);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

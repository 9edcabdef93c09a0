/*
 * request.c — a request's strings: copies that live in the request's own
 * arena while they fit, so most requests need no malloc for their method,
 * path, headers and query.
 */
#include "sgw.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

char *req_strndup(sgw_request *req, const char *s, size_t n) {
    char *p;
    if (n < sizeof req->arena - req->arena_used) {
        p = req->arena + req->arena_used;
        req->arena_used += n + 1;
    } else {
        p = malloc(n + 1);
        if (!p) return NULL;
    }
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void req_strfree(sgw_request *req, char *p) {
    uintptr_t a = (uintptr_t)req->arena, at = (uintptr_t)p;
    if (at < a || at >= a + sizeof req->arena) free(p);
}

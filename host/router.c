/*
 * router.c — the route table declared in handlers/routes.lua, matched in C.
 *
 * Routes are data written in Lua (so adding an endpoint needs no C), but the
 * host matches them itself: it must know a route's body limit before it
 * reads a body, and a 404 or 405 needs no handler. Patterns are literal path
 * segments and "{name}" segments, each matching exactly one segment. When
 * several routes of the method match, the one with a literal segment where
 * the others have a parameter, earliest, wins (/comments/changes over
 * /comments/{id}), whatever the table order; among equals the first listed.
 */
#include "sgw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void route_free(sgw_route *r) {
    free(r->method);
    free(r->pattern);
    free(r->handler);
    for (int i = 0; i < r->nsegments; i++) free(r->segments[i]);
    free(r->segments);
}

void routes_free(sgw_routes *rs) {
    for (int i = 0; i < rs->n; i++) route_free(&rs->v[i]);
    free(rs->v);
    rs->v = NULL;
    rs->n = 0;
}

/* A segment of a path, pointing into the path itself. */
typedef struct path_seg { const char *p; size_t len; } path_seg;

#define MAX_PATH_SEGMENTS 32        /* the most a route may have */

/* Splits path into segments without copying it; -1 when there are more
 * than max (no route can match such a path). */
static int path_segments(const char *path, path_seg *v, int max) {
    int n = 0;
    const char *p = path;
    while (*p) {
        while (*p == '/') p++;
        if (!*p) break;
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (n == max) return -1;
        v[n].p = p;
        v[n].len = len;
        n++;
        p += len;
    }
    return n;
}

/* Splits "/a/{b}/c" into {"a", "{b}", "c"} (copies). The root "/" has no
 * segments. */
static int split_path(const char *path, char ***out, int *nout) {
    path_seg segs[MAX_PATH_SEGMENTS];
    int n = path_segments(path, segs, MAX_PATH_SEGMENTS);
    if (n < 0) return -1;
    char **v = calloc(n ? (size_t)n : 1, sizeof *v);
    if (!v) return -1;
    for (int i = 0; i < n; i++) {
        v[i] = strndup(segs[i].p, segs[i].len);
        if (!v[i]) {
            for (int j = 0; j < i; j++) free(v[j]);
            free(v);
            return -1;
        }
    }
    *out = v;
    *nout = n;
    return 0;
}

static int field_string(lua_State *L, int idx, const char *name, char **out, int required,
                        int routeno, char *err, size_t errlen) {
    lua_getfield(L, idx, name);
    if (lua_isnil(L, -1) && !required) {
        lua_pop(L, 1);
        *out = NULL;
        return 0;
    }
    if (lua_type(L, -1) != LUA_TSTRING) {
        snprintf(err, errlen, "handlers/routes.lua: route %d: '%s' must be a string", routeno, name);
        lua_pop(L, 1);
        return -1;
    }
    *out = strdup(lua_tostring(L, -1));
    lua_pop(L, 1);
    if (!*out) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static int parse_route(lua_State *L, int idx, int routeno, sgw_route *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    if (!lua_istable(L, idx)) {
        snprintf(err, errlen, "handlers/routes.lua: route %d is not a table", routeno);
        return -1;
    }
    char *max_body = NULL;
    if (field_string(L, idx, "method", &r->method, 1, routeno, err, errlen) ||
        field_string(L, idx, "path", &r->pattern, 1, routeno, err, errlen) ||
        field_string(L, idx, "handler", &r->handler, 1, routeno, err, errlen))
        goto fail;
    if (r->pattern[0] != '/') {
        snprintf(err, errlen, "handlers/routes.lua: route %d: path must start with '/'", routeno);
        goto fail;
    }
    if (split_path(r->pattern, &r->segments, &r->nsegments)) {
        snprintf(err, errlen, "handlers/routes.lua: route %d: more than %d segments, or out of memory", routeno,
                 MAX_PATH_SEGMENTS);
        goto fail;
    }
    /* Refused rather than half-served: a "{id" or "{}" would match any
     * segment and capture nothing, and a match holds SGW_MAX_PARAMS
     * parameters, so a route with more would lose the last ones. */
    int nparams = 0;
    for (int i = 0; i < r->nsegments; i++) {
        const char *s = r->segments[i];
        size_t len = strlen(s);
        if (!strpbrk(s, "{}")) continue;
        if (len < 3 || s[0] != '{' || s[len - 1] != '}' || strcspn(s + 1, "{}") != len - 2) {
            snprintf(err, errlen, "handlers/routes.lua: route %d: segment '%s' is neither literal nor '{name}'",
                     routeno, s);
            goto fail;
        }
        if (++nparams > SGW_MAX_PARAMS) {
            snprintf(err, errlen, "handlers/routes.lua: route %d: more than %d parameters", routeno, SGW_MAX_PARAMS);
            goto fail;
        }
    }
    lua_getfield(L, idx, "max_body");
    if (lua_isinteger(L, -1)) {
        r->max_body = (size_t)lua_tointeger(L, -1);
    } else if (lua_type(L, -1) == LUA_TSTRING) {
        max_body = strdup(lua_tostring(L, -1));
    } else if (!lua_isnil(L, -1)) {
        lua_pop(L, 1);
        snprintf(err, errlen, "handlers/routes.lua: route %d: max_body must be a byte count or a config key", routeno);
        goto fail;
    }
    lua_pop(L, 1);
    if (max_body) {
        if (!config_has(max_body)) {
            snprintf(err, errlen, "handlers/routes.lua: route %d: max_body names unknown config key '%s'", routeno, max_body);
            free(max_body);
            goto fail;
        }
        r->max_body = (size_t)config_int(max_body);
        free(max_body);
    } else if (!r->max_body) {
        r->max_body = (size_t)config_int("http.max_body_bytes");
    }
    lua_getfield(L, idx, "raw_body");
    r->raw_body = lua_toboolean(L, -1);
    lua_pop(L, 1);
    /* Only an explicit false makes a route public: one that forgot the
     * field is refused without a credential, never opened by mistake. */
    lua_getfield(L, idx, "auth");
    r->public_route = lua_isboolean(L, -1) && !lua_toboolean(L, -1);
    lua_pop(L, 1);
    return 0;
fail:
    route_free(r);
    memset(r, 0, sizeof *r);
    return -1;
}

int routes_from_lua(lua_State *L, sgw_routes *out, char *err, size_t errlen) {
    out->v = NULL;
    out->n = 0;
    if (!lua_istable(L, -1)) {
        snprintf(err, errlen, "handlers/routes.lua must return a table of routes");
        return -1;
    }
    int table = lua_gettop(L);
    lua_Integer n = luaL_len(L, table);
    if (n <= 0 || n > 10000) {
        snprintf(err, errlen, "handlers/routes.lua: expected between 1 and 10000 routes");
        return -1;
    }
    out->v = calloc((size_t)n, sizeof *out->v);
    if (!out->v) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, table, i);
        int rc = parse_route(L, lua_gettop(L), (int)i, &out->v[out->n], err, errlen);
        lua_pop(L, 1);
        if (rc) {
            routes_free(out);
            return -1;
        }
        out->n++;
    }
    return 0;
}

/* Which segments of a route are literal, the first one as the highest bit:
 * of two routes matching one path, the greater is the more specific. */
static unsigned long long literal_mask(const sgw_route *r) {
    unsigned long long mask = 0;
    for (int i = 0; i < r->nsegments; i++) {
        mask = (mask << 1) | (r->segments[i][0] != '{');
    }
    return mask;
}

/* Compares one pattern against the request's segments, capturing params. */
static int pattern_matches(const sgw_route *r, const path_seg *segs, int nsegs, sgw_match *m) {
    if (r->nsegments != nsegs) return 0;
    for (int i = 0; i < nsegs; i++) {
        const char *p = r->segments[i];
        if (p[0] == '{') continue;
        if (strncmp(p, segs[i].p, segs[i].len) != 0 || p[segs[i].len] != 0) return 0;
    }
    if (!m) return 1;
    m->nparams = 0;
    for (int i = 0; i < nsegs; i++) {
        const char *p = r->segments[i];
        size_t plen = strlen(p);
        if (p[0] != '{') continue;
        m->params[m->nparams].name = strndup(p + 1, plen - 2);
        m->params[m->nparams].value = strndup(segs[i].p, segs[i].len);
        m->nparams++;
    }
    return 1;
}

void routes_match(const sgw_routes *rs, const char *method, const char *path, sgw_match *m) {
    m->route = -1;
    m->status = 404;
    m->allow[0] = 0;
    m->nparams = 0;
    path_seg segs[MAX_PATH_SEGMENTS];
    int nsegs = path_segments(path, segs, MAX_PATH_SEGMENTS);
    if (nsegs < 0) return;
    /* An empty segment ("//" or a trailing "/") never matches a route. */
    size_t plen = strlen(path);
    int has_empty = plen > 1 && (path[plen - 1] == '/' || strstr(path, "//"));
    /* HEAD is served by GET routes. */
    const char *want = strcmp(method, "HEAD") == 0 ? "GET" : method;
    int path_found = 0, best = -1;
    unsigned long long best_mask = 0;
    size_t alen = 0;
    if (!has_empty) {
        for (int i = 0; i < rs->n; i++) {
            const sgw_route *r = &rs->v[i];
            if (!pattern_matches(r, segs, nsegs, NULL)) continue;
            if (strcmp(r->method, want) == 0) {
                unsigned long long mask = literal_mask(r);
                if (best < 0 || mask > best_mask) {
                    best = i;
                    best_mask = mask;
                }
                continue;
            }
            path_found = 1;
            /* Collect the Allow list, without duplicates. */
            if (!strstr(m->allow, r->method) && alen + strlen(r->method) + 3 < sizeof m->allow) {
                alen += (size_t)snprintf(m->allow + alen, sizeof m->allow - alen, "%s%s", alen ? ", " : "", r->method);
            }
        }
    }
    if (best >= 0) {
        pattern_matches(&rs->v[best], segs, nsegs, m);
        m->route = best;
        m->status = 0;
    }
    if (m->route < 0 && path_found) m->status = 405;
    if (m->route >= 0) m->allow[0] = 0;
}

void match_free(sgw_match *m) {
    for (int i = 0; i < m->nparams; i++) {
        free(m->params[i].name);
        free(m->params[i].value);
    }
    m->nparams = 0;
}

/*
 * test_router.c — host/router.c as http.c uses it: route tables read from
 * Lua (and the ones refused, with the message an operator sees), and
 * matching: literal over parameter segments, 404 against 405 with its Allow
 * list, HEAD served by GET, empty segments, paths taken as given (no
 * decoding), too many segments, and what a match captures.
 */
#include "sgw.h"
#include "check.h"

#include <stdio.h>
#include <string.h>

static lua_State *L;

/* Reads routes from the Lua chunk src (which returns the table); 0 ok. */
static int load(const char *src, sgw_routes *rs, char *err, size_t errlen) {
    err[0] = 0;
    if (luaL_dostring(L, src) != LUA_OK) {
        snprintf(err, errlen, "lua: %s", lua_tostring(L, -1));
        lua_settop(L, 0);
        return -1;
    }
    int rc = routes_from_lua(L, rs, err, errlen);
    lua_settop(L, 0);
    return rc;
}

/* The handler of the route a request is given, or "404"/"405". */
static const char *route_of(const sgw_routes *rs, const char *method, const char *path) {
    sgw_match m;
    routes_match(rs, method, path, &m);
    static char out[64];
    if (m.route >= 0) snprintf(out, sizeof out, "%s", rs->v[m.route].handler);
    else snprintf(out, sizeof out, "%d", m.status);
    match_free(&m);
    return out;
}

static void expect_route(const sgw_routes *rs, const char *method, const char *path, const char *want) {
    const char *got = route_of(rs, method, path);
    char name[256], detail[128];
    snprintf(name, sizeof name, "%s %s gives %s", method, path, want);
    snprintf(detail, sizeof detail, "got %s", got);
    check(strcmp(got, want) == 0, name, detail);
}

static void expect_refused(const char *src, const char *message_part) {
    sgw_routes rs;
    char err[256];
    int rc = load(src, &rs, err, sizeof err);
    char name[256];
    snprintf(name, sizeof name, "refused, naming '%s'", message_part);
    check(rc != 0 && strstr(err, message_part) != NULL, name, err);
    if (rc == 0) routes_free(&rs);
}

static const char *const table =
    "return {"
    " { method = 'GET', path = '/', handler = 'root' },"
    " { method = 'GET', path = '/comments/{id}', handler = 'comment' },"
    " { method = 'GET', path = '/comments/changes', handler = 'changes' },"
    " { method = 'DELETE', path = '/comments/{id}', handler = 'comment_delete' },"
    " { method = 'PUT', path = '/comments/{id}', handler = 'comment_put' },"
    " { method = 'PUT', path = '/comments/{other}', handler = 'comment_put_later' },"
    " { method = 'GET', path = '/a/{x}/c', handler = 'a_x_c' },"
    " { method = 'GET', path = '/{x}/b/{y}', handler = 'x_b_y' },"
    " { method = 'GET', path = '/{x}/{y}/c', handler = 'x_y_c' },"
    " { method = 'POST', path = '/uploads', handler = 'upload', max_body = 'http.max_body_bytes',"
    "   raw_body = true, auth = false },"
    " { method = 'POST', path = '/small', handler = 'small', max_body = 100, auth = true },"
    "}";

static void test_loading(void) {
    sgw_routes rs;
    char err[256];
    int rc = load(table, &rs, err, sizeof err);
    check(rc == 0 && rs.n == 11, "the table loads", err);
    if (rc) return;
    const sgw_route *root = &rs.v[0], *upload = &rs.v[9], *small = &rs.v[10];
    check(root->nsegments == 0, "'/' has no segments", NULL);
    check(rs.v[1].nsegments == 2 && strcmp(rs.v[1].segments[1], "{id}") == 0, "segments are split", NULL);
    check(root->max_body == (size_t)config_int("http.max_body_bytes") && !root->raw_body,
          "max_body defaults to http.max_body_bytes", NULL);
    check(upload->max_body == (size_t)config_int("http.max_body_bytes") && upload->raw_body,
          "max_body may name a config key", NULL);
    check(small->max_body == 100, "max_body may be a byte count", NULL);
    check(upload->public_route && !small->public_route && !root->public_route,
          "only auth = false makes a route public", NULL);
    routes_free(&rs);
    check(rs.n == 0 && rs.v == NULL, "routes_free leaves an empty table", NULL);

    lua_settop(L, 0);
    if (luaL_dofile(L, "handlers/routes.lua") != LUA_OK) {
        check(0, "handlers/routes.lua runs", lua_tostring(L, -1));
    } else {
        rc = routes_from_lua(L, &rs, err, sizeof err);
        check(rc == 0 && rs.n > 10, "the gateway's own routes load", err);
        if (rc == 0) routes_free(&rs);
    }
    lua_settop(L, 0);

    expect_refused("return 'routes'", "must return a table");
    expect_refused("return {}", "between 1 and 10000");
    expect_refused("return { 'GET /' }", "route 1 is not a table");
    expect_refused("return { { method = 'GET', path = '/', handler = 'h' }, { path = '/', handler = 'h' } }",
                   "route 2: 'method' must be a string");
    expect_refused("return { { method = 'GET', handler = 'h' } }", "'path' must be a string");
    expect_refused("return { { method = 'GET', path = '/', handler = 7 } }", "'handler' must be a string");
    expect_refused("return { { method = 'GET', path = 'x', handler = 'h' } }", "must start with '/'");
    expect_refused("return { { method = 'GET', path = '/', handler = 'h', max_body = 'no.such_key' } }",
                   "unknown config key 'no.such_key'");
    expect_refused("return { { method = 'GET', path = '/', handler = 'h', max_body = true } }",
                   "max_body must be a byte count or a config key");
    expect_refused("return { { method = 'GET', path = '/', handler = 'h', max_body = 1.5 } }",
                   "max_body must be a byte count or a config key");

    expect_refused("return { { method = 'GET', path = '/a/{id', handler = 'h' } }", "segment '{id' is neither");
    expect_refused("return { { method = 'GET', path = '/a/{}', handler = 'h' } }", "segment '{}' is neither");
    expect_refused("return { { method = 'GET', path = '/a/id}', handler = 'h' } }", "segment 'id}' is neither");
    expect_refused("return { { method = 'GET', path = '/a/{x}{y}', handler = 'h' } }", "segment '{x}{y}' is neither");
    expect_refused("return { { method = 'GET', path = '/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}', handler = 'h' } }",
                   "route 1: more than 8 parameters");

    char deep[512] = "return { { method = 'GET', handler = 'h', path = '";
    for (int i = 0; i < 33; i++) strcat(deep, "/s");
    strcat(deep, "' } }");
    expect_refused(deep, "more than 32 segments");
}

static void test_matching(void) {
    sgw_routes rs;
    char err[256];
    if (load(table, &rs, err, sizeof err)) {
        check(0, "the table loads", err);
        return;
    }
    expect_route(&rs, "GET", "/", "root");
    expect_route(&rs, "GET", "", "root");
    expect_route(&rs, "GET", "/comments/42", "comment");
    /* Literal over parameter whatever the order of the table. */
    expect_route(&rs, "GET", "/comments/changes", "changes");
    expect_route(&rs, "DELETE", "/comments/changes", "comment_delete");
    /* The earliest literal segment decides between two partial matches. */
    expect_route(&rs, "GET", "/a/b/c", "a_x_c");
    expect_route(&rs, "GET", "/z/b/c", "x_b_y");
    expect_route(&rs, "GET", "/z/q/c", "x_y_c");
    /* Among equals, the first listed. */
    expect_route(&rs, "PUT", "/comments/1", "comment_put");
    expect_route(&rs, "HEAD", "/comments/1", "comment");

    /* Segments are compared whole. */
    expect_route(&rs, "GET", "/comment/1", "404");
    expect_route(&rs, "GET", "/comments", "404");
    expect_route(&rs, "GET", "/comments/1/2", "404");
    expect_route(&rs, "GET", "/uploadsx", "404");
    expect_route(&rs, "POST", "/upload", "404");
    expect_route(&rs, "get", "/", "405");

    /* An empty segment never matches, and is a 404 rather than a 405. */
    expect_route(&rs, "GET", "/comments/1/", "404");
    expect_route(&rs, "GET", "/comments//1", "404");
    expect_route(&rs, "GET", "//comments/1", "404");
    expect_route(&rs, "POST", "/uploads/", "404");
    expect_route(&rs, "GET", "//", "404");

    /* The path is taken as given: an escaped slash is no separator, and a
     * parameter keeps its escapes. */
    expect_route(&rs, "GET", "/comments/a%2Fb", "comment");
    expect_route(&rs, "GET", "/comments%2Fchanges", "404");
    sgw_match m;
    routes_match(&rs, "GET", "/comments/a%20b", &m);
    check(m.nparams == 1 && strcmp(m.params[0].value, "a%20b") == 0, "a parameter is not decoded",
          m.nparams ? m.params[0].value : "no parameter");
    match_free(&m);

    /* A path of more segments than any route can have is a plain 404. */
    char longpath[4096] = "";
    for (int i = 0; i < 200; i++) strcat(longpath, "/comments");
    expect_route(&rs, "GET", longpath, "404");
    char longseg[5000] = "/comments/";
    memset(longseg + 10, 'x', 4000);
    longseg[4010] = 0;
    routes_match(&rs, "GET", longseg, &m);
    check(m.route == 1 && m.nparams == 1 && strlen(m.params[0].value) == 4000, "a long segment is captured whole", NULL);
    match_free(&m);
    routes_free(&rs);
}

static void test_405(void) {
    sgw_routes rs;
    char err[256];
    if (load(table, &rs, err, sizeof err)) {
        check(0, "the table loads", err);
        return;
    }
    sgw_match m;
    routes_match(&rs, "POST", "/comments/1", &m);
    check(m.route == -1 && m.status == 405, "another method's path is a 405", NULL);
    check(strcmp(m.allow, "GET, DELETE, PUT") == 0, "Allow lists each method once, in table order", m.allow);
    match_free(&m);

    routes_match(&rs, "PATCH", "/comments/changes", &m);
    check(m.status == 405 && strcmp(m.allow, "GET, DELETE, PUT") == 0,
          "Allow counts parameter routes that match the path too", m.allow);
    match_free(&m);

    routes_match(&rs, "GET", "/uploads", &m);
    check(m.status == 405 && strcmp(m.allow, "POST") == 0, "a GET of a POST route", m.allow);
    match_free(&m);

    routes_match(&rs, "GET", "/nowhere", &m);
    check(m.status == 404 && m.allow[0] == 0, "a 404 has no Allow list", m.allow);
    match_free(&m);

    routes_match(&rs, "GET", "/comments/1", &m);
    check(m.status == 0 && m.allow[0] == 0, "a match has no Allow list", m.allow);
    match_free(&m);

    /* An Allow list longer than its buffer is cut at a whole method. */
    char big[8192] = "return {";
    for (int i = 0; i < 40; i++) {
        char r[128];
        snprintf(r, sizeof r, " { method = 'M%02d', path = '/x', handler = 'h' },", i);
        strcat(big, r);
    }
    strcat(big, "}");
    sgw_routes many;
    if (load(big, &many, err, sizeof err)) {
        check(0, "forty methods load", err);
    } else {
        routes_match(&many, "GET", "/x", &m);
        size_t n = strlen(m.allow);
        check(m.status == 405 && n < sizeof m.allow && n > 100 && m.allow[n - 1] != ' ' && m.allow[n - 1] != ',' &&
                  strncmp(m.allow, "M00, M01, ", 10) == 0,
              "a long Allow list ends at a whole method", m.allow);
        match_free(&m);
        routes_free(&many);
    }
    routes_free(&rs);
}

static void test_params(void) {
    sgw_routes rs;
    char err[256];
    if (load("return {"
             " { method = 'GET', path = '/o/{org}/r/{repo}', handler = 'two' },"
             " { method = 'GET', path = '/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}', handler = 'eight' },"
             "}",
             &rs, err, sizeof err)) {
        check(0, "parameter routes load", err);
        return;
    }
    sgw_match m;
    routes_match(&rs, "GET", "/o/acme/r/gw", &m);
    check(m.route == 0 && m.nparams == 2 && strcmp(m.params[0].name, "org") == 0 &&
              strcmp(m.params[0].value, "acme") == 0 && strcmp(m.params[1].name, "repo") == 0 &&
              strcmp(m.params[1].value, "gw") == 0,
          "parameters are captured by name, in order", NULL);
    match_free(&m);
    check(m.nparams == 0, "match_free empties the match", NULL);

    routes_match(&rs, "GET", "/1/2/3/4/5/6/7/8", &m);
    check(m.route == 1 && m.nparams == 8 && strcmp(m.params[7].name, "h") == 0 && strcmp(m.params[7].value, "8") == 0,
          "eight parameters are captured", NULL);
    match_free(&m);

    routes_match(&rs, "GET", "/o/acme/r", &m);
    check(m.status == 404 && m.nparams == 0, "no parameters without a match", NULL);
    match_free(&m);
    routes_free(&rs);
}

int main(void) {
    char err[512];
    if (config_load_file("config/sgw.conf", 1, err, sizeof err)) {
        printf("FAIL config: %s\n", err);
        return 1;
    }
    L = luaL_newstate();
    luaL_openlibs(L);
    lapi_config_open(L);
    test_loading();
    test_matching();
    test_405();
    test_params();
    lua_close(L);
    config_free();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

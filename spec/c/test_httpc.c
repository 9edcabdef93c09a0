/*
 * test_httpc.c — the `http` global and the httpc engine against slow_server
 * (spec/support, started here): coroutines sharing one multi handle under a
 * concurrency cap, the blocking path, the error kinds, misuse, and the
 * clean-up of transfers whose coroutines were abandoned, in either order of
 * closing the Lua state and the engine (run it with SGW_SANITIZE to see
 * leaks).
 */
#include "sgw.h"
#include "check.h"

#include <errno.h>
#include <signal.h>
#include <sys/epoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void httpc_set_current(sgw_httpc *h, lua_State *co);

/* The build links this test with --wrap=epoll_ctl: the engine's calls come
 * here, and the next `refuse_adds` additions to an epoll set fail. */
int __real_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
static int refuse_adds;
int __wrap_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev) {
    if (op == EPOLL_CTL_ADD && refuse_adds > 0) {
        refuse_adds--;
        errno = ENOSPC;
        return -1;
    }
    return __real_epoll_ctl(epfd, op, fd, ev);
}

static int port;
static pid_t server;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int start_server(void) {
    const char *dir = getenv("SGW_BUILD_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/slow_server", dir && *dir ? dir : "build");
    int fds[2];
    if (pipe(fds)) return -1;
    server = fork();
    if (server < 0) return -1;
    if (server == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execl(path, path, "0", "300", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    if (!f) return -1;
    char line[64] = "";
    int ok = fgets(line, sizeof line, f) && sscanf(line, "port %d", &port) == 1;
    fclose(f);
    if (!ok) fprintf(stderr, "cannot start %s (build it first)\n", path);
    return ok ? 0 : -1;
}

/* The test's view of a job runner: coroutines resumed as transfers end. */
typedef struct run {
    sgw_worker *w;
    lua_State  *L;
    int         finished, errors;
    char        last_error[512];
} run;

static void after_resume(run *r, lua_State *co, int st, int nres) {
    if (st == LUA_YIELD) {
        lua_pop(co, nres);
        return;
    }
    r->finished++;
    if (st != LUA_OK) {
        r->errors++;
        snprintf(r->last_error, sizeof r->last_error, "%s", lua_tostring(co, -1) ? lua_tostring(co, -1) : "?");
    }
}

static void on_ready(lua_State *co, int nres, void *ud) {
    run *r = ud;
    int n;
    httpc_set_current(r->w->httpc, co);
    int st = lua_resume(co, r->L, nres, &n);
    httpc_set_current(r->w->httpc, NULL);
    after_resume(r, co, st, n);
}

/* Starts n coroutines of the global function `fn` (given its index). */
static void spawn(run *r, int n, int *refs) {
    for (int i = 0; i < n; i++) {
        lua_State *co = lua_newthread(r->L);
        refs[i] = luaL_ref(r->L, LUA_REGISTRYINDEX);
        lua_getglobal(co, "fn");
        lua_pushinteger(co, i + 1);
        int nres;
        httpc_set_current(r->w->httpc, co);
        int st = lua_resume(co, r->L, 1, &nres);
        httpc_set_current(r->w->httpc, NULL);
        after_resume(r, co, st, nres);
    }
}

static lua_State *new_state(sgw_worker *w) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lapi_http_open(L, w);
    lua_pushinteger(L, port);
    lua_setglobal(L, "PORT");
    return L;
}

/* A job worker's engine (4 transfers at once) and a state defining fn. */
static lua_State *job_state(sgw_worker *w, const char *fn_code) {
    *w = (sgw_worker){ .id = 0, .role = "job" };
    w->httpc = httpc_new(4);
    lua_State *L = new_state(w);
    if (luaL_dostring(L, fn_code)) check(0, "fn compiles", lua_tostring(L, -1));
    return L;
}

/* Turns the engine until n coroutines have finished (or 5 s passed). */
static void drive(run *r, int n) {
    double t0 = now_ms();
    while (r->finished < n && now_ms() - t0 < 5000) httpc_poll(r->w->httpc, 100, NULL, 0, on_ready, r);
}

/* Runs fn once in a coroutine to its end; returns the coroutine's ref. */
static int run_one(run *r) {
    int ref;
    spawn(r, 1, &ref);
    drive(r, 1);
    return ref;
}

/* Drops a job state and its engine, the coroutine ref first. */
static void close_job_state(sgw_worker *w, lua_State *L, int ref) {
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
    lua_close(L);
    httpc_free(w->httpc);
}

static int run_lua(lua_State *L, const char *code, char *why, size_t n) {
    if (luaL_dostring(L, code)) {
        snprintf(why, n, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return 0;
    }
    int ok = lua_toboolean(L, -1);
    snprintf(why, n, "%s", lua_tostring(L, -2) ? lua_tostring(L, -2) : "");
    lua_settop(L, 0);
    return ok;
}

static long peak(lua_State *L) {
    luaL_dostring(L, "local r = http.request{url = 'http://127.0.0.1:' .. PORT .. '/stats'}\n"
                     "return tonumber(r.body:match('\"peak\":(%d+)'))");
    long p = (long)lua_tointeger(L, -1);
    lua_settop(L, 0);
    luaL_dostring(L, "http.request{method = 'POST', url = 'http://127.0.0.1:' .. PORT .. '/reset'}");
    lua_settop(L, 0);
    return p;
}

static void test_concurrent(void) {
    sgw_worker w = { .id = 0, .role = "job" };
    w.httpc = httpc_new(8);
    lua_State *L = new_state(&w);
    peak(L);
    luaL_dostring(L, "results = {}\n"
                     "function fn(i)\n"
                     "  local r, err, kind = http.request{url = 'http://127.0.0.1:' .. PORT .. '/x?i=' .. i}\n"
                     "  results[i] = r and r.status or kind\n"
                     "end");
    run r = { .w = &w, .L = L };
    int refs[40];
    double t0 = now_ms();
    spawn(&r, 40, refs);
    check(httpc_active(w.httpc) == 40, "all 40 transfers are under way (8 running, 32 waiting)", NULL);
    while (r.finished < 40 && now_ms() - t0 < 20000) httpc_poll(w.httpc, 100, NULL, 0, on_ready, &r);
    double ms = now_ms() - t0;
    char why[256];
    check(r.finished == 40 && r.errors == 0, "40 coroutines finish", r.last_error);
    check(run_lua(L, "for i = 1, 40 do if results[i] ~= 200 then return 'result ' .. i .. ': ' .. tostring(results[i]), false end end\n"
                     "return '', true", why, sizeof why),
          "every transfer answered 200", why);
    long p = peak(L);
    snprintf(why, sizeof why, "peak %ld", p);
    check(p == 8, "the cap holds and is reached", why);
    /* 40 calls of 300 ms, 8 at a time: 5 rounds. */
    snprintf(why, sizeof why, "%.0f ms", ms);
    check(ms >= 1400 && ms < 6000, "transfers overlap in rounds of 8", why);
    check(httpc_active(w.httpc) == 0, "nothing left under way", NULL);
    for (int i = 0; i < 40; i++) luaL_unref(L, LUA_REGISTRYINDEX, refs[i]);
    lua_close(L);
    httpc_free(w.httpc);
}

static void test_blocking_and_errors(void) {
    sgw_worker w = { .id = 0, .role = "http" };
    lua_State *L = new_state(&w);
    char why[512];
#define LUA_CHECK(name, code) check(run_lua(L, code, why, sizeof why), name, why)
    LUA_CHECK("a blocking call returns status, lower-case headers and body",
              "local r = http.request{url = 'http://127.0.0.1:' .. PORT .. '/x?delay=0', headers = {['X-A'] = 'b'}}\n"
              "if not r then return 'no response', false end\n"
              "return tostring(r.status) .. ' ' .. tostring(r.headers['content-type']) .. ' ' .. r.body,\n"
              "  r.status == 200 and r.headers['content-type'] == 'application/json' and r.body:find('\"ok\":true') ~= nil");
    LUA_CHECK("a refused connection is kind connect",
              "local r, err, kind = http.request{url = 'http://127.0.0.1:1/'}\n"
              "return tostring(err) .. ' ' .. tostring(kind), r == nil and kind == 'connect'");
    LUA_CHECK("a slow answer is kind timeout",
              "local r, err, kind = http.request{url = 'http://127.0.0.1:' .. PORT .. '/x?delay=2000', timeout = 0.3}\n"
              "return tostring(err) .. ' ' .. tostring(kind), r == nil and kind == 'timeout'");
    LUA_CHECK("a status is not an error",
              "local r = http.request{url = 'http://127.0.0.1:' .. PORT .. '/x?delay=0&status=503', method = 'POST', body = '{}'}\n"
              "return tostring(r and r.status), r and r.status == 503");
    LUA_CHECK("other schemes are refused",
              "local r, err, kind = http.request{url = 'file:///etc/passwd'}\n"
              "return tostring(err) .. ' ' .. tostring(kind), r == nil and kind == 'other'");
    LUA_CHECK("a private address is refused before connecting: the server sees nothing",
              "local function requests()\n"
              "  local r = http.request{url = 'http://127.0.0.1:' .. PORT .. '/stats'}\n"
              "  return tonumber(r.body:match('\"requests\":(%d+)'))\n"
              "end\n"
              "local before = requests()\n"
              "for _, host in ipairs{ '127.0.0.1', '2130706433', '0x7f000001', 'localhost', '[::1]' } do\n"
              "  local r, err, kind = http.request{url = 'http://' .. host .. ':' .. PORT .. '/x?delay=0', deny_private_addresses = true}\n"
              "  if r or kind ~= 'forbidden' or err ~= 'destination address not allowed' then\n"
              "    return host .. ': ' .. tostring(err) .. ' ' .. tostring(kind), false\n"
              "  end\n"
              "end\n"
              "local after = requests()\n"
              "return before .. ' then ' .. after, after == before");
    LUA_CHECK("max_body_bytes caps one call's body",
              "local r, err, kind = http.request{url = 'http://127.0.0.1:' .. PORT .. '/x?delay=0&size=1001', max_body_bytes = 1000}\n"
              "local ok = http.request{url = 'http://127.0.0.1:' .. PORT .. '/x?delay=0&size=1000', max_body_bytes = 1000}\n"
              "return tostring(err) .. ' ' .. tostring(kind), r == nil and kind == 'too_large' and ok and #ok.body == 1000");
    char err[256];
    config_set("http.max_response_bytes", "1000", err, sizeof err);
    LUA_CHECK("a large answer is kind too_large",
              "local r, err, kind = http.request{url = 'http://127.0.0.1:' .. PORT .. '/x?delay=0&size=5000'}\n"
              "return tostring(err) .. ' ' .. tostring(kind), r == nil and kind == 'too_large'");
    config_set("http.max_response_bytes", "16777216", err, sizeof err);
    LUA_CHECK("misuse raises",
              "for _, bad in ipairs{ {}, {url = 1}, {url = 'http://x', method = 'G T'},\n"
              "    {url = 'http://x', headers = {X = 'a\\r\\nB: c'}}, {url = 'http://x', timeout = 0},\n"
              "    {url = 'http://x', body = {}}, {url = 'http://x', headers = 'h'}, {url = 'http://x', max_body_bytes = 0} } do\n"
              "  if pcall(http.request, bad) then return 'accepted a bad table', false end\n"
              "end\n"
              "return '', not pcall(http.request)");
#undef LUA_CHECK
    lua_close(L);
}

/* deny_private_addresses' classifier: every non-global range, and the
 * addresses just outside it. */
static void test_address_rule(void) {
    static const char *const denied[] = {
        "0.0.0.0", "0.255.255.255", "10.0.0.0", "10.255.255.255", "100.64.0.0", "100.127.255.255",
        "127.0.0.1", "127.255.255.255", "169.254.0.0", "169.254.255.255", "172.16.0.0", "172.31.255.255",
        "192.0.0.0", "192.0.0.255", "192.0.2.0", "192.0.2.255", "192.168.0.0", "192.168.255.255",
        "198.18.0.0", "198.19.255.255", "198.51.100.0", "198.51.100.255", "203.0.113.0", "203.0.113.255",
        "224.0.0.0", "239.255.255.255", "240.0.0.0", "255.255.255.254", "255.255.255.255",
        "::", "::1", "fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe80::", "febf:ffff::1",
        "fec0::1", "feff::1", /* old site-local, beside link-local */
        "ff00::", "ff02::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db8::", "2001:db8:ffff:ffff::1",
        "::ffff:127.0.0.1", "::ffff:10.1.2.3", "::ffff:0.0.0.0", "::127.0.0.1", "::10.0.0.1",
        "64:ff9b::127.0.0.1", "64:ff9b::192.168.1.1", "2002:7f00:1::", "2002:a00:1::1", "2002:c0a8:101::",
        "64:ff9b:1::8.8.8.8", "64:ff9b:1:ffff::1", "100::", "100::ffff:ffff:ffff:ffff",
        "2001::1", "2001:0:4136:e378::1", "2001:2::1", "2001:10::1", "2001:1ff:ffff::1",
        "3fff::", "3fff:fff:ffff::1", "5f00::1", "5f00:ffff::1",
        "not an address", "", "1.2.3", "fe80::1%eth0",
    };
    static const char *const allowed[] = {
        "1.0.0.0", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0", "126.255.255.255",
        "128.0.0.0", "169.253.255.255", "169.255.0.0", "172.15.255.255", "172.32.0.0", "191.255.255.255",
        "192.0.1.0", "192.0.3.0", "192.167.255.255", "192.169.0.0", "198.17.255.255", "198.20.0.0",
        "198.51.99.255", "198.51.101.0", "203.0.112.255", "203.0.114.0", "223.255.255.255", "8.8.8.8",
        "::1:0:0:0", "fbff:ffff::1", "fe7f:ffff::1", "2001:db7:ffff::1", "2001:db9::", "2606:4700::1111", "2a00:1450::1",
        "::ffff:8.8.8.8", "::8.8.8.8", "64:ff9b::8.8.8.8", "64:ff9b:2::1", "2002:808:808::",
        "2003::1", "2001:4860:4860::8888", "2001:200::1", "100:0:0:1::1", "3ffe:ffff::1", "3fff:1000::1",
        "5eff:ffff::1", "5f01::1",
    };
    char name[96];
    for (size_t i = 0; i < sizeof denied / sizeof *denied; i++) {
        snprintf(name, sizeof name, "%s is refused", denied[i]);
        check(httpc_address_denied(denied[i]), name, NULL);
    }
    for (size_t i = 0; i < sizeof allowed / sizeof *allowed; i++) {
        snprintf(name, sizeof name, "%s is allowed", allowed[i]);
        check(!httpc_address_denied(allowed[i]), name, NULL);
    }
}

/* A socket the loop cannot wait on fails its own transfer, as one that may
 * have reached the server, and no other (an error returned to curl would
 * fail every transfer of the multi). */
static void test_unwatched_socket(void) {
    sgw_worker w;
    lua_State *L = job_state(&w, "results = {}\n"
                                 "function fn(i)\n"
                                 "  local r, err, kind = http.request{url = 'http://127.0.0.1:' .. PORT .. '/x?delay=100'}\n"
                                 "  results[#results + 1] = r and tostring(r.status) or (tostring(kind) .. ': ' .. tostring(err))\n"
                                 "end");
    run r = { .w = &w, .L = L };
    int refs[3];
    refuse_adds = 1;
    spawn(&r, 3, refs);
    drive(&r, 3);
    refuse_adds = 0;
    luaL_dostring(L, "table.sort(results) return table.concat(results, ' | ')");
    const char *got = lua_tostring(L, -1);
    check(got && strcmp(got, "200 | 200 | protocol: cannot wait on the connection's socket: No space left on device") == 0 &&
              r.errors == 0, "only the transfer whose socket could not be watched fails", got ? got : r.last_error);
    lua_settop(L, 0);
    for (int i = 0; i < 3; i++) luaL_unref(L, LUA_REGISTRYINDEX, refs[i]);
    lua_close(L);
    httpc_free(w.httpc);
}

/* Transfers whose coroutines never resume: freed whichever of the engine
 * and the Lua state goes first. */
static void test_abandoned(int state_first) {
    sgw_worker w;
    lua_State *L = job_state(&w, "function fn(i) http.request{url = 'http://127.0.0.1:' .. PORT .. '/x?delay=5000'}\n"
                                 "  error('resumed') end");
    run r = { .w = &w, .L = L };
    int refs[10];
    spawn(&r, 10, refs);
    httpc_poll(w.httpc, 50, NULL, 0, on_ready, &r);
    check(httpc_active(w.httpc) == 10 && r.finished == 0, "abandoned transfers are pending", NULL);
    if (state_first) {
        lua_close(L);
        check(httpc_active(w.httpc) == 0, "closing the state ends its transfers", NULL);
        httpc_free(w.httpc);
    } else {
        httpc_free(w.httpc);
        for (int i = 0; i < 10; i++) luaL_unref(L, LUA_REGISTRYINDEX, refs[i]);
        lua_gc(L, LUA_GCCOLLECT, 0);
        lua_close(L);
    }
    check(r.finished == 0, "abandoned coroutines are never resumed", NULL);
}

/* A POST never goes over a connection used before (curl would send it again
 * by itself if that connection closed before an answer: a second post); once
 * answered, its connection is kept for the idempotent calls that follow,
 * which spares a connection per published target. The server numbers the
 * connections it accepts. */
static const char reuse_fn[] =
    "CONNS = {}\n"
    "function fn(i) for _, m in ipairs({'POST', 'GET', 'POST', 'GET'}) do\n"
    "  local r = assert(http.request{method = m, url = 'http://127.0.0.1:' .. PORT .. '/x?delay=0',\n"
    "    body = m == 'POST' and 'a=1' or nil})\n"
    "  CONNS[#CONNS + 1] = tonumber(r.body:match('\"conn\":(%d+)'))\n"
    "end end";

static void test_connection_reuse(void) {
    sgw_worker w;
    lua_State *L = job_state(&w, reuse_fn);
    run r = { .w = &w, .L = L };
    int ref = run_one(&r);
    check(r.finished == 1 && r.errors == 0, "four calls in one coroutine", r.last_error);
    char why[256];
    check(run_lua(L, "local c = CONNS\n"
                     "local text = table.concat(c, ' ')\n"
                     "if #c ~= 4 then return text, false end\n"
                     "return text, c[2] == c[1] and c[3] ~= c[1] and (c[4] == c[1] or c[4] == c[3])",
                  why, sizeof why),
          "each POST on a new connection, the first GET on the first POST's (connections of POST GET POST GET)", why);
    close_job_state(&w, L, ref);
}

/* Only the coroutine being resumed by the runner yields; a coroutine of its
 * own inside a job blocks instead of yielding to the wrong resumer. */
static void test_nested(void) {
    sgw_worker w;
    lua_State *L = job_state(&w, "function fn(i)\n"
                                 "  local inner = coroutine.wrap(function()\n"
                                 "    local r = http.request{url = 'http://127.0.0.1:' .. PORT .. '/x?delay=0'}\n"
                                 "    return r and r.status end)\n"
                                 "  local a = inner()\n"
                                 "  local ok, r = pcall(http.request, {url = 'http://127.0.0.1:' .. PORT .. '/x?delay=50'})\n"
                                 "  nested = tostring(a) .. ' ' .. tostring(ok and r.status)\n"
                                 "end");
    run r = { .w = &w, .L = L };
    int ref = run_one(&r);
    lua_getglobal(L, "nested");
    const char *got = lua_tostring(L, -1);
    check(got && strcmp(got, "200 200") == 0 && r.errors == 0, "nested coroutine blocks; pcall'd call yields",
          got ? got : r.last_error);
    lua_pop(L, 1);
    close_job_state(&w, L, ref);
}

int main(void) {
    char err[512];
    if (config_load_file("config/sgw.conf", 1, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (httpc_global_init() || start_server()) return 1;
    /* First: the timeout case leaves a request held by the server for a
     * while, which would count towards the peak. */
    test_address_rule();
    test_concurrent();
    test_blocking_and_errors();
    test_nested();
    test_connection_reuse();
    test_unwatched_socket();
    test_abandoned(1);
    test_abandoned(0);
    kill(server, SIGTERM);
    waitpid(server, NULL, 0);
    httpc_global_cleanup();
    config_free();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

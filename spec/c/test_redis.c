/*
 * test_redis.c — the `redis` global against a real server (named by
 * SGW_TEST_REDIS_URL): reply mapping, errors, eval_cached and its NOSCRIPT
 * path, AUTH/SELECT from the URL, reconnection after a dropped connection.
 * The failure paths that need no server (a dead port, a server that never
 * answers, no Redis configured, a bad URL) run always: they are what makes
 * a dead Redis cheap.
 */
#include "sgw.h"
#include "check.h"
#include "redis_fixture.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>


static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *PRELUDE =
    "why = nil\n"
    "function eq(got, want, what)\n"
    "  if got ~= want then\n"
    "    why = (what or '') .. ': got ' .. tostring(got) .. ', want ' .. tostring(want)\n"
    "    return false, why\n"
    "  end\n"
    "  return true\n"
    "end\n"
    "function all(...)\n"
    "  for i = 1, select('#', ...) do\n"
    "    if not select(i, ...) then return false, why end\n"
    "  end\n"
    "  return true\n"
    "end\n"
    "function raises(f, ...)\n"
    "  if pcall(f, ...) then why = 'did not raise'; return false, why end\n"
    "  return true\n"
    "end\n";

static lua_State *new_state(sgw_worker *w)
{
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lapi_redis_open(L, w);
    if (luaL_dostring(L, PRELUDE) != LUA_OK) {
        printf("prelude: %s\n", lua_tostring(L, -1));
        exit(1);
    }
    return L;
}

/* Runs a chunk that returns true on success, or false/nil and a message. */
static void lua_case(lua_State *L, const char *name, const char *code)
{
    int top = lua_gettop(L);
    if (luaL_dostring(L, code) != LUA_OK) {
        check(0, name, lua_tostring(L, -1));
    } else {
        int ok = lua_toboolean(L, top + 1);
        const char *msg = lua_gettop(L) >= top + 2 ? lua_tostring(L, top + 2) : NULL;
        check(ok, name, ok ? NULL : (msg ? msg : "returned false"));
    }
    lua_settop(L, top);
}

/* ------------------------------------------------------ without a server */

static void test_dead_port(void)
{
    sgw_worker w = {0};
    w.redis = redis_open("redis://127.0.0.1:1");
    lua_State *L = new_state(&w);
    lua_case(L, "dead port: first call fails",
             "local v, e, class = redis.call('PING')\n"
             "return all(eq(v, nil), eq(type(e), 'string'),"
             " eq(e ~= 'redis unavailable', true, 'first failure names its cause'), eq(class, 'unavailable'))");
    double t0 = now_ms();
    lua_case(L, "dead port: second call fails fast",
             "local v, e, class = redis.call('PING')\n"
             "return all(eq(v, nil), eq(e, 'redis unavailable'), eq(class, 'unavailable'))");
    double t1 = now_ms();
    char d[64];
    snprintf(d, sizeof d, "%.3f ms", t1 - t0);
    check(t1 - t0 < 5, "dead port: no connect attempt inside the retry interval", d);
    check(redis_ping(w.redis) != 0, "dead port: ping fails", NULL);
    check(!redis_healthy(w.redis), "dead port: not healthy", NULL);
    lua_close(L);
    redis_close(w.redis);
}

/* A listener that never accepts: connecting works (the kernel completes the
 * handshake), but no reply ever comes, so only the time-out ends a call. */
static void test_silent_server(void)
{
    char url[64];
    int fd = redis_fixture_silent(url, sizeof url);
    if (fd < 0) {
        check(0, "silent server: listener", NULL);
        return;
    }
    sgw_worker w = {0};
    w.redis = redis_open(url);
    lua_State *L = new_state(&w);
    double t0 = now_ms();
    lua_case(L, "silent server: command times out",
             "local v, e, class = redis.call('PING')\n"
             "return all(eq(v, nil), eq(e, 'redis i/o: timeout'), eq(class, 'timeout'))");
    double t1 = now_ms();
    char d[64];
    snprintf(d, sizeof d, "%.1f ms with redis.timeout_ms = %lld", t1 - t0,
             config_int("redis.timeout_ms"));
    check(t1 - t0 >= config_int("redis.timeout_ms") * 0.8 &&
          t1 - t0 < config_int("redis.timeout_ms") * 3, "silent server: bounded by the time-out", d);
    t0 = now_ms();
    lua_case(L, "silent server: next call fails fast",
             "return eq(select(2, redis.call('PING')), 'redis unavailable')");
    t1 = now_ms();
    snprintf(d, sizeof d, "%.3f ms", t1 - t0);
    check(t1 - t0 < 5, "silent server: fast failure", d);
    lua_close(L);
    redis_close(w.redis);
    close(fd);
}

static void test_unconfigured(void)
{
    sgw_worker w = {0};
    lua_State *L = new_state(&w);
    lua_case(L, "no redis configured",
             "local v, e = redis.call('PING')\n"
             "local v2, e2 = redis.eval_cached('return 1', 0)\n"
             "return all(eq(v, nil), eq(e, 'redis not configured'), eq(v2, nil),"
             " eq(e2, 'redis not configured'), eq(redis.null ~= nil, true, 'redis.null'))");
    lua_case(L, "misuse raises even when unconfigured",
             "return all(raises(redis.call), raises(redis.call, 'GET', {}),"
             " raises(redis.call, 'GET', true), raises(redis.eval_cached, 'return 1', 1),"
             " raises(redis.eval_cached, 'return 1', -1), raises(redis.eval_cached, 42, 0))");
    lua_close(L);

    w.redis = redis_open("http://127.0.0.1:6379");
    L = new_state(&w);
    lua_case(L, "bad URL: calls fail with the reason",
             "local v, e = redis.call('PING')\n"
             "return all(eq(v, nil), eq(tostring(e):find('redis://', 1, true) ~= nil, true, e))");
    lua_close(L);
    redis_close(w.redis);
    const char *bad[] = {"redis://", "redis://h:0", "redis://h:99999", "redis://h:12x",
                         "redis://h/x", "redis://[::1", NULL};
    for (int i = 0; bad[i]; i++) {
        sgw_redis *r = redis_open(bad[i]);
        check(redis_ping(r) != 0, "bad URL refused", bad[i]);
        redis_close(r);
    }
}

/* ---------------------------------------------------------- with a server */

static void test_live(const char *url)
{
    sgw_worker w = {0};
    w.redis = redis_open(url);
    check(redis_ping(w.redis) == 0, "ping", NULL);
    check(redis_healthy(w.redis), "healthy after a command", NULL);
    lua_State *L = new_state(&w);
    char setup[128];
    snprintf(setup, sizeof setup, "K = 'sgw_test:%ld:'", (long)getpid());
    (void)luaL_dostring(L, setup);

    lua_case(L, "SET/GET",
             "return all(eq(redis.call('SET', K .. 'a', 'v'), 'OK'),"
             " eq(redis.call('GET', K .. 'a'), 'v'))");
    lua_case(L, "binary-safe arguments and replies",
             "redis.call('SET', K .. 'bin', 'a\\0b\\r\\n')\n"
             "return eq(redis.call('GET', K .. 'bin'), 'a\\0b\\r\\n')");
    lua_case(L, "INCR gives integers",
             "local a = redis.call('INCR', K .. 'n')\n"
             "local b = redis.call('INCR', K .. 'n')\n"
             "return all(eq(a, 1), eq(b, 2), eq(math.type(b), 'integer'))");
    lua_case(L, "number arguments",
             "redis.call('SET', K .. 'num', 40)\n"
             "return all(eq(redis.call('INCRBY', K .. 'num', 2), 42),"
             " eq(redis.call('INCRBYFLOAT', K .. 'num', 0.5), '42.5'))");
    lua_case(L, "nil reply is redis.null",
             "return eq(redis.call('GET', K .. 'missing'), redis.null)");
    lua_case(L, "arrays keep nil positions",
             "local t = redis.call('MGET', K .. 'a', K .. 'missing', K .. 'a')\n"
             "return all(eq(type(t), 'table'), eq(#t, 3), eq(t[1], 'v'), eq(t[2], redis.null),"
             " eq(t[3], 'v'))");
    lua_case(L, "list round trip",
             "redis.call('RPUSH', K .. 'l', 'x', 'y', 'z')\n"
             "local t = redis.call('LRANGE', K .. 'l', 0, -1)\n"
             "return all(eq(#t, 3), eq(t[1], 'x'), eq(t[3], 'z'),"
             " eq(#redis.call('LRANGE', K .. 'nolist', 0, -1), 0, 'empty array'))");
    lua_case(L, "error reply is nil, message, 'reply'",
             "local v, e, c = redis.call('INCR', K .. 'a')\n"
             "local v2, e2, c2 = redis.call('NOSUCHCOMMAND')\n"
             "local v3, e3, c3 = redis.eval_cached('return redis.error_reply(\\'MINE failed\\')', 0)\n"
             "return all(eq(v, nil), eq(e:match('^ERR') ~= nil, true, e), eq(c, 'reply'), eq(v2, nil),"
             " eq(type(e2), 'string'), eq(c2, 'reply'), eq(v3, nil), eq(e3, 'MINE failed'), eq(c3, 'reply'))");
    check(redis_healthy(w.redis), "an error reply is not an outage", NULL);
    lua_case(L, "status reply is a string",
             "return eq(redis.call('PING'), 'PONG')");

    const char *script_setup =
        "S = \"redis.call('INCRBY', KEYS[1], ARGV[1]) return {redis.call('GET', KEYS[1]), ARGV[2], {tonumber(ARGV[1])}}\"";
    (void)luaL_dostring(L, script_setup);
    lua_case(L, "eval_cached",
             "local t = redis.eval_cached(S, 1, K .. 'ev', 5, 'x')\n"
             "return all(eq(t[1], '5'), eq(t[2], 'x'), eq(t[3][1], 5, 'nested'))");
    lua_case(L, "eval_cached again (by SHA)",
             "local t = redis.eval_cached(S, 1, K .. 'ev', 1, 'y')\n"
             "return eq(t[1], '6')");
    lua_case(L, "eval_cached after SCRIPT FLUSH (NOSCRIPT path)",
             "local sha = redis.call('SCRIPT', 'LOAD', S)\n"
             "eq(redis.call('SCRIPT', 'FLUSH'), 'OK')\n"
             "local gone = redis.call('SCRIPT', 'EXISTS', sha)[1]\n"
             "local t, e = redis.eval_cached(S, 1, K .. 'ev', 1, 'z')\n"
             "local back = redis.call('SCRIPT', 'EXISTS', sha)[1]\n"
             "return all(eq(gone, 0, 'flushed'), eq(t and t[1], '7', e), eq(back, 1, 'reloaded'))");
    lua_case(L, "eval_cached script error is nil, message",
             "local v, e = redis.eval_cached(\"return redis.call('NOSUCH')\", 0)\n"
             "local v2, e2 = redis.eval_cached('this is not lua', 0)\n"
             "return all(eq(v, nil), eq(type(e), 'string'), eq(v2, nil), eq(type(e2), 'string'))");
    lua_case(L, "eval_cached: nil and nested errors",
             "return all(eq(redis.eval_cached('return nil', 0), redis.null),"
             " eq(redis.eval_cached(\"return {1, redis.error_reply('boom')}\", 0)[2].err:match('boom$'), 'boom'))");
    lua_case(L, "eval_cached: many distinct scripts",
             "for i = 1, 200 do\n"
             "  local v = redis.eval_cached('return ' .. i, 0)\n"
             "  if v ~= i then return false, 'script ' .. i end\n"
             "end\n"
             "return eq(redis.eval_cached(S, 1, K .. 'ev', 1, 'w')[1], '8')");

    /* A dropped connection: the next call fails, calls inside the retry
     * interval fail fast, and the one after it reconnects. */
    lua_case(L, "killed connection: first call after fails",
             "local id = redis.call('CLIENT', 'ID')\n"
             "redis.call('CLIENT', 'KILL', 'ID', id, 'SKIPME', 'no')\n"
             "local v, e, c = redis.call('PING')\n"
             "local v2, e2, c2 = redis.call('PING')\n"
             "return all(eq(v, nil), eq(type(e), 'string'), eq(c, 'unavailable'), eq(e2, 'redis unavailable'),"
             " eq(c2, 'unavailable'))");
    check(!redis_healthy(w.redis), "unhealthy after an I/O failure", NULL);
    usleep((useconds_t)(config_int("redis.retry_interval_ms") * 1000 + 50000));
    lua_case(L, "reconnects after the retry interval",
             "return eq(redis.call('GET', K .. 'a'), 'v')");
    check(redis_healthy(w.redis), "healthy again", NULL);

    /* AUTH and SELECT come from the URL. Only for URLs without user info,
     * where host:port can be reused. */
    const char *hp = url + strlen("redis://");
    if (strncmp(url, "redis://", 8) == 0 && strchr(hp, '@') == NULL) {
        char base[256], u[300];
        size_t hplen = strcspn(hp, "/");
        snprintf(base, sizeof base, "%.*s", (int)hplen, hp);
        int otherdb = hp[hplen] == '/' && atoi(hp + hplen + 1) == 1 ? 2 : 1;
        snprintf(u, sizeof u, "redis://%s/%d", base, otherdb);
        sgw_worker w1 = {0};
        w1.redis = redis_open(u);
        lua_State *L1 = new_state(&w1);
        (void)luaL_dostring(L1, setup);
        lua_case(L1, "SELECT from the URL",
                 "redis.call('SET', K .. 'db1', 'one')\n"
                 "return eq(redis.call('GET', K .. 'db1'), 'one')");
        lua_case(L, "other database untouched",
                 "return eq(redis.call('GET', K .. 'db1'), redis.null)");
        lua_case(L1, "cleanup db 1", "redis.call('DEL', K .. 'db1') return true");
        lua_close(L1);
        redis_close(w1.redis);

        snprintf(u, sizeof u, "redis://:not%%40the-password@%s", base);
        sgw_redis *r = redis_open(u);
        check(redis_ping(r) != 0, "AUTH from the URL is sent (and refused here)", NULL);
        redis_close(r);
    }

    lua_case(L, "cleanup",
             "local keys = redis.call('KEYS', K .. '*')\n"
             "if #keys > 0 then redis.call('DEL', table.unpack(keys)) end\n"
             "return eq(#redis.call('KEYS', K .. '*'), 0)");
    lua_close(L);
    redis_close(w.redis);
}

int main(void)
{
    if (redis_fixture_config() != 0)
        return 1;

    test_dead_port();
    test_silent_server();
    test_unconfigured();

    const char *url = getenv("SGW_TEST_REDIS_URL");
    if (url == NULL || *url == '\0') {
        printf("SKIP: SGW_TEST_REDIS_URL not set\n");
    } else {
        test_live(url);
    }
    config_free();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/*
 * test_redis_loop.c — redis.* calls of coroutines that wait on a loop's
 * connection (redis_loop.c, driven through loop.c as the workers drive it):
 * many calls in flight at once on one connection, each coroutine getting its
 * own reply; error replies; the NOSCRIPT path; SELECT queued ahead of the
 * first command; a connection the server closed between calls, replaced
 * before the next one; a server that never answers (time-out) and a dead
 * port. The live part needs a real server (SGW_TEST_REDIS_URL); the failure
 * paths run always.
 */
#include "sgw.h"
#include "check.h"
#include "redis_fixture.h"
#include "loop_runner.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void open_worker(sgw_worker *w, const char *url) {
    memset(w, 0, sizeof *w);
    w->redis = redis_open(url);
    w->redis_loop = redis_loop_new(url, NCO);
    w->L = luaL_newstate();
    luaL_openlibs(w->L);
    lua_register(w->L, "check", l_check);
    lapi_redis_open(w->L, w);
    char setup[96];
    snprintf(setup, sizeof setup, "K = 'sgw_loop_test:%ld:'; started, ended = 0, 0", (long)getpid());
    (void)luaL_dostring(w->L, setup);
}

static void close_worker(sgw_worker *w) {
    lua_close(w->L);
    redis_loop_free(w->redis_loop);
    redis_close(w->redis);
}

/* A set-up step (AUTH, SELECT) refused at refused_url: the call fails, and
 * its command never ran (in database 0, where a pipeline sent behind the
 * refusal would have run it). */
static void expect_setup_refused(const char *url, const char *refused_url, const char *what) {
    sgw_worker w;
    open_worker(&w, refused_url);
    run_many(&w, what,
             "local v, e, class = redis.call('SET', K .. 'refused', 'x')\n"
             "check(v == nil and class == 'unavailable' and e:find('set-up refused', 1, true),"
             " 'a refused set-up fails the call', tostring(e))\n", 3);
    close_worker(&w);
    open_worker(&w, url);
    (void)luaL_dostring(w.L, "check(redis.call('EXISTS', K .. 'refused') == 0,"
                             " 'no call ran in database 0 behind the refused set-up')\n"
                             "redis.call('DEL', K .. 'refused')");
    close_worker(&w);
}

static void test_live(const char *url) {
    sgw_worker w;
    open_worker(&w, url);

    /* Fifty coroutines: every one has sent its INCR before the first reply
     * is read, and each gets its own reply. */
    run_many(&w, "fifty calls in flight",
             "started = started + 1\n"
             "local v, e = redis.call('RPUSH', K .. 'order', I)\n"
             "check(started == 50, 'all sent before any reply came back', tostring(started))\n"
             "check(math.type(v) == 'integer' and v >= 1 and v <= 50, 'its own reply', tostring(v or e))\n"
             "ended = ended + 1\n", 50);
    (void)luaL_dostring(w.L, "check(ended == 50, 'fifty replies')");
    /* Redis ran them in the order they were sent. */
    run_many(&w, "order kept",
             "local t = redis.call('LRANGE', K .. 'order', 0, -1)\n"
             "local ok = #t == 50\n"
             "for i = 1, #t do ok = ok and t[i] == tostring(i) end\n"
             "check(ok, 'sent in the order the coroutines called', table.concat(t, ','))\n", 1);

    run_many(&w, "replies",
             "check(redis.call('SET', K .. I, 'v' .. I) == 'OK', 'SET')\n"
             "check(redis.call('GET', K .. I) == 'v' .. I, 'GET after SET')\n"
             "check(redis.call('GET', K .. 'missing') == redis.null, 'nil reply')\n"
             "local v, e, class = redis.call('INCR', K .. I)\n"
             "check(v == nil and e:match('^ERR') and class == 'reply', 'error reply: nil, message, reply', e)\n"
             "local t = redis.eval_cached('return {KEYS[1], ARGV[1] + 1}', 1, K .. I, I)\n"
             "check(t[1] == K .. I and t[2] == I + 1, 'eval_cached')\n", 8);

    /* SCRIPT FLUSH: each coroutine's EVALSHA is refused and sent again
     * with the script. */
    run_many(&w, "flush", "check(redis.call('SCRIPT', 'FLUSH') == 'OK', 'flushed')\n", 1);
    run_many(&w, "NOSCRIPT path",
             "local v, e = redis.eval_cached('return ARGV[1] * 2', 0, I)\n"
             "check(v == I * 2, 'sent again with the script', tostring(e))\n", 10);

    /* The loop's connection closed by the server while no call waits on
     * it (a restart; nobody watches it between calls): the next calls see
     * it closed before they send and go on a new connection, not failing. */
    run_many(&w, "the connection to kill",
             "local id = redis.call('CLIENT', 'ID')\n"
             "redis.call('SET', K .. 'victim', id)\n", 1);
    (void)luaL_dostring(w.L,
        "local id = redis.call('GET', K .. 'victim')\n"   /* not yieldable: the blocking connection */
        "check(redis.call('CLIENT', 'KILL', 'ID', id) == 1, 'the loop connection killed')\n");
    run_many(&w, "after the kill",
             "local id, e, class = redis.call('CLIENT', 'ID')\n"
             "check(math.type(id) == 'integer', 'not failed', tostring(e) .. ' ' .. tostring(class))\n"
             "check(id ~= tonumber(redis.call('GET', K .. 'victim')), 'on a new connection', tostring(id))\n", 5);

    (void)luaL_dostring(w.L,
        "local keys = redis.call('KEYS', K .. '*')\n"
        "if #keys > 0 then redis.call('DEL', table.unpack(keys)) end");
    close_worker(&w);

    /* SELECT from the URL goes ahead of the first command. */
    const char *hp = url + strlen("redis://");
    if (strncmp(url, "redis://", 8) == 0 && strchr(hp, '@') == NULL) {
        char base[256], u[300];
        size_t hplen = strcspn(hp, "/");
        snprintf(base, sizeof base, "%.*s", (int)hplen, hp);
        snprintf(u, sizeof u, "redis://%s/3", base);
        sgw_worker w3;
        open_worker(&w3, u);
        run_many(&w3, "SELECT queued ahead",
                 "redis.call('SET', K .. 'db3', 'three')\n"
                 "check(redis.call('GET', K .. 'db3') == 'three', 'in database 3')\n", 1);
        (void)luaL_dostring(w3.L, "check(redis.call('GET', K .. 'db3') == 'three', 'seen by the blocking connection too')\n"
                                  "redis.call('DEL', K .. 'db3')");
        close_worker(&w3);

        snprintf(u, sizeof u, "redis://%s/99999", base);
        expect_setup_refused(url, u, "SELECT refused");
        snprintf(u, sizeof u, "redis://:wrong-password@%s", base);
        expect_setup_refused(url, u, "AUTH refused");
    }
}

/* A listener that never accepts: the handshake completes, no reply comes. */
static void test_silent_server(void) {
    char url[64];
    int fd = redis_fixture_silent(url, sizeof url);
    if (fd < 0) {
        check(0, "silent server: listener", NULL);
        return;
    }
    sgw_worker w;
    open_worker(&w, url);
    uint64_t t0 = clock_mono_ms();
    run_many(&w, "silent server",
             "local v, e, class = redis.call('PING')\n"
             "check(v == nil and class == 'timeout', 'timed out', tostring(e))\n", 5);
    uint64_t t1 = clock_mono_ms();
    char d[64];
    snprintf(d, sizeof d, "%llu ms", (unsigned long long)(t1 - t0));
    check(t1 - t0 >= (uint64_t)config_int("redis.timeout_ms") &&
          t1 - t0 < (uint64_t)config_int("redis.timeout_ms") * 3 + 100, "silent server: bounded by the time-out", d);
    run_many(&w, "silent server, then",
             "local v, e, class = redis.call('PING')\n"
             "check(e == 'redis unavailable' and class == 'unavailable', 'fails at once in the back-off', tostring(e))\n", 3);
    close_worker(&w);
    close(fd);
}

static void test_dead_port(void) {
    sgw_worker w;
    open_worker(&w, "redis://127.0.0.1:1");
    run_many(&w, "dead port",
             "local v, e, class = redis.call('PING')\n"
             "check(v == nil and class == 'unavailable', 'unavailable', tostring(e))\n", 3);
    close_worker(&w);
}

int main(void) {
    if (redis_fixture_config() != 0)
        return 1;

    test_dead_port();
    test_silent_server();
    const char *url = getenv("SGW_TEST_REDIS_URL");
    if (url == NULL || *url == '\0') printf("SKIP: SGW_TEST_REDIS_URL not set\n");
    else test_live(url);
    config_free();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

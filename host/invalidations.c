/*
 * invalidations.c — news that cached credentials may be stale, from every
 * instance, through Redis pub/sub.
 *
 * A counter moves whenever a message arrives on <redis.namespace>:invalidate
 * (an instance rotated or revoked a credential: redis.invalidate), when this
 * instance invalidates, and whenever the subscription was lost and made
 * again (messages may have been missed). Lua compares it with the value it
 * saw when it cached something (redis.invalidations). While the subscription
 * is down the count reads as unknown (-1), and callers must not trust what
 * they cached: they ask Redis on every request, as before.
 *
 * A silent half-open connection is caught by a PING every second that must
 * be answered within two.
 *
 * On a Redis Cluster a plain PUBLISH reaches the subscribers of every node
 * (the cluster bus carries it), so one subscription on any node hears all;
 * when that node dies the next subscription goes to the next node.
 */
#include "sgw.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#define POLL_MS       250
#define PING_EVERY_MS 1000
#define PONG_WITHIN_MS 2000
#define RETRY_MS      1000

static atomic_llong    count;
static atomic_int      subscribed;
static atomic_int      stop_asked;
static int             started;
static pthread_t       thread;
static char            channel[200];
static sgw_redis      *conn;            /* only for its URL, AUTH and SELECT */

long long invalidations_count(void) {
    return atomic_load(&subscribed) ? atomic_load(&count) : -1;
}

void invalidations_bump(void) { atomic_fetch_add(&count, 1); }

/* Also for processes that only publish (the CLI): named from the config. */
const char *invalidations_channel(void) {
    if (!channel[0]) snprintf(channel, sizeof channel, "%s:invalidate", config_str("redis.namespace"));
    return channel;
}

static int64_t now_ms(void) { return (int64_t)clock_mono_ms(); }

static void pause_ms(int ms) {
    for (int waited = 0; waited < ms && !atomic_load(&stop_asked); waited += 50) {
        struct timespec ts = { 0, 50 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

/* Handles one reply; returns 1 when it was the answer to our PING. */
static int on_reply(redisReply *r) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_STRING) return 0;
    const char *kind = r->element[0]->str;
    if (strcmp(kind, "message") == 0) {
        atomic_fetch_add(&count, 1);
    } else if (strcmp(kind, "subscribe") == 0) {
        /* Whatever was sent while we were away is unknown: count a change. */
        atomic_fetch_add(&count, 1);
        atomic_store(&subscribed, 1);
    } else if (strcmp(kind, "pong") == 0) {
        return 1;
    }
    return 0;
}

/* One connection's life: subscribe, then read until it fails or stop. */
static void listen_once(void) {
    const char *err;
    redisContext *c = redis_take_context(conn, &err);
    if (!c) return;
    const char *argv[2] = { "SUBSCRIBE", channel };
    if (redisAppendCommandArgv(c, 2, argv, NULL) != REDIS_OK) goto out;
    int done = 0;
    while (!done) {                    /* flush the request */
        if (redisBufferWrite(c, &done) != REDIS_OK) goto out;
    }
    int64_t ping_sent = 0, last_ping = now_ms();
    while (!atomic_load(&stop_asked)) {
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        int n = poll(&pfd, 1, POLL_MS);
        if (n < 0 && errno != EINTR) break;
        if (n > 0) {
            if (redisBufferRead(c) != REDIS_OK) break;
            void *reply = NULL;
            int ok = 1;
            while ((ok = redisGetReplyFromReader(c, &reply) == REDIS_OK) && reply) {
                if (on_reply(reply)) ping_sent = 0;
                freeReplyObject(reply);
                reply = NULL;
            }
            if (!ok) break;
        }
        int64_t now = now_ms();
        if (ping_sent && now - ping_sent > PONG_WITHIN_MS) break;      /* silent: start over */
        if (!ping_sent && now - last_ping >= PING_EVERY_MS) {
            const char *ping[1] = { "PING" };
            if (redisAppendCommandArgv(c, 1, ping, NULL) != REDIS_OK) break;
            done = 0;
            while (!done) {
                if (redisBufferWrite(c, &done) != REDIS_OK) goto out;
            }
            ping_sent = last_ping = now;
        }
    }
out:
    if (atomic_exchange(&subscribed, 0)) atomic_fetch_add(&count, 1);
    redisFree(c);
}

static void *main_loop(void *arg) {
    (void)arg;
    int warned = 0;
    while (!atomic_load(&stop_asked)) {
        listen_once();
        if (atomic_load(&stop_asked)) break;
        if (!warned) {
            log_msg(LOG_WARN, "invalidations", "not subscribed to %s; cached credentials are checked against Redis on every request until it is back",
                    channel);
            warned = 1;
        }
        pause_ms(RETRY_MS);
    }
    return NULL;
}

int invalidations_start(void) {
    invalidations_channel();
    if (!redis_configured()) return 0; /* never subscribed: the count stays unknown */
    conn = redis_open(config_str("redis.url"));
    atomic_store(&stop_asked, 0);
    if (pthread_create(&thread, NULL, main_loop, NULL)) {
        redis_close(conn);
        conn = NULL;
        return -1;
    }
    started = 1;
    return 0;
}

void invalidations_stop(void) {
    if (!started) return;
    atomic_store(&stop_asked, 1);
    pthread_join(thread, NULL);
    started = 0;
    atomic_store(&subscribed, 0);
    redis_close(conn);
    conn = NULL;
}

/* ------------------------------------------------------------------ Lua */

/* redis.invalidations(): the count, or nil while not subscribed. */
static int l_invalidations(lua_State *L)
{
    long long n = invalidations_count();
    if (n < 0)
        lua_pushnil(L);
    else
        lua_pushinteger(L, (lua_Integer)n);
    return 1;
}

/* What redis.call("PUBLISH", ...) answered, from index base + 1 on: true,
 * or nil, message, class. */
static int invalidate_k(lua_State *L, int status, lua_KContext base)
{
    (void)status;
    int first = (int)base + 1;
    if (lua_isinteger(L, first)) {
        lua_pushboolean(L, 1);
        return 1;
    }
    if (lua_isnil(L, first) && lua_gettop(L) >= first + 2)
        return 3;
    lua_pushnil(L);
    lua_pushliteral(L, "PUBLISH refused");
    lua_pushliteral(L, "reply");
    return 3;
}

/* redis.invalidate(): moves this instance's count at once and tells every
 * instance, through redis.call (upvalue 1), which waits like any call. */
static int l_invalidate(lua_State *L)
{
    invalidations_bump();
    int base = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushliteral(L, "PUBLISH");
    lua_pushstring(L, invalidations_channel());
    lua_pushliteral(L, "1");
    lua_callk(L, 3, LUA_MULTRET, (lua_KContext)base, invalidate_k);
    return invalidate_k(L, LUA_OK, (lua_KContext)base);
}

void lapi_invalidations_open(lua_State *L)
{
    lua_getglobal(L, "redis");
    lua_pushcfunction(L, l_invalidations);
    lua_setfield(L, -2, "invalidations");
    lua_getfield(L, -1, "call");
    lua_pushcclosure(L, l_invalidate, 1);
    lua_setfield(L, -2, "invalidate");
    lua_pop(L, 1);
}

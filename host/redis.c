/*
 * redis.c — the Lua global `redis` (redis.call, redis.eval_cached,
 * redis.null: docs/host-api.md) and the worker's blocking Redis connection
 * (hiredis, with time-outs). A coroutine its loop is resuming sends on the
 * loop's connection instead and waits without the thread (redis_loop.c);
 * the blocking one serves what cannot yield (a module loading, a sort
 * comparator, a handler's own coroutine) and the CLI.
 *
 * Redis only holds what is hot (rate-limit counters, short caches), and
 * callers fail open when it is gone. So a dead Redis must cost almost
 * nothing: after an I/O failure the connection is dropped and, until
 * redis.retry_interval_ms has passed, every call fails at once without
 * touching the network.
 *
 * With redis.cluster_urls set, an sgw_redis stands for a whole Redis
 * Cluster (redis_cluster.c), whose nodes are each an sgw_redis of the
 * single kind.
 */
#include "sgw.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#define DEFAULT_TIMEOUT_MS 250
#define DEFAULT_RETRY_MS   1000
#define SCRIPT_CACHE_MAX   64       /* distinct scripts remembered per Lua state */
#define REPLY_MT           "sgw.redis.reply"

struct sgw_redis {
    char        *host;
    int          port;
    char        *user;              /* NULL: AUTH with the password alone */
    char        *password;          /* NULL: no AUTH */
    int          db;                /* 0: no SELECT */
    char         url_error[128];    /* "" when the URL parsed */
    int          timeout_ms;
    int          retry_ms;
    redisContext *ctx;              /* NULL: not connected */
    int          failed;            /* 1 after a failure, until a connect works */
    uint64_t     fail_ms;           /* monotonic time of the last failure */
    char         msg[256];          /* message of the last failure */
    atomic_int   healthy;           /* read by the admin thread for /readyz */
    int          wrote;             /* the last failed command may have reached the server */
    sgw_cluster *cluster;           /* non-NULL: the rest is unused */
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ------------------------------------------------------------- the URL */

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Copies s[0..n) with %XX decoded (passwords may hold reserved characters). */
static char *pct_decode(const char *s, size_t n)
{
    char *out = malloc(n + 1);
    size_t j = 0;
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < n && (hi = hexval((unsigned char)s[i + 1])) >= 0 &&
            (lo = hexval((unsigned char)s[i + 2])) >= 0) {
            out[j++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            out[j++] = s[i];
        }
    }
    out[j] = '\0';
    return out;
}

/* redis://[[user]:password@]host[:port][/db]. On failure, r->url_error
 * says why (without the password). */
static void parse_url(sgw_redis *r, const char *url)
{
    const char *p, *at, *hp_end;
    r->port = 6379;
    if (url == NULL || strncmp(url, "redis://", 8) != 0) {
        snprintf(r->url_error, sizeof r->url_error, "redis.url must start with redis://");
        return;
    }
    p = url + 8;
    /* The last '@' ends the user info, so an unencoded '@' or '/' in a
     * password still parses. */
    at = strrchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon) {
            if (colon > p)
                r->user = pct_decode(p, (size_t)(colon - p));
            r->password = pct_decode(colon + 1, (size_t)(at - colon - 1));
        } else if (at > p) {
            r->password = pct_decode(p, (size_t)(at - p));
        }
        p = at + 1;
    }
    hp_end = p + strcspn(p, "/");
    const char *host_end, *port_start = NULL;
    const char *host_start = p;
    if (*p == '[') {                 /* [IPv6]:port */
        const char *rb = memchr(p, ']', (size_t)(hp_end - p));
        if (rb == NULL) {
            snprintf(r->url_error, sizeof r->url_error, "redis.url: unterminated '['");
            return;
        }
        host_start = p + 1;
        host_end = rb;
        if (rb + 1 < hp_end) {
            if (rb[1] != ':') {
                snprintf(r->url_error, sizeof r->url_error, "redis.url: bad port");
                return;
            }
            port_start = rb + 2;
        }
    } else {
        const char *colon = memchr(p, ':', (size_t)(hp_end - p));
        host_end = colon ? colon : hp_end;
        port_start = colon ? colon + 1 : NULL;
    }
    if (host_end == host_start) {
        snprintf(r->url_error, sizeof r->url_error, "redis.url: missing host");
        return;
    }
    if (port_start) {
        long port = 0;
        const char *q = port_start;
        for (; q < hp_end && isdigit((unsigned char)*q) && port <= 65535; q++)
            port = port * 10 + (*q - '0');
        if (q != hp_end || q == port_start || port < 1 || port > 65535) {
            snprintf(r->url_error, sizeof r->url_error, "redis.url: bad port");
            return;
        }
        r->port = (int)port;
    }
    r->host = malloc((size_t)(host_end - host_start) + 1);
    if (r->host == NULL) {
        snprintf(r->url_error, sizeof r->url_error, "out of memory");
        return;
    }
    memcpy(r->host, host_start, (size_t)(host_end - host_start));
    r->host[host_end - host_start] = '\0';

    if (*hp_end == '/' && hp_end[1] != '\0') {
        long db = 0;
        const char *q = hp_end + 1;
        for (; isdigit((unsigned char)*q) && db <= INT_MAX / 10; q++)
            db = db * 10 + (*q - '0');
        if (*q != '\0' || db > INT_MAX) {
            snprintf(r->url_error, sizeof r->url_error, "redis.url: bad database number");
            return;
        }
        r->db = (int)db;
    }
}

/* ------------------------------------------------------- the connection */

int redis_configured(void)
{
    return *config_str("redis.url") || *config_str("redis.cluster_urls");
}

sgw_redis *redis_open_node(const char *url)
{
    sgw_redis *r = calloc(1, sizeof *r);
    if (r == NULL) {
        log_msg(LOG_ERROR, "redis_open", "out of memory");
        abort();
    }
    atomic_init(&r->healthy, 0);
    r->timeout_ms = config_has("redis.timeout_ms") ? (int)config_int("redis.timeout_ms")
                                                   : DEFAULT_TIMEOUT_MS;
    r->retry_ms = config_has("redis.retry_interval_ms")
                      ? (int)config_int("redis.retry_interval_ms") : DEFAULT_RETRY_MS;
    if (r->timeout_ms <= 0)
        r->timeout_ms = DEFAULT_TIMEOUT_MS;
    if (r->retry_ms < 0)
        r->retry_ms = 0;
    parse_url(r, url);
    if (r->url_error[0])
        log_msg(LOG_ERROR, "redis_config", "%s", r->url_error);
    return r;
}

sgw_redis *redis_open(const char *url)
{
    const char *seeds = config_str("redis.cluster_urls");
    if (!*seeds)
        return redis_open_node(url);
    sgw_redis *r = calloc(1, sizeof *r);
    if (r == NULL) {
        log_msg(LOG_ERROR, "redis_open", "out of memory");
        abort();
    }
    atomic_init(&r->healthy, 0);
    r->cluster = redis_cluster_open(seeds);
    return r;
}

static char *dup_or_null(const char *s)
{
    char *d = s ? strdup(s) : NULL;
    if (s && d == NULL) {
        log_msg(LOG_ERROR, "redis_open", "out of memory");
        abort();
    }
    return d;
}

sgw_redis *redis_node_like(const sgw_redis *seed, const char *host, size_t hlen, int port)
{
    sgw_redis *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    atomic_init(&r->healthy, 0);
    r->host = strndup(host, hlen);
    if (r->host == NULL) {
        free(r);
        return NULL;
    }
    r->port = port;
    r->user = dup_or_null(seed->user);
    r->password = dup_or_null(seed->password);
    r->timeout_ms = seed->timeout_ms;
    r->retry_ms = seed->retry_ms;
    return r;
}

int redis_node_is(const sgw_redis *r, const char *host, size_t hlen, int port)
{
    return r->host && r->port == port && strlen(r->host) == hlen && memcmp(r->host, host, hlen) == 0;
}

const char *redis_node_host(const sgw_redis *r)
{
    return r->host ? r->host : "";
}

static void drop_secret(char *s)
{
    if (s) {
        OPENSSL_cleanse(s, strlen(s));
        free(s);
    }
}

void redis_close(sgw_redis *r)
{
    if (r == NULL)
        return;
    if (r->ctx)
        redisFree(r->ctx);
    redis_cluster_close(r->cluster);
    free(r->host);
    drop_secret(r->user);
    drop_secret(r->password);
    free(r);
}

sgw_cluster *redis_cluster_of(sgw_redis *r)
{
    return r ? r->cluster : NULL;
}

int redis_node_wrote(const sgw_redis *r)
{
    return r->wrote;
}

int redis_healthy(sgw_redis *r)
{
    if (r != NULL && r->cluster)
        return redis_cluster_healthy(r->cluster);
    return r != NULL && atomic_load(&r->healthy);
}

/* Drops the connection and starts the quiet period. msg names the cause. */
static void fail(sgw_redis *r, const char *kind, const char *what, const char *detail)
{
    /* detail may point into the context: format before freeing it */
    snprintf(r->msg, sizeof r->msg, "redis %s: %s", what, detail ? detail : "failed");
    if (r->ctx) {
        redisFree(r->ctx);
        r->ctx = NULL;
    }
    /* Log the start of an outage, not each of the fast failures inside it. */
    if (!r->failed)
        log_msg(LOG_WARN, "redis_unavailable", "%s (%s:%d)", r->msg, r->host, r->port);
    r->failed = 1;
    r->fail_ms = mono_ms();
    atomic_store(&r->healthy, 0);
    char labels[32];
    snprintf(labels, sizeof labels, "kind=\"%s\"", kind);
    metrics_count("sgw_redis_errors_total", labels, 1);
}

/* Runs a setup command (AUTH, SELECT) on a fresh context; 0 ok. */
static int setup_command(sgw_redis *r, const char *what, int argc, const char **argv)
{
    redisReply *rep = redisCommandArgv(r->ctx, argc, argv, NULL);
    if (rep == NULL) {
        fail(r, "connect", what, r->ctx->errstr);
        return -1;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        fail(r, "connect", what, rep->str);
        freeReplyObject(rep);
        return -1;
    }
    freeReplyObject(rep);
    return 0;
}

/* 0 when r->ctx is usable; else -1 with the reason in *err. */
static int ensure_connected(sgw_redis *r, const char **err)
{
    if (r->ctx)
        return 0;
    if (r->url_error[0]) {
        *err = r->url_error;
        return -1;
    }
    if (r->failed && mono_ms() - r->fail_ms < (uint64_t)r->retry_ms) {
        metrics_count("sgw_redis_errors_total", "kind=\"unavailable\"", 1);
        *err = "redis unavailable";
        return -1;
    }
    struct timeval tv = {r->timeout_ms / 1000, (r->timeout_ms % 1000) * 1000};
    r->ctx = redisConnectWithTimeout(r->host, r->port, tv);
    if (r->ctx == NULL || r->ctx->err) {
        fail(r, "connect", "connect", r->ctx ? r->ctx->errstr : "out of memory");
        *err = r->msg;
        return -1;
    }
    /* Without this a command could block forever on a silent server. */
    if (redisSetTimeout(r->ctx, tv) != REDIS_OK) {
        fail(r, "connect", "connect", "cannot set time-out");
        *err = r->msg;
        return -1;
    }
    redisEnableKeepAlive(r->ctx);
    if (r->password) {
        const char *argv[3] = {"AUTH", r->user ? r->user : r->password, r->password};
        if (setup_command(r, "auth", r->user ? 3 : 2, argv) != 0) {
            *err = r->msg;
            return -1;
        }
    }
    if (r->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", r->db);
        const char *argv[2] = {"SELECT", db};
        if (setup_command(r, "select", 2, argv) != 0) {
            *err = r->msg;
            return -1;
        }
    }
    if (r->failed)
        log_msg(LOG_INFO, "redis_reconnected", "%s:%d", r->host, r->port);
    r->failed = 0;
    return 0;
}

/* ---------------------------------------- for redis_loop.c's connections */

int redis_node_timeout_ms(const sgw_redis *r)
{
    return r->timeout_ms;
}

void redis_node_fail(sgw_redis *r, const char *kind, const char *detail, const char **err)
{
    fail(r, kind, "i/o", detail);
    *err = r->msg;
}

void redis_node_ok(sgw_redis *r)
{
    if (r->failed)
        log_msg(LOG_INFO, "redis_reconnected", "%s:%d", r->host, r->port);
    r->failed = 0;
    atomic_store(&r->healthy, 1);
}

/* Appends a set-up command to a fresh non-blocking context; 0 ok. */
static int append_setup(redisContext *c, int argc, const char **argv)
{
    return redisAppendCommandArgv(c, argc, argv, NULL) == REDIS_OK ? 0 : -1;
}

redisContext *redis_node_connect_nonblock(sgw_redis *r, int *nsetup, const char **err)
{
    *nsetup = 0;
    if (r->url_error[0]) {
        *err = r->url_error;
        return NULL;
    }
    if (r->failed && mono_ms() - r->fail_ms < (uint64_t)r->retry_ms) {
        metrics_count("sgw_redis_errors_total", "kind=\"unavailable\"", 1);
        *err = "redis unavailable";
        return NULL;
    }
    redisContext *c = redisConnectNonBlock(r->host, r->port);
    if (c == NULL || c->err) {
        fail(r, "connect", "connect", c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        *err = r->msg;
        return NULL;
    }
    redisEnableKeepAlive(c);
    if (r->password) {
        const char *argv[3] = {"AUTH", r->user ? r->user : r->password, r->password};
        if (append_setup(c, r->user ? 3 : 2, argv) != 0)
            goto oom;
        ++*nsetup;
    }
    if (r->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", r->db);
        const char *argv[2] = {"SELECT", db};
        if (append_setup(c, 2, argv) != 0)
            goto oom;
        ++*nsetup;
    }
    return c;
oom:
    redisFree(c);
    *nsetup = 0;
    *err = "redis: out of memory";
    return NULL;
}

/* Sends one command to one server. Returns the reply (error replies
 * included: the server answered), or NULL after an I/O failure with the
 * reason in *err. */
redisReply *redis_node_command(sgw_redis *r, int argc, const char **argv,
                               const size_t *lens, const char **err)
{
    r->wrote = 0;
    if (ensure_connected(r, err) != 0)
        return NULL;
    r->wrote = 1;
    redisReply *rep = redisCommandArgv(r->ctx, argc, argv, lens);
    if (rep == NULL) {
        int e = errno;
        /* hiredis reports a read time-out as EAGAIN's text; say what it is. */
        const char *detail = r->ctx->err == REDIS_ERR_IO &&
                                     (e == EAGAIN || e == EWOULDBLOCK)
                                 ? "timeout" : r->ctx->errstr;
        fail(r, "io", "i/o", detail);
        *err = r->msg;
        return NULL;
    }
    atomic_store(&r->healthy, 1);
    return rep;
}

/* One command to the server or, on a cluster, to the node of its keys. */
static redisReply *command(sgw_redis *r, int argc, const char **argv,
                           const size_t *lens, const char **err)
{
    if (r->cluster)
        return redis_cluster_command(r->cluster, redis_command_slot(argc, argv, lens),
                                     argc, argv, lens, err);
    return redis_node_command(r, argc, argv, lens, err);
}

int redis_pipeline(sgw_redis *r, int n, const int *argc, const char *const *const *argv,
                   const size_t *const *lens, redisReply **replies, const char **err)
{
    for (int i = 0; i < n; i++)
        replies[i] = NULL;
    r->wrote = 0;
    if (ensure_connected(r, err) != 0)
        return -1;
    r->wrote = 1;
    for (int i = 0; i < n; i++) {
        if (redisAppendCommandArgv(r->ctx, argc[i], (const char **)argv[i], lens[i]) != REDIS_OK) {
            fail(r, "io", "i/o", r->ctx->errstr);
            *err = r->msg;
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        void *rep = NULL;
        if (redisGetReply(r->ctx, &rep) != REDIS_OK || rep == NULL) {
            int e = errno;
            const char *detail = r->ctx->err == REDIS_ERR_IO && (e == EAGAIN || e == EWOULDBLOCK)
                                     ? "timeout" : r->ctx->errstr;
            for (int j = 0; j < i; j++) {
                freeReplyObject(replies[j]);
                replies[j] = NULL;
            }
            fail(r, "io", "i/o", detail);
            *err = r->msg;
            return -1;
        }
        replies[i] = rep;
    }
    atomic_store(&r->healthy, 1);
    return 0;
}

redisContext *redis_take_context(sgw_redis *r, const char **err)
{
    if (r->cluster)
        return redis_cluster_take_context(r->cluster, err);
    if (ensure_connected(r, err) != 0)
        return NULL;
    redisContext *c = r->ctx;
    r->ctx = NULL;
    return c;
}

int redis_ping(sgw_redis *r)
{
    const char *argv[1] = {"PING"}, *err;
    if (r == NULL)
        return -1;
    redisReply *rep = command(r, 1, argv, NULL, &err);
    if (rep == NULL)
        return -1;
    int ok = rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0;
    freeReplyObject(rep);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------------ Lua */

/* A reply held by Lua while it is converted, so that an error raised on the
 * way (the memory ceiling) still frees it. */
typedef struct reply_box {
    redisReply *reply;
} reply_box;

static int box_gc(lua_State *L)
{
    reply_box *b = luaL_checkudata(L, 1, REPLY_MT);
    if (b->reply) {
        freeReplyObject(b->reply);
        b->reply = NULL;
    }
    return 0;
}

static reply_box *push_box(lua_State *L)
{
    reply_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->reply = NULL;
    luaL_setmetatable(L, REPLY_MT);
    return b;
}

static void box_set(reply_box *b, redisReply *rep)
{
    if (b->reply)
        freeReplyObject(b->reply);
    b->reply = rep;
}

static void push_reply(lua_State *L, const redisReply *rep)
{
    luaL_checkstack(L, 4, "redis reply too deep");
    switch (rep->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        lua_pushlstring(L, rep->str, rep->len);
        break;
    case REDIS_REPLY_INTEGER:
        lua_pushinteger(L, (lua_Integer)rep->integer);
        break;
    case REDIS_REPLY_ARRAY: {
        int n = rep->elements > INT_MAX ? INT_MAX : (int)rep->elements;
        lua_createtable(L, n, 0);
        for (int i = 0; i < n; i++) {
            push_reply(L, rep->element[i]);
            lua_rawseti(L, -2, i + 1);
        }
        break;
    }
    case REDIS_REPLY_ERROR:
        /* Only inside arrays (EXEC, scripts): keep the position, mark it
         * as an error the way Redis's own Lua does. */
        lua_createtable(L, 0, 1);
        lua_pushlstring(L, rep->str, rep->len);
        lua_setfield(L, -2, "err");
        break;
    default:                         /* NIL */
        lua_pushlightuserdata(L, NULL);
        break;
    }
}

/* Pushes the Lua result(s) of a reply: value, or nil, message, "reply"
 * (Redis answered with an error: the connection is fine). */
static int push_result(lua_State *L, reply_box *b)
{
    const redisReply *rep = b->reply;
    int nres = 1;
    if (rep->type == REDIS_REPLY_ERROR) {
        lua_pushnil(L);
        lua_pushlstring(L, rep->str, rep->len);
        lua_pushliteral(L, "reply");
        nres = 3;
    } else {
        push_reply(L, rep);
    }
    box_set(b, NULL);
    return nres;
}

/* nil, message, class for a call that got no answer: "timeout" when Redis
 * did not answer within redis.timeout_ms, else "unavailable" (refused,
 * lost, not configured, in its back-off after a failure). */
static int io_failure(lua_State *L, const char *err)
{
    lua_pushnil(L);
    lua_pushstring(L, err);
    /* command() words every time-out "redis i/o: timeout". */
    lua_pushstring(L, strstr(err, "timeout") ? "timeout" : "unavailable");
    return 3;
}

/* Checks arguments first..last (strings or numbers) and fills argv/lens
 * from index `at` on. */
static void collect_args(lua_State *L, int first, int last, const char **argv,
                         size_t *lens, int at)
{
    for (int i = first; i <= last; i++, at++) {
        int t = lua_type(L, i);
        if (t != LUA_TSTRING && t != LUA_TNUMBER)
            luaL_argerror(L, i, "string or number expected");
        /* converts numbers in place; the stack slot keeps the text alive */
        argv[at] = lua_tolstring(L, i, &lens[at]);
    }
}

/* Allocates argv and lens for n arguments as one collected userdata. */
static void alloc_args(lua_State *L, int n, const char ***argv, size_t **lens)
{
    void *mem = lua_newuserdatauv(L, (size_t)n * (sizeof(char *) + sizeof(size_t)), 0);
    *lens = mem;
    *argv = (const char **)((size_t *)mem + n);
}

static sgw_redis *worker_redis(lua_State *L)
{
    sgw_worker *w = lua_touserdata(L, lua_upvalueindex(1));
    return w ? w->redis : NULL;
}

/* The loop's connection when L is the coroutine its loop is resuming (and
 * may yield); else NULL and the call blocks on the worker's connection. */
static sgw_redis_loop *usable_loop(lua_State *L)
{
    sgw_worker *w = lua_touserdata(L, lua_upvalueindex(1));
    return w && redis_loop_usable(w->redis_loop, L) ? w->redis_loop : NULL;
}

static sgw_redis_loop *worker_loop(lua_State *L)
{
    sgw_worker *w = lua_touserdata(L, lua_upvalueindex(1));
    return w ? w->redis_loop : NULL;
}

/* Sends the command on the loop's connection and yields (the lightuserdata
 * tells the loop the wait is its own); k carries on with the reply. */
static int yield_for_reply(lua_State *L, sgw_redis_loop *rl, int argc, const char **argv,
                           const size_t *lens, lua_KContext ctx, lua_KFunction k);

/* The reply the loop resumed L with, boxed at the top of the stack; NULL
 * with the reason in *err after an I/O failure. */
static redisReply *take_reply(lua_State *L, reply_box **box, const char **err)
{
    *box = push_box(L);
    redisReply *rep = redis_loop_take(worker_loop(L), L, err);
    box_set(*box, rep);
    return rep;
}

/* Misuse: on a cluster, the keys of one command must share a slot. */
static void check_one_slot(lua_State *L, const sgw_redis *r, int argc, const char **argv,
                           const size_t *lens)
{
    if (r && r->cluster && redis_command_slot(argc, argv, lens) == -2)
        luaL_error(L, "redis: the keys of one command must share a hash slot on a cluster "
                      "(give them one {tag})");
}

static int yield_for_reply(lua_State *L, sgw_redis_loop *rl, int argc, const char **argv,
                           const size_t *lens, lua_KContext ctx, lua_KFunction k)
{
    const char *err;
    if (redis_loop_send(rl, L, argc, argv, lens, &err) != 0)
        return io_failure(L, err);
    lua_pushlightuserdata(L, rl);
    return lua_yieldk(L, 1, ctx, k);
}

static int call_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    reply_box *b;
    const char *err;
    if (take_reply(L, &b, &err) == NULL)
        return io_failure(L, err);
    return push_result(L, b);
}

static int call_run(lua_State *L)
{
    int n = lua_gettop(L);
    luaL_checkstring(L, 1);
    const char **argv;
    size_t *lens;
    alloc_args(L, n, &argv, &lens);
    collect_args(L, 1, n, argv, lens, 0);
    sgw_redis *r = worker_redis(L);
    if (r == NULL)
        return io_failure(L, "redis not configured");
    check_one_slot(L, r, n, argv, lens);
    sgw_redis_loop *rl = usable_loop(L);
    if (rl)
        return yield_for_reply(L, rl, n, argv, lens, 0, call_k);
    reply_box *b = push_box(L);
    const char *err;
    redisReply *rep = command(r, n, argv, lens, &err);
    if (rep == NULL)
        return io_failure(L, err);
    box_set(b, rep);
    return push_result(L, b);
}

static void sha1_hex(const char *s, size_t n, char out[41])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[20];
    unsigned int len = sizeof md;
    if (EVP_Digest(s, n, md, &len, EVP_sha1(), NULL) != 1)
        abort();                     /* only when the library itself is broken */
    for (int i = 0; i < 20; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[40] = '\0';
}

/* The SHA1 of the script at index 1, from the cache in upvalue 2 (keyed by
 * the script's text, so no pointer can go stale; Lua hashes a long string
 * once). Upvalue 3 counts entries; the cache starts over when full. */
static const char *script_sha(lua_State *L, size_t *len)
{
    lua_pushvalue(L, 1);
    if (lua_rawget(L, lua_upvalueindex(2)) == LUA_TSTRING)
        return lua_tolstring(L, -1, len);
    lua_pop(L, 1);
    size_t slen;
    const char *src = lua_tolstring(L, 1, &slen);
    char hex[41];
    sha1_hex(src, slen, hex);
    lua_Integer count = lua_tointeger(L, lua_upvalueindex(3));
    if (count >= SCRIPT_CACHE_MAX) {
        lua_newtable(L);
        lua_replace(L, lua_upvalueindex(2));
        count = 0;
    }
    lua_pushvalue(L, 1);
    lua_pushlstring(L, hex, 40);
    lua_rawset(L, lua_upvalueindex(2));
    lua_pushinteger(L, count + 1);
    lua_replace(L, lua_upvalueindex(3));
    lua_pushlstring(L, hex, 40);
    return lua_tolstring(L, -1, len);
}

/* Checks (script, nkeys, ...) at 1..n and builds EVALSHA sha nkeys args...
 * in a collected userdata; returns argc (n + 1). */
static int evalsha_args(lua_State *L, int n, const char ***argv, size_t **lens)
{
    luaL_checktype(L, 1, LUA_TSTRING);
    lua_Integer nkeys = luaL_checkinteger(L, 2);
    luaL_argcheck(L, nkeys >= 0 && nkeys <= n - 2, 2, "nkeys out of range");
    int argc = n + 1;
    size_t shalen;
    const char *sha = script_sha(L, &shalen);
    alloc_args(L, argc, argv, lens);
    (*argv)[0] = "EVALSHA";
    (*lens)[0] = 7;
    (*argv)[1] = sha;
    (*lens)[1] = shalen;
    collect_args(L, 2, n, *argv, *lens, 2);
    return argc;
}

/* Builds EVAL src nkeys args... in place of EVALSHA (the server has not
 * seen the script: new server, SCRIPT FLUSH, another cluster node). */
static void eval_instead(lua_State *L, const char **argv, size_t *lens)
{
    argv[0] = "EVAL";
    lens[0] = 4;
    argv[1] = lua_tolstring(L, 1, &lens[1]);
}

static int is_noscript(const redisReply *rep)
{
    return rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOSCRIPT", 8) == 0;
}

/* ctx: the count of arguments << 1, | 1 once the script was sent along. */
static int eval_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    int n = (int)(ctx >> 1);
    reply_box *b;
    const char *err;
    redisReply *rep = take_reply(L, &b, &err);
    if (rep == NULL)
        return io_failure(L, err);
    if (!(ctx & 1) && is_noscript(rep)) {
        lua_settop(L, n);
        const char **argv;
        size_t *lens;
        int argc = evalsha_args(L, n, &argv, &lens);
        eval_instead(L, argv, lens);
        return yield_for_reply(L, worker_loop(L), argc, argv, lens, ctx | 1, eval_k);
    }
    return push_result(L, b);
}

static int eval_cached_run(lua_State *L)
{
    int n = lua_gettop(L);
    const char **argv;
    size_t *lens;
    int argc = evalsha_args(L, n, &argv, &lens);
    sgw_redis *r = worker_redis(L);
    if (r == NULL)
        return io_failure(L, "redis not configured");
    check_one_slot(L, r, argc, argv, lens);
    sgw_redis_loop *rl = usable_loop(L);
    if (rl)
        return yield_for_reply(L, rl, argc, argv, lens, (lua_KContext)n << 1, eval_k);
    reply_box *b = push_box(L);
    const char *err;
    redisReply *rep = command(r, argc, argv, lens, &err);
    if (rep == NULL)
        return io_failure(L, err);
    box_set(b, rep);
    if (is_noscript(rep)) {
        eval_instead(L, argv, lens);
        rep = command(r, argc, argv, lens, &err);
        if (rep == NULL)
            return io_failure(L, err);
        box_set(b, rep);
    }
    return push_result(L, b);
}

/* redis.key_slot(key): the cluster slot of a key (0..16383; one Redis has
 * no slots, but the answer is the same), so that Lua can spread keys over
 * tags. */
static int l_key_slot(lua_State *L)
{
    size_t len;
    const char *key = luaL_checklstring(L, 1, &len);
    lua_pushinteger(L, (lua_Integer)redis_key_slot(key, len));
    return 1;
}

/* The bindings that may block: on a socket thread each migrates first
 * (SGW_MIGRATE_IF_SOCKET); its continuation runs the same body again on the
 * worker's own thread. */
#define BLOCKING_BINDING(name, body) \
    static int name##_k(lua_State *L, int status, lua_KContext ctx) \
    { \
        (void)status; \
        (void)ctx; \
        return body(L); \
    } \
    static int name(lua_State *L) \
    { \
        SGW_MIGRATE_IF_SOCKET(L, name##_k); \
        return body(L); \
    }

BLOCKING_BINDING(l_call, call_run)
BLOCKING_BINDING(l_eval_cached, eval_cached_run)

void lapi_redis_open(lua_State *L, sgw_worker *w)
{
    if (luaL_newmetatable(L, REPLY_MT)) {
        lua_pushcfunction(L, box_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushliteral(L, "redis reply");
        lua_setfield(L, -2, "__metatable");
    }
    lua_pop(L, 1);

    lua_createtable(L, 0, 3);
    lua_pushlightuserdata(L, w);
    lua_pushcclosure(L, l_call, 1);
    lua_setfield(L, -2, "call");
    /* eval_cached: the worker (upvalue 1), the script -> sha1 cache (2)
     * and its count (3). */
    lua_newtable(L);
    int cache = lua_gettop(L);
    lua_pushlightuserdata(L, w);
    lua_pushvalue(L, cache);
    lua_pushinteger(L, 0);
    lua_pushcclosure(L, l_eval_cached, 3);
    lua_setfield(L, -3, "eval_cached");
    lua_pop(L, 1);
    lua_pushcfunction(L, l_key_slot);
    lua_setfield(L, -2, "key_slot");
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "null");
    lua_setglobal(L, "redis");
}

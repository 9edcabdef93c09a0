/*
 * redis_cluster.c — sgw on a Redis Cluster (redis.cluster_urls): key slots
 * (CRC16 with {hash tags}), the slot map from CLUSTER SLOTS, one connection
 * per node (each an sgw_redis of its own, with its own quiet period after a
 * failure), and the redirections: MOVED (the slot lives elsewhere now:
 * remember it and reread the map), ASK (a slot being migrated: ASKING and
 * the command once on the node named), TRYAGAIN and CLUSTERDOWN (a few short
 * retries while the cluster settles).
 *
 * A command names its keys (redis_command_slot); those of one command must
 * share a slot, which callers guarantee with hash tags: the Lua binding
 * raises otherwise. Commands without keys (PING, INFO, PUBLISH, TIME) go to
 * any node that answers. After a node fails the map is read again (no more
 * often than every REFRESH_MIN_MS), so a promoted replica is found once the
 * cluster has failed over; until then calls for that node's slots fail fast
 * like calls to a dead single Redis.
 *
 * Two paths share the map and the reading of redirections: here, the
 * blocking one (calls that cannot yield, the subscriber, the admin
 * listener, the CLI), which waits out each hop and each reading of the map
 * on its thread; and a worker loop's (redis_loop.c), which sends each hop
 * and CLUSTER SLOTS without waiting and goes by the map as it is until the
 * new one comes. A map is one worker's (or one thread's), never shared
 * between threads.
 */
#include "sgw.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <hiredis/hiredis.h>

#define SLOTS          16384
#define MAX_HOPS       5           /* redirections and retries of one command */
#define REFRESH_MIN_MS 100
#define MAX_NODES      1024

struct sgw_cluster {
    sgw_redis **nodes;             /* seeds first, then nodes the map or a redirection named */
    int         nnodes, cap;
    short       slot_node[SLOTS];  /* index into nodes; -1 unknown */
    int         stale;             /* read the map again before the next command */
    uint64_t    refreshed_ms;
    int         next_any;          /* round robin for keyless commands and pub/sub */
    atomic_int  healthy;
    char        msg[160];
};

/* ------------------------------------------------------------- key slots */

/* CRC16-CCITT (XMODEM), the one Redis Cluster uses: polynomial 0x1021. */
static uint16_t crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

unsigned redis_key_slot(const char *key, size_t len)
{
    /* Only the part between the first '{' and the next '}' counts, when
     * it is not empty: keys with one tag share a slot. */
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(open + 1, '}', len - from);
        if (close && close > open + 1)
            return crc16(open + 1, (size_t)(close - open - 1)) & (SLOTS - 1);
    }
    return crc16(key, len) & (SLOTS - 1);
}

static int is_cmd(const char *s, size_t n, const char *name)
{
    return strlen(name) == n && strncasecmp(s, name, n) == 0;
}

static int is_any(const char *s, size_t n, const char *const *names)
{
    for (; *names; names++)
        if (is_cmd(s, n, *names))
            return 1;
    return 0;
}

int redis_command_slot(int argc, const char *const *argv, const size_t *lens)
{
    static const char *const keyless[] = {
        "PING", "INFO", "PUBLISH", "SCRIPT", "CLUSTER", "TIME", "ECHO", "AUTH", "SELECT",
        "CONFIG", "CLIENT", "COMMAND", "DBSIZE", "FLUSHALL", "FLUSHDB", "ASKING", "READONLY",
        "SUBSCRIBE", "LASTSAVE", "ROLE", NULL};
    static const char *const all_keys[] = {"DEL", "EXISTS", "MGET", "UNLINK", "TOUCH", "WATCH", NULL};
    size_t l0 = lens ? lens[0] : strlen(argv[0]);
#define LEN(i) (lens ? lens[i] : strlen(argv[i]))
    int first, step = 1, last = argc - 1;
    if (argc < 2 || is_any(argv[0], l0, keyless))
        return -1;
    if (is_cmd(argv[0], l0, "EVAL") || is_cmd(argv[0], l0, "EVALSHA")) {
        long nkeys = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
        if (nkeys <= 0)
            return -1;
        first = 3;
        last = nkeys > argc - 3 ? argc - 1 : (int)(2 + nkeys);
    } else if (is_any(argv[0], l0, all_keys)) {
        first = 1;
    } else if (is_cmd(argv[0], l0, "MSET") || is_cmd(argv[0], l0, "MSETNX")) {
        first = 1;
        step = 2;
    } else {
        first = last = 1;
    }
    int slot = -1;
    for (int i = first; i <= last; i += step) {
        int s = (int)redis_key_slot(argv[i], LEN(i));
        if (slot >= 0 && s != slot)
            return -2;
        slot = s;
    }
#undef LEN
    return slot;
}

/* ------------------------------------------------------------- the nodes */

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Adds a node; its index, or -1 (and n closed) when there is no room. */
static int add_node(sgw_cluster *c, sgw_redis *n)
{
    if (c->nnodes >= MAX_NODES) {
        redis_close(n);
        return -1;
    }
    if (c->nnodes == c->cap) {
        int cap = c->cap ? c->cap * 2 : 8;
        sgw_redis **grown = realloc(c->nodes, (size_t)cap * sizeof *grown);
        if (grown == NULL) {
            redis_close(n);
            return -1;
        }
        c->nodes = grown;
        c->cap = cap;
    }
    c->nodes[c->nnodes] = n;
    return c->nnodes++;
}

/* The index of the node at host:port, added (with the seeds' credentials)
 * when new; -1 when it cannot be. */
static int node_index(sgw_cluster *c, const char *host, size_t hlen, int port)
{
    for (int i = 0; i < c->nnodes; i++)
        if (redis_node_is(c->nodes[i], host, hlen, port))
            return i;
    sgw_redis *n = redis_node_like(c->nodes[0], host, hlen, port);
    return n ? add_node(c, n) : -1;
}

sgw_cluster *redis_cluster_open(const char *seeds)
{
    sgw_cluster *c = calloc(1, sizeof *c);
    if (c == NULL) {
        log_msg(LOG_ERROR, "redis_cluster", "out of memory");
        abort();
    }
    atomic_init(&c->healthy, 0);
    for (int i = 0; i < SLOTS; i++)
        c->slot_node[i] = -1;
    c->stale = 1;
    for (const char *p = seeds; *p;) {
        size_t n = strcspn(p, ",");
        const char *from = p, *to = p + n;
        while (from < to && isspace((unsigned char)*from))
            from++;
        while (to > from && isspace((unsigned char)to[-1]))
            to--;
        if (to > from) {
            char *url = strndup(from, (size_t)(to - from));
            if (url == NULL || add_node(c, redis_open_node(url)) < 0) {
                log_msg(LOG_ERROR, "redis_cluster", "out of memory");
                abort();
            }
            free(url);
        }
        p += n;
        if (*p == ',')
            p++;
    }
    if (c->nnodes == 0)
        log_msg(LOG_ERROR, "redis_config", "redis.cluster_urls names no node");
    return c;
}

void redis_cluster_close(sgw_cluster *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < c->nnodes; i++)
        redis_close(c->nodes[i]);
    free(c->nodes);
    free(c);
}

int redis_cluster_healthy(sgw_cluster *c)
{
    return atomic_load(&c->healthy);
}

/* Reads CLUSTER SLOTS into the map: [[start, end, [host, port, id], replicas...], ...].
 * 0 when a node answered with a usable map. */
static int apply_slots(sgw_cluster *c, const redisReply *rep, const char *asked_host)
{
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements == 0)
        return -1;
    /* The answer lists every covered slot: what it leaves out is uncovered. */
    for (int s = 0; s < SLOTS; s++)
        c->slot_node[s] = -1;
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *r = rep->element[i];
        if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_INTEGER ||
            r->element[1]->type != REDIS_REPLY_INTEGER || r->element[2]->type != REDIS_REPLY_ARRAY ||
            r->element[2]->elements < 2 || r->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            r->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        long long from = r->element[0]->integer, to = r->element[1]->integer;
        const redisReply *host = r->element[2]->element[0];
        /* An empty host means "the address you reached me at". */
        const char *h = host->len ? host->str : asked_host;
        int idx = node_index(c, h, strlen(h), (int)r->element[2]->element[1]->integer);
        if (idx < 0 || from < 0 || to >= SLOTS || from > to)
            continue;
        for (long long s = from; s <= to; s++)
            c->slot_node[s] = (short)idx;
    }
    return 0;
}

static void refresh(sgw_cluster *c)
{
    uint64_t now = mono_ms();
    if (now - c->refreshed_ms < REFRESH_MIN_MS)
        return;
    c->refreshed_ms = now;
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    /* Nodes the last map named first: a seed may be long gone. */
    for (int k = 0; k < c->nnodes; k++) {
        int i = (c->next_any + k) % c->nnodes;
        const char *err;
        redisReply *rep = redis_node_command(c->nodes[i], 2, argv, NULL, &err);
        if (rep == NULL)
            continue;
        int ok = apply_slots(c, rep, redis_node_host(c->nodes[i])) == 0;
        freeReplyObject(rep);
        if (ok) {
            c->stale = 0;
            return;
        }
    }
}

/* The node of a slot by the map as it is (any node for -1 or an unknown
 * slot: a redirection names the right one). */
static sgw_redis *known_node(sgw_cluster *c, int slot)
{
    if (slot >= 0 && c->slot_node[slot] >= 0)
        return c->nodes[c->slot_node[slot]];
    if (c->nnodes == 0)
        return NULL;
    c->next_any = (c->next_any + 1) % c->nnodes;
    return c->nodes[c->next_any];
}

static sgw_redis *node_for(sgw_cluster *c, int slot)
{
    if (c->stale)
        refresh(c);
    return known_node(c, slot);
}

sgw_redis *redis_cluster_node_known(sgw_cluster *c, int slot)
{
    return known_node(c, slot);
}

int redis_cluster_map_due(sgw_cluster *c)
{
    uint64_t now = mono_ms();
    if (!c->stale || now - c->refreshed_ms < REFRESH_MIN_MS)
        return 0;
    c->refreshed_ms = now;
    return 1;
}

sgw_redis *redis_cluster_nth_node(sgw_cluster *c, int k)
{
    if (k < 0 || k >= c->nnodes)
        return NULL;
    return c->nodes[(c->next_any + k) % c->nnodes];
}

void redis_cluster_map_asked(sgw_cluster *c, int k)
{
    if (c->nnodes > 0)
        c->next_any = (c->next_any + k + 1) % c->nnodes;
}

int redis_cluster_apply_map(sgw_cluster *c, const redisReply *rep, sgw_redis *from)
{
    if (apply_slots(c, rep, redis_node_host(from)) != 0)
        return -1;
    c->stale = 0;
    return 0;
}

/* "MOVED 3999 127.0.0.1:6381" / "ASK ...": the node named, or NULL. */
static sgw_redis *redirect_target(sgw_cluster *c, const char *msg, int *slot)
{
    const char *sp = strchr(msg, ' ');
    if (sp == NULL)
        return NULL;
    char *end;
    long s = strtol(sp + 1, &end, 10);
    if (*end != ' ' || s < 0 || s >= SLOTS)
        return NULL;
    const char *addr = end + 1, *colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr)
        return NULL;
    int port = atoi(colon + 1);
    if (port <= 0 || port > 65535)
        return NULL;
    int idx = node_index(c, addr, (size_t)(colon - addr), port);
    if (idx < 0)
        return NULL;
    *slot = (int)s;
    return c->nodes[idx];
}

static int error_is(const redisReply *rep, const char *word)
{
    size_t n = strlen(word);
    return rep->type == REDIS_REPLY_ERROR && rep->len >= n && strncmp(rep->str, word, n) == 0 &&
           (rep->len == n || rep->str[n] == ' ');
}

int redis_cluster_redirect(sgw_cluster *c, const redisReply *rep, sgw_redis **to)
{
    if (error_is(rep, "TRYAGAIN") || error_is(rep, "CLUSTERDOWN")) {
        /* TRYAGAIN (keys of a migrating slot apart), CLUSTERDOWN (a
         * failover in progress): the map is read again before the retry. */
        c->stale = 1;
        return CLUSTER_RETRY;
    }
    int moved = error_is(rep, "MOVED");
    if (!moved && !error_is(rep, "ASK"))
        return CLUSTER_FINAL;
    int slot;
    *to = redirect_target(c, rep->str, &slot);
    if (*to == NULL)
        return CLUSTER_FINAL;        /* unreadable: the caller sees the error */
    if (!moved)
        return CLUSTER_ASK;
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i] == *to)
            c->slot_node[slot] = (short)i;
    c->stale = 1;                    /* other slots probably moved too */
    return CLUSTER_MOVED;
}

int redis_cluster_may_hop(int hop)
{
    return hop + 1 < MAX_HOPS;
}

int redis_cluster_retry_ms(int hop)
{
    return 10 << hop;
}

void redis_cluster_lost(sgw_cluster *c)
{
    c->stale = 1;
    atomic_store(&c->healthy, 0);
}

void redis_cluster_answered(sgw_cluster *c)
{
    atomic_store(&c->healthy, 1);
}

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The command on `n`, after ASKING when `asking`. */
static redisReply *send_to(sgw_redis *n, int asking, int argc, const char **argv,
                           const size_t *lens, const char **err)
{
    if (!asking)
        return redis_node_command(n, argc, argv, lens, err);
    static const char *const ask[1] = {"ASKING"};
    const size_t ask_len[1] = {6};
    const int pair_argc[2] = {1, argc};
    const char *const *pair_argv[2] = {ask, argv};
    const size_t *pair_lens[2] = {ask_len, lens};
    redisReply *replies[2];
    if (redis_pipeline(n, 2, pair_argc, pair_argv, pair_lens, replies, err) != 0)
        return NULL;
    freeReplyObject(replies[0]);
    return replies[1];
}

/* The blocking path: waits out each redirection and retry on the thread. */
redisReply *redis_cluster_command(sgw_cluster *c, int slot, int argc, const char **argv,
                                  const size_t *lens, const char **err)
{
    sgw_redis *n = node_for(c, slot);
    int asking = 0;
    for (int hop = 0;; hop++) {
        if (n == NULL) {
            *err = "redis cluster: no node known";
            return NULL;
        }
        redisReply *rep = send_to(n, asking, argc, argv, lens, err);
        if (rep == NULL) {
            /* The node may have failed over: read the map again, and try
             * the slot's new node at once (keyless commands: the next
             * node). Unchanged, the slot is down. A command that may have
             * reached the lost node is not sent again (an INCR counted
             * twice), as the loop does. */
            redis_cluster_lost(c);
            sgw_redis *next = node_for(c, slot);
            if (redis_node_wrote(n) || (slot >= 0 && next == n) || !redis_cluster_may_hop(hop))
                return NULL;
            n = next;
            asking = 0;
            continue;
        }
        redis_cluster_answered(c);
        sgw_redis *to = NULL;
        int kind = redis_cluster_redirect(c, rep, &to);
        if (kind == CLUSTER_FINAL || !redis_cluster_may_hop(hop))
            return rep;              /* still redirected: the caller sees the error */
        freeReplyObject(rep);
        asking = kind == CLUSTER_ASK;
        if (kind == CLUSTER_RETRY) {
            pause_ms(redis_cluster_retry_ms(hop));
            n = node_for(c, slot);
        } else {
            n = to;
        }
    }
}

redisContext *redis_cluster_take_context(sgw_cluster *c, const char **err)
{
    *err = "redis cluster: no node reachable";
    /* The next node each time: a subscriber whose node died moves on. */
    for (int k = 0; k < c->nnodes; k++) {
        c->next_any = (c->next_any + 1) % c->nnodes;
        redisContext *ctx = redis_take_context(c->nodes[c->next_any], err);
        if (ctx)
            return ctx;
    }
    return NULL;
}

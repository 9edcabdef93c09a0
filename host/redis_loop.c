/*
 * redis_loop.c — a worker loop's own Redis connections, on which the
 * coroutines it runs wait for their replies without holding the thread.
 *
 * A redis.* call of the coroutine being resumed (redis_loop_set_current)
 * appends its command to a connection's output and yields; the loop writes
 * whatever its coroutines appended in one go the next time it polls (so
 * calls made in one turn of the loop travel as one pipelined batch), reads
 * the replies as they come and resumes their coroutines in order: Redis
 * answers in the order it was asked, so each connection's waiting line is a
 * FIFO.
 *
 * Nothing here blocks, the connections included (a non-blocking connect
 * whose AUTH and SELECT go first; calls made meanwhile wait in the line,
 * unsent, until both are answered). A reply that
 * does not come within redis.timeout_ms, or a lost connection, fails every
 * call on the connection ("timeout", "unavailable"), and redis.c's back-off
 * then fails calls at once until redis.retry_interval_ms has passed. One the
 * server closed while no call waited on it (a restart, while the worker was
 * idle and nobody polled it) is found closed before the next call is sent,
 * and that call goes on a new connection instead of failing.
 *
 * On a Redis Cluster (redis.cluster_urls) the loop keeps one such
 * connection per node it talks to, made when first needed and keyed by the
 * node of the worker's slot map (redis_cluster.c). A command goes to the node
 * of its slot (keyless ones to any node) and is kept, formatted, until its
 * answer, because the answer may send it elsewhere while its coroutine goes
 * on waiting: MOVED updates the map and sends it to the node named, ASK
 * sends ASKING and the command once to the node named, TRYAGAIN and
 * CLUSTERDOWN send it again after a short pause (a due time the loop's poll
 * honours, not a sleep). A node lost fails the calls waiting on it as a
 * single server's loss does, and marks the map for reading again; but a call
 * that never left this worker (its node refused the connection, or never
 * accepted it) waits once for the map being read and goes by it, so that a
 * worker that had nothing to do while a master failed over finds the
 * promoted replica on its first call instead of failing it.
 *
 * The map is the worker's own (each worker opens its own sgw_redis, hence
 * its own sgw_cluster), read and changed only on the worker's thread, by the
 * loop and by the blocking path of calls that cannot yield: no lock. After a
 * MOVED or a lost node (and at the start) the loop reads it again without
 * waiting, at most every REFRESH_MIN_MS: CLUSTER SLOTS joins a node's line
 * like any call, and its reply replaces the map when it comes. Calls sent
 * meanwhile go by the map as it is, and a MOVED corrects any of them.
 */
#include "sgw.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

typedef struct waiter {
    lua_State *co;                  /* NULL: set-up, ASKING, or a call whose coroutine went */
    uint64_t   deadline;            /* monotonic ms; in the retry list: when to send again */
    int        setup;               /* AUTH or SELECT */
    char      *cmd;                 /* cluster: the command, formatted (owned), for redirections */
    size_t     cmdlen;
    int        slot;                /* cluster: the command's slot, -1 keyless */
    int        hops;                /* redirections and retries so far */
    int        map;                 /* cluster: CLUSTER SLOTS, for the map */
    int        map_wait;            /* cluster: MAP_AWAITED while parked for the map, then MAP_WAITED */
    int        held;                /* not sent yet: waits for the set-up's replies */
    int        asking;              /* an ASKING, ahead of its command */
} waiter;

enum { MAP_AWAITED = 1, MAP_WAITED = 2 };

/* One server's connection and the calls waiting on it. */
typedef struct conn {
    sgw_redis   *node;              /* its settings and back-off (redis.c) */
    int          own_node;          /* one server: ours; a cluster's node: the map's */
    redisContext *ctx;              /* NULL: not connected */
    int          established;       /* ctx has written or read: commands may have reached the node */
    int          unwritten;         /* commands appended since the last complete write */
    int          setup_left;        /* AUTH and SELECT replies still to come: calls are held */
    waiter      *line, *spare;      /* ring of cap; spare: failing detaches the line into it */
    int          cap, head, len;
} conn;

struct sgw_redis_loop {
    sgw_cluster *cluster;           /* NULL: one server, conns[0] */
    conn       **conns;             /* of max_conns; made on first use */
    int          nconns, max_conns;
    int          line_cap;
    waiter      *later;             /* cluster: TRYAGAIN, CLUSTERDOWN; of max_waiters */
    int          nlater, max_waiters;
    int          maps_asked;        /* cluster: CLUSTER SLOTS waiting in some line */
    uint64_t     map_deadline;      /* when the last of them fails by timeout */
    lua_State   *current;           /* the coroutine being resumed */
    /* What the coroutine being resumed by deliver() gets. */
    lua_State   *given_co;
    redisReply  *given;             /* NULL: failed, see given_err */
    char         given_err[256];
};

static conn *conn_new(sgw_redis *node, int own_node, int cap) {
    conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->node = node;
    c->own_node = own_node;
    c->cap = cap;
    c->line = calloc((size_t)cap, sizeof *c->line);
    c->spare = calloc((size_t)cap, sizeof *c->spare);
    if (!c->line || !c->spare) {
        free(c->line);
        free(c->spare);
        free(c);
        return NULL;
    }
    return c;
}

static void conn_free(conn *c) {
    if (!c) return;
    if (c->ctx) redisFree(c->ctx);
    for (int i = 0; i < c->len; i++) redisFreeCommand(c->line[(c->head + i) % c->cap].cmd);
    if (c->own_node) redis_close(c->node);
    free(c->line);
    free(c->spare);
    free(c);
}

static sgw_redis_loop *loop_new(sgw_cluster *cluster, int max_conns, int line_cap, int max_waiters) {
    sgw_redis_loop *rl = calloc(1, sizeof *rl);
    if (!rl) return NULL;
    rl->cluster = cluster;
    rl->max_conns = max_conns;
    rl->line_cap = line_cap;
    rl->max_waiters = max_waiters;
    rl->conns = calloc((size_t)max_conns, sizeof *rl->conns);
    if (!rl->conns) {
        free(rl);
        return NULL;
    }
    return rl;
}

sgw_redis_loop *redis_loop_new(const char *url, int max_waiters) {
    /* each coroutine waits on one call, plus AUTH and SELECT */
    sgw_redis_loop *rl = loop_new(NULL, 1, max_waiters + 4, max_waiters);
    if (!rl) return NULL;
    rl->conns[0] = conn_new(redis_open_node(url), 1, rl->line_cap);
    if (!rl->conns[0]) {
        redis_loop_free(rl);
        return NULL;
    }
    rl->nconns = 1;
    return rl;
}

sgw_redis_loop *redis_loop_new_cluster(sgw_cluster *cluster, int max_waiters) {
    /* On one node: each coroutine's call and the ASKING ahead of it, plus
     * AUTH and SELECT. The retry list holds at most one call each. */
    sgw_redis_loop *rl = loop_new(cluster, REDIS_LOOP_NODES_MAX, 2 * max_waiters + 4, max_waiters);
    if (!rl) return NULL;
    rl->later = calloc((size_t)max_waiters, sizeof *rl->later);
    if (!rl->later) {
        redis_loop_free(rl);
        return NULL;
    }
    return rl;
}

void redis_loop_free(sgw_redis_loop *rl) {
    if (!rl) return;
    for (int i = 0; i < rl->nconns; i++) conn_free(rl->conns[i]);
    for (int i = 0; i < rl->nlater; i++) redisFreeCommand(rl->later[i].cmd);
    if (rl->given) freeReplyObject(rl->given);
    free(rl->conns);
    free(rl->later);
    free(rl);
}

void redis_loop_set_current(sgw_redis_loop *rl, lua_State *co) {
    if (rl) rl->current = co;
}

int redis_loop_usable(sgw_redis_loop *rl, lua_State *L) {
    return rl && rl->current == L && lua_isyieldable(L);
}

int redis_loop_in_flight(sgw_redis_loop *rl) {
    if (!rl) return 0;
    for (int i = 0; i < rl->nconns; i++)
        if (rl->conns[i]->len > 0) return 1;
    return rl->nlater > 0;
}

int redis_loop_timeout(sgw_redis_loop *rl, int timeout_ms) {
    if (!rl || rl->nlater == 0) return timeout_ms;
    uint64_t now = clock_mono_ms(), due = rl->later[0].deadline;
    for (int i = 1; i < rl->nlater; i++)
        if (rl->later[i].deadline < due) due = rl->later[i].deadline;
    int until = due > now ? (int)(due - now) : 0;
    return timeout_ms < 0 || until < timeout_ms ? until : timeout_ms;
}

/* Hands the coroutine what it waited for. */
static void deliver(sgw_redis_loop *rl, lua_State *co, redisReply *rep, const char *err,
                    void (*on_ready)(lua_State *, int, void *), void *ud) {
    if (!co) {
        if (rep) freeReplyObject(rep);
        return;
    }
    rl->given_co = co;
    rl->given = rep;
    snprintf(rl->given_err, sizeof rl->given_err, "%s", err ? err : "");
    on_ready(co, 0, ud);
    /* Not taken: the coroutine ended some other way. */
    if (rl->given_co == co) {
        if (rl->given) freeReplyObject(rl->given);
        rl->given = NULL;
        rl->given_co = NULL;
    }
}

/* A call that will get no reply: its command goes, its coroutine learns why. */
static void give_up(sgw_redis_loop *rl, waiter *w, const char *err,
                    void (*on_ready)(lua_State *, int, void *), void *ud) {
    redisFreeCommand(w->cmd);
    w->cmd = NULL;
    deliver(rl, w->co, NULL, err, on_ready, ud);
}

static void read_map(sgw_redis_loop *rl);
static void ask_map(sgw_redis_loop *rl);

/* A cluster call whose node cannot be reached, and which has not reached
 * it, waits (once) for the slot map being read, then goes by it. 1: parked,
 * w's command now the retry list's; 0: nothing to wait for. */
static int await_map(sgw_redis_loop *rl, const waiter *w) {
    if (rl->maps_asked == 0 || w->map_wait || !w->co || !w->cmd || w->slot < 0 || rl->nlater == rl->max_waiters)
        return 0;
    waiter parked = *w;
    parked.map_wait = MAP_AWAITED;
    parked.deadline = rl->map_deadline;   /* the ask's own time-out releases them too */
    rl->later[rl->nlater++] = parked;
    return 1;
}

/* The map came, or no ask is left: parked calls go by the map as it is. */
static void release_parked(sgw_redis_loop *rl) {
    for (int i = 0; i < rl->nlater; i++)
        if (rl->later[i].map_wait == MAP_AWAITED) rl->later[i].deadline = 0;
}

/* Drops the connection and fails every call waiting on it with err. */
static void fail_all(sgw_redis_loop *rl, conn *c, const char *kind, const char *detail,
                     void (*on_ready)(lua_State *, int, void *), void *ud) {
    const char *err;
    redis_node_fail(c->node, kind, detail, &err);
    /* Nothing of a connection that never got through reached the node. */
    int unsent = rl->cluster && !c->established;
    if (rl->cluster) redis_cluster_lost(rl->cluster);
    char msg[256];
    snprintf(msg, sizeof msg, "%s", err);
    if (c->ctx) redisFree(c->ctx);
    c->ctx = NULL;
    c->unwritten = 0;
    c->setup_left = 0;
    /* Resumed coroutines may send again (and fail at once in the back-off):
     * the line they find is a new, empty one. */
    int n = c->len;
    for (int i = 0; i < n; i++) c->spare[i] = c->line[(c->head + i) % c->cap];
    waiter *failed = c->spare;
    c->spare = c->line;
    c->line = failed;
    c->head = 0;
    c->len = 0;
    int maps_lost = 0;
    for (int i = 0; i < n; i++) maps_lost += failed[i].map;
    rl->maps_asked -= maps_lost;
    /* An ask that never reached its node (a dead one whose quiet period had
     * passed) goes to the next node at once. */
    if (unsent && maps_lost) ask_map(rl);
    else if (unsent) read_map(rl);
    if (maps_lost && rl->maps_asked == 0) release_parked(rl);
    for (int i = 0; i < n; i++)
        if (!unsent || !await_map(rl, &failed[i])) give_up(rl, &failed[i], msg, on_ready, ud);
}

/* c has no call waiting and the server wrote to it or closed it: nothing
 * but a close (or an error) can have come, so a closed connection is dropped
 * quietly, for the next call to make a new one. */
static void read_while_idle(conn *c) {
    if (redisBufferRead(c->ctx) != REDIS_OK) {
        redisFree(c->ctx);
        c->ctx = NULL;
    }
}

static void push_waiter(conn *c, waiter w) {
    c->line[(c->head + c->len) % c->cap] = w;
    c->len++;
}

static const char asking_cmd[] = "*1\r\n$6\r\nASKING\r\n";

/* Sends the calls held while AUTH and SELECT were answered, in line order;
 * -1: out of memory. A held call is not written before its set-up is
 * known good: Redis runs a pipeline's commands whatever came of the ones
 * before, so a refused SELECT would have them write to database 0. */
static int send_held(sgw_redis_loop *rl, conn *c) {
    for (int i = 0; i < c->len; i++) {
        waiter *w = &c->line[(c->head + i) % c->cap];
        if (!w->held) continue;
        int rc = w->asking ? redisAppendFormattedCommand(c->ctx, asking_cmd, sizeof asking_cmd - 1)
                           : redisAppendFormattedCommand(c->ctx, w->cmd, w->cmdlen);
        if (rc != REDIS_OK) return -1;
        w->held = 0;
        c->unwritten = 1;
        /* One server never redirects: the command need not be kept. */
        if (!rl->cluster && !w->asking) {
            redisFreeCommand(w->cmd);
            w->cmd = NULL;
        }
    }
    return 0;
}

/* Appends w's command (after ASKING when asking) to c, connecting first when
 * need be. 0: w and its command belong to c's line; -1 with the reason in
 * *err: nothing was sent and w is still the caller's. */
static int conn_push(conn *c, waiter w, int asking, const char **err) {
    if (c->len + 4 > c->cap) {
        *err = "redis: too many calls waiting on this worker's connection";
        return -1;
    }
    /* Nobody watches a connection while its worker is idle or lent: the
     * server may have closed it meanwhile (a restart, a failover). Look
     * before sending, so that the call goes on a new connection (or, on a
     * cluster, finds the promoted replica) instead of failing. */
    if (c->ctx && c->len == 0 && !c->unwritten) {
        struct pollfd p = { .fd = c->ctx->fd, .events = POLLIN };
        if (poll(&p, 1, 0) > 0) read_while_idle(c);
    }
    uint64_t deadline = clock_mono_ms() + (uint64_t)redis_node_timeout_ms(c->node);
    if (!c->ctx) {
        int nsetup = 0;
        c->ctx = redis_node_connect_nonblock(c->node, &nsetup, err);
        if (!c->ctx) return -1;
        c->established = 0;
        c->setup_left = nsetup;
        for (int i = 0; i < nsetup; i++) push_waiter(c, (waiter){ .deadline = deadline, .setup = 1, .slot = -1 });
        c->unwritten = 1;
    }
    int hold = c->setup_left > 0;
    if (asking) {
        if (!hold && redisAppendFormattedCommand(c->ctx, asking_cmd, sizeof asking_cmd - 1) != REDIS_OK) {
            *err = "redis: out of memory";
            return -1;
        }
        push_waiter(c, (waiter){ .deadline = deadline, .slot = -1, .held = hold, .asking = 1 });
    }
    if (!hold && redisAppendFormattedCommand(c->ctx, w.cmd, w.cmdlen) != REDIS_OK) {
        /* an ASKING without its command is harmless: the next command clears it */
        *err = "redis: out of memory";
        return -1;
    }
    w.deadline = deadline;
    w.held = hold;
    push_waiter(c, w);
    if (!hold) c->unwritten = 1;
    return 0;
}

/* The loop's connection to a cluster node, made on first use; NULL when
 * the loop has as many as it may poll. */
static conn *conn_to(sgw_redis_loop *rl, sgw_redis *node, const char **err) {
    for (int i = 0; i < rl->nconns; i++)
        if (rl->conns[i]->node == node) return rl->conns[i];
    if (rl->nconns == rl->max_conns) {
        *err = "redis cluster: more nodes than a worker's loop may connect to";
        return NULL;
    }
    conn *c = conn_new(node, 0, rl->line_cap);
    if (!c) {
        *err = "redis: out of memory";
        return NULL;
    }
    rl->conns[rl->nconns++] = c;
    return c;
}

/* Asks for the slot map without waiting: the first node in turn that can
 * be reached gets CLUSTER SLOTS in its line, and its reply replaces the map
 * (read_replies). The turn moves on with every ask: a dead master whose
 * back-off ends as the map falls due again would otherwise take every ask
 * and fail it. */
static void ask_map(sgw_redis_loop *rl) {
    static char slots_cmd[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
    sgw_redis *node;
    for (int k = 0; (node = redis_cluster_nth_node(rl->cluster, k)); k++) {
        const char *err;
        conn *c = conn_to(rl, node, &err);
        waiter w = { .slot = -1, .map = 1, .cmd = slots_cmd, .cmdlen = sizeof slots_cmd - 1 };
        if (c && conn_push(c, w, 0, &err) == 0) {
            waiter *asked = &c->line[(c->head + c->len - 1) % c->cap];
            asked->cmd = NULL;     /* static, not owned */
            rl->maps_asked++;
            rl->map_deadline = asked->deadline;
            for (int i = 0; i < rl->nlater; i++)      /* calls parked for an ask that failed */
                if (rl->later[i].map_wait == MAP_AWAITED) rl->later[i].deadline = rl->map_deadline;
            redis_cluster_map_asked(rl->cluster, k);
            return;
        }
    }
}

/* The same when the map is stale, at most every REFRESH_MIN_MS. */
static void read_map(sgw_redis_loop *rl) {
    if (redis_cluster_map_due(rl->cluster)) ask_map(rl);
}

/* Sends a cluster command to `to`, or to the node of its slot when NULL.
 * 0: it waits there; -1 with *err: it is still the caller's. */
static int route(sgw_redis_loop *rl, waiter w, sgw_redis *to, int asking, const char **err) {
    int chosen = to == NULL;
    if (chosen) {
        read_map(rl);
        to = redis_cluster_node_known(rl->cluster, w.slot);
    }
    for (int tries = 0; tries < 2; tries++) {
        if (!to) {
            *err = "redis cluster: no node known";
            return -1;
        }
        conn *c = conn_to(rl, to, err);
        if (!c) return -1;
        if (conn_push(c, w, asking, err) == 0) return 0;
        if (!chosen || c->ctx) return -1;
        /* Not connected (refused, or in its back-off): the node may have
         * failed over. Read the map again and try the slot's node once
         * more (a keyless command: the next node); the same node: down. */
        redis_cluster_lost(rl->cluster);
        read_map(rl);
        sgw_redis *next = redis_cluster_node_known(rl->cluster, w.slot);
        if (w.slot >= 0 && next == to) return await_map(rl, &w) ? 0 : -1;
        to = next;
    }
    return -1;
}

int redis_loop_send(sgw_redis_loop *rl, lua_State *co, int argc, const char **argv, const size_t *lens,
                    const char **err) {
    waiter w = { .co = co, .slot = -1 };
    int len = redisFormatCommandArgv(&w.cmd, argc, argv, lens);
    if (len < 0) {
        *err = "redis: out of memory";
        return -1;
    }
    w.cmdlen = (size_t)len;
    if (!rl->cluster) {
        conn *c = rl->conns[0];
        int rc = conn_push(c, w, 0, err);
        if (rc == 0) {
            waiter *pushed = &c->line[(c->head + c->len - 1) % c->cap];
            if (pushed->held) return 0;     /* the line sends it, then frees it */
            /* One server never redirects: the command need not be kept. */
            pushed->cmd = NULL;
        }
        redisFreeCommand(w.cmd);
        return rc;
    }
    w.slot = redis_command_slot(argc, argv, lens);
    if (route(rl, w, NULL, 0, err) != 0) {
        redisFreeCommand(w.cmd);
        return -1;
    }
    return 0;
}

redisReply *redis_loop_take(sgw_redis_loop *rl, lua_State *co, const char **err) {
    if (rl->given_co != co) {
        *err = "redis: no reply for this coroutine";
        return NULL;
    }
    redisReply *rep = rl->given;
    rl->given = NULL;
    rl->given_co = NULL;
    /* The message stays in rl until the next delivery, after the caller
     * has pushed it. */
    *err = rl->given_err;
    return rep;
}

void redis_loop_forget(sgw_redis_loop *rl, lua_State *co) {
    if (!rl) return;
    for (int k = 0; k < rl->nconns; k++) {
        conn *c = rl->conns[k];
        for (int i = 0; i < c->len; i++) {
            waiter *w = &c->line[(c->head + i) % c->cap];
            if (w->co == co) w->co = NULL;
        }
    }
    for (int i = 0; i < rl->nlater; i++)
        if (rl->later[i].co == co) rl->later[i].co = NULL;
}

/* An idle connection is watched too, so that one the server closed (a
 * restart) is dropped quietly instead of failing the next call. */
int redis_loop_pollfds(sgw_redis_loop *rl, struct pollfd *fds, int cap) {
    int n = 0;
    for (int i = 0; rl && i < rl->nconns && n < cap; i++) {
        conn *c = rl->conns[i];
        if (!c->ctx) continue;
        fds[n++] = (struct pollfd){ .fd = c->ctx->fd, .events = (short)(POLLIN | (c->unwritten ? POLLOUT : 0)) };
    }
    return n;
}

/* What a cluster reply asks of the call it answers; 1 when the call went
 * on waiting (sent elsewhere, or to be sent again), 0 when rep is its
 * answer. */
static int redirected(sgw_redis_loop *rl, waiter *w, redisReply *rep,
                      void (*on_ready)(lua_State *, int, void *), void *ud) {
    redis_cluster_answered(rl->cluster);
    sgw_redis *to = NULL;
    int kind = redis_cluster_redirect(rl->cluster, rep, &to);
    if (kind == CLUSTER_FINAL || !redis_cluster_may_hop(w->hops)) return 0;
    freeReplyObject(rep);
    if (kind == CLUSTER_RETRY) {
        /* Full only while calls of coroutines that went wait there too. */
        if (rl->nlater == rl->max_waiters) {
            give_up(rl, w, "redis: too many calls waiting on this worker's connection", on_ready, ud);
            return 1;
        }
        w->deadline = clock_mono_ms() + (uint64_t)redis_cluster_retry_ms(w->hops);
        w->hops++;
        rl->later[rl->nlater++] = *w;
        return 1;
    }
    w->hops++;
    const char *err;
    if (route(rl, *w, to, kind == CLUSTER_ASK, &err) != 0) give_up(rl, w, err, on_ready, ud);
    return 1;
}

/* Reads every complete reply and resumes its coroutine; 0, or -1 after a
 * failure (the line failed). */
static int read_replies(sgw_redis_loop *rl, conn *c, void (*on_ready)(lua_State *, int, void *), void *ud) {
    if (redisBufferRead(c->ctx) != REDIS_OK) {
        fail_all(rl, c, "io", c->ctx->errstr, on_ready, ud);
        return -1;
    }
    while (c->ctx && c->len > 0) {
        void *rep = NULL;
        if (redisGetReplyFromReader(c->ctx, &rep) != REDIS_OK) {
            fail_all(rl, c, "io", c->ctx->errstr, on_ready, ud);
            return -1;
        }
        if (!rep) break;
        waiter w = c->line[c->head];
        c->head = (c->head + 1) % c->cap;
        c->len--;
        redisReply *r = rep;
        if (w.setup && r->type == REDIS_REPLY_ERROR) {
            /* AUTH or SELECT refused: nothing after it can work. */
            char detail[200];
            snprintf(detail, sizeof detail, "set-up refused: %s", r->str);
            freeReplyObject(r);
            fail_all(rl, c, "connect", detail, on_ready, ud);
            return -1;
        }
        c->established = 1;
        redis_node_ok(c->node);
        if (w.setup && --c->setup_left == 0 && send_held(rl, c) != 0) {
            freeReplyObject(r);
            fail_all(rl, c, "io", "out of memory", on_ready, ud);
            return -1;
        }
        if (w.map) {
            redis_cluster_apply_map(rl->cluster, r, c->node);
            freeReplyObject(r);
            rl->maps_asked--;
            release_parked(rl);
            continue;
        }
        if (w.cmd && w.co && redirected(rl, &w, r, on_ready, ud)) continue;
        redisFreeCommand(w.cmd);
        deliver(rl, w.co, r, NULL, on_ready, ud);
    }
    return 0;
}

static void drive_conn(sgw_redis_loop *rl, conn *c, const struct pollfd *fds, int nfds,
                       void (*on_ready)(lua_State *, int, void *), void *ud) {
    if (!c->ctx) return;
    short revents = 0;
    for (int i = 0; i < nfds; i++)
        if (fds[i].fd == c->ctx->fd) revents |= fds[i].revents;
    if (c->unwritten && (revents & (POLLOUT | POLLERR | POLLHUP))) {
        int done = 0;
        if (redisBufferWrite(c->ctx, &done) != REDIS_OK) {
            fail_all(rl, c, "io", c->ctx->errstr, on_ready, ud);
            return;
        }
        c->established = 1;      /* writable: the connect went through */
        if (done) c->unwritten = 0;
    }
    if ((revents & (POLLIN | POLLERR | POLLHUP)) && c->len == 0) {
        read_while_idle(c);
        return;
    }
    if ((revents & (POLLIN | POLLERR | POLLHUP)) && read_replies(rl, c, on_ready, ud) != 0) return;
    if (c->ctx && c->len > 0 && clock_mono_ms() >= c->line[c->head].deadline)
        fail_all(rl, c, "io", "timeout", on_ready, ud);
}

/* Sends again the calls whose pause after TRYAGAIN or CLUSTERDOWN is over. */
static void retry_due(sgw_redis_loop *rl, void (*on_ready)(lua_State *, int, void *), void *ud) {
    uint64_t now = clock_mono_ms();
    for (int i = 0; i < rl->nlater;) {
        if (rl->later[i].deadline > now) {
            i++;
            continue;
        }
        /* Out of the list before anything resumes a coroutine. */
        waiter w = rl->later[i];
        rl->later[i] = rl->later[--rl->nlater];
        if (w.map_wait) w.map_wait = MAP_WAITED;
        const char *err;
        if (!w.co) redisFreeCommand(w.cmd);
        else if (route(rl, w, NULL, 0, &err) != 0) give_up(rl, &w, err, on_ready, ud);
    }
}

void redis_loop_drive(sgw_redis_loop *rl, const struct pollfd *fds, int nfds,
                      void (*on_ready)(lua_State *co, int nres, void *ud), void *ud) {
    if (!rl) return;
    /* A resumed coroutine may add a connection: nconns is read each time. */
    for (int i = 0; i < rl->nconns; i++) drive_conn(rl, rl->conns[i], fds, nfds, on_ready, ud);
    if (rl->nlater) retry_due(rl, on_ready, ud);
}

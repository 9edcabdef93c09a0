/*
 * redis_loop.c — a worker loop's own Redis connection, on which the
 * coroutines it runs wait for their replies without holding the thread.
 *
 * A redis.* call of the coroutine being resumed (redis_loop_set_current)
 * appends its command to the connection's output and yields; the loop
 * writes whatever its coroutines appended in one go the next time it polls
 * (so calls made in one turn of the loop travel as one pipelined batch),
 * reads the replies as they come and resumes their coroutines in order:
 * Redis answers in the order it was asked, so the waiting line is a FIFO.
 *
 * Nothing here blocks, the connection included (a non-blocking connect
 * whose AUTH and SELECT are queued ahead of the first command). A reply that
 * does not come within redis.timeout_ms, or a lost connection, fails every
 * call on the connection ("timeout", "unavailable"), and redis.c's back-off
 * then fails calls at once until redis.retry_interval_ms has passed.
 *
 * Single servers only: on a Redis Cluster the bindings block on redis.c's
 * connections (slot routing and redirections are there).
 */
#include "sgw.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

typedef struct waiter {
    lua_State *co;                  /* NULL: a set-up command, or one whose coroutine went */
    uint64_t   deadline;            /* monotonic ms */
    int        setup;               /* AUTH or SELECT */
} waiter;

struct sgw_redis_loop {
    sgw_redis   *node;              /* the server's settings and back-off (redis.c) */
    redisContext *ctx;              /* NULL: not connected */
    int          unwritten;         /* commands appended since the last complete write */
    waiter      *line, *spare;      /* ring of cap; spare: failing detaches the line into it */
    int          cap, head, len;
    lua_State   *current;           /* the coroutine being resumed */
    /* What the coroutine being resumed by deliver() gets. */
    lua_State   *given_co;
    redisReply  *given;             /* NULL: failed, see given_err */
    char         given_err[256];
};

sgw_redis_loop *redis_loop_new(const char *url, int max_waiters) {
    sgw_redis_loop *rl = calloc(1, sizeof *rl);
    if (!rl) return NULL;
    rl->cap = max_waiters + 4;      /* each coroutine waits on one call, plus AUTH and SELECT */
    rl->line = calloc((size_t)rl->cap, sizeof *rl->line);
    rl->spare = calloc((size_t)rl->cap, sizeof *rl->spare);
    rl->node = redis_open_node(url);
    if (!rl->line || !rl->spare) {
        redis_loop_free(rl);
        return NULL;
    }
    return rl;
}

void redis_loop_free(sgw_redis_loop *rl) {
    if (!rl) return;
    if (rl->ctx) redisFree(rl->ctx);
    if (rl->given) freeReplyObject(rl->given);
    redis_close(rl->node);
    free(rl->line);
    free(rl->spare);
    free(rl);
}

void redis_loop_set_current(sgw_redis_loop *rl, lua_State *co) {
    if (rl) rl->current = co;
}

int redis_loop_usable(sgw_redis_loop *rl, lua_State *L) {
    return rl && rl->current == L && lua_isyieldable(L);
}

int redis_loop_in_flight(sgw_redis_loop *rl) {
    return rl && rl->len > 0;
}

static int push_waiter(sgw_redis_loop *rl, lua_State *co, uint64_t deadline, int setup) {
    if (rl->len == rl->cap) return -1;
    rl->line[(rl->head + rl->len) % rl->cap] = (waiter){ co, deadline, setup };
    rl->len++;
    return 0;
}

/* Hands the coroutine at the head of the line what it waited for. */
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

/* Drops the connection and fails every call waiting on it with err. */
static void fail_all(sgw_redis_loop *rl, const char *kind, const char *detail,
                     void (*on_ready)(lua_State *, int, void *), void *ud) {
    const char *err;
    redis_node_fail(rl->node, kind, detail, &err);
    char msg[256];
    snprintf(msg, sizeof msg, "%s", err);
    if (rl->ctx) redisFree(rl->ctx);
    rl->ctx = NULL;
    rl->unwritten = 0;
    /* Resumed coroutines may send again (and fail at once in the back-off):
     * the line they find is a new, empty one. */
    int n = rl->len;
    for (int i = 0; i < n; i++) rl->spare[i] = rl->line[(rl->head + i) % rl->cap];
    waiter *failed = rl->spare;
    rl->spare = rl->line;
    rl->line = failed;
    rl->head = 0;
    rl->len = 0;
    for (int i = 0; i < n; i++) deliver(rl, failed[i].co, NULL, msg, on_ready, ud);
}

int redis_loop_send(sgw_redis_loop *rl, lua_State *co, int argc, const char **argv, const size_t *lens,
                    const char **err) {
    if (rl->len + 3 > rl->cap) {
        *err = "redis: too many calls waiting on this worker's connection";
        return -1;
    }
    if (!rl->ctx) {
        int nsetup = 0;
        rl->ctx = redis_node_connect_nonblock(rl->node, &nsetup, err);
        if (!rl->ctx) return -1;
        uint64_t deadline = clock_mono_ms() + (uint64_t)redis_node_timeout_ms(rl->node);
        for (int i = 0; i < nsetup; i++) push_waiter(rl, NULL, deadline, 1);
        rl->unwritten = 1;
    }
    if (redisAppendCommandArgv(rl->ctx, argc, argv, lens) != REDIS_OK) {
        *err = "redis: out of memory";
        return -1;
    }
    push_waiter(rl, co, clock_mono_ms() + (uint64_t)redis_node_timeout_ms(rl->node), 0);
    rl->unwritten = 1;
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
    for (int i = 0; i < rl->len; i++) {
        waiter *w = &rl->line[(rl->head + i) % rl->cap];
        if (w->co == co) w->co = NULL;
    }
}

/* An idle connection is watched too, so that one the server closed (a
 * restart) is dropped quietly instead of failing the next call. */
int redis_loop_pollfd(sgw_redis_loop *rl, struct pollfd *pfd) {
    if (!rl || !rl->ctx) return 0;
    pfd->fd = rl->ctx->fd;
    pfd->events = (short)(POLLIN | (rl->unwritten ? POLLOUT : 0));
    pfd->revents = 0;
    return 1;
}

/* Reads every complete reply and resumes its coroutine; 0, or -1 after a
 * failure (the line failed). */
static int read_replies(sgw_redis_loop *rl, void (*on_ready)(lua_State *, int, void *), void *ud) {
    if (redisBufferRead(rl->ctx) != REDIS_OK) {
        fail_all(rl, "io", rl->ctx->errstr, on_ready, ud);
        return -1;
    }
    while (rl->ctx && rl->len > 0) {
        void *rep = NULL;
        if (redisGetReplyFromReader(rl->ctx, &rep) != REDIS_OK) {
            fail_all(rl, "io", rl->ctx->errstr, on_ready, ud);
            return -1;
        }
        if (!rep) break;
        waiter w = rl->line[rl->head];
        rl->head = (rl->head + 1) % rl->cap;
        rl->len--;
        redisReply *r = rep;
        if (w.setup && r->type == REDIS_REPLY_ERROR) {
            /* AUTH or SELECT refused: nothing after it can work. */
            char detail[200];
            snprintf(detail, sizeof detail, "set-up refused: %s", r->str);
            freeReplyObject(r);
            fail_all(rl, "connect", detail, on_ready, ud);
            return -1;
        }
        redis_node_ok(rl->node);
        deliver(rl, w.co, r, NULL, on_ready, ud);
    }
    return 0;
}

void redis_loop_drive(sgw_redis_loop *rl, const struct pollfd *fds, int nfds,
                      void (*on_ready)(lua_State *co, int nres, void *ud), void *ud) {
    if (!rl || !rl->ctx) return;
    short revents = 0;
    for (int i = 0; i < nfds; i++)
        if (fds[i].fd == rl->ctx->fd) revents |= fds[i].revents;
    if (rl->unwritten && (revents & (POLLOUT | POLLERR | POLLHUP))) {
        int done = 0;
        if (redisBufferWrite(rl->ctx, &done) != REDIS_OK) {
            fail_all(rl, "io", rl->ctx->errstr, on_ready, ud);
            return;
        }
        if (done) rl->unwritten = 0;
    }
    if ((revents & (POLLIN | POLLERR | POLLHUP)) && rl->len == 0) {
        if (redisBufferRead(rl->ctx) != REDIS_OK) {
            redisFree(rl->ctx);
            rl->ctx = NULL;
        }
        return;
    }
    if ((revents & (POLLIN | POLLERR | POLLHUP)) && read_replies(rl, on_ready, ud) != 0) return;
    if (rl->ctx && rl->len > 0 && clock_mono_ms() >= rl->line[rl->head].deadline)
        fail_all(rl, "io", "timeout", on_ready, ud);
}

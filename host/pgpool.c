/*
 * pgpool.c — a job worker's pool of PostgreSQL connections, shared by its
 * coroutines without blocking the thread.
 *
 * A coroutine's db.* call takes a free connection (connecting it without
 * waiting when it has none yet), sends its statement
 * (pg.c, send_async) and yields; the runner's loop polls the connections'
 * sockets beside its HTTP transfers and calls pgpool_drive, which reads the
 * answers and resumes each coroutine whose answer is complete. A coroutine
 * keeps its connection only for one statement, or from BEGIN to COMMIT of a
 * db.transaction (it "holds" it). When every connection is taken, the
 * coroutine waits in line (first come, first served) and is resumed with a
 * connection given to it, or with a failure once database.pool_wait_ms
 * has passed, so a pool too small for the load slows jobs down but never
 * stalls them.
 *
 * Only the runner's thread touches a pool. Coroutines are referred to by
 * their lua_State; the runner keeps them alive while they wait and calls
 * pgpool_forget when one ends.
 */
#include "sgw.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    sgw_pg    *pg;
    lua_State *user;      /* the coroutine using it now; NULL: free */
    int        held;      /* user keeps it across statements (a transaction) */
    int        sent;      /* a statement of user's is in flight */
} slot;

typedef struct waiter {
    lua_State *co;
    uint64_t   deadline;  /* monotonic ms */
    int        state;     /* PGPOOL_WAITING or PGPOOL_EXPIRED */
} waiter;

struct sgw_pgpool {
    slot      *slots;
    int        nslots;
    waiter    *waiters;   /* in order of arrival (so of deadline too) */
    int        nwaiters, cap_waiters;
    int        nexpired;  /* waiters told their wait ran out, not yet asking again */
    lua_State *current;
    uint64_t   wait_ms;
    lua_State **ready;    /* pgpool_drive's list: nslots + cap_waiters */
};

sgw_pgpool *pgpool_new(const char *conninfo, int size, int max_waiters, uint64_t wait_ms) {
    if (size < 1) size = 1;
    if (max_waiters < 1) max_waiters = 1;
    sgw_pgpool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->slots = calloc((size_t)size, sizeof *p->slots);
    p->waiters = calloc((size_t)max_waiters, sizeof *p->waiters);
    p->ready = calloc((size_t)(size + max_waiters), sizeof *p->ready);
    if (!p->slots || !p->waiters || !p->ready) {
        pgpool_free(p);
        return NULL;
    }
    p->cap_waiters = max_waiters;
    p->wait_ms = wait_ms;
    for (int i = 0; i < size; i++) {
        p->slots[i].pg = pg_open(conninfo);
        if (!p->slots[i].pg) {
            pgpool_free(p);
            return NULL;
        }
        p->nslots = i + 1;
    }
    return p;
}

void pgpool_free(sgw_pgpool *p) {
    if (!p) return;
    for (int i = 0; i < p->nslots; i++) pg_close(p->slots[i].pg);
    free(p->slots);
    free(p->waiters);
    free(p->ready);
    free(p);
}

void pgpool_set_current(sgw_pgpool *p, lua_State *co) {
    if (p) p->current = co;
}

lua_State *pgpool_current(sgw_pgpool *p) { return p ? p->current : NULL; }

static slot *slot_of(sgw_pgpool *p, sgw_pg *pg) {
    for (int i = 0; i < p->nslots; i++)
        if (p->slots[i].pg == pg) return &p->slots[i];
    return NULL;
}

sgw_pg *pgpool_using(sgw_pgpool *p, lua_State *co) {
    for (int i = 0; p && i < p->nslots; i++)
        if (p->slots[i].user == co) return p->slots[i].pg;
    return NULL;
}

sgw_pg *pgpool_held(sgw_pgpool *p, lua_State *co) {
    for (int i = 0; p && i < p->nslots; i++)
        if (p->slots[i].user == co && p->slots[i].held) return p->slots[i].pg;
    return NULL;
}

static int find_waiter(sgw_pgpool *p, lua_State *co) {
    for (int i = 0; i < p->nwaiters; i++)
        if (p->waiters[i].co == co) return i;
    return -1;
}

static void remove_waiter(sgw_pgpool *p, int i) {
    memmove(&p->waiters[i], &p->waiters[i + 1], (size_t)(p->nwaiters - i - 1) * sizeof *p->waiters);
    p->nwaiters--;
}

sgw_pg *pgpool_acquire(sgw_pgpool *p, lua_State *co, int *state) {
    sgw_pg *mine = pgpool_using(p, co);          /* its own, or granted while it waited */
    if (mine) {
        *state = PGPOOL_GRANTED;
        return mine;
    }
    /* Only the pool resumes a waiting coroutine, and one it gave a
     * connection finds it above: a coroutine asking here is new, or its
     * wait ran out (looked up only while some did). */
    if (p->nexpired > 0) {
        int w = find_waiter(p, co);
        if (w >= 0 && p->waiters[w].state == PGPOOL_EXPIRED) {
            remove_waiter(p, w);
            p->nexpired--;
            *state = PGPOOL_EXPIRED;
            return NULL;
        }
    }
    /* Those already waiting go first. */
    for (int i = 0; p->nwaiters == p->nexpired && i < p->nslots; i++) {
        if (!p->slots[i].user) {
            p->slots[i].user = co;
            *state = PGPOOL_GRANTED;
            return p->slots[i].pg;
        }
    }
    if (p->nwaiters == p->cap_waiters) {
        *state = PGPOOL_EXPIRED;           /* cannot happen: one waiter per job slot */
        return NULL;
    }
    p->waiters[p->nwaiters++] = (waiter){ .co = co, .deadline = clock_mono_ms() + p->wait_ms,
                                          .state = PGPOOL_WAITING };
    metrics_count("sgw_db_pool_waits_total", NULL, 1);
    *state = PGPOOL_WAITING;
    return NULL;
}

void pgpool_hold(sgw_pgpool *p, sgw_pg *pg, int held) {
    slot *s = slot_of(p, pg);
    if (s) s->held = held;
}

void pgpool_release(sgw_pgpool *p, sgw_pg *pg) {
    slot *s = slot_of(p, pg);
    if (!s) return;
    s->user = NULL;
    s->held = 0;
    s->sent = 0;
}

void pgpool_sent(sgw_pgpool *p, sgw_pg *pg) {
    slot *s = slot_of(p, pg);
    if (s) s->sent = 1;
}

int pgpool_pollfds(sgw_pgpool *p, struct pollfd *fds, int cap) {
    int n = 0;
    for (int i = 0; p && i < p->nslots && n < cap; i++) {
        if (!p->slots[i].sent) continue;
        short events = 0;
        int fd = pg_async_fd(p->slots[i].pg, &events);
        if (fd < 0) continue;
        fds[n++] = (struct pollfd){ .fd = fd, .events = events, .revents = 0 };
    }
    return n;
}

int pgpool_in_flight(sgw_pgpool *p) {
    for (int i = 0; p && i < p->nslots; i++)
        if (p->slots[i].sent) return 1;
    return 0;
}

int pgpool_ready(sgw_pgpool *p) {
    if (!p || p->nwaiters == p->nexpired) return 0;
    for (int i = 0; i < p->nslots; i++)
        if (!p->slots[i].user) return 1;
    return 0;
}

/* What poll said of fd (0 when it was not polled). */
static short revents_of(const struct pollfd *fds, int nfds, int fd) {
    for (int i = 0; i < nfds; i++)
        if (fds[i].fd == fd) return fds[i].revents;
    return 0;
}

void pgpool_drive(sgw_pgpool *p, const struct pollfd *fds, int nfds,
                  void (*on_ready)(lua_State *co, int nres, void *ud), void *ud) {
    if (!p) return;
    /* Gather first, resume after: a resumed coroutine changes the slots. */
    lua_State **ready = p->ready;
    int n = 0;
    for (int i = 0; i < p->nslots; i++) {
        slot *s = &p->slots[i];
        short events;
        int fd = s->sent ? pg_async_fd(s->pg, &events) : -1;
        if (s->sent && pg_async_step(s->pg, fd >= 0 ? revents_of(fds, nfds, fd) : 0)) {
            s->sent = 0;
            ready[n++] = s->user;
        }
    }
    /* The line: a free connection goes to the first waiter (who finds it
     * as its own when resumed); a wait past its deadline ends as EXPIRED,
     * which the coroutine reads when it asks again. */
    uint64_t now = clock_mono_ms();
    int next_free = 0;
    for (int w = 0; w < p->nwaiters;) {
        waiter *wt = &p->waiters[w];
        if (wt->state != PGPOOL_WAITING) {
            w++;
            continue;
        }
        while (next_free < p->nslots && p->slots[next_free].user) next_free++;
        if (next_free < p->nslots) {
            p->slots[next_free].user = wt->co;
            ready[n++] = wt->co;
            remove_waiter(p, w);
            continue;
        }
        /* No connection free: only expiries are left, and deadlines
         * follow the order of arrival. */
        if (now < wt->deadline) break;
        wt->state = PGPOOL_EXPIRED;
        p->nexpired++;
        metrics_count("sgw_db_pool_wait_timeouts_total", NULL, 1);
        ready[n++] = wt->co;
        w++;
    }
    for (int i = 0; i < n; i++) on_ready(ready[i], 0, ud);
}

void pgpool_forget(sgw_pgpool *p, lua_State *co) {
    if (!p) return;
    for (int i = 0; i < p->nslots; i++) {
        slot *s = &p->slots[i];
        if (s->user != co) continue;
        /* A statement still in flight or a transaction left open: the
         * connection's state is not known to be clean. Dropping it makes the
         * server roll back an open transaction (a statement already running
         * outside one may still complete there: jobs are at least once); the
         * next user reconnects. */
        if (s->sent || s->held || pg_in_transaction(s->pg)) pg_abandon(s->pg);
        s->user = NULL;
        s->held = 0;
        s->sent = 0;
    }
    int w = find_waiter(p, co);
    if (w >= 0) {
        if (p->waiters[w].state == PGPOOL_EXPIRED) p->nexpired--;
        remove_waiter(p, w);
    }
}

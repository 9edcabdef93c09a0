/*
 * loop.c — what a loop thread (a request worker's or a job worker's) waits
 * on: its outbound transfers (httpc.c), its PostgreSQL connections
 * (pgpool.c: the primary's, and the read replica's when there is one), its Redis connections (redis_loop.c), the jobs it handed
 * to the thread pool (offload.c) and its coroutines' waits on each other
 * (waits.c).
 *
 * A binding of the coroutine being resumed sends its work, yields a
 * lightuserdata naming what it waits on, and the loop resumes it through
 * on_ready once the answer is in. worker.c and jobs.c decide what runs;
 * this file is the one place that knows the kinds of wait.
 */
#include "sgw.h"

#include <poll.h>

int loop_open(sgw_worker *w, int max_coroutines) {
    w->httpc = httpc_new(max_coroutines);
    if (!w->httpc) return -1;
    const char *db = config_str("database.url");
    if (*db) {
        long long wait_ms = config_int("database.pool_wait_ms");
        w->pgpool = pgpool_new(db, (int)config_int("database.pool_size"), max_coroutines,
                               (uint64_t)(wait_ms > 0 ? wait_ms : 0));
        if (!w->pgpool) return -1;
        const char *replica = config_str("database.read_url");
        if (*replica) {
            w->replica_pool = pgpool_new(replica, (int)config_int("database.pool_size"), max_coroutines,
                                         (uint64_t)(wait_ms > 0 ? wait_ms : 0));
            if (!w->replica_pool) return -1;
        }
    }
    /* On a cluster, the loop routes over the worker's own slot map. */
    const char *url = config_str("redis.url");
    sgw_cluster *cluster = redis_cluster_of(w->redis);
    if (cluster || *url) {
        w->redis_loop = cluster ? redis_loop_new_cluster(cluster, max_coroutines) : redis_loop_new(url, max_coroutines);
        if (!w->redis_loop) return -1;
    }
    w->inbox = offload_inbox_new();
    w->waits = waits_new();
    return w->inbox && w->waits ? 0 : -1;
}

/* Every socket a loop waits on reaches poll through httpc_wait: a loop's
 * sockets (and the two of a job runner's own) must all fit there, or the
 * last ones (Redis, the inbox) would go unwatched while transfers run. */
_Static_assert(2 + LOOP_FDS_MAX <= HTTPC_EXTRA_FDS_MAX, "httpc_wait must take every socket of a loop");

void loop_set_current(sgw_worker *w, lua_State *co) {
    httpc_set_current(w->httpc, co);
    pgpool_set_current(w->pgpool, co);
    pgpool_set_current(w->replica_pool, co);
    redis_loop_set_current(w->redis_loop, co);
    offload_set_current(w->inbox, co);
    waits_set_current(w->waits, co);
}

int loop_owns(const sgw_worker *w, lua_State *co, int nres) {
    void *marker = nres == 1 && lua_islightuserdata(co, -1) ? lua_touserdata(co, -1) : NULL;
    return marker && (marker == (void *)w->httpc || marker == (void *)w->pgpool || marker == (void *)w->redis_loop ||
                      marker == (void *)w->inbox || marker == (void *)w->waits ||
                      (w->replica_pool && marker == (void *)w->replica_pool));
}

void loop_forget(sgw_worker *w, lua_State *co) {
    pgpool_forget(w->pgpool, co);
    pgpool_forget(w->replica_pool, co);
    redis_loop_forget(w->redis_loop, co);
    offload_forget(w->inbox, co);
    waits_forget(w->waits, co);
}

int loop_pollfds(sgw_worker *w, struct pollfd *fds, int cap) {
    /* Each pool gets half of what Redis and the inbox leave (of a caller's
     * array smaller than LOOP_FDS_MAX, half of it). */
    int rest = cap - 1 - REDIS_LOOP_NODES_MAX;
    int pools = (rest > 0 ? rest : cap - 1) / 2;
    int n = pgpool_pollfds(w->pgpool, fds, pools);
    n += pgpool_pollfds(w->replica_pool, fds + n, pools);
    n += redis_loop_pollfds(w->redis_loop, fds + n, cap - 1 - n);
    return n + offload_pollfd(w->inbox, fds + n);
}

int loop_ready(sgw_worker *w) {
    return pgpool_ready(w->pgpool) || pgpool_ready(w->replica_pool) || waits_ready(w->waits);
}

void loop_wait(sgw_worker *w, struct pollfd *fds, int n, int timeout_ms,
               void (*on_ready)(lua_State *co, int nres, void *ud), void *ud) {
    httpc_wait(w->httpc, redis_loop_timeout(w->redis_loop, timeout_ms), fds, n);
    /* Statements' answers first: their coroutines hold a connection (and a
     * transaction's locks) that others wait for, while finished transfers
     * (hundreds at once in a wave of publications) hold nothing. */
    pgpool_drive(w->pgpool, fds, n, on_ready, ud);
    pgpool_drive(w->replica_pool, fds, n, on_ready, ud);
    redis_loop_drive(w->redis_loop, fds, n, on_ready, ud);
    offload_drive(w->inbox, on_ready, ud);
    httpc_deliver(w->httpc, on_ready, ud);
    waits_drive(w->waits, on_ready, ud);
}

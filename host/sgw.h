/*
 * sgw.h — the shared declarations of the sgw host.
 *
 * Each concern lives in its own file (config.c, http.c, router.c, worker.c,
 * luart.c, budget.c, pg.c, pgpool.c, redis.c, httpc.c, crypto.c, json.c, jobs.c, log.c, metrics.c,
 * shared.c, admin.c, main.c); this header is the one place where they meet. The host
 * knows nothing of posts or comments: that is Lua's business.
 */
#ifndef SGW_H
#define SGW_H

#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

/* lua-cjson, linked in (CMakeLists.txt): opened by the host, never searched for. */
int luaopen_cjson(lua_State *L);
int luaopen_cjson_safe(lua_State *L);

#define SGW_VERSION "0.1.0"

/* ------------------------------------------------------------------ config.c
 * Flat "key = value" settings. config/sgw.conf declares every key with its
 * default; the type of the default (integer, number, boolean, string) is the
 * key's type. Unknown keys and values of the wrong type are refused with a
 * message that names the key. */
int         config_load_file(const char *path, int defaults, char *err, size_t errlen);
int         config_set(const char *key, const char *value, char *err, size_t errlen);
int         config_has(const char *key);
const char *config_str(const char *key);       /* "" when unset */
long long   config_int(const char *key);
double      config_num(const char *key);
int         config_bool(const char *key);
void        config_free(void);
/* Global `config`: config.get(key) -> typed value or nil. */
void        lapi_config_open(lua_State *L);

/* --------------------------------------------------------------------- log.c
 * One JSON object per line on stderr. Field values are escaped; callers
 * never pass secrets. */
typedef enum { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR } sgw_log_level;
void log_msg(sgw_log_level level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Writes one already-built JSON line (without newline) atomically. */
void log_line(const char *json, size_t len);
/* Request lines: gathered and written every few milliseconds while the
 * writer runs (sgw serve); otherwise like log_line. */
void log_line_batched(const char *json, size_t len);
int log_start_writer(void);
void log_stop_writer(void);
/* Starts a line: writes {"time":"..." into buf; returns its length. */
size_t log_begin(char *buf, size_t cap);
void log_set_level(sgw_log_level level);
/* Appends s as a JSON string literal (with quotes) to buf; returns new length
 * or cap when truncated. */
size_t json_escape(char *buf, size_t len, size_t cap, const char *s, size_t slen);
/* Global `log`: log.info(event, fields), log.warn, log.error, log.debug. */
void lapi_log_open(lua_State *L);

/* ----------------------------------------------------------------- clock.c
 * Wall clock in seconds (with a fraction) plus an offset that tests may move
 * when `clock.allow_control` is true. Monotonic milliseconds for durations. */
double   clock_now(void);
void     clock_advance(double seconds);
double   clock_offset(void);
uint64_t clock_mono_ms(void);
/* Global `clock`: clock.now() (unix seconds, float), clock.iso(t?)
 * (RFC 3339 UTC with milliseconds), clock.mono_ms(). */
void     lapi_clock_open(lua_State *L);

/* -------------------------------------------------------------- crypto.c */
int  crypto_random(void *buf, size_t n);                  /* 0 ok */
void crypto_random_base62(char *out, size_t n);          /* n chars + NUL */
/* The same for identifiers that must be unique and unguessable but are not
 * keys (request ids): cheaper, from a per-thread buffer of CSPRNG output. */
void crypto_random_id(char *out, size_t n);
/* Global `crypto`: sha256, sha256_hex, hmac_sha256, random_bytes,
 * random_token, constant_eq, base64_encode/decode, base64url_encode/decode,
 * hex, aes_gcm_encrypt/decrypt, argon2id_hash/verify (see docs/host-api.md). */
void lapi_crypto_open(lua_State *L);

/* ---------------------------------------------------------------- json.c
 * Global `jsonc`: encode(value, shape, empty), lib/json.lua's ordered
 * encoder in C (see docs/host-api.md). luaopen_jsonc returns the table. */
int  luaopen_jsonc(lua_State *L);
void lapi_json_open(lua_State *L);
/* Rows of a result as one JSON array (db results' :json, see
 * docs/host-api.md): how a value of each column is spelled, and the source. */
typedef enum { JSON_CELL_STRING, JSON_CELL_INTEGER, JSON_CELL_FLOAT, JSON_CELL_BOOLEAN } json_cell_kind;
typedef struct json_rows {
    void *ctx;
    /* The index of the column named name and its kind; -1 when there is
     * none. May raise (a column whose values cannot be spelled). */
    int (*column)(void *ctx, const char *name, json_cell_kind *kind);
    /* A value's text (a boolean's starts with 't' when true), NULL for NULL. */
    const char *(*cell)(void *ctx, int row, int column, size_t *len);
} json_rows;
/* Pushes rows first..last (0-based) written with the row view at index
 * view, as JSON that jsonc.encode writes as it is. Raises on misuse. */
void json_push_rows(lua_State *L, int view, const json_rows *rows, int first, int last);

/* ---------------------------------------------------------------- shared.c
 * One bounded key/value store for every Lua state of the process (global
 * `shared`, see docs/host-api.md): sharded by key hash, a lock per shard,
 * least recently used entries evicted when full, a time to live per entry
 * on the monotonic clock. Keys are binary-safe strings of 1 to
 * SHARED_MAX_KEY bytes; values are copied in and out. */
typedef struct sgw_shared sgw_shared;
enum { SHARED_STRING = 1, SHARED_INTEGER, SHARED_NUMBER, SHARED_BOOLEAN };
enum { SHARED_SET, SHARED_ADD, SHARED_REPLACE };
enum { SHARED_OK, SHARED_EXISTS, SHARED_NOT_FOUND, SHARED_NOT_NUMBER, SHARED_TOO_BIG, SHARED_NO_MEMORY };
#define SHARED_MAX_KEY 250
typedef struct shared_value {
    int         type;          /* SHARED_STRING ... */
    long long   i;             /* SHARED_INTEGER; SHARED_BOOLEAN: 0 or 1 */
    double      n;             /* SHARED_NUMBER */
    const char *s;             /* SHARED_STRING: len bytes */
    size_t      len;
} shared_value;
/* max_entries and max_bytes (keys, values and bookkeeping) bound the whole
 * store; now_ms (NULL: clock_mono_ms) is the clock of the times to live.
 * NULL when out of memory or max_entries is 0. */
sgw_shared *shared_new(size_t max_entries, size_t max_bytes, size_t max_value_bytes, uint64_t (*now_ms)(void));
void        shared_free(sgw_shared *s);
size_t      shared_max_value_bytes(const sgw_shared *s);
/* 1 with the value in *out, 0 when absent or expired. A string is copied
 * into buf when it fits in cap bytes (out->s = buf); otherwise out->s is
 * NULL and out->len says how much room it needs. *ttl_left (may be NULL):
 * milliseconds left, 0 when it never expires. */
int         shared_get(sgw_shared *s, const char *key, size_t klen, shared_value *out, char *buf, size_t cap,
                       uint64_t *ttl_left);
/* mode SHARED_SET, SHARED_ADD (SHARED_EXISTS when live) or SHARED_REPLACE
 * (SHARED_NOT_FOUND when not); ttl_ms 0: no expiry. SHARED_TOO_BIG: a
 * string over max_value_bytes. */
int         shared_put(sgw_shared *s, const char *key, size_t klen, const shared_value *v, uint64_t ttl_ms, int mode);
/* Adds delta to a number atomically (integers stay integers, wrapping; a
 * float on either side gives a float) into *out. A missing key starts at
 * init with init_ttl_ms, or is SHARED_NOT_FOUND when init is NULL;
 * SHARED_NOT_NUMBER when the value is not a number. */
int         shared_incr(sgw_shared *s, const char *key, size_t klen, const shared_value *delta,
                        const shared_value *init, uint64_t init_ttl_ms, shared_value *out);
int         shared_delete(sgw_shared *s, const char *key, size_t klen);   /* 1 when it was there */
size_t      shared_flush_expired(sgw_shared *s, size_t max);              /* max 0: all */
size_t      shared_count(sgw_shared *s);
/* The process's store, from shared.max_entries, shared.max_bytes and
 * shared.max_value_bytes: made once before any Lua state, freed at exit. */
int         shared_start(char *err, size_t errlen);
void        shared_stop(void);
/* Global `shared`: get, set, add, replace, incr, delete, ttl, flush_expired. */
void        lapi_shared_open(lua_State *L);

/* ----------------------------------------------------------------- worker
 * A worker is one thread with its own Lua state and its own connections. */
typedef struct sgw_pg    sgw_pg;
typedef struct sgw_redis sgw_redis;
typedef struct sgw_httpc sgw_httpc;
typedef struct sgw_gen   sgw_gen;
typedef struct sgw_pgpool sgw_pgpool;
typedef struct sgw_redis_loop sgw_redis_loop;

typedef struct sgw_worker {
    int         id;
    const char *role;        /* "http", "job", "cli", "check" */
    lua_State  *L;           /* owned: replaced at generation switches */
    sgw_gen    *gen;         /* the generation L was built from (a reference) */
    sgw_pg     *pg;          /* owned; NULL when database.url is empty */
    sgw_redis  *redis;       /* owned; NULL when redis.url is empty */
    sgw_httpc  *httpc;       /* owned by job workers; NULL: outbound calls block */
    sgw_pgpool *pgpool;      /* owned by job workers; NULL: db.* block on pg */
    sgw_pgpool *replica_pool; /* owned by loops when database.read_url is set */
    sgw_redis_loop *redis_loop; /* owned by loops; NULL: redis.* block on redis */
    struct sgw_inbox *inbox;  /* owned by loops: offloaded jobs come back here */
    struct sgw_waits *waits;  /* owned by loops: coroutines waiting on each other */
} sgw_worker;

/* ------------------------------------------------------------------- pg.c
 * One connection per worker (the per-process pool is the set of workers),
 * reconnecting on use after a failure. */
sgw_pg *pg_open(const char *conninfo);             /* never NULL; connects lazily */
void    pg_close(sgw_pg *pg);
/* database.read_url: the replica db.read_query may use (0 ok). */
int     pg_set_replica(sgw_pg *pg, const char *conninfo);
/* database.listen_url, or database.url when that is empty: the direct
 * connection for what needs a session (LISTEN, migrate's lock). */
const char *pg_direct_url(void);
int     pg_ping(sgw_pg *pg);                       /* 0 when the server answers */
int     pg_in_transaction(sgw_pg *pg);        /* 1 inside BEGIN..COMMIT */
/* After every request or job: roll back a transaction left open. */
void    pg_reset_session(sgw_pg *pg);
/* `sgw migrate`: apply migrations/NNNN_*.sql in order, each once, each in a
 * transaction, under an advisory lock. Prints progress; 0 ok. */
int     pg_migrate(const char *conninfo, const char *dir);
int     pg_pending_migrations(const char *conninfo, const char *dir, char *first, size_t cap);
/* Global `db` (see docs/host-api.md): db.query, db.read_query, db.exec, db.transaction,
 * db.in_transaction, db.null. */
void    lapi_db_open(lua_State *L, sgw_worker *w);
/* For the admin listener and the job runner, which run SQL of their own. */
struct pg_conn;
struct pg_conn *pg_raw(sgw_pg *pg);                /* PGconn*, connected or NULL */
/* PQexecParams on pg's connection (connected first) with the transaction
 * settings db.* statements get: a PGresult* to inspect and clear, NULL when
 * there is no connection. */
struct pg_result;
struct pg_result *pg_exec(sgw_pg *pg, const char *sql, int n, const char *const *vals);
/* 1 when L's db.* calls are inside a transaction (http.request refuses). */
int     pg_worker_in_transaction(sgw_worker *w, lua_State *L);
/* A statement sent (or a connection started) without waiting (pgpool.c):
 * its socket and the poll events it waits for (-1: nothing in flight);
 * pg_async_step, given what poll said of that socket, reads what arrived
 * without blocking and is 1 once the answer (or the connection) is there. */
int     pg_async_fd(sgw_pg *pg, short *events);
int     pg_async_step(sgw_pg *pg, short revents);
void    pg_drop(sgw_pg *pg);                       /* closes the connection */
void    pg_abandon(sgw_pg *pg);                    /* closes it and forgets its transaction */

/* ------------------------------------------------------------- pgstmt.c
 * The statements a connection has prepared (named by a hash of their
 * text), bounded; see the file's heading. */
#define PGSTMT_MAX      256
#define PGSTMT_NAME_LEN 24
enum { PGSTMT_UNNAMED, PGSTMT_TO_PREPARE, PGSTMT_PREPARED };
typedef struct sgw_pgstmt sgw_pgstmt;
sgw_pgstmt *pgstmt_new(void);                      /* NULL when out of memory */
void        pgstmt_free(sgw_pgstmt *s);
void        pgstmt_clear(sgw_pgstmt *s);           /* a new session has none */
int         pgstmt_count(const sgw_pgstmt *s);
/* How to send sql: PGSTMT_PREPARED (by name), PGSTMT_TO_PREPARE (prepare it
 * as name first, then pgstmt_add once the server has it) or PGSTMT_UNNAMED
 * (the set is full, or another text has its hash). name is set unless
 * PGSTMT_UNNAMED. */
int         pgstmt_lookup(const sgw_pgstmt *s, const char *sql, char name[PGSTMT_NAME_LEN]);
int         pgstmt_add(sgw_pgstmt *s, const char *sql);   /* 0 ok, -1 full or out of memory */
void        pgstmt_name_for(const char *sql, char name[PGSTMT_NAME_LEN]);

/* -------------------------------------------------------------- replica.c
 * Whether the read replica may serve lag-tolerant reads, measured by one
 * thread per process (serve). */
int  replica_start(void);              /* 0 ok; without database.read_url does nothing */
void replica_stop(void);
int  replica_usable(void);
void replica_failed(const char *why);  /* a read found it failing */

/* --------------------------------------------------------------- pgpool.c
 * A job worker's connections, shared by its coroutines: a db.* call of the
 * coroutine being resumed (pgpool_set_current) takes one, sends, yields
 * (lightuserdata: the pool) and is resumed by pgpool_drive. */
enum { PGPOOL_WAITING, PGPOOL_GRANTED, PGPOOL_EXPIRED };
sgw_pgpool *pgpool_new(const char *conninfo, int size, int max_waiters, uint64_t wait_ms);
void        pgpool_free(sgw_pgpool *p);
void        pgpool_set_current(sgw_pgpool *p, lua_State *co);
lua_State  *pgpool_current(sgw_pgpool *p);
sgw_pg     *pgpool_using(sgw_pgpool *p, lua_State *co);   /* taken by co, or NULL */
sgw_pg     *pgpool_held(sgw_pgpool *p, lua_State *co);    /* held by co's transaction */
/* A connection for co (*state PGPOOL_GRANTED): the one it uses already, or
 * a free one; or NULL: co waits in line (PGPOOL_WAITING: yield, and ask
 * again only once pgpool_drive has resumed it) or waited too long
 * (PGPOOL_EXPIRED). */
sgw_pg     *pgpool_acquire(sgw_pgpool *p, lua_State *co, int *state);
void        pgpool_hold(sgw_pgpool *p, sgw_pg *pg, int held);
void        pgpool_release(sgw_pgpool *p, sgw_pg *pg);    /* back to free */
void        pgpool_sent(sgw_pgpool *p, sgw_pg *pg);       /* drive resumes its user */
struct pollfd;
int         pgpool_pollfds(sgw_pgpool *p, struct pollfd *fds, int cap);
int         pgpool_ready(sgw_pgpool *p);   /* a waiter can have a free connection now */
int         pgpool_in_flight(sgw_pgpool *p);   /* a statement or a connection is under way */
/* Reads answers (fds: what poll said of pgpool_pollfds' sockets); calls
 * on_ready(co, 0, ud) for every coroutine whose answer is complete, that got
 * a connection, or that waited too long. */
void        pgpool_drive(sgw_pgpool *p, const struct pollfd *fds, int nfds,
                         void (*on_ready)(lua_State *co, int nres, void *ud), void *ud);
/* co ended: what it used goes back (dropped when not clean). */
void        pgpool_forget(sgw_pgpool *p, lua_State *co);

/* ----------------------------------------------------------------- redis.c */
int        redis_configured(void);                 /* redis.url or redis.cluster_urls set */
/* Never NULL; connects lazily. With redis.cluster_urls set, the cluster
 * (url unused). */
sgw_redis *redis_open(const char *url);
int        redis_healthy(sgw_redis *r);            /* 1 when the last command succeeded */
void       redis_close(sgw_redis *r);
int        redis_ping(sgw_redis *r);               /* 0 when the server answers */
/* Global `redis`: redis.call(cmd, ...), redis.eval_cached(src, nkeys, ...) */
void       lapi_redis_open(lua_State *L, sgw_worker *w);
/* Sends n commands in one go to one server (a single Redis or a cluster's
 * node) and reads their n replies into replies[] (error replies included).
 * 0 ok; -1 after an I/O failure (message in *err, every reply NULL). */
struct redisReply;
int        redis_pipeline(sgw_redis *r, int n, const int *argc, const char *const *const *argv,
                          const size_t *const *lens, struct redisReply **replies, const char **err);

/* A connected (AUTH, SELECT done) context of r's server, now the caller's
 * to free with redisFree; NULL with the reason in *err. */
struct redisContext;
struct redisContext *redis_take_context(sgw_redis *r, const char **err);

/* ---------------------------------------------------------- invalidations.c
 * A count of "cached credentials may be stale" news from every instance
 * (Redis pub/sub on <redis.namespace>:invalidate). */
int         invalidations_start(void);   /* 0 ok; without redis.url does nothing */
void        invalidations_stop(void);
/* The count, or -1 while not subscribed (then nothing cached may be trusted). */
long long   invalidations_count(void);
void        invalidations_bump(void);    /* this instance invalidated */
const char *invalidations_channel(void);
/* redis.invalidations() and redis.invalidate(), added to the global `redis`
 * (after lapi_redis_open). */
void        lapi_invalidations_open(lua_State *L);

/* Between redis.c and redis_cluster.c: single servers (the cluster's nodes)... */
typedef struct sgw_cluster sgw_cluster;
sgw_redis *redis_open_node(const char *url);
sgw_redis *redis_node_like(const sgw_redis *seed, const char *host, size_t hlen, int port); /* NULL: no memory */
int        redis_node_is(const sgw_redis *r, const char *host, size_t hlen, int port);
const char *redis_node_host(const sgw_redis *r);
struct redisReply *redis_node_command(sgw_redis *r, int argc, const char **argv,
                                      const size_t *lens, const char **err);
/* After a failed redis_node_command or redis_pipeline: 1 when the command
 * may have reached the server (it failed after the connection was there). */
int        redis_node_wrote(const sgw_redis *r);
/* ...and the cluster (redis_cluster.c). */
unsigned   redis_key_slot(const char *key, size_t len);   /* CRC16, {hash tag} */
/* The slot of a command's keys; -1 without keys, -2 when they span slots. */
int        redis_command_slot(int argc, const char *const *argv, const size_t *lens);
sgw_cluster *redis_cluster_open(const char *seeds);       /* never NULL */
void       redis_cluster_close(sgw_cluster *c);
int        redis_cluster_healthy(sgw_cluster *c);
struct redisReply *redis_cluster_command(sgw_cluster *c, int slot, int argc, const char **argv,
                                         const size_t *lens, const char **err);
struct redisContext *redis_cluster_take_context(sgw_cluster *c, const char **err);
/* For redis_loop.c, which waits for the nodes without the thread. The node
 * of a slot by the map as it is (any node for -1). NULL: no node known. */
sgw_redis *redis_cluster_node_known(sgw_cluster *c, int slot);
/* 1 when the map is stale and was not read in the last REFRESH_MIN_MS:
 * the caller sends CLUSTER SLOTS to redis_cluster_nth_node(c, 0), or the
 * next ones while a node cannot be reached, and hands the reply to
 * redis_cluster_apply_map (0: the map is fresh again). */
int        redis_cluster_map_due(sgw_cluster *c);
sgw_redis *redis_cluster_nth_node(sgw_cluster *c, int k);    /* NULL past the last */
/* The k-th node took the ask: the next ask starts after it, so a node that
 * takes asks but never answers (a dead master's refused connection) is not
 * asked every time while live nodes could answer. */
void       redis_cluster_map_asked(sgw_cluster *c, int k);
int        redis_cluster_apply_map(sgw_cluster *c, const struct redisReply *rep, sgw_redis *from);
/* What a reply asks of its command: CLUSTER_FINAL (it is the answer),
 * CLUSTER_MOVED (map updated) or CLUSTER_ASK to *to, CLUSTER_RETRY later. */
enum { CLUSTER_FINAL, CLUSTER_MOVED, CLUSTER_ASK, CLUSTER_RETRY };
int        redis_cluster_redirect(sgw_cluster *c, const struct redisReply *rep, sgw_redis **to);
int        redis_cluster_may_hop(int hop);      /* 1 while a command may be redirected again */
int        redis_cluster_retry_ms(int hop);     /* the pause before a TRYAGAIN's retry */
void       redis_cluster_lost(sgw_cluster *c);  /* a node failed: read the map again */
void       redis_cluster_answered(sgw_cluster *c);
sgw_cluster *redis_cluster_of(sgw_redis *r);   /* NULL: a single server */

/* ------------------------------------------------------------ redis_loop.c
 * A worker loop's own connections (one server's, or one per cluster node):
 * a redis.* call of the coroutine being resumed (redis_loop_set_current)
 * appends its command, yields (lightuserdata: the loop's redis_loop) and is
 * resumed by redis_loop_drive with its reply, which the binding takes
 * (redis_loop_take). */
#define REDIS_LOOP_NODES_MAX 32     /* cluster nodes one loop connects to */
sgw_redis_loop *redis_loop_new(const char *url, int max_waiters);   /* NULL: no memory */
/* On the worker's cluster (redis_cluster_of(w->redis)), which it must outlive. */
sgw_redis_loop *redis_loop_new_cluster(sgw_cluster *cluster, int max_waiters);
void        redis_loop_free(sgw_redis_loop *rl);
void        redis_loop_set_current(sgw_redis_loop *rl, lua_State *co);
int         redis_loop_usable(sgw_redis_loop *rl, lua_State *L);   /* L is current and may yield */
int         redis_loop_in_flight(sgw_redis_loop *rl);
/* Appends a command for co; 0, or -1 with the reason in *err (nothing sent). */
int         redis_loop_send(sgw_redis_loop *rl, lua_State *co, int argc, const char **argv,
                            const size_t *lens, const char **err);
/* co's reply (now the caller's), or NULL with the reason in *err (valid
 * until the loop resumes another coroutine). */
struct redisReply *redis_loop_take(sgw_redis_loop *rl, lua_State *co, const char **err);
void        redis_loop_forget(sgw_redis_loop *rl, lua_State *co);   /* co ended */
struct pollfd;
int         redis_loop_pollfds(sgw_redis_loop *rl, struct pollfd *fds, int cap);   /* how many */
/* timeout_ms (-1: none) shortened to the next retry's due time. */
int         redis_loop_timeout(sgw_redis_loop *rl, int timeout_ms);
void        redis_loop_drive(sgw_redis_loop *rl, const struct pollfd *fds, int nfds,
                             void (*on_ready)(lua_State *co, int nres, void *ud), void *ud);
/* What redis_loop.c needs of a single server's settings and back-off. */
struct redisContext *redis_node_connect_nonblock(sgw_redis *r, int *nsetup, const char **err);
void       redis_node_fail(sgw_redis *r, const char *kind, const char *detail, const char **err);
void       redis_node_ok(sgw_redis *r);
int        redis_node_timeout_ms(const sgw_redis *r);

typedef struct sgw_request sgw_request;

/* ----------------------------------------------------------------- httpc.c
 * Outbound HTTP over libcurl. Inside a yieldable coroutine of a job worker,
 * http.request yields and the job runner drives many transfers at once with
 * httpc_poll; elsewhere it blocks. */
sgw_httpc *httpc_new(int max_concurrent);
void       httpc_free(sgw_httpc *h);
int        httpc_active(sgw_httpc *h);            /* transfers under way */
/* The coroutine the job runner is resuming: only it may yield on a
 * transfer (a job's own nested coroutines block instead). */
void       httpc_set_current(sgw_httpc *h, lua_State *co);
/* For the job runner: the lease of the job it is about to resume was last
 * given its full length lease_ms at confirmed_ms (monotonic; 0: no job), and
 * the runner confirms leases every every_ms. */
void       httpc_set_lease(sgw_httpc *h, uint64_t confirmed_ms, uint64_t lease_ms, uint64_t every_ms);
/* Runs transfers for up to timeout_ms; for each finished one calls
 * on_ready(co, 0, ud), which must resume co before it returns (the results
 * are built inside the coroutine, under its protected call). */
/* Also waits on extra's sockets (their revents set on return; at most
 * HTTPC_EXTRA_FDS_MAX of them); without transfers it waits on those alone. */
#define HTTPC_EXTRA_FDS_MAX 128
struct pollfd;
void       httpc_poll(sgw_httpc *h, int timeout_ms, struct pollfd *extra, int nextra,
                      void (*on_ready)(lua_State *co, int nres, void *ud), void *ud);
/* httpc_poll in two halves, so that a loop resumes other waits in between:
 * httpc_wait waits and lets curl act, keeping the finished transfers;
 * httpc_deliver resumes their coroutines. */
void       httpc_wait(sgw_httpc *h, int timeout_ms, struct pollfd *extra, int nextra);
void       httpc_deliver(sgw_httpc *h, void (*on_ready)(lua_State *co, int nres, void *ud), void *ud);
/* Global `http`: http.request{method,url,headers,body,timeout} */
void       lapi_http_open(lua_State *L, sgw_worker *w);
/* deny_private_addresses' rule: 1 when the textual IPv4/IPv6 address is not
 * a global unicast one (or does not parse). */
int        httpc_address_denied(const char *ip);
int        httpc_global_init(void);
void       httpc_global_cleanup(void);

/* ----------------------------------------------------------------- router.c
 * Routes come from handlers/routes.lua; the host matches them so that it
 * knows a route's body limit before reading a body. */
typedef struct sgw_route {
    char   *method;          /* "GET", ... */
    char   *pattern;         /* "/api/v1/posts/{id}" */
    char  **segments;        /* split pattern; "{x}" marks a parameter */
    int     nsegments;
    char   *handler;         /* module under handlers/, e.g. "api/posts_create" */
    size_t  max_body;        /* bytes */
    int     raw_body;        /* 1: the body is any media type (uploads, webhooks) */
    int     public_route;    /* auth = false: no credential needed before the body */
} sgw_route;

typedef struct sgw_param { char *name; char *value; } sgw_param;

#define SGW_MAX_PARAMS 8     /* parameters a route may have */

typedef struct sgw_match {
    int        route;        /* index into routes, or -1 */
    int        status;       /* 0 matched, 404, or 405 */
    char       allow[128];   /* for 405 */
    sgw_param  params[SGW_MAX_PARAMS];
    int        nparams;
} sgw_match;

typedef struct sgw_routes {
    sgw_route *v;
    int        n;
} sgw_routes;

/* Reads the routes table on top of L into out; 0 ok, else message in err. */
int  routes_from_lua(lua_State *L, sgw_routes *out, char *err, size_t errlen);
void routes_free(sgw_routes *r);
void routes_match(const sgw_routes *r, const char *method, const char *path, sgw_match *m);
void match_free(sgw_match *m);

/* ----------------------------------------------------------------- luart.c
 * Lua runtime: generations of handlers/ and lib/, sandboxed module loading,
 * memory ceilings and instruction/time budgets. */
struct sgw_gen {
    uint64_t      id;
    atomic_int    refs;
    char         *root;          /* directory holding handlers/ and lib/ */
    struct src_file { char *name; char *code; size_t len; } *files;
    int           nfiles;
    sgw_routes    routes;
};

int      luart_init(const char *root, char *err, size_t errlen);  /* generation 1 */
void     luart_shutdown(void);
/* Builds and checks a new generation; on failure the current one stays and
 * err says why. 0 ok. Thread-safe. */
int      luart_reload(char *err, size_t errlen);
sgw_gen *luart_current(void);            /* a new reference */
/* The current generation through a per-thread reference (do not release);
 * valid until this thread calls it again. */
sgw_gen *luart_current_cached(void);
void     luart_release(sgw_gen *g);
uint64_t luart_generation_id(void);
uint64_t luart_reload_failures(void);
const char *luart_last_error(void);      /* "" when the last reload succeeded; copy under lock */
void     luart_last_error_copy(char *buf, size_t n);
/* Makes w->L a state of the current generation (creating or replacing it);
 * 0 ok. Called at request/job boundaries: cheap when nothing changed. */
int      luart_refresh(sgw_worker *w, char *err, size_t errlen);
void     luart_close_state(sgw_worker *w);
/* Calls the function under the arguments on L's stack with the handler
 * time budget armed. On error, leaves a message with traceback on the
 * stack and returns the lua status. Works for coroutines too. */
int      luart_call(lua_State *L, int nargs, int nresults, double budget_ms);
/* Resumes co within the budget budget_arm gave it (jobs run in slices). */
int      luart_resume(lua_State *co, lua_State *from, int nargs, int *nres);
/* Message handler: the error message with the stack traceback appended. */
int      luart_traceback(lua_State *L);
/* Requires module `name` in w->L and leaves it on the stack; 0 ok. */
int      luart_require(lua_State *L, const char *name, char *err, size_t errlen);

/* ----------------------------------------------------------------- budget.c
 * Time budgets of Lua runs, watched by one thread: a run past its deadline
 * gets a hook that raises an error at its next instruction. */
int  budget_start(void);                     /* the watchdog; 0 ok */
void budget_stop(void);
/* Gives co (a coroutine or state) budget_ms from now; 0: no budget. */
void budget_arm(lua_State *co, double budget_ms);
void budget_disarm(lua_State *L);
/* Around every resume or call of an armed state, on the thread that runs it. */
void budget_enter(lua_State *co);
void budget_leave(void);
/* Replaces resume and wrap in the coroutine table on top of L with versions
 * under which a handler's own coroutines run within its budget. */
void budget_coroutines(lua_State *L);

/* ----------------------------------------------------------------- http.c
 * The public listener (libmicrohttpd) and the request record handed to
 * workers. */
typedef struct sgw_kv { char *name; char *value; } sgw_kv;

/* What one request's body holds of the body budget (body_budget.c). */
typedef struct body_hold {
    unsigned long long total;    /* of http.max_inflight_body_bytes */
    unsigned long long shared;   /* of its address's share (0 when outside the shares) */
    unsigned char      key[16];  /* the address's key in the shares, once shared */
} body_hold;

typedef struct sgw_request {
    char        id[40];          /* req_... */
    uint64_t    start_ms;
    char       *method;
    char       *path;
    sgw_kv     *headers;  int nheaders;   /* names lower-cased */
    sgw_kv     *query;    int nquery;
    char       *body;     size_t body_len; size_t body_cap;
    size_t      max_body;
    int         discarding;      /* the body is read and dropped (413, 503) */
    int         body_unread;     /* answered before its announced body was read */
    unsigned    timeout_set;     /* connection time-out in force while reading (s) */
    char        remote_addr[64]; /* the client: the peer, or whom a trusted proxy names */
    char        peer_addr[64];   /* the socket peer */
    body_hold   body_held;       /* of the body budget */
    uint64_t    body_deadline_ms;/* monotonic; http.body_timeout_seconds after the headers */
    uint64_t    gen_id;          /* generation the match was made in */
    sgw_match   match;
    char       *route_pattern;   /* for logs and metrics; NULL when unmatched */
    int         early_status;    /* 0, or 401/404/405/413/431/503 decided by the host */
    /* filled by the worker */
    int         status;
    sgw_kv     *resp_headers; int nresp_headers;
    char       *resp_body;  size_t resp_len;
    char       *client_id;       /* for the log line, set by Lua */
    void       *conn;            /* struct MHD_Connection * */
    void       *response;        /* struct MHD_Response *, ready to queue */
    void       *worker;          /* the worker a migrating request goes on with */
    struct sgw_request *next;    /* worker queue link */
    int         dispatched;      /* counted in flight; query collected */
    /* Its strings (method, path, headers, query, response headers) live
     * here while they fit, so most requests need no malloc for them; last,
     * so that it is not zeroed with the rest. */
    size_t      arena_used;
    char        arena[440];
} sgw_request;

/* request.c: a copy of s[0..n) (NUL-terminated) owned by req: from its arena while it
 * fits, else malloc'd. NULL when out of memory. req_strfree releases one. */
char *req_strndup(sgw_request *req, const char *s, size_t n);
void  req_strfree(sgw_request *req, char *p);

struct sockaddr_storage;
/* Parses "host:port", "[v6]:port" or ":port"; 0 ok. */
int  http_parse_listen(const char *s, struct sockaddr_storage *out, unsigned int *len);
int  http_start(void);            /* public listener on http.listen */
void http_quiesce(void);          /* stop accepting */
int  http_inflight(void);
unsigned long long http_inflight_body_bytes(void);  /* held of http.max_inflight_body_bytes */
void http_stop(void);
/* Called by a worker when req->status/resp_* are filled. */
void http_complete(sgw_request *req);

/* ----------------------------------------------------------- body_budget.c
 * Bytes of request bodies held while they arrive: a process-wide budget and
 * a share per client address (IPv6 by /64). */
enum { BODY_BUDGET_FULL = 1, BODY_BUDGET_ADDRESS = 2 };
/* total, share: 0 for none; addresses: how many may hold at once (sizes the
 * table; 0: unknown). -1 when the table cannot be had. */
int  body_budget_configure(unsigned long long total, unsigned long long share, size_t addresses);
/* Makes h hold `total` bytes for addr (the same address every time for one
 * h): 0, or BODY_BUDGET_FULL / BODY_BUDGET_ADDRESS (h unchanged). */
int  body_budget_reserve(body_hold *h, const char *addr, unsigned long long total);
void body_budget_release(body_hold *h);
unsigned long long body_budget_held(void);

/* ----------------------------------------------------------------- proxy.c
 * The client address behind trusted proxies (http.trusted_proxies). */
int  proxy_init(char *err, size_t errlen);   /* 0 ok; else err names the bad entry */
int  proxy_trusted(const char *addr);        /* 1 when addr is inside the list */
/* The client of a request from peer: peer itself unless it is trusted and
 * X-Forwarded-For (else Forwarded for=) names another; either may be NULL. */
void proxy_client_addr(const char *peer, const char *xff, const char *forwarded, char *out, size_t outlen);

/* --------------------------------------------------------------- offload.c
 * CPU-heavy calls on a small pool of threads. A binding fills a job (its
 * own struct, starting with an sgw_job) and, when offload_usable gives it
 * the loop's inbox, submits it and yields (lightuserdata: the inbox); run()
 * runs on a pool thread; the loop resumes the coroutine, whose continuation
 * reads the result and calls dispose(), which frees the job (also called
 * when the coroutine went meanwhile). */
typedef struct sgw_inbox sgw_inbox;
typedef struct sgw_job {
    void       (*run)(struct sgw_job *j);
    void       (*dispose)(struct sgw_job *j);
    sgw_inbox   *inbox;
    lua_State   *co;                          /* NULL: it went */
    struct sgw_job *next, *out_prev, *out_next;
} sgw_job;
int        offload_start(int nthreads);      /* 0 ok */
void       offload_stop(void);               /* after the loops have stopped */
sgw_inbox *offload_inbox_new(void);          /* a loop's; NULL: no memory */
void       offload_inbox_free(sgw_inbox *in);
void       offload_set_current(sgw_inbox *in, lua_State *co);
sgw_inbox *offload_usable(lua_State *L);     /* the inbox when L may wait on the pool */
void       offload_submit(sgw_inbox *in, sgw_job *j, lua_State *co);
void       offload_forget(sgw_inbox *in, lua_State *co);
int        offload_pollfd(sgw_inbox *in, struct pollfd *pfd);   /* 1 while jobs are out */
void       offload_drive(sgw_inbox *in, void (*on_ready)(lua_State *co, int nres, void *ud), void *ud);

/* ----------------------------------------------------------------- waits.c
 * Coroutines of one loop waiting on each other: global `sched` (later,
 * event, waitable). A wait yields lightuserdata (the loop's sgw_waits);
 * waits_drive resumes, with no values, those made ready before the turn. */
typedef struct sgw_waits sgw_waits;
sgw_waits *waits_new(void);                  /* NULL: no memory */
void       waits_free(sgw_waits *w);
void       waits_set_current(sgw_waits *w, lua_State *co);
void       waits_forget(sgw_waits *w, lua_State *co);
int        waits_ready(const sgw_waits *w);  /* 1: a coroutine can go on now */
void       waits_drive(sgw_waits *w, void (*on_ready)(lua_State *co, int nres, void *ud), void *ud);
void       lapi_sched_open(lua_State *L);

/* ------------------------------------------------------------------ loop.c
 * What a loop thread (request worker or job worker) waits on: transfers,
 * PostgreSQL connections and its Redis connection. */
int  loop_open(sgw_worker *w, int max_coroutines);   /* 0 ok; -1: no memory */
/* database.pool_size's ceiling: httpc_poll watches 64 other sockets, and a
 * loop also has a wake-up, a LISTEN (jobs), the replica's pool, Redis and
 * its inbox. */
#define LOOP_POOL_MAX 30
/* What loop_pollfds may return: both pools' sockets, Redis (one server, or
 * up to REDIS_LOOP_NODES_MAX cluster nodes) and the inbox. */
#define LOOP_FDS_MAX (2 * LOOP_POOL_MAX + REDIS_LOOP_NODES_MAX + 1)
/* The coroutine being resumed (NULL between resumptions): only its calls wait
 * on the loop. */
void loop_set_current(sgw_worker *w, lua_State *co);
/* 1 when co yielded (nres values on its stack) to wait on one of w's loop's
 * waits, which will resume it. */
int  loop_owns(const sgw_worker *w, lua_State *co, int nres);
void loop_forget(sgw_worker *w, lua_State *co);     /* co ended */
/* The sockets to poll after the caller's own (returns how many, at most cap);
 * loop_ready: a waiter can go on at once (poll without waiting). */
int  loop_pollfds(sgw_worker *w, struct pollfd *fds, int cap);
int  loop_ready(sgw_worker *w);
/* One wait: polls fds (the caller's, then loop_pollfds') and the transfers'
 * sockets (one epoll descriptor, httpc.c), returns when any has news or
 * timeout_ms passed, having resumed (on_ready) every coroutine whose answer
 * is in. */
void loop_wait(sgw_worker *w, struct pollfd *fds, int n, int timeout_ms,
               void (*on_ready)(lua_State *co, int nres, void *ud), void *ud);

/* ---------------------------------------------------------------- worker.c
 * A complete request runs first on the socket thread that read it, in the
 * state of an idle worker (workers_run_inline); at its first blocking call it
 * migrates to that worker's own thread. */
/* on_complete sends a finished request's answer (http_complete). */
int  workers_start(int n, void (*on_complete)(sgw_request *req));
enum { WORKERS_QUEUE, WORKERS_DONE, WORKERS_MIGRATE };
/* WORKERS_DONE: req's response is filled in. WORKERS_MIGRATE: suspend the
 * connection, then call workers_migrate(req). WORKERS_QUEUE: nothing ran (no
 * idle worker of the current generation): suspend, then workers_enqueue. */
int  workers_run_inline(sgw_request *req);
void workers_migrate(sgw_request *req);
void workers_enqueue(sgw_request *req);
void workers_stop(void);
int  workers_queue_depth(void);
/* Opens connections and the Lua state of a worker; 0 ok. */
int  worker_init(sgw_worker *w, int id, const char *role, char *err, size_t errlen);
/* worker_init for ws[0..n-1] at once (ids 0..n-1); on failure none is left
 * initialised, the first failure is logged and, when failed and err are not
 * NULL, its index and error are given back there. */
int  worker_init_all(sgw_worker *const *ws, int n, const char *role, int *failed, char *err, size_t errlen);
void worker_destroy(sgw_worker *w);
/* --------------------------------------------------------------- migrate.c
 * The request coroutine a socket thread is running; NULL on every other
 * thread and between requests. */
extern _Thread_local lua_State *sgw_socket_co;
void migrate_begin(lua_State *co);   /* the socket thread runs co */
void migrate_end(void);
int  migrate_asked(void);            /* the last run yielded to migrate */
/* 1 when L is that coroutine and may yield (the binding then yields, see
 * SGW_MIGRATE_IF_SOCKET); 0 when it must block where it is (counted). */
int  sgw_migrate_if_socket(lua_State *L);
/* First statement of every host binding that may block: on a socket thread
 * it yields so the request migrates to its worker's thread, where k (which
 * runs the binding's body again: its arguments are still on the stack)
 * carries on. */
#define SGW_MIGRATE_IF_SOCKET(L, k) \
    do { \
        if (sgw_socket_co && sgw_migrate_if_socket(L)) return lua_yieldk((L), 0, 0, (k)); \
    } while (0)

/* ------------------------------------------------------------------ jobs.c
 * Durable job queue in PostgreSQL with Lua handlers in handlers/jobs/ and
 * periodic timers from handlers/timers.lua. */
int  jobs_start(int nworkers);
/* Counts pending and dead jobs (for /metrics); 0 ok. */
int  jobs_queue_depth(sgw_pg *pg, long long *pending, long long *dead);
/* Stops claiming jobs; running ones may finish until deadline_ms
 * (monotonic), then are released. */
void jobs_request_stop(uint64_t deadline_ms);
void jobs_stop(void);             /* requests a stop if none was, then joins */
void jobs_wake(void);

/* --------------------------------------------------------------- metrics.c */
void metrics_request(const char *route, const char *method, int status, double seconds);
void metrics_count(const char *name, const char *labels, double delta); /* counters */
void metrics_gauge(const char *name, const char *labels, double value);
/* Appends Prometheus text to a malloc'd buffer; caller frees. */
char *metrics_render(size_t *len);
/* Global `metrics`: metrics.inc(name, labels_table?, delta?) */
void lapi_metrics_open(lua_State *L);

/* ----------------------------------------------------------------- admin.c */
int  admin_start(void);
void admin_stop(void);
/* The process state /readyz reports, set by main.c. */
extern atomic_int sgw_shutting_down;
/* 1 once the database has every migration this sgw ships (serve waits for it
 * before READY=1; /readyz answers 503 until then). */
extern atomic_int sgw_schema_current;

/* ---------------------------------------------------------------- notify.c
 * systemd's notification protocol ($NOTIFY_SOCKET); no-ops outside systemd. */
int      notify_init(void);                  /* before any thread; reads the environment */
void     notify_close(void);
int      notify_send(const char *fmt, ...)   /* "READY=1", "STOPPING=1", "STATUS=..." */
    __attribute__((format(printf, 1, 2)));
void     notify_reloading(void);             /* RELOADING=1 with MONOTONIC_USEC */
uint64_t notify_watchdog_ms(void);           /* ping interval (half of WATCHDOG_USEC); 0: none */
void     notify_watchdog_tick(void);         /* WATCHDOG=1 when the interval has passed */


#endif

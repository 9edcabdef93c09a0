/*
 * pg.c — PostgreSQL: each worker's connection, the Lua `db` module and
 * `sgw migrate`.
 *
 * A worker owns one connection and is the only thread that touches it. The
 * connection is opened on first use and re-opened on use after it broke, but
 * never inside a transaction: statements that ran before the break were
 * rolled back by the server, so carrying on over a new connection would
 * commit the second half of a transaction without its first half. Outside a
 * transaction a statement that failed because the connection broke is tried
 * once more on a fresh one.
 *
 * SQL errors are values (nil, message, sqlstate) so that a handler decides
 * what a failing database means for its endpoint; only misuse raises.
 *
 * The connection may lead to PgBouncer in transaction pooling mode, where
 * consecutive transactions may run on different server connections. So
 * nothing is kept in the session: no SET, no session advisory lock (migrate,
 * which needs one, connects directly). The settings a statement needs (time
 * zone, statement_timeout, custom plans) are sent as transaction-local ones
 * with every statement that starts a transaction, in the same round trip (a
 * libpq pipeline).
 *
 * The one exception: a coroutine's statements are prepared by name, once per
 * connection (pgstmt.c; database.prepared_statements), which PgBouncer 1.21
 * and later keeps track of. A server that says a statement is missing or
 * already there (an older pooler) turns names off for the process, with a
 * warning; that statement is tried once more unnamed when it was outside a
 * transaction.
 *
 * A worker may also have a read replica (database.read_url) for the reads
 * Lua marks as lag-tolerant (db.read_query). Its lag is checked at most
 * every REPLICA_CHECK_MS; a replica that is behind by more than
 * database.max_replica_lag_ms, or unreachable, is skipped and the read goes
 * to the primary.
 */
#include "sgw.h"

#include <libpq-fe.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_PARAMS            64
/* Statements of one db.batch, and the messages of a pipeline at most: the
 * settings (prepared), BEGIN, and per statement a plan mode, a prepare and
 * itself. */
#define BATCH_MAX             4
#define PIPELINE_MAX          (3 + 3 * BATCH_MAX)
/* While the server is unreachable, a worker tries again at most this often,
 * so that a dead database costs each request one quick failure. */
#define RECONNECT_INTERVAL_MS 1000
/* Bounds each connection attempt unless database.url sets connect_timeout. */
#define CONNECT_TIMEOUT_S     "5"
/* Our fallbacks for every session, ahead of the conninfo (which wins): a
 * bound on each connection attempt, and TCP settings that notice a database
 * host gone without a word (powered off, cut off) in about a minute instead
 * of the kernel's minutes to hours: keepalives for a connection waiting on
 * an answer, a user timeout for data never acknowledged. */
static const char *const CONNECT_KEYS[] = { "connect_timeout", "fallback_application_name", "keepalives",
                                            "keepalives_idle", "keepalives_interval", "keepalives_count",
                                            "tcp_user_timeout", "dbname", NULL };
#define CONNECT_VALS(conninfo) { CONNECT_TIMEOUT_S, "sgw", "1", "30", "10", "3", "60000", (conninfo), NULL }
/* The advisory lock that serialises concurrent `sgw migrate` runs ("sgw-migr"). */
#define MIGRATE_LOCK_KEY      8315746273955768178LL
#define RESULT_MT             "sgw.pg.result"
/* Sent in the same round trip ahead of every statement that starts a
 * transaction: the settings hold for that transaction only. $2 is the plan
 * mode of the statement it comes with (see PLAN_MODE_SQL). */
#define TX_SETTINGS_SQL \
    "SELECT set_config('TimeZone', 'UTC', true), set_config('statement_timeout', $1, true), " \
    "set_config('plan_cache_mode', $2, true)"
/* A statement prepared by name is planned with its values at every call
 * (custom), so that `($n IS NULL OR ...)` filters and partition pruning
 * plan as for that call; one whose text begins with GENERIC_PLAN_MARK (Lua
 * writes it where a statement's plan cannot depend on its values) keeps one
 * plan per connection, which spares PostgreSQL planning it again: for a
 * statement of a few joins that is most of its cost. Inside a transaction
 * the mode changes, when the next statement wants the other one, by this
 * statement in the same pipeline. */
#define PLAN_MODE_SQL      "SELECT set_config('plan_cache_mode', $1, true)"
#define PLAN_CUSTOM        "force_custom_plan"
#define PLAN_GENERIC       "force_generic_plan"
#define GENERIC_PLAN_MARK  "/* generic plan */"
#define OID_BOOL    16
#define OID_INT8    20
#define OID_INT2    21
#define OID_INT4    23
#define OID_OID     26
#define OID_JSON    114
#define OID_FLOAT4  700
#define OID_FLOAT8  701
#define OID_NUMERIC 1700
#define OID_JSONB   3802

struct sgw_pg {
    char     *conninfo;
    PGconn   *conn;
    int       tx_depth;          /* db.transaction nesting */
    char      tx_cause[6];       /* the state of the last statement that failed in it ("" none) */
    int       begin_pending;     /* a job's BEGIN waits to go with its first statement */
    int       begin_failed;      /* that BEGIN did not run: the transaction is aborted */
    int       async_began;       /* the statement in flight carries the BEGIN */
    int       failed;            /* the last connection attempt failed */
    uint64_t  failed_at_ms;
    char      last_error[512];
    /* The read replica, when database.read_url is set (NULL otherwise). */
    sgw_pg   *replica;
    /* A statement sent without waiting (a job coroutine's: pgpool.c drives
     * it with pg_async_step, the binding takes its answer). */
    int       async;             /* 1 from the send until the answer is taken */
    int       async_pipeline;    /* the number of messages in a pipeline; 0: none */
    int       async_flush;       /* output still to flush */
    int       async_done;        /* the answer is complete (or the connection broke) */
    int       async_broken;      /* the connection must be dropped once the answer is read */
    int       async_nulls;       /* end-of-statement markers seen (pipeline) */
    /* What each message of the pipeline is (PART_*) and which statement of
     * a batch it serves, and what the server prepared; the statements'
     * texts to remember once it has. */
    unsigned char async_part[PIPELINE_MAX];
    unsigned char async_stmt[PIPELINE_MAX];
    int       async_nstmt;       /* statements sent (db.batch: more than one) */
    int       plan_generic;      /* the transaction's plan mode: 1 generic, 0 custom, -1 not known */
    int       async_prepared;    /* bits: 1 the settings, 2 << k statement k */
    int       async_named;       /* something was sent by name */
    char     *async_sql[BATCH_MAX]; /* the statements being prepared (owned) */
    sgw_pgstmt *stmts;           /* prepared on this connection (owned) */
    int       connecting;        /* a connection started without waiting (connect_async) */
    uint64_t  connect_deadline;  /* monotonic ms when it gives up; 0: never */
    uint64_t  connect_limit_ms;  /* connect_timeout: each host of the conninfo has it anew */
    char      connect_host[256]; /* the host:port being tried */
    PostgresPollingStatusType connect_wants;
    PGTransactionStatusType async_before;
    PGresult *async_settings;    /* the first failure before the statements */
    PGresult *async_result[BATCH_MAX];
};

/* What a statement of a transaction whose BEGIN never ran is told. */
#define BEGIN_NOT_RUN "current transaction is aborted: its BEGIN did not run"

/* The messages of a pipeline. */
enum { PART_PREPARE_SETTINGS, PART_SETTINGS, PART_BEGIN, PART_PLAN_MODE, PART_PREPARE, PART_STATEMENT };

/* Set once a server lost or refused a statement name: a pooler without
 * prepared statement support is in front; names stay off for the process. */
static _Atomic int names_refused;

/* Why a statement did not succeed, in the shape Lua receives it. */
typedef struct pg_failure {
    char message[2048];
    char sqlstate[6];            /* "" when the server gave none */
} pg_failure;

int pg_in_transaction(sgw_pg *pg);

/* ------------------------------------------------------------ helpers */

static size_t trimmed_len(const char *s) {
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) n--;
    return n;
}

static void set_failure(pg_failure *f, const char *sqlstate, const char *fmt, const char *arg) {
    snprintf(f->message, sizeof f->message, fmt, arg);
    f->message[trimmed_len(f->message)] = 0;
    snprintf(f->sqlstate, sizeof f->sqlstate, "%s", sqlstate ? sqlstate : "");
}

/* Server notices would otherwise go raw to stderr and break the JSON log. */
static void notice_to_log(void *arg, const PGresult *r) {
    (void)arg;
    const char *sev = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
    const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    int warn = sev && strcmp(sev, "WARNING") == 0;
    log_msg(warn ? LOG_WARN : LOG_DEBUG, "db_notice", "%s: %s", sev ? sev : "NOTICE",
            msg ? msg : "");
}

/* Opens a connection and prepares its session with setup_sql. The conninfo
 * comes last so that anything it sets wins over our fallbacks. */
static PGconn *connect_session(const char *conninfo, const char *setup_sql, int log_notices,
                               char *err, size_t errlen) {
    const char *vals[] = CONNECT_VALS(conninfo);
    PGconn *c = PQconnectdbParams(CONNECT_KEYS, vals, 1);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (PQstatus(c) != CONNECTION_OK) {
        snprintf(err, errlen, "%s", PQerrorMessage(c));
        err[trimmed_len(err)] = 0;
        PQfinish(c);
        return NULL;
    }
    if (log_notices) PQsetNoticeReceiver(c, notice_to_log, NULL);
    if (!setup_sql) return c;
    PGresult *r = PQexec(c, setup_sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        snprintf(err, errlen, "setting up the session failed: %s",
                 r ? PQresultErrorMessage(r) : PQerrorMessage(c));
        err[trimmed_len(err)] = 0;
        PQclear(r);
        PQfinish(c);
        return NULL;
    }
    PQclear(r);
    return c;
}

/* A statement's result that is an answer, not a failure. */
static int result_ok(const PGresult *r) {
    ExecStatusType st = PQresultStatus(r);
    return st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK || st == PGRES_EMPTY_QUERY;
}

static void async_clear(sgw_pg *pg) {
    PQclear(pg->async_settings);
    pg->async_settings = NULL;
    for (int k = 0; k < BATCH_MAX; k++) {
        PQclear(pg->async_result[k]);
        pg->async_result[k] = NULL;
        free(pg->async_sql[k]);
        pg->async_sql[k] = NULL;
    }
    pg->async = pg->async_pipeline = pg->async_flush = pg->async_done = 0;
    pg->async_broken = pg->async_nulls = pg->async_prepared = pg->async_named = 0;
    pg->async_nstmt = 0;
}

static void drop_connection(sgw_pg *pg) {
    if (pg->conn) PQfinish(pg->conn);
    pg->conn = NULL;
    pg->connecting = 0;
    async_clear(pg);
    pgstmt_clear(pg->stmts);                 /* a new session has none */
}

/* A connection idle since its last statement may have been closed by the
 * server meanwhile (a restart sends FATAL 57P01, then closes): it is
 * replaced before anything is sent on it. Once a statement is sent on a
 * connection that then breaks, nobody can say whether it ran, so it is
 * never sent again (a write would be made twice); only reads are.
 *
 * An idle session hears from the server only when it is about to be
 * closed, or (rarely) a notice: whatever it heard, a new session is
 * cheaper than finding out by sending. This costs a poll. */
static void drop_if_closed(sgw_pg *pg) {
    if (!pg->conn || PQstatus(pg->conn) != CONNECTION_OK || PQtransactionStatus(pg->conn) != PQTRANS_IDLE) return;
    struct pollfd fd = { .fd = PQsocket(pg->conn), .events = POLLIN };
    if (poll(&fd, 1, 0) != 1) return;
    /* The server's last words reach the log: parsing them (PQisBusy) hands
     * an error received while idle to the notice receiver. */
    if (PQconsumeInput(pg->conn)) (void)PQisBusy(pg->conn);
    log_msg(LOG_INFO, "db_reconnect", "the database wrote to an idle connection (closing it?); opening a new one");
    drop_connection(pg);
}

static int ensure_connected(sgw_pg *pg, pg_failure *f) {
    drop_if_closed(pg);
    if (pg->conn && PQstatus(pg->conn) == CONNECTION_OK) return 0;
    if (pg->tx_depth > 0) {
        set_failure(f, "08006", "%s", "the database connection was lost during the transaction, "
                    "which the server has rolled back");
        return -1;
    }
    drop_connection(pg);
    uint64_t now = clock_mono_ms();
    if (pg->failed && now - pg->failed_at_ms < RECONNECT_INTERVAL_MS) {
        set_failure(f, "08001", "database unavailable: %s", pg->last_error);
        return -1;
    }
    char err[512];
    pg->conn = connect_session(pg->conninfo, NULL, 1, err, sizeof err);
    if (!pg->conn) {
        if (!pg->failed) log_msg(LOG_WARN, "db_connect_failed", "%s", err);
        pg->failed = 1;
        pg->failed_at_ms = now;
        snprintf(pg->last_error, sizeof pg->last_error, "%s", err);
        set_failure(f, "08001", "database unavailable: %s", err);
        return -1;
    }
    if (pg->failed) log_msg(LOG_INFO, "db_reconnected", "connected to the database again");
    pg->failed = 0;
    return 0;
}

static void failure_from_result(pg_failure *f, PGresult *r, sgw_pg *pg) {
    PGconn *c = pg->conn;
    const char *msg = r ? PQresultErrorMessage(r) : "";
    if (!*msg) msg = PQerrorMessage(c);
    if (!*msg) msg = "unknown database error";
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (!state && PQstatus(c) == CONNECTION_BAD) state = "08006";
    set_failure(f, state, "%s", msg);
    /* What aborted the transaction, should fn go on and return: the
     * statements after it only fail with 25P02. */
    if (pg->tx_depth > 0 && strcmp(f->sqlstate, "25P02") != 0) memcpy(pg->tx_cause, f->sqlstate, sizeof pg->tx_cause);
}

/* Reads what one pipelined query produced: its result (NULL when the
 * connection gave none) and the NULL that ends it. */
static PGresult *pipeline_result(PGconn *c) {
    PGresult *r = PQgetResult(c);
    if (!r) return NULL;
    PGresult *extra;
    while ((extra = PQgetResult(c))) PQclear(extra);   /* only after an error */
    return r;
}

static void drop_connection(sgw_pg *pg);

/* PQexecParams on pg's connection, plus the transaction settings when the
 * statement starts a transaction (see the heading). Like PQexecParams it
 * returns a result to inspect, NULL only when out of memory. A connection
 * that broke half-way through the pipeline is dropped, so that nothing
 * later reads an answer meant for another statement. */
static PGresult *exec_params(sgw_pg *pg, const char *sql, int n, const char *const *vals) {
    PGconn *c = pg->conn;
    if (PQtransactionStatus(c) != PQTRANS_IDLE || !PQenterPipelineMode(c))
        return PQexecParams(c, sql, n, NULL, vals, NULL, NULL, 0);
    char timeout[32];
    long long ms = config_int("database.statement_timeout_ms");
    snprintf(timeout, sizeof timeout, "%lld", ms > 0 ? ms : 0);
    const char *const tv[2] = { timeout, PLAN_CUSTOM };   /* unnamed: planned each call anyway */
    pg->plan_generic = 0;
    PGresult *settings = NULL, *r = NULL;
    int synced = 0;
    if (PQsendQueryParams(c, TX_SETTINGS_SQL, 2, NULL, tv, NULL, NULL, 0) &&
        PQsendQueryParams(c, sql, n, NULL, vals, NULL, NULL, 0) && PQpipelineSync(c)) {
        settings = pipeline_result(c);
        r = pipeline_result(c);
        PGresult *sync = PQgetResult(c);
        synced = PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
        PQclear(sync);
    }
    if (settings && PQresultStatus(settings) != PGRES_TUPLES_OK) {
        PQclear(r);                  /* the statement was skipped: say why */
        r = settings;
        settings = NULL;
    }
    PQclear(settings);
    if (!r) r = PQmakeEmptyPGresult(c, PGRES_FATAL_ERROR);
    if (!synced || !PQexitPipelineMode(c)) {
        if (r && PQresultStatus(r) != PGRES_FATAL_ERROR) {
            PQclear(r);
            r = PQmakeEmptyPGresult(c, PGRES_FATAL_ERROR);
        }
        drop_connection(pg);
    }
    return r;
}

/* Runs one statement. Returns the result of a successful statement (the
 * caller clears it), or NULL with f filled in. */
static PGresult *run(sgw_pg *pg, const char *sql, int nparams, const char *const *vals,
                     pg_failure *f) {
    if (pg->begin_failed) {
        set_failure(f, "25P02", "%s", BEGIN_NOT_RUN);
        return NULL;
    }
    if (pg->begin_pending) {
        /* A job's transaction that has sent nothing yet, now used by code
         * that blocks (a nested coroutine): its BEGIN goes first. */
        pg->begin_pending = 0;
        PGresult *b = run(pg, "BEGIN", 0, NULL, f);
        if (!b) {
            pg->begin_failed = pg->conn && PQstatus(pg->conn) == CONNECTION_OK;
            return NULL;
        }
        PQclear(b);
    }
    /* A connection the server closed while idle is replaced first
     * (ensure_connected); one that breaks after the send is not tried again
     * (drop_if_closed says why). */
    if (ensure_connected(pg, f)) return NULL;
    PGresult *r = exec_params(pg, sql, nparams, vals);
    ExecStatusType st = PQresultStatus(r);
    if (result_ok(r)) return r;
    if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
        /* The protocol now waits for COPY data we will never stream;
         * dropping the connection is the only clean way out. */
        PQclear(r);
        drop_connection(pg);
        set_failure(f, "0A000", "%s", "COPY is not supported through db.query/db.exec");
        return NULL;
    }
    failure_from_result(f, r, pg);
    PQclear(r);
    return NULL;
}

/* For statements whose result carries nothing but success. */
static int run_cmd(sgw_pg *pg, const char *sql, pg_failure *f) {
    PGresult *r = run(pg, sql, 0, NULL, f);
    if (!r) return -1;
    PQclear(r);
    return 0;
}

/* One statement, by its name when the connection has it prepared (or is
 * preparing it in the same pipeline), else with its text. */
static int send_statement(PGconn *c, int how, const char *name, const char *sql, int n,
                          const char *const *vals) {
    return how == PGSTMT_UNNAMED ? PQsendQueryParams(c, sql, n, NULL, vals, NULL, NULL, 0)
                                 : PQsendQueryPrepared(c, name, n, vals, NULL, NULL, 0);
}

/* ------------------------------------------------------------ without waiting
 *
 * A job coroutine's statement is sent at once and answered later: pgpool.c
 * polls the socket and calls pg_async_step until the answer is complete,
 * then resumes the coroutine, whose binding takes it (async_take). The
 * connection is in non-blocking mode only while a statement is in flight.
 * Like exec_params, a statement that starts a transaction goes behind the
 * transaction settings in one pipeline, and the first statement of a job's
 * transaction takes its BEGIN along (begin_pending). simple: a
 * simple-protocol string (no parameters), for the statements that end a
 * transaction or savepoint. */
/* One statement of what send_batch sends. */
typedef struct out_stmt {
    const char         *sql;
    int                 n;
    const char *const  *vals;
} out_stmt;

static int send_batch(sgw_pg *pg, const out_stmt *st, int nstmt, int simple, pg_failure *f) {
    if (!simple && pg->begin_failed) {
        /* Statements after it would each commit alone: refused, as the
         * server refuses them in a transaction a failure aborted. */
        set_failure(f, "25P02", "%s", BEGIN_NOT_RUN);
        return -1;
    }
    if (ensure_connected(pg, f)) return -1;
    PGconn *c = pg->conn;
    async_clear(pg);
    pg->async_before = PQtransactionStatus(c);
    pg->async_nstmt = nstmt;
    int ok = PQsetnonblocking(c, 1) == 0;
    /* What goes: [prepare settings, settings, BEGIN,] and for each statement
     * [plan mode,] [prepare,] the statement. */
    int settings = !simple && pg->async_before == PQTRANS_IDLE;
    int begin = settings && pg->begin_pending;
    int names = !simple && pg->stmts && !names_refused && config_bool("database.prepared_statements");
    char settings_name[PGSTMT_NAME_LEN], name[BATCH_MAX][PGSTMT_NAME_LEN];
    int how[BATCH_MAX], generic[BATCH_MAX];
    int settings_how = names && settings ? pgstmt_lookup(pg->stmts, TX_SETTINGS_SQL, settings_name)
                                         : PGSTMT_UNNAMED;
    pg->async_named = settings_how != PGSTMT_UNNAMED;
    for (int k = 0; k < nstmt; k++) {
        how[k] = names ? pgstmt_lookup(pg->stmts, st[k].sql, name[k]) : PGSTMT_UNNAMED;
        for (int j = 0; j < k && how[k] == PGSTMT_TO_PREPARE; j++)
            if (how[j] == PGSTMT_TO_PREPARE && strcmp(st[j].sql, st[k].sql) == 0) how[k] = PGSTMT_UNNAMED;
        if (how[k] == PGSTMT_TO_PREPARE && !(pg->async_sql[k] = strdup(st[k].sql))) how[k] = PGSTMT_UNNAMED;
        /* Only a named statement keeps a plan; an unnamed one is planned anew. */
        generic[k] = how[k] != PGSTMT_UNNAMED &&
                     strncmp(st[k].sql, GENERIC_PLAN_MARK, sizeof GENERIC_PLAN_MARK - 1) == 0;
        if (how[k] != PGSTMT_UNNAMED) pg->async_named = 1;
    }
    int parts = 0;
#define PART(kind, k) (pg->async_stmt[parts] = (unsigned char)(k), pg->async_part[parts++] = (kind))
    if (settings) {
        if (settings_how == PGSTMT_TO_PREPARE) PART(PART_PREPARE_SETTINGS, 0);
        PART(PART_SETTINGS, 0);
        pg->plan_generic = generic[0];
        if (begin) PART(PART_BEGIN, 0);
    } else if (simple) {
        pg->plan_generic = -1;   /* ROLLBACK TO SAVEPOINT may undo a change of mode */
    }
    for (int k = 0; k < nstmt; k++) {
        if (!simple && generic[k] != pg->plan_generic) {
            PART(PART_PLAN_MODE, k);
            pg->plan_generic = generic[k];
        }
        if (how[k] == PGSTMT_TO_PREPARE) PART(PART_PREPARE, k);
        PART(PART_STATEMENT, k);
    }
#undef PART
    if (ok && parts > 1 && PQenterPipelineMode(c)) {
        char timeout[32];
        long long ms = config_int("database.statement_timeout_ms");
        snprintf(timeout, sizeof timeout, "%lld", ms > 0 ? ms : 0);
        const char *const tv[2] = { timeout, generic[0] ? PLAN_GENERIC : PLAN_CUSTOM };
        pg->async_pipeline = parts;
        for (int i = 0; ok && i < parts; i++) {
            int k = pg->async_stmt[i];
            const char *const mode[1] = { generic[k] ? PLAN_GENERIC : PLAN_CUSTOM };
            switch (pg->async_part[i]) {
            case PART_PREPARE_SETTINGS: ok = PQsendPrepare(c, settings_name, TX_SETTINGS_SQL, 0, NULL); break;
            case PART_SETTINGS:
                ok = send_statement(c, settings_how, settings_name, TX_SETTINGS_SQL, 2, tv);
                break;
            case PART_BEGIN: ok = PQsendQueryParams(c, "BEGIN", 0, NULL, NULL, NULL, NULL, 0); break;
            case PART_PLAN_MODE: ok = PQsendQueryParams(c, PLAN_MODE_SQL, 1, NULL, mode, NULL, NULL, 0); break;
            case PART_PREPARE: ok = PQsendPrepare(c, name[k], st[k].sql, 0, NULL); break;
            default: ok = send_statement(c, how[k], name[k], st[k].sql, st[k].n, st[k].vals);
            }
        }
        ok = ok && PQpipelineSync(c);
    } else if (ok && parts > 1) {
        ok = 0;
    } else if (ok) {
        ok = simple ? PQsendQuery(c, st[0].sql) : send_statement(c, how[0], name[0], st[0].sql, st[0].n, st[0].vals);
    }
    int fl = ok ? PQflush(c) : -1;
    if (fl < 0) {
        failure_from_result(f, NULL, pg);
        if (!f->sqlstate[0]) snprintf(f->sqlstate, sizeof f->sqlstate, "08006");
        drop_connection(pg);
        return -1;
    }
    pg->async = 1;
    pg->async_flush = fl == 1;
    if (begin) pg->begin_pending = 0;
    pg->async_began = begin;
    return 0;
}

static int send_async(sgw_pg *pg, const char *sql, int n, const char *const *vals, int simple,
                      pg_failure *f) {
    const out_stmt one = { sql, n, vals };
    return send_batch(pg, &one, 1, simple, f);
}

/* The failure of a connection attempt, remembered for the back-off (as
 * ensure_connected does). */
static void connect_failed(sgw_pg *pg, const char *why) {
    char err[512];
    snprintf(err, sizeof err, "%s", why && *why ? why : "connection failed");
    err[trimmed_len(err)] = 0;
    if (!pg->failed) log_msg(LOG_WARN, "db_connect_failed", "%s", err);
    pg->failed = 1;
    pg->failed_at_ms = clock_mono_ms();
    snprintf(pg->last_error, sizeof pg->last_error, "%s", err);
    if (pg->conn) PQfinish(pg->conn);
    pg->conn = NULL;
    pg->connecting = 0;
}

/* The connect_timeout a connection was started with, in ms (0: none).
 * libpq applies it only to the connections it makes while waiting; one
 * driven by PQconnectPoll is held to it by pg_async_step. */
static uint64_t connect_timeout_ms(PGconn *c) {
    long long seconds = 0;
    PQconninfoOption *opts = PQconninfo(c);
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "connect_timeout") == 0 && o->val) seconds = atoll(o->val);
    PQconninfoFree(opts);
    return seconds > 0 ? (uint64_t)seconds * 1000u : 0;
}

/* Starts connecting without waiting: 1 started (pg_async_fd/step drive it;
 * the caller yields and sends once it is done), 0 already connected, -1
 * with f filled in (unreachable, or inside the back-off after a failure). */
static int connect_async(sgw_pg *pg, pg_failure *f) {
    if (!pg->async) drop_if_closed(pg);
    if (pg->conn && PQstatus(pg->conn) == CONNECTION_OK) return 0;
    /* Lost mid-transaction: ensure_connected says why. A transaction that has
     * sent nothing yet (its BEGIN waits for the first statement) begins on a
     * new session instead. */
    if (pg->tx_depth > 0 && !pg->begin_pending) return ensure_connected(pg, f);
    drop_connection(pg);
    if (pg->failed && clock_mono_ms() - pg->failed_at_ms < RECONNECT_INTERVAL_MS) {
        set_failure(f, "08001", "database unavailable: %s", pg->last_error);
        return -1;
    }
    const char *vals[] = CONNECT_VALS(pg->conninfo);
    pg->conn = PQconnectStartParams(CONNECT_KEYS, vals, 1);
    if (!pg->conn || PQstatus(pg->conn) == CONNECTION_BAD) {
        connect_failed(pg, pg->conn ? PQerrorMessage(pg->conn) : "out of memory");
        set_failure(f, "08001", "database unavailable: %s", pg->last_error);
        return -1;
    }
    pg->connect_limit_ms = connect_timeout_ms(pg->conn);
    pg->connect_deadline = pg->connect_limit_ms ? clock_mono_ms() + pg->connect_limit_ms : 0;
    pg->connect_host[0] = 0;
    pg->connecting = 1;
    pg->connect_wants = PGRES_POLLING_WRITING;
    pg->async = 1;
    pg->async_done = 0;
    return 1;
}

int pg_async_fd(sgw_pg *pg, short *events) {
    if (!pg || !pg->async || pg->async_done || !pg->conn) return -1;
    if (pg->connecting)
        *events = pg->connect_wants == PGRES_POLLING_READING ? POLLIN : POLLOUT;
    else
        *events = (short)(POLLIN | (pg->async_flush ? POLLOUT : 0));
    return PQsocket(pg->conn);
}

/* The items of a comma-separated libpq list (host, hostaddr, port). */
#define HOST_LIST_MAX 16
typedef struct host_list {
    char  buf[1024];
    char *item[HOST_LIST_MAX];
    int   n;
} host_list;

static void host_list_split(const char *s, host_list *l) {
    l->n = 0;
    if (!s || !*s) return;
    snprintf(l->buf, sizeof l->buf, "%s", s);
    for (char *p = l->buf, *comma; l->n < HOST_LIST_MAX; p = comma + 1) {
        l->item[l->n++] = p;
        if (!(comma = strchr(p, ','))) break;
        *comma = 0;
    }
}

/* A list's items from `from` on, joined again into out; "" when they are
 * all empty (each the default: the keyword is left out and libpq fills it
 * in). A list of one item holds for every host (a single port): kept. */
static void host_list_rest(const host_list *l, int from, char *out, size_t outlen) {
    out[0] = 0;
    if (l->n == 1) {
        snprintf(out, outlen, "%s", l->item[0]);
        return;
    }
    int any = 0;
    for (int i = from; i < l->n; i++) any |= *l->item[i] != 0;
    size_t used = 0;
    for (int i = from; any && i < l->n && used < outlen; i++)
        used += (size_t)snprintf(out + used, outlen - used, "%s%s", i > from ? "," : "", l->item[i]);
}

/* Which entry of the conninfo's host list libpq is trying: the one whose
 * name (or address) and port are the current ones; failing that, one left
 * empty (the default socket). -1 when none is. */
static int current_host_entry(PGconn *c, const host_list *hosts, const host_list *addrs, const host_list *ports) {
    const char *host = PQhost(c), *port = PQport(c);
    int n = hosts->n > addrs->n ? hosts->n : addrs->n, unnamed = -1;
    for (int i = 0; i < n && host; i++) {
        const char *name = i < hosts->n && *hosts->item[i] ? hosts->item[i] : i < addrs->n ? addrs->item[i] : "";
        const char *p = ports->n == 1 ? ports->item[0] : i < ports->n ? ports->item[i] : "";
        if (!*name && unnamed < 0) unnamed = i;
        if (strcmp(name, host) == 0 && (!*p || !port || strcmp(p, port) == 0)) return i;
    }
    return unnamed;
}

/* libpq tries the hosts of a multi-host conninfo in turn, but applies
 * connect_timeout to each only in its own blocking connect: driven by
 * PQconnectPoll, a first host that takes the connection and never answers
 * would hold the attempt until our deadline failed it, and the hosts after
 * it would never be tried. So when the deadline passes on a host that is not
 * the last, connecting starts again with the hosts after it: every setting
 * the connection has, its host, hostaddr and port lists cut to what follows
 * (up to HOST_LIST_MAX hosts). 1: a new attempt is under way; 0: there is no
 * next host; -1: the new attempt failed at once (connect_failed says why). */
static int connect_next_host(sgw_pg *pg) {
    host_list hosts, addrs, ports;
    hosts.n = addrs.n = ports.n = 0;
    PQconninfoOption *opts = PQconninfo(pg->conn);
    if (!opts) return 0;
    int nopts = 0;
    for (PQconninfoOption *o = opts; o->keyword; o++, nopts++) {
        if (strcmp(o->keyword, "host") == 0) host_list_split(o->val, &hosts);
        else if (strcmp(o->keyword, "hostaddr") == 0) host_list_split(o->val, &addrs);
        else if (strcmp(o->keyword, "port") == 0) host_list_split(o->val, &ports);
    }
    int n = hosts.n > addrs.n ? hosts.n : addrs.n;
    int at = current_host_entry(pg->conn, &hosts, &addrs, &ports);
    const char **keys = calloc((size_t)nopts + 4, sizeof *keys), **vals = calloc((size_t)nopts + 4, sizeof *vals);
    if (at < 0 || at + 1 >= n || !keys || !vals) {
        free(keys);
        free(vals);
        PQconninfoFree(opts);
        return 0;
    }
    char rest[3][1024];
    host_list_rest(&hosts, at + 1, rest[0], sizeof rest[0]);
    host_list_rest(&addrs, at + 1, rest[1], sizeof rest[1]);
    host_list_rest(&ports, at + 1, rest[2], sizeof rest[2]);
    int k = 0;
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (!o->val || !*o->val || strcmp(o->keyword, "host") == 0 || strcmp(o->keyword, "hostaddr") == 0 ||
            strcmp(o->keyword, "port") == 0)
            continue;
        keys[k] = o->keyword;
        vals[k++] = o->val;
    }
    static const char *const listed[] = { "host", "hostaddr", "port" };
    for (int j = 0; j < 3; j++)
        if (rest[j][0]) {
            keys[k] = listed[j];
            vals[k++] = rest[j];
        }
    log_msg(LOG_WARN, "db_connect_failed", "timeout expired while connecting to %s:%s (connect_timeout); trying the next host",
            PQhost(pg->conn) ? PQhost(pg->conn) : "", PQport(pg->conn) ? PQport(pg->conn) : "");
    PGconn *next = PQconnectStartParams(keys, vals, 0);
    free(keys);
    free(vals);
    PQconninfoFree(opts);
    PQfinish(pg->conn);
    pg->conn = next;
    if (!next || PQstatus(next) == CONNECTION_BAD) {
        connect_failed(pg, next ? PQerrorMessage(next) : "out of memory");
        return -1;
    }
    pg->connect_host[0] = 0;
    pg->connect_deadline = clock_mono_ms() + pg->connect_limit_ms;
    pg->connect_wants = PGRES_POLLING_WRITING;
    return 1;
}

/* libpq moves on to the conninfo's next host by itself (a refusal, a
 * read-only server): like its own connect_timeout, ours counts for each
 * host, from when it is first seen. */
static void note_host(sgw_pg *pg) {
    char host[sizeof pg->connect_host];
    snprintf(host, sizeof host, "%s:%s", PQhost(pg->conn) ? PQhost(pg->conn) : "", PQport(pg->conn) ? PQport(pg->conn) : "");
    if (strcmp(host, pg->connect_host) != 0) {
        memcpy(pg->connect_host, host, sizeof host);
        if (pg->connect_limit_ms) pg->connect_deadline = clock_mono_ms() + pg->connect_limit_ms;
    }
}

/* Advances a connection under way once its socket is ready (revents). */
static int connect_step(sgw_pg *pg, short revents) {
    if (!revents) return 0;
    PostgresPollingStatusType st = PQconnectPoll(pg->conn);
    if (st == PGRES_POLLING_OK) {
        pg->connecting = 0;
        PQsetNoticeReceiver(pg->conn, notice_to_log, NULL);
        if (pg->failed) log_msg(LOG_INFO, "db_reconnected", "connected to the database again");
        pg->failed = 0;
    } else if (st == PGRES_POLLING_FAILED) {
        connect_failed(pg, PQerrorMessage(pg->conn));
    } else {
        pg->connect_wants = st;
        note_host(pg);
        return 0;
    }
    pg->async_done = 1;          /* the caller resumes and sends (or fails) */
    return 1;
}

/* Reads what has arrived; 1 once the answer is complete. Never blocks. */
int pg_async_step(sgw_pg *pg, short revents) {
    if (!pg || !pg->async) return 0;
    if (pg->async_done) return 1;
    if (pg->connecting) {
        /* A server that took the connection and never answers (or a SYN
         * that goes nowhere) would hold the caller for minutes. */
        note_host(pg);
        if (pg->connect_deadline && clock_mono_ms() >= pg->connect_deadline) {
            int next = connect_next_host(pg);
            if (next == 1) return 0;
            if (next == 0) connect_failed(pg, "timeout expired while connecting (connect_timeout)");
            pg->async_done = 1;
            return 1;
        }
        return connect_step(pg, revents);
    }
    PGconn *c = pg->conn;
    if (pg->async_flush) {
        int fl = PQflush(c);
        if (fl < 0) goto broken;
        pg->async_flush = fl == 1;
    }
    if (!PQconsumeInput(c)) goto broken;
    while (!PQisBusy(c)) {
        PGresult *r = PQgetResult(c);
        if (!pg->async_pipeline) {
            if (!r) {
                pg->async_done = 1;
                break;
            }
            if (!pg->async_result[0]) pg->async_result[0] = r;
            else PQclear(r);             /* only after an error */
            continue;
        }
        if (!r) {
            /* One NULL ends each message's results; more than we sent
             * would mean the pipeline is not what we sent. */
            if (++pg->async_nulls > pg->async_pipeline) goto broken;
            continue;
        }
        ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_PIPELINE_SYNC) {
            PQclear(r);
            pg->async_done = 1;
            if (!PQexitPipelineMode(c)) pg->async_broken = 1;
            break;
        }
        if (pg->async_nulls >= pg->async_pipeline) {
            PQclear(r);
            goto broken;
        }
        int part = pg->async_part[pg->async_nulls], k = pg->async_stmt[pg->async_nulls];
        if (part == PART_STATEMENT) {
            if (!pg->async_result[k]) pg->async_result[k] = r;
            else PQclear(r);
            continue;
        }
        int fine = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
        if (fine && part == PART_PREPARE_SETTINGS) pg->async_prepared |= 1;
        if (fine && part == PART_PREPARE) pg->async_prepared |= 2 << k;
        /* A part skipped after an earlier failure says nothing of its own. */
        if (!fine && st != PGRES_PIPELINE_ABORTED && !pg->async_settings) pg->async_settings = r;
        else PQclear(r);
    }
    if (pg->async_done && !pg->async_broken && PQsetnonblocking(c, 0) != 0) pg->async_broken = 1;
    return pg->async_done;
broken:
    pg->async_done = 1;
    pg->async_broken = 1;
    return 1;
}

/* The answers of the statements in flight: 0 with out[k] the result of
 * statement k to inspect (the caller clears them), or -1 with f filled in
 * when the connection broke (it is dropped then, after f has its message)
 * or what came before the statements failed. */
static int async_take_all(sgw_pg *pg, PGresult **out, pg_failure *f) {
    int n = pg->async_nstmt > 0 ? pg->async_nstmt : 1;
    PGresult *settings = pg->async_settings;
    pg->async_settings = NULL;
    for (int k = 0; k < n; k++) {
        out[k] = pg->async_result[k];
        pg->async_result[k] = NULL;
    }
    /* Prepared even when a statement then failed: the name stays. */
    if (pg->async_prepared & 1) pgstmt_add(pg->stmts, TX_SETTINGS_SQL);
    for (int k = 0; k < BATCH_MAX; k++) {
        if ((pg->async_prepared & (2 << k)) && pg->async_sql[k]) pgstmt_add(pg->stmts, pg->async_sql[k]);
        free(pg->async_sql[k]);
        pg->async_sql[k] = NULL;
    }
    pg->async_prepared = 0;
    PGresult *failed = NULL;
    if (settings && PQresultStatus(settings) != PGRES_TUPLES_OK) {
        failed = settings;               /* the statements were skipped: say why */
        settings = NULL;
    }
    PQclear(settings);
    int broken = pg->async_broken || !pg->conn;
    /* Idle after a pipeline that carried BEGIN: something before it failed
     * and the server rolled the pipeline back (a lost connection says so
     * by itself). */
    if (pg->async_began && !broken && PQtransactionStatus(pg->conn) == PQTRANS_IDLE) pg->begin_failed = 1;
    pg->async_began = 0;
    pg->async = pg->async_done = pg->async_broken = 0;
    int missing = 0;
    for (int k = 0; k < n; k++) missing |= !out[k];
    if (!broken && !failed && !missing) return 0;
    for (int k = 0; k < n; k++) {
        PQclear(out[k]);
        out[k] = NULL;
    }
    if (pg->conn) failure_from_result(f, broken ? NULL : failed, pg);
    else set_failure(f, "08006", "%s", "the database connection was lost");
    if (broken && strncmp(f->sqlstate, "08", 2) != 0) snprintf(f->sqlstate, sizeof f->sqlstate, "08006");
    PQclear(failed);
    if (broken) drop_connection(pg);
    return -1;
}

/* async_take_all for one statement: its result, or NULL with f. */
static PGresult *async_take(sgw_pg *pg, pg_failure *f) {
    PGresult *r[BATCH_MAX];
    return async_take_all(pg, r, f) ? NULL : r[0];
}

void pg_drop(sgw_pg *pg) {
    if (pg) drop_connection(pg);
}

/* For a connection whose user is gone: the server rolls the transaction
 * back with the session, and the next user starts clean (pg_drop alone
 * would leave the transaction's depth, and every later statement would be
 * told the connection was lost during it). */
void pg_abandon(sgw_pg *pg) {
    if (!pg) return;
    drop_connection(pg);
    pg->tx_depth = 0;
    pg->begin_pending = pg->begin_failed = 0;
}

/* ------------------------------------------------------------ C API */

sgw_pg *pg_open(const char *conninfo) {
    sgw_pg *pg = calloc(1, sizeof *pg);
    if (!pg) return NULL;
    pg->conninfo = strdup(conninfo ? conninfo : "");
    pg->stmts = pgstmt_new();
    if (!pg->conninfo || !pg->stmts) {
        free(pg->conninfo);
        pgstmt_free(pg->stmts);
        free(pg);
        return NULL;
    }
    return pg;
}

void pg_close(sgw_pg *pg) {
    if (!pg) return;
    drop_connection(pg);
    pg_close(pg->replica);
    pgstmt_free(pg->stmts);
    free(pg->conninfo);
    free(pg);
}

int pg_set_replica(sgw_pg *pg, const char *conninfo) {
    if (!pg || !conninfo || !*conninfo) return 0;
    pg_close(pg->replica);
    pg->replica = pg_open(conninfo);
    return pg->replica ? 0 : -1;
}

const char *pg_direct_url(void) {
    const char *url = config_str("database.listen_url");
    return *url ? url : config_str("database.url");
}

struct pg_result *pg_exec(sgw_pg *pg, const char *sql, int n, const char *const *vals) {
    pg_failure f;
    if (!pg || ensure_connected(pg, &f)) return NULL;
    return (struct pg_result *)exec_params(pg, sql, n, vals);
}

/* Where a lag-tolerant read goes: the replica while it may serve
 * (replica.c), else the primary. Inside a transaction always the primary:
 * the transaction's reads belong with its writes. */
static sgw_pg *read_target(sgw_pg *pg) {
    if (!pg->replica || pg_in_transaction(pg) || !replica_usable()) return pg;
    return pg->replica;
}

int pg_ping(sgw_pg *pg) {
    if (!pg) return -1;
    pg_failure f;
    return run_cmd(pg, "SELECT 1", &f);
}

/* True inside db.transaction and also after a BEGIN sent by hand, so that
 * http.request is refused either way. */
int pg_in_transaction(sgw_pg *pg) {
    if (!pg) return 0;
    if (pg->tx_depth > 0) return 1;
    if (!pg->conn || PQstatus(pg->conn) != CONNECTION_OK) return 0;
    PGTransactionStatusType ts = PQtransactionStatus(pg->conn);
    return ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR || ts == PQTRANS_ACTIVE;
}

void pg_reset_session(sgw_pg *pg) {
    if (!pg) return;
    if (pg->conn && PQstatus(pg->conn) == CONNECTION_OK &&
        PQtransactionStatus(pg->conn) != PQTRANS_IDLE) {
        PGresult *r = PQexec(pg->conn, "ROLLBACK");
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            /* A connection we cannot return to idle must not serve the next request. */
            log_msg(LOG_WARN, "db_reset_failed", "%s",
                    r ? PQresultErrorMessage(r) : PQerrorMessage(pg->conn));
            drop_connection(pg);
        }
        PQclear(r);
    }
    pg->tx_depth = 0;
    pg->begin_pending = pg->begin_failed = 0;
}

struct pg_conn *pg_raw(sgw_pg *pg) {
    if (!pg) return NULL;
    pg_failure f;
    return ensure_connected(pg, &f) ? NULL : pg->conn;
}

/* ------------------------------------------------------------ Lua: db */

/* Upvalues of every db function. */
#define UV_WORKER lua_upvalueindex(1)
#define UV_ENCODE lua_upvalueindex(2)
#define UV_DECODE lua_upvalueindex(3)

/* Holds a PGresult while Lua builds the rows, so that a memory error raised
 * half-way still frees it. */
typedef struct res_box { PGresult *res; } res_box;

/* A box on the stack, empty yet. */
static res_box *new_res_box(lua_State *L) {
    res_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->res = NULL;
    luaL_setmetatable(L, RESULT_MT);
    return box;
}

static int res_box_gc(lua_State *L) {
    res_box *b = luaL_checkudata(L, 1, RESULT_MT);
    PQclear(b->res);
    b->res = NULL;
    return 0;
}

/* The connection a blocking db.* call uses: in a job, the one its
 * transaction holds (a nested coroutine of the job shares it), else the
 * worker's own. */
static sgw_pg *worker_conn(sgw_worker *w, lua_State *L) {
    (void)L;
    if (!w) return NULL;
    if (w->pgpool) {
        sgw_pg *held = pgpool_held(w->pgpool, pgpool_current(w->pgpool));
        if (held) return held;
    }
    return w->pg;
}

static sgw_pg *upvalue_pg(lua_State *L) {
    return worker_conn(lua_touserdata(L, UV_WORKER), L);
}

int pg_worker_in_transaction(sgw_worker *w, lua_State *L) {
    return pg_in_transaction(worker_conn(w, L));
}

/* The pool when L may wait on it without blocking: the job coroutine the
 * runner is resuming, in a yieldable context. NULL: block. */
static sgw_pgpool *async_pool(lua_State *L) {
    sgw_worker *w = lua_touserdata(L, UV_WORKER);
    if (!w || !w->pgpool || !w->pg || pgpool_current(w->pgpool) != L || !lua_isyieldable(L)) return NULL;
    return w->pgpool;
}

static int push_not_configured(lua_State *L) {
    lua_pushnil(L);
    lua_pushliteral(L, "database not configured");
    return 2;
}

/* The database cannot be reached or cannot serve at all, rather than
 * refusing this statement: the connection classes (08), insufficient
 * resources (53) and a server shutting down or starting (57P01-57P03). */
static int unavailable_state(const char *s) {
    return strncmp(s, "08", 2) == 0 || strncmp(s, "53", 2) == 0 ||
           strcmp(s, "57P01") == 0 || strcmp(s, "57P02") == 0 || strcmp(s, "57P03") == 0;
}

/* A replica's failure that the primary would not have: it is down, or it
 * cancelled the read for a conflict with recovery (40001). */
static int replica_only_failure(const char *s) {
    return unavailable_state(s) || strcmp(s, "40001") == 0 || strcmp(s, "57014") == 0;
}

#define UNAVAILABLE "database unavailable"
#define BUSY        "database busy"

/* A statement the database gave up for the moment, its transaction undone:
 * its time limit ran out (57014), a deadlock (40P01), a serialization
 * failure (40001) or a lock it could not take (55P03). The same call may
 * well succeed again. */
static int busy_state(const char *s) {
    return strcmp(s, "57014") == 0 || strcmp(s, "40P01") == 0 || strcmp(s, "40001") == 0 ||
           strcmp(s, "55P03") == 0;
}

/* The message Lua sees. Every outage reads "database unavailable: ...", a
 * statement given up "database busy: ...", so that an assert() on it, which
 * keeps only the message, still says what it was (the dispatcher answers
 * both with 503 and Retry-After). */
static void push_message(lua_State *L, const pg_failure *f) {
    const char *prefix = unavailable_state(f->sqlstate) ? UNAVAILABLE : busy_state(f->sqlstate) ? BUSY : NULL;
    if (prefix && strncmp(f->message, prefix, strlen(prefix)) != 0)
        lua_pushfstring(L, "%s: %s", prefix, f->message);
    else
        lua_pushstring(L, f->message);
}

static int push_failure(lua_State *L, const pg_failure *f) {
    lua_pushnil(L);
    push_message(L, f);
    if (f->sqlstate[0]) lua_pushstring(L, f->sqlstate);
    else lua_pushnil(L);
    return 3;
}

static int raise_failure(lua_State *L, const pg_failure *f);

/* A statement that failed before it was sent (a parameter it cannot send,
 * the send itself): outside a transaction, nil and the failure as usual.
 * Inside one the server knows nothing of it, so fn could go on and commit
 * the rest without it: it raises instead, and the transaction rolls back. */
static int unsent_failure(lua_State *L, const sgw_pg *pg, const pg_failure *f) {
    /* 25P02: refused because the transaction is over already, which
     * db.transaction raises by itself when fn returns. */
    int raise = pg && pg->tx_depth > 0 && strcmp(f->sqlstate, "25P02") != 0;
    return raise ? raise_failure(L, f) : push_failure(L, f);
}

/* Turns the n values from stack index base on into text parameters.
 * Strings made here (JSON of tables) are left on the stack so that vals
 * stay valid until the call ends. Returns 0, or -1 with f filled in for a
 * value PostgreSQL would refuse. */
static int collect_params_at(lua_State *L, int base, int n, const char **vals, char (*num)[48],
                             pg_failure *f) {
    luaL_checkstack(L, n + 8, "too many parameters");
    for (int i = 0; i < n; i++) {
        int idx = base + i;
        switch (lua_type(L, idx)) {
        case LUA_TNIL:
            vals[i] = NULL;
            break;
        case LUA_TBOOLEAN:
            vals[i] = lua_toboolean(L, idx) ? "true" : "false";
            break;
        case LUA_TNUMBER:
            if (lua_isinteger(L, idx)) {
                snprintf(num[i], sizeof num[i], LUA_INTEGER_FMT, lua_tointeger(L, idx));
            } else {
                double d = (double)lua_tonumber(L, idx);
                if (isnan(d)) snprintf(num[i], sizeof num[i], "NaN");
                else if (isinf(d)) snprintf(num[i], sizeof num[i], d > 0 ? "Infinity" : "-Infinity");
                else snprintf(num[i], sizeof num[i], "%.17g", d);
            }
            vals[i] = num[i];
            break;
        case LUA_TSTRING: {
            size_t len;
            const char *s = lua_tolstring(L, idx, &len);
            if (memchr(s, 0, len)) {
                char which[16];
                snprintf(which, sizeof which, "%d", i + 1);
                set_failure(f, "22021", "parameter $%s contains a zero byte, which text "
                            "cannot hold", which);
                return -1;
            }
            vals[i] = s;
            break;
        }
        case LUA_TTABLE:
            if (lua_isnil(L, UV_ENCODE))
                luaL_argerror(L, idx, "tables need lua-cjson, which is not available");
            lua_pushvalue(L, UV_ENCODE);
            lua_pushvalue(L, idx);
            lua_call(L, 1, 1);
            vals[i] = lua_tostring(L, -1);
            if (!vals[i]) luaL_argerror(L, idx, "cjson.encode did not return a string");
            break;
        case LUA_TLIGHTUSERDATA:
            if (lua_touserdata(L, idx) == NULL) {     /* db.null, cjson.null */
                vals[i] = NULL;
                break;
            }
            /* fall through */
        default:
            luaL_argerror(L, idx, lua_pushfstring(L, "cannot send a %s to the database",
                                                  luaL_typename(L, idx)));
        }
    }
    return 0;
}

/* The parameters of db.query and its kind: arguments 2..n+1. */
static int collect_params(lua_State *L, int n, const char **vals, char (*num)[48], pg_failure *f) {
    return collect_params_at(L, 2, n, vals, num, f);
}

static void push_value(lua_State *L, Oid type, const char *v, int len) {
    switch (type) {
    case OID_INT2: case OID_INT4: case OID_INT8: case OID_OID:
        lua_pushinteger(L, (lua_Integer)strtoll(v, NULL, 10));
        break;
    case OID_FLOAT4: case OID_FLOAT8: case OID_NUMERIC:
        /* strtod reads NaN and [-]Infinity as PostgreSQL spells them. */
        lua_pushnumber(L, (lua_Number)strtod(v, NULL));
        break;
    case OID_BOOL:
        lua_pushboolean(L, v[0] == 't');
        break;
    case OID_JSON: case OID_JSONB:
        if (!lua_isnil(L, UV_DECODE)) {
            lua_pushvalue(L, UV_DECODE);
            lua_pushlstring(L, v, (size_t)len);
            if (lua_pcall(L, 1, 1, 0) == LUA_OK) break;
            lua_pop(L, 1);
        }
        lua_pushlstring(L, v, (size_t)len);
        break;
    default:
        lua_pushlstring(L, v, (size_t)len);
    }
}

/* The column names go on the stack once, below the rows, so that each cell
 * is stored with a key already made rather than looked up by its C text. */
static void push_rows(lua_State *L, PGresult *r) {
    int nrows = PQntuples(r), ncols = PQnfields(r);
    luaL_checkstack(L, ncols + 4, "too many columns");
    int names = lua_gettop(L);
    for (int c = 0; c < ncols; c++) lua_pushstring(L, PQfname(r, c));
    lua_createtable(L, nrows, 1);
    for (int i = 0; i < nrows; i++) {
        lua_createtable(L, 0, ncols);
        for (int c = 0; c < ncols; c++) {
            if (PQgetisnull(r, i, c)) continue;
            lua_pushvalue(L, names + 1 + c);
            push_value(L, PQftype(r, c), PQgetvalue(r, i, c), PQgetlength(r, i, c));
            lua_rawset(L, -3);
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    if (ncols > 0) {
        lua_replace(L, names + 1);
        lua_settop(L, names + 1);
    }
    const char *affected = PQcmdTuples(r);
    if (*affected) {
        lua_pushinteger(L, (lua_Integer)strtoll(affected, NULL, 10));
        lua_setfield(L, -2, "affected");
    }
}

typedef enum { RUN_EXEC, RUN_QUERY, RUN_READ, RUN_READ_RESULT } run_kind;

static const char *const run_names[] = { "exec", "query", "read_query", "read_result" };

static int is_read(run_kind kind) { return kind == RUN_READ || kind == RUN_READ_RESULT; }

/* What a successful statement gives Lua: its rows, the result itself
 * (box, on the top of the stack: db.read_result) or (db.exec) the count of
 * rows it affected. */
static int push_answer(lua_State *L, res_box *box, run_kind kind) {
    if (kind == RUN_READ_RESULT) return 1;
    if (kind != RUN_EXEC) {
        push_rows(L, box->res);
    } else {
        const char *affected = PQcmdTuples(box->res);
        lua_pushinteger(L, *affected ? (lua_Integer)strtoll(affected, NULL, 10) : 0);
    }
    PQclear(box->res);
    box->res = NULL;
    return 1;
}

/* Runs a lag-tolerant read on the replica when it may serve, else (or when
 * the replica fails where the primary would not) on the primary. */
static PGresult *run_read(sgw_pg *pg, const char *sql, int n, const char *const *vals,
                          pg_failure *f) {
    sgw_pg *target = read_target(pg);
    if (target != pg) {
        PGresult *r = run(target, sql, n, vals, f);
        if (r || !replica_only_failure(f->sqlstate)) {
            metrics_count("sgw_db_reads_total", "target=\"replica\"", 1);
            return r;
        }
        replica_failed(f->message);
    }
    metrics_count("sgw_db_reads_total", "target=\"primary\"", 1);
    PGresult *r = run(pg, sql, n, vals, f);
    /* A read may go again on a new connection (drop_if_closed says why
     * nothing else does). */
    if (!r && pg->tx_depth == 0 && strncmp(f->sqlstate, "08", 2) == 0 && (!pg->conn || PQstatus(pg->conn) == CONNECTION_BAD))
        r = run(pg, sql, n, vals, f);
    return r;
}

/* db.query, db.read_query, db.read_result and db.exec share everything but the connection
 * and the shape of the answer. */
static int db_run(lua_State *L, run_kind kind) {
    luaL_checkstring(L, 1);
    int n = lua_gettop(L) - 1;      /* gettop, so trailing nils count */
    if (n > MAX_PARAMS)
        return luaL_error(L, "db.%s: at most %d parameters", run_names[kind], MAX_PARAMS);
    sgw_pg *pg = upvalue_pg(L);
    if (!pg) return push_not_configured(L);

    const char *vals[MAX_PARAMS];
    char num[MAX_PARAMS][48];
    pg_failure f;
    if (collect_params(L, n, vals, num, &f)) return unsent_failure(L, pg, &f);

    res_box *box = new_res_box(L);
    box->res = is_read(kind) ? run_read(pg, lua_tostring(L, 1), n, vals, &f)
                                : run(pg, lua_tostring(L, 1), n, vals, &f);
    if (!box->res) return push_failure(L, &f);

    return push_answer(L, box, kind);
}

static int db_run_async(lua_State *L, run_kind kind);
static int db_transaction_async(lua_State *L, sgw_pgpool *p);
static sgw_pgpool *async_pool(lua_State *L);

/* Where a call goes: the pool of the coroutine's worker when it may wait
 * there, else its connection, blocking. */
static int db_dispatch(lua_State *L, run_kind kind) {
    if (async_pool(L)) return db_run_async(L, kind);
    return db_run(L, kind);
}

/* A call's continuation once it migrated: the kind is its context. */
static int db_dispatch_k(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    return db_dispatch(L, (run_kind)ctx);
}

/* db.query, db.read_query, db.read_result and db.exec: on a socket thread
 * the call first migrates (as SGW_MIGRATE_IF_SOCKET does), then runs on the
 * worker's own thread. */
static int db_call(lua_State *L, run_kind kind) {
    if (sgw_socket_co && sgw_migrate_if_socket(L)) return lua_yieldk(L, 0, (lua_KContext)kind, db_dispatch_k);
    return db_dispatch(L, kind);
}

static int db_query(lua_State *L) { return db_call(L, RUN_QUERY); }
static int db_read_query(lua_State *L) { return db_call(L, RUN_READ); }
static int db_read_result(lua_State *L) { return db_call(L, RUN_READ_RESULT); }
static int db_exec(lua_State *L) { return db_call(L, RUN_EXEC); }

/* ------------------------------------------------------------ Lua: a result
 *
 * What db.read_result gives: the PGresult itself, read where it lies, for
 * pages written as JSON without a Lua value per cell. `#res` is its row
 * count, res:get(row, column) one value (as db.query gives it),
 * res:json(view, first, last) rows as JSON (json_push_rows); res:close()
 * (or a <close> variable) frees it at once rather than with the garbage. */
static PGresult *open_result(lua_State *L) {
    res_box *b = luaL_checkudata(L, 1, RESULT_MT);
    if (!b->res) luaL_error(L, "the result is closed");
    return b->res;
}

static int res_len(lua_State *L) {
    lua_pushinteger(L, PQntuples(open_result(L)));
    return 1;
}

/* A row number at arg (1-based) as an index into r. */
static int row_arg(lua_State *L, PGresult *r, int arg) {
    lua_Integer row = luaL_checkinteger(L, arg);
    luaL_argcheck(L, row >= 1 && row <= PQntuples(r), arg, "no such row");
    return (int)row - 1;
}

static int column_named(const PGresult *r, const char *name) {
    for (int c = 0, n = PQnfields(r); c < n; c++)
        if (strcmp(PQfname(r, c), name) == 0) return c;
    return -1;
}

static int res_get(lua_State *L) {
    PGresult *r = open_result(L);
    int row = row_arg(L, r, 2);
    int c = column_named(r, luaL_checkstring(L, 3));
    luaL_argcheck(L, c >= 0, 3, "no such column");
    if (PQgetisnull(r, row, c)) return 0;
    lua_settop(L, 3);
    push_value(L, PQftype(r, c), PQgetvalue(r, row, c), PQgetlength(r, row, c));
    return 1;
}

typedef struct { lua_State *L; PGresult *r; } json_source;

static int json_column(void *ctx, const char *name, json_cell_kind *kind) {
    json_source *src = ctx;
    int c = column_named(src->r, name);
    if (c < 0) return -1;
    switch (PQftype(src->r, c)) {
    case OID_INT2: case OID_INT4: case OID_INT8: case OID_OID: *kind = JSON_CELL_INTEGER; break;
    case OID_FLOAT4: case OID_FLOAT8: case OID_NUMERIC: *kind = JSON_CELL_FLOAT; break;
    case OID_BOOL: *kind = JSON_CELL_BOOLEAN; break;
    case OID_JSON: case OID_JSONB:
        luaL_error(src->L, "res:json: the column %s is JSON, which a row view does not write", name);
        break;
    default: *kind = JSON_CELL_STRING;
    }
    return c;
}

static const char *json_cell(void *ctx, int row, int column, size_t *len) {
    json_source *src = ctx;
    if (PQgetisnull(src->r, row, column)) return NULL;
    *len = (size_t)PQgetlength(src->r, row, column);
    return PQgetvalue(src->r, row, column);
}

/* res:json(view, first?, last?): rows first..last (default all), 1-based. */
static int res_json(lua_State *L) {
    PGresult *r = open_result(L);
    int n = PQntuples(r);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer first = luaL_optinteger(L, 3, 1), last = luaL_optinteger(L, 4, n);
    luaL_argcheck(L, first >= 1 && first <= (lua_Integer)n + 1, 3, "no such row");
    luaL_argcheck(L, last >= first - 1 && last <= n, 4, "no such row");
    json_source src = { L, r };
    json_rows rows = { &src, json_column, json_cell };
    json_push_rows(L, 2, &rows, (int)first - 1, (int)last - 1);
    return 1;
}

static int db_in_transaction(lua_State *L) {
    lua_pushboolean(L, pg_in_transaction(upvalue_pg(L)));
    return 1;
}

/* ------------------------------------------------------------ Lua: db, waiting in a job
 *
 * The same calls for the job coroutine being resumed: each statement is
 * sent on a pool connection and the coroutine yields until pgpool_drive
 * has its answer (see pgpool.c). The context of a continuation packs the
 * call's kind, its attempt (a read, or a statement whose session refused
 * its prepared name, is tried once more on a new session) and its
 * parameter count. */
#define ACTX(kind, attempt, replica, n) \
    ((lua_KContext)(kind) | ((lua_KContext)(attempt) << 2) | ((lua_KContext)(replica) << 3) | ((lua_KContext)(n) << 4))
#define ACTX_KIND(c)    ((run_kind)((c) & 3))
#define ACTX_ATTEMPT(c) ((int)(((c) >> 2) & 1))
#define ACTX_REPLICA    ((lua_KContext)1 << 3)
#define ACTX_N(c)       ((int)((c) >> 4))

/* The pool a call's context names: the replica's for a lag-tolerant read
 * sent there, else the primary's. */
static sgw_pgpool *ctx_pool(lua_State *L, lua_KContext ctx) {
    sgw_worker *w = lua_touserdata(L, UV_WORKER);
    if (!w) return NULL;
    return (ctx & ACTX_REPLICA) ? w->replica_pool : w->pgpool;
}

static void pool_wait_failure(pg_failure *f) {
    char ms[32];
    snprintf(ms, sizeof ms, "%lld", config_int("database.pool_wait_ms"));
    set_failure(f, "53300", "database unavailable: no connection of the job worker's pool was free "
                "within %s ms (database.pool_size, database.pool_wait_ms)", ms);
}

/* Takes a connection for L: its own, or one from the pool. NULL when L
 * must yield and ask again (*expired 0), or waited too long (*expired 1). */
static sgw_pg *async_conn(sgw_pgpool *p, lua_State *L, int *expired) {
    int state;
    sgw_pg *pg = pgpool_acquire(p, L, &state);
    *expired = 0;
    if (!pg && state == PGPOOL_EXPIRED) *expired = 1;
    return pg;
}

/* Before a statement on pg: 0 connected (go on), 1 a connection was
 * started (yield; the pool resumes the coroutine when it is up, and the
 * caller runs again), -1 it cannot be had (f). */
static int connect_first(sgw_pgpool *p, sgw_pg *pg, pg_failure *f) {
    if (pg->async) {
        pg->async = pg->async_done = 0;          /* resumed: the attempt has ended */
        return 0;                                /* send_async says if it failed */
    }
    int c = connect_async(pg, f);
    if (c > 0) pgpool_sent(p, pg);
    return c;
}

static int yield_on(lua_State *L, sgw_pgpool *p, lua_KContext ctx, lua_KFunction k) {
    lua_pushlightuserdata(L, p);
    return lua_yieldk(L, 1, ctx, k);
}

static int db_async_send(lua_State *L, int status, lua_KContext ctx);
/* A failure that says the session does not hold the statements we think it
 * does. Missing or already there: a pooler that does not track prepared
 * statements hands our transactions to other sessions, so names go off for
 * the process. A stale plan (a table's columns changed under a prepared
 * statement) needs only a new session. */
static int name_lost(const pg_failure *f) {
    if (strcmp(f->sqlstate, "26000") == 0 || strcmp(f->sqlstate, "42P05") == 0) {
        if (!atomic_exchange(&names_refused, 1))
            log_msg(LOG_WARN, "db_prepared_statements_off",
                    "the database session did not hold a prepared statement (%s): statements go "
                    "unnamed from now on. Behind PgBouncer before 1.21, or with its "
                    "max_prepared_statements = 0, set database.prepared_statements = false", f->message);
        return 1;
    }
    return strcmp(f->sqlstate, "0A000") == 0 && strstr(f->message, "cached plan must not change result type");
}

static int db_async_answer(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    sgw_pgpool *p = ctx_pool(L, ctx);
    sgw_pg *pg = p ? pgpool_using(p, L) : NULL;
    pg_failure f;
    if (!pg || !pg->async || !pg->async_done) {
        /* Resumed by someone other than the pool: the call is over. */
        if (pg && !pgpool_held(p, L)) {
            pg_drop(pg);
            pgpool_release(p, pg);
        }
        set_failure(&f, "57014", "%s", "the statement was interrupted: the job was resumed before its answer came");
        return push_failure(L, &f);
    }
    int held = pgpool_held(p, L) != NULL;
    int named = pg->async_named;
    PGTransactionStatusType before = pg->async_before;
    res_box *box = new_res_box(L);
    box->res = async_take(pg, &f);
    ExecStatusType st = box->res ? PQresultStatus(box->res) : PGRES_FATAL_ERROR;
    if (box->res && !result_ok(box->res)) {
        if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
            pg_drop(pg);
            set_failure(&f, "0A000", "%s", "COPY is not supported through db.query/db.exec");
        } else {
            failure_from_result(&f, box->res, pg);
        }
        PQclear(box->res);
        box->res = NULL;
    }
    /* The session lost a name (or has a stale plan for it): a new session
     * knows none, and the statement may be tried again on it (below). */
    int lost = !box->res && named && name_lost(&f);
    if (lost) pg_drop(pg);
    /* A transaction begun by hand (db.exec('BEGIN')) on a connection going
     * back to the pool would take in the next coroutines' statements:
     * dropped (the server rolls it back), and the caller told. */
    int left_open = !held && pg->conn && PQtransactionStatus(pg->conn) != PQTRANS_IDLE;
    if (left_open) pg_drop(pg);
    if (!held) pgpool_release(p, pg);
    if (left_open)
        return luaL_error(L, "db.%s: the statement left a transaction open, which was rolled back; "
                          "use db.transaction", run_names[ACTX_KIND(ctx)]);
    if (!box->res && (ctx & ACTX_REPLICA) && replica_only_failure(f.sqlstate)) {
        /* The replica failed where the primary would not: the primary. */
        replica_failed(f.message);
        lua_pop(L, 1);
        return db_async_send(L, 0, ctx & ~ACTX_REPLICA);
    }
    if (!box->res) {
        /* Again on a new session only when the statement surely did not
         * run (the session refused its name) or only read (drop_if_closed). */
        int broken = !pg->conn || PQstatus(pg->conn) == CONNECTION_BAD;
        int again = lost || (broken && is_read(ACTX_KIND(ctx)));
        if (again && ACTX_ATTEMPT(ctx) == 0 && before == PQTRANS_IDLE && !held && pg->tx_depth == 0) {
            lua_pop(L, 1);
            log_msg(LOG_INFO, "db_retry", lost ? "the session lost a prepared statement; trying once on a new one"
                                               : "the database connection broke; reconnecting once");
            return db_async_send(L, 0, ctx | ((lua_KContext)1 << 2));
        }
        return push_failure(L, &f);
    }
    if (is_read(ACTX_KIND(ctx)))
        metrics_count("sgw_db_reads_total", (ctx & ACTX_REPLICA) ? "target=\"replica\"" : "target=\"primary\"", 1);
    return push_answer(L, box, ACTX_KIND(ctx));
}

/* Sends the statement at 1 with the parameters 2..n+1; yields for the
 * answer. Strings made for the parameters are copied by libpq at the send. */
static int db_async_send(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    sgw_pgpool *p = ctx_pool(L, ctx);
    pg_failure f;
    int expired;
    sgw_pg *pg = async_conn(p, L, &expired);
    if (!pg) {
        if (!expired) return yield_on(L, p, ctx, db_async_send);
        pool_wait_failure(&f);
        return push_failure(L, &f);
    }
    int c = connect_first(p, pg, &f);
    if (c < 0) {
        if (!pgpool_held(p, L)) pgpool_release(p, pg);
        return push_failure(L, &f);
    }
    if (c > 0) return yield_on(L, p, ctx, db_async_send);
    int n = ACTX_N(ctx), top = lua_gettop(L);
    const char *vals[MAX_PARAMS];
    char num[MAX_PARAMS][48];
    int rc = collect_params(L, n, vals, num, &f);
    if (rc == 0) rc = send_async(pg, lua_tostring(L, 1), n, vals, 0, &f);
    lua_settop(L, top);
    if (rc) {
        if (!pgpool_held(p, L)) pgpool_release(p, pg);
        return unsent_failure(L, pg, &f);
    }
    pgpool_sent(p, pg);
    return yield_on(L, p, ctx, db_async_answer);
}

/* db.batch: the statements of the tables at 1..nstmt, sent together and
 * answered together (docs/host-api.md). The parameters of statement k are
 * pushed above the tables and turned into st[k]; the caller keeps the stack
 * as it is until the statements are sent. Returns 0 or -1 with f. */
typedef struct batch_params {
    const char *vals[BATCH_MAX][MAX_PARAMS];
    char        num[BATCH_MAX][MAX_PARAMS][48];
    out_stmt    st[BATCH_MAX];
} batch_params;

/* The parameter count of the statement table at idx: its field n when
 * given (for NULLs written as nil), else its length less the SQL. */
static int batch_nparams(lua_State *L, int idx) {
    int isnum;
    lua_Integer n = (lua_getfield(L, idx, "n"), lua_tointegerx(L, -1, &isnum));
    lua_pop(L, 1);
    return isnum ? (int)n : (int)lua_rawlen(L, idx) - 1;
}

static int batch_collect(lua_State *L, int nstmt, batch_params *b, pg_failure *f) {
    for (int k = 0; k < nstmt; k++) {
        int np = batch_nparams(L, k + 1);
        luaL_checkstack(L, np + 8, "too many parameters");
        lua_geti(L, k + 1, 1);
        int base = lua_gettop(L) + 1;
        for (int i = 0; i < np; i++) lua_geti(L, k + 1, i + 2);
        if (collect_params_at(L, base, np, b->vals[k], b->num[k], f)) return -1;
        b->st[k] = (out_stmt){ lua_tostring(L, base - 1), np, b->vals[k] };
    }
    return 0;
}

/* The statements must sit in the caller's transaction: outside one, a
 * pipeline would be one implicit transaction here and separate ones on the
 * blocking path. */
static int batch_count(lua_State *L) {
    int n = lua_gettop(L);
    if (n < 1 || n > BATCH_MAX) return luaL_error(L, "db.batch: 1 to %d statements, each {sql, parameters...}", BATCH_MAX);
    for (int k = 1; k <= n; k++) {
        luaL_checktype(L, k, LUA_TTABLE);
        if (lua_geti(L, k, 1) != LUA_TSTRING) luaL_argerror(L, k, "a statement is {sql, parameters...}");
        lua_pop(L, 1);
        int np = batch_nparams(L, k);
        if (np < 0 || np > MAX_PARAMS)
            luaL_argerror(L, k, lua_pushfstring(L, "0 to %d parameters", MAX_PARAMS));
    }
    return n;
}

static int db_batch_answer(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    int nstmt = (int)ctx;
    sgw_pgpool *p = ctx_pool(L, 0);
    sgw_pg *pg = p ? pgpool_using(p, L) : NULL;
    pg_failure f;
    if (!pg || !pg->async || !pg->async_done) {
        set_failure(&f, "57014", "%s", "the statements were interrupted: the coroutine was resumed before their answer came");
        return push_failure(L, &f);
    }
    lua_settop(L, nstmt);
    /* Each result in a box first: a memory error while rows are built frees it. */
    res_box *box[BATCH_MAX];
    for (int k = 0; k < nstmt; k++) box[k] = new_res_box(L);
    PGresult *r[BATCH_MAX];
    if (async_take_all(pg, r, &f)) return push_failure(L, &f);
    for (int k = 0; k < nstmt; k++) box[k]->res = r[k];
    /* The first that failed says why; those after it were skipped. */
    for (int k = 0; k < nstmt; k++) {
        if (result_ok(r[k])) continue;
        failure_from_result(&f, r[k], pg);
        return push_failure(L, &f);
    }
    lua_createtable(L, nstmt, 0);
    for (int k = 0; k < nstmt; k++) {
        push_answer(L, box[k], 1);
        lua_rawseti(L, -2, k + 1);
    }
    return 1;
}

static int db_batch_send(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    int nstmt = (int)ctx;
    sgw_pgpool *p = ctx_pool(L, 0);
    pg_failure f;
    int expired;
    sgw_pg *pg = async_conn(p, L, &expired);     /* the transaction's own */
    if (!pg) {
        if (!expired) return yield_on(L, p, ctx, db_batch_send);
        pool_wait_failure(&f);
        return push_failure(L, &f);
    }
    int c = connect_first(p, pg, &f);
    if (c < 0) return push_failure(L, &f);
    if (c > 0) return yield_on(L, p, ctx, db_batch_send);
    /* A userdata, so that an error raised while parameters are made frees it. */
    batch_params *b = lua_newuserdatauv(L, sizeof *b, 0);
    int rc = batch_collect(L, nstmt, b, &f);
    if (rc == 0) rc = send_batch(pg, b->st, nstmt, 0, &f);
    lua_settop(L, nstmt);
    if (rc) return unsent_failure(L, pg, &f);
    pgpool_sent(p, pg);
    return yield_on(L, p, ctx, db_batch_answer);
}

/* Blocking (a connection of the worker's own, or a nested coroutine): one
 * statement after the other, in the same transaction. */
static int db_batch_run(lua_State *L, int nstmt) {
    sgw_pg *pg = upvalue_pg(L);
    if (!pg) return push_not_configured(L);
    batch_params *b = lua_newuserdatauv(L, sizeof *b, 0);   /* freed by the collector, whatever is raised */
    pg_failure f;
    if (batch_collect(L, nstmt, b, &f)) return unsent_failure(L, pg, &f);
    lua_createtable(L, nstmt, 0);
    for (int k = 0; k < nstmt; k++) {
        res_box *box = new_res_box(L);
        box->res = run(pg, b->st[k].sql, b->st[k].n, b->st[k].vals, &f);
        if (!box->res) return push_failure(L, &f);
        push_answer(L, box, 1);
        lua_rawseti(L, -3, k + 1);
        lua_pop(L, 1);                           /* the box */
    }
    return 1;
}

static int db_batch_dispatch(lua_State *L) {
    int nstmt = batch_count(L);
    sgw_pgpool *p = async_pool(L);
    if (p ? !pgpool_held(p, L) : !pg_in_transaction(upvalue_pg(L)))
        return luaL_error(L, "db.batch runs inside db.transaction");
    return p ? db_batch_send(L, 0, nstmt) : db_batch_run(L, nstmt);
}

static int db_batch_k(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    (void)ctx;
    return db_batch_dispatch(L);
}

static int db_batch(lua_State *L) {
    SGW_MIGRATE_IF_SOCKET(L, db_batch_k);
    return db_batch_dispatch(L);
}

static int db_run_async(lua_State *L, run_kind kind) {
    luaL_checkstring(L, 1);
    int n = lua_gettop(L) - 1;
    if (n > MAX_PARAMS)
        return luaL_error(L, "db.%s: at most %d parameters", run_names[kind], MAX_PARAMS);
    /* A lag-tolerant read outside a transaction goes to the replica's pool
     * while the replica may serve. */
    sgw_worker *w = lua_touserdata(L, UV_WORKER);
    int replica = is_read(kind) && w->replica_pool && replica_usable() && !pgpool_held(w->pgpool, L);
    return db_async_send(L, 0, ACTX(kind, 0, replica, n));
}

/* One level deeper in db.transaction; the outermost starts with no cause. */
static void tx_enter(sgw_pg *pg) {
    if (pg->tx_depth == 0) pg->tx_cause[0] = 0;
    pg->tx_depth++;
}

/* A transaction fn went on with after one of its statements failed: rolled
 * back, said as 25P02, or, when the database gave that statement up for
 * the moment (busy) or was lost, as that, so that the dispatcher answers 503
 * with Retry-After as it would had fn raised the statement's error. */
static void aborted_failure(const sgw_pg *pg, pg_failure *f) {
    const char *cause = pg->tx_cause;
    int passing = busy_state(cause) || unavailable_state(cause);
    set_failure(f, passing ? cause : "25P02", "%s", "transaction rolled back: a statement in it failed");
}

/* db.transaction in a job: BEGIN (or SAVEPOINT) on a connection the
 * coroutine then holds, fn under lua_pcallk (so that fn's statements may
 * yield too), then COMMIT (RELEASE), or ROLLBACK after an error. The state
 * lives in a userdata at stack index 1, under fn and its arguments. */
typedef struct tx_state {
    int  nested;
    int  nargs;
    int  aborted;                /* fn went on after a statement failed */
    char savepoint[32];
} tx_state;

static sgw_pgpool *tx_pool(lua_State *L) { return ((sgw_worker *)lua_touserdata(L, UV_WORKER))->pgpool; }

/* Where each continuation of db.transaction starts: its state, the pool,
 * and the connection the coroutine holds (NULL before the outermost BEGIN
 * took one, or if it was lost). */
typedef struct tx_step {
    tx_state   *t;
    sgw_pgpool *p;
    sgw_pg     *pg;
} tx_step;

static tx_step tx_resumed(lua_State *L) {
    tx_step s = { lua_touserdata(L, 1), tx_pool(L), NULL };
    s.pg = pgpool_held(s.p, L);
    return s;
}

/* Gives back the outermost transaction's connection; one not back to idle
 * is dropped first, never handed on. */
static void tx_async_release(sgw_pgpool *p, sgw_pg *pg) {
    if (pg->conn && PQstatus(pg->conn) == CONNECTION_OK && PQtransactionStatus(pg->conn) != PQTRANS_IDLE)
        pg_drop(pg);
    pgpool_release(p, pg);
}

/* After the transaction (or savepoint) ended: the connection goes back
 * when the outermost one ends. */
static void tx_async_leave(const tx_step *s) {
    if (s->pg->tx_depth > 0) s->pg->tx_depth--;
    if (!s->t->nested) s->pg->begin_pending = s->pg->begin_failed = 0;
    if (!s->t->nested) tx_async_release(s->p, s->pg);
}

static int tx_async_undone(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    (void)ctx;
    tx_step s = tx_resumed(L);
    if (!s.pg) return lua_error(L);
    if (s.pg->async) {
        pg_failure ignored;
        PQclear(async_take(s.pg, &ignored));
    }
    tx_async_leave(&s);
    if (s.t->aborted) {
        pg_failure f;
        aborted_failure(s.pg, &f);
        return raise_failure(L, &f);
    }
    return lua_error(L);         /* fn's error object, unchanged */
}

/* Sends the ROLLBACK (TO SAVEPOINT) and yields; with the connection gone
 * there is nothing to send: the server has rolled back. */
static int tx_async_undo(lua_State *L, const tx_step *s) {
    if (!s->t->nested && s->pg->begin_pending) return tx_async_undone(L, 0, 0);    /* nothing began */
    if (s->pg->conn && PQstatus(s->pg->conn) == CONNECTION_OK) {
        char sql[128];
        if (s->t->nested)
            snprintf(sql, sizeof sql, "ROLLBACK TO SAVEPOINT %s; RELEASE SAVEPOINT %s", s->t->savepoint,
                     s->t->savepoint);
        else
            snprintf(sql, sizeof sql, "ROLLBACK");
        pg_failure ignored;
        if (send_async(s->pg, sql, 0, NULL, 1, &ignored) == 0) {
            pgpool_sent(s->p, s->pg);
            return yield_on(L, s->p, 0, tx_async_undone);
        }
    }
    return tx_async_undone(L, 0, 0);
}

static int tx_async_ended(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    (void)ctx;
    tx_step s = tx_resumed(L);
    pg_failure f;
    if (!s.pg || !s.pg->async) {
        set_failure(&f, "57014", "%s", "the transaction's end was interrupted");
        if (s.pg) tx_async_leave(&s);
        return raise_failure(L, &f);
    }
    PGresult *r = async_take(s.pg, &f);
    int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
    if (r && !ok) failure_from_result(&f, r, s.pg);
    if (ok && !s.t->nested && strcmp(PQcmdStatus(r), "COMMIT") != 0) {
        ok = 0;
        set_failure(&f, "40000", "%s", "transaction rolled back by the server at COMMIT");
    }
    PQclear(r);
    tx_async_leave(&s);
    if (!ok) return raise_failure(L, &f);
    lua_remove(L, 1);
    return lua_gettop(L);
}

static int tx_async_body(lua_State *L, int status, lua_KContext ctx) {
    (void)ctx;
    tx_step s = tx_resumed(L);
    if (!s.pg) {
        /* Lost while fn ran (cannot happen: only forget takes it). */
        pg_failure f;
        set_failure(&f, "08006", "%s", "the transaction's connection was lost");
        return raise_failure(L, &f);
    }
    if (status != LUA_OK && status != LUA_YIELD) return tx_async_undo(L, &s);
    if (s.pg->begin_failed ||
        (s.pg->conn && PQstatus(s.pg->conn) == CONNECTION_OK && PQtransactionStatus(s.pg->conn) == PQTRANS_INERROR)) {
        s.t->aborted = 1;
        return tx_async_undo(L, &s);
    }
    if (!s.t->nested && s.pg->begin_pending) {
        /* fn sent nothing: there is nothing to commit. */
        tx_async_leave(&s);
        lua_remove(L, 1);
        return lua_gettop(L);
    }
    char sql[96];
    if (s.t->nested) snprintf(sql, sizeof sql, "RELEASE SAVEPOINT %s", s.t->savepoint);
    else snprintf(sql, sizeof sql, "COMMIT");
    pg_failure f;
    if (send_async(s.pg, sql, 0, NULL, 1, &f)) {
        tx_async_leave(&s);
        return raise_failure(L, &f);
    }
    pgpool_sent(s.p, s.pg);
    return yield_on(L, s.p, 0, tx_async_ended);
}

/* The savepoint's answer; then fn runs inside it. */
static int tx_async_begun(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    (void)ctx;
    tx_step s = tx_resumed(L);
    pg_failure f;
    /* async_take clears pg->async: a broken SAVEPOINT must keep its own failure. */
    int answered = s.pg && s.pg->async;
    PGresult *r = answered ? async_take(s.pg, &f) : NULL;
    if (!answered) set_failure(&f, "57014", "%s", "the transaction's start was interrupted");
    int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
    if (r && !ok) failure_from_result(&f, r, s.pg);
    PQclear(r);
    if (!ok) return raise_failure(L, &f);
    tx_enter(s.pg);
    int st = lua_pcallk(L, s.t->nargs, LUA_MULTRET, 0, 0, tx_async_body);
    return tx_async_body(L, st, 0);
}

static int tx_async_begin(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    (void)ctx;
    tx_step s = tx_resumed(L);
    pg_failure f;
    if (!s.t->nested) {
        int expired;
        s.pg = async_conn(s.p, L, &expired);
        if (!s.pg) {
            if (!expired) return yield_on(L, s.p, 0, tx_async_begin);
            pool_wait_failure(&f);
            return raise_failure(L, &f);
        }
        pgpool_hold(s.p, s.pg, 1);
        int c = connect_first(s.p, s.pg, &f);
        if (c < 0) {
            pgpool_release(s.p, s.pg);
            return raise_failure(L, &f);
        }
        if (c > 0) return yield_on(L, s.p, 0, tx_async_begin);
        if (!s.pg->conn || PQstatus(s.pg->conn) != CONNECTION_OK) {
            /* The connection attempt failed: say why now, not at fn's first statement. */
            set_failure(&f, "08001", "database unavailable: %s", s.pg->last_error[0] ? s.pg->last_error : "no connection");
            pgpool_release(s.p, s.pg);
            return raise_failure(L, &f);
        }
        /* BEGIN waits for fn's first statement and goes in its pipeline
         * (send_async): a round trip less for every transaction. */
        s.pg->begin_pending = 1;
        tx_enter(s.pg);
        int st = lua_pcallk(L, s.t->nargs, LUA_MULTRET, 0, 0, tx_async_body);
        return tx_async_body(L, st, 0);
    }
    char sql[64];
    snprintf(s.t->savepoint, sizeof s.t->savepoint, "sgw_tx_%d", s.pg->tx_depth + 1);
    snprintf(sql, sizeof sql, "SAVEPOINT %s", s.t->savepoint);
    /* A savepoint before the outer transaction sent anything takes its
     * BEGIN along like a statement (extended protocol, in the pipeline). */
    if (send_async(s.pg, sql, 0, NULL, !s.pg->begin_pending, &f)) return raise_failure(L, &f);
    pgpool_sent(s.p, s.pg);
    return yield_on(L, s.p, 0, tx_async_begun);
}

static int db_transaction_async(lua_State *L, sgw_pgpool *p) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    int nargs = lua_gettop(L) - 1;
    tx_state *t = lua_newuserdatauv(L, sizeof *t, 0);
    memset(t, 0, sizeof *t);
    t->nargs = nargs;
    t->nested = pgpool_held(p, L) != NULL;
    lua_insert(L, 1);
    return tx_async_begin(L, 0, 0);
}

/* Rolls back the transaction or savepoint db.transaction opened (nothing to
 * do when the server already ended it with the connection). */
static void tx_finish_error(sgw_pg *pg, int nested, const char *savepoint) {
    pg_failure ignored;
    if (!pg->conn || PQstatus(pg->conn) != CONNECTION_OK) return;   /* server rolled back */
    if (nested) {
        char sql[96];
        snprintf(sql, sizeof sql, "ROLLBACK TO SAVEPOINT %s", savepoint);
        if (run_cmd(pg, sql, &ignored) == 0) {
            snprintf(sql, sizeof sql, "RELEASE SAVEPOINT %s", savepoint);
            run_cmd(pg, sql, &ignored);
        }
    } else {
        run_cmd(pg, "ROLLBACK", &ignored);
    }
}

/* Ends the transaction or savepoint db.transaction opened after fn returned
 * normally. 0 ok; -1 with f filled in, and then nothing of fn was kept. */
static int tx_finish_ok(sgw_pg *pg, int nested, const char *savepoint, pg_failure *f) {
    char sql[96];
    int aborted = pg->conn && PQstatus(pg->conn) == CONNECTION_OK &&
                  PQtransactionStatus(pg->conn) == PQTRANS_INERROR;
    if (aborted) {
        /* A statement failed and fn went on: COMMIT would quietly roll back,
         * so say so instead of answering like a success. */
        tx_finish_error(pg, nested, savepoint);
        aborted_failure(pg, f);
        return -1;
    }
    if (nested) {
        snprintf(sql, sizeof sql, "RELEASE SAVEPOINT %s", savepoint);
        return run_cmd(pg, sql, f);
    }
    PGresult *r = run(pg, "COMMIT", 0, NULL, f);
    if (!r) {
        pg_failure ignored;
        if (pg->conn && PQstatus(pg->conn) == CONNECTION_OK &&
            PQtransactionStatus(pg->conn) != PQTRANS_IDLE)
            run_cmd(pg, "ROLLBACK", &ignored);
        return -1;
    }
    int rolled_back = strcmp(PQcmdStatus(r), "COMMIT") != 0;
    PQclear(r);
    if (rolled_back) {
        set_failure(f, "40000", "%s", "transaction rolled back by the server at COMMIT");
        return -1;
    }
    return 0;
}


/* A transaction that could not begin or end raises instead of returning
 * nil, err: a caller that forgot to check would take it for success. */
static int raise_failure(lua_State *L, const pg_failure *f) {
    push_message(L, f);
    return lua_error(L);
}

/* db.transaction(fn, ...). A nested call runs in a savepoint, so an error
 * caught by the outer fn undoes exactly the inner part.
 *
 * Here fn runs under lua_pcall, not lua_pcallk: a yield inside fn fails with
 * "attempt to yield across a C-call boundary" and rolls back. A request
 * migrates off its socket thread before BEGIN (see db_transaction), so fn
 * never needs to yield to wait there; a job's coroutine takes the waiting
 * path (db_transaction_async), where fn may yield. */
static int transaction_run(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    sgw_pg *pg = upvalue_pg(L);
    if (!pg) return push_not_configured(L);

    pg_failure f;
    int nested = pg_in_transaction(pg);
    char savepoint[32] = "";
    if (nested) {
        char sql[64];
        snprintf(savepoint, sizeof savepoint, "sgw_tx_%d", pg->tx_depth + 1);
        snprintf(sql, sizeof sql, "SAVEPOINT %s", savepoint);
        if (run_cmd(pg, sql, &f)) return raise_failure(L, &f);
    } else {
        if (run_cmd(pg, "BEGIN", &f)) return raise_failure(L, &f);
    }
    tx_enter(pg);

    int status = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    if (status != LUA_OK) {
        tx_finish_error(pg, nested, savepoint);
        pg->tx_depth--;
        return lua_error(L);        /* the error object, unchanged */
    }
    int rc = tx_finish_ok(pg, nested, savepoint, &f);
    pg->tx_depth--;
    if (rc) return raise_failure(L, &f);
    return lua_gettop(L);            /* fn was at 1: its results fill the stack */
}

static int db_transaction_k(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    (void)ctx;
    sgw_pgpool *p = async_pool(L);
    if (p) return db_transaction_async(L, p);
    return transaction_run(L);
}

static int db_transaction(lua_State *L) {
    SGW_MIGRATE_IF_SOCKET(L, db_transaction_k);
    sgw_pgpool *p = async_pool(L);
    if (p) return db_transaction_async(L, p);
    return transaction_run(L);
}

void lapi_db_open(lua_State *L, sgw_worker *w) {
    static const luaL_Reg funcs[] = {
        { "query", db_query },
        { "read_query", db_read_query },
        { "read_result", db_read_result },
        { "exec", db_exec },
        { "batch", db_batch },
        { "transaction", db_transaction },
        { "in_transaction", db_in_transaction },
        { NULL, NULL }
    };
    static const luaL_Reg result_methods[] = {
        { "get", res_get },
        { "json", res_json },
        { "close", res_box_gc },
        { NULL, NULL }
    };
    /* The upvalues of db's functions and of a result's methods (UV_*): JSON
     * parameters and json/jsonb columns go through lua-cjson, which the
     * host links in. */
    lua_pushlightuserdata(L, w);
    luaL_requiref(L, "cjson", luaopen_cjson, 0);
    lua_getfield(L, -1, "encode");
    lua_getfield(L, -2, "decode");
    lua_remove(L, -3);
    int upvalues = lua_gettop(L) - 2;

    luaL_newmetatable(L, RESULT_MT);
    lua_pushcfunction(L, res_box_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, res_box_gc);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, res_len);
    lua_setfield(L, -2, "__len");
    lua_createtable(L, 0, 3);
    for (int i = 0; i < 3; i++) lua_pushvalue(L, upvalues + i);
    luaL_setfuncs(L, result_methods, 3);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);

    lua_createtable(L, 0, 7);
    lua_insert(L, upvalues);
    luaL_setfuncs(L, funcs, 3);
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "null");
    lua_setglobal(L, "db");
}

/* ------------------------------------------------------------ migrate */

typedef struct migration {
    char *name;                  /* 0001_jobs.sql */
    char *version;               /* 0001: the number as written */
} migration;

typedef struct migration_list {
    migration *v;
    int        n, cap;
} migration_list;

static void migrations_free(migration_list *l) {
    for (int i = 0; i < l->n; i++) {
        free(l->v[i].name);
        free(l->v[i].version);
    }
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* Length of the digit prefix of a NNNN_*.sql name, or 0 when it is not one. */
static size_t migration_digits(const char *name) {
    size_t d = 0, len = strlen(name);
    while (isdigit((unsigned char)name[d])) d++;
    if (d < 4 || name[d] != '_' || len < d + 1 + 4 || strcmp(name + len - 4, ".sql") != 0) return 0;
    return d;
}

/* Compares two digit strings by value, so 10000 comes after 9999. */
static int version_cmp(const char *a, const char *b) {
    while (*a == '0' && a[1]) a++;
    while (*b == '0' && b[1]) b++;
    size_t la = strlen(a), lb = strlen(b);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a, b);
}

static int migration_cmp(const void *pa, const void *pb) {
    const migration *a = pa, *b = pb;
    int c = version_cmp(a->version, b->version);
    return c ? c : strcmp(a->name, b->name);
}

static int list_migrations(const char *dir, migration_list *out) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "migrate: cannot read the migrations directory %s: %s\n", dir,
                strerror(errno));
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t digits = migration_digits(e->d_name);
        if (!digits) {
            size_t len = strlen(e->d_name);
            if (len > 4 && strcmp(e->d_name + len - 4, ".sql") == 0)
                fprintf(stderr, "migrate: ignoring %s: names must be NNNN_description.sql "
                        "(at least 4 digits)\n", e->d_name);
            continue;
        }
        if (out->n == out->cap) {
            int cap = out->cap ? out->cap * 2 : 16;
            migration *v = realloc(out->v, (size_t)cap * sizeof *v);
            if (!v) goto oom;
            out->v = v;
            out->cap = cap;
        }
        migration *m = &out->v[out->n];
        m->name = strdup(e->d_name);
        m->version = strndup(e->d_name, digits);
        if (!m->name || !m->version) {
            free(m->name);
            free(m->version);
            goto oom;
        }
        out->n++;
    }
    closedir(d);
    qsort(out->v, (size_t)out->n, sizeof *out->v, migration_cmp);
    for (int i = 1; i < out->n; i++) {
        if (version_cmp(out->v[i - 1].version, out->v[i].version) == 0) {
            fprintf(stderr, "migrate: %s and %s have the same number; renumber one of them\n",
                    out->v[i - 1].name, out->v[i].name);
            migrations_free(out);
            return -1;
        }
    }
    return 0;
oom:
    closedir(d);
    migrations_free(out);
    fprintf(stderr, "migrate: out of memory\n");
    return -1;
}

static char *read_migration(const char *dir, const char *name) {
    size_t plen = strlen(dir) + strlen(name) + 2;
    char *path = malloc(plen);
    if (!path) {
        fprintf(stderr, "migrate: out of memory\n");
        return NULL;
    }
    snprintf(path, plen, "%s/%s", dir, name);
    FILE *fp = fopen(path, "rb");
    char *buf = NULL;
    struct stat st;
    if (!fp || fstat(fileno(fp), &st)) {
        fprintf(stderr, "migrate: cannot read %s: %s\n", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "migrate: cannot read %s: not a regular file\n", path);
        goto out;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        fprintf(stderr, "migrate: out of memory reading %s\n", path);
        goto out;
    }
    size_t got = fread(buf, 1, (size_t)st.st_size, fp);
    if (got != (size_t)st.st_size || memchr(buf, 0, got)) {
        fprintf(stderr, "migrate: cannot read %s: %s\n", path,
                got != (size_t)st.st_size ? "short read" : "it contains a zero byte");
        free(buf);
        buf = NULL;
        goto out;
    }
    buf[got] = 0;
out:
    if (fp) fclose(fp);
    free(path);
    return buf;
}

/* PostgreSQL reports where a statement failed in characters from the start
 * of what it was sent: the whole file. */
static int line_of(const char *sql, long pos) {
    int line = 1;
    long chars = 0;
    for (const unsigned char *p = (const unsigned char *)sql; *p; p++) {
        if ((*p & 0xC0) != 0x80 && ++chars >= pos) break;
        if (*p == '\n') line++;
    }
    return line;
}

static void print_pg_error(const char *what, PGresult *r, PGconn *c, const char *sql) {
    const char *primary = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (!primary) {
        const char *msg = r && *PQresultErrorMessage(r) ? PQresultErrorMessage(r) : PQerrorMessage(c);
        fprintf(stderr, "migrate: %s failed: %.*s\n", what, (int)trimmed_len(msg), msg);
        return;
    }
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char *pos = PQresultErrorField(r, PG_DIAG_STATEMENT_POSITION);
    const char *detail = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL);
    const char *hint = PQresultErrorField(r, PG_DIAG_MESSAGE_HINT);
    fprintf(stderr, "migrate: %s failed: %s", what, primary);
    if (sql && pos) fprintf(stderr, " (line %d)", line_of(sql, atol(pos)));
    if (state) fprintf(stderr, " [SQLSTATE %s]", state);
    fputc('\n', stderr);
    if (detail) fprintf(stderr, "migrate:   detail: %s\n", detail);
    if (hint) fprintf(stderr, "migrate:   hint: %s\n", hint);
}

/* Runs sql expecting success; prints why not. */
static int mexec(PGconn *c, const char *sql, int nparams, const char *const *vals,
                 const char *what, PGresult **out) {
    PGresult *r = nparams ? PQexecParams(c, sql, nparams, NULL, vals, NULL, NULL, 0)
                          : PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && st != PGRES_EMPTY_QUERY) {
        print_pg_error(what, r, c, NULL);
        PQclear(r);
        return -1;
    }
    if (out) *out = r;
    else PQclear(r);
    return 0;
}

static int apply_migration(PGconn *c, const char *dir, const migration *m) {
    char *sql = read_migration(dir, m->name);
    if (!sql) return -1;
    printf("migrate: applying %s ... ", m->name);
    fflush(stdout);
    const char *vals[1] = { m->version };
    if (mexec(c, "BEGIN", 0, NULL, m->name, NULL)) goto fail;
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && st != PGRES_EMPTY_QUERY) {
        printf("failed\n");
        fflush(stdout);
        print_pg_error(m->name, r, c, sql);
        PQclear(r);
        goto rollback;
    }
    PQclear(r);
    if (PQtransactionStatus(c) != PQTRANS_INTRANS) {
        printf("failed\n");
        fflush(stdout);
        fprintf(stderr, "migrate: %s ended the transaction itself (COMMIT or ROLLBACK in the "
                "file), so it was not recorded and what it did before that was kept; remove "
                "those statements (every file already runs in its own transaction), check by "
                "hand what it left behind, and run migrate again\n", m->name);
        goto fail;
    }
    if (mexec(c, "INSERT INTO schema_migrations (version) VALUES ($1)", 1, vals, m->name, NULL) ||
        mexec(c, "COMMIT", 0, NULL, m->name, NULL)) {
        printf("failed\n");
        fflush(stdout);
        goto rollback;
    }
    printf("ok\n");
    fflush(stdout);
    free(sql);
    return 0;
rollback:
    if (PQtransactionStatus(c) != PQTRANS_IDLE) PQclear(PQexec(c, "ROLLBACK"));
    fprintf(stderr, "migrate: %s was rolled back; fix it and run migrate again\n", m->name);
fail:
    free(sql);
    return -1;
}

static int migrate_locked(PGconn *c, const char *dir, const migration_list *l) {
    char sql[128];
    PGresult *r;
    snprintf(sql, sizeof sql, "SELECT pg_try_advisory_lock(%lld)", MIGRATE_LOCK_KEY);
    if (mexec(c, sql, 0, NULL, "taking the migration lock", &r)) return -1;
    int got = PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    if (!got) {
        printf("migrate: another migrate is running; waiting for it to finish\n");
        fflush(stdout);
        snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%lld)", MIGRATE_LOCK_KEY);
        if (mexec(c, sql, 0, NULL, "taking the migration lock", NULL)) return -1;
    }

    /* Inside the lock, so what we read below is what the last holder left. */
    int rc = mexec(c, "CREATE TABLE IF NOT EXISTS schema_migrations ("
                      "version text PRIMARY KEY, applied_at timestamptz DEFAULT now())",
                   0, NULL, "creating schema_migrations", NULL);
    int applied = 0, present = 0;
    for (int i = 0; rc == 0 && i < l->n; i++) {
        const char *vals[1] = { l->v[i].version };
        if (mexec(c, "SELECT 1 FROM schema_migrations WHERE version = $1", 1, vals,
                  "reading schema_migrations", &r)) {
            rc = -1;
            break;
        }
        int done = PQntuples(r) > 0;
        PQclear(r);
        if (done) {
            present++;
        } else if (apply_migration(c, dir, &l->v[i]) == 0) {
            applied++;
        } else {
            fprintf(stderr, "migrate: stopped after %d applied; the files after %s were not "
                    "tried\n", applied, l->v[i].name);
            rc = -1;
        }
    }
    if (rc == 0) printf("migrate: %d applied, %d already present\n", applied, present);
    fflush(stdout);

    snprintf(sql, sizeof sql, "SELECT pg_advisory_unlock(%lld)", MIGRATE_LOCK_KEY);
    PQclear(PQexec(c, sql));   /* closing the connection releases it anyway */
    return rc;
}

int pg_migrate(const char *conninfo, const char *dir) {
    if (!conninfo || !*conninfo) {
        fprintf(stderr, "migrate: database.url is empty; set it in the configuration file or "
                "with --set database.url=postgresql://user@host/db\n");
        return -1;
    }
    migration_list l = { 0 };
    if (list_migrations(dir, &l)) return -1;
    if (l.n == 0) fprintf(stderr, "migrate: no NNNN_*.sql files in %s\n", dir);

    char err[1024];
    /* No statement timeout: a migration may rewrite a large table or wait for
     * the lock while another instance migrates. */
    PGconn *c = connect_session(conninfo, "SET TIME ZONE 'UTC'; SET statement_timeout = 0; "
                                "SET client_min_messages = warning", 0, err, sizeof err);
    if (!c) {
        fprintf(stderr, "migrate: cannot connect to the database: %s\n"
                "migrate: check database.url, and that PostgreSQL is running and accepts "
                "this user\n", err);
        migrations_free(&l);
        return -1;
    }
    int rc = migrate_locked(c, dir, &l);
    PQfinish(c);
    migrations_free(&l);
    return rc;
}

/* How many of dir's migrations the database has not applied (0: current),
 * asked over conninfo (the direct connection: its setup would stay behind
 * on a pooled one), or -1 when that cannot be told (no connection, unreadable directory).
 * `first` gets the name of the first missing one. A database that was never
 * migrated has no schema_migrations: every file is missing. */
int pg_pending_migrations(const char *conninfo, const char *dir, char *first, size_t cap) {
    if (first && cap) first[0] = 0;
    if (!conninfo || !*conninfo) return -1;
    migration_list l = { 0 };
    if (list_migrations(dir, &l)) return -1;
    char err[1024];
    PGconn *c = connect_session(conninfo, "SET client_min_messages = warning", 0, err, sizeof err);
    if (!c) {
        migrations_free(&l);
        return -1;
    }
    PGresult *r = PQexec(c, "SELECT version FROM schema_migrations");
    int pending = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_FATAL_ERROR) {
        /* A fatal error here is the missing table (42P01); anything else is -1. */
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        int missing_table = PQresultStatus(r) == PGRES_FATAL_ERROR && state && strcmp(state, "42P01") == 0;
        if (PQresultStatus(r) == PGRES_TUPLES_OK || missing_table) {
            pending = 0;
            for (int i = 0; i < l.n; i++) {
                int done = 0;
                for (int j = 0; !missing_table && j < PQntuples(r) && !done; j++)
                    done = strcmp(PQgetvalue(r, j, 0), l.v[i].version) == 0;
                if (!done && pending++ == 0 && first && cap) snprintf(first, cap, "%s", l.v[i].name);
            }
        }
    }
    PQclear(r);
    PQfinish(c);
    migrations_free(&l);
    return pending;
}

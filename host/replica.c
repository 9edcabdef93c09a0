/*
 * replica.c — whether the read replica (database.read_url) may serve the
 * lag-tolerant reads (db.read_query).
 *
 * One thread per process measures the replica's lag on a connection of its
 * own, every REPLICA_CHECK_MS (at most half of database.max_replica_lag_ms),
 * and publishes the answer; every worker's reads consult it without waiting
 * on anything. A read that finds the replica failing where the primary
 * would not marks it unusable at once, until a measurement says otherwise.
 * Only the changes are logged and counted, so a replica down for an hour
 * writes two lines.
 */
#include "sgw.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#define REPLICA_CHECK_MS 1000
/* How far the replica's replay is behind, in milliseconds: 0 while its WAL
 * receiver runs and it has replayed everything received; otherwise the age
 * of the last replayed transaction (an idle primary writes none, so this
 * overstates the lag then, which only sends reads to the primary). NULL
 * (never replayed anything) counts as too far behind. A server that is not
 * in recovery is a primary: never behind. */
#define REPLICA_LAG_SQL \
    "SELECT CASE WHEN NOT pg_is_in_recovery() THEN 0 " \
    "WHEN EXISTS (SELECT 1 FROM pg_stat_wal_receiver) " \
    " AND pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0 " \
    "ELSE (extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()) " \
    "      * 1000)::bigint END"

static atomic_int      usable;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  cond = PTHREAD_COND_INITIALIZER;
static int             logged = -1;    /* the state last logged: 1 used, 0 skipped */
static int             stopping;
static int             running;
static pthread_t       thread;

/* Publishes whether the replica may serve (lag_ms < 0: unknown, why says). */
static void note(int ok, long long lag_ms, const char *why) {
    atomic_store(&usable, ok);
    metrics_gauge("sgw_db_replica_usable", NULL, ok);
    if (lag_ms >= 0) metrics_gauge("sgw_db_replica_lag_ms", NULL, (double)lag_ms);
    pthread_mutex_lock(&mu);
    int changed = logged != ok, first = logged == -1;
    logged = ok;
    pthread_mutex_unlock(&mu);
    if (!changed) return;
    if (ok) {
        log_msg(LOG_INFO, "db_replica_used", "lag-tolerant reads go to the read replica (%lld ms behind)", lag_ms);
    } else if (lag_ms >= 0) {
        log_msg(LOG_WARN, "db_replica_skipped", "the read replica is %lld ms behind (more than "
                "database.max_replica_lag_ms); reads go to the primary", lag_ms);
    } else {
        log_msg(LOG_WARN, "db_replica_skipped", "the read replica cannot serve (%s); reads go "
                "to the primary", why ? why : "its lag is unknown");
    }
    if (!first || !ok)
        metrics_count("sgw_db_replica_transitions_total", ok ? "to=\"replica\"" : "to=\"primary\"", 1);
}

int replica_usable(void) {
    return atomic_load(&usable);
}

void replica_failed(const char *why) {
    if (atomic_load(&usable)) note(0, -1, why);
}

/* One measurement on c (connected here when needed); returns c. */
static PGconn *measure(PGconn *c, long long max_lag) {
    if (!c || PQstatus(c) != CONNECTION_OK) {
        if (c) PQfinish(c);
        /* Bounded like the workers' sessions (pg.c), so that a replica host
         * gone without a word stalls the measurements (and the stop that
         * waits for this thread) for about a minute, not hours. The URL
         * comes last: what it sets wins. */
        const char *keys[] = { "connect_timeout", "application_name", "keepalives", "keepalives_idle",
                               "keepalives_interval", "keepalives_count", "tcp_user_timeout", "dbname", NULL };
        const char *vals[] = { "5", "sgw-replica-check", "1", "30", "10", "3", "60000",
                               config_str("database.read_url"), NULL };
        c = PQconnectdbParams(keys, vals, 1);
        if (!c || PQstatus(c) != CONNECTION_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", c ? PQerrorMessage(c) : "out of memory");
            why[strcspn(why, "\n")] = 0;
            note(0, -1, why);
            return c;
        }
    }
    PGresult *r = PQexec(c, REPLICA_LAG_SQL);
    long long lag = -1;
    int answered = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    if (answered && !PQgetisnull(r, 0, 0)) lag = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    char why[256];
    snprintf(why, sizeof why, "%s", answered ? "it has not replayed any transaction yet" : PQerrorMessage(c));
    why[strcspn(why, "\n")] = 0;
    PQclear(r);
    note(lag >= 0 && lag <= max_lag, lag, why);
    return c;
}

static void *monitor(void *arg) {
    (void)arg;
    long long max_lag = config_int("database.max_replica_lag_ms");
    uint64_t every = max_lag / 2 < REPLICA_CHECK_MS ? (uint64_t)(max_lag > 1 ? max_lag / 2 : 1) : REPLICA_CHECK_MS;
    PGconn *c = NULL;
    pthread_mutex_lock(&mu);
    while (!stopping) {
        pthread_mutex_unlock(&mu);
        c = measure(c, max_lag);
        pthread_mutex_lock(&mu);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)(every / 1000);
        until.tv_nsec += (long)(every % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        if (!stopping) pthread_cond_timedwait(&cond, &mu, &until);
    }
    pthread_mutex_unlock(&mu);
    if (c) PQfinish(c);
    return NULL;
}

int replica_start(void) {
    if (!*config_str("database.read_url")) return 0;
    stopping = 0;
    if (pthread_create(&thread, NULL, monitor, NULL)) return -1;
    running = 1;
    return 0;
}

void replica_stop(void) {
    if (!running) return;
    pthread_mutex_lock(&mu);
    stopping = 1;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&mu);
    pthread_join(thread, NULL);
    running = 0;
}

/*
 * replica.c — whether the read replica (database.read_url) may serve the
 * lag-tolerant reads (db.read_query).
 *
 * One thread per process measures the replica's lag on a connection of its
 * own, every REPLICA_CHECK_MS (at most half of database.max_replica_lag_ms),
 * and publishes the answer; every worker's reads consult it without waiting
 * on anything. Each measurement first reads the primary's WAL position and
 * keeps it with the time it was read; the replica is then as far behind as
 * the newest of those positions it has replayed is old. That holds however
 * the replica fell behind, a WAL receiver that hears nothing included (its
 * own view says it has replayed all it received). Without the primary, the
 * replica's own view is all there is. A read that finds the replica failing where the primary
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
#define MAX_SAMPLES      4096   /* positions of the primary kept, one a measurement */
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

/* The primary's WAL positions, with when each was read (monotonic ms): a
 * ring that spans database.max_replica_lag_ms; the monitor's alone. */
typedef struct { uint64_t lsn, at_ms; } wal_sample;
static wal_sample     *samples;
static int             nsamples, cap_samples, next_sample;

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

/* A session for the checks on url, bounded like the workers' sessions (pg.c),
 * so that a host gone without a word stalls the measurements (and the stop
 * that waits for this thread) for about a minute, not hours. The URL comes
 * last: what it sets wins. NULL or a failed connection: the caller's. */
static PGconn *check_session(const char *url) {
    const char *keys[] = { "connect_timeout", "application_name", "keepalives", "keepalives_idle",
                           "keepalives_interval", "keepalives_count", "tcp_user_timeout", "dbname", NULL };
    const char *vals[] = { "5", "sgw-replica-check", "1", "30", "10", "3", "60000", url, NULL };
    return PQconnectdbParams(keys, vals, 1);
}

static int parse_lsn(const char *text, uint64_t *lsn) {
    unsigned hi, lo;
    char tail;
    if (sscanf(text, "%X/%X%c", &hi, &lo, &tail) != 2) return -1;
    *lsn = ((uint64_t)hi << 32) | lo;
    return 0;
}

/* Reads the primary's WAL position into the ring; 1 when it was read. */
static int sample_primary(PGconn **p) {
    if (!*p || PQstatus(*p) != CONNECTION_OK) {
        if (*p) PQfinish(*p);
        *p = check_session(config_str("database.url"));
        if (!*p || PQstatus(*p) != CONNECTION_OK) return 0;
    }
    PGresult *r = PQexec(*p, "SELECT pg_current_wal_lsn()");
    uint64_t lsn;
    int ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0) &&
             parse_lsn(PQgetvalue(r, 0, 0), &lsn) == 0;
    PQclear(r);
    if (!ok) return 0;
    samples[next_sample] = (wal_sample){ .lsn = lsn, .at_ms = clock_mono_ms() };
    next_sample = (next_sample + 1) % cap_samples;
    if (nsamples < cap_samples) nsamples++;
    return 1;
}

/* How long ago the newest sampled position at or before replayed was read;
 * -1 when the replica is behind even the oldest sample (how far, unknown). */
static long long behind_ms(uint64_t replayed) {
    uint64_t now = clock_mono_ms(), newest = 0;
    int found = 0;
    for (int i = 0; i < nsamples; i++) {
        if (samples[i].lsn <= replayed && (!found || samples[i].at_ms > newest)) {
            newest = samples[i].at_ms;
            found = 1;
        }
    }
    return found ? (long long)(now - newest) : -1;
}

/* One measurement on c (connected here when needed); returns c. sampled:
 * the primary's position was just read. */
static PGconn *measure(PGconn *c, long long max_lag, int sampled) {
    if (!c || PQstatus(c) != CONNECTION_OK) {
        if (c) PQfinish(c);
        c = check_session(config_str("database.read_url"));
        if (!c || PQstatus(c) != CONNECTION_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", c ? PQerrorMessage(c) : "out of memory");
            why[strcspn(why, "\n")] = 0;
            note(0, -1, why);
            return c;
        }
    }
    char why[256] = "it has not replayed any transaction yet";
    long long lag = -1;
    PGresult *r = PQexec(c, sampled ? "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()" : REPLICA_LAG_SQL);
    int answered = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    if (!answered) {
        snprintf(why, sizeof why, "%s", PQerrorMessage(c));
    } else if (!sampled) {
        if (!PQgetisnull(r, 0, 0)) lag = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    } else if (strcmp(PQgetvalue(r, 0, 0), "f") == 0) {
        lag = 0;                         /* not in recovery: a primary, never behind */
    } else if (!PQgetisnull(r, 0, 1)) {
        uint64_t replayed;
        if (parse_lsn(PQgetvalue(r, 0, 1), &replayed) == 0) lag = behind_ms(replayed);
        if (lag < 0)
            snprintf(why, sizeof why, "it has not replayed what the primary had written %d measurements ago",
                     nsamples);
    }
    why[strcspn(why, "\n")] = 0;
    PQclear(r);
    note(lag >= 0 && lag <= max_lag, lag, why);
    return c;
}

static void *monitor(void *arg) {
    (void)arg;
    long long max_lag = config_int("database.max_replica_lag_ms");
    uint64_t every = max_lag / 2 < REPLICA_CHECK_MS ? (uint64_t)(max_lag > 1 ? max_lag / 2 : 1) : REPLICA_CHECK_MS;
    /* Enough samples to tell a replica database.max_replica_lag_ms behind. */
    long long want = max_lag / (long long)every + 2;
    cap_samples = want > MAX_SAMPLES ? MAX_SAMPLES : (int)want;
    samples = calloc((size_t)cap_samples, sizeof *samples);
    nsamples = next_sample = 0;
    PGconn *c = NULL, *primary = NULL;
    pthread_mutex_lock(&mu);
    while (!stopping) {
        pthread_mutex_unlock(&mu);
        c = measure(c, max_lag, samples && sample_primary(&primary));
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
    if (primary) PQfinish(primary);
    free(samples);
    samples = NULL;
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

/*
 * jobs.c — the durable job queue runner and the timers.
 *
 * Jobs are rows of the jobs table (migrations/0001_jobs.sql). Each job
 * worker thread claims due rows with FOR UPDATE SKIP LOCKED under a lease,
 * so any number of workers and instances share the queue, and a job whose
 * instance died runs again once its lease runs out. A worker runs up to
 * jobs.concurrency jobs at once, each as a coroutine of its one Lua state:
 * a job that calls http.request yields, and httpc_poll resumes it when its
 * transfer ends, so one thread keeps many slow platform calls in flight.
 *
 * Workers switch to a new generation of handlers only when none of their
 * coroutines runs (a generation lives in one Lua state); when one is waiting
 * they stop claiming until the running jobs end. They sleep on their own
 * LISTEN sgw_jobs connection, woken by NOTIFY from enqueue, with
 * jobs.poll_interval_ms as the fallback for delayed and retried jobs.
 *
 * A job that ends done is deleted together with the others that ended
 * within BATCH_GAP_MS (flush_done): one statement for many, instead of one
 * each; claims for the slots they freed are batched the same way. Until then it is neither running nor gone; were the instance
 * to die meanwhile, its lease would run out and it would run again, as it
 * would after a crash just before its DELETE (a handler must be safe to run
 * again, and publish_target finds its target final and does nothing).
 *
 * Worker 0 also runs handlers/timers.lua: a timer fires when its slot
 * (floor(now / every)) is first inserted into timer_runs, in the same
 * transaction as its job, so across instances each slot fires once.
 */
#include "sgw.h"

#include <errno.h>
#include <libpq-fe.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* httpc.c: which coroutine the runner is resuming, so that only a job's own
 * coroutine yields on http.request. */
/* pg.c */

#define BUSY_POLL_MS     50          /* longest wait while jobs run (pool waits time out) */
/* While jobs run, the worker's own statements (deleting the jobs that ended
 * done, claiming jobs for the slots they freed) go at most this often: each
 * holds the thread for a round trip, and once a turn of the loop they made
 * two round trips for every job or two that ended. A due job may start up
 * to this much later; at 200 completions a second each claim fills ~4 slots
 * instead of one. */
#define BATCH_GAP_MS     20
#define TIMER_TICK_MS    1000
#define TIMER_CLEANUP_MS (3600u * 1000u)
#define LISTEN_RETRY_MS  2000
#define HEARTBEAT_RETRY_MS 1000  /* a lease extension that failed is tried again after this */
#define WARN_EVERY_MS    10000       /* at most one "database down" line per worker */
#define MAX_TIMERS       256
#define MAX_ERROR        4000        /* bytes of an error kept in last_error */
#define NAME_MAX_LEN     128

typedef struct job {
    int        used;
    long long  id;
    char       kind[NAME_MAX_LEN];
    int        attempts, max_attempts;
    lua_State *co;
    int        ref;                  /* anchors co in the registry */
    int        on_http;              /* parked on an outbound call (http.request) */
    uint64_t   started_ms;           /* monotonic, when it was claimed */
    uint64_t   leased_ms;            /* when the statement that last gave its lease full length was sent */
} job;

typedef struct timer {
    char      name[NAME_MAX_LEN];
    char      job[NAME_MAX_LEN];
    double    every;                 /* seconds */
    long long last_slot;             /* fired (or found fired) for this slot */
} timer;

typedef struct runner {
    int         id;
    sgw_worker  w;
    int         inited;              /* w needs worker_destroy */
    pthread_t   thread;
    int         started;
    int         efd;                 /* jobs_wake */
    PGconn     *listen;
    uint64_t    listen_retry_at;
    job        *jobs;
    int         concurrency, running;
    long long  *done;                /* jobs that ended done, not yet deleted (flush_done) */
    int         ndone;
    char        locker[160];         /* locked_by: host:pid:worker:random */
    int         notified;            /* a NOTIFY (or a wake) since the last claim */
    int         more;                /* the last claim filled every free slot */
    int         state_broken;        /* a job hit the memory ceiling */
    uint64_t    refresh_failed_gen;
    uint64_t    last_claim, last_flush, last_heartbeat, last_tick, last_cleanup, last_warn;
    uint64_t    last_renewed;        /* when the leases were last extended for sure */
    uint64_t    heartbeat_ms;        /* a third of the lease */
    uint64_t    next_due;            /* monotonic ms when the next future job is due; 0: none known */
    uint64_t    rng;
    timer      *timers;
    int         ntimers;
    uint64_t    timers_gen;          /* generation the timers were read from */
    /* settings, read once */
    double      lease_s, retry_base_s, retry_max_s, budget_ms;
    uint64_t    max_run_ms;          /* jobs.max_run_seconds; 0: no limit */
    int         poll_ms;
} runner;

static runner           *runners;
static int               nrunners;
static atomic_int        stopping;
static _Atomic uint64_t  drain_deadline;

/* ------------------------------------------------------------ helpers */

static double rand01(runner *r) {
    /* xorshift64*: jitter needs spread, not secrecy. */
    r->rng ^= r->rng >> 12;
    r->rng ^= r->rng << 25;
    r->rng ^= r->rng >> 27;
    return (double)((r->rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* Rate-limited warning for a database that does not answer. */
static void warn_db(runner *r, const char *what, const char *detail) {
    uint64_t now = clock_mono_ms();
    if (r->last_warn && now - r->last_warn < WARN_EVERY_MS) return;
    r->last_warn = now;
    log_msg(LOG_WARN, "jobs_db_error", "job worker %d: %s: %s", r->id, what, detail);
}

static const char *pq_error(PGconn *c, PGresult *res) {
    const char *m = res ? PQresultErrorMessage(res) : "";
    if (!m || !*m) m = c ? PQerrorMessage(c) : "no database connection";
    return m;
}

/* Runs a statement on the worker's connection; the result when it has the
 * expected status, else NULL (logged). */
static PGresult *exec_sql(runner *r, const char *what, const char *sql, int n, const char *const *vals,
                          ExecStatusType want) {
    PGresult *res = pg_exec(r->w.pg, sql, n, vals);
    if (!res) {
        warn_db(r, what, "no database connection");
        return NULL;
    }
    if (PQresultStatus(res) != want) {
        warn_db(r, what, pq_error(NULL, res));
        PQclear(res);
        return NULL;
    }
    return res;
}

static int valid_kind(const char *k) {
    size_t n = strlen(k);
    if (!n || n >= NAME_MAX_LEN - 16) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= '0' && k[i] <= '9') || k[i] == '_' || k[i] == '.'))
            return 0;
    return k[0] != '.' && k[n - 1] != '.' && !strstr(k, "..");
}

/* Whether the worker's generation has the module's file: a missing handler
 * is final, unlike an error inside one. */
static int gen_has_module(const sgw_gen *g, const char *rel) {
    char a[NAME_MAX_LEN + 32], b[NAME_MAX_LEN + 32];
    snprintf(a, sizeof a, "%s.lua", rel);
    snprintf(b, sizeof b, "%s/init.lua", rel);
    for (int i = 0; g && i < g->nfiles; i++)
        if (strcmp(g->files[i].name, a) == 0 || strcmp(g->files[i].name, b) == 0) return 1;
    return 0;
}

/* Copies an error message for last_error: bounded, and valid UTF-8 so that
 * PostgreSQL takes it (a message the database refuses would leave the job
 * locked, to run again and again). */
static void copy_error(char *dst, size_t cap, const char *src) {
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)(src ? src : "unknown error");
    while (*s && o + 5 < cap) {
        size_t len = *s < 0x80 ? 1 : (*s & 0xE0) == 0xC0 ? 2 : (*s & 0xF0) == 0xE0 ? 3 : (*s & 0xF8) == 0xF0 ? 4 : 0;
        size_t k = 1;
        while (len && k < len && (s[k] & 0xC0) == 0x80) k++;
        if (!len || k < len || (len == 2 && *s < 0xC2)) {
            dst[o++] = '?';
            s++;
            continue;
        }
        memcpy(dst + o, s, len);
        o += len;
        s += len;
    }
    dst[o] = 0;
}

/* Calls f(L) with ud, protected: whatever Lua work the runner does outside a
 * job's own slice must not throw through C. 0 ok, else message in err. */
static int protected_call(lua_State *L, lua_CFunction f, void *ud, char *err, size_t errlen) {
    if (!lua_checkstack(L, 3)) {
        snprintf(err, errlen, "Lua stack exhausted");
        return -1;
    }
    int top = lua_gettop(L);
    lua_pushcfunction(L, f);
    lua_pushlightuserdata(L, ud);
    int rc = lua_pcall(L, 1, 0, 0);
    if (rc != LUA_OK) {
        const char *m = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "error object is not a string";
        snprintf(err, errlen, "%s", rc == LUA_ERRMEM ? "not enough memory (lua.memory_limit_mb)" : m);
    }
    lua_settop(L, top);
    return rc == LUA_OK ? 0 : -1;
}

/* ------------------------------------------------------------ finishing */

/* OUT_WAIT: rescheduled like OUT_RETRY_IN, and the run was no attempt. */
typedef enum { OUT_DONE, OUT_RETRY_IN, OUT_WAIT, OUT_FAILED, OUT_DEAD } outcome;

static void flush_done(runner *r);

static void count(const job *j, const char *what) {
    char labels[NAME_MAX_LEN + 64];
    snprintf(labels, sizeof labels, "kind=\"%s\",outcome=\"%s\"", valid_kind(j->kind) ? j->kind : "invalid", what);
    metrics_count("sgw_jobs_total", labels, 1);
}

/* Ends a job: drops its coroutine, returns the connection to idle, and
 * records the outcome (only while the lease is still ours). */
static void finish_job(runner *r, job *j, outcome out, double secs, const char *error) {
    char msg[MAX_ERROR];
    copy_error(msg, sizeof msg, error); /* error may live on the coroutine's stack */
    loop_forget(&r->w, j->co);
    if (j->ref != LUA_NOREF && r->w.L) luaL_unref(r->w.L, LUA_REGISTRYINDEX, j->ref);
    j->ref = LUA_NOREF;
    j->co = NULL;
    pg_reset_session(r->w.pg);

    char id[32], num[64];
    snprintf(id, sizeof id, "%lld", j->id);
    if (out == OUT_FAILED && j->attempts >= j->max_attempts) out = OUT_DEAD;
    PGresult *res = NULL;
    if (out == OUT_DONE) {
        if (r->ndone == r->concurrency) flush_done(r); /* more ended within one batch than there are slots */
        if (r->ndone == r->concurrency) {
            /* Not deleted (the database failing) and no room to keep one
             * more: the oldest is let go, and runs again when its lease ends. */
            log_msg(LOG_ERROR, "job_done_unrecorded", "job %lld ended done but could not be recorded; it will run again",
                    r->done[0]);
            memmove(r->done, r->done + 1, (size_t)(r->ndone - 1) * sizeof *r->done);
            r->ndone--;
        }
        r->done[r->ndone++] = j->id;
        log_msg(LOG_DEBUG, "job_done", "job %lld (%s) done on attempt %d", j->id, j->kind, j->attempts);
        count(j, "done");
    } else if (out == OUT_RETRY_IN || out == OUT_WAIT) {
        snprintf(num, sizeof num, "%.3f", secs);
        const char *v[] = { id, r->locker, num };
        res = exec_sql(r, "rescheduling a job",
                       out == OUT_WAIT
                           ? "UPDATE jobs SET run_at = now() + make_interval(secs => $3), attempts = attempts - 1, "
                             "locked_by = NULL, locked_until = NULL WHERE id = $1 AND locked_by = $2"
                           : "UPDATE jobs SET run_at = now() + make_interval(secs => $3), locked_by = NULL, "
                             "locked_until = NULL WHERE id = $1 AND locked_by = $2",
                       3, v, PGRES_COMMAND_OK);
        count(j, out == OUT_WAIT ? "wait" : "retry");
    } else if (out == OUT_DEAD) {
        const char *v[] = { id, r->locker, msg };
        res = exec_sql(r, "burying a job",
                       "UPDATE jobs SET status = 'dead', last_error = $3, locked_by = NULL, locked_until = NULL "
                       "WHERE id = $1 AND locked_by = $2",
                       3, v, PGRES_COMMAND_OK);
        log_msg(LOG_ERROR, "job_dead", "job %lld (%s) failed on attempt %d of %d and is dead: %s", j->id, j->kind,
                j->attempts, j->max_attempts, msg);
        count(j, "dead");
    } else {
        /* Exponential back-off with jitter, so that jobs that failed together
         * (a platform outage) do not all come back at the same moment. */
        int e = j->attempts > 1 ? j->attempts - 1 : 0;
        double delay = r->retry_base_s * ldexp(1.0, e > 60 ? 60 : e);
        if (delay > r->retry_max_s) delay = r->retry_max_s;
        delay *= 0.5 + 0.5 * rand01(r);
        snprintf(num, sizeof num, "%.3f", delay);
        const char *v[] = { id, r->locker, num, msg };
        res = exec_sql(r, "scheduling a retry",
                       "UPDATE jobs SET run_at = now() + make_interval(secs => $3), last_error = $4, "
                       "locked_by = NULL, locked_until = NULL WHERE id = $1 AND locked_by = $2",
                       4, v, PGRES_COMMAND_OK);
        log_msg(LOG_WARN, "job_failed", "job %lld (%s) failed on attempt %d of %d, retrying in %.1f s: %s", j->id,
                j->kind, j->attempts, j->max_attempts, delay, msg);
        count(j, "failed");
    }
    PQclear(res); /* on failure the lease runs out and the job runs again */
    j->used = 0;
    r->running--;
}

/* Deletes the jobs that ended done since the last time, in one statement.
 * On failure they stay in the table: their leases run out and they run
 * again, as a failed DELETE of one job always made it. */
static void flush_done(runner *r) {
    if (r->ndone == 0) return;
    size_t cap = (size_t)r->ndone * 22 + 8;
    char *ids = malloc(cap);
    if (!ids) {
        r->ndone = 0;
        return;
    }
    size_t o = (size_t)snprintf(ids, cap, "{");
    for (int i = 0; i < r->ndone; i++) o += (size_t)snprintf(ids + o, cap - o, "%s%lld", i ? "," : "", r->done[i]);
    snprintf(ids + o, cap - o, "}");
    const char *v[] = { ids, r->locker };
    PGresult *res = exec_sql(r, "completing jobs",
                             "DELETE FROM jobs WHERE id = ANY($1::bigint[]) AND locked_by = $2 RETURNING id", 2, v,
                             PGRES_TUPLES_OK);
    if (res && PQntuples(res) < r->ndone) {
        /* The ones not deleted had passed to another worker (RETURNING has no order). */
        for (int i = 0; i < r->ndone; i++) {
            int found = 0;
            for (int k = 0; k < PQntuples(res) && !found; k++)
                found = strtoll(PQgetvalue(res, k, 0), NULL, 10) == r->done[i];
            if (!found)
                log_msg(LOG_WARN, "job_lease_lost", "job %lld finished after its lease had passed to another worker",
                        r->done[i]);
        }
    }
    /* Not deleted: kept (their leases still extended by heartbeat) and
     * tried again with the next batch, instead of running again when the
     * leases end. */
    if (res) r->ndone = 0;
    PQclear(res);
    free(ids);
}

/* ------------------------------------------------------------ running */

typedef struct result_read {
    int    has_retry;
    double retry_in;
    int    no_attempt;
} result_read;

/* read_result(value, rr): reads {retry_in = s, attempt = false}. */
static int read_result(lua_State *L) {
    result_read *rr = lua_touserdata(L, 2);
    lua_getfield(L, 1, "retry_in");
    if (!lua_isnil(L, -1)) {
        if (!lua_isnumber(L, -1)) return luaL_error(L, "retry_in must be a number of seconds");
        rr->retry_in = lua_tonumber(L, -1);
        if (!(rr->retry_in >= 0) || rr->retry_in > 365.0 * 86400) return luaL_error(L, "retry_in is out of range");
        rr->has_retry = 1;
    }
    lua_getfield(L, 1, "attempt");
    if (!lua_isnil(L, -1)) {
        if (!lua_isboolean(L, -1)) return luaL_error(L, "attempt must be a boolean");
        if (!rr->has_retry) return luaL_error(L, "attempt is meaningful only with retry_in");
        rr->no_attempt = !lua_toboolean(L, -1);
    }
    return 0;
}

/* Runs one slice of a job's coroutine and handles how it ended. */
static void resume_job(runner *r, job *j, int nargs) {
    lua_State *co = j->co;
    int nres = 0;
    loop_set_current(&r->w, co);
    httpc_set_lease(r->w.httpc, j->leased_ms, (uint64_t)(r->lease_s * 1000.0), r->heartbeat_ms);
    budget_arm(co, r->budget_ms);
    int st = luart_resume(co, r->w.L, nargs, &nres);
    httpc_set_lease(r->w.httpc, 0, 0, 0);
    loop_set_current(&r->w, NULL);

    if (st == LUA_YIELD) {
        int ours = loop_owns(&r->w, co, nres);
        j->on_http = ours && lua_touserdata(co, -1) == (void *)r->w.httpc;
        lua_pop(co, nres);
        if (ours) return; /* waiting for its transfer, statement or Redis call */
        finish_job(r, j, OUT_FAILED, 0,
                   "the job yielded outside http.request, db.*, redis.* and sched.* (coroutine.yield at the top of a job is not supported)");
        return;
    }
    if (st != LUA_OK) {
        if (st == LUA_ERRMEM) r->state_broken = 1;
        const char *m = lua_type(co, -1) == LUA_TSTRING ? lua_tostring(co, -1) : "error object is not a string";
        finish_job(r, j, OUT_FAILED, 0, m);
        return;
    }
    /* Returned: nothing (done) or {retry_in = s[, attempt = false]}. */
    result_read rr = { 0, 0, 0 };
    if (nres > 0 && lua_type(co, -nres) == LUA_TTABLE) {
        lua_State *L = r->w.L;
        if (!lua_checkstack(L, 4) || !lua_checkstack(co, 1)) {
            finish_job(r, j, OUT_FAILED, 0, "Lua stack exhausted");
            return;
        }
        int top = lua_gettop(L);
        lua_pushcfunction(L, read_result);
        lua_pushvalue(co, -nres);
        lua_xmove(co, L, 1);
        lua_pushlightuserdata(L, &rr);
        int rc = lua_pcall(L, 2, 0, 0);
        if (rc != LUA_OK) {
            char err[512];
            snprintf(err, sizeof err, "%s", lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "invalid result");
            lua_settop(L, top);
            finish_job(r, j, OUT_FAILED, 0, err);
            return;
        }
        lua_settop(L, top);
    }
    if (rr.has_retry) finish_job(r, j, rr.no_attempt ? OUT_WAIT : OUT_RETRY_IN, rr.retry_in, NULL);
    else finish_job(r, j, OUT_DONE, 0, NULL);
}

static void heartbeat(runner *r);

/* Fails the jobs that have run longer than jobs.max_run_seconds (a wait
 * that never ends: an event nobody sets, a call allowed a day): their
 * leases would otherwise be extended for ever and the job never tried
 * again. finish_job forgets their waits, as at the end of a drain. */
static void stop_overdue(runner *r) {
    if (r->max_run_ms == 0) return;
    uint64_t now = clock_mono_ms();
    for (int i = 0; i < r->concurrency; i++) {
        job *j = &r->jobs[i];
        /* One on an outbound call ends with that call's own time limit: cut
         * short, the call might still land and the retry repeat it. */
        if (!j->used || j->on_http || now - j->started_ms < r->max_run_ms) continue;
        finish_job(r, j, OUT_FAILED, 0, "it ran longer than jobs.max_run_seconds");
    }
}

/* Leases are extended between any two resumptions, so that a long batch
 * of answers (many jobs resumed one after another) never lets them lapse. */
static void keep_leases(runner *r) {
    if ((r->running > 0 || r->ndone > 0) && clock_mono_ms() - r->last_heartbeat >= r->heartbeat_ms) heartbeat(r);
}

static void on_ready(lua_State *co, int nres, void *ud) {
    runner *r = ud;
    keep_leases(r);
    for (int i = 0; i < r->concurrency; i++) {
        if (r->jobs[i].used && r->jobs[i].co == co) {
            resume_job(r, &r->jobs[i], nres);
            return;
        }
    }
}

typedef struct job_setup {
    const job  *j;
    const char *module;
    const char *payload;
    lua_State  *co;
    int         ref;
} job_setup;

/* Builds the job's coroutine: handler function, decoded payload, job table. */
static int setup_job(lua_State *L) {
    job_setup *s = lua_touserdata(L, 1);
    char err[2048];
    if (luart_require(L, s->module, err, sizeof err)) return luaL_error(L, "%s", err);
    if (!lua_isfunction(L, -1)) return luaL_error(L, "%s does not return a function", s->module);
    int fn = lua_gettop(L);
    if (luart_require(L, "cjson", err, sizeof err)) return luaL_error(L, "%s", err);
    lua_getfield(L, -1, "decode");
    lua_pushstring(L, s->payload);
    lua_call(L, 1, 1);
    int payload = lua_gettop(L);
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)s->j->id);
    lua_setfield(L, -2, "id");
    lua_pushstring(L, s->j->kind);
    lua_setfield(L, -2, "kind");
    lua_pushinteger(L, s->j->attempts);
    lua_setfield(L, -2, "attempts");
    int jt = lua_gettop(L);
    lua_State *co = lua_newthread(L);
    lua_pushvalue(L, fn);
    lua_pushvalue(L, payload);
    lua_pushvalue(L, jt);
    lua_xmove(L, co, 3);
    s->ref = luaL_ref(L, LUA_REGISTRYINDEX); /* pops the thread */
    s->co = co;
    return 0;
}

/* Takes a free slot for a claimed job, so that its lease is kept from now
 * on (heartbeat covers every used slot), before it starts. */
static job *reserve_job(runner *r, PGresult *res, int row) {
    job *j = NULL;
    for (int i = 0; i < r->concurrency && !j; i++)
        if (!r->jobs[i].used) j = &r->jobs[i];
    if (!j) return NULL; /* cannot happen: claims never exceed free slots; the lease frees it */
    memset(j, 0, sizeof *j);
    j->used = 1;
    j->started_ms = clock_mono_ms();
    j->leased_ms = r->last_claim;
    j->ref = LUA_NOREF;
    j->id = strtoll(PQgetvalue(res, row, 0), NULL, 10);
    snprintf(j->kind, sizeof j->kind, "%s", PQgetvalue(res, row, 1));
    j->attempts = atoi(PQgetvalue(res, row, 3));
    j->max_attempts = atoi(PQgetvalue(res, row, 4));
    r->running++;
    return j;
}

static void start_job(runner *r, job *j, const char *payload) {
    log_msg(LOG_DEBUG, "job_start", "job %lld (%s) attempt %d on worker %d", j->id, j->kind, j->attempts, r->id);
    char rel[NAME_MAX_LEN + 32], module[NAME_MAX_LEN + 32], err[2048];
    if (!valid_kind(j->kind)) {
        finish_job(r, j, OUT_DEAD, 0, "invalid job kind (expected [a-z0-9_.]+)");
        return;
    }
    snprintf(rel, sizeof rel, "handlers/jobs/%s", j->kind);
    for (char *p = rel + strlen("handlers/jobs/"); *p; p++)
        if (*p == '.') *p = '/';
    if (!gen_has_module(r->w.gen, rel)) {
        snprintf(err, sizeof err, "unknown job kind '%s': there is no %s.lua", j->kind, rel);
        finish_job(r, j, OUT_DEAD, 0, err);
        return;
    }
    snprintf(module, sizeof module, "handlers.jobs.%s", j->kind);
    job_setup s = { .j = j, .module = module, .payload = payload, .co = NULL, .ref = LUA_NOREF };
    if (protected_call(r->w.L, setup_job, &s, err, sizeof err)) {
        finish_job(r, j, OUT_FAILED, 0, err);
        return;
    }
    j->co = s.co;
    j->ref = s.ref;
    resume_job(r, j, 2);
}

/* ------------------------------------------------------------ claiming */

/* Scheduled jobs must start on time (within a second of run_at), so an idle
 * worker sleeps until the next one is due rather than a whole poll interval. */
static void find_next_due(runner *r, const char *offset) {
    const char *v[] = { offset };
    PGresult *res = exec_sql(
        r, "finding the next due job",
        "SELECT ceil(extract(epoch FROM min(run_at) - now() - make_interval(secs => $1)) * 1000)::bigint "
        "FROM jobs WHERE status = 'pending' AND run_at > now() + make_interval(secs => $1)",
        1, v, PGRES_TUPLES_OK);
    r->next_due = 0;
    if (!res) return;
    if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
        long long ms = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        r->next_due = clock_mono_ms() + (uint64_t)(ms > 0 ? ms : 0);
    }
    PQclear(res);
}

static void claim(runner *r) {
    int want = r->concurrency - r->running;
    r->last_claim = clock_mono_ms();
    r->notified = 0; /* a NOTIFY arriving from here on asks for another claim */
    r->more = 0;
    char lease[32], limit[16], offset[32];
    snprintf(lease, sizeof lease, "%.3f", r->lease_s);
    snprintf(limit, sizeof limit, "%d", want);
    /* Due by the clock handlers see, which tests may move forward. */
    snprintf(offset, sizeof offset, "%.3f", clock_offset());
    const char *v[] = { r->locker, lease, limit, offset };
    PGresult *res = exec_sql(
        r, "claiming jobs",
        "UPDATE jobs SET attempts = attempts + 1, locked_by = $1, "
        "locked_until = now() + make_interval(secs => $2) "
        "WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' "
        "AND run_at <= now() + make_interval(secs => $4) "
        "AND (locked_until IS NULL OR locked_until < now()) "
        /* Not one whose attempts never reported back, its last included
         * (its instance died with it each time: see bury_unfinished). */
        "AND (locked_by IS NULL OR attempts <= max_attempts) "
        "ORDER BY run_at, id LIMIT $3 FOR UPDATE SKIP LOCKED) "
        "RETURNING id, kind, payload::text, attempts, max_attempts",
        4, v, PGRES_TUPLES_OK);
    if (!res) return;
    int n = PQntuples(res);
    r->more = n == want;
    /* The claim gave these leases their full length. */
    if (r->running == 0 && n > 0) r->last_heartbeat = r->last_renewed = r->last_claim;
    /* All are reserved first: starting many takes a while, and the leases
     * of those still waiting to start must be kept meanwhile too. */
    job *claimed[n > 0 ? n : 1];
    for (int i = 0; i < n; i++) claimed[i] = reserve_job(r, res, i);
    for (int i = 0; i < n; i++) {
        keep_leases(r);
        if (claimed[i]) start_job(r, claimed[i], PQgetvalue(res, i, 2));
    }
    PQclear(res);
    if (!r->more) find_next_due(r, offset);
}

/* The ids of running jobs as a PostgreSQL array literal; with_done: and of
 * those that ended done and are not deleted yet (whose leases must hold). */
static void running_ids(runner *r, int but_on_http, int with_done, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "{");
    for (int i = 0; i < r->concurrency && o + 24 < cap; i++)
        if (r->jobs[i].used && !(but_on_http && r->jobs[i].on_http))
            o += (size_t)snprintf(buf + o, cap - o, "%s%lld", o > 1 ? "," : "", r->jobs[i].id);
    for (int i = 0; with_done && i < r->ndone && o + 24 < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", o > 1 ? "," : "", r->done[i]);
    snprintf(buf + o, cap - o, "}");
}

/* Extends the leases of running jobs, so a long job is not claimed twice
 * while its instance is alive. */
static void heartbeat(runner *r) {
    uint64_t now = clock_mono_ms();
    /* Later than two thirds of the lease: another instance may be about to
     * take these jobs for dead. Say so, the operator should know why. */
    uint64_t since = r->last_renewed ? now - r->last_renewed : 0;
    if (since > (uint64_t)(r->lease_s * 1000.0 * 2.0 / 3.0))
        log_msg(LOG_WARN, "job_heartbeat_late", "job worker %d extends its leases %llu ms after the last time "
                "(jobs.lease_seconds %.1f): the machine or the database is overloaded",
                r->id, (unsigned long long)since, r->lease_s);
    r->last_heartbeat = now;
    size_t cap = (size_t)(r->concurrency + r->ndone) * 22 + 8;
    char *ids = malloc(cap);
    if (!ids) return;
    running_ids(r, 0, 1, ids, cap);
    char lease[32];
    snprintf(lease, sizeof lease, "%.3f", r->lease_s);
    const char *v[] = { r->locker, lease, ids };
    log_msg(LOG_DEBUG, "job_leases", "worker %d extends %s", r->id, ids);
    PGresult *res = exec_sql(r, "extending leases",
                             "UPDATE jobs SET locked_until = now() + make_interval(secs => $2) "
                             "WHERE id = ANY($3::bigint[]) AND locked_by = $1 RETURNING id, attempts",
                             3, v, PGRES_TUPLES_OK);
    if (res) {
        r->last_renewed = now;
        /* Only the runs still holding their jobs have their leases
         * confirmed: a job another instance took, or this runner claimed
         * again after its lease ran out (a later attempt), keeps the old
         * time for the run that lost it, whose calls out then stop. */
        for (int k = 0; k < PQntuples(res); k++) {
            long long id = strtoll(PQgetvalue(res, k, 0), NULL, 10);
            int attempts = atoi(PQgetvalue(res, k, 1));
            for (int i = 0; i < r->concurrency; i++)
                if (r->jobs[i].used && r->jobs[i].id == id && r->jobs[i].attempts == attempts)
                    r->jobs[i].leased_ms = now;
        }
    } else if (r->heartbeat_ms > HEARTBEAT_RETRY_MS) {
        /* Not extended: again soon, not a third of the lease later, when
         * the leases may have run out and another instance taken the jobs. */
        r->last_heartbeat = now - r->heartbeat_ms + HEARTBEAT_RETRY_MS;
    }
    PQclear(res);
    free(ids);
}

/* At the end of the drain: give unfinished jobs back at once instead of
 * when their leases run out (their attempt stays counted), except those
 * waiting on an outbound call. That call may still reach the platform (a
 * Graph POST slower than the drain): another instance taking the job at
 * once would find nothing there yet and publish again. Those keep their
 * leases, which outlast the call (jobs.lease_seconds is above
 * meta.request_timeout_seconds), and the next run finds what it did. */
static void abandon(runner *r) {
    /* Their open transactions end first (dropped: the server rolls back). */
    int kept = 0;
    for (int i = 0; i < r->concurrency; i++) {
        if (!r->jobs[i].used) continue;
        loop_forget(&r->w, r->jobs[i].co);
        kept += r->jobs[i].on_http;
    }
    size_t cap = (size_t)r->concurrency * 22 + 8;
    char *ids = malloc(cap);
    if (ids) {
        pg_reset_session(r->w.pg);
        running_ids(r, 1, 0, ids, cap);
        const char *v[] = { r->locker, ids };
        PQclear(exec_sql(r, "releasing unfinished jobs",
                         "UPDATE jobs SET locked_by = NULL, locked_until = NULL "
                         "WHERE id = ANY($2::bigint[]) AND locked_by = $1",
                         2, v, PGRES_COMMAND_OK));
        /* Those on a call: given back too (no crash to bury them for), but
         * claimable only once their leases have run out. */
        if (kept > 0) {
            running_ids(r, 0, 0, ids, cap);
            PQclear(exec_sql(r, "giving back jobs on a call", "UPDATE jobs SET locked_by = NULL "
                             "WHERE id = ANY($2::bigint[]) AND locked_by = $1", 2, v, PGRES_COMMAND_OK));
        }
        free(ids);
    }
    log_msg(LOG_WARN, "jobs_abandoned", "job worker %d: %d job(s) still running at the end of the drain: %d released, "
            "%d left to their leases (an outbound call in flight)", r->id, r->running, r->running - kept, kept);
}

/* Buries the jobs whose attempts never reported back, the last one too:
 * still leased to an instance, the lease over, past max_attempts (the last
 * attempt left behind gets one more run, in case only its outcome was lost
 * to a failing database). A job that kills its instance (a crash, the
 * memory of the machine) would otherwise go round every instance for ever;
 * claims already pass them by. */
static void bury_unfinished(runner *r) {
    PGresult *res = exec_sql(r, "burying unfinished jobs",
                             "UPDATE jobs SET status = 'dead', locked_by = NULL, locked_until = NULL, "
                             "last_error = 'its last attempt never finished: the instance running it stopped "
                             "without a word (a crash?) each time' "
                             "WHERE status = 'pending' AND locked_by IS NOT NULL AND locked_until < now() "
                             "AND attempts > max_attempts RETURNING id, kind",
                             0, NULL, PGRES_TUPLES_OK);
    for (int i = 0; res && i < PQntuples(res); i++)
        log_msg(LOG_ERROR, "job_dead", "job %s (%s): its last attempt never finished and it is dead",
                PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
    PQclear(res);
}

/* ------------------------------------------------------------ timers */

static int read_timers(lua_State *L) {
    runner *r = lua_touserdata(L, 1);
    char err[2048];
    free(r->timers);
    r->timers = NULL;
    r->ntimers = 0;
    if (luart_require(L, "handlers.timers", err, sizeof err)) return luaL_error(L, "%s", err);
    if (!lua_istable(L, -1)) return luaL_error(L, "handlers/timers.lua must return a table");
    int t = lua_gettop(L);
    lua_Integer n = luaL_len(L, t);
    if (n > MAX_TIMERS) return luaL_error(L, "handlers/timers.lua: more than %d timers", MAX_TIMERS);
    if (n <= 0) return 0;
    r->timers = calloc((size_t)n, sizeof *r->timers);
    if (!r->timers) return luaL_error(L, "out of memory");
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, t, i);
        if (!lua_istable(L, -1)) return luaL_error(L, "handlers/timers.lua: entry %d is not a table", (int)i);
        timer *tm = &r->timers[r->ntimers];
        lua_getfield(L, -1, "name");
        const char *name = lua_tostring(L, -1);
        if (lua_type(L, -1) != LUA_TSTRING || !*name || strlen(name) >= NAME_MAX_LEN)
            return luaL_error(L, "handlers/timers.lua: entry %d needs a name", (int)i);
        for (int k = 0; k < r->ntimers; k++)
            if (strcmp(r->timers[k].name, name) == 0)
                return luaL_error(L, "handlers/timers.lua: two timers are named '%s'", name);
        snprintf(tm->name, sizeof tm->name, "%s", name);
        lua_getfield(L, -2, "job");
        const char *kind = lua_tostring(L, -1);
        if (lua_type(L, -1) != LUA_TSTRING || !valid_kind(kind))
            return luaL_error(L, "handlers/timers.lua: timer '%s' needs a job kind ([a-z0-9_.]+)", tm->name);
        snprintf(tm->job, sizeof tm->job, "%s", kind);
        lua_getfield(L, -3, "every");
        if (lua_type(L, -1) == LUA_TSTRING) {
            const char *key = lua_tostring(L, -1);
            if (!config_has(key))
                return luaL_error(L, "handlers/timers.lua: timer '%s': unknown config key '%s'", tm->name, key);
            tm->every = config_num(key);
        } else if (lua_type(L, -1) == LUA_TNUMBER) {
            tm->every = lua_tonumber(L, -1);
        } else {
            return luaL_error(L, "handlers/timers.lua: timer '%s' needs 'every' (seconds or a config key)", tm->name);
        }
        if (!(tm->every >= 1))
            return luaL_error(L, "handlers/timers.lua: timer '%s' must fire at most once a second", tm->name);
        tm->last_slot = -1;
        r->ntimers++;
        lua_pop(L, 4);
    }
    return 0;
}

/* Claims the timer's slot and enqueues its job in one transaction; 0 when
 * the slot is settled (fired here or elsewhere). */
static int fire_timer(runner *r, timer *tm, long long slot) {
    PGconn *c = pg_raw(r->w.pg);
    if (!c || pg_in_transaction(r->w.pg)) return -1;
    char slot_s[32], max_s[32];
    snprintf(slot_s, sizeof slot_s, "%lld", slot);
    snprintf(max_s, sizeof max_s, "%lld", config_int("jobs.max_attempts") > 0 ? config_int("jobs.max_attempts") : 10);
    PGresult *res = exec_sql(r, "starting a timer transaction", "BEGIN", 0, NULL, PGRES_COMMAND_OK);
    if (!res) return -1;
    PQclear(res);
    const char *v1[] = { tm->name, slot_s };
    res = exec_sql(r, "claiming a timer slot",
                   "INSERT INTO timer_runs (name, slot) VALUES ($1, $2) ON CONFLICT DO NOTHING", 2, v1,
                   PGRES_COMMAND_OK);
    int ok = res != NULL;
    int inserted = ok && strcmp(PQcmdTuples(res), "1") == 0;
    PQclear(res);
    if (ok && inserted) {
        const char *v2[] = { tm->job, max_s };
        res = exec_sql(r, "enqueueing a timer's job",
                       "INSERT INTO jobs (kind, payload, max_attempts) VALUES ($1, '{}', $2)", 2, v2,
                       PGRES_COMMAND_OK);
        ok = res != NULL;
        PQclear(res);
        if (ok) {
            res = exec_sql(r, "notifying job workers", "NOTIFY sgw_jobs", 0, NULL, PGRES_COMMAND_OK);
            ok = res != NULL;
            PQclear(res);
        }
    }
    res = exec_sql(r, "ending a timer transaction", ok ? "COMMIT" : "ROLLBACK", 0, NULL, PGRES_COMMAND_OK);
    ok = ok && res != NULL;
    PQclear(res);
    pg_reset_session(r->w.pg);
    if (ok && inserted) log_msg(LOG_DEBUG, "timer_fired", "timer %s enqueued %s (slot %lld)", tm->name, tm->job, slot);
    return ok ? 0 : -1;
}

static void timers_tick(runner *r) {
    r->last_tick = clock_mono_ms();
    if (!r->w.L || !r->w.gen) return;
    if (!gen_has_module(r->w.gen, "handlers/timers")) {
        r->ntimers = 0;
        r->timers_gen = r->w.gen->id;
        return;
    }
    if (r->timers_gen != r->w.gen->id) {
        char err[2048];
        r->timers_gen = r->w.gen->id;
        if (protected_call(r->w.L, read_timers, r, err, sizeof err)) {
            log_msg(LOG_ERROR, "timers_invalid", "timers are off until handlers/timers.lua is fixed: %s", err);
            r->ntimers = 0;
        }
    }
    double now = clock_now();
    for (int i = 0; i < r->ntimers; i++) {
        timer *tm = &r->timers[i];
        long long slot = (long long)floor(now / tm->every);
        if (slot != tm->last_slot && fire_timer(r, tm, slot) == 0) tm->last_slot = slot;
    }
    if (!r->last_cleanup || r->last_tick - r->last_cleanup >= TIMER_CLEANUP_MS) {
        r->last_cleanup = r->last_tick;
        PQclear(exec_sql(r, "pruning timer_runs", "DELETE FROM timer_runs WHERE created_at < now() - interval '1 day'",
                         0, NULL, PGRES_COMMAND_OK));
        bury_unfinished(r);
    }
}

/* ------------------------------------------------------------ waking */

static void listen_connect(runner *r) {
    if (r->listen && PQstatus(r->listen) == CONNECTION_OK) return;
    uint64_t now = clock_mono_ms();
    if (now < r->listen_retry_at) return;
    r->listen_retry_at = now + LISTEN_RETRY_MS;
    if (r->listen) PQfinish(r->listen);
    /* Bounded, so an unreachable server costs a worker seconds, not minutes. */
    const char *const keys[] = { "dbname", "connect_timeout", NULL };
    /* Directly, not through a transaction-mode pooler, which would hand
     * the LISTEN's session to others. */
    const char *const vals[] = { pg_direct_url(), "5", NULL };
    r->listen = PQconnectdbParams(keys, vals, 1);
    PGresult *res = NULL;
    if (PQstatus(r->listen) == CONNECTION_OK) res = PQexec(r->listen, "LISTEN sgw_jobs");
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        warn_db(r, "listening for new jobs", pq_error(r->listen, res));
        PQclear(res);
        PQfinish(r->listen);
        r->listen = NULL;
        return;
    }
    PQclear(res);
    r->notified = 1; /* anything enqueued while we were not listening */
}

static void listen_drain(runner *r) {
    if (!r->listen) return;
    if (!PQconsumeInput(r->listen)) {
        warn_db(r, "listening for new jobs", PQerrorMessage(r->listen));
        PQfinish(r->listen);
        r->listen = NULL;
        r->notified = 1;
        return;
    }
    PGnotify *n;
    while ((n = PQnotifies(r->listen))) {
        r->notified = 1;
        PQfreemem(n);
    }
}

static void drain_wake(runner *r) {
    uint64_t v;
    if (read(r->efd, &v, sizeof v) == (ssize_t)sizeof v) r->notified = 1;
}

static void wait_idle(runner *r, int timeout_ms) {
    struct pollfd p[2] = { { .fd = r->efd, .events = POLLIN }, { .fd = -1, .events = POLLIN } };
    if (r->listen) p[1].fd = PQsocket(r->listen);
    if (poll(p, 2, timeout_ms < 0 ? 0 : timeout_ms) < 0 && errno != EINTR) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    drain_wake(r);
    listen_drain(r);
}

void jobs_wake(void) {
    uint64_t one = 1;
    for (int i = 0; i < nrunners; i++)
        if (runners[i].efd >= 0 && write(runners[i].efd, &one, sizeof one) < 0 && errno != EAGAIN)
            log_msg(LOG_WARN, "jobs_wake", "cannot wake job worker %d: %s", i, strerror(errno));
}

/* ------------------------------------------------------------ the loop */

/* At a job boundary: switch to the current generation (or to a fresh state
 * after a memory ceiling was hit). */
static void refresh(runner *r) {
    if (r->state_broken) {
        r->state_broken = 0;
        luart_close_state(&r->w);
    }
    uint64_t cur = luart_generation_id();
    if (r->w.L && r->w.gen && (r->w.gen->id == cur || r->refresh_failed_gen == cur)) return;
    char err[2048];
    if (luart_refresh(&r->w, err, sizeof err)) {
        r->refresh_failed_gen = cur;
        log_msg(LOG_ERROR, "jobs_state", "job worker %d cannot load generation %llu: %s", r->id,
                (unsigned long long)cur, err);
    }
}

/* The ms until BATCH_GAP_MS after `since`, when sooner than `timeout`. */
static int gap_left(uint64_t since, int timeout) {
    uint64_t gone = clock_mono_ms() - since;
    int left = gone >= BATCH_GAP_MS ? 0 : (int)(BATCH_GAP_MS - gone);
    return left < timeout ? left : timeout;
}

static void *runner_main(void *arg) {
    runner *r = arg;
    r->heartbeat_ms = (uint64_t)(r->lease_s * 1000.0 / 3.0);
    if (r->heartbeat_ms < 100) r->heartbeat_ms = 100;
    for (;;) {
        uint64_t now = clock_mono_ms();
        int stop = atomic_load(&stopping);
        /* Running jobs: batched (BATCH_GAP_MS); otherwise at once. */
        int batch_due = r->running == 0 || stop || now - r->last_flush >= BATCH_GAP_MS;
        if (batch_due) {
            flush_done(r);
            r->last_flush = now;
        }
        if (stop && r->running == 0) break;
        if (stop && now >= atomic_load(&drain_deadline)) {
            abandon(r);
            break;
        }
        if (r->running == 0 && !stop) refresh(r);
        /* A newer generation waits for the running jobs to end; meanwhile
         * claim nothing, so that they do end. */
        uint64_t cur = luart_generation_id();
        int behind = r->running > 0 && r->w.gen && r->w.gen->id != cur && r->refresh_failed_gen != cur;

        if (!stop) {
            /* (Re)connecting blocks: never while jobs wait on their calls. */
            if (r->running == 0) listen_connect(r);
            if (r->id == 0 && now - r->last_tick >= TIMER_TICK_MS) timers_tick(r);
        }
        stop_overdue(r);
        keep_leases(r);
        int claim_wanted = !stop && !behind && r->w.L && r->running < r->concurrency &&
            (r->notified || r->more || now - r->last_claim >= (uint64_t)r->poll_ms ||
             (r->next_due && now >= r->next_due));
        if (claim_wanted && (r->running == 0 || now - r->last_claim >= BATCH_GAP_MS))
            claim(r);

        if (r->running > 0) {
            /* Transfers, statements, a wake-up and NOTIFY: whichever comes first. */
            struct pollfd fds[2 + LOOP_FDS_MAX];
            int n = 0;
            fds[n++] = (struct pollfd){ .fd = r->efd, .events = POLLIN };
            if (r->listen) fds[n++] = (struct pollfd){ .fd = PQsocket(r->listen), .events = POLLIN };
            n += loop_pollfds(&r->w, fds + n, LOOP_FDS_MAX);
            /* Not longer than until the batch is due when it has work. */
            int timeout = BUSY_POLL_MS;
            if (r->ndone > 0) timeout = gap_left(r->last_flush, timeout);
            if (claim_wanted) timeout = gap_left(r->last_claim, timeout);
            loop_wait(&r->w, fds, n, loop_ready(&r->w) ? 0 : timeout, on_ready, r);
            drain_wake(r);
            listen_drain(r);
        } else if (!stop) {
            now = clock_mono_ms();
            long long t = (long long)r->poll_ms - (long long)(now - r->last_claim);
            if (r->id == 0) {
                long long tt = (long long)TIMER_TICK_MS - (long long)(now - r->last_tick);
                if (tt < t) t = tt;
            }
            if (r->next_due && (long long)(r->next_due - now) < t) t = (long long)r->next_due - (long long)now;
            if (!r->w.L) t = 1000;
            wait_idle(r, (int)(t < 0 ? 0 : t));
        }
    }
    /* Jobs still running (the drain ran out) lose their coroutines here;
     * their transfers end with the worker's httpc. */
    for (int i = 0; i < r->concurrency; i++) {
        job *j = &r->jobs[i];
        if (j->used) loop_forget(&r->w, j->co);
        if (j->used && j->ref != LUA_NOREF && r->w.L) luaL_unref(r->w.L, LUA_REGISTRYINDEX, j->ref);
        j->used = 0;
    }
    r->running = 0;
    return NULL;
}

static void runner_free(runner *r) {
    if (r->inited) worker_destroy(&r->w); /* closes the state, then frees httpc */
    r->inited = 0;
    if (r->efd >= 0) close(r->efd);
    r->efd = -1;
    if (r->listen) PQfinish(r->listen);
    r->listen = NULL;
    free(r->jobs);
    r->jobs = NULL;
    free(r->done);
    r->done = NULL;
    free(r->timers);
    r->timers = NULL;
}

int jobs_start(int n) {
    if (n <= 0) {
        log_msg(LOG_INFO, "jobs_disabled", "jobs.workers is 0: this instance runs no jobs or timers");
        return 0;
    }
    if (!*config_str("database.url")) {
        log_msg(LOG_WARN, "jobs_disabled", "database.url is empty: no jobs or timers run");
        return 0;
    }
    runners = calloc((size_t)n, sizeof *runners);
    if (!runners) return -1;
    atomic_store(&stopping, 0);
    char host[64] = "localhost", tag[9];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    crypto_random_base62(tag, 8);
    int conc = (int)config_int("jobs.concurrency");
    if (conc < 1) conc = 1;
    long long pool = config_int("database.pool_size");
    if (pool < 1 || pool > LOOP_POOL_MAX) {
        log_msg(LOG_ERROR, "jobs_start", "database.pool_size must be 1 to %d (it is %lld)", LOOP_POOL_MAX, pool);
        return -1;
    }

    sgw_worker **states = calloc((size_t)n, sizeof *states);
    if (!states) goto fail;
    for (int i = 0; i < n; i++) {
        runners[i].id = i;
        runners[i].efd = -1;
        states[i] = &runners[i].w;
    }
    nrunners = n;
    int rc = worker_init_all(states, n, "job", NULL, NULL, 0);
    free(states);
    if (rc) goto fail;
    for (int i = 0; i < n; i++) runners[i].inited = 1;
    for (int i = 0; i < n; i++) {
        runner *r = &runners[i];
        r->concurrency = conc;
        r->jobs = calloc((size_t)conc, sizeof *r->jobs);
        r->done = calloc((size_t)conc, sizeof *r->done);
        r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (loop_open(&r->w, conc) || !r->w.pgpool || !r->jobs || !r->done || r->efd < 0) {
            log_msg(LOG_ERROR, "jobs_start", "job worker %d: cannot allocate its resources", i);
            goto fail;
        }
        snprintf(r->locker, sizeof r->locker, "%s:%d:%d:%s", host, (int)getpid(), i, tag);
        r->lease_s = config_num("jobs.lease_seconds") > 0 ? config_num("jobs.lease_seconds") : 60;
        r->max_run_ms = config_num("jobs.max_run_seconds") > 0 ? (uint64_t)(config_num("jobs.max_run_seconds") * 1000.0) : 0;
        r->retry_base_s = config_num("jobs.retry_base_seconds");
        r->retry_max_s = config_num("jobs.retry_max_seconds");
        r->budget_ms = config_num("lua.handler_budget_ms");
        r->poll_ms = config_int("jobs.poll_interval_ms") > 0 ? (int)config_int("jobs.poll_interval_ms") : 1000;
        r->rng = (clock_mono_ms() << 16) ^ (uint64_t)getpid() ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull);
        if (!r->rng) r->rng = 1;
        r->notified = 1;
        if (pthread_create(&r->thread, NULL, runner_main, r)) {
            log_msg(LOG_ERROR, "jobs_start", "cannot start job worker %d", i);
            goto fail;
        }
        r->started = 1;
    }
    log_msg(LOG_INFO, "jobs_started", "%d job worker(s), %d jobs at once each, %lld database connections each",
            n, conc, pool);
    return 0;
fail:
    jobs_stop();
    return -1;
}

void jobs_request_stop(uint64_t deadline_ms) {
    if (!runners || atomic_load(&stopping)) return;
    atomic_store(&drain_deadline, deadline_ms);
    atomic_store(&stopping, 1);
    jobs_wake();
}

void jobs_stop(void) {
    if (!runners) return;
    double drain = config_num("http.drain_seconds");
    jobs_request_stop(clock_mono_ms() + (uint64_t)(drain > 0 ? drain * 1000.0 : 0));
    for (int i = 0; i < nrunners; i++)
        if (runners[i].started) pthread_join(runners[i].thread, NULL);
    for (int i = 0; i < nrunners; i++) runner_free(&runners[i]);
    free(runners);
    runners = NULL;
    nrunners = 0;
}

int jobs_queue_depth(sgw_pg *pg, long long *pending, long long *dead) {
    PGresult *res = pg_exec(pg, "SELECT count(*) FILTER (WHERE status = 'pending'), "
                                "count(*) FILTER (WHERE status = 'dead') FROM jobs", 0, NULL);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        PQclear(res);
        return -1;
    }
    *pending = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    *dead = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
    PQclear(res);
    return 0;
}

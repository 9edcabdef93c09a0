/*
 * test_jobs.c — the job runner (jobs.c) with a real job worker thread, its
 * Lua state built by luart.c from a small handlers tree the test writes,
 * against a database of its own made in the PostgreSQL named by
 * SGW_TEST_DATABASE_URL (skipped without it). Each kind of job records its
 * runs in a table, and the test reads what the jobs table and those runs say
 * once the queue is empty: a job that returns nothing is done and deleted;
 * {retry_in = s} runs it again as a new attempt; {retry_in = s, attempt =
 * false} runs it again and gives the run back; an error retries it until
 * max_attempts, then buries it with its last error; a result the runner
 * cannot read, and a kind without a handler, fail the same way; so does a
 * run that waits past jobs.max_run_seconds. A job done
 * whose row the database would not delete keeps its lease and is deleted
 * later, without running again. A job's calls out stop once its lease goes
 * unconfirmed and a call could outlast it.
 */
#include "sgw.h"

#include <libpq-fe.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "free_port.h"
#include "lua_tree.h"

/* ------------------------------------------------------------ handlers */

/* Every kind records its run first: runs(job_id, attempt). */
#define RECORD "assert(db.exec('INSERT INTO runs (job_id, attempt) VALUES ($1, $2)', job.id, job.attempts))\n"
#define RUNS   "local n = tonumber(assert(db.query('SELECT count(*) AS n FROM runs WHERE job_id = $1', job.id))[1].n)\n"

static const lua_tree_file tree[] = {
    { "lib/dispatch.lua", "return { handle = function() return 404, {}, '' end }\n" },
    { "handlers/routes.lua", "return { { method = 'GET', path = '/ping', handler = 'ping', auth = false } }\n" },
    { "handlers/ping.lua", "return function() end\n" },
    { "handlers/timers.lua", "return {}\n" },
    { "handlers/jobs/t_done.lua", "return function(payload, job)\n" RECORD "end\n" },
    /* payload.times more runs, each an attempt */
    { "handlers/jobs/t_retry.lua",
      "return function(payload, job)\n" RECORD RUNS
      "  if n <= payload.times then return { retry_in = 0 } end\n"
      "end\n" },
    /* payload.waits more runs, none an attempt */
    { "handlers/jobs/t_wait.lua",
      "return function(payload, job)\n" RECORD RUNS
      "  if n <= payload.waits then return { retry_in = 0, attempt = false } end\n"
      "end\n" },
    { "handlers/jobs/t_raise.lua", "return function(payload, job)\n" RECORD "  error('boom on ' .. job.attempts, 0)\nend\n" },
    /* Waits for an event nobody sets. */
    { "handlers/jobs/t_park.lua", "return function(payload, job)\n" RECORD "  sched.event():wait()\nend\n" },
    { "handlers/jobs/t_bad_delay.lua", "return function() return { retry_in = 'soon' } end\n" },
    { "handlers/jobs/t_lone_attempt.lua", "return function() return { attempt = false } end\n" },
    { "handlers/jobs/t_bad_attempt.lua", "return function() return { retry_in = 0, attempt = 'no' } end\n" },
    /* Calls payload.url (which never answers) up to payload.calls times,
     * and fails with the kinds of failure it met, in order, and the last one's
 * message. */
    { "handlers/jobs/t_call.lua",
      "return function(payload, job)\n"
      "  local kinds, last = {}, ''\n"
      "  for i = 1, payload.calls do\n"
      "    local r, e, kind = http.request { url = payload.url, timeout = payload.timeout }\n"
      "    kinds[#kinds + 1], last = kind or 'answered', tostring(e)\n"
      "    if kind == 'lease' then break end\n"
      "  end\n"
      "  error(table.concat(kinds, ',') .. '\\n' .. last, 0)\n"
      "end\n" },
};
#define NTREE (sizeof tree / sizeof tree[0])

static char root[512];

static int make_root(void) {
    return lua_tree_make_with(root, sizeof root, "sgw_test_jobs_", tree, NTREE);
}

/* ------------------------------------------------------------ database */

static PGconn *db;      /* the test's own connection to its database */

static int exec_ok(PGconn *c, const char *sql) {
    PGresult *res = PQexec(c, sql);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK;
    if (!ok) printf("SQL failed: %s: %s", sql, PQerrorMessage(c));
    PQclear(res);
    return ok;
}

/* The one value a query selects, in buf ("" for NULL or no row). */
static const char *value(const char *sql, char *buf, size_t len) {
    PGresult *res = PQexec(db, sql);
    buf[0] = 0;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
        snprintf(buf, len, "%s", PQgetvalue(res, 0, 0));
    else if (PQresultStatus(res) != PGRES_TUPLES_OK)
        printf("SQL failed: %s: %s", sql, PQerrorMessage(db));
    PQclear(res);
    return buf;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)n + 1))) {
            if (fread(text, 1, (size_t)n, f) != (size_t)n) {
                free(text);
                text = NULL;
            } else {
                text[n] = 0;
            }
        }
    }
    fclose(f);
    return text;
}

/* url with its database name replaced by name. */
static void with_database(const char *url, const char *name, char *out, size_t len) {
    const char *slash = strrchr(url, '/');
    const char *query = strchr(url, '?');
    int head = slash ? (int)(slash - url) : (int)strlen(url);
    snprintf(out, len, "%.*s/%s%s", head, url, name, query ? query : "");
}

/* ------------------------------------------------------------ the tests */

typedef struct job_spec {
    const char *name, *kind, *payload;
    int max_attempts;
    long long id;
} job_spec;

static job_spec jobs[] = {
    { "done", "t_done", "{}", 10, 0 },
    { "retry", "t_retry", "{\"times\": 2}", 10, 0 },
    { "wait", "t_wait", "{\"waits\": 3}", 10, 0 },
    { "raise", "t_raise", "{}", 2, 0 },
    { "bad delay", "t_bad_delay", "{}", 1, 0 },
    { "lone attempt", "t_lone_attempt", "{}", 1, 0 },
    { "bad attempt", "t_bad_attempt", "{}", 1, 0 },
    { "unknown kind", "t_no_such_kind", "{}", 1, 0 },
    { "parked", "t_park", "{}", 2, 0 },
};
#define NJOBS (sizeof jobs / sizeof jobs[0])

static void enqueue_all(void) {
    for (size_t i = 0; i < NJOBS; i++) {
        char sql[512], buf[32];
        snprintf(sql, sizeof sql, "INSERT INTO jobs (kind, payload, max_attempts) VALUES ('%s', '%s', %d) RETURNING id",
                 jobs[i].kind, jobs[i].payload, jobs[i].max_attempts);
        jobs[i].id = strtoll(value(sql, buf, sizeof buf), NULL, 10);
    }
    exec_ok(db, "NOTIFY sgw_jobs");
}

/* Waits, with a deadline, until no job is pending. */
static int queue_settled(void) {
    uint64_t deadline = clock_mono_ms() + 30000;
    char buf[32];
    while (clock_mono_ms() < deadline) {
        if (strcmp(value("SELECT count(*) FROM jobs WHERE status = 'pending'", buf, sizeof buf), "0") == 0) return 1;
        usleep(20000);
    }
    return 0;
}

static const char *runs_of(const job_spec *j, char *buf, size_t len) {
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT coalesce(string_agg(attempt::text, ',' ORDER BY seq), '') FROM runs WHERE job_id = %lld", j->id);
    return value(sql, buf, len);
}

static const char *job_row(const job_spec *j, char *buf, size_t len) {
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT status || ' ' || attempts || ' ' || coalesce(last_error, '-') FROM jobs WHERE id = %lld",
             j->id);
    return value(sql, buf, len);
}

static void test_outcomes(void) {
    enqueue_all();
    check(queue_settled(), "every job ran until done or dead", NULL);
    char runs[256], row[4300];

    check(strcmp(job_row(&jobs[0], row, sizeof row), "") == 0, "a job that returns nothing is deleted", row);
    check(strcmp(runs_of(&jobs[0], runs, sizeof runs), "1") == 0, "it ran once, as attempt 1", runs);

    check(strcmp(job_row(&jobs[1], row, sizeof row), "") == 0, "a job that asked to run again twice is done", row);
    check(strcmp(runs_of(&jobs[1], runs, sizeof runs), "1,2,3") == 0, "each run of {retry_in} is an attempt", runs);

    check(strcmp(job_row(&jobs[2], row, sizeof row), "") == 0, "a job that waited three times is done", row);
    check(strcmp(runs_of(&jobs[2], runs, sizeof runs), "1,1,1,1") == 0,
          "a run that returned {retry_in, attempt = false} is given back", runs);

    job_row(&jobs[3], row, sizeof row);
    check(strncmp(row, "dead 2 boom on 2", 16) == 0, "an error retries until max_attempts, then buries the job", row);
    check(strcmp(runs_of(&jobs[3], runs, sizeof runs), "1,2") == 0, "two attempts of the failing job", runs);

    job_row(&jobs[4], row, sizeof row);
    check(strncmp(row, "dead 1 ", 7) == 0 && strstr(row, "retry_in must be a number of seconds"),
          "a retry_in that is no number fails the job", row);
    job_row(&jobs[5], row, sizeof row);
    check(strncmp(row, "dead 1 ", 7) == 0 && strstr(row, "attempt is meaningful only with retry_in"),
          "attempt without retry_in fails the job", row);
    job_row(&jobs[6], row, sizeof row);
    check(strncmp(row, "dead 1 ", 7) == 0 && strstr(row, "attempt must be a boolean"),
          "an attempt that is no boolean fails the job", row);
    job_row(&jobs[7], row, sizeof row);
    check(strncmp(row, "dead 1 ", 7) == 0 && strstr(row, "unknown job kind"), "a kind without a handler is buried", row);
    job_row(&jobs[8], row, sizeof row);
    check(strncmp(row, "dead 2 ", 7) == 0 && strstr(row, "ran longer than jobs.max_run_seconds"),
          "a run that never ends fails at jobs.max_run_seconds, and is tried again", row);
    check(strcmp(runs_of(&jobs[8], runs, sizeof runs), "1,2") == 0, "two runs of the parked job", runs);
}

/* Waits, with a deadline, until sql answers want. */
static int eventually_value(const char *sql, const char *want) {
    uint64_t deadline = clock_mono_ms() + 10000;
    char buf[64];
    while (clock_mono_ms() < deadline) {
        if (strcmp(value(sql, buf, sizeof buf), want) == 0) return 1;
        usleep(20000);
    }
    return 0;
}

/* A job that ended done while its row could not be deleted (a trigger
 * refuses, as a failing database would): it is kept, its lease still
 * extended, and deleted once the database takes it; it never runs again. */
static void test_done_unrecorded(void) {
    int made = exec_ok(db, "CREATE SEQUENCE delete_attempts; "
                           "CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS "
                           "$$ BEGIN PERFORM nextval('delete_attempts'); RAISE EXCEPTION 'deletes refused'; END $$; "
                           "CREATE TRIGGER refuse_delete BEFORE DELETE ON jobs FOR EACH ROW EXECUTE FUNCTION refuse_delete()");
    check(made, "a trigger refusing deletes", PQerrorMessage(db));
    if (!made) return;
    char buf[64], sql[256], lease[64], runs[64];
    long long id = strtoll(value("INSERT INTO jobs (kind, payload) VALUES ('t_done', '{}') RETURNING id", buf, sizeof buf),
                           NULL, 10);
    exec_ok(db, "NOTIFY sgw_jobs");
    snprintf(sql, sizeof sql, "SELECT count(*) = 1 AND (SELECT is_called FROM delete_attempts) FROM runs WHERE job_id = %lld",
             id);
    check(eventually_value(sql, "t"), "the job ran, and its delete was refused", NULL);
    snprintf(sql, sizeof sql, "SELECT locked_until FROM jobs WHERE id = %lld", id);
    value(sql, lease, sizeof lease);
    snprintf(sql, sizeof sql, "SELECT locked_until > '%s' FROM jobs WHERE id = %lld", lease, id);
    check(eventually_value(sql, "t"), "its lease is still extended", lease);
    exec_ok(db, "DROP TRIGGER refuse_delete ON jobs");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM jobs WHERE id = %lld", id);
    check(eventually_value(sql, "0"), "it is deleted once the database takes it", NULL);
    job_spec j = { .id = id };
    check(strcmp(runs_of(&j, runs, sizeof runs), "1") == 0, "it ran once", runs);
}

/* Runs a t_call job of `calls` calls of 1.2 s to the silent listener on
 * port (payload_extra: more members of its payload) until it is dead; buf
 * gets the kinds of failure it met, and the last one's message follows. */
static const char *call_job(int port, int calls, const char *payload_extra, char *buf, size_t len) {
    char sql[512];
    snprintf(sql, sizeof sql, "INSERT INTO jobs (kind, payload, max_attempts) VALUES ('t_call', "
             "'{\"url\": \"http://127.0.0.1:%d/\", \"timeout\": 1.2, \"calls\": %d%s}', 1) RETURNING id",
             port, calls, payload_extra);
    long long id = strtoll(value(sql, buf, len), NULL, 10);
    exec_ok(db, "NOTIFY sgw_jobs");
    snprintf(sql, sizeof sql, "SELECT status FROM jobs WHERE id = %lld", id);
    check(eventually_value(sql, "dead"), "the calling job ended", NULL);
    snprintf(sql, sizeof sql, "SELECT split_part(last_error, E'\\n', 1) || E'\\n' || split_part(last_error, E'\\n', 2) "
             "FROM jobs WHERE id = %lld", id);
    value(sql, buf, len);
    char *nl = strchr(buf, '\n');
    if (!nl) return "";
    *nl = 0;
    return nl + 1;
}

/* A job's calls out end before its lease can run out. Calls of 1.2 s to a
 * server that never answers, under a 3 s lease that the runner confirms
 * every second: while it does, they go on past the lease's first length;
 * once the database no longer extends it (a trigger skips the update of
 * that job's row, as an unreachable database would), the first call that
 * could outlast the lease, at 2.4 s, is not sent, and says why. */
static void test_calls_within_lease(void) {
    char err[256];
    jobs_stop();
    if (config_set("jobs.lease_seconds", "3", err, sizeof err) || jobs_start(1)) {
        check(0, "the job runner starts again with a 3 s lease", err);
        return;
    }
    int port, fd = test_silent_listener(&port);
    if (fd < 0) {
        check(0, "a listener that never answers", "cannot listen");
        return;
    }
    char buf[256];
    call_job(port, 3, "", buf, sizeof buf);
    check(strcmp(buf, "timeout,timeout,timeout") == 0,
          "3 calls of 1.2 s went out, 3.6 s under a 3 s lease that the runner extended", buf);

    int made = exec_ok(db,
        "CREATE FUNCTION skip_extension() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$; "
        "CREATE TRIGGER skip_extension BEFORE UPDATE ON jobs FOR EACH ROW "
        "WHEN (OLD.payload->>'lease' = 'lapses' AND OLD.locked_by IS NOT NULL AND NEW.locked_by = OLD.locked_by "
        "AND NEW.status = OLD.status AND NEW.attempts = OLD.attempts) EXECUTE FUNCTION skip_extension()");
    check(made, "a trigger that skips the extension of one job's lease", PQerrorMessage(db));
    const char *last = call_job(port, 5, ", \"lease\": \"lapses\"", buf, sizeof buf);
    check(strcmp(buf, "timeout,timeout,lease") == 0,
          "2 calls went out; the third, which could have outlasted the unconfirmed lease, was not sent", buf);
    check(strncmp(last, "not sent: the job's lease (jobs.lease_seconds) was last confirmed ", 66) == 0,
          "the refusal says why", last);
    if (made) exec_ok(db, "DROP TRIGGER skip_extension ON jobs; DROP FUNCTION skip_extension()");
    close(fd);
}

/* Left as instances leave them, before the runner starts: one whose
 * attempts, the last and its one grace run, were still leased to instances
 * that died with them (never claimed again, buried), one given back at the
 * end of a drain with no attempt left (still run). */
static long long orphan_id, released_id;

static void insert_leftovers(void) {
    char buf[32];
    orphan_id = strtoll(value("INSERT INTO jobs (kind, payload, max_attempts, attempts, locked_by, locked_until) "
                              "VALUES ('t_done', '{}', 2, 3, 'gone-instance', now() - interval '1 second') RETURNING id",
                              buf, sizeof buf), NULL, 10);
    released_id = strtoll(value("INSERT INTO jobs (kind, payload, max_attempts, attempts) "
                                "VALUES ('t_done', '{}', 2, 2) RETURNING id", buf, sizeof buf), NULL, 10);
}

static void test_leftovers(void) {
    char sql[256], row[4300], runs[64];
    snprintf(sql, sizeof sql, "SELECT status || ' ' || coalesce(last_error, '-') FROM jobs WHERE id = %lld", orphan_id);
    value(sql, row, sizeof row);
    check(strncmp(row, "dead ", 5) == 0 && strstr(row, "never finished"),
          "a job whose last attempt never reported back is buried, not run again", row);
    job_spec orphan = { .id = orphan_id }, released = { .id = released_id };
    check(strcmp(runs_of(&orphan, runs, sizeof runs), "") == 0, "it did not run", runs);
    check(strcmp(runs_of(&released, runs, sizeof runs), "3") == 0,
          "a job given back at a drain runs, whatever its attempts", runs);

    /* Between burials, claims pass such a job by: one more orphan, then a
     * job claimed after it, which runs while the orphan stays. */
    char buf[32];
    orphan.id = strtoll(value("INSERT INTO jobs (kind, payload, max_attempts, attempts, locked_by, locked_until) "
                              "VALUES ('t_done', '{}', 2, 3, 'gone-instance', now() - interval '1 second') RETURNING id",
                              buf, sizeof buf), NULL, 10);
    job_spec after = { .id = strtoll(value("INSERT INTO jobs (kind, payload, run_at) VALUES ('t_done', '{}', "
                                           "now() + interval '10 milliseconds') RETURNING id", buf, sizeof buf), NULL, 10) };
    exec_ok(db, "NOTIFY sgw_jobs");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE job_id = %lld", after.id);
    check(eventually_value(sql, "1"), "a job due after it runs", NULL);
    check(strcmp(runs_of(&orphan, runs, sizeof runs), "") == 0, "the orphan is not claimed", runs);
    snprintf(sql, sizeof sql, "DELETE FROM jobs WHERE id = %lld", orphan.id);
    exec_ok(db, sql);
}

/* ------------------------------------------------------------ main */

int main(void) {
    const char *url = getenv("SGW_TEST_DATABASE_URL");
    if (!url || !*url) {
        printf("SKIP: SGW_TEST_DATABASE_URL not set\n");
        return 0;
    }
    char err[512], name[64], own_url[1024];
    snprintf(name, sizeof name, "sgw_test_jobs_%ld", (long)getpid());
    with_database(url, name, own_url, sizeof own_url);

    PGconn *admin = PQconnectdb(url);
    if (PQstatus(admin) != CONNECTION_OK) {
        printf("cannot connect to SGW_TEST_DATABASE_URL: %s", PQerrorMessage(admin));
        PQfinish(admin);
        return 1;
    }
    char sql[256];
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    db = NULL;
    char *schema = read_file("migrations/0001_jobs.sql");
    int ready = schema && exec_ok(admin, sql);
    if (ready) {
        db = PQconnectdb(own_url);
        ready = PQstatus(db) == CONNECTION_OK && exec_ok(db, "SET client_min_messages = warning") &&
                exec_ok(db, schema) &&
                exec_ok(db, "CREATE TABLE runs (seq bigserial PRIMARY KEY, job_id bigint, attempt integer)");
    }
    free(schema);

    if (ready && (config_load_file("config/sgw.conf", 1, err, sizeof err) ||
                  config_set("database.url", own_url, err, sizeof err) ||
                  config_set("redis.url", "", err, sizeof err) ||
                  config_set("jobs.poll_interval_ms", "50", err, sizeof err) ||
                  config_set("jobs.retry_base_seconds", "0.05", err, sizeof err) ||
                  config_set("jobs.retry_max_seconds", "0.1", err, sizeof err) ||
                  config_set("jobs.lease_seconds", "2", err, sizeof err) ||
                  config_set("jobs.max_run_seconds", "1", err, sizeof err))) {
        printf("config: %s\n", err);
        ready = 0;
    }
    log_set_level(LOG_ERROR);   /* the failures the tests cause are expected */
    if (ready && (shared_start(err, sizeof err) || make_root() || luart_init(root, err, sizeof err))) {
        printf("handlers: %s\n", err);
        ready = 0;
    }
    if (ready) insert_leftovers();
    if (ready && jobs_start(1) == 0) {
        test_outcomes();
        test_leftovers();
        test_done_unrecorded();
        test_calls_within_lease();
        jobs_stop();
    } else {
        check(0, "the job runner starts", err);
    }

    luart_shutdown();
    shared_stop();
    config_free();
    lua_tree_remove(root);
    if (db) PQfinish(db);
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", name);
    exec_ok(admin, sql);
    PQfinish(admin);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/*
 * test_pgpool.c — a job worker's connection pool (pgpool.c) and the db.*
 * calls that wait on it without blocking (pg.c): first the waiting line
 * alone (no database), then Lua coroutines run by a small loop like the job
 * runner's against the PostgreSQL named by SGW_TEST_DATABASE_URL: many
 * statements in flight on few connections, transactions that commit, roll
 * back and nest, a failed statement inside a transaction, a connection
 * broken while idle, statements prepared by name (once per session, a
 * bounded set, a stale plan, a session that lost them). Without the
 * variable the second part skips.
 */
#include "sgw.h"

#include <libpq-fe.h>

#include <poll.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "free_port.h"

/* ------------------------------------------------------------ the line */

typedef struct resumed {
    lua_State *co[16];
    int        n;
} resumed;

static void note_ready(lua_State *co, int nres, void *ud) {
    (void)nres;
    resumed *r = ud;
    if (r->n < 16) r->co[r->n++] = co;
}

static void test_line(void) {
    /* Coroutines are only compared by address here. */
    static char a, b, c, d, e;
    lua_State *co1 = (lua_State *)&a, *co2 = (lua_State *)&b, *co3 = (lua_State *)&c,
              *co4 = (lua_State *)&d, *co5 = (lua_State *)&e;
    sgw_pgpool *p = pgpool_new("", 2, 4, 60000);
    check(p != NULL, "a pool of two", NULL);
    int st;
    sgw_pg *p1 = pgpool_acquire(p, co1, &st);
    check(p1 && st == PGPOOL_GRANTED, "the first coroutine gets a connection", NULL);
    sgw_pg *p2 = pgpool_acquire(p, co2, &st);
    check(p2 && p2 != p1 && st == PGPOOL_GRANTED, "the second gets the other one", NULL);
    check(pgpool_using(p, co1) == p1 && pgpool_held(p, co1) == NULL, "taken, not held", NULL);
    check(pgpool_acquire(p, co3, &st) == NULL && st == PGPOOL_WAITING, "the third waits", NULL);
    check(pgpool_acquire(p, co4, &st) == NULL && st == PGPOOL_WAITING, "the fourth waits", NULL);
    check(!pgpool_ready(p), "nothing free: nobody to wake", NULL);

    resumed r = { .n = 0 };
    pgpool_drive(p, NULL, 0, note_ready, &r);
    check(r.n == 0, "nothing to resume while all are busy", NULL);

    pgpool_release(p, p1);
    check(pgpool_ready(p), "a free connection and a waiter", NULL);
    pgpool_drive(p, NULL, 0, note_ready, &r);
    check(r.n == 1 && r.co[0] == co3, "the first in line is resumed", NULL);
    check(pgpool_acquire(p, co3, &st) == p1 && st == PGPOOL_GRANTED, "with the freed connection", NULL);
    check(pgpool_acquire(p, co3, &st) == p1 && st == PGPOOL_GRANTED, "asking again gives the same", NULL);
    check(!pgpool_ready(p), "the fourth still waits, nothing free", NULL);

    /* A coroutine that ends gives back what it had, even held. */
    pgpool_hold(p, p2, 1);
    check(pgpool_held(p, co2) == p2, "held for a transaction", NULL);
    pgpool_forget(p, co2);
    check(pgpool_using(p, co2) == NULL, "forgotten", NULL);
    r.n = 0;
    pgpool_drive(p, NULL, 0, note_ready, &r);
    check(r.n == 1 && r.co[0] == co4, "the next in line gets it", NULL);

    /* Granted but ended before it was resumed: the connection moves on. */
    check(pgpool_acquire(p, co5, &st) == NULL && st == PGPOOL_WAITING, "a new one waits", NULL);
    pgpool_forget(p, co4);
    r.n = 0;
    pgpool_drive(p, NULL, 0, note_ready, &r);
    check(r.n == 1 && r.co[0] == co5, "a connection given to an ended coroutine goes to the next", NULL);
    check(pgpool_acquire(p, co5, &st) == p2, "and it gets it", NULL);
    pgpool_free(p);

    /* A wait has a bound. */
    p = pgpool_new("", 1, 2, 0);
    pgpool_acquire(p, co1, &st);
    check(pgpool_acquire(p, co2, &st) == NULL && st == PGPOOL_WAITING, "waits", NULL);
    r.n = 0;
    pgpool_drive(p, NULL, 0, note_ready, &r);
    check(r.n == 1 && r.co[0] == co2, "resumed when its wait ran out", NULL);
    check(pgpool_acquire(p, co2, &st) == NULL && st == PGPOOL_EXPIRED, "and told so", NULL);
    check(pgpool_acquire(p, co2, &st) == NULL && st == PGPOOL_WAITING, "asking anew waits anew", NULL);
    pgpool_free(p);
}

/* ------------------------------------------------------------ coroutines on a database */

#define NCO 12

typedef struct loop {
    sgw_worker *w;
    lua_State  *co[NCO];
    int         ref[NCO];
    int         n;
    int         done;
} loop;

static int l_check(lua_State *L) {
    check(lua_toboolean(L, 1), luaL_optstring(L, 2, "(no label)"), NULL);
    return 0;
}

static void resume(loop *lp, lua_State *co) {
    int i = 0;
    while (i < lp->n && lp->co[i] != co) i++;
    if (i == lp->n) return;
    pgpool_set_current(lp->w->pgpool, co);
    int nres = 0;
    int st = lua_resume(co, lp->w->L, 0, &nres);
    pgpool_set_current(lp->w->pgpool, NULL);
    if (st == LUA_YIELD) {
        int ours = nres == 1 && lua_touserdata(co, -1) == (void *)lp->w->pgpool;
        lua_pop(co, nres);
        if (ours) return;
        check(0, "a coroutine yielded something other than the pool", NULL);
    } else if (st != LUA_OK) {
        check(0, "a coroutine raised", lua_tostring(co, -1));
    }
    pgpool_forget(lp->w->pgpool, co);
    luaL_unref(lp->w->L, LUA_REGISTRYINDEX, lp->ref[i]);
    lp->co[i] = NULL;
    lp->done++;
}

static void on_ready(lua_State *co, int nres, void *ud) {
    (void)nres;
    resume(ud, co);
}

/* Runs each chunk as a coroutine until all have ended (or 20 s passed). */
static void run_all(sgw_worker *w, const char *const *chunks, int n) {
    loop lp = { .w = w, .n = n, .done = 0 };
    for (int i = 0; i < n; i++) {
        lua_State *co = lua_newthread(w->L);
        lp.ref[i] = luaL_ref(w->L, LUA_REGISTRYINDEX);
        lp.co[i] = co;
        if (luaL_loadstring(co, chunks[i])) {
            check(0, "chunk compiles", lua_tostring(co, -1));
            return;
        }
    }
    for (int i = 0; i < n; i++) resume(&lp, lp.co[i]);
    uint64_t deadline = clock_mono_ms() + 20000;
    while (lp.done < n && clock_mono_ms() < deadline) {
        struct pollfd fds[16];
        int nf = pgpool_pollfds(w->pgpool, fds, 16);
        if (!pgpool_ready(w->pgpool)) poll(fds, (nfds_t)nf, 50);
        pgpool_drive(w->pgpool, fds, nf, on_ready, &lp);
    }
    check(lp.done == n, "every coroutine ended", NULL);
}

/* Waits (5 s at most) until n sockets of this process, except's aside,
 * have something to read: the pool's connections have heard the server's
 * FATAL, so the next statement surely meets a closed session. */
static void wait_sockets_readable(int n, int except) {
    uint64_t deadline = clock_mono_ms() + 5000;
    for (;;) {
        struct pollfd fds[64];
        int nf = 0;
        for (int fd = 3; fd < 1024 && nf < 64; fd++) {
            struct stat st;
            if (fd != except && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
                fds[nf++] = (struct pollfd){ .fd = fd, .events = POLLIN };
        }
        int readable = 0;
        if (poll(fds, (nfds_t)nf, 0) > 0)
            for (int i = 0; i < nf; i++) readable += (fds[i].revents & POLLIN) != 0;
        if (readable >= n || clock_mono_ms() >= deadline) return;
        /* Until one of those not yet readable is. */
        int waiting = 0;
        for (int i = 0; i < nf; i++)
            if (!(fds[i].revents & POLLIN)) fds[waiting++] = (struct pollfd){ .fd = fds[i].fd, .events = POLLIN };
        poll(fds, (nfds_t)waiting, 50);
    }
}

/* Kills the pool's backends while idle: both connections first run a
 * marked statement, so that the other session can find them. */
static void kill_idle_backends(sgw_worker *w, PGconn *other) {
    static const char *const marked[] = {
        "assert(db.query('SELECT pg_sleep(0.05) /* pgpool-test-marker */'))\n",
        "assert(db.query('SELECT pg_sleep(0.05) /* pgpool-test-marker */'))\n",
    };
    run_all(w, marked, 2);
    PGresult *r = PQexec(other, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                "WHERE pid <> pg_backend_pid() AND query LIKE '%pgpool-test-marker */'");
    check(PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "2") == 0,
          "both pool backends terminated", PQgetvalue(r, 0, 0));
    PQclear(r);
    for (int i = 0; i < 100; i++) {
        r = PQexec(other, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pgpool-test-marker */'");
        int gone = strcmp(PQgetvalue(r, 0, 0), "0") == 0;
        PQclear(r);
        if (gone) break;
        poll(NULL, 0, 20);
    }
    wait_sockets_readable(2, PQsocket(other));
}

/* The other session says how many rows of pgpool_t `who` wrote, and
 * that it is `want`. */
static void expect_rows(PGconn *other, const char *who, const char *want, const char *name) {
    const char *vals[1] = { who };
    PGresult *r = PQexecParams(other, "SELECT count(*) FROM pgpool_t WHERE who = $1", 1, NULL, vals, NULL, NULL, 0);
    check(PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), want) == 0, name, PQgetvalue(r, 0, 0));
    PQclear(r);
}

static const char *setup_sql =
    "DROP TABLE IF EXISTS pgpool_t; CREATE TABLE pgpool_t (who text, n int)";

/* A job worker with a pool of `size` connections and the db module. */
static void worker_open(sgw_worker *w, int id, const char *url, int size) {
    *w = (sgw_worker){ .id = id, .role = "job" };
    w->pg = pg_open(url);
    w->pgpool = pgpool_new(url, size, NCO, 5000);
    w->L = luaL_newstate();
    luaL_openlibs(w->L);
    lua_register(w->L, "check", l_check);
    lapi_db_open(w->L, w);
}

static void worker_close(sgw_worker *w) {
    lua_close(w->L);
    pgpool_free(w->pgpool);
    pg_close(w->pg);
}

/* Runs one chunk on w's pool (see run_all). */
static void run_one(sgw_worker *w, const char *chunk) {
    const char *const one[1] = { chunk };
    run_all(w, one, 1);
}

/* Statements prepared by name, once per session (pgstmt.c), on a pool of
 * one connection so that every chunk meets the same session. The session
 * itself says what it holds (pg_prepared_statements). */
static void test_names(const char *url, PGconn *other) {
    char err[256];
    sgw_worker w;
    worker_open(&w, 1, url, 1);
    check(luaL_dostring(w.L,
        "function held(like)\n"
        "  return assert(db.query('SELECT count(*) AS n FROM pg_prepared_statements '\n"
        "    .. 'WHERE starts_with(name, $2) AND statement LIKE $1', like, 'sgw_'))[1].n\n"
        "end") == LUA_OK, "held() compiles", NULL);

    run_one(&w,
        "for i = 1, 3 do\n"
        "  local r = db.query('SELECT $1::int AS n /* names-a */', i)\n"
        "  check(r and r[1].n == i, 'a named statement answers each call with its own values')\n"
        "end\n"
        "check(held('%names-a%') == 1, 'prepared once for three calls: ' .. held('%names-a%'))\n"
        "check(held('%plan_cache_mode%') == 1, 'the transaction settings are prepared too')\n"
        "local r, e, state = db.query('SELECT * FROM no_such_table /* names-b */')\n"
        "check(r == nil and state == '42P01', 'a text the server refuses keeps its SQLSTATE: ' .. tostring(state))\n"
        "check(held('%names-b%') == 0, 'and is not remembered as prepared')\n");

    /* A statement marked `generic plan` keeps one plan in the session; the
     * others are planned with their values at every call, and inside a
     * transaction each statement runs in its own mode, a savepoint rolled
     * back included (the server's own counts and settings say so). */
    run_one(&w,
        "local function plans(like)\n"
        "  local r = assert(db.query('SELECT generic_plans AS g, custom_plans AS c FROM pg_prepared_statements '\n"
        "    .. 'WHERE statement LIKE $1', like))[1]\n"

        "  return r.g .. ' generic, ' .. r.c .. ' custom'\n"
        "end\n"
        "for i = 1, 3 do\n"
        "  check(db.query('/* generic plan */ SELECT $1::int AS n /* plan-g */', i)[1].n == i, 'marked answers')\n"
        "  check(db.query('SELECT $1::int AS n /* plan-c */', i)[1].n == i, 'unmarked answers')\n"
        "end\n"
        "check(plans('%plan-g%') == '3 generic, 0 custom', 'a marked statement keeps one plan: ' .. plans('%plan-g%'))\n"
        "check(plans('%plan-c%') == '0 generic, 3 custom', 'the others are planned each call: ' .. plans('%plan-c%'))\n"
        "local MODE = \"SELECT current_setting('plan_cache_mode') AS m\"\n"
        "local function mode(marked, tag) return assert(db.query((marked and '/* generic plan */ ' or '') .. MODE .. tag))[1].m end\n"
        "local seen = {}\n"
        "db.transaction(function()\n"
        "  seen[1] = mode(false, ' /* tx-1 */')\n"
        "  seen[2] = mode(true, ' /* tx-2 */')\n"
        "  seen[3] = mode(true, ' /* tx-3 */')\n"
        "  seen[4] = mode(false, ' /* tx-4 */')\n"
        "  pcall(db.transaction, function() seen[5] = mode(true, ' /* tx-5 */') error('undo') end)\n"
        "  seen[6] = mode(true, ' /* tx-6 */')\n"
        "  seen[7] = mode(false, ' /* tx-7 */')\n"
        "end)\n"
        "check(table.concat(seen, ' ') == 'force_custom_plan force_generic_plan force_generic_plan force_custom_plan '\n"
        "  .. 'force_generic_plan force_generic_plan force_custom_plan', 'each statement in its own mode: ' .. table.concat(seen, ' '))\n"
        "check(mode(true, ' /* own-tx */') == 'force_generic_plan', 'a marked statement in a transaction of its own')\n"
        "check(mode(false, ' /* own-tx */') == 'force_custom_plan', 'and an unmarked one after it')\n");

    /* The set is bounded: texts past PGSTMT_MAX go unnamed, and answer. */
    char bounded[512];
    snprintf(bounded, sizeof bounded,
        "for i = 1, %d do\n"
        "  local r = db.query('SELECT ' .. i .. ' AS n /* names-many */')\n"
        "  check(r and r[1].n == i, 'every one of many texts answers')\n"
        "end\n"
        "local all = assert(db.query('SELECT count(*) AS n FROM pg_prepared_statements'))[1].n\n"
        "check(all <= %d, 'at most PGSTMT_MAX prepared in the session: ' .. all)\n"
        "check(held('%%names-many%%') >= %d, 'the first ones were prepared')\n",
        PGSTMT_MAX + 40, PGSTMT_MAX, PGSTMT_MAX / 2);
    run_one(&w, bounded);

    /* A table's columns change under a prepared statement: the session is
     * replaced and the statement answers with the new columns. */
    PQclear(PQexec(other, "DROP TABLE IF EXISTS names_t; CREATE TABLE names_t (a int); "
                          "INSERT INTO names_t VALUES (1)"));
    run_one(&w, "local r = assert(db.query('SELECT * FROM names_t')) check(r[1].a == 1, 'before')");
    PQclear(PQexec(other, "ALTER TABLE names_t ADD COLUMN b int DEFAULT 2"));
    run_one(&w,
        "local r, e = db.query('SELECT * FROM names_t')\n"
        "check(r and r[1].a == 1 and r[1].b == 2, 'the new column after a stale plan: ' .. tostring(e))\n");
    PQclear(PQexec(other, "DROP TABLE names_t"));

    /* A pooler without prepared statements hands the next transaction to a
     * session that lacks the name: that statement is tried again unnamed,
     * and names stay off. DEALLOCATE ALL (sent unnamed) plays the pooler. */
    run_one(&w, "check(db.query('SELECT 7 AS n /* names-c */')[1].n == 7, 'prepared')");
    config_set("database.prepared_statements", "false", err, sizeof err);
    run_one(&w, "assert(db.exec('DEALLOCATE ALL'))");
    config_set("database.prepared_statements", "true", err, sizeof err);
    run_one(&w,
        "local r, e = db.query('SELECT 7 AS n /* names-c */')\n"
        "check(r and r[1].n == 7, 'a lost name is tried again unnamed: ' .. tostring(e))\n"
        "check(db.query('SELECT 8 AS n /* names-d */')[1].n == 8, 'a new text answers')\n"
        "check(assert(db.query('SELECT count(*) AS n FROM pg_prepared_statements'))[1].n == 0,\n"
        "      'and nothing is prepared any more')\n");

    worker_close(&w);
}

/* Lua: database.statement_timeout_ms back to the configured value. */
/* A coroutine given up in the middle of a transaction (its job abandoned
 * when a drain runs out, say): its connection is dropped, and the next
 * coroutine on that slot gets a fresh session, not a failure about a
 * transaction that is no longer anybody's. */
static void test_forgotten_in_transaction(const char *url) {
    sgw_worker w;
    worker_open(&w, 0, url, 1);
    run_one(&w, "assert(db.query('SELECT 1'))");   /* connected: the next yield is the statement's */
    lua_State *co = lua_newthread(w.L);
    int ref = luaL_ref(w.L, LUA_REGISTRYINDEX);
    check(luaL_loadstring(co, "db.transaction(function() db.query('SELECT pg_sleep(0.05)') end)") == LUA_OK,
          "chunk compiles", NULL);
    pgpool_set_current(w.pgpool, co);
    int nres = 0;
    int st = lua_resume(co, w.L, 0, &nres);
    pgpool_set_current(w.pgpool, NULL);
    check(st == LUA_YIELD, "the transaction's first statement is in flight", NULL);
    lua_pop(co, nres);
    pgpool_forget(w.pgpool, co);
    luaL_unref(w.L, LUA_REGISTRYINDEX, ref);
    run_one(&w, "local r, e = db.query('SELECT 3 AS three')\n"
                "check(r and r[1].three == 3, 'the next user of the connection: ' .. tostring(e))\n"
                "local ok, err = pcall(db.transaction, function() assert(db.exec('SELECT 1')) end)\n"
                "check(ok, 'and a transaction of its own: ' .. tostring(err))\n");
    worker_close(&w);
}

static int restore_timeout(lua_State *L) {
    (void)L;
    char err[256];
    if (config_set("database.statement_timeout_ms", "5000", err, sizeof err)) fprintf(stderr, "config: %s\n", err);
    return 0;
}

static void test_on_database(const char *url) {
    PGconn *other = PQconnectdb(url);
    check(PQstatus(other) == CONNECTION_OK, "a second session", PQerrorMessage(other));
    PQclear(PQexec(other, "SET client_min_messages = warning"));
    PQclear(PQexec(other, setup_sql));

    sgw_worker w;
    worker_open(&w, 0, url, 2);
    luaL_dostring(w.L, "started, finished = 0, 0");

    /* Ten statements of 0.2 s on two connections: all are sent or waiting
     * before the first answer comes back, and each gets its own answer. */
    static const char *sleepers[10];
    char buf[10][256];
    for (int i = 0; i < 10; i++) {
        snprintf(buf[i], sizeof buf[i],
                 "started = started + 1\n"
                 "local rows, err = db.query('SELECT pg_sleep(0.2), $1::int AS n', %d)\n"
                 "check(rows and rows[1].n == %d, 'its own answer: ' .. tostring(err))\n"
                 "check(started == 10, 'all started before any answer: ' .. started)\n"
                 "finished = finished + 1\n", i, i);
        sleepers[i] = buf[i];
    }
    run_all(&w, sleepers, 10);
    luaL_dostring(w.L, "check(finished == 10, 'ten answers')");

    static const char *const tx[] = {
        /* commits, with a nested transaction that fails and is caught */
        "local a, b = db.transaction(function()\n"
        "  check(db.in_transaction(), 'inside')\n"
        "  assert(db.exec('INSERT INTO pgpool_t VALUES ($1, 1)', 'commit'))\n"
        "  local ok, err = pcall(db.transaction, function()\n"
        "    assert(db.exec('INSERT INTO pgpool_t VALUES ($1, 2)', 'commit'))\n"
        "    error('inner', 0)\n"
        "  end)\n"
        "  check(not ok and err == 'inner', 'the inner error comes through unchanged')\n"
        "  check(db.in_transaction(), 'still inside the outer one')\n"
        "  db.transaction(function() assert(db.exec('INSERT INTO pgpool_t VALUES ($1, 3)', 'commit')) end)\n"
        "  return 'ok', 42\n"
        "end)\n"
        "check(a == 'ok' and b == 42, 'fn\\'s results')\n"
        "check(not db.in_transaction(), 'outside after')\n",
        /* an error rolls everything back and comes through */
        "local ok, err = pcall(db.transaction, function()\n"
        "  assert(db.exec('INSERT INTO pgpool_t VALUES ($1, 1)', 'rollback'))\n"
        "  error({ code = 7 })\n"
        "end)\n"
        "check(not ok and type(err) == 'table' and err.code == 7, 'the error object unchanged')\n",
        /* a statement fails and fn goes on: the transaction says so */
        "local ok, err = pcall(db.transaction, function()\n"
        "  assert(db.exec('INSERT INTO pgpool_t VALUES ($1, 1)', 'aborted'))\n"
        "  local r, e = db.query('SELECT 1/0')\n"
        "  check(r == nil and e:match('division by zero'), 'the failure is a value')\n"
        "end)\n"
        "check(not ok and tostring(err):match('rolled back'), 'an aborted transaction raises: ' .. tostring(err))\n",
        /* statements outside transactions meanwhile */
        "for i = 1, 20 do\n"
        "  local r = db.query('SELECT $1::int AS i', i)\n"
        "  check(r and r[1].i == i, 'a statement between transactions')\n"
        "end\n"
        "local r, e, state = db.query('SELECT * FROM no_such_table')\n"
        "check(r == nil and state == '42P01', 'an error keeps its SQLSTATE')\n",
    };
    run_all(&w, tx, 4);
    PGresult *r = PQexec(other, "SELECT string_agg(who || n, ',' ORDER BY who, n) FROM pgpool_t");
    check(PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "commit1,commit3") == 0,
          "only the committed rows are there", PQgetvalue(r, 0, 0));
    PQclear(r);

    /* BEGIN goes with a transaction's first statement: whatever comes
     * first (a savepoint, a statement that fails, a blocking statement of
     * a nested coroutine, nothing at all) still runs inside it. */
    PQclear(PQexec(other, "DELETE FROM pgpool_t"));
    static const char *const first[] = {
        "db.transaction(function()\n"
        "  local ok = pcall(db.transaction, function()\n"
        "    assert(db.exec('INSERT INTO pgpool_t VALUES ($1, 1)', 'first'))\n"
        "    error('inner', 0)\n"
        "  end)\n"
        "  check(not ok, 'a savepoint first: its error comes through')\n"
        "  assert(db.exec('INSERT INTO pgpool_t VALUES ($1, 2)', 'first'))\n"
        "end)\n",
        "local ok, err = pcall(db.transaction, function()\n"
        "  local r, e = db.query('SELECT 1/0')\n"
        "  check(r == nil and e:match('division by zero'), 'a first statement that fails')\n"
        "end)\n"
        "check(not ok and tostring(err):match('rolled back'), 'rolls the transaction back: ' .. tostring(err))\n",
        "local ok, err = pcall(db.transaction, function()\n"
        "  coroutine.wrap(function() assert(db.exec('INSERT INTO pgpool_t VALUES ($1, 3)', 'first')) end)()\n"
        "  check(db.query('SELECT count(*) AS n FROM pgpool_t WHERE n = 3')[1].n == 1, 'seen in the transaction')\n"
        "  error('undo', 0)\n"
        "end)\n"
        "check(not ok and err == 'undo', 'a nested coroutine first, then an error')\n",
        "local ok, err = pcall(db.transaction, function() error('nothing sent', 0) end)\n"
        "check(not ok and err == 'nothing sent', 'an error before any statement comes through')\n"
        "check(db.transaction(function() return 5 end) == 5, 'a transaction of no statement returns fn\\'s results')\n"
        "check(not db.in_transaction(), 'and ends')\n",
    };
    run_all(&w, first, 4);
    r = PQexec(other, "SELECT string_agg(who || n, ',' ORDER BY who, n) FROM pgpool_t");
    check(PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "first2") == 0,
          "a savepoint first kept the outer row only; the nested coroutine's row rolled back", PQgetvalue(r, 0, 0));
    PQclear(r);

    /* Something before the BEGIN fails (the settings: a statement_timeout
     * PostgreSQL refuses), so the server rolls the first pipeline back and
     * the transaction never began. With the setting good again, a statement
     * after the caught failure is refused instead of committing alone, and
     * the transaction raises instead of answering a COMMIT without one. */
    char cerr[256] = "";
    check(config_set("database.statement_timeout_ms", "3000000000", cerr, sizeof cerr) == 0,
          "a timeout out of PostgreSQL's range", cerr);
    lua_register(w.L, "restore_timeout", restore_timeout);
    run_all(&w, (const char *const[]){
        "local ok, err = pcall(db.transaction, function()\n"
        "  local r, e = db.query('SELECT 1 AS one')\n"
        "  check(r == nil and tostring(e):match('statement_timeout'), 'the first statement fails: ' .. tostring(e))\n"
        "  restore_timeout()\n"
        "  local n, e2, state = db.exec('INSERT INTO pgpool_t VALUES ($1, 1)', 'nobegin')\n"
        "  check(n == nil and state == '25P02', 'the next one is refused: ' .. tostring(e2))\n"
        "end)\n"
        "check(not ok and tostring(err):match('rolled back'), 'the transaction raises: ' .. tostring(err))\n"
        "check(db.query('SELECT 2 AS two')[1].two == 2, 'the connection serves the next caller')\n" }, 1);
    expect_rows(other, "nobegin", "0", "nothing of it was committed");

    /* A statement that cannot be sent (a NUL in a parameter): nil and the
     * failure outside a transaction; inside one it raises, so that fn
     * cannot go on and commit what came before without it. */
    run_one(&w,
            "local n, e, state = db.exec('INSERT INTO pgpool_t VALUES ($1, 1)', 'nul\\0byte')\n"
            "check(n == nil and state == '22021', 'outside a transaction: nil and 22021: ' .. tostring(e))\n"
            "local ok, err = pcall(db.transaction, function()\n"
            "  assert(db.exec('INSERT INTO pgpool_t VALUES ($1, 1)', 'before_nul'))\n"
            "  db.exec('INSERT INTO pgpool_t VALUES ($1, 1)', 'nul\\0byte')\n"
            "end)\n"
            "check(not ok and tostring(err):match('zero byte'), 'inside one it raises: ' .. tostring(err))\n");
    expect_rows(other, "before_nul", "0", "and what came before it in the transaction is rolled back");

    /* A BEGIN by hand outside db.transaction: its connection would go back
     * to the pool inside the transaction and take in the next caller's
     * statements. It raises, and the next statement commits on its own. */
    run_one(&w,
            "local ok, err = pcall(db.exec, 'BEGIN')\n"
            "check(not ok and tostring(err):match('left a transaction open'), 'a BEGIN by hand raises: ' .. tostring(err))\n"
            "check(db.exec('INSERT INTO pgpool_t VALUES ($1, 1)', 'after_begin') == 1, 'the next statement runs')\n");
    expect_rows(other, "after_begin", "1", "and is committed, in no transaction left open");

    /* Backends killed while idle: the next statement finds the session
     * closed before it is sent and goes on a new one. */
    kill_idle_backends(&w, other);
    static const char *const after_kill[] = {
        "local r, e = db.query('SELECT 1 AS one')\n"
        "check(r and r[1].one == 1, 'reconnected after the backend died: ' .. tostring(e))\n",
        "local r, e = db.query('SELECT 2 AS two')\n"
        "check(r and r[1].two == 2, 'the other one too: ' .. tostring(e))\n",
    };
    run_all(&w, after_kill, 2);

    /* So does a transaction: its BEGIN goes on a new session. */
    kill_idle_backends(&w, other);
    run_one(&w,
            "local ok, one = pcall(db.transaction, function() return db.query('SELECT 1 AS one')[1].one end)\n"
            "check(ok and one == 1, 'a transaction begins on a new session: ' .. tostring(one))\n");

    /* A session that breaks once the statement is sent: the statement may
     * have run, so it is not sent again (nextval, which no rollback undoes,
     * counts the runs); in a transaction, the BEGIN that rode with it fails
     * too and the transaction says the database is unavailable. */
    PQclear(PQexec(other, "DROP SEQUENCE IF EXISTS pgpool_runs; CREATE SEQUENCE pgpool_runs"));
    run_one(&w,
            "local r, e = db.query(\"SELECT nextval('pgpool_runs'), pg_terminate_backend(pg_backend_pid())\")\n"
            "check(r == nil and tostring(e):match('^database unavailable'), 'a statement ending its session fails: ' .. tostring(e))\n");
    r = PQexec(other, "SELECT last_value FROM pgpool_runs");
    check(PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "1") == 0,
          "a statement whose session broke after the send is not sent again (runs)", PQgetvalue(r, 0, 0));
    PQclear(r);
    run_one(&w,
            "local ok, err = pcall(db.transaction, function()\n"
            "  local r, e = db.query('SELECT pg_terminate_backend(pg_backend_pid())')\n"
            "  check(r == nil and tostring(e):match('^database unavailable'), 'the first statement: ' .. tostring(e))\n"
            "end)\n"
            "check(not ok and tostring(err):match('^database unavailable') and not tostring(err):match('interrupted'),\n"
            "      'a BEGIN whose session broke says the database is unavailable: ' .. tostring(err))\n");
    PQclear(PQexec(other, "DROP SEQUENCE pgpool_runs"));

    /* A statement the database gives up for the moment (a lock not taken
     * in time), and fn goes on: the transaction, rolled back, says busy as
     * the statement did (the dispatcher answers 503, not 500). */
    PQclear(PQexec(other, "BEGIN; LOCK TABLE pgpool_t IN ACCESS EXCLUSIVE MODE"));
    run_one(&w,
            "local n, e, state\n"
            "local ok, err = pcall(db.transaction, function()\n"
            "  assert(db.exec(\"SET LOCAL lock_timeout = '100ms'\"))\n"
            "  n, e, state = db.exec('INSERT INTO pgpool_t VALUES ($1, 1)', 'locked')\n"
            "end)\n"
            "check(n == nil and state == '55P03' and tostring(e):match('^database busy: '), 'a lock not taken in time: ' .. tostring(e))\n"
            "check(not ok and tostring(err):match('^database busy: transaction rolled back'),\n"
            "      'the transaction that went on says busy: ' .. tostring(err))\n");
    PQclear(PQexec(other, "ROLLBACK"));

    /* db.batch: statements sent together in the caller's transaction (the
     * first of it here, so BEGIN rides along), each after the one before;
     * twice, the second time by the names the first prepared. */
    static const char *const batch[] = {
        "for round = 1, 2 do\n"
        "  db.transaction(function()\n"
        "    local r, e = db.batch({'/* generic plan */ INSERT INTO pgpool_t VALUES ($1, $2) RETURNING n', 'batch', round},\n"
        "                          {'SELECT count(*)::int AS c FROM pgpool_t WHERE who = $1', 'batch'})\n"
        "    check(r and #r == 2 and r[1][1].n == round and r[2][1].c == round,\n"
        "          'both answers, the second after the first: ' .. tostring(e))\n"
        "  end)\n"
        "end\n"
        "local ok, err = pcall(db.transaction, function()\n"
        "  assert(db.exec('INSERT INTO pgpool_t VALUES ($1, 1)', 'batchfail'))\n"
        "  local r, e, code = db.batch({'SELECT 1/0'}, {'INSERT INTO pgpool_t VALUES ($1, 2)', 'batchfail'})\n"
        "  check(r == nil and code == '22012', 'the first failure comes back: ' .. tostring(e))\n"
        "  error(e, 0)\n"
        "end)\n"
        "check(not ok and tostring(err):match('division by zero'), 'the transaction fails: ' .. tostring(err))\n"
        "db.transaction(function()\n"
        "  local r, e = coroutine.wrap(function()\n"
        "    return db.batch({'INSERT INTO pgpool_t VALUES ($1, $2)', 'nested', nil, n = 2}, {'SELECT count(*)::int AS c FROM pgpool_t WHERE who = $1', 'nested'})\n"
        "  end)()\n"
        "  check(r and r[1].affected == 1 and r[2][1].c == 1, 'a nested coroutine blocks, one after the other: ' .. tostring(e))\n"
        "end)\n"
        "check(not pcall(db.batch, {'SELECT 1'}), 'outside a transaction db.batch raises')\n"
        "check(not pcall(db.transaction, function() db.batch() end), 'no statement raises')\n"
        "check(not pcall(db.transaction, function() db.batch({1}) end), 'a statement without sql raises')\n"
        "check(not pcall(db.transaction, function() db.batch({'SELECT $1::text', print}) end),\n"
        "      'a parameter the database cannot take raises (and leaks nothing)')\n",
    };
    run_all(&w, batch, 1);
    r = PQexec(other, "SELECT count(*) FILTER (WHERE who = 'batch') || ' ' || count(*) FILTER (WHERE who = 'batchfail') "
                      "|| ' ' || count(*) FILTER (WHERE who = 'nested') FROM pgpool_t");
    check(PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "2 0 1") == 0,
          "the batches committed, the failed one nothing", PQgetvalue(r, 0, 0));
    PQclear(r);

    test_forgotten_in_transaction(url);
    test_names(url, other);                      /* last: it turns names off */
    PQclear(PQexec(other, "DROP TABLE pgpool_t"));
    PQfinish(other);
    worker_close(&w);
}

/* A server that takes the connection and never answers (a listening
 * socket nobody accepts from: the kernel completes the handshake): the
 * statement fails once connect_timeout has passed, instead of waiting on
 * it for as long as the socket lives. No database needed. */
static void test_connect_timeout(void) {
    int port, fd = test_silent_listener(&port);
    if (fd < 0) {
        check(0, "a listener that never answers", "cannot listen");
        return;
    }
    char url[160];
    snprintf(url, sizeof url, "host=127.0.0.1 port=%d dbname=silent user=nobody connect_timeout=1", port);
    sgw_worker w;
    worker_open(&w, 9, url, 1);
    run_one(&w,
            "local r, e, state = db.query('SELECT 1')\n"
            "check(r == nil and state == '08001' and tostring(e):match('timeout expired while connecting'),\n"
            "      'a connection the server never answers fails at connect_timeout: ' .. tostring(e))\n");
    worker_close(&w);
    close(fd);
}

/* A multi-host conninfo whose first host takes the connection and never
 * answers: after connect_timeout the next host is tried, and the statement
 * runs there (libpq's own blocking connect does this; one driven without
 * waiting would give up on the first host). */
static void test_connect_next_host(const char *url) {
    int port, fd = test_silent_listener(&port);
    PQconninfoOption *opts = PQconninfoParse(url, NULL);
    if (fd < 0 || !opts) {
        check(0, "a listener that never answers, and the test database's conninfo", "cannot listen or parse");
        if (fd >= 0) close(fd);
        if (opts) PQconninfoFree(opts);
        return;
    }
    const char *host = "", *db_port = "", *dbname = "", *user = "";
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        const char *v = o->val ? o->val : "";
        if (strcmp(o->keyword, "host") == 0) host = v;
        else if (strcmp(o->keyword, "port") == 0) db_port = v;
        else if (strcmp(o->keyword, "dbname") == 0) dbname = v;
        else if (strcmp(o->keyword, "user") == 0) user = v;
    }
    /* As settings, as a URL, and with the silent host twice (two restarts). */
    char multi[3][512];
    snprintf(multi[0], sizeof multi[0], "host=127.0.0.1,%s port=%d,%s dbname=%s user=%s connect_timeout=1", host, port,
             db_port, dbname, user);
    snprintf(multi[1], sizeof multi[1], "postgresql://%s@127.0.0.1:%d,%s:%s/%s?connect_timeout=1", user, port, host,
             db_port, dbname);
    snprintf(multi[2], sizeof multi[2], "host=127.0.0.1,127.0.0.1,%s port=%d,%d,%s dbname=%s user=%s connect_timeout=1",
             host, port, port, db_port, dbname, user);
    PQconninfoFree(opts);
    for (int i = 0; i < 3; i++) {
        sgw_worker w;
        worker_open(&w, 10 + i, multi[i], 1);
        char chunk[1024];
        snprintf(chunk, sizeof chunk,
                 "local r, e = db.query('SELECT 1 AS one')\n"
                 "check(r and r[1] and r[1].one == 1,\n"
                 "      'the hosts that never answer are left for the next one at connect_timeout (%s): ' .. tostring(e))\n",
                 i == 0 ? "settings" : i == 1 ? "URL" : "twice");
        run_one(&w, chunk);
        worker_close(&w);
    }
    close(fd);
}

int main(void) {
    char err[512];
    if (config_load_file("config/sgw.conf", 1, err, sizeof err)) {
        fprintf(stderr, "config: %s\n", err);
        return 1;
    }
    test_line();
    test_connect_timeout();
    const char *url = getenv("SGW_TEST_DATABASE_URL");
    if (url && *url) {
        test_on_database(url);
        test_connect_next_host(url);
    }
    else printf("SKIP: the database part (SGW_TEST_DATABASE_URL not set)\n");
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/*
 * test_pg.c — pg.c against a real PostgreSQL named by SGW_TEST_DATABASE_URL:
 * the Lua `db` module (parameters, result types, errors, transactions),
 * session reset, reconnects, and concurrent `migrate` runs. Without the
 * variable it skips, so the suite runs anywhere.
 */
#include "sgw.h"

#include <libpq-fe.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int pg_in_transaction(sgw_pg *pg);

static int passed, failed;
static const char *url;
static PGconn *other;           /* a second session, to kill the first one's backend */

#define CHECK(cond, label) check_at((cond), (label), __FILE__, __LINE__)

static void check_at(int ok, const char *label, const char *where, int line) {
    if (ok) {
        passed++;
        return;
    }
    failed++;
    fprintf(stderr, "FAIL %s:%d: %s\n", where, line, label);
}

/* check(cond, label) for the Lua parts. */
static int l_check(lua_State *L) {
    lua_Debug ar;
    int line = 0;
    const char *src = "lua";
    if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "Sl", &ar)) {
        line = ar.currentline;
        src = ar.short_src;
    }
    check_at(lua_toboolean(L, 1), luaL_optstring(L, 2, "(no label)"), src, line);
    return 0;
}

static void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* The worker connection whose backend kill_backend ends (set by main). */
static sgw_pg *watched;

/* kill_backend(pid): terminates that backend from the other session and
 * waits until it is gone and the watched connection has heard of it (the
 * server's FATAL is there to read), so the next statement surely meets a
 * closed session. */
static int l_kill_backend(lua_State *L) {
    char pid[32], sql[160];
    snprintf(pid, sizeof pid, "%lld", (long long)luaL_checkinteger(L, 1));
    const char *vals[1] = { pid };
    PQclear(PQexecParams(other, "SELECT pg_terminate_backend($1::int)", 1, NULL, vals, NULL, NULL, 0));
    snprintf(sql, sizeof sql, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", pid);
    for (int i = 0; i < 100; i++) {
        PGresult *r = PQexec(other, sql);
        int alive = PQntuples(r) > 0;
        PQclear(r);
        if (!alive) break;
        sleep_ms(20);
    }
    PGconn *c = watched ? pg_raw(watched) : NULL;
    struct pollfd fd = { .fd = c ? PQsocket(c) : -1, .events = POLLIN };
    if (fd.fd >= 0) poll(&fd, 1, 5000);
    return 0;
}

/* hold_lock(sql) runs sql in a transaction of the other session, which
 * keeps whatever locks it took until release_lock(). */
static int l_hold_lock(lua_State *L) {
    PQclear(PQexec(other, "BEGIN"));
    PGresult *r = PQexec(other, luaL_checkstring(L, 1));
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok) fprintf(stderr, "  hold_lock: %s", PQresultErrorMessage(r));
    PQclear(r);
    lua_pushboolean(L, ok);
    return 1;
}

static int l_release_lock(lua_State *L) {
    (void)L;
    PQclear(PQexec(other, "ROLLBACK"));
    return 0;
}

/* Runs a chunk; an error it raises counts as one failure. */
static void run_lua(lua_State *L, const char *name, const char *code) {
    if (luaL_loadbuffer(L, code, strlen(code), name) || lua_pcall(L, 0, 0, 0)) {
        failed++;
        fprintf(stderr, "FAIL %s raised: %s\n", name, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
}

static lua_State *new_state(sgw_worker *w) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_register(L, "check", l_check);
    lua_register(L, "kill_backend", l_kill_backend);
    lua_register(L, "hold_lock", l_hold_lock);
    lua_register(L, "release_lock", l_release_lock);
    lapi_db_open(L, w);
    lapi_json_open(L);
    return L;
}

static long long scalar(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    long long v = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0)
                      ? atoll(PQgetvalue(r, 0, 0)) : -1;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fprintf(stderr, "  %s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    return v;
}

static const char *types_lua =
    "assert(db.exec([[CREATE TEMP TABLE t (id int PRIMARY KEY, i8 bigint, f float8, n numeric,\n"
    "  b boolean, j jsonb, s text, ts timestamptz, by bytea, u text)]]))\n"
    "local n, err = db.exec('INSERT INTO t (id, i8, f, n, b, j, s, ts) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)',\n"
    "  1, 9007199254740993, 0.1, 2.5, true, {a = 1, list = {1, 2, 3}, s = 'x'}, 'h\\u{e9}llo',\n"
    "  '2026-11-21T10:00:00.123+02:00')\n"
    "check(n == 1, 'exec returns the affected count: ' .. tostring(n) .. ' ' .. tostring(err))\n"
    "local rows = assert(db.query('SELECT * FROM t WHERE id = $1', 1))\n"
    "check(#rows == 1 and rows.affected == 1, 'one row, affected 1')\n"
    "local r = rows[1]\n"
    "check(math.type(r.id) == 'integer' and r.id == 1, 'int4 is an integer')\n"
    "check(math.type(r.i8) == 'integer' and r.i8 == 9007199254740993, 'int8 round-trips exactly')\n"
    "check(math.type(r.f) == 'float' and r.f == 0.1, 'float8 round-trips exactly')\n"
    "check(r.n == 2.5, 'numeric is a number')\n"
    "check(r.b == true, 'bool is a boolean')\n"
    "check(type(r.j) == 'table' and r.j.a == 1 and r.j.list[3] == 3 and r.j.s == 'x', 'jsonb decoded')\n"
    "check(r.s == 'h\\u{e9}llo', 'text')\n"
    "check(r.ts == '2026-11-21 08:00:00.123+00', 'timestamptz reads in UTC: ' .. tostring(r.ts))\n"
    "check(r.by == nil and r.u == nil and rawget(r, 'by') == nil, 'NULL leaves the field absent')\n"
    "\n"
    "r = db.query('SELECT $1::int IS NULL AS a, $2::text IS NULL AS b, $3::bool AS c, $4::text IS NULL AS d',\n"
    "  nil, db.null, false, nil)[1]\n"
    "check(r.a and r.b and r.c == false and r.d, 'nil, db.null and trailing nil are NULL; false')\n"
    "r = db.query([[SELECT $1::float8 AS inf, $2::float8 AS ninf, $3::float8 = 'NaN' AS isnan,\n"
    "  $4::int8 AS neg, $5::numeric AS big]], math.huge, -math.huge, 0/0, -42, 1e300)[1]\n"
    "check(r.inf == math.huge and r.ninf == -math.huge and r.isnan, 'infinities and NaN')\n"
    "check(r.neg == -42 and r.big == 1e300, 'negative integer, large float')\n"
    "r = db.query([[SELECT 1::int2 AS a, 2::int4 AS b, 3::int8 AS c, 4::oid AS d, 1.5::float4 AS e,\n"
    "  10.25::numeric AS f, 'NaN'::numeric AS g, '\\x0102'::bytea AS h, 'x'::varchar AS i]])[1]\n"
    "check(math.type(r.a) == 'integer' and math.type(r.b) == 'integer' and math.type(r.c) == 'integer'\n"
    "  and math.type(r.d) == 'integer', 'int2/int4/int8/oid are integers')\n"
    "check(math.type(r.e) == 'float' and r.e == 1.5 and r.f == 10.25 and r.g ~= r.g, 'float4, numeric, NaN')\n"
    "check(r.h == '\\\\x0102' and r.i == 'x', 'bytea as hex text, varchar as text: ' .. tostring(r.h))\n"
    "r = db.query([[SELECT 'null'::jsonb AS jn, '{\"a\":null}'::json AS jo, '[1,\"x\"]'::jsonb AS ja,\n"
    "  (repeat('[', 1100) || repeat(']', 1100))::json AS deep]])[1]\n"
    "check(r.jn == db.null and r.jo.a == db.null and r.ja[2] == 'x', 'JSON null is cjson.null')\n"
    "check(rawequal(db.null, require('cjson').null), 'db.null is cjson.null')\n"
    "check(type(r.deep) == 'string', 'json cjson cannot decode stays text')\n"
    "rows = db.query('SELECT generate_series(1, 3) AS g')\n"
    "check(#rows == 3 and rows.affected == 3 and rows[3].g == 3, 'several rows')\n"
    "check(db.exec('UPDATE t SET s = $1', 'z') == 1, 'update count')\n"
    "check(db.exec('') == 0, 'empty statement')\n"
    "local none, e0 = db.query('SELECT 1 WHERE false')\n"
    "check(none and #none == 0 and none.affected == 0, 'no rows: ' .. tostring(e0))\n"
    "\n"
    "local x, msg, state = db.query('SELECT $1::text', 'a\\0b')\n"
    "check(x == nil and state == '22021' and msg:match('zero byte'), 'zero byte refused')\n"
    "x, msg, state = db.exec('INSERT INTO t (id) VALUES (1)')\n"
    "check(x == nil and state == '23505' and msg:match('duplicate key') and not msg:match('%s$'),\n"
    "  'unique violation: ' .. tostring(msg))\n"
    "x, msg, state = db.query('SELEC 1')\n"
    "check(x == nil and state == '42601', 'syntax error sqlstate')\n"
    "x, msg, state = db.query('SELECT pg_sleep(2)')\n"
    "check(x == nil and state == '57014', 'statement_timeout applies: ' .. tostring(msg))\n"
    "check(db.query('SELECT 1 AS one')[1].one == 1, 'usable after errors')\n"
    "\n"
    "check(not pcall(db.query), 'missing sql raises')\n"
    "check(not pcall(db.query, {}), 'non-string sql raises')\n"
    "local ok, e = pcall(db.query, 'SELECT $1', function() end)\n"
    "check(not ok and e:match('bad argument #2'), 'a function parameter raises: ' .. tostring(e))\n"
    "check(not pcall(db.exec, 'SELECT $1', {f = function() end}), 'an unencodable table raises')\n"
    "local params, terms = {}, {}\n"
    "for i = 1, 64 do params[i] = i; terms[i] = '$' .. i .. '::int' end\n"
    "r = db.query('SELECT ' .. table.concat(terms, '+') .. ' AS s', table.unpack(params))\n"
    "check(r and r[1].s == 64 * 65 // 2, '64 parameters')\n"
    "params[65] = 65\n"
    "ok, e = pcall(db.query, 'SELECT 1', table.unpack(params))\n"
    "check(not ok and e:match('at most 64'), '65 parameters raise')\n";

/* db.read_result: the result read where it lies, and rows written as JSON
 * by a row view (the listing's page), each value spelled as jsonc.encode
 * spells what db.query makes of it. */
static const char *result_lua =
    "local res <close> = assert(db.read_result([[SELECT * FROM (VALUES\n"
    "  (1, 'a \"q\" \\ / \u00e9' || chr(1) || chr(127), true, 9007199254740993::int8, 0.1::float8, 2.5::numeric,\n"
    "   NULL::text, 99999999999999::int8, 1.5::float4, '2026-11-21 10:00:00+00'::timestamptz),\n"
    "  (2, NULL, false, -42, 1e300, 10, 'x', 100000000000000, NULL, NULL))\n"
    "  AS v(id, s, b, i8, f, n, maybe, big, f4, ts) ORDER BY id]]))\n"
    "check(#res == 2, '#res is the row count')\n"
    "check(res:get(1, 's') == 'a \"q\" \\\\ / \\u{e9}\\1\\127' and res:get(1, 'b') == true, 'get reads text, bool')\n"
    "check(math.type(res:get(2, 'i8')) == 'integer' and res:get(2, 'i8') == -42, 'get reads an integer')\n"
    "check(res:get(2, 's') == nil and select('#', res:get(2, 's')) == 0, 'a NULL is nothing')\n"
    "local view = { '{\"id\":', 'id', 'null', ',\"s\":', 's', '\"\"', ',\"b\":', 'b', 'false', ',\"i8\":', 'i8', 'null',\n"
    "  ',\"f\":', 'f', 'null', ',\"n\":', 'n', 'null', ',\"maybe\":', 'maybe', 'null', ',\"big\":', 'big', '0',\n"
    "  ',\"f4\":', 'f4', '-1', ',\"ts\":', 'ts', '\"never\"', '}' }\n"
    "local page = res:json(view)\n"
    "local want = '[{\"id\":1,\"s\":\"a \\\\\"q\\\\\" \\\\\\\\ / \\u{e9}\\\\u0001\\\\u007f\",\"b\":true,\"i8\":9.007199254741e+15,'\n"
    "  .. '\"f\":0.1,\"n\":2.5,\"maybe\":null,\"big\":99999999999999,\"f4\":1.5,\"ts\":\"2026-11-21 10:00:00+00\"},'\n"
    "  .. '{\"id\":2,\"s\":\"\",\"b\":false,\"i8\":-42,\"f\":1e+300,\"n\":10,\"maybe\":\"x\",\"big\":1e+14,\"f4\":-1,'\n"
    "  .. '\"ts\":\"never\"}]'\n"
    "check(type(page) == 'userdata' and tostring(page) == want, 'rows as JSON: ' .. tostring(page))\n"
    "local rows = assert(db.query('SELECT 9007199254740993::int8 AS i8, 0.1::float8 AS f, 100000000000000::int8 AS big'))\n"
    "check(jsonc.encode(rows[1].i8) == '9.007199254741e+15' and jsonc.encode(rows[1].f) == '0.1'\n"
    "  and jsonc.encode(rows[1].big) == '1e+14', 'spelled as jsonc.encode spells db.query values')\n"
    "check(jsonc.encode({ data = page, n = 1 }) == '{\"data\":' .. want .. ',\"n\":1}', 'encode writes it as it is')\n"
    "check(tostring(res:json(view, 2, 2)) == '[' .. want:match(',({\"id\":2.*})%]$') .. ']', 'a range of rows')\n"
    "check(tostring(res:json(view, 1, 0)) == '[]' and tostring(res:json(view, 3)) == '[]', 'no rows')\n"
    "local function fails(pattern, f, ...)\n"
    "  local ok, err = pcall(f, ...)\n"
    "  check(not ok and tostring(err):find(pattern, 1, true), pattern .. ': ' .. tostring(err))\n"
    "end\n"
    "fails('no such row', res.json, res, view, 0)\n"
    "fails('no such row', res.json, res, view, 1, 3)\n"
    "fails('no such row', res.get, res, 3, 'id')\n"
    "fails('no such column', res.get, res, 1, 'nope')\n"
    "fails('names the column nope', res.json, res, { '{\"x\":', 'nope', 'null', '}' })\n"
    "fails('a row view is a literal', res.json, res, { '{', 'id', 'null' })\n"
    "fails('holds strings only', res.json, res, { '{', 'id', false, '}' })\n"
    "local odd <close> = assert(db.read_result(\"SELECT 'Infinity'::float8 AS f, '{}'::jsonb AS j\"))\n"
    "fails('Cannot serialise number: must not be NaN or Inf', odd.json, odd, { '', 'f', 'null', '' })\n"
    "fails('the column j is JSON', odd.json, odd, { '', 'j', 'null', '' })\n"
    "res:close()\n"
    "fails('the result is closed', res.json, res, view)\n"
    "fails('the result is closed', function() return #res end)\n"
    "local r, e = db.read_result('SELECT nope')\n"
    "check(r == nil and tostring(e):find('nope', 1, true), 'a failed statement is nil, err')\n";

static const char *tx_lua =
    "check(db.in_transaction() == false, 'not in a transaction')\n"
    "local a, b = db.transaction(function(x)\n"
    "  check(db.in_transaction(), 'in_transaction inside')\n"
    "  assert(db.exec('INSERT INTO t (id) VALUES ($1)', x))\n"
    "  return 'r1', x\n"
    "end, 10)\n"
    "check(a == 'r1' and b == 10, 'returns what fn returns')\n"
    "check(#db.query('SELECT 1 FROM t WHERE id = 10') == 1, 'committed')\n"
    "check(select('#', db.transaction(function() return nil, 2 end)) == 2, 'nil results kept')\n"
    "\n"
    "local errobj = {code = 'boom'}\n"
    "local ok, e = pcall(db.transaction, function()\n"
    "  assert(db.exec('INSERT INTO t (id) VALUES (11)'))\n"
    "  error(errobj)\n"
    "end)\n"
    "check(not ok and rawequal(e, errobj), 'the error object is raised again unchanged')\n"
    "check(#db.query('SELECT 1 FROM t WHERE id = 11') == 0, 'rolled back')\n"
    "check(db.in_transaction() == false, 'not in a transaction after an error')\n"
    "ok, e = pcall(db.transaction, function() error('plain', 0) end)\n"
    "check(not ok and e == 'plain', 'string error unchanged')\n"
    "\n"
    "db.transaction(function()\n"
    "  assert(db.exec('INSERT INTO t (id) VALUES (12)'))\n"
    "  db.transaction(function() assert(db.exec('INSERT INTO t (id) VALUES (13)')) end)\n"
    "end)\n"
    "check(#db.query('SELECT 1 FROM t WHERE id IN (12, 13)') == 2, 'nested commit')\n"
    "local r = db.transaction(function()\n"
    "  assert(db.exec('INSERT INTO t (id) VALUES (14)'))\n"
    "  local ok2, e2 = pcall(db.transaction, function()\n"
    "    assert(db.exec('INSERT INTO t (id) VALUES (15)'))\n"
    "    error('inner', 0)\n"
    "  end)\n"
    "  check(not ok2 and e2 == 'inner', 'inner error raised')\n"
    "  check(db.in_transaction(), 'still inside the outer transaction')\n"
    "  return 'outer'\n"
    "end)\n"
    "check(r == 'outer', 'outer result')\n"
    "check(#db.query('SELECT 1 FROM t WHERE id = 14') == 1, 'outer part committed')\n"
    "check(#db.query('SELECT 1 FROM t WHERE id = 15') == 0, 'inner part rolled back')\n"
    "\n"
    "local ok3, msg = pcall(db.transaction, function()\n"
    "  assert(db.exec('INSERT INTO t (id) VALUES (16)'))\n"
    "  local x, _, s = db.exec('INSERT INTO t (id) VALUES (1)')\n"
    "  check(x == nil and s == '23505', 'duplicate inside the transaction')\n"
    "  return 'ignored'\n"
    "end)\n"
    "check(not ok3 and tostring(msg):match('a statement in it failed'), 'a failed statement raises: ' .. tostring(msg))\n"
    "check(#db.query('SELECT 1 FROM t WHERE id = 16') == 0, 'nothing of it committed')\n"
    "\n"
    "local co = coroutine.create(function()\n"
    "  return db.transaction(function()\n"
    "    assert(db.exec('INSERT INTO t (id) VALUES (17)'))\n"
    "    coroutine.yield()\n"
    "  end)\n"
    "end)\n"
    "ok, e = coroutine.resume(co)\n"
    "check(not ok and tostring(e):match('yield'), 'a yield inside a transaction is refused: ' .. tostring(e))\n"
    "check(#db.query('SELECT 1 FROM t WHERE id = 17') == 0, 'and rolled back')\n"
    "check(db.in_transaction() == false, 'not in a transaction after the refused yield')\n"
    "check(not pcall(db.transaction, 5), 'a non-function raises')\n"
    "\n"
    "assert(db.exec('BEGIN'))\n"
    "assert(db.exec('INSERT INTO t (id) VALUES (20)'))\n"
    "check(db.in_transaction(), 'a BEGIN by hand counts as a transaction')\n";

static const char *after_reset_lua =
    "check(db.in_transaction() == false, 'reset ends the transaction')\n"
    "check(#db.query('SELECT 1 FROM t WHERE id = 20') == 0, 'reset rolled back')\n"
    "assert(db.exec('BEGIN'))\n"
    "db.exec('SELEC')\n";

static const char *reconnect_lua =
    "local pid0 = db.query('SELECT pg_backend_pid() AS p')[1].p\n"
    "kill_backend(pid0)\n"
    "local rows, e = db.query('SELECT pg_backend_pid() AS p')\n"
    "check(rows and rows[1].p ~= pid0, 'a broken connection is retried once, transparently: ' .. tostring(e))\n"
    "assert(db.exec('CREATE SEQUENCE ' .. TBL .. '_seq'))\n"
    "local x, msg, state = db.query(\"SELECT nextval('\" .. TBL .. \"_seq'), pg_terminate_backend(pg_backend_pid())\")\n"
    "check(x == nil and (state == '57P01' or state:sub(1, 2) == '08'), 'self-termination fails: ' .. tostring(state))\n"
    "local seq = db.query('SELECT last_value AS v FROM ' .. TBL .. '_seq')\n"
    "check(seq and seq[1].v == 1, 'a statement whose connection broke after the send is not sent again: ran '\n"
    "  .. tostring(seq and seq[1].v) .. ' times')\n"
    "assert(db.exec('DROP SEQUENCE ' .. TBL .. '_seq'))\n"
    "rows = db.query('SELECT 1 AS one')\n"
    "check(rows and rows[1].one == 1, 'reconnected on the next call')\n"
    "\n"
    "local pid1 = db.query('SELECT pg_backend_pid() AS p')[1].p\n"
    "local r, err = pcall(db.transaction, function()\n"
    "  assert(db.exec('INSERT INTO ' .. TBL .. ' VALUES (1)'))\n"
    "  kill_backend(pid1)\n"
    "  local y, e2, s2 = db.exec('INSERT INTO ' .. TBL .. ' VALUES (2)')\n"
    "  check(y == nil and s2 ~= nil, 'a statement after the break fails: ' .. tostring(e2))\n"
    "  y = db.query('SELECT 1')\n"
    "  check(y == nil, 'no reconnect inside a transaction')\n"
    "  return 'done'\n"
    "end)\n"
    "check(r == false and tostring(err):match('^database unavailable: '), 'the transaction raises the lost connection: ' .. tostring(err))\n"
    "check(db.in_transaction() == false, 'no transaction afterwards')\n"
    "rows = db.query('SELECT count(*) AS n FROM ' .. TBL)\n"
    "check(rows and rows[1].n == 0, 'nothing of the broken transaction was committed')\n";

/* Statements the database gives up for the moment read "database busy",
 * those it cannot run at all "database unavailable", as PostgreSQL sends
 * their states; a transaction fn went on with after such a statement says
 * the same when it is rolled back, so that the request is answered 503. */
static const char *busy_lua =
    "local function raise(state)\n"
    "  return db.exec(\"DO $$ BEGIN RAISE EXCEPTION 'provoked' USING ERRCODE = '\" .. state .. \"'; END $$\")\n"
    "end\n"
    "for _, s in ipairs({ '57014', '40P01', '40001', '55P03' }) do\n"
    "  local x, e, state = raise(s)\n"
    "  check(x == nil and state == s and e:match('^database busy: .*provoked'), s .. ' is busy: ' .. tostring(e))\n"
    "end\n"
    "for _, s in ipairs({ '53300', '57P01', '57P03' }) do\n"
    "  local x, e, state = raise(s)\n"
    "  check(x == nil and state == s and e:match('^database unavailable: .*provoked'), s .. ' is unavailable: ' .. tostring(e))\n"
    "end\n"
    "local x, e, state = raise('23505')\n"
    "check(x == nil and state == '23505' and e:match('provoked') and not e:match('^database'), 'a refusal is neither: ' .. tostring(e))\n"
    "\n"
    "check(hold_lock('LOCK TABLE ' .. TBL .. ' IN ACCESS EXCLUSIVE MODE'), 'the other session locks the table')\n"
    "local ok, te = pcall(db.transaction, function()\n"
    "  assert(db.exec(\"SET LOCAL lock_timeout = '100ms'\"))\n"
    "  local y, e2, s2 = db.exec('INSERT INTO ' .. TBL .. ' VALUES (3)')\n"
    "  check(y == nil and s2 == '55P03' and e2:match('^database busy: '), 'a lock not taken in time: ' .. tostring(e2))\n"
    "  return 'went on'\n"
    "end)\n"
    "check(not ok and tostring(te):match('^database busy: transaction rolled back'),\n"
    "  'the transaction that went on after it raises busy: ' .. tostring(te))\n"
    "ok, te = pcall(db.transaction, function()\n"
    "  assert(db.exec(\"SET LOCAL lock_timeout = '100ms'\"))\n"
    "  assert(db.exec('INSERT INTO ' .. TBL .. ' VALUES (4)'))\n"
    "end)\n"
    "check(not ok and tostring(te):match('database busy: '), 'one that raised the statement says busy too: ' .. tostring(te))\n"
    "release_lock()\n"
    "ok, te = pcall(db.transaction, function()\n"
    "  db.exec('INSERT INTO ' .. TBL .. ' VALUES (5)')\n"
    "  db.exec('INSERT INTO no_such_table_sgw VALUES (1)')\n"
    "  db.exec('INSERT INTO ' .. TBL .. ' VALUES (6)')\n"
    "end)\n"
    "check(not ok and tostring(te):match('^transaction rolled back: a statement in it failed'),\n"
    "  'a transaction a refused statement aborted stays 25P02: ' .. tostring(te))\n"
    "local n = db.query('SELECT count(*) AS n FROM ' .. TBL)\n"
    "check(n and n[1].n == 0, 'nothing of them was committed')\n";

static int write_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static void remove_file(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static void test_migrate(void) {
    const char *tmp = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/sgw_test_pg_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    int pid = (int)getpid() % 10000000;
    char table[64], v1[32], v2[32], v3[32], n1[64], n2[64], n3[64], sql[512];
    snprintf(table, sizeof table, "sgw_test_mig_%d", pid);
    snprintf(v1, sizeof v1, "99%07d1", pid);
    snprintf(v2, sizeof v2, "99%07d2", pid);
    snprintf(v3, sizeof v3, "99%07d3", pid);
    snprintf(n1, sizeof n1, "%s_create.sql", v1);
    snprintf(n2, sizeof n2, "%s_more.sql", v2);
    snprintf(n3, sizeof n3, "%s_broken.sql", v3);
    long long existed = scalar(other, "SELECT (to_regclass('schema_migrations') IS NOT NULL)::int");

    /* The sleep holds the lock long enough for the other runs to queue up. */
    snprintf(sql, sizeof sql, "CREATE TABLE %s (id int);\nSELECT pg_sleep(0.3);\n"
             "INSERT INTO %s VALUES (1);\n", table, table);
    write_file(dir, n1, sql);
    snprintf(sql, sizeof sql, "-- second\nINSERT INTO %s VALUES (2);\n", table);
    write_file(dir, n2, sql);
    write_file(dir, "12_too_short.sql", "SELECT 1;\n");
    write_file(dir, "README", "not a migration\n");

    fflush(stdout);
    fflush(stderr);
    pid_t kids[3];
    for (int i = 0; i < 3; i++) {
        kids[i] = fork();
        if (kids[i] == 0) _exit(pg_migrate(url, dir) == 0 ? 0 : 1);
    }
    int all_ok = 1;
    for (int i = 0; i < 3; i++) {
        int st = 0;
        if (kids[i] < 0 || waitpid(kids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            all_ok = 0;
    }
    CHECK(all_ok, "three concurrent migrate runs succeed");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
    CHECK(scalar(other, sql) == 2, "each migration applied exactly once");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM schema_migrations WHERE version IN ('%s', '%s')", v1, v2);
    CHECK(scalar(other, sql) == 2, "both versions recorded");

    snprintf(sql, sizeof sql, "INSERT INTO %s VALUES (3);\n\nSELEC oops;\n", table);
    write_file(dir, n3, sql);
    CHECK(pg_migrate(url, dir) == -1, "a broken migration fails");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
    CHECK(scalar(other, sql) == 2, "and is rolled back");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM schema_migrations WHERE version = '%s'", v3);
    CHECK(scalar(other, sql) == 0, "and is not recorded");
    remove_file(dir, n3);
    CHECK(pg_migrate(url, dir) == 0, "a second run has nothing to do");

    CHECK(pg_migrate("", dir) == -1, "empty database.url fails");
    CHECK(pg_migrate("host=/nonexistent port=1", dir) == -1, "unreachable database fails");
    CHECK(pg_migrate(url, "/nonexistent/migrations") == -1, "missing directory fails");

    snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s; DELETE FROM schema_migrations WHERE version IN "
             "('%s', '%s', '%s')", table, v1, v2, v3);
    PQclear(PQexec(other, sql));
    if (existed == 0) PQclear(PQexec(other, "DROP TABLE IF EXISTS schema_migrations"));
    remove_file(dir, n1);
    remove_file(dir, n2);
    remove_file(dir, "12_too_short.sql");
    remove_file(dir, "README");
    rmdir(dir);
}

int main(void) {
    url = getenv("SGW_TEST_DATABASE_URL");
    if (!url || !*url) {
        printf("SKIP: SGW_TEST_DATABASE_URL not set\n");
        return 0;
    }
    char err[512];
    if (config_load_file("config/sgw.conf", 1, err, sizeof err) ||
        config_set("database.statement_timeout_ms", "500", err, sizeof err)) {
        fprintf(stderr, "config: %s\n", err);
        return 1;
    }
    other = PQconnectdb(url);
    if (PQstatus(other) != CONNECTION_OK) {
        fprintf(stderr, "cannot connect to SGW_TEST_DATABASE_URL: %s", PQerrorMessage(other));
        PQfinish(other);
        return 1;
    }
    PQclear(PQexec(other, "SET client_min_messages = warning"));

    /* Without a database: nil, "database not configured". */
    sgw_worker none = { .id = 0, .role = "cli" };
    lua_State *L0 = new_state(&none);
    run_lua(L0, "=none",
            "local r, e = db.query('SELECT 1')\n"
            "check(r == nil and e == 'database not configured', 'query without a database')\n"
            "check(db.exec('SELECT 1') == nil, 'exec without a database')\n"
            "check(db.transaction(function() end) == nil, 'transaction without a database')\n"
            "check(db.in_transaction() == false, 'in_transaction without a database')\n");
    lua_close(L0);

    sgw_pg *bad = pg_open("host=/nonexistent port=1");
    CHECK(pg_ping(bad) == -1, "ping of an unreachable database fails");
    uint64_t t0 = clock_mono_ms();
    CHECK(pg_raw(bad) == NULL, "no raw connection to an unreachable database");
    CHECK(clock_mono_ms() - t0 < 100, "reconnects are throttled after a failure");
    sgw_worker down = { .id = 0, .role = "http", .pg = bad };
    lua_State *Ld = new_state(&down);
    run_lua(Ld, "=down",
            "local r, e, s = db.query('SELECT 1')\n"
            "check(r == nil and e:match('^database unavailable: ') and s == '08001', 'an outage is worded: ' .. tostring(e))\n"
            "local ran = false\n"
            "local ok, te = pcall(db.transaction, function() ran = true end)\n"
            "check(not ok and not ran and tostring(te):match('^database unavailable: '), 'a BEGIN that fails raises: ' .. tostring(te))\n");
    lua_close(Ld);
    pg_close(bad);

    sgw_worker w = { .id = 1, .role = "http", .pg = pg_open(url) };
    watched = w.pg;
    CHECK(pg_ping(w.pg) == 0, "ping");
    CHECK(pg_raw(w.pg) != NULL, "raw connection");
    lua_State *L = new_state(&w);
    char table[64];
    snprintf(table, sizeof table, "sgw_test_pg_%d", (int)getpid());
    lua_pushstring(L, table);
    lua_setglobal(L, "TBL");

    run_lua(L, "=types", types_lua);
    run_lua(L, "=result", result_lua);
    run_lua(L, "=transactions", tx_lua);
    CHECK(pg_in_transaction(w.pg), "pg_in_transaction sees the open transaction");
    pg_reset_session(w.pg);
    CHECK(!pg_in_transaction(w.pg), "pg_reset_session ends it");
    run_lua(L, "=after_reset", after_reset_lua);
    CHECK(PQtransactionStatus(pg_raw(w.pg)) == PQTRANS_INERROR, "an aborted transaction is open");
    pg_reset_session(w.pg);
    CHECK(PQtransactionStatus(pg_raw(w.pg)) == PQTRANS_IDLE, "pg_reset_session ends an aborted one");

    char sql[128];
    snprintf(sql, sizeof sql, "CREATE TABLE %s (id int)", table);
    PQclear(PQexec(other, sql));
    run_lua(L, "=busy", busy_lua);
    run_lua(L, "=reconnect", reconnect_lua);
    snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", table);
    PQclear(PQexec(other, sql));

    lua_close(L);
    pg_close(w.pg);

    test_migrate();

    PQfinish(other);
    config_free();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

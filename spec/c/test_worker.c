/*
 * test_worker.c — the request scheduler (host/worker.c, over loop.c) with
 * real worker threads running real Lua states built by luart.c from a small
 * handlers tree the test writes. Requests go in the way the listener hands
 * them over (workers_run_inline, then workers_migrate or workers_enqueue)
 * and the test checks what a client would get back: a request that never
 * waits is answered on the caller's thread; one that waits moves to its
 * worker's thread and is answered from there; more requests than the
 * workers' room all get answered, queued first come first served, at most
 * TURN_STARTS started per turn of a loop; a handler that raises, yields by
 * itself, returns no valid response, overruns its time budget or its
 * memory ceiling gets the last-resort 500 and the worker serves on; a new
 * generation of handlers is taken only once a worker runs nothing; a
 * request after the workers stopped gets 503.
 *
 * Waits on the password hashing pool (offload.c) run always; the parts that
 * need a wait the test itself ends (a Redis BLPOP the test pushes to) need
 * a real server (SGW_TEST_REDIS_URL).
 */
#include "sgw.h"
#include "check.h"
#include "lua_tree.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Generous: the sanitizer build is several times slower. */
#define DEADLINE_MS 20000
#define MAX_DONE    128

/* ------------------------------------------------------------ the handlers */

/* lib/dispatch.lua: GET /<action>/<arg> answers 200 with what the action
 * returns. K (lib/testkey.lua) prefixes this run's Redis and shared keys. */
static const char dispatch_lua[] =
    "local K = require('testkey')\n"
    "local version = require('version')\n"
    /* Which Lua state this is: every state built loads this module anew. */
    "local state_no = shared.incr(K .. 'states', 1, 0)\n"
    "local A = {}\n"
    "function A.state() return tostring(state_no) end\n"
    "function A.hello(arg) return 'hello ' .. arg end\n"
    "function A.version() return version end\n"
    /* Waits on the hashing pool: before and after the wait are one run. */
    "function A.hash(arg)\n"
    "  local pw = 'pw-' .. arg\n"
    "  local h = crypto.argon2id_hash(pw)\n"
    "  return pw .. ' ' .. (h:find('^%$argon2id%$') and 'hashed' or tostring(h))\n"
    "end\n"
    "function A.raise(arg) error('boom ' .. arg) end\n"
    /* What a handler sees of query and params, and whether it may write
     * to query. */
    "function A.tables(arg, req)\n"
    "  local ok = pcall(function() req.query.x = 1 end)\n"
    "  local seen = {}\n"
    "  for k, v in pairs(req.query) do seen[#seen + 1] = k .. '=' .. v end\n"
    "  table.sort(seen)\n"
    "  local params = 0\n"
    "  for _ in pairs(req.params) do params = params + 1 end\n"
    "  return table.concat(seen, ',') .. ' all:' .. #(req.query_all.a or {}) .. ' params:' .. params\n"
    "    .. ' write:' .. (ok and 'ok' or 'refused') .. ' meta:' .. tostring(getmetatable(req.query))\n"
    "end\n"
    "function A.raise_after_wait() crypto.argon2id_hash('x') error('late boom') end\n"
    "function A.yield() coroutine.yield() return 'resumed' end\n"
    "function A.spin() while true do end end\n"
    /* Moves to its worker's thread (a verify migrates before it looks at
     * the hash, which, malformed, it then refuses in place) and loops. */
    "function A.migrate_then_spin()\n"
    "  crypto.argon2id_verify('not a hash', 'x')\n"
    "  shared.set(K .. 'spinning', true)\n"
    "  while true do end\n"
    "end\n"
    "function A.hog() local t = {} for i = 1, 1e9 do t[i] = i end return 'never' end\n"
    /* Counts how many ran before it: the order the queue started them. */
    "function A.count() return tostring(shared.incr(K .. 'counted', 1, 0)) end\n"
    /* Holds its worker's thread until the test says go. */
    "function A.hold(arg)\n"
    "  shared.set(K .. 'holding:' .. arg, true)\n"
    "  while not shared.get(K .. 'go:' .. arg) do end\n"
    "  return 'held ' .. arg\n"
    "end\n"
    /* Waits on Redis until the test pushes to the gate; says which code it
     * ran and how many counted requests ran meanwhile. */
    "function A.gate(arg)\n"
    "  shared.incr(K .. 'waiting', 1, 0)\n"
    "  local v, e = redis.call('BLPOP', K .. 'gate', 15)\n"
    "  if type(v) ~= 'table' then error('gate: ' .. tostring(e)) end\n"
    "  return 'through ' .. arg .. ' ' .. version .. ' after ' .. tostring(shared.get(K .. 'counted') or 0)\n"
    "end\n"
    "local M = {}\n"
    "function M.handle(req)\n"
    "  local action, arg = req.path:match('^/([%w_]+)/?(.*)$')\n"
    "  if action == 'badstatus' then return 999, {}, 'no such status' end\n"
    "  local f = A[action]\n"
    "  if not f then return 404, {}, 'no action ' .. tostring(action) end\n"
    "  return 200, { ['Content-Type'] = 'text/plain', ['X-Version'] = version }, f(arg, req)\n"
    "end\n"
    "return M\n";

static const char routes_lua[] =
    "return { { method = 'GET', path = '/{action}/{arg}', handler = 'test', auth = false } }\n";
static const char handler_lua[] = "return function() end\n";

static char root[512];

static int set_version(const char *v) {
    char src[64];
    snprintf(src, sizeof src, "return '%s'\n", v);
    return lua_tree_write(root, "lib/version.lua", src);
}

static int make_root(void) {
    char key[96];
    if (lua_tree_make(root, sizeof root, "sgw_test_worker_")) return -1;
    snprintf(key, sizeof key, "return 'sgw_worker_test:%ld:'\n", (long)getpid());
    return lua_tree_write(root, "lib/dispatch.lua", dispatch_lua) || lua_tree_write(root, "lib/testkey.lua", key) ||
           lua_tree_write(root, "handlers/routes.lua", routes_lua) ||
           lua_tree_write(root, "handlers/test.lua", handler_lua) || set_version("v1");
}

/* ------------------------------------------------------------ requests */

static int next_id;

/* A GET of path as the listener makes it (http.c: request_new). */
static sgw_request *new_req(const char *path) {
    sgw_request *req = malloc(sizeof *req);
    if (!req) abort();
    memset(req, 0, offsetof(sgw_request, arena));
    snprintf(req->id, sizeof req->id, "req_worker_test_%d", ++next_id);
    req->start_ms = clock_mono_ms();
    req->method = req_strndup(req, "GET", 3);
    req->path = req_strndup(req, path, strlen(path));
    req->match.route = -1;
    return req;
}

static void free_req(sgw_request *req) {
    req_strfree(req, req->method);
    req_strfree(req, req->path);
    for (int i = 0; i < req->nresp_headers; i++) {
        req_strfree(req, req->resp_headers[i].name);
        req_strfree(req, req->resp_headers[i].value);
    }
    free(req->resp_headers);
    free(req->resp_body);
    req_strfree(req, req->client_id);
    match_free(&req->match);
    req_strfree(req, req->route_pattern);
    free(req);
}

static const char *resp_header(const sgw_request *req, const char *name) {
    for (int i = 0; i < req->nresp_headers; i++)
        if (strcmp(req->resp_headers[i].name, name) == 0) return req->resp_headers[i].value;
    return NULL;
}

/* The response body as a string (the handlers' bodies are text). */
static const char *body(const sgw_request *req) {
    static char buf[512];
    size_t n = req->resp_len < sizeof buf - 1 ? req->resp_len : sizeof buf - 1;
    if (n) memcpy(buf, req->resp_body, n);
    buf[n] = 0;
    return buf;
}

/* req was answered status with exactly want as its body. */
static void expect(const sgw_request *req, int status, const char *want, const char *name) {
    char detail[700];
    snprintf(detail, sizeof detail, "%d %s", req->status, body(req));
    check(req->status == status && strcmp(body(req), want) == 0, name, detail);
}

/* req got the last-resort answer: 500, a problem document naming the
 * request and nothing of what went wrong inside. */
static void expect_500(const sgw_request *req, const char *name) {
    char detail[700];
    const char *b = body(req), *ct = resp_header(req, "Content-Type");
    snprintf(detail, sizeof detail, "%d %s %s", req->status, ct ? ct : "(no type)", b);
    check(req->status == 500 && ct && strcmp(ct, "application/problem+json") == 0 &&
          strstr(b, "\"code\":\"internal_error\"") && strstr(b, req->id) && !strstr(b, "boom"), name, detail);
}

/* ------------------------------------------------------------ completions */

/* What workers hand back through on_complete (the listener's
 * http_complete): in the order they came, and whether on this thread. */
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  done_cond = PTHREAD_COND_INITIALIZER;
static sgw_request    *done[MAX_DONE];
static int             done_here[MAX_DONE];
static int             ndone;
static pthread_t       test_thread;

static void on_complete(sgw_request *req) {
    pthread_mutex_lock(&done_lock);
    if (ndone < MAX_DONE) {
        done[ndone] = req;
        done_here[ndone] = pthread_equal(pthread_self(), test_thread);
        ndone++;
    }
    pthread_cond_broadcast(&done_cond);
    pthread_mutex_unlock(&done_lock);
}

static int done_count(void) {
    pthread_mutex_lock(&done_lock);
    int n = ndone;
    pthread_mutex_unlock(&done_lock);
    return n;
}

static void reset_done(void) {
    pthread_mutex_lock(&done_lock);
    ndone = 0;
    pthread_mutex_unlock(&done_lock);
}

/* Waits until n requests have been completed; 0 when the deadline passed. */
static int wait_done(int n, const char *what) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += DEADLINE_MS / 1000;
    pthread_mutex_lock(&done_lock);
    int rc = 0;
    while (ndone < n && rc == 0) rc = pthread_cond_timedwait(&done_cond, &done_lock, &until);
    int got = ndone;
    pthread_mutex_unlock(&done_lock);
    char detail[64];
    snprintf(detail, sizeof detail, "%d of %d answered", got, n);
    check(got >= n, what, detail);
    return got >= n;
}

/* Where req is in the order of completions, or -1. */
static int done_at(const sgw_request *req) {
    pthread_mutex_lock(&done_lock);
    int at = -1;
    for (int i = 0; i < ndone && at < 0; i++)
        if (done[i] == req) at = i;
    pthread_mutex_unlock(&done_lock);
    return at;
}

static void pause_briefly(void) {
    struct timespec ts = { 0, 1000000 };
    nanosleep(&ts, NULL);
}

/* What the listener does with a complete request (http.c). */
static int submit(sgw_request *req) {
    int how = workers_run_inline(req);
    if (how == WORKERS_MIGRATE) workers_migrate(req);
    else if (how == WORKERS_QUEUE) workers_enqueue(req);
    return how;
}

/* workers_run_inline once a worker is idle: workers put themselves on the
 * idle stack on their own threads, a moment after they start or finish.
 * WORKERS_QUEUE (nothing ran) means none became idle in time. */
static int run_inline_when_idle(sgw_request *req) {
    uint64_t deadline = clock_mono_ms() + DEADLINE_MS;
    int how;
    while ((how = workers_run_inline(req)) == WORKERS_QUEUE && clock_mono_ms() < deadline) pause_briefly();
    return how;
}

/* GET path run inline once a worker is idle: answered there, with status
 * and body want (500: the last-resort answer, want unused). */
static void expect_inline(const char *path, int status, const char *want, const char *name) {
    sgw_request *req = new_req(path);
    int how = run_inline_when_idle(req);
    check(how == WORKERS_DONE, name, "not answered inline");
    if (how == WORKERS_MIGRATE) {
        /* Wrongly migrated: let it end before it is freed. */
        int n = done_count();
        workers_migrate(req);
        wait_done(n + 1, name);
    }
    if (status == 500) expect_500(req, name);
    else expect(req, status, want, name);
    free_req(req);
}

/* GET path handed to the workers, migrated (it must wait, so that the
 * inline run gives it up) or queued: the request once answered, or NULL
 * (then it is left to leak: a worker may still hold it). */
static sgw_request *answered(const char *path, int migrated, const char *name) {
    sgw_request *req = new_req(path);
    int n = done_count();
    if (migrated) {
        int how = run_inline_when_idle(req);
        check(how == WORKERS_MIGRATE, name, "did not migrate");
        if (how == WORKERS_DONE) return req;
        if (how == WORKERS_MIGRATE) workers_migrate(req);
        else workers_enqueue(req);
    } else {
        workers_enqueue(req);
    }
    return wait_done(n + 1, name) ? req : NULL;
}

/* ------------------------------------------------------------ the test's own state */

/* A plain Lua state of the test's with the process's shared store (the one
 * the handlers see) and a blocking Redis connection: it reads what the
 * handlers report and pushes to their gate. */
static lua_State *ctl;
static sgw_worker ctl_w;
static const char *redis_url;

static void ctl_open(void) {
    ctl = luaL_newstate();
    luaL_openlibs(ctl);
    lapi_shared_open(ctl);
    if (redis_url) {
        ctl_w.redis = redis_open(redis_url);
        lapi_redis_open(ctl, &ctl_w);
    }
    char setup[96];
    snprintf(setup, sizeof setup, "K = 'sgw_worker_test:%ld:'", (long)getpid());
    (void)luaL_dostring(ctl, setup);
}

static void ctl_close(void) {
    lua_close(ctl);
    if (ctl_w.redis) redis_close(ctl_w.redis);
}

static void ctl_run(const char *code) {
    if (luaL_dostring(ctl, code) != LUA_OK) {
        check(0, code, lua_tostring(ctl, -1));
        lua_settop(ctl, 0);
    }
}

/* The value of Lua expression expr in the test's state, as a boolean. */
static int ctl_true(const char *expr) {
    char src[512];
    snprintf(src, sizeof src, "return %s", expr);
    if (luaL_dostring(ctl, src) != LUA_OK) {
        check(0, expr, lua_tostring(ctl, -1));
        lua_settop(ctl, 0);
        return 0;
    }
    int v = lua_toboolean(ctl, -1);
    lua_settop(ctl, 0);
    return v;
}

/* Waits until expr holds (what handlers reported in the shared store). */
static int wait_until(const char *expr, const char *what) {
    uint64_t deadline = clock_mono_ms() + DEADLINE_MS;
    int ok;
    while (!(ok = ctl_true(expr)) && clock_mono_ms() < deadline) pause_briefly();
    check(ok, what, expr);
    return ok;
}

static void forget_reports(void) {
    ctl_run("for _, k in ipairs({'counted', 'waiting', 'spinning', 'holding:0', 'holding:1', 'go:0', 'go:1'}) do"
            " shared.delete(K .. k) end");
}

/* ------------------------------------------------------------ workers */

static int start_workers(int n, int per_worker, int budget_ms, int memory_mb) {
    char err[256], v[32];
    snprintf(v, sizeof v, "%d", per_worker);
    int rc = config_set("http.requests_per_worker", v, err, sizeof err);
    snprintf(v, sizeof v, "%d", budget_ms);
    rc = rc || config_set("lua.handler_budget_ms", v, err, sizeof err);
    snprintf(v, sizeof v, "%d", memory_mb);
    rc = rc || config_set("lua.memory_limit_mb", v, err, sizeof err);
    if (rc) {
        check(0, "configure the workers", err);
        return -1;
    }
    forget_reports();
    reset_done();
    rc = workers_start(n, on_complete);
    check(rc == 0, "workers start", NULL);
    return rc;
}

/* ------------------------------------------------------------ the tests */

/* Sets req's query arguments to the n name/value pairs in kv. */
static void set_query(sgw_request *req, const char *const *kv, int n) {
    req->query = calloc((size_t)n, sizeof *req->query);
    if (!req->query) abort();
    for (int i = 0; i < n; i++) {
        req->query[i].name = req_strndup(req, kv[2 * i], strlen(kv[2 * i]));
        req->query[i].value = req_strndup(req, kv[2 * i + 1], strlen(kv[2 * i + 1]));
    }
    req->nquery = n;
}

static void free_query(sgw_request *req) {
    for (int i = 0; i < req->nquery; i++) {
        req_strfree(req, req->query[i].name);
        req_strfree(req, req->query[i].value);
    }
    free(req->query);
}

/* A request without query arguments or path parameters sees empty tables
 * it cannot write to (one table the state shares); one with query
 * arguments sees them, in tables of its own. (Path parameters: the
 * integration specs; here every path has two.) */
static void test_request_tables(void) {
    if (start_workers(1, 4, 0, 64)) return;
    expect_inline("/tables/x", 200, " all:0 params:2 write:refused meta:false",
                  "no query: empty, read-only tables");
    expect_inline("/tables/y", 200, " all:0 params:2 write:refused meta:false",
                  "the refused write left nothing for the next request");
    static const char *const kv[] = { "a", "1", "b", "3", "a", "2" };
    sgw_request *req = new_req("/tables/z");
    set_query(req, kv, 3);
    check(run_inline_when_idle(req) == WORKERS_DONE, "a request with a query runs inline", NULL);
    expect(req, 200, "a=1,b=3,x=1 all:2 params:2 write:ok meta:nil",
           "its query (first values), query_all (every value) and a table it may write");
    free_query(req);
    free_req(req);
    workers_stop();
}

static void test_inline_and_migration(void) {
    /* No time budget: a dozen hashes on two pool threads take seconds in
     * the sanitizer build, and a request's budget runs while it waits. */
    if (start_workers(2, 4, 0, 64)) return;

    /* A request that never waits is answered on the caller's thread: the
     * response is there when workers_run_inline returns, and nothing is
     * completed from a worker's thread. */
    sgw_request *req = new_req("/hello/there");
    check(run_inline_when_idle(req) == WORKERS_DONE, "a request that never waits runs inline", NULL);
    expect(req, 200, "hello there", "its answer is there at once");
    const char *v = resp_header(req, "X-Version");
    check(v && strcmp(v, "v1") == 0, "the handler's own headers are sent", v);
    check(done_count() == 0, "an inline answer is not handed back through on_complete", NULL);
    free_req(req);

    /* A request that waits (the hashing pool) leaves the caller's thread at
     * its first wait and is answered from its worker's thread, its run
     * going on where it stopped. */
    req = new_req("/hash/7");
    check(run_inline_when_idle(req) == WORKERS_MIGRATE, "a request that waits migrates", NULL);
    check(req->status == 0, "nothing is answered at the migration", NULL);
    workers_migrate(req);
    if (wait_done(1, "the migrated request is answered")) {
        expect(req, 200, "pw-7 hashed", "the migrated request's answer: its run went on after the wait");
        check(!done_here[0], "answered from the worker's own thread", NULL);
    }
    free_req(req);

    /* More requests than the workers keep running (2 x 4), each waiting:
     * those that find no idle worker queue, and every one gets its own
     * answer. */
    enum { N = 12 };
    sgw_request *many[N];
    int handed = 0;
    reset_done();
    for (int i = 0; i < N; i++) {
        char path[32];
        snprintf(path, sizeof path, "/hash/%d", i);
        many[i] = new_req(path);
        if (submit(many[i]) != WORKERS_DONE) handed++;
    }
    check(handed == N, "every hashing request went to a worker's thread", NULL);
    if (wait_done(handed, "more waiting requests than room: all answered")) {
        for (int i = 0; i < N; i++) {
            char want[32];
            snprintf(want, sizeof want, "pw-%d hashed", i);
            expect(many[i], 200, want, "each its own answer");
        }
    }
    for (int i = 0; i < N; i++) free_req(many[i]);
    workers_stop();
}

static void test_errors(void) {
    if (start_workers(1, 4, 5000, 64)) return;

    /* Raised before any wait: answered inline. */
    expect_inline("/raise/1", 500, NULL, "a handler that raises: last-resort 500, inline");

    /* Raised after a wait: on the worker's thread. */
    sgw_request *req = answered("/raise_after_wait/x", 1, "a handler that raises after a wait");
    if (req) {
        expect_500(req, "raised on the worker's thread: 500");
        free_req(req);
    }
    /* Started from the queue on the worker's thread. */
    if ((req = answered("/raise/2", 0, "a queued handler that raises"))) {
        expect_500(req, "raised in a queued run: 500");
        free_req(req);
    }

    /* A yield that is no wait of the host's: the loop cannot resume it. */
    expect_inline("/yield/x", 500, NULL, "a handler that yields by itself: 500, inline");
    if ((req = answered("/yield/y", 0, "a queued stray yield"))) {
        expect_500(req, "a stray yield on the worker's thread: 500");
        free_req(req);
    }

    expect_inline("/badstatus/x", 500, NULL, "a status outside 100..599: 500, inline");

    /* The same worker serves on, inline (its coroutine was replaced). */
    expect_inline("/hello/again", 200, "hello again", "after the failures the worker is borrowed again");
    workers_stop();
}

/* The queue is first come first served, and a turn of a loop starts at
 * most TURN_STARTS (16) queued requests, taking in the answers of requests
 * already waiting before it starts more. */
static void test_queue_order_and_turns(void) {
    if (start_workers(1, 64, 0, 64)) return;
    enum { NQ = 40 };
    int total = 0;

    /* With Redis: one request waits on the gate throughout. */
    sgw_request *waiter = NULL;
    if (redis_url) {
        ctl_run("redis.call('DEL', K .. 'gate')");
        waiter = new_req("/gate/w");
        workers_enqueue(waiter);
        total++;
        wait_until("shared.get(K .. 'waiting') == 1", "the waiter waits on Redis");
    }
    /* The worker's thread is held by the first holder, so everything
     * after it queues up. */
    sgw_request *hold0 = new_req("/hold/0"), *hold1 = new_req("/hold/1"), *q[NQ];
    workers_enqueue(hold0);
    total++;
    wait_until("shared.get(K .. 'holding:0')", "the first holder runs");
    workers_enqueue(hold1);
    total++;
    for (int i = 0; i < NQ; i++) {
        q[i] = new_req("/count/x");
        workers_enqueue(q[i]);
        total++;
    }
    char detail[64];
    snprintf(detail, sizeof detail, "depth %d", workers_queue_depth());
    check(workers_queue_depth() == NQ + 1, "requests behind a busy worker wait in the queue (workers_queue_depth)",
          detail);

    /* Released, the loop's next turn takes the second holder and 15 more:
     * the second holder keeps the thread, so the depth stays put. */
    ctl_run("shared.set(K .. 'go:0', true)");
    wait_until("shared.get(K .. 'holding:1')", "the second holder runs");
    snprintf(detail, sizeof detail, "depth %d", workers_queue_depth());
    check(workers_queue_depth() == NQ - 15, "one turn starts at most 16 queued requests", detail);

    /* The waiter's answer comes in while that turn holds the thread: it is
     * taken in after the turn's 15 counted requests, before the next
     * turn's. LLEN after the push: Redis has written the waiter's reply
     * before it reads another command. */
    if (redis_url) {
        ctl_run("redis.call('RPUSH', K .. 'gate', 'go')");
        check(ctl_true("redis.call('LLEN', K .. 'gate') == 0"), "the waiter took the push", NULL);
    }
    ctl_run("shared.set(K .. 'go:1', true)");
    if (wait_done(total, "every queued request is answered")) {
        expect(hold0, 200, "held 0", "first holder answered");
        expect(hold1, 200, "held 1", "second holder answered");
        int in_order = 1;
        for (int i = 0; i < NQ; i++) {
            char want[16];
            snprintf(want, sizeof want, "%d", i + 1);
            in_order = in_order && q[i]->status == 200 && strcmp(body(q[i]), want) == 0 &&
                       (i == 0 || done_at(q[i]) > done_at(q[i - 1]));
        }
        check(in_order, "queued requests start in the order they came", NULL);
        if (waiter)
            expect(waiter, 200, "through w v1 after 15",
                   "a waiting request's answer is taken in between turns, not after the whole queue");
    }
    check(workers_queue_depth() == 0, "the queue is empty afterwards", NULL);
    if (waiter) free_req(waiter);
    free_req(hold0);
    free_req(hold1);
    for (int i = 0; i < NQ; i++) free_req(q[i]);
    workers_stop();
}

/* A request run inline on another thread, for test_warm_worker. */
static void *run_inline_thread(void *arg) {
    run_inline_when_idle(arg);
    return NULL;
}

/* A socket thread borrows the worker it lent last while that one is idle,
 * even when another was given back after it (its state is still in this
 * core's caches). */
static void test_warm_worker(void) {
    if (start_workers(3, 4, 0, 64)) return;
    /* Another thread holds a worker throughout the test thread's first
     * request, then gives it back: it is then on top of the idle stack. */
    sgw_request *holder = new_req("/hold/0");
    pthread_t t;
    if (pthread_create(&t, NULL, run_inline_thread, holder) != 0) {
        check(0, "start the holding thread", NULL);
        free_req(holder);
        workers_stop();
        return;
    }
    wait_until("shared.get(K .. 'holding:0')", "the other thread holds a worker");
    sgw_request *first = new_req("/state/1");
    check(run_inline_when_idle(first) == WORKERS_DONE, "the first request runs inline", NULL);
    ctl_run("shared.set(K .. 'go:0', true)");
    pthread_join(t, NULL);
    expect(holder, 200, "held 0", "the other thread's request is answered inline");

    char first_state[32];
    snprintf(first_state, sizeof first_state, "%s", body(first));
    sgw_request *second = new_req("/state/2");
    check(run_inline_when_idle(second) == WORKERS_DONE, "the second request runs inline", NULL);
    check(first->status == 200 && second->status == 200 && strcmp(first_state, body(second)) == 0,
          "the second runs in the same Lua state as the first, not the one given back last", body(second));
    free_req(holder);
    free_req(first);
    free_req(second);
    workers_stop();
}

/* Each worker keeps up to http.requests_per_worker requests waiting at
 * once; the rest queue until one ends. */
static void test_room_per_worker(void) {
    if (!redis_url || start_workers(2, 3, 0, 64)) return;
    ctl_run("redis.call('DEL', K .. 'gate')");
    enum { N = 8 };
    sgw_request *r[N];
    for (int i = 0; i < N; i++) {
        char path[32];
        snprintf(path, sizeof path, "/gate/%d", i);
        r[i] = new_req(path);
        workers_enqueue(r[i]);
    }
    wait_until("shared.get(K .. 'waiting') == 6", "two workers keep three requests waiting each");
    char detail[64];
    snprintf(detail, sizeof detail, "depth %d, waiting %s", workers_queue_depth(),
             ctl_true("shared.get(K .. 'waiting') == 6") ? "6" : "not 6");
    check(workers_queue_depth() == 2 && ctl_true("shared.get(K .. 'waiting') == 6"),
          "no more start than the workers' room: the rest queue", detail);
    check(done_count() == 0, "none answered before the gate opens", NULL);
    ctl_run("redis.call('RPUSH', K .. 'gate', 1, 2, 3, 4, 5, 6, 7, 8)");
    if (wait_done(N, "all waiting and queued requests are answered")) {
        for (int i = 0; i < N; i++) {
            char want[48];
            snprintf(want, sizeof want, "through %d v1 after 0", i);
            expect(r[i], 200, want, "each its own answer");
        }
    }
    check(workers_queue_depth() == 0, "the queue is empty afterwards", NULL);
    for (int i = 0; i < N; i++) free_req(r[i]);
    workers_stop();
}

static void test_budget(void) {
    if (start_workers(1, 4, 300, 64)) return;

    /* Stopped inline: the caller's thread gets its answer after the budget. */
    sgw_request *req = new_req("/spin/x");
    uint64_t t0 = clock_mono_ms();
    int how = run_inline_when_idle(req);
    uint64_t took = clock_mono_ms() - t0;
    char detail[64];
    snprintf(detail, sizeof detail, "%llu ms", (unsigned long long)took);
    check(how == WORKERS_DONE && took >= 300 && took < DEADLINE_MS, "an endless handler is stopped past its budget",
          detail);
    expect_500(req, "a handler over its budget: 500");
    free_req(req);

    /* Stopped on the worker's thread (it got as far as its endless loop:
     * the 500 is the budget's). */
    if ((req = answered("/migrate_then_spin/x", 1, "the migrated overrun"))) {
        expect_500(req, "over its budget on the worker's thread: 500");
        check(ctl_true("shared.get(K .. 'spinning')"), "it was stopped in its endless loop", NULL);
        free_req(req);
    }

    expect_inline("/hello/after", 200, "hello after", "the worker is borrowed after an overrun");
    workers_stop();
}

static void test_memory_ceiling(void) {
    if (start_workers(1, 4, 5000, 16)) return;
    sgw_request *req = new_req("/state/x");
    check(run_inline_when_idle(req) == WORKERS_DONE, "state inline", NULL);
    char before[512];
    snprintf(before, sizeof before, "%s", body(req));
    free_req(req);
    req = new_req("/hog/x");
    if (submit(req) == WORKERS_DONE || wait_done(1, "a handler past the memory ceiling is answered"))
        expect_500(req, "a handler past its state's memory ceiling: 500");
    free_req(req);
    /* The state was closed; the worker builds a new one and serves on. */
    req = new_req("/state/x");
    check(run_inline_when_idle(req) == WORKERS_DONE, "the worker is borrowed again", NULL);
    check(req->status == 200 && strcmp(body(req), before) != 0, "it answers from a fresh state", body(req));
    free_req(req);
    workers_stop();
}

static void test_reload(void) {
    if (start_workers(1, 4, 0, 64)) return;
    char err[512];
    expect_inline("/version/x", 200, "v1", "the first generation");

    check(set_version("v2") == 0 && luart_reload(err, sizeof err) == 0, "reload to v2", err);
    /* The idle worker's state is of the old generation: it is not borrowed
     * (building a state is its own thread's work), the request queues and
     * the worker answers it with the new code. */
    sgw_request *req = new_req("/version/x");
    check(workers_run_inline(req) == WORKERS_QUEUE, "a worker behind the generation is not borrowed", NULL);
    workers_enqueue(req);
    if (wait_done(1, "the queued request is answered")) expect(req, 200, "v2", "by the new generation");
    free_req(req);
    expect_inline("/version/x", 200, "v2", "the refreshed worker is borrowed again, new generation");

    if (redis_url) {
        /* Three requests wait in the v2 state; v3 comes. A request queued
         * now waits until all three have ended: between the first and the
         * second answer the loop turned at least once with it in the queue
         * and left it there. */
        reset_done();
        ctl_run("redis.call('DEL', K .. 'gate')");
        sgw_request *g[3];
        for (int i = 0; i < 3; i++) {
            char path[32];
            snprintf(path, sizeof path, "/gate/%c", 'a' + i);
            g[i] = new_req(path);
            workers_enqueue(g[i]);
        }
        wait_until("shared.get(K .. 'waiting') == 3", "three requests wait in the old generation");
        check(set_version("v3") == 0 && luart_reload(err, sizeof err) == 0, "reload to v3", err);
        req = new_req("/version/y");
        workers_enqueue(req);
        ctl_run("redis.call('RPUSH', K .. 'gate', 1)");
        wait_done(1, "the first waiting request ends");
        ctl_run("redis.call('RPUSH', K .. 'gate', 2)");
        wait_done(2, "the second waiting request ends");
        check(done_at(req) < 0 && workers_queue_depth() == 1,
              "while requests of the old generation run, the worker takes no new one", NULL);
        ctl_run("redis.call('RPUSH', K .. 'gate', 3)");
        if (wait_done(4, "all are answered")) {
            for (int i = 0; i < 3; i++) {
                char want[48];
                snprintf(want, sizeof want, "through %c v2 after 0", 'a' + i);
                expect(g[i], 200, want, "a running request ends on the code it began with");
            }
            expect(req, 200, "v3", "the held request runs on the new generation");
            check(done_at(req) == 3, "after the old generation's requests", NULL);
        }
        for (int i = 0; i < 3; i++) free_req(g[i]);
        free_req(req);
    }
    workers_stop();
}

/* Workers are initialised at once, each state its own; when one cannot be
 * (here: no generation loaded yet, before luart_init), none is left. */
static void test_init_all(int loaded) {
    sgw_worker ws[3];
    sgw_worker *list[3] = { &ws[0], &ws[1], &ws[2] };
    char err[512] = "";
    int failed = 7;
    int rc = worker_init_all(list, 3, "http", &failed, err, sizeof err);
    if (!loaded) {
        check(rc == -1 && failed == 0, "init_all fails without a generation", err);
        check(strstr(err, "no generation loaded") != NULL, "init_all says why", err);
        check(!ws[0].L && !ws[1].L && !ws[2].L && !ws[2].gen, "init_all leaves no worker half made", NULL);
        return;
    }
    check(rc == 0 && failed == -1, "init_all starts three workers", err);
    if (rc) return;
    check(ws[0].L && ws[1].L && ws[2].L && ws[0].L != ws[1].L && ws[1].L != ws[2].L && ws[0].L != ws[2].L,
          "each worker has a state of its own", NULL);
    check(ws[0].gen && ws[0].gen == ws[1].gen && ws[1].gen == ws[2].gen, "all on the current generation", NULL);
    check(ws[0].id == 0 && ws[2].id == 2 && strcmp(ws[1].role, "http") == 0, "ids and role", NULL);
    for (int i = 0; i < 3; i++) worker_destroy(&ws[i]);
}

/* After the workers stopped (a kept-alive connection after the drain):
 * nothing runs inline, and a queued request is answered 503 at once. */
static void test_after_stop(void) {
    reset_done();
    sgw_request *req = new_req("/hello/late");
    check(workers_run_inline(req) == WORKERS_QUEUE, "no worker is borrowed after the stop", NULL);
    workers_enqueue(req);
    check(done_count() == 1 && done_here[0], "answered at once, on the caller's thread", NULL);
    const char *retry = resp_header(req, "Retry-After");
    check(req->status == 503 && retry && strcmp(retry, "1") == 0 && strstr(body(req), "service_unavailable"),
          "503 with Retry-After", body(req));
    free_req(req);
}

int main(void) {
    char err[512];
    test_thread = pthread_self();
    if (config_load_file("config/sgw.conf", 1, err, sizeof err) != 0) {
        printf("config: %s\n", err);
        return 1;
    }
    log_set_level(LOG_ERROR);   /* the handler errors the tests cause are expected */
    signal(SIGPIPE, SIG_IGN);
    redis_url = getenv("SGW_TEST_REDIS_URL");
    if (redis_url && !*redis_url) redis_url = NULL;
    if (redis_url && (config_set("redis.url", redis_url, err, sizeof err) ||
                      config_set("redis.timeout_ms", "20000", err, sizeof err))) {
        printf("config: %s\n", err);
        return 1;
    }
    if (!redis_url) printf("SKIP: the parts that wait on Redis (SGW_TEST_REDIS_URL not set)\n");
    if (shared_start(err, sizeof err) || offload_start(2)) {
        printf("shared store or hashing pool: %s\n", err);
        return 1;
    }
    test_init_all(0);
    if (make_root() || luart_init(root, err, sizeof err)) {
        printf("handlers: %s\n", err);
        lua_tree_remove(root);
        return 1;
    }
    ctl_open();

    test_init_all(1);
    test_inline_and_migration();
    test_errors();
    test_request_tables();
    test_queue_order_and_turns();
    test_warm_worker();
    test_room_per_worker();
    test_budget();
    test_memory_ceiling();
    test_reload();
    test_after_stop();

    if (redis_url) ctl_run("redis.call('DEL', K .. 'gate')");
    ctl_close();
    luart_shutdown();
    offload_stop();
    shared_stop();
    config_free();
    lua_tree_remove(root);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/*
 * test_budget.c — host/budget.c as luart.c and the workers use it: a Lua run
 * armed with a time budget and watched by the watchdog thread is stopped with
 * an error once past its deadline (also inside the handler's own pcall and
 * coroutines), one within its budget is not, the deadline runs from the arm
 * (a wait between resumes counts), and each thread's run is watched apart.
 */
#include "sgw.h"
#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define OVERRUN_MESSAGE "exceeded its time budget"

static void sleep_ms(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts)) {}
}

static lua_State *new_state(void) {
    lua_State *L = luaL_newstate();
    if (!L) return NULL;
    luaL_openlibs(L);
    lapi_clock_open(L);   /* clock.mono_ms, for loops that run a given time */
    lua_getglobal(L, "coroutine");
    budget_coroutines(L);
    lua_pop(L, 1);
    return L;
}

/* Runs src on L within budget_ms as luart_call does; the status, with the
 * error (or the first result, as a string) in out and the time taken. */
static int run(lua_State *L, const char *src, double budget_ms, char *out, size_t outlen, uint64_t *took) {
    out[0] = 0;
    if (luaL_loadstring(L, src) != LUA_OK) {
        snprintf(out, outlen, "%s", lua_tostring(L, -1));
        lua_settop(L, 0);
        return -1;
    }
    uint64_t t0 = clock_mono_ms();
    budget_arm(L, budget_ms);
    budget_enter(L);
    int rc = lua_pcall(L, 0, 1, 0);
    budget_leave();
    budget_disarm(L);
    *took = clock_mono_ms() - t0;
    const char *s = lua_tostring(L, -1);
    snprintf(out, outlen, "%s", s ? s : luaL_typename(L, -1));
    lua_settop(L, 0);
    return rc;
}

/* src is stopped with the budget's error, after its budget and soon after. */
static void expect_stopped(lua_State *L, const char *name, const char *src, double budget_ms) {
    char out[256], detail[320];
    uint64_t took;
    int rc = run(L, src, budget_ms, out, sizeof out, &took);
    snprintf(detail, sizeof detail, "status %d after %llu ms: %s", rc, (unsigned long long)took, out);
    check(rc == LUA_ERRRUN && strstr(out, OVERRUN_MESSAGE) && took >= (uint64_t)budget_ms && took < 3000, name,
          detail);
}

/* src runs to its end and returns want. */
static void expect_finished(lua_State *L, const char *name, const char *src, double budget_ms, const char *want) {
    char out[256], detail[320];
    uint64_t took;
    int rc = run(L, src, budget_ms, out, sizeof out, &took);
    snprintf(detail, sizeof detail, "status %d after %llu ms: %s", rc, (unsigned long long)took, out);
    check(rc == LUA_OK && strcmp(out, want) == 0, name, detail);
}

/* Busy for ms milliseconds of the clock, then returns 'done'. */
#define BUSY(ms) "local t = clock.mono_ms() + " #ms " while clock.mono_ms() < t do end return 'done'"

static void test_runs(lua_State *L) {
    expect_stopped(L, "an endless loop is stopped past its budget", "while true do end", 50);
    expect_stopped(L, "an endless loop of calls too", "local function f() return 1 end while true do f() end", 50);
    expect_stopped(L, "a loop that only ends later is stopped on time", BUSY(5000), 50);
    expect_finished(L, "a run within its budget is not stopped", BUSY(30), 1000, "done");
    /* The same state runs again after an overrun: the earlier run's hook
     * does not stop the next. */
    expect_finished(L, "a run after an overrun is not stopped", "local n = 0 for i = 1, 1e6 do n = n + i end return 'ok'",
                    1000, "ok");
    expect_finished(L, "budget 0: no budget", BUSY(80), 0, "done");

    /* The handler's own pcall cannot swallow the error and loop on. */
    expect_stopped(L, "pcall does not swallow the error",
                   "for i = 1, 1e12 do pcall(function() while true do end end) end return 'escaped'", 50);
    expect_stopped(L, "nor a pcall with a handler of its own",
                   "while true do xpcall(function() while true do end end, function(e) return e end) end", 50);
    expect_stopped(L, "nor an error caught and the loop resumed",
                   "local ok while true do ok = pcall(function() local t = {} for i = 1, 1e12 do t[i % 8] = i end end) end",
                   50);

    /* Its coroutines run within its budget. */
    expect_finished(L, "coroutines within the budget work as ever",
                    "local co = coroutine.create(function(a) local b = coroutine.yield(a + 1) return b * 2 end)"
                    " local _, x = coroutine.resume(co, 1) local _, y = coroutine.resume(co, 10)"
                    " local ok, e = coroutine.resume(coroutine.create(function() error('boom') end))"
                    " local w = coroutine.wrap(function() coroutine.yield('w1') return 'w2' end)"
                    " return x .. ',' .. y .. ',' .. tostring(ok) .. ',' .. tostring(e:match('boom')) .. ',' .. w() .. ',' .. w()",
                    1000, "2,20,false,boom,w1,w2");
    expect_stopped(L, "a loop in a coroutine is stopped",
                   "local ok, e = coroutine.resume(coroutine.create(function() while true do end end)) return 'escaped'", 50);
    expect_stopped(L, "a loop in a wrapped coroutine is stopped",
                   "local f = coroutine.wrap(function() while true do end end) pcall(f) return 'escaped'", 50);
    expect_stopped(L, "a loop in a nested coroutine is stopped",
                   "local f = coroutine.wrap(function()"
                   "  coroutine.resume(coroutine.create(function() while true do end end)) return 'inner escaped' end)"
                   " pcall(f) while true do end", 50);
    expect_stopped(L, "a coroutine resumed over and over is stopped",
                   "local co = coroutine.wrap(function() while true do coroutine.yield() end end)"
                   " while true do co() end", 50);
}

/* A request or job that waits (a statement, a call) yields; its deadline
 * runs from the arm, so a wait past it stops the run at its next
 * instruction, and a shorter wait does not. */
static void test_waits(lua_State *L) {
    static const char *const handler = "local got = coroutine.yield('waiting') return 'finished ' .. got";
    for (int late = 0; late <= 1; late++) {
        lua_State *co = lua_newthread(L);
        int nres = 0;
        luaL_loadstring(co, handler);
        budget_arm(co, late ? 60 : 1000);
        budget_enter(co);
        int rc = lua_resume(co, L, 0, &nres);
        budget_leave();
        check(rc == LUA_YIELD && nres == 1 && strcmp(lua_tostring(co, -1), "waiting") == 0, "the handler yields to wait",
              NULL);
        lua_pop(co, nres);
        sleep_ms(120);   /* the wait, with no Lua running: past 60 ms, not past 1000 */
        lua_pushliteral(co, "the answer");
        budget_enter(co);
        rc = lua_resume(co, L, 1, &nres);
        budget_leave();
        budget_disarm(co);
        const char *s = lua_tostring(co, -1);
        if (late)
            check(rc == LUA_ERRRUN && s && strstr(s, OVERRUN_MESSAGE), "a wait past the deadline stops the run", s);
        else
            check(rc == LUA_OK && s && strcmp(s, "finished the answer") == 0, "a wait within the budget does not", s);
        lua_pop(L, 1);
    }
}

/* One thread's overrun is its own: another thread running within its budget
 * meanwhile is not stopped. */
typedef struct worker_run {
    const char *src;
    double      budget_ms;
    int         rc;
    char        out[256];
    uint64_t    took;
} worker_run;

static void *worker(void *arg) {
    worker_run *w = arg;
    lua_State *L = new_state();
    if (!L) {
        w->rc = -1;
        return NULL;
    }
    w->rc = run(L, w->src, w->budget_ms, w->out, sizeof w->out, &w->took);
    lua_close(L);
    return NULL;
}

static void test_threads(void) {
    worker_run looping = { "while true do end", 60, 0, "", 0 };
    worker_run working = { BUSY(300), 3000, 0, "", 0 };
    pthread_t a, b;
    int ok_a = pthread_create(&a, NULL, worker, &looping) == 0;
    int ok_b = pthread_create(&b, NULL, worker, &working) == 0;
    if (ok_a) pthread_join(a, NULL);
    if (ok_b) pthread_join(b, NULL);
    check(ok_a && looping.rc == LUA_ERRRUN && strstr(looping.out, OVERRUN_MESSAGE),
          "a thread past its budget is stopped", looping.out);
    check(ok_b && working.rc == LUA_OK && strcmp(working.out, "done") == 0,
          "a thread within its budget meanwhile is not", working.out);
}

int main(void) {
    if (budget_start()) {
        printf("FAIL the watchdog does not start\n");
        return 1;
    }
    lua_State *L = new_state();
    if (!L) {
        printf("FAIL no Lua state\n");
        return 1;
    }
    test_runs(L);
    test_waits(L);
    test_threads();
    lua_close(L);
    budget_stop();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

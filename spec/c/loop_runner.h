/*
 * loop_runner.h — runs Lua chunks as coroutines on a worker's loop the way
 * the request and job workers do (loop.c): each is resumed until it ends,
 * waiting on whatever the loop waits on. check(ok, label, detail) is
 * registered for the chunks.
 */
#ifndef SGW_SPEC_LOOP_RUNNER_H
#define SGW_SPEC_LOOP_RUNNER_H

#include <poll.h>
#include <stdio.h>

#define NCO 64

typedef struct runner {
    sgw_worker *w;
    lua_State  *co[NCO];
    int         ref[NCO];
    int         n, done;
} runner;

static int l_check(lua_State *L) {
    check(lua_toboolean(L, 1), luaL_optstring(L, 2, "(no label)"), luaL_optstring(L, 3, NULL));
    return 0;
}

static void resume_co(runner *r, lua_State *co) {
    int i = 0;
    while (i < r->n && r->co[i] != co) i++;
    if (i == r->n) return;
    loop_set_current(r->w, co);
    int nres = 0;
    int st = lua_resume(co, r->w->L, 0, &nres);
    loop_set_current(r->w, NULL);
    if (st == LUA_YIELD) {
        int ours = loop_owns(r->w, co, nres);
        lua_pop(co, nres);
        if (ours) return;
        check(0, "a coroutine yielded something other than a wait of the loop", NULL);
    } else if (st != LUA_OK) {
        check(0, "a coroutine raised", lua_tostring(co, -1));
    }
    loop_forget(r->w, co);
    luaL_unref(r->w->L, LUA_REGISTRYINDEX, r->ref[i]);
    r->co[i] = NULL;
    r->done++;
}

static void on_ready(lua_State *co, int nres, void *ud) {
    (void)nres;
    resume_co(ud, co);
}

/* Runs chunk `n` times as coroutines (global I is the coroutine's number,
 * 1..n) until all have ended or 60 s passed (a sanitizer build on a busy
 * machine hashes a password in seconds). Coroutines still waiting then are
 * forgotten, so that what they wait for is disposed of when it comes back
 * rather than handed to the next run. */
static void run_many(sgw_worker *w, const char *what, const char *chunk, int n) {
    runner r = { .w = w, .n = n };
    for (int i = 0; i < n; i++) {
        lua_State *co = lua_newthread(w->L);
        r.ref[i] = luaL_ref(w->L, LUA_REGISTRYINDEX);
        r.co[i] = co;
        char src[4096];
        snprintf(src, sizeof src, "local I = %d\n%s", i + 1, chunk);
        if (luaL_loadstring(co, src)) {
            check(0, what, lua_tostring(co, -1));
            return;
        }
    }
    for (int i = 0; i < n; i++) resume_co(&r, r.co[i]);
    uint64_t deadline = clock_mono_ms() + 60000;
    while (r.done < n && clock_mono_ms() < deadline) {
        struct pollfd fds[LOOP_FDS_MAX];
        int nf = loop_pollfds(w, fds, LOOP_FDS_MAX);
        loop_wait(w, fds, nf, 50, on_ready, &r);
    }
    check(r.done == n, what, "every coroutine ended");
    for (int i = 0; i < n; i++)
        if (r.co[i]) {
            loop_forget(w, r.co[i]);
            luaL_unref(w->L, LUA_REGISTRYINDEX, r.ref[i]);
        }
}

#endif

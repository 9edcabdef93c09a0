/*
 * test_offload.c — password hashes on the thread pool (offload.c) for
 * coroutines of a loop (loop.c): the loop goes on with its other coroutines
 * while the hashes run; each gets its own answer; a hash is refused or
 * accepted as in place; a coroutine that goes while its hash runs, and a
 * loop freed with hashes still out, leak nothing (ASan's build checks).
 */
#include "sgw.h"
#include "check.h"
#include "loop_runner.h"

#include <stdlib.h>
#include <string.h>

static void open_worker(sgw_worker *w) {
    memset(w, 0, sizeof *w);
    w->inbox = offload_inbox_new();
    w->L = luaL_newstate();
    luaL_openlibs(w->L);
    lua_register(w->L, "check", l_check);
    lapi_crypto_open(w->L);
    (void)luaL_dostring(w->L, "started, ended = 0, 0");
}

static void close_worker(sgw_worker *w) {
    lua_close(w->L);
    offload_inbox_free(w->inbox);
}

int main(void) {
    char err[256];
    if (config_load_file("config/sgw.conf", 1, err, sizeof err) != 0) {
        printf("config: %s\n", err);
        return 1;
    }
    log_set_level(LOG_ERROR);

    /* Without the pool, the hash runs in place. */
    sgw_worker w;
    open_worker(&w);
    run_many(&w, "in place",
             "local h = crypto.argon2id_hash('pw' .. I)\n"
             "check(crypto.argon2id_verify(h, 'pw' .. I), 'verifies')\n", 1);
    close_worker(&w);

    check(offload_start(2) == 0, "pool started", NULL);
    open_worker(&w);
    /* Six hashes: every coroutine has handed its hash over before the
     * first comes back, and each gets its own. */
    run_many(&w, "six hashes",
             "started = started + 1\n"
             "local h = crypto.argon2id_hash('secret ' .. I)\n"
             "check(started == 6, 'all handed over before any came back', tostring(started))\n"
             "check(type(h) == 'string' and h:find('^%$argon2id%$'), 'an encoded hash', tostring(h))\n"
             "check(crypto.argon2id_verify(h, 'secret ' .. I) == true, 'its own password verifies')\n"
             "check(crypto.argon2id_verify(h, 'secret ' .. (I + 1)) == false, 'another does not')\n"
             "check(crypto.argon2id_verify('not a hash', 'x') == false, 'a malformed hash does not (in place)')\n"
             "ended = ended + 1\n", 6);
    (void)luaL_dostring(w.L, "check(ended == 6, 'six answers')");
    /* The same password hashes differently each time (a fresh salt). */
    run_many(&w, "salts",
             "local a, b = crypto.argon2id_hash('same'), crypto.argon2id_hash('same')\n"
             "check(a ~= b, 'fresh salt each time')\n", 1);

    /* A coroutine that goes while its hash runs: the job is disposed of
     * when it comes back, and nothing is resumed. */
    lua_State *co = lua_newthread(w.L);
    int ref = luaL_ref(w.L, LUA_REGISTRYINDEX);
    (void)luaL_loadstring(co, "crypto.argon2id_hash('forgotten')");
    loop_set_current(&w, co);
    int nres = 0;
    int st = lua_resume(co, w.L, 0, &nres);
    loop_set_current(&w, NULL);
    check(st == LUA_YIELD && loop_owns(&w, co, nres), "waits on the pool", NULL);
    lua_pop(co, nres);
    loop_forget(&w, co);
    luaL_unref(w.L, LUA_REGISTRYINDEX, ref);
    runner none = { .w = &w, .n = 0 };
    uint64_t deadline = clock_mono_ms() + 60000;
    struct pollfd fds[4];
    int nf;
    while ((nf = loop_pollfds(&w, fds, 4)) > 0 && clock_mono_ms() < deadline)
        loop_wait(&w, fds, nf, 50, on_ready, &none);
    check(nf == 0, "the forgotten job came back and was disposed of", NULL);

    /* A loop freed with a hash still out: the job frees the inbox. */
    co = lua_newthread(w.L);
    ref = luaL_ref(w.L, LUA_REGISTRYINDEX);
    (void)luaL_loadstring(co, "crypto.argon2id_hash('left behind')");
    loop_set_current(&w, co);
    st = lua_resume(co, w.L, 0, &nres);
    loop_set_current(&w, NULL);
    check(st == LUA_YIELD, "out when its loop goes", NULL);
    luaL_unref(w.L, LUA_REGISTRYINDEX, ref);
    close_worker(&w);
    offload_stop();                  /* runs what is queued, then joins */

    config_free();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/*
 * test_waits.c — coroutines of one loop waiting on each other (waits.c):
 * sched.later() runs after the rest of the turn; an event's waiters go on
 * once it is set, not before, and a wait on a set event returns at once;
 * outside a coroutine of the loop later() returns and a wait raises; a
 * coroutine that goes while it waits is never resumed (ASan's build checks
 * that nothing is touched or leaked).
 */
#include "sgw.h"
#include "check.h"
#include "loop_runner.h"

#include <stdlib.h>
#include <string.h>

static void open_worker(sgw_worker *w) {
    memset(w, 0, sizeof *w);
    w->waits = waits_new();
    w->L = luaL_newstate();
    luaL_openlibs(w->L);
    lua_register(w->L, "check", l_check);
    lapi_sched_open(w->L);
}

static void close_worker(sgw_worker *w) {
    lua_close(w->L);
    waits_free(w->waits);
}

static void lua_check(sgw_worker *w, const char *chunk) {
    if (luaL_dostring(w->L, chunk)) check(0, chunk, lua_tostring(w->L, -1));
}

int main(void) {
    sgw_worker w;
    open_worker(&w);

    /* The first coroutine lets the other four run before it goes on. */
    lua_check(&w, "order = {}");
    run_many(&w, "later",
             "if I == 1 then sched.later() end\n"
             "order[#order + 1] = I\n", 5);
    lua_check(&w, "check(table.concat(order, ' ') == '2 3 4 5 1', 'later runs after the turn', table.concat(order, ' '))");

    /* Four wait on an event the first sets once they all wait. */
    lua_check(&w, "ev, woke, waiting = sched.event(), 0, 0");
    run_many(&w, "event",
             "if I == 1 then\n"
             "  sched.later()\n"
             "  check(waiting == 4 and woke == 0, 'the others wait', tostring(woke))\n"
             "  check(not ev:is_set(), 'not set yet')\n"
             "  ev:set()\n"
             "  check(woke == 0, 'set only makes them ready', tostring(woke))\n"
             "  ev:set()\n"
             "else\n"
             "  check(sched.waitable(), 'a coroutine of the loop may wait')\n"
             "  waiting = waiting + 1\n"
             "  ev:wait()\n"
             "  woke = woke + 1\n"
             "end\n", 5);
    lua_check(&w, "check(woke == 4, 'every waiter went on once', tostring(woke))");
    run_many(&w, "a set event", "ev:wait() woke = woke + 1", 2);
    lua_check(&w, "check(woke == 6 and ev:is_set(), 'a wait on a set event returns at once', tostring(woke))");

    /* Outside a coroutine the loop resumes. */
    lua_check(&w, "check(not sched.waitable(), 'the main state may not wait')\n"
                  "sched.later()\n"
                  "local ok, err = pcall(function() sched.event():wait() end)\n"
                  "check(not ok and err:find('cannot wait here', 1, true), 'a wait raises', tostring(err))\n"
                  "local co = coroutine.create(function() return sched.waitable() end)\n"
                  "local _, inner = coroutine.resume(co)\n"
                  "check(inner == false, 'nor may a coroutine of its own')");
    lua_check(&w, "check(not pcall(sched.event().wait, {}), 'a wait on what is not an event raises')");

    /* lib/coalesce.lua on the loop: five calls of one turn are one batch,
     * a key twice is a call of its own, each gets its own answer, and an
     * error reaches every caller of the batch. */
    lua_check(&w, "coalesce = dofile('lib/coalesce.lua')\n"
                  "batches = {}\n"
                  "call = coalesce.new(function(keys)\n"
                  "  batches[#batches + 1] = table.concat(keys, ',')\n"
                  "  local answers = {}\n"
                  "  for _, k in ipairs(keys) do answers[k] = {k * 10} end\n"
                  "  return answers\n"
                  "end)\n"
                  "got = {}");
    run_many(&w, "coalesced",
             "local key = I == 5 and 1 or I\n"
             "got[I] = call(key)\n"
             "check(got[I][1] == key * 10, 'its own answer', tostring(got[I][1]))\n", 5);
    lua_check(&w, "check(#batches == 2, 'two batches', table.concat(batches, ' | '))\n"
                  "check(batches[1] == '1', 'the repeated key alone first', batches[1])\n"
                  "check(batches[2] == '1,2,3,4', 'the rest together', batches[2])\n"
                  "check(got[1] ~= got[5], 'a table each')\n"
                  "failing = coalesce.new(function(keys) error('no database: ' .. #keys, 0) end)\n"
                  "errors = {}");
    run_many(&w, "a failing batch",
             "local ok, err = pcall(failing, I)\n"
             "errors[#errors + 1] = err\n", 3);
    lua_check(&w, "check(#errors == 3 and errors[1] == 'no database: 3' and errors[3] == errors[1],\n"
                  "  'every caller gets the error', table.concat(errors, ' | '))\n"
                  "check(call(7)[1] == 70, 'outside the loop a call is a batch of its own')");

    /* single_flight: three callers for one key while its call waits get
     * its answer; another key is a call of its own. */
    lua_check(&w, "asked = {}\n"
                  "read = coalesce.single_flight(function(key, extra)\n"
                  "  asked[#asked + 1] = key\n"
                  "  if key == 'a' then sched.later() end\n"
                  "  return key .. extra, 'second'\n"
                  "end)\n"
                  "answers = {}");
    run_many(&w, "single flight",
             "local key = I == 4 and 'b' or 'a'\n"
             "local one, two = read(key, '!')\n"
             "answers[I] = one .. ' ' .. two\n", 4);
    lua_check(&w, "check(table.concat(asked, ' ') == 'a b', 'one call a key', table.concat(asked, ' '))\n"
                  "check(answers[1] == 'a! second' and answers[2] == answers[1] and answers[3] == answers[1],\n"
                  "  'the waiters get its results', tostring(answers[2]))\n"
                  "check(answers[4] == 'b! second', 'another key asks', tostring(answers[4]))\n"
                  "check(read('a', '?') == 'a?', 'once it is over the next call asks again')");

    /* A waiter that goes: setting the event later resumes nothing. */
    lua_check(&w, "gone = sched.event()");
    lua_State *co = lua_newthread(w.L);
    int ref = luaL_ref(w.L, LUA_REGISTRYINDEX);
    (void)luaL_loadstring(co, "gone:wait() check(false, 'a forgotten waiter was resumed')");
    loop_set_current(&w, co);
    int nres = 0;
    int st = lua_resume(co, w.L, 0, &nres);
    loop_set_current(&w, NULL);
    check(st == LUA_YIELD && loop_owns(&w, co, nres), "waits on the loop", NULL);
    lua_pop(co, nres);
    loop_forget(&w, co);
    luaL_unref(w.L, LUA_REGISTRYINDEX, ref);
    lua_check(&w, "gone:set()");
    check(!loop_ready(&w), "nothing is ready after the set", NULL);

    /* A loop freed with a waiter parked frees its entry. */
    lua_check(&w, "never = sched.event()");
    co = lua_newthread(w.L);
    ref = luaL_ref(w.L, LUA_REGISTRYINDEX);
    (void)luaL_loadstring(co, "never:wait()");
    loop_set_current(&w, co);
    st = lua_resume(co, w.L, 0, &nres);
    loop_set_current(&w, NULL);
    check(st == LUA_YIELD, "parked when its loop goes", NULL);
    luaL_unref(w.L, LUA_REGISTRYINDEX, ref);
    close_worker(&w);

    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/*
 * budget.c — time budgets of Lua runs (lua.handler_budget_ms): a request or
 * job slice that runs past its deadline is stopped with an error.
 *
 * Why not a count hook alone: while a state carries a count hook, Lua sends
 * every VM instruction through its debug interface, which costs about as
 * much as the instruction itself, on every request. Instead, each thread
 * that runs Lua says what it runs and until when (budget_enter/leave), and
 * one watchdog thread looks at those deadlines every few milliseconds. Only
 * when a run is past its deadline does the watchdog signal that thread,
 * whose handler sets the count hook on the running state (what the
 * standalone lua interpreter does on Ctrl-C); the hook then raises the error
 * at the next instruction, and keeps raising it so that a handler's own
 * pcall cannot swallow it and loop on.
 *
 * A hook covers one Lua thread only, so the coroutine.resume and
 * coroutine.wrap that handlers get make the coroutine they run the one the
 * watchdog signals, under the deadline of the run that resumed it.
 *
 * A thread that finds no free slot (more than MAX_SLOTS threads running Lua)
 * falls back to checking the clock from a count hook, as before.
 */
#include "sgw.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#define MAX_SLOTS       256
#define WATCH_EVERY_MS  10
#define HOOK_EVERY      10000   /* instructions between clock checks (fallback only) */

typedef struct budget_slot {
    atomic_int         in_use;
    pthread_t          thread;
    _Atomic(lua_State *) running;     /* the state this thread runs, or NULL */
    atomic_ullong      deadline;      /* mono ms of the running state; 0: none */
    atomic_ullong      runs;          /* counts budget_enter calls */
    atomic_ullong      signalled_run; /* the run the watchdog last signalled */
} budget_slot;

static budget_slot       slots[MAX_SLOTS];
static atomic_int        nslots_used;       /* high-water mark of slots[] */
static _Thread_local budget_slot *my_slot;
static _Thread_local int          no_slot;  /* 1: all taken, use the count hook */
static pthread_key_t     slot_key;
static pthread_once_t    slot_once = PTHREAD_ONCE_INIT;

static pthread_t         watchdog;
static int               watchdog_running;
static atomic_int        watchdog_stop;
static int               budget_signal;

/* The deadline of a run lives in the thread's extra space, so that
 * coroutines (requests, jobs) each carry their own, also when a request
 * moves from a socket thread to its worker. */
static uint64_t *deadline_of(lua_State *L) { return (uint64_t *)lua_getextraspace(L); }

static void budget_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    uint64_t d = *deadline_of(L);
    if (d && clock_mono_ms() > d) {
        /* From now on raise at every instruction, so that a handler's own
         * pcall cannot swallow the error and carry on looping: the error
         * surfaces again in whichever frame runs next. */
        lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
        luaL_error(L, "handler exceeded its time budget (lua.handler_budget_ms)");
    }
    if (!no_slot) lua_sethook(L, NULL, 0, 0); /* a late signal: this run is within its budget */
}

/* Runs on the thread that overran, between any two of its instructions. */
static void on_budget_signal(int sig) {
    (void)sig;
    int saved = errno;
    budget_slot *s = my_slot;
    if (s) {
        lua_State *L = atomic_load(&s->running);
        uint64_t d = atomic_load(&s->deadline);
        if (L && d && clock_mono_ms() > d) lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
    }
    errno = saved;
}

static void release_slot(void *p) {
    budget_slot *s = p;
    atomic_store(&s->deadline, 0);
    atomic_store(&s->running, NULL);
    atomic_store(&s->in_use, 0);
}

static void make_slot_key(void) { pthread_key_create(&slot_key, release_slot); }

/* This thread's slot, claimed on first use and given back when it exits. */
static budget_slot *slot(void) {
    if (my_slot || no_slot) return my_slot;
    pthread_once(&slot_once, make_slot_key);
    for (int i = 0; i < MAX_SLOTS; i++) {
        int expected = 0;
        if (atomic_compare_exchange_strong(&slots[i].in_use, &expected, 1)) {
            budget_slot *s = &slots[i];
            s->thread = pthread_self();
            atomic_store(&s->running, NULL);
            atomic_store(&s->deadline, 0);
            int used = atomic_load(&nslots_used);
            while (used < i + 1 && !atomic_compare_exchange_weak(&nslots_used, &used, i + 1)) {}
            pthread_setspecific(slot_key, s);
            /* Whatever mask the thread was made with, the watchdog's signal
             * must reach it. */
            sigset_t only;
            sigemptyset(&only);
            sigaddset(&only, budget_signal);
            pthread_sigmask(SIG_UNBLOCK, &only, NULL);
            my_slot = s;
            return s;
        }
    }
    no_slot = 1;
    log_msg(LOG_WARN, "budget_slots_full", "more than %d threads run Lua; budgets of the rest are checked by a count hook", MAX_SLOTS);
    return NULL;
}

void budget_arm(lua_State *co, double budget_ms) {
    *deadline_of(co) = budget_ms > 0 ? clock_mono_ms() + (uint64_t)budget_ms : 0;
    /* A hook left from an earlier run that overran belongs to that run. */
    if (lua_gethook(co)) lua_sethook(co, NULL, 0, 0);
    if (!slot() && *deadline_of(co)) lua_sethook(co, budget_hook, LUA_MASKCOUNT, HOOK_EVERY);
}

void budget_disarm(lua_State *L) {
    *deadline_of(L) = 0;
    if (lua_gethook(L)) lua_sethook(L, NULL, 0, 0);
}

void budget_enter(lua_State *co) {
    budget_slot *s = slot();
    if (!s) return;
    uint64_t d = *deadline_of(co);
    /* A request resumed after waiting past its deadline (a statement or a
     * call that outlasted the budget) stops at its first instruction, as
     * it would have when the wait blocked the thread. */
    if (d && clock_mono_ms() > d) lua_sethook(co, budget_hook, LUA_MASKCOUNT, 1);
    atomic_store(&s->running, co);
    atomic_fetch_add(&s->runs, 1);
    atomic_store(&s->deadline, d);
}

void budget_leave(void) {
    budget_slot *s = my_slot;
    if (!s) return;
    atomic_store(&s->deadline, 0);
    atomic_store(&s->running, NULL);
}

/* ------------------------------------------------- handlers' coroutines */

/* Resumes co as the state this thread runs, within the deadline of the run
 * that resumes it: the hook of a state covers that state only, so the
 * watchdog's signal must find the coroutine that actually runs. */
static int resume_watched(lua_State *L, lua_State *co, int narg, int *nres) {
    budget_slot *s = my_slot;
    lua_State *outer = s ? atomic_load(&s->running) : NULL;
    if (outer) {
        *deadline_of(co) = *deadline_of(outer);
        atomic_store(&s->running, co);
    }
    int status = lua_resume(co, L, narg, nres);
    if (outer) {
        atomic_store(&s->running, outer);
        uint64_t d = *deadline_of(outer);
        /* The resumer raises too: it must not carry on past the deadline. */
        if (d && clock_mono_ms() > d) lua_sethook(outer, budget_hook, LUA_MASKCOUNT, 1);
    }
    return status;
}

/* Moves narg values to co and resumes it; leaves its results on L and
 * returns how many, or leaves the error on L and returns -1. */
static int resume_values(lua_State *L, lua_State *co, int narg) {
    if (!lua_checkstack(co, narg)) {
        lua_pushliteral(L, "too many arguments to resume");
        return -1;
    }
    lua_xmove(L, co, narg);
    int nres = 0;
    int status = resume_watched(L, co, narg, &nres);
    if (status != LUA_OK && status != LUA_YIELD) {
        lua_xmove(co, L, 1);
        return -1;
    }
    if (!lua_checkstack(L, nres + 1)) {
        lua_pop(co, nres);
        lua_pushliteral(L, "too many results to resume");
        return -1;
    }
    lua_xmove(co, L, nres);
    return nres;
}

/* coroutine.resume(co, ...): true and the results, or false and the error. */
static int watched_resume(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTHREAD);
    lua_State *co = lua_tothread(L, 1);
    int n = resume_values(L, co, lua_gettop(L) - 1);
    lua_pushboolean(L, n >= 0);
    if (n < 0) {
        lua_insert(L, -2);
        return 2;
    }
    lua_insert(L, -(n + 1));
    return n + 1;
}

/* The function coroutine.wrap returns: errors travel on to its caller. */
static int watched_wrapped(lua_State *L) {
    lua_State *co = lua_tothread(L, lua_upvalueindex(1));
    int n = resume_values(L, co, lua_gettop(L));
    if (n >= 0) return n;
    int status = lua_status(co);
    if (status != LUA_OK && status != LUA_YIELD) {
        /* The coroutine died: close what it left open, keep its error. */
#if LUA_VERSION_RELEASE_NUM >= 50406
        status = lua_closethread(co, L);
#else
        status = lua_resetthread(co);
#endif
        lua_xmove(co, L, 1);
    }
    if (status != LUA_ERRMEM && lua_type(L, -1) == LUA_TSTRING) {
        luaL_where(L, 1);
        lua_insert(L, -2);
        lua_concat(L, 2);
    }
    return lua_error(L);
}

/* coroutine.wrap(f) */
static int watched_wrap(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_State *co = lua_newthread(L);
    lua_pushvalue(L, 1);
    lua_xmove(L, co, 1);
    lua_pushcclosure(L, watched_wrapped, 1);
    return 1;
}

void budget_coroutines(lua_State *L) {
    if (lua_getfield(L, -1, "resume") == LUA_TFUNCTION) {
        lua_pop(L, 1);
        lua_pushcfunction(L, watched_resume);
        lua_setfield(L, -2, "resume");
        lua_pushcfunction(L, watched_wrap);
        lua_setfield(L, -2, "wrap");
    } else {
        lua_pop(L, 1);
    }
}

/* --------------------------------------------------------------- watchdog */

static void *watch(void *arg) {
    (void)arg;
    struct timespec tick = { 0, WATCH_EVERY_MS * 1000000L };
    while (!atomic_load(&watchdog_stop)) {
        nanosleep(&tick, NULL);
        uint64_t now = clock_mono_ms();
        int n = atomic_load(&nslots_used);
        for (int i = 0; i < n; i++) {
            budget_slot *s = &slots[i];
            if (!atomic_load(&s->in_use)) continue;
            uint64_t d = atomic_load(&s->deadline);
            if (!d || now <= d) continue;
            unsigned long long run = atomic_load(&s->runs);
            /* Once per run: the handler sets a hook that stays. */
            if (atomic_exchange(&s->signalled_run, run) == run) continue;
            pthread_kill(s->thread, budget_signal);
        }
    }
    return NULL;
}

int budget_start(void) {
    if (watchdog_running) return 0;
    budget_signal = SIGRTMIN;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_budget_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(budget_signal, &sa, NULL)) return -1;
    atomic_store(&watchdog_stop, 0);
    /* The watchdog itself never takes the signal. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&watchdog, NULL, watch, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) return -1;
    watchdog_running = 1;
    return 0;
}

void budget_stop(void) {
    if (!watchdog_running) return;
    atomic_store(&watchdog_stop, 1);
    pthread_join(watchdog, NULL);
    watchdog_running = 0;
}

/*
 * waits.c — coroutines of one loop waiting on each other (global `sched`):
 * sched.later() lets the rest of the loop's turn run first, and an event
 * (sched.event()) parks the coroutines that wait on it until one of them
 * sets it. What lib/coalesce.lua needs to gather the calls many coroutines
 * make in one turn into one statement.
 *
 * A wait is an entry on the loop's list of waiters (unordered) or of ready
 * coroutines (in the order they became ready); the loop resumes the ready
 * ones through waits_drive on its next turn. Only the coroutine the loop is
 * resuming may wait (waits_set_current); elsewhere later() returns at once
 * and waiting on an event raises (sched.waitable() tells which).
 */
#include "sgw.h"

#include <stdlib.h>

typedef struct wait_entry {
    lua_State         *co;
    const void        *event;          /* NULL: ready */
    struct wait_entry *prev, *next;
} wait_entry;

typedef struct wait_list {
    wait_entry *head, *tail;
} wait_list;

struct sgw_waits {
    wait_list waiting, ready;
};

typedef struct event_box {
    sgw_waits *owner;                  /* the loop of its first wait */
    int        set;
} event_box;

#define EVENT_MT "sgw.sched.event"

static _Thread_local sgw_waits *current_waits;
static _Thread_local lua_State *current_co;

static void list_push(wait_list *l, wait_entry *e) {
    e->next = NULL;
    e->prev = l->tail;
    if (l->tail) l->tail->next = e;
    else l->head = e;
    l->tail = e;
}

static void list_take(wait_list *l, wait_entry *e) {
    if (e->prev) e->prev->next = e->next;
    else l->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else l->tail = e->prev;
}

static void list_free(wait_list *l) {
    while (l->head) {
        wait_entry *e = l->head;
        list_take(l, e);
        free(e);
    }
}

sgw_waits *waits_new(void) {
    return calloc(1, sizeof(sgw_waits));
}

void waits_free(sgw_waits *w) {
    if (!w) return;
    list_free(&w->waiting);
    list_free(&w->ready);
    free(w);
}

void waits_set_current(sgw_waits *w, lua_State *co) {
    current_waits = co ? w : NULL;
    current_co = co;
}

static sgw_waits *usable(lua_State *L) {
    return current_waits && current_co == L && lua_isyieldable(L) ? current_waits : NULL;
}

void waits_forget(sgw_waits *w, lua_State *co) {
    if (!w) return;
    wait_list *lists[] = { &w->waiting, &w->ready };
    for (int i = 0; i < 2; i++) {
        for (wait_entry *e = lists[i]->head, *next; e; e = next) {
            next = e->next;
            if (e->co != co) continue;
            list_take(lists[i], e);
            free(e);
        }
    }
}

int waits_ready(const sgw_waits *w) {
    return w && w->ready.head != NULL;
}

void waits_drive(sgw_waits *w, void (*on_ready)(lua_State *co, int nres, void *ud), void *ud) {
    if (!w) return;
    /* Those that were ready when the turn began: what they make ready in
     * turn goes on the next one. */
    int n = 0;
    for (wait_entry *e = w->ready.head; e; e = e->next) n++;
    while (n-- > 0 && w->ready.head) {
        wait_entry *e = w->ready.head;
        list_take(&w->ready, e);
        lua_State *co = e->co;
        free(e);
        on_ready(co, 0, ud);
    }
}

/* Parks L on w's list (ready when event is NULL) and yields the marker. */
static int park(lua_State *L, sgw_waits *w, const void *event) {
    wait_entry *e = malloc(sizeof *e);
    if (!e) return luaL_error(L, "out of memory");
    e->co = L;
    e->event = event;
    list_push(event ? &w->waiting : &w->ready, e);
    lua_pushlightuserdata(L, w);
    return lua_yield(L, 1);
}

/* Moves event's waiters to the ready list. */
static void wake(sgw_waits *w, const void *event) {
    for (wait_entry *e = w->waiting.head, *next; e; e = next) {
        next = e->next;
        if (e->event != event) continue;
        list_take(&w->waiting, e);
        e->event = NULL;
        list_push(&w->ready, e);
    }
}

/* sched.later(): resumed on the loop's next turn, after the coroutines that
 * are ready now; returns at once where the coroutine cannot wait. */
static int l_later(lua_State *L) {
    sgw_waits *w = usable(L);
    return w ? park(L, w, NULL) : 0;
}

static int l_waitable(lua_State *L) {
    lua_pushboolean(L, usable(L) != NULL);
    return 1;
}

static int l_event(lua_State *L) {
    event_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->owner = NULL;
    b->set = 0;
    luaL_setmetatable(L, EVENT_MT);
    return 1;
}

/* ev:wait(): returns once ev is set (at once when it already is). */
static int l_event_wait(lua_State *L) {
    event_box *b = luaL_checkudata(L, 1, EVENT_MT);
    if (b->set) return 0;
    sgw_waits *w = usable(L);
    if (!w) return luaL_error(L, "sched: this coroutine cannot wait here (check sched.waitable())");
    if (b->owner && b->owner != w) return luaL_error(L, "sched: an event belongs to the loop that first waited on it");
    b->owner = w;
    return park(L, w, b);
}

/* ev:set(): its waiters go on at the loop's next turn; later waits return at once. */
static int l_event_set(lua_State *L) {
    event_box *b = luaL_checkudata(L, 1, EVENT_MT);
    if (b->set) return 0;
    b->set = 1;
    if (b->owner) wake(b->owner, b);
    return 0;
}

static int l_event_is_set(lua_State *L) {
    event_box *b = luaL_checkudata(L, 1, EVENT_MT);
    lua_pushboolean(L, b->set);
    return 1;
}

/* An event nobody can set any more: its waiters would never go on. They
 * go on (the event reads as set); collected only when nothing refers to it,
 * which a waiter's own frame normally does. */
static int l_event_gc(lua_State *L) {
    event_box *b = luaL_checkudata(L, 1, EVENT_MT);
    if (!b->set && b->owner) wake(b->owner, b);
    b->set = 1;
    return 0;
}

void lapi_sched_open(lua_State *L) {
    static const luaL_Reg event_methods[] = {
        { "wait", l_event_wait }, { "set", l_event_set }, { "is_set", l_event_is_set }, { NULL, NULL }
    };
    luaL_newmetatable(L, EVENT_MT);
    luaL_newlib(L, event_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_event_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {
        { "later", l_later }, { "event", l_event }, { "waitable", l_waitable }, { NULL, NULL }
    };
    luaL_newlib(L, fns);
    lua_setglobal(L, "sched");
}

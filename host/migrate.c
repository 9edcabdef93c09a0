/*
 * migrate.c — how a binding running on a socket thread hands its request
 * over to the worker's own thread before it waits.
 *
 * A socket thread runs a request's coroutine itself until the first call
 * that would wait (worker.c). The bindings cannot know which thread they are
 * on, so the scheduler says here which coroutine, if any, this socket thread
 * is running; a binding asks (SGW_MIGRATE_IF_SOCKET) and, when it is that
 * coroutine, yields so that the scheduler moves the request. Kept apart from
 * worker.c so that the bindings below the scheduler depend on this alone.
 */
#include "sgw.h"

_Thread_local lua_State *sgw_socket_co;
/* Set by the binding that yields to migrate; distinguishes that yield from a
 * handler yielding at its top level. */
static _Thread_local int asked;

void migrate_begin(lua_State *co) {
    sgw_socket_co = co;
    asked = 0;
}

void migrate_end(void) {
    sgw_socket_co = NULL;
}

int migrate_asked(void) {
    return asked;
}

int sgw_migrate_if_socket(lua_State *L) {
    if (L == sgw_socket_co && lua_isyieldable(L)) {
        asked = 1;
        return 1;
    }
    /* Inside require, a sort comparator, a gsub callback or a handler's own
     * coroutine: the socket thread waits. Rare, and counted so it shows. */
    metrics_count("sgw_inline_blocking_total", NULL, 1);
    return 0;
}

/*
 * worker.c — the Lua workers that run requests.
 *
 * Each worker is one thread with its own Lua state, its own Redis
 * connection and a small pool of PostgreSQL connections. Requests run as
 * coroutines in a worker's state, and whoever holds the worker (a socket
 * thread, or the worker's own thread) is the only one touching its state
 * and connections.
 *
 * Most requests never wait on anything, and handing each one to another
 * thread costs two cross-thread wake-ups, which dominated the cost of a
 * request. So the socket thread that read a request borrows an idle worker
 * (the one it borrowed last, when that one is idle) and runs the coroutine
 * itself. At the first call that could block (database, Redis, outbound
 * HTTP, password hashing) the binding yields and the coroutine migrates to
 * the worker's own thread: socket threads never block on I/O.
 *
 * A worker's thread runs an event loop over many request coroutines: a
 * statement, a Redis call or an outbound call sends its work, the coroutine
 * yields, and the loop resumes it when the answer is in (loop.c), so one
 * worker keeps up to http.requests_per_worker requests waiting at once.
 * Requests that find no idle worker wait in a queue, which every worker's
 * loop takes from while it has room. (Password hashing still blocks the
 * loop for its few milliseconds.)
 *
 * A worker switches to a new generation of handlers (hot reload) only when
 * none of its coroutines runs, and only on its own thread: building a state
 * takes far too long for a socket thread, which therefore only borrows
 * workers whose state is current. A worker behind takes no new requests
 * until its running ones have ended.
 */
#include "sgw.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Longest wait of a busy loop (a pool wait's deadline is checked then). */
#define BUSY_POLL_MS 50
/* Queued requests a loop starts per turn: between turns it takes in the
 * answers that came meanwhile, so that requests already waiting (their
 * time budget runs while they wait) are not held up behind a long queue. */
#define TURN_STARTS  16
/* database.pool_size's ceiling (httpc_poll's extra sockets, less the
 * wake-up and Redis). */

/* Who holds a worker; changes only under qlock. */
typedef enum {
    W_IDLE,     /* on the idle stack; its thread waits */
    W_LENT,     /* a socket thread runs a request in its state */
    W_OWN       /* its own thread runs (or is about to look for work) */
} worker_holder;

/* A request the worker's loop runs: its coroutine waits in a binding. */
typedef struct running_req {
    sgw_request *req;
    lua_State   *co;
    int          ref;               /* anchors co in the registry */
} running_req;

typedef struct http_worker {
    sgw_worker          w;
    pthread_t           thread;
    int                 efd;        /* wakes the loop (wake, workers_enqueue) */
    worker_holder       holder;
    sgw_request        *mail;       /* a migrated request for this thread */
    int                 reset;      /* close the Lua state once nothing runs in it */
    struct http_worker *next_idle;
    running_req        *running;    /* [capacity] */
    atomic_int          nrunning;   /* read by workers_enqueue to pick a loop */
} http_worker;

static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static sgw_request    *qhead, *qtail;
static int             qdepth;
static int             stopping;
static int             alive;       /* worker threads that have not left */
static http_worker    *idle_top;

static http_worker *workers;
static int          nworkers;
static double       budget_ms;
static int          capacity;       /* http.requests_per_worker */

/* How a request's answer goes out (the listener's http_complete). */
static void (*complete)(sgw_request *req);

/* Registry keys (by address) of a state's request coroutine, of
 * dispatch.handle and of the shared empty table (push_empty). */
static char co_key, handle_key, empty_key;

/* What entry() hands back besides success: (code, message). */
#define CODE_NO_DISPATCH (-1)

/* ------------------------------------------------------------ setup */

int worker_init(sgw_worker *w, int id, const char *role, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->id = id;
    w->role = role;
    const char *db = config_str("database.url");
    if (*db) w->pg = pg_open(db);
    if (w->pg && pg_set_replica(w->pg, config_str("database.read_url"))) {
        snprintf(err, errlen, "out of memory opening the read replica");
        return -1;
    }
    if (redis_configured()) w->redis = redis_open(config_str("redis.url"));
    return luart_refresh(w, err, errlen);
}

/* One worker's start, run on a thread of its own by worker_init_all. */
typedef struct {
    sgw_worker *w;
    int         id;
    const char *role;
    int         rc;
    char        err[2048];
} init_task;

static void *init_one(void *arg) {
    init_task *t = arg;
    t->rc = worker_init(t->w, t->id, t->role, t->err, sizeof t->err);
    return NULL;
}

/* Building a worker's Lua state is most of a start, and each state is its
 * own: the workers are initialised at once, one thread each (a worker whose
 * thread cannot be made is initialised on this one). */
int worker_init_all(sgw_worker *const *ws, int n, const char *role, int *failed, char *err, size_t errlen) {
    init_task *tasks = calloc((size_t)n, sizeof *tasks);
    pthread_t *threads = calloc((size_t)n, sizeof *threads);
    unsigned char *made = calloc((size_t)n, 1);
    int rc = 0, first = -1;
    const char *why = "out of memory";
    if (!tasks || !threads || !made) {
        rc = -1;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        tasks[i] = (init_task){ .w = ws[i], .id = i, .role = role };
        if (pthread_create(&threads[i], NULL, init_one, &tasks[i]) == 0) made[i] = 1;
        else init_one(&tasks[i]);
    }
    for (int i = 0; i < n; i++) {
        if (made[i]) pthread_join(threads[i], NULL);
        if (tasks[i].rc && rc == 0) {
            rc = -1;
            first = i;
            why = tasks[i].err;
        }
    }
    if (rc)
        for (int i = 0; i < n; i++) worker_destroy(ws[i]);
out:
    if (rc) log_msg(LOG_ERROR, "worker_init", "%s worker %d: %s", role, first, why);
    if (failed) *failed = first;
    if (err) snprintf(err, errlen, "%s", rc ? why : "");
    free(tasks);
    free(threads);
    free(made);
    return rc;
}

void worker_destroy(sgw_worker *w) {
    luart_close_state(w);
    if (w->pg) pg_close(w->pg);
    /* The loop's connections go first: on a cluster they use w->redis's map. */
    redis_loop_free(w->redis_loop);
    if (w->redis) redis_close(w->redis);
    if (w->httpc) httpc_free(w->httpc);
    if (w->pgpool) pgpool_free(w->pgpool);
    if (w->replica_pool) pgpool_free(w->replica_pool);
    offload_inbox_free(w->inbox);
    waits_free(w->waits);
    memset(w, 0, sizeof *w);
}

/* ------------------------------------------------------------ responses */

static void set_header(sgw_request *req, const char *name, const char *value) {
    if (req->nresp_headers % 8 == 0) {
        sgw_kv *n = realloc(req->resp_headers, (size_t)(req->nresp_headers + 8) * sizeof *n);
        if (!n) return;
        req->resp_headers = n;
    }
    sgw_kv *h = &req->resp_headers[req->nresp_headers];
    h->name = req_strndup(req, name, strlen(name));
    h->value = req_strndup(req, value, strlen(value));
    if (!h->name || !h->value) {
        req_strfree(req, h->name);
        req_strfree(req, h->value);
        return;
    }
    req->nresp_headers++;
}

static void clear_response(sgw_request *req) {
    for (int i = 0; i < req->nresp_headers; i++) {
        req_strfree(req, req->resp_headers[i].name);
        req_strfree(req, req->resp_headers[i].value);
    }
    free(req->resp_headers);
    req->resp_headers = NULL;
    req->nresp_headers = 0;
    free(req->resp_body);
    req->resp_body = NULL;
    req->resp_len = 0;
}

/* The answer when Lua itself could not produce one; it says nothing of
 * what went wrong inside. */
static void internal_error(sgw_request *req, int status, const char *code, const char *title) {
    clear_response(req);
    char body[512];
    int n = snprintf(body, sizeof body,
                     "{\"type\":\"/docs/errors#%s\",\"title\":\"%s\",\"status\":%d,"
                     "\"detail\":\"The request could not be completed; it was logged under its requestId.\","
                     "\"code\":\"%s\",\"requestId\":\"%s\"}",
                     code, title, status, code, req->id);
    req->status = status;
    req->resp_body = strndup(body, (size_t)n);
    req->resp_len = req->resp_body ? (size_t)n : 0;
    set_header(req, "Content-Type", "application/problem+json");
    if (status == 503) set_header(req, "Retry-After", "1");
}

/* unique: the names are known to be distinct (headers, which http.c has
 * already merged), so there is no need to look for an earlier value. */
static void push_kv_table(lua_State *L, const sgw_kv *kv, int n, int unique) {
    lua_createtable(L, 0, n);
    for (int i = 0; i < n; i++) {
        if (!unique) {
            int present = lua_getfield(L, -1, kv[i].name) != LUA_TNIL;
            lua_pop(L, 1);
            if (present) continue; /* first value wins */
        }
        lua_pushstring(L, kv[i].value ? kv[i].value : "");
        lua_setfield(L, -2, kv[i].name);
    }
}

static int read_only(lua_State *L) {
    return luaL_error(L, "this request's empty query and params table is shared and read-only");
}

/* Pushes the state's shared empty table, made on first use: requests
 * without query arguments or path parameters get it as query, query_all
 * and params, so that most requests make three tables fewer. Writing to it
 * raises; its metatable is protected. */
static void push_empty(lua_State *L) {
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &empty_key) == LUA_TTABLE) return;
    lua_pop(L, 1);
    lua_createtable(L, 0, 0);
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, read_only);
    lua_setfield(L, -2, "__newindex");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &empty_key);
}

/* query_all: every value of repeated names. */
static void push_query_all(lua_State *L, const sgw_request *req) {
    lua_createtable(L, 0, req->nquery);
    for (int i = 0; i < req->nquery; i++) {
        lua_getfield(L, -1, req->query[i].name);
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
            lua_newtable(L);
            lua_pushvalue(L, -1);
            lua_setfield(L, -3, req->query[i].name);
        }
        lua_pushstring(L, req->query[i].value ? req->query[i].value : "");
        lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
        lua_pop(L, 1);
    }
}

static void push_request(lua_State *L, sgw_request *req) {
    lua_createtable(L, 0, 16);
    lua_pushstring(L, req->id);
    lua_setfield(L, -2, "id");
    lua_pushstring(L, req->method);
    lua_setfield(L, -2, "method");
    lua_pushstring(L, req->path);
    lua_setfield(L, -2, "path");
    lua_pushstring(L, req->remote_addr);
    lua_setfield(L, -2, "remote_addr");
    lua_pushstring(L, req->peer_addr);
    lua_setfield(L, -2, "peer_addr");
    push_kv_table(L, req->headers, req->nheaders, 1);
    lua_setfield(L, -2, "headers");
    if (req->nquery == 0) {
        push_empty(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, "query");
        lua_setfield(L, -2, "query_all");
    } else {
        push_kv_table(L, req->query, req->nquery, 0);
        lua_setfield(L, -2, "query");
        push_query_all(L, req);
        lua_setfield(L, -2, "query_all");
    }
    if (req->body) {
        lua_pushlstring(L, req->body, req->body_len);
        lua_setfield(L, -2, "body");
    }
    if (req->match.route >= 0) {
        lua_pushinteger(L, req->match.route + 1);
        lua_setfield(L, -2, "route_index");
    }
    if (req->match.nparams == 0) push_empty(L);
    else lua_createtable(L, 0, req->match.nparams);
    for (int i = 0; i < req->match.nparams; i++) {
        lua_pushstring(L, req->match.params[i].value);
        lua_setfield(L, -2, req->match.params[i].name);
    }
    lua_setfield(L, -2, "params");
    if (req->early_status) {
        lua_pushinteger(L, req->early_status);
        lua_setfield(L, -2, "early_status");
    }
    if (req->match.allow[0]) {
        lua_pushstring(L, req->match.allow);
        lua_setfield(L, -2, "allow");
    }
}

/* The header value at the top of L: a string, or an integer formatted here
 * (rate-limit counts change with every request; making a Lua string of each
 * would only feed the collector). */
static void header_from_lua(lua_State *L, sgw_request *req, const char *name) {
    char num[24];
    const char *v;
    int type = lua_type(L, -1);
    if (type == LUA_TNUMBER && lua_isinteger(L, -1)) {
        lua_Integer n = lua_tointeger(L, -1);
        unsigned long long u = n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n;
        char *p = num + sizeof num;
        *--p = 0;
        do *--p = (char)('0' + u % 10); while (u /= 10);
        if (n < 0) *--p = '-';
        v = p;
    } else if (type == LUA_TSTRING || type == LUA_TNUMBER) {
        v = lua_tostring(L, -1);
    } else {
        return;
    }
    /* Header values must not smuggle a line break. */
    if (!strpbrk(v, "\r\n")) set_header(req, name, v);
}

/* Reads dispatch's results: status, headers, body, client_id, and the
 * headers every response carries (rate limits), which give way to a header
 * of the same name in the first table. */
static int take_response(lua_State *L, sgw_request *req) {
    int top = lua_gettop(L);
    int base = top - 4;
    if (!lua_isinteger(L, base)) return -1;
    lua_Integer status = lua_tointeger(L, base);
    if (status < 100 || status > 599) return -1;
    req->status = (int)status;
    int own = lua_istable(L, base + 1);
    if (own) {
        lua_pushnil(L);
        while (lua_next(L, base + 1)) {
            if (lua_type(L, -2) == LUA_TSTRING) header_from_lua(L, req, lua_tostring(L, -2));
            lua_pop(L, 1);
        }
    }
    if (lua_istable(L, base + 4)) {
        lua_pushnil(L);
        while (lua_next(L, base + 4)) {
            if (lua_type(L, -2) == LUA_TSTRING) {
                int taken = 0;
                if (own) {
                    lua_pushvalue(L, -2);
                    taken = lua_rawget(L, base + 1) != LUA_TNIL;
                    lua_pop(L, 1);
                }
                if (!taken) header_from_lua(L, req, lua_tostring(L, -2));
            }
            lua_pop(L, 1);
        }
    }
    size_t len = 0;
    const char *body = lua_type(L, base + 2) == LUA_TSTRING ? lua_tolstring(L, base + 2, &len) : NULL;
    req->resp_body = malloc(len ? len : 1);
    if (!req->resp_body) return -1;
    if (len) memcpy(req->resp_body, body, len);
    req->resp_len = len;
    if (lua_type(L, base + 3) == LUA_TSTRING) {
        size_t cl;
        const char *client = lua_tolstring(L, base + 3, &cl);
        req_strfree(req, req->client_id);
        req->client_id = req_strndup(req, client, cl);
    }
    return 0;
}

/* ------------------------------------------------------------ the coroutine */

/* Ends the coroutine: nothing on success, else (code, message). */
static int entry_k(lua_State *co, int status, lua_KContext ctx) {
    sgw_request *req = (sgw_request *)ctx;
    if (status == LUA_OK || status == LUA_YIELD) {
        if (take_response(co, req) == 0) return 0;
        clear_response(req);
        lua_pushinteger(co, LUA_ERRRUN);
        lua_pushliteral(co, "dispatch returned no valid response");
        return 2;
    }
    /* The message handler added the traceback (not for memory errors). */
    lua_pushinteger(co, status);
    lua_insert(co, -2);
    return 2;
}

/* The body of a request's coroutine: builds the request table and calls
 * dispatch.handle. Everything here runs protected by the resume, so a state
 * at its memory ceiling fails the request, not the process. */
static int entry(lua_State *co) {
    sgw_request *req = lua_touserdata(co, 1);
    lua_settop(co, 0);
    lua_pushcfunction(co, luart_traceback);
    if (lua_rawgetp(co, LUA_REGISTRYINDEX, &handle_key) != LUA_TFUNCTION) {
        lua_pop(co, 1);
        char err[2048];
        if (luart_require(co, "dispatch", err, sizeof err)) {
            lua_pushinteger(co, CODE_NO_DISPATCH);
            lua_pushstring(co, err);
            return 2;
        }
        lua_getfield(co, -1, "handle");
        lua_remove(co, -2);
        lua_pushvalue(co, -1);
        lua_rawsetp(co, LUA_REGISTRYINDEX, &handle_key);
    }
    push_request(co, req);
    int status = lua_pcallk(co, 1, 5, 1, (lua_KContext)req, entry_k);
    return entry_k(co, status, (lua_KContext)req);
}

static int new_co(lua_State *L) {
    lua_newthread(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &co_key);
    return 1;
}

/* The state's request coroutine (one per state, reused: a coroutine whose
 * function returned can start the next one). NULL at the memory ceiling. */
static lua_State *request_co(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &co_key);
    lua_State *co = lua_tothread(L, -1);
    lua_pop(L, 1);
    if (co) return co;
    lua_pushcfunction(L, new_co);
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
        lua_pop(L, 1);
        return NULL;
    }
    co = lua_tothread(L, -1);
    lua_pop(L, 1);
    return co;
}

/* On the worker's own thread the coroutine may wait in its pool and its
 * transfers (the bindings check whose turn it is); on a socket thread it
 * migrates instead. */
static int resume(sgw_worker *w, lua_State *co, int nargs, int *nres, int on_socket) {
    if (on_socket) migrate_begin(co);
    else loop_set_current(w, co);
    budget_enter(co);
    int rc = lua_resume(co, w->L, nargs, nres);
    budget_leave();
    if (on_socket) migrate_end();
    else loop_set_current(w, NULL);
    return rc;
}

static void log_handler_error(const sgw_request *req, const char *msg) {
    char line[8192];
    size_t n = log_begin(line, sizeof line);
    n += (size_t)snprintf(line + n, sizeof line - n, ",\"level\":\"error\",\"event\":\"handler_error\",\"requestId\":\"%s\",\"error\":", req->id);
    n = json_escape(line, n, sizeof line - 1, msg ? msg : "?", msg ? strlen(msg) : 1);
    if (n < sizeof line) line[n++] = '}';
    log_line(line, n);
}

/* Turns what the coroutine ended with into req's response and readies the
 * coroutine for the next request. Returns 1 when the state hit its memory
 * ceiling and must be closed before it serves again. */
static int finish(sgw_worker *w, sgw_request *req, lua_State *co, int rc, int nres) {
    if (rc == LUA_OK && nres == 0) {
        lua_settop(co, 0);
        return 0;
    }
    int code = LUA_ERRRUN;
    const char *msg;
    if (rc == LUA_OK) {
        code = (int)lua_tointeger(co, -2);
        msg = lua_tostring(co, -1);
    } else if (rc == LUA_YIELD) {
        msg = "attempt to yield from outside a coroutine";
    } else {
        code = rc;
        msg = lua_tostring(co, -1);
    }
    if (code == CODE_NO_DISPATCH) log_msg(LOG_ERROR, "dispatch_missing", "%s", msg ? msg : "?");
    else log_handler_error(req, msg);
    internal_error(req, 500, "internal_error", "Internal error");
    if (code == LUA_ERRMEM) {
        /* A state that hit its ceiling may hold on to garbage a module kept;
         * the next request starts from a clean state. */
        return 1;
    }
    if (rc == LUA_OK) {
        lua_settop(co, 0);
    } else {
        /* A coroutine stopped by an error or a stray yield: close what it
         * left open and make a fresh one next time. */
#if LUA_VERSION_RELEASE_NUM >= 50406
        lua_closethread(co, w->L);
#else
        lua_resetthread(co);
#endif
        lua_pushnil(w->L);
        lua_rawsetp(w->L, LUA_REGISTRYINDEX, &co_key);
    }
    return 0;
}

/* Matched under another generation than the worker's: match again. */
static void rematch(sgw_worker *w, sgw_request *req) {
    if (req->gen_id == w->gen->id) return;
    match_free(&req->match);
    routes_match(&w->gen->routes, req->method, req->path, &req->match);
    req->gen_id = w->gen->id;
    req_strfree(req, req->route_pattern);
    const char *pattern = req->match.route >= 0 ? w->gen->routes.v[req->match.route].pattern : NULL;
    req->route_pattern = pattern ? req_strndup(req, pattern, strlen(pattern)) : NULL;
    if (!req->early_status && req->match.status) req->early_status = req->match.status;
}

/* Starts req in coroutine co (NULL: none could be made); returns
 * lua_resume's status. */
static int start(sgw_worker *w, sgw_request *req, lua_State *co, int *nres, int on_socket) {
    rematch(w, req);
    if (!co) {
        *nres = 0;
        return LUA_ERRMEM;
    }
    lua_settop(co, 0);
    lua_pushcfunction(co, entry);
    lua_pushlightuserdata(co, req);
    budget_arm(co, budget_ms);
    return resume(w, co, 1, nres, on_socket);
}

/* The end of every request on a worker's own thread. A state at its
 * memory ceiling is closed once no other request runs in it. */
static void conclude(http_worker *hw, sgw_request *req, lua_State *co, int rc, int nres) {
    sgw_worker *w = &hw->w;
    if (!co) {
        log_msg(LOG_ERROR, "worker_state", "worker %d: no memory left for a request coroutine", w->id);
        internal_error(req, 500, "internal_error", "Internal error");
        hw->reset = 1;
    } else {
        loop_forget(w, co);
        if (finish(w, req, co, rc, nres)) hw->reset = 1;
    }
    if (w->pg) pg_reset_session(w->pg);
}

/* ------------------------------------------------------------ hand-offs */

static int is_current(const http_worker *hw, uint64_t gen) {
    return hw->w.L && hw->w.gen && hw->w.gen->id == gen;
}

static void poke(http_worker *hw) {
    uint64_t one = 1;
    if (write(hw->efd, &one, sizeof one) < 0 && errno != EAGAIN)
        log_msg(LOG_WARN, "worker_wake", "cannot wake worker %d: %s", hw->w.id, strerror(errno));
}

/* Under qlock: the worker's own thread takes it over. */
static void wake(http_worker *hw) {
    hw->holder = W_OWN;
    poke(hw);
}

/* Under qlock. */
static http_worker *pop_idle(void) {
    http_worker *hw = idle_top;
    if (hw) idle_top = hw->next_idle;
    return hw;
}

/* Under qlock: takes hw off the idle stack wherever it is; 0 when it is
 * not there. */
static int take_idle(http_worker *hw) {
    for (http_worker **p = &idle_top; *p; p = &(*p)->next_idle) {
        if (*p == hw) {
            *p = hw->next_idle;
            return 1;
        }
    }
    return 0;
}

static void push_idle(http_worker *hw) {
    hw->holder = W_IDLE;
    hw->next_idle = idle_top;
    idle_top = hw;
}

/* Returns a worker a socket thread borrowed; its thread takes over when
 * there is queued work, a stop, or a state to rebuild. */
static void give_back(http_worker *hw) {
    pthread_mutex_lock(&qlock);
    if (qhead || stopping || hw->reset) wake(hw);
    else push_idle(hw);
    pthread_mutex_unlock(&qlock);
}

int workers_run_inline(sgw_request *req) {
    /* The worker this thread lent last, while it is idle: its state is
     * still in this core's caches (measured: 6-15 % more small requests a
     * second than taking whichever worker is on top). An index, not a
     * pointer, so that it outlives a stop and a new start of the workers. */
    static _Thread_local int last = -1;
    uint64_t gen = luart_generation_id();
    pthread_mutex_lock(&qlock);
    http_worker *hw = NULL;
    if (!stopping) {
        http_worker *warm = last >= 0 && last < nworkers ? &workers[last] : NULL;
        if (warm && warm->holder == W_IDLE && is_current(warm, gen) && take_idle(warm)) hw = warm;
        /* A stale worker at the top stays there: workers_enqueue hands it
         * the request and it refreshes its state on its own thread. */
        else if (idle_top && is_current(idle_top, gen)) hw = pop_idle();
    }
    if (hw) last = (int)(hw - workers);
    if (hw) hw->holder = W_LENT;
    pthread_mutex_unlock(&qlock);
    if (!hw) return WORKERS_QUEUE;

    sgw_worker *w = &hw->w;
    lua_State *co = request_co(w->L);
    int nres;
    int rc = start(w, req, co, &nres, 1);
    if (rc == LUA_YIELD && migrate_asked()) {
        req->worker = hw;
        return WORKERS_MIGRATE;
    }
    if (!co) {
        log_msg(LOG_ERROR, "worker_state", "worker %d: no memory left for a request coroutine", w->id);
        internal_error(req, 500, "internal_error", "Internal error");
        hw->reset = 1;
    } else if (finish(w, req, co, rc, nres)) {
        hw->reset = 1;
    }
    /* Only a blocking call made where it could not yield leaves a
     * transaction open; otherwise this is a check without I/O. */
    if (w->pg) pg_reset_session(w->pg);
    give_back(hw);
    metrics_count("sgw_requests_inline_total", NULL, 1);
    return WORKERS_DONE;
}

void workers_migrate(sgw_request *req) {
    http_worker *hw = req->worker;
    metrics_count("sgw_requests_migrated_total", NULL, 1);
    pthread_mutex_lock(&qlock);
    hw->mail = req;
    wake(hw);
    pthread_mutex_unlock(&qlock);
}

void workers_enqueue(sgw_request *req) {
    req->next = NULL;
    metrics_count("sgw_requests_queued_total", NULL, 1);
    pthread_mutex_lock(&qlock);
    if (stopping && alive == 0) {
        /* Shutting down and no thread left to run it (a request that came
         * on a kept-alive connection after the drain): answer it now, so
         * that no connection stays suspended. */
        pthread_mutex_unlock(&qlock);
        internal_error(req, 503, "service_unavailable", "Service unavailable");
        complete(req);
        return;
    }
    if (qtail) qtail->next = req;
    else qhead = req;
    qtail = req;
    qdepth++;
    /* An idle worker takes it; else the busy loop with the most room. */
    http_worker *hw = pop_idle();
    if (hw) {
        wake(hw);
    } else {
        http_worker *best = NULL;
        for (int i = 0; i < nworkers; i++) {
            http_worker *c = &workers[i];
            if (c->holder != W_OWN || atomic_load(&c->nrunning) >= capacity) continue;
            if (!best || atomic_load(&c->nrunning) < atomic_load(&best->nrunning)) best = c;
        }
        if (best) poke(best);
    }
    pthread_mutex_unlock(&qlock);
}

int workers_queue_depth(void) {
    pthread_mutex_lock(&qlock);
    int d = qdepth;
    pthread_mutex_unlock(&qlock);
    return d;
}

/* ------------------------------------------------------------ worker threads */

/* Ends a request the loop ran: its answer goes out, its coroutine goes. */
static void end_running(http_worker *hw, int i, int rc, int nres) {
    running_req rr = hw->running[i];
    conclude(hw, rr.req, rr.co, rc, nres);
    if (hw->w.L && rr.ref != LUA_NOREF) luaL_unref(hw->w.L, LUA_REGISTRYINDEX, rr.ref);
    int n = atomic_load(&hw->nrunning) - 1;
    hw->running[i] = hw->running[n];
    atomic_store(&hw->nrunning, n);
    complete(rr.req);
}

/* Runs one slice of running request i: it yields on its pool or its
 * transfers (and stays), or ends. */
static void step(http_worker *hw, int i, int nargs) {
    running_req *rr = &hw->running[i];
    int nres = 0;
    int rc = resume(&hw->w, rr->co, nargs, &nres, 0);
    if (rc == LUA_YIELD) {
        int waits = loop_owns(&hw->w, rr->co, nres);
        lua_pop(rr->co, nres);       /* else a stray yield: finish() answers 500 */
        if (waits) return;
    }
    end_running(hw, i, rc, nres);
}

static void on_ready(lua_State *co, int nres, void *ud) {
    http_worker *hw = ud;
    int n = atomic_load(&hw->nrunning);
    for (int i = 0; i < n; i++) {
        if (hw->running[i].co == co) {
            step(hw, i, nres);
            return;
        }
    }
}

/* Makes room for req with a coroutine of its own (co: the one it runs in
 * already, migrated from a socket thread; NULL: a new one). -1 when the
 * state cannot make one (the request is answered 500). */
static int add_running(http_worker *hw, sgw_request *req, lua_State *co) {
    lua_State *L = hw->w.L;
    int n = atomic_load(&hw->nrunning);
    running_req *rr = &hw->running[n];
    rr->req = req;
    rr->ref = LUA_NOREF;
    if (co) {
        /* The state's reused request coroutine is now this request's:
         * inline runs get a fresh one. */
        lua_pushthread(co);
        lua_xmove(co, L, 1);
        rr->ref = luaL_ref(L, LUA_REGISTRYINDEX);
        lua_pushnil(L);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &co_key);
        rr->co = co;
    } else {
        lua_pushcfunction(L, new_co);
        if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
            lua_pop(L, 1);
            return -1;
        }
        rr->co = lua_tothread(L, -1);
        rr->ref = luaL_ref(L, LUA_REGISTRYINDEX);
        lua_pushnil(L);                 /* new_co registered it as the reused one */
        lua_rawsetp(L, LUA_REGISTRYINDEX, &co_key);
    }
    atomic_store(&hw->nrunning, n + 1);
    return n;
}

/* Takes a migrated request over: its coroutine waits in the binding that
 * yielded, which now runs again. */
static void run_migrated(http_worker *hw, sgw_request *req) {
    lua_State *co = request_co(hw->w.L);
    int i = co ? add_running(hw, req, co) : -1;
    if (i < 0) {
        internal_error(req, 500, "internal_error", "Internal error");
        hw->reset = 1;
        complete(req);
        return;
    }
    step(hw, i, 0);
}

/* Starts a queued request from the start on the worker's own thread. */
static void run_queued(http_worker *hw, sgw_request *req) {
    sgw_worker *w = &hw->w;
    if (!w->L) {
        log_msg(LOG_ERROR, "worker_state", "worker %d has no Lua state", w->id);
        internal_error(req, 503, "service_unavailable", "Service unavailable");
        complete(req);
        return;
    }
    int i = add_running(hw, req, NULL);
    if (i < 0) {
        log_msg(LOG_ERROR, "worker_state", "worker %d: no memory left for a request coroutine", w->id);
        internal_error(req, 500, "internal_error", "Internal error");
        hw->reset = 1;
        complete(req);
        return;
    }
    running_req *rr = &hw->running[i];
    int nres;
    lua_settop(rr->co, 0);
    int rc = start(w, req, rr->co, &nres, 0);
    if (rc == LUA_YIELD) {
        int waits = loop_owns(w, rr->co, nres);
        lua_pop(rr->co, nres);
        if (waits) return;
    }
    end_running(hw, i, rc, nres);
}

/* With nothing running, on the worker's own thread: drop a state that hit
 * its ceiling and catch up with the current generation, so that the worker
 * is ready to be borrowed. */
static void prepare(http_worker *hw) {
    if (hw->reset) {
        luart_close_state(&hw->w);
        hw->reset = 0;
    }
    char err[2048];
    if (luart_refresh(&hw->w, err, sizeof err))
        log_msg(LOG_ERROR, "worker_state", "worker %d cannot load the handlers: %s", hw->w.id, err);
}

/* Waits for the loop's next event: an answer, a transfer, or a wake-up. */
/* more_queued: do not wait, only take in what is there (the queue waits). */
static void wait_events(http_worker *hw, int more_queued) {
    struct pollfd fds[1 + LOOP_FDS_MAX];
    int n = 0;
    fds[n++] = (struct pollfd){ .fd = hw->efd, .events = POLLIN };
    int timeout = -1;
    if (atomic_load(&hw->nrunning) > 0) {
        n += loop_pollfds(&hw->w, fds + n, LOOP_FDS_MAX);
        timeout = loop_ready(&hw->w) || more_queued ? 0 : BUSY_POLL_MS;
        loop_wait(&hw->w, fds, n, timeout, on_ready, hw);
    } else if (poll(fds, 1, -1) < 0 && errno != EINTR) {
        log_msg(LOG_ERROR, "worker_wait", "worker %d: poll failed: %s", hw->w.id, strerror(errno));
    }
    /* Read only a wake-up the wait saw: most turns end on an answer, and a
     * wake-up not seen yet keeps the descriptor readable for the next one. */
    uint64_t v;
    if ((fds[0].revents & POLLIN) && read(hw->efd, &v, sizeof v) < 0 && errno != EAGAIN)
        log_msg(LOG_WARN, "worker_wait", "worker %d: reading its wake-up failed: %s", hw->w.id, strerror(errno));
}

static int more_queued(void) {
    pthread_mutex_lock(&qlock);
    int more = qhead != NULL;
    pthread_mutex_unlock(&qlock);
    return more;
}

static void *worker_main(void *arg) {
    http_worker *hw = arg;
    for (;;) {
        int nrun = atomic_load(&hw->nrunning);
        /* A migrated request waits in the state it started in: that state
         * stays until it has ended. */
        pthread_mutex_lock(&qlock);
        int mailed = hw->mail != NULL;
        pthread_mutex_unlock(&qlock);
        if (nrun == 0 && hw->holder == W_OWN && !mailed) prepare(hw);
        sgw_request *mail = NULL, *batch = NULL, **tail = &batch;
        int leave = 0, mine;
        pthread_mutex_lock(&qlock);
        mine = hw->holder == W_OWN;
        if (mine) {
            mail = hw->mail;
            hw->mail = NULL;
            uint64_t gen = luart_generation_id();
            int behind = nrun > 0 && hw->w.gen && hw->w.gen->id != gen;
            int room = capacity - nrun - (mail ? 1 : 0);
            if (room > TURN_STARTS) room = TURN_STARTS;
            while (!behind && !hw->reset && hw->w.L && room > 0 && qhead) {
                sgw_request *req = qhead;
                qhead = req->next;
                if (!qhead) qtail = NULL;
                qdepth--;
                req->next = NULL;
                *tail = req;
                tail = &req->next;
                room--;
            }
            if (!mail && !batch && nrun == 0) {
                if (stopping) {
                    leave = 1;
                    alive--;
                } else if (!hw->reset) {
                    push_idle(hw);      /* borrowable until woken */
                    mine = 0;
                }
            }
        }
        pthread_mutex_unlock(&qlock);
        if (leave) return NULL;
        if (!mine) {
            /* Idle or lent: the state is not ours to touch; wait to be woken. */
            wait_events(hw, 0);
            continue;
        }
        if (mail) run_migrated(hw, mail);
        while (batch) {
            sgw_request *req = batch;
            batch = req->next;
            run_queued(hw, req);
        }
        if (atomic_load(&hw->nrunning) > 0) wait_events(hw, more_queued());
    }
}

/* Starts the thread of a worker whose state worker_init_all made; on
 * failure the worker is destroyed. */
static int start_one(http_worker *hw, int id) {
    hw->holder = W_OWN;
    hw->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    hw->running = calloc((size_t)capacity, sizeof *hw->running);
    if (hw->efd < 0 || !hw->running || loop_open(&hw->w, capacity)) {
        log_msg(LOG_ERROR, "worker_init", "worker %d: cannot allocate its resources", id);
        goto fail;
    }
    pthread_mutex_lock(&qlock);
    alive++;
    pthread_mutex_unlock(&qlock);
    if (pthread_create(&hw->thread, NULL, worker_main, hw)) {
        pthread_mutex_lock(&qlock);
        alive--;
        pthread_mutex_unlock(&qlock);
        goto fail;
    }
    return 0;
fail:
    if (hw->efd >= 0) close(hw->efd);
    hw->efd = -1;
    free(hw->running);
    hw->running = NULL;
    worker_destroy(&hw->w);
    return -1;
}

int workers_start(int n, void (*on_complete)(sgw_request *req)) {
    complete = on_complete;
    budget_ms = config_num("lua.handler_budget_ms");
    capacity = (int)config_int("http.requests_per_worker");
    long long pool = config_int("database.pool_size");
    if (capacity < 1 || pool < 1 || pool > LOOP_POOL_MAX) {
        log_msg(LOG_ERROR, "workers_start", "http.requests_per_worker must be at least 1 and database.pool_size "
                "1 to %d (they are %d and %lld)", LOOP_POOL_MAX, capacity, pool);
        return -1;
    }
    stopping = 0;
    workers = calloc((size_t)n, sizeof *workers);
    sgw_worker **states = calloc((size_t)n, sizeof *states);
    if (!workers || !states) {
        free(workers);
        free(states);
        workers = NULL;
        return -1;
    }
    for (int i = 0; i < n; i++) states[i] = &workers[i].w;
    int rc = worker_init_all(states, n, "http", NULL, NULL, 0);
    free(states);
    if (rc) {
        free(workers);
        workers = NULL;
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (start_one(&workers[i], i)) {
            for (int j = i + 1; j < n; j++) worker_destroy(&workers[j].w);
            workers_stop();
            return -1;
        }
        nworkers++;
    }
    return 0;
}

void workers_stop(void) {
    pthread_mutex_lock(&qlock);
    stopping = 1;
    http_worker *hw;
    while ((hw = pop_idle())) wake(hw);
    pthread_mutex_unlock(&qlock);
    for (int i = 0; i < nworkers; i++) {
        pthread_join(workers[i].thread, NULL);
        close(workers[i].efd);
        worker_destroy(&workers[i].w);   /* closes the state, then the pool and transfers */
        free(workers[i].running);
    }
    free(workers);
    workers = NULL;
    nworkers = 0;
    idle_top = NULL;
}

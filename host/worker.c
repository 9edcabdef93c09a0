/*
 * worker.c — the Lua workers that run requests.
 *
 * The socket threads never run Lua: a complete request is queued here and
 * one of a fixed set of workers takes it. Each worker owns its Lua state and
 * its PostgreSQL and Redis connections, so nothing in a request's path is
 * shared between threads. Between two requests a worker may switch to a new
 * generation of handlers (hot reload), never during one.
 */
#include "sgw.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  qcond = PTHREAD_COND_INITIALIZER;
static sgw_request    *qhead, *qtail;
static int             qdepth;
static int             stopping;
static int             sleepers;          /* workers waiting on qcond */
static atomic_int      queued;            /* qdepth, readable without the lock */

static sgw_worker *workers;
static pthread_t  *threads;
static int         nworkers;

int worker_init(sgw_worker *w, int id, const char *role, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->id = id;
    w->role = role;
    const char *db = config_str("database.url");
    if (*db) w->pg = pg_open(db);
    const char *rd = config_str("redis.url");
    if (*rd) w->redis = redis_open(rd);
    return luart_refresh(w, err, errlen);
}

void worker_destroy(sgw_worker *w) {
    luart_close_state(w);
    if (w->pg) pg_close(w->pg);
    if (w->redis) redis_close(w->redis);
    if (w->httpc) httpc_free(w->httpc);
    memset(w, 0, sizeof *w);
}

void workers_enqueue(sgw_request *req) {
    req->next = NULL;
    pthread_mutex_lock(&qlock);
    if (qtail) qtail->next = req;
    else qhead = req;
    qtail = req;
    qdepth++;
    atomic_store(&queued, qdepth);
    /* A worker that is spinning or busy will find the request itself; waking
     * a sleeping one costs a system call and a context switch. */
    if (sleepers) pthread_cond_signal(&qcond);
    pthread_mutex_unlock(&qlock);
}

int workers_queue_depth(void) {
    pthread_mutex_lock(&qlock);
    int d = qdepth;
    pthread_mutex_unlock(&qlock);
    return d;
}

/* Under load requests arrive back to back: a worker that just finished
 * looks for the next one for a few microseconds before it sleeps. */
#define SPIN_ROUNDS 50

static sgw_request *dequeue(void) {
    /* sched_yield, not a busy pause: the socket threads need the cores. */
    for (int i = 0; i < SPIN_ROUNDS && atomic_load(&queued) == 0 && !stopping; i++)
        sched_yield();
    pthread_mutex_lock(&qlock);
    while (!qhead && !stopping) {
        sleepers++;
        pthread_cond_wait(&qcond, &qlock);
        sleepers--;
    }
    sgw_request *r = qhead;
    if (r) {
        qhead = r->next;
        if (!qhead) qtail = NULL;
        qdepth--;
        atomic_store(&queued, qdepth);
    }
    pthread_mutex_unlock(&qlock);
    return r;
}

static void set_header(sgw_request *req, const char *name, const char *value) {
    sgw_kv *n = realloc(req->resp_headers, (size_t)(req->nresp_headers + 1) * sizeof *n);
    if (!n) return;
    req->resp_headers = n;
    n[req->nresp_headers].name = strdup(name);
    n[req->nresp_headers].value = strdup(value);
    if (!n[req->nresp_headers].name || !n[req->nresp_headers].value) {
        free(n[req->nresp_headers].name);
        free(n[req->nresp_headers].value);
        return;
    }
    req->nresp_headers++;
}

static void clear_response(sgw_request *req) {
    for (int i = 0; i < req->nresp_headers; i++) {
        free(req->resp_headers[i].name);
        free(req->resp_headers[i].value);
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

static void push_kv_table(lua_State *L, const sgw_kv *kv, int n) {
    lua_createtable(L, 0, n);
    for (int i = 0; i < n; i++) {
        lua_getfield(L, -1, kv[i].name);
        int present = !lua_isnil(L, -1);
        lua_pop(L, 1);
        if (present) continue; /* first value wins */
        lua_pushstring(L, kv[i].value ? kv[i].value : "");
        lua_setfield(L, -2, kv[i].name);
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
    push_kv_table(L, req->headers, req->nheaders);
    lua_setfield(L, -2, "headers");
    push_kv_table(L, req->query, req->nquery);
    lua_setfield(L, -2, "query");
    /* query_all: every value of repeated names. */
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
    lua_setfield(L, -2, "query_all");
    if (req->body) {
        lua_pushlstring(L, req->body, req->body_len);
        lua_setfield(L, -2, "body");
    }
    if (req->match.route >= 0) {
        lua_pushinteger(L, req->match.route + 1);
        lua_setfield(L, -2, "route_index");
    }
    lua_createtable(L, 0, req->match.nparams);
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

/* Reads dispatch's results (status, headers, body, client_id). */
static int take_response(lua_State *L, sgw_request *req) {
    int top = lua_gettop(L);
    int base = top - 3;
    if (!lua_isinteger(L, base)) return -1;
    lua_Integer status = lua_tointeger(L, base);
    if (status < 100 || status > 599) return -1;
    req->status = (int)status;
    if (lua_istable(L, base + 1)) {
        lua_pushnil(L);
        while (lua_next(L, base + 1)) {
            if (lua_type(L, -2) == LUA_TSTRING && (lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER)) {
                /* Header values must not smuggle a line break. */
                const char *v = lua_tostring(L, -1);
                if (!strpbrk(v, "\r\n")) set_header(req, lua_tostring(L, -2), v);
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
    if (lua_type(L, base + 3) == LUA_TSTRING) req->client_id = strdup(lua_tostring(L, base + 3));
    return 0;
}

static void run_request(sgw_worker *w, sgw_request *req) {
    char err[2048];
    if (luart_refresh(w, err, sizeof err) && !w->L) {
        log_msg(LOG_ERROR, "worker_state", "worker %d has no Lua state: %s", w->id, err);
        internal_error(req, 503, "service_unavailable", "Service unavailable");
        return;
    }
    if (req->gen_id != w->gen->id) {
        /* Matched under another generation: match again under ours. */
        match_free(&req->match);
        routes_match(&w->gen->routes, req->method, req->path, &req->match);
        req->gen_id = w->gen->id;
        free(req->route_pattern);
        req->route_pattern = req->match.route >= 0 ? strdup(w->gen->routes.v[req->match.route].pattern) : NULL;
        if (!req->early_status && req->match.status) req->early_status = req->match.status;
    }
    lua_State *L = w->L;
    lua_settop(L, 0);
    if (luart_require(L, "dispatch", err, sizeof err)) {
        log_msg(LOG_ERROR, "dispatch_missing", "%s", err);
        internal_error(req, 500, "internal_error", "Internal error");
        return;
    }
    lua_getfield(L, -1, "handle");
    lua_remove(L, 1);
    push_request(L, req);
    int rc = luart_call(L, 1, 4, config_num("lua.handler_budget_ms"));
    if (rc != LUA_OK || take_response(L, req) != 0) {
        const char *msg = rc != LUA_OK ? lua_tostring(L, -1) : "dispatch returned no valid response";
        char line[8192];
        size_t n = log_begin(line, sizeof line);
        n += (size_t)snprintf(line + n, sizeof line - n, ",\"level\":\"error\",\"event\":\"handler_error\",\"requestId\":\"%s\",\"error\":", req->id);
        n = json_escape(line, n, sizeof line - 1, msg ? msg : "?", msg ? strlen(msg) : 1);
        if (n < sizeof line) line[n++] = '}';
        log_line(line, n);
        internal_error(req, 500, "internal_error", "Internal error");
        if (rc == LUA_ERRMEM) {
            /* A state that hit its ceiling may hold on to garbage a module
             * kept; start the next request from a clean state. */
            lua_gc(L, LUA_GCCOLLECT, 0);
            luart_close_state(w);
        }
    }
    if (w->L) lua_settop(w->L, 0);
    if (w->pg) pg_reset_session(w->pg);
}

static void *worker_main(void *arg) {
    sgw_worker *w = arg;
    sgw_request *req;
    while ((req = dequeue())) {
        run_request(w, req);
        http_complete(req);
    }
    return NULL;
}

int workers_start(int n) {
    workers = calloc((size_t)n, sizeof *workers);
    threads = calloc((size_t)n, sizeof *threads);
    if (!workers || !threads) return -1;
    for (int i = 0; i < n; i++) {
        char err[2048];
        if (worker_init(&workers[i], i, "http", err, sizeof err)) {
            log_msg(LOG_ERROR, "worker_init", "worker %d: %s", i, err);
            return -1;
        }
        if (pthread_create(&threads[i], NULL, worker_main, &workers[i])) {
            worker_destroy(&workers[i]);
            return -1;
        }
        nworkers++;
    }
    return 0;
}

void workers_stop(void) {
    pthread_mutex_lock(&qlock);
    stopping = 1;
    pthread_cond_broadcast(&qcond);
    pthread_mutex_unlock(&qlock);
    for (int i = 0; i < nworkers; i++) {
        pthread_join(threads[i], NULL);
        worker_destroy(&workers[i]);
    }
    free(workers);
    free(threads);
    workers = NULL;
    threads = NULL;
    nworkers = 0;
}

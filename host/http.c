/*
 * http.c — the public listener: libmicrohttpd with its epoll thread pool.
 *
 * The socket threads parse, bound and collect requests: they match the route
 * (to learn its body limit before reading a byte of body) and read the body
 * up to that limit. A complete request then runs on the socket thread itself,
 * in an idle worker's Lua state (worker.c), and its answer is queued at once.
 * A request that has to wait on I/O migrates to its worker's thread: the
 * connection is suspended and resumed when the worker has the answer. So do
 * requests that find no idle worker, which wait in the workers' queue.
 * Errors decided here (401, 404, 405, 413, 431, 503) go through Lua like any
 * request, so they carry the same headers as every other answer.
 *
 * Before a byte of body is read, a request must earn the memory its body
 * will take: an authenticated route without a credential of the right shape
 * is answered 401 at once, and every body holds its part of a process-wide
 * budget and of its address's share of it (body_budget.c; 503 beyond
 * either) and must arrive within http.body_timeout_seconds of the headers.
 */
#include "sgw.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* How much of an over-long chunked body is drained before giving up. */
#define DISCARD_LIMIT ((size_t)16 << 20)
/* How far over its limit a declared body may be and still be drained. */
#define EARLY_DRAIN_LIMIT (1ull << 20)

static struct MHD_Daemon *daemon_handle;
static atomic_int         inflight;
static atomic_int         quiescing;        /* http_quiesce was called */
static size_t             max_header_bytes;
static size_t             max_body_bytes;   /* http.max_body_bytes: routes without their own */
static int                log_requests;
static unsigned           idle_timeout;     /* http.connection_timeout_seconds */
static uint64_t           body_timeout_ms;  /* http.body_timeout_seconds */

int http_inflight(void) { return atomic_load(&inflight); }
unsigned long long http_inflight_body_bytes(void) { return body_budget_held(); }

/* Makes req hold `total` bytes of the body budget; -1 (holding what it held)
 * when that would pass the budget or its address's share. */
static int body_reserve(sgw_request *req, size_t total) {
    return body_budget_reserve(&req->body_held, req->remote_addr, total) ? -1 : 0;
}

static void body_release(sgw_request *req) {
    body_budget_release(&req->body_held);
}

int http_parse_listen(const char *s, struct sockaddr_storage *out, unsigned int *len) {
    memset(out, 0, sizeof *out);
    char host[256];
    const char *colon = strrchr(s, ':');
    if (!colon) return -1;
    size_t hl = (size_t)(colon - s);
    if (hl >= sizeof host) return -1;
    memcpy(host, s, hl);
    host[hl] = 0;
    /* The port is 1 to 5 digits: strtol alone would take "" (and with it
     * "127.0.0.1:") as port 0, a port the kernel picks, and " 80" or "+80"
     * as 80. */
    size_t digits = strspn(colon + 1, "0123456789");
    if (digits == 0 || digits > 5 || colon[1 + digits]) return -1;
    long port = strtol(colon + 1, NULL, 10);
    if (port > 65535) return -1;
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        host[hl - 1] = 0;
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)out;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host + 1, &a->sin6_addr) != 1) return -1;
        *len = sizeof *a;
        return 0;
    }
    struct sockaddr_in *a = (struct sockaddr_in *)out;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    if (!host[0] || strcmp(host, "*") == 0) a->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (strcmp(host, "localhost") == 0) a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &a->sin_addr) != 1) return -1;
    *len = sizeof *a;
    return 0;
}

static void kv_free(sgw_request *req, sgw_kv *kv, int n) {
    for (int i = 0; i < n; i++) {
        req_strfree(req, kv[i].name);
        req_strfree(req, kv[i].value);
    }
    free(kv);
}

static void request_free(sgw_request *req) {
    req_strfree(req, req->method);
    req_strfree(req, req->path);
    kv_free(req, req->headers, req->nheaders);
    kv_free(req, req->query, req->nquery);
    kv_free(req, req->resp_headers, req->nresp_headers);
    free(req->body);
    free(req->resp_body);
    req_strfree(req, req->client_id);
    match_free(&req->match);
    req_strfree(req, req->route_pattern);
    if (req->response) MHD_destroy_response(req->response);
    body_release(req);
    free(req);
}

static sgw_request *request_new(void) {
    sgw_request *req = malloc(sizeof *req);
    if (req) memset(req, 0, offsetof(sgw_request, arena));
    return req;
}

typedef struct collect_ctx {
    sgw_request *req;
    sgw_kv      *v;
    int          n, cap;
    size_t       bytes;
    int          lower;
    int          failed;
} collect_ctx;

/* Collects headers (lower-cased; repeated names joined with ", " as HTTP
 * allows) or query arguments (kept apart). */
static enum MHD_Result collect_value(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    collect_ctx *c = cls;
    if (!value) value = "";
    size_t kl = strlen(key), vl = strlen(value);
    c->bytes += kl + vl + 4;
    if (c->lower) {
        for (int i = 0; i < c->n; i++) {
            if (strcasecmp(c->v[i].name, key) == 0) {
                size_t ol = strlen(c->v[i].value);
                char *nv = malloc(ol + vl + 3);
                if (!nv) { c->failed = 1; return MHD_NO; }
                memcpy(nv, c->v[i].value, ol);
                memcpy(nv + ol, ", ", 2);
                memcpy(nv + ol + 2, value, vl + 1);
                req_strfree(c->req, c->v[i].value);
                c->v[i].value = nv;
                return MHD_YES;
            }
        }
    }
    if (c->n >= 512) { c->failed = 1; return MHD_NO; }
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 16;
        sgw_kv *nv = realloc(c->v, (size_t)cap * sizeof *nv);
        if (!nv) { c->failed = 1; return MHD_NO; }
        c->v = nv;
        c->cap = cap;
    }
    char *k = req_strndup(c->req, key, kl), *v = req_strndup(c->req, value, vl);
    if (!k || !v) {
        req_strfree(c->req, k);
        req_strfree(c->req, v);
        c->failed = 1;
        return MHD_NO;
    }
    if (c->lower)
        for (char *p = k; *p; p++) *p = (char)tolower((unsigned char)*p);
    c->v[c->n].name = k;
    c->v[c->n].value = v;
    c->n++;
    return MHD_YES;
}

/* The MHD response for a request Lua answered; NULL when out of memory. */
static struct MHD_Response *make_response(sgw_request *req) {
    struct MHD_Response *r = MHD_create_response_from_buffer(req->resp_len, req->resp_body, MHD_RESPMEM_MUST_FREE);
    if (!r) return NULL;
    req->resp_body = NULL;
    for (int i = 0; i < req->nresp_headers; i++)
        MHD_add_response_header(r, req->resp_headers[i].name, req->resp_headers[i].value);
    MHD_add_response_header(r, "X-Request-Id", req->id);
    /* While draining, a kept-alive connection would bring new requests. */
    if (req->early_status == 431 || req->body_unread || atomic_load(&quiescing))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    return r;
}

/* Runs the complete request, whichever thread then answers it. */
static enum MHD_Result dispatch_now(struct MHD_Connection *conn, sgw_request *req) {
    if (!req->dispatched) {
        if (!req->early_status || req->early_status == 401 || req->early_status == 404 || req->early_status == 405) {
            collect_ctx q = { .req = req };
            MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_value, &q);
            req->query = q.v;
            req->nquery = q.n;
        }
        req->dispatched = 1;
    }
    int how = workers_run_inline(req);
    if (how == WORKERS_DONE) {
        /* Answered on this thread: no suspend, no resume, no wake-up. */
        struct MHD_Response *r = make_response(req);
        if (!r) return MHD_NO;
        enum MHD_Result rc = MHD_queue_response(conn, (unsigned int)req->status, r);
        MHD_destroy_response(r);
        return rc;
    }
    /* Suspended before another thread may resume it. */
    MHD_suspend_connection(conn);
    if (how == WORKERS_MIGRATE) workers_migrate(req);
    else workers_enqueue(req);
    return MHD_YES;
}

/* A request header (names are lower-cased), or NULL. */
static const char *header_of(const sgw_request *req, const char *name) {
    for (int i = 0; i < req->nheaders; i++)
        if (strcmp(req->headers[i].name, name) == 0) return req->headers[i].value;
    return NULL;
}

static int all_alnum(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i])) return 0;
    return 1;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

/* Whether the request presents a credential that could be valid by its
 * shape alone. The same rules as lib/auth.lua (M.presented: X-Api-Key or
 * "Authorization: Bearer", the same value when both) and lib/credentials.lua
 * (an API key sgk_live_/sgk_test_ + at least 32 base62 characters, an access
 * token sgat_ + base62, at most 256 characters); keep them in step. Whatever
 * fails here fails there too, so a request refused here was lost anyway;
 * it is refused before its body costs memory. */
static int credential_well_formed(const sgw_request *req) {
    const char *key = header_of(req, "x-api-key");
    const char *auth = header_of(req, "authorization");
    const char *bearer = NULL;
    size_t bearer_len = 0;
    if (auth) {
        const char *p = auth;
        while (is_space(*p)) p++;
        if (strncasecmp(p, "bearer", 6) != 0 || !is_space(p[6])) return 0;
        p += 6;
        while (is_space(*p)) p++;
        bearer = p;
        while (*p && !is_space(*p)) p++;
        bearer_len = (size_t)(p - bearer);
        while (is_space(*p)) p++;
        if (*p || bearer_len == 0) return 0;
    }
    const char *c = key ? key : bearer;
    size_t n = key ? strlen(key) : bearer_len;
    if (!c) return 0;
    while (n && is_space(*c)) c++, n--;
    while (n && is_space(c[n - 1])) n--;
    if (key && bearer && (bearer_len != strlen(key) || memcmp(bearer, key, bearer_len) != 0)) return 0;
    if (n == 0 || n > 256) return 0;
    if (n >= 9 && (strncmp(c, "sgk_live_", 9) == 0 || strncmp(c, "sgk_test_", 9) == 0))
        return n - 9 >= 32 && all_alnum(c + 9, n - 9);
    if (n > 5 && strncmp(c, "sgat_", 5) == 0) return all_alnum(c + 5, n - 5);
    return 0;
}

/* Lets the connection's time-out end no later than the body's deadline:
 * a body that stops arriving is cut off at the limit, not an idle
 * time-out later. */
static void body_clock(struct MHD_Connection *conn, sgw_request *req, uint64_t now) {
    uint64_t left = req->body_deadline_ms > now ? req->body_deadline_ms - now : 0;
    unsigned secs = (unsigned)((left + 999) / 1000);
    if (secs == 0) secs = 1;
    if (idle_timeout && secs > idle_timeout) secs = idle_timeout;
    if (secs != req->timeout_set) {
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, secs);
        req->timeout_set = secs;
    }
}

/* Answers `status` once the rest of the body has been read and dropped. */
static void drop_body(sgw_request *req, int status) {
    req->discarding = 1;
    req->early_status = status;
    free(req->body);
    req->body = NULL;
    req->body_cap = 0;
    body_release(req);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)cls;
    (void)version;
    sgw_request *req = *con_cls;
    if (!req) {
        req = request_new();
        if (!req) return MHD_NO;
        *con_cls = req;
        /* In flight from its first byte until on_completed: a drain waits
         * for a body that is still arriving too. */
        atomic_fetch_add(&inflight, 1);
        req->conn = conn;
        req->start_ms = clock_mono_ms();
        memcpy(req->id, "req_", 4);
        crypto_random_id(req->id + 4, 24);
        req->method = req_strndup(req, method, strlen(method));
        req->path = req_strndup(req, url, strlen(url));
        req->match.route = -1;
        if (!req->method || !req->path) return MHD_NO;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, req->peer_addr, sizeof req->peer_addr);
            else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, req->peer_addr, sizeof req->peer_addr);
        }
        collect_ctx h = { .req = req, .lower = 1 };
        MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_value, &h);
        req->headers = h.v;
        req->nheaders = h.n;
        proxy_client_addr(req->peer_addr, header_of(req, "x-forwarded-for"), header_of(req, "forwarded"),
                          req->remote_addr, sizeof req->remote_addr);

        req->max_body = max_body_bytes;
        sgw_gen *g = luart_current_cached();
        if (g) {
            routes_match(&g->routes, method, url, &req->match);
            req->gen_id = g->id;
            if (req->match.route >= 0) {
                req->max_body = g->routes.v[req->match.route].max_body;
                const char *pattern = g->routes.v[req->match.route].pattern;
                req->route_pattern = req_strndup(req, pattern, strlen(pattern));
            }
        }
        const char *cl = header_of(req, "content-length");
        unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
        int has_body = declared > 0 || header_of(req, "transfer-encoding") != NULL;
        if (h.failed || h.bytes + strlen(url) > max_header_bytes) {
            req->early_status = 431;
        } else if (req->match.status) {
            req->early_status = req->match.status;
        } else if (g && req->match.route >= 0 && !g->routes.v[req->match.route].public_route &&
                   !credential_well_formed(req)) {
            req->early_status = 401;
        } else if (declared > req->max_body) {
            req->early_status = 413;
            /* Decided now, before a byte of body is stored. A body a little
             * over the limit is drained so the answer arrives on a healthy
             * connection (closing with unread data can reset it before the
             * client reads the 413); a large one is answered at once and the
             * connection closed. */
            if (declared - req->max_body <= EARLY_DRAIN_LIMIT) req->discarding = 1;
        } else if (has_body) {
            /* A declared body never grows past its length (MHD holds the
             * client to it), so it reserves exactly that, once. */
            if (declared) req->max_body = (size_t)declared;
            if (declared && body_reserve(req, (size_t)declared)) {
                req->early_status = 503;
            } else {
                if (body_timeout_ms) {
                    req->body_deadline_ms = req->start_ms + body_timeout_ms;
                    body_clock(conn, req, req->start_ms);
                }
            }
        }
        if (req->early_status && !req->discarding && req->early_status != 404 && req->early_status != 405) {
            /* Nothing of the body is read: the connection closes after the answer. */
            req->body_unread = has_body;
            return dispatch_now(conn, req);
        }
        return MHD_YES;
    }
    if (req->response) {
        enum MHD_Result r = MHD_queue_response(conn, (unsigned int)req->status, req->response);
        MHD_destroy_response(req->response);
        req->response = NULL;
        return r;
    }
    /* Resumed with an answer that could not be built (out of memory):
     * close rather than run the request a second time. */
    if (req->status) return MHD_NO;
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (req->body_deadline_ms) {
            uint64_t now = clock_mono_ms();
            /* MHD cannot answer in the middle of a body: one that is still
             * arriving at the limit is cut off (so is one that stalls: the
             * connection's time-out then ends at the limit too). */
            if (now >= req->body_deadline_ms) {
                log_msg(LOG_WARN, "http", "request %s: body not received within http.body_timeout_seconds; "
                        "connection closed", req->id);
                return MHD_NO;
            }
            body_clock(conn, req, now);
        }
        if (req->discarding) {
            /* A body that passed its limit or the budget: read and drop the
             * rest so the answer can be sent, but not forever. */
            req->body_len += n;
            return req->body_len > req->max_body + DISCARD_LIMIT ? MHD_NO : MHD_YES;
        }
        if (req->body_len + n > req->max_body) {
            drop_body(req, 413);
            req->body_len += n;
            return MHD_YES;
        }
        if (req->body_len + n > req->body_cap) {
            size_t cap = req->body_cap ? req->body_cap * 2 : 1024;
            while (cap < req->body_len + n) cap *= 2;
            if (cap > req->max_body) cap = req->max_body;
            if (body_reserve(req, cap)) {
                /* A chunked body that would pass the budget. */
                drop_body(req, 503);
                req->body_len += n;
                return MHD_YES;
            }
            char *nb = realloc(req->body, cap);
            if (!nb) return MHD_NO;
            req->body = nb;
            req->body_cap = cap;
        }
        memcpy(req->body + req->body_len, upload_data, n);
        req->body_len += n;
        return MHD_YES;
    }
    if (req->discarding) req->body_len = 0;
    if (req->timeout_set && req->timeout_set != idle_timeout)
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, idle_timeout);
    req->body_deadline_ms = 0;
    return dispatch_now(conn, req);
}

void http_complete(sgw_request *req) {
    req->response = make_response(req);
    MHD_resume_connection(req->conn);
}

/* Appends n bytes of s when they fit; returns the new length, or cap. */
static size_t put(char *buf, size_t len, size_t cap, const char *s, size_t n) {
    if (len >= cap || n > cap - len) return cap;
    memcpy(buf + len, s, n);
    return len + n;
}

#define PUT_LIT(buf, len, cap, lit) put(buf, len, cap, lit, sizeof lit - 1)

static size_t put_uint(char *buf, size_t len, size_t cap, unsigned long long v) {
    char tmp[24];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return put(buf, len, cap, tmp + i, sizeof tmp - i);
}

/* The request log line, built without printf: it is written for every
 * request, and formatting was a visible part of a request's cost. */
static void log_request(const sgw_request *req, const char *route, uint64_t ms) {
    char line[2048];
    const size_t cap = sizeof line - 1;     /* room for the closing brace */
    size_t n = log_begin(line, sizeof line);
    n = PUT_LIT(line, n, cap, ",\"level\":\"info\",\"event\":\"request\",\"requestId\":\"");
    n = put(line, n, cap, req->id, strlen(req->id));
    n = PUT_LIT(line, n, cap, "\",\"method\":");
    n = json_escape(line, n, cap, req->method, strlen(req->method));
    n = PUT_LIT(line, n, cap, ",\"route\":");
    n = json_escape(line, n, cap, route, strlen(route));
    n = PUT_LIT(line, n, cap, ",\"status\":");
    n = put_uint(line, n, cap, (unsigned long long)req->status);
    /* The clock counts whole milliseconds: the tenth is always 0. */
    n = PUT_LIT(line, n, cap, ",\"durationMs\":");
    n = put_uint(line, n, cap, (unsigned long long)ms);
    n = PUT_LIT(line, n, cap, ".0,\"client\":");
    if (req->client_id) n = json_escape(line, n, cap, req->client_id, strlen(req->client_id));
    else n = PUT_LIT(line, n, cap, "null");
    if (n >= cap) return;                   /* does not fit: not worth a torn line */
    line[n++] = '}';
    log_line_batched(line, n);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)conn;
    (void)toe;
    sgw_request *req = *con_cls;
    if (!req) return;
    *con_cls = NULL;
    uint64_t ms = clock_mono_ms() - req->start_ms;
    const char *route = req->route_pattern ? req->route_pattern : "unmatched";
    if (req->status) {
        metrics_request(route, req->method, req->status, (double)ms / 1000.0);
        if (log_requests) log_request(req, route, ms);
    }
    atomic_fetch_sub(&inflight, 1);
    request_free(req);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    log_msg(LOG_WARN, "http", "%s", msg);
}

int http_start(void) {
    struct sockaddr_storage addr;
    socklen_t alen;
    const char *listen = config_str("http.listen");
    if (http_parse_listen(listen, &addr, &alen)) {
        log_msg(LOG_ERROR, "config", "http.listen '%s' is not host:port", listen);
        return -1;
    }
    max_header_bytes = (size_t)config_int("http.max_header_bytes");
    max_body_bytes = (size_t)config_int("http.max_body_bytes");
    if (body_budget_configure((unsigned long long)config_int("http.max_inflight_body_bytes"),
                              (unsigned long long)config_int("http.max_inflight_body_bytes_per_address"),
                              (size_t)config_int("http.max_connections"))) {
        log_msg(LOG_ERROR, "http", "out of memory for the body budget's address table");
        return -1;
    }
    idle_timeout = (unsigned)config_int("http.connection_timeout_seconds");
    body_timeout_ms = (uint64_t)config_int("http.body_timeout_seconds") * 1000;
    char err[256];
    if (proxy_init(err, sizeof err)) {
        log_msg(LOG_ERROR, "config", "%s", err);
        return -1;
    }
    log_requests = config_bool("log.requests");
    unsigned int threads = (unsigned int)config_int("http.threads");
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (unsigned int)n : 2;
    }
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC |
                         MHD_USE_ERROR_LOG | MHD_USE_TURBO;
    if (addr.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* Headers beyond max_header_bytes are refused by us with a problem
     * document; MHD's own limit (its per-connection pool, which it clears
     * for every request, so it must stay small) only catches the absurd. */
    size_t memlimit = max_header_bytes + 16384;
    daemon_handle = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, NULL,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)config_int("http.max_connections"),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)config_int("http.max_connections_per_ip"),
        MHD_OPTION_CONNECTION_TIMEOUT, idle_timeout,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, memlimit,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_END);
    if (!daemon_handle) {
        log_msg(LOG_ERROR, "http_start", "cannot listen on %s (in use, or not an address of this machine?)", listen);
        return -1;
    }
    return 0;
}

/* The listening socket MHD_quiesce_daemon hands back: MHD's epoll set
 * still holds it, so it is closed only after MHD_stop_daemon. */
static MHD_socket quiesced = MHD_INVALID_SOCKET;

void http_quiesce(void) {
    atomic_store(&quiescing, 1);
    if (daemon_handle && quiesced == MHD_INVALID_SOCKET) quiesced = MHD_quiesce_daemon(daemon_handle);
}

/* Every suspended connection must have been resumed by now (main.c stops
 * the Redis pipeline and the workers first): MHD aborts the process when it
 * is stopped with one still suspended. */
void http_stop(void) {
    if (daemon_handle) MHD_stop_daemon(daemon_handle);
    daemon_handle = NULL;
    if (quiesced != MHD_INVALID_SOCKET) close(quiesced);
    quiesced = MHD_INVALID_SOCKET;
}

/*
 * httpc.c — outbound HTTP over libcurl, and the Lua `http` module.
 *
 * Two ways to run a call. In a job coroutine that the job runner is resuming
 * (see httpc_set_current), http.request adds an easy handle to the worker's
 * multi handle and yields; httpc_poll drives the transfers and hands each
 * finished one back to the runner, which resumes its coroutine. The multi is
 * driven through curl's socket interface: curl names the sockets it waits
 * on (on_socket), they sit in one epoll set that the loop's wait polls as a
 * single descriptor, and only a socket with news (or curl's timer) is
 * handed back to curl, so a turn costs what happened in it, not the number
 * of transfers in flight. Anywhere
 * else (request workers, nested coroutines, C boundaries that cannot yield)
 * the call blocks on an easy handle that the Lua state keeps for reuse, so
 * its connections stay warm.
 *
 * Ownership: a transfer's record is a Lua userdata on the calling function's
 * stack, so an error thrown anywhere (argument checks, the memory ceiling
 * while results are built) leaves its buffers to __gc. While a transfer is
 * in flight the multi handle also points at it; whichever goes first — the
 * Lua state (lua_close runs __gc) or the sgw_httpc (httpc_free) — unlinks it
 * from the other, so neither order leaks or dangles.
 *
 * Results are never pushed from httpc_poll: that runs outside any protected
 * call, where a memory error would abort. The coroutine's continuation,
 * which runs inside lua_resume, builds them instead; on_ready therefore
 * always receives nres = 0 and must resume the coroutine before returning.
 */
#include "sgw.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <curl/curl.h>

/* pg.c: http.request must not hold a database transaction open across a
 * network call. */

/* For the job runner: the coroutine it is about to resume (NULL after). */

#define XFER_MT "sgw.httpc.xfer"
#define EASY_MT "sgw.httpc.easy"
#define DEFAULT_MAX_RESPONSE ((size_t)16 << 20)
/* How late a lease confirmation may be before calls that could outlast the
 * lease stop (the runner tries a failed one again after a second). */
#define LEASE_CONFIRM_GRACE_MS 1000
/* Sockets of the caller's that httpc_poll also waits on (the job pool's). */
#define EXTRA_FDS_MAX HTTPC_EXTRA_FDS_MAX

typedef struct xfer xfer;

typedef struct xlist {
    xfer *head, *tail;
    int   n;
} xlist;

struct xfer {
    sgw_httpc         *h;          /* set while linked into h (queued or running) */
    xfer              *prev, *next;
    xfer              *done_next;  /* httpc_poll's local list of finished ones */
    int                queued;     /* 1: waiting in the FIFO, 0: in the multi */
    int                done;       /* the transfer ended; rc is its outcome */
    CURL              *easy;
    int                own_easy;   /* async transfers own their easy handle */
    struct curl_slist *hdrs;
    char              *body;       /* response body */
    size_t             blen, bcap;
    char              *hbuf;       /* response headers: "name\0value\0"... */
    size_t             hlen, hcap;
    size_t             limit;      /* http.max_response_bytes, body + headers */
    size_t             body_limit; /* the call's max_body_bytes (or limit) */
    int                too_large;
    int                denied;     /* deny_private_addresses refused the peer */
    int                unwatched;  /* errno: the loop could not wait on its socket */
    CURLcode           rc;
    long               status;
    lua_State         *co;         /* the waiting coroutine */
    lua_State         *main;       /* its main thread, for unref outside Lua */
    int                co_ref;     /* registry ref keeping co alive */
    char               errbuf[CURL_ERROR_SIZE];
};

struct sgw_httpc {
    CURLM     *multi;
    int        max_concurrent;
    xlist      running;            /* added to the multi */
    xlist      queued;             /* FIFO beyond max_concurrent */
    lua_State *current;            /* coroutine the runner is resuming */
    uint64_t   lease_confirmed;    /* its job's lease was last given full length then (monotonic ms); 0: not a job */
    uint64_t   lease_ms;           /* that length */
    uint64_t   lease_every_ms;     /* how often the runner confirms leases */
    int        epfd;               /* the sockets curl waits on (on_socket) */
    int        timer_set;          /* curl asked to be called at timer_at */
    int        unwatched;          /* some running transfer has x->unwatched set */
    uint64_t   timer_at;           /* monotonic ms */
    xfer      *found;              /* finished, for httpc_deliver (done_next) */
};

/* ------------------------------------------------------------ lists */

static void xlist_push(xlist *l, xfer *x) {
    x->next = NULL;
    x->prev = l->tail;
    if (l->tail) l->tail->next = x;
    else l->head = x;
    l->tail = x;
    l->n++;
}

static void xlist_remove(xlist *l, xfer *x) {
    if (x->prev) x->prev->next = x->next;
    else l->head = x->next;
    if (x->next) x->next->prev = x->prev;
    else l->tail = x->prev;
    x->prev = x->next = NULL;
    l->n--;
}

/* ------------------------------------------------------------ transfers */

/* Frees what the transfer holds; safe to call more than once. */
static void xfer_release(xfer *x) {
    if (x->easy && x->own_easy) curl_easy_cleanup(x->easy);
    x->easy = NULL;
    curl_slist_free_all(x->hdrs);
    x->hdrs = NULL;
    free(x->body);
    x->body = NULL;
    x->blen = x->bcap = 0;
    free(x->hbuf);
    x->hbuf = NULL;
    x->hlen = x->hcap = 0;
}

/* Takes the transfer out of h (and the multi). L, when given, is a running
 * thread of the coroutine's state used to drop the coroutine's ref;
 * otherwise the main thread is used, which must then be idle. */
static void xfer_detach(xfer *x, lua_State *L) {
    sgw_httpc *h = x->h;
    if (!h) return;
    if (x->queued) {
        xlist_remove(&h->queued, x);
    } else {
        curl_multi_remove_handle(h->multi, x->easy);
        xlist_remove(&h->running, x);
    }
    x->h = NULL;
    if (x->co_ref != LUA_NOREF) {
        luaL_unref(L ? L : x->main, LUA_REGISTRYINDEX, x->co_ref);
        x->co_ref = LUA_NOREF;
    }
}

static int xfer_gc(lua_State *L) {
    xfer *x = luaL_checkudata(L, 1, XFER_MT);
    xfer_detach(x, L);
    xfer_release(x);
    return 0;
}

static int grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 1024;
    while (ncap < need) ncap *= 2;
    char *n = realloc(*buf, ncap);
    if (!n) return -1;
    *buf = n;
    *cap = ncap;
    return 0;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
    xfer *x = ud;
    size_t n = size * nmemb;
    if (x->blen + x->hlen + n > x->limit || x->blen + n > x->body_limit) {
        x->too_large = 1;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    if (grow(&x->body, &x->bcap, x->blen + n)) return 0;
    memcpy(x->body + x->blen, p, n);
    x->blen += n;
    return n;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
    xfer *x = ud;
    size_t n = size * nmemb, len = n;
    /* A new status line starts a new response (after 1xx, or a proxy's
     * CONNECT answer): only the last one's headers are reported. */
    if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        x->hlen = 0;
        return n;
    }
    while (len && is_ws(p[len - 1])) len--;
    if (!len) return n;
    if (x->blen + x->hlen + len + 2 > x->limit) {
        x->too_large = 1;
        return 0;
    }
    if (is_ws(p[0])) {
        /* Obsolete line folding: the line continues the previous value. */
        if (!x->hlen) return n;
        size_t s = 0;
        while (s < len && is_ws(p[s])) s++;
        if (grow(&x->hbuf, &x->hcap, x->hlen + 1 + (len - s) + 1)) return 0;
        x->hbuf[x->hlen - 1] = ' ';
        memcpy(x->hbuf + x->hlen, p + s, len - s);
        x->hlen += len - s;
        x->hbuf[x->hlen++] = 0;
        return n;
    }
    char *colon = memchr(p, ':', len);
    if (!colon || colon == p) return n;
    size_t nl = (size_t)(colon - p);
    size_t vs = nl + 1;
    while (vs < len && is_ws(p[vs])) vs++;
    if (grow(&x->hbuf, &x->hcap, x->hlen + nl + 1 + (len - vs) + 1)) return 0;
    for (size_t i = 0; i < nl; i++) x->hbuf[x->hlen++] = (char)tolower((unsigned char)p[i]);
    x->hbuf[x->hlen++] = 0;
    memcpy(x->hbuf + x->hlen, p + vs, len - vs);
    x->hlen += len - vs;
    x->hbuf[x->hlen++] = 0;
    return n;
}

/* ------------------------------------------------------------ options */

/* What http.request was asked, read from its table while Lua errors are
 * still harmless. Strings point into values kept on the Lua stack. */
typedef struct req_opts {
    const char *method;
    const char *url;
    const char *body;
    size_t      body_len;
    int         has_body;
    const char *hdr_lines;   /* "Name: value\0"... built on the Lua stack */
    size_t      hdr_len;
    int         user_expect; /* the caller set Expect itself */
    long        timeout_ms;
    long        connect_timeout_ms;
    int         deny_private; /* deny_private_addresses */
    size_t      max_body;     /* max_body_bytes; 0: http.max_response_bytes alone */
} req_opts;

static int valid_token(const char *s, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 32 || c >= 127 || strchr("()<>@,;:\\\"/[]?={}", c)) return 0;
    }
    return 1;
}

static long seconds_opt(lua_State *L, int t, const char *field, double dflt) {
    lua_getfield(L, t, field);
    double s = dflt;
    if (!lua_isnil(L, -1)) {
        if (!lua_isnumber(L, -1)) luaL_error(L, "http.request: '%s' must be a number of seconds", field);
        s = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    if (!(s > 0) || s > 86400) luaL_error(L, "http.request: '%s' must be between 0 and 86400 seconds", field);
    long ms = (long)(s * 1000.0);
    return ms < 1 ? 1 : ms;
}

/* Reads and checks the options table at index 1; pushes the values it
 * keeps (method, url, body, header lines) so they outlive the call. */
static void read_opts(lua_State *L, req_opts *o) {
    luaL_checktype(L, 1, LUA_TTABLE);
    memset(o, 0, sizeof *o);

    lua_getfield(L, 1, "url");
    size_t ul;
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "http.request: 'url' must be a string");
    o->url = lua_tolstring(L, -1, &ul);
    if (strlen(o->url) != ul) luaL_error(L, "http.request: 'url' holds a NUL byte");

    lua_getfield(L, 1, "method");
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushliteral(L, "GET");
    } else if (lua_type(L, -1) == LUA_TSTRING) {
        size_t n;
        const char *m = lua_tolstring(L, -1, &n);
        if (n > 16 || !valid_token(m, n)) luaL_error(L, "http.request: invalid method");
        char up[17];
        for (size_t i = 0; i < n; i++) up[i] = (char)toupper((unsigned char)m[i]);
        lua_pop(L, 1);
        lua_pushlstring(L, up, n);
    } else {
        luaL_error(L, "http.request: 'method' must be a string");
    }
    o->method = lua_tostring(L, -1);

    lua_getfield(L, 1, "body");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "http.request: 'body' must be a string");
        o->body = lua_tolstring(L, -1, &o->body_len);
        o->has_body = 1;
    }

    /* Header lines "Name: value\0", validated so that no value can smuggle
     * a line of its own. */
    lua_pushliteral(L, "");
    int lines = lua_gettop(L);
    lua_getfield(L, 1, "headers");
    int ht = lua_gettop(L);
    if (!lua_isnil(L, ht)) {
        if (!lua_istable(L, ht)) luaL_error(L, "http.request: 'headers' must be a table");
        lua_pushnil(L);
        while (lua_next(L, ht)) {
            int vt = lua_type(L, -1);
            if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "http.request: header names must be strings");
            if (vt != LUA_TSTRING && vt != LUA_TNUMBER) luaL_error(L, "http.request: header values must be strings");
            size_t nl, vl;
            const char *name = lua_tolstring(L, -2, &nl);
            const char *val = lua_tolstring(L, -1, &vl); /* converts the value, never the key */
            if (!valid_token(name, nl)) luaL_error(L, "http.request: invalid header name");
            if (memchr(val, '\r', vl) || memchr(val, '\n', vl) || memchr(val, 0, vl))
                luaL_error(L, "http.request: header '%s' holds a line break", name);
            if (nl == 6 && strncasecmp(name, "expect", 6) == 0) o->user_expect = 1;
            lua_pushvalue(L, lines);
            lua_pushlstring(L, name, nl);
            if (vl) {
                lua_pushliteral(L, ": ");
                lua_pushvalue(L, -4);
                lua_pushlstring(L, "", 1);
                lua_concat(L, 5);
            } else {
                /* curl reads "Name:" as "drop this header"; "Name;" sends it empty. */
                lua_pushlstring(L, ";", 2);
                lua_concat(L, 3);
            }
            lua_replace(L, lines);
            lua_pop(L, 1);
        }
    }
    o->hdr_lines = lua_tolstring(L, lines, &o->hdr_len);

    double dflt = config_has("meta.request_timeout_seconds") ? config_num("meta.request_timeout_seconds") : 30.0;
    o->timeout_ms = seconds_opt(L, 1, "timeout", dflt);
    o->connect_timeout_ms = seconds_opt(L, 1, "connect_timeout", 5.0);

    lua_getfield(L, 1, "deny_private_addresses");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
        luaL_error(L, "http.request: 'deny_private_addresses' must be a boolean");
    o->deny_private = lua_toboolean(L, -1);
    lua_pop(L, 1);

    lua_getfield(L, 1, "max_body_bytes");
    if (!lua_isnil(L, -1)) {
        lua_Integer n = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
        if (n < 1) luaL_error(L, "http.request: 'max_body_bytes' must be a positive integer");
        o->max_body = (size_t)n;
    }
    lua_pop(L, 1);
}

/* RFC 9110 9.2.2: sending these twice has the effect of sending them once. */
static int idempotent(const char *method) {
    static const char *const methods[] = {"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"};
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
        if (strcmp(method, methods[i]) == 0) return 1;
    return 0;
}

static size_t max_response(void) {
    long long n = config_int("http.max_response_bytes");
    return n > 0 ? (size_t)n : DEFAULT_MAX_RESPONSE;
}

/* deny_private_addresses: only globally reachable unicast addresses. The
 * ranges are IANA's special-purpose registries' non-global entries (RFC 6890
 * and successors); forms that embed an IPv4 address (mapped, compatible,
 * NAT64, 6to4) are judged by the address they embed, so 127.0.0.1 cannot be
 * reached as ::ffff:127.0.0.1 or 2002:7f00:1::. */
static int denied_v4(const unsigned char *a) {
    return a[0] == 0                                    /* 0/8 "this network" */
        || a[0] == 10                                   /* 10/8 */
        || (a[0] == 100 && (a[1] & 0xc0) == 64)         /* 100.64/10 CGNAT */
        || a[0] == 127                                  /* 127/8 loopback */
        || (a[0] == 169 && a[1] == 254)                 /* 169.254/16 link-local */
        || (a[0] == 172 && (a[1] & 0xf0) == 16)         /* 172.16/12 */
        || (a[0] == 192 && a[1] == 0 && a[2] == 0)      /* 192.0.0/24 IETF */
        || (a[0] == 192 && a[1] == 0 && a[2] == 2)      /* 192.0.2/24 TEST-NET-1 */
        || (a[0] == 192 && a[1] == 168)                 /* 192.168/16 */
        || (a[0] == 198 && (a[1] & 0xfe) == 18)         /* 198.18/15 benchmarking */
        || (a[0] == 198 && a[1] == 51 && a[2] == 100)   /* 198.51.100/24 TEST-NET-2 */
        || (a[0] == 203 && a[1] == 0 && a[2] == 113)    /* 203.0.113/24 TEST-NET-3 */
        || a[0] >= 224;                                 /* 224/4 multicast, 240/4 and broadcast */
}

static int denied_v6(const unsigned char *a) {
    static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    static const unsigned char nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
    static const unsigned char zero[12] = { 0 };
    if (memcmp(a, zero, 12) == 0 || memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0)
        return denied_v4(a + 12);                       /* ::/96 (:: and ::1 too), ::ffff:0:0/96, 64:ff9b::/96 */
    if (a[0] == 0x20 && a[1] == 0x02) return denied_v4(a + 2); /* 2002::/16 6to4 */
    static const unsigned char discard[8] = { 0x01, 0, 0, 0, 0, 0, 0, 0 };
    static const unsigned char nat64_local[6] = { 0, 0x64, 0xff, 0x9b, 0, 0x01 };
    return (a[0] & 0xfe) == 0xfc                        /* fc00::/7 unique local */
        || (a[0] == 0xfe && (a[1] & 0x80) == 0x80)      /* fe80::/10 link-local, fec0::/10 old site-local */
        || a[0] == 0xff                                 /* ff00::/8 multicast */
        || memcmp(a, discard, 8) == 0                   /* 100::/64 discard-only */
        || memcmp(a, nat64_local, 6) == 0               /* 64:ff9b:1::/48 local-use translation */
        || (a[0] == 0x20 && a[1] == 0x01 && a[2] < 0x02) /* 2001::/23 IETF protocol assignments (Teredo, benchmarking, ORCHID) */
        || (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8) /* 2001:db8::/32 documentation */
        || (a[0] == 0x3f && a[1] == 0xff && (a[2] & 0xf0) == 0) /* 3fff::/20 documentation */
        || (a[0] == 0x5f && a[1] == 0x00);              /* 5f00::/16 segment routing (SRv6) SIDs */
}

int httpc_address_denied(const char *ip) {
    unsigned char a[16];
    if (inet_pton(AF_INET, ip, a) == 1) return denied_v4(a);
    if (inet_pton(AF_INET6, ip, a) == 1) return denied_v6(a);
    return 1; /* what does not parse is not known to be global */
}

/* Runs after curl has resolved the name and before it connects: the address
 * judged is the one the request would go to, whatever the name resolved to
 * when it was registered (DNS rebinding), and a refused one never sees a
 * packet. */
static curl_socket_t on_opensocket(void *ud, curlsocktype purpose, struct curl_sockaddr *addr) {
    xfer *x = ud;
    int denied = 1;
    (void)purpose;
    if (addr->family == AF_INET && addr->addrlen >= sizeof(struct sockaddr_in))
        denied = denied_v4((const unsigned char *)&((const struct sockaddr_in *)&addr->addr)->sin_addr);
    else if (addr->family == AF_INET6 && addr->addrlen >= sizeof(struct sockaddr_in6))
        denied = denied_v6(((const struct sockaddr_in6 *)&addr->addr)->sin6_addr.s6_addr);
    if (denied) {
        x->denied = 1;
        return CURL_SOCKET_BAD;
    }
    return socket(addr->family, addr->socktype, addr->protocol);
}

/* A reused connection opens no socket: it was made for an earlier call of
 * this handle, perhaps one that allowed private addresses, so the peer is
 * judged again before anything is sent. */
static int on_prereq(void *ud, char *primary_ip, char *local_ip, int primary_port, int local_port) {
    (void)local_ip;
    (void)primary_port;
    (void)local_port;
    xfer *x = ud;
    if (!httpc_address_denied(primary_ip)) return CURL_PREREQFUNC_OK;
    x->denied = 1;
    return CURL_PREREQFUNC_ABORT;
}

/* Configures e for the request; no Lua calls, so nothing here can throw.
 * 0 ok; otherwise x->rc says why. */
static int xfer_setup(xfer *x, CURL *e, const req_opts *o) {
    x->easy = e;
    x->limit = max_response();
    x->body_limit = o->max_body && o->max_body < x->limit ? o->max_body : x->limit;
    x->errbuf[0] = 0;
    for (const char *p = o->hdr_lines, *end = o->hdr_lines + o->hdr_len; p < end; p += strlen(p) + 1) {
        struct curl_slist *n = curl_slist_append(x->hdrs, p);
        if (!n) { x->rc = CURLE_OUT_OF_MEMORY; return -1; }
        x->hdrs = n;
    }
    /* A 100-continue round trip only adds latency for the small bodies sent
     * here. */
    if (!o->user_expect) {
        struct curl_slist *n = curl_slist_append(x->hdrs, "Expect:");
        if (!n) { x->rc = CURLE_OUT_OF_MEMORY; return -1; }
        x->hdrs = n;
    }
    CURLcode c = CURLE_OK;
#define SET(opt, val) do { if (c == CURLE_OK) c = curl_easy_setopt(e, opt, val); } while (0)
    SET(CURLOPT_URL, o->url);
    /* Only http(s), redirects included, and none followed: a URL that came
     * from data must not reach file:// or another host behind our back. */
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_FOLLOWLOCATION, 0L);
    SET(CURLOPT_NOSIGNAL, 1L);
    /* A transfer that ends while its name is still being resolved must not
     * wait for the resolver thread, on the loop's thread (a DNS server that
     * stopped answering would stall every coroutine of the loop). */
#if LIBCURL_VERSION_NUM >= 0x075700
    (void)curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L);   /* a libcurl that lacks it still serves */
#endif
    SET(CURLOPT_TIMEOUT_MS, o->timeout_ms);
    SET(CURLOPT_CONNECTTIMEOUT_MS, o->connect_timeout_ms);
    SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)x->body_limit);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, x);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, x);
    SET(CURLOPT_ERRORBUFFER, x->errbuf);
    SET(CURLOPT_HTTPHEADER, x->hdrs);
    SET(CURLOPT_USERAGENT, "sgw/" SGW_VERSION);
    SET(CURLOPT_ACCEPT_ENCODING, "");
    SET(CURLOPT_PRIVATE, x);
    if (*config_str("http.ca_file")) SET(CURLOPT_CAINFO, config_str("http.ca_file"));
    if (o->deny_private) {
        SET(CURLOPT_OPENSOCKETFUNCTION, on_opensocket);
        SET(CURLOPT_OPENSOCKETDATA, x);
        SET(CURLOPT_PREREQFUNCTION, on_prereq);
        SET(CURLOPT_PREREQDATA, x);
        /* A proxy from the environment would be the address checked, and it
         * would connect anywhere on our behalf. */
        SET(CURLOPT_PROXY, "");
        SET(CURLOPT_NOPROXY, "*");
    }
    /* curl sends a request again by itself when a reused connection closes
     * before any answer: harmless for idempotent methods, a second post for
     * a POST. Such requests never go over a connection used before, so a
     * lost answer reaches the caller as "protocol" (it may have happened)
     * instead. Once answered in full, their connection may carry the
     * idempotent calls that follow (a post's permalink read): reuse is what
     * risks a resend, not a connection having carried a POST. */
    if (!idempotent(o->method)) SET(CURLOPT_FRESH_CONNECT, 1L);
    if (strcmp(o->method, "HEAD") == 0) {
        SET(CURLOPT_NOBODY, 1L);
    } else if (o->has_body || strcmp(o->method, "POST") == 0) {
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
        SET(CURLOPT_COPYPOSTFIELDS, o->has_body ? o->body : "");
        if (strcmp(o->method, "POST") != 0) SET(CURLOPT_CUSTOMREQUEST, o->method);
    } else if (strcmp(o->method, "GET") == 0) {
        SET(CURLOPT_HTTPGET, 1L);
    } else {
        SET(CURLOPT_CUSTOMREQUEST, o->method);
    }
#undef SET
    if (c != CURLE_OK) {
        x->rc = c;
        return -1;
    }
    return 0;
}

/* The error kinds of docs/host-api.md: what a caller may conclude about
 * whether the request reached the server. */
static const char *kind_of(const xfer *x) {
    if (x->denied) return "forbidden";
    if (x->too_large || x->rc == CURLE_FILESIZE_EXCEEDED) return "too_large";
    switch (x->rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return "connect";
    case CURLE_OPERATION_TIMEDOUT:
        return "timeout";
    case CURLE_UNSUPPORTED_PROTOCOL: /* non-http(s) URLs are refused earlier: an HTTP/0.9 answer */
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_BAD_CONTENT_ENCODING:
        return "protocol";
    default:
        return "other";
    }
}

/* Pushes http.request's results for a finished transfer. May throw (memory);
 * the transfer's buffers then stay with its userdata until __gc. */
static int push_results(lua_State *L, const xfer *x) {
    if (x->too_large || x->rc != CURLE_OK) {
        lua_pushnil(L);
        if (x->denied)
            lua_pushliteral(L, "destination address not allowed");
        else if (!(x->too_large || x->rc == CURLE_FILESIZE_EXCEEDED))
            lua_pushstring(L, x->errbuf[0] ? x->errbuf : curl_easy_strerror(x->rc));
        else if (x->body_limit < x->limit)
            lua_pushfstring(L, "response body larger than max_body_bytes (%I bytes)", (lua_Integer)x->body_limit);
        else
            lua_pushfstring(L, "response larger than http.max_response_bytes (%I bytes)", (lua_Integer)x->limit);
        lua_pushstring(L, kind_of(x));
        return 3;
    }
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)x->status);
    lua_setfield(L, -2, "status");
    lua_newtable(L);
    for (size_t p = 0; p < x->hlen;) {
        const char *name = x->hbuf + p;
        p += strlen(name) + 1;
        const char *value = x->hbuf + p;
        p += strlen(value) + 1;
        /* A repeated header reads as one, values joined (RFC 9110 5.3). */
        if (lua_getfield(L, -1, name) == LUA_TSTRING) {
            lua_pushliteral(L, ", ");
            lua_pushstring(L, value);
            lua_concat(L, 3);
        } else {
            lua_pop(L, 1);
            lua_pushstring(L, value);
        }
        lua_setfield(L, -2, name);
    }
    lua_setfield(L, -2, "headers");
    lua_pushlstring(L, x->body ? x->body : "", x->blen);
    lua_setfield(L, -2, "body");
    return 1;
}

/* ------------------------------------------------------------ the engine */

/* curl says which events a socket of a transfer waits for (or that it is
 * done with it): the epoll set follows. A socket number curl reuses after
 * closing one is added anew (the kernel dropped the closed one). */
static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
    (void)easy;
    (void)socketp;
    sgw_httpc *h = userp;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(h->epfd, EPOLL_CTL_DEL, fd, NULL);      /* may be closed already */
        return 0;
    }
    struct epoll_event ev = { .events = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u),
                              .data.fd = fd };
    if (epoll_ctl(h->epfd, EPOLL_CTL_MOD, fd, &ev) == 0) return 0;
    if (errno == ENOENT && epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev) == 0) return 0;
    int err = errno;
    log_msg(LOG_WARN, "http_poll_failed", "cannot wait on an outbound socket: %s", strerror(err));
    /* An error returned to curl would fail every transfer of the multi:
     * only this one fails (fail_unwatched, once curl has returned). */
    char *priv = NULL;
    if (easy) curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
    if (!priv) return -1;
    ((xfer *)priv)->unwatched = err;
    h->unwatched = 1;
    return 0;
}

/* When curl wants to be called with CURL_SOCKET_TIMEOUT (-1: never). */
static int on_timer(CURLM *multi, long timeout_ms, void *userp) {
    (void)multi;
    sgw_httpc *h = userp;
    h->timer_set = timeout_ms >= 0;
    h->timer_at = clock_mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    return 0;
}

sgw_httpc *httpc_new(int max_concurrent) {
    sgw_httpc *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->epfd = epoll_create1(EPOLL_CLOEXEC);
    h->multi = h->epfd >= 0 ? curl_multi_init() : NULL;
    if (!h->multi) {
        if (h->epfd >= 0) close(h->epfd);
        free(h);
        return NULL;
    }
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
    h->max_concurrent = max_concurrent > 0 ? max_concurrent : 1;
    return h;
}

void httpc_free(sgw_httpc *h) {
    if (!h) return;
    /* Abandoned coroutines: their transfers end here and their refs go, so
     * the coroutines can be collected. */
    while (h->running.head) {
        xfer *x = h->running.head;
        xfer_detach(x, NULL);
        xfer_release(x);
    }
    while (h->queued.head) {
        xfer *x = h->queued.head;
        xfer_detach(x, NULL);
        xfer_release(x);
    }
    curl_multi_cleanup(h->multi);
    close(h->epfd);
    free(h);
}

int httpc_active(sgw_httpc *h) { return h ? h->running.n + h->queued.n : 0; }

void httpc_set_current(sgw_httpc *h, lua_State *co) {
    if (h) h->current = co;
}

void httpc_set_lease(sgw_httpc *h, uint64_t confirmed_ms, uint64_t lease_ms, uint64_t every_ms) {
    if (!h) return;
    h->lease_confirmed = confirmed_ms;
    h->lease_ms = lease_ms;
    h->lease_every_ms = every_ms;
}

/* Whether a job's call of this time limit may go out. It must be over before
 * the job's lease, as last confirmed, can run out, or another instance could
 * take the job and make the call again while this one is still under way (a
 * post published twice). The runner confirms leases every lease_every_ms
 * (a third of their length); while it does, calls go out, and a call started
 * just before a confirmation that then fails still ends in time as long as
 * the lease is longer than that period + 1 s + the call's time limit
 * (config/sgw.conf, jobs.lease_seconds). Once a confirmation is overdue (the
 * database has not answered), a call that could outlast the lease is not
 * sent, and none at all once the lease has run out. */
static int lease_covers(const sgw_httpc *h, long timeout_ms, uint64_t *since_ms) {
    if (!h || !h->lease_confirmed) return 1;
    uint64_t now = clock_mono_ms(), until = h->lease_confirmed + h->lease_ms;
    *since_ms = now > h->lease_confirmed ? now - h->lease_confirmed : 0;
    if (now >= until) return 0;
    if (*since_ms <= h->lease_every_ms + LEASE_CONFIRM_GRACE_MS) return 1;
    return timeout_ms > 0 && now + (uint64_t)timeout_ms <= until;
}

/* Moves waiting transfers into the multi while there is room. One that
 * cannot be added ends at once with an error. */
static void promote(sgw_httpc *h, xfer **done) {
    while (h->queued.head && h->running.n < h->max_concurrent) {
        xfer *x = h->queued.head;
        xlist_remove(&h->queued, x);
        if (curl_multi_add_handle(h->multi, x->easy) != CURLM_OK) {
            x->queued = 0;
            x->rc = CURLE_FAILED_INIT;
            x->done = 1;
            /* still linked nowhere; hand it back like a finished one */
            x->done_next = *done;
            *done = x;
            continue;
        }
        x->queued = 0;
        xlist_push(&h->running, x);
    }
}

/* Takes finished transfers out of the multi; returns them as a list. */
static xfer *collect_done(sgw_httpc *h) {
    xfer *done = NULL, **tail = &done;
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(h->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        CURL *e = m->easy_handle;
        CURLcode rc = m->data.result;
        char *priv = NULL;
        curl_easy_getinfo(e, CURLINFO_PRIVATE, &priv);
        xfer *x = (xfer *)priv;
        curl_multi_remove_handle(h->multi, e); /* m is invalid from here */
        xlist_remove(&h->running, x);
        x->rc = rc;
        x->done = 1;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &x->status);
        x->done_next = NULL;
        *tail = x;
        tail = &x->done_next;
    }
    return done;
}

/* Ends the running transfers whose socket the loop could not wait on, as
 * failures that may have reached the server (a request may have gone out
 * before the socket's next wait). Returns them as a list. */
static xfer *fail_unwatched(sgw_httpc *h) {
    xfer *failed = NULL;
    h->unwatched = 0;
    for (xfer *x = h->running.head, *next; x; x = next) {
        next = x->next;
        if (!x->unwatched) continue;
        curl_multi_remove_handle(h->multi, x->easy);
        xlist_remove(&h->running, x);
        x->rc = CURLE_RECV_ERROR;
        snprintf(x->errbuf, sizeof x->errbuf, "cannot wait on the connection's socket: %s", strerror(x->unwatched));
        x->done = 1;
        x->done_next = failed;
        failed = x;
    }
    return failed;
}

static void deliver(xfer *done, void (*on_ready)(lua_State *, int, void *), void *ud) {
    while (done) {
        xfer *x = done;
        done = x->done_next;
        /* x may be collected once its coroutine has moved on, so take what
         * is needed now and never look at x after on_ready. */
        lua_State *co = x->co, *main = x->main;
        int ref = x->co_ref;
        x->co_ref = LUA_NOREF;
        x->h = NULL;
        on_ready(co, 0, ud);
        luaL_unref(main, LUA_REGISTRYINDEX, ref);
    }
}

/* Appends a list (linked by done_next) to h->found. */
static void keep_found(sgw_httpc *h, xfer *list) {
    xfer **tail = &h->found;
    while (*tail) tail = &(*tail)->done_next;
    *tail = list;
}

void httpc_wait(sgw_httpc *h, int timeout_ms, struct pollfd *extra, int nextra) {
    xfer *failed = NULL;
    if (h) promote(h, &failed);
    if (failed) {
        for (int i = 0; i < nextra; i++) extra[i].revents = 0;
        keep_found(h, failed);
        return;
    }
    if (!h || !h->running.n) {
        /* Nothing of ours runs: wait on the caller's sockets alone. */
        if (nextra > 0 && poll(extra, (nfds_t)nextra, timeout_ms > 0 ? timeout_ms : 0) < 0 && errno != EINTR)
            for (int i = 0; i < nextra; i++) extra[i].revents = 0;
        return;
    }
    /* One wait for the caller's sockets, curl's epoll set and curl's timer. */
    int wait = timeout_ms > 0 ? timeout_ms : 0;
    if (h->found) wait = 0;
    if (h->timer_set) {
        uint64_t now = clock_mono_ms();
        int left = h->timer_at > now ? (int)(h->timer_at - now) : 0;
        if (left < wait) wait = left;
    }
    struct pollfd fds[EXTRA_FDS_MAX + 1];
    int nw = nextra < EXTRA_FDS_MAX ? nextra : EXTRA_FDS_MAX;
    if (nw > 0) memcpy(fds, extra, (size_t)nw * sizeof *fds);
    fds[nw] = (struct pollfd){ .fd = h->epfd, .events = POLLIN };
    if (poll(fds, (nfds_t)nw + 1, wait) < 0) {
        if (errno != EINTR) log_msg(LOG_WARN, "http_poll_failed", "poll: %s", strerror(errno));
        for (int i = 0; i <= nw; i++) fds[i].revents = 0;
    }
    for (int i = 0; i < nw; i++) extra[i].revents = fds[i].revents;
    int still;
    if (fds[nw].revents & POLLIN) {
        /* Level-triggered: what does not fit here is there next turn. */
        struct epoll_event ev[EXTRA_FDS_MAX];
        int k = epoll_wait(h->epfd, ev, EXTRA_FDS_MAX, 0);
        for (int i = 0; i < k; i++) {
            int flags = (ev[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) | (ev[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                        (ev[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
            curl_multi_socket_action(h->multi, ev[i].data.fd, flags, &still);
        }
    }
    if (h->timer_set && clock_mono_ms() >= h->timer_at) {
        h->timer_set = 0;               /* curl sets it again if it wants */
        curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &still);
    }
    keep_found(h, collect_done(h));
    if (h->unwatched) keep_found(h, fail_unwatched(h));
    /* Refill the freed slots before running Lua, so queued transfers start
     * while the finished ones are being handled. */
    promote(h, &failed);
    keep_found(h, failed);
}

void httpc_deliver(sgw_httpc *h, void (*on_ready)(lua_State *co, int nres, void *ud), void *ud) {
    if (!h || !h->found) return;
    xfer *found = h->found;
    h->found = NULL;
    deliver(found, on_ready, ud);
}

void httpc_poll(sgw_httpc *h, int timeout_ms, struct pollfd *extra, int nextra,
                void (*on_ready)(lua_State *co, int nres, void *ud), void *ud) {
    httpc_wait(h, timeout_ms, extra, nextra);
    httpc_deliver(h, on_ready, ud);
}

int httpc_global_init(void) { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1; }

void httpc_global_cleanup(void) { curl_global_cleanup(); }

/* ------------------------------------------------------------ Lua */

typedef struct easy_box {
    CURL *easy;
} easy_box;

static int easy_gc(lua_State *L) {
    easy_box *b = luaL_checkudata(L, 1, EASY_MT);
    if (b->easy) curl_easy_cleanup(b->easy);
    b->easy = NULL;
    return 0;
}

static int request_k(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    xfer *x = luaL_checkudata(L, (int)ctx, XFER_MT);
    if (!x->done) {
        /* Resumed by someone other than httpc_poll: the call is over. */
        xfer_detach(x, L);
        x->rc = CURLE_ABORTED_BY_CALLBACK;
        snprintf(x->errbuf, sizeof x->errbuf, "http.request was resumed before its transfer ended");
    }
    int n = push_results(L, x);
    xfer_release(x);
    return n;
}

static int start_async(lua_State *L, sgw_httpc *h, xfer *x, int xi, const req_opts *o) {
    CURL *e = curl_easy_init();
    if (!e) {
        x->rc = CURLE_OUT_OF_MEMORY;
    } else {
        x->own_easy = 1;
        if (xfer_setup(x, e, o) == 0) {
            lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
            x->main = lua_tothread(L, -1);
            lua_pop(L, 1);
            lua_pushthread(L);
            x->co_ref = luaL_ref(L, LUA_REGISTRYINDEX); /* may throw: nothing linked yet */
            x->co = L;
            x->h = h;
            if (h->running.n < h->max_concurrent) {
                if (curl_multi_add_handle(h->multi, e) == CURLM_OK) {
                    x->queued = 0;
                    xlist_push(&h->running, x);
                } else {
                    x->h = NULL;
                    luaL_unref(L, LUA_REGISTRYINDEX, x->co_ref);
                    x->co_ref = LUA_NOREF;
                    x->rc = CURLE_FAILED_INIT;
                }
            } else {
                x->queued = 1;
                xlist_push(&h->queued, x);
            }
            if (x->h) {
                /* The runner recognises its own yields by this value. */
                lua_pushlightuserdata(L, h);
                return lua_yieldk(L, 1, (lua_KContext)xi, request_k);
            }
        }
    }
    int n = push_results(L, x);
    xfer_release(x);
    return n;
}

/* http.request(opts) -> {status, headers, body} | nil, message, kind */
static int request_run(lua_State *L) {
    sgw_worker *w = lua_touserdata(L, lua_upvalueindex(1));
    if (w && pg_worker_in_transaction(w, L))
        return luaL_error(L, "http.request is not allowed inside a database transaction");
    req_opts o;
    read_opts(L, &o);
    xfer *x = lua_newuserdatauv(L, sizeof *x, 0);
    memset(x, 0, sizeof *x);
    x->co_ref = LUA_NOREF;
    luaL_setmetatable(L, XFER_MT);
    int xi = lua_gettop(L);

    if (strncasecmp(o.url, "http://", 7) != 0 && strncasecmp(o.url, "https://", 8) != 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "http.request: only http and https URLs are allowed");
        lua_pushliteral(L, "other");
        return 3;
    }

    sgw_httpc *h = w ? w->httpc : NULL;
    uint64_t since_ms = 0;
    if (!lease_covers(h, o.timeout_ms, &since_ms)) {
        lua_pushnil(L);
        lua_pushfstring(L, "not sent: the job's lease (jobs.lease_seconds) was last confirmed %d ms ago and could run "
                        "out before this call's time limit, and another instance take the job (is the database "
                        "reachable?)", (int)since_ms);
        lua_pushliteral(L, "lease");
        return 3;
    }
    if (h && h->current == L && lua_isyieldable(L)) return start_async(L, h, x, xi, &o);

    easy_box *b = lua_touserdata(L, lua_upvalueindex(2));
    if (!b->easy) b->easy = curl_easy_init();
    if (!b->easy) {
        x->rc = CURLE_OUT_OF_MEMORY;
    } else {
        /* Reset keeps the handle's connections and caches, not its options. */
        curl_easy_reset(b->easy);
        if (xfer_setup(x, b->easy, &o) == 0) {
            x->rc = curl_easy_perform(b->easy);
            curl_easy_getinfo(b->easy, CURLINFO_RESPONSE_CODE, &x->status);
        }
    }
    int n = push_results(L, x);
    xfer_release(x);
    return n;
}

/* On a socket thread the request migrates first (SGW_MIGRATE_IF_SOCKET) and
 * the call runs again, blocking, on the worker's own thread. Job workers
 * never run on a socket thread: their yields to the job runner are
 * request_run's own. */
static int request_migrated_k(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    (void)ctx;
    return request_run(L);
}

static int l_request(lua_State *L) {
    SGW_MIGRATE_IF_SOCKET(L, request_migrated_k);
    return request_run(L);
}

void lapi_http_open(lua_State *L, sgw_worker *w) {
    luaL_newmetatable(L, XFER_MT);
    lua_pushcfunction(L, xfer_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    luaL_newmetatable(L, EASY_MT);
    lua_pushcfunction(L, easy_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);

    lua_createtable(L, 0, 1);
    lua_pushlightuserdata(L, w);
    easy_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->easy = NULL; /* created on first use: most states never call out */
    luaL_setmetatable(L, EASY_MT);
    lua_pushcclosure(L, l_request, 2);
    lua_setfield(L, -2, "request");
    lua_setglobal(L, "http");
}

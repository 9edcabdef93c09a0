/*
 * metrics.c — the process's Prometheus metrics: per-request counters and
 * latency histograms recorded by the host, counters and gauges that the
 * host and Lua (global `metrics`) name freely, and the text exposition that
 * the admin listener serves at /metrics.
 *
 * One mutex guards everything: each request records once, so contention is
 * a few short critical sections per request. The number of distinct series
 * is bounded so that a handler putting, say, a user id in a label cannot
 * exhaust memory; what does not fit is counted, not stored.
 */
#include "sgw.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SERIES     5000
#define MAX_NAME_LEN   200
#define MAX_LABELS_LEN 1024
#define MAX_LUA_LABELS 16
#define HASH_SIZE      8192         /* power of two */

#define REQ_TOTAL    "sgw_http_requests_total"
#define REQ_DURATION "sgw_http_request_duration_seconds"
#define DROPPED      "sgw_metrics_series_dropped_total"

typedef enum { M_COUNTER, M_GAUGE, M_HISTOGRAM } mtype;
static const char *const TYPE_NAMES[] = {"counter", "gauge", "histogram"};

static const double BOUNDS[] = {.001, .0025, .005, .01, .025, .05, .1, .25,
                                .5, 1, 2.5, 5, 10};
static const char *const BOUND_LABELS[] = {"0.001", "0.0025", "0.005", "0.01",
                                           "0.025", "0.05", "0.1", "0.25",
                                           "0.5", "1", "2.5", "5", "10", "+Inf"};
#define NBOUNDS  (sizeof BOUNDS / sizeof BOUNDS[0])
#define NBUCKETS (NBOUNDS + 1)      /* the last is +Inf */

typedef struct series {
    struct series *next;            /* hash chain */
    uint32_t hash;
    mtype    type;
    char    *name;                  /* name and labels share one allocation */
    char    *labels;                /* "" or k="v",... without braces */
    double   value;                 /* counter and gauge */
    double   sum;                   /* histogram */
    uint64_t count;
    uint64_t buckets[NBUCKETS];     /* per bucket, made cumulative on render */
} series;

/* A family records a name's type, so a name cannot be both a counter and a
 * gauge (Prometheus would refuse the whole scrape). */
typedef struct family {
    struct family *next;
    uint32_t hash;
    mtype    type;
    char     name[];
} family;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static series *table[HASH_SIZE];
static family *families[HASH_SIZE];
static int     nseries;             /* user series, against MAX_SERIES */
static double  dropped;

enum { M_OK = 0, M_CONFLICT = -1, M_FULL = -2, M_INVALID = -3 };

/* --------------------------------------------------------------- names */

static int valid_name(const char *s, int allow_colon)
{
    size_t n = 0;
    if (s == NULL || *s == '\0')
        return 0;
    for (const char *p = s; *p; p++, n++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                 (allow_colon && c == ':') || (p != s && c >= '0' && c <= '9');
        if (!ok || n >= MAX_NAME_LEN)
            return 0;
    }
    return 1;
}

static uint32_t fnv(uint32_t h, const char *s)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 16777619u;
    }
    return h;
}

static uint32_t series_hash(const char *name, const char *labels)
{
    uint32_t h = fnv(2166136261u, name);
    h = (h ^ 0xffu) * 16777619u;    /* separator: ("ab","c") != ("a","bc") */
    return fnv(h, labels);
}

/* ------------------------------------------------------- storage (locked) */

static family *family_get(const char *name, mtype type, int create, int *conflict)
{
    uint32_t h = fnv(2166136261u, name);
    family *f = families[h & (HASH_SIZE - 1)];
    for (; f; f = f->next) {
        if (f->hash == h && strcmp(f->name, name) == 0) {
            *conflict = f->type != type;
            return f;
        }
    }
    *conflict = 0;
    if (!create)
        return NULL;
    size_t n = strlen(name) + 1;
    f = malloc(sizeof *f + n);
    if (f == NULL)
        return NULL;
    f->hash = h;
    f->type = type;
    memcpy(f->name, name, n);
    f->next = families[h & (HASH_SIZE - 1)];
    families[h & (HASH_SIZE - 1)] = f;
    return f;
}

/* Finds or creates a series; NULL with *rc set when it cannot. */
static series *series_get(mtype type, const char *name, const char *labels,
                          int exempt, int *rc)
{
    uint32_t h = series_hash(name, labels);
    series *s = table[h & (HASH_SIZE - 1)];
    for (; s; s = s->next) {
        if (s->hash == h && strcmp(s->name, name) == 0 &&
            strcmp(s->labels, labels) == 0) {
            *rc = s->type == type ? M_OK : M_CONFLICT;
            return *rc == M_OK ? s : NULL;
        }
    }
    int conflict;
    family_get(name, type, 0, &conflict);
    if (conflict) {
        *rc = M_CONFLICT;
        return NULL;
    }
    if (!exempt && nseries >= MAX_SERIES) {
        dropped += 1;
        *rc = M_FULL;
        return NULL;
    }
    size_t nl = strlen(name) + 1, ll = strlen(labels) + 1;
    s = calloc(1, sizeof *s + nl + ll);
    if (s == NULL || family_get(name, type, 1, &conflict) == NULL) {
        free(s);
        dropped += 1;
        *rc = M_FULL;
        return NULL;
    }
    s->hash = h;
    s->type = type;
    s->name = (char *)(s + 1);
    s->labels = s->name + nl;
    memcpy(s->name, name, nl);
    memcpy(s->labels, labels, ll);
    s->next = table[h & (HASH_SIZE - 1)];
    table[h & (HASH_SIZE - 1)] = s;
    if (!exempt)
        nseries++;
    *rc = M_OK;
    return s;
}

static int record(mtype type, const char *name, const char *labels, double v)
{
    if (labels == NULL)
        labels = "";
    if (!valid_name(name, 1) || strlen(labels) > MAX_LABELS_LEN || isnan(v))
        return M_INVALID;
    if (type == M_COUNTER && !(v >= 0))
        return M_INVALID;            /* counters only go up */
    int rc;
    pthread_mutex_lock(&mu);
    series *s = series_get(type, name, labels, 0, &rc);
    if (s != NULL) {
        if (type == M_COUNTER)
            s->value += v;
        else
            s->value = v;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* ----------------------------------------------------------- public API */

/* Appends s as an escaped label value; returns the new length, or cap when
 * it did not fit. */
static size_t append_escaped(char *buf, size_t len, size_t cap, const char *s)
{
    for (; s && *s && len < cap; s++) {
        const char *rep = NULL;
        if (*s == '\\') rep = "\\\\";
        else if (*s == '"') rep = "\\\"";
        else if (*s == '\n') rep = "\\n";
        if (rep) {
            if (len + 2 > cap)
                return cap;
            buf[len++] = rep[0];
            buf[len++] = rep[1];
        } else {
            buf[len++] = *s;
        }
    }
    return s && *s ? cap : len;
}

static size_t append_raw(char *buf, size_t len, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (len + n > cap)
        return cap;
    memcpy(buf + len, s, n);
    return len + n;
}

/* Every request ends here, nearly always with a route, method and status
 * seen a moment ago: each thread remembers the series of its last few, so
 * that neither the labels nor their hashes are made again. */
#define REQ_CACHE 8
typedef struct req_cache_entry {
    unsigned long epoch;            /* series from before a reset are gone */
    int           status;
    char          route[128], method[16];
    series       *total, *duration;
} req_cache_entry;

static unsigned long                   reset_epoch = 1;   /* under mu */
static _Thread_local req_cache_entry   req_cache[REQ_CACHE];
static _Thread_local unsigned          req_cache_next;

static req_cache_entry *req_cache_find(const char *route, const char *method, int status)
{
    for (int i = 0; i < REQ_CACHE; i++) {
        req_cache_entry *e = &req_cache[i];
        if (e->epoch == reset_epoch && e->status == status && strcmp(e->route, route) == 0 &&
            strcmp(e->method, method) == 0)
            return e;
    }
    return NULL;
}

static void record_request(series *c, series *h, size_t bucket, double seconds)
{
    if (c)
        c->value += 1;
    if (h) {
        h->buckets[bucket]++;
        h->count++;
        h->sum += seconds;
    }
}

/* Methods are the client's to invent: only the standard ones (RFC 9110 and
 * PATCH, case-sensitive as methods are) get a label value of their own, so
 * invented ones cannot fill the series table and crowd out real routes. */
static const char *method_label(const char *method)
{
    static const char *const known[] = { "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE",
                                         "OPTIONS", "CONNECT", "TRACE" };
    if (!method)
        return "other";
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(method, known[i]) == 0)
            return known[i];
    return "other";
}

void metrics_request(const char *route, const char *method, int status, double seconds)
{
    if (isnan(seconds) || seconds < 0)
        seconds = 0;
    size_t b = 0;
    while (b < NBOUNDS && seconds > BOUNDS[b])
        b++;
    route = route ? route : "unmatched";
    method = method_label(method);

    pthread_mutex_lock(&mu);
    req_cache_entry *e = req_cache_find(route, method, status);
    if (e && e->total && e->duration) {
        record_request(e->total, e->duration, b, seconds);
        pthread_mutex_unlock(&mu);
        return;
    }
    pthread_mutex_unlock(&mu);

    char rl[MAX_LABELS_LEN + 1], all[MAX_LABELS_LEN + 1], st[16];
    const size_t cap = MAX_LABELS_LEN;
    size_t n = append_raw(rl, 0, cap, "route=\"");
    n = append_escaped(rl, n, cap, route);
    n = append_raw(rl, n, cap, "\"");
    if (n >= cap)
        return;                      /* absurd route label: not worth a series */
    rl[n] = '\0';

    snprintf(st, sizeof st, "%d", status);
    size_t m = append_raw(all, 0, cap, rl);
    m = append_raw(all, m, cap, ",method=\"");
    m = append_escaped(all, m, cap, method);
    m = append_raw(all, m, cap, "\",status=\"");
    m = append_raw(all, m, cap, st);
    m = append_raw(all, m, cap, "\"");
    if (m >= cap)
        return;
    all[m] = '\0';

    int rc;
    pthread_mutex_lock(&mu);
    series *c = series_get(M_COUNTER, REQ_TOTAL, all, 0, &rc);
    series *h = series_get(M_HISTOGRAM, REQ_DURATION, rl, 0, &rc);
    record_request(c, h, b, seconds);
    if (c && h && strlen(route) < sizeof e->route && strlen(method) < sizeof e->method) {
        e = &req_cache[req_cache_next++ % REQ_CACHE];
        e->epoch = reset_epoch;
        e->status = status;
        strcpy(e->route, route);
        strcpy(e->method, method);
        e->total = c;
        e->duration = h;
    }
    pthread_mutex_unlock(&mu);
}

void metrics_count(const char *name, const char *labels, double delta)
{
    (void)record(M_COUNTER, name, labels, delta);
}

void metrics_gauge(const char *name, const char *labels, double value)
{
    (void)record(M_GAUGE, name, labels, value);
}

/* Forgets every series; for tests that need a known starting point. */
void metrics_reset(void)
{
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < HASH_SIZE; i++) {
        while (table[i]) {
            series *s = table[i];
            table[i] = s->next;
            free(s);
        }
        while (families[i]) {
            family *f = families[i];
            families[i] = f->next;
            free(f);
        }
    }
    nseries = 0;
    dropped = 0;
    reset_epoch++;
    pthread_mutex_unlock(&mu);
}

/* -------------------------------------------------------------- render */

typedef struct outbuf {
    char  *p;
    size_t len, cap;
    int    failed;
} outbuf;

static void out_put(outbuf *o, const char *s, size_t n)
{
    if (o->failed)
        return;
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (o->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(o->p, cap);
        if (p == NULL) {
            o->failed = 1;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
    o->p[o->len] = '\0';
}

static void out_str(outbuf *o, const char *s)
{
    out_put(o, s, strlen(s));
}

/* Shortest text that reads back as the same double. */
static void fmt_num(char *buf, size_t n, double v)
{
    if (isnan(v)) {
        snprintf(buf, n, "NaN");
    } else if (isinf(v)) {
        snprintf(buf, n, v > 0 ? "+Inf" : "-Inf");
    } else if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, n, "%.0f", v);
    } else {
        snprintf(buf, n, "%.15g", v);
        if (strtod(buf, NULL) != v)
            snprintf(buf, n, "%.17g", v);
    }
}

static void out_sample(outbuf *o, const char *name, const char *suffix,
                       const char *labels, const char *le, const char *value)
{
    out_str(o, name);
    out_str(o, suffix);
    int any = labels[0] != '\0';
    if (any || le) {
        out_str(o, "{");
        out_str(o, labels);
        if (le) {
            out_str(o, any ? ",le=\"" : "le=\"");
            out_str(o, le);
            out_str(o, "\"");
        }
        out_str(o, "}");
    }
    out_str(o, " ");
    out_str(o, value);
    out_str(o, "\n");
}

static int cmp_series(const void *a, const void *b)
{
    const series *x = *(series *const *)a, *y = *(series *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->labels, y->labels);
}

char *metrics_render(size_t *len)
{
    outbuf o = {0};
    char num[64];
    int rc;

    pthread_mutex_lock(&mu);
    /* The drop counter always exists so that alerting on it is simple. */
    series *d = series_get(M_COUNTER, DROPPED, "", 1, &rc);
    if (d)
        d->value = dropped;

    size_t total = 0;
    for (size_t i = 0; i < HASH_SIZE; i++)
        for (series *s = table[i]; s; s = s->next)
            total++;
    series **all = malloc((total ? total : 1) * sizeof *all);
    if (all == NULL) {
        pthread_mutex_unlock(&mu);
        if (len)
            *len = 0;
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < HASH_SIZE; i++)
        for (series *s = table[i]; s; s = s->next)
            all[k++] = s;
    qsort(all, total, sizeof *all, cmp_series);

    const char *last = NULL;
    for (size_t i = 0; i < total; i++) {
        series *s = all[i];
        if (last == NULL || strcmp(last, s->name) != 0) {
            out_str(&o, "# TYPE ");
            out_str(&o, s->name);
            out_str(&o, " ");
            out_str(&o, TYPE_NAMES[s->type]);
            out_str(&o, "\n");
            last = s->name;
        }
        if (s->type != M_HISTOGRAM) {
            fmt_num(num, sizeof num, s->value);
            out_sample(&o, s->name, "", s->labels, NULL, num);
            continue;
        }
        uint64_t cum = 0;
        for (size_t b = 0; b < NBUCKETS; b++) {
            cum += s->buckets[b];
            snprintf(num, sizeof num, "%llu", (unsigned long long)cum);
            out_sample(&o, s->name, "_bucket", s->labels, BOUND_LABELS[b], num);
        }
        fmt_num(num, sizeof num, s->sum);
        out_sample(&o, s->name, "_sum", s->labels, NULL, num);
        snprintf(num, sizeof num, "%llu", (unsigned long long)s->count);
        out_sample(&o, s->name, "_count", s->labels, NULL, num);
    }
    pthread_mutex_unlock(&mu);
    free(all);

    if (o.failed || o.p == NULL) {
        free(o.p);
        o.p = NULL;
        o.len = 0;
        if (!o.failed)
            o.p = calloc(1, 1);      /* cannot happen: the drop counter renders */
    }
    if (len)
        *len = o.len;
    return o.p;
}

/* ---------------------------------------------------------------- Lua */

typedef struct lpair {
    const char *k, *v;
    size_t vlen;
} lpair;

static int cmp_pair(const void *a, const void *b)
{
    return strcmp(((const lpair *)a)->k, ((const lpair *)b)->k);
}

/* Turns the labels table at idx into `k="v",...` (sorted by key), pushed
 * on the stack. Raises on bad names or values. */
static const char *push_labels(lua_State *L, int idx)
{
    lpair pairs[MAX_LUA_LABELS];
    int n = 0;
    idx = lua_absindex(L, idx);
    luaL_checkstack(L, 2 * MAX_LUA_LABELS + 8, "labels");
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        /* stack: ... key value */
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "metrics: label names must be strings");
        const char *k = lua_tostring(L, -2);
        if (!valid_name(k, 0) || strncmp(k, "__", 2) == 0)
            luaL_error(L, "metrics: invalid label name '%s'", k);
        int t = lua_type(L, -1);
        if (t != LUA_TSTRING && t != LUA_TNUMBER && t != LUA_TBOOLEAN)
            luaL_error(L, "metrics: label '%s' has a %s value", k, luaL_typename(L, -1));
        if (n == MAX_LUA_LABELS)
            luaL_error(L, "metrics: more than %d labels", MAX_LUA_LABELS);
        size_t vlen;
        const char *v = luaL_tolstring(L, -1, &vlen);
        /* keep key and text on the stack (they hold the strings alive) and
         * iterate on with a copy of the key */
        lua_replace(L, -2);
        lua_pushvalue(L, -2);
        pairs[n].k = k;
        pairs[n].v = v;
        pairs[n].vlen = vlen;
        n++;
    }
    qsort(pairs, (size_t)n, sizeof pairs[0], cmp_pair);

    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; i < n; i++) {
        if (i)
            luaL_addchar(&b, ',');
        luaL_addstring(&b, pairs[i].k);
        luaL_addstring(&b, "=\"");
        for (size_t j = 0; j < pairs[i].vlen; j++) {
            char c = pairs[i].v[j];
            if (c == '\\') luaL_addstring(&b, "\\\\");
            else if (c == '"') luaL_addstring(&b, "\\\"");
            else if (c == '\n') luaL_addstring(&b, "\\n");
            else luaL_addchar(&b, c);
        }
        luaL_addchar(&b, '"');
    }
    luaL_pushresult(&b);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    if (len > MAX_LABELS_LEN || strlen(s) != len)
        luaL_error(L, "metrics: labels too long or contain NUL");
    return s;
}

/* metrics.inc(name, labels?, delta?) / metrics.set(name, labels?, value);
 * a number in the second place is the delta/value. */
static int lua_record(lua_State *L, mtype type)
{
    const char *name = luaL_checkstring(L, 1);
    if (!valid_name(name, 1))
        return luaL_error(L, "metrics: invalid metric name '%s'", name);
    int vidx = 3;
    if (lua_type(L, 2) == LUA_TNUMBER && lua_isnone(L, 3))
        vidx = 2;
    else if (!lua_isnoneornil(L, 2))
        luaL_checktype(L, 2, LUA_TTABLE);
    double v;
    if (type == M_COUNTER) {
        v = luaL_optnumber(L, vidx, 1);
        luaL_argcheck(L, isfinite(v) && v >= 0, vidx, "delta must be a finite number >= 0");
    } else {
        v = luaL_checknumber(L, vidx);
        luaL_argcheck(L, !isnan(v), vidx, "value is NaN");
    }
    const char *labels = vidx == 3 && lua_istable(L, 2) ? push_labels(L, 2) : "";
    int rc = record(type, name, labels, v);
    if (rc == M_CONFLICT)
        return luaL_error(L, "metrics: '%s' is not a %s", name, TYPE_NAMES[type]);
    if (rc == M_INVALID)
        return luaL_error(L, "metrics: invalid metric");
    return 0;                        /* M_FULL: dropped and counted, by design */
}

static int l_inc(lua_State *L) { return lua_record(L, M_COUNTER); }
static int l_set(lua_State *L) { return lua_record(L, M_GAUGE); }

void lapi_metrics_open(lua_State *L)
{
    static const luaL_Reg funcs[] = {
        {"inc", l_inc},
        {"set", l_set},
        {NULL, NULL},
    };
    luaL_newlib(L, funcs);
    lua_setglobal(L, "metrics");
}

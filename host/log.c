/*
 * log.c — structured logging: one JSON object per line on stderr.
 *
 * Lines are assembled in a local buffer and written with one write(2), so
 * lines from different threads never interleave. Request lines, one per
 * request, are the bulk: while `sgw serve` runs they are gathered in a
 * buffer that a writer thread writes out every few milliseconds, so a
 * request does not pay for a system call of its own. Every other line is
 * written at once, after the gathered ones, so the order stays true.
 * Nothing here knows which values are secret: callers never pass keys,
 * tokens or passwords.
 */
#include "sgw.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BATCH_CAP      ((size_t)1 << 20)
#define BATCH_DELAY_NS (5 * 1000 * 1000)   /* how long request lines may wait */

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  out_cond = PTHREAD_COND_INITIALIZER;
static char           *batch;              /* non-NULL while the writer runs */
static size_t          batch_len;
static int             writer_stop;
static pthread_t       writer;

static atomic_int min_level = LOG_INFO;

static const char *level_names[] = { "debug", "info", "warn", "error" };

void log_set_level(sgw_log_level level) { atomic_store(&min_level, (int)level); }

size_t json_escape(char *buf, size_t len, size_t cap, const char *s, size_t slen) {
    static const char hex[] = "0123456789abcdef";
    if (len + 2 > cap) return cap;
    buf[len++] = '"';
    /* Most values (ids, routes, methods) need no escape at all: copied whole. */
    size_t plain = 0;
    while (plain < slen) {
        unsigned char c = (unsigned char)s[plain];
        if (c < 0x20 || c == '"' || c == '\\' || c == 0x7f) break;
        plain++;
    }
    if (plain == slen && len + slen + 1 <= cap) {
        memcpy(buf + len, s, slen);
        len += slen;
        buf[len++] = '"';
        return len;
    }
    for (size_t i = 0; i < slen; i++) {
        unsigned char c = (unsigned char)s[i];
        if (len + 7 > cap) return cap;
        if (c == '"' || c == '\\') {
            buf[len++] = '\\';
            buf[len++] = (char)c;
        } else if (c == '\n') {
            buf[len++] = '\\'; buf[len++] = 'n';
        } else if (c == '\t') {
            buf[len++] = '\\'; buf[len++] = 't';
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(buf + len, "\\u00", 4);
            len += 4;
            buf[len++] = hex[c >> 4];
            buf[len++] = hex[c & 15];
        } else {
            buf[len++] = (char)c;
        }
    }
    if (len + 1 > cap) return cap;
    buf[len++] = '"';
    return len;
}

/* The time prefix changes once a second; each thread keeps its own. */
static _Thread_local time_t tl_second = -1;
static _Thread_local char   tl_prefix[40];
static _Thread_local size_t tl_prefix_len;

size_t log_begin(char *buf, size_t cap) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec != tl_second) {
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        int n = snprintf(tl_prefix, sizeof tl_prefix, "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.",
                         tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        if (n < 0 || (size_t)n >= sizeof tl_prefix) n = 0;
        tl_prefix_len = (size_t)n;
        tl_second = ts.tv_sec;
    }
    if (cap < tl_prefix_len + 6) return 0;
    memcpy(buf, tl_prefix, tl_prefix_len);
    size_t len = tl_prefix_len;
    long ms = ts.tv_nsec / 1000000;
    buf[len++] = (char)('0' + ms / 100);
    buf[len++] = (char)('0' + ms / 10 % 10);
    buf[len++] = (char)('0' + ms % 10);
    buf[len++] = 'Z';
    buf[len++] = '"';
    buf[len] = 0;
    return len;
}

static void write_all(const char *p, size_t n) {
    while (n) {
        ssize_t w = write(STDERR_FILENO, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return;                         /* nowhere to report it */
        }
        p += w;
        n -= (size_t)w;
    }
}

/* Under out_mu. */
static void flush_batch(void) {
    if (batch_len) write_all(batch, batch_len);
    batch_len = 0;
}

void log_line(const char *json, size_t len) {
    char stackbuf[8192];
    pthread_mutex_lock(&out_mu);
    flush_batch();
    if (len + 1 <= sizeof stackbuf) {
        memcpy(stackbuf, json, len);
        stackbuf[len] = '\n';
        write_all(stackbuf, len + 1);
    } else {
        write_all(json, len);
        write_all("\n", 1);
    }
    pthread_mutex_unlock(&out_mu);
}

void log_line_batched(const char *json, size_t len) {
    pthread_mutex_lock(&out_mu);
    if (!batch || len + 1 > BATCH_CAP) {
        pthread_mutex_unlock(&out_mu);
        log_line(json, len);
        return;
    }
    if (batch_len + len + 1 > BATCH_CAP) flush_batch();
    int was_empty = batch_len == 0;
    memcpy(batch + batch_len, json, len);
    batch[batch_len + len] = '\n';
    batch_len += len + 1;
    if (was_empty) pthread_cond_signal(&out_cond);
    pthread_mutex_unlock(&out_mu);
}

static void *writer_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&out_mu);
    for (;;) {
        while (!batch_len && !writer_stop) pthread_cond_wait(&out_cond, &out_mu);
        if (writer_stop) break;
        /* Let a few milliseconds of lines gather into one write. */
        pthread_mutex_unlock(&out_mu);
        struct timespec delay = { 0, BATCH_DELAY_NS };
        nanosleep(&delay, NULL);
        pthread_mutex_lock(&out_mu);
        flush_batch();
    }
    flush_batch();
    pthread_mutex_unlock(&out_mu);
    return NULL;
}

int log_start_writer(void) {
    char *buf = malloc(BATCH_CAP);
    if (!buf) return -1;
    pthread_mutex_lock(&out_mu);
    batch = buf;
    batch_len = 0;
    writer_stop = 0;
    pthread_mutex_unlock(&out_mu);
    if (pthread_create(&writer, NULL, writer_main, NULL)) {
        pthread_mutex_lock(&out_mu);
        batch = NULL;
        pthread_mutex_unlock(&out_mu);
        free(buf);
        return -1;
    }
    return 0;
}

void log_stop_writer(void) {
    pthread_mutex_lock(&out_mu);
    if (!batch) {
        pthread_mutex_unlock(&out_mu);
        return;
    }
    writer_stop = 1;
    pthread_cond_signal(&out_cond);
    pthread_mutex_unlock(&out_mu);
    pthread_join(writer, NULL);
    pthread_mutex_lock(&out_mu);
    flush_batch();
    char *buf = batch;
    batch = NULL;
    pthread_mutex_unlock(&out_mu);
    free(buf);
}

void log_msg(sgw_log_level level, const char *event, const char *fmt, ...) {
    if ((int)level < atomic_load(&min_level)) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) msg[0] = 0;
    char buf[6144];
    size_t len = log_begin(buf, sizeof buf);
    len += (size_t)snprintf(buf + len, sizeof buf - len, ",\"level\":\"%s\",\"event\":", level_names[level]);
    len = json_escape(buf, len, sizeof buf, event, strlen(event));
    if (len + 12 < sizeof buf) {
        memcpy(buf + len, ",\"message\":", 11);
        len += 11;
        len = json_escape(buf, len, sizeof buf - 1, msg, strlen(msg));
    }
    if (len < sizeof buf) buf[len++] = '}';
    log_line(buf, len);
}

/* log.info(event, fields): one level of fields, each value a number, a
 * boolean or text, written after time, level and event in a fixed order:
 * requestId first, then the rest sorted (a table's own order changes from
 * run to run). The line is assembled in a fixed buffer on the C stack,
 * not a luaL_Buffer: walking the table pushes values, which a luaL_Buffer
 * does not allow while it is open. Absurdly long lines are cut short, and
 * fields past the first LUA_LOG_FIELDS are left out. */
#define LUA_LOG_LINE 16384
#define LUA_LOG_FIELDS 64

typedef struct {
    const char *name;   /* a key of the fields table, which keeps it alive */
    size_t      len;
} field_name;

static int field_rank(const field_name *f) {
    return !(f->len == 9 && memcmp(f->name, "requestId", 9) == 0);
}

static int field_cmp(const void *pa, const void *pb) {
    const field_name *a = pa, *b = pb;
    int ra = field_rank(a), rb = field_rank(b);
    if (ra != rb) return ra - rb;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->name, b->name, n);
    if (c) return c;
    return (a->len > b->len) - (a->len < b->len);
}

static size_t append(char *buf, size_t len, size_t cap, const char *s, size_t n) {
    if (len >= cap || n > cap - len) return cap;
    memcpy(buf + len, s, n);
    return len + n;
}

static int l_log(lua_State *L, sgw_log_level level) {
    if ((int)level < atomic_load(&min_level)) return 0;
    const char *event = luaL_checkstring(L, 1);
    char line[LUA_LOG_LINE];
    const size_t cap = sizeof line - 2; /* room for the closing brace */
    size_t len = log_begin(line, cap);
    len += (size_t)snprintf(line + len, cap - len, ",\"level\":\"%s\",\"event\":", level_names[level]);
    len = json_escape(line, len, cap, event, strlen(event));
    if (lua_istable(L, 2)) {
        field_name names[LUA_LOG_FIELDS];
        size_t count = 0;
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            if (lua_type(L, -2) == LUA_TSTRING && count < LUA_LOG_FIELDS) {
                names[count].name = lua_tolstring(L, -2, &names[count].len);
                count++;
            }
            lua_pop(L, 1);
        }
        qsort(names, count, sizeof names[0], field_cmp);
        for (size_t i = 0; i < count && len < cap; i++) {
            size_t kl = names[i].len;
            const char *k = names[i].name;
            lua_pushlstring(L, k, kl);
            lua_rawget(L, 2);
            if (strcmp(k, "time") && strcmp(k, "level") && strcmp(k, "event")) {
                len = append(line, len, cap, ",", 1);
                len = json_escape(line, len, cap, k, kl);
                len = append(line, len, cap, ":", 1);
                int t = lua_type(L, -1);
                char num[64];
                if (t == LUA_TNUMBER) {
                    int n = lua_isinteger(L, -1) ? snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, -1))
                                                 : snprintf(num, sizeof num, "%.17g", lua_tonumber(L, -1));
                    len = append(line, len, cap, num, (size_t)n);
                } else if (t == LUA_TBOOLEAN) {
                    len = lua_toboolean(L, -1) ? append(line, len, cap, "true", 4) : append(line, len, cap, "false", 5);
                } else {
                    size_t vl;
                    const char *v = luaL_tolstring(L, -1, &vl);
                    len = json_escape(line, len, cap, v, vl);
                    lua_pop(L, 1);
                }
            }
            lua_pop(L, 1);
        }
    }
    if (len > cap) len = cap;
    line[len++] = '}';
    log_line(line, len);
    return 0;
}

static int l_debug(lua_State *L) { return l_log(L, LOG_DEBUG); }
static int l_info(lua_State *L) { return l_log(L, LOG_INFO); }
static int l_warn(lua_State *L) { return l_log(L, LOG_WARN); }
static int l_error(lua_State *L) { return l_log(L, LOG_ERROR); }

void lapi_log_open(lua_State *L) {
    static const luaL_Reg fns[] = {
        { "debug", l_debug }, { "info", l_info }, { "warn", l_warn }, { "error", l_error }, { NULL, NULL }
    };
    luaL_newlib(L, fns);
    lua_setglobal(L, "log");
}

/*
 * shared.c — one key/value store for every Lua state of the process.
 *
 * Each worker has its own Lua state, so anything a state caches is cached
 * once per worker and dropped on its own. This store is shared by all of
 * them (request and job workers alike): a value one worker puts is seen by
 * every other, and an update such as incr is atomic across threads.
 *
 * It is bounded in entries and in bytes, so a busy process cannot grow it
 * without limit: it is split into shards by key hash, each with its own
 * lock, hash table and least-recently-used list and an equal part of the
 * bounds; a shard that is full drops an expired entry found near its
 * least-recently-used end, else its least recently used entry. Values are
 * copied in and out, so no Lua state ever holds a pointer into the store,
 * and nothing that can raise runs while a shard is locked.
 */
#include "sgw.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SHARDS 64
#define MIN_SHARD_ENTRIES 16
/* How far from the least-recently-used end a full shard looks for an
 * expired entry before it evicts a live one: bounded, so an insert costs
 * the same however large the shard is. */
#define EXPIRED_SCAN 16

typedef struct entry {
    struct entry *hnext;           /* bucket chain */
    struct entry *newer, *older;   /* LRU list */
    uint64_t      hash;
    uint64_t      expires;         /* monotonic ms; 0: never */
    int           type;
    long long     i;               /* SHARED_INTEGER, SHARED_BOOLEAN */
    double        n;               /* SHARED_NUMBER */
    size_t        klen, vlen;
    char          data[];          /* key, then a string value */
} entry;

typedef struct shard {
    pthread_mutex_t lock;
    entry         **buckets;
    size_t          nbuckets;      /* a power of two */
    size_t          count, max_count;
    size_t          bytes, max_bytes;
    entry          *newest, *oldest;
} shard;

struct sgw_shared {
    shard     shards[MAX_SHARDS];
    unsigned  nshards;             /* a power of two */
    size_t    max_value_bytes;
    uint64_t  seed;
    uint64_t (*now_ms)(void);
};

static size_t entry_size(size_t klen, size_t vlen) { return sizeof(entry) + klen + vlen; }

/* FNV-1a over the key from a random start, then a finaliser that spreads
 * every bit: keys may come from clients, and a fixed hash would let them
 * choose one chain for all. */
static uint64_t key_hash(const sgw_shared *s, const char *key, size_t klen) {
    uint64_t h = s->seed;
    for (size_t i = 0; i < klen; i++) {
        h ^= (unsigned char)key[i];
        h *= 0x100000001b3ULL;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static shard *shard_of(sgw_shared *s, uint64_t h) { return &s->shards[(h >> 58) & (s->nshards - 1)]; }

static int expired(const entry *e, uint64_t now) { return e->expires && e->expires <= now; }

static void lru_unlink(shard *sh, entry *e) {
    if (e->newer) e->newer->older = e->older; else sh->newest = e->older;
    if (e->older) e->older->newer = e->newer; else sh->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push(shard *sh, entry *e) {
    e->newer = NULL;
    e->older = sh->newest;
    if (sh->newest) sh->newest->newer = e; else sh->oldest = e;
    sh->newest = e;
}

static entry **find_slot(shard *sh, uint64_t h, const char *key, size_t klen) {
    entry **p = &sh->buckets[h & (sh->nbuckets - 1)];
    for (; *p; p = &(*p)->hnext)
        if ((*p)->hash == h && (*p)->klen == klen && memcmp((*p)->data, key, klen) == 0) return p;
    return p;
}

static void remove_entry(shard *sh, entry *e) {
    entry **p = find_slot(sh, e->hash, e->data, e->klen);
    *p = e->hnext;
    lru_unlink(sh, e);
    sh->count--;
    sh->bytes -= entry_size(e->klen, e->vlen);
    free(e);
}

/* The live entry of key, or NULL (an expired one is removed on the way). */
static entry *lookup(shard *sh, uint64_t h, const char *key, size_t klen, uint64_t now) {
    entry *e = *find_slot(sh, h, key, klen);
    if (e && expired(e, now)) {
        remove_entry(sh, e);
        return NULL;
    }
    return e;
}

/* More buckets once chains average above one; a failed allocation keeps
 * the old table (longer chains, still correct). */
static void maybe_grow(shard *sh) {
    if (sh->count < sh->nbuckets) return;
    size_t n = sh->nbuckets * 2;
    entry **b = calloc(n, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < sh->nbuckets; i++) {
        for (entry *e = sh->buckets[i], *next; e; e = next) {
            next = e->hnext;
            e->hnext = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    }
    free(sh->buckets);
    sh->buckets = b;
    sh->nbuckets = n;
}

/* Makes room for one more entry of `size` bytes: expired entries near the
 * old end first, then the least recently used. */
static void make_room(shard *sh, size_t size, uint64_t now) {
    while (sh->oldest && (sh->count + 1 > sh->max_count || sh->bytes + size > sh->max_bytes)) {
        entry *victim = sh->oldest;
        int scanned = 0;
        for (entry *e = sh->oldest; e && scanned < EXPIRED_SCAN; e = e->newer, scanned++) {
            if (expired(e, now)) { victim = e; break; }
        }
        remove_entry(sh, victim);
    }
}

static void insert(shard *sh, entry *e, uint64_t now) {
    make_room(sh, entry_size(e->klen, e->vlen), now);
    maybe_grow(sh);
    entry **p = &sh->buckets[e->hash & (sh->nbuckets - 1)];
    e->hnext = *p;
    *p = e;
    lru_push(sh, e);
    sh->count++;
    sh->bytes += entry_size(e->klen, e->vlen);
}

static uint64_t deadline(uint64_t now, uint64_t ttl_ms) { return ttl_ms ? now + ttl_ms : 0; }

static entry *entry_new(uint64_t h, const char *key, size_t klen, const shared_value *v, uint64_t expires) {
    size_t vlen = v->type == SHARED_STRING ? v->len : 0;
    entry *e = malloc(entry_size(klen, vlen));
    if (!e) return NULL;
    *e = (entry){ .hash = h, .expires = expires, .type = v->type, .i = v->i, .n = v->n, .klen = klen, .vlen = vlen };
    memcpy(e->data, key, klen);
    if (vlen) memcpy(e->data + klen, v->s, vlen);
    return e;
}

sgw_shared *shared_new(size_t max_entries, size_t max_bytes, size_t max_value_bytes, uint64_t (*now_ms)(void)) {
    if (max_entries == 0) return NULL;
    sgw_shared *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    /* A small store gets fewer shards, so that each holds at least
     * MIN_SHARD_ENTRIES and its least recently used entry is one of many. */
    s->nshards = MAX_SHARDS;
    while (s->nshards > 1 && s->nshards * MIN_SHARD_ENTRIES > max_entries) s->nshards /= 2;
    s->max_value_bytes = max_value_bytes;
    s->now_ms = now_ms ? now_ms : clock_mono_ms;
    if (crypto_random(&s->seed, sizeof s->seed) != 0) s->seed = 0xcbf29ce484222325ULL ^ (uint64_t)(uintptr_t)s;
    for (unsigned i = 0; i < s->nshards; i++) {
        shard *sh = &s->shards[i];
        /* The bounds split so that the shards' parts add up to them exactly. */
        sh->max_count = max_entries / s->nshards + (i < max_entries % s->nshards);
        sh->max_bytes = max_bytes / s->nshards + (i < max_bytes % s->nshards);
        sh->nbuckets = 16;
        sh->buckets = calloc(sh->nbuckets, sizeof *sh->buckets);
        if (!sh->buckets || pthread_mutex_init(&sh->lock, NULL) != 0) {
            free(sh->buckets);
            s->nshards = i;
            shared_free(s);
            return NULL;
        }
    }
    return s;
}

void shared_free(sgw_shared *s) {
    if (!s) return;
    for (unsigned i = 0; i < s->nshards; i++) {
        shard *sh = &s->shards[i];
        for (entry *e = sh->newest, *next; e; e = next) {
            next = e->older;
            free(e);
        }
        free(sh->buckets);
        pthread_mutex_destroy(&sh->lock);
    }
    free(s);
}

size_t shared_max_value_bytes(const sgw_shared *s) { return s->max_value_bytes; }

/* Whether one entry of this key and value can ever fit in its shard. */
static int fits(const sgw_shared *s, const shard *sh, size_t klen, const shared_value *v) {
    size_t vlen = v->type == SHARED_STRING ? v->len : 0;
    return vlen <= s->max_value_bytes && entry_size(klen, vlen) <= sh->max_bytes;
}

int shared_get(sgw_shared *s, const char *key, size_t klen, shared_value *out, char *buf, size_t cap,
               uint64_t *ttl_left) {
    uint64_t h = key_hash(s, key, klen), now = s->now_ms();
    shard *sh = shard_of(s, h);
    pthread_mutex_lock(&sh->lock);
    entry *e = lookup(sh, h, key, klen, now);
    if (e) {
        *out = (shared_value){ .type = e->type, .i = e->i, .n = e->n, .len = e->vlen };
        if (e->type == SHARED_STRING && e->vlen <= cap) {
            if (e->vlen) memcpy(buf, e->data + e->klen, e->vlen);
            out->s = buf;
        }
        if (ttl_left) *ttl_left = e->expires ? e->expires - now : 0;
        lru_unlink(sh, e);
        lru_push(sh, e);
    }
    pthread_mutex_unlock(&sh->lock);
    return e != NULL;
}

int shared_put(sgw_shared *s, const char *key, size_t klen, const shared_value *v, uint64_t ttl_ms, int mode) {
    uint64_t h = key_hash(s, key, klen), now = s->now_ms();
    shard *sh = shard_of(s, h);
    if (!fits(s, sh, klen, v)) return SHARED_TOO_BIG;
    entry *fresh = entry_new(h, key, klen, v, deadline(now, ttl_ms));
    if (!fresh) return SHARED_NO_MEMORY;
    pthread_mutex_lock(&sh->lock);
    entry *old = lookup(sh, h, key, klen, now);
    if ((mode == SHARED_ADD && old) || (mode == SHARED_REPLACE && !old)) {
        pthread_mutex_unlock(&sh->lock);
        free(fresh);
        return old ? SHARED_EXISTS : SHARED_NOT_FOUND;
    }
    if (old) remove_entry(sh, old);
    insert(sh, fresh, now);
    pthread_mutex_unlock(&sh->lock);
    return SHARED_OK;
}

static int is_number(int type) { return type == SHARED_INTEGER || type == SHARED_NUMBER; }

static double as_double(int type, long long i, double n) { return type == SHARED_INTEGER ? (double)i : n; }

/* Integers wrap as Lua's do (through unsigned arithmetic: no overflow). */
static void add_to(entry *e, const shared_value *delta) {
    if (e->type == SHARED_INTEGER && delta->type == SHARED_INTEGER) {
        e->i = (long long)((unsigned long long)e->i + (unsigned long long)delta->i);
    } else {
        e->n = as_double(e->type, e->i, e->n) + as_double(delta->type, delta->i, delta->n);
        e->type = SHARED_NUMBER;
    }
}

int shared_incr(sgw_shared *s, const char *key, size_t klen, const shared_value *delta,
                const shared_value *init, uint64_t init_ttl_ms, shared_value *out) {
    if (!is_number(delta->type) || (init && !is_number(init->type))) return SHARED_NOT_NUMBER;
    uint64_t h = key_hash(s, key, klen), now = s->now_ms();
    shard *sh = shard_of(s, h);
    if (init && !fits(s, sh, klen, init)) return SHARED_TOO_BIG;
    /* The entry a missing key would get, made before the lock. */
    entry *fresh = init ? entry_new(h, key, klen, init, deadline(now, init_ttl_ms)) : NULL;
    if (init && !fresh) return SHARED_NO_MEMORY;
    pthread_mutex_lock(&sh->lock);
    entry *e = lookup(sh, h, key, klen, now);
    int rc = SHARED_OK;
    if (e && !is_number(e->type)) {
        rc = SHARED_NOT_NUMBER;
    } else if (!e && !fresh) {
        rc = SHARED_NOT_FOUND;
    } else {
        if (!e) {
            insert(sh, fresh, now);
            e = fresh;
            fresh = NULL;
        }
        add_to(e, delta);
        lru_unlink(sh, e);
        lru_push(sh, e);
        *out = (shared_value){ .type = e->type, .i = e->i, .n = e->n };
    }
    pthread_mutex_unlock(&sh->lock);
    free(fresh);
    return rc;
}

int shared_delete(sgw_shared *s, const char *key, size_t klen) {
    uint64_t h = key_hash(s, key, klen), now = s->now_ms();
    shard *sh = shard_of(s, h);
    pthread_mutex_lock(&sh->lock);
    entry *e = lookup(sh, h, key, klen, now);
    if (e) remove_entry(sh, e);
    pthread_mutex_unlock(&sh->lock);
    return e != NULL;
}

size_t shared_flush_expired(sgw_shared *s, size_t max) {
    uint64_t now = s->now_ms();
    size_t removed = 0;
    for (unsigned i = 0; i < s->nshards && (max == 0 || removed < max); i++) {
        shard *sh = &s->shards[i];
        pthread_mutex_lock(&sh->lock);
        for (entry *e = sh->oldest, *newer; e && (max == 0 || removed < max); e = newer) {
            newer = e->newer;
            if (expired(e, now)) {
                remove_entry(sh, e);
                removed++;
            }
        }
        pthread_mutex_unlock(&sh->lock);
    }
    return removed;
}

size_t shared_count(sgw_shared *s) {
    size_t n = 0;
    for (unsigned i = 0; i < s->nshards; i++) {
        pthread_mutex_lock(&s->shards[i].lock);
        n += s->shards[i].count;
        pthread_mutex_unlock(&s->shards[i].lock);
    }
    return n;
}

/* ------------------------------------------------------------ the process's */

static sgw_shared *process_store;

int shared_start(char *err, size_t errlen) {
    long long entries = config_int("shared.max_entries"), bytes = config_int("shared.max_bytes"),
              value = config_int("shared.max_value_bytes");
    if (entries < 1 || bytes < 1 || value < 0) {
        snprintf(err, errlen, "shared.max_entries and shared.max_bytes must be at least 1, "
                 "shared.max_value_bytes at least 0");
        return -1;
    }
    /* The largest entry (key, value, bookkeeping) must fit in a shard's part. */
    long long room = bytes / MAX_SHARDS - (long long)entry_size(SHARED_MAX_KEY, 0);
    if (value > room) {
        snprintf(err, errlen, "shared.max_value_bytes (%lld) must be at most %lld with shared.max_bytes = %lld: "
                 "each of the store's %d shards holds 1/%d of the bytes, and a key and its bookkeeping take "
                 "up to %zu more", value, room > 0 ? room : 0, bytes, MAX_SHARDS, MAX_SHARDS,
                 entry_size(SHARED_MAX_KEY, 0));
        return -1;
    }
    process_store = shared_new((size_t)entries, (size_t)bytes, (size_t)value, NULL);
    if (!process_store) {
        snprintf(err, errlen, "cannot create the shared store: out of memory");
        return -1;
    }
    return 0;
}

void shared_stop(void) {
    shared_free(process_store);
    process_store = NULL;
}

/* ------------------------------------------------------------------- Lua */

static sgw_shared *store_of(lua_State *L) {
    if (!process_store) luaL_error(L, "shared: the store is not started in this process");
    return process_store;
}

static const char *check_key(lua_State *L, size_t *klen) {
    luaL_checktype(L, 1, LUA_TSTRING);
    const char *key = lua_tolstring(L, 1, klen);
    if (*klen == 0 || *klen > SHARED_MAX_KEY)
        luaL_argerror(L, 1, lua_pushfstring(L, "key of %d bytes (1 to %d)", (int)*klen, SHARED_MAX_KEY));
    return key;
}

/* A string, a number or a boolean at idx; strings are borrowed from L. */
static shared_value check_value(lua_State *L, int idx) {
    shared_value v = { 0 };
    switch (lua_type(L, idx)) {
    case LUA_TSTRING:
        v.type = SHARED_STRING;
        v.s = lua_tolstring(L, idx, &v.len);
        break;
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            v.type = SHARED_INTEGER;
            v.i = (long long)lua_tointeger(L, idx);
        } else {
            v.type = SHARED_NUMBER;
            v.n = lua_tonumber(L, idx);
        }
        break;
    case LUA_TBOOLEAN:
        v.type = SHARED_BOOLEAN;
        v.i = lua_toboolean(L, idx);
        break;
    default:
        luaL_typeerror(L, idx, "string, number or boolean");
    }
    return v;
}

static uint64_t opt_ttl(lua_State *L, int idx) {
    lua_Integer ttl = luaL_optinteger(L, idx, 0);
    luaL_argcheck(L, ttl >= 0, idx, "time to live must be 0 (none) or more milliseconds");
    return (uint64_t)ttl;
}

static void push_value(lua_State *L, const shared_value *v) {
    switch (v->type) {
    case SHARED_STRING: lua_pushlstring(L, v->s, v->len); break;
    case SHARED_INTEGER: lua_pushinteger(L, (lua_Integer)v->i); break;
    case SHARED_NUMBER: lua_pushnumber(L, v->n); break;
    default: lua_pushboolean(L, (int)v->i); break;
    }
}

/* shared.get(key) -> value, or nil when absent or expired. A string too
 * long for the first buffer is copied again into one of its size (taken
 * from Lua's memory before the lock: nothing raises under it). */
static int l_get(lua_State *L) {
    sgw_shared *s = store_of(L);
    size_t klen;
    const char *key = check_key(L, &klen);
    char small[256];
    shared_value v;
    int found = shared_get(s, key, klen, &v, small, sizeof small, NULL);
    while (found && v.type == SHARED_STRING && !v.s) {
        char *buf = lua_newuserdatauv(L, v.len, 0);
        found = shared_get(s, key, klen, &v, buf, v.len, NULL);
        if (found && v.s) {
            lua_pushlstring(L, v.s, v.len);
            return 1;
        }
        lua_pop(L, 1);
    }
    if (!found) lua_pushnil(L);
    else push_value(L, &v);
    return 1;
}

static int put(lua_State *L, int mode) {
    sgw_shared *s = store_of(L);
    size_t klen;
    const char *key = check_key(L, &klen);
    shared_value v = check_value(L, 2);
    uint64_t ttl = opt_ttl(L, 3);
    int rc = shared_put(s, key, klen, &v, ttl, mode);
    switch (rc) {
    case SHARED_OK: lua_pushboolean(L, 1); return 1;
    case SHARED_EXISTS: lua_pushboolean(L, 0); lua_pushliteral(L, "exists"); return 2;
    case SHARED_NOT_FOUND: lua_pushboolean(L, 0); lua_pushliteral(L, "not found"); return 2;
    case SHARED_TOO_BIG:
        return luaL_argerror(L, 2, lua_pushfstring(L, "value of %d bytes (at most %d)", (int)v.len,
                                                    (int)shared_max_value_bytes(s)));
    default: return luaL_error(L, "not enough memory");
    }
}

/* shared.set(key, value, ttl_ms?) -> true */
static int l_set(lua_State *L) { return put(L, SHARED_SET); }
/* shared.add(key, value, ttl_ms?) -> true, or false, "exists" */
static int l_add(lua_State *L) { return put(L, SHARED_ADD); }
/* shared.replace(key, value, ttl_ms?) -> true, or false, "not found" */
static int l_replace(lua_State *L) { return put(L, SHARED_REPLACE); }

/* shared.incr(key, delta, init?, init_ttl_ms?) -> the new value, or nil,
 * "not found" (absent and no init). */
static int l_incr(lua_State *L) {
    sgw_shared *s = store_of(L);
    size_t klen;
    const char *key = check_key(L, &klen);
    luaL_checktype(L, 2, LUA_TNUMBER);
    shared_value delta = check_value(L, 2), init = { 0 }, out;
    int has_init = !lua_isnoneornil(L, 3);
    if (has_init) {
        luaL_checktype(L, 3, LUA_TNUMBER);
        init = check_value(L, 3);
    }
    uint64_t ttl = opt_ttl(L, 4);
    int rc = shared_incr(s, key, klen, &delta, has_init ? &init : NULL, ttl, &out);
    switch (rc) {
    case SHARED_OK: push_value(L, &out); return 1;
    case SHARED_NOT_FOUND: lua_pushnil(L); lua_pushliteral(L, "not found"); return 2;
    case SHARED_NOT_NUMBER: return luaL_error(L, "shared.incr: the value of this key is not a number");
    default: return luaL_error(L, "not enough memory");
    }
}

/* shared.delete(key) -> true when there was a live entry */
static int l_delete(lua_State *L) {
    sgw_shared *s = store_of(L);
    size_t klen;
    const char *key = check_key(L, &klen);
    lua_pushboolean(L, shared_delete(s, key, klen));
    return 1;
}

/* shared.ttl(key) -> milliseconds left (0: no expiry), or nil, "not found" */
static int l_ttl(lua_State *L) {
    sgw_shared *s = store_of(L);
    size_t klen;
    const char *key = check_key(L, &klen);
    shared_value v;
    uint64_t left = 0;
    if (!shared_get(s, key, klen, &v, NULL, 0, &left)) { lua_pushnil(L); lua_pushliteral(L, "not found"); return 2; }
    lua_pushinteger(L, (lua_Integer)left);
    return 1;
}

/* shared.flush_expired(max?) -> how many expired entries were removed */
static int l_flush_expired(lua_State *L) {
    sgw_shared *s = store_of(L);
    lua_Integer max = luaL_optinteger(L, 1, 0);
    luaL_argcheck(L, max >= 0, 1, "must be 0 (all) or more");
    lua_pushinteger(L, (lua_Integer)shared_flush_expired(s, (size_t)max));
    return 1;
}

void lapi_shared_open(lua_State *L) {
    static const luaL_Reg fns[] = {
        { "get", l_get }, { "set", l_set }, { "add", l_add }, { "replace", l_replace }, { "incr", l_incr },
        { "delete", l_delete }, { "ttl", l_ttl }, { "flush_expired", l_flush_expired }, { NULL, NULL }
    };
    luaL_newlib(L, fns);
    lua_setglobal(L, "shared");
}

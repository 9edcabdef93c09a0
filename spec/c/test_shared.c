/*
 * test_shared.c — the process-wide store of shared.c: values of each type
 * kept apart, times to live on a clock the test moves, eviction at both
 * bounds, add/replace, incr from several threads at once, and the Lua
 * binding `shared` (its answers and what it refuses).
 */
#include "sgw.h"
#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fake_now = 1000;
static uint64_t test_clock(void) { return fake_now; }

static shared_value str(const char *s) { return (shared_value){ .type = SHARED_STRING, .s = s, .len = strlen(s) }; }
static shared_value integer(long long i) { return (shared_value){ .type = SHARED_INTEGER, .i = i }; }
static shared_value number(double n) { return (shared_value){ .type = SHARED_NUMBER, .n = n }; }

static int put(sgw_shared *s, const char *key, shared_value v, uint64_t ttl, int mode) {
    return shared_put(s, key, strlen(key), &v, ttl, mode);
}

static int get(sgw_shared *s, const char *key, shared_value *v, char *buf, size_t cap) {
    return shared_get(s, key, strlen(key), v, buf, cap, NULL);
}

static int present(sgw_shared *s, const char *key) {
    shared_value v;
    return get(s, key, &v, NULL, 0);
}

static void test_types(void) {
    sgw_shared *s = shared_new(100, 1 << 20, 1024, test_clock);
    char buf[64];
    shared_value v;
    check(put(s, "s", (shared_value){ .type = SHARED_STRING, .s = "a\0b", .len = 3 }, 0, SHARED_SET) == SHARED_OK,
          "set a string", NULL);
    check(get(s, "s", &v, buf, sizeof buf) && v.type == SHARED_STRING && v.len == 3 && memcmp(v.s, "a\0b", 3) == 0,
          "strings are binary-safe", NULL);
    check(get(s, "s", &v, buf, 2) && v.s == NULL && v.len == 3, "a buffer too small says the length", NULL);
    put(s, "i", integer(3), 0, SHARED_SET);
    put(s, "n", number(3.0), 0, SHARED_SET);
    put(s, "b", (shared_value){ .type = SHARED_BOOLEAN, .i = 0 }, 0, SHARED_SET);
    check(get(s, "i", &v, NULL, 0) && v.type == SHARED_INTEGER && v.i == 3, "integers stay integers", NULL);
    check(get(s, "n", &v, NULL, 0) && v.type == SHARED_NUMBER && v.n == 3.0, "floats stay floats", NULL);
    check(get(s, "b", &v, NULL, 0) && v.type == SHARED_BOOLEAN && v.i == 0, "false is kept", NULL);
    check(!present(s, "missing"), "an absent key is absent", NULL);
    /* Keys differ by every byte, also past a NUL. */
    shared_value one = integer(1), two = integer(2);
    shared_put(s, "k\0a", 3, &one, 0, SHARED_SET);
    shared_put(s, "k\0b", 3, &two, 0, SHARED_SET);
    check(shared_get(s, "k\0a", 3, &v, NULL, 0, NULL) && v.i == 1, "binary keys", NULL);
    check(put(s, "big", (shared_value){ .type = SHARED_STRING, .s = buf, .len = 1025 }, 0, SHARED_SET) == SHARED_TOO_BIG,
          "a value over max_value_bytes is refused", NULL);
    check(shared_delete(s, "i", 1) == 1 && !present(s, "i") && shared_delete(s, "i", 1) == 0, "delete", NULL);
    shared_free(s);
}

static void test_ttl(void) {
    sgw_shared *s = shared_new(100, 1 << 20, 1024, test_clock);
    uint64_t left;
    shared_value v;
    fake_now = 1000;
    put(s, "t", str("x"), 50, SHARED_SET);
    put(s, "forever", str("x"), 0, SHARED_SET);
    check(shared_get(s, "t", 1, &v, NULL, 0, &left) && left == 50, "ttl left", NULL);
    fake_now += 49;
    check(present(s, "t"), "alive before its time", NULL);
    fake_now += 1;
    check(!present(s, "t"), "gone at its time", NULL);
    check(shared_get(s, "forever", 7, &v, NULL, 0, &left) && left == 0, "0: no expiry", NULL);
    check(put(s, "t", str("y"), 0, SHARED_ADD) == SHARED_OK, "add over an expired entry", NULL);
    put(s, "e1", str("x"), 10, SHARED_SET);
    put(s, "e2", str("x"), 10, SHARED_SET);
    fake_now += 10;
    check(shared_flush_expired(s, 0) == 2 && shared_count(s) == 2, "flush_expired removes the expired only", NULL);
    shared_free(s);
}

static void test_add_replace(void) {
    sgw_shared *s = shared_new(100, 1 << 20, 1024, test_clock);
    check(put(s, "a", integer(1), 0, SHARED_ADD) == SHARED_OK, "add when absent", NULL);
    check(put(s, "a", integer(2), 0, SHARED_ADD) == SHARED_EXISTS, "add when present", NULL);
    check(put(s, "r", integer(1), 0, SHARED_REPLACE) == SHARED_NOT_FOUND, "replace when absent", NULL);
    check(put(s, "a", integer(3), 0, SHARED_REPLACE) == SHARED_OK, "replace when present", NULL);
    shared_value v;
    check(get(s, "a", &v, NULL, 0) && v.i == 3, "add kept, replace replaced", NULL);
    shared_free(s);
}

static void test_incr(void) {
    sgw_shared *s = shared_new(100, 1 << 20, 1024, test_clock);
    shared_value out, d = integer(5), init = integer(10), f = number(0.5);
    check(shared_incr(s, "c", 1, &d, NULL, 0, &out) == SHARED_NOT_FOUND, "incr without init on a missing key", NULL);
    check(shared_incr(s, "c", 1, &d, &init, 0, &out) == SHARED_OK && out.type == SHARED_INTEGER && out.i == 15,
          "incr starts at init", NULL);
    check(shared_incr(s, "c", 1, &f, NULL, 0, &out) == SHARED_OK && out.type == SHARED_NUMBER && out.n == 15.5,
          "a float delta makes a float", NULL);
    put(s, "s", str("x"), 0, SHARED_SET);
    check(shared_incr(s, "s", 1, &d, &init, 0, &out) == SHARED_NOT_NUMBER, "incr of a string", NULL);
    shared_value max = integer(0x7fffffffffffffffLL), one = integer(1);
    put(s, "w", max, 0, SHARED_SET);
    check(shared_incr(s, "w", 1, &one, NULL, 0, &out) == SHARED_OK && out.i == (-0x7fffffffffffffffLL - 1),
          "integers wrap as Lua's", NULL);
    fake_now = 1000;
    shared_incr(s, "x", 1, &d, &init, 20, &out);
    fake_now += 20;
    check(shared_incr(s, "x", 1, &d, &init, 20, &out) == SHARED_OK && out.i == 15, "init_ttl expires", NULL);
    shared_free(s);
}

static void test_eviction(void) {
    /* 100 entries over 64 shards: the bound holds, whatever the keys' spread. */
    sgw_shared *s = shared_new(100, 1 << 20, 1024, test_clock);
    char key[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "k%d", i);
        put(s, key, integer(i), 0, SHARED_SET);
        if (shared_count(s) > 100) break;
    }
    check(shared_count(s) <= 100 && shared_count(s) >= 90, "never more than max_entries", NULL);
    check(present(s, "k999") && !present(s, "k0"), "the least recently used went first", NULL);
    shared_free(s);

    /* One shard of 4: a recently read entry stays, an expired one goes
     * before any live one. */
    s = shared_new(4, 1 << 20, 1024, test_clock);
    fake_now = 1000;
    put(s, "a", integer(1), 0, SHARED_SET);
    put(s, "b", integer(1), 0, SHARED_SET);
    put(s, "c", integer(1), 5, SHARED_SET);
    put(s, "d", integer(1), 0, SHARED_SET);
    present(s, "a");
    put(s, "e", integer(1), 0, SHARED_SET);
    check(present(s, "a") && !present(s, "b"), "LRU: b (unread) went, a (read) stayed", NULL);
    fake_now += 5;
    put(s, "f", integer(1), 0, SHARED_SET);
    check(present(s, "d") && present(s, "e") && present(s, "a") && shared_count(s) == 4,
          "the expired entry went first", NULL);
    shared_free(s);

    /* The byte bound: 64 shards of 2,000 bytes each. */
    s = shared_new(100000, 64 * 2000, 1000, test_clock);
    char value[900];
    memset(value, 'v', sizeof value);
    for (int i = 0; i < 2000; i++) {
        snprintf(key, sizeof key, "b%d", i);
        put(s, key, (shared_value){ .type = SHARED_STRING, .s = value, .len = sizeof value }, 0, SHARED_SET);
    }
    check(shared_count(s) <= 128, "never more than max_bytes", NULL);
    shared_free(s);
}

static sgw_shared *threaded;

static void *incr_many(void *arg) {
    (void)arg;
    shared_value d = integer(1), init = integer(0), out;
    for (int i = 0; i < 100000; i++) shared_incr(threaded, "n", 1, &d, &init, 0, &out);
    return NULL;
}

static void test_threads(void) {
    threaded = shared_new(1000, 1 << 20, 1024, NULL);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, incr_many, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    shared_value v;
    check(shared_get(threaded, "n", 1, &v, NULL, 0, NULL) && v.i == 400000, "4 x 100000 incr from threads", NULL);
    shared_free(threaded);
}

static void lua_ok(lua_State *L, const char *name, const char *code) {
    int rc = luaL_dostring(L, code);
    check(rc == LUA_OK && lua_toboolean(L, -1), name, rc != LUA_OK ? lua_tostring(L, -1) : "returned false");
    lua_settop(L, 0);
}

static void lua_raises(lua_State *L, const char *name, const char *code, const char *message) {
    int rc = luaL_dostring(L, code);
    const char *err = rc != LUA_OK ? lua_tostring(L, -1) : "did not raise";
    check(rc != LUA_OK && strstr(err, message), name, err);
    lua_settop(L, 0);
}

static void test_lua(void) {
    char err[512];
    if (config_load_file("config/sgw.conf", 1, err, sizeof err) || shared_start(err, sizeof err)) {
        check(0, "the process store starts", err);
        return;
    }
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lapi_shared_open(L);
    lua_ok(L, "set and get each type", "shared.set('s', 'a\\0b'); shared.set('i', 7); shared.set('f', 7.0); "
              "shared.set('b', true); return shared.get('s') == 'a\\0b' and math.type(shared.get('i')) == 'integer' "
              "and math.type(shared.get('f')) == 'float' and shared.get('b') == true and shared.get('none') == nil");
    lua_ok(L, "long strings come back whole", "local v = string.rep('x', 60000); shared.set('long', v); "
              "return shared.get('long') == v");
    lua_ok(L, "add", "local ok1 = shared.add('a', 1); local ok2, why = shared.add('a', 2); "
              "return ok1 == true and ok2 == false and why == 'exists' and shared.get('a') == 1");
    lua_ok(L, "replace", "local ok, why = shared.replace('nope', 1); return ok == false and why == 'not found'");
    lua_ok(L, "incr", "local a, why = shared.incr('c', 1); return a == nil and why == 'not found' "
              "and shared.incr('c', 2, 40) == 42 and shared.incr('c', -2) == 40");
    lua_ok(L, "ttl and delete", "shared.set('t', 1, 60000); local left = shared.ttl('t'); "
              "return left > 59000 and left <= 60000 and shared.ttl('i') == 0 and shared.delete('t') "
              "and shared.ttl('t') == nil and shared.flush_expired() == 0");
    lua_raises(L, "a key must be a string", "shared.get(1)", "string expected");
    lua_raises(L, "an empty key", "shared.set('', 1)", "key of 0 bytes");
    lua_raises(L, "a key too long", "shared.set(string.rep('k', 251), 1)", "key of 251 bytes");
    lua_raises(L, "a value too big", "shared.set('k', string.rep('v', 65537))", "value of 65537 bytes");
    lua_raises(L, "a table value", "shared.set('k', {})", "string, number or boolean expected");
    lua_raises(L, "a negative ttl", "shared.set('k', 1, -1)", "time to live");
    lua_raises(L, "a fractional ttl", "shared.set('k', 1, 1.5)", "integer representation");
    lua_raises(L, "incr of a string", "shared.set('s', 'x'); shared.incr('s', 1)", "not a number");
    lua_raises(L, "incr by a string", "shared.incr('c', '1')", "number expected");
    lua_close(L);
    shared_stop();
    config_free();
}

int main(void) {
    test_types();
    test_ttl();
    test_add_replace();
    test_incr();
    test_eviction();
    test_threads();
    test_lua();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}

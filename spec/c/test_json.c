/*
 * test_json.c — the host's jsonc.encode against lib/json.lua's Lua encoder:
 * thousands of random values with the OpenAPI document's shapes through both
 * (spec/support/json_differential.lua) must give the same bytes or the same
 * error; and the C side's own edges: its arguments, outputs of every size
 * in turns, a value larger than the Lua state's memory ceiling refused
 * without harm to the state, and shapes read once and forgotten with them;
 * and rows written as JSON through a row view (json_push_rows) from a
 * result held in C: each kind's spelling, NULLs, misuse, the ceiling.
 */
#include "sgw.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An allocator with a ceiling, as the host's states have. */
typedef struct { size_t used, limit; } account;

static void *limited_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    account *a = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        a->used -= old;
        return NULL;
    }
    if (nsize > old && a->used + (nsize - old) > a->limit) return NULL;
    void *p = realloc(ptr, nsize);
    if (p) a->used = a->used - old + nsize;
    return p;
}

/* asset(path) as the host gives it: the file's text, or nil. */
static int l_asset(lua_State *L) {
    FILE *f = fopen(luaL_checkstring(L, 1), "rb");
    if (!f) return 0;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) luaL_addlstring(&b, chunk, n);
    fclose(f);
    luaL_pushresult(&b);
    return 1;
}

static lua_State *new_state(account *a) {
    lua_State *L = lua_newstate(limited_alloc, a);
    luaL_openlibs(L);
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, luaopen_cjson);
    lua_setfield(L, -2, "cjson");
    lua_pushcfunction(L, luaopen_cjson_safe);
    lua_setfield(L, -2, "cjson.safe");
    lua_pop(L, 1);
    lua_pushcfunction(L, l_asset);
    lua_setglobal(L, "asset");
    lapi_json_open(L);
    return L;
}

/* Runs chunk; returns its result as a string (caller frees), or the error. */
static char *run(lua_State *L, const char *chunk, int *ok) {
    *ok = luaL_dostring(L, chunk) == LUA_OK;
    const char *s = lua_tostring(L, -1);
    char *out = strdup(s ? s : "(not a string)");
    lua_settop(L, 0);
    return out;
}

static void expect(lua_State *L, const char *name, const char *chunk, int want_ok, const char *want) {
    int ok;
    char *got = run(L, chunk, &ok);
    int same = ok == want_ok && (want_ok ? strcmp(got, want) == 0 : strstr(got, want) != NULL);
    check(same, name, got);
    free(got);
}

static void test_differential(void) {
    account a = { 0, (size_t)512 << 20 };
    lua_State *L = new_state(&a);
    /* The same cases every run; JSON_SEED and JSON_CASES explore others. */
    const char *seed = getenv("JSON_SEED"), *cases = getenv("JSON_CASES");
    char chunk[512];
    snprintf(chunk, sizeof chunk,
             "package.path = 'lib/?.lua;spec/support/?.lua;' .. package.path\n"
             "local total, agreed, failures = require('json_differential').run(%ld, %ld)\n"
             "return ('%%d of %%d agreed%%s%%s'):format(agreed, total, #failures > 0 and '\\n' or '',"
             " table.concat(failures, '\\n'))",
             seed ? strtol(seed, NULL, 10) : 20240611L, cases ? strtol(cases, NULL, 10) : 3000L);
    int ok;
    char *got = run(L, chunk, &ok);
    int agreed = 0, total = -1;
    if (ok) sscanf(got, "%d of %d", &agreed, &total);
    printf("%s\n", got);
    check(ok && agreed == total && total > 300, "both encoders write the same bytes or raise the same error", got);
    free(got);
    lua_close(L);
}

static void test_arguments(void) {
    account a = { 0, (size_t)64 << 20 };
    lua_State *L = new_state(&a);
    expect(L, "a shape that is not a table is misuse", "return jsonc.encode({}, 1)", 0, "table or nil expected");
    expect(L, "a shape's keys must be strings", "return jsonc.encode({}, { keys = { 1 } })", 0,
           "a shape's keys must be strings");
    expect(L, "no empty marker: every string is a string", "return jsonc.encode({ 'x' })", 1, "[\"x\"]");
    expect(L, "the empty marker is []", "return jsonc.encode({ a = 'E', b = 'EE' }, nil, 'E')", 1,
           "{\"a\":[],\"b\":\"EE\"}");
    expect(L, "nothing is nil", "return jsonc.encode()", 0, "Cannot serialise nil: type not supported");
    expect(L, "metamethods are not run", "return jsonc.encode(setmetatable({}, { __index = { id = 1 } }),"
           " { keys = { 'id' }, known = { id = true } })", 1, "{}");
    lua_close(L);
}

static void test_memory_ceiling(void) {
    account a = { 0, (size_t)8 << 20 };
    lua_State *L = new_state(&a);
    /* 3,000 strings of 1 KB: 3 MB of Lua strings, 6 MB escaped. */
    expect(L, "past the memory ceiling, encode raises",
           "local s = string.rep('\\1', 1000)\n"
           "local t = {}\n"
           "for i = 1, 3000 do t[i] = s .. i end\n"
           "big = t\n"
           "return jsonc.encode(t)", 0, "not enough memory");
    expect(L, "the state carries on after it", "big = nil; collectgarbage(); return jsonc.encode({ a = { 1, 2 } })", 1,
           "{\"a\":[1,2]}");
    check(a.used < (size_t)1 << 20, "the output of the failed encode is freed with the garbage", NULL);
    lua_close(L);
}

/* Outputs of every size in turns, from a few bytes to 2 MB (the output
 * grows many times from the state's scratch block): each is whole, and a
 * small one after a large one is not the large one's leftovers. */
static void test_sizes(void) {
    account a = { 0, (size_t)64 << 20 };
    lua_State *L = new_state(&a);
    expect(L, "outputs of every size, in turns, each whole",
           "for _, n in ipairs({ 10, 5000, 300000, 20, 2000000, 100000, 3 }) do\n"
           "  local s = jsonc.encode({ string.rep('a', n - 1) .. 'z' })\n"
           "  if #s ~= n + 4 or s:sub(1, 3) ~= '[\"a' and n > 1 or s:sub(-3) ~= 'z\"]' then\n"
           "    return 'wrong at ' .. n .. ': ' .. #s\n"
           "  end\n"
           "end\n"
           "return 'ok'", 1, "ok");
    /* Objects with more keys than the scratch arena holds, between small
     * ones: every key, in order. */
    expect(L, "objects of every key count, in turns, each whole and sorted",
           "for _, n in ipairs({ 3, 100, 2, 1000, 31, 32, 33 }) do\n"
           "  local t, want = {}, {}\n"
           "  for i = 1, n do t[string.format('k%04d', i)] = i; want[i] = string.format('\"k%04d\":%d', i, i) end\n"
           "  local s = jsonc.encode(t)\n"
           "  if s ~= '{' .. table.concat(want, ',') .. '}' then return 'wrong at ' .. n .. ': ' .. s:sub(1, 80) end\n"
           "end\n"
           "return 'ok'", 1, "ok");
    lua_close(L);
}

/* A shape is read the first time an object is written with it and kept
 * beside it: the same shape again writes the same bytes, a shape that holds
 * itself works, a key that is not a string is refused where the Lua encoder
 * refuses it (after the keys before it, only for objects), and shapes no
 * longer used go with the garbage. */
static void test_shapes_once(void) {
    account a = { 0, (size_t)64 << 20 };
    lua_State *L = new_state(&a);
    expect(L, "the same shape for many objects and calls",
           "local s = { keys = { 'b', 'a' }, known = { a = true, b = true } }\n"
           "local out = {}\n"
           "for i = 1, 3 do out[i] = jsonc.encode({ { a = i, b = 'x' }, { a = 0, c = true } }, { items = s }) end\n"
           "return table.concat(out, ' ')", 1,
           "[{\"b\":\"x\",\"a\":1},{\"a\":0,\"c\":true}] [{\"b\":\"x\",\"a\":2},{\"a\":0,\"c\":true}]"
           " [{\"b\":\"x\",\"a\":3},{\"a\":0,\"c\":true}]");
    expect(L, "a shape that holds itself (replies of replies)",
           "local s = { keys = { 'text', 'replies' }, known = { text = true, replies = true }, props = {} }\n"
           "s.props.replies = { items = s }\n"
           "return jsonc.encode({ replies = { { replies = { { text = 'c' } }, text = 'b' } }, text = 'a' }, s)", 1,
           "{\"text\":\"a\",\"replies\":[{\"text\":\"b\",\"replies\":[{\"text\":\"c\"}]}]}");
    expect(L, "keys escaped as the values are", "return jsonc.encode({ ['a\"b'] = 1 }, { keys = { 'a\"b' }, known = { ['a\"b'] = true } })",
           1,
           "{\"a\\\"b\":1}");
    expect(L, "a key that is not a string, after one that is",
           "return jsonc.encode({ a = 1 }, { keys = { 'a', 2, 'b' } })", 0, "a shape's keys must be strings");
    expect(L, "an array is written with such a shape", "return jsonc.encode({ 1, 2 }, { keys = { 'a', 2 } })", 1,
           "[1,2]");
    expect(L, "a value that cannot be written, before the bad key, says so first",
           "return jsonc.encode({ a = print }, { keys = { 'a', 2 } })", 0, "Cannot serialise function");
    expect(L, "10,000 shapes used once each are collected",
           "collectgarbage(); collectgarbage()\n"
           "local before = collectgarbage('count')\n"
           "for i = 1, 10000 do jsonc.encode({ ['k' .. i] = i }, { keys = { 'k' .. i, 'x' .. i } }) end\n"
           "collectgarbage(); collectgarbage()\n"
           "local grown = collectgarbage('count') - before\n"
           "return grown < 256 and 'ok' or ('grew by ' .. grown .. ' KB')", 1, "ok");
    lua_close(L);
}

/* ------------------------------------------------------- rows as JSON */

/* A result of four columns (n integer, s text, b boolean, f float) in C,
 * as pg.c hands one to json_push_rows. */
static const char *const row_cells[][4] = {
    { "1", "a \"q\" \\ /\n", "t", "0.5" },
    { "-5", NULL, "f", "1e300" },
    { "123456789012345", "\xc3\xa9", NULL, "2" },
    { NULL, "", "t", "Infinity" },
};
static const char *const row_names[] = { "n", "s", "b", "f" };
static const json_cell_kind row_kinds[] = { JSON_CELL_INTEGER, JSON_CELL_STRING, JSON_CELL_BOOLEAN, JSON_CELL_FLOAT };

static int rows_column(void *ctx, const char *name, json_cell_kind *kind) {
    (void)ctx;
    for (int c = 0; c < 4; c++)
        if (strcmp(row_names[c], name) == 0) {
            *kind = row_kinds[c];
            return c;
        }
    return -1;
}

static const char *rows_cell(void *ctx, int row, int column, size_t *len) {
    (void)ctx;
    const char *v = row_cells[row][column];
    if (v) *len = strlen(v);
    return v;
}

/* rows(view, first, last): rows first..last (0-based) of the result above. */
static int l_rows(lua_State *L) {
    json_rows rows = { NULL, rows_column, rows_cell };
    json_push_rows(L, 1, &rows, (int)luaL_checkinteger(L, 2), (int)luaL_checkinteger(L, 3));
    return 1;
}

static void test_rows(void) {
    account a = { 0, (size_t)64 << 20 };
    lua_State *L = new_state(&a);
    lua_register(L, "rows", l_rows);
    expect(L, "each value spelled as encode spells it, NULL as the view says",
           "local view = { '{\"n\":', 'n', '0', ',\"s\":', 's', '\"-\"', ',\"b\":', 'b', 'null', ',\"f\":', 'f', 'null', '}' }\n"
           "return tostring(rows(view, 0, 2))", 1,
           "[{\"n\":1,\"s\":\"a \\\"q\\\" \\\\ /\\n\",\"b\":true,\"f\":0.5},"
           "{\"n\":-5,\"s\":\"-\",\"b\":false,\"f\":1e+300},"
           "{\"n\":1.2345678901234e+14,\"s\":\"\xc3\xa9\",\"b\":null,\"f\":2}]");
    expect(L, "encode writes the rows as they are, wherever they stand",
           "local page = rows({ '[', 'n', 'null', ']' }, 0, 1)\n"
           "return jsonc.encode({ { data = page }, page }, nil)", 1, "[{\"data\":[[1],[-5]]},[[1],[-5]]]");
    expect(L, "no rows", "return tostring(rows({ '', 'n', 'null', '' }, 2, 1))", 1, "[]");
    expect(L, "a view that only has literals", "return tostring(rows({ '{}' }, 0, 1))", 1, "[{},{}]");
    expect(L, "an infinite float is refused as encode refuses it",
           "return rows({ '', 'f', 'null', '' }, 3, 3)", 0, "Cannot serialise number: must not be NaN or Inf");
    expect(L, "a column the result lacks", "return rows({ '', 'x', 'null', '' }, 0, 0)", 0,
           "names the column x, which the result does not have");
    expect(L, "a view of the wrong length", "return rows({ '', 'n' }, 0, 0)", 0, "a row view is a literal");
    expect(L, "a view that is not a table", "return rows('x', 0, 0)", 0, "table expected");
    expect(L, "raw JSON cannot be made from Lua", "return tostring(jsonc.raw)", 1, "nil");
    lua_close(L);

    /* Past the state's memory ceiling: refused, the state still usable. */
    account small = { 0, (size_t)1 << 20 };
    L = new_state(&small);
    lua_register(L, "rows", l_rows);
    expect(L, "a page larger than the memory ceiling is refused",
           "local view = { string.rep(' ', 300000), 's', 'null', '' }\n"
           "local ok, err = pcall(rows, view, 0, 3)\n"
           "return ok and 'written' or tostring(err)", 1, "not enough memory");
    expect(L, "the state is usable after", "return jsonc.encode({ 1 })", 1, "[1]");
    lua_close(L);
}

int main(void) {
    test_differential();
    test_shapes_once();
    test_sizes();
    test_arguments();
    test_memory_ceiling();
    test_rows();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

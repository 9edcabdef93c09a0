/*
 * test_luart.c — the Lua runtime (host/luart.c) on a small handlers tree
 * the test writes, checked for what a handler author sees: the tree loads
 * as a generation, and a worker's state built from it requires its
 * modules; a module sees only the sandbox (no io, package, debug, dofile
 * or loadfile; of os only the clock; no string.dump; load takes text
 * chunks only and honours its env; collectgarbage only counts; require
 * finds lib/ and handlers/ of the generation and cjson, nothing else);
 * each module's globals are its own; lib/a/init.lua is module a and
 * lib/a/b.lua module a.b; a module required while it loads raises
 * "requires itself", and one whose loading raised raises its own error
 * again when required again; asset() hands out the generation's files;
 * require('a/b') is not found (dots only); a module whose value is a
 * light userdata (cjson.null) is not taken for one still loading;
 * luart_reload refuses an edit that breaks the tree (a syntax error, a
 * route naming no handler, no lib/dispatch.lua, a module that raises,
 * requires itself or loops for ever while it loads, a file no require can
 * reach), says why, counts it and keeps the generation the workers run,
 * then takes the repaired tree; and every state's
 * math.random is seeded from the CSPRNG, not from Lua's own seed.
 *
 * Nothing outside the process: no PostgreSQL, no Redis.
 */
#include "sgw.h"
#include "check.h"
#include "lua_tree.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ the tree */

static const char dispatch_lua[] = "return { handle = function() return 404, {}, '' end }\n";
static const char routes_lua[] =
    "return { { method = 'GET', path = '/ping', handler = 'ping', auth = false } }\n";

/* What a module sees of its globals, each entry a string (or a number)
 * the test compares; load_chunk(bytes, mode) lets the test hand it a
 * binary chunk made outside the sandbox. */
static const char probe_sandbox_lua[] =
    "local function outcome(f, ...)\n"
    "  local ok, v = pcall(f, ...)\n"
    "  return (ok and 'ok: ' or 'error: ') .. tostring(v)\n"
    "end\n"
    "local function loaded(chunk, ...)\n"
    "  local f, e = load(chunk, ...)\n"
    "  return type(f) .. ' ' .. tostring(e)\n"
    "end\n"
    "local env = { x = 'from env' }\n"
    "local seen = {\n"
    "  io = type(io), package = type(package), dofile = type(dofile), loadfile = type(loadfile),\n"
    "  debug = type(debug), G = type(_G),\n"
    "  os_execute = type(os.execute), os_getenv = type(os.getenv), os_remove = type(os.remove),\n"
    "  os_exit = type(os.exit), os_time = math.type(os.time()),\n"
    "  string_dump = type(string.dump), method_dump = type(('').dump),\n"
    "  load_signature = loaded('\\27Lua\\84\\0 not really a chunk'),\n"
    "  load_text = load('return 1 + 1')(),\n"
    "  load_sees_sandbox = load('return type(io) .. \" \" .. type(string.format)')(),\n"
    "  load_env = load('return x', 'text', 't', env)(),\n"
    "  load_env_write = (function() load('y = \"written\"', 'text', 't', env)() return env.y end)(),\n"
    "  gc_collect = outcome(collectgarbage, 'collect'),\n"
    "  gc_stop = outcome(collectgarbage, 'stop'),\n"
    "  gc_count = math.type(collectgarbage('count')),\n"
    "  require_io = outcome(require, 'io'),\n"
    "  require_os = outcome(require, 'os'),\n"
    "  require_debug = outcome(require, 'debug'),\n"
    "  require_dotdot = outcome(require, '../outside'),\n"
    "  require_dotdot_module = outcome(require, '../handlers/routes'),\n"
    "  require_absolute = outcome(require, '/etc/passwd'),\n"
    "  require_outside = outcome(require, 'outside'),\n"
    "  require_outside_dir = outcome(require, 'spare.mod'),\n"
    "  require_asset = outcome(require, 'data.some'),\n"
    "  require_slash = outcome(require, 'nest/inner'),\n"
    "  cjson = outcome(function() return require('cjson').encode({ 1, 2 }) end),\n"
    "  cjson_safe = outcome(function() return require('cjson.safe').decode('[\"three\"]')[1] end),\n"
    "  asset_json = asset('lib/data/some.json'),\n"
    "  asset_nope = type((asset('nope'))),\n"
    "  asset_nope_values = select('#', asset('nope')),\n"
    "  asset_outside = type((asset('outside.lua'))),\n"
    "  asset_dotdot = type((asset('lib/../outside.lua'))),\n"
    "}\n"
    "function seen.load_chunk(chunk, mode) return loaded(chunk, 'chunk', mode) end\n"
    "return seen\n";

/* Its first draw: no other module of the tree calls math.random. */
static const char probe_random_lua[] = "return { first_draw = math.random(0) }\n";

static const lua_tree_file tree[] = {
    { "lib/dispatch.lua", dispatch_lua },
    { "handlers/routes.lua", routes_lua },
    { "handlers/ping.lua", "return function() return 200, {}, 'pong' end\n" },
    { "lib/probe/sandbox.lua", probe_sandbox_lua },
    { "lib/probe/random.lua", probe_random_lua },
    /* A global of the setter's, and its own tostring. */
    { "lib/scope/setter.lua",
      "leaked = 'set by scope.setter'\n"
      "tostring = function() return 'replaced' end\n"
      "return { own = function() return leaked end, own_tostring = tostring(1) }\n" },
    { "lib/scope/reader.lua",
      "local setter = require('scope.setter')\n"
      "return { seen = type(leaked), setter_sees = setter.own(), setter_tostring = setter.own_tostring,\n"
      "         tostring = tostring(1) }\n" },
    { "lib/nest/init.lua", "return { name = 'nest from lib/nest/init.lua' }\n" },
    { "lib/nest/inner.lua", "return { name = 'nest.inner from lib/nest/inner.lua' }\n" },
    /* A module whose value is a light userdata, as cjson.null is. */
    { "lib/nothing.lua", "return require('cjson').null\n" },
    { "lib/nothing_twice.lua",
      "local first = require('nothing')\n"
      "local ok, second = pcall(require, 'nothing')\n"
      "return { same = ok and second == first and first == require('cjson').null, err = ok and '' or tostring(second) }\n" },
    /* Cycles caught, so that the tree still loads: what the require raised. */
    { "lib/cycle/self.lua", "local ok, err = pcall(require, 'cycle.self')\nreturn { ok = ok, err = tostring(err) }\n" },
    { "lib/cycle/a.lua", "local ok, err = pcall(require, 'cycle.b')\nreturn { ok = ok, err = tostring(err) }\n" },
    { "lib/cycle/b.lua", "return { a = require('cycle.a') }\n" },
    /* broken.lua raises the first two times it runs (tries.lua counts,
     * the same table for every require in a state): again.lua, loaded
     * first (file order), catches both errors; the third run, the
     * generation's own check of broken.lua, succeeds. */
    { "lib/flaky/tries.lua", "return { n = 0 }\n" },
    { "lib/flaky/broken.lua",
      "local tries = require('flaky.tries')\n"
      "tries.n = tries.n + 1\n"
      "if tries.n <= 2 then error('no widgets yet') end\n"
      "return { loaded_on_try = tries.n }\n" },
    { "lib/flaky/again.lua",
      "local ok1, first = pcall(require, 'flaky.broken')\n"
      "local ok2, second = pcall(require, 'flaky.broken')\n"
      "return { ok = ok1 or ok2, first = tostring(first), second = tostring(second) }\n" },
    { "lib/data/some.json", "{\"answer\": 42}\n" },
    /* Lua files on disk, outside lib/ and handlers/. */
    { "outside.lua", "return 'outside'\n" },
    { "spare/mod.lua", "return 'spare'\n" },
};
#define NTREE (sizeof tree / sizeof tree[0])

static char root[512];

static int make_root(void) {
    return lua_tree_make_with(root, sizeof root, "sgw_test_luart_", tree, NTREE);
}

/* Writes rel, or removes it when text is NULL. 0 ok. */
static int set_file(const char *rel, const char *text) {
    if (text) return lua_tree_write(root, rel, text);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    return remove(path);
}

/* ------------------------------------------------------------ reading the state */

/* tostring(require(module)[key]) in L, in buf; the error when the require
 * fails. */
static const char *seen(lua_State *L, const char *module, const char *key, char *buf, size_t cap) {
    char err[512];
    if (luart_require(L, module, err, sizeof err)) {
        snprintf(buf, cap, "require failed: %s", err);
        return buf;
    }
    if (!lua_istable(L, -1)) {
        snprintf(buf, cap, "module %s is a %s, not a table", module, luaL_typename(L, -1));
        lua_pop(L, 1);
        return buf;
    }
    lua_getfield(L, -1, key);
    snprintf(buf, cap, "%s", luaL_tolstring(L, -1, NULL));
    lua_pop(L, 3);
    return buf;
}

/* require(module)[key] is exactly want. */
static void expect_seen(lua_State *L, const char *module, const char *key, const char *want, const char *name) {
    char got[1024];
    check(strcmp(seen(L, module, key, got, sizeof got), want) == 0, name, got);
}

/* require(module)[key] begins with prefix and contains part. */
static void expect_seen_has(lua_State *L, const char *module, const char *key, const char *prefix, const char *part,
                            const char *name) {
    char got[1024];
    seen(L, module, key, got, sizeof got);
    check(strncmp(got, prefix, strlen(prefix)) == 0 && strstr(got, part), name, got);
}

/* ------------------------------------------------------------ the tests */

static void test_good_tree(sgw_worker *w) {
    char err[512] = "";
    check(luart_generation_id() != 0, "a good tree loads as a generation with an id", NULL);
    check(luart_refresh(w, err, sizeof err) == 0 && w->L && w->gen, "a worker gets a state of the generation", err);
    if (!w->L) return;
    check(w->gen->id == luart_generation_id(), "of the current generation", NULL);

    int top = lua_gettop(w->L);
    int ok = luart_require(w->L, "handlers.routes", err, sizeof err) == 0;
    check(ok, "require('handlers.routes') in the worker's state", err);
    if (ok) {
        ok = lua_istable(w->L, -1) && lua_geti(w->L, -1, 1) == LUA_TTABLE &&
             lua_getfield(w->L, -1, "handler") == LUA_TSTRING && strcmp(lua_tostring(w->L, -1), "ping") == 0;
        check(ok, "it is the routes table the tree wrote", NULL);
    }
    lua_settop(w->L, top);
}

/* Whether the state has loaded module (without loading it). */
static int has_loaded(lua_State *L, const char *module) {
    lua_getfield(L, LUA_REGISTRYINDEX, "sgw.loaded");
    int t = lua_istable(L, -1) ? lua_getfield(L, -1, module) : LUA_TNIL;
    lua_pop(L, lua_istable(L, -2) ? 2 : 1);
    return t != LUA_TNIL;
}

/* A serving state loads every module up front; an operator command's only
 * what it requires. */
static void test_preload(void) {
    char err[512] = "";
    sgw_worker serving = { .id = 3, .role = "http" }, command = { .id = 0, .role = "cli" };
    int ok = luart_refresh(&serving, err, sizeof err) == 0 && luart_refresh(&command, err, sizeof err) == 0;
    check(ok, "an http and a cli state", err);
    if (ok) {
        check(has_loaded(serving.L, "handlers.ping"), "the http state has every handler loaded", NULL);
        check(!has_loaded(command.L, "handlers.ping"), "the cli state has loaded no handler it did not require", NULL);
        check(luart_require(command.L, "handlers.ping", err, sizeof err) == 0 && has_loaded(command.L, "handlers.ping"),
              "the cli state loads one when required", err);
    }
    luart_close_state(&serving);
    luart_close_state(&command);
}

static void test_sandbox(lua_State *L) {
    static const struct { const char *key, *want, *name; } seen_by_module[] = {
        { "io", "nil", "io is nil" },
        { "package", "nil", "package is nil" },
        { "dofile", "nil", "dofile is nil" },
        { "loadfile", "nil", "loadfile is nil" },
        { "debug", "nil", "debug is nil" },
        { "G", "nil", "_G (the unsandboxed globals) is nil" },
        { "os_execute", "nil", "os.execute is nil" },
        { "os_getenv", "nil", "os.getenv is nil" },
        { "os_remove", "nil", "os.remove is nil" },
        { "os_exit", "nil", "os.exit is nil" },
        { "os_time", "integer", "os.time works" },
        { "string_dump", "nil", "string.dump is nil" },
        { "method_dump", "nil", "(''):dump is nil (the strings' metatable has the same string table)" },
        { "load_text", "2", "load of text runs" },
        { "load_sees_sandbox", "nil function", "a loaded text chunk sees the sandbox's globals" },
        { "load_env", "from env", "load honours its env argument: reads" },
        { "load_env_write", "written", "load honours its env argument: writes" },
        { "gc_count", "float", "collectgarbage('count') returns a number" },
        { "cjson", "ok: [1,2]", "require('cjson') works" },
        { "cjson_safe", "ok: three", "require('cjson.safe') works" },
    };
    for (size_t i = 0; i < sizeof seen_by_module / sizeof seen_by_module[0]; i++)
        expect_seen(L, "probe.sandbox", seen_by_module[i].key, seen_by_module[i].want, seen_by_module[i].name);

    expect_seen_has(L, "probe.sandbox", "load_signature", "nil ", "binary",
                    "load of a string beginning with \"\\27Lua\": nil and a message");
    expect_seen_has(L, "probe.sandbox", "gc_collect", "error: ", "only \"count\"", "collectgarbage('collect') raises");
    expect_seen_has(L, "probe.sandbox", "gc_stop", "error: ", "only \"count\"", "collectgarbage('stop') raises");

    static const struct { const char *key, *name; } not_found[] = {
        { "require_io", "require('io'): not found" },
        { "require_os", "require('os'): not found" },
        { "require_debug", "require('debug'): not found" },
        { "require_dotdot", "require('../outside') (a file there): not found" },
        { "require_dotdot_module", "require('../handlers/routes') (a module of the tree): not found" },
        { "require_absolute", "require('/etc/passwd'): not found" },
        { "require_outside", "require('outside') (outside.lua beside lib/): not found" },
        { "require_outside_dir", "require('spare.mod') (spare/mod.lua beside lib/): not found" },
        { "require_asset", "require('data.some') (lib/data/some.json, an asset): not found" },
    };
    for (size_t i = 0; i < sizeof not_found / sizeof not_found[0]; i++)
        expect_seen_has(L, "probe.sandbox", not_found[i].key, "error: ", "not found in handlers/ or lib/",
                        not_found[i].name);
}

/* A real binary chunk, made by a plain state, handed to load in the
 * sandbox: refused whatever mode the caller asks for. */
static void test_binary_chunk(lua_State *L) {
    lua_State *plain = luaL_newstate();
    luaL_openlibs(plain);
    if (luaL_dostring(plain, "return string.dump(load(\"return 'a binary chunk ran'\"))") != LUA_OK) {
        check(0, "make a binary chunk", lua_tostring(plain, -1));
        lua_close(plain);
        return;
    }
    size_t len;
    const char *chunk = lua_tolstring(plain, -1, &len);
    static const char *modes[] = { NULL, "b", "bt" };
    for (int i = 0; i < 3; i++) {
        char err[512], name[96];
        snprintf(name, sizeof name, "load of a binary chunk (mode %s): nil and a message", modes[i] ? modes[i] : "none");
        if (luart_require(L, "probe.sandbox", err, sizeof err)) {
            check(0, name, err);
            continue;
        }
        lua_getfield(L, -1, "load_chunk");
        lua_pushlstring(L, chunk, len);
        if (modes[i]) lua_pushstring(L, modes[i]);
        else lua_pushnil(L);
        int rc = lua_pcall(L, 2, 1, 0);
        const char *got = lua_tostring(L, -1);
        check(rc == LUA_OK && got && strncmp(got, "nil ", 4) == 0 && strstr(got, "binary chunk"), name, got);
        lua_pop(L, 2);
    }
    lua_close(plain);
}

static void test_modules(lua_State *L) {
    expect_seen(L, "scope.reader", "seen", "nil", "a global set by one module is not seen by another");
    expect_seen(L, "scope.reader", "setter_sees", "set by scope.setter", "the module that set it sees it");
    expect_seen(L, "scope.reader", "tostring", "1", "a module replacing tostring replaces only its own");
    expect_seen(L, "scope.reader", "setter_tostring", "replaced", "its own replacement is the one it calls");

    expect_seen(L, "nest", "name", "nest from lib/nest/init.lua", "require('a') finds lib/a/init.lua");
    expect_seen(L, "nest.inner", "name", "nest.inner from lib/nest/inner.lua", "require('a.b') finds lib/a/b.lua");
    expect_seen_has(L, "probe.sandbox", "require_slash", "error: ", "not found",
                    "require('a/b') is not found (a second copy of a.b otherwise)");
    expect_seen(L, "nothing_twice", "same", "true",
                "a module whose value is a light userdata (cjson.null) is that value when required again");
    expect_seen(L, "nothing_twice", "err", "", "and no cycle is reported for it");

    expect_seen(L, "cycle.self", "ok", "false", "a module requiring itself: the require raises");
    expect_seen_has(L, "cycle.self", "err", "", "module 'cycle.self' requires itself while loading",
                    "it says the module requires itself");
    expect_seen(L, "cycle.a", "ok", "false", "a -> b -> a: the require raises");
    expect_seen_has(L, "cycle.a", "err", "", "module 'cycle.a' requires itself while loading",
                    "it says a requires itself");

    expect_seen(L, "flaky.again", "ok", "false", "a module that raises while loading: both requires raise");
    expect_seen_has(L, "flaky.again", "first", "lib/flaky/broken.lua:3: ", "no widgets yet",
                    "the first require raises the module's error, with its file and line");
    char first[512], second[512];
    seen(L, "flaky.again", "first", first, sizeof first);
    seen(L, "flaky.again", "second", second, sizeof second);
    check(strcmp(first, second) == 0 && !strstr(second, "requires itself"),
          "the second require raises the same error again, not a cycle", second);
    expect_seen(L, "flaky.broken", "loaded_on_try", "3", "each require ran the module anew until it loaded");
}

static void test_assets(lua_State *L) {
    expect_seen(L, "probe.sandbox", "asset_json", "{\"answer\": 42}\n", "asset('lib/data/some.json') is the file's text");
    expect_seen(L, "probe.sandbox", "asset_nope", "nil", "asset('nope') is nil");
    expect_seen(L, "probe.sandbox", "asset_nope_values", "1", "asset('nope') returns one value, nil");
    expect_seen(L, "probe.sandbox", "asset_outside", "nil", "asset('outside.lua') (beside lib/) is nil");
    expect_seen(L, "probe.sandbox", "asset_dotdot", "nil", "asset('lib/../outside.lua') is nil");
}

/* One edit that breaks the tree: file gets broken (NULL: removed), then
 * repaired (NULL: removed); the refusal names reason. */
typedef struct breakage {
    const char *what, *file, *broken, *repaired, *reason;
} breakage;

static void test_refused(sgw_worker *w, const breakage *b) {
    char err[1024], last[1024], name[256];
    uint64_t id = luart_generation_id(), failures = luart_reload_failures();
    lua_State *state = w->L;

    if (set_file(b->file, b->broken)) {
        check(0, b->what, "cannot edit the tree");
        return;
    }
    err[0] = 0;
    int rc = luart_reload(err, sizeof err);
    snprintf(name, sizeof name, "%s: luart_reload refuses it, saying why", b->what);
    check(rc == -1 && strstr(err, b->reason), name, err);
    luart_last_error_copy(last, sizeof last);
    snprintf(name, sizeof name, "%s: luart_last_error says why", b->what);
    check(strstr(last, b->reason) != NULL, name, last);
    snprintf(name, sizeof name, "%s: counted as one failed reload", b->what);
    check(luart_reload_failures() == failures + 1, name, NULL);
    snprintf(name, sizeof name, "%s: the generation stays", b->what);
    check(luart_generation_id() == id, name, NULL);
    snprintf(name, sizeof name, "%s: the worker keeps its state", b->what);
    check(luart_refresh(w, err, sizeof err) == 0 && w->L == state && w->gen->id == id, name, err);

    set_file(b->file, b->repaired);
    rc = luart_reload(err, sizeof err);
    snprintf(name, sizeof name, "%s, repaired: the reload is taken as a new generation", b->what);
    check(rc == 0 && luart_generation_id() > id, name, rc ? err : NULL);
    luart_last_error_copy(last, sizeof last);
    snprintf(name, sizeof name, "%s, repaired: luart_last_error is empty again", b->what);
    check(last[0] == 0 && luart_reload_failures() == failures + 1, name, last);
    snprintf(name, sizeof name, "%s, repaired: the worker takes the new generation", b->what);
    check(luart_refresh(w, err, sizeof err) == 0 && w->gen->id == luart_generation_id(), name, err);
}

static void test_reloads(sgw_worker *w) {
    /* A short load budget: the endless module is stopped after it. */
    char err[256];
    check(config_set("lua.load_budget_ms", "300", err, sizeof err) == 0, "lua.load_budget_ms set", err);
    static const breakage cases[] = {
        { "a syntax error in a lib file", "lib/typo.lua", "return { 1, 2\n", NULL, "lib/typo.lua:" },
        { "a route naming a handler that does not exist", "handlers/routes.lua",
          "return { { method = 'GET', path = '/ping', handler = 'ping', auth = false },\n"
          "         { method = 'GET', path = '/gone', handler = 'gone', auth = false } }\n",
          routes_lua, "handlers/routes.lua: route GET /gone names handler 'gone', which does not exist" },
        { "lib/dispatch.lua removed", "lib/dispatch.lua", NULL, dispatch_lua, "lib/dispatch.lua is missing" },
        { "a module raising while it loads", "lib/raises.lua", "error('cannot start: no config')\n", NULL,
          "lib/raises.lua:1: cannot start: no config" },
        { "a module requiring itself", "lib/ouroboros.lua", "return require('ouroboros')\n", NULL,
          "module 'ouroboros' requires itself while loading" },
        { "a module looping for ever while it loads (within lua.load_budget_ms)", "lib/spin.lua",
          "while true do end\n", NULL,
          "module 'spin' (or one it requires) did not finish loading within lua.load_budget_ms (300 ms)" },
        { "handlers/init.lua, which no require reaches", "handlers/init.lua", "return {}\n", NULL,
          "handlers/init.lua can never be loaded: require('handlers') does not look for it there" },
        { "lib/nest.lua beside lib/nest/init.lua", "lib/nest.lua", "return { name = 'nest from lib/nest.lua' }\n",
          NULL, "lib/nest/init.lua can never be loaded: require('nest') loads lib/nest.lua" },
        { "lib/handlers/x.lua, hidden by handlers/", "lib/handlers/ping.lua", "return {}\n", NULL,
          "lib/handlers/ping.lua can never be loaded: require('handlers.ping') loads handlers/ping.lua" },
        { "a file name with a dot", "lib/a.b.lua", "return {}\n", NULL,
          "lib/a.b.lua can never be loaded: require('a.b') does not look for it there" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_refused(w, &cases[i]);
}

/* The first math.random(0) a state with Lua's own seed would draw: Lua
 * seeds from the time in seconds and the state's address (lmathlib.c,
 * randseed), which math.randomseed reproduces. */
static lua_Integer lua_seeded_draw(lua_State *L, time_t t) {
    lua_State *plain = luaL_newstate();
    luaL_requiref(plain, LUA_MATHLIBNAME, luaopen_math, 1);
    lua_getfield(plain, -1, "randomseed");
    lua_pushinteger(plain, (lua_Integer)t);
    lua_pushinteger(plain, (lua_Integer)(uintptr_t)L);
    lua_call(plain, 2, 0);
    lua_getfield(plain, -1, "random");
    lua_pushinteger(plain, 0);
    lua_call(plain, 1, 1);
    lua_Integer draw = lua_tointeger(plain, -1);
    lua_close(plain);
    return draw;
}

static lua_Integer first_draw(lua_State *L) {
    char buf[64];
    return strtoll(seen(L, "probe.random", "first_draw", buf, sizeof buf), NULL, 10);
}

static void test_random_seed(void) {
    char err[512] = "";
    sgw_worker a = { .id = 1, .role = "http" }, b = { .id = 2, .role = "http" };
    time_t before = time(NULL);
    int ok = luart_refresh(&a, err, sizeof err) == 0 && luart_refresh(&b, err, sizeof err) == 0;
    time_t after = time(NULL);
    check(ok, "two workers get fresh states", err);
    if (ok) {
        lua_Integer da = first_draw(a.L), db = first_draw(b.L);
        check(da != db, "two fresh states draw different first numbers from math.random", NULL);
        int lua_own = 0;
        for (time_t t = before; t <= after; t++)
            lua_own = lua_own || lua_seeded_draw(a.L, t) == da || lua_seeded_draw(b.L, t) == db;
        check(!lua_own, "neither draws what Lua's own seed (the time and the state's address) gives", NULL);
    }
    luart_close_state(&a);
    luart_close_state(&b);
}

int main(void) {
    char err[512];
    if (config_load_file("config/sgw.conf", 1, err, sizeof err) != 0) {
        printf("config: %s\n", err);
        return 1;
    }
    log_set_level(LOG_ERROR);   /* the refused reloads the tests cause are logged as errors */
    snprintf(err, sizeof err, "cannot write the tree");
    int loaded = make_root() == 0 && luart_init(root, err, sizeof err) == 0;
    check(loaded, "a good tree loads (luart_init returns 0)", err);
    if (loaded) {
        sgw_worker w = { .id = 0, .role = "http" };
        test_good_tree(&w);
        if (w.L) {
            test_sandbox(w.L);
            test_binary_chunk(w.L);
            test_modules(w.L);
            test_assets(w.L);
            test_reloads(&w);
            test_random_seed();
            test_preload();
        }
        luart_close_state(&w);
    }
    luart_shutdown();
    config_free();
    lua_tree_remove(root);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

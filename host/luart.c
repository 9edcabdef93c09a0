/*
 * luart.c — the Lua runtime: generations of handlers/ and lib/, sandboxed
 * module loading and memory ceilings (time budgets: budget.c).
 *
 * A generation is a snapshot of every .lua file under handlers/ and lib/,
 * read once and checked by building a complete Lua state from it (every
 * module required, the routes table parsed). Only a generation that loads
 * whole replaces the current one, so a broken edit never reaches a worker.
 * Workers switch at request or job boundaries (luart_refresh); what runs
 * keeps its state until it ends, which is how in-flight requests finish on
 * the code they began with.
 */
#include "sgw.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


#define MAX_FILES      4096
#define MAX_FILE_BYTES (4u << 20)

static pthread_mutex_t gen_lock = PTHREAD_MUTEX_INITIALIZER;
static sgw_gen        *current;
static atomic_ullong   current_id;      /* current->id, readable without the lock */
static uint64_t        next_gen_id = 1;
static pthread_key_t   cached_key;
static pthread_once_t  cached_once = PTHREAD_ONCE_INIT;
static char            last_error[1024];
static atomic_ullong   reload_failures;
static char           *runtime_root;

/* ------------------------------------------------------------ memory */

/* Lua allocates and frees small blocks (tables, strings, closures) for every
 * request; a state keeps the blocks it freed in lists by size and takes
 * them back before asking malloc. A state runs on one thread at a time, so
 * the lists need no lock. The sanitizer build leaves every block to malloc,
 * so that it still sees each one. */
#define SMALL_STEP    16
#define SMALL_CLASSES 32                      /* blocks up to 512 bytes */

typedef struct free_block { struct free_block *next; } free_block;

typedef struct mem_account {
    size_t      used, limit;
    free_block *small[SMALL_CLASSES];
} mem_account;

#if defined(__SANITIZE_ADDRESS__)
#define SMALL_LISTS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SMALL_LISTS 0
#endif
#endif
#ifndef SMALL_LISTS
#define SMALL_LISTS 1
#endif

/* The list of blocks of n bytes (n > 0), or -1 when n is not small. */
static int small_class(size_t n) {
    return SMALL_LISTS && n <= SMALL_STEP * SMALL_CLASSES ? (int)((n - 1) / SMALL_STEP) : -1;
}

static void *block_get(mem_account *m, size_t n) {
    int c = small_class(n);
    if (c < 0) return malloc(n);
    free_block *b = m->small[c];
    if (b) {
        m->small[c] = b->next;
        return b;
    }
    return malloc((size_t)(c + 1) * SMALL_STEP);
}

static void block_put(mem_account *m, void *p, size_t n) {
    int c = small_class(n);
    if (c < 0) {
        free(p);
        return;
    }
    free_block *b = p;
    b->next = m->small[c];
    m->small[c] = b;
}

/* After lua_close: every block the state had is on a list. */
static void mem_account_free(mem_account *m) {
    for (int c = 0; c < SMALL_CLASSES; c++) {
        while (m->small[c]) {
            free_block *b = m->small[c];
            m->small[c] = b->next;
            free(b);
        }
    }
    free(m);
}

/* Refuses growth past the state's ceiling; Lua turns NULL into a memory
 * error that the protected call catches. */
static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    mem_account *m = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        if (ptr) block_put(m, ptr, old);
        m->used -= old;
        return NULL;
    }
    if (nsize > old && m->used - old + nsize > m->limit) return NULL;
    void *p;
    int oc = ptr ? small_class(old) : -1, nc = small_class(nsize);
    if (ptr && oc < 0 && nc < 0) {
        p = realloc(ptr, nsize);
    } else if (ptr && oc == nc) {
        p = ptr;                               /* the block already fits */
    } else {
        p = block_get(m, nsize);
        if (p && ptr) {
            memcpy(p, ptr, old < nsize ? old : nsize);
            block_put(m, ptr, old);
        }
    }
    if (p) m->used = m->used - old + nsize;
    return p;
}

int luart_traceback(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int luart_call(lua_State *L, int nargs, int nresults, double budget_ms) {
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, luart_traceback);
    lua_insert(L, base);
    budget_arm(L, budget_ms);
    budget_enter(L);
    int rc = lua_pcall(L, nargs, nresults, base);
    budget_leave();
    budget_disarm(L);
    lua_remove(L, base);
    return rc;
}

int luart_resume(lua_State *co, lua_State *from, int nargs, int *nres) {
    budget_enter(co);
    int rc = lua_resume(co, from, nargs, nres);
    budget_leave();
    if (rc != LUA_OK && rc != LUA_YIELD) {
        const char *msg = lua_tostring(co, -1);
        luaL_traceback(co, co, msg ? msg : "(error object is not a string)", 0);
        *nres = 1;
    }
    return rc;
}

/* ------------------------------------------------------------ sources */

static int src_cmp(const void *a, const void *b) {
    return strcmp(((const struct src_file *)a)->name, ((const struct src_file *)b)->name);
}

static const struct src_file *find_src(const sgw_gen *g, const char *name) {
    struct src_file key = { .name = (char *)name };
    return bsearch(&key, g->files, (size_t)g->nfiles, sizeof key, src_cmp);
}

static int read_file(const char *path, char **out, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) || st.st_size > (off_t)MAX_FILE_BYTES) {
        snprintf(err, errlen, "%s is larger than %u bytes", path, MAX_FILE_BYTES);
        fclose(f);
        return -1;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        fclose(f);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t n = fread(buf, 1, (size_t)st.st_size, f);
    fclose(f);
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

/* Lua modules, and the assets handlers serve or render (documents,
 * templates, styles) so that they reload with the code that uses them. */
static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

static int is_source_name(const char *name) {
    static const char *ok[] = { ".lua", ".json", ".html", ".css", ".js", ".svg", ".txt", NULL };
    for (int i = 0; ok[i]; i++)
        if (has_suffix(name, ok[i])) return 1;
    return 0;
}

/* Collects every source file below root/rel, names relative to root. */
static int collect(sgw_gen *g, const char *rel, int *cap, char *err, size_t errlen) {
    char dirpath[4096];
    snprintf(dirpath, sizeof dirpath, "%s/%s", g->root, rel);
    DIR *d = opendir(dirpath);
    if (!d) {
        snprintf(err, errlen, "cannot open %s: %s", dirpath, strerror(errno));
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char relname[1024], full[4096];
        snprintf(relname, sizeof relname, "%s/%s", rel, de->d_name);
        snprintf(full, sizeof full, "%s/%s", g->root, relname);
        struct stat st;
        if (stat(full, &st)) continue;
        if (S_ISDIR(st.st_mode)) {
            rc = collect(g, relname, cap, err, errlen);
            continue;
        }
        if (!is_source_name(de->d_name)) continue;
        if (g->nfiles >= MAX_FILES) {
            snprintf(err, errlen, "more than %d Lua files", MAX_FILES);
            rc = -1;
            break;
        }
        if (g->nfiles == *cap) {
            int ncap = *cap ? *cap * 2 : 64;
            struct src_file *nf = realloc(g->files, (size_t)ncap * sizeof *nf);
            if (!nf) { snprintf(err, errlen, "out of memory"); rc = -1; break; }
            g->files = nf;
            *cap = ncap;
        }
        struct src_file *sf = &g->files[g->nfiles];
        sf->name = strdup(relname);
        if (!sf->name) { snprintf(err, errlen, "out of memory"); rc = -1; break; }
        if (read_file(full, &sf->code, &sf->len, err, errlen)) {
            free(sf->name);
            rc = -1;
            break;
        }
        g->nfiles++;
    }
    closedir(d);
    return rc;
}

static void gen_free(sgw_gen *g) {
    if (!g) return;
    for (int i = 0; i < g->nfiles; i++) {
        free(g->files[i].name);
        free(g->files[i].code);
    }
    free(g->files);
    routes_free(&g->routes);
    free(g->root);
    free(g);
}

void luart_release(sgw_gen *g) {
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) gen_free(g);
}

sgw_gen *luart_current(void) {
    pthread_mutex_lock(&gen_lock);
    sgw_gen *g = current;
    if (g) atomic_fetch_add(&g->refs, 1);
    pthread_mutex_unlock(&gen_lock);
    return g;
}

uint64_t luart_generation_id(void) { return atomic_load(&current_id); }

static void release_cached(void *g) { luart_release(g); }
static void make_cached_key(void) { pthread_key_create(&cached_key, release_cached); }

/* The hot path asks for the generation on every request: each thread keeps
 * a reference and only takes the lock when the generation changed. */
sgw_gen *luart_current_cached(void) {
    pthread_once(&cached_once, make_cached_key);
    sgw_gen *g = pthread_getspecific(cached_key);
    if (g && g->id == atomic_load(&current_id)) return g;
    sgw_gen *fresh = luart_current();
    pthread_setspecific(cached_key, fresh);
    luart_release(g);
    return fresh;
}

uint64_t luart_reload_failures(void) { return atomic_load(&reload_failures); }

const char *luart_last_error(void) { return last_error; }

void luart_last_error_copy(char *buf, size_t n) {
    pthread_mutex_lock(&gen_lock);
    snprintf(buf, n, "%s", last_error);
    pthread_mutex_unlock(&gen_lock);
}

/* ------------------------------------------------------------ modules */

#define LOADED_KEY "sgw.loaded"
/* What LOADED_KEY holds for a module while it loads: its own address, so
 * that no module's value (cjson.null is a light userdata too) passes for it. */
static const char loading_sentinel;
#define GEN_KEY    "sgw.gen"

/* Maps a module name to its file: "handlers.api.x" -> handlers/api/x.lua,
 * "a.b" -> lib/a/b.lua or lib/a/b/init.lua. */
static const struct src_file *module_file(const sgw_gen *g, const char *name) {
    /* Dots only: "a/b" would find lib/a/b.lua as a second module beside a.b. */
    if (strchr(name, '/')) return NULL;
    char path[512];
    const char *prefix = strncmp(name, "handlers.", 9) == 0 ? "" : "lib/";
    size_t n = (size_t)snprintf(path, sizeof path, "%s%s", prefix, name);
    if (n >= sizeof path - 10) return NULL;
    for (char *p = path + strlen(prefix); *p; p++)
        if (*p == '.') *p = '/';
    size_t base = strlen(path);
    memcpy(path + base, ".lua", 5);
    const struct src_file *f = find_src(g, path);
    if (f) return f;
    memcpy(path + base, "/init.lua", 10);
    return find_src(g, path);
}

static int l_require(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, LOADED_KEY);
    int loaded = lua_gettop(L);
    lua_getfield(L, loaded, name);
    if (!lua_isnil(L, -1)) {
        if (lua_touserdata(L, -1) == &loading_sentinel && lua_islightuserdata(L, -1))
            return luaL_error(L, "module '%s' requires itself while loading", name);
        return 1;
    }
    lua_pop(L, 1);

    /* The one C module the host allows, linked in: opened directly, so
     * no search path (./?.lua, LUA_PATH, LUA_CPATH) is ever consulted. */
    lua_CFunction open_c = strcmp(name, "cjson") == 0 ? luaopen_cjson
                         : strcmp(name, "cjson.safe") == 0 ? luaopen_cjson_safe : NULL;
    if (open_c) {
        luaL_requiref(L, name, open_c, 0);
        lua_pushvalue(L, -1);
        lua_setfield(L, loaded, name);
        return 1;
    }

    lua_getfield(L, LUA_REGISTRYINDEX, GEN_KEY);
    const sgw_gen *g = lua_touserdata(L, -1);
    lua_pop(L, 1);
    const struct src_file *f = g ? module_file(g, name) : NULL;
    if (!f) return luaL_error(L, "module '%s' not found in handlers/ or lib/", name);

    char chunkname[600];
    snprintf(chunkname, sizeof chunkname, "@%s", f->name);
    if (luaL_loadbufferx(L, f->code, f->len, chunkname, "t") != LUA_OK) return lua_error(L);

    /* The module's own environment: its globals stay its own; reads fall
     * through to the shared allow-listed globals. */
    lua_newtable(L);
    lua_newtable(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
    if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);

    lua_pushlightuserdata(L, (void *)&loading_sentinel);
    lua_setfield(L, loaded, name);
    lua_pushstring(L, name);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        /* Forget the sentinel, so a later require reports the real error. */
        lua_pushnil(L);
        lua_setfield(L, loaded, name);
        return lua_error(L);
    }
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushboolean(L, 1);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, loaded, name);
    return 1;
}

/* traceback(msg): the stack at the point of an error, for logs. */
static int l_traceback(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    luaL_traceback(L, L, msg ? msg : "", 1);
    return 1;
}

/* asset("lib/openapi.json") returns a file of the generation, or nil. */
static int l_asset(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, GEN_KEY);
    const sgw_gen *g = lua_touserdata(L, -1);
    lua_pop(L, 1);
    const struct src_file *f = g ? find_src(g, name) : NULL;
    if (!f) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushlstring(L, f->code, f->len);
    return 1;
}

/* load() for text chunks only; binary chunks could bypass the sandbox. */
static int l_load_text(lua_State *L) {
    size_t len;
    const char *code = luaL_checklstring(L, 1, &len);
    const char *name = luaL_optstring(L, 2, "=(load)");
    int env = !lua_isnone(L, 4) ? 4 : 0;
    if (luaL_loadbufferx(L, code, len, name, "t") != LUA_OK) {
        lua_pushnil(L);
        lua_insert(L, -2);
        return 2;
    }
    if (env) {
        lua_pushvalue(L, env);
        if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
    }
    return 1;
}

static int l_collectgarbage(lua_State *L) {
    const char *opt = luaL_optstring(L, 1, "count");
    if (strcmp(opt, "count") != 0) return luaL_error(L, "collectgarbage: only \"count\" is allowed");
    lua_pushnumber(L, (lua_Number)lua_gc(L, LUA_GCCOUNT, 0) + (lua_Number)lua_gc(L, LUA_GCCOUNTB, 0) / 1024.0);
    return 1;
}

int luart_require(lua_State *L, const char *name, char *err, size_t errlen) {
    lua_pushcfunction(L, luart_traceback);
    int h = lua_gettop(L);
    lua_pushcfunction(L, l_require);
    lua_pushstring(L, name);
    int rc = lua_pcall(L, 1, 1, h);
    if (rc != LUA_OK) {
        snprintf(err, errlen, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
        lua_pop(L, 2);
        return -1;
    }
    lua_remove(L, h);
    return 0;
}

/* Builds the allow-listed global table that every module reads through. */
static void build_sandbox(lua_State *L) {
    static const char *base[] = { "assert", "error", "ipairs", "next", "pairs", "pcall", "xpcall",
                                  "rawequal", "rawget", "rawlen", "rawset", "select", "setmetatable",
                                  "getmetatable", "tonumber", "tostring", "type", "_VERSION",
                                  "string", "table", "math", "utf8", "coroutine",
                                  "db", "redis", "http", "crypto", "jsonc", "log", "clock", "config", "metrics",
                                  "shared", "sched", NULL };
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
    int real = lua_gettop(L);
    lua_newtable(L);
    int sb = lua_gettop(L);
    for (int i = 0; base[i]; i++) {
        lua_getfield(L, real, base[i]);
        lua_setfield(L, sb, base[i]);
    }
    /* A handler's own coroutines run within its time budget. */
    lua_getfield(L, sb, "coroutine");
    budget_coroutines(L);
    lua_pop(L, 1);
    /* string.dump would hand out binary chunks. */
    lua_getfield(L, sb, "string");
    lua_pushnil(L);
    lua_setfield(L, -2, "dump");
    lua_pop(L, 1);
    /* os: time and formatting only. */
    lua_newtable(L);
    lua_getfield(L, real, "os");
    static const char *os_ok[] = { "time", "clock", "date", "difftime", NULL };
    for (int i = 0; os_ok[i]; i++) {
        lua_getfield(L, -1, os_ok[i]);
        lua_setfield(L, -3, os_ok[i]);
    }
    lua_pop(L, 1);
    lua_setfield(L, sb, "os");
    static const luaL_Reg own[] = {
        { "require", l_require }, { "load", l_load_text }, { "asset", l_asset },
        { "traceback", l_traceback }, { "collectgarbage", l_collectgarbage }, { NULL, NULL }
    };
    lua_pushvalue(L, sb);
    luaL_setfuncs(L, own, 0);
    lua_pop(L, 1);

    lua_pushvalue(L, sb);
    lua_rawseti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
    lua_pop(L, 2);
}

static void open_libs(lua_State *L) {
    static const luaL_Reg libs[] = {
        /* No package library: modules come from handlers/ and lib/ (l_require)
         * and cjson is linked in, so nothing reads a search path. */
        { LUA_GNAME, luaopen_base }, { LUA_COLIBNAME, luaopen_coroutine },
        { LUA_TABLIBNAME, luaopen_table }, { LUA_OSLIBNAME, luaopen_os }, { LUA_STRLIBNAME, luaopen_string },
        { LUA_MATHLIBNAME, luaopen_math }, { LUA_UTF8LIBNAME, luaopen_utf8 }, { NULL, NULL }
    };
    for (const luaL_Reg *l = libs; l->func; l++) {
        luaL_requiref(L, l->name, l->func, 1);
        lua_pop(L, 1);
    }
    /* Lua seeds math.random from the time in seconds and the state's
     * address; instances started in the same second with the same heap
     * layout (sanitizer allocators have none of ASLR's randomness) would
     * draw the same numbers. Seed every state from the CSPRNG instead. */
    lua_Integer seed[2];
    if (crypto_random(seed, sizeof seed) != 0) return;   /* Lua's own seed stays */
    if (lua_getglobal(L, LUA_MATHLIBNAME) == LUA_TTABLE) {
        lua_getfield(L, -1, "randomseed");
        lua_pushinteger(L, seed[0]);
        lua_pushinteger(L, seed[1]);
        if (lua_pcall(L, 2, 0, 0) != LUA_OK) lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* Requires a module as loading a generation does: within lua.load_budget_ms,
 * so that a module looping at load time fails the load instead of holding
 * the reload (or the start) for ever. Its own budget, not the requests': a
 * reload compiles every module while the workers serve, and on a busy
 * machine that may take longer than a request is allowed to. */
static int require_within_budget(lua_State *L, const char *name, char *err, size_t errlen) {
    double budget_ms = config_num("lua.load_budget_ms");
    uint64_t started = clock_mono_ms();
    budget_arm(L, budget_ms);
    budget_enter(L);
    int rc = luart_require(L, name, err, errlen);
    budget_leave();
    budget_disarm(L);
    if (rc && budget_ms > 0 && (double)(clock_mono_ms() - started) >= budget_ms && strstr(err, "exceeded its time budget"))
        snprintf(err, errlen, "module '%s' (or one it requires) did not finish loading within lua.load_budget_ms (%.0f ms)",
                 name, budget_ms);
    return rc;
}

/* Creates a state for generation g with the host API of worker w.
 * Requires every module so that a generation is known to load whole. */
static lua_State *state_new(sgw_gen *g, sgw_worker *w, int preload, char *err, size_t errlen) {
    mem_account *m = calloc(1, sizeof *m);
    if (!m) { snprintf(err, errlen, "out of memory"); return NULL; }
    m->limit = (size_t)config_int("lua.memory_limit_mb") << 20;
    if (m->limit == 0) m->limit = (size_t)128 << 20;
    lua_State *L = lua_newstate(counting_alloc, m);
    if (!L) { mem_account_free(m); snprintf(err, errlen, "cannot create a Lua state"); return NULL; }
    budget_disarm(L);
    /* Requests leave short-lived tables behind over a heap of long-lived
     * modules: the generational collector spares walking the modules each
     * cycle (measured: a few percent of throughput on small requests).
     * Lua's own minor multiplier (20 %) is kept: 100 % made a listing cost
     * a third more CPU (a young generation larger than the caches), 5 % no
     * less (README, the listing's figures). */
    lua_gc(L, LUA_GCGEN, 0, 0);
    open_libs(L);
    lapi_config_open(L);
    lapi_log_open(L);
    lapi_clock_open(L);
    lapi_crypto_open(L);
    lapi_json_open(L);
    lapi_metrics_open(L);
    lapi_shared_open(L);
    lapi_db_open(L, w);
    lapi_redis_open(L, w);
    lapi_invalidations_open(L);
    lapi_http_open(L, w);
    lapi_sched_open(L);
    build_sandbox(L);
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, LOADED_KEY);
    lua_pushlightuserdata(L, g);
    lua_setfield(L, LUA_REGISTRYINDEX, GEN_KEY);

    if (preload) {
        for (int i = 0; i < g->nfiles; i++) {
            /* File name -> module name: lib/a/b.lua -> a.b, handlers/x.lua -> handlers.x */
            char name[600];
            const char *fn = g->files[i].name;
            if (!has_suffix(fn, ".lua")) continue;
            if (strncmp(fn, "lib/", 4) == 0) fn += 4;
            snprintf(name, sizeof name, "%s", fn);
            size_t nl = strlen(name);
            name[nl - 4] = 0;
            nl -= 4;
            if (nl > 5 && strcmp(name + nl - 5, "/init") == 0) name[nl - 5] = 0;
            for (char *p = name; *p; p++)
                if (*p == '/') *p = '.';
            /* A file no require can reach would go unchecked and unused. */
            const struct src_file *reached = module_file(g, name);
            if (reached != &g->files[i]) {
                if (reached)
                    snprintf(err, errlen, "%s can never be loaded: require('%s') loads %s", g->files[i].name, name,
                             reached->name);
                else
                    snprintf(err, errlen, "%s can never be loaded: require('%s') does not look for it there",
                             g->files[i].name, name);
                lua_close(L);
                mem_account_free(m);
                return NULL;
            }
            if (require_within_budget(L, name, err, errlen)) {
                lua_close(L);
                mem_account_free(m);
                return NULL;
            }
            lua_pop(L, 1);
        }
    }
    return L;
}

static void state_close(lua_State *L) {
    if (!L) return;
    void *ud;
    lua_getallocf(L, &ud);
    lua_close(L);
    mem_account_free(ud);
}

void luart_close_state(sgw_worker *w) {
    state_close(w->L);
    w->L = NULL;
    luart_release(w->gen);
    w->gen = NULL;
}

int luart_refresh(sgw_worker *w, char *err, size_t errlen) {
    if (w->L && w->gen && w->gen->id == atomic_load(&current_id)) return 0;
    sgw_gen *g = luart_current();
    if (!g) {
        snprintf(err, errlen, "no generation loaded");
        return -1;
    }
    if (w->L && w->gen == g) {
        luart_release(g);
        return 0;
    }
    /* Serving states load every module up front, so that no request pays for
     * a first require; an operator command runs once and loads only what it
     * requires (the generation's check already loaded every module). */
    int preload = strcmp(w->role ? w->role : "", "cli") != 0;
    lua_State *L = state_new(g, w, preload, err, errlen);
    if (!L) {
        luart_release(g);
        return -1;
    }
    luart_close_state(w);
    w->L = L;
    w->gen = g;
    return 0;
}

/* Reads and checks a generation; the routes table comes from the same
 * state that proved every module loads. */
static sgw_gen *gen_build(const char *root, char *err, size_t errlen) {
    sgw_gen *g = calloc(1, sizeof *g);
    if (!g) { snprintf(err, errlen, "out of memory"); return NULL; }
    atomic_init(&g->refs, 1);
    g->root = strdup(root);
    int cap = 0;
    if (!g->root || collect(g, "lib", &cap, err, errlen) || collect(g, "handlers", &cap, err, errlen)) {
        gen_free(g);
        return NULL;
    }
    qsort(g->files, (size_t)g->nfiles, sizeof *g->files, src_cmp);

    sgw_worker check = { .id = -1, .role = "check" };
    lua_State *L = state_new(g, &check, 1, err, errlen);
    if (!L) {
        gen_free(g);
        return NULL;
    }
    int rc = -1;
    if (require_within_budget(L, "handlers.routes", err, errlen) == 0) {
        rc = routes_from_lua(L, &g->routes, err, errlen);
        for (int i = 0; rc == 0 && i < g->routes.n; i++) {
            char mod[600];
            snprintf(mod, sizeof mod, "handlers.%s", g->routes.v[i].handler);
            for (char *p = mod; *p; p++)
                if (*p == '/') *p = '.';
            if (!module_file(g, mod)) {
                snprintf(err, errlen, "handlers/routes.lua: route %s %s names handler '%s', which does not exist",
                         g->routes.v[i].method, g->routes.v[i].pattern, g->routes.v[i].handler);
                rc = -1;
            }
        }
    }
    if (rc == 0 && !module_file(g, "dispatch")) {
        snprintf(err, errlen, "lib/dispatch.lua is missing");
        rc = -1;
    }
    state_close(L);
    if (rc) {
        gen_free(g);
        return NULL;
    }
    return g;
}

int luart_init(const char *root, char *err, size_t errlen) {
    if (budget_start()) { snprintf(err, errlen, "cannot start the budget watchdog: %s", strerror(errno)); return -1; }
    runtime_root = strdup(root);
    if (!runtime_root) { snprintf(err, errlen, "out of memory"); return -1; }
    sgw_gen *g = gen_build(root, err, errlen);
    if (!g) {
        free(runtime_root);
        runtime_root = NULL;
        budget_stop();
        return -1;
    }
    pthread_mutex_lock(&gen_lock);
    g->id = next_gen_id++;
    current = g;
    atomic_store(&current_id, g->id);
    last_error[0] = 0;
    pthread_mutex_unlock(&gen_lock);
    return 0;
}

int luart_reload(char *err, size_t errlen) {
    static pthread_mutex_t reload_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&reload_lock);
    /* The service manager hears of every reload, SIGHUP's or /reload's; the
     * lock keeps each RELOADING=1 paired with its READY=1. */
    notify_reloading();
    sgw_gen *g = gen_build(runtime_root, err, errlen);
    pthread_mutex_lock(&gen_lock);
    if (!g) {
        snprintf(last_error, sizeof last_error, "%s", err);
        atomic_fetch_add(&reload_failures, 1);
        pthread_mutex_unlock(&gen_lock);
        /* Still serving, with the previous handlers. */
        notify_send("READY=1\nSTATUS=reload refused; serving the previous handlers");
        pthread_mutex_unlock(&reload_lock);
        log_msg(LOG_ERROR, "reload_refused", "%s", err);
        return -1;
    }
    g->id = next_gen_id++;
    sgw_gen *old = current;
    current = g;
    atomic_store(&current_id, g->id);
    last_error[0] = 0;
    uint64_t id = g->id;
    pthread_mutex_unlock(&gen_lock);
    notify_send("READY=1\nSTATUS=serving, handlers generation %llu", (unsigned long long)id);
    pthread_mutex_unlock(&reload_lock);
    luart_release(old);
    log_msg(LOG_INFO, "reloaded", "generation %llu loaded", (unsigned long long)id);
    return 0;
}

void luart_shutdown(void) {
    pthread_mutex_lock(&gen_lock);
    sgw_gen *g = current;
    current = NULL;
    atomic_store(&current_id, 0);
    pthread_mutex_unlock(&gen_lock);
    luart_release(g);
    /* The calling thread's cached reference, if it has one. */
    pthread_once(&cached_once, make_cached_key);
    luart_release(pthread_getspecific(cached_key));
    pthread_setspecific(cached_key, NULL);
    free(runtime_root);
    runtime_root = NULL;
    budget_stop();
}

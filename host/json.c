/*
 * json.c — jsonc.encode(value, shape, empty): lib/json.lua's ordered JSON
 * encoder in C, for speed; and rows of a database result written as JSON
 * through a row view (json_push_rows, for db results' :json), which encode
 * then writes as they are. The rules stay in lib/json.lua and
 * lib/json_shapes.lua; this writes, byte for byte, what the Lua encoder there
 * writes, and refuses what it refuses with the same messages:
 *
 * - an object's keys in the order of the shape's `keys`, then the keys the
 *   shape does not name (`known`), sorted as Lua's `<` sorts them, `id` first;
 *   `props`, `items` and `extra` give the shapes of the values below, and of
 *   `variants` the one naming most of the object's keys is used;
 * - a table of positive integer keys only is an array (refused when sparse);
 * - the string `empty` stands for an empty array and is written `[]`;
 * - strings escaped as lua-cjson 2.1 escapes them, but for `/`;
 * - numbers as cjson spells them (%.14g), integers below 1e14 in magnitude
 *   as integers; a number key is written as that spelling.
 *
 * Tables are read raw (no metamethods run), as cjson reads them. The output
 * grows in userdata the Lua state owns, so a raise half-way frees everything
 * with the garbage and the state's memory ceiling applies.
 *
 * A shape is read once, the first time an object is written with it, and
 * what the walk needs is kept beside it (see "compiled shapes"): shapes do
 * not change once made (lib/json.lua's shape()), and reading one anew for
 * each object of a page cost more than writing the object.
 */
#include "sgw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 1000 };

/* Stack slots of a call: the arguments, then the output and the key arena
 * (userdata, replaced as they grow). */
enum { ARG_VALUE = 1, ARG_SHAPE, ARG_EMPTY, SLOT_OUT, SLOT_KEYS };

/* Upvalues of encode: the shape's field names, the compiled shapes (a table
 * with weak keys: shape -> compiled), then the state's scratch blocks for the
 * output and the key arena. */
enum { UP_KEYS = 1, UP_KNOWN, UP_PROPS, UP_ITEMS, UP_EXTRA, UP_VARIANTS, UP_COMPILED, UP_SCRATCH_OUT, UP_SCRATCH_KEYS };

/* Sizes of the scratch blocks: most answers fit, so encode allocates only
 * the string it returns. Encode calls no Lua code and never yields, so one
 * call at a time uses them; a larger answer grows into new blocks as before. */
enum { SCRATCH_OUT = 4096, SCRATCH_KEYS = 32 };
static const char *const shape_fields[] = { "keys", "known", "props", "items", "extra", "variants" };

/* A key the shape does not name: its text (a string key's bytes, anchored by
 * the table being written, or a number key's spelling) and, for a number, the
 * key itself to look its value up. */
typedef struct {
    const char *str;
    size_t len;
    int is_num, is_int;
    lua_Integer i;
    lua_Number d;
    size_t seq;   /* order met: the last number key of a spelling wins, as in Lua */
    char num[32];
} xkey;

typedef struct {
    lua_State *L;
    int slot;     /* the stack slot of the output's userdata */
    char *out;
    size_t n, cap;
    xkey *keys;
    size_t nkeys, kcap;
    const char *empty;
    size_t empty_len;
} enc;

static void encode_value(enc *e, int idx, int shape, int depth);

static void fail(lua_State *L, const char *msg) {
    lua_pushstring(L, msg);
    lua_error(L);
}

/* ------------------------------------------------------------------ output */

/* A new block twice as large (at least), as userdata so the state owns it. */
static void *grow(lua_State *L, int slot, void *old, size_t used, size_t *cap, size_t need) {
    size_t c = *cap ? *cap : 256;
    while (c < need) {
        if (c > ((size_t)-1) / 2) fail(L, "not enough memory");
        c *= 2;
    }
    void *p = lua_newuserdatauv(L, c, 0);
    if (used) memcpy(p, old, used);
    lua_replace(L, slot);
    *cap = c;
    return p;
}

static inline void reserve(enc *e, size_t more) {
    if (e->cap - e->n < more) {
        if (more > ((size_t)-1) - e->n) fail(e->L, "not enough memory");
        e->out = grow(e->L, e->slot, e->out, e->n, &e->cap, e->n + more);
    }
}

static inline void put(enc *e, const char *s, size_t len) {
    if (!len) return;
    reserve(e, len);
    memcpy(e->out + e->n, s, len);
    e->n += len;
}

static inline void put_char(enc *e, char c) {
    reserve(e, 1);
    e->out[e->n++] = c;
}

/* Bytes cjson 2.1 escapes: control characters, `"`, `\` and DEL (and `/`,
 * which this encoder leaves alone). Bytes of 0x80 and above, valid UTF-8 or
 * not, go through as they are, as in cjson. */
static const unsigned char needs_escape[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    ['"'] = 1, ['\\'] = 1, [0x7f] = 1,
};

static void put_string(enc *e, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    reserve(e, len + 2);
    e->out[e->n++] = '"';
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!needs_escape[c]) continue;
        put(e, s + start, i - start);
        start = i + 1;
        char esc[6] = { '\\', 0 };
        size_t n = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            esc[1] = 'u', esc[2] = '0', esc[3] = '0', esc[4] = hex[c >> 4], esc[5] = hex[c & 15];
            n = 6;
        }
        put(e, esc, n);
    }
    put(e, s + start, len - start);
    put_char(e, '"');
}

static size_t integer_text(lua_State *L, lua_Integer v, char *buf);

/* cjson's spelling of a float into buf (32 bytes): %.14g. Infinities and
 * NaN are refused with cjson's message. */
static size_t float_text(lua_State *L, lua_Number d, char *buf) {
    if (isinf(d) || isnan(d)) fail(L, "Cannot serialise number: must not be NaN or Inf");
    /* A whole number below 1e14 in magnitude (cjson decodes every JSON
     * number as a float) is spelt by %.14g as the integer it is, without
     * snprintf's cost; -0 keeps its sign there. */
    if (d > -1e14 && d < 1e14 && d == (lua_Number)(lua_Integer)d && !(d == 0 && signbit(d)))
        return integer_text(L, (lua_Integer)d, buf);
    return (size_t)snprintf(buf, 32, "%.14g", (double)d);
}

/* cjson's spelling of an integer: in full below 1e14 in magnitude, else as
 * the float it is. */
static size_t integer_text(lua_State *L, lua_Integer v, char *buf) {
    if (v <= -100000000000000 || v >= 100000000000000) return float_text(L, (lua_Number)v, buf);
    char tmp[24];
    size_t n = 0;
    lua_Unsigned u = v < 0 ? 0u - (lua_Unsigned)v : (lua_Unsigned)v;
    do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
    size_t len = 0;
    if (v < 0) buf[len++] = '-';
    while (n) buf[len++] = tmp[--n];
    buf[len] = 0;
    return len;
}

/* cjson's spelling of the number at idx into buf (32 bytes). */
static size_t number_text(lua_State *L, int idx, char *buf) {
    if (lua_isinteger(L, idx)) return integer_text(L, lua_tointeger(L, idx), buf);
    return float_text(L, lua_tonumber(L, idx), buf);
}

/* ------------------------------------------------------------------ shapes */

/* Pushes shape[field] and returns its index when it is a table; otherwise
 * pushes nothing and returns 0. */
static int field(lua_State *L, int shape, int up) {
    if (!shape) return 0;
    lua_pushvalue(L, lua_upvalueindex(up));
    if (lua_rawget(L, shape) == LUA_TTABLE) return lua_gettop(L);
    lua_pop(L, 1);
    return 0;
}

/* Pushes the variant that names most of t's keys (the first of equals; nil
 * when there is none) and returns its index, or 0 when it is not a table. */
static int pick_variant(lua_State *L, int t, int variants) {
    lua_rawgeti(L, variants, 1);
    int best = lua_gettop(L);
    long long best_n = -1;
    for (lua_Integer i = 1; lua_rawgeti(L, variants, i) != LUA_TNIL; i++) {
        int v = lua_gettop(L);
        int known = lua_type(L, v) == LUA_TTABLE ? field(L, v, UP_KNOWN) : 0;
        long long n = 0;
        if (known) {
            lua_pushnil(L);
            while (lua_next(L, t)) {
                lua_pop(L, 1);
                lua_pushvalue(L, -1);
                if (lua_rawget(L, known) != LUA_TNIL && lua_toboolean(L, -1)) n++;
                lua_pop(L, 1);
            }
        }
        if (n > best_n) {
            lua_pushvalue(L, v);
            lua_replace(L, best);
            best_n = n;
        }
        lua_settop(L, best);
    }
    lua_pop(L, 1);   /* the nil that ended the list */
    return lua_type(L, best) == LUA_TTABLE ? best : 0;
}

/* --------------------------------------------------------- compiled shapes
 *
 * What writing an object with a shape needs, read from the shape's table
 * once: each key's text as written (`"key":`), whether the key has a shape
 * of its own, and whether the shape has known, extra and variants. The Lua
 * values stay in the compiled shape's user value, a sequence: the keys
 * (1..nkeys), their shapes or false (nkeys + 1..2 nkeys), then the slots
 * below; the texts are one Lua string there too. */
enum { CS_KNOWN = 1, CS_EXTRA, CS_VARIANTS, CS_TEXTS };

typedef struct {
    uint32_t off, len;   /* the key's text in texts */
    int sub;             /* it has a shape of its own */
} ckey;

typedef struct {
    lua_Integer nkeys;       /* the keys before the first that is not a string */
    int has_keys, bad_key;   /* a keys list; a key that is not a string ends it */
    int known, extra, variants;
    const char *texts;       /* anchored in the user value */
    ckey key[];
} cshape;

/* Pushes the value of a compiled shape's slot (CS_*) and returns its index. */
static int cs_get(lua_State *L, int uv, const cshape *cs, lua_Integer slot) {
    lua_rawgeti(L, uv, 2 * cs->nkeys + slot);
    return lua_gettop(L);
}

/* Stores shape[field] at t[at] when it is a table; says whether it was. */
static int keep(lua_State *L, int shape, int up, int t, lua_Integer at) {
    if (!field(L, shape, up)) return 0;
    lua_rawseti(L, t, at);
    return 1;
}

/* Reads shape (a table) into a compiled shape, remembers it, and leaves it
 * and its user value on the stack; *uv is the user value's index. */
static cshape *compile(enc *e, int shape, int *uv) {
    lua_State *L = e->L;
    int keys = field(L, shape, UP_KEYS);
    lua_Integer n = 0, listed = keys ? (lua_Integer)lua_rawlen(L, keys) : 0;
    while (n < listed && lua_rawgeti(L, keys, n + 1) == LUA_TSTRING) {
        lua_pop(L, 1);
        n++;
    }
    int bad_key = n < listed;
    if (bad_key) lua_pop(L, 1);
    if ((size_t)n > (((size_t)-1) - sizeof(cshape)) / sizeof(ckey)) fail(L, "not enough memory");
    cshape *cs = lua_newuserdatauv(L, sizeof(cshape) + (size_t)n * sizeof(ckey), 1);
    int ud = lua_gettop(L);
    memset(cs, 0, sizeof *cs);
    cs->nkeys = n;
    cs->has_keys = keys != 0;
    cs->bad_key = bad_key;
    lua_createtable(L, (int)(2 * n + CS_TEXTS), 0);
    int t = lua_gettop(L);
    int props = field(L, shape, UP_PROPS);
    lua_pushnil(L);
    enc texts = { .L = L, .slot = lua_gettop(L) };
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, keys, i);
        size_t len;
        const char *s = lua_tolstring(L, -1, &len);
        ckey *k = &cs->key[i - 1];
        k->off = (uint32_t)texts.n;
        put_string(&texts, s, len);
        put_char(&texts, ':');
        if (texts.n > UINT32_MAX) fail(L, "not enough memory");
        k->len = (uint32_t)(texts.n - k->off);
        k->sub = 0;
        if (props) {
            lua_pushvalue(L, -1);
            k->sub = lua_rawget(L, props) == LUA_TTABLE;
            if (k->sub) lua_rawseti(L, t, n + i);
            else lua_pop(L, 1);
        }
        lua_rawseti(L, t, i);
    }
    lua_pushlstring(L, texts.n ? texts.out : "", texts.n);
    cs->texts = lua_tostring(L, -1);
    lua_rawseti(L, t, 2 * n + CS_TEXTS);
    cs->known = keep(L, shape, UP_KNOWN, t, 2 * n + CS_KNOWN);
    cs->extra = keep(L, shape, UP_EXTRA, t, 2 * n + CS_EXTRA);
    cs->variants = keep(L, shape, UP_VARIANTS, t, 2 * n + CS_VARIANTS);
    lua_settop(L, t);
    lua_pushvalue(L, t);
    lua_setiuservalue(L, ud, 1);
    lua_pushvalue(L, shape);
    lua_pushvalue(L, ud);
    lua_rawset(L, lua_upvalueindex(UP_COMPILED));
    *uv = t;
    return cs;
}

/* The compiled shape of shape (made the first time), its user value pushed
 * at *uv. It lives as long as shape, which the caller holds. */
static cshape *compiled(enc *e, int shape, int *uv) {
    lua_State *L = e->L;
    lua_pushvalue(L, shape);
    if (lua_rawget(L, lua_upvalueindex(UP_COMPILED)) != LUA_TUSERDATA) {
        lua_pop(L, 1);
        return compile(e, shape, uv);
    }
    cshape *cs = lua_touserdata(L, -1);
    lua_getiuservalue(L, -1, 1);
    *uv = lua_gettop(L);
    return cs;
}

/* ------------------------------------------------------------------ objects */

static const char *key_name(const xkey *k) { return k->is_num ? k->num : k->str; }

/* Lua's `<` on strings in the C locale (bytes, then length), `id` first. */
static int key_order(const void *pa, const void *pb) {
    const xkey *a = pa, *b = pb;
    const char *as = key_name(a), *bs = key_name(b);
    int a_id = a->len == 2 && as[0] == 'i' && as[1] == 'd';
    int b_id = b->len == 2 && bs[0] == 'i' && bs[1] == 'd';
    if (a_id || b_id) return b_id - a_id;
    int c = memcmp(as, bs, a->len < b->len ? a->len : b->len);
    if (c) return c;
    return (a->len > b->len) - (a->len < b->len);
}

static int same_name(const xkey *a, const xkey *b) {
    return a->len == b->len && memcmp(key_name(a), key_name(b), a->len) == 0;
}

static xkey *new_key(enc *e) {
    if (e->nkeys == e->kcap) {
        size_t cap = e->kcap * sizeof(xkey);
        if (e->nkeys > ((size_t)-1) / sizeof(xkey) - 1) fail(e->L, "not enough memory");
        e->keys = grow(e->L, SLOT_KEYS, e->keys, e->nkeys * sizeof(xkey), &cap, (e->nkeys + 1) * sizeof(xkey));
        e->kcap = cap / sizeof(xkey);
    }
    return &e->keys[e->nkeys++];
}

/* Gathers the keys of t the shape does not name (known), in the order met,
 * refusing keys that are neither numbers nor strings. */
static void gather_extra(enc *e, int t, int known) {
    lua_State *L = e->L;
    size_t seq = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        if (known) {
            lua_pushvalue(L, -1);
            int named = lua_rawget(L, known) != LUA_TNIL && lua_toboolean(L, -1);
            lua_pop(L, 1);
            if (named) continue;
        }
        int type = lua_type(L, -1);
        if (type != LUA_TNUMBER && type != LUA_TSTRING)
            fail(L, "Cannot serialise table: table key must be a number or string");
        xkey *k = new_key(e);
        k->seq = seq++;
        k->is_num = type == LUA_TNUMBER;
        if (k->is_num) {
            k->is_int = lua_isinteger(L, -1);
            if (k->is_int) k->i = lua_tointeger(L, -1);
            else k->d = lua_tonumber(L, -1);
            k->str = NULL;
            k->len = number_text(L, -1, k->num);
        } else {
            k->str = lua_tolstring(L, -1, &k->len);
        }
    }
}

/* Writes the keys gathered from base on, sorted, with their values. Keys of
 * the same spelling (a number and its text, or two numbers spelled alike)
 * all take the value of the last number key met, as the Lua encoder does. */
static void put_extra(enc *e, int t, size_t base, int eshape, int *first, int depth) {
    lua_State *L = e->L;
    qsort(e->keys + base, e->nkeys - base, sizeof(xkey), key_order);
    size_t i = base;
    while (i < e->nkeys) {
        size_t j = i + 1, from = i;
        while (j < e->nkeys && same_name(&e->keys[i], &e->keys[j])) j++;
        for (size_t x = i; x < j; x++)
            if (e->keys[x].is_num && (!e->keys[from].is_num || e->keys[x].seq > e->keys[from].seq)) from = x;
        const xkey *k = &e->keys[from];
        if (!k->is_num) lua_pushlstring(L, k->str, k->len);
        else if (k->is_int) lua_pushinteger(L, k->i);
        else lua_pushnumber(L, k->d);
        lua_rawget(L, t);
        int v = lua_gettop(L);
        for (size_t x = i; x < j; x++) {
            /* Keys are re-read by index: a nested object may move the arena. */
            if (!*first) put_char(e, ',');
            *first = 0;
            put_string(e, key_name(&e->keys[x]), e->keys[x].len);
            put_char(e, ':');
            encode_value(e, v, eshape, depth);
        }
        lua_pop(L, 1);
        i = j;
    }
}

/* The number of t's keys, refusing, in the order met, the keys gather_extra
 * would refuse (a shape names strings only, so these are never named). */
static size_t count_keys(lua_State *L, int t) {
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        n++;
        int type = lua_type(L, -1);
        if (type == LUA_TSTRING || lua_isinteger(L, -1)) continue;
        if (type != LUA_TNUMBER) fail(L, "Cannot serialise table: table key must be a number or string");
        if (isinf(lua_tonumber(L, -1))) fail(L, "Cannot serialise number: must not be NaN or Inf");
    }
    return n;
}

static void put_array(enc *e, int t, lua_Integer len, int shape, int depth) {
    lua_State *L = e->L;
    int items = field(L, shape, UP_ITEMS);
    put_char(e, '[');
    for (lua_Integer i = 1; i <= len; i++) {
        if (i > 1) put_char(e, ',');
        lua_rawgeti(L, t, i);
        encode_value(e, lua_gettop(L), items, depth);
        lua_pop(L, 1);
    }
    put_char(e, ']');
}

static void encode_table(enc *e, int t, int shape, int depth) {
    lua_State *L = e->L;
    if (depth > MAX_DEPTH) fail(L, "Cannot serialise, excessive nesting (1000)");
    luaL_checkstack(L, 32, "JSON nesting");
    int top = lua_gettop(L);
    int uv = 0;
    cshape *cs = shape ? compiled(e, shape, &uv) : NULL;
    if (cs && cs->variants) {
        shape = pick_variant(L, t, cs_get(L, uv, cs, CS_VARIANTS));
        cs = shape ? compiled(e, shape, &uv) : NULL;
    }

    /* An array has positive integer keys only. */
    lua_Integer count = 0, max = 0;
    int object = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        lua_Integer k;
        if (lua_isinteger(L, -1) && (k = lua_tointeger(L, -1)) > 0) {
            count++;
            if (k > max) max = k;
            continue;
        }
        object = 1;
        lua_pop(L, 1);
        break;
    }
    if (!object && count > 0) {
        if (max != count) fail(L, "Cannot serialise table: excessively sparse array");
        put_array(e, t, max, shape, depth);
        lua_settop(L, top);
        return;
    }

    /* With a shape, the keys it does not name are gathered only when the
     * object has more keys than the shape's present: usually it has not. */
    size_t base = e->nkeys, total = 0, named = 0;
    int known = cs && cs->known ? cs_get(L, uv, cs, CS_KNOWN) : 0, keys = cs && cs->has_keys;
    if (known && keys) total = count_keys(L, t);
    else gather_extra(e, t, known);
    put_char(e, '{');
    int first = 1;
    if (keys) {
        for (lua_Integer i = 1; i <= cs->nkeys; i++) {
            int mark = lua_gettop(L);
            lua_rawgeti(L, uv, i);
            if (lua_rawget(L, t) != LUA_TNIL) {
                int v = lua_gettop(L);
                const ckey *k = &cs->key[i - 1];
                named++;
                if (!first) put_char(e, ',');
                first = 0;
                put(e, cs->texts + k->off, k->len);
                int sub = 0;
                if (k->sub) {
                    lua_rawgeti(L, uv, cs->nkeys + i);
                    sub = lua_gettop(L);
                }
                encode_value(e, v, sub, depth);
            }
            lua_settop(L, mark);
        }
        if (cs->bad_key) fail(L, "a shape's keys must be strings");
    }
    if (known && keys && named < total) gather_extra(e, t, known);
    if (e->nkeys > base) put_extra(e, t, base, cs && cs->extra ? cs_get(L, uv, cs, CS_EXTRA) : 0, &first, depth);
    put_char(e, '}');
    e->nkeys = base;
    lua_settop(L, top);
}

/* ---------------------------------------------------------------- raw JSON
 *
 * Text already written as JSON (json_push_rows), which encode writes as it
 * is. It is userdata, so that Lua code cannot pass a string off as JSON. */
#define RAW_MT "sgw.json.raw"

typedef struct {
    size_t len;
    char text[];
} raw_json;

static int raw_tostring(lua_State *L) {
    raw_json *r = luaL_checkudata(L, 1, RAW_MT);
    lua_pushlstring(L, r->text, r->len);
    return 1;
}

static void push_raw(lua_State *L, const char *s, size_t len) {
    if (len > ((size_t)-1) - sizeof(raw_json)) fail(L, "not enough memory");
    raw_json *r = lua_newuserdatauv(L, sizeof *r + len, 0);
    r->len = len;
    memcpy(r->text, s, len);
    if (luaL_newmetatable(L, RAW_MT)) {
        lua_pushcfunction(L, raw_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_setmetatable(L, -2);
}

/* ------------------------------------------------------------ rows as JSON
 *
 * A row view (lib/json.lua's row_view) is a sequence: a literal, then for
 * each value the column it comes from, the JSON text written when that
 * column is NULL, and the literal after it. A row is written as the literals
 * with the values between them: the view decides every key and its order
 * (the order encode would write them in), this only spells the values, as
 * encode spells what db.query makes of them. */
enum { VIEW_MAX_VALUES = 64 };

typedef struct {
    const char *lit, *null;
    size_t lit_len, null_len;
    int column;
    json_cell_kind kind;
} view_part;

/* A string of the view (anchored by it) at index i. */
static const char *view_string(lua_State *L, int view, lua_Integer i, size_t *len) {
    if (lua_rawgeti(L, view, i) != LUA_TSTRING)
        luaL_error(L, "a row view holds strings only (entry %d is not one)", (int)i);
    const char *s = lua_tolstring(L, -1, len);
    lua_pop(L, 1);
    return s;
}

static void put_cell(enc *e, const view_part *p, const char *v, size_t len) {
    char buf[32];
    if (!v) {
        put(e, p->null, p->null_len);
        return;
    }
    switch (p->kind) {
    case JSON_CELL_STRING:
        put_string(e, v, len);
        return;
    case JSON_CELL_INTEGER:
        put(e, buf, integer_text(e->L, (lua_Integer)strtoll(v, NULL, 10), buf));
        return;
    case JSON_CELL_FLOAT:
        put(e, buf, float_text(e->L, (lua_Number)strtod(v, NULL), buf));
        return;
    case JSON_CELL_BOOLEAN:
        if (v[0] == 't') put(e, "true", 4);
        else put(e, "false", 5);
        return;
    }
}

void json_push_rows(lua_State *L, int view, const json_rows *rows, int first, int last) {
    view = lua_absindex(L, view);
    luaL_checktype(L, view, LUA_TTABLE);
    lua_Integer len = (lua_Integer)lua_rawlen(L, view);
    if (len % 3 != 1 || (len - 1) / 3 > VIEW_MAX_VALUES)
        luaL_error(L, "a row view is a literal, then a column, a NULL text and a literal for each value "
                      "(at most %d values)", VIEW_MAX_VALUES);
    int nvalues = (int)((len - 1) / 3);
    view_part part[VIEW_MAX_VALUES + 1];
    for (int i = 0; i <= nvalues; i++) {
        view_part *p = &part[i];
        p->lit = view_string(L, view, 3 * (lua_Integer)i + 1, &p->lit_len);
        if (i == nvalues) break;
        const char *name = view_string(L, view, 3 * (lua_Integer)i + 2, &(size_t){ 0 });
        p->column = rows->column(rows->ctx, name, &p->kind);
        if (p->column < 0) luaL_error(L, "a row view names the column %s, which the result does not have", name);
        p->null = view_string(L, view, 3 * (lua_Integer)i + 3, &p->null_len);
    }
    lua_pushnil(L);
    enc e = { .L = L, .slot = lua_gettop(L) };
    put_char(&e, '[');
    for (int r = first; r <= last; r++) {
        if (r > first) put_char(&e, ',');
        for (int i = 0; i < nvalues; i++) {
            size_t vlen = 0;
            const char *v = rows->cell(rows->ctx, r, part[i].column, &vlen);
            put(&e, part[i].lit, part[i].lit_len);
            put_cell(&e, &part[i], v, vlen);
        }
        put(&e, part[nvalues].lit, part[nvalues].lit_len);
    }
    put_char(&e, ']');
    push_raw(L, e.out, e.n);
    lua_replace(L, e.slot);
}

/* ------------------------------------------------------------------ values */

static void encode_value(enc *e, int idx, int shape, int depth) {
    lua_State *L = e->L;
    switch (lua_type(L, idx)) {
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        if (e->empty && len == e->empty_len && memcmp(s, e->empty, len) == 0) put(e, "[]", 2);
        else put_string(e, s, len);
        return;
    }
    case LUA_TTABLE:
        encode_table(e, idx, shape, depth + 1);
        return;
    case LUA_TNUMBER: {
        char buf[32];
        put(e, buf, number_text(L, idx, buf));
        return;
    }
    case LUA_TBOOLEAN:
        if (lua_toboolean(L, idx)) put(e, "true", 4);
        else put(e, "false", 5);
        return;
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == NULL) {   /* cjson.null */
            put(e, "null", 4);
            return;
        }
        break;
    case LUA_TUSERDATA: {
        const raw_json *r = luaL_testudata(L, idx, RAW_MT);
        if (r) {
            put(e, r->text, r->len);
            return;
        }
        break;
    }
    default:
        break;
    }
    lua_pushfstring(L, "Cannot serialise %s: type not supported", luaL_typename(L, idx));
    lua_error(L);
}

/* jsonc.encode(value, shape?, empty?) -> JSON text. */
static int l_encode(lua_State *L) {
    lua_settop(L, 3);
    int shape = 0;
    if (lua_type(L, ARG_SHAPE) == LUA_TTABLE) shape = ARG_SHAPE;
    else if (lua_toboolean(L, ARG_SHAPE)) luaL_typeerror(L, ARG_SHAPE, "table or nil");
    enc e = { .L = L, .slot = SLOT_OUT };
    e.empty = luaL_optlstring(L, ARG_EMPTY, NULL, &e.empty_len);
    lua_pushvalue(L, lua_upvalueindex(UP_SCRATCH_OUT));    /* SLOT_OUT */
    e.out = lua_touserdata(L, SLOT_OUT);
    e.cap = SCRATCH_OUT;
    lua_pushvalue(L, lua_upvalueindex(UP_SCRATCH_KEYS));   /* SLOT_KEYS */
    e.keys = lua_touserdata(L, SLOT_KEYS);
    e.kcap = SCRATCH_KEYS;
    encode_value(&e, ARG_VALUE, shape, 0);
    lua_pushlstring(L, e.out, e.n);
    return 1;
}

int luaopen_jsonc(lua_State *L) {
    lua_createtable(L, 0, 1);
    for (size_t i = 0; i < sizeof shape_fields / sizeof *shape_fields; i++)
        lua_pushstring(L, shape_fields[i]);
    lua_newtable(L);                       /* UP_COMPILED, weak keys */
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_newuserdatauv(L, SCRATCH_OUT, 0);                /* UP_SCRATCH_OUT */
    lua_newuserdatauv(L, SCRATCH_KEYS * sizeof(xkey), 0); /* UP_SCRATCH_KEYS */
    lua_pushcclosure(L, l_encode, (int)(sizeof shape_fields / sizeof *shape_fields) + 3);
    lua_setfield(L, -2, "encode");
    return 1;
}

void lapi_json_open(lua_State *L) {
    luaopen_jsonc(L);
    lua_setglobal(L, "jsonc");
}

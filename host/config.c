/*
 * config.c — configuration: flat "key = value" settings.
 *
 * config/sgw.conf declares every key with its default, and the default's
 * shape fixes the key's type. Later files and --set overrides may only change
 * known keys with values of that type, so a typo or a bad value stops
 * start-up with a message that names the key instead of being ignored.
 * The table is written during start-up only and read-only afterwards, which
 * is why readers take no lock.
 */
#include "sgw.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef enum { CT_STRING, CT_INT, CT_NUM, CT_BOOL } config_type;

typedef struct config_entry {
    char       *key;
    char       *value;
    config_type declared;   /* fixed by the default */
    config_type type;       /* of the value: an integer key may hold a fraction */
} config_entry;

static config_entry *entries;
static int           nentries, capentries;

static config_entry *find(const char *key) {
    for (int i = 0; i < nentries; i++)
        if (strcmp(entries[i].key, key) == 0) return &entries[i];
    return NULL;
}

static int parse_int(const char *s, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

static int parse_num(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* strtod also reads "nan" and "inf", which no setting means. */
    if (errno || end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, int *out) {
    if (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on") || !strcmp(s, "1")) { *out = 1; return 0; }
    if (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off") || !strcmp(s, "0")) { *out = 0; return 0; }
    return -1;
}

/* Whether a number converts to a long long (outside, the conversion is
 * undefined). */
static int in_int_range(double d) { return d >= -0x1p63 && d < 0x1p63; }

static config_type infer_type(const char *v) {
    long long i;
    double d;
    if (!strcmp(v, "true") || !strcmp(v, "false")) return CT_BOOL;
    if (*v && parse_int(v, &i) == 0) return CT_INT;
    if (*v && parse_num(v, &d) == 0) return CT_NUM;
    return CT_STRING;
}

static const char *type_name(config_type t) {
    switch (t) {
    case CT_INT: return "an integer";
    case CT_NUM: return "a number";
    case CT_BOOL: return "true or false";
    default: return "a string";
    }
}

static int check_value(config_type t, const char *v) {
    long long i;
    double d;
    int b;
    switch (t) {
    case CT_INT: return parse_int(v, &i);
    case CT_NUM: return parse_num(v, &d);
    case CT_BOOL: return parse_bool(v, &b);
    default: return 0;
    }
}

static int add_default(const char *key, const char *value, char *err, size_t errlen) {
    if (find(key)) {
        snprintf(err, errlen, "configuration key '%s' is declared twice", key);
        return -1;
    }
    if (nentries == capentries) {
        int ncap = capentries ? capentries * 2 : 64;
        config_entry *n = realloc(entries, (size_t)ncap * sizeof *n);
        if (!n) { snprintf(err, errlen, "out of memory"); return -1; }
        entries = n;
        capentries = ncap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) { free(k); free(v); snprintf(err, errlen, "out of memory"); return -1; }
    config_type t = infer_type(value);
    entries[nentries++] = (config_entry){ k, v, t, t };
    return 0;
}

int config_set(const char *key, const char *value, char *err, size_t errlen) {
    config_entry *e = find(key);
    if (!e) {
        snprintf(err, errlen, "unknown configuration key '%s' (every key is listed in config/sgw.conf)", key);
        return -1;
    }
    /* A key whose default is a number may also be given a fraction. */
    config_type t = e->declared == CT_INT && check_value(CT_INT, value) != 0 ? CT_NUM : e->declared;
    double d;
    if (check_value(t, value) != 0 ||
        (t == CT_NUM && e->declared == CT_INT && (parse_num(value, &d), !in_int_range(d)))) {
        snprintf(err, errlen, "configuration key '%s' must be %s, got '%s'", key, type_name(e->declared), value);
        return -1;
    }
    char *v = strdup(value);
    if (!v) { snprintf(err, errlen, "out of memory"); return -1; }
    free(e->value);
    e->value = v;
    e->type = t;
    return 0;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    if (n >= 2 && ((s[0] == '"' && s[n - 1] == '"') || (s[0] == '\'' && s[n - 1] == '\''))) {
        s[n - 1] = 0;
        s++;
    }
    return s;
}

/* Whether a setting from an operator's file is a secret: a key, a token, or
 * a connection string with a password in it (URL user information or
 * libpq's password=). */
static int holds_secret(const char *key, const char *value) {
    static const char *const secret_keys[] = { "crypto.encryption_key", "meta.app_secret", "admin.token" };
    if (!*value) return 0;
    for (size_t i = 0; i < sizeof secret_keys / sizeof *secret_keys; i++)
        if (strcmp(key, secret_keys[i]) == 0) return 1;
    if (strcmp(key, "database.url") && strcmp(key, "database.listen_url") &&
        strcmp(key, "database.read_url") && strcmp(key, "redis.url") && strcmp(key, "redis.cluster_urls"))
        return 0;
    if (strstr(value, "password=")) return 1;
    const char *auth = strstr(value, "://");
    if (!auth) return 0;
    auth += 3;
    size_t n = strcspn(auth, "/?#");
    const char *at = memchr(auth, '@', n);
    return at && memchr(auth, ':', (size_t)(at - auth)) != NULL;
}

int config_load_file(const char *path, int defaults, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot read configuration file %s: %s", path, strerror(errno));
        return -1;
    }
    /* An operator's file that others on the machine can read must not hold
     * secrets: refused below once one is seen. */
    struct stat st;
    if (fstat(fileno(f), &st)) {
        snprintf(err, errlen, "cannot stat configuration file %s: %s", path, strerror(errno));
        fclose(f);
        return -1;
    }
    int shared = !defaults && (st.st_mode & (S_IRWXG | S_IRWXO));
    char line[4096];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        /* Cut by fgets, a long line would set its first part and fail on the
         * rest as a line of its own. */
        if (!strchr(line, '\n') && getc(f) != EOF) {
            snprintf(err, errlen, "%s:%d: line longer than %zu bytes", path, lineno, sizeof line - 2);
            rc = -1;
            break;
        }
        char *s = trim(line);
        if (!*s || *s == '#') continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%d: expected 'key = value'", path, lineno);
            rc = -1;
            break;
        }
        *eq = 0;
        char *key = trim(s), *value = trim(eq + 1);
        if (shared && holds_secret(key, value)) {
            snprintf(err, errlen,
                     "%s:%d: %s is a secret, and the file is readable by group or others (mode %03o): "
                     "run chmod 600 %s",
                     path, lineno, key, (unsigned)(st.st_mode & 0777), path);
            rc = -1;
            break;
        }
        char sub[512];
        int r = defaults ? add_default(key, value, sub, sizeof sub) : config_set(key, value, sub, sizeof sub);
        if (r) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, sub);
            rc = -1;
            break;
        }
    }
    fclose(f);
    return rc;
}

int config_has(const char *key) { return find(key) != NULL; }

const char *config_str(const char *key) {
    config_entry *e = find(key);
    return e ? e->value : "";
}

long long config_int(const char *key) {
    config_entry *e = find(key);
    if (!e) return 0;
    if (e->type == CT_NUM) {
        double d = strtod(e->value, NULL);
        return in_int_range(d) ? (long long)d : d < 0 ? LLONG_MIN : LLONG_MAX;
    }
    return strtoll(e->value, NULL, 10);
}

double config_num(const char *key) {
    config_entry *e = find(key);
    return e ? strtod(e->value, NULL) : 0.0;
}

int config_bool(const char *key) {
    config_entry *e = find(key);
    int b = 0;
    if (e) parse_bool(e->value, &b);
    return b;
}

void config_free(void) {
    for (int i = 0; i < nentries; i++) {
        free(entries[i].key);
        free(entries[i].value);
    }
    free(entries);
    entries = NULL;
    nentries = capentries = 0;
}

/* config.get(key): settings do not change while the process runs, so each
 * state keeps the values it has read (upvalue 1) instead of searching the
 * table on every call; handlers read some on every request. */
static int l_config_get(lua_State *L) {
    const char *key = luaL_checkstring(L, 1);
    lua_settop(L, 1);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
    lua_pop(L, 1);
    config_entry *e = find(key);
    if (!e) { lua_pushnil(L); return 1; }
    switch (e->type) {
    case CT_INT: lua_pushinteger(L, (lua_Integer)config_int(key)); break;
    case CT_NUM: lua_pushnumber(L, config_num(key)); break;
    case CT_BOOL: lua_pushboolean(L, config_bool(key)); break;
    default: lua_pushstring(L, e->value); break;
    }
    lua_pushvalue(L, 1);
    lua_pushvalue(L, -2);
    lua_rawset(L, lua_upvalueindex(1));
    return 1;
}

void lapi_config_open(lua_State *L) {
    lua_createtable(L, 0, 1);
    lua_newtable(L);                    /* key -> value read */
    lua_pushcclosure(L, l_config_get, 1);
    lua_setfield(L, -2, "get");
    lua_setglobal(L, "config");
}

/*
 * test_config.c — host/config.c as start-up uses it: defaults whose shape
 * fixes each key's type, operator files and --set values over them, and the
 * messages that stop start-up (unknown keys, values of the wrong type,
 * malformed lines, secrets in a file others can read); then config.get as
 * handlers see it.
 */
#include "sgw.h"
#include "check.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/sgw-test-config-XXXXXX";

/* Writes text to a file of the test's directory with the given mode; its path. */
static const char *file(const char *name, mode_t mode, const char *text) {
    static char path[4][256];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f) return p;
    fputs(text, f);
    fclose(f);
    chmod(p, mode);
    return p;
}

static const char *const defaults =
    "# comment, then a blank line\n"
    "\n"
    "  t.str = hello  \n"
    "t.empty =\n"
    "t.quoted = \"  spaced  \"\n"
    "t.int = 30\n"
    "t.neg = -5\n"
    "t.num = 0.5\n"
    "t.bool = false\n"
    "t.flag = true\n"
    "t.url = postgresql://localhost/sgw\n"
    "admin.token =\n"
    "database.url =\n";

/* Loads the test defaults afresh; 0 ok. */
static int fresh(void) {
    char err[512];
    config_free();
    int rc = config_load_file(file("defaults.conf", 0644, defaults), 1, err, sizeof err);
    if (rc) printf("FAIL loading the defaults: %s\n", err);
    return rc;
}

/* Sets key to value with config_set; checks the outcome and, on refusal,
 * that the message contains want. */
static void expect_set(const char *key, const char *value, const char *want) {
    char err[512] = "", name[256];
    int rc = config_set(key, value, err, sizeof err);
    snprintf(name, sizeof name, "%s = '%s' %s%s", key, value, want ? "refused: " : "accepted", want ? want : "");
    check(want ? rc != 0 && strstr(err, want) != NULL : rc == 0, name, err);
}

/* Loads an operator file; checks the outcome and, on refusal, the message. */
static void expect_file(const char *text, mode_t mode, const char *want) {
    char err[512] = "", name[256];
    int rc = config_load_file(file("operator.conf", mode, text), 0, err, sizeof err);
    snprintf(name, sizeof name, "file '%.*s' (mode %03o) %s%s", (int)strcspn(text, "\n"), text, (unsigned)mode,
             want ? "refused: " : "accepted", want ? want : "");
    check(want ? rc != 0 && strstr(err, want) != NULL : rc == 0, name, err);
}

static void test_defaults(void) {
    if (fresh()) return;
    check(strcmp(config_str("t.str"), "hello") == 0, "values are trimmed", config_str("t.str"));
    check(strcmp(config_str("t.quoted"), "  spaced  ") == 0, "quotes keep spaces", config_str("t.quoted"));
    check(config_has("t.empty") && strcmp(config_str("t.empty"), "") == 0, "an empty default declares a key", NULL);
    check(config_int("t.int") == 30 && config_int("t.neg") == -5, "integers", NULL);
    check(config_num("t.num") == 0.5 && config_num("t.int") == 30.0, "numbers", NULL);
    check(config_bool("t.flag") == 1 && config_bool("t.bool") == 0, "booleans", NULL);
    check(!config_has("t.nothing") && strcmp(config_str("t.nothing"), "") == 0 && config_int("t.nothing") == 0 &&
              config_num("t.nothing") == 0.0 && config_bool("t.nothing") == 0,
          "an unknown key reads as empty, 0 and false", NULL);
    check(!config_has("# comment, then a blank line"), "comments declare nothing", NULL);

    char err[512];
    int rc = config_load_file(file("twice.conf", 0644, "t.str = again\n"), 1, err, sizeof err);
    check(rc != 0 && strstr(err, "twice.conf:1: configuration key 't.str' is declared twice"),
          "a key declared twice", err);

    rc = config_load_file(file("bad.conf", 0644, "a = 1\nno equals sign\n"), 1, err, sizeof err);
    check(rc != 0 && strstr(err, "bad.conf:2: expected 'key = value'"), "a line without '=' names its line", err);

    char missing[256];
    snprintf(missing, sizeof missing, "%s/missing.conf", dir);
    rc = config_load_file(missing, 0, err, sizeof err);
    check(rc != 0 && strstr(err, "cannot read configuration file") && strstr(err, "missing.conf"),
          "a missing file is named", err);

    config_free();
    check(!config_has("t.str") && strcmp(config_str("t.str"), "") == 0, "config_free forgets every key", NULL);

    rc = config_load_file("config/sgw.conf", 1, err, sizeof err);
    check(rc == 0 && config_has("http.max_body_bytes") && config_int("http.max_body_bytes") > 0,
          "the gateway's own defaults load", err);
}

static void test_types(void) {
    if (fresh()) return;
    expect_set("t.nothing", "1", "unknown configuration key 't.nothing'");
    expect_set("t.int", "abc", "'t.int' must be an integer, got 'abc'");
    expect_set("t.int", "12abc", "must be an integer");
    expect_set("t.int", "", "must be an integer");
    expect_set("t.num", "half", "'t.num' must be a number, got 'half'");
    expect_set("t.bool", "maybe", "'t.bool' must be true or false, got 'maybe'");
    expect_set("t.bool", "", "must be true or false");
    check(config_int("t.int") == 30 && config_bool("t.bool") == 0, "a refused value leaves the old one", NULL);

    expect_set("t.int", "-7", NULL);
    check(config_int("t.int") == -7, "an integer is set", NULL);
    expect_set("t.str", "42", NULL);
    check(strcmp(config_str("t.str"), "42") == 0, "a string key takes any text", NULL);
    expect_set("t.url", "", NULL);
    check(strcmp(config_str("t.url"), "") == 0, "a string key may be emptied", NULL);

    const char *yes[] = { "true", "yes", "on", "1" }, *no[] = { "false", "no", "off", "0" };
    for (int i = 0; i < 4; i++) {
        expect_set("t.bool", yes[i], NULL);
        check(config_bool("t.bool") == 1, yes[i], "reads as true");
        expect_set("t.bool", no[i], NULL);
        check(config_bool("t.bool") == 0, no[i], "reads as false");
    }

    /* A key whose default is an integer may be given a fraction. */
    expect_set("t.int", "2.75", NULL);
    check(config_num("t.int") == 2.75 && config_int("t.int") == 2, "a fraction for an integer key", NULL);
    /* Only numbers an integer key can hold, and no "nan" or "inf". */
    expect_set("t.int", "1e30", "'t.int' must be an integer, got '1e30'");
    expect_set("t.int", "-9.3e18", "must be an integer");
    expect_set("t.int", "99999999999999999999", "must be an integer");
    expect_set("t.int", "inf", "must be an integer");
    expect_set("t.num", "nan", "'t.num' must be a number, got 'nan'");
    expect_set("t.num", "-infinity", "must be a number");
    expect_set("t.num", "1e999", "must be a number");
    check(config_int("t.int") == 2, "and leave the old value", NULL);
    expect_set("t.num", "1e300", NULL);
    check(config_int("t.num") == LLONG_MAX, "a number too large for an integer reads as the largest", NULL);
    expect_set("t.num", "-1e300", NULL);
    check(config_int("t.num") == LLONG_MIN, "and one too small as the smallest", NULL);
    expect_set("t.num", "3", NULL);
    check(config_num("t.num") == 3.0, "an integer for a number key", NULL);
    expect_set("t.num", "-1.5e3", NULL);
    check(config_num("t.num") == -1500.0, "a number in exponent form", NULL);
}

static void test_files(void) {
    if (fresh()) return;
    expect_file("# operator\n\n t.int=45 \nt.str = 'single quoted'\nt.flag = off\n", 0600, NULL);
    check(config_int("t.int") == 45 && strcmp(config_str("t.str"), "single quoted") == 0 && config_bool("t.flag") == 0,
          "an operator file overrides the defaults", NULL);
    expect_file("t.int = 1\nt.typo = 2\n", 0600, "operator.conf:2: unknown configuration key 't.typo'");
    expect_file("t.flag = sure\n", 0600, "operator.conf:1: configuration key 't.flag' must be true or false");
    expect_file("t.int\n", 0600, "operator.conf:1: expected 'key = value'");
    /* "=" in a value is the value's. */
    expect_file("t.url = postgresql://h/db?options=-c%20x=1\n", 0600, NULL);
    check(strcmp(config_str("t.url"), "postgresql://h/db?options=-c%20x=1") == 0, "a value keeps its '='",
          config_str("t.url"));
}

static void test_secrets(void) {
    if (fresh()) return;
    const char *chmod_hint = "is a secret, and the file is readable by group or others";
    expect_file("admin.token = s3cret\n", 0644, chmod_hint);
    expect_file("admin.token = s3cret\n", 0640, "(mode 640): run chmod 600");
    expect_file("admin.token = s3cret\n", 0600, NULL);
    expect_file("admin.token =\n", 0644, NULL);
    expect_file("database.url = postgresql://sgw:pw@db/sgw\n", 0644, chmod_hint);
    expect_file("database.url = host=db password=pw\n", 0644, chmod_hint);
    expect_file("database.url = postgresql://sgw@db/sgw\n", 0644, NULL);
    /* A '@' and ':' past the host are no user information. */
    expect_file("database.url = postgresql://db:5432/sgw?user=a@b\n", 0644, NULL);
    expect_file("t.url = postgresql://sgw:pw@db/sgw\n", 0644, NULL);

    char err[512];
    config_free();
    int rc = config_load_file(file("defaults.conf", 0644, "admin.token = default-token\n"), 1, err, sizeof err);
    check(rc == 0, "defaults may hold a secret whatever their mode", err);
}

/* Lines no reader expects: one longer than the reader's buffer must not be
 * cut into a setting and a stray line. */
static void test_long_lines(void) {
    if (fresh()) return;
    size_t n = 10000;
    char *text = malloc(n + 32);
    if (!text) return;
    strcpy(text, "t.str = ");
    memset(text + 8, 'a', n);
    strcpy(text + 8 + n, "\n");
    char err[512] = "";
    int rc = config_load_file(file("long.conf", 0600, text), 0, err, sizeof err);
    check(rc != 0 && strstr(err, "long.conf:1: line longer than"), "a line too long is refused as such", err);
    check(strcmp(config_str("t.str"), "hello") == 0, "and sets nothing", NULL);
    free(text);
}

static void test_lua(void) {
    if (fresh()) return;
    char err[512];
    /* An integer key reads as its latest value: a fraction, or whole again. */
    if (config_load_file(file("more.conf", 0644, "t.half = 1\nt.whole = 1\n"), 1, err, sizeof err) ||
        config_set("t.int", "12", err, sizeof err) || config_set("t.half", "2.5", err, sizeof err) ||
        config_set("t.whole", "2.5", err, sizeof err) || config_set("t.whole", "3", err, sizeof err))
        printf("FAIL setting up: %s\n", err);
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lapi_config_open(L);
    const char *src =
        "local g = config.get\n"
        "assert(math.type(g('t.int')) == 'integer' and g('t.int') == 12, 'integer')\n"
        "assert(math.type(g('t.num')) == 'float' and g('t.num') == 0.5, 'number')\n"
        "assert(g('t.flag') == true and g('t.bool') == false, 'booleans')\n"
        "assert(g('t.str') == 'hello' and g('t.empty') == '', 'strings')\n"
        "assert(g('t.nothing') == nil, 'unknown')\n"
        "assert(g('t.int') == 12, 'read twice')\n"
        "assert(math.type(g('t.half')) == 'float' and g('t.half') == 2.5, 'a fraction')\n"
        "assert(math.type(g('t.whole')) == 'integer' and g('t.whole') == 3, 'whole again')\n"
        "assert(not pcall(g), 'no key')\n";
    int rc = luaL_dostring(L, src);
    check(rc == LUA_OK, "config.get gives typed values", rc ? lua_tostring(L, -1) : NULL);
    lua_close(L);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_defaults();
    test_types();
    test_files();
    test_secrets();
    test_long_lines();
    test_lua();
    config_free();
    const char *names[] = { "defaults.conf", "operator.conf", "twice.conf", "bad.conf", "long.conf", "more.conf" };
    char path[256];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

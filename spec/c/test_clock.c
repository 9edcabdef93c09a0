/*
 * test_clock.c — the clock Lua code sees (host/clock.c): clock.iso spells a
 * time as the API writes it (UTC, milliseconds: every millisecond a double
 * was given comes back, and none is rounded up into the next second),
 * refuses a time it cannot spell with an error instead of undefined
 * behaviour, and clock_advance moves clock.now without touching the
 * monotonic clock that durations use.
 */
#include "sgw.h"
#include "check.h"

#include <stdio.h>
#include <string.h>

static lua_State *L;

/* The string src's chunk returns, or "error: <message>". */
static const char *run_string(const char *src) {
    static char out[256];
    if (luaL_loadstring(L, src) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK)
        snprintf(out, sizeof out, "error: %s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
    else
        snprintf(out, sizeof out, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(not a string)");
    lua_settop(L, 0);
    return out;
}

/* clock.iso(<expr>) as a string, or "error: <message>". */
static const char *iso(const char *expr) {
    char src[200];
    snprintf(src, sizeof src, "return clock.iso(%s)", expr);
    return run_string(src);
}

static void expect_iso(const char *expr, const char *want) {
    const char *got = iso(expr);
    char name[160];
    snprintf(name, sizeof name, "clock.iso(%s) is %s", expr, want);
    check(strcmp(got, want) == 0, name, got);
}

static void expect_refused(const char *expr) {
    const char *got = iso(expr);
    char name[160];
    snprintf(name, sizeof name, "clock.iso(%s) raises", expr);
    check(strncmp(got, "error: ", 7) == 0 && strstr(got, "out of range"), name, got);
}

static double lua_number(const char *src) {
    double v = -1;
    if (luaL_loadstring(L, src) == LUA_OK && lua_pcall(L, 0, 1, 0) == LUA_OK) v = lua_tonumber(L, -1);
    lua_settop(L, 0);
    return v;
}

static void test_iso(void) {
    expect_iso("0", "1970-01-01T00:00:00.000Z");
    expect_iso("1798761600.25", "2027-01-01T00:00:00.250Z");
    /* Milliseconds are cut, not rounded: .999999 (a microsecond before the
     * next second, as PostgreSQL may hold it) stays in its second. */
    expect_iso("1798761600.999999", "2027-01-01T00:00:00.999Z");
    expect_iso("-0.000001", "1969-12-31T23:59:59.999Z");
    /* A time written with milliseconds and read back as a double comes back
     * with the same milliseconds, for every one of them (a double holds
     * .123 as .12299990654: truncating it would say .122). */
    const char *ms_lost = run_string(
        "for i = 0, 999 do\n"
        "  for _, base in ipairs({ 1798761600, 4102444800, -86400 }) do\n"
        "    local t = base + i / 1000\n"
        "    local got = tonumber(clock.iso(t):sub(21, 23))\n"
        "    if got ~= i then return string.format('%.3f gave .%03d', t, got) end\n"
        "  end\n"
        "end\n"
        "return 'none'");
    check(strcmp(ms_lost, "none") == 0, "every millisecond survives the round trip", ms_lost);
    /* Before 1970 the second is the one below. */
    expect_iso("-0.5", "1969-12-31T23:59:59.500Z");
    expect_iso("253402300799.5", "9999-12-31T23:59:59.500Z");
    /* Not a time: NaN, infinities and values no time_t holds. */
    expect_refused("0/0");
    expect_refused("math.huge");
    expect_refused("-math.huge");
    expect_refused("1e300");
    expect_refused("-1e300");
    /* Past year 9999 the API's four-digit year cannot spell it. */
    expect_refused("253402300800");
    const char *now = iso("");
    check(strlen(now) == 24 && now[23] == 'Z', "clock.iso() spells now", now);
}

static void test_advance(void) {
    double before = lua_number("return clock.now()");
    uint64_t mono_before = clock_mono_ms();
    clock_advance(3600);
    double after = lua_number("return clock.now()");
    uint64_t mono_after = clock_mono_ms();
    char detail[128];
    snprintf(detail, sizeof detail, "moved %.3f s", after - before);
    check(after - before >= 3600 && after - before < 3660, "clock_advance moves clock.now", detail);
    check(clock_offset() == 3600, "clock_offset says how far", NULL);
    check(mono_after - mono_before < 60000, "the monotonic clock does not move with it", NULL);
    double mono_lua = lua_number("return clock.mono_ms()");
    check(mono_lua >= (double)mono_before && mono_lua < (double)mono_before + 60000,
          "clock.mono_ms is the monotonic clock", NULL);
    clock_advance(-3600);
    check(clock_offset() == 0, "and back", NULL);
}

int main(void) {
    L = luaL_newstate();
    if (!L) return 1;
    luaL_openlibs(L);
    lapi_clock_open(L);
    test_iso();
    test_advance();
    lua_close(L);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

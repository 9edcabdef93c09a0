/*
 * clock.c — the clock Lua code sees.
 *
 * Wall time plus an offset that tests may move forward (only when
 * clock.allow_control is set), so grace periods, expiries and schedules can
 * be tested in seconds. Durations use the monotonic clock, which no offset
 * touches.
 */
#include "sgw.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

/* The offset in microseconds, so it can be atomic without a lock. */
static atomic_llong offset_us;

double clock_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + (double)atomic_load(&offset_us) / 1e6;
}

void clock_advance(double seconds) { atomic_fetch_add(&offset_us, (long long)(seconds * 1e6)); }

double clock_offset(void) { return (double)atomic_load(&offset_us) / 1e6; }

uint64_t clock_mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int l_now(lua_State *L) {
    lua_pushnumber(L, clock_now());
    return 1;
}

static int l_iso(lua_State *L) {
    double t = luaL_optnumber(L, 1, clock_now());
    double whole = floor(t);
    time_t secs = (time_t)whole;
    int ms = (int)((t - whole) * 1000.0);
    if (ms > 999) ms = 999;
    if (ms < 0) ms = 0;
    struct tm tm;
    if (!gmtime_r(&secs, &tm)) return luaL_error(L, "clock.iso: time out of range");
    char buf[96];
    snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
    lua_pushstring(L, buf);
    return 1;
}

static int l_mono_ms(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)clock_mono_ms());
    return 1;
}

void lapi_clock_open(lua_State *L) {
    static const luaL_Reg fns[] = { { "now", l_now }, { "iso", l_iso }, { "mono_ms", l_mono_ms }, { NULL, NULL } };
    luaL_newlib(L, fns);
    lua_setglobal(L, "clock");
}

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

#define ISO_FIRST_S -62135596800LL   /* 0001-01-01T00:00:00Z */
#define ISO_END_S   253402300800LL    /* 10000-01-01T00:00:00Z */

static int l_iso(lua_State *L) {
    double t = luaL_optnumber(L, 1, clock_now());
    /* Years 1 to 9999, what four digits spell; checked before any cast, so
     * NaN, infinities and huge values raise instead of being undefined. */
    if (!(t >= (double)ISO_FIRST_S - 1 && t < (double)ISO_END_S + 1))
        return luaL_error(L, "clock.iso: time out of range");
    /* To the microsecond first (PostgreSQL's precision), then the
     * milliseconds cut: a double holds .123 as .12299990654, which cut
     * straight away would say .122. */
    long long us = llround(t * 1e6);
    long long secs = us / 1000000, rem = us % 1000000;
    if (rem < 0) {
        rem += 1000000;
        secs -= 1;
    }
    if (secs < ISO_FIRST_S || secs >= ISO_END_S) return luaL_error(L, "clock.iso: time out of range");
    time_t tt = (time_t)secs;
    struct tm tm;
    if (!gmtime_r(&tt, &tm)) return luaL_error(L, "clock.iso: time out of range");
    char buf[96];
    snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(rem / 1000));
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

/*
 * test_metrics.c — the Prometheus exposition of metrics.c checked line by
 * line: request counters and histograms, counters and gauges from C and
 * from Lua (`metrics.inc` / `metrics.set`), label escaping and ordering,
 * name validation, the series bound and concurrent recording.
 */
#include "sgw.h"
#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void metrics_reset(void);          /* metrics.c: forgets every series */


static void expect_render(const char *name, const char *want)
{
    size_t len = 0;
    char *got = metrics_render(&len);
    int ok = got != NULL && len == strlen(got) && strcmp(got, want) == 0;
    if (!ok)
        printf("--- want\n%s--- got\n%s---\n", want, got ? got : "(null)");
    check(ok, name, NULL);
    free(got);
}

/* Does the rendered text contain this exact line? */
static int has_line(const char *line)
{
    char *text = metrics_render(NULL);
    size_t n = strlen(line);
    int found = 0;
    for (const char *p = text; p && *p && !found;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        found = len == n && memcmp(p, line, n) == 0;
        p = eol ? eol + 1 : p + len;
    }
    free(text);
    return found;
}

static int count_prefix(const char *prefix)
{
    char *text = metrics_render(NULL);
    int n = 0;
    size_t plen = strlen(prefix);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, prefix, plen) == 0)
            n++;
        const char *eol = strchr(p, '\n');
        p = eol ? eol + 1 : p + strlen(p);
    }
    free(text);
    return n;
}

static void lua_ok(lua_State *L, const char *name, const char *code)
{
    int ok = luaL_dostring(L, code) == LUA_OK;
    check(ok, name, ok ? NULL : lua_tostring(L, -1));
    lua_settop(L, 0);
}

static void lua_raises(lua_State *L, const char *name, const char *code)
{
    int ok = luaL_dostring(L, code) != LUA_OK;
    check(ok, name, ok ? NULL : "did not raise");
    lua_settop(L, 0);
}

static void *hammer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 10000; i++) {
        metrics_request("/t", "GET", 200, 0.001);
        metrics_count("hammer_total", NULL, 1);
        if (i % 1000 == 0)
            free(metrics_render(NULL));
    }
    return NULL;
}

#define DUR "sgw_http_request_duration_seconds"
#define ROUTE "route=\"/api/v1/posts/{id}\""

int main(void)
{
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lapi_metrics_open(L);

    metrics_reset();
    expect_render("empty registry",
                  "# TYPE sgw_metrics_series_dropped_total counter\n"
                  "sgw_metrics_series_dropped_total 0\n");

    /* binary-exact durations so that the sum prints exactly */
    metrics_request("/api/v1/posts/{id}", "GET", 200, 0.00390625);
    metrics_request("/api/v1/posts/{id}", "GET", 200, 0.125);
    metrics_request("/api/v1/posts/{id}", "POST", 201, 20);
    metrics_count("sgw_jobs_total", "kind=\"publish\"", 2);
    metrics_count("sgw_jobs_total", NULL, 1);
    metrics_count("sgw_jobs_total", "", -5);          /* counters never go down */
    metrics_count("bad name", NULL, 1);               /* ignored */
    metrics_gauge("sgw_queue_depth", "", 3);
    metrics_gauge("sgw_queue_depth", "", 7.5);        /* set, not add */
    lua_ok(L, "inc with labels",
           "metrics.inc('app_events_total', {b = 2, a = 'x\"y\\\\z\\nw'})\n"
           "metrics.inc('app_events_total', {a = 'x\"y\\\\z\\nw', b = '2'}, 3)");
    lua_ok(L, "set without labels", "metrics.set('app_temp', 1.25)");
    lua_ok(L, "set with labels", "metrics.set('app_temp', {zone = 'x'}, -3)");
    lua_ok(L, "inc with a number as second argument", "metrics.inc('app_ticks_total', 2)");
    lua_ok(L, "inc defaults to 1", "metrics.inc('app_ticks_total')");
    lua_ok(L, "inc with nil labels", "metrics.inc('app_ticks_total', nil, 4)");
    lua_ok(L, "boolean label and colon name", "metrics.inc('app:flag_total', {on = true})");

    expect_render("full exposition",
        "# TYPE app:flag_total counter\n"
        "app:flag_total{on=\"true\"} 1\n"
        "# TYPE app_events_total counter\n"
        "app_events_total{a=\"x\\\"y\\\\z\\nw\",b=\"2\"} 4\n"
        "# TYPE app_temp gauge\n"
        "app_temp 1.25\n"
        "app_temp{zone=\"x\"} -3\n"
        "# TYPE app_ticks_total counter\n"
        "app_ticks_total 7\n"
        "# TYPE " DUR " histogram\n"
        DUR "_bucket{" ROUTE ",le=\"0.001\"} 0\n"
        DUR "_bucket{" ROUTE ",le=\"0.0025\"} 0\n"
        DUR "_bucket{" ROUTE ",le=\"0.005\"} 1\n"
        DUR "_bucket{" ROUTE ",le=\"0.01\"} 1\n"
        DUR "_bucket{" ROUTE ",le=\"0.025\"} 1\n"
        DUR "_bucket{" ROUTE ",le=\"0.05\"} 1\n"
        DUR "_bucket{" ROUTE ",le=\"0.1\"} 1\n"
        DUR "_bucket{" ROUTE ",le=\"0.25\"} 2\n"
        DUR "_bucket{" ROUTE ",le=\"0.5\"} 2\n"
        DUR "_bucket{" ROUTE ",le=\"1\"} 2\n"
        DUR "_bucket{" ROUTE ",le=\"2.5\"} 2\n"
        DUR "_bucket{" ROUTE ",le=\"5\"} 2\n"
        DUR "_bucket{" ROUTE ",le=\"10\"} 2\n"
        DUR "_bucket{" ROUTE ",le=\"+Inf\"} 3\n"
        DUR "_sum{" ROUTE "} 20.12890625\n"
        DUR "_count{" ROUTE "} 3\n"
        "# TYPE sgw_http_requests_total counter\n"
        "sgw_http_requests_total{" ROUTE ",method=\"GET\",status=\"200\"} 2\n"
        "sgw_http_requests_total{" ROUTE ",method=\"POST\",status=\"201\"} 1\n"
        "# TYPE sgw_jobs_total counter\n"
        "sgw_jobs_total 1\n"
        "sgw_jobs_total{kind=\"publish\"} 2\n"
        "# TYPE sgw_metrics_series_dropped_total counter\n"
        "sgw_metrics_series_dropped_total 0\n"
        "# TYPE sgw_queue_depth gauge\n"
        "sgw_queue_depth 7.5\n");

    /* bucket boundaries are inclusive (le) */
    metrics_reset();
    metrics_request("/b", "GET", 200, 0.001);
    metrics_request("/b", "GET", 200, 10);
    check(has_line(DUR "_bucket{route=\"/b\",le=\"0.001\"} 1"), "le is inclusive (low)", NULL);
    check(has_line(DUR "_bucket{route=\"/b\",le=\"5\"} 1"), "le below 10", NULL);
    check(has_line(DUR "_bucket{route=\"/b\",le=\"10\"} 2"), "le is inclusive (high)", NULL);
    metrics_request(NULL, "GET", 404, 0.01);
    check(has_line("sgw_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1"),
          "NULL route is unmatched", NULL);
    /* invented methods share one series: they cannot exhaust the cap */
    metrics_reset();
    char invented[16];
    for (int i = 0; i < 5000; i++) {
        snprintf(invented, sizeof invented, "X%d", i);
        metrics_request("/m", invented, 405, 0.01);
    }
    metrics_request("/m", "get", 405, 0.01);
    metrics_request("/m", NULL, 400, 0.01);
    metrics_request("/m", "PATCH", 405, 0.01);
    check(has_line("sgw_http_requests_total{route=\"/m\",method=\"other\",status=\"405\"} 5001"),
          "unknown methods are counted as other", NULL);
    check(has_line("sgw_http_requests_total{route=\"/m\",method=\"other\",status=\"400\"} 1"),
          "a missing method is other", NULL);
    check(has_line("sgw_http_requests_total{route=\"/m\",method=\"PATCH\",status=\"405\"} 1"),
          "standard methods keep their name", NULL);
    check(has_line("sgw_metrics_series_dropped_total 0"), "no series dropped for invented methods", NULL);
    metrics_count("frac_total", NULL, 0.1);
    metrics_count("frac_total", NULL, 0.2);
    check(has_line("frac_total 0.30000000000000004"), "fractions round-trip", NULL);

    lua_raises(L, "bad metric name", "metrics.inc('bad-name')");
    lua_raises(L, "metric name starting with a digit", "metrics.inc('1abc')");
    lua_raises(L, "empty metric name", "metrics.inc('')");
    lua_raises(L, "bad label name", "metrics.inc('ok_total', {['bad-label'] = 'x'})");
    lua_raises(L, "colon in label name", "metrics.inc('ok_total', {['a:b'] = 'x'})");
    lua_raises(L, "reserved label name", "metrics.inc('ok_total', {__name = 'x'})");
    lua_raises(L, "numeric label key", "metrics.inc('ok_total', {'x'})");
    lua_raises(L, "table label value", "metrics.inc('ok_total', {a = {}})");
    lua_raises(L, "negative delta", "metrics.inc('ok_total', nil, -1)");
    lua_raises(L, "NaN delta", "metrics.inc('ok_total', nil, 0/0)");
    lua_raises(L, "set needs a value", "metrics.set('ok_gauge')");
    lua_raises(L, "labels must be a table", "metrics.inc('ok_total', 'a=1', 1)");
    lua_raises(L, "too many labels",
               "local t = {} for i = 1, 17 do t['l' .. i] = i end metrics.inc('ok_total', t)");
    lua_ok(L, "a counter", "metrics.inc('kind_total')");
    lua_raises(L, "set on a counter", "metrics.set('kind_total', 1)");
    lua_raises(L, "inc on the request histogram", "metrics.inc('" DUR "')");
    lua_ok(L, "a gauge", "metrics.set('kind_gauge', {a = 1}, 1)");
    lua_raises(L, "inc on a gauge (other labels)", "metrics.inc('kind_gauge', {a = 2})");
    check(!has_line("ok_total 1") && count_prefix("ok_total") == 0,
          "failed calls record nothing", NULL);

    /* the series bound */
    metrics_reset();
    lua_ok(L, "5010 distinct series",
           "for i = 1, 5010 do metrics.inc('many_total', {i = i}) end\n"
           "metrics.inc('many_total', {i = 1})");
    check(count_prefix("many_total{") == 5000, "series are bounded at 5000", NULL);
    check(has_line("sgw_metrics_series_dropped_total 10"), "dropped series are counted", NULL);
    check(has_line("many_total{i=\"1\"} 2"), "existing series still count when full", NULL);
    metrics_request("/full", "GET", 200, 0.1);
    check(count_prefix("sgw_http_requests_total{route=\"/full\"") == 0 &&
          has_line("sgw_metrics_series_dropped_total 12"), "request series bounded too", NULL);

    /* concurrent recording */
    metrics_reset();
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, hammer, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    check(has_line("sgw_http_requests_total{route=\"/t\",method=\"GET\",status=\"200\"} 40000"),
          "concurrent counter", NULL);
    check(has_line(DUR "_count{route=\"/t\"} 40000"), "concurrent histogram", NULL);
    check(has_line("hammer_total 40000"), "concurrent metrics_count", NULL);

    metrics_reset();
    lua_close(L);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/*
 * test_invalidations.c — the count of "cached credentials may be stale"
 * news (invalidations.c): unknown without Redis and while not subscribed;
 * with the Redis named by SGW_TEST_REDIS_URL (skipped without it), known
 * once subscribed, moved by a message any instance publishes on the
 * namespace's channel and at once by this instance's own bump, and unknown
 * again once stopped. The namespace is the test's own, so other tests'
 * instances on the same server neither hear nor send its messages.
 */
#include "sgw.h"
#include "check.h"
#include "redis_fixture.h"

#include <hiredis/hiredis.h>

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Waits up to ms for the count to reach at least want; returns the count. */
static long long count_reaching(long long want, int ms) {
    uint64_t deadline = clock_mono_ms() + (uint64_t)ms;
    long long n = invalidations_count();
    while (n < want && clock_mono_ms() < deadline) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        n = invalidations_count();
    }
    return n;
}

static void test_without_redis(void) {
    char err[256];
    check(config_set("redis.url", "", err, sizeof err) == 0, "redis.url emptied", err);
    check(invalidations_start() == 0, "starts without Redis", NULL);
    check(invalidations_count() == -1, "the count is unknown without Redis", NULL);
    invalidations_stop();
}

static void test_with_redis(const char *url) {
    char err[256], detail[128];
    check(config_set("redis.url", url, err, sizeof err) == 0, "redis.url set", err);
    sgw_redis *control = redis_open(url);
    const char *why = NULL;
    redisContext *ctl = redis_take_context(control, &why);
    check(ctl != NULL, "a control connection", why);
    if (!ctl) {
        redis_close(control);
        return;
    }

    check(invalidations_start() == 0, "starts with Redis", NULL);
    long long c0 = count_reaching(0, 5000);
    snprintf(detail, sizeof detail, "count %lld", c0);
    check(c0 >= 0, "the count is known once subscribed", detail);

    redisReply *r = redisCommand(ctl, "PUBLISH %s 1", invalidations_channel());
    check(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1, "one subscriber hears the channel", NULL);
    if (r) freeReplyObject(r);
    long long c1 = count_reaching(c0 + 1, 5000);
    snprintf(detail, sizeof detail, "%lld after %lld", c1, c0);
    check(c1 == c0 + 1, "a message moves the count by one", detail);

    invalidations_bump();
    long long c2 = invalidations_count();
    snprintf(detail, sizeof detail, "%lld after %lld", c2, c1);
    check(c2 == c1 + 1, "this instance's own bump moves it at once", detail);

    invalidations_stop();
    check(invalidations_count() == -1, "unknown again once stopped", NULL);
    r = redisCommand(ctl, "PUBSUB NUMSUB %s", invalidations_channel());
    check(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_INTEGER &&
              r->element[1]->integer == 0,
          "and no longer subscribed", NULL);
    if (r) freeReplyObject(r);
    redisFree(ctl);
    redis_close(control);
}

int main(void) {
    if (redis_fixture_config()) return 1;
    char err[256], ns[64];
    snprintf(ns, sizeof ns, "sgw_test_invalidations_%ld", (long)getpid());
    if (config_set("redis.namespace", ns, err, sizeof err)) {
        printf("config: %s\n", err);
        return 1;
    }
    char channel[128];
    snprintf(channel, sizeof channel, "%s:invalidate", ns);
    check(strcmp(invalidations_channel(), channel) == 0, "the channel is the namespace's", invalidations_channel());

    test_without_redis();
    const char *url = getenv("SGW_TEST_REDIS_URL");
    if (url && *url)
        test_with_redis(url);
    else
        printf("SKIP: the parts with Redis (SGW_TEST_REDIS_URL not set)\n");
    config_free();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

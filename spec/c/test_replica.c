/*
 * test_replica.c — whether the read replica may serve (replica.c): never
 * without database.read_url; with it pointing at the PostgreSQL named by
 * SGW_TEST_DATABASE_URL (skipped without it; a server not in recovery is
 * never behind), usable once measured, unusable at once when a read found
 * it failing, and usable again at the next measurement.
 */
#include "sgw.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Waits up to ms for replica_usable() to be want; returns it. */
static int usable_within(int want, int ms) {
    uint64_t deadline = clock_mono_ms() + (uint64_t)ms;
    while (replica_usable() != want && clock_mono_ms() < deadline) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    return replica_usable();
}

int main(void) {
    char err[512];
    if (config_load_file("config/sgw.conf", 1, err, sizeof err) ||
        config_set("database.read_url", "", err, sizeof err)) {
        printf("config: %s\n", err);
        return 1;
    }
    log_set_level(LOG_ERROR);
    check(replica_start() == 0, "starts without database.read_url", NULL);
    check(replica_usable() == 0, "and never serves", NULL);
    replica_stop();

    const char *url = getenv("SGW_TEST_DATABASE_URL");
    if (url && *url) {
        if (config_set("database.read_url", url, err, sizeof err) ||
            config_set("database.max_replica_lag_ms", "2000", err, sizeof err)) {
            printf("config: %s\n", err);
            return 1;
        }
        check(replica_start() == 0, "starts with database.read_url", NULL);
        check(usable_within(1, 5000) == 1, "a server that is not behind serves once measured", NULL);
        replica_failed("a read failed there");
        check(replica_usable() == 0, "a read that found it failing stops it at once", NULL);
        check(usable_within(1, 5000) == 1, "the next measurement brings it back", NULL);
        replica_stop();
    } else {
        printf("SKIP: the parts with a database (SGW_TEST_DATABASE_URL not set)\n");
    }
    config_free();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/*
 * test_body_budget.c — host/body_budget.c: the process-wide budget of request
 * bodies and each address's share of it (IPv6 by /64), bodies that grow
 * (chunked), entries that leave the table when their address holds nothing
 * (in any order, with colliding neighbours), a full table, and holds taken
 * and given back from two threads at once.
 */
#include "sgw.h"
#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static int reserve(body_hold *h, const char *addr, unsigned long long total) {
    return body_budget_reserve(h, addr, total);
}

static void test_total_budget(void) {
    body_budget_configure(1000, 0, 16);
    body_hold a = { 0 }, b = { 0 };
    check(reserve(&a, "192.0.2.1", 600) == 0, "a body within the budget is held", NULL);
    check(reserve(&b, "192.0.2.2", 500) == BODY_BUDGET_FULL, "one that would pass it is refused", NULL);
    check(b.total == 0 && body_budget_held() == 600, "a refusal holds nothing", NULL);
    check(reserve(&b, "192.0.2.2", 400) == 0, "what is left may be held", NULL);
    body_budget_release(&a);
    body_budget_release(&b);
    check(body_budget_held() == 0 && a.total == 0, "releases give it all back", NULL);
}

static void test_address_share(void) {
    body_budget_configure(10000, 1000, 16);
    body_hold a1 = { 0 }, a2 = { 0 }, b = { 0 }, v6a = { 0 }, v6b = { 0 }, v6c = { 0 };
    check(reserve(&a1, "198.51.100.7", 800) == 0, "an address holds up to its share", NULL);
    check(reserve(&a2, "198.51.100.7", 300) == BODY_BUDGET_ADDRESS, "past its share it is refused", NULL);
    check(body_budget_held() == 800, "the refusal holds nothing of the budget", NULL);
    check(reserve(&b, "198.51.100.8", 900) == 0, "another address has a share of its own", NULL);
    check(reserve(&a2, "198.51.100.7", 200) == 0, "the rest of the share may be held", NULL);
    check(reserve(&v6a, "2001:db8:1:2::1", 700) == 0, "an IPv6 address holds", NULL);
    check(reserve(&v6b, "2001:db8:1:2:ffff::9", 400) == BODY_BUDGET_ADDRESS,
          "another address of the same /64 spends the same share", NULL);
    check(reserve(&v6c, "2001:db8:1:3::1", 900) == 0, "the next /64 has its own", NULL);
    body_budget_release(&a1);
    check(reserve(&a1, "198.51.100.7", 800) == 0, "a release gives the share back", NULL);
    body_hold *all[] = { &a1, &a2, &b, &v6a, &v6c };
    for (int i = 0; i < 5; i++) body_budget_release(all[i]);
    check(body_budget_held() == 0, "everything given back", NULL);
}

static void test_growing_body(void) {
    body_budget_configure(0, 4096, 16);
    body_hold h = { 0 };
    unsigned long long cap = 1024;
    int rc = 0;
    while (rc == 0 && cap <= 4096) {
        rc = reserve(&h, "203.0.113.5", cap);
        if (rc == 0) cap *= 2;
    }
    check(h.total == 4096 && cap == 8192, "a chunked body grows to the share", NULL);
    check(reserve(&h, "203.0.113.5", 8192) == BODY_BUDGET_ADDRESS && h.total == 4096,
          "and no further, keeping what it held", NULL);
    check(reserve(&h, "203.0.113.5", 2048) == 0 && h.total == 4096, "asking for less than it holds is a no-op", NULL);
    body_budget_release(&h);
    body_hold again = { 0 };
    check(reserve(&again, "203.0.113.5", 4096) == 0, "then the whole share is free", NULL);
    body_budget_release(&again);
}

/* 40 addresses in a 64-slot table, given back in an order unlike the one
 * they came in: every share is whole again afterwards, so no entry was lost
 * or left behind when its neighbours moved. */
static void test_entries_leave(void) {
    body_budget_configure(0, 100, 1);
    enum { N = 40 };
    body_hold h[N] = { { 0 } };
    char addr[N][32];
    int ok = 1;
    for (int i = 0; i < N; i++) {
        snprintf(addr[i], sizeof addr[i], "10.0.%d.%d", i / 7, i * 37 % 251);
        ok &= reserve(&h[i], addr[i], 60) == 0;
    }
    check(ok, "40 addresses each hold part of their share", NULL);
    for (int round = 0; round < 2; round++) {
        for (int i = round; i < N; i += 2) body_budget_release(&h[i]);
    }
    ok = 1;
    for (int i = 0; i < N; i++) {
        ok &= reserve(&h[i], addr[i], 100) == 0;
        body_hold more = { 0 };
        ok &= reserve(&more, addr[i], 1) == BODY_BUDGET_ADDRESS;
    }
    check(ok, "after every release each share is whole, and still counted", NULL);
    for (int i = 0; i < N; i++) body_budget_release(&h[i]);
    check(body_budget_held() == 0, "nothing held at the end", NULL);
}

static void test_full_table(void) {
    body_budget_configure(0, 10, 1);   /* 64 slots */
    enum { N = 64 };
    body_hold h[N] = { { 0 } };
    char addr[N][32];
    int ok = 1;
    for (int i = 0; i < N; i++) {
        snprintf(addr[i], sizeof addr[i], "172.16.0.%d", i + 1);
        ok &= reserve(&h[i], addr[i], 5) == 0;
    }
    check(ok, "64 addresses fill the table", NULL);
    body_hold outside = { 0 };
    check(reserve(&outside, "172.16.1.1", 50) == 0 && outside.shared == 0,
          "a body that finds no room is held to the process budget alone", NULL);
    check(reserve(&outside, "172.16.1.1", 80) == 0 && outside.shared == 0, "and stays outside as it grows", NULL);
    body_budget_release(&h[3]);
    body_budget_release(&outside);
    body_hold in = { 0 };
    check(reserve(&in, "172.16.1.1", 10) == 0 && in.shared == 10, "a freed slot takes the next address", NULL);
    check(reserve(&h[0], addr[0], 11) == BODY_BUDGET_ADDRESS, "addresses in the table keep their shares", NULL);
    body_budget_release(&in);
    for (int i = 0; i < N; i++) body_budget_release(&h[i]);
    check(body_budget_held() == 0, "nothing held after the full table", NULL);
}

/* A full table of addresses that collide (their homes crowd together), given
 * back one by one in a shuffled order: every release moves its run back, and
 * after each one the addresses still in the table keep their shares. */
static void test_full_table_collisions(void) {
    body_budget_configure(0, 10, 1);   /* 64 slots */
    enum { N = 64 };
    body_hold h[N] = { { 0 } };
    char addr[N][40];
    int order[N], ok = 1;
    for (int i = 0; i < N; i++) {
        snprintf(addr[i], sizeof addr[i], "10.%d.%d.%d", i * 7 % 13, i * 31 % 251, i * 97 % 241);
        ok &= reserve(&h[i], addr[i], 6) == 0 && h[i].shared == 6;
        order[i] = i;
    }
    check(ok, "64 colliding addresses fill the table", NULL);
    unsigned seed = 12345;
    for (int i = N - 1; i > 0; i--) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 16) % (unsigned)(i + 1));
        int t = order[i]; order[i] = order[k]; order[k] = t;
    }
    ok = 1;
    for (int n = 0; n < N; n++) {
        body_budget_release(&h[order[n]]);
        for (int m = n + 1; m < N; m++) {
            body_hold probe = { 0 };
            int i = order[m];
            /* 4 more fit in a share holding 6 of 10, a 5th does not. */
            ok &= reserve(&probe, addr[i], 4) == 0 && probe.shared == 4;
            body_budget_release(&probe);
            ok &= reserve(&probe, addr[i], 5) == BODY_BUDGET_ADDRESS;
        }
    }
    check(ok, "every release in a full, crowded table keeps the others' shares", NULL);
    check(body_budget_held() == 0, "nothing held after the crowded table", NULL);
}

static void *churn(void *arg) {
    const char *const *addrs = arg;
    for (int i = 0; i < 20000; i++) {
        body_hold h = { 0 };
        const char *a = addrs[i % 5];
        if (reserve(&h, a, 100) == 0) {
            reserve(&h, a, 200);
            body_budget_release(&h);
        }
    }
    return NULL;
}

static void test_threads(void) {
    body_budget_configure(1000000, 1000, 8);
    static const char *const one[] = { "10.1.0.1", "10.1.0.2", "10.1.0.3", "2001:db8::1", "2001:db8:0:1::1" };
    static const char *const two[] = { "10.1.0.3", "2001:db8::2", "10.1.0.4", "10.1.0.1", "10.1.0.5" };
    pthread_t t1, t2;
    pthread_create(&t1, NULL, churn, (void *)one);
    pthread_create(&t2, NULL, churn, (void *)two);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    check(body_budget_held() == 0, "two threads give back all they held", NULL);
    int whole = 1;
    const char *all[] = { "10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "2001:db8::1", "2001:db8:0:1::1" };
    for (int i = 0; i < 7; i++) {
        body_hold h = { 0 };
        whole &= reserve(&h, all[i], 1000) == 0;
        body_budget_release(&h);
    }
    check(whole, "and every share is whole", NULL);
}

int main(void) {
    test_total_budget();
    test_address_share();
    test_growing_body();
    test_entries_leave();
    test_full_table();
    test_full_table_collisions();
    test_threads();
    body_budget_configure(0, 0, 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

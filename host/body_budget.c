/*
 * body_budget.c — the memory request bodies may hold while they arrive.
 *
 * A body reserves its bytes before they are read: from a process-wide
 * budget (http.max_inflight_body_bytes) and from the share one client
 * address may hold (http.max_inflight_body_bytes_per_address), so that one
 * address sending slow bodies under made-up credentials (a body is read
 * before its credential is looked up) cannot take the whole budget from
 * everyone else. An address is the client's (behind trusted proxies, whom
 * they name); an IPv6 address counts as its /64, which one host can hold.
 *
 * The shares live in an open-addressing table, sized at start for every
 * connection the listener may hold at once; an entry goes when its address
 * holds nothing. Should the table be full anyway (no connection cap), a body
 * that finds no room is held to the process-wide budget alone. Slots come
 * from a hash seeded at start, so that addresses cannot be picked to pile
 * up in one run of the table.
 */
#include "sgw.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char      key[16];   /* the address (IPv4 mapped, IPv6 cut to /64) */
    unsigned long long held;      /* 0: the slot is free */
} share;

static unsigned long long total_limit;      /* 0: no budget */
static unsigned long long per_address;      /* 0: no share */
static atomic_ullong      total_held;
static pthread_mutex_t    lock = PTHREAD_MUTEX_INITIALIZER;
static share             *shares;
static size_t             nshares;          /* a power of two, or 0 */
static uint64_t           seed;             /* so that nobody can choose colliding addresses */

int body_budget_configure(unsigned long long total, unsigned long long address_share, size_t addresses) {
    pthread_mutex_lock(&lock);
    free(shares);
    shares = NULL;
    nshares = 0;
    total_limit = total;
    per_address = address_share;
    int rc = 0;
    if (crypto_random(&seed, sizeof seed)) seed = (uint64_t)clock_mono_ms() * 0x9e3779b97f4a7c15ull;
    if (address_share) {
        /* Room for every connection's address at half load; without a
         * connection cap, for 32,768 addresses. */
        size_t want = addresses ? addresses * 2 : (size_t)1 << 16, n = 64;
        while (n < want && n < ((size_t)1 << 20)) n *= 2;
        shares = calloc(n, sizeof *shares);
        if (shares) nshares = n;
        else rc = -1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

unsigned long long body_budget_held(void) { return atomic_load(&total_held); }

/* The table's key of a textual address; what does not parse is one key. */
static void key_of(const char *addr, unsigned char key[16]) {
    memset(key, 0, 16);
    if (inet_pton(AF_INET, addr, key + 12) == 1) {
        key[10] = key[11] = 0xff;
    } else if (inet_pton(AF_INET6, addr, key) == 1) {
        memset(key + 8, 0, 8);
    }
}

static size_t slot_of(const unsigned char key[16]) {
    uint64_t h = 1469598103934665603ull ^ seed;   /* FNV-1a, started from the seed */
    for (int i = 0; i < 16; i++) h = (h ^ key[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29)) & (nshares - 1);
}

/* The slot holding key, or where it would go; nshares when the table is full. */
static size_t find(const unsigned char key[16]) {
    size_t i = slot_of(key);
    for (size_t probes = 0; probes < nshares; probes++, i = (i + 1) & (nshares - 1)) {
        if (!shares[i].held || memcmp(shares[i].key, key, 16) == 0) return i;
    }
    return nshares;
}

/* Frees slot i and moves later entries of its run back (no tombstones). The
 * hole is always free, so the scan ends at it at the latest, full table or
 * not. */
static void vacate(size_t i) {
    size_t mask = nshares - 1;
    shares[i].held = 0;
    for (size_t j = (i + 1) & mask; shares[j].held; j = (j + 1) & mask) {
        size_t home = slot_of(shares[j].key);
        /* Entry j may fill the hole at i unless its home lies in (i, j]. */
        int stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (stays) continue;
        shares[i] = shares[j];
        shares[j].held = 0;
        i = j;
    }
}

int body_budget_reserve(body_hold *h, const char *addr, unsigned long long total) {
    if (total <= h->total) return 0;
    unsigned long long more = total - h->total;
    unsigned long long now = atomic_fetch_add(&total_held, more) + more;
    if (total_limit && now > total_limit) {
        atomic_fetch_sub(&total_held, more);
        return BODY_BUDGET_FULL;
    }
    /* A hold that found the table full stays outside the shares (its
     * release then touches none). */
    if (!per_address || (h->total && !h->shared)) {
        h->total = total;
        return 0;
    }
    /* The key is worked out once per hold: a body that grows, and its
     * release, use the one it kept. */
    unsigned char key[16];
    if (h->shared) memcpy(key, h->key, 16);
    else key_of(addr ? addr : "", key);
    int rc = 0;
    pthread_mutex_lock(&lock);
    size_t i = nshares ? find(key) : nshares;
    if (i < nshares) {
        if (shares[i].held + more > per_address) {
            rc = BODY_BUDGET_ADDRESS;
        } else {
            if (!shares[i].held) memcpy(shares[i].key, key, 16);
            shares[i].held += more;
            if (!h->shared) memcpy(h->key, key, 16);
            h->shared += more;
        }
    }
    pthread_mutex_unlock(&lock);
    if (rc) atomic_fetch_sub(&total_held, more);
    else h->total = total;
    return rc;
}

void body_budget_release(body_hold *h) {
    if (h->total) atomic_fetch_sub(&total_held, h->total);
    if (h->shared) {
        pthread_mutex_lock(&lock);
        size_t i = nshares ? find(h->key) : nshares;
        if (i < nshares && shares[i].held) {
            shares[i].held = shares[i].held > h->shared ? shares[i].held - h->shared : 0;
            if (!shares[i].held) vacate(i);
        }
        pthread_mutex_unlock(&lock);
    }
    h->total = h->shared = 0;
}

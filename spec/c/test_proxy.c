/*
 * test_proxy.c — host/proxy.c as http.c uses it: http.trusted_proxies read at
 * start-up (addresses and CIDRs of both families, and the entries refused with
 * the message an operator sees), then the client address of a request: the
 * peer itself unless a trusted proxy names another in X-Forwarded-For (or,
 * without it, in Forwarded for=), read from the right past trusted hops.
 */
#include "sgw.h"
#include "check.h"

#include <stdio.h>
#include <string.h>

/* Sets http.trusted_proxies and reads it; proxy_init's result, err filled. */
static int trust(const char *list, char *err, size_t errlen) {
    err[0] = 0;
    if (config_set("http.trusted_proxies", list, err, errlen)) return -1;
    return proxy_init(err, errlen);
}

static void expect_accepted(const char *list) {
    char err[256], name[256];
    snprintf(name, sizeof name, "trusted_proxies '%s' accepted", list);
    check(trust(list, err, sizeof err) == 0, name, err);
}

/* The list is refused, and the message names the bad entry. */
static void expect_refused(const char *list, const char *entry) {
    char err[256], name[256], quoted[160];
    snprintf(name, sizeof name, "trusted_proxies '%s' refused, naming '%s'", list, entry);
    snprintf(quoted, sizeof quoted, "'%s'", entry);
    int rc = trust(list, err, sizeof err);
    check(rc != 0 && strstr(err, quoted) != NULL && strstr(err, "http.trusted_proxies") != NULL, name, err);
}

static void expect_trusted(const char *addr, int want) {
    char name[256];
    snprintf(name, sizeof name, "%s is %s", addr, want ? "trusted" : "not trusted");
    check(proxy_trusted(addr) == want, name, NULL);
}

/* The client proxy_client_addr gives for a request from peer. */
static void expect_client(const char *peer, const char *xff, const char *fwd, const char *want) {
    char out[64], name[512], detail[128];
    memset(out, 'x', sizeof out);
    proxy_client_addr(peer, xff, fwd, out, sizeof out);
    snprintf(name, sizeof name, "peer %s, X-Forwarded-For %s%s%s, Forwarded %s%s%s: client %s", peer,
             xff ? "'" : "", xff ? xff : "absent", xff ? "'" : "", fwd ? "'" : "", fwd ? fwd : "absent",
             fwd ? "'" : "", want);
    snprintf(detail, sizeof detail, "got %.*s", (int)strnlen(out, sizeof out), out);
    check(memchr(out, 0, sizeof out) && strcmp(out, want) == 0, name, detail);
}

/* A request (its peer and the two headers, NULL when absent) and its client. */
typedef struct client_case {
    const char *peer, *xff, *forwarded, *want;
} client_case;

static void expect_clients(const client_case *c, size_t n) {
    for (size_t i = 0; i < n; i++) expect_client(c[i].peer, c[i].xff, c[i].forwarded, c[i].want);
}

static void test_lists(void) {
    char err[256];
    expect_accepted("");
    expect_trusted("127.0.0.1", 0);
    expect_client("127.0.0.1", "203.0.113.7", NULL, "127.0.0.1");

    expect_accepted("127.0.0.1, 10.0.0.0/8,192.168.1.0/24 ,\t::1,2001:db8::/32");
    expect_trusted("127.0.0.1", 1);
    expect_trusted("127.0.0.2", 0);
    expect_trusted("10.255.1.2", 1);
    expect_trusted("11.0.0.1", 0);
    expect_trusted("192.168.1.200", 1);
    expect_trusted("192.168.2.1", 0);
    expect_trusted("::1", 1);
    expect_trusted("::2", 0);
    expect_trusted("2001:db8:ffff::1", 1);
    expect_trusted("2001:db9::1", 0);
    expect_trusted("not an address", 0);
    expect_trusted("", 0);
    /* A dual-stack socket reports IPv4 peers as IPv4-mapped IPv6. */
    expect_trusted("::ffff:10.1.2.3", 1);
    expect_trusted("::ffff:11.1.2.3", 0);
    /* An IPv4 list does not cover IPv6 addresses that merely share bytes. */
    expect_trusted("a00::1", 0);

    /* Prefixes that do not end on a byte; host bits set in the entry are
     * ignored as a CIDR would. */
    expect_accepted("172.16.0.0/12, 10.1.2.3/31, fe80::1/10");
    expect_trusted("172.31.255.255", 1);
    expect_trusted("172.32.0.0", 0);
    expect_trusted("172.15.255.255", 0);
    expect_trusted("10.1.2.2", 1);
    expect_trusted("10.1.2.4", 0);
    expect_trusted("febf::1", 1);
    expect_trusted("fec0::1", 0);

    /* /0 of a family trusts the whole family, and only it. */
    expect_accepted("0.0.0.0/0");
    expect_trusted("203.0.113.7", 1);
    expect_trusted("2001:db8::1", 0);
    expect_accepted("::/0");
    expect_trusted("2001:db8::1", 1);
    expect_trusted("203.0.113.7", 0);

    /* IPv4-mapped entries are kept as IPv4: ::ffff:10.0.0.0/104 is 10/8. */
    expect_accepted("::ffff:10.0.0.0/104");
    expect_trusted("10.9.9.9", 1);
    expect_trusted("::ffff:10.9.9.9", 1);
    expect_trusted("11.0.0.1", 0);
    expect_accepted("::ffff:192.0.2.1");
    expect_trusted("192.0.2.1", 1);
    expect_trusted("192.0.2.2", 0);

    /* Entries separated by blanks alone are entries too (the list is read
     * as blank- or comma-separated), and all of them count. */
    expect_accepted("10.0.0.1 10.0.0.2\t10.0.0.3 ::1 ::2");
    expect_trusted("10.0.0.1", 1);
    expect_trusted("10.0.0.3", 1);
    expect_trusted("::2", 1);

    expect_refused("10.0.0.1, example.com", "example.com");
    expect_refused("10.0.0.0/33", "10.0.0.0/33");
    expect_refused("::/129", "::/129");
    expect_refused("10.0.0.0/", "10.0.0.0/");
    expect_refused("10.0.0.0/-1", "10.0.0.0/-1");
    expect_refused("10.0.0.0/8x", "10.0.0.0/8x");
    expect_refused("10.0.0.0/8/8", "10.0.0.0/8/8");
    expect_refused("/8", "/8");
    expect_refused("10.0.0", "10.0.0");
    expect_refused("256.0.0.1", "256.0.0.1");
    expect_refused("::ffff:10.0.0.0/8", "::ffff:10.0.0.0/8");
    expect_refused("fe80::1%eth0", "fe80::1%eth0");
    expect_refused("127.0.0.1, 10.0.0.0/8; 192.168.0.0/16", "10.0.0.0/8;");
    char longest[200];
    memset(longest, '1', sizeof longest - 1);
    longest[sizeof longest - 1] = 0;
    check(trust(longest, err, sizeof err) != 0 && strstr(err, "'1111111111") && strlen(err) < 200,
          "an over-long entry is refused with a shortened message", err);

    /* A refused list trusts nothing: start-up stops, and nothing half-read
     * may vouch for a client meanwhile. */
    trust("10.0.0.1, nonsense", err, sizeof err);
    expect_trusted("10.0.0.1", 0);
    expect_client("10.0.0.1", "203.0.113.7", NULL, "10.0.0.1");
}

/* Behind the proxies 10.0.0.0/8, ::1 and 2001:db8::/32 (test_xff). */
static const client_case xff_cases[] = {
    /* From a peer that is not a proxy of ours, both headers are ignored. */
    { "203.0.113.9", "198.51.100.1", NULL, "203.0.113.9" },
    { "203.0.113.9", NULL, "for=198.51.100.1", "203.0.113.9" },
    { "203.0.113.9", "10.0.0.5", "for=198.51.100.1", "203.0.113.9" },
    { "2001:db9::1", "198.51.100.1", NULL, "2001:db9::1" },

    /* A trusted peer names the client. */
    { "10.0.0.1", "198.51.100.1", NULL, "198.51.100.1" },
    { "::1", "198.51.100.1", NULL, "198.51.100.1" },
    { "::ffff:10.0.0.1", "198.51.100.1", NULL, "198.51.100.1" },
    { "10.0.0.1", "2001:db9::7", NULL, "2001:db9::7" },
    /* Neither header: the peer. */
    { "10.0.0.1", NULL, NULL, "10.0.0.1" },
    { "10.0.0.1", "", "", "10.0.0.1" },

    /* Read from the right: what the caller wrote itself comes first and is
     * skipped; trusted hops are passed over. */
    { "10.0.0.1", "1.1.1.1, 198.51.100.1", NULL, "198.51.100.1" },
    { "10.0.0.1", "1.1.1.1, 198.51.100.1, 10.0.0.2, 10.3.3.3", NULL, "198.51.100.1" },
    { "10.0.0.1", "1.1.1.1,198.51.100.1,10.0.0.2", NULL, "198.51.100.1" },
    { "10.0.0.1", " 198.51.100.1 ,\t10.0.0.2\t", NULL, "198.51.100.1" },
    { "10.0.0.1", "198.51.100.1, 2001:db8::5, ::1", NULL, "198.51.100.1" },
    /* All hops trusted: the left-most one is the client as far as we know. */
    { "10.0.0.1", "10.0.0.3, 10.0.0.2", NULL, "10.0.0.3" },

    /* Ports and brackets that some proxies write. */
    { "10.0.0.1", "198.51.100.1:5555", NULL, "198.51.100.1" },
    { "10.0.0.1", "[2001:db9::7]:443", NULL, "2001:db9::7" },
    { "10.0.0.1", "[2001:db9::7]", NULL, "2001:db9::7" },
    { "10.0.0.1", "\"198.51.100.1\"", NULL, "198.51.100.1" },

    /* IPv4-mapped IPv6 entries are addresses like any other, also as a
     * trusted hop; every address comes out in one spelling. */
    { "10.0.0.1", "::ffff:198.51.100.1", NULL, "198.51.100.1" },
    { "10.0.0.1", "198.51.100.1, ::ffff:10.0.0.2", NULL, "198.51.100.1" },
    { "10.0.0.1", "[::ffff:198.51.100.1]:80", NULL, "198.51.100.1" },
    { "10.0.0.1", "0:0:0:0:0:ffff:198.51.100.1", NULL, "198.51.100.1" },
    { "10.0.0.1", "::ffff:c633:6401", NULL, "198.51.100.1" },
    { "10.0.0.1", "2001:DB9:0:0::07", NULL, "2001:db9::7" },
    { "::ffff:203.0.113.9", NULL, NULL, "203.0.113.9" },
    { "2001:DB9:0::1", "198.51.100.1", NULL, "2001:db9::1" },

    /* A value that is not an address ends the walk at the last hop a proxy
     * of ours vouched for: never past it, never a string of the caller's. */
    { "10.0.0.1", "unknown", NULL, "10.0.0.1" },
    { "10.0.0.1", "198.51.100.1, garbage", NULL, "10.0.0.1" },
    { "10.0.0.1", "garbage, 198.51.100.1", NULL, "198.51.100.1" },
    { "10.0.0.1", "198.51.100.1, garbage, 10.0.0.2", NULL, "10.0.0.2" },
    { "10.0.0.1", "198.51.100.1, , 10.0.0.2", NULL, "10.0.0.2" },
    { "10.0.0.1", "198.51.100.1,", NULL, "10.0.0.1" },
    { "10.0.0.1", ",", NULL, "10.0.0.1" },
    { "10.0.0.1", "   ", NULL, "10.0.0.1" },
    { "10.0.0.1", "\"\"", NULL, "10.0.0.1" },
    { "10.0.0.1", "\"", NULL, "10.0.0.1" },
    { "10.0.0.1", "[2001:db9::7", NULL, "10.0.0.1" },
    { "10.0.0.1", "[]", NULL, "10.0.0.1" },
    { "10.0.0.1", "2001:db9::7:443:x", NULL, "10.0.0.1" },
    { "10.0.0.1", "198.51.100.1/24", NULL, "10.0.0.1" },
    { "10.0.0.1", "<script>", NULL, "10.0.0.1" },
};

static void test_xff(void) {
    char err[256];
    if (trust("10.0.0.0/8, ::1, 2001:db8::/32", err, sizeof err)) {
        check(0, "the proxies of test_xff", err);
        return;
    }
    expect_clients(xff_cases, sizeof xff_cases / sizeof *xff_cases);

    /* Over-long values: an entry longer than any address is not one, and a
     * header of many entries is read to the end without harm. */
    static char big[70000];
    memset(big, '1', sizeof big - 1);
    big[sizeof big - 1] = 0;
    expect_client("10.0.0.1", big, NULL, "10.0.0.1");
    size_t n = 0;
    while (n + 12 < sizeof big) n += (size_t)snprintf(big + n, sizeof big - n, "10.0.0.9, ");
    snprintf(big + n, sizeof big - n, "10.0.0.8");
    expect_client("10.0.0.1", big, NULL, "10.0.0.9");
    memcpy(big, "198.51.100.1", 12);  /* "198.51.100.1.0.9, 10.0.0.9, ..." */
    expect_client("10.0.0.1", big, NULL, "10.0.0.9");
    memcpy(big, "198.51.100.1,       ", 20);  /* over the first two entries */
    expect_client("10.0.0.1", big, NULL, "198.51.100.1");

    /* The client is cut to the caller's buffer, never overrun. */
    char small[8];
    proxy_client_addr("10.0.0.1", "198.51.100.1", NULL, small, sizeof small);
    check(strcmp(small, "198.51.") == 0, "the client is cut to the buffer", small);
}

/* Behind the proxies 10.0.0.0/8 and ::1 (test_forwarded). */
static const client_case forwarded_cases[] = {
    { "10.0.0.1", NULL, "for=198.51.100.1", "198.51.100.1" },
    { "10.0.0.1", "", "for=198.51.100.1", "198.51.100.1" },
    { "10.0.0.1", NULL, "For=198.51.100.1", "198.51.100.1" },
    { "10.0.0.1", NULL, "for=\"198.51.100.1\"", "198.51.100.1" },
    { "10.0.0.1", NULL, "for=\"198.51.100.1:8080\"", "198.51.100.1" },
    { "10.0.0.1", NULL, "for=\"[2001:db8::7]\"", "2001:db8::7" },
    { "10.0.0.1", NULL, "for=\"[2001:db8::7]:4711\"", "2001:db8::7" },
    { "10.0.0.1", NULL, "for=\"[::ffff:198.51.100.1]\"", "198.51.100.1" },
    /* for= among other pairs of an element. */
    { "10.0.0.1", NULL, "proto=https;for=198.51.100.1;by=10.0.0.1", "198.51.100.1" },
    { "10.0.0.1", NULL, "by=10.0.0.1; for=198.51.100.1", "198.51.100.1" },
    { "10.0.0.1", NULL, "for=198.51.100.1;proto=https", "198.51.100.1" },

    /* Several elements: from the right, past the trusted ones. */
    { "10.0.0.1", NULL, "for=1.1.1.1, for=198.51.100.1, for=10.0.0.2", "198.51.100.1" },
    { "10.0.0.1", NULL, "for=1.1.1.1,for=198.51.100.1;proto=http,for=\"[::1]:80\"", "198.51.100.1" },
    { "10.0.0.1", NULL, "for=10.0.0.3, for=10.0.0.2", "10.0.0.3" },

    /* Quoted values may hold "," and ";": neither ends an element or a pair. */
    { "10.0.0.1", NULL, "for=198.51.100.1;host=\"a,b\"", "198.51.100.1" },
    { "10.0.0.1", NULL, "by=\"x;for=10.0.0.9\";for=198.51.100.1", "198.51.100.1" },
    { "10.0.0.1", NULL, "for=1.1.1.1, for=198.51.100.1;ext=\"a\\\"b,for=10.0.0.9\", for=10.0.0.2", "198.51.100.1" },

    /* X-Forwarded-For wins when present. */
    { "10.0.0.1", "198.51.100.2", "for=198.51.100.1", "198.51.100.2" },

    /* Obfuscated identifiers and "unknown" (RFC 7239 6.2, 6.3) name no
     * address: the client is the last hop vouched for. */
    { "10.0.0.1", NULL, "for=_hidden", "10.0.0.1" },
    { "10.0.0.1", NULL, "for=unknown", "10.0.0.1" },
    { "10.0.0.1", NULL, "for=\"_gazonk\", for=10.0.0.2", "10.0.0.2" },
    { "10.0.0.1", NULL, "for=198.51.100.1, for=\"[_secret]:80\"", "10.0.0.1" },
    /* An element without for=, an empty for=, garbage: the same. */
    { "10.0.0.1", NULL, "proto=https", "10.0.0.1" },
    { "10.0.0.1", NULL, "for=198.51.100.1, proto=https", "10.0.0.1" },
    { "10.0.0.1", NULL, "for=", "10.0.0.1" },
    { "10.0.0.1", NULL, "for=\"\"", "10.0.0.1" },
    { "10.0.0.1", NULL, "for", "10.0.0.1" },
    { "10.0.0.1", NULL, ";;;", "10.0.0.1" },
    { "10.0.0.1", NULL, "198.51.100.1", "10.0.0.1" },
    { "10.0.0.1", NULL, "forx=198.51.100.1", "10.0.0.1" },

    /* An untrusted peer's Forwarded is ignored like its X-Forwarded-For. */
    { "198.51.100.50", NULL, "for=198.51.100.1", "198.51.100.50" },
};

static void test_forwarded(void) {
    char err[256];
    if (trust("10.0.0.0/8, ::1", err, sizeof err)) {
        check(0, "the proxies of test_forwarded", err);
        return;
    }
    expect_clients(forwarded_cases, sizeof forwarded_cases / sizeof *forwarded_cases);
}

int main(void) {
    char err[512];
    if (config_load_file("config/sgw.conf", 1, err, sizeof err)) {
        printf("FAIL config: %s\n", err);
        return 1;
    }
    test_lists();
    test_xff();
    test_forwarded();
    trust("", err, sizeof err);
    config_free();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

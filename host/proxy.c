/*
 * proxy.c — the client address of a request behind trusted proxies.
 *
 * Only a socket peer inside http.trusted_proxies may name the client: then
 * X-Forwarded-For (or, when it is absent, the for= parameters of Forwarded,
 * RFC 7239) is read from the right, skipping addresses that are themselves
 * trusted proxies; the first one that is not is the client. From any other
 * peer both headers are ignored, so a caller cannot choose its own address
 * (and with it its anonymous rate-limit bucket). The proxy must append to
 * the header it writes and drop the other one (README: behind a proxy).
 */
#include "sgw.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct cidr {
    int           family;     /* AF_INET or AF_INET6 */
    unsigned char addr[16];
    int           bits;
} cidr;

static cidr *trusted;
static int   ntrusted;

/* Parses an address (IPv4 or IPv6, an IPv4-mapped IPv6 one taken as IPv4)
 * into family/bytes; 0 ok. */
static int parse_addr(const char *s, int *family, unsigned char out[16]) {
    struct in6_addr a6;
    if (inet_pton(AF_INET, s, out) == 1) {
        *family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, s, &a6) == 1) {
        static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        if (memcmp(a6.s6_addr, mapped, 12) == 0) {
            memcpy(out, a6.s6_addr + 12, 4);
            *family = AF_INET;
        } else {
            memcpy(out, a6.s6_addr, 16);
            *family = AF_INET6;
        }
        return 0;
    }
    return -1;
}

static int in_cidr(const cidr *c, int family, const unsigned char *a) {
    if (c->family != family) return 0;
    int full = c->bits / 8, rest = c->bits % 8;
    if (memcmp(c->addr, a, (size_t)full) != 0) return 0;
    if (!rest) return 1;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (c->addr[full] & mask) == (a[full] & mask);
}

static int is_trusted(int family, const unsigned char *a) {
    for (int i = 0; i < ntrusted; i++)
        if (in_cidr(&trusted[i], family, a)) return 1;
    return 0;
}

int proxy_trusted(const char *addr) {
    int family;
    unsigned char a[16];
    return ntrusted && parse_addr(addr, &family, a) == 0 && is_trusted(family, a);
}

int proxy_init(char *err, size_t errlen) {
    const char *list = config_str("http.trusted_proxies");
    free(trusted);
    trusted = NULL;
    ntrusted = 0;
    /* Entries are separated by commas or blanks: one more than there are
     * separators is room enough for them all. */
    int cap = 1;
    for (const char *p = list; *p; p++) cap += *p == ',' || *p == ' ' || *p == '\t';
    trusted = calloc((size_t)cap, sizeof *trusted);
    if (!trusted) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\t') p++;
        if (!*p) break;
        size_t len = strcspn(p, ", \t");
        char item[80];
        if (len >= sizeof item) goto bad;
        memcpy(item, p, len);
        item[len] = 0;
        char *slash = strchr(item, '/');
        if (slash) *slash = 0;
        cidr *c = &trusted[ntrusted];
        if (parse_addr(item, &c->family, c->addr)) goto bad;
        int max = c->family == AF_INET ? 32 : 128;
        c->bits = max;
        if (slash) {
            char *end;
            long bits = strtol(slash + 1, &end, 10);
            if (!slash[1] || *end || bits < 0 || bits > 128) goto bad;
            /* An IPv4-mapped ::ffff:a.b.c.d/n is kept as a.b.c.d/(n - 96). */
            if (c->family == AF_INET && strchr(item, ':')) bits -= 96;
            if (bits < 0 || bits > max) goto bad;
            c->bits = (int)bits;
        }
        ntrusted++;
        p += len;
        continue;
    bad:
        snprintf(err, errlen, "http.trusted_proxies: '%.*s' is not an address or CIDR (e.g. 10.0.0.0/8, ::1)",
                 (int)(len > 80 ? 80 : len), p);
        ntrusted = 0;   /* the entries read before it vouch for no one */
        return -1;
    }
    return 0;
}

/* Copies the address of one X-Forwarded-For entry or Forwarded for= value
 * (quotes, brackets and a port removed) into out; 0 when it is an address. */
static int node_addr(const char *s, size_t n, char *out, size_t outlen, int *family, unsigned char a[16]) {
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') s++, n -= 2;
    if (n && s[0] == '[') {                       /* [v6] or [v6]:port */
        const char *close = memchr(s, ']', n);
        if (!close) return -1;
        s++;
        n = (size_t)(close - s);
    } else {
        /* a.b.c.d:port has a single colon, after the dots; an IPv6 address
         * has more than one (also ::ffff:a.b.c.d, which is kept whole). */
        const char *colon = memchr(s, ':', n);
        if (colon && memchr(s, '.', (size_t)(colon - s)) && !memchr(colon + 1, ':', n - (size_t)(colon + 1 - s)))
            n = (size_t)(colon - s);
    }
    if (n == 0 || n >= outlen) return -1;
    memcpy(out, s, n);
    out[n] = 0;
    return parse_addr(out, family, a);
}

/* The first c in [s, end) outside a quoted string, or NULL: a Forwarded
 * value may be quoted (RFC 7239 4), and a quoted one may hold "," and ";"
 * (and \-escaped quotes). */
static const char *unquoted_chr(const char *s, const char *end, char c) {
    int quoted = 0;
    for (const char *p = s; p < end; p++) {
        if (quoted && *p == '\\' && p + 1 < end) p++;
        else if (*p == '"') quoted = !quoted;
        else if (!quoted && *p == c) return p;
    }
    return NULL;
}

/* Where the Forwarded element that ends at end begins: after the last ","
 * before it outside a quoted string. */
static const char *element_start(const char *list, const char *end) {
    const char *start = list, *comma;
    while ((comma = unquoted_chr(start, end, ','))) start = comma + 1;
    return start;
}

/* The for= value of one Forwarded element (";"-separated pairs), or NULL. */
static const char *forwarded_for(const char *s, size_t n, size_t *vlen) {
    const char *end = s + n;
    while (s < end) {
        while (s < end && (*s == ' ' || *s == ';')) s++;
        const char *pair_end = unquoted_chr(s, end, ';');
        if (!pair_end) pair_end = end;
        if (pair_end - s > 4 && strncasecmp(s, "for=", 4) == 0) {
            *vlen = (size_t)(pair_end - s - 4);
            return s + 4;
        }
        s = pair_end;
    }
    return NULL;
}

/* Writes an address in its one spelling (inet_ntop: an IPv4-mapped one as
 * IPv4, IPv6 in lower case with :: compressed), so that every limit and log
 * line keyed on the client address sees one string per client. */
static void canonical(int family, const unsigned char a[16], char *out, size_t outlen) {
    char text[INET6_ADDRSTRLEN];
    if (inet_ntop(family, a, text, sizeof text)) snprintf(out, outlen, "%s", text);
}

void proxy_client_addr(const char *peer, const char *xff, const char *forwarded, char *out, size_t outlen) {
    snprintf(out, outlen, "%s", peer);
    int peer_family;
    unsigned char peer_a[16];
    if (parse_addr(peer, &peer_family, peer_a) == 0) canonical(peer_family, peer_a, out, outlen);
    if (!proxy_trusted(peer)) return;
    const char *list = xff && *xff ? xff : forwarded;
    if (!list || !*list) return;
    int is_xff = list == xff;
    /* From the right: each hop a trusted proxy vouches for, until one that
     * is not a proxy of ours. A value that is not an address ends the walk
     * at the last hop vouched for. */
    const char *end = list + strlen(list);
    while (end > list) {
        const char *start = end;
        if (is_xff)
            while (start > list && start[-1] != ',') start--;
        else
            start = element_start(list, end);
        const char *v = start;
        size_t vn = (size_t)(end - start);
        if (!is_xff && !(v = forwarded_for(start, vn, &vn))) return;
        char addr[64];
        int family;
        unsigned char a[16];
        if (node_addr(v, vn, addr, sizeof addr, &family, a)) return;
        canonical(family, a, out, outlen);
        if (!is_trusted(family, a)) return;
        end = start > list ? start - 1 : list;
    }
}

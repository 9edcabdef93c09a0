/*
 * crypto.c — the cryptographic primitives the host and Lua share: random
 * bytes and tokens, SHA-256 and HMAC, constant-time comparison, base64 and
 * hex codecs, AES-256-GCM sealing and Argon2id password hashing, exposed to
 * Lua as the global `crypto` (docs/host-api.md).
 *
 * Memory discipline: a Lua allocation may raise (memory ceiling), so every
 * scratch buffer that Lua might abandon is a userdata (collected), and C-side
 * objects such as an EVP_CIPHER_CTX never live across a call that can raise.
 */
#include "sgw.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <argon2.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

/* Argon2id parameters (OWASP's minimum for argon2id: m=19 MiB, t=2, p=1). */
#define ARGON2_T        2u
#define ARGON2_M_KIB    19456u
#define ARGON2_P        1u
#define ARGON2_SALT_LEN 16u
#define ARGON2_HASH_LEN 32u
/* Encoded hashes come from our own database, but a forged one could ask for
 * gigabytes or minutes of work; refuse parameters far beyond ours. */
#define ARGON2_MAX_M_KIB (256u * 1024u)
#define ARGON2_MAX_T     16u
#define ARGON2_MAX_P     8u

#define GCM_KEY_LEN   32
#define GCM_NONCE_LEN 12
#define GCM_TAG_LEN   16

/* Bounds on sizes Lua asks for, so a typo cannot allocate gigabytes. */
#define MAX_RANDOM_BYTES (1u << 20)
#define MAX_TOKEN_CHARS  4096

static const char B62[] =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
static const char B64_STD[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char B64_URL[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
static const char HEX[] = "0123456789abcdef";

/* ------------------------------------------------------------ randomness */

int crypto_random(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        int chunk = n > INT_MAX ? INT_MAX : (int)n;
        if (RAND_bytes(p, chunk) != 1) {
            /* OpenSSL's DRBG failing is near impossible, but the kernel is
             * the same ultimate source, so ask it directly before giving up. */
            size_t got = 0;
            while (got < (size_t)chunk) {
                ssize_t r = getrandom(p + got, (size_t)chunk - got, 0);
                if (r < 0) {
                    if (errno == EINTR)
                        continue;
                    return -1;
                }
                got += (size_t)r;
            }
        }
        p += chunk;
        n -= (size_t)chunk;
    }
    return 0;
}

void crypto_random_base62(char *out, size_t n)
{
    unsigned char pool[64];
    size_t have = 0, used = 0, i = 0;
    while (i < n) {
        if (used == have) {
            /* Tokens are secrets: a predictable one is worse than a crash. */
            if (crypto_random(pool, sizeof pool) != 0)
                abort();
            have = sizeof pool;
            used = 0;
        }
        unsigned char b = pool[used++];
        /* 248 = 4 * 62: accepting only bytes below it makes each of the 62
         * characters exactly equally likely. */
        if (b < 248)
            out[i++] = B62[b % 62];
    }
    out[n] = '\0';
    OPENSSL_cleanse(pool, sizeof pool);
}

/* Drawing from the CSPRNG once per request cost more than the rest of a
 * request id (OpenSSL's per-call locking and lookups): ids come from a
 * per-thread buffer of its output instead, 4 KB a call (512 bytes still
 * showed in profiles). Same quality, fetched in bulk. */
void crypto_random_id(char *out, size_t n)
{
    static _Thread_local unsigned char pool[4096];
    static _Thread_local size_t used = sizeof pool;
    size_t i = 0;
    while (i < n) {
        if (used == sizeof pool) {
            if (crypto_random(pool, sizeof pool) != 0)
                abort();
            used = 0;
        }
        unsigned char b = pool[used];
        pool[used++] = 0;            /* no byte is handed out twice */
        if (b < 248)                 /* as in crypto_random_base62 */
            out[i++] = B62[b % 62];
    }
    out[n] = '\0';
}

/* ------------------------------------------------------------- helpers */

/* A scratch buffer owned by the Lua GC, left on the stack. */
static unsigned char *scratch(lua_State *L, size_t n)
{
    return lua_newuserdatauv(L, n ? n : 1, 0);
}

static void push_hex(lua_State *L, const unsigned char *s, size_t n)
{
    luaL_Buffer b;
    char *out = luaL_buffinitsize(L, &b, n * 2);
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = HEX[s[i] >> 4];
        out[2 * i + 1] = HEX[s[i] & 15];
    }
    luaL_pushresultsize(&b, n * 2);
}

static int opt_string_arg(lua_State *L, int idx, const char **s, size_t *len)
{
    if (lua_isnoneornil(L, idx)) {
        *s = NULL;
        *len = 0;
        return 0;
    }
    *s = luaL_checklstring(L, idx, len);
    return 1;
}

/* ---------------------------------------------------------- digests/MACs */

/* Fetched once: EVP_sha256() makes OpenSSL look the implementation up (under
 * a lock) on every digest, and credentials are hashed on every request. Each
 * thread keeps one digest context too (EVP_Digest would allocate and free
 * one per call); it is freed when the thread ends. */
static EVP_MD        *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static pthread_key_t  sha256_ctx_key;
static _Thread_local EVP_MD_CTX *sha256_ctx;

static void free_sha256_ctx(void *ctx)
{
    EVP_MD_CTX_free(ctx);
}

static void fetch_sha256(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
    pthread_key_create(&sha256_ctx_key, free_sha256_ctx);
}

static void sha256(const char *s, size_t n, unsigned char out[32])
{
    unsigned int len = 32;
    pthread_once(&sha256_once, fetch_sha256);
    if (!sha256_ctx && sha256_md && (sha256_ctx = EVP_MD_CTX_new()) != NULL)
        pthread_setspecific(sha256_ctx_key, sha256_ctx);
    if (sha256_ctx && EVP_DigestInit_ex2(sha256_ctx, sha256_md, NULL) == 1 &&
        EVP_DigestUpdate(sha256_ctx, s, n) == 1 && EVP_DigestFinal_ex(sha256_ctx, out, &len) == 1)
        return;
    if (EVP_Digest(s, n, out, &len, sha256_md ? sha256_md : EVP_sha256(), NULL) != 1)
        abort(); /* only fails when the library itself is broken */
}

static int l_sha256(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    unsigned char md[32];
    sha256(s, n, md);
    lua_pushlstring(L, (const char *)md, sizeof md);
    return 1;
}

static int l_sha256_hex(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    unsigned char md[32];
    sha256(s, n, md);
    push_hex(L, md, sizeof md);
    return 1;
}

static void hmac256(lua_State *L, unsigned char out[32])
{
    size_t klen, mlen;
    const char *key = luaL_checklstring(L, 1, &klen);
    const char *msg = luaL_checklstring(L, 2, &mlen);
    unsigned int len = 32;
    if (klen > INT_MAX)
        luaL_argerror(L, 1, "key too long");
    if (!HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, mlen, out, &len))
        luaL_error(L, "hmac_sha256 failed");
}

static int l_hmac_sha256(lua_State *L)
{
    unsigned char md[32];
    hmac256(L, md);
    lua_pushlstring(L, (const char *)md, sizeof md);
    return 1;
}

static int l_hmac_sha256_hex(lua_State *L)
{
    unsigned char md[32];
    hmac256(L, md);
    push_hex(L, md, sizeof md);
    return 1;
}

/* ------------------------------------------------------- random for Lua */

static int l_random_bytes(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0 && n <= (lua_Integer)MAX_RANDOM_BYTES, 1, "out of range");
    luaL_Buffer b;
    char *out = luaL_buffinitsize(L, &b, (size_t)n);
    if (crypto_random(out, (size_t)n) != 0)
        return luaL_error(L, "random source failed");
    luaL_pushresultsize(&b, (size_t)n);
    return 1;
}

static int l_random_token(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0 && n <= MAX_TOKEN_CHARS, 1, "out of range");
    char buf[MAX_TOKEN_CHARS + 1];
    crypto_random_base62(buf, (size_t)n);
    lua_pushlstring(L, buf, (size_t)n);
    OPENSSL_cleanse(buf, (size_t)n);
    return 1;
}

static int l_constant_eq(lua_State *L)
{
    size_t alen, blen;
    const char *a = luaL_checklstring(L, 1, &alen);
    const char *b = luaL_checklstring(L, 2, &blen);
    /* Lengths are not secret (a MAC or token has a fixed size). */
    lua_pushboolean(L, alen == blen && CRYPTO_memcmp(a, b, alen) == 0);
    return 1;
}

/* ---------------------------------------------------------------- base64 */

static void push_b64(lua_State *L, const unsigned char *s, size_t n,
                     const char *alpha, int pad)
{
    size_t full = n / 3, rest = n % 3;
    size_t outlen = full * 4 + (rest ? (pad ? 4 : rest + 1) : 0);
    luaL_Buffer b;
    char *o = luaL_buffinitsize(L, &b, outlen);
    size_t j = 0;
    for (size_t i = 0; i < full * 3; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        o[j++] = alpha[v >> 18 & 63];
        o[j++] = alpha[v >> 12 & 63];
        o[j++] = alpha[v >> 6 & 63];
        o[j++] = alpha[v & 63];
    }
    if (rest) {
        uint32_t v = (uint32_t)s[full * 3] << 16;
        if (rest == 2)
            v |= (uint32_t)s[full * 3 + 1] << 8;
        o[j++] = alpha[v >> 18 & 63];
        o[j++] = alpha[v >> 12 & 63];
        if (rest == 2)
            o[j++] = alpha[v >> 6 & 63];
        else if (pad)
            o[j++] = '=';
        if (pad)
            o[j++] = '=';
    }
    luaL_pushresultsize(&b, j);
}

static int b64_value(unsigned char c, int url)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == (url ? '-' : '+')) return 62;
    if (c == (url ? '_' : '/')) return 63;
    return -1;
}

/* Strict decoder: only the alphabet, padding only at the end, no stray
 * bits in the last symbol (so every byte string has one encoding). Standard
 * base64 must be padded; base64url may be either. Pushes the result or
 * nil. */
static int push_b64_decoded(lua_State *L, const char *s, size_t n, int url)
{
    size_t npad = 0;
    while (npad < 2 && n > npad && s[n - 1 - npad] == '=')
        npad++;
    if ((npad > 0 || !url) && n % 4 != 0)
        goto bad;
    size_t m = n - npad;                 /* symbols */
    if (m % 4 == 1 || (npad > 0 && 4 - m % 4 != npad))
        goto bad;
    for (size_t i = 0; i < m; i++)
        if (b64_value((unsigned char)s[i], url) < 0)
            goto bad;
    /* The last symbol of a partial group carries 4 (2 bytes short) or 2
     * (1 byte short) bits beyond the data; they must be zero. */
    if (m % 4 == 2 && (b64_value((unsigned char)s[m - 1], url) & 15) != 0)
        goto bad;
    if (m % 4 == 3 && (b64_value((unsigned char)s[m - 1], url) & 3) != 0)
        goto bad;

    size_t outlen = m / 4 * 3 + (m % 4 ? m % 4 - 1 : 0);
    luaL_Buffer b;
    unsigned char *o = (unsigned char *)luaL_buffinitsize(L, &b, outlen);
    size_t j = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < m; i++) {
        acc = (acc << 6 | (uint32_t)b64_value((unsigned char)s[i], url)) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[j++] = (unsigned char)(acc >> bits);
        }
    }
    luaL_pushresultsize(&b, j);
    return 1;
bad:
    lua_pushnil(L);
    return 1;
}

static int l_base64_encode(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    push_b64(L, (const unsigned char *)s, n, B64_STD, 1);
    return 1;
}

static int l_base64_decode(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    return push_b64_decoded(L, s, n, 0);
}

static int l_base64url_encode(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    push_b64(L, (const unsigned char *)s, n, B64_URL, 0);
    return 1;
}

static int l_base64url_decode(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    return push_b64_decoded(L, s, n, 1);
}

/* ------------------------------------------------------------------- hex */

static int l_hex_encode(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    push_hex(L, (const unsigned char *)s, n);
    return 1;
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int l_hex_decode(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    if (n % 2 != 0) {
        lua_pushnil(L);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (hex_value((unsigned char)s[i]) < 0) {
            lua_pushnil(L);
            return 1;
        }
    }
    luaL_Buffer b;
    char *o = luaL_buffinitsize(L, &b, n / 2);
    for (size_t i = 0; i < n / 2; i++)
        o[i] = (char)(hex_value((unsigned char)s[2 * i]) << 4 |
                      hex_value((unsigned char)s[2 * i + 1]));
    luaL_pushresultsize(&b, n / 2);
    return 1;
}

/* ------------------------------------------------------------- AES-GCM */

static const char *check_key(lua_State *L)
{
    size_t klen;
    const char *key = luaL_checklstring(L, 1, &klen);
    if (klen != GCM_KEY_LEN)
        luaL_argerror(L, 1, "key must be 32 bytes");
    return key;
}

static int l_aes_gcm_encrypt(lua_State *L)
{
    const char *key = check_key(L);
    size_t plen, alen;
    const char *pt = luaL_checklstring(L, 2, &plen);
    const char *aad;
    int has_aad = opt_string_arg(L, 3, &aad, &alen);
    if (plen > (size_t)INT_MAX - 64 || alen > INT_MAX)
        return luaL_argerror(L, 2, "too long");

    size_t total = GCM_NONCE_LEN + plen + GCM_TAG_LEN;
    unsigned char *out = scratch(L, total);   /* allocated before ctx exists */
    if (crypto_random(out, GCM_NONCE_LEN) != 0)
        return luaL_error(L, "random source failed");

    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int ok = ctx != NULL, len = 0;
    ok = ok && EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1;
    ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, GCM_NONCE_LEN, NULL) == 1;
    ok = ok && EVP_EncryptInit_ex(ctx, NULL, NULL, (const unsigned char *)key, out) == 1;
    if (ok && has_aad && alen > 0)
        ok = EVP_EncryptUpdate(ctx, NULL, &len, (const unsigned char *)aad, (int)alen) == 1;
    int ctlen = 0;
    if (ok && plen > 0) {
        ok = EVP_EncryptUpdate(ctx, out + GCM_NONCE_LEN, &len,
                               (const unsigned char *)pt, (int)plen) == 1;
        ctlen = len;
    }
    ok = ok && EVP_EncryptFinal_ex(ctx, out + GCM_NONCE_LEN + ctlen, &len) == 1;
    ctlen += ok ? len : 0;
    ok = ok && (size_t)ctlen == plen;
    ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, GCM_TAG_LEN,
                                   out + GCM_NONCE_LEN + plen) == 1;
    EVP_CIPHER_CTX_free(ctx);
    if (!ok)
        return luaL_error(L, "aes_gcm_encrypt failed");
    lua_pushlstring(L, (const char *)out, total);
    return 1;
}

static int l_aes_gcm_decrypt(lua_State *L)
{
    const char *key = check_key(L);
    size_t blen, alen;
    const unsigned char *blob = (const unsigned char *)luaL_checklstring(L, 2, &blen);
    const char *aad;
    int has_aad = opt_string_arg(L, 3, &aad, &alen);
    if (blen < GCM_NONCE_LEN + GCM_TAG_LEN) {
        lua_pushnil(L);
        lua_pushliteral(L, "authentication failed");
        return 2;
    }
    if (blen > (size_t)INT_MAX || alen > INT_MAX)
        return luaL_argerror(L, 2, "too long");

    size_t ctlen = blen - GCM_NONCE_LEN - GCM_TAG_LEN;
    unsigned char *out = scratch(L, ctlen);
    unsigned char tag[GCM_TAG_LEN];
    memcpy(tag, blob + blen - GCM_TAG_LEN, GCM_TAG_LEN);

    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int ok = ctx != NULL, len = 0, ptlen = 0;
    ok = ok && EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1;
    ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, GCM_NONCE_LEN, NULL) == 1;
    ok = ok && EVP_DecryptInit_ex(ctx, NULL, NULL, (const unsigned char *)key, blob) == 1;
    if (ok && has_aad && alen > 0)
        ok = EVP_DecryptUpdate(ctx, NULL, &len, (const unsigned char *)aad, (int)alen) == 1;
    if (ok && ctlen > 0) {
        ok = EVP_DecryptUpdate(ctx, out, &len, blob + GCM_NONCE_LEN, (int)ctlen) == 1;
        ptlen = len;
    }
    ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, GCM_TAG_LEN, tag) == 1;
    /* Final is where the tag is checked: its failure is the forgery case. */
    ok = ok && EVP_DecryptFinal_ex(ctx, out + ptlen, &len) == 1;
    EVP_CIPHER_CTX_free(ctx);
    if (!ok) {
        OPENSSL_cleanse(out, ctlen);
        lua_pushnil(L);
        lua_pushliteral(L, "authentication failed");
        return 2;
    }
    ptlen += len;
    lua_pushlstring(L, (const char *)out, (size_t)ptlen);
    OPENSSL_cleanse(out, ctlen);
    return 1;
}

/* --------------------------------------------------------------- argon2 */

/* Argon2 takes tens of milliseconds of CPU by design. On a socket thread it
 * would stall every connection of that thread, so the request migrates to
 * its worker's thread first (SGW_MIGRATE_IF_SOCKET); there the hash runs on
 * the thread pool (offload.c) while the loop goes on with its other
 * coroutines. Where nothing can wait (the CLI, code that cannot yield) it
 * runs in place. */
#define ENCODED_MAX 256             /* our encoded hashes are about 100 bytes */

typedef struct argon2_job {
    sgw_job       base;
    int           verify;           /* 0: hash */
    int           rc;
    size_t        plen, elen;
    char         *pwd;              /* copies, in data */
    char         *enc;              /* hash: the answer (elen bytes); verify: the stored hash */
    unsigned char salt[ARGON2_SALT_LEN];
    char          data[];
} argon2_job;

static void argon2_job_run(sgw_job *j)
{
    argon2_job *a = (argon2_job *)j;
    if (a->verify)
        a->rc = argon2id_verify(a->enc, a->pwd, a->plen);
    else
        a->rc = argon2id_hash_encoded(ARGON2_T, ARGON2_M_KIB, ARGON2_P, a->pwd, a->plen, a->salt,
                                      sizeof a->salt, ARGON2_HASH_LEN, a->enc, a->elen);
}

static void argon2_job_dispose(sgw_job *j)
{
    argon2_job *a = (argon2_job *)j;
    OPENSSL_cleanse(a->data, a->plen + a->elen + 2);
    free(a);
}

/* A job for pwd and (verify) the stored hash enc, or (hash) room for one. */
static argon2_job *argon2_job_new(lua_State *L, int verify, const char *pwd, size_t plen,
                                  const char *enc, size_t elen)
{
    argon2_job *a = malloc(sizeof *a + plen + elen + 2);
    if (a == NULL) {
        luaL_error(L, "not enough memory");
        return NULL;
    }
    memset(a, 0, sizeof *a);
    a->base.run = argon2_job_run;
    a->base.dispose = argon2_job_dispose;
    a->verify = verify;
    a->plen = plen;
    a->elen = elen;
    a->pwd = a->data;
    memcpy(a->pwd, pwd, plen);
    a->pwd[plen] = '\0';
    a->enc = a->data + plen + 1;
    if (enc)
        memcpy(a->enc, enc, elen);
    a->enc[elen] = '\0';
    return a;
}

/* The results of a job that has run; disposes of it first (what is pushed
 * is copied out, so a memory error while pushing leaks nothing). */
static int argon2_results(lua_State *L, argon2_job *a)
{
    int verify = a->verify, rc = a->rc;
    char enc[ENCODED_MAX];
    if (!verify && rc == ARGON2_OK)
        memcpy(enc, a->enc, a->elen + 1);
    a->base.dispose(&a->base);
    if (verify) {
        lua_pushboolean(L, rc == ARGON2_OK);
        return 1;
    }
    if (rc != ARGON2_OK) {
        /* Typically memory exhaustion: an I/O-like failure, not misuse. */
        lua_pushnil(L);
        lua_pushstring(L, argon2_error_message(rc));
        return 2;
    }
    lua_pushstring(L, enc);
    return 1;
}

static int argon2_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    return argon2_results(L, (argon2_job *)ctx);
}

/* Runs a on the pool when L may wait for it, else here. */
static int argon2_go(lua_State *L, argon2_job *a)
{
    sgw_inbox *in = offload_usable(L);
    if (in) {
        offload_submit(in, &a->base, L);
        lua_pushlightuserdata(L, in);
        return lua_yieldk(L, 1, (lua_KContext)a, argon2_k);
    }
    a->base.run(&a->base);
    return argon2_results(L, a);
}

static int argon2id_hash_run(lua_State *L)
{
    size_t plen;
    const char *pwd = luaL_checklstring(L, 1, &plen);
    if (plen > UINT32_MAX)
        return luaL_argerror(L, 1, "too long");
    size_t elen = argon2_encodedlen(ARGON2_T, ARGON2_M_KIB, ARGON2_P,
                                    ARGON2_SALT_LEN, ARGON2_HASH_LEN, Argon2_id);
    if (elen >= ENCODED_MAX)
        return luaL_error(L, "argon2: encoded hash too long");
    unsigned char salt[ARGON2_SALT_LEN];
    if (crypto_random(salt, sizeof salt) != 0)
        return luaL_error(L, "random source failed");
    argon2_job *a = argon2_job_new(L, 0, pwd, plen, NULL, elen);
    memcpy(a->salt, salt, sizeof salt);
    return argon2_go(L, a);
}

/* Reads m, t and p from "$argon2id$v=19$m=..,t=..,p=..$salt$hash". */
static int argon2_params_ok(const char *enc)
{
    unsigned long m, t, p;
    int used = 0;
    const char *q = strstr(enc, "$m=");
    if (strncmp(enc, "$argon2id$", 10) != 0 || q == NULL)
        return 0;
    if (sscanf(q, "$m=%lu,t=%lu,p=%lu$%n", &m, &t, &p, &used) != 3 || used == 0)
        return 0;
    return m <= ARGON2_MAX_M_KIB && t >= 1 && t <= ARGON2_MAX_T &&
           p >= 1 && p <= ARGON2_MAX_P;
}

static int argon2id_verify_run(lua_State *L)
{
    size_t elen, plen;
    const char *enc = luaL_checklstring(L, 1, &elen);
    const char *pwd = luaL_checklstring(L, 2, &plen);
    if (plen > UINT32_MAX || strlen(enc) != elen || !argon2_params_ok(enc)) {
        lua_pushboolean(L, 0);
        return 1;
    }
    return argon2_go(L, argon2_job_new(L, 1, pwd, plen, enc, elen));
}

static int argon2id_hash_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    return argon2id_hash_run(L);
}

static int l_argon2id_hash(lua_State *L)
{
    SGW_MIGRATE_IF_SOCKET(L, argon2id_hash_k);
    return argon2id_hash_run(L);
}

static int argon2id_verify_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    return argon2id_verify_run(L);
}

static int l_argon2id_verify(lua_State *L)
{
    SGW_MIGRATE_IF_SOCKET(L, argon2id_verify_k);
    return argon2id_verify_run(L);
}

/* ------------------------------------------------------------- register */

static const luaL_Reg crypto_funcs[] = {
    {"sha256", l_sha256},
    {"sha256_hex", l_sha256_hex},
    {"hmac_sha256", l_hmac_sha256},
    {"hmac_sha256_hex", l_hmac_sha256_hex},
    {"random_bytes", l_random_bytes},
    {"random_token", l_random_token},
    {"constant_eq", l_constant_eq},
    {"base64_encode", l_base64_encode},
    {"base64_decode", l_base64_decode},
    {"base64url_encode", l_base64url_encode},
    {"base64url_decode", l_base64url_decode},
    {"hex_encode", l_hex_encode},
    {"hex_decode", l_hex_decode},
    {"aes_gcm_encrypt", l_aes_gcm_encrypt},
    {"aes_gcm_decrypt", l_aes_gcm_decrypt},
    {"argon2id_hash", l_argon2id_hash},
    {"argon2id_verify", l_argon2id_verify},
    {NULL, NULL},
};

void lapi_crypto_open(lua_State *L)
{
    luaL_newlib(L, crypto_funcs);
    lua_setglobal(L, "crypto");
}

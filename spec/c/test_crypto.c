/*
 * test_crypto.c — known-answer and behaviour tests of the `crypto` global,
 * driven through a real Lua state so that the Lua-facing API (argument
 * checks, nil on bad input, raised errors) is what is tested.
 */
#include "sgw.h"
#include "check.h"

#include <stdio.h>
#include <string.h>


/* Runs a chunk that returns true on success, or false/nil and a message. */
static void lua_case(lua_State *L, const char *name, const char *code)
{
    int top = lua_gettop(L);
    if (luaL_dostring(L, code) != LUA_OK) {
        check(0, name, lua_tostring(L, -1));
    } else {
        int ok = lua_toboolean(L, top + 1);
        const char *msg = lua_gettop(L) >= top + 2 ? lua_tostring(L, top + 2) : NULL;
        check(ok, name, ok ? NULL : (msg ? msg : "returned false"));
    }
    lua_settop(L, top);
}

/* Lua helpers the cases share. */
/* Lua helpers the cases share. An argument list keeps one value of each
 * call but the last, so a failing check also leaves its message in `why`. */
static const char *PRELUDE =
    "why = nil\n"
    "function eq(got, want, what)\n"
    "  if got ~= want then\n"
    "    why = (what or '') .. ': got ' .. tostring(got) .. ', want ' .. tostring(want)\n"
    "    return false, why\n"
    "  end\n"
    "  return true\n"
    "end\n"
    "function all(...)\n"
    "  for i = 1, select('#', ...) do\n"
    "    if not select(i, ...) then return false, why end\n"
    "  end\n"
    "  return true\n"
    "end\n"
    "function raises(f, ...)\n"
    "  if pcall(f, ...) then why = 'did not raise'; return false, why end\n"
    "  return true\n"
    "end\n";

static void test_base62_distribution(void)
{
    /* Without rejection sampling the first 8 characters would come up 25%
     * more often (256 = 4*62 + 8); 620000 draws make that unmistakable. */
    enum { N = 620000 };
    static char buf[N + 1];
    int counts[256] = {0};
    crypto_random_base62(buf, N);
    check(buf[N] == '\0' && strlen(buf) == N, "base62 NUL-terminated", NULL);
    for (int i = 0; i < N; i++)
        counts[(unsigned char)buf[i]]++;
    int distinct = 0, lo = N, hi = 0, outside = 0;
    for (int c = 0; c < 256; c++) {
        int is62 = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
        if (!is62) {
            outside += counts[c];
            continue;
        }
        distinct += counts[c] > 0;
        if (counts[c] < lo) lo = counts[c];
        if (counts[c] > hi) hi = counts[c];
    }
    char detail[96];
    snprintf(detail, sizeof detail, "distinct=%d min=%d max=%d outside=%d", distinct, lo, hi, outside);
    /* expected 10000 each, standard deviation ~100 */
    check(distinct == 62 && outside == 0 && lo > 9400 && hi < 10600,
          "base62 unbiased", detail);
}

int main(void)
{
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lapi_crypto_open(L);
    if (luaL_dostring(L, PRELUDE) != LUA_OK) {
        printf("prelude: %s\n", lua_tostring(L, -1));
        return 1;
    }

    unsigned char r1[32] = {0}, r2[32] = {0};
    check(crypto_random(r1, sizeof r1) == 0 && crypto_random(r2, sizeof r2) == 0 &&
          memcmp(r1, r2, sizeof r1) != 0, "crypto_random", NULL);
    check(crypto_random(r1, 0) == 0, "crypto_random zero bytes", NULL);
    char tok[9];
    crypto_random_base62(tok, 8);
    check(strlen(tok) == 8, "crypto_random_base62 length", NULL);
    test_base62_distribution();

    lua_case(L, "sha256 abc",
             "return eq(crypto.sha256_hex('abc'),"
             " 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad')");
    lua_case(L, "sha256 empty",
             "return eq(crypto.sha256_hex(''),"
             " 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855')");
    lua_case(L, "sha256 raw",
             "local d = crypto.sha256('abc')\n"
             "return all(eq(#d, 32, 'length'), eq(crypto.hex_encode(d), crypto.sha256_hex('abc'), 'hex'))");
    lua_case(L, "sha256 binary-safe",
             "return eq(crypto.sha256_hex('a\\0b') ~= crypto.sha256_hex('a'), true)");
    lua_case(L, "hmac_sha256 RFC 4231 case 1",
             "return eq(crypto.hmac_sha256_hex(string.rep('\\x0b', 20), 'Hi There'),"
             " 'b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7')");
    lua_case(L, "hmac_sha256 RFC 4231 case 2",
             "return eq(crypto.hmac_sha256_hex('Jefe', 'what do ya want for nothing?'),"
             " '5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843')");
    lua_case(L, "hmac_sha256 raw",
             "return eq(crypto.hex_encode(crypto.hmac_sha256('Jefe', 'what do ya want for nothing?')),"
             " '5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843')");
    lua_case(L, "sha256 of a table raises", "return raises(crypto.sha256, {})");

    lua_case(L, "base64 RFC 4648 vectors",
             "local v = { [''] = '', f = 'Zg==', fo = 'Zm8=', foo = 'Zm9v', foob = 'Zm9vYg==',"
             "  fooba = 'Zm9vYmE=', foobar = 'Zm9vYmFy' }\n"
             "for plain, enc in pairs(v) do\n"
             "  local ok, msg = eq(crypto.base64_encode(plain), enc, 'encode ' .. plain)\n"
             "  if not ok then return ok, msg end\n"
             "  ok, msg = eq(crypto.base64_decode(enc), plain, 'decode ' .. enc)\n"
             "  if not ok then return ok, msg end\n"
             "end\n"
             "return true");
    lua_case(L, "base64 standard alphabet",
             "return all(eq(crypto.base64_encode('\\xfb\\xff'), '+/8='),"
             " eq(crypto.base64_decode('+/8='), '\\xfb\\xff'))");
    lua_case(L, "base64 decode rejects bad input",
             "for _, bad in ipairs({'Zm9v!', 'Zg=', 'Zg', 'Z===', '====', 'Zh==', 'Zm9=',"
             "  'Zm9v\\n', ' Zm9v', 'Zm=9', '-_8=', 'Zm9vYg=a'}) do\n"
             "  if crypto.base64_decode(bad) ~= nil then return false, 'accepted ' .. bad end\n"
             "end\n"
             "return true");
    lua_case(L, "base64url without padding",
             "return all(eq(crypto.base64url_encode('\\xfb\\xff'), '-_8'),"
             " eq(crypto.base64url_encode('f'), 'Zg'),"
             " eq(crypto.base64url_encode('foobar'), 'Zm9vYmFy'),"
             " eq(crypto.base64url_decode('-_8'), '\\xfb\\xff'),"
             " eq(crypto.base64url_decode('Zg'), 'f'),"
             " eq(crypto.base64url_decode('Zm8'), 'fo'),"
             " eq(crypto.base64url_decode('Zg=='), 'f', 'padded input'),"
             " eq(crypto.base64url_decode(''), ''))");
    lua_case(L, "base64url decode rejects bad input",
             "for _, bad in ipairs({'+/8', 'Z', 'Zg=', 'Zh', 'Zm9vY', 'Zm9v=', 'a.b'}) do\n"
             "  if crypto.base64url_decode(bad) ~= nil then return false, 'accepted ' .. bad end\n"
             "end\n"
             "return true");
    lua_case(L, "base64 round trip of all bytes",
             "local t = {} for i = 0, 255 do t[#t + 1] = string.char(i) end\n"
             "local s = table.concat(t)\n"
             "for n = 0, 10 do\n"
             "  local p = s:sub(1, 200 + n)\n"
             "  if crypto.base64_decode(crypto.base64_encode(p)) ~= p then return false, 'std ' .. n end\n"
             "  if crypto.base64url_decode(crypto.base64url_encode(p)) ~= p then return false, 'url ' .. n end\n"
             "end\n"
             "return true");

    lua_case(L, "hex encode/decode",
             "return all(eq(crypto.hex_encode('\\x00\\xffab'), '00ff6162'),"
             " eq(crypto.hex_decode('00FF6162'), '\\x00\\xffab'),"
             " eq(crypto.hex_decode(''), ''),"
             " eq(crypto.hex_decode('abc'), nil, 'odd length'),"
             " eq(crypto.hex_decode('zz'), nil, 'bad digit'))");

    lua_case(L, "random_bytes",
             "local a, b = crypto.random_bytes(32), crypto.random_bytes(32)\n"
             "return all(eq(#a, 32), eq(a ~= b, true, 'distinct'), eq(crypto.random_bytes(0), ''),"
             " raises(crypto.random_bytes, -1))");
    lua_case(L, "random_token charset and length",
             "for _, n in ipairs({1, 16, 32, 100}) do\n"
             "  local t = crypto.random_token(n)\n"
             "  if #t ~= n then return false, 'length ' .. #t end\n"
             "  if not t:match('^[0-9A-Za-z]+$') then return false, 'charset ' .. t end\n"
             "end\n"
             "return all(eq(crypto.random_token(0), ''),"
             " eq(crypto.random_token(32) ~= crypto.random_token(32), true, 'distinct'),"
             " raises(crypto.random_token, -5))");

    lua_case(L, "constant_eq",
             "return all(eq(crypto.constant_eq('abc', 'abc'), true, 'equal'),"
             " eq(crypto.constant_eq('abc', 'abd'), false, 'last byte'),"
             " eq(crypto.constant_eq('xbc', 'abc'), false, 'first byte'),"
             " eq(crypto.constant_eq('abc', 'abcd'), false, 'prefix'),"
             " eq(crypto.constant_eq('', ''), true, 'empty'),"
             " eq(crypto.constant_eq('', 'a'), false, 'empty vs one'),"
             " eq(crypto.constant_eq('a\\0b', 'a\\0c'), false, 'after NUL'),"
             " raises(crypto.constant_eq, 'a', nil))");

    lua_case(L, "aes_gcm known answer (GCM spec test case 16)",
             "local key = crypto.hex_decode('feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308')\n"
             "local blob = crypto.hex_decode('cafebabefacedbaddecaf888' ..\n"
             "  '522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa' ..\n"
             "  '8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662' ..\n"
             "  '76fc6ece0f4e1768cddf8853bb2d551b')\n"
             "local aad = crypto.hex_decode('feedfacedeadbeeffeedfacedeadbeefabaddad2')\n"
             "local pt = crypto.aes_gcm_decrypt(key, blob, aad)\n"
             "return eq(pt and crypto.hex_encode(pt),"
             " 'd9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72' ..\n"
             " '1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39')");
    lua_case(L, "aes_gcm round trip",
             "local key = crypto.random_bytes(32)\n"
             "local blob = crypto.aes_gcm_encrypt(key, 'secret token')\n"
             "local blob2 = crypto.aes_gcm_encrypt(key, 'secret token')\n"
             "return all(eq(#blob, 12 + 12 + 16, 'length'),"
             " eq(blob ~= blob2, true, 'fresh nonce'),"
             " eq(crypto.aes_gcm_decrypt(key, blob), 'secret token'),"
             " eq(crypto.aes_gcm_decrypt(key, crypto.aes_gcm_encrypt(key, '')), '', 'empty'))");
    lua_case(L, "aes_gcm with aad",
             "local key = crypto.random_bytes(32)\n"
             "local blob = crypto.aes_gcm_encrypt(key, 'x', 'account:1')\n"
             "local p1 = crypto.aes_gcm_decrypt(key, blob, 'account:1')\n"
             "local p2, e2 = crypto.aes_gcm_decrypt(key, blob, 'account:2')\n"
             "local p3 = crypto.aes_gcm_decrypt(key, blob)\n"
             "return all(eq(p1, 'x'), eq(p2, nil, 'other aad'), eq(e2, 'authentication failed'),"
             " eq(p3, nil, 'missing aad'))");
    lua_case(L, "aes_gcm tamper detection",
             "local key = crypto.random_bytes(32)\n"
             "local blob = crypto.aes_gcm_encrypt(key, 'hello world')\n"
             "for i = 1, #blob do\n"
             "  local b = blob:sub(1, i - 1) .. string.char(blob:byte(i) ~ 1) .. blob:sub(i + 1)\n"
             "  local p, e = crypto.aes_gcm_decrypt(key, b)\n"
             "  if p ~= nil or e ~= 'authentication failed' then return false, 'byte ' .. i end\n"
             "end\n"
             "local p, e = crypto.aes_gcm_decrypt(key, blob:sub(1, 27))\n"
             "return all(eq(p, nil, 'short'), eq(e, 'authentication failed'))");
    lua_case(L, "aes_gcm wrong key",
             "local blob = crypto.aes_gcm_encrypt(crypto.random_bytes(32), 'hello')\n"
             "local p, e = crypto.aes_gcm_decrypt(crypto.random_bytes(32), blob)\n"
             "return all(eq(p, nil), eq(e, 'authentication failed'))");
    lua_case(L, "aes_gcm key must be 32 bytes",
             "return all(raises(crypto.aes_gcm_encrypt, string.rep('k', 31), 'x'),"
             " raises(crypto.aes_gcm_encrypt, string.rep('k', 33), 'x'),"
             " raises(crypto.aes_gcm_decrypt, string.rep('k', 16), string.rep('x', 40)))");

    lua_case(L, "argon2id hash and verify",
             "local h = crypto.argon2id_hash('correct horse')\n"
             "local h2 = crypto.argon2id_hash('correct horse')\n"
             "return all(eq(h:sub(1, 31), '$argon2id$v=19$m=19456,t=2,p=1$', 'prefix'),"
             " eq(h ~= h2, true, 'salted'),"
             " eq(crypto.argon2id_verify(h, 'correct horse'), true, 'right password'),"
             " eq(crypto.argon2id_verify(h, 'correct horsf'), false, 'wrong password'),"
             " eq(crypto.argon2id_verify(h, ''), false, 'empty password'))");
    lua_case(L, "argon2id verify refuses garbage",
             "return all(eq(crypto.argon2id_verify('', 'x'), false, 'empty'),"
             " eq(crypto.argon2id_verify('$argon2id$v=19$m=19456,t=2,p=1$bad', 'x'), false, 'truncated'),"
             " eq(crypto.argon2id_verify('$argon2id$v=19$m=4194304,t=2,p=1$c29tZXNhbHQ$"
             "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', 'x'), false, 'absurd memory'),"
             " eq(crypto.argon2id_verify('$argon2i$v=19$m=19456,t=2,p=1$c29tZXNhbHQ$"
             "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', 'x'), false, 'argon2i'))");

    lua_close(L);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

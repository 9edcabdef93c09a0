-- spec/support/fuzz.lua — mutation fuzzing for the parsers' unit specs
-- (spec/unit/fuzz_*_spec.lua): a seeded PRNG turns valid inputs into a fixed
-- number of malformed ones, and each must give a clean result or refusal,
-- never a Lua error. The seed is fixed so that CI runs the same cases every
-- time; FUZZ_SEED and FUZZ_CASES explore others locally.
local M = {}

M.SEED = tonumber(os.getenv("FUZZ_SEED") or "") or 12
M.CASES = tonumber(os.getenv("FUZZ_CASES") or "") or 10000

local random = math.random

-- Bytes that parsers treat specially, and fragments that break numbers,
-- strings, dates and lengths.
local SPECIAL = { "\0", "\255", "\r\n", "\n", '"', "\\", "{", "}", "[", "]", ",", ":", ".", "-", "=", "%",
  "1e999999", "-1e999999", "9007199254740993", "0x", "\\u0000", "\\ud800", "null", "true", "13", "00",
  "99", "9999999999", "--", "\255\216\255", "\137PNG", "\0\0\0\0", "\255\255\255\255", "é", "\192\128" }

local function pick(t) return t[random(1, #t)] end

local function random_bytes(n)
  local out = {}
  for i = 1, n do out[i] = string.char(random(0, 255)) end
  return table.concat(out)
end

local OPS = {
  function(s) -- flip one byte
    if #s == 0 then return s end
    local i = random(1, #s)
    return s:sub(1, i - 1) .. string.char(random(0, 255)) .. s:sub(i + 1)
  end,
  function(s) -- insert something special
    local i = random(0, #s)
    return s:sub(1, i) .. pick(SPECIAL) .. s:sub(i + 1)
  end,
  function(s) -- insert random bytes
    local i = random(0, #s)
    return s:sub(1, i) .. random_bytes(random(1, 8)) .. s:sub(i + 1)
  end,
  function(s) -- delete a range
    if #s == 0 then return s end
    local i = random(1, #s)
    return s:sub(1, i - 1) .. s:sub(i + random(1, 16))
  end,
  function(s) -- duplicate a range
    if #s == 0 then return s end
    local i = random(1, #s)
    local j = math.min(#s, i + random(0, 32))
    return s:sub(1, j) .. s:sub(i, j) .. s:sub(j + 1)
  end,
  function(s) -- truncate
    return s:sub(1, random(0, #s))
  end,
  function(s) -- a digit run becomes an extreme number
    local runs = {}
    for a, b in s:gmatch("()%d+()") do runs[#runs + 1] = { a, b } end
    if #runs == 0 then return s end
    local r = pick(runs)
    return s:sub(1, r[1] - 1) .. pick { "0", "13", "32", "99", "1e999999", "1e999999", "18446744073709551616", "-1", "" } .. s:sub(r[2])
  end,
}

--- One to four random mutations of s; mostly one, so that many inputs stay
--- close enough to valid to reach the parser's deeper checks.
function M.mutate(s)
  for _ = 1, random() < 0.6 and 1 or random(2, 4) do s = pick(OPS)(s) end
  return s
end

local function show(s)
  return (s:gsub("[^\32-\126]", function(c) return ("\\%d"):format(c:byte()) end))
end

--- Runs check(input) for M.CASES mutations of the corpus' entries (and the
--- entries themselves); make(input) may build the input from a mutated
--- string. A raised error fails with the input that caused it.
function M.run(corpus, check, make)
  math.randomseed(M.SEED)
  local function try(text)
    local input = make and make(text) or text
    local ok, err = pcall(check, input)
    if not ok then
      error(("seed %d, input %q: %s"):format(M.SEED, show(tostring(text)), tostring(err)), 0)
    end
  end
  for _, s in ipairs(corpus) do try(s) end
  for _ = 1, M.CASES do try(M.mutate(pick(corpus))) end
end

-- base64url as the host's crypto module does it (no padding on output; the
-- input alphabet is checked, nil when the text is not base64url).
local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local INDEX = {}
for i = 1, 64 do INDEX[ALPHABET:byte(i)] = i - 1 end

function M.base64url_encode(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local chars = 2 + (b and 1 or 0) + (c and 1 or 0)
    for k = 1, chars do
      local v = (n >> (6 * (4 - k))) & 63
      out[#out + 1] = ALPHABET:sub(v + 1, v + 1)
    end
  end
  return table.concat(out)
end

function M.base64url_decode(s)
  if type(s) ~= "string" or #s % 4 == 1 then return nil end
  local out, bits, n = {}, 0, 0
  for i = 1, #s do
    local v = INDEX[s:byte(i)]
    if not v then return nil end
    bits, n = (bits << 6) | v, n + 6
    if n >= 8 then
      n = n - 8
      out[#out + 1] = string.char((bits >> n) & 255)
    end
  end
  return table.concat(out)
end

--- The crypto functions the parsers under fuzz need. The HMAC is a stand-in
--- (the fuzz is about parsing, not about SHA-256): any deterministic keyed
--- function of the bytes serves.
function M.install_crypto()
  crypto.base64url_encode = M.base64url_encode
  crypto.base64url_decode = M.base64url_decode
  crypto.hmac_sha256 = function(key, data)
    local h = 2166136261
    for i = 1, #key + #data do
      local b = i <= #key and key:byte(i) or data:byte(i - #key)
      h = ((h ~ b) * 16777619) & 0xffffffff
    end
    return string.pack(">I4I4I4I4I4I4I4I4", h, h ~ 1, h ~ 2, h ~ 3, h ~ 4, h ~ 5, h ~ 6, h ~ 7)
  end
  crypto.sha256_hex = crypto.sha256_hex or function(s) return ("%064x"):format(#s) end
end

return M

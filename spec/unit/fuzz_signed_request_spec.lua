-- Fuzz: Meta's signed_request (deauthorize and data-deletion callbacks)
-- through lib/meta_callbacks.lua's parse: mutated whole values, and mutated
-- payloads signed correctly, so that the payload checks are reached too.
-- Each gives a payload with a user id and issued_at, or nil and a message,
-- never an error.
require("fake_host").install()
local fuzz = require "fuzz"
fuzz.install_crypto()
local meta_callbacks = require "meta_callbacks"

local SECRET = "app-secret"
local PAYLOADS = {
  '{"algorithm":"HMAC-SHA256","issued_at":1764000000,"user_id":"1234567890"}',
  '{"user_id":"9876543210","algorithm":"HMAC-SHA256","issued_at":1.5,"expires":0,"oauth_token":"x"}',
}

local function sign(payload)
  local p64 = fuzz.base64url_encode(payload)
  return fuzz.base64url_encode(crypto.hmac_sha256(SECRET, p64)) .. "." .. p64
end

local function check(value)
  local payload, why = meta_callbacks.parse(value, SECRET)
  if payload == nil then
    assert(type(why) == "string", "a refusal says why")
  else
    assert(type(payload.user_id) == "string" and payload.user_id:match("^%d+$"))
    assert(type(payload.issued_at) == "number")
  end
end

describe("fuzz: meta_callbacks.parse (signed_request)", function()
  it("accepts the valid ones", function()
    for _, p in ipairs(PAYLOADS) do assert.is_table(meta_callbacks.parse(sign(p), SECRET)) end
  end)

  it("knows a request by one spelling, whatever padding or unused bits its signature was sent with", function()
    local value = sign(PAYLOADS[1])
    local sig64, p64 = value:match("^([^.]+)%.(.+)$")
    local _, spelling = meta_callbacks.parse(value, SECRET)
    assert.are.equal(value, spelling, "Meta's own spelling is the one")
    -- 32 bytes are 43 characters whose last carries 2 unused bits.
    local last = sig64:sub(-1)
    local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    local i = alphabet:find(last, 1, true) - 1
    local other = alphabet:sub((i ~ 1) + 1, (i ~ 1) + 1)
    for _, variant in ipairs({ sig64 .. "=", sig64 .. "==", sig64:sub(1, -2) .. other }) do
      local payload, again = meta_callbacks.parse(variant .. "." .. p64, SECRET)
      if payload then assert.are.equal(spelling, again, variant) end
    end
    assert.is_table(meta_callbacks.parse(sig64 .. "=." .. p64, SECRET), "padding is taken")
  end)

  it("refuses or accepts mutated signed_request values cleanly", function()
    local corpus = {}
    for i, p in ipairs(PAYLOADS) do corpus[i] = sign(p) end
    fuzz.run(corpus, check)
  end)

  it("refuses or accepts mutated payloads, correctly signed, cleanly", function()
    fuzz.run(PAYLOADS, check, sign)
  end)
end)

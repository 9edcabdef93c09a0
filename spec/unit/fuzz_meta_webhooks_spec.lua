-- Fuzz: Meta deliveries through lib/meta_webhooks.lua's normalize, as the
-- job does (json.decode of the stored body, then normalize). Mutated bytes
-- and mutated structure (any value replaced by one of another type) give
-- observations fit for comments.apply and skipped changes with a reason,
-- never an error.
require("fake_host").install()
local fuzz = require "fuzz"
local json = require "json"
local meta_webhooks = require "meta_webhooks"

local DELIVERIES = {
  [[{"object":"page","entry":[{"id":"1001","time":1764000000,"changes":[{"field":"feed","value":{"item":"comment",
"verb":"add","post_id":"1001_5","comment_id":"5_77","parent_id":"1001_5","created_time":1764000000,
"message":"Gr\u00fc\u00dfe","from":{"id":"42","name":"Ann"}}},{"field":"feed","value":{"item":"comment",
"verb":"hide","post_id":"1001_5","comment_id":"5_78","created_time":1764000001000}}]}]}]],
  [[{"object":"instagram","entry":[{"id":"1789","time":1764000000,"changes":[{"field":"comments","value":
{"id":"1801","text":"Nice","media":{"id":"1790"},"parent_id":"1800","from":{"id":"9","username":"bob"}}}]}]}]],
}

local function accounts(_, id)
  if id == "1001" or id == "1789" then return { "acc_1", "acc_2" } end
  return {}
end

local function check(delivery)
  local observations, skipped = meta_webhooks.normalize(delivery, accounts)
  for _, o in ipairs(observations) do
    for k, v in pairs(o) do
      if type(v) == "string" then assert(meta_webhooks.storable(v), k .. " is storable") end
      if type(v) == "number" then assert(v == v and v > -math.huge and v < math.huge, k .. " is finite") end
    end
    assert(type(o.platform_comment_id) == "string" and type(o.social_account_id) == "string")
  end
  for _, s in ipairs(skipped) do assert(type(s.reason) == "string", "a skipped change says why") end
end

local VALUES = { json.null, true, 0, -1, 1e308, "", "x\0y", "\255", {}, { 1, 2 }, { item = "comment" } }

-- Replaces one value somewhere in t (depth first, at random) by another type.
local function mutate_structure(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  if #keys == 0 then return end
  local k = keys[math.random(1, #keys)]
  if type(t[k]) == "table" and math.random() < 0.7 then
    mutate_structure(t[k])
  else
    local v = VALUES[math.random(1, #VALUES)]
    t[k] = type(v) == "table" and json.decode(json.encode(v)) or v
  end
end

describe("fuzz: meta_webhooks.normalize", function()
  it("handles deliveries decoded from mutated bytes", function()
    fuzz.run(DELIVERIES, check, function(text) return json.decode(text) end)
  end)

  it("handles deliveries with mutated structure", function()
    fuzz.run(DELIVERIES, check, function(text)
      local d = json.decode(DELIVERIES[#text % #DELIVERIES + 1]) or {}
      for _ = 1, math.random(1, 3) do mutate_structure(d) end
      return d
    end)
  end)
end)

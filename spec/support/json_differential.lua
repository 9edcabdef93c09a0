-- spec/support/json_differential.lua — lib/json.lua's two encoders side by
-- side: random values (nested objects and arrays, every byte in strings,
-- numbers about the 1e14 boundary, number keys, empty-array markers, refused
-- values) with the OpenAPI document's shapes and hand-made ones (variants,
-- extra, items) go through the Lua encoder and the host's jsonc.encode, which
-- must give the same bytes or the same error. spec/c/test_json.c runs it in a
-- Lua state with the host's jsonc and lua-cjson.
local cjson = require "cjson"
local json = require "json"
local shapes = require "json_shapes"

local M = {}

local random = math.random
local EMPTY = json.array({})

local function pick(t) return t[random(1, #t)] end

local WORDS = { "", "a", "id", "Id", "ID", "data", "status", "z", "a/b", "https://example.com/a/b?c=d",
  "\\", "\\/", "/\\", '"', "</script>", "é", "日本語", "\255\254", "\192\128", "\237\160\128", "\0", "a\0b",
  "\127", "tab\there", "line\nbreak", "\r\n", "\b\f", "\1\31", "sgwEmptyArray", EMPTY .. "x", "x" .. EMPTY, "~0~1" }

local function random_string()
  local r = random()
  if r < 0.3 then return pick(WORDS) end
  if r < 0.35 then return EMPTY end
  local out = {}
  for i = 1, random(0, 12) do
    out[i] = random() < 0.5 and string.char(random(0, 255)) or pick(WORDS)
  end
  return table.concat(out)
end

local NUMBERS = { 0, -0.0, 1, -1, 0.5, 0.1, 1 / 3, -2.5e-7, 3.0, -3.0, 1e14, -1e14, 1e14 - 1, -(1e14 - 1),
  99999999999999, -99999999999999, 100000000000000, -100000000000000, 100000000000001, 123456789012345,
  123456789012346, 1e15, 2 ^ 53, 2 ^ 53 + 1, 9007199254740993, math.maxinteger, math.mininteger, 1e300,
  -1e300, 5e-324, 1e-7, 123.456, 1e21, 0.30000000000000004 }

local function random_number()
  local r = random()
  if r < 0.5 then return pick(NUMBERS) end
  if r < 0.7 then return random(-1000000, 1000000) end
  if r < 0.8 then return random(math.mininteger, math.maxinteger) end
  if r < 0.9 then return (random() - 0.5) * 10 ^ random(-20, 20) end
  return random(-99999999999999, 99999999999999) + 0.0
end

-- Values every encoder refuses (rarely, so most cases get through).
local REFUSED = { 1 / 0, -1 / 0, 0 / 0, print, coroutine.create(print), io and io.stdout or print }

local function scalar()
  local r = random()
  if r < 0.4 then return random_string() end
  if r < 0.75 then return random_number() end
  if r < 0.85 then return random() < 0.5 end
  if r < 0.995 then return cjson.null end
  return pick(REFUSED)
end

local KEY_NUMBERS = { 1, 2, 3, 0, -1, 0.5, 0.1, 0.1 + 1e-17, 0.10000000000000002, 123456789012345,
  123456789012346, 1e14, 99999999999999, math.maxinteger, -0.5, 2 ^ 63 }

local gen

-- An object, with the shape's keys (of one variant) mostly present.
local function object(shape, depth)
  local t = {}
  if shape and shape.variants and #shape.variants > 0 and random() < 0.8 then
    shape = pick(shape.variants)
  end
  if shape and shape.keys then
    for _, k in ipairs(shape.keys) do
      if random() < 0.7 then t[k] = gen(shape.props and shape.props[k], depth + 1) end
    end
  end
  for _ = 1, random(0, shape and 2 or 5) do
    local r, k = random(), nil
    if r < 0.6 then k = random_string()
    elseif r < 0.9 then k = pick(KEY_NUMBERS)
    elseif r < 0.995 then k = random(-5, 5)
    else k = pick({ true, false, print, 1 / 0 }) end
    t[k] = gen(shape and shape.extra, depth + 1)
  end
  return t
end

local function array(shape, depth)
  local n = random(0, 5)
  if n == 0 then return random() < 0.7 and json.array({}) or {} end
  local t = {}
  for i = 1, n do t[i] = gen(shape and shape.items, depth + 1) end
  if random() < 0.03 then t[n + 2] = 1 end   -- sparse: refused
  return t
end

function gen(shape, depth)
  local r = random()
  if depth > 5 or r < 0.35 then return scalar() end
  if shape and shape.items and r < 0.8 then return array(shape, depth) end
  if r < 0.7 then return object(shape, depth) end
  return array(shape, depth)
end

-- Every response, event and schema shape the document has, and a few made
-- here for what it may lack.
local function all_shapes()
  local list, seen = {}, {}
  local function add(s)
    if s and not seen[s] then seen[s], list[#list + 1] = true, s end
  end
  local doc = cjson.decode(asset("lib/openapi.json"))
  local paths = {}
  for path in pairs(doc.paths) do paths[#paths + 1] = path end
  table.sort(paths)
  for _, path in ipairs(paths) do
    for _, method in ipairs({ "get", "post", "put", "patch", "delete" }) do
      local op = doc.paths[path][method]
      if op and op.responses then
        local codes = {}
        for code in pairs(op.responses) do codes[#codes + 1] = code end
        table.sort(codes)
        for _, code in ipairs(codes) do
          add(shapes.response({ method = method:upper(), path = path }, tonumber(code) or code))
        end
      end
    end
  end
  local names = {}
  for name in pairs(doc.components.schemas) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do add(shapes.schema(name)) end
  local events = {}
  for name in pairs(doc.webhooks or {}) do events[#events + 1] = name end
  table.sort(events)
  for _, name in ipairs(events) do add(shapes.event_data(name)) end

  local inner = json.shape({ "b", "a", "id" })
  add(json.shape({ "id", "name", "list", "map" }, {
    props = { list = json.shape({}, { items = inner }), map = json.shape({}, { extra = inner }) },
  }))
  add(json.shape({}, { variants = { json.shape({ "type", "x" }), json.shape({ "type", "y", "z" }) } }))
  add(json.shape({ "z", "a/b", "é" }, { items = inner, extra = inner }))
  add(json.shape({}, { variants = {} }))
  add(json.shape({ "b", "a", "b" }))
  return list
end

local function show(v)
  if type(v) ~= "string" then return tostring(v) end
  return (v:gsub("[^\32-\126]", function(c) return ("\\%d"):format(c:byte()) end))
end

-- One comparison; nil when the encoders agree, else what differed.
local function compare(value, shape)
  local ok_lua, lua_out = pcall(json.encode_lua, value, shape)
  local ok_c, c_out = pcall(json.encode, value, shape)
  if ok_lua == ok_c and lua_out == c_out then return nil end
  return ("Lua %s %s\n  C %s %s"):format(ok_lua and "wrote" or "raised", show(lua_out),
    ok_c and "wrote" or "raised", show(c_out))
end

-- A chain of n nested tables (arrays or objects) around a string.
local function nested(n, as_object)
  local v = "/"
  for _ = 1, n do v = as_object and { k = v } or { v } end
  return v
end

-- Runs `cases` random comparisons and the fixed ones; returns the number of
-- comparisons, the number that agreed and the first disagreements.
function M.run(seed, cases)
  assert(json.encode ~= json.encode_lua and jsonc, "the host's jsonc.encode is not in use")
  math.randomseed(seed)
  local list = all_shapes()
  local total, agreed, failures = 0, 0, {}
  local function check(value, shape, label)
    total = total + 1
    local diff = compare(value, shape)
    if diff then
      if #failures < 10 then failures[#failures + 1] = label .. ": " .. diff end
    else
      agreed = agreed + 1
    end
  end
  for i = 0, 255 do check(string.char(i) .. "x/" .. string.char(i), nil, "byte " .. i) end
  for _, n in ipairs(NUMBERS) do check(n, nil, "number " .. show(n)) end
  for _, n in ipairs(KEY_NUMBERS) do check({ [n] = 1, [tostring(n)] = 2, id = 3 }, nil, "key " .. show(n)) end
  for _, v in ipairs(REFUSED) do check({ a = { v } }, nil, "refused " .. show(v)) end
  check(nil, nil, "nil")
  check({ [1] = 1, [3] = 3 }, nil, "sparse")
  check({ [true] = 1 }, nil, "boolean key")
  for _, n in ipairs({ 999, 1000, 1001 }) do
    check(nested(n, false), nil, "nesting " .. n)
    check(nested(n, true), nil, "nesting " .. n .. " of objects")
  end
  for i = 1, cases do
    local shape = random() < 0.85 and pick(list) or nil
    check(gen(shape, 0), shape, "case " .. i)
  end
  return total, agreed, failures
end

return M

-- The key order of every JSON answer, taken from the OpenAPI document
-- (lib/openapi.json): a response's shape comes from its route and status, an
-- event's from the `webhooks` section, a problem's from the Problem schema.
-- The document is read once per loaded generation (it reloads with the code)
-- and each shape is made once, on first use; lib/json.lua encodes with them.
local cjson = require "cjson"
local json = require "json"

local M = {}

-- ------------------------------------------------------------ the document

-- cjson forgets the order of an object's keys, which is all this module
-- wants from the document: a small reader that keeps it, in keys_of[object].
local keys_of = setmetatable({}, { __mode = "k" })

local function parse(text)
  local pos = 1
  local value

  local function fail(what)
    error("lib/openapi.json: " .. what .. " at byte " .. pos, 0)
  end

  local function skip()
    pos = text:find("[^ \t\r\n]", pos) or #text + 1
  end

  local function string_token()
    local i = pos + 1
    while true do
      local j = text:find('["\\]', i)
      if not j then fail("unterminated string") end
      if text:sub(j, j) == '"' then
        local s = cjson.decode(text:sub(pos, j))
        pos = j + 1
        return s
      end
      i = j + 2
    end
  end

  function value()
    skip()
    local c = text:sub(pos, pos)
    if c == "{" then
      local obj, keys = {}, {}
      pos = pos + 1
      skip()
      if text:sub(pos, pos) == "}" then pos = pos + 1 else
        repeat
          skip()
          if text:sub(pos, pos) ~= '"' then fail("expected a key") end
          local k = string_token()
          skip()
          if text:sub(pos, pos) ~= ":" then fail("expected ':'") end
          pos = pos + 1
          obj[k] = value()
          keys[#keys + 1] = k
          skip()
          c = text:sub(pos, pos)
          pos = pos + 1
        until c ~= ","
        if c ~= "}" then fail("expected '}'") end
      end
      keys_of[obj] = keys
      return obj
    elseif c == "[" then
      local arr = {}
      pos = pos + 1
      skip()
      if text:sub(pos, pos) == "]" then pos = pos + 1 else
        repeat
          arr[#arr + 1] = value()
          skip()
          c = text:sub(pos, pos)
          pos = pos + 1
        until c ~= ","
        if c ~= "]" then fail("expected ']'") end
      end
      return arr
    elseif c == '"' then
      return string_token()
    end
    local word = text:match("^[%w.+-]+", pos)
    if not word then fail("unexpected character") end
    pos = pos + #word
    if word == "true" then return true elseif word == "false" then return false
    elseif word == "null" then return cjson.null end
    return tonumber(word) or fail("bad literal " .. word)
  end

  local doc = value()
  skip()
  if pos <= #text then fail("trailing text") end
  return doc
end

local doc

local function document()
  if doc == nil then
    -- Without the host's asset() (some unit specs) every answer takes the
    -- default order.
    local text = asset and asset("lib/openapi.json")
    doc = text and parse(text) or false
  end
  return doc or nil
end

-- Uses this text as the document instead of lib/openapi.json (unit specs).
function M.use(text)
  doc, M.cache = parse(text), {}
end

-- Parsed while the host builds the state (it loads every module then), not
-- by the first request that needs it after a start or a reload: that
-- request's time budget would pay for reading the whole document.
if asset then document() end

-- ------------------------------------------------------------ shapes

local function pointer(ref)
  local node = document()
  for part in ref:gmatch("/([^/]+)") do
    node = type(node) == "table" and node[(part:gsub("~1", "/"):gsub("~0", "~"))] or nil
  end
  return node
end

local function resolve(s)
  local seen = 0
  while type(s) == "table" and s["$ref"] and seen < 32 do
    s, seen = pointer(s["$ref"]), seen + 1
  end
  return type(s) == "table" and s or nil
end

local compile

-- Gathers what the schemas (an allOf, in order) say of an object: its keys
-- in order, the schemas of each key, of array items and of unnamed keys,
-- and the alternatives (oneOf/anyOf).
local function gather(s, acc)
  s = resolve(s)
  if not s then return end
  local alts = s.oneOf or s.anyOf
  if alts then
    -- Each alternative is the rest of the schema plus that alternative.
    local rest = {}
    for k, v in pairs(s) do
      if k ~= "oneOf" and k ~= "anyOf" then rest[k] = v end
    end
    acc.alts = acc.alts or {}
    for _, alt in ipairs(alts) do
      acc.alts[#acc.alts + 1] = { allOf = { rest, alt } }
    end
    return
  end
  for _, branch in ipairs(s.allOf or {}) do gather(branch, acc) end
  if type(s.properties) == "table" then
    for _, k in ipairs(keys_of[s.properties] or {}) do
      local list = acc.by_key[k]
      if not list then
        list = {}
        acc.by_key[k], acc.keys[#acc.keys + 1] = list, k
      end
      list[#list + 1] = s.properties[k]
    end
  end
  if s.items then acc.items[#acc.items + 1] = s.items end
  if type(s.additionalProperties) == "table" then acc.extra[#acc.extra + 1] = s.additionalProperties end
end

local made = setmetatable({}, { __mode = "k" })

-- The shape of a value the schemas (all of them at once) describe, or nil
-- when they say nothing of keys (the default order then applies).
function compile(schemas)
  local single = #schemas == 1 and resolve(schemas[1])
  if single and made[single] ~= nil then return made[single] or nil end
  local shape = json.shape()
  -- Before the parts: a schema that contains itself (a reply's replies)
  -- finds its own shape.
  if single then made[single] = shape end
  local acc = { keys = {}, by_key = {}, items = {}, extra = {} }
  for _, s in ipairs(schemas) do gather(s, acc) end
  local props = {}
  for _, k in ipairs(acc.keys) do props[k] = compile(acc.by_key[k]) end
  json.shape(acc.keys, shape)
  shape.props = props
  shape.items = #acc.items > 0 and compile(acc.items) or nil
  shape.extra = #acc.extra > 0 and compile(acc.extra) or nil
  if acc.alts then
    shape.variants = {}
    for i, alt in ipairs(acc.alts) do shape.variants[i] = compile({ alt }) or json.shape() end
  end
  if #acc.keys == 0 and not shape.items and not shape.extra and not shape.variants then
    if single then made[single] = false end
    return nil
  end
  return shape
end

M.cache = {}

local function cached(key, make)
  local v = M.cache[key]
  if v == nil then
    v = document() and make() or false
    M.cache[key] = v
  end
  return v or nil
end

local function json_content(content)
  if type(content) ~= "table" then return nil end
  local media = content["application/json"] or content["application/problem+json"]
  return media and media.schema
end

-- The shape of the body a route (method, path template) answers with this
-- status, as the document describes it.
function M.response(route, status)
  if not (route and route.method and route.path) then return nil end
  return cached(route.method .. " " .. route.path .. " " .. status, function()
    local item = document().paths[route.path]
    local op = item and item[route.method:lower()]
    local responses = op and op.responses
    if not responses then return nil end
    local r = responses[tostring(status)] or responses[math.floor(status / 100) .. "XX"] or responses.default
    r = resolve(r)
    local schema = r and json_content(r.content)
    return schema and compile({ schema })
  end)
end

-- The shape of a named schema (#/components/schemas/<name>).
function M.schema(name)
  return cached("schema " .. name, function()
    local s = pointer("#/components/schemas/" .. name)
    return s and compile({ s })
  end)
end

-- The shape of an event's `data` (the event's schema in `webhooks`).
function M.event_data(type)
  return cached("event " .. type, function()
    local hook = document().webhooks and document().webhooks[type]
    local body = hook and hook.post and hook.post.requestBody
    local schema = body and json_content(body.content)
    local shape = schema and compile({ schema })
    return shape and shape.props.data
  end)
end

return M

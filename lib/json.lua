-- JSON for handlers: lua-cjson with the settings every endpoint shares, plus
-- what cjson 2.1 cannot say by itself: an empty array, keys in a documented
-- order, and `/` left unescaped.
--
-- encode(value, shape) writes an object's keys in the order its shape names
-- them (lib/json_shapes.lua makes shapes from the OpenAPI document), then the
-- keys the shape does not name, sorted; without a shape `id` first, then the
-- rest sorted. Every answer is the same bytes for the same value. Strings and
-- numbers still go through cjson, so escapes and number spelling are cjson's,
-- except that `\/` becomes `/` (JSON answers are not HTML). Tables are read
-- raw (next, rawget), as cjson reads them.
--
-- The host's jsonc.encode (host/json.c) does the same in C, byte for byte,
-- about ten times faster; encode uses it when the host provides it and the
-- Lua encoder below otherwise (the unit specs' fake host), which stays as
-- M.encode_lua so that the two can be compared.
local cjson = require "cjson"
local safe = require "cjson.safe"

safe.decode_max_depth(64)
safe.decode_invalid_numbers(false)
cjson.encode_invalid_numbers(false)
cjson.encode_sparse_array(false, 1, 1)

local M = { null = cjson.null }

-- An empty table encodes as {}; arrays that may be empty go through
-- json.array, which stands in a marker (unguessable per process) that encode
-- turns into [].
local seed = (crypto and crypto.random_token) and crypto.random_token(20)
  or tostring(math.random(1, 1e9)) .. tostring(os.time())
-- Letters and digits only: it is used as a gsub pattern.
local EMPTY = "sgwEmptyArray" .. seed

function M.array(t)
  if t == nil or next(t) == nil then return EMPTY end
  return t
end

-- A shape: keys (in order), quoted (',"key":' for each), known (set),
-- props (key -> shape), items (shape of array elements), extra (shape of
-- values under keys not named: additionalProperties), variants (shapes of
-- which the one naming most of an object's keys is used: oneOf/anyOf).
-- shape(keys, fields) makes one; fields may carry props, items, extra,
-- variants. keys are strings, each named once (a repeat is dropped): the C
-- encoder counts an object's named keys to know whether it has others.
function M.shape(keys, fields)
  local s = fields or {}
  s.keys, s.quoted, s.known, s.props = {}, {}, {}, s.props or {}
  for _, k in ipairs(keys or {}) do
    if not s.known[k] then
      s.keys[#s.keys + 1] = k
      s.quoted[#s.keys] = "," .. cjson.encode(k) .. ":"
      s.known[k] = true
    end
  end
  return s
end

local encode_scalar, concat, sort, mtype = cjson.encode, table.concat, table.sort, math.type
local find = string.find
local NULL = cjson.null
-- What cjson escapes in a string, but for the slash.
local NEEDS_ESCAPE = '[%z\1-\31"\\\127]'
local MAX_DEPTH = 1000

local HUGE = math.huge

-- Integers cjson would spell the same way (it prints numbers with %.14g).
-- cjson's refusal of infinities and NaN is raised here, so that its message
-- comes without a position, like the encoder's other refusals.
local function number(v)
  if mtype(v) == "integer" and v > -1e14 and v < 1e14 then return tostring(v) end
  if v ~= v or v == HUGE or v == -HUGE then error("Cannot serialise number: must not be NaN or Inf", 0) end
  return encode_scalar(v)
end

-- The variant that names most of t's keys (the first of equals).
local function pick(t, variants)
  local best, best_n = variants[1], -1
  for _, v in ipairs(variants) do
    local n = 0
    for k in next, t do
      if v.known[k] then n = n + 1 end
    end
    if n > best_n then best, best_n = v, n end
  end
  return best
end

-- Keys the shape does not name, as text, sorted with `id` first; `names`
-- maps a number key's text back to the key.
local function id_first(a, b)
  if a == "id" then return b ~= "id" end
  if b == "id" then return false end
  return a < b
end

local encode_value

local function encode_table(t, shape, buf, n, depth)
  if depth > MAX_DEPTH then error("Cannot serialise, excessive nesting (" .. MAX_DEPTH .. ")", 0) end
  if shape and shape.variants then shape = pick(t, shape.variants) end
  local known = shape and shape.known
  -- One pass tells an array (positive integer keys only) from an object and
  -- gathers the keys the shape does not name.
  local count, max, object, extra, names = 0, 0, false, nil, nil
  for k in next, t do
    if not object and mtype(k) == "integer" and k > 0 then
      count = count + 1
      if k > max then max = k end
    else
      object = true
    end
    if not (known and known[k]) then
      local tk = type(k)
      if tk == "number" then
        names = names or {}
        local name = number(k)
        names[name], k = k, name
      elseif tk ~= "string" then
        error("Cannot serialise table: table key must be a number or string", 0)
      end
      extra = extra or {}
      extra[#extra + 1] = k
    end
  end
  if not object and count > 0 then
    if max ~= count then error("Cannot serialise table: excessively sparse array", 0) end
    local items = shape and shape.items
    n = n + 1; buf[n] = "["
    for i = 1, max do
      if i > 1 then n = n + 1; buf[n] = "," end
      n = encode_value(rawget(t, i), items, buf, n, depth)
    end
    n = n + 1; buf[n] = "]"
    return n
  end
  n = n + 1; buf[n] = "{"
  local open = n
  if shape then
    local keys, quoted, props = shape.keys, shape.quoted, shape.props
    for i = 1, #keys do
      local k = keys[i]
      local v = rawget(t, k)
      if v ~= nil then
        n = n + 1; buf[n] = quoted[i]
        n = encode_value(v, props[k], buf, n, depth)
      end
    end
  end
  if extra then
    sort(extra, id_first)
    local eshape = shape and shape.extra
    for _, k in ipairs(extra) do
      n = n + 1; buf[n] = "," .. encode_scalar(k) .. ":"
      n = encode_value(rawget(t, names and names[k] or k), eshape, buf, n, depth)
    end
  end
  -- Every key went in with a leading comma: the first one loses it.
  if n > open then buf[open + 1] = buf[open + 1]:sub(2) end
  n = n + 1; buf[n] = "}"
  return n
end

function encode_value(v, shape, buf, n, depth)
  local tv = type(v)
  if tv == "string" then
    if v == EMPTY then
      n = n + 1; buf[n] = "[]"
    elseif find(v, NEEDS_ESCAPE) then
      n = n + 1; buf[n] = encode_scalar(v)
    else
      buf[n + 1], buf[n + 2], buf[n + 3] = '"', v, '"'
      n = n + 3
    end
  elseif tv == "table" then
    n = encode_table(v, shape, buf, n, depth + 1)
  elseif tv == "number" then
    n = n + 1; buf[n] = number(v)
  elseif tv == "boolean" then
    n = n + 1; buf[n] = v and "true" or "false"
  elseif v == NULL then
    n = n + 1; buf[n] = "null"
  else
    error("Cannot serialise " .. tv .. ": type not supported", 0)
  end
  return n
end

function M.encode_lua(value, shape)
  local buf = {}
  local s = concat(buf, "", 1, encode_value(value, shape, buf, 0, 0))
  -- Every string in s came from cjson, which writes a slash only as \/ and
  -- a backslash only as the first character of an escape: each \/ found
  -- scanning left to right is an escaped slash, never the end of \\.
  if s:find("\\/", 1, true) then s = s:gsub("\\/", "/") end
  return s
end

local native = jsonc and jsonc.encode

function M.encode(value, shape)
  if native then return native(value, shape, EMPTY) end
  return M.encode_lua(value, shape)
end

-- ------------------------------------------------------------ row views
--
-- A row view says how a database row is shown as a JSON object: `fields`
-- maps each key to the column it shows, or to {column, null = value} (what
-- a NULL shows; json.null when not given), or to a table of such fields (an
-- object below). present(fields, row) makes the object of a row (as
-- db.query gives it) for encode; row_view(shape, fields) makes the view with
-- which a db.read_result result writes rows as JSON itself (res:json, see
-- docs/host-api.md), keys in the order encode writes them with shape: one
-- definition, the same bytes either way.

local function is_object(f) return type(f) == "table" and f[1] == nil end

function M.present(fields, row)
  local out = {}
  for key, f in next, fields do
    if is_object(f) then
      out[key] = M.present(f, row)
    elseif type(f) == "table" then
      local v = row[f[1]]
      if v == nil then v = f.null end
      out[key] = v == nil and NULL or v
    else
      local v = row[f]
      out[key] = v == nil and NULL or v
    end
  end
  return out
end

-- The keys of fields in encode's order with shape.
local function ordered_keys(shape, fields)
  local keys, named = {}, {}
  for _, k in ipairs(shape and shape.keys or {}) do
    if fields[k] ~= nil then keys[#keys + 1], named[k] = k, true end
  end
  local rest = {}
  for k in next, fields do
    if not named[k] then rest[#rest + 1] = k end
  end
  sort(rest, id_first)
  for _, k in ipairs(rest) do keys[#keys + 1] = k end
  return keys
end

function M.row_view(shape, fields)
  local view, literal = {}, ""
  local function object(oshape, ofields)
    literal = literal .. "{"
    for i, key in ipairs(ordered_keys(oshape, ofields)) do
      literal = literal .. (i > 1 and "," or "") .. M.encode(key) .. ":"
      local f = ofields[key]
      if is_object(f) then
        object(oshape and oshape.props[key], f)
      else
        local column, null = f, NULL
        if type(f) == "table" then column, null = f[1], f.null == nil and NULL or f.null end
        view[#view + 1], view[#view + 2], view[#view + 3] = literal, column, M.encode(null)
        literal = ""
      end
    end
    literal = literal .. "}"
  end
  object(shape, fields)
  view[#view + 1] = literal
  return view
end

-- cjson reads 1e999999 as infinity, which nothing downstream can encode or
-- store again: such a number is refused like any other malformed input.
local function finite(v)
  local t = type(v)
  if t == "number" then return v == v and v ~= HUGE and v ~= -HUGE end
  if t == "table" then
    for _, x in pairs(v) do
      if not finite(x) then return false end
    end
  end
  return true
end

-- Returns value, or nil and a message. Refuses what is not a JSON text.
function M.decode(text)
  if type(text) ~= "string" then return nil, "not a string" end
  local value, err = safe.decode(text)
  if value == nil and err then return nil, err end
  if not finite(value) then return nil, "a number is too large to represent" end
  return value
end

function M.is_array(t)
  if type(t) ~= "table" then return false end
  local n = #t
  for k in pairs(t) do
    if type(k) ~= "number" or k < 1 or k > n or k % 1 ~= 0 then return false end
  end
  return true
end

return M

-- JSON for handlers: lua-cjson with the settings every endpoint shares, plus
-- the one thing cjson 2.1 cannot say by itself: an empty array.
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
local EMPTY_QUOTED = '"' .. EMPTY .. '"'

function M.array(t)
  if t == nil or next(t) == nil then return EMPTY end
  return t
end

function M.encode(value)
  local s = cjson.encode(value)
  if s:find(EMPTY, 1, true) then
    s = s:gsub(EMPTY_QUOTED, "[]")
  end
  return s
end

local HUGE = math.huge

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

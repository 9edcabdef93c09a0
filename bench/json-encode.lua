-- Encode time of a Post list page of 100 posts (each with two targets):
-- plain cjson against lib/json.lua with the Post list shape from the OpenAPI
-- document, in Lua and in C (the host's jsonc.encode, host/json.c, loaded
-- from build/jsonc.so when it has been built). Median of several rounds. Run
-- from the repository root after building:
--   lua5.4 bench/json-encode.lua
package.path = "lib/?.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local have_c, jsonc = pcall(require, "jsonc")
_G.jsonc = have_c and jsonc or nil
_G.asset = function(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("a")
  f:close()
  return text
end
local cjson = require "cjson"
local json = require "json"
local shapes = require "json_shapes"

local function target(i, j)
  return {
    id = "tgt_" .. i .. "_" .. j, socialAccountId = "acc_0123456789abcdef", platform = "facebook",
    status = "published", platformPostId = "1234567890_" .. i, attempts = 1,
    permalinkUrl = "https://www.facebook.com/1234567890/posts/" .. i,
    nextAttemptAt = cjson.null, publishedAt = "2026-11-21T10:00:00.000Z", error = cjson.null,
  }
end

local page = { data = {}, nextCursor = "eyJjIjoiMjAyNi0xMS0yMVQxMDowMDowMC4wMDBaIiwiaSI6InBvc3RfMSJ9" }
for i = 1, 100 do
  page.data[i] = {
    id = "post_" .. i, status = "published",
    content = { type = "link", message = "Hello from the gateway, post " .. i, link = "https://example.com/a/b/" .. i },
    media = json.array({}), publishing = { mode = "immediate" }, externalReference = "ext-" .. i,
    createdAt = "2026-11-21T10:00:00.000Z", updatedAt = "2026-11-21T10:00:01.000Z",
    targets = { target(i, 1), target(i, 2) },
  }
end

local shape = shapes.response({ method = "GET", path = "/api/v1/posts" }, 200)
assert(shape, "no shape for GET /api/v1/posts 200")

local function median(fn)
  local times = {}
  for r = 1, 15 do
    local t0 = os.clock()
    for _ = 1, 20 do fn() end
    times[r] = (os.clock() - t0) / 20
  end
  table.sort(times)
  return times[8] * 1e6
end

local plain = median(function() return cjson.encode(page) end)
local ordered = median(function() return json.encode_lua(page, shape) end)
local line = string.format("100-post page, %d bytes: cjson %.0f us, ordered in Lua %.0f us (%.1fx)",
  #json.encode_lua(page, shape), plain, ordered, ordered / plain)
if have_c then
  assert(json.encode(page, shape) == json.encode_lua(page, shape), "the C and Lua encoders differ")
  local c = median(function() return json.encode(page, shape) end)
  line = line .. string.format(", ordered in C %.0f us (%.1fx)", c, c / plain)
else
  line = line .. " (build/jsonc.so not built: no C figure)"
end
print(line)

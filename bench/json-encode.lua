-- Encode time of a Post list page of 100 posts (each with two targets) and
-- of a comment listing's page of 50: plain cjson against lib/json.lua with
-- the page's shape from the OpenAPI document, in Lua and in C (the host's
-- jsonc.encode, host/json.c, loaded from build/jsonc.so when it has been
-- built). Median of several rounds. Run from the repository root after
-- building:
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

local comments = {}
for i = 1, 50 do
  comments[i] = {
    id = ("cmt_%020d"):format(i), platform = "facebook", socialAccountId = "acc_0123456789abcdef",
    postTargetId = "tgt_0123456789abcdef", platformCommentId = "1234567890_" .. i, platformPostId = "1234567890_55",
    parentPlatformCommentId = cjson.null, text = "A comment of a few words, number " .. i,
    author = { platformId = "9876543210" .. i, name = "Someone " .. i }, isFromAccount = false, isHidden = false,
    isDeleted = false, likeCount = i, createdAt = "2026-11-21T10:00:00.000Z", updatedAt = "2026-11-21T10:00:01.000Z",
  }
end
local comment_page = { data = json.array(comments), nextCursor = page.nextCursor }

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

local function measure(name, value, path)
  local shape = shapes.response({ method = "GET", path = path }, 200)
  assert(shape, "no shape for GET " .. path .. " 200")
  local plain = median(function() return cjson.encode(value) end)
  local ordered = median(function() return json.encode_lua(value, shape) end)
  local line = string.format("%s, %d bytes: cjson %.0f us, ordered in Lua %.0f us (%.1fx)",
    name, #json.encode_lua(value, shape), plain, ordered, ordered / plain)
  if have_c then
    assert(json.encode(value, shape) == json.encode_lua(value, shape), "the C and Lua encoders differ")
    local c = median(function() return json.encode(value, shape) end)
    line = line .. string.format(", ordered in C %.0f us (%.2fx)", c, c / plain)
  else
    line = line .. " (build/jsonc.so not built: no C figure)"
  end
  print(line)
end

measure("100-post page", page, "/api/v1/posts")
measure("50-comment page", comment_page, "/api/v1/posts/{postId}/comments")

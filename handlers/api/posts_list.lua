-- GET /api/v1/posts?status=&cursor=&limit= : newest first, keyset-paged.
local problem = require "problem"
local posts = require "posts"
local cursor = require "cursor"
local json = require "json"

local STATUSES = { scheduled = true, queued = true, publishing = true, published = true,
  partially_published = true, failed = true, cancelled = true }

return function(req, ctx)
  local q = req.query
  local limit, lerr = cursor.limit(q.limit, 25, 100)
  if not limit then problem.raise(400, "invalid_parameter", lerr) end
  if q.status and not STATUSES[q.status] then
    problem.raise(400, "invalid_parameter", "status must be one of scheduled, queued, publishing, published, partially_published, failed, cancelled.")
  end
  local after
  if q.cursor then
    after = cursor.decode(q.cursor, { t = "time", id = "id" })
    if not after then problem.raise(400, "invalid_cursor", "The cursor is not one this API gave out.") end
  end
  local ids, next_position = posts.page(ctx.client, q.status, after, limit)
  local data = {}
  for i, id in ipairs(ids) do
    local post, query = posts.read(ctx.client, id)
    data[i] = posts.present(post, posts.targets_of(id, query))
  end
  return 200, { data = json.array(data), nextCursor = next_position and cursor.encode(next_position) or json.null }
end

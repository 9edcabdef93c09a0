-- GET /api/v1/posts/{postId}/comments?cursor=&limit= : every comment of every
-- target of the post, oldest first, keyset-paged.
local problem = require "problem"
local comments = require "comments"
local cursor = require "cursor"
local json = require "json"

return function(req, ctx)
  local q = req.query
  local limit, lerr = cursor.limit(q.limit, 25, 100)
  if not limit then problem.raise(400, "invalid_parameter", lerr) end
  local after
  if q.cursor then
    after = cursor.decode(q.cursor, { t = "time", id = "id" })
    if not after then problem.raise(400, "invalid_cursor", "The cursor is not one this API gave out.") end
  end
  local page, next_position = comments.list(ctx.client, req.params.postId, after, limit)
  if not page then problem.raise(404, "not_found", "No post with this id.") end
  return 200, { data = page, nextCursor = next_position and cursor.encode(next_position) or json.null }
end

-- GET /api/v1/posts?status=&cursor=&limit= : newest first, keyset-paged.
local problem = require "problem"
local posts = require "posts"
local cursor = require "cursor"
local json = require "json"
local sqltime = require "sqltime"

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
  local rows = assert(db.query("SELECT id, " .. sqltime.exact("created_at", "position_t") .. [[ FROM posts
      WHERE company_id = $1 AND environment = $2 AND ($3::text IS NULL OR status = $3)
        AND ($4::timestamptz IS NULL OR (created_at, id) < ($4::timestamptz, $5))
      ORDER BY created_at DESC, id DESC LIMIT $6]],
    ctx.client.company_id, ctx.client.environment, q.status, after and after.t, after and after.id, limit + 1))
  local data = {}
  for i = 1, math.min(#rows, limit) do
    data[i] = posts.present(posts.find(ctx.client, rows[i].id))
  end
  local next_cursor = json.null
  if #rows > limit then next_cursor = cursor.encode({ t = rows[limit].position_t, id = rows[limit].id }) end
  return 200, { data = json.array(data), nextCursor = next_cursor }
end

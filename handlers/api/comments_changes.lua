-- GET /api/v1/comments/changes?cursor=&limit= : the change feed of the
-- company's comments in this environment (lib/comment_changes.lua). The
-- next cursor is never null: following it later gives the later changes.
local problem = require "problem"
local cursor = require "cursor"
local comment_changes = require "comment_changes"
local json = require "json"

return function(req, ctx)
  local q = req.query
  local limit, lerr = cursor.limit(q.limit, 25, 100)
  if not limit then
    problem.raise(400, "invalid_parameter", lerr, { errors = { { field = "limit", code = "invalid_parameter", message = lerr } } })
  end
  local after = 0
  if q.cursor then
    local position = cursor.decode(q.cursor, { s = "number" })
    after = position and math.tointeger(position.s)
    if not after or after < 0 then problem.raise(400, "invalid_cursor", "The cursor is not one this API gave out.") end
  end
  local rows = comment_changes.page(ctx.client, after, limit)
  local data = {}
  for i, r in ipairs(rows) do data[i] = comment_changes.present(r) end
  if #rows > 0 then after = rows[#rows].sequence end
  return 200, { data = json.array(data), nextCursor = cursor.encode({ s = after }) }
end

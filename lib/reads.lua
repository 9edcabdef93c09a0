-- Lag-tolerant reads. db.read_query goes to the read replica
-- (database.read_url) while it is close enough behind, else to the primary.
-- A row the replica does not have yet may be one the caller has just
-- written (a GET right after its POST), so a miss is asked of the primary,
-- which has the last word.
local M = {}

-- The first row of sql, and the query function that found it, so that what
-- the caller reads next about that row comes from the same server.
function M.one(sql, ...)
  local row = assert(db.read_query(sql, ...))[1]
  if row then return row, db.read_query end
  return assert(db.query(sql, ...))[1], db.query
end

return M

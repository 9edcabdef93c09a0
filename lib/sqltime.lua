-- Timestamps as the API shows them (RFC 3339, UTC, milliseconds, Z), made by
-- PostgreSQL in the query, so no Lua code parses its output.
local M = {}

-- iso("p.created_at", "created_at") -> SQL select expression.
function M.iso(column, alias)
  return "to_char(" .. column .. " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS " .. (alias or column:gsub("^.*%.", ""))
end

-- Exact (microseconds) for cursors.
function M.exact(column, alias)
  return "to_char(" .. column .. " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS " .. alias
end

return M

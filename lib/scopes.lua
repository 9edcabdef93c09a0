-- The scopes an API client may hold, and the parsing every caller shares.
local M = {}

M.all = {
  "accounts:read", "posts:read", "posts:write", "comments:read", "comments:write",
  "operations:read", "uploads:write", "sandbox:write",
}

local known = {}
for _, s in ipairs(M.all) do known[s] = true end

function M.is_known(s) return known[s] == true end

-- "a b  c" -> {"a","b","c"} (order kept, duplicates dropped), or nil and the
-- first unknown scope.
function M.parse(text)
  local list, seen = {}, {}
  for s in tostring(text or ""):gmatch("%S+") do
    if not known[s] then return nil, s end
    if not seen[s] then
      seen[s] = true
      list[#list + 1] = s
    end
  end
  return list
end

-- A space-separated list as stored (array_to_string) -> Lua list.
function M.from_text(text)
  local list = {}
  for s in tostring(text or ""):gmatch("%S+") do list[#list + 1] = s end
  return list
end

function M.set(list)
  local set = {}
  for _, s in ipairs(list) do set[s] = true end
  return set
end

return M

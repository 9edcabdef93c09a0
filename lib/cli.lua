-- Shared by the operator commands (handlers/cli/): flags, and the one-JSON-
-- object answer they all print.
local json = require "json"

local M = {}

-- {"create", "--name", "N", "--x=y"} -> positional list, flags table; or
-- nil and a message. known[name] = "switch" for a flag without a value
-- (flags[name] = "true").
function M.parse(args, known)
  local positional, flags = {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    local name, value = a:match("^%-%-([%w-]+)=(.*)$")
    if not name then name = a:match("^%-%-([%w-]+)$") end
    if name then
      if not known[name] then return nil, "unknown option --" .. name end
      if value == nil and known[name] == "switch" then
        value = "true"
      elseif value == nil then
        value = args[i + 1]
        if value == nil then return nil, "--" .. name .. " needs a value" end
        i = i + 1
      end
      flags[name] = value
    else
      positional[#positional + 1] = a
    end
    i = i + 1
  end
  return positional, flags
end

-- The keys of every command's answer in the order CONTRACT section 9 lists
-- them, merged into one list (any key not listed comes after, sorted).
local ANSWER = json.shape({ "companyId", "clientId", "accountId", "userId", "apiKey", "previousKeyExpiresAt",
  "keyPrefix", "clientSecret", "webhookUrl", "webhookSecret", "revokedAt", "subscriptions" })

function M.ok(value) return 0, json.encode(value, ANSWER) end

function M.fail(message, code) return code or 1, nil, message end

-- The database is required by every operator command.
function M.need_database()
  local rows, err = db.query("SELECT 1 AS one")
  if not rows then
    return nil, "cannot reach the database (" .. tostring(err) .. "); check database.url"
  end
  return true
end

return M

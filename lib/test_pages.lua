-- Sandbox test pages: accounts of the test environment that need no platform
-- account; posts to them go to the simulator. Made by the sandbox API
-- (POST /api/v1/sandbox/accounts) and by the workspace's "Add test page".
local accounts = require "accounts"

local M = {}

M.PLATFORMS = { facebook = true, instagram = true }

-- Ids shaped like the platform's own (Instagram's are 17 digits, Pages' 15),
-- so that nothing downstream needs a special case for the sandbox.
local function digits(n)
  local t = { tostring(math.random(1, 9)) }
  for i = 2, n do t[i] = tostring(math.random(0, 9)) end
  return table.concat(t)
end

-- Returns the new account's id, or nil and why.
function M.create(company_id, platform, name)
  local platform_id = platform == "instagram" and digits(17) or digits(15)
  return accounts.add({
    company_id = company_id, environment = "test", platform = platform,
    platform_account_id = platform_id, name = name,
    username = platform == "instagram" and ("sandbox_" .. platform_id:sub(-6)) or nil,
  })
end

return M

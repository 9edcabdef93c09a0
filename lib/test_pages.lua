-- Sandbox test pages: accounts of the test environment that need no platform
-- account; posts to them go to the simulator. Made by the sandbox API
-- (POST /api/v1/sandbox/accounts) and by the workspace's "Add test page".
local accounts = require "accounts"

local M = {}

-- What create gives back, as its second value, when the company already has
-- as many test pages as sandbox.max_test_pages allows.
M.LIMIT_REACHED = "limit_reached"

M.PLATFORMS = { facebook = true, instagram = true }

-- Ids shaped like the platform's own (Instagram's are 17 digits, Pages' 15),
-- so that nothing downstream needs a special case for the sandbox.
local function digits(n)
  local t = { tostring(math.random(1, 9)) }
  for i = 2, n do t[i] = tostring(math.random(0, 9)) end
  return table.concat(t)
end

-- Returns the new account's id, or nil and why (M.LIMIT_REACHED and the
-- limit when the company has as many connected test pages as it may: each is
-- a row that its listings and the workspace read, so they are not unbounded).
function M.create(company_id, platform, name)
  local platform_id = platform == "instagram" and digits(17) or digits(15)
  local limit = config.get("sandbox.max_test_pages")
  return db.transaction(function()
    if limit > 0 then
      -- One creation at a time per company, so that two at once cannot both
      -- take the last place.
      assert(db.query("SELECT pg_advisory_xact_lock(hashtextextended('sgw.test_pages:' || $1, 0))", company_id))
      local rows = assert(db.query([[SELECT count(*)::int AS n FROM social_accounts
          WHERE company_id = $1 AND environment = 'test' AND status <> 'disconnected']], company_id))
      if rows[1].n >= limit then return nil, M.LIMIT_REACHED, limit end
    end
    return accounts.add({
      company_id = company_id, environment = "test", platform = platform,
      platform_account_id = platform_id, name = name,
      username = platform == "instagram" and ("sandbox_" .. platform_id:sub(-6)) or nil,
    })
  end)
end

--- The refusal's words, for every place that makes test pages.
function M.limit_message(limit)
  return ("Your company already has %d test pages, as many as it may have; disconnect one it no longer uses "
    .. "(Connections in the workspace, Sandbox tab) before adding another."):format(limit)
end

return M

-- Which Graph API version sgw is pinned to (meta.graph_base_url) and how long
-- Meta keeps it: a gauge on /metrics, and a warning in the log when it ends
-- within WARN_DAYS, has ended, or is not one lib/graph_versions.lua knows.
-- Calls to an ended version silently fall through to an older behaviour, or
-- fail: the operator must move meta.graph_base_url and meta.oauth_dialog_url.
local versions = require "graph_versions"
local graph = require "platforms.graph"

local M = {}

local WARN_DAYS = 90

-- "2028-07-29" -> Unix seconds of the end of that day (UTC).
local function end_of(date)
  return graph.parse_time(date .. "T00:00:00Z") + 86400
end

-- {version, ends ("YYYY-MM-DD", "" when not announced, nil when unknown), days_left}
function M.configured(now)
  local version = (config.get("meta.graph_base_url") or ""):match("/(v%d+%.%d+)/*$")
  local ends = version and versions[version]
  if ends == nil then return { version = version or "unknown" } end
  if not ends then return { version = version, ends = "" } end
  return { version = version, ends = ends, days_left = (end_of(ends) - (now or clock.now())) / 86400 }
end

-- Sets the gauge and warns when needed; once per start and reload.
function M.announce()
  local v = M.configured()
  metrics.set("sgw_meta_graph_version_info", { version = v.version, ends = v.ends or "unknown" }, 1)
  local fields = { version = v.version, ends = v.ends, days_left = v.days_left and math.floor(v.days_left) }
  if v.ends == nil then
    log.warn("meta_graph_version_unknown", fields)
  elseif v.days_left and v.days_left <= 0 then
    log.warn("meta_graph_version_ended", fields)
  elseif v.days_left and v.days_left <= WARN_DAYS then
    log.warn("meta_graph_version_ending", fields)
  end
  return v
end

return M

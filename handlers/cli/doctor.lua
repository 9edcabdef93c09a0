-- sgw doctor [--json]: checks the configuration as loaded (defaults, the
-- installed file, --config files, --set) before a deploy. One line per check,
-- ok / warn / fail and what to do; exit 1 when any check fails. It prints
-- which setting is wrong, never a secret's value (nor a URL's password).
local cli = require "cli"
local json = require "json"
local secrets = require "secrets"
local graph_version = require "meta_graph_version"

local WARN_DAYS = 90

local function setting(key)
  local v = config.get(key)
  return v ~= nil and v ~= "" and v or nil
end

local function host_of(url)
  local authority = url:match("^%a[%w+.-]*://([^/?#]*)") or url
  authority = authority:gsub("^.*@", "")
  return authority:match("^%[([^%]]*)%]") or authority:match("^([^:]*)")
end

local function loopback(host)
  return host == "localhost" or host == "::1" or (host or ""):match("^127%.%d+%.%d+%.%d+$") ~= nil
end

-- A URL Meta or the public reaches: https; http only on loopback (a local
-- test), as a warning.
local function https_url(key)
  local url = setting(key)
  if not url then return "fail", key .. " is empty: set it to an https:// URL" end
  if url:match("^https://[^/]") then return "ok", key .. " is https" end
  if url:match("^http://[^/]") and loopback(host_of(url)) then
    return "warn", key .. " is http on loopback: fine for a local test, Meta needs https in production"
  end
  return "fail", key .. " must be https:// (it is " .. (url:match("^(%a[%w+.-]*):") or "not a URL") .. ")"
end

local function check_database(console)
  if not setting("database.url") then return "fail", "database.url is empty: set it (postgresql://user@host/db)" end
  local rows, err = db.query("SELECT version FROM schema_migrations")
  if not rows then
    local up = db.query("SELECT 1 AS one")
    if not up then
      return "fail", "cannot reach the database (" .. tostring(err):gsub("[\r\n].*", "")
        .. "): check database.url and that PostgreSQL accepts this user"
    end
    return "fail", "reachable but not migrated: run sgw migrate"
  end
  local applied, pending = {}, {}
  for _, r in ipairs(rows) do applied[r.version] = true end
  local shipped = {}
  for _, file in ipairs(console.migrations or {}) do
    local version = file:match("^(%d+)_")
    shipped[version] = true
    if not applied[version] then pending[#pending + 1] = file end
  end
  table.sort(pending)
  if #pending > 0 then
    return "fail", #pending .. " migration(s) not applied (" .. pending[1] .. (#pending > 1 and ", ..." or "")
      .. "): run sgw migrate"
  end
  for version in pairs(applied) do
    if not shipped[version] then
      return "warn", "the database has migration " .. version .. ", which this sgw does not ship: is it older than the schema?"
    end
  end
  return "ok", "reachable, all " .. #(console.migrations or {}) .. " migrations applied"
end

-- A cluster as the node answering sees it: every slot assigned and served.
local function check_redis_cluster()
  local info, err = redis.call("CLUSTER", "INFO")
  if info == nil then
    return "fail", "cannot reach the Redis Cluster (" .. tostring(err):gsub("[\r\n].*", "")
      .. "): check redis.cluster_urls and that its nodes run in cluster mode"
  end
  local assigned = tonumber(info:match("cluster_slots_assigned:(%d+)")) or 0
  if assigned < 16384 then
    return "fail", "the Redis Cluster covers " .. assigned .. " of 16384 slots: keys of the others cannot be stored; assign them (redis-cli --cluster fix)"
  end
  local state = info:match("cluster_state:(%w+)") or "unknown"
  if state ~= "ok" then
    return "fail", "the Redis Cluster's state is " .. state .. " (" .. (info:match("cluster_slots_fail:(%d+)") or "?")
      .. " slots failing): a master is down without a replica to take over"
  end
  return "ok", "Redis Cluster reachable, every slot covered (" .. (info:match("cluster_size:(%d+)") or "?") .. " masters)"
end

local function check_redis()
  if setting("redis.cluster_urls") then return check_redis_cluster() end
  if not setting("redis.url") then
    return "warn", "redis.url is empty: rate limits fail open and /readyz says degraded; set redis://host:port"
  end
  local pong, err = redis.call("PING")
  if pong == nil then
    return "fail", "cannot reach Redis (" .. tostring(err):gsub("[\r\n].*", "") .. "): check redis.url and that Redis runs"
  end
  local info = redis.call("INFO", "server")
  local version = type(info) == "string" and info:match("redis_version:([%d.]+)") or "unknown"
  return "ok", "reachable (Redis " .. version .. ")"
end

local function check_key()
  if not setting("crypto.encryption_key") then return "fail", "crypto.encryption_key is empty: " .. secrets.KEY_HELP end
  if not secrets.key() then return "fail", "crypto.encryption_key does not decode to 32 bytes: " .. secrets.KEY_HELP end
  return "ok", "crypto.encryption_key is 32 bytes"
end

local function check_meta()
  local missing = {}
  for _, key in ipairs { "meta.app_id", "meta.app_secret", "meta.webhook_verify_token" } do
    if not setting(key) then missing[#missing + 1] = key end
  end
  if #missing > 0 then
    return "fail", table.concat(missing, ", ") .. " empty: set them from the Meta app's dashboard (secrets in a 0600 file)"
  end
  for _, key in ipairs { "meta.graph_base_url", "meta.oauth_dialog_url" } do
    local status, message = https_url(key)
    if status ~= "ok" then return status, message end
  end
  return "ok", "meta.app_id, meta.app_secret, meta.webhook_verify_token set; Graph and dialog URLs https"
end

local function check_graph_version()
  local v = graph_version.configured()
  local move = ": move meta.graph_base_url and meta.oauth_dialog_url to a newer version"
  if v.ends == nil then return "warn", "Graph API version " .. v.version .. " is not one this sgw knows" .. move end
  if v.ends == "" then return "ok", v.version .. ", Meta's newest: no end date yet" end
  if v.days_left <= 0 then return "fail", v.version .. " ended on " .. v.ends .. move end
  if v.days_left <= WARN_DAYS then
    return "warn", v.version .. " ends on " .. v.ends .. " (in " .. math.floor(v.days_left) .. " days)" .. move
  end
  return "ok", v.version .. " works until " .. v.ends
end

local function check_admin()
  local host = host_of(setting("admin.listen") or "")
  if loopback(host) then return "ok", "admin.listen is on loopback" end
  if not setting("admin.token") then
    return "fail", "admin.listen is not on loopback and admin.token is empty: set a token (it can reload handlers)"
  end
  return "ok", "admin.listen is reachable from the network, behind admin.token"
end

-- A job's outbound call must end before its lease can run out (docs/host-api.md,
-- Jobs): the lease must cover a confirmation period (a third of it), a
-- second's grace, and the longest call a job makes.
local function check_job_lease()
  local lease = config.get("jobs.lease_seconds")
  local longest = math.max(config.get("meta.request_timeout_seconds"), require("webhooks").TIMEOUT_SECONDS)
  local needed = 1.5 * (longest + 1)
  if lease < needed then
    return "warn", ("jobs.lease_seconds is %g, under 1.5 x (the longest call a job makes, %g s, + 1 s): while the database "
      .. "does not answer, a job's calls stop early; set it to %g or more"):format(lease, longest, needed)
  end
  return "ok", ("jobs.lease_seconds (%g) outlasts a job's longest call (%g s) and its confirmation"):format(lease, longest)
end

-- Served as https, sgw is behind a TLS proxy (it speaks plain HTTP): without
-- http.trusted_proxies every request seems to come from the proxy, and one
-- address's limits (anonymous requests, workspace sign-ins) are everyone's.
local function check_client_address()
  local public = setting("public_base_url") or ""
  if not public:match("^https://") then return "ok", "public_base_url is not https: no TLS proxy expected in front" end
  if setting("http.trusted_proxies") then return "ok", "http.trusted_proxies names the proxies that may name the client" end
  return "warn", "public_base_url is https, so a TLS proxy is in front, and http.trusted_proxies is empty: every "
    .. "client seems to be the proxy and shares its per-address limits (anonymous requests, sign-in attempts, "
    .. "request bodies in flight); set it to the proxy's address"
end

local CHECKS = {
  { "config", function() return "ok", "settings loaded; files holding secrets are readable by their owner only" end },
  { "database", check_database },
  { "redis", check_redis },
  { "encryption-key", check_key },
  { "public-url", function() return https_url("public_base_url") end },
  { "meta", check_meta },
  { "graph-version", check_graph_version },
  { "admin", check_admin },
  { "job-lease", check_job_lease },
  { "client-address", check_client_address },
}

local function run(flags, console)
  local results, failed, lines = {}, false, {}
  for _, c in ipairs(CHECKS) do
    local ok, status, message = pcall(c[2], console)
    if not ok then status, message = "fail", "the check itself failed: " .. tostring(status) end
    failed = failed or status == "fail"
    results[#results + 1] = { name = c[1], status = status, message = message }
    lines[#lines + 1] = ("%-4s  %-14s  %s"):format(status, c[1], message)
  end
  local out = flags.json and json.encode({ ok = not failed, checks = results }) or table.concat(lines, "\n")
  return failed and 1 or 0, out
end

return cli.command {
  name = "doctor", summary = "Checks a configuration before a deploy, one line per check (ok, warn or fail) with what to fix.",
  about = "Checks the configuration as sgw loads it (defaults, the installed sgw.conf, --config, --set):\n"
    .. "the database is reachable and migrated, Redis answers (a Redis Cluster covers every slot),\n"
    .. "crypto.encryption_key is 32 bytes, "
    .. "public_base_url is https, the Meta app settings are filled, the Graph API version is not near\n"
    .. "its end, and the admin listener is on loopback or behind admin.token. One line per check:\n"
    .. "ok, warn or fail and what to fix; exit 1 when a check fails, 0 otherwise. Prints no secret.",
  flags = { { "json", nil, "print one JSON object {\"ok\", \"checks\": [{\"name\", \"status\", \"message\"}]}" } },
  run = run,
}

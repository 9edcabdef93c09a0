-- sgw meta subscribe-app [--allow-http]  ->  {"subscriptions":[...]}
-- The app-level half of Meta's webhooks (the Page half is made when a Page
-- is connected, lib/meta_subscriptions.lua): the page object's feed and the
-- instagram object's comments, both to public_base_url + /webhooks/meta,
-- with the app token {app-id}|{app-secret}. Meta calls that URL at once with
-- the hub.challenge handshake, so sgw must be reachable there. Prints what
-- Meta then lists (GET /{app-id}/subscriptions).
local cli = require "cli"
local graph = require "platforms.graph"
local subscriptions = require "meta_subscriptions"

local function setting(key)
  local v = config.get(key)
  return v ~= nil and v ~= "" and v or nil
end

local function subscribe_app(flags)
  if flags["allow-http"] and flags["allow-http"] ~= "true" then
    return cli.fail("--allow-http takes no value but true", 2)
  end
  local app_id, secret = setting("meta.app_id"), setting("meta.app_secret")
  local verify_token = setting("meta.webhook_verify_token")
  local base = (setting("public_base_url") or ""):gsub("/+$", "")
  if not app_id or not secret then return cli.fail("set meta.app_id and meta.app_secret (the Meta app's id and secret)") end
  if not verify_token then return cli.fail("set meta.webhook_verify_token (what Meta must send when it checks the callback)") end
  local https = base:match("^https://[^/]") ~= nil
  local http_ok = flags["allow-http"] and base:match("^http://[^/]") ~= nil
  if not https and not http_ok then
    return cli.fail("set public_base_url to this deployment's public https:// address (Meta calls "
      .. "public_base_url/webhooks/meta); it is '" .. base .. "'")
  end

  local app_token = app_id .. "|" .. secret
  for _, s in ipairs(subscriptions.APP_SUBSCRIPTIONS) do
    local ok, err = graph.call("POST", app_id .. "/subscriptions", {
      object = s.object, fields = s.fields, callback_url = base .. "/webhooks/meta",
      verify_token = verify_token, include_values = "true",
    }, app_token)
    if not ok then
      return cli.fail("Meta refused the " .. s.object .. " subscription: " .. tostring(err.message)
        .. (err.platform_code and (" (code " .. err.platform_code .. ")") or ""))
    end
  end
  local listed, err = graph.call("GET", app_id .. "/subscriptions", {}, app_token)
  if not listed then return cli.fail("could not list the app's subscriptions: " .. tostring(err.message)) end
  return cli.ok({ subscriptions = type(listed.data) == "table" and listed.data or {} })
end

return cli.command {
  name = "meta", summary = "The Meta app's side of the set-up.",
  subcommands = {
    { name = "subscribe-app", summary = "subscribe the app to the page feed and Instagram comments webhooks",
      about = "Subscribes the Meta app (meta.app_id, meta.app_secret) to the page object's feed and the\n"
        .. "instagram object's comments at public_base_url/webhooks/meta, with meta.webhook_verify_token.\n"
        .. "Meta calls that URL at once, so sgw must be reachable there. Prints what Meta then lists.",
      flags = { { "allow-http", nil, "accept an http:// public_base_url (tests against a fake; Meta needs https)" } },
      run = subscribe_app },
  },
}

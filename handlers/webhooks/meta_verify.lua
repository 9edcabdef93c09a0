-- GET /webhooks/meta: Meta's subscription handshake. The challenge goes back
-- as plain text only to a caller that knows meta.webhook_verify_token.
local problem = require "problem"

-- Equal length first, so that comparing takes the same time wherever they differ.
local function same_secret(given, expected)
  return crypto.constant_eq(crypto.sha256(given), crypto.sha256(expected))
end

return function(req)
  local q = req.query
  local expected = config.get("meta.webhook_verify_token") or ""
  local token, challenge = q["hub.verify_token"], q["hub.challenge"]
  -- An empty configured token never matches: an unconfigured gateway must
  -- not let anyone subscribe it.
  if expected == "" or q["hub.mode"] ~= "subscribe" or type(token) ~= "string"
    or not same_secret(token, expected) or type(challenge) ~= "string" or challenge == "" or #challenge > 256 then
    return problem.response(req, 403, "forbidden", "The verification request does not match this endpoint's verify token.",
      { title = "Forbidden" })
  end
  return 200, challenge, { ["Content-Type"] = "text/plain; charset=utf-8" }
end

-- POST /api/v1/comments/{commentId}/hide: hides a comment from everyone but
-- its author and the account, as an operation (lib/moderation.lua).
local moderation = require "moderation"

return function(req, ctx)
  return moderation.request(req, ctx, "hide")
end

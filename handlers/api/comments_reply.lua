-- POST /api/v1/comments/{commentId}/replies {"message"}: a reply from the
-- account, as an operation (lib/moderation.lua).
local moderation = require "moderation"

return function(req, ctx)
  return moderation.request(req, ctx, "reply")
end

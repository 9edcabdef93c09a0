-- POST /api/v1/comments/{commentId}/unhide: shows a hidden comment again, as
-- an operation (lib/moderation.lua).
local moderation = require "moderation"

return function(req, ctx)
  return moderation.request(req, ctx, "unhide")
end
